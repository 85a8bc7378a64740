/* membership.h — who is in a run: one entry per worker, in rank order, and
 * the generation number of that list.
 *
 * The generation starts at 1 and every ring message carries it: a later
 * change of membership (a worker lost or added at a step boundary) bumps
 * it, and messages of an older generation are dropped, so a re-formed ring
 * never mixes data of two memberships. */
#ifndef RT_MEMBERSHIP_H
#define RT_MEMBERSHIP_H

#include <stdbool.h>
#include <stdint.h>

#include "collective.h"
#include "curve.h"
#include "transport.h"
#include "wire.h"

#define RT_NAME_MAX 64

struct rt_member {
    char id[24];                      /* per-process nonce, 16 hex digits */
    char name[RT_NAME_MAX];           /* --name, or HOST-PID */
    char host[RT_NAME_MAX];           /* host name, for people */
    char host_id[RT_HOST_ID_MAX];     /* same value: can share memory */
    char endpoint[RT_ENDPOINT_MAX];   /* ring inbox, tcp://IP:PORT */
    char backend[32];
    char device[128];                 /* device name */
    int threads;
    double cpu_quota;                 /* cores its cgroup allows (0: no quota) */
    double images_per_s;              /* measured at join (0 until known) */
    char key[RT_KEY_LEN + 1];         /* its CurveZMQ public key ("": --insecure) */
    char shm[17];                     /* 16 random hex digits: its shared memory's name,
                                         known only to the members */
    char link[RT_LINK_SECRET_LEN + 1]; /* 32 random hex digits: the secret its token links
                                         present (--link-security token); members only */
    /* memory in bytes, 0 when not known: its cgroup's limit (0: none), its
     * resident memory when it said hello, and its own estimate of the
     * run's need (known from "ready" on) */
    uint64_t mem_limit, mem_rss, mem_need;
};

struct rt_membership {
    uint64_t gen;
    int n;
    struct rt_member m[RT_MAX_WORKERS];
};

/* Encode one member as a map (16 entries), for hello and the job. */
void rt_member_put(rt_wire_writer *w, const struct rt_member *m);
/* Decode and check one member map. */
int rt_member_get(rt_wire_map map, struct rt_member *m);

/* Put the list under `key` (an array of member maps) plus "gen". Counts
 * as two fields of the message. */
void rt_membership_put(rt_wire_writer *w, const struct rt_membership *ms);
int rt_membership_get(rt_wire_map map, struct rt_membership *ms);

/* Admit exactly these members' keys to c's sockets (NULL c: nothing). */
void rt_membership_admit(const struct rt_membership *ms, rt_curve *c);

/* Whether ranks a and b share memory (same host id) and may use shm. */
bool rt_membership_same_host(const struct rt_membership *ms, int a, int b);
/* Whether ranks a and b run on one machine, sharing its cores: the same
 * kernel boot id starts their host ids (rt_net_host_id), whatever their
 * /dev/shm (containers on one machine). Unknown boot id: only a == b. */
bool rt_membership_same_machine(const struct rt_membership *ms, int a, int b);

/* Printable name of the link from rank r to its right neighbour. */
const char *rt_membership_link_kind(const struct rt_membership *ms, int r, bool allow_shm);

#endif
