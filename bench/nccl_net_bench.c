/*
 * nccl_net_bench: point-to-point bandwidth through the NCCL net plugin
 * (libnccl-net-zipccl.so, driven as NCCL's proxy drives it) next to zipccl's
 * own UCX transport (transport/ucx) measured in the same run between the same
 * two processes, as a ratio.
 *
 *   nccl_net_bench [--lib PATH] [--sizes LIST] [--iters N] [--window N]
 *                  [--bytes SIZE]
 *
 * The program forks into rank 0 (sender) and rank 1 (receiver) before UCX
 * starts; they exchange the plugin's handles and the transport's worker
 * addresses over a socketpair. For every size, both paths run the same
 * pattern: rank 0 sends `msgs` messages (about --bytes, at least --window)
 * with at most --window in flight, rank 1 keeps --window receives posted and
 * acknowledges the last message with 8 bytes; that is one iteration, timed
 * on rank 0. Each figure is the median of --iters iterations (after one
 * warm-up), the two paths alternating per size so that both see the same
 * machine. ZIPCCL_NET_IFNAME defaults to lo here (both ranks on this host);
 * UCX_* variables reach both paths.
 *
 * ratio = plugin / transport: 1 means the plugin adds nothing to UCX.
 * GB/s are 10^9 bytes per second.
 */
#include "bench/pair.h"
#include "common/config.h"
#include "common/log.h"
#include "common/timer.h"
#include "plugin/nccl/nccl_abi.h"
#include "transport/ucx/ucx.h"

#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ZC_NET_PLUGIN_PATH
#define ZC_NET_PLUGIN_PATH "libnccl-net-zipccl.so"
#endif

#define MAX_SIZES 32
#define MAX_WINDOW 32

typedef struct options {
    const char *lib;
    size_t sizes[MAX_SIZES];
    int nsizes;
    int iters;
    int window;
    size_t bytes;
} options_t;

/* ---- the plugin ---- */

typedef struct plugin {
    const ncclNet_v11_t *net;
    void *ctx;
    void *send, *recv; /* rank 0: data out, acks in; rank 1: data in, acks out */
    void *send_mh, *recv_mh;
} plugin_t;

static void quiet_logger(ncclDebugLogLevel level, unsigned long flags, const char *file, int line,
                         const char *fmt, ...)
{
    if (level == NCCL_LOG_WARN) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "nccl_net_bench: plugin: ");
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
}

static int plugin_wait(plugin_t *p, void *req)
{
    int done = 0, size;
    uint64_t end = zc_time_ns() + 60000000000ull;
    while (!done) {
        if (p->net->test(req, &done, &size) != ncclSuccess)
            return -1;
        if (!done && zc_time_ns() > end) {
            fprintf(stderr, "nccl_net_bench: a plugin request is not done after 60 s\n");
            return -1;
        }
    }
    return 0;
}

/* Each rank listens once, the handles cross the socketpair, connect/accept until both are up. */
static int plugin_open(plugin_t *p, bench_pair_t *pc, const char *lib, uint8_t *buf, size_t len)
{
    void *h = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        fprintf(stderr, "nccl_net_bench: dlopen %s: %s\n", lib, dlerror());
        return -1;
    }
    p->net = dlsym(h, "ncclNetPlugin_v11");
    if (!p->net) {
        fprintf(stderr, "nccl_net_bench: %s has no ncclNetPlugin_v11\n", lib);
        return -1;
    }
    ncclNetCommConfig_v11_t config = {.trafficClass = NCCL_NET_TRAFFIC_CLASS_UNDEF};
    int ndev = 0;
    if (p->net->init(&p->ctx, 1, &config, quiet_logger, NULL) != ncclSuccess ||
        p->net->devices(&ndev) != ncclSuccess || ndev < 1) {
        fprintf(stderr, "nccl_net_bench: plugin init failed or found no device\n");
        return -1;
    }
    uint8_t mine[NCCL_NET_HANDLE_MAXSIZE], both[2 * NCCL_NET_HANDLE_MAXSIZE];
    void *listen;
    if (p->net->listen(p->ctx, 0, mine, &listen) != ncclSuccess ||
        bench_pair_allgather(pc, mine, sizeof(mine), both) != ZC_OK)
        return -1;
    uint8_t *theirs = both + (size_t)(1 - pc->rank) * NCCL_NET_HANDLE_MAXSIZE;
    ncclNetDeviceHandle_v11_t *dh = NULL;
    while (!p->send || !p->recv) {
        if (!p->send && p->net->connect(p->ctx, 0, theirs, &p->send, &dh) != ncclSuccess)
            return -1;
        if (!p->recv && p->net->accept(listen, &p->recv, &dh) != ncclSuccess)
            return -1;
    }
    if (p->net->closeListen(listen) != ncclSuccess ||
        p->net->regMr(p->send, buf, len, NCCL_PTR_HOST, &p->send_mh) != ncclSuccess ||
        p->net->regMr(p->recv, buf, len, NCCL_PTR_HOST, &p->recv_mh) != ncclSuccess)
        return -1;
    return 0;
}

static void plugin_close(plugin_t *p)
{
    p->net->deregMr(p->send, p->send_mh);
    p->net->deregMr(p->recv, p->recv_mh);
    p->net->closeSend(p->send);
    p->net->closeRecv(p->recv);
    p->net->finalize(p->ctx);
}

static int plugin_iter(plugin_t *p, int rank, size_t size, int msgs, int window, uint8_t *buf)
{
    void *req[MAX_WINDOW] = {0};
    uint64_t ack = 0;
    int tag = 1 - rank; /* NCCL's tag is the sender's rank */

    for (int i = 0; i < msgs; i++) {
        void **r = &req[i % window];
        if (*r && plugin_wait(p, *r))
            return -1;
        *r = NULL;
        while (!*r) { /* NULL: the plugin's window is full, try again */
            ncclResult_t res = rank == 0 ? p->net->isend(p->send, buf, size, 0, p->send_mh, NULL, r)
                                         : p->net->irecv(p->recv, 1, (void **)&buf, &size, &tag,
                                                         &p->recv_mh, NULL, r);
            if (res != ncclSuccess)
                return -1;
        }
    }
    for (int k = 0; k < window; k++)
        if (req[k] && plugin_wait(p, req[k]))
            return -1;
    void *ack_req = NULL;
    size_t ack_len = sizeof(ack);
    void *ack_buf = &ack;
    while (!ack_req) {
        ncclResult_t res =
            rank == 0
                ? p->net->irecv(p->recv, 1, &ack_buf, &ack_len, &tag, &p->recv_mh, NULL, &ack_req)
                : p->net->isend(p->send, &ack, sizeof(ack), 1, p->send_mh, NULL, &ack_req);
        if (res != ncclSuccess)
            return -1;
    }
    return plugin_wait(p, ack_req);
}

/* ---- the plan ---- */

static int compare_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), compare_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

typedef struct result {
    size_t size;
    int msgs;
    double plugin_gbs, transport_gbs;
} result_t;

/* What both ranks are given: the options and the results' array. */
typedef struct bench_args {
    const options_t *o;
    result_t *res;
} bench_args_t;

/* One rank (a bench_rank_fn); @p arg is a bench_args_t. */
static int run_rank(int rank, int fd, void *arg)
{
    const bench_args_t *a = arg;
    const options_t *o = a->o;
    result_t *res = a->res;
    zc_config_t cfg;
    bench_pair_t pc = {.fd = fd, .rank = rank};
    zc_bootstrap_t bs = {.ops = &bench_pair_ops, .ctx = &pc, .rank = rank, .size = 2};
    zc_ucx_comm_t *comm;
    plugin_t plugin = {0};
    size_t max = 8;

    if (zc_config_load(NULL, &cfg) != ZC_OK || zc_config_apply(&cfg) != ZC_OK)
        return 1;
    for (int i = 0; i < o->nsizes; i++)
        max = o->sizes[i] > max ? o->sizes[i] : max;
    uint8_t *buf = aligned_alloc(4096, (max + 4095) / 4096 * 4096);
    zc_ucx_req_t req[MAX_WINDOW];
    double *t_plugin = calloc((size_t)o->iters, sizeof(double));
    double *t_transport = calloc((size_t)o->iters, sizeof(double));
    if (!buf || !t_plugin || !t_transport) {
        fprintf(stderr, "nccl_net_bench: out of memory for %zu bytes\n", max);
        return 1;
    }
    memset(buf, rank + 1, max); /* no first-touch faults in timed runs */
    if (zc_ucx_comm_create(&cfg, &bs, &comm) != ZC_OK)
        return 1;
    if (plugin_open(&plugin, &pc, o->lib, buf, max)) {
        fprintf(stderr, "nccl_net_bench: rank %d: connecting through the plugin failed\n", rank);
        return 1;
    }

    for (int k = 0; k < o->nsizes; k++) {
        result_t *r = &res[k];
        r->size = o->sizes[k];
        size_t n = o->bytes / (r->size ? r->size : 1);
        r->msgs = n < (size_t)o->window ? o->window : n > 100000 ? 100000 : (int)n;
        for (int it = -1; it < o->iters; it++) { /* -1: warm-up */
            if (bench_pair_barrier(&pc) != ZC_OK)
                return 1;
            uint64_t t0 = zc_time_ns();
            if (plugin_iter(&plugin, rank, r->size, r->msgs, o->window, buf)) {
                fprintf(stderr, "nccl_net_bench: rank %d: plugin transfer of %zu bytes failed\n",
                        rank, r->size);
                return 1;
            }
            uint64_t t1 = zc_time_ns();
            if (bench_pair_barrier(&pc) != ZC_OK)
                return 1;
            uint64_t t2 = zc_time_ns();
            zc_status_t st = bench_pair_bw(comm, rank, r->size, r->msgs, o->window, buf, req);
            if (st != ZC_OK) {
                fprintf(stderr, "nccl_net_bench: rank %d: transport transfer of %zu bytes: %s\n",
                        rank, r->size, zc_status_string(st));
                return 1;
            }
            uint64_t t3 = zc_time_ns();
            if (it >= 0) {
                t_plugin[it] = (double)(t1 - t0) / 1e9;
                t_transport[it] = (double)(t3 - t2) / 1e9;
            }
        }
        double bytes = (double)r->size * r->msgs;
        r->plugin_gbs = bytes / median(t_plugin, o->iters) / 1e9;
        r->transport_gbs = bytes / median(t_transport, o->iters) / 1e9;
    }
    bench_pair_barrier(&pc);
    plugin_close(&plugin);
    zc_ucx_comm_destroy(comm);
    free(t_plugin);
    free(t_transport);
    free(buf);
    return 0;
}

/* ---- options, main ---- */

static int parse_size(const char *s, size_t *v)
{
    char *end;
    unsigned long long x = strtoull(s, &end, 10);
    if (end == s)
        return -1;
    if (*end == 'K' || *end == 'k')
        x <<= 10, end++;
    else if (*end == 'M' || *end == 'm')
        x <<= 20, end++;
    else if (*end == 'G' || *end == 'g')
        x <<= 30, end++;
    if (*end && strcmp(end, "iB") != 0 && strcmp(end, "B") != 0)
        return -1;
    *v = (size_t)x;
    return 0;
}

static int usage(void)
{
    fprintf(stderr, "usage: nccl_net_bench [--lib PATH] [--sizes 64KiB,1MiB,...] [--iters N]\n"
                    "                      [--window N (1..32)] [--bytes SIZE]\n");
    return 2;
}

int main(int argc, char **argv)
{
    options_t o = {.lib = ZC_NET_PLUGIN_PATH, .iters = 9, .window = 8, .bytes = 64u << 20};
    static const size_t defaults[] = {64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};

    for (size_t i = 0; i < sizeof(defaults) / sizeof(defaults[0]); i++)
        o.sizes[o.nsizes++] = defaults[i];
    for (int i = 1; i < argc; i++) {
        const char *arg = argv[i], *val = i + 1 < argc ? argv[i + 1] : NULL;
        if (!val)
            return usage();
        i++;
        if (strcmp(arg, "--lib") == 0) {
            o.lib = val;
        } else if (strcmp(arg, "--iters") == 0) {
            o.iters = atoi(val);
        } else if (strcmp(arg, "--window") == 0) {
            o.window = atoi(val);
        } else if (strcmp(arg, "--bytes") == 0) {
            if (parse_size(val, &o.bytes))
                return usage();
        } else if (strcmp(arg, "--sizes") == 0) {
            char list[512];
            snprintf(list, sizeof(list), "%s", val);
            o.nsizes = 0;
            for (char *t = strtok(list, ","); t && o.nsizes < MAX_SIZES; t = strtok(NULL, ","))
                if (parse_size(t, &o.sizes[o.nsizes++]))
                    return usage();
        } else {
            return usage();
        }
    }
    if (o.iters < 1 || o.window < 1 || o.window > MAX_WINDOW || o.nsizes < 1)
        return usage();
    setenv("ZIPCCL_NET_IFNAME", "lo", 0);

    result_t res[MAX_SIZES];
    bench_args_t args = {.o = &o, .res = res};
    if (bench_pair_fork("", run_rank, &args) != 0)
        return 1;

    const char *tls = getenv("UCX_TLS");
    printf("# p2p bandwidth, 2 processes on this host, window %d, median of %d iterations, "
           "UCX_TLS=%s\n",
           o.window, o.iters, tls ? tls : "default");
    printf("%12s %8s %14s %16s %8s\n", "size", "msgs", "plugin GB/s", "transport GB/s", "ratio");
    for (int k = 0; k < o.nsizes; k++)
        printf("%12zu %8d %14.3f %16.3f %8.3f\n", res[k].size, res[k].msgs, res[k].plugin_gbs,
               res[k].transport_gbs, res[k].plugin_gbs / res[k].transport_gbs);
    return 0;
}
