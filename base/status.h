/* status.h — ragtag's one error space.
 *
 * Two kinds of failure (see docs/architecture.md):
 *  - broken contracts inside ragtag (NULL handle, impossible shape from our
 *    own code) hit RT_ASSERT, always on, with file and line;
 *  - anything from outside (files, flags, model files, devices, network)
 *    returns a negative rt_status and leaves a readable message in a
 *    thread-local buffer: rt_error_detail().
 * Library code never exits; only main() decides. */
#ifndef RT_STATUS_H
#define RT_STATUS_H

#include <stdio.h>
#include <stdlib.h>

typedef enum rt_status {
    RT_OK = 0,
    RT_ERR_NOMEM = -1,       /* host or device allocation failed */
    RT_ERR_IO = -2,          /* open/read/write/fsync/rename failed */
    RT_ERR_FORMAT = -3,      /* malformed or truncated data/checkpoint file */
    RT_ERR_CONFIG = -4,      /* bad model file, flag or value */
    RT_ERR_SHAPE = -5,       /* impossible or mismatched tensor shape */
    RT_ERR_UNSUPPORTED = -6, /* op or feature not offered by this backend */
    RT_ERR_DEVICE = -7,      /* device or vendor library error */
    RT_ERR_NOTFOUND = -8,    /* file, backend or device not found */
    RT_ERR_ARG = -9,         /* bad argument from a caller */
    RT_ERR_NET = -10,        /* network or peer failure */
    RT_ERR_TIMEOUT = -11,    /* a wait ran out */
    RT_ERR_INTERRUPTED = -12, /* stopped by a signal */
    RT_ERR_REGROUP = -13,    /* the members of a run changed under a collective */
    RT_ERR_EXPELLED = -14,   /* this worker was dropped from its run */
    RT_ERR_STANDBY = -15,    /* too slow to help: this worker left the ring for now */
    RT_ERR_NO_STATE = -16    /* no member of a run holds its state any more */
} rt_status;

/* Name of a status code, e.g. "format error". Never NULL. */
const char *rt_strerror(int status);

/* The detail message of the last error set on this thread ("" if none). */
const char *rt_error_detail(void);

/* Set the thread's detail message and return `status`, so that callers write
 *   return rt_error(RT_ERR_FORMAT, "%s: offset %zu: truncated", path, off); */
int rt_error(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* Prefix the current detail message with more context ("loading x: ..."). */
int rt_error_wrap(int status, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

void rt_error_clear(void);

/* Always-on contract check: a failure is a bug in ragtag, not bad input. */
#define RT_ASSERT(cond)                                                        \
    do {                                                                       \
        if (!(cond)) {                                                         \
            fprintf(stderr, "ragtag: internal error at %s:%d: %s\n", __FILE__, \
                    __LINE__, #cond);                                          \
            abort();                                                           \
        }                                                                      \
    } while (0)

/* Propagate a negative status. */
#define RT_TRY(expr)                                                           \
    do {                                                                       \
        int rt_try_rc_ = (expr);                                               \
        if (rt_try_rc_ < 0)                                                    \
            return rt_try_rc_;                                                 \
    } while (0)

#endif
