/* test_compress.c — 16-bit floats (base/half.c) and error feedback
 * (src/compress.c), the pieces of --compress fp16|bf16:
 *   - fp16: exact values, ties to even (normal and subnormal), the largest
 *     finite value and where rounding overflows to infinity, signed zeros,
 *     infinities, NaN (one quiet NaN whatever the sign and payload, never
 *     rounded into infinity), every
 *     one of the 65536 values back and forth; and, where the compiler has
 *     _Float16, a million random floats against its conversions;
 *   - bf16: the same kinds of cases, every value back and forth;
 *   - the 16-bit adds of the ring are those of widen, add, round;
 *   - the array conversions and adds (F16C instructions where the CPU has
 *     them) give the scalar code's bits, NaN included;
 *   - error feedback: over 2000 steps of random gradients (and of values
 *     that always round the same way) the widened sum of what was sent
 *     tracks the sum of the true values within one 16-bit rounding (and the
 *     float rounding of the steps), where rounding without it drifts by
 *     more than ten times that; a failed step
 *     (no commit) leaves the carried error as it was. */
#include "config.h"

#include "testutil.h"

#include <float.h>

#include "compress.h"
#include "half.h"
#include "rng.h"

static float f_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static uint32_t u_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static bool f16_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu); }

static void test_f16_cases(void **state)
{
    (void)state;
    assert_int_equal(rt_f32_to_f16(1.0f), 0x3c00);
    assert_int_equal(rt_f32_to_f16(-2.0f), 0xc000);
    assert_int_equal(rt_f32_to_f16(0.0f), 0x0000);
    assert_int_equal(rt_f32_to_f16(-0.0f), 0x8000);
    /* ties to even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10 */
    assert_int_equal(rt_f32_to_f16(1.0f + 0x1p-11f), 0x3c00);
    assert_int_equal(rt_f32_to_f16(1.0f + 3 * 0x1p-11f), 0x3c02);
    assert_int_equal(rt_f32_to_f16(1.0f + 0x1p-11f + 0x1p-20f), 0x3c01); /* above the tie */
    /* the largest finite value, and overflow from 65520 on */
    assert_int_equal(rt_f32_to_f16(65504.0f), 0x7bff);
    assert_int_equal(rt_f32_to_f16(65519.99f), 0x7bff);
    assert_int_equal(rt_f32_to_f16(65520.0f), 0x7c00);
    assert_int_equal(rt_f32_to_f16(-1e9f), 0xfc00);
    assert_int_equal(rt_f32_to_f16(INFINITY), 0x7c00);
    assert_int_equal(rt_f32_to_f16(-INFINITY), 0xfc00);
    /* subnormals: 2^-24 is the least; ties to even there too */
    assert_int_equal(rt_f32_to_f16(0x1p-14f), 0x0400);
    assert_int_equal(rt_f32_to_f16(0x1p-14f - 0x1p-24f), 0x03ff);
    assert_int_equal(rt_f32_to_f16(0x1p-24f), 0x0001);
    assert_int_equal(rt_f32_to_f16(0x1p-25f), 0x0000);
    assert_int_equal(rt_f32_to_f16(0x1p-25f + 0x1p-40f), 0x0001);
    assert_int_equal(rt_f32_to_f16(1.5f * 0x1p-24f), 0x0002);
    assert_int_equal(rt_f32_to_f16(2.5f * 0x1p-24f), 0x0002);
    assert_int_equal(rt_f32_to_f16(-0x1p-30f), 0x8000);
    assert_true(rt_f16_to_f32(0x0001) == 0x1p-24f);
    assert_true(rt_f16_to_f32(0x03ff) == 0x1p-14f - 0x1p-24f);
    /* NaN stays NaN, even with a payload below the kept bits */
    assert_true(f16_nan(rt_f32_to_f16(NAN)));
    assert_true(f16_nan(rt_f32_to_f16(f_of(0x7f800001u))));
    assert_int_equal(rt_f32_to_f16(f_of(0xff800001u)), 0x7e00);
    assert_int_equal(rt_f32_to_f16(f_of(0xffc00000u)), 0x7e00);
    assert_true(isnan(rt_f16_to_f32(0x7c01)));
    assert_true(isinf(rt_f16_to_f32(0x7c00)) && rt_f16_to_f32(0xfc00) < 0);
}

/* Every fp16 value widens exactly and rounds back to itself. */
static void test_f16_round_trip(void **state)
{
    (void)state;
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rt_f16_to_f32((uint16_t)h);
        if (f16_nan((uint16_t)h)) {
            assert_true(isnan(f));
            assert_true(f16_nan(rt_f32_to_f16(f)));
            continue;
        }
        if (rt_f32_to_f16(f) != h)
            fail_msg("fp16 %#06x -> %a -> %#06x", h, (double)f, rt_f32_to_f16(f));
    }
}

/* Against the compiler's own conversions, where it has them. */
static void test_f16_against_compiler(void **state)
{
    (void)state;
#ifdef __FLT16_MAX__
    rt_rng rng;
    rt_rng_seed(&rng, 7, 0);
    for (int i = 0; i < 1000000; i++) {
        /* every exponent that matters, random mantissas and signs */
        uint32_t u = (uint32_t)rt_rng_next(&rng);
        u = (u & 0x807fffffu) | ((uint32_t)(90 + rt_rng_below(&rng, 60)) << 23);
        float f = f_of(u);
        _Float16 c = (_Float16)f;
        uint16_t want;
        memcpy(&want, &c, sizeof want);
        if (rt_f32_to_f16(f) != want)
            fail_msg("%a: ours %#06x, the compiler's %#06x", (double)f, rt_f32_to_f16(f), want);
    }
    for (uint32_t h = 0; h < 65536; h++) {
        _Float16 c;
        uint16_t hh = (uint16_t)h;
        memcpy(&c, &hh, sizeof c);
        float want = (float)c, got = rt_f16_to_f32(hh);
        assert_true(u_of(want) == u_of(got) || (isnan(want) && isnan(got)));
    }
#else
    skip();
#endif
}

static void test_bf16(void **state)
{
    (void)state;
    assert_int_equal(rt_f32_to_bf16(1.0f), 0x3f80);
    assert_int_equal(rt_f32_to_bf16(-0.0f), 0x8000);
    assert_int_equal(rt_f32_to_bf16(1.0f + 0x1p-8f), 0x3f80);  /* tie: even */
    assert_int_equal(rt_f32_to_bf16(1.0f + 3 * 0x1p-8f), 0x3f82);
    assert_int_equal(rt_f32_to_bf16(1.0f + 0x1p-8f + 0x1p-20f), 0x3f81);
    assert_int_equal(rt_f32_to_bf16(FLT_MAX), 0x7f80);        /* rounds up to infinity */
    assert_int_equal(rt_f32_to_bf16(-INFINITY), 0xff80);
    assert_int_equal(rt_f32_to_bf16(f_of(0x00010000u)), 0x0001); /* a subnormal */
    assert_int_equal(rt_f32_to_bf16(f_of(0x00008000u)), 0x0000); /* its half: tie to even */
    assert_int_equal(rt_f32_to_bf16(f_of(0x00018000u)), 0x0002);
    assert_int_equal(rt_f32_to_bf16(f_of(0x7fffffffu)), 0x7fc0); /* would carry into the sign */
    assert_int_equal(rt_f32_to_bf16(f_of(0xff800001u)), 0x7fc0);
    assert_true(isnan(rt_bf16_to_f32(rt_f32_to_bf16(f_of(0x7f800001u)))));
    for (uint32_t h = 0; h < 65536; h++) {
        float f = rt_bf16_to_f32((uint16_t)h);
        if (isnan(f))
            continue;
        assert_int_equal(rt_f32_to_bf16(f), h);
    }
}

/* The ring's 16-bit add: widen, add in float, round back. */
static void test_adds(void **state)
{
    (void)state;
    uint16_t a[3] = {rt_f32_to_f16(1.0f), rt_f32_to_f16(65504.0f), rt_f32_to_f16(0x1p-24f)};
    uint16_t b[3] = {rt_f32_to_f16(0x1p-11f), rt_f32_to_f16(32.0f), rt_f32_to_f16(0x1p-24f)};
    rt_f16_add(a, b, 3);
    assert_int_equal(a[0], 0x3c00); /* 1 + 2^-11: the tie goes to 1 */
    assert_int_equal(a[1], 0x7c00); /* past the largest: infinity */
    assert_int_equal(a[2], 0x0002);
    uint16_t c[1] = {rt_f32_to_bf16(3.0f)}, d[1] = {rt_f32_to_bf16(0.5f)};
    rt_bf16_add(c, d, 1);
    assert_true(rt_bf16_to_f32(c[0]) == 3.5f);
}

/* The array conversions and adds (F16C where the CPU has it) give the bits
 * of the scalar code: every fp16 value widened, a million random floats and
 * the special ones (NaN payloads, infinities, subnormals, ties) rounded,
 * and random sums; lengths not a multiple of the vector width. */
static void test_arrays_match_scalar(void **state)
{
    (void)state;
    enum { N = 65536 + 5 };
    static uint16_t h[N], h2[N], s16[N];
    static float f[N], g[N];
    for (uint32_t i = 0; i < N; i++)
        h[i] = (uint16_t)(i * 40503u);
    rt_f16_to_f32_n(f, h, N);
    for (uint32_t i = 0; i < N; i++) {
        float want = rt_f16_to_f32(h[i]);
        if (u_of(f[i]) != u_of(want))
            fail_msg("widen %#06x: array %a, scalar %a", h[i], (double)f[i], (double)want);
    }
    const uint32_t special[] = {0x7f800001u, 0xffc00123u, 0x7fbfffffu, 0x7f800000u, 0xff800000u,
                                0x00000001u, 0x80000001u, 0x33000000u, 0x33000001u, 0x477ff000u,
                                0x477fefffu, 0x38800000u, 0x387fffffu, 0x3f801000u, 0x3f803000u};
    rt_rng rng;
    rt_rng_seed(&rng, 3, 0);
    for (int rep = 0; rep < 16; rep++) {
        for (uint32_t i = 0; i < N; i++) {
            uint32_t u = (uint32_t)rt_rng_next(&rng);
            if (i % 3)
                u = (u & 0x807fffffu) | ((uint32_t)(95 + rt_rng_below(&rng, 50)) << 23);
            g[i] = f_of(i < sizeof special / sizeof special[0] ? special[i] : u);
        }
        rt_f32_to_f16_n(h2, g, N - (size_t)rep);
        for (uint32_t i = 0; i < N - (uint32_t)rep; i++)
            if (h2[i] != rt_f32_to_f16(g[i]))
                fail_msg("round %a: array %#06x, scalar %#06x", (double)g[i], h2[i],
                         rt_f32_to_f16(g[i]));
        rt_f32_to_bf16_n(h2, g, N - (size_t)rep);
        for (uint32_t i = 0; i < N - (uint32_t)rep; i++)
            if (h2[i] != rt_f32_to_bf16(g[i]))
                fail_msg("bf16 round %a: array %#06x, scalar %#06x", (double)g[i], h2[i],
                         rt_f32_to_bf16(g[i]));
    }
    /* every bfloat16 widened */
    for (uint32_t i = 0; i < N; i++)
        h[i] = (uint16_t)(i * 40503u);
    rt_bf16_to_f32_n(f, h, N);
    for (uint32_t i = 0; i < N; i++)
        if (u_of(f[i]) != u_of(rt_bf16_to_f32(h[i])))
            fail_msg("bf16 widen %#06x: array %a", h[i], (double)f[i]);
    /* sums: random fp16 values, some overflowing, some NaN */
    for (uint32_t i = 0; i < N; i++) {
        h[i] = (uint16_t)rt_rng_next(&rng);
        s16[i] = (uint16_t)rt_rng_next(&rng);
        h2[i] = rt_f32_to_f16(rt_f16_to_f32(h[i]) + rt_f16_to_f32(s16[i]));
    }
    rt_f16_add(h, s16, N);
    for (uint32_t i = 0; i < N; i++)
        if (h[i] != h2[i])
            fail_msg("add %u: array %#06x, scalar %#06x", i, h[i], h2[i]);
    /* bfloat16 sums: random bits (NaNs, infinities, subnormals, overflow) */
    for (uint32_t i = 0; i < N; i++) {
        h[i] = (uint16_t)rt_rng_next(&rng);
        s16[i] = (uint16_t)rt_rng_next(&rng);
        h2[i] = rt_f32_to_bf16(rt_bf16_to_f32(h[i]) + rt_bf16_to_f32(s16[i]));
    }
    rt_bf16_add(h, s16, N - 3);
    for (uint32_t i = 0; i < N - 3; i++)
        if (h[i] != h2[i])
            fail_msg("bf16 add %u: array %#06x, scalar %#06x", i, h[i], h2[i]);
}

static void feedback(enum rt_compress_kind kind, double ulp_rel)
{
    enum { N = 257, STEPS = 2000 };
    struct rt_compress z;
    assert_int_equal(rt_compress_init(&z, kind, N + 3, N), 0);
    rt_rng rng;
    rt_rng_seed(&rng, 11, 0);
    float x[N], got[N + 3];
    static double sum_x[N], sum_sent[N], sum_plain[N];
    memset(sum_x, 0, sizeof sum_x);
    memset(sum_sent, 0, sizeof sum_sent);
    memset(sum_plain, 0, sizeof sum_plain);
    double scale = 1e-3;
    /* a value that always rounds the same way, losing the same each step:
     * below half the least fp16 subnormal; just above a bf16 value */
    float steady = kind == RT_COMPRESS_FP16 ? 0x1p-26f : 0x1p-10f * (1.0f + 0x1p-9f);
    for (int s = 0; s < STEPS; s++) {
        for (int i = 0; i < N; i++) {
            x[i] = i % 3 ? (float)(scale * (rt_rng_uniform(&rng) - 0.5)) : steady;
            sum_x[i] += x[i];
            float plain = kind == RT_COMPRESS_FP16 ? rt_f16_to_f32(rt_f32_to_f16(x[i]))
                                                   : rt_bf16_to_f32(rt_f32_to_bf16(x[i]));
            sum_plain[i] += plain;
        }
        rt_compress_put(&z, x, 0, N);
        rt_compress_get(&z, got, 0, N);
        for (int i = 0; i < N; i++)
            sum_sent[i] += got[i];
        rt_compress_commit(&z);
    }
    /* sum sent = sum true - the error carried now: within one rounding of
     * a value of the gradients' size (and the float adds of x + err) */
    double bound = scale * ulp_rel + STEPS * scale * 0x1p-23;
    double worst = 0.0, worst_plain = 0.0;
    for (int i = 0; i < N; i++) {
        worst = fmax(worst, fabs(sum_sent[i] - sum_x[i]));
        worst_plain = fmax(worst_plain, fabs(sum_plain[i] - sum_x[i]));
    }
    printf("%s: |sum sent - sum true| <= %.3g with error feedback (bound %.3g), %.3g without\n",
           rt_compress_name(kind), worst, bound, worst_plain);
    assert_true(worst <= bound);
    assert_true(worst_plain > 10.0 * bound);
    /* a step that failed does not commit: the carried error stays */
    float before = z.err[5];
    rt_compress_put(&z, x, 0, N);
    assert_true(u_of(z.err[5]) == u_of(before));
    rt_compress_reset(&z);
    assert_true(z.err[5] == 0.0f);
    rt_compress_free(&z);
}

static void test_error_feedback_fp16(void **state)
{
    (void)state;
    feedback(RT_COMPRESS_FP16, 0x1p-10);
}

static void test_error_feedback_bf16(void **state)
{
    (void)state;
    feedback(RT_COMPRESS_BF16, 0x1p-7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_f16_cases),          cmocka_unit_test(test_f16_round_trip),
        cmocka_unit_test(test_f16_against_compiler), cmocka_unit_test(test_bf16),
        cmocka_unit_test(test_adds),               cmocka_unit_test(test_arrays_match_scalar),
        cmocka_unit_test(test_error_feedback_fp16),
        cmocka_unit_test(test_error_feedback_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
