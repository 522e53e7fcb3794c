/*
 * One rank of tests/gpu/nccl_real.sh: ncclAllReduce (f32 sum) through the real
 * NCCL on GPU 0, with zipccl's net and CollNet plugin underneath (the script
 * sets NCCL_NET_PLUGIN, NCCL_HOSTID=nodeN, NCCL_COLLNET_ENABLE, NCCL_ALGO).
 *
 *   nccl_allreduce RANK NRANKS ID_FILE MODE COUNT
 *
 * MODE exact: inputs are small integers, every sum is exact in f32: the result
 * must equal it bit for bit (ZIPCCL_COLLNET_CODEC=none, or any codec when the
 * chunks stay below ZIPCCL_MIN_BYTES).
 * MODE qsgd BITS: inputs uniform in [-a_r, a_r], a_r = 1 + r/4; every element
 * must lie within the QSGD bound of tests/plugin/collnet/test_collnet.c
 * (comp_bound; 8 bits: s = 127 levels) and some must differ from the exact sum.
 * Rank 0 writes the ncclUniqueId to ID_FILE; the others wait for it. Exit 0 on
 * success, 1 on a wrong result, 2 on an error (printed).
 *
 * NCCL 2.30's per-communicator plugin lifecycle: ZC_REAL_ROUNDS=N (default 1)
 * runs N communicators one after the other (each init, all-reduce, destroy:
 * with NCCL_NET_PLUGIN_REF_COUNT=0 NCCL unloads the plugin after each destroy
 * and loads it again for the next); ZC_REAL_PAIR=1 makes each round two
 * communicators at once, A and B: both all-reduce, A is destroyed, B
 * all-reduces again (its plugin contexts outlive A's finalize), then B goes.
 * Ids are ID_FILE.<round>.<a|b>.
 */
#include <cuda_runtime.h>
#include <nccl.h>

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* What went wrong in a call that returned @p e, or NULL when it succeeded. */
static const char *cuda_error(cudaError_t e)
{
    return e == cudaSuccess ? NULL : cudaGetErrorString(e);
}

static const char *nccl_error(ncclResult_t r)
{
    return r == ncclSuccess ? NULL : ncclGetErrorString(r);
}

/* Prints the failed call @p call and returns 2 (an error) from main. */
#define RETURN_ON_ERROR(error, call)                                                               \
    do {                                                                                           \
        const char *error_ = (error);                                                              \
        if (error_) {                                                                              \
            fprintf(stderr, "rank %d: %s: %s\n", rank, call, error_);                              \
            return 2;                                                                              \
        }                                                                                          \
    } while (0)
#define CUDA_OK(x) RETURN_ON_ERROR(cuda_error(x), #x)
#define NCCL_OK(x) RETURN_ON_ERROR(nccl_error(x), #x)

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ULL;
    x ^= x >> 33;
    return x;
}

static double amplitude(int r)
{
    return 1.0 + r / 4.0;
}

static float input(int exact, int r, size_t i)
{
    uint64_t h = mix((uint64_t)r << 40 ^ i);
    if (exact)
        return (float)((int)(h % 41) - 20); /* |sum| <= 80: exact in f32 */
    double u = (double)(h >> 11) * 0x1p-53;
    return (float)(amplitude(r) * (2 * u - 1));
}

/* Rank 0 writes a new ncclUniqueId to @p path; the others read it. 0, or 2 on an error. */
static int share_id(int rank, const char *path, ncclUniqueId *id)
{
    if (rank == 0) {
        NCCL_OK(ncclGetUniqueId(id));
        char tmp[4200];
        snprintf(tmp, sizeof(tmp), "%s.tmp", path);
        FILE *f = fopen(tmp, "wb");
        if (!f || fwrite(id, sizeof(*id), 1, f) != 1 || fclose(f) != 0 || rename(tmp, path)) {
            fprintf(stderr, "rank 0: cannot write %s\n", path);
            return 2;
        }
        return 0;
    }
    int got = 0;
    for (int tries = 0; tries < 6000 && !got; tries++) {
        FILE *f = fopen(path, "rb");
        if (f) {
            got = fread(id, sizeof(*id), 1, f) == 1;
            fclose(f);
        }
        if (!got)
            usleep(10000);
    }
    if (!got) {
        fprintf(stderr, "rank %d: no unique id in %s after 60 s\n", rank, path);
        return 2;
    }
    return 0;
}

/* One ncclAllReduce on @p comm, checked: 0 right, 1 wrong, 2 an error (printed). */
static int allreduce_check(ncclComm_t comm, int rank, int nranks, int exact, size_t count, int bits)
{
    float *host = (float *)malloc(count * sizeof(float));
    float *dev;
    cudaStream_t stream;
    for (size_t i = 0; i < count; i++)
        host[i] = input(exact, rank, i);
    CUDA_OK(cudaMalloc(&dev, count * sizeof(float)));
    CUDA_OK(cudaStreamCreate(&stream));
    CUDA_OK(cudaMemcpy(dev, host, count * sizeof(float), cudaMemcpyHostToDevice));
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    NCCL_OK(ncclAllReduce(dev, dev, count, ncclFloat, ncclSum, comm, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    clock_gettime(CLOCK_MONOTONIC, &t1);
    CUDA_OK(cudaMemcpy(host, dev, count * sizeof(float), cudaMemcpyDeviceToHost));

    /* the bound of test_collnet.c's comp_bound for qsgd with the max scale */
    const double u32 = 0x1p-24, s = (double)((1 << (bits - 1)) - 1), once = 1 / s + 2 * u32;
    double big_m = 0;
    for (int r = 0; r < nranks; r++)
        big_m += amplitude(r);
    size_t bad = 0, inexact = 0;
    double worst = 0;
    for (size_t i = 0; i < count; i++) {
        double ref = 0, abs_sum = 0;
        for (int r = 0; r < nranks; r++) {
            double v = input(exact, r, i);
            ref += v;
            abs_sum += fabs(v);
        }
        double got = host[i], tol = 0;
        if (!exact) {
            double err = once * big_m;
            if (nranks > 2)
                err += once * big_m * (1 + once);
            err += (nranks + 2) * u32 * (abs_sum + err);
            tol = err + u32 * (fabs(ref) + err) + 0x1p-150;
        }
        if (!(fabs(got - ref) <= tol)) {
            if (bad++ < 5)
                fprintf(stderr, "rank %d: element %zu is %.9g, expected %.9g within %.3g\n", rank,
                        i, got, ref, tol);
        }
        if (tol > 0)
            worst = fmax(worst, fabs(got - ref) / tol);
        inexact += got != (float)ref;
    }
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    printf("rank %d: %zu floats, %s, %.1f ms: %zu wrong, %zu inexact, largest error %.3f of the "
           "bound\n",
           rank, count, exact ? "exact" : "qsgd", ms, bad, inexact, worst);
    if (!exact && inexact == 0) {
        fprintf(stderr, "rank %d: every result is the exact sum: was anything compressed?\n", rank);
        bad++;
    }
    CUDA_OK(cudaStreamDestroy(stream));
    cudaFree(dev);
    free(host);
    return bad ? 1 : 0;
}

int main(int argc, char **argv)
{
    int rank = argc > 1 ? atoi(argv[1]) : -1;
    if (argc < 6) {
        fprintf(stderr, "usage: %s RANK NRANKS ID_FILE exact|qsgd COUNT [BITS]\n", argv[0]);
        return 2;
    }
    int nranks = atoi(argv[2]);
    const char *id_file = argv[3];
    int exact = strcmp(argv[4], "exact") == 0;
    size_t count = (size_t)atol(argv[5]);
    int bits = argc > 6 ? atoi(argv[6]) : 8;

    CUDA_OK(cudaSetDevice(0));
    const char *rounds_s = getenv("ZC_REAL_ROUNDS"), *pair_s = getenv("ZC_REAL_PAIR");
    int rounds = rounds_s ? atoi(rounds_s) : 1, pair = pair_s && atoi(pair_s) == 1;
    size_t bad = 0;
    for (int k = 0; k < (rounds > 0 ? rounds : 1); k++) {
        ncclComm_t comm[2];
        int ncomms = pair ? 2 : 1;
        for (int c = 0; c < ncomms; c++) {
            char path[4096];
            ncclUniqueId id;
            if (rounds_s || pair)
                snprintf(path, sizeof(path), "%s.%d.%c", id_file, k, 'a' + c);
            else
                snprintf(path, sizeof(path), "%s", id_file);
            if (share_id(rank, path, &id))
                return 2;
            NCCL_OK(ncclCommInitRank(&comm[c], nranks, id, rank));
        }
        for (int c = 0; c < ncomms; c++) {
            int rc = allreduce_check(comm[c], rank, nranks, exact, count, bits);
            if (rc == 2)
                return 2;
            bad += rc;
        }
        NCCL_OK(ncclCommDestroy(comm[0]));
        if (pair) { /* B after A's destroy */
            int rc = allreduce_check(comm[1], rank, nranks, exact, count, bits);
            if (rc == 2)
                return 2;
            bad += rc;
            NCCL_OK(ncclCommDestroy(comm[1]));
        }
    }
    return bad ? 1 : 0;
}
