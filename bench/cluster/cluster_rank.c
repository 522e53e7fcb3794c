/*
 * cluster_rank: one rank of the emulated-cluster benchmark (bench/cluster/cluster.sh starts it
 * under mpirun, one rank per network namespace). In the same processes, on the same links, it
 * measures Open MPI's MPI_Allreduce on f32 and zc_allreduce with each method of --methods, each
 * on every algorithm the codec runs and with ZIPCCL_ALGO=auto:
 *
 *   mpi       MPI_Allreduce (MPI_FLOAT, MPI_SUM)
 *   raw       ZIPCCL_CODEC=none (the raw ring)
 *   fp16      ZIPCCL_CODEC=fp16             ring, allgather, scatter, auto
 *   bf16      ZIPCCL_CODEC=bf16             ring, allgather, scatter, auto
 *   qsgd8/4   ZIPCCL_CODEC=qsgd, QSGD_BITS   allgather, scatter, ring (qsgd-int), auto
 *   qsgd2     ZIPCCL_CODEC=qsgd, QSGD_BITS   allgather, scatter, auto
 *   topk      ZIPCCL_CODEC=topk, density 1%  allgather, scatter, auto
 *   gradiveq  ZIPCCL_CODEC=gradiveq, SLICE 64 DIM 8 (K/d = 8)   ring, allgather, scatter, auto
 *   powersgd  ZIPCCL_CODEC=powersgd, rank 4, warm-up 1 call      its own algorithm (auto)
 *   auto      ZIPCCL_CODEC=auto ZIPCCL_ALGO=auto
 *
 *   cluster_rank [--sizes LIST] [--methods LIST] [--algos fixed,auto|NAMES] [--budget S]
 *                [--min-iters N] [--max-iters N] [--topologies flat,shards,leader,auto]
 *                [--json FILE]
 *
 * --algos names the fixed algorithms to run (e.g. allgather: the others are skipped), or fixed
 * (every one the method runs) and auto. --topologies runs every zipccl method with each
 * ZIPCCL_TOPOLOGY given (default flat); the records of the others carry the algorithm prefixed
 * "hier-" (hierarchical) or the topology's name and "-" (shards-, leader-, auto-). Under cluster.sh
 * (ZC_CLUSTER_PREFIX set) ZIPCCL_HOST_ID is the rank's network namespace, so that the ranks of
 * one emulated host (--ranks-per-host) are grouped as one host and no others.
 *
 * zipccl's communicators are built with zc_comm_init_bootstrap over MPI collectives, one per
 * (method, algorithm), after setting that method's ZIPCCL_* variables (and clearing
 * ZIPCCL_QSGD_LEVELS, which would override the bits); every other variable (UCX_TLS,
 * UCX_NET_DEVICES, ZIPCCL_CHUNK_BYTES) comes from the environment.
 *
 * For each method and size: one check call, whose result is compared with the exact sum (below),
 * then as many timed calls as fit in --budget seconds (between --min-iters and --max-iters,
 * decided by rank 0 from the check call), each after a barrier. A call's time is the slowest
 * rank's; the record holds the median. Bytes on the wire are zc_comm_stats' bytes_wire summed
 * over ranks, per call (headers included); Open MPI's are not measured (null).
 *
 * The check. Inputs are small integers (|x| <= 30), so every partial sum is exact in f32, in
 * f16 (integers up to 2^11) and, up to 8 ranks, in bf16 (up to 2^8): MPI, the raw ring, fp16
 * and bf16 must give the exact sum (bf16 beyond 8 ranks: within a relative 2^-8 per rounding,
 * at most 2 N roundings). GradiVeQ's first call on a tensor has no basis yet and sends
 * raw f32 (codec/gradiveq/gradiveq.c, version 0): exact too, and so is PowerSGD's (its one
 * warm-up call sums the tensor raw; the timed calls send P and Q). QSGD with the max scale rounds
 * each value to a neighbouring level k m / s of its bucket's largest magnitude m (docs/codecs.md),
 * so |Q(x_i) - x_i| <= m / s <= max|x| / s and the sum is off by at most N max|x| / s per value;
 * the scatter (and auto, which may pick it) re-encodes each shard's sum, whose magnitude is at
 * most N max|x| (1 + 1/s), adding at most that over s (docs/collectives.md, scatter). On the
 * ring (qsgd-int) every rank rounds to a level of the shared scale m <= max|x|: the same
 * N max|x| / s, and no re-encode.
 * Top-k sends each value exactly or not at all, so each result value is a sum over a subset of
 * the ranks: off by at most the sum of |x_r,i|. Codec auto picks none, bf16 or qsgd with
 * ZIPCCL_QSGD_BITS: the qsgd bound. A small slack covers f32 rounding of the decoded levels.
 * Every rank must also hold bit-identical results (compared by checksum).
 *
 * Rank 0 prints a progress line per measurement and appends one JSON object per line to --json.
 */
#include "mpi_bench.h"

#include <zipccl/zipccl.h>

#include <mpi.h>

#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define MAX_SIZES 32
#define MAX_METHODS 16
#define INPUT_MAX 30.0 /* largest |input_value| */

typedef struct options {
    size_t sizes[MAX_SIZES];
    int nsizes;
    char methods[512];
    int fixed, autos; /* --algos: run the fixed algorithms, run ZIPCCL_ALGO=auto */
    char only[128];   /* --algos naming algorithms (allgather, ...): run just those; "" all */
    double budget;
    int min_iters, max_iters;
    const char *json;
    char topologies[64]; /* --topologies: ZIPCCL_TOPOLOGY values to run each zipccl method with */
} options_t;

/* One method: its codec, the variables that parameterize it and the algorithms it runs. */
typedef struct method {
    const char *name;
    const char *codec; /* NULL: MPI_Allreduce */
    const char *bits, *density, *gv_slice, *gv_dim, *psgd_warmup;
    const char *algos; /* fixed algorithms the codec supports (docs/collectives.md) */
    int exact;         /* the check call must give the exact sum */
    double levels;     /* qsgd bound: s; 0 when not qsgd */
    int subset;        /* top-k bound */
} method_t;

static const method_t methods[] = {
    {"mpi", NULL, NULL, NULL, NULL, NULL, NULL, "", 1, 0, 0},
    {"raw", "none", NULL, NULL, NULL, NULL, NULL, "ring", 1, 0, 0},
    {"fp16", "fp16", NULL, NULL, NULL, NULL, NULL, "ring,allgather,scatter", 1, 0, 0},
    {"bf16", "bf16", NULL, NULL, NULL, NULL, NULL, "ring,allgather,scatter", 1, 0, 0},
    /* ZIPCCL_ALGO=ring runs qsgd as qsgd-int: scales shared, levels summed as integers */
    {"qsgd8", "qsgd", "8", NULL, NULL, NULL, NULL, "allgather,scatter,ring", 0, 127, 0},
    {"qsgd4", "qsgd", "4", NULL, NULL, NULL, NULL, "allgather,scatter,ring", 0, 7, 0},
    {"qsgd2", "qsgd", "2", NULL, NULL, NULL, NULL, "allgather,scatter", 0, 1, 0},
    {"topk", "topk", NULL, "0.01", NULL, NULL, NULL, "allgather,scatter", 0, 0, 1},
    {"gradiveq", "gradiveq", NULL, NULL, "64", "8", NULL, "ring,allgather,scatter", 1, 0, 0},
    /* its own algorithm, which ZIPCCL_ALGO=auto selects */
    {"powersgd", "powersgd", NULL, NULL, NULL, NULL, "1", "", 1, 0, 0},
    /* ZIPCCL_QSGD_BITS default 4: s = 7 */
    {"auto", "auto", NULL, NULL, NULL, NULL, NULL, "", 0, 7, 0},
};

/* A communicator of every rank running @p m on @p algo; NULL (logged) on failure. */
static zc_comm_t *comm_create(const method_t *m, const char *algo, const char *topology,
                              const char *host_id)
{
    const char *const settings[] = {
        "ZIPCCL_TOPOLOGY", topology, "ZIPCCL_HOST_ID", host_id, "ZIPCCL_CODEC", m->codec,
        "ZIPCCL_ALGO", algo, "ZIPCCL_QSGD_BITS", m->bits,
        /* the environment's level count would override the method's bits */
        "ZIPCCL_QSGD_LEVELS", "auto", "ZIPCCL_TOPK_DENSITY", m->density, "ZIPCCL_GRADIVEQ_SLICE",
        m->gv_slice, "ZIPCCL_GRADIVEQ_DIM", m->gv_dim, "ZIPCCL_POWERSGD_WARMUP", m->psgd_warmup,
        /* the check call is raw and learned from; then every 20th call raw (the default) */
        "ZIPCCL_GRADIVEQ_WARMUP", "1", NULL};
    return bench_mpi_comm("cluster_rank", settings);
}

/* ---- data and check -------------------------------------------------------------------------- */

static float input_value(size_t i, int rank)
{
    return (float)((i * 7 + (size_t)rank * 13) % 61) - 30.0f;
}

/*
 * Values of @p got outside @p m's bound around the exact sum (see the file comment); the
 * largest |got - exact| goes to *@p maxerr_p and the relative L2 error to *@p relerr_p.
 */
static size_t count_wrong(const method_t *m, const char *algo, const float *got, size_t n, int size,
                          double *maxerr_p, double *relerr_p)
{
    const int reencode = strcmp(algo, "scatter") == 0 || strcmp(algo, "auto") == 0;
    size_t wrong = 0;
    double maxerr = 0, err2 = 0, ref2 = 0;
    for (size_t i = 0; i < n; i++) {
        double want = 0, mass = 0;
        for (int r = 0; r < size; r++) {
            double v = input_value(i, r);
            want += v;
            mass += fabs(v);
        }
        double err = fabs((double)got[i] - want), bound = 0;
        if (m->levels > 0) {
            const double first = size * INPUT_MAX / m->levels;
            bound = first + 1e-5 * mass;
            if (reencode)
                bound += (size * INPUT_MAX + first) / m->levels;
        } else if (m->subset)
            bound = mass;
        else if (strcmp(m->name, "bf16") == 0 && size * INPUT_MAX > 256)
            bound = 2.0 * size * mass / 256;
        if (!(err <= bound)) /* NaN counts as wrong */
            wrong++;
        maxerr = err > maxerr || isnan(err) ? err : maxerr;
        err2 += err * err;
        ref2 += want * want;
    }
    *maxerr_p = maxerr;
    *relerr_p = ref2 > 0 ? sqrt(err2 / ref2) : sqrt(err2);
    return wrong;
}

/* FNV-1a over the result's bytes: equal on every rank when the results are bit-identical. */
static uint64_t checksum(const float *x, size_t n)
{
    const unsigned char *p = (const unsigned char *)x;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n * sizeof(float); i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

/* ---- timing ---------------------------------------------------------------------------------- */

/* One call of MPI (comm NULL) or zipccl after a barrier; its local time in seconds. */
static double timed_call(zc_comm_t *comm, const float *send, float *recv, size_t n, uint64_t key,
                         int *failed)
{
    MPI_Barrier(MPI_COMM_WORLD);
    double t = MPI_Wtime();
    if (comm) {
        zc_status_t st = zc_allreduce_key(comm, send, recv, n, ZC_DTYPE_F32, ZC_OP_SUM, key);
        if (st != ZC_OK) {
            fprintf(stderr, "cluster_rank: zc_allreduce of %zu values: %s\n", n,
                    zc_status_string(st));
            *failed = 1;
        }
    } else if (MPI_Allreduce(send, recv, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD) !=
               MPI_SUCCESS) {
        fprintf(stderr, "cluster_rank: MPI_Allreduce of %zu values failed\n", n);
        *failed = 1;
    }
    return MPI_Wtime() - t;
}

/* ---- one measurement ------------------------------------------------------------------------- */

typedef struct record {
    double median_s, check_s;
    int iters;
    double wire_bytes; /* per call, all ranks; < 0: not measured */
    double compressed; /* fraction of timed calls that were compressed */
    uint64_t wrong;
    double maxerr, relerr;
    int identical, failed;
} record_t;

/* Runs @p m (comm NULL: MPI) on @p bytes of f32; collective; the record is valid on rank 0. */
static record_t measure(const options_t *o, const method_t *m, const char *algo, zc_comm_t *comm,
                        size_t bytes, uint64_t key, int rank, int size)
{
    const size_t n = bytes / sizeof(float);
    float *send = malloc(n ? n * sizeof(float) : 1), *recv = malloc(n ? n * sizeof(float) : 1);
    record_t rec = {.wire_bytes = -1, .identical = 1};
    int failed = !send || !recv;

    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (failed) {
        if (rank == 0)
            fprintf(stderr, "cluster_rank: cannot allocate 2 x %zu bytes\n", bytes);
        free(send);
        free(recv);
        rec.failed = 1;
        return rec;
    }
    for (size_t i = 0; i < n; i++)
        send[i] = input_value(i, rank);
    memset(recv, 0xff, n * sizeof(float)); /* NaN: a value left alone shows */

    /* the check call, also the warm-up (and GradiVeQ's basis is learned from its sum) */
    double tcheck = timed_call(comm, send, recv, n, key, &failed);
    uint64_t sum[2] = {checksum(recv, n), 0}, lo, hi;
    uint64_t wrong = count_wrong(m, algo, recv, n, size, &rec.maxerr, &rec.relerr);
    MPI_Allreduce(&sum[0], &lo, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
    MPI_Allreduce(&sum[0], &hi, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &wrong, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &tcheck, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &rec.relerr, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &rec.maxerr, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    rec.wrong = wrong;
    rec.identical = lo == hi;
    rec.check_s = tcheck;

    /* rank 0 decides the repetitions from the check call, so every rank runs as many */
    int iters = tcheck > 0 ? (int)(o->budget / tcheck) : o->max_iters;
    iters = iters < o->min_iters ? o->min_iters : iters > o->max_iters ? o->max_iters : iters;
    MPI_Bcast(&iters, 1, MPI_INT, 0, MPI_COMM_WORLD);

    zc_stats_t before = {0}, after = {0};
    if (comm)
        zc_comm_stats(comm, &before);
    double *t = calloc((size_t)iters, sizeof(double));
    for (int i = 0; i < iters; i++)
        t[i] = timed_call(comm, send, recv, n, key, &failed);
    MPI_Allreduce(MPI_IN_PLACE, t, iters, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (comm) {
        zc_comm_stats(comm, &after);
        double wire = (double)(after.bytes_wire - before.bytes_wire);
        MPI_Allreduce(MPI_IN_PLACE, &wire, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
        rec.wire_bytes = wire / iters;
        rec.compressed = (double)(after.calls_compressed - before.calls_compressed) / iters;
    }
    rec.median_s = bench_median(t, iters);
    rec.iters = iters;
    rec.failed = failed;
    free(t);
    free(send);
    free(recv);
    return rec;
}

/* ---- options --------------------------------------------------------------------------------- */

static int parse_size(const char *s, size_t *bytes_p)
{
    char *end;
    double v = strtod(s, &end);
    double mult = 1;
    if (end == s || v < 0)
        return -1;
    if (*end == 'K' || *end == 'k')
        mult = 1024.0, end++;
    else if (*end == 'M' || *end == 'm')
        mult = 1048576.0, end++;
    else if (*end == 'G' || *end == 'g')
        mult = 1073741824.0, end++;
    if (*end == 'i')
        end++;
    if (*end == 'B')
        end++;
    if (*end)
        return -1;
    *bytes_p = (size_t)(v * mult) / sizeof(float) * sizeof(float);
    return *bytes_p ? 0 : -1;
}

static const method_t *find_method(const char *name)
{
    for (size_t i = 0; i < sizeof(methods) / sizeof(methods[0]); i++)
        if (strcmp(methods[i].name, name) == 0)
            return &methods[i];
    return NULL;
}

static void usage(FILE *f)
{
    fprintf(f, "usage: mpirun ... cluster_rank [--sizes 64K,1M,64M] [--methods mpi,raw,...]\n"
               "                   [--algos fixed,auto|NAMES] [--budget S] [--min-iters N]"
               " [--max-iters N] [--topologies flat,shards,leader,auto] [--json FILE]\n"
               "  methods: mpi raw fp16 bf16 qsgd8 qsgd4 qsgd2 topk gradiveq powersgd auto\n");
}

static int parse_args(int argc, char **argv, options_t *o)
{
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!v)
            return -1;
        i++;
        if (strcmp(a, "--sizes") == 0) {
            char copy[1024];
            snprintf(copy, sizeof(copy), "%s", v);
            o->nsizes = 0;
            for (char *t = strtok(copy, ","); t; t = strtok(NULL, ","))
                if (o->nsizes == MAX_SIZES || parse_size(t, &o->sizes[o->nsizes++]) != 0)
                    return -1;
        } else if (strcmp(a, "--methods") == 0) {
            snprintf(o->methods, sizeof(o->methods), "%s", v);
        } else if (strcmp(a, "--algos") == 0) {
            o->fixed = strstr(v, "fixed") != NULL;
            o->autos = strstr(v, "auto") != NULL;
            if (!o->fixed && !o->autos) { /* algorithm names: the fixed ones named */
                o->fixed = 1;
                snprintf(o->only, sizeof(o->only), ",%s,", v);
            }
        } else if (strcmp(a, "--budget") == 0) {
            if ((o->budget = atof(v)) <= 0)
                return -1;
        } else if (strcmp(a, "--min-iters") == 0) {
            if ((o->min_iters = atoi(v)) < 1)
                return -1;
        } else if (strcmp(a, "--max-iters") == 0) {
            if ((o->max_iters = atoi(v)) < 1)
                return -1;
        } else if (strcmp(a, "--topologies") == 0) {
            snprintf(o->topologies, sizeof(o->topologies), "%s", v);
        } else if (strcmp(a, "--json") == 0) {
            o->json = v;
        } else {
            return -1;
        }
    }
    if (o->max_iters < o->min_iters)
        o->max_iters = o->min_iters;
    char copy[512];
    snprintf(copy, sizeof(copy), "%s", o->methods);
    for (char *t = strtok(copy, ","); t; t = strtok(NULL, ","))
        if (!find_method(t)) {
            fprintf(stderr, "cluster_rank: unknown method '%s'\n", t);
            return -1;
        }
    return o->nsizes > 0 ? 0 : -1;
}

/* ---- main ------------------------------------------------------------------------------------ */

static void emit(FILE *json, const method_t *m, const char *algo, size_t bytes, int size,
                 const record_t *r)
{
    char wire[32];
    if (r->wire_bytes >= 0)
        snprintf(wire, sizeof(wire), "%.0f", r->wire_bytes);
    else
        snprintf(wire, sizeof(wire), "null");
    printf("# %-9s %-9s %10zu B: median %10.3f ms over %3d (check %.3f ms), wire %s B, "
           "rel.err %.2e, %s\n",
           m->name, algo, bytes, r->median_s * 1e3, r->iters, r->check_s * 1e3, wire, r->relerr,
           r->failed                   ? "FAILED"
           : r->wrong || !r->identical ? "CHECK FAILED"
                                       : "ok");
    fflush(stdout);
    if (json) {
        fprintf(json,
                "{\"method\": \"%s\", \"algo\": \"%s\", \"bytes\": %zu, \"ranks\": %d, "
                "\"median_s\": %.9g, \"iters\": %d, \"check_s\": %.9g, \"wire_bytes\": %s, "
                "\"compressed\": %.3f, \"wrong\": %" PRIu64 ", \"identical\": %s, "
                "\"max_err\": %.6g, \"rel_err\": %.6g, \"failed\": %s}\n",
                m->name, algo, bytes, size, r->median_s, r->iters, r->check_s, wire, r->compressed,
                r->wrong, r->identical ? "true" : "false", r->maxerr, r->relerr,
                r->failed ? "true" : "false");
        fflush(json);
    }
}

int main(int argc, char **argv)
{
    options_t o = {.fixed = 1,
                   .autos = 1,
                   .budget = 3.0,
                   .min_iters = 3,
                   .max_iters = 50,
                   .topologies = "flat"};
    int rank, size, rc = 0;
    FILE *json = NULL;

    snprintf(o.methods, sizeof(o.methods), "mpi,raw,fp16,qsgd8,qsgd4,qsgd2,topk,gradiveq,auto");
    o.nsizes = 3;
    o.sizes[0] = (size_t)64 << 10, o.sizes[1] = (size_t)1 << 20, o.sizes[2] = (size_t)64 << 20;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (parse_args(argc, argv, &o) != 0) {
        if (rank == 0)
            usage(stderr);
        MPI_Finalize();
        return 2;
    }
    if (rank == 0 && o.json && !(json = fopen(o.json, "a"))) {
        perror(o.json);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }

    /* Under cluster.sh every host is a network namespace of one machine, whose hostname, boot
     * id and IPC namespace they share: the namespace names the host (ZIPCCL_HOST_ID). */
    char host_id[64] = "", netns[48];
    ssize_t got = readlink("/proc/self/ns/net", netns, sizeof(netns) - 1);
    if (getenv("ZC_CLUSTER_PREFIX") && got > 0) {
        netns[got] = '\0';
        snprintf(host_id, sizeof(host_id), "cluster-%s", netns);
    }

    char list[512];
    snprintf(list, sizeof(list), "%s", o.methods);
    char *save = NULL;
    for (char *name = strtok_r(list, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        const method_t *m = find_method(name);
        /* the algorithms of this method: MPI and raw have one; auto only auto */
        char algos[128] = "";
        if (!m->codec)
            snprintf(algos, sizeof(algos), "mpi");
        else if (strcmp(m->codec, "none") == 0)
            snprintf(algos, sizeof(algos), "ring");
        else if (strcmp(m->codec, "auto") == 0)
            snprintf(algos, sizeof(algos), "auto");
        else
            snprintf(algos, sizeof(algos), "%s%s%s", o.fixed ? m->algos : "",
                     o.fixed && o.autos ? "," : "", o.autos ? "auto" : "");
        char *save2 = NULL;
        for (char *algo = strtok_r(algos, ",", &save2); algo; algo = strtok_r(NULL, ",", &save2)) {
            char token[80];
            snprintf(token, sizeof(token), ",%s,", algo);
            if (o.only[0] && !strstr(o.only, token))
                continue;
            char topos[64], *save3 = NULL;
            snprintf(topos, sizeof(topos), "%s", m->codec ? o.topologies : "flat");
            for (char *topo = strtok_r(topos, ",", &save3); topo;
                 topo = strtok_r(NULL, ",", &save3)) {
                /* the label: the algorithm, prefixed by the topology unless flat */
                char label[96];
                snprintf(label, sizeof(label), "%s%s%s",
                         strcmp(topo, "flat") == 0           ? ""
                         : strcmp(topo, "hierarchical") == 0 ? "hier"
                                                             : topo,
                         strcmp(topo, "flat") ? "-" : "", algo);
                zc_comm_t *comm = NULL;
                if (m->codec && !(comm = comm_create(m, algo, topo, host_id[0] ? host_id : NULL)))
                    MPI_Abort(MPI_COMM_WORLD, 1);
                for (int k = 0; k < o.nsizes; k++) {
                    record_t r =
                        measure(&o, m, algo, comm, o.sizes[k], (uint64_t)k + 1, rank, size);
                    if (rank == 0)
                        emit(json, m, label, o.sizes[k], size, &r);
                    if (r.failed || r.wrong || !r.identical)
                        rc = 1;
                }
                zc_comm_destroy(comm);
            }
        }
    }
    if (json)
        fclose(json);
    if (rank == 0)
        printf("# cluster_rank: %s\n", rc ? "FAILED (see above)"
                                          : "every result within its bound of the exact sum, "
                                            "bit-identical on every rank");
    MPI_Finalize();
    return rc;
}
