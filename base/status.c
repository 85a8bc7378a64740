/* status.c — status names and the thread-local error detail. */
#include "status.h"

#include <stdarg.h>
#include <string.h>

static _Thread_local char detail[1024];

const char *rt_strerror(int status)
{
    switch (status) {
    case RT_OK: return "success";
    case RT_ERR_NOMEM: return "out of memory";
    case RT_ERR_IO: return "I/O error";
    case RT_ERR_FORMAT: return "malformed file";
    case RT_ERR_CONFIG: return "configuration error";
    case RT_ERR_SHAPE: return "shape error";
    case RT_ERR_UNSUPPORTED: return "unsupported";
    case RT_ERR_DEVICE: return "device error";
    case RT_ERR_NOTFOUND: return "not found";
    case RT_ERR_ARG: return "invalid argument";
    case RT_ERR_NET: return "network error";
    case RT_ERR_TIMEOUT: return "timed out";
    case RT_ERR_INTERRUPTED: return "interrupted";
    case RT_ERR_REGROUP: return "the members changed";
    case RT_ERR_EXPELLED: return "expelled from the run";
    case RT_ERR_STANDBY: return "on standby";
    case RT_ERR_NO_STATE: return "the run's state is lost";
    default: return "unknown error";
    }
}

const char *rt_error_detail(void) { return detail; }

void rt_error_clear(void) { detail[0] = '\0'; }

/* Formatted aside first: a caller may quote the detail it replaces
 * (rt_error(..., "...(%s)", rt_error_detail())), which vsnprintf straight
 * into it would overwrite while reading. */
int rt_error(int status, const char *fmt, ...)
{
    char text[sizeof detail];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof text, fmt, ap);
    va_end(ap);
    memcpy(detail, text, strlen(text) + 1);
    return status;
}

int rt_error_wrap(int status, const char *fmt, ...)
{
    char prefix[512], old[sizeof detail];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, detail, sizeof old);
    /* Truncation is acceptable here: a long message loses its tail. */
    size_t n = strlen(prefix);
    memcpy(detail, prefix, n + 1);
    if (old[0] && n + 2 < sizeof detail) {
        memcpy(detail + n, ": ", 3);
        size_t room = sizeof detail - n - 3;
        size_t m = strlen(old);
        if (m > room)
            m = room;
        memcpy(detail + n + 2, old, m);
        detail[n + 2 + m] = '\0';
    }
    return status;
}
