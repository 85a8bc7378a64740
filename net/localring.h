/* localring.h — N forked processes joined in a ring without a coordinator,
 * for the collective tests and bench/bench_allreduce.
 *
 * The parent must not hold a ZeroMQ context when it calls this (fork).
 * Each child binds its inbox on tcp://127.0.0.(rank+1):* (every 127/8
 * address is the loopback), sends the endpoint to the parent over a pipe,
 * gets the whole member list back, builds the ring and runs fn. */
#ifndef RT_LOCALRING_H
#define RT_LOCALRING_H

#include <stddef.h>
#include <stdint.h>

#include "ring.h"

enum rt_localring_links {
    RT_LINKS_SHM,   /* one host: shared memory between all neighbours */
    RT_LINKS_TCP,   /* every rank pretends to be its own host: ZeroMQ over TCP */
    RT_LINKS_MIXED, /* ranks 2k and 2k+1 share a "host": both kinds in one ring */
};

struct rt_localring_opts {
    int n;
    enum rt_localring_links links;
    size_t chunk_bytes;   /* 0: default */
    double stall_timeout; /* 0: 60 s */
    bool curve;           /* CurveZMQ on the TCP links (curve.h) */
    bool zmq_data;        /* ZeroMQ for the data where raw TCP links would do (ring.h) */
};

/* fn runs in each child; out_fd is a pipe to the parent. Its return value
 * is the child's exit status. */
typedef int (*rt_localring_fn)(rt_ring *ring, int rank, int out_fd, void *arg);

/* Optional hook run in the parent once every endpoint is known (e.g. to
 * start a process that sends garbage to them). */
typedef void (*rt_localring_hook)(const struct rt_membership *ms, const char *run, void *arg);

/* Runs the children to completion. results[r] (when not NULL, `cap` bytes
 * each) receives what child r wrote to out_fd. RT_OK when every child
 * exited 0, else RT_ERR_NET naming the first that did not. */
int rt_localring_run(const struct rt_localring_opts *o, rt_localring_fn fn, void *arg,
                     rt_localring_hook hook, void *hook_arg, void *results, size_t cap);

#endif
