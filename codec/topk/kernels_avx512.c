/*
 * Top-k kernels for AVX-512 (F, BW, DQ, VL). Each produces exactly the output
 * of its scalar twin in kernels.c; tests/unit/codec/test_topk.c compares them.
 */
#include "codec/topk/topk_int.h"

#include <immintrin.h>

/*
 * Sixteen keys per compare; a vector with kept values (1 - 0.99^16 = 15% of
 * them at 1% density) compresses its lanes' positions into idx, 64-bit, as two
 * halves of eight. Full vectors are stored, up to 16 entries past the count.
 * With @p res (add_collect) each vector of sums res + x is stored as it is
 * made: one pass reads both and writes the residual.
 */
static inline uint64_t collect_vectors(const float *x, float *res, size_t n, uint64_t first,
                                       uint32_t thr, uint64_t *idx, uint64_t cap)
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512i t = _mm512_set1_epi32((int)thr);
    const __m512i step = _mm512_set1_epi64(16);
    __m512i lo = _mm512_add_epi64(_mm512_set1_epi64((long long)first),
                                  _mm512_setr_epi64(0, 1, 2, 3, 4, 5, 6, 7));
    __m512i hi = _mm512_add_epi64(lo, _mm512_set1_epi64(8));
    uint64_t c = 0;
    size_t i = 0;

    while (i + 64 <= n) {
        for (int u = 0; u < 4; u++, i += 16) {
            __m512 v = _mm512_loadu_ps(x + i);
            if (res) {
                v = _mm512_add_ps(_mm512_loadu_ps(res + i), v);
                _mm512_storeu_ps(res + i, v);
            }
            __mmask16 m =
                _mm512_cmpge_epu32_mask(_mm512_and_si512(_mm512_castps_si512(v), abs_mask), t);
            if (m) {
                __m512i a = _mm512_maskz_compress_epi64((__mmask8)m, lo);
                __m512i b = _mm512_maskz_compress_epi64((__mmask8)(m >> 8), hi);
                _mm512_storeu_si512((void *)(idx + c), a);
                c += (unsigned)__builtin_popcount(m & 0xffu);
                _mm512_storeu_si512((void *)(idx + c), b);
                c += (unsigned)__builtin_popcount(m >> 8);
            }
            lo = _mm512_add_epi64(lo, step);
            hi = _mm512_add_epi64(hi, step);
        }
        if (c > cap)
            return zc_topk_past_cap(x, res, i, n, c);
    }
    return zc_topk_collect_steps(x, res, i, n, first, thr, idx, c);
}

static uint64_t collect_avx512(const float *x, size_t n, uint64_t first, uint32_t thr,
                               uint64_t *idx, uint64_t cap)
{
    return collect_vectors(x, NULL, n, first, thr, idx, cap);
}

static uint64_t add_collect_avx512(const float *x, float *res, size_t n, uint64_t first,
                                   uint32_t thr, uint64_t *idx, uint64_t cap)
{
    return collect_vectors(x, res, n, first, thr, idx, cap);
}

/*
 * Sixteen keys per compare; the keys in the range are compressed and stored as
 * a full vector, up to 16 entries past the count.
 */
static uint64_t bucket_avx512(const float *x, size_t n, uint32_t lo, uint32_t width, uint32_t *keys,
                              uint64_t cap)
{
    const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
    const __m512i l = _mm512_set1_epi32((int)lo);
    const __m512i w = _mm512_set1_epi32((int)width);
    uint64_t c = 0;
    size_t i = 0;

    while (i + 64 <= n && c <= cap) {
        for (int u = 0; u < 4; u++, i += 16) {
            __m512i key = _mm512_and_si512(_mm512_loadu_si512((const void *)(x + i)), abs_mask);
            __mmask16 m = _mm512_cmplt_epu32_mask(_mm512_sub_epi32(key, l), w);
            _mm512_storeu_si512((void *)(keys + c), _mm512_maskz_compress_epi32(m, key));
            c += (unsigned)__builtin_popcount(m);
        }
    }
    return c <= cap ? zc_topk_bucket_steps(x, i, n, lo, width, keys, c) : c;
}

const zc_topk_kernels_t zc_topk_kernels_avx512 = {
    .collect = collect_avx512,
    .add_collect = add_collect_avx512,
    .bucket = bucket_avx512,
};
