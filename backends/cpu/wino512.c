/* wino512.c — the Winograd F(2x2, 3x3) transforms of one plane (conv.c)
 * in AVX-512 registers, for planes up to 32 columns wide: every row of
 * tiles is one vector (a tile a lane), and the input and gradient planes
 * are read and written where they lie.
 *
 * conv.c's portable transforms run over a row of tiles as vector loops:
 * resnet8's rows of 14, 7 and 4 tiles are one or two vectors each, so its
 * loop overheads, a padded copy of each input plane (wino_pad) and of each
 * dx plane (wino_scatter's grid) cost more than the arithmetic: 29% of a
 * resnet8 step on an AVX-512 EPYC, against 33% for all its GEMMs. Here a
 * row of the plane is two masked loads, and the columns a tile needs
 * (2b + j, shifted by the padding) are lane permutations of them
 * (vpermt2ps) with the padding's zeros from the mask; outputs go out
 * through masked stores, so no lane past the plane is read or written.
 * resnet8's conv layers, all three passes, 1 thread (bench_ops, CPU time,
 * AMD EPYC Zen 5): 16 channels 3,780 -> 2,285 us, 32: 3,130 -> 2,274, 64:
 * 3,513 -> 2,790; training 1,823-1,890 -> 2,262-2,275 img/s. The small
 * loops are unrolled by pragma (the build is -O2), or the rows' vectors
 * went through the stack and it was slower than conv.c's loops.
 *
 * Each output is the same sum, in the same order, as conv.c's loops
 * (tests/test_cpu_ops.c checks the bits against them): which path runs
 * does not change a result. */
#include "config.h"

#include "cpu-impl.h"

static bool wino512_enabled = true;

void cpu_wino512_set(bool on) { wino512_enabled = on; }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#include <immintrin.h>

#define TGT __attribute__((target("avx512f")))

static bool have_avx512(void)
{
    static int known = -1;
    if (known < 0) {
        __builtin_cpu_init();
        known = __builtin_cpu_supports("avx512f") ? 1 : 0;
    }
    return known == 1;
}

bool cpu_wino512_fits(int w, int ow)
{
    return wino512_enabled && w >= 1 && w <= 32 && ow >= 1 && ow <= 30 && have_avx512();
}

/* -v, zeros' signs flipped too (0 - v would turn -0 into +0) */
TGT static inline __m512 neg(__m512 v)
{
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)));
}

static inline __mmask16 lanes_below(int n)
{
    return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
}

/* Columns 2b + j - pw (j = 0..3) of a row of w floats, one vector each,
 * zero where that column is outside the row or b >= tw. */
struct cols {
    __m512i idx[4];
    __mmask16 m[4], lo, hi;
};

TGT static void cols_init(struct cols *c, int w, int pw, int tw)
{
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        int32_t ix[16];
        unsigned m = 0;
        for (int b = 0; b < 16; b++) {
            const int q = 2 * b + j - pw;
            ix[b] = q & 31;
            if (b < tw && q >= 0 && q < w)
                m |= 1u << b;
        }
        c->idx[j] = _mm512_loadu_si512(ix);
        c->m[j] = (__mmask16)m;
    }
    c->lo = lanes_below(w);
    c->hi = lanes_below(w - 16);
}

/* Grid row g of a plane placed at (ph, pw) of a zeroed grid: its 4
 * column vectors. */
TGT static inline void grid_row(const struct cols *c, const float *x, int h, int w, int g,
                                __m512 out[4])
{
    if (g < 0 || g >= h) {
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            out[j] = _mm512_setzero_ps();
        return;
    }
    const float *r = x + (size_t)g * w;
    const __m512 lo = _mm512_maskz_loadu_ps(c->lo, r), hi = _mm512_maskz_loadu_ps(c->hi, r + 16);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        out[j] = _mm512_maskz_permutex2var_ps(c->m[j], lo, c->idx[j], hi);
}

/* conv.c's wino_in on wino_pad's grid: V[xi][a tw + b] = B^T d B, rows
 * first (d0 - d2, d1 + d2, d2 - d1, d1 - d3), then columns likewise. */
TGT void cpu_wino512_in(int h, int w, int ph, int pw, int th, int tw, const float *x, float *v,
                        size_t xs)
{
    struct cols c;
    cols_init(&c, w, pw, tw);
    const __mmask16 mt = lanes_below(tw);
    __m512 R[4][4];
    grid_row(&c, x, h, w, -ph, R[0]);
    grid_row(&c, x, h, w, 1 - ph, R[1]);
    for (int a = 0; a < th; a++) {
        grid_row(&c, x, h, w, 2 * a + 2 - ph, R[2]);
        grid_row(&c, x, h, w, 2 * a + 3 - ph, R[3]);
        float *o = v + (size_t)a * tw;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            __m512 e[4];
#pragma GCC unroll 4
            for (int j = 0; j < 4; j++)
                e[j] = i == 0   ? _mm512_sub_ps(R[0][j], R[2][j])
                       : i == 1 ? _mm512_add_ps(R[1][j], R[2][j])
                       : i == 2 ? _mm512_sub_ps(R[2][j], R[1][j])
                                : _mm512_sub_ps(R[1][j], R[3][j]);
            float *oi = o + 4 * (size_t)i * xs;
            _mm512_mask_storeu_ps(oi, mt, _mm512_sub_ps(e[0], e[2]));
            _mm512_mask_storeu_ps(oi + xs, mt, _mm512_add_ps(e[1], e[2]));
            _mm512_mask_storeu_ps(oi + 2 * xs, mt, _mm512_sub_ps(e[2], e[1]));
            _mm512_mask_storeu_ps(oi + 3 * xs, mt, _mm512_sub_ps(e[1], e[3]));
        }
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            R[0][j] = R[2][j];
            R[1][j] = R[3][j];
        }
    }
}

/* Lane b of `even` to column 2b, of `odd` to 2b + 1: columns 0-15 and
 * 16-31 of a row. */
TGT static inline void interleave(__m512 even, __m512 odd, __m512 *lo, __m512 *hi)
{
    const __m512i il = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i ih =
        _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    *lo = _mm512_permutex2var_ps(even, il, odd);
    *hi = _mm512_permutex2var_ps(even, ih, odd);
}

/* conv.c's wino_out: rows 2a and 2a + 1 of y from the 16 vectors of M's
 * row of tiles a (A^T m A). */
TGT void cpu_wino512_out(int oh, int ow, int th, int tw, const float *m, size_t xs, float *y)
{
    const __mmask16 mt = lanes_below(tw), ylo = lanes_below(ow), yhi = lanes_below(ow - 16);
    for (int a = 0; a < th; a++) {
        const float *p = m + (size_t)a * tw;
        __m512 v[16];
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++)
            v[k] = _mm512_maskz_loadu_ps(mt, p + (size_t)k * xs);
        __m512 s[4], lo, hi;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            s[j] = _mm512_add_ps(_mm512_add_ps(v[j], v[4 + j]), v[8 + j]);
        interleave(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), s[2]),
                   _mm512_sub_ps(_mm512_sub_ps(s[1], s[2]), s[3]), &lo, &hi);
        float *y0 = y + 2 * (size_t)a * ow;
        _mm512_mask_storeu_ps(y0, ylo, lo);
        _mm512_mask_storeu_ps(y0 + 16, yhi, hi);
        if (2 * a + 1 >= oh)
            continue;
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            s[j] = _mm512_sub_ps(_mm512_sub_ps(v[4 + j], v[8 + j]), v[12 + j]);
        interleave(_mm512_add_ps(_mm512_add_ps(s[0], s[1]), s[2]),
                   _mm512_sub_ps(_mm512_sub_ps(s[1], s[2]), s[3]), &lo, &hi);
        _mm512_mask_storeu_ps(y0 + ow, ylo, lo);
        _mm512_mask_storeu_ps(y0 + ow + 16, yhi, hi);
    }
}

/* Row r of dy split into its even and odd columns (lane b: columns 2b and
 * 2b + 1), zeros past oh x ow. */
TGT static inline void dy_row(const float *dy, int oh, int ow, int r, __m512 *ev, __m512 *od)
{
    if (r >= oh) {
        *ev = *od = _mm512_setzero_ps();
        return;
    }
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const float *g = dy + (size_t)r * ow;
    const __m512 lo = _mm512_maskz_loadu_ps(lanes_below(ow), g),
                 hi = _mm512_maskz_loadu_ps(lanes_below(ow - 16), g + 16);
    *ev = _mm512_permutex2var_ps(lo, ie, hi);
    *od = _mm512_permutex2var_ps(lo, io, hi);
}

/* conv.c's wino_dy: dM[xi][a tw + b] = A dy_tile A^T, row i of A dy being
 * c0 g0 + c1 g1 (the same products by 0 and +-1 as wino_dy_math, so that
 * zeros keep their signs), then g0, g0 + g1, g0 - g1, -g1 along the row. */
TGT void cpu_wino512_dy(int oh, int ow, int th, int tw, const float *dy, float *dm, size_t xs)
{
    const __mmask16 mt = lanes_below(tw);
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f),
                 mone = _mm512_set1_ps(-1.0f);
    for (int a = 0; a < th; a++) {
        __m512 e0, o0, e1, o1;
        dy_row(dy, oh, ow, 2 * a, &e0, &o0);
        dy_row(dy, oh, ow, 2 * a + 1, &e1, &o1);
        float *o = dm + (size_t)a * tw;
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m512 c0 = i == 3 ? zero : one, c1 = i == 0 ? zero : i == 1 ? one : mone;
            const __m512 r0 = _mm512_add_ps(_mm512_mul_ps(c0, e0), _mm512_mul_ps(c1, e1));
            const __m512 r1 = _mm512_add_ps(_mm512_mul_ps(c0, o0), _mm512_mul_ps(c1, o1));
            float *oi = o + 4 * (size_t)i * xs;
            _mm512_mask_storeu_ps(oi, mt, r0);
            _mm512_mask_storeu_ps(oi + xs, mt, _mm512_add_ps(r0, r1));
            _mm512_mask_storeu_ps(oi + 2 * xs, mt, _mm512_sub_ps(r0, r1));
            _mm512_mask_storeu_ps(oi + 3 * xs, mt, neg(r1));
        }
    }
}

/* Lanes b - 1 to b (lane 0: a zero): a tile's columns 2 and 3 land on the
 * next tile's 0 and 1. */
TGT static inline __m512 next_tile(__m512 v)
{
    return _mm512_castsi512_ps(
        _mm512_alignr_epi32(_mm512_castps_si512(v), _mm512_setzero_si512(), 15));
}

/* Grid row g (even columns in ev, odd in od, lane b: columns 2b, 2b + 1)
 * to row g - ph of dx, columns shifted by pw, when it is one. */
TGT static inline void dx_row(const struct cols *c, int h, int w, int ph, int g, __m512 ev,
                              __m512 od, float *dx)
{
    const int r = g - ph;
    if (r < 0 || r >= h)
        return;
    __m512 lo, hi;
    interleave(ev, od, &lo, &hi);
    /* grid column q = w' + pw: lane w' of the interleaved row's q */
    float *d = dx + (size_t)r * w;
    _mm512_mask_storeu_ps(d, c->lo, _mm512_permutex2var_ps(lo, c->idx[0], hi));
    _mm512_mask_storeu_ps(d + 16, c->hi, _mm512_permutex2var_ps(lo, c->idx[1], hi));
}

/* conv.c's wino_scatter: the patches B dV B^T of one plane's tiles added
 * up on the padded grid (each grid row from the row of tiles above first,
 * as there), and its inner h x w written to dx. */
TGT void cpu_wino512_scatter(int h, int w, int ph, int pw, int th, int tw, const float *dv,
                             size_t xs, float *dx)
{
    struct cols c; /* here: idx[0], idx[1] pick columns w' + pw from 32 */
    for (int half = 0; half < 2; half++) {
        int32_t ix[16];
        for (int b = 0; b < 16; b++)
            ix[b] = (16 * half + b + pw) & 31;
        c.idx[half] = _mm512_loadu_si512(ix);
    }
    c.lo = lanes_below(w);
    c.hi = lanes_below(w - 16);
    const __mmask16 mt = lanes_below(tw);
    const __m512 zero = _mm512_setzero_ps();
    /* the accumulated even / odd columns of grid rows 2a and 2a + 1 */
    __m512 acc[2][2] = {{zero, zero}, {zero, zero}};
    for (int a = 0; a < th; a++) {
        const float *p = dv + (size_t)a * tw;
        __m512 x[16];
#pragma GCC unroll 16
        for (int k = 0; k < 16; k++)
            x[k] = _mm512_maskz_loadu_ps(mt, p + (size_t)k * xs);
        __m512 z[4][4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) {
            z[0][j] = x[j];
            z[1][j] = _mm512_add_ps(_mm512_sub_ps(x[4 + j], x[8 + j]), x[12 + j]);
            z[2][j] = _mm512_sub_ps(_mm512_add_ps(x[4 + j], x[8 + j]), x[j]);
            z[3][j] = neg(x[12 + j]);
        }
        __m512 next[2][2];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const __m512 q0 = z[r][0], q1 = _mm512_add_ps(_mm512_sub_ps(z[r][1], z[r][2]), z[r][3]),
                         q2 = _mm512_sub_ps(_mm512_add_ps(z[r][1], z[r][2]), z[r][0]),
                         q3 = neg(z[r][3]);
            /* lane tw of columns 0 and 1 is a zero, as in wino_scatter */
            const __m512 ev = _mm512_add_ps(_mm512_maskz_mov_ps(mt, q0), next_tile(q2)),
                         od = _mm512_add_ps(_mm512_maskz_mov_ps(mt, q1), next_tile(q3));
            if (r < 2) {
                acc[r][0] = _mm512_add_ps(acc[r][0], ev);
                acc[r][1] = _mm512_add_ps(acc[r][1], od);
            } else {
                next[r - 2][0] = _mm512_add_ps(zero, ev);
                next[r - 2][1] = _mm512_add_ps(zero, od);
            }
        }
        dx_row(&c, h, w, ph, 2 * a, acc[0][0], acc[0][1], dx);
        dx_row(&c, h, w, ph, 2 * a + 1, acc[1][0], acc[1][1], dx);
#pragma GCC unroll 2
        for (int r = 0; r < 2; r++)
#pragma GCC unroll 2
            for (int k = 0; k < 2; k++)
                acc[r][k] = next[r][k];
    }
    dx_row(&c, h, w, ph, 2 * th, acc[0][0], acc[0][1], dx);
    dx_row(&c, h, w, ph, 2 * th + 1, acc[1][0], acc[1][1], dx);
}

#else /* no AVX-512 build: conv.c's loops */

bool cpu_wino512_fits(int w, int ow) { return false; }
void cpu_wino512_in(int h, int w, int ph, int pw, int th, int tw, const float *x, float *v,
                    size_t xs)
{
}
void cpu_wino512_out(int oh, int ow, int th, int tw, const float *m, size_t xs, float *y) {}
void cpu_wino512_dy(int oh, int ow, int th, int tw, const float *dy, float *dm, size_t xs) {}
void cpu_wino512_scatter(int h, int w, int ph, int pw, int th, int tw, const float *dv,
                         size_t xs, float *dx)
{
}
#endif
