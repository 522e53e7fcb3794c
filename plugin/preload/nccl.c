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
 * Files: nccl_int.h lists them. zipccl errors become NCCL's results through zc_nccl_result
 * (plugin/nccl/nccl_types.h, the plugin's mapping too), logged once; an error of a staged call,
 * found on the proxy thread after ncclAllReduce returned, is reported by ncclCommGetAsyncError and
 * by every later eligible call on that communicator.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT, RTLD_DEFAULT, dladdr */
#endif

#include "plugin/preload/nccl_int.h"

#include "common/log.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static nccl_ops_t nccl;
static pthread_once_t nccl_once = PTHREAD_ONCE_INIT;

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

const nccl_ops_t *zp_nccl_real(void)
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

/* ---- communicators --------------------------------------------------------------------------- */

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

static void pcomm_free(pcomm_t *c)
{
    zp_teardown(c);
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
    if (zp_cuda.pointer_get_attributes(&attr, ptr) != CUDA_SUCCESS_) {
        zp_cuda.get_last_error();
        return -1;
    }
    return attr.type == CUDA_MEMORY_TYPE_DEVICE || attr.type == CUDA_MEMORY_TYPE_MANAGED;
}

static route_t route(const void *sendbuf, const void *recvbuf, cudaStream_t stream)
{
    int capturing = 0;

    switch (zp_cuda_get()) {
    case CUDA_NONE: return ROUTE_HOST;
    case CUDA_UNKNOWN: return ROUTE_NCCL;
    case CUDA_DEVICE: break;
    }
    /* a captured call is replayed by the graph without us: NCCL's own kernels must be in it */
    if (zp_cuda.stream_is_capturing(stream, &capturing) != CUDA_SUCCESS_) {
        zp_cuda.get_last_error();
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
    return zp_cuda.stream_wait_value32 ? ROUTE_STAGED : ROUTE_NCCL;
}

ZP_EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                     cudaStream_t stream)
{
    const nccl_ops_t *real = zp_nccl_real();
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
    case ROUTE_HOST: r = zp_run_host(c, sendbuff, recvbuff, count, dtype, zop, stream); break;
    case ROUTE_STAGED: r = zp_run_staged(c, sendbuff, recvbuff, count, dtype, zop, stream); break;
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
    const nccl_ops_t *real = zp_nccl_real();
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
    const nccl_ops_t *real = zp_nccl_real();
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
    const nccl_ops_t *real = zp_nccl_real();
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
    const nccl_ops_t *real = zp_nccl_real();
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
    const nccl_ops_t *real = zp_nccl_real();
    if (!real->comm_destroy)
        return missing("ncclCommDestroy");
    pcomm_t *c = pcomm_unlink(comm);
    if (c)
        pcomm_free(c); /* first: its queued calls still use the comm's stream and peers */
    return real->comm_destroy(comm);
}

ZP_EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    const nccl_ops_t *real = zp_nccl_real();
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
    zp_flag_release_all(
        c); /* now, not after a zipccl call the proxy may be in (its results are lost) */
    pthread_mutex_unlock(&c->lock);
    ncclResult_t r = real->comm_abort(comm);
    pcomm_free(c);
    return r;
}

ZP_EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    const nccl_ops_t *real = zp_nccl_real();
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
    const nccl_ops_t *real = zp_nccl_real();
    if (!real->group_start)
        return missing("ncclGroupStart");
    ncclResult_t r = real->group_start();
    if (r == ncclSuccess)
        group_depth++;
    return r;
}

ZP_EXPORT ncclResult_t ncclGroupEnd(void)
{
    const nccl_ops_t *real = zp_nccl_real();
    if (!real->group_end)
        return missing("ncclGroupEnd");
    if (group_depth > 0)
        group_depth--;
    return real->group_end();
}
