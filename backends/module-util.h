/* module-util.h — what the loadable backend modules (opencl, cuda) share:
 * their list of devices, enumerated once per process, and the bookkeeping
 * of device buffers. Compiled into each module, never into libragtag; it
 * uses only backends/ headers and the base (status.h). */
#ifndef RT_MODULE_UTIL_H
#define RT_MODULE_UTIL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>

#include "backend.h"

/* A module's devices. Its enumerate function (run once, by pthread_once,
 * on the first question) sets n and status, or calls mod_devices_fail.
 * A machine without the vendor's driver or a device is not an error of the
 * module: the reason is kept and given as the answer to every question. */
struct mod_devices {
    pthread_once_t once;
    int status;    /* < 0: no usable device; why says why */
    char why[512];
    int n;
};
#define MOD_DEVICES_INIT {.once = PTHREAD_ONCE_INIT}

/* No usable device: status (< 0) and the reason, printf-style. */
void mod_devices_fail(struct mod_devices *l, int status, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Enumerates once; RT_OK, or the status and reason of the enumeration. */
int mod_devices_init(struct mod_devices *l, void (*enumerate)(void));

/* The number of devices, or the enumeration's status (< 0). */
int mod_devices_count(struct mod_devices *l, void (*enumerate)(void));

/* RT_OK when `device` exists; else RT_ERR_NOTFOUND naming `backend`. */
int mod_devices_check(struct mod_devices *l, void (*enumerate)(void), const char *backend,
                      int device);

/* ---- buffers --------------------------------------------------------------------------- */

/* Bytes to ask the device for: a zero-byte buffer still gets a handle. */
static inline size_t mod_buf_bytes(const rt_buf *b) { return b->bytes ? b->bytes : 4; }

/* "allocating N bytes", the detail of a failed allocation of b, in what. */
const char *mod_buf_what(const rt_buf *b, char *what, size_t size);

/* How a copy of n elements from src to dst lies (copy has memmove
 * semantics): on itself (nothing to do), overlapping within one buffer
 * (device copies refuse or are undefined there: it goes through a bounce
 * buffer), or apart. */
enum mod_copy { MOD_COPY_SAME, MOD_COPY_OVERLAP, MOD_COPY_APART };
enum mod_copy mod_copy_kind(rt_view dst, rt_view src, size_t n);

#endif
