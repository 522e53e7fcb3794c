/*
 * Top-k: gradient dropping (Aji & Heafield, "Sparse Communication for
 * Distributed Gradient Descent", 2017) with error feedback (Stich, Cordonnier &
 * Jaggi, "Sparsified SGD with Memory", 2018).
 *
 * With f32 input, encode_ef does error feedback in one pass over the values:
 * residual += input, a sampled threshold and the collection of the kept
 * positions (select.c, add_collect), then the kept values' subtraction at
 * those positions only. Otherwise the generic layer (codec.c) adds the input
 * to the f32 residual, hands the residual to encode, and then subtracts the
 * payload with decode_add(alpha = -1); both leave the same bits. Kept f32
 * values are the residual's own bits and kept f16 values decode exactly to
 * what was sent, so sent + new residual = input + old residual, bit for bit.
 *
 * Body layout (docs/codecs.md):
 *
 *   u64 kept count c | u8 value format | u8 index coding | u8 Rice parameter b
 *   | i8 f16 scale exponent e | c values (f32, or f16 of value * 2^-e)
 *   | positions: c gaps, LEB128 varint or Golomb-Rice, to the end of the body
 */
#include "codec/codec.h"
#include "codec/oob.h"
#include "codec/topk/topk_int.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/half.h"

#include <math.h>
#include <stdlib.h>

#define TOPK_HEADER_BYTES 12
#define TOPK_VALUES_F32 0
#define TOPK_VALUES_F16 1
#define TOPK_CODING_VARINT 0
#define TOPK_CODING_RICE 1
/*
 * f16 values carry a power-of-two scale 2^e, chosen so that the largest finite
 * kept magnitude lands in [2^14, 2^15): nothing finite overflows to infinity
 * and small gradients keep f16's 11 bits instead of underflowing. 2^e and 2^-e
 * stay normal floats, so scaling is exact both ways.
 */
#define TOPK_F16_EXP_MIN (-126)
#define TOPK_F16_EXP_MAX 113 /* largest f32 exponent 127, minus 14 */

static zc_status_t topk_check(const zc_codec_params_t *p)
{
    if (!(p->topk.density > 0 && p->topk.density <= 1) ||
        (p->topk.values != ZC_TOPK_VALUES_F32 && p->topk.values != ZC_TOPK_VALUES_F16))
        return ZC_ERR_INVALID_CONFIG;
    return ZC_OK;
}

/* Top-k always runs with error feedback: what is not sent now is sent later. */
static int topk_error_feedback(const zc_codec_params_t *p)
{
    (void)p;
    return 1;
}

static size_t value_bytes(unsigned format)
{
    return format == TOPK_VALUES_F16 ? 2 : 4;
}

/*
 * At most zc_topk_max_kept values, each with its value and a gap below n: the
 * varint of a gap takes at most varint_len(n - 1) bytes, and Rice is only
 * chosen when it is smaller than the varint coding.
 */
static size_t topk_bound(const zc_codec_params_t *p, uint64_t count)
{
    if (count > ZC_TOPK_MAX_COUNT)
        return SIZE_MAX;
    if (count == 0)
        return TOPK_HEADER_BYTES;
    const uint64_t cmax = zc_topk_max_kept(count, zc_topk_target(count, p->topk.density));
    uint64_t bytes =
        TOPK_HEADER_BYTES + cmax * (value_bytes(p->topk.values) + zc_varint_len(count - 1));
    return bytes > SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

static inline float pow2f(int e)
{
    return zc_f32_from_bits((uint32_t)(127 + e) << 23);
}

/* The f16 scale exponent for the kept values: see TOPK_F16_EXP_MIN. */
static int f16_exponent(const float *x, const uint64_t *idx, uint64_t c)
{
    uint32_t max = 0;
    for (uint64_t j = 0; j < c; j++) {
        uint32_t key = zc_topk_key(x[idx[j]]);
        if (key < ZC_TOPK_INF_KEY && key > max)
            max = key;
    }
    if (max == 0)
        return 0;
    int e = (int)(max >> 23) - 127 - 14; /* a subnormal max gives -141: clamped */
    return e < TOPK_F16_EXP_MIN ? TOPK_F16_EXP_MIN : e;
}

static void write_values(const float *x, const uint64_t *idx, uint64_t c, unsigned format, int e,
                         uint8_t *dst)
{
    if (format == TOPK_VALUES_F32) {
        for (uint64_t j = 0; j < c; j++)
            zc_store_le32(dst + 4 * j, zc_f32_bits(x[idx[j]]));
        return;
    }
    /* a * 2^-e is exact unless it falls below FLT_MIN, where f16 rounds it to 0 anyway */
    const float inv = pow2f(-e);
    for (uint64_t j = 0; j < c; j++) {
        uint16_t h = zc_f32_to_f16(x[idx[j]] * inv);
        /* within 2^-11 of FLT_MAX, rounding up gives 2^15 * 2^113 = 2^128: round down instead */
        if (e == TOPK_F16_EXP_MAX && (h & 0x7fffu) == 0x7800u)
            h--;
        dst[2 * j] = (uint8_t)h;
        dst[2 * j + 1] = (uint8_t)(h >> 8);
    }
}

/*
 * The encode; with @p try_oob it stops with ZC_CODEC_RETRY_OOB when a kept
 * value is a NaN or an infinity (they have the largest keys, so one is kept
 * whenever the input holds one): those go out of band.
 *
 * With @p res, error feedback is fused in (encode_ef): the values are the sums
 * res + src, which the selection pass stores into res; once the payload is
 * written the kept values are subtracted there, as decode_add(alpha = -1)
 * would. On any other return res holds the sums, as after the generic addition.
 */
static zc_status_t encode_kept(const zc_codec_params_t *p, zc_dtype_t dtype, const void *src,
                               uint64_t count, float *res, uint8_t *dst, size_t cap, size_t *len_p,
                               int try_oob)
{
    const float *x = res ? res : src;
    const unsigned format =
        p->topk.values == ZC_TOPK_VALUES_F16 ? TOPK_VALUES_F16 : TOPK_VALUES_F32;
    zc_topk_path_t path;
    zc_status_t status;
    uint64_t c, *idx = NULL;
    int added = 0;

    /* with error feedback the generic layer hands over the f32 residual */
    if (dtype != ZC_DTYPE_F32 || count > ZC_TOPK_MAX_COUNT) {
        status = ZC_ERR_INVALID_ARG;
        goto out;
    }
    if (cap < TOPK_HEADER_BYTES) {
        status = ZC_ERR_BUFFER_TOO_SMALL;
        goto out;
    }

    const uint64_t cmax = zc_topk_max_kept(count, zc_topk_target(count, p->topk.density));
    idx = malloc((size_t)(cmax + ZC_TOPK_COLLECT_SLACK) * sizeof(*idx));
    if (!idx) {
        status = ZC_ERR_NO_MEMORY;
        goto out;
    }
    added = 1; /* zc_topk_select_add stores the sums whatever it returns */
    ZC_CHECK_GOTO(res ? zc_topk_select_add(src, res, count, p->topk.density, idx, &c, &path)
                      : zc_topk_select(x, count, p->topk.density, idx, &c, &path),
                  status, out);
    if (c > cmax) {
        status = ZC_ERR_INTERNAL;
        goto out;
    }
    for (uint64_t j = 0; try_oob && j < c; j++) {
        if (!isfinite(x[idx[j]])) {
            status = ZC_CODEC_RETRY_OOB;
            goto out;
        }
    }

    const uint64_t vbytes = c * value_bytes(format);
    uint64_t ibytes = zc_topk_varint_bytes(idx, c), rice_bytes = UINT64_MAX;
    unsigned b = c ? zc_topk_rice_choose(idx, c, &rice_bytes) : 0;
    const int rice = rice_bytes < ibytes;
    if (rice)
        ibytes = rice_bytes;
    else
        b = 0;
    if (cap - TOPK_HEADER_BYTES < vbytes || cap - TOPK_HEADER_BYTES - vbytes < ibytes) {
        status = ZC_ERR_BUFFER_TOO_SMALL;
        goto out;
    }

    const int e = format == TOPK_VALUES_F16 ? f16_exponent(x, idx, c) : 0;
    zc_store_le64(dst, c);
    dst[8] = (uint8_t)format;
    dst[9] = rice ? TOPK_CODING_RICE : TOPK_CODING_VARINT;
    dst[10] = (uint8_t)b;
    dst[11] = (uint8_t)(int8_t)e;
    write_values(x, idx, c, format, e, dst + TOPK_HEADER_BYTES);
    uint8_t *pos = dst + TOPK_HEADER_BYTES + vbytes;
    if (rice) {
        if (zc_topk_rice_write(idx, c, b, pos, (size_t)ibytes) != ibytes) {
            status = ZC_ERR_INTERNAL;
            goto out;
        }
    } else {
        zc_topk_varint_write(idx, c, pos);
    }
    if (res) {
        /* the subtraction of decode_add(alpha = -1), at the positions already in idx */
        const zc_topk_sink_t sink = {
            .values = dst + TOPK_HEADER_BYTES,
            .dst = res,
            .scale = pow2f(e),
            .f16 = format == TOPK_VALUES_F16,
            .subtract = 1,
        };
        zc_topk_sink_add(&sink, idx, 0, (size_t)c);
    }
    *len_p = (size_t)(TOPK_HEADER_BYTES + vbytes + ibytes);
    status = ZC_OK;
out:
    if (res && !added)
        zc_topk_add_rest(src, res, (size_t)count);
    free(idx);
    return status;
}

static zc_status_t topk_encode(const zc_codec_params_t *p, zc_codec_state_t *state,
                               const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                               uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    (void)state;
    (void)rng; /* selection is deterministic */
    return encode_kept(p, dtype, src, count, NULL, dst, cap, len_p, 0);
}

static zc_status_t topk_encode_try(const zc_codec_params_t *p, zc_codec_state_t *state,
                                   const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                   uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    (void)state;
    (void)rng;
    return encode_kept(p, dtype, src, count, NULL, dst, cap, len_p, 1);
}

static zc_status_t topk_encode_ef(const zc_codec_params_t *p, zc_codec_state_t *state,
                                  const zc_codec_rng_t *rng, const float *src, uint64_t count,
                                  float *residual, uint8_t *dst, size_t cap, size_t *len_p,
                                  struct zc_oob *spill)
{
    (void)state;
    (void)rng;
    (void)spill; /* a kept NaN or infinity stops it: the generic scan takes over */
    const size_t bound = topk_bound(p, count);
    if (cap < bound || cap - bound < zc_oob_bound(count)) {
        /* below the worst case: the generic path, which says what does not fit */
        zc_topk_add_rest(src, residual, (size_t)count);
        return ZC_CODEC_RETRY_OOB;
    }
    return encode_kept(p, ZC_DTYPE_F32, src, count, residual, dst, cap, len_p, 1);
}

static zc_status_t topk_decode_add(zc_codec_state_t *state, const uint8_t *body, size_t len,
                                   float *dst, uint64_t count, float alpha)
{
    (void)state;
    if (len < TOPK_HEADER_BYTES || count > ZC_TOPK_MAX_COUNT)
        return ZC_ERR_CORRUPT;
    const uint64_t c = zc_load_le64(body);
    const unsigned format = body[8], coding = body[9], b = body[10];
    const int e = (int8_t)body[11];
    if (format > TOPK_VALUES_F16 || coding > TOPK_CODING_RICE || c > count)
        return ZC_ERR_CORRUPT;
    if ((coding == TOPK_CODING_VARINT && b != 0) || b > ZC_TOPK_RICE_MAX_PARAM)
        return ZC_ERR_CORRUPT;
    if ((format == TOPK_VALUES_F32 && e != 0) || e < TOPK_F16_EXP_MIN || e > TOPK_F16_EXP_MAX)
        return ZC_ERR_CORRUPT;
    const size_t vsize = value_bytes(format), rest = len - TOPK_HEADER_BYTES;
    if (c > rest / vsize)
        return ZC_ERR_CORRUPT;
    const size_t vbytes = (size_t)c * vsize;
    const uint8_t *ipos = body + TOPK_HEADER_BYTES + vbytes;
    const size_t ilen = rest - vbytes;

    const zc_topk_sink_t sink = {
        .values = body + TOPK_HEADER_BYTES,
        .dst = dst,
        .scale = pow2f(e),
        .f16 = format == TOPK_VALUES_F16,
        .subtract = alpha < 0,
    };
    if (coding == TOPK_CODING_RICE)
        return zc_topk_rice_decode(ipos, ilen, c, count, b, &sink);
    return zc_topk_varint_decode(ipos, ilen, c, count, &sink);
}

/* Needs its residual (state) and is biased: what it drops comes later. */
static void topk_params_default(zc_codec_params_t *p)
{
    p->topk.density = 0.01;
    p->topk.values = ZC_TOPK_VALUES_F32;
}

static void topk_params_from_config(const zc_config_t *cfg, zc_codec_params_t *p)
{
    _Static_assert((int)ZC_CFG_TOPK_VALUES_F32 == (int)ZC_TOPK_VALUES_F32 &&
                       (int)ZC_CFG_TOPK_VALUES_F16 == (int)ZC_TOPK_VALUES_F16,
                   "the top-k choices of common/choices.h are zipccl_codec.h's enums");
    p->topk.density = (double)cfg->topk_density / ZC_CONFIG_DECIMAL_ONE;
    p->topk.values = (zc_topk_values_t)cfg->topk_values;
}

static const zc_codec_field_t topk_fields[] = {
    ZC_CODEC_FIELD(topk.density, F64, 1),
    ZC_CODEC_FIELD(topk.values, INT, 1),
};

/*
 * The expected size on unstructured input: each kept value costs its value
 * bits plus its Rice-coded gap, which comes within a few hundredths of a bit
 * of the entropy of the geometric gaps, H(rho) / rho bits (docs/codecs.md,
 * top-k), and never takes under one bit.
 */
static double topk_wire_ratio(const zc_codec_params_t *p)
{
    const double rho = p->topk.density;
    const double vbits = p->topk.values == ZC_TOPK_VALUES_F16 ? 16.0 : 32.0;
    double gbits = 1.0;
    if (rho < 1.0) {
        double h = -rho * log2(rho) - (1.0 - rho) * log2(1.0 - rho);
        gbits = ZC_MAX(1.0, h / rho);
    }
    return rho * (vbits + gbits) / 32.0;
}

const zc_codec_ops_t zc_codec_topk_ops = {
    .name = "topk",
    .id = ZC_CODEC_TOPK,
    .caps = 0,
    /* non-finite values go out of band: k finite values are selected, the residual stays finite */
    .oob_limit = INFINITY,
    .fields = topk_fields,
    .nfields = ZC_ARRAY_SIZE(topk_fields),
    .params_default = topk_params_default,
    .params_from_config = topk_params_from_config,
    .check = topk_check,
    .error_feedback = topk_error_feedback,
    .wire_ratio = topk_wire_ratio,
    .nominal_encode_bw = 1e9,
    .nominal_decode_bw = 20e9,
    .sparse_decode = 1, /* adds the kept entries at their indices */
    .bound = topk_bound,
    .encode = topk_encode,
    .encode_try = topk_encode_try,
    .encode_ef = topk_encode_ef,
    .decode_add = topk_decode_add,
};
