/*
 * ring_mpi: zipccl's raw ring all-reduce (ZIPCCL_CODEC=none) against Open
 * MPI's MPI_Allreduce, measured in the same run on the same buffers, as a
 * ratio. Run it (no make needed; meson builds it when Open MPI is found):
 *
 *   meson setup build && ninja -C build bench/ring_mpi
 *   mpirun -np 4 --oversubscribe --allow-run-as-root build/bench/ring_mpi
 *
 *   ring_mpi [-b MIN] [-e MAX] [-f FACTOR] [--sizes LIST] [-n ITERS] [-w WARMUP]
 *            [--peer-errors 0|1|both] [--inplace]
 *
 * Sizes are bytes of f32 (KiB/MiB/GiB suffixes), from -b (64KiB) to -e
 * (256MiB) times -f (4), or the comma-separated --sizes. For each size the
 * program checks both results once against the exact sum, then runs -w
 * warm-up rounds and -n timed rounds (by default as many as fit in about
 * 2 GiB of data, 5 to 100), each round one MPI_Allreduce and one zc_allreduce
 * of each communicator, alternating, each after a barrier. A call's time is the
 * slowest rank's; the table gives the median over rounds, the bus bandwidth
 * 2 (N-1)/N * bytes / time (nccl-tests' busbw: what each rank's link carries)
 * and the ratio zipccl rate / MPI rate (>= 1: zipccl is faster). The results
 * of the last round are checked again.
 *
 * zipccl's communicators are built with zc_comm_init_bootstrap over
 * MPI_Allgather / MPI_Bcast / MPI_Barrier. --peer-errors both (the default)
 * builds two: ZIPCCL_UCX_PEER_ERRORS=1 (UCX peer error handling, which in UCX
 * 1.13 limits ranks on one host to tcp loopback) and =0 (shared memory and
 * CMA, as Open MPI's vader uses); ZIPCCL_CHUNK_BYTES and UCX_* variables apply
 * to both. The first lines printed are the reduction kernel's speed next to
 * memcpy's on rank 0 (the ring's compute bound).
 */
#include "collectives/reduce.h"
#include "common/config.h"
#include "mpi_bench.h"

#include <zipccl/zipccl.h>

#include <mpi.h>

#include <inttypes.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 64
#define MAX_COMMS 2

typedef struct options {
    size_t sizes[MAX_SIZES];
    int nsizes;
    int iters, warmup; /* 0: by size */
    int peer_errors;   /* 0, 1, or 2 for both */
    int inplace;
} options_t;

/* A raw-ring communicator of every rank (no codec, whatever the environment says). */
static zc_comm_t *comm_create(int peer_errors)
{
    const char *const settings[] = {"ZIPCCL_CODEC", "none", "ZIPCCL_UCX_PEER_ERRORS",
                                    peer_errors ? "1" : "0", NULL};
    return bench_mpi_comm("ring_mpi", settings);
}

/* ---- data -------------------------------------------------------------------------------------
 */

/* Small integers: every partial sum is exact in f32, so the result has one right answer. */
static float input_value(size_t i, int rank)
{
    return (float)((i * 7 + (size_t)rank * 13) % 61) - 30.0f;
}

static void fill_input(float *x, size_t n, int rank)
{
    for (size_t i = 0; i < n; i++)
        x[i] = input_value(i, rank);
}

/* Values of @p got that differ from the exact sum over @p size ranks. */
static size_t count_wrong(const float *got, size_t n, int size)
{
    size_t wrong = 0;
    for (size_t i = 0; i < n; i++) {
        float want = 0;
        for (int r = 0; r < size; r++)
            want += input_value(i, r);
        wrong += got[i] != want;
    }
    return wrong;
}

/* One call of MPI (comm NULL) or zipccl, after a barrier; its local time in seconds. */
static double timed_call(zc_comm_t *comm, const float *send, float *recv, size_t n, int *failed)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    if (comm) {
        zc_status_t st = zc_allreduce(comm, send, recv, n, ZC_DTYPE_F32, ZC_OP_SUM);
        if (st != ZC_OK) {
            fprintf(stderr, "ring_mpi: zc_allreduce of %zu values: %s\n", n, zc_status_string(st));
            *failed = 1;
        }
    } else {
        int rc = MPI_Allreduce(send == recv ? MPI_IN_PLACE : send, recv, (int)n, MPI_FLOAT, MPI_SUM,
                               MPI_COMM_WORLD);
        if (rc != MPI_SUCCESS)
            *failed = 1;
    }
    return MPI_Wtime() - t;
}

static int iters_for(const options_t *o, size_t bytes)
{
    if (o->iters > 0)
        return o->iters;
    size_t it = ((size_t)2 << 30) / (bytes ? bytes : 1);
    return (int)(it < 5 ? 5 : it > 100 ? 100 : it);
}

/* ---- the kernel baseline ----------------------------------------------------------------------
 */

/* Rank 0: the f32 sum kernel (dst = a + b, 3 streams) against memcpy (2 streams) on 64 MiB. */
static void kernel_baseline(void)
{
    const size_t n = (size_t)16 << 20;
    float *a = malloc(n * 4), *b = malloc(n * 4), *o = malloc(n * 4);
    double best_red = 1e30, best_red2 = 1e30, best_cpy = 1e30;

    if (!a || !b || !o)
        goto out;
    fill_input(a, n, 0);
    fill_input(b, n, 1);
    memset(o, 0, n * 4);
    for (int r = 0; r < 5; r++) {
        double t = MPI_Wtime();
        zc_reduce_apply3(ZC_DTYPE_F32, ZC_OP_SUM, o, a, b, n);
        t = MPI_Wtime() - t;
        best_red = t < best_red ? t : best_red;
        t = MPI_Wtime();
        zc_reduce_apply(ZC_DTYPE_F32, ZC_OP_SUM, o, b, n);
        t = MPI_Wtime() - t;
        best_red2 = t < best_red2 ? t : best_red2;
        t = MPI_Wtime();
        memcpy(o, a, n * 4);
        t = MPI_Wtime() - t;
        best_cpy = t < best_cpy ? t : best_cpy;
    }
    printf("# kernel, 64 MiB f32 on rank 0: zc_reduce_apply3 (o = a + b) %.1f GB/s, "
           "zc_reduce_apply (d += s) %.1f GB/s, memcpy %.1f GB/s (bytes read + written / s)\n",
           3 * n * 4 / best_red / 1e9, 3 * n * 4 / best_red2 / 1e9, 2 * n * 4 / best_cpy / 1e9);
out:
    free(a);
    free(b);
    free(o);
}

/* ---- main -------------------------------------------------------------------------------------
 */

static int parse_size(const char *text, size_t *v_p)
{
    zc_param_desc_t desc = {.kind = ZC_PARAM_KIND_SIZE, .min = 0, .max = INT64_MAX};
    int64_t v;
    if (zc_param_parse(&desc, text, &v) != ZC_OK)
        return -1;
    *v_p = (size_t)v;
    return 0;
}

static int parse_list(const char *text, options_t *o)
{
    char copy[1024];
    o->nsizes = 0;
    snprintf(copy, sizeof(copy), "%s", text);
    for (char *t = strtok(copy, ","); t; t = strtok(NULL, ",")) {
        if (o->nsizes == MAX_SIZES || parse_size(t, &o->sizes[o->nsizes]) != 0)
            return -1;
        o->nsizes++;
    }
    return o->nsizes > 0 ? 0 : -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mpirun -np N ring_mpi [-b MIN] [-e MAX] [-f FACTOR] [--sizes LIST]\n"
               "                           [-n ITERS] [-w WARMUP] [--peer-errors 0|1|both]"
               " [--inplace]\n"
               "  sizes in bytes of f32 with optional KiB/MiB/GiB suffixes;"
               " defaults -b 64KiB -e 256MiB -f 4\n");
}

static int parse_args(int argc, char **argv, options_t *o)
{
    size_t lo = (size_t)64 << 10, hi = (size_t)256 << 20, factor = 4;
    int list = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int bad = 0;
        if (strcmp(a, "--inplace") == 0) {
            o->inplace = 1;
            continue;
        }
        if (!v)
            return -1;
        i++;
        if (strcmp(a, "-b") == 0)
            bad = parse_size(v, &lo);
        else if (strcmp(a, "-e") == 0)
            bad = parse_size(v, &hi);
        else if (strcmp(a, "-f") == 0)
            bad = parse_size(v, &factor) || factor < 2;
        else if (strcmp(a, "--sizes") == 0)
            bad = parse_list(v, o), list = 1;
        else if (strcmp(a, "-n") == 0)
            bad = (o->iters = atoi(v)) < 1;
        else if (strcmp(a, "-w") == 0)
            bad = (o->warmup = atoi(v)) < 0;
        else if (strcmp(a, "--peer-errors") == 0)
            bad = (o->peer_errors = strcmp(v, "both") == 0 ? 2
                                    : strcmp(v, "1") == 0  ? 1
                                    : strcmp(v, "0") == 0  ? 0
                                                           : -1) < 0;
        else
            bad = 1;
        if (bad)
            return -1;
    }
    if (!list) {
        o->nsizes = 0;
        for (size_t s = lo; s <= hi && o->nsizes < MAX_SIZES; s *= factor)
            o->sizes[o->nsizes++] = s;
    }
    return o->nsizes > 0 ? 0 : -1;
}

int main(int argc, char **argv)
{
    options_t o = {.peer_errors = 2, .warmup = 2};
    int rank, size, rc = 0;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (parse_args(argc, argv, &o) != 0) {
        if (rank == 0)
            usage(stderr);
        MPI_Finalize();
        return 2;
    }
    zc_comm_t *comms[MAX_COMMS];
    const char *names[MAX_COMMS];
    int ncomms = 0;
    for (int pe = 1; pe >= 0; pe--) {
        if (o.peer_errors != 2 && o.peer_errors != pe)
            continue;
        comms[ncomms] = comm_create(pe);
        names[ncomms] = pe ? "zipccl tcp (peer err)" : "zipccl shm (no peer err)";
        if (!comms[ncomms])
            MPI_Abort(MPI_COMM_WORLD, 1);
        ncomms++;
    }

    if (rank == 0) {
        const char *tls = getenv("UCX_TLS"), *chunk = getenv("ZIPCCL_CHUNK_BYTES");
        printf("# ring_mpi: %d ranks, f32 sum, %s, ZIPCCL_CHUNK_BYTES=%s, UCX_TLS=%s\n", size,
               o.inplace ? "in place" : "out of place", chunk ? chunk : "(default)",
               tls ? tls : "(default)");
        kernel_baseline();
        printf("# time: median over rounds of the slowest rank, us; busbw GB/s = 2(N-1)/N "
               "bytes/time; ratio = zipccl rate / MPI rate\n");
        printf("%12s %6s %11s %8s", "bytes", "iters", "mpi us", "busbw");
        for (int c = 0; c < ncomms; c++)
            printf(" | %-26s", names[c]);
        printf("\n%12s %6s %11s %8s", "", "", "", "");
        for (int c = 0; c < ncomms; c++)
            printf(" | %11s %8s %5s", "us", "busbw", "ratio");
        printf("\n");
        fflush(stdout);
    }
    MPI_Barrier(MPI_COMM_WORLD);

    for (int k = 0; k < o.nsizes && rc == 0; k++) {
        const size_t bytes = o.sizes[k], n = bytes / sizeof(float);
        const int iters = iters_for(&o, bytes), rounds = o.warmup + iters;
        float *send = malloc(n ? n * sizeof(float) : 1);
        float *recv[1 + MAX_COMMS];
        double *t = calloc((size_t)iters * (1 + (size_t)ncomms), sizeof(double));
        int failed = 0;

        for (int c = 0; c <= ncomms; c++)
            recv[c] = malloc(n ? n * sizeof(float) : 1);
        fill_input(send, n, rank);

        /* rounds: MPI, then each communicator; check once before and once after timing */
        uint64_t wrong[1 + MAX_COMMS] = {0};
        for (int r = -1; r < rounds; r++) {
            for (int c = 0; c <= ncomms; c++) {
                float *src = send;
                if (o.inplace) {
                    fill_input(recv[c], n, rank); /* outside the timed region */
                    src = recv[c];
                } else if (r == -1 || r == rounds - 1) {
                    memset(recv[c], 0xff, n * sizeof(float)); /* NaN: a value left alone shows */
                }
                double dt = timed_call(c ? comms[c - 1] : NULL, src, recv[c], n, &failed);
                if (r >= o.warmup)
                    t[(size_t)(r - o.warmup) * (1 + (size_t)ncomms) + (size_t)c] = dt;
                if (r == -1 || r == rounds - 1)
                    wrong[c] += count_wrong(recv[c], n, size);
            }
        }

        /* the slowest rank per call */
        MPI_Allreduce(MPI_IN_PLACE, t, iters * (1 + ncomms), MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, wrong, 1 + ncomms, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
        MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
        if (rank == 0) {
            double med[1 + MAX_COMMS], *col = malloc((size_t)iters * sizeof(double));
            const double factor = 2.0 * (size - 1) / size * (double)bytes;
            for (int c = 0; c <= ncomms; c++) {
                for (int i = 0; i < iters; i++)
                    col[i] = t[(size_t)i * (1 + (size_t)ncomms) + (size_t)c];
                med[c] = bench_median(col, iters);
            }
            free(col);
            printf("%12zu %6d %11.1f %8.2f", bytes, iters, med[0] * 1e6, factor / med[0] / 1e9);
            for (int c = 1; c <= ncomms; c++)
                printf(" | %11.1f %8.2f %5.2f", med[c] * 1e6, factor / med[c] / 1e9,
                       med[0] / med[c]);
            printf("\n");
            for (int c = 0; c <= ncomms; c++)
                if (wrong[c])
                    printf("# CHECK FAILED: %s: %" PRIu64 " values differ from the exact sum\n",
                           c ? names[c - 1] : "MPI_Allreduce", wrong[c]);
            fflush(stdout);
        }
        for (int c = 0; c <= ncomms; c++)
            if (wrong[c])
                rc = 1;
        if (failed)
            rc = 1;
        free(send);
        for (int c = 0; c <= ncomms; c++)
            free(recv[c]);
        free(t);
    }

    for (int c = 0; c < ncomms; c++)
        zc_comm_destroy(comms[c]);
    if (rank == 0 && rc == 0)
        printf("# results checked: every value of both implementations equals the exact sum\n");
    MPI_Finalize();
    return rc;
}
