/*
 * libzipccl-preload.so, internal: what the MPI and NCCL interposers share.
 *
 *   preload.c   once per process: configuration, logging, eligibility, the engine
 *               (libzipccl.so.0, dlopen'ed at the first eligible call)
 *   mpi.c       MPI_Init*, MPI_Allreduce, MPI_Iallreduce, MPI_Finalize wrappers
 *   nccl.c      ncclCommInit*, ncclCommSplit, ncclAllReduce, ncclCommDestroy wrappers;
 *               nccl_cuda.c, nccl_proxy.c, nccl_boot.c behind them (nccl_int.h)
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
 * The zipccl engine: libzipccl.so.0's public functions, looked up with dlsym.
 * The preload library links only zipccl's common layer (configuration, log,
 * status); libzipccl.so.0, with UCX, BLAS and hwloc behind it, is dlopen'ed
 * (RTLD_NOW | RTLD_LOCAL) at the first eligible call, so that a process that
 * never makes one loads none of them (their initialisers start threads and
 * install signal handlers).
 */
typedef struct zp_engine {
    zc_status_t (*comm_init_bootstrap)(int rank, int size, const zc_bootstrap_hooks_t *hooks,
                                       void *ctx, zc_comm_t **comm_p);
    void (*comm_destroy)(zc_comm_t *comm);
    zc_status_t (*allreduce_key)(zc_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                                 zc_dtype_t dtype, zc_redop_t op, uint64_t key);
    zc_status_t (*comm_set_stats_file)(zc_comm_t *comm, const char *path);
    zc_status_t (*comm_agree_max)(zc_comm_t *comm, int32_t value, int32_t *max_p);
} zp_engine_t;

/*
 * The engine, loaded once per process, thread safe: libzipccl.so.0 next to this
 * library (the installed libdir), else two folders up (the build tree:
 * build/plugin/preload/ and build/), else by name on the loader's path. NULL
 * when it cannot be loaded or lacks a function: logged once, and every call
 * then passes through to MPI/NCCL untouched.
 */
const zp_engine_t *zp_engine(void);

/*
 * The host's own collectives (MPI over a PMPI_Comm_dup, NCCL on a private
 * stream), over which zipccl bootstraps and the ranks agree. Each is collective,
 * blocking, and returns ZC_OK or an error (logged where it occurred).
 */
typedef struct zp_coll_ops {
    /* @p all receives size * len bytes: rank r's @p len bytes at offset r * len */
    zc_status_t (*allgather)(void *ctx, const void *mine, size_t len, void *all);
    /* @p root's @p len bytes at @p buf copied into every rank's @p buf */
    zc_status_t (*broadcast)(void *ctx, void *buf, size_t len, int root);
    /* frees @p ctx when zipccl is done with it; may be NULL */
    void (*destroy)(void *ctx);
} zp_coll_ops_t;

/*
 * zc_comm_init_bootstrap of @p eng over @p ops / @p ctx (taken: destroyed when
 * the communicator goes or its creation fails). Collective.
 *
 * Every bootstrap collective is preceded by a round of headers (an allgather of
 * 16 bytes), so that a rank that failed inside zc_comm_init_bootstrap (UCX could
 * not start) and went on to zp_agree is never matched with another rank's
 * bootstrap collective: the others see its final header, fail their call and
 * come to zp_agree too. The caller ends with zp_agree on every rank.
 *
 * With @p stats_file the communicator writes its statistics there
 * (zc_comm_set_stats_file) instead of ZIPCCL_STATS_FILE; NULL: as configured.
 */
zc_status_t zp_comm_init(const zp_engine_t *eng, int rank, int size, const zp_coll_ops_t *ops,
                         void *ctx, const char *stats_file, zc_comm_t **comm_p);

/*
 * The AND over every rank of @p bits (0..255, this rank's: 0 = not ready): what
 * every rank calls before zp_comm_init (all must be ready for the bootstrap) and
 * after it (all must have a communicator), whatever failed before, so that no
 * rank is left in a collective the others never make. After zp_comm_init it
 * repeats its round until every rank has left the bootstrap. 0 when a
 * collective of @p ops fails.
 */
int zp_agree(const zp_coll_ops_t *ops, void *ctx, int size, int bits);

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
 * Whether an all-reduce runs uncompressed on zipccl's raw ring instead of going
 * to the host: @p cfg non-NULL, ZIPCCL_CODEC none and ZIPCCL_PRELOAD_RAW on, the
 * types and operations of zp_eligible, count * type size >= ZIPCCL_MIN_BYTES
 * (f64 counts 8 bytes: zp_allreduce sums it in f64). Only the MPI frontend asks;
 * the NCCL one leaves ZIPCCL_CODEC=none to NCCL.
 */
int zp_eligible_raw(const zc_config_t *cfg, zc_dtype_t dtype, zc_redop_t op, size_t count);

/*
 * The tensor key of zc_allreduce_key for a buffer (the frontend passes the
 * output buffer, stable across steps for a framework's gradient buckets) of
 * @p count values: a hash of both, never 0.
 */
uint64_t zp_tensor_key(const void *buf, size_t count);

/*
 * zc_allreduce_key for an eligible call, f64 included: f64 values are rounded
 * to an f32 copy, reduced there and written back (rounding 2^-24, far below a
 * lossy codec's error; zp_eligible counts them as 4 bytes each), except under
 * ZIPCCL_CODEC=none (zp_eligible_raw), where the raw ring sums them in f64. Errors as
 * zc_allreduce_key, plus ZC_ERR_NO_MEMORY for the copy; logged where they occur.
 */
zc_status_t zp_allreduce(const zp_engine_t *eng, zc_comm_t *comm, const void *sendbuf,
                         void *recvbuf, size_t count, zc_dtype_t dtype, zc_redop_t op,
                         uint64_t key);

#endif
