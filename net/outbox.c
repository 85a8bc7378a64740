/* outbox.c — reports kept until the coordinator acknowledges them (see
 * outbox.h). A queue of whole messages; sending one sends copies of its
 * parts (libzmq shares the bytes of large ones), so it can go again. */
#include "config.h"

#include "outbox.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"
#include "transport.h"

struct entry {
    long tag;
    bool sent;
    int n;
    zmq_msg_t parts[RT_MAX_FRAMES + 1];
};

struct rt_outbox {
    struct entry *e;
    int n, cap;
};

rt_outbox *rt_outbox_new(void)
{
    rt_outbox *ob = calloc(1, sizeof *ob);
    if (!ob)
        rt_error(RT_ERR_NOMEM, "no memory for the report outbox");
    return ob;
}

static void drop_entry(struct entry *e)
{
    for (int i = 0; i < e->n; i++)
        zmq_msg_close(&e->parts[i]);
    e->n = 0;
}

void rt_outbox_destroy(rt_outbox **obp)
{
    if (!obp || !*obp)
        return;
    rt_outbox *ob = *obp;
    for (int i = 0; i < ob->n; i++)
        drop_entry(&ob->e[i]);
    free(ob->e);
    free(ob);
    *obp = NULL;
}

int rt_outbox_add(rt_outbox *ob, long tag, zmq_msg_t *parts, int n)
{
    RT_ASSERT(n >= 1 && n <= RT_MAX_FRAMES + 1);
    if (ob->n == ob->cap) {
        int cap = ob->cap ? 2 * ob->cap : 8;
        struct entry *e = realloc(ob->e, (size_t)cap * sizeof *e);
        if (!e)
            return rt_error(RT_ERR_NOMEM, "no memory to keep a report for the coordinator");
        ob->e = e;
        ob->cap = cap;
    }
    struct entry *e = &ob->e[ob->n++];
    e->tag = tag;
    e->sent = false;
    e->n = n;
    for (int i = 0; i < n; i++) {
        zmq_msg_init(&e->parts[i]);
        zmq_msg_move(&e->parts[i], &parts[i]);
    }
    return RT_OK;
}

/* One whole message, or (the socket takes no first part) nothing. A
 * later part cannot meet a full queue (libzmq counts whole messages); it
 * fails only when the connection just closed, and then the whole message
 * is lost with it, which a re-adoption's resend covers. */
static bool send_entry(struct entry *e, void *sock)
{
    for (int i = 0; i < e->n; i++) {
        zmq_msg_t m;
        zmq_msg_init(&m);
        zmq_msg_copy(&m, &e->parts[i]);
        int flags = ZMQ_DONTWAIT | (i + 1 < e->n ? ZMQ_SNDMORE : 0);
        int rc;
        while ((rc = zmq_msg_send(&m, sock, flags)) < 0 && errno == EINTR)
            ;
        zmq_msg_close(&m);
        if (rc < 0)
            return i > 0; /* a part after the first: gone with the connection */
    }
    return true;
}

void rt_outbox_flush(rt_outbox *ob, void *sock)
{
    for (int i = 0; i < ob->n; i++) {
        if (ob->e[i].sent)
            continue;
        if (!send_entry(&ob->e[i], sock))
            return;
        ob->e[i].sent = true;
    }
}

void rt_outbox_ack(rt_outbox *ob, long acked)
{
    int k = 0;
    for (int i = 0; i < ob->n; i++) {
        if (ob->e[i].sent && ob->e[i].tag <= acked)
            drop_entry(&ob->e[i]);
        else
            ob->e[k++] = ob->e[i];
    }
    ob->n = k;
}

void rt_outbox_resend_after(rt_outbox *ob, long have)
{
    int k = 0;
    for (int i = 0; i < ob->n; i++) {
        if (ob->e[i].tag <= have) {
            drop_entry(&ob->e[i]);
            continue;
        }
        ob->e[i].sent = false;
        ob->e[k++] = ob->e[i];
    }
    ob->n = k;
}

int rt_outbox_count(const rt_outbox *ob) { return ob->n; }
