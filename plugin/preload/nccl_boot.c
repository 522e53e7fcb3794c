/*
 * The NCCL interposer's bootstrap over the real NCCL: zipccl's allgather and
 * broadcast as ncclAllGather/ncclBroadcast (through device buffers on a
 * private stream when the comm has a device), and the setup of a comm's
 * zipccl side, agreed by every rank (nccl.c's design).
 */
#include "plugin/preload/nccl_int.h"

#include "common/log.h"

#include <stdlib.h>

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
    if (b->device >= 0 && zp_cuda_failed(zp_cuda.stream_synchronize(b->stream), what))
        return ZC_ERR_IO;
    return ZC_OK;
}

static zc_status_t boot_device_buffer(boot_t *b, size_t len)
{
    if (len <= b->dev_cap)
        return ZC_OK;
    if (b->dev)
        zp_cuda.free(b->dev);
    b->dev = NULL;
    b->dev_cap = 0;
    if (zp_cuda_failed(zp_cuda.malloc(&b->dev, len), "cudaMalloc of the bootstrap buffer"))
        return ZC_ERR_NO_MEMORY;
    b->dev_cap = len;
    return ZC_OK;
}

static zc_status_t boot_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    boot_t *b = ctx;
    size_t total = len * (size_t)b->nranks;

    if (b->device < 0)
        return boot_wait(b, zp_nccl_real()->all_gather(mine, all, len, ncclUint8, b->nccl, NULL),
                         "ncclAllGather");
    /* the device buffer: everyone's parts, then this rank's own at offset total */
    ZC_CHECK(boot_device_buffer(b, total + len));
    char *dev = b->dev;
    if (zp_cuda_failed(zp_cuda.memcpy_async(dev + total, mine, len, CUDA_MEMCPY_H2D, b->stream),
                       "bootstrap copy"))
        return ZC_ERR_IO;
    ZC_CHECK(boot_wait(
        b, zp_nccl_real()->all_gather(dev + total, dev, len, ncclUint8, b->nccl, b->stream),
        "ncclAllGather"));
    if (zp_cuda_failed(zp_cuda.memcpy_async(all, dev, total, CUDA_MEMCPY_D2H, b->stream),
                       "bootstrap copy"))
        return ZC_ERR_IO;
    return boot_wait(b, ncclSuccess, "bootstrap copy");
}

static zc_status_t boot_broadcast(void *ctx, void *buf, size_t len, int root)
{
    boot_t *b = ctx;

    if (b->device < 0)
        return boot_wait(b,
                         zp_nccl_real()->broadcast(buf, buf, len, ncclUint8, root, b->nccl, NULL),
                         "ncclBroadcast");
    ZC_CHECK(boot_device_buffer(b, len));
    if (zp_cuda_failed(zp_cuda.memcpy_async(b->dev, buf, len, CUDA_MEMCPY_H2D, b->stream),
                       "bootstrap copy"))
        return ZC_ERR_IO;
    ZC_CHECK(boot_wait(
        b, zp_nccl_real()->broadcast(b->dev, b->dev, len, ncclUint8, root, b->nccl, b->stream),
        "ncclBroadcast"));
    if (zp_cuda_failed(zp_cuda.memcpy_async(buf, b->dev, len, CUDA_MEMCPY_D2H, b->stream),
                       "bootstrap copy"))
        return ZC_ERR_IO;
    return boot_wait(b, ncclSuccess, "bootstrap copy");
}

static void boot_destroy(void *ctx)
{
    boot_t *b = ctx;
    if (b->dev)
        zp_cuda.free(b->dev);
    if (b->stream)
        zp_cuda.stream_destroy(b->stream);
    free(b);
}

/* Frees what boot_destroy frees but not @p b itself (the agreement's boot_t is on the stack). */
static void boot_release(boot_t *b)
{
    if (b->dev)
        zp_cuda.free(b->dev);
    if (b->stream)
        zp_cuda.stream_destroy(b->stream);
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
    if (zp_cuda_failed(zp_cuda.stream_create_with_flags(&b->stream, CUDA_STREAM_NON_BLOCKING),
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
    if (zp_cuda_failed(zp_cuda.host_alloc((void **)&c->flag, 64,
                                          CUDA_HOST_ALLOC_MAPPED | CUDA_HOST_ALLOC_PORTABLE),
                       "cudaHostAlloc of the completion flag") ||
        zp_cuda_failed(zp_cuda.host_get_device_pointer(&c->flag_dev, c->flag, 0),
                       "cudaHostGetDevicePointer of the completion flag")) {
        if (c->flag)
            zp_cuda.free_host(c->flag);
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
    if (zp_cuda.stream_wait_value32) {
        int werr = zp_cuda.stream_wait_value32(
            a->stream, (unsigned long long)(uintptr_t)c->flag_dev, 0, CU_STREAM_WAIT_VALUE_GEQ);
        if (werr == 0 &&
            !zp_cuda_failed(zp_cuda.stream_synchronize(a->stream), "the flag wait probe"))
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
ncclResult_t zp_setup(pcomm_t *c)
{
    const zp_engine_t *eng = zp_engine(); /* logged once when it cannot be loaded */
    boot_t a = {0};                       /* the agreements' */
    boot_t *b = calloc(1, sizeof(*b));
    zc_status_t st = ZC_ERR_NO_MEMORY;
    int saved = -1, ok;

    c->device = -1;
    c->staged_ok = 0;
    if (zp_cuda_get() == CUDA_DEVICE) {
        /* the comm's device, not the calling thread's current one */
        if (!zp_nccl_real()->comm_cu_device ||
            zp_nccl_real()->comm_cu_device(c->nccl, &c->device) != ncclSuccess || c->device < 0) {
            if (zp_cuda_failed(zp_cuda.get_device(&c->device), "cudaGetDevice"))
                c->device = -1;
        }
        zp_device_enter(c->device, &saved);
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
        if (st >= 0 && pthread_create(&c->proxy, NULL, zp_proxy_main, c) != 0) {
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
    zp_device_leave(c->device, saved);
    if (!ok) {
        zp_teardown(c);
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
