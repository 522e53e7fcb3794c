/*
 * QSGD: stochastic quantization in buckets (Alistarh et al., "QSGD:
 * Communication-Efficient SGD via Gradient Quantization and Encoding", 2017).
 *
 * Each bucket of d values is scaled by its largest magnitude or its L2 norm and
 * every magnitude is rounded at random to one of the s + 1 levels k/s so that
 * the expectation is the value (Lemma 3.1 (i)). The levels are then coded
 * fixed-width or with the Elias-omega code of §3.2. Body layout (docs/codecs.md):
 *
 *   u32 bucket | u16 levels | u8 coding | u8 scale kind
 *   per bucket, each starting on a byte boundary:
 *     u32 scale word: f32 scale with the sign bit replaced by the bucket coding
 *                     (0 fixed, 1 elias); a NaN scale marks a non-finite bucket
 *     fixed: len codes of b bits, sign-magnitude, padded to a byte
 *     elias: omega(nnz + 1), then per nonzero omega(gap) sign omega(k), padded
 */
#include "codec/codec.h"
#include "codec/oob.h"
#include "codec/qsgd/qsgd.h"
#include "common/bitio.h"
#include "common/compiler.h"
#include "common/config.h"
#include "common/half.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define QSGD_HEADER_BYTES 8
#define QSGD_MAX_BUCKET (UINT32_C(1) << 24)
#define QSGD_MAX_LEVELS 65535u
#define QSGD_STACK_BUCKET 4096 /* buckets up to this size need no heap scratch */
#define QSGD_FLAG_ELIAS UINT32_C(0x80000000)
/* Values in one payload: the decoder refuses more, so the encoder must too. */
#define QSGD_MAX_COUNT (UINT64_C(1) << 40)

/* Fixed code width: a sign bit and enough bits for s. */
static unsigned fixed_width(uint32_t s)
{
    return 1 + zc_bitlen32(s);
}

static zc_status_t qsgd_check(const zc_codec_params_t *p)
{
    if (p->qsgd.levels < 1 || p->qsgd.levels > QSGD_MAX_LEVELS || p->qsgd.bucket < 1 ||
        p->qsgd.bucket > QSGD_MAX_BUCKET || (unsigned)p->qsgd.scale > ZC_QSGD_SCALE_L2 ||
        (unsigned)p->qsgd.coding > ZC_QSGD_CODING_AUTO ||
        (p->qsgd.error_feedback != 0 && p->qsgd.error_feedback != 1))
        return ZC_ERR_INVALID_CONFIG;
    return ZC_OK;
}

static uint64_t fixed_bucket_bytes(uint64_t len, unsigned b)
{
    return 4 + ZC_DIV_UP(len * b, 8);
}

/*
 * Worst-case Elias bucket: omega(len + 1), then per nonzero omega(gap) + 1 + omega(k).
 * omega(g) <= g + 2 for every g >= 1 and the gaps sum to at most len, so the gap
 * codes take at most 3 len bits.
 */
static uint64_t elias_bucket_bytes(uint64_t len, uint32_t s)
{
    uint64_t bits = zc_elias_len((uint32_t)len + 1) + 3 * len + len * (1 + zc_elias_len(s));
    return 4 + ZC_DIV_UP(bits, 8);
}

static uint64_t bucket_bytes_max(const zc_codec_params_t *p, uint64_t len)
{
    uint64_t fixed = fixed_bucket_bytes(len, fixed_width(p->qsgd.levels));
    uint64_t elias = elias_bucket_bytes(len, p->qsgd.levels);
    switch (p->qsgd.coding) {
    case ZC_QSGD_CODING_FIXED: return fixed;
    case ZC_QSGD_CODING_ELIAS: return elias;
    default: return fixed < elias ? fixed : elias;
    }
}

static size_t qsgd_bound(const zc_codec_params_t *p, uint64_t count)
{
    const uint64_t d = p->qsgd.bucket;

    if (count > QSGD_MAX_COUNT)
        return SIZE_MAX;
    uint64_t full = count / d, tail = count % d;
    uint64_t bytes = QSGD_HEADER_BYTES + full * bucket_bytes_max(p, d);
    if (tail)
        bytes += bucket_bytes_max(p, tail);
    return bytes > SIZE_MAX ? SIZE_MAX : (size_t)bytes;
}

/* Bits of the Elias coding of one bucket's levels, without its scale word. */
static uint64_t elias_bits(const int32_t *levels, size_t len)
{
    uint64_t bits = 0;
    size_t nnz = 0, prev = (size_t)-1;

    for (size_t i = 0; i < len; i++) {
        if (levels[i] == 0)
            continue;
        uint32_t k = (uint32_t)abs(levels[i]);
        bits += zc_elias_len((uint32_t)(i - prev)) + 1 + zc_elias_len(k);
        prev = i;
        nnz++;
    }
    return bits + zc_elias_len((uint32_t)nnz + 1);
}

/*
 * zc_bw_put's steps without its bounds check and value mask, for a writer
 * with room for 8 bytes at pos and clean @p bits (none above @p n): the same
 * bytes.
 */
static inline void bw_put_unchecked(zc_bitwriter_t *w, uint64_t bits, unsigned n)
{
    w->acc |= bits << w->nbits;
    w->nbits += n;
    zc_store_le64(w->buf + w->pos, w->acc);
    w->pos += w->nbits >> 3;
    w->acc >>= w->nbits & ~7u;
    w->nbits &= 7;
}

/*
 * Nonzero positions are first gathered without branches (zeros fall at random,
 * a branch on them mispredicts), then each record is one table lookup per code
 * and one put. The writer lives in a local copy so that its state stays in
 * registers; when the bucket's worst case (elias_bucket_bytes) and an 8-byte
 * store past it fit, its puts skip the bounds check. @p nz has room for @p len
 * positions.
 */
ZC_SHIFT_CLONES static void elias_write(zc_bitwriter_t *w, const int32_t *levels, size_t len,
                                        uint32_t s, uint32_t *nz)
{
    size_t nnz = 0;
    for (size_t i = 0; i < len; i++) {
        nz[nnz] = (uint32_t)i;
        nnz += levels[i] != 0;
    }
    zc_elias_put(w, (uint32_t)nnz + 1);

    zc_bitwriter_t lw = *w;
    const int room = lw.cap - lw.pos >= elias_bucket_bytes(len, s) + 8;
    uint32_t prev = UINT32_MAX; /* position -1 */
    for (size_t j = 0; j < nnz; j++) {
        uint32_t i = nz[j], gap = i - prev;
        int32_t l = levels[i];
        uint32_t k = (uint32_t)abs(l);
        prev = i;
        if (ZC_UNLIKELY(gap >= ZC_ELIAS_TABLE_SIZE || k >= ZC_ELIAS_TABLE_SIZE)) {
            /* through *w: lw's address is never taken, so it stays in registers */
            *w = lw;
            zc_elias_put(w, gap);
            zc_bw_put(w, l < 0, 1);
            zc_elias_put(w, k);
            lw = *w;
            continue;
        }
        /* gap code, sign and level code in one put: at most 19 + 1 + 19 bits */
        uint32_t eg = zc_elias_enc_table[gap], ek = zc_elias_enc_table[k];
        unsigned lg = eg >> 24, n = lg + 1 + (ek >> 24);
        uint64_t bits =
            (eg & 0xffffffu) | (uint64_t)(l < 0) << lg | (uint64_t)(ek & 0xffffffu) << (lg + 1);
        if (room)
            bw_put_unchecked(&lw, bits, n);
        else
            zc_bw_put(&lw, bits, n);
    }
    *w = lw;
}

typedef struct qsgd_scratch {
    float *values;   /* f16/bf16 input converted to f32 */
    int32_t *levels; /* signed levels of one bucket */
    uint32_t *nz;    /* nonzero positions, for Elias coding */
    float values_stack[QSGD_STACK_BUCKET];
    int32_t levels_stack[QSGD_STACK_BUCKET];
    uint32_t nz_stack[QSGD_STACK_BUCKET];
    void *heap;
} qsgd_scratch_t;

static zc_status_t scratch_init(qsgd_scratch_t *sc, size_t len)
{
    sc->heap = NULL;
    if (len <= QSGD_STACK_BUCKET) {
        sc->values = sc->values_stack;
        sc->levels = sc->levels_stack;
        sc->nz = sc->nz_stack;
        return ZC_OK;
    }
    sc->heap = malloc(len * (sizeof(float) + sizeof(int32_t) + sizeof(uint32_t)));
    if (!sc->heap)
        return ZC_ERR_NO_MEMORY;
    sc->values = sc->heap;
    sc->levels = (int32_t *)(sc->values + len);
    sc->nz = (uint32_t *)(sc->levels + len);
    return ZC_OK;
}

float zc_qsgd_bucket_scale(const zc_qsgd_kernels_t *kern, zc_qsgd_scale_t kind, const float *x,
                           size_t len, uint32_t max_bits)
{
    if (kind == ZC_QSGD_SCALE_L2) {
        /* in double: the sum of squares of f32 values cannot overflow there; a norm
         * beyond FLT_MAX is clamped, which keeps |x| <= scale and the estimate unbiased */
        double norm = sqrt(kern->sum_squares(x, len));
        return norm > FLT_MAX ? FLT_MAX : (float)norm;
    }
    return zc_f32_from_bits(max_bits);
}

void zc_qsgd_quantize_scaled(const zc_qsgd_kernels_t *kern, const zc_qsgd_rng_t *rng,
                             const float *x, size_t len, uint64_t first, float scale, uint32_t s,
                             int32_t *levels)
{
    if (scale == 0) {
        memset(levels, 0, len * sizeof(*levels));
        return;
    }
    float inv = (float)s / scale;
    if (isfinite(inv)) {
        kern->quantize(x, len, first, inv, s, rng, levels);
        return;
    }
    /* scale below s / FLT_MAX: quantize |x| / scale instead, same levels in exact math */
    float tmp[64];
    for (size_t i = 0; i < len; i += 64) {
        size_t m = ZC_MIN(64, len - i);
        for (size_t j = 0; j < m; j++)
            tmp[j] = x[i + j] / scale;
        zc_qsgd_kernels_scalar.quantize(tmp, m, first + i, (float)s, s, rng, levels + i);
    }
}

/*
 * Scale and levels of one bucket. Returns the scale; a non-finite bucket gets a
 * NaN scale and all-zero levels, so it decodes to NaN whatever the coding.
 */
static float bucket_quantize(const zc_qsgd_kernels_t *kern, const zc_codec_params_t *p,
                             const zc_qsgd_rng_t *rng, const float *x, size_t len, uint64_t first,
                             int32_t *levels, int *oob_p)
{
    uint32_t max_bits = kern->max_abs_bits(x, len);

    if (max_bits >= ZC_QSGD_OOB_BITS)
        *oob_p = 1; /* a value for the out-of-band section: the encode starts again */
    if (max_bits >= 0x7f800000u) {
        memset(levels, 0, len * sizeof(*levels));
        return NAN;
    }
    float scale = zc_qsgd_bucket_scale(kern, p->qsgd.scale, x, len, max_bits);
    zc_qsgd_quantize_scaled(kern, rng, x, len, first, scale, p->qsgd.levels, levels);
    return scale;
}

/*
 * The scale word and codes of one bucket (levels from bucket_quantize) at
 * dst + *pos_p, which it advances; ZC_ERR_BUFFER_TOO_SMALL past @p cap.
 */
static zc_status_t encode_bucket(const zc_qsgd_kernels_t *kern, const zc_codec_params_t *p,
                                 float scale, const int32_t *levels, size_t len, uint32_t *nz,
                                 uint8_t *dst, size_t cap, size_t *pos_p)
{
    const unsigned b = fixed_width(p->qsgd.levels);
    const uint64_t fixed_bits = (uint64_t)len * b;
    size_t pos = *pos_p;
    int use_elias = p->qsgd.coding == ZC_QSGD_CODING_ELIAS;

    if (p->qsgd.coding == ZC_QSGD_CODING_AUTO)
        use_elias = ZC_DIV_UP(elias_bits(levels, len), 8) < ZC_DIV_UP(fixed_bits, 8);
    if (cap - pos < 4)
        return ZC_ERR_BUFFER_TOO_SMALL;
    zc_store_le32(dst + pos,
                  (zc_f32_bits(scale) & 0x7fffffffu) | (use_elias ? QSGD_FLAG_ELIAS : 0));
    pos += 4;
    if (use_elias) {
        zc_bitwriter_t w;
        zc_bw_init(&w, dst + pos, cap - pos);
        elias_write(&w, levels, len, p->qsgd.levels, nz);
        size_t n = zc_bw_flush(&w);
        if (n == SIZE_MAX)
            return ZC_ERR_BUFFER_TOO_SMALL;
        pos += n;
    } else {
        size_t n = (size_t)ZC_DIV_UP(fixed_bits, 8);
        if (cap - pos < n)
            return ZC_ERR_BUFFER_TOO_SMALL;
        kern->pack(levels, len, b, dst + pos);
        pos += n;
    }
    *pos_p = pos;
    return ZC_OK;
}

static void header_write(const zc_codec_params_t *p, uint8_t *dst)
{
    zc_store_le32(dst, p->qsgd.bucket);
    dst[4] = (uint8_t)p->qsgd.levels;
    dst[5] = (uint8_t)(p->qsgd.levels >> 8);
    dst[6] = (uint8_t)p->qsgd.coding;
    dst[7] = (uint8_t)p->qsgd.scale;
}

/* The encode; with @p try_oob it stops with ZC_CODEC_RETRY_OOB at a bucket holding a value past
 * ZC_QSGD_OOB_BITS. */
static zc_status_t encode_buckets(const zc_codec_params_t *p, const zc_codec_rng_t *crng,
                                  zc_dtype_t dtype, const void *src, uint64_t count, uint8_t *dst,
                                  size_t cap, size_t *len_p, int try_oob)
{
    const zc_qsgd_kernels_t *kern = zc_qsgd_kernels();
    const uint32_t d = p->qsgd.bucket;
    const size_t esize = zc_dtype_size(dtype);
    const zc_qsgd_rng_t rng = zc_qsgd_rng(crng);
    qsgd_scratch_t sc;
    zc_status_t status = ZC_OK;
    size_t pos = QSGD_HEADER_BYTES;

    if (count > QSGD_MAX_COUNT)
        return ZC_ERR_INVALID_ARG; /* a payload no decoder would accept */
    if (cap < QSGD_HEADER_BYTES)
        return ZC_ERR_BUFFER_TOO_SMALL;
    header_write(p, dst);
    ZC_CHECK(scratch_init(&sc, (size_t)ZC_MIN(count, (uint64_t)d)));

    for (uint64_t first = 0; first < count; first += d) {
        size_t len = (size_t)ZC_MIN((uint64_t)d, count - first);
        const float *x = (const float *)((const char *)src + first * esize);
        if (dtype != ZC_DTYPE_F32) {
            zc_dtype_to_f32(dtype, (const char *)src + first * esize, len, sc.values);
            x = sc.values;
        }
        int oob = 0;
        float scale = bucket_quantize(kern, p, &rng, x, len, first, sc.levels, &oob);
        if (oob && try_oob) {
            status = ZC_CODEC_RETRY_OOB;
            break;
        }

        status = encode_bucket(kern, p, scale, sc.levels, len, sc.nz, dst, cap, &pos);
        if (status != ZC_OK)
            break;
    }
    free(sc.heap);
    if (status == ZC_OK)
        *len_p = pos;
    return status;
}

static zc_status_t qsgd_encode(const zc_codec_params_t *p, zc_codec_state_t *state,
                               const zc_codec_rng_t *crng, zc_dtype_t dtype, const void *src,
                               uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    return encode_buckets(p, crng, dtype, src, count, dst, cap, len_p, 0);
}

static zc_status_t qsgd_encode_try(const zc_codec_params_t *p, zc_codec_state_t *state,
                                   const zc_codec_rng_t *crng, zc_dtype_t dtype, const void *src,
                                   uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    return encode_buckets(p, crng, dtype, src, count, dst, cap, len_p, 1);
}

int zc_qsgd_unpack_add_exact(const uint8_t *src, size_t n, unsigned b, uint32_t bound,
                             const zc_qsgd_level_scale_t *ls, float *dst)
{
    zc_bitreader_t r;
    const uint32_t sign = UINT32_C(1) << (b - 1);
    uint32_t worst = 0;

    zc_br_init(&r, src, ZC_DIV_UP(n * b, 8));
    for (size_t i = 0; i < n; i++) {
        uint32_t code = zc_br_get(&r, b);
        uint32_t k = code & (sign - 1);
        worst |= k > bound;
        float v = zc_qsgd_level_value(ls, k);
        dst[i] += code & sign ? -v : v;
    }
    return worst ? -1 : 0;
}

/*
 * One Elias bucket. Records come from one 12-bit table lookup when they fit,
 * else two, else the bit-by-bit decoder. The reader is a local copy (state in
 * registers); @p exact is a constant in each of the two callers below.
 */
static inline __attribute__((always_inline)) zc_status_t
elias_decode_bucket(zc_bitreader_t *r, size_t len, const zc_qsgd_level_scale_t *ls, float *dst,
                    const int exact)
{
    const uint32_t s = ls->s;
    uint32_t nnz_plus = zc_elias_get(r);
    if (nnz_plus == 0 || nnz_plus - 1 > len || r->overrun)
        return ZC_ERR_CORRUPT;
    zc_bitreader_t lr = *r;
    size_t pos = (size_t)-1;
    for (uint32_t j = 0; j + 1 < nnz_plus; j++) {
        uint32_t gap, neg, k;
        if (lr.nbits < 25)
            zc_br_refill(&lr);
        uint32_t t = zc_elias_triple_table[lr.acc & (ZC_ELIAS_TABLE_SIZE - 1)];
        unsigned used = t >> 24;
        if (ZC_LIKELY(t != 0 && used <= lr.nbits)) {
            gap = t & 0xffu;
            k = (t >> 8) & 0xffu;
            neg = (t >> 16) & 1u;
        } else {
            uint16_t eg = zc_elias_dec_table[lr.acc & (ZC_ELIAS_TABLE_SIZE - 1)];
            unsigned lg = eg >> 8;
            uint16_t ek = zc_elias_dec_table[(lr.acc >> (lg + 1)) & (ZC_ELIAS_TABLE_SIZE - 1)];
            used = lg + 1 + (ek >> 8);
            if (ZC_LIKELY(eg != 0 && ek != 0 && used <= lr.nbits)) {
                gap = eg & 0xffu;
                neg = (uint32_t)(lr.acc >> lg) & 1;
                k = ek & 0xffu;
            } else {
                *r = lr;
                gap = zc_elias_get(r);
                neg = zc_br_get(r, 1);
                k = zc_elias_get(r);
                if (r->overrun)
                    return ZC_ERR_CORRUPT;
                lr = *r;
                used = 0;
            }
        }
        lr.acc >>= used;
        lr.nbits -= used;
        /* gap in 1..values left, k in 1..s: one unsigned compare each */
        if (ZC_UNLIKELY(gap - 1 >= len - (pos + 1) || k - 1 >= s))
            return ZC_ERR_CORRUPT;
        pos += gap;
        float v = exact ? zc_qsgd_level_value(ls, k) : (float)k * ls->unit;
        dst[pos] += zc_f32_from_bits(zc_f32_bits(v) ^ neg << 31); /* signs are random: no branch */
    }
    *r = lr;
    return ZC_OK;
}

static zc_status_t elias_decode_add(zc_bitreader_t *r, size_t len, const zc_qsgd_level_scale_t *ls,
                                    float *dst)
{
    return ls->exact ? elias_decode_bucket(r, len, ls, dst, 1)
                     : elias_decode_bucket(r, len, ls, dst, 0);
}

/*
 * Adds @p alpha times the bucket of @p n values at body + *pos_p into @p dst
 * and advances *pos_p past it; ZC_ERR_CORRUPT if it is malformed or would
 * pass @p len.
 */
static zc_status_t decode_bucket(const zc_qsgd_kernels_t *kern, const uint8_t *body, size_t len,
                                 size_t *pos_p, unsigned coding, uint32_t s, size_t n, float alpha,
                                 float *dst)
{
    const unsigned b = fixed_width(s);
    size_t pos = *pos_p;

    if (len - pos < 4)
        return ZC_ERR_CORRUPT;
    uint32_t word = zc_load_le32(body + pos);
    pos += 4;
    int elias = (word & QSGD_FLAG_ELIAS) != 0;
    if ((coding == ZC_QSGD_CODING_FIXED && elias) || (coding == ZC_QSGD_CODING_ELIAS && !elias))
        return ZC_ERR_CORRUPT;
    float scale = zc_f32_from_bits(word & 0x7fffffffu);
    const zc_qsgd_level_scale_t ls = zc_qsgd_level_scale(scale, s, alpha);
    if (isinf(scale))
        return ZC_ERR_CORRUPT; /* the encoder never writes an infinite scale */

    if (elias) {
        zc_bitreader_t r;
        zc_br_init(&r, body + pos, len - pos);
        if (isnan(scale)) {
            /* a non-finite bucket: all levels are zero, every value decodes to NaN */
            if (zc_elias_get(&r) != 1 || r.overrun)
                return ZC_ERR_CORRUPT;
            for (size_t i = 0; i < n; i++)
                dst[i] += scale;
        } else {
            ZC_CHECK(elias_decode_add(&r, n, &ls, dst));
        }
        zc_br_align(&r);
        pos += zc_br_consumed(&r);
    } else {
        size_t bytes = (size_t)ZC_DIV_UP((uint64_t)n * b, 8);
        if (len - pos < bytes)
            return ZC_ERR_CORRUPT;
        if (isnan(scale)) {
            for (size_t i = 0; i < n; i++)
                dst[i] += scale;
        } else {
            int bad = ls.exact ? zc_qsgd_unpack_add_exact(body + pos, n, b, s, &ls, dst)
                               : kern->unpack_add(body + pos, n, b, s, ls.unit, dst);
            if (bad < 0)
                return ZC_ERR_CORRUPT;
        }
        pos += bytes;
    }
    *pos_p = pos;
    return ZC_OK;
}

static zc_status_t qsgd_decode_add(zc_codec_state_t *state, const uint8_t *body, size_t len,
                                   float *dst, uint64_t count, float alpha)
{
    const zc_qsgd_kernels_t *kern = zc_qsgd_kernels();

    if (len < QSGD_HEADER_BYTES)
        return ZC_ERR_CORRUPT;
    const uint32_t d = zc_load_le32(body);
    const uint32_t s = (uint32_t)body[4] | (uint32_t)body[5] << 8;
    const unsigned coding = body[6];
    if (d < 1 || d > QSGD_MAX_BUCKET || s < 1 || coding > ZC_QSGD_CODING_AUTO ||
        body[7] > ZC_QSGD_SCALE_L2 || count > QSGD_MAX_COUNT)
        return ZC_ERR_CORRUPT;
    const unsigned b = fixed_width(s);

    if (coding == ZC_QSGD_CODING_FIXED) {
        /* the whole length is known: reject truncated and oversized payloads up front */
        uint64_t full = count / d, tail = count % d;
        uint64_t want = QSGD_HEADER_BYTES + full * fixed_bucket_bytes(d, b) +
                        (tail ? fixed_bucket_bytes(tail, b) : 0);
        if (want != len)
            return ZC_ERR_CORRUPT;
    }

    size_t pos = QSGD_HEADER_BYTES;
    for (uint64_t first = 0; first < count; first += d) {
        size_t n = (size_t)ZC_MIN((uint64_t)d, count - first);
        ZC_CHECK(decode_bucket(kern, body, len, &pos, coding, s, n, alpha, dst + first));
    }
    return pos == len ? ZC_OK : ZC_ERR_CORRUPT;
}

/*
 * Moves the values of @p x[0..len) (element first + i) past the body's reach
 * (NaN, infinities, magnitudes from ZC_QSGD_OOB_BITS up) to @p spill, with 0 left
 * in their place, in position order while the section has room (@p oob_cap):
 * what the generic scan and split do, a bucket at a time. Pushes cannot fail:
 * the room was reserved.
 */
static void bucket_spill(float *x, size_t len, uint64_t first, zc_oob_t *spill, uint64_t oob_cap)
{
    for (size_t i = 0; i < len && spill->n < oob_cap; i++) {
        if ((zc_f32_bits(x[i]) & 0x7fffffffu) >= ZC_QSGD_OOB_BITS) {
            (void)zc_oob_push(spill, first + i, x[i]);
            x[i] = 0.0f;
        }
    }
}

/*
 * Error feedback in one pass (ops.encode_ef): per bucket, residual += input,
 * the bucket quantized and coded, and its codes decoded with alpha = -1 into
 * the residual, all while the bucket is in cache; the generic path reads and
 * writes the whole residual three times. The subtraction is the decoder's
 * own (decode_bucket), so the residual's bits are the generic path's. Values
 * out of band go to @p spill as the generic scan would send them (the first
 * zc_oob_cap(count)); a bucket left holding a NaN or an infinity past that cap
 * is sent as a NaN bucket and its residual cleared, as codec.c clears it.
 */
static zc_status_t qsgd_encode_ef(const zc_codec_params_t *p, zc_codec_state_t *state,
                                  const zc_codec_rng_t *crng, const float *src, uint64_t count,
                                  float *residual, uint8_t *dst, size_t cap, size_t *len_p,
                                  zc_oob_t *spill)
{
    const zc_qsgd_kernels_t *kern = zc_qsgd_kernels();
    const uint32_t d = p->qsgd.bucket;
    const zc_qsgd_rng_t rng = zc_qsgd_rng(crng);
    const uint64_t oob_cap = zc_oob_cap(count);
    const size_t bound = qsgd_bound(p, count);
    qsgd_scratch_t sc;
    zc_status_t status;
    size_t pos = QSGD_HEADER_BYTES;

    /* room for the worst case, section included, so nothing fails once the residual changed */
    if (count > QSGD_MAX_COUNT || cap < bound || cap - bound < zc_oob_bound(count)) {
        status = ZC_CODEC_RETRY_OOB; /* the generic path: it says what does not fit */
        goto err_add;
    }
    ZC_CHECK_GOTO(scratch_init(&sc, (size_t)ZC_MIN(count, (uint64_t)d)), status, err_add);
    ZC_CHECK_GOTO(zc_oob_reserve(spill, oob_cap), status, err_free);
    header_write(p, dst);
    for (uint64_t first = 0; first < count; first += d) {
        const size_t len = (size_t)ZC_MIN((uint64_t)d, count - first);
        float *r = residual + first;
        kern->add(src + first, len, r);
        int oob = 0;
        float scale = bucket_quantize(kern, p, &rng, r, len, first, sc.levels, &oob);
        if (ZC_UNLIKELY(oob)) {
            bucket_spill(r, len, first, spill, oob_cap);
            scale = bucket_quantize(kern, p, &rng, r, len, first, sc.levels, &oob);
        }
        size_t at = pos;
        /* neither fails: the bound holds the bucket, and the decoder reads what was written */
        if (encode_bucket(kern, p, scale, sc.levels, len, sc.nz, dst, cap, &pos) != ZC_OK ||
            decode_bucket(kern, dst, pos, &at, (unsigned)p->qsgd.coding, p->qsgd.levels, len, -1.0f,
                          r) != ZC_OK) {
            free(sc.heap);
            return ZC_ERR_INTERNAL;
        }
        if (ZC_UNLIKELY(isnan(scale)))
            state->oob_values += zc_oob_clear_nonfinite(r, len);
    }
    free(sc.heap);
    *len_p = pos;
    return ZC_OK;

err_free:
    free(sc.heap);
err_add:
    zc_dtype_add_f32(ZC_DTYPE_F32, src, (size_t)count, residual);
    return status;
}

static int qsgd_error_feedback(const zc_codec_params_t *p)
{
    return p->qsgd.error_feedback;
}

/* The paper's experiments' 4 bits (s = 7) in buckets of 512, max scale. */
static void qsgd_params_default(zc_codec_params_t *p)
{
    p->qsgd.levels = zc_qsgd_levels_for_bits(4);
    p->qsgd.bucket = 512;
    p->qsgd.scale = ZC_QSGD_SCALE_MAX;
    p->qsgd.coding = ZC_QSGD_CODING_FIXED;
    p->qsgd.error_feedback = 0;
}

uint32_t zc_qsgd_levels_from_config(const zc_config_t *cfg)
{
    return cfg->qsgd_levels == ZC_CONFIG_AUTO ? zc_qsgd_levels_for_bits((unsigned)cfg->qsgd_bits)
                                              : (uint32_t)cfg->qsgd_levels;
}

static void qsgd_params_from_config(const zc_config_t *cfg, zc_codec_params_t *p)
{
    _Static_assert((int)ZC_CFG_QSGD_SCALE_MAX == (int)ZC_QSGD_SCALE_MAX &&
                       (int)ZC_CFG_QSGD_SCALE_L2 == (int)ZC_QSGD_SCALE_L2 &&
                       (int)ZC_CFG_QSGD_CODING_FIXED == (int)ZC_QSGD_CODING_FIXED &&
                       (int)ZC_CFG_QSGD_CODING_ELIAS == (int)ZC_QSGD_CODING_ELIAS &&
                       (int)ZC_CFG_QSGD_CODING_AUTO == (int)ZC_QSGD_CODING_AUTO,
                   "the QSGD choices of common/choices.h are zipccl_codec.h's enums");
    p->qsgd.levels = zc_qsgd_levels_from_config(cfg);
    p->qsgd.bucket = (uint32_t)cfg->qsgd_bucket;
    p->qsgd.scale = (zc_qsgd_scale_t)cfg->qsgd_scale;
    p->qsgd.coding = (zc_qsgd_coding_t)cfg->qsgd_coding;
    p->qsgd.error_feedback = (int)cfg->qsgd_ef;
}

static const zc_codec_field_t qsgd_fields[] = {
    ZC_CODEC_FIELD(qsgd.levels, INT, 1),         ZC_CODEC_FIELD(qsgd.bucket, INT, 1),
    ZC_CODEC_FIELD(qsgd.scale, INT, 1),          ZC_CODEC_FIELD(qsgd.coding, INT, 1),
    ZC_CODEC_FIELD(qsgd.error_feedback, INT, 1),
};

/* A bucket split between two payloads costs a scale word in each. */
static size_t qsgd_granule(const zc_codec_params_t *p)
{
    return p->qsgd.bucket;
}

/*
 * Exact for fixed coding; Elias and auto coding are data-dependent and get
 * the fixed size (auto is never larger). Per bucket of d values: a 4-byte
 * scale word and d codes of 1 + bitlen(s) bits.
 */
static double qsgd_wire_ratio(const zc_codec_params_t *p)
{
    const double d = p->qsgd.bucket, b = 1 + zc_bitlen32(p->qsgd.levels);
    return (4.0 + ceil(d * b / 8.0)) / (4.0 * d);
}

/* Stateless and unbiased as such; with error feedback it needs a state and is biased. */
const zc_codec_ops_t zc_codec_qsgd_ops = {
    .name = "qsgd",
    .id = ZC_CODEC_QSGD,
    .caps = ZC_CODEC_CAP_STATELESS | ZC_CODEC_CAP_UNBIASED,
    /*
     * A scale is a bucket's largest magnitude (or norm): one NaN, infinity or
     * outlier would set it for the whole bucket. Such values go out of band.
     */
    .oob_limit = 0x1p64f,            /* ZC_QSGD_OOB_BITS */
    .ring_codec = ZC_CODEC_QSGD_INT, /* levels of shared scales add without decoding */
    .fields = qsgd_fields,
    .nfields = ZC_ARRAY_SIZE(qsgd_fields),
    .params_default = qsgd_params_default,
    .params_from_config = qsgd_params_from_config,
    .check = qsgd_check,
    .error_feedback = qsgd_error_feedback,
    .granule = qsgd_granule,
    .wire_ratio = qsgd_wire_ratio,
    .nominal_encode_bw = 2e9,
    .nominal_decode_bw = 10e9,
    .bound = qsgd_bound,
    .encode = qsgd_encode,
    .encode_try = qsgd_encode_try,
    .encode_ef = qsgd_encode_ef,
    .decode_add = qsgd_decode_add,
};
