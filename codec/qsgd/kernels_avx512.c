/*
 * QSGD kernels for AVX-512 (F, BW, DQ, VL). Each produces exactly the bytes of
 * its scalar twin in kernels.c; tests/unit/codec/test_qsgd.c compares them.
 */
#include "codec/qsgd/qsgd.h"
#include "common/philox.h"

#include <immintrin.h>
#include <string.h>

/* 32x32 -> 64-bit products of 16 lanes: low halves returned, high halves in *hi. */
static inline __m512i mulhilo(__m512i a, __m512i m, __m512i *hi)
{
    __m512i even = _mm512_mul_epu32(a, m);
    __m512i odd = _mm512_mul_epu32(_mm512_srli_epi64(a, 32), m);
    *hi = _mm512_mask_blend_epi32(0xAAAA, _mm512_srli_epi64(even, 32), odd);
    return _mm512_mask_blend_epi32(0xAAAA, even, _mm512_slli_epi64(odd, 32));
}

/* Philox4x32-10 on 16 counters (c0 varies by lane); outputs in place. */
static inline void philox16(__m512i *c0, __m512i *c1, __m512i *c2, __m512i *c3, uint32_t k0,
                            uint32_t k1)
{
    const __m512i m0 = _mm512_set1_epi32((int)ZC_PHILOX_M0);
    const __m512i m1 = _mm512_set1_epi32((int)ZC_PHILOX_M1);

    for (int r = 0; r < ZC_PHILOX_ROUNDS; r++) {
        __m512i hi0, hi1;
        __m512i lo0 = mulhilo(*c0, m0, &hi0);
        __m512i lo1 = mulhilo(*c2, m1, &hi1);
        *c0 = _mm512_ternarylogic_epi32(hi1, *c1, _mm512_set1_epi32((int)k0), 0x96);
        *c2 = _mm512_ternarylogic_epi32(hi0, *c3, _mm512_set1_epi32((int)k1), 0x96);
        *c1 = lo1;
        *c3 = lo0;
        k0 += ZC_PHILOX_W0;
        k1 += ZC_PHILOX_W1;
    }
}

static inline __m512i quantize16(const float *x, __m512i u, __m512 inv, __m512 smax)
{
    const __m512 two32 = _mm512_set1_ps(4294967296.0f);
    __m512 xv = _mm512_loadu_ps(x);
    __m512 r = _mm512_min_ps(_mm512_mul_ps(_mm512_abs_ps(xv), inv), smax);
    __m512i k = _mm512_cvttps_epu32(r);
    __m512 frac = _mm512_sub_ps(r, _mm512_cvtepu32_ps(k));
    __m512i t = _mm512_cvttps_epu32(_mm512_mul_ps(frac, two32));
    k = _mm512_mask_add_epi32(k, _mm512_cmplt_epu32_mask(u, t), k, _mm512_set1_epi32(1));
    __mmask16 neg = _mm512_movepi32_mask(_mm512_castps_si512(xv));
    return _mm512_mask_sub_epi32(k, neg, _mm512_setzero_si512(), k);
}

static void quantize_avx512(const float *x, size_t n, uint64_t first, float inv, uint32_t s,
                            const zc_qsgd_rng_t *rng, int32_t *levels)
{
    size_t head = (size_t)((64 - (first & 63)) & 63);
    if (head > n)
        head = n;
    if (head)
        zc_qsgd_kernels_scalar.quantize(x, head, first, inv, s, rng, levels);

    const __m512 vinv = _mm512_set1_ps(inv), smax = _mm512_set1_ps((float)s);
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    size_t i = head;
    for (; i + 64 <= n; i += 64) {
        uint64_t group = (first + i) >> 6;
        __m512i c0 = _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)(group * 16)), lanes);
        __m512i c1 = _mm512_set1_epi32((int)rng->counter);
        __m512i c2 = _mm512_set1_epi32((int)rng->rank);
        __m512i c3 = _mm512_set1_epi32((int)rng->stream);
        philox16(&c0, &c1, &c2, &c3, rng->key[0], rng->key[1]);
        _mm512_storeu_si512(levels + i, quantize16(x + i, c0, vinv, smax));
        _mm512_storeu_si512(levels + i + 16, quantize16(x + i + 16, c1, vinv, smax));
        _mm512_storeu_si512(levels + i + 32, quantize16(x + i + 32, c2, vinv, smax));
        _mm512_storeu_si512(levels + i + 48, quantize16(x + i + 48, c3, vinv, smax));
    }
    if (i < n)
        zc_qsgd_kernels_scalar.quantize(x + i, n - i, first + i, inv, s, rng, levels + i);
}

static uint32_t max_abs_bits_avx512(const float *x, size_t n)
{
    const __m512i mask = _mm512_set1_epi32(0x7fffffff);
    __m512i m = _mm512_setzero_si512();
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        m = _mm512_max_epu32(m, _mm512_and_si512(_mm512_loadu_si512(x + i), mask));
    if (i < n) {
        __mmask16 k = (__mmask16)((1u << (n - i)) - 1);
        m = _mm512_max_epu32(m,
                             _mm512_maskz_and_epi32(k, _mm512_maskz_loadu_epi32(k, x + i), mask));
    }
    return (uint32_t)_mm512_reduce_max_epu32(m);
}

/* Same order as the scalar kernel: 16 lane sums, then halves added 8, 4, 2, 1. */
static double sum_squares_avx512(const float *x, size_t n)
{
    __m512d lo = _mm512_setzero_pd(), hi = _mm512_setzero_pd();
    size_t i = 0;
    for (; i < n; i += 16) {
        __mmask16 k = n - i >= 16 ? 0xffff : (__mmask16)((1u << (n - i)) - 1);
        __m512 v = _mm512_maskz_loadu_ps(k, x + i);
        __m512d a = _mm512_cvtps_pd(_mm512_castps512_ps256(v));
        __m512d b =
            _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
        lo = _mm512_fmadd_pd(a, a, lo); /* products of floats are exact in double */
        hi = _mm512_fmadd_pd(b, b, hi);
    }
    __m512d s8 = _mm512_add_pd(lo, hi);
    __m256d s4 = _mm256_add_pd(_mm512_castpd512_pd256(s8), _mm512_extractf64x4_pd(s8, 1));
    __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

static inline __m512i sign_magnitude(__m512i l, unsigned b)
{
    __m512i a = _mm512_abs_epi32(l);
    __mmask16 neg = _mm512_movepi32_mask(l);
    return _mm512_mask_or_epi32(a, neg, a, _mm512_set1_epi32(1 << (b - 1)));
}

static void pack_avx512(const int32_t *levels, size_t n, unsigned b, uint8_t *dst)
{
    size_t i = 0;

    if (b == 8) {
        for (; i + 16 <= n; i += 16)
            _mm_storeu_si128((__m128i *)(dst + i), _mm512_cvtepi32_epi8(sign_magnitude(
                                                       _mm512_loadu_si512(levels + i), 8)));
    } else if (b == 4) {
        for (; i + 16 <= n; i += 16) {
            __m128i c = _mm512_cvtepi32_epi8(sign_magnitude(_mm512_loadu_si512(levels + i), 4));
            __m128i p = _mm_or_si128(_mm_and_si128(c, _mm_set1_epi16(0x000f)),
                                     _mm_and_si128(_mm_srli_epi16(c, 4), _mm_set1_epi16(0x00f0)));
            _mm_storel_epi64((__m128i *)(dst + i / 2), _mm_cvtepi16_epi8(p));
        }
    } else if (b == 2) {
        for (; i + 16 <= n; i += 16) {
            __m128i c = _mm512_cvtepi32_epi8(sign_magnitude(_mm512_loadu_si512(levels + i), 2));
            __m128i p = _mm_or_si128(
                _mm_or_si128(_mm_and_si128(c, _mm_set1_epi32(0x03)),
                             _mm_and_si128(_mm_srli_epi32(c, 6), _mm_set1_epi32(0x0c))),
                _mm_or_si128(_mm_and_si128(_mm_srli_epi32(c, 12), _mm_set1_epi32(0x30)),
                             _mm_and_si128(_mm_srli_epi32(c, 18), _mm_set1_epi32(0xc0))));
            uint32_t out = (uint32_t)_mm_cvtsi128_si32(_mm_cvtepi32_epi8(p));
            memcpy(dst + i / 4, &out, 4);
        }
    }
    /* other widths, and the tail (i is a multiple of 16, so byte aligned here) */
    if (i < n)
        zc_qsgd_kernels_scalar.pack(levels + i, n - i, b, dst + i * b / 8);
}

static int unpack_add_avx512(const uint8_t *src, size_t n, unsigned b, uint32_t s, float unit,
                             float *dst)
{
    size_t i = 0;

    /* widths whose codes cannot exceed s need no range check */
    if ((b == 2 || b == 4 || b == 8) && s == (UINT32_C(1) << (b - 1)) - 1) {
        const __m512 vunit = _mm512_set1_ps(unit);
        const __m512i kmask = _mm512_set1_epi32((int)s);
        const __m512i shifts4 =
            _mm512_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28, 0, 4, 8, 12, 16, 20, 24, 28);
        const __m512i shifts2 =
            _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
        for (; i + 16 <= n; i += 16) {
            __m512i code;
            if (b == 8) {
                code = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
            } else if (b == 4) {
                uint32_t w[2];
                memcpy(w, src + i / 2, 8);
                __m512i v = _mm512_inserti64x4(_mm512_set1_epi32((int)w[0]),
                                               _mm256_set1_epi32((int)w[1]), 1);
                code = _mm512_srlv_epi32(v, shifts4);
            } else {
                uint32_t w;
                memcpy(&w, src + i / 4, 4);
                code = _mm512_srlv_epi32(_mm512_set1_epi32((int)w), shifts2);
            }
            __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(_mm512_and_si512(code, kmask)), vunit);
            __m512i sign = _mm512_slli_epi32(_mm512_srli_epi32(code, b - 1), 31);
            v = _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(v), sign));
            _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(dst + i), v));
        }
    }
    if (i < n)
        return zc_qsgd_kernels_scalar.unpack_add(src + i * b / 8, n - i, b, s, unit, dst + i);
    return 0;
}

static void add_avx512(const float *x, size_t n, float *dst)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(dst + i, _mm512_add_ps(_mm512_loadu_ps(dst + i), _mm512_loadu_ps(x + i)));
    if (i < n)
        zc_qsgd_kernels_scalar.add(x + i, n - i, dst + i);
}

const zc_qsgd_kernels_t zc_qsgd_kernels_avx512 = {
    .max_abs_bits = max_abs_bits_avx512,
    .sum_squares = sum_squares_avx512,
    .quantize = quantize_avx512,
    .pack = pack_avx512,
    .unpack_add = unpack_add_avx512,
    .add = add_avx512,
};
