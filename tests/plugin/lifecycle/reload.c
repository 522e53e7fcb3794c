/*
 * reload: the per-communicator lifecycle of NCCL 2.30 (addendum section 4),
 * in one process, on loopback.
 *
 *   reload PLUGIN_PATH [CYCLES]
 *
 * unload phase (CYCLES, default 100): each cycle is one communicator's life as
 * NCCL runs it with NCCL_NET_PLUGIN_REF_COUNT=0: dlopen; net init, CollNet init
 * (the same commId), devices, getProperties, tuner init; a net connection of
 * the process to itself with setNetAttr and a 64 KiB message; a 1-node CollNet
 * all-reduce; every close; tuner, net and CollNet finalize; dlclose, after
 * which the library must be gone (dlopen RTLD_NOLOAD fails), and its next
 * dlopen starts from scratch. Open file descriptors, threads and resident
 * memory are printed at cycles 1, 10, 25, 50, 75 and CYCLES; from cycle 10
 * (allocator and loader caches warm) to the last, descriptors and threads
 * must not change and memory must grow by less than 64 KiB a cycle on
 * average (a leaked UCP context or worker is megabytes).
 *
 * mapped phase: the library held open (as NCCL's tuner's own dlopen holds it,
 * or NCCL_NET_PLUGIN_REF_COUNT=1), two communicators at once: A and B inited,
 * A finalized while B still moves a message; after the last finalize the next
 * init loads the state afresh, as after a reload: a ZIPCCL_TIMEOUT_S set
 * in between is read (0 makes init fail with ncclInvalidUsage), and with it
 * unset init works again.
 */
#include "plugin/nccl/nccl_abi.h"

#include <dirent.h>
#include <dlfcn.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define FAIL(...)                                                                                  \
    do {                                                                                           \
        fprintf(stderr, "reload: line %d: ", __LINE__);                                            \
        fprintf(stderr, __VA_ARGS__);                                                              \
        fputc('\n', stderr);                                                                       \
        return 1;                                                                                  \
    } while (0)
#define CHECK(cond)                                                                                \
    do {                                                                                           \
        if (!(cond))                                                                               \
            FAIL("check failed: %s", #cond);                                                       \
    } while (0)
#define CHECK_OK(expr)                                                                             \
    do {                                                                                           \
        ncclResult_t r_ = (expr);                                                                  \
        if (r_ != ncclSuccess)                                                                     \
            FAIL("%s returned %d", #expr, (int)r_);                                                \
    } while (0)

#define MSG_BYTES (64u << 10)

static const char *plugin_path;
static int v11_only;

static void logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                   const char *fmt, ...)
{
    (void)flags;
    (void)file;
    (void)line;
    if (level > NCCL_LOG_WARN)
        return;
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "reload: NCCL WARN ");
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

static int count_dir(const char *path)
{
    DIR *d = opendir(path);
    int n = 0;
    if (!d)
        return -1;
    for (struct dirent *e; (e = readdir(d));)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the DIR's own descriptor, or the reading thread: counted once */
}

static long rss_kib(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f)
        return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
        resident = -1;
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

typedef struct lib {
    void *dl;
    const ncclNet_v12_t *net;
    const ncclCollNet_v12_t *coll;
    const ncclTuner_v6_t *tuner;
} lib_t;

static int lib_open(lib_t *l)
{
    l->dl = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL);
    if (!l->dl)
        FAIL("dlopen %s: %s", plugin_path, dlerror());
    /* ZC_TEST_TABLE=v11: 2.28's tables (same slots; no rail in properties), no tuner */
    const char *table = getenv("ZC_TEST_TABLE");
    v11_only = table && strcmp(table, "v11") == 0;
    l->net = dlsym(l->dl, v11_only ? "ncclNetPlugin_v11" : "ncclNetPlugin_v12");
    l->coll = dlsym(l->dl, v11_only ? "ncclCollNetPlugin_v11" : "ncclCollNetPlugin_v12");
    l->tuner = v11_only ? NULL : dlsym(l->dl, "ncclTunerPlugin_v6");
    CHECK(l->net && l->coll && (l->tuner || v11_only));
    return 0;
}

/* A net connection of this process to itself, a hint, one message each way checked. */
static int net_self(const lib_t *l, void *ctx)
{
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *sc = NULL, *rc = NULL, *smh = NULL, *rmh = NULL;
    ncclNetDeviceHandle_v12_t *dh = NULL;
    static uint8_t out[MSG_BYTES], in[MSG_BYTES];

    CHECK_OK(l->net->listen(ctx, 0, handle, &lc));
    for (int i = 0; !sc || !rc; i++) {
        ncclNetAttr_v12_t attr = {{1, 1, 1, 1}, {1, 1, 1, 1}, ~0u, ~0u, ~0u};
        CHECK(l->net->setNetAttr || v11_only); /* NCCL checks for NULL; ours takes hints */
        if (l->net->setNetAttr)
            CHECK_OK(l->net->setNetAttr(ctx, &attr)); /* NCCL: before every connect retry */
        if (!sc)
            CHECK_OK(l->net->connect(ctx, 0, handle, &sc, &dh));
        if (!rc)
            CHECK_OK(l->net->accept(lc, &rc, &dh));
        CHECK(i < 1000000);
    }
    CHECK_OK(l->net->regMr(sc, out, sizeof(out), NCCL_PTR_HOST, &smh));
    CHECK_OK(l->net->regMr(rc, in, sizeof(in), NCCL_PTR_HOST, &rmh));
    for (size_t i = 0; i < sizeof(out); i++)
        out[i] = (uint8_t)(i * 7 + (uintptr_t)ctx);
    memset(in, 0, sizeof(in));
    void *sreq = NULL, *rreq = NULL, *data = in;
    size_t size = sizeof(in);
    int tag = 7, sdone = 0, rdone = 0, sizes[1] = {0};
    while (!rreq)
        CHECK_OK(l->net->irecv(rc, 1, &data, &size, &tag, &rmh, NULL, &rreq));
    while (!sreq)
        CHECK_OK(l->net->isend(sc, out, sizeof(out), tag, smh, NULL, &sreq));
    while (!sdone || !rdone) {
        if (!sdone)
            CHECK_OK(l->net->test(sreq, &sdone, NULL));
        if (!rdone)
            CHECK_OK(l->net->test(rreq, &rdone, sizes));
    }
    CHECK(sizes[0] == (int)sizeof(out) && memcmp(in, out, sizeof(in)) == 0);
    CHECK_OK(l->net->deregMr(sc, smh));
    CHECK_OK(l->net->deregMr(rc, rmh));
    CHECK_OK(l->net->closeSend(sc));
    CHECK_OK(l->net->closeRecv(rc));
    CHECK_OK(l->net->closeListen(lc));
    return 0;
}

/* A CollNet of one node: listen, connect, one all-reduce, close. */
static int coll_one(const lib_t *l, void *ctx)
{
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
    void *lc = NULL, *cc = NULL, *mh = NULL, *req = NULL, *hs[1] = {handle};
    float buf[2 * 1024];
    int done = 0, bytes = 0;

    for (int i = 0; i < 1024; i++)
        buf[i] = (float)i;
    CHECK_OK(l->coll->listen(ctx, 0, handle, &lc));
    CHECK_OK(l->coll->connect(hs, 1, 0, lc, &cc));
    CHECK_OK(l->coll->closeListen(lc));
    CHECK_OK(l->coll->regMr(cc, buf, sizeof(buf), NCCL_PTR_HOST, &mh));
    CHECK_OK(l->coll->iallreduce(cc, buf, buf + 1024, 1024, ncclFloat32, ncclSum, mh, mh, &req));
    while (!done)
        CHECK_OK(l->coll->test(req, &done, &bytes));
    CHECK(bytes == 4096 && buf[1024 + 1000] == 1000.0f);
    CHECK_OK(l->coll->deregMr(cc, mh));
    CHECK_OK(l->coll->closeColl(cc));
    return 0;
}

/* One communicator's life, as NCCL 2.30 calls the plugin. */
static int communicator(const lib_t *l, uint64_t comm_id)
{
    void *nctx = NULL, *cctx = NULL, *tctx = NULL;
    ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    ncclNetProperties_v12_t props;
    ncclTunerConstants_v6_t *constants = calloc(1, sizeof(*constants));
    ncclNvlDomainInfo_v6_t nvl = {1, 1, 1};
    int ndev = 0;

    CHECK(constants);
    CHECK_OK(l->net->init(&nctx, comm_id, &cfg, logger, NULL));
    CHECK_OK(l->coll->init(&cctx, comm_id, logger));
    CHECK_OK(l->net->devices(&ndev));
    CHECK(ndev >= 1);
    CHECK_OK(l->net->getProperties(0, &props));
    CHECK(v11_only || props.railId == NCCL_NET_ID_UNDEF);
    if (l->tuner)
        CHECK_OK(l->tuner->init(&tctx, comm_id, 1, 1, logger, &nvl, constants));
    if (net_self(l, nctx) || coll_one(l, cctx))
        return 1;
    if (l->tuner)
        CHECK_OK(l->tuner->finalize(tctx));
    CHECK_OK(l->net->finalize(nctx));
    CHECK_OK(l->coll->finalize(cctx));
    free(constants);
    return 0;
}

static int unload_phase(int cycles)
{
    static const int marks[] = {1, 10, 25, 50, 75};
    int fd0 = 0, th0 = 0;
    long rss0 = 0;

    printf("reload: %d cycles of dlopen, init, traffic, finalize, dlclose\n", cycles);
    printf("%8s %8s %8s %10s\n", "cycle", "fds", "threads", "RSS KiB");
    for (int c = 1; c <= cycles; c++) {
        lib_t l;
        if (lib_open(&l) || communicator(&l, 0xc0ffee00u + (unsigned)c))
            FAIL("cycle %d", c);
        CHECK(dlclose(l.dl) == 0);
        void *still = dlopen(plugin_path, RTLD_NOW | RTLD_NOLOAD);
        if (still)
            FAIL("cycle %d: the library stayed loaded after dlclose", c);
        int fds = count_dir("/proc/self/fd"), threads = count_dir("/proc/self/task") + 1;
        long rss = rss_kib();
        int mark = c == cycles;
        for (size_t i = 0; i < sizeof(marks) / sizeof(marks[0]); i++)
            mark |= c == marks[i];
        if (mark)
            printf("%8d %8d %8d %10ld\n", c, fds, threads, rss);
        if (c == 10 || (cycles < 10 && c == 1)) {
            fd0 = fds;
            th0 = threads;
            rss0 = rss;
        }
        if (c == cycles) {
            int base = cycles < 10 ? 1 : 10;
            long per = cycles > base ? (rss - rss0) / (cycles - base) : 0;
            printf("reload: from cycle %d to %d: %+d fds, %+d threads, %+ld KiB RSS (%+ld KiB a "
                   "cycle)\n",
                   base, cycles, fds - fd0, threads - th0, rss - rss0, per);
            CHECK(fds == fd0 && threads == th0 && per < 64);
        }
    }
    fflush(stdout);
    return 0;
}

static int mapped_phase(void)
{
    lib_t l;
    void *a = NULL, *b = NULL;
    ncclNetCommConfig_v12_t cfg = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};

    if (lib_open(&l))
        return 1;
    void *hold = dlopen(plugin_path, RTLD_NOW | RTLD_LOCAL); /* the tuner's reference */
    CHECK(hold);
    CHECK_OK(l.net->init(&a, 0xa, &cfg, logger, NULL));
    CHECK_OK(l.net->init(&b, 0xb, &cfg, logger, NULL));
    CHECK(a && b && a != b);
    CHECK_OK(l.net->finalize(a));
    if (net_self(&l, b)) /* B's data path after A's finalize */
        return 1;
    CHECK_OK(l.net->finalize(b));

    /* the last finalize left nothing: the next init reads the configuration again */
    setenv("ZIPCCL_TIMEOUT_S", "0", 1);
    void *c = NULL;
    ncclResult_t res = l.net->init(&c, 0xc, &cfg, NULL, NULL);
    if (res != ncclInvalidUsage)
        FAIL("init with ZIPCCL_TIMEOUT_S=0 after the last finalize returned %d: the "
             "configuration of the earlier communicators was kept",
             (int)res);
    unsetenv("ZIPCCL_TIMEOUT_S");
    CHECK_OK(l.net->init(&c, 0xc, &cfg, logger, NULL));
    if (net_self(&l, c))
        return 1;
    CHECK_OK(l.net->finalize(c));
    CHECK(dlclose(hold) == 0 && dlclose(l.dl) == 0);
    printf("reload: mapped: two communicators at once, configuration read again after the last "
           "finalize\n");
    fflush(stdout);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s PLUGIN_PATH [CYCLES]\n", argv[0]);
        return 2;
    }
    plugin_path = argv[1];
    int cycles = argc == 3 ? atoi(argv[2]) : 100;
    if (cycles < 1)
        return 2;
    setenv("ZIPCCL_NET_IFNAME", "lo", 0);
    setenv("ZIPCCL_TIMEOUT_S", "20", 0);
    if (unload_phase(cycles) || mapped_phase())
        return 1;
    return 0;
}
