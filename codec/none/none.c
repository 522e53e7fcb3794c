/*
 * The raw codec: f32 values as they are, so every path has the same interface.
 * Lossless and linear: reduce is the f32 sum, rounded once per value.
 */
#include "codec/codec.h"
#include "common/bitio.h"
#include "common/compiler.h"

#include <string.h>

/*
 * The body may sit at any byte offset, so values are copied in blocks into
 * aligned arrays: a loop of constant trip count over local arrays is one GCC
 * and Clang vectorize at -O2 (no aliasing or alignment checks needed), where a
 * memcpy per value is not.
 */
#define NONE_BLOCK 64

static size_t none_bound(const zc_codec_params_t *params, uint64_t count)
{
    return count > SIZE_MAX / 4 ? SIZE_MAX : (size_t)count * 4;
}

static zc_status_t none_encode(const zc_codec_params_t *params, zc_codec_state_t *state,
                               const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                               uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    if (count > cap / 4)
        return ZC_ERR_BUFFER_TOO_SMALL;
    zc_dtype_to_f32(dtype, src, (size_t)count, (float *)(void *)dst);
    *len_p = (size_t)count * 4;
    return ZC_OK;
}

static int body_len_ok(size_t len, uint64_t count)
{
    return count <= SIZE_MAX / 4 && len == (size_t)count * 4;
}

static void add_block(float *dst, const float *v, float alpha)
{
    for (int j = 0; j < NONE_BLOCK; j++)
        dst[j] += alpha * v[j];
}

static zc_status_t none_decode_add(zc_codec_state_t *state, const uint8_t *body, size_t len,
                                   float *dst, uint64_t count, float alpha)
{
    const size_t n = (size_t)count;
    float v[NONE_BLOCK];
    size_t i = 0;

    if (!body_len_ok(len, count))
        return ZC_ERR_CORRUPT;
    for (; i + NONE_BLOCK <= n; i += NONE_BLOCK) {
        memcpy(v, body + 4 * i, sizeof(v));
        add_block(dst + i, v, alpha);
    }
    for (; i < n; i++) {
        float x;
        memcpy(&x, body + 4 * i, sizeof(x));
        dst[i] += alpha * x;
    }
    return ZC_OK;
}

/* dst may be a or b: each block is read whole before it is written. */
static zc_status_t none_reduce(zc_codec_state_t *state, const uint8_t *a, size_t alen,
                               const uint8_t *b, size_t blen, uint64_t count, uint8_t *dst,
                               size_t cap, size_t *len_p)
{
    const size_t n = (size_t)count;
    float x[NONE_BLOCK], y[NONE_BLOCK];
    size_t i = 0;

    if (!body_len_ok(alen, count) || !body_len_ok(blen, count))
        return ZC_ERR_CORRUPT;
    if (cap < alen)
        return ZC_ERR_BUFFER_TOO_SMALL;
    for (; i + NONE_BLOCK <= n; i += NONE_BLOCK) {
        memcpy(x, a + 4 * i, sizeof(x));
        memcpy(y, b + 4 * i, sizeof(y));
        add_block(x, y, 1.0f);
        memcpy(dst + 4 * i, x, sizeof(x));
    }
    for (; i < n; i++) {
        float s, t;
        memcpy(&s, a + 4 * i, sizeof(s));
        memcpy(&t, b + 4 * i, sizeof(t));
        s += t;
        memcpy(dst + 4 * i, &s, sizeof(s));
    }
    *len_p = alen;
    return ZC_OK;
}

const zc_codec_ops_t zc_codec_none_ops = {
    .name = "none",
    .id = ZC_CODEC_NONE,
    .caps = ZC_CODEC_CAP_STATELESS | ZC_CODEC_CAP_LINEAR | ZC_CODEC_CAP_UNBIASED |
            ZC_CODEC_CAP_LOSSLESS,
    .nominal_encode_bw = 10e9,
    .nominal_decode_bw = 10e9,
    .nominal_reduce_bw = 10e9,
    .bound = none_bound,
    .encode = none_encode,
    .decode_add = none_decode_add,
    .reduce = none_reduce,
};
