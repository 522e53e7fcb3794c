/* Shared by the MPI benchmarks (mpi_bench.h). */
#include "mpi_bench.h"

#include <mpi.h>

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
