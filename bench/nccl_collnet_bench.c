/*
 * nccl_collnet_bench: throughput of the NCCL CollNet plugin's iallreduce per
 * codec, next to the raw path (ZIPCCL_COLLNET_CODEC=none) measured in the same
 * run, as NCCL drives it: N processes (node heads) on this host dlopen the
 * plugin, swap their listen handles and connect; each pass all-reduces a
 * region of f32 sums in chunks, posted in order with a window in flight.
 *
 *   nccl_collnet_bench PLUGIN_PATH [--ranks N] [--chunk SIZE] [--region SIZE]
 *                      [--window N] [--passes N] [--codecs none,qsgd,fp16,bf16]
 *                      [--tuner CHANNELS]
 *
 * --tuner CHANNELS: the sizes NCCL 2.30 would hand iallreduce for an
 * all-reduce of the region on CHANNELS CollNet Chain channels with one GPU per
 * node, without and with the plugin's tuner, in the same run: NCCL's own chunk
 * (calcCollChunking: min(256 KiB, NCCL_BUFFSIZE/8), halved while the region
 * holds fewer than 64, 8, 1 chunks per channel; addendum section 7.3) and the
 * one the plugin's ncclTunerPlugin_v6 getChunkSize returns for it (after a
 * CollNet init of the same commId, as NCCL calls them; ZIPCCL_TUNER_CHUNK,
 * capped at NCCL_BUFFSIZE/8). Each iallreduce carries CHANNELS chunks (one
 * group of up to 8 channels). --chunk is then ignored.
 *
 * Defaults: 4 ranks, chunks of 512 KiB, a 64 MiB region, 8 chunks in flight,
 * 5 timed passes after one warm-up pass. The figure per codec is the best pass
 * (rank 0's time between two barriers, which are themselves all-reduces of 4
 * bytes through the plugin); GB/s are 10^9 bytes of the region per second.
 * Bytes on the wire are rank 0's, from the statistics zipccl writes when the
 * collComm closes (ZIPCCL_STATS_FILE), per pass. ZIPCCL_* variables other than
 * the codec reach every rank (ZIPCCL_NET_IFNAME is lo unless set).
 *
 * On one host all heads share its cores and memory bandwidth, and loopback is
 * much faster than a network: the speed ratio here is the codecs' CPU cost, the
 * wire ratio is what a network would carry less.
 */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

#include "bench_size.h"
#include "plugin/nccl/nccl_abi.h"

#define MAX_RANKS 16
#define MAX_CODECS 4

typedef struct options {
    const char *plugin;
    int ranks, window, passes, tuner_channels;
    size_t chunk, region;
    const char *codecs[MAX_CODECS];
    int ncodecs;
} options_t;

typedef struct result {
    double best_s;
    double wire_bytes; /* rank 0's per pass */
    int ok;
} result_t;

static double now_s(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static void quiet_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                         const char *fmt, ...)
{
    (void)flags;
    (void)file;
    (void)line;
    if (level <= NCCL_LOG_WARN) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "bench: plugin: ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
}

/* ---- one rank ------------------------------------------------------------------------------ */

static int publish(const char *dir, const char *name, int rank, const void *buf, size_t len)
{
    char tmp[512], path[512];
    snprintf(tmp, sizeof(tmp), "%s/.%s-%d", dir, name, rank);
    snprintf(path, sizeof(path), "%s/%s-%d", dir, name, rank);
    FILE *f = fopen(tmp, "wb");
    if (!f || fwrite(buf, 1, len, f) != len || fclose(f) != 0)
        return -1;
    return rename(tmp, path);
}

static int collect(const char *dir, const char *name, int rank, void *buf, size_t len)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s-%d", dir, name, rank);
    for (double t0 = now_s(); now_s() - t0 < 60;) {
        int fd = open(path, O_RDONLY);
        if (fd >= 0) {
            ssize_t got = read(fd, buf, len);
            close(fd);
            if (got == (ssize_t)len)
                return 0;
        }
        usleep(2000);
    }
    return -1;
}

typedef struct head {
    const ncclCollNet_v12_t *cn;
    void *cc, *mh;
    uint8_t *send, *recv;
    int token[2]; /* barrier buffers */
} head_t;

/* Posts @p n chunks in order with @p window in flight; tests them in order. */
static int run_chunks(head_t *h, size_t n, size_t chunk, int window, uint8_t *send, uint8_t *recv)
{
    void *reqs[window];
    size_t posted = 0, completed = 0;
    while (completed < n) {
        while (posted < n && posted - completed < (size_t)window) {
            void *req = NULL;
            if (h->cn->iallreduce(h->cc, send + posted * chunk, recv + posted * chunk,
                                  chunk / sizeof(float), ncclFloat32, ncclSum, h->mh, h->mh,
                                  &req) != ncclSuccess)
                return -1;
            if (!req)
                break;
            reqs[posted++ % (size_t)window] = req;
        }
        int done = 0, size = 0;
        if (h->cn->test(reqs[completed % (size_t)window], &done, &size) != ncclSuccess)
            return -1;
        if (done)
            completed++;
        else
            sched_yield(); /* ranks may outnumber cores: let the one with work run */
    }
    return 0;
}

static int barrier(head_t *h)
{
    return run_chunks(h, 1, sizeof(h->token[0]), 1, (uint8_t *)&h->token[0],
                      (uint8_t *)&h->token[1]);
}

static int rank_main(const options_t *o, int rank, const char *dir, int pipe_fd)
{
    void *lib = dlopen(o->plugin, RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "bench: dlopen %s: %s\n", o->plugin, dlerror());
        return 1;
    }
    head_t h = {.cn = dlsym(lib, "ncclCollNetPlugin_v12")};
    void *ctx, *lc;
    int ndev;
    uint8_t handle[NCCL_NET_HANDLE_MAXSIZE];
    static uint8_t all[MAX_RANKS][NCCL_NET_HANDLE_MAXSIZE];
    void *handles[MAX_RANKS];

    if (!h.cn || h.cn->init(&ctx, 1, quiet_logger) != ncclSuccess ||
        h.cn->devices(&ndev) != ncclSuccess || ndev < 1 ||
        h.cn->listen(ctx, 0, handle, &lc) != ncclSuccess)
        return 1;
    if (publish(dir, "handle", rank, handle, sizeof(handle)) != 0)
        return 1;
    for (int r = 0; r < o->ranks; r++) {
        if (collect(dir, "handle", r, all[r], sizeof(all[r])) != 0)
            return 1;
        handles[r] = all[r];
    }
    if (h.cn->connect(handles, o->ranks, rank, lc, &h.cc) != ncclSuccess)
        return 1;
    h.cn->closeListen(lc);

    /* one region: send half, receive half, registered once */
    uint8_t *region = aligned_alloc(4096, 2 * o->region);
    if (!region)
        return 1;
    h.send = region;
    h.recv = region + o->region;
    float *x = (float *)h.send;
    uint64_t s = 0x9e3779b97f4a7c15ull * (uint64_t)(rank + 1);
    for (size_t i = 0; i < o->region / sizeof(float); i++) {
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        x[i] = (float)((double)(s >> 11) * 0x1p-53 * 2 - 1); /* gradient-like, in [-1, 1) */
    }
    memset(h.recv, 0, o->region);
    if (h.cn->regMr(h.cc, region, 2 * o->region, NCCL_PTR_HOST, &h.mh) != ncclSuccess)
        return 1;

    size_t n = o->region / o->chunk;
    double best = INFINITY;
    for (int p = -1; p < o->passes; p++) {
        if (barrier(&h) != 0)
            return 1;
        double t0 = now_s();
        if (run_chunks(&h, n, o->chunk, o->window, h.send, h.recv) != 0 || barrier(&h) != 0)
            return 1;
        if (p >= 0)
            best = fmin(best, now_s() - t0);
    }
    h.cn->deregMr(h.cc, h.mh);
    h.cn->closeColl(h.cc); /* writes the statistics file */
    h.cn->finalize(ctx);
    free(region);
    if (rank == 0 && write(pipe_fd, &best, sizeof(best)) != (ssize_t)sizeof(best))
        return 1;
    return 0;
}

/* ---- one codec: N processes ---------------------------------------------------------------- */

static double wire_bytes_of(const char *path)
{
    char buf[4096];
    FILE *f = fopen(path, "r");
    if (!f)
        return NAN;
    size_t len = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[len] = '\0';
    const char *total = strstr(buf, "\"total\"");
    const char *w = total ? strstr(total, "\"bytes_wire\":") : NULL;
    return w ? strtod(w + strlen("\"bytes_wire\":"), NULL) : NAN;
}

static result_t run_codec(const options_t *o, const char *codec)
{
    result_t res = {.best_s = NAN, .wire_bytes = NAN};
    char dir[] = "/tmp/zc-collnet-bench-XXXXXX", stats[600], env_codec[64], env_stats[600];
    int fds[2];
    pid_t pids[MAX_RANKS];

    if (!mkdtemp(dir) || pipe(fds) != 0)
        return res;
    snprintf(stats, sizeof(stats), "%s/stats-0.json", dir);
    snprintf(env_codec, sizeof(env_codec), "%s", codec);
    snprintf(env_stats, sizeof(env_stats), "%s/stats-%%r.json", dir);
    for (int r = 0; r < o->ranks; r++) {
        pids[r] = fork();
        if (pids[r] == 0) {
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            close(fds[0]);
            setenv("ZIPCCL_COLLNET_CODEC", env_codec, 1);
            setenv("ZIPCCL_STATS_FILE", env_stats, 1);
            setenv("ZIPCCL_NET_IFNAME", "lo", 0);
            _exit(rank_main(o, r, dir, fds[1]));
        }
    }
    close(fds[1]);
    int failed = 0;
    double best = NAN;
    if (read(fds[0], &best, sizeof(best)) != (ssize_t)sizeof(best))
        failed = 1;
    close(fds[0]);
    for (int r = 0; r < o->ranks; r++) {
        int st;
        if (pids[r] < 0 || waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st))
            failed = 1;
    }
    if (!failed) {
        res.ok = 1;
        res.best_s = best;
        /* every pass moved the region once (the barriers' few bytes are noise) */
        res.wire_bytes = wire_bytes_of(stats) / (o->passes + 1);
    }
    char cmd[700];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    if (system(cmd) != 0)
        fprintf(stderr, "bench: could not remove %s\n", dir);
    return res;
}

/* ---- the chunk NCCL 2.30 picks, and the one the plugin's tuner asks for ------------------- */

static size_t nccl_buffsize(void)
{
    const char *s = getenv("NCCL_BUFFSIZE");
    long long v = s ? strtoll(s, NULL, 0) : 0;
    return v > 0 ? (size_t)v : (size_t)4 << 20;
}

/* calcCollChunking for CollNetChain, depth 1 (one GPU per node), SIMPLE (addendum 7.3). */
static size_t nccl_chain_chunk(size_t bytes, int nch)
{
    size_t step = nccl_buffsize() / 8, chunk = step < (256u << 10) ? step : (256u << 10);
    while (bytes / ((size_t)nch * chunk) < 64 && chunk > 131072)
        chunk /= 2;
    while (bytes / ((size_t)nch * chunk) < 8 && chunk > 65536)
        chunk /= 2;
    while (bytes / ((size_t)nch * chunk) < 1 && chunk > 32768)
        chunk /= 2;
    return chunk / 512 * 512;
}

/* What the plugin's tuner v6 makes of NCCL's @p chunk; 0 when it cannot be asked. */
static size_t tuner_chunk(const options_t *o, size_t chunk)
{
    void *lib = dlopen(o->plugin, RTLD_NOW | RTLD_LOCAL);
    const ncclCollNet_v12_t *cn = lib ? dlsym(lib, "ncclCollNetPlugin_v12") : NULL;
    const ncclTuner_v6_t *tuner = lib ? dlsym(lib, "ncclTunerPlugin_v6") : NULL;
    void *cctx = NULL, *tctx = NULL;
    static ncclTunerConstants_v6_t constants;
    ncclNvlDomainInfo_v6_t nvl = {o->ranks, 1, 1};
    size_t out = 0;

    if (!cn || !tuner)
        return 0;
    setenv("ZIPCCL_NET_IFNAME", "lo", 0);
    if (cn->init(&cctx, 0xbe7c, quiet_logger) == ncclSuccess &&
        tuner->init(&tctx, 0xbe7c, (size_t)o->ranks, (size_t)o->ranks, quiet_logger, &nvl,
                    &constants) == ncclSuccess) {
        out = chunk;
        if (tuner->getChunkSize(tctx, ncclFuncAllReduce, o->region, NCCL_ALGO_COLLNET_CHAIN,
                                NCCL_PROTO_SIMPLE, o->tuner_channels, &out) != ncclSuccess)
            out = 0;
        /* what NCCL does with it: clamp to NCCL_BUFFSIZE/8, round down to 512 */
        if (out > nccl_buffsize() / 8)
            out = nccl_buffsize() / 8;
        out = out / 512 * 512;
        tuner->finalize(tctx);
    }
    if (cctx)
        cn->finalize(cctx);
    dlclose(lib);
    return out;
}

/* One table: raw first (the baseline), then the codecs, at o->chunk per iallreduce. */
static int run_table(const options_t *o, double gbs_p[MAX_CODECS], double wire_p[MAX_CODECS])
{
    result_t raw = run_codec(o, "none");
    if (!raw.ok) {
        fprintf(stderr, "bench: the raw run failed\n");
        return 1;
    }
    printf("%-6s %10s %10s %10s %14s %12s %12s\n", "codec", "KiB/call", "ms/pass", "GB/s",
           "wire MiB/pass", "speed ratio", "wire ratio");
    int rc = 0;
    for (int c = 0; c < o->ncodecs; c++) {
        result_t r = strcmp(o->codecs[c], "none") == 0 ? raw : run_codec(o, o->codecs[c]);
        if (!r.ok) {
            printf("%-6s failed\n", o->codecs[c]);
            rc = 1;
            continue;
        }
        gbs_p[c] = (double)o->region / r.best_s * 1e-9;
        wire_p[c] = raw.wire_bytes / r.wire_bytes;
        printf("%-6s %10zu %10.2f %10.3f %14.2f %12.2f %12.2f\n", o->codecs[c], o->chunk >> 10,
               r.best_s * 1e3, gbs_p[c], r.wire_bytes / (1 << 20), raw.best_s / r.best_s,
               wire_p[c]);
        fflush(stdout);
    }
    return rc;
}

int main(int argc, char **argv)
{
    options_t o = {.ranks = 4, .window = 8, .passes = 5, .chunk = 512u << 10, .region = 64u << 20};
    static const char *const defaults[] = {"none", "qsgd", "fp16", "bf16"};

    if (argc < 2 || argv[1][0] == '-') {
        fprintf(stderr,
                "usage: %s PLUGIN_PATH [--ranks N] [--chunk SIZE] [--region SIZE] "
                "[--window N] [--passes N] [--codecs LIST] [--tuner CHANNELS]\n",
                argv[0]);
        return 2;
    }
    o.plugin = argv[1];
    char *codec_list = NULL;
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--ranks"))
            o.ranks = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--chunk"))
            o.chunk = bench_parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--region"))
            o.region = bench_parse_size(argv[i + 1]);
        else if (!strcmp(argv[i], "--window"))
            o.window = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--passes"))
            o.passes = atoi(argv[i + 1]);
        else if (!strcmp(argv[i], "--codecs"))
            codec_list = argv[i + 1];
        else if (!strcmp(argv[i], "--tuner"))
            o.tuner_channels = atoi(argv[i + 1]);
        else {
            fprintf(stderr, "bench: unknown option %s\n", argv[i]);
            return 2;
        }
    }
    if (o.ranks < 2 || o.ranks > MAX_RANKS || o.window < 1 || o.passes < 1 ||
        o.chunk < sizeof(float) || o.chunk % sizeof(float) || o.region < o.chunk ||
        o.region % o.chunk) {
        fprintf(stderr,
                "bench: need 2..%d ranks, a window and passes >= 1, and a region that is "
                "a multiple of a chunk of whole floats\n",
                MAX_RANKS);
        return 2;
    }
    if (codec_list) {
        for (char *t = strtok(codec_list, ","); t && o.ncodecs < MAX_CODECS; t = strtok(NULL, ","))
            o.codecs[o.ncodecs++] = t;
    } else {
        for (int c = 0; c < MAX_CODECS; c++)
            o.codecs[o.ncodecs++] = defaults[c];
    }
    if (o.tuner_channels < 0 || o.tuner_channels > 8) {
        fprintf(stderr, "bench: --tuner takes 1..8 channels\n");
        return 2;
    }
    if (o.tuner_channels == 0) {
        printf("nccl_collnet_bench: %d ranks, %zu KiB chunks, %zu MiB region, window %d, best of "
               "%d passes\n",
               o.ranks, o.chunk >> 10, o.region >> 20, o.window, o.passes);
        double gbs[MAX_CODECS], wire[MAX_CODECS];
        return run_table(&o, gbs, wire);
    }

    /* NCCL's chunks against the tuner's, in this run */
    size_t nccl = nccl_chain_chunk(o.region, o.tuner_channels);
    size_t tuned = tuner_chunk(&o, nccl);
    if (tuned == 0) {
        fprintf(stderr, "bench: the plugin's tuner (ncclTunerPlugin_v6) could not be asked\n");
        return 1;
    }
    printf("nccl_collnet_bench: %d ranks, %zu MiB region, CollNet Chain on %d channels, window "
           "%d, best of %d passes; NCCL_BUFFSIZE %zu\n"
           "NCCL's chunk %zu KiB, the tuner's %zu KiB (each iallreduce carries %d of them)\n",
           o.ranks, o.region >> 20, o.tuner_channels, o.window, o.passes, nccl_buffsize(),
           nccl >> 10, tuned >> 10, o.tuner_channels);
    double gbs[2][MAX_CODECS] = {{0}}, wire[2][MAX_CODECS] = {{0}};
    size_t per_call[2] = {nccl * (size_t)o.tuner_channels, tuned * (size_t)o.tuner_channels};
    const char *label[2] = {"NCCL's chunks", "the tuner's chunks"};
    int rc = 0;
    for (int k = 0; k < 2; k++) {
        o.chunk = per_call[k];
        if (o.region % o.chunk) {
            fprintf(stderr, "bench: the region is not a multiple of %zu bytes\n", o.chunk);
            return 2;
        }
        printf("-- %s\n", label[k]);
        rc |= run_table(&o, gbs[k], wire[k]);
    }
    printf("%-6s %16s %16s\n", "codec", "GB/s tuner/NCCL", "wire tuner/NCCL");
    for (int c = 0; c < o.ncodecs; c++)
        printf("%-6s %16.2f %16.2f\n", o.codecs[c], gbs[1][c] / gbs[0][c], wire[1][c] / wire[0][c]);
    return rc;
}
