/* gossip_shm.c — gossip's same-host links through shared memory (see
 * gossip_shm.h). */
#include "config.h"

#include "gossip_shm.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "status.h"

#define GSHM_SIG 0x47534d31u /* "GSM1": a gossip slot */

bool rt_gshm_wanted(const char *mine, const char *theirs, size_t bytes)
{
    return mine && theirs && mine[0] && theirs[0] && bytes <= RT_GSHM_MAX_BYTES;
}

/* The queue `from` fills for `owner`: named by the owner's secret, which
 * only the members learn (the ring's segment has no suffix). */
static void queue_name(char *out, size_t cap, const char *owner_secret, uint64_t gen, int from)
{
    snprintf(out, cap, "/ragtag-%s-g%llu-gossip%d", owner_secret, (unsigned long long)gen, from);
}

static size_t slot_bytes(size_t bytes)
{
    return (RT_GSHM_HEADER + bytes + 63) & ~(size_t)63;
}

int rt_gshm_create(struct rt_gshm *l, const char *run, uint64_t gen, int rank, int world,
                   size_t bytes, const char *const *secrets)
{
    memset(l, 0, sizeof *l);
    l->rank = rank;
    l->world = world;
    l->bytes = bytes;
    const char *mine = secrets ? secrets[rank] : NULL;
    bool any = false;
    for (int j = 0; j < world; j++)
        any |= j != rank && rt_gshm_wanted(mine, secrets[j], bytes);
    if (!any)
        return RT_OK;
    l->in = calloc((size_t)world, sizeof *l->in);
    l->out = calloc((size_t)world, sizeof *l->out);
    if (!l->in || !l->out)
        return rt_error(RT_ERR_NOMEM, "out of memory");
    for (int j = 0; j < world; j++) {
        if (j == rank || !rt_gshm_wanted(mine, secrets[j], bytes))
            continue;
        char name[128];
        queue_name(name, sizeof name, mine, gen, j);
        l->in[j] = rt_shm_create(name, run, gen, RT_GSHM_SLOTS, slot_bytes(bytes), 1);
        if (!l->in[j])
            return rt_error_wrap(RT_ERR_NET, "gossip: the queue of rank %d", j);
        l->pending++;
    }
    return RT_OK;
}

int rt_gshm_open(struct rt_gshm *l, const char *run, uint64_t gen, const char *const *secrets,
                 double timeout_s)
{
    struct rt_shm_wait w = {.timeout_s = timeout_s};
    for (int j = 0; l->in && j < l->world; j++) {
        if (!l->in[j])
            continue;
        char name[128];
        queue_name(name, sizeof name, secrets[j], gen, l->rank);
        l->out[j] = rt_shm_open(name, run, gen, &w);
        if (!l->out[j])
            return rt_error_wrap(RT_ERR_NET, "gossip: the queue to rank %d", j);
        if (rt_shm_slots(l->out[j]) != RT_GSHM_SLOTS ||
            rt_shm_slot_bytes(l->out[j]) != slot_bytes(l->bytes))
            return rt_error(RT_ERR_NET, "gossip: the queue to rank %d has %u slots of %zu bytes "
                                        "(expected %d of %zu)", j, rt_shm_slots(l->out[j]),
                            rt_shm_slot_bytes(l->out[j]), RT_GSHM_SLOTS,
                            slot_bytes(l->bytes));
    }
    rt_gshm_unlink_attached(l);
    return RT_OK;
}

/* Unlink what its producer mapped; count what is left. */
static void recount(struct rt_gshm *l)
{
    l->pending = 0;
    for (int j = 0; l->in && j < l->world; j++)
        if (l->in[j] && !rt_shm_unlink_if_attached(l->in[j]))
            l->pending++;
}

void rt_gshm_unlink_attached(struct rt_gshm *l)
{
    if (l->pending)
        recount(l);
}

void rt_gshm_drop(struct rt_gshm *l, int peer)
{
    if (!rt_gshm_linked(l, peer))
        return;
    rt_shm_close(&l->in[peer]); /* (removes its name if still there) */
    rt_shm_close(&l->out[peer]);
    recount(l);
}

void rt_gshm_close(struct rt_gshm *l)
{
    for (int j = 0; l->in && j < l->world; j++) {
        rt_shm_close(&l->in[j]);
        rt_shm_close(&l->out[j]);
    }
    free(l->in);
    free(l->out);
    memset(l, 0, sizeof *l);
}

int rt_gshm_send(struct rt_gshm *l, int peer, const struct rt_gshm_msg *m, const float *payload)
{
    rt_shm *s = l->out[peer];
    RT_ASSERT(s);
    if (!rt_shm_can_put(s))
        return 0;
    char *slot = rt_shm_slot_to_fill(s);
    memcpy(slot, m, sizeof *m);
    if (payload)
        memcpy(slot + RT_GSHM_HEADER, payload, l->bytes);
    struct rt_shm_desc d = {.op = m->kind, .t = (uint32_t)l->rank, .sig = GSHM_SIG,
                            .bytes = payload ? l->bytes : 0};
    rt_shm_publish(s, &d);
    return 1;
}

int rt_gshm_peek(struct rt_gshm *l, int peer, struct rt_gshm_msg *m, const float **payload,
                 size_t *payload_bytes, char *why, size_t cap)
{
    struct rt_shm_desc d;
    const void *slot;
    int rc = rt_shm_peek(l->in[peer], &d, &slot);
    if (rc <= 0)
        return rc;
    /* (rt_shm_peek checked d.bytes against the slot, not the header in it) */
    if (d.sig != GSHM_SIG || d.t != (uint32_t)peer ||
        d.bytes > rt_shm_slot_bytes(l->in[peer]) - RT_GSHM_HEADER) {
        snprintf(why, cap, "a slot of another kind (signature %08x, from %u, %llu bytes)", d.sig,
                 d.t, (unsigned long long)d.bytes);
        return 2;
    }
    memcpy(m, slot, sizeof *m);
    *payload = d.bytes ? (const float *)((const char *)slot + RT_GSHM_HEADER) : NULL;
    *payload_bytes = (size_t)d.bytes;
    return 1;
}

void rt_gshm_consume(struct rt_gshm *l, int peer) { rt_shm_consume(l->in[peer], NULL); }
