/* tcplink_setup.c — forming a ring's raw TCP links (see tcplink.h).
 *
 * The sender of a link listens and offers {gen, port, cookie} over the
 * ZeroMQ link to its right neighbour; the neighbour connects to the
 * sender's advertised host and sends a 64-byte hello (magic, version,
 * generation, both ranks, the cookie); the sender checks it and answers
 * an 8-byte ack. One event loop does both directions at once (a rank is
 * the sender of one link and the receiver of another), re-sends the offer
 * every half second until it is taken (an offer that reached a neighbour
 * still busy with an older generation was dropped there), and refuses
 * any other connection to the port with a log line.
 *
 * Where the neighbour cannot reach the offered port (a firewall that lets
 * only the ring ports through, a container that publishes only those),
 * the sender gives the raw link up after a few seconds and offers port 0:
 * both ends then keep that direction on ZeroMQ, through the ring port,
 * and the sender says so in the log. */
#include "config.h"

#include "tcplink.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <arpa/inet.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "status.h"

#define HELLO_MAGIC 0x484c5452u /* "RTLH" */
#define ACK_MAGIC 0x414c5452u   /* "RTLA" */
#define HELLO_BYTES 64
#define ACK_BYTES 8
#define OFFER_EVERY 0.5
#define STRANGER_S 2.0 /* an accepted connection has this long to say hello */
#define MAX_CANDIDATES 4
#define FALLBACK_MIN 1.0
#define FALLBACK_MAX 5.0

struct candidate {
    int fd;
    double since;
    size_t got;
    unsigned char b[HELLO_BYTES];
    char addr[64];
};

struct setup {
    const struct rt_tcplink_setup *s;
    unsigned char cookie[RT_TCPLINK_COOKIE];      /* ours, offered to the right */
    unsigned char left_cookie[RT_TCPLINK_COOKIE]; /* the left neighbour's offer */
    int lfd, port;
    double offered;
    struct candidate cand[MAX_CANDIDATES];
    int cfd; /* to the left neighbour: connecting, then waiting for the ack */
    int left_port;
    bool connected, hello_sent;
    size_t ack_got;
    unsigned char ack[ACK_BYTES];
    rt_tcplink *tx, *rx;
    bool tx_zmq, rx_zmq; /* that direction stays on ZeroMQ (port 0 offered) */
    bool said_unreachable;
    rt_zframes fr;
    rt_wire_msg msg;
    rt_wire_writer w;
};

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A data socket's options: no Nagle delay (a sub-chunk is one write) and
 * non-blocking. The buffer sizes stay the kernel's: fixing SO_SNDBUF or
 * SO_RCVBUF turns its autotuning off, and 4 MiB measured no faster. */
static void tune(int fd)
{
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

static void addr_of(int fd, bool peer, char *out, size_t cap)
{
    struct sockaddr_storage a;
    socklen_t n = sizeof a;
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    struct sockaddr *sa = (struct sockaddr *)&a;
    if ((peer ? getpeername(fd, sa, &n) : getsockname(fd, sa, &n)) == 0) {
        if (a.ss_family == AF_INET) {
            inet_ntop(AF_INET, &((struct sockaddr_in *)&a)->sin_addr, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in *)&a)->sin_port);
        } else if (a.ss_family == AF_INET6) {
            inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&a)->sin6_addr, ip, sizeof ip);
            port = ntohs(((struct sockaddr_in6 *)&a)->sin6_port);
        }
    }
    snprintf(out, cap, "%s:%d", ip, port);
}

/* A socket of host's address family bound to host (or, when host is not
 * this machine's, e.g. a NAT's address, to every interface). */
static int listen_on(const char *endpoint, int *port)
{
    char host[256];
    RT_TRY(rt_net_endpoint_host(endpoint, host, sizeof host));
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *res = NULL;
    if (getaddrinfo(host, "0", &hints, &res) != 0 || !res)
        return rt_error(RT_ERR_NET, "cannot resolve %s to listen for a ring link", host);
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) != 0) {
        struct sockaddr_storage any = {.ss_family = (sa_family_t)res->ai_family};
        socklen_t n = res->ai_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                 : sizeof(struct sockaddr_in);
        if (bind(fd, (struct sockaddr *)&any, n) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0 || listen(fd, 8) != 0) {
        int e = errno;
        if (fd >= 0)
            close(fd);
        return rt_error(RT_ERR_NET, "cannot listen for a ring link on %s: %s", host, strerror(e));
    }
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
    char a[80];
    addr_of(fd, false, a, sizeof a);
    *port = atoi(strrchr(a, ':') + 1);
    return fd;
}

static int send_offer(struct setup *u)
{
    const struct rt_tcplink_setup *s = u->s;
    rt_wire_begin(&u->w, s->run, "link", 3);
    rt_wire_put_uint(&u->w, "gen", s->gen);
    rt_wire_put_uint(&u->w, "port", (uint64_t)u->port);
    rt_wire_put_bin(&u->w, "cookie", u->cookie, sizeof u->cookie);
    RT_TRY(rt_wire_end(&u->w));
    u->offered = rt_now();
    return rt_zsend(s->out, u->w.data, u->w.len, false);
}

bool rt_tcplink_is_offer(rt_zframes *fr)
{
    rt_wire_msg m;
    rt_wire_msg_init(&m);
    bool yes = fr->n == 1 &&
               rt_wire_parse(&m, rt_zframe_data(fr, 0), rt_zframe_size(fr, 0), NULL, true) == 0 &&
               !strcmp(m.type, "link");
    rt_wire_msg_free(&m);
    return yes;
}

/* One message from the inbox: the left neighbour's offer of this
 * generation (1), something else dropped (0), an error (< 0). */
static int take_offer(struct setup *u)
{
    const struct rt_tcplink_setup *s = u->s;
    rt_wire_map m = rt_wire_root(&u->msg);
    uint64_t gen, port;
    const void *ck;
    size_t ckn;
    char peer[64];
    rt_zframes_peer(&u->fr, 0, peer, sizeof peer);
    if (s->left_key[0]) {
        const char *uid = zmq_msg_gets(&u->fr.f[0], "User-Id");
        if (!uid || strcmp(uid, s->left_key) != 0) {
            rt_wire_drop(s->drops, peer, "a message from a connection that is not the left "
                                         "neighbour's (another member's key)");
            return 0;
        }
    }
    if (u->fr.n != 1) /* a chunk of an older generation's ZeroMQ link */
        return 0;
    if (rt_wire_parse(&u->msg, rt_zframe_data(&u->fr, 0), rt_zframe_size(&u->fr, 0), s->run,
                      false) < 0 ||
        (strcmp(u->msg.type, "link") != 0 &&
         rt_error(RT_ERR_FORMAT, "a '%s' message where a link offer was due", u->msg.type) < 0) ||
        rt_wire_get_uint(m, "gen", 0, UINT64_MAX, &gen) < 0 ||
        rt_wire_get_uint(m, "port", 0, 65535, &port) < 0 ||
        rt_wire_get_bin(m, "cookie", RT_TCPLINK_COOKIE, &ck, &ckn) < 0 ||
        (ckn != RT_TCPLINK_COOKIE &&
         rt_error(RT_ERR_FORMAT, "a link cookie of %zu bytes", ckn) < 0)) {
        rt_wire_drop(s->drops, peer, rt_error_detail());
        return 0;
    }
    if (gen != s->gen) /* another generation's: its sender offers again */
        return 0;
    memcpy(u->left_cookie, ck, RT_TCPLINK_COOKIE);
    u->left_port = (int)port;
    u->rx_zmq = port == 0;
    return 1;
}

/* The offered port could not be reached, or the hello went unanswered:
 * not an error of the ring. The sender offers again, or offers port 0 (stay
 * on ZeroMQ) once it gives the raw link up. */
static void unreachable(struct setup *u, const char *why)
{
    if (!u->said_unreachable)
        fprintf(stderr, "ragtag: [ring rank %d] the raw link of rank %d: %s; waiting for its "
                        "next offer\n", u->s->rank, u->s->left, why);
    u->said_unreachable = true;
    if (u->cfd >= 0)
        close(u->cfd);
    u->cfd = -1;
    u->hello_sent = false;
    u->ack_got = 0;
}

static int start_connect(struct setup *u)
{
    const struct rt_tcplink_setup *s = u->s;
    char host[256], port[16];
    RT_TRY(rt_net_endpoint_host(s->left_endpoint, host, sizeof host));
    snprintf(port, sizeof port, "%d", u->left_port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, port, &hints, &res) != 0 || !res)
        return rt_error(RT_ERR_NET, "cannot resolve %s (rank %d's address)", host, s->left);
    u->cfd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int rc = RT_OK;
    if (u->cfd < 0) {
        rc = rt_error(RT_ERR_NET, "socket: %s", strerror(errno));
    } else {
        tune(u->cfd);
        if (connect(u->cfd, res->ai_addr, res->ai_addrlen) != 0 && errno != EINPROGRESS) {
            char why[400];
            snprintf(why, sizeof why, "cannot connect to %s:%s: %s", host, port, strerror(errno));
            unreachable(u, why);
        }
    }
    freeaddrinfo(res);
    return rc;
}

static void hello_of(const struct rt_tcplink_setup *s, const unsigned char *cookie,
                     unsigned char *b)
{
    memset(b, 0, HELLO_BYTES);
    put32(b, HELLO_MAGIC);
    put32(b + 4, 1);
    put32(b + 8, (uint32_t)s->gen);
    put32(b + 12, (uint32_t)(s->gen >> 32));
    put32(b + 16, (uint32_t)s->rank);  /* the connecting rank */
    put32(b + 20, (uint32_t)s->left);  /* the rank it connects to */
    memcpy(b + 24, cookie, RT_TCPLINK_COOKIE);
}

/* The receiving end: connected → hello → ack. 1 when the link is up. */
static int step_connect(struct setup *u, short revents)
{
    const struct rt_tcplink_setup *s = u->s;
    if (!u->hello_sent) {
        if (!(revents & (POLLOUT | POLLERR | POLLHUP)))
            return 0;
        int err = 0;
        socklen_t n = sizeof err;
        getsockopt(u->cfd, SOL_SOCKET, SO_ERROR, &err, &n);
        unsigned char b[HELLO_BYTES];
        hello_of(s, u->left_cookie, b);
        if (err || send(u->cfd, b, sizeof b, MSG_NOSIGNAL) != (ssize_t)sizeof b) {
            char why[300];
            snprintf(why, sizeof why, "cannot connect to its port %d: %s", u->left_port,
                     strerror(err ? err : errno));
            unreachable(u, why);
            return 0;
        }
        u->hello_sent = true;
        return 0;
    }
    if (!(revents & (POLLIN | POLLERR | POLLHUP)))
        return 0;
    ssize_t k = recv(u->cfd, u->ack + u->ack_got, ACK_BYTES - u->ack_got, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (k <= 0) {
        unreachable(u, "it closed the connection before its ack (it gave the raw link up, "
                       "or it is gone)");
        return 0;
    }
    u->ack_got += (size_t)k;
    if (u->ack_got < ACK_BYTES)
        return 0;
    if (get32(u->ack) != ACK_MAGIC)
        return rt_error(RT_ERR_NET, "rank %d's ring link answered %08x, not an ack", s->left,
                        get32(u->ack));
    char peer[96];
    snprintf(peer, sizeof peer, "rank %d (tcp)", s->left);
    u->rx = rt_tcplink_wrap(u->cfd, peer);
    u->cfd = -1;
    return u->rx ? 1 : RT_ERR_NOMEM;
}

/* Why a hello is not the right neighbour's of this generation ("" if it is). */
static const char *hello_wrong(const struct setup *u, const unsigned char *b)
{
    const struct rt_tcplink_setup *s = u->s;
    if (get32(b) != HELLO_MAGIC || get32(b + 4) != 1)
        return "not a ragtag ring link hello";
    uint64_t gen = get32(b + 8) | (uint64_t)get32(b + 12) << 32;
    if (gen != s->gen)
        return "a hello of another generation";
    if (get32(b + 16) != (uint32_t)s->right || get32(b + 20) != (uint32_t)s->rank)
        return "a hello from another rank than the right neighbour";
    unsigned char d = 0;
    for (int i = 0; i < RT_TCPLINK_COOKIE; i++)
        d |= (unsigned char)(b[24 + i] ^ u->cookie[i]);
    return d ? "a hello without this link's cookie" : "";
}

static void refuse(struct setup *u, struct candidate *c, const char *why)
{
    char msg[160];
    snprintf(msg, sizeof msg, "refused a connection to the raw ring link port: %s", why);
    rt_wire_drop(u->s->drops, c->addr, msg);
    close(c->fd);
    c->fd = -1;
}

/* A candidate connection's hello: 1 it is the right neighbour (acked). */
static int step_candidate(struct setup *u, struct candidate *c, short revents)
{
    if (rt_now() - c->since > STRANGER_S) {
        refuse(u, c, "no hello in time");
        return 0;
    }
    if (!(revents & (POLLIN | POLLERR | POLLHUP)))
        return 0;
    ssize_t k = recv(c->fd, c->b + c->got, HELLO_BYTES - c->got, MSG_DONTWAIT);
    if (k < 0 && (errno == EAGAIN || errno == EINTR))
        return 0;
    if (k <= 0) {
        refuse(u, c, k == 0 ? "closed before its hello" : strerror(errno));
        return 0;
    }
    c->got += (size_t)k;
    if (c->got < HELLO_BYTES)
        return 0;
    const char *why = hello_wrong(u, c->b);
    if (why[0]) {
        refuse(u, c, why);
        return 0;
    }
    unsigned char ack[ACK_BYTES] = {0};
    put32(ack, ACK_MAGIC);
    if (send(c->fd, ack, sizeof ack, MSG_NOSIGNAL) != (ssize_t)sizeof ack) {
        refuse(u, c, "the ack could not be sent");
        return 0;
    }
    char peer[96];
    snprintf(peer, sizeof peer, "rank %d (tcp)", u->s->right);
    u->tx = rt_tcplink_wrap(c->fd, peer);
    c->fd = -1;
    return u->tx ? 1 : RT_ERR_NOMEM;
}

static void take_connections(struct setup *u)
{
    for (;;) {
        int fd = accept4(u->lfd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0)
            return;
        struct candidate *c = NULL;
        for (int i = 0; i < MAX_CANDIDATES && !c; i++)
            if (u->cand[i].fd < 0)
                c = &u->cand[i];
        if (!c) { /* more strangers at once than slots */
            struct candidate busy = {.fd = fd};
            addr_of(fd, true, busy.addr, sizeof busy.addr);
            refuse(u, &busy, "too many connections at once");
            continue;
        }
        memset(c, 0, sizeof *c);
        c->fd = fd;
        c->since = rt_now();
        tune(fd);
        addr_of(fd, true, c->addr, sizeof c->addr);
    }
}

/* How long the sender waits for its neighbour's connection before it gives
 * the raw link up: neighbours form a ring at about the same moment. */
static double fallback_s(const struct rt_tcplink_setup *s)
{
    double f = s->timeout_s / 2;
    return f < FALLBACK_MIN ? FALLBACK_MIN : f > FALLBACK_MAX ? FALLBACK_MAX : f;
}

static short from_zmq(short z)
{
    return (short)((z & ZMQ_POLLIN ? POLLIN : 0) | (z & ZMQ_POLLOUT ? POLLOUT : 0) |
                   (z & ZMQ_POLLERR ? POLLERR : 0));
}

/* Messages in the inbox until the left neighbour's offer is there. Read
 * while connecting too: a port behind a firewall that drops packets leaves
 * the connect hanging, and the sender's port-0 offer ends it. */
static int read_inbox(struct setup *u)
{
    for (;;) {
        int rc = rt_zframes_recv(u->s->inbox, &u->fr, ZMQ_DONTWAIT);
        if (rc <= 0)
            return rc == RT_ERR_INTERRUPTED ? RT_OK : rc;
        bool connecting = u->cfd >= 0;
        if ((rc = take_offer(u)) < 0)
            return rc;
        if (rc == 0)
            continue;
        if (u->rx_zmq) { /* the sender gave the raw link up */
            if (u->cfd >= 0)
                close(u->cfd);
            u->cfd = -1;
            return RT_OK;
        }
        return connecting ? RT_OK : start_connect(u); /* a repeated offer, or the first */
    }
}

/* Wait up to wait_s for any of the set-up's sockets, and act on them. */
static int poll_once(struct setup *u, double wait_s)
{
    zmq_pollitem_t it[3 + MAX_CANDIDATES];
    int k = 0, at_inbox = -1, at_l = -1, at_c = -1, at_cand[MAX_CANDIDATES];
    if (u->s->inbox && !u->rx && !u->rx_zmq) {
        at_inbox = k;
        it[k++] = (zmq_pollitem_t){.socket = u->s->inbox, .events = ZMQ_POLLIN};
    }
    if (u->cfd >= 0) {
        at_c = k;
        short ev = u->hello_sent ? ZMQ_POLLIN : ZMQ_POLLOUT;
        it[k++] = (zmq_pollitem_t){.fd = u->cfd, .events = ev};
    }
    if (u->lfd >= 0 && !u->tx && !u->tx_zmq) {
        at_l = k;
        it[k++] = (zmq_pollitem_t){.fd = u->lfd, .events = ZMQ_POLLIN};
    }
    for (int i = 0; i < MAX_CANDIDATES; i++) {
        at_cand[i] = -1;
        if (u->cand[i].fd >= 0 && !u->tx) {
            at_cand[i] = k;
            it[k++] = (zmq_pollitem_t){.fd = u->cand[i].fd, .events = ZMQ_POLLIN};
        }
    }
    if (zmq_poll(it, k, (long)(wait_s * 1000)) < 0 && errno != EINTR)
        return rt_error(RT_ERR_NET, "waiting for the ring links: %s", zmq_strerror(errno));
    int rc = RT_OK;
    if (at_inbox >= 0 && (it[at_inbox].revents & ZMQ_POLLIN))
        RT_TRY(read_inbox(u));
    if (at_c >= 0 && u->cfd >= 0 && (rc = step_connect(u, from_zmq(it[at_c].revents))) < 0)
        return rc;
    if (at_l >= 0 && (it[at_l].revents & ZMQ_POLLIN))
        take_connections(u);
    for (int i = 0; i < MAX_CANDIDATES; i++)
        if (at_cand[i] >= 0 && u->cand[i].fd >= 0 && !u->tx &&
            (rc = step_candidate(u, &u->cand[i], from_zmq(it[at_cand[i]].revents))) < 0)
            return rc;
    return RT_OK;
}

/* The right neighbour did not take the offer in time: close the port and
 * offer port 0 (this direction stays on ZeroMQ). */
static int give_up_tx(struct setup *u)
{
    fprintf(stderr, "ragtag: [ring rank %d] rank %d did not connect to this rank's raw link "
                    "port %d within %.0f s (a firewall, or only the ring ports reachable?): "
                    "the data to it goes over ZeroMQ on its ring port\n",
            u->s->rank, u->s->right, u->port, fallback_s(u->s));
    close(u->lfd);
    u->lfd = -1;
    for (int i = 0; i < MAX_CANDIDATES; i++)
        if (u->cand[i].fd >= 0) {
            close(u->cand[i].fd);
            u->cand[i].fd = -1;
        }
    u->port = 0;
    u->tx_zmq = true;
    return send_offer(u);
}

static int timed_out(const struct setup *u)
{
    const struct rt_tcplink_setup *s = u->s;
    char what[160] = "";
    if (s->inbox && !u->rx && !u->rx_zmq)
        snprintf(what, sizeof what, " from rank %d (%s)", s->left,
                 u->cfd >= 0 ? "connecting" : "no offer yet");
    if (s->out && !u->tx && !u->tx_zmq)
        snprintf(what + strlen(what), sizeof what - strlen(what), "%s to rank %d (not connected)",
                 what[0] ? " nor" : "", s->right);
    return rt_error(RT_ERR_TIMEOUT, "no ring link%s within %.0f s", what, s->timeout_s);
}

static int setup_loop(struct setup *u)
{
    const struct rt_tcplink_setup *s = u->s;
    double t0 = rt_now(), last_idle = t0;
    while ((s->out && !u->tx && !u->tx_zmq) || (s->inbox && !u->rx && !u->rx_zmq)) {
        double now = rt_now();
        if (now - t0 > s->timeout_s)
            return timed_out(u);
        if (s->out && !u->tx && !u->tx_zmq && now - t0 > fallback_s(s))
            RT_TRY(give_up_tx(u));
        else if (s->out && !u->tx && !u->tx_zmq && now - u->offered > OFFER_EVERY)
            RT_TRY(send_offer(u));
        if (s->idle && now - last_idle >= 0.05) {
            last_idle = now;
            RT_TRY(s->idle(s->arg));
        }
        RT_TRY(poll_once(u, 0.02));
    }
    return RT_OK;
}

int rt_tcplink_setup(const struct rt_tcplink_setup *s, rt_tcplink **tx, rt_tcplink **rx)
{
    RT_ASSERT(s && tx && rx && (!s->out || s->self_endpoint) && (!s->inbox || s->left_endpoint));
    static struct setup zero;
    struct setup *u = malloc(sizeof *u);
    if (!u)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    *u = zero;
    u->s = s;
    u->lfd = u->cfd = -1;
    for (int i = 0; i < MAX_CANDIDATES; i++)
        u->cand[i].fd = -1;
    rt_zframes_init(&u->fr);
    rt_wire_msg_init(&u->msg);
    rt_wire_writer_init(&u->w);
    int rc = RT_OK;
    if (s->out) {
        if (getrandom(u->cookie, sizeof u->cookie, 0) != (ssize_t)sizeof u->cookie)
            rc = rt_error(RT_ERR_NET, "no random bytes for a ring link's cookie");
        else if ((u->lfd = listen_on(s->self_endpoint, &u->port)) < 0)
            rc = u->lfd;
        else
            rc = send_offer(u);
    }
    if (rc == RT_OK)
        rc = setup_loop(u);
    if (u->lfd >= 0)
        close(u->lfd);
    if (u->cfd >= 0)
        close(u->cfd);
    for (int i = 0; i < MAX_CANDIDATES; i++)
        if (u->cand[i].fd >= 0)
            close(u->cand[i].fd);
    rt_zframes_close(&u->fr);
    rt_wire_msg_free(&u->msg);
    rt_wire_writer_free(&u->w);
    if (rc < 0) {
        rt_tcplink_destroy(&u->tx);
        rt_tcplink_destroy(&u->rx);
    }
    *tx = u->tx;
    *rx = u->rx;
    free(u);
    return rc;
}
