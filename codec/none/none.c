/* The raw codec: f32 values as they are, so every path has the same interface. */
#include "codec/codec.h"
#include "common/bitio.h"

#include <string.h>

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

static zc_status_t none_decode_add(zc_codec_state_t *state, const uint8_t *body, size_t len,
                                   float *dst, uint64_t count, float alpha)
{
    if (count > SIZE_MAX / 4 || len != (size_t)count * 4)
        return ZC_ERR_CORRUPT;
    for (size_t i = 0; i < (size_t)count; i++) {
        float v;
        memcpy(&v, body + 4 * i, sizeof(v));
        dst[i] += alpha * v;
    }
    return ZC_OK;
}

const zc_codec_ops_t zc_codec_none_ops = {
    .name = "none",
    .id = ZC_CODEC_NONE,
    .caps = ZC_CODEC_CAP_STATELESS | ZC_CODEC_CAP_LINEAR | ZC_CODEC_CAP_UNBIASED |
            ZC_CODEC_CAP_LOSSLESS,
    .bound = none_bound,
    .encode = none_encode,
    .decode_add = none_decode_add,
};
