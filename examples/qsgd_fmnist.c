/*
 * qsgd_fmnist: QSGD on a real gradient.
 *
 * Trains a 784-512-10 MLP (ReLU, softmax cross-entropy, SGD) on Fashion-MNIST
 * for a few hundred steps so its gradients look like mid-training ones, takes
 * the gradient of the first layer (401,408 values) on the next batch, and
 * compresses it with QSGD at 2, 4 and 8 bits, fixed and auto coding. Per
 * setting: bits per coordinate, ratio against f32, relative L2 error of one
 * rank's decode and of the mean of 8 ranks' decodes (unbiased errors average
 * out), and encode / decode_add GB/s next to memcpy of the same tensor.
 *
 * The bucket size and scale come from ZIPCCL_QSGD_BUCKET and ZIPCCL_QSGD_SCALE.
 *
 *   qsgd_fmnist [--steps N] [--data DIR]
 */
#include "codec/codec.h"
#include "common/config.h"
#include "common/cpu.h"
#include "common/log.h"
#include "common/timer.h"
#include "examples/fmnist.h"
#include "examples/mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define HIDDEN 512
#define BATCH 256
#define RANKS 8

static float *alloc_floats(size_t n)
{
    float *p = calloc(n, sizeof(float));
    if (!p) {
        fprintf(stderr, "qsgd_fmnist: out of memory\n");
        exit(1);
    }
    return p;
}

static double rel_err(const float *approx, const float *exact, size_t n)
{
    double e = 0, s = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)approx[i] - exact[i];
        e += d * d;
        s += (double)exact[i] * exact[i];
    }
    return sqrt(e / s);
}

/* Best time of repeated calls, at least 5 and 0.2 s in all. */
#define TIME_BEST(best, stmt)                                                                      \
    do {                                                                                           \
        uint64_t t_start_ = zc_time_ns();                                                          \
        (best) = 1e30;                                                                             \
        for (int r_ = 0; r_ < 5 || zc_time_ns() - t_start_ < 200000000ull; r_++) {                 \
            uint64_t t0_ = zc_time_ns();                                                           \
            stmt;                                                                                  \
            double t_ = (zc_time_ns() - t0_) * 1e-9;                                               \
            (best) = t_ < (best) ? t_ : (best);                                                    \
        }                                                                                          \
    } while (0)

int main(int argc, char **argv)
{
    const char *dir = FMNIST_DEFAULT_DIR;
    int steps = 300;
    zc_config_t cfg;
    fmnist_set_t train;
    mlp_t m;
    const int sizes[] = {FMNIST_PIXELS, HIDDEN, FMNIST_CLASSES};

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--steps") == 0 && i + 1 < argc)
            steps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--data") == 0 && i + 1 < argc)
            dir = argv[++i];
        else {
            fprintf(stderr, "usage: qsgd_fmnist [--steps N] [--data DIR]\n");
            return 2;
        }
    }
    if (zc_config_load(NULL, &cfg) != ZC_OK || zc_config_apply(&cfg) != ZC_OK)
        return 1; /* the loader said which variable is wrong */
    if (fmnist_load(dir, "train", &train) < 0)
        return 1;

    if (mlp_create(sizes, 3, BATCH, 1, &m) < 0)
        return 1;
    size_t batches = train.count / BATCH;
    int tty = isatty(STDOUT_FILENO);
    printf("training a 784-%d-10 MLP on Fashion-MNIST for %d steps of %d images to get a "
           "mid-training gradient\n",
           HIDDEN, steps, BATCH);
    for (int s = 0; s < steps; s++) {
        size_t b = (size_t)s % batches;
        double loss = mlp_grad(&m, train.images + b * BATCH * FMNIST_PIXELS,
                               train.labels + b * BATCH, BATCH, 1.0f / BATCH) /
                      BATCH;
        mlp_step(&m, 0.1f, 0.0f);
        if ((s + 1) % 50 == 0 || s + 1 == steps) {
            printf(tty ? "\r  step %4d/%d  loss %.4f" : "  step %4d/%d  loss %.4f\n", s + 1, steps,
                   loss);
            fflush(stdout);
        }
    }
    size_t b = (size_t)steps % batches;
    mlp_grad(&m, train.images + b * BATCH * FMNIST_PIXELS, train.labels + b * BATCH, BATCH,
             1.0f / BATCH);
    const float *g = m.layer[0].gw;
    const size_t n = FMNIST_PIXELS * HIDDEN;
    printf("%s\ngradient of layer 1: %zu values (%.2f MiB f32), cpu kernels %s\n", tty ? "\n" : "",
           n, n * 4.0 / (1 << 20), zc_cpu_level_name(zc_cpu_level()));

    float *dec = alloc_floats(n), *mean = alloc_floats(n), *copy = alloc_floats(n);
    double t_copy;
    TIME_BEST(t_copy, memcpy(copy, g, n * sizeof(float)));
    printf("memcpy of the same tensor: %.2f GB/s (baseline)\n\n", n * 4e-9 / t_copy);

    zc_codec_params_t base;
    if (zc_codec_params_from_config(&cfg, ZC_CODEC_QSGD, &base) != ZC_OK)
        return 1;
    printf("QSGD, bucket %u, %s scaling\n", base.qsgd.bucket,
           base.qsgd.scale == ZC_QSGD_SCALE_L2 ? "L2" : "max");
    printf("%-5s %-6s %6s %11s %9s %12s %14s %9s %9s\n", "bits", "coding", "levels", "bits/coord",
           "vs f32", "rel err", "rel err mean8", "enc GB/s", "dec GB/s");

    static const unsigned bits[] = {2, 4, 8};
    static const zc_qsgd_coding_t codings[] = {ZC_QSGD_CODING_FIXED, ZC_QSGD_CODING_AUTO};
    size_t cap = 0;
    void *payload = NULL;
    for (size_t bi = 0; bi < 3; bi++) {
        for (size_t ci = 0; ci < 2; ci++) {
            zc_codec_params_t p = base;
            p.qsgd.levels = zc_qsgd_levels_for_bits(bits[bi]);
            p.qsgd.coding = codings[ci];
            size_t need = zc_codec_bound(&p, n), len = 0;
            if (need > cap) {
                free(payload);
                payload = malloc(cap = need);
                if (!payload)
                    return 1;
            }
            zc_codec_rng_t rng = {.seed = (uint64_t)cfg.seed};
            memset(mean, 0, n * sizeof(float));
            for (uint32_t r = 0; r < RANKS; r++) {
                rng.rank = r;
                if (zc_codec_encode(&p, NULL, &rng, ZC_DTYPE_F32, g, n, payload, cap, &len) !=
                        ZC_OK ||
                    zc_codec_decode_add(NULL, payload, len, mean, n) != ZC_OK) {
                    fprintf(stderr, "qsgd_fmnist: codec failed\n");
                    return 1;
                }
            }
            for (size_t i = 0; i < n; i++)
                mean[i] /= RANKS;
            double t_enc, t_dec;
            TIME_BEST(t_enc,
                      zc_codec_encode(&p, NULL, &rng, ZC_DTYPE_F32, g, n, payload, cap, &len));
            memset(dec, 0, n * sizeof(float));
            zc_codec_decode_add(NULL, payload, len, dec, n);
            double err = rel_err(dec, g, n);
            TIME_BEST(t_dec, zc_codec_decode_add(NULL, payload, len, copy, n));
            double bpc = len * 8.0 / n;
            printf("%-5u %-6s %6u %11.3f %8.1fx %12.4f %14.4f %9.2f %9.2f\n", bits[bi],
                   codings[ci] == ZC_QSGD_CODING_FIXED ? "fixed" : "auto", p.qsgd.levels, bpc,
                   32 / bpc, err, rel_err(mean, g, n), n * 4e-9 / t_enc, n * 4e-9 / t_dec);
        }
    }
    printf("\nrel err = ||decode - g|| / ||g||; mean8 averages %d independent ranks' decodes\n"
           "(unbiased rounding: its error falls by about sqrt(%d)).\n",
           RANKS, RANKS);
    free(payload);
    free(dec);
    free(mean);
    free(copy);
    mlp_destroy(&m);
    fmnist_free(&train);
    return 0;
}
