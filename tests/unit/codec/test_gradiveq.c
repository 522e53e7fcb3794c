/*
 * GradiVeQ (codec/gradiveq): parameters, the raw version-0 payload, the basis
 * learned from the aggregated sum (synthetic low-rank data and a real
 * Fashion-MNIST gradient), linearity with the mean term, determinism and basis
 * versions, error feedback, non-finite input, and hostile payloads.
 *
 * Tolerances are rounding-error bounds derived from the operations done, with
 * u = 2^-24 (f32 unit roundoff) and gamma(n) = n u / (1 - n u) (Higham,
 * "Accuracy and Stability of Numerical Algorithms", §3.1: a sum of n products
 * computed in any order errs by at most gamma(n) times the sum of |products|).
 * Each bound is stated next to its test; none was tuned to the values observed.
 */
#include "codec_test.h"

#include "codec/codec.h" /* struct zc_codec_state: the error-feedback residual */
#include "codec/gradiveq/gradiveq.h"
#include "common/half.h"
#include "common/philox.h"
#include "examples/fmnist.h"

#include <criterion/criterion.h>
#include <lapacke.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define HDR ZC_PAYLOAD_HEADER_BYTES
#define BODY_HDR 24 /* u32 K, d, version, tag, contributions, ranks */
#define U_F32 0x1p-24
#define EPS_F64 0x1p-53

/* Body header fields, as byte offsets from the start of the payload. */
enum {
    F_SLICE = HDR + 0,
    F_DIM = HDR + 4,
    F_VERSION = HDR + 8,
    F_TAG = HDR + 12,
    F_CONTRIB = HDR + 16,
    F_RANKS = HDR + 20,
};

/* ------------------------------------------------------------ test helpers */

static double gamma_n(unsigned n)
{
    double nu = n * U_F32;
    return nu / (1 - nu);
}

static zc_codec_params_t gvq_params(uint32_t k, uint32_t dim, double energy, uint32_t ranks,
                                    uint32_t samples, uint32_t refresh)
{
    zc_codec_params_t p = params_of(ZC_CODEC_GRADIVEQ);
    p.gradiveq.slice = k;
    p.gradiveq.dim = dim;
    p.gradiveq.energy = energy;
    p.gradiveq.ranks = ranks;
    p.gradiveq.samples = samples;
    p.gradiveq.refresh = refresh;
    p.gradiveq_warmup = 1; /* the first call raw, its sum learned from */
    return p;
}

static void learn(zc_codec_state_t *st, const float *sum, size_t n)
{
    zc_status_t s = zc_codec_state_update(st, sum, n);
    cr_assert_eq(s, ZC_OK, "state_update: %s", zc_status_string(s));
}

static zc_gradiveq_view_t view_of(const zc_codec_state_t *st)
{
    zc_gradiveq_view_t v;
    cr_assert_eq(zc_gradiveq_view(st, &v), ZC_OK);
    return v;
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/* f32 number i after the body header (coefficients, then tail; or raw values). */
static float body_f32(const payload_t *pl, size_t i)
{
    float v;
    memcpy(&v, pl->buf + HDR + BODY_HDR + 4 * i, sizeof(v));
    return v;
}

/*
 * The largest out-of-band section for @p n values: e = 16 + n / 1024 entries
 * (at most n), each a value and a gap of at most 10 bytes, the gaps also at
 * most e + n / 7 bytes.
 */
static uint64_t section_bound(uint64_t n)
{
    uint64_t e = n < 16 + n / 1024 ? n : 16 + n / 1024, gaps = e + n / 7;
    return 8 + 4 * e + (10 * e < gaps ? 10 * e : gaps);
}

/* Encodes with @p st into a bound-sized buffer (the raw body and the largest section); returns an
 * exactly sized copy. */
static payload_t enc(const zc_codec_params_t *p, zc_codec_state_t *st, zc_dtype_t dtype,
                     const void *src, size_t n)
{
    size_t bound = zc_codec_bound(p, n);
    cr_assert_eq(bound, HDR + BODY_HDR + 4 * n + section_bound(n), "bound of %zu values", n);
    uint8_t *tmp = xmalloc(bound);
    size_t len = 0;
    zc_status_t s = zc_codec_encode(p, st, NULL, dtype, src, n, tmp, bound, &len);
    cr_assert_eq(s, ZC_OK, "encode of %zu values: %s", n, zc_status_string(s));
    cr_assert_leq(len, bound, "payload %zu bytes > bound %zu", len, bound);
    payload_t out = {exact_copy(tmp, len), len};
    free(tmp);
    return out;
}

static float *dec(zc_codec_state_t *st, const payload_t *pl, size_t n)
{
    float *out = zeros_f32(n);
    zc_status_t s = zc_codec_decode_add(st, pl->buf, pl->len, out, n);
    cr_assert_eq(s, ZC_OK, "decode of %zu values: %s", n, zc_status_string(s));
    return out;
}

static payload_t red(zc_codec_state_t *st, const payload_t *a, const payload_t *b)
{
    uint8_t *tmp = xmalloc(a->len);
    size_t len = 0;
    zc_status_t s = zc_codec_reduce(st, a->buf, a->len, b->buf, b->len, tmp, a->len, &len);
    cr_assert_eq(s, ZC_OK, "reduce: %s", zc_status_string(s));
    cr_assert_eq(len, a->len);
    payload_t out = {tmp, len};
    return out;
}

static size_t payload_len(size_t n, uint32_t k, uint32_t d)
{
    return HDR + BODY_HDR + 4 * (d ? n / k * d + n % k : n);
}

/*
 * What encoding @p x must give, in exact arithmetic on the state's stored f32
 * basis U, offset o = U^T mu / N: c[s*d + j] = sum_i U_ij x_{sK+i} - o_j, and
 * the bound on the f32 result: sgemm starts from -o_j and adds K products, so
 * |err| <= gamma(K + 1) (sum_i |U_ij x_i| + |o_j|).
 */
static void encode_reference(const zc_gradiveq_view_t *v, const float *x, size_t n, double *ref,
                             double *tol)
{
    const uint32_t k = v->slice, d = v->dim;
    for (size_t s = 0; s < n / k; s++) {
        for (uint32_t j = 0; j < d; j++) {
            double acc = -(double)v->offset[j], mag = fabs(v->offset[j]);
            for (uint32_t i = 0; i < k; i++) {
                double t = (double)v->basis[i * d + j] * x[s * k + i];
                acc += t;
                mag += fabs(t);
            }
            ref[s * d + j] = acc;
            tol[s * d + j] = gamma_n(k + 1) * mag;
        }
    }
}

/*
 * What decoding @p pl into zeros must give, from the payload's own f32
 * coefficients c: out_k = sum_j U_kj c_j + mu_k m / N. The share m / N is
 * rounded to f32 once (u), then sgemm adds the d + 1 products (the last one
 * mu_k times the share) to zero (gamma(d + 1)):
 * |err| <= gamma(d + 2) (sum_j |U_kj c_j| + |mu_k| m / N). The tail is exact.
 */
static void decode_reference(const zc_gradiveq_view_t *v, const payload_t *pl, size_t n,
                             double *ref, double *tol)
{
    const uint32_t k = v->slice, d = v->dim;
    const double m = get_u32(pl->buf + F_CONTRIB), ranks = get_u32(pl->buf + F_RANKS);
    const size_t slices = n / k;
    cr_assert_eq(get_u32(pl->buf + F_DIM), d);
    for (size_t s = 0; s < slices; s++) {
        for (uint32_t i = 0; i < k; i++) {
            double mean = (double)v->mean[i] * m / ranks;
            double acc = mean, mag = fabs(mean);
            for (uint32_t j = 0; j < d; j++) {
                double t = (double)v->basis[i * d + j] * body_f32(pl, s * d + j);
                acc += t;
                mag += fabs(t);
            }
            ref[s * k + i] = acc;
            tol[s * k + i] = gamma_n(d + 2) * mag;
        }
    }
    for (size_t i = slices * k; i < n; i++) {
        ref[i] = body_f32(pl, slices * d + (i - slices * k));
        tol[i] = 0;
    }
}

static void assert_close(const float *got, const double *ref, const double *tol, size_t n,
                         const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_assert_leq(fabs(got[i] - ref[i]), tol[i], "%s: value %zu is %.9g, want %.9g +- %.3g",
                      what, i, got[i], ref[i], tol[i]);
}

/* ------------------------------------------------------------------ params */

static void expect_rejected(const zc_codec_params_t *p, const char *what)
{
    zc_codec_state_t *st = NULL;
    cr_assert_eq(zc_codec_params_check(p), ZC_ERR_INVALID_CONFIG, "%s accepted", what);
    cr_assert_eq(zc_codec_bound(p, 64), 0, "%s: bound", what);
    cr_assert_eq(zc_codec_state_create(p, 64, &st), ZC_ERR_INVALID_CONFIG, "%s: state", what);
    cr_assert_null(st);
}

Test(gradiveq_params, ranges)
{
    zc_codec_params_t p = gvq_params(64, 0, 0.99, 1, 1024, 0);
    cr_assert_eq(zc_codec_params_check(&p), ZC_OK);

    p.gradiveq.slice = 1;
    expect_rejected(&p, "slice 1");
    p.gradiveq.slice = 4097;
    expect_rejected(&p, "slice 4097");
    p = gvq_params(16, 17, 0.99, 1, 1024, 0);
    expect_rejected(&p, "dim 17 > slice 16");
    p = gvq_params(16, 0, 0, 1, 1024, 0);
    expect_rejected(&p, "energy 0");
    p.gradiveq.energy = 1.0000001;
    expect_rejected(&p, "energy > 1");
    p.gradiveq.energy = NAN;
    expect_rejected(&p, "energy NaN");
    p.gradiveq.energy = -0.5;
    expect_rejected(&p, "energy < 0");
    p = gvq_params(16, 0, 0.99, 0, 1024, 0);
    expect_rejected(&p, "ranks 0");
    p = gvq_params(16, 0, 0.99, 1, 0, 0);
    expect_rejected(&p, "samples 0");
    p.gradiveq.samples = (UINT32_C(1) << 20) + 1;
    expect_rejected(&p, "samples 2^20 + 1");
    p = gvq_params(16, 0, 0.99, 1, 1024, 0);
    p.gradiveq.error_feedback = 2;
    expect_rejected(&p, "error_feedback 2");

    static const struct {
        uint32_t k, dim;
        double energy;
        uint32_t ranks, samples, refresh;
    } ok[] = {
        {2, 0, 1.0, 1, 1, 0},
        {2, 2, 1e-9, 1, 1, 1},
        {4096, 4096, 0.5, 7, 1u << 20, 1000000},
        {4096, 1, 0.99, UINT32_MAX, 1, UINT32_MAX},
    };
    for (size_t i = 0; i < ZC_ARRAY_SIZE(ok); i++) {
        p = gvq_params(ok[i].k, ok[i].dim, ok[i].energy, ok[i].ranks, ok[i].samples, ok[i].refresh);
        cr_assert_eq(zc_codec_params_check(&p), ZC_OK, "accepted set %zu", i);
    }
}

Test(gradiveq_params, caps_and_state)
{
    zc_codec_params_t p = gvq_params(16, 0, 0.99, 1, 1024, 20);
    unsigned caps = zc_codec_caps(ZC_CODEC_GRADIVEQ);
    cr_assert_eq(caps, ZC_CODEC_CAP_LINEAR, "gradiveq is linear, stateful, biased, lossy");
    cr_assert(zc_codec_needs_state(&p));
    p.gradiveq.error_feedback = 1;
    cr_assert(zc_codec_needs_state(&p));

    /* error feedback allocates the residual only when asked */
    zc_codec_state_t *st = state_new(&p, 40);
    cr_assert_not_null(st->residual);
    zc_codec_state_destroy(st);
    p.gradiveq.error_feedback = 0;
    st = state_new(&p, 40);
    cr_assert_null(st->residual);
    zc_gradiveq_view_t v = view_of(st);
    cr_assert_eq(v.version, 0);
    cr_assert_eq(v.dim, 0);
    cr_assert_eq(v.tag, 0);
    cr_assert_null(v.basis);
    zc_codec_state_destroy(st);
    zc_codec_state_destroy(NULL);
}

/* Every entry point without its state: ZC_ERR_INVALID_ARG, nothing written. */
Test(gradiveq_params, no_state)
{
    const size_t n = 40;
    zc_codec_params_t p = gvq_params(16, 0, 0.99, 2, 1024, 0);
    zc_codec_state_t *st = state_new(&p, n);
    float x[40], out[40] = {0};
    fill_gauss(x, n, 1, 1.0);
    payload_t a = enc(&p, st, ZC_DTYPE_F32, x, n);
    uint8_t dst[HDR + BODY_HDR + 160];
    size_t len = 777;

    cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, x, n, dst, sizeof(dst), &len),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_decode_add(NULL, a.buf, a.len, out, n), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, a.buf, a.len, dst, sizeof(dst), &len),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(len, 777);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(out[i], 0);

    /* a state made for another codec or count is a mismatch */
    zc_codec_params_t q;
    cr_assert_eq(zc_codec_params_default(ZC_CODEC_QSGD, &q), ZC_OK);
    q.qsgd.error_feedback = 1;
    zc_codec_state_t *other = state_new(&q, n);
    cr_assert_eq(zc_codec_decode_add(other, a.buf, a.len, out, n), ZC_ERR_MISMATCH);
    zc_codec_state_t *longer = state_new(&p, n + 1);
    cr_assert_eq(zc_codec_encode(&p, longer, NULL, ZC_DTYPE_F32, x, n, dst, sizeof(dst), &len),
                 ZC_ERR_MISMATCH);
    cr_assert_eq(zc_codec_decode_add(longer, a.buf, a.len, out, n), ZC_ERR_MISMATCH);
    cr_assert_eq(zc_codec_state_update(longer, x, n), ZC_ERR_MISMATCH);
    cr_assert_eq(zc_codec_state_update(NULL, x, n), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_state_update(st, NULL, n), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_gradiveq_view(other, &(zc_gradiveq_view_t){0}), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_gradiveq_view(NULL, &(zc_gradiveq_view_t){0}), ZC_ERR_INVALID_ARG);

    zc_codec_state_destroy(longer);
    zc_codec_state_destroy(other);
    zc_codec_state_destroy(st);
    payload_free(&a);
}

/* ------------------------------------------------------- version 0: raw */

/* Before any basis the payload is the values as f32, exact, with d = 0, version 0, tag 0. */
Test(gradiveq_raw, version0_exact)
{
    static const size_t sizes[] = {0, 1, 15, 16, 17, 100};
    zc_codec_params_t p = gvq_params(16, 4, 0.99, 3, 64, 0);

    for (size_t t = 0; t < ZC_ARRAY_SIZE(sizes); t++) {
        const size_t n = sizes[t];
        zc_codec_state_t *st = state_new(&p, n);
        float *x = xmalloc(n * sizeof(float));
        fill_gauss(x, n, 10 + t, 3.0);
        payload_t pl = enc(&p, st, ZC_DTYPE_F32, x, n);
        cr_assert_eq(pl.len, payload_len(n, 16, 0), "n %zu: length", n);
        cr_assert_eq(get_u32(pl.buf + F_SLICE), 16);
        cr_assert_eq(get_u32(pl.buf + F_DIM), 0);
        cr_assert_eq(get_u32(pl.buf + F_VERSION), 0);
        cr_assert_eq(get_u32(pl.buf + F_TAG), 0);
        cr_assert_eq(get_u32(pl.buf + F_CONTRIB), 1);
        cr_assert_eq(get_u32(pl.buf + F_RANKS), 3);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(body_f32(&pl, i), x[i], "n %zu: raw value %zu", n, i);
        float *y = dec(st, &pl, n);
        cr_assert(same_bits_f32(x, y, n), "n %zu: decode is not exact", n);

        /* linear too: a + b, contributions 2 */
        payload_t s = red(st, &pl, &pl);
        cr_assert_eq(get_u32(s.buf + F_CONTRIB), 2);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(body_f32(&s, i), x[i] + x[i]);
        free(y);
        free(x);
        payload_free(&pl);
        payload_free(&s);
        zc_codec_state_destroy(st);
    }
}

/* f16 and bf16 input is widened exactly: the payload equals that of the widened f32 values. */
Test(gradiveq_raw, half_input)
{
    const size_t n = 16 * 40 + 7;
    zc_codec_params_t p = gvq_params(16, 3, 0.99, 1, 64, 0);
    zc_codec_state_t *st = state_new(&p, n);
    float *x = xmalloc(n * sizeof(float)), *w = xmalloc(n * sizeof(float));
    uint16_t *h = xmalloc(n * sizeof(uint16_t));

    fill_gauss(x, n, 5, 1.0);
    learn(st, x, n);
    for (int kind = 0; kind < 2; kind++) {
        for (size_t i = 0; i < n; i++) {
            h[i] = kind == 0 ? zc_f32_to_f16(x[i]) : zc_f32_to_bf16(x[i]);
            w[i] = kind == 0 ? zc_f16_to_f32(h[i]) : zc_bf16_to_f32(h[i]);
        }
        zc_dtype_t dt = kind == 0 ? ZC_DTYPE_F16 : ZC_DTYPE_BF16;
        payload_t a = enc(&p, st, dt, h, n), b = enc(&p, st, ZC_DTYPE_F32, w, n);
        cr_assert_eq(a.len, b.len);
        cr_assert_eq(memcmp(a.buf, b.buf, a.len), 0, "%s payload differs from f32",
                     kind ? "bf16" : "f16");
        payload_free(&a);
        payload_free(&b);
    }
    free(x);
    free(w);
    free(h);
    zc_codec_state_destroy(st);
}

/* ------------------------------------------------------- learning a basis */

/* Orthonormal K x r columns (modified Gram-Schmidt in double), row-major. */
static void orthonormal(double *b, uint32_t k, uint32_t r, uint64_t seed)
{
    test_rng_t rng = {seed};
    for (size_t i = 0; i < (size_t)k * r; i++)
        b[i] = test_rng_gauss(&rng);
    for (uint32_t j = 0; j < r; j++) {
        for (uint32_t q = 0; q < j; q++) {
            double dot = 0;
            for (uint32_t i = 0; i < k; i++)
                dot += b[i * r + j] * b[i * r + q];
            for (uint32_t i = 0; i < k; i++)
                b[i * r + j] -= dot * b[i * r + q];
        }
        double norm = 0;
        for (uint32_t i = 0; i < k; i++)
            norm += b[i * r + j] * b[i * r + j];
        for (uint32_t i = 0; i < k; i++)
            b[i * r + j] /= sqrt(norm);
    }
}

/* Slices mu0 + B a (a_j ~ N(0, sigma_j^2)) in double into z, rounded to f32 into x. */
static void affine_slices(const double *b, const double *mu0, const double *sigma, uint32_t k,
                          uint32_t r, size_t slices, uint64_t seed, double *z, float *x)
{
    test_rng_t rng = {seed};
    for (size_t s = 0; s < slices; s++) {
        double a[16];
        for (uint32_t j = 0; j < r; j++)
            a[j] = sigma[j] * test_rng_gauss(&rng);
        for (uint32_t i = 0; i < k; i++) {
            double v = mu0[i];
            for (uint32_t j = 0; j < r; j++)
                v += b[i * r + j] * a[j];
            z[s * k + i] = v;
            x[s * k + i] = (float)v;
        }
    }
}

static double norm2(const double *v, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += v[i] * v[i];
    return sqrt(s);
}

/*
 * The stored basis: orthonormal columns up to rounding (U_f = U + D with
 * |D_ij| <= u |U_ij|, so |(U_f^T U_f - U^T U)_ab| <= 2u + u^2 by Cauchy-Schwarz,
 * and LAPACK's eigenvectors are orthonormal to 64 K eps64), each column's
 * largest entry positive (the canonical sign every rank must agree on).
 */
static void assert_basis_shape(const zc_gradiveq_view_t *v)
{
    const uint32_t k = v->slice, d = v->dim;
    const double tol = 2 * U_F32 + U_F32 * U_F32 + 64.0 * k * EPS_F64;
    for (uint32_t a = 0; a < d; a++) {
        uint32_t top = 0;
        for (uint32_t i = 1; i < k; i++)
            if (fabs(v->basis[i * d + a]) > fabs(v->basis[top * d + a]))
                top = i;
        cr_assert_gt(v->basis[top * d + a], 0, "column %u: largest entry negative", a);
        for (uint32_t b = 0; b < d; b++) {
            double dot = 0;
            for (uint32_t i = 0; i < k; i++)
                dot += (double)v->basis[i * d + a] * v->basis[i * d + b];
            cr_assert_leq(fabs(dot - (a == b)), tol, "U^T U at (%u, %u) is %.12g", a, b, dot);
        }
    }
}

/*
 * Slices drawn from an r-dimensional affine subspace mu0 + span(B): after one
 * update, d from energy is exactly r and every slice (learned from, or new,
 * from the same subspace) comes back to rounding level.
 *
 * Bound. The f32 samples are x = z + delta, |delta_i| <= u |z_i|. Their
 * covariance is C_z + E with C_z of rank r on span(B); the test computes E =
 * C_x - C_z in double and bounds ||E||_2 by ||E||_F. By Davis-Kahan the
 * computed basis is at angle sin(theta) <= ||E|| / (lambda_r - ||E||) from
 * span(B) (lambda_{r+1}(C_z) = 0); LAPACK's backward error adds
 * 64 K eps64 tr(C) / lambda_r, and rounding U to f32 moves its projector by at
 * most 3 u sqrt(r). A slice decodes to P_f (x - mu_f) + mu_f, so its error is
 * at most
 *   sin(theta) ||y_z|| + ||delta_x|| + ||mu_f - mean(z)||
 * (y_z = z - mean(z), ||mu_f - mean(z)|| <= max ||delta|| + u ||mu_f||) plus
 * the encode and decode rounding: sum_j |U_kj| encode_tol_j + decode_tol_k.
 */
Test(gradiveq_learn, low_rank_exact)
{
    const uint32_t k = 32, r = 4;
    const size_t slices = 400, n = slices * k + 5;
    const double sigma[4] = {4, 3, 2, 1};
    double *b = xmalloc(k * r * sizeof(double)), mu0[32];
    double *z = xmalloc(n * sizeof(double)), *z2 = xmalloc(n * sizeof(double));
    float *x = xmalloc(n * sizeof(float)), *x2 = xmalloc(n * sizeof(float));

    orthonormal(b, k, r, 77);
    test_rng_t rng = {78};
    for (uint32_t i = 0; i < k; i++)
        mu0[i] = 2 * test_rng_gauss(&rng);
    affine_slices(b, mu0, sigma, k, r, slices, 79, z, x);
    affine_slices(b, mu0, sigma, k, r, slices, 80, z2, x2);
    for (size_t i = slices * k; i < n; i++)
        x[i] = x2[i] = (float)(z[i] = z2[i] = (double)i);

    zc_codec_params_t p = gvq_params(k, 0, 0.9999, 1, 1024, 0);
    zc_codec_state_t *st = state_new(&p, n);
    learn(st, x, n);
    zc_gradiveq_view_t v = view_of(st);
    cr_assert_eq(v.version, 1);
    cr_assert_eq(v.samples_used, slices, "1024 samples asked, all %zu slices used", slices);
    cr_assert_eq(v.dim, r, "energy 0.9999 of rank-%u data kept %u directions", r, v.dim);
    assert_basis_shape(&v);

    /* E = C_x - C_z, from the actual rounding errors */
    double zmean[32] = {0}, xmean[32] = {0}, dmax = 0, trace = 0;
    double *e_mat = xmalloc(k * k * sizeof(double));
    for (size_t s = 0; s < slices; s++)
        for (uint32_t i = 0; i < k; i++) {
            zmean[i] += z[s * k + i] / slices;
            xmean[i] += (double)x[s * k + i] / slices;
        }
    memset(e_mat, 0, k * k * sizeof(double));
    for (size_t s = 0; s < slices; s++) {
        double yz[32], yx[32], dl[32];
        for (uint32_t i = 0; i < k; i++) {
            yz[i] = z[s * k + i] - zmean[i];
            yx[i] = x[s * k + i] - xmean[i];
            dl[i] = x[s * k + i] - z[s * k + i];
            trace += yx[i] * yx[i] / slices;
        }
        for (uint32_t i = 0; i < k; i++)
            for (uint32_t j = 0; j < k; j++)
                e_mat[i * k + j] += (yx[i] * yx[j] - yz[i] * yz[j]) / slices;
        dmax = fmax(dmax, norm2(dl, k));
    }
    const double e = norm2(e_mat, (size_t)k * k) * (1 + 1e-9);
    free(e_mat);
    const double lambda_r = v.eigenvalues[r - 1];
    cr_assert_gt(lambda_r, 10 * e, "gap too small for the bound: lambda_r %g, ||E|| %g", lambda_r,
                 e);
    cr_assert_leq(v.eigenvalues[r], e + 64.0 * k * EPS_F64 * trace,
                  "lambda_%u = %g above ||E|| = %g (Weyl)", r + 1, v.eigenvalues[r], e);
    const double sin_theta =
        (e + 64.0 * k * EPS_F64 * trace) / (lambda_r - e) + 3 * U_F32 * sqrt(r);
    double mu_err[32], mu_norm = 0;
    for (uint32_t i = 0; i < k; i++) {
        mu_err[i] = v.mean[i] - zmean[i];
        mu_norm += (double)v.mean[i] * v.mean[i];
    }
    cr_assert_leq(norm2(mu_err, k), dmax + U_F32 * sqrt(mu_norm) * 1.01);

    double worst = 0; /* largest bound relative to its slice */
    for (int pass = 0; pass < 2; pass++) {
        const float *xs = pass ? x2 : x;
        const double *zs = pass ? z2 : z;
        payload_t pl = enc(&p, st, ZC_DTYPE_F32, xs, n);
        cr_assert_eq(pl.len, payload_len(n, k, r));
        float *y = dec(st, &pl, n);
        double *eref = xmalloc(slices * r * sizeof(double)), *etol = xmalloc(slices * r * 8);
        encode_reference(&v, xs, n, eref, etol);
        for (size_t s = 0; s < slices; s++) {
            double yz[32], dx[32], err[32], round = 0;
            for (uint32_t i = 0; i < k; i++) {
                yz[i] = zs[s * k + i] - zmean[i];
                dx[i] = xs[s * k + i] - zs[s * k + i];
                err[i] = y[s * k + i] - (double)xs[s * k + i];
                double ri = 0, mag = fabs(v.mean[i]);
                for (uint32_t j = 0; j < r; j++) {
                    ri += fabs(v.basis[i * r + j]) * etol[s * r + j];
                    mag += fabs(v.basis[i * r + j] * body_f32(&pl, s * r + j));
                }
                ri += gamma_n(r + 2) * mag;
                round += ri * ri;
            }
            double tol = sin_theta * norm2(yz, k) + norm2(dx, k) + dmax +
                         U_F32 * sqrt(mu_norm) * 1.01 + sqrt(round);
            cr_assert_leq(norm2(err, k), tol, "pass %d slice %zu: error %g > bound %g", pass, s,
                          norm2(err, k), tol);
            double xn = 0;
            for (uint32_t i = 0; i < k; i++)
                xn += (double)xs[s * k + i] * xs[s * k + i];
            worst = fmax(worst, tol / sqrt(xn));
        }
        for (size_t i = slices * k; i < n; i++)
            cr_assert_eq(y[i], xs[i], "tail value %zu is not exact", i);
        free(eref);
        free(etol);
        free(y);
        payload_free(&pl);
    }
    /* the bound is ~u Y^2 / lambda_r relative (Y^2 / lambda_r ~ 150 here): far below the O(1)
     * relative error of a wrong basis or mean */
    cr_assert_lt(worst, 1e-4, "bound %g of the slice norm is not at rounding level", worst);
    zc_codec_state_destroy(st);
    free(b);
    free(z);
    free(z2);
    free(x);
    free(x2);
}

/* Encode and decode, each against its exact-arithmetic reference on the stored basis. */
Test(gradiveq_learn, encode_decode_reference)
{
    const uint32_t k = 24, d = 5, ranks = 3;
    const size_t n = k * 300 + 11;
    float *s = xmalloc(n * sizeof(float)), *x = xmalloc(n * sizeof(float));
    fill_gauss(s, n, 21, 2.0);
    for (size_t i = 0; i < n; i++)
        s[i] += (float)(i % k); /* a mean that is not zero */
    fill_gauss(x, n, 22, 1.5);

    zc_codec_params_t p = gvq_params(k, d, 0.99, ranks, 100, 0);
    zc_codec_state_t *st = state_new(&p, n);
    learn(st, s, n);
    zc_gradiveq_view_t v = view_of(st);
    cr_assert_eq(v.dim, d);
    cr_assert_eq(v.samples_used, 100);

    payload_t pl = enc(&p, st, ZC_DTYPE_F32, x, n);
    cr_assert_eq(pl.len, payload_len(n, k, d));
    cr_assert_eq(get_u32(pl.buf + F_SLICE), k);
    cr_assert_eq(get_u32(pl.buf + F_DIM), d);
    cr_assert_eq(get_u32(pl.buf + F_VERSION), 1);
    cr_assert_eq(get_u32(pl.buf + F_TAG), v.tag);
    cr_assert_eq(get_u32(pl.buf + F_CONTRIB), 1);
    cr_assert_eq(get_u32(pl.buf + F_RANKS), ranks);

    double *ref = xmalloc(n * sizeof(double)), *tol = xmalloc(n * sizeof(double));
    float *coef = xmalloc(n * sizeof(float));
    encode_reference(&v, x, n, ref, tol);
    for (size_t i = 0; i < n / k * d; i++)
        coef[i] = body_f32(&pl, i);
    assert_close(coef, ref, tol, n / k * d, "encode");
    for (size_t i = 0; i < n % k; i++)
        cr_assert_eq(body_f32(&pl, n / k * d + i), x[n / k * k + i], "raw tail %zu", i);

    float *y = dec(st, &pl, n);
    decode_reference(&v, &pl, n, ref, tol);
    assert_close(y, ref, tol, n, "decode");

    /* decoding adds: a second decode into the result doubles it, to one more rounding */
    cr_assert_eq(zc_codec_decode_add(st, pl.buf, pl.len, y, n), ZC_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_leq(fabs(y[i] - 2 * ref[i]), 2 * tol[i] + U_F32 * fabs(2 * ref[i]) * 1.01);

    free(ref);
    free(tol);
    free(coef);
    free(y);
    free(s);
    free(x);
    payload_free(&pl);
    zc_codec_state_destroy(st);
}

/*
 * Linearity with N = 2: reduce adds coefficients and tails (bit-exactly, as
 * f32 additions) and contributions; decode(reduce(enc a, enc b)) equals
 * decode(enc a) + decode(enc b) up to the decode bounds of the three plus the
 * rounding of c_a + c_b (u sum_j |U_kj (c_a + c_b)_j|). It is NOT
 * decode(enc(a + b)): that one carries one mean share, m = 1, and the two
 * differ by (I - P) mu / N, which the test checks too (see docs/codecs.md).
 */
Test(gradiveq_linear, reduce_is_sum)
{
    const uint32_t k = 32, d = 6, ranks = 2;
    const size_t n = k * 200 + 9;
    float *s = xmalloc(n * sizeof(float)), *a = xmalloc(n * sizeof(float));
    float *b = xmalloc(n * sizeof(float)), *ab = xmalloc(n * sizeof(float));
    fill_gauss(s, n, 31, 1.0);
    for (size_t i = 0; i < n; i++)
        s[i] += 3.0f * (float)((i * 7) % k) / k - 1.0f;
    fill_gauss(a, n, 32, 1.0);
    fill_gauss(b, n, 33, 2.0);
    for (size_t i = 0; i < n; i++)
        ab[i] = a[i] + b[i];

    zc_codec_params_t p = gvq_params(k, d, 0.99, ranks, 1024, 0);
    zc_codec_state_t *st = state_new(&p, n);
    learn(st, s, n);
    zc_gradiveq_view_t v = view_of(st);

    payload_t pa = enc(&p, st, ZC_DTYPE_F32, a, n), pb = enc(&p, st, ZC_DTYPE_F32, b, n);
    payload_t pab = enc(&p, st, ZC_DTYPE_F32, ab, n);
    payload_t sum = red(st, &pa, &pb);
    cr_assert_eq(get_u32(sum.buf + F_CONTRIB), 2);
    const size_t vals = n / k * d + n % k;
    for (size_t i = 0; i < vals; i++)
        cr_assert(body_f32(&sum, i) == body_f32(&pa, i) + body_f32(&pb, i), "sum of value %zu", i);

    /* reduce into a or b itself gives the same bytes */
    uint8_t *into_a = exact_copy(pa.buf, pa.len), *into_b = exact_copy(pb.buf, pb.len);
    size_t len = 0;
    cr_assert_eq(zc_codec_reduce(st, into_a, pa.len, pb.buf, pb.len, into_a, pa.len, &len), ZC_OK);
    cr_assert_eq(memcmp(into_a, sum.buf, sum.len), 0, "dst = a");
    cr_assert_eq(zc_codec_reduce(st, pa.buf, pa.len, into_b, pb.len, into_b, pb.len, &len), ZC_OK);
    cr_assert_eq(memcmp(into_b, sum.buf, sum.len), 0, "dst = b");
    cr_assert_eq(zc_codec_reduce(st, pa.buf, pa.len, pb.buf, pb.len, into_a, pa.len - 1, &len),
                 ZC_ERR_BUFFER_TOO_SMALL);

    float *ys = dec(st, &sum, n), *ya = dec(st, &pa, n), *yb = dec(st, &pb, n);
    float *yab = dec(st, &pab, n);
    double *rs = xmalloc(n * 8), *ts = xmalloc(n * 8), *ra = xmalloc(n * 8), *ta = xmalloc(n * 8);
    double *rb = xmalloc(n * 8), *tb = xmalloc(n * 8), *rab = xmalloc(n * 8);
    double *tab = xmalloc(n * 8);
    decode_reference(&v, &sum, n, rs, ts);
    decode_reference(&v, &pa, n, ra, ta);
    decode_reference(&v, &pb, n, rb, tb);
    decode_reference(&v, &pab, n, rab, tab);
    assert_close(ys, rs, ts, n, "decode of the sum");

    double worst = 0, shift_min = INFINITY;
    for (size_t sl = 0; sl < n / k; sl++) {
        for (uint32_t i = 0; i < k; i++) {
            const size_t at = sl * k + i;
            double cmag = 0, pmu = 0;
            for (uint32_t j = 0; j < d; j++) {
                cmag += fabs(v.basis[i * d + j] *
                             (body_f32(&pa, sl * d + j) + (double)body_f32(&pb, sl * d + j)));
                pmu += (double)v.basis[i * d + j] * v.offset[j];
            }
            double tol = ts[at] + ta[at] + tb[at] + U_F32 * cmag;
            double diff = ys[at] - ((double)ya[at] + yb[at]);
            cr_assert_leq(fabs(diff), tol, "value %zu: sum decodes %.9g, decodes sum %.9g", at,
                          ys[at], (double)ya[at] + yb[at]);
            worst = fmax(worst, tol);

            /*
             * Against enc(a + b) with m = 1: the exact difference is
             * -U (c_ab - c_a - c_b) + mu / N = (mu / N - U o) + U (o + c_a + c_b - c_ab)
             * where the last term is rounding only: |...| <= sum_j |U_kj| (encode
             * tolerances of a, b and a + b, plus u |a_i + b_i| for ab's rounding).
             */
            double enc_err = 0;
            for (uint32_t j = 0; j < d; j++) {
                double ea = 0, eb = 0, eab = 0;
                for (uint32_t q = 0; q < k; q++) {
                    double uq = fabs(v.basis[q * d + j]);
                    ea += uq * fabs(a[sl * k + q]);
                    eb += uq * fabs(b[sl * k + q]);
                    eab += uq * fabs(ab[sl * k + q]);
                }
                double ow = fabs(v.offset[j]);
                enc_err += fabs(v.basis[i * d + j]) *
                           (gamma_n(k + 1) * (ea + eb + eab + 3 * ow) + U_F32 * eab);
            }
            double shift = v.mean[i] / (double)ranks - pmu;
            double tol2 = ts[at] + tab[at] + enc_err;
            cr_assert_leq(fabs(ys[at] - (double)yab[at] - shift), tol2,
                          "value %zu: m=2 minus m=1 is %.9g, want (I-P)mu/N = %.9g", at,
                          ys[at] - (double)yab[at], shift);
            shift_min = fmin(shift_min, fabs(shift) > 0 ? tol2 / fabs(shift) : INFINITY);
        }
    }
    /* the mean term is exercised: (I - P) mu / N is far above the tolerances somewhere */
    double shift_max = 0;
    for (uint32_t i = 0; i < k; i++) {
        double pmu = 0;
        for (uint32_t j = 0; j < d; j++)
            pmu += (double)v.basis[i * d + j] * v.offset[j];
        shift_max = fmax(shift_max, fabs(v.mean[i] / (double)ranks - pmu));
    }
    cr_assert_gt(shift_max, 1000 * worst, "(I-P)mu/N = %g is lost in the tolerance %g", shift_max,
                 worst);
    for (size_t i = n / k * k; i < n; i++)
        cr_assert_eq(ys[i], ya[i] + yb[i], "tail %zu", i);

    /* contributions past N are refused, by reduce and by decode */
    payload_t sum3 = {xmalloc(sum.len), sum.len};
    cr_assert_eq(zc_codec_reduce(st, sum.buf, sum.len, pa.buf, pa.len, sum3.buf, sum3.len, &len),
                 ZC_ERR_MISMATCH);

    free(rs), free(ts), free(ra), free(ta), free(rb), free(tb), free(rab), free(tab);
    free(ys), free(ya), free(yb), free(yab);
    free(into_a), free(into_b);
    payload_free(&pa), payload_free(&pb), payload_free(&pab), payload_free(&sum);
    payload_free(&sum3);
    free(s), free(a), free(b), free(ab);
    zc_codec_state_destroy(st);
}

/* ------------------------------------------------ a real gradient: FMNIST */

#define MLP_BATCH 256
#define MLP_HIDDEN 64

/*
 * The gradient of a 784-64-10 ReLU MLP's first-layer weights (He-initialised,
 * fixed seed) on the first 256 test images, softmax cross-entropy, stored
 * pixel-major: the 64 hidden-unit gradients of one pixel are adjacent (the
 * paper's layout, §3: the F filters' collocated gradients side by side).
 */
static float *mlp_first_layer_gradient(size_t *n_p)
{
    fmnist_set_t set;
    const size_t b = MLP_BATCH, dd = FMNIST_PIXELS, h = MLP_HIDDEN, c = FMNIST_CLASSES;
    cr_assert_eq(fmnist_load(FMNIST_DEFAULT_DIR, "t10k", &set), 0,
                 "Fashion-MNIST missing: apt-get install dataset-fashion-mnist "
                 "(scripts/install-deps.sh)");
    cr_assert_geq(set.count, b);

    float *w1 = xmalloc(dd * h * sizeof(float)), *w2 = xmalloc(h * c * sizeof(float));
    fill_gauss(w1, dd * h, 101, sqrt(2.0 / dd));
    fill_gauss(w2, h * c, 102, sqrt(2.0 / h));
    double *act = xmalloc(b * h * sizeof(double)), *dact = xmalloc(b * h * sizeof(double));
    float *g = zeros_f32(dd * h);

    for (size_t s = 0; s < b; s++) {
        const float *x = set.images + s * dd;
        double logit[FMNIST_CLASSES], pmax = -INFINITY, z = 0;
        for (size_t j = 0; j < h; j++) {
            double acc = 0;
            for (size_t q = 0; q < dd; q++)
                acc += (double)x[q] * w1[q * h + j];
            act[s * h + j] = acc > 0 ? acc : 0;
        }
        for (size_t o = 0; o < c; o++) {
            logit[o] = 0;
            for (size_t j = 0; j < h; j++)
                logit[o] += act[s * h + j] * w2[j * c + o];
            pmax = fmax(pmax, logit[o]);
        }
        for (size_t o = 0; o < c; o++)
            z += exp(logit[o] - pmax);
        for (size_t j = 0; j < h; j++) {
            double back = 0;
            for (size_t o = 0; o < c; o++) {
                double dl = (exp(logit[o] - pmax) / z - (o == set.labels[s])) / b;
                back += dl * w2[j * c + o];
            }
            dact[s * h + j] = act[s * h + j] > 0 ? back : 0;
        }
    }
    for (size_t q = 0; q < dd; q++) {
        for (size_t j = 0; j < h; j++) {
            double acc = 0;
            for (size_t s = 0; s < b; s++)
                acc += (double)set.images[s * dd + q] * dact[s * h + j];
            g[q * h + j] = (float)acc;
        }
    }
    free(w1), free(w2), free(act), free(dact);
    fmnist_free(&set);
    *n_p = dd * h;
    return g;
}

/*
 * The documented sampler, written again here: r = philox((u, 0, 0, 0),
 * "GradiVeQ") as a 64-bit word mod M, sample j is slice floor((j M + r) / S).
 */
static uint64_t sample_slice(uint64_t update, uint64_t slices, uint64_t samples, uint64_t j)
{
    const uint32_t key[2] = {0x64617247u, 0x51655669u}; /* "GradiVeQ" little-endian */
    const uint32_t ctr[4] = {(uint32_t)update, (uint32_t)(update >> 32), 0, 0};
    uint32_t out[4];
    zc_philox4x32_10(ctr, key, out);
    uint64_t r = ((uint64_t)out[1] << 32 | out[0]) % slices;
    return (j * slices + r) / samples;
}

/*
 * On the real gradient, with the test's own moments and its own eigenvalues
 * (LAPACK's QR algorithm, dsyev, independent of the codec's MRRR path):
 *  - the codec's eigenvalues match: |dl| <= 64 K eps64 tr(C) (backward stability
 *    of both solvers, ||C||_2 <= tr(C));
 *  - d from energy keeps >= energy of the eigenvalue sum, and d - 1 does not;
 *  - with the f32 basis U_f = U + D, ||D||_F <= u sqrt(d): the retained energy
 *    mean ||U_f^T y||^2 = tr(U_f^T C U_f) is within (2 u sqrt(d) + u^2 d) tr(C)
 *    of the kept eigenvalues, and the residual energy mean ||(I - P_f) y||^2,
 *    ||P_f - P||_2 <= 3 u sqrt(d), within (6 u sqrt(d) + 9 u^2 d) tr(C) of the
 *    dropped ones (plus the LAPACK term above);
 *  - through the codec itself: encoding and decoding every slice, the mean
 *    squared reconstruction error of the sampled slices equals the mean
 *    ||(I - P_f) y||^2 within the mean of 2 rho zeta + zeta^2, where rho =
 *    ||(I - P_f) y|| and zeta bounds the rounding of that slice's round trip
 *    (encode and decode tolerances, the mean's f32 rounding, the offset's).
 */
Test(gradiveq_learn, fmnist_gradient_energy, .timeout = 120)
{
    const uint32_t k = MLP_HIDDEN, samples = 512;
    const double energy = 0.95;
    size_t n;
    float *g = mlp_first_layer_gradient(&n);
    const uint64_t slices = n / k;
    cr_assert_eq(n % k, 0);
    cr_assert_lt(samples, slices, "the sampler must choose");

    zc_codec_params_t p = gvq_params(k, 0, energy, 1, samples, 0);
    zc_codec_state_t *st = state_new(&p, n);
    learn(st, g, n);
    zc_gradiveq_view_t v = view_of(st);
    const uint32_t d = v.dim;
    cr_assert_eq(v.version, 1);
    cr_assert_eq(v.samples_used, samples);
    cr_assert(d >= 1 && d < k, "d = %u", d);
    assert_basis_shape(&v);

    /* the test's own moments of the documented sample */
    double mean[MLP_HIDDEN] = {0}, *cov = xmalloc(k * k * sizeof(double)), w[MLP_HIDDEN];
    uint64_t *idx = xmalloc(samples * sizeof(uint64_t));
    memset(cov, 0, k * k * sizeof(double));
    for (uint64_t j = 0; j < samples; j++) {
        idx[j] = sample_slice(1, slices, samples, j);
        cr_assert(j == 0 || idx[j] > idx[j - 1], "sample indices increase");
        for (uint32_t i = 0; i < k; i++)
            mean[i] += g[idx[j] * k + i];
    }
    for (uint32_t i = 0; i < k; i++) {
        mean[i] /= samples;
        cr_assert_leq(fabs(v.mean[i] - mean[i]), U_F32 * fabs(mean[i]) + 1e-300, "mean %u", i);
    }
    for (uint64_t j = 0; j < samples; j++)
        for (uint32_t a = 0; a < k; a++)
            for (uint32_t b = 0; b < k; b++)
                cov[a * k + b] +=
                    (g[idx[j] * k + a] - mean[a]) * (g[idx[j] * k + b] - mean[b]) / samples;
    double trace = 0;
    for (uint32_t i = 0; i < k; i++)
        trace += cov[i * k + i];
    cr_assert_eq(LAPACKE_dsyev(LAPACK_ROW_MAJOR, 'N', 'U', (lapack_int)k, cov, (lapack_int)k, w),
                 0);
    const double lapack_tol = 64.0 * k * EPS_F64 * trace;
    double kept = 0, all = 0, kept_before = 0;
    for (uint32_t i = 0; i < k; i++) {
        cr_assert_leq(fabs(v.eigenvalues[i] - w[k - 1 - i]), lapack_tol, "eigenvalue %u", i);
        cr_assert(i == 0 || v.eigenvalues[i] <= v.eigenvalues[i - 1], "descending at %u", i);
        double l = fmax(v.eigenvalues[i], 0);
        all += l;
        if (i < d)
            kept += l;
        if (i + 1 < d)
            kept_before += l;
    }
    cr_assert_geq(kept, energy * all, "d = %u keeps %.6f < %.6f", d, kept / all, energy);
    cr_assert_lt(kept_before, energy * all, "d = %u is not the smallest", d);
    double dropped = all - kept;
    cr_assert_gt(dropped, 1e-3 * trace, "nothing dropped: the residual check would be vacuous");

    /* energy of the centred samples along and off the f32 basis */
    double retained = 0, residual = 0, recon = 0, slack = 0;
    payload_t pl = enc(&p, st, ZC_DTYPE_F32, g, n);
    float *y = dec(st, &pl, n);
    double *eref = xmalloc(slices * d * 8), *etol = xmalloc(slices * d * 8);
    double *dref = xmalloc(n * 8), *dtol = xmalloc(n * 8);
    encode_reference(&v, g, n, eref, etol);
    decode_reference(&v, &pl, n, dref, dtol);
    double mu_err = 0, off_err = 0;
    for (uint32_t i = 0; i < k; i++)
        mu_err += (v.mean[i] - mean[i]) * (v.mean[i] - mean[i]);
    mu_err = sqrt(mu_err) * (1 + 3 * U_F32 * sqrt(d));
    for (uint32_t j = 0; j < d; j++)
        off_err = fmax(off_err, U_F32 * fabs(v.offset[j]));
    for (uint64_t j = 0; j < samples; j++) {
        const uint64_t s = idx[j];
        double yc[MLP_HIDDEN], coef[MLP_HIDDEN], rho2 = 0, err2 = 0, zeta2 = 0;
        for (uint32_t i = 0; i < k; i++)
            yc[i] = g[s * k + i] - mean[i];
        for (uint32_t q = 0; q < d; q++) {
            coef[q] = 0;
            for (uint32_t i = 0; i < k; i++)
                coef[q] += (double)v.basis[i * d + q] * yc[i];
            retained += coef[q] * coef[q] / samples;
        }
        for (uint32_t i = 0; i < k; i++) {
            double proj = 0, zeta = dtol[s * k + i];
            for (uint32_t q = 0; q < d; q++) {
                proj += (double)v.basis[i * d + q] * coef[q];
                zeta += fabs(v.basis[i * d + q]) * (etol[s * d + q] + off_err);
            }
            rho2 += (yc[i] - proj) * (yc[i] - proj);
            double e = y[s * k + i] - (double)g[s * k + i];
            err2 += e * e;
            zeta2 += zeta * zeta;
        }
        residual += rho2 / samples;
        recon += err2 / samples;
        double zeta = sqrt(zeta2) + mu_err;
        slack += (2 * sqrt(rho2) * zeta + zeta * zeta) / samples;
    }
    const double tol_kept = (2 * U_F32 * sqrt(d) + U_F32 * U_F32 * d) * trace + lapack_tol;
    const double tol_dropped = (6 * U_F32 * sqrt(d) + 9 * U_F32 * U_F32 * d) * trace + lapack_tol;
    cr_assert_leq(fabs(retained - kept), tol_kept, "retained %.12g, kept eigenvalues %.12g",
                  retained, kept);
    cr_assert_leq(fabs(residual - dropped), tol_dropped,
                  "residual energy %.12g, dropped eigenvalues %.12g", residual, dropped);
    cr_assert_leq(fabs(recon - residual), slack,
                  "round-trip error energy %.12g, projection residual %.12g (+- %.3g)", recon,
                  residual, slack);
    cr_assert_lt(slack, 1e-3 * dropped, "round-trip slack not at rounding level");

    free(eref), free(etol), free(dref), free(dtol), free(y), free(idx), free(cov), free(g);
    payload_free(&pl);
    zc_codec_state_destroy(st);
}

/* ------------------------------------------------ versions and determinism */

/* Two states fed the same sums agree bit for bit; the version follows the refresh schedule. */
Test(gradiveq_state, deterministic_versions)
{
    const uint32_t k = 16;
    const size_t n = k * 150 + 3;
    zc_codec_params_t p = gvq_params(k, 0, 0.9, 2, 50, 2);
    zc_codec_state_t *a = state_new(&p, n), *b = state_new(&p, n);
    float *s = xmalloc(n * sizeof(float)), *x = xmalloc(n * sizeof(float));
    static const uint32_t want[] = {1, 1, 2, 2, 3, 3, 4};
    uint32_t last_tag = 0;

    fill_gauss(x, n, 41, 1.0);
    for (size_t u = 0; u < ZC_ARRAY_SIZE(want); u++) {
        fill_gauss(s, n, 100 + u, 1.0 + u);
        learn(a, s, n);
        learn(b, s, n);
        zc_gradiveq_view_t va = view_of(a), vb = view_of(b);
        cr_assert_eq(va.version, want[u], "after update %zu: version %u", u + 1, va.version);
        cr_assert_eq(vb.version, va.version);
        cr_assert_eq(va.dim, vb.dim);
        cr_assert_eq(va.tag, vb.tag);
        cr_assert_eq(memcmp(va.basis, vb.basis, (size_t)k * va.dim * 4), 0);
        cr_assert_eq(memcmp(va.mean, vb.mean, k * 4), 0);
        if (u > 0 && want[u] != want[u - 1])
            cr_assert_neq(va.tag, last_tag, "a new basis has a new tag");
        last_tag = va.tag;
        payload_t pa = enc(&p, a, ZC_DTYPE_F32, x, n), pb = enc(&p, b, ZC_DTYPE_F32, x, n);
        cr_assert_eq(pa.len, pb.len);
        cr_assert_eq(memcmp(pa.buf, pb.buf, pa.len), 0, "update %zu: payloads differ", u + 1);
        /* refresh 2, warm-up 1: call u + 1 is raw when even */
        cr_assert_eq(get_u32(pa.buf + F_VERSION), (u + 1) % 2 ? want[u] : 0);
        payload_free(&pa);
        payload_free(&pb);
    }
    free(s);
    free(x);
    zc_codec_state_destroy(a);
    zc_codec_state_destroy(b);
}

Test(gradiveq_state, learn_once)
{
    const uint32_t k = 8;
    const size_t n = k * 40;
    zc_codec_params_t p = gvq_params(k, 2, 0.9, 1, 1024, 0);
    zc_codec_state_t *st = state_new(&p, n);
    float *s = xmalloc(n * sizeof(float));
    for (int u = 0; u < 5; u++) {
        fill_gauss(s, n, 200 + u, 1.0);
        learn(st, s, n);
        cr_assert_eq(view_of(st).version, 1, "refresh 0 learns once");
    }
    free(s);
    zc_codec_state_destroy(st);
}

/* Fewer values than a slice: nothing to learn, the payload stays raw at version 0. */
Test(gradiveq_state, shorter_than_slice)
{
    static const size_t sizes[] = {0, 1, 15};
    zc_codec_params_t p = gvq_params(16, 0, 0.9, 1, 1024, 1);
    for (size_t t = 0; t < ZC_ARRAY_SIZE(sizes); t++) {
        const size_t n = sizes[t];
        zc_codec_state_t *st = state_new(&p, n);
        float x[15];
        fill_gauss(x, n, 300 + t, 1.0);
        learn(st, n ? x : NULL, n);
        learn(st, n ? x : NULL, n);
        cr_assert_eq(view_of(st).version, 0);
        payload_t pl = enc(&p, st, ZC_DTYPE_F32, n ? x : NULL, n);
        cr_assert_eq(pl.len, payload_len(n, 16, 0));
        float *y = dec(st, &pl, n);
        cr_assert(same_bits_f32(x, y, n));
        free(y);
        payload_free(&pl);
        zc_codec_state_destroy(st);
    }
}

/* One whole slice and a tail: the smallest learned case. */
Test(gradiveq_state, one_slice_and_tail)
{
    const uint32_t k = 16;
    const size_t n = k + 5;
    zc_codec_params_t p = gvq_params(k, 0, 0.99, 1, 1024, 0);
    zc_codec_state_t *st = state_new(&p, n);
    float x[21];
    fill_gauss(x, n, 310, 1.0);
    learn(st, x, n);
    zc_gradiveq_view_t v = view_of(st);
    cr_assert_eq(v.version, 1);
    cr_assert_eq(v.samples_used, 1);
    cr_assert_eq(v.dim, 1, "a zero covariance keeps one direction");
    /*
     * The one sample is its own mean, exactly (mu_f = x): its coefficient is
     * U^T x - fl(U^T x), so |c| <= encode tolerance + u |o|, and it decodes to
     * x + U c within the decode tolerance.
     */
    for (size_t i = 0; i < k; i++)
        cr_assert_eq(v.mean[i], x[i]);
    payload_t pl = enc(&p, st, ZC_DTYPE_F32, x, n);
    cr_assert_eq(pl.len, payload_len(n, k, 1));
    float *y = dec(st, &pl, n);
    double ref[21], tol[21], eref[1], etol[1];
    decode_reference(&v, &pl, n, ref, tol);
    assert_close(y, ref, tol, n, "decode");
    encode_reference(&v, x, n, eref, etol);
    const double cmax = etol[0] + U_F32 * fabs(v.offset[0]);
    cr_assert_leq(fabs(body_f32(&pl, 0)), cmax);
    for (size_t i = 0; i < k; i++)
        cr_assert_leq(fabs(y[i] - x[i]), fabs(v.basis[i]) * cmax + tol[i], "value %zu", i);
    for (size_t i = k; i < n; i++)
        cr_assert_eq(y[i], x[i]);
    free(y);
    payload_free(&pl);
    zc_codec_state_destroy(st);
}

/* A payload of another version or basis is a mismatch, never decoded. */
Test(gradiveq_state, version_mismatch)
{
    const uint32_t k = 16;
    const size_t n = k * 64 + 3;
    zc_codec_params_t p = gvq_params(k, 4, 0.99, 2, 32, 2);
    zc_codec_state_t *st = state_new(&p, n), *other = state_new(&p, n);
    float *s = xmalloc(n * sizeof(float)), *out = zeros_f32(n);
    fill_gauss(s, n, 400, 1.0);

    payload_t v0 = enc(&p, st, ZC_DTYPE_F32, s, n);
    learn(st, s, n);
    payload_t v1 = enc(&p, st, ZC_DTYPE_F32, s, n);
    cr_assert_eq(zc_codec_decode_add(st, v0.buf, v0.len, out, n), ZC_ERR_MISMATCH, "v0 on v1");
    size_t len;
    uint8_t *dst = xmalloc(v1.len);
    cr_assert_eq(zc_codec_reduce(st, v0.buf, v0.len, v0.buf, v0.len, dst, v1.len, &len),
                 ZC_ERR_MISMATCH);

    /* same version, another basis (other sums): the tag tells them apart */
    fill_gauss(s, n, 401, 1.0);
    learn(other, s, n);
    cr_assert_eq(view_of(other).version, 1);
    cr_assert_neq(view_of(other).tag, view_of(st).tag);
    cr_assert_eq(zc_codec_decode_add(other, v1.buf, v1.len, out, n), ZC_ERR_MISMATCH);
    payload_t w1 = enc(&p, other, ZC_DTYPE_F32, s, n);
    cr_assert_eq(zc_codec_reduce(st, v1.buf, v1.len, w1.buf, w1.len, dst, v1.len, &len),
                 ZC_ERR_MISMATCH);

    learn(st, s, n); /* call 1, compressed: nothing learned */
    cr_assert_eq(view_of(st).version, 1);
    learn(st, s, n); /* call 2, raw (refresh 2): version 2 */
    cr_assert_eq(view_of(st).version, 2);
    cr_assert_eq(zc_codec_decode_add(st, v1.buf, v1.len, out, n), ZC_ERR_MISMATCH, "v1 on v2");
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(out[i], 0, "a refused payload wrote value %zu", i);

    /* another rank count or slice: mismatch too */
    zc_codec_params_t q = gvq_params(k, 4, 0.99, 3, 32, 2);
    zc_codec_state_t *n3 = state_new(&q, n);
    cr_assert_eq(zc_codec_decode_add(n3, v0.buf, v0.len, out, n), ZC_ERR_MISMATCH, "N 2 on 3");
    q = gvq_params(8, 4, 0.99, 2, 32, 2);
    zc_codec_state_t *k8 = state_new(&q, n);
    cr_assert_eq(zc_codec_decode_add(k8, v0.buf, v0.len, out, n), ZC_ERR_MISMATCH, "K 16 on 8");

    free(dst), free(s), free(out);
    payload_free(&v0), payload_free(&v1), payload_free(&w1);
    zc_codec_state_destroy(st), zc_codec_state_destroy(other);
    zc_codec_state_destroy(n3), zc_codec_state_destroy(k8);
}

/* ------------------------------------------------------------- bound */

Test(gradiveq_bound, never_exceeded)
{
    static const size_t sizes[] = {0, 1, 7, 8, 9, 64, 1000, 4099};
    static const uint32_t slices[] = {2, 8, 64};
    for (size_t a = 0; a < ZC_ARRAY_SIZE(slices); a++) {
        for (size_t t = 0; t < ZC_ARRAY_SIZE(sizes); t++) {
            const uint32_t k = slices[a];
            const size_t n = sizes[t];
            zc_codec_params_t p = gvq_params(k, 0, 1.0, 1, 1024, 0);
            zc_codec_state_t *st = state_new(&p, n);
            float *x = xmalloc(n * sizeof(float));
            fill_gauss(x, n, 500 + t, 1.0);
            payload_t p0 = enc(&p, st, ZC_DTYPE_F32, x, n); /* enc asserts len <= bound */
            /* the bound less the out-of-band section none of these finite values needs */
            cr_assert_eq(p0.len, HDR + BODY_HDR + 4 * n,
                         "the raw payload: the bound less a section");
            learn(st, x, n);
            payload_t p1 = enc(&p, st, ZC_DTYPE_F32, x, n);
            zc_gradiveq_view_t v = view_of(st);
            cr_assert_eq(p1.len, payload_len(n, k, v.dim));
            payload_free(&p0);
            payload_free(&p1);
            free(x);
            zc_codec_state_destroy(st);
        }
    }
    zc_codec_params_t p = gvq_params(16, 0, 1.0, 1, 1024, 0);
    const uint64_t big = UINT64_C(1) << 40;
    cr_assert_eq(zc_codec_bound(&p, big), HDR + BODY_HDR + 4 * big + section_bound(big));
    cr_assert_eq(zc_codec_bound(&p, (UINT64_C(1) << 40) + 1), 0);

    /* a buffer one byte short of the payload is refused, len_p untouched */
    const size_t n = 16 * 5 + 1;
    zc_codec_state_t *st = state_new(&p, n);
    float x[81];
    fill_gauss(x, n, 501, 1.0);
    learn(st, x, n);
    size_t want = payload_len(n, 16, view_of(st).dim), len = 99;
    uint8_t *buf = xmalloc(want);
    cr_assert_eq(zc_codec_encode(&p, st, NULL, ZC_DTYPE_F32, x, n, buf, want - 1, &len),
                 ZC_ERR_BUFFER_TOO_SMALL);
    cr_assert_eq(len, 99);
    cr_assert_eq(zc_codec_encode(&p, st, NULL, ZC_DTYPE_F32, x, n, buf, want, &len), ZC_OK);
    cr_assert_eq(len, want);
    free(buf);
    zc_codec_state_destroy(st);
}

/* Input and payloads at addresses that are not 4-byte aligned give the same bytes and values. */
Test(gradiveq_bound, unaligned_buffers)
{
    const uint32_t k = 64, d = 8;
    const size_t n = k * 3000 + 17; /* several scratch blocks */
    zc_codec_params_t p = gvq_params(k, d, 0.99, 1, 256, 0);
    zc_codec_state_t *st = state_new(&p, n);
    float *x = xmalloc(n * sizeof(float));
    uint8_t *xu = xmalloc(n * sizeof(float) + 1);
    fill_gauss(x, n, 600, 1.0);
    memcpy(xu + 1, x, n * sizeof(float));
    learn(st, x, n);

    payload_t a = enc(&p, st, ZC_DTYPE_F32, x, n), b = enc(&p, st, ZC_DTYPE_F32, xu + 1, n);
    cr_assert_eq(a.len, b.len);
    cr_assert_eq(memcmp(a.buf, b.buf, a.len), 0, "unaligned input");
    uint8_t *pu = xmalloc(a.len + 3);
    size_t len;
    cr_assert_eq(zc_codec_encode(&p, st, NULL, ZC_DTYPE_F32, x, n, pu + 3, a.len, &len), ZC_OK);
    cr_assert_eq(memcmp(a.buf, pu + 3, a.len), 0, "unaligned payload");

    float *ya = dec(st, &a, n), *yu = zeros_f32(n);
    cr_assert_eq(zc_codec_decode_add(st, pu + 3, a.len, yu, n), ZC_OK);
    cr_assert(same_bits_f32(ya, yu, n), "decode of an unaligned payload");
    free(ya), free(yu), free(pu), free(x), free(xu);
    payload_free(&a), payload_free(&b);
    zc_codec_state_destroy(st);
}

/* ---------------------------------------------------------- non-finite */

/*
 * NaN and Inf go out of band: each decodes to itself (NaN, an infinity of its
 * sign) and every other value, in its slice too, decodes as with a 0 in its
 * place (on the zero basis row as well: no Inf * 0); through reduce too.
 */
Test(gradiveq_nonfinite, propagates)
{
    const uint32_t k = 16, d = 4;
    const size_t slices = 50, n = slices * k + 5;
    zc_codec_params_t p = gvq_params(k, d, 0.99, 2, 1024, 0);
    zc_codec_state_t *st = state_new(&p, n);
    float *s = xmalloc(n * sizeof(float)), *x = xmalloc(n * sizeof(float));
    float *x0 = xmalloc(n * sizeof(float));
    fill_gauss(s, n, 700, 1.0);
    for (size_t sl = 0; sl < slices; sl++)
        s[sl * k] = 0; /* coordinate 0 never moves: its basis row is zero */
    learn(st, s, n);
    zc_gradiveq_view_t v = view_of(st);
    for (uint32_t j = 0; j < d; j++)
        cr_assert_leq(fabs(v.basis[j]), 1e-6, "basis row 0 is not ~0: %g", v.basis[j]);

    fill_gauss(x, n, 701, 1.0);
    static const size_t at[] = {3 * k + 2, 5 * k + 7, 7 * k + 1,
                                7 * k + 9, 9 * k + 0, slices * k + 2};
    const float bad[] = {NAN, INFINITY, -INFINITY, INFINITY, INFINITY, -INFINITY};
    memcpy(x0, x, n * sizeof(float));
    for (size_t b = 0; b < ZC_ARRAY_SIZE(at); b++) {
        x[at[b]] = bad[b];
        x0[at[b]] = 0;
    }
    payload_t pl = enc(&p, st, ZC_DTYPE_F32, x, n), pl0 = enc(&p, st, ZC_DTYPE_F32, x0, n);
    float *y = dec(st, &pl, n), *y0 = dec(st, &pl0, n);
    fill_gauss(s, n, 702, 1.0);
    payload_t clean = enc(&p, st, ZC_DTYPE_F32, s, n);
    payload_t sum = red(st, &pl, &clean), sum0 = red(st, &pl0, &clean);
    float *ys = dec(st, &sum, n), *ys0 = dec(st, &sum0, n);
    for (size_t i = 0, b = 0; i < n; i++) {
        if (b < ZC_ARRAY_SIZE(at) && at[b] == i) {
            cr_assert(isnan(bad[b]) ? isnan(y[i]) : y[i] == bad[b], "value %zu: %g", i, y[i]);
            cr_assert(isnan(bad[b]) ? isnan(ys[i]) : ys[i] == bad[b], "reduced %zu: %g", i, ys[i]);
            b++;
            continue;
        }
        cr_assert_eq(y[i], y0[i], "value %zu: %g, %g with 0", i, y[i], y0[i]);
        cr_assert_eq(ys[i], ys0[i], "reduced value %zu: %g, %g with 0", i, ys[i], ys0[i]);
    }
    free(ys);
    free(ys0);
    payload_free(&sum);
    payload_free(&sum0);
    free(y);
    free(y0);
    payload_free(&pl);
    payload_free(&pl0);
    payload_free(&clean);
    free(s);
    free(x);
    free(x0);
    zc_codec_state_destroy(st);
}

/* Non-finite slices of the sum are left out of the sample; an all-NaN sum learns nothing. */
Test(gradiveq_nonfinite, learning_skips)
{
    const uint32_t k = 8;
    const size_t slices = 30, n = slices * k;
    zc_codec_params_t p = gvq_params(k, 2, 0.9, 1, 1024, 1);
    zc_codec_state_t *st = state_new(&p, n);
    float *s = xmalloc(n * sizeof(float));

    for (size_t i = 0; i < n; i++)
        s[i] = NAN;
    learn(st, s, n);
    cr_assert_eq(view_of(st).version, 0, "nothing finite to learn from");

    fill_gauss(s, n, 800, 1.0);
    s[4 * k + 1] = NAN;
    s[11 * k + 7] = -INFINITY;
    learn(st, s, n);
    zc_gradiveq_view_t v = view_of(st);
    cr_assert_eq(v.version, 1);
    cr_assert_eq(v.samples_used, slices - 2);
    for (uint32_t i = 0; i < k; i++)
        cr_assert(isfinite(v.mean[i]));
    for (size_t i = 0; i < (size_t)k * v.dim; i++)
        cr_assert(isfinite(v.basis[i]));
    free(s);
    zc_codec_state_destroy(st);
}

/* ---------------------------------------------------------- error feedback */

/*
 * residual_after = residual_before + input - decode(own payload). The generic
 * layer adds the input (one f32 addition, u |sum|), then decode_add with
 * alpha = -1 subtracts the mean share and the projection: against a decode of
 * the same payload into zeros, each value differs by at most
 * 2 gamma(d + 2) (|v_k| + |mu_k| / N + sum_j |U_kj c_j|), v the encoded value.
 */
Test(gradiveq_error_feedback, residual)
{
    const uint32_t k = 16, d = 3, ranks = 2;
    const size_t n = k * 120 + 6;
    zc_codec_params_t p = gvq_params(k, d, 0.99, ranks, 1024, 1000); /* calls 1, 2 compressed */
    p.gradiveq.error_feedback = 1;
    zc_codec_state_t *st = state_new(&p, n);
    float *s = xmalloc(n * sizeof(float)), *x1 = xmalloc(n * sizeof(float));
    float *x2 = xmalloc(n * sizeof(float)), *vin = xmalloc(n * sizeof(float));
    fill_gauss(s, n, 900, 1.0);
    for (size_t i = 0; i < n; i++)
        s[i] += (float)(i % k) * 0.25f;
    fill_gauss(x1, n, 901, 1.0);
    fill_gauss(x2, n, 902, 1.0);

    /* version 0: everything is sent, the residual stays exactly zero */
    payload_t p0 = enc(&p, st, ZC_DTYPE_F32, x1, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(st->residual[i], 0, "version 0 residual %zu", i);
    payload_free(&p0);

    learn(st, s, n);
    zc_gradiveq_view_t v = view_of(st);
    cr_assert_eq(v.dim, d);
    double *sent = xmalloc(n * 8), *slack = xmalloc(n * 8);
    for (size_t i = 0; i < n; i++)
        sent[i] = slack[i] = 0;

    for (int step = 0; step < 2; step++) {
        const float *x = step ? x2 : x1;
        for (size_t i = 0; i < n; i++) {
            vin[i] = st->residual[i] + x[i]; /* the f32 addition the generic layer does */
            slack[i] += U_F32 * fabs((double)st->residual[i] + x[i]);
        }
        payload_t pl = enc(&p, st, ZC_DTYPE_F32, x, n);
        float *own = dec(st, &pl, n);
        for (size_t sl = 0; sl < n / k; sl++) {
            for (uint32_t i = 0; i < k; i++) {
                const size_t at = sl * k + i;
                double mag = fabs(vin[at]) + fabs(v.mean[i]) / ranks;
                for (uint32_t j = 0; j < d; j++)
                    mag += fabs(v.basis[i * d + j] * body_f32(&pl, sl * d + j));
                double tol = 2 * gamma_n(d + 2) * mag;
                cr_assert_leq(fabs(st->residual[at] - ((double)vin[at] - own[at])), tol,
                              "step %d value %zu: residual %.9g, input - decode %.9g", step, at,
                              st->residual[at], (double)vin[at] - own[at]);
                slack[at] += tol;
            }
        }
        for (size_t i = n / k * k; i < n; i++)
            cr_assert_eq(st->residual[i], 0, "tail %zu is sent exactly", i);
        for (size_t i = 0; i < n; i++)
            sent[i] += own[i];
        free(own);
        payload_free(&pl);
    }
    /* it accumulates: what was sent plus what is left is everything that came in */
    double left = 0;
    for (size_t i = 0; i < n; i++) {
        double want = (double)x1[i] + x2[i];
        cr_assert_leq(fabs(sent[i] + st->residual[i] - want), slack[i] * 1.01 + 1e-30,
                      "value %zu: sent + residual %.9g, inputs %.9g", i, sent[i] + st->residual[i],
                      want);
        left += (double)st->residual[i] * st->residual[i];
    }
    cr_assert_gt(left, 0, "a rank-%u projection of noise leaves a residual", d);
    cr_assert_leq(fabs(zc_codec_state_residual_norm(st) - sqrt(left)), 1e-9 * sqrt(left));

    free(sent), free(slack), free(s), free(x1), free(x2), free(vin);
    zc_codec_state_destroy(st);
}

/* ---------------------------------------------------------- hostile payloads */

typedef struct mutation {
    const char *what;
    size_t offset;
    uint32_t value;
    zc_status_t want;
} mutation_t;

static zc_status_t try_decode(zc_codec_state_t *st, const uint8_t *buf, size_t len, size_t n,
                              int *untouched)
{
    uint8_t *copy = exact_copy(buf, len);
    float *out = zeros_f32(n);
    zc_status_t s = zc_codec_decode_add(st, copy, len, out, n);
    *untouched = 1;
    for (size_t i = 0; i < n; i++)
        *untouched &= out[i] == 0;
    free(out);
    free(copy);
    return s;
}

Test(gradiveq_hostile, fields_lengths_garbage)
{
    const uint32_t k = 16, d = 4, ranks = 3;
    const size_t n = k * 10 + 3;
    zc_codec_params_t p = gvq_params(k, d, 0.99, ranks, 1024, 0);
    zc_codec_state_t *st = state_new(&p, n), *st0 = state_new(&p, n);
    float *sum = xmalloc(n * sizeof(float));
    fill_gauss(sum, n, 1000, 1.0);
    payload_t raw = enc(&p, st0, ZC_DTYPE_F32, sum, n);
    learn(st, sum, n);
    payload_t pl = enc(&p, st, ZC_DTYPE_F32, sum, n);
    const uint32_t tag = view_of(st).tag;
    int untouched;

    const mutation_t muts[] = {
        {"slice 0", F_SLICE, 0, ZC_ERR_CORRUPT},
        {"slice 1", F_SLICE, 1, ZC_ERR_CORRUPT},
        {"slice 4097", F_SLICE, 4097, ZC_ERR_CORRUPT},
        {"slice 2^32-1", F_SLICE, UINT32_MAX, ZC_ERR_CORRUPT},
        {"slice 8 (valid, not ours)", F_SLICE, 8, ZC_ERR_MISMATCH},
        {"dim 0 at version 1", F_DIM, 0, ZC_ERR_CORRUPT},
        {"dim above slice", F_DIM, k + 1, ZC_ERR_CORRUPT},
        {"dim 2^32-1", F_DIM, UINT32_MAX, ZC_ERR_CORRUPT},
        {"dim 5 (valid, not ours)", F_DIM, 5, ZC_ERR_MISMATCH},
        {"version 0 with dim", F_VERSION, 0, ZC_ERR_CORRUPT},
        {"version 2", F_VERSION, 2, ZC_ERR_MISMATCH},
        {"version 2^32-1", F_VERSION, UINT32_MAX, ZC_ERR_MISMATCH},
        {"tag 0 at version 1", F_TAG, 0, ZC_ERR_CORRUPT},
        {"tag flipped", F_TAG, tag ^ 1, ZC_ERR_MISMATCH},
        {"contributions 0", F_CONTRIB, 0, ZC_ERR_CORRUPT},
        {"contributions N + 1", F_CONTRIB, ranks + 1, ZC_ERR_MISMATCH},
        {"contributions 2^32-1", F_CONTRIB, UINT32_MAX, ZC_ERR_MISMATCH},
        {"ranks 0", F_RANKS, 0, ZC_ERR_CORRUPT},
        {"ranks 2", F_RANKS, 2, ZC_ERR_MISMATCH},
        {"ranks 2^32-1", F_RANKS, UINT32_MAX, ZC_ERR_MISMATCH},
    };
    for (size_t m = 0; m < ZC_ARRAY_SIZE(muts); m++) {
        uint8_t *bad = exact_copy(pl.buf, pl.len);
        put_u32(bad + muts[m].offset, muts[m].value);
        zc_status_t s = try_decode(st, bad, pl.len, n, &untouched);
        cr_assert_eq(s, muts[m].want, "%s: %s", muts[m].what, zc_status_string(s));
        cr_assert(untouched, "%s: output written", muts[m].what);
        uint8_t *dst = xmalloc(pl.len);
        size_t len = 5;
        cr_assert_eq(zc_codec_reduce(st, bad, pl.len, pl.buf, pl.len, dst, pl.len, &len),
                     muts[m].want, "reduce, %s", muts[m].what);
        cr_assert_eq(zc_codec_reduce(st, pl.buf, pl.len, bad, pl.len, dst, pl.len, &len),
                     muts[m].want, "reduce (b), %s", muts[m].what);
        cr_assert_eq(len, 5);
        free(dst);
        free(bad);
    }
    /* a version-0 payload with a tag or a dim is corrupt */
    uint8_t *bad = exact_copy(raw.buf, raw.len);
    put_u32(bad + F_TAG, 5);
    cr_assert_eq(try_decode(st0, bad, raw.len, n, &untouched), ZC_ERR_CORRUPT);
    put_u32(bad + F_TAG, 0);
    put_u32(bad + F_DIM, 4);
    cr_assert_eq(try_decode(st0, bad, raw.len, n, &untouched), ZC_ERR_CORRUPT);
    free(bad);

    /* every truncation, and one or four bytes too many */
    for (int which = 0; which < 2; which++) {
        const payload_t *q = which ? &raw : &pl;
        zc_codec_state_t *sq = which ? st0 : st;
        for (size_t len = 0; len < q->len; len++) {
            zc_status_t s = try_decode(sq, q->buf, len, n, &untouched);
            cr_assert_eq(s, ZC_ERR_CORRUPT, "%s truncated to %zu: %s", which ? "raw" : "v1", len,
                         zc_status_string(s));
            cr_assert(untouched);
        }
        for (size_t extra = 1; extra <= 4; extra += 3) {
            uint8_t *big = xmalloc(q->len + extra);
            memcpy(big, q->buf, q->len);
            memset(big + q->len, 0, extra);
            cr_assert_eq(try_decode(sq, big, q->len + extra, n, &untouched), ZC_ERR_CORRUPT,
                         "%zu bytes too many", extra);
            cr_assert(untouched);
            free(big);
        }
    }

    /* garbage bodies behind a valid generic header: refused, nothing out of bounds */
    test_rng_t rng = {1001};
    for (int t = 0; t < 2000; t++) {
        size_t len = HDR + (size_t)(test_rng_next(&rng) % (pl.len + 64 - HDR));
        uint8_t *junk = xmalloc(len);
        memcpy(junk, pl.buf, HDR);
        for (size_t i = HDR; i < len; i++)
            junk[i] = (uint8_t)test_rng_next(&rng);
        if (t & 1 && len >= HDR + BODY_HDR) {
            /* a plausible header with one byte changed */
            memcpy(junk + HDR, pl.buf + HDR, BODY_HDR);
            size_t at = HDR + test_rng_next(&rng) % BODY_HDR;
            junk[at] ^= (uint8_t)(1 + test_rng_next(&rng) % 255);
        }
        zc_status_t s = try_decode(st, junk, len, n, &untouched);
        cr_assert(s == ZC_ERR_CORRUPT || s == ZC_ERR_MISMATCH ||
                      (s == ZC_OK && len == pl.len && get_u32(junk + F_CONTRIB) <= ranks &&
                       get_u32(junk + F_CONTRIB) >= 1),
                  "garbage %d (%zu bytes): %s", t, len, zc_status_string(s));
        if (s != ZC_OK)
            cr_assert(untouched, "garbage %d wrote output", t);
        free(junk);
    }

    payload_free(&pl);
    payload_free(&raw);
    free(sum);
    zc_codec_state_destroy(st);
    zc_codec_state_destroy(st0);
}

/* ------------------------------------ learning only from raw sums (issue 18) */

/*
 * One call as a one-rank collective makes it: encode, decode the payload (the
 * sum over the one rank), feed the decoded sum back to the state. Returns
 * ||decode - x|| / ||x||; *@p raw_p: whether the payload carried raw values.
 */
static double call_once(const zc_codec_params_t *p, zc_codec_state_t *st, const float *x, size_t n,
                        int *raw_p)
{
    payload_t pl = enc(p, st, ZC_DTYPE_F32, x, n);
    float *y = dec(st, &pl, n);
    double e = 0, g = 0;
    for (size_t i = 0; i < n; i++) {
        e += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        g += (double)x[i] * x[i];
    }
    *raw_p = pl.len >= HDR + BODY_HDR + 4 * n; /* an out-of-band section may follow the header */
    learn(st, y, n);
    free(y);
    payload_free(&pl);
    return sqrt(e / g);
}

#define DRIFT_K 32u
#define DRIFT_R 8u
#define DRIFT_SLICES 2048u
#define DRIFT_CALLS 200

/*
 * Call @p t of a rank-8 signal whose subspace turns a quarter turn over
 * DRIFT_CALLS calls: slices B_t a + noise, B_t = cos(th) B0 + sin(th) B1 with
 * B0, B1 orthogonal 8-column halves of @p b16 (K x 16), th = t pi / 2 / DRIFT_CALLS,
 * a_j ~ N(0, sigma_j^2) fresh every call, and noise 1e-3 per value.
 */
static void drift_call(const double *b16, int t, float *x)
{
    static const double sigma[DRIFT_R] = {1, 0.8, 0.6, 0.45, 0.3, 0.2, 0.12, 0.06};
    const double th = t * M_PI / 2 / DRIFT_CALLS, c = cos(th), s = sin(th);
    test_rng_t rng = {5000 + (uint64_t)t};
    for (size_t sl = 0; sl < DRIFT_SLICES; sl++) {
        double a[DRIFT_R];
        for (uint32_t j = 0; j < DRIFT_R; j++)
            a[j] = sigma[j] * test_rng_gauss(&rng);
        for (uint32_t i = 0; i < DRIFT_K; i++) {
            double v = 1e-3 * test_rng_gauss(&rng);
            for (uint32_t j = 0; j < DRIFT_R; j++)
                v += (c * b16[i * 16 + j] + s * b16[i * 16 + DRIFT_R + j]) * a[j];
            x[sl * DRIFT_K + i] = (float)v;
        }
    }
}

/*
 * The basis follows a drifting gradient: it is relearned from raw sums, not
 * from decoded ones (which lie in the old basis, so that the dimension could
 * only shrink and the basis never turn). Over the last half of the calls every
 * compressed call keeps 99% energy of a signal whose subspace turned at most
 * (pi / 2) (refresh / DRIFT_CALLS) since the last raw call: error well under
 * 0.25; and the dimension never falls below the first basis's.
 */
Test(gradiveq_schedule, basis_follows_drift, .timeout = 120)
{
    const size_t n = (size_t)DRIFT_K * DRIFT_SLICES;
    zc_codec_params_t p = gvq_params(DRIFT_K, 0, 0.99, 1, DRIFT_SLICES, 10);
    zc_codec_state_t *st = state_new(&p, n);
    double *b16 = xmalloc((size_t)DRIFT_K * 16 * sizeof(double));
    float *x = xmalloc(n * sizeof(float));
    uint32_t first_dim = 0, min_dim = DRIFT_K;
    double worst = 0;
    int compressed = 0;

    orthonormal(b16, DRIFT_K, 16, 77);
    for (int t = 0; t < DRIFT_CALLS; t++) {
        int raw;
        drift_call(b16, t, x);
        double err = call_once(&p, st, x, n, &raw);
        zc_gradiveq_view_t v = view_of(st);
        if (v.version > 0 && first_dim == 0)
            first_dim = v.dim;
        if (v.version > 0)
            min_dim = v.dim < min_dim ? v.dim : min_dim;
        if (!raw && t >= DRIFT_CALLS / 2) {
            worst = fmax(worst, err);
            compressed++;
        }
    }
    cr_log_info("drift: first d %u, smallest d %u, worst error of the last %d compressed calls "
                "%.3f",
                first_dim, min_dim, compressed, worst);
    cr_assert_geq(first_dim, 5, "99%% of this spectrum needs 6 directions (got %u)", first_dim);
    cr_assert_geq(min_dim, first_dim, "the dimension shrank from %u to %u", first_dim, min_dim);
    cr_assert_gt(compressed, DRIFT_CALLS / 4, "most calls compress (%d)", compressed);
    cr_assert_lt(worst, 0.25, "relative error %.3f of a compressed call", worst);
    free(b16);
    free(x);
    zc_codec_state_destroy(st);
}

/*
 * One outlier in the calls the basis is learned from must not ruin every
 * later call: the error of later calls with an outlier in the first one stays
 * within 0.02 of the error without it (the same data otherwise). Outliers: one
 * value of 1e30 (sent out of band, but in the sum the basis learns from), and
 * one slice 1e4 times larger than the others.
 */
Test(gradiveq_schedule, outlier_in_learning_call, .timeout = 120)
{
    const uint32_t k = 32, r = 4;
    const size_t slices = 2048, n = k * slices;
    static const double sigma[4] = {1, 0.5, 0.25, 0.1};
    double *b = xmalloc((size_t)k * r * sizeof(double)), *mu0 = xmalloc(k * sizeof(double));
    double *z = xmalloc(n * sizeof(double));
    float *x = xmalloc(n * sizeof(float));

    orthonormal(b, k, r, 91);
    for (uint32_t i = 0; i < k; i++)
        mu0[i] = 0;
    for (int kind = 0; kind < 2; kind++) {
        zc_codec_params_t p = gvq_params(k, 0, 0.999, 1, (uint32_t)slices, 0);
        zc_codec_state_t *clean = state_new(&p, n), *hit = state_new(&p, n);
        double worst_clean = 0, worst_hit = 0;
        int compressed = 0;
        for (int t = 0; t < 60; t++) {
            int raw_c, raw_h;
            affine_slices(b, mu0, sigma, k, r, slices, 3000 + (uint64_t)t, z, x);
            for (size_t i = 0; i < n; i++)
                x[i] += (float)(1e-3 * sin(0.37 * (double)i + t)); /* a little full-rank noise */
            double ec = call_once(&p, clean, x, n, &raw_c);
            if (t == 0) {
                if (kind == 0)
                    x[100 * k + 5] = 1e30f;
                else
                    for (uint32_t i = 0; i < k; i++)
                        x[100 * k + i] *= 1e4f;
            }
            double eh = call_once(&p, hit, x, n, &raw_h);
            cr_assert_eq(raw_c, raw_h, "call %d: the same schedule with and without the outlier",
                         t);
            if (!raw_c && t >= 30) {
                worst_clean = fmax(worst_clean, ec);
                worst_hit = fmax(worst_hit, eh);
                compressed++;
            }
        }
        cr_log_info("outlier %s: worst error of calls 30..59 %.4g, without it %.4g",
                    kind ? "slice x1e4" : "1e30", worst_hit, worst_clean);
        cr_assert_gt(compressed, 10, "calls 30..59 compress (%d)", compressed);
        cr_assert_lt(worst_clean, 0.05, "a rank-4 signal plus 1e-3 noise at 99.9%% energy: %.4g",
                     worst_clean);
        cr_assert_leq(worst_hit, worst_clean + 0.02,
                      "outlier %s in the learning call: later error %.4g, without it %.4g",
                      kind ? "slice x1e4" : "1e30", worst_hit, worst_clean);
        zc_codec_state_destroy(clean);
        zc_codec_state_destroy(hit);
    }
    free(b), free(mu0), free(z), free(x);
}

/*
 * Error feedback stays bounded: a raw call sends everything (the residual is
 * then exactly 0), so over 200 calls of the drifting signal the residual is
 * flushed every refresh-th call; between flushes it is what the projections
 * left out, r' = (I - P)(g + r - mu), so |r| is at most the sum of
 * |(I - P)(g - mu)| since the last raw call (triangle inequality; P a
 * projection), up to f32 rounding of each update ((d + 2) u per value, 20
 * updates: 1e-4 relative covers it).
 */
Test(gradiveq_schedule, error_feedback_bounded, .timeout = 120)
{
    const size_t n = (size_t)DRIFT_K * DRIFT_SLICES;
    const uint32_t refresh = 20;
    zc_codec_params_t p = gvq_params(DRIFT_K, 0, 0.99, 1, DRIFT_SLICES, refresh);
    p.gradiveq.error_feedback = 1;
    zc_codec_state_t *st = state_new(&p, n);
    double *b16 = xmalloc((size_t)DRIFT_K * 16 * sizeof(double));
    float *x = xmalloc(n * sizeof(float));
    double worst = 0, window = 0;
    int flushes = 0;

    orthonormal(b16, DRIFT_K, 16, 77);
    for (int t = 0; t < DRIFT_CALLS; t++) {
        int raw;
        drift_call(b16, t, x);
        call_once(&p, st, x, n, &raw);
        double g = 0, off = 0;
        zc_gradiveq_view_t v = view_of(st); /* a compressed call learns nothing: its basis */
        for (size_t sl = 0; sl < DRIFT_SLICES && !raw; sl++) {
            double y[DRIFT_K], c[DRIFT_K];
            for (uint32_t i = 0; i < DRIFT_K; i++)
                y[i] = (double)x[sl * DRIFT_K + i] - v.mean[i];
            for (uint32_t j = 0; j < v.dim; j++) {
                c[j] = 0;
                for (uint32_t i = 0; i < DRIFT_K; i++)
                    c[j] += v.basis[i * v.dim + j] * y[i];
            }
            for (uint32_t i = 0; i < DRIFT_K; i++) {
                double o = y[i];
                for (uint32_t j = 0; j < v.dim; j++)
                    o -= v.basis[i * v.dim + j] * c[j];
                off += o * o;
            }
        }
        for (size_t i = 0; i < n; i++)
            g += (double)x[i] * x[i];
        double r = zc_codec_state_residual_norm(st);
        if (raw) {
            cr_assert_eq(r, 0, "call %d was raw: nothing is left (%.3g)", t, r);
            flushes += t > 0;
            window = 0;
        } else {
            window += sqrt(off);
            cr_assert_leq(r, window * (1 + 1e-4), "call %d: |residual| %.6g above %.6g", t, r,
                          window);
        }
        worst = fmax(worst, r / sqrt(g));
    }
    cr_log_info("error feedback, refresh %u: largest |residual| / |g| over %d calls %.3f", refresh,
                DRIFT_CALLS, worst);
    cr_assert_geq(flushes, DRIFT_CALLS / (int)refresh - 1, "raw refreshes flush it (%d)", flushes);
    free(b16);
    free(x);
    zc_codec_state_destroy(st);
}
