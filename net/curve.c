/* curve.c — CurveZMQ keys and the ZAP handler thread (see curve.h). */
#include "config.h"

#include "curve.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <zmq.h>

#include "clock.h"
#include "status.h"

#define CURVE_TAG 0x43555256u
#define CURVE_DEAD 0xdeadbeefu
#define ZAP_ENDPOINT "inproc://zeromq.zap.01"
#define MAX_PENDING 64
#define MAX_SEEN 64
#define LOG_EVERY 60.0 /* seconds: one refusal line per address */

/* A ZAP request waiting for the allow-list to grow. */
struct pending {
    unsigned char rid[64];
    size_t rid_len;
    char req_id[64];
    size_t req_len;
    char key[RT_KEY_LEN + 1];
    char secret[RT_LINK_SECRET_LEN + 1]; /* PLAIN (token links): the password given */
    bool plain;
    char addr[64];
    double since;
};

/* An admitted client: its key and, for token links, its link secret. */
struct admitted {
    char key[RT_KEY_LEN + 1];
    char secret[RT_LINK_SECRET_LEN + 1];
};

/* Addresses refused lately: one log line per address per minute. */
struct seen {
    char addr[64];
    double last;
    long quiet;
};

struct rt_curve {
    uint32_t tag;
    void *zctx;
    struct rt_keypair self;
    char who[96], unknown[200];
    double defer;
    bool quiet;
    pthread_t thread;
    bool started;
    int wake[2]; /* written when the allow-list changes or the thread must end */
    atomic_int quit;
    atomic_long refused;
    pthread_mutex_t mu; /* guards keys */
    struct admitted *keys;
    int nkeys, cap;
    /* token links (--link-security token): this process's link secret */
    bool token_links;
    char my_secret[RT_LINK_SECRET_LEN + 1];
    /* the thread's own */
    void *zap;
    struct pending pend[MAX_PENDING];
    int npend;
    struct seen seen[MAX_SEEN];
};

static void check(const rt_curve *c) { RT_ASSERT(c && c->tag == CURVE_TAG); }

/* ---- keys ------------------------------------------------------------------------------ */

bool rt_key_valid(const char *s)
{
    uint8_t raw[32];
    return s && strlen(s) == RT_KEY_LEN && zmq_z85_decode(raw, s) != NULL;
}

int rt_keypair_new(struct rt_keypair *k)
{
    if (zmq_curve_keypair(k->pub, k->sec) != 0)
        return rt_error(RT_ERR_UNSUPPORTED, "cannot make a CurveZMQ key pair: %s (is libzmq "
                                            "built with CURVE?)", zmq_strerror(errno));
    return RT_OK;
}

int rt_keypair_from_secret(const uint8_t secret[32], struct rt_keypair *k)
{
    if (!zmq_z85_encode(k->sec, secret, 32) || zmq_curve_public(k->pub, k->sec) != 0)
        return rt_error(RT_ERR_UNSUPPORTED, "cannot derive a CurveZMQ key: %s",
                        zmq_strerror(errno));
    return RT_OK;
}

/* ---- sockets ---------------------------------------------------------------------------- */

static int opt(void *s, int o, const char *name, const void *v, size_t n)
{
    if (zmq_setsockopt(s, o, v, n) == 0)
        return RT_OK;
    return rt_error(RT_ERR_NET, "cannot set %s: %s", name, zmq_strerror(errno));
}

int rt_curve_server(rt_curve *c, void *sock)
{
    if (!c)
        return RT_OK;
    check(c);
    int one = 1;
    RT_TRY(opt(sock, ZMQ_CURVE_SERVER, "ZMQ_CURVE_SERVER", &one, sizeof one));
    RT_TRY(opt(sock, ZMQ_CURVE_SECRETKEY, "ZMQ_CURVE_SECRETKEY", c->self.sec, RT_KEY_LEN));
    return opt(sock, ZMQ_ZAP_DOMAIN, "ZMQ_ZAP_DOMAIN", "ragtag", 6);
}

int rt_curve_client(rt_curve *c, void *sock, const char *server_pub, const struct rt_keypair *as)
{
    if (!c)
        return RT_OK;
    check(c);
    if (!rt_key_valid(server_pub))
        return rt_error(RT_ERR_NET, "no valid public key for the peer to connect to");
    const struct rt_keypair *k = as ? as : &c->self;
    RT_TRY(opt(sock, ZMQ_CURVE_SERVERKEY, "ZMQ_CURVE_SERVERKEY", server_pub, RT_KEY_LEN));
    RT_TRY(opt(sock, ZMQ_CURVE_PUBLICKEY, "ZMQ_CURVE_PUBLICKEY", k->pub, RT_KEY_LEN));
    return opt(sock, ZMQ_CURVE_SECRETKEY, "ZMQ_CURVE_SECRETKEY", k->sec, RT_KEY_LEN);
}

void rt_curve_token_links(rt_curve *c, const char *my_secret)
{
    check(c);
    pthread_mutex_lock(&c->mu);
    c->token_links = true;
    snprintf(c->my_secret, sizeof c->my_secret, "%s", my_secret);
    pthread_mutex_unlock(&c->mu);
}

bool rt_curve_token_links_on(const rt_curve *c) { return c && c->token_links; }

int rt_link_server(rt_curve *c, void *sock)
{
    if (!c || !c->token_links)
        return rt_curve_server(c, sock);
    int one = 1;
    RT_TRY(opt(sock, ZMQ_PLAIN_SERVER, "ZMQ_PLAIN_SERVER", &one, sizeof one));
    return opt(sock, ZMQ_ZAP_DOMAIN, "ZMQ_ZAP_DOMAIN", "ragtag", 6);
}

int rt_link_client(rt_curve *c, void *sock, const char *server_pub)
{
    if (!c || !c->token_links)
        return rt_curve_client(c, sock, server_pub, NULL);
    RT_TRY(opt(sock, ZMQ_PLAIN_USERNAME, "ZMQ_PLAIN_USERNAME", c->self.pub, RT_KEY_LEN));
    return opt(sock, ZMQ_PLAIN_PASSWORD, "ZMQ_PLAIN_PASSWORD", c->my_secret,
               strlen(c->my_secret));
}

const char *rt_curve_public(const rt_curve *c)
{
    check(c);
    return c->self.pub;
}

long rt_curve_refused(const rt_curve *c)
{
    check(c);
    return atomic_load(&c->refused);
}

/* ---- the allow-list --------------------------------------------------------------------- */

static void wake(rt_curve *c)
{
    ssize_t n = write(c->wake[1], "w", 1);
    (void)n; /* a full pipe has a wake-up in it already */
}

void rt_curve_allow(rt_curve *c, const char (*keys)[RT_KEY_LEN + 1],
                    const char (*secrets)[RT_LINK_SECRET_LEN + 1], int n)
{
    check(c);
    pthread_mutex_lock(&c->mu);
    c->nkeys = 0;
    pthread_mutex_unlock(&c->mu);
    for (int i = 0; i < n; i++)
        rt_curve_allow_member(c, keys[i], secrets ? secrets[i] : "");
    wake(c);
}

void rt_curve_allow_one(rt_curve *c, const char *key) { rt_curve_allow_member(c, key, ""); }

void rt_curve_allow_member(rt_curve *c, const char *key, const char *secret)
{
    check(c);
    if (!rt_key_valid(key) || strlen(secret) > RT_LINK_SECRET_LEN)
        return;
    pthread_mutex_lock(&c->mu);
    if (c->nkeys == c->cap) {
        int cap = c->cap ? 2 * c->cap : 16;
        void *p = realloc(c->keys, (size_t)cap * sizeof c->keys[0]);
        if (!p) {
            pthread_mutex_unlock(&c->mu);
            return; /* not admitted: refused, and logged when it connects */
        }
        c->keys = p;
        c->cap = cap;
    }
    struct admitted *a = &c->keys[c->nkeys++];
    memcpy(a->key, key, RT_KEY_LEN + 1);
    snprintf(a->secret, sizeof a->secret, "%s", secret);
    pthread_mutex_unlock(&c->mu);
    wake(c);
}

/* Equal strings, in a time that does not say where they differ. */
static bool same_secret(const char *a, const char *b)
{
    size_t n = strlen(a);
    unsigned char d = (unsigned char)(n != strlen(b) || n == 0);
    for (size_t i = 0; i < n && b[i]; i++)
        d |= (unsigned char)(a[i] ^ b[i]);
    return d == 0;
}

/* CURVE: the key is admitted. PLAIN (token links only): the key is a
 * member's and the password is that member's link secret. */
static bool allowed(rt_curve *c, const struct pending *p)
{
    bool yes = false;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nkeys && !yes; i++)
        yes = !memcmp(c->keys[i].key, p->key, RT_KEY_LEN) &&
              (!p->plain || (c->token_links && same_secret(c->keys[i].secret, p->secret)));
    pthread_mutex_unlock(&c->mu);
    return yes;
}

/* A member's key with a wrong link secret: no later generation makes that
 * right (a member's key and secret are made together), so no waiting. */
static bool wrong_secret(rt_curve *c, const struct pending *p)
{
    bool known = false;
    pthread_mutex_lock(&c->mu);
    for (int i = 0; i < c->nkeys && !known; i++)
        known = !memcmp(c->keys[i].key, p->key, RT_KEY_LEN);
    pthread_mutex_unlock(&c->mu);
    return p->plain && known;
}

/* ---- the ZAP handler ---------------------------------------------------------------------- */

static void log_refusal(rt_curve *c, const char *addr, const char *key)
{
    char why[300];
    snprintf(why, sizeof why, "%s (key %.8s...)", key[0] ? c->unknown : "no CURVE key", key);
    rt_curve_log_refusal(c, addr, why);
}

void rt_curve_log_refusal(rt_curve *c, const char *addr, const char *why)
{
    check(c);
    atomic_fetch_add(&c->refused, 1);
    if (c->quiet)
        return;
    pthread_mutex_lock(&c->mu); /* the ZAP thread and the socket's owner both log */
    double now = rt_now();
    struct seen *s = NULL, *oldest = &c->seen[0];
    for (int i = 0; i < MAX_SEEN && !s; i++) {
        if (!strcmp(c->seen[i].addr, addr))
            s = &c->seen[i];
        else if (c->seen[i].last < oldest->last)
            oldest = &c->seen[i];
    }
    if (s && now - s->last < LOG_EVERY) {
        s->quiet++;
        pthread_mutex_unlock(&c->mu);
        return;
    }
    long quiet = s ? s->quiet : 0;
    if (!s) {
        s = oldest;
        snprintf(s->addr, sizeof s->addr, "%s", addr);
    }
    s->last = now;
    s->quiet = 0;
    fprintf(stderr, "ragtag: [%s] refused a connection from %s: %s", c->who,
            addr[0] ? addr : "an unknown address", why);
    if (quiet)
        fprintf(stderr, "; %ld more from there in the last minute", quiet);
    fprintf(stderr, "; at most one line per address per minute\n");
    pthread_mutex_unlock(&c->mu);
}

static void reply(rt_curve *c, const void *rid, size_t rid_len, const void *req, size_t req_len,
                  bool ok, const char *key)
{
    const char *status = ok ? "200" : "400";
    const char *text = ok ? "OK" : "not admitted";
    zmq_send(c->zap, rid, rid_len, ZMQ_SNDMORE);
    zmq_send(c->zap, "", 0, ZMQ_SNDMORE);
    zmq_send(c->zap, "1.0", 3, ZMQ_SNDMORE);
    zmq_send(c->zap, req, req_len, ZMQ_SNDMORE);
    zmq_send(c->zap, status, 3, ZMQ_SNDMORE);
    zmq_send(c->zap, text, strlen(text), ZMQ_SNDMORE);
    zmq_send(c->zap, ok ? key : "", ok ? RT_KEY_LEN : 0, ZMQ_SNDMORE); /* the User-Id */
    zmq_send(c->zap, "", 0, 0);
}

/* Frame i of a request into buf (NUL-terminated), its size or -1. */
static int frame(zmq_msg_t *f, int n, int i, char *buf, size_t cap)
{
    if (i >= n || zmq_msg_size(&f[i]) >= cap)
        return -1;
    size_t len = zmq_msg_size(&f[i]);
    memcpy(buf, zmq_msg_data(&f[i]), len);
    buf[len] = '\0';
    return (int)len;
}

/* One request: [rid][""][version][request id][domain][address][identity]
 * [mechanism][credentials...]: CURVE's one (the client's key) or PLAIN's
 * two (user name: the member's key, password: its link secret). */
static void take_request(rt_curve *c, zmq_msg_t *f, int n)
{
    struct pending p = {.since = rt_now()};
    char version[8], mech[16], raw[64];
    int rid = frame(f, n, 0, (char *)p.rid, sizeof p.rid);
    int req = frame(f, n, 3, p.req_id, sizeof p.req_id);
    if (rid <= 0 || req < 0 || frame(f, n, 2, version, sizeof version) < 0 ||
        strcmp(version, "1.0") != 0)
        return; /* not a ZAP request libzmq would send: nobody to answer */
    p.rid_len = (size_t)rid;
    p.req_len = (size_t)req;
    if (frame(f, n, 5, p.addr, sizeof p.addr) < 0)
        p.addr[0] = '\0';
    bool known = frame(f, n, 7, mech, sizeof mech) >= 0;
    bool creds = known && !strcmp(mech, "CURVE") && n > 8 && zmq_msg_size(&f[8]) == 32;
    if (creds) {
        memcpy(raw, zmq_msg_data(&f[8]), 32);
        zmq_z85_encode(p.key, (const uint8_t *)raw, 32);
    } else if (known && !strcmp(mech, "PLAIN") && n > 9 &&
               frame(f, n, 8, p.key, sizeof p.key) == RT_KEY_LEN &&
               frame(f, n, 9, p.secret, sizeof p.secret) > 0) {
        creds = p.plain = true; /* a token link: a member's key and its secret */
    } else {
        p.key[0] = '\0';
    }
    if (creds && allowed(c, &p)) {
        reply(c, p.rid, p.rid_len, p.req_id, p.req_len, true, p.key);
    } else if (creds && c->defer > 0 && c->npend < MAX_PENDING && !wrong_secret(c, &p)) {
        c->pend[c->npend++] = p;
    } else {
        reply(c, p.rid, p.rid_len, p.req_id, p.req_len, false, "");
        if (creds && wrong_secret(c, &p))
            rt_curve_log_refusal(c, p.addr, "a member's key with a wrong link secret");
        else
            log_refusal(c, p.addr, p.key);
    }
}

/* Requests that waited for the allow-list: admitted now, or past defer. */
static void recheck(rt_curve *c)
{
    double now = rt_now();
    int k = 0;
    for (int i = 0; i < c->npend; i++) {
        struct pending *p = &c->pend[i];
        bool ok = allowed(c, p);
        if (ok || now - p->since > c->defer) {
            reply(c, p->rid, p->rid_len, p->req_id, p->req_len, ok, p->key);
            if (!ok)
                log_refusal(c, p->addr, p->key);
        } else {
            c->pend[k++] = *p;
        }
    }
    c->npend = k;
}

static void read_requests(rt_curve *c)
{
    for (;;) {
        zmq_msg_t f[12];
        int n = 0;
        bool more = true;
        while (more) {
            zmq_msg_t *m = &f[n < 12 ? n : 11];
            if (n >= 12)
                zmq_msg_close(m);
            zmq_msg_init(m);
            if (zmq_msg_recv(m, c->zap, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
                zmq_msg_close(m);
                for (int i = 0; i < n && i < 12; i++)
                    zmq_msg_close(&f[i]);
                return;
            }
            more = zmq_msg_more(m);
            if (n < 12)
                n++;
        }
        take_request(c, f, n);
        for (int i = 0; i < n; i++)
            zmq_msg_close(&f[i]);
    }
}

static void *zap_main(void *arg)
{
    rt_curve *c = arg;
    while (!atomic_load(&c->quit)) {
        zmq_pollitem_t it[2] = {{.socket = c->zap, .events = ZMQ_POLLIN},
                                {.fd = c->wake[0], .events = ZMQ_POLLIN}};
        zmq_poll(it, 2, c->npend ? 100 : 1000);
        if (it[1].revents & ZMQ_POLLIN) {
            char buf[64];
            while (read(c->wake[0], buf, sizeof buf) > 0)
                ;
        }
        if (it[0].revents & ZMQ_POLLIN)
            read_requests(c);
        if (c->npend)
            recheck(c);
    }
    for (int i = 0; i < c->npend; i++) /* leave nobody hanging in a handshake */
        reply(c, c->pend[i].rid, c->pend[i].rid_len, c->pend[i].req_id, c->pend[i].req_len,
              false, "");
    zmq_close(c->zap);
    return NULL;
}

rt_curve *rt_curve_new(const struct rt_curve_config *cfg)
{
    if (!zmq_has("curve")) {
        rt_error(RT_ERR_UNSUPPORTED, "this libzmq has no CURVE security (--insecure runs "
                                     "without)");
        return NULL;
    }
    rt_curve *c = calloc(1, sizeof *c);
    if (!c) {
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    c->tag = CURVE_TAG;
    c->zctx = cfg->zctx;
    c->self = cfg->self;
    c->defer = cfg->defer_s;
    c->quiet = cfg->quiet;
    snprintf(c->who, sizeof c->who, "%s", cfg->who ? cfg->who : "ragtag");
    snprintf(c->unknown, sizeof c->unknown, "%s", cfg->unknown ? cfg->unknown : "not admitted");
    pthread_mutex_init(&c->mu, NULL);
    c->wake[0] = c->wake[1] = -1;
    int zero = 0;
    if (pipe2(c->wake, O_NONBLOCK | O_CLOEXEC) != 0) {
        rt_error(RT_ERR_IO, "cannot make a pipe for the ZAP handler: %s", strerror(errno));
        goto fail;
    }
    if (!(c->zap = zmq_socket(c->zctx, ZMQ_ROUTER)) ||
        zmq_setsockopt(c->zap, ZMQ_LINGER, &zero, sizeof zero) != 0 ||
        zmq_bind(c->zap, ZAP_ENDPOINT) != 0) {
        rt_error(RT_ERR_NET, "cannot start the ZAP handler on %s: %s", ZAP_ENDPOINT,
                 zmq_strerror(errno));
        goto fail;
    }
    if (pthread_create(&c->thread, NULL, zap_main, c) != 0) {
        rt_error(RT_ERR_NOMEM, "cannot start the ZAP handler's thread");
        goto fail;
    }
    c->started = true;
    return c;

fail:
    if (c->zap)
        zmq_close(c->zap);
    c->zap = NULL;
    rt_curve_destroy(&c);
    return NULL;
}

void rt_curve_destroy(rt_curve **cp)
{
    if (!cp || !*cp)
        return;
    rt_curve *c = *cp;
    check(c);
    if (c->started) {
        atomic_store(&c->quit, 1);
        wake(c);
        pthread_join(c->thread, NULL);
    }
    for (int i = 0; i < 2; i++)
        if (c->wake[i] >= 0)
            close(c->wake[i]);
    pthread_mutex_destroy(&c->mu);
    free(c->keys);
    memset(&c->self, 0, sizeof c->self); /* no secret left in freed memory */
    memset(c->my_secret, 0, sizeof c->my_secret);
    c->tag = CURVE_DEAD;
    free(c);
    *cp = NULL;
}
