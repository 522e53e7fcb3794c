/* Shared by the MPI benchmarks (mpi_bench.h). */
#include "mpi_bench.h"

#include <mpi.h>

#include <stdio.h>
#include <stdlib.h>

static zc_status_t mpi_status(int rc)
{
    return rc == MPI_SUCCESS ? ZC_OK : ZC_ERR_IO;
}

static zc_status_t mpi_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    return mpi_status(
        MPI_Allgather(mine, (int)len, MPI_BYTE, all, (int)len, MPI_BYTE, *(MPI_Comm *)ctx));
}

static zc_status_t mpi_broadcast(void *ctx, void *buf, size_t len, int root)
{
    return mpi_status(MPI_Bcast(buf, (int)len, MPI_BYTE, root, *(MPI_Comm *)ctx));
}

static zc_status_t mpi_barrier(void *ctx)
{
    return mpi_status(MPI_Barrier(*(MPI_Comm *)ctx));
}

static void mpi_destroy(void *ctx)
{
    MPI_Comm_free((MPI_Comm *)ctx);
    free(ctx);
}

const zc_bootstrap_hooks_t bench_mpi_hooks = {
    .allgather = mpi_allgather,
    .broadcast = mpi_broadcast,
    .barrier = mpi_barrier,
    .destroy = mpi_destroy,
};

zc_comm_t *bench_mpi_comm(const char *prog, const char *const *settings)
{
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    zc_comm_config_t *cfg = NULL;
    zc_status_t st = zc_comm_config_create(1, &cfg);
    for (; st == ZC_OK && settings[0]; settings += 2)
        if (settings[1])
            st = zc_comm_config_set(cfg, settings[0], settings[1]);
    if (st != ZC_OK) {
        fprintf(stderr, "%s: rank %d: configuration: %s\n", prog, rank, zc_status_string(st));
        zc_comm_config_destroy(cfg);
        return NULL;
    }

    MPI_Comm *dup = malloc(sizeof(*dup));
    zc_comm_t *comm = NULL;
    if (!dup || MPI_Comm_dup(MPI_COMM_WORLD, dup) != MPI_SUCCESS) {
        fprintf(stderr, "%s: rank %d: cannot duplicate MPI_COMM_WORLD\n", prog, rank);
        free(dup);
        zc_comm_config_destroy(cfg);
        return NULL;
    }
    MPI_Comm_set_errhandler(*dup, MPI_ERRORS_RETURN);
    st = zc_comm_init_bootstrap_config(cfg, rank, size, &bench_mpi_hooks, dup, &comm);
    zc_comm_config_destroy(cfg);
    if (st != ZC_OK) {
        fprintf(stderr, "%s: rank %d: zc_comm_init_bootstrap_config: %s\n", prog, rank,
                zc_status_string(st));
        return NULL; /* the hooks' destroy freed dup */
    }
    return comm;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}
