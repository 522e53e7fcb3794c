/*
 * codec_bench: throughput and compression of every codec setting on one core.
 *
 * For each setting: encode, decode_add and (linear codecs) reduce GB/s, counted
 * in f32 input bytes per second; bits per coordinate; relative L2 error of one
 * decode; and memcpy GB/s measured in the same run as the physical baseline,
 * with the ratio to it.
 * Times are the best of --reps runs after one warm-up.
 *
 *   codec_bench [--size-mib N] [--reps N] [--only NAME] [--json]
 *
 * ZIPCCL_CPU (scalar, avx2, avx512) picks the kernels measured.
 */
#include "common/config.h"
#include "common/cpu.h"
#include "common/philox.h"
#include "common/timer.h"

#include <zipccl/zipccl_codec.h>

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A codec setting: fields left 0 keep the codec's default. */
typedef struct setting {
    const char *name;
    zc_codec_id_t codec;
    unsigned qsgd_bits;   /* s = 2^(bits-1) - 1 ... */
    uint32_t qsgd_levels; /* ... unless s is given */
    uint32_t qsgd_bucket;
    zc_qsgd_scale_t qsgd_scale;
    zc_qsgd_coding_t qsgd_coding;
    int qsgd_ef;
    double topk_density;
    zc_topk_values_t topk_values;
    uint32_t gradiveq_dim;
} setting_t;

static const setting_t settings[] = {
    {.name = "none", .codec = ZC_CODEC_NONE},
    {.name = "fp16", .codec = ZC_CODEC_FP16},
    {.name = "bf16", .codec = ZC_CODEC_BF16},
    {.name = "qsgd-2bit-d128-fixed", .codec = ZC_CODEC_QSGD, .qsgd_bits = 2, .qsgd_bucket = 128},
    {.name = "qsgd-4bit-d512-fixed", .codec = ZC_CODEC_QSGD, .qsgd_bits = 4},
    {.name = "qsgd-8bit-d512-fixed", .codec = ZC_CODEC_QSGD, .qsgd_bits = 8},
    {.name = "qsgd-4bit-d512-l2-fixed",
     .codec = ZC_CODEC_QSGD,
     .qsgd_bits = 4,
     .qsgd_scale = ZC_QSGD_SCALE_L2},
    {.name = "qsgd-4bit-d512-auto",
     .codec = ZC_CODEC_QSGD,
     .qsgd_bits = 4,
     .qsgd_coding = ZC_QSGD_CODING_AUTO},
    {.name = "qsgd-4bit-d512-elias",
     .codec = ZC_CODEC_QSGD,
     .qsgd_bits = 4,
     .qsgd_coding = ZC_QSGD_CODING_ELIAS},
    /* the theory setting: s = sqrt(d), L2 scale, Elias (Corollary 3.3: <= 2.8 bits/value) */
    {.name = "qsgd-s91-d8192-l2-elias",
     .codec = ZC_CODEC_QSGD,
     .qsgd_levels = 91,
     .qsgd_bucket = 8192,
     .qsgd_scale = ZC_QSGD_SCALE_L2,
     .qsgd_coding = ZC_QSGD_CODING_ELIAS},
    {.name = "qsgd-4bit-d512-ef", .codec = ZC_CODEC_QSGD, .qsgd_bits = 4, .qsgd_ef = 1},
    {.name = "topk-1pct-f32", .codec = ZC_CODEC_TOPK},
    {.name = "topk-1pct-f16", .codec = ZC_CODEC_TOPK, .topk_values = ZC_TOPK_VALUES_F16},
    {.name = "topk-0.1pct-f32", .codec = ZC_CODEC_TOPK, .topk_density = 0.001},
    {.name = "gradiveq-K64-d8", .codec = ZC_CODEC_GRADIVEQ, .gradiveq_dim = 8},
    {.name = "gradiveq-K64-e0.99", .codec = ZC_CODEC_GRADIVEQ},
};

static zc_codec_params_t setting_params(const setting_t *st)
{
    zc_codec_params_t p;
    zc_codec_params_default(st->codec, &p);
    if (st->qsgd_bits)
        p.qsgd.levels = zc_qsgd_levels_for_bits(st->qsgd_bits);
    if (st->qsgd_levels)
        p.qsgd.levels = st->qsgd_levels;
    if (st->qsgd_bucket)
        p.qsgd.bucket = st->qsgd_bucket;
    p.qsgd.scale = st->qsgd_scale;
    p.qsgd.coding = st->qsgd_coding;
    p.qsgd.error_feedback = st->qsgd_ef;
    if (st->topk_density > 0)
        p.topk.density = st->topk_density;
    p.topk.values = st->topk_values;
    p.gradiveq.dim = st->gradiveq_dim;
    p.gradiveq.ranks = 2; /* reduce sums a payload with itself: two contributions */
    return p;
}

typedef struct result {
    double encode_gbs, decode_gbs, reduce_gbs; /* reduce_gbs 0: not linear */
    double bits_per_coord, rel_err;
} result_t;

static double now_s(void)
{
    return (double)zc_time_ns() * 1e-9;
}

/* Gaussian gradient-like input: N(0,1) by Box-Muller over Philox draws. */
static void fill_gaussian(float *x, size_t n)
{
    const uint32_t key[2] = {0x5eed, 0};
    for (size_t i = 0; i < n; i += 4) {
        uint32_t ctr[4] = {(uint32_t)(i / 4), (uint32_t)(i >> 34), 0, 0}, out[4];
        zc_philox4x32_10(ctr, key, out);
        for (int j = 0; j < 4 && i + j < n; j += 2) {
            double u1 = (out[j] + 1.0) / 4294967297.0, u2 = out[j + 1] / 4294967296.0;
            double r = sqrt(-2 * log(u1));
            x[i + j] = (float)(r * cos(2 * M_PI * u2));
            if (i + j + 1 < n)
                x[i + j + 1] = (float)(r * sin(2 * M_PI * u2));
        }
    }
}

static double bench_memcpy(void *dst, const void *src, size_t bytes, int reps)
{
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = now_s();
        memcpy(dst, src, bytes);
        double t = now_s() - t0;
        if (r > 0 && t < best) /* run 0 is the warm-up */
            best = t;
    }
    return bytes / best * 1e-9;
}

static int fail(const setting_t *st, const char *what, zc_status_t status)
{
    fprintf(stderr, "codec_bench: %s: %s: %s\n", st->name, what, zc_status_string(status));
    return -1;
}

/*
 * Encode, decode_add and (linear codecs) reduce of @p x, best of @p reps.
 * Stateful codecs get a fresh state; GradiVeQ first learns its basis from x
 * itself (one rank: the "sum" is x). With error feedback every encode also
 * updates the residual, as in training.
 */
static int run_setting(const setting_t *st, const float *x, size_t n, float *out, void *payload,
                       void *reduced, size_t cap, int reps, result_t *res)
{
    zc_codec_params_t p;
    zc_codec_state_t *state = NULL;
    zc_status_t status;
    int rc = -1;

    p = setting_params(st);
    size_t bound = zc_codec_bound(&p, n);
    if (bound == 0 || bound > cap) {
        fprintf(stderr, "codec_bench: %s: bound %zu does not fit the %zu-byte buffer\n", st->name,
                bound, cap);
        return -1;
    }
    if (zc_codec_needs_state(&p)) {
        if ((status = zc_codec_state_create(&p, n, &state)) != ZC_OK)
            return fail(st, "state", status);
        if ((status = zc_codec_state_update(state, x, n)) != ZC_OK) {
            fail(st, "state update", status);
            goto out;
        }
    }

    double enc_best = 1e30, dec_best = 1e30, red_best = 1e30;
    size_t len = 0, rlen = 0;
    int linear = (zc_codec_caps(st->codec) & ZC_CODEC_CAP_LINEAR) != 0;
    for (int r = 0; r <= reps; r++) {
        zc_codec_rng_t rng = {.seed = 1, .counter = (uint32_t)r};
        double t0 = now_s();
        status = zc_codec_encode(&p, state, &rng, ZC_DTYPE_F32, x, n, payload, cap, &len);
        double t1 = now_s();
        if (status != ZC_OK) {
            fail(st, "encode", status);
            goto out;
        }
        memset(out, 0, n * sizeof(float));
        double t2 = now_s();
        status = zc_codec_decode_add(state, payload, len, out, n);
        double t3 = now_s();
        if (status != ZC_OK) {
            fail(st, "decode_add", status);
            goto out;
        }
        double t4 = now_s();
        if (linear && (status = zc_codec_reduce(state, payload, len, payload, len, reduced, cap,
                                                &rlen)) != ZC_OK) {
            fail(st, "reduce", status);
            goto out;
        }
        double t5 = now_s();
        if (r > 0) { /* run 0 is the warm-up */
            enc_best = fmin(enc_best, t1 - t0);
            dec_best = fmin(dec_best, t3 - t2);
            red_best = fmin(red_best, t5 - t4);
        }
    }
    /* error of the last decode against this input (with error feedback, of one step) */
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)out[i] - x[i];
        err += d * d;
        norm += (double)x[i] * x[i];
    }
    double bytes = (double)n * sizeof(float);
    res->encode_gbs = bytes / enc_best * 1e-9;
    res->decode_gbs = bytes / dec_best * 1e-9;
    res->reduce_gbs = linear ? bytes / red_best * 1e-9 : 0;
    res->bits_per_coord = len * 8.0 / n;
    res->rel_err = sqrt(err / norm);
    rc = 0;
out:
    zc_codec_state_destroy(state);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: codec_bench [--size-mib N] [--reps N] [--only SUBSTRING] [--json]\n");
}

int main(int argc, char **argv)
{
    size_t mib = 64;
    int reps = 5, json = 0;
    const char *only = NULL;

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--size-mib") == 0 && i + 1 < argc) {
            mib = strtoul(argv[++i], NULL, 10);
        } else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc) {
            reps = atoi(argv[++i]);
        } else if (strcmp(argv[i], "--only") == 0 && i + 1 < argc) {
            only = argv[++i];
        } else {
            usage(strcmp(argv[i], "--help") == 0 ? stdout : stderr);
            return strcmp(argv[i], "--help") == 0 ? 0 : 2;
        }
    }
    if (mib == 0 || reps < 1) {
        usage(stderr);
        return 2;
    }

    zc_config_t cfg; /* ZIPCCL_CPU=scalar measures the reference kernels */
    if (zc_config_load(NULL, &cfg) != ZC_OK || zc_config_apply(&cfg) != ZC_OK)
        return 1;
    /* one core: OpenBLAS (GradiVeQ's projections) must not fan out either */
    openblas_set_num_threads(1);
    size_t n = mib * 1024 * 1024 / sizeof(float);
    size_t cap = 0;
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
        zc_codec_params_t p = setting_params(&settings[i]);
        size_t b = zc_codec_bound(&p, n);
        cap = b > cap ? b : cap;
    }
    float *x = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    void *payload = malloc(cap), *reduced = malloc(cap);
    if (!x || !out || !payload || !reduced) {
        fprintf(stderr, "codec_bench: out of memory for %zu MiB\n", mib);
        return 1;
    }
    fill_gaussian(x, n);
    /* touch every page once so that no timed run pays for first faults */
    memset(out, 0, n * sizeof(float));
    memset(payload, 0, cap);
    memset(reduced, 0, cap);
    double memcpy_gbs = bench_memcpy(out, x, n * sizeof(float), reps);

    if (!json)
        printf("codec_bench: %zu MiB f32 N(0,1), best of %d, one core, cpu %s\n"
               "memcpy %.2f GB/s (baseline, same run); GB/s count f32 input bytes\n\n"
               "%-24s %9s %7s %9s %7s %9s %7s %10s %9s\n",
               mib, reps, zc_cpu_level_name(zc_cpu_level()), memcpy_gbs, "setting", "enc GB/s",
               "x mcpy", "dec GB/s", "x mcpy", "red GB/s", "x mcpy", "bits/coord", "rel err");
    int failed = 0;
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
        const setting_t *st = &settings[i];
        result_t r;
        char red[32], red_ratio[32], red_json[64];
        if (only && !strstr(st->name, only))
            continue;
        if (run_setting(st, x, n, out, payload, reduced, cap, reps, &r) < 0) {
            failed = 1;
            continue;
        }
        snprintf(red, sizeof(red), r.reduce_gbs > 0 ? "%.2f" : "-", r.reduce_gbs);
        snprintf(red_ratio, sizeof(red_ratio), r.reduce_gbs > 0 ? "%.3f" : "-",
                 r.reduce_gbs / memcpy_gbs);
        if (r.reduce_gbs > 0)
            snprintf(red_json, sizeof(red_json), "%.3f,\"reduce_vs_memcpy\":%.4f", r.reduce_gbs,
                     r.reduce_gbs / memcpy_gbs);
        else
            snprintf(red_json, sizeof(red_json), "null,\"reduce_vs_memcpy\":null");
        if (json)
            printf("{\"setting\":\"%s\",\"codec\":\"%s\",\"mib\":%zu,\"cpu\":\"%s\","
                   "\"memcpy_gbs\":%.3f,\"encode_gbs\":%.3f,\"encode_vs_memcpy\":%.4f,"
                   "\"decode_add_gbs\":%.3f,\"decode_add_vs_memcpy\":%.4f,\"reduce_gbs\":%s,"
                   "\"bits_per_coord\":%.4f,\"ratio_vs_f32\":%.2f,\"rel_l2_error\":%.5f}\n",
                   st->name, zc_codec_name(st->codec), mib, zc_cpu_level_name(zc_cpu_level()),
                   memcpy_gbs, r.encode_gbs, r.encode_gbs / memcpy_gbs, r.decode_gbs,
                   r.decode_gbs / memcpy_gbs, red_json, r.bits_per_coord, 32 / r.bits_per_coord,
                   r.rel_err);
        else
            printf("%-24s %9.2f %7.3f %9.2f %7.3f %9s %7s %10.3f %9.5f\n", st->name, r.encode_gbs,
                   r.encode_gbs / memcpy_gbs, r.decode_gbs, r.decode_gbs / memcpy_gbs, red,
                   red_ratio, r.bits_per_coord, r.rel_err);
        fflush(stdout);
    }
    free(x);
    free(out);
    free(payload);
    free(reduced);
    return failed;
}
