/* status_http.c — the status page's HTTP server (status_http.h), on
 * libmicrohttpd: one internal thread polls every connection (epoll), so a
 * slow client holds a connection slot and nothing else, and the training
 * never waits for a client: the coordinator only writes the snapshot.
 *
 * Bounds (hostile clients): CONN_LIMIT connections, PER_IP of them from
 * one address, HEADER_LIMIT bytes of request (longer headers get 431),
 * IDLE_TIMEOUT seconds of silence, RATE requests a second on one
 * connection (429 and the connection closes), GET and HEAD only. The data
 * is rendered at most every RENDER_EVERY seconds, whatever the number of
 * requests, so the snapshot's lock is taken at most that often. */
#include "config.h"

#include "status_http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "status.h"

#ifdef RT_HAVE_HTTP
#include <microhttpd.h>

#define CONN_LIMIT 64
#define PER_IP 16
#define HEADER_LIMIT 16384
#define IDLE_TIMEOUT 10
#define RATE 20           /* requests per second on one connection */
#define RENDER_EVERY 0.25 /* seconds */

/* The embedded files (status_assets.c, made at build time). */
extern const unsigned char rt_asset_page_html[], rt_asset_page_js[], rt_asset_chart_js[];
extern const size_t rt_asset_page_html_len, rt_asset_page_js_len, rt_asset_chart_js_len;

struct cached {
    char *text;
    size_t len;
    double at;
};

struct rt_http {
    struct MHD_Daemon *d;
    int fd;
    bool loopback;
    rt_snap *snap;
    char token[80];
    /* only the server's thread touches these */
    struct rt_snap_copy *copy;
    struct cached json, prom;
};

/* Per connection: its request rate. */
struct conn {
    double window;
    int requests;
};

bool rt_http_available(void) { return true; }

/* ---- the listening socket ------------------------------------------------------------ */

/* "PORT", ":PORT", "HOST:PORT", "[V6]:PORT" into host and port. */
static int split_addr(const char *addr, char *host, size_t cap, char *port, size_t pcap)
{
    const char *colon = strrchr(addr, ':');
    const char *p = colon ? colon + 1 : addr;
    size_t hl = colon ? (size_t)(colon - addr) : 0;
    if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']')
        addr++, hl -= 2;
    if (!*p || strspn(p, "0123456789") != strlen(p) || strlen(p) > 5 || atol(p) > 65535 ||
        hl >= cap)
        return rt_error(RT_ERR_CONFIG, "--http '%s': expected PORT, ADDRESS:PORT or [V6]:PORT",
                        addr);
    snprintf(host, cap, "%.*s", (int)hl, addr);
    if (!host[0])
        snprintf(host, cap, "127.0.0.1");
    snprintf(port, pcap, "%s", p);
    return RT_OK;
}

static bool addr_is_loopback(const struct sockaddr *sa)
{
    if (sa->sa_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)sa)->sin_addr.s_addr) >> 24) == 127;
    return sa->sa_family == AF_INET6 &&
           IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)sa)->sin6_addr);
}

/* Our own socket, so that a busy port or a bad address says why. */
static int listen_on(rt_http *h, const char *addr, char *url, size_t cap)
{
    char host[256], port[8];
    RT_TRY(split_addr(addr, host, sizeof host, port, sizeof port));
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
    int e = getaddrinfo(host, port, &hints, &ai);
    if (e != 0)
        return rt_error(RT_ERR_CONFIG, "--http %s: %s", addr, gai_strerror(e));
    h->fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (h->fd < 0 || setsockopt(h->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(h->fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(h->fd, 32) < 0) {
        e = errno;
        freeaddrinfo(ai);
        return rt_error(RT_ERR_NET, "--http %s: cannot listen there: %s", addr, strerror(e));
    }
    h->loopback = addr_is_loopback(ai->ai_addr);
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    char num[INET6_ADDRSTRLEN] = "?";
    int bound = atoi(port);
    if (getsockname(h->fd, (struct sockaddr *)&ss, &sl) == 0) {
        bool v6 = ss.ss_family == AF_INET6;
        const void *a = v6 ? (const void *)&((struct sockaddr_in6 *)&ss)->sin6_addr
                           : (const void *)&((struct sockaddr_in *)&ss)->sin_addr;
        inet_ntop(ss.ss_family, a, num, sizeof num);
        bound = ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                         : ((struct sockaddr_in *)&ss)->sin_port);
        snprintf(url, cap, v6 ? "http://[%s]:%d/" : "http://%s:%d/", num, bound);
    }
    freeaddrinfo(ai);
    return RT_OK;
}

/* ---- requests ------------------------------------------------------------------------ */

static bool same(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    unsigned char d = la != lb;
    for (size_t i = 0; i < la && i < lb; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0; /* the time depends on the lengths only */
}

/* A bearer token, basic auth's password (any user name) or ?token=. */
static bool authorized(rt_http *h, struct MHD_Connection *c)
{
    if (!h->token[0])
        return true;
    const char *q = MHD_lookup_connection_value(c, MHD_GET_ARGUMENT_KIND, "token");
    if (q && same(q, h->token))
        return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (a && !strncasecmp(a, "Bearer ", 7))
        return same(a + 7, h->token);
    char *pass = NULL, *user = MHD_basic_auth_get_username_password(c, &pass);
    bool ok = pass && same(pass, h->token);
    MHD_free(user);
    MHD_free(pass);
    return ok;
}

static enum MHD_Result reply(struct MHD_Connection *c, unsigned code, const char *type,
                             const void *body, size_t len, enum MHD_ResponseMemoryMode mode,
                             const char *cache)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(len, (void *)body, mode);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, cache);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; style-src 'self' 'unsafe-inline'; "
                            "img-src 'self' data:; frame-ancestors 'none'");
    if (code == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer realm=\"ragtag\"");
    if (code == MHD_HTTP_TOO_MANY_REQUESTS)
        MHD_add_response_header(r, MHD_HTTP_HEADER_CONNECTION, "close");
    if (code == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    enum MHD_Result ok = MHD_queue_response(c, code, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result text(struct MHD_Connection *c, unsigned code, const char *msg)
{
    return reply(c, code, "text/plain; charset=utf-8", msg, strlen(msg), MHD_RESPMEM_PERSISTENT,
                 "no-store");
}

/* The JSON or Prometheus text. Both are rendered from one copy of the
 * snapshot, at most every RENDER_EVERY s: /api/status and /metrics then
 * agree, whatever the number of requests. */
static const struct cached *render(rt_http *h, bool json)
{
    struct cached *k = json ? &h->json : &h->prom;
    double now = rt_now();
    if (k->text && now - k->at < RENDER_EVERY)
        return k;
    rt_snap_copy(h->snap, h->copy);
    double wall = rt_snap_now();
    char *t[2] = {rt_snap_json(h->copy, wall), rt_snap_prometheus(h->copy, wall)};
    struct cached *to[2] = {&h->json, &h->prom};
    for (int i = 0; i < 2; i++) {
        if (!t[i])
            continue; /* no memory: the older text stays */
        free(to[i]->text);
        to[i]->text = t[i];
        to[i]->len = strlen(t[i]);
        to[i]->at = now;
    }
    return k->text ? k : NULL;
}

static enum MHD_Result data(rt_http *h, struct MHD_Connection *c, bool json)
{
    if (!authorized(h, c))
        return text(c, MHD_HTTP_UNAUTHORIZED,
                    "this cluster uses credentials: give its join token (Authorization: Bearer "
                    "TOKEN, or basic auth with the token as password)\n");
    const struct cached *k = render(h, json);
    if (!k)
        return text(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "out of memory\n");
    return reply(c, MHD_HTTP_OK,
                 json ? "application/json" : "text/plain; version=0.0.4; charset=utf-8", k->text,
                 k->len, MHD_RESPMEM_MUST_COPY, "no-store");
}

/* Too many requests on this connection within a second. */
static bool too_fast(struct MHD_Connection *c)
{
    const union MHD_ConnectionInfo *i = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    struct conn *k = i ? i->socket_context : NULL;
    if (!k)
        return false;
    double now = rt_now();
    if (now - k->window >= 1.0) {
        k->window = now;
        k->requests = 0;
    }
    return ++k->requests > RATE;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload_data, size_t *upload_size, void **req)
{
    rt_http *h = cls;
    static int seen; /* any non-NULL mark: the headers are in */
    if (!*req) {
        *req = &seen;
        return MHD_YES;
    }
    if (*upload_size) { /* a body to a GET: not read */
        *upload_size = 0;
        return MHD_YES;
    }
    if (strcmp(method, MHD_HTTP_METHOD_GET) && strcmp(method, MHD_HTTP_METHOD_HEAD))
        return text(c, MHD_HTTP_METHOD_NOT_ALLOWED, "GET or HEAD only\n");
    if (too_fast(c))
        return text(c, MHD_HTTP_TOO_MANY_REQUESTS, "too many requests on this connection\n");
    if (!strcmp(url, "/") || !strcmp(url, "/index.html"))
        return reply(c, MHD_HTTP_OK, "text/html; charset=utf-8", rt_asset_page_html,
                     rt_asset_page_html_len, MHD_RESPMEM_PERSISTENT, "no-cache");
    if (!strcmp(url, "/page.js"))
        return reply(c, MHD_HTTP_OK, "text/javascript; charset=utf-8", rt_asset_page_js,
                     rt_asset_page_js_len, MHD_RESPMEM_PERSISTENT, "no-cache");
    if (!strcmp(url, "/chart.js") && rt_asset_chart_js_len)
        return reply(c, MHD_HTTP_OK, "text/javascript; charset=utf-8", rt_asset_chart_js,
                     rt_asset_chart_js_len, MHD_RESPMEM_PERSISTENT, "max-age=86400");
    if (!strcmp(url, "/api/status"))
        return data(h, c, true);
    if (!strcmp(url, "/metrics"))
        return data(h, c, false);
    return text(c, MHD_HTTP_NOT_FOUND, "not found: this server has /, /api/status and /metrics\n");
}

static void on_connection(void *cls, struct MHD_Connection *c, void **ctx,
                          enum MHD_ConnectionNotificationCode what)
{
    if (what == MHD_CONNECTION_NOTIFY_STARTED)
        *ctx = calloc(1, sizeof(struct conn)); /* NULL: no rate limit, still served */
    else {
        free(*ctx);
        *ctx = NULL;
    }
}

/* libmicrohttpd's own complaints (a client that sent junk): not worth a
 * line each on the coordinator's terminal. */
static void mhd_quiet(void *cls, const char *fmt, va_list ap) {}

rt_http *rt_http_start(const char *addr, rt_snap *snap, const char *token, char *url,
                       size_t url_cap)
{
    rt_http *h = calloc(1, sizeof *h);
    if (!h || !(h->copy = malloc(sizeof *h->copy))) {
        free(h);
        rt_error(RT_ERR_NOMEM, "no memory for the status page");
        return NULL;
    }
    h->fd = -1;
    h->snap = snap;
    snprintf(h->token, sizeof h->token, "%s", token ? token : "");
    if (listen_on(h, addr, url, url_cap) < 0) {
        rt_http_stop(&h);
        return NULL;
    }
    h->d = MHD_start_daemon(
        MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_EPOLL, 0, NULL, NULL, on_request, h,
        MHD_OPTION_LISTEN_SOCKET, h->fd, MHD_OPTION_CONNECTION_LIMIT, (unsigned)CONN_LIMIT,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)PER_IP,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, (size_t)HEADER_LIMIT,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT,
        MHD_OPTION_NOTIFY_CONNECTION, on_connection, NULL,
        MHD_OPTION_EXTERNAL_LOGGER, mhd_quiet, NULL, MHD_OPTION_END);
    if (!h->d) {
        rt_error(RT_ERR_NET, "--http %s: libmicrohttpd could not start its server", addr);
        rt_http_stop(&h);
        return NULL;
    }
    return h;
}

bool rt_http_is_loopback(const rt_http *h) { return h->loopback; }

void rt_http_stop(rt_http **hp)
{
    rt_http *h = *hp;
    if (!h)
        return;
    if (h->d)
        MHD_stop_daemon(h->d); /* joins its thread */
    if (h->fd >= 0)
        close(h->fd);
    free(h->json.text);
    free(h->prom.text);
    free(h->copy);
    free(h);
    *hp = NULL;
}

#else /* no libmicrohttpd */

bool rt_http_available(void) { return false; }

rt_http *rt_http_start(const char *addr, rt_snap *snap, const char *token, char *url,
                       size_t url_cap)
{
    rt_error(RT_ERR_UNSUPPORTED, "--http: this ragtag was built without the status page; "
                                 "install the Debian package libmicrohttpd-dev, then run "
                                 "./configure and make again");
    return NULL;
}

bool rt_http_is_loopback(const rt_http *h) { return true; }

void rt_http_stop(rt_http **h) { *h = NULL; }

#endif
