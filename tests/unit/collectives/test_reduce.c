/*
 * The raw reduction kernels (collectives/reduce.c): every dtype x op against a
 * one-value-at-a-time reference, at sizes around the kernels' block of 64 and
 * under every aliasing the header allows; NaN and signed zero in min/max,
 * integer wrap-around, the average's division and truncation, the f16/bf16
 * sums at every CPU level, and unknown dtypes or ops.
 */
#include "collectives/reduce.h"
#include "common/cpu.h"
#include "common/half.h"

#include <criterion/criterion.h>

#include <float.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define NDTYPES ((int)ZC_DTYPE_COUNT)
#define NOPS ((int)ZC_OP_COUNT)

static const size_t esize[NDTYPES] = {
    [ZC_DTYPE_F32] = 4, [ZC_DTYPE_F16] = 2, [ZC_DTYPE_BF16] = 2, [ZC_DTYPE_F64] = 8,
    [ZC_DTYPE_I8] = 1,  [ZC_DTYPE_U8] = 1,  [ZC_DTYPE_I32] = 4,  [ZC_DTYPE_U32] = 4,
    [ZC_DTYPE_I64] = 8, [ZC_DTYPE_U64] = 8,
};
static const char *const dname[NDTYPES] = {"f32", "f16", "bf16", "f64", "i8",
                                           "u8",  "i32", "u32",  "i64", "u64"};
static const char *const oname[NOPS] = {"sum", "prod", "min", "max", "avg"};

/* sizes around the block of 64 values and a few odd ones */
static const size_t sizes[] = {0, 1, 2, 3, 31, 63, 64, 65, 127, 128, 129, 1000, 4099};

/* ------------------------------------------------------------- test data */

/* splitmix64 (Steele, Lea, Flood 2014). */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/*
 * A float value: mostly ordinary numbers of varied magnitude and sign, with
 * NaN, infinities, signed zeros, subnormals, huge values (overflow in sums and
 * products) and repeats of the previous value (ties in min/max) mixed in.
 */
static double random_real(uint64_t *s, double huge, double tiny)
{
    uint64_t r = rng_next(s);
    switch (r % 16) {
    case 0: return NAN;
    case 1: return (r >> 8) & 1 ? INFINITY : -INFINITY;
    case 2: return (r >> 8) & 1 ? 0.0 : -0.0;
    case 3: return ((r >> 8) & 1 ? 1 : -1) * tiny * (double)((r >> 9) % 7 + 1);
    case 4: return ((r >> 8) & 1 ? 1 : -1) * huge * (1 + (double)((r >> 9) % 100) / 100);
    case 5: return (double)((int)((r >> 8) % 9) - 4); /* small integers: exact ties */
    default: {
        double mant = (double)(r >> 11) * 0x1p-53; /* [0, 1) */
        int exp = (int)((r >> 3) % 40) - 20;
        return ((r >> 2) & 1 ? 1 : -1) * ldexp(1 + mant, exp);
    }
    }
}

/*
 * A quiet NaN of @p bits total width with a random sign and payload (so that
 * tests see which of two NaNs an operation kept): @p man mantissa bits.
 */
static uint64_t random_nan(uint64_t *s, unsigned bits, unsigned man)
{
    uint64_t r = rng_next(s);
    uint64_t exp = ((UINT64_C(1) << (bits - 1 - man)) - 1) << man;
    uint64_t quiet = UINT64_C(1) << (man - 1);
    uint64_t sign = (r & 1) << (bits - 1);
    return sign | exp | quiet | ((r >> 1) & (quiet - 1));
}

/* count random values of @p dtype into @p buf. */
static void fill(zc_dtype_t dtype, void *buf, size_t count, uint64_t seed)
{
    uint64_t s = seed;
    for (size_t i = 0; i < count; i++) {
        char *p = (char *)buf + i * esize[dtype];
        switch (dtype) {
        case ZC_DTYPE_F32: {
            float v = (float)random_real(&s, 2e38, 1e-44);
            uint32_t u = isnan(v) ? (uint32_t)random_nan(&s, 32, 23) : zc_f32_bits(v);
            memcpy(p, &u, 4);
            break;
        }
        case ZC_DTYPE_F64: {
            double v = random_real(&s, 1e308, 1e-322);
            if (isnan(v)) {
                uint64_t u = random_nan(&s, 64, 52);
                memcpy(p, &u, 8);
            } else {
                memcpy(p, &v, 8);
            }
            break;
        }
        case ZC_DTYPE_F16: {
            float v = (float)random_real(&s, 40000, 6e-8);
            uint16_t h = isnan(v) ? (uint16_t)random_nan(&s, 16, 10) : zc_f32_to_f16(v);
            memcpy(p, &h, 2);
            break;
        }
        case ZC_DTYPE_BF16: {
            float v = (float)random_real(&s, 2e38, 1e-40);
            uint16_t h = isnan(v) ? (uint16_t)random_nan(&s, 16, 7) : zc_f32_to_bf16(v);
            memcpy(p, &h, 2);
            break;
        }
        default: {
            /* integers: full range (wraps often), with extremes and small values */
            uint64_t r = rng_next(&s), v;
            switch (r % 8) {
            case 0: v = 0; break;
            case 1: v = UINT64_MAX; break; /* -1, or the unsigned maximum */
            case 2:
                v = UINT64_C(1) << (esize[dtype] * 8 - 1); /* signed minimum */
                break;
            case 3:
                v = (UINT64_C(1) << (esize[dtype] * 8 - 1)) - 1; /* signed maximum */
                break;
            case 4: v = (r >> 8) % 7; break;
            default: v = rng_next(&s); break;
            }
            memcpy(p, &v, esize[dtype]); /* little-endian: the low bytes */
            break;
        }
        }
    }
}

/* -------------------------------------------------------------- reference */

/* Whether min(x, y) is x: NaN wins (the first one), then the order, -0 below +0. */
static int min_picks_x(double x, double y)
{
    if (isnan(x))
        return 1;
    if (isnan(y))
        return 0;
    if (x == y) /* equal values have equal bits, except the two zeros */
        return signbit(x) || !signbit(y);
    return x < y;
}

/* Whether max(x, y) is x: NaN wins (the first one), then the order, +0 above -0. */
static int max_picks_x(double x, double y)
{
    if (isnan(x))
        return 1;
    if (isnan(y))
        return 0;
    if (x == y)
        return !signbit(x) || signbit(y);
    return x > y;
}

/*
 * Element i of @p a (op) @p b into @p out, all of @p dtype, computed one value
 * at a time in the plainest way. Sets *nan_loose when only NaN-ness is
 * promised (which NaN an addition or product keeps is the compiler's choice).
 */
static void ref_elem(zc_dtype_t dtype, zc_redop_t op, const void *a, const void *b, void *out,
                     int *nan_loose)
{
    *nan_loose = 0;
    if (op == ZC_OP_AVG)
        op = ZC_OP_SUM;
    switch (dtype) {
    case ZC_DTYPE_F32: {
        float x, y, r;
        memcpy(&x, a, 4);
        memcpy(&y, b, 4);
        switch (op) {
        case ZC_OP_SUM: r = x + y; break;
        case ZC_OP_PROD: r = x * y; break;
        case ZC_OP_MIN: r = min_picks_x(x, y) ? x : y; break;
        default: r = max_picks_x(x, y) ? x : y; break;
        }
        *nan_loose = op <= ZC_OP_PROD && isnan(r);
        memcpy(out, &r, 4);
        return;
    }
    case ZC_DTYPE_F64: {
        double x, y, r;
        memcpy(&x, a, 8);
        memcpy(&y, b, 8);
        switch (op) {
        case ZC_OP_SUM: r = x + y; break;
        case ZC_OP_PROD: r = x * y; break;
        case ZC_OP_MIN: r = min_picks_x(x, y) ? x : y; break;
        default: r = max_picks_x(x, y) ? x : y; break;
        }
        *nan_loose = op <= ZC_OP_PROD && isnan(r);
        memcpy(out, &r, 8);
        return;
    }
    case ZC_DTYPE_F16:
    case ZC_DTYPE_BF16: {
        uint16_t hx, hy, hr;
        memcpy(&hx, a, 2);
        memcpy(&hy, b, 2);
        int f16 = dtype == ZC_DTYPE_F16;
        float x = f16 ? zc_f16_to_f32(hx) : zc_bf16_to_f32(hx);
        float y = f16 ? zc_f16_to_f32(hy) : zc_bf16_to_f32(hy);
        switch (op) {
        case ZC_OP_SUM:
        case ZC_OP_PROD: {
            /* the f32 result is exact or rounded once, then rounded to the format */
            float r = op == ZC_OP_SUM ? x + y : x * y;
            hr = f16 ? zc_f32_to_f16(r) : zc_f32_to_bf16(r);
            *nan_loose = isnan(r);
            break;
        }
        case ZC_OP_MIN: hr = min_picks_x(x, y) ? hx : hy; break;
        default: hr = max_picks_x(x, y) ? hx : hy; break;
        }
        memcpy(out, &hr, 2);
        return;
    }
    default: {
        /* integers in 64-bit unsigned arithmetic, truncated to the width: wrap */
        const size_t w = esize[dtype];
        const int is_signed =
            dtype == ZC_DTYPE_I8 || dtype == ZC_DTYPE_I32 || dtype == ZC_DTYPE_I64;
        uint64_t ux = 0, uy = 0, ur;
        memcpy(&ux, a, w);
        memcpy(&uy, b, w);
        const unsigned bits = (unsigned)(8 * w);
        /* sign-extend to compare */
        int64_t sx = (int64_t)(ux << (64 - bits)) >> (64 - bits);
        int64_t sy = (int64_t)(uy << (64 - bits)) >> (64 - bits);
        switch (op) {
        case ZC_OP_SUM: ur = ux + uy; break;
        case ZC_OP_PROD: ur = ux * uy; break;
        case ZC_OP_MIN: ur = is_signed ? (sy < sx ? uy : ux) : (uy < ux ? uy : ux); break;
        default: ur = is_signed ? (sy > sx ? uy : ux) : (uy > ux ? uy : ux); break;
        }
        memcpy(out, &ur, w);
        return;
    }
    }
}

static int is_nan_value(zc_dtype_t dtype, const void *p)
{
    switch (dtype) {
    case ZC_DTYPE_F32: {
        float v;
        memcpy(&v, p, 4);
        return isnan(v);
    }
    case ZC_DTYPE_F64: {
        double v;
        memcpy(&v, p, 8);
        return isnan(v);
    }
    case ZC_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7fff) > 0x7c00;
    }
    case ZC_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p, 2);
        return (h & 0x7fff) > 0x7f80;
    }
    default: return 0;
    }
}

static uint64_t bits_of(zc_dtype_t dtype, const void *p)
{
    uint64_t v = 0;
    memcpy(&v, p, esize[dtype]);
    return v;
}

/* ------------------------------------------------------------------ runs */

enum alias { DISTINCT, OUT_IS_A, OUT_IS_B, A_IS_B, ALL_SAME, NALIAS };
static const char *const alias_name[NALIAS] = {"out,a,b distinct", "out == a", "out == b", "a == b",
                                               "out == a == b"};

/* An exactly sized allocation, so that the ASan build sees one value too many. */
static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert_not_null(p);
    return p;
}

/*
 * Runs one (dtype, op, count, aliasing) through zc_reduce_apply3 (and
 * zc_reduce_apply when out is a) and checks every value against ref_elem.
 */
static void check_case(zc_dtype_t dtype, zc_redop_t op, size_t count, enum alias al, uint64_t seed)
{
    const size_t es = esize[dtype], bytes = count * es;
    unsigned char *a0 = xmalloc(bytes), *b0 = xmalloc(bytes);
    unsigned char *out = xmalloc(bytes), *b = xmalloc(bytes);

    fill(dtype, a0, count, seed);
    fill(dtype, b0, count, seed ^ 0xabcdef);
    if (al == A_IS_B || al == ALL_SAME)
        memcpy(b0, a0, bytes);

    /* lay the operands out as the aliasing says */
    memcpy(b, b0, bytes);
    switch (al) {
    case DISTINCT:
        memset(out, 0x5a, bytes);
        zc_reduce_apply3(dtype, op, out, a0, b, count);
        break;
    case OUT_IS_A:
        memcpy(out, a0, bytes);
        zc_reduce_apply(dtype, op, out, b, count);
        break;
    case OUT_IS_B:
        memcpy(out, b0, bytes);
        zc_reduce_apply3(dtype, op, out, a0, out, count);
        break;
    case A_IS_B:
        memset(out, 0x5a, bytes);
        zc_reduce_apply3(dtype, op, out, b, b, count);
        break;
    default:
        memcpy(out, a0, bytes);
        zc_reduce_apply(dtype, op, out, out, count);
        break;
    }

    for (size_t i = 0; i < count; i++) {
        int loose;
        unsigned char w[8];
        ref_elem(dtype, op, a0 + i * es, b0 + i * es, w, &loose);
        const void *got = out + i * es;
        if (loose)
            cr_assert(is_nan_value(dtype, got),
                      "%s %s n=%zu (%s): value %zu is 0x%" PRIx64 ", expected a NaN", dname[dtype],
                      oname[op], count, alias_name[al], i, bits_of(dtype, got));
        else
            cr_assert_eq(bits_of(dtype, got), bits_of(dtype, w),
                         "%s %s n=%zu (%s): value %zu: 0x%" PRIx64 " (op) 0x%" PRIx64
                         " gave 0x%" PRIx64 ", expected 0x%" PRIx64,
                         dname[dtype], oname[op], count, alias_name[al], i,
                         bits_of(dtype, a0 + i * es), bits_of(dtype, b0 + i * es),
                         bits_of(dtype, got), bits_of(dtype, w));
    }
    /* the second input is read only */
    if (al == DISTINCT || al == OUT_IS_A)
        cr_assert_eq(memcmp(b, b0, bytes), 0, "%s %s: src was written", dname[dtype], oname[op]);
    free(a0);
    free(b0);
    free(out);
    free(b);
}

Test(reduce, every_dtype_op_size_alias)
{
    uint64_t seed = 1;
    for (int dt = 0; dt < NDTYPES; dt++)
        for (int op = 0; op < NOPS; op++)
            for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++)
                for (int al = 0; al < NALIAS; al++)
                    check_case((zc_dtype_t)dt, (zc_redop_t)op, sizes[k], (enum alias)al, seed++);
}

/* The f16/bf16 sums use SIMD kernels picked by the CPU level: every level gives the reference. */
Test(reduce, half_sums_at_every_cpu_level)
{
    zc_cpu_level_t top = zc_cpu_detect();
    for (int lvl = ZC_CPU_SCALAR; lvl <= (int)top; lvl++) {
        cr_assert_eq(zc_cpu_set_level((zc_cpu_level_t)lvl), ZC_OK);
        for (int al = 0; al < NALIAS; al++) {
            check_case(ZC_DTYPE_F16, ZC_OP_SUM, 1000, (enum alias)al, 77 + (uint64_t)lvl);
            check_case(ZC_DTYPE_BF16, ZC_OP_SUM, 1000, (enum alias)al, 99 + (uint64_t)lvl);
        }
    }
    cr_assert_eq(zc_cpu_set_level(top), ZC_OK);
}

/* ---------------------------------------------------------- known answers */

Test(reduce, nan_in_min_max)
{
    /* a NaN on either side, in a block (vector path) and in the tail */
    float a[65], b[65], o[65];
    for (int i = 0; i < 65; i++) {
        a[i] = (float)i;
        b[i] = (float)(64 - i);
    }
    a[3] = NAN;
    b[7] = NAN;
    a[64] = NAN;
    for (int op = ZC_OP_MIN; op <= ZC_OP_MAX; op++) {
        zc_reduce_apply3(ZC_DTYPE_F32, (zc_redop_t)op, o, a, b, 65);
        cr_assert(isnan(o[3]) && isnan(o[7]) && isnan(o[64]), "%s lost a NaN", oname[op]);
        cr_assert_eq(o[0], op == ZC_OP_MIN ? 0.0f : 64.0f);
        cr_assert_eq(o[40], op == ZC_OP_MIN ? 24.0f : 40.0f);
    }

    double da[2] = {NAN, 1}, db[2] = {2, NAN}, dout[2];
    zc_reduce_apply3(ZC_DTYPE_F64, ZC_OP_MIN, dout, da, db, 2);
    cr_assert(isnan(dout[0]) && isnan(dout[1]));
    zc_reduce_apply3(ZC_DTYPE_F64, ZC_OP_MAX, dout, da, db, 2);
    cr_assert(isnan(dout[0]) && isnan(dout[1]));

    /* the first NaN is kept bit for bit */
    uint32_t q1 = 0x7fc00001, q2 = 0xffc00002;
    float n1, n2, r;
    memcpy(&n1, &q1, 4);
    memcpy(&n2, &q2, 4);
    zc_reduce_apply3(ZC_DTYPE_F32, ZC_OP_MIN, &r, &n1, &n2, 1);
    cr_assert_eq(zc_f32_bits(r), q1);
    zc_reduce_apply3(ZC_DTYPE_F32, ZC_OP_MAX, &r, &n2, &n1, 1);
    cr_assert_eq(zc_f32_bits(r), q2);

    /* halves: NaN either side, results are NaN patterns */
    uint16_t h16[2] = {0x7e00, 0x3c00}, g16[2] = {0x3c00, 0xfe01}, r16[2];
    zc_reduce_apply3(ZC_DTYPE_F16, ZC_OP_MIN, r16, h16, g16, 2);
    cr_assert_eq(r16[0], 0x7e00);
    cr_assert_eq(r16[1], 0xfe01);
    uint16_t hb[2] = {0x7fc0, 0x3f80}, gb[2] = {0x3f80, 0xffc1}, rb[2];
    zc_reduce_apply3(ZC_DTYPE_BF16, ZC_OP_MAX, rb, hb, gb, 2);
    cr_assert_eq(rb[0], 0x7fc0);
    cr_assert_eq(rb[1], 0xffc1);
}

Test(reduce, signed_zero_in_min_max)
{
    float pz = 0.0f, nz = -0.0f, r;
    zc_reduce_apply3(ZC_DTYPE_F32, ZC_OP_MIN, &r, &pz, &nz, 1);
    cr_assert(r == 0 && signbit(r), "min(+0, -0) must be -0");
    zc_reduce_apply3(ZC_DTYPE_F32, ZC_OP_MIN, &r, &nz, &pz, 1);
    cr_assert(r == 0 && signbit(r), "min(-0, +0) must be -0");
    zc_reduce_apply3(ZC_DTYPE_F32, ZC_OP_MAX, &r, &pz, &nz, 1);
    cr_assert(r == 0 && !signbit(r), "max(+0, -0) must be +0");
    zc_reduce_apply3(ZC_DTYPE_F32, ZC_OP_MAX, &r, &nz, &pz, 1);
    cr_assert(r == 0 && !signbit(r), "max(-0, +0) must be +0");
}

Test(reduce, integers_wrap)
{
    int8_t i8a[3] = {127, -128, -128}, i8b[3] = {1, -1, -1};
    zc_reduce_apply(ZC_DTYPE_I8, ZC_OP_SUM, i8a, i8b, 2);
    cr_assert_eq(i8a[0], -128);
    cr_assert_eq(i8a[1], 127);
    zc_reduce_apply(ZC_DTYPE_I8, ZC_OP_PROD, i8a + 2, i8b + 2, 1);
    cr_assert_eq(i8a[2], -128, "-128 * -1 wraps to -128");

    uint8_t u8a[2] = {255, 16}, u8b[2] = {1, 16};
    zc_reduce_apply(ZC_DTYPE_U8, ZC_OP_SUM, u8a, u8b, 1);
    cr_assert_eq(u8a[0], 0);
    zc_reduce_apply(ZC_DTYPE_U8, ZC_OP_PROD, u8a + 1, u8b + 1, 1);
    cr_assert_eq(u8a[1], 0);

    int32_t i32a[1] = {INT32_MAX}, i32b[1] = {1};
    zc_reduce_apply(ZC_DTYPE_I32, ZC_OP_SUM, i32a, i32b, 1);
    cr_assert_eq(i32a[0], INT32_MIN);

    uint32_t u32a[1] = {0}, u32b[1] = {UINT32_MAX};
    zc_reduce_apply(ZC_DTYPE_U32, ZC_OP_SUM, u32a, u32b, 1);
    cr_assert_eq(u32a[0], UINT32_MAX);
    zc_reduce_apply(ZC_DTYPE_U32, ZC_OP_SUM, u32a, u32b, 1);
    cr_assert_eq(u32a[0], UINT32_MAX - 1);

    /* a whole block, so the vector path wraps too */
    int64_t i64a[64], i64b[64];
    uint64_t u64a[64], u64b[64];
    for (int i = 0; i < 64; i++) {
        i64a[i] = INT64_MAX;
        i64b[i] = 2;
        u64a[i] = UINT64_MAX;
        u64b[i] = UINT64_MAX;
    }
    zc_reduce_apply(ZC_DTYPE_I64, ZC_OP_PROD, i64a, i64b, 64);
    zc_reduce_apply(ZC_DTYPE_U64, ZC_OP_PROD, u64a, u64b, 64);
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(i64a[i], -2);
        cr_assert_eq(u64a[i], 1);
    }

    /* min/max of signed values compare as signed, unsigned as unsigned */
    int32_t smin[1] = {-1}, sother[1] = {1};
    zc_reduce_apply(ZC_DTYPE_I32, ZC_OP_MIN, smin, sother, 1);
    cr_assert_eq(smin[0], -1);
    uint32_t umin[1] = {UINT32_MAX}, uother[1] = {1};
    zc_reduce_apply(ZC_DTYPE_U32, ZC_OP_MIN, umin, uother, 1);
    cr_assert_eq(umin[0], 1);
}

Test(reduce, avg_truncates_toward_zero)
{
    int32_t i32[4] = {-7, 7, -1, 5};
    zc_reduce_avg(ZC_DTYPE_I32, i32, 4, 2);
    cr_assert_eq(i32[0], -3);
    cr_assert_eq(i32[1], 3);
    cr_assert_eq(i32[2], 0);
    cr_assert_eq(i32[3], 2);

    int8_t i8[2] = {-128, 127};
    zc_reduce_avg(ZC_DTYPE_I8, i8, 2, 3);
    cr_assert_eq(i8[0], -42);
    cr_assert_eq(i8[1], 42);

    uint8_t u8[1] = {255};
    zc_reduce_avg(ZC_DTYPE_U8, u8, 1, 4);
    cr_assert_eq(u8[0], 63);

    /* UINT64_MAX must not go through a signed type */
    uint64_t u64[1] = {UINT64_MAX};
    zc_reduce_avg(ZC_DTYPE_U64, u64, 1, 2);
    cr_assert_eq(u64[0], UINT64_MAX / 2);
    int64_t i64[1] = {INT64_MIN};
    zc_reduce_avg(ZC_DTYPE_I64, i64, 1, 8);
    cr_assert_eq(i64[0], INT64_MIN / 8);
}

Test(reduce, avg_every_dtype_against_reference)
{
    const int nranks[] = {1, 2, 3, 7, 8};
    for (int dt = 0; dt < NDTYPES; dt++)
        for (size_t k = 0; k < sizeof(nranks) / sizeof(nranks[0]); k++) {
            const size_t n = 200, es = esize[dt];
            int nr = nranks[k];
            unsigned char *buf = xmalloc(n * es), *orig = xmalloc(n * es);
            fill((zc_dtype_t)dt, orig, n, 1000 + (uint64_t)dt * 10 + k);
            memcpy(buf, orig, n * es);
            zc_reduce_avg((zc_dtype_t)dt, buf, n, nr);
            for (size_t i = 0; i < n; i++) {
                const void *p = orig + i * es, *got = buf + i * es;
                uint64_t want = 0;
                switch (dt) {
                case ZC_DTYPE_F32: {
                    float v;
                    memcpy(&v, p, 4);
                    v = v / (float)nr;
                    memcpy(&want, &v, 4);
                    break;
                }
                case ZC_DTYPE_F64: {
                    double v;
                    memcpy(&v, p, 8);
                    v = v / nr;
                    memcpy(&want, &v, 8);
                    break;
                }
                case ZC_DTYPE_F16:
                case ZC_DTYPE_BF16: {
                    uint16_t h;
                    memcpy(&h, p, 2);
                    want = dt == ZC_DTYPE_F16 ? zc_f32_to_f16(zc_f16_to_f32(h) / (float)nr)
                                              : zc_f32_to_bf16(zc_bf16_to_f32(h) / (float)nr);
                    break;
                }
                case ZC_DTYPE_I8: want = (uint8_t)(*(const int8_t *)p / nr); break;
                case ZC_DTYPE_U8: want = (uint8_t)(*(const uint8_t *)p / nr); break;
                case ZC_DTYPE_I32: {
                    int32_t v;
                    memcpy(&v, p, 4);
                    want = (uint32_t)(v / nr);
                    break;
                }
                case ZC_DTYPE_U32: {
                    uint32_t v;
                    memcpy(&v, p, 4);
                    want = v / (uint32_t)nr;
                    break;
                }
                case ZC_DTYPE_I64: {
                    int64_t v;
                    memcpy(&v, p, 8);
                    want = (uint64_t)(v / nr);
                    break;
                }
                default: {
                    uint64_t v;
                    memcpy(&v, p, 8);
                    want = v / (uint64_t)nr;
                    break;
                }
                }
                unsigned char w[8];
                memcpy(w, &want, 8);
                if (is_nan_value((zc_dtype_t)dt, p))
                    cr_assert(is_nan_value((zc_dtype_t)dt, got), "%s avg of NaN", dname[dt]);
                else
                    cr_assert_eq(bits_of((zc_dtype_t)dt, got), bits_of((zc_dtype_t)dt, w),
                                 "%s avg over %d ranks, value %zu: 0x%" PRIx64 " gave 0x%" PRIx64
                                 ", expected 0x%" PRIx64,
                                 dname[dt], nr, i, bits_of((zc_dtype_t)dt, p),
                                 bits_of((zc_dtype_t)dt, got), bits_of((zc_dtype_t)dt, w));
            }
            free(buf);
            free(orig);
        }
}

/* An exact average: 1 + 2 + 3 over 3 ranks, and a value that needs a real division. */
Test(reduce, avg_divides_once)
{
    float s[65];
    for (int i = 0; i < 65; i++)
        s[i] = 6.0f;
    s[64] = 1.0f;
    zc_reduce_avg(ZC_DTYPE_F32, s, 65, 3);
    cr_assert_eq(s[0], 2.0f);
    cr_assert_eq(s[63], 2.0f);
    cr_assert_eq(s[64], 1.0f / 3.0f);
}

Test(reduce, unknown_dtype_or_op_writes_nothing)
{
    float dst[4] = {1, 2, 3, 4}, src[4] = {5, 6, 7, 8};
    zc_reduce_apply(ZC_DTYPE_COUNT, ZC_OP_SUM, dst, src, 4);
    zc_reduce_apply(ZC_DTYPE_F32, ZC_OP_COUNT, dst, src, 4);
    zc_reduce_apply(ZC_DTYPE_F32, (zc_redop_t)-1, dst, src, 4);
    zc_reduce_apply3((zc_dtype_t)-1, ZC_OP_SUM, dst, dst, src, 4);
    zc_reduce_avg(ZC_DTYPE_COUNT, dst, 4, 2);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(dst[i], (float)(i + 1));
    /* count 0 touches nothing, even through NULL */
    zc_reduce_apply(ZC_DTYPE_F32, ZC_OP_SUM, NULL, NULL, 0);
    zc_reduce_avg(ZC_DTYPE_F32, NULL, 0, 4);
}
