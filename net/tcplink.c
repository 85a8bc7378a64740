/* tcplink.c — a connected raw TCP data link: queued sends written with
 * sendmsg, receives read with recvmsg straight into place (see tcplink.h). */
#include "config.h"

#include "tcplink.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "status.h"

#define LINK_TAG 0x544c4e4bu   /* "TLNK" */
#define CHUNK_MAGIC 0x4b435452u /* "RTCK" little-endian */
#define IOV_MAX_USE 64

struct sendq {
    unsigned char hdr[RT_TCPLINK_HDR];
    const char *p;
    size_t n;
};

struct rt_tcplink {
    uint32_t tag;
    int fd;
    char peer[96];
    struct sendq q[RT_TCPLINK_QUEUE];
    uint64_t queued, sent; /* q[sent % QUEUE] is the next to write */
    size_t off;            /* bytes of q[sent] already written */
};

static void check(const rt_tcplink *l) { RT_ASSERT(l && l->tag == LINK_TAG); }

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const unsigned char *p) { return get32(p) | (uint64_t)get32(p + 4) << 32; }

/* magic, sig, gen, op, t, j, fl, n */
static void encode(unsigned char *b, const struct rt_tcplink_hdr *h)
{
    put32(b, CHUNK_MAGIC);
    put32(b + 4, h->sig);
    put64(b + 8, h->gen);
    put64(b + 16, h->op);
    put32(b + 24, h->t);
    put32(b + 28, h->j);
    put32(b + 32, h->fl);
    put32(b + 36, h->n);
}

static bool decode(const unsigned char *b, struct rt_tcplink_hdr *h)
{
    if (get32(b) != CHUNK_MAGIC)
        return false;
    h->sig = get32(b + 4);
    h->gen = get64(b + 8);
    h->op = get64(b + 16);
    h->t = get32(b + 24);
    h->j = get32(b + 28);
    h->fl = get32(b + 32);
    h->n = get32(b + 36);
    return true;
}

rt_tcplink *rt_tcplink_wrap(int fd, const char *peer)
{
    rt_tcplink *l = calloc(1, sizeof *l);
    if (!l) {
        close(fd);
        rt_error(RT_ERR_NOMEM, "out of memory");
        return NULL;
    }
    l->tag = LINK_TAG;
    l->fd = fd;
    snprintf(l->peer, sizeof l->peer, "%s", peer);
    return l;
}

void rt_tcplink_destroy(rt_tcplink **lp)
{
    if (!lp || !*lp)
        return;
    rt_tcplink *l = *lp;
    check(l);
    if (l->fd >= 0)
        close(l->fd);
    l->tag = 0xdeadbeefu;
    free(l);
    *lp = NULL;
}

int rt_tcplink_fd(const rt_tcplink *l)
{
    check(l);
    return l->fd;
}

const char *rt_tcplink_peer(const rt_tcplink *l)
{
    check(l);
    return l->peer;
}

bool rt_tcplink_can_put(const rt_tcplink *l) { return l->queued - l->sent < RT_TCPLINK_QUEUE; }

void rt_tcplink_put(rt_tcplink *l, const struct rt_tcplink_hdr *h, const void *payload)
{
    check(l);
    RT_ASSERT(rt_tcplink_can_put(l));
    struct sendq *e = &l->q[l->queued % RT_TCPLINK_QUEUE];
    encode(e->hdr, h);
    e->p = payload;
    e->n = h->n;
    l->queued++;
}

uint64_t rt_tcplink_sent(const rt_tcplink *l) { return l->sent; }
uint64_t rt_tcplink_queued(const rt_tcplink *l) { return l->queued; }

static int closed(const rt_tcplink *l, int err)
{
    return rt_error(RT_ERR_NET, "the link with %s is lost: %s", l->peer,
                    err ? strerror(err) : "the connection was closed");
}

/* The iovecs of the queued sends, from the unwritten part of the first. */
static int gather(const rt_tcplink *l, struct iovec *iov)
{
    int k = 0;
    size_t off = l->off;
    for (uint64_t i = l->sent; i < l->queued && k + 2 <= IOV_MAX_USE; i++) {
        const struct sendq *e = &l->q[i % RT_TCPLINK_QUEUE];
        if (off < RT_TCPLINK_HDR)
            iov[k++] = (struct iovec){(void *)(e->hdr + off), RT_TCPLINK_HDR - off};
        size_t po = off > RT_TCPLINK_HDR ? off - RT_TCPLINK_HDR : 0;
        if (e->n > po)
            iov[k++] = (struct iovec){(void *)(e->p + po), e->n - po};
        off = 0;
    }
    return k;
}

int rt_tcplink_flush(rt_tcplink *l)
{
    check(l);
    while (l->sent < l->queued) {
        struct iovec iov[IOV_MAX_USE];
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)gather(l, iov)};
        ssize_t w = sendmsg(l->fd, &m, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                return RT_OK;
            return closed(l, errno);
        }
        size_t left = (size_t)w;
        while (left > 0) {
            const struct sendq *e = &l->q[l->sent % RT_TCPLINK_QUEUE];
            size_t rest = RT_TCPLINK_HDR + e->n - l->off;
            if (left < rest) {
                l->off += left;
                break;
            }
            left -= rest;
            l->off = 0;
            l->sent++;
        }
    }
    return RT_OK;
}

int rt_tcplink_recv(rt_tcplink *l, struct rt_tcplink_rx *x, void *dst, size_t bytes)
{
    check(l);
    struct iovec iov[2];
    int k = 0;
    if (x->got < RT_TCPLINK_HDR)
        iov[k++] = (struct iovec){x->raw + x->got, RT_TCPLINK_HDR - x->got};
    size_t have = rt_tcplink_rx_payload(x);
    if (bytes > have)
        iov[k++] = (struct iovec){(char *)dst + have, bytes - have};
    if (k == 0)
        return 2;
    struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)k};
    ssize_t n;
    do
        n = recvmsg(l->fd, &m, MSG_DONTWAIT);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EAGAIN || errno == EWOULDBLOCK ? 0 : closed(l, errno);
    if (n == 0)
        return closed(l, 0);
    x->got += (size_t)n;
    if (!x->hdr_ok && x->got >= RT_TCPLINK_HDR) {
        if (!decode(x->raw, &x->h))
            return rt_error(RT_ERR_NET, "%s sent %u bytes that are not a chunk header "
                                        "(magic %08x): garbage on the link",
                            l->peer, RT_TCPLINK_HDR, get32(x->raw));
        x->hdr_ok = true;
    }
    return x->got == RT_TCPLINK_HDR + bytes ? 2 : 1;
}
