/* backend-impl.h — what a backend implements; private to src/ and backends/.
 *
 * A backend fills one struct rt_backend_ops with designated initialisers
 * (.gemm = cpu_gemm, ...). The table starts with abi_version and size so a
 * module built against another ragtag is refused, not misused. */
#ifndef RT_BACKEND_IMPL_H
#define RT_BACKEND_IMPL_H

#include "backend.h"

struct rt_backend_ops {
    uint32_t abi_version; /* RT_BACKEND_ABI_VERSION */
    uint32_t size;        /* sizeof(struct rt_backend_ops) */
    const char *name;

    int (*device_count)(void);
    int (*device_info)(int device, struct rt_device_info *out);
    /* Set d->impl; d->device and d->threads are filled by the caller. */
    int (*dev_open)(rt_dev *d);
    void (*dev_close)(rt_dev *d);

    /* b->dev and b->bytes are set; the backend sets b->handle. */
    int (*buf_alloc)(rt_dev *d, rt_buf *b);
    void (*buf_free)(rt_dev *d, rt_buf *b);
    int (*upload)(rt_dev *d, rt_view dst, const void *src, size_t bytes);
    int (*download)(rt_dev *d, void *dst, rt_view src, size_t bytes);
    int (*copy)(rt_dev *d, rt_view dst, rt_view src, size_t n);
    int (*sync)(rt_dev *d);
    /* optional (NULL: rt_download_start downloads at once) */
    int (*download_start)(rt_dev *d, void *dst, rt_view src, size_t bytes);
    int (*download_wait)(rt_dev *d);
    size_t (*conv2d_workspace)(rt_dev *d, const struct rt_conv_shape *s);
    bool host_memory; /* buffers are host pointers (cpu backend) */

    /* compute ops, one slot per line of ops.def */
#define RT_OP(name, params) int(*name) params;
#include "ops.def"
#undef RT_OP
};

struct rt_dev {
    const struct rt_backend_ops *ops;
    int device;
    int threads;
    void *impl; /* the backend's own state */
    size_t live_bytes; /* bytes of its buffers now (rt_dev_live_bytes) */
};

/* dense_bwd as the device's own two GEMMs, one after the other (backend.h:
 * gemm (1, 0) for dw, gemm (0, 0) for dx; either may be absent): for a
 * backend whose queue runs them in turn anyway. */
static inline int rt_dense_bwd_by_gemm(rt_dev *d, int n, int in, int units, rt_view g,
                                       rt_view x, rt_view w, rt_view dw, rt_view dx)
{
    int rc = 0;
    if (dw.buf && units > 0)
        rc = d->ops->gemm(d, 1, 0, units, in, n, 1.0f, g, units, x, in, 0.0f, dw, in);
    if (rc == 0 && dx.buf && n > 0)
        rc = d->ops->gemm(d, 0, 0, n, in, units, 1.0f, g, units, w, in, 0.0f, dx, in);
    return rc;
}

/* Built-in backends. */
extern const struct rt_backend_ops rt_cpu_backend;

/* An optional backend is a loadable module ragtag-NAME.so (docs/backends.md)
 * that exports this one function, returning its table; src/backend.c finds
 * it with dlsym and checks the table's ABI before using it. */
#define RT_BACKEND_MODULE_SYMBOL "rt_backend_module_ops"
const struct rt_backend_ops *rt_backend_module_ops(void);

#endif
