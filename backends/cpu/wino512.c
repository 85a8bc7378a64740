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
 * A plane of at most 64 floats and 16 tiles (resnet8's 7 x 7, rows of 4
 * tiles) is one vector a transform, and one of at most 16 columns and 8
 * tiles a row (14 x 14) has two rows of tiles a vector, through lane
 * tables made once per shape (cpu_wino512_plan).
 * resnet8's conv layers, all three passes, 1 thread (bench_ops, CPU time,
 * AMD EPYC Zen 5): 16 channels 3,780 -> 2,285 us, 32: 3,130 -> 2,274, 64:
 * 3,513 -> 2,790 by rows, 2,400 with the plane a vector (32: 2,075 with
 * rows of tiles in pairs); training
 * 1,823-1,890 -> 2,262-2,275 img/s by rows. The small
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

bool cpu_wino512_fits(int w, int ow)
{
    return wino512_enabled && w >= 1 && w <= 32 && ow >= 1 && ow <= 30 && cpu_has_avx512f();
}

/* -v, zeros' signs flipped too (0 - v would turn -0 into +0) */
TGT static inline __m512 neg(__m512 v)
{
    return _mm512_castsi512_ps(
        _mm512_xor_si512(_mm512_castps_si512(v), _mm512_set1_epi32((int)0x80000000u)));
}

/* Columns 2b + j - pw (j = 0..3) of a row of w floats, one vector each,
 * zero where that column is outside the row or b >= tw. */
struct cols {
    __m512i idx[4];
    __mmask16 m[4], lo, hi;
};

/* The tables of a plane transformed by rows (cpu_wino512_plan): the
 * columns 2b + j - pw of a row, or (dx) the columns w' + pw of a grid row. */
TGT static void cols_load(struct cols *c, const struct cpu_wino512_plane *p, bool dx)
{
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        c->idx[j] = _mm512_loadu_si512(dx ? p->dx_ix[j % 2] : p->row_ix[j]);
        c->m[j] = dx ? 0 : p->row_m[j][0];
    }
    c->lo = cpu_lanes_below(p->w);
    c->hi = cpu_lanes_below(p->w - 16);
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

/* V = B^T d B for a vector of tiles, d[4 r + c] their input at (r, c):
 * rows first (d0 - d2, d1 + d2, d2 - d1, d1 - d3), then columns likewise
 * (conv.c's wino_in); V[xi] to o + xi xs. */
TGT static inline void in_math(const __m512 d[16], __mmask16 mt, float *o, size_t xs)
{
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) {
        __m512 e[4];
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++)
            e[j] = i == 0   ? _mm512_sub_ps(d[j], d[8 + j])
                   : i == 1 ? _mm512_add_ps(d[4 + j], d[8 + j])
                   : i == 2 ? _mm512_sub_ps(d[8 + j], d[4 + j])
                            : _mm512_sub_ps(d[4 + j], d[12 + j]);
        float *oi = o + 4 * (size_t)i * xs;
        _mm512_mask_storeu_ps(oi, mt, _mm512_sub_ps(e[0], e[2]));
        _mm512_mask_storeu_ps(oi + xs, mt, _mm512_add_ps(e[1], e[2]));
        _mm512_mask_storeu_ps(oi + 2 * xs, mt, _mm512_sub_ps(e[2], e[1]));
        _mm512_mask_storeu_ps(oi + 3 * xs, mt, _mm512_sub_ps(e[1], e[3]));
    }
}

/* A^T m A for a vector of tiles whose M[xi] is at m + xi xs (conv.c's
 * wino_out): Y[2 u + v] is output pixel (u, v) of each tile. */
TGT static inline void out_math(const float *m, size_t xs, __mmask16 mt, __m512 Y[4])
{
    __m512 v[16], s[4];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++)
        v[k] = _mm512_maskz_loadu_ps(mt, m + (size_t)k * xs);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        s[j] = _mm512_add_ps(_mm512_add_ps(v[j], v[4 + j]), v[8 + j]);
    Y[0] = _mm512_add_ps(_mm512_add_ps(s[0], s[1]), s[2]);
    Y[1] = _mm512_sub_ps(_mm512_sub_ps(s[1], s[2]), s[3]);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++)
        s[j] = _mm512_sub_ps(_mm512_sub_ps(v[4 + j], v[8 + j]), v[12 + j]);
    Y[2] = _mm512_add_ps(_mm512_add_ps(s[0], s[1]), s[2]);
    Y[3] = _mm512_sub_ps(_mm512_sub_ps(s[1], s[2]), s[3]);
}

/* conv.c's wino_in on wino_pad's grid, a row of tiles a vector. */
TGT static void in_rows(const struct cpu_wino512_plane *p, const float *x, float *v, size_t xs)
{
    const int h = p->h, w = p->w, ph = p->ph, th = p->th, tw = p->tw;
    struct cols c;
    cols_load(&c, p, false);
    const __mmask16 mt = cpu_lanes_below(tw);
    __m512 d[16]; /* grid rows 2a .. 2a + 3, 4 columns each */
    grid_row(&c, x, h, w, -ph, d);
    grid_row(&c, x, h, w, 1 - ph, d + 4);
    for (int a = 0; a < th; a++) {
        grid_row(&c, x, h, w, 2 * a + 2 - ph, d + 8);
        grid_row(&c, x, h, w, 2 * a + 3 - ph, d + 12);
        in_math(d, mt, v + (size_t)a * tw, xs);
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++)
            d[j] = d[8 + j];
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
TGT static void out_rows(int oh, int ow, int th, int tw, const float *m, size_t xs, float *y)
{
    const __mmask16 mt = cpu_lanes_below(tw), ylo = cpu_lanes_below(ow);
    const __mmask16 yhi = cpu_lanes_below(ow - 16);
    for (int a = 0; a < th; a++) {
        __m512 Y[4], lo, hi;
        out_math(m + (size_t)a * tw, xs, mt, Y);
        for (int u = 0; u < 2 && 2 * a + u < oh; u++) {
            float *yr = y + (2 * (size_t)a + u) * ow;
            interleave(Y[2 * u], Y[2 * u + 1], &lo, &hi);
            _mm512_mask_storeu_ps(yr, ylo, lo);
            _mm512_mask_storeu_ps(yr + 16, yhi, hi);
        }
    }
}

/* Planes of at most 64 floats with at most 16 tiles (resnet8's 7 x 7,
 * cpu_wino512_plan): the whole plane is one vector a transform, a tile a
 * lane. A plane is 4 vectors; each value a tile reads from it (its 16
 * inputs, its 4 dy pixels) is two permutations of them and a blend, the
 * padding's zeros from their masks, and the values that go back into a
 * plane (y's 4 pixels a tile, dx's sums of patches) likewise from the
 * tiles' vectors; the lane tables come from cpu_wino512_plan. */
#define GATHER(ix, m, a, b, c, d)                                                            \
    _mm512_mask_mov_ps(                                                                      \
        _mm512_maskz_permutex2var_ps((m)[0], a, _mm512_loadu_si512(ix), b), (m)[1],         \
        _mm512_permutex2var_ps(c, _mm512_loadu_si512(ix), d))

TGT static inline void load_plane(const float *x, int n, __m512 pv[4])
{
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        pv[k] = _mm512_maskz_loadu_ps(cpu_lanes_below(n - 16 * k), x + 16 * k);
}

TGT static void in_small(const struct cpu_wino512_plane *p, const float *x, float *v, size_t xs)
{
    const __mmask16 mt = cpu_lanes_below(p->th * p->tw);
    __m512 pv[4], d[16];
    load_plane(x, p->h * p->w, pv);
#pragma GCC unroll 16
    for (int e = 0; e < 16; e++)
        d[e] = GATHER(p->in_ix[e], p->in_m[e], pv[0], pv[1], pv[2], pv[3]);
    in_math(d, mt, v, xs);
}

/* dM = A dy_tile A^T from the tiles' 4 dy pixels (dy_math's sums). */
TGT static inline void dy_math(__m512 e0, __m512 e1, __m512 o0, __m512 o1, __mmask16 mt,
                               float *o, size_t xs)
{
    const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f),
                 mone = _mm512_set1_ps(-1.0f);
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

/* Planes of at most 16 columns and 8 tiles a row (resnet8's 14 x 14):
 * two rows of tiles a vector (lanes from tw: the second), so that a row of
 * 7 tiles does not leave half of every transform idle. A plane row is one
 * load; a tile value of the pair is one permutation of the rows it lies
 * in, the lane tables from cpu_wino512_plan. */
TGT static inline __m512 plane_row(const float *x, int h, int w, int g)
{
    return g >= 0 && g < h ? _mm512_maskz_loadu_ps(cpu_lanes_below(w), x + (size_t)g * w)
                           : _mm512_setzero_ps();
}

TGT static void in_pairs(const struct cpu_wino512_plane *p, const float *x, float *v, size_t xs)
{
    const int tw = p->tw;
    __m512 G[6];
    G[0] = plane_row(x, p->h, p->w, -p->ph);
    G[1] = plane_row(x, p->h, p->w, 1 - p->ph);
    for (int a = 0; a < p->th; a += 2) {
#pragma GCC unroll 4
        for (int k = 2; k < 6; k++)
            G[k] = plane_row(x, p->h, p->w, 2 * a + k - p->ph);
        __m512 d[16];
#pragma GCC unroll 16
        for (int e = 0; e < 16; e++)
            d[e] = _mm512_maskz_permutex2var_ps(p->pk_in_m[e % 4][0], G[e / 4],
                                                _mm512_loadu_si512(p->pk_in_ix[e % 4]),
                                                G[e / 4 + 2]);
        const __mmask16 mt = cpu_lanes_below(tw * (p->th - a < 2 ? 1 : 2));
        in_math(d, mt, v + (size_t)a * tw, xs);
        G[0] = G[4];
        G[1] = G[5];
    }
}

TGT static void out_pairs(const struct cpu_wino512_plane *p, const float *m, size_t xs, float *y)
{
    const int tw = p->tw, ow = p->ow;
    const __mmask16 yw = cpu_lanes_below(ow);
    for (int a = 0; a < p->th; a += 2) {
        const int rows = p->th - a < 2 ? 1 : 2;
        const __mmask16 mt = cpu_lanes_below(tw * rows);
        __m512 Y[4];
        out_math(m + (size_t)a * tw, xs, mt, Y);
        /* y row 2 (a + t) + u: lane j from Y[2 u + j % 2], lane t tw + j / 2 */
        for (int t = 0; t < rows; t++)
            for (int u = 0; u < 2 && 2 * (a + t) + u < p->oh; u++)
                _mm512_mask_storeu_ps(y + (size_t)(2 * (a + t) + u) * ow, yw,
                                      _mm512_permutex2var_ps(Y[2 * u],
                                                             _mm512_loadu_si512(p->pk_out_ix[t]),
                                                             Y[2 * u + 1]));
    }
}

TGT static void dy_pairs(const struct cpu_wino512_plane *p, const float *dy, float *dm, size_t xs)
{
    const int tw = p->tw;
    const __m512i ie = _mm512_loadu_si512(p->pk_dy_ix[0]), io = _mm512_loadu_si512(p->pk_dy_ix[1]);
    for (int a = 0; a < p->th; a += 2) {
        __m512 R[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++)
            R[k] = plane_row(dy, p->oh, p->ow, 2 * a + k);
        /* rows 2a (+1) of the first row of tiles, 2a + 2 (+3) of the second */
        const __m512 e0 = _mm512_maskz_permutex2var_ps(p->pk_dy_m[0][0], R[0], ie, R[2]),
                     o0 = _mm512_maskz_permutex2var_ps(p->pk_dy_m[1][0], R[0], io, R[2]),
                     e1 = _mm512_maskz_permutex2var_ps(p->pk_dy_m[0][0], R[1], ie, R[3]),
                     o1 = _mm512_maskz_permutex2var_ps(p->pk_dy_m[1][0], R[1], io, R[3]);
        dy_math(e0, e1, o0, o1, cpu_lanes_below(tw * (p->th - a < 2 ? 1 : 2)),
                dm + (size_t)a * tw, xs);
    }
}

TGT void cpu_wino512_in(const struct cpu_wino512_plane *p, int ni, int nc, const float *x,
                        float *v, size_t ld, size_t xs)
{
    const size_t xsz = (size_t)p->h * p->w, tpi = (size_t)p->th * p->tw;
    for (int i = 0; i < ni; i++)
        for (int c = 0; c < nc; c++) {
            const float *xc = x + ((size_t)i * nc + c) * xsz;
            float *vc = v + (size_t)c * ld + (size_t)i * tpi;
            if (p->small)
                in_small(p, xc, vc, xs);
            else if (p->pairs)
                in_pairs(p, xc, vc, xs);
            else
                in_rows(p, xc, vc, xs);
        }
}

TGT static void out_small(const struct cpu_wino512_plane *p, const float *m, size_t xs, float *y)
{
    const __mmask16 mt = cpu_lanes_below(p->th * p->tw);
    const int n = p->oh * p->ow;
    __m512 Y[4];
    out_math(m, xs, mt, Y);
    for (int k = 0; 16 * k < n; k++)
        _mm512_mask_storeu_ps(y + 16 * k, cpu_lanes_below(n - 16 * k),
                              GATHER(p->out_ix[k], p->out_m[k], Y[0], Y[1], Y[2], Y[3]));
}

TGT void cpu_wino512_out(const struct cpu_wino512_plane *p, int ni, int nk, const float *m,
                         size_t ld, size_t xs, float *y)
{
    const size_t ysz = (size_t)p->oh * p->ow, tpi = (size_t)p->th * p->tw;
    for (int i = 0; i < ni; i++)
        for (int k = 0; k < nk; k++) {
            const float *mk = m + (size_t)k * ld + (size_t)i * tpi;
            float *yk = y + ((size_t)i * nk + k) * ysz;
            if (p->small)
                out_small(p, mk, xs, yk);
            else if (p->pairs)
                out_pairs(p, mk, xs, yk);
            else
                out_rows(p->oh, p->ow, p->th, p->tw, mk, xs, yk);
        }
}

TGT static void dy_small(const struct cpu_wino512_plane *p, const float *dy, float *dm, size_t xs)
{
    __m512 pv[4], q[4];
    load_plane(dy, p->oh * p->ow, pv);
#pragma GCC unroll 4
    for (int k = 0; k < 4; k++)
        q[k] = GATHER(p->dy_ix[k], p->dy_m[k], pv[0], pv[1], pv[2], pv[3]);
    dy_math(q[0], q[2], q[1], q[3], cpu_lanes_below(p->th * p->tw), dm, xs);
}

/* The 16 values of the patches B dV B^T, P[4 r + j] (patch row r, column
 * j), of a row of tiles or of a small plane's tiles. */
TGT static inline void patches(const float *dv, size_t xs, __mmask16 mt, __m512 P[16])
{
    __m512 x[16], z[4][4];
#pragma GCC unroll 16
    for (int k = 0; k < 16; k++)
        x[k] = _mm512_maskz_loadu_ps(mt, dv + (size_t)k * xs);
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        z[0][j] = x[j];
        z[1][j] = _mm512_add_ps(_mm512_sub_ps(x[4 + j], x[8 + j]), x[12 + j]);
        z[2][j] = _mm512_sub_ps(_mm512_add_ps(x[4 + j], x[8 + j]), x[j]);
        z[3][j] = neg(x[12 + j]);
    }
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) {
        P[4 * r] = z[r][0];
        P[4 * r + 1] = _mm512_add_ps(_mm512_sub_ps(z[r][1], z[r][2]), z[r][3]);
        P[4 * r + 2] = _mm512_sub_ps(_mm512_add_ps(z[r][1], z[r][2]), z[r][0]);
        P[4 * r + 3] = neg(z[r][3]);
    }
}

/* A dx pixel at grid (g, q) sums, from the row of tiles above (patch rows
 * g % 2 + 2) then its own (g % 2), the patch column q % 2 of the tile at
 * q / 2 and q % 2 + 2 of the one before: ((0 + (up + up')) + (own +
 * own')), wino_scatter's order. Term e of vector k: sc_ix[4 k + e]. */
TGT static void scatter_small(const struct cpu_wino512_plane *p, const float *dv, size_t xs,
                              float *dx)
{
    __m512 P[16];
    patches(dv, xs, cpu_lanes_below(p->th * p->tw), P);
    const int n = p->h * p->w;
    for (int k = 0; 16 * k < n; k++) {
        __m512 t[4];
#pragma GCC unroll 4
        for (int e = 0; e < 4; e++) {
            const int r0 = e < 2 ? 2 : 0, j0 = e % 2 ? 2 : 0;
            t[e] = GATHER(p->sc_ix[4 * k + e], p->sc_m[4 * k + e], P[4 * r0 + j0],
                          P[4 * r0 + j0 + 1], P[4 * r0 + 4 + j0], P[4 * r0 + 4 + j0 + 1]);
        }
        const __m512 up = _mm512_add_ps(_mm512_setzero_ps(), _mm512_add_ps(t[0], t[1]));
        _mm512_mask_storeu_ps(dx + 16 * k, cpu_lanes_below(n - 16 * k),
                              _mm512_add_ps(up, _mm512_add_ps(t[2], t[3])));
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
    const __m512 lo = _mm512_maskz_loadu_ps(cpu_lanes_below(ow), g),
                 hi = _mm512_maskz_loadu_ps(cpu_lanes_below(ow - 16), g + 16);
    *ev = _mm512_permutex2var_ps(lo, ie, hi);
    *od = _mm512_permutex2var_ps(lo, io, hi);
}

/* conv.c's wino_dy: dM[xi][a tw + b] = A dy_tile A^T, row i of A dy being
 * c0 g0 + c1 g1 (the same products by 0 and +-1 as wino_dy_math, so that
 * zeros keep their signs), then g0, g0 + g1, g0 - g1, -g1 along the row. */
TGT void cpu_wino512_dy(const struct cpu_wino512_plane *p, const float *dy, float *dm, size_t xs)
{
    if (p->small) {
        dy_small(p, dy, dm, xs);
        return;
    }
    if (p->pairs) {
        dy_pairs(p, dy, dm, xs);
        return;
    }
    const __mmask16 mt = cpu_lanes_below(p->tw);
    for (int a = 0; a < p->th; a++) {
        __m512 e0, o0, e1, o1;
        dy_row(dy, p->oh, p->ow, 2 * a, &e0, &o0);
        dy_row(dy, p->oh, p->ow, 2 * a + 1, &e1, &o1);
        dy_math(e0, e1, o0, o1, mt, dm + (size_t)a * p->tw, xs);
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
TGT void cpu_wino512_scatter(const struct cpu_wino512_plane *p, const float *dv, size_t xs,
                             float *dx)
{
    if (p->small) {
        scatter_small(p, dv, xs, dx);
        return;
    }
    const int h = p->h, w = p->w, ph = p->ph, th = p->th, tw = p->tw;
    struct cols c;
    cols_load(&c, p, true);
    const __mmask16 mt = cpu_lanes_below(tw);
    const __m512 zero = _mm512_setzero_ps();
    /* the accumulated even / odd columns of grid rows 2a and 2a + 1 */
    __m512 acc[2][2] = {{zero, zero}, {zero, zero}};
    for (int a = 0; a < th; a++) {
        __m512 P[16], next[2][2];
        patches(dv + (size_t)a * tw, xs, mt, P);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            /* lane tw of columns 0 and 1 is a zero, as in wino_scatter */
            const __m512 ev = _mm512_add_ps(_mm512_maskz_mov_ps(mt, P[4 * r]),
                                            next_tile(P[4 * r + 2])),
                         od = _mm512_add_ps(_mm512_maskz_mov_ps(mt, P[4 * r + 1]),
                                            next_tile(P[4 * r + 3]));
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
void cpu_wino512_in(const struct cpu_wino512_plane *p, int ni, int nc, const float *x,
                    float *v, size_t ld, size_t xs)
{
}
void cpu_wino512_out(const struct cpu_wino512_plane *p, int ni, int nk, const float *m,
                     size_t ld, size_t xs, float *y)
{
}
void cpu_wino512_dy(const struct cpu_wino512_plane *p, const float *dy, float *dm, size_t xs) {}
void cpu_wino512_scatter(const struct cpu_wino512_plane *p, const float *dv, size_t xs,
                         float *dx)
{
}
#endif

/* Lane l of a small plane's gather: which of 4 sources (two pairs) and
 * which lane of its pair (0-31), or none (a zero). */
static void put(int32_t *ix, uint16_t *m, int l, int pair, int lane)
{
    ix[l] = lane & 31;
    m[pair] |= (uint16_t)(1u << l);
}

static void plan_in(struct cpu_wino512_plane *p)
{
    for (int e = 0; e < 16; e++)
        for (int l = 0; l < p->th * p->tw; l++) {
            const int g = 2 * (l / p->tw) + e / 4 - p->ph, q = 2 * (l % p->tw) + e % 4 - p->pw;
            if (g >= 0 && g < p->h && q >= 0 && q < p->w)
                put(p->in_ix[e], p->in_m[e], l, g * p->w + q >= 32, g * p->w + q);
        }
}

static void plan_out_dy(struct cpu_wino512_plane *p)
{
    /* y: pixel (2a + u, 2b + v) from source 2u + v, lane a tw + b */
    for (int k = 0; 16 * k < p->oh * p->ow; k++)
        for (int l = 0; l < 16 && 16 * k + l < p->oh * p->ow; l++) {
            const int row = (16 * k + l) / p->ow, col = (16 * k + l) % p->ow;
            const int tile = (row / 2) * p->tw + col / 2;
            put(p->out_ix[k], p->out_m[k], l, row % 2, 16 * (col % 2) + tile);
        }
    /* dy: tile lane l's pixel (u, v) of its block, q = 2u + v */
    for (int q = 0; q < 4; q++)
        for (int l = 0; l < p->th * p->tw; l++) {
            const int row = 2 * (l / p->tw) + q / 2, col = 2 * (l % p->tw) + q % 2;
            if (row < p->oh && col < p->ow)
                put(p->dy_ix[q], p->dy_m[q], l, row * p->ow + col >= 32, row * p->ow + col);
        }
}

/* dx pixel (g, q) on the grid, term e: from the row of tiles above (e < 2)
 * or its own, the tile at q / 2 (e even) or the one before; sources P[r0
 * + g % 2][j0 + q % 2]: pair g % 2, lane 16 (q % 2) + tile. */
static void plan_scatter(struct cpu_wino512_plane *p)
{
    for (int k = 0; 16 * k < p->h * p->w; k++)
        for (int e = 0; e < 4; e++)
            for (int l = 0; l < 16 && 16 * k + l < p->h * p->w; l++) {
                const int g = (16 * k + l) / p->w + p->ph, q = (16 * k + l) % p->w + p->pw;
                const int a = g / 2 - (e < 2), b = q / 2 - (e % 2);
                if (a >= 0 && a < p->th && b >= 0 && b < p->tw)
                    put(p->sc_ix[4 * k + e], p->sc_m[4 * k + e], l, g % 2,
                        16 * (q % 2) + a * p->tw + b);
            }
}

/* Two rows of tiles a vector: lane l is tile (l / tw, l % tw) of the pair;
 * its values come from the first row given (l < tw) or the second. */
static void plan_pairs(struct cpu_wino512_plane *p)
{
    const int tw = p->tw;
    for (int l = 0; l < 2 * tw; l++) {
        const int t = l / tw, b = l % tw;
        for (int c = 0; c < 4; c++) {
            const int q = 2 * b + c - p->pw;
            if (q >= 0 && q < p->w)
                put(p->pk_in_ix[c], p->pk_in_m[c], l, 0, 16 * t + q);
        }
        for (int v = 0; v < 2; v++)
            if (2 * b + v < p->ow)
                put(p->pk_dy_ix[v], p->pk_dy_m[v], l, 0, 16 * t + 2 * b + v);
    }
    for (int t = 0; t < 2; t++)
        for (int j = 0; j < 16; j++)
            p->pk_out_ix[t][j] = 16 * (j % 2) + ((t * tw + j / 2) & 15);
}

/* By rows: lane b of column vector j is column 2b + j - pw of a row; lane
 * w' of a dx row is grid column w' + pw (of 32, even and odd interleaved). */
static void plan_rows(struct cpu_wino512_plane *p)
{
    for (int j = 0; j < 4; j++)
        for (int b = 0; b < p->tw && b < 16; b++) {
            const int q = 2 * b + j - p->pw;
            if (q >= 0 && q < p->w)
                put(p->row_ix[j], p->row_m[j], b, 0, q);
        }
    for (int half = 0; half < 2; half++)
        for (int l = 0; l < 16; l++)
            p->dx_ix[half][l] = (16 * half + l + p->pw) & 31;
}

void cpu_wino512_plan(struct cpu_wino512_plane *p)
{
    /* the shape kept, every table zeroed */
    *p = (struct cpu_wino512_plane){.h = p->h, .w = p->w, .ph = p->ph, .pw = p->pw,
                                    .oh = p->oh, .ow = p->ow, .th = p->th, .tw = p->tw};
    p->small = p->h * p->w <= 64 && p->oh * p->ow <= 64 && p->th * p->tw <= 16;
    p->pairs = !p->small && p->w <= 16 && p->ow <= 16 && 2 * p->tw <= 16;
    if (p->pairs)
        plan_pairs(p);
    if (!p->small) {
        plan_rows(p);
        return;
    }
    plan_in(p);
    plan_out_dy(p);
    plan_scatter(p);
}
