/*
 * The CollNet half of libnccl-net-zipccl.so, driven as NCCL drives it: each
 * rank (a node head, a process forked by the harness) dlopens the plugin,
 * looks up ncclCollNetPlugin_v12 (or _v8), calls init, devices, getProperties
 * and listen, the heads swap their 128-byte handles (through files in a
 * temporary folder, as NCCL would through its bootstrap), then connect,
 * reduceSupport, regMr of one region twice, iallreduce of many chunks with
 * several in flight, test until done, closeColl, finalize.
 *
 *   test_collnet CASE PLUGIN_PATH
 *
 * Cases:
 *   abi          table name and slots, the 48 reduceSupport answers, bad arguments
 *   bad-config   init with a bad ZIPCCL_COLLNET_CODEC: ncclInvalidUsage
 *   raw-N        N heads, default codec (qsgd): every integer type (sum, prod, max, min),
 *                f32/f64/f16/bf16 max, min, prod, and float sums below ZIPCCL_MIN_BYTES:
 *                all exact; bad arguments after connect
 *   none-N       ZIPCCL_COLLNET_CODEC=none: 4 MiB of f32 sums in 16 chunks, exact
 *   qsgd-N, fp16-N, bf16-N
 *                the same chunks compressed: within the codec's bound, bit-identical
 *                on every head, and (qsgd) not exact (so compression did happen)
 *   v8           the v8 table on 2 heads: int counts, v8 properties, raw and qsgd
 *   kill         3 heads, one killed after connect: test() fails on the others
 *                (ncclRemoteError or ncclSystemError) within ZIPCCL_TIMEOUT_S
 *   stranger     a head of another communicator given node 0's address is rejected
 *   hostile      3 heads and an attacker on the same host that read node 0's address,
 *                port and nonce from its handle (so it knows the job id), but not the
 *                handle's secret: another job's hello (whose REJECT must not disclose
 *                the job hash), a claim of rank 1 with a forged proof, rank 99, a
 *                silent connection and 3000 connections while the heads join; the
 *                heads connect and reduce exactly
 *
 * Inputs are chosen so that exact results are exact in floating point (small
 * integers, powers of two); compressed inputs are uniform in [-a_r, a_r] with
 * a_r = 1 + r/4, as tests/integration/test_allreduce.c, whose bounds these are.
 */
#include "harness.h"

#include "common/half.h"
#include "plugin/nccl/nccl_abi.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define FAILED_AS_EXPECTED 3
#define REGION_BYTES (8u << 20) /* send half, receive half, as NCCL's staging region */
#define HALF_BYTES (REGION_BYTES / 2)
#define CHUNK_BYTES (256u << 10)
#define NCHUNKS (HALF_BYTES / CHUNK_BYTES) /* 16 */
#define WINDOW 6                           /* chunks in flight */
#define QSGD_BITS 8                        /* ZIPCCL_COLLNET_QSGD_BITS default: s = 127 */

static int my_rank = -1, nranks;
static const char *plugin_path, *xdir;
static int use_v8;
static int use_v11; /* cn.v12 is the v11 table: its properties have v11's layout */

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: check failed: %s: ", my_rank, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

#define CHECK_OK(expr) CHECK((res = (expr)) == ncclSuccess, "%s returned %d", #expr, (int)res)

/* ---- NCCL's side: logger, the table behind one interface ----------------------------------- */

static char logged[32768];

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    size_t used = strlen(logged);
    snprintf(logged + used, sizeof(logged) - used, "%s\n", msg);
    if (level <= NCCL_LOG_WARN)
        fprintf(stderr, "rank %d: NCCL WARN %s\n", my_rank, msg);
    (void)flags;
    (void)file;
    (void)line;
}

/* The v12 and v8 tables seen through the v12 signatures (v8 differs in init, props, count). */
typedef struct coll {
    const ncclCollNet_v12_t *v12; /* NCCL 2.30 uses v12 directly; v11 has the same slots */
    const ncclCollNet_v8_t *v8;
    void *ctx;
} coll_t;

static coll_t cn;

static ncclResult_t cn_init(void)
{
    return cn.v8 ? cn.v8->init(logger) : cn.v12->init(&cn.ctx, 0x1234, logger);
}
static ncclResult_t cn_devices(int *n)
{
    return cn.v8 ? cn.v8->devices(n) : cn.v12->devices(n);
}
static ncclResult_t cn_listen(int dev, void *handle, void **lc)
{
    return cn.v8 ? cn.v8->listen(dev, handle, lc) : cn.v12->listen(cn.ctx, dev, handle, lc);
}
static ncclResult_t cn_connect(void **handles, int n, int rank, void *lc, void **cc)
{
    return cn.v8 ? cn.v8->connect(handles, n, rank, lc, cc)
                 : cn.v12->connect(handles, n, rank, lc, cc);
}
static ncclResult_t cn_reg_mr(void *cc, void *data, size_t size, int type, void **mh)
{
    return cn.v8 ? cn.v8->regMr(cc, data, size, type, mh) : cn.v12->regMr(cc, data, size, type, mh);
}
static ncclResult_t cn_dereg_mr(void *cc, void *mh)
{
    return cn.v8 ? cn.v8->deregMr(cc, mh) : cn.v12->deregMr(cc, mh);
}
static ncclResult_t cn_iallreduce(void *cc, void *s, void *r, size_t count, ncclDataType_t t,
                                  ncclRedOp_t o, void *smh, void *rmh, void **req)
{
    if (cn.v8)
        return cn.v8->iallreduce(cc, s, r, (int)count, t, o, smh, rmh, req);
    return cn.v12->iallreduce(cc, s, r, count, t, o, smh, rmh, req);
}
static ncclResult_t cn_iflush(void *cc, void *data, int size, void *mh, void **req)
{
    return cn.v8 ? cn.v8->iflush(cc, data, size, mh, req) : cn.v12->iflush(cc, data, size, mh, req);
}
static ncclResult_t cn_test(void *req, int *done, int *size)
{
    return cn.v8 ? cn.v8->test(req, done, size) : cn.v12->test(req, done, size);
}
static ncclResult_t cn_close_coll(void *cc)
{
    return cn.v8 ? cn.v8->closeColl(cc) : cn.v12->closeColl(cc);
}
static ncclResult_t cn_close_listen(void *lc)
{
    return cn.v8 ? cn.v8->closeListen(lc) : cn.v12->closeListen(lc);
}

static int open_plugin(void)
{
    void *lib = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib, "dlopen %s: %s", plugin_path, dlerror());
    if (use_v8) {
        cn.v8 = dlsym(lib, "ncclCollNetPlugin_v8");
        CHECK(cn.v8, "no ncclCollNetPlugin_v8");
    } else {
        /* ZC_TEST_COLLNET_TABLE=v11: NCCL 2.28's table (same slots), e.g. on an older plugin */
        const char *table = getenv("ZC_TEST_COLLNET_TABLE");
        use_v11 = table && strcmp(table, "v11") == 0;
        cn.v12 = dlsym(lib, use_v11 ? "ncclCollNetPlugin_v11" : "ncclCollNetPlugin_v12");
        CHECK(cn.v12, "no ncclCollNetPlugin_%s", use_v11 ? "v11" : "v12");
    }
    return 0;
}

/* ---- the handles: each head writes its own, reads everyone's -------------------------------- */

static int wait_file(const char *path, void *buf, size_t len, double timeout_s)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            ssize_t got = read(fd, buf, len);
            close(fd);
            if (got == (ssize_t)len)
                return 0;
        }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if ((double)(t.tv_sec - t0.tv_sec) + (double)(t.tv_nsec - t0.tv_nsec) * 1e-9 > timeout_s)
            return -1;
        usleep(2000);
    }
}

/* Publishes @p len bytes under @p name for this rank (written whole, then renamed). */
static int publish(const char *name, const void *mine, size_t len)
{
    char tmp[512], path[512];
    snprintf(tmp, sizeof(tmp), "%s/.%s-%d", xdir, name, my_rank);
    snprintf(path, sizeof(path), "%s/%s-%d", xdir, name, my_rank);
    FILE *f = fopen(tmp, "wb");
    CHECK(f && fwrite(mine, 1, len, f) == len && fclose(f) == 0, "cannot write %s", tmp);
    CHECK(rename(tmp, path) == 0, "rename %s: %s", path, strerror(errno));
    return 0;
}

/* Publishes @p len bytes under @p name for this rank, then gathers every rank's into @p all. */
static int exchange(const char *name, const void *mine, size_t len, void *all)
{
    char path[512];
    if (publish(name, mine, len))
        return 1;
    for (int r = 0; r < nranks; r++) {
        snprintf(path, sizeof(path), "%s/%s-%d", xdir, name, r);
        CHECK(wait_file(path, (char *)all + (size_t)r * len, len, 30) == 0,
              "rank %d's %s did not come", r, name);
    }
    return 0;
}

/* ---- setting up one head ------------------------------------------------------------------- */

typedef struct head {
    void *lcomm, *ccomm;
    uint8_t *region;
    void *mh_send, *mh_recv;
} head_t;

/* Every rank's listen handle, after head_listen. */
static uint8_t all_handles[ZC_HARNESS_MAX_RANKS][NCCL_NET_HANDLE_MAXSIZE];

/* init, devices, getProperties, listen, and the exchange of the handles. */
static int head_listen(head_t *h)
{
    ncclResult_t res;
    int ndev = 0;
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];

    memset(h, 0, sizeof(*h));
    zc_harness_step("init");
    if (open_plugin())
        return 1;
    CHECK_OK(cn_init());
    CHECK_OK(cn_devices(&ndev));
    CHECK(ndev >= 1, "%d devices", ndev);
    if (cn.v8) {
        ncclNetProperties_v8_t p;
        CHECK_OK(cn.v8->getProperties(0, &p));
        CHECK(p.name && p.name[0], "device 0 has no name");
        CHECK(p.ptrSupport == NCCL_PTR_HOST, "ptrSupport 0x%x", p.ptrSupport);
    } else {
        ncclNetProperties_v12_t p;
        memset(&p, 0x5a, sizeof(p)); /* NCCL passes an uninitialised struct */
        CHECK_OK(cn.v12->getProperties(0, &p));
        CHECK(use_v11 || (p.railId == NCCL_NET_ID_UNDEF && p.planeId == NCCL_NET_ID_UNDEF),
              "rail %d plane %d", p.railId, p.planeId);
        CHECK(use_v11 ||
                  (p.vProps.ndevs == 1 && p.vProps.devs[0] == 0 && p.maxMultiRequestSize == 1),
              "vProps %d devices, maxMultiRequestSize %d", p.vProps.ndevs, p.maxMultiRequestSize);
        CHECK(p.name && p.name[0], "device 0 has no name");
        CHECK(p.ptrSupport == NCCL_PTR_HOST, "ptrSupport 0x%x", p.ptrSupport);
        CHECK(use_v11 || (p.maxCollBytes > 0 && p.maxCollBytes <= (1u << 30)), "maxCollBytes %zu",
              p.maxCollBytes);
        CHECK(p.netDeviceType == NCCL_NET_DEVICE_HOST, "device type %d", (int)p.netDeviceType);
    }

    zc_harness_step("listen");
    memset(handle, 0xee, sizeof(handle));
    CHECK_OK(cn_listen(0, handle, &h->lcomm));
    CHECK(h->lcomm, "listen gave a NULL listenComm");
    return exchange("handle", handle, sizeof(handle), all_handles);
}

/*
 * Every process of the run listens and swaps handles (head_listen); the first
 * @p heads of them form the CollNet, the others play strangers.
 */
static int listen_all(head_t *h, int rank, int size, int heads)
{
    my_rank = rank;
    nranks = size;
    if (head_listen(h))
        return 1;
    nranks = heads;
    return 0;
}

/* connect among the first nranks ranks, closeListen, and the staging region registered twice. */
static int head_connect(head_t *h)
{
    ncclResult_t res;
    void *handles[ZC_HARNESS_MAX_RANKS];
    for (int r = 0; r < nranks; r++)
        handles[r] = all_handles[r];

    zc_harness_step("connect");
    CHECK_OK(cn_connect(handles, nranks, my_rank, h->lcomm, &h->ccomm));
    CHECK(h->ccomm, "connect gave a NULL collComm");
    CHECK_OK(cn_close_listen(h->lcomm));
    h->lcomm = NULL;

    /* one staging region, registered by the send and by the receive connector */
    h->region = aligned_alloc(4096, REGION_BYTES);
    CHECK(h->region, "out of memory");
    memset(h->region, 0, REGION_BYTES);
    CHECK_OK(cn_reg_mr(h->ccomm, h->region, REGION_BYTES, NCCL_PTR_HOST, &h->mh_send));
    CHECK_OK(cn_reg_mr(h->ccomm, h->region, REGION_BYTES, NCCL_PTR_HOST, &h->mh_recv));
    CHECK(h->mh_send && h->mh_recv, "NULL memory handles");
    return 0;
}

static int head_up(head_t *h)
{
    return head_listen(h) || head_connect(h);
}

static int head_down(head_t *h)
{
    ncclResult_t res;
    zc_harness_step("close");
    CHECK_OK(cn_dereg_mr(h->ccomm, h->mh_send));
    CHECK_OK(cn_dereg_mr(h->ccomm, h->mh_recv));
    CHECK_OK(cn_close_coll(h->ccomm));
    if (cn.v12)
        CHECK_OK(cn.v12->finalize(cn.ctx));
    free(h->region);
    return 0;
}

/* ---- posting chunks as NCCL does ----------------------------------------------------------- */

static size_t type_size(ncclDataType_t t)
{
    static const size_t s[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    return s[t];
}

/*
 * All-reduces @p nchunks chunks of @p chunk_bytes from the send half into the
 * receive half, at most WINDOW in flight, posted and tested in order (a NULL
 * request is retried). Returns 0, or 1 after a failed check; *@p failed_p gets
 * the first error test() returned when @p failed_p is given (then errors end the
 * loop instead of failing the check).
 */
static int run_chunks(head_t *h, size_t nchunks, size_t chunk_bytes, ncclDataType_t t,
                      ncclRedOp_t op, ncclResult_t *failed_p)
{
    void *reqs[NCHUNKS];
    size_t posted = 0, completed = 0, count = chunk_bytes / type_size(t);
    ncclResult_t res;

    CHECK(nchunks <= NCHUNKS, "too many chunks");
    while (completed < nchunks) {
        while (posted < nchunks && posted - completed < WINDOW) {
            void *req = NULL;
            uint8_t *send = h->region + posted * chunk_bytes;
            res = cn_iallreduce(h->ccomm, send, send + HALF_BYTES, count, t, op, h->mh_send,
                                h->mh_recv, &req);
            if (failed_p && res != ncclSuccess) {
                *failed_p = res;
                return 0;
            }
            CHECK(res == ncclSuccess, "iallreduce of chunk %zu returned %d", posted, (int)res);
            if (!req)
                break; /* back-pressure: post it again after some tests */
            reqs[posted++] = req;
        }
        int done = 0, size = -1;
        res = cn_test(reqs[completed], &done, &size);
        if (failed_p && res != ncclSuccess) {
            *failed_p = res;
            return 0;
        }
        CHECK(res == ncclSuccess, "test of chunk %zu returned %d", completed, (int)res);
        if (done) {
            CHECK(size == (int)chunk_bytes, "chunk %zu: test reported %d bytes, expected %zu",
                  completed, size, chunk_bytes);
            completed++;
        } else {
            sched_yield(); /* ranks outnumber cores here: let the one with work run */
        }
    }
    /* iflush: nothing to flush in host memory */
    void *freq = (void *)1;
    CHECK_OK(cn_iflush(h->ccomm, h->region + HALF_BYTES, (int)chunk_bytes, h->mh_recv, &freq));
    CHECK(freq == NULL, "iflush returned a request for host memory");
    return 0;
}

/* ---- values ------------------------------------------------------------------------------- */

static uint64_t mix(uint64_t x)
{
    x ^= x >> 33;
    x *= UINT64_C(0xff51afd7ed558ccd);
    x ^= x >> 33;
    x *= UINT64_C(0xc4ceb9fe1a85ec53);
    x ^= x >> 33;
    return x;
}

/* A small integer in [lo, hi] for rank r, element i, stream s. */
static int64_t small_int(int r, size_t i, unsigned s, int64_t lo, int64_t hi)
{
    return lo + (int64_t)(mix((uint64_t)s << 48 ^ (uint64_t)r << 40 ^ i) % (uint64_t)(hi - lo + 1));
}

static double get_value(ncclDataType_t t, const void *buf, size_t i)
{
    switch (t) {
    case ncclInt8: return ((const int8_t *)buf)[i];
    case ncclUint8: return ((const uint8_t *)buf)[i];
    case ncclInt32: return ((const int32_t *)buf)[i];
    case ncclUint32: return ((const uint32_t *)buf)[i];
    case ncclInt64: return (double)((const int64_t *)buf)[i];
    case ncclUint64: return (double)((const uint64_t *)buf)[i];
    case ncclFloat16: return zc_f16_to_f32(((const uint16_t *)buf)[i]);
    case ncclFloat32: return ((const float *)buf)[i];
    case ncclFloat64: return ((const double *)buf)[i];
    case ncclBfloat16: return zc_bf16_to_f32(((const uint16_t *)buf)[i]);
    default: return NAN;
    }
}

static void put_value(ncclDataType_t t, void *buf, size_t i, double v)
{
    switch (t) {
    case ncclInt8: ((int8_t *)buf)[i] = (int8_t)v; break;
    case ncclUint8: ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case ncclInt32: ((int32_t *)buf)[i] = (int32_t)v; break;
    case ncclUint32: ((uint32_t *)buf)[i] = (uint32_t)v; break;
    case ncclInt64: ((int64_t *)buf)[i] = (int64_t)v; break;
    case ncclUint64: ((uint64_t *)buf)[i] = (uint64_t)v; break;
    case ncclFloat16: ((uint16_t *)buf)[i] = zc_f32_to_f16((float)v); break;
    case ncclFloat32: ((float *)buf)[i] = (float)v; break;
    case ncclFloat64: ((double *)buf)[i] = v; break;
    case ncclBfloat16: ((uint16_t *)buf)[i] = zc_f32_to_bf16((float)v); break;
    default: break;
    }
}

/*
 * Rank r's exact input for (t, op) at i: products of values in {1, 2, -1, 1/2} (floats)
 * or {1, 2, -1} (integers; unsigned {1, 2, 3}) stay exact and in range for 4 ranks;
 * sums of integers in [-20, 20] ([0, 40] unsigned) stay exact in every type, bf16's
 * 8-bit significand included (|sum| <= 160 needs 8 bits).
 */
static double exact_input(ncclDataType_t t, ncclRedOp_t op, int r, size_t i)
{
    int is_unsigned = t == ncclUint8 || t == ncclUint32 || t == ncclUint64;
    int is_float = t >= ncclFloat16;
    if (op == ncclProd) {
        static const double fv[] = {1, 2, -1, 0.5}, iv[] = {1, 2, -1}, uv[] = {1, 2, 3};
        int64_t k = small_int(r, i, (unsigned)t * 8 + op, 0, is_float ? 3 : 2);
        return is_float ? fv[k] : is_unsigned ? uv[k] : iv[k];
    }
    if (is_unsigned)
        return (double)small_int(r, i, (unsigned)t * 8 + op, 0, 40);
    return (double)small_int(r, i, (unsigned)t * 8 + op, -20, 20);
}

static double reduce_ref(ncclRedOp_t op, double acc, double v)
{
    switch (op) {
    case ncclSum: return acc + v;
    case ncclProd: return acc * v;
    case ncclMax: return fmax(acc, v);
    default: return fmin(acc, v);
    }
}

/* One (type, op) over @p nchunks chunks of @p chunk_bytes, checked exactly. */
static int exact_case(head_t *h, ncclDataType_t t, ncclRedOp_t op, size_t nchunks,
                      size_t chunk_bytes)
{
    size_t total = nchunks * chunk_bytes / type_size(t);
    for (size_t i = 0; i < total; i++)
        put_value(t, h->region, i, exact_input(t, op, my_rank, i));
    memset(h->region + HALF_BYTES, 0x5a, nchunks * chunk_bytes);
    zc_harness_step("exact type %d op %d", (int)t, (int)op);
    if (run_chunks(h, nchunks, chunk_bytes, t, op, NULL))
        return 1;
    for (size_t i = 0; i < total; i++) {
        double ref = exact_input(t, op, 0, i);
        for (int r = 1; r < nranks; r++)
            ref = reduce_ref(op, ref, exact_input(t, op, r, i));
        double got = get_value(t, h->region + HALF_BYTES, i);
        CHECK(got == ref, "type %d op %d element %zu: got %.17g, expected %.17g", (int)t, (int)op,
              i, got, ref);
    }
    return 0;
}

/* ---- compressed: the bound of tests/integration/test_allreduce.c (comp_bound) -------------- */

static double amplitude(int r)
{
    return 1.0 + r / 4.0;
}

static float comp_input(int r, size_t i)
{
    double u = (double)(mix(UINT64_C(0xc011) << 40 ^ (uint64_t)r << 32 ^ i) >> 11) * 0x1p-53;
    return (float)(amplitude(r) * (2 * u - 1));
}

/*
 * |err| per element, S_i = sum_r |x_r[i]|, M = sum_r a_r, u32 = 2^-24:
 *  fp16/bf16 (ring): ((2N+1) u_c + (N+2) u32)(1+u_c)^(2N+2) S_i + (2N+2) underflow(codec)
 *  qsgd (max scale, s levels): (1/s + 2 u32) M, once more with (1 + 1/s + 2 u32) for
 *  scatter's re-encode (N > 2), then (N+2) u32 (S_i + err);
 *  then the f64 reference's gamma(N-1) and the f32 store u32 (|exact| + err).
 */
static double comp_bound(int codec, double abs_sum, double exact)
{
    const double u32 = 0x1p-24, n = nranks;
    double err = 0, big_m = 0;
    for (int r = 0; r < nranks; r++)
        big_m += amplitude(r);
    if (codec == 1) {
        double s = (1 << (QSGD_BITS - 1)) - 1, once = 1 / s + 2 * u32;
        err = once * big_m;
        if (nranks > 2)
            err += once * big_m * (1 + once);
        err += (n + 2) * u32 * (abs_sum + err);
    } else {
        double uc = codec == 2 ? 0x1p-11 : 0x1p-8, under = codec == 2 ? 0x1p-25 : 0x1p-134;
        err = ((2 * n + 1) * uc + (n + 2) * u32) * pow(1 + uc, 2 * n + 2) * abs_sum +
              (2 * n + 2) * under;
    }
    err += (n - 1) * 0x1p-53 / (1 - (n - 1) * 0x1p-53) * abs_sum;
    return err + u32 * (fabs(exact) + err) + 0x1p-150;
}

static uint64_t fnv1a(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t hsh = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < len; i++)
        hsh = (hsh ^ p[i]) * UINT64_C(0x100000001b3);
    return hsh;
}

/* 4 MiB of f32 sums in 16 chunks; @p codec 0 none (exact), 1 qsgd, 2 fp16, 3 bf16. */
static int comp_case(head_t *h, int codec)
{
    const size_t total = HALF_BYTES / sizeof(float);
    float *send = (float *)h->region, *recv = (float *)(h->region + HALF_BYTES);
    for (size_t i = 0; i < total; i++)
        send[i] = codec == 0 ? (float)exact_input(ncclFloat32, ncclSum, my_rank, i)
                             : comp_input(my_rank, i);
    memset(recv, 0x5a, HALF_BYTES);
    zc_harness_step("chunks codec %d", codec);
    if (run_chunks(h, NCHUNKS, CHUNK_BYTES, ncclFloat32, ncclSum, NULL))
        return 1;

    double worst = 0;
    size_t inexact = 0;
    for (size_t i = 0; i < total; i++) {
        double exact = 0, abs_sum = 0;
        for (int r = 0; r < nranks; r++) {
            double v = codec == 0 ? exact_input(ncclFloat32, ncclSum, r, i) : comp_input(r, i);
            exact += v;
            abs_sum += fabs(v);
        }
        double got = recv[i];
        if (codec == 0) {
            CHECK(got == exact, "element %zu: got %.9g, expected %.9g", i, got, exact);
            continue;
        }
        double tol = comp_bound(codec, abs_sum, exact);
        CHECK(fabs(got - exact) <= tol, "element %zu: got %.9g, expected %.9g within %.3g", i, got,
              exact, tol);
        worst = fmax(worst, fabs(got - exact) / tol);
        inexact += got != (float)exact;
    }
    /* lossy codecs on uniform inputs: most results differ from the f32 sum */
    if (codec != 0)
        CHECK(inexact > total / 4,
              "only %zu of %zu results differ from the exact sum: was it "
              "compressed?",
              inexact, total);
    fprintf(stderr, "rank %d: codec %d, %d heads: largest error %.3f of its bound\n", my_rank,
            codec, nranks, worst);

    /* bit-identical on every head */
    uint64_t mine = fnv1a(recv, HALF_BYTES), all[ZC_HARNESS_MAX_RANKS];
    static int round;
    char name[32];
    snprintf(name, sizeof(name), "hash%d-%d", codec, round++);
    if (exchange(name, &mine, sizeof(mine), all))
        return 1;
    for (int r = 0; r < nranks; r++)
        CHECK(all[r] == mine, "rank %d's result differs from this rank's", r);
    return 0;
}

/* ---- bad arguments ------------------------------------------------------------------------- */

static int bad_args_connected(head_t *h)
{
    ncclResult_t res;
    void *req = (void *)1, *mh = NULL;
    int done = 0, size = 0;
    uint8_t *s = h->region, *r = h->region + HALF_BYTES;

    zc_harness_step("bad arguments");
    CHECK(cn_iallreduce(h->ccomm, s, r, 0, ncclFloat32, ncclSum, NULL, NULL, &req) ==
              ncclInternalError,
          "count 0 accepted");
    CHECK(cn_iallreduce(h->ccomm, NULL, r, 16, ncclFloat32, ncclSum, NULL, NULL, &req) ==
              ncclInternalError,
          "NULL send buffer accepted");
    CHECK(cn_iallreduce(h->ccomm, s, NULL, 16, ncclFloat32, ncclSum, NULL, NULL, &req) ==
              ncclInternalError,
          "NULL receive buffer accepted");
    CHECK(cn_iallreduce(NULL, s, r, 16, ncclFloat32, ncclSum, NULL, NULL, &req) ==
              ncclInternalError,
          "NULL collComm accepted");
    CHECK(cn_iallreduce(h->ccomm, s, r, 16, ncclFloat32, ncclSum, NULL, NULL, NULL) ==
              ncclInternalError,
          "NULL request pointer accepted");
    CHECK(cn_iallreduce(h->ccomm, s, r, 16, ncclFloat8e4m3, ncclSum, NULL, NULL, &req) ==
              ncclInternalError,
          "fp8 accepted");
    CHECK(cn_iallreduce(h->ccomm, s, r, 16, (ncclDataType_t)12, ncclSum, NULL, NULL, &req) ==
              ncclInternalError,
          "type 12 accepted");
    CHECK(cn_iallreduce(h->ccomm, s, r, 16, ncclFloat32, ncclAvg, NULL, NULL, &req) ==
              ncclInternalError,
          "avg accepted (NCCL passes it as sum)");
    CHECK(cn_iallreduce(h->ccomm, s, r, 16, ncclFloat32, (ncclRedOp_t)7, NULL, NULL, &req) ==
              ncclInternalError,
          "op 7 accepted");
    CHECK(cn_reg_mr(h->ccomm, s, 4096, NCCL_PTR_CUDA, &mh) == ncclInternalError,
          "CUDA memory registered");
    CHECK(cn_reg_mr(h->ccomm, NULL, 4096, NCCL_PTR_HOST, &mh) == ncclInternalError,
          "NULL memory registered");
    CHECK(cn_reg_mr(h->ccomm, s, 4096, NCCL_PTR_HOST, NULL) == ncclInternalError,
          "NULL mhandle pointer accepted");
    if (cn.v12) {
        CHECK(cn.v12->regMrDmaBuf(h->ccomm, s, 4096, NCCL_PTR_DMABUF, 0, 3, &mh) ==
                  ncclInternalError,
              "dma-buf registered");
        CHECK_OK(cn.v12->regMrDmaBuf(h->ccomm, s, 4096, NCCL_PTR_HOST, 0, -1, &mh));
        CHECK_OK(cn_dereg_mr(h->ccomm, mh));
    }
    CHECK(cn_test(NULL, &done, &size) == ncclInternalError, "test(NULL) accepted");
    CHECK(cn_iflush(h->ccomm, r, 16, h->mh_recv, NULL) == ncclInternalError,
          "iflush without a request pointer accepted");
    /* nothing above was posted: the communicator still works */
    return 0;
}

/* ---- cases --------------------------------------------------------------------------------- */

static int case_abi(int rank, int size, void *arg)
{
    ncclResult_t res;
    my_rank = rank;
    nranks = size;
    void *lib = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib, "dlopen %s: %s", plugin_path, dlerror());
    const ncclCollNet_v12_t *v12 = dlsym(lib, "ncclCollNetPlugin_v12");
    const ncclCollNet_v11_t *v11 = dlsym(lib, "ncclCollNetPlugin_v11");
    const ncclCollNet_v8_t *v8 = dlsym(lib, "ncclCollNetPlugin_v8");
    CHECK(v12 && v11 && v8, "tables missing");
    const ncclCollNet_v10_t *v10 = dlsym(lib, "ncclCollNetPlugin_v10");
    const ncclCollNet_v9_t *v9 = dlsym(lib, "ncclCollNetPlugin_v9");
    CHECK(v10 && v9, "v10 or v9 table missing");
    CHECK(strcmp(v10->name, "zipccl") == 0 && v10->init && v10->listen && v10->iallreduce,
          "v10 table");
    CHECK(strcmp(v12->name, "zipccl") == 0 && strcmp(v11->name, "zipccl") == 0 &&
              strcmp(v8->name, "zipccl") == 0,
          "name %s / %s / %s", v12->name, v11->name, v8->name);
    CHECK(v12->init && v12->devices && v12->getProperties && v12->listen && v12->connect &&
              v12->reduceSupport && v12->regMr && v12->regMrDmaBuf && v12->deregMr &&
              v12->iallreduce && v12->ireducescatter && v12->iflush && v12->test &&
              v12->closeColl && v12->closeListen && v12->finalize,
          "a mandatory v12 slot is NULL");
    /* NCCL 2.30 reads v12 itself: NULL there keeps CollNet off all-gather (collnet.c says why) */
    CHECK(!v12->iallgather && !v12->makeVDevice, "a v12 slot left to NCCL is set");
    /* v11..v8 go through NCCL 2.30's adapters, which call these whatever they hold: never NULL */
    CHECK(v11->iallgather && v11->ireducescatter && v10->iallgather && v10->ireducescatter &&
              v9->iallgather && v9->ireducescatter && v8->iallgather && v8->ireducescatter,
          "an all-gather or reduce-scatter slot of v11..v8 is NULL");
    /* v11 is v12 but for the properties' layout */
    CHECK(v11->init == v12->init && v11->listen == v12->listen &&
              v11->iallreduce == v12->iallreduce && v11->ireducescatter == v12->ireducescatter &&
              v11->finalize == v12->finalize && !v11->makeVDevice &&
              memcmp(&v11->getProperties, &v12->getProperties, sizeof(v12->getProperties)) != 0,
          "v11 is not v12's implementation with its own getProperties");
    CHECK(v12->finalize(NULL) == ncclSuccess, "finalize(NULL) before init");

    void *ctx = NULL;
    CHECK(v12->init(NULL, 1, logger) == ncclInternalError, "init(NULL ctx) accepted");
    CHECK_OK(v12->init(&ctx, 1, logger));
    CHECK(ctx, "init gave no context");
    int ndev = 0;
    CHECK_OK(v12->devices(&ndev));
    CHECK(ndev >= 1, "%d devices", ndev);
    CHECK(v12->devices(NULL) == ncclInternalError, "devices(NULL) accepted");
    CHECK(v12->getProperties(0, NULL) == ncclInternalError, "getProperties(NULL) accepted");
    CHECK(v12->getProperties(ndev, &(ncclNetProperties_v12_t){0}) != ncclSuccess,
          "device %d of %d accepted", ndev, ndev);

    /* the same device as the net's: NCCL matches them by name */
    const ncclNet_v12_t *net = dlsym(lib, "ncclNetPlugin_v12");
    CHECK(net, "no ncclNetPlugin_v12");
    for (int d = 0; d < ndev; d++) {
        ncclNetProperties_v12_t pc, pn;
        memset(&pc, 0x5a, sizeof(pc));
        CHECK_OK(v12->getProperties(d, &pc));
        CHECK_OK(net->getProperties(d, &pn));
        CHECK(strcmp(pc.name, pn.name) == 0 && pc.guid == pn.guid, "device %d: %s vs %s", d,
              pc.name, pn.name);
        CHECK(pc.maxCollBytes > 0 && pc.maxCollBytes <= (1u << 30), "maxCollBytes %zu",
              pc.maxCollBytes);
        CHECK(pc.railId == NCCL_NET_ID_UNDEF && pc.planeId == NCCL_NET_ID_UNDEF &&
                  pc.vProps.ndevs == 1 && pc.vProps.devs[0] == d,
              "device %d: rail %d plane %d, %d fused devices", d, pc.railId, pc.planeId,
              pc.vProps.ndevs);
        /* v11's layout: the members after vProps sit 16 bytes earlier, and nothing past 112 */
        struct {
            ncclNetProperties_v11_t p;
            uint8_t guard[16];
        } p11;
        memset(&p11, 0xa5, sizeof(p11));
        CHECK_OK(v11->getProperties(d, &p11.p));
        CHECK(strcmp(p11.p.name, pn.name) == 0 && p11.p.maxCollBytes == pc.maxCollBytes &&
                  p11.p.maxP2pBytes == pc.maxP2pBytes && p11.p.maxMultiRequestSize == 1 &&
                  p11.p.vProps.ndevs == 1 && p11.p.vProps.devs[0] == d,
              "v11 device %d: %s, maxCollBytes %zu", d, p11.p.name, p11.p.maxCollBytes);
        for (size_t i = 0; i < sizeof(p11.guard); i++)
            CHECK(p11.guard[i] == 0xa5, "v11 getProperties wrote past its 112 bytes");
        ncclNetProperties_v8_t p8;
        CHECK_OK(v8->getProperties(d, &p8));
        CHECK(strcmp(p8.name, pn.name) == 0, "v8 device %d: %s vs %s", d, p8.name, pn.name);
        ncclNetProperties_v10_t p10;
        CHECK_OK(v10->getProperties(d, &p10));
        CHECK(strcmp(p10.name, pn.name) == 0 && p10.maxCollBytes == pc.maxCollBytes,
              "v10 device %d: %s, maxCollBytes %zu", d, p10.name, p10.maxCollBytes);
    }

    /*
     * reduceSupport of NCCL's 48 queries: the 6 float sums CollNet compresses, or with
     * ZIPCCL_COLLNET_ALL_TYPES=1 (case abi-all-types) the 40 (type, op) zipccl reduces
     */
    int all_types = arg != NULL;
    for (int t = 0; t < 12; t++) {
        for (int o = 0; o < 4; o++) {
            int sup = -1;
            CHECK_OK(v12->reduceSupport((ncclDataType_t)t, (ncclRedOp_t)o, &sup));
            int fsum = o == ncclSum && (t == ncclFloat32 || t == ncclFloat16 || t == ncclBfloat16);
            int want = all_types ? t <= ncclBfloat16 : fsum;
            CHECK(sup == want, "type %d op %d: supported %d, expected %d", t, o, sup, want);
            int sup11 = -1;
            CHECK_OK(v11->reduceSupport((ncclDataType_t)t, (ncclRedOp_t)o, &sup11));
            CHECK(sup11 == sup, "v11 answers type %d op %d differently", t, o);
        }
    }
    int sup = -1;
    CHECK_OK(v12->reduceSupport((ncclDataType_t)12, ncclSum, &sup));
    CHECK(sup == 0, "type 12 supported");
    CHECK_OK(v12->reduceSupport(ncclFloat32, ncclAvg, &sup));
    CHECK(sup == 0, "avg supported (NCCL never asks)");
    CHECK_OK(v12->reduceSupport((ncclDataType_t)-1, (ncclRedOp_t)99, &sup));
    CHECK(sup == 0, "type -1 op 99 supported");
    CHECK(v12->reduceSupport(ncclFloat32, ncclSum, NULL) == ncclInternalError,
          "NULL supported pointer accepted");

    /* listen/connect arguments */
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *cc = NULL;
    CHECK(v12->listen(ctx, 0, NULL, &lc) == ncclInternalError, "NULL handle accepted");
    CHECK(v12->listen(ctx, 0, handle, NULL) == ncclInternalError, "NULL listenComm accepted");
    CHECK(v12->listen(ctx, ndev, handle, &lc) != ncclSuccess, "device %d accepted", ndev);
    CHECK_OK(v12->listen(ctx, 0, handle, &lc));
    void *handles[2] = {handle, handle};
    CHECK(v12->connect(NULL, 1, 0, lc, &cc) == ncclInternalError, "NULL handles accepted");
    CHECK(v12->connect(handles, 1, 1, lc, &cc) == ncclInternalError, "rank 1 of 1 accepted");
    CHECK(v12->connect(handles, 1, 0, lc, NULL) == ncclInternalError, "NULL collComm accepted");
    uint8_t junk[NCCL_NET_HANDLE_MAXSIZE];
    memset(junk, 0x11, sizeof(junk));
    void *junk_handles[1] = {junk};
    CHECK(v12->connect(junk_handles, 1, 0, lc, &cc) == ncclInternalError,
          "a foreign handle accepted");
    CHECK(strstr(logged, "not a zipccl CollNet handle"), "no message about the foreign handle");
    /* one head: a communicator of one, where every all-reduce is a copy */
    CHECK_OK(v12->connect(handles, 1, 0, lc, &cc));
    CHECK_OK(v12->closeListen(lc));
    float in[64], out[64];
    for (int i = 0; i < 64; i++)
        in[i] = (float)i - 20.5f;
    void *mh = NULL, *req = NULL;
    CHECK_OK(v12->regMr(cc, in, sizeof(in), NCCL_PTR_HOST, &mh));
    CHECK_OK(v12->iallreduce(cc, in, out, 64, ncclFloat32, ncclSum, mh, mh, &req));
    int done = 0, bytes = 0;
    for (int spins = 0; !done && spins < 1000000; spins++)
        CHECK_OK(v12->test(req, &done, &bytes));
    CHECK(done && bytes == (int)sizeof(in), "done %d, %d bytes", done, bytes);
    CHECK(memcmp(in, out, sizeof(in)) == 0, "one head's all-reduce is not a copy");
    CHECK_OK(v12->deregMr(cc, mh));
    CHECK_OK(v12->closeColl(cc));
    CHECK(v12->closeListen(NULL) == ncclSuccess, "closeListen(NULL)");
    CHECK_OK(v12->finalize(ctx));
    return 0;
}

static int case_bad_config(int rank, int size, void *arg)
{
    (void)arg;
    my_rank = rank;
    nranks = size;
    if (open_plugin())
        return 1;
    ncclResult_t res = cn_init();
    CHECK(res == ncclInvalidUsage, "init with ZIPCCL_COLLNET_CODEC=zstd returned %d", (int)res);
    CHECK(strstr(logged, "ZIPCCL_COLLNET_CODEC"), "the message does not name the variable: %s",
          logged);
    return 0;
}

static int case_raw(int rank, int size, void *arg)
{
    head_t h;
    (void)arg;
    my_rank = rank;
    nranks = size;
    if (head_up(&h))
        return 1;
    /* every type and op NCCL may hand over: 4 chunks of 16 KiB each, below MIN_BYTES */
    for (int t = 0; t <= ncclBfloat16; t++) {
        for (int o = 0; o < 4; o++) {
            if (exact_case(&h, (ncclDataType_t)t, (ncclRedOp_t)o, 4, 16u << 10))
                return 1;
        }
    }
    /* integers and max/min/prod of floats go raw at any size: 16 chunks of 256 KiB */
    if (exact_case(&h, ncclInt32, ncclSum, NCHUNKS, CHUNK_BYTES) ||
        exact_case(&h, ncclFloat32, ncclMax, NCHUNKS, CHUNK_BYTES) ||
        exact_case(&h, ncclBfloat16, ncclProd, NCHUNKS, CHUNK_BYTES))
        return 1;
    if (bad_args_connected(&h))
        return 1;
    /* and it still works */
    if (exact_case(&h, ncclUint64, ncclSum, 2, 4096))
        return 1;
    return head_down(&h);
}

typedef struct comp_thread {
    head_t *h;
    int codec, rc;
} comp_thread_t;

static void *comp_thread_main(void *p)
{
    comp_thread_t *t = p;
    t->rc = comp_case(t->h, t->codec);
    return NULL;
}

static int case_comp(int rank, int size, void *arg)
{
    head_t h;
    int codec = (int)(intptr_t)arg;
    my_rank = rank;
    nranks = size;
    if (head_up(&h))
        return 1;
    /* as NCCL: connected in one thread (its service thread), driven from another (progress) */
    comp_thread_t t = {.h = &h, .codec = codec, .rc = 1};
    pthread_t tid;
    CHECK(pthread_create(&tid, NULL, comp_thread_main, &t) == 0, "pthread_create");
    pthread_join(tid, NULL);
    if (t.rc)
        return 1;
    /* a second round on the same collComm: fresh rounding, same guarantees */
    if (comp_case(&h, codec))
        return 1;
    return head_down(&h);
}

static int case_v8(int rank, int size, void *arg)
{
    head_t h;
    (void)arg;
    my_rank = rank;
    nranks = size;
    use_v8 = 1;
    if (head_up(&h))
        return 1;
    if (exact_case(&h, ncclInt64, ncclSum, 4, 16u << 10) ||
        exact_case(&h, ncclFloat16, ncclMin, 4, 16u << 10) || comp_case(&h, 1))
        return 1;
    void *req = (void *)1;
    CHECK(cn.v8->iallreduce(h.ccomm, h.region, h.region + HALF_BYTES, -5, ncclFloat32, ncclSum,
                            NULL, NULL, &req) == ncclInternalError,
          "negative count accepted");
    return head_down(&h);
}

static int case_kill(int rank, int size, void *arg)
{
    head_t h;
    (void)arg;
    my_rank = rank;
    nranks = size;
    if (head_up(&h))
        return 1;
    if (exact_case(&h, ncclInt32, ncclSum, 2, 4096)) /* everyone is up */
        return 1;
    if (rank == size - 1) {
        zc_harness_step("victim");
        for (;;)
            pause();
    }
    usleep(300000); /* the victim is dead by now */
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    ncclResult_t failed = ncclSuccess;
    for (int round = 0; round < 100 && failed == ncclSuccess; round++) {
        zc_harness_step("survivor round %d", round);
        if (run_chunks(&h, 4, 16u << 10, ncclFloat32, ncclSum, &failed))
            return 1;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double took = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    CHECK(failed == ncclRemoteError || failed == ncclSystemError,
          "after the peer died test/iallreduce returned %d", (int)failed);
    CHECK(took < 20, "the failure took %.1f s to show", took);
    fprintf(stderr, "rank %d: peer loss reported as %d after %.2f s\n", rank, (int)failed, took);
    /* the communicator can still be closed */
    cn_close_coll(h.ccomm);
    return FAILED_AS_EXPECTED;
}

/*
 * Ranks 0 and 1 form a CollNet of two; rank 2, a head of another communicator (another
 * nonce) that was given rank 0's address, tries to join first: it is rejected, and the
 * two connect and reduce as if it had never come.
 */
static int case_stranger(int rank, int size, void *arg)
{
    head_t h;
    ncclResult_t res;
    (void)arg;
    if (listen_all(&h, rank, size, 2))
        return 1;
    if (rank == 2) {
        uint8_t forged[NCCL_NET_HANDLE_MAXSIZE];
        memcpy(forged, all_handles[0], sizeof(forged));
        forged[24] ^= 1; /* the nonce: another communicator's job id */
        void *handles[2] = {forged, all_handles[2]};
        void *cc = NULL;
        zc_harness_step("stranger connect");
        res = cn_connect(handles, 2, 1, h.lcomm, &cc);
        CHECK(res != ncclSuccess && cc == NULL, "the stranger joined (%d)", (int)res);
        CHECK(strstr(logged, "rejected"), "no message about the rejection: %s", logged);
        CHECK_OK(cn_close_listen(h.lcomm));
        int one = 1;
        return publish("stranger-done", &one, sizeof(one));
    }
    if (rank == 1) {
        char path[512];
        int one;
        snprintf(path, sizeof(path), "%s/stranger-done-2", xdir);
        CHECK(wait_file(path, &one, sizeof(one), 30) == 0, "the stranger did not finish");
    }
    if (head_connect(&h) || exact_case(&h, ncclInt32, ncclSum, 4, 16u << 10))
        return 1;
    return head_down(&h);
}

/* ---- an attacker on the same host ----------------------------------------------------------- */

/*
 * The bootstrap's frames, written here from the format in transport/bootstrap/wire.h
 * (version 2), as an attacker would: a 40-byte big-endian header.
 */
enum { BS_HELLO = 1, BS_REJECT = 3, BS_CHALLENGE = 8, BS_PROOF = 9 };

static void put_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

static int send_frame(int fd, uint16_t type, uint64_t job, uint32_t rank, uint64_t len,
                      uint32_t arg, const void *payload)
{
    uint8_t buf[40 + 64] = {'Z', 'C', 'B', 'S', 0, 2};
    put_be(buf + 6, type, 2);
    put_be(buf + 8, job, 8);
    put_be(buf + 16, rank, 4);
    put_be(buf + 24, len, 8);
    put_be(buf + 32, arg, 4);
    if (len)
        memcpy(buf + 40, payload, (size_t)len);
    return send(fd, buf, 40 + (size_t)len, MSG_NOSIGNAL) == (ssize_t)(40 + len) ? 0 : -1;
}

/* Reads one frame: its type, and up to @p max payload bytes into @p payload; -1 on close. */
static int recv_frame(int fd, uint16_t *type_p, uint8_t *payload, size_t max, size_t *len_p)
{
    uint8_t hdr[40];
    size_t want = sizeof(hdr), got = 0;
    uint8_t *dst = hdr;
    for (int part = 0; part < 2; part++) {
        while (got < want) {
            struct pollfd p = {.fd = fd, .events = POLLIN};
            if (poll(&p, 1, 10000) <= 0)
                return -1;
            ssize_t n = recv(fd, dst + got, want - got, 0);
            if (n <= 0)
                return -1;
            got += (size_t)n;
        }
        if (part == 0) {
            uint64_t len = 0;
            for (int i = 24; i < 32; i++)
                len = len << 8 | hdr[i];
            *type_p = (uint16_t)(hdr[6] << 8 | hdr[7]);
            if (len > max)
                return -1;
            *len_p = (size_t)len;
            want = (size_t)len;
            got = 0;
            dst = payload;
        }
    }
    return 0;
}

static int attacker_connect(const struct sockaddr_in *a)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (const struct sockaddr *)a, sizeof(*a)) == 0)
        return fd;
    if (fd >= 0)
        close(fd);
    return -1;
}

/* Sends a hello; expects (after a challenge answered with a forged proof) a REJECT and a close. */
static int claim_refused(const struct sockaddr_in *a, uint64_t job, uint32_t rank, char *reason)
{
    uint8_t payload[512];
    uint16_t type;
    size_t len;
    int fd = attacker_connect(a);
    CHECK(fd >= 0, "cannot connect to node 0");
    CHECK(send_frame(fd, BS_HELLO, job, rank, 0, 3, NULL) == 0, "send hello");
    CHECK(recv_frame(fd, &type, payload, sizeof(payload), &len) == 0, "no answer to the hello");
    if (type == BS_CHALLENGE) {
        uint8_t forged[64];
        memset(forged, 0x5a, sizeof(forged)); /* the attacker does not know the secret */
        CHECK(send_frame(fd, BS_PROOF, job, rank, sizeof(forged), 0, forged) == 0, "send proof");
        CHECK(recv_frame(fd, &type, payload, sizeof(payload), &len) == 0, "no answer to the proof");
    }
    CHECK(type == BS_REJECT && len >= 4 && len < 300, "claim of rank %u: message type %u", rank,
          (unsigned)type);
    memcpy(reason, payload + 4, len - 4);
    reason[len - 4] = '\0';
    CHECK(recv_frame(fd, &type, payload, sizeof(payload), &len) < 0,
          "node 0 kept the refused connection open");
    close(fd);
    fprintf(stderr, "attacker: claim of rank %u refused: %s\n", rank, reason);
    return 0;
}

static int attack(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET};
    uint16_t port;
    uint64_t nonce;
    char job_id[64], hex[24], reason[300];
    memcpy(&port, all_handles[0] + 6, 2);
    memcpy(&a.sin_addr, all_handles[0] + 8, 4);
    memcpy(&nonce, all_handles[0] + 24, 8);
    a.sin_port = htons(port);
    snprintf(job_id, sizeof(job_id), "nccl-collnet-%016" PRIx64 "-3", nonce);
    uint64_t job = fnv1a(job_id, strlen(job_id));
    snprintf(hex, sizeof(hex), "%016" PRIx64, job);

    zc_harness_step("attacker: another job");
    if (claim_refused(&a, job ^ 1, 1, reason))
        return 1;
    CHECK(!strstr(reason, hex), "the REJECT disclosed the job hash: %s", reason);
    zc_harness_step("attacker: forged proof");
    if (claim_refused(&a, job, 1, reason))
        return 1;
    zc_harness_step("attacker: rank 99");
    if (claim_refused(&a, job, 99, reason))
        return 1;

    zc_harness_step("attacker: flood");
    enum { FLOOD = 3000 };
    static int fds[FLOOD + 1];
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < FLOOD + 64) {
        rl.rlim_cur = rl.rlim_max < FLOOD + 64 ? rl.rlim_max : FLOOD + 64;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    fds[FLOOD] = attacker_connect(&a); /* silent */
    CHECK(fds[FLOOD] >= 0, "cannot connect to node 0");
    for (int i = 0; i < FLOOD; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&a, sizeof(a)) < 0 &&
            errno != EINPROGRESS) {
            close(fds[i]);
            fds[i] = -1;
        }
        if (i == FLOOD / 10) {
            int one = 1;
            if (publish("attack", &one, sizeof(one)))
                return 1;
        }
    }
    char path[512];
    int one;
    snprintf(path, sizeof(path), "%s/job-done-0", xdir);
    (void)wait_file(path, &one, sizeof(one), 40);
    for (int i = 0; i <= FLOOD; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    return 0;
}

static int case_hostile(int rank, int size, void *arg)
{
    head_t h;
    ncclResult_t res;
    (void)arg;
    if (listen_all(&h, rank, size, 3))
        return 1;
    if (rank == 3) {
        CHECK_OK(cn_close_listen(h.lcomm));
        return attack();
    }
    if (rank > 0) {
        char path[512];
        int one;
        snprintf(path, sizeof(path), "%s/attack-3", xdir);
        CHECK(wait_file(path, &one, sizeof(one), 30) == 0, "the attack did not start");
    }
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (head_connect(&h))
        return 1;
    clock_gettime(CLOCK_MONOTONIC, &t1);
    fprintf(stderr, "rank %d: connected in %.3f s\n", rank,
            (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9);
    if (exact_case(&h, ncclInt32, ncclSum, 4, 16u << 10) ||
        exact_case(&h, ncclFloat32, ncclMax, 4, 16u << 10))
        return 1;
    if (rank == 0) {
        int one = 1;
        if (publish("job-done", &one, sizeof(one)))
            return 1;
    }
    return head_down(&h);
}

/* ---- reduce-scatter and all-gather, as NCCL 2.30's CollNetDirect issues them ---------------- */

#define PART_BYTES (1u << 20)  /* B: bytes per node of the nNodes x B vector */
#define SG_WINDOW (384u << 10) /* windows straddle the nodes' parts */

/* The part of node r's range [r B, (r+1) B) inside [off, off + len), as absolute offsets. */
static void part_in_window(int r, size_t off, size_t len, size_t *lo, size_t *hi)
{
    size_t a = (size_t)r * PART_BYTES, b = a + PART_BYTES;
    *lo = a > off ? a : off;
    *hi = b < off + len ? b : off + len;
    if (*hi < *lo)
        *hi = *lo;
}

/*
 * Reduce-scatters the send half (this node's input for the whole nranks x B vector)
 * window by window, WINDOW in flight, into this node's B bytes at the receive half's
 * start, through @p rs (the v12 table's or the v8 table's, called through v12's shape).
 */
static int run_windows(head_t *h, ncclDataType_t t, int gather, const uint8_t *mine)
{
    const ncclCollNet_v11_t *v11 =
        dlsym(dlopen(plugin_path, RTLD_NOW | RTLD_NOLOAD), "ncclCollNetPlugin_v11");
    size_t total = (size_t)nranks * PART_BYTES, nwin = (total + SG_WINDOW - 1) / SG_WINDOW;
    void *reqs[64];
    size_t posted = 0, completed = 0;
    uint8_t *send = h->region, *recv = h->region + HALF_BYTES;
    ncclResult_t res;

    CHECK(v11 && nwin <= 64, "no v11 table, or %zu windows", nwin);
    while (completed < nwin) {
        while (posted < nwin && posted - completed < WINDOW) {
            size_t off = posted * SG_WINDOW,
                   len = total - off < SG_WINDOW ? total - off : SG_WINDOW;
            size_t lo, hi;
            part_in_window(my_rank, off, len, &lo, &hi);
            void *req = NULL;
            if (gather) {
                /* v12 leaves iallgather NULL: NCCL 2.30 reaches it through v11..v8 only */
                ncclNetSGE_v11_t part = {h->mh_recv, recv + off, len};
                res =
                    v11->iallgather(h->ccomm, (void *)(mine + (lo - (size_t)my_rank * PART_BYTES)),
                                    1, &part, PART_BYTES, off, len, h->mh_send, &req);
            } else {
                ncclNetSGE_v12_t part = {h->mh_send, send + off, len};
                res = cn.v12->ireducescatter(h->ccomm, 1, &part,
                                             recv + (lo - (size_t)my_rank * PART_BYTES), PART_BYTES,
                                             off, len, t, ncclSum, h->mh_recv, &req);
            }
            CHECK(res == ncclSuccess, "window %zu returned %d", posted, (int)res);
            if (!req)
                break;
            reqs[posted++] = req;
        }
        int done = 0, size = -1;
        CHECK_OK(cn_test(reqs[completed], &done, &size));
        if (done)
            completed++;
        else
            sched_yield();
    }
    return 0;
}

/* ZIPCCL_COLLNET_CODEC qsgd (default): int32 sums exact, f32 sums within qsgd's bound. */
static int case_rs(int rank, int size, void *arg)
{
    head_t h;
    int codec = (int)(intptr_t)arg; /* 0 none, 1 qsgd */
    my_rank = rank;
    nranks = size;
    if (head_up(&h))
        return 1;
    size_t total = (size_t)size * PART_BYTES;
    uint8_t *recv = h.region + HALF_BYTES;
    CHECK(total <= HALF_BYTES, "%d nodes do not fit the region", size);

    /* int32: raw, exact */
    int32_t *si = (int32_t *)h.region;
    for (size_t i = 0; i < total / 4; i++)
        si[i] = (int32_t)exact_input(ncclInt32, ncclSum, rank, i);
    memset(recv, 0x5a, HALF_BYTES);
    zc_harness_step("reduce-scatter int32");
    if (run_windows(&h, ncclInt32, 0, NULL))
        return 1;
    for (size_t j = 0; j < PART_BYTES / 4; j++) {
        size_t i = (size_t)rank * PART_BYTES / 4 + j;
        double ref = 0;
        for (int r = 0; r < size; r++)
            ref += exact_input(ncclInt32, ncclSum, r, i);
        CHECK(((int32_t *)recv)[j] == (int32_t)ref, "int32 element %zu: got %d, expected %.0f", i,
              ((int32_t *)recv)[j], ref);
    }
    for (size_t k = PART_BYTES; k < HALF_BYTES; k++)
        CHECK(recv[k] == 0x5a, "byte %zu past this node's part was written", k);

    /* f32: compressed (qsgd) within its bound, or exact (none) */
    float *sf = (float *)h.region;
    for (size_t i = 0; i < total / 4; i++)
        sf[i] =
            codec == 0 ? (float)exact_input(ncclFloat32, ncclSum, rank, i) : comp_input(rank, i);
    memset(recv, 0x5a, HALF_BYTES);
    zc_harness_step("reduce-scatter f32");
    if (run_windows(&h, ncclFloat32, 0, NULL))
        return 1;
    size_t inexact = 0;
    for (size_t j = 0; j < PART_BYTES / 4; j++) {
        size_t i = (size_t)rank * PART_BYTES / 4 + j;
        double exact = 0, abs_sum = 0;
        for (int r = 0; r < size; r++) {
            double v = codec == 0 ? exact_input(ncclFloat32, ncclSum, r, i) : comp_input(r, i);
            exact += v;
            abs_sum += fabs(v);
        }
        double got = ((float *)recv)[j];
        if (codec == 0) {
            CHECK(got == exact, "f32 element %zu: got %.9g, expected %.9g", i, got, exact);
            continue;
        }
        double tol = comp_bound(1, abs_sum, exact);
        CHECK(fabs(got - exact) <= tol, "f32 element %zu: got %.9g, expected %.9g within %.3g", i,
              got, exact, tol);
        inexact += got != (float)exact;
    }
    if (codec != 0)
        CHECK(inexact > PART_BYTES / 16, "only %zu of %u results inexact: was it compressed?",
              inexact, PART_BYTES / 4);
    for (size_t k = PART_BYTES; k < HALF_BYTES; k++)
        CHECK(recv[k] == 0x5a, "byte %zu past this node's part was written", k);
    fprintf(stderr, "rank %d: reduce-scatter of %d x %u bytes: %zu of %u f32 results inexact\n",
            rank, size, PART_BYTES, inexact, PART_BYTES / 4);
    return head_down(&h);
}

/* All-gather through the v11 table (v12's slot is NULL): every node's bytes, exact. */
static int case_ag(int rank, int size, void *arg)
{
    head_t h;
    (void)arg;
    my_rank = rank;
    nranks = size;
    if (head_up(&h))
        return 1;
    size_t total = (size_t)size * PART_BYTES;
    CHECK(total <= HALF_BYTES, "%d nodes do not fit the region", size);
    uint8_t *mine = malloc(PART_BYTES), *recv = h.region + HALF_BYTES;
    CHECK(mine, "out of memory");
    for (size_t i = 0; i < PART_BYTES; i++) /* zeros and 0xff among them: bytes, not numbers */
        mine[i] = (uint8_t)(i % 7 == 0 ? 0 : i % 11 == 0 ? 0xff : mix((uint64_t)rank << 32 ^ i));
    memset(recv, 0x5a, HALF_BYTES);
    zc_harness_step("all-gather");
    if (run_windows(&h, ncclUint8, 1, mine))
        return 1;
    for (int r = 0; r < size; r++) {
        for (size_t i = 0; i < PART_BYTES; i++) {
            uint8_t want = (uint8_t)(i % 7 == 0    ? 0
                                     : i % 11 == 0 ? 0xff
                                                   : mix((uint64_t)r << 32 ^ i));
            CHECK(recv[(size_t)r * PART_BYTES + i] == want,
                  "node %d byte %zu: got 0x%02x, want 0x%02x", r, i,
                  recv[(size_t)r * PART_BYTES + i], want);
        }
    }
    for (size_t k = total; k < HALF_BYTES; k++)
        CHECK(recv[k] == 0x5a, "byte %zu past the vector was written", k);
    free(mine);
    return head_down(&h);
}

/* ---- two communicators at once, each with its own context, as NCCL 2.30 runs them --------- */

typedef struct comm_thread {
    head_t *h;
    int rounds, rc;
} comm_thread_t;

static void *comm_thread_main(void *p)
{
    comm_thread_t *t = p;
    t->rc = 0;
    for (int i = 0; i < t->rounds && !t->rc; i++)
        t->rc = exact_case(t->h, ncclInt32, ncclSum, 8, 64u << 10);
    return NULL;
}

/*
 * Communicators A and B: init twice (distinct contexts), both connected; B's data
 * path runs on a thread (its proxy) while A's runs here, then A is closed and
 * finalized while B is still moving data, then B.
 */
static int case_two_comms(int rank, int size, void *arg)
{
    ncclResult_t res;
    head_t a, b;
    void *ctx_a = NULL, *ctx_b = NULL;
    uint8_t ha[NCCL_NET_HANDLE_MAXSIZE], hb[NCCL_NET_HANDLE_MAXSIZE];
    static uint8_t all_a[ZC_HARNESS_MAX_RANKS][NCCL_NET_HANDLE_MAXSIZE],
        all_b[ZC_HARNESS_MAX_RANKS][NCCL_NET_HANDLE_MAXSIZE];
    void *hs_a[ZC_HARNESS_MAX_RANKS], *hs_b[ZC_HARNESS_MAX_RANKS];
    (void)arg;
    my_rank = rank;
    nranks = size;
    if (open_plugin())
        return 1;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    zc_harness_step("init twice");
    CHECK_OK(cn.v12->init(&ctx_a, 0xa, logger));
    CHECK_OK(cn.v12->init(&ctx_b, 0xb, logger));
    CHECK(ctx_a && ctx_b && ctx_a != ctx_b, "contexts %p and %p: one per communicator", ctx_a,
          ctx_b);
    CHECK_OK(cn.v12->listen(ctx_a, 0, ha, &a.lcomm));
    CHECK_OK(cn.v12->listen(ctx_b, 0, hb, &b.lcomm));
    if (exchange("ha", ha, sizeof(ha), all_a) || exchange("hb", hb, sizeof(hb), all_b))
        return 1;
    for (int r = 0; r < size; r++) {
        hs_a[r] = all_a[r];
        hs_b[r] = all_b[r];
    }
    head_t *hh[2] = {&a, &b};
    void **hs[2] = {hs_a, hs_b};
    for (int k = 0; k < 2; k++) {
        head_t *h = hh[k];
        zc_harness_step("connect %c", 'A' + k);
        CHECK_OK(cn.v12->connect(hs[k], size, rank, h->lcomm, &h->ccomm));
        CHECK_OK(cn.v12->closeListen(h->lcomm));
        h->region = aligned_alloc(4096, REGION_BYTES);
        CHECK(h->region, "out of memory");
        CHECK_OK(cn_reg_mr(h->ccomm, h->region, REGION_BYTES, NCCL_PTR_HOST, &h->mh_send));
        CHECK_OK(cn_reg_mr(h->ccomm, h->region, REGION_BYTES, NCCL_PTR_HOST, &h->mh_recv));
    }
    comm_thread_t t = {.h = &b, .rounds = 12, .rc = 1};
    pthread_t tid;
    CHECK(pthread_create(&tid, NULL, comm_thread_main, &t) == 0, "pthread_create");
    for (int i = 0; i < 3; i++)
        if (exact_case(&a, ncclInt64, ncclSum, 8, 64u << 10))
            return 1;
    /* A goes away while B's data path is running */
    zc_harness_step("close A");
    CHECK_OK(cn_dereg_mr(a.ccomm, a.mh_send));
    CHECK_OK(cn_dereg_mr(a.ccomm, a.mh_recv));
    CHECK_OK(cn_close_coll(a.ccomm));
    CHECK_OK(cn.v12->finalize(ctx_a));
    CHECK(cn.v12->finalize(ctx_a) == ncclInternalError, "a context finalized twice");
    pthread_join(tid, NULL);
    CHECK(t.rc == 0, "communicator B failed");
    if (exact_case(&b, ncclUint8, ncclMax, 2, 4096)) /* B alone, after A's finalize */
        return 1;
    cn.ctx = ctx_b;
    free(a.region);
    return head_down(&b);
}

/* ---- the tuner, called as NCCL 2.30 calls it (2.28.9: the same without getChunkSize) ------- */

static int case_tuner(int rank, int size, void *arg)
{
    ncclResult_t res;
    int expect_on = arg != NULL;
    (void)size;
    my_rank = rank;
    nranks = 1;
    void *lib = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    CHECK(lib, "dlopen %s: %s", plugin_path, dlerror());
    const ncclTuner_v6_t *t6 = dlsym(lib, "ncclTunerPlugin_v6");
    const ncclTuner_v5_t *t5 = dlsym(lib, "ncclTunerPlugin_v5");
    const ncclCollNet_v12_t *c = dlsym(lib, "ncclCollNetPlugin_v12");
    CHECK(t6 && t5 && c, "tuner or CollNet tables missing");
    CHECK(strcmp(t6->name, "zipccl") == 0 && t6->init && t6->getCollInfo && t6->finalize &&
              t6->getChunkSize,
          "v6 table");
    CHECK(t5->init == t6->init && t5->getCollInfo == t6->getCollInfo &&
              t5->finalize == t6->finalize,
          "v5 is not v6's first four slots");

    /* NCCL: CollNet init at comm allocation (commHash), the tuner's after transports */
    const uint64_t comm = 0x5eed;
    void *cctx = NULL, *tctx = NULL, *other = NULL, *single = NULL;
    ncclNvlDomainInfo_v6_t nvl = {2, 1, 1};
    static ncclTunerConstants_v6_t constants, before;
    memset(&constants, 0, sizeof(constants));
    constants.hwLatencies[NCCL_HW_NET][NCCL_ALGO_COLLNET_CHAIN][NCCL_PROTO_SIMPLE] = 30;
    before = constants;
    CHECK_OK(c->init(&cctx, comm, logger));
    CHECK_OK(t6->init(&tctx, comm, 2, 2, logger, &nvl, &constants));
    CHECK_OK(t6->init(&other, comm + 1, 2, 2, logger, &nvl, &constants)); /* not our CollNet */
    CHECK_OK(t6->init(&single, comm, 1, 1, logger, &nvl, &constants));    /* one node */
    CHECK(memcmp(&constants, &before, sizeof(constants)) == 0, "the constants changed");

    /* getCollInfo: CollNet entries that are not -1 become the cheapest, for big all-reduces */
    float table[NCCL_NUM_ALGORITHMS][NCCL_NUM_PROTOCOLS];
    struct {
        ncclFunc_t f;
        size_t bytes;
        int chain_ok; /* CollNet Chain available (Direct never: -1 stays) */
        int want_zero;
    } calls[] = {
        {ncclFuncAllReduce, 64u << 20, 1, 1},      {ncclFuncAllReduce, 4u << 20, 1, 1},
        {ncclFuncAllReduce, (4u << 20) - 1, 1, 0}, {ncclFuncAllReduce, 64u << 20, 0, 0},
        {ncclFuncAllGather, 64u << 20, 1, 0},      {ncclFuncReduceScatter, 64u << 20, 1, 0},
    };
    void *ctxs[3] = {tctx, other, single};
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < sizeof(calls) / sizeof(calls[0]); i++) {
            for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++)
                for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++)
                    table[a][p] = 10.0f + (float)(a * 3 + p);
            table[NCCL_ALGO_COLLNET_DIRECT][NCCL_PROTO_SIMPLE] = NCCL_ALGO_PROTO_IGNORE;
            if (!calls[i].chain_ok)
                table[NCCL_ALGO_COLLNET_CHAIN][NCCL_PROTO_SIMPLE] = NCCL_ALGO_PROTO_IGNORE;
            int nch = 0;
            CHECK_OK(t6->getCollInfo(ctxs[k], calls[i].f, calls[i].bytes, 1, (float **)table,
                                     NCCL_NUM_ALGORITHMS, NCCL_NUM_PROTOCOLS, i & 1, &nch));
            CHECK(nch == 0, "nChannels set to %d", nch);
            int zero = expect_on && k == 0 && calls[i].want_zero;
            for (int a = 0; a < NCCL_NUM_ALGORITHMS; a++) {
                for (int p = 0; p < NCCL_NUM_PROTOCOLS; p++) {
                    float want = 10.0f + (float)(a * 3 + p);
                    if (a == NCCL_ALGO_COLLNET_DIRECT && p == NCCL_PROTO_SIMPLE)
                        want = NCCL_ALGO_PROTO_IGNORE;
                    if (a == NCCL_ALGO_COLLNET_CHAIN && p == NCCL_PROTO_SIMPLE)
                        want = !calls[i].chain_ok ? NCCL_ALGO_PROTO_IGNORE : zero ? 0.0f : want;
                    CHECK(table[a][p] == want, "ctx %d call %zu: algo %d proto %d cost %g, want %g",
                          k, i, a, p, table[a][p], want);
                }
            }
        }
    }

    /* getChunkSize: only CollNet SIMPLE all-reduce/reduce-scatter chunks, raised, capped */
    size_t buffsize =
        (size_t)strtoull(getenv("NCCL_BUFFSIZE") ? getenv("NCCL_BUFFSIZE") : "4194304", NULL, 0);
    size_t target = (size_t)2 << 20; /* ZIPCCL_TUNER_CHUNK's default */
    size_t cap = buffsize / 8 < target ? buffsize / 8 : target;
    struct {
        ncclFunc_t f;
        size_t bytes;
        int algo, proto, nch;
        size_t nccl, want;
    } chunks[] = {
        {ncclFuncAllReduce, 256u << 20, NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_SIMPLE, 2, 131072, cap},
        {ncclFuncAllReduce, 256u << 20, NCCL_ALGO_COLLNET_DIRECT, NCCL_PROTO_SIMPLE, 4, 65536, cap},
        {ncclFuncReduceScatter, 256u << 20, NCCL_ALGO_COLLNET_DIRECT, NCCL_PROTO_SIMPLE, 1, 32768,
         cap},
        /* a channel's share below the target: the share, a multiple of 512 */
        {ncclFuncAllReduce, 3 * 100000, NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_SIMPLE, 3, 32768,
         cap < 99840 ? cap : 99840},
        /* never lowered */
        {ncclFuncAllReduce, 1u << 20, NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_SIMPLE, 8, 262144,
         262144},
        {ncclFuncAllReduce, 256u << 20, NCCL_ALGO_RING, NCCL_PROTO_SIMPLE, 1, 131072, 131072},
        {ncclFuncAllReduce, 256u << 20, NCCL_ALGO_COLLNET_CHAIN, NCCL_PROTO_LL, 2, 16384, 16384},
        {ncclFuncAllGather, 256u << 20, NCCL_ALGO_COLLNET_DIRECT, NCCL_PROTO_SIMPLE, 2, 65536,
         65536},
    };
    for (int k = 0; k < 3; k++) {
        for (size_t i = 0; i < sizeof(chunks) / sizeof(chunks[0]); i++) {
            size_t got = chunks[i].nccl;
            CHECK_OK(t6->getChunkSize(ctxs[k], chunks[i].f, chunks[i].bytes, chunks[i].algo,
                                      chunks[i].proto, chunks[i].nch, &got));
            size_t want = expect_on && k == 0 && chunks[i].want > chunks[i].nccl ? chunks[i].want
                                                                                 : chunks[i].nccl;
            CHECK(got == want && got % 512 == 0, "ctx %d chunk call %zu: %zu, want %zu", k, i, got,
                  want);
        }
    }
    fprintf(stderr, "tuner: %s, CollNet chunk %zu bytes (NCCL_BUFFSIZE %zu)\n",
            expect_on ? "on" : "off", expect_on ? cap : (size_t)0, buffsize);

    /* a CollNet all-reduce of the tuner's chunk size goes through (1 head) */
    if (expect_on) {
        uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
        void *lc = NULL, *cc = NULL, *mh = NULL, *req = NULL, *hs[1] = {handle};
        float *buf = malloc(2 * cap);
        CHECK(buf, "out of memory");
        for (size_t i = 0; i < cap / 4; i++)
            buf[i] = (float)(i % 17);
        CHECK_OK(c->listen(cctx, 0, handle, &lc));
        CHECK_OK(c->connect(hs, 1, 0, lc, &cc));
        CHECK_OK(c->closeListen(lc));
        CHECK_OK(c->regMr(cc, buf, 2 * cap, NCCL_PTR_HOST, &mh));
        CHECK_OK(
            c->iallreduce(cc, buf, buf + cap / 4, cap / 4, ncclFloat32, ncclSum, mh, mh, &req));
        int done = 0, bytes = 0;
        while (!done)
            CHECK_OK(c->test(req, &done, &bytes));
        CHECK(bytes == (int)cap, "test reported %d bytes", bytes);
        CHECK_OK(c->deregMr(cc, mh));
        CHECK_OK(c->closeColl(cc));
        free(buf);
    }
    for (int k = 0; k < 3; k++)
        CHECK_OK(t6->finalize(ctxs[k]));
    CHECK_OK(c->finalize(cctx));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: %s CASE PLUGIN_PATH\n", argv[0]);
        return 2;
    }
    const char *name = argv[1];
    plugin_path = argv[2];
    char dir[] = "/tmp/zc-collnet-XXXXXX";
    xdir = mkdtemp(dir);
    if (!xdir) {
        perror("mkdtemp");
        return 1;
    }

    char *base_env[] = {"ZIPCCL_NET_IFNAME=lo", "ZIPCCL_TIMEOUT_S=20", NULL};
    zc_harness_opts_t o = {.nranks = 1, .deadline_s = 60, .env = base_env};
    zc_rank_main_fn fn = NULL;
    void *arg = NULL;
    int n = 0;
    char *codec_env[] = {"ZIPCCL_NET_IFNAME=lo", "ZIPCCL_TIMEOUT_S=20", NULL, NULL};
    static const char *const codecs[] = {"none", "qsgd", "fp16", "bf16"};

    if (strcmp(name, "abi") == 0) {
        fn = case_abi;
    } else if (strcmp(name, "abi-all-types") == 0) {
        codec_env[2] = "ZIPCCL_COLLNET_ALL_TYPES=1";
        o.env = codec_env;
        fn = case_abi;
        arg = (void *)1;
    } else if (sscanf(name, "rs-none-%d", &n) == 1) {
        codec_env[2] = "ZIPCCL_COLLNET_CODEC=none";
        o.env = codec_env;
        o.nranks = n;
        fn = case_rs;
    } else if (sscanf(name, "rs-%d", &n) == 1) {
        o.nranks = n;
        fn = case_rs;
        arg = (void *)1;
    } else if (sscanf(name, "ag-%d", &n) == 1) {
        o.nranks = n;
        fn = case_ag;
    } else if (strcmp(name, "two-comms") == 0) {
        o.nranks = 2;
        fn = case_two_comms;
    } else if (strcmp(name, "tuner") == 0) {
        fn = case_tuner;
        arg = (void *)1;
    } else if (strcmp(name, "tuner-buffsize") == 0) {
        codec_env[2] = "NCCL_BUFFSIZE=16777216";
        o.env = codec_env;
        fn = case_tuner;
        arg = (void *)1;
    } else if (strcmp(name, "tuner-off") == 0) {
        codec_env[2] = "ZIPCCL_TUNER=0";
        o.env = codec_env;
        fn = case_tuner;
    } else if (strcmp(name, "bad-config") == 0) {
        codec_env[2] = "ZIPCCL_COLLNET_CODEC=zstd";
        o.env = codec_env;
        fn = case_bad_config;
    } else if (sscanf(name, "raw-%d", &n) == 1) {
        o.nranks = n;
        fn = case_raw;
    } else if (strcmp(name, "stranger") == 0) {
        o.nranks = 3;
        fn = case_stranger;
    } else if (strcmp(name, "hostile") == 0) {
        o.nranks = 4;
        fn = case_hostile;
    } else if (strcmp(name, "v8") == 0) {
        o.nranks = 2;
        fn = case_v8;
    } else if (strcmp(name, "kill") == 0) {
        codec_env[2] = "ZIPCCL_TIMEOUT_S=5";
        o.env = codec_env;
        o.nranks = 3;
        o.kill_rank = 2;
        o.kill_at_step = "victim";
        o.kill_after_s = 0.1;
        o.expect_fail_mask = 0x3;
        o.expect_fail_status = FAILED_AS_EXPECTED;
        fn = case_kill;
    } else {
        static char codec_var[64];
        for (int c = 0; c < 4 && !fn; c++) {
            size_t len = strlen(codecs[c]);
            if (strncmp(name, codecs[c], len) == 0 && sscanf(name + len, "-%d", &n) == 1) {
                snprintf(codec_var, sizeof(codec_var), "ZIPCCL_COLLNET_CODEC=%s", codecs[c]);
                codec_env[2] = codec_var;
                o.env = codec_env;
                o.nranks = n;
                arg = (void *)(intptr_t)c;
                fn = case_comp;
            }
        }
    }
    if (!fn || o.nranks < 1 || o.nranks > 8) {
        fprintf(stderr, "unknown case '%s'\n", name);
        return 2;
    }
    int rc = zc_harness_run(&o, fn, arg);

    DIR *d = opendir(xdir);
    struct dirent *e;
    while (d && (e = readdir(d))) {
        char p[512];
        if (e->d_name[0] == '.' && (!e->d_name[1] || e->d_name[1] == '.'))
            continue;
        snprintf(p, sizeof(p), "%s/%s", xdir, e->d_name);
        unlink(p);
    }
    if (d)
        closedir(d);
    rmdir(xdir);
    return rc != 0;
}
