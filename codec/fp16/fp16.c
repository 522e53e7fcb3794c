/*
 * The fp16 and bf16 codecs: every value narrowed to IEEE binary16 or bfloat16,
 * rounded to nearest, ties to even, as a hardware cast does (overflow to inf,
 * NaN stays a quiet NaN). Body (docs/codecs.md): count 2-byte values,
 * little-endian, nothing else. Input already in the codec's format is copied
 * bit for bit; the other half format is widened to f32 (exactly) and rounded.
 *
 * Both are linear: reduce widens the two bodies, adds in f32 and rounds back,
 * once per reduce. The f32 sum of two f16 (11-bit) or bf16 (8-bit) values,
 * rounded to f32 and then to the half format, is the exact sum correctly
 * rounded: double rounding is innocuous when the intermediate precision p'
 * satisfies p' >= 2p + 2 (Figueroa, "When is double rounding innocuous?",
 * SIGNUM Newsletter 30(3), 1995), and 24 >= 24 (f16), 24 >= 18 (bf16). A
 * ring of N reduces therefore rounds N - 1 times: not unbiased (no
 * ZC_CODEC_CAP_UNBIASED), but each step is the best the format can do.
 *
 * The kernels, scalar and SIMD, are the common layer's
 * (common/half_kernels.h): the raw path's f16/bf16 sums use them too.
 */
#include "codec/codec.h"
#include "codec/oob.h"
#include "common/half_kernels.h"
#include "common/compiler.h"
#include "common/half.h"

#include <math.h>
#include <string.h>

/* f16 input to the bf16 codec (and the reverse) is widened in blocks of this many values. */
#define HALF_CROSS_BLOCK 1024

/* ---------------------------------------------------------------- codec */

static zc_half_format_t format_of(const zc_codec_params_t *params)
{
    return params->codec == ZC_CODEC_BF16 ? ZC_HALF_BF16 : ZC_HALF_F16;
}

/*
 * fp16's body has a wide form, f32 values (4 count bytes), which encode and
 * reduce write when more finite values or sums than a section holds are past
 * binary16's range (codec.c, oob_fit): the bound has room for it.
 */
static size_t half_bound(const zc_codec_params_t *params, uint64_t count)
{
    const size_t width = format_of(params) == ZC_HALF_F16 ? 4 : 2;
    return count > SIZE_MAX / width ? SIZE_MAX : (size_t)count * width;
}

/* The body is little-endian; on a little-endian host the values are copied as they are. */
static void copy_le16(const uint16_t *src, size_t n, uint8_t *dst)
{
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    memcpy(dst, src, n * 2);
#else
    for (size_t i = 0; i < n; i++)
        zc_half_store_le16(dst + 2 * i, src[i]);
#endif
}

static zc_status_t half_encode(const zc_codec_params_t *params, zc_codec_state_t *state,
                               const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                               uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    const zc_half_format_t format = format_of(params);
    const zc_dtype_t native = format == ZC_HALF_BF16 ? ZC_DTYPE_BF16 : ZC_DTYPE_F16;

    if (count > cap / 2)
        return ZC_ERR_BUFFER_TOO_SMALL;
    const size_t n = (size_t)count;
    if (n == 0) {
        *len_p = 0; /* src may be NULL */
        return ZC_OK;
    }
    const zc_half_kernels_t *k = zc_half_kernels(format);
    if (dtype == native) {
        copy_le16(src, n, dst);
    } else if (dtype == ZC_DTYPE_F32) {
        k->encode(src, n, dst);
    } else {
        /* the other half format: widening to f32 is exact, then one rounding */
        float tmp[HALF_CROSS_BLOCK];
        const uint16_t *h = src;
        for (size_t i = 0; i < n; i += HALF_CROSS_BLOCK) {
            size_t m = ZC_MIN(n - i, (size_t)HALF_CROSS_BLOCK);
            zc_dtype_to_f32(dtype, h + i, m, tmp);
            k->encode(tmp, m, dst + 2 * i);
        }
    }
    *len_p = n * 2;
    return ZC_OK;
}

static int body_len_ok(size_t len, uint64_t count)
{
    return count <= SIZE_MAX / 2 && len == (size_t)count * 2;
}

/* An fp16 body in its wide form: f32 values. */
static int wide(zc_half_format_t format, size_t len, uint64_t count)
{
    return format == ZC_HALF_F16 && count > 0 && count <= SIZE_MAX / 4 && len == (size_t)count * 4;
}

static float wide_at(const uint8_t *body, size_t i)
{
    return zc_f32_from_bits(zc_half_load_le16(body + 4 * i) |
                            (uint32_t)zc_half_load_le16(body + 4 * i + 2) << 16);
}

static void wide_store(uint8_t *body, size_t i, float v)
{
    uint32_t u = zc_f32_bits(v);
    zc_half_store_le16(body + 4 * i, (uint16_t)u);
    zc_half_store_le16(body + 4 * i + 2, (uint16_t)(u >> 16));
}

/* Value @p i of a body, narrow or wide. */
static float body_at(zc_half_format_t format, const uint8_t *body, size_t len, uint64_t count,
                     size_t i)
{
    if (wide(format, len, count))
        return wide_at(body, i);
    uint16_t h = zc_half_load_le16(body + 2 * i);
    return format == ZC_HALF_BF16 ? zc_bf16_to_f32(h) : zc_f16_to_f32(h);
}

/*
 * a + b in f32 into a wide body at @p dst, which may alias either: from the
 * last value down, so that no value is overwritten before it is read.
 */
static zc_status_t reduce_wide(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                               uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    if (cap / 4 < count)
        return ZC_ERR_BUFFER_TOO_SMALL;
    for (size_t i = (size_t)count; i-- > 0;)
        wide_store(dst, i,
                   body_at(ZC_HALF_F16, a, alen, count, i) +
                       body_at(ZC_HALF_F16, b, blen, count, i));
    *len_p = (size_t)count * 4;
    return ZC_OK;
}

static zc_status_t f16_widen(uint8_t *body, size_t *len_p, uint64_t count, size_t cap)
{
    if (count == 0 || wide(ZC_HALF_F16, *len_p, count))
        return ZC_OK;
    if (!body_len_ok(*len_p, count))
        return ZC_ERR_CORRUPT;
    if (cap / 4 < count)
        return ZC_ERR_BUFFER_TOO_SMALL;
    for (size_t i = (size_t)count; i-- > 0;) /* in place: last value first */
        wide_store(body, i, zc_f16_to_f32(zc_half_load_le16(body + 2 * i)));
    *len_p = (size_t)count * 4;
    return ZC_OK;
}

static zc_status_t half_decode_add_as(zc_half_format_t format, const uint8_t *body, size_t len,
                                      float *dst, uint64_t count, float alpha)
{
    if (wide(format, len, count)) {
        for (size_t i = 0; i < (size_t)count; i++)
            dst[i] += alpha * wide_at(body, i);
        return ZC_OK;
    }
    if (!body_len_ok(len, count))
        return ZC_ERR_CORRUPT;
    if (count > 0)
        zc_half_kernels(format)->decode_add(body, (size_t)count, alpha, dst);
    return ZC_OK;
}

static zc_status_t half_reduce_as(zc_half_format_t format, const uint8_t *a, size_t alen,
                                  const uint8_t *b, size_t blen, uint64_t count, uint8_t *dst,
                                  size_t cap, size_t *len_p)
{
    if (wide(format, alen, count) || wide(format, blen, count))
        return (wide(format, alen, count) || body_len_ok(alen, count)) &&
                       (wide(format, blen, count) || body_len_ok(blen, count))
                   ? reduce_wide(a, alen, b, blen, count, dst, cap, len_p)
                   : ZC_ERR_CORRUPT;
    if (!body_len_ok(alen, count) || !body_len_ok(blen, count))
        return ZC_ERR_CORRUPT;
    if (cap < alen)
        return ZC_ERR_BUFFER_TOO_SMALL;
    if (count > 0)
        zc_half_kernels(format)->reduce(a, b, (size_t)count, dst);
    *len_p = alen;
    return ZC_OK;
}

/*
 * Largest magnitude bits of a block: a constant trip count, vectorized at -O2
 * (signed: below 0x8000 the order is the same, and SSE2 has a signed 16-bit max).
 * As an SSE2 loop between AVX-512 encodes it held fp16 encode at 0.7x of its
 * speed without the look (codec_bench, 64 MiB): hence the clones.
 */
ZC_WIDE_CLONES static uint16_t block_max_bits(const uint8_t *h)
{
    int16_t top = 0;
    for (size_t j = 0; j < HALF_CROSS_BLOCK; j++) {
        uint16_t u;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
        memcpy(&u, h + 2 * j, 2);
#else
        u = zc_half_load_le16(h + 2 * j);
#endif
        int16_t v = (int16_t)(u & 0x7fff);
        top = v > top ? v : top;
    }
    return (uint16_t)top;
}

/*
 * Whether no sum of a block's values can round to an infinity: the two
 * largest magnitudes, finite, add (in f32, monotonic) to at most the format's
 * largest finite value. The common case, reduced without the spill check.
 */
static int sum_fits(zc_half_format_t format, const uint8_t *a, const uint8_t *b)
{
    const int bf = format == ZC_HALF_BF16;
    uint16_t ta = block_max_bits(a), tb = block_max_bits(b);
    if (ta >= (bf ? 0x7f80u : 0x7c00u) || tb >= (bf ? 0x7f80u : 0x7c00u))
        return 0;
    float fa = bf ? zc_bf16_to_f32(ta) : zc_f16_to_f32(ta);
    float fb = bf ? zc_bf16_to_f32(tb) : zc_f16_to_f32(tb);
    return fa + fb <= (bf ? 0x1.fep127f : 65504.0f);
}

/*
 * half_encode, then a look at each block of the body for the values that
 * spill: an infinity where the input is finite (the cast overflowed) becomes
 * 0 in the body and its f32 value goes to @p spill. A block at a time, so
 * that the look is in cache; a block without an infinity (the common case)
 * costs one vectorized max, and the input is read again only where one is.
 */
static zc_status_t half_encode_spill(const zc_codec_params_t *params, zc_codec_state_t *state,
                                     const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                     uint64_t count, uint8_t *dst, size_t cap, size_t *len_p,
                                     struct zc_oob *spill)
{
    const zc_half_format_t format = format_of(params);
    const uint16_t inf = format == ZC_HALF_BF16 ? 0x7f80u : 0x7c00u;
    const size_t esize = zc_dtype_size(dtype);

    if (count > cap / 2)
        return ZC_ERR_BUFFER_TOO_SMALL;
    if (dtype == (format == ZC_HALF_BF16 ? ZC_DTYPE_BF16 : ZC_DTYPE_F16))
        return half_encode(params, state, rng, dtype, src, count, dst, cap, len_p); /* a copy */
    for (size_t i = 0; i < (size_t)count; i += HALF_CROSS_BLOCK) {
        const size_t m = ZC_MIN((size_t)count - i, (size_t)HALF_CROSS_BLOCK);
        size_t len;
        /* a block at a time, looked at while it is in cache */
        ZC_CHECK(half_encode(params, state, rng, dtype, (const uint8_t *)src + i * esize, m,
                             dst + 2 * i, 2 * m, &len));
        if (m == HALF_CROSS_BLOCK && block_max_bits(dst + 2 * i) < inf)
            continue;
        for (size_t j = 0; j < m; j++) {
            uint16_t h = zc_half_load_le16(dst + 2 * (i + j));
            if ((h & 0x7fffu) != inf)
                continue;
            float v;
            zc_dtype_to_f32(dtype, (const uint8_t *)src + (i + j) * esize, 1, &v);
            if (!isfinite(v))
                continue; /* an infinity in, an infinity out */
            ZC_CHECK(zc_oob_push(spill, i + j, v));
            zc_half_store_le16(dst + 2 * (i + j), 0);
        }
    }
    *len_p = (size_t)count * 2;
    return ZC_OK;
}

/*
 * half_reduce_as, a block at a time through a scratch block (dst may alias a
 * or b, whose values the spill needs): a sum that rounds to an infinity
 * while neither value is one leaves 0 in the body and its f32 sum in @p spill.
 */
static zc_status_t half_reduce_spill_as(zc_half_format_t format, const uint8_t *a, size_t alen,
                                        const uint8_t *b, size_t blen, uint64_t count, uint8_t *dst,
                                        size_t cap, size_t *len_p, struct zc_oob *spill)
{
    const zc_half_kernels_t *k = zc_half_kernels(format);
    const uint16_t inf = format == ZC_HALF_BF16 ? 0x7f80u : 0x7c00u;
    uint8_t tmp[2 * HALF_CROSS_BLOCK];

    if (wide(format, alen, count) || wide(format, blen, count)) /* f32 sums: nothing spills */
        return half_reduce_as(format, a, alen, b, blen, count, dst, cap, len_p);
    if (!body_len_ok(alen, count) || !body_len_ok(blen, count))
        return ZC_ERR_CORRUPT;
    if (cap < alen)
        return ZC_ERR_BUFFER_TOO_SMALL;
    for (size_t i = 0; i < (size_t)count; i += HALF_CROSS_BLOCK) {
        size_t m = ZC_MIN((size_t)count - i, (size_t)HALF_CROSS_BLOCK);
        if (m == HALF_CROSS_BLOCK && sum_fits(format, a + 2 * i, b + 2 * i)) {
            k->reduce(a + 2 * i, b + 2 * i, m, dst + 2 * i); /* no spill possible */
            continue;
        }
        k->reduce(a + 2 * i, b + 2 * i, m, tmp);
        uint16_t top = 0; /* largest magnitude bits: >= inf only where an infinity or NaN is */
        for (size_t j = 0; j < m; j++) {
            uint16_t h = (uint16_t)(zc_half_load_le16(tmp + 2 * j) & 0x7fffu);
            top = h > top ? h : top;
        }
        for (size_t j = 0; top >= inf && j < m; j++) {
            uint16_t ha = zc_half_load_le16(a + 2 * (i + j)),
                     hb = zc_half_load_le16(b + 2 * (i + j));
            uint16_t h = zc_half_load_le16(tmp + 2 * j);
            if ((h & 0x7fffu) != inf || (ha & 0x7fffu) >= inf || (hb & 0x7fffu) >= inf)
                continue;
            float fa = format == ZC_HALF_BF16 ? zc_bf16_to_f32(ha) : zc_f16_to_f32(ha);
            float fb = format == ZC_HALF_BF16 ? zc_bf16_to_f32(hb) : zc_f16_to_f32(hb);
            if (!isfinite(fa + fb))
                continue; /* past f32's range too: the infinity is the sum */
            ZC_CHECK(zc_oob_push(spill, i + j, fa + fb));
            zc_half_store_le16(tmp + 2 * j, 0);
        }
        memcpy(dst + 2 * i, tmp, 2 * m);
    }
    *len_p = alen;
    return ZC_OK;
}

static zc_status_t f16_reduce_spill(zc_codec_state_t *state, const uint8_t *a, size_t alen,
                                    const uint8_t *b, size_t blen, uint64_t count, uint8_t *dst,
                                    size_t cap, size_t *len_p, struct zc_oob *spill)
{
    return half_reduce_spill_as(ZC_HALF_F16, a, alen, b, blen, count, dst, cap, len_p, spill);
}

static zc_status_t bf16_reduce_spill(zc_codec_state_t *state, const uint8_t *a, size_t alen,
                                     const uint8_t *b, size_t blen, uint64_t count, uint8_t *dst,
                                     size_t cap, size_t *len_p, struct zc_oob *spill)
{
    return half_reduce_spill_as(ZC_HALF_BF16, a, alen, b, blen, count, dst, cap, len_p, spill);
}

/* Adds @p val to the half value at @p pos: past the format's range it becomes an infinity. */
static void half_poison_as(zc_half_format_t format, uint8_t *body, uint64_t pos, float val)
{
    const int bf = format == ZC_HALF_BF16;
    uint16_t h = zc_half_load_le16(body + 2 * pos);
    float sum = (bf ? zc_bf16_to_f32(h) : zc_f16_to_f32(h)) + val;
    zc_half_store_le16(body + 2 * pos, bf ? zc_f32_to_bf16(sum) : zc_f32_to_f16(sum));
}

static void f16_poison(const zc_codec_state_t *state, uint8_t *body, size_t len, uint64_t count,
                       uint64_t pos, float val)
{
    if (wide(ZC_HALF_F16, len, count))
        wide_store(body, (size_t)pos, wide_at(body, (size_t)pos) + val); /* exact as f32 adds */
    else
        half_poison_as(ZC_HALF_F16, body, pos, val);
}

static void bf16_poison(const zc_codec_state_t *state, uint8_t *body, size_t len, uint64_t count,
                        uint64_t pos, float val)
{
    half_poison_as(ZC_HALF_BF16, body, pos, val);
}

static zc_status_t f16_decode_add(zc_codec_state_t *state, const uint8_t *body, size_t len,
                                  float *dst, uint64_t count, float alpha)
{
    return half_decode_add_as(ZC_HALF_F16, body, len, dst, count, alpha);
}

static zc_status_t bf16_decode_add(zc_codec_state_t *state, const uint8_t *body, size_t len,
                                   float *dst, uint64_t count, float alpha)
{
    return half_decode_add_as(ZC_HALF_BF16, body, len, dst, count, alpha);
}

static zc_status_t f16_reduce(zc_codec_state_t *state, const uint8_t *a, size_t alen,
                              const uint8_t *b, size_t blen, uint64_t count, uint8_t *dst,
                              size_t cap, size_t *len_p)
{
    return half_reduce_as(ZC_HALF_F16, a, alen, b, blen, count, dst, cap, len_p);
}

static zc_status_t bf16_reduce(zc_codec_state_t *state, const uint8_t *a, size_t alen,
                               const uint8_t *b, size_t blen, uint64_t count, uint8_t *dst,
                               size_t cap, size_t *len_p)
{
    return half_reduce_as(ZC_HALF_BF16, a, alen, b, blen, count, dst, cap, len_p);
}

/* Two bytes for four, whatever the input. */
static double half_wire_ratio(const zc_codec_params_t *params)
{
    (void)params;
    return 0.5;
}

const zc_codec_ops_t zc_codec_fp16_ops = {
    .name = "fp16",
    .id = ZC_CODEC_FP16,
    .caps = ZC_CODEC_CAP_STATELESS | ZC_CODEC_CAP_LINEAR,
    /* finite values from 65520 up round to an infinity in binary16: they go out of band */
    .oob_limit = 65520.0f,
    .oob_finite_only = 1,
    .wire_ratio = half_wire_ratio,
    .nominal_encode_bw = 10e9,
    .nominal_decode_bw = 10e9,
    .nominal_reduce_bw = 10e9,
    .bound = half_bound,
    .encode = half_encode,
    .encode_spill = half_encode_spill,
    .decode_add = f16_decode_add,
    .reduce = f16_reduce,
    .reduce_spill = f16_reduce_spill,
    .poison = f16_poison,
    .widen = f16_widen,
};

const zc_codec_ops_t zc_codec_bf16_ops = {
    .name = "bf16",
    .id = ZC_CODEC_BF16,
    .caps = ZC_CODEC_CAP_STATELESS | ZC_CODEC_CAP_LINEAR,
    /* finite values from (2 - 2^-8) 2^127 up round to an infinity in bfloat16 */
    .oob_limit = 0x1.ffp127f,
    .oob_finite_only = 1,
    .wire_ratio = half_wire_ratio,
    .nominal_encode_bw = 10e9,
    .nominal_decode_bw = 10e9,
    .nominal_reduce_bw = 10e9,
    .bound = half_bound,
    .encode = half_encode,
    .encode_spill = half_encode_spill,
    .decode_add = bf16_decode_add,
    .reduce = bf16_reduce,
    .reduce_spill = bf16_reduce_spill,
    .poison = bf16_poison,
};
