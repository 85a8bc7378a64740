/* worker_sec.h — a worker's side of link security: where its credentials
 * come from (--join-file, $RAGTAG_JOIN, this user's loopback file), its own
 * key pair (ephemeral, or --keys DIR), the ZAP handler that admits only the
 * members of its run's current generation to its ring and gossip inboxes,
 * and the watch on the handshake with the coordinator that turns a refusal
 * into one line saying why. */
#ifndef RT_WORKER_SEC_H
#define RT_WORKER_SEC_H

#include <stdbool.h>

#include "creds.h"
#include "curve.h"
#include "net.h"

struct rt_worker_sec {
    rt_curve *curve;        /* NULL: --insecure */
    struct rt_creds creds;  /* the coordinator's public key, the token's key pair */
    struct rt_keypair self; /* this worker's identity on its links */
    bool own_key;           /* --keys: present self to the coordinator, not the token */
    void *ctrl;             /* the control socket whose handshakes are watched */
    void *mon;              /* its handshake events */
    int closed;             /* handshakes the coordinator closed in a row */
};

/* Credentials and the ZAP handler of zctx (before any socket binds). */
int rt_worker_sec_open(struct rt_worker_sec *s, void *zctx, const struct rt_worker_options *o,
                       const char *who);
/* The control socket, before it connects: CURVE client of the coordinator,
 * its handshakes watched. */
int rt_worker_sec_ctrl(struct rt_worker_sec *s, void *zctx, void *ctrl);
/* While joining: an error when the coordinator refused this worker or the
 * handshake cannot succeed (named: token, key, --insecure on one side). */
int rt_worker_sec_check(struct rt_worker_sec *s, const char *join);
/* Joined: stop watching the handshakes. */
void rt_worker_sec_joined(struct rt_worker_sec *s);
void rt_worker_sec_close(struct rt_worker_sec *s);

#endif
