/*
 * PowerSGD's math (codec/powersgd/lowrank.c) and its codec (powersgd.c): the
 * matrix view, the orthonormalisation (deterministic, orthonormal, dependent
 * columns dropped), the exact reconstruction of a rank-r matrix, the warm
 * start, error feedback over 200 steps (bounded residual and the telescoping
 * identity sent + residual = input), and hostile payloads.
 *
 * Tolerances: a dot product of n float terms is within gamma(n) = n u / (1 -
 * n u) of its exact value relative to the sum of magnitudes (Higham, 2nd ed.,
 * section 3.1), u = 2^-24. A reconstruction chains four such products
 * (P = M Q, the projections of Gram-Schmidt, Q = M^T P, P Q^T) over at most
 * max(R, C) terms each, so 8 gamma(max(R, C)) bounds its normwise error with a
 * factor 2 to spare for the conditioning of the well-spread test matrices.
 */
#include "codec_test.h"

#include "codec/codec.h" /* struct zc_codec_state: the residual */
#include "codec/powersgd/powersgd.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <string.h>

static double gamma_n(double n)
{
    const double u = 0x1p-24;
    return n * u / (1.0 - n * u);
}

static double norm2(const float *x, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += (double)x[i] * x[i];
    return sqrt(s);
}

static double diff_norm(const float *a, const float *b, size_t n)
{
    double s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)a[i] - b[i];
        s += d * d;
    }
    return sqrt(s);
}

/* An R x C matrix of rank @p k: sum of k outer products of Gaussian vectors. */
static float *low_rank(uint64_t rows, uint64_t cols, unsigned k, uint64_t seed)
{
    float *m = zeros_f32((size_t)(rows * cols));
    float *u = xmalloc(rows * sizeof(float)), *v = xmalloc(cols * sizeof(float));
    for (unsigned t = 0; t < k; t++) {
        fill_gauss(u, rows, seed * 31 + 2 * t, 1.0);
        fill_gauss(v, cols, seed * 31 + 2 * t + 1, 1.0);
        for (uint64_t i = 0; i < rows; i++)
            for (uint64_t j = 0; j < cols; j++)
                m[i * cols + j] += u[i] * v[j];
    }
    free(u);
    free(v);
    return m;
}

Test(powersgd_shape, exact_factorisations_and_padding)
{
    zc_powersgd_shape_t s;

    zc_powersgd_shape(784 * 512, 4, &s); /* a 784 x 512 weight matrix comes out as itself */
    cr_assert_eq(s.rows, 784);
    cr_assert_eq(s.cols, 512);
    cr_assert_eq(s.rank, 4);
    zc_powersgd_shape(512 * 256, 4, &s);
    cr_assert_eq(s.rows, 512);
    cr_assert_eq(s.cols, 256);
    zc_powersgd_shape(1 << 20, 4, &s);
    cr_assert_eq(s.rows, 1024);
    cr_assert_eq(s.cols, 1024);
    /* a prime: near-square, the last row short */
    zc_powersgd_shape(10007, 4, &s);
    cr_assert_eq(s.cols, 101);
    cr_assert_eq(s.rows, 100);
    cr_assert(s.rows * s.cols >= 10007 && (s.rows - 1) * s.cols < 10007);
    /* 2 x 5000: 2 is below sqrt(10000) / 4, so not taken */
    zc_powersgd_shape(2 * 4999, 4, &s);
    cr_assert(s.rows * s.cols >= 9998 && s.cols >= 99);
    /* the rank is clipped by the shape */
    zc_powersgd_shape(6, 4, &s);
    cr_assert_eq(s.rows, 3);
    cr_assert_eq(s.cols, 2);
    cr_assert_eq(s.rank, 2);
    zc_powersgd_shape(1, 4, &s);
    cr_assert(s.rows == 1 && s.cols == 1 && s.rank == 1);
    zc_powersgd_shape(0, 4, &s);
    cr_assert(s.rows == 0 && s.cols == 0 && s.rank == 0);
    for (uint64_t n = 1; n < 5000; n += 7) {
        zc_powersgd_shape(n, 8, &s);
        cr_assert(s.rows * s.cols >= n && (s.rows - 1) * s.cols < n, "count %llu",
                  (unsigned long long)n);
        cr_assert(4 * s.cols >= (uint64_t)sqrt((double)n), "count %llu: %llu x %llu",
                  (unsigned long long)n, (unsigned long long)s.rows, (unsigned long long)s.cols);
    }
}

Test(powersgd_math, orthonormalise_is_orthonormal_and_deterministic)
{
    zc_powersgd_shape_t s = {.rows = 300, .cols = 40, .rank = 6};
    float *p = xmalloc(300 * 6 * sizeof(float)), *p2 = xmalloc(300 * 6 * sizeof(float));
    fill_gauss(p, 300 * 6, 7, 3.0);
    /* nearly parallel columns 1 and 0: the second pass of Gram-Schmidt matters */
    for (int i = 0; i < 300; i++)
        p[i * 6 + 1] = p[i * 6] + 1e-3f * p[i * 6 + 1];
    memcpy(p2, p, 300 * 6 * sizeof(float));
    zc_powersgd_orthonormalise(&s, p);
    zc_powersgd_orthonormalise(&s, p2);
    cr_assert(same_bits_f32(p, p2, 300 * 6), "two runs on equal input differ");
    for (uint32_t a = 0; a < 6; a++) {
        for (uint32_t b = 0; b < 6; b++) {
            double d = 0;
            for (int i = 0; i < 300; i++)
                d += (double)p[i * 6 + a] * p[i * 6 + b];
            /* each entry of P^T P: 300 products of unit-scale values, normalised in float */
            cr_assert(fabs(d - (a == b)) < 4 * gamma_n(300), "P^T P[%u][%u] = %.3g", a, b, d);
        }
    }
    free(p);
    free(p2);
}

Test(powersgd_math, dependent_and_bad_columns_become_zero)
{
    zc_powersgd_shape_t s = {.rows = 50, .cols = 10, .rank = 4};
    float p[50 * 4];
    fill_gauss(p, 50 * 4, 11, 1.0);
    for (int i = 0; i < 50; i++) {
        p[i * 4 + 1] = 2.0f * p[i * 4];  /* dependent on column 0 */
        p[i * 4 + 2] = 0.0f;             /* zero */
        p[i * 4 + 3] = i == 7 ? NAN : 1; /* not finite */
    }
    zc_powersgd_orthonormalise(&s, p);
    double n0 = 0;
    for (int i = 0; i < 50; i++) {
        n0 += (double)p[i * 4] * p[i * 4];
        cr_assert_eq(p[i * 4 + 1], 0.0f, "row %d of the dependent column: %g", i, p[i * 4 + 1]);
        cr_assert_eq(p[i * 4 + 2], 0.0f);
        cr_assert_eq(p[i * 4 + 3], 0.0f);
    }
    cr_assert(fabs(n0 - 1) < 4 * gamma_n(50));
}

/* One power iteration from a random Q reproduces a matrix of rank k <= r exactly. */
static void check_rank_exact(uint64_t rows, uint64_t cols, unsigned k, uint32_t r)
{
    const uint64_t n = rows * cols;
    zc_powersgd_shape_t s;
    zc_powersgd_shape(n, r, &s);
    cr_assert(s.rows == rows && s.cols == cols, "%llu x %llu viewed as %llu x %llu",
              (unsigned long long)rows, (unsigned long long)cols, (unsigned long long)s.rows,
              (unsigned long long)s.cols);
    float *m = low_rank(rows, cols, k, rows + cols + k);
    float *qt = zeros_f32((size_t)(s.cols * s.rank)), *qt2 = zeros_f32((size_t)(s.cols * s.rank));
    float *p = xmalloc((size_t)(s.rows * s.rank) * sizeof(float));
    float *out = zeros_f32((size_t)n);
    cr_assert_eq(zc_powersgd_fill(&s, qt, 0), s.rank);
    zc_powersgd_project(&s, m, n, qt, p);
    zc_powersgd_orthonormalise(&s, p);
    zc_powersgd_back(&s, m, n, p, qt2);
    zc_powersgd_expand(&s, p, qt2, n, 1.0f, out);
    double rel = diff_norm(out, m, (size_t)n) / norm2(m, (size_t)n);
    double tol = 8 * gamma_n((double)(rows > cols ? rows : cols));
    cr_assert(rel <= tol, "rank %u matrix %llu x %llu at r = %u: relative error %.3g > %.3g", k,
              (unsigned long long)rows, (unsigned long long)cols, r, rel, tol);
    free(m);
    free(qt);
    free(qt2);
    free(p);
    free(out);
}

Test(powersgd_math, rank_r_matrix_is_reconstructed_exactly)
{
    check_rank_exact(64, 48, 4, 4);
    check_rank_exact(64, 48, 2, 4); /* rank below r: two columns of P drop out */
    check_rank_exact(784, 512, 3, 4);
    check_rank_exact(200, 200, 1, 1);
}

Test(powersgd_math, fill_draws_only_empty_columns_alike)
{
    zc_powersgd_shape_t s = {.rows = 10, .cols = 37, .rank = 3};
    float a[3 * 37] = {0}, b[3 * 37] = {0};
    cr_assert_eq(zc_powersgd_fill(&s, a, 0), 3);
    cr_assert_eq(zc_powersgd_fill(&s, b, 0), 3);
    cr_assert(same_bits_f32(a, b, 3 * 37), "the same draw differs");
    for (int j = 0; j < 3 * 37; j++)
        cr_assert(a[j] >= -1.0f && a[j] < 1.0f && a[j] != 0.0f);
    cr_assert_eq(zc_powersgd_fill(&s, a, 1), 0, "full columns were drawn again");
    cr_assert(same_bits_f32(a, b, 3 * 37));
    /* column 1 zeroed, column 2 poisoned: both drawn anew with draw 1, column 0 kept */
    memset(a + 37, 0, 37 * sizeof(float));
    a[2 * 37 + 5] = INFINITY;
    cr_assert_eq(zc_powersgd_fill(&s, a, 1), 2);
    cr_assert(same_bits_f32(a, b, 37));
    cr_assert(!same_bits_f32(a + 37, b + 37, 37), "a new draw repeated the old one");
    cr_assert(zc_powersgd_finite(a, 3 * 37));
}

Test(powersgd_math, finite_scan)
{
    float x[37] = {0};
    cr_assert(zc_powersgd_finite(x, 37));
    x[36] = NAN;
    cr_assert(!zc_powersgd_finite(x, 37));
    x[36] = -INFINITY;
    cr_assert(!zc_powersgd_finite(x, 37));
    x[36] = 3.4e38f;
    cr_assert(zc_powersgd_finite(x, 37));
}

/*
 * Error feedback on the codec (one rank): 200 steps of g_t = G + noise_t on a
 * 32 x 32 view at rank 4. The compressor is a projection, ||x - C(x)||^2 <=
 * (1 - delta) ||x||^2 with delta about r / 32 for the best rank-r view; the
 * residual of error feedback with such a compressor stays below 2 / delta
 * times the largest ||g|| (Stich and Karimireddy 2020, Lemma 13 with eta =
 * delta / 2), here 16 ||g||. Without the subtraction it would grow like t ||G||
 * (200 here). And what was sent plus the last residual is the sum of the
 * inputs, to the rounding of 200 float sums.
 */
Test(powersgd_codec, error_feedback_bounded_over_200_steps)
{
    const size_t n = 32 * 32;
    zc_codec_params_t p = params_of(ZC_CODEC_POWERSGD);
    cr_assert_eq(p.powersgd.rank, 4);
    cr_assert_eq(p.powersgd.error_feedback, 1);
    cr_assert(zc_codec_needs_state(&p));
    zc_codec_state_t *st = state_new(&p, n);
    float *base = xmalloc(n * sizeof(float)), *g = xmalloc(n * sizeof(float));
    float *sent = zeros_f32(n);
    double *total = calloc(n, sizeof(double));
    cr_assert_not_null(total);
    fill_gauss(base, n, 1, 1.0);
    size_t cap = zc_codec_bound(&p, n);
    uint8_t *buf = xmalloc(cap);
    double gmax = 0, worst = 0;
    for (int t = 0; t < 200; t++) {
        fill_gauss(g, n, 1000 + (uint64_t)t, 1.0);
        for (size_t i = 0; i < n; i++) {
            g[i] += base[i];
            total[i] += g[i];
        }
        double gn = norm2(g, n);
        gmax = gn > gmax ? gn : gmax;
        zc_codec_rng_t rng = test_codec_rng(1, 0, (uint32_t)t);
        size_t len;
        cr_assert_eq(zc_codec_encode(&p, st, &rng, ZC_DTYPE_F32, g, n, buf, cap, &len), ZC_OK);
        cr_assert_eq(zc_codec_decode_add(st, buf, len, sent, n), ZC_OK);
        double rn = zc_codec_state_residual_norm(st);
        worst = rn > worst ? rn : worst;
    }
    cr_assert(worst <= 16 * gmax, "residual reached %.3g, bound 16 max ||g|| = %.3g", worst,
              16 * gmax);
    /* telescoping: sum sent + residual = sum of inputs, up to 2 roundings per step and value */
    double err = 0, mag = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)sent[i] + st->residual[i] - total[i];
        err += d * d;
        mag += total[i] * total[i];
    }
    cr_assert(sqrt(err) <= 400 * 0x1p-24 * (sqrt(mag) + 200 * worst), "sent + residual is %.3g off",
              sqrt(err));
    zc_codec_state_destroy(st);
    free(base);
    free(g);
    free(sent);
    free(total);
    free(buf);
}

/* The codec's payload of a rank-2 tensor decodes to it; its length is (R + C) r values. */
Test(powersgd_codec, payload_of_low_rank_tensor)
{
    const uint64_t rows = 96, cols = 64, n = rows * cols;
    zc_codec_params_t p = params_of(ZC_CODEC_POWERSGD);
    p.powersgd.error_feedback = 0;
    zc_codec_state_t *st = state_new(&p, n);
    float *m = low_rank(rows, cols, 2, 5), *out = zeros_f32(n);
    size_t cap = zc_codec_bound(&p, n), len;
    uint8_t *buf = xmalloc(cap);
    zc_codec_rng_t rng = test_codec_rng(1, 0, 0);
    cr_assert_eq(zc_codec_encode(&p, st, &rng, ZC_DTYPE_F32, m, n, buf, cap, &len), ZC_OK);
    cr_assert_eq(len, ZC_PAYLOAD_HEADER_BYTES + 16 + (rows + cols) * 4 * 4);
    cr_assert_eq(zc_codec_decode_add(st, buf, len, out, n), ZC_OK);
    cr_assert(diff_norm(out, m, n) <= 8 * gamma_n(96) * norm2(m, n));
    cr_assert_null(st->residual);
    zc_codec_state_destroy(st);
    free(m);
    free(out);
    free(buf);
}

/* Bodies that lie about their shape, rank, reserved word or length are refused. */
Test(powersgd_codec, hostile_bodies)
{
    const uint64_t n = 60;
    zc_codec_params_t p = params_of(ZC_CODEC_POWERSGD);
    p.powersgd.error_feedback = 0;
    zc_codec_state_t *st = state_new(&p, n);
    float x[60];
    fill_gauss(x, 60, 3, 1.0);
    size_t cap = zc_codec_bound(&p, n), len;
    uint8_t *buf = xmalloc(cap), *bad = xmalloc(cap + 64);
    zc_codec_rng_t rng = test_codec_rng(1, 0, 0);
    cr_assert_eq(zc_codec_encode(&p, st, &rng, ZC_DTYPE_F32, x, n, buf, cap, &len), ZC_OK);
    const size_t body = ZC_PAYLOAD_HEADER_BYTES;
    struct {
        size_t at;
        uint32_t value;
    } lies[] = {
        {0, 1}, {0, 100}, {4, 1},  {4, 61}, /* R x C not covering 60, or a spare row */
        {8, 0}, {8, 65},  {12, 1},          /* rank 0 or above 64; reserved word */
        {8, 3},                             /* another rank: the length is off */
    };
    for (size_t k = 0; k < ZC_ARRAY_SIZE(lies); k++) {
        memcpy(bad, buf, len);
        memcpy(bad + body + lies[k].at, &lies[k].value, 4);
        float out[60] = {0};
        zc_status_t status = zc_codec_decode_add(st, bad, len, out, n);
        cr_assert(status == ZC_ERR_CORRUPT || status == ZC_ERR_MISMATCH,
                  "lie %zu (word %zu = %u) decoded: %s", k, lies[k].at, lies[k].value,
                  zc_status_string(status));
    }
    zc_codec_state_destroy(st);
    free(buf);
    free(bad);
}
