/* cuda.c — the cuda backend: devices, contexts, memory, elementwise ops,
 * sumsq, the optimiser steps and the table. The files below it, which it
 * uses and which never call back into it: errors.c (vendor statuses),
 * gemm.c (cuBLAS), conv.c (convolutions), nn.c (the other layer ops) and
 * the kernels in kernels-*.cu.
 *
 * A machine without a driver or a GPU is not an error of the module: the
 * backend reports no devices, with the reason in one line, and `ragtag
 * devices` shows it as unavailable. */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-impl.h"
#include "module-util.h"
#include "status.h"

/* ---- devices ------------------------------------------------------------------------ */

/* The devices, counted once per process. */
static struct mod_devices cu_devices = MOD_DEVICES_INIT;

static void cu_version(int v, int *major, int *minor)
{
    *major = v / 1000;
    *minor = v % 1000 / 10;
}

/* Only the runtime is asked here (no cuBLAS, no cuDNN): `ragtag devices`
 * on a machine without a GPU costs one call. */
static void cu_enumerate(void)
{
    int n = 0, drv = 0, rtv = 0, dmaj, dmin, rmaj, rmin;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err == cudaSuccess && n > 0) {
        cu_devices.n = n;
        cu_devices.status = RT_OK;
        return;
    }
    cudaGetLastError(); /* the failure is reported, not left behind */
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rtv);
    cu_version(drv, &dmaj, &dmin);
    cu_version(rtv, &rmaj, &rmin);
    if (err == cudaSuccess || err == cudaErrorNoDevice)
        mod_devices_fail(&cu_devices, RT_ERR_NOTFOUND,
                         "no CUDA device (the NVIDIA driver, CUDA %d.%d, sees no GPU)", dmaj, dmin);
    else if (err == cudaErrorInsufficientDriver && drv == 0)
        mod_devices_fail(&cu_devices, RT_ERR_NOTFOUND,
                         "no NVIDIA driver (libcuda.so.1 not found): no CUDA device can be used");
    else if (err == cudaErrorInsufficientDriver)
        mod_devices_fail(&cu_devices, RT_ERR_NOTFOUND,
                         "the NVIDIA driver supports CUDA %d.%d, older than this module's CUDA "
                         "runtime %d.%d: update the driver",
                         dmaj, dmin, rmaj, rmin);
    else
        mod_devices_fail(&cu_devices, RT_ERR_DEVICE, "no usable CUDA device: %s (%s)",
                         cudaGetErrorString(err), cudaGetErrorName(err));
}

static int cu_init(void) { return mod_devices_init(&cu_devices, cu_enumerate); }

static int cu_device_count(void) { return mod_devices_count(&cu_devices, cu_enumerate); }

static int cu_device_info(int device, struct rt_device_info *out)
{
    RT_TRY(mod_devices_check(&cu_devices, cu_enumerate, "cuda", device));
    struct cudaDeviceProp p;
    RT_TRY(cu_status(cudaGetDeviceProperties(&p, device), "reading the device's properties"));
    int drv = 0, rtv = 0, dmaj, dmin, rmaj, rmin;
    cudaDriverGetVersion(&drv);
    cudaRuntimeGetVersion(&rtv);
    cu_version(drv, &dmaj, &dmin);
    cu_version(rtv, &rmaj, &rmin);
    const size_t dnn = cudnnGetVersion();
    int bmaj = 0, bmin = 0;
    cublasGetProperty(MAJOR_VERSION, &bmaj);
    cublasGetProperty(MINOR_VERSION, &bmin);
    snprintf(out->name, sizeof out->name, "%.127s", p.name);
    snprintf(out->platform, sizeof out->platform,
             "CUDA %d.%d (driver %d.%d), cuBLAS %d.%d, cuDNN %zu.%zu.%zu, sm_%d%d", rmaj, rmin,
             dmaj, dmin, bmaj, bmin, dnn / 10000, dnn / 100 % 100, dnn % 100, p.major, p.minor);
    out->mem_bytes = p.totalGlobalMem;
    out->compute_units = p.multiProcessorCount;
    return RT_OK;
}

/* ---- opening a device ---------------------------------------------------------------- */

static bool env_is(const char *name, const char *value)
{
    const char *v = getenv(name);
    return v && strcmp(v, value) == 0;
}

static bool env_set(const char *name)
{
    const char *v = getenv(name);
    return v && *v && strcmp(v, "0") != 0;
}

/* Frees what dev_open made, in reverse order; also after a partial open. */
static void cu_dev_free(struct cu_dev *o)
{
    cu_conv_cache_free(o);
    free(o->convs);
    if (o->pool)
        cudnnDestroyPoolingDescriptor(o->pool);
    for (int i = 0; i < 3; i++)
        if (o->td[i])
            cudnnDestroyTensorDescriptor(o->td[i]);
    if (o->dnn)
        cudnnDestroy(o->dnn);
    if (o->blas)
        cublasDestroy(o->blas);
    if (o->partial_host)
        cudaFreeHost(o->partial_host);
    if (o->partial)
        cudaFree(o->partial);
    if (o->blas_ws)
        cudaFree(o->blas_ws);
    if (o->stream)
        cudaStreamDestroy(o->stream);
    free(o);
}

/* The module has no code for this GPU: say which build flag would add it. */
static int cu_no_kernels(int ordinal, cudaError_t err)
{
    struct cudaDeviceProp p;
    if (cudaGetDeviceProperties(&p, ordinal) != cudaSuccess)
        p.major = p.minor = 0;
    cudaGetLastError();
    return rt_error(RT_ERR_UNSUPPORTED,
                    "cuda: ragtag-cuda.so has no kernels for this GPU (sm_%d%d): %s; rebuild "
                    "with NVCCFLAGS='-gencode arch=compute_%d%d,code=sm_%d%d'",
                    p.major, p.minor, cudaGetErrorString(err), p.major, p.minor, p.major,
                    p.minor);
}

/* Sizes of the scratch memory every context holds. */
#define CU_PARTIAL_BYTES (RTCU_SUMSQ_BLOCKS * sizeof(double))
#define CU_SCRATCH_BYTES (CU_PARTIAL_BYTES + 256)

static int cu_dev_open(rt_dev *d)
{
    RT_TRY(cu_init());
    struct cu_dev *o = calloc(1, sizeof *o);
    if (!o)
        return rt_error(RT_ERR_NOMEM, "out of host memory opening a CUDA device");
    o->ordinal = d->device;
    o->cudnn = !env_is("RAGTAG_CUDA_CUDNN", "0");
    o->tf32 = env_set("RAGTAG_CUDA_TF32");
    o->conv_find = env_set("RAGTAG_CUDA_CONV_FIND");
    o->verbose = env_set("RAGTAG_BACKEND_VERBOSE");
    int rc;
    struct cudaDeviceProp p;
#define STEP(expr)                                                                           \
    do {                                                                                     \
        if ((rc = (expr)) < 0)                                                               \
            goto fail;                                                                       \
    } while (0)
    STEP(cu_status(cudaSetDevice(o->ordinal), "selecting the device"));
    STEP(cu_status(cudaGetDeviceProperties(&p, o->ordinal), "reading the device's properties"));
    snprintf(o->name, sizeof o->name, "%.127s", p.name);
    cudaError_t probe = rtcu_probe();
    if (probe != cudaSuccess) {
        rc = probe == cudaErrorNoKernelImageForDevice || probe == cudaErrorInvalidDeviceFunction
                 ? cu_no_kernels(o->ordinal, probe)
                 : cu_status(probe, "loading the module's kernels");
        goto fail;
    }
    STEP(cu_status(cudaStreamCreateWithFlags(&o->stream, cudaStreamNonBlocking),
                   "creating a stream"));

    /* cuBLAS on our stream, with a workspace of ours (32 MiB, NVIDIA's advice
     * for Hopper; 4 MiB before), so that it never allocates in a step.
     * cublasSetStream resets the workspace: the stream goes first. */
    const size_t blas_ws = p.major >= 9 ? (size_t)32 << 20 : (size_t)4 << 20;
    STEP(cu_blas_status(cublasCreate(&o->blas), "creating a handle"));
    STEP(cu_blas_status(cublasSetStream(o->blas, o->stream), "setting the stream"));
    STEP(cu_status(cudaMalloc(&o->blas_ws, blas_ws), "allocating cuBLAS's workspace"));
    STEP(cu_blas_status(cublasSetWorkspace(o->blas, o->blas_ws, blas_ws), "setting the workspace"));
    /* FP32 GEMMs in FP32 (TF32 rounds inputs to 10 mantissa bits, past the
     * conformance test's bounds) unless the user asks for tensor cores. */
    STEP(cu_blas_status(cublasSetMathMode(o->blas, o->tf32 ? CUBLAS_TF32_TENSOR_OP_MATH
                                                           : CUBLAS_DEFAULT_MATH),
                        "setting the math mode"));

    if (o->cudnn) {
        cudnnStatus_t st = cudnnCreate(&o->dnn);
        if (st != CUDNN_STATUS_SUCCESS) {
            rc = cu_dnn_status(st, "creating a handle (RAGTAG_CUDA_CUDNN=0 runs without cuDNN)");
            goto fail;
        }
        STEP(cu_dnn_status(cudnnSetStream(o->dnn, o->stream), "setting the stream"));
        for (int i = 0; i < 3; i++)
            STEP(cu_dnn_status(cudnnCreateTensorDescriptor(&o->td[i]), "creating a descriptor"));
        STEP(cu_dnn_status(cudnnCreatePoolingDescriptor(&o->pool), "creating a descriptor"));
    }

    /* sumsq's partial sums, then the softmax label flag, in one block; and
     * their page-locked host copy, which async copies need. */
    void *scratch = NULL;
    STEP(cu_status(cudaMalloc(&scratch, CU_SCRATCH_BYTES), "allocating scratch memory"));
    o->partial = scratch;
    o->flag = (uint32_t *)((char *)scratch + CU_PARTIAL_BYTES);
    void *pinned = NULL;
    STEP(cu_status(cudaMallocHost(&pinned, CU_SCRATCH_BYTES), "allocating page-locked memory"));
    o->partial_host = pinned;
    o->flag_host = (uint32_t *)((char *)pinned + CU_PARTIAL_BYTES);
#undef STEP
    d->impl = o;
    return RT_OK;

fail:
    cu_dev_free(o);
    return rc;
}

static void cu_dev_close(rt_dev *d)
{
    struct cu_dev *o = cu(d);
    if (!o)
        return;
    cudaSetDevice(o->ordinal);
    cudaStreamSynchronize(o->stream);
    cu_dev_free(o);
    cudaGetLastError();
    d->impl = NULL;
}

/* ---- memory ------------------------------------------------------------------------- */

/* Buffers are planned at model load (parameters, gradients, activations
 * for the largest batch, one workspace): running out of device memory is
 * said there, with the bytes asked for and what the device has left. */
static int cu_buf_alloc(rt_dev *d, rt_buf *b)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, mod_buf_bytes(b));
    if (err == cudaErrorMemoryAllocation) {
        size_t free_b = 0, total = 0;
        cudaGetLastError();
        if (cudaMemGetInfo(&free_b, &total) != cudaSuccess)
            free_b = total = 0;
        cudaGetLastError();
        return rt_error(RT_ERR_NOMEM,
                        "cuda: out of device memory: a buffer of %zu bytes (%.1f MiB) does not "
                        "fit on %s (device %d: %.1f of %.1f MiB free)",
                        b->bytes, (double)b->bytes / (1 << 20), o->name, o->ordinal,
                        (double)free_b / (1 << 20), (double)total / (1 << 20));
    }
    if (err != cudaSuccess) {
        char what[96];
        return cu_status(err, mod_buf_what(b, what, sizeof what));
    }
    b->handle = p;
    return RT_OK;
}

/* cudaFree waits for the device: a buffer is never freed under a kernel. */
static void cu_buf_free(rt_dev *d, rt_buf *b)
{
    if (b->handle) {
        cudaSetDevice(cu(d)->ordinal);
        cudaFree(b->handle);
        cudaGetLastError();
    }
    b->handle = NULL;
}

/* Blocking: the caller may reuse `src` as soon as this returns. The copy
 * is ordered after every op queued before it. */
static int cu_upload(rt_dev *d, rt_view dst, const void *src, size_t bytes)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    RT_TRY(cu_status(cudaMemcpyAsync(cu_f(dst), src, bytes, cudaMemcpyHostToDevice, o->stream),
                     "uploading"));
    return cu_status(cudaStreamSynchronize(o->stream), "uploading");
}

/* Errors of queued work (a kernel that failed) surface here or at sync. */
static int cu_download(rt_dev *d, void *dst, rt_view src, size_t bytes)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    RT_TRY(cu_status(cudaMemcpyAsync(dst, cu_f(src), bytes, cudaMemcpyDeviceToHost, o->stream),
                     "downloading"));
    return cu_status(cudaStreamSynchronize(o->stream), "downloading");
}

/* memmove semantics. cudaMemcpy's result is undefined for overlapping
 * ranges, so those (rare: no layer makes them) go through a temporary
 * buffer, the one allocation an op may make. */
static int cu_copy(rt_dev *d, rt_view dst, rt_view src, size_t n)
{
    struct cu_dev *o = cu(d);
    float *s = cu_f(src), *t = cu_f(dst);
    const enum mod_copy kind = mod_copy_kind(dst, src, n);
    if (kind == MOD_COPY_SAME)
        return RT_OK;
    RT_TRY(cu_enter(d));
    const size_t bytes = n * sizeof(float);
    if (kind == MOD_COPY_OVERLAP) {
        void *tmp = NULL;
        RT_TRY(cu_status(cudaMalloc(&tmp, bytes), "allocating a copy's bounce buffer"));
        cudaError_t err = cudaMemcpyAsync(tmp, s, bytes, cudaMemcpyDeviceToDevice, o->stream);
        if (err == cudaSuccess)
            err = cudaMemcpyAsync(t, tmp, bytes, cudaMemcpyDeviceToDevice, o->stream);
        if (err == cudaSuccess)
            err = cudaStreamSynchronize(o->stream);
        cudaFree(tmp);
        return cu_status(err, "copying");
    }
    return cu_status(cudaMemcpyAsync(t, s, bytes, cudaMemcpyDeviceToDevice, o->stream), "copying");
}

static int cu_sync(rt_dev *d)
{
    RT_TRY(cu_enter(d));
    return cu_status(cudaStreamSynchronize(cu(d)->stream), "finishing queued work");
}

/* ---- elementwise ------------------------------------------------------------------------ */

int cu_mul(rt_dev *d, size_t n, rt_view a, rt_view b, rt_view y)
{
    CU_LAUNCH(d, "mul", rtcu_mul(cu(d)->stream, n, cu_f(a), cu_f(b), cu_f(y)));
}

int cu_axpy(rt_dev *d, size_t n, float alpha, rt_view x, rt_view y)
{
    CU_LAUNCH(d, "axpy", rtcu_axpy(cu(d)->stream, n, alpha, cu_f(x), cu_f(y)));
}

int cu_scale(rt_dev *d, size_t n, float alpha, rt_view x)
{
    CU_LAUNCH(d, "scale", rtcu_scale(cu(d)->stream, n, alpha, cu_f(x)));
}

int cu_fill(rt_dev *d, size_t n, float value, rt_view x)
{
    CU_LAUNCH(d, "fill", rtcu_fill(cu(d)->stream, n, value, cu_f(x)));
}

/* Two stages: up to RTCU_SUMSQ_BLOCKS blocks each sum a contiguous slice in
 * double, then the host adds the partial sums in block order. The launch
 * shape depends on n only, so a run repeats exactly. */
int cu_sumsq(rt_dev *d, size_t n, rt_view x, double *out)
{
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    size_t blocks = (n + RTCU_THREADS - 1) / RTCU_THREADS;
    if (blocks > RTCU_SUMSQ_BLOCKS)
        blocks = RTCU_SUMSQ_BLOCKS;
    RT_TRY(cu_status(rtcu_sumsq_part(o->stream, n, cu_f(x), (int)blocks, o->partial),
                     "launching sumsq"));
    RT_TRY(cu_status(cudaMemcpyAsync(o->partial_host, o->partial, blocks * sizeof(double),
                                     cudaMemcpyDeviceToHost, o->stream),
                     "reading sumsq's partial sums"));
    RT_TRY(cu_status(cudaStreamSynchronize(o->stream), "reading sumsq's partial sums"));
    double s = 0.0;
    for (size_t i = 0; i < blocks; i++)
        s += o->partial_host[i];
    *out = s;
    return RT_OK;
}

/* ---- optimiser steps ---------------------------------------------------------------------- */

int cu_sgd_step(rt_dev *d, size_t n, const struct rt_sgd_params *p, rt_view w, rt_view g,
                rt_view v)
{
    const int mode = p->momentum == 0.0f ? 0 : p->nesterov ? 2 : 1;
    float *vp = mode ? cu_f(v) : NULL; /* no velocity buffer without momentum */
    CU_LAUNCH(d, "sgd_step",
              rtcu_sgd_step(cu(d)->stream, n, p->lr, p->momentum, p->weight_decay, mode, cu_f(w),
                            cu_f(g), vp));
}

/* The step's scalars come from the core, as on every backend. */
int cu_adam_step(rt_dev *d, size_t n, const struct rt_adam_scalars *p, rt_view w, rt_view g,
                 rt_view m, rt_view v)
{
    CU_LAUNCH(d, "adam_step",
              rtcu_adam_step(cu(d)->stream, n, p->lr, p->beta1, p->beta2, p->eps, p->l2,
                             p->decay, p->inv_bc2, p->cm, p->cg, cu_f(w), cu_f(g), cu_f(m),
                             cu_f(v)));
}

/* ---- the table ---------------------------------------------------------------------------- */

static const struct rt_backend_ops cu_backend = {
    .abi_version = RT_BACKEND_ABI_VERSION,
    .size = sizeof(struct rt_backend_ops),
    .name = "cuda",
    .device_count = cu_device_count,
    .device_info = cu_device_info,
    .dev_open = cu_dev_open,
    .dev_close = cu_dev_close,
    .buf_alloc = cu_buf_alloc,
    .buf_free = cu_buf_free,
    .upload = cu_upload,
    .download = cu_download,
    .copy = cu_copy,
    .sync = cu_sync,
    .conv2d_workspace = cu_conv2d_workspace,
    .host_memory = false,
#define RT_OP(name, params) .name = cu_##name,
#include "ops.def"
#undef RT_OP
};

/* The module's one exported symbol (see backend-impl.h). */
const struct rt_backend_ops *rt_backend_module_ops(void) { return &cu_backend; }
