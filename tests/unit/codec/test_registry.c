/*
 * Properties every codec in the registry shares, checked through the public
 * API for each codec id: bound() is never exceeded, decode_add accumulates,
 * f16/bf16 inputs work, sizes 0, 1 and odd ones work, truncated and padded
 * payloads are errors, and NaN/Inf in the input come out non-finite.
 *
 * Stateful codecs get a fresh state per case; GradiVeQ is fed the input as the
 * "aggregated sum" first so that it encodes with a learned basis.
 */
#include "codec_test.h"

#include <zipccl/zipccl_codec.h>

#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static const size_t sizes[] = {0, 1, 2, 3, 17, 1000, 4099};

typedef struct coded {
    zc_codec_params_t params;
    zc_codec_state_t *state;
    uint8_t *payload;
    size_t len;
} coded_t;

/* Encodes @p n values of @p dtype; the payload buffer is exactly the bound. */
static coded_t encode(zc_codec_id_t id, zc_dtype_t dtype, const void *src, size_t n)
{
    coded_t c = {.params = params_of(id)};
    size_t bound = zc_codec_bound(&c.params, n);
    cr_assert_gt(bound, 0, "%s: bound(%zu) = 0", zc_codec_name(id), n);
    if (zc_codec_needs_state(&c.params)) {
        cr_assert_eq(zc_codec_state_create(&c.params, n, &c.state), ZC_OK);
        if (id == ZC_CODEC_GRADIVEQ && dtype == ZC_DTYPE_F32)
            cr_assert_eq(zc_codec_state_update(c.state, src, n), ZC_OK);
    }
    c.payload = xmalloc(bound);
    zc_codec_rng_t rng = test_codec_rng(7, 0, 1);
    zc_status_t s =
        zc_codec_encode(&c.params, c.state, &rng, dtype, src, n, c.payload, bound, &c.len);
    cr_assert_eq(s, ZC_OK, "%s: encode of %zu values: %s", zc_codec_name(id), n,
                 zc_status_string(s));
    cr_assert_leq(c.len, bound, "%s: payload %zu > bound %zu", zc_codec_name(id), c.len, bound);
    return c;
}

static void coded_free(coded_t *c)
{
    zc_codec_state_destroy(c->state);
    free(c->payload);
}

/* The parameter array of every registered codec id. */
static struct criterion_test_params every_codec(void)
{
    static zc_codec_id_t ids[ZC_CODEC_COUNT];
    for (int i = 0; i < ZC_CODEC_COUNT; i++)
        ids[i] = (zc_codec_id_t)i;
    return cr_make_param_array(zc_codec_id_t, ids, ZC_CODEC_COUNT);
}

ParameterizedTestParameters(registry, bound_and_accumulate)
{
    return every_codec();
}

/* decode_add adds: decoding twice gives twice one decode, and a prefilled buffer keeps its values.
 */
ParameterizedTest(zc_codec_id_t *id, registry, bound_and_accumulate)
{
    cr_assert_not_null(zc_codec_name(*id));
    for (size_t si = 0; si < sizeof(sizes) / sizeof(sizes[0]); si++) {
        size_t n = sizes[si];
        float *x = xmalloc(n * sizeof(float) + 4);
        fill_gauss(x, n, 100 + n, 1.0);
        coded_t c = encode(*id, ZC_DTYPE_F32, x, n);
        float *once = zeros_f32(n), *twice = zeros_f32(n), *pre = zeros_f32(n);
        for (size_t i = 0; i < n; i++)
            pre[i] = (float)i;
        cr_assert_eq(zc_codec_decode_add(c.state, c.payload, c.len, once, n), ZC_OK);
        cr_assert_eq(zc_codec_decode_add(c.state, c.payload, c.len, twice, n), ZC_OK);
        cr_assert_eq(zc_codec_decode_add(c.state, c.payload, c.len, twice, n), ZC_OK);
        cr_assert_eq(zc_codec_decode_add(c.state, c.payload, c.len, pre, n), ZC_OK);
        for (size_t i = 0; i < n; i++) {
            cr_assert(isfinite(once[i]), "%s n=%zu: value %zu not finite", zc_codec_name(*id), n,
                      i);
            cr_assert_eq(twice[i], once[i] + once[i], "%s n=%zu i=%zu", zc_codec_name(*id), n, i);
            cr_assert_eq(pre[i], (float)i + once[i], "%s n=%zu i=%zu", zc_codec_name(*id), n, i);
        }
        coded_free(&c);
        free(x);
        free(once);
        free(twice);
        free(pre);
    }
}

ParameterizedTestParameters(registry, half_inputs)
{
    return every_codec();
}

/*
 * f16 and bf16 inputs encode to the same payload as their exact f32 widening:
 * the codec's arithmetic starts from the same values.
 */
ParameterizedTest(zc_codec_id_t *id, registry, half_inputs)
{
    const size_t n = 1001;
    uint16_t *h = xmalloc(n * 2), *b = xmalloc(n * 2);
    float *fh = xmalloc(n * 4), *fb = xmalloc(n * 4), *x = xmalloc(n * 4);
    fill_gauss(x, n, 5, 3.0);
    for (size_t i = 0; i < n; i++) {
        /* values exact in both formats: small integers over 8 */
        float v = roundf(x[i] * 8.0f) / 8.0f;
        uint32_t bits;
        memcpy(&bits, &v, 4);
        b[i] = (uint16_t)(bits >> 16);
        fb[i] = v;
        fh[i] = v;
        /* f16 of v: exact, v has at most 8 significant bits and |v| < 64 */
        uint32_t exp = ((bits >> 23) & 0xff), man = bits & 0x7fffff;
        h[i] = v == 0 ? (uint16_t)(bits >> 16 & 0x8000)
                      : (uint16_t)((bits >> 16 & 0x8000) | (exp - 112) << 10 | man >> 13);
    }
    struct {
        zc_dtype_t dtype;
        const void *src;
    } inputs[] = {{ZC_DTYPE_F16, h}, {ZC_DTYPE_BF16, b}};
    coded_t ref = encode(*id, ZC_DTYPE_F32, fh, n);
    for (int k = 0; k < 2; k++) {
        coded_t c = encode(*id, inputs[k].dtype, inputs[k].src, n);
        /* GradiVeQ learned from f32 in ref only: compare decodes for it, bytes for the rest */
        if (*id != ZC_CODEC_GRADIVEQ) {
            cr_assert_eq(c.len, ref.len, "%s dtype %d: %zu vs %zu bytes", zc_codec_name(*id),
                         inputs[k].dtype, c.len, ref.len);
            cr_assert_eq(memcmp(c.payload, ref.payload, c.len), 0, "%s dtype %d",
                         zc_codec_name(*id), inputs[k].dtype);
        } else {
            float *y = zeros_f32(n);
            cr_assert_eq(zc_codec_decode_add(c.state, c.payload, c.len, y, n), ZC_OK);
            for (size_t i = 0; i < n; i++)
                cr_assert_eq(y[i], fh[i], "gradiveq version-0 payload is raw: %zu", i);
            free(y);
        }
        coded_free(&c);
    }
    coded_free(&ref);
    free(h);
    free(b);
    free(fh);
    free(fb);
    free(x);
}

ParameterizedTestParameters(registry, hostile_lengths)
{
    return every_codec();
}

/* Every truncation and a padded payload are errors; a wrong count is a mismatch. */
ParameterizedTest(zc_codec_id_t *id, registry, hostile_lengths)
{
    const size_t n = 777;
    float *x = xmalloc(n * 4);
    fill_gauss(x, n, 9, 1.0);
    coded_t c = encode(*id, ZC_DTYPE_F32, x, n);
    float *y = zeros_f32(n);
    for (size_t cut = 0; cut < c.len; cut += (cut < 64 ? 1 : 13)) {
        uint8_t *t = xmalloc(cut);
        memcpy(t, c.payload, cut);
        zc_status_t s = zc_codec_decode_add(c.state, t, cut, y, n);
        cr_assert(s == ZC_ERR_CORRUPT || s == ZC_ERR_MISMATCH,
                  "%s: truncated to %zu of %zu bytes gave %s", zc_codec_name(*id), cut, c.len,
                  zc_status_string(s));
        free(t);
    }
    uint8_t *padded = padded_copy(c.payload, c.len, 1, 0);
    cr_assert_eq(zc_codec_decode_add(c.state, padded, c.len + 1, y, n), ZC_ERR_CORRUPT,
                 "%s: one byte appended", zc_codec_name(*id));
    if (!zc_codec_needs_state(&c.params) || *id == ZC_CODEC_TOPK)
        cr_assert_eq(zc_codec_decode_add(c.state, c.payload, c.len, y, n - 1), ZC_ERR_MISMATCH,
                     "%s: count mismatch", zc_codec_name(*id));
    free(padded);
    free(y);
    free(x);
    coded_free(&c);
}

ParameterizedTestParameters(registry, nonfinite_propagates)
{
    return every_codec();
}

/* A NaN or an Inf in the input never decodes to a finite value at its position. */
ParameterizedTest(zc_codec_id_t *id, registry, nonfinite_propagates)
{
    const size_t n = 4096;
    const float bad[] = {NAN, INFINITY, -INFINITY};
    const size_t where[] = {0, 1000, n - 1};
    for (int b = 0; b < 3; b++) {
        for (int w = 0; w < 3; w++) {
            float *x = xmalloc(n * 4);
            fill_gauss(x, n, 11, 1.0);
            coded_t c = {.params = params_of(*id)};
            size_t bound = zc_codec_bound(&c.params, n);
            if (zc_codec_needs_state(&c.params)) {
                cr_assert_eq(zc_codec_state_create(&c.params, n, &c.state), ZC_OK);
                if (*id == ZC_CODEC_GRADIVEQ) /* learn from finite data, then encode the bad */
                    cr_assert_eq(zc_codec_state_update(c.state, x, n), ZC_OK);
            }
            x[where[w]] = bad[b];
            c.payload = xmalloc(bound);
            cr_assert_eq(zc_codec_encode(&c.params, c.state, NULL, ZC_DTYPE_F32, x, n, c.payload,
                                         bound, &c.len),
                         ZC_OK);
            float *y = zeros_f32(n);
            cr_assert_eq(zc_codec_decode_add(c.state, c.payload, c.len, y, n), ZC_OK);
            cr_assert(!isfinite(y[where[w]]), "%s: %f at %zu decoded to %f", zc_codec_name(*id),
                      bad[b], where[w], y[where[w]]);
            free(y);
            free(x);
            coded_free(&c);
        }
    }
}
