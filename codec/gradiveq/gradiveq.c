/*
 * GradiVeQ: linear projection of gradient slices on a learned PCA basis (Yu et
 * al., NeurIPS 2018). A slice g of K consecutive values is sent as the d
 * coefficients c = U^T (g - mu / N) (paper eq. 1/4); payloads add without
 * decoding, and a sum of m payloads decodes to U c + mu * m / N, which is the
 * paper's U U^T (g - mu) + mu once all N ranks are in. The basis U and mean mu
 * are learned from the sums of raw calls: the warm-up's, then every refresh-th
 * call's (basis.c). Body layout (docs/codecs.md):
 *
 *   u32 slice K | u32 dim d | u32 basis version | u32 basis tag | u32 contributions m
 *   | u32 ranks N
 *   version 0 (a raw call):   count f32 values, raw
 *   version >= 1:             (count / K) x d f32 coefficients, row-major,
 *                             then the count % K tail values as raw f32
 */
#include "codec/gradiveq/gradiveq.h"
#include "codec/oob.h"
#include "common/bitio.h"
#include "common/compiler.h"
#include "common/config.h"

#include <cblas.h>

#include <math.h>
#include <stdalign.h>
#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "gradiveq reads and writes payload floats in place: little-endian hosts only"
#endif

#define BODY_HDR 24

/* NaN, infinities and magnitudes from 2^64 up go out of band (docs/codecs.md). */
#define GVQ_OOB_LIMIT 0x1p64f

typedef struct body_header {
    uint32_t slice, dim, version, tag, contributions, ranks;
} body_header_t;

static zc_status_t gradiveq_check(const zc_codec_params_t *p)
{
    const uint32_t k = p->gradiveq.slice;

    if (k < ZC_GRADIVEQ_MIN_SLICE || k > ZC_GRADIVEQ_MAX_SLICE || p->gradiveq.dim > k ||
        !(p->gradiveq.energy > 0 && p->gradiveq.energy <= 1) || p->gradiveq.ranks < 1 ||
        p->gradiveq.samples < 1 || p->gradiveq.samples > ZC_GRADIVEQ_MAX_SAMPLES ||
        p->gradiveq_warmup < 1 || p->gradiveq_warmup > ZC_GRADIVEQ_MAX_WARMUP ||
        (p->gradiveq.error_feedback != 0 && p->gradiveq.error_feedback != 1))
        return ZC_ERR_INVALID_CONFIG;
    /*
     * Error feedback on a fixed projection is not contractive: what lies off
     * the basis is never sent and the residual grows without bound (|r| / |g|
     * 10 after 200 calls of a drifting signal). A raw refresh sends it all.
     */
    if (p->gradiveq.error_feedback && p->gradiveq.refresh == 0)
        return ZC_ERR_INVALID_CONFIG;
    return ZC_OK;
}

static int gradiveq_error_feedback(const zc_codec_params_t *p)
{
    return p->gradiveq.error_feedback;
}

/* A version-0 payload (every value raw) is the largest: d <= K. */
static size_t gradiveq_bound(const zc_codec_params_t *p, uint64_t count)
{
    if (count > ZC_GRADIVEQ_MAX_COUNT)
        return SIZE_MAX;
    return BODY_HDR + (size_t)count * 4;
}

/* Body bytes after the header for @p h (already checked: d <= K, K >= 2). */
static uint64_t body_values(const body_header_t *h, uint64_t count)
{
    if (h->version == 0)
        return count;
    return count / h->slice * h->dim + count % h->slice;
}

static void header_store(uint8_t *dst, const body_header_t *h)
{
    zc_store_le32(dst, h->slice);
    zc_store_le32(dst + 4, h->dim);
    zc_store_le32(dst + 8, h->version);
    zc_store_le32(dst + 12, h->tag);
    zc_store_le32(dst + 16, h->contributions);
    zc_store_le32(dst + 20, h->ranks);
}

/*
 * Parses and checks a body against @p state: ZC_ERR_CORRUPT when the payload
 * cannot be one any encoder wrote (fields out of range, wrong length),
 * ZC_ERR_MISMATCH when it is well formed but made for another basis, slice,
 * rank count, or sums more contributions than there are ranks.
 */
static zc_status_t header_parse(const zc_codec_state_t *state, const uint8_t *body, size_t len,
                                uint64_t count, body_header_t *h_p)
{
    const zc_gradiveq_state_t *g = state->priv;
    const int raw = zc_gradiveq_call_raw(state);
    body_header_t h;

    if (len < BODY_HDR || count > ZC_GRADIVEQ_MAX_COUNT)
        return ZC_ERR_CORRUPT;
    h.slice = zc_load_le32(body);
    h.dim = zc_load_le32(body + 4);
    h.version = zc_load_le32(body + 8);
    h.tag = zc_load_le32(body + 12);
    h.contributions = zc_load_le32(body + 16);
    h.ranks = zc_load_le32(body + 20);
    if (h.slice < ZC_GRADIVEQ_MIN_SLICE || h.slice > ZC_GRADIVEQ_MAX_SLICE || h.dim > h.slice ||
        (h.version == 0) != (h.dim == 0) || (h.version == 0) != (h.tag == 0) ||
        h.contributions == 0 || h.ranks == 0)
        return ZC_ERR_CORRUPT;
    if (h.slice != g->slice || h.ranks != g->ranks || h.version != (raw ? 0 : g->version) ||
        h.dim != (raw ? 0 : g->dim) || h.tag != (raw ? 0 : g->tag) || h.contributions > h.ranks)
        return ZC_ERR_MISMATCH;
    if (len - BODY_HDR != body_values(&h, count) * 4)
        return ZC_ERR_CORRUPT;
    *h_p = h;
    return ZC_OK;
}

static zc_gradiveq_state_t *priv_of(zc_codec_state_t *state)
{
    return state && state->params.codec == ZC_CODEC_GRADIVEQ ? state->priv : NULL;
}

static int aligned_f32(const void *p)
{
    return ((uintptr_t)p & (alignof(float) - 1)) == 0;
}

/* At least @p floats of scratch, kept in the state between calls. */
static float *scratch(zc_gradiveq_state_t *g, size_t floats)
{
    if (g->scratch_len < floats) {
        float *p = realloc(g->scratch, floats * sizeof(float));
        if (!p)
            return NULL;
        g->scratch = p;
        g->scratch_len = floats;
    }
    return g->scratch;
}

/* Rows per sgemm call: the coefficient block stays in cache between the fill and the product. */
static uint64_t chunk_rows(uint32_t k)
{
    return ZC_GRADIVEQ_CHUNK / k;
}

/*
 * Decode's fixed-order loop works on this many values of a slice at once, as
 * one GCC vector (lowered to 1 zmm, 2 ymm or 4 xmm registers by the clone).
 */
#define GVQ_LANES 16
typedef float gvq_vec_t __attribute__((vector_size(GVQ_LANES * sizeof(float))));

/*
 * 16-value vector loads and stores of floats at any alignment (macros: a
 * function returning a vector would have another ABI in each clone).
 */
#define GVQ_LOAD(v, p) memcpy(&(v), (p), sizeof(gvq_vec_t))
#define GVQ_STORE(p, v) memcpy((p), &(v), sizeof(gvq_vec_t))

/*
 * dst += alpha ([c | share] [U | mu]^T) for @p rows slices: @p lifted_t is
 * [U | mu] transposed ((d + 1) x K), each value summed over t = 0..d in that
 * order, in f32. A BLAS sgemm picks its kernel, blocking and summation order
 * by CPU type (OPENBLAS_CORETYPE), so ranks on different CPUs decoded the same
 * payload to other bits; this loop gives the same bits on every CPU level.
 * Two slices at a time, 64 values each step: eight independent sums share
 * each load of the basis, so that the adds' latency overlaps. Encode may use
 * sgemm: every rank decodes the same payload bytes.
 * @p ct: room for 2 (d + 1) coefficients.
 */
ZC_WIDE_CLONES static void expand_rows(const uint8_t *coef, size_t rows, uint32_t k, uint32_t d,
                                       float share, const float *restrict lifted_t, float alpha,
                                       float *restrict ct, float *restrict dst)
{
    float *ct1 = ct + d + 1;
    for (size_t r = 0; r < rows; r += 2) {
        const int two = r + 1 < rows;
        memcpy(ct, coef + r * d * 4, (size_t)d * 4);
        ct[d] = share;
        memcpy(ct1, coef + (r + two) * d * 4, (size_t)d * 4); /* the same slice when one */
        ct1[d] = share;
        float *out0 = dst + r * k, *out1 = dst + (r + two) * k;
        uint32_t j0 = 0;
        for (; j0 + 4 * GVQ_LANES <= k; j0 += 4 * GVQ_LANES) {
            gvq_vec_t a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0};
            gvq_vec_t b0 = {0}, b1 = {0}, b2 = {0}, b3 = {0};
            for (uint32_t t = 0; t <= d; t++) {
                const float *row = lifted_t + (size_t)t * k + j0, x = ct[t], y = ct1[t];
                gvq_vec_t r0, r1, r2, r3;
                GVQ_LOAD(r0, row);
                GVQ_LOAD(r1, row + GVQ_LANES);
                GVQ_LOAD(r2, row + 2 * GVQ_LANES);
                GVQ_LOAD(r3, row + 3 * GVQ_LANES);
                a0 += x * r0;
                a1 += x * r1;
                a2 += x * r2;
                a3 += x * r3;
                b0 += y * r0;
                b1 += y * r1;
                b2 += y * r2;
                b3 += y * r3;
            }
            gvq_vec_t *acc[2][4] = {{&a0, &a1, &a2, &a3}, {&b0, &b1, &b2, &b3}};
            for (int s = 0; s <= two; s++) {
                float *o = (s ? out1 : out0) + j0;
                for (int q = 0; q < 4; q++) {
                    gvq_vec_t v;
                    GVQ_LOAD(v, o + q * GVQ_LANES);
                    v += alpha * *acc[s][q];
                    GVQ_STORE(o + q * GVQ_LANES, v);
                }
            }
        }
        for (int s = 0; s <= two; s++) {
            const float *c = s ? ct1 : ct;
            float *out = s ? out1 : out0;
            uint32_t j = j0;
            for (; j + GVQ_LANES <= k; j += GVQ_LANES) {
                gvq_vec_t acc = {0}, v;
                for (uint32_t t = 0; t <= d; t++) {
                    GVQ_LOAD(v, lifted_t + (size_t)t * k + j);
                    acc += c[t] * v;
                }
                GVQ_LOAD(v, out + j);
                v += alpha * acc;
                GVQ_STORE(out + j, v);
            }
            for (; j < k; j++) {
                float acc = 0;
                for (uint32_t t = 0; t <= d; t++)
                    acc += c[t] * lifted_t[(size_t)t * k + j];
                out[j] += alpha * acc;
            }
        }
    }
}

/* c = U^T g - U^T mu / N for every whole slice (paper eq. 1), then the raw tail. */
/*
 * With @p try_oob, each block (and the tail) is looked at first, while it is
 * in cache: a value past GVQ_OOB_LIMIT stops the encode (ZC_CODEC_RETRY_OOB).
 */
static zc_status_t encode_projected(zc_gradiveq_state_t *g, zc_dtype_t dtype, const void *src,
                                    uint64_t count, uint8_t *coef, int try_oob)
{
    const uint32_t k = g->slice, d = g->dim;
    const size_t esize = zc_dtype_size(dtype);
    const uint64_t slices = count / k, step = chunk_rows(k);
    const int direct_in = dtype == ZC_DTYPE_F32 && aligned_f32(src);
    const int direct_out = aligned_f32(coef);
    float *tmp = NULL;

    const size_t most = (size_t)ZC_MIN(step, slices);
    if ((!direct_in || !direct_out) && !(tmp = scratch(g, most * (k + d))))
        return ZC_ERR_NO_MEMORY;
    for (uint64_t r0 = 0; r0 < slices; r0 += step) {
        const size_t rows = (size_t)ZC_MIN(step, slices - r0);
        const char *in = (const char *)src + r0 * k * esize;
        const float *x = (const float *)(const void *)in;
        float *c = direct_out ? (float *)(void *)(coef + r0 * d * 4) : tmp + most * k;
        if (!direct_in) {
            zc_dtype_to_f32(dtype, in, rows * k, tmp);
            x = tmp;
        }
        if (try_oob && zc_oob_any(x, rows * k, GVQ_OOB_LIMIT))
            return ZC_CODEC_RETRY_OOB;
        for (size_t r = 0; r < rows; r++)
            for (uint32_t j = 0; j < d; j++)
                c[r * d + j] = -g->offset[j];
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)rows, (int)d, (int)k, 1.0f, x,
                    (int)k, g->basis, (int)d, 1.0f, c, (int)d);
        if (!direct_out)
            memcpy(coef + r0 * d * 4, c, rows * d * 4);
    }

    /* the tail, fewer than K values: raw f32 */
    const uint32_t tail = (uint32_t)(count % k);
    float t[ZC_GRADIVEQ_MAX_SLICE];
    zc_dtype_to_f32(dtype, (const char *)src + slices * k * esize, tail, t);
    if (try_oob && zc_oob_any(t, tail, GVQ_OOB_LIMIT))
        return ZC_CODEC_RETRY_OOB;
    if (tail)
        memcpy(coef + slices * d * 4, t, (size_t)tail * 4);
    return ZC_OK;
}

/* The encode; with @p try_oob, ZC_CODEC_RETRY_OOB at the first block holding a value past
 * GVQ_OOB_LIMIT. */
static zc_status_t encode_slices(zc_codec_state_t *state, zc_dtype_t dtype, const void *src,
                                 uint64_t count, uint8_t *dst, size_t cap, size_t *len_p,
                                 int try_oob)
{
    zc_gradiveq_state_t *g = priv_of(state);

    if (!g)
        return ZC_ERR_INVALID_ARG;
    if (count > ZC_GRADIVEQ_MAX_COUNT)
        return ZC_ERR_INVALID_ARG; /* a payload no decoder would accept */
    const int raw = zc_gradiveq_call_raw(state);
    const body_header_t h = {
        .slice = g->slice,
        .dim = raw ? 0 : g->dim,
        .version = raw ? 0 : g->version,
        .tag = raw ? 0 : g->tag,
        .contributions = 1,
        .ranks = g->ranks,
    };
    const size_t len = BODY_HDR + (size_t)body_values(&h, count) * 4;
    if (cap < len)
        return ZC_ERR_BUFFER_TOO_SMALL;
    header_store(dst, &h);
    if (raw) {
        const size_t esize = zc_dtype_size(dtype);
        float t[ZC_GRADIVEQ_MAX_SLICE];
        for (uint64_t i = 0; i < count; i += ZC_GRADIVEQ_MAX_SLICE) {
            size_t n = (size_t)ZC_MIN((uint64_t)ZC_GRADIVEQ_MAX_SLICE, count - i);
            zc_dtype_to_f32(dtype, (const char *)src + i * esize, n, t);
            if (try_oob && zc_oob_any(t, n, GVQ_OOB_LIMIT))
                return ZC_CODEC_RETRY_OOB;
            memcpy(dst + BODY_HDR + i * 4, t, n * 4);
        }
    } else {
        zc_status_t status = encode_projected(g, dtype, src, count, dst + BODY_HDR, try_oob);
        if (status != ZC_OK)
            return status;
    }
    *len_p = len;
    return ZC_OK;
}

static zc_status_t gradiveq_encode(const zc_codec_params_t *p, zc_codec_state_t *state,
                                   const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                   uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    return encode_slices(state, dtype, src, count, dst, cap, len_p, 0);
}

static zc_status_t gradiveq_encode_try(const zc_codec_params_t *p, zc_codec_state_t *state,
                                       const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                       uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    return encode_slices(state, dtype, src, count, dst, cap, len_p, 1);
}

/* dst += alpha * values, for @p n f32 values at any alignment. */
static void add_raw(const uint8_t *src, size_t n, float alpha, float *dst)
{
    for (size_t i = 0; i < n; i++) {
        float v;
        memcpy(&v, src + 4 * i, sizeof(v));
        dst[i] += alpha * v;
    }
}

static zc_status_t gradiveq_decode_add(zc_codec_state_t *state, const uint8_t *body, size_t len,
                                       float *dst, uint64_t count, float alpha)
{
    zc_gradiveq_state_t *g = priv_of(state);
    body_header_t h;

    if (!g)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(header_parse(state, body, len, count, &h));
    const uint8_t *coef = body + BODY_HDR;
    if (h.version == 0) {
        add_raw(coef, (size_t)count, alpha, dst);
        return ZC_OK;
    }

    /*
     * [c | m/N] times [U | mu]^T, slice by slice in a fixed order (expand_rows):
     * the mean share rides along as one more coefficient and dst is read and
     * written once.
     */
    const uint32_t k = h.slice, d = h.dim;
    const uint64_t slices = count / k;
    const float share = (float)((double)h.contributions / h.ranks);
    if (slices) {
        float *lifted_t = scratch(g, (size_t)k * (d + 1) + 2 * (d + 1));
        if (!lifted_t)
            return ZC_ERR_NO_MEMORY;
        float *acc = lifted_t + (size_t)k * (d + 1); /* two slices' d + 1 coefficients */
        for (uint32_t j = 0; j < k; j++)
            for (uint32_t t = 0; t <= d; t++)
                lifted_t[(size_t)t * k + j] = g->lifted_basis[(size_t)j * (d + 1) + t];
        expand_rows(coef, (size_t)slices, k, d, share, lifted_t, alpha, acc, dst);
    }
    add_raw(coef + slices * d * 4, (size_t)(count % k), alpha, dst + slices * k);
    return ZC_OK;
}

/* Coefficients and tails add element-wise; the contributions add up. */
static zc_status_t gradiveq_reduce(zc_codec_state_t *state, const uint8_t *a, size_t alen,
                                   const uint8_t *b, size_t blen, uint64_t count, uint8_t *dst,
                                   size_t cap, size_t *len_p)
{
    zc_gradiveq_state_t *g = priv_of(state);
    body_header_t ha, hb;

    if (!g)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(header_parse(state, a, alen, count, &ha));
    ZC_CHECK(header_parse(state, b, blen, count, &hb));
    /* both match the state, so they match each other; only the sum of m is left */
    if ((uint64_t)ha.contributions + hb.contributions > ha.ranks)
        return ZC_ERR_MISMATCH;
    if (cap < alen)
        return ZC_ERR_BUFFER_TOO_SMALL;
    ha.contributions += hb.contributions;

    /* dst may be a or b itself: each value is read before it is written */
    const size_t n = (alen - BODY_HDR) / 4;
    for (size_t i = 0; i < n; i++) {
        float x, y;
        memcpy(&x, a + BODY_HDR + 4 * i, sizeof(x));
        memcpy(&y, b + BODY_HDR + 4 * i, sizeof(y));
        x += y;
        memcpy(dst + BODY_HDR + 4 * i, &x, sizeof(x));
    }
    header_store(dst, &ha);
    *len_p = alen;
    return ZC_OK;
}

/*
 * Adds @p val at @p pos: to the raw value in a raw body or the tail, else by
 * turning the slice's coefficients into NaN (a projection cannot hold one
 * position's infinity without spreading it over the slice anyway).
 */
static void gradiveq_poison(const zc_codec_state_t *state, uint8_t *body, size_t len,
                            uint64_t count, uint64_t pos, float val)
{
    const uint32_t k = zc_load_le32(body), d = zc_load_le32(body + 4),
                   version = zc_load_le32(body + 8);
    uint8_t *coef = body + BODY_HDR;
    uint64_t at = pos; /* the raw value's index in the body */

    if (version != 0) {
        const uint64_t slices = count / k;
        if (pos < slices * k) {
            const float nan = NAN;
            for (uint32_t t = 0; t < d; t++)
                memcpy(coef + ((pos / k) * d + t) * 4, &nan, 4);
            return;
        }
        at = slices * d + (pos - slices * k);
    }
    float v;
    memcpy(&v, coef + at * 4, 4);
    v += val;
    memcpy(coef + at * 4, &v, 4);
}

static zc_status_t gradiveq_state_init(zc_codec_state_t *state)
{
    zc_gradiveq_state_t *g = calloc(1, sizeof(*g));

    if (!g)
        return ZC_ERR_NO_MEMORY;
    g->slice = state->params.gradiveq.slice;
    g->ranks = state->params.gradiveq.ranks;
    state->priv = g;
    return ZC_OK;
}

static void gradiveq_state_fini(zc_codec_state_t *state)
{
    zc_gradiveq_state_t *g = state ? state->priv : NULL;

    if (!g)
        return;
    free(g->basis);
    free(g->mean);
    free(g->offset);
    free(g->lifted_basis);
    free(g->eigenvalues);
    free(g->acc_mean);
    free(g->acc_m2);
    free(g->scratch);
    free(g);
    state->priv = NULL;
}

/*
 * K = 64, d from 99% of the variance, 1 rank, up to 16384 slices of each raw
 * sum, 10 raw warm-up calls, then every 20th call raw (docs/codecs.md).
 */
static void gradiveq_params_default(zc_codec_params_t *p)
{
    p->gradiveq.slice = 64;
    p->gradiveq.dim = 0;
    p->gradiveq.energy = 0.99;
    p->gradiveq.ranks = 1;
    p->gradiveq.samples = 16384;
    p->gradiveq.refresh = 20;
    p->gradiveq.error_feedback = 0;
    p->gradiveq_warmup = 10;
}

/* The rank count is the caller's (gradiveq_set_ranks): no variable sets it. */
static void gradiveq_params_from_config(const zc_config_t *cfg, zc_codec_params_t *p)
{
    p->gradiveq.slice = (uint32_t)cfg->gradiveq_slice;
    p->gradiveq.dim = cfg->gradiveq_dim == ZC_CONFIG_AUTO ? 0 : (uint32_t)cfg->gradiveq_dim;
    p->gradiveq.energy = (double)cfg->gradiveq_energy / ZC_CONFIG_DECIMAL_ONE;
    p->gradiveq.samples = (uint32_t)cfg->gradiveq_samples;
    p->gradiveq.refresh = (uint32_t)cfg->gradiveq_refresh;
    p->gradiveq.error_feedback = (int)cfg->gradiveq_ef;
    p->gradiveq_warmup = (uint32_t)cfg->gradiveq_warmup;
}

/* Every payload carries 1/N of the mean: N is the number of payloads summed. */
static void gradiveq_params_set_ranks(zc_codec_params_t *p, uint32_t nranks)
{
    p->gradiveq.ranks = nranks;
}

static const zc_codec_field_t gradiveq_fields[] = {
    ZC_CODEC_FIELD(gradiveq.slice, INT, 1),          ZC_CODEC_FIELD(gradiveq.dim, INT, 1),
    ZC_CODEC_FIELD(gradiveq.energy, F64, 1),         ZC_CODEC_FIELD(gradiveq.ranks, INT, 1),
    ZC_CODEC_FIELD(gradiveq.samples, INT, 1),        ZC_CODEC_FIELD(gradiveq.refresh, INT, 1),
    ZC_CODEC_FIELD(gradiveq.error_feedback, INT, 1), ZC_CODEC_FIELD(gradiveq_warmup, INT, 1),
};

/* A slice split between two payloads goes raw in both. */
static size_t gradiveq_granule(const zc_codec_params_t *p)
{
    return p->gradiveq.slice;
}

/*
 * d / K needs d, which with dim 0 (ZIPCCL_GRADIVEQ_DIM=auto) is learned from
 * the gradients themselves: no compression is credited then. One call in
 * every refresh is raw; the warm-up is left out (it ends).
 */
static double gradiveq_wire_ratio(const zc_codec_params_t *p)
{
    if (!p->gradiveq.dim)
        return 1.0;
    const double r = p->gradiveq.refresh, dk = (double)p->gradiveq.dim / p->gradiveq.slice;
    return r ? ((r - 1) * dk + 1) / r : dk;
}

/*
 * The body of a compressed call at the state's d over the raw f32 bytes,
 * with one call in every refresh raw; headers left out, as wire_ratio does.
 */
static double gradiveq_learned_ratio(const zc_codec_state_t *state)
{
    const zc_gradiveq_state_t *g = state->priv;
    const uint64_t count = state->count;

    if (!g || g->version == 0 || count == 0)
        return 0.0;
    const double r = state->params.gradiveq.refresh;
    const double c = (double)(count / g->slice * g->dim + count % g->slice) / (double)count;
    return r ? ((r - 1) * c + 1) / r : c;
}

/* Covariance (double), eigenvectors (double), basis and lifted basis (float): K x K each. */
static size_t gradiveq_state_bytes(const zc_codec_state_t *state)
{
    size_t k = state->params.gradiveq.slice;
    return k * k * (2 * sizeof(double) + 2 * sizeof(float));
}

const zc_codec_ops_t zc_codec_gradiveq_ops = {
    .name = "gradiveq",
    .id = ZC_CODEC_GRADIVEQ,
    .caps = ZC_CODEC_CAP_LINEAR,
    /*
     * The projection mixes a slice's values: a NaN, an infinity or an outlier
     * would reach every value of its slice. Such values go out of band.
     */
    .oob_limit = GVQ_OOB_LIMIT,
    .fields = gradiveq_fields,
    .nfields = ZC_ARRAY_SIZE(gradiveq_fields),
    .params_default = gradiveq_params_default,
    .params_from_config = gradiveq_params_from_config,
    .params_set_ranks = gradiveq_params_set_ranks,
    .check = gradiveq_check,
    .error_feedback = gradiveq_error_feedback,
    .granule = gradiveq_granule,
    .wire_ratio = gradiveq_wire_ratio,
    .learned_ratio = gradiveq_learned_ratio,
    .nominal_encode_bw = 2e9,
    .nominal_decode_bw = 2e9,
    .nominal_reduce_bw = 10e9,
    .bound = gradiveq_bound,
    .encode = gradiveq_encode,
    .encode_try = gradiveq_encode_try,
    .decode_add = gradiveq_decode_add,
    .reduce = gradiveq_reduce,
    .poison = gradiveq_poison,
    .state_init = gradiveq_state_init,
    .state_fini = gradiveq_state_fini,
    .state_bytes = gradiveq_state_bytes,
    .state_update = zc_gradiveq_learn,
};
