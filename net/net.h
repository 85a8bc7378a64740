/* net.h — ragtag's multi-machine layer as the command line sees it:
 * `ragtag coord`, `ragtag worker` and `ragtag train --workers N`.
 * docs/cluster.md tells how to use them; docs/architecture.md how they work.
 *
 * Built with ZeroMQ and msgpack-c (configure --with-zmq); without them
 * every entry point fails with RT_ERR_UNSUPPORTED saying what to install. */
#ifndef RT_NET_H
#define RT_NET_H

#include <stdbool.h>
#include <stddef.h>

#include "train.h"

/* Whether this ragtag was built with the multi-machine layer. */
bool rt_net_available(void);

/* --max-restarts when not given (train --workers N) */
#define RT_LOCAL_MAX_RESTARTS 3

struct rt_coord_options {
    char listen[256];      /* tcp://HOST:PORT (HOST * for all interfaces); empty:
                              127.0.0.1 and a free port */
    int workers;           /* N to wait for */
    int min_workers;       /* > 0: start with this many when the join timeout ends;
                              during training (sync), the fewest the run goes on with */
    int max_workers;       /* most members at once, joins during training
                              included (0: --workers) */
    double join_timeout;   /* seconds to wait for the workers (default 60) */
    double setup_timeout;  /* seconds from the job to every worker ready (default 300) */
    double worker_timeout; /* silence after which a worker is lost (default 30) */
    bool serve_data;       /* ship the data files to workers (cached by hash) */
    bool allow_shm;        /* workers on one host share memory (default on) */
    size_t chunk_bytes;    /* ring sub-chunk (default 512 KiB) */
    /* `ragtag train --workers N`: start N worker processes of this binary */
    bool spawn_local;
    int local_threads;     /* threads of each local worker (0: cores / N, at least 1) */
    char local_backend[32]; /* one name, or one per worker: cpu,opencl (cycled) */
    int local_device;
    char local_throttle[128]; /* testing aid: "" or one fraction per worker (cycled) */
    int max_restarts;      /* local workers started again after one died: in its place
                              while others train on, or all of them from the checkpoint
                              when none is left (-1: the default, 3; 0: never) */
    /* link security (docs/cluster.md, "Security") */
    bool insecure;            /* no CURVE: plain links, said loudly */
    bool token_links;         /* --link-security token: worker-to-worker links authenticated,
                                 not encrypted (the control link stays CurveZMQ) */
    char keys_dir[1024];      /* ragtag keygen's DIR: key pair and join token */
    char authorized_keys[1024]; /* admit these workers' keys instead of the token */
    /* the status page (docs/status.md) */
    char http[256];           /* --http ADDR:PORT, "" off; no address: 127.0.0.1 */
};

void rt_coord_options_defaults(struct rt_coord_options *o);
/* Rendezvous, distribute the job, collect reports, write files. */
int rt_coord_run(const struct rt_coord_options *o, const struct rt_train_config *c,
                 struct rt_train_result *res);
/* SIGINT: stop every worker at the next step boundary, checkpointing. */
void rt_coord_request_stop(void);

struct rt_worker_options {
    char join[256];       /* tcp://HOST:PORT of the coordinator */
    char advertise[128];  /* address peers reach this worker at; empty: the
                             interface that routes to the coordinator */
    char name[64];        /* empty: HOST-PID */
    int ring_port;        /* TCP port of the ring inbox; 0: any free port */
    char backend[32];
    int device;
    int threads;          /* 0: all cores */
    char cache_dir[1024]; /* empty: see rt_cache_dir */
    double connect_timeout; /* 0: wait for the coordinator forever */
    double coord_timeout; /* once training: after --worker-timeout of the coordinator's
                             silence, keep the state and wait this long for one to
                             re-adopt this worker (default 120; 0: exit at once) */
    bool quiet;           /* only errors (local workers of train --workers) */
    char throttle[32];    /* testing aid: "" or a fraction in (0, 1] */
    char stall_at[32];    /* testing aid: "" or STEP:SECONDS, the training thread hangs */
    double stall_setup;   /* testing aid: seconds the set-up hangs once the job came (0: none) */
    double stall_end;     /* testing aid: seconds it waits after training, before it reports
                           * its end (0: none) */
    long parent;          /* > 0: the process that started this worker (train
                             --workers N); the worker dies with it */
    /* link security (docs/cluster.md, "Security") */
    bool insecure;        /* plain links, for a coordinator that runs --insecure */
    char join_file[1024]; /* a file holding the join string (else $RAGTAG_JOIN,
                             else, for a loopback coordinator, this user's own) */
    char keys_dir[1024];  /* this worker's own key pair (ragtag keygen DIR), for a
                             coordinator that admits by --authorized-keys */
    char data_dirs[8][1024]; /* --data-dir: the only directories whose files a job
                             may name (served data aside) */
    int ndata_dirs;
    bool any_data;        /* every path allowed (local workers of train --workers) */
    bool rejoining;       /* joining again after leaving a run (standby, expelled):
                             a run that ended cannot say so, so connect_timeout
                             bounds the wait, and its error says why */
};

void rt_worker_options_defaults(struct rt_worker_options *o);
/* `ragtag keygen DIR`: a key pair and a join token in DIR (creds.h); the
 * public key in public_key. */
int rt_net_keygen(const char *dir, char *public_key, size_t cap);
int rt_worker_run(const struct rt_worker_options *o);
void rt_worker_request_stop(void);

#endif
