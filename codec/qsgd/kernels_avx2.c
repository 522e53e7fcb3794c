/*
 * QSGD kernels for AVX2 + FMA + BMI2. Each produces exactly the bytes of its
 * scalar twin in kernels.c; tests/unit/codec/test_qsgd.c compares them.
 */
#include "codec/qsgd/qsgd.h"
#include "common/philox.h"

#include <immintrin.h>
#include <string.h>

/* 32x32 -> 64-bit products of 8 lanes: low halves returned, high halves in *hi. */
static inline __m256i mulhilo(__m256i a, __m256i m, __m256i *hi)
{
    __m256i even = _mm256_mul_epu32(a, m);
    __m256i odd = _mm256_mul_epu32(_mm256_srli_epi64(a, 32), m);
    *hi = _mm256_blend_epi32(_mm256_srli_epi64(even, 32), odd, 0xAA);
    return _mm256_blend_epi32(even, _mm256_slli_epi64(odd, 32), 0xAA);
}

/* Philox4x32-10 on 8 counters (c0 varies by lane); outputs in place. */
static inline void philox8(__m256i *c0, __m256i *c1, __m256i *c2, __m256i *c3, uint32_t k0,
                           uint32_t k1)
{
    const __m256i m0 = _mm256_set1_epi32((int)ZC_PHILOX_M0);
    const __m256i m1 = _mm256_set1_epi32((int)ZC_PHILOX_M1);

    for (int r = 0; r < ZC_PHILOX_ROUNDS; r++) {
        __m256i hi0, hi1;
        __m256i lo0 = mulhilo(*c0, m0, &hi0);
        __m256i lo1 = mulhilo(*c2, m1, &hi1);
        *c0 = _mm256_xor_si256(_mm256_xor_si256(hi1, *c1), _mm256_set1_epi32((int)k0));
        *c2 = _mm256_xor_si256(_mm256_xor_si256(hi0, *c3), _mm256_set1_epi32((int)k1));
        *c1 = lo1;
        *c3 = lo0;
        k0 += ZC_PHILOX_W0;
        k1 += ZC_PHILOX_W1;
    }
}

/*
 * Truncating float -> uint32 for v in [0, 2^32) (AVX2 converts to signed only):
 * values from 2^31 up lose 2^31 first (exact: their ulp is at least 2^8) and
 * get it back as the top bit.
 */
static inline __m256i cvtt_epu32(__m256 v)
{
    const __m256 two31 = _mm256_set1_ps(2147483648.0f);
    __m256 big = _mm256_cmp_ps(v, two31, _CMP_GE_OQ);
    __m256i i = _mm256_cvttps_epi32(_mm256_sub_ps(v, _mm256_and_ps(big, two31)));
    return _mm256_xor_si256(i, _mm256_slli_epi32(_mm256_castps_si256(big), 31));
}

static inline __m256i quantize8(const float *x, __m256i u, __m256 inv, __m256 smax)
{
    const __m256 two32 = _mm256_set1_ps(4294967296.0f);
    const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff);
    const __m256i top = _mm256_set1_epi32(INT32_MIN);
    __m256 xv = _mm256_loadu_ps(x);
    __m256 ax = _mm256_and_ps(xv, _mm256_castsi256_ps(abs_mask));
    __m256 r = _mm256_min_ps(_mm256_mul_ps(ax, inv), smax);
    /* (float)(uint32_t)r == trunc(r) exactly: r's integer part is a float */
    __m256 kf = _mm256_round_ps(r, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
    __m256i k = cvtt_epu32(kf);
    __m256i t = cvtt_epu32(_mm256_mul_ps(_mm256_sub_ps(r, kf), two32));
    /* u < t unsigned: compare with the top bits flipped; the mask is -1 where it holds */
    __m256i lt = _mm256_cmpgt_epi32(_mm256_xor_si256(t, top), _mm256_xor_si256(u, top));
    k = _mm256_sub_epi32(k, lt);
    __m256i neg = _mm256_srai_epi32(_mm256_castps_si256(xv), 31);
    return _mm256_sub_epi32(_mm256_xor_si256(k, neg), neg);
}

static void quantize_avx2(const float *x, size_t n, uint64_t first, float inv, uint32_t s,
                          const zc_qsgd_rng_t *rng, int32_t *levels)
{
    size_t head = (size_t)((64 - (first & 63)) & 63);
    if (head > n)
        head = n;
    if (head)
        zc_qsgd_kernels_scalar.quantize(x, head, first, inv, s, rng, levels);

    const __m256 vinv = _mm256_set1_ps(inv), smax = _mm256_set1_ps((float)s);
    const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    size_t i = head;
    for (; i + 64 <= n; i += 64) {
        uint64_t group = (first + i) >> 6;
        /* two halves of the block group: Philox lanes 0..7, then 8..15 */
        for (int h = 0; h < 2; h++) {
            __m256i c0 = _mm256_add_epi32(
                _mm256_set1_epi32((int)((uint32_t)(group * 16) + 8 * (uint32_t)h)), lanes);
            __m256i c1 = _mm256_set1_epi32((int)rng->counter);
            __m256i c2 = _mm256_set1_epi32((int)rng->rank);
            __m256i c3 = _mm256_set1_epi32((int)rng->stream);
            philox8(&c0, &c1, &c2, &c3, rng->key[0], rng->key[1]);
            size_t o = i + 8 * (size_t)h;
            _mm256_storeu_si256((__m256i *)(levels + o), quantize8(x + o, c0, vinv, smax));
            _mm256_storeu_si256((__m256i *)(levels + o + 16),
                                quantize8(x + o + 16, c1, vinv, smax));
            _mm256_storeu_si256((__m256i *)(levels + o + 32),
                                quantize8(x + o + 32, c2, vinv, smax));
            _mm256_storeu_si256((__m256i *)(levels + o + 48),
                                quantize8(x + o + 48, c3, vinv, smax));
        }
    }
    if (i < n)
        zc_qsgd_kernels_scalar.quantize(x + i, n - i, first + i, inv, s, rng, levels + i);
}

static uint32_t max_abs_bits_avx2(const float *x, size_t n)
{
    const __m256i mask = _mm256_set1_epi32(0x7fffffff);
    __m256i m = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        m = _mm256_max_epu32(m,
                             _mm256_and_si256(_mm256_loadu_si256((const __m256i *)(x + i)), mask));
    __m128i m4 = _mm_max_epu32(_mm256_castsi256_si128(m), _mm256_extracti128_si256(m, 1));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(1, 0, 3, 2)));
    m4 = _mm_max_epu32(m4, _mm_shuffle_epi32(m4, _MM_SHUFFLE(2, 3, 0, 1)));
    uint32_t best = (uint32_t)_mm_cvtsi128_si32(m4);
    uint32_t rest = zc_qsgd_kernels_scalar.max_abs_bits(x + i, n - i);
    return rest > best ? rest : best;
}

/* Same order as the scalar kernel: 16 lane sums, then halves added 8, 4, 2, 1. */
static double sum_squares_avx2(const float *x, size_t n)
{
    __m256d a0 = _mm256_setzero_pd(), a1 = a0, a2 = a0, a3 = a0;
    size_t i = 0;
    for (; i < n; i += 16) {
        float buf[16];
        const float *p = x + i;
        if (n - i < 16) {
            /* lanes past the end add +0.0, which leaves their (non-negative) sums as they are */
            memset(buf, 0, sizeof(buf));
            memcpy(buf, p, (n - i) * sizeof(float));
            p = buf;
        }
        __m256d v0 = _mm256_cvtps_pd(_mm_loadu_ps(p));
        __m256d v1 = _mm256_cvtps_pd(_mm_loadu_ps(p + 4));
        __m256d v2 = _mm256_cvtps_pd(_mm_loadu_ps(p + 8));
        __m256d v3 = _mm256_cvtps_pd(_mm_loadu_ps(p + 12));
        a0 = _mm256_fmadd_pd(v0, v0, a0); /* products of floats are exact in double */
        a1 = _mm256_fmadd_pd(v1, v1, a1);
        a2 = _mm256_fmadd_pd(v2, v2, a2);
        a3 = _mm256_fmadd_pd(v3, v3, a3);
    }
    __m256d s8lo = _mm256_add_pd(a0, a2), s8hi = _mm256_add_pd(a1, a3); /* lanes 0..3, 4..7 */
    __m256d s4 = _mm256_add_pd(s8lo, s8hi);
    __m128d s2 = _mm_add_pd(_mm256_castpd256_pd128(s4), _mm256_extractf128_pd(s4, 1));
    return _mm_cvtsd_f64(_mm_add_sd(s2, _mm_unpackhi_pd(s2, s2)));
}

static inline __m256i sign_magnitude(__m256i l, unsigned b)
{
    __m256i neg = _mm256_srai_epi32(l, 31);
    __m256i sign = _mm256_and_si256(neg, _mm256_set1_epi32(1 << (b - 1)));
    return _mm256_or_si256(_mm256_abs_epi32(l), sign);
}

/* The low bytes of the 16 sign-magnitude codes of levels[0..15], in order. */
static inline __m128i codes16(const int32_t *levels, unsigned b)
{
    const __m256i low = _mm256_set1_epi32(0xff);
    __m256i a =
        _mm256_and_si256(sign_magnitude(_mm256_loadu_si256((const __m256i *)levels), b), low);
    __m256i c =
        _mm256_and_si256(sign_magnitude(_mm256_loadu_si256((const __m256i *)(levels + 8)), b), low);
    __m256i w = _mm256_permute4x64_epi64(_mm256_packus_epi32(a, c), _MM_SHUFFLE(3, 1, 2, 0));
    return _mm_packus_epi16(_mm256_castsi256_si128(w), _mm256_extracti128_si256(w, 1));
}

static void pack_avx2(const int32_t *levels, size_t n, unsigned b, uint8_t *dst)
{
    size_t i = 0;

    if (b == 2 || b == 4 || b == 8) {
        const uint64_t field = b == 2 ? UINT64_C(0x0303030303030303) : UINT64_C(0x0f0f0f0f0f0f0f0f);
        for (; i + 16 <= n; i += 16) {
            __m128i c = codes16(levels + i, b);
            if (b == 8) {
                _mm_storeu_si128((__m128i *)(dst + i), c);
                continue;
            }
            uint64_t lo = _pext_u64((uint64_t)_mm_cvtsi128_si64(c), field);
            uint64_t hi = _pext_u64((uint64_t)_mm_extract_epi64(c, 1), field);
            if (b == 4) {
                uint64_t out = lo | hi << 32;
                memcpy(dst + i / 2, &out, 8);
            } else {
                uint32_t out = (uint32_t)(lo | hi << 16);
                memcpy(dst + i / 4, &out, 4);
            }
        }
    }
    /* other widths, and the tail (i is a multiple of 16, so byte aligned here) */
    if (i < n)
        zc_qsgd_kernels_scalar.pack(levels + i, n - i, b, dst + i * b / 8);
}

static int unpack_add_avx2(const uint8_t *src, size_t n, unsigned b, uint32_t s, float unit,
                           float *dst)
{
    size_t i = 0;

    /* widths whose codes cannot exceed s need no range check */
    if ((b == 2 || b == 4 || b == 8) && s == (UINT32_C(1) << (b - 1)) - 1) {
        const __m256 vunit = _mm256_set1_ps(unit);
        const __m256i kmask = _mm256_set1_epi32((int)s);
        const uint64_t field = b == 2 ? UINT64_C(0x0303030303030303) : UINT64_C(0x0f0f0f0f0f0f0f0f);
        for (; i + 16 <= n; i += 16) {
            __m128i bytes; /* one code per byte */
            if (b == 8) {
                bytes = _mm_loadu_si128((const __m128i *)(src + i));
            } else if (b == 4) {
                uint32_t w[2];
                memcpy(w, src + i / 2, 8);
                bytes = _mm_set_epi64x((long long)_pdep_u64(w[1], field),
                                       (long long)_pdep_u64(w[0], field));
            } else {
                uint16_t w[2];
                memcpy(w, src + i / 4, 4);
                bytes = _mm_set_epi64x((long long)_pdep_u64(w[1], field),
                                       (long long)_pdep_u64(w[0], field));
            }
            for (int h = 0; h < 2; h++) {
                __m256i code = _mm256_cvtepu8_epi32(h ? _mm_unpackhi_epi64(bytes, bytes) : bytes);
                __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_and_si256(code, kmask)), vunit);
                __m256i sign = _mm256_slli_epi32(_mm256_srli_epi32(code, (int)b - 1), 31);
                v = _mm256_castsi256_ps(_mm256_xor_si256(_mm256_castps_si256(v), sign));
                float *d = dst + i + 8 * h;
                _mm256_storeu_ps(d, _mm256_add_ps(_mm256_loadu_ps(d), v));
            }
        }
    }
    if (i < n)
        return zc_qsgd_kernels_scalar.unpack_add(src + i * b / 8, n - i, b, s, unit, dst + i);
    return 0;
}

static void add_avx2(const float *x, size_t n, float *dst)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(dst + i, _mm256_add_ps(_mm256_loadu_ps(dst + i), _mm256_loadu_ps(x + i)));
    if (i < n)
        zc_qsgd_kernels_scalar.add(x + i, n - i, dst + i);
}

const zc_qsgd_kernels_t zc_qsgd_kernels_avx2 = {
    .max_abs_bits = max_abs_bits_avx2,
    .sum_squares = sum_squares_avx2,
    .quantize = quantize_avx2,
    .pack = pack_avx2,
    .unpack_add = unpack_add_avx2,
    .add = add_avx2,
};
