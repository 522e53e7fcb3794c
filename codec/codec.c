#include "codec/codec.h"
#include "common/bitio.h"
#include "common/compiler.h"
#include "common/half.h"

#include <string.h>

static const zc_codec_ops_t *const registry[ZC_CODEC_COUNT] = {
    [ZC_CODEC_NONE] = &zc_codec_none_ops,
    [ZC_CODEC_QSGD] = &zc_codec_qsgd_ops,
};

const zc_codec_ops_t *zc_codec_ops(zc_codec_id_t codec)
{
    return (unsigned)codec < ZC_CODEC_COUNT ? registry[codec] : NULL;
}

size_t zc_dtype_size(zc_dtype_t dtype)
{
    switch (dtype) {
    case ZC_DTYPE_F32: return 4;
    case ZC_DTYPE_F16:
    case ZC_DTYPE_BF16: return 2;
    }
    return 0;
}

void zc_dtype_to_f32(zc_dtype_t dtype, const void *src, size_t count, float *dst)
{
    const uint16_t *h = src;

    if (count == 0)
        return; /* src may be NULL then, and memcpy must not see a NULL pointer (C11 7.24.1) */
    switch (dtype) {
    case ZC_DTYPE_F32: memcpy(dst, src, count * sizeof(float)); break;
    case ZC_DTYPE_F16:
        for (size_t i = 0; i < count; i++)
            dst[i] = zc_f16_to_f32(h[i]);
        break;
    case ZC_DTYPE_BF16:
        for (size_t i = 0; i < count; i++)
            dst[i] = zc_bf16_to_f32(h[i]);
        break;
    }
}

ZC_EXPORT const char *zc_codec_name(zc_codec_id_t codec)
{
    const zc_codec_ops_t *ops = zc_codec_ops(codec);
    return ops ? ops->name : NULL;
}

ZC_EXPORT zc_status_t zc_codec_find(const char *name, zc_codec_id_t *codec_p)
{
    if (!name || !codec_p)
        return ZC_ERR_INVALID_ARG;
    for (unsigned i = 0; i < ZC_CODEC_COUNT; i++) {
        if (registry[i] && strcmp(registry[i]->name, name) == 0) {
            *codec_p = (zc_codec_id_t)i;
            return ZC_OK;
        }
    }
    return ZC_ERR_INVALID_ARG;
}

ZC_EXPORT uint32_t zc_qsgd_levels_for_bits(unsigned bits)
{
    return bits >= 2 && bits <= 17 ? (UINT32_C(1) << (bits - 1)) - 1 : 0;
}

ZC_EXPORT zc_status_t zc_codec_params_default(zc_codec_id_t codec, zc_codec_params_t *params_p)
{
    if (!zc_codec_ops(codec) || !params_p)
        return ZC_ERR_INVALID_ARG;
    memset(params_p, 0, sizeof(*params_p));
    params_p->codec = codec;
    params_p->qsgd.levels = zc_qsgd_levels_for_bits(4);
    params_p->qsgd.bucket = 512;
    params_p->qsgd.scale = ZC_QSGD_SCALE_MAX;
    params_p->qsgd.coding = ZC_QSGD_CODING_FIXED;
    return ZC_OK;
}

ZC_EXPORT zc_status_t zc_codec_params_check(const zc_codec_params_t *params)
{
    if (!params)
        return ZC_ERR_INVALID_ARG;
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    if (!ops)
        return ZC_ERR_INVALID_CONFIG;
    return ops->check ? ops->check(params) : ZC_OK;
}

ZC_EXPORT size_t zc_codec_bound(const zc_codec_params_t *params, uint64_t count)
{
    if (zc_codec_params_check(params) != ZC_OK)
        return 0;
    size_t body = zc_codec_ops(params->codec)->bound(params, count);
    return body > SIZE_MAX - ZC_PAYLOAD_HEADER_BYTES ? 0 : body + ZC_PAYLOAD_HEADER_BYTES;
}

/*
 * Header: bytes 0-1 "ZC", 2 version, 3 codec id, 4-7 reserved (zero),
 * 8-15 element count, all little-endian.
 */
static void header_write(uint8_t *dst, zc_codec_id_t codec, uint64_t count)
{
    dst[0] = ZC_PAYLOAD_MAGIC0;
    dst[1] = ZC_PAYLOAD_MAGIC1;
    dst[2] = ZC_PAYLOAD_VERSION;
    dst[3] = (uint8_t)codec;
    zc_store_le32(dst + 4, 0);
    zc_store_le64(dst + 8, count);
}

ZC_EXPORT zc_status_t zc_payload_info(const void *src, size_t len, zc_payload_info_t *info_p)
{
    const uint8_t *p = src;

    if (!src || !info_p)
        return ZC_ERR_INVALID_ARG;
    if (len < ZC_PAYLOAD_HEADER_BYTES || p[0] != ZC_PAYLOAD_MAGIC0 || p[1] != ZC_PAYLOAD_MAGIC1 ||
        zc_load_le32(p + 4) != 0 || !zc_codec_ops((zc_codec_id_t)p[3]))
        return ZC_ERR_CORRUPT;
    if (p[2] != ZC_PAYLOAD_VERSION)
        return ZC_ERR_MISMATCH;
    info_p->codec = (zc_codec_id_t)p[3];
    info_p->version = p[2];
    info_p->count = zc_load_le64(p + 8);
    return ZC_OK;
}

ZC_EXPORT zc_status_t zc_codec_encode(const zc_codec_params_t *params, void *state,
                                      const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                      uint64_t count, void *dst, size_t cap, size_t *len_p)
{
    static const zc_codec_rng_t rng_zero;
    size_t body_len;

    if (!params || !dst || !len_p || (count > 0 && !src) || zc_dtype_size(dtype) == 0)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_codec_params_check(params));
    if (cap < ZC_PAYLOAD_HEADER_BYTES)
        return ZC_ERR_BUFFER_TOO_SMALL;

    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    header_write(dst, params->codec, count);
    ZC_CHECK(ops->encode(params, state, rng ? rng : &rng_zero, dtype, src, count,
                         (uint8_t *)dst + ZC_PAYLOAD_HEADER_BYTES, cap - ZC_PAYLOAD_HEADER_BYTES,
                         &body_len));
    *len_p = body_len + ZC_PAYLOAD_HEADER_BYTES;
    return ZC_OK;
}

ZC_EXPORT zc_status_t zc_codec_decode_add(void *state, const void *src, size_t len, float *dst,
                                          uint64_t count)
{
    zc_payload_info_t info;

    if (!src || (count > 0 && !dst))
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_payload_info(src, len, &info));
    if (info.count != count)
        return ZC_ERR_MISMATCH;
    return zc_codec_ops(info.codec)
        ->decode_add(state, (const uint8_t *)src + ZC_PAYLOAD_HEADER_BYTES,
                     len - ZC_PAYLOAD_HEADER_BYTES, dst, count);
}
