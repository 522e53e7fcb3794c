/*
 * A stand-in for NCCL, for the tests of libzipccl-preload.so on machines
 * without a GPU: the subset of nccl.h's API that the interposer and its tests
 * use, on host memory, between processes of one machine (a POSIX shared-memory
 * segment per communicator, named by the unique id). Built as libnccl.so.2 in
 * its build folder; not NCCL: no streams (every call completes before it
 * returns), groups only nest, one rank per process.
 *
 * Reductions are exact functions of the inputs, the same on every rank: each
 * element is reduced in rank order 0..n-1, in the type (f16 and bf16 in f32,
 * rounded once at the end; avg divides the sum by n).
 */
#ifndef ZC_TESTS_STANDIN_NCCL_H
#define ZC_TESTS_STANDIN_NCCL_H

#include "plugin/nccl/nccl_abi.h"

#include <stddef.h>

typedef struct ncclComm *ncclComm_t;
typedef void *cudaStream_t;

#define NCCL_UNIQUE_ID_BYTES 128
typedef struct {
    char internal[NCCL_UNIQUE_ID_BYTES];
} ncclUniqueId;

/* nccl.h 2.28's ncclConfig_t; the stand-in reads blocking only */
typedef struct {
    size_t size;
    unsigned int magic;
    unsigned int version;
    int blocking;
    int cgaClusterSize, minCTAs, maxCTAs;
    const char *netName;
    int splitShare, trafficClass;
    const char *commName;
    int collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nChannelsPerNetPeer, nvlinkCentricSched;
} ncclConfig_t;

#define NCCL_SPLIT_NOCOLOR (-1)

ncclResult_t ncclGetUniqueId(ncclUniqueId *uniqueId);
ncclResult_t ncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank);
ncclResult_t ncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId, int rank,
                                    ncclConfig_t *config);
/* the stand-in runs one rank per process: ndev must be 1 */
ncclResult_t ncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist);
ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                           ncclConfig_t *config);
ncclResult_t ncclCommDestroy(ncclComm_t comm);
ncclResult_t ncclCommAbort(ncclComm_t comm);
ncclResult_t ncclCommCount(const ncclComm_t comm, int *count);
ncclResult_t ncclCommUserRank(const ncclComm_t comm, int *rank);
ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int *device);
ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError);
const char *ncclGetErrorString(ncclResult_t result);
ncclResult_t ncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                           cudaStream_t stream);
ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                            ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                            cudaStream_t stream);
ncclResult_t ncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                           ncclDataType_t datatype, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                           ncclDataType_t datatype, int root, ncclComm_t comm, cudaStream_t stream);
ncclResult_t ncclGroupStart(void);
ncclResult_t ncclGroupEnd(void);

/* Not NCCL: how many all-reduces reached the stand-in (ncclAllReduce and pncclAllReduce) in
 * this process. */
long zc_standin_nccl_allreduce_calls(void);

#endif
