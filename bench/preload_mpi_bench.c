/*
 * preload_mpi_bench: MPI_Allreduce of f32 (or f64) sums through libzipccl-preload.so against
 * PMPI_Allreduce (Open MPI's own, which the preload never touches), measured in the same
 * run on the same data, as a ratio. Run it under zipccl-run (meson builds it with Open MPI):
 *
 *   mpirun -np 4 --oversubscribe --allow-run-as-root build/tools/zipccl-run --codec qsgd \
 *       -- build/bench/preload_mpi_bench
 *   ... zipccl-run --codec none ...     MPI_Allreduce passes through: the wrapper's overhead
 *   ... zipccl-run --no-mpi ...         (ZIPCCL_PRELOAD_MPI=0) the same
 *   ZIPCCL_PRELOAD_RAW=1 ... zipccl-run --codec none ...
 *                                       zipccl's raw ring against Open MPI's all-reduce
 *
 *   preload_mpi_bench [-b MIN] [-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-t f32|f64]
 *
 * Sizes are bytes of -t's type (f32; KiB/MiB suffixes) from -b (64KiB) to -e (64MiB) times
 * -f (4). For each size, both results are checked once against the exact sum (the inputs are
 * small integers, so the uncompressed sum is exact, and must be under ZIPCCL_CODEC=none; a
 * compressed one must be within 50% in norm, a sanity check: tests/preload/mpi checks the
 * codec's bound), then -w warm-up rounds
 * (2) and -n timed rounds (by default as many as fit in 512 MiB of data, 3 to 50), each
 * round one PMPI_Allreduce and one MPI_Allreduce after a barrier. A call's time is the
 * slowest rank's; the table gives the medians, the bus bandwidth 2 (N-1)/N * bytes / time
 * and the ratio PMPI time / MPI_Allreduce time (> 1: the preload is faster).
 */
#include "bench_size.h"

#include <mpi.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SIZES 32
#define MAX_ITERS 50

static int rank, nranks;
static int f64; /* -t f64: MPI_DOUBLE, else MPI_FLOAT */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Rank r's element i: a small integer, so that any summation order is exact. */
static float input(int r, size_t i)
{
    return (float)((int)((i * 2654435761u + (size_t)r * 40503u) % 17) - 8);
}

/* Element @p i of a buffer of the bench's type. */
static double elem_get(const void *buf, size_t i)
{
    return f64 ? ((const double *)buf)[i] : ((const float *)buf)[i];
}

/* ||got - exact|| / ||exact|| over the whole vector, the same on every rank. */
static double rel_error(const void *got, size_t count)
{
    double part[2] = {0, 0}, sum[2];
    for (size_t i = 0; i < count; i++) {
        double exact = 0;
        for (int r = 0; r < nranks; r++)
            exact += input(r, i);
        double g = elem_get(got, i);
        part[0] += (g - exact) * (g - exact);
        part[1] += exact * exact;
    }
    PMPI_Allreduce(part, sum, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
    return sum[1] > 0 ? sqrt(sum[0] / sum[1]) : sqrt(sum[0]);
}

/* One timed call: the slowest rank's seconds. */
static double timed(int preload, const void *send, void *recv, int count)
{
    MPI_Datatype type = f64 ? MPI_DOUBLE : MPI_FLOAT;
    PMPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    int rc = preload ? MPI_Allreduce(send, recv, count, type, MPI_SUM, MPI_COMM_WORLD)
                     : PMPI_Allreduce(send, recv, count, type, MPI_SUM, MPI_COMM_WORLD);
    double dt = MPI_Wtime() - t0, slowest;
    if (rc != MPI_SUCCESS) {
        fprintf(stderr, "preload_mpi_bench: rank %d: %s returned %d\n", rank,
                preload ? "MPI_Allreduce" : "PMPI_Allreduce", rc);
        MPI_Abort(MPI_COMM_WORLD, 1);
    }
    PMPI_Allreduce(&dt, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    return slowest;
}

static void usage(void)
{
    if (rank == 0)
        fprintf(stderr, "usage: mpirun ... zipccl-run [options] -- preload_mpi_bench [-b MIN] "
                        "[-e MAX] [-f FACTOR] [-n ITERS] [-w WARMUP] [-t f32|f64]\n");
    MPI_Finalize();
    exit(2);
}

int main(int argc, char **argv)
{
    size_t lo = 64 << 10, hi = 64 << 20, factor = 4;
    int iters = 0, warmup = 2;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    for (int a = 1; a < argc; a++) {
        if (a + 1 >= argc)
            usage();
        if (!strcmp(argv[a], "-b"))
            lo = bench_parse_size(argv[++a]);
        else if (!strcmp(argv[a], "-e"))
            hi = bench_parse_size(argv[++a]);
        else if (!strcmp(argv[a], "-f"))
            factor = (size_t)atoi(argv[++a]);
        else if (!strcmp(argv[a], "-n"))
            iters = atoi(argv[++a]);
        else if (!strcmp(argv[a], "-w"))
            warmup = atoi(argv[++a]);
        else if (!strcmp(argv[a], "-t") &&
                 (!strcmp(argv[a + 1], "f32") || !strcmp(argv[a + 1], "f64")))
            f64 = !strcmp(argv[++a], "f64");
        else
            usage();
    }
    const size_t esize = f64 ? sizeof(double) : sizeof(float);
    const char *codec = getenv("ZIPCCL_CODEC"), *raw = getenv("ZIPCCL_PRELOAD_RAW");
    /* uncompressed in zipccl or passed to MPI: either way the sum of small integers is exact */
    const int exact = codec && !strcmp(codec, "none");
    if (lo < esize || hi < lo || factor < 2 || iters < 0 || iters > MAX_ITERS || warmup < 0)
        usage();

    if (rank == 0) {
        const char *pre = getenv("LD_PRELOAD"), *on = getenv("ZIPCCL_PRELOAD_MPI"),
                   *bits = getenv("ZIPCCL_QSGD_BITS"), *algo = getenv("ZIPCCL_ALGO");
        printf("# preload_mpi_bench: %d ranks, %s sum; preload %s, ZIPCCL_PRELOAD_MPI=%s, "
               "ZIPCCL_CODEC=%s, ZIPCCL_PRELOAD_RAW=%s, ZIPCCL_QSGD_BITS=%s, ZIPCCL_ALGO=%s\n",
               nranks, f64 ? "f64" : "f32",
               pre && strstr(pre, "libzipccl-preload") ? "loaded" : "NOT loaded", on ? on : "(1)",
               codec ? codec : "(auto)", raw ? raw : "(0)", bits ? bits : "(4)",
               algo ? algo : "(auto)");
        printf("# time: median of the slowest rank; busbw = 2(N-1)/N bytes/time; "
               "ratio = PMPI time / MPI_Allreduce time\n");
        printf("%10s %6s %12s %12s %12s %12s %8s %10s\n", "bytes", "iters", "pmpi_ms", "pmpi_GB/s",
               "preload_ms", "preload_GB/s", "ratio", "rel_err");
        fflush(stdout);
    }
    for (size_t bytes = lo; bytes <= hi; bytes *= factor) {
        size_t count = bytes / esize;
        void *send = malloc(bytes), *r_mpi = malloc(bytes), *r_pre = malloc(bytes);
        if (!send || !r_mpi || !r_pre) {
            fprintf(stderr, "preload_mpi_bench: out of memory for %zu bytes\n", bytes);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (size_t i = 0; i < count; i++) {
            if (f64)
                ((double *)send)[i] = input(rank, i);
            else
                ((float *)send)[i] = input(rank, i);
        }
        int n = iters ? iters : (int)((512u << 20) / bytes);
        n = n < 3 ? 3 : n > MAX_ITERS ? MAX_ITERS : n;

        timed(0, send, r_mpi, (int)count);
        timed(1, send, r_pre, (int)count);
        double err_mpi = rel_error(r_mpi, count), err_pre = rel_error(r_pre, count);
        if (err_mpi != 0 || !(exact ? err_pre == 0 : err_pre < 0.5)) {
            if (rank == 0)
                fprintf(stderr,
                        "preload_mpi_bench: %zu bytes: wrong result (relative error "
                        "PMPI %.3g, MPI_Allreduce %.3g)\n",
                        bytes, err_mpi, err_pre);
            MPI_Abort(MPI_COMM_WORLD, 1);
        }
        for (int w = 0; w < warmup; w++) {
            timed(0, send, r_mpi, (int)count);
            timed(1, send, r_pre, (int)count);
        }
        double t_mpi[MAX_ITERS], t_pre[MAX_ITERS];
        for (int it = 0; it < n; it++) {
            t_mpi[it] = timed(0, send, r_mpi, (int)count);
            t_pre[it] = timed(1, send, r_pre, (int)count);
        }
        double m_mpi = median(t_mpi, n), m_pre = median(t_pre, n);
        double bus = 2.0 * (nranks - 1) / nranks * (double)bytes;
        if (rank == 0) {
            printf("%10zu %6d %12.3f %12.3f %12.3f %12.3f %8.2f %10.3g\n", bytes, n, m_mpi * 1e3,
                   bus / m_mpi / 1e9, m_pre * 1e3, bus / m_pre / 1e9, m_mpi / m_pre, err_pre);
            fflush(stdout);
        }
        free(send);
        free(r_mpi);
        free(r_pre);
    }
    MPI_Finalize();
    return 0;
}
