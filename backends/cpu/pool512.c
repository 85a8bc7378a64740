/* pool512.c — 2x2 max pooling at stride 2 (nn.c's common case) in AVX-512
 * registers, a row of outputs at a time.
 *
 * The portable loops read and write every other float (the windows'
 * columns 2 ow and 2 ow + 1): GCC's vector code for them was slower than
 * the scalar loop (its interleaved stores 4x), so they ran one window at a
 * time. Here 32 floats of an input row are two loads, their even and odd
 * columns two lane permutations (vpermt2ps), and the gradient's two
 * columns are interleaved back the same way before two stores; the tails
 * are masked, so no float past a row is read or written.
 *
 * The comparisons are the portable loops', in their order (strict '>',
 * the first maximal element in row-major order wins, a NaN never does):
 * the same bits (tests/test_cpu_ops.c, test_pool and test_pool_ties). */
#include "config.h"

#include "cpu-impl.h"

static bool pool512_enabled = true;

void cpu_maxpool2_512_set(bool on) { pool512_enabled = on; }

#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 8
#include <immintrin.h>

#define TGT __attribute__((target("avx512f")))

/* Columns 2 j (even) and 2 j + 1 (odd) of a row, j < n <= 16 outputs. */
static inline TGT void split(const float *r, int n, __m512 *even, __m512 *odd)
{
    const __m512i ie = _mm512_set_epi32(30, 28, 26, 24, 22, 20, 18, 16, 14, 12, 10, 8, 6, 4, 2, 0);
    const __m512i io = _mm512_set_epi32(31, 29, 27, 25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    const __m512 lo = _mm512_maskz_loadu_ps(cpu_lanes_below(2 * n), r);
    const __m512 hi = _mm512_maskz_loadu_ps(cpu_lanes_below(2 * n - 16), r + 16);
    *even = _mm512_permutex2var_ps(lo, ie, hi);
    *odd = _mm512_permutex2var_ps(lo, io, hi);
}

/* b where b > m (ordered: a NaN never wins), else m */
static inline TGT __m512 keep_max(__m512 m, __m512 b, __mmask16 *won)
{
    *won = _mm512_cmp_ps_mask(b, m, _CMP_GT_OQ);
    return _mm512_mask_blend_ps(*won, m, b);
}

TGT void cpu_maxpool2_row512(const float *r0, const float *r1, int ow, float *y)
{
    for (int j = 0; j < ow; j += 16) {
        const int n = ow - j < 16 ? ow - j : 16;
        __m512 a, b, c, e;
        __mmask16 won;
        split(r0 + 2 * j, n, &a, &b);
        split(r1 + 2 * j, n, &c, &e);
        __m512 m = keep_max(a, b, &won);
        m = keep_max(m, c, &won);
        m = keep_max(m, e, &won);
        _mm512_mask_storeu_ps(y + j, cpu_lanes_below(n), m);
    }
}

/* Interleaves lo (even columns) and hi (odd) into row d, 2 n floats. */
static inline TGT void join(__m512 ev, __m512 od, int n, float *d)
{
    const __m512i i0 = _mm512_set_epi32(23, 7, 22, 6, 21, 5, 20, 4, 19, 3, 18, 2, 17, 1, 16, 0);
    const __m512i i1 =
        _mm512_set_epi32(31, 15, 30, 14, 29, 13, 28, 12, 27, 11, 26, 10, 25, 9, 24, 8);
    _mm512_mask_storeu_ps(d, cpu_lanes_below(2 * n), _mm512_permutex2var_ps(ev, i0, od));
    _mm512_mask_storeu_ps(d + 16, cpu_lanes_below(2 * n - 16), _mm512_permutex2var_ps(ev, i1, od));
}

TGT void cpu_maxpool2_bwd_row512(const float *r0, const float *r1, const float *g, int ow,
                                 float *d0, float *d1)
{
    const __m512 z = _mm512_setzero_ps();
    for (int j = 0; j < ow; j += 16) {
        const int n = ow - j < 16 ? ow - j : 16;
        __m512 a, b, c, e;
        __mmask16 pb, pc, pe;
        split(r0 + 2 * j, n, &a, &b);
        split(r1 + 2 * j, n, &c, &e);
        const __m512 gg = _mm512_maskz_loadu_ps(cpu_lanes_below(n), g + j);
        __m512 m = keep_max(a, b, &pb);
        m = keep_max(m, c, &pc);
        (void)keep_max(m, e, &pe);
        /* the winner gets g, the others 0: e if it beat the rest, else c
         * if it did, else b if it beat a, else a */
        const __m512 ge = _mm512_mask_blend_ps(pe, z, gg), re = _mm512_mask_blend_ps(pe, gg, z);
        const __m512 gc = _mm512_mask_blend_ps(pc, z, re), rc = _mm512_mask_blend_ps(pc, re, z);
        const __m512 gb = _mm512_mask_blend_ps(pb, z, rc), ga = _mm512_mask_blend_ps(pb, rc, z);
        join(ga, gb, n, d0 + 2 * j);
        join(gc, ge, n, d1 + 2 * j);
    }
}

bool cpu_maxpool2_512(void) { return pool512_enabled && cpu_has_avx512f(); }
#else
void cpu_maxpool2_row512(const float *r0, const float *r1, int ow, float *y)
{
    (void)r0, (void)r1, (void)ow, (void)y;
}

void cpu_maxpool2_bwd_row512(const float *r0, const float *r1, const float *g, int ow,
                             float *d0, float *d1)
{
    (void)r0, (void)r1, (void)g, (void)ow, (void)d0, (void)d1;
}

bool cpu_maxpool2_512(void) { return false; }
#endif
