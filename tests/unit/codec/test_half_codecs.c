/*
 * The fp16 and bf16 codecs (codec/fp16) and the none codec's reduce: exact
 * round trips over every 16-bit pattern, round-to-nearest-even ties, overflow
 * and NaN as a cast, accumulation, reduce (correctly rounded, aliasing, commuting),
 * scalar against AVX-512 byte for byte, and hostile payloads.
 */
#include "codec_test.h"

#include "codec/codec.h"
#include "common/half_kernels.h"
#include "common/cpu.h"
#include "common/half.h"

#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define HDR ZC_PAYLOAD_HEADER_BYTES
#define NPATTERNS 65536
#define GUARD 32
#define GUARD_BYTE 0xA5

static const zc_codec_id_t half_codecs[] = {ZC_CODEC_FP16, ZC_CODEC_BF16};

/* ------------------------------------------------------------ test helpers */

static zc_dtype_t native_dtype(zc_codec_id_t id)
{
    return id == ZC_CODEC_FP16 ? ZC_DTYPE_F16 : ZC_DTYPE_BF16;
}

static float widen(zc_codec_id_t id, uint16_t h)
{
    return id == ZC_CODEC_FP16 ? zc_f16_to_f32(h) : zc_bf16_to_f32(h);
}

static uint16_t narrow(zc_codec_id_t id, float f)
{
    return id == ZC_CODEC_FP16 ? zc_f32_to_f16(f) : zc_f32_to_bf16(f);
}

/* A finite value the cast takes to an infinity: the codec sends it out of band, 0 in the body. */
static int spills(zc_codec_id_t id, float f)
{
    return isfinite(f) && isinf(widen(id, narrow(id, f)));
}

static size_t section_cap(size_t n);

/* The largest section: its entries' values and gaps of at most 10 bytes, or n / 7 + one each. */
static size_t section_bound(size_t n)
{
    size_t e = section_cap(n), gaps = e + n / 7;
    return 8 + 4 * e + (10 * e < gaps ? 10 * e : gaps);
}

/*
 * Entries an out-of-band section holds for @p n values (codec/oob.h, restated):
 * past them, values that spill stay in the body, where the cast makes them infinities.
 */
static size_t section_cap(size_t n)
{
    return n < 16 + n / 1024 ? n : 16 + n / 1024;
}

/*
 * What the body holds for @p f: 0 where the value goes out of band (while
 * *@p left, the section's room, lasts), else the cast.
 */
static uint16_t narrow_body(zc_codec_id_t id, float f, size_t *left)
{
    if (spills(id, f) && *left > 0) {
        (*left)--;
        return 0;
    }
    return narrow(id, f);
}

/*
 * Replaces the values of @p x and @p y from which on a section past its room
 * would be needed (a value of either, or their sum in the format, spilling) by
 * 1: tests of the rounding stay within the cap, which tests of their own cover.
 */
static void within_cap(zc_codec_id_t id, float *x, float *y, size_t n)
{
    size_t left = section_cap(n);
    for (size_t i = 0; i < n; i++) {
        const float sum = y ? widen(id, narrow(id, x[i])) + widen(id, narrow(id, y[i])) : 0.0f;
        if (!spills(id, x[i]) && !(y && (spills(id, y[i]) || spills(id, sum))))
            continue;
        if (left > 0) {
            left--;
            continue;
        }
        x[i] = 1.0f;
        if (y)
            y[i] = 1.0f;
    }
}

static int nan16(zc_codec_id_t id, uint16_t h)
{
    return id == ZC_CODEC_FP16 ? (h & 0x7fffu) > 0x7c00u : (h & 0x7fffu) > 0x7f80u;
}

static uint16_t quiet_bit(zc_codec_id_t id)
{
    return id == ZC_CODEC_FP16 ? 0x0200u : 0x0040u;
}

/* Bytes of the out-of-band section (docs/codecs.md) after the header, 0 without one. */
static size_t section_bytes(const payload_t *pl)
{
    if (!(pl->buf[4] & 1))
        return 0;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | pl->buf[HDR + i];
    size_t at = HDR + 8 + 4 * (size_t)n;
    for (uint64_t j = 0; j < n; j++)
        while (pl->buf[at++] & 0x80)
            ;
    return at - HDR;
}

static uint16_t body16(const payload_t *pl, size_t i)
{
    size_t at = HDR + section_bytes(pl) + 2 * i;
    return (uint16_t)(pl->buf[at] | pl->buf[at + 1] << 8);
}

/* Value @p i of a wide fp16 body (f32 values, no section). */
static float body32(const payload_t *pl, size_t i)
{
    size_t at = HDR + 4 * i;
    return zc_f32_from_bits((uint32_t)pl->buf[at] | (uint32_t)pl->buf[at + 1] << 8 |
                            (uint32_t)pl->buf[at + 2] << 16 | (uint32_t)pl->buf[at + 3] << 24);
}

static size_t section_cap(size_t n);
static uint16_t narrow_body(zc_codec_id_t id, float f, size_t *left);
static uint32_t bits_of(float f);

/*
 * Checks the payload of @p n values @p x (exact in f32): a half body holding
 * the cast, 0 for the values that spill while the section has room; past
 * it, bf16 holds the cast (an infinity) and fp16 is wide: every value as
 * f32, the cast's rounding where it is in range and exact where it spills.
 */
static void check_body(zc_codec_id_t id, const payload_t *pl, const float *x, size_t n)
{
    size_t spilling = 0;
    for (size_t i = 0; i < n; i++)
        spilling += spills(id, x[i]);
    const int wide = id == ZC_CODEC_FP16 && spilling > section_cap(n);
    cr_assert_eq(pl->len == HDR + 4 * n, wide, "%s: %zu values spill, payload of %zu bytes",
                 zc_codec_name(id), spilling, pl->len);
    size_t left = section_cap(n);
    for (size_t i = 0; i < n; i++) {
        if (wide) {
            float want = spills(id, x[i]) ? x[i] : widen(id, narrow(id, x[i]));
            cr_assert(isnan(want) ? isnan(body32(pl, i)) : body32(pl, i) == want,
                      "%s %08x: wide body holds %a", zc_codec_name(id), bits_of(x[i]),
                      body32(pl, i));
        } else {
            uint16_t want = narrow_body(id, x[i], &left);
            cr_assert_eq(body16(pl, i), want, "%s %08x: %04x, want %04x", zc_codec_name(id),
                         bits_of(x[i]), body16(pl, i), want);
        }
    }
}

static uint32_t bits_of(float f)
{
    return zc_f32_bits(f);
}

/* A payload whose body is exactly @p h: the codec copies its own format bit for bit. */
static payload_t payload_of(zc_codec_id_t id, const uint16_t *h, size_t n)
{
    zc_codec_params_t p = params_of(id);
    payload_t pl = encode_ok(&p, NULL, native_dtype(id), h, n);
    cr_assert_eq(pl.len, HDR + 2 * n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(body16(&pl, i), h[i], "%s: pattern %04x not copied exactly", zc_codec_name(id),
                     h[i]);
    return pl;
}

/* The value after finite pattern @p a, as a double: past the largest finite one, 2^(emax+1). */
static double next_value(zc_codec_id_t id, uint16_t a)
{
    const uint16_t inf = id == ZC_CODEC_FP16 ? 0x7c00u : 0x7f80u;
    if ((uint16_t)((a & 0x7fffu) + 1) == inf)
        return copysign(ldexp(1.0, id == ZC_CODEC_FP16 ? 16 : 128), widen(id, a));
    return widen(id, (uint16_t)(a + 1));
}

/* The midpoint between finite pattern @p a and the next: exact in f32 (12 or 9 bits). */
static float midpoint(zc_codec_id_t id, uint16_t a)
{
    double mid = ((double)widen(id, a) + next_value(id, a)) / 2;
    cr_assert_eq((double)(float)mid, mid, "midpoint after %04x not exact in f32", a);
    return (float)mid;
}

static uint16_t *all_patterns(void)
{
    uint16_t *h = xmalloc(NPATTERNS * sizeof(uint16_t));
    for (size_t i = 0; i < NPATTERNS; i++)
        h[i] = (uint16_t)i;
    return h;
}

/*
 * Inputs that reach every branch of the conversions: random bit patterns
 * (NaNs, infinities, subnormals of both widths), Gaussians over many scales,
 * exact halfway points of the half format and their neighbours.
 */
static void fill_hard(zc_codec_id_t id, float *x, size_t n, uint64_t seed)
{
    test_rng_t r = {seed};
    for (size_t i = 0; i < n; i++) {
        uint64_t z = test_rng_next(&r);
        uint16_t h = (uint16_t)(z >> 16);
        switch (z & 7) {
        case 0:
        case 1: x[i] = zc_f32_from_bits((uint32_t)(z >> 32)); break;
        case 2:
        case 3: x[i] = (float)(test_rng_gauss(&r) * ldexp(1.0, (int)(z >> 40 & 63) - 40)); break;
        case 4: x[i] = widen(id, h); break;
        default: {
            /* the midpoint between h and the next pattern, exactly or one f32 ulp off */
            uint16_t a = h & 0x7fffu;
            if (nan16(id, a) || a >= (id == ZC_CODEC_FP16 ? 0x7c00u : 0x7f80u))
                a = 0x1234;
            float m = midpoint(id, a);
            int off = (int)(z >> 8 & 3) - 1; /* -1, 0, +1, +2 (= 0) */
            if (off == -1)
                m = nextafterf(m, 0.0f);
            else if (off == 1)
                m = nextafterf(m, INFINITY);
            x[i] = h & 0x8000u ? -m : m;
        }
        }
    }
}

/*
 * @p s (a double) rounded to nearest even in the codec's format, by scaling
 * to an integer and nearbyint(): independent of the code under test.
 */
static double round_ref(zc_codec_id_t id, double s)
{
    const int p = id == ZC_CODEC_FP16 ? 11 : 8;
    const int emin = id == ZC_CODEC_FP16 ? -14 : -126;
    const double max = id == ZC_CODEC_FP16 ? 65504.0 : 0x1.fep127;
    int e;

    if (s == 0 || !isfinite(s))
        return s;
    frexp(s, &e);
    int lead = e - 1 < emin ? emin : e - 1;
    double ulp = ldexp(1.0, lead - (p - 1));
    double r = nearbyint(s / ulp) * ulp;
    return fabs(r) > max ? copysign(INFINITY, s) : r;
}

/*
 * Property tests loop c over both codecs at every CPU level of this machine
 * (codec c % 2, level c / 2): each level has its own kernels.
 */
static int level_count(void)
{
    return (int)zc_cpu_detect() + 1;
}

static int use_level(int c)
{
    cr_assert_eq(zc_cpu_set_level((zc_cpu_level_t)(c / 2)), ZC_OK);
    return 1;
}

static int have_avx512(void)
{
    return zc_cpu_detect() >= ZC_CPU_AVX512;
}

/* ----------------------------------------------------------------- basics */

Test(half_codecs, caps_names_bound)
{
    static const char *const names[] = {"fp16", "bf16"};
    for (int c = 0; c < 2; c++) {
        zc_codec_id_t id = half_codecs[c], found;
        cr_assert_str_eq(zc_codec_name(id), names[c]);
        cr_assert_eq(zc_codec_find(names[c], &found), ZC_OK);
        cr_assert_eq(found, id);
        cr_assert_eq(zc_codec_caps(id), ZC_CODEC_CAP_STATELESS | ZC_CODEC_CAP_LINEAR,
                     "%s: round to nearest is neither unbiased nor lossless", names[c]);
        zc_codec_params_t p = params_of(id);
        cr_assert_eq(zc_codec_params_check(&p), ZC_OK);
        cr_assert_not(zc_codec_needs_state(&p));
        static const uint64_t counts[] = {0, 1, 2, 1000, 1u << 20};
        for (size_t i = 0; i < ZC_ARRAY_SIZE(counts); i++)
            cr_assert_eq(zc_codec_bound(&p, counts[i]),
                         HDR + (id == ZC_CODEC_FP16 ? 4 : 2) * counts[i] + section_bound(counts[i]),
                         "the body (fp16's wide form: f32) and the largest out-of-band section");
        /* no size_t holds the body of 2^63 values */
        cr_assert_eq(zc_codec_bound(&p, UINT64_C(1) << 63), 0);
        cr_assert_eq(zc_codec_bound(&p, SIZE_MAX / 2 + 1), 0);
    }
}

Test(half_codecs, empty)
{
    for (int c = 0; c < 2; c++) {
        zc_codec_params_t p = params_of(half_codecs[c]);
        uint8_t buf[HDR], out[HDR];
        size_t len = 0, rlen = 0;
        cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, NULL, 0, buf, HDR, &len), ZC_OK);
        cr_assert_eq(len, HDR);
        cr_assert_eq(zc_codec_decode_add(NULL, buf, len, NULL, 0), ZC_OK);
        cr_assert_eq(zc_codec_reduce(NULL, buf, len, buf, len, out, HDR, &rlen), ZC_OK);
        cr_assert_eq(rlen, HDR);
        cr_assert_eq(memcmp(out, buf, HDR), 0);
    }
}

/* ------------------------------------------------------ exact round trips */

/* Every pattern in the codec's own format is copied, and decodes to its exact value. */
Test(half_codecs, own_format_every_pattern)
{
    uint16_t *h = all_patterns();
    float *y = xmalloc(NPATTERNS * sizeof(float));

    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2];
        payload_t pl = payload_of(id, h, NPATTERNS);
        for (size_t i = 0; i < NPATTERNS; i++)
            y[i] = -0.0f; /* -0 + v is v for every v, -0 included */
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, y, NPATTERNS), ZC_OK);
        for (size_t i = 0; i < NPATTERNS; i++) {
            float want = widen(id, h[i]);
            if (nan16(id, h[i]))
                cr_assert(isnan(y[i]) && signbit(y[i]) == signbit(want), "%s %04zx: %a",
                          zc_codec_name(id), i, y[i]);
            else
                cr_assert_eq(bits_of(y[i]), bits_of(want), "%s %04zx: %a, want %a",
                             zc_codec_name(id), i, y[i], want);
        }
        payload_free(&pl);
    }
    free(y);
    free(h);
}

/*
 * Every value of the format, given as f32 (exactly), comes back as its own
 * pattern; NaNs keep sign and payload and gain the quiet bit.
 */
Test(half_codecs, f32_input_every_pattern)
{
    uint16_t *h = all_patterns();
    float *x = xmalloc(NPATTERNS * sizeof(float));

    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2];
        zc_codec_params_t p = params_of(id);
        for (size_t i = 0; i < NPATTERNS; i++)
            x[i] = widen(id, h[i]);
        payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, NPATTERNS);
        cr_assert_eq(pl.len, HDR + 2 * NPATTERNS);
        for (size_t i = 0; i < NPATTERNS; i++) {
            uint16_t want = nan16(id, h[i]) ? (uint16_t)(h[i] | quiet_bit(id)) : h[i];
            cr_assert_eq(body16(&pl, i), want, "%s %04zx: got %04x", zc_codec_name(id), i,
                         body16(&pl, i));
        }
        payload_free(&pl);
    }
    free(x);
    free(h);
}

/* f16 into bf16 and bf16 into fp16 go through f32: one rounding of the exact value. */
Test(half_codecs, cross_format_input)
{
    uint16_t *h = all_patterns();
    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2], other = half_codecs[1 - c % 2];
        zc_codec_params_t p = params_of(id);
        payload_t pl = encode_ok(&p, NULL, native_dtype(other), h, NPATTERNS);
        float *x = xmalloc(NPATTERNS * sizeof(float));
        for (size_t i = 0; i < NPATTERNS; i++)
            x[i] = widen(other, h[i]);
        check_body(id, &pl, x, NPATTERNS);
        free(x);
        payload_free(&pl);
    }
    free(h);
}

/* ------------------------------------------------- rounding as the cast */

/*
 * Every halfway point between two neighbouring finite patterns rounds to the
 * even one; one f32 ulp below goes down, one above goes up. The top tie of
 * f16 is 65520, which rounds to the even neighbour inf: from there up, finite
 * values go out of band and the body holds 0.
 */
Test(half_codecs, ties_to_even)
{
    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2];
        const uint16_t top = id == ZC_CODEC_FP16 ? 0x7bffu : 0x7f7fu;
        const size_t n = (size_t)top + 1;
        float *x = xmalloc(3 * n * 2 * sizeof(float));
        size_t k = 0;
        for (uint16_t a = 0; a <= top; a++) {
            float mid = midpoint(id, a);
            const float v[3] = {nextafterf(mid, 0.0f), mid, nextafterf(mid, INFINITY)};
            for (int j = 0; j < 3; j++) {
                x[k++] = v[j];
                x[k++] = -v[j];
            }
        }
        zc_codec_params_t p = params_of(id);
        payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, k);
        k = 0;
        for (uint16_t a = 0; a <= top; a++) {
            uint16_t even = a & 1 ? (uint16_t)(a + 1) : a;
            uint16_t want[3] = {a, even, (uint16_t)(a + 1)};
            for (int j = 0; j < 3; j++) {
                /* where the cast gives an infinity the finite value goes out of band */
                const int out = isinf(widen(id, want[j]));
                want[j] = out ? 0 : want[j];
                cr_assert_eq(body16(&pl, k), want[j], "%s %04x case %d: %04x", zc_codec_name(id), a,
                             j, body16(&pl, k));
                cr_assert_eq(body16(&pl, k + 1), out ? 0 : want[j] | 0x8000u,
                             "%s -%04x case %d: %04x", zc_codec_name(id), a, j, body16(&pl, k + 1));
                k += 2;
            }
        }
        payload_free(&pl);
        free(x);
    }
}

Test(half_codecs, known_answers)
{
    static const struct {
        zc_codec_id_t id;
        uint32_t in;
        uint16_t out;
    } cases[] = {
        {ZC_CODEC_FP16, 0x3f801000, 0x3c00}, /* 1 + 2^-11: tie, even is 1 */
        {ZC_CODEC_FP16, 0x3f803000, 0x3c02}, /* 1 + 3 * 2^-11: tie, even is 1 + 2^-9 */
        {ZC_CODEC_FP16, 0x477fefff, 0x7bff}, /* just below 65520 */
        /* 65520 and up overflow the cast: sent out of band, 0 in the body */
        {ZC_CODEC_FP16, 0x477ff000, 0x0000},
        {ZC_CODEC_FP16, 0xc77ff000, 0x0000}, /* -65520 */
        {ZC_CODEC_FP16, 0x49742400, 0x0000}, /* 1e6 */
        {ZC_CODEC_FP16, 0x7f7fffff, 0x0000}, /* FLT_MAX */
        {ZC_CODEC_FP16, 0x7f800000, 0x7c00}, /* an infinity stays in the body */
        {ZC_CODEC_FP16, 0x33000000, 0x0000}, /* 2^-25: tie between 0 and 2^-24 */
        {ZC_CODEC_FP16, 0x33c00000, 0x0002}, /* 1.5 * 2^-24: tie, even is 2 */
        {ZC_CODEC_FP16, 0x00000001, 0x0000}, /* f32 subnormal underflows */
        {ZC_CODEC_FP16, 0x80000001, 0x8000},
        {ZC_CODEC_FP16, 0x7f800001, 0x7e00}, /* signalling NaN comes out quiet */
        {ZC_CODEC_FP16, 0xffc00000, 0xfe00},
        {ZC_CODEC_FP16, 0x7fa02000, 0x7f01}, /* payload top bits kept */
        {ZC_CODEC_BF16, 0x3f808000, 0x3f80}, /* 1 + 2^-8: tie, even is 1 */
        {ZC_CODEC_BF16, 0x3f818000, 0x3f82},
        {ZC_CODEC_BF16, 0x3f808001, 0x3f81},
        {ZC_CODEC_BF16, 0x7f7f7fff, 0x7f7f}, /* just below the overflow tie */
        {ZC_CODEC_BF16, 0x7f7f8000, 0x0000}, /* tie, even is inf: out of band */
        {ZC_CODEC_BF16, 0x7f7fffff, 0x0000}, /* FLT_MAX */
        {ZC_CODEC_BF16, 0xff800000, 0xff80},
        {ZC_CODEC_BF16, 0x00008000, 0x0000}, /* subnormal tie: kept, not flushed */
        {ZC_CODEC_BF16, 0x00018000, 0x0002},
        {ZC_CODEC_BF16, 0x00010001, 0x0001},
        {ZC_CODEC_BF16, 0x807fffff, 0x8080}, /* largest subnormal rounds up to -2^-126 */
        {ZC_CODEC_BF16, 0x7f800001, 0x7fc0}, /* signalling NaN comes out quiet */
        {ZC_CODEC_BF16, 0xff812345, 0xffc1},
    };
    for (size_t i = 0; i < ZC_ARRAY_SIZE(cases); i++) {
        zc_codec_params_t p = params_of(cases[i].id);
        float x = zc_f32_from_bits(cases[i].in);
        payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, &x, 1);
        cr_assert_eq(body16(&pl, 0), cases[i].out, "%s %08x: %04x, want %04x",
                     zc_codec_name(cases[i].id), cases[i].in, body16(&pl, 0), cases[i].out);
        float y = 0;
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, &y, 1), ZC_OK);
        if (isnan(x))
            cr_assert(isnan(y), "NaN %08x decoded to %a", cases[i].in, y);
        else if (spills(cases[i].id, x))
            cr_assert_eq(y, x, "%08x decoded to %a", cases[i].in, y);
        else if ((cases[i].out & 0x7fffu) == (cases[i].id == ZC_CODEC_FP16 ? 0x7c00u : 0x7f80u))
            cr_assert(isinf(y) && signbit(y) == signbit(x), "%08x decoded to %a", cases[i].in, y);
        else
            cr_assert(isfinite(y), "%08x decoded to %a", cases[i].in, y);
        payload_free(&pl);
    }
}

/* On any f32 input the codec is the reference cast, NaN and overflow included. */
Test(half_codecs, same_as_cast)
{
    enum { N = 1 << 18 };
    float *x = xmalloc(N * sizeof(float));
    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2];
        fill_hard(id, x, N, 7 + c);
        zc_codec_params_t p = params_of(id);
        payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, N);
        check_body(id, &pl, x, N);
        /* and the decode is the widening of what was sent: NaN stays NaN, inf stays inf */
        float *y = zeros_f32(N);
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, y, N), ZC_OK);
        const int wide = pl.len == HDR + 4 * (size_t)N;
        size_t left = section_cap(N);
        for (size_t i = 0; i < N; i++) {
            if (isnan(x[i]))
                cr_assert(isnan(y[i]), "%s: NaN %08x decoded to %a", zc_codec_name(id),
                          bits_of(x[i]), y[i]);
            else if (wide)
                cr_assert_eq(y[i], body32(&pl, i));
            else if (spills(id, x[i]) && left > 0 && left--)
                cr_assert_eq(y[i], x[i], "%s: %08x sent out of band", zc_codec_name(id),
                             bits_of(x[i]));
            else
                cr_assert_eq(y[i], widen(id, body16(&pl, i)));
        }
        free(y);
        payload_free(&pl);
    }
    free(x);
}

/* Error never above half an ulp of the format (the RNE bound) for finite, in-range input. */
Test(half_codecs, error_bound)
{
    enum { N = 100000 };
    float *x = xmalloc(N * sizeof(float));
    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2];
        const int p = id == ZC_CODEC_FP16 ? 11 : 8;
        fill_gauss(x, N, 21 + c, 100.0);
        zc_codec_params_t params = params_of(id);
        payload_t pl = encode_ok(&params, NULL, ZC_DTYPE_F32, x, N);
        float *y = decode_ok(&pl, N);
        for (size_t i = 0; i < N; i++) {
            int e;
            frexp(x[i], &e);
            double half_ulp = ldexp(1.0, e - 1 - p);
            if (id == ZC_CODEC_FP16 && e - 1 < -14)
                half_ulp = ldexp(1.0, -25);
            cr_assert_leq(fabs((double)y[i] - x[i]), half_ulp, "%s: %a -> %a", zc_codec_name(id),
                          x[i], y[i]);
        }
        free(y);
        payload_free(&pl);
    }
    free(x);
}

/* ------------------------------------------------------------ decode_add */

Test(half_codecs, decode_add_accumulates)
{
    enum { N = 1031 };
    float x[N], start[N], acc[N];
    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2];
        fill_gauss(x, N, 31 + c, 1.0);
        fill_gauss(start, N, 41 + c, 10.0);
        memcpy(acc, start, sizeof(acc));
        zc_codec_params_t p = params_of(id);
        payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, N);
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, acc, N), ZC_OK);
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, acc, N), ZC_OK);
        for (int i = 0; i < N; i++) {
            float v = widen(id, body16(&pl, (size_t)i));
            float want = start[i] + v;
            want += v;
            cr_assert_eq(bits_of(acc[i]), bits_of(want), "%s at %d: %a want %a", zc_codec_name(id),
                         i, acc[i], want);
        }
        payload_free(&pl);
    }
}

/*
 * alpha = -1 (the error-feedback subtraction; the public API always adds):
 * through the ops table, -0 - v is exactly -v, and v then -v from zero is +0.
 */
Test(half_codecs, decode_subtracts_exactly)
{
    uint16_t *h = all_patterns();
    float *y = xmalloc(NPATTERNS * sizeof(float));
    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2];
        const zc_codec_ops_t *ops = zc_codec_ops(id);
        payload_t pl = payload_of(id, h, NPATTERNS);
        const uint8_t *body = pl.buf + HDR;
        for (size_t i = 0; i < NPATTERNS; i++)
            y[i] = 0.0f;
        cr_assert_eq(ops->decode_add(NULL, body, pl.len - HDR, y, NPATTERNS, -1.0f), ZC_OK);
        for (size_t i = 0; i < NPATTERNS; i++) {
            float v = widen(id, h[i]);
            if (isnan(v))
                cr_assert(isnan(y[i]));
            else
                cr_assert_eq(y[i], -v, "%s %04zx: %a", zc_codec_name(id), i, y[i]);
        }
        cr_assert_eq(ops->decode_add(NULL, body, pl.len - HDR, y, NPATTERNS, 1.0f), ZC_OK);
        for (size_t i = 0; i < NPATTERNS; i++) {
            float v = widen(id, h[i]);
            if (isfinite(v))
                cr_assert_eq(bits_of(y[i]), 0u, "%s %04zx: -v + v = %a", zc_codec_name(id), i,
                             y[i]);
            else
                cr_assert(isnan(y[i]), "%s %04zx: inf - inf = %a", zc_codec_name(id), i, y[i]);
        }
        payload_free(&pl);
    }
    free(y);
    free(h);
}

/* The body may sit at any byte offset. */
Test(half_codecs, unaligned_payloads)
{
    enum { N = 999 };
    float x[N];
    fill_gauss(x, N, 51, 3.0);
    static const zc_codec_id_t ids[] = {ZC_CODEC_NONE, ZC_CODEC_FP16, ZC_CODEC_BF16};
    for (size_t c = 0; c < ZC_ARRAY_SIZE(ids); c++) {
        zc_codec_params_t p = params_of(ids[c]);
        payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, N);
        float *want = decode_ok(&pl, N);
        for (size_t off = 1; off < 4; off++) {
            uint8_t *buf = xmalloc(pl.len + off);
            memcpy(buf + off, pl.buf, pl.len);
            float *y = zeros_f32(N);
            cr_assert_eq(zc_codec_decode_add(NULL, buf + off, pl.len, y, N), ZC_OK);
            cr_assert(same_bits_f32(y, want, N), "%s offset %zu", zc_codec_name(ids[c]), off);
            /* reduce from and into odd offsets */
            uint8_t *out = xmalloc(pl.len + off);
            size_t len = 0;
            cr_assert_eq(
                zc_codec_reduce(NULL, buf + off, pl.len, pl.buf, pl.len, out + off, pl.len, &len),
                ZC_OK);
            cr_assert_eq(len, pl.len);
            payload_t sum = {exact_copy(out + off, len), len};
            float *y2 = decode_ok(&sum, N);
            for (int i = 0; i < N; i++)
                cr_assert_eq(y2[i], 2 * want[i], "%s offset %zu at %d", zc_codec_name(ids[c]), off,
                             i);
            free(y2);
            payload_free(&sum);
            free(out);
            free(y);
            free(buf);
        }
        free(want);
        payload_free(&pl);
    }
}

/* ---------------------------------------------------------------- reduce */

/* reduce(a, b) is widen(a) + widen(b) in f32, rounded once: bytes of the reference. */
Test(half_codecs, reduce_is_rounded_sum)
{
    enum { N = 1 << 16 };
    float *xa = xmalloc(N * sizeof(float)), *xb = xmalloc(N * sizeof(float));
    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2];
        zc_codec_params_t p = params_of(id);
        fill_hard(id, xa, N, 61 + c);
        fill_hard(id, xb, N, 71 + c);
        within_cap(id, xa, xb, N);
        payload_t a = encode_ok(&p, NULL, ZC_DTYPE_F32, xa, N);
        payload_t b = encode_ok(&p, NULL, ZC_DTYPE_F32, xb, N);
        size_t cap = zc_codec_bound(&p, N), len = 0;
        uint8_t *out = xmalloc(cap);
        cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, out, cap, &len), ZC_OK);
        cr_assert_eq(memcmp(out, a.buf, 4), 0, "header is a's");
        cr_assert_eq(memcmp(out + 8, a.buf + 8, 8), 0, "header is a's");
        payload_t r = {out, len};
        for (size_t i = 0; i < N; i++) {
            uint16_t ha = body16(&a, i), hb = body16(&b, i), got = body16(&r, i);
            uint16_t want;
            if (nan16(id, ha))
                want = ha | quiet_bit(id);
            else if (nan16(id, hb))
                want = hb | quiet_bit(id);
            else
                want = spills(id, widen(id, ha) + widen(id, hb))
                           ? 0
                           : narrow(id, widen(id, ha) + widen(id, hb));
            cr_assert_eq(got, want, "%s %04x + %04x = %04x, want %04x", zc_codec_name(id), ha, hb,
                         got, want);
        }
        /* and the decode of the sum is the decode of both, rounded */
        float *ya = decode_ok(&a, N), *yb = decode_ok(&b, N), *yr = decode_ok(&r, N);
        for (size_t i = 0; i < N; i++) {
            float want = widen(id, narrow(id, ya[i] + yb[i]));
            /* a value or a sum past the format's range is exact, out of band */
            if (spills(id, ya[i] + yb[i]) || spills(id, ya[i]) || spills(id, yb[i]))
                want = ya[i] + yb[i];
            if (isnan(want))
                cr_assert(isnan(yr[i]));
            else /* decoded into +0, so -0 and +0 compare equal here; the bytes matched above */
                cr_assert_eq(yr[i], want);
        }
        free(ya);
        free(yb);
        free(yr);
        payload_free(&r);
        payload_free(&a);
        payload_free(&b);
    }
    free(xa);
    free(xb);
}

/*
 * The f32 sum rounded to the format is the exact sum correctly rounded (no
 * harm from the double rounding): every pattern a against 16 random partners,
 * against a reference that rounds the double sum by scaling.
 */
Test(half_codecs, reduce_correctly_rounded)
{
    uint16_t *ha = all_patterns(), *hb = xmalloc(NPATTERNS * sizeof(uint16_t));
    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2];
        test_rng_t rng = {81 + (uint64_t)c};
        payload_t a = payload_of(id, ha, NPATTERNS);
        for (int round = 0; round < 16; round++) {
            size_t left = section_cap(NPATTERNS);
            for (size_t i = 0; i < NPATTERNS; i++) {
                hb[i] = (uint16_t)test_rng_next(&rng);
                /* the section's room: sums past the format's range beyond it take partner 0 */
                if (spills(id, widen(id, ha[i]) + widen(id, hb[i])) && left-- == 0) {
                    hb[i] = 0;
                    left = 0;
                }
            }
            payload_t b = payload_of(id, hb, NPATTERNS);
            size_t len = 0;
            /* in place, into b, with room for the sums that go out of band */
            zc_codec_params_t p = params_of(id);
            size_t cap = zc_codec_bound(&p, NPATTERNS);
            uint8_t *big = xmalloc(cap);
            memcpy(big, b.buf, b.len);
            free(b.buf);
            b.buf = big;
            cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, b.buf, cap, &len),
                         ZC_OK);
            b.len = len;
            float *yb = decode_ok(&b, NPATTERNS);
            for (size_t i = 0; i < NPATTERNS; i++) {
                double s = (double)widen(id, ha[i]) + widen(id, hb[i]);
                double got = widen(id, body16(&b, i));
                if (isnan(s)) {
                    cr_assert(isnan(got));
                    continue;
                }
                double want = round_ref(id, s);
                if (isinf(want) && isfinite((float)s)) {
                    /* past the format's range: body 0, the f32 sum out of band */
                    cr_assert_eq(got, 0.0, "%s %04x + %04x", zc_codec_name(id), ha[i], hb[i]);
                    cr_assert_eq(yb[i], (float)s);
                    continue;
                }
                cr_assert(got == want && signbit(got) == signbit(want),
                          "%s %04x + %04x: %a, want %a (exact %a)", zc_codec_name(id), ha[i], hb[i],
                          got, want, s);
            }
            free(yb);
            payload_free(&b);
        }
        payload_free(&a);
    }
    free(hb);
    free(ha);
}

/*
 * NaN wins, inf + -inf is NaN, as f32 arithmetic; a sum past the format's
 * range but finite in f32 goes out of band, exact; past f32's, it is inf.
 */
Test(half_codecs, reduce_non_finite)
{
    enum { N = 7 };
    const float xa[N] = {NAN, INFINITY, INFINITY, -INFINITY, 1.0f, 65504.0f, 3e38f};
    const float xb[N] = {1.0f, -INFINITY, 1.0f, -1.0f, -NAN, 65504.0f, 3e38f};
    for (int c = 0; c < 2 * level_count() && use_level(c); c++) {
        zc_codec_id_t id = half_codecs[c % 2];
        zc_codec_params_t p = params_of(id);
        payload_t a = encode_ok(&p, NULL, ZC_DTYPE_F32, xa, N);
        payload_t b = encode_ok(&p, NULL, ZC_DTYPE_F32, xb, N);
        size_t cap = zc_codec_bound(&p, N);
        uint8_t *big = xmalloc(cap);
        memcpy(big, a.buf, a.len);
        free(a.buf);
        a.buf = big;
        cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, a.buf, cap, &a.len), ZC_OK);
        float *y = decode_ok(&a, N);
        cr_assert(isnan(y[0]) && isnan(y[1]) && isnan(y[4]), "%s", zc_codec_name(id));
        cr_assert(!signbit(y[0]), "%s: a's NaN (positive) wins", zc_codec_name(id));
        cr_assert_eq(y[2], INFINITY);
        cr_assert_eq(y[3], -INFINITY);
        /* 65504 is 65536 in bf16 */
        cr_assert_eq(y[5], id == ZC_CODEC_FP16 ? 131008.0f : 131072.0f, "%s: %a", zc_codec_name(id),
                     y[5]);
        cr_assert_eq(y[6], INFINITY, "%s: 3e38 + 3e38 = %a", zc_codec_name(id), y[6]);
        free(y);
        payload_free(&a);
        payload_free(&b);
    }
}

/* dst may be a or b; the result is the same bytes as into a third buffer. */
Test(half_codecs, reduce_aliasing)
{
    enum { N = 1037 };
    float xa[N], xb[N];
    static const zc_codec_id_t ids[] = {ZC_CODEC_NONE, ZC_CODEC_FP16, ZC_CODEC_BF16};
    for (size_t c = 0; c < ZC_ARRAY_SIZE(ids); c++) {
        zc_codec_params_t p = params_of(ids[c]);
        fill_gauss(xa, N, 91, 1.0);
        fill_gauss(xb, N, 92, 1.0);
        payload_t a = encode_ok(&p, NULL, ZC_DTYPE_F32, xa, N);
        payload_t b = encode_ok(&p, NULL, ZC_DTYPE_F32, xb, N);
        uint8_t *ref = xmalloc(a.len);
        size_t len = 0;
        cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, ref, a.len, &len), ZC_OK);
        cr_assert_eq(len, a.len);

        /* finite inputs: commutative, byte for byte */
        uint8_t *ba = xmalloc(a.len);
        cr_assert_eq(zc_codec_reduce(NULL, b.buf, b.len, a.buf, a.len, ba, a.len, &len), ZC_OK);
        cr_assert_eq(memcmp(ba, ref, a.len), 0, "%s: a + b != b + a", zc_codec_name(ids[c]));
        free(ba);

        uint8_t *ia = exact_copy(a.buf, a.len), *ib = exact_copy(b.buf, b.len);
        cr_assert_eq(zc_codec_reduce(NULL, ia, a.len, b.buf, b.len, ia, a.len, &len), ZC_OK);
        cr_assert_eq(memcmp(ia, ref, a.len), 0, "%s: dst = a", zc_codec_name(ids[c]));
        cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, ib, b.len, ib, b.len, &len), ZC_OK);
        cr_assert_eq(memcmp(ib, ref, a.len), 0, "%s: dst = b", zc_codec_name(ids[c]));
        /* a + a into a */
        memcpy(ia, a.buf, a.len);
        cr_assert_eq(zc_codec_reduce(NULL, ia, a.len, ia, a.len, ia, a.len, &len), ZC_OK);
        payload_t twice = {ia, len};
        float *y = decode_ok(&twice, N), *ya = decode_ok(&a, N);
        for (int i = 0; i < N; i++)
            cr_assert_eq(y[i], 2 * ya[i], "%s: a + a at %d", zc_codec_name(ids[c]), i);
        free(y);
        free(ya);
        free(ia);
        free(ib);
        free(ref);
        payload_free(&a);
        payload_free(&b);
    }
}

/* none: the f32 sum of the two, exactly what adding the values in f32 gives. */
Test(none_reduce, exact_f32_sum)
{
    enum { N = 1000 };
    float xa[N], xb[N];
    fill_gauss(xa, N, 101, 1.0);
    fill_gauss(xb, N, 102, 1e3);
    xa[3] = INFINITY;
    xb[4] = NAN;
    xa[5] = -0.0f;
    xb[5] = -0.0f;
    zc_codec_params_t p = params_of(ZC_CODEC_NONE);
    cr_assert(zc_codec_caps(ZC_CODEC_NONE) & ZC_CODEC_CAP_LINEAR);
    payload_t a = encode_ok(&p, NULL, ZC_DTYPE_F32, xa, N);
    payload_t b = encode_ok(&p, NULL, ZC_DTYPE_F32, xb, N);
    uint8_t *out = xmalloc(a.len);
    size_t len = 0;
    cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, out, a.len, &len), ZC_OK);
    cr_assert_eq(len, HDR + 4 * N);
    for (int i = 0; i < N; i++) {
        float got, want = xa[i] + xb[i];
        memcpy(&got, out + HDR + 4 * i, 4);
        if (isnan(want))
            cr_assert(isnan(got), "at %d", i);
        else
            cr_assert_eq(bits_of(got), bits_of(want), "at %d: %a want %a", i, got, want);
    }
    free(out);
    payload_free(&a);
    payload_free(&b);
}

/* ------------------------------------------- scalar against AVX2 and AVX-512 */

static payload_t encode_at(zc_cpu_level_t level, zc_codec_id_t id, zc_dtype_t dtype,
                           const void *src, size_t n)
{
    zc_codec_params_t p = params_of(id);
    cr_assert_eq(zc_cpu_set_level(level), ZC_OK);
    return encode_ok(&p, NULL, dtype, src, n);
}

/*
 * The kernels of @p level against the scalar ones, at sizes around the vector
 * widths (8 and 16 values, 32 in the unrolled loops) and a large odd one.
 */
static void check_matches_scalar(zc_cpu_level_t level)
{
    static const size_t sizes[] = {0,  1,  2,  7,  8,  9,  15, 16,   17,
                                   31, 32, 33, 47, 63, 64, 65, 1000, 1000003};
    const size_t nmax = 1000003;

    float *x = xmalloc(nmax * sizeof(float));
    uint16_t *h = xmalloc(nmax * sizeof(uint16_t));
    float *start = xmalloc(nmax * sizeof(float));
    float *ys = xmalloc(nmax * sizeof(float)), *yv = xmalloc(nmax * sizeof(float));
    fill_gauss(start, nmax, 111, 1.0);

    for (int c = 0; c < 2; c++) {
        zc_codec_id_t id = half_codecs[c], other = half_codecs[1 - c];
        const zc_codec_ops_t *ops = zc_codec_ops(id);
        for (size_t si = 0; si < ZC_ARRAY_SIZE(sizes); si++) {
            const size_t n = sizes[si];
            fill_hard(id, x, n, 1000 + n + (uint64_t)c);
            for (size_t i = 0; i < n; i++)
                h[i] = narrow(other, x[i]);

            /* encode, from f32 and from the other half format */
            payload_t a = encode_at(ZC_CPU_SCALAR, id, ZC_DTYPE_F32, x, n);
            payload_t v = encode_at(level, id, ZC_DTYPE_F32, x, n);
            cr_assert_eq(a.len, v.len);
            cr_assert_eq(memcmp(a.buf, v.buf, a.len), 0, "%s n %zu: encode differs",
                         zc_codec_name(id), n);
            payload_t ca = encode_at(ZC_CPU_SCALAR, id, native_dtype(other), h, n);
            payload_t cv = encode_at(level, id, native_dtype(other), h, n);
            cr_assert_eq(memcmp(ca.buf, cv.buf, ca.len), 0, "%s n %zu: cross encode differs",
                         zc_codec_name(id), n);

            /* decode_add with alpha +1 (public) and -1 (the ops table) */
            for (int alpha = -1; alpha <= 1; alpha += 2) {
                memcpy(ys, start, n * sizeof(float));
                memcpy(yv, start, n * sizeof(float));
                for (int l = 0; l < 2; l++) {
                    cr_assert_eq(zc_cpu_set_level(l ? level : ZC_CPU_SCALAR), ZC_OK);
                    /* the body only: finite values past the range are out of band */
                    size_t at = HDR + section_bytes(&a);
                    cr_assert_eq(
                        ops->decode_add(NULL, a.buf + at, a.len - at, l ? yv : ys, n, (float)alpha),
                        ZC_OK);
                }
                cr_assert(same_bits_f32(ys, yv, n), "%s n %zu alpha %d: decode differs",
                          zc_codec_name(id), n, alpha);
            }

            /* reduce: into a third buffer and in place */
            zc_codec_params_t p = params_of(id);
            const size_t cap = zc_codec_bound(&p, n);
            uint8_t *rs = xmalloc(cap), *rv = xmalloc(cap), *vin = xmalloc(cap);
            size_t ls = 0, lv = 0;
            cr_assert_eq(zc_cpu_set_level(ZC_CPU_SCALAR), ZC_OK);
            cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, ca.buf, ca.len, rs, cap, &ls), ZC_OK);
            cr_assert_eq(zc_cpu_set_level(level), ZC_OK);
            cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, ca.buf, ca.len, rv, cap, &lv), ZC_OK);
            cr_assert_eq(ls, lv);
            cr_assert_eq(memcmp(rs, rv, ls), 0, "%s n %zu: reduce differs", zc_codec_name(id), n);
            memcpy(vin, v.buf, v.len);
            free(v.buf);
            v.buf = vin;
            cr_assert_eq(zc_codec_reduce(NULL, v.buf, v.len, ca.buf, ca.len, v.buf, cap, &lv),
                         ZC_OK);
            cr_assert_eq(memcmp(rs, v.buf, ls), 0, "%s n %zu: in-place reduce differs",
                         zc_codec_name(id), n);
            /*
             * a and a moved by one value, with NaNs of different payloads put
             * in every 2nd and every 3rd value, in both orders: NaNs meet
             * numbers and other NaNs, so the NaN choice rule is compared too
             */
            if (n > 1) {
                const uint16_t nan = id == ZC_CODEC_FP16 ? 0x7c01u : 0x7f81u;
                const uint16_t span = id == ZC_CODEC_FP16 ? 0x3feu : 0x7eu;
                /* values in range only: bodies with no out-of-band section to edit */
                float *xc = xmalloc(n * sizeof(float));
                for (size_t i = 0; i < n; i++)
                    xc[i] = spills(id, x[i]) ? 0.0f : x[i];
                payload_t m0 = encode_at(ZC_CPU_SCALAR, id, ZC_DTYPE_F32, xc, n);
                payload_t m = encode_at(ZC_CPU_SCALAR, id, ZC_DTYPE_F32, xc, n);
                payload_t m2 = encode_at(ZC_CPU_SCALAR, id, ZC_DTYPE_F32, xc, n);
                free(xc);
                cr_assert_eq(m0.len, HDR + 2 * n);
                memcpy(m.buf + HDR, m0.buf + HDR + 2, 2 * (n - 1));
                memcpy(m.buf + HDR + 2 * (n - 1), m0.buf + HDR, 2);
                payload_free(&m0);
                for (size_t i = 0; i < n; i++) {
                    uint16_t sign = (uint16_t)(i & 4 ? 0x8000u : 0);
                    if (i % 3 == 0)
                        zc_half_store_le16(m.buf + HDR + 2 * i,
                                           (uint16_t)(sign | (nan + (i * 37) % span)));
                    if (i % 2 == 0)
                        zc_half_store_le16(m2.buf + HDR + 2 * i,
                                           (uint16_t)((sign ^ 0x8000u) | (nan + (i * 11) % span)));
                }
                for (int order = 0; order < 2; order++) {
                    const payload_t *p0 = order ? &m : &m2, *p1 = order ? &m2 : &m;
                    for (int l = 0; l < 2; l++) {
                        cr_assert_eq(zc_cpu_set_level(l ? level : ZC_CPU_SCALAR), ZC_OK);
                        cr_assert_eq(zc_codec_reduce(NULL, p0->buf, p0->len, p1->buf, p1->len,
                                                     l ? rv : rs, cap, l ? &lv : &ls),
                                     ZC_OK);
                    }
                    cr_assert_eq(memcmp(rs, rv, ls), 0, "%s n %zu order %d: NaN reduce differs",
                                 zc_codec_name(id), n, order);
                }
                payload_free(&m);
                payload_free(&m2);
            }
            free(rs);
            free(rv);
            payload_free(&a);
            payload_free(&v);
            payload_free(&ca);
            payload_free(&cv);
        }
    }
    cr_assert_eq(zc_cpu_set_level(zc_cpu_detect()), ZC_OK);
    free(x);
    free(h);
    free(start);
    free(ys);
    free(yv);
}

Test(half_simd, avx2_matches_scalar)
{
    if (zc_cpu_detect() < ZC_CPU_AVX2)
        cr_skip_test("no AVX2 on this CPU");
    check_matches_scalar(ZC_CPU_AVX2);
}

Test(half_simd, avx512_matches_scalar)
{
    if (!have_avx512())
        cr_skip_test("no AVX-512 on this CPU");
    check_matches_scalar(ZC_CPU_AVX512);
}

/* Each level selects its own kernels: the identity checks above test what they name. */
Test(half_simd, level_selects_kernels)
{
    static const zc_half_format_t formats[] = {ZC_HALF_F16, ZC_HALF_BF16};
    for (size_t f = 0; f < ZC_ARRAY_SIZE(formats); f++) {
        zc_half_format_t fmt = formats[f];
        cr_assert_eq(zc_cpu_set_level(ZC_CPU_SCALAR), ZC_OK);
        cr_assert_eq(zc_half_kernels(fmt), &zc_half_kernels_scalar[fmt]);
#if defined(__x86_64__)
        if (zc_cpu_detect() >= ZC_CPU_AVX2) {
            cr_assert_eq(zc_cpu_set_level(ZC_CPU_AVX2), ZC_OK);
            cr_assert_eq(zc_half_kernels(fmt), &zc_half_kernels_avx2[fmt]);
            cr_assert_neq(zc_half_kernels_avx2[fmt].encode, zc_half_kernels_scalar[fmt].encode);
        }
        if (have_avx512()) {
            cr_assert_eq(zc_cpu_set_level(ZC_CPU_AVX512), ZC_OK);
            cr_assert_eq(zc_half_kernels(fmt), &zc_half_kernels_avx512[fmt]);
        }
#endif
    }
    cr_assert_eq(zc_cpu_set_level(zc_cpu_detect()), ZC_OK);
}

/* ------------------------------------------------------ hostile payloads */

static void check_lengths(zc_codec_id_t id)
{
    enum { N = 9 };
    float x[N] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    zc_codec_params_t p = params_of(id);
    payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, N);
    float dst[N] = {0};
    uint8_t out[HDR + 4 * N + GUARD];
    size_t len = 777;

    for (size_t cut = 0; cut < pl.len; cut++) {
        uint8_t *c = exact_copy(pl.buf, cut);
        cr_assert_eq(zc_codec_decode_add(NULL, c, cut, dst, N), ZC_ERR_CORRUPT, "%s: len %zu",
                     zc_codec_name(id), cut);
        cr_assert_eq(zc_codec_reduce(NULL, c, cut, pl.buf, pl.len, out, sizeof(out), &len),
                     ZC_ERR_CORRUPT, "%s: a of %zu bytes", zc_codec_name(id), cut);
        cr_assert_eq(zc_codec_reduce(NULL, pl.buf, pl.len, c, cut, out, sizeof(out), &len),
                     ZC_ERR_CORRUPT, "%s: b of %zu bytes", zc_codec_name(id), cut);
        free(c);
    }
    for (size_t extra = 1; extra <= 8; extra++) {
        uint8_t *longer = padded_copy(pl.buf, pl.len, extra, 0);
        cr_assert_eq(zc_codec_decode_add(NULL, longer, pl.len + extra, dst, N), ZC_ERR_CORRUPT,
                     "%s: %zu extra bytes", zc_codec_name(id), extra);
        cr_assert_eq(
            zc_codec_reduce(NULL, longer, pl.len + extra, pl.buf, pl.len, out, sizeof(out), &len),
            ZC_ERR_CORRUPT);
        cr_assert_eq(
            zc_codec_reduce(NULL, pl.buf, pl.len, longer, pl.len + extra, out, sizeof(out), &len),
            ZC_ERR_CORRUPT);
        free(longer);
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(dst[i], 0.0f, "%s: output touched by a rejected payload", zc_codec_name(id));
    cr_assert_eq(len, 777, "%s: len_p written on failure", zc_codec_name(id));
    payload_free(&pl);
}

Test(half_hostile, truncated_and_oversized)
{
    check_lengths(ZC_CODEC_FP16);
    check_lengths(ZC_CODEC_BF16);
    check_lengths(ZC_CODEC_NONE);
}

/* The header's count against the receiver's, and payloads that do not pair. */
Test(half_hostile, mismatches)
{
    enum { N = 20 };
    float x[N];
    fill_gauss(x, N, 121, 1.0);
    zc_codec_params_t p16 = params_of(ZC_CODEC_FP16), pb = params_of(ZC_CODEC_BF16);
    zc_codec_params_t pn = params_of(ZC_CODEC_NONE);
    payload_t a = encode_ok(&p16, NULL, ZC_DTYPE_F32, x, N);
    payload_t shorter = encode_ok(&p16, NULL, ZC_DTYPE_F32, x, N - 1);
    payload_t b = encode_ok(&pb, NULL, ZC_DTYPE_F32, x, N);
    payload_t n = encode_ok(&pn, NULL, ZC_DTYPE_F32, x, N);
    payload_t n1 = encode_ok(&pn, NULL, ZC_DTYPE_F32, x, N - 1);
    float dst[N + 1] = {0};
    uint8_t out[HDR + 4 * N];
    size_t len = 777;

    cr_assert_eq(zc_codec_decode_add(NULL, a.buf, a.len, dst, N - 1), ZC_ERR_MISMATCH);
    cr_assert_eq(zc_codec_decode_add(NULL, a.buf, a.len, dst, N + 1), ZC_ERR_MISMATCH);
    cr_assert_eq(zc_codec_decode_add(NULL, b.buf, b.len, dst, 0), ZC_ERR_MISMATCH);
    cr_assert_eq(
        zc_codec_reduce(NULL, a.buf, a.len, shorter.buf, shorter.len, out, sizeof(out), &len),
        ZC_ERR_MISMATCH);
    cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, out, sizeof(out), &len),
                 ZC_ERR_MISMATCH, "fp16 + bf16");
    cr_assert_eq(zc_codec_reduce(NULL, n.buf, n.len, n1.buf, n1.len, out, sizeof(out), &len),
                 ZC_ERR_MISMATCH);

    /* a count in the header that the body does not match: corrupt, not a mismatch */
    uint8_t *lie = exact_copy(a.buf, a.len);
    lie[8] = N - 1;
    cr_assert_eq(zc_codec_decode_add(NULL, lie, a.len, dst, N - 1), ZC_ERR_CORRUPT);
    lie[8] = N + 1;
    cr_assert_eq(zc_codec_decode_add(NULL, lie, a.len, dst, N + 1), ZC_ERR_CORRUPT);
    /* a count that overflows the body length in size_t */
    memset(lie + 8, 0xff, 8);
    cr_assert_eq(zc_codec_decode_add(NULL, lie, a.len, dst, UINT64_MAX), ZC_ERR_CORRUPT);
    lie[15] = 0x80;
    memset(lie + 8, 0, 7);
    cr_assert_eq(zc_codec_decode_add(NULL, lie, a.len, dst, UINT64_C(1) << 63), ZC_ERR_CORRUPT);
    cr_assert_eq(zc_codec_reduce(NULL, lie, a.len, lie, a.len, out, sizeof(out), &len),
                 ZC_ERR_CORRUPT);
    free(lie);

    for (int i = 0; i <= N; i++)
        cr_assert_eq(dst[i], 0.0f);
    cr_assert_eq(len, 777);
    payload_free(&a);
    payload_free(&shorter);
    payload_free(&b);
    payload_free(&n);
    payload_free(&n1);
}

/* Every capacity short of the payload: BUFFER_TOO_SMALL, nothing written past cap. */
static void check_short_caps(zc_codec_id_t id, zc_dtype_t dtype, const void *src, size_t n)
{
    zc_codec_params_t p = params_of(id);
    payload_t ref = encode_ok(&p, NULL, dtype, src, n);
    /* the bound leaves room for an out-of-band section: the body alone when there is none */
    cr_assert_eq(ref.len, id == ZC_CODEC_NONE ? zc_codec_bound(&p, n) : HDR + 2 * n,
                 "%s: the size is the body's", zc_codec_name(id));

    for (size_t cap = 0; cap < ref.len; cap++) {
        uint8_t *buf = xmalloc(cap + GUARD), *out = xmalloc(cap + GUARD);
        size_t len = 777;
        memset(buf, GUARD_BYTE, cap + GUARD);
        memset(out, GUARD_BYTE, cap + GUARD);
        cr_assert_eq(zc_codec_encode(&p, NULL, NULL, dtype, src, n, buf, cap, &len),
                     ZC_ERR_BUFFER_TOO_SMALL, "%s: encode cap %zu", zc_codec_name(id), cap);
        cr_assert_eq(zc_codec_reduce(NULL, ref.buf, ref.len, ref.buf, ref.len, out, cap, &len),
                     ZC_ERR_BUFFER_TOO_SMALL, "%s: reduce cap %zu", zc_codec_name(id), cap);
        cr_assert_eq(len, 777);
        for (size_t i = cap; i < cap + GUARD; i++) {
            cr_assert_eq(buf[i], GUARD_BYTE, "%s: encode cap %zu wrote byte %zu", zc_codec_name(id),
                         cap, i);
            cr_assert_eq(out[i], GUARD_BYTE, "%s: reduce cap %zu wrote byte %zu", zc_codec_name(id),
                         cap, i);
        }
        free(buf);
        free(out);
    }
    payload_free(&ref);
}

Test(half_hostile, short_capacity)
{
    enum { N = 37 };
    float x[N];
    uint16_t h16[N], hb[N];
    fill_gauss(x, N, 131, 1.0);
    for (int i = 0; i < N; i++) {
        h16[i] = zc_f32_to_f16(x[i]);
        hb[i] = zc_f32_to_bf16(x[i]);
    }
    static const zc_codec_id_t ids[] = {ZC_CODEC_NONE, ZC_CODEC_FP16, ZC_CODEC_BF16};
    for (size_t c = 0; c < ZC_ARRAY_SIZE(ids); c++) {
        check_short_caps(ids[c], ZC_DTYPE_F32, x, N);
        check_short_caps(ids[c], ZC_DTYPE_F16, h16, N);
        check_short_caps(ids[c], ZC_DTYPE_BF16, hb, N);
    }
}

Test(half_hostile, bad_arguments)
{
    float x[4] = {1, 2, 3, 4};
    uint8_t buf[HDR + 8], out[HDR + 8];
    for (int c = 0; c < 2; c++) {
        zc_codec_params_t p = params_of(half_codecs[c]);
        size_t len = 777;
        cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, NULL, 4, buf, sizeof(buf), &len),
                     ZC_ERR_INVALID_ARG);
        cr_assert_eq(zc_codec_encode(&p, NULL, NULL, (zc_dtype_t)7, x, 4, buf, sizeof(buf), &len),
                     ZC_ERR_INVALID_ARG);
        cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, x, 4, NULL, sizeof(buf), &len),
                     ZC_ERR_INVALID_ARG);
        cr_assert_eq(len, 777);
        cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, x, 4, buf, sizeof(buf), &len),
                     ZC_OK);
        cr_assert_eq(len, HDR + 8);
        cr_assert_eq(zc_codec_decode_add(NULL, buf, len, NULL, 4), ZC_ERR_INVALID_ARG);
        cr_assert_eq(zc_codec_decode_add(NULL, NULL, len, x, 4), ZC_ERR_INVALID_ARG);
        size_t rlen = 777;
        cr_assert_eq(zc_codec_reduce(NULL, buf, len, NULL, len, out, sizeof(out), &rlen),
                     ZC_ERR_INVALID_ARG);
        cr_assert_eq(zc_codec_reduce(NULL, buf, len, buf, len, NULL, sizeof(out), &rlen),
                     ZC_ERR_INVALID_ARG);
        cr_assert_eq(zc_codec_reduce(NULL, buf, len, buf, len, out, sizeof(out), NULL),
                     ZC_ERR_INVALID_ARG);
        cr_assert_eq(rlen, 777);
        /* a bit flipped in the magic or the reserved bytes */
        buf[0] ^= 1;
        cr_assert_eq(zc_codec_decode_add(NULL, buf, len, x, 4), ZC_ERR_CORRUPT);
        buf[0] ^= 1;
        buf[5] = 1;
        cr_assert_eq(zc_codec_decode_add(NULL, buf, len, x, 4), ZC_ERR_CORRUPT);
        buf[5] = 0;
        cr_assert_eq(x[0], 1.0f, "output touched");
    }
}
