/*
 * f16 and bf16 arrays to and from f32, per CPU level: narrowing, widening
 * with accumulation, and the sum of two half arrays. Arrays are count 2-byte
 * values, little-endian, at any alignment: the fp16/bf16 codecs' body
 * (codec/fp16, docs/codecs.md) and the raw path's f16/bf16 buffers
 * (collectives/reduce.c) alike.
 *
 * Every variant produces exactly the bytes and floats of the scalar one
 * (half_kernels.c), NaN payloads included: narrowing keeps a NaN's sign and
 * top payload bits and sets its quiet bit, as the hardware casts do.
 */
#ifndef ZC_COMMON_HALF_KERNELS_H
#define ZC_COMMON_HALF_KERNELS_H

#include "common/cpu.h"

#include <stddef.h>
#include <stdint.h>

typedef enum zc_half_format {
    ZC_HALF_F16 = 0,  /* IEEE binary16 */
    ZC_HALF_BF16 = 1, /* bfloat16 */
    ZC_HALF_NFORMATS
} zc_half_format_t;

typedef struct zc_half_kernels {
    /* dst[i] = src[i] rounded to nearest, ties to even (overflow: inf, NaN: quiet NaN). */
    void (*encode)(const float *src, size_t n, uint8_t *dst);
    /*
     * dst[i] += alpha * widen(src[i]), alpha +1 or -1 (so the product is exact).
     * When dst[i] and the value are both NaN, which payload survives is not
     * specified; with one NaN, that one (quiet).
     */
    void (*decode_add)(const uint8_t *src, size_t n, float alpha, float *dst);
    /*
     * dst[i] = round(widen(a[i]) + widen(b[i])); dst may be a or b (exactly, not
     * a partial overlap). A NaN in a wins over one in b (quieted); the f32 sum
     * of finite values is rounded once, and is then the exact sum correctly
     * rounded (Figueroa 1995: 24 >= 2p + 2 for both formats, p = 11 and 8).
     */
    void (*reduce)(const uint8_t *a, const uint8_t *b, size_t n, uint8_t *dst);
} zc_half_kernels_t;

/* Indexed by zc_half_format_t. */
extern const zc_half_kernels_t zc_half_kernels_scalar[ZC_HALF_NFORMATS];
#if defined(__x86_64__)
extern const zc_half_kernels_t zc_half_kernels_avx2[ZC_HALF_NFORMATS];
extern const zc_half_kernels_t zc_half_kernels_avx512[ZC_HALF_NFORMATS];
#endif

/* The kernels of @p format for the current CPU level (zc_cpu_level()). */
const zc_half_kernels_t *zc_half_kernels(zc_half_format_t format);

static inline uint16_t zc_half_load_le16(const uint8_t *p)
{
    return (uint16_t)(p[0] | p[1] << 8);
}

static inline void zc_half_store_le16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
}

/* Quiet NaN tests on the bit patterns. */
static inline int zc_f16_bits_nan(uint16_t h)
{
    return (h & 0x7fffu) > 0x7c00u;
}

static inline int zc_bf16_bits_nan(uint16_t h)
{
    return (h & 0x7fffu) > 0x7f80u;
}

#endif
