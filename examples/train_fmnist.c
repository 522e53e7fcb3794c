/*
 * train_fmnist: data-parallel training of an MLP on Fashion-MNIST over zipccl.
 *
 * Every rank holds the whole model (784-512-256-10 by default: ReLU, softmax
 * cross-entropy, SGD with momentum) and trains on its shard of every global
 * batch: rank r of N takes examples [r B / N, (r + 1) B / N) of the batch. Each
 * rank scales its gradients by 1 / B, so that their sum, all-reduced layer by
 * layer through zc_allreduce_key (the layer as the tensor key, for the codecs
 * that keep state per tensor), is the gradient of the batch mean: the same
 * training for any number of ranks, up to the codec's error. The all-reduce
 * gives every rank bit-identical sums, so the ranks' models stay identical
 * without ever being broadcast; the program checks that at the end.
 *
 * After each epoch rank 0 prints the test accuracy and loss (each rank
 * evaluates a shard of the test set), the bytes all ranks sent on the wire for
 * the gradients against what the uncompressed ring would have sent (f32), and
 * the time. Runs are reproducible: the initial weights and the data order come
 * from --seed, which also becomes ZIPCCL_SEED (the key of the codecs'
 * stochastic rounding) unless that is set.
 *
 *   train_fmnist -N 4 --codec qsgd --bits 4 --epochs 5
 *       forks 4 ranks on this machine (ZIPCCL_RANK, ZIPCCL_SIZE, ZIPCCL_ROOT on
 *       a free loopback port, ZIPCCL_JOB_ID; ZIPCCL_UCX_PEER_ERRORS=0 unless set,
 *       see launch_local), each one calling zc_comm_init_config;
 *   mpirun -n 4 -x ZIPCCL_ROOT=host:port train_fmnist ...   (or torchrun, srun)
 *       without -N: one rank per process, from the launcher's variables.
 *
 * The codec flags are ZIPCCL_* settings of a zc_comm_config_t, made from the
 * environment; anything else goes through --set NAME=VALUE or the environment
 * (docs/env-vars.md).
 */
#include "examples/fmnist.h"
#include "examples/mlp.h"

#include <zipccl/zipccl.h>

#include <arpa/inet.h>
#include <cblas.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_RANKS 64
/* a rank that outlives a failed peer by this much is killed by the local launcher */
#define GRACE_S 10.0

typedef struct options {
    int ranks; /* -N: ranks to fork here; 0: take them from the launcher */
    int epochs;
    int batch; /* global batch, split over the ranks */
    double lr, momentum;
    int cosine;         /* anneal the learning rate to 0 over the run */
    int local_momentum; /* momentum before the all-reduce (DGC's momentum correction) */
    uint64_t seed;
    int sizes[MLP_MAX_LAYERS + 1];
    int nsizes;
    size_t train_limit, test_limit; /* 0: the whole set */
    const char *data_dir;
    const char *csv_path;
    const char *label;
    int blas_threads;
    int progress; /* -1: on a terminal */
} options_t;

typedef struct data {
    fmnist_set_t train, test;
} data_t;

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void usage(FILE *f)
{
    fprintf(
        f, "usage: train_fmnist [options]\n"
           "  -N, --ranks N          fork N ranks on this machine (default: one rank per\n"
           "                         process, from mpirun/torchrun/srun or ZIPCCL_RANK/SIZE/ROOT)\n"
           "  --codec NAME           none, qsgd, fp16, bf16, topk, gradiveq, qsgd-int, powersgd,\n"
           "                         auto (ZIPCCL_CODEC; --algo ring runs qsgd as qsgd-int;\n"
           "                         PowerSGD's rank: --set POWERSGD_RANK=R)\n"
           "  --algo NAME            auto, ring, allgather, scatter (ZIPCCL_ALGO)\n"
           "  --bits B               QSGD bits per value, sign included (ZIPCCL_QSGD_BITS)\n"
           "  --density D            top-k fraction kept, 0.01 or 1%% (ZIPCCL_TOPK_DENSITY)\n"
           "  --ef                   error feedback for qsgd or gradiveq (top-k always has it)\n"
           "  --set NAME=VALUE       any other ZIPCCL_* variable (the prefix may be left out)\n"
           "  --epochs E             passes over the training set (default 5)\n"
           "  --batch B              global batch, split over the ranks (default 512)\n"
           "  --lr X                 learning rate (default 0.1)\n"
           "  --momentum X           heavy-ball momentum (default 0.9)\n"
           "  --schedule S           learning rate over the run: cosine (from --lr down to 0\n"
           "                         along a half cosine, the default) or constant\n"
           "  --local-momentum       momentum on each rank before the all-reduce (momentum\n"
           "                         correction for top-k; the same update when sums are exact)\n"
           "  --seed S               initial weights, data order and ZIPCCL_SEED (default 1)\n"
           "  --hidden W[,W...]      hidden layer widths (default 512,256)\n"
           "  --train-limit N        train on the first N training images only\n"
           "  --test-limit N         test on the first N test images only\n"
           "  --data DIR             Fashion-MNIST folder (default " FMNIST_DEFAULT_DIR ")\n"
           "  --csv FILE             write one row per epoch to FILE (rank 0)\n"
           "  --label TEXT           run name in the CSV (default: the codec)\n"
           "  --blas-threads T       OpenBLAS threads per rank (default 1; results are\n"
           "                         reproducible for a fixed T)\n"
           "  --progress, --no-progress   progress bar (default: on a terminal)\n");
}

static int parse_long(const char *flag, const char *s, long min, long max, long *out)
{
    char *end;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end || v < min || v > max) {
        fprintf(stderr, "train_fmnist: %s takes an integer in %ld..%ld, not '%s'\n", flag, min, max,
                s);
        return -1;
    }
    *out = v;
    return 0;
}

static int parse_double(const char *flag, const char *s, double min, double max, double *out)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end || !(v >= min && v <= max)) {
        fprintf(stderr, "train_fmnist: %s takes a number in %g..%g, not '%s'\n", flag, min, max, s);
        return -1;
    }
    *out = v;
    return 0;
}

/* --hidden 512,256 */
static int parse_hidden(const char *s, options_t *o)
{
    o->nsizes = 1;
    const char *p = s;
    while (*p) {
        char *end;
        errno = 0;
        long w = strtol(p, &end, 10);
        if (errno || end == p || w < 1 || w > 65536 || (*end && *end != ',') ||
            o->nsizes >= MLP_MAX_LAYERS) {
            fprintf(stderr,
                    "train_fmnist: --hidden takes up to %d widths in 1..65536 separated by "
                    "commas, not '%s'\n",
                    MLP_MAX_LAYERS - 1, s);
            return -1;
        }
        o->sizes[o->nsizes++] = (int)w;
        p = *end ? end + 1 : end;
    }
    return 0;
}

/* The communicator's settings: the environment's ZIPCCL_* variables, then the flags'. */
static zc_comm_config_t *settings;

/* The full name ZIPCCL_<name> (or <name> when it already starts with ZIPCCL_). */
static const char *full_name(const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s%s", strncmp(name, "ZIPCCL_", 7) == 0 ? "" : "ZIPCCL_", name);
    return buf;
}

/* Sets ZIPCCL_<name> in the settings; a bad name or value is reported by zipccl. */
static int set_var(const char *name, const char *value)
{
    char full[128];
    zc_status_t st = settings ? ZC_OK : zc_comm_config_create(1, &settings);
    if (st == ZC_OK)
        st = zc_comm_config_set(settings, full_name(name, full, sizeof(full)), value);
    if (st != ZC_OK) {
        fprintf(stderr, "train_fmnist: cannot set %s=%s: %s\n", full, value, zc_status_string(st));
        return -1;
    }
    return 0;
}

/* ZIPCCL_<name>'s value in the settings into @p buf ("" when they cannot be read). */
static const char *get_var(const char *name, char *buf, size_t len)
{
    char full[128];
    buf[0] = '\0';
    if (settings || zc_comm_config_create(1, &settings) == ZC_OK)
        zc_comm_config_get(settings, full_name(name, full, sizeof(full)), buf, len);
    return buf;
}

static int set_assignment(const char *arg)
{
    const char *eq = strchr(arg, '=');
    if (!eq || eq == arg || (size_t)(eq - arg) > 100) {
        fprintf(stderr, "train_fmnist: --set takes NAME=VALUE, not '%s'\n", arg);
        return -1;
    }
    char name[128];
    memcpy(name, arg, (size_t)(eq - arg));
    name[eq - arg] = '\0';
    return set_var(name, eq + 1);
}

enum {
    OPT_CODEC = 256,
    OPT_ALGO,
    OPT_BITS,
    OPT_DENSITY,
    OPT_EF,
    OPT_SET,
    OPT_EPOCHS,
    OPT_BATCH,
    OPT_LR,
    OPT_MOMENTUM,
    OPT_SCHEDULE,
    OPT_LOCAL_MOMENTUM,
    OPT_SEED,
    OPT_HIDDEN,
    OPT_TRAIN_LIMIT,
    OPT_TEST_LIMIT,
    OPT_DATA,
    OPT_CSV,
    OPT_LABEL,
    OPT_BLAS_THREADS,
    OPT_PROGRESS,
    OPT_NO_PROGRESS,
};

static int parse_options(int argc, char **argv, options_t *o)
{
    static const struct option longopts[] = {
        {"ranks", required_argument, NULL, 'N'},
        {"codec", required_argument, NULL, OPT_CODEC},
        {"algo", required_argument, NULL, OPT_ALGO},
        {"bits", required_argument, NULL, OPT_BITS},
        {"density", required_argument, NULL, OPT_DENSITY},
        {"ef", no_argument, NULL, OPT_EF},
        {"set", required_argument, NULL, OPT_SET},
        {"epochs", required_argument, NULL, OPT_EPOCHS},
        {"batch", required_argument, NULL, OPT_BATCH},
        {"lr", required_argument, NULL, OPT_LR},
        {"momentum", required_argument, NULL, OPT_MOMENTUM},
        {"schedule", required_argument, NULL, OPT_SCHEDULE},
        {"local-momentum", no_argument, NULL, OPT_LOCAL_MOMENTUM},
        {"seed", required_argument, NULL, OPT_SEED},
        {"hidden", required_argument, NULL, OPT_HIDDEN},
        {"train-limit", required_argument, NULL, OPT_TRAIN_LIMIT},
        {"test-limit", required_argument, NULL, OPT_TEST_LIMIT},
        {"data", required_argument, NULL, OPT_DATA},
        {"csv", required_argument, NULL, OPT_CSV},
        {"label", required_argument, NULL, OPT_LABEL},
        {"blas-threads", required_argument, NULL, OPT_BLAS_THREADS},
        {"progress", no_argument, NULL, OPT_PROGRESS},
        {"no-progress", no_argument, NULL, OPT_NO_PROGRESS},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (options_t){
        .epochs = 5,
        .batch = 512,
        .lr = 0.1,
        .momentum = 0.9,
        .cosine = 1,
        .seed = 1,
        .sizes = {FMNIST_PIXELS, 512, 256},
        .nsizes = 3,
        .data_dir = FMNIST_DEFAULT_DIR,
        .blas_threads = 1,
        .progress = -1,
    };
    int ef = 0, seed_given = 0;
    long v;
    int c;
    while ((c = getopt_long(argc, argv, "N:h", longopts, NULL)) != -1) {
        int rc = 0;
        switch (c) {
        case 'N':
            rc = parse_long("-N", optarg, 1, MAX_RANKS, &v);
            o->ranks = (int)v;
            break;
        case OPT_CODEC: rc = set_var("CODEC", optarg); break;
        case OPT_ALGO: rc = set_var("ALGO", optarg); break;
        case OPT_BITS: rc = set_var("QSGD_BITS", optarg); break;
        case OPT_DENSITY: rc = set_var("TOPK_DENSITY", optarg); break;
        case OPT_EF: ef = 1; break;
        case OPT_SET: rc = set_assignment(optarg); break;
        case OPT_EPOCHS:
            rc = parse_long("--epochs", optarg, 1, 10000, &v);
            o->epochs = (int)v;
            break;
        case OPT_BATCH:
            rc = parse_long("--batch", optarg, 1, 1 << 20, &v);
            o->batch = (int)v;
            break;
        case OPT_LR: rc = parse_double("--lr", optarg, 0, 100, &o->lr); break;
        case OPT_MOMENTUM:
            rc = parse_double("--momentum", optarg, 0, 0.999999, &o->momentum);
            break;
        case OPT_SCHEDULE:
            if (strcmp(optarg, "cosine") == 0 || strcmp(optarg, "constant") == 0) {
                o->cosine = strcmp(optarg, "cosine") == 0;
            } else {
                fprintf(stderr, "train_fmnist: --schedule takes cosine or constant, not '%s'\n",
                        optarg);
                rc = -1;
            }
            break;
        case OPT_LOCAL_MOMENTUM: o->local_momentum = 1; break;
        case OPT_SEED:
            rc = parse_long("--seed", optarg, 0, INT32_MAX, &v);
            o->seed = (uint64_t)v;
            seed_given = 1;
            break;
        case OPT_HIDDEN: rc = parse_hidden(optarg, o); break;
        case OPT_TRAIN_LIMIT:
            rc = parse_long("--train-limit", optarg, 1, 1L << 40, &v);
            o->train_limit = (size_t)v;
            break;
        case OPT_TEST_LIMIT:
            rc = parse_long("--test-limit", optarg, 1, 1L << 40, &v);
            o->test_limit = (size_t)v;
            break;
        case OPT_DATA: o->data_dir = optarg; break;
        case OPT_CSV: o->csv_path = optarg; break;
        case OPT_LABEL: o->label = optarg; break;
        case OPT_BLAS_THREADS:
            rc = parse_long("--blas-threads", optarg, 1, 1024, &v);
            o->blas_threads = (int)v;
            break;
        case OPT_PROGRESS: o->progress = 1; break;
        case OPT_NO_PROGRESS: o->progress = 0; break;
        case 'h': usage(stdout); exit(0);
        default: usage(stderr); return -1;
        }
        if (rc)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "train_fmnist: unexpected argument '%s'\n", argv[optind]);
        usage(stderr);
        return -1;
    }
    o->sizes[o->nsizes++] = FMNIST_CLASSES;

    char codec[32];
    get_var("CODEC", codec, sizeof(codec));
    if (ef) {
        if (strcmp(codec, "qsgd") == 0 || strcmp(codec, "qsgd-int") == 0)
            set_var("QSGD_EF", "1");
        else if (strcmp(codec, "gradiveq") == 0)
            set_var("GRADIVEQ_EF", "1");
        else if (strcmp(codec, "topk") != 0) {
            fprintf(stderr, "train_fmnist: --ef applies to --codec qsgd, gradiveq or topk\n");
            return -1;
        }
    }
    /* The seed keys the codecs' rounding too, unless the caller chose that key himself. */
    if (seed_given || !getenv("ZIPCCL_SEED")) {
        char s[32];
        snprintf(s, sizeof(s), "%llu", (unsigned long long)o->seed);
        set_var("SEED", s);
    }
    return 0;
}

/* ---------------------------------------------------------------- one rank */

typedef struct epoch_result {
    double train_loss, test_loss, test_acc;
    double bytes_wire, bytes_raw; /* summed over the ranks */
    double epoch_s, comm_s;       /* rank 0's */
} epoch_result_t;

typedef struct progress {
    int on;
    int last_shown;
} progress_t;

static void progress_show(progress_t *p, int epoch, int epochs, int step, int steps, double loss)
{
    const int width = 30;
    int filled = (int)((int64_t)width * step / steps);
    if (!p->on || (step != steps && filled == p->last_shown))
        return;
    p->last_shown = filled;
    char bar[64];
    for (int i = 0; i < width; i++)
        bar[i] = i < filled ? '#' : '.';
    bar[width] = '\0';
    printf("\r  epoch %*d/%d [%s] %3d%%  loss %.4f", epochs >= 10 ? 2 : 1, epoch, epochs, bar,
           (int)((int64_t)100 * step / steps), loss);
    fflush(stdout);
}

static void progress_clear(progress_t *p)
{
    if (p->on) {
        printf("\r\033[K");
        fflush(stdout);
    }
}

static void print_header(const options_t *o, const data_t *d, const mlp_t *m, int size)
{
    printf("train_fmnist: %d rank%s, MLP", size, size == 1 ? "" : "s");
    for (int l = 0; l < o->nsizes; l++)
        printf("%s%d", l ? "-" : " ", o->sizes[l]);
    printf(" (%zu parameters), %zu training / %zu test images\n", mlp_params(m), d->train.count,
           d->test.count);
    char codec[32], algo[32], min_bytes[32];
    printf("  codec %s, algo %s, min bytes %s, seed %llu; batch %d (%d..%d per rank), lr %g%s, "
           "momentum %g%s, %d epoch%s\n",
           get_var("CODEC", codec, sizeof(codec)), get_var("ALGO", algo, sizeof(algo)),
           get_var("MIN_BYTES", min_bytes, sizeof(min_bytes)), (unsigned long long)o->seed,
           o->batch, o->batch / size, (o->batch + size - 1) / size, o->lr,
           o->cosine ? " cosine" : "", o->momentum, o->local_momentum ? " (local)" : "", o->epochs,
           o->epochs == 1 ? "" : "s");
    printf("%5s %10s %9s %8s %11s %11s %7s %8s %8s\n", "epoch", "train loss", "test loss",
           "test acc", "wire MiB", "raw MiB", "ratio", "time s", "comm s");
    fflush(stdout);
}

static void print_epoch(int epoch, const epoch_result_t *r)
{
    if (epoch == 0) {
        printf("%5d %10s %9.4f %7.2f%% %11s %11s %7s %8s %8s\n", 0, "-", r->test_loss,
               100 * r->test_acc, "-", "-", "-", "-", "-");
    } else {
        printf("%5d %10.4f %9.4f %7.2f%% %11.2f %11.2f %6.1fx %8.2f %8.2f\n", epoch, r->train_loss,
               r->test_loss, 100 * r->test_acc, r->bytes_wire / (1 << 20), r->bytes_raw / (1 << 20),
               r->bytes_wire > 0 ? r->bytes_raw / r->bytes_wire : 0.0, r->epoch_s, r->comm_s);
    }
    fflush(stdout);
}

static void csv_row(FILE *f, const char *label, int size, int epoch, const epoch_result_t *r)
{
    if (!f)
        return;
    char codec[32];
    fprintf(f, "%s,%s,%d,%d,%.6f,%.6f,%.6f,%.0f,%.0f,%.3f,%.3f\n", label,
            get_var("CODEC", codec, sizeof(codec)), size, epoch, r->train_loss, r->test_loss,
            r->test_acc, r->bytes_wire, r->bytes_raw, r->epoch_s, r->comm_s);
    fflush(f);
}

/*
 * Sums every layer's gradients over the ranks, in place. The calls start
 * together (the last layer first: in backpropagation its gradient is ready
 * first, the order DDP uses), so their header rounds overlap instead of
 * queueing one after another; the keys name the tensors for stateful codecs.
 */
static zc_status_t allreduce_gradients(zc_comm_t *comm, mlp_t *m)
{
    zc_request_t *req[2 * MLP_MAX_LAYERS];
    zc_status_t first = ZC_OK;
    int started = 0;
    for (int l = m->nlayers - 1; l >= 0 && first == ZC_OK; l--) {
        mlp_layer_t *L = &m->layer[l];
        /* keys 1, 2 for layer 0's weights and biases, 3, 4 for layer 1's... (0 is "none") */
        first = zc_iallreduce(comm, L->gw, L->gw, (size_t)L->in * (size_t)L->out, ZC_DTYPE_F32,
                              ZC_OP_SUM, 2 * (uint64_t)l + 1, &req[started]);
        if (first == ZC_OK) {
            started++;
            first = zc_iallreduce(comm, L->gb, L->gb, (size_t)L->out, ZC_DTYPE_F32, ZC_OP_SUM,
                                  2 * (uint64_t)l + 2, &req[started]);
            started += first == ZC_OK;
        }
    }
    /* the buffers of calls already started stay in use until they complete, error or not */
    for (int i = 0; i < started; i++) {
        zc_status_t st = zc_wait(&req[i]);
        first = first == ZC_OK ? st : first;
    }
    if (first != ZC_OK)
        fprintf(stderr, "train_fmnist: rank %d: all-reduce of the gradients failed: %s\n",
                zc_comm_rank(comm), zc_status_string(first));
    return first;
}

/* Rank r's part [lo, hi) of n items split over size ranks as evenly as possible. */
static void shard(size_t n, int rank, int size, size_t *lo, size_t *hi)
{
    *lo = n * (size_t)rank / (size_t)size;
    *hi = n * (size_t)(rank + 1) / (size_t)size;
}

/*
 * Evaluates this rank's shard of the test set; sums[0..2] get the loss sum, the
 * correct count and the image count (the caller all-reduces them).
 */
static void evaluate_shard(mlp_t *m, const fmnist_set_t *test, int rank, int size, double *sums)
{
    size_t lo, hi;
    shard(test->count, rank, size, &lo, &hi);
    double loss = 0;
    uint64_t correct = 0;
    mlp_evaluate(m, test->images + lo * FMNIST_PIXELS, test->labels + lo, hi - lo, &loss, &correct);
    sums[0] = loss;
    sums[1] = (double)correct;
    sums[2] = (double)(hi - lo);
}

/*
 * One rank: joins the communicator, trains and evaluates, and checks at the
 * end that every rank holds the same model. Returns the exit status.
 */
static int rank_main(const options_t *o, const data_t *d)
{
    zc_comm_t *comm = NULL;
    mlp_t m = {0};
    float *xs = NULL;
    uint8_t *ys = NULL;
    uint32_t *perm = NULL;
    FILE *csv = NULL;
    int ret = 1;

    /* N ranks share the cores: more BLAS threads than cores only thrash. */
    openblas_set_num_threads(o->blas_threads);

    zc_status_t st = settings ? zc_comm_init_config(settings, &comm) : zc_comm_init(&comm);
    if (st != ZC_OK) {
        fprintf(stderr, "train_fmnist: zc_comm_init failed: %s\n", zc_status_string(st));
        return 1;
    }
    const int rank = zc_comm_rank(comm), size = zc_comm_size(comm);
    if (o->batch < size) {
        if (rank == 0)
            fprintf(stderr, "train_fmnist: a batch of %d cannot be split over %d ranks\n", o->batch,
                    size);
        goto out;
    }
    const size_t steps = d->train.count / (size_t)o->batch;
    if (steps == 0) {
        if (rank == 0)
            fprintf(stderr, "train_fmnist: %zu training images do not fill one batch of %d\n",
                    d->train.count, o->batch);
        goto out;
    }
    const int shard_max = (o->batch + size - 1) / size;
    /* the test set goes through the same buffers, in batches of at least 256 */
    if (mlp_create(o->sizes, o->nsizes, shard_max > 256 ? shard_max : 256, o->seed, &m) < 0)
        goto out;
    xs = malloc((size_t)shard_max * FMNIST_PIXELS * sizeof(float));
    ys = malloc((size_t)shard_max);
    perm = malloc(d->train.count * sizeof(uint32_t));
    if (!xs || !ys || !perm) {
        fprintf(stderr, "train_fmnist: rank %d: out of memory\n", rank);
        goto out;
    }
    if (rank == 0 && o->csv_path) {
        csv = fopen(o->csv_path, "w");
        if (!csv) {
            fprintf(stderr, "train_fmnist: cannot write %s: %s\n", o->csv_path, strerror(errno));
            goto out;
        }
        fprintf(csv, "label,codec,ranks,epoch,train_loss,test_loss,test_acc,bytes_wire,"
                     "bytes_raw,epoch_s,comm_s\n");
    }
    char codec[32];
    const char *label = o->label ? o->label : get_var("CODEC", codec, sizeof(codec));
    progress_t bar = {.on = rank == 0 && (o->progress < 0 ? isatty(STDOUT_FILENO) : o->progress),
                      .last_shown = -1};
    if (rank == 0)
        print_header(o, d, &m, size);

    const double t_start = now_s();
    epoch_result_t r = {0};
    double sums[6];
    evaluate_shard(&m, &d->test, rank, size, sums);
    st = zc_allreduce(comm, sums, sums, 3, ZC_DTYPE_F64, ZC_OP_SUM);
    if (st != ZC_OK) {
        fprintf(stderr, "train_fmnist: rank %d: all-reduce of the test results failed: %s\n", rank,
                zc_status_string(st));
        goto out;
    }
    r.test_loss = sums[0] / sums[2];
    r.test_acc = sums[1] / sums[2];
    if (rank == 0) {
        print_epoch(0, &r);
        csv_row(csv, label, size, 0, &r);
    }

    size_t lo, hi;
    shard((size_t)o->batch, rank, size, &lo, &hi);
    const int n = (int)(hi - lo);
    for (int epoch = 1; epoch <= o->epochs; epoch++) {
        /* every rank draws the same order: the seed and the epoch alone decide it */
        mlp_rng_t rng = {o->seed ^ (0x51ed270b27a7c9e5ull * (uint64_t)epoch)};
        mlp_shuffle(&rng, perm, d->train.count);

        zc_stats_t s0, s1;
        zc_comm_stats(comm, &s0);
        const double t0 = now_s();
        double comm_s = 0, loss_sum = 0;
        bar.last_shown = -1;
        for (size_t step = 0; step < steps; step++) {
            const uint32_t *idx = perm + step * (size_t)o->batch + lo;
            for (int i = 0; i < n; i++) {
                memcpy(xs + (size_t)i * FMNIST_PIXELS,
                       d->train.images + (size_t)idx[i] * FMNIST_PIXELS,
                       FMNIST_PIXELS * sizeof(float));
                ys[i] = d->train.labels[idx[i]];
            }
            loss_sum += mlp_grad(&m, xs, ys, n, 1.0f / (float)o->batch);
            if (o->local_momentum)
                mlp_local_momentum(&m, (float)o->momentum);
            const double tc = now_s();
            if (allreduce_gradients(comm, &m) != ZC_OK)
                goto out;
            comm_s += now_s() - tc;
            /* Loshchilov & Hutter 2017 (SGDR) without restarts: the final accuracy is the
             * settled model's, not one draw of the noise that a constant rate keeps */
            const double done = ((double)(epoch - 1) * steps + step) / ((double)o->epochs * steps);
            const double lr = o->cosine ? o->lr * 0.5 * (1 + cos(M_PI * done)) : o->lr;
            mlp_step(&m, (float)lr, o->local_momentum ? 0.0f : (float)o->momentum);
            /* rank 0's running loss: its shard is a fair sample of the batch */
            progress_show(&bar, epoch, o->epochs, (int)step + 1, (int)steps,
                          loss_sum / ((double)(step + 1) * n));
        }
        r.epoch_s = now_s() - t0;
        r.comm_s = comm_s;
        zc_comm_stats(comm, &s1);

        evaluate_shard(&m, &d->test, rank, size, sums);
        sums[3] = loss_sum;
        sums[4] = (double)(s1.bytes_wire - s0.bytes_wire);
        sums[5] = (double)(s1.bytes_wire_raw - s0.bytes_wire_raw);
        st = zc_allreduce(comm, sums, sums, 6, ZC_DTYPE_F64, ZC_OP_SUM);
        if (st != ZC_OK) {
            fprintf(stderr, "train_fmnist: rank %d: all-reduce of the epoch's results failed: %s\n",
                    rank, zc_status_string(st));
            goto out;
        }
        r.test_loss = sums[0] / sums[2];
        r.test_acc = sums[1] / sums[2];
        r.train_loss = sums[3] / ((double)steps * o->batch);
        r.bytes_wire = sums[4];
        r.bytes_raw = sums[5];
        if (rank == 0) {
            progress_clear(&bar);
            print_epoch(epoch, &r);
            csv_row(csv, label, size, epoch, &r);
        }
        if (!isfinite(r.train_loss)) {
            if (rank == 0)
                fprintf(stderr, "train_fmnist: training diverged (loss %g): lower --lr\n",
                        r.train_loss);
            goto out;
        }
    }

    /* Every rank applied the same sums to the same model: the models must be identical. */
    uint64_t digest[2] = {mlp_digest(&m), mlp_digest(&m)};
    zc_stats_t total;
    st = zc_allreduce(comm, &digest[0], &digest[0], 1, ZC_DTYPE_U64, ZC_OP_MIN);
    if (st == ZC_OK)
        st = zc_allreduce(comm, &digest[1], &digest[1], 1, ZC_DTYPE_U64, ZC_OP_MAX);
    if (st != ZC_OK) {
        fprintf(stderr, "train_fmnist: rank %d: all-reduce of the model digests failed: %s\n", rank,
                zc_status_string(st));
        goto out;
    }
    zc_comm_stats(comm, &total);
    if (rank == 0) {
        printf("final test accuracy %.2f%%, %.1f MiB on the wire for %.1f MiB of f32 ring "
               "traffic (%.1fx), %.1f s; %llu of %llu all-reduces compressed on rank 0\n",
               100 * r.test_acc, r.bytes_wire / (1 << 20), r.bytes_raw / (1 << 20),
               r.bytes_wire > 0 ? r.bytes_raw / r.bytes_wire : 0.0, now_s() - t_start,
               (unsigned long long)total.calls_compressed, (unsigned long long)total.calls);
        printf("model digest %016llx%s\n", (unsigned long long)digest[0],
               size > 1 ? (digest[0] == digest[1] ? ", identical on every rank" : "") : "");
    }
    if (digest[0] != digest[1]) {
        fprintf(stderr,
                "train_fmnist: rank %d: the ranks' models differ (digests %016llx..%016llx)\n",
                rank, (unsigned long long)digest[0], (unsigned long long)digest[1]);
        goto out;
    }
    ret = 0;

out:
    if (csv && fclose(csv) != 0 && ret == 0) {
        fprintf(stderr, "train_fmnist: cannot write %s: %s\n", o->csv_path, strerror(errno));
        ret = 1;
    }
    free(perm);
    free(ys);
    free(xs);
    mlp_destroy(&m);
    zc_comm_destroy(comm);
    return ret;
}

/* ---------------------------------------------------------------- local launch */

/* A loopback port nobody listens on now (bound to port 0, then released). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(a);
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void describe_exit(int rank, int status)
{
    if (WIFEXITED(status))
        fprintf(stderr, "train_fmnist: rank %d exited with status %d\n", rank, WEXITSTATUS(status));
    else if (WIFSIGNALED(status))
        fprintf(stderr, "train_fmnist: rank %d was killed by signal %d (%s)\n", rank,
                WTERMSIG(status), strsignal(WTERMSIG(status)));
}

/*
 * Forks o->ranks ranks, each with the ZIPCCL_* variables of its rank, and waits
 * for them. When one fails, any still running GRACE_S later are killed (they
 * may wait for the dead one until ZIPCCL_TIMEOUT_S otherwise).
 */
static int launch_local(const options_t *o, const data_t *d)
{
    pid_t pids[MAX_RANKS];
    int killed[MAX_RANKS] = {0};
    int port = free_port();
    if (port < 0) {
        fprintf(stderr, "train_fmnist: no free loopback port: %s\n", strerror(errno));
        return 1;
    }
    char root[64], job[64], size_s[16];
    snprintf(root, sizeof(root), "127.0.0.1:%d", port);
    snprintf(job, sizeof(job), "train_fmnist-%ld-%d", (long)getpid(), port);
    snprintf(size_s, sizeof(size_s), "%d", o->ranks);
    if (set_var("ROOT", root) || set_var("JOB_ID", job) || set_var("SIZE", size_s))
        return 1;
    /*
     * UCX peer error handling keeps ranks on one host off shared memory (tcp loopback only,
     * transport/ucx/ucx.h), which made steps 1.5 to 2 times slower here with 4 ranks on 2
     * cores. This launcher already watches its ranks (a rank that dies takes the others
     * down within GRACE_S), so it turns it off unless the caller chose.
     */
    if (!getenv("ZIPCCL_UCX_PEER_ERRORS") && set_var("UCX_PEER_ERRORS", "0"))
        return 1;

    const pid_t parent = getpid();
    int started = 0, failed = 0;
    fflush(NULL); /* or the children print the parent's buffered output again */
    for (; started < o->ranks; started++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "train_fmnist: fork of rank %d failed: %s\n", started, strerror(errno));
            failed = 1;
            break;
        }
        if (pid == 0) {
            /* die with the launcher, and notice if it died before the prctl */
            prctl(PR_SET_PDEATHSIG, SIGKILL);
            if (getppid() != parent)
                _exit(1);
            char rank_s[16];
            snprintf(rank_s, sizeof(rank_s), "%d", started);
            if (set_var("RANK", rank_s))
                _exit(1);
            int rc = rank_main(o, d);
            fflush(NULL);
            _exit(rc);
        }
        pids[started] = pid;
    }

    int running = started;
    double kill_at = failed ? now_s() + GRACE_S : 0;
    while (running > 0) {
        int status;
        pid_t pid = waitpid(-1, &status, WNOHANG);
        if (pid < 0 && errno != EINTR)
            break;
        if (pid <= 0) {
            if (kill_at > 0 && now_s() > kill_at) {
                for (int r = 0; r < started; r++) {
                    if (pids[r] > 0) {
                        fprintf(stderr,
                                "train_fmnist: rank %d still runs %.0f s after a rank failed: "
                                "killing it\n",
                                r, GRACE_S);
                        kill(pids[r], SIGKILL);
                        killed[r] = 1;
                    }
                }
                kill_at = 0;
            }
            struct timespec ts = {0, 20 * 1000 * 1000};
            nanosleep(&ts, NULL);
            continue;
        }
        for (int r = 0; r < started; r++) {
            if (pids[r] != pid)
                continue;
            pids[r] = 0;
            running--;
            if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
                if (!killed[r])
                    describe_exit(r, status);
                if (!failed)
                    kill_at = now_s() + GRACE_S;
                failed = 1;
            }
        }
    }
    return failed;
}

int main(int argc, char **argv)
{
    options_t o;
    data_t d = {0};
    int ret = 1;

    if (parse_options(argc, argv, &o) < 0)
        return 2;
    /* Loaded before forking: the ranks share the pages. */
    if (fmnist_load(o.data_dir, "train", &d.train) < 0)
        return 1;
    if (fmnist_load(o.data_dir, "t10k", &d.test) < 0)
        goto out;
    if (o.train_limit && o.train_limit < d.train.count)
        d.train.count = o.train_limit;
    if (o.test_limit && o.test_limit < d.test.count)
        d.test.count = o.test_limit;

    ret = o.ranks > 0 ? launch_local(&o, &d) : rank_main(&o, &d);
out:
    fmnist_free(&d.train);
    fmnist_free(&d.test);
    zc_comm_config_destroy(settings);
    return ret;
}
