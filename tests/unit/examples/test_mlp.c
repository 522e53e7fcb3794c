/*
 * The examples' MLP (examples/mlp.c): gradients against finite differences of
 * an independent double-precision forward pass, the loss and accuracy on a
 * hand-computed case, the momentum step, initialisation, determinism, and
 * the random numbers behind shuffling.
 */
#include "examples/mlp.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Summed cross-entropy of n examples, everything in double: the reference. */
static double ref_loss(const mlp_t *m, const double *const *w, const double *const *b,
                       const float *x, const uint8_t *y, int n)
{
    double total = 0;
    for (int i = 0; i < n; i++) {
        double in[64] = {0}, out[64] = {0};
        int width = m->layer[0].in;
        for (int k = 0; k < width; k++)
            in[k] = x[(size_t)i * width + k];
        for (int l = 0; l < m->nlayers; l++) {
            const mlp_layer_t *L = &m->layer[l];
            for (int j = 0; j < L->out; j++) {
                out[j] = b[l][j];
                for (int k = 0; k < L->in; k++)
                    out[j] += in[k] * w[l][(size_t)k * L->out + j];
                if (l + 1 < m->nlayers && out[j] < 0)
                    out[j] = 0;
            }
            memcpy(in, out, (size_t)L->out * sizeof(double));
            width = L->out;
        }
        double mx = in[0], sum = 0;
        for (int c = 1; c < width; c++)
            mx = fmax(mx, in[c]);
        for (int c = 0; c < width; c++)
            sum += exp(in[c] - mx);
        total += log(sum) - (in[y[i]] - mx);
    }
    return total;
}

Test(mlp, gradient_matches_finite_differences)
{
    const int sizes[] = {6, 5, 4, 3};
    const int n = 7;
    const float scale = 1.0f / n;
    mlp_t m;
    cr_assert_eq(mlp_create(sizes, 4, n, 42, &m), 0);

    mlp_rng_t rng = {7};
    float x[7 * 6];
    uint8_t y[7];
    for (int i = 0; i < n * 6; i++)
        x[i] = (float)(2 * mlp_rng_uniform(&rng) - 1);
    for (int i = 0; i < n; i++)
        y[i] = (uint8_t)mlp_rng_below(&rng, 3);
    /* non-zero biases, so that their gradients flow through every path */
    for (int l = 0; l < m.nlayers; l++)
        for (int j = 0; j < m.layer[l].out; j++)
            m.layer[l].b[j] = (float)(0.2 * mlp_rng_uniform(&rng) - 0.1);

    double loss = mlp_grad(&m, x, y, n, scale);

    double *w[3], *b[3];
    for (int l = 0; l < m.nlayers; l++) {
        size_t nw = (size_t)m.layer[l].in * (size_t)m.layer[l].out;
        w[l] = malloc(nw * sizeof(double));
        b[l] = malloc((size_t)m.layer[l].out * sizeof(double));
        for (size_t i = 0; i < nw; i++)
            w[l][i] = m.layer[l].w[i];
        for (int j = 0; j < m.layer[l].out; j++)
            b[l][j] = m.layer[l].b[j];
    }
    const double *const *cw = (const double *const *)w, *const *cb = (const double *const *)b;
    double ref = ref_loss(&m, cw, cb, x, y, n);
    /* the float forward pass: a few roundings of 2^-24 per value, over 7 examples */
    cr_assert(fabs(loss - ref) < 1e-5 * fabs(ref), "loss %.9g, reference %.9g", loss, ref);

    /*
     * Central differences in double: truncation error O(h^2) ~ 1e-12 and
     * cancellation ~ 1e-16 * loss / h ~ 1e-10, far below the float gradient's
     * own rounding (a few 2^-24 relative to values of order 1 / n), so 1e-5
     * allows the float arithmetic and nothing else. A kink of a ReLU within h
     * of a pre-activation would break this; with these seeds none is.
     */
    const double h = 1e-6, tol = 1e-5;
    int checked = 0;
    for (int l = 0; l < m.nlayers; l++) {
        const mlp_layer_t *L = &m.layer[l];
        size_t nw = (size_t)L->in * (size_t)L->out;
        for (size_t i = 0; i < nw + (size_t)L->out; i++) {
            double *p = i < nw ? &w[l][i] : &b[l][i - nw];
            float got = i < nw ? L->gw[i] : L->gb[i - nw];
            double keep = *p;
            *p = keep + h;
            double up = ref_loss(&m, cw, cb, x, y, n);
            *p = keep - h;
            double down = ref_loss(&m, cw, cb, x, y, n);
            *p = keep;
            double want = scale * (up - down) / (2 * h);
            cr_assert(fabs(got - want) < tol,
                      "layer %d %s %zu: gradient %.9g, finite difference %.9g", l,
                      i < nw ? "weight" : "bias", i < nw ? i : i - nw, got, want);
            checked++;
        }
    }
    cr_assert_eq(checked, 6 * 5 + 5 + 5 * 4 + 4 + 4 * 3 + 3);
    for (int l = 0; l < m.nlayers; l++) {
        free(w[l]);
        free(b[l]);
    }
    mlp_destroy(&m);
}

Test(mlp, forward_loss_and_accuracy_known_answer)
{
    /* One layer, 2 inputs, 3 classes: logits = x W + b, worked out by hand. */
    const int sizes[] = {2, 3};
    mlp_t m;
    cr_assert_eq(mlp_create(sizes, 2, 4, 1, &m), 0);
    const float w[6] = {1, 0, 0, 0, 1, 0}; /* class 0 <- x0, class 1 <- x1, class 2 <- 0 */
    memcpy(m.layer[0].w, w, sizeof(w));
    memset(m.layer[0].b, 0, 3 * sizeof(float));
    const float x[8] = {2, 0, 0, 3, 0, 0, 1, 1};
    const uint8_t y[4] = {0, 0, 2, 1};
    double loss = 0;
    uint64_t correct = 0;
    mlp_forward(&m, x, y, 4, &loss, &correct);
    /* logits (2,0,0) (0,3,0) (0,0,0) (1,1,0); argmax 0, 1, 0 (three-way tie: lowest), 0 (tie) */
    double want =
        (log(exp(2) + 2) - 2) + (log(exp(3) + 2) - 0) + log(3) + (log(2 * exp(1) + 1) - 1);
    cr_assert(fabs(loss - want) < 1e-6, "loss %.9g, want %.9g", loss, want);
    cr_assert_eq(correct, 1, "correct %llu: only example 0's argmax is its label",
                 (unsigned long long)correct);
    /* probabilities are left in the last activation */
    const float *p = m.act[0];
    cr_assert(fabsf(p[3 + 1] - (float)(exp(3) / (exp(3) + 2))) < 1e-6f);
    cr_assert(fabsf(p[6] + p[7] + p[8] - 1.0f) < 1e-6f);

    /* mlp_evaluate in batches of max_batch (4) gives the same sums as one forward pass */
    double loss2 = 0;
    uint64_t correct2 = 0;
    mlp_evaluate(&m, x, y, 3, &loss2, &correct2);
    mlp_evaluate(&m, x + 6, y + 3, 1, &loss2, &correct2);
    cr_assert(fabs(loss2 - want) < 1e-6 && correct2 == 1);
    mlp_destroy(&m);
}

Test(mlp, momentum_step_known_answer)
{
    const int sizes[] = {1, 1};
    mlp_t m;
    cr_assert_eq(mlp_create(sizes, 2, 1, 1, &m), 0);
    m.layer[0].w[0] = 1.0f;
    m.layer[0].b[0] = 0.0f;
    m.layer[0].gw[0] = 0.5f;
    m.layer[0].gb[0] = -1.0f;
    mlp_step(&m, 0.1f, 0.9f);
    /* v = 0.5, w = 1 - 0.05; v_b = -1, b = 0.1 */
    cr_assert_float_eq(m.layer[0].w[0], 0.95f, 1e-7f);
    cr_assert_float_eq(m.layer[0].b[0], 0.1f, 1e-7f);
    mlp_step(&m, 0.1f, 0.9f);
    /* v = 0.9 * 0.5 + 0.5 = 0.95, w = 0.95 - 0.095; v_b = -1.9, b = 0.1 + 0.19 */
    cr_assert_float_eq(m.layer[0].w[0], 0.855f, 1e-6f);
    cr_assert_float_eq(m.layer[0].b[0], 0.29f, 1e-6f);
    mlp_destroy(&m);
}

Test(mlp, he_initialisation_and_determinism)
{
    const int sizes[] = {784, 512, 10};
    mlp_t a, b, c;
    cr_assert_eq(mlp_create(sizes, 3, 8, 5, &a), 0);
    cr_assert_eq(mlp_create(sizes, 3, 16, 5, &b), 0);
    cr_assert_eq(mlp_create(sizes, 3, 8, 6, &c), 0);
    cr_assert_eq(mlp_params(&a), 784 * 512 + 512 + 512 * 10 + 10);
    cr_assert_eq(mlp_digest(&a), mlp_digest(&b), "same seed, another batch size: same weights");
    cr_assert_neq(mlp_digest(&a), mlp_digest(&c), "another seed: other weights");

    /* Uniform on [-a, a] with a^2 = 6 / fan-in: mean 0 and variance 2 / fan-in. The mean of
     * n squares has standard deviation sqrt(4 a^4 / 45 / n); allow 6 of them. */
    size_t n = 784 * 512;
    double a2 = 6.0 / 784, sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        double w = a.layer[0].w[i];
        cr_assert(fabs(w) <= sqrt(a2));
        sum += w;
        sq += w * w;
    }
    double sd_sq = sqrt(4 * a2 * a2 / 45 / n), sd_mean = sqrt(a2 / 3 / n);
    cr_assert(fabs(sq / n - 2.0 / 784) < 6 * sd_sq, "variance %g, want %g", sq / n, 2.0 / 784);
    cr_assert(fabs(sum / n) < 6 * sd_mean, "mean %g", sum / n);
    for (int j = 0; j < 512; j++)
        cr_assert_eq(a.layer[0].b[j], 0.0f);

    /* one bit of one weight changes the digest */
    uint32_t bits;
    memcpy(&bits, &b.layer[1].w[17], 4);
    bits ^= 1;
    memcpy(&b.layer[1].w[17], &bits, 4);
    cr_assert_neq(mlp_digest(&a), mlp_digest(&b));
    mlp_destroy(&a);
    mlp_destroy(&b);
    mlp_destroy(&c);
}

Test(mlp, create_rejects_bad_shapes)
{
    const int ok[] = {4, 3}, zero[] = {4, 0, 3};
    const int many[MLP_MAX_LAYERS + 2] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1};
    mlp_t m;
    cr_assert_eq(mlp_create(ok, 1, 4, 1, &m), -1, "one size is no layer");
    cr_assert_eq(mlp_create(zero, 3, 4, 1, &m), -1, "a layer of width 0");
    cr_assert_eq(mlp_create(ok, 2, 0, 1, &m), -1, "batches of 0");
    cr_assert_eq(mlp_create(many, MLP_MAX_LAYERS + 2, 4, 1, &m), -1, "too many layers");
    cr_assert_eq(mlp_create(many, MLP_MAX_LAYERS + 1, 4, 1, &m), 0);
    cr_assert_eq(m.nlayers, MLP_MAX_LAYERS);
    mlp_destroy(&m);
    mlp_destroy(&m); /* destroyed twice: zeroed, still fine */
}

Test(mlp, shuffle_is_a_uniform_permutation)
{
    enum { N = 10, DRAWS = 100000 };
    uint32_t perm[N];
    unsigned first[N] = {0};
    mlp_rng_t rng = {123};
    for (int d = 0; d < DRAWS; d++) {
        mlp_shuffle(&rng, perm, N);
        unsigned seen = 0;
        for (int i = 0; i < N; i++) {
            cr_assert_lt(perm[i], N);
            seen |= 1u << perm[i];
        }
        cr_assert_eq(seen, (1u << N) - 1, "draw %d is not a permutation", d);
        first[perm[0]]++;
    }
    /* Which value lands first: chi-square with 9 degrees of freedom; P(> 42) ~ 3e-6. */
    double chi2 = 0, e = DRAWS / (double)N;
    for (int i = 0; i < N; i++)
        chi2 += (first[i] - e) * (first[i] - e) / e;
    cr_assert(chi2 < 42, "chi-square %g", chi2);

    /* the same seed gives the same order */
    uint32_t p1[N], p2[N];
    mlp_rng_t r1 = {9}, r2 = {9};
    mlp_shuffle(&r1, p1, N);
    mlp_shuffle(&r2, p2, N);
    cr_assert_arr_eq(p1, p2, sizeof(p1));
}

Test(mlp, rng_below_stays_in_range)
{
    mlp_rng_t rng = {1};
    const uint64_t bounds[] = {1, 2, 3, 1000, (1ull << 63) + 1, UINT64_MAX};
    for (size_t b = 0; b < sizeof(bounds) / sizeof(bounds[0]); b++)
        for (int i = 0; i < 1000; i++)
            cr_assert_lt(mlp_rng_below(&rng, bounds[b]), bounds[b]);
    for (int i = 0; i < 1000; i++) {
        double u = mlp_rng_uniform(&rng);
        cr_assert(u >= 0 && u < 1);
    }
}

Test(mlp, local_momentum_sums_to_global_momentum)
{
    /* Two ranks with momentum before the sum, plain SGD after, against one model with
     * momentum on the summed gradient: the same update (momentum is linear), up to the
     * rounding of a few float operations per step. */
    const int sizes[] = {3, 2};
    const float lr = 0.1f, mu = 0.9f;
    mlp_t global, rank[2];
    cr_assert_eq(mlp_create(sizes, 2, 1, 3, &global), 0);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(mlp_create(sizes, 2, 1, 3, &rank[r]), 0);
    mlp_rng_t rng = {11};
    for (int step = 0; step < 5; step++) {
        float g[2][8];
        for (int r = 0; r < 2; r++)
            for (int i = 0; i < 8; i++)
                g[r][i] = (float)(2 * mlp_rng_uniform(&rng) - 1);
        for (int i = 0; i < 6; i++)
            global.layer[0].gw[i] = g[0][i] + g[1][i];
        for (int j = 0; j < 2; j++)
            global.layer[0].gb[j] = g[0][6 + j] + g[1][6 + j];
        mlp_step(&global, lr, mu);

        for (int r = 0; r < 2; r++) {
            memcpy(rank[r].layer[0].gw, g[r], 6 * sizeof(float));
            memcpy(rank[r].layer[0].gb, g[r] + 6, 2 * sizeof(float));
            mlp_local_momentum(&rank[r], mu);
        }
        float sum[8];
        for (int i = 0; i < 6; i++)
            sum[i] = rank[0].layer[0].gw[i] + rank[1].layer[0].gw[i];
        for (int j = 0; j < 2; j++)
            sum[6 + j] = rank[0].layer[0].gb[j] + rank[1].layer[0].gb[j];
        for (int r = 0; r < 2; r++) {
            memcpy(rank[r].layer[0].gw, sum, 6 * sizeof(float));
            memcpy(rank[r].layer[0].gb, sum + 6, 2 * sizeof(float));
            mlp_step(&rank[r], lr, 0.0f);
        }
        for (int i = 0; i < 6; i++)
            cr_assert(fabsf(rank[0].layer[0].w[i] - global.layer[0].w[i]) < 1e-5f,
                      "step %d weight %d: %.9g, global momentum %.9g", step, i,
                      rank[0].layer[0].w[i], global.layer[0].w[i]);
        for (int j = 0; j < 2; j++)
            cr_assert(fabsf(rank[1].layer[0].b[j] - global.layer[0].b[j]) < 1e-5f,
                      "step %d bias %d: %.9g, global momentum %.9g", step, j, rank[1].layer[0].b[j],
                      global.layer[0].b[j]);
    }
    mlp_destroy(&global);
    mlp_destroy(&rank[0]);
    mlp_destroy(&rank[1]);
}
