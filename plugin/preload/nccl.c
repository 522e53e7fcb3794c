/*
 * libzipccl-preload.so, NCCL side: ncclAllReduce through zipccl, everything
 * else to NCCL untouched.
 *
 * The wrappers resolve the real functions (dlsym RTLD_NEXT, else NCCL's
 * "pnccl" aliases) and libcudart / libcuda (dlopen, so that the library loads
 * where there is no CUDA) once, on first use. NCCL's and CUDA's headers are not
 * needed: the few types and constants used are written here from nccl.h and
 * cuda_runtime_api.h (CUDA 12 and 13 agree on all of them).
 *
 * Communicators. ncclCommInitRank/Config and ncclCommSplit record the new
 * communicator (rank, size, blocking). A zipccl communicator is made for it at
 * its first eligible ncclAllReduce, which every rank makes (an all-reduce is
 * collective, and eligibility depends only on the arguments and the
 * environment), bootstrapped over the real ncclAllGather/ncclBroadcast. Left
 * to NCCL, always: comms of ncclCommInitAll (several ranks in one thread: a
 * blocking bootstrap would wait for ranks of its own process), comms created
 * inside a group or split from such comms or from comms made by functions not
 * interposed here, and non-blocking comms (as NCCL decides: NCCL_COMM_BLOCKING
 * 0 or 1 over config.blocking; the caller polls ncclCommGetAsyncError, which a
 * zipccl call that blocks in its bootstrap would defeat). The setup ends with
 * every rank agreeing (zp_agree); a failure on any rank leaves the comm to NCCL
 * on all.
 *
 * Eligible ncclAllReduce: ZIPCCL_PRELOAD_NCCL=1, zp_eligible (float sum or avg
 * of at least ZIPCCL_MIN_BYTES, codec not none), a recorded blocking comm, not
 * inside ncclGroupStart/End (interposed to count the depth of this thread), the
 * stream not capturing a CUDA graph, and both buffers of one kind:
 *
 * - Device (or managed) buffers are staged through pinned host memory in stream
 *   order: cudaMemcpyAsync to a staging buffer and an event on the user's
 *   stream; the stream then waits (cuStreamWaitValue32) until a pinned flag
 *   reaches the call's sequence number; cudaMemcpyAsync back into recvbuff and
 *   a second event. The communicator's proxy thread waits for the first event,
 *   runs zp_allreduce in place on the staging buffer and stores the
 *   sequence number into the flag. ncclAllReduce returns at once, as NCCL's.
 *   Why the flag and not a cudaLaunchHostFunc that blocks until the proxy is
 *   done: CUDA runs host functions on one internal thread, so a blocked one
 *   would hold back every other host function of the process (other streams,
 *   other communicators, NCCL's own), and a host function may not call CUDA.
 *   A stream waiting on a flag holds back only that stream. Without
 *   cuStreamWaitValue32 (no libcuda, or a device where it fails: probed once
 *   per comm, agreed by the ranks) device buffers go to NCCL.
 * - Host buffers (no CUDA device or driver at all and libcuda not loaded by the
 *   program, as with the stand-in NCCL of the tests, or cudaPointerGetAttributes
 *   says host/unregistered): the stream is
 *   synchronized and zp_allreduce runs on the caller's buffers (on the
 *   proxy thread, so that calls keep their order); the call returns when done.
 *
 * The tensor key of stateful codecs is made of recvbuff and count, the
 * identity of a gradient bucket across steps (the staging buffer is not).
 * zipccl errors become NCCL's results through zc_nccl_result
 * (plugin/nccl/nccl_types.h, the plugin's mapping too), logged once; an error of a staged call, found on the proxy thread after
 * ncclAllReduce returned, is reported by ncclCommGetAsyncError and by every
 * later eligible call on that communicator.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT, RTLD_DEFAULT */
#endif

#include "plugin/preload/preload.h"

#include "common/log.h"
#include "plugin/nccl/nccl_abi.h"
#include "plugin/nccl/nccl_types.h"

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- NCCL and CUDA types (nccl.h, cuda_runtime_api.h, cuda.h) ------------------------------- */

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

/* The entry points this file exports (preload.map), with nccl.h's signatures. */
ZP_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream);
ZP_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                        int rank);
ZP_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                              int rank, void *config);
ZP_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ZP_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                     void *config);
ZP_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm);
ZP_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm);
ZP_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
ZP_EXPORT ncclResult_t ncclGroupStart(void);
ZP_EXPORT ncclResult_t ncclGroupEnd(void);

/* ---- the real functions -------------------------------------------------------------------- */

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

static nccl_ops_t nccl;
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;
static cuda_ops_t cuda;
static cuda_mode_t cuda_mode;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

/*
 * The real @p name: the next definition after this library, else NCCL's "p" alias, else the
 * loaded libnccl's own. The last one is for a NCCL loaded in a local scope (a dependency of a
 * library dlopen'ed with RTLD_LOCAL, as Python loads extension modules): the program's calls
 * reach this library through the global scope, where RTLD_NEXT and RTLD_DEFAULT cannot see
 * NCCL, but dlopen with RTLD_NOLOAD finds it by name.
 */
static void *real_symbol(const char *name)
{
    static const char *const libs[] = {"libnccl.so.2", "libnccl.so", NULL};
    char alias[64];
    void *fn = dlsym(RTLD_NEXT, name);
    if (fn)
        return fn;
    alias[0] = 'p';
    strncpy(alias + 1, name, sizeof(alias) - 2);
    alias[sizeof(alias) - 1] = '\0';
    fn = dlsym(RTLD_NEXT, alias);
    if (!fn)
        fn = dlsym(RTLD_DEFAULT, alias);
    for (size_t i = 0; !fn && libs[i]; i++) {
        void *h = dlopen(libs[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (h)
            fn = dlsym(h, name);
    }
    return fn;
}

static void nccl_resolve(void)
{
    *(void **)&nccl.comm_init_rank = real_symbol("ncclCommInitRank");
    *(void **)&nccl.comm_init_rank_config = real_symbol("ncclCommInitRankConfig");
    *(void **)&nccl.comm_init_all = real_symbol("ncclCommInitAll");
    *(void **)&nccl.comm_split = real_symbol("ncclCommSplit");
    *(void **)&nccl.comm_destroy = real_symbol("ncclCommDestroy");
    *(void **)&nccl.comm_abort = real_symbol("ncclCommAbort");
    *(void **)&nccl.comm_count = real_symbol("ncclCommCount");
    *(void **)&nccl.comm_user_rank = real_symbol("ncclCommUserRank");
    *(void **)&nccl.comm_cu_device = real_symbol("ncclCommCuDevice");
    *(void **)&nccl.comm_get_async_error = real_symbol("ncclCommGetAsyncError");
    *(void **)&nccl.all_reduce = real_symbol("ncclAllReduce");
    *(void **)&nccl.all_gather = real_symbol("ncclAllGather");
    *(void **)&nccl.broadcast = real_symbol("ncclBroadcast");
    *(void **)&nccl.group_start = real_symbol("ncclGroupStart");
    *(void **)&nccl.group_end = real_symbol("ncclGroupEnd");
}

static const nccl_ops_t *nccl_real(void)
{
    pthread_once(&nccl_once, nccl_resolve);
    return &nccl;
}

/* The wrapper's answer when NCCL lacks @p name (the program was not linked with NCCL). */
static ncclResult_t missing(const char *name)
{
    ZC_LOG_ONCE(ZC_LOG_ERROR,
                "%s: no NCCL library defines it after libzipccl-preload.so (NCCL not loaded?)",
                name);
    return ncclSystemError;
}

static void *open_first(const char *const *names)
{
    for (int load = 0; load < 2; load++)
        for (size_t i = 0; names[i]; i++) {
            void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | (load ? 0 : RTLD_NOLOAD));
            if (h)
                return h;
        }
    return NULL;
}

/* libcudart next to the libnccl that defines ncclAllReduce (CUDA's lib64 holds both). */
static void *cudart_next_to_nccl(const char *const *names)
{
    Dl_info info;
    void *rt = NULL;
    if (!nccl_real()->all_reduce || !dladdr(*(void **)&nccl.all_reduce, &info) || !info.dli_fname ||
        !strrchr(info.dli_fname, '/'))
        return NULL;
    char path[4096];
    int dir = (int)(strrchr(info.dli_fname, '/') - info.dli_fname);
    for (size_t i = 0; !rt && names[i]; i++)
        if (snprintf(path, sizeof(path), "%.*s/%s", dir, info.dli_fname, names[i]) <
            (int)sizeof(path))
            rt = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    return rt;
}

static void *open_loaded(const char *const *names)
{
    for (size_t i = 0; names[i]; i++) {
        void *h = dlopen(names[i], RTLD_NOW | RTLD_LOCAL | RTLD_NOLOAD);
        if (h)
            return h;
    }
    return NULL;
}

static void cuda_resolve(void)
{
    static const char *const cudart_names[] = {"libcudart.so.13", "libcudart.so.12",
                                               "libcudart.so.11.0", "libcudart.so", NULL};
    static const char *const cuda_names[] = {"libcuda.so.1", "libcuda.so", NULL};
    /*
     * The runtime already loaded, else the one next to NCCL (made for the same driver), else
     * any by name: a libcudart newer than the driver answers cudaErrorInsufficientDriver.
     */
    void *rt = open_loaded(cudart_names);
    if (!rt)
        rt = cudart_next_to_nccl(cudart_names);
    if (!rt)
        rt = open_first(cudart_names);
    /* before cudaGetDeviceCount, which loads it: whether the program itself uses the driver */
    void *drv = open_loaded(cuda_names);
    int n = 0;

    if (!rt) {
        /* no runtime to ask about pointers: if the driver is in use, buffers may be device ones */
        cuda_mode = drv ? CUDA_UNKNOWN : CUDA_NONE;
        if (drv)
            ZC_WARN("ncclAllReduce: libcuda is loaded but no libcudart.so.{13,12,11.0} found: "
                    "every call goes to NCCL");
        return;
    }
#define RT(field, sym) *(void **)&cuda.field = dlsym(rt, sym)
    RT(get_device_count, "cudaGetDeviceCount");
    RT(get_device, "cudaGetDevice");
    RT(set_device, "cudaSetDevice");
    RT(pointer_get_attributes, "cudaPointerGetAttributes");
    RT(stream_is_capturing, "cudaStreamIsCapturing");
    RT(stream_create_with_flags, "cudaStreamCreateWithFlags");
    RT(stream_destroy, "cudaStreamDestroy");
    RT(stream_synchronize, "cudaStreamSynchronize");
    RT(memcpy_async, "cudaMemcpyAsync");
    RT(event_create_with_flags, "cudaEventCreateWithFlags");
    RT(event_record, "cudaEventRecord");
    RT(event_synchronize, "cudaEventSynchronize");
    RT(event_query, "cudaEventQuery");
    RT(device_synchronize, "cudaDeviceSynchronize");
    RT(event_destroy, "cudaEventDestroy");
    RT(host_alloc, "cudaHostAlloc");
    RT(free_host, "cudaFreeHost");
    RT(host_get_device_pointer, "cudaHostGetDevicePointer");
    RT(malloc, "cudaMalloc");
    RT(free, "cudaFree");
    RT(get_last_error, "cudaGetLastError");
    RT(get_error_string, "cudaGetErrorString");
#undef RT
    void **fns = (void **)&cuda;
    size_t nfns = offsetof(cuda_ops_t, stream_wait_value32) / sizeof(void *);
    for (size_t i = 0; i < nfns; i++)
        if (!fns[i]) {
            ZC_WARN("ncclAllReduce: libcudart lacks a function zipccl needs: every call goes to "
                    "NCCL");
            cuda_mode = CUDA_UNKNOWN;
            return;
        }
    cudaError_t err = cuda.get_device_count(&n);
    if (err != CUDA_SUCCESS_ || n < 1) {
        cuda.get_last_error();
        /*
         * Host memory only when there can be no device pointer: no device, or no driver at
         * all, and the program has not loaded the driver itself. Any other failure (a runtime
         * too new for the driver, beside a program's static one) leaves device buffers
         * possible, which the host path would dereference: every call then goes to NCCL.
         */
        int no_driver = !open_loaded(cuda_names); /* libcudart would have loaded it */
        if (!drv && (err == CUDA_ERROR_NO_DEVICE || (err == CUDA_SUCCESS_ && n < 1) || no_driver)) {
            cuda_mode = CUDA_NONE;
            return;
        }
        ZC_WARN("ncclAllReduce: cudaGetDeviceCount failed: %s (cuda error %d): buffers cannot "
                "be classified, every call goes to NCCL",
                cuda.get_error_string(err), (int)err);
        cuda_mode = CUDA_UNKNOWN;
        return;
    }
    cuda_mode = CUDA_DEVICE;
    if (!drv)
        drv = open_first(cuda_names);
    /* the v2 entry point (CUDA 11.7 on): stream memory operations without a driver option */
    if (drv)
        *(void **)&cuda.stream_wait_value32 = dlsym(drv, "cuStreamWaitValue32_v2");
    if (!cuda.stream_wait_value32)
        ZC_WARN("ncclAllReduce: libcuda's cuStreamWaitValue32_v2 not found: all-reduces of "
                "device buffers go to NCCL");
}

static cuda_mode_t cuda_get(void)
{
    pthread_once(&cuda_once, cuda_resolve);
    return cuda_mode;
}

/* Logs a failed CUDA call; returns whether @p err is an error. */
static int cuda_failed(cudaError_t err, const char *what)
{
    if (err == CUDA_SUCCESS_)
        return 0;
    ZC_ERROR("ncclAllReduce: %s failed: %s (cuda error %d)", what,
             cuda.get_error_string ? cuda.get_error_string(err) : "?", (int)err);
    return 1;
}

/* ---- communicators --------------------------------------------------------------------------- */

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

static pthread_mutex_t comms_lock = PTHREAD_MUTEX_INITIALIZER;
static pcomm_t *pcomms;
static _Thread_local int group_depth;

static pcomm_t *pcomm_find(ncclComm_t nc)
{
    pthread_mutex_lock(&comms_lock);
    pcomm_t *c = pcomms;
    while (c && c->nccl != nc)
        c = c->next;
    pthread_mutex_unlock(&comms_lock);
    return c;
}

static pcomm_t *pcomm_unlink(ncclComm_t nc)
{
    pthread_mutex_lock(&comms_lock);
    pcomm_t **pp = &pcomms;
    while (*pp && (*pp)->nccl != nc)
        pp = &(*pp)->next;
    pcomm_t *c = *pp;
    if (c)
        *pp = c->next;
    pthread_mutex_unlock(&comms_lock);
    return c;
}

static void pcomm_free(pcomm_t *c);

static void pcomm_add(ncclComm_t nc, int rank, int nranks, int blocking, const char *excluded)
{
    pcomm_t *stale = pcomm_unlink(nc); /* the address of a comm destroyed without us */
    if (stale)
        pcomm_free(stale);
    pcomm_t *c = calloc(1, sizeof(*c));
    if (!c) {
        ZC_ERROR("ncclCommInit: out of memory recording the communicator: its all-reduces go to "
                 "NCCL");
        return;
    }
    c->nccl = nc;
    c->rank = rank;
    c->nranks = nranks;
    c->blocking = blocking;
    c->excluded = excluded ? excluded : blocking ? NULL : "non-blocking";
    c->device = -1;
    pthread_mutex_init(&c->lock, NULL);
    pthread_cond_init(&c->cond, NULL);
    ZC_DEBUG("nccl comm %p: rank %d of %d%s%s", (void *)nc, rank, nranks,
             c->excluded ? ", left to NCCL: " : "", c->excluded ? c->excluded : "");
    pthread_mutex_lock(&comms_lock);
    c->next = pcomms;
    pcomms = c;
    pthread_mutex_unlock(&comms_lock);
}

/*
 * Whether a comm created with @p config (NULL: none given) is blocking, as
 * NCCL decides it (envConfigOverride): NCCL_COMM_BLOCKING when it is 0 or 1
 * overrides the config, else config.blocking when set, else blocking.
 */
static int config_blocking(const void *config)
{
    const nccl_config_head_t *head = config;
    const char *env = getenv("NCCL_COMM_BLOCKING");
    if (env && (strcmp(env, "0") == 0 || strcmp(env, "1") == 0))
        return env[0] == '1';
    if (head && head->size >= sizeof(*head) && head->blocking != NCCL_CONFIG_UNDEF_INT)
        return head->blocking != 0;
    return 1;
}

/* Makes @p device current (when >= 0), remembering the caller's in @p saved_p. */
static void device_enter(int device, int *saved_p)
{
    *saved_p = -1;
    if (device < 0 || cuda.get_device(saved_p) != CUDA_SUCCESS_) {
        *saved_p = -1;
        return;
    }
    if (*saved_p != device && cuda_failed(cuda.set_device(device), "cudaSetDevice"))
        *saved_p = -1;
}

static void device_leave(int device, int saved)
{
    if (saved >= 0 && saved != device)
        cuda.set_device(saved);
}

/* ---- the proxy thread ------------------------------------------------------------------------ */

/*
 * Waits for @p ev, polled, not cudaEventSynchronize: the work before it may sit
 * forever behind a hung kernel on the user's stream, which is when a watchdog
 * calls ncclCommAbort. CUDA_ERROR_NOT_READY when @p c is aborted meanwhile.
 */
static cudaError_t event_wait(pcomm_t *c, cudaEvent_t ev)
{
    cudaError_t err;
    while (!__atomic_load_n(&c->aborting, __ATOMIC_ACQUIRE)) {
        if ((err = cuda.event_query(ev)) != CUDA_ERROR_NOT_READY)
            return err;
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
    return CUDA_ERROR_NOT_READY;
}

/* Releases every stream waiting on @p c's flag (c->lock held): the last sequence number issued. */
static void flag_release_all(pcomm_t *c)
{
    if (c->flag)
        __atomic_store_n(c->flag, c->seq, __ATOMIC_RELEASE);
}

static void *proxy_main(void *arg)
{
    pcomm_t *c = arg;

    /* the comm's device, not the creating thread's current one */
    if (c->device >= 0 && cuda.set_device(c->device) != CUDA_SUCCESS_)
        ZC_WARN("ncclAllReduce: proxy thread cannot select CUDA device %d", c->device);
    pthread_mutex_lock(&c->lock);
    for (;;) {
        while (!c->head && !c->stop)
            pthread_cond_wait(&c->cond, &c->lock);
        if (!c->head)
            break;
        job_t *j = c->head;
        c->head = j->next;
        if (!c->head)
            c->tail = NULL;
        pthread_mutex_unlock(&c->lock);

        zc_status_t st;
        int aborting = __atomic_load_n(&c->aborting, __ATOMIC_ACQUIRE);
        if (!j->stage) {
            st = aborting ? ZC_ERR_PEER
                          : zp_allreduce(zp_engine(), c->zc, j->sendbuf, j->recvbuf, j->count,
                                         j->dtype, j->op, j->key);
            pthread_mutex_lock(&c->lock);
            j->status = st;
            j->done = 1;
            pthread_cond_broadcast(&c->cond);
            continue;
        }
        stage_t *s = j->stage;
        cudaError_t err = aborting ? CUDA_ERROR_NOT_READY : event_wait(c, s->ev_in);
        aborting = __atomic_load_n(&c->aborting, __ATOMIC_ACQUIRE);
        if (aborting)
            st = ZC_ERR_PEER;
        else if (cuda_failed(err, "waiting for the copy to the staging buffer"))
            st = ZC_ERR_IO;
        else
            st =
                zp_allreduce(zp_engine(), c->zc, s->buf, s->buf, j->count, j->dtype, j->op, j->key);
        /*
         * The stream waits for this store whatever happened: a failure must not hang it. On
         * abort the last sequence number issued releases every stream waiting (GEQ).
         */
        pthread_mutex_lock(&c->lock);
        if (aborting)
            flag_release_all(c);
        else
            __atomic_store_n(c->flag, j->seq, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&c->lock);
        int recycle = 0;
        if (j->ev_out_ok && !aborting) {
            err = event_wait(c, s->ev_out);
            recycle = err == CUDA_SUCCESS_;
            if (err != CUDA_SUCCESS_ && err != CUDA_ERROR_NOT_READY)
                cuda_failed(err, "waiting for the copy back");
        }
        pthread_mutex_lock(&c->lock);
        if (!recycle)
            c->unfenced++; /* its copy back may still be queued: the teardown synchronizes */
        if (st < 0 && c->error == ncclSuccess && !aborting) {
            ZC_ERROR("ncclAllReduce: zipccl all-reduce of %zu %s on rank %d of %d failed: %s; "
                     "the communicator reports it from now on",
                     j->count, zc_dtype_name(j->dtype), c->rank, c->nranks, zc_status_string(st));
            c->error = zc_nccl_result(st);
        }
        if (recycle) {
            s->next = c->free_stages;
            c->free_stages = s;
        }
        free(j);
    }
    pthread_mutex_unlock(&c->lock);
    return NULL;
}

/* ---- the bootstrap over the real NCCL ------------------------------------------------------ */

typedef struct boot {
    ncclComm_t nccl;
    int nranks;
    int device; /* through device buffers on a private stream; -1: host buffers */
    cudaStream_t stream;
    void *dev;
    size_t dev_cap;
} boot_t;

static zc_status_t boot_wait(boot_t *b, ncclResult_t r, const char *what)
{
    if (r != ncclSuccess) {
        ZC_ERROR("zipccl bootstrap over NCCL: %s failed: nccl error %d", what, (int)r);
        return r == ncclRemoteError ? ZC_ERR_PEER : ZC_ERR_IO;
    }
    if (b->device >= 0 && cuda_failed(cuda.stream_synchronize(b->stream), what))
        return ZC_ERR_IO;
    return ZC_OK;
}

static zc_status_t boot_device_buffer(boot_t *b, size_t len)
{
    if (len <= b->dev_cap)
        return ZC_OK;
    if (b->dev)
        cuda.free(b->dev);
    b->dev = NULL;
    b->dev_cap = 0;
    if (cuda_failed(cuda.malloc(&b->dev, len), "cudaMalloc of the bootstrap buffer"))
        return ZC_ERR_NO_MEMORY;
    b->dev_cap = len;
    return ZC_OK;
}

static zc_status_t boot_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    boot_t *b = ctx;
    size_t total = len * (size_t)b->nranks;

    if (b->device < 0)
        return boot_wait(b, nccl.all_gather(mine, all, len, ncclUint8, b->nccl, NULL),
                         "ncclAllGather");
    /* the device buffer: everyone's parts, then this rank's own at offset total */
    ZC_CHECK(boot_device_buffer(b, total + len));
    char *dev = b->dev;
    if (cuda_failed(cuda.memcpy_async(dev + total, mine, len, CUDA_MEMCPY_H2D, b->stream),
                    "bootstrap copy"))
        return ZC_ERR_IO;
    ZC_CHECK(boot_wait(b, nccl.all_gather(dev + total, dev, len, ncclUint8, b->nccl, b->stream),
                       "ncclAllGather"));
    if (cuda_failed(cuda.memcpy_async(all, dev, total, CUDA_MEMCPY_D2H, b->stream),
                    "bootstrap copy"))
        return ZC_ERR_IO;
    return boot_wait(b, ncclSuccess, "bootstrap copy");
}

static zc_status_t boot_broadcast(void *ctx, void *buf, size_t len, int root)
{
    boot_t *b = ctx;

    if (b->device < 0)
        return boot_wait(b, nccl.broadcast(buf, buf, len, ncclUint8, root, b->nccl, NULL),
                         "ncclBroadcast");
    ZC_CHECK(boot_device_buffer(b, len));
    if (cuda_failed(cuda.memcpy_async(b->dev, buf, len, CUDA_MEMCPY_H2D, b->stream),
                    "bootstrap copy"))
        return ZC_ERR_IO;
    ZC_CHECK(boot_wait(b, nccl.broadcast(b->dev, b->dev, len, ncclUint8, root, b->nccl, b->stream),
                       "ncclBroadcast"));
    if (cuda_failed(cuda.memcpy_async(buf, b->dev, len, CUDA_MEMCPY_D2H, b->stream),
                    "bootstrap copy"))
        return ZC_ERR_IO;
    return boot_wait(b, ncclSuccess, "bootstrap copy");
}

static void boot_destroy(void *ctx)
{
    boot_t *b = ctx;
    if (b->dev)
        cuda.free(b->dev);
    if (b->stream)
        cuda.stream_destroy(b->stream);
    free(b);
}

/* ---- creation and teardown of a communicator's zipccl side --------------------------------- */

static void zipccl_teardown(pcomm_t *c)
{
    int aborting = __atomic_load_n(&c->aborting, __ATOMIC_ACQUIRE);
    if (c->proxy_on) {
        pthread_mutex_lock(&c->lock);
        c->stop = 1;
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->lock);
        pthread_join(c->proxy, NULL); /* after the queued calls ran (or were skipped: abort) */
        c->proxy_on = 0;
    }
    if (c->zc)
        zp_engine()->comm_destroy(c->zc);
    c->zc = NULL;
    /*
     * A staged call whose copy back has no event (it failed to enqueue, or the proxy skipped it
     * on abort) may still have its wait, its copies, queued on the user's stream: the flag and
     * the stages are freed only after the device is synchronized. On abort (the device may hold
     * a hung kernel: NCCL's own abort has run, but another comm's may not) they are leaked.
     */
    int fenced = !c->unfenced;
    if (!fenced && !aborting) {
        int saved;
        device_enter(c->device, &saved);
        fenced = !cuda_failed(cuda.device_synchronize(), "cudaDeviceSynchronize before freeing "
                                                         "the staging buffers");
        device_leave(c->device, saved);
    }
    if (!fenced) {
        ZC_WARN("ncclAllReduce: rank %d: %d staged call(s) may still use their staging buffers: "
                "%s pinned buffers are not freed",
                c->rank, c->unfenced, aborting ? "on abort," : "");
        c->all_stages = NULL;
        c->free_stages = NULL;
        c->flag = NULL;
        return;
    }
    while (c->all_stages) {
        stage_t *s = c->all_stages;
        c->all_stages = s->all_next;
        cuda.event_destroy(s->ev_in);
        cuda.event_destroy(s->ev_out);
        cuda.free_host(s->buf);
        free(s);
    }
    c->free_stages = NULL;
    if (c->flag)
        cuda.free_host(c->flag);
    c->flag = NULL;
}

/* Frees what boot_destroy frees but not @p b itself (the agreement's boot_t is on the stack). */
static void boot_release(boot_t *b)
{
    if (b->dev)
        cuda.free(b->dev);
    if (b->stream)
        cuda.stream_destroy(b->stream);
    b->dev = NULL;
    b->stream = NULL;
}

/*
 * A boot_t for @p c: device buffers on c->device (current) and a private stream,
 * or host buffers without CUDA. 0 on success; -1 when the stream cannot be made,
 * and @p b then works on the default stream (the agreement still can).
 */
static int boot_prepare(boot_t *b, pcomm_t *c)
{
    b->nccl = c->nccl;
    b->nranks = c->nranks;
    b->device = c->device;
    b->stream = NULL;
    if (c->device < 0)
        return 0;
    if (cuda_failed(cuda.stream_create_with_flags(&b->stream, CUDA_STREAM_NON_BLOCKING),
                    "cudaStreamCreateWithFlags")) {
        b->stream = NULL;
        return -1;
    }
    return 0;
}

#define AGREE_OK 1     /* this rank is ready */
#define AGREE_STAGED 2 /* and can stage device buffers (flag_prepare) */

static const zp_coll_ops_t boot_ops = {
    .allgather = boot_allgather,
    .broadcast = boot_broadcast,
    .destroy = boot_destroy,
};

/* The agreements' collectives: on the setup's own boot_t, which zipccl does not free. */
static const zp_coll_ops_t agree_ops = {
    .allgather = boot_allgather,
    .broadcast = boot_broadcast,
};

/* The pinned completion flag and whether the device's streams can wait on it (@p a's stream). */
static int flag_prepare(pcomm_t *c, boot_t *a)
{
    if (cuda_failed(cuda.host_alloc((void **)&c->flag, 64,
                                    CUDA_HOST_ALLOC_MAPPED | CUDA_HOST_ALLOC_PORTABLE),
                    "cudaHostAlloc of the completion flag") ||
        cuda_failed(cuda.host_get_device_pointer(&c->flag_dev, c->flag, 0),
                    "cudaHostGetDevicePointer of the completion flag")) {
        if (c->flag)
            cuda.free_host(c->flag);
        c->flag = NULL;
        return -1;
    }
    *c->flag = 0;
    /*
     * Whether cuStreamWaitValue32 on mapped host memory works here, tried once on a wait that
     * is already satisfied: CUDA 12 and 13 have no device attribute for it (cuda.h's memop
     * attributes cover NOR, 64-bit and flushes; 102 is virtual memory management), and a
     * driver without stream memory operations answers CUDA_ERROR_NOT_SUPPORTED.
     */
    c->staged_ok = 0;
    if (cuda.stream_wait_value32) {
        int werr = cuda.stream_wait_value32(a->stream, (unsigned long long)(uintptr_t)c->flag_dev,
                                            0, CU_STREAM_WAIT_VALUE_GEQ);
        if (werr == 0 && !cuda_failed(cuda.stream_synchronize(a->stream), "the flag wait probe"))
            c->staged_ok = 1;
        else if (werr)
            ZC_WARN("ncclAllReduce: cuStreamWaitValue32 on device %d failed (cuda driver error "
                    "%d): all-reduces of device buffers go to NCCL",
                    c->device, werr);
    }
    return 0;
}

/*
 * Makes @p c's zipccl communicator (c->lock held). Collective: every rank is
 * here, in the same ncclAllReduce. The ranks agree twice over the real NCCL
 * (zp_agree):
 * before the bootstrap, that every rank is ready for it (the engine loaded, its
 * CUDA resources made), and after it, that every rank has a communicator. A
 * failure on any rank excludes the comm on every rank: its calls go to NCCL.
 * Always ncclSuccess: c->excluded says whether the comm uses zipccl.
 */
static ncclResult_t zipccl_setup(pcomm_t *c)
{
    const zp_engine_t *eng = zp_engine(); /* logged once when it cannot be loaded */
    boot_t a = {0};                       /* the agreements' */
    boot_t *b = calloc(1, sizeof(*b));
    zc_status_t st = ZC_ERR_NO_MEMORY;
    int saved = -1, ok;

    c->device = -1;
    c->staged_ok = 0;
    if (cuda_get() == CUDA_DEVICE) {
        /* the comm's device, not the calling thread's current one */
        if (!nccl.comm_cu_device || nccl.comm_cu_device(c->nccl, &c->device) != ncclSuccess ||
            c->device < 0) {
            if (cuda_failed(cuda.get_device(&c->device), "cudaGetDevice"))
                c->device = -1;
        }
        device_enter(c->device, &saved);
    }
    /* without its own stream the agreement runs on the default one: this rank must join it */
    ok = boot_prepare(&a, c) == 0;
    ok = ok && eng && b && boot_prepare(b, c) == 0 && (c->device < 0 || flag_prepare(c, &a) == 0);

    int bits =
        zp_agree(&agree_ops, &a, c->nranks, ok ? AGREE_OK | (c->staged_ok ? AGREE_STAGED : 0) : 0);
    c->staged_ok = (bits & AGREE_STAGED) != 0; /* device buffers staged on every rank or none */
    if (bits & AGREE_OK) {
        st = zp_comm_init(eng, c->rank, c->nranks, &boot_ops, b, NULL, &c->zc); /* takes b */
        b = NULL;
        if (st < 0)
            ZC_ERROR("ncclAllReduce: creating the zipccl communicator of rank %d of %d failed: %s",
                     c->rank, c->nranks, zc_status_string(st));
        if (st >= 0 && pthread_create(&c->proxy, NULL, proxy_main, c) != 0) {
            ZC_ERROR("ncclAllReduce: cannot start the proxy thread of rank %d", c->rank);
            st = ZC_ERR_NO_MEMORY;
        } else if (st >= 0) {
            c->proxy_on = 1;
        }
        ok = zp_agree(&agree_ops, &a, c->nranks, st >= 0 ? AGREE_OK : 0) & AGREE_OK;
    } else {
        if (ok)
            ZC_WARN("ncclAllReduce: rank %d of %d: another rank cannot use zipccl", c->rank,
                    c->nranks);
        ok = 0;
    }
    if (b)
        boot_destroy(b);
    boot_release(&a);
    device_leave(c->device, saved);
    if (!ok) {
        zipccl_teardown(c);
        c->excluded = "zipccl could not be set up on every rank";
        ZC_WARN("ncclAllReduce: nccl comm %p, rank %d of %d: %s; its all-reduces go to NCCL",
                (void *)c->nccl, c->rank, c->nranks, c->excluded);
        return ncclSuccess;
    }
    ZC_INFO("ncclAllReduce: zipccl communicator for nccl comm %p, rank %d of %d, %s buffers",
            (void *)c->nccl, c->rank, c->nranks,
            c->device >= 0 && c->staged_ok ? "device and host" : "host");
    return ncclSuccess;
}

static void pcomm_free(pcomm_t *c)
{
    zipccl_teardown(c);
    pthread_cond_destroy(&c->cond);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

/* ---- ncclAllReduce ------------------------------------------------------------------------- */

typedef enum route {
    ROUTE_NCCL,   /* the real ncclAllReduce */
    ROUTE_HOST,   /* zipccl on the caller's host buffers */
    ROUTE_STAGED, /* zipccl on a pinned copy of device buffers, in stream order */
} route_t;

/* 1: device or managed memory, 0: host (registered or not), -1: unknown */
static int is_device(const void *ptr)
{
    cuda_pointer_attributes_t attr;
    memset(&attr, 0, sizeof(attr));
    if (cuda.pointer_get_attributes(&attr, ptr) != CUDA_SUCCESS_) {
        cuda.get_last_error();
        return -1;
    }
    return attr.type == CUDA_MEMORY_TYPE_DEVICE || attr.type == CUDA_MEMORY_TYPE_MANAGED;
}

static route_t route(const void *sendbuf, const void *recvbuf, cudaStream_t stream)
{
    int capturing = 0;

    switch (cuda_get()) {
    case CUDA_NONE: return ROUTE_HOST;
    case CUDA_UNKNOWN: return ROUTE_NCCL;
    case CUDA_DEVICE: break;
    }
    /* a captured call is replayed by the graph without us: NCCL's own kernels must be in it */
    if (cuda.stream_is_capturing(stream, &capturing) != CUDA_SUCCESS_) {
        cuda.get_last_error();
        return ROUTE_NCCL;
    }
    if (capturing)
        return ROUTE_NCCL;
    int send_dev = is_device(sendbuf), recv_dev = is_device(recvbuf);
    if (send_dev < 0 || send_dev != recv_dev)
        return ROUTE_NCCL;
    if (!send_dev)
        return ROUTE_HOST;
    /* whether the device can wait on the flag is known after the setup (run_staged) */
    return cuda.stream_wait_value32 ? ROUTE_STAGED : ROUTE_NCCL;
}

/* run_host, run_staged: the call goes to the real ncclAllReduce after all. */
#define PASS_TO_NCCL (-1)

/*
 * The zipccl side of @p c, made on first use (c->lock held): ncclSuccess, an
 * error (every later call fails with it), or PASS_TO_NCCL when the setup failed
 * on some rank and excluded the comm on all.
 */
static int pcomm_ready(pcomm_t *c)
{
    if (c->error == ncclSuccess && !c->zc && !c->excluded)
        c->error = zipccl_setup(c);
    if (c->error == ncclSuccess && c->excluded)
        return PASS_TO_NCCL;
    return c->error;
}

static void enqueue(pcomm_t *c, job_t *j)
{
    j->next = NULL;
    if (c->tail)
        c->tail->next = j;
    else
        c->head = j;
    c->tail = j;
    pthread_cond_broadcast(&c->cond);
}

static int run_host(pcomm_t *c, const void *sendbuf, void *recvbuf, size_t count, zc_dtype_t dtype,
                    zc_redop_t op, cudaStream_t stream)
{
    /* work queued before the call may still write the host buffers */
    if (cuda_mode == CUDA_DEVICE &&
        cuda_failed(cuda.stream_synchronize(stream), "cudaStreamSynchronize"))
        return ncclUnhandledCudaError;
    job_t j = {.sendbuf = sendbuf,
               .recvbuf = recvbuf,
               .count = count,
               .dtype = dtype,
               .op = op,
               .key = zp_tensor_key(recvbuf, count)};
    pthread_mutex_lock(&c->lock);
    int r = pcomm_ready(c);
    if (r == ncclSuccess) {
        enqueue(c, &j);
        while (!j.done)
            pthread_cond_wait(&c->cond, &c->lock);
    }
    pthread_mutex_unlock(&c->lock);
    if (r != ncclSuccess)
        return r;
    if (j.status < 0) {
        ZC_ERROR("ncclAllReduce: zipccl all-reduce of %zu %s on rank %d of %d failed: %s", count,
                 zc_dtype_name(dtype), c->rank, c->nranks, zc_status_string(j.status));
        r = zc_nccl_result(j.status);
        /* a lost peer breaks the communicator (zipccl.h); a mismatch only fails this call */
        if (r == ncclRemoteError) {
            pthread_mutex_lock(&c->lock);
            c->error = r;
            pthread_mutex_unlock(&c->lock);
        }
    }
    return r;
}

/* A pinned staging buffer of at least @p bytes (c->lock held); NULL when CUDA fails. */
static stage_t *stage_get(pcomm_t *c, size_t bytes)
{
    stage_t **pp = &c->free_stages;
    while (*pp && (*pp)->cap < bytes)
        pp = &(*pp)->next;
    if (*pp) {
        stage_t *s = *pp;
        *pp = s->next;
        return s;
    }
    stage_t *s = calloc(1, sizeof(*s));
    if (!s)
        return NULL;
    /* whole MiBs, so that buckets of about the same size share buffers */
    s->cap = (bytes + (1u << 20) - 1) & ~(size_t)((1u << 20) - 1);
    unsigned ev_flags = CUDA_EVENT_DISABLE_TIMING | CUDA_EVENT_BLOCKING_SYNC;
    if (cuda_failed(cuda.host_alloc(&s->buf, s->cap, CUDA_HOST_ALLOC_PORTABLE),
                    "cudaHostAlloc of a staging buffer"))
        goto err_free;
    if (cuda_failed(cuda.event_create_with_flags(&s->ev_in, ev_flags), "cudaEventCreate"))
        goto err_free_buf;
    if (cuda_failed(cuda.event_create_with_flags(&s->ev_out, ev_flags), "cudaEventCreate"))
        goto err_destroy_ev_in;
    s->all_next = c->all_stages;
    c->all_stages = s;
    return s;
err_destroy_ev_in:
    cuda.event_destroy(s->ev_in);
err_free_buf:
    cuda.free_host(s->buf);
err_free:
    free(s);
    return NULL;
}

static int run_staged(pcomm_t *c, const void *sendbuf, void *recvbuf, size_t count,
                      zc_dtype_t dtype, zc_redop_t op, cudaStream_t stream)
{
    size_t bytes = count * zc_dtype_bytes(dtype);
    job_t *j = calloc(1, sizeof(*j));
    int r, saved = -1;

    if (!j) {
        ZC_ERROR("ncclAllReduce: out of memory");
        return ncclSystemError;
    }
    pthread_mutex_lock(&c->lock);
    r = pcomm_ready(c);
    if (r != ncclSuccess)
        goto err_unlock;
    if (!c->staged_ok) {
        r = PASS_TO_NCCL; /* no rank can wait on the flag (agreed in zipccl_setup) */
        goto err_unlock;
    }
    /* the comm's device: the stages and events belong to it, whatever the caller's current */
    device_enter(c->device, &saved);
    stage_t *s = stage_get(c, bytes);
    if (!s) {
        r = ncclUnhandledCudaError;
        goto err_leave;
    }
    uint32_t seq = c->seq + 1;
    int wait_err = 0;
    if (cuda_failed(cuda.memcpy_async(s->buf, sendbuf, bytes, CUDA_MEMCPY_D2H, stream),
                    "cudaMemcpyAsync to the staging buffer")) {
        /* nothing was enqueued: the stage is free again */
        s->next = c->free_stages;
        c->free_stages = s;
        r = ncclUnhandledCudaError;
        goto err_leave;
    }
    if (cuda_failed(cuda.event_record(s->ev_in, stream), "cudaEventRecord") ||
        (wait_err = cuda.stream_wait_value32(stream, (unsigned long long)(uintptr_t)c->flag_dev,
                                             seq, CU_STREAM_WAIT_VALUE_GEQ)) != 0) {
        if (wait_err)
            ZC_ERROR("ncclAllReduce: cuStreamWaitValue32 failed: cuda driver error %d", wait_err);
        /*
         * The copy into the stage is queued on the stream with no event behind it: the stage
         * is not reused, and the teardown synchronizes the device before freeing it.
         */
        c->unfenced++;
        r = ncclUnhandledCudaError;
        goto err_leave;
    }
    /* from here the stream waits for seq: the job must run whatever fails next */
    c->seq = seq;
    int copy_failed =
        cuda_failed(cuda.memcpy_async(recvbuf, s->buf, bytes, CUDA_MEMCPY_H2D, stream),
                    "cudaMemcpyAsync from the staging buffer");
    *j =
        (job_t){.count = count,
                .dtype = dtype,
                .op = op,
                .key = zp_tensor_key(recvbuf, count),
                .stage = s,
                .seq = seq,
                /* behind the copy back, or behind the wait when that copy failed: either way
                   the stream is done with the stage once it completes */
                .ev_out_ok = !cuda_failed(cuda.event_record(s->ev_out, stream), "cudaEventRecord")};
    enqueue(c, j);
    device_leave(c->device, saved);
    pthread_mutex_unlock(&c->lock);
    return copy_failed ? ncclUnhandledCudaError : ncclSuccess;
err_leave:
    device_leave(c->device, saved);
err_unlock:
    pthread_mutex_unlock(&c->lock);
    free(j);
    return r;
}

ZP_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream)
{
    const nccl_ops_t *real = nccl_real();
    const zc_config_t *cfg;
    zc_dtype_t dtype;
    zc_redop_t zop;
    pcomm_t *c;

    if (!real->all_reduce)
        return missing("ncclAllReduce");
    if (group_depth > 0 || count == 0 || !sendbuff || !recvbuff ||
        !zc_nccl_dtype(datatype, &dtype) || !zc_nccl_redop(op, &zop) || !(cfg = zp_config()) ||
        !cfg->preload_nccl || !zp_eligible(cfg, dtype, zop, count) || !(c = pcomm_find(comm)) ||
        c->excluded)
        return real->all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
    int r = PASS_TO_NCCL;
    switch (route(sendbuff, recvbuff, stream)) {
    case ROUTE_HOST: r = run_host(c, sendbuff, recvbuff, count, dtype, zop, stream); break;
    case ROUTE_STAGED: r = run_staged(c, sendbuff, recvbuff, count, dtype, zop, stream); break;
    case ROUTE_NCCL: break;
    }
    if (r != PASS_TO_NCCL)
        return (ncclResult_t)r;
    return real->all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

/* ---- communicator lifetime and groups ------------------------------------------------------ */

static const char *const in_group = "created inside a group (one thread, several comms)";

ZP_EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    const nccl_ops_t *real = nccl_real();
    if (!real->comm_init_rank)
        return missing("ncclCommInitRank");
    int grouped = group_depth > 0;
    ncclResult_t r = real->comm_init_rank(comm, nranks, commId, rank);
    if ((r == ncclSuccess || r == ncclInProgress) && comm && *comm)
        pcomm_add(*comm, rank, nranks, config_blocking(NULL), grouped ? in_group : NULL);
    return r;
}

ZP_EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                              int rank, void *config)
{
    const nccl_ops_t *real = nccl_real();
    if (!real->comm_init_rank_config)
        return missing("ncclCommInitRankConfig");
    int grouped = group_depth > 0;
    ncclResult_t r = real->comm_init_rank_config(comm, nranks, commId, rank, config);
    if ((r == ncclSuccess || r == ncclInProgress) && comm && *comm)
        pcomm_add(*comm, rank, nranks, config_blocking(config), grouped ? in_group : NULL);
    return r;
}

ZP_EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comms, int ndev, const int *devlist)
{
    const nccl_ops_t *real = nccl_real();
    if (!real->comm_init_all)
        return missing("ncclCommInitAll");
    ncclResult_t r = real->comm_init_all(comms, ndev, devlist);
    if (r == ncclSuccess && comms)
        for (int i = 0; i < ndev; i++)
            if (comms[i])
                pcomm_add(comms[i], i, ndev, 1, "ncclCommInitAll (every rank in one process)");
    return r;
}

ZP_EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                     void *config)
{
    const nccl_ops_t *real = nccl_real();
    if (!real->comm_split)
        return missing("ncclCommSplit");
    int grouped = group_depth > 0;
    ncclResult_t r = real->comm_split(comm, color, key, newcomm, config);
    if ((r != ncclSuccess && r != ncclInProgress) || !newcomm || !*newcomm)
        return r; /* NCCL_SPLIT_NOCOLOR leaves *newcomm NULL */
    pcomm_t *parent = pcomm_find(comm);
    const char *why = NULL;
    int blocking = config   ? config_blocking(config)
                   : parent ? parent->blocking
                            : config_blocking(NULL);
    int rank = -1, nranks = 0;
    if (grouped)
        why = in_group;
    else if (!parent)
        why = "split from a comm not made by ncclCommInitRank/Config";
    else if (parent->excluded && parent->blocking)
        why = "split from a comm left to NCCL";
    else if (blocking && (r != ncclSuccess || !real->comm_user_rank || !real->comm_count ||
                          real->comm_user_rank(*newcomm, &rank) != ncclSuccess ||
                          real->comm_count(*newcomm, &nranks) != ncclSuccess))
        why = "its rank and size are unknown";
    pcomm_add(*newcomm, rank, nranks, blocking, why);
    return r;
}

ZP_EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    const nccl_ops_t *real = nccl_real();
    if (!real->comm_destroy)
        return missing("ncclCommDestroy");
    pcomm_t *c = pcomm_unlink(comm);
    if (c)
        pcomm_free(c); /* first: its queued calls still use the comm's stream and peers */
    return real->comm_destroy(comm);
}

ZP_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    const nccl_ops_t *real = nccl_real();
    if (!real->comm_abort)
        return missing("ncclCommAbort");
    pcomm_t *c = pcomm_unlink(comm);
    if (!c)
        return real->comm_abort(comm);
    /*
     * The proxy skips what is queued and releases the waiting streams; NCCL's abort first,
     * which ends NCCL kernels that may hold the user's stream (the proxy would otherwise wait
     * behind them). A zipccl call already running ends at ZIPCCL_TIMEOUT_S at most.
     */
    __atomic_store_n(&c->aborting, 1, __ATOMIC_RELEASE);
    pthread_mutex_lock(&c->lock);
    flag_release_all(
        c); /* now, not after a zipccl call the proxy may be in (its results are lost) */
    pthread_mutex_unlock(&c->lock);
    ncclResult_t r = real->comm_abort(comm);
    pcomm_free(c);
    return r;
}

ZP_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    const nccl_ops_t *real = nccl_real();
    if (!real->comm_get_async_error)
        return missing("ncclCommGetAsyncError");
    ncclResult_t r = real->comm_get_async_error(comm, asyncError);
    pcomm_t *c;
    if (r == ncclSuccess && asyncError && *asyncError == ncclSuccess && (c = pcomm_find(comm))) {
        pthread_mutex_lock(&c->lock);
        *asyncError = c->error;
        pthread_mutex_unlock(&c->lock);
    }
    return r;
}

ZP_EXPORT ncclResult_t ncclGroupStart(void)
{
    const nccl_ops_t *real = nccl_real();
    if (!real->group_start)
        return missing("ncclGroupStart");
    ncclResult_t r = real->group_start();
    if (r == ncclSuccess)
        group_depth++;
    return r;
}

ZP_EXPORT ncclResult_t ncclGroupEnd(void)
{
    const nccl_ops_t *real = nccl_real();
    if (!real->group_end)
        return missing("ncclGroupEnd");
    if (group_depth > 0)
        group_depth--;
    return real->group_end();
}
