/* localring.c — a ring of forked local processes (see localring.h). */
#include "config.h"

#include "localring.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "status.h"
#include "transport.h"

static int write_all(int fd, const void *p, size_t n)
{
    const char *c = p;
    while (n) {
        ssize_t k = write(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

static int read_all(int fd, void *p, size_t n)
{
    char *c = p;
    while (n) {
        ssize_t k = read(fd, c, n);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        c += k;
        n -= (size_t)k;
    }
    return 0;
}

/* With o->curve, every link is CurveZMQ like a secured cluster's: a key
 * pair per rank, the members' keys admitted (bench: its cost). */
static rt_curve *child_curve(const struct rt_localring_opts *o, void *ctx, int rank,
                             char key[RT_KEY_LEN + 1])
{
    key[0] = '\0';
    if (!o->curve)
        return NULL;
    char who[32];
    snprintf(who, sizeof who, "rank %d", rank);
    struct rt_curve_config cc = {.zctx = ctx, .who = who, .unknown = "not a member",
                                 .defer_s = 5.0};
    if (rt_keypair_new(&cc.self) < 0)
        return NULL;
    snprintf(key, RT_KEY_LEN + 1, "%s", cc.self.pub);
    return rt_curve_new(&cc);
}

static int child(const struct rt_localring_opts *o, int rank, int to_parent, int from_parent,
                 int out_fd, rt_localring_fn fn, void *arg)
{
    static struct rt_membership ms; /* large: not on the stack */
    char run[RT_RUN_ID_LEN + 1], key[RT_KEY_LEN + 1];
    void *ctx = zmq_ctx_new();
    rt_curve *curve = child_curve(o, ctx, rank, key);
    void *inbox = rt_zsock_new(ctx, ZMQ_PULL, (int64_t)RT_RING_MAX_CHUNK, 4096);
    char ep[RT_ENDPOINT_MAX];
    snprintf(ep, sizeof ep, "tcp://127.0.0.%d:*", rank + 1);
    if ((o->curve && !curve) || !inbox || rt_curve_server(curve, inbox) < 0 ||
        rt_zsock_bind(inbox, ep, ep, sizeof ep) < 0) {
        fprintf(stderr, "rank %d: %s\n", rank, rt_error_detail());
        return 3;
    }
    if (write_all(to_parent, ep, sizeof ep) < 0 || write_all(to_parent, key, sizeof key) < 0 ||
        read_all(from_parent, &ms, sizeof ms) < 0 || read_all(from_parent, run, sizeof run) < 0)
        return 3;
    for (int r = 0; curve && r < ms.n; r++)
        rt_curve_allow_one(curve, ms.m[r].key);
    struct rt_ring_config rc = {
        .run = run,
        .members = &ms,
        .rank = rank,
        .zctx = ctx,
        .inbox = &inbox,
        .allow_shm = o->links != RT_LINKS_TCP,
        .chunk_bytes = o->chunk_bytes,
        .stall_timeout = o->stall_timeout > 0 ? o->stall_timeout : 60.0,
        .curve = curve,
        .zmq_data = o->zmq_data,
    };
    rt_ring *ring = rt_ring_new(&rc);
    if (!ring) {
        fprintf(stderr, "rank %d: %s\n", rank, rt_error_detail());
        return 3;
    }
    int status = fn(ring, rank, out_fd, arg);
    rt_ring_destroy(&ring);
    rt_zsock_close(&inbox);
    rt_curve_destroy(&curve);
    zmq_ctx_term(ctx);
    return status;
}

int rt_localring_run(const struct rt_localring_opts *o, rt_localring_fn fn, void *arg,
                     rt_localring_hook hook, void *hook_arg, void *results, size_t cap)
{
    int n = o->n;
    RT_ASSERT(n >= 1 && n <= 64);
    static struct rt_membership ms;
    memset(&ms, 0, sizeof ms);
    pid_t pid[64];
    int up[64][2], down[64][2], out[64][2];
    char hid[RT_HOST_ID_MAX];
    rt_net_host_id(hid, sizeof hid);
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        if (pipe(up[r]) || pipe(down[r]) || pipe(out[r]))
            return rt_error(RT_ERR_IO, "pipe: %s", strerror(errno));
        pid[r] = fork();
        if (pid[r] < 0)
            return rt_error(RT_ERR_IO, "fork: %s", strerror(errno));
        if (pid[r] == 0) {
            close(up[r][0]);
            close(down[r][1]);
            close(out[r][0]);
            _exit(child(o, r, up[r][1], down[r][0], out[r][1], fn, arg));
        }
        close(up[r][1]);
        close(down[r][0]);
        close(out[r][1]);
    }
    char run[RT_RUN_ID_LEN + 1];
    rt_wire_new_run_id(run);
    ms.gen = 1;
    ms.n = n;
    int rc = RT_OK;
    for (int r = 0; r < n; r++) {
        struct rt_member *m = &ms.m[r];
        if (read_all(up[r][0], m->endpoint, sizeof m->endpoint) < 0 ||
            read_all(up[r][0], m->key, sizeof m->key) < 0) {
            rc = rt_error(RT_ERR_NET, "rank %d died before reporting its endpoint", r);
            break;
        }
        snprintf(m->id, sizeof m->id, "%016llx", (unsigned long long)rt_net_nonce());
        snprintf(m->shm, sizeof m->shm, "%016llx", (unsigned long long)rt_net_nonce());
        snprintf(m->link, sizeof m->link, "%016llx%016llx", (unsigned long long)rt_net_nonce(),
                 (unsigned long long)rt_net_nonce());
        snprintf(m->name, sizeof m->name, "rank%d", r);
        snprintf(m->host, sizeof m->host, "localhost");
        if (o->links == RT_LINKS_SHM)
            snprintf(m->host_id, sizeof m->host_id, "%s", hid);
        else if (o->links == RT_LINKS_TCP) /* other hosts for the links, this machine's cores */
            snprintf(m->host_id, sizeof m->host_id, "%.*s/fake-host-%d",
                     (int)strcspn(hid, "/"), hid, r);
        else
            snprintf(m->host_id, sizeof m->host_id, "%.60s-pair-%d", hid, r / 2);
        snprintf(m->backend, sizeof m->backend, "cpu");
    }
    if (rc == RT_OK) {
        if (hook)
            hook(&ms, run, hook_arg);
        for (int r = 0; r < n; r++)
            if (write_all(down[r][1], &ms, sizeof ms) < 0 ||
                write_all(down[r][1], run, sizeof run) < 0)
                rc = rt_error(RT_ERR_NET, "rank %d died before getting the member list", r);
    }
    if (rc < 0)
        for (int r = 0; r < n; r++)
            kill(pid[r], SIGKILL);
    for (int r = 0; r < n; r++) {
        if (results && rc == RT_OK)
            read_all(out[r][0], (char *)results + (size_t)r * cap, cap);
        close(up[r][0]);
        close(down[r][1]);
        close(out[r][0]);
    }
    for (int r = 0; r < n; r++) {
        int st;
        while (waitpid(pid[r], &st, 0) < 0 && errno == EINTR)
            ;
        if (rc == RT_OK && !(WIFEXITED(st) && WEXITSTATUS(st) == 0))
            rc = rt_error(RT_ERR_NET, "rank %d of %d %s %d", r, n,
                          WIFEXITED(st) ? "exited with status" : "was killed by signal",
                          WIFEXITED(st) ? WEXITSTATUS(st) : WTERMSIG(st));
    }
    return rc;
}
