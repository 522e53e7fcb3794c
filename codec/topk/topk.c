/* Placeholder until the topk codec lands (codec issue): every call is unsupported. */
#include "codec/codec.h"

static size_t topk_bound(const zc_codec_params_t *params, uint64_t count)
{
    return 0;
}

static zc_status_t topk_encode(const zc_codec_params_t *params, zc_codec_state_t *state,
                               const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                               uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    return ZC_ERR_UNSUPPORTED;
}

static zc_status_t topk_decode_add(zc_codec_state_t *state, const uint8_t *body, size_t len,
                                   float *dst, uint64_t count, float alpha)
{
    return ZC_ERR_UNSUPPORTED;
}

const zc_codec_ops_t zc_codec_topk_ops = {
    .name = "topk",
    .id = ZC_CODEC_TOPK,
    .bound = topk_bound,
    .encode = topk_encode,
    .decode_add = topk_decode_add,
};
