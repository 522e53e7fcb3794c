/*
 * Numerics across processes (docs/codecs.md, "Values out of band"), 4 ranks on
 * loopback, one case per argument:
 *
 *   matrix-<algo>  every codec the algorithm runs (error feedback on and off)
 *                  x {NaN, +inf, -inf, 1e38 on every rank, denormals}: the
 *                  position whose exact sum is non-finite is NaN or that
 *                  infinity, every other value is finite and within the
 *                  codec's error of the exact sum, the next clean call of the
 *                  tensor too, and every rank holds the same bytes.
 *   fp16-avg       2 ranks of 40000 (f16 overflows at 65520): avg is 40000,
 *                  sum 80000, on every algorithm.
 *   ef-mismatch    ranks that disagree on ZIPCCL_QSGD_EF fail the call check.
 *   mixed-<algo>   ranks with different ZIPCCL_CPU and OPENBLAS_CORETYPE: the
 *                  results are the same bytes on every rank, for every codec.
 */
#include "harness.h"
#include "rank_check.h"

#include <zipccl/zipccl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define N 4096
#define POS 1000
#define NRANKS 4

static zc_comm_t *comm;

typedef struct codec_cfg {
    const char *codec, *extra;
    double tol; /* |result - exact sum| for every value in range (inputs in [-1, 1]) */
} codec_cfg_t;

/*
 * Tolerances: fp16 and bf16 round each of 4 inputs and up to 3 partial sums
 * (2^-11, 2^-8 relative on magnitudes <= 4); QSGD (s = 7, max scale) errs by
 * at most scale / s = 1/7 per rank and again in the scatter's re-encode, and
 * error feedback carries at most that much more; top-k drops at most the
 * whole sum (4) and sends at most the residual of 3 calls (12); GradiVeQ
 * projects a slice of norm <= 4 sqrt(16) = 16, its error and residual bounded
 * by that twice.
 */
static const codec_cfg_t codecs_all[] = {
    {"qsgd", NULL, 3.0},
    {"qsgd", "ZIPCCL_QSGD_EF=1", 3.0},
    {"topk", NULL, 16.0},
    {"fp16", NULL, 0.01},
    {"bf16", NULL, 0.1},
    {"gradiveq", NULL, 32.0},
    {"gradiveq", "ZIPCCL_GRADIVEQ_EF=1", 32.0},
};
/* the commutative ring: linear codecs only (qsgd-int: 4 ranks err by at most 4/7, as qsgd) */
static const codec_cfg_t codecs_ring[] = {
    {"qsgd-int", NULL, 3.0},  {"qsgd-int", "ZIPCCL_QSGD_EF=1", 3.0},
    {"fp16", NULL, 0.01},     {"bf16", NULL, 0.1},
    {"gradiveq", NULL, 32.0}, {"gradiveq", "ZIPCCL_GRADIVEQ_EF=1", 32.0},
};

enum { SP_NAN, SP_PINF, SP_NINF, SP_HUGE, SP_DENORMAL, SP_COUNT };
static const char *const sp_names[SP_COUNT] = {"nan", "+inf", "-inf", "1e38", "denormal"};

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

/* Rank @p r's clean input of call @p call: values in [-1, 1], the same on every rank's view. */
static float input(int r, int call, size_t i)
{
    uint64_t h = mix64((uint64_t)r << 48 ^ (uint64_t)call << 32 ^ i);
    return (float)((double)(h >> 11) / 0x1p52 - 1.0);
}

/* The special value rank @p r puts at position @p i in call 1, or 0 for none. */
static int special(int sp, int r, size_t i, float *v)
{
    switch (sp) {
    case SP_NAN: *v = NAN; return r == 1 && i == POS;
    case SP_PINF: *v = INFINITY; return r == 2 && i == POS;
    case SP_NINF: *v = -INFINITY; return r == 3 && i == POS;
    case SP_HUGE: *v = 1e38f; return i == POS; /* 4e38: past FLT_MAX */
    default: *v = 1e-40f; return i % 97 == 0;
    }
}

static uint64_t fnv1a64(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    return h;
}

/* Every rank holds the same @p n hashes: one u64 max all-reduce of (h, ~h). */
static int same_everywhere(const uint64_t *h, size_t n, const char *what)
{
    uint64_t all[64];
    for (size_t k = 0; k < n; k++) {
        all[2 * k] = h[k];
        all[2 * k + 1] = ~h[k];
    }
    zc_status_t st = zc_allreduce(comm, all, all, 2 * n, ZC_DTYPE_U64, ZC_OP_MAX);
    CHECK(st == ZC_OK, "hash all-reduce: %s", zc_status_string(st));
    for (size_t k = 0; k < n; k++)
        CHECK(all[2 * k] == ~all[2 * k + 1], "%s, result %zu: the ranks' bytes differ", what, k);
    return 0;
}

static int start(int rank)
{
    my_rank = rank;
    zc_log_set_sink(capture_sink, NULL);
    zc_harness_step("zc_comm_init");
    zc_status_t st = zc_comm_init(&comm);
    CHECK(st == ZC_OK, "zc_comm_init: %s", zc_status_string(st));
    return 0;
}

static int finish(void)
{
    zc_harness_step("zc_comm_destroy");
    zc_comm_destroy(comm);
    return 0;
}

typedef struct matrix_arg {
    const codec_cfg_t *cfg;
    const char *algo;
} matrix_arg_t;

static int matrix_rank(int rank, int size, void *arg)
{
    const matrix_arg_t *m = arg;
    const char *name = m->cfg->codec;
    static float x[N], y[N];
    static double exact[N];
    uint64_t hashes[2 * SP_COUNT];

    if (start(rank))
        return 1;
    for (int sp = 0; sp < SP_COUNT; sp++) {
        const uint64_t key = 100 + (uint64_t)sp;
        /* call 0 (clean: GradiVeQ learns its basis, residuals fill), 1 (special), 2 (clean) */
        for (int call = 0; call < 3; call++) {
            zc_harness_step("%s %s call %d", name, sp_names[sp], call);
            memset(exact, 0, sizeof(exact));
            int nonfinite_sum = 0;
            for (int r = 0; r < size; r++) {
                for (size_t i = 0; i < N; i++) {
                    float v = input(r, call, i), s;
                    if (call == 1 && special(sp, r, i, &s))
                        v = s;
                    if (r == rank)
                        x[i] = v;
                    exact[i] += v;
                }
            }
            zc_status_t st = zc_allreduce_key(comm, x, y, N, ZC_DTYPE_F32, ZC_OP_SUM, key);
            CHECK(st == ZC_OK, "%s %s call %d: %s", name, sp_names[sp], call, zc_status_string(st));
            for (size_t i = 0; i < N; i++) {
                /* the exact sum's f32 value: 4e38 is +inf, as the uncompressed sum gives */
                float want = (float)exact[i];
                if (!isfinite(want)) {
                    nonfinite_sum = 1;
                    CHECK(isnan(want) ? isnan(y[i]) : y[i] == want,
                          "%s %s call %d: value %zu is %g, the exact sum %g", name, sp_names[sp],
                          call, i, y[i], want);
                    continue;
                }
                CHECK(isfinite(y[i]) && fabs(y[i] - exact[i]) <= m->cfg->tol,
                      "%s %s call %d: value %zu is %g, the exact sum %g (tolerance %g)", name,
                      sp_names[sp], call, i, y[i], exact[i], m->cfg->tol);
            }
            CHECK(nonfinite_sum == (call == 1 && sp != SP_DENORMAL), "the test's own inputs");
            if (call > 0)
                hashes[2 * sp + call - 1] = fnv1a64(y, sizeof(y));
        }
    }
    char what[96];
    snprintf(what, sizeof(what), "%s %s", name, m->algo);
    if (same_everywhere(hashes, 2 * SP_COUNT, what))
        return 1;
    return finish();
}

static void env_for(char (*buf)[96], const char *codec, const char *algo, const char *extra,
                    char **env)
{
    snprintf(buf[0], 96, "ZIPCCL_CODEC=%s", codec);
    snprintf(buf[1], 96, "ZIPCCL_ALGO=%s", algo);
    size_t k = 0;
    env[k++] = buf[0];
    env[k++] = buf[1];
    env[k++] = "ZIPCCL_MIN_BYTES=0";
    env[k++] = "ZIPCCL_SEED=7";
    env[k++] = "ZIPCCL_QSGD_BITS=4";
    env[k++] = "ZIPCCL_QSGD_SCALE=max";
    env[k++] = "ZIPCCL_TOPK_DENSITY=0.05";
    env[k++] = "ZIPCCL_GRADIVEQ_SLICE=16";
    env[k++] = "ZIPCCL_GRADIVEQ_DIM=4";
    env[k++] = "ZIPCCL_GRADIVEQ_WARMUP=1"; /* a basis from the first call on */
    env[k++] = "OPENBLAS_NUM_THREADS=1";
    if (extra)
        env[k++] = (char *)extra;
    env[k] = NULL;
}

/* The codecs @p algo runs: the ring takes linear ones only. */
static const codec_cfg_t *codecs_of(const char *algo, size_t *n_p)
{
    int ring = strcmp(algo, "ring") == 0;
    *n_p = ring ? sizeof(codecs_ring) / sizeof(codecs_ring[0])
                : sizeof(codecs_all) / sizeof(codecs_all[0]);
    return ring ? codecs_ring : codecs_all;
}

/* One 4-rank run of @p fn per codec that @p algo runs; @p what names the case in failures. */
static int run_each(const char *algo, zc_rank_main_fn fn, const char *what)
{
    size_t n;
    const codec_cfg_t *list = codecs_of(algo, &n);
    int failed = 0;
    for (size_t c = 0; c < n; c++) {
        char buf[2][96], *env[16];
        env_for(buf, list[c].codec, algo, list[c].extra, env);
        matrix_arg_t m = {&list[c], algo};
        zc_harness_opts_t o = {.nranks = NRANKS, .deadline_s = 120, .env = env};
        if (zc_harness_run(&o, fn, &m) != 0) {
            fprintf(stderr, "FAILED: %s, %s%s%s on %s\n", what, list[c].codec,
                    list[c].extra ? " " : "", list[c].extra ? list[c].extra : "", algo);
            failed = 1;
        }
    }
    return failed;
}

/* -------------------------------------------------------------- fp16 avg */

static int avg_rank(int rank, int size, void *arg)
{
    (void)size, (void)arg;
    static float x[N], y[N];
    if (start(rank))
        return 1;
    for (size_t i = 0; i < N; i++)
        x[i] = 40000.0f;
    for (int op = 0; op < 2; op++) {
        zc_redop_t redop = op ? ZC_OP_AVG : ZC_OP_SUM;
        float want = op ? 40000.0f : 80000.0f;
        zc_status_t st = zc_allreduce(comm, x, y, N, ZC_DTYPE_F32, redop);
        CHECK(st == ZC_OK, "%s: %s", zc_redop_name(redop), zc_status_string(st));
        for (size_t i = 0; i < N; i++)
            CHECK(y[i] == want, "%s of 40000 on 2 ranks: value %zu is %g", zc_redop_name(redop), i,
                  y[i]);
    }
    return finish();
}

static int run_fp16_avg(void)
{
    static const char *const algos[] = {"allgather", "scatter", "ring"};
    int failed = 0;
    for (size_t a = 0; a < 3; a++) {
        char buf[2][96], *env[16];
        env_for(buf, "fp16", algos[a], NULL, env);
        zc_harness_opts_t o = {.nranks = 2, .deadline_s = 60, .env = env};
        if (zc_harness_run(&o, avg_rank, NULL) != 0) {
            fprintf(stderr, "FAILED: fp16 on %s\n", algos[a]);
            failed = 1;
        }
    }
    return failed;
}

/* ----------------------------------------------------------- ef mismatch */

static int ef_rank(int rank, int size, void *arg)
{
    (void)size, (void)arg;
    static float x[N], y[N];
    setenv("ZIPCCL_QSGD_EF", rank == 0 ? "1" : "0", 1);
    if (start(rank))
        return 1;
    zc_status_t st = zc_allreduce(comm, x, y, N, ZC_DTYPE_F32, ZC_OP_SUM);
    CHECK(st == ZC_ERR_MISMATCH, "error feedback on rank 0 only: %s", zc_status_string(st));
    finish();
    return FAILED_AS_EXPECTED;
}

static int run_ef_mismatch(void)
{
    char buf[2][96], *env[16];
    env_for(buf, "qsgd", "allgather", NULL, env);
    zc_harness_opts_t o = {.nranks = NRANKS,
                           .deadline_s = 60,
                           .env = env,
                           .expect_fail_mask = (1ul << NRANKS) - 1,
                           .expect_fail_status = FAILED_AS_EXPECTED};
    return zc_harness_run(&o, ef_rank, NULL) != 0;
}

/* ------------------------------------------------------------- mixed cpu */

static const char *self_exe;

/* In the exec'd rank: 3 calls of each of 2 tensors; the results' bytes on every rank. */
static int mixed_child(void)
{
    static float x[N], y[N];
    uint64_t hashes[6];
    int rank = atoi(getenv("ZIPCCL_RANK"));
    if (start(rank))
        return 1;
    for (int t = 0; t < 2; t++) {
        for (int call = 0; call < 3; call++) {
            for (size_t i = 0; i < N; i++)
                x[i] = input(rank, 10 * t + call, i) * (t ? 1e-3f : 1.0f);
            zc_status_t st =
                zc_allreduce_key(comm, x, y, N, ZC_DTYPE_F32, ZC_OP_SUM, 200 + (uint64_t)t);
            CHECK(st == ZC_OK, "call %d: %s", call, zc_status_string(st));
            hashes[3 * t + call] = fnv1a64(y, sizeof(y));
        }
    }
    if (same_everywhere(hashes, 6, getenv("ZIPCCL_CODEC")))
        return 1;
    return finish();
}

/* Each rank its own CPU level and BLAS kernel; OpenBLAS reads its variable when loaded: exec. */
static int mixed_rank(int rank, int size, void *arg)
{
    (void)size, (void)arg;
    static const char *const cpus[NRANKS] = {"scalar", "avx2", "avx512", "auto"};
    static const char *const cores[NRANKS] = {"Prescott", "Haswell", "SkylakeX", "Sandybridge"};
    setenv("ZIPCCL_CPU", cpus[rank], 1);
    setenv("OPENBLAS_CORETYPE", cores[rank], 1);
    execl(self_exe, self_exe, "mixed-child", (char *)NULL);
    return 127;
}

int main(int argc, char **argv)
{
    static char exe[4096];
    ssize_t len = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (len <= 0)
        return 1;
    exe[len] = '\0';
    self_exe = exe;
    if (argc != 2) {
        fprintf(stderr, "usage: %s matrix-<algo>|fp16-avg|ef-mismatch|mixed-<algo>\n", argv[0]);
        return 2;
    }
    const char *c = argv[1];
    if (strcmp(c, "mixed-child") == 0)
        return mixed_child();
    if (strncmp(c, "matrix-", 7) == 0)
        return run_each(c + 7, matrix_rank, "non-finite matrix");
    if (strncmp(c, "mixed-", 6) == 0)
        return run_each(c + 6, mixed_rank, "mixed cpus");
    if (strcmp(c, "fp16-avg") == 0)
        return run_fp16_avg();
    if (strcmp(c, "ef-mismatch") == 0)
        return run_ef_mismatch();
    fprintf(stderr, "unknown case %s\n", c);
    return 2;
}
