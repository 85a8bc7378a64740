/* hostreduce.c — an allreduce among the workers of one host that reads
 * each rank's gradient where it lies (hostreduce.h says why). */
#include "config.h"

#include "hostreduce.h"

#include <errno.h>
#include <stddef.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/futex.h>
#include <signal.h>
#include <stdalign.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "collective.h"
#include "floatsum.h"
#include "partition.h"
#include "shm.h"
#include "status.h"
#include "yieldwait.h"

#define HR_MAGIC 0x6472687367617272ull /* "rragshrd" */
#define HR_VERSION 3
#define HR_DATA_OFF 4096
/* A mark: the generation (24 bits), the collective's number in it, the
 * phase. Marks only grow within a generation. */
#define HR_GEN_BITS 24
#define HR_LOW_BITS (64 - HR_GEN_BITS)
#define HR_LOW_MASK ((UINT64_C(1) << HR_LOW_BITS) - 1)
#define HR_GEN_MASK ((UINT64_C(1) << HR_GEN_BITS) - 1)
enum { HR_READY = 1, HR_SUMMED = 2, HR_READ = 3 };
/* Spin this long for a mark before sleeping, unless the caller says
 * (rt_hostreduce_wait.spin_s): the peers of one step reach the same point
 * within microseconds, and a futex round trip costs more. */
#define HR_SPIN_S 20e-6
#define HR_SLEEP_S 0.002
/* /dev/shm left free for the ring's and gossip's segments (a container's
 * is 64 MB): a gradient that would crowd them out stays private. */
#define HR_SHM_RESERVE ((uint64_t)32 << 20)

struct hr_hdr {
    uint64_t magic;
    uint32_t version;
    uint32_t pid;   /* the owner, for rt_hostreduce_owner_gone: its pid and */
    uint64_t start; /* its start time (a container's pid 1 is another's too) */
    uint64_t n;     /* floats from HR_DATA_OFF on */
    alignas(64) _Atomic uint64_t mark;
    _Atomic uint32_t votes; /* of the collective being marked */
    double sumsq;           /* rt_hostreduce_sum_apply's part, before its HR_READ */
    _Atomic uint64_t given_up; /* generation + 1 whose last sum_apply this rank gave
                                  up (rt_hostreduce_apply_undone): no peer applies it */
    alignas(64) _Atomic uint32_t bell;
    _Atomic uint32_t waiting;
};

struct peer {
    struct hr_hdr *h;
    float *data;
    size_t bytes; /* mapped */
};

struct rt_hostreduce {
    struct peer self;
    char name[64];
    size_t n;
    struct peer rep_own; /* this worker's replica segment, once it was a group's rank 0 */
    char rep_name[64];
    struct peer rep;     /* the group's replica: rank 0's segment, mapped */
    char secret0[32];    /* rank 0's secret, for this group */
    int rank, world;
    uint64_t gen, op;
    uint64_t apply_op;  /* the op of the last sum_apply begun (0: none in this group) */
    struct peer *peers; /* world of them; peers[rank] is self */
    bool crowded;       /* more of the group than this process has cores: waits yield */
    struct rt_yield_gauge yields;
};

/* Field 22 of /proc/PID/stat: the process's start, in clock ticks since
 * boot (0: unknown). */
static uint64_t start_time(pid_t pid)
{
    char path[64], line[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t got = fread(line, 1, sizeof line - 1, f);
    fclose(f);
    line[got] = 0;
    const char *p = strrchr(line, ')'); /* the name may hold spaces */
    unsigned long long t = 0;
    for (int field = 2; p && field < 22; field++)
        p = strchr(p + 1, ' ');
    if (!p || sscanf(p + 1, "%llu", &t) != 1)
        return 0;
    return t;
}

bool rt_hostreduce_owner_gone(int fd)
{
    struct hr_hdr hd;
    if (pread(fd, &hd, offsetof(struct hr_hdr, n), 0) != (ssize_t)offsetof(struct hr_hdr, n) ||
        hd.magic != HR_MAGIC || hd.pid == 0)
        return true; /* never initialised: its maker died at once */
    if (kill((pid_t)hd.pid, 0) != 0 && errno == ESRCH)
        return true;
    uint64_t t = start_time((pid_t)hd.pid);
    return t && hd.start && t != hd.start; /* that pid is another process now */
}

static size_t seg_bytes(size_t n) { return HR_DATA_OFF + n * sizeof(float); }

static void seg_name(char *out, size_t cap, const char *secret, const char *kind)
{
    snprintf(out, cap, "/ragtag-%s-%s", secret, kind);
}

/* Makes segment `name` of n floats after the header, owned by this process,
 * its pages taken now: a full /dev/shm is an error here, not a SIGBUS
 * later. `what` names it in errors. */
static int make_segment(const char *name, size_t n, const char *what, struct peer *out)
{
    size_t bytes = seg_bytes(n);
    struct statvfs fs;
    if (statvfs("/dev/shm", &fs) == 0 &&
        (uint64_t)fs.f_bavail * fs.f_frsize < (uint64_t)bytes + HR_SHM_RESERVE)
        return rt_error(RT_ERR_NOMEM, "/dev/shm has %.1f MB free: too little for a %s of %.1f "
                        "MB and the ring's links", (double)fs.f_bavail * fs.f_frsize / 1e6, what,
                        (double)bytes / 1e6);
    int fd = shm_open(name, O_CREAT | O_EXCL | O_RDWR, 0600);
    if (fd < 0)
        return rt_error(RT_ERR_NET, "cannot create shared memory %s: %s", name, strerror(errno));
    int fe = posix_fallocate(fd, 0, (off_t)bytes);
    void *p = MAP_FAILED;
    if (fe == 0 && ftruncate(fd, (off_t)bytes) == 0)
        p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    else if (fe != 0)
        errno = fe;
    close(fd);
    if (p == MAP_FAILED) {
        int e = errno;
        shm_unlink(name);
        return rt_error(RT_ERR_NET, "cannot make %zu bytes of shared memory %s: %s (is /dev/shm "
                                    "full?)", bytes, name, strerror(e));
    }
    memset(p, 0, HR_DATA_OFF);
    struct hr_hdr *hd = p;
    hd->version = HR_VERSION;
    hd->pid = (uint32_t)getpid();
    hd->start = start_time(getpid());
    hd->n = n;
    atomic_store_explicit((_Atomic uint64_t *)&hd->magic, HR_MAGIC, memory_order_release);
    *out = (struct peer){hd, (float *)((char *)p + HR_DATA_OFF), bytes};
    return RT_OK;
}

rt_hostreduce *rt_hostreduce_new(const char *secret, size_t n)
{
    rt_hostreduce *h = calloc(1, sizeof *h);
    if (!h) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    rt_shm_sweep_once();
    seg_name(h->name, sizeof h->name, secret, "grads");
    snprintf(h->rep_name, sizeof h->rep_name, "/ragtag-%s-replica", secret);
    if (make_segment(h->name, n, "gradient", &h->self) < 0) {
        free(h);
        return NULL;
    }
    h->n = n;
    return h;
}

void rt_hostreduce_ungroup(rt_hostreduce *h)
{
    if (!h)
        return;
    if (h->rep.h && h->rep.h != h->rep_own.h)
        munmap(h->rep.h, h->rep.bytes);
    h->rep = (struct peer){0};
    if (!h->peers)
        return;
    for (int r = 0; r < h->world; r++)
        if (r != h->rank && h->peers[r].h)
            munmap(h->peers[r].h, h->peers[r].bytes);
    free(h->peers);
    h->peers = NULL;
    h->world = 0;
}

void rt_hostreduce_destroy(rt_hostreduce **hp)
{
    if (!hp || !*hp)
        return;
    rt_hostreduce *h = *hp;
    rt_hostreduce_ungroup(h);
    munmap(h->self.h, h->self.bytes);
    shm_unlink(h->name);
    if (h->rep_own.h) {
        munmap(h->rep_own.h, h->rep_own.bytes);
        shm_unlink(h->rep_name);
    }
    free(h);
    *hp = NULL;
}

float *rt_hostreduce_floats(rt_hostreduce *h, size_t *n)
{
    *n = h->n;
    return h->self.data;
}

bool rt_hostreduce_crowded(const rt_hostreduce *h)
{
    return h->peers && h->crowded;
}

bool rt_hostreduce_grouped(const rt_hostreduce *h) { return h && h->peers; }

/* Rank r's segment of `kind` ("grads", "replica"), checked: this user's
 * alone, initialised, of n floats. */
static int map_peer(const char *secret, const char *kind, int r, size_t n, struct peer *out)
{
    char name[64];
    seg_name(name, sizeof name, secret, kind);
    size_t want = seg_bytes(n);
    int fd = shm_open(name, O_RDWR, 0);
    if (fd < 0)
        return rt_error(RT_ERR_NET, "cannot open rank %d's %s %s: %s", r, kind, name,
                        strerror(errno));
    struct stat st;
    int rc = fstat(fd, &st);
    size_t bytes = rc == 0 ? (size_t)st.st_size : 0;
    if (rc != 0 || st.st_uid != geteuid() || (st.st_mode & 077) || bytes != want) {
        close(fd);
        return rt_error(RT_ERR_NET, "rank %d's %s %s is not a peer's (owner, mode or size %zu "
                                    "where %zu)", r, kind, name, bytes, want);
    }
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
    close(fd);
    if (p == MAP_FAILED)
        return rt_error(RT_ERR_NET, "cannot map rank %d's %s %s: %s", r, kind, name,
                        strerror(errno));
    struct hr_hdr *hd = p;
    if (atomic_load_explicit((_Atomic uint64_t *)&hd->magic, memory_order_acquire) != HR_MAGIC ||
        hd->version != HR_VERSION || hd->n != n) {
        munmap(p, bytes);
        return rt_error(RT_ERR_NET, "rank %d's %s %s has another layout", r, kind, name);
    }
    *out = (struct peer){hd, (float *)((char *)p + HR_DATA_OFF), bytes};
    return RT_OK;
}

int rt_hostreduce_group(rt_hostreduce *h, uint64_t gen, int rank, int world,
                        const char *const *secrets)
{
    rt_hostreduce_ungroup(h);
    RT_ASSERT(world >= 1 && world <= RT_MAX_WORKERS && rank >= 0 && rank < world);
    if (!(h->peers = calloc((size_t)world, sizeof *h->peers)))
        return rt_error(RT_ERR_NOMEM, "out of memory");
    h->world = world;
    h->rank = rank;
    h->crowded = rt_crowded(world, rt_cpu_quota());
    for (int r = 0; r < world; r++) {
        int rc = r == rank ? RT_OK : map_peer(secrets[r], "grads", r, h->n, &h->peers[r]);
        if (rc < 0) {
            rt_hostreduce_ungroup(h);
            return rc;
        }
    }
    h->peers[rank] = h->self;
    snprintf(h->secret0, sizeof h->secret0, "%s", secrets[0]);
    h->gen = gen & HR_GEN_MASK;
    h->op = 0;
    h->apply_op = 0;
    atomic_store_explicit(&h->self.h->mark, h->gen << HR_LOW_BITS, memory_order_release);
    return RT_OK;
}

static uint64_t mark_of(const rt_hostreduce *h, int phase)
{
    return (h->gen << HR_LOW_BITS) | (h->op << 2) | (uint64_t)phase;
}

static void publish(rt_hostreduce *h, int phase)
{
    struct hr_hdr *me = h->self.h;
    atomic_store_explicit(&me->mark, mark_of(h, phase), memory_order_release);
    atomic_fetch_add(&me->bell, 1);
    if (atomic_load(&me->waiting))
        syscall(SYS_futex, &me->bell, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

/* 1: rank r reached the mark; 0: not yet; RT_ERR_REGROUP: it went on to a
 * later generation, so it will never take part in this collective. */
static int reached(const rt_hostreduce *h, int r, uint64_t want)
{
    uint64_t v = atomic_load_explicit(&h->peers[r].h->mark, memory_order_acquire);
    uint64_t g = v >> HR_LOW_BITS;
    if (g == h->gen)
        return (v & HR_LOW_MASK) >= (want & HR_LOW_MASK);
    if (g > h->gen)
        return rt_error(RT_ERR_REGROUP, "rank %d of this host is in a later generation", r);
    return 0;
}

static void nap(struct hr_hdr *p, uint32_t bell)
{
    struct timespec ts = {0, (long)(HR_SLEEP_S * 1e9)};
    syscall(SYS_futex, &p->bell, FUTEX_WAIT, bell, &ts, NULL, 0);
}

/* Until rank r reached the mark: a short spin (on a crowded machine,
 * yields: base/yieldwait.h), then sleeps on its bell, checking w between
 * them. */
static int wait_mark(rt_hostreduce *h, int r, uint64_t want, const struct rt_hostreduce_wait *w)
{
    int rc = reached(h, r, want);
    double t0 = rt_now(), spin = w->spin_s > 0.0 ? w->spin_s : HR_SPIN_S;
    if (h->crowded && rt_yield_allowed(&h->yields, t0))
        for (int i = 0; i < RT_YIELD_TURNS && rc == 0; i++) {
            bool go_on = rt_yield_turn(&h->yields);
            rc = reached(h, r, want);
            if (!go_on)
                break;
        }
    else
        while (rc == 0 && rt_now() - t0 < spin)
            for (int i = 0; i < 16 && (rc = reached(h, r, want)) == 0; i++)
                rt_spin_pause();
    if (rc != 0)
        return rc < 0 ? rc : RT_OK;
    struct hr_hdr *p = h->peers[r].h;
    if (w->waiting)
        w->waiting(w->arg, true);
    while (rc == 0) {
        if (w->check && (rc = w->check(w->arg)) < 0)
            break;
        if (rt_now() - t0 > w->timeout_s) {
            rc = rt_error(RT_ERR_TIMEOUT, "rank %d of this host did not take part in the sum "
                                          "for %.0f s", r, w->timeout_s);
            break;
        }
        atomic_fetch_add(&p->waiting, 1);
        uint32_t bell = atomic_load(&p->bell);
        if ((rc = reached(h, r, want)) == 0)
            nap(p, bell);
        atomic_fetch_sub(&p->waiting, 1);
        if (rc == 0)
            rc = reached(h, r, want);
    }
    if (w->waiting)
        w->waiting(w->arg, false);
    return rc < 0 ? rc : RT_OK;
}

static int wait_all(rt_hostreduce *h, int phase, const struct rt_hostreduce_wait *w)
{
    uint64_t want = mark_of(h, phase);
    for (int r = 0; r < h->world; r++)
        if (r != h->rank)
            RT_TRY(wait_mark(h, r, want, w));
    return RT_OK;
}

/* dst[a, b) = the sum of every rank's [a, b), in rank order (dst is one of
 * the sources). */
static void sum_ranks(const rt_hostreduce *h, float *dst, size_t a, size_t b)
{
    const float *src[RT_MAX_WORKERS];
    for (int r = 0; r < h->world; r++)
        src[r] = h->peers[r].data + a;
    rt_f32_sum_sources(dst + a, src, h->world, b - a);
}

int rt_hostreduce_allreduce(rt_hostreduce *h, size_t lo, size_t hi, uint32_t votes,
                            uint32_t *agreed, const struct rt_hostreduce_wait *w)
{
    RT_ASSERT(h->peers && lo <= hi && hi <= h->n);
    h->op++;
    struct hr_hdr *me = h->self.h;
    atomic_store_explicit(&me->votes, votes, memory_order_relaxed);
    publish(h, HR_READY);
    RT_TRY(wait_all(h, HR_READY, w));
    uint32_t v = votes;
    for (int r = 0; r < h->world; r++)
        v |= atomic_load_explicit(&h->peers[r].h->votes, memory_order_relaxed);
    size_t a, b;
    rt_slice(hi - lo, h->world, h->rank, &a, &b);
    sum_ranks(h, h->self.data, lo + a, lo + b);
    publish(h, HR_SUMMED);
    RT_TRY(wait_all(h, HR_SUMMED, w));
    for (int r = 0; r < h->world; r++) {
        if (r == h->rank)
            continue;
        rt_slice(hi - lo, h->world, r, &a, &b);
        memcpy(h->self.data + lo + a, h->peers[r].data + lo + a, (b - a) * sizeof(float));
    }
    /* nobody may write its buffer (the next backward) while another reads it */
    publish(h, HR_READ);
    RT_TRY(wait_all(h, HR_READ, w));
    if (agreed)
        *agreed = v;
    return RT_OK;
}

/* Floats a chunk of sum_apply: its sources, the sum and the update's
 * weights and state (five or six streams) stay in a 2 MiB L2. */
#define HR_APPLY_CHUNK 16384
#define HR_TAIL_MAX 64

static double sumsq_f32(const float *x, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return s;
}

/* Each chunk of this rank's slice summed and applied while in cache; the
 * tail summed by every rank into a copy of its own (the others still read
 * this rank's contribution there until HR_READ), written after. */
int rt_hostreduce_sum_apply(rt_hostreduce *h, const struct rt_hostreduce_apply *ap,
                            uint32_t votes, uint32_t *agreed, const struct rt_hostreduce_wait *w)
{
    const size_t end = ap->n - ap->tail;
    RT_ASSERT(h->peers && ap->from <= end && ap->n <= h->n && ap->tail <= HR_TAIL_MAX);
    h->apply_op = ++h->op;
    struct hr_hdr *me = h->self.h;
    atomic_store_explicit(&me->votes, votes, memory_order_relaxed);
    publish(h, HR_READY);
    RT_TRY(wait_all(h, HR_READY, w));
    uint32_t v = votes;
    /* this rank's READY before the peers' given_up marks are read (the
     * mark's store is a release: the fence orders it before the loads; see
     * rt_hostreduce_apply_undone) */
    atomic_thread_fence(memory_order_seq_cst);
    for (int r = 0; r < h->world; r++) {
        v |= atomic_load_explicit(&h->peers[r].h->votes, memory_order_relaxed);
        if (atomic_load(&h->peers[r].h->given_up) == h->gen + 1)
            return rt_error(RT_ERR_REGROUP, "rank %d of this host gave this step up", r);
    }
    size_t a, b;
    rt_slice(end - ap->from, h->world, h->rank, &a, &b);
    double ss = 0.0;
    int rc = RT_OK;
    for (size_t c = ap->from + a; c < ap->from + b && rc >= 0; c += HR_APPLY_CHUNK) {
        size_t e = ap->from + b - c > HR_APPLY_CHUNK ? c + HR_APPLY_CHUNK : ap->from + b;
        sum_ranks(h, h->self.data, c, e);
        if (ap->sumsq)
            ss += sumsq_f32(h->self.data + c, e - c);
        rc = ap->apply(ap->arg, c, e);
    }
    float tail[HR_TAIL_MAX];
    const float *src[RT_MAX_WORKERS];
    for (int r = 0; r < h->world; r++)
        src[r] = h->peers[r].data + end;
    rt_f32_sum_sources(tail, src, h->world, ap->tail);
    me->sumsq = ss;
    /* (a failed apply still marks: the peers must not wait for it) */
    publish(h, HR_READ);
    RT_TRY(rc);
    RT_TRY(wait_all(h, HR_READ, w));
    memcpy(h->self.data + end, tail, ap->tail * sizeof(float));
    if (ap->sumsq) {
        *ap->sumsq = 0.0;
        for (int r = 0; r < h->world; r++) /* rank order: the same bits on every rank */
            *ap->sumsq += h->peers[r].h->sumsq;
    }
    if (agreed)
        *agreed = v;
    return RT_OK;
}

/* A rank that never marked READY for the op proves that no rank passed
 * its wait, so none applied anything. And none will: a rank that marks
 * READY later, then passes, first reads this rank's given_up (sequentially
 * consistent: of this store and that rank's READY, whichever came first,
 * the other side sees it). */
bool rt_hostreduce_apply_undone(rt_hostreduce *h)
{
    if (!h->peers || h->apply_op == 0 || h->op != h->apply_op)
        return false;
    atomic_store(&h->self.h->given_up, h->gen + 1);
    uint64_t want = mark_of(h, HR_READY);
    for (int r = 0; r < h->world; r++) {
        uint64_t v = atomic_load(&h->peers[r].h->mark);
        if (v >> HR_LOW_BITS == h->gen && (v & HR_LOW_MASK) < (want & HR_LOW_MASK))
            return true;
    }
    return false;
}

int rt_hostreduce_barrier(rt_hostreduce *h, uint32_t votes, uint32_t *agreed,
                          const struct rt_hostreduce_wait *w)
{
    return rt_hostreduce_allreduce(h, 0, 0, votes, agreed, w);
}

/* Rank 0's replica segment of n floats, made (again when its size changed)
 * by rank 0 and mapped by the others; all of the group call it together.
 * A rank that cannot use, make or map it says so in the vote, and then
 * none shares. */
int rt_hostreduce_replica(rt_hostreduce *h, size_t n, bool able,
                          const struct rt_hostreduce_wait *w, float **out)
{
    RT_ASSERT(h->peers);
    *out = NULL;
    uint32_t fail = !able, agreed = 0;
    if (h->rank == 0 && able) {
        if (h->rep_own.h && h->rep_own.h->n != n) {
            munmap(h->rep_own.h, h->rep_own.bytes);
            shm_unlink(h->rep_name);
            h->rep_own = (struct peer){0};
        }
        if (!h->rep_own.h && make_segment(h->rep_name, n, "replica", &h->rep_own) < 0)
            fail = 1;
        h->rep = h->rep_own;
    }
    RT_TRY(rt_hostreduce_barrier(h, fail, &agreed, w)); /* made before it is mapped */
    if (h->rank != 0 && !agreed && !h->rep.h && map_peer(h->secret0, "replica", 0, n, &h->rep) < 0)
        fail = 1;
    RT_TRY(rt_hostreduce_barrier(h, fail, &agreed, w));
    if (agreed) {
        if (h->rep.h && h->rep.h != h->rep_own.h)
            munmap(h->rep.h, h->rep.bytes);
        h->rep = (struct peer){0};
        if (!fail)
            rt_error(RT_ERR_NET, "another worker of this host cannot share the replica");
        else if (!able)
            rt_error(RT_ERR_CONFIG, "this worker's weights are not in host memory");
        return RT_OK;
    }
    *out = h->rep.data;
    return RT_OK;
}
