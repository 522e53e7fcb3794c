/*
 * The CUDA runtime shim of the NCCL interposer: libcudart (the one loaded, else
 * the one next to NCCL, else any by name) and libcuda's cuStreamWaitValue32,
 * dlopen'ed once; the mode that decides where buffers can go (nccl.c's design).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE /* RTLD_NEXT, RTLD_DEFAULT, dladdr */
#endif

#include "plugin/preload/nccl_int.h"

#include "common/log.h"

#include <dlfcn.h>
#include <stdio.h>
#include <string.h>

cuda_ops_t zp_cuda;
static cuda_mode_t cuda_mode;
static pthread_once_t cuda_once = PTHREAD_ONCE_INIT;

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
    if (!zp_nccl_real()->all_reduce || !dladdr(*(void **)&zp_nccl_real()->all_reduce, &info) ||
        !info.dli_fname || !strrchr(info.dli_fname, '/'))
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
#define RT(field, sym) *(void **)&zp_cuda.field = dlsym(rt, sym)
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
    void **fns = (void **)&zp_cuda;
    size_t nfns = offsetof(cuda_ops_t, stream_wait_value32) / sizeof(void *);
    for (size_t i = 0; i < nfns; i++)
        if (!fns[i]) {
            ZC_WARN("ncclAllReduce: libcudart lacks a function zipccl needs: every call goes to "
                    "NCCL");
            cuda_mode = CUDA_UNKNOWN;
            return;
        }
    cudaError_t err = zp_cuda.get_device_count(&n);
    if (err != CUDA_SUCCESS_ || n < 1) {
        zp_cuda.get_last_error();
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
                zp_cuda.get_error_string(err), (int)err);
        cuda_mode = CUDA_UNKNOWN;
        return;
    }
    cuda_mode = CUDA_DEVICE;
    if (!drv)
        drv = open_first(cuda_names);
    /* the v2 entry point (CUDA 11.7 on): stream memory operations without a driver option */
    if (drv)
        *(void **)&zp_cuda.stream_wait_value32 = dlsym(drv, "cuStreamWaitValue32_v2");
    if (!zp_cuda.stream_wait_value32)
        ZC_WARN("ncclAllReduce: libcuda's cuStreamWaitValue32_v2 not found: all-reduces of "
                "device buffers go to NCCL");
}

cuda_mode_t zp_cuda_get(void)
{
    pthread_once(&cuda_once, cuda_resolve);
    return cuda_mode;
}

int zp_cuda_failed(cudaError_t err, const char *what)
{
    if (err == CUDA_SUCCESS_)
        return 0;
    ZC_ERROR("ncclAllReduce: %s failed: %s (cuda error %d)", what,
             zp_cuda.get_error_string ? zp_cuda.get_error_string(err) : "?", (int)err);
    return 1;
}

void zp_device_enter(int device, int *saved_p)
{
    *saved_p = -1;
    if (device < 0 || zp_cuda.get_device(saved_p) != CUDA_SUCCESS_) {
        *saved_p = -1;
        return;
    }
    if (*saved_p != device && zp_cuda_failed(zp_cuda.set_device(device), "cudaSetDevice"))
        *saved_p = -1;
}

void zp_device_leave(int device, int saved)
{
    if (saved >= 0 && saved != device)
        zp_cuda.set_device(saved);
}
