/* cuda-impl.h — private to the cuda backend (cuda.c, errors.c, gemm.c,
 * conv.c, nn.c).
 *
 * The cuda backend is a loadable module (ragtag-cuda.so) linking the CUDA
 * runtime, cuBLAS and cuDNN 9; the ragtag binary links none of them, so it
 * starts on a machine without a driver or a GPU and lists `cuda` as
 * unavailable with the reason. Who does what:
 *  - GEMM: cuBLAS (cublasSgemm, row-major through the transpose identity);
 *  - convolutions: cuDNN's legacy convolution API, one algorithm per shape
 *    and direction picked once and cached here (conv.c), with a workspace
 *    budget fixed by the shape; im2col + cuBLAS where cuDNN has no algorithm;
 *  - average pooling and batch norm: cuDNN, whose maths there is backend.h's;
 *  - the rest, own kernels (kernels.h, kernels-*.cu): max pooling (backend.h's
 *    tie rule), activations (backend.h's relu/leaky derivative looks at x,
 *    cuDNN's at y; cuDNN has no leaky), softmax + cross-entropy (one pass
 *    with int32 labels and per-sample losses), bias, dropout, elementwise
 *    ops, sumsq, the fused optimiser steps.
 * RAGTAG_CUDA_CUDNN=0 runs every op on the own kernels (and convolutions
 * on im2col + cuBLAS), which isolates cuDNN when results look wrong.
 *
 * One struct cu_dev per rt_dev: a stream, a cuBLAS and a cuDNN handle bound
 * to it, scratch memory, and the per-shape convolution cache. Every op is
 * enqueued on the stream and returns before it runs; sync, download, sumsq
 * and the softmax label check wait. An rt_dev is used by one thread at a
 * time (like every backend's); each entry point makes its device current on
 * the calling thread first. Device memory is only allocated by buf_alloc
 * (at model load) and dev_open: no op allocates, except a copy between
 * overlapping views of one buffer (no layer makes those). */
#ifndef RT_CUDA_IMPL_H
#define RT_CUDA_IMPL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backend-impl.h"
#include "kernels.h"

struct cu_conv; /* conv.c: one convolution shape's descriptors and algorithms */

struct cu_dev {
    int ordinal;
    char name[128];
    cudaStream_t stream;
    cublasHandle_t blas;
    cudnnHandle_t dnn;
    void *blas_ws;        /* cuBLAS's workspace, ours so it never allocates */
    double *partial;      /* device: sumsq's partial sums */
    uint32_t *flag;       /* device: first bad label of softmax */
    double *partial_host; /* host, page-locked: where the partial sums come back */
    uint32_t *flag_host;  /* host, page-locked: where the flag comes back */
    cudnnTensorDescriptor_t td[3]; /* set per call by the cuDNN ops of nn.c */
    cudnnPoolingDescriptor_t pool;
    struct cu_conv **convs; /* the convolution cache, never evicted */
    int nconv, capconv;
    bool cudnn;     /* false: RAGTAG_CUDA_CUDNN=0 */
    bool tf32;      /* RAGTAG_CUDA_TF32=1: tensor cores at TF32 for GEMM and conv */
    bool conv_find; /* RAGTAG_CUDA_CONV_FIND=1: time cuDNN's algorithms (FindEx) */
    bool verbose;   /* RAGTAG_BACKEND_VERBOSE: say which algorithms were picked */
};

static inline struct cu_dev *cu(const rt_dev *d) { return d->impl; }

/* A view's device address: the buffer's pointer plus the element offset. */
static inline float *cu_f(rt_view v) { return (float *)v.buf->handle + v.off; }
static inline int32_t *cu_i(rt_view v) { return (int32_t *)v.buf->handle + v.off; }

/* Vendor statuses as ragtag ones: success stays RT_OK, the rest become
 * RT_ERR_DEVICE (RT_ERR_NOMEM for allocation failures) with `what` and the
 * vendor's name and message in the detail. */
int cu_status(cudaError_t err, const char *what);
int cu_blas_status(cublasStatus_t st, const char *what);
int cu_dnn_status(cudnnStatus_t st, const char *what);

/* A status cuDNN returns before running anything when it cannot take these
 * arguments (a shape, a pointer's alignment): the op then runs on ragtag's
 * own kernel instead, which computes the same thing. */
static inline bool cu_dnn_refused(cudnnStatus_t st)
{
    return CUDNN_STATUS_CATEGORY(st) == CUDNN_STATUS_NOT_SUPPORTED ||
           st == CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER;
}

/* Make d's device current on this thread: every entry point starts so. */
int cu_enter(rt_dev *d);

/* An op that is one own kernel: enter, launch, fold the launch status. */
#define CU_LAUNCH(d, name, call)                                                             \
    do {                                                                                     \
        RT_TRY(cu_enter(d));                                                                 \
        return cu_status((call), "launching " name);                                         \
    } while (0)

/* gemm.c: the GEMM, for conv.c too (row-major, backend.h's contract) */
int cu_sgemm(rt_dev *d, bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
             int lda, const float *b, int ldb, float beta, float *c, int ldc);

/* conv.c: the workspace a convolution needs; the cache of plans */
size_t cu_conv2d_workspace(rt_dev *d, const struct rt_conv_shape *s);
void cu_conv_cache_free(struct cu_dev *o);

/* Every op of ops.def, as cu_<op> (cuda.c, gemm.c, conv.c, nn.c): generated, so adding an op
 * touches ops.def and the code that implements it, nothing else. */
#define RT_OP(name, params) int cu_##name params;
#include "ops.def"
#undef RT_OP

#endif
