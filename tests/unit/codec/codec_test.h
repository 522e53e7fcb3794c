/*
 * Helpers shared by the codec tests: a fixed-seed input generator (independent
 * of the codec's own Philox, so a bug there cannot hide in the test data), and
 * encode/decode wrappers that assert success and hand back exactly sized
 * buffers, so that the ASan variant catches any access one byte past a payload.
 */
#ifndef ZC_TEST_CODEC_TEST_H
#define ZC_TEST_CODEC_TEST_H

#include <zipccl/zipccl_codec.h>

#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* splitmix64 (Steele, Lea, Flood 2014): the test data generator. */
typedef struct test_rng {
    uint64_t state;
} test_rng_t;

static inline uint64_t test_rng_next(test_rng_t *r)
{
    uint64_t z = (r->state += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Uniform in (0, 1): 53 random bits, never 0. */
static inline double test_rng_uniform(test_rng_t *r)
{
    return ((double)(test_rng_next(r) >> 11) + 0.5) * 0x1p-53;
}

/* Standard normal by Box-Muller (one of the pair is kept: simple and exact enough). */
static inline double test_rng_gauss(test_rng_t *r)
{
    double u1 = test_rng_uniform(r), u2 = test_rng_uniform(r);
    return sqrt(-2.0 * log(u1)) * cos(2.0 * 3.14159265358979323846 * u2);
}

static inline void fill_gauss(float *x, size_t n, uint64_t seed, double sigma)
{
    test_rng_t r = {seed};
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(sigma * test_rng_gauss(&r));
}

static inline void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert_not_null(p, "malloc(%zu)", n);
    return p;
}

static inline float *zeros_f32(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    cr_assert_not_null(p);
    return p;
}

/* The default parameters of @p id; the test fails if there are none. */
static inline zc_codec_params_t params_of(zc_codec_id_t id)
{
    zc_codec_params_t p;
    cr_assert_eq(zc_codec_params_default(id, &p), ZC_OK, "%s", zc_codec_name(id));
    return p;
}

static inline zc_codec_params_t qsgd_params(uint32_t levels, uint32_t bucket, zc_qsgd_scale_t scale,
                                            zc_qsgd_coding_t coding)
{
    zc_codec_params_t p = params_of(ZC_CODEC_QSGD);
    p.qsgd.levels = levels;
    p.qsgd.bucket = bucket;
    p.qsgd.scale = scale;
    p.qsgd.coding = coding;
    return p;
}

/* A state for @p p and @p n values; the test fails if it cannot be made. */
static inline zc_codec_state_t *state_new(const zc_codec_params_t *p, size_t n)
{
    zc_codec_state_t *st = NULL;
    cr_assert_eq(zc_codec_state_create(p, n, &st), ZC_OK);
    cr_assert_not_null(st);
    return st;
}

static inline zc_codec_rng_t test_codec_rng(uint64_t seed, uint32_t rank, uint32_t counter)
{
    zc_codec_rng_t rng = {.seed = seed, .rank = rank, .stream = 0, .counter = counter};
    return rng;
}

/* One payload in a heap block of exactly its length. */
typedef struct payload {
    uint8_t *buf;
    size_t len;
} payload_t;

/* Encodes into a bound-sized buffer, checks the length against the bound, and
 * returns a copy in a block of exactly the payload's length. */
static inline payload_t encode_ok(const zc_codec_params_t *p, const zc_codec_rng_t *rng,
                                  zc_dtype_t dtype, const void *src, size_t n)
{
    size_t bound = zc_codec_bound(p, n);
    cr_assert_gt(bound, 0, "bound of %zu values is 0", n);
    uint8_t *tmp = xmalloc(bound);
    size_t len = 0;
    zc_status_t st = zc_codec_encode(p, NULL, rng, dtype, src, n, tmp, bound, &len);
    cr_assert_eq(st, ZC_OK, "encode of %zu values: %s", n, zc_status_string(st));
    cr_assert_leq(len, bound, "payload %zu bytes > bound %zu", len, bound);
    cr_assert_geq(len, ZC_PAYLOAD_HEADER_BYTES);
    payload_t out = {xmalloc(len), len};
    memcpy(out.buf, tmp, len);
    free(tmp);
    return out;
}

static inline void payload_free(payload_t *pl)
{
    free(pl->buf);
    pl->buf = NULL;
    pl->len = 0;
}

/* Copy of the first @p len bytes of @p src in a block of exactly @p len bytes. */
static inline uint8_t *exact_copy(const void *src, size_t len)
{
    uint8_t *p = xmalloc(len);
    if (len)
        memcpy(p, src, len);
    return p;
}

/* @p src's @p len bytes then @p extra bytes of @p fill, in a block of exactly that length:
 * a payload with trailing bytes, which every decoder must refuse. */
static inline uint8_t *padded_copy(const void *src, size_t len, size_t extra, uint8_t fill)
{
    uint8_t *p = xmalloc(len + extra);
    if (len)
        memcpy(p, src, len);
    memset(p + len, fill, extra);
    return p;
}

/* Decodes into a fresh zeroed array of exactly n floats. */
static inline float *decode_ok(const payload_t *pl, size_t n)
{
    float *out = zeros_f32(n);
    zc_status_t st = zc_codec_decode_add(NULL, pl->buf, pl->len, out, n);
    cr_assert_eq(st, ZC_OK, "decode of %zu values: %s", n, zc_status_string(st));
    return out;
}

/* Same bits (NaN payloads included), for identity checks between kernels. */
static inline int same_bits_f32(const float *a, const float *b, size_t n)
{
    return n == 0 || memcmp(a, b, n * sizeof(float)) == 0;
}

#endif
