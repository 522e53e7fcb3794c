/*
 * The stand-in NCCL of standin_nccl.h: one POSIX shared-memory segment per
 * communicator, named in the unique id. Each rank owns a slot of SLOT_BYTES;
 * a collective moves its data through the slots in rounds (copy in, barrier,
 * read everyone's, barrier), so messages of any size pass. Barriers spin with
 * a deadline: a rank that never comes aborts the process with a message
 * instead of hanging the test.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif

#include "standin_nccl.h"

#include "common/half.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))
#define SLOT_BYTES (1u << 20)
#define MAX_RANKS 64
#define MAGIC 0x5a43534eu /* "ZCSN" */
#define DEADLINE_S 120

typedef struct shared {
    uint32_t magic; /* written last by the creator */
    int nranks;
    int joined;
    int arrived;
    unsigned gen;
    char pad[44];
    unsigned char slots[]; /* nranks * SLOT_BYTES */
} shared_t;

struct ncclComm {
    shared_t *sh;
    size_t map_len;
    int rank, nranks;
    unsigned splits; /* splits of this comm so far: names the children */
    char name[96];
};

static long allreduce_calls;
static unsigned id_counter;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void spin(double start, const char *what, const ncclComm_t comm)
{
    if (now_s() - start > DEADLINE_S) {
        fprintf(stderr, "standin nccl: rank %d of %s waited %d s in %s: aborting\n",
                comm ? comm->rank : -1, comm ? comm->name : "?", DEADLINE_S, what);
        abort();
    }
    sched_yield();
}

static void barrier(ncclComm_t comm)
{
    shared_t *sh = comm->sh;
    unsigned gen = __atomic_load_n(&sh->gen, __ATOMIC_ACQUIRE);
    double start = now_s();

    if (__atomic_add_fetch(&sh->arrived, 1, __ATOMIC_ACQ_REL) == comm->nranks) {
        __atomic_store_n(&sh->arrived, 0, __ATOMIC_RELAXED);
        __atomic_add_fetch(&sh->gen, 1, __ATOMIC_RELEASE);
        return;
    }
    while (__atomic_load_n(&sh->gen, __ATOMIC_ACQUIRE) == gen)
        spin(start, "a barrier", comm);
}

static unsigned char *slot(ncclComm_t comm, int rank)
{
    return comm->sh->slots + (size_t)rank * SLOT_BYTES;
}

static ncclResult_t unique_id(ncclUniqueId *uniqueId)
{
    struct timespec ts;
    if (!uniqueId)
        return ncclInvalidArgument;
    clock_gettime(CLOCK_REALTIME, &ts);
    memset(uniqueId, 0, sizeof(*uniqueId));
    snprintf(uniqueId->internal, sizeof(uniqueId->internal), "/zc-standin-%d-%u-%lx-%lx",
             (int)getpid(), __atomic_add_fetch(&id_counter, 1, __ATOMIC_RELAXED),
             (unsigned long)ts.tv_sec, (unsigned long)ts.tv_nsec);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId)
{
    return unique_id(uniqueId);
}

/* Opens (or creates) the segment @p name for rank @p rank of @p nranks; collective. */
static ncclResult_t comm_open(const char *name, int nranks, int rank, ncclComm_t *comm_p)
{
    if (nranks < 1 || nranks > MAX_RANKS || rank < 0 || rank >= nranks || name[0] != '/' ||
        strlen(name) >= sizeof((*comm_p)->name))
        return ncclInvalidArgument;
    size_t len = sizeof(shared_t) + (size_t)nranks * SLOT_BYTES;
    int created = 1;
    int fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 && errno == EEXIST) {
        created = 0;
        fd = shm_open(name, O_RDWR, 0600);
    }
    if (fd < 0) {
        fprintf(stderr, "standin nccl: shm_open %s: %s\n", name, strerror(errno));
        return ncclSystemError;
    }
    if (created && ftruncate(fd, (off_t)len) != 0) {
        fprintf(stderr, "standin nccl: ftruncate %s: %s\n", name, strerror(errno));
        close(fd);
        return ncclSystemError;
    }
    struct stat st;
    double start = now_s();
    while (fstat(fd, &st) == 0 && (size_t)st.st_size < len)
        spin(start, "the segment's creation", NULL);
    shared_t *sh = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (sh == MAP_FAILED) {
        fprintf(stderr, "standin nccl: mmap %s: %s\n", name, strerror(errno));
        return ncclSystemError;
    }
    if (created) {
        sh->nranks = nranks;
        __atomic_store_n(&sh->magic, MAGIC, __ATOMIC_RELEASE);
    }
    while (__atomic_load_n(&sh->magic, __ATOMIC_ACQUIRE) != MAGIC)
        spin(start, "the segment's initialization", NULL);
    if (sh->nranks != nranks) {
        fprintf(stderr, "standin nccl: %s has %d ranks, rank %d says %d\n", name, sh->nranks, rank,
                nranks);
        munmap(sh, len);
        return ncclInvalidUsage;
    }
    ncclComm_t comm = calloc(1, sizeof(*comm));
    if (!comm) {
        munmap(sh, len);
        return ncclSystemError;
    }
    comm->sh = sh;
    comm->map_len = len;
    comm->rank = rank;
    comm->nranks = nranks;
    snprintf(comm->name, sizeof(comm->name), "%s", name);
    __atomic_add_fetch(&sh->joined, 1, __ATOMIC_ACQ_REL);
    barrier(comm);
    /* everyone has it mapped: the name is no longer needed */
    if (rank == 0)
        shm_unlink(name);
    *comm_p = comm;
    return ncclSuccess;
}

/* The exported functions call no exported function: under LD_PRELOAD that call would reach
 * the interposer again, which NCCL's own code never does. */
static ncclResult_t init_rank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    if (!comm)
        return ncclInvalidArgument;
    commId.internal[sizeof(commId.internal) - 1] = '\0';
    return comm_open(commId.internal, nranks, rank, comm);
}

EXPORT ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank)
{
    return init_rank(comm, nranks, commId, rank);
}

EXPORT ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                           int rank, ncclConfig_t *config)
{
    (void)config; /* blocking or not, the stand-in completes at once */
    return init_rank(comm, nranks, commId, rank);
}

EXPORT ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    ncclUniqueId id;
    (void)devlist;
    if (!comm || ndev != 1)
        return ncclInvalidUsage;
    unique_id(&id);
    return init_rank(comm, 1, id, 0);
}

static ncclResult_t gather(const void *mine, void *all, size_t len, ncclComm_t comm)
{
    for (size_t off = 0; off < len; off += SLOT_BYTES) {
        size_t n = len - off < SLOT_BYTES ? len - off : SLOT_BYTES;
        memcpy(slot(comm, comm->rank), (const char *)mine + off, n);
        barrier(comm);
        for (int r = 0; r < comm->nranks; r++)
            memcpy((char *)all + (size_t)r * len + off, slot(comm, r), n);
        barrier(comm);
    }
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                  ncclConfig_t *config)
{
    int mine[2] = {color, key}, *all;
    char name[96];
    (void)config;
    if (!comm || !newcomm)
        return ncclInvalidArgument;
    all = malloc(sizeof(mine) * (size_t)comm->nranks);
    if (!all)
        return ncclSystemError;
    gather(mine, all, sizeof(mine), comm);
    unsigned split = comm->splits++;
    int rank = 0, nranks = 0;
    for (int r = 0; r < comm->nranks; r++) {
        if (all[2 * r] != color)
            continue;
        nranks++;
        if (all[2 * r + 1] < key || (all[2 * r + 1] == key && r < comm->rank))
            rank++;
    }
    free(all);
    *newcomm = NULL;
    if (color == NCCL_SPLIT_NOCOLOR)
        return ncclSuccess;
    snprintf(name, sizeof(name), "%.60s.%u.%d", comm->name, split, color);
    return comm_open(name, nranks, rank, newcomm);
}

static ncclResult_t destroy(ncclComm_t comm)
{
    if (!comm)
        return ncclInvalidArgument;
    munmap(comm->sh, comm->map_len);
    free(comm);
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommDestroy(ncclComm_t comm)
{
    return destroy(comm);
}

EXPORT ncclResult_t ncclCommAbort(ncclComm_t comm)
{
    return destroy(comm);
}

EXPORT ncclResult_t ncclCommCount(const ncclComm_t comm, int *count)
{
    if (!comm || !count)
        return ncclInvalidArgument;
    *count = comm->nranks;
    return ncclSuccess;
}

/* host memory: no CUDA device, as NCCL never says; the interposer asks for it (-1 here) */
EXPORT ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device)
{
    if (!comm || !device)
        return ncclInvalidArgument;
    *device = -1;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank)
{
    if (!comm || !rank)
        return ncclInvalidArgument;
    *rank = comm->rank;
    return ncclSuccess;
}

EXPORT ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    if (!comm || !asyncError)
        return ncclInvalidArgument;
    *asyncError = ncclSuccess;
    return ncclSuccess;
}

EXPORT const char *ncclGetErrorString(ncclResult_t result)
{
    static const char *const names[] = {"no error",
                                        "unhandled cuda error",
                                        "unhandled system error",
                                        "internal error",
                                        "invalid argument",
                                        "invalid usage",
                                        "remote process exited or there was a network error",
                                        "NCCL operation in progress"};
    return (unsigned)result < sizeof(names) / sizeof(names[0]) ? names[result] : "unknown result";
}

static size_t type_bytes(ncclDataType_t t)
{
    switch (t) {
    case ncclInt8:
    case ncclUint8:
    case ncclFloat8e4m3:
    case ncclFloat8e5m2: return 1;
    case ncclFloat16:
    case ncclBfloat16: return 2;
    case ncclInt32:
    case ncclUint32:
    case ncclFloat32: return 4;
    case ncclInt64:
    case ncclUint64:
    case ncclFloat64: return 8;
    default: return 0;
    }
}

#define REDUCE_INT(T)                                                                              \
    for (size_t i = 0; i < n; i++) {                                                               \
        T acc = ((const T *)slot(comm, 0))[i];                                                     \
        for (int r = 1; r < comm->nranks; r++) {                                                   \
            T v = ((const T *)slot(comm, r))[i];                                                   \
            switch (op) {                                                                          \
            case ncclSum:                                                                          \
            case ncclAvg: acc = (T)(acc + v); break;                                               \
            case ncclProd: acc = (T)(acc * v); break;                                              \
            case ncclMax: acc = v > acc ? v : acc; break;                                          \
            default: acc = v < acc ? v : acc; break;                                               \
            }                                                                                      \
        }                                                                                          \
        ((T *)out)[i] = op == ncclAvg ? (T)(acc / (T)comm->nranks) : acc;                          \
    }

static double load(ncclDataType_t t, const void *p, size_t i)
{
    switch (t) {
    case ncclFloat16: return zc_f16_to_f32(((const uint16_t *)p)[i]);
    case ncclBfloat16: return zc_bf16_to_f32(((const uint16_t *)p)[i]);
    case ncclFloat32: return ((const float *)p)[i];
    default: return ((const double *)p)[i];
    }
}

static void reduce_float(ncclDataType_t t, ncclRedOp_t op, size_t n, void *out, ncclComm_t comm)
{
    for (size_t i = 0; i < n; i++) {
        /* f64 in double, the others in float: each step rounded as the type's own arithmetic */
        double acc = load(t, slot(comm, 0), i);
        for (int r = 1; r < comm->nranks; r++) {
            double v = load(t, slot(comm, r), i);
            switch (op) {
            case ncclSum:
            case ncclAvg: acc = acc + v; break;
            case ncclProd: acc = acc * v; break;
            case ncclMax: acc = fmax(acc, v); break;
            default: acc = fmin(acc, v); break;
            }
            if (t != ncclFloat64)
                acc = (float)acc;
        }
        if (op == ncclAvg)
            acc = t == ncclFloat64 ? acc / comm->nranks : (float)(acc / comm->nranks);
        switch (t) {
        case ncclFloat16: ((uint16_t *)out)[i] = zc_f32_to_f16((float)acc); break;
        case ncclBfloat16: ((uint16_t *)out)[i] = zc_f32_to_bf16((float)acc); break;
        case ncclFloat32: ((float *)out)[i] = (float)acc; break;
        default: ((double *)out)[i] = acc; break;
        }
    }
}

/* The one all-reduce behind both names: pncclAllReduce calling the exported ncclAllReduce would
 * reach the interposer again (as NCCL's, the alias is another name for the same code). */
static ncclResult_t all_reduce(const void *sendbuff, void *recvbuff, size_t count,
                               ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                               cudaStream_t stream)
{
    size_t es = type_bytes(datatype);
    (void)stream;
    __atomic_add_fetch(&allreduce_calls, 1, __ATOMIC_RELAXED);
    if (!comm || !es || datatype == ncclFloat8e4m3 || datatype == ncclFloat8e5m2 ||
        (unsigned)op >= ncclNumOps || (count && (!sendbuff || !recvbuff)))
        return ncclInvalidArgument;
    size_t per_round = SLOT_BYTES / es;
    for (size_t done = 0; done < count; done += per_round) {
        size_t n = count - done < per_round ? count - done : per_round;
        void *out = (char *)recvbuff + done * es;
        memcpy(slot(comm, comm->rank), (const char *)sendbuff + done * es, n * es);
        barrier(comm);
        switch (datatype) {
        case ncclInt8: REDUCE_INT(int8_t) break;
        case ncclUint8: REDUCE_INT(uint8_t) break;
        case ncclInt32: REDUCE_INT(int32_t) break;
        case ncclUint32: REDUCE_INT(uint32_t) break;
        case ncclInt64: REDUCE_INT(int64_t) break;
        case ncclUint64: REDUCE_INT(uint64_t) break;
        default: reduce_float(datatype, op, n, out, comm); break;
        }
        barrier(comm);
    }
    return ncclSuccess;
}

EXPORT ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                   ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                   cudaStream_t stream)
{
    return all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

EXPORT ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                  cudaStream_t stream)
{
    return all_reduce(sendbuff, recvbuff, count, datatype, op, comm, stream);
}

EXPORT ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                  ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream)
{
    size_t es = type_bytes(datatype);
    (void)stream;
    if (!comm || !es || (sendcount && (!sendbuff || !recvbuff)))
        return ncclInvalidArgument;
    return gather(sendbuff, recvbuff, sendcount * es, comm);
}

EXPORT ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                  ncclDataType_t datatype, int root, ncclComm_t comm,
                                  cudaStream_t stream)
{
    size_t es = type_bytes(datatype), len = count * es;
    (void)stream;
    if (!comm || !es || root < 0 || root >= comm->nranks || (count && !recvbuff) ||
        (count && comm->rank == root && !sendbuff))
        return ncclInvalidArgument;
    for (size_t off = 0; off < len; off += SLOT_BYTES) {
        size_t n = len - off < SLOT_BYTES ? len - off : SLOT_BYTES;
        if (comm->rank == root)
            memcpy(slot(comm, root), (const char *)sendbuff + off, n);
        barrier(comm);
        memcpy((char *)recvbuff + off, slot(comm, root), n);
        barrier(comm);
    }
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupStart(void)
{
    return ncclSuccess;
}

EXPORT ncclResult_t ncclGroupEnd(void)
{
    return ncclSuccess;
}

EXPORT long zc_standin_nccl_allreduce_calls(void)
{
    return __atomic_load_n(&allreduce_calls, __ATOMIC_RELAXED);
}
