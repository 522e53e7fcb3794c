/*
 * Element-wise reduction kernels of the raw path (reduce.h), for every dtype
 * and operation.
 *
 * Vectorization. GCC at -O2 vectorizes only loops whose vector code replaces
 * the scalar loop entirely (-fvect-cost-model=very-cheap): a known trip count
 * that is a multiple of the vector width, and no run-time alias check. So the
 * kernels work on blocks of RED_BLOCK values through restrict pointers, and a
 * driver per (dtype, op) walks the blocks and finishes the tail with a scalar
 * loop. The driver picks a block kernel by how the operands alias (the header
 * allows out == a and/or out == b exactly, never a partial overlap); where the
 * output is also an input that no kernel form covers, the block of that input
 * is first copied to a local array, so restrict is never a lie.
 *
 * Floating-point min/max give NaN when either operand is NaN (the first NaN,
 * bit for bit) and order -0 below +0, as IEEE 754-2019 minimum/maximum, so
 * that the result does not depend on the operand order except for which of
 * two NaNs is kept. Integers wrap: sums and products are computed in the
 * unsigned type of the same width and converted back (GCC defines that
 * conversion as modular).
 *
 * f16/bf16 sums go through the common layer's half kernels (scalar, AVX2+F16C or
 * AVX-512 by zc_cpu_level(), identical results): widen, add in f32, round
 * once to nearest even, which is the exact sum correctly rounded
 * (common/half_kernels.h). Products are exact in f32 too (11 + 11 bits), so their
 * single rounding is also correct. min/max compare in f32 and return an
 * operand's bits unchanged.
 */
#include "collectives/reduce.h"

#include "common/half_kernels.h"
#include "common/half.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#define RED_BLOCK 64

typedef void (*red_fn)(void *out, const void *a, const void *b, size_t n);

/* ----------------------------------------------------------- element ops */

#define SUM_FLT(x, y) ((x) + (y))
#define PROD_FLT(x, y) ((x) * (y))
/* NaN first (either operand), then the order, then the sign of zero. */
#define MIN_FLT(x, y)                                                                              \
    ((x) != (x)   ? (x)                                                                            \
     : (y) != (y) ? (y)                                                                            \
     : (x) < (y)  ? (x)                                                                            \
     : (y) < (x)  ? (y)                                                                            \
     : signbit(x) ? (x)                                                                            \
                  : (y))
#define MAX_FLT(x, y)                                                                              \
    ((x) != (x)   ? (x)                                                                            \
     : (y) != (y) ? (y)                                                                            \
     : (x) > (y)  ? (x)                                                                            \
     : (y) > (x)  ? (y)                                                                            \
     : signbit(x) ? (y)                                                                            \
                  : (x))

#define MIN_INT(x, y) ((y) < (x) ? (y) : (x))
#define MAX_INT(x, y) ((y) > (x) ? (y) : (x))

/*
 * One (type, op): the two block kernels, the scalar tail and the driver.
 * T is the element type, E an expression of x and y (values of type T).
 */
#define DEFINE_RED(name, T, E)                                                                     \
    static void name##_blk2(T *restrict d, const T *restrict s)                                    \
    {                                                                                              \
        for (int j = 0; j < RED_BLOCK; j++) {                                                      \
            T x = d[j], y = s[j];                                                                  \
            d[j] = (T)(E);                                                                         \
        }                                                                                          \
    }                                                                                              \
    static void name##_blk3(T *restrict o, const T *restrict a, const T *restrict b)               \
    {                                                                                              \
        for (int j = 0; j < RED_BLOCK; j++) {                                                      \
            T x = a[j], y = b[j];                                                                  \
            o[j] = (T)(E);                                                                         \
        }                                                                                          \
    }                                                                                              \
    static void name(void *out_, const void *a_, const void *b_, size_t n)                         \
    {                                                                                              \
        T *out = out_;                                                                             \
        const T *a = a_, *b = b_;                                                                  \
        T tmp[RED_BLOCK];                                                                          \
        const size_t nb = n - n % RED_BLOCK;                                                       \
        size_t i = 0;                                                                              \
        if (out != a && out != b) {                                                                \
            for (; i < nb; i += RED_BLOCK)                                                         \
                name##_blk3(out + i, a + i, b + i);                                                \
        } else if (out == a && out != b) {                                                         \
            for (; i < nb; i += RED_BLOCK)                                                         \
                name##_blk2(out + i, b + i);                                                       \
        } else if (out != a) { /* out == b */                                                      \
            for (; i < nb; i += RED_BLOCK) {                                                       \
                memcpy(tmp, b + i, sizeof(tmp));                                                   \
                name##_blk3(out + i, a + i, tmp);                                                  \
            }                                                                                      \
        } else { /* out == a == b */                                                               \
            for (; i < nb; i += RED_BLOCK) {                                                       \
                memcpy(tmp, b + i, sizeof(tmp));                                                   \
                name##_blk2(out + i, tmp);                                                         \
            }                                                                                      \
        }                                                                                          \
        for (; i < n; i++) { /* both operands read before the store: any aliasing is fine */       \
            T x = a[i], y = b[i];                                                                  \
            out[i] = (T)(E);                                                                       \
        }                                                                                          \
    }

#define DEFINE_RED_FLT(sfx, T)                                                                     \
    DEFINE_RED(sum_##sfx, T, SUM_FLT(x, y))                                                        \
    DEFINE_RED(prod_##sfx, T, PROD_FLT(x, y))                                                      \
    DEFINE_RED(min_##sfx, T, MIN_FLT(x, y))                                                        \
    DEFINE_RED(max_##sfx, T, MAX_FLT(x, y))

/* UT: the unsigned type of T's width, in which sums and products wrap. */
#define DEFINE_RED_INT(sfx, T, UT)                                                                 \
    DEFINE_RED(sum_##sfx, T, (UT)((UT)x + (UT)y))                                                  \
    DEFINE_RED(prod_##sfx, T, (UT)((UT)x * (UT)y))                                                 \
    DEFINE_RED(min_##sfx, T, MIN_INT(x, y))                                                        \
    DEFINE_RED(max_##sfx, T, MAX_INT(x, y))

DEFINE_RED_FLT(f32, float)
DEFINE_RED_FLT(f64, double)
DEFINE_RED_INT(i8, int8_t, uint8_t)
DEFINE_RED_INT(u8, uint8_t, uint8_t)
DEFINE_RED_INT(i32, int32_t, uint32_t)
DEFINE_RED_INT(u32, uint32_t, uint32_t)
DEFINE_RED_INT(i64, int64_t, uint64_t)
DEFINE_RED_INT(u64, uint64_t, uint64_t)

/* ------------------------------------------------------------ f16, bf16 */

/*
 * Scalar: every value is read before it is written, so out may be a or b. The
 * conversions are half.h's reference ones (round to nearest even, NaN kept a
 * quiet NaN). min and max decide as MIN_FLT and MAX_FLT do, on the values, and
 * return the chosen operand's own bits.
 */
static inline uint16_t half_min(uint16_t hx, uint16_t hy, float x, float y)
{
    return x != x ? hx : y != y ? hy : x < y ? hx : y < x ? hy : signbit(x) ? hx : hy;
}

static inline uint16_t half_max(uint16_t hx, uint16_t hy, float x, float y)
{
    return x != x ? hx : y != y ? hy : x > y ? hx : y > x ? hy : signbit(x) ? hy : hx;
}

/* E: the result's bits from the operands' bits hx, hy and their values x, y. */
#define DEFINE_RED_HALF_OP(name, TO_F32, E)                                                        \
    static void name(void *out_, const void *a_, const void *b_, size_t n)                         \
    {                                                                                              \
        uint16_t *out = out_;                                                                      \
        const uint16_t *a = a_, *b = b_;                                                           \
        for (size_t i = 0; i < n; i++) {                                                           \
            uint16_t hx = a[i], hy = b[i];                                                         \
            float x = TO_F32(hx), y = TO_F32(hy);                                                  \
            out[i] = (E);                                                                          \
        }                                                                                          \
    }

#define DEFINE_RED_HALF(sfx, TO_F32, FROM_F32)                                                     \
    static void sum_##sfx(void *out, const void *a, const void *b, size_t n)                       \
    {                                                                                              \
        zc_half_kernels(ZC_HALF_##sfx##_FMT)->reduce(a, b, n, out);                                \
    }                                                                                              \
    DEFINE_RED_HALF_OP(prod_##sfx, TO_F32, FROM_F32(PROD_FLT(x, y)))                               \
    DEFINE_RED_HALF_OP(min_##sfx, TO_F32, half_min(hx, hy, x, y))                                  \
    DEFINE_RED_HALF_OP(max_##sfx, TO_F32, half_max(hx, hy, x, y))

#define ZC_HALF_f16_FMT ZC_HALF_F16
#define ZC_HALF_bf16_FMT ZC_HALF_BF16
DEFINE_RED_HALF(f16, zc_f16_to_f32, zc_f32_to_f16)
DEFINE_RED_HALF(bf16, zc_bf16_to_f32, zc_f32_to_bf16)

/* ---------------------------------------------------------------- tables */

/* Indexed by zc_dtype_t, then sum, prod, min, max (ZC_OP_AVG adds: sum). */
static const red_fn red_table[ZC_DTYPE_COUNT][4] = {
    [ZC_DTYPE_F32] = {sum_f32, prod_f32, min_f32, max_f32},
    [ZC_DTYPE_F16] = {sum_f16, prod_f16, min_f16, max_f16},
    [ZC_DTYPE_BF16] = {sum_bf16, prod_bf16, min_bf16, max_bf16},
    [ZC_DTYPE_F64] = {sum_f64, prod_f64, min_f64, max_f64},
    [ZC_DTYPE_I8] = {sum_i8, prod_i8, min_i8, max_i8},
    [ZC_DTYPE_U8] = {sum_u8, prod_u8, min_u8, max_u8},
    [ZC_DTYPE_I32] = {sum_i32, prod_i32, min_i32, max_i32},
    [ZC_DTYPE_U32] = {sum_u32, prod_u32, min_u32, max_u32},
    [ZC_DTYPE_I64] = {sum_i64, prod_i64, min_i64, max_i64},
    [ZC_DTYPE_U64] = {sum_u64, prod_u64, min_u64, max_u64},
};

static red_fn red_lookup(zc_dtype_t dtype, zc_redop_t op)
{
    if ((unsigned)dtype >= ZC_DTYPE_COUNT || (unsigned)op >= ZC_OP_COUNT)
        return NULL;
    return red_table[dtype][op == ZC_OP_AVG ? ZC_OP_SUM : op];
}

/*
 * Unknown dtypes and ops do nothing: the public entry points reject them before
 * any data moves (ZC_ERR_INVALID_ARG), so they cannot reach here from a call.
 */
void zc_reduce_apply3(zc_dtype_t dtype, zc_redop_t op, void *out, const void *a, const void *b,
                      size_t count)
{
    red_fn fn = red_lookup(dtype, op);
    if (fn != NULL && count > 0)
        fn(out, a, b, count);
}

void zc_reduce_apply(zc_dtype_t dtype, zc_redop_t op, void *dst, const void *src, size_t count)
{
    zc_reduce_apply3(dtype, op, dst, dst, src, count);
}

/* ------------------------------------------------------------------- avg */

#define DEFINE_AVG(sfx, T, DT)                                                                     \
    static void avg_blk_##sfx(T *restrict v, DT d)                                                 \
    {                                                                                              \
        for (int j = 0; j < RED_BLOCK; j++)                                                        \
            v[j] = (T)(v[j] / d);                                                                  \
    }                                                                                              \
    static void avg_##sfx(void *buf, size_t n, int nranks)                                         \
    {                                                                                              \
        T *v = buf;                                                                                \
        const DT d = (DT)nranks;                                                                   \
        size_t i = 0;                                                                              \
        for (; i + RED_BLOCK <= n; i += RED_BLOCK)                                                 \
            avg_blk_##sfx(v + i, d);                                                               \
        for (; i < n; i++)                                                                         \
            v[i] = (T)(v[i] / d);                                                                  \
    }

/*
 * Floating types divide (not multiply by 1/n, which rounds twice); C integer
 * division truncates toward zero. i8 promotes to int and the quotient always
 * fits back.
 */
DEFINE_AVG(f32, float, float)
DEFINE_AVG(f64, double, double)
DEFINE_AVG(i8, int8_t, int)
DEFINE_AVG(u8, uint8_t, unsigned)
DEFINE_AVG(i32, int32_t, int32_t)
DEFINE_AVG(u32, uint32_t, uint32_t)
DEFINE_AVG(i64, int64_t, int64_t)
DEFINE_AVG(u64, uint64_t, uint64_t)

static void avg_f16(void *buf, size_t n, int nranks)
{
    uint16_t *v = buf;
    for (size_t i = 0; i < n; i++)
        v[i] = zc_f32_to_f16(zc_f16_to_f32(v[i]) / (float)nranks);
}

static void avg_bf16(void *buf, size_t n, int nranks)
{
    uint16_t *v = buf;
    for (size_t i = 0; i < n; i++)
        v[i] = zc_f32_to_bf16(zc_bf16_to_f32(v[i]) / (float)nranks);
}

void zc_reduce_avg(zc_dtype_t dtype, void *buf, size_t count, int nranks)
{
    static void (*const avg_table[ZC_DTYPE_COUNT])(void *, size_t, int) = {
        [ZC_DTYPE_F32] = avg_f32, [ZC_DTYPE_F16] = avg_f16, [ZC_DTYPE_BF16] = avg_bf16,
        [ZC_DTYPE_F64] = avg_f64, [ZC_DTYPE_I8] = avg_i8,   [ZC_DTYPE_U8] = avg_u8,
        [ZC_DTYPE_I32] = avg_i32, [ZC_DTYPE_U32] = avg_u32, [ZC_DTYPE_I64] = avg_i64,
        [ZC_DTYPE_U64] = avg_u64,
    };
    /* dividing by 1 is the identity; nranks < 1 is no communicator */
    if ((unsigned)dtype >= ZC_DTYPE_COUNT || nranks <= 1 || count == 0)
        return;
    avg_table[dtype](buf, count, nranks);
}
