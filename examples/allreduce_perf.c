/*
 * allreduce_perf: zc_allreduce bandwidth, in the layout of nccl-tests' all_reduce_perf.
 *
 *   allreduce_perf -N 4 -b 8 -e 64M -f 4 -c none,qsgd,topk,gradiveq
 *
 * One table per codec of -c: for each size from -b to -e (times -f each step), the mean time
 * of -n timed calls after -w warm-up calls (the slowest rank's mean), the algorithm bandwidth
 * (size / time), the bus bandwidth (algbw * 2(N-1)/N, what a ring moves per rank, as
 * nccl-tests defines it), the wire ratio (bytes every rank sent over what the uncompressed
 * ring would have sent for the same calls, from zc_comm_stats) and the error of the last
 * call against the exact result computed in double by rank 0 from every rank's input (inputs
 * are a deterministic function of rank and index). For floating types the error is the
 * largest |result - exact| over the largest |exact|; for integers, the number of wrong
 * elements. With error-feedback codecs (topk, ZIPCCL_QSGD_EF) a call also sends what earlier
 * calls held back, so the column shows one step's deviation, not a bias.
 *
 * Ranks: -N n forks n local ranks with ZIPCCL_RANK, ZIPCCL_SIZE, ZIPCCL_ROOT (127.0.0.1 and a
 * free port) and ZIPCCL_JOB_ID set; without -N the process is one rank of a job started by a
 * launcher (mpirun, torchrun, srun or ZIPCCL_* variables, see docs/env-vars.md). A codec of
 * -c is applied by setting ZIPCCL_CODEC before the communicator of its table is created; -a
 * sets ZIPCCL_ALGO likewise. Every other ZIPCCL_* variable (ZIPCCL_MIN_BYTES, bits, density)
 * comes from the environment.
 */
#include <zipccl/zipccl.h>

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct options {
    size_t min_bytes, max_bytes;
    double factor;
    int iters, warmup;
    zc_dtype_t dtype;
    zc_redop_t op;
    char codecs[512]; /* comma-separated; "" keeps ZIPCCL_CODEC */
    const char *algo; /* NULL keeps ZIPCCL_ALGO */
    int nranks;       /* -N; 0: ranks come from a launcher */
} options_t;

/* nccl-tests' type names first, then zipccl's. */
static const struct {
    const char *name;
    zc_dtype_t dtype;
} type_names[] = {
    {"float", ZC_DTYPE_F32},  {"half", ZC_DTYPE_F16},   {"bfloat16", ZC_DTYPE_BF16},
    {"double", ZC_DTYPE_F64}, {"int8", ZC_DTYPE_I8},    {"uint8", ZC_DTYPE_U8},
    {"int32", ZC_DTYPE_I32},  {"int", ZC_DTYPE_I32},    {"uint32", ZC_DTYPE_U32},
    {"int64", ZC_DTYPE_I64},  {"uint64", ZC_DTYPE_U64},
};

static const char *type_label(zc_dtype_t dtype)
{
    for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++)
        if (type_names[i].dtype == dtype)
            return type_names[i].name;
    return zc_dtype_name(dtype);
}

static int parse_type(const char *s, zc_dtype_t *dtype_p)
{
    for (size_t i = 0; i < sizeof(type_names) / sizeof(type_names[0]); i++) {
        if (strcmp(s, type_names[i].name) == 0) {
            *dtype_p = type_names[i].dtype;
            return 0;
        }
    }
    for (int d = 0; d < ZC_DTYPE_COUNT; d++) {
        if (strcmp(s, zc_dtype_name((zc_dtype_t)d)) == 0) {
            *dtype_p = (zc_dtype_t)d;
            return 0;
        }
    }
    return -1;
}

static int parse_op(const char *s, zc_redop_t *op_p)
{
    for (int o = 0; o < ZC_OP_COUNT; o++) {
        if (strcmp(s, zc_redop_name((zc_redop_t)o)) == 0) {
            *op_p = (zc_redop_t)o;
            return 0;
        }
    }
    return -1;
}

/* "8", "64K", "256M", "1G" (binary multiples, as nccl-tests reads them). */
static int parse_size(const char *s, size_t *bytes_p)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return -1;
    unsigned shift = 0;
    switch (*end) {
    case '\0': break;
    case 'k':
    case 'K': shift = 10; break;
    case 'm':
    case 'M': shift = 20; break;
    case 'g':
    case 'G': shift = 30; break;
    default: return -1;
    }
    if (*end && end[1] != '\0')
        return -1;
    if (v > (SIZE_MAX >> shift))
        return -1;
    *bytes_p = (size_t)v << shift;
    return 0;
}

static void usage(FILE *f, const char *prog)
{
    fprintf(f,
            "usage: %s [-N nranks] [-b minbytes] [-e maxbytes] [-f factor] [-n iters] [-w warmup]\n"
            "          [-d type] [-o op] [-c codec,codec,...] [-a algo]\n"
            "  -N  fork this many local ranks (default: one rank of a launcher's job)\n"
            "  -b  smallest size in bytes (8); K, M, G suffixes\n"
            "  -e  largest size in bytes (256M)\n"
            "  -f  size factor between rows (2)\n"
            "  -n  timed calls per size (20)\n"
            "  -w  warm-up calls per size (5)\n"
            "  -d  float half bfloat16 double int8 uint8 int32 uint32 int64 uint64 (float)\n"
            "  -o  sum prod min max avg (sum)\n"
            "  -c  codecs, one table each: none qsgd fp16 bf16 topk gradiveq auto\n"
            "      (default: ZIPCCL_CODEC as set)\n"
            "  -a  algorithm: auto ring allgather scatter (default: ZIPCCL_ALGO as set)\n",
            prog);
}

static int parse_args(int argc, char **argv, options_t *o)
{
    int c;
    *o = (options_t){.min_bytes = 8,
                     .max_bytes = 256u << 20,
                     .factor = 2,
                     .iters = 20,
                     .warmup = 5,
                     .dtype = ZC_DTYPE_F32,
                     .op = ZC_OP_SUM};
    while ((c = getopt(argc, argv, "N:b:e:f:n:w:d:o:c:a:h")) != -1) {
        char *end = NULL;
        switch (c) {
        case 'N':
            o->nranks = (int)strtol(optarg, &end, 10);
            if (*end || o->nranks < 1 || o->nranks > 1024) {
                fprintf(stderr, "-N %s: expected 1..1024 ranks\n", optarg);
                return -1;
            }
            break;
        case 'b':
        case 'e':
            if (parse_size(optarg, c == 'b' ? &o->min_bytes : &o->max_bytes) != 0) {
                fprintf(stderr, "-%c %s: expected a size such as 8, 64K, 256M\n", c, optarg);
                return -1;
            }
            break;
        case 'f':
            o->factor = strtod(optarg, &end);
            if (*end || !(o->factor > 1)) {
                fprintf(stderr, "-f %s: expected a factor above 1\n", optarg);
                return -1;
            }
            break;
        case 'n':
        case 'w': {
            long v = strtol(optarg, &end, 10);
            if (*end || v < (c == 'n' ? 1 : 0) || v > 1000000) {
                fprintf(stderr, "-%c %s: expected %s..1000000\n", c, optarg, c == 'n' ? "1" : "0");
                return -1;
            }
            *(c == 'n' ? &o->iters : &o->warmup) = (int)v;
            break;
        }
        case 'd':
            if (parse_type(optarg, &o->dtype) != 0) {
                fprintf(stderr, "-d %s: unknown type\n", optarg);
                return -1;
            }
            break;
        case 'o':
            if (parse_op(optarg, &o->op) != 0) {
                fprintf(stderr, "-o %s: unknown operation\n", optarg);
                return -1;
            }
            break;
        case 'c':
            if (strlen(optarg) >= sizeof(o->codecs)) {
                fprintf(stderr, "-c: list too long\n");
                return -1;
            }
            strcpy(o->codecs, optarg);
            break;
        case 'a': o->algo = optarg; break;
        case 'h': usage(stdout, argv[0]); exit(0);
        default: return -1;
        }
    }
    if (optind != argc) {
        fprintf(stderr, "unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->min_bytes > o->max_bytes) {
        fprintf(stderr, "-b %zu is above -e %zu\n", o->min_bytes, o->max_bytes);
        return -1;
    }
    return 0;
}

/* ---- inputs and the exact result ----------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

static int is_float(zc_dtype_t dt)
{
    return dt == ZC_DTYPE_F32 || dt == ZC_DTYPE_F64 || dt == ZC_DTYPE_F16 || dt == ZC_DTYPE_BF16;
}

static int is_signed(zc_dtype_t dt)
{
    return dt == ZC_DTYPE_I8 || dt == ZC_DTYPE_I32 || dt == ZC_DTYPE_I64;
}

/* f32 to f16 / bf16, round to nearest even (inputs here are finite and normal or zero). */
static uint16_t to_bf16(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

static float from_bf16(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint16_t to_f16(float f)
{
    /* values here lie in [-1.1, 1.1]: normal f16 or below, where the subnormal step is 2^-24 */
    uint32_t u;
    memcpy(&u, &f, 4);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000u);
    float a = fabsf(f);
    if (a < 0x1p-14f) {
        /* subnormal: a multiple of 2^-24, rounded to nearest even by the FPU */
        return (uint16_t)(sign | (uint16_t)lrintf(a * 0x1p24f));
    }
    int e;
    float m = frexpf(a, &e);      /* a = m 2^e, m in [0.5, 1) */
    long q = lrintf(m * 2048.0f); /* 11 significant bits */
    if (q == 2048) {
        q = 1024;
        e++;
    }
    return (uint16_t)(sign | (uint16_t)((e + 14) << 10) | (uint16_t)(q - 1024));
}

static float from_f16(uint16_t h)
{
    int e = (h >> 10) & 0x1f, m = h & 0x3ff;
    float v = e == 0 ? ldexpf((float)m, -24) : ldexpf((float)(m + 1024), e - 25);
    return h & 0x8000u ? -v : v;
}

/* The input of @p rank at @p i, as the value stored in the buffer (double or integer bits). */
static double input_float(zc_dtype_t dt, zc_redop_t op, int rank, size_t i)
{
    uint64_t h = mix64(((uint64_t)rank << 40) ^ (uint64_t)i ^ 0x5DEECE66Dull);
    double u = (double)(h >> 11) * 0x1p-53 * 2 - 1; /* [-1, 1) */
    /* products stay near 1 so that they neither overflow nor vanish with many ranks */
    float f = (float)(op == ZC_OP_PROD ? 1 + u / 64 : u);
    if (dt == ZC_DTYPE_F16)
        return from_f16(to_f16(f));
    if (dt == ZC_DTYPE_BF16)
        return from_bf16(to_bf16(f));
    return dt == ZC_DTYPE_F64 ? (op == ZC_OP_PROD ? 1 + u / 64 : u) : f;
}

static uint64_t input_int(zc_dtype_t dt, int rank, size_t i)
{
    uint64_t h = mix64(((uint64_t)rank << 40) ^ (uint64_t)i ^ 0x5DEECE66Dull);
    return is_signed(dt) ? (uint64_t)((int64_t)(h % 17) - 8) : h % 17;
}

static void fill(zc_dtype_t dt, zc_redop_t op, void *buf, size_t count, int rank)
{
    size_t bytes = zc_dtype_bytes(dt);
    for (size_t i = 0; i < count; i++) {
        char *p = (char *)buf + i * bytes;
        if (dt == ZC_DTYPE_F32) {
            float f = (float)input_float(dt, op, rank, i);
            memcpy(p, &f, 4);
        } else if (dt == ZC_DTYPE_F64) {
            double d = input_float(dt, op, rank, i);
            memcpy(p, &d, 8);
        } else if (dt == ZC_DTYPE_F16 || dt == ZC_DTYPE_BF16) {
            float f = (float)input_float(dt, op, rank, i);
            uint16_t h = dt == ZC_DTYPE_F16 ? to_f16(f) : to_bf16(f);
            memcpy(p, &h, 2);
        } else {
            uint64_t v = input_int(dt, rank, i);
            memcpy(p, &v, bytes); /* little-endian */
        }
    }
}

static double load_float(zc_dtype_t dt, const void *buf, size_t i)
{
    const char *p = buf;
    if (dt == ZC_DTYPE_F32) {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    if (dt == ZC_DTYPE_F64) {
        double d;
        memcpy(&d, p + 8 * i, 8);
        return d;
    }
    uint16_t h;
    memcpy(&h, p + 2 * i, 2);
    return dt == ZC_DTYPE_F16 ? from_f16(h) : from_bf16(h);
}

/*
 * The error of @p result against the exact reduction of every rank's input: for floating
 * types max |result - exact| / max |exact| (0 when both are 0), for integers the number of
 * wrong elements (sums and products wrap, averages truncate the wrapped sum toward zero).
 */
static double result_error(zc_dtype_t dt, zc_redop_t op, const void *result, size_t count,
                           int nranks)
{
    size_t bytes = zc_dtype_bytes(dt);
    uint64_t mask = bytes == 8 ? ~UINT64_C(0) : (UINT64_C(1) << (8 * bytes)) - 1;
    unsigned shift = 64 - 8 * (unsigned)bytes;
    double max_err = 0, max_ref = 0, wrong = 0;
    for (size_t i = 0; i < count; i++) {
        if (is_float(dt)) {
            double ref = op == ZC_OP_PROD  ? 1
                         : op == ZC_OP_MIN ? INFINITY
                         : op == ZC_OP_MAX ? -INFINITY
                                           : 0;
            for (int r = 0; r < nranks; r++) {
                double x = input_float(dt, op, r, i);
                ref = op == ZC_OP_PROD  ? ref * x
                      : op == ZC_OP_MIN ? fmin(ref, x)
                      : op == ZC_OP_MAX ? fmax(ref, x)
                                        : ref + x;
            }
            if (op == ZC_OP_AVG)
                ref /= nranks;
            max_err = fmax(max_err, fabs(load_float(dt, result, i) - ref));
            max_ref = fmax(max_ref, fabs(ref));
        } else {
            uint64_t ref = 0, got = 0;
            for (int r = 0; r < nranks; r++) {
                uint64_t x = input_int(dt, r, i) & mask;
                int64_t sx = (int64_t)(x << shift) >> shift,
                        sref = (int64_t)(ref << shift) >> shift;
                if (r == 0)
                    ref = x;
                else if (op == ZC_OP_PROD)
                    ref *= x;
                else if (op == ZC_OP_MIN)
                    ref = (is_signed(dt) ? sx < sref : x < ref) ? x : ref;
                else if (op == ZC_OP_MAX)
                    ref = (is_signed(dt) ? sx > sref : x > ref) ? x : ref;
                else
                    ref += x;
                ref &= mask;
            }
            if (op == ZC_OP_AVG)
                ref = is_signed(dt) ? (uint64_t)(((int64_t)(ref << shift) >> shift) / nranks)
                                    : ref / (uint64_t)nranks;
            memcpy(&got, (const char *)result + i * bytes, bytes);
            wrong += (got & mask) != (ref & mask);
        }
    }
    if (!is_float(dt))
        return wrong;
    return max_ref > 0 ? max_err / max_ref : max_err;
}

/* ---- one table ----------------------------------------------------------------------------- */

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Prints which of zc_allreduce's errors failed a call and returns 1. */
static int failed(int rank, const char *what, size_t bytes, zc_status_t status)
{
    fprintf(stderr, "allreduce_perf: rank %d: %s of %zu bytes: %s\n", rank, what, bytes,
            zc_status_string(status));
    return 1;
}

/* Whether @p cfg's codec keeps a residual between calls (top-k always; QSGD and GradiVeQ on
 * request). */
static int error_feedback(const zc_comm_config_t *cfg)
{
    char codec[32], ef[8];
    zc_comm_config_get(cfg, "ZIPCCL_CODEC", codec, sizeof(codec));
    if (strcmp(codec, "topk") == 0)
        return 1;
    if (strcmp(codec, "qsgd") == 0 || strcmp(codec, "gradiveq") == 0) {
        zc_comm_config_get(cfg,
                           strcmp(codec, "qsgd") == 0 ? "ZIPCCL_QSGD_EF" : "ZIPCCL_GRADIVEQ_EF", ef,
                           sizeof(ef));
        return strcmp(ef, "1") == 0;
    }
    return 0;
}

static int sweep(const options_t *o, const zc_comm_config_t *cfg, const char *codec_label)
{
    zc_comm_t *comm;
    zc_status_t status = zc_comm_init_config(cfg, &comm);
    if (status != ZC_OK) {
        fprintf(stderr, "allreduce_perf: zc_comm_init: %s\n", zc_status_string(status));
        return 1;
    }
    int rank = zc_comm_rank(comm), n = zc_comm_size(comm), rc = 0;
    size_t tsize = zc_dtype_bytes(o->dtype);
    size_t max_count = o->max_bytes / tsize;
    void *send = malloc(max_count * tsize + 1), *recv = malloc(max_count * tsize + 1);
    if (!send || !recv) {
        fprintf(stderr, "allreduce_perf: rank %d: out of memory for 2 x %zu bytes\n", rank,
                o->max_bytes);
        rc = 1;
        goto out;
    }
    fill(o->dtype, o->op, send, max_count, rank);

    const char *algo = getenv("ZIPCCL_ALGO"), *min = getenv("ZIPCCL_MIN_BYTES");
    if (rank == 0) {
        printf("# zipccl allreduce_perf: %d ranks, codec %s, algo %s, ZIPCCL_MIN_BYTES %s\n", n,
               codec_label, algo && *algo ? algo : "auto", min && *min ? min : "64KiB (default)");
        printf("# %d timed calls after %d warm-up calls per size; time: the slowest rank's mean\n",
               o->iters, o->warmup);
        printf("#\n");
        printf("# %10s  %12s  %8s  %6s  %10s  %7s  %7s  %6s  %8s\n", "size", "count", "type",
               "redop", "time", "algbw", "busbw", "wire", is_float(o->dtype) ? "maxrel" : "#wrong");
        printf("# %10s  %12s  %8s  %6s  %10s  %7s  %7s  %6s  %8s\n", "(B)", "(elements)", "", "",
               "(us)", "(GB/s)", "(GB/s)", "ratio", "error");
        fflush(stdout);
    }

    double bus_sum = 0;
    int rows = 0;
    for (double size = (double)o->min_bytes; size <= (double)o->max_bytes; size *= o->factor) {
        size_t count = (size_t)size / tsize, bytes = count * tsize;
        zc_stats_t before, after;
        for (int k = 0; k < o->warmup; k++) {
            status = zc_allreduce(comm, send, recv, count, o->dtype, o->op);
            if (status != ZC_OK) {
                rc = failed(rank, "warm-up all-reduce", bytes, status);
                goto out;
            }
        }
        zc_comm_stats(comm, &before);
        double start = now_s();
        for (int k = 0; k < o->iters; k++) {
            status = zc_allreduce(comm, send, recv, count, o->dtype, o->op);
            if (status != ZC_OK) {
                rc = failed(rank, "all-reduce", bytes, status);
                goto out;
            }
        }
        double mean_s = (now_s() - start) / o->iters;
        zc_comm_stats(comm, &after);

        /* the slowest rank's mean, and the bytes every rank sent against the raw ring's */
        uint64_t wire[2] = {after.bytes_wire - before.bytes_wire,
                            after.bytes_wire_raw - before.bytes_wire_raw};
        status = zc_allreduce(comm, &mean_s, &mean_s, 1, ZC_DTYPE_F64, ZC_OP_MAX);
        if (status == ZC_OK)
            status = zc_allreduce(comm, wire, wire, 2, ZC_DTYPE_U64, ZC_OP_SUM);
        if (status != ZC_OK) {
            rc = failed(rank, "all-reduce of the measurements", 16, status);
            goto out;
        }
        if (rank == 0) {
            double algbw = mean_s > 0 ? (double)bytes / mean_s / 1e9 : 0;
            double busbw = algbw * 2 * (n - 1) / n;
            double err = result_error(o->dtype, o->op, recv, count, n);
            char ratio[16];
            if (wire[1] > 0)
                snprintf(ratio, sizeof(ratio), "%6.3f", (double)wire[0] / (double)wire[1]);
            else
                snprintf(ratio, sizeof(ratio), "%6s", "-"); /* nothing would move: 1 rank */
            if (is_float(o->dtype))
                printf("  %10zu  %12zu  %8s  %6s  %10.2f  %7.2f  %7.2f  %6s  %8.1e\n", bytes, count,
                       type_label(o->dtype), zc_redop_name(o->op), mean_s * 1e6, algbw, busbw,
                       ratio, err);
            else
                printf("  %10zu  %12zu  %8s  %6s  %10.2f  %7.2f  %7.2f  %6s  %8.0f\n", bytes, count,
                       type_label(o->dtype), zc_redop_name(o->op), mean_s * 1e6, algbw, busbw,
                       ratio, err);
            fflush(stdout);
        }
        bus_sum += (double)bytes / (mean_s > 0 ? mean_s : 1) / 1e9 * 2 * (n - 1) / n;
        rows++;
        if (size * o->factor == size)
            break;
    }
    if (rank == 0) {
        printf("# Avg bus bandwidth    : %.4f GB/s\n", rows ? bus_sum / rows : 0);
        if (error_feedback(cfg))
            printf("# %s runs with error feedback: every call also sends what earlier calls held\n"
                   "# back, so one call's error is not an estimate of that call's sum\n",
                   codec_label);
        printf("#\n\n");
        fflush(stdout);
    }
out:
    free(send);
    free(recv);
    zc_comm_destroy(comm);
    return rc;
}

/*
 * One table per codec of -c, each on a communicator of its own, with the
 * environment's settings, then @p settings (NAME, VALUE pairs, NULL-ended:
 * the ranks of -N), then -a and -c.
 */
static int run_rank(const options_t *o, const char *const *settings)
{
    zc_comm_config_t *cfg = NULL;
    zc_status_t st = zc_comm_config_create(1, &cfg);
    for (; st == ZC_OK && settings && settings[0]; settings += 2)
        st = zc_comm_config_set(cfg, settings[0], settings[1]);
    if (st == ZC_OK && o->algo)
        st = zc_comm_config_set(cfg, "ZIPCCL_ALGO", o->algo);
    int rc = st != ZC_OK;
    if (rc)
        fprintf(stderr, "allreduce_perf: configuration: %s\n", zc_status_string(st));
    else if (!o->codecs[0]) {
        char codec[32];
        zc_comm_config_get(cfg, "ZIPCCL_CODEC", codec, sizeof(codec));
        rc = sweep(o, cfg, codec);
    } else {
        char list[sizeof(o->codecs)], *save = NULL;
        strcpy(list, o->codecs);
        for (char *codec = strtok_r(list, ",", &save); codec && !rc;
             codec = strtok_r(NULL, ",", &save)) {
            st = zc_comm_config_set(cfg, "ZIPCCL_CODEC", codec);
            rc = st != ZC_OK || sweep(o, cfg, codec) != 0;
        }
    }
    zc_comm_config_destroy(cfg);
    return rc;
}

/* ---- -N: local ranks ----------------------------------------------------------------------- */

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

/*
 * Forks the ranks and waits for them. When one fails the others are killed rather than left
 * to wait ZIPCCL_TIMEOUT_S for it.
 */
static int run_local(const options_t *o)
{
    int n = o->nranks, port = free_port(), rc = 0;
    pid_t parent = getpid(), *pids = calloc((size_t)n, sizeof(pid_t));
    if (port < 0 || !pids) {
        fprintf(stderr, "allreduce_perf: %s\n",
                pids ? "no free port on 127.0.0.1" : "out of memory");
        free(pids);
        return 1;
    }
    fflush(NULL);
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "allreduce_perf: fork of rank %d: %s\n", r, strerror(errno));
            rc = 1;
            break;
        }
        if (pid == 0) {
            char rank_s[16], size_s[16], root[64], job[64];
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            snprintf(rank_s, sizeof(rank_s), "%d", r);
            snprintf(size_s, sizeof(size_s), "%d", n);
            snprintf(root, sizeof(root), "127.0.0.1:%d", port);
            snprintf(job, sizeof(job), "allreduce_perf-%ld-%d", (long)parent, port);
            const char *const settings[] = {"ZIPCCL_RANK",   rank_s,        "ZIPCCL_SIZE",
                                            size_s,          "ZIPCCL_ROOT", root,
                                            "ZIPCCL_JOB_ID", job,           NULL};
            int status = run_rank(o, settings);
            fflush(NULL);
            _exit(status);
        }
        pids[r] = pid;
    }
    for (int left = n; left > 0;) {
        int ws;
        pid_t pid = wait(&ws);
        if (pid < 0)
            break;
        int r = 0;
        while (r < n && pids[r] != pid)
            r++;
        if (r == n)
            continue;
        pids[r] = 0;
        left--;
        if (WIFEXITED(ws) && WEXITSTATUS(ws) == 0)
            continue;
        if (WIFSIGNALED(ws))
            fprintf(stderr, "allreduce_perf: rank %d killed by signal %d\n", r, WTERMSIG(ws));
        else
            fprintf(stderr, "allreduce_perf: rank %d exited with status %d\n", r, WEXITSTATUS(ws));
        if (rc == 0) {
            for (int k = 0; k < n; k++)
                if (pids[k] > 0)
                    kill(pids[k], SIGKILL);
        }
        rc = 1;
    }
    free(pids);
    return rc;
}

int main(int argc, char **argv)
{
    options_t o;
    if (parse_args(argc, argv, &o) != 0) {
        usage(stderr, argv[0]);
        return 2;
    }
    if (o.max_bytes / zc_dtype_bytes(o.dtype) == 0) {
        fprintf(stderr, "allreduce_perf: -e %zu is smaller than one %s\n", o.max_bytes,
                type_label(o.dtype));
        return 2;
    }
    return o.nranks > 0 ? run_local(&o) : run_rank(&o, NULL);
}
