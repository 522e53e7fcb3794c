/*
 * codec_bench: throughput and compression of every codec setting on one core.
 *
 * For each setting: encode, decode_add and (linear codecs) reduce GB/s, counted
 * in f32 input bytes per second; bits per coordinate; relative L2 error of one
 * decode; and memcpy GB/s measured in the same run as the physical baseline,
 * with the ratio to it.
 * Times are the best of --reps runs after one warm-up.
 *
 *   codec_bench [--size-mib N] [--reps N] [--only NAME] [--json] [--device cpu|cuda]
 *
 * ZIPCCL_CPU (scalar, avx2, avx512) picks the kernels measured.
 *
 * --device cuda measures the CUDA codecs (libzipccl-cuda, codec/cuda) on GPU 0
 * instead: the same settings on device buffers, timed with CUDA events, next to
 * the device-to-device copy bandwidth measured in the same run (bytes copied
 * per second), with the targets. Without a CUDA device (or a build
 * without nvcc) it prints "no CUDA device" and exits 77, the skip code.
 */
#include "common/config.h"
#include "common/cpu.h"
#include "common/crc32c.h"
#include "common/philox.h"
#include "common/timer.h"

#include <zipccl/zipccl_codec.h>

#include <cblas.h>
#if ZC_BENCH_CUDA
#include "codec/cuda/cuda_codec.h"

#include <cuda_runtime.h>
#endif
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
    uint32_t powersgd_rank;
    int checksum; /* ZIPCCL_CHECKSUM: a CRC-32C trailer */
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
    {.name = "qsgd-4bit-d512-crc", .codec = ZC_CODEC_QSGD, .qsgd_bits = 4, .checksum = 1},
    {.name = "bf16-crc", .codec = ZC_CODEC_BF16, .checksum = 1},
    {.name = "topk-1pct-f32", .codec = ZC_CODEC_TOPK},
    {.name = "topk-1pct-f16", .codec = ZC_CODEC_TOPK, .topk_values = ZC_TOPK_VALUES_F16},
    {.name = "topk-0.1pct-f32", .codec = ZC_CODEC_TOPK, .topk_density = 0.001},
    /* shared-scale QSGD: reduce sums a payload with itself (one bit wider) */
    {.name = "qsgd-int-4bit-d512", .codec = ZC_CODEC_QSGD_INT, .qsgd_bits = 4},
    {.name = "qsgd-int-8bit-d512", .codec = ZC_CODEC_QSGD_INT, .qsgd_bits = 8},
    {.name = "gradiveq-K64-d8", .codec = ZC_CODEC_GRADIVEQ, .gradiveq_dim = 8},
    {.name = "gradiveq-K64-e0.99", .codec = ZC_CODEC_GRADIVEQ},
    /* one rank's power iteration (with error feedback) and expansion: the compute of a call */
    {.name = "powersgd-r4-ef", .codec = ZC_CODEC_POWERSGD, .powersgd_rank = 4},
    {.name = "powersgd-r16-ef", .codec = ZC_CODEC_POWERSGD, .powersgd_rank = 16},
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
    p.qsgd_int.levels = p.qsgd.levels;
    p.qsgd_int.bucket = p.qsgd.bucket;
    p.qsgd_int.ranks = 2;
    if (st->topk_density > 0)
        p.topk.density = st->topk_density;
    p.topk.values = st->topk_values;
    p.gradiveq.dim = st->gradiveq_dim;
    p.gradiveq.ranks = 2;  /* reduce sums a payload with itself: two contributions */
    p.gradiveq_warmup = 1; /* one update learns the basis every timed encode uses */
    if (st->powersgd_rank)
        p.powersgd.rank = st->powersgd_rank;
    p.checksum = (uint32_t)st->checksum;
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

/* GB/s of ZIPCCL_CHECKSUM's CRC-32C over @p bytes (the cost a checksum adds per payload byte). */
static double bench_crc32c(const void *src, size_t bytes, int reps)
{
    double best = 1e30;
    volatile uint32_t sink = 0;
    for (int r = 0; r <= reps; r++) {
        double t0 = now_s();
        sink ^= zc_crc32c(src, bytes);
        double t = now_s() - t0;
        if (r > 0 && t < best)
            best = t;
    }
    (void)sink;
    return bytes / best * 1e-9;
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

/* The best (smallest) time of each step over the measured runs. */
typedef struct best {
    double encode, decode, reduce;
} best_t;

static const best_t best_none = {1e30, 1e30, 1e30};

static void best_update(best_t *b, int run, double encode, double decode, double reduce)
{
    if (run == 0) /* the warm-up */
        return;
    b->encode = fmin(b->encode, encode);
    b->decode = fmin(b->decode, decode);
    b->reduce = fmin(b->reduce, reduce);
}

/*
 * The figures of one setting from its best times, the payload length @p len and
 * the values @p out of the last decode of @p x (with error feedback, of one step).
 */
static void fill_result(result_t *res, const best_t *best, int linear, const float *x,
                        const float *out, size_t n, size_t len)
{
    double err = 0, norm = 0;
    for (size_t i = 0; i < n; i++) {
        double d = (double)out[i] - x[i];
        err += d * d;
        norm += (double)x[i] * x[i];
    }
    const double bytes = (double)n * sizeof(float);
    res->encode_gbs = bytes / best->encode * 1e-9;
    res->decode_gbs = bytes / best->decode * 1e-9;
    res->reduce_gbs = linear ? bytes / best->reduce * 1e-9 : 0;
    res->bits_per_coord = len * 8.0 / n;
    res->rel_err = sqrt(err / norm);
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

    best_t best = best_none;
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
        best_update(&best, r, t1 - t0, t3 - t2, t5 - t4);
    }
    fill_result(res, &best, linear, x, out, n, len);
    rc = 0;
out:
    zc_codec_state_destroy(state);
    return rc;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: codec_bench [--size-mib N] [--reps N] [--only SUBSTRING] [--json] "
               "[--device cpu|cuda]\n");
}

/* Exit code of --device cuda without a device: meson's and run.sh's "skipped". */
#define BENCH_NO_DEVICE 77

#if ZC_BENCH_CUDA
/* The targets on an H200, as ratios to the device copy: (setting, encode, decode). */
static const struct {
    const char *name;
    double encode, decode;
} cuda_targets[] = {
    {"qsgd-4bit-d512-fixed", 0.5, 0.5},
    {"fp16", 0.8, 0.8},
    {"bf16", 0.8, 0.8},
};

static int cuda_fail(const setting_t *st, const char *what, int err)
{
    fprintf(stderr, "codec_bench: %s: %s: %s\n", st ? st->name : "device", what,
            err < 0 ? zc_status_string((zc_status_t)err) : cudaGetErrorString((cudaError_t)err));
    return -1;
}

#define BENCH_CU(call, what)                                                                       \
    do {                                                                                           \
        cudaError_t bench_err_ = (call);                                                           \
        if (bench_err_ != cudaSuccess)                                                             \
            return cuda_fail(NULL, what, (int)bench_err_);                                         \
    } while (0)

/* Seconds between two recorded events. */
static double event_s(cudaEvent_t a, cudaEvent_t b)
{
    float ms = 0;
    cudaEventElapsedTime(&ms, a, b);
    return ms * 1e-3;
}

/* Device buffers shared by every setting. */
typedef struct cuda_bufs {
    float *x, *out;
    void *payload, *reduced, *ws;
    size_t cap, ws_size;
    uint64_t *dlen;
    int32_t *dstatus;
    cudaStream_t stream;
    cudaEvent_t e0, e1;
} cuda_bufs_t;

/*
 * One setting on the device: encode (error feedback included), decode_add and
 * (linear codecs) reduce, best of @p reps after a warm-up. GradiVeQ learns its
 * basis on the host from x and uploads it, as in training.
 */
static int run_setting_cuda(const setting_t *st, const float *hx, size_t n, cuda_bufs_t *b,
                            int reps, result_t *res)
{
    zc_codec_params_t p = setting_params(st);
    zc_codec_state_t *host_state = NULL;
    zc_cuda_state_t *state = NULL;
    zc_status_t status;
    int rc = -1;

    if ((status = zc_cuda_codec_supported(&p)) != ZC_OK)
        return (int)status;
    if (zc_codec_needs_state(&p)) {
        if ((status = zc_cuda_state_create(&p, n, b->stream, &state)) != ZC_OK)
            return fail(st, "device state", status);
        if (p.codec == ZC_CODEC_GRADIVEQ &&
            ((status = zc_codec_state_create(&p, n, &host_state)) != ZC_OK ||
             (status = zc_codec_state_update(host_state, hx, n)) != ZC_OK ||
             (status = zc_cuda_state_load_basis(state, host_state, b->stream)) != ZC_OK)) {
            fail(st, "basis", status);
            goto out;
        }
    }
    const int linear = (zc_codec_caps(st->codec) & ZC_CODEC_CAP_LINEAR) != 0;
    best_t best = best_none;
    uint64_t len = 0;
    for (int r = 0; r <= reps; r++) {
        zc_codec_rng_t rng = {.seed = 1, .counter = (uint32_t)r};
        cudaEventRecord(b->e0, b->stream);
        status = zc_cuda_codec_encode(&p, state, &rng, ZC_DTYPE_F32, b->x, n, b->payload, b->cap,
                                      b->dlen, b->ws, b->ws_size, b->stream);
        cudaEventRecord(b->e1, b->stream);
        if (status != ZC_OK) {
            fail(st, "encode", status);
            goto out;
        }
        if (cudaMemcpy(&len, b->dlen, sizeof(len), cudaMemcpyDeviceToHost) != cudaSuccess) {
            cuda_fail(st, "payload length", (int)cudaGetLastError());
            goto out;
        }
        const double t_enc = event_s(b->e0, b->e1);
        cudaMemsetAsync(b->out, 0, n * sizeof(float), b->stream);
        cudaEventRecord(b->e0, b->stream);
        status = zc_cuda_codec_decode_add(&p, state, b->payload, (size_t)len, b->out, n, b->dstatus,
                                          b->ws, b->ws_size, b->stream);
        cudaEventRecord(b->e1, b->stream);
        int32_t verdict = -1;
        cudaMemcpy(&verdict, b->dstatus, sizeof(verdict), cudaMemcpyDeviceToHost);
        if (status != ZC_OK || verdict != ZC_OK) {
            fail(st, "decode_add", status != ZC_OK ? status : (zc_status_t)verdict);
            goto out;
        }
        const double t_dec = event_s(b->e0, b->e1);
        double t_red = 0;
        if (linear) {
            cudaEventRecord(b->e0, b->stream);
            status =
                zc_cuda_codec_reduce(&p, state, n, b->payload, (size_t)len, b->payload, (size_t)len,
                                     b->reduced, b->cap, b->dlen, b->dstatus, b->stream);
            cudaEventRecord(b->e1, b->stream);
            cudaMemcpy(&verdict, b->dstatus, sizeof(verdict), cudaMemcpyDeviceToHost);
            if (status != ZC_OK || verdict != ZC_OK) {
                fail(st, "reduce", status != ZC_OK ? status : (zc_status_t)verdict);
                goto out;
            }
            t_red = event_s(b->e0, b->e1);
        }
        best_update(&best, r, t_enc, t_dec, t_red);
    }
    float *out = malloc(n * sizeof(float));
    if (!out || cudaMemcpy(out, b->out, n * sizeof(float), cudaMemcpyDeviceToHost) != cudaSuccess) {
        free(out);
        cuda_fail(st, "reading the decoded values", (int)cudaGetLastError());
        goto out;
    }
    fill_result(res, &best, linear, hx, out, n, (size_t)len);
    free(out);
    rc = 0;
out:
    zc_cuda_state_destroy(state);
    zc_codec_state_destroy(host_state);
    return rc;
}

static int bench_cuda(size_t mib, int reps, const char *only, int json)
{
    int devices = 0;
    zc_cuda_device_count(&devices);
    if (devices == 0) {
        printf("codec_bench: no CUDA device: nothing measured\n");
        return BENCH_NO_DEVICE;
    }
    const size_t n = mib * 1024 * 1024 / sizeof(float);
    cuda_bufs_t b = {0};
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
        zc_codec_params_t p = setting_params(&settings[i]);
        size_t c = zc_codec_bound(&p, n), w = zc_cuda_codec_workspace_size(&p, n);
        b.cap = c > b.cap ? c : b.cap;
        b.ws_size = w > b.ws_size ? w : b.ws_size;
    }
    float *hx = malloc(n * sizeof(float));
    if (!hx) {
        fprintf(stderr, "codec_bench: out of memory for %zu MiB\n", mib);
        return 1;
    }
    fill_gaussian(hx, n);
    BENCH_CU(cudaStreamCreate(&b.stream), "cudaStreamCreate");
    BENCH_CU(cudaEventCreate(&b.e0), "cudaEventCreate");
    BENCH_CU(cudaEventCreate(&b.e1), "cudaEventCreate");
    BENCH_CU(cudaMalloc((void **)&b.x, n * sizeof(float)), "cudaMalloc");
    BENCH_CU(cudaMalloc((void **)&b.out, n * sizeof(float)), "cudaMalloc");
    BENCH_CU(cudaMalloc(&b.payload, b.cap), "cudaMalloc");
    BENCH_CU(cudaMalloc(&b.reduced, b.cap), "cudaMalloc");
    BENCH_CU(cudaMalloc(&b.ws, b.ws_size ? b.ws_size : 1), "cudaMalloc");
    BENCH_CU(cudaMalloc((void **)&b.dlen, sizeof(*b.dlen)), "cudaMalloc");
    BENCH_CU(cudaMalloc((void **)&b.dstatus, sizeof(*b.dstatus)), "cudaMalloc");
    BENCH_CU(cudaMemcpy(b.x, hx, n * sizeof(float), cudaMemcpyHostToDevice), "upload");

    /* the baseline: device-to-device copy of the same bytes, bytes copied per second */
    double copy_best = 1e30;
    for (int r = 0; r <= reps; r++) {
        cudaEventRecord(b.e0, b.stream);
        cudaMemcpyAsync(b.out, b.x, n * sizeof(float), cudaMemcpyDeviceToDevice, b.stream);
        cudaEventRecord(b.e1, b.stream);
        BENCH_CU(cudaEventSynchronize(b.e1), "copy baseline");
        if (r > 0)
            copy_best = fmin(copy_best, event_s(b.e0, b.e1));
    }
    const double copy_gbs = n * sizeof(float) / copy_best * 1e-9;
    struct cudaDeviceProp prop;
    cudaGetDeviceProperties(&prop, 0);
    if (!json)
        printf("codec_bench --device cuda: %zu MiB f32 N(0,1), best of %d, %s\n"
               "device copy %.2f GB/s (baseline, same run); GB/s count f32 input bytes\n\n"
               "%-24s %9s %7s %9s %7s %9s %7s %10s %9s  %s\n",
               mib, reps, prop.name, copy_gbs, "setting", "enc GB/s", "x copy", "dec GB/s",
               "x copy", "red GB/s", "x copy", "bits/coord", "rel err", "target (enc/dec x copy)");
    int failed = 0;
    for (size_t i = 0; i < sizeof(settings) / sizeof(settings[0]); i++) {
        const setting_t *st = &settings[i];
        result_t r = {0};
        if (only && !strstr(st->name, only))
            continue;
        int rc = run_setting_cuda(st, hx, n, &b, reps, &r);
        if (rc == ZC_ERR_UNSUPPORTED) {
            if (!json)
                printf("%-24s host only (QSGD Elias and auto coding, qsgd-int: docs/cuda.md)\n",
                       st->name);
            continue;
        }
        if (rc < 0) {
            failed = 1;
            continue;
        }
        char target[64] = "";
        for (size_t t = 0; t < sizeof(cuda_targets) / sizeof(cuda_targets[0]); t++)
            if (strcmp(cuda_targets[t].name, st->name) == 0)
                snprintf(target, sizeof(target), ">= %.1f/%.1f: %s", cuda_targets[t].encode,
                         cuda_targets[t].decode,
                         r.encode_gbs >= cuda_targets[t].encode * copy_gbs &&
                                 r.decode_gbs >= cuda_targets[t].decode * copy_gbs
                             ? "met"
                             : "MISSED");
        if (json) {
            printf("{\"setting\":\"%s\",\"codec\":\"%s\",\"mib\":%zu,\"device\":\"%s\","
                   "\"copy_gbs\":%.3f,\"encode_gbs\":%.3f,\"encode_vs_copy\":%.4f,"
                   "\"decode_add_gbs\":%.3f,\"decode_add_vs_copy\":%.4f,\"reduce_gbs\":%.3f,"
                   "\"bits_per_coord\":%.4f,\"rel_l2_error\":%.5f}\n",
                   st->name, zc_codec_name(st->codec), mib, prop.name, copy_gbs, r.encode_gbs,
                   r.encode_gbs / copy_gbs, r.decode_gbs, r.decode_gbs / copy_gbs, r.reduce_gbs,
                   r.bits_per_coord, r.rel_err);
        } else {
            char red[32], red_ratio[32];
            snprintf(red, sizeof(red), r.reduce_gbs > 0 ? "%.2f" : "-", r.reduce_gbs);
            snprintf(red_ratio, sizeof(red_ratio), r.reduce_gbs > 0 ? "%.3f" : "-",
                     r.reduce_gbs / copy_gbs);
            printf("%-24s %9.2f %7.3f %9.2f %7.3f %9s %7s %10.3f %9.5f  %s\n", st->name,
                   r.encode_gbs, r.encode_gbs / copy_gbs, r.decode_gbs, r.decode_gbs / copy_gbs,
                   red, red_ratio, r.bits_per_coord, r.rel_err, target);
        }
        fflush(stdout);
    }
    cudaFree(b.x);
    cudaFree(b.out);
    cudaFree(b.payload);
    cudaFree(b.reduced);
    cudaFree(b.ws);
    cudaFree(b.dlen);
    cudaFree(b.dstatus);
    cudaEventDestroy(b.e0);
    cudaEventDestroy(b.e1);
    cudaStreamDestroy(b.stream);
    free(hx);
    return failed;
}
#endif

int main(int argc, char **argv)
{
    size_t mib = 64;
    int reps = 5, json = 0;
    const char *only = NULL, *device = "cpu";

    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--json") == 0) {
            json = 1;
        } else if (strcmp(argv[i], "--device") == 0 && i + 1 < argc &&
                   (strcmp(argv[i + 1], "cpu") == 0 || strcmp(argv[i + 1], "cuda") == 0)) {
            device = argv[++i];
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
    if (strcmp(device, "cuda") == 0) {
#if ZC_BENCH_CUDA
        return bench_cuda(mib, reps, only, json);
#else
        printf("codec_bench: no CUDA device: this build has no CUDA codecs (nvcc not found at "
               "configure time)\n");
        return BENCH_NO_DEVICE;
#endif
    }
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
    double crc_gbs = bench_crc32c(x, n * sizeof(float), reps);

    if (!json)
        printf("codec_bench: %zu MiB f32 N(0,1), best of %d, one core, cpu %s\n"
               "memcpy %.2f GB/s (baseline, same run); GB/s count f32 input bytes\n"
               "crc32c %.2f GB/s (%.3f x memcpy; ZIPCCL_CHECKSUM, per payload byte)\n\n"
               "%-24s %9s %7s %9s %7s %9s %7s %10s %9s\n",
               mib, reps, zc_cpu_level_name(zc_cpu_level()), memcpy_gbs, crc_gbs,
               crc_gbs / memcpy_gbs, "setting", "enc GB/s", "x mcpy", "dec GB/s", "x mcpy",
               "red GB/s", "x mcpy", "bits/coord", "rel err");
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
