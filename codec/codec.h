/*
 * The codec ops table and the payload header, internal to zipccl.
 *
 * codec.c owns the public entry points (include/zipccl/zipccl_codec.h): it
 * validates arguments, writes and parses the 16-byte header (payload.h), and
 * calls the codec's ops on the body. A codec sees only its body and never the header.
 * Codecs are pure compute: no logging, no threads, no transport.
 */
#ifndef ZC_CODEC_CODEC_H
#define ZC_CODEC_CODEC_H

#include "codec/payload.h"
#include "common/compiler.h"
#include "common/dtype.h"

#include <zipccl/zipccl_codec.h>

#include <stddef.h>
#include <stdint.h>

/*
 * Per-tensor state. The generic layer (codec.c) owns the error-feedback
 * residual; a codec with learned state (GradiVeQ's basis) hangs it on priv.
 */
struct zc_codec_state {
    zc_codec_params_t params;
    uint64_t count;
    float *residual;     /* count values when error feedback is on, else NULL */
    void *priv;          /* the codec's own, from ops->state_init */
    uint64_t oob_values; /* values sent out of band by encodes with this state, in total */
};

struct zc_config;
struct zc_oob;

/* encode_try's answer: the input holds values for a section; not an error. */
#define ZC_CODEC_RETRY_OOB ((zc_status_t)1)

/*
 * One field of a codec's parameters (its sub-struct of zc_codec_params_t).
 * The list in the ops table is the one description of them: equality of two
 * params, the hash the ranks compare before a call, and the smallest
 * struct_size a caller must pass are all derived from it.
 */
typedef enum zc_codec_field_kind {
    ZC_CODEC_FIELD_INT, /* uint32_t, int or an enum: compared as the integer */
    ZC_CODEC_FIELD_F64, /* double: compared with == */
} zc_codec_field_kind_t;

typedef struct zc_codec_field {
    size_t offset, size;
    zc_codec_field_kind_t kind;
    /*
     * Changes the payloads: every rank must use the same value (the call
     * header's hash covers it). Error feedback does: a rank with it sends
     * g + r, where its peers, expecting none, would sum estimates of g, and
     * one rank's silently different setting is a wrong sum, not an error.
     */
    int wire;
} zc_codec_field_t;

#define ZC_CODEC_FIELD(member, kind, wire)                                                         \
    {                                                                                              \
        offsetof(zc_codec_params_t, member), sizeof(((zc_codec_params_t *)0)->member),             \
            ZC_CODEC_FIELD_##kind, wire                                                            \
    }

typedef struct zc_codec_ops {
    const char *name;
    zc_codec_id_t id;
    unsigned caps; /* ZC_CODEC_CAP_*; LINEAR exactly when reduce is set */
    /*
     * Input values v with !(|v| < oob_limit) (NaN, infinities, magnitudes the
     * body cannot carry) are sent out of band, exactly (oob.h); the codec sees
     * 0 there. 0: the body carries every value itself (none).
     */
    float oob_limit;
    /* Non-zero: NaN and infinities stay in the body (which carries them exactly); only finite
     * values past oob_limit go out of band. */
    int oob_finite_only;

    /* The codec's parameter fields. NULL/0: it has none. */
    const zc_codec_field_t *fields;
    unsigned nfields;
    /* Writes the codec's defaults into its sub-struct of @p params. NULL: no fields. */
    void (*params_default)(zc_codec_params_t *params);
    /* Its sub-struct of @p params from its ZIPCCL_* variables (common/params.def). NULL: none. */
    void (*params_from_config)(const struct zc_config *cfg, zc_codec_params_t *params);
    /*
     * The codec's share of the all-reduce's rank count, for codecs whose
     * payloads depend on it (GradiVeQ's mean shares). NULL: they do not.
     */
    void (*params_set_ranks)(zc_codec_params_t *params, uint32_t nranks);
    /* Range checks of params; ZC_ERR_INVALID_CONFIG if a field is out of range. NULL: none. */
    zc_status_t (*check)(const zc_codec_params_t *params);
    /* Whether @p params turn error feedback on (top-k: always). NULL: never. */
    int (*error_feedback)(const zc_codec_params_t *params);
    /*
     * Values a split of a tensor into parts should keep together (a QSGD
     * bucket, a GradiVeQ slice), so that no part pays for a partial one.
     * NULL: no such unit.
     */
    size_t (*granule)(const zc_codec_params_t *params);
    /*
     * Payload bytes per f32 input byte expected for large counts, from the
     * parameters alone: the cost model's ratio before anything is measured.
     * NULL: 1 (no compression credited).
     */
    double (*wire_ratio)(const zc_codec_params_t *params);
    /*
     * Payload bytes per f32 input byte of @p state's calls in the long run,
     * from what it learned of the tensor's own gradients (GradiVeQ: d per
     * slice, the raw refresh calls included): the ratio ZIPCCL_ALGO and
     * ZIPCCL_CODEC=auto credit the codec with for that tensor. 0: nothing
     * learned yet. NULL: the codec learns nothing that sets its ratio.
     */
    double (*learned_ratio)(const zc_codec_state_t *state);
    /*
     * Nominal encode, decode_add and reduce speeds in f32 input bytes per
     * second (reduce: payload bytes), of the order codec_bench shows on one
     * core of an AVX2 server: the cost model's inputs when nothing is
     * measured. reduce 0: not linear.
     */
    double nominal_encode_bw, nominal_decode_bw, nominal_reduce_bw;
    /*
     * Non-zero: decode_add touches the payload's entries only, not every output value
     * (top-k), so that zeroing the accumulator is most of a decode: the cost model charges
     * that pass (collectives/policy.c). 0: every value is decoded (the zeroing is within D).
     */
    int sparse_decode;
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
    /*
     * encode that stops with ZC_CODEC_RETRY_OOB where it meets a value past
     * oob_limit (QSGD sees it in each bucket's largest magnitude, which it
     * computes anyway): tried first, so that clean input is read once; on
     * that answer the generic layer scans the input, masks those values and
     * calls encode. NULL: always the scan, then encode.
     */
    zc_status_t (*encode_try)(const zc_codec_params_t *params, zc_codec_state_t *state,
                              const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                              uint64_t count, uint8_t *dst, size_t cap, size_t *len_p);
    /*
     * Error feedback in one pass (optional; f32 input, codecs with a
     * residual): adds @p src into @p residual, encodes the sums into @p dst
     * and subtracts from @p residual what the body decodes to, leaving bit for
     * bit the payload and residual of the generic path (the addition, the
     * out-of-band scan and split, encode, decode_add(alpha = -1), clearing).
     * Values for the section go to @p spill as encode_spill's do, at most
     * zc_oob_cap(count) of them; or the codec stops with ZC_CODEC_RETRY_OOB,
     * leaving old + src in @p residual for the generic path to go on from
     * (as it does when @p cap is below its worst case). Errors leave
     * old + src in @p residual as well.
     */
    zc_status_t (*encode_ef)(const zc_codec_params_t *params, zc_codec_state_t *state,
                             const zc_codec_rng_t *rng, const float *src, uint64_t count,
                             float *residual, uint8_t *dst, size_t cap, size_t *len_p,
                             struct zc_oob *spill);
    /*
     * encode for a codec that finds its own values out of band (fp16, bf16:
     * where the cast overflowed, seen in each body block just written, in
     * cache): writes 0 there in the body and appends
     * the values to @p spill, in position order. Used in place of the scan
     * and encode when set; such a codec keeps no error-feedback residual.
     */
    zc_status_t (*encode_spill)(const zc_codec_params_t *params, zc_codec_state_t *state,
                                const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                uint64_t count, uint8_t *dst, size_t cap, size_t *len_p,
                                struct zc_oob *spill);
    /* Linear codecs: body a + body b into dst (which may alias a or b). NULL: not linear. */
    zc_status_t (*reduce)(zc_codec_state_t *state, const uint8_t *a, size_t alen, const uint8_t *b,
                          size_t blen, uint64_t count, uint8_t *dst, size_t cap, size_t *len_p);
    /*
     * reduce for a body narrower than f32 (fp16, bf16): where the two values'
     * sum is finite in f32 but not in the body's format, writes 0 in the body
     * and appends the f32 sum to @p spill (oob.h), in position order, so that
     * no finite sum overflows. Used in place of reduce when set.
     */
    zc_status_t (*reduce_spill)(zc_codec_state_t *state, const uint8_t *a, size_t alen,
                                const uint8_t *b, size_t blen, uint64_t count, uint8_t *dst,
                                size_t cap, size_t *len_p, struct zc_oob *spill);
    /*
     * Linear codecs with a section (oob_limit > 0): adds @p val at @p pos into
     * the body @p body (@p len bytes, checked by reduce) as well as its format
     * can, when a reduce's section is past its cap: a value past the format's
     * range becomes an infinity, and GradiVeQ turns the position's slice into
     * NaN. Non-finite either way where the sum is.
     */
    void (*poison)(const zc_codec_state_t *state, uint8_t *body, size_t len, uint64_t count,
                   uint64_t pos, float val);
    /*
     * Codecs whose body has a wide form (fp16: f32 values, 4 count bytes, told
     * apart by its length): rewrites the body of *@p len_p bytes at @p body in
     * that form, in place (@p cap bytes there). Past the section's cap, encode
     * and reduce then add every entry to the wide body (poison, exact there)
     * instead of losing them: no finite f32 sum becomes an infinity.
     */
    zc_status_t (*widen)(uint8_t *body, size_t *len_p, uint64_t count, size_t cap);
    /*
     * Codecs whose payloads add only when every rank quantized with the same
     * scales (qsgd-int): the number of scales of @p count values (a granule
     * each); local_scales writes this rank's for the input (plus @p residual
     * when not NULL, as encode will see it; values past oob_limit left out);
     * encode_shared is encode with the given scales, the largest over ranks,
     * which the compressed ring agrees on first (one max per scale).
     * NULL: the codec shares none.
     */
    size_t (*shared_scales)(const zc_codec_params_t *params, uint64_t count);
    zc_status_t (*local_scales)(const zc_codec_params_t *params, zc_dtype_t dtype, const void *src,
                                const float *residual, uint64_t count, float *scales);
    zc_status_t (*encode_shared)(const zc_codec_params_t *params, zc_codec_state_t *state,
                                 const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                 uint64_t count, const float *scales, uint8_t *dst, size_t cap,
                                 size_t *len_p);
    /*
     * The linear codec the compressed ring runs when ZIPCCL_ALGO=ring asks it
     * of this one, with the same ZIPCCL_* choices (qsgd: qsgd-int). 0: none.
     */
    zc_codec_id_t ring_codec;
    /* Codec-owned state: set state->priv. NULL: the codec has none. */
    zc_status_t (*state_init)(zc_codec_state_t *state);
    void (*state_fini)(zc_codec_state_t *state);
    /* Bytes state->priv holds, for the state store's accounting. NULL: none. */
    size_t (*state_bytes)(const zc_codec_state_t *state);
    /* See zc_codec_state_update. NULL: nothing to learn. */
    zc_status_t (*state_update)(zc_codec_state_t *state, const float *sum, uint64_t count);
} zc_codec_ops_t;

/* The registry: every codec, indexed by zc_codec_id_t (NULL for an unknown id). */
const zc_codec_ops_t *zc_codec_ops(zc_codec_id_t codec);

/*
 * The codec facts the layers above ask for, each answered by the codec's ops
 * (params already checked where a codec reads its fields).
 */

/*
 * Whether @p a and @p b describe the same encoding and state: same codec and
 * equal codec fields (other codecs' fields and padding do not count).
 */
int zc_codec_params_equal(const zc_codec_params_t *a, const zc_codec_params_t *b);
/*
 * Copies a caller's checked @p params into @p copy_p without reading past its
 * struct_size (a caller built against an older, shorter struct).
 */
void zc_codec_params_copy(const zc_codec_params_t *params, zc_codec_params_t *copy_p);
/* FNV-1a 32 of the codec id and its wire fields: what every rank of a call must share. */
uint32_t zc_codec_params_hash(const zc_codec_params_t *params);
/* Whether @p params keep an error-feedback residual in the state. */
int zc_codec_error_feedback(const zc_codec_params_t *params);
/* Sets the rank count the payloads of @p params are summed over, where the codec uses it. */
void zc_codec_params_set_ranks(zc_codec_params_t *params, uint32_t nranks);
/* See zc_codec_ops_t.granule; 0 when the codec has no such unit. */
size_t zc_codec_granule(const zc_codec_params_t *params);
/* See zc_codec_ops_t.wire_ratio. */
double zc_codec_wire_ratio(const zc_codec_params_t *params);
/* Whether @p codec's ratio is learned from a tensor's gradients (ops learned_ratio). */
int zc_codec_learns_ratio(zc_codec_id_t codec);
/* See zc_codec_ops_t.sparse_decode; 0 for an unknown codec. */
int zc_codec_sparse_decode(zc_codec_id_t codec);
/* See zc_codec_ops_t.learned_ratio; 0 for NULL or a codec without one. */
double zc_codec_learned_ratio(const zc_codec_state_t *state);
/* See zc_codec_ops_t.ring_codec: @p codec itself when it is linear, else its ring codec or 0. */
zc_codec_id_t zc_codec_ring_codec(zc_codec_id_t codec);
/* See zc_codec_ops_t.shared_scales: 0 when the codec shares none. */
size_t zc_codec_shared_scales(const zc_codec_params_t *params, uint64_t count);
/*
 * This rank's scales of @p count values of @p src (with @p state's residual
 * under error feedback) into @p scales (zc_codec_shared_scales of them).
 */
zc_status_t zc_codec_local_scales(const zc_codec_params_t *params, zc_codec_state_t *state,
                                  zc_dtype_t dtype, const void *src, uint64_t count, float *scales);
/*
 * zc_codec_encode with the scales every rank agreed on (the maximum of their
 * zc_codec_local_scales), so that the payloads add (zc_codec_reduce).
 */
zc_status_t zc_codec_encode_shared(const zc_codec_params_t *params, zc_codec_state_t *state,
                                   const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                   uint64_t count, const float *scales, void *dst, size_t cap,
                                   size_t *len_p);
/* Bytes @p state holds: the struct, the residual and the codec's own. */
size_t zc_codec_state_bytes(const zc_codec_state_t *state);

/*
 * Every codec's parameters from the ZIPCCL_* configuration (each codec's
 * params_from_config), with @p codec's id; the rank count stays 1 for the
 * caller to set (zc_codec_params_set_ranks). ZC_ERR_INVALID_CONFIG when the
 * combination is invalid for @p codec (a GradiVeQ dim above its slice).
 */
zc_status_t zc_codec_params_from_config(const struct zc_config *cfg, zc_codec_id_t codec,
                                        zc_codec_params_t *params_p);

#endif
