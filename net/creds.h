/* creds.h — the credentials of a run: the coordinator's key pair, the join
 * token, the join string that carries both to workers, and their files.
 *
 * `ragtag keygen DIR` writes (mode 0600, DIR 0700):
 *   DIR/secret.key  a key pair ("public Z85" and "secret Z85" lines): the
 *                   coordinator's (coord --keys DIR), or a worker's own
 *                   identity when the coordinator admits by --authorized-keys
 *   DIR/token       the join token, 32 hex digits
 *   DIR/join        the join string, for worker --join-file
 *   DIR/public.key  the public key alone (0644: for --authorized-keys files)
 * Secret files that group or others may read are refused, naming the file.
 *
 * The join string, "rtj1-" + the coordinator's public key (64 hex digits)
 * + "-" + the token (32 hex digits), is all a worker needs besides the
 * address; hex, so one double-click copies it and no shell quoting is
 * needed. The token is not sent anywhere: a worker turns it into the
 * "invitation" key pair (its secret is SHA-256 of the token) and proves it
 * holds it in the CURVE handshake; the coordinator admits that public key.
 *
 * Loopback runs need no setup: a coordinator listening on 127.x without
 * --keys makes credentials once and keeps them in a per-user file
 * ($XDG_RUNTIME_DIR/ragtag, else ~/.cache/ragtag/local, mode 0700) named
 * after its address, which workers joining that address read; another
 * user of the machine cannot. */
#ifndef RT_CREDS_H
#define RT_CREDS_H

#include <stdbool.h>
#include <stddef.h>

#include "curve.h"

#define RT_TOKEN_HEX 32
#define RT_JOIN_MAX 128

struct rt_creds {
    struct rt_keypair coord;  /* the coordinator's (a worker knows .pub only) */
    char token[RT_TOKEN_HEX + 1];
    struct rt_keypair invite; /* the token's key pair: what workers present */
};

/* New credentials in memory. */
int rt_creds_generate(struct rt_creds *c);
/* The join string of c. */
void rt_creds_join_string(const struct rt_creds *c, char *out, size_t cap);
/* A worker's credentials from a join string (no coordinator secret). */
int rt_creds_from_join(const char *join, struct rt_creds *c);
/* From a file holding a join string (refused when others may read it). */
int rt_creds_read_join_file(const char *path, struct rt_creds *c);

/* keygen: write DIR's files (DIR is made 0700 if missing). */
int rt_creds_write_dir(const char *dir, const struct rt_creds *c);
/* coord --keys DIR: the key pair and token. */
int rt_creds_load_dir(const char *dir, struct rt_creds *c);
/* A key pair file (DIR/secret.key). */
int rt_keypair_load(const char *path, struct rt_keypair *k);
/* --authorized-keys FILE: one Z85 public key per line (# comments): each
 * is admitted by c. The number of keys in *n. */
int rt_authorized_keys_load(const char *path, rt_curve *c, int *n);

/* Whether the host of tcp://HOST:PORT is the loopback (127/8, ::1,
 * localhost). */
bool rt_endpoint_is_loopback(const char *endpoint);
/* Loopback credentials of `endpoint` (a fixed port): read the per-user
 * file; when missing and `create`, make and write them. RT_ERR_NOTFOUND
 * when missing and not created. */
int rt_creds_local(const char *endpoint, bool create, struct rt_creds *c);

/* Read a small secret file into buf (NUL-terminated, trailing newline
 * removed): refused when it is not a regular file or group/other may read
 * it. */
int rt_secret_file_read(const char *path, char *buf, size_t cap);

#endif
