/*
 * The f16 and bf16 array kernels, scalar reference versions, and the choice of
 * a variant by CPU level (half_kernels.h). half_avx2.c and half_avx512.c must
 * match them byte for byte.
 *
 * NaNs are picked explicitly in reduce (a's, then b's, quieted): which
 * operand's payload a float addition keeps is up to the compiler's operand
 * order, and the SIMD variants must agree bit for bit. inf + -inf is the
 * processor's default NaN, which does not depend on the order.
 */
#include "common/half_kernels.h"

#include "common/half.h"

/* The three kernels of one format; QUIET is the bit that makes its NaN quiet. */
#define DEFINE_HALF_SCALAR(fmt, TO_F32, FROM_F32, IS_NAN, QUIET)                                   \
    static void fmt##_encode_scalar(const float *src, size_t n, uint8_t *dst)                      \
    {                                                                                              \
        for (size_t i = 0; i < n; i++)                                                             \
            zc_half_store_le16(dst + 2 * i, FROM_F32(src[i]));                                     \
    }                                                                                              \
    static void fmt##_decode_add_scalar(const uint8_t *src, size_t n, float alpha, float *dst)     \
    {                                                                                              \
        for (size_t i = 0; i < n; i++)                                                             \
            dst[i] += alpha * TO_F32(zc_half_load_le16(src + 2 * i));                              \
    }                                                                                              \
    static void fmt##_reduce_scalar(const uint8_t *a, const uint8_t *b, size_t n, uint8_t *dst)    \
    {                                                                                              \
        for (size_t i = 0; i < n; i++) {                                                           \
            uint16_t x = zc_half_load_le16(a + 2 * i), y = zc_half_load_le16(b + 2 * i);           \
            uint16_t r;                                                                            \
            if (IS_NAN(x))                                                                         \
                r = x | (QUIET);                                                                   \
            else if (IS_NAN(y))                                                                    \
                r = y | (QUIET);                                                                   \
            else                                                                                   \
                r = FROM_F32(TO_F32(x) + TO_F32(y));                                               \
            zc_half_store_le16(dst + 2 * i, r);                                                    \
        }                                                                                          \
    }

DEFINE_HALF_SCALAR(f16, zc_f16_to_f32, zc_f32_to_f16, zc_f16_bits_nan, 0x0200u)
DEFINE_HALF_SCALAR(bf16, zc_bf16_to_f32, zc_f32_to_bf16, zc_bf16_bits_nan, 0x0040u)

const zc_half_kernels_t zc_half_kernels_scalar[ZC_HALF_NFORMATS] = {
    [ZC_HALF_F16] =
        {
            .encode = f16_encode_scalar,
            .decode_add = f16_decode_add_scalar,
            .reduce = f16_reduce_scalar,
        },
    [ZC_HALF_BF16] =
        {
            .encode = bf16_encode_scalar,
            .decode_add = bf16_decode_add_scalar,
            .reduce = bf16_reduce_scalar,
        },
};

const zc_half_kernels_t *zc_half_kernels(zc_half_format_t format)
{
    static const zc_half_kernels_t *const variants[ZC_CPU_NLEVELS] = {
        [ZC_CPU_SCALAR] = zc_half_kernels_scalar,
#if defined(__x86_64__)
        [ZC_CPU_AVX2] = zc_half_kernels_avx2,
        [ZC_CPU_AVX512] = zc_half_kernels_avx512,
#endif
    };
    return &ZC_CPU_SELECT(variants)[format];
}
