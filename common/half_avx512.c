/*
 * fp16 / bf16 kernels for AVX-512 (F, BW, DQ, VL). Each produces exactly the
 * bytes and floats of its scalar twin in half_kernels.c;
 * tests/unit/codec/test_half_codecs.c compares them.
 *
 * f32 -> f16 is vcvtps2ph with round-to-nearest-even, which is the scalar
 * zc_f32_to_f16 bit for bit (NaN: sign and top payload bits kept, quiet bit
 * set). f32 -> bf16 is integer arithmetic on the bits, not vcvtneps2bf16
 * (AVX512_BF16), which flushes subnormal inputs to zero.
 */
#include "common/half_kernels.h"

#include <immintrin.h>

#define RNE _MM_FROUND_TO_NEAREST_INT

static inline __mmask16 tail_mask(size_t left)
{
    return left >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << left) - 1);
}

/* ---------------------------------------------------------------- f16 */

static void f16_encode_avx512(const float *src, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m256i h0 = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), RNE);
        __m256i h1 = _mm512_cvtps_ph(_mm512_loadu_ps(src + i + 16), RNE);
        _mm512_storeu_si512(dst + 2 * i, _mm512_inserti64x4(_mm512_castsi256_si512(h0), h1, 1));
    }
    for (; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m256i h = _mm512_cvtps_ph(_mm512_maskz_loadu_ps(k, src + i), RNE);
        _mm256_mask_storeu_epi16(dst + 2 * i, k, h);
    }
}

typedef __m512 (*widen16_fn)(__m256i h);

/* dst += alpha * widen(src), 32 values a step, then masked 16; inlined per format. */
static inline __attribute__((always_inline)) void
run_decode_add(widen16_fn widen, const uint8_t *src, size_t n, float alpha, float *dst)
{
    const __m512 va = _mm512_set1_ps(alpha);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i h = _mm512_loadu_si512(src + 2 * i);
        __m512 v0 = widen(_mm512_castsi512_si256(h));
        __m512 v1 = widen(_mm512_extracti64x4_epi64(h, 1));
        _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(dst + i), _mm512_mul_ps(va, v0)));
        _mm512_storeu_ps(dst + i + 16,
                         _mm512_add_ps(_mm512_loadu_ps(dst + i + 16), _mm512_mul_ps(va, v1)));
    }
    for (; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        __m512 v = widen(_mm256_maskz_loadu_epi16(k, src + 2 * i));
        __m512 d = _mm512_maskz_loadu_ps(k, dst + i);
        _mm512_mask_storeu_ps(dst + i, k, _mm512_add_ps(d, _mm512_mul_ps(va, v)));
    }
}

static inline __m512 f16_widen16(__m256i h)
{
    return _mm512_cvtph_ps(h);
}

static void f16_decode_add_avx512(const uint8_t *src, size_t n, float alpha, float *dst)
{
    run_decode_add(f16_widen16, src, n, alpha, dst);
}

/* The NaN rule of the scalar reduce: x's NaN if any, else y's, quieted. */
static inline __m256i half_nan_pick(__m256i r, __m256i x, __m256i y, short inf, short quiet)
{
    const __m256i abs = _mm256_set1_epi16(0x7fff), vinf = _mm256_set1_epi16(inf);
    const __m256i q = _mm256_set1_epi16(quiet);
    __mmask16 ny = _mm256_cmpgt_epu16_mask(_mm256_and_si256(y, abs), vinf);
    __mmask16 nx = _mm256_cmpgt_epu16_mask(_mm256_and_si256(x, abs), vinf);
    r = _mm256_mask_blend_epi16(ny, r, _mm256_or_si256(y, q));
    return _mm256_mask_blend_epi16(nx, r, _mm256_or_si256(x, q));
}

typedef __m256i (*sum16_fn)(__m256i x, __m256i y);

/* dst = sum(a, b), 16 values a step, then masked; inlined per format. */
static inline __attribute__((always_inline)) void
run_reduce(sum16_fn sum, const uint8_t *a, const uint8_t *b, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(const void *)(a + 2 * i));
        __m256i y = _mm256_loadu_si256((const __m256i *)(const void *)(b + 2 * i));
        _mm256_storeu_si256((__m256i *)(void *)(dst + 2 * i), sum(x, y));
    }
    if (i < n) {
        __mmask16 k = tail_mask(n - i);
        __m256i x = _mm256_maskz_loadu_epi16(k, a + 2 * i);
        __m256i y = _mm256_maskz_loadu_epi16(k, b + 2 * i);
        _mm256_mask_storeu_epi16(dst + 2 * i, k, sum(x, y));
    }
}

static inline __m256i f16_sum16(__m256i x, __m256i y)
{
    __m256i r = _mm512_cvtps_ph(_mm512_add_ps(_mm512_cvtph_ps(x), _mm512_cvtph_ps(y)), RNE);
    return half_nan_pick(r, x, y, 0x7c00, 0x0200);
}

static void f16_reduce_avx512(const uint8_t *a, const uint8_t *b, size_t n, uint8_t *dst)
{
    run_reduce(f16_sum16, a, b, n, dst);
}

/* --------------------------------------------------------------- bf16 */

/*
 * zc_f32_to_bf16 on 16 lanes, leaving the result in the high half of each
 * 32-bit lane: u + 0x7fff + lsb (ties to even; overflow carries into inf),
 * and for a NaN u with the quiet bit (bit 22, the bf16's bit 6) set.
 */
static inline __m512i bf16_round_hi(__m512 x)
{
    const __m512i u = _mm512_castps_si512(x);
    const __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    const __m512i r = _mm512_add_epi32(u, _mm512_add_epi32(lsb, _mm512_set1_epi32(0x7fff)));
    const __mmask16 nan = _mm512_cmpgt_epu32_mask(
        _mm512_and_si512(u, _mm512_set1_epi32(0x7fffffff)), _mm512_set1_epi32(0x7f800000));
    return _mm512_mask_or_epi32(r, nan, u, _mm512_set1_epi32(0x00400000));
}

static inline __m256i bf16_round16(__m512 x)
{
    return _mm512_cvtepi32_epi16(_mm512_srli_epi32(bf16_round_hi(x), 16));
}

static inline __m512 bf16_widen16(__m256i h)
{
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

static void bf16_encode_avx512(const float *src, size_t n, uint8_t *dst)
{
    /* word j of the result is the high half of lane j of (x0 : x1) */
    const __m512i odd =
        _mm512_set_epi16(63, 61, 59, 57, 55, 53, 51, 49, 47, 45, 43, 41, 39, 37, 35, 33, 31, 29, 27,
                         25, 23, 21, 19, 17, 15, 13, 11, 9, 7, 5, 3, 1);
    size_t i = 0;
    for (; i + 32 <= n; i += 32) {
        __m512i r0 = bf16_round_hi(_mm512_loadu_ps(src + i));
        __m512i r1 = bf16_round_hi(_mm512_loadu_ps(src + i + 16));
        _mm512_storeu_si512(dst + 2 * i, _mm512_permutex2var_epi16(r0, odd, r1));
    }
    for (; i < n; i += 16) {
        __mmask16 k = tail_mask(n - i);
        _mm256_mask_storeu_epi16(dst + 2 * i, k, bf16_round16(_mm512_maskz_loadu_ps(k, src + i)));
    }
}

static void bf16_decode_add_avx512(const uint8_t *src, size_t n, float alpha, float *dst)
{
    run_decode_add(bf16_widen16, src, n, alpha, dst);
}

static inline __m256i bf16_sum16(__m256i x, __m256i y)
{
    __m256i r = bf16_round16(_mm512_add_ps(bf16_widen16(x), bf16_widen16(y)));
    return half_nan_pick(r, x, y, 0x7f80, 0x0040);
}

static void bf16_reduce_avx512(const uint8_t *a, const uint8_t *b, size_t n, uint8_t *dst)
{
    run_reduce(bf16_sum16, a, b, n, dst);
}

const zc_half_kernels_t zc_half_kernels_avx512[ZC_HALF_NFORMATS] = {
    [ZC_HALF_F16] =
        {
            .encode = f16_encode_avx512,
            .decode_add = f16_decode_add_avx512,
            .reduce = f16_reduce_avx512,
        },
    [ZC_HALF_BF16] =
        {
            .encode = bf16_encode_avx512,
            .decode_add = bf16_decode_add_avx512,
            .reduce = bf16_reduce_avx512,
        },
};
