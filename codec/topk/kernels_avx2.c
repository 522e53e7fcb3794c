/*
 * Top-k kernels for AVX2. Each produces exactly the output of its scalar twin
 * in kernels.c; tests/unit/codec/test_topk.c compares them.
 *
 * AVX2 has no compress: eight keys per compare give a mask, and the kept
 * lanes (1 - 0.99^8 = 8% of the masks at 1% density are not empty) are
 * written one by one from its set bits.
 */
#include "codec/topk/topk_int.h"

#include <immintrin.h>

static inline uint64_t put_lanes(unsigned m, uint64_t base, uint64_t *idx, uint64_t c)
{
    while (m) {
        idx[c++] = base + (unsigned)__builtin_ctz(m);
        m &= m - 1;
    }
    return c;
}

static inline unsigned kept_mask(__m256 v, __m256i t)
{
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    __m256i key = _mm256_and_si256(_mm256_castps_si256(v), abs_mask);
    /* key >= thr as unsigned: max(key, thr) == key */
    __m256i ge = _mm256_cmpeq_epi32(_mm256_max_epu32(key, t), key);
    return (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(ge));
}

/* Eight keys per compare, 64 values between stop tests; with @p res as collect_vectors (AVX-512).
 */
static inline uint64_t collect_vectors(const float *x, float *res, size_t n, uint64_t first,
                                       uint32_t thr, uint64_t *idx, uint64_t cap)
{
    const __m256i t = _mm256_set1_epi32((int)thr);
    uint64_t c = 0;
    size_t i = 0;

    while (i + 64 <= n) {
        for (unsigned u = 0; u < 64; u += 8, i += 8) {
            __m256 v = _mm256_loadu_ps(x + i);
            if (res) {
                v = _mm256_add_ps(_mm256_loadu_ps(res + i), v);
                _mm256_storeu_ps(res + i, v);
            }
            unsigned m = kept_mask(v, t);
            if (m)
                c = put_lanes(m, first + i, idx, c);
        }
        if (c > cap)
            return zc_topk_past_cap(x, res, i, n, c);
    }
    return zc_topk_collect_steps(x, res, i, n, first, thr, idx, c);
}

static uint64_t collect_avx2(const float *x, size_t n, uint64_t first, uint32_t thr, uint64_t *idx,
                             uint64_t cap)
{
    return collect_vectors(x, NULL, n, first, thr, idx, cap);
}

static uint64_t add_collect_avx2(const float *x, float *res, size_t n, uint64_t first, uint32_t thr,
                                 uint64_t *idx, uint64_t cap)
{
    return collect_vectors(x, res, n, first, thr, idx, cap);
}

/* Eight keys per compare, the lanes in the range written one by one, as put_lanes. */
static uint64_t bucket_avx2(const float *x, size_t n, uint32_t lo, uint32_t width, uint32_t *keys,
                            uint64_t cap)
{
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i l = _mm256_set1_epi32((int)lo);
    const __m256i w1 = _mm256_set1_epi32((int)(width - 1));
    uint64_t c = 0;
    size_t i = 0;

    if (width == 0)
        return 0;
    while (i + 64 <= n && c <= cap) {
        for (unsigned u = 0; u < 64; u += 8, i += 8) {
            __m256i key = _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), abs_mask);
            /* key - lo <= width - 1 as unsigned: min(d, width - 1) == d */
            __m256i d = _mm256_sub_epi32(key, l);
            __m256i in = _mm256_cmpeq_epi32(_mm256_min_epu32(d, w1), d);
            unsigned m = (unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(in));
            while (m) {
                keys[c++] = zc_topk_key(x[i + (unsigned)__builtin_ctz(m)]);
                m &= m - 1;
            }
        }
    }
    return c <= cap ? zc_topk_bucket_steps(x, i, n, lo, width, keys, c) : c;
}

const zc_topk_kernels_t zc_topk_kernels_avx2 = {
    .collect = collect_avx2,
    .add_collect = add_collect_avx2,
    .bucket = bucket_avx2,
};
