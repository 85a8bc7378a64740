/* ring.c — pipelined ring collectives (see ring.h for the algorithm).
 *
 * One engine runs every collective. A collective is a "plan": which
 * sub-chunks this rank sends and receives, in order, and what it does with
 * what it receives (add or copy). The engine keeps two cursors, the next
 * send and the next receive, and loops: send whatever is ready and fits,
 * take one message in, repeat; only when neither moves does it wait — on
 * its shared-memory doorbell, on the ZeroMQ inbox, or both. It never
 * blocks on a send while a receive could make progress, so full queues
 * cannot deadlock the ring.
 *
 * Two rules keep the in-place buffer consistent:
 *  - sub-chunk j of step t is sent only after sub-chunk j of step t-1 has
 *    been received (its content is that receive's result);
 *  - sub-chunk j of step t may only be received into the buffer once the
 *    send that last read the same bytes, step t+1-N, is finished — for a
 *    zero-copy ZeroMQ send, once libzmq has called the free callback.
 *    libzmq releases the frames of one connection in order, so one counter
 *    of released frames answers "is send i done". */
#include "config.h"

#include "ring.h"

#include <errno.h>
#include <poll.h>
#include <stdint.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "clock.h"
#include "floatsum.h"
#include "half.h"
#include "partition.h"
#include "shm.h"
#include "status.h"
#include "tcplink.h"
#include "transport.h"
#include "wire.h"
#include "yieldwait.h"

#define RING_TAG 0x52494e47u /* "RING" */
#define RING_DEAD 0xdeadbeefu
#define ZC_MIN_BYTES (32u << 10) /* below this a copy is cheaper than a callback */
/* How long a rank spins before it sleeps (on the doorbell, or in poll).
 * No sched_yield but on a crowded machine (below, with its back-off): on a
 * node where other processes keep the cores busy, each yield hands them a
 * whole time slice (a 4-process ring slowed 20-fold). A ring over ZeroMQ
 * only spins SPIN_RELAX turns (a few us).
 *
 * Rings with shared-memory or raw TCP links adapt (spin_next): twice the
 * turns whenever spinning caught a chunk or nearly did, half whenever the
 * chunk came long after it ran out, between bounds per kind of link, and
 * back to the least while the thread keeps being preempted (contended);
 * under a CPU quota shared memory keeps the short spin (under_quota). On a
 * quiet node the neighbour's chunk arrives while this rank spins, and
 * catching it saves a sleep and a wake-up of tens of microseconds a chunk
 * (on a VM, a halted vCPU's). On a node whose cores are busy (other
 * processes, or the compute threads a reduction overlaps with), a
 * spinning rank takes the core its neighbour needs to send.
 * - shared memory, a turn is a pause and a look at the segment (~25-75
 *   ns): 2 local workers of lenet, each step's 247 KB allreduce after
 *   ~1.8 ms of compute, trained 21,500 img/s at a fixed 200 turns, 27,800
 *   at 2,000 and 31,100-32,300 at 20,000 (1 process x 2 threads: 19,000
 *   in the same quiet minute); with a busy neighbour the fixed 20,000
 *   lost 30% to 200.
 * - raw TCP, a turn is a recvmsg (~1 us): a 2-process 4 KiB allreduce
 *   took ~44 us p50 at 5 turns, and 300 us at 200 turns (50 us at 5) with
 *   20 runnable processes on 2 cores. */
#define SPIN_RELAX 200
#define SPIN_SHM_MIN 200
#define SPIN_SHM_MAX 20000
#define SPIN_TCP_MIN 5
#define SPIN_TCP_MAX 400
/* A raw TCP wait that ended within this long also doubles the spin: a
 * quiet neighbour's 4 KiB chunk comes 10-20 us after the least spin (5
 * turns) ran out, more than twice that spin's time, and the sleep's
 * wake-up then made the wait 40-60 us, 8 times the spin: the spin halved
 * back and a 2-process 4 KiB allreduce stayed at 57 us (p50) in two runs
 * of five, where a spin that catches the chunk takes 17 us. Spinning
 * until a chunk that a sleep would not have caught any sooner costs no
 * time. Only where the machine is not crowded (tcp_wake; crowded below):
 * bench_allreduce's 4 ranks on 2 cores (raw TCP, each its own "host")
 * had waits that short too, and their longer spins held the cores the
 * neighbours needed: 600-700 us against 150-170. */
#define SPIN_TCP_WAKE 60e-6
/* A crowded machine (more of the ring's ranks on it than this process has
 * cores): waits yield between looks at the left link, raw TCP or shared
 * memory, before they sleep (base/yieldwait.h). The ring alone, 4 ranks on
 * 2 cores, 3 interleaved runs over raw TCP: 4 KiB p50 158-195 -> 71-86
 * us, busbw at 1 MiB 0.97-1.05 -> 1.55-2.02 GB/s, at 4 MiB 0.88-1.07 ->
 * 1.06-1.14; over shared memory: 4 KiB p50 110 -> 12-15 us, busbw at 4-8
 * MiB 2.1-2.3 -> 3.2-3.4; beside two busy loops as without yields. */
#define IDLE_EVERY 0.05

struct rt_ring {
    uint32_t tag;
    char run[RT_RUN_ID_LEN + 1];
    uint64_t gen;
    int rank, world, left, right;
    void *zctx;
    void *inbox;
    void *out;
    rt_shm *own, *right_seg, *left_seg;
    bool left_shm, right_shm;
    rt_tcplink *tx, *rx;     /* raw TCP links (tcplink.h); NULL: shared memory or ZeroMQ */
    struct rt_tcplink_rx in; /* the chunk being received on rx */
    size_t reduced;          /* elements of it already added into place */
    double last_drain;
    double lost_at;          /* > 0: a raw link closed or broke (lost_why) at this time */
    char lost_why[256];
    size_t chunk;
    double stall_timeout;
    rt_ring_idle_fn idle;
    void *idle_arg;
    uint64_t op;

    _Atomic uint64_t released; /* zero-copy frames libzmq is done with */
    uint64_t zc_issued;
    uint64_t *zc_at; /* per send of the current plan: zc_issued after it, 0 if copied */
    uint32_t *carry; /* per receive: flags to forward with the next step */
    size_t cap_send, cap_recv;
    void *scratch;   /* aligned copy of a misaligned received frame */
    size_t scratch_cap;

    rt_wire_writer w;
    rt_wire_msg msg;
    rt_zframes fr;
    rt_wire_droplog drops;
    char who[32];
    bool broken;
    int spin;                /* turns it spins now (adaptive rings, see SPIN_RELAX) */
    long preempted;          /* the comm thread's involuntary context switches so far */
    double busy;             /* moving average of "preempted during a collective" */
    bool quota;              /* under a CPU quota below its cores: no long spins */
    bool crowded;            /* more ranks on this machine than this process has cores */
    bool tcp_wake;           /* not crowded: SPIN_TCP_WAKE may apply */
    struct rt_yield_gauge yields; /* crowded waits' yields (base/yieldwait.h) */
    char left_key[RT_KEY_LEN + 1]; /* CURVE: the only key chunks may come from ("": plain) */
};

enum plan_kind { P_RS, P_AG, P_AR, P_BC };

struct plan {
    enum plan_kind kind;
    char *buf;
    size_t n;    /* elements of the whole buffer: the segments are cut from it */
    size_t lo, hi; /* the range reduced ([0, n) but for rt_ring_allreduce_range) */
    size_t elem; /* bytes per element */
    int t0, t1;  /* steps [t0, t1) of the 2N-2 ring steps */
    size_t K;    /* sub-chunks per segment */
    size_t nsend, nrecv;
    int dist;    /* broadcast: (rank - root) mod N */
    uint32_t my_flags, out_flags;
    uint32_t sig;  /* what collective this is (plan_sig): every chunk carries it */
    void (*reduce)(void *dst, const void *src, size_t count);
};

static void check(const rt_ring *r) { RT_ASSERT(r && r->tag == RING_TAG); }

/* The collective's kind, element size, length and root, hashed (FNV-1a):
 * ranks that run the same collective compute the same. */
static uint32_t plan_sig(const struct plan *p, int root)
{
    uint64_t v[6] = {(uint64_t)p->kind, (uint64_t)p->elem, (uint64_t)p->n, (uint64_t)root,
                     (uint64_t)p->lo, (uint64_t)p->hi};
    const unsigned char *b = (const unsigned char *)v;
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < sizeof v; i++)
        h = (h ^ b[i]) * 16777619u;
    return h;
}

/* The left neighbour's chunk of this very collective number carries
 * another signature: it runs another collective. Members only diverge
 * through a bug; said at once, rather than after the collective timeout
 * (600 s) of ranks that wait for each other, or a sum of mismatched parts. */
static int diverged(const rt_ring *r, uint32_t got, uint32_t want)
{
    return rt_error(RT_ERR_NET, "rank %d is in another collective than rank %d (collective "
                                "%llu: signature %08x where this rank runs %08x): the members' "
                                "steps diverged, a bug in ragtag (please report it with the logs)",
                    r->left, r->rank, (unsigned long long)r->op, got, want);
}

static int mod(int a, int n) { return ((a % n) + n) % n; }

static void add_f32(void *dst, const void *src, size_t count) { rt_f32_add(dst, src, count); }

static void add_f64(void *dst, const void *src, size_t count) { rt_f64_add(dst, src, count); }

static void add_f16(void *dst, const void *src, size_t count) { rt_f16_add(dst, src, count); }

static void add_bf16(void *dst, const void *src, size_t count) { rt_bf16_add(dst, src, count); }

static void zc_released(void *data, void *hint)
{
    (void)data;
    atomic_fetch_add_explicit((_Atomic uint64_t *)hint, 1, memory_order_release);
}

/* ---- set-up ----------------------------------------------------------------------- */

/* Named by the owner's random shm secret, which only the members learn
 * (over authenticated links): nobody else can guess the name to create it
 * first or open it. The run id stays out of it. */
static void shm_name(char *out, size_t cap, const struct rt_member *m, uint64_t gen)
{
    snprintf(out, cap, "/ragtag-%s-g%llu", m->shm, (unsigned long long)gen);
}

/* Raw TCP links where the run's links are not encrypted: --insecure, or
 * token links (the cookie of the set-up authenticates as a token does);
 * CurveZMQ keeps every byte encrypted through ZeroMQ. */
static bool raw_links(const struct rt_ring_config *c)
{
    return !c->zmq_data && (!c->curve || rt_curve_token_links_on(c->curve));
}

/* The links to non-shm neighbours as raw TCP streams, offered over the
 * ZeroMQ link just made (see tcplink.h). */
static int setup_tcp(rt_ring *r, const struct rt_ring_config *c, double timeout_s)
{
    const struct rt_membership *ms = c->members;
    struct rt_tcplink_setup s = {
        .run = r->run, .gen = r->gen, .rank = r->rank, .left = r->left, .right = r->right,
        .self_endpoint = ms->m[r->rank].endpoint, .left_endpoint = ms->m[r->left].endpoint,
        .out = r->right_shm ? NULL : r->out, .inbox = r->left_shm ? NULL : r->inbox,
        .left_key = r->left_key, .timeout_s = timeout_s, .idle = c->setup_idle,
        .arg = c->idle_arg, .drops = &r->drops};
    RT_TRY(rt_tcplink_setup(&s, &r->tx, &r->rx));
    if (r->rx && !(r->scratch = malloc(r->chunk + 64)))
        return rt_error(RT_ERR_NOMEM, "out of memory for the ring's receive buffer");
    r->scratch_cap = r->rx ? r->chunk + 64 : 0;
    return RT_OK;
}

static bool under_quota(void);

/* Whether this machine runs more of the ring's ranks than this process may
 * use cores: ranks on one machine share its kernel's boot id
 * (rt_membership_same_machine). */
static bool crowded(const struct rt_membership *ms, int rank)
{
    int local = 0;
    for (int j = 0; j < ms->n; j++)
        local += rt_membership_same_machine(ms, rank, j);
    return rt_crowded(local, rt_cpu_quota());
}

rt_ring *rt_ring_new(const struct rt_ring_config *c)
{
    RT_ASSERT(c && c->members && c->inbox && *c->inbox && c->run);
    const struct rt_membership *ms = c->members;
    if (ms->n < 1 || ms->n > RT_MAX_WORKERS || c->rank < 0 || c->rank >= ms->n) {
        rt_error(RT_ERR_ARG, "rank %d of a ring of %d", c->rank, ms->n);
        return NULL;
    }
    size_t chunk = c->chunk_bytes ? c->chunk_bytes : RT_RING_DEFAULT_CHUNK;
    if (chunk < 4096 || chunk > RT_RING_MAX_CHUNK || chunk % 64) {
        rt_error(RT_ERR_ARG, "ring chunk of %zu bytes (4 KiB to 4 MiB, a multiple of 64)", chunk);
        return NULL;
    }
    rt_ring *r = calloc(1, sizeof *r);
    if (!r) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    r->tag = RING_TAG;
    r->quota = under_quota();
    r->crowded = crowded(ms, c->rank);
    r->tcp_wake = !r->crowded;
    snprintf(r->run, sizeof r->run, "%s", c->run);
    r->gen = ms->gen;
    r->rank = c->rank;
    r->world = ms->n;
    r->left = mod(c->rank - 1, ms->n);
    r->right = mod(c->rank + 1, ms->n);
    r->zctx = c->zctx;
    r->inbox = *c->inbox;
    *c->inbox = NULL;
    r->chunk = chunk;
    r->stall_timeout = c->stall_timeout;
    r->idle = c->idle;
    r->idle_arg = c->idle_arg;
    atomic_init(&r->released, 0);
    rt_wire_writer_init(&r->w);
    rt_wire_msg_init(&r->msg);
    rt_zframes_init(&r->fr);
    snprintf(r->who, sizeof r->who, "ring rank %d", r->rank);
    rt_wire_droplog_init(&r->drops, r->who);
    if (r->world == 1)
        return r;

    struct rt_shm_wait tmo = {.timeout_s = c->setup_timeout > 0 ? c->setup_timeout : 30.0,
                              .idle = c->setup_idle, .arg = c->idle_arg};
    r->right_shm = c->allow_shm && rt_membership_same_host(ms, r->rank, r->right);
    r->left_shm = c->allow_shm && rt_membership_same_host(ms, r->rank, r->left);
    char name[160];
    if (r->left_shm || r->right_shm) {
        uint32_t expect = r->left == r->right ? 1 : (uint32_t)r->left_shm + (uint32_t)r->right_shm;
        uint32_t slots = c->shm_slots > 0 ? (uint32_t)c->shm_slots : 8;
        shm_name(name, sizeof name, &ms->m[r->rank], r->gen);
        r->own = rt_shm_create(name, r->run, r->gen, r->left_shm ? slots : 0, chunk, expect);
        if (!r->own)
            goto fail;
        if (r->right_shm) {
            shm_name(name, sizeof name, &ms->m[r->right], r->gen);
            if (!(r->right_seg = rt_shm_open(name, r->run, r->gen, &tmo)))
                goto fail;
            if (rt_shm_slot_bytes(r->right_seg) < chunk || rt_shm_slots(r->right_seg) == 0) {
                rt_error(RT_ERR_NET, "the right neighbour's shared memory has no room for "
                                     "chunks of %zu bytes", chunk);
                goto fail;
            }
        }
        if (r->left_shm) {
            if (r->left == r->right && r->right_seg) {
                r->left_seg = r->right_seg;
            } else {
                shm_name(name, sizeof name, &ms->m[r->left], r->gen);
                if (!(r->left_seg = rt_shm_open(name, r->run, r->gen, &tmo)))
                    goto fail;
            }
        }
        if (rt_shm_unlink_when_attached(r->own, &tmo) < 0)
            goto fail;
    }
    if (c->curve && !r->left_shm)
        snprintf(r->left_key, sizeof r->left_key, "%s", ms->m[r->left].key);
    if (!r->right_shm) {
        r->out = rt_zsock_new(r->zctx, ZMQ_PUSH, 0, 0);
        if (!r->out || rt_link_client(c->curve, r->out, ms->m[r->right].key) < 0 ||
            rt_zsock_connect(r->out, ms->m[r->right].endpoint) < 0)
            goto fail;
    }
    if (raw_links(c) && (!r->right_shm || !r->left_shm) && setup_tcp(r, c, tmo.timeout_s) < 0)
        goto fail;
    return r;

fail:
    rt_error_wrap(RT_ERR_NET, "setting up the ring (rank %d of %d)", c->rank, ms->n);
    *c->inbox = r->inbox; /* the caller keeps its bound inbox */
    r->inbox = NULL;
    rt_ring_destroy(&r);
    return NULL;
}

static void wait_released(rt_ring *r, double limit)
{
    double t0 = rt_now();
    while (atomic_load_explicit(&r->released, memory_order_acquire) < r->zc_issued &&
           rt_now() - t0 < limit)
        usleep(100);
}

void rt_ring_destroy(rt_ring **rp)
{
    if (!rp || !*rp)
        return;
    rt_ring *r = *rp;
    check(r);
    rt_wire_droplog_flush(&r->drops);
    if (r->out) {
        /* A rank that finishes its last collective first may still have
         * copied frames queued for a slower neighbour: let them leave. A
         * broken ring drops them instead (zero-copy frames of the failed
         * collective point into the caller's memory: release them now). */
        int linger = r->broken ? 0 : 10000;
        if (zmq_setsockopt(r->out, ZMQ_LINGER, &linger, sizeof linger) != 0)
            fprintf(stderr, "ragtag: [%s] cannot set the linger of the link to rank %d (%s): "
                    "frames still queued for it may be dropped\n", r->who, r->right,
                    zmq_strerror(errno));
    }
    rt_zsock_close(&r->out);
    wait_released(r, 2.0);
    rt_tcplink_destroy(&r->tx);
    rt_tcplink_destroy(&r->rx);
    rt_zsock_close(&r->inbox);
    if (r->left_seg != r->right_seg)
        rt_shm_close(&r->left_seg);
    r->left_seg = NULL;
    rt_shm_close(&r->right_seg);
    rt_shm_close(&r->own);
    free(r->zc_at);
    free(r->carry);
    free(r->scratch);
    rt_wire_writer_free(&r->w);
    rt_wire_msg_free(&r->msg);
    rt_zframes_close(&r->fr);
    r->tag = RING_DEAD;
    free(r);
    *rp = NULL;
}

void *rt_ring_release_inbox(rt_ring *r)
{
    check(r);
    void *inbox = r->inbox;
    r->inbox = NULL;
    return inbox;
}

int rt_ring_rank(const rt_ring *r)
{
    check(r);
    return r->rank;
}

int rt_ring_size(const rt_ring *r)
{
    check(r);
    return r->world;
}

const char *rt_ring_link(const rt_ring *r, bool right)
{
    check(r);
    if (r->world == 1)
        return "-";
    if (right ? r->right_shm : r->left_shm)
        return "shm";
    return (right ? r->tx : r->rx) ? "tcp" : "zmq";
}

void rt_ring_set_idle(rt_ring *r, rt_ring_idle_fn fn, void *arg)
{
    check(r);
    r->idle = fn;
    r->idle_arg = arg;
}

void *rt_ring_zctx(const rt_ring *r)
{
    check(r);
    return r->zctx;
}

long rt_ring_dropped(const rt_ring *r)
{
    check(r);
    return r->drops.total;
}

bool rt_ring_crowded(const rt_ring *r)
{
    check(r);
    return r->crowded;
}

/* ---- the engine --------------------------------------------------------------------- */

/* Bytes [*p, *p + *bytes) of sub-chunk j of segment q. */
static void region(const struct plan *p, int world, int q, size_t j, char **ptr, size_t *bytes)
{
    size_t lo, hi;
    if (p->kind == P_BC) {
        lo = 0;
        hi = p->n;
    } else {
        rt_slice(p->n, world, q, &lo, &hi);
        lo = lo < p->lo ? p->lo : lo > p->hi ? p->hi : lo;
        hi = hi > p->hi ? p->hi : hi < p->lo ? p->lo : hi;
    }
    size_t len = hi - lo;
    size_t a = lo + (size_t)((unsigned __int128)len * j / p->K);
    size_t b = lo + (size_t)((unsigned __int128)len * (j + 1) / p->K);
    *ptr = p->buf + a * p->elem;
    *bytes = (b - a) * p->elem;
}

static bool send_ready(const struct plan *p, size_t i, size_t nrecv_done)
{
    if (p->kind == P_BC)
        return p->dist == 0 || nrecv_done > i;
    size_t t = (size_t)p->t0 + i / p->K;
    return t == (size_t)p->t0 || nrecv_done > i - p->K;
}

/* Whether send i no longer reads the buffer: libzmq released its frame, or
 * the raw link handed all of it to the kernel. */
static bool zc_done(rt_ring *r, size_t i)
{
    if (r->tx)
        return r->zc_at[i] <= rt_tcplink_sent(r->tx);
    return r->zc_at[i] <= atomic_load_explicit(&r->released, memory_order_acquire);
}

/* May receive i land in the buffer now? (the second rule of the header) */
static bool recv_guard(rt_ring *r, const struct plan *p, size_t i, size_t nsent)
{
    if (p->kind == P_BC)
        return true;
    int t = p->t0 + (int)(i / p->K);
    if (t + 1 - r->world < p->t0)
        return true;
    size_t si = i - (size_t)(r->world - 1) * p->K;
    return nsent > si && zc_done(r, si);
}

static int do_send(rt_ring *r, struct plan *p, size_t i)
{
    int t;
    size_t j;
    int q;
    uint32_t fl;
    if (p->kind == P_BC) {
        t = 0;
        j = i;
        q = 0;
        fl = p->dist == 0 ? p->my_flags : r->carry[i];
    } else {
        t = p->t0 + (int)(i / p->K);
        j = i % p->K;
        q = mod(r->rank - 1 - t, r->world);
        fl = t == p->t0 ? p->my_flags : r->carry[i - p->K];
    }
    char *ptr;
    size_t bytes;
    region(p, r->world, q, j, &ptr, &bytes);
    r->zc_at[i] = 0;
    if (r->right_shm) {
        void *slot = rt_shm_slot_to_fill(r->right_seg);
        memcpy(slot, ptr, bytes);
        struct rt_shm_desc d = {.op = r->op, .t = (uint32_t)t, .j = (uint32_t)j, .flags = fl,
                                .sig = p->sig, .bytes = bytes};
        rt_shm_publish(r->right_seg, &d);
        return RT_OK;
    }
    if (r->tx) { /* written from the buffer by the flush that follows */
        struct rt_tcplink_hdr h = {.gen = r->gen, .op = r->op, .sig = p->sig, .t = (uint32_t)t,
                                   .j = (uint32_t)j, .fl = fl, .n = (uint32_t)bytes};
        rt_tcplink_put(r->tx, &h, ptr);
        r->zc_at[i] = rt_tcplink_queued(r->tx);
        return RT_OK;
    }
    rt_wire_begin(&r->w, r->run, "chunk", 7);
    rt_wire_put_uint(&r->w, "gen", r->gen);
    rt_wire_put_uint(&r->w, "op", r->op);
    rt_wire_put_uint(&r->w, "sig", p->sig);
    rt_wire_put_uint(&r->w, "t", (uint64_t)t);
    rt_wire_put_uint(&r->w, "j", j);
    rt_wire_put_uint(&r->w, "fl", fl);
    rt_wire_put_uint(&r->w, "n", bytes);
    RT_TRY(rt_wire_end(&r->w));
    RT_TRY(rt_zsend(r->out, r->w.data, r->w.len, true));
    if (bytes >= ZC_MIN_BYTES) {
        r->zc_issued++;
        r->zc_at[i] = r->zc_issued;
        return rt_zsend_zc(r->out, ptr, bytes, false, zc_released, &r->released);
    }
    return rt_zsend(r->out, ptr, bytes, false);
}

/* What the next message in must be: step t, part j of segment q, added
 * (reduce-scatter) or copied (all-gather, broadcast), at ptr, bytes long. */
struct expect {
    int t, q;
    size_t j;
    bool add;
    char *ptr;
    size_t bytes;
};

static struct expect expect_of(const rt_ring *r, const struct plan *p, size_t i)
{
    struct expect e = {.t = 0, .q = 0, .j = i, .add = false};
    if (p->kind != P_BC) {
        e.t = p->t0 + (int)(i / p->K);
        e.j = i % p->K;
        e.q = mod(r->rank - 2 - e.t, r->world);
        e.add = e.t < r->world - 1;
    }
    region(p, r->world, e.q, e.j, &e.ptr, &e.bytes);
    return e;
}

/* From the left neighbour's shared-memory queue. */
static int recv_shm(rt_ring *r, struct plan *p, const struct expect *e, uint32_t *fl)
{
    struct rt_shm_desc d;
    const void *payload;
    int rc = rt_shm_peek(r->own, &d, &payload);
    if (rc <= 0)
        return rc;
    if (d.op == r->op && d.sig != p->sig)
        return diverged(r, d.sig, p->sig);
    if (d.op != r->op || d.t != (uint32_t)e->t || d.j != (uint32_t)e->j || d.bytes != e->bytes) {
        char why[300];
        snprintf(why, sizeof why, "shared-memory chunk op %llu step %u part %u of %llu bytes, "
                                  "expected op %llu step %d part %zu of %zu bytes",
                 (unsigned long long)d.op, d.t, d.j, (unsigned long long)d.bytes,
                 (unsigned long long)r->op, e->t, e->j, e->bytes);
        rt_wire_drop(&r->drops, "the left neighbour", why);
        rt_shm_consume(r->own, r->left_seg);
        return 2;
    }
    if (e->add)
        p->reduce(e->ptr, payload, e->bytes / p->elem);
    else
        memcpy(e->ptr, payload, e->bytes);
    *fl = d.flags;
    rt_shm_consume(r->own, r->left_seg);
    return 1;
}

/* Whether the two frames in r->fr are the expected chunk; why not, if not. */
static bool chunk_ok(rt_ring *r, const struct expect *e, uint32_t sig, uint64_t *flags,
                     char *why, size_t cap, uint32_t *other)
{
    uint64_t gen, op, mt, mj, mn, msig;
    *other = sig;
    rt_wire_map m = rt_wire_root(&r->msg);
    if (r->fr.n != 2 || r->fr.truncated) {
        snprintf(why, cap, "a data message of %d frames (expected 2)", r->fr.n);
        return false;
    }
    if (rt_wire_parse(&r->msg, rt_zframe_data(&r->fr, 0), rt_zframe_size(&r->fr, 0), r->run,
                      false) < 0 ||
        (strcmp(r->msg.type, "chunk") != 0 &&
         rt_error(RT_ERR_FORMAT, "a '%s' message on the data socket", r->msg.type) < 0) ||
        rt_wire_get_uint(m, "gen", 0, UINT32_MAX, &gen) < 0 ||
        rt_wire_get_uint(m, "op", 0, UINT64_MAX, &op) < 0 ||
        rt_wire_get_uint(m, "sig", 0, UINT32_MAX, &msig) < 0 ||
        rt_wire_get_uint(m, "t", 0, 2 * RT_MAX_WORKERS, &mt) < 0 ||
        rt_wire_get_uint(m, "j", 0, UINT32_MAX, &mj) < 0 ||
        rt_wire_get_uint(m, "fl", 0, UINT32_MAX, flags) < 0 ||
        rt_wire_get_uint(m, "n", 0, RT_RING_MAX_CHUNK, &mn) < 0) {
        snprintf(why, cap, "%s", rt_error_detail());
        return false;
    }
    if (gen < r->gen) {
        why[0] = '\0'; /* sent before the members changed: expected, dropped quietly */
        return false;
    }
    if (gen != r->gen) {
        snprintf(why, cap, "a chunk of generation %llu (ours: %llu)", (unsigned long long)gen,
                 (unsigned long long)r->gen);
        return false;
    }
    if (op == r->op && msig != sig) {
        *other = (uint32_t)msig;
        snprintf(why, cap, "a chunk of collective %llu with signature %08llx (ours: %08x)",
                 (unsigned long long)op, (unsigned long long)msig, sig);
        return false;
    }
    if (op != r->op || mt != (uint64_t)e->t || mj != e->j || mn != e->bytes ||
        rt_zframe_size(&r->fr, 1) != e->bytes) {
        snprintf(why, cap, "chunk op %llu step %llu part %llu of %llu bytes (frame %zu), "
                           "expected op %llu step %d part %zu of %zu bytes",
                 (unsigned long long)op, (unsigned long long)mt, (unsigned long long)mj,
                 (unsigned long long)mn, rt_zframe_size(&r->fr, 1), (unsigned long long)r->op,
                 e->t, e->j, e->bytes);
        return false;
    }
    return true;
}

/* With CURVE, the ZAP handler names each connection by its key: a chunk
 * counts only from the left neighbour of this generation (a member of an
 * older one, still connected, is not heard). */
static bool from_left(rt_ring *r)
{
    const char *uid = zmq_msg_gets(&r->fr.f[0], "User-Id");
    return uid && !strcmp(uid, r->left_key);
}

/* From the ZeroMQ inbox: a header frame and the raw bytes. */
static int recv_zmq(rt_ring *r, struct plan *p, const struct expect *e, uint32_t *fl)
{
    int rc = rt_zframes_recv(r->inbox, &r->fr, ZMQ_DONTWAIT);
    if (rc <= 0)
        return rc == RT_ERR_INTERRUPTED ? 0 : rc;
    char why[300];
    uint64_t mfl = 0;
    if (r->fr.n == 1 && rt_tcplink_is_offer(&r->fr))
        return 2; /* a raw link's late offer: this direction stays on ZeroMQ */
    if (r->left_key[0] && !from_left(r)) {
        char peer[64];
        rt_zframes_peer(&r->fr, 0, peer, sizeof peer);
        rt_wire_drop(&r->drops, peer, "a message from a connection that is not the left "
                                      "neighbour's (another member's key)");
        return 2;
    }
    uint32_t other;
    if (!chunk_ok(r, e, p->sig, &mfl, why, sizeof why, &other)) {
        if (other != p->sig && r->left_key[0]) /* authenticated: the neighbour said it */
            return diverged(r, other, p->sig);
        char peer[64];
        rt_zframes_peer(&r->fr, 0, peer, sizeof peer);
        if (why[0])
            rt_wire_drop(&r->drops, peer, why);
        return 2;
    }
    const void *src = rt_zframe_data(&r->fr, 1);
    if (e->add && ((uintptr_t)src % p->elem) != 0) {
        /* libzmq copies small frames into a shared buffer at any offset */
        if (e->bytes > r->scratch_cap) {
            void *n = realloc(r->scratch, e->bytes);
            if (!n)
                return rt_error(RT_ERR_NOMEM, "out of memory");
            r->scratch = n;
            r->scratch_cap = e->bytes;
        }
        memcpy(r->scratch, src, e->bytes);
        src = r->scratch;
    }
    if (e->add)
        p->reduce(e->ptr, src, e->bytes / p->elem);
    else
        memcpy(e->ptr, src, e->bytes);
    *fl = (uint32_t)mfl;
    return 1;
}

/* A raw link closed or sent garbage. Without an idle callback (no
 * coordinator) that fails the collective at once. With one, the neighbour
 * is as lost as a ZeroMQ neighbour that went silent, but known at once:
 * the ring stops using its links and waits, calling idle, for the members
 * to change (the coordinator sees the process end; idle then answers
 * RT_ERR_REGROUP), for the collective's deadline or the stall timeout.
 * Failing here instead would report this healthy rank as failed. */
static int lose_link(rt_ring *r, int rc)
{
    if (!r->idle)
        return rc;
    snprintf(r->lost_why, sizeof r->lost_why, "%s", rt_error_detail());
    fprintf(stderr, "ragtag: [%s] %s; waiting for the members to change\n", r->who,
            r->lost_why);
    r->lost_at = rt_now();
    return 0;
}

static int lost_wait(rt_ring *r)
{
    usleep((useconds_t)(IDLE_EVERY * 1e6));
    RT_TRY(r->idle(r->idle_arg));
    if (r->stall_timeout > 0 && rt_now() - r->lost_at > r->stall_timeout)
        return rt_error(RT_ERR_NET, "%s (for %.0f s, and the members did not change)",
                        r->lost_why, r->stall_timeout);
    return RT_OK;
}

/* Whether the header on the raw link is the expected chunk. The stream is
 * this generation's left neighbour's alone, in order: any other header
 * means it is out of step (or sends garbage), and the link is given up. */
static int tcp_header_ok(rt_ring *r, const struct plan *p, const struct expect *e)
{
    const struct rt_tcplink_hdr *h = &r->in.h;
    if (h->gen == r->gen && h->op == r->op && h->sig != p->sig)
        return diverged(r, h->sig, p->sig);
    if (h->gen == r->gen && h->op == r->op && h->t == (uint32_t)e->t &&
        h->j == (uint32_t)e->j && h->n == e->bytes)
        return RT_OK;
    char why[300];
    snprintf(why, sizeof why, "chunk of generation %llu op %llu step %u part %u of %u bytes, "
                              "expected generation %llu op %llu step %d part %zu of %zu bytes",
             (unsigned long long)h->gen, (unsigned long long)h->op, h->t, h->j, h->n,
             (unsigned long long)r->gen, (unsigned long long)r->op, e->t, e->j, e->bytes);
    rt_wire_drop(&r->drops, rt_tcplink_peer(r->rx), why);
    return lose_link(r, rt_error(RT_ERR_NET, "the raw link from rank %d is out of step (%s): "
                                             "link given up", r->left, why));
}

/* From the raw TCP link: what is there of the next chunk, its payload
 * straight into place (copy) or into scratch, added as it arrives. 3: part
 * of it came. */
static int recv_tcp(rt_ring *r, struct plan *p, const struct expect *e, uint32_t *fl)
{
    struct rt_tcplink_rx *x = &r->in;
    if (e->add && e->bytes > r->scratch_cap) {
        void *n = realloc(r->scratch, e->bytes);
        if (!n)
            return rt_error(RT_ERR_NOMEM, "out of memory");
        r->scratch = n;
        r->scratch_cap = e->bytes;
    }
    bool had = x->hdr_ok;
    int rc = rt_tcplink_recv(r->rx, x, e->add ? r->scratch : e->ptr, e->bytes);
    if (rc < 0 && !x->hdr_ok && x->got >= RT_TCPLINK_HDR)
        rt_wire_drop(&r->drops, rt_tcplink_peer(r->rx), rt_error_detail());
    if (rc < 0)
        return lose_link(r, rc);
    if (rc == 0)
        return 0;
    if (!had && x->hdr_ok && ((rc = tcp_header_ok(r, p, e)) < 0 || r->lost_at > 0))
        return rc;
    if (e->add && x->hdr_ok) {
        size_t upto = rt_tcplink_rx_payload(x) / p->elem;
        if (upto > r->reduced)
            p->reduce(e->ptr + r->reduced * p->elem, (char *)r->scratch + r->reduced * p->elem,
                      upto - r->reduced);
        r->reduced = upto;
    }
    if (rc != 2)
        return 3;
    *fl = x->h.fl;
    memset(x, 0, sizeof *x);
    r->reduced = 0;
    return 1;
}

/* Take one message in: 1 received the expected sub-chunk, 2 dropped a bad
 * message, 3 part of it came, 0 nothing there, < 0 error. */
static int do_recv(rt_ring *r, struct plan *p, size_t i)
{
    struct expect e = expect_of(r, p, i);
    uint32_t fl = 0;
    int rc = r->left_shm ? recv_shm(r, p, &e, &fl)
             : r->rx     ? recv_tcp(r, p, &e, &fl)
                         : recv_zmq(r, p, &e, &fl);
    if (rc != 1)
        return rc;
    r->carry[i] = fl | p->my_flags;
    p->out_flags |= fl;
    return 1;
}

/* A rank whose left neighbour writes to shared memory or a raw link never
 * reads its inbox for data; whatever arrives there is not from the ring
 * (but a late duplicate of a link offer): drop it, so it neither piles up
 * nor goes unreported. */
static void drain_inbox(rt_ring *r)
{
    r->last_drain = rt_now();
    for (int k = 0; k < 64; k++) {
        if (rt_zframes_recv(r->inbox, &r->fr, ZMQ_DONTWAIT) <= 0)
            return;
        if (rt_tcplink_is_offer(&r->fr))
            continue;
        char peer[64];
        rt_zframes_peer(&r->fr, 0, peer, sizeof peer);
        rt_wire_drop(&r->drops, peer, r->left_shm ? "a message on the data socket of a rank "
                                                    "whose left neighbour uses shared memory"
                                                  : "a message on the data socket of a rank "
                                                    "whose left neighbour uses a raw TCP link");
    }
}

static bool tx_busy(const rt_ring *r)
{
    return r->tx && rt_tcplink_sent(r->tx) < rt_tcplink_queued(r->tx);
}

/* Nothing moved: sleep until a link may move again (at most 50 ms; 1 ms
 * when the doorbell counts too). Raw links alone: poll(2); with the
 * ZeroMQ inbox: zmq_poll, which takes both. */
static int wait_links(rt_ring *r, bool want_rx, bool want_bell, uint32_t seen)
{
    bool want_zmq = want_rx && !r->left_shm && !r->rx;
    zmq_pollitem_t it[3];
    struct pollfd pf[2];
    int n = 0;
    if (want_rx && r->rx) {
        it[n] = (zmq_pollitem_t){.fd = rt_tcplink_fd(r->rx), .events = ZMQ_POLLIN};
        pf[n++] = (struct pollfd){.fd = rt_tcplink_fd(r->rx), .events = POLLIN};
    }
    if (tx_busy(r)) {
        it[n] = (zmq_pollitem_t){.fd = rt_tcplink_fd(r->tx), .events = ZMQ_POLLOUT};
        pf[n++] = (struct pollfd){.fd = rt_tcplink_fd(r->tx), .events = POLLOUT};
    }
    int ms = want_bell ? 1 : 50;
    if (want_zmq) {
        it[n++] = (zmq_pollitem_t){.socket = r->inbox, .events = ZMQ_POLLIN};
        if (zmq_poll(it, n, ms) < 0 && errno != EINTR)
            return rt_error(RT_ERR_NET, "waiting for rank %d: %s", r->left, zmq_strerror(errno));
    } else if (n > 0) {
        if (poll(pf, (nfds_t)n, ms) < 0 && errno != EINTR)
            return rt_error(RT_ERR_NET, "waiting for rank %d: %s", r->left, strerror(errno));
    } else if (want_bell) {
        rt_shm_wait(r->own, seen, IDLE_EVERY);
    } else {
        usleep(20); /* waiting for libzmq to release a zero-copy frame */
    }
    return RT_OK;
}

static int grow(rt_ring *r, size_t nsend, size_t nrecv)
{
    if (nsend > r->cap_send) {
        uint64_t *z = realloc(r->zc_at, nsend * sizeof *z);
        if (!z)
            return rt_error(RT_ERR_NOMEM, "out of memory for a collective's bookkeeping");
        r->zc_at = z;
        r->cap_send = nsend;
    }
    if (nrecv > r->cap_recv) {
        uint32_t *c = realloc(r->carry, nrecv * sizeof *c);
        if (!c)
            return rt_error(RT_ERR_NOMEM, "out of memory for a collective's bookkeeping");
        r->carry = c;
        r->cap_recv = nrecv;
    }
    return RT_OK;
}

/* Send whatever is ready and fits, then hand the raw link's queue to the
 * kernel: whether anything moved. */
static int send_some(rt_ring *r, struct plan *p, size_t *ns, size_t nr, bool *progress)
{
    while (*ns < p->nsend && send_ready(p, *ns, nr) &&
           (!r->right_shm || rt_shm_can_put(r->right_seg)) &&
           (!r->tx || rt_tcplink_can_put(r->tx))) {
        RT_TRY(do_send(r, p, *ns));
        (*ns)++;
        *progress = true;
    }
    if (tx_busy(r)) {
        uint64_t before = rt_tcplink_sent(r->tx);
        int rc = rt_tcplink_flush(r->tx);
        if (rc < 0)
            return lose_link(r, rc);
        *progress |= rt_tcplink_sent(r->tx) != before;
    }
    return RT_OK;
}

/* Whether this process's cgroup allows it fewer cores than it may run on
 * (`docker run --cpus`, a Kubernetes limit): a spin there burns the quota
 * its compute needs and gets it frozen sooner in each period, so shared
 * memory keeps the short spin. */
static bool under_quota(void)
{
    double q = rt_cpu_quota();
    return q > 0.0 && q < (double)rt_affinity_cores();
}

/* The spin bounds of this ring's links (see SPIN_RELAX), by the link a
 * rank mostly waits on, its left: shared memory's when the left neighbour
 * writes into this rank's segment, raw TCP's when a link is raw; false
 * over ZeroMQ alone (a fixed spin). */
static bool spin_bounds(const rt_ring *r, int *lo, int *hi)
{
    *lo = *hi = SPIN_RELAX;
    if (r->left_shm && !r->quota) {
        *lo = SPIN_SHM_MIN;
        *hi = SPIN_SHM_MAX;
        return true;
    }
    if (r->tx || r->rx) {
        *lo = SPIN_TCP_MIN;
        *hi = SPIN_TCP_MAX;
        return true;
    }
    return false;
}

/* After a wait: how many turns the next one spins. Caught while spinning,
 * or soon after the spin ran out (within twice its time): twice as many;
 * long after (8 times its time or more: the neighbour was far behind, or
 * descheduled by a busy node): half as many. */
static int spin_next(int cur, int lo, int hi, bool caught, double waited, double spun)
{
    if (caught || waited <= 2.0 * spun)
        return cur * 2 < hi ? cur * 2 : hi;
    if (waited >= 8.0 * spun)
        return cur / 2 > lo ? cur / 2 : lo;
    return cur;
}

/* Whether the scheduler keeps taking the core from this thread: preempted
 * since the last collective in most of the recent ones (a moving average),
 * so the node has more runnable threads than cores and a spinning rank
 * would take the core its neighbour, or this process's own compute,
 * needs. Then the collective starts from the short spin. Now and then is
 * not enough: on a quiet node the coordinator's and the loaders' threads
 * preempt a spinning rank too. (Two local lenet workers on 2 cores beside
 * two busy processes: 15% below the fixed spin when the spin adapted on
 * waits alone; starting every collective after any preemption from the
 * short spin cost the quiet case most of its gain.) */
static bool contended(rt_ring *r)
{
    struct rusage u;
    if (getrusage(RUSAGE_THREAD, &u) != 0)
        return true;
    bool more = u.ru_nivcsw > r->preempted;
    r->preempted = u.ru_nivcsw;
    r->busy = 0.8 * r->busy + (more ? 0.2 : 0.0);
    return r->busy > 0.5;
}

/* After a plan's last chunk: the caller may reuse the buffer on return, so
 * libzmq must be done with it; then the next collective's number. */
static int plan_done(rt_ring *r)
{
    double t0 = rt_now();
    int rc;
    while (atomic_load_explicit(&r->released, memory_order_acquire) < r->zc_issued) {
        if (rt_now() - t0 > 1.0 && r->idle && (rc = r->idle(r->idle_arg)) < 0)
            return rc;
        usleep(10);
    }
    if ((r->left_shm || r->rx) && rt_now() - r->last_drain > IDLE_EVERY)
        drain_inbox(r);
    r->op++;
    return RT_OK;
}

static int run_plan(rt_ring *r, struct plan *p)
{
    if (r->broken)
        return rt_error(RT_ERR_NET, "the ring is broken by an earlier error");
    if (r->lost_at > 0)
        return rt_error(RT_ERR_NET, "%s", r->lost_why);
    p->out_flags = p->my_flags;
    if (r->world == 1 || (p->nsend == 0 && p->nrecv == 0))
        return RT_OK;
    RT_TRY(grow(r, p->nsend, p->nrecv));
    size_t ns = 0, nr = 0;
    double now = rt_now(), last_progress = now, last_idle = now;
    double stall_at = now, spun = 0.0; /* when this wait began; how long it spun */
    int lo, hi;
    bool adapt = spin_bounds(r, &lo, &hi);
    /* (raw TCP: a syscall a turn already yields the core often enough) */
    if (adapt && (r->spin < lo || r->spin > hi || (r->left_shm && contended(r))))
        r->spin = lo;
    /* crowded: yield between looks at the left link (base/yieldwait.h) */
    bool yielding = r->crowded && (r->rx || r->left_shm) && rt_yield_allowed(&r->yields, now);
    if (yielding)
        adapt = false;
    int spins = 0, spin_max = yielding ? RT_YIELD_TURNS : adapt ? r->spin : SPIN_RELAX;
    int rc = RT_OK;
    while (ns < p->nsend || nr < p->nrecv || tx_busy(r)) {
        if (r->lost_at > 0) {
            if ((rc = lost_wait(r)) < 0)
                goto fail;
            continue;
        }
        uint32_t seen = r->own ? rt_shm_bell(r->own) : 0;
        bool progress = false;
        if ((rc = send_some(r, p, &ns, nr, &progress)) < 0)
            goto fail;
        bool guard_ok = nr < p->nrecv && recv_guard(r, p, nr, ns);
        if (guard_ok) {
            rc = do_recv(r, p, nr);
            if (rc < 0)
                goto fail;
            if (rc == 1)
                nr++;
            if (rc > 0)
                progress = true;
        }
        if (progress) {
            if (adapt && spins > 0) {
                /* raw TCP on the left (rx): a chunk that came within a
                 * wake-up's time grows the spin too (see SPIN_TCP_WAKE) */
                double waited = rt_now() - stall_at;
                bool soon = r->tcp_wake && r->rx && waited <= SPIN_TCP_WAKE;
                r->spin = spin_max =
                    spin_next(spin_max, lo, hi, spins < spin_max || soon, waited, spun);
            }
            spins = 0;
            continue;
        }
        if (++spins == 1 && adapt)
            stall_at = rt_now();
        if (spins < spin_max) {
            if (!yielding) {
                rt_spin_pause();
            } else if (!rt_yield_turn(&r->yields)) {
                /* backing off: the least spin for the rest, and this wait sleeps */
                yielding = false;
                spin_max = lo;
                spins = lo - 1;
            }
            continue;
        }
        now = rt_now();
        if (spins == spin_max) {
            last_progress = now; /* the stall clock starts when spinning stops */
            spun = now - stall_at;
        }
        if (r->stall_timeout > 0 && now - last_progress > r->stall_timeout) {
            rc = rt_error(RT_ERR_TIMEOUT, "no data from rank %d for %.0f s", r->left,
                          r->stall_timeout);
            goto fail;
        }
        if (now - last_idle > IDLE_EVERY) {
            last_idle = now;
            if (r->left_shm || r->rx)
                drain_inbox(r);
            if (r->idle && (rc = r->idle(r->idle_arg)) < 0)
                goto fail;
        }
        bool want_bell = r->own && ((guard_ok && r->left_shm) ||
                                    (r->right_shm && ns < p->nsend && send_ready(p, ns, nr)));
        if ((rc = wait_links(r, guard_ok, want_bell, seen)) < 0)
            goto fail;
    }
    if ((rc = plan_done(r)) < 0)
        goto fail;
    return RT_OK;

fail:
    r->broken = true;
    return rt_error_wrap(rc, "%s, collective %llu", r->who, (unsigned long long)r->op);
}

/* Sub-chunks of a segment of max_bytes: pieces of a whole chunk, or of
 * half a chunk where the segment holds more than RING_LONG_CHUNKS of them.
 * Against 256 KiB pieces throughout, 512 KiB ones (the default chunk) ran
 * 4 MiB 10-18% faster (2 ranks over TCP; 4 ranks on 2 cores, with fewer
 * hand-offs between the ranks that share a core; shared memory too) and
 * 32-64 MiB 6-12% slower over TCP. Every rank cuts the same (the same
 * chunk, sizes and world); a piece never outgrows a shared-memory slot.
 * (tests/test_ring.c's 4 KiB chunks: 4,099 floats go in whole pieces,
 * 100,003 in halves.) */
#define RING_LONG_CHUNKS 8

static size_t subchunks(const rt_ring *r, size_t max_bytes)
{
    size_t piece = r->chunk;
    if (max_bytes > RING_LONG_CHUNKS * r->chunk)
        piece = r->chunk / 2 / 64 * 64; /* (a chunk is 4 KiB at least) */
    size_t k = (max_bytes + piece - 1) / piece;
    return k ? k : 1;
}

/* The longest of the segments, cut to [p->lo, p->hi), in elements. */
static size_t longest_segment(const struct plan *p, int world)
{
    size_t most = 0;
    for (int q = 0; q < world; q++) {
        size_t lo, hi;
        rt_slice(p->n, world, q, &lo, &hi);
        lo = lo < p->lo ? p->lo : lo;
        hi = hi > p->hi ? p->hi : hi;
        if (hi > lo && hi - lo > most)
            most = hi - lo;
    }
    return most;
}

static void plan_ring(rt_ring *r, struct plan *p, enum plan_kind kind, void *buf, size_t n,
                      size_t elem, uint32_t flags)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->buf = buf;
    p->n = n;
    p->lo = 0;
    p->hi = n;
    p->elem = elem;
    p->my_flags = flags;
    p->reduce = elem == 8 ? add_f64 : add_f32;
    int N = r->world;
    p->t0 = kind == P_AG ? N - 1 : 0;
    p->t1 = kind == P_RS ? N - 1 : 2 * N - 2;
    size_t maxseg = (n + (size_t)N - 1) / (size_t)N;
    p->K = subchunks(r, maxseg * elem);
    p->nsend = p->nrecv = (size_t)(p->t1 - p->t0) * p->K;
    p->sig = plan_sig(p, -1);
}

int rt_ring_reduce_scatter(rt_ring *r, float *buf, size_t n, uint32_t *flags)
{
    check(r);
    struct plan p;
    plan_ring(r, &p, P_RS, buf, n, sizeof(float), flags ? *flags : 0);
    int rc = run_plan(r, &p);
    if (flags)
        *flags = p.out_flags;
    return rc;
}

int rt_ring_all_gather(rt_ring *r, float *buf, size_t n, uint32_t *flags)
{
    check(r);
    struct plan p;
    plan_ring(r, &p, P_AG, buf, n, sizeof(float), flags ? *flags : 0);
    int rc = run_plan(r, &p);
    if (flags)
        *flags = p.out_flags;
    return rc;
}

int rt_ring_allreduce(rt_ring *r, float *buf, size_t n, uint32_t *flags)
{
    check(r);
    struct plan p;
    plan_ring(r, &p, P_AR, buf, n, sizeof(float), flags ? *flags : 0);
    int rc = run_plan(r, &p);
    if (flags)
        *flags = p.out_flags;
    return rc;
}

int rt_ring_allreduce_range(rt_ring *r, void *buf, enum rt_elem elem, size_t n, size_t lo,
                            size_t hi, uint32_t *flags)
{
    check(r);
    RT_ASSERT(lo <= hi && hi <= n);
    struct plan p;
    size_t bytes = elem == RT_ELEM_F32 ? sizeof(float) : sizeof(uint16_t);
    plan_ring(r, &p, P_AR, buf, n, bytes, flags ? *flags : 0);
    p.lo = lo;
    p.hi = hi;
    p.reduce = elem == RT_ELEM_F16 ? add_f16 : elem == RT_ELEM_BF16 ? add_bf16 : add_f32;
    p.K = subchunks(r, longest_segment(&p, r->world) * bytes);
    p.nsend = p.nrecv = (size_t)(p.t1 - p.t0) * p.K;
    /* the element type is part of what the ranks must agree on */
    p.sig = plan_sig(&p, -2 - (int)elem);
    p.out_flags = p.my_flags;
    int rc = lo == hi ? RT_OK : run_plan(r, &p); /* nothing to send, on every rank */
    if (flags)
        *flags = p.out_flags;
    return rc;
}

int rt_ring_allreduce_f64(rt_ring *r, double *buf, size_t n)
{
    check(r);
    struct plan p;
    plan_ring(r, &p, P_AR, buf, n, sizeof(double), 0);
    return run_plan(r, &p);
}

int rt_ring_broadcast(rt_ring *r, void *buf, size_t bytes, int root)
{
    check(r);
    RT_ASSERT(root >= 0 && root < r->world);
    struct plan p;
    memset(&p, 0, sizeof p);
    p.kind = P_BC;
    p.buf = buf;
    p.n = bytes;
    p.elem = 1;
    p.K = subchunks(r, bytes);
    p.dist = mod(r->rank - root, r->world);
    p.nsend = p.dist < r->world - 1 ? p.K : 0;
    p.nrecv = p.dist > 0 ? p.K : 0;
    p.sig = plan_sig(&p, root);
    return run_plan(r, &p);
}
