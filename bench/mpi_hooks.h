/*
 * zipccl's bootstrap over an MPI communicator, for the benchmarks that run
 * under mpirun and compare against MPI_Allreduce in the same processes.
 */
#ifndef ZC_BENCH_MPI_HOOKS_H
#define ZC_BENCH_MPI_HOOKS_H

#include <zipccl/zipccl.h>

/*
 * Hooks over MPI_Allgather, MPI_Bcast and MPI_Barrier. Their ctx is a
 * malloc'ed MPI_Comm, which destroy frees (MPI_Comm_free, then free).
 */
extern const zc_bootstrap_hooks_t bench_mpi_hooks;

#endif
