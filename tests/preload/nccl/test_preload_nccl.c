/*
 * libzipccl-preload.so's NCCL interposer against the stand-in NCCL (standin_nccl.h), on host
 * buffers, N processes:
 *
 *   zipccl-N       ZIPCCL_CODEC=qsgd (allgather for 2 ranks, scatter for 4): f32/f16/bf16
 *                  sum and avg of at least ZIPCCL_MIN_BYTES, and f64 (reduced in f32), go
 *                  through zipccl (the stand-in counts no call; results within QSGD's bound,
 *                  bit-identical on every rank); int32, max, one element below
 *                  ZIPCCL_MIN_BYTES, f64 below it (counted at 4 bytes a value), calls inside
 *                  ncclGroupStart/End, a non-blocking comm and an ncclCommInitAll comm go to
 *                  the stand-in (one call counted each; results bit-identical to the stand-in's
 *                  own pncclAllReduce); a split comm uses zipccl; a comm destroyed and created
 *                  again uses it again; ZIPCCL_STATS_FILE counts exactly the calls zipccl ran
 *   mismatch       ranks disagree on the count: ncclInvalidUsage on each, then a good call works
 *   kill           a peer killed: ncclRemoteError, reported by ncclCommGetAsyncError and by the
 *                  next call; the comm can be aborted
 *   nonblocking-env  NCCL_COMM_BLOCKING=0: comms without a config, splits without one and a
 *                  split with config.blocking = 1 go to the stand-in (the variable overrides
 *                  the config, as NCCL's envConfigOverride)
 *   blocking-env   NCCL_COMM_BLOCKING=1: a comm with config.blocking = 0 uses zipccl
 *   local-scope    the ranks are local_main: NCCL is loaded in a local scope (a library
 *                  dlopen'ed with RTLD_LOCAL uses it, as Python loads frameworks); the
 *                  interposer still finds it (standin_user.c checks the calls)
 *   no-ucx         UCX_TLS=nosuchtransport: zipccl cannot connect, every rank agrees to leave
 *                  the comm to the stand-in: every call goes there and succeeds
 *   no-ucx-1       the same on rank 1 only (set there before the first eligible call)
 *   cuda-unknown   a libcuda.so.1 stub preloaded before the library (LIBZIPCCL_PRELOAD is then
 *                  "stub:library"): the driver is loaded but cudaGetDeviceCount fails (or no
 *                  libcudart is found), device pointers could exist: every call goes to the
 *                  stand-in
 *   codec-none     ZIPCCL_CODEC=none: every call goes to the stand-in
 *   preload-off    ZIPCCL_PRELOAD_NCCL=0: likewise
 *   bad-config     ZIPCCL_CODEC=bogus: the preload library's configuration fails, every call
 *                  goes to the stand-in
 *
 * Usage: test_preload_nccl CASE LIBZIPCCL_PRELOAD [LOCAL_MAIN LIBSTANDIN_USER] (the last two for
 * local-scope). The program runs its ranks through the
 * harness (each one this program again, with LD_PRELOAD set) and exits 0 when they passed.
 * Rank r's input element i is a hash of (call, r, i) in [-a_r, a_r], a_r = 1 + r/4, so every
 * rank can compute every other rank's input and the exact result in double.
 */
#include "../preload_inputs.h"
#include "harness.h"
#include "standin_nccl.h"

#include "common/half.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_IDS 4
#define QSGD_LEVELS 7.0 /* ZIPCCL_QSGD_BITS=4: s = 2^3 - 1 */

static int grank, gsize; /* this process in the job */
static ncclUniqueId ids[MAX_IDS];
static const char *what = "";

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: %s: ", grank, what);                                         \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define NCCL_OK(call)                                                                              \
    do {                                                                                           \
        ncclResult_t r_ = (call);                                                                  \
        CHECK(r_ == ncclSuccess, "%s returned %d (%s)", #call, (int)r_, ncclGetErrorString(r_));   \
    } while (0)

/* ---- inputs and references ----------------------------------------------------------------- */

static size_t type_bytes(ncclDataType_t t)
{
    return t == ncclFloat16 || t == ncclBfloat16 ? 2 : t == ncclFloat64 ? 8 : 4;
}

/* What zipccl reduces (and counts in its statistics): f64 goes as f32 (preload.h). */
static size_t zipccl_bytes(ncclDataType_t t)
{
    return t == ncclFloat64 ? 4 : type_bytes(t);
}

/* Rank @p r's element @p i of call @p call, as stored in @p t. */
static double input(ncclDataType_t t, int call, int r, size_t i)
{
    uint64_t h = input_hash(call, r, i);
    if (t == ncclInt32)
        return (double)(int32_t)(h >> 40) - (1 << 23);
    double v = (float)input_uniform(h, r);
    if (t == ncclFloat16)
        return zc_f16_to_f32(zc_f32_to_f16((float)v));
    if (t == ncclBfloat16)
        return zc_bf16_to_f32(zc_f32_to_bf16((float)v));
    return v;
}

static void put(ncclDataType_t t, void *buf, size_t i, double v)
{
    switch (t) {
    case ncclFloat16: ((uint16_t *)buf)[i] = zc_f32_to_f16((float)v); break;
    case ncclBfloat16: ((uint16_t *)buf)[i] = zc_f32_to_bf16((float)v); break;
    case ncclInt32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ncclFloat64: ((double *)buf)[i] = v; break;
    default: ((float *)buf)[i] = (float)v; break;
    }
}

static double get(ncclDataType_t t, const void *buf, size_t i)
{
    switch (t) {
    case ncclFloat16: return zc_f16_to_f32(((const uint16_t *)buf)[i]);
    case ncclBfloat16: return zc_bf16_to_f32(((const uint16_t *)buf)[i]);
    case ncclInt32: return ((const int32_t *)buf)[i];
    case ncclFloat64: return ((const double *)buf)[i];
    default: return ((const float *)buf)[i];
    }
}

static void *make_input(ncclDataType_t t, int call, int r, size_t count)
{
    void *buf = malloc(count * type_bytes(t));
    if (buf)
        for (size_t i = 0; i < count; i++)
            put(t, buf, i, input(t, call, r, i));
    return buf;
}

/* Every rank of @p comm holds the same @p len bytes at @p buf (through the stand-in directly). */
static int check_identical(ncclComm_t comm, int nranks, const void *buf, size_t len)
{
    uint64_t mine = fnv1a64(buf, len), all[64];
    NCCL_OK(ncclAllGather(&mine, all, 1, ncclUint64, comm, NULL));
    for (int r = 0; r < nranks; r++)
        CHECK(all[r] == mine,
              "rank %d of the comm holds another result (hash %016llx, mine %016llx)", r,
              (unsigned long long)all[r], (unsigned long long)mine);
    return 0;
}

/*
 * A call that zipccl must run: the stand-in counts nothing, every element is within QSGD's
 * bound of the exact result (test_allreduce.c's comp_bound, max scale: each rank's decoded
 * value is off by less than M_r / s, M_r = a_r its largest magnitude, plus two f32 roundings;
 * scatter's owner re-encodes the sum once more, whose magnitude stays below M (1 + 1/s + 2 u);
 * then N+2 f32 roundings of the accumulator and the output rounding), and the ranks agree.
 * f64 is reduced in f32: its inputs here are f32 values (converted exactly) and the f32 result
 * widens exactly, so the f32 bound holds.
 * @p members: the global ranks of the comm in comm-rank order (inputs follow global ranks).
 */
static int zipccl_call(ncclComm_t comm, const int *members, int nranks, int scatter,
                       ncclDataType_t t, ncclRedOp_t op, size_t count, int in_place, int call)
{
    int my = -1;
    for (int r = 0; r < nranks; r++)
        if (members[r] == grank)
            my = r;
    void *send = make_input(t, call, grank, count);
    void *recv = in_place ? send : malloc(count * type_bytes(t));
    CHECK(send && recv, "out of memory");
    long before = zc_standin_nccl_allreduce_calls();
    NCCL_OK(ncclAllReduce(send, recv, count, t, op, comm, NULL));
    CHECK(zc_standin_nccl_allreduce_calls() == before,
          "the call reached the stand-in NCCL (%ld calls), not zipccl",
          zc_standin_nccl_allreduce_calls() - before);

    double u32 = 0x1p-24, big_m = 0;
    double uo = t == ncclFloat16 ? 0x1p-11 : t == ncclBfloat16 ? 0x1p-8 : u32; /* f64: f32's */
    double under = t == ncclFloat16 ? 0x1p-25 : t == ncclBfloat16 ? 0x1p-134 : 0x1p-150;
    for (int r = 0; r < nranks; r++)
        big_m += amplitude(members[r]);
    double once = 1 / QSGD_LEVELS + 2 * u32, worst = 0;
    for (size_t i = 0; i < count; i++) {
        double exact = 0, abs_sum = 0;
        for (int r = 0; r < nranks; r++) {
            double v = input(t, call, members[r], i);
            exact += v;
            abs_sum += fabs(v);
        }
        double err = once * big_m;
        if (scatter)
            err += once * big_m * (1 + once);
        err += (nranks + 2) * u32 * (abs_sum + err) + nranks * 0x1p-53 * abs_sum;
        double ref = exact, tol = err + uo * (fabs(exact) + err) + under;
        if (op == ncclAvg) {
            ref = exact / nranks;
            tol = err / nranks + (uo + u32) * (fabs(exact) / nranks + err / nranks) + under;
        }
        double got = get(t, recv, i);
        worst = fmax(worst, fabs(got - ref) / tol);
        CHECK(fabs(got - ref) <= tol, "element %zu is %.9g, expected %.9g within %.3g", i, got, ref,
              tol);
    }
    if (check_identical(comm, nranks, recv, count * type_bytes(t)))
        return 1;
    if (my == 0)
        fprintf(stderr, "%s: %zu values through zipccl, largest error %.3f of the bound\n", what,
                count, worst);
    if (recv != send)
        free(recv);
    free(send);
    return 0;
}

/* A call that must reach the stand-in untouched: counted once, the same bytes as pncclAllReduce. */
static int forwarded_call(ncclComm_t comm, ncclDataType_t t, ncclRedOp_t op, size_t count,
                          int grouped, int call)
{
    size_t len = count * type_bytes(t);
    void *send = make_input(t, call, grank, count), *recv = malloc(len), *ref = malloc(len);
    CHECK(send && recv && ref, "out of memory");
    long before = zc_standin_nccl_allreduce_calls();
    if (grouped)
        NCCL_OK(ncclGroupStart());
    NCCL_OK(ncclAllReduce(send, recv, count, t, op, comm, NULL));
    if (grouped)
        NCCL_OK(ncclGroupEnd());
    CHECK(zc_standin_nccl_allreduce_calls() == before + 1,
          "the stand-in NCCL received %ld calls, expected 1 (zipccl took it?)",
          zc_standin_nccl_allreduce_calls() - before);
    NCCL_OK(pncclAllReduce(send, ref, count, t, op, comm, NULL));
    for (size_t i = 0; i < count; i++)
        CHECK(memcmp((char *)recv + i * type_bytes(t), (char *)ref + i * type_bytes(t),
                     type_bytes(t)) == 0,
              "element %zu is %.9g, the stand-in's own result %.9g", i, get(t, recv, i),
              get(t, ref, i));
    free(send);
    free(recv);
    free(ref);
    return 0;
}

/* "calls" and "bytes_in" of the total of this rank's ZIPCCL_STATS_FILE. */
static int read_stats(unsigned long long *calls, unsigned long long *bytes_in)
{
    char path[512], text[4096];
    const char *pattern = getenv("ZIPCCL_STATS_FILE");
    CHECK(pattern && strlen(pattern) < 400, "ZIPCCL_STATS_FILE not set");
    const char *pr = strstr(pattern, "%r");
    CHECK(pr, "ZIPCCL_STATS_FILE has no %%r");
    snprintf(path, sizeof(path), "%.*s%d%s", (int)(pr - pattern), pattern, grank, pr + 2);
    FILE *f = fopen(path, "r");
    CHECK(f, "no statistics file %s", path);
    size_t n = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[n] = '\0';
    const char *total = strstr(text, "\"total\": {");
    CHECK(total && sscanf(total, "\"total\": {\"calls\": %llu", calls) == 1, "no total in %s",
          path);
    const char *b = strstr(total, "\"bytes_in\": ");
    CHECK(b && sscanf(b, "\"bytes_in\": %llu", bytes_in) == 1, "no bytes_in in %s", path);
    unlink(path);
    return 0;
}

/* ---- the cases ------------------------------------------------------------------------------ */

static int case_zipccl(void)
{
    ncclComm_t comm, split, other;
    int world[64], call = 0, scatter = gsize > 2;
    for (int r = 0; r < gsize; r++)
        world[r] = r;

    what = "init";
    NCCL_OK(ncclCommInitRank(&comm, gsize, ids[0], grank));
    unsigned long long bytes = 0, calls = 0;
    struct {
        ncclDataType_t t;
        ncclRedOp_t op;
        size_t count;
        int in_place;
        const char *name;
    } eligible[] = {
        {ncclFloat32, ncclSum, 100003, 0, "f32 sum"},
        {ncclFloat16, ncclAvg, 65537, 1, "f16 avg in place"},
        {ncclBfloat16, ncclSum, 40000, 0, "bf16 sum"},
        {ncclFloat32, ncclAvg, 16384, 0, "f32 avg of exactly ZIPCCL_MIN_BYTES"},
        {ncclFloat64, ncclSum, 30001, 0, "f64 sum (reduced in f32)"},
    };
    for (size_t k = 0; k < sizeof(eligible) / sizeof(eligible[0]); k++) {
        what = eligible[k].name;
        if (zipccl_call(comm, world, gsize, scatter, eligible[k].t, eligible[k].op,
                        eligible[k].count, eligible[k].in_place, ++call))
            return 1;
        calls++;
        bytes += eligible[k].count * zipccl_bytes(eligible[k].t);
    }
    what = "f32 sum one element below ZIPCCL_MIN_BYTES";
    if (forwarded_call(comm, ncclFloat32, ncclSum, 16383, 0, ++call))
        return 1;
    what = "f64 sum of 16383 values (counted at 4 bytes each: below ZIPCCL_MIN_BYTES)";
    if (forwarded_call(comm, ncclFloat64, ncclSum, 16383, 0, ++call))
        return 1;
    what = "int32 sum";
    if (forwarded_call(comm, ncclInt32, ncclSum, 100003, 0, ++call))
        return 1;
    what = "f32 max";
    if (forwarded_call(comm, ncclFloat32, ncclMax, 100003, 0, ++call))
        return 1;
    what = "f32 sum inside a group";
    if (forwarded_call(comm, ncclFloat32, ncclSum, 100003, 1, ++call))
        return 1;

    /* a split comm: 2 ranks reverse their order, 4 ranks pair up as {0, 2} and {1, 3} */
    what = "split";
    int color = gsize > 2 ? grank % 2 : 0, key = gsize > 2 ? grank : -grank;
    NCCL_OK(ncclCommSplit(comm, color, key, &split, NULL));
    int srank, ssize, members[64];
    NCCL_OK(ncclCommUserRank(split, &srank));
    NCCL_OK(ncclCommCount(split, &ssize));
    NCCL_OK(ncclAllGather(&grank, members, 1, ncclInt32, split, NULL));
    CHECK(ssize == (gsize > 2 ? gsize / 2 : gsize), "split comm of %d ranks", ssize);
    CHECK(srank == (gsize > 2 ? grank / 2 : gsize - 1 - grank), "rank %d in the split comm", srank);
    what = "f32 sum on the split comm";
    if (zipccl_call(split, members, ssize, scatter, ncclFloat32, ncclSum, 50001, 0, ++call))
        return 1;
    NCCL_OK(ncclCommDestroy(split));
    what = "a color-less split";
    split = (ncclComm_t)&split;
    NCCL_OK(ncclCommSplit(comm, NCCL_SPLIT_NOCOLOR, 0, &split, NULL));
    CHECK(split == NULL, "NCCL_SPLIT_NOCOLOR gave a comm");

    /* the statistics zipccl wrote when the comm went: exactly the calls it ran */
    what = "destroy";
    NCCL_OK(ncclCommDestroy(comm));
    unsigned long long got_calls, got_bytes;
    if (read_stats(&got_calls, &got_bytes))
        return 1;
    CHECK(got_calls == calls && got_bytes == bytes,
          "zipccl counted %llu calls of %llu bytes, expected %llu of %llu", got_calls, got_bytes,
          calls, bytes);

    /* a non-blocking comm: left to NCCL */
    what = "non-blocking comm";
    ncclConfig_t config = {.size = sizeof(ncclConfig_t), .magic = 0xcafebeef, .blocking = 0};
    NCCL_OK(ncclCommInitRankConfig(&other, gsize, ids[1], grank, &config));
    if (forwarded_call(other, ncclFloat32, ncclSum, 100003, 0, ++call))
        return 1;
    NCCL_OK(ncclCommAbort(other));

    /* ncclCommInitAll: every rank in one process, left to NCCL */
    what = "ncclCommInitAll comm";
    int dev = 0;
    NCCL_OK(ncclCommInitAll(&other, 1, &dev));
    if (forwarded_call(other, ncclFloat32, ncclSum, 100003, 0, ++call))
        return 1;
    NCCL_OK(ncclCommDestroy(other));

    /* created again (with a blocking config): zipccl again */
    what = "re-created comm";
    config.blocking = 1;
    NCCL_OK(ncclCommInitRankConfig(&comm, gsize, ids[2], grank, &config));
    if (zipccl_call(comm, world, gsize, scatter, ncclFloat32, ncclSum, 100003, 0, ++call))
        return 1;
    ncclResult_t async = ncclInternalError;
    NCCL_OK(ncclCommGetAsyncError(comm, &async));
    CHECK(async == ncclSuccess, "async error %d after a good call", (int)async);
    NCCL_OK(ncclCommDestroy(comm));
    if (read_stats(&got_calls, &got_bytes))
        return 1;
    CHECK(got_calls == 1 && got_bytes == 400012, "zipccl counted %llu calls of %llu bytes",
          got_calls, got_bytes);
    return 0;
}

/* Ranks that disagree on the count: ncclInvalidUsage on every rank, then a good call works. */
static int case_mismatch(void)
{
    ncclComm_t comm;
    size_t count = 100003;
    float *buf = malloc((count + 1) * sizeof(float));
    int world[64];
    CHECK(buf, "out of memory");
    for (int r = 0; r < gsize; r++)
        world[r] = r;
    for (size_t i = 0; i <= count; i++)
        buf[i] = 1.0f;
    what = "init";
    NCCL_OK(ncclCommInitRank(&comm, gsize, ids[0], grank));
    what = "counts that disagree";
    long before = zc_standin_nccl_allreduce_calls();
    ncclResult_t r =
        ncclAllReduce(buf, buf, grank == 1 ? count + 1 : count, ncclFloat32, ncclSum, comm, NULL);
    CHECK(r == ncclInvalidUsage, "ncclAllReduce returned %d, expected ncclInvalidUsage (%d)",
          (int)r, (int)ncclInvalidUsage);
    CHECK(zc_standin_nccl_allreduce_calls() == before, "the call reached the stand-in");
    what = "agreeing again";
    if (zipccl_call(comm, world, gsize, 0, ncclFloat32, ncclSum, count, 0, 1))
        return 1;
    NCCL_OK(ncclCommDestroy(comm));
    free(buf);
    return 0;
}

/*
 * Rank 1 is killed (by the harness) once zipccl is set up: rank 0's next call fails with
 * ncclRemoteError, ncclCommGetAsyncError reports it, later calls fail at once, and the comm
 * can still be aborted.
 */
static int case_kill(void)
{
    ncclComm_t comm;
    int world[64];
    for (int r = 0; r < gsize; r++)
        world[r] = r;
    what = "init";
    NCCL_OK(ncclCommInitRank(&comm, gsize, ids[0], grank));
    what = "before the kill";
    if (zipccl_call(comm, world, gsize, 0, ncclFloat32, ncclSum, 100003, 0, 1))
        return 1;
    if (grank == 1) {
        zc_harness_step("waiting to be killed");
        for (;;)
            pause();
    }
    what = "a call with a dead peer";
    size_t count = 100003;
    float *buf = calloc(count, sizeof(float));
    CHECK(buf, "out of memory");
    ncclResult_t r = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL);
    CHECK(r == ncclRemoteError, "ncclAllReduce returned %d, expected ncclRemoteError (%d)", (int)r,
          (int)ncclRemoteError);
    ncclResult_t async = ncclSuccess;
    NCCL_OK(ncclCommGetAsyncError(comm, &async));
    CHECK(async == ncclRemoteError, "ncclCommGetAsyncError says %d", (int)async);
    r = ncclAllReduce(buf, buf, count, ncclFloat32, ncclSum, comm, NULL);
    CHECK(r == ncclRemoteError, "the next call returned %d", (int)r);
    what = "abort";
    NCCL_OK(ncclCommAbort(comm));
    free(buf);
    return 0;
}

/*
 * NCCL_COMM_BLOCKING=0: comms without a config are non-blocking and left to NCCL, and so is a
 * split without a config (it inherits the parent's) and one with config.blocking = 1: NCCL's
 * variable overrides the config (envConfigOverride).
 */
static int case_nonblocking_env(void)
{
    ncclComm_t comm, child;
    what = "init";
    NCCL_OK(ncclCommInitRank(&comm, gsize, ids[0], grank));
    what = "f32 sum on a non-blocking comm";
    if (forwarded_call(comm, ncclFloat32, ncclSum, 100003, 0, 1))
        return 1;
    what = "split without a config";
    NCCL_OK(ncclCommSplit(comm, 0, grank, &child, NULL));
    if (forwarded_call(child, ncclFloat32, ncclSum, 100003, 0, 2))
        return 1;
    NCCL_OK(ncclCommDestroy(child));
    what = "split with blocking = 1";
    ncclConfig_t config = {.size = sizeof(ncclConfig_t), .magic = 0xcafebeef, .blocking = 1};
    NCCL_OK(ncclCommSplit(comm, 0, grank, &child, &config));
    if (forwarded_call(child, ncclFloat32, ncclSum, 100003, 0, 3))
        return 1;
    NCCL_OK(ncclCommDestroy(child));
    NCCL_OK(ncclCommDestroy(comm));
    return 0;
}

/* NCCL_COMM_BLOCKING=1: a comm whose config says blocking = 0 is blocking, and uses zipccl. */
static int case_blocking_env(void)
{
    ncclComm_t comm;
    int members[64], crank, csize;
    what = "init with blocking = 0";
    ncclConfig_t config = {.size = sizeof(ncclConfig_t), .magic = 0xcafebeef, .blocking = 0};
    NCCL_OK(ncclCommInitRankConfig(&comm, gsize, ids[0], grank, &config));
    NCCL_OK(ncclCommUserRank(comm, &crank));
    NCCL_OK(ncclCommCount(comm, &csize));
    NCCL_OK(ncclAllGather(&grank, members, 1, ncclInt32, comm, NULL));
    what = "f32 sum";
    if (zipccl_call(comm, members, csize, 0, ncclFloat32, ncclSum, 100003, 0, 1))
        return 1;
    NCCL_OK(ncclCommDestroy(comm));
    return 0;
}

/* Everything goes to the stand-in. */
static int case_forwarded(void)
{
    ncclComm_t comm;
    what = "init";
    NCCL_OK(ncclCommInitRank(&comm, gsize, ids[0], grank));
    what = "f32 sum";
    if (forwarded_call(comm, ncclFloat32, ncclSum, 100003, 0, 1))
        return 1;
    what = "bf16 avg";
    if (forwarded_call(comm, ncclBfloat16, ncclAvg, 65537, 0, 2))
        return 1;
    NCCL_OK(ncclCommDestroy(comm));
    return 0;
}

static int rank_main(const char *name)
{
    const char *s = getenv("ZC_TEST_NCCL_IDS");
    grank = atoi(getenv("ZIPCCL_RANK") ? getenv("ZIPCCL_RANK") : "-1");
    gsize = atoi(getenv("ZIPCCL_SIZE") ? getenv("ZIPCCL_SIZE") : "0");
    CHECK(s && strlen(s) == MAX_IDS * 2 * NCCL_UNIQUE_ID_BYTES && grank >= 0 && gsize > 0 &&
              gsize <= 64,
          "bad rank environment");
    for (int k = 0; k < MAX_IDS; k++)
        for (int b = 0; b < NCCL_UNIQUE_ID_BYTES; b++) {
            unsigned v;
            sscanf(s + 2 * (k * NCCL_UNIQUE_ID_BYTES + b), "%2x", &v);
            ids[k].internal[b] = (char)v;
        }
    if (strncmp(name, "zipccl-", 7) == 0)
        return case_zipccl();
    if (strcmp(name, "mismatch") == 0)
        return case_mismatch();
    if (strcmp(name, "kill") == 0)
        return case_kill();
    if (strcmp(name, "nonblocking-env") == 0)
        return case_nonblocking_env();
    if (strcmp(name, "blocking-env") == 0)
        return case_blocking_env();
    if (strcmp(name, "no-ucx-1") == 0 && grank == 1)
        setenv("UCX_TLS", "nosuchtransport", 1);
    return case_forwarded();
}

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--rank") == 0)
        return rank_main(argv[2]);
    if (argc != 3 && argc != 5) {
        fprintf(stderr, "usage: %s CASE LIBZIPCCL_PRELOAD [LOCAL_MAIN LIBSTANDIN_USER]\n", argv[0]);
        return 2;
    }
    const char *name = argv[1];
    int n = 2;
    const char *extra[3] = {NULL, NULL, NULL};
    if (strcmp(name, "zipccl-2") == 0) {
        extra[0] = "ZIPCCL_CODEC=qsgd";
        extra[1] = "ZIPCCL_ALGO=allgather";
    } else if (strcmp(name, "zipccl-4") == 0) {
        n = 4;
        extra[0] = "ZIPCCL_CODEC=qsgd";
        extra[1] = "ZIPCCL_ALGO=scatter";
    } else if (strcmp(name, "local-scope") == 0 && argc == 5) {
        extra[0] = "ZIPCCL_ALGO=allgather";
    } else if (strcmp(name, "nonblocking-env") == 0) {
        extra[0] = "ZIPCCL_ALGO=allgather";
        extra[1] = "NCCL_COMM_BLOCKING=0";
    } else if (strcmp(name, "no-ucx") == 0) {
        extra[0] = "ZIPCCL_ALGO=allgather";
        extra[1] = "UCX_TLS=nosuchtransport";
    } else if (strcmp(name, "no-ucx-1") == 0) {
        extra[0] = "ZIPCCL_ALGO=allgather";
    } else if (strcmp(name, "blocking-env") == 0) {
        extra[0] = "ZIPCCL_ALGO=allgather";
        extra[1] = "NCCL_COMM_BLOCKING=1";
    } else if (strcmp(name, "mismatch") == 0 || strcmp(name, "kill") == 0) {
        extra[0] = "ZIPCCL_CODEC=qsgd";
        extra[1] = "ZIPCCL_ALGO=allgather";
    } else if (strcmp(name, "codec-none") == 0) {
        extra[0] = "ZIPCCL_CODEC=none";
    } else if (strcmp(name, "preload-off") == 0) {
        extra[0] = "ZIPCCL_CODEC=qsgd";
        extra[1] = "ZIPCCL_PRELOAD_NCCL=0";
    } else if (strcmp(name, "cuda-unknown") == 0) {
        extra[0] = "ZIPCCL_ALGO=allgather";
    } else if (strcmp(name, "bad-config") == 0) {
        extra[0] = "ZIPCCL_CODEC=bogus";
    } else {
        fprintf(stderr, "unknown case %s\n", name);
        return 2;
    }

    /* the unique ids, made here as a launcher would, and handed to the ranks */
    static char hex[MAX_IDS * 2 * NCCL_UNIQUE_ID_BYTES + 1], ids_env[sizeof(hex) + 32];
    for (int k = 0; k < MAX_IDS; k++) {
        ncclUniqueId id;
        if (ncclGetUniqueId(&id) != ncclSuccess)
            return 1;
        for (int b = 0; b < NCCL_UNIQUE_ID_BYTES; b++)
            sprintf(hex + 2 * (k * NCCL_UNIQUE_ID_BYTES + b), "%02x",
                    (unsigned char)id.internal[b]);
    }
    snprintf(ids_env, sizeof(ids_env), "ZC_TEST_NCCL_IDS=%s", hex);
    static char preload[4200], stats[600], self[4096];
    snprintf(preload, sizeof(preload), "LD_PRELOAD=%s", argv[2]);
    char dir[] = "/tmp/zc-preload-nccl-XXXXXX";
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    snprintf(stats, sizeof(stats), "ZIPCCL_STATS_FILE=%s/stats-%%r.json", dir);
    ssize_t len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (len <= 0)
        return 1;
    self[len] = '\0';
    char *env[] = {preload,
                   ids_env,
                   stats,
                   "ZIPCCL_CODEC=qsgd",
                   "ZIPCCL_QSGD_BITS=4",
                   "ZIPCCL_MIN_BYTES=64KiB",
                   "ZIPCCL_TIMEOUT_S=60",
                   "OPENBLAS_NUM_THREADS=1",
                   (char *)extra[0],
                   (char *)extra[1],
                   NULL};
    char *rank_argv[] = {self, "--rank", (char *)name, NULL};
    char *local_argv[] = {argv[argc - 2], argv[argc - 1], NULL};
    zc_harness_opts_t o = {.nranks = n, .deadline_s = 100, .env = env};
    if (strcmp(name, "kill") == 0) {
        o.kill_rank = 1;
        o.kill_at_step = "waiting to be killed";
        o.kill_after_s = 0.5;
    }
    int rc = zc_harness_exec(&o, argc == 5 ? local_argv : rank_argv);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
    if (rc == 0)
        printf("%s: %d ranks passed\n", name, n);
    return rc != 0;
}
