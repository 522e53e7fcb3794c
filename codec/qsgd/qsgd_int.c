/*
 * qsgd-int: QSGD whose payloads add as integers, so that the commutative ring
 * sums them hop by hop without decoding (the idea of THC, Li et al., NSDI'24,
 * and IntSGD, Mishchenko et al. 2022).
 *
 * Every rank scales a bucket by the same scale: the largest over ranks of the
 * bucket's own (max magnitude or L2 norm), which the all-reduce agrees on
 * first (local_scales, then a max). Each value is rounded at random to an
 * integer level of that scale, unbiased as in QSGD (Alistarh et al. 2017,
 * Lemma 3.1 (i)); levels of equal scales add exactly, so a sum of m payloads
 * is exact in the integers, the same bits wherever it is formed, and decodes
 * once. Alone (zc_codec_encode) a payload uses the bucket's own scale: it
 * decodes, but adds only to payloads of equal scales.
 *
 * The level width follows the sums: each bucket carries the width of its
 * largest magnitude, so a partial sum of m payloads is as wide as its values
 * need (at most 1 + bitlen(s m)), never sized for the whole ring up front.
 * Body layout (docs/codecs.md):
 *
 *   u32 bucket | u16 levels | u8 scale kind | u8 0 | u32 payloads summed m
 *   per bucket:
 *     u32 scale: f32, >= 0; NaN marks a non-finite bucket (codes ignored)
 *     u8 width w: 0 (every level 0) or 2..1 + bitlen(s m)
 *     len codes of w bits, sign-magnitude (sign in bit w - 1), padded to a byte
 */
#include "codec/codec.h"
#include "codec/qsgd/qsgd.h"
#include "common/bitio.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/half.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QI_HEADER_BYTES 12
#define QI_BUCKET_BYTES 5 /* scale word and width */
#define QI_MAX_BUCKET (UINT32_C(1) << 24)
#define QI_MAX_LEVELS 65535u
/*
 * Payloads one sum may hold: s m < 2^30, so that two operands' levels, each
 * below 2^bitlen(s m) <= 2 s m by their checked widths, add within an int32_t.
 */
#define QI_MAX_RANKS (UINT32_C(1) << 14)
#define QI_MAX_COUNT (UINT64_C(1) << 40)
#define QI_STACK_BUCKET 2048

/* Sign-magnitude width of levels up to @p max in magnitude; 0 when all are 0. */
static unsigned width_for(uint32_t max)
{
    return max ? 1 + zc_bitlen32(max) : 0;
}

static uint64_t codes_bytes(uint64_t len, unsigned w)
{
    return ZC_DIV_UP(len * w, 8);
}

static zc_status_t qi_check(const zc_codec_params_t *p)
{
    if (p->qsgd_int.levels < 1 || p->qsgd_int.levels > QI_MAX_LEVELS || p->qsgd_int.bucket < 1 ||
        p->qsgd_int.bucket > QI_MAX_BUCKET || (unsigned)p->qsgd_int.scale > ZC_QSGD_SCALE_L2 ||
        p->qsgd_int.ranks < 1 || p->qsgd_int.ranks > QI_MAX_RANKS ||
        (p->qsgd_int.error_feedback != 0 && p->qsgd_int.error_feedback != 1))
        return ZC_ERR_INVALID_CONFIG;
    return ZC_OK;
}

/* Widest body of @p count values: a sum of every rank's payload at full width. */
static size_t qi_bound(const zc_codec_params_t *p, uint64_t count)
{
    const uint64_t d = p->qsgd_int.bucket;
    const unsigned w = width_for(p->qsgd_int.levels * p->qsgd_int.ranks);

    if (count > QI_MAX_COUNT)
        return SIZE_MAX;
    uint64_t full = count / d, tail = count % d;
    uint64_t bytes = QI_HEADER_BYTES + full * (QI_BUCKET_BYTES + codes_bytes(d, w));
    if (tail)
        bytes += QI_BUCKET_BYTES + codes_bytes(tail, w);
    return bytes > SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

static size_t qi_shared_scales(const zc_codec_params_t *p, uint64_t count)
{
    return (size_t)ZC_DIV_UP(count, (uint64_t)p->qsgd_int.bucket);
}

/* One bucket in f32 (converted from f16/bf16, plus the residual), into @p tmp unless it is src. */
static const float *bucket_values(zc_dtype_t dtype, const void *src, const float *residual,
                                  uint64_t first, size_t len, float *tmp)
{
    const size_t esize = zc_dtype_size(dtype);
    if (dtype == ZC_DTYPE_F32 && !residual)
        return (const float *)src + first;
    if (dtype == ZC_DTYPE_F32)
        memcpy(tmp, (const float *)src + first, len * sizeof(float));
    else
        zc_dtype_to_f32(dtype, (const char *)src + first * esize, len, tmp);
    /* the same f32 addition as the generic layer's residual += input: the same values */
    for (size_t i = 0; residual && i < len; i++)
        tmp[i] += residual[first + i];
    return tmp;
}

typedef struct qi_scratch {
    float *values;
    int32_t *levels;
    int32_t *other;
    float values_stack[QI_STACK_BUCKET];
    int32_t levels_stack[QI_STACK_BUCKET];
    int32_t other_stack[QI_STACK_BUCKET];
    void *heap;
} qi_scratch_t;

static zc_status_t scratch_init(qi_scratch_t *sc, size_t len)
{
    sc->heap = NULL;
    if (len <= QI_STACK_BUCKET) {
        sc->values = sc->values_stack;
        sc->levels = sc->levels_stack;
        sc->other = sc->other_stack;
        return ZC_OK;
    }
    sc->heap = malloc(len * (sizeof(float) + 2 * sizeof(int32_t)));
    if (!sc->heap)
        return ZC_ERR_NO_MEMORY;
    sc->values = sc->heap;
    sc->levels = (int32_t *)(sc->values + len);
    sc->other = sc->levels + len;
    return ZC_OK;
}

static zc_status_t qi_local_scales(const zc_codec_params_t *p, zc_dtype_t dtype, const void *src,
                                   const float *residual, uint64_t count, float *scales)
{
    const zc_qsgd_kernels_t *kern = zc_qsgd_kernels();
    const uint32_t d = p->qsgd_int.bucket;
    qi_scratch_t sc;

    ZC_CHECK(scratch_init(&sc, (size_t)ZC_MIN(count, (uint64_t)d)));
    for (uint64_t first = 0, b = 0; first < count; first += d, b++) {
        size_t len = (size_t)ZC_MIN((uint64_t)d, count - first);
        const float *x = bucket_values(dtype, src, residual, first, len, sc.values);
        uint32_t max_bits = kern->max_abs_bits(x, len);
        if (max_bits >= ZC_QSGD_OOB_BITS) {
            /* values that go out of band (NaN, infinities, past 2^64) set no scale */
            if (x != sc.values) {
                memcpy(sc.values, x, len * sizeof(float));
                x = sc.values;
            }
            for (size_t i = 0; i < len; i++)
                if ((zc_f32_bits(x[i]) & 0x7fffffffu) >= ZC_QSGD_OOB_BITS)
                    sc.values[i] = 0;
            max_bits = kern->max_abs_bits(x, len);
        }
        scales[b] = zc_qsgd_bucket_scale(kern, p->qsgd_int.scale, x, len, max_bits);
    }
    free(sc.heap);
    return ZC_OK;
}

static uint32_t max_magnitude(const int32_t *levels, size_t len)
{
    uint32_t m = 0;
    for (size_t i = 0; i < len; i++) {
        uint32_t a = (uint32_t)(levels[i] < 0 ? -levels[i] : levels[i]);
        m = a > m ? a : m;
    }
    return m;
}

/*
 * Eight codes of w <= 8 bits fill w bytes: one 64-bit word per group, with
 * shifts the compiler knows (w is a constant in each caller). Each returns the
 * codes it did, whole groups whose word lies inside the codes.
 */
static inline __attribute__((always_inline)) size_t pack8(const int32_t *levels, size_t n,
                                                          uint8_t *dst, const unsigned w)
{
    const uint32_t sign = UINT32_C(1) << (w - 1);
    size_t groups = n / 8;
    /* the 8-byte store of group g ends at g w + 8: inside the codes but for the last groups */
    size_t safe = n * w / 8 >= 8 ? ZC_MIN(groups, (n * w / 8 - 8) / w + 1) : 0;
    for (size_t g = 0; g < safe; g++) {
        uint64_t v = 0;
#pragma GCC unroll 8 /* constant shifts, no loop: -O2 keeps the loop otherwise */
        for (unsigned k = 0; k < 8; k++) {
            int32_t l = levels[g * 8 + k];
            uint64_t code = l < 0 ? (uint32_t)-l | sign : (uint32_t)l;
            v |= code << (k * w);
        }
        zc_store_le64(dst + g * w, v);
    }
    return safe * 8;
}

static inline __attribute__((always_inline)) size_t
unpack8(const uint8_t *src, size_t n, size_t bytes, int32_t *levels, const unsigned w)
{
    const uint32_t field = (UINT32_C(1) << w) - 1, magnitude = field >> 1;
    size_t groups = n / 8;
    size_t safe = bytes >= 8 ? ZC_MIN(groups, (bytes - 8) / w + 1) : 0;
    for (size_t g = 0; g < safe; g++) {
        uint64_t v = zc_load_le64(src + g * w);
#pragma GCC unroll 8
        for (unsigned k = 0; k < 8; k++) {
            uint32_t code = (uint32_t)(v >> (k * w)) & field;
            int32_t neg = -(int32_t)(code >> (w - 1)), m = (int32_t)(code & magnitude);
            levels[g * 8 + k] = (m ^ neg) - neg;
        }
    }
    return safe * 8;
}

/*
 * Levels as w-bit sign-magnitude codes (2 <= w <= 32), LSB first: the
 * kernels' SIMD packers for w = 2, 4, 8, else 32 bits at a time from a 64-bit
 * accumulator (the kernels' scalar packer writes bit by bit). Same bytes
 * either way.
 */
static void pack_levels(const zc_qsgd_kernels_t *kern, const int32_t *levels, size_t n, unsigned w,
                        uint8_t *dst)
{
    const size_t bytes = (size_t)codes_bytes(n, w);
    const uint32_t sign = UINT32_C(1) << (w - 1);
    uint64_t acc = 0;
    unsigned nbits = 0;
    size_t pos = 0;

    if (w == 2 || w == 4 || w == 8) {
        kern->pack(levels, n, w, dst);
        return;
    }
    size_t i = 0;
    switch (w) {
    case 3: i = pack8(levels, n, dst, 3); break;
    case 5: i = pack8(levels, n, dst, 5); break;
    case 6: i = pack8(levels, n, dst, 6); break;
    case 7: i = pack8(levels, n, dst, 7); break;
    default: break;
    }
    pos = i / 8 * w; /* whole groups of 8 codes: w bytes each */
    for (; i < n; i++) {
        int32_t l = levels[i];
        uint32_t code = l < 0 ? (uint32_t)-l | sign : (uint32_t)l;
        acc |= (uint64_t)code << nbits; /* nbits < 32: at most 63 bits */
        nbits += w;
        if (nbits >= 32) {
            zc_store_le32(dst + pos, (uint32_t)acc);
            pos += 4;
            acc >>= 32;
            nbits -= 32;
        }
    }
    for (; pos < bytes; pos++, acc >>= 8)
        dst[pos] = (uint8_t)acc;
}

/*
 * The n codes of w bits (1..32) at src as signed levels: one unaligned 64-bit
 * load per code (w + 7 <= 39 bits), the last codes from a zero-padded copy.
 */
static void unpack_levels(const uint8_t *src, size_t n, unsigned w, int32_t *levels)
{
    const size_t bytes = (size_t)codes_bytes(n, w);
    const uint64_t field = (UINT64_C(1) << w) - 1;
    const uint32_t magnitude = (UINT32_C(1) << (w - 1)) - 1;
    size_t i = 0;

    if (w == 0) {
        memset(levels, 0, n * sizeof(*levels));
        return;
    }
    switch (w) {
    case 2: i = unpack8(src, n, bytes, levels, 2); break;
    case 3: i = unpack8(src, n, bytes, levels, 3); break;
    case 4: i = unpack8(src, n, bytes, levels, 4); break;
    case 5: i = unpack8(src, n, bytes, levels, 5); break;
    case 6: i = unpack8(src, n, bytes, levels, 6); break;
    case 7: i = unpack8(src, n, bytes, levels, 7); break;
    case 8: i = unpack8(src, n, bytes, levels, 8); break;
    default: break;
    }
    /* codes whose 8-byte load stays inside the codes */
    size_t fast = bytes >= 8 ? ZC_MIN(n, ((bytes - 8) * 8) / w + 1) : 0;
    for (; i < fast; i++) {
        uint64_t bit = (uint64_t)i * w, v = zc_load_le64(src + (bit >> 3));
        uint32_t code = (uint32_t)((v >> (bit & 7)) & field);
        int32_t neg = -(int32_t)(code >> (w - 1)), k = (int32_t)(code & magnitude);
        levels[i] = (k ^ neg) - neg;
    }
    for (; i < n; i++) {
        uint64_t bit = (uint64_t)i * w, v = 0;
        size_t at = (size_t)(bit >> 3);
        for (size_t j = 0; j < 8 && at + j < bytes; j++)
            v |= (uint64_t)src[at + j] << (8 * j);
        uint32_t code = (uint32_t)((v >> (bit & 7)) & field);
        int32_t neg = -(int32_t)(code >> (w - 1)), k = (int32_t)(code & magnitude);
        levels[i] = (k ^ neg) - neg;
    }
}

/* The body with @p scales (one per bucket), or each bucket's own scale when NULL. */
static zc_status_t encode_body(const zc_codec_params_t *p, const zc_codec_rng_t *crng,
                               zc_dtype_t dtype, const void *src, uint64_t count,
                               const float *scales, uint8_t *dst, size_t cap, size_t *len_p)
{
    const zc_qsgd_kernels_t *kern = zc_qsgd_kernels();
    const uint32_t s = p->qsgd_int.levels, d = p->qsgd_int.bucket;
    const zc_qsgd_rng_t rng = zc_qsgd_rng(crng);
    qi_scratch_t sc;
    zc_status_t status = ZC_OK;
    size_t pos = QI_HEADER_BYTES;

    if (count > QI_MAX_COUNT)
        return ZC_ERR_INVALID_ARG;
    if (cap < QI_HEADER_BYTES)
        return ZC_ERR_BUFFER_TOO_SMALL;
    zc_store_le32(dst, d);
    dst[4] = (uint8_t)s;
    dst[5] = (uint8_t)(s >> 8);
    dst[6] = (uint8_t)p->qsgd_int.scale;
    dst[7] = 0;
    zc_store_le32(dst + 8, 1);
    ZC_CHECK(scratch_init(&sc, (size_t)ZC_MIN(count, (uint64_t)d)));

    for (uint64_t first = 0, b = 0; first < count; first += d, b++) {
        size_t len = (size_t)ZC_MIN((uint64_t)d, count - first);
        const float *x = bucket_values(dtype, src, NULL, first, len, sc.values);
        uint32_t max_bits = kern->max_abs_bits(x, len);
        float scale;
        unsigned w = 0;

        if (cap - pos < QI_BUCKET_BYTES) {
            status = ZC_ERR_BUFFER_TOO_SMALL;
            break;
        }
        if (max_bits >= 0x7f800000u || (scales && max_bits >= ZC_QSGD_OOB_BITS)) {
            /* a value the section could not take (past its cap): the bucket is non-finite */
            scale = NAN;
        } else {
            scale = scales ? scales[b]
                           : zc_qsgd_bucket_scale(kern, p->qsgd_int.scale, x, len, max_bits);
            /* a shared scale covers every rank's values: anything else is not a maximum */
            if (!(scale >= 0) || isinf(scale) ||
                (p->qsgd_int.scale == ZC_QSGD_SCALE_MAX && max_bits > zc_f32_bits(scale))) {
                status = ZC_ERR_INVALID_ARG;
                break;
            }
            zc_qsgd_quantize_scaled(kern, &rng, x, len, first, scale, s, sc.levels);
            w = width_for(max_magnitude(sc.levels, len));
        }
        zc_store_le32(dst + pos, zc_f32_bits(scale) & 0x7fffffffu);
        dst[pos + 4] = (uint8_t)w;
        pos += QI_BUCKET_BYTES;
        size_t n = (size_t)codes_bytes(len, w);
        if (cap - pos < n) {
            status = ZC_ERR_BUFFER_TOO_SMALL;
            break;
        }
        if (w)
            pack_levels(kern, sc.levels, len, w, dst + pos);
        pos += n;
    }
    free(sc.heap);
    if (status == ZC_OK)
        *len_p = pos;
    return status;
}

static zc_status_t qi_encode(const zc_codec_params_t *p, zc_codec_state_t *state,
                             const zc_codec_rng_t *crng, zc_dtype_t dtype, const void *src,
                             uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    return encode_body(p, crng, dtype, src, count, NULL, dst, cap, len_p);
}

static zc_status_t qi_encode_shared(const zc_codec_params_t *p, zc_codec_state_t *state,
                                    const zc_codec_rng_t *crng, zc_dtype_t dtype, const void *src,
                                    uint64_t count, const float *scales, uint8_t *dst, size_t cap,
                                    size_t *len_p)
{
    return encode_body(p, crng, dtype, src, count, scales, dst, cap, len_p);
}

typedef struct qi_header {
    uint32_t d, s, kind, m;
} qi_header_t;

static zc_status_t parse_header(const uint8_t *body, size_t len, uint64_t count, qi_header_t *h)
{
    if (len < QI_HEADER_BYTES || count > QI_MAX_COUNT)
        return ZC_ERR_CORRUPT;
    h->d = zc_load_le32(body);
    h->s = (uint32_t)body[4] | (uint32_t)body[5] << 8;
    h->kind = body[6];
    h->m = zc_load_le32(body + 8);
    if (h->d < 1 || h->d > QI_MAX_BUCKET || h->s < 1 || h->kind > ZC_QSGD_SCALE_L2 ||
        body[7] != 0 || h->m < 1 || h->m > QI_MAX_RANKS)
        return ZC_ERR_CORRUPT;
    return ZC_OK;
}

/*
 * The scale and width of the bucket of @p n values at @p pos, checked against
 * the @p len bytes of the body; *@p codes_p their bytes.
 */
static zc_status_t parse_bucket(const uint8_t *body, size_t len, size_t pos, size_t n,
                                const qi_header_t *h, float *scale_p, unsigned *w_p,
                                size_t *codes_p)
{
    if (len - pos < QI_BUCKET_BYTES)
        return ZC_ERR_CORRUPT;
    uint32_t word = zc_load_le32(body + pos);
    unsigned w = body[pos + 4];
    float scale = zc_f32_from_bits(word);
    /* the encoder writes finite scales >= 0 or NaN, and widths its levels need */
    if ((word >> 31) || isinf(scale) || w == 1 || w > width_for(h->s * h->m))
        return ZC_ERR_CORRUPT;
    size_t bytes = (size_t)codes_bytes(n, w);
    if (len - pos - QI_BUCKET_BYTES < bytes)
        return ZC_ERR_CORRUPT;
    *scale_p = scale;
    *w_p = w;
    *codes_p = bytes;
    return ZC_OK;
}

static zc_status_t qi_decode_add(zc_codec_state_t *state, const uint8_t *body, size_t len,
                                 float *dst, uint64_t count, float alpha)
{
    const zc_qsgd_kernels_t *kern = zc_qsgd_kernels();
    qi_header_t h;

    ZC_CHECK(parse_header(body, len, count, &h));
    size_t pos = QI_HEADER_BYTES;
    for (uint64_t first = 0; first < count; first += h.d) {
        size_t n = (size_t)ZC_MIN((uint64_t)h.d, count - first), bytes;
        float scale;
        unsigned w;
        ZC_CHECK(parse_bucket(body, len, pos, n, &h, &scale, &w, &bytes));
        pos += QI_BUCKET_BYTES;
        if (isnan(scale)) {
            for (size_t i = 0; i < n; i++)
                dst[first + i] += scale;
        } else if (w) {
            /* a w-bit code holds magnitudes below 2^(w-1), w at most 1 + bitlen(s m) */
            const uint32_t bound = (UINT32_C(1) << (w - 1)) - 1;
            const zc_qsgd_level_scale_t ls = zc_qsgd_level_scale(scale, h.s, alpha);
            if (ls.exact)
                zc_qsgd_unpack_add_exact(body + pos, n, w, bound, &ls, dst + first);
            else
                kern->unpack_add(body + pos, n, w, bound, ls.unit, dst + first);
        }
        pos += bytes;
    }
    return pos == len ? ZC_OK : ZC_ERR_CORRUPT;
}

/* a + b into out (not aliasing either): levels of equal scales add exactly. */
static zc_status_t reduce_into(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                               uint64_t count, uint8_t *out, size_t cap, size_t *len_p)
{
    const zc_qsgd_kernels_t *kern = zc_qsgd_kernels();
    qi_header_t ha, hb;
    qi_scratch_t sc;
    zc_status_t status = ZC_OK;

    ZC_CHECK(parse_header(a, alen, count, &ha));
    ZC_CHECK(parse_header(b, blen, count, &hb));
    if (ha.d != hb.d || ha.s != hb.s || ha.kind != hb.kind)
        return ZC_ERR_MISMATCH;
    if (ha.m + hb.m > QI_MAX_RANKS)
        return ZC_ERR_MISMATCH; /* more payloads than one sum may hold */
    if (cap < QI_HEADER_BYTES)
        return ZC_ERR_BUFFER_TOO_SMALL;
    memcpy(out, a, 8);
    zc_store_le32(out + 8, ha.m + hb.m);
    ZC_CHECK(scratch_init(&sc, (size_t)ZC_MIN(count, (uint64_t)ha.d)));

    size_t pa = QI_HEADER_BYTES, pb = QI_HEADER_BYTES, po = QI_HEADER_BYTES;
    for (uint64_t first = 0; first < count; first += ha.d) {
        size_t n = (size_t)ZC_MIN((uint64_t)ha.d, count - first), bytes_a, bytes_b;
        float sa, sb;
        unsigned wa, wb, w = 0;
        if ((status = parse_bucket(a, alen, pa, n, &ha, &sa, &wa, &bytes_a)) < 0 ||
            (status = parse_bucket(b, blen, pb, n, &hb, &sb, &wb, &bytes_b)) < 0)
            break;
        pa += QI_BUCKET_BYTES;
        pb += QI_BUCKET_BYTES;
        float scale = sa;
        if (isnan(sa) || isnan(sb)) {
            scale = NAN;
        } else if (zc_f32_bits(sa) != zc_f32_bits(sb)) {
            status = ZC_ERR_MISMATCH; /* levels of different scales do not add */
            break;
        } else if (wa || wb) {
            unpack_levels(a + pa, n, wa, sc.levels);
            unpack_levels(b + pb, n, wb, sc.other);
            /* |a| + |b| < 2 s (ma + mb) <= 2^31: widths were checked against s m */
            for (size_t i = 0; i < n; i++)
                sc.levels[i] += sc.other[i];
            w = width_for(max_magnitude(sc.levels, n));
        }
        pa += bytes_a;
        pb += bytes_b;
        size_t bytes = (size_t)codes_bytes(n, w);
        if (cap - po < QI_BUCKET_BYTES + bytes) {
            status = ZC_ERR_BUFFER_TOO_SMALL;
            break;
        }
        zc_store_le32(out + po, zc_f32_bits(scale) & 0x7fffffffu);
        out[po + 4] = (uint8_t)w;
        po += QI_BUCKET_BYTES;
        if (w)
            pack_levels(kern, sc.levels, n, w, out + po);
        po += bytes;
    }
    free(sc.heap);
    if (status == ZC_OK && (pa != alen || pb != blen))
        status = ZC_ERR_CORRUPT;
    if (status == ZC_OK)
        *len_p = po;
    return status;
}

static zc_status_t qi_reduce(zc_codec_state_t *state, const uint8_t *a, size_t alen,
                             const uint8_t *b, size_t blen, uint64_t count, uint8_t *dst,
                             size_t cap, size_t *len_p)
{
    /* a sum can be wider than its operands: written apart, then over the one dst aliases */
    if (dst != a && dst != b)
        return reduce_into(a, alen, b, blen, count, dst, cap, len_p);
    uint8_t *out = malloc(cap ? cap : 1);
    if (!out)
        return ZC_ERR_NO_MEMORY;
    zc_status_t status = reduce_into(a, alen, b, blen, count, out, cap, len_p);
    if (status == ZC_OK)
        memcpy(dst, out, *len_p);
    free(out);
    return status;
}

/* A value past the section's cap: its bucket becomes non-finite (its codes stay, unread). */
static void qi_poison(const zc_codec_state_t *state, uint8_t *body, size_t len, uint64_t count,
                      uint64_t pos, float val)
{
    qi_header_t h;

    if (parse_header(body, len, count, &h) < 0 || pos >= count)
        return; /* reduce checked the body: cannot happen */
    size_t at = QI_HEADER_BYTES;
    for (uint64_t first = 0; first < count; first += h.d) {
        size_t n = (size_t)ZC_MIN((uint64_t)h.d, count - first), bytes;
        float scale;
        unsigned w;
        if (parse_bucket(body, len, at, n, &h, &scale, &w, &bytes) < 0)
            return;
        if (pos < first + n) {
            zc_store_le32(body + at, zc_f32_bits(NAN) & 0x7fffffffu);
            return;
        }
        at += QI_BUCKET_BYTES + bytes;
    }
}

static int qi_error_feedback(const zc_codec_params_t *p)
{
    return p->qsgd_int.error_feedback;
}

static void qi_params_default(zc_codec_params_t *p)
{
    p->qsgd_int.levels = zc_qsgd_levels_for_bits(4);
    p->qsgd_int.bucket = 512;
    p->qsgd_int.scale = ZC_QSGD_SCALE_MAX;
    p->qsgd_int.ranks = 1;
    p->qsgd_int.error_feedback = 0;
}

/* QSGD's variables: the level count, bucket, scale and error feedback are the same choices. */
static void qi_params_from_config(const zc_config_t *cfg, zc_codec_params_t *p)
{
    p->qsgd_int.levels = zc_qsgd_levels_from_config(cfg);
    p->qsgd_int.bucket = (uint32_t)cfg->qsgd_bucket;
    p->qsgd_int.scale = (zc_qsgd_scale_t)cfg->qsgd_scale;
    p->qsgd_int.error_feedback = (int)cfg->qsgd_ef;
}

static void qi_params_set_ranks(zc_codec_params_t *p, uint32_t nranks)
{
    p->qsgd_int.ranks = nranks;
}

static const zc_codec_field_t qi_fields[] = {
    ZC_CODEC_FIELD(qsgd_int.levels, INT, 1),         ZC_CODEC_FIELD(qsgd_int.bucket, INT, 1),
    ZC_CODEC_FIELD(qsgd_int.scale, INT, 1),          ZC_CODEC_FIELD(qsgd_int.ranks, INT, 1),
    ZC_CODEC_FIELD(qsgd_int.error_feedback, INT, 1),
};

static size_t qi_granule(const zc_codec_params_t *p)
{
    return p->qsgd_int.bucket;
}

/*
 * What the ring sends per value, averaged over its 2 (N - 1) steps: the
 * reduce-scatter's partial sums of m = 1 .. N - 1 payloads, then N - 1 sums of
 * all N, each at the width its levels may need, 1 + bitlen(s m). Per bucket of
 * d values 5 bytes more. Sums whose signs cancel are narrower: an upper bound.
 */
static double qi_wire_ratio(const zc_codec_params_t *p)
{
    const double d = p->qsgd_int.bucket;
    const uint32_t s = p->qsgd_int.levels, n = p->qsgd_int.ranks;
    double bytes = 0;

    if (n < 2)
        return (QI_BUCKET_BYTES + ceil(d * width_for(s) / 8.0)) / (4.0 * d);
    for (uint32_t m = 1; m < n; m++)
        bytes += QI_BUCKET_BYTES + ceil(d * width_for(s * m) / 8.0);
    bytes += (n - 1) * (QI_BUCKET_BYTES + ceil(d * width_for(s * n) / 8.0));
    return bytes / (2.0 * (n - 1)) / (4.0 * d);
}

const zc_codec_ops_t zc_codec_qsgd_int_ops = {
    .name = "qsgd-int",
    .id = ZC_CODEC_QSGD_INT,
    .caps = ZC_CODEC_CAP_STATELESS | ZC_CODEC_CAP_LINEAR | ZC_CODEC_CAP_UNBIASED,
    .oob_limit = 0x1p64f, /* ZC_QSGD_OOB_BITS */
    .fields = qi_fields,
    .nfields = ZC_ARRAY_SIZE(qi_fields),
    .params_default = qi_params_default,
    .params_from_config = qi_params_from_config,
    .params_set_ranks = qi_params_set_ranks,
    .check = qi_check,
    .error_feedback = qi_error_feedback,
    .granule = qi_granule,
    .wire_ratio = qi_wire_ratio,
    .nominal_encode_bw = 2e9,
    .nominal_decode_bw = 10e9,
    .nominal_reduce_bw = 1e9,
    .bound = qi_bound,
    .encode = qi_encode,
    .decode_add = qi_decode_add,
    .reduce = qi_reduce,
    .poison = qi_poison,
    .shared_scales = qi_shared_scales,
    .local_scales = qi_local_scales,
    .encode_shared = qi_encode_shared,
};
