/*
 * f32 <-> f16 and f32 <-> bf16 conversions. The f16 narrowing is checked bit
 * for bit against the processor's F16C conversion (round to nearest even) over
 * every exponent and every rounding-relevant mantissa pattern; bf16 against
 * known answers and a reference written from the definition of the rounding.
 */
#include "common/half.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>

#if defined(__x86_64__)
#include <immintrin.h>
#define HAVE_F16C_REFERENCE 1

/* Only these two functions use F16C; everything else in this file is baseline x86-64. */
__attribute__((target("f16c"))) static uint16_t hw_f32_to_f16(float f)
{
    return (uint16_t)_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT);
}

__attribute__((target("f16c"))) static float hw_f16_to_f32(uint16_t h)
{
    return _cvtsh_ss(h);
}

static int have_f16c(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("f16c");
}
#else
#define HAVE_F16C_REFERENCE 0
#endif

static int f16_is_nan(uint16_t h)
{
    return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0;
}

static int bf16_is_nan(uint16_t h)
{
    return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0;
}

/* ---- f16: known answers (no hardware needed) ---- */

Test(half, f16_known_answers)
{
    static const struct {
        uint32_t f32;
        uint16_t f16;
    } cases[] = {
        {0x00000000, 0x0000}, /* +0 */
        {0x80000000, 0x8000}, /* -0 */
        {0x3f800000, 0x3c00}, /* 1 */
        {0xbf800000, 0xbc00}, /* -1 */
        {0x40490fdb, 0x4248}, /* pi */
        {0x477fe000, 0x7bff}, /* 65504, the largest f16 */
        {0x477fefff, 0x7bff}, /* just below 65520 */
        {0x477ff000, 0x7c00}, /* 65520: the tie rounds to even, which is inf */
        {0x7f7fffff, 0x7c00}, /* FLT_MAX overflows */
        {0x7f800000, 0x7c00}, /* +inf */
        {0xff800000, 0xfc00}, /* -inf */
        {0x38800000, 0x0400}, /* 2^-14, the smallest normal */
        {0x387fc000, 0x03ff}, /* the largest subnormal */
        {0x387fe000, 0x0400}, /* halfway to 2^-14: tie to even rounds up into the normals */
        {0x33800000, 0x0001}, /* 2^-24, the smallest subnormal */
        {0x33000000, 0x0000}, /* 2^-25: tie between 0 and 2^-24, even is 0 */
        {0x33000001, 0x0001}, /* just above the tie */
        {0x33c00000, 0x0002}, /* 1.5 * 2^-24: tie, even is 2 */
        {0x00000001, 0x0000}, /* the smallest f32 subnormal */
        {0x3f801000, 0x3c00}, /* 1 + 2^-11: tie, even is 1 */
        {0x3f803000, 0x3c02}, /* 1 + 3 * 2^-11: tie, even is 1 + 2^-9 */
        {0x3f801001, 0x3c01}, /* just above the tie */
        {0x7fc00000, 0x7e00}, /* quiet NaN */
        {0xffc00000, 0xfe00}, /* negative quiet NaN */
        {0x7f800001, 0x7e00}, /* signaling NaN is quieted; low payload bits lost */
        {0x7fa00000, 0x7f00}, /* payload top bits kept */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint16_t got = zc_f32_to_f16(zc_f32_from_bits(cases[i].f32));
        cr_assert_eq(got, cases[i].f16, "f32 %08x -> %04x, expected %04x", cases[i].f32, got,
                     cases[i].f16);
    }
}

Test(half, f16_to_f32_known_answers)
{
    cr_assert_eq(zc_f32_bits(zc_f16_to_f32(0x3c00)), 0x3f800000u);
    cr_assert_eq(zc_f32_bits(zc_f16_to_f32(0x7bff)), 0x477fe000u);
    cr_assert_eq(zc_f32_bits(zc_f16_to_f32(0x0001)), 0x33800000u);
    cr_assert_eq(zc_f32_bits(zc_f16_to_f32(0x03ff)), 0x387fc000u);
    cr_assert_eq(zc_f32_bits(zc_f16_to_f32(0x8001)), 0xb3800000u);
    cr_assert_eq(zc_f32_bits(zc_f16_to_f32(0x8000)), 0x80000000u);
    cr_assert_eq(zc_f32_bits(zc_f16_to_f32(0x7c00)), 0x7f800000u);
    cr_assert_eq(zc_f32_bits(zc_f16_to_f32(0xfc00)), 0xff800000u);
    cr_assert(isnan(zc_f16_to_f32(0x7c01)));
    cr_assert(isnan(zc_f16_to_f32(0xfe00)));
    cr_assert(signbit(zc_f16_to_f32(0xfe00)));
}

Test(half, f16_all_halves_round_trip)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = zc_f16_to_f32((uint16_t)h);
        uint16_t back = zc_f32_to_f16(f);
        if (f16_is_nan((uint16_t)h)) {
            cr_assert(isnan(f), "f16 %04x widened to a non-NaN %08x", h, zc_f32_bits(f));
            cr_assert(f16_is_nan(back), "f16 NaN %04x came back as %04x", h, back);
            cr_assert_eq(back & 0x8000u, h & 0x8000u, "f16 NaN %04x lost its sign", h);
            cr_assert(back & 0x0200u, "f16 NaN %04x came back signaling (%04x)", h, back);
        } else {
            cr_assert_eq(back, h, "f16 %04x -> %08x -> %04x", h, zc_f32_bits(f), back);
            /* The widening is exact: the value is the one the format defines. */
            unsigned e = (h >> 10) & 0x1f, m = h & 0x3ff;
            double want = e == 0x1f ? INFINITY
                          : e == 0  ? ldexp(m, -24)
                                    : ldexp(1024 + m, (int)e - 25);
            if (h & 0x8000)
                want = -want;
            cr_assert((double)f == want && !signbit(f) == !signbit(want), "f16 %04x -> %.17g", h,
                      (double)f);
        }
    }
}

/* ---- f16 against F16C ---- */

#if HAVE_F16C_REFERENCE
static void require_f16c(void)
{
    if (!have_f16c())
        cr_skip_test("this processor has no F16C: no hardware reference");
}

/* Compares one f32 bit pattern; returns nonzero on mismatch (the caller asserts, once). */
static inline int f16_mismatch(uint32_t u, uint16_t *got_p, uint16_t *want_p)
{
    float f = zc_f32_from_bits(u);
    *got_p = zc_f32_to_f16(f);
    *want_p = hw_f32_to_f16(f);
    return *got_p != *want_p;
}

#define CHECK_F16(u)                                                                               \
    do {                                                                                           \
        uint16_t got_, want_;                                                                      \
        if (f16_mismatch((u), &got_, &want_))                                                      \
            cr_assert_fail("f32 %08x -> %04x, F16C gives %04x", (unsigned)(u), got_, want_);       \
        checked++;                                                                                 \
    } while (0)

Test(half, f16_matches_f16c_every_exponent)
{
    /*
     * Every sign and exponent (zeros, f32 subnormals, inf and NaN included) with the low
     * 14 mantissa bits taking all 2^14 values: that is the f16 least significant bit (bit
     * 13), the round bit (12) and every sticky bit, so every tie and near-tie of the
     * normal range. The 9 higher mantissa bits take patterns that exercise the carry
     * out of the mantissa (all ones) and the plain cases.
     */
    static const uint32_t high9[] = {0x000, 0x001, 0x0ff, 0x100, 0x155, 0x0aa, 0x1fe, 0x1ff};
    uint64_t checked = 0;

    require_f16c();
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t exp = 0; exp < 256; exp++)
            for (size_t h = 0; h < sizeof(high9) / sizeof(high9[0]); h++)
                for (uint32_t low = 0; low < (1u << 14); low++)
                    CHECK_F16(sign << 31 | exp << 23 | high9[h] << 14 | low);
    cr_assert_eq(checked, UINT64_C(2) * 256 * 8 * 16384);
}

Test(half, f16_matches_f16c_subnormal_outputs)
{
    /*
     * Where the result is an f16 subnormal (f32 exponents 101..113) the rounding point
     * moves up to bit 23. Every value of mantissa bits 10..22 (all round bits and
     * their neighbours), with bits 0..9 as sticky patterns (none, lowest, highest,
     * all set).
     */
    static const uint32_t low10[] = {0x000, 0x001, 0x200, 0x201, 0x1ff, 0x3ff};
    uint64_t checked = 0;

    require_f16c();
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t exp = 101; exp <= 113; exp++)
            for (uint32_t high = 0; high < (1u << 13); high++)
                for (size_t l = 0; l < sizeof(low10) / sizeof(low10[0]); l++)
                    CHECK_F16(sign << 31 | exp << 23 | high << 10 | low10[l]);
    cr_assert_eq(checked, UINT64_C(2) * 13 * 8192 * 6);
}

Test(half, f16_matches_f16c_strided_sweep)
{
    /* All of f32 with a prime stride: every exponent, mantissas with no structure. */
    uint64_t checked = 0;

    require_f16c();
    for (uint64_t u = 0; u <= UINT32_MAX; u += 251)
        CHECK_F16((uint32_t)u);
    cr_assert_eq(checked, (UINT64_C(1) << 32) / 251 + 1);
}

Test(half, f16_widening_matches_f16c)
{
    require_f16c();
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float got = zc_f16_to_f32((uint16_t)h), want = hw_f16_to_f32((uint16_t)h);
        if (f16_is_nan((uint16_t)h))
            cr_assert(isnan(got) && isnan(want) && !signbit(got) == !signbit(want), "f16 %04x", h);
        else
            cr_assert_eq(zc_f32_bits(got), zc_f32_bits(want), "f16 %04x -> %08x, F16C %08x", h,
                         zc_f32_bits(got), zc_f32_bits(want));
    }
}
#endif

/* ---- bf16 ---- */

/* The definition: keep the top 16 bits, round on the low 16, ties to an even result. */
static uint16_t ref_f32_to_bf16(uint32_t u)
{
    uint32_t keep = u >> 16, rest = u & 0xffffu;
    if (rest > 0x8000u || (rest == 0x8000u && (keep & 1u)))
        keep++;
    return (uint16_t)keep;
}

Test(half, bf16_known_answers)
{
    static const struct {
        uint32_t f32;
        uint16_t bf16;
    } cases[] = {
        {0x00000000, 0x0000}, {0x80000000, 0x8000}, /* zeros */
        {0x3f800000, 0x3f80},                       /* 1 */
        {0x3f808000, 0x3f80},                       /* tie, even is down */
        {0x3f818000, 0x3f82},                       /* tie, even is up */
        {0x3f808001, 0x3f81},                       /* just above the tie */
        {0x3f807fff, 0x3f80},                       /* just below the tie */
        {0xbf818000, 0xbf82},                       /* negative tie */
        {0x7f7f7fff, 0x7f7f},                       /* largest that stays finite */
        {0x7f7f8000, 0x7f80},                       /* tie at the top rounds to inf */
        {0x7f7fffff, 0x7f80},                       /* FLT_MAX overflows */
        {0xff7fffff, 0xff80},                       /* -FLT_MAX overflows */
        {0x7f800000, 0x7f80},                       /* +inf */
        {0xff800000, 0xff80},                       /* -inf */
        {0x00000001, 0x0000},                       /* tiny subnormal */
        {0x00008001, 0x0001},                       /* subnormal, above the tie */
        {0x7fc00000, 0x7fc0},                       /* quiet NaN */
        {0xffc00000, 0xffc0},                       /* negative quiet NaN */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint16_t got = zc_f32_to_bf16(zc_f32_from_bits(cases[i].f32));
        cr_assert_eq(got, cases[i].bf16, "f32 %08x -> %04x, expected %04x", cases[i].f32, got,
                     cases[i].bf16);
    }
}

Test(half, bf16_nan_stays_nan)
{
    /* NaNs whose payload lies only in the low 16 bits would round to inf by plain rounding. */
    static const uint32_t nans[] = {0x7f800001, 0x7f808000, 0x7f80ffff, 0x7fffffff,
                                    0xff800001, 0xffffffff, 0x7fc00001, 0x7f810000};
    for (size_t i = 0; i < sizeof(nans) / sizeof(nans[0]); i++) {
        uint16_t got = zc_f32_to_bf16(zc_f32_from_bits(nans[i]));
        cr_assert(bf16_is_nan(got), "NaN %08x -> %04x", nans[i], got);
        cr_assert(got & 0x0040u, "NaN %08x -> %04x is not quiet", nans[i], got);
        cr_assert_eq(got & 0x8000u, (nans[i] >> 16) & 0x8000u, "NaN %08x lost its sign", nans[i]);
        cr_assert(isnan(zc_bf16_to_f32(got)));
    }
}

Test(half, bf16_all_patterns_round_trip)
{
    for (uint32_t h = 0; h <= 0xffff; h++) {
        float f = zc_bf16_to_f32((uint16_t)h);
        cr_assert_eq(zc_f32_bits(f), h << 16, "bf16 %04x widens to %08x", h, zc_f32_bits(f));
        uint16_t back = zc_f32_to_bf16(f);
        if (bf16_is_nan((uint16_t)h)) {
            cr_assert(bf16_is_nan(back), "bf16 NaN %04x came back as %04x", h, back);
            cr_assert_eq(back, h | 0x0040u, "bf16 NaN %04x: payload or sign changed (%04x)", h,
                         back);
        } else {
            cr_assert_eq(back, h, "bf16 %04x -> %04x", h, back);
        }
    }
}

Test(half, bf16_matches_definition_sweep)
{
    /* Every sign and exponent with the low 17 bits exhaustive (the bf16 lsb and all
     * rounding bits), high mantissa patterns for the carries, and the NaNs excluded. */
    static const uint32_t high6[] = {0x00, 0x01, 0x2a, 0x3e, 0x3f};
    for (uint32_t sign = 0; sign < 2; sign++) {
        for (uint32_t exp = 0; exp < 256; exp++) {
            for (size_t h = 0; h < sizeof(high6) / sizeof(high6[0]); h++) {
                for (uint32_t low = 0; low < (1u << 17); low += (exp == 255 ? 1 : 3)) {
                    uint32_t u = sign << 31 | exp << 23 | high6[h] << 17 | low;
                    if ((u & 0x7fffffffu) > 0x7f800000u)
                        continue;
                    uint16_t got = zc_f32_to_bf16(zc_f32_from_bits(u));
                    uint16_t want = ref_f32_to_bf16(u);
                    if (got != want)
                        cr_assert_fail("f32 %08x -> %04x, expected %04x", u, got, want);
                }
            }
        }
    }
}

Test(half, bf16_is_nearest)
{
    /* Independent of bit tricks: for finite results, no bf16 value is closer to f. */
    uint64_t state = 12345;
    for (int i = 0; i < 200000; i++) {
        state = state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
        uint32_t u = (uint32_t)(state >> 32);
        float f = zc_f32_from_bits(u);
        if (!isfinite(f))
            continue;
        uint16_t b = zc_f32_to_bf16(f);
        double r = zc_bf16_to_f32(b);
        if (isinf(r)) {
            /* Overflow only from at least the midpoint between the largest bf16 and 2^128. */
            cr_assert_geq(fabs((double)f), ldexp(255.5, 120), "f32 %08x overflowed", u);
            continue;
        }
        double err = fabs((double)f - r);
        uint16_t neighbours[2] = {(uint16_t)(b + 1), (uint16_t)(b - 1)};
        for (int k = 0; k < 2; k++) {
            double n = zc_bf16_to_f32(neighbours[k]);
            if (isnan(n) || ((neighbours[k] ^ b) & 0x8000u))
                continue;
            double other = fabs((double)f - n);
            cr_assert_leq(err, other, "f32 %08x -> %04x, but %04x is closer", u, b, neighbours[k]);
            if (err == other) /* a tie: the even one wins */
                cr_assert_eq(b & 1u, 0, "f32 %08x: tie went to the odd %04x", u, b);
        }
    }
}
