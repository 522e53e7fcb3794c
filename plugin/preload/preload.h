/*
 * libzipccl-preload.so, internal: what the MPI and NCCL interposers share.
 *
 *   preload.c   once per process: configuration, logging, eligibility
 *   mpi.c       MPI_Init*, MPI_Allreduce, MPI_Iallreduce, MPI_Finalize wrappers
 *   nccl.c      ncclCommInit*, ncclCommSplit, ncclAllReduce, ncclCommDestroy wrappers
 *
 * The exported wrappers are thin: each resolves the real function on first
 * use, decides eligibility and either forwards untouched or runs zipccl.
 * Nothing runs in a constructor: a process that never calls MPI or NCCL is
 * not touched.
 */
#ifndef ZC_PLUGIN_PRELOAD_H
#define ZC_PLUGIN_PRELOAD_H

#include "common/config.h"

#include <zipccl/zipccl.h>

#include <stddef.h>
#include <stdint.h>

#define ZP_EXPORT __attribute__((visibility("default")))

/*
 * The ZIPCCL_* configuration, loaded and applied (log level) once per process,
 * thread safe. NULL when a variable is invalid: the error is logged once,
 * naming it, and every call then passes through to MPI/NCCL untouched.
 */
const zc_config_t *zp_config(void);

/*
 * Whether an all-reduce goes through zipccl: @p cfg non-NULL, ZIPCCL_CODEC not
 * none, @p dtype f32, f16 or bf16 (f64 too: zp_allreduce converts it to f32, so
 * it counts 4 bytes a value), @p op sum or avg, @p count > 0 and count * type
 * size >= ZIPCCL_MIN_BYTES. The frontend adds its own conditions
 * (ZIPCCL_PRELOAD_MPI/NCCL, graph capture, ...).
 */
int zp_eligible(const zc_config_t *cfg, zc_dtype_t dtype, zc_redop_t op, size_t count);

/*
 * The tensor key of zc_allreduce_key for a buffer (the frontend passes the
 * output buffer, stable across steps for a framework's gradient buckets) of
 * @p count values: a hash of both, never 0.
 */
uint64_t zp_tensor_key(const void *buf, size_t count);

/*
 * zc_allreduce_key for an eligible call, f64 included: f64 values are rounded
 * to an f32 copy, reduced there and written back (rounding 2^-24, far below a
 * lossy codec's error; zp_eligible counts them as 4 bytes each). Errors as
 * zc_allreduce_key, plus ZC_ERR_NO_MEMORY for the copy; logged where they occur.
 */
zc_status_t zp_allreduce(zc_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                         zc_dtype_t dtype, zc_redop_t op, uint64_t key);

#endif
