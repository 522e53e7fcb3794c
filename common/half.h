/*
 * IEEE binary16 and bfloat16 conversions, scalar reference versions.
 * Narrowing rounds to nearest, ties to even, and keeps NaN a NaN (quiet) and
 * overflow an infinity, as a hardware cast does.
 */
#ifndef ZC_COMMON_HALF_H
#define ZC_COMMON_HALF_H

#include "common/compiler.h"

#include <stdint.h>
#include <string.h>

static inline ZC_HD uint32_t zc_f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

static inline ZC_HD float zc_f32_from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static inline ZC_HD float zc_bf16_to_f32(uint16_t h)
{
    return zc_f32_from_bits((uint32_t)h << 16);
}

static inline ZC_HD uint16_t zc_f32_to_bf16(float f)
{
    uint32_t u = zc_f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((u >> 16) | 0x0040u); /* quiet NaN, sign and payload top kept */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static inline ZC_HD float zc_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;

    if (exp == 0x1f) /* inf or nan */
        return zc_f32_from_bits(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return zc_f32_from_bits(sign);
        /* subnormal: value = man * 2^-24, exact in f32 */
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return zc_f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

static inline ZC_HD uint16_t zc_f32_to_f16(float f)
{
    uint32_t u = zc_f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    uint32_t a = u & 0x7fffffffu;

    if (a > 0x7f800000u)
        return (uint16_t)(sign | 0x7e00u | ((a >> 13) & 0x1ffu));
    if (a >= 0x477ff000u) /* rounds to >= 65520: overflow to inf */
        return (uint16_t)(sign | 0x7c00u);
    if (a < 0x38800000u) { /* below 2^-14: subnormal or zero */
        /* f * 2^24 rounded to nearest even integer is the subnormal mantissa;
         * adding 0.5 (as 2^-1 * 2^24 scaled) via the float unit does RNE. */
        float v = zc_f32_from_bits(a) + 0.5f;
        return (uint16_t)(sign | (uint16_t)(zc_f32_bits(v) - 0x3f000000u));
    }
    uint32_t mant_odd = (a >> 13) & 1u;
    a += 0xc8000fffu + mant_odd; /* rebias exponent (-112 << 23) and round */
    return (uint16_t)(sign | (uint16_t)(a >> 13));
}

#endif
