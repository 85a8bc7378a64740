/* gossip.c — asynchronous pairwise parameter averaging (see gossip.h).
 *
 * State of a rank: at most one request of its own outstanding (peer, seq,
 * the copy of params it sent, when), and per peer the highest epoch that
 * peer said it drained. Everything happens on the caller's thread at step
 * boundaries; the only waits are in rt_gossip_drain, on the inbox.
 *
 * Sends never block (ZMQ_DONTWAIT). A request that would block is not
 * started; a reply that would block is not given and the request not
 * averaged — the requester abandons it after reply_timeout and neither
 * side has changed, so the sum over ranks still holds. The queues are
 * short by construction: on each link at most one request, one reply and
 * one "drained" are in flight, plus the requests abandoned to a silent
 * peer, one per reply_timeout.
 *
 * An abandoned request keeps its copy: should its reply still come (a peer
 * that was only slow), the delta is applied late and the sum still holds.
 * Only the most recent abandoned exchange is remembered; a reply to an
 * older one is dropped, and the peer's half of that exchange then stays
 * unmatched (the one case in which the sum over ranks drifts). */
#include "config.h"

#include "gossip.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "gossip_shm.h"
#include "membership.h"
#include "clock.h"
#include "rng.h"
#include "status.h"
#include "transport.h"
#include "wire.h"

#define GOSSIP_TAG 0x474f5353u /* "GOSS" */
#define GOSSIP_DEAD 0xdeadbeefu
#define GOSSIP_HWM 16                  /* messages per link and direction */
#define GOSSIP_STREAM 0x676f73736970ull /* rng stream: "gossip" */
#define DEFAULT_REPLY_TIMEOUT 30.0
#define DRAIN_POLL_MS 10
#define DRAIN_POLL_SHM_MS 1 /* with shared memory links, which a poll does not see */
/* Messages taken per step: every legitimate request (at most one per peer
 * and abandoned exchange) fits many times; a flood of garbage cannot make
 * one step boundary arbitrarily long. */
#define STEP_MAX_MSGS(world) (64 + 4 * (world))
/* On a clean shutdown right after a drain, the last "drained" messages
 * may still sit in the queues: give them this long to leave. */
#define LINGER_AFTER_DRAIN_MS 1000
/* The peers made their queues before anybody learned their addresses: a
 * queue missing at the connect belongs to a peer lost meanwhile. */
#define SHM_OPEN_TIMEOUT 10.0

enum kind { K_REQ, K_REP, K_DRAINED };
static const char *const kind_names[] = {"req", "rep", "drained"};

struct header {
    enum kind kind;
    int from;
    uint64_t seq, epoch;
};

struct exchange {
    bool active;
    int peer;
    uint64_t seq, epoch;
    double sent_at;
    float *copy; /* params as sent */
};

struct rt_gossip {
    uint32_t tag;
    char run[RT_RUN_ID_LEN + 1];
    uint64_t gen;
    int rank, world;
    size_t n, bytes;
    double reply_timeout;
    uint64_t epoch; /* the epoch the current steps belong to */
    rt_rng rng;

    void *zctx;
    void *inbox;
    void **out; /* [world]: PUSH to each peer, NULL for self */
    bool connected;
    rt_curve *curve;                   /* NULL: plain links */
    char (*keys)[RT_KEY_LEN + 1];      /* [world]: each rank's key, with curve */
    struct rt_gshm shm;                /* links to the peers of this host (gossip_shm.h) */
    char (*secrets)[RT_SHM_SECRET_MAX]; /* [world]: their shared memory secrets, */
    const char **secret;               /* and [world] pointers to them (NULL: none) */
    bool shm_failed;                   /* its queues could not be made */
    char endpoint[RT_ENDPOINT_MAX];

    uint64_t seq;
    struct exchange mine; /* outstanding */
    struct exchange late; /* most recent abandoned, its reply may still come */
    float *tmp;           /* an average being answered; an unaligned frame */
    uint64_t *drained;    /* [world]: highest epoch + 1 the peer drained, 0: none */
    bool *drained_sent;   /* [world]: during a drain */
    bool clean_drain;     /* the last call was a drain that succeeded */
    bool draining;        /* a drain of draining_epoch timed out: a new call resumes it */
    uint64_t draining_epoch;

    struct rt_gossip_stats st;
    rt_wire_writer w;
    rt_wire_msg msg;
    rt_zframes fr;
    rt_wire_droplog drops;
    char who[32];
};

static void check(const rt_gossip *g) { RT_ASSERT(g && g->tag == GOSSIP_TAG); }

/* ---- life cycle ------------------------------------------------------------------- */

static int bind_inbox(rt_gossip *g, const char *ip)
{
    int64_t max_frame = (int64_t)(g->bytes > RT_WIRE_MAX_CONTROL ? g->bytes : RT_WIRE_MAX_CONTROL);
    g->inbox = rt_zsock_new(g->zctx, ZMQ_PULL, max_frame, GOSSIP_HWM);
    if (!g->inbox)
        return RT_ERR_NET;
    RT_TRY(rt_link_server(g->curve, g->inbox));
    bool v6 = strchr(ip, ':') != NULL;
    if (v6) {
        int one = 1;
        zmq_setsockopt(g->inbox, ZMQ_IPV6, &one, sizeof one);
    }
    char ep[RT_ENDPOINT_MAX];
    snprintf(ep, sizeof ep, v6 ? "tcp://[%s]:*" : "tcp://%s:*", ip);
    if (rt_zsock_bind(g->inbox, ep, g->endpoint, sizeof g->endpoint) == RT_OK)
        return RT_OK;
    /* An address of a NAT, or one this host cannot bind: listen on every
     * interface and tell the peers the given address (as worker.c does). */
    char bound[RT_ENDPOINT_MAX];
    RT_TRY(rt_zsock_bind(g->inbox, "tcp://*:*", bound, sizeof bound));
    const char *port = strrchr(bound, ':');
    RT_ASSERT(port);
    snprintf(g->endpoint, sizeof g->endpoint, v6 ? "tcp://[%s]%s" : "tcp://%s%s", ip, port);
    rt_error_clear();
    return RT_OK;
}

/* This rank's inbound queues from the peers of its host; their secrets
 * kept to open theirs at the connect. */
static int make_queues(rt_gossip *g, const char *const *secrets)
{
    g->secrets = calloc((size_t)g->world, sizeof g->secrets[0]);
    g->secret = calloc((size_t)g->world, sizeof *g->secret);
    if (!g->secrets || !g->secret)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    for (int j = 0; j < g->world; j++) {
        if (secrets[j] && strlen(secrets[j]) < sizeof g->secrets[j]) {
            snprintf(g->secrets[j], sizeof g->secrets[j], "%s", secrets[j]);
            g->secret[j] = g->secrets[j];
        }
    }
    int rc = rt_gshm_create(&g->shm, g->run, g->gen, g->rank, g->world, g->bytes, g->secret);
    if (rc == RT_ERR_NOMEM)
        return rc;
    if (rc < 0) { /* /dev/shm full, or not writable: the slower links still work */
        fprintf(stderr, "ragtag: [%s] %s: its peers of this host go over ZeroMQ\n", g->who,
                rt_error_detail());
        rt_error_clear();
        rt_gshm_close(&g->shm);
        g->shm_failed = true;
    }
    return RT_OK;
}

rt_gossip *rt_gossip_new(const struct rt_gossip_config *c)
{
    RT_ASSERT(c && c->zctx && c->run);
    if (!rt_wire_run_id_valid(c->run)) {
        rt_error(RT_ERR_ARG, "gossip: run id '%s' is not %d hex digits", c->run, RT_RUN_ID_LEN);
        return NULL;
    }
    if (c->world < 1 || c->world > RT_MAX_WORKERS || c->rank < 0 || c->rank >= c->world) {
        rt_error(RT_ERR_ARG, "gossip: rank %d of %d", c->rank, c->world);
        return NULL;
    }
    if (c->n == 0 || c->n > (SIZE_MAX / 2) / sizeof(float) || !(c->reply_timeout >= 0)) {
        rt_error(RT_ERR_ARG, "gossip: %zu parameters, reply timeout %g s", c->n,
                 c->reply_timeout);
        return NULL;
    }
    rt_gossip *g = calloc(1, sizeof *g);
    if (!g) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    g->tag = GOSSIP_TAG;
    snprintf(g->run, sizeof g->run, "%s", c->run);
    g->gen = c->gen;
    g->rank = c->rank;
    g->world = c->world;
    g->n = c->n;
    g->bytes = c->n * sizeof(float);
    g->reply_timeout = c->reply_timeout > 0 ? c->reply_timeout : DEFAULT_REPLY_TIMEOUT;
    g->epoch = c->epoch;
    g->zctx = c->zctx;
    g->curve = c->curve;
    rt_rng_seed(&g->rng, c->seed, GOSSIP_STREAM ^ (uint64_t)c->rank);
    rt_wire_writer_init(&g->w);
    rt_wire_msg_init(&g->msg);
    rt_zframes_init(&g->fr);
    snprintf(g->who, sizeof g->who, "gossip rank %d", g->rank);
    rt_wire_droplog_init(&g->drops, g->who);
    g->out = calloc((size_t)g->world, sizeof *g->out);
    g->drained = calloc((size_t)g->world, sizeof *g->drained);
    g->drained_sent = calloc((size_t)g->world, sizeof *g->drained_sent);
    if (!g->out || !g->drained || !g->drained_sent) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        goto fail;
    }
    if (g->world > 1) {
        g->mine.copy = malloc(g->bytes);
        g->tmp = malloc(g->bytes);
        if (!g->mine.copy || !g->tmp) {
            rt_error(RT_ERR_NOMEM, "gossip: out of memory for 2 x %zu parameters", g->n);
            goto fail;
        }
    }
    if (bind_inbox(g, c->bind_ip ? c->bind_ip : "127.0.0.1") < 0) {
        rt_error_wrap(RT_ERR_NET, "gossip rank %d", g->rank);
        goto fail;
    }
    if (c->shm_secrets && g->world > 1 && make_queues(g, c->shm_secrets) < 0)
        goto fail;
    return g;

fail:
    rt_gossip_destroy(&g);
    return NULL;
}

void rt_gossip_destroy(rt_gossip **gp)
{
    if (!gp || !*gp)
        return;
    rt_gossip *g = *gp;
    check(g);
    rt_wire_droplog_flush(&g->drops);
    for (int j = 0; g->out && j < g->world; j++) {
        if (g->out[j] && g->clean_drain) {
            int linger = LINGER_AFTER_DRAIN_MS;
            zmq_setsockopt(g->out[j], ZMQ_LINGER, &linger, sizeof linger);
        }
        rt_zsock_close(&g->out[j]);
    }
    rt_zsock_close(&g->inbox);
    rt_gshm_close(&g->shm);
    free(g->secrets);
    free(g->secret);
    free(g->out);
    free(g->keys);
    free(g->drained);
    free(g->drained_sent);
    free(g->mine.copy);
    free(g->late.copy);
    free(g->tmp);
    rt_wire_writer_free(&g->w);
    rt_wire_msg_free(&g->msg);
    rt_zframes_close(&g->fr);
    g->tag = GOSSIP_DEAD;
    free(g);
    *gp = NULL;
}

const char *rt_gossip_endpoint(const rt_gossip *g)
{
    check(g);
    return g->endpoint;
}

bool rt_gossip_shm_ready(const rt_gossip *g)
{
    check(g);
    return !g->shm_failed;
}

int rt_gossip_connect(rt_gossip *g, const char *const *endpoints, const char *const *keys,
                      const bool *shm_ready)
{
    check(g);
    RT_ASSERT(endpoints && !g->connected && (keys || !g->curve));
    if (g->curve) {
        if (!(g->keys = calloc((size_t)g->world, sizeof g->keys[0])))
            return rt_error(RT_ERR_NOMEM, "out of memory");
        for (int j = 0; j < g->world; j++)
            snprintf(g->keys[j], sizeof g->keys[j], "%s", keys[j] ? keys[j] : "");
    }
    for (int j = 0; shm_ready && j < g->world; j++)
        if (!shm_ready[j])
            rt_gshm_drop(&g->shm, j);
    for (int j = 0; j < g->world; j++) {
        if (j == g->rank || rt_gshm_linked(&g->shm, j))
            continue;
        if (!endpoints[j] || !endpoints[j][0])
            return rt_error(RT_ERR_ARG, "gossip: no endpoint for rank %d", j);
        g->out[j] = rt_zsock_new(g->zctx, ZMQ_PUSH, 0, GOSSIP_HWM);
        if (!g->out[j])
            return RT_ERR_NET;
        if (strchr(endpoints[j], '[')) {
            int one = 1;
            zmq_setsockopt(g->out[j], ZMQ_IPV6, &one, sizeof one);
        }
        RT_TRY(rt_link_client(g->curve, g->out[j], g->keys ? g->keys[j] : NULL));
        RT_TRY(rt_zsock_connect(g->out[j], endpoints[j]));
    }
    if (g->secret) {
        int rc = rt_gshm_open(&g->shm, g->run, g->gen, g->secret, SHM_OPEN_TIMEOUT);
        if (rc < 0)
            return rt_error_wrap(rc, "gossip rank %d", g->rank);
    }
    g->connected = true;
    return RT_OK;
}

int rt_gossip_shm_links(const rt_gossip *g)
{
    check(g);
    int n = 0;
    for (int j = 0; j < g->world; j++)
        n += rt_gshm_linked(&g->shm, j);
    return n;
}

void rt_gossip_stats(const rt_gossip *g, struct rt_gossip_stats *s)
{
    check(g);
    *s = g->st;
    s->dropped = g->drops.total;
}

bool rt_gossip_outstanding(const rt_gossip *g)
{
    check(g);
    return g->mine.active;
}

/* ---- sending ------------------------------------------------------------------------ */

static int encode(rt_gossip *g, enum kind k, uint64_t seq, uint64_t epoch)
{
    rt_wire_begin(&g->w, g->run, "gossip", 6);
    rt_wire_put_uint(&g->w, "gen", g->gen);
    rt_wire_put_str(&g->w, "kind", kind_names[k]);
    rt_wire_put_uint(&g->w, "from", (uint64_t)g->rank);
    rt_wire_put_uint(&g->w, "seq", seq);
    rt_wire_put_uint(&g->w, "epoch", epoch);
    rt_wire_put_uint(&g->w, "n", g->n);
    return rt_wire_end(&g->w);
}

/* One message (header, and the payload unless NULL) without blocking:
 * 1 queued, 0 it would block (nothing queued: libzmq queues a multipart
 * message whole or not at all, and so does a shared memory queue), < 0
 * error. */
static int send_nb(rt_gossip *g, int peer, enum kind k, uint64_t seq, uint64_t epoch,
                   const void *payload)
{
    if (rt_gshm_linked(&g->shm, peer)) {
        struct rt_gshm_msg m = {.kind = (uint32_t)k, .from = (uint32_t)g->rank, .gen = g->gen,
                                .seq = seq, .epoch = epoch, .n = g->n};
        return rt_gshm_send(&g->shm, peer, &m, payload);
    }
    RT_TRY(encode(g, k, seq, epoch));
    void *s = g->out[peer];
    int flags = ZMQ_DONTWAIT | (payload ? ZMQ_SNDMORE : 0);
    for (;;) {
        if (zmq_send(s, g->w.data, g->w.len, flags) >= 0)
            break;
        if (errno == EAGAIN)
            return 0;
        if (errno != EINTR)
            return rt_error(RT_ERR_NET, "gossip: send to rank %d: %s", peer, zmq_strerror(errno));
    }
    if (!payload)
        return 1;
    for (;;) {
        if (zmq_send(s, payload, g->bytes, ZMQ_DONTWAIT) >= 0)
            return 1;
        if (errno == EAGAIN)
            return 0;
        if (errno != EINTR)
            return rt_error(RT_ERR_NET, "gossip: send to rank %d: %s", peer, zmq_strerror(errno));
    }
}

static int initiate(rt_gossip *g, const float *params)
{
    uint64_t k = rt_rng_below(&g->rng, (uint64_t)g->world - 1);
    int peer = (int)k >= g->rank ? (int)k + 1 : (int)k;
    uint64_t seq = g->seq + 1;
    memcpy(g->mine.copy, params, g->bytes);
    int rc = send_nb(g, peer, K_REQ, seq, g->epoch, g->mine.copy);
    if (rc <= 0)
        return rc; /* would block: not started, the next step tries again */
    g->seq = seq;
    g->mine.active = true;
    g->mine.peer = peer;
    g->mine.seq = seq;
    g->mine.epoch = g->epoch;
    g->mine.sent_at = rt_now();
    g->st.sent++;
    return RT_OK;
}

/* Give up the outstanding exchange, keeping its copy for a late reply. */
static int expire(rt_gossip *g, double now)
{
    if (!g->mine.active || now - g->mine.sent_at <= g->reply_timeout)
        return RT_OK;
    fprintf(stderr, "ragtag: [%s] no reply from rank %d to request %" PRIu64 " in %.1f s: "
                    "abandoned\n", g->who, g->mine.peer, g->mine.seq, now - g->mine.sent_at);
    g->st.abandoned++;
    if (!g->late.copy && !(g->late.copy = malloc(g->bytes))) {
        g->mine.active = false; /* no room to keep it: a late reply will be dropped */
        return RT_OK;
    }
    float *spare = g->late.copy;
    g->late = g->mine;
    g->mine.active = false;
    g->mine.copy = spare;
    return RT_OK;
}

/* ---- receiving ---------------------------------------------------------------------- */

/* What every message must be, whatever link brought it: of this
 * generation, a known kind, from another rank, for n parameters, with a
 * payload of n floats exactly when it is a request or a reply. */
static bool check_fields(rt_gossip *g, uint64_t gen, int k, const char *kind, uint64_t from,
                         uint64_t n, bool has_payload, size_t payload_bytes, char *why,
                         size_t cap)
{
    if (gen != g->gen) {
        snprintf(why, cap, "gossip of generation %" PRIu64 " (ours: %" PRIu64 ")", gen, g->gen);
        return false;
    }
    if (k < 0) {
        snprintf(why, cap, "gossip of unknown kind '%s'", kind);
        return false;
    }
    if (from >= (uint64_t)g->world || (int)from == g->rank) {
        snprintf(why, cap, "gossip '%s' claiming to come from rank %" PRIu64 " (this is rank %d "
                 "of %d)", kind, from, g->rank, g->world);
        return false;
    }
    if (n != g->n) {
        snprintf(why, cap, "gossip '%s' of %" PRIu64 " parameters (ours: %zu)", kind, n, g->n);
        return false;
    }
    if (has_payload != (k != K_DRAINED)) {
        snprintf(why, cap, "gossip '%s' %s a payload", kind, has_payload ? "with" : "without");
        return false;
    }
    if (has_payload && payload_bytes != g->bytes) {
        snprintf(why, cap, "gossip '%s' with a payload of %zu bytes (expected %zu)", kind,
                 payload_bytes, g->bytes);
        return false;
    }
    return true;
}

/* Check a ZeroMQ message completely; on failure `why` says what was wrong. */
static bool validate(rt_gossip *g, struct header *h, char *why, size_t cap)
{
    rt_wire_map m = rt_wire_root(&g->msg);
    if (g->fr.n < 1 || g->fr.truncated) {
        snprintf(why, cap, "a message of more than %d frames", RT_MAX_FRAMES);
        return false;
    }
    uint64_t gen, from, seq, epoch, n;
    char kind[16];
    if (rt_wire_parse(&g->msg, rt_zframe_data(&g->fr, 0), rt_zframe_size(&g->fr, 0), g->run,
                      false) < 0 ||
        (strcmp(g->msg.type, "gossip") != 0 &&
         rt_error(RT_ERR_FORMAT, "a '%s' message on the gossip inbox", g->msg.type) < 0) ||
        rt_wire_get_uint(m, "gen", 0, UINT64_MAX, &gen) < 0 ||
        rt_wire_get_str(m, "kind", 1, kind, sizeof kind) < 0 ||
        rt_wire_get_uint(m, "from", 0, (uint64_t)g->world - 1, &from) < 0 ||
        rt_wire_get_uint(m, "seq", 0, UINT64_MAX, &seq) < 0 ||
        rt_wire_get_uint(m, "epoch", 0, UINT64_MAX, &epoch) < 0 ||
        rt_wire_get_uint(m, "n", 0, UINT64_MAX, &n) < 0) {
        snprintf(why, cap, "%s", rt_error_detail());
        return false;
    }
    int k = -1;
    for (int i = 0; i < 3; i++)
        if (!strcmp(kind, kind_names[i]))
            k = i;
    if (g->fr.n > 2) {
        snprintf(why, cap, "gossip '%s' in %d frames (expected at most 2)", kind, g->fr.n);
        return false;
    }
    bool has_payload = g->fr.n == 2;
    if (!check_fields(g, gen, k, kind, from, n, has_payload,
                      has_payload ? rt_zframe_size(&g->fr, 1) : 0, why, cap))
        return false;
    h->kind = (enum kind)k;
    h->from = (int)from;
    h->seq = seq;
    h->epoch = epoch;
    return true;
}

/* The same for a message from a shared memory queue, which only `peer` fills. */
static bool validate_shm(rt_gossip *g, int peer, const struct rt_gshm_msg *m, size_t bytes,
                         struct header *h, char *why, size_t cap)
{
    int k = m->kind < 3 ? (int)m->kind : -1;
    char kind[16];
    snprintf(kind, sizeof kind, "%s", k >= 0 ? kind_names[k] : "?");
    if (!check_fields(g, m->gen, k, kind, m->from, m->n, bytes > 0, bytes, why, cap))
        return false;
    if ((int)m->from != peer) {
        snprintf(why, cap, "gossip '%s' claiming to come from rank %u on rank %d's queue", kind,
                 m->from, peer);
        return false;
    }
    h->kind = (enum kind)k;
    h->from = peer;
    h->seq = m->seq;
    h->epoch = m->epoch;
    return true;
}

/* The payload of a ZeroMQ message as an aligned array (libzmq may put small
 * frames at any offset of a shared buffer). */
static const float *zmq_payload(rt_gossip *g)
{
    const void *p = rt_zframe_data(&g->fr, 1);
    if ((uintptr_t)p % _Alignof(float) == 0)
        return p;
    memcpy(g->tmp, p, g->bytes);
    return g->tmp;
}

/* params := (params + theirs) / 2, answered with that average. 1 done, 0
 * the reply cannot be queued now (nothing changed), < 0 error. */
static int answer(rt_gossip *g, float *params, const struct header *h, const float *theirs)
{
    float *avg = g->tmp;
    for (size_t i = 0; i < g->n; i++)
        avg[i] = (params[i] + theirs[i]) * 0.5f; /* theirs may alias avg: same index */
    int rc = send_nb(g, h->from, K_REP, h->seq, h->epoch, avg);
    if (rc <= 0)
        return rc;
    memcpy(params, avg, g->bytes);
    g->st.answered++;
    return 1;
}

static void apply_delta(rt_gossip *g, float *params, const float *avg, const float *copy)
{
    for (size_t i = 0; i < g->n; i++)
        params[i] += avg[i] - copy[i];
}

/* With CURVE, the ZAP handler names each connection by its key: a message
 * counts only when it comes with the key of the rank it names. */
static bool from_rank(rt_gossip *g, int from)
{
    const char *uid = zmq_msg_gets(&g->fr.f[0], "User-Id");
    return g->keys && uid && !strcmp(uid, g->keys[from]);
}

/* What a valid message does: the number of averagings applied to params
 * (0 or 1), 0 with `why` set when it is dropped, or < 0 for an error of
 * this rank's own (never for a bad message). theirs: the payload, NULL
 * for "drained". */
static int act(rt_gossip *g, float *params, const struct header *h, const float *theirs,
               char *why, size_t cap)
{
    switch (h->kind) {
    case K_REQ: {
        if (h->epoch < g->epoch) {
            snprintf(why, cap, "a request of rank %d of epoch %" PRIu64 ", which every rank has "
                     "drained (ours: %" PRIu64 ")", h->from, h->epoch, g->epoch);
            return 0;
        }
        if (!g->out[h->from] && !rt_gshm_linked(&g->shm, h->from)) {
            snprintf(why, cap, "a request of rank %d before the peers were connected", h->from);
            return 0;
        }
        int rc = answer(g, params, h, theirs);
        if (rc == 0)
            g->st.refused++;
        return rc;
    }
    case K_REP:
        if (g->mine.active && h->from == g->mine.peer && h->seq == g->mine.seq) {
            apply_delta(g, params, theirs, g->mine.copy);
            g->mine.active = false;
            g->st.applied++;
            return 1;
        }
        if (g->late.active && h->from == g->late.peer && h->seq == g->late.seq) {
            apply_delta(g, params, theirs, g->late.copy);
            g->late.active = false;
            g->st.applied++;
            g->st.late++;
            fprintf(stderr, "ragtag: [%s] the reply of rank %d to abandoned request %" PRIu64
                            " came after all: applied\n", g->who, h->from, h->seq);
            return 1;
        }
        snprintf(why, cap, "a reply of rank %d to request %" PRIu64 ", which is not outstanding",
                 h->from, h->seq);
        return 0;
    case K_DRAINED:
        if (h->epoch < g->epoch || h->epoch + 1 <= g->drained[h->from]) {
            snprintf(why, cap, "rank %d drained epoch %" PRIu64 " again", h->from, h->epoch);
            return 0;
        }
        g->drained[h->from] = h->epoch + 1;
        return 0;
    }
    return 0;
}

/* The message in g->fr, from the ZeroMQ inbox. */
static int handle(rt_gossip *g, float *params)
{
    char why[320], peer[64];
    struct header h;
    why[0] = '\0';
    rt_zframes_peer(&g->fr, 0, peer, sizeof peer);
    if (!validate(g, &h, why, sizeof why))
        goto drop;
    if (g->curve && !from_rank(g, h.from)) {
        snprintf(why, sizeof why, "a message that says it is from rank %d on a connection "
                 "of another key", h.from);
        goto drop;
    }
    if (rt_gshm_linked(&g->shm, h.from)) { /* its messages keep their order in its queue */
        snprintf(why, sizeof why, "a message that says it is from rank %d, which sends "
                 "through shared memory", h.from);
        goto drop;
    }
    int rc = act(g, params, &h, h.kind == K_DRAINED ? NULL : zmq_payload(g), why, sizeof why);
    if (rc != 0 || !why[0])
        return rc;
drop:
    rt_wire_drop(&g->drops, peer, why);
    return 0;
}

/* The next message of a peer's shared memory queue, if any: 1 + the
 * averagings applied (0 or 1), 0 when the queue is empty, < 0 error. */
static int handle_shm(rt_gossip *g, float *params, int j)
{
    struct rt_gshm_msg m;
    const float *theirs;
    size_t bytes;
    char why[320], peer[32];
    why[0] = '\0';
    int rc = rt_gshm_peek(&g->shm, j, &m, &theirs, &bytes, why, sizeof why);
    if (rc <= 0)
        return rc;
    struct header h;
    rc = 0;
    if (!why[0] && validate_shm(g, j, &m, bytes, &h, why, sizeof why))
        rc = act(g, params, &h, theirs, why, sizeof why);
    rt_gshm_consume(&g->shm, j);
    if (rc < 0)
        return rc;
    if (why[0]) {
        snprintf(peer, sizeof peer, "rank %d (shared memory)", j);
        rt_wire_drop(&g->drops, peer, why);
    }
    return 1 + rc;
}

/* Take what the queues and the inbox hold (at most `max` messages). */
static int pump(rt_gossip *g, float *params, int max)
{
    int applied = 0, k = 0;
    for (int j = 0; j < g->world && g->shm.in; j++) {
        while (rt_gshm_linked(&g->shm, j) && k < max) {
            int rc = handle_shm(g, params, j);
            if (rc < 0)
                return rt_error_wrap(rc, "%s", g->who);
            if (rc == 0)
                break;
            applied += rc - 1;
            k++;
        }
    }
    for (; k < max; k++) {
        int rc = rt_zframes_recv(g->inbox, &g->fr, ZMQ_DONTWAIT);
        if (rc == 0 || rc == RT_ERR_INTERRUPTED)
            break;
        if (rc < 0)
            return rt_error_wrap(rc, "%s", g->who);
        rc = handle(g, params);
        if (rc < 0)
            return rt_error_wrap(rc, "%s", g->who);
        applied += rc;
    }
    return applied;
}

/* ---- the API ---------------------------------------------------------------------- */

int rt_gossip_step(rt_gossip *g, float *params, bool want)
{
    check(g);
    RT_ASSERT(params);
    g->clean_drain = false;
    if (g->world == 1)
        return 0;
    RT_ASSERT(g->connected);
    rt_gshm_unlink_attached(&g->shm);
    int applied = pump(g, params, STEP_MAX_MSGS(g->world));
    if (applied < 0)
        return applied;
    if (g->mine.active)
        RT_TRY(expire(g, rt_now()));
    if (want && !g->mine.active)
        RT_TRY(initiate(g, params));
    return applied;
}

static int drain_timeout(rt_gossip *g, uint64_t epoch, double timeout)
{
    char list[512];
    size_t len = 0;
    list[0] = '\0';
    int missing = 0;
    for (int j = 0; j < g->world; j++) {
        if (j == g->rank || g->drained[j] > epoch)
            continue;
        if (len + 16 < sizeof list)
            len += (size_t)snprintf(list + len, sizeof list - len, "%s%d", missing ? ", " : "",
                                    j);
        missing++;
    }
    if (g->mine.active)
        return rt_error(RT_ERR_TIMEOUT, "%s: draining epoch %" PRIu64 ": no reply from rank %d "
                        "in %.1f s; not heard 'drained' from rank%s %s", g->who, epoch,
                        g->mine.peer, timeout, missing == 1 ? "" : "s", list);
    return rt_error(RT_ERR_TIMEOUT, "%s: draining epoch %" PRIu64 ": not heard 'drained' from "
                    "rank%s %s in %.1f s", g->who, epoch, missing == 1 ? "" : "s", list, timeout);
}

int rt_gossip_drain(rt_gossip *g, float *params, uint64_t epoch, double timeout)
{
    check(g);
    RT_ASSERT(params);
    g->clean_drain = false;
    if (epoch < g->epoch)
        return rt_error(RT_ERR_ARG, "%s: epoch %" PRIu64 " is drained already (now in %" PRIu64
                        ")", g->who, epoch, g->epoch);
    if (g->world == 1) {
        g->epoch = epoch + 1;
        g->clean_drain = true;
        return RT_OK;
    }
    RT_ASSERT(g->connected);
    /* A drain that timed out may be called again (the caller polls for
     * aborts between calls): what was sent stays sent. */
    if (!g->draining || g->draining_epoch != epoch)
        memset(g->drained_sent, 0, (size_t)g->world * sizeof *g->drained_sent);
    g->draining = true;
    g->draining_epoch = epoch;
    double t0 = rt_now();
    for (;;) {
        int rc = pump(g, params, STEP_MAX_MSGS(g->world));
        if (rc < 0)
            return rc;
        double now = rt_now();
        if (g->mine.active)
            RT_TRY(expire(g, now));
        bool blocked = false, done = !g->mine.active;
        if (!g->mine.active) {
            for (int j = 0; j < g->world; j++) {
                if (j == g->rank || g->drained_sent[j])
                    continue;
                rc = send_nb(g, j, K_DRAINED, g->seq, epoch, NULL);
                if (rc < 0)
                    return rc;
                g->drained_sent[j] = rc == 1;
                blocked |= rc == 0;
            }
        }
        for (int j = 0; j < g->world && done; j++)
            if (j != g->rank && (!g->drained_sent[j] || g->drained[j] <= epoch))
                done = false;
        if (done)
            break;
        if (timeout > 0 && now - t0 > timeout)
            return drain_timeout(g, epoch, timeout);
        zmq_pollitem_t it = {.socket = g->inbox, .events = ZMQ_POLLIN};
        int wait_ms = blocked || g->shm.in ? DRAIN_POLL_SHM_MS : DRAIN_POLL_MS;
        if (zmq_poll(&it, 1, wait_ms) < 0 && errno != EINTR)
            return rt_error(RT_ERR_NET, "%s: poll: %s", g->who, zmq_strerror(errno));
    }
    g->epoch = epoch + 1;
    g->clean_drain = true;
    g->draining = false;
    return RT_OK;
}
