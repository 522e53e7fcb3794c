#include "codec/codec.h"
#include "codec/oob.h"
#include "common/compiler.h"
#include "common/crc32c.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * The registry: one line per codec (its id and its ops table, defined in its
 * folder). Everything else the library knows of a codec comes from the table.
 */
#define ZC_CODEC_REGISTRY(X)                                                                       \
    X(ZC_CODEC_NONE, zc_codec_none_ops)                                                            \
    X(ZC_CODEC_QSGD, zc_codec_qsgd_ops)                                                            \
    X(ZC_CODEC_FP16, zc_codec_fp16_ops)                                                            \
    X(ZC_CODEC_BF16, zc_codec_bf16_ops)                                                            \
    X(ZC_CODEC_TOPK, zc_codec_topk_ops)                                                            \
    X(ZC_CODEC_GRADIVEQ, zc_codec_gradiveq_ops)                                                    \
    X(ZC_CODEC_QSGD_INT, zc_codec_qsgd_int_ops)                                                    \
    X(ZC_CODEC_POWERSGD, zc_codec_powersgd_ops)

#define DECLARE_OPS(id, ops) extern const zc_codec_ops_t ops;
ZC_CODEC_REGISTRY(DECLARE_OPS)
#undef DECLARE_OPS

static const zc_codec_ops_t *const registry[ZC_CODEC_COUNT] = {
#define REGISTER_OPS(id, ops) [id] = &ops,
    ZC_CODEC_REGISTRY(REGISTER_OPS)
#undef REGISTER_OPS
};

const zc_codec_ops_t *zc_codec_ops(zc_codec_id_t codec)
{
    return (unsigned)codec < ZC_CODEC_COUNT ? registry[codec] : NULL;
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

ZC_EXPORT unsigned zc_codec_caps(zc_codec_id_t codec)
{
    const zc_codec_ops_t *ops = zc_codec_ops(codec);
    return ops ? ops->caps : 0;
}

ZC_EXPORT uint32_t zc_qsgd_levels_for_bits(unsigned bits)
{
    return bits >= 2 && bits <= 17 ? (UINT32_C(1) << (bits - 1)) - 1 : 0;
}

/* Bytes a caller's params must hold for @p ops: the header fields and every field of the codec. */
static size_t params_size_needed(const zc_codec_ops_t *ops)
{
    size_t need = offsetof(zc_codec_params_t, codec) + sizeof(zc_codec_id_t);
    for (unsigned i = 0; i < ops->nfields; i++)
        need = ZC_MAX(need, ops->fields[i].offset + ops->fields[i].size);
    return need;
}

/* Whether @p params ask for a checksum trailer (a caller's struct may end before the field). */
static int wants_checksum(const zc_codec_params_t *params)
{
    return params->struct_size >= offsetof(zc_codec_params_t, checksum) + sizeof(uint32_t) &&
           params->checksum != 0;
}

ZC_EXPORT zc_status_t zc_codec_params_default_sized(zc_codec_id_t codec,
                                                    zc_codec_params_t *params_p, size_t size)
{
    const zc_codec_ops_t *ops = zc_codec_ops(codec);
    zc_codec_params_t p;

    if (!ops || !params_p || size < params_size_needed(ops) || size > UINT32_MAX)
        return ZC_ERR_INVALID_ARG;
    memset(&p, 0, sizeof(p));
    p.struct_size = (uint32_t)size;
    p.codec = codec;
    /* every codec's fields, so that params whose codec is changed afterwards stay valid */
    for (unsigned i = 0; i < ZC_CODEC_COUNT; i++)
        if (registry[i]->params_default)
            registry[i]->params_default(&p);
    memcpy(params_p, &p, ZC_MIN(size, sizeof(p)));
    if (size > sizeof(p)) /* a newer caller's fields, for codecs this library does not know */
        memset((uint8_t *)params_p + sizeof(p), 0, size - sizeof(p));
    return ZC_OK;
}

ZC_EXPORT zc_status_t zc_codec_params_check(const zc_codec_params_t *params)
{
    /* struct_size first: a caller's struct may end before the codec id */
    if (!params || params->struct_size < offsetof(zc_codec_params_t, codec) + sizeof(zc_codec_id_t))
        return ZC_ERR_INVALID_ARG;
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    if (!ops)
        return ZC_ERR_INVALID_CONFIG;
    if (params->struct_size < params_size_needed(ops))
        return ZC_ERR_INVALID_ARG;
    if (wants_checksum(params) && params->checksum != 1)
        return ZC_ERR_INVALID_CONFIG;
    return ops->check ? ops->check(params) : ZC_OK;
}

void zc_codec_params_copy(const zc_codec_params_t *params, zc_codec_params_t *copy_p)
{
    size_t size = ZC_MIN((size_t)params->struct_size, sizeof(*copy_p));
    memset(copy_p, 0, sizeof(*copy_p));
    memcpy(copy_p, params, size);
    copy_p->struct_size = (uint32_t)size;
}

ZC_EXPORT size_t zc_codec_bound(const zc_codec_params_t *params, uint64_t count)
{
    if (zc_codec_params_check(params) != ZC_OK)
        return 0;
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    uint64_t body = ops->bound(params, count), oob = 0;
    if (ops->oob_limit > 0) {
        if (count > SIZE_MAX / 8)
            return 0; /* no section that large fits a size_t */
        oob = zc_oob_bound(count);
    }
    const uint64_t crc = wants_checksum(params) ? ZC_PAYLOAD_CRC_BYTES : 0;
    if (body >= SIZE_MAX || body > SIZE_MAX - ZC_PAYLOAD_HEADER_BYTES - oob - crc)
        return 0;
    return (size_t)(body + oob + crc) + ZC_PAYLOAD_HEADER_BYTES;
}

ZC_EXPORT zc_status_t zc_payload_info(const void *src, size_t len, zc_payload_info_t *info_p)
{
    zc_payload_info_t info;

    if (!src || !info_p)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_payload_header_parse_flags(src, len, ZC_PAYLOAD_FLAGS_KNOWN, &info));
    *info_p = info;
    return ZC_OK;
}

ZC_EXPORT int zc_codec_needs_state(const zc_codec_params_t *params)
{
    if (zc_codec_params_check(params) != ZC_OK)
        return 0;
    return zc_codec_error_feedback(params) || zc_codec_ops(params->codec)->state_init != NULL;
}

ZC_EXPORT void zc_codec_state_destroy(zc_codec_state_t *state)
{
    if (!state)
        return;
    const zc_codec_ops_t *ops = zc_codec_ops(state->params.codec);
    if (state->priv && ops && ops->state_fini)
        ops->state_fini(state);
    free(state->residual);
    free(state);
}

ZC_EXPORT zc_status_t zc_codec_state_create(const zc_codec_params_t *params, uint64_t count,
                                            zc_codec_state_t **state_p)
{
    zc_status_t status;

    if (!params || !state_p || count > SIZE_MAX / sizeof(float))
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_codec_params_check(params));
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    zc_codec_state_t *state = calloc(1, sizeof(*state));
    if (!state)
        return ZC_ERR_NO_MEMORY;
    zc_codec_params_copy(params, &state->params);
    state->count = count;
    if (zc_codec_error_feedback(params)) {
        state->residual = calloc(count ? (size_t)count : 1, sizeof(float));
        if (!state->residual) {
            status = ZC_ERR_NO_MEMORY;
            goto err_destroy;
        }
    }
    if (ops->state_init)
        ZC_CHECK_GOTO(ops->state_init(state), status, err_destroy);
    *state_p = state;
    return ZC_OK;

err_destroy:
    zc_codec_state_destroy(state);
    return status;
}

ZC_EXPORT zc_status_t zc_codec_state_update(zc_codec_state_t *state, const float *sum,
                                            uint64_t count)
{
    if (!state || (count > 0 && !sum))
        return ZC_ERR_INVALID_ARG;
    if (count != state->count)
        return ZC_ERR_MISMATCH;
    const zc_codec_ops_t *ops = zc_codec_ops(state->params.codec);
    return ops->state_update ? ops->state_update(state, sum, count) : ZC_OK;
}

ZC_EXPORT double zc_codec_state_residual_norm(const zc_codec_state_t *state)
{
    double sum = 0;
    if (!state || !state->residual)
        return 0;
    for (uint64_t i = 0; i < state->count; i++)
        sum += (double)state->residual[i] * state->residual[i];
    return sqrt(sum);
}

/* ------------------------------------------------------- codec facts */

int zc_codec_params_equal(const zc_codec_params_t *a, const zc_codec_params_t *b)
{
    const zc_codec_ops_t *ops = zc_codec_ops(a->codec);

    if (a->codec != b->codec || !ops)
        return a->codec == b->codec;
    if (wants_checksum(a) != wants_checksum(b))
        return 0;
    for (unsigned i = 0; i < ops->nfields; i++) {
        const zc_codec_field_t *f = &ops->fields[i];
        const uint8_t *pa = (const uint8_t *)a + f->offset, *pb = (const uint8_t *)b + f->offset;
        if (f->kind == ZC_CODEC_FIELD_F64) {
            double x, y;
            memcpy(&x, pa, sizeof(x));
            memcpy(&y, pb, sizeof(y));
            if (x != y)
                return 0;
        } else if (memcmp(pa, pb, f->size) != 0) {
            return 0;
        }
    }
    return 1;
}

static uint32_t fnv1a(uint32_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

uint32_t zc_codec_params_hash(const zc_codec_params_t *params)
{
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    uint32_t h = fnv1a(2166136261u, &params->codec, sizeof(params->codec));

    for (unsigned i = 0; ops && i < ops->nfields; i++)
        if (ops->fields[i].wire)
            h = fnv1a(h, (const uint8_t *)params + ops->fields[i].offset, ops->fields[i].size);
    if (wants_checksum(params)) /* only then: the hash without one is what it always was */
        h = fnv1a(h, "crc32c", 6);
    return h;
}

int zc_codec_error_feedback(const zc_codec_params_t *params)
{
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    return ops && ops->error_feedback && ops->error_feedback(params);
}

void zc_codec_params_set_ranks(zc_codec_params_t *params, uint32_t nranks)
{
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    if (ops && ops->params_set_ranks)
        ops->params_set_ranks(params, nranks);
}

size_t zc_codec_granule(const zc_codec_params_t *params)
{
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    return ops && ops->granule ? ops->granule(params) : 0;
}

double zc_codec_wire_ratio(const zc_codec_params_t *params)
{
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    return ops && ops->wire_ratio ? ops->wire_ratio(params) : 1.0;
}

int zc_codec_sparse_decode(zc_codec_id_t codec)
{
    const zc_codec_ops_t *ops = zc_codec_ops(codec);
    return ops && ops->sparse_decode;
}

int zc_codec_learns_ratio(zc_codec_id_t codec)
{
    const zc_codec_ops_t *ops = zc_codec_ops(codec);
    return ops && ops->learned_ratio;
}

double zc_codec_learned_ratio(const zc_codec_state_t *state)
{
    const zc_codec_ops_t *ops = state ? zc_codec_ops(state->params.codec) : NULL;
    return ops && ops->learned_ratio ? ops->learned_ratio(state) : 0.0;
}

size_t zc_codec_state_bytes(const zc_codec_state_t *state)
{
    const zc_codec_ops_t *ops = zc_codec_ops(state->params.codec);
    size_t bytes = sizeof(*state) + (state->residual ? (size_t)state->count * sizeof(float) : 0);
    return bytes + (ops && ops->state_bytes ? ops->state_bytes(state) : 0);
}

/* The state a call with @p params needs: NULL if none, else it must match. */
static zc_status_t state_for(const zc_codec_params_t *params, zc_codec_state_t *state,
                             uint64_t count, zc_codec_state_t **state_p)
{
    if (!zc_codec_needs_state(params)) {
        *state_p = NULL;
        return ZC_OK;
    }
    if (!state)
        return ZC_ERR_INVALID_ARG;
    if (state->count != count || !zc_codec_params_equal(&state->params, params))
        return ZC_ERR_MISMATCH;
    *state_p = state;
    return ZC_OK;
}

/*
 * Sends the values of @p src that the codec's body cannot carry out of band:
 * collects them into @p oob and returns in *src_p the input with 0 at their
 * positions (the residual itself, zeroed there, or a copy in *masked_p).
 * Past the section's cap the rest stay in the input, for the body to carry as
 * it can (*surplus_p says how many), unless the codec has a wide body to put
 * them in after the encode (oob_fit).
 */
static zc_status_t oob_split(const zc_codec_ops_t *ops, zc_codec_state_t *state, zc_dtype_t dtype,
                             const void **src_p, uint64_t count, zc_oob_t *oob, void **masked_p,
                             uint64_t *surplus_p)
{
    const size_t esize = zc_dtype_size(dtype);

    *surplus_p = 0;
    if (ops->oob_limit <= 0)
        return ZC_OK;
    ZC_CHECK(zc_oob_scan(dtype, *src_p, count, ops->oob_limit, ops->oob_finite_only, oob));
    if (oob->n == 0)
        return ZC_OK;
    if (oob->n > zc_oob_cap(count) && !ops->widen) {
        *surplus_p = oob->n - zc_oob_cap(count);
        oob->n = zc_oob_cap(count);
    }
    uint8_t *masked = (uint8_t *)(state && state->residual ? (void *)state->residual : NULL);
    if (!masked) {
        masked = malloc((size_t)count * esize);
        if (!masked)
            return ZC_ERR_NO_MEMORY;
        memcpy(masked, *src_p, (size_t)count * esize);
        *masked_p = masked;
    }
    /* all-zero bits are +0 in f32, f16 and bf16 */
    for (uint64_t j = 0; j < oob->n; j++)
        memset(masked + oob->pos[j] * esize, 0, esize);
    *src_p = masked;
    return ZC_OK;
}

/*
 * Keeps a section within its cap: the entries past it go into the body
 * @p body (*@p body_len_p bytes, room for @p body_cap), non-finite there where
 * they are (ops->poison); a codec with a wide body takes every entry into
 * it, exactly, and the section empties.
 */
static zc_status_t oob_fit(const zc_codec_ops_t *ops, const zc_codec_state_t *state, uint8_t *body,
                           size_t *body_len_p, size_t body_cap, uint64_t count, zc_oob_t *oob)
{
    const uint64_t cap = zc_oob_cap(count);
    uint64_t j = cap;

    if (oob->n <= cap)
        return ZC_OK;
    if (ops->widen) {
        ZC_CHECK(ops->widen(body, body_len_p, count, body_cap));
        j = 0;
    }
    for (; j < oob->n; j++)
        ops->poison(state, body, *body_len_p, count, oob->pos[j], oob->val[j]);
    oob->n = ops->widen ? 0 : cap;
    return ZC_OK;
}

/* Appends the CRC-32C trailer to the payload of *@p len_p bytes at @p dst (flag set first). */
static zc_status_t payload_seal(uint8_t *dst, size_t cap, size_t *len_p)
{
    if (cap - *len_p < ZC_PAYLOAD_CRC_BYTES)
        return ZC_ERR_BUFFER_TOO_SMALL;
    dst[4] |= ZC_PAYLOAD_FLAG_CRC;
    zc_payload_st32(dst + *len_p, zc_crc32c(dst, *len_p));
    *len_p += ZC_PAYLOAD_CRC_BYTES;
    return ZC_OK;
}

/*
 * A payload with a trailer (header already parsed): ZC_ERR_CORRUPT unless the
 * CRC-32C matches; *@p len_p loses the trailer. Without one, nothing to do.
 */
static zc_status_t payload_open(const uint8_t *src, size_t *len_p)
{
    if (!(src[4] & ZC_PAYLOAD_FLAG_CRC))
        return ZC_OK;
    if (*len_p < ZC_PAYLOAD_HEADER_BYTES + ZC_PAYLOAD_CRC_BYTES)
        return ZC_ERR_CORRUPT;
    *len_p -= ZC_PAYLOAD_CRC_BYTES;
    return zc_crc32c(src, *len_p) == zc_payload_ld32(src + *len_p) ? ZC_OK : ZC_ERR_CORRUPT;
}

zc_codec_id_t zc_codec_ring_codec(zc_codec_id_t codec)
{
    const zc_codec_ops_t *ops = zc_codec_ops(codec);
    if (!ops)
        return ZC_CODEC_NONE;
    return ops->reduce ? codec : ops->ring_codec;
}

size_t zc_codec_shared_scales(const zc_codec_params_t *params, uint64_t count)
{
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    return ops && ops->shared_scales ? ops->shared_scales(params, count) : 0;
}

zc_status_t zc_codec_local_scales(const zc_codec_params_t *params, zc_codec_state_t *state,
                                  zc_dtype_t dtype, const void *src, uint64_t count, float *scales)
{
    if (!params || (count > 0 && (!src || !scales)) || zc_dtype_size(dtype) == 0)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_codec_params_check(params));
    ZC_CHECK(state_for(params, state, count, &state));
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    if (!ops->local_scales)
        return ZC_ERR_UNSUPPORTED;
    return ops->local_scales(params, dtype, src, state ? state->residual : NULL, count, scales);
}

static zc_status_t encode_payload(const zc_codec_params_t *params, zc_codec_state_t *state,
                                  const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                  uint64_t count, const float *scales, void *dst, size_t cap,
                                  size_t *len_p);

ZC_EXPORT zc_status_t zc_codec_encode(const zc_codec_params_t *params, zc_codec_state_t *state,
                                      const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                      uint64_t count, void *dst, size_t cap, size_t *len_p)
{
    return encode_payload(params, state, rng, dtype, src, count, NULL, dst, cap, len_p);
}

zc_status_t zc_codec_encode_shared(const zc_codec_params_t *params, zc_codec_state_t *state,
                                   const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                   uint64_t count, const float *scales, void *dst, size_t cap,
                                   size_t *len_p)
{
    if (!params || (count > 0 && !scales))
        return ZC_ERR_INVALID_ARG;
    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    if (!ops || !ops->encode_shared)
        return ZC_ERR_UNSUPPORTED;
    return encode_payload(params, state, rng, dtype, src, count, scales, dst, cap, len_p);
}

/* zc_codec_encode, with @p scales (not NULL) through ops->encode_shared. */
static zc_status_t encode_payload(const zc_codec_params_t *params, zc_codec_state_t *state,
                                  const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                  uint64_t count, const float *scales, void *dst, size_t cap,
                                  size_t *len_p)
{
    static const zc_codec_rng_t rng_zero;
    zc_oob_t oob = {0};
    void *masked = NULL;
    size_t body_len, oob_len;
    uint64_t surplus;
    zc_status_t status;

    if (!params || !dst || !len_p || (count > 0 && !src) || zc_dtype_size(dtype) == 0)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_codec_params_check(params));
    ZC_CHECK(state_for(params, state, count, &state));
    /* a count no payload can hold (past a codec's limit): refused before src is read */
    if (zc_codec_bound(params, count) == 0)
        return ZC_ERR_INVALID_ARG;
    /* the trailer's room is kept aside now: nothing fails after the residual has changed */
    const size_t crc = wants_checksum(params) ? ZC_PAYLOAD_CRC_BYTES : 0;
    if (cap < ZC_PAYLOAD_HEADER_BYTES + crc)
        return ZC_ERR_BUFFER_TOO_SMALL;
    cap -= crc;

    const zc_codec_ops_t *ops = zc_codec_ops(params->codec);
    float *residual = state ? state->residual : NULL;
    if (!rng)
        rng = &rng_zero;
    uint8_t *body = (uint8_t *)dst + ZC_PAYLOAD_HEADER_BYTES;
    int scan = 1;  /* the generic scan for values out of band, before the encode */
    int fused = 0; /* encode_ef ran: 1, and it encoded and subtracted: 2 */
    if (residual) {
        /* error feedback: encode input + residual, then residual -= what was sent */
        if (ops->encode_ef && dtype == ZC_DTYPE_F32 && !ops->encode_spill) {
            status = ops->encode_ef(params, state, rng, src, count, residual, body,
                                    cap - ZC_PAYLOAD_HEADER_BYTES, &body_len, &oob);
            if (status < 0)
                goto err_free;
            fused = status == ZC_OK ? 2 : 1;
            scan = status == ZC_CODEC_RETRY_OOB;
        } else {
            zc_dtype_add_f32(dtype, src, (size_t)count, residual);
        }
        src = residual;
        dtype = ZC_DTYPE_F32;
    }
    /*
     * A value sent out of band goes out whole: the residual keeps 0 there
     * (minus what the body decodes to at a 0, exact), never an infinity or a
     * NaN that would come back at every later call.
     */
    surplus = 0;
    oob_len = 0;
    if (fused == 1) {
        /* stopped at a value for the section: the scan below */
    } else if (fused == 2 || ops->encode_spill) {
        /* the codec finds them itself, body first; the section then goes in front of it */
        const size_t body_cap = cap - ZC_PAYLOAD_HEADER_BYTES;
        scan = 0;
        if (!fused) {
            if (residual) {
                status = ZC_ERR_INTERNAL; /* encode_spill codecs keep no residual */
                goto err_free;
            }
            ZC_CHECK_GOTO(ops->encode_spill(params, state, rng, dtype, src, count, body, body_cap,
                                            &body_len, &oob),
                          status, err_free);
        }
        if (state)
            state->oob_values += oob.n;
        ZC_CHECK_GOTO(oob_fit(ops, state, body, &body_len, body_cap, count, &oob), status,
                      err_free);
        oob_len = zc_oob_size(&oob);
        if (body_cap - body_len < oob_len) {
            status = ZC_ERR_BUFFER_TOO_SMALL;
            goto err_free;
        }
        if (oob_len) {
            memmove(body + oob_len, body, body_len);
            body += oob_len;
        }
    } else if (ops->encode_try && !scales) {
        /* clean input needs no scan: the encoder says when it saw a value for a section */
        status = ops->encode_try(params, state, rng, dtype, src, count, body,
                                 cap - ZC_PAYLOAD_HEADER_BYTES, &body_len);
        if (status < 0)
            goto err_free;
        scan = status == ZC_CODEC_RETRY_OOB;
    }
    if (scan) {
        ZC_CHECK_GOTO(oob_split(ops, state, dtype, &src, count, &oob, &masked, &surplus), status,
                      err_restore);
        /* past the cap a wide body takes the entries in (oob_fit): no room for a section then */
        oob_len = oob.n > zc_oob_cap(count) ? 0 : zc_oob_size(&oob);
        if (cap - ZC_PAYLOAD_HEADER_BYTES < oob_len) {
            status = ZC_ERR_BUFFER_TOO_SMALL;
            goto err_restore;
        }
        body += oob_len;
        const size_t body_cap = cap - ZC_PAYLOAD_HEADER_BYTES - oob_len;
        if (scales)
            status = ops->encode_shared(params, state, rng, dtype, src, count, scales, body,
                                        body_cap, &body_len);
        else
            status = ops->encode(params, state, rng, dtype, src, count, body, body_cap, &body_len);
        if (status < 0)
            goto err_restore;
        if (state)
            state->oob_values += oob.n;
        ZC_CHECK_GOTO(oob_fit(ops, state, body, &body_len, body_cap, count, &oob), status,
                      err_restore);
    }
    if (residual && fused != 2) {
        ZC_CHECK_GOTO(ops->decode_add(state, body, body_len, residual, count, -1.0f), status,
                      err_free);
        /* past the cap the body carried non-finite values: none may stay for the next call */
        if (surplus)
            state->oob_values += zc_oob_clear_nonfinite(residual, count);
    }
    zc_payload_header_write(dst, params->codec, count);
    if (oob.n) {
        ((uint8_t *)dst)[4] |= ZC_PAYLOAD_FLAG_OOB;
        zc_oob_write(&oob, (uint8_t *)dst + ZC_PAYLOAD_HEADER_BYTES);
    }
    *len_p = body_len + oob_len + ZC_PAYLOAD_HEADER_BYTES;
    if (crc)
        payload_seal(dst, cap + crc, len_p); /* cannot fail: its room was kept */
    status = ZC_OK;
    goto err_free;

err_restore:
    /* the input stays in the residual, out-of-band values included, for the next call */
    for (uint64_t j = 0; residual && j < oob.n; j++)
        residual[oob.pos[j]] = oob.val[j];
err_free:
    free(masked);
    zc_oob_free(&oob);
    return status;
}

/*
 * The body of the payload @p src (header parsed as @p info) and, with the
 * out-of-band flag, its section read into @p oob (when not NULL).
 */
static zc_status_t payload_body(const zc_codec_ops_t *ops, const uint8_t *src, size_t len,
                                uint64_t count, const uint8_t **body_p, size_t *body_len_p,
                                zc_oob_t *oob)
{
    size_t at = ZC_PAYLOAD_HEADER_BYTES;

    if (src[4] & ZC_PAYLOAD_FLAG_OOB) {
        size_t oob_len;
        if (ops->oob_limit <= 0)
            return ZC_ERR_CORRUPT; /* its encoder never writes one */
        ZC_CHECK(zc_oob_parse(src + at, len - at, count, &oob_len, oob));
        at += oob_len;
    }
    *body_p = src + at;
    *body_len_p = len - at;
    return ZC_OK;
}

ZC_EXPORT zc_status_t zc_codec_decode_add(zc_codec_state_t *state, const void *src, size_t len,
                                          float *dst, uint64_t count)
{
    zc_payload_info_t info;
    zc_oob_t oob = {0};
    const uint8_t *body;
    size_t body_len;

    if (!src || (count > 0 && !dst))
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_payload_info(src, len, &info));
    ZC_CHECK(payload_open(src, &len));
    if (info.count != count)
        return ZC_ERR_MISMATCH;
    const zc_codec_ops_t *ops = zc_codec_ops(info.codec);
    if (ops->state_init && (!state || state->params.codec != info.codec || state->count != count))
        return state ? ZC_ERR_MISMATCH : ZC_ERR_INVALID_ARG;
    zc_status_t status = payload_body(ops, src, len, count, &body, &body_len, &oob);
    if (status == ZC_OK)
        status = ops->decode_add(state, body, body_len, dst, count, 1.0f);
    if (status == ZC_OK)
        zc_oob_add(&oob, dst);
    zc_oob_free(&oob);
    return status;
}

/* The codec's reduce of two bodies; a body narrower than f32 spills sums it cannot hold. */
static zc_status_t body_reduce(const zc_codec_ops_t *ops, zc_codec_state_t *state, const uint8_t *a,
                               size_t alen, const uint8_t *b, size_t blen, uint64_t count,
                               uint8_t *dst, size_t cap, size_t *len_p, zc_oob_t *spill)
{
    if (ops->reduce_spill)
        return ops->reduce_spill(state, a, alen, b, blen, count, dst, cap, len_p, spill);
    return ops->reduce(state, a, alen, b, blen, count, dst, cap, len_p);
}

/*
 * Reduce of payloads with out-of-band sections: the sections merge (equal
 * positions add in f32) with what the bodies spill; the bodies reduce into
 * scratch first, since the merged section can differ in length from the one
 * of a payload @p dst aliases.
 */
static zc_status_t reduce_oob(const zc_codec_ops_t *ops, zc_codec_state_t *state, const uint8_t *a,
                              size_t alen, const uint8_t *b, size_t blen, uint64_t count,
                              uint8_t *dst, size_t cap, size_t *len_p)
{
    zc_oob_t oa = {0}, ob = {0}, ab = {0}, spill = {0}, sum = {0};
    const uint8_t *abody, *bbody;
    size_t abody_len, bbody_len, body_len;
    uint8_t *scratch = NULL;
    zc_status_t status;

    ZC_CHECK_GOTO(payload_body(ops, a, alen, count, &abody, &abody_len, &oa), status, out);
    ZC_CHECK_GOTO(payload_body(ops, b, blen, count, &bbody, &bbody_len, &ob), status, out);
    size_t body_cap = cap - ZC_PAYLOAD_HEADER_BYTES;
    scratch = malloc(body_cap ? body_cap : 1);
    if (!scratch) {
        status = ZC_ERR_NO_MEMORY;
        goto out;
    }
    ZC_CHECK_GOTO(body_reduce(ops, state, abody, abody_len, bbody, bbody_len, count, scratch,
                              body_cap, &body_len, &spill),
                  status, out);
    ZC_CHECK_GOTO(zc_oob_merge(&oa, &ob, &ab), status, out);
    ZC_CHECK_GOTO(zc_oob_merge(&ab, &spill, &sum), status, out);
    ZC_CHECK_GOTO(oob_fit(ops, state, scratch, &body_len, body_cap, count, &sum), status, out);
    size_t oob_len = zc_oob_size(&sum);
    if (body_cap - body_len < oob_len) {
        status = ZC_ERR_BUFFER_TOO_SMALL;
        goto out;
    }
    if (dst != a)
        memcpy(dst, a, ZC_PAYLOAD_HEADER_BYTES);
    dst[4] |= ZC_PAYLOAD_FLAG_OOB;
    zc_oob_write(&sum, dst + ZC_PAYLOAD_HEADER_BYTES);
    memcpy(dst + ZC_PAYLOAD_HEADER_BYTES + oob_len, scratch, body_len);
    *len_p = ZC_PAYLOAD_HEADER_BYTES + oob_len + body_len;
    status = ZC_OK;
out:
    free(scratch);
    zc_oob_free(&sum);
    zc_oob_free(&spill);
    zc_oob_free(&ab);
    zc_oob_free(&ob);
    zc_oob_free(&oa);
    return status;
}

/* Reduce of payloads without sections: the bodies, and a section only for what they spill. */
static zc_status_t reduce_plain(const zc_codec_ops_t *ops, zc_codec_state_t *state,
                                const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                                uint64_t count, uint8_t *out, size_t cap, size_t *len_p)
{
    zc_oob_t spill = {0};
    size_t body_len;
    zc_status_t status = body_reduce(
        ops, state, a + ZC_PAYLOAD_HEADER_BYTES, alen - ZC_PAYLOAD_HEADER_BYTES,
        b + ZC_PAYLOAD_HEADER_BYTES, blen - ZC_PAYLOAD_HEADER_BYTES, count,
        out + ZC_PAYLOAD_HEADER_BYTES, cap - ZC_PAYLOAD_HEADER_BYTES, &body_len, &spill);
    if (status == ZC_OK)
        status = oob_fit(ops, state, out + ZC_PAYLOAD_HEADER_BYTES, &body_len,
                         cap - ZC_PAYLOAD_HEADER_BYTES, count, &spill);
    size_t oob_len = zc_oob_size(&spill);
    if (status == ZC_OK && cap - ZC_PAYLOAD_HEADER_BYTES - body_len < oob_len)
        status = ZC_ERR_BUFFER_TOO_SMALL;
    if (status == ZC_OK) {
        if (out != a)
            memcpy(out, a, ZC_PAYLOAD_HEADER_BYTES);
        if (spill.n) {
            /* rare: sums past the body's range; the body moves up behind their section */
            memmove(out + ZC_PAYLOAD_HEADER_BYTES + oob_len, out + ZC_PAYLOAD_HEADER_BYTES,
                    body_len);
            out[4] |= ZC_PAYLOAD_FLAG_OOB;
            zc_oob_write(&spill, out + ZC_PAYLOAD_HEADER_BYTES);
        }
        *len_p = body_len + oob_len + ZC_PAYLOAD_HEADER_BYTES;
    }
    zc_oob_free(&spill);
    return status;
}

ZC_EXPORT zc_status_t zc_codec_reduce(zc_codec_state_t *state, const void *a, size_t alen,
                                      const void *b, size_t blen, void *dst, size_t cap,
                                      size_t *len_p)
{
    zc_payload_info_t ia, ib;

    if (!a || !b || !dst || !len_p)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_payload_info(a, alen, &ia));
    ZC_CHECK(zc_payload_info(b, blen, &ib));
    /* checked before anything is written: dst may alias a or b */
    ZC_CHECK(payload_open(a, &alen));
    ZC_CHECK(payload_open(b, &blen));
    const int crc =
        ((((const uint8_t *)a)[4] | ((const uint8_t *)b)[4]) & ZC_PAYLOAD_FLAG_CRC) != 0;
    if (ia.codec != ib.codec || ia.count != ib.count)
        return ZC_ERR_MISMATCH;
    const zc_codec_ops_t *ops = zc_codec_ops(ia.codec);
    if (!ops->reduce)
        return ZC_ERR_UNSUPPORTED;
    if (ops->state_init && (!state || state->params.codec != ia.codec || state->count != ia.count))
        return state ? ZC_ERR_MISMATCH : ZC_ERR_INVALID_ARG;
    if (cap < ZC_PAYLOAD_HEADER_BYTES + (crc ? ZC_PAYLOAD_CRC_BYTES : 0))
        return ZC_ERR_BUFFER_TOO_SMALL;
    if (crc)
        cap -= ZC_PAYLOAD_CRC_BYTES;
    zc_status_t status;
    if ((((const uint8_t *)a)[4] | ((const uint8_t *)b)[4]) & ZC_PAYLOAD_FLAG_OOB)
        status = reduce_oob(ops, state, a, alen, b, blen, ia.count, dst, cap, len_p);
    else
        status = reduce_plain(ops, state, a, alen, b, blen, ia.count, dst, cap, len_p);
    if (status == ZC_OK && crc)
        payload_seal(dst, cap + ZC_PAYLOAD_CRC_BYTES, len_p);
    return status;
}
