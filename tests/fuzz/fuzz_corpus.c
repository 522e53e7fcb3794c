/*
 * Writes the seed corpus of one fuzz target (fuzz_decode.c): valid payloads
 * of the codec for random data under a spread of settings, input types and
 * counts, each as the target's input: a little-endian u16 count, then the body.
 *
 *   fuzz_corpus CODEC DIR
 *
 * Settings that fail to encode (a codec not implemented yet) are skipped; the
 * corpus always holds at least the empty input for count 0.
 */
#include "common/half.h"
#include "fuzz_state.h"

#include <zipccl/zipccl_codec.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_COUNT 4099

static const char *out_dir;
static unsigned written;

/* splitmix64 (Steele, Lea, Flood 2014) */
static uint64_t next(uint64_t *s)
{
    uint64_t z = (*s += UINT64_C(0x9E3779B97F4A7C15));
    z = (z ^ (z >> 30)) * UINT64_C(0xBF58476D1CE4E5B9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94D049BB133111EB);
    return z ^ (z >> 31);
}

/* Gradient-like values: Gaussian, a third of them zero (ReLU layers); kind 1 adds NaN and inf. */
static void fill(float *x, size_t n, uint64_t seed, int kind)
{
    uint64_t s = seed;
    for (size_t i = 0; i < n; i++) {
        double u1 = ((double)(next(&s) >> 11) + 0.5) * 0x1p-53;
        double u2 = (double)(next(&s) >> 11) * 0x1p-53;
        x[i] = next(&s) % 3 == 0 ? 0.0f : (float)(sqrt(-2 * log(u1)) * cos(6.283185307179586 * u2));
    }
    if (kind == 1 && n > 2) {
        x[n / 2] = NAN;
        x[n - 1] = -INFINITY;
    }
}

static void to_half(const float *x, size_t n, zc_dtype_t dtype, uint16_t *h)
{
    for (size_t i = 0; i < n; i++)
        h[i] = dtype == ZC_DTYPE_BF16 ? zc_f32_to_bf16(x[i]) : zc_f32_to_f16(x[i]);
}

static void write_seed(const uint8_t *payload, size_t len, uint64_t count)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/seed-%04u", out_dir, written++);
    FILE *f = fopen(path, "wb");
    if (!f) {
        perror(path);
        exit(1);
    }
    const uint8_t hdr[2] = {(uint8_t)count, (uint8_t)(count >> 8)};
    size_t body = len - ZC_PAYLOAD_HEADER_BYTES;
    if (fwrite(hdr, 1, 2, f) != 2 ||
        (body && fwrite(payload + ZC_PAYLOAD_HEADER_BYTES, 1, body, f) != body) || fclose(f)) {
        perror(path);
        exit(1);
    }
}

/* Encodes with @p p, three steps with one state for stateful codecs (error feedback moves on). */
static void seeds_for(const zc_codec_params_t *p, const float *x, const uint16_t *h16,
                      const uint16_t *hb, size_t n)
{
    static const zc_dtype_t dtypes[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16};
    size_t cap = zc_codec_bound(p, n);
    uint8_t *buf = malloc(cap ? cap : 1);
    if (!buf)
        exit(1);
    for (int t = 0; t < 3 && cap; t++) {
        const void *src = t == 0 ? (const void *)x : t == 1 ? (const void *)h16 : (const void *)hb;
        zc_codec_state_t *state = NULL;
        if (zc_codec_needs_state(p) && fuzz_state_create(p, n, &state) != ZC_OK)
            break;
        zc_codec_rng_t rng = {.seed = 1, .rank = (uint32_t)t, .stream = 0, .counter = 0};
        for (int step = 0; step < (state ? 3 : 1); step++) {
            size_t len = 0;
            rng.counter = (uint32_t)step;
            if (zc_codec_encode(p, state, &rng, dtypes[t], src, n, buf, cap, &len) != ZC_OK)
                break;
            write_seed(buf, len, n);
        }
        zc_codec_state_destroy(state);
    }
    free(buf);
}

int main(int argc, char **argv)
{
    static const size_t counts[] = {1, 2, 17, 64, 600, MAX_COUNT};
    zc_codec_id_t codec;
    zc_codec_params_t p;

    if (argc != 3 || zc_codec_find(argv[1], &codec) != ZC_OK) {
        fprintf(stderr, "usage: fuzz_corpus CODEC DIR\n");
        return 2;
    }
    out_dir = argv[2];
    static const uint8_t empty[ZC_PAYLOAD_HEADER_BYTES];
    write_seed(empty, sizeof(empty), 0);

    float *x = malloc(MAX_COUNT * sizeof(float));
    uint16_t *h16 = malloc(MAX_COUNT * 2), *hb = malloc(MAX_COUNT * 2);
    if (!x || !h16 || !hb)
        return 1;
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        const size_t n = counts[ci];
        fill(x, n, n, (int)(ci % 2));
        to_half(x, n, ZC_DTYPE_F16, h16);
        to_half(x, n, ZC_DTYPE_BF16, hb);
        zc_codec_params_default(codec, &p);
        p.gradiveq_warmup = 1; /* fuzz_state.h's one taught sum makes the basis; as fuzz_decode */
        switch (codec) {
        case ZC_CODEC_QSGD: {
            static const uint32_t levels[] = {1, 7, 91, 65535};
            static const uint32_t buckets[] = {1, 16, 512};
            if (n > 600)
                break;
            for (int l = 0; l < 4; l++)
                for (int b = 0; b < 3; b++)
                    for (int s = 0; s < 2; s++)
                        for (int c = 0; c < 3; c++) {
                            p.qsgd.levels = levels[l];
                            p.qsgd.bucket = buckets[b];
                            p.qsgd.scale = (zc_qsgd_scale_t)s;
                            p.qsgd.coding = (zc_qsgd_coding_t)c;
                            /* one input type per setting keeps the corpus small */
                            const zc_dtype_t t = (zc_dtype_t)((l + b + s + c) % 3);
                            size_t cap = zc_codec_bound(&p, n), len = 0;
                            uint8_t *buf = malloc(cap);
                            zc_codec_rng_t rng = {.seed = 2, .rank = 0, .stream = 0, .counter = 0};
                            const void *src = t == ZC_DTYPE_F32   ? (const void *)x
                                              : t == ZC_DTYPE_F16 ? (const void *)h16
                                                                  : (const void *)hb;
                            if (buf &&
                                zc_codec_encode(&p, NULL, &rng, t, src, n, buf, cap, &len) == ZC_OK)
                                write_seed(buf, len, n);
                            free(buf);
                        }
            break;
        }
        case ZC_CODEC_TOPK: {
            static const double densities[] = {0.01, 0.1, 0.5, 1.0};
            for (int d = 0; d < 4; d++)
                for (int v = 0; v < 2; v++) {
                    p.topk.density = densities[d];
                    p.topk.values = (zc_topk_values_t)v;
                    seeds_for(&p, x, h16, hb, n);
                }
            break;
        }
        default: seeds_for(&p, x, h16, hb, n); break;
        }
    }
    free(x);
    free(h16);
    free(hb);
    printf("fuzz_corpus: %u seeds for %s in %s\n", written, argv[1], out_dir);
    return 0;
}
