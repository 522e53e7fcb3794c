/*
 * codec_bench: throughput and compression of every codec setting on one core.
 *
 * For each setting: encode and decode_add GB/s (f32 input bytes per second),
 * bits per coordinate, relative L2 error of one decode, and memcpy GB/s
 * measured in the same run as the physical baseline, with the ratio to it.
 * Times are the best of --reps runs after one warm-up.
 *
 *   codec_bench [--size-mib N] [--reps N] [--only NAME] [--json]
 */
#include "common/cpu.h"
#include "common/philox.h"
#include "common/timer.h"

#include <zipccl/zipccl_codec.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct setting {
    const char *name;
    zc_codec_id_t codec;
    unsigned bits; /* qsgd: s = 2^(bits-1) - 1 unless levels is set */
    uint32_t levels;
    uint32_t bucket;
    zc_qsgd_scale_t scale;
    zc_qsgd_coding_t coding;
} setting_t;

static const setting_t settings[] = {
    {"none", ZC_CODEC_NONE, 0, 0, 0, 0, 0},
    {"qsgd-2bit-d128-fixed", ZC_CODEC_QSGD, 2, 0, 128, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED},
    {"qsgd-4bit-d512-fixed", ZC_CODEC_QSGD, 4, 0, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED},
    {"qsgd-8bit-d512-fixed", ZC_CODEC_QSGD, 8, 0, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED},
    {"qsgd-4bit-d512-l2-fixed", ZC_CODEC_QSGD, 4, 0, 512, ZC_QSGD_SCALE_L2, ZC_QSGD_CODING_FIXED},
    {"qsgd-4bit-d512-auto", ZC_CODEC_QSGD, 4, 0, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_AUTO},
    {"qsgd-4bit-d512-elias", ZC_CODEC_QSGD, 4, 0, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_ELIAS},
    {"qsgd-s91-d8192-l2-elias", ZC_CODEC_QSGD, 0, 91, 8192, ZC_QSGD_SCALE_L2, ZC_QSGD_CODING_ELIAS},
};

typedef struct result {
    double encode_gbs, decode_gbs, bits_per_coord, rel_err;
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

static int run_setting(const setting_t *st, const float *x, size_t n, float *out, void *payload,
                       size_t cap, int reps, result_t *res)
{
    zc_codec_params_t p;
    zc_codec_params_default(st->codec, &p);
    if (st->codec == ZC_CODEC_QSGD) {
        p.qsgd.levels = st->levels ? st->levels : zc_qsgd_levels_for_bits(st->bits);
        p.qsgd.bucket = st->bucket;
        p.qsgd.scale = st->scale;
        p.qsgd.coding = st->coding;
    }
    if (zc_codec_bound(&p, n) > cap) {
        fprintf(stderr, "codec_bench: %s: bound %zu exceeds buffer\n", st->name,
                zc_codec_bound(&p, n));
        return -1;
    }
    double enc_best = 1e30, dec_best = 1e30;
    size_t len = 0;
    zc_status_t status;
    for (int r = 0; r <= reps; r++) {
        zc_codec_rng_t rng = {.seed = 1, .counter = (uint32_t)r};
        double t0 = now_s();
        status = zc_codec_encode(&p, NULL, &rng, ZC_DTYPE_F32, x, n, payload, cap, &len);
        double t1 = now_s();
        if (status != ZC_OK) {
            fprintf(stderr, "codec_bench: %s: encode: %s\n", st->name, zc_status_string(status));
            return -1;
        }
        memset(out, 0, n * sizeof(float));
        double t2 = now_s();
        status = zc_codec_decode_add(NULL, payload, len, out, n);
        double t3 = now_s();
        if (status != ZC_OK) {
            fprintf(stderr, "codec_bench: %s: decode: %s\n", st->name, zc_status_string(status));
            return -1;
        }
        if (r > 0) {
            enc_best = fmin(enc_best, t1 - t0);
            dec_best = fmin(dec_best, t3 - t2);
        }
    }
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)out[i] - x[i];
        err += d * d;
        norm += (double)x[i] * x[i];
    }
    double bytes = (double)n * sizeof(float);
    res->encode_gbs = bytes / enc_best * 1e-9;
    res->decode_gbs = bytes / dec_best * 1e-9;
    res->bits_per_coord = len * 8.0 / n;
    res->rel_err = sqrt(err / norm);
    return 0;
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

    size_t n = mib * 1024 * 1024 / sizeof(float);
    size_t cap = 0;
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
        zc_codec_params_t p;
        zc_codec_params_default(settings[i].codec, &p);
        size_t b = zc_codec_bound(&p, n) * 3; /* elias at 17 bits worst case fits in 3x raw */
        cap = b > cap ? b : cap;
    }
    float *x = malloc(n * sizeof(float)), *out = malloc(n * sizeof(float));
    void *payload = malloc(cap);
    if (!x || !out || !payload) {
        fprintf(stderr, "codec_bench: out of memory for %zu MiB\n", mib);
        return 1;
    }
    fill_gaussian(x, n);
    memset(out, 0, n * sizeof(float));
    memset(payload, 0, cap);
    double memcpy_gbs = bench_memcpy(out, x, n * sizeof(float), reps);

    if (!json)
        printf("codec_bench: %zu MiB f32 N(0,1), best of %d, one core, cpu %s\n"
               "memcpy %.2f GB/s (baseline, same run)\n\n"
               "%-26s %10s %8s %10s %8s %10s %10s\n",
               mib, reps, zc_cpu_level_name(zc_cpu_level()), memcpy_gbs, "setting", "enc GB/s",
               "x memcpy", "dec GB/s", "x memcpy", "bits/coord", "rel err");
    int failed = 0;
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
        const setting_t *st = &settings[i];
        result_t r;
        if (only && !strstr(st->name, only))
            continue;
        if (run_setting(st, x, n, out, payload, cap, reps, &r) < 0) {
            failed = 1;
            continue;
        }
        if (json)
            printf("{\"setting\":\"%s\",\"codec\":\"%s\",\"mib\":%zu,\"cpu\":\"%s\","
                   "\"encode_gbs\":%.3f,\"decode_add_gbs\":%.3f,\"memcpy_gbs\":%.3f,"
                   "\"encode_vs_memcpy\":%.4f,\"decode_add_vs_memcpy\":%.4f,"
                   "\"bits_per_coord\":%.4f,\"ratio_vs_f32\":%.2f,\"rel_l2_error\":%.5f}\n",
                   st->name, zc_codec_name(st->codec), mib, zc_cpu_level_name(zc_cpu_level()),
                   r.encode_gbs, r.decode_gbs, memcpy_gbs, r.encode_gbs / memcpy_gbs,
                   r.decode_gbs / memcpy_gbs, r.bits_per_coord, 32 / r.bits_per_coord, r.rel_err);
        else
            printf("%-26s %10.2f %8.3f %10.2f %8.3f %10.3f %10.5f\n", st->name, r.encode_gbs,
                   r.encode_gbs / memcpy_gbs, r.decode_gbs, r.decode_gbs / memcpy_gbs,
                   r.bits_per_coord, r.rel_err);
    }
    free(x);
    free(out);
    free(payload);
    return failed;
}
