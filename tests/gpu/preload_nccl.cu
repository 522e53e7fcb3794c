/*
 * One rank of tests/gpu/preload_nccl.sh: NCCL on a real GPU with libzipccl-preload.so
 * preloaded (or not). The script starts SIZE processes on one GPU, each its own NCCL "node"
 * (NCCL_HOSTID=nodeR), and gives them RANK, SIZE and ID_FILE (rank 0 writes the unique id
 * there, the others read it).
 *
 *   preload_nccl zipccl   ZIPCCL_CODEC=qsgd ZIPCCL_ALGO=allgather: eligible calls of device
 *                         buffers through zipccl, in stream order (a kernel writes each input on
 *                         the stream right before the call, another reads the result right
 *                         after, several calls in flight with no synchronization between them),
 *                         results within QSGD's bound and identical on every rank; an int32 sum
 *                         and a call captured into a CUDA graph go to NCCL (exact);
 *                         ZIPCCL_STATS_FILE counts exactly the eligible calls
 *   preload_nccl exact    ZIPCCL_CODEC=none (or no preload): every call is NCCL's, exact
 *
 * Inputs of the exact checks are small integers, whose sums are exact in any order. Exit 0
 * passed, 1 failed, 77 no CUDA device.
 */
#include "../preload/preload_inputs.h"

#include <cuda_runtime.h>
#include <nccl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int rank_, size_;

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "rank %d: ", rank_);                                                       \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        exit(1);                                                                                   \
    } while (0)

/* A failed CUDA or NCCL call @p call ends the rank (FAIL). */
static void cuda_ok(cudaError_t e, const char *call)
{
    if (e != cudaSuccess)
        FAIL("%s: %s", call, cudaGetErrorString(e));
}

static void nccl_ok(ncclResult_t r, const char *call)
{
    if (r != ncclSuccess)
        FAIL("%s: %s", call, ncclGetErrorString(r));
}

#define CUDA(call) cuda_ok((call), #call)
#define NCCL(call) nccl_ok((call), #call)

/* Rank r's element i of call k: uniform in [-a_r, a_r] (exact == 0), or an integer (exact). */
__host__ __device__ static float input(int k, int r, size_t i, int exact)
{
    uint64_t h = input_hash(k, r, i);
    if (exact)
        return (float)((int)(h >> 54) - 512);
    return (float)input_uniform(h, r);
}

__global__ void fill(float *x, size_t n, int k, int r, int exact)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = input(k, r, i, exact);
}

__global__ void fill_int(int *x, size_t n, int k, int r)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        x[i] = (int)input(k, r, i, 1) * 1000 + r;
}

/* out = 2 * in: reads the all-reduce's result in stream order */
__global__ void twice(const float *in, float *out, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x)
        out[i] = 2.0f * in[i];
}

static void check_identical(ncclComm_t comm, cudaStream_t s, const void *host, size_t len)
{
    uint64_t mine = fnv1a64(host, len), *dev, all[64];
    CUDA(cudaMalloc(&dev, sizeof(uint64_t) * (size_ + 1)));
    CUDA(cudaMemcpy(dev + size_, &mine, sizeof(mine), cudaMemcpyHostToDevice));
    NCCL(ncclAllGather(dev + size_, dev, 1, ncclUint64, comm, s));
    CUDA(cudaStreamSynchronize(s));
    CUDA(cudaMemcpy(all, dev, sizeof(uint64_t) * size_, cudaMemcpyDeviceToHost));
    CUDA(cudaFree(dev));
    for (int r = 0; r < size_; r++)
        if (all[r] != mine)
            FAIL("rank %d holds another result", r);
}

/* QSGD (s = 7, max scale, allgather) bound of tests/preload/nccl/test_preload_nccl.c, doubled
 * for the kernel that reads the result (exact: a power of two). */
static void check_qsgd(const float *got, size_t n, int k, double factor, const char *what)
{
    double u32 = 0x1p-24, big_m = 0, once = 1 / 7.0 + 2 * u32, worst = 0;
    for (int r = 0; r < size_; r++)
        big_m += amplitude(r);
    for (size_t i = 0; i < n; i++) {
        double exact = 0, abs_sum = 0;
        for (int r = 0; r < size_; r++) {
            double v = input(k, r, i, 0);
            exact += v;
            abs_sum += fabs(v);
        }
        double err = once * big_m;
        err += (size_ + 2) * u32 * (abs_sum + err) + size_ * 0x1p-53 * abs_sum;
        double tol = factor * (err + u32 * (fabs(exact) + err) + 0x1p-150);
        double e = fabs(got[i] - factor * exact);
        worst = fmax(worst, e / tol);
        if (!(e <= tol))
            FAIL("%s: element %zu is %.9g, expected %.9g within %.3g", what, i, got[i],
                 factor * exact, tol);
    }
    if (rank_ == 0)
        printf("%s: %zu values within QSGD's bound (largest error %.3f of it)\n", what, n, worst);
}

static void check_exact(const float *got, size_t n, int k, double factor, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        double exact = 0;
        for (int r = 0; r < size_; r++)
            exact += input(k, r, i, 1);
        if (got[i] != (float)(factor * exact))
            FAIL("%s: element %zu is %.9g, expected exactly %.9g", what, i, got[i], factor * exact);
    }
    if (rank_ == 0)
        printf("%s: %zu values exact\n", what, n);
}

/* "calls" of the total in this rank's ZIPCCL_STATS_FILE, -1 without the file */
static long stats_calls(void)
{
    const char *pattern = getenv("ZIPCCL_STATS_FILE");
    char path[1024], text[4096];
    if (!pattern || !strstr(pattern, "%r"))
        FAIL("ZIPCCL_STATS_FILE with %%r is needed");
    const char *pr = strstr(pattern, "%r");
    snprintf(path, sizeof(path), "%.*s%d%s", (int)(pr - pattern), pattern, rank_, pr + 2);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *t = strstr(text, "\"total\": {");
    long calls = -1;
    if (!t || sscanf(t, "\"total\": {\"calls\": %ld", &calls) != 1)
        FAIL("no total in %s", path);
    return calls;
}

static ncclUniqueId get_id(const char *file)
{
    ncclUniqueId id;
    if (rank_ == 0) {
        char tmp[1024];
        NCCL(ncclGetUniqueId(&id));
        snprintf(tmp, sizeof(tmp), "%s.tmp", file);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(&id, sizeof(id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, file) != 0)
            FAIL("cannot write %s", file);
        return id;
    }
    for (int tries = 0; tries < 6000; tries++) {
        FILE *f = fopen(file, "rb");
        if (f) {
            size_t got = fread(&id, sizeof(id), 1, f);
            fclose(f);
            if (got == 1)
                return id;
        }
        usleep(10000);
    }
    FAIL("no unique id in %s after 60 s", file);
    return id;
}

int main(int argc, char **argv)
{
    int ndev = 0;
    if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
        printf("no CUDA device: skipping\n");
        return 77;
    }
    if (argc != 2 || !getenv("RANK") || !getenv("SIZE") || !getenv("ID_FILE")) {
        fprintf(stderr, "usage: RANK=r SIZE=n ID_FILE=path %s zipccl|exact\n", argv[0]);
        return 2;
    }
    int zipccl = strcmp(argv[1], "zipccl") == 0;
    rank_ = atoi(getenv("RANK"));
    size_ = atoi(getenv("SIZE"));
    CUDA(cudaSetDevice(0));
    ncclUniqueId id = get_id(getenv("ID_FILE"));
    ncclComm_t comm;
    NCCL(ncclCommInitRank(&comm, size_, id, rank_));
    cudaStream_t s;
    CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

    const size_t n = 1 << 20; /* 4 MiB of f32 */
    const int calls = 4;
    float *send, *recv[calls], *out, *host = (float *)malloc(n * sizeof(float) * calls);
    CUDA(cudaMalloc(&send, n * sizeof(float) * calls));
    CUDA(cudaMalloc(&out, n * sizeof(float) * calls));
    for (int k = 0; k < calls; k++) {
        CUDA(cudaMalloc(&recv[k], n * sizeof(float)));
        CUDA(cudaMemset(recv[k], 0xff, n * sizeof(float))); /* NaNs until the result lands */
    }
    CUDA(cudaDeviceSynchronize());

    /* several calls in flight in stream order, inputs written right before each, results read
     * right after; one in place (k = 3 writes into its own input) */
    int exact = !zipccl;
    for (int k = 0; k < calls; k++) {
        float *in = send + (size_t)k * n, *res = k == 3 ? in : recv[k];
        fill<<<256, 256, 0, s>>>(in, n, k, rank_, exact);
        NCCL(ncclAllReduce(in, res, n, ncclFloat32, ncclSum, comm, s));
        twice<<<256, 256, 0, s>>>(res, out + (size_t)k * n, n);
    }
    CUDA(cudaMemcpyAsync(host, out, n * sizeof(float) * calls, cudaMemcpyDeviceToHost, s));
    CUDA(cudaStreamSynchronize(s));
    for (int k = 0; k < calls; k++) {
        char what[64];
        snprintf(what, sizeof(what), "f32 sum %d, read by a kernel", k);
        if (zipccl)
            check_qsgd(host + (size_t)k * n, n, k, 2.0, what);
        else
            check_exact(host + (size_t)k * n, n, k, 2.0, what);
    }
    check_identical(comm, s, host, n * sizeof(float) * calls);

    /* int32: always NCCL's, exact */
    int *ibuf, *ihost = (int *)malloc(n * sizeof(int));
    CUDA(cudaMalloc(&ibuf, n * sizeof(int)));
    fill_int<<<256, 256, 0, s>>>(ibuf, n, 9, rank_);
    NCCL(ncclAllReduce(ibuf, ibuf, n, ncclInt32, ncclSum, comm, s));
    CUDA(cudaMemcpyAsync(ihost, ibuf, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    CUDA(cudaStreamSynchronize(s));
    for (size_t i = 0; i < n; i++) {
        long want = 0;
        for (int r = 0; r < size_; r++)
            want += (long)((int)input(9, r, i, 1) * 1000 + r);
        if (ihost[i] != (int)want)
            FAIL("int32 sum: element %zu is %d, expected %ld", i, ihost[i], want);
    }
    if (rank_ == 0)
        printf("int32 sum: %zu values exact (NCCL)\n", n);

    /* graph capture: the captured call is NCCL's own (exact with integer inputs) */
    cudaGraph_t graph;
    cudaGraphExec_t exec;
    fill<<<256, 256, 0, s>>>(send, n, 7, rank_, 1);
    CUDA(cudaStreamSynchronize(s));
    CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    NCCL(ncclAllReduce(send, recv[0], n, ncclFloat32, ncclSum, comm, s));
    CUDA(cudaStreamEndCapture(s, &graph));
    CUDA(cudaGraphInstantiate(&exec, graph, 0));
    for (int rep = 0; rep < 2; rep++) {
        CUDA(cudaMemsetAsync(recv[0], 0xff, n * sizeof(float), s));
        CUDA(cudaGraphLaunch(exec, s));
        CUDA(cudaMemcpyAsync(host, recv[0], n * sizeof(float), cudaMemcpyDeviceToHost, s));
        CUDA(cudaStreamSynchronize(s));
        check_exact(host, n, 7, 1.0, rep ? "captured f32 sum, replayed" : "captured f32 sum");
    }
    CUDA(cudaGraphExecDestroy(exec));
    CUDA(cudaGraphDestroy(graph));

    ncclResult_t async = ncclSuccess;
    NCCL(ncclCommGetAsyncError(comm, &async));
    if (async != ncclSuccess)
        FAIL("async error %s", ncclGetErrorString(async));
    NCCL(ncclCommDestroy(comm));

    /* zipccl ran exactly the eligible calls: the staged ones, not the int32 or the captured */
    long zc_calls = stats_calls();
    if (zipccl && zc_calls != calls)
        FAIL("zipccl's statistics count %ld calls, expected %d", zc_calls, calls);
    if (!zipccl && zc_calls > 0)
        FAIL("zipccl's statistics count %ld calls, expected none", zc_calls);
    if (rank_ == 0)
        printf("zipccl ran %ld calls\n", zc_calls < 0 ? 0 : zc_calls);
    return 0;
}
