/*
 * zipccl codecs on host buffers, usable alone (without a communicator).
 *
 * A codec turns n values (f32, f16 or bf16) into a self-describing payload and
 * adds a payload's decoded values into an f32 accumulator:
 *
 *     zc_codec_params_t p;
 *     zc_codec_params_default(ZC_CODEC_QSGD, &p);
 *     size_t cap = zc_codec_bound(&p, n);
 *     void *payload = malloc(cap);
 *     size_t len;
 *     zc_codec_encode(&p, NULL, &rng, ZC_DTYPE_F32, grad, n, payload, cap, &len);
 *     zc_codec_decode_add(NULL, payload, len, sum, n);   // sum[i] += decoded[i]
 *
 * Payload format (little-endian): a 16-byte header (magic "ZC", version, codec
 * id, codec flags, element count), then the codec's body; docs/codecs.md gives
 * every field. A decoder trusts nothing: a payload that is truncated,
 * oversized, bit-flipped in its header or inconsistent returns an error, and
 * nothing is read or written out of bounds.
 *
 * Thread safety: every function is reentrant; calls sharing a state object
 * must not run concurrently.
 */
#ifndef ZIPCCL_CODEC_H
#define ZIPCCL_CODEC_H

#include <zipccl/zipccl_status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** Element types a codec accepts as input. */
typedef enum zc_dtype {
    ZC_DTYPE_F32 = 0,
    ZC_DTYPE_F16 = 1,  /**< IEEE binary16 */
    ZC_DTYPE_BF16 = 2, /**< bfloat16 */
} zc_dtype_t;

/** Codec identifiers; the value is stored in every payload header. */
typedef enum zc_codec_id {
    ZC_CODEC_NONE = 0, /**< raw f32, for the same interface everywhere */
    ZC_CODEC_QSGD = 1, /**< stochastic quantization in buckets (Alistarh et al. 2017) */
    ZC_CODEC_COUNT
} zc_codec_id_t;

/** QSGD bucket scale. */
typedef enum zc_qsgd_scale {
    ZC_QSGD_SCALE_MAX = 0, /**< largest magnitude in the bucket (the paper's experiments) */
    ZC_QSGD_SCALE_L2 = 1,  /**< L2 norm of the bucket (the paper's theory, Lemma 3.1) */
} zc_qsgd_scale_t;

/** QSGD coding of the integer levels. */
typedef enum zc_qsgd_coding {
    ZC_QSGD_CODING_FIXED = 0, /**< b = 1 + ceil(log2(s+1)) bits per value, sign-magnitude */
    ZC_QSGD_CODING_ELIAS = 1, /**< Elias-omega code of gaps between nonzeros and of levels */
    ZC_QSGD_CODING_AUTO = 2,  /**< the smaller of the two, chosen per bucket */
} zc_qsgd_coding_t;

/** Parameters of one codec; fill with zc_codec_params_default, then adjust. */
typedef struct zc_codec_params {
    zc_codec_id_t codec;
    struct {
        uint32_t levels;       /**< s, 1..65535: magnitudes are quantized to k/s, k = 0..s */
        uint32_t bucket;       /**< d, 1..2^24 values scaled together */
        zc_qsgd_scale_t scale; /**< bucket scale */
        zc_qsgd_coding_t coding;
    } qsgd;
} zc_codec_params_t;

/**
 * Where the random draws of one encode come from: Philox4x32-10 keyed by seed,
 * with rank, stream and counter in its counter. Two encodes with equal rng and
 * input produce identical payloads; change counter every call (each step) so
 * that rounding errors are independent across calls.
 */
typedef struct zc_codec_rng {
    uint64_t seed;
    uint32_t rank;
    uint32_t stream;
    uint32_t counter;
} zc_codec_rng_t;

/** What a payload header says. */
typedef struct zc_payload_info {
    zc_codec_id_t codec;
    unsigned version;
    uint64_t count; /**< number of encoded values */
} zc_payload_info_t;

/** Bytes of the fixed payload header. */
#define ZC_PAYLOAD_HEADER_BYTES 16

/** The QSGD level count for bit width @p bits (sign included): 2^(bits-1) - 1. */
uint32_t zc_qsgd_levels_for_bits(unsigned bits);

/** Name of a codec ("qsgd"), or NULL for an unknown id. */
const char *zc_codec_name(zc_codec_id_t codec);
/** Codec id for @p name into @p codec_p; ZC_ERR_INVALID_ARG if unknown. */
zc_status_t zc_codec_find(const char *name, zc_codec_id_t *codec_p);

/** Fills @p params_p with @p codec's defaults (QSGD: 4 bits, bucket 512, max scale, fixed). */
zc_status_t zc_codec_params_default(zc_codec_id_t codec, zc_codec_params_t *params_p);
/** Checks @p params: ZC_ERR_INVALID_CONFIG for an out-of-range field. */
zc_status_t zc_codec_params_check(const zc_codec_params_t *params);

/**
 * Largest payload, in bytes, that encoding @p count values with @p params can
 * produce, header included; 0 if params are invalid. A buffer of this size never
 * gives ZC_ERR_BUFFER_TOO_SMALL.
 */
size_t zc_codec_bound(const zc_codec_params_t *params, uint64_t count);

/**
 * Encodes @p count values of type @p dtype at @p src into @p dst (capacity
 * @p cap bytes); on success writes the payload length to @p len_p.
 * @p state: per-tensor state for stateful codecs, NULL for stateless ones.
 * Errors: ZC_ERR_INVALID_ARG, ZC_ERR_INVALID_CONFIG, ZC_ERR_BUFFER_TOO_SMALL.
 */
zc_status_t zc_codec_encode(const zc_codec_params_t *params, void *state, const zc_codec_rng_t *rng,
                            zc_dtype_t dtype, const void *src, uint64_t count, void *dst,
                            size_t cap, size_t *len_p);

/**
 * Decodes the payload at @p src (@p len bytes) and adds the values into
 * @p dst[0..count). The payload must hold exactly @p count values.
 * Errors: ZC_ERR_CORRUPT (bad or truncated payload; @p dst is then unchanged
 * unless the body itself was damaged after a valid header, in which case
 * values already added stay added — callers treat the buffer as lost),
 * ZC_ERR_MISMATCH (count or codec state differs), ZC_ERR_INVALID_ARG.
 */
zc_status_t zc_codec_decode_add(void *state, const void *src, size_t len, float *dst,
                                uint64_t count);

/** Parses the header of a payload without decoding the body. */
zc_status_t zc_payload_info(const void *src, size_t len, zc_payload_info_t *info_p);

#ifdef __cplusplus
}
#endif

#endif
