/*
 * transport_bench: point-to-point bandwidth and latency of the UCX transport
 * between two processes on this host, next to ucx_perftest measured in the
 * same run with the same UCX settings, as a ratio.
 *
 *   transport_bench [--sizes LIST] [--lat-sizes LIST] [--window N] [--reps N]
 *                   [--bytes SIZE] [--cpus A,B | --no-pin]
 *                   [--perftest PATH | --no-perftest] [--json]
 *
 * The program forks itself into rank 0 and rank 1 before UCX starts; they
 * exchange worker addresses over a socketpair (a two-rank bootstrap) and open a
 * zipccl communicator. Bandwidth is ucx_perftest's tag_bw pattern: rank 0 sends
 * `iters` messages of one size with at most `window` in flight, rank 1 keeps
 * `window` receives posted, then acknowledges the last with 8 bytes; one send
 * and one receive buffer. Latency is tag_lat's: a ping-pong, half the round
 * trip. Between the zipccl runs, rank 0 starts ucx_perftest as a server/client
 * pair on 127.0.0.1 with the same -t, -s, -n, -w and -O, and with -e when the
 * communicator uses UCX peer error handling (ZIPCCL_UCX_PEER_ERRORS, default
 * on): UCX 1.13 then picks the same transports for both. UCX_TLS and every
 * other UCX_* variable reach both. Rank 0 and the perftest client run on the
 * first CPU this process may use, rank 1 and the server on the second
 * (--cpus, --no-pin): on a small shared machine where the scheduler puts the
 * two busy-polling processes decides the figure more than anything measured.
 * Each figure is the best of --reps runs, the two alternating, so that both
 * see the same machine.
 *
 * ratio >= 1 means zipccl is at least as fast: zipccl/perftest for
 * bandwidth, perftest/zipccl for latency. GB/s are 10^9 bytes per second.
 */
#include "bench/pair.h"
#include "common/config.h"
#include "common/log.h"
#include "common/timer.h"
#include "transport/ucx/ucx.h"

#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define MAX_SIZES 32
#define TAG_DATA BENCH_PAIR_TAG_DATA

typedef struct options {
    size_t bw_sizes[MAX_SIZES], lat_sizes[MAX_SIZES];
    int n_bw, n_lat;
    int window;
    int reps;
    size_t bytes; /* bandwidth: about this much per run */
    const char *perftest;
    int json;
    int cpu[2]; /* rank 0 and the perftest client, rank 1 and the server; -1: not pinned */
} options_t;

/* ---- zipccl runs -------------------------------------------------------------------------------
 */

static zc_status_t lat_run(zc_ucx_comm_t *comm, int rank, size_t size, int iters, uint8_t *buf)
{
    zc_ucx_req_t r[2];
    for (int i = 0; i < iters; i++) {
        if (rank == 0) {
            ZC_CHECK(zc_ucx_irecv(comm, 1, TAG_DATA, buf + size, size, &r[0]));
            ZC_CHECK(zc_ucx_isend(comm, 1, TAG_DATA, buf, size, &r[1]));
            ZC_CHECK(zc_ucx_waitall(comm, r, 2, "ping"));
        } else {
            ZC_CHECK(zc_ucx_irecv(comm, 0, TAG_DATA, buf + size, size, &r[0]));
            ZC_CHECK(zc_ucx_wait(comm, &r[0], "pong"));
            ZC_CHECK(zc_ucx_isend(comm, 0, TAG_DATA, buf, size, &r[1]));
            ZC_CHECK(zc_ucx_wait(comm, &r[1], "pong"));
        }
    }
    return ZC_OK;
}

/* ---- ucx_perftest ------------------------------------------------------------------------------
 */

static int free_port(void)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    if (fd >= 0)
        close(fd);
    return port;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* Starts @p argv with stdout to @p out_fd (-1: /dev/null); 0 on success. */
static int spawn(char *const argv[], int out_fd, pid_t *pid_p)
{
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    if (out_fd >= 0)
        posix_spawn_file_actions_adddup2(&fa, out_fd, STDOUT_FILENO);
    else
        posix_spawn_file_actions_addopen(&fa, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
    int rc = posix_spawnp(pid_p, argv[0], &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    return rc;
}

/* ucx_perftest's arguments: a client when @p host is set, else a server. */
static void perftest_argv(const options_t *o, const char *host, char *port, const char *test,
                          char *s, char *n, char *w, char *win, int peer_errors, int cpu,
                          char **argv)
{
    static char cpus[2][16];
    int k = 0;
    argv[k++] = (char *)o->perftest;
    if (host)
        argv[k++] = (char *)host;
    char *common[] = {"-p", port, "-t", (char *)test, "-s", s,    "-n",
                      n,    "-w", w,    "-O",         win,  "-f", "-v"};
    for (size_t i = 0; i < ZC_ARRAY_SIZE(common); i++)
        argv[k++] = common[i];
    if (peer_errors)
        argv[k++] = "-e";
    if (cpu >= 0) {
        snprintf(cpus[host != NULL], sizeof(cpus[0]), "%d", cpu);
        argv[k++] = "-c";
        argv[k++] = cpus[host != NULL];
    }
    argv[k] = NULL;
}

/*
 * Runs one ucx_perftest server/client pair; writes the client's final CSV
 * figures: overall latency (us) and overall bandwidth (MB/s, 2^20 bytes).
 */
static int perftest_run(const options_t *o, const char *test, size_t size, int iters, int warmup,
                        int peer_errors, double *lat_us_p, double *bw_mbs_p)
{
    char s[32], n[32], w[32], win[32], port[16];
    snprintf(s, sizeof(s), "%zu", size);
    snprintf(n, sizeof(n), "%d", iters);
    snprintf(w, sizeof(w), "%d", warmup);
    snprintf(win, sizeof(win), "%d", o->window);

    for (int attempt = 0; attempt < 5; attempt++) {
        snprintf(port, sizeof(port), "%d", free_port());
        char *server[24], *client[24];
        perftest_argv(o, NULL, port, test, s, n, w, win, peer_errors, o->cpu[1], server);
        perftest_argv(o, "127.0.0.1", port, test, s, n, w, win, peer_errors, o->cpu[0], client);
        pid_t spid, cpid;
        if (spawn(server, -1, &spid) != 0) {
            fprintf(stderr, "transport_bench: cannot start %s: %s\n", o->perftest, strerror(errno));
            return -1;
        }
        int ok = 0;
        /* the server listens once it is up: retry the client while it is refused */
        for (int tries = 0; tries < 50 && !ok; tries++) {
            sleep_ms(100);
            int fds[2];
            if (pipe(fds) != 0)
                break;
            if (spawn(client, fds[1], &cpid) != 0) {
                close(fds[0]);
                close(fds[1]);
                break;
            }
            close(fds[1]);
            char out[8192];
            size_t used = 0;
            ssize_t got;
            while ((got = read(fds[0], out + used, sizeof(out) - 1 - used)) > 0)
                used += (size_t)got;
            close(fds[0]);
            out[used] = '\0';
            int status;
            waitpid(cpid, &status, 0);
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
                continue;
            /* the last line of digits: iterations,p50_lat,avg_lat,overall_lat,avg_bw,overall_bw,...
             */
            char *line = NULL;
            for (char *l = strtok(out, "\n"); l; l = strtok(NULL, "\n"))
                if (l[strspn(l, " ")] >= '0' && l[strspn(l, " ")] <= '9')
                    line = l;
            double f[8];
            if (line && sscanf(line, " %lf,%lf,%lf,%lf,%lf,%lf,%lf,%lf", &f[0], &f[1], &f[2], &f[3],
                               &f[4], &f[5], &f[6], &f[7]) == 8) {
                *lat_us_p = f[3];
                *bw_mbs_p = f[5];
                ok = 1;
            }
        }
        /* the server exits after its client; do not wait for one that never got it */
        for (int i = 0; i < 50; i++) {
            if (waitpid(spid, NULL, WNOHANG) == spid)
                break;
            if (i == 49) {
                kill(spid, SIGKILL);
                waitpid(spid, NULL, 0);
            }
            sleep_ms(100);
        }
        if (ok)
            return 0;
    }
    fprintf(stderr, "transport_bench: ucx_perftest -t %s -s %zu gave no result\n", test, size);
    return -1;
}

/* ---- the measurement plan, run by both ranks in the same order ---------------------------------
 */

typedef struct result {
    size_t size;
    int iters;
    double zc;  /* best: GB/s (bandwidth) or us (latency) */
    double ucx; /* the same for ucx_perftest, 0 when not measured */
} result_t;

/* What both ranks are given: the options, and where rank 0 puts the results. */
typedef struct bench_args {
    const options_t *o;
    result_t *bw, *lat;
} bench_args_t;

static int bw_iters(const options_t *o, size_t size)
{
    size_t n = o->bytes / (size ? size : 1);
    return n < 20 ? 20 : n > 200000 ? 200000 : (int)n;
}

#define LAT_ITERS 20000

/* One rank (a bench_rank_fn); @p arg is a bench_args_t. */
static int run_rank(int rank, int fd, void *arg)
{
    const bench_args_t *a = arg;
    const options_t *o = a->o;
    result_t *bw = a->bw, *lat = a->lat;
    zc_config_t cfg;
    bench_pair_t pc = {.fd = fd, .rank = rank};
    zc_bootstrap_t bs = {.ops = &bench_pair_ops, .ctx = &pc, .rank = rank, .size = 2};
    zc_ucx_comm_t *comm;
    size_t max = 8;

    if (zc_config_load(NULL, &cfg) != ZC_OK || zc_config_apply(&cfg) != ZC_OK)
        return 1;
    if (o->cpu[rank] >= 0) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(o->cpu[rank], &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0)
            fprintf(stderr, "transport_bench: rank %d: cannot pin to cpu %d: %s\n", rank,
                    o->cpu[rank], strerror(errno));
    }
    for (int i = 0; i < o->n_bw; i++)
        max = o->bw_sizes[i] > max ? o->bw_sizes[i] : max;
    for (int i = 0; i < o->n_lat; i++)
        max = 2 * o->lat_sizes[i] > max ? 2 * o->lat_sizes[i] : max;
    /* page aligned, as ucx_perftest's */
    uint8_t *buf = aligned_alloc(4096, (max + 4095) / 4096 * 4096);
    zc_ucx_req_t *req = calloc((size_t)o->window, sizeof(*req));
    if (!buf || !req) {
        fprintf(stderr, "transport_bench: out of memory for %zu bytes\n", max);
        return 1;
    }
    memset(buf, rank + 1, max); /* no first-touch faults in timed runs */
    if (zc_ucx_comm_create(&cfg, &bs, &comm) != ZC_OK)
        return 1;
    int peer_errors = cfg.ucx_peer_errors != 0;

    for (int k = 0; k < o->n_bw + o->n_lat; k++) {
        int is_bw = k < o->n_bw;
        result_t *res = is_bw ? &bw[k] : &lat[k - o->n_bw];
        res->size = is_bw ? o->bw_sizes[k] : o->lat_sizes[k - o->n_bw];
        res->iters = is_bw ? bw_iters(o, res->size) : LAT_ITERS;
        int warmup = res->iters / 10 + 1;
        for (int rep = 0; rep < o->reps; rep++) {
            zc_status_t st;
            if (bench_pair_barrier(&pc) != ZC_OK)
                return 1;
            st = is_bw ? bench_pair_bw(comm, rank, res->size, warmup, o->window, buf, req)
                       : lat_run(comm, rank, res->size, warmup, buf);
            if (st == ZC_OK && (st = zc_bootstrap_barrier(&bs)) == ZC_OK) {
                uint64_t t0 = zc_time_ns();
                st = is_bw ? bench_pair_bw(comm, rank, res->size, res->iters, o->window, buf, req)
                           : lat_run(comm, rank, res->size, res->iters, buf);
                double s = (double)(zc_time_ns() - t0) / 1e9;
                double v =
                    is_bw ? (double)res->size * res->iters / s / 1e9 : s / res->iters / 2 * 1e6;
                if (rep == 0 || (is_bw ? v > res->zc : v < res->zc))
                    res->zc = v;
            }
            if (st != ZC_OK) {
                fprintf(stderr, "transport_bench: rank %d: %s of %zu bytes: %s\n", rank,
                        is_bw ? "bandwidth" : "latency", res->size, zc_status_string(st));
                return 1;
            }
            /* rank 1 waits in the barrier (a blocking read) while perftest runs */
            if (rank == 0 && o->perftest) {
                double lat_us, bw_mbs;
                if (perftest_run(o, is_bw ? "tag_bw" : "tag_lat", res->size, res->iters, warmup,
                                 peer_errors, &lat_us, &bw_mbs) == 0) {
                    double v = is_bw ? bw_mbs * 1048576.0 / 1e9 : lat_us;
                    if (res->ucx == 0 || (is_bw ? v > res->ucx : v < res->ucx))
                        res->ucx = v;
                }
            }
        }
    }
    bench_pair_barrier(&pc);
    zc_ucx_comm_destroy(comm);
    free(req);
    free(buf);
    return 0;
}

/* ---- output ------------------------------------------------------------------------------------
 */

static void print_results(const options_t *o, const result_t *bw, const result_t *lat,
                          int peer_errors)
{
    const char *tls = getenv("UCX_TLS");
    tls = tls ? tls : "default";
    if (o->json) {
        for (int k = 0; k < o->n_bw + o->n_lat; k++) {
            int is_bw = k < o->n_bw;
            const result_t *r = is_bw ? &bw[k] : &lat[k - o->n_bw];
            double ratio = r->ucx == 0 ? 0 : is_bw ? r->zc / r->ucx : r->ucx / r->zc;
            char ucx[32], rat[32];
            snprintf(ucx, sizeof(ucx), r->ucx == 0 ? "null" : "%.4f", r->ucx);
            snprintf(rat, sizeof(rat), r->ucx == 0 ? "null" : "%.4f", ratio);
            printf("{\"test\":\"%s\",\"ucx_tls\":\"%s\",\"peer_errors\":%d,\"window\":%d,"
                   "\"reps\":%d,\"size\":%zu,\"iters\":%d,\"%s\":%.4f,\"ucx_perftest_%s\":%s,"
                   "\"ratio\":%s}\n",
                   is_bw ? "bandwidth" : "latency", tls, peer_errors, o->window, o->reps, r->size,
                   r->iters, is_bw ? "zipccl_gbs" : "zipccl_us", r->zc, is_bw ? "gbs" : "us", ucx,
                   rat);
        }
        return;
    }
    char pin[64] = "not pinned";
    if (o->cpu[0] >= 0)
        snprintf(pin, sizeof(pin), "on cpus %d and %d", o->cpu[0], o->cpu[1]);
    printf("transport_bench: 2 processes %s, UCX_TLS=%s, peer error handling %s%s, window %d, "
           "best of %d\n",
           pin, tls, peer_errors ? "on" : "off", peer_errors ? " (ucx_perftest -e)" : "", o->window,
           o->reps);
    printf("ratio >= 1: zipccl at least as fast as ucx_perftest measured in the same run\n\n");
    printf("bandwidth (tag_bw)\n%12s %8s %12s %18s %7s\n", "size", "iters", "zipccl GB/s",
           "ucx_perftest GB/s", "ratio");
    for (int k = 0; k < o->n_bw; k++) {
        if (bw[k].ucx > 0)
            printf("%12zu %8d %12.3f %18.3f %7.2f\n", bw[k].size, bw[k].iters, bw[k].zc, bw[k].ucx,
                   bw[k].zc / bw[k].ucx);
        else
            printf("%12zu %8d %12.3f %18s %7s\n", bw[k].size, bw[k].iters, bw[k].zc, "-", "-");
    }
    printf("\nlatency (tag_lat, half round trip)\n%12s %8s %12s %18s %7s\n", "size", "iters",
           "zipccl us", "ucx_perftest us", "ratio");
    for (int k = 0; k < o->n_lat; k++) {
        if (lat[k].ucx > 0)
            printf("%12zu %8d %12.2f %18.2f %7.2f\n", lat[k].size, lat[k].iters, lat[k].zc,
                   lat[k].ucx, lat[k].ucx / lat[k].zc);
        else
            printf("%12zu %8d %12.2f %18s %7s\n", lat[k].size, lat[k].iters, lat[k].zc, "-", "-");
    }
}

/* ---- main --------------------------------------------------------------------------------------
 */

/* "8,4KiB,4MiB" into @p sizes; the count, or -1 when malformed. */
static int parse_sizes(const char *text, size_t *sizes)
{
    zc_param_desc_t desc = {.kind = ZC_PARAM_KIND_SIZE, .min = 0, .max = INT64_MAX};
    char copy[512];
    int n = 0;
    snprintf(copy, sizeof(copy), "%s", text);
    for (char *t = strtok(copy, ","); t; t = strtok(NULL, ",")) {
        int64_t v;
        if (n == MAX_SIZES || zc_param_parse(&desc, t, &v) != ZC_OK)
            return -1;
        sizes[n++] = (size_t)v;
    }
    return n;
}

/* The first two CPUs this process may run on, or -1, -1 when it has one. */
static void default_cpus(int cpu[2])
{
    cpu_set_t set;
    int n = 0;
    cpu[0] = cpu[1] = -1;
    if (sched_getaffinity(0, sizeof(set), &set) != 0)
        return;
    for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
        if (CPU_ISSET(c, &set))
            cpu[n++] = c;
    if (n < 2)
        cpu[0] = cpu[1] = -1;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: transport_bench [--sizes LIST] [--lat-sizes LIST] [--window N] [--reps N]\n"
               "                       [--bytes SIZE] [--cpus A,B | --no-pin]\n"
               "                       [--perftest PATH | --no-perftest] [--json]\n"
               "  LIST: comma-separated sizes with optional KiB/MiB/GiB suffixes\n");
}

int main(int argc, char **argv)
{
    options_t o = {.window = 16, .reps = 3, .bytes = (size_t)512 << 20, .perftest = "ucx_perftest"};
    o.n_bw = parse_sizes("8,64,1KiB,4KiB,64KiB,1MiB,4MiB,16MiB,64MiB", o.bw_sizes);
    o.n_lat = parse_sizes("8,64,1KiB,4KiB", o.lat_sizes);
    default_cpus(o.cpu);

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        size_t one[MAX_SIZES];
        if (strcmp(a, "--json") == 0) {
            o.json = 1;
        } else if (strcmp(a, "--no-perftest") == 0) {
            o.perftest = NULL;
        } else if (strcmp(a, "--perftest") == 0 && v) {
            o.perftest = argv[++i];
        } else if (strcmp(a, "--sizes") == 0 && v) {
            o.n_bw = parse_sizes(argv[++i], o.bw_sizes);
        } else if (strcmp(a, "--lat-sizes") == 0 && v) {
            o.n_lat = parse_sizes(argv[++i], o.lat_sizes);
        } else if (strcmp(a, "--window") == 0 && v) {
            o.window = atoi(argv[++i]);
        } else if (strcmp(a, "--reps") == 0 && v) {
            o.reps = atoi(argv[++i]);
        } else if (strcmp(a, "--cpus") == 0 && v) {
            if (sscanf(argv[++i], "%d,%d", &o.cpu[0], &o.cpu[1]) != 2 || o.cpu[0] < 0 ||
                o.cpu[1] < 0)
                o.window = 0; /* reported as a usage error below */
        } else if (strcmp(a, "--no-pin") == 0) {
            o.cpu[0] = o.cpu[1] = -1;
        } else if (strcmp(a, "--bytes") == 0 && v) {
            o.bytes = parse_sizes(argv[++i], one) == 1 ? one[0] : 0;
        } else {
            usage(strcmp(a, "--help") == 0 ? stdout : stderr);
            return strcmp(a, "--help") == 0 ? 0 : 2;
        }
    }
    if (o.n_bw < 0 || o.n_lat < 0 || o.window < 1 || o.reps < 1 || o.bytes == 0) {
        usage(stderr);
        return 2;
    }

    /* results come back from rank 1 through nothing: rank 0 measures and prints */
    static result_t bw[MAX_SIZES], lat[MAX_SIZES];
    bench_args_t args = {.o = &o, .bw = bw, .lat = lat};
    int rc = bench_pair_fork("transport_bench: ", run_rank, &args);
    if (rc != 0) {
        if (rc > 0)
            fprintf(stderr, "transport_bench: a rank failed\n");
        return 1;
    }
    zc_config_t cfg;
    zc_config_load(NULL, &cfg);
    print_results(&o, bw, lat, cfg.ucx_peer_errors != 0);
    return 0;
}
