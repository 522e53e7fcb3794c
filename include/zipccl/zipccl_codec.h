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

/**
 * Element types. Codecs accept the floating types F32, F16 and BF16 as input;
 * the collectives (zipccl.h) reduce every type, uncompressed where no codec applies.
 */
typedef enum zc_dtype {
    ZC_DTYPE_F32 = 0,
    ZC_DTYPE_F16 = 1,  /**< IEEE binary16 */
    ZC_DTYPE_BF16 = 2, /**< bfloat16 */
    ZC_DTYPE_F64 = 3,
    ZC_DTYPE_I8 = 4,
    ZC_DTYPE_U8 = 5,
    ZC_DTYPE_I32 = 6,
    ZC_DTYPE_U32 = 7,
    ZC_DTYPE_I64 = 8,
    ZC_DTYPE_U64 = 9,
    ZC_DTYPE_COUNT
} zc_dtype_t;

/** Codec identifiers; the value is stored in every payload header. */
typedef enum zc_codec_id {
    ZC_CODEC_NONE = 0,     /**< raw f32, for the same interface everywhere */
    ZC_CODEC_QSGD = 1,     /**< stochastic quantization in buckets (Alistarh et al. 2017) */
    ZC_CODEC_FP16 = 2,     /**< IEEE binary16, round to nearest even */
    ZC_CODEC_BF16 = 3,     /**< bfloat16, round to nearest even */
    ZC_CODEC_TOPK = 4,     /**< gradient dropping with error feedback (Aji & Heafield 2017) */
    ZC_CODEC_GRADIVEQ = 5, /**< PCA projection of slices, summed compressed (Yu et al. 2018) */
    ZC_CODEC_QSGD_INT = 6, /**< QSGD levels of a scale shared by all ranks, summed as integers */
    ZC_CODEC_POWERSGD = 7, /**< rank-r power iteration with error feedback (Vogels et al. 2019) */
    ZC_CODEC_COUNT
} zc_codec_id_t;

/** What a collective may rely on; zc_codec_caps() returns an OR of these. */
enum {
    ZC_CODEC_CAP_STATELESS = 1u << 0, /**< encode and decode need no zc_codec_state_t */
    ZC_CODEC_CAP_LINEAR = 1u << 1,    /**< payloads add without decoding: zc_codec_reduce */
    ZC_CODEC_CAP_UNBIASED = 1u << 2,  /**< E[decode(encode(x))] = x */
    ZC_CODEC_CAP_LOSSLESS = 1u << 3,  /**< decode(encode(x)) = x for f32 input */
};

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

/** Value format of the kept top-k values. */
typedef enum zc_topk_values {
    ZC_TOPK_VALUES_F32 = 0,
    ZC_TOPK_VALUES_F16 = 1, /**< rounding error goes to the residual too */
} zc_topk_values_t;

/**
 * Parameters of one codec; fill with zc_codec_params_default, then adjust.
 *
 * struct_size is the size of the struct the caller was compiled with, which
 * zc_codec_params_default sets to sizeof(zc_codec_params_t). A later release
 * adds new codecs' fields at the end, so a program built against this header
 * keeps working with it; every function that takes params reads no byte at or
 * past struct_size, and returns ZC_ERR_INVALID_ARG when struct_size is 0 or
 * ends before the last field the params' codec uses. Params built by hand
 * without zc_codec_params_default (struct_size 0) are therefore refused.
 */
typedef struct zc_codec_params {
    uint32_t struct_size; /**< bytes of this struct the caller has: sizeof at its build */
    zc_codec_id_t codec;
    struct {
        uint32_t levels;       /**< s, 1..65535: magnitudes are quantized to k/s, k = 0..s */
        uint32_t bucket;       /**< d, 1..2^24 values scaled together */
        zc_qsgd_scale_t scale; /**< bucket scale */
        zc_qsgd_coding_t coding;
        int error_feedback; /**< keep what was not sent in the state and add it next time */
    } qsgd;
    struct {
        double density;          /**< rho in (0, 1]: fraction of values kept (default 0.01) */
        zc_topk_values_t values; /**< kept values as f32 or f16 */
    } topk;
    struct {
        uint32_t slice;     /**< K, 2..4096: values per slice */
        uint32_t dim;       /**< d, 1..K: coefficients per slice; 0 = from energy */
        double energy;      /**< with dim 0: smallest d keeping this fraction of variance */
        uint32_t ranks;     /**< N, the number of payloads summed before decoding */
        uint32_t samples;   /**< slices sampled from each raw sum a basis learns from */
        uint32_t refresh;   /**< every refresh-th call after the warm-up is raw and relearns
                                 the basis; 0 = learn once */
        int error_feedback; /**< keep the projection residual in the state (needs refresh) */
    } gradiveq;
    /**
     * 1: every payload ends with a CRC-32C of the rest (ZIPCCL_CHECKSUM), so
     * that a bit flipped on the wire fails the decode (ZC_ERR_CORRUPT) rather
     * than changing a value. Any codec; 4 bytes per payload.
     */
    uint32_t checksum;
    /**
     * GradiVeQ, 1..2^20: the first gradiveq_warmup calls of a state travel raw
     * and the first basis is learned from all their sums (after checksum: a
     * field added later goes at the end).
     */
    uint32_t gradiveq_warmup;
    /**
     * QSGD whose payloads add as integers (ZC_CODEC_QSGD_INT): every rank
     * quantizes a bucket to levels of the same scale, the largest over ranks,
     * which the all-reduce agrees on first (zc_codec_encode alone uses the
     * bucket's own scale: such payloads decode, but add only to payloads of
     * equal scales). Reads the ZIPCCL_QSGD_* variables.
     */
    struct {
        uint32_t levels;       /**< s, 1..65535: one payload's levels are -s..s */
        uint32_t bucket;       /**< d, 1..2^24 values sharing one scale */
        zc_qsgd_scale_t scale; /**< bucket scale before the maximum over ranks */
        uint32_t ranks;        /**< N, 1..2^14: payloads summed; sizes the bound */
        int error_feedback;    /**< keep what was not sent in the state and add it next time */
    } qsgd_int;
    /**
     * PowerSGD (ZC_CODEC_POWERSGD): the tensor as a matrix, sent as its rank-r
     * factors P and Q (collectives/powersgd.c sums them in one all-reduce).
     */
    struct {
        uint32_t rank;      /**< r, 1..64: columns of P and Q */
        uint32_t warmup;    /**< calls of a tensor sent uncompressed before the first P, Q */
        int error_feedback; /**< keep M - P Q^T in the state and add it next time (default 1) */
    } powersgd;
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
/** ZC_CODEC_CAP_* flags of @p codec (0 for an unknown id). */
unsigned zc_codec_caps(zc_codec_id_t codec);

/**
 * Fills the first @p size bytes of @p params_p (the caller's
 * sizeof(zc_codec_params_t)) with @p codec's defaults and sets struct_size to
 * @p size; bytes past this library's struct are zeroed. Called through
 * zc_codec_params_default, which passes the size the caller was compiled with.
 * Errors: ZC_ERR_INVALID_ARG for an unknown codec, NULL, or a size too small
 * for the codec's fields.
 */
zc_status_t zc_codec_params_default_sized(zc_codec_id_t codec, zc_codec_params_t *params_p,
                                          size_t size);

/**
 * Fills @p params_p with @p codec's defaults, struct_size with
 * sizeof(zc_codec_params_t): QSGD 4 bits, bucket 512, max scale, fixed coding,
 * no error feedback; top-k density 0.01 with f32 values; GradiVeQ K = 64, d
 * from 99% energy, 1 rank, 16384 samples, 10 raw warm-up calls, a raw refresh
 * every 20th call; PowerSGD rank 4, 10 warm-up calls, error feedback. Every
 * codec's fields get their defaults, so params whose codec is changed afterwards stay valid.
 * Inline, so that the size is the caller's, never the library's.
 */
static inline zc_status_t zc_codec_params_default(zc_codec_id_t codec, zc_codec_params_t *params_p)
{
    return zc_codec_params_default_sized(codec, params_p, sizeof(*params_p));
}

/**
 * Checks @p params: ZC_ERR_INVALID_ARG for NULL or a struct_size that is 0 or
 * too small for the codec's fields, ZC_ERR_INVALID_CONFIG for an unknown codec
 * or an out-of-range field. Every function taking params checks them so.
 */
zc_status_t zc_codec_params_check(const zc_codec_params_t *params);

/**
 * Per-tensor state: the error-feedback residual (top-k always; QSGD and
 * GradiVeQ when asked) and the GradiVeQ basis. One state per tensor, created
 * for that tensor's params and count; stateless codecs take NULL instead.
 */
typedef struct zc_codec_state zc_codec_state_t;

/** True when encoding with @p params needs a zc_codec_state_t. */
int zc_codec_needs_state(const zc_codec_params_t *params);

/**
 * Creates the state for @p count values encoded with @p params (copied).
 * Errors: ZC_ERR_INVALID_ARG, ZC_ERR_INVALID_CONFIG, ZC_ERR_NO_MEMORY.
 */
zc_status_t zc_codec_state_create(const zc_codec_params_t *params, uint64_t count,
                                  zc_codec_state_t **state_p);
/** Frees @p state; NULL is allowed. */
void zc_codec_state_destroy(zc_codec_state_t *state);

/**
 * Feeds the decoded all-reduce result (@p sum, the sum over every rank, @p count
 * values) back to the state. GradiVeQ learns its basis from it: every rank must
 * call this with the identical sum in the same order, so that all compute the
 * same basis. A no-op for codecs without learned state.
 */
zc_status_t zc_codec_state_update(zc_codec_state_t *state, const float *sum, uint64_t count);

/** L2 norm of the error-feedback residual (0 without error feedback). */
double zc_codec_state_residual_norm(const zc_codec_state_t *state);

/**
 * Largest payload, in bytes, that encoding @p count values with @p params can
 * produce, header included; 0 if params are invalid. A buffer of this size never
 * gives ZC_ERR_BUFFER_TOO_SMALL.
 */
size_t zc_codec_bound(const zc_codec_params_t *params, uint64_t count);

/**
 * Encodes @p count values of type @p dtype at @p src into @p dst (capacity
 * @p cap bytes); on success writes the payload length to @p len_p.
 * @p state: from zc_codec_state_create with the same params and count when
 * zc_codec_needs_state(), else NULL (ignored). With error feedback the input
 * is added to the residual first and what the payload carries is taken out of
 * it after, so sent + new residual = input + old residual; when encoding fails
 * the input stays in the residual, and is sent with the next call.
 * @p rng: the random draws (NULL: all zero).
 * Errors: ZC_ERR_INVALID_ARG, ZC_ERR_INVALID_CONFIG, ZC_ERR_BUFFER_TOO_SMALL,
 * ZC_ERR_MISMATCH (state made for other params or count), ZC_ERR_NO_MEMORY.
 */
zc_status_t zc_codec_encode(const zc_codec_params_t *params, zc_codec_state_t *state,
                            const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                            uint64_t count, void *dst, size_t cap, size_t *len_p);

/**
 * Decodes the payload at @p src (@p len bytes) and adds the values into
 * @p dst[0..count). The payload must hold exactly @p count values. @p state:
 * GradiVeQ needs the state that holds the payload's basis; others take NULL.
 * Errors: ZC_ERR_CORRUPT (bad or truncated payload; @p dst is then unchanged
 * unless the body itself was damaged after a valid header, in which case
 * values already added stay added — callers treat the buffer as lost),
 * ZC_ERR_MISMATCH (count, version or basis differs), ZC_ERR_INVALID_ARG.
 */
zc_status_t zc_codec_decode_add(zc_codec_state_t *state, const void *src, size_t len, float *dst,
                                uint64_t count);

/**
 * Adds two payloads of a linear codec (ZC_CODEC_CAP_LINEAR) without decoding:
 * decode(result) = decode(a) + decode(b), up to the codec's rounding. Both must
 * come from the same codec, parameters, count and basis. @p dst (capacity
 * @p cap) may be @p a or @p b. Errors: ZC_ERR_UNSUPPORTED (codec not linear),
 * ZC_ERR_MISMATCH, ZC_ERR_CORRUPT, ZC_ERR_BUFFER_TOO_SMALL, ZC_ERR_INVALID_ARG.
 */
zc_status_t zc_codec_reduce(zc_codec_state_t *state, const void *a, size_t alen, const void *b,
                            size_t blen, void *dst, size_t cap, size_t *len_p);

/** Parses the header of a payload without decoding the body. */
zc_status_t zc_payload_info(const void *src, size_t len, zc_payload_info_t *info_p);

#ifdef __cplusplus
}
#endif

#endif
