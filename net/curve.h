/* curve.h — authenticated, encrypted links: CurveZMQ keys on every TCP
 * socket and the ZAP handler (ZeroMQ RFC 27) that decides who may connect.
 *
 * Every process that listens (the coordinator's ROUTER, a worker's ring and
 * gossip inboxes) owns one rt_curve per ZeroMQ context: its own key pair,
 * served to whoever connects, and a set of admitted client keys. Clients
 * present a key pair and must know the server's public key beforehand (the
 * join string for the coordinator, the membership for ring neighbours),
 * so a man in the middle cannot pose as either side.
 *
 * Who is admitted is one allow-list of public keys: on the coordinator the
 * key derived from the join token (or the --authorized-keys file), on a
 * worker the keys of its run's current members, replaced by rt_curve_allow
 * at each generation. A worker's neighbour may connect a moment before this
 * worker learned of the generation that made it a neighbour, so an unknown
 * key waits up to `defer_s` for the allow-list to grow before it is refused.
 * Refusals are logged once per address per minute. The handler returns the
 * client's public key as the ZeroMQ "User-Id" of its messages, so a ring can
 * check that a chunk came from its left neighbour's connection.
 *
 * Why a thread: ZAP requests must be answered while the socket's owner may
 * be busy (a worker building its model, a ring waiting for a chunk); a
 * handler thread per context answers within milliseconds whatever the rest
 * of the process does, and is the pattern libzmq's own docs use. */
#ifndef RT_CURVE_H
#define RT_CURVE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define RT_KEY_LEN 40 /* a Curve25519 key in Z85 */
#define RT_LINK_SECRET_LEN 32 /* a member's link secret: 32 hex digits */

struct rt_keypair {
    char pub[RT_KEY_LEN + 1];
    char sec[RT_KEY_LEN + 1];
};

/* A fresh key pair (libsodium's random source, through libzmq). */
int rt_keypair_new(struct rt_keypair *k);
/* The key pair whose secret is these 32 bytes (the join token's). */
int rt_keypair_from_secret(const uint8_t secret[32], struct rt_keypair *k);
/* Whether s is a Z85 key (40 characters of the Z85 alphabet). */
bool rt_key_valid(const char *s);

typedef struct rt_curve rt_curve;

struct rt_curve_config {
    void *zctx;
    struct rt_keypair self; /* served to connecting peers */
    const char *who;        /* log prefix: "coord", "worker w1" */
    const char *unknown;    /* why an unknown key is refused, for the log */
    double defer_s;         /* an unknown key waits this long for rt_curve_allow */
    bool quiet;             /* no log lines (local workers) */
};

/* Starts the ZAP handler of zctx (one per context: call before any
 * socket of zctx binds). NULL with a detail on error. */
rt_curve *rt_curve_new(const struct rt_curve_config *c);
void rt_curve_destroy(rt_curve **c);

/* Replace the admitted client keys (n entries of RT_KEY_LEN + 1 bytes),
 * with each member's link secret for token links (secrets NULL: none). */
void rt_curve_allow(rt_curve *c, const char (*keys)[RT_KEY_LEN + 1],
                    const char (*secrets)[RT_LINK_SECRET_LEN + 1], int n);
/* Add one key to those admitted (with its link secret, or ""). */
void rt_curve_allow_one(rt_curve *c, const char *key);
void rt_curve_allow_member(rt_curve *c, const char *key, const char *secret);

/* A server socket, before it binds. c NULL: plain (--insecure). */
int rt_curve_server(rt_curve *c, void *sock);
/* A client socket, before it connects: it presents `as` (NULL: c's own
 * key) and accepts only a server holding server_pub. c NULL: plain. */
int rt_curve_client(rt_curve *c, void *sock, const char *server_pub,
                    const struct rt_keypair *as);
const char *rt_curve_public(const rt_curve *c);

/* Token links (--link-security token): the data links between workers
 * (ring and gossip) authenticate without encrypting. A client presents
 * its public key and its own random link secret (ZeroMQ PLAIN); the ZAP
 * handler admits it when the key is a member's and the secret is the one
 * that member announced over the encrypted control link. The control
 * link stays CurveZMQ. Anyone who can read the traffic sees the secrets
 * and the data: for trusted networks only (docs/cluster.md). */
void rt_curve_token_links(rt_curve *c, const char *my_secret);
bool rt_curve_token_links_on(const rt_curve *c);
/* A data link's server (inbox) or client socket: token links when they
 * are on, else as rt_curve_server / rt_curve_client. */
int rt_link_server(rt_curve *c, void *sock);
int rt_link_client(rt_curve *c, void *sock, const char *server_pub);
/* Log a refusal seen elsewhere (a handshake that failed before ZAP: no
 * CURVE, a wrong server key), with the same once-per-address-per-minute
 * limit. */
void rt_curve_log_refusal(rt_curve *c, const char *addr, const char *why);
/* Connections refused so far. */
long rt_curve_refused(const rt_curve *c);

#endif
