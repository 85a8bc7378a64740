/* conv.c — the cuda backend's 2-D convolution: cuDNN, with an algorithm per
 * shape and direction picked once and cached in the device context, and a
 * workspace budget that the shape alone fixes; im2col + cuBLAS where cuDNN
 * offers nothing within it.
 *
 * The workspace. A model asks conv2d_workspace once per layer at load time
 * for batches of 1 and of its largest size, allocates the larger, and
 * hands that one buffer to every convolution of every step, including a
 * last, smaller batch (src/layers/conv.c). So the size reported for a shape
 * must never be smaller than what any smaller batch of it needs, and no op
 * may need more than was reported. Both hold by construction: the size
 * reported is a budget that grows with n — the columns of an im2col of the
 * batch, capped at CU_CONV_WS_MAX floats, which is exactly what the
 * im2col path needs — and cuDNN's algorithms are only picked among those
 * whose workspace fits in the budget. No op ever allocates.
 *
 * The algorithms. For each new shape, cudnnGetConvolution*Algorithm_v7
 * (cuDNN's heuristics: no timing, no memory, the same answer every run)
 * ranks the algorithms of each direction; the first one that is
 * deterministic, fits the budget and computes in FP32 is kept (any that fits
 * if none is deterministic). RAGTAG_CUDA_CONV_FIND=1 times them instead
 * (cudnnFind*AlgorithmEx, at the shape's first call, on the call's own
 * buffers and workspace: still no allocation). The choice is cached per
 * device context and never evicted, so a shape costs one query per process.
 * FP32 means CUDNN_FMA_MATH: TF32 tensor cores (Ampere and later) round the
 * inputs to 10 mantissa bits; RAGTAG_CUDA_TF32=1 allows them.
 *
 * A direction without a cuDNN algorithm (none fits, cuDNN refuses the
 * shape, or RAGTAG_CUDA_CUDNN=0) runs the opencl backend's scheme: a
 * batched im2col (the columns of a chunk of images side by side) and one
 * cuBLAS GEMM per chunk, plus permutations between the image-major and
 * channel-major layouts:
 *   forward      col = im2col(x);  T  = W[k x crs] * col;     y  = T as n,k,ohw
 *   bwd-data     T = dy as k,n,ohw; col = W^T * T;            dx = col2im(col)
 *   bwd-filter   col = im2col(x);  T = dy as k,n,ohw;         dW (+)= T * col^T */
#include "config.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda-impl.h"
#include "status.h"

/* Workspace cap: 32 Mi floats (128 MiB). */
#define CU_CONV_WS_MAX ((size_t)1 << 25)

enum { FWD, BWD_DATA, BWD_FILTER, NDIR };
static const char *const dir_names[NDIR] = {"forward", "backward data", "backward filter"};

/* cuDNN's algorithm enums, by value, for RAGTAG_BACKEND_VERBOSE. */
static const char *const algo_names[NDIR][8] = {
    {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING", "WINOGRAD",
     "WINOGRAD_NONFUSED"},
    {"ALGO_0", "ALGO_1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"},
    {"ALGO_0", "ALGO_1", "FFT", "ALGO_3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"},
};

/* One direction's choice. */
struct cu_algo {
    bool usable;          /* a cuDNN algorithm is picked; else im2col + cuBLAS */
    bool timed;           /* RAGTAG_CUDA_CONV_FIND has run for it */
    int algo;             /* cudnnConvolution{Fwd,BwdData,BwdFilter}Algo_t */
    cudnnMathType_t math; /* the math type it was picked with */
    size_t bytes;         /* the workspace it needs */
};

/* One convolution shape of one device context. */
struct cu_conv {
    struct rt_conv_shape s;
    size_t ws_floats; /* the budget: what conv2d_workspace reports */
    int chunk;        /* images per GEMM on the im2col path */
    cudnnTensorDescriptor_t x, y;
    cudnnFilterDescriptor_t w;
    cudnnConvolutionDescriptor_t conv;
    cudnnMathType_t math; /* the math type set on conv now */
    struct cu_algo dir[NDIR];
};

static size_t conv_crs(const struct rt_conv_shape *s) { return (size_t)s->c * s->r * s->s; }
static size_t conv_ohw(const struct rt_conv_shape *s) { return (size_t)s->oh * s->ow; }

/* Floats of workspace one image needs on the im2col path: columns and T. */
static size_t conv_per_image(const struct rt_conv_shape *s)
{
    return (conv_crs(s) + (size_t)s->k) * conv_ohw(s);
}

/* Images per GEMM: the whole batch unless its columns pass the cap; at
 * least one. Never decreases as n grows, nor does the budget. */
static int conv_chunk(const struct rt_conv_shape *s)
{
    size_t nb = CU_CONV_WS_MAX / conv_per_image(s);
    if (nb > (size_t)s->n)
        nb = (size_t)s->n;
    return nb < 1 ? 1 : (int)nb;
}

static void conv_say(const struct cu_dev *o, const struct rt_conv_shape *s, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* RAGTAG_BACKEND_VERBOSE=1: what was picked for a shape, on stderr. */
static void conv_say(const struct cu_dev *o, const struct rt_conv_shape *s, const char *fmt, ...)
{
    if (!o->verbose)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "ragtag: cuda: conv n %d c %d %dx%d k %d %dx%d stride %d,%d pad %d,%d: ", s->n,
            s->c, s->h, s->w, s->k, s->r, s->s, s->stride_h, s->stride_w, s->pad_h, s->pad_w);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

/* ---- picking algorithms ---------------------------------------------------------------- */

/* The fields the three cuDNN perf structs share, so one rule picks for all. */
struct cand {
    int algo;
    cudnnStatus_t status;
    size_t memory;
    cudnnDeterminism_t det;
    cudnnMathType_t math;
};

#define TO_CANDS(perf, got, out)                                                             \
    for (int i_ = 0; i_ < (got); i_++)                                                       \
    (out)[i_] = (struct cand){(int)(perf)[i_].algo, (perf)[i_].status, (perf)[i_].memory,    \
                              (perf)[i_].determinism, (perf)[i_].mathType}

/* The first candidate, in cuDNN's order (fastest first), that ran, fits in
 * `budget` bytes and computes in FP32 unless TF32 is allowed; deterministic
 * ones first. */
static bool conv_pick(const struct cand *c, int n, size_t budget, bool tf32, struct cu_algo *out)
{
    for (int pass = 0; pass < 2; pass++)
        for (int i = 0; i < n; i++) {
            if (c[i].status != CUDNN_STATUS_SUCCESS || c[i].memory > budget)
                continue;
            if (pass == 0 && c[i].det != CUDNN_DETERMINISTIC)
                continue;
            if (!tf32 && (c[i].math == CUDNN_TENSOR_OP_MATH ||
                          c[i].math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION))
                continue;
            out->usable = true;
            out->algo = c[i].algo;
            out->math = tf32 ? c[i].math : CUDNN_FMA_MATH;
            out->bytes = c[i].memory;
            return true;
        }
    return false;
}

/* The math type on the descriptor the three directions share: FMA, or
 * with RAGTAG_CUDA_TF32=1 cuDNN's default for ranking and each direction's
 * pick for running. Set only when it changes. */
static int conv_set_math(struct cu_conv *e, cudnnMathType_t math)
{
    if (e->math == math)
        return RT_OK;
    RT_TRY(cu_dnn_status(cudnnSetConvolutionMathType(e->conv, math),
                         "setting a convolution's math type"));
    e->math = math;
    return RT_OK;
}

static int conv_math(struct cu_conv *e, int dir) { return conv_set_math(e, e->dir[dir].math); }

static cudnnMathType_t conv_base_math(const struct cu_dev *o)
{
    return o->tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH;
}

/* The workspace the picked algorithm needs, asked again with its math type
 * set: cuDNN's heuristic figure is an estimate. */
static int conv_check_bytes(struct cu_dev *o, struct cu_conv *e, int dir)
{
    size_t bytes = 0;
    cudnnStatus_t st;
    RT_TRY(conv_math(e, dir));
    switch (dir) {
    case FWD:
        st = cudnnGetConvolutionForwardWorkspaceSize(o->dnn, e->x, e->w, e->conv, e->y,
                                                     (cudnnConvolutionFwdAlgo_t)e->dir[dir].algo,
                                                     &bytes);
        break;
    case BWD_DATA:
        st = cudnnGetConvolutionBackwardDataWorkspaceSize(
            o->dnn, e->w, e->y, e->conv, e->x, (cudnnConvolutionBwdDataAlgo_t)e->dir[dir].algo,
            &bytes);
        break;
    default:
        st = cudnnGetConvolutionBackwardFilterWorkspaceSize(
            o->dnn, e->x, e->y, e->conv, e->w, (cudnnConvolutionBwdFilterAlgo_t)e->dir[dir].algo,
            &bytes);
        break;
    }
    RT_TRY(cu_dnn_status(st, "sizing a convolution's workspace"));
    if (bytes > e->ws_floats * sizeof(float))
        return rt_error(RT_ERR_DEVICE, "cuDNN: %s algorithm %d needs %zu bytes of workspace, "
                                       "over the budget of %zu",
                        dir_names[dir], e->dir[dir].algo, bytes, e->ws_floats * sizeof(float));
    e->dir[dir].bytes = bytes;
    return RT_OK;
}

/* A direction's operands: in and in2 are x and w (forward), dy and w
 * (backward data), x and dy (backward filter); out is y, dx or dw. */
struct conv_io {
    const void *in, *in2;
    void *out, *ws;
};

/* cuDNN's ranking of one direction's algorithms: its heuristics, or with
 * `io` (a call's own buffers and workspace) timed runs (FindEx). */
static int conv_rank(struct cu_dev *o, struct cu_conv *e, int dir, const struct conv_io *io,
                     struct cand *c, int *n)
{
    const size_t budget = e->ws_floats * sizeof(float);
    cudnnStatus_t st;
    *n = 0;
    switch (dir) {
    case FWD: {
        enum { NALGO = CUDNN_CONVOLUTION_FWD_ALGO_COUNT };
        cudnnConvolutionFwdAlgoPerf_t perf[NALGO];
        st = io ? cudnnFindConvolutionForwardAlgorithmEx(o->dnn, e->x, io->in, e->w, io->in2,
                                                         e->conv, e->y, io->out, NALGO, n, perf,
                                                         io->ws, budget)
                : cudnnGetConvolutionForwardAlgorithm_v7(o->dnn, e->x, e->w, e->conv, e->y, NALGO,
                                                         n, perf);
        TO_CANDS(perf, *n, c);
        break;
    }
    case BWD_DATA: {
        enum { NALGO = CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT };
        cudnnConvolutionBwdDataAlgoPerf_t perf[NALGO];
        st = io ? cudnnFindConvolutionBackwardDataAlgorithmEx(o->dnn, e->w, io->in2, e->y, io->in,
                                                              e->conv, e->x, io->out, NALGO, n,
                                                              perf, io->ws, budget)
                : cudnnGetConvolutionBackwardDataAlgorithm_v7(o->dnn, e->w, e->y, e->conv, e->x,
                                                              NALGO, n, perf);
        TO_CANDS(perf, *n, c);
        break;
    }
    default: {
        enum { NALGO = CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT };
        cudnnConvolutionBwdFilterAlgoPerf_t perf[NALGO];
        st = io ? cudnnFindConvolutionBackwardFilterAlgorithmEx(o->dnn, e->x, io->in, e->y,
                                                                io->in2, e->conv, e->w, io->out,
                                                                NALGO, n, perf, io->ws, budget)
                : cudnnGetConvolutionBackwardFilterAlgorithm_v7(o->dnn, e->x, e->y, e->conv,
                                                                e->w, NALGO, n, perf);
        TO_CANDS(perf, *n, c);
        break;
    }
    }
    return cu_dnn_status(st, io ? "timing convolution algorithms"
                                : "ranking convolution algorithms");
}

#define MAX_CANDS 8 /* at least any direction's ALGO_COUNT */
_Static_assert(CUDNN_CONVOLUTION_FWD_ALGO_COUNT <= MAX_CANDS &&
                   CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT <= MAX_CANDS &&
                   CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT <= MAX_CANDS,
               "a perf array of cuDNN holds more than MAX_CANDS algorithms");

/* Descriptors for the shape, then each direction's algorithm. A failure
 * here leaves the direction to im2col + cuBLAS and says why (verbose). */
static void conv_describe(struct cu_dev *o, struct cu_conv *e)
{
    const struct rt_conv_shape *s = &e->s;
    if (cudnnCreateTensorDescriptor(&e->x) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateTensorDescriptor(&e->y) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateFilterDescriptor(&e->w) != CUDNN_STATUS_SUCCESS ||
        cudnnCreateConvolutionDescriptor(&e->conv) != CUDNN_STATUS_SUCCESS) {
        conv_say(o, s, "cannot create cuDNN descriptors: im2col + cuBLAS");
        return;
    }
    int on, oc, ohh, oww;
    if ((cu_dnn_status(cudnnSetTensor4dDescriptor(e->x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                       s->n, s->c, s->h, s->w),
                            "describing the input")) < 0 ||
        (cu_dnn_status(cudnnSetFilter4dDescriptor(e->w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW,
                                                       s->k, s->c, s->r, s->s),
                            "describing the filters")) < 0 ||
        (cu_dnn_status(cudnnSetConvolution2dDescriptor(e->conv, s->pad_h, s->pad_w,
                                                            s->stride_h, s->stride_w, 1, 1,
                                                            CUDNN_CROSS_CORRELATION,
                                                            CUDNN_DATA_FLOAT),
                            "describing the convolution")) < 0 ||
        (cu_dnn_status(cudnnSetConvolutionMathType(e->conv, e->math), "setting the math type")) <
            0 ||
        (cu_dnn_status(cudnnGetConvolution2dForwardOutputDim(e->conv, e->x, e->w, &on, &oc,
                                                                  &ohh, &oww),
                            "sizing the output")) < 0 ||
        (cu_dnn_status(cudnnSetTensor4dDescriptor(e->y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT,
                                                       s->n, s->k, s->oh, s->ow),
                            "describing the output")) < 0) {
        conv_say(o, s, "%s: im2col + cuBLAS", rt_error_detail());
        rt_error_clear();
        return;
    }
    if (on != s->n || oc != s->k || ohh != s->oh || oww != s->ow) {
        conv_say(o, s, "cuDNN's output is %dx%dx%dx%d, not ragtag's: im2col + cuBLAS", on, oc,
                 ohh, oww);
        return;
    }
    const size_t budget = e->ws_floats * sizeof(float);
    for (int dir = 0; dir < NDIR; dir++) {
        struct cand c[MAX_CANDS];
        int n = 0;
        if (conv_set_math(e, conv_base_math(o)) < 0 || conv_rank(o, e, dir, NULL, c, &n) < 0) {
            conv_say(o, s, "%s: %s: im2col + cuBLAS", dir_names[dir], rt_error_detail());
            rt_error_clear();
            continue;
        }
        if (!conv_pick(c, n < MAX_CANDS ? n : MAX_CANDS, budget, o->tf32, &e->dir[dir])) {
            conv_say(o, s, "%s: no cuDNN algorithm fits %zu bytes: im2col + cuBLAS",
                     dir_names[dir], budget);
            continue;
        }
        if (conv_check_bytes(o, e, dir) < 0) {
            conv_say(o, s, "%s: %s: im2col + cuBLAS", dir_names[dir], rt_error_detail());
            rt_error_clear();
            e->dir[dir].usable = false;
            continue;
        }
        conv_say(o, s, "%s: cuDNN %s, %zu of %zu bytes of workspace", dir_names[dir],
                 e->dir[dir].algo < 8 && algo_names[dir][e->dir[dir].algo]
                     ? algo_names[dir][e->dir[dir].algo]
                     : "?",
                 e->dir[dir].bytes, budget);
    }
}

/* The cache entry of shape s, made on first use; NULL when out of memory. */
static struct cu_conv *conv_get(rt_dev *d, const struct rt_conv_shape *s)
{
    struct cu_dev *o = cu(d);
    for (int i = 0; i < o->nconv; i++)
        if (memcmp(&o->convs[i]->s, s, sizeof *s) == 0)
            return o->convs[i];
    if (o->nconv == o->capconv) {
        int cap = o->capconv ? 2 * o->capconv : 16;
        struct cu_conv **p = realloc(o->convs, (size_t)cap * sizeof *p);
        if (!p)
            return NULL;
        o->convs = p;
        o->capconv = cap;
    }
    struct cu_conv *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->s = *s;
    e->math = conv_base_math(o); /* what the descriptor gets first */
    e->chunk = conv_chunk(s);
    e->ws_floats = (size_t)e->chunk * conv_per_image(s);
    if (o->cudnn && s->n > 0 && cudaSetDevice(o->ordinal) == cudaSuccess)
        conv_describe(o, e);
    else
        cudaGetLastError();
    o->convs[o->nconv++] = e;
    return e;
}

void cu_conv_cache_free(struct cu_dev *o)
{
    for (int i = 0; i < o->nconv; i++) {
        struct cu_conv *e = o->convs[i];
        if (e->conv)
            cudnnDestroyConvolutionDescriptor(e->conv);
        if (e->w)
            cudnnDestroyFilterDescriptor(e->w);
        if (e->y)
            cudnnDestroyTensorDescriptor(e->y);
        if (e->x)
            cudnnDestroyTensorDescriptor(e->x);
        free(e);
    }
    o->nconv = 0;
}

/* Every size query goes through the cache: the figure a model allocated
 * is the figure every later op checks its workspace against. Without the
 * host memory for an entry the budget is still the same. */
size_t cu_conv2d_workspace(rt_dev *d, const struct rt_conv_shape *s)
{
    struct cu_conv *e = conv_get(d, s);
    return e ? e->ws_floats : (size_t)conv_chunk(s) * conv_per_image(s);
}

/* RAGTAG_CUDA_CONV_FIND=1: time the algorithms once, on this call's own
 * buffers and workspace (FindEx writes the output, which the op then
 * overwrites). On failure the heuristic's choice stays. */
static void conv_find(struct cu_dev *o, struct cu_conv *e, int dir, const struct conv_io *io)
{
    struct cand c[MAX_CANDS];
    int n = 0;
    const size_t budget = e->ws_floats * sizeof(float);
    e->dir[dir].timed = true;
    if (conv_set_math(e, conv_base_math(o)) < 0) {
        rt_error_clear();
        return;
    }
    if (conv_rank(o, e, dir, io, c, &n) < 0) {
        conv_say(o, &e->s, "%s: %s: keeping the heuristic's choice", dir_names[dir],
                 rt_error_detail());
        rt_error_clear();
        return;
    }
    struct cu_algo keep = e->dir[dir], got = keep;
    if (!conv_pick(c, n < MAX_CANDS ? n : MAX_CANDS, budget, o->tf32, &got))
        return;
    e->dir[dir] = got;
    e->dir[dir].timed = true;
    if (conv_check_bytes(o, e, dir) < 0) {
        rt_error_clear();
        e->dir[dir] = keep;
        return;
    }
    conv_say(o, &e->s, "%s: timed: cuDNN %s", dir_names[dir],
             got.algo < 8 && algo_names[dir][got.algo] ? algo_names[dir][got.algo] : "?");
}

/* cuDNN refused the picked algorithm (cu_dnn_refused): the direction moves
 * to im2col + cuBLAS for good, and the op is redone there. */
static void conv_give_up(struct cu_dev *o, struct cu_conv *e, int dir, cudnnStatus_t st)
{
    e->dir[dir].usable = false;
    cu_dnn_status(st, dir_names[dir]);
    conv_say(o, &e->s, "%s: %s: im2col + cuBLAS from now on", dir_names[dir], rt_error_detail());
    rt_error_clear();
}

/* ---- im2col + cuBLAS -------------------------------------------------------------------- */

static struct rtcu_conv conv_geom(const struct rt_conv_shape *s)
{
    return (struct rtcu_conv){s->n,        s->c,        s->h,     s->w,     s->k,
                              s->r,        s->s,        s->stride_h, s->stride_w, s->pad_h,
                              s->pad_w,    s->oh,       s->ow};
}

/* Images i0 .. i0+nb-1 of one direction on im2col + cuBLAS, as drawn at
 * the top of this file; one image needs no permutation. */
static int im2col_chunk(rt_dev *d, const struct cu_conv *e, int dir, int i0, int nb,
                        const float *in, const float *in2, float *out, float *ws)
{
    struct cu_dev *o = cu(d);
    const struct rt_conv_shape *s = &e->s;
    const struct rtcu_conv g = conv_geom(s);
    const int crs = (int)conv_crs(s), ohw = (int)conv_ohw(s), np = nb * ohw;
    const size_t xs = (size_t)s->c * s->h * s->w, ys = (size_t)s->k * ohw;
    float *col = ws, *t = ws + (size_t)crs * np;
    if (dir != BWD_DATA) /* x's columns */
        RT_TRY(cu_status(rtcu_im2col(o->stream, &g, nb, in + i0 * xs, col), "launching im2col"));
    if (dir == FWD) {
        float *yc = out + i0 * ys;
        if (nb == 1)
            t = yc;
        RT_TRY(cu_sgemm(d, false, false, s->k, np, crs, 1.0f, in2, crs, col, np, 0.0f, t, np));
        if (nb > 1)
            RT_TRY(cu_status(rtcu_knp_to_nkp(o->stream, nb, s->k, ohw, t, yc),
                             "launching knp_to_nkp"));
        return RT_OK;
    }
    const float *dyc = (dir == BWD_DATA ? in : in2) + i0 * ys, *tt = t;
    if (nb == 1)
        tt = dyc;
    else
        RT_TRY(cu_status(rtcu_nkp_to_knp(o->stream, nb, s->k, ohw, dyc, t),
                         "launching nkp_to_knp"));
    if (dir == BWD_DATA) {
        RT_TRY(cu_sgemm(d, true, false, crs, np, s->k, 1.0f, in2, crs, tt, np, 0.0f, col, np));
        return cu_status(rtcu_col2im(o->stream, &g, nb, col, out + i0 * xs), "launching col2im");
    }
    return cu_sgemm(d, false, true, s->k, crs, np, 1.0f, tt, np, col, np, i0 ? 1.0f : 0.0f, out,
                    crs);
}

static int im2col_run(rt_dev *d, const struct cu_conv *e, int dir, const struct conv_io *io)
{
    for (int i0 = 0; i0 < e->s.n; i0 += e->chunk) {
        const int nb = e->s.n - i0 < e->chunk ? e->s.n - i0 : e->chunk;
        RT_TRY(im2col_chunk(d, e, dir, i0, nb, io->in, io->in2, io->out, io->ws));
    }
    return RT_OK;
}

/* ---- the ops ----------------------------------------------------------------------------- */

static const float one = 1.0f, zero = 0.0f;

/* One direction on its cuDNN algorithm. */
static cudnnStatus_t conv_dnn(struct cu_dev *o, const struct cu_conv *e, int dir,
                              const struct conv_io *io)
{
    const int algo = e->dir[dir].algo;
    const size_t bytes = e->ws_floats * sizeof(float);
    switch (dir) {
    case FWD:
        return cudnnConvolutionForward(o->dnn, &one, e->x, io->in, e->w, io->in2, e->conv,
                                       (cudnnConvolutionFwdAlgo_t)algo, io->ws, bytes, &zero,
                                       e->y, io->out);
    case BWD_DATA:
        return cudnnConvolutionBackwardData(o->dnn, &one, e->w, io->in2, e->y, io->in, e->conv,
                                            (cudnnConvolutionBwdDataAlgo_t)algo, io->ws, bytes,
                                            &zero, e->x, io->out);
    default:
        return cudnnConvolutionBackwardFilter(o->dnn, &one, e->x, io->in, e->y, io->in2, e->conv,
                                              (cudnnConvolutionBwdFilterAlgo_t)algo, io->ws,
                                              bytes, &zero, e->w, io->out);
    }
}

/* Every direction: its cached plan, cuDNN when it has an algorithm (timed
 * first with RAGTAG_CUDA_CONV_FIND=1), else or when cuDNN refuses, im2col
 * + cuBLAS. */
static int conv_run(rt_dev *d, const struct rt_conv_shape *s, int dir, rt_view in, rt_view in2,
                    rt_view out, rt_view ws)
{
    static const char *const what[NDIR] = {"convolution forward", "convolution backward data",
                                           "convolution backward filter"};
    struct cu_dev *o = cu(d);
    RT_TRY(cu_enter(d));
    struct cu_conv *e = conv_get(d, s);
    if (!e)
        return rt_error(RT_ERR_NOMEM, "cuda: out of host memory for a convolution's plan");
    const struct conv_io io = {cu_f(in), cu_f(in2), cu_f(out), cu_f(ws)};
    struct cu_algo *a = &e->dir[dir];
    if (a->usable && o->conv_find && !a->timed)
        conv_find(o, e, dir, &io);
    if (a->usable) {
        RT_TRY(conv_math(e, dir));
        cudnnStatus_t st = conv_dnn(o, e, dir, &io);
        if (!cu_dnn_refused(st))
            return cu_dnn_status(st, what[dir]);
        conv_give_up(o, e, dir, st);
    }
    return im2col_run(d, e, dir, &io);
}

int cu_conv2d_fwd(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view w, rt_view y,
                  rt_view ws)
{
    return conv_run(d, s, FWD, x, w, y, ws);
}

/* conv2d_fwd, bias_add, act_fwd in sequence: the same kernels, the same
 * values. */
int cu_conv2d_fwd_bias_act(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view w,
                           rt_view b, enum rt_act kind, float alpha, rt_view y, rt_view ws)
{
    if (kind < RT_ACT_IDENTITY || kind > RT_ACT_TANH)
        return rt_error(RT_ERR_UNSUPPORTED, "cuda: unknown activation %d", (int)kind);
    RT_TRY(cu_conv2d_fwd(d, s, x, w, y, ws));
    return cu_bias_act_fwd(d, kind, alpha, s->n, s->k, s->oh * s->ow, b, y);
}

/* act_bias_bwd, conv2d_bwd_filter, conv2d_bwd_data in sequence, with g in
 * its scratch view. */
int cu_conv2d_bwd_act(rt_dev *d, const struct rt_conv_shape *s, enum rt_act kind, float alpha,
                      rt_view x, rt_view y, rt_view dy, rt_view w, rt_view g, rt_view dx,
                      rt_view dw, rt_view db, rt_view ws)
{
    const size_t hw = (size_t)s->oh * s->ow, yn = (size_t)s->n * s->k * hw;
    if (db.buf)
        RT_TRY(cu_act_bias_bwd(d, kind, alpha, s->n, s->k, (int)hw, y, dy, g, db));
    else if (kind != RT_ACT_IDENTITY && yn > 0)
        RT_TRY(cu_act_bwd(d, kind, alpha, yn, y, y, dy, g));
    const rt_view gd = db.buf || kind != RT_ACT_IDENTITY ? g : dy;
    RT_TRY(cu_conv2d_bwd_filter(d, s, x, gd, dw, ws));
    return dx.buf && s->n > 0 ? cu_conv2d_bwd_data(d, s, gd, w, dx, ws) : RT_OK;
}

int cu_conv2d_bwd_data(rt_dev *d, const struct rt_conv_shape *s, rt_view dy, rt_view w,
                       rt_view dx, rt_view ws)
{
    return conv_run(d, s, BWD_DATA, dy, w, dx, ws);
}

/* With no images the gradient is zero (x, dy and ws are unchecked then). */
int cu_conv2d_bwd_filter(rt_dev *d, const struct rt_conv_shape *s, rt_view x, rt_view dy,
                         rt_view dw, rt_view ws)
{
    if (s->n == 0) {
        RT_TRY(cu_enter(d));
        return cu_status(cudaMemsetAsync(cu_f(dw), 0, (size_t)s->k * conv_crs(s) * sizeof(float),
                                         cu(d)->stream),
                         "zeroing a filter gradient");
    }
    return conv_run(d, s, BWD_FILTER, x, dy, dw, ws);
}
