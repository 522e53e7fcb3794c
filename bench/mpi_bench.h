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

/*
 * A zipccl communicator of every rank of MPI_COMM_WORLD (a duplicate, with
 * MPI_ERRORS_RETURN), from the environment's ZIPCCL_* settings with
 * @p settings over them: NAME, VALUE pairs, then NULL; a NULL VALUE leaves
 * NAME as the environment has it. NULL (logged, naming @p prog) on failure.
 */
zc_comm_t *bench_mpi_comm(const char *prog, const char *const *settings);

/* The median of @p n > 0 values; sorts @p v. */
double bench_median(double *v, int n);

#endif
