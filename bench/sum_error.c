/*
 * sum_error: the error of a QSGD sum over N ranks by the three ways zipccl
 * forms it, simulated in one process on the codec layer (no transport):
 *
 *   allgather  every rank decodes every rank's payload and adds them
 *   scatter    the owner of a shard decodes and adds the N payloads, then
 *              re-encodes the sum (QSGD again, its own draws) for everyone
 *   ring       qsgd-int: the ranks agree on each bucket's scale (the maximum
 *              of theirs), quantize to integer levels of it, the payloads are
 *              summed as integers in ring order and decoded once
 *
 * Inputs: g_r = sqrt(rho) c + sqrt(1 - rho) e_r with c, e_r standard normal,
 * so that the ranks share a fraction rho of each value's variance (default
 * 0.9). Per N it prints the relative L2 error ||est - sum|| / ||sum|| (RMS
 * over --seeds calls with independent draws), the error of the mean of those
 * calls (an unbiased sum's mean errs by about err / sqrt(seeds)), and bytes
 * sent per rank as a fraction of the raw ring's 2 (N - 1) / N x 4 bytes per
 * value: allgather (N - 1) payloads, scatter 2 (N - 1) / N of one, the ring
 * with its sums' widths as they grow (what qsgd-int sends) and with every
 * payload at the width for N from the start (1 + bitlen(s N)), plus the
 * scale round (2 (N - 1) / N x 4 bytes per bucket).
 *
 *   sum_error [--bits B] [--count N] [--seeds T] [--rho R] [--ranks 2,4,...]
 */
#include "codec/codec.h"
#include "common/philox.h"

#include <zipccl/zipccl_codec.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_RANKS 64

typedef struct payload {
    uint8_t *buf;
    size_t len;
} payload_t;

static void die(const char *what, zc_status_t status)
{
    fprintf(stderr, "sum_error: %s: %s\n", what, zc_status_string(status));
    exit(1);
}

/* Standard normal values of stream @p stream, by Box-Muller over Philox draws. */
static void fill_gauss(float *x, size_t n, uint32_t stream)
{
    const uint32_t key[2] = {0x5eed, stream};
    for (size_t i = 0; i < n; i += 2) {
        uint32_t ctr[4] = {(uint32_t)i, 0, 0, 0}, out[4];
        zc_philox4x32_10(ctr, key, out);
        double u1 = ((double)out[0] + 0.5) * 0x1p-32, u2 = ((double)out[1] + 0.5) * 0x1p-32;
        double r = sqrt(-2 * log(u1));
        x[i] = (float)(r * cos(2 * M_PI * u2));
        if (i + 1 < n)
            x[i + 1] = (float)(r * sin(2 * M_PI * u2));
    }
}

static payload_t encode(const zc_codec_params_t *p, const float *x, size_t n, uint32_t rank,
                        uint32_t call, const float *scales)
{
    zc_codec_rng_t rng = {.seed = 7, .rank = rank, .stream = 0, .counter = call};
    payload_t pl = {malloc(zc_codec_bound(p, n)), 0};
    zc_status_t status = scales ? zc_codec_encode_shared(p, NULL, &rng, ZC_DTYPE_F32, x, n, scales,
                                                         pl.buf, zc_codec_bound(p, n), &pl.len)
                                : zc_codec_encode(p, NULL, &rng, ZC_DTYPE_F32, x, n, pl.buf,
                                                  zc_codec_bound(p, n), &pl.len);
    if (!pl.buf || status != ZC_OK)
        die("encode", pl.buf ? status : ZC_ERR_NO_MEMORY);
    return pl;
}

static void decode_add(const payload_t *pl, float *acc, size_t n)
{
    zc_status_t status = zc_codec_decode_add(NULL, pl->buf, pl->len, acc, n);
    if (status != ZC_OK)
        die("decode", status);
}

static double rel_err(const float *est, const double *exact, size_t n)
{
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += (est[i] - exact[i]) * (est[i] - exact[i]);
        den += exact[i] * exact[i];
    }
    return sqrt(num / den);
}

typedef struct row {
    double err[3], mean_err[3]; /* allgather, scatter, ring */
    double bytes[4];            /* allgather, scatter, ring as sent, ring sized for N */
} row_t;

static void run(int nranks, unsigned bits, size_t n, int seeds, double rho, row_t *row)
{
    zc_codec_params_t q, qi;
    zc_codec_params_default(ZC_CODEC_QSGD, &q);
    zc_codec_params_default(ZC_CODEC_QSGD_INT, &qi);
    q.qsgd.levels = qi.qsgd_int.levels = zc_qsgd_levels_for_bits(bits);
    zc_codec_params_set_ranks(&qi, (uint32_t)nranks);
    const uint32_t s = q.qsgd.levels, d = q.qsgd.bucket;
    const size_t nb = zc_codec_shared_scales(&qi, n);

    float *g[MAX_RANKS], *c = malloc(n * sizeof(float)), *e = malloc(n * sizeof(float));
    float *est[3], *scales = calloc(nb, sizeof(float)), *local = malloc(nb * sizeof(float));
    double *exact = calloc(n, sizeof(double)), *mean[3];
    for (int k = 0; k < 3; k++) {
        est[k] = malloc(n * sizeof(float));
        mean[k] = calloc(n, sizeof(double));
    }
    fill_gauss(c, n, 1000);
    for (int r = 0; r < nranks; r++) {
        g[r] = malloc(n * sizeof(float));
        fill_gauss(e, n, (uint32_t)r);
        for (size_t i = 0; i < n; i++) {
            g[r][i] = (float)(sqrt(rho) * c[i] + sqrt(1 - rho) * e[i]);
            exact[i] += g[r][i];
        }
        zc_status_t status = zc_codec_local_scales(&qi, NULL, ZC_DTYPE_F32, g[r], n, local);
        if (status != ZC_OK)
            die("local scales", status);
        for (size_t b = 0; b < nb; b++)
            scales[b] = fmaxf(scales[b], local[b]);
    }

    memset(row, 0, sizeof(*row));
    double raw = 2.0 * (nranks - 1) / nranks * 4.0 * (double)n;
    for (int t = 0; t < seeds; t++) {
        payload_t pl[MAX_RANKS];
        for (int k = 0; k < 3; k++)
            memset(est[k], 0, n * sizeof(float));
        /* allgather, and the scatter owner's sum before its re-encode */
        for (int r = 0; r < nranks; r++) {
            pl[r] = encode(&q, g[r], n, (uint32_t)r, (uint32_t)t, NULL);
            decode_add(&pl[r], est[0], n);
        }
        if (t == 0) {
            row->bytes[0] = (nranks - 1) * (double)pl[0].len / raw;
            row->bytes[1] = 2.0 * (nranks - 1) / nranks * (double)pl[0].len / raw;
        }
        payload_t again = encode(&q, est[0], n, (uint32_t)nranks, (uint32_t)t, NULL);
        decode_add(&again, est[1], n);
        free(again.buf);
        for (int r = 0; r < nranks; r++)
            free(pl[r].buf);

        /* the ring: partial sums m = 1 .. N-1 sent once each, the full sum N - 1 times */
        double sent = 0;
        payload_t acc = encode(&qi, g[0], n, 0, (uint32_t)t, scales);
        for (int r = 1; r < nranks; r++) {
            sent += (double)acc.len;
            payload_t mine = encode(&qi, g[r], n, (uint32_t)r, (uint32_t)t, scales);
            size_t cap = zc_codec_bound(&qi, n);
            payload_t sum = {malloc(cap), 0};
            zc_status_t status =
                zc_codec_reduce(NULL, acc.buf, acc.len, mine.buf, mine.len, sum.buf, cap, &sum.len);
            if (status != ZC_OK)
                die("reduce", status);
            free(acc.buf);
            free(mine.buf);
            acc = sum;
        }
        sent += (nranks - 1) * (double)acc.len;
        decode_add(&acc, est[2], n);
        free(acc.buf);
        if (t == 0) {
            /* each rank sends 1/N of it, plus its part of the scale round */
            double scale_round = 2.0 * (nranks - 1) / nranks * 4.0 * (double)nb;
            row->bytes[2] = (sent / nranks + scale_round) / raw;
            unsigned w = 1;
            for (uint32_t v = s * (uint32_t)nranks; v; v >>= 1)
                w++;
            double fixed = 28 + (double)nb * 5 + ceil((double)(n / d) * d * w / 8.0) +
                           (n % d ? ceil((double)(n % d) * w / 8.0) : 0);
            row->bytes[3] = (2.0 * (nranks - 1) / nranks * fixed + scale_round) / raw;
        }
        for (int k = 0; k < 3; k++) {
            double err = rel_err(est[k], exact, n);
            row->err[k] += err * err;
            for (size_t i = 0; i < n; i++)
                mean[k][i] += est[k][i];
        }
    }
    for (int k = 0; k < 3; k++) {
        row->err[k] = sqrt(row->err[k] / seeds);
        double num = 0, den = 0;
        for (size_t i = 0; i < n; i++) {
            double m = mean[k][i] / seeds - exact[i];
            num += m * m;
            den += exact[i] * exact[i];
        }
        row->mean_err[k] = sqrt(num / den);
        free(est[k]);
        free(mean[k]);
    }
    for (int r = 0; r < nranks; r++)
        free(g[r]);
    free(c);
    free(e);
    free(scales);
    free(local);
    free(exact);
}

int main(int argc, char **argv)
{
    unsigned bits = 4;
    size_t n = 1 << 16;
    int seeds = 16;
    double rho = 0.9;
    const char *ranks = "2,4,8,16,32,64";

    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--bits") == 0)
            bits = (unsigned)atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--count") == 0)
            n = (size_t)atol(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--seeds") == 0)
            seeds = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--rho") == 0)
            rho = atof(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--ranks") == 0)
            ranks = argv[++i];
        else {
            fprintf(stderr, "usage: sum_error [--bits B] [--count N] [--seeds T] [--rho R] "
                            "[--ranks 2,4,...]\n");
            return 2;
        }
    }
    if (bits < 2 || bits > 17 || n < 1 || seeds < 1 || !(rho >= 0 && rho <= 1)) {
        fprintf(stderr, "sum_error: bits 2..17, count >= 1, seeds >= 1, rho in [0, 1]\n");
        return 2;
    }
    printf("QSGD %u bits (s = %u), buckets of 512, max scale; %zu values, ranks sharing %.0f%% "
           "of the variance; %d calls\n",
           bits, zc_qsgd_levels_for_bits(bits), n, rho * 100, seeds);
    printf("relative L2 error of one call (RMS over calls) | of the mean of the calls | bytes "
           "per rank / raw ring\n");
    printf("%4s | %9s %9s %9s | %9s %9s %9s | %9s %9s %9s %9s\n", "N", "allgather", "scatter",
           "ring", "allgather", "scatter", "ring", "allgather", "scatter", "ring", "ring@N");
    for (const char *p = ranks; *p;) {
        int nranks = atoi(p);
        if (nranks < 1 || nranks > MAX_RANKS) {
            fprintf(stderr, "sum_error: ranks 1..%d\n", MAX_RANKS);
            return 2;
        }
        row_t row;
        run(nranks, bits, n, seeds, rho, &row);
        printf("%4d | %9.4f %9.4f %9.4f | %9.4f %9.4f %9.4f | %9.4f %9.4f %9.4f %9.4f\n", nranks,
               row.err[0], row.err[1], row.err[2], row.mean_err[0], row.mean_err[1],
               row.mean_err[2], row.bytes[0], row.bytes[1], row.bytes[2], row.bytes[3]);
        fflush(stdout);
        p = strchr(p, ',');
        if (!p)
            break;
        p++;
    }
    return 0;
}
