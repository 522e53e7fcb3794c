/*
 * libzipccl-preload.so's NCCL interposer, internal: what its four files share.
 *
 *   nccl.c        the exported wrappers (ncclAllReduce, ncclCommInit*, ncclCommSplit,
 *                 ncclCommDestroy/Abort, ncclCommGetAsyncError, ncclGroupStart/End),
 *                 the real NCCL's functions, the communicators' list; the design
 *   nccl_cuda.c   the CUDA runtime shim: libcudart and libcuda dlopen'ed, their table
 *   nccl_proxy.c  the proxy thread: host calls, and staged ones (D2H into a pinned
 *                 buffer, the zipccl all-reduce, the cuStreamWaitValue32 flag, H2D)
 *   nccl_boot.c   the bootstrap over the real NCCL (ncclAllGather/ncclBroadcast) and
 *                 the agreement of the ranks that sets a communicator up
 *
 * Each function takes the communicator it works on; c->lock guards what
 * pcomm_t says it does.
 */
#ifndef ZC_PLUGIN_PRELOAD_NCCL_INT_H
#define ZC_PLUGIN_PRELOAD_NCCL_INT_H

#include "plugin/preload/preload.h"

#include "plugin/nccl/nccl_abi.h"
#include "plugin/nccl/nccl_types.h"

#include <limits.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* ---- NCCL and CUDA types (nccl.h, cuda_runtime_api.h, cuda.h) ---- */

typedef struct ncclComm *ncclComm_t;
typedef struct {
    char internal[128];
} ncclUniqueId;

/* The leading fields of ncclConfig_t, the same in every version that has it (2.14 to 2.28). */
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
} nccl_config_head_t;

#define NCCL_CONFIG_UNDEF_INT INT_MIN
#define NCCL_SPLIT_NOCOLOR (-1)

typedef void *cudaStream_t;
typedef void *cudaEvent_t;
typedef int cudaError_t;

#define CUDA_SUCCESS_ 0
#define CUDA_ERROR_NOT_READY 600 /* cudaErrorNotReady: cudaEventQuery, not yet */
#define CUDA_ERROR_NO_DEVICE 100 /* cudaErrorNoDevice */
#define CUDA_MEMCPY_H2D 1
#define CUDA_MEMCPY_D2H 2
#define CUDA_HOST_ALLOC_PORTABLE 0x01
#define CUDA_HOST_ALLOC_MAPPED 0x02
#define CUDA_EVENT_BLOCKING_SYNC 0x01
#define CUDA_EVENT_DISABLE_TIMING 0x02
#define CUDA_STREAM_NON_BLOCKING 0x01
#define CUDA_MEMORY_TYPE_DEVICE 2
#define CUDA_MEMORY_TYPE_MANAGED 3
#define CU_STREAM_WAIT_VALUE_GEQ 0x0

/* cudaPointerAttributes: type, device, devicePointer, hostPointer (+ reserved in CUDA 13) */
typedef struct {
    int type;
    int device;
    void *device_pointer;
    void *host_pointer;
    long reserved[16];
} cuda_pointer_attributes_t;

/* ---- the real functions ---- */

typedef struct nccl_ops {
    ncclResult_t (*comm_init_rank)(ncclComm_t *, int, ncclUniqueId, int);
    ncclResult_t (*comm_init_rank_config)(ncclComm_t *, int, ncclUniqueId, int, void *);
    ncclResult_t (*comm_init_all)(ncclComm_t *, int, const int *);
    ncclResult_t (*comm_split)(ncclComm_t, int, int, ncclComm_t *, void *);
    ncclResult_t (*comm_destroy)(ncclComm_t);
    ncclResult_t (*comm_abort)(ncclComm_t);
    ncclResult_t (*comm_count)(const ncclComm_t, int *);
    ncclResult_t (*comm_user_rank)(const ncclComm_t, int *);
    ncclResult_t (*comm_cu_device)(const ncclComm_t, int *);
    ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t *);
    ncclResult_t (*all_reduce)(const void *, void *, size_t, ncclDataType_t, ncclRedOp_t,
                               ncclComm_t, cudaStream_t);
    ncclResult_t (*all_gather)(const void *, void *, size_t, ncclDataType_t, ncclComm_t,
                               cudaStream_t);
    ncclResult_t (*broadcast)(const void *, void *, size_t, ncclDataType_t, int, ncclComm_t,
                              cudaStream_t);
    ncclResult_t (*group_start)(void);
    ncclResult_t (*group_end)(void);
} nccl_ops_t;

typedef struct cuda_ops {
    cudaError_t (*get_device_count)(int *);
    cudaError_t (*get_device)(int *);
    cudaError_t (*set_device)(int);
    cudaError_t (*pointer_get_attributes)(cuda_pointer_attributes_t *, const void *);
    cudaError_t (*stream_is_capturing)(cudaStream_t, int *);
    cudaError_t (*stream_create_with_flags)(cudaStream_t *, unsigned);
    cudaError_t (*stream_destroy)(cudaStream_t);
    cudaError_t (*stream_synchronize)(cudaStream_t);
    cudaError_t (*memcpy_async)(void *, const void *, size_t, int, cudaStream_t);
    cudaError_t (*event_create_with_flags)(cudaEvent_t *, unsigned);
    cudaError_t (*event_record)(cudaEvent_t, cudaStream_t);
    cudaError_t (*event_synchronize)(cudaEvent_t);
    cudaError_t (*event_query)(cudaEvent_t);
    cudaError_t (*device_synchronize)(void);
    cudaError_t (*event_destroy)(cudaEvent_t);
    cudaError_t (*host_alloc)(void **, size_t, unsigned);
    cudaError_t (*free_host)(void *);
    cudaError_t (*host_get_device_pointer)(void **, void *, unsigned);
    cudaError_t (*malloc)(void **, size_t);
    cudaError_t (*free)(void *);
    cudaError_t (*get_last_error)(void);
    const char *(*get_error_string)(cudaError_t);
    /* libcuda's CUresult cuStreamWaitValue32_v2(CUstream, CUdeviceptr, cuuint32_t, unsigned) */
    int (*stream_wait_value32)(cudaStream_t, unsigned long long, uint32_t, unsigned);
} cuda_ops_t;

/* What this process's CUDA allows. */
typedef enum cuda_mode {
    CUDA_NONE,    /* no device: every buffer is host memory */
    CUDA_DEVICE,  /* libcudart with a device: buffers are classified */
    CUDA_UNKNOWN, /* CUDA is loaded but libcudart not found: buffers cannot be classified */
} cuda_mode_t;

/* ---- communicators ---- */

/* A pinned staging buffer with the events of the call that uses it. */
typedef struct stage {
    struct stage *next;     /* in the free list */
    struct stage *all_next; /* in the list of all stages, for the teardown */
    void *buf;
    size_t cap;
    cudaEvent_t ev_in;  /* the D2H copy into buf is done */
    cudaEvent_t ev_out; /* the H2D copy out of buf is done: buf may be reused */
} stage_t;

/* One all-reduce for the proxy thread. */
typedef struct job {
    struct job *next;
    const void *sendbuf;
    void *recvbuf;
    size_t count;
    zc_dtype_t dtype;
    zc_redop_t op;
    uint64_t key;
    stage_t *stage; /* staged call; NULL: host buffers, the caller waits for done */
    uint32_t seq;   /* staged call: the flag value that releases the stream */
    int ev_out_ok;  /* stage->ev_out was recorded: the stage is recycled after it (else the
                       teardown synchronizes the device before freeing it) */
    int done;
    zc_status_t status;
} job_t;

typedef struct pcomm {
    struct pcomm *next;
    ncclComm_t nccl;
    int rank, nranks;
    int blocking;         /* from its config: a split without config inherits it */
    const char *excluded; /* why calls on it always go to NCCL; NULL: it may use zipccl */

    pthread_mutex_t lock;
    pthread_cond_t cond;
    zc_comm_t *zc;
    ncclResult_t error; /* a staged call (or a host call's lost peer) failed: every later call
                           fails; a failed creation excludes the comm instead */
    int device;         /* the comm's CUDA device (ncclCommCuDevice), -1 without CUDA */
    int staged_ok;      /* cuStreamWaitValue32 on the flag works on this device (probed) */
    int aborting;       /* ncclCommAbort: the proxy skips what is left (atomic) */
    int unfenced;       /* staged calls whose copy back has no event: sync before freeing */

    pthread_t proxy;
    int proxy_on, stop;
    job_t *head, *tail;
    stage_t *free_stages, *all_stages;
    uint32_t *flag; /* pinned, mapped: the last staged call completed */
    void *flag_dev;
    uint32_t seq;
} pcomm_t;

/* run_host, run_staged: the call goes to the real ncclAllReduce after all. */
#define PASS_TO_NCCL (-1)

/* ---- nccl.c ---- */

/* The real NCCL's functions (NULL where NCCL lacks one), resolved once, thread safe. */
const nccl_ops_t *zp_nccl_real(void);

/* ---- nccl_cuda.c ---- */

/* libcudart's functions (and libcuda's cuStreamWaitValue32), valid once zp_cuda_get ran. */
extern cuda_ops_t zp_cuda;

/* What this process's CUDA allows, found once (thread safe); the table filled accordingly. */
cuda_mode_t zp_cuda_get(void);

/* Logs a failed CUDA call; returns whether @p err is an error. */
int zp_cuda_failed(cudaError_t err, const char *what);

/* Makes @p device current (when >= 0), remembering the caller's in @p saved_p. */
void zp_device_enter(int device, int *saved_p);
void zp_device_leave(int device, int saved);

/* ---- nccl_proxy.c ---- */

/* The proxy thread of @p arg (a pcomm_t): runs its queued calls in order. */
void *zp_proxy_main(void *arg);

/* Releases every stream waiting on @p c's flag (c->lock held): the last sequence number issued. */
void zp_flag_release_all(pcomm_t *c);

/* Stops the proxy, destroys the zipccl communicator, frees the stages and the flag. */
void zp_teardown(pcomm_t *c);

/*
 * An eligible all-reduce on host buffers (run by the proxy, waited for) or on
 * device buffers (staged, in stream order): an ncclResult_t, or PASS_TO_NCCL.
 */
int zp_run_host(pcomm_t *c, const void *sendbuf, void *recvbuf, size_t count, zc_dtype_t dtype,
                zc_redop_t op, cudaStream_t stream);
int zp_run_staged(pcomm_t *c, const void *sendbuf, void *recvbuf, size_t count, zc_dtype_t dtype,
                  zc_redop_t op, cudaStream_t stream);

/* ---- nccl_boot.c ---- */

/*
 * Makes @p c's zipccl communicator (c->lock held), collectively over the real
 * NCCL; always ncclSuccess: c->excluded says whether the comm uses zipccl.
 */
ncclResult_t zp_setup(pcomm_t *c);

#endif
