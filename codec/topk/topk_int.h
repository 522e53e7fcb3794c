/*
 * Top-k internals: the selection of the kept values (select.c), the coding of
 * their positions (gaps.c) and the per-CPU-level kernels (kernels.c,
 * kernels_avx512.c). The ops table and the payload layout are in topk.c; the
 * layout is documented in docs/codecs.md.
 *
 * Values are compared by their *key*: the f32 bit pattern with the sign bit
 * cleared. For finite values and infinities the key orders as |a| does; every
 * NaN has a key above the infinity's, so NaN ranks above everything and is sent
 * first. Zeros have key 0 and are never sent.
 */
#ifndef ZC_CODEC_TOPK_TOPK_INT_H
#define ZC_CODEC_TOPK_TOPK_INT_H

#include "common/bitio.h"
#include "common/compiler.h"
#include "common/half.h"

#include <zipccl/zipccl_status.h>

#include <stddef.h>
#include <stdint.h>

/* Values in one payload: the decoder refuses more, so the encoder must too. */
#define ZC_TOPK_MAX_COUNT (UINT64_C(1) << 40)
/* Key of +-infinity; NaNs lie above it. */
#define ZC_TOPK_INF_KEY UINT32_C(0x7f800000)
/* Entries a kept-position buffer needs beyond its capacity (collect kernels write ahead). */
#define ZC_TOPK_COLLECT_SLACK 128
/*
 * Relative tolerance on the kept count of the sampled threshold: a count c
 * with |c - k| <= k / ZC_TOPK_TOL_DIV (10%) is accepted, anything else falls
 * back to exact selection.
 */
#define ZC_TOPK_TOL_DIV 10
/*
 * The sample holds at least ZC_TOPK_SAMPLE_TAIL values expected above the
 * threshold: the sampled count then has a relative standard deviation of
 * sqrt((1 - rho) / 2500) <= 2%, so the 10% tolerance is 5 deviations.
 */
#define ZC_TOPK_SAMPLE_TAIL 2500
#define ZC_TOPK_SAMPLE_MIN 16384
/* Sampling pays only when the sample is at most this fraction (1/4) of the values. */
#define ZC_TOPK_SAMPLE_MAX_DIV 4

static inline uint32_t zc_topk_key(float a)
{
    return zc_f32_bits(a) & 0x7fffffffu;
}

/* k = max(1, round(density * n)) for n > 0, 0 for n = 0. */
uint64_t zc_topk_target(uint64_t n, double density);
/* Largest kept count for k: k + k / ZC_TOPK_TOL_DIV, at most n. */
uint64_t zc_topk_max_kept(uint64_t n, uint64_t k);
/* Sample size for n values at density rho; 0 when selection is exact directly. */
uint64_t zc_topk_sample_size(uint64_t n, double density);

typedef enum zc_topk_path {
    ZC_TOPK_PATH_NONE = 0,    /* nothing to select (n = 0) */
    ZC_TOPK_PATH_SAMPLED = 1, /* threshold from the sample, count within tolerance */
    ZC_TOPK_PATH_EXACT = 2,   /* exact selection (directly, or after the sample missed) */
} zc_topk_path_t;

/*
 * The kept positions of x[0..n), increasing, into idx (room for
 * zc_topk_max_kept(n, k) + ZC_TOPK_COLLECT_SLACK entries); *count_p their number.
 * Every kept key is >= every dropped key, and zeros are never kept. Sampled:
 * every key >= the estimated threshold, a count within the tolerance of k.
 * Exact: the k largest, ties at the k-th key broken by lower index, fewer when
 * fewer than k values are nonzero. ZC_ERR_NO_MEMORY if scratch fails.
 */
zc_status_t zc_topk_select(const float *x, uint64_t n, double density, uint64_t *idx,
                           uint64_t *count_p, zc_topk_path_t *path_p);
/*
 * zc_topk_select with error feedback fused in: selects from the sums
 * res[i] + x[i] (the f32 addition of zc_dtype_add_f32), which it stores into
 * res in the same pass. On return, error or not, res holds the sums.
 */
zc_status_t zc_topk_select_add(const float *x, float *res, uint64_t n, double density,
                               uint64_t *idx, uint64_t *count_p, zc_topk_path_t *path_p);

/*
 * The k-th largest of keys[0..m) (1 <= k <= m), found by radix select (three
 * digit passes: linear time on any input, ties included); keys are reordered.
 * *above_p: how many keys are strictly larger.
 */
uint32_t zc_topk_radix_select(uint32_t *keys, size_t m, uint64_t k, uint64_t *above_p);

/* ---- position coding (gaps.c): gap_j = idx_j - idx_{j-1} - 1, idx_{-1} = -1 ---- */

#define ZC_TOPK_RICE_MAX_PARAM 40

/* ZC_HD: topk.cu sizes the same gaps on the device. */
static inline ZC_HD unsigned zc_varint_len(uint64_t v)
{
    unsigned n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

/* Bytes of the LEB128 gaps of idx[0..c). */
uint64_t zc_topk_varint_bytes(const uint64_t *idx, uint64_t c);
/*
 * The Rice parameter for idx[0..c) (c >= 1) and its size in bytes: the best of
 * b0 - 1, b0, b0 + 1 with b0 = floor(log2(mean gap * ln 2)), the Golomb
 * optimum for geometric gaps; a tie keeps the smaller parameter.
 */
unsigned zc_topk_rice_choose(const uint64_t *idx, uint64_t c, uint64_t *bytes_p);
/* Writers of exactly the byte counts above, which @p dst must hold. */
void zc_topk_varint_write(const uint64_t *idx, uint64_t c, uint8_t *dst);
/* Returns the bytes written, SIZE_MAX if they did not fit in @p bytes. */
size_t zc_topk_rice_write(const uint64_t *idx, uint64_t c, unsigned b, uint8_t *dst, size_t bytes);

/*
 * Readers: add the j-th value of @p sink at the j-th decoded position. They
 * check every gap against n, the exact section length and its zero padding:
 * ZC_ERR_CORRUPT on any violation, with the values before it already added.
 */
typedef struct zc_topk_sink {
    const uint8_t *values; /* c values of the payload's format */
    float *dst;
    float scale; /* f16 values: 2^e */
    int f16;
    int subtract; /* alpha = -1 */
} zc_topk_sink_t;

/*
 * dst[pos[i]] += alpha * value (first + i) for i < m. The error-feedback
 * subtraction (alpha = -1) of a non-finite value leaves 0, not inf - inf = NaN:
 * the value went out whole, as itself, so nothing of it remains to send
 * (sent + residual = inf + 0 = inf). The decoders call this once per block of
 * positions: a loop of independent read-modify-writes keeps many cache misses
 * in flight, where one interleaved with the bit decoding keeps few.
 */
static inline void zc_topk_sink_add(const zc_topk_sink_t *s, const uint64_t *pos, uint64_t first,
                                    size_t m)
{
    float *dst = s->dst;
    if (s->f16) {
        const uint8_t *v = s->values + 2 * first;
        for (size_t i = 0; i < m; i++) {
            float f = zc_f16_to_f32((uint16_t)(v[2 * i] | v[2 * i + 1] << 8)) * s->scale;
            if (!s->subtract)
                dst[pos[i]] += f;
            else
                dst[pos[i]] = ZC_LIKELY(zc_topk_key(f) < ZC_TOPK_INF_KEY) ? dst[pos[i]] - f : 0.0f;
        }
        return;
    }
    const uint8_t *v = s->values + 4 * first;
    if (!s->subtract) {
        for (size_t i = 0; i < m; i++)
            dst[pos[i]] += zc_f32_from_bits(zc_load_le32(v + 4 * i));
        return;
    }
    for (size_t i = 0; i < m; i++) {
        float f = zc_f32_from_bits(zc_load_le32(v + 4 * i));
        dst[pos[i]] = ZC_LIKELY(zc_topk_key(f) < ZC_TOPK_INF_KEY) ? dst[pos[i]] - f : 0.0f;
    }
}

/* Positions decoded before their values are added (see zc_topk_sink_add). */
#define ZC_TOPK_DECODE_BLOCK 256

zc_status_t zc_topk_varint_decode(const uint8_t *src, size_t len, uint64_t c, uint64_t n,
                                  const zc_topk_sink_t *sink);
zc_status_t zc_topk_rice_decode(const uint8_t *src, size_t len, uint64_t c, uint64_t n, unsigned b,
                                const zc_topk_sink_t *sink);

/* ---- kernels ---- */

typedef struct zc_topk_kernels {
    /*
     * Writes first + i for every i < n with zc_topk_key(x[i]) >= thr, in order,
     * to idx. Stops early once more than cap are found; returns the number
     * found (> cap when it stopped). idx has room for cap + ZC_TOPK_COLLECT_SLACK.
     */
    uint64_t (*collect)(const float *x, size_t n, uint64_t first, uint32_t thr, uint64_t *idx,
                        uint64_t cap);
    /*
     * Error feedback fused into collect: res[i] += x[i] for every i < n (the
     * f32 addition of zc_dtype_add_f32, bit for bit), and first + i written to
     * idx, in order, for every sum with zc_topk_key >= thr. Every sum is
     * stored; positions stop being collected once more than cap are found,
     * and the return value is then > cap. idx has room for cap +
     * ZC_TOPK_COLLECT_SLACK.
     */
    uint64_t (*add_collect)(const float *x, float *res, size_t n, uint64_t first, uint32_t thr,
                            uint64_t *idx, uint64_t cap);
    /*
     * The keys of exact selection's bucket: writes zc_topk_key(x[i]) for every
     * i < n whose key lies in [lo, lo + width), in order, to keys. Stops early
     * once more than cap are found; returns the number found (> cap when it
     * stopped). keys has room for cap + ZC_TOPK_COLLECT_SLACK.
     */
    uint64_t (*bucket)(const float *x, size_t n, uint32_t lo, uint32_t width, uint32_t *keys,
                       uint64_t cap);
} zc_topk_kernels_t;

extern const zc_topk_kernels_t zc_topk_kernels_scalar;
#if defined(__x86_64__)
extern const zc_topk_kernels_t zc_topk_kernels_avx2;
extern const zc_topk_kernels_t zc_topk_kernels_avx512;
#endif

/* The kernels for the current CPU level (zc_cpu_level()). */
const zc_topk_kernels_t *zc_topk_kernels(void);
/* res[i] += x[i] for i < n: add_collect's tail once it stopped collecting. */
void zc_topk_add_rest(const float *x, float *res, size_t n);

/*
 * The steps of collect (@p res NULL) or add_collect for i in [i0, end), one
 * value at a time, branch-free: the sum stored, the position written at
 * idx[c], the count advanced when the value is kept. Returns the count.
 */
static inline uint64_t zc_topk_collect_steps(const float *x, float *res, size_t i0, size_t end,
                                             uint64_t first, uint32_t thr, uint64_t *idx,
                                             uint64_t c)
{
    for (size_t i = i0; i < end; i++) {
        float r = x[i];
        if (res) {
            r = res[i] + r;
            res[i] = r;
        }
        idx[c] = first + i;
        c += zc_topk_key(r) >= thr;
    }
    return c;
}

/* The steps of bucket for i in [i0, end), branch-free as above. Returns the count. */
static inline uint64_t zc_topk_bucket_steps(const float *x, size_t i0, size_t end, uint32_t lo,
                                            uint32_t width, uint32_t *keys, uint64_t c)
{
    for (size_t i = i0; i < end; i++) {
        uint32_t key = zc_topk_key(x[i]);
        keys[c] = key;
        c += key - lo < width;
    }
    return c;
}

/*
 * What a kernel does once its count passed cap: collect returns, add_collect
 * adds the rest (rarely: the sampled threshold missed) and returns.
 */
static inline uint64_t zc_topk_past_cap(const float *x, float *res, size_t i, size_t n, uint64_t c)
{
    if (res)
        zc_topk_add_rest(x + i, res + i, n - i);
    return c;
}

#endif
