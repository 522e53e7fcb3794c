/*
 * ZIPCCL_CODEC=powersgd across processes (collectives/powersgd.c), through the public API:
 *
 *   ranks-N   N ranks (1..8), ZIPCCL_POWERSGD_WARMUP=2, rank 4, each rank's input on the
 *             R x C view of 250 x 240 values:
 *             - warm-up: the first 2 calls of a tensor are the exact sum (full-rank input);
 *             - low rank: inputs U V_r^T with U shared (rank 3 <= r) come out exact to
 *               float rounding once compressed, f32 sum and avg, f16 sum;
 *             - error feedback: 30 calls of full-rank input: the results summed over the
 *               calls differ from the inputs summed over calls and ranks by at most the
 *               ranks' residual norms (sent + residual = input, per rank);
 *             - state per key: a second tensor of the same count started late has its own
 *               warm-up and residual;
 *             - non-finite: a NaN and an infinity on one rank come out where they went in,
 *               every other value is the exact sum, and the next calls are exact again
 *               (no state poisoned);
 *             - every result bit-identical on every rank.
 *   kill-4    a rank killed in the middle of PowerSGD calls: the others fail with a peer
 *             error or timeout within ZIPCCL_TIMEOUT_S (plus a call), the failure logged.
 *
 * Usage: test_powersgd CASE. Exits 0 when the case passed.
 *
 * Tolerances: one compressed call chains four products of at most max(R, C) = 250 terms
 * (P = M Q, Gram-Schmidt, Q = M^T P, P Q^T) and ring sums of N terms; each is within
 * gamma(n) = n u / (1 - n u) of exact relative to the magnitudes (Higham, 2nd ed., 3.1),
 * u = 2^-24. LOWRANK_TOL = 8 gamma(250 + N) bounds the normwise relative error of a
 * low-rank call, with a factor 2 for the conditioning of the Gaussian factors.
 */
#include "harness.h"
#include "rank_check.h"

#include "codec/powersgd/powersgd.h"
#include "collectives/coll.h"
#include "common/half.h"
#include "common/philox.h"
#include "common/timer.h"

#include <zipccl/zipccl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROWS 250
#define COLS 240
#define COUNT (ROWS * COLS)
#define WARMUP 2
#define KILL_VICTIM 2
#define KILL_TIMEOUT_S 10

static zc_comm_t *comm;
static int nranks;
static volatile int *root_port_taken;

static double gamma_n(double n)
{
    const double u = 0x1p-24;
    return n * u / (1.0 - n * u);
}

static double lowrank_tol(void)
{
    return 8 * gamma_n(ROWS + nranks);
}

/* Uniform in [-1, 1) from (stream, index), Philox: every rank can regenerate any rank's values. */
static double uni(uint64_t stream, uint64_t i)
{
    static const uint32_t key[2] = {0x70736764, 0x74657374};
    const uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)stream,
                             (uint32_t)(stream >> 32)};
    uint32_t out[4];
    zc_philox4x32_10(ctr, key, out);
    return (double)((uint64_t)out[0] << 21 ^ out[1] >> 11) * 0x1p-52 - 1.0;
}

static uint64_t fnv1a64(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* Every rank holds the same bytes: u64 max and min of the hash (exact on the raw ring). */
static int same_on_every_rank(const void *buf, size_t bytes, const char *what)
{
    uint64_t h[2] = {fnv1a64(buf, bytes), 0};
    h[1] = h[0];
    zc_status_t s1 = zc_allreduce(comm, &h[0], &h[0], 1, ZC_DTYPE_U64, ZC_OP_MAX);
    zc_status_t s2 = zc_allreduce(comm, &h[1], &h[1], 1, ZC_DTYPE_U64, ZC_OP_MIN);
    CHECK(s1 == ZC_OK && s2 == ZC_OK, "hash all-reduce: %s", zc_status_string(s1 ? s1 : s2));
    CHECK(h[0] == h[1], "%s: the ranks' results differ (hash max %016llx, min %016llx)", what,
          (unsigned long long)h[0], (unsigned long long)h[1]);
    return 0;
}

static int start_rank(int rank, int size)
{
    my_rank = rank;
    nranks = size;
    logged[0] = '\0';
    zc_log_set_sink(capture_sink, NULL);
    zc_harness_step("zc_comm_init");
    zc_status_t status = zc_comm_init(&comm);
    if (status == ZC_ERR_IO && rank == 0 && strstr(logged, "cannot listen on port"))
        *root_port_taken = 1;
    CHECK(status == ZC_OK, "zc_comm_init: %s", zc_status_string(status));
    return 0;
}

static int run_ranks(const zc_harness_opts_t *o, zc_rank_main_fn fn)
{
    int rc = -1;
    for (int attempt = 0; attempt < 3; attempt++) {
        *root_port_taken = 0;
        rc = zc_harness_run(o, fn, NULL);
        if (rc == 0 || !*root_port_taken)
            break;
    }
    return rc;
}

/* Full-rank input of rank @p r for call @p call of stream @p stream. */
static void full_input(float *x, int r, uint64_t stream, int call)
{
    for (size_t i = 0; i < COUNT; i++)
        x[i] = (float)uni(stream * 1000003 + (uint64_t)call * 17 + (uint64_t)r, i);
}

/*
 * (1 + call / 4) U V_r^T: U (ROWS x 3) shared by every rank, V_r (COLS x 3) per rank, so
 * the sum is rank 3 with the same row space on every call, as the warm start expects of
 * gradients. (With a new row space on every call, the residual's rounding noise tilts P
 * more each call: error feedback then grows the error about tenfold per call from 1e-7.)
 */
static void lowrank_input(float *x, int r, uint64_t stream, int call)
{
    const double scale = 1.0 + 0.25 * call;
    for (size_t i = 0; i < ROWS; i++) {
        for (size_t j = 0; j < COLS; j++) {
            double v = 0;
            for (unsigned k = 0; k < 3; k++)
                v += uni(stream * 7 + k, i) * uni(stream * 7919 + (uint64_t)r * 3 + k + 11, j);
            x[i * COLS + j] = (float)(scale * v);
        }
    }
}

/* Bytes rank @p rank sends in a ring round of @p len values of @p esize bytes. */
static uint64_t ring_bytes(size_t len, size_t esize, int rank)
{
    uint64_t bytes = 0;
    for (int s = 0; s < 2 * (nranks - 1); s++) {
        size_t seg = (size_t)((rank + 2 * nranks - s) % nranks);
        size_t base = len / (size_t)nranks, extra = len % (size_t)nranks;
        bytes += (base + (seg < extra ? 1 : 0)) * esize;
    }
    return bytes;
}

typedef void (*input_fn)(float *x, int r, uint64_t stream, int call);

/* The exact sum over every rank's input, in double. */
static void exact_sum(double *ref, input_fn fn, uint64_t stream, int call, float *scratch)
{
    memset(ref, 0, COUNT * sizeof(double));
    for (int r = 0; r < nranks; r++) {
        fn(scratch, r, stream, call);
        for (size_t i = 0; i < COUNT; i++)
            ref[i] += scratch[i];
    }
}

static double rel_err(const float *got, const double *ref, double scale)
{
    double e = 0, n = 0;
    for (size_t i = 0; i < COUNT; i++) {
        double d = got[i] * scale - ref[i];
        e += d * d;
        n += ref[i] * ref[i];
    }
    return sqrt(e / n);
}

static int call(const float *send, float *recv, uint64_t key, zc_redop_t op, const char *what)
{
    zc_harness_step("%s", what);
    zc_status_t status = zc_allreduce_key(comm, send, recv, COUNT, ZC_DTYPE_F32, op, key);
    CHECK(status == ZC_OK, "%s: %s", what, zc_status_string(status));
    return same_on_every_rank(recv, COUNT * sizeof(float), what);
}

/* The buffers of a rank (ranks_main's). */
static float *x, *y, *tmp;
static double *ref;

/*
 * Call @p c of tensor @p key on low-rank input of @p stream: the result must be the exact
 * sum (or average) to lowrank_tol.
 */
static int lowrank_call(int rank, uint64_t key, uint64_t stream, int c, zc_redop_t op,
                        const char *what)
{
    lowrank_input(x, rank, stream, c);
    if (call(x, y, key, op, what))
        return 1;
    exact_sum(ref, lowrank_input, stream, c, tmp);
    double e = rel_err(y, ref, op == ZC_OP_AVG ? nranks : 1.0);
    CHECK(e <= lowrank_tol(), "%s: relative error %.3g > %.3g", what, e, lowrank_tol());
    return 0;
}

static int ranks_main(int rank, int size, void *arg)
{
    (void)arg;
    if (start_rank(rank, size))
        return 1;
    x = malloc(COUNT * sizeof(float));
    y = malloc(COUNT * sizeof(float));
    tmp = malloc(COUNT * sizeof(float));
    ref = malloc(COUNT * sizeof(double));
    double *total = calloc(COUNT, sizeof(double));
    double *got_total = calloc(COUNT, sizeof(double));
    uint16_t *h = malloc(COUNT * 2), *hy = malloc(COUNT * 2);
    CHECK(x && y && tmp && ref && total && got_total && h && hy, "out of memory");
    zc_powersgd_shape_t s;
    zc_powersgd_shape(COUNT, 4, &s);
    CHECK(s.rows == ROWS && s.cols == COLS, "the view is %llu x %llu", (unsigned long long)s.rows,
          (unsigned long long)s.cols);
    char what[96];
    const double sum_tol = gamma_n(nranks); /* a raw ring sum of N terms */

    /* tensor A: warm-up with full-rank input, exact */
    for (int c = 0; c < WARMUP; c++) {
        full_input(x, rank, 1, c);
        snprintf(what, sizeof(what), "tensor A warm-up call %d", c);
        if (call(x, y, 1, ZC_OP_SUM, what))
            return 1;
        exact_sum(ref, full_input, 1, c, tmp);
        double e = rel_err(y, ref, 1.0);
        CHECK(e <= sum_tol, "%s: relative error %.3g > %.3g (not the raw sum)", what, e, sum_tol);
    }
    zc_stats_t st;
    CHECK(zc_comm_stats(comm, &st) == ZC_OK, "stats");
    const uint64_t wire_warm = st.bytes_wire;

    /* tensor A, compressed: low-rank input is exact, sum and avg */
    for (int c = 0; c < 4; c++) {
        snprintf(what, sizeof(what), "tensor A low-rank call %d (%s)", c, c % 2 ? "avg" : "sum");
        if (lowrank_call(rank, 1, 2, c, c % 2 ? ZC_OP_AVG : ZC_OP_SUM, what))
            return 1;
    }
    CHECK(zc_comm_stats(comm, &st) == ZC_OK, "stats");
    /*
     * Exactly what went out since: 4 calls of a call header to each peer and the rounds
     * of P (R r values and the flag) and Q (C r values), and 8 u64 hash calls on the raw
     * ring; the warm-up sent the whole tensor.
     */
    const uint64_t hdr = ZC_COLL_HEADER_BYTES * (uint64_t)(nranks - 1);
    const uint64_t expect =
        4 * (hdr + ring_bytes(ROWS * 4 + 1, 4, rank) + ring_bytes(COLS * 4, 4, rank)) +
        8 * (hdr + ring_bytes(1, 8, rank));
    CHECK(st.bytes_wire - wire_warm == expect, "4 compressed calls sent %llu bytes, not %llu",
          (unsigned long long)(st.bytes_wire - wire_warm), (unsigned long long)expect);
    CHECK(nranks == 1 || wire_warm >= 2 * ring_bytes(COUNT, 4, rank), "the warm-up sent %llu bytes",
          (unsigned long long)wire_warm);

    /* an f16 tensor: its warm-up, then the same exactness to f16's rounding */
    lowrank_input(x, rank, 3, 0);
    for (size_t i = 0; i < COUNT; i++)
        h[i] = zc_f32_to_f16(x[i]);
    for (int c = 0; c <= WARMUP; c++) {
        zc_harness_step("f16 tensor call %d", c);
        zc_status_t status = zc_allreduce_key(comm, h, hy, COUNT, ZC_DTYPE_F16, ZC_OP_SUM, 7);
        CHECK(status == ZC_OK, "f16: %s", zc_status_string(status));
        if (same_on_every_rank(hy, COUNT * 2, "f16"))
            return 1;
    }
    /*
     * Against the sum of the f16-rounded inputs, which are low rank up to their rounding
     * (2^-11 of each rank's input at most, projected or not) and the output's rounding.
     */
    memset(ref, 0, COUNT * sizeof(double));
    double norms = 0;
    for (int r = 0; r < nranks; r++) {
        lowrank_input(tmp, r, 3, 0);
        double nr = 0;
        for (size_t i = 0; i < COUNT; i++) {
            ref[i] += zc_f16_to_f32(zc_f32_to_f16(tmp[i]));
            nr += (double)tmp[i] * tmp[i];
        }
        norms += sqrt(nr);
    }
    double ref_norm = 0;
    for (size_t i = 0; i < COUNT; i++) {
        y[i] = zc_f16_to_f32(hy[i]);
        ref_norm += ref[i] * ref[i];
    }
    const double f16_tol = lowrank_tol() + 0x1p-11 * (1 + norms / sqrt(ref_norm));
    CHECK(rel_err(y, ref, 1.0) <= f16_tol, "f16: relative error %.3g > %.3g", rel_err(y, ref, 1.0),
          f16_tol);

    /* tensor B (same count, other key) starts now: its own warm-up, then error feedback */
    for (int c = 0; c < 30; c++) {
        full_input(x, rank, 4, c);
        snprintf(what, sizeof(what), "tensor B call %d", c);
        if (call(x, y, 2, ZC_OP_SUM, what))
            return 1;
        exact_sum(ref, full_input, 4, c, tmp);
        for (size_t i = 0; i < COUNT; i++) {
            total[i] += ref[i];
            got_total[i] += y[i];
        }
        double e = rel_err(y, ref, 1.0);
        if (c < WARMUP) /* a late tensor has its own warm-up: not compressed yet */
            CHECK(e <= sum_tol, "%s: relative error %.3g (its warm-up is not raw)", what, e);
        /* interleaved: tensor A keeps being exact on low-rank input */
        if (c % 10 == 9) {
            snprintf(what, sizeof(what), "tensor A between B's calls (%d)", c);
            if (lowrank_call(rank, 1, 2, c, ZC_OP_SUM, what))
                return 1;
        }
    }
    /* error feedback: sum of results + sum over ranks of residuals = sum of inputs */
    CHECK(zc_comm_stats(comm, &st) == ZC_OK, "stats");
    double resid = st.residual_norm; /* this rank's: tensors A and B */
    double resid_all = resid;
    CHECK(zc_allreduce(comm, &resid_all, &resid_all, 1, ZC_DTYPE_F64, ZC_OP_SUM) == ZC_OK,
          "sum of residual norms");
    double d2 = 0, t2 = 0;
    for (size_t i = 0; i < COUNT; i++) {
        double d = got_total[i] - total[i];
        d2 += d * d;
        t2 += total[i] * total[i];
    }
    /* rounding: 30 calls, each within lowrank_tol of its own magnitude (<= sqrt(t2) / 30 * 30) */
    const double slack = 30 * lowrank_tol() * sqrt(t2);
    CHECK(sqrt(d2) <= resid_all + slack,
          "results summed over 30 calls are %.4g from the inputs' sum, residuals %.4g (+%.3g)",
          sqrt(d2), resid_all, slack);
    CHECK(sqrt(d2) > 0.01 * sqrt(t2),
          "full-rank input came out exact (%.3g): nothing was compressed", sqrt(d2) / sqrt(t2));

    /* tensor C: non-finite input on one rank */
    for (int c = 0; c < WARMUP + 1; c++) {
        lowrank_input(x, rank, 6, c);
        snprintf(what, sizeof(what), "tensor C call %d", c);
        if (call(x, y, 3, ZC_OP_SUM, what))
            return 1;
    }
    const int bad_rank = nranks > 1 ? 1 : 0;
    lowrank_input(x, rank, 6, 10);
    if (rank == bad_rank) {
        x[5] = NAN;
        x[17] = INFINITY;
    }
    if (call(x, y, 3, ZC_OP_SUM, "tensor C with NaN and inf"))
        return 1;
    exact_sum(ref, lowrank_input, 6, 10, tmp);
    CHECK(isnan(y[5]), "the NaN came out as %g", y[5]);
    CHECK(isinf(y[17]) && y[17] > 0, "the infinity came out as %g", y[17]);
    double e2 = 0, n2 = 0;
    for (size_t i = 0; i < COUNT; i++) {
        if (i == 5 || i == 17)
            continue;
        CHECK(isfinite(y[i]), "value %zu is %g, its input was finite", i, y[i]);
        double d = y[i] - ref[i];
        e2 += d * d;
        n2 += ref[i] * ref[i];
    }
    CHECK(sqrt(e2 / n2) <= lowrank_tol(), "the finite values are %.3g off", sqrt(e2 / n2));
    for (int c = 11; c < 14; c++) {
        snprintf(what, sizeof(what), "tensor C call %d after the NaN", c);
        if (lowrank_call(rank, 3, 6, c, ZC_OP_SUM, what))
            return 1;
    }
    CHECK(zc_comm_stats(comm, &st) == ZC_OK, "stats");
    CHECK(isfinite(st.residual_norm), "a residual holds %g", st.residual_norm);

    zc_harness_step("zc_comm_destroy");
    zc_comm_destroy(comm);
    free(x);
    free(y);
    free(tmp);
    free(ref);
    free(total);
    free(got_total);
    free(h);
    free(hy);
    return 0;
}

static int case_ranks(int n)
{
    char *const env[] = {"ZIPCCL_CODEC=powersgd", "ZIPCCL_POWERSGD_RANK=4",
                         "ZIPCCL_POWERSGD_WARMUP=2", "ZIPCCL_MIN_BYTES=0", NULL};
    zc_harness_opts_t o = {.nranks = n, .deadline_s = 200, .env = env};
    return run_ranks(&o, ranks_main) != 0;
}

static int kill_main(int rank, int size, void *arg)
{
    (void)arg;
    const size_t count = 2u << 20;
    float *send = malloc(count * 4), *recv = malloc(count * 4);
    CHECK(send && recv, "out of memory");
    for (size_t i = 0; i < count; i++)
        send[i] = (float)uni((uint64_t)rank, i);
    if (start_rank(rank, size))
        return 1;
    zc_status_t status = ZC_OK;
    double last_call_s = 0;
    uint64_t begin = zc_time_ns();
    for (int k = 0; status == ZC_OK && (double)(zc_time_ns() - begin) * 1e-9 < 40; k++) {
        zc_harness_step("allreduce %d", k);
        uint64_t start = zc_time_ns();
        status = zc_allreduce(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM);
        last_call_s = (double)(zc_time_ns() - start) * 1e-9;
    }
    CHECK(status == ZC_ERR_PEER || status == ZC_ERR_TIMEOUT, "all-reduce after rank %d died: %s",
          KILL_VICTIM, zc_status_string(status));
    CHECK(last_call_s < KILL_TIMEOUT_S + 3, "the failing call took %.1f s", last_call_s);
    CHECK(logged[0] != '\0', "the failure was not logged");
    zc_comm_destroy(comm);
    free(send);
    free(recv);
    return FAILED_AS_EXPECTED;
}

static int case_kill(void)
{
    char timeout[64];
    snprintf(timeout, sizeof(timeout), "ZIPCCL_TIMEOUT_S=%d", KILL_TIMEOUT_S);
    char *const env[] = {"ZIPCCL_CODEC=powersgd", "ZIPCCL_POWERSGD_WARMUP=1", timeout, NULL};
    zc_harness_opts_t o = {.nranks = 4,
                           .deadline_s = 60,
                           .kill_rank = KILL_VICTIM,
                           .kill_at_step = "allreduce 3",
                           .kill_after_s = 0.02,
                           .expect_fail_mask = 0xful & ~(1ul << KILL_VICTIM),
                           .expect_fail_status = FAILED_AS_EXPECTED,
                           .env = env};
    return run_ranks(&o, kill_main) != 0;
}

static int run_case(const char *name)
{
    int n;
    char tail;
    if (sscanf(name, "ranks-%d%c", &n, &tail) == 1 && n >= 1 && n <= 8)
        return case_ranks(n);
    if (strcmp(name, "kill-4") == 0)
        return case_kill();
    return -1;
}

int main(int argc, char **argv)
{
    root_port_taken = shared_map(sizeof(int));
    return root_port_taken ? case_main(argc, argv, run_case) : 1;
}
