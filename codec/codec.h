/*
 * The codec ops table and the payload header, internal to zipccl.
 *
 * codec.c owns the public entry points (include/zipccl/zipccl_codec.h): it
 * validates arguments, writes and parses the 16-byte header, and calls the
 * codec's ops on the body. A codec sees only its body and never the header.
 * Codecs are pure compute: no logging, no threads, no transport.
 */
#ifndef ZC_CODEC_CODEC_H
#define ZC_CODEC_CODEC_H

#include "common/compiler.h"

#include <zipccl/zipccl_codec.h>

#include <stddef.h>
#include <stdint.h>

#define ZC_PAYLOAD_MAGIC0 'Z'
#define ZC_PAYLOAD_MAGIC1 'C'
#define ZC_PAYLOAD_VERSION 1

/* Capabilities a collective may rely on. */
enum {
    ZC_CODEC_CAP_STATELESS = 1u << 0, /* encode and decode need no per-tensor state */
    ZC_CODEC_CAP_LINEAR = 1u << 1,    /* payloads add without decoding (reduce) */
    ZC_CODEC_CAP_UNBIASED = 1u << 2,  /* E[decode(encode(x))] = x */
    ZC_CODEC_CAP_LOSSLESS = 1u << 3,  /* decode(encode(x)) = x for f32 input */
};

typedef struct zc_codec_ops {
    const char *name;
    zc_codec_id_t id;
    unsigned caps;

    /* Range checks of params; ZC_ERR_INVALID_CONFIG if a field is out of range. */
    zc_status_t (*check)(const zc_codec_params_t *params);
    /* Largest body for @p count values (params already checked). */
    size_t (*bound)(const zc_codec_params_t *params, uint64_t count);
    /* Writes the body of @p count values into @p dst[0..cap); sets *len_p. */
    zc_status_t (*encode)(const zc_codec_params_t *params, void *state, const zc_codec_rng_t *rng,
                          zc_dtype_t dtype, const void *src, uint64_t count, uint8_t *dst,
                          size_t cap, size_t *len_p);
    /* Adds the decoded body (@p len bytes) into @p dst[0..count). */
    zc_status_t (*decode_add)(void *state, const uint8_t *body, size_t len, float *dst,
                              uint64_t count);
} zc_codec_ops_t;

/* The registry: every codec, indexed by zc_codec_id_t. */
const zc_codec_ops_t *zc_codec_ops(zc_codec_id_t codec);

/* Element size of @p dtype in bytes, 0 if unknown. */
size_t zc_dtype_size(zc_dtype_t dtype);

/* Converts @p count values of @p dtype at @p src to f32 at @p dst. */
void zc_dtype_to_f32(zc_dtype_t dtype, const void *src, size_t count, float *dst);

struct zc_config;
/*
 * @p codec's parameters from the ZIPCCL_* configuration (ZIPCCL_QSGD_BITS,
 * _LEVELS, _BUCKET, _SCALE, _CODING). The table's ranges make every value valid.
 */
zc_status_t zc_codec_params_from_config(const struct zc_config *cfg, zc_codec_id_t codec,
                                        zc_codec_params_t *params_p);

extern const zc_codec_ops_t zc_codec_none_ops;
extern const zc_codec_ops_t zc_codec_qsgd_ops;

#endif
