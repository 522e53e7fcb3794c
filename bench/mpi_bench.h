/*
 * What the benchmarks that run under mpirun and compare against MPI_Allreduce
 * in the same processes share: zipccl's bootstrap over MPI, and the median.
 */
#ifndef ZC_BENCH_MPI_BENCH_H
#define ZC_BENCH_MPI_BENCH_H

#include <zipccl/zipccl.h>

/*
 * Hooks over MPI_Allgather, MPI_Bcast and MPI_Barrier. Their ctx is a
 * malloc'ed MPI_Comm, which destroy frees (MPI_Comm_free, then free).
 */
extern const zc_bootstrap_hooks_t bench_mpi_hooks;

/* The median of @p n > 0 values; sorts @p v. */
double bench_median(double *v, int n);

#endif
