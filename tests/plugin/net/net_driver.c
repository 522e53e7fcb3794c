/*
 * net_driver: drives libnccl-net-zipccl.so's ncclNet tables the way NCCL
 * does, from separate processes (tests/integration/harness.h), and checks
 * every result.
 *
 *   net_driver LIBRARY CASE [--v8]
 *
 * The library is dlopened like NCCL does (RTLD_NOW | RTLD_LOCAL) and the
 * tables looked up in NCCL's order, ncclNetPlugin_v12 first; all of v12, v11,
 * v10, v9 and v8 must exist and be named "zipccl". The v12 table is driven
 * (as NCCL 2.30 does; v11 has the same functions but for getProperties) unless
 * --v8 asks for the v8 one (init without context, int sizes). Cases:
 *
 *   pair      2 processes, one connection each way: messages of 0 B, 1 B,
 *             4 KiB, 1 MiB and 64 MiB into larger receive buffers (test must
 *             report the sent size), then 8 messages in flight, in order,
 *             then a full request window (NCCL_NET_MAX_REQUESTS) and one more
 *             receive, which must be refused with *request = NULL
 *   mesh      4 processes, every ordered pair connected, the same traffic
 *   threads   2 processes; in each, a thread moves data on one connection
 *             while the main thread connects and closes others, as NCCL's
 *             progress and service threads do, on one plugin context
 *   args      1 process: bad arguments give ncclInternalError (NULL pointers,
 *             bad device, CUDA memory, n != 1, a foreign handle), a
 *             connection to itself works, finalize(NULL) succeeds, setNetAttr
 *             takes hints (v12 and v11), v12 and v11 properties in their layouts
 *   config    a bad ZIPCCL_TIMEOUT_S makes init fail with ncclInvalidUsage
 *             and a NCCL WARN naming it; ZIPCCL_NET_IFNAME naming no
 *             interface makes it fail with ncclSystemError; a prefix list
 *             selects lo; an exclusion list gives distinct, stable devices
 *             and loopback only when alone
 *   list      1 process: prints "device NAME" per device the inherited
 *             ZIPCCL_NET_IFNAME selects (ifname_default.sh runs it in a
 *             network namespace with bridges)
 *   kill-send rank 1 streams messages to rank 0 and is killed: rank 0's test
 *             returns ncclRemoteError within ZIPCCL_TIMEOUT_S, with a WARN
 *             naming the peer, not a hang
 *   kill-recv the same with the receiver killed: the sender's test fails
 *
 * Handles travel between processes through files in a directory the parent
 * creates. Every rank runs with ZIPCCL_NET_IFNAME=lo. A normal run must
 * produce no WARN line at all.
 */
#include "harness.h"
#include "plugin/nccl/nccl_abi.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 4
#define KIB 1024
#define MIB (1024 * 1024)
#define WINDOW 8
#define SLACK 100 /* receive buffers are larger than the message by this */

static const char *lib_path;
static _Thread_local int in_thread; /* the harness's steps are the main thread's */
static const char *exchange_dir;
static int use_v8;
static int my_rank;

/* ---- checks ---- */

static int fail(int line, const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "net_driver rank %d line %d: ", my_rank, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 1;
}

#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            return fail(__LINE__, "check failed: %s", #cond);                                      \
    } while (0)

#define CHECK_RES(expr, want)                                                                      \
    do {                                                                                           \
        ncclResult_t res_ = (expr);                                                                \
        if (res_ != (want))                                                                        \
            return fail(__LINE__, "%s returned %d, expected %d", #expr, (int)res_, (int)(want));   \
    } while (0)

#define CHECK_OK(expr) CHECK_RES(expr, ncclSuccess)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* ---- NCCL's logger ---- */

static int warn_lines;
static char warn_text[8192]; /* every WARN line, for checks on what they say */

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...)
{
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (level == NCCL_LOG_WARN) {
        __atomic_add_fetch(&warn_lines, 1, __ATOMIC_RELAXED);
        size_t used = strlen(warn_text);
        snprintf(warn_text + used, sizeof(warn_text) - used, "%s\n", msg);
        if (flags != NCCL_ALL)
            fprintf(stderr, "rank %d: WARN with flags 0x%lx, not NCCL_ALL\n", my_rank, flags);
    }
    fprintf(stderr, "rank %d NCCL %s %s:%d %s\n", my_rank, level == NCCL_LOG_WARN ? "WARN" : "INFO",
            file ? file : "?", line, msg);
}

/* ---- the plugin, through the v12 or the v8 table ---- */

typedef struct api {
    const ncclNet_v12_t *v12; /* NCCL 2.30 uses it directly */
    const ncclNet_v11_t *v11; /* NCCL 2.28 and 2.29 */
    const ncclNet_v8_t *v8;
    void *ctx;
} api_t;

static api_t api;

/* An entry point whose signature v8 and v12 share, from the table under test. */
#define NET(fn) (use_v8 ? api.v8->fn : api.v12->fn)

static int api_open(void)
{
    static const char *const order[] = {"ncclNetPlugin_v12", "ncclNetPlugin_v11",
                                        "ncclNetPlugin_v10", "ncclNetPlugin_v9",
                                        "ncclNetPlugin_v8"};
    void *lib = dlopen(lib_path, RTLD_NOW | RTLD_LOCAL);
    const void *first = NULL;

    if (!lib)
        return fail(__LINE__, "dlopen %s: %s", lib_path, dlerror());
    for (size_t i = 0; i < sizeof(order) / sizeof(order[0]); i++) {
        const char *const *table = dlsym(lib, order[i]);
        if (!table)
            return fail(__LINE__, "%s not exported", order[i]);
        /* every table starts with its name */
        if (!table[0] || strcmp(table[0], "zipccl") != 0)
            return fail(__LINE__, "%s is named %s", order[i], table[0] ? table[0] : "NULL");
        if (!first)
            first = table; /* NCCL takes the first one it finds */
    }
    api.v12 = first;
    CHECK(api.v12 == dlsym(lib, "ncclNetPlugin_v12"));
    api.v11 = dlsym(lib, "ncclNetPlugin_v11");
    api.v8 = dlsym(lib, "ncclNetPlugin_v8");
    CHECK(api.v12->finalize != NULL && api.v12->init != NULL && api.v8->init != NULL);
    return 0;
}

static ncclResult_t api_init(void)
{
    if (use_v8)
        return api.v8->init(logger);
    ncclNetCommConfig_v12_t config = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    return api.v12->init(&api.ctx, 0x5eed0000u + (unsigned)my_rank, &config, logger, NULL);
}

static ncclResult_t api_listen(int dev, void *handle, void **lc)
{
    return use_v8 ? api.v8->listen(dev, handle, lc) : api.v12->listen(api.ctx, dev, handle, lc);
}

static ncclResult_t api_connect(int dev, void *handle, void **sc)
{
    ncclNetDeviceHandle_v11_t *dh = NULL;
    return use_v8 ? api.v8->connect(dev, handle, sc, &dh)
                  : api.v12->connect(api.ctx, dev, handle, sc, &dh);
}

static ncclResult_t api_accept(void *lc, void **rc)
{
    ncclNetDeviceHandle_v11_t *dh = NULL;
    return use_v8 ? api.v8->accept(lc, rc, &dh) : api.v12->accept(lc, rc, &dh);
}

static ncclResult_t api_isend(void *sc, void *data, size_t size, int tag, void *mh, void **req)
{
    return use_v8 ? api.v8->isend(sc, data, (int)size, tag, mh, req)
                  : api.v12->isend(sc, data, size, tag, mh, NULL, req);
}

static ncclResult_t api_irecv(void *rc, void *data, size_t size, int tag, void *mh, void **req)
{
    if (use_v8) {
        int isize = (int)size;
        return api.v8->irecv(rc, 1, &data, &isize, &tag, &mh, req);
    }
    return api.v12->irecv(rc, 1, &data, &size, &tag, &mh, NULL, req);
}

static ncclResult_t api_finalize(void)
{
    return use_v8 ? ncclSuccess : api.v12->finalize(api.ctx);
}

/* test until done or @p limit_s; *size_p gets the reported size */
static ncclResult_t wait_req(void *req, int *size_p, double limit_s)
{
    double end = now_s() + limit_s;
    int done = 0;
    while (!done) {
        ncclResult_t res = NET(test)(req, &done, size_p);
        if (res != ncclSuccess)
            return res;
        if (!done && now_s() > end) {
            fprintf(stderr, "rank %d: request not done after %.0f s\n", my_rank, limit_s);
            return ncclNumResults;
        }
    }
    return ncclSuccess;
}

/* ---- handles through files ---- */

/* connect_all calls, in the same order on every rank: names each one's handles apart */
static int generation;

static void handle_path(char *buf, size_t len, int from, int to)
{
    snprintf(buf, len, "%s/handle-%d-to-%d-%d", exchange_dir, from, to, generation);
}

static int put_handle(int from, int to, const void *handle)
{
    char path[512], tmp[520];
    handle_path(path, sizeof(path), from, to);
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(handle, 1, NCCL_NET_HANDLE_MAXSIZE, f) != NCCL_NET_HANDLE_MAXSIZE ||
        fclose(f) != 0 || rename(tmp, path) != 0)
        return fail(__LINE__, "writing %s: %s", path, strerror(errno));
    return 0;
}

/* 1 when read, 0 when not there yet */
static int get_handle(int from, int to, void *handle)
{
    char path[512];
    handle_path(path, sizeof(path), from, to);
    FILE *f = fopen(path, "rb");
    if (!f)
        return 0;
    size_t n = fread(handle, 1, NCCL_NET_HANDLE_MAXSIZE, f);
    fclose(f);
    return n == NCCL_NET_HANDLE_MAXSIZE;
}

/* ---- message contents ---- */

static uint8_t pattern(int from, int to, int msg, size_t i)
{
    uint32_t x = (uint32_t)(i * 2654435761u) ^
                 (uint32_t)(from * 0x9e3779b9u + to * 0x85ebca6bu + msg * 0xc2b2ae35u);
    return (uint8_t)(x ^ (x >> 15) ^ (x >> 24));
}

static void fill(uint8_t *buf, size_t len, int from, int to, int msg)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = pattern(from, to, msg, i);
}

static int verify(const uint8_t *buf, size_t len, int from, int to, int msg)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pattern(from, to, msg, i))
            return fail(__LINE__, "message %d from %d: byte %zu is 0x%02x, expected 0x%02x", msg,
                        from, i, buf[i], pattern(from, to, msg, i));
    return 0;
}

/* ---- setup: devices, properties ---- */

static int check_properties(void)
{
    int ndev = 0;
    CHECK_OK(NET(devices)(&ndev));
    CHECK(ndev == 1); /* ZIPCCL_NET_IFNAME=lo */
    if (use_v8) {
        ncclNetProperties_v8_t p;
        memset(&p, 0xa5, sizeof(p));
        CHECK_OK(api.v8->getProperties(0, &p));
        CHECK(p.name && strcmp(p.name, "lo") == 0);
        CHECK(p.ptrSupport == NCCL_PTR_HOST);
        CHECK(p.speed > 0 && p.maxRecvs >= 1 && p.maxComms > 0);
        CHECK(p.netDeviceType == NCCL_NET_DEVICE_HOST && p.netDeviceVersion == 0);
        return 0;
    }
    ncclNetProperties_v12_t p;
    memset(&p, 0xa5, sizeof(p));
    CHECK_OK(api.v12->getProperties(0, &p));
    /* v12: one host NIC per device, no rail or plane (-1; 0 would be an id) */
    CHECK(p.railId == NCCL_NET_ID_UNDEF && p.planeId == NCCL_NET_ID_UNDEF);
    /* v11's layout through v11's table: the members after vProps 16 bytes earlier */
    struct {
        ncclNetProperties_v11_t p;
        uint8_t guard[16];
    } p11;
    memset(&p11, 0xa5, sizeof(p11));
    CHECK_OK(api.v11->getProperties(0, &p11.p));
    CHECK(p11.p.name == p.name && p11.p.guid == p.guid && p11.p.maxP2pBytes == p.maxP2pBytes &&
          p11.p.maxCollBytes == p.maxCollBytes && p11.p.maxMultiRequestSize == 1 &&
          p11.p.vProps.ndevs == 1 && p11.p.vProps.devs[0] == 0);
    for (size_t i = 0; i < sizeof(p11.guard); i++)
        CHECK(p11.guard[i] == 0xa5);
    CHECK(p.name && strcmp(p.name, "lo") == 0);
    CHECK(p.pciPath == NULL); /* loopback has no /sys/class/net/lo/device */
    CHECK(p.ptrSupport == NCCL_PTR_HOST);
    CHECK(p.speed > 0);
    CHECK(p.maxP2pBytes > 0 && p.maxP2pBytes <= NCCL_MAX_NET_SIZE_BYTES);
    CHECK(p.maxCollBytes > 0 && p.maxCollBytes <= NCCL_MAX_NET_SIZE_BYTES);
    CHECK(p.maxRecvs >= 1 && p.maxComms > 0);
    CHECK(p.netDeviceType == NCCL_NET_DEVICE_HOST && p.netDeviceVersion == 0);
    CHECK(p.vProps.ndevs == 1 && p.vProps.devs[0] == 0);
    CHECK(p.maxMultiRequestSize == 1);
    CHECK(p.latency == 0.0f && p.port == 0);
    CHECK_RES(api.v12->getProperties(ndev, &p), ncclInternalError);
    CHECK_RES(api.v12->getProperties(-1, &p), ncclInternalError);
    CHECK_RES(api.v12->getProperties(0, NULL), ncclInternalError);
    return 0;
}

/* ---- connections ---- */

typedef struct peer {
    void *listen, *recv, *send;
    void *recv_mh, *send_mh;
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE]; /* the peer's, for connect (the same buffer) */
    int have_handle;
} peer_t;

/* Connects every pair of ranks both ways, as NCCL does: listen, exchange, connect/accept retried.
 */
static int connect_all(int rank, int size, peer_t *peers)
{
    generation++;
    for (int p = 0; p < size; p++) {
        if (p == rank)
            continue;
        uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
        CHECK_OK(api_listen(0, handle, &peers[p].listen));
        CHECK(peers[p].listen != NULL);
        if (put_handle(p, rank, handle))
            return 1;
    }
    if (!in_thread)
        zc_harness_step("connect");
    double end = now_s() + 30;
    for (;;) {
        int pending = 0;
        for (int p = 0; p < size; p++) {
            if (p == rank)
                continue;
            peer_t *peer = &peers[p];
            if (!peer->have_handle)
                peer->have_handle = get_handle(rank, p, peer->handle);
            if (peer->have_handle && !peer->send)
                CHECK_OK(api_connect(0, peer->handle, &peer->send));
            if (!peer->recv) {
                CHECK_OK(api_accept(peer->listen, &peer->recv));
                if (peer->recv) /* NCCL closes the listener once accepted */
                    CHECK_OK(NET(closeListen)(peer->listen));
            }
            pending += !peer->send || !peer->recv;
        }
        if (!pending)
            break;
        if (now_s() > end)
            return fail(__LINE__, "%d connections not up after 30 s", pending);
        usleep(100);
    }
    for (int p = 0; p < size; p++) {
        if (p == rank)
            continue;
        CHECK_OK(NET(regMr)(peers[p].send, peers, 64, NCCL_PTR_HOST, &peers[p].send_mh));
        CHECK_OK(NET(regMr)(peers[p].recv, peers, 64, NCCL_PTR_HOST, &peers[p].recv_mh));
        CHECK(peers[p].send_mh && peers[p].recv_mh);
    }
    return 0;
}

static int close_all(int rank, int size, peer_t *peers)
{
    for (int p = 0; p < size; p++) {
        if (p == rank)
            continue;
        CHECK_OK(NET(deregMr)(peers[p].send, peers[p].send_mh));
        CHECK_OK(NET(deregMr)(peers[p].recv, peers[p].recv_mh));
        CHECK_OK(NET(closeSend)(peers[p].send));
        CHECK_OK(NET(closeRecv)(peers[p].recv));
    }
    return 0;
}

/* ---- traffic ---- */

typedef struct xfer {
    void *req;
    uint8_t *buf;
    size_t len;  /* sent, or expected */
    size_t room; /* receive buffer size */
    int peer, msg, is_recv, done;
} xfer_t;

/*
 * One round: to every peer, messages of lens[0..n-1] (message ids msg0..), all
 * posted at once, and the same from every peer; completes all, checks sizes
 * and contents. The first receive has *request pre-set to 0x1.
 */
static int round_trip(int rank, int size, peer_t *peers, const size_t *lens, int n, int msg0)
{
    xfer_t x[2 * (MAX_RANKS - 1) * WINDOW];
    int nx = 0, first_recv = 1;

    for (int p = 0; p < size; p++) {
        if (p == rank)
            continue;
        for (int k = 0; k < n; k++) {
            xfer_t *r = &x[nx++];
            *r = (xfer_t){
                .len = lens[k], .room = lens[k] + SLACK, .peer = p, .msg = msg0 + k, .is_recv = 1};
            r->buf = malloc(r->room);
            CHECK(r->buf);
            memset(r->buf, 0xee, r->room);
            r->req = first_recv ? (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION : NULL;
            CHECK_OK(api_irecv(peers[p].recv, r->buf, r->room, p, peers[p].recv_mh, &r->req));
            CHECK(r->req != NULL);
            if (first_recv)
                CHECK(r->req != (void *)(uintptr_t)NCCL_NET_OPTIONAL_RECV_COMPLETION);
            first_recv = 0;
        }
        for (int k = 0; k < n; k++) {
            xfer_t *s = &x[nx++];
            *s = (xfer_t){.len = lens[k], .peer = p, .msg = msg0 + k};
            s->buf = malloc(lens[k] ? lens[k] : 1);
            CHECK(s->buf);
            fill(s->buf, lens[k], rank, p, msg0 + k);
            CHECK_OK(api_isend(peers[p].send, s->buf, lens[k], rank, peers[p].send_mh, &s->req));
            CHECK(s->req != NULL);
        }
    }
    double end = now_s() + 60;
    for (int left = nx; left > 0;) {
        for (int i = 0; i < nx; i++) {
            if (x[i].done)
                continue;
            int done = 0, got = -1;
            CHECK_OK(NET(test)(x[i].req, &done, &got));
            if (!done)
                continue;
            x[i].done = 1;
            left--;
            if ((size_t)got != x[i].len)
                return fail(__LINE__, "%s %d with %d: test reported %d bytes, expected %zu",
                            x[i].is_recv ? "receive" : "send", x[i].msg, x[i].peer, got, x[i].len);
            if (x[i].is_recv) {
                if (verify(x[i].buf, x[i].len, x[i].peer, rank, x[i].msg))
                    return 1;
                for (size_t b = x[i].len; b < x[i].room; b++)
                    CHECK(x[i].buf[b] == 0xee); /* nothing written past the message */
            }
        }
        if (now_s() > end)
            return fail(__LINE__, "%d of %d transfers not done after 60 s", left, nx);
    }
    for (int i = 0; i < nx; i++)
        free(x[i].buf);
    return 0;
}

/*
 * The request window: NCCL_NET_MAX_REQUESTS receives from the next rank are
 * accepted, one more is refused (request NULL, success); then the peer sends
 * that many, all complete, and the refused one goes through.
 */
static int window(int rank, int size, peer_t *peers)
{
    int from = (rank + size - 1) % size, to = (rank + 1) % size;
    void *rreq[NCCL_NET_MAX_REQUESTS + 1], *sreq[NCCL_NET_MAX_REQUESTS + 1];
    static uint8_t rbuf[NCCL_NET_MAX_REQUESTS + 1][64], sbuf[NCCL_NET_MAX_REQUESTS + 1][64];

    for (int k = 0; k < NCCL_NET_MAX_REQUESTS; k++)
        CHECK_OK(api_irecv(peers[from].recv, rbuf[k], 64, from, peers[from].recv_mh, &rreq[k]));
    for (int k = 0; k < NCCL_NET_MAX_REQUESTS; k++)
        CHECK(rreq[k] != NULL);
    void *extra = (void *)(uintptr_t)0x1;
    CHECK_OK(api_irecv(peers[from].recv, rbuf[NCCL_NET_MAX_REQUESTS], 64, from, peers[from].recv_mh,
                       &extra));
    CHECK(extra == NULL); /* the window is full: try again */

    for (int k = 0; k <= NCCL_NET_MAX_REQUESTS; k++) {
        fill(sbuf[k], 64, rank, to, 1000 + k);
        sreq[k] = NULL;
    }
    /* sends: post what the window takes, complete, post the rest */
    int posted = 0;
    double end = now_s() + 30;
    while (posted <= NCCL_NET_MAX_REQUESTS) {
        CHECK_OK(
            api_isend(peers[to].send, sbuf[posted], 64, rank, peers[to].send_mh, &sreq[posted]));
        if (sreq[posted]) {
            posted++;
            continue;
        }
        /* window full: complete the oldest sends */
        for (int k = 0; k < posted; k++)
            if (sreq[k]) {
                int got;
                CHECK_OK(wait_req(sreq[k], &got, 30));
                CHECK(got == 64);
                sreq[k] = NULL;
            }
        CHECK(now_s() < end);
    }
    for (int k = 0; k < NCCL_NET_MAX_REQUESTS; k++) {
        int got;
        CHECK_OK(wait_req(rreq[k], &got, 30));
        CHECK(got == 64);
        if (verify(rbuf[k], 64, from, rank, 1000 + k))
            return 1;
    }
    CHECK_OK(api_irecv(peers[from].recv, rbuf[NCCL_NET_MAX_REQUESTS], 64, from, peers[from].recv_mh,
                       &extra));
    CHECK(extra != NULL);
    int got;
    CHECK_OK(wait_req(extra, &got, 30));
    CHECK(got == 64);
    if (verify(rbuf[NCCL_NET_MAX_REQUESTS], 64, from, rank, 1000 + NCCL_NET_MAX_REQUESTS))
        return 1;
    for (int k = 0; k <= NCCL_NET_MAX_REQUESTS; k++)
        if (sreq[k]) {
            CHECK_OK(wait_req(sreq[k], &got, 30));
            CHECK(got == 64);
        }
    return 0;
}

static int traffic_main(int rank, int size, void *arg)
{
    static const size_t sizes[] = {0, 1, 4 * KIB, 1 * MIB, 64 * MIB};
    static const size_t inflight[WINDOW] = {4 * KIB, 0, 1 * MIB, 1, 64 * KIB, 3 * KIB, 1 * MIB, 17};
    peer_t peers[MAX_RANKS] = {0};

    my_rank = rank;
    zc_harness_step("init");
    if (api_open())
        return 1;
    CHECK_OK(api_init());
    if (check_properties())
        return 1;
    if (connect_all(rank, size, peers))
        return 1;
    zc_harness_step("sizes");
    if (round_trip(rank, size, peers, sizes, 5, 0))
        return 1;
    zc_harness_step("in flight");
    for (int round = 0; round < 3; round++)
        if (round_trip(rank, size, peers, inflight, WINDOW, 100 + round * WINDOW))
            return 1;
    zc_harness_step("window");
    if (window(rank, size, peers))
        return 1;
    zc_harness_step("close");
    if (close_all(rank, size, peers))
        return 1;
    CHECK_OK(api_finalize());
    if (!use_v8)
        CHECK_OK(api.v12->finalize(NULL));
    CHECK(warn_lines == 0);
    return 0;
}

/* ---- threads: NCCL's service and progress threads at once ---- */

#define THREAD_ROUNDS 40
#define THREAD_SETUPS 10

typedef struct traffic_arg {
    int rank, size, result;
    peer_t *peers;
} traffic_arg_t;

static void *traffic_thread(void *arg)
{
    static const size_t lens[WINDOW] = {4 * KIB, 0, 256 * KIB, 1, 64 * KIB, 3 * KIB, 1 * MIB, 17};
    traffic_arg_t *t = arg;
    in_thread = 1;
    t->result = 0;
    for (int round = 0; round < THREAD_ROUNDS && !t->result; round++)
        t->result = round_trip(t->rank, t->size, t->peers, lens, WINDOW, 5000 + round * WINDOW);
    return NULL;
}

/*
 * While a second thread moves data on one set of connections (the progress
 * thread's isend/irecv/test), the main thread sets up and tears down other
 * connections again and again (the service thread's listen/connect/accept/
 * regMr/close), all on one plugin context.
 */
static int threads_main(int rank, int size, void *arg)
{
    peer_t data[MAX_RANKS] = {0};

    my_rank = rank;
    if (api_open())
        return 1;
    CHECK_OK(api_init());
    if (connect_all(rank, size, data))
        return 1;
    traffic_arg_t t = {.rank = rank, .size = size, .peers = data};
    pthread_t tid;
    CHECK(pthread_create(&tid, NULL, traffic_thread, &t) == 0);
    zc_harness_step("setups while data flows");
    for (int k = 0; k < THREAD_SETUPS; k++) {
        peer_t extra[MAX_RANKS] = {0};
        if (connect_all(rank, size, extra) || close_all(rank, size, extra)) {
            pthread_join(tid, NULL);
            return 1;
        }
    }
    pthread_join(tid, NULL);
    if (t.result)
        return 1;
    zc_harness_step("close");
    if (close_all(rank, size, data))
        return 1;
    CHECK_OK(api_finalize());
    CHECK(warn_lines == 0);
    return 0;
}

/* ---- args: one process, a connection to itself ---- */

/*
 * A plain socket connected to the listener of @p handle, or -1. Knows the
 * start of the handle listen writes: magic (8 bytes), id (4), family (2),
 * port (2, network order), address.
 */
static int stranger_fd(const uint8_t *handle)
{
    uint16_t family, port;
    memcpy(&family, handle + 12, 2);
    memcpy(&port, handle + 14, 2);
    if (family != AF_INET)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = port};
    memcpy(&a.sin_addr, handle + 16, 4);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

/* A stranger that connects and sends 64 bytes of junk. */
static int stranger(const uint8_t *handle)
{
    int fd = stranger_fd(handle);
    CHECK(fd >= 0);
    uint8_t junk[64];
    memset(junk, 0x77, sizeof(junk));
    CHECK(write(fd, junk, sizeof(junk)) == (ssize_t)sizeof(junk));
    close(fd);
    return 0;
}

static int args_main(int rank, int size, void *arg)
{
    my_rank = rank;
    if (api_open())
        return 1;
    CHECK_OK(api.v12->finalize(NULL)); /* before any init, as after a failed one */
    CHECK_RES(api.v12->init(NULL, 0, NULL, logger, NULL), ncclInternalError);
    CHECK_OK(api_init());
    if (check_properties())
        return 1;
    CHECK_RES(api.v12->devices(NULL), ncclInternalError);

    /* setNetAttr (NCCL 2.30 calls it on every connect retry and before transfers) */
    CHECK(api.v12->setNetAttr && api.v11->setNetAttr == api.v12->setNetAttr);
    ncclNetAttr_v12_t attr = {.sendCommAttr = {4, 1, 2, 1},
                              .recvCommAttr = {4, 1, 2, 1},
                              .op = NCCL_NET_ATTR_UNDEF,
                              .algo = NCCL_NET_ATTR_UNDEF,
                              .proto = NCCL_NET_ATTR_UNDEF};
    CHECK_OK(api.v12->setNetAttr(api.ctx, &attr));
    CHECK_OK(api.v12->setNetAttr(api.ctx, &attr)); /* the same again */
    attr.op = 1u << 4;                             /* AllReduce */
    attr.algo = 1u << 1;                           /* Ring */
    attr.proto = 1u << 2;                          /* Simple */
    CHECK_OK(api.v12->setNetAttr(api.ctx, &attr));
    CHECK_RES(api.v12->setNetAttr(NULL, &attr), ncclInternalError);
    CHECK_RES(api.v12->setNetAttr(api.ctx, NULL), ncclInternalError);

    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE], copy[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *sc = NULL, *rc = NULL, *req = NULL;
    CHECK_RES(api.v12->listen(NULL, 0, handle, &lc), ncclInternalError);
    CHECK_RES(api.v12->listen(api.ctx, 1, handle, &lc), ncclInternalError);
    CHECK_RES(api.v12->listen(api.ctx, -1, handle, &lc), ncclInternalError);
    CHECK_RES(api.v12->listen(api.ctx, 0, NULL, &lc), ncclInternalError);
    CHECK_RES(api.v12->listen(api.ctx, 0, handle, NULL), ncclInternalError);
    CHECK_OK(api.v12->listen(api.ctx, 0, handle, &lc));
    CHECK(lc != NULL);
    memcpy(copy, handle, sizeof(copy));

    /* a handle listen did not write */
    uint8_t junk[NCCL_NET_HANDLE_MAXSIZE];
    memset(junk, 0x5a, sizeof(junk));
    ncclNetDeviceHandle_v11_t *dh = NULL;
    CHECK_RES(api.v12->connect(api.ctx, 0, junk, &sc, &dh), ncclInternalError);
    CHECK_RES(api.v12->connect(api.ctx, 3, copy, &sc, &dh), ncclInternalError);
    CHECK_RES(api.v12->connect(NULL, 0, copy, &sc, &dh), ncclInternalError);
    CHECK_RES(api.v12->connect(api.ctx, 0, copy, NULL, &dh), ncclInternalError);
    CHECK_RES(api.v12->accept(NULL, &rc, &dh), ncclInternalError);
    CHECK_RES(api.v12->accept(lc, NULL, &dh), ncclInternalError);

    /* a stranger connects to the listener and sends junk: dropped with a WARN, not accepted */
    int warn_before = warn_lines;
    if (stranger(handle))
        return 1;
    double end = now_s() + 10;
    while (warn_lines == warn_before) {
        CHECK_OK(api.v12->accept(lc, &rc, &dh));
        CHECK(rc == NULL);
        CHECK(now_s() < end);
    }
    CHECK(strstr(warn_text, "not a zipccl peer") != NULL);

    /* a silent stranger holds one handshake slot; the real connector still gets in at once */
    int silent = stranger_fd(handle);
    CHECK(silent >= 0);
    warn_before = warn_lines;
    double start = now_s();
    while (!sc || !rc) {
        if (!sc)
            CHECK_OK(api.v12->connect(api.ctx, 0, copy, &sc, &dh));
        if (!rc)
            CHECK_OK(api.v12->accept(lc, &rc, &dh));
        CHECK(now_s() < start + 20);
    }
    CHECK(now_s() - start < 2.0); /* not after the stranger's ZIPCCL_TIMEOUT_S (5 s) */
    close(silent);
    CHECK_OK(api.v12->closeListen(lc));
    CHECK_RES(api.v12->closeListen(NULL), ncclInternalError);
    CHECK_RES(api.v12->closeListen(sc), ncclInternalError); /* not a listener */

    void *mh = NULL, *smh = NULL;
    static uint8_t buf[4096], sbuf[4096];
    CHECK_RES(api.v12->regMr(rc, buf, sizeof(buf), NCCL_PTR_CUDA, &mh), ncclInternalError);
    CHECK(warn_lines == warn_before + 1); /* says why */
    warn_before = warn_lines;
    CHECK_RES(api.v12->regMr(NULL, buf, sizeof(buf), NCCL_PTR_HOST, &mh), ncclInternalError);
    CHECK_RES(api.v12->regMr(rc, buf, sizeof(buf), NCCL_PTR_HOST, NULL), ncclInternalError);
    CHECK_OK(api.v12->regMr(rc, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
    CHECK_OK(api.v12->regMrDmaBuf(sc, sbuf, sizeof(sbuf), NCCL_PTR_HOST, 0, -1, &smh));
    CHECK_RES(api.v12->deregMr(rc, NULL), ncclInternalError);

    /* irecv: n != 1, NULL arrays, NULL request */
    void *data[2] = {buf, buf + 2048};
    size_t sizes[2] = {2048, 2048};
    int tags[2] = {7, 7};
    void *mhs[2] = {mh, mh};
    CHECK_RES(api.v12->irecv(rc, 2, data, sizes, tags, mhs, NULL, &req), ncclInternalError);
    CHECK(warn_lines == warn_before + 1);
    CHECK_RES(api.v12->irecv(rc, 0, data, sizes, tags, mhs, NULL, &req), ncclInternalError);
    CHECK_RES(api.v12->irecv(NULL, 1, data, sizes, tags, mhs, NULL, &req), ncclInternalError);
    CHECK_RES(api.v12->irecv(sc, 1, data, sizes, tags, mhs, NULL, &req), ncclInternalError);
    CHECK_RES(api.v12->irecv(rc, 1, NULL, sizes, tags, mhs, NULL, &req), ncclInternalError);
    CHECK_RES(api.v12->irecv(rc, 1, data, NULL, tags, mhs, NULL, &req), ncclInternalError);
    CHECK_RES(api.v12->irecv(rc, 1, data, sizes, NULL, mhs, NULL, &req), ncclInternalError);
    CHECK_RES(api.v12->irecv(rc, 1, data, sizes, tags, mhs, NULL, NULL), ncclInternalError);
    CHECK_RES(api.v12->isend(NULL, sbuf, 10, 7, smh, NULL, &req), ncclInternalError);
    CHECK_RES(api.v12->isend(rc, sbuf, 10, 7, smh, NULL, &req), ncclInternalError);
    CHECK_RES(api.v12->isend(sc, NULL, 10, 7, smh, NULL, &req), ncclInternalError);
    CHECK_RES(api.v12->isend(sc, sbuf, 10, 7, smh, NULL, NULL), ncclInternalError);
    CHECK_RES(api.v12->isend(sc, sbuf, 10, 7, junk, NULL, &req), ncclInternalError);
    CHECK_RES(api.v12->test(NULL, &(int){0}, NULL), ncclInternalError);

    /* a message to itself: tag 7, 3000 bytes into 4096 */
    void *rreq = (void *)(uintptr_t)0x1, *sreq = NULL;
    fill(sbuf, 3000, 0, 0, 9);
    sizes[0] = sizeof(buf);
    CHECK_OK(api.v12->irecv(rc, 1, data, sizes, tags, mhs, NULL, &rreq));
    CHECK(rreq != NULL && rreq != (void *)(uintptr_t)0x1);
    CHECK_OK(api.v12->isend(sc, sbuf, 3000, 7, smh, NULL, &sreq));
    CHECK(sreq != NULL);
    CHECK_RES(api.v12->test(rreq, NULL, NULL), ncclInternalError);
    int got = -1;
    CHECK_OK(wait_req(sreq, &got, 10));
    CHECK(got == 3000);
    got = -1;
    CHECK_OK(wait_req(rreq, &got, 10));
    CHECK(got == 3000);
    if (verify(buf, 3000, 0, 0, 9))
        return 1;

    /* a message larger than the receive: ncclInternalError, said once */
    warn_before = warn_lines;
    sizes[0] = 16;
    CHECK_OK(api.v12->irecv(rc, 1, data, sizes, tags, mhs, NULL, &rreq));
    CHECK_OK(api.v12->isend(sc, sbuf, 64, 7, smh, NULL, &sreq));
    CHECK_RES(wait_req(rreq, &got, 10), ncclInternalError);
    CHECK(warn_lines == warn_before + 1);
    CHECK_OK(wait_req(sreq, &got, 10));

    void *freq = (void *)(uintptr_t)0x1;
    int fsize = 3000;
    CHECK_OK(api.v12->iflush(rc, 1, data, &fsize, mhs, &freq));
    CHECK(freq == NULL); /* host memory: nothing to flush */
    CHECK_RES(api.v12->iflush(NULL, 1, data, &fsize, mhs, &freq), ncclInternalError);

    CHECK_OK(api.v12->deregMr(rc, mh));
    CHECK_OK(api.v12->deregMr(sc, smh));
    CHECK_RES(api.v12->closeSend(rc), ncclInternalError);
    CHECK_RES(api.v12->closeRecv(sc), ncclInternalError);
    CHECK_RES(api.v12->closeSend(NULL), ncclInternalError);
    CHECK_OK(api.v12->closeSend(sc));
    CHECK_OK(api.v12->closeRecv(rc));

    /* a listener closed without accepting: connecting to it fails, does not hang */
    CHECK_OK(api.v12->listen(api.ctx, 0, handle, &lc));
    CHECK_OK(api.v12->closeListen(lc));
    ncclResult_t res;
    sc = NULL;
    end = now_s() + 10;
    while ((res = api.v12->connect(api.ctx, 0, handle, &sc, &dh)) == ncclSuccess && !sc)
        CHECK(now_s() < end);
    CHECK(res == ncclRemoteError && sc == NULL);

    /* the v8 entry points that differ: int sizes */
    CHECK_OK(api.v8->init(logger));
    CHECK_OK(api.v8->listen(0, handle, &lc));
    sc = rc = NULL;
    end = now_s() + 20;
    while (!sc || !rc) {
        if (!sc)
            CHECK_OK(api.v8->connect(0, handle, &sc, &dh));
        if (!rc)
            CHECK_OK(api.v8->accept(lc, &rc, &dh));
        CHECK(now_s() < end);
    }
    CHECK_OK(api.v8->closeListen(lc));
    CHECK_RES(api.v8->isend(sc, sbuf, -1, 7, NULL, &sreq), ncclInternalError);
    CHECK_RES(api.v8->isend(sc, sbuf, (1 << 30) + 1, 7, NULL, &sreq), ncclInternalError);
    int isizes[1] = {-5};
    CHECK_RES(api.v8->irecv(rc, 1, data, isizes, tags, NULL, &rreq), ncclInternalError);
    CHECK_OK(api.v8->closeSend(sc));
    CHECK_OK(api.v8->closeRecv(rc));

    CHECK_OK(api.v12->finalize(api.ctx));
    return 0;
}

/* ---- config: init in a fresh process (the configuration is read once per process) ---- */

static int config_main(int rank, int size, void *arg)
{
    const char *want = arg;
    my_rank = rank;
    if (api_open())
        return 1;
    ncclResult_t res = api_init();
    if (strcmp(want, "invalid-usage") == 0) {
        CHECK(res == ncclInvalidUsage);
        CHECK(warn_lines >= 1);
        CHECK(strstr(warn_text, "ZIPCCL_TIMEOUT_S") != NULL);
    } else if (strcmp(want, "no-device") == 0) {
        CHECK(res == ncclSystemError);
        CHECK(warn_lines >= 1);
        CHECK(strstr(warn_text, "nosuchif") != NULL);
    } else if (strcmp(want, "list") == 0) {
        /* the devices of this environment's ZIPCCL_NET_IFNAME, for ifname_default.sh */
        CHECK_OK(res);
        int ndev = 0;
        CHECK_OK(api.v12->devices(&ndev));
        for (int d = 0; d < ndev; d++) {
            ncclNetProperties_v12_t p;
            CHECK_OK(api.v12->getProperties(d, &p));
            printf("device %s\n", p.name);
        }
        fflush(stdout);
        CHECK_OK(api.v12->finalize(api.ctx));
    } else if (strcmp(want, "prefix") == 0) {
        /* "nosuchif,l": a list of name prefixes; only lo starts with one */
        CHECK_OK(res);
        ncclNetProperties_v12_t p;
        int ndev = 0;
        CHECK_OK(api.v12->devices(&ndev));
        CHECK(ndev == 1);
        CHECK_OK(api.v12->getProperties(0, &p));
        CHECK(strcmp(p.name, "lo") == 0);
        CHECK_OK(api.v12->finalize(api.ctx));
    } else {
        /* "^nosuchif": every interface; loopback only when it is the only one */
        CHECK_OK(res);
        ncclNetProperties_v12_t p[16];
        int ndev = 0;
        CHECK_OK(api.v12->devices(&ndev));
        CHECK(ndev >= 1 && ndev <= 16);
        for (int d = 0; d < ndev; d++) {
            CHECK_OK(api.v12->getProperties(d, &p[d]));
            CHECK(strcmp(p[d].name, "lo") != 0 || ndev == 1);
            CHECK(p[d].speed > 0 && p[d].vProps.ndevs == 1 && p[d].vProps.devs[0] == d);
            for (int e = 0; e < d; e++)
                CHECK(p[e].guid != p[d].guid && strcmp(p[e].name, p[d].name) != 0);
        }
        /* the same list, in the same order, every time */
        ncclNetProperties_v12_t again;
        for (int d = 0; d < ndev; d++) {
            CHECK_OK(api.v12->getProperties(d, &again));
            CHECK(strcmp(again.name, p[d].name) == 0 && again.guid == p[d].guid);
        }
        CHECK_OK(api.v12->finalize(api.ctx));
    }
    if (res != ncclSuccess)
        CHECK_OK(api.v12->finalize(NULL)); /* what NCCL does after a failed init */
    return 0;
}

/* ---- kill: one side dies while messages flow ---- */

#define KILL_MSG (256 * KIB)
#define KILL_LIMIT_S 20.0

static int kill_main(int rank, int size, void *arg)
{
    int killed_sends = *(int *)arg; /* 1: the sender (rank 1) dies; 0: the receiver */
    peer_t peers[2] = {0};
    int peer = 1 - rank;

    my_rank = rank;
    if (api_open())
        return 1;
    CHECK_OK(api_init());
    if (connect_all(rank, size, peers))
        return 1;
    int sender = rank == 1;
    int victim = killed_sends ? 1 : 0;
    uint8_t *bufs = malloc((size_t)WINDOW * KILL_MSG);
    void *reqs[WINDOW] = {0};
    CHECK(bufs);
    memset(bufs, 0x42, (size_t)WINDOW * KILL_MSG);
    zc_harness_step(rank == victim ? "stream (victim)" : "stream");

    double start = now_s();
    long completed = 0;
    for (;;) {
        for (int k = 0; k < WINDOW; k++) {
            ncclResult_t res = ncclSuccess;
            if (!reqs[k]) {
                res = sender ? api_isend(peers[peer].send, bufs + (size_t)k * KILL_MSG, KILL_MSG,
                                         rank, peers[peer].send_mh, &reqs[k])
                             : api_irecv(peers[peer].recv, bufs + (size_t)k * KILL_MSG, KILL_MSG,
                                         peer, peers[peer].recv_mh, &reqs[k]);
            } else {
                int done = 0;
                res = NET(test)(reqs[k], &done, NULL);
                if (res == ncclSuccess && done) {
                    reqs[k] = NULL;
                    completed++;
                }
            }
            if (res != ncclSuccess) {
                /* the survivor: the error must be the peer's, said in a WARN naming it */
                fprintf(stderr, "rank %d: error %d after %.1f s and %ld messages\n", rank, (int)res,
                        now_s() - start, completed);
                CHECK(rank != victim);
                CHECK(res == ncclRemoteError);
                CHECK(warn_lines >= 1);
                CHECK(strstr(warn_text, "127.0.0.1") != NULL);
                CHECK(completed > 0); /* it was mid-transfer */
                /* closing after a failure must not hang either */
                CHECK_OK(NET(closeSend)(peers[peer].send));
                CHECK_OK(NET(closeRecv)(peers[peer].recv));
                CHECK_OK(api_finalize());
                return 0;
            }
        }
        if (now_s() - start > KILL_LIMIT_S)
            return fail(__LINE__, "no error %.0f s into the stream (%ld messages)", KILL_LIMIT_S,
                        completed);
    }
}

/* ---- main ---- */

static char *make_dir(void)
{
    static char dir[] = "/tmp/zc-net-driver-XXXXXX";
    return mkdtemp(dir);
}

static void remove_dir(const char *dir)
{
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", dir);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: net_driver LIBRARY CASE [--v8]\n");
        return 2;
    }
    lib_path = argv[1];
    const char *name = argv[2];
    use_v8 = argc > 3 && strcmp(argv[3], "--v8") == 0;

    char *const env[] = {"ZIPCCL_NET_IFNAME=lo", "ZIPCCL_TIMEOUT_S=5", NULL};
    zc_harness_opts_t o = {.nranks = 2, .deadline_s = 90, .env = env};
    int rc;

    exchange_dir = make_dir();
    if (!exchange_dir) {
        perror("mkdtemp");
        return 1;
    }
    if (strcmp(name, "pair") == 0) {
        rc = zc_harness_run(&o, traffic_main, NULL);
    } else if (strcmp(name, "mesh") == 0) {
        o.nranks = 4;
        o.deadline_s = 150;
        rc = zc_harness_run(&o, traffic_main, NULL);
    } else if (strcmp(name, "threads") == 0) {
        rc = zc_harness_run(&o, threads_main, NULL);
    } else if (strcmp(name, "args") == 0) {
        o.nranks = 1;
        o.deadline_s = 60;
        rc = zc_harness_run(&o, args_main, NULL);
    } else if (strcmp(name, "config") == 0) {
        char *const bad_timeout[] = {"ZIPCCL_NET_IFNAME=lo", "ZIPCCL_TIMEOUT_S=0", NULL};
        char *const bad_ifname[] = {"ZIPCCL_NET_IFNAME=nosuchif", NULL};
        o.nranks = 1;
        o.deadline_s = 30;
        o.env = bad_timeout;
        rc = zc_harness_run(&o, config_main, "invalid-usage");
        char *const prefix[] = {"ZIPCCL_NET_IFNAME=nosuchif,l", NULL};
        char *const exclude[] = {"ZIPCCL_NET_IFNAME=^nosuchif", NULL};
        o.env = bad_ifname;
        rc |= zc_harness_run(&o, config_main, "no-device");
        o.env = prefix;
        rc |= zc_harness_run(&o, config_main, "prefix");
        o.env = exclude;
        rc |= zc_harness_run(&o, config_main, "exclude");
    } else if (strcmp(name, "list") == 0) {
        o.nranks = 1;
        o.deadline_s = 30;
        o.env = NULL; /* the caller's ZIPCCL_NET_IFNAME, or none */
        rc = zc_harness_run(&o, config_main, "list");
    } else if (strcmp(name, "kill-send") == 0 || strcmp(name, "kill-recv") == 0) {
        static int killed_sends;
        killed_sends = strcmp(name, "kill-send") == 0;
        o.kill_rank = killed_sends ? 1 : 0;
        o.kill_at_step = "stream (victim)";
        o.kill_after_s = 1.0;
        o.deadline_s = 60;
        rc = zc_harness_run(&o, kill_main, &killed_sends);
    } else {
        fprintf(stderr, "net_driver: unknown case %s\n", name);
        rc = 2;
    }
    remove_dir(exchange_dir);
    return rc == 0 ? 0 : 1;
}
