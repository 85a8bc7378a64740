/* transport.c — ZeroMQ sockets, frames and addresses (see transport.h). */
#include "config.h"

#include "transport.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "net.h"
#include "status.h"

/* One option of a new socket; false with the detail naming it. */
static bool set_option(void *s, int option, const char *name, const void *v, size_t n)
{
    if (zmq_setsockopt(s, option, v, n) == 0)
        return true;
    rt_error(RT_ERR_NET, "cannot set %s on a new ZeroMQ socket: %s", name, zmq_strerror(errno));
    return false;
}

void *rt_zsock_new(void *ctx, int type, int64_t max_frame, int hwm)
{
    void *s = zmq_socket(ctx, type);
    if (!s) {
        rt_error(RT_ERR_NET, "cannot create a ZeroMQ socket: %s", zmq_strerror(errno));
        return NULL;
    }
    /* Reconnect quickly at first (a worker started before its coordinator),
     * backing off to 1 s. */
    int zero = 0, ivl = 100, ivl_max = 1000;
    if (set_option(s, ZMQ_LINGER, "ZMQ_LINGER", &zero, sizeof zero) &&
        (max_frame <= 0 ||
         set_option(s, ZMQ_MAXMSGSIZE, "ZMQ_MAXMSGSIZE", &max_frame, sizeof max_frame)) &&
        set_option(s, ZMQ_SNDHWM, "ZMQ_SNDHWM", &hwm, sizeof hwm) &&
        set_option(s, ZMQ_RCVHWM, "ZMQ_RCVHWM", &hwm, sizeof hwm) &&
        set_option(s, ZMQ_RECONNECT_IVL, "ZMQ_RECONNECT_IVL", &ivl, sizeof ivl) &&
        set_option(s, ZMQ_RECONNECT_IVL_MAX, "ZMQ_RECONNECT_IVL_MAX", &ivl_max, sizeof ivl_max))
        return s;
    zmq_close(s);
    return NULL;
}

void rt_zsock_close(void **sock)
{
    if (sock && *sock) {
        zmq_close(*sock);
        *sock = NULL;
    }
}

int rt_zsock_bind(void *sock, const char *endpoint, char *actual, size_t cap)
{
    if (zmq_bind(sock, endpoint) != 0) {
        int e = errno; /* kept for the caller (EADDRINUSE: coord_socket.c retries) */
        rt_error(RT_ERR_NET, "cannot listen on %s: %s", endpoint, zmq_strerror(e));
        errno = e;
        return RT_ERR_NET;
    }
    if (actual) {
        char buf[RT_ENDPOINT_MAX];
        size_t n = sizeof buf;
        if (zmq_getsockopt(sock, ZMQ_LAST_ENDPOINT, buf, &n) != 0)
            return rt_error(RT_ERR_NET, "cannot read the endpoint bound for %s", endpoint);
        buf[sizeof buf - 1] = '\0';
        if (strlen(buf) >= cap)
            return rt_error(RT_ERR_NET, "endpoint %s is too long", buf);
        memmove(actual, buf, strlen(buf) + 1);
    }
    return RT_OK;
}

int rt_zsock_connect(void *sock, const char *endpoint)
{
    if (zmq_connect(sock, endpoint) != 0)
        return rt_error(RT_ERR_NET, "cannot connect to %s: %s", endpoint, zmq_strerror(errno));
    return RT_OK;
}

void rt_zframes_init(rt_zframes *fr)
{
    for (int i = 0; i < RT_MAX_FRAMES; i++)
        zmq_msg_init(&fr->f[i]);
    fr->n = 0;
    fr->truncated = false;
}

void rt_zframes_close(rt_zframes *fr)
{
    for (int i = 0; i < RT_MAX_FRAMES; i++)
        zmq_msg_close(&fr->f[i]);
    fr->n = 0;
}

int rt_zframes_recv(void *sock, rt_zframes *fr, int flags)
{
    for (int i = 0; i < fr->n; i++) {
        zmq_msg_close(&fr->f[i]);
        zmq_msg_init(&fr->f[i]);
    }
    fr->n = 0;
    fr->truncated = false;
    for (;;) {
        zmq_msg_t *m = &fr->f[fr->n < RT_MAX_FRAMES ? fr->n : RT_MAX_FRAMES - 1];
        if (fr->n >= RT_MAX_FRAMES) {
            zmq_msg_close(m);
            zmq_msg_init(m);
        }
        if (zmq_msg_recv(m, sock, fr->n == 0 ? flags : 0) < 0) {
            if (errno == EAGAIN && fr->n == 0)
                return 0;
            if (errno == EINTR && fr->n == 0)
                return rt_error(RT_ERR_INTERRUPTED, "interrupted");
            if (errno == EINTR)
                continue;
            return rt_error(RT_ERR_NET, "receive failed: %s", zmq_strerror(errno));
        }
        if (fr->n < RT_MAX_FRAMES)
            fr->n++;
        else
            fr->truncated = true;
        if (!zmq_msg_more(m))
            break;
    }
    return 1;
}

void rt_zframes_peer(rt_zframes *fr, int i, char *out, size_t cap)
{
    const char *a = fr->n > i ? zmq_msg_gets(&fr->f[i], "Peer-Address") : NULL;
    snprintf(out, cap, "%s", a ? a : "");
}

int rt_zsend(void *sock, const void *data, size_t n, bool more)
{
    for (;;) {
        if (zmq_send(sock, data, n, more ? ZMQ_SNDMORE : 0) >= 0)
            return RT_OK;
        if (errno != EINTR)
            return rt_error(RT_ERR_NET, "send failed: %s", zmq_strerror(errno));
    }
}

int rt_zsend_zc(void *sock, const void *data, size_t n, bool more, zmq_free_fn *done, void *hint)
{
    zmq_msg_t m;
    if (zmq_msg_init_data(&m, (void *)data, n, done, hint) != 0)
        return rt_error(RT_ERR_NOMEM, "zmq_msg_init_data: %s", zmq_strerror(errno));
    for (;;) {
        if (zmq_msg_send(&m, sock, more ? ZMQ_SNDMORE : 0) >= 0)
            return RT_OK;
        if (errno != EINTR) {
            int e = errno;
            zmq_msg_close(&m); /* calls `done` */
            return rt_error(RT_ERR_NET, "send failed: %s", zmq_strerror(e));
        }
    }
}

int rt_zsend_msg(void *sock, const rt_wire_writer *w, const void *const *extra,
                 const size_t *extra_n, int nextra)
{
    RT_TRY(rt_zsend(sock, w->data, w->len, nextra > 0));
    for (int i = 0; i < nextra; i++)
        RT_TRY(rt_zsend(sock, extra[i], extra_n[i], i + 1 < nextra));
    return RT_OK;
}

/* ---- addresses ------------------------------------------------------------------- */

int rt_net_endpoint_host(const char *endpoint, char *host, size_t cap)
{
    const char *p = strstr(endpoint, "://");
    if (!p)
        return rt_error(RT_ERR_CONFIG, "'%s' is not an endpoint (expected tcp://HOST:PORT)",
                        endpoint);
    p += 3;
    const char *end;
    if (*p == '[') {
        p++;
        end = strchr(p, ']');
    } else {
        end = strrchr(p, ':');
    }
    if (!end || end == p || (size_t)(end - p) >= cap)
        return rt_error(RT_ERR_CONFIG, "'%s': expected tcp://HOST:PORT", endpoint);
    /* tcp://iface;host:port — the host is after the semicolon */
    const char *semi = memchr(p, ';', (size_t)(end - p));
    if (semi)
        p = semi + 1;
    snprintf(host, cap, "%.*s", (int)(end - p), p);
    return RT_OK;
}

int rt_net_route_addr(const char *endpoint, char *ip, size_t cap)
{
    if (strncmp(endpoint, "tcp://", 6) != 0) {
        snprintf(ip, cap, "127.0.0.1");
        return RT_OK;
    }
    char host[256];
    RT_TRY(rt_net_endpoint_host(endpoint, host, sizeof host));
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_DGRAM}, *res = NULL;
    int g = getaddrinfo(host, "9", &hints, &res);
    if (g != 0)
        return rt_error(RT_ERR_NET, "cannot resolve %s: %s", host, gai_strerror(g));
    int rc = RT_ERR_NET;
    for (struct addrinfo *a = res; a; a = a->ai_next) {
        int fd = socket(a->ai_family, SOCK_DGRAM, 0);
        if (fd < 0)
            continue;
        struct sockaddr_storage local;
        socklen_t ln = sizeof local;
        if (connect(fd, a->ai_addr, a->ai_addrlen) == 0 &&
            getsockname(fd, (struct sockaddr *)&local, &ln) == 0) {
            const void *addr = local.ss_family == AF_INET
                                   ? (const void *)&((struct sockaddr_in *)&local)->sin_addr
                                   : (const void *)&((struct sockaddr_in6 *)&local)->sin6_addr;
            if (inet_ntop(local.ss_family, addr, ip, (socklen_t)cap))
                rc = RT_OK;
        }
        close(fd);
        if (rc == RT_OK)
            break;
    }
    freeaddrinfo(res);
    if (rc < 0)
        return rt_error(RT_ERR_NET, "no interface routes to %s (give --advertise HOST)", host);
    return RT_OK;
}

void rt_net_host_id(char *out, size_t cap)
{
    char boot[64] = "noboot";
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f) {
        if (fgets(boot, sizeof boot, f))
            boot[strcspn(boot, "\n")] = '\0';
        fclose(f);
    }
    struct stat st;
    if (stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode))
        snprintf(out, cap, "%.40s/%llx:%llx", boot, (unsigned long long)st.st_dev,
                 (unsigned long long)st.st_ino);
    else /* no shared memory here: an id nobody else has */
        snprintf(out, cap, "%.40s/noshm-%d-%llx", boot, (int)getpid(),
                 (unsigned long long)rt_net_nonce());
}

void rt_net_host_name(char *out, size_t cap)
{
    char h[256];
    if (gethostname(h, sizeof h) != 0)
        snprintf(h, sizeof h, "unknown");
    h[sizeof h - 1] = '\0';
    snprintf(out, cap, "%s", h);
}

uint64_t rt_net_nonce(void)
{
    uint64_t v;
    if (getrandom(&v, sizeof v, 0) == (ssize_t)sizeof v)
        return v;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    v = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ ((uint64_t)getpid() << 32) ^
        (uint64_t)ts.tv_sec;
    return v;
}

bool rt_net_available(void) { return true; }
