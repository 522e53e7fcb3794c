/*
 * qsgd-int (codec/qsgd/qsgd_int.c): QSGD levels of scales shared by every rank,
 * summed as integers. The ranks of an all-reduce are simulated in one process:
 * each "rank" has its own input and Philox rank, the shared scales are the
 * maximum of their zc_codec_local_scales, and the payloads are summed with
 * zc_codec_reduce as the ring does.
 *
 * Statistical tests use fixed seeds; their tolerances come from the variance
 * bound of the rounding (stated next to each test) and the number of samples,
 * never from the values observed.
 */
#include "codec_test.h"

#include "codec/codec.h"
#include "common/bitio.h"
#include "common/cpu.h"

#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define HDR ZC_PAYLOAD_HEADER_BYTES
#define BODY_HDR 12 /* u32 bucket, u16 levels, u8 scale kind, u8 0, u32 payloads summed */
#define BUCKET_HDR 5

static zc_codec_params_t qi_params(uint32_t levels, uint32_t bucket, uint32_t ranks)
{
    zc_codec_params_t p = params_of(ZC_CODEC_QSGD_INT);
    p.qsgd_int.levels = levels;
    p.qsgd_int.bucket = bucket;
    p.qsgd_int.ranks = ranks;
    return p;
}

/* The shared scales of @p nranks inputs of @p n values: the maximum of the local ones. */
static float *shared_scales(const zc_codec_params_t *p, float *const *x, int nranks, size_t n)
{
    size_t ns = zc_codec_shared_scales(p, n);
    float *shared = zeros_f32(ns), *local = zeros_f32(ns);
    for (int r = 0; r < nranks; r++) {
        cr_assert_eq(zc_codec_local_scales(p, NULL, ZC_DTYPE_F32, x[r], n, local), ZC_OK);
        for (size_t b = 0; b < ns; b++)
            shared[b] = fmaxf(shared[b], local[b]);
    }
    free(local);
    return shared;
}

static payload_t encode_shared_ok(const zc_codec_params_t *p, zc_codec_state_t *st, uint64_t seed,
                                  uint32_t rank, const float *x, size_t n, const float *scales)
{
    zc_codec_rng_t rng = test_codec_rng(seed, rank, 0);
    size_t bound = zc_codec_bound(p, n), len = 0;
    uint8_t *tmp = xmalloc(bound);
    zc_status_t status =
        zc_codec_encode_shared(p, st, &rng, ZC_DTYPE_F32, x, n, scales, tmp, bound, &len);
    cr_assert_eq(status, ZC_OK, "encode_shared: %s", zc_status_string(status));
    payload_t out = {exact_copy(tmp, len), len};
    free(tmp);
    return out;
}

/* a + b in a bound-sized buffer, as the ring sums (into b's own buffer there). */
static payload_t reduce_ok(const zc_codec_params_t *p, const payload_t *a, const payload_t *b,
                           size_t n)
{
    size_t cap = zc_codec_bound(p, n), len = 0;
    uint8_t *tmp = xmalloc(cap);
    zc_status_t status = zc_codec_reduce(NULL, a->buf, a->len, b->buf, b->len, tmp, cap, &len);
    cr_assert_eq(status, ZC_OK, "reduce: %s", zc_status_string(status));
    payload_t out = {exact_copy(tmp, len), len};
    free(tmp);
    return out;
}

/* The ring's sum of the ranks' payloads: ((p0 + p1) + p2) + ... */
static payload_t ring_sum(const zc_codec_params_t *p, const payload_t *pl, int nranks, size_t n)
{
    payload_t acc = {exact_copy(pl[0].buf, pl[0].len), pl[0].len};
    for (int r = 1; r < nranks; r++) {
        payload_t next = reduce_ok(p, &acc, &pl[r], n);
        payload_free(&acc);
        acc = next;
    }
    return acc;
}

/* ------------------------------------------------------------ exact integer sums */

/*
 * With a shared scale of s every level is worth exactly 1 (unit = s / s), so a
 * decoded value is its integer level: the decoded sum of the summed payload
 * must equal the sum of the decoded payloads exactly, in any order of
 * reduction, and the summed payloads must be the same bytes whatever the order.
 */
Test(qsgd_int, sums_are_exact_integers_in_any_order)
{
    const size_t n = 3000; /* 5 full buckets of 512 and a tail */
    const int nranks = 5;
    zc_codec_params_t p = qi_params(7, 512, 8);
    float *x[5];
    payload_t pl[5];

    for (int r = 0; r < nranks; r++) {
        x[r] = zeros_f32(n);
        fill_gauss(x[r], n, 100 + (uint64_t)r, 2.0);
        for (size_t i = 0; i < n; i++)
            x[r][i] = fmaxf(-6.9f, fminf(6.9f, x[r][i]));
    }
    x[0][0] = 7.0f; /* every bucket's shared scale is 7: a level is worth 1 */
    for (size_t i = 512; i < n; i += 512)
        x[1][i] = -7.0f;
    float *scales = shared_scales(&p, x, nranks, n);
    for (size_t b = 0; b < zc_codec_shared_scales(&p, n); b++)
        cr_assert_eq(scales[b], 7.0f);

    float *sum_of_decoded = zeros_f32(n);
    for (int r = 0; r < nranks; r++) {
        pl[r] = encode_shared_ok(&p, NULL, 9, (uint32_t)r, x[r], n, scales);
        float *d = decode_ok(&pl[r], n);
        for (size_t i = 0; i < n; i++) {
            cr_assert_eq(d[i], rintf(d[i]), "a level of unit 1 decodes to an integer");
            cr_assert_leq(fabsf(d[i] - x[r][i]), 1.0f, "one level from the value");
            sum_of_decoded[i] += d[i];
        }
        free(d);
    }
    payload_t forward = ring_sum(&p, pl, nranks, n);
    payload_t rev[5];
    for (int r = 0; r < nranks; r++)
        rev[r] = pl[nranks - 1 - r];
    payload_t backward = ring_sum(&p, rev, nranks, n);
    cr_assert_eq(forward.len, backward.len);
    cr_assert_eq(memcmp(forward.buf, backward.buf, forward.len), 0, "sum depends on the order");
    /* pairs first, as a tree would: (p0 + p1) + (p2 + (p3 + p4)) */
    payload_t a = reduce_ok(&p, &pl[0], &pl[1], n), b0 = reduce_ok(&p, &pl[3], &pl[4], n);
    payload_t b = reduce_ok(&p, &pl[2], &b0, n), tree = reduce_ok(&p, &a, &b, n);
    cr_assert_eq(memcmp(forward.buf, tree.buf, forward.len), 0, "tree sum differs");

    float *d = decode_ok(&forward, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(d[i], sum_of_decoded[i], "value %zu: %g, the levels sum to %g", i, d[i],
                     sum_of_decoded[i]);
    /* the sum says how many payloads it holds */
    cr_assert_eq(zc_load_le32(forward.buf + HDR + 8), (uint32_t)nranks);

    free(d);
    payload_free(&a);
    payload_free(&b0);
    payload_free(&b);
    payload_free(&tree);
    payload_free(&forward);
    payload_free(&backward);
    for (int r = 0; r < nranks; r++) {
        payload_free(&pl[r]);
        free(x[r]);
    }
    free(scales);
    free(sum_of_decoded);
}

/* ------------------------------------------------------------ widths and the largest sum */

/*
 * Every value at +scale rounds to level s exactly. Doubling the sum 14 times
 * reaches 2^14 payloads (the most one sum may hold, s = 65535): every width is
 * 1 + bitlen(s m), every payload within the bound sized for 2^14 ranks, the
 * decoded sum s m exactly; one more payload is refused, never wrapped.
 */
Test(qsgd_int, widths_grow_with_the_sum_up_to_the_largest)
{
    const size_t n = 700;
    const uint32_t s = 65535, max_ranks = 1u << 14;
    zc_codec_params_t p = qi_params(s, 256, max_ranks);
    float *x = zeros_f32(n);
    for (size_t i = 0; i < n; i++)
        x[i] = 65535.0f; /* scale 65535: unit 1 */
    float *scales = shared_scales(&p, &x, 1, n);
    payload_t sum = encode_shared_ok(&p, NULL, 1, 0, x, n, scales);
    payload_t one = {exact_copy(sum.buf, sum.len), sum.len};

    for (uint32_t m = 1;; m *= 2) {
        unsigned w = 0;
        for (uint64_t v = (uint64_t)s * m; v; v >>= 1)
            w++;
        w += 1;
        const uint8_t *body = sum.buf + HDR;
        cr_assert_eq(zc_load_le32(body + 8), m);
        size_t pos = BODY_HDR;
        for (size_t first = 0; first < n; first += 256) {
            size_t len = n - first < 256 ? n - first : 256;
            cr_assert_eq(body[pos + 4], w, "m = %u: width %u, expected %u", m, body[pos + 4], w);
            pos += BUCKET_HDR + (len * w + 7) / 8;
        }
        cr_assert_eq(HDR + pos, sum.len);
        cr_assert_leq(sum.len, zc_codec_bound(&p, n));
        float *d = decode_ok(&sum, n);
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(d[i], (float)((double)s * m), "m = %u: %g", m, d[i]);
        free(d);
        if (m == max_ranks)
            break;
        payload_t next = reduce_ok(&p, &sum, &sum, n);
        payload_free(&sum);
        sum = next;
    }
    uint8_t *out = xmalloc(zc_codec_bound(&p, n));
    size_t len = 0;
    cr_assert_eq(
        zc_codec_reduce(NULL, sum.buf, sum.len, one.buf, one.len, out, zc_codec_bound(&p, n), &len),
        ZC_ERR_MISMATCH, "a sum of 2^14 + 1 payloads");
    /* the check refuses a ring larger than a sum may hold */
    p.qsgd_int.ranks = max_ranks + 1;
    cr_assert_eq(zc_codec_params_check(&p), ZC_ERR_INVALID_CONFIG);
    free(out);
    free(x);
    free(scales);
    payload_free(&sum);
    payload_free(&one);
}

/* A sum of values whose signs cancel needs fewer bits than the bound: the width follows it. */
Test(qsgd_int, cancelling_sums_stay_narrow)
{
    const size_t n = 512;
    zc_codec_params_t p = qi_params(7, 512, 2);
    float *x[2] = {zeros_f32(n), zeros_f32(n)};
    for (size_t i = 0; i < n; i++) {
        x[0][i] = i & 1 ? 7.0f : -7.0f;
        x[1][i] = -x[0][i];
    }
    float *scales = shared_scales(&p, x, 2, n);
    payload_t a = encode_shared_ok(&p, NULL, 3, 0, x[0], n, scales);
    payload_t b = encode_shared_ok(&p, NULL, 3, 1, x[1], n, scales);
    payload_t sum = reduce_ok(&p, &a, &b, n);
    cr_assert_eq(sum.buf[HDR + BODY_HDR + 4], 0, "levels all 0: width 0");
    cr_assert_eq(sum.len, (size_t)HDR + BODY_HDR + BUCKET_HDR);
    float *d = decode_ok(&sum, n);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(d[i], 0.0f);
    free(d);
    payload_free(&a);
    payload_free(&b);
    payload_free(&sum);
    free(x[0]);
    free(x[1]);
    free(scales);
}

/* ------------------------------------------------------------ unbiasedness over seeds */

/*
 * Four ranks, 2048 values, 400 seeds. Each rank's level of v errs by
 * (k - r) m / s with k - r in {-frac, 1 - frac}: mean 0, variance <= (m / s)^2 / 4
 * with m the shared scale, so the sum's variance per element is <= 4 (m/s)^2 / 4.
 * The mean over T seeds has standard deviation sigma / sqrt(T); checked: every
 * element within 6 sigma / sqrt(T) (2048 elements: a false alarm has
 * probability below 1e-5) plus the f32 roundings (a few ulps of the sum), and
 * the RMS over elements below 1.2 sigma / sqrt(T), while one seed alone errs
 * by more than 0.3 sigma in RMS (it does quantize).
 */
Test(qsgd_int, unbiased_over_seeds)
{
    const size_t n = 2048;
    const int nranks = 4, seeds = 400;
    zc_codec_params_t p = qi_params(7, 512, (uint32_t)nranks);
    float *x[4];
    double *exact = calloc(n, sizeof(double)), *mean = calloc(n, sizeof(double));
    payload_t pl[4];

    for (int r = 0; r < nranks; r++) {
        x[r] = zeros_f32(n);
        fill_gauss(x[r], n, 500 + (uint64_t)r, 1.0 + r);
        for (size_t i = 0; i < n; i++)
            exact[i] += x[r][i];
    }
    float *scales = shared_scales(&p, x, nranks, n);
    double max_scale = 0;
    for (size_t b = 0; b < n / 512; b++)
        max_scale = fmax(max_scale, scales[b]);
    const double sigma = sqrt(nranks * (max_scale / 7) * (max_scale / 7) / 4);
    double rms1 = 0;

    for (int k = 0; k < seeds; k++) {
        for (int r = 0; r < nranks; r++)
            pl[r] = encode_shared_ok(&p, NULL, 1000 + (uint64_t)k, (uint32_t)r, x[r], n, scales);
        payload_t sum = ring_sum(&p, pl, nranks, n);
        float *d = decode_ok(&sum, n);
        for (size_t i = 0; i < n; i++) {
            mean[i] += d[i];
            if (k == 0)
                rms1 += (d[i] - exact[i]) * (d[i] - exact[i]);
        }
        free(d);
        payload_free(&sum);
        for (int r = 0; r < nranks; r++)
            payload_free(&pl[r]);
    }
    rms1 = sqrt(rms1 / n);
    const double se = sigma / sqrt(seeds);
    double sq = 0;
    for (size_t i = 0; i < n; i++) {
        double e = mean[i] / seeds - exact[i];
        sq += e * e;
        cr_assert_leq(fabs(e), 6 * se + 1e-5 * fabs(exact[i]) + 1e-6,
                      "element %zu: mean %g, exact %g (6 sigma/sqrt(T) = %g)", i, mean[i] / seeds,
                      exact[i], 6 * se);
    }
    cr_assert_leq(sqrt(sq / n), 1.2 * se, "rms of the mean %g, sigma/sqrt(T) %g", sqrt(sq / n), se);
    cr_assert_gt(rms1, 0.3 * sigma, "one seed erred by rms %g only (sigma %g)", rms1, sigma);
    for (int r = 0; r < nranks; r++)
        free(x[r]);
    free(scales);
    free(exact);
    free(mean);
}

/* ------------------------------------------------------------ scales */

/* Local scales: per bucket the largest magnitude (or L2 norm), values out of band left out. */
Test(qsgd_int, local_scales_leave_out_of_band_values_out)
{
    const size_t n = 1100;
    zc_codec_params_t p = qi_params(7, 512, 1);
    float *x = zeros_f32(n);
    fill_gauss(x, n, 7, 1.0);
    x[3] = NAN;
    x[600] = INFINITY;
    x[1050] = -1e30f;  /* past 2^64: out of band */
    x[1051] = 0x1p63f; /* below: a scale */
    float want[3] = {0, 0, 0}, got[3];
    for (size_t i = 0; i < n; i++)
        if (fabsf(x[i]) < 0x1p64f)
            want[i / 512] = fmaxf(want[i / 512], fabsf(x[i]));
    cr_assert_eq(want[2], 0x1p63f);
    cr_assert_eq(zc_codec_local_scales(&p, NULL, ZC_DTYPE_F32, x, n, got), ZC_OK);
    for (int b = 0; b < 3; b++)
        cr_assert_eq(got[b], want[b], "bucket %d: %g, expected %g", b, got[b], want[b]);

    p.qsgd_int.scale = ZC_QSGD_SCALE_L2;
    fill_gauss(x, n, 8, 1.0);
    cr_assert_eq(zc_codec_local_scales(&p, NULL, ZC_DTYPE_F32, x, n, got), ZC_OK);
    for (int b = 0; b < 3; b++) {
        double ss = 0;
        for (size_t i = (size_t)b * 512; i < n && i < (size_t)(b + 1) * 512; i++)
            ss += (double)x[i] * x[i];
        cr_assert_float_eq(got[b], sqrt(ss), 1e-6 * sqrt(ss));
    }
    /* qsgd shares none */
    zc_codec_params_t q = params_of(ZC_CODEC_QSGD);
    cr_assert_eq(zc_codec_shared_scales(&q, n), 0);
    cr_assert_eq(zc_codec_local_scales(&q, NULL, ZC_DTYPE_F32, x, n, got), ZC_ERR_UNSUPPORTED);
    free(x);
}

/* Scales that do not cover a value are no maximum over ranks: refused, never clipped. */
Test(qsgd_int, scales_below_the_values_are_refused)
{
    const size_t n = 512;
    zc_codec_params_t p = qi_params(7, 512, 2);
    float *x = zeros_f32(n);
    fill_gauss(x, n, 9, 1.0);
    float scale;
    cr_assert_eq(zc_codec_local_scales(&p, NULL, ZC_DTYPE_F32, x, n, &scale), ZC_OK);
    scale = nextafterf(scale, 0);
    uint8_t *buf = xmalloc(zc_codec_bound(&p, n));
    size_t len;
    zc_codec_rng_t rng = test_codec_rng(1, 0, 0);
    cr_assert_eq(zc_codec_encode_shared(&p, NULL, &rng, ZC_DTYPE_F32, x, n, &scale, buf,
                                        zc_codec_bound(&p, n), &len),
                 ZC_ERR_INVALID_ARG);
    float bad = -1.0f;
    cr_assert_eq(zc_codec_encode_shared(&p, NULL, &rng, ZC_DTYPE_F32, x, n, &bad, buf,
                                        zc_codec_bound(&p, n), &len),
                 ZC_ERR_INVALID_ARG);
    /* a codec without shared scales */
    zc_codec_params_t q = params_of(ZC_CODEC_QSGD);
    cr_assert_eq(zc_codec_encode_shared(&q, NULL, &rng, ZC_DTYPE_F32, x, n, &scale, buf,
                                        zc_codec_bound(&q, n), &len),
                 ZC_ERR_UNSUPPORTED);
    free(buf);
    free(x);
}

/* Payloads of different scales (zc_codec_encode alone: each its own) do not add. */
Test(qsgd_int, payloads_of_different_scales_do_not_add)
{
    const size_t n = 1024;
    zc_codec_params_t p = qi_params(7, 512, 2);
    float *x = zeros_f32(n), *y = zeros_f32(n);
    fill_gauss(x, n, 10, 1.0);
    fill_gauss(y, n, 11, 3.0);
    zc_codec_rng_t rng = test_codec_rng(1, 0, 0);
    payload_t a = encode_ok(&p, &rng, ZC_DTYPE_F32, x, n);
    payload_t b = encode_ok(&p, &rng, ZC_DTYPE_F32, y, n);
    uint8_t *out = xmalloc(zc_codec_bound(&p, n));
    size_t len;
    cr_assert_eq(
        zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, out, zc_codec_bound(&p, n), &len),
        ZC_ERR_MISMATCH);
    /* alone, each decodes within a level of its own scale */
    float *d = decode_ok(&a, n);
    float scale[2];
    cr_assert_eq(zc_codec_local_scales(&p, NULL, ZC_DTYPE_F32, x, n, scale), ZC_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_leq(fabsf(d[i] - x[i]), scale[i / 512] / 7 * (1 + 1e-6f));
    free(d);
    free(out);
    free(x);
    free(y);
    payload_free(&a);
    payload_free(&b);
}

/* ------------------------------------------------------------ non-finite and huge values */

/*
 * NaN, infinities and values past 2^64 go out of band: the scales ignore
 * them, the sum carries them exactly (an infinity stays that infinity, a NaN
 * a NaN), and every other value keeps its error bound.
 */
Test(qsgd_int, nonfinite_values_travel_out_of_band)
{
    const size_t n = 1500;
    const int nranks = 3;
    zc_codec_params_t p = qi_params(7, 512, (uint32_t)nranks);
    float *x[3];
    payload_t pl[3];
    for (int r = 0; r < nranks; r++) {
        x[r] = zeros_f32(n);
        fill_gauss(x[r], n, 20 + (uint64_t)r, 1.0);
    }
    x[0][10] = NAN;
    x[1][600] = INFINITY;
    x[2][601] = -INFINITY;
    x[0][1200] = 3e20f;
    x[1][1200] = 1e20f;
    float *scales = shared_scales(&p, x, nranks, n);
    for (size_t b = 0; b < zc_codec_shared_scales(&p, n); b++)
        cr_assert(scales[b] < 10, "bucket %zu's scale %g counts a value out of band", b, scales[b]);
    for (int r = 0; r < nranks; r++)
        pl[r] = encode_shared_ok(&p, NULL, 5, (uint32_t)r, x[r], n, scales);
    payload_t sum = ring_sum(&p, pl, nranks, n);
    float *d = decode_ok(&sum, n);
    cr_assert(isnan(d[10]));
    cr_assert(d[600] == INFINITY);
    cr_assert(d[601] == -INFINITY);
    for (size_t i = 0; i < n; i++) {
        if (i == 10 || i == 600 || i == 601)
            continue;
        double exact = 0;
        for (int r = 0; r < nranks; r++)
            exact += x[r][i];
        double tol = i == 1200 ? 4e20 * 0x1p-23 + nranks * scales[i / 512] / 7
                               : nranks * scales[i / 512] / 7 * (1 + 1e-6);
        cr_assert(isfinite(d[i]) && fabs(d[i] - exact) <= tol, "value %zu: %g, exact %g", i, d[i],
                  exact);
    }
    free(d);
    payload_free(&sum);
    for (int r = 0; r < nranks; r++) {
        payload_free(&pl[r]);
        free(x[r]);
    }
    free(scales);
}

/* ------------------------------------------------------------ error feedback */

/*
 * With error feedback the scales are those of input + residual (what encode
 * will see) and after each encode the residual holds exactly what was not
 * sent: input + old residual - decoded payload.
 */
Test(qsgd_int, error_feedback_scales_and_residual)
{
    const size_t n = 1024;
    zc_codec_params_t p = qi_params(7, 512, 2);
    p.qsgd_int.error_feedback = 1;
    zc_codec_state_t *st = state_new(&p, n);
    float *x = zeros_f32(n), *carry = zeros_f32(n), *seen = zeros_f32(n);
    fill_gauss(x, n, 30, 1.0);

    for (int call = 0; call < 4; call++) {
        float scales[2], other[2];
        for (size_t i = 0; i < n; i++)
            seen[i] = x[i] + carry[i];
        cr_assert_eq(zc_codec_local_scales(&p, st, ZC_DTYPE_F32, x, n, scales), ZC_OK);
        zc_codec_params_t plain = p;
        plain.qsgd_int.error_feedback = 0;
        cr_assert_eq(zc_codec_local_scales(&plain, NULL, ZC_DTYPE_F32, seen, n, other), ZC_OK);
        cr_assert_eq(scales[0], other[0], "call %d: the scale of input + residual", call);
        cr_assert_eq(scales[1], other[1]);
        /* another rank's larger scale, as the max over ranks gives */
        scales[1] *= 2;
        payload_t pl = encode_shared_ok(&p, st, 40, 0, x, n, scales);
        float *d = decode_ok(&pl, n);
        for (size_t i = 0; i < n; i++) {
            carry[i] = seen[i] - d[i];
            cr_assert_eq(st->residual[i], carry[i], "call %d value %zu", call, i);
            cr_assert_leq(fabsf(carry[i]), scales[i / 512] / 7 * (1 + 1e-6f));
        }
        free(d);
        payload_free(&pl);
    }
    zc_codec_state_destroy(st);
    free(x);
    free(carry);
    free(seen);
}

/* ------------------------------------------------------------ kernels and hostile payloads */

/* Every CPU level encodes, sums and decodes the same bits. */
Test(qsgd_int, same_bits_at_every_cpu_level)
{
    const size_t n = 5000;
    const int nranks = 3;
    zc_codec_params_t p = qi_params(127, 512, (uint32_t)nranks);
    float *x[3];
    for (int r = 0; r < nranks; r++) {
        x[r] = zeros_f32(n);
        fill_gauss(x[r], n, 60 + (uint64_t)r, 1.0);
    }
    payload_t ref = {0};
    float *ref_d = NULL;
    cr_assert_gt(zc_cpu_detect(), ZC_CPU_SCALAR, "this machine has one CPU level only");
    for (int level = ZC_CPU_SCALAR; level <= (int)zc_cpu_detect(); level++) {
        cr_assert_eq(zc_cpu_set_level((zc_cpu_level_t)level), ZC_OK);
        payload_t pl[3];
        float *scales = shared_scales(&p, x, nranks, n);
        for (int r = 0; r < nranks; r++)
            pl[r] = encode_shared_ok(&p, NULL, 70, (uint32_t)r, x[r], n, scales);
        payload_t sum = ring_sum(&p, pl, nranks, n);
        float *d = decode_ok(&sum, n);
        if (!ref_d) {
            ref = sum;
            ref_d = d;
        } else {
            cr_assert_eq(sum.len, ref.len, "level %d", level);
            cr_assert_eq(memcmp(sum.buf, ref.buf, sum.len), 0, "level %d: other payload", level);
            cr_assert(same_bits_f32(d, ref_d, n), "level %d: other values", level);
            payload_free(&sum);
            free(d);
        }
        for (int r = 0; r < nranks; r++)
            payload_free(&pl[r]);
        free(scales);
    }
    cr_assert_eq(zc_cpu_set_level(zc_cpu_detect()), ZC_OK);
    payload_free(&ref);
    free(ref_d);
    for (int r = 0; r < nranks; r++)
        free(x[r]);
}

/* Widths past what the payload count allows, a width of 1, zero payloads, a negative scale. */
Test(qsgd_int, hostile_bodies_are_refused)
{
    const size_t n = 512;
    zc_codec_params_t p = qi_params(7, 512, 2);
    float *x = zeros_f32(n);
    fill_gauss(x, n, 80, 1.0);
    zc_codec_rng_t rng = test_codec_rng(1, 0, 0);
    payload_t a = encode_ok(&p, &rng, ZC_DTYPE_F32, x, n);
    float *out = zeros_f32(n);
    struct {
        size_t at;
        uint8_t value;
        const char *what;
    } edits[] = {
        {BODY_HDR + 4, 5, "width 5 for s = 7, one payload"},
        {BODY_HDR + 4, 1, "width 1"},
        {8, 0, "zero payloads summed"},
        {BODY_HDR + 3, 0x80, "negative scale"},
        {7, 1, "reserved byte set"},
    };
    for (size_t e = 0; e < ZC_ARRAY_SIZE(edits); e++) {
        uint8_t *bad = exact_copy(a.buf, a.len);
        bad[HDR + edits[e].at] = edits[e].value;
        if (edits[e].at == 8)
            memset(bad + HDR + 8, 0, 4);
        cr_assert_eq(zc_codec_decode_add(NULL, bad, a.len, out, n), ZC_ERR_CORRUPT, "%s",
                     edits[e].what);
        free(bad);
    }
    free(out);
    free(x);
    payload_free(&a);
}

/*
 * Integer inputs of a bucket whose largest magnitude is s have unit 1 and
 * round to themselves: every width from 2 (s = 1) to 17 bits, and their sums
 * one bit wider, must decode to the inputs and their sums exactly, for
 * counts around the 8-code groups of the packers.
 */
Test(qsgd_int, every_width_round_trips)
{
    static const size_t counts[] = {1, 7, 8, 9, 63, 64, 65, 517, 1030};
    for (uint32_t s = 1; s <= 65535; s = 2 * s + 1) {
        for (size_t c = 0; c < ZC_ARRAY_SIZE(counts); c++) {
            const size_t n = counts[c];
            zc_codec_params_t p = qi_params(s, 512, 2);
            float *x[2] = {zeros_f32(n), zeros_f32(n)};
            test_rng_t rng = {s * 1000 + n};
            for (int r = 0; r < 2; r++) {
                for (size_t i = 0; i < n; i++)
                    x[r][i] = (float)((int64_t)(test_rng_next(&rng) % (2 * s + 1)) - (int64_t)s);
                for (size_t i = 0; i < n; i += 512)
                    x[r][i] = r ? -(float)s : (float)s; /* every bucket's scale is s */
            }
            float *scales = shared_scales(&p, x, 2, n);
            payload_t a = encode_shared_ok(&p, NULL, 1, 0, x[0], n, scales);
            payload_t b = encode_shared_ok(&p, NULL, 1, 1, x[1], n, scales);
            payload_t sum = reduce_ok(&p, &a, &b, n);
            float *da = decode_ok(&a, n), *ds = decode_ok(&sum, n);
            for (size_t i = 0; i < n; i++) {
                cr_assert_eq(da[i], x[0][i], "s %u n %zu value %zu: %g", s, n, i, da[i]);
                cr_assert_eq(ds[i], x[0][i] + x[1][i], "s %u n %zu sum %zu: %g", s, n, i, ds[i]);
            }
            free(da);
            free(ds);
            payload_free(&a);
            payload_free(&b);
            payload_free(&sum);
            free(scales);
            free(x[0]);
            free(x[1]);
        }
    }
}
