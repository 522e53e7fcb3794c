/*
 * fp16 / bf16 kernels for AVX2 + F16C + FMA. Each produces exactly the bytes
 * and floats of its scalar twin in fp16.c; tests/unit/codec/
 * test_half_codecs.c compares them.
 *
 * f32 -> f16 is vcvtps2ph with round-to-nearest-even, which is the scalar
 * zc_f32_to_f16 bit for bit (NaN: sign and top payload bits kept, quiet bit
 * set). f32 -> bf16 is integer arithmetic on the bits (there is no AVX2
 * instruction for it). The tails (fewer than 16 values) go through a
 * zero-padded block on the stack and the same vector code.
 */
#include "common/half_kernels.h"

#include <immintrin.h>
#include <string.h>

#define RNE _MM_FROUND_TO_NEAREST_INT

/* Values per block: every kernel works on 16 at a time. */
#define BLOCK 16

static inline __m256i load256(const void *p)
{
    return _mm256_loadu_si256((const __m256i *)p);
}

static inline void store256(void *p, __m256i v)
{
    _mm256_storeu_si256((__m256i *)p, v);
}

/*
 * The NaN rule of the scalar reduce: x's NaN if any, else y's, quieted. The
 * magnitudes are at most 0x7fff, so the signed 16-bit compare is unsigned.
 */
static inline __m256i half_nan_pick(__m256i r, __m256i x, __m256i y, short inf, short quiet)
{
    const __m256i abs = _mm256_set1_epi16(0x7fff), vinf = _mm256_set1_epi16(inf);
    const __m256i q = _mm256_set1_epi16(quiet);
    __m256i ny = _mm256_cmpgt_epi16(_mm256_and_si256(y, abs), vinf);
    __m256i nx = _mm256_cmpgt_epi16(_mm256_and_si256(x, abs), vinf);
    r = _mm256_blendv_epi8(r, _mm256_or_si256(y, q), ny);
    return _mm256_blendv_epi8(r, _mm256_or_si256(x, q), nx);
}

/* dst[0..16) += alpha * (v0 : v1), as the scalar dst[i] += alpha * v (no fused multiply-add). */
static inline void add_scaled16(float *dst, __m256 va, __m256 v0, __m256 v1)
{
    _mm256_storeu_ps(dst, _mm256_add_ps(_mm256_loadu_ps(dst), _mm256_mul_ps(va, v0)));
    _mm256_storeu_ps(dst + 8, _mm256_add_ps(_mm256_loadu_ps(dst + 8), _mm256_mul_ps(va, v1)));
}

/*
 * Drivers over whole blocks, then the tail through a zero-padded block on the
 * stack; always inlined, so the block function is a constant in each caller.
 */
typedef void (*encode16_fn)(const float *src, uint8_t *dst);
typedef void (*decode_add16_fn)(const uint8_t *src, __m256 va, float *dst);
typedef void (*reduce16_fn)(const uint8_t *a, const uint8_t *b, uint8_t *dst);

static inline __attribute__((always_inline)) void run_encode(encode16_fn block, const float *src,
                                                             size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        block(src + i, dst + 2 * i);
    if (i < n) {
        float s[BLOCK] = {0};
        uint8_t d[2 * BLOCK];
        memcpy(s, src + i, (n - i) * sizeof(float));
        block(s, d);
        memcpy(dst + 2 * i, d, 2 * (n - i));
    }
}

static inline __attribute__((always_inline)) void
run_decode_add(decode_add16_fn block, const uint8_t *src, size_t n, float alpha, float *dst)
{
    const __m256 va = _mm256_set1_ps(alpha);
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        block(src + 2 * i, va, dst + i);
    if (i < n) {
        uint8_t s[2 * BLOCK] = {0};
        float d[BLOCK] = {0};
        memcpy(s, src + 2 * i, 2 * (n - i));
        memcpy(d, dst + i, (n - i) * sizeof(float));
        block(s, va, d);
        memcpy(dst + i, d, (n - i) * sizeof(float));
    }
}

static inline __attribute__((always_inline)) void
run_reduce(reduce16_fn block, const uint8_t *a, const uint8_t *b, size_t n, uint8_t *dst)
{
    size_t i = 0;
    for (; i + BLOCK <= n; i += BLOCK)
        block(a + 2 * i, b + 2 * i, dst + 2 * i);
    if (i < n) {
        uint8_t x[2 * BLOCK] = {0}, y[2 * BLOCK] = {0}, d[2 * BLOCK];
        memcpy(x, a + 2 * i, 2 * (n - i));
        memcpy(y, b + 2 * i, 2 * (n - i));
        block(x, y, d);
        memcpy(dst + 2 * i, d, 2 * (n - i));
    }
}

/* ---------------------------------------------------------------- f16 */

static inline void f16_encode16(const float *src, uint8_t *dst)
{
    __m128i h0 = _mm256_cvtps_ph(_mm256_loadu_ps(src), RNE);
    __m128i h1 = _mm256_cvtps_ph(_mm256_loadu_ps(src + 8), RNE);
    store256(dst, _mm256_set_m128i(h1, h0));
}

static inline void f16_decode_add16(const uint8_t *src, __m256 va, float *dst)
{
    __m256i h = load256(src);
    __m256 v0 = _mm256_cvtph_ps(_mm256_castsi256_si128(h));
    __m256 v1 = _mm256_cvtph_ps(_mm256_extracti128_si256(h, 1));
    add_scaled16(dst, va, v0, v1);
}

static inline void f16_reduce16(const uint8_t *a, const uint8_t *b, uint8_t *dst)
{
    __m256i x = load256(a), y = load256(b);
    __m256 s0 = _mm256_add_ps(_mm256_cvtph_ps(_mm256_castsi256_si128(x)),
                              _mm256_cvtph_ps(_mm256_castsi256_si128(y)));
    __m256 s1 = _mm256_add_ps(_mm256_cvtph_ps(_mm256_extracti128_si256(x, 1)),
                              _mm256_cvtph_ps(_mm256_extracti128_si256(y, 1)));
    __m256i r = _mm256_set_m128i(_mm256_cvtps_ph(s1, RNE), _mm256_cvtps_ph(s0, RNE));
    store256(dst, half_nan_pick(r, x, y, 0x7c00, 0x0200));
}

/* --------------------------------------------------------------- bf16 */

/*
 * zc_f32_to_bf16 on 8 lanes, the result in the low half of each 32-bit lane:
 * (u + 0x7fff + lsb) >> 16 (ties to even; overflow carries into inf), and for
 * a NaN u with the quiet bit (bit 22, the bf16's bit 6) set. The magnitude
 * is below 2^31, so the signed compare is unsigned.
 */
static inline __m256i bf16_round8(__m256 x)
{
    const __m256i u = _mm256_castps_si256(x);
    const __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    const __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, _mm256_set1_epi32(0x7fffffff)),
                                           _mm256_set1_epi32(0x7f800000));
    const __m256i q = _mm256_or_si256(u, _mm256_set1_epi32(0x00400000));
    return _mm256_srli_epi32(_mm256_blendv_epi8(r, q, nan), 16);
}

/* The 16 bf16 values of (x0 : x1), in order. */
static inline __m256i bf16_round16(__m256 x0, __m256 x1)
{
    /* packus works per 128-bit lane: (x0 lo, x1 lo, x0 hi, x1 hi) */
    __m256i p = _mm256_packus_epi32(bf16_round8(x0), bf16_round8(x1));
    return _mm256_permute4x64_epi64(p, _MM_SHUFFLE(3, 1, 2, 0));
}

static inline __m256 bf16_widen8(__m128i h)
{
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline void bf16_encode16(const float *src, uint8_t *dst)
{
    store256(dst, bf16_round16(_mm256_loadu_ps(src), _mm256_loadu_ps(src + 8)));
}

static inline void bf16_decode_add16(const uint8_t *src, __m256 va, float *dst)
{
    __m256i h = load256(src);
    __m256 v0 = bf16_widen8(_mm256_castsi256_si128(h));
    __m256 v1 = bf16_widen8(_mm256_extracti128_si256(h, 1));
    add_scaled16(dst, va, v0, v1);
}

static inline void bf16_reduce16(const uint8_t *a, const uint8_t *b, uint8_t *dst)
{
    __m256i x = load256(a), y = load256(b);
    __m256 s0 = _mm256_add_ps(bf16_widen8(_mm256_castsi256_si128(x)),
                              bf16_widen8(_mm256_castsi256_si128(y)));
    __m256 s1 = _mm256_add_ps(bf16_widen8(_mm256_extracti128_si256(x, 1)),
                              bf16_widen8(_mm256_extracti128_si256(y, 1)));
    store256(dst, half_nan_pick(bf16_round16(s0, s1), x, y, 0x7f80, 0x0040));
}

static void f16_encode_avx2(const float *src, size_t n, uint8_t *dst)
{
    run_encode(f16_encode16, src, n, dst);
}

static void f16_decode_add_avx2(const uint8_t *src, size_t n, float alpha, float *dst)
{
    run_decode_add(f16_decode_add16, src, n, alpha, dst);
}

static void f16_reduce_avx2(const uint8_t *a, const uint8_t *b, size_t n, uint8_t *dst)
{
    run_reduce(f16_reduce16, a, b, n, dst);
}

static void bf16_encode_avx2(const float *src, size_t n, uint8_t *dst)
{
    run_encode(bf16_encode16, src, n, dst);
}

static void bf16_decode_add_avx2(const uint8_t *src, size_t n, float alpha, float *dst)
{
    run_decode_add(bf16_decode_add16, src, n, alpha, dst);
}

static void bf16_reduce_avx2(const uint8_t *a, const uint8_t *b, size_t n, uint8_t *dst)
{
    run_reduce(bf16_reduce16, a, b, n, dst);
}

const zc_half_kernels_t zc_half_kernels_avx2[ZC_HALF_NFORMATS] = {
    [ZC_HALF_F16] =
        {
            .encode = f16_encode_avx2,
            .decode_add = f16_decode_add_avx2,
            .reduce = f16_reduce_avx2,
        },
    [ZC_HALF_BF16] =
        {
            .encode = bf16_encode_avx2,
            .decode_add = bf16_decode_add_avx2,
            .reduce = bf16_reduce_avx2,
        },
};
