/* module-util.c — the device list and buffer bookkeeping the loadable
 * backend modules share (module-util.h). */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>

#include "module-util.h"
#include "status.h"

void mod_devices_fail(struct mod_devices *l, int status, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(l->why, sizeof l->why, fmt, ap);
    va_end(ap);
    l->status = status;
    l->n = 0;
}

int mod_devices_init(struct mod_devices *l, void (*enumerate)(void))
{
    pthread_once(&l->once, enumerate);
    if (l->status < 0)
        return rt_error(l->status, "%s", l->why);
    return RT_OK;
}

int mod_devices_count(struct mod_devices *l, void (*enumerate)(void))
{
    RT_TRY(mod_devices_init(l, enumerate));
    return l->n;
}

int mod_devices_check(struct mod_devices *l, void (*enumerate)(void), const char *backend,
                      int device)
{
    RT_TRY(mod_devices_init(l, enumerate));
    if (device < 0 || device >= l->n)
        return rt_error(RT_ERR_NOTFOUND, "%s: %d device(s); device %d does not exist", backend,
                        l->n, device);
    return RT_OK;
}

const char *mod_buf_what(const rt_buf *b, char *what, size_t size)
{
    snprintf(what, size, "allocating %zu bytes", b->bytes);
    return what;
}

enum mod_copy mod_copy_kind(rt_view dst, rt_view src, size_t n)
{
    if (dst.buf != src.buf)
        return MOD_COPY_APART;
    if (dst.off == src.off)
        return MOD_COPY_SAME;
    return src.off < dst.off + n && dst.off < src.off + n ? MOD_COPY_OVERLAP : MOD_COPY_APART;
}
