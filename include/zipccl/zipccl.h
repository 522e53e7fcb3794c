/*
 * zipccl: compressed all-reduce over UCX.
 *
 *     zc_comm_t *comm;
 *     zc_comm_init(&comm);                  // ZIPCCL_* or torchrun/mpirun/srun variables
 *     zc_allreduce(comm, grad, grad, n, ZC_DTYPE_F32, ZC_OP_SUM);
 *     zc_comm_destroy(comm);
 *
 * Every rank of a communicator calls the same collectives in the same order
 * with the same count, type and operation (as with MPI and NCCL); a mismatch is
 * detected and fails the call on every rank with an error naming both values.
 *
 * Which calls are compressed: sums and averages of f32, f16 and bf16 of at
 * least ZIPCCL_MIN_BYTES, with the codec of ZIPCCL_CODEC (auto: the cost model
 * decides per call). Everything else (integers, f64, prod/min/max, small
 * tensors) runs an uncompressed ring and is exact up to the order of the
 * floating-point additions. Every rank receives bit-identical results, with
 * or without compression. docs/collectives.md describes the algorithms and
 * the cost model.
 *
 * Threads: a communicator is used by one thread at a time (calls on different
 * communicators may run concurrently). With ZIPCCL_PROGRESS_THREAD=1 nonblocking
 * calls run on a thread of their own; zc_test and zc_wait only look.
 */
#ifndef ZIPCCL_H
#define ZIPCCL_H

#include <zipccl/zipccl_codec.h>
#include <zipccl/zipccl_status.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** A group of ranks that all-reduce together. */
typedef struct zc_comm zc_comm_t;
/** A nonblocking all-reduce in flight. */
typedef struct zc_request zc_request_t;

/** Reduction operations. */
typedef enum zc_redop {
    ZC_OP_SUM = 0,
    ZC_OP_PROD = 1,
    ZC_OP_MIN = 2,
    ZC_OP_MAX = 3,
    ZC_OP_AVG = 4, /**< the sum divided by the number of ranks */
    ZC_OP_COUNT
} zc_redop_t;

/**
 * How ranks exchange small blobs before the fast transport exists: the hooks
 * of a caller-supplied bootstrap (an MPI or NCCL communicator the caller
 * already has). Every function is collective, returns ZC_OK or an error, and
 * may block.
 */
typedef struct zc_bootstrap_hooks {
    /** @p all receives size * len bytes: rank r's @p len bytes at offset r * len. */
    zc_status_t (*allgather)(void *ctx, const void *mine, size_t len, void *all);
    /** @p root's @p len bytes at @p buf are copied into every rank's @p buf. */
    zc_status_t (*broadcast)(void *ctx, void *buf, size_t len, int root);
    zc_status_t (*barrier)(void *ctx);
    /** Called once when the communicator is destroyed (or its creation fails); may be NULL. */
    void (*destroy)(void *ctx);
} zc_bootstrap_hooks_t;

/**
 * Creates a communicator of every rank of the job: reads the ZIPCCL_*
 * variables and the launcher's (ZIPCCL_RANK/SIZE/ROOT, else torchrun's,
 * Open MPI's or Slurm's, see docs/env-vars.md), meets the other ranks over
 * the tcp bootstrap, connects UCX and, with ZIPCCL_CODEC or ZIPCCL_ALGO auto,
 * measures link bandwidth and codec speed for the cost model. Collective.
 * Errors: ZC_ERR_INVALID_CONFIG (a bad variable, logged with its name),
 * ZC_ERR_TIMEOUT / ZC_ERR_PEER (a rank did not come), ZC_ERR_NO_MEMORY,
 * ZC_ERR_IO. On error *@p comm_p is untouched.
 */
zc_status_t zc_comm_init(zc_comm_t **comm_p);

/**
 * As zc_comm_init, with the ranks and the bootstrap given by the caller:
 * @p rank in 0..@p size-1, @p hooks copied, @p ctx passed to them and handed
 * to hooks->destroy when the communicator goes. ZIPCCL_RANK/SIZE/ROOT are not read.
 */
zc_status_t zc_comm_init_bootstrap(int rank, int size, const zc_bootstrap_hooks_t *hooks, void *ctx,
                                   zc_comm_t **comm_p);

/**
 * A configuration: the settings of docs/env-vars.md, for programs that choose
 * them in code rather than in the environment. The names and values are the
 * ZIPCCL_* variables' own:
 *
 *     zc_comm_config_t *cfg;
 *     zc_comm_config_create(1, &cfg);              // defaults, then the environment
 *     zc_comm_config_set(cfg, "ZIPCCL_CODEC", "qsgd");
 *     zc_comm_init_config(cfg, &comm);
 *     zc_comm_config_destroy(cfg);                 // the communicator keeps a copy
 *
 * Thread safety: a configuration is used by one thread at a time; once built,
 * it may be passed to several inits (each copies what it needs).
 */
typedef struct zc_comm_config zc_comm_config_t;

/**
 * Creates a configuration holding every default, then, with @p read_env
 * non-zero, the process's ZIPCCL_* variables over them (as zc_comm_init
 * reads them). Errors: ZC_ERR_INVALID_CONFIG (a bad variable, logged with its
 * name), ZC_ERR_NO_MEMORY, ZC_ERR_INVALID_ARG.
 */
zc_status_t zc_comm_config_create(int read_env, zc_comm_config_t **config_p);

/**
 * Sets the variable @p name ("ZIPCCL_CODEC") to @p value ("qsgd", "64KiB",
 * "auto"...), parsed as in the environment; @p value is copied. Errors:
 * ZC_ERR_INVALID_CONFIG (unknown name, logged with the closest one; bad value,
 * logged with the accepted range; @p config is then unchanged),
 * ZC_ERR_INVALID_ARG, ZC_ERR_NO_MEMORY.
 */
zc_status_t zc_comm_config_set(zc_comm_config_t *config, const char *name, const char *value);

/**
 * Writes the value of @p name in @p config as text into @p buf (@p len bytes,
 * truncated and terminated); a secret (ZIPCCL_JOB_SECRET) reads "(set)" or "".
 * Errors: ZC_ERR_INVALID_ARG (unknown name, NULL, @p len 0).
 */
zc_status_t zc_comm_config_get(const zc_comm_config_t *config, const char *name, char *buf,
                               size_t len);

/** Frees @p config; NULL is allowed. Communicators made from it are not affected. */
void zc_comm_config_destroy(zc_comm_config_t *config);

/**
 * zc_comm_init with the settings of @p config instead of the environment's
 * ZIPCCL_* variables (the launcher's RANK, WORLD_SIZE... are still read when
 * ZIPCCL_RANK, ZIPCCL_SIZE or ZIPCCL_ROOT are auto or empty in @p config).
 * The log level and ZIPCCL_CPU of @p config apply to the whole process, as
 * the environment's do. Errors: those of zc_comm_init.
 */
zc_status_t zc_comm_init_config(const zc_comm_config_t *config, zc_comm_t **comm_p);

/**
 * zc_comm_init_bootstrap with the settings of @p config. On every error,
 * hooks->destroy is called on @p ctx, as with zc_comm_init_bootstrap.
 */
zc_status_t zc_comm_init_bootstrap_config(const zc_comm_config_t *config, int rank, int size,
                                          const zc_bootstrap_hooks_t *hooks, void *ctx,
                                          zc_comm_t **comm_p);

/**
 * Waits for the communicator's nonblocking calls, prints and writes the
 * statistics (ZIPCCL_STATS, ZIPCCL_STATS_FILE), frees per-tensor state and
 * closes the connections. Local. NULL is allowed.
 */
void zc_comm_destroy(zc_comm_t *comm);

/** This process's rank in @p comm. */
int zc_comm_rank(const zc_comm_t *comm);
/** Number of ranks in @p comm. */
int zc_comm_size(const zc_comm_t *comm);

/**
 * Reduces @p count values of @p dtype at @p sendbuf over every rank with @p op
 * and writes the result to @p recvbuf on every rank. @p sendbuf == @p recvbuf
 * (in place) is allowed; otherwise they must not overlap. @p count 0 is a
 * valid call that moves nothing (buffers may then be NULL).
 *
 * Compressed results are the sum of each rank's decoded estimate: within the
 * codec's error bound (docs/codecs.md), unbiased for qsgd, and bit-identical
 * on every rank.
 *
 * Errors: ZC_ERR_INVALID_ARG (NULL buffers, unknown dtype or op),
 * ZC_ERR_MISMATCH (ranks passed different counts, types, operations or
 * decisions; logged with both values), ZC_ERR_PEER / ZC_ERR_TIMEOUT (a rank
 * died, stalled past ZIPCCL_TIMEOUT_S without any transfer completing, or
 * failed this call and told the others; logged naming the rank that failed
 * first and why), ZC_ERR_CORRUPT and others (this rank rejected a peer's data,
 * or failed on its own), ZC_ERR_NO_MEMORY.
 *
 * Any failure but a disagreement on the call (ZC_ERR_MISMATCH of the call
 * header) or a bad argument breaks the communicator on every rank: the rank
 * that fails first tells the others, whose call in flight fails too (or, when
 * it had already completed there, their next one). A broken communicator fails
 * every later call at once; @p recvbuf is undefined after a failed call;
 * destroy the communicator (docs/failures.md).
 */
zc_status_t zc_allreduce(zc_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                         zc_dtype_t dtype, zc_redop_t op);

/**
 * zc_allreduce with a tensor key: the identity under which stateful codecs
 * (top-k and error feedback residuals, GradiVeQ bases) keep their state
 * between calls. Pass the same key for the same tensor every step; 0 takes
 * the default key, made of @p sendbuf and @p count.
 */
zc_status_t zc_allreduce_key(zc_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                             zc_dtype_t dtype, zc_redop_t op, uint64_t key);

/**
 * Starts the all-reduce of zc_allreduce_key and returns at once with a request
 * in *@p req_p. The buffers must stay valid and unchanged (@p recvbuf
 * untouched) until zc_test or zc_wait reports completion. Calls complete in
 * the order they were started. Errors of the arguments are returned here;
 * errors of the exchange are returned by zc_test / zc_wait.
 */
zc_status_t zc_iallreduce(zc_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                          zc_dtype_t dtype, zc_redop_t op, uint64_t key, zc_request_t **req_p);

/**
 * Progresses the communicator (without a progress thread) and returns
 * ZC_INPROGRESS while the request runs; once it has completed, returns its
 * final status, frees it and sets *@p req_p to NULL. Never blocks.
 */
zc_status_t zc_test(zc_request_t **req_p);

/** Waits until the request completes; returns, frees and clears as zc_test. */
zc_status_t zc_wait(zc_request_t **req_p);

/**
 * The maximum of @p value over every rank of @p comm into *@p max_p
 * (collective, blocking): one small uncompressed all-reduce that the
 * statistics do not count, for frontends that must agree on a decision (the
 * preload library: "did a call fail on any rank"). Fails as zc_allreduce,
 * at once on a broken communicator, which makes it safe after a peer died.
 */
zc_status_t zc_comm_agree_max(zc_comm_t *comm, int32_t value, int32_t *max_p);

/** Counters of one communicator since its creation (zc_comm_stats). */
typedef struct zc_stats {
    uint64_t calls;            /**< all-reduces completed */
    uint64_t calls_compressed; /**< of which compressed */
    uint64_t bytes_in;         /**< count * type size, summed over calls */
    uint64_t bytes_wire;       /**< bytes this rank sent, headers included */
    uint64_t bytes_wire_raw;   /**< bytes the uncompressed ring would have sent for those calls */
    double encode_s;           /**< seconds in encode and re-encode */
    double decode_s;           /**< seconds in decode_add, reduce and output conversion */
    double total_s;            /**< seconds from start to completion, summed over calls */
    double rel_err;           /**< mean sampled ||decode(encode(x)) - x|| / ||x|| of own payloads */
    uint64_t rel_err_samples; /**< calls that sampled rel_err */
    double residual_norm;     /**< L2 norm of the error-feedback residuals held now */
} zc_stats_t;

/** Copies @p comm's counters into *@p stats. */
zc_status_t zc_comm_stats(const zc_comm_t *comm, zc_stats_t *stats);

/**
 * Names the JSON file @p comm writes its statistics to when it is destroyed,
 * instead of ZIPCCL_STATS_FILE ("%r" is replaced by the rank as there; "" writes
 * none). For programs with several communicators, which would otherwise share
 * one file. Statistics are gathered only when ZIPCCL_STATS or
 * ZIPCCL_STATS_FILE was set at creation (counters of calls and bytes always).
 * The path is copied. Call it while no all-reduce of @p comm is in flight.
 * Errors: ZC_ERR_INVALID_ARG (NULL), ZC_ERR_NO_MEMORY.
 */
zc_status_t zc_comm_set_stats_file(zc_comm_t *comm, const char *path);

/** Name of @p dtype ("f32"), or NULL for an unknown value. */
const char *zc_dtype_name(zc_dtype_t dtype);
/** Bytes per element of @p dtype, 0 for an unknown value. */
size_t zc_dtype_bytes(zc_dtype_t dtype);
/** Name of @p op ("sum"), or NULL for an unknown value. */
const char *zc_redop_name(zc_redop_t op);

#ifdef __cplusplus
}
#endif

#endif
