/* cpu-impl.h — private to the cpu backend (cpu.c, conv.c, nn.c).
 *
 * The cpu backend is the reference every other backend is compared with and
 * the speed baseline: buffers are 64-byte aligned host memory (the handle is
 * the host pointer), GEMM goes through a CBLAS when one is linked, and
 * OpenMP spreads loops over d->threads host threads. No op allocates: the
 * only scratch memory is the caller's conv workspace. */
#ifndef RT_CPU_IMPL_H
#define RT_CPU_IMPL_H

#include <stdbool.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>

#include "backend-impl.h"

/* OpenMP is optional: without it every op runs on the calling thread. */
#ifdef _OPENMP
#include <omp.h>
static inline int cpu_thread_num(void) { return omp_get_thread_num(); }
static inline int cpu_num_threads(void) { return omp_get_num_threads(); }
#else
static inline int cpu_thread_num(void) { return 0; }
static inline int cpu_num_threads(void) { return 1; }
#endif

/* Upper bound on threads per device: per-thread partial sums live in
 * fixed-size stack arrays, so no op has to allocate. */
#define CPU_MAX_THREADS 256

/* Items [0, n) of a parallel region (images, groups of images) shared out
 * so that each stays on the core that made its input: thread t takes its
 * own run [n t / nt, n (t + 1) / nt) in order, as the static splits of the
 * pooling and bias passes do, then helps with what is left of the others'
 * runs, one item at a time, so a preempted thread holds up only the items it
 * has not begun. Each run's counter has a cache line to itself:
 *     struct cpu_runs runs;
 *     cpu_runs_init(&runs, n, nt);      (before the region)
 *     for (int i; (i = cpu_runs_next(&runs, t, nt)) >= 0;) ...   (in it)
 * Correct with fewer threads than nt: their runs are taken over. */
struct cpu_runs {
    struct {
        int next, end;
        char pad[64 - 2 * sizeof(int)];
    } r[CPU_MAX_THREADS];
};
void cpu_runs_init(struct cpu_runs *rs, int n, int nt);
int cpu_runs_next(struct cpu_runs *rs, int t, int nt);

/* Elementwise loops shorter than this run on one thread: starting a parallel
 * region costs more than it saves. */
#define CPU_PAR_MIN 32768

/* Elementwise work over the caller's n floats in blocks of whole cache
 * lines, each block on one thread (the caller's nt threads; one below
 * CPU_PAR_MIN floats):
 *     CPU_FOR_BLOCKS(k) {
 *         size_t lo = cpu_block_lo(k), len = cpu_block_len(n, lo);
 *         span(x + lo, y + lo, len);
 *     }                                                                     */
#define CPU_BLOCK ((size_t)4096)
#ifdef _OPENMP
#define CPU_BLOCKS_PRAGMA                                                                      \
    _Pragma("omp parallel for num_threads(nt) schedule(static) if (n > CPU_PAR_MIN)")
#else
#define CPU_BLOCKS_PRAGMA
#endif
#define CPU_FOR_BLOCKS(k)                                                                      \
    CPU_BLOCKS_PRAGMA                                                                          \
    for (long k = 0; k < (long)((n + CPU_BLOCK - 1) / CPU_BLOCK); k++)
static inline size_t cpu_block_lo(long k) { return (size_t)k * CPU_BLOCK; }
static inline size_t cpu_block_len(size_t n, size_t lo)
{
    return n - lo < CPU_BLOCK ? n - lo : CPU_BLOCK;
}

struct cpu_dev {
    int nt; /* threads used by this device's ops (>= 1) */
};

static inline int cpu_nt(const rt_dev *d) { return ((const struct cpu_dev *)d->impl)->nt; }

static inline float *cpu_f(rt_view v) { return (float *)v.buf->handle + v.off; }

static inline int *cpu_i(rt_view v) { return (int *)v.buf->handle + v.off; }

/* A view that may be absent (e.g. the momentum buffer when momentum is 0). */
static inline float *cpu_f_or_null(rt_view v)
{
    return v.buf ? (float *)v.buf->handle + v.off : NULL;
}

/* Row-major SGEMM on host pointers, C = alpha*op(A)*op(B) + beta*C, with
 * beta == 0 meaning C is not read. `nt` threads; pass 1 inside a parallel
 * region (the BLAS then runs on the calling thread only). */
void cpu_sgemm(int nt, bool ta, bool tb, int m, int n, int k, float alpha, const float *a,
               int lda, const float *b, int ldb, float beta, float *c, int ldc);
/* cpu_sgemm's arguments as one call (cpu_sgemm_pair takes two). */
struct cpu_sgemm_call {
    bool ta, tb;
    int m, n, k;
    float alpha;
    const float *a;
    int lda;
    const float *b;
    int ldb;
    float beta;
    float *c;
    int ldc;
};
void cpu_sgemm_call(int nt, const struct cpu_sgemm_call *g);
/* Two independent GEMMs at once, each on its share of the nt threads. */
void cpu_sgemm_pair(int nt, const struct cpu_sgemm_call *g0, const struct cpu_sgemm_call *g1);

/* C = op(A) B on the calling thread, row-major, beta 0 (C is not read),
 * op(A) = A^T when ta: the convolutions' small GEMMs (Winograd's, and
 * im2col's on one image), in registers where the CPU has AVX2 and FMA but
 * not AVX-512, else cpu_sgemm (gemm_small.c). */
void cpu_gemm_small(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                    int ldb, float *c, int ldc);
/* The same with C added to (C += op(A) B) when acc. */
void cpu_gemm_small_acc(bool ta, int m, int n, int k, const float *a, int lda, const float *b,
                        int ldb, bool acc, float *c, int ldc);

/* C = A B (beta 0) where row p of B is the n floats at b + at[p]: the
 * wide im2col's GEMM read from the padded image in place (its rows
 * overlap: lenet's conv2 copied 150 of them an image, 7% of a training
 * step in memcpy). Each element one FMA chain over the inner index in
 * order from 0. False, doing nothing, where neither the AVX2 kernels
 * (cpu_avx2_kernels) nor the AVX-512 one runs: the caller copies the rows
 * and calls a GEMM. */
bool cpu_gemm_small_rows(int m, int n, int k, const float *a, int lda, const float *b,
                         const int32_t *at, float *c, int ldc);
/* A convolution's data gradient, one image at a time, as sh x sw
 * stride-1 convolutions over dy, one per phase of dx (conv_dgrad.c).
 * cpu_dgrad_plan: the layout for a shape (strides up to
 * CPU_DGRAD_MAX_STRIDE); per call, the rearranged filters (filt floats)
 * and row starts (at int32s), made by cpu_dgrad_filters (channels [c0,
 * c1); the row starts where c0 is 0); per thread, a slice of `slice`
 * floats, zeroed by cpu_dgrad_begin once a call; then cpu_dgrad_image. */
#define CPU_DGRAD_MAX_STRIDE 4
struct cpu_dgrad {
    int sh, sw;
    int i0[CPU_DGRAD_MAX_STRIDE], ni[CPU_DGRAD_MAX_STRIDE]; /* phase a's rows in dx */
    int j0[CPU_DGRAD_MAX_STRIDE], nj[CPU_DGRAD_MAX_STRIDE]; /* phase b's columns */
    int nu[CPU_DGRAD_MAX_STRIDE], nv[CPU_DGRAD_MAX_STRIDE]; /* taps in each */
    int top, pc, wd;      /* dyp: zero rows above, zeros between rows, row pitch */
    size_t plane, ps;     /* dyp floats a filter; a phase's output floats a channel */
    size_t filt_at[CPU_DGRAD_MAX_STRIDE * CPU_DGRAD_MAX_STRIDE];
    size_t row_at[CPU_DGRAD_MAX_STRIDE * CPU_DGRAD_MAX_STRIDE];
    size_t filt, at;      /* per call */
    size_t off_out, off_col, slice; /* per thread: dyp, the phases' outputs, a copy of runs */
};
void cpu_dgrad_plan(const struct rt_conv_shape *s, struct cpu_dgrad *g);
void cpu_dgrad_filters(const struct rt_conv_shape *s, const struct cpu_dgrad *g, const float *w,
                       int c0, int c1, float *filt, int32_t *at);
void cpu_dgrad_begin(const struct rt_conv_shape *s, const struct cpu_dgrad *g, float *slice);
void cpu_dgrad_image(const struct rt_conv_shape *s, const struct cpu_dgrad *g, const float *filt,
                     const int32_t *at, const float *dy, float *dx, float *slice);
/* cpu_gemm_small_rows at AVX-512's width (gemm_small512.c), where the
 * BLAS runs AVX-512 kernels; the same bits as the AVX2 kernel. False,
 * nothing done, where it does not run. cpu_gemm_small512_set(false) turns
 * it off, for tests and benches. */
bool cpu_gemm_small512_rows(int m, int n, int k, const float *a, int lda, const float *b,
                            const int32_t *at, float *c, int ldc);
/* The same kernel on C = A B (beta 0), B's rows ldb apart. */
bool cpu_gemm_nn512(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                    float *c, int ldc);
void cpu_gemm_small512_set(bool on);
/* C = A B^T (beta 0), both read along the inner index, in AVX-512
 * (gemm_nt_longk.c: the dense layers' forward with a long inner index);
 * false, nothing done, where it does not run. */
bool cpu_gemm_nt_longk(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                       float *c, int ldc);
/* C = A^T B (beta 0) for an inner index k <= CPU_SMALLK_MAX, in AVX-512
 * (gemm_tn_smallk.c: the dense layers' weight gradient); false, nothing
 * done, where it does not run. */
#define CPU_SMALLK_MAX 64
bool cpu_gemm_tn_smallk(int m, int n, int k, const float *a, int lda, const float *b, int ldb,
                        float *c, int ldc);

/* The Winograd transforms of one plane in AVX-512 registers (wino512.c),
 * for planes of w <= 32 input and ow <= 30 output columns on a CPU with
 * AVX-512 (cpu_wino512_fits); the same bits as conv.c's loops.
 * cpu_wino512_set(false) turns them off, for tests and benches.
 * A plane: h x w in, padded by ph, pw; oh x ow out; th x tw tiles; its
 * lane tables (cpu_wino512_plan, once per shape) where it is small (at
 * most 64 floats and 16 tiles: a transform is one vector) or its rows of
 * tiles go in pairs (at most 16 columns and 8 tiles a row). in and out run
 * over ni images of nc (nk) planes each, contiguous on the image side; on
 * the tiles' side plane c of image i starts at c ld + i th tw, and the 16
 * transformed values of a tile are xs apart; dy and scatter do one plane. */
struct cpu_wino512_plane {
    int h, w, ph, pw, oh, ow, th, tw;
    bool small, pairs;
    int32_t in_ix[16][16], out_ix[4][16], dy_ix[4][16], sc_ix[16][16];
    uint16_t in_m[16][2], out_m[4][2], dy_m[4][2], sc_m[16][2];
    int32_t pk_in_ix[4][16], pk_out_ix[2][16], pk_dy_ix[2][16];
    uint16_t pk_in_m[4][2], pk_dy_m[2][2];
    int32_t row_ix[4][16], dx_ix[2][16]; /* by rows: a row's tile columns, dx's columns */
    uint16_t row_m[4][2];
};
bool cpu_wino512_fits(int w, int ow);
void cpu_wino512_set(bool on);
void cpu_wino512_plan(struct cpu_wino512_plane *p);
void cpu_wino512_in(const struct cpu_wino512_plane *p, int ni, int nc, const float *x,
                    float *v, size_t ld, size_t xs);
void cpu_wino512_out(const struct cpu_wino512_plane *p, int ni, int nk, const float *m,
                     size_t ld, size_t xs, float *y);
void cpu_wino512_dy(const struct cpu_wino512_plane *p, const float *dy, float *dm, size_t xs);
void cpu_wino512_scatter(const struct cpu_wino512_plane *p, const float *dv, size_t xs,
                         float *dx);

/* 2x2 max pooling at stride 2, a row of ow outputs from input rows r0 and
 * r1 (pool512.c), where cpu_maxpool2_512 says AVX-512 runs: the forward,
 * and the backward of windows that tile the plane (every element of d0
 * and d1's 2 ow floats written). The bits of nn.c's loops.
 * cpu_maxpool2_512_set(false) turns it off, for tests. */
bool cpu_maxpool2_512(void);
void cpu_maxpool2_512_set(bool on);
void cpu_maxpool2_row512(const float *r0, const float *r1, int ow, float *y);
void cpu_maxpool2_bwd_row512(const float *r0, const float *r1, const float *g, int ow,
                             float *d0, float *d1);

/* Whether the hand-written AVX2 kernels run here: AVX2 and FMA, and a BLAS
 * without AVX-512 kernels (cpu_blas_avx512; those are twice as wide, and
 * beat these: seedcnn's step 11.9 ms with them, 16.3 with these). */
bool cpu_avx2_kernels(void);
bool cpu_blas_avx512(void);
/* blas_core.c: the widest kernels an OpenBLAS core runs (0 SSE or AVX, 1
 * AVX2 and FMA, 2 AVX-512, 3 AVX-512 with BF16; -1 a name not known here),
 * those this CPU can run, and the core to name instead of `core` on a CPU
 * of that width (NULL: keep it). */
int cpu_blas_core_width(const char *core);
int cpu_blas_cpu_width(void);
const char *cpu_blas_core_raised(const char *core, int cpu_width);
/* Whether this CPU has AVX-512F (ragtag's own AVX-512 kernels: wino512.c,
 * gemm_tn_smallk.c), asked once. */
bool cpu_has_avx512f(void);

/* The filters' gradient of a convolution whose column rows are runs of the
 * (padded) image, read in place (wgrad.c). cpu_wgrad_kind: which kernel
 * suits k filters, crs rows of the column matrix, an oh x ow output, where
 * the CPU runs them (NONE: the BLAS). By positions, cpu_wgrad_images:
 * lanes acc (k x crs x 8 floats; set, or added to when more) from n
 * images: row j of image m's column matrix starts at x + m * xs +
 * row_at[j], output row r of it wq floats further per row; its dy (k x oh
 * x ow) at dy + m * dys. cpu_wgrad_lanes: part[j * k + q] = the lanes of
 * (q, j) added up. By filters, cpu_wgrad_outer: part (crs x k; set, or
 * added to when more) from the same images, im->dy holding dy transposed
 * (oh * ow x k an image, dys apart). */
enum rt_wgrad { RT_WGRAD_NONE, RT_WGRAD_POSITIONS, RT_WGRAD_FILTERS };
struct rt_wgrad_images {
    int n, oh, ow;
    size_t wq, xs, dys;
    const float *x, *dy;
};
enum rt_wgrad cpu_wgrad_kind(int k, int crs, int oh, int ow);
void cpu_wgrad_images(int k, int crs, const struct rt_wgrad_images *im, const int32_t *row_at,
                      bool more, float *acc);
void cpu_wgrad_outer(int k, int crs, const struct rt_wgrad_images *im, const int32_t *row_at,
                     bool more, float *part);
/* cpu_wgrad_outer at AVX-512's width (wgrad512.c), where the BLAS runs
 * AVX-512 kernels (cpu_wgrad512; there cpu_wgrad_kind says by filters or
 * NONE): the same bits as the AVX2 kernel. False, nothing done, where it
 * does not run. cpu_wgrad512_set(false) turns it off, for tests and
 * benches. */
bool cpu_wgrad_outer512(int k, int crs, const struct rt_wgrad_images *im, const int32_t *row_at,
                        bool more, float *part);
bool cpu_wgrad512(void);
void cpu_wgrad512_set(bool on);
/* dt (plane x k) = src (k rows of plane floats, ls apart) transposed, in
 * 8 x 8 blocks where the CPU has AVX2. */
void cpu_transpose(int k, size_t plane, const float *src, size_t ls, float *dt);
void cpu_wgrad_lanes(int k, int crs, const float *acc, float *part);

/* Call before a parallel region whose threads call cpu_sgemm(1, ...). */
void cpu_blas_before_parallel(void);

#ifdef _OPENMP
#define CPU_SIMD _Pragma("omp simd")
/* inside a parallel region: the loop's iterations in contiguous runs, one
 * a thread, the same runs every time; a barrier at its end */
#define CPU_FOR_STATIC _Pragma("omp for schedule(static)")
#else
#define CPU_SIMD
#define CPU_FOR_STATIC
#endif

/* CPU_CLONES before a function with vector loops: one clone per x86-64 ISA
 * level (AVX-512, AVX2, the SSE2 default), picked at load time, so one
 * binary runs on any x86-64 and uses the widest vectors the CPU has (the
 * default build is SSE2: 4 floats a vector). Only for loops whose bits do
 * not depend on the vector width: elementwise maths (C11 mode does not
 * contract a*b+c into an FMA) and sums with a fixed number of lanes
 * (batch norm's 8, nn.c), never an `omp simd reduction`, whose lanes are
 * the ISA's. */
#if !defined(CPU_CLONES) && defined(__x86_64__) && defined(__GLIBC__) && \
    defined(__has_attribute) /* ifunc */
#if __has_attribute(target_clones)
#if !defined(__clang__) && __GNUC__ >= 11
#define CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CPU_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#endif
#endif
#endif
#ifndef CPU_CLONES
#define CPU_CLONES
#endif

/* n rounded up to 16 floats (a 64-byte line): workspace regions start on
 * one, so no two threads' share a line. */
static inline size_t cpu_align16(size_t n) { return (n + 15) & ~(size_t)15; }

/* The AVX-512 mask (__mmask16) of lanes [0, n), n clamped to 0..16: a
 * row's tail in the hand-written kernels (wino512.c, pool512.c,
 * gemm_small512.c). */
static inline uint16_t cpu_lanes_below(int n)
{
    return n >= 16 ? (uint16_t)0xFFFF : n <= 0 ? 0 : (uint16_t)((1u << n) - 1);
}

/* Keeps the compiler from seeing through a loop's index, so that it cannot
 * turn a copy or zeroing loop back into a call of memcpy / memset (GCC
 * does, even for 10 floats, and at -march=x86-64-v4 even for a loop of
 * 32-byte blocks). */
#if defined(__GNUC__)
#define CPU_OPAQUE(i) __asm__("" : "+r"(i))
#else
#define CPU_OPAQUE(i) ((void)0)
#endif

/* d = s over n floats that do not overlap: for the short rows of the
 * convolutions' layouts (10-30 floats), where a call to memcpy costs more
 * than the copy (lenet: 16,000 such calls a training step, with the
 * zeroing below, 5% of a step at 1 thread). Blocks of 8 floats, then 4,
 * 2, 1: no loop for the compiler to turn back into a call. */
static inline void cpu_copy_row(float *restrict d, const float *restrict s, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __builtin_memcpy(d + i, s + i, 8 * sizeof(float));
        CPU_OPAQUE(i);
    }
    if (n - i >= 4) {
        __builtin_memcpy(d + i, s + i, 4 * sizeof(float));
        i += 4;
    }
    if (n - i >= 2) {
        __builtin_memcpy(d + i, s + i, 2 * sizeof(float));
        i += 2;
    }
    if (n - i >= 1)
        d[i] = s[i];
}

/* d = 0 over n floats, for the same short rows (a padding's 2 columns). */
static inline void cpu_zero_row(float *d, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __builtin_memset(d + i, 0, 8 * sizeof(float));
        CPU_OPAQUE(i);
    }
    if (n - i >= 4) {
        __builtin_memset(d + i, 0, 4 * sizeof(float));
        i += 4;
    }
    if (n - i >= 2) {
        __builtin_memset(d + i, 0, 2 * sizeof(float));
        i += 2;
    }
    if (n - i >= 1)
        d[i] = 0.0f;
}

/* y[i] = act(x[i] + b[i * bstep]) over n floats (y may be x; bstep 0: one
 * bias for the row, 1: a bias per element): the same float operations as
 * bias_add then act_fwd, in one pass. kind must be valid (cpu_check_act).
 * Always inline, so that each constant bstep gets its own vector loop, and
 * each CPU_CLONES caller its ISA's: GCC had made one out-of-line copy for
 * the default target (SSE2: 4 floats a vector), which every clone of
 * conv.c's epilogues called (a seedcnn worker: 3.9% of its time there). */
static inline __attribute__((always_inline)) void
cpu_bias_act(enum rt_act kind, float alpha, const float *b, int bstep, const float *x, float *y,
             size_t n)
{
    switch (kind) {
    case RT_ACT_IDENTITY:
        CPU_SIMD
        for (size_t i = 0; i < n; i++)
            y[i] = x[i] + b[i * bstep];
        break;
    case RT_ACT_RELU:
        CPU_SIMD
        for (size_t i = 0; i < n; i++) {
            const float t = x[i] + b[i * bstep];
            y[i] = t > 0.0f ? t : 0.0f;
        }
        break;
    case RT_ACT_LEAKY:
        CPU_SIMD
        for (size_t i = 0; i < n; i++) {
            const float t = x[i] + b[i * bstep];
            y[i] = t > 0.0f ? t : alpha * t;
        }
        break;
    case RT_ACT_SIGMOID: /* expf and tanhf: scalar, as act_fwd */
        for (size_t i = 0; i < n; i++)
            y[i] = 1.0f / (1.0f + expf(-(x[i] + b[i * bstep])));
        break;
    case RT_ACT_TANH:
        for (size_t i = 0; i < n; i++)
            y[i] = tanhf(x[i] + b[i * bstep]);
        break;
    }
}

/* nn.c: RT_OK for a known activation, else a readable error */
int cpu_check_act(enum rt_act kind);

/* nn.c: dx = dy * f'(y) over n floats (act_bias_bwd's per plane), returning
 * their float sum in bias_grad's order; one thread. */
float cpu_act_grad_row(enum rt_act kind, float alpha, const float *y, const float *dy, float *dx,
                       size_t n);

/* conv.c: the workspace a convolution needs */
size_t cpu_conv2d_workspace(rt_dev *d, const struct rt_conv_shape *s);

/* Every op of ops.def, as cpu_<op> (cpu.c, conv.c, nn.c): generated, so adding an op
 * touches ops.def and the code that implements it, nothing else. */
#define RT_OP(name, params) int cpu_##name params;
#include "ops.def"
#undef RT_OP

#endif
