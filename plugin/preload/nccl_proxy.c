/*
 * The NCCL interposer's proxy thread, one per communicator: it runs the
 * zipccl all-reduces in call order, on host buffers for a waiting caller, or
 * staged: the stream copies device buffers into a pinned stage, waits on the
 * comm's flag (cuStreamWaitValue32) while the proxy reduces the stage, then
 * copies it back (nccl.c's design).
 */
#include "plugin/preload/nccl_int.h"

#include "common/log.h"

#include <stdlib.h>
#include <time.h>

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
        if ((err = zp_cuda.event_query(ev)) != CUDA_ERROR_NOT_READY)
            return err;
        struct timespec pause = {0, 20000};
        nanosleep(&pause, NULL);
    }
    return CUDA_ERROR_NOT_READY;
}

void zp_flag_release_all(pcomm_t *c)
{
    if (c->flag)
        __atomic_store_n(c->flag, c->seq, __ATOMIC_RELEASE);
}

void *zp_proxy_main(void *arg)
{
    pcomm_t *c = arg;

    /* the comm's device, not the creating thread's current one */
    if (c->device >= 0 && zp_cuda.set_device(c->device) != CUDA_SUCCESS_)
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
        else if (zp_cuda_failed(err, "waiting for the copy to the staging buffer"))
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
            zp_flag_release_all(c);
        else
            __atomic_store_n(c->flag, j->seq, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&c->lock);
        int recycle = 0;
        if (j->ev_out_ok && !aborting) {
            err = event_wait(c, s->ev_out);
            recycle = err == CUDA_SUCCESS_;
            if (err != CUDA_SUCCESS_ && err != CUDA_ERROR_NOT_READY)
                zp_cuda_failed(err, "waiting for the copy back");
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

void zp_teardown(pcomm_t *c)
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
        zp_device_enter(c->device, &saved);
        fenced =
            !zp_cuda_failed(zp_cuda.device_synchronize(), "cudaDeviceSynchronize before freeing "
                                                          "the staging buffers");
        zp_device_leave(c->device, saved);
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
        zp_cuda.event_destroy(s->ev_in);
        zp_cuda.event_destroy(s->ev_out);
        zp_cuda.free_host(s->buf);
        free(s);
    }
    c->free_stages = NULL;
    if (c->flag)
        zp_cuda.free_host(c->flag);
    c->flag = NULL;
}

/*
 * The zipccl side of @p c, made on first use (c->lock held): ncclSuccess, an
 * error (every later call fails with it), or PASS_TO_NCCL when the setup failed
 * on some rank and excluded the comm on all.
 */
static int pcomm_ready(pcomm_t *c)
{
    if (c->error == ncclSuccess && !c->zc && !c->excluded)
        c->error = zp_setup(c);
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

int zp_run_host(pcomm_t *c, const void *sendbuf, void *recvbuf, size_t count, zc_dtype_t dtype,
                zc_redop_t op, cudaStream_t stream)
{
    /* work queued before the call may still write the host buffers */
    if (zp_cuda_get() == CUDA_DEVICE &&
        zp_cuda_failed(zp_cuda.stream_synchronize(stream), "cudaStreamSynchronize"))
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
    if (zp_cuda_failed(zp_cuda.host_alloc(&s->buf, s->cap, CUDA_HOST_ALLOC_PORTABLE),
                       "cudaHostAlloc of a staging buffer"))
        goto err_free;
    if (zp_cuda_failed(zp_cuda.event_create_with_flags(&s->ev_in, ev_flags), "cudaEventCreate"))
        goto err_free_buf;
    if (zp_cuda_failed(zp_cuda.event_create_with_flags(&s->ev_out, ev_flags), "cudaEventCreate"))
        goto err_destroy_ev_in;
    s->all_next = c->all_stages;
    c->all_stages = s;
    return s;
err_destroy_ev_in:
    zp_cuda.event_destroy(s->ev_in);
err_free_buf:
    zp_cuda.free_host(s->buf);
err_free:
    free(s);
    return NULL;
}

int zp_run_staged(pcomm_t *c, const void *sendbuf, void *recvbuf, size_t count, zc_dtype_t dtype,
                  zc_redop_t op, cudaStream_t stream)
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
    zp_device_enter(c->device, &saved);
    stage_t *s = stage_get(c, bytes);
    if (!s) {
        r = ncclUnhandledCudaError;
        goto err_leave;
    }
    uint32_t seq = c->seq + 1;
    int wait_err = 0;
    if (zp_cuda_failed(zp_cuda.memcpy_async(s->buf, sendbuf, bytes, CUDA_MEMCPY_D2H, stream),
                       "cudaMemcpyAsync to the staging buffer")) {
        /* nothing was enqueued: the stage is free again */
        s->next = c->free_stages;
        c->free_stages = s;
        r = ncclUnhandledCudaError;
        goto err_leave;
    }
    if (zp_cuda_failed(zp_cuda.event_record(s->ev_in, stream), "cudaEventRecord") ||
        (wait_err = zp_cuda.stream_wait_value32(stream, (unsigned long long)(uintptr_t)c->flag_dev,
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
        zp_cuda_failed(zp_cuda.memcpy_async(recvbuf, s->buf, bytes, CUDA_MEMCPY_H2D, stream),
                       "cudaMemcpyAsync from the staging buffer");
    *j = (job_t){.count = count,
                 .dtype = dtype,
                 .op = op,
                 .key = zp_tensor_key(recvbuf, count),
                 .stage = s,
                 .seq = seq,
                 /* behind the copy back, or behind the wait when that copy failed: either way
                    the stream is done with the stage once it completes */
                 .ev_out_ok =
                     !zp_cuda_failed(zp_cuda.event_record(s->ev_out, stream), "cudaEventRecord")};
    enqueue(c, j);
    zp_device_leave(c->device, saved);
    pthread_mutex_unlock(&c->lock);
    return copy_failed ? ncclUnhandledCudaError : ncclSuccess;
err_leave:
    zp_device_leave(c->device, saved);
err_unlock:
    pthread_mutex_unlock(&c->lock);
    free(j);
    return r;
}
