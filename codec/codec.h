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

/*
 * Per-tensor state. The generic layer (codec.c) owns the error-feedback
 * residual; a codec with learned state (GradiVeQ's basis) hangs it on priv.
 */
struct zc_codec_state {
    zc_codec_params_t params;
    uint64_t count;
    float *residual; /* count values when error feedback is on, else NULL */
    void *priv;      /* the codec's own, from ops->state_init */
};

typedef struct zc_codec_ops {
    const char *name;
    zc_codec_id_t id;
    unsigned caps; /* ZC_CODEC_CAP_* */

    /* Range checks of params; ZC_ERR_INVALID_CONFIG if a field is out of range. NULL: none. */
    zc_status_t (*check)(const zc_codec_params_t *params);
    /* Whether @p params turn error feedback on (top-k: always). NULL: never. */
    int (*error_feedback)(const zc_codec_params_t *params);
    /* Largest body for @p count values (params already checked). */
    size_t (*bound)(const zc_codec_params_t *params, uint64_t count);
    /*
     * Writes the body of @p count values into @p dst[0..cap); sets *len_p.
     * @p state is non-NULL when the codec needs one (error feedback or priv);
     * with error feedback, src is the f32 residual (input already added) and
     * the generic layer takes the payload back out of it afterwards.
     */
    zc_status_t (*encode)(const zc_codec_params_t *params, zc_codec_state_t *state,
                          const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                          uint64_t count, uint8_t *dst, size_t cap, size_t *len_p);
    /*
     * Adds @p alpha times the decoded body (@p len bytes) into @p dst[0..count);
     * @p alpha is +1 or -1 (the error-feedback subtraction), so it is exact.
     * With -1 a codec may define what is left where it sent a non-finite value
     * (topk leaves 0 there, not inf - inf, so that one overflow does not poison
     * every later step).
     */
    zc_status_t (*decode_add)(zc_codec_state_t *state, const uint8_t *body, size_t len, float *dst,
                              uint64_t count, float alpha);
    /* Linear codecs: body a + body b into dst (which may alias a or b). NULL: not linear. */
    zc_status_t (*reduce)(zc_codec_state_t *state, const uint8_t *a, size_t alen, const uint8_t *b,
                          size_t blen, uint64_t count, uint8_t *dst, size_t cap, size_t *len_p);
    /* Codec-owned state: set state->priv. NULL: the codec has none. */
    zc_status_t (*state_init)(zc_codec_state_t *state);
    void (*state_fini)(zc_codec_state_t *state);
    /* See zc_codec_state_update. NULL: nothing to learn. */
    zc_status_t (*state_update)(zc_codec_state_t *state, const float *sum, uint64_t count);
} zc_codec_ops_t;

/* The registry: every codec, indexed by zc_codec_id_t. */
const zc_codec_ops_t *zc_codec_ops(zc_codec_id_t codec);

/* Element size of @p dtype in bytes, 0 if unknown. */
size_t zc_dtype_size(zc_dtype_t dtype);

/* Converts @p count values of @p dtype at @p src to f32 at @p dst. */
void zc_dtype_to_f32(zc_dtype_t dtype, const void *src, size_t count, float *dst);

struct zc_config;
/*
 * @p codec's parameters from the ZIPCCL_* configuration (ZIPCCL_QSGD_*,
 * ZIPCCL_TOPK_*, ZIPCCL_GRADIVEQ_*); GradiVeQ's rank count stays 1 for the
 * caller to set. ZC_ERR_INVALID_CONFIG when the combination is invalid
 * (a GradiVeQ dim above its slice).
 */
zc_status_t zc_codec_params_from_config(const struct zc_config *cfg, zc_codec_id_t codec,
                                        zc_codec_params_t *params_p);

/* Adds @p count values of @p dtype at @p src into the f32 @p dst. */
void zc_dtype_add_f32(zc_dtype_t dtype, const void *src, size_t count, float *dst);

extern const zc_codec_ops_t zc_codec_none_ops;
extern const zc_codec_ops_t zc_codec_qsgd_ops;
extern const zc_codec_ops_t zc_codec_fp16_ops;
extern const zc_codec_ops_t zc_codec_bf16_ops;
extern const zc_codec_ops_t zc_codec_topk_ops;
extern const zc_codec_ops_t zc_codec_gradiveq_ops;

#endif
