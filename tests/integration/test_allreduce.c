/*
 * zc_allreduce across processes, through the public API (and the log sink, to read the
 * errors the library logs):
 *
 *   raw-N           the uncompressed ring for N ranks: every type x every operation x counts
 *                   0, 1, 7, N-1 and about a million, in place and out of place
 *   ALGO-CODEC[-8]  a compressed path (ring: fp16, bf16, gradiveq, qsgd-int, and qsgd, which
 *                   the ring runs as qsgd-int; allgather and scatter: qsgd, topk, fp16, bf16,
 *                   gradiveq) for N = 1..4 (or 8): f32, f16 and bf16, sum and avg, odd
 *                   counts, against the codec's error bound
 *   unbiased-ALGO   QSGD over allgather, scatter or the ring (qsgd-int): the mean of 200
 *                   calls converges to the exact sum as 1/sqrt(calls)
 *   zero-and-args   zero counts with and without buffers, bad arguments
 *   mismatch[-compressed]  ranks that disagree on count, type or operation
 *   kill[-compressed]      a rank killed mid-collective
 *   nonblocking[-thread]   several zc_iallreduce in flight, zc_wait and zc_test polling
 *   env-styles      torchrun, Open MPI and Slurm variables instead of ZIPCCL_*
 *   hier-CASE       CASE with ZIPCCL_TOPOLOGY=shards: its 4-rank runs as 2 hosts of 2
 *                   (ZIPCCL_HOST_ID, rank_check.h), the others flat; same checks
 *   leader-CASE     the same with ZIPCCL_TOPOLOGY=leader (the host's leader alone between
 *                   hosts), auto-CASE with ZIPCCL_TOPOLOGY=auto (the variant model per call)
 *   stats           ZIPCCL_STATS_FILE written and consistent with zc_comm_stats; a rank
 *                   that named its file with zc_comm_set_stats_file writes there instead
 *
 * Usage: test_allreduce CASE. Exits 0 when the case passed; otherwise the harness or the
 * failing check says why on stderr.
 *
 * How results are checked: every rank can regenerate every rank's input (a hash of the
 * seed, a stream number, the rank and the index), so rank r checks the elements i with
 * i % N == r against a reference computed in double from all N inputs (exact for integers),
 * and the ranks prove that they hold bit-identical results by all-reducing the FNV-1a hashes
 * of theirs, batched (see ledger_check), over the raw u64 path that raw-N checks exactly.
 * Norm-wise checks add every rank's partial sums of squares with an f64 SUM.
 *
 * Unit roundoffs: u = 2^-24 (f32), 2^-53 (f64), 2^-11 (f16), 2^-8 (bf16); gamma(n) =
 * n u / (1 - n u) bounds n roundings (Higham, Accuracy and Stability of Numerical
 * Algorithms, 2nd ed., Lemma 3.1 and section 4.2: |fl(sum) - sum| <= gamma(n-1) sum |x|).
 */
#include "harness.h"
#include "rank_check.h"

#include "common/half.h"
#include "common/timer.h"

#include <zipccl/zipccl.h>

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define SEED 20240917u
#define BIG_COUNT 1000003

/* ---- small helpers ------------------------------------------------------------------------ */

static double elapsed_s(uint64_t start)
{
    return (double)(zc_time_ns() - start) / 1e9;
}

static int logged_has(const char *text)
{
    return strstr(logged, text) != NULL;
}

/* splitmix64's finalizer: a bijection that mixes every input bit into every output bit. */
static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* The key of one rank's input in one stream (a call of the test). */
static uint64_t input_key(uint64_t stream, int rank)
{
    return mix64(SEED ^ mix64(stream * 0x100000001B3ull + 0x9E3779B97F4A7C15ull * (uint64_t)rank));
}

/* 64 random bits for element @p i of the input keyed @p key. */
static uint64_t draw(uint64_t key, uint64_t i)
{
    return mix64(key + 0x9E3779B97F4A7C15ull * (i + 1));
}

/* Uniform in [0, 1) from the top 53 bits. */
static double unit(uint64_t h)
{
    return (double)(h >> 11) * 0x1p-53;
}

static uint64_t fnv1a64(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static double gamma_n(int n, double u)
{
    return n * u / (1 - n * u);
}

/* ---- element types ------------------------------------------------------------------------ */

static const zc_dtype_t all_dtypes[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16, ZC_DTYPE_F64,
                                        ZC_DTYPE_I8,  ZC_DTYPE_U8,  ZC_DTYPE_I32,  ZC_DTYPE_U32,
                                        ZC_DTYPE_I64, ZC_DTYPE_U64};
static const zc_redop_t all_ops[] = {ZC_OP_SUM, ZC_OP_PROD, ZC_OP_MIN, ZC_OP_MAX, ZC_OP_AVG};

static int is_float(zc_dtype_t dt)
{
    return dt == ZC_DTYPE_F32 || dt == ZC_DTYPE_F64 || dt == ZC_DTYPE_F16 || dt == ZC_DTYPE_BF16;
}

static int is_signed_int(zc_dtype_t dt)
{
    return dt == ZC_DTYPE_I8 || dt == ZC_DTYPE_I32 || dt == ZC_DTYPE_I64;
}

/* Unit roundoff of a floating type. */
static double unit_roundoff(zc_dtype_t dt)
{
    switch (dt) {
    case ZC_DTYPE_F16: return 0x1p-11;
    case ZC_DTYPE_BF16: return 0x1p-8;
    case ZC_DTYPE_F64: return 0x1p-53;
    default: return 0x1p-24;
    }
}

/* Largest error of one rounding in the subnormal range: half the smallest subnormal. */
static double underflow_error(zc_dtype_t dt)
{
    switch (dt) {
    case ZC_DTYPE_F16: return 0x1p-25;
    case ZC_DTYPE_BF16: return 0x1p-134;
    case ZC_DTYPE_F64: return 0; /* 2^-1075, below any double we compare with */
    default: return 0x1p-150;
    }
}

/* Explicit mantissa bits. */
static int mantissa_bits(zc_dtype_t dt)
{
    switch (dt) {
    case ZC_DTYPE_F16: return 10;
    case ZC_DTYPE_BF16: return 7;
    case ZC_DTYPE_F64: return 52;
    default: return 23;
    }
}

static double get_float(zc_dtype_t dt, const void *buf, size_t i)
{
    const char *p = buf;
    switch (dt) {
    case ZC_DTYPE_F16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return zc_f16_to_f32(h);
    }
    case ZC_DTYPE_BF16: {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        return zc_bf16_to_f32(h);
    }
    case ZC_DTYPE_F64: {
        double d;
        memcpy(&d, p + 8 * i, 8);
        return d;
    }
    default: {
        float f;
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    }
}

/* Stores @p v (rounded to f32 first, then to the half type) and returns what was stored. */
static double put_float(zc_dtype_t dt, void *buf, size_t i, double v)
{
    char *p = buf;
    switch (dt) {
    case ZC_DTYPE_F16: {
        uint16_t h = zc_f32_to_f16((float)v);
        memcpy(p + 2 * i, &h, 2);
        return zc_f16_to_f32(h);
    }
    case ZC_DTYPE_BF16: {
        uint16_t h = zc_f32_to_bf16((float)v);
        memcpy(p + 2 * i, &h, 2);
        return zc_bf16_to_f32(h);
    }
    case ZC_DTYPE_F64: memcpy(p + 8 * i, &v, 8); return v;
    default: {
        float f = (float)v;
        memcpy(p + 4 * i, &f, 4);
        return f;
    }
    }
}

static uint64_t width_mask(zc_dtype_t dt)
{
    size_t bytes = zc_dtype_bytes(dt);
    return bytes == 8 ? ~UINT64_C(0) : (UINT64_C(1) << (8 * bytes)) - 1;
}

static uint64_t get_bits(zc_dtype_t dt, const void *buf, size_t i)
{
    size_t bytes = zc_dtype_bytes(dt);
    uint64_t v = 0;
    memcpy(&v, (const char *)buf + bytes * i, bytes); /* little-endian host */
    return v;
}

static void put_bits(zc_dtype_t dt, void *buf, size_t i, uint64_t v)
{
    size_t bytes = zc_dtype_bytes(dt);
    memcpy((char *)buf + bytes * i, &v, bytes);
}

/* The width-bit pattern @p v as a signed integer. */
static int64_t sign_extend(zc_dtype_t dt, uint64_t v)
{
    unsigned shift = 64 - 8 * (unsigned)zc_dtype_bytes(dt);
    return (int64_t)(v << shift) >> shift;
}

/* ---- a rank's communicator and the checks every case shares -------------------------------- */

static zc_comm_t *comm;
static int nranks;

/*
 * Set by rank 0 (shared memory, mapped before the fork) when its bootstrap could not listen:
 * the harness picks a free port and releases it, and on a busy machine another process may
 * take it before rank 0 binds it. Such a run is retried with a new port (run_ranks).
 */
static volatile int *root_port_taken;

/*
 * Bit-identical results across ranks. Each checked result's FNV-1a hash goes into a ledger;
 * ledger_check all-reduces the pairs (h, ~h) with u64 MAX, which yields max h and ~min h, so
 * every rank learns whether all ranks hashed the same for each entry. One all-reduce per
 * batch rather than two per call: with 4 ranks busy-polling 2 cores a small all-reduce costs
 * tens of milliseconds.
 */
#define LEDGER_MAX 256

static uint64_t ledger[2 * LEDGER_MAX];
static char ledger_what[LEDGER_MAX][200];
static size_t ledger_len;

static int ledger_check(void)
{
    uint64_t all[2 * LEDGER_MAX];
    size_t n = ledger_len;
    ledger_len = 0;
    if (n == 0)
        return 0;
    memcpy(all, ledger, 2 * n * sizeof(uint64_t));
    zc_status_t status = zc_allreduce(comm, all, all, 2 * n, ZC_DTYPE_U64, ZC_OP_MAX);
    CHECK(status == ZC_OK, "u64 max of %zu result hashes: %s", n, zc_status_string(status));
    for (size_t k = 0; k < n; k++) {
        uint64_t hmax = all[2 * k], hmin = ~all[2 * k + 1];
        CHECK(hmax == hmin,
              "%s: the ranks' results differ: hash %016llx here, %016llx max, %016llx min",
              ledger_what[k], (unsigned long long)ledger[2 * k], (unsigned long long)hmax,
              (unsigned long long)hmin);
    }
    return 0;
}

/* Records the hash of a result for ledger_check (which runs when the ledger is full). */
static int same_on_every_rank(const void *buf, size_t bytes, const char *what)
{
    uint64_t h = bytes ? fnv1a64(buf, bytes) : 0;
    ledger[2 * ledger_len] = h;
    ledger[2 * ledger_len + 1] = ~h;
    snprintf(ledger_what[ledger_len], sizeof(ledger_what[0]), "%s", what);
    return ++ledger_len == LEDGER_MAX ? ledger_check() : 0;
}

static int start_rank(int rank, int size)
{
    my_rank = rank;
    nranks = size;
    logged[0] = '\0';
    zc_log_set_sink(capture_sink, NULL);
    zc_harness_step("zc_comm_init");
    hier_set_host(rank, size);
    zc_status_t status = zc_comm_init(&comm);
    if (status == ZC_ERR_IO && rank == 0 && logged_has("cannot listen on port"))
        *root_port_taken = 1;
    CHECK(status == ZC_OK, "zc_comm_init: %s", zc_status_string(status));
    CHECK(zc_comm_rank(comm) == rank && zc_comm_size(comm) == size,
          "the communicator says rank %d of %d", zc_comm_rank(comm), zc_comm_size(comm));
    return 0;
}

/* Checks the hashes still in the ledger, then destroys the communicator. */
static int end_rank(void)
{
    zc_harness_step("checking result hashes");
    if (ledger_check())
        return 1;
    zc_harness_step("zc_comm_destroy");
    zc_comm_destroy(comm);
    comm = NULL;
    return 0;
}

/* zc_harness_run, again (up to 3 times) when the root's port was taken before rank 0 bound it. */
static int run_ranks(const zc_harness_opts_t *o, zc_rank_main_fn fn, void *arg)
{
    int rc = -1;
    for (int attempt = 0; attempt < 3; attempt++) {
        *root_port_taken = 0;
        rc = zc_harness_run(o, fn, arg);
        if (rc == 0 || !*root_port_taken)
            break;
        fprintf(stderr, "another process took the root's port before rank 0 bound it: again\n");
    }
    return rc;
}

/* Adds @p n doubles over every rank, in place. */
static int allsum(double *v, size_t n)
{
    zc_status_t status = zc_allreduce(comm, v, v, n, ZC_DTYPE_F64, ZC_OP_SUM);
    CHECK(status == ZC_OK, "f64 sum of %zu check values: %s", n, zc_status_string(status));
    return 0;
}

static int allmax(double *v, size_t n)
{
    zc_status_t status = zc_allreduce(comm, v, v, n, ZC_DTYPE_F64, ZC_OP_MAX);
    CHECK(status == ZC_OK, "f64 max of %zu check values: %s", n, zc_status_string(status));
    return 0;
}

static int get_stats(zc_stats_t *s)
{
    zc_status_t status = zc_comm_stats(comm, s);
    CHECK(status == ZC_OK, "zc_comm_stats: %s", zc_status_string(status));
    return 0;
}

/* Two buffers of @p bytes (at least 1, so that count 0 still has valid pointers). */
static int alloc_pair(size_t bytes, void **send_p, void **recv_p)
{
    *send_p = malloc(bytes ? bytes : 1);
    *recv_p = malloc(bytes ? bytes : 1);
    CHECK(*send_p && *recv_p, "out of memory for %zu bytes", bytes);
    return 0;
}

/* ---- raw path: every type and operation, exact or within the summation bound --------------- */

/*
 * Raw inputs. Integers: all bits random, so sums and products wrap. Floats: a random sign
 * and mantissa with the magnitude in [0.5, 2), so that any product of 8 stays normal in f16
 * and every f16/bf16/f32 sum of 8 is exact in double (all of them are multiples of the
 * type's ulp at 0.5 and below 16). f64 sums and products are not exact in double: their
 * reference carries gamma(N-1) of f64 itself.
 */
static double raw_float(zc_dtype_t dt, uint64_t h)
{
    int p = mantissa_bits(dt);
    double m = 1.0 + (double)((h >> 2) & ((UINT64_C(1) << p) - 1)) * ldexp(1.0, -p);
    double v = (h >> 1) & 1 ? m : m * 0.5;
    return h & 1 ? -v : v;
}

static void raw_fill(zc_dtype_t dt, void *buf, size_t count, uint64_t key)
{
    for (size_t i = 0; i < count; i++) {
        uint64_t h = draw(key, i);
        if (is_float(dt))
            put_float(dt, buf, i, raw_float(dt, h));
        else
            put_bits(dt, buf, i, h);
    }
}

/* Checks element @p i of a raw float result against the double reference of every input. */
static int raw_check_float(zc_dtype_t dt, zc_redop_t op, const uint64_t *keys, size_t i, double got,
                           const char *what)
{
    int n = nranks;
    double sum = 0, abs_sum = 0, prod = 1, lo = INFINITY, hi = -INFINITY;
    for (int r = 0; r < n; r++) {
        double x = raw_float(dt, draw(keys[r], i));
        sum += x;
        abs_sum += fabs(x);
        prod *= x;
        lo = fmin(lo, x);
        hi = fmax(hi, x);
    }
    double u = unit_roundoff(dt), ref, tol;
    /* N-1 roundings in the type (f16/bf16 round each partial sum back), the reference's own
     * rounding for f64, and underflow (not reached with these magnitudes, but honest). */
    double sum_tol =
        (gamma_n(n - 1, u) + gamma_n(n - 1, 0x1p-53)) * abs_sum + (n - 1) * underflow_error(dt);
    switch (op) {
    case ZC_OP_SUM:
        ref = sum;
        tol = sum_tol;
        break;
    case ZC_OP_AVG: {
        /* the sum divided once: in the type, or in f32 and then rounded to f16/bf16 */
        double div_u = u + (dt == ZC_DTYPE_F16 || dt == ZC_DTYPE_BF16 ? 0x1p-24 : 0);
        ref = sum / n;
        tol = sum_tol / n + div_u * (fabs(ref) + sum_tol / n) + underflow_error(dt);
        break;
    }
    case ZC_OP_PROD:
        ref = prod;
        tol = (gamma_n(n - 1, u) + gamma_n(n - 1, 0x1p-53)) * fabs(prod);
        break;
    case ZC_OP_MIN:
        ref = lo;
        tol = 0;
        break;
    default:
        ref = hi;
        tol = 0;
        break;
    }
    CHECK(fabs(got - ref) <= tol,
          "%s: element %zu is %.17g, expected %.17g within %.3g (error %.3g)", what, i, got, ref,
          tol, fabs(got - ref));
    return 0;
}

static int raw_check_int(zc_dtype_t dt, zc_redop_t op, const uint64_t *keys, size_t i, uint64_t got,
                         const char *what)
{
    int n = nranks, sgn = is_signed_int(dt);
    uint64_t mask = width_mask(dt), sum = 0, prod = 1, lo = 0, hi = 0, ref;
    for (int r = 0; r < n; r++) {
        uint64_t x = draw(keys[r], i) & mask;
        sum += x;
        prod *= x;
        int below = sgn ? sign_extend(dt, x) < sign_extend(dt, lo) : x < lo;
        int above = sgn ? sign_extend(dt, x) > sign_extend(dt, hi) : x > hi;
        if (r == 0 || below)
            lo = x;
        if (r == 0 || above)
            hi = x;
    }
    switch (op) {
    case ZC_OP_SUM: ref = sum; break;
    case ZC_OP_PROD: ref = prod; break;
    case ZC_OP_MIN: ref = lo; break;
    case ZC_OP_MAX: ref = hi; break;
    default:
        /* the wrapped sum divided by N, truncated toward zero (zc_reduce_avg) */
        ref = sgn ? (uint64_t)(sign_extend(dt, sum & mask) / n) : (sum & mask) / (uint64_t)n;
        break;
    }
    ref &= mask;
    CHECK((got & mask) == ref, "%s: element %zu is 0x%llx, expected 0x%llx", what, i,
          (unsigned long long)(got & mask), (unsigned long long)ref);
    return 0;
}

static int raw_one(zc_dtype_t dt, zc_redop_t op, size_t count, int in_place, uint64_t stream)
{
    char what[160];
    size_t bytes = count * zc_dtype_bytes(dt);
    uint64_t keys[ZC_HARNESS_MAX_RANKS];
    void *send, *recv;
    snprintf(what, sizeof(what), "raw %zu x %s %s%s, %d ranks", count, zc_dtype_name(dt),
             zc_redop_name(op), in_place ? " in place" : "", nranks);
    zc_harness_step("%s", what);
    for (int r = 0; r < nranks; r++)
        keys[r] = input_key(stream, r);
    if (alloc_pair(bytes, &send, &recv))
        return 1;
    raw_fill(dt, send, count, keys[my_rank]);
    /* in place: the input is copied into the receive buffer, which is passed as both */
    memcpy(recv, send, bytes);
    if (!in_place)
        memset(recv, 0xA5, bytes);
    zc_status_t status = zc_allreduce(comm, in_place ? recv : send, recv, count, dt, op);
    int rc = 0;
    if (status != ZC_OK) {
        fprintf(stderr, "rank %d: %s: %s\n", my_rank, what, zc_status_string(status));
        rc = 1;
    }
    for (size_t i = (size_t)my_rank; rc == 0 && i < count; i += (size_t)nranks) {
        if (is_float(dt))
            rc = raw_check_float(dt, op, keys, i, get_float(dt, recv, i), what);
        else
            rc = raw_check_int(dt, op, keys, i, get_bits(dt, recv, i), what);
    }
    if (rc == 0)
        rc = same_on_every_rank(recv, bytes, what);
    free(send);
    free(recv);
    return rc;
}

static int raw_rank(int rank, int size, void *arg)
{
    if (start_rank(rank, size))
        return 1;
    size_t counts[] = {0, 1, 7, (size_t)size - 1, BIG_COUNT};
    uint64_t stream = 0;
    for (size_t d = 0; d < ZC_ARRAY_SIZE(all_dtypes); d++) {
        for (size_t o = 0; o < ZC_ARRAY_SIZE(all_ops); o++) {
            for (size_t c = 0; c < ZC_ARRAY_SIZE(counts); c++) {
                stream++;
                if (c == 3 && (counts[c] == 0 || counts[c] == 1 || counts[c] == 7))
                    continue; /* N-1 repeats a count already run */
                /* in place for every other call, so each type and op sees both */
                if (raw_one(all_dtypes[d], all_ops[o], counts[c], (int)((c + o) & 1), stream))
                    return 1;
            }
        }
    }
    /* counts are tallied over the whole run: the raw path compresses nothing */
    zc_stats_t s;
    if (get_stats(&s))
        return 1;
    CHECK(s.calls_compressed == 0, "%llu of %llu raw calls were compressed",
          (unsigned long long)s.calls_compressed, (unsigned long long)s.calls);
    if (end_rank())
        return 1;
    return 0;
}

static int case_raw(int n)
{
    /* ZIPCCL_CODEC=none: whatever the default, nothing is compressed */
    char *const env[] = {"ZIPCCL_CODEC=none", NULL};
    zc_harness_opts_t o = {.nranks = n, .deadline_s = 280, .env = env};
    return run_ranks(&o, raw_rank, NULL) != 0;
}

/* ---- compressed paths ---------------------------------------------------------------------- */

/*
 * Compressed inputs: rank r draws uniformly from [-a_r, a_r] with a_r = 1 + r/4 (exact in
 * every half type), so a payload credited to the wrong rank or dropped shows, and
 * M_r = a_r bounds every bucket scale of rank r whatever the chunking, sharding and
 * bucketing of the algorithm.
 */
static double amplitude(int rank)
{
    return 1.0 + rank / 4.0;
}

static double comp_value(zc_dtype_t dt, uint64_t key, int rank, size_t i)
{
    double v = (float)(amplitude(rank) * (2 * unit(draw(key, i)) - 1));
    if (dt == ZC_DTYPE_F16)
        return zc_f16_to_f32(zc_f32_to_f16((float)v));
    if (dt == ZC_DTYPE_BF16)
        return zc_bf16_to_f32(zc_f32_to_bf16((float)v));
    return v;
}

static void comp_fill(zc_dtype_t dt, void *buf, size_t count, uint64_t key, int rank)
{
    for (size_t i = 0; i < count; i++)
        put_float(dt, buf, i, comp_value(dt, key, rank, i));
}

typedef struct comp_case {
    const char *algo;
    const char *codec;
    int sizes[6]; /* rank counts to run, 0-terminated */
} comp_case_t;

/* What one rank knows about the case it runs. */
typedef struct comp_ctx {
    const comp_case_t *cc;
    zc_codec_id_t codec;
    int scatter, ring;
    double levels;  /* QSGD s */
    double density; /* top-k rho */
    size_t chunk_bytes;
} comp_ctx_t;

#define QSGD_BITS 4 /* s = 7 */
#define TOPK_DENSITY 0.05
#define GRADIVEQ_SLICE 64
#define GRADIVEQ_DIM 4
#define CHUNK_BYTES (1u << 20)

/*
 * The bound checked for one element of a stateless codec's result (per element; S_i =
 * sum_r |x_r[i]|, M = sum_r M_r; u_c the codec's unit roundoff, u32 = 2^-24, u_out the
 * result type's):
 *
 * - fp16, bf16 (docs/codecs.md: round to nearest even, reduce rounds once): each rank's input
 *   is rounded once (u_c |x_r|); partial sums are rounded again by each reduce of the ring or
 *   the scatter owner's re-encode, at most N more roundings of values up to S_i(1+u_c)^k;
 *   decoding is exact and the f32 accumulation adds N+2 roundings of u32. So
 *   |err| <= ((2N+1) u_c + (N+2) u32) (1+u_c)^(2N+2) S_i + (2N+2) * underflow(codec).
 * - qsgd with the max scale (docs/codecs.md, "qsgd"): a value of a bucket with scale m
 *   decodes to k m / s with |k - |v| s / m| < 1, so its error is below m / s <= M_r / s, plus
 *   two f32 roundings of k m / s (2 u32 M_r). allgather sums N such estimates; scatter's
 *   owner re-encodes the sum of its shard, whose values stay below M (1 + 1/s + 2 u32): one
 *   more error of at most that scale over s. Then N+2 f32 roundings of the accumulator.
 * - gradiveq, first call of a tensor: version 0 carries raw f32 (docs/codecs.md), so the
 *   result is the f32 sum: (N+2) u32 S_i.
 * Then the result is stored in its type: u_out (|exact| + err), and avg divides by N in f32.
 * The reference in double is exact to gamma(N-1) of f64.
 */
static double comp_bound(const comp_ctx_t *x, zc_dtype_t dt, zc_redop_t op, double abs_sum,
                         double exact)
{
    int n = nranks;
    double u32 = 0x1p-24, err = 0, big_m = 0;
    for (int r = 0; r < n; r++)
        big_m += amplitude(r);
    switch (x->codec) {
    case ZC_CODEC_FP16:
    case ZC_CODEC_BF16: {
        zc_dtype_t half = x->codec == ZC_CODEC_FP16 ? ZC_DTYPE_F16 : ZC_DTYPE_BF16;
        double uc = unit_roundoff(half);
        err = ((2 * n + 1) * uc + (n + 2) * u32) * pow(1 + uc, 2 * n + 2) * abs_sum +
              (2 * n + 2) * underflow_error(half);
        break;
    }
    case ZC_CODEC_QSGD_INT: {
        double max_m = 0;
        for (int r = 0; r < n; r++)
            max_m = fmax(max_m, amplitude(r));
        err = n * max_m / x->levels;
        err += 2 * u32 * (abs_sum + err);
        err += (n + 2) * u32 * (abs_sum + err);
        break;
    }
    case ZC_CODEC_QSGD: {
        double s = x->levels, once = 1 / s + 2 * u32;
        err = once * big_m;
        if (x->scatter)
            err += once * big_m * (1 + once);
        err += (n + 2) * u32 * (abs_sum + err);
        break;
    }
    default: /* gradiveq, version 0 */ err = (n + 2) * u32 * abs_sum; break;
    }
    err += gamma_n(n - 1, 0x1p-53) * abs_sum;
    double uo = unit_roundoff(dt);
    if (op == ZC_OP_AVG)
        return err / n + (uo + u32) * (fabs(exact) / n + err / n) + underflow_error(dt);
    return err + uo * (fabs(exact) + err) + underflow_error(dt);
}

/* The largest error / bound seen by this rank in a compressed case, for the log. */
static double worst_ratio;

/* Checks rank my_rank's share of a stateless codec's (or gradiveq's first) result. */
static int comp_check_bound(const comp_ctx_t *x, zc_dtype_t dt, zc_redop_t op, const void *recv,
                            size_t count, const uint64_t *keys, const char *what)
{
    for (size_t i = (size_t)my_rank; i < count; i += (size_t)nranks) {
        double exact = 0, abs_sum = 0;
        for (int r = 0; r < nranks; r++) {
            double v = comp_value(dt, keys[r], r, i);
            exact += v;
            abs_sum += fabs(v);
        }
        double ref = op == ZC_OP_AVG ? exact / nranks : exact;
        double got = get_float(dt, recv, i);
        double tol = comp_bound(x, dt, op, abs_sum, exact);
        worst_ratio = fmax(worst_ratio, fabs(got - ref) / tol);
        CHECK(fabs(got - ref) <= tol,
              "%s: element %zu is %.9g, expected %.9g within %.3g (error %.3g, %.2f of the bound)",
              what, i, got, ref, tol, fabs(got - ref), fabs(got - ref) / tol);
    }
    return 0;
}

/*
 * Parts an algorithm may cut one rank's tensor into (chunks of each shard or segment), for
 * top-k's kept counts: per part of c values k = max(1, round(rho c)), within 10%.
 */
static double topk_parts(const comp_ctx_t *x, size_t count)
{
    return (double)nranks * ((double)count * 4 / (double)x->chunk_bytes + 2);
}

/*
 * Top-k, first call of a tensor (empty residuals): every rank sends some of its own values
 * unchanged (f32 values, docs/codecs.md "topk"), so every element of the result is the f32
 * sum of the inputs of some subset R of the ranks (scatter's owner re-sends a top-k of the
 * shard sums: again a subset sum, or 0). Checked: such a subset exists for every element
 * (|got - sum_R x| <= |R| u32 sum_R |x| + u_out |got|), and the number of nonzero elements
 * lies between what the selection can keep: at least 90% of one rank's k, at most N times
 * 110% of k, summed over the parts the algorithm may encode separately.
 */
static int topk_check_first(const comp_ctx_t *x, zc_dtype_t dt, zc_redop_t op, const void *recv,
                            size_t count, const uint64_t *keys, const char *what)
{
    double nnz = 0, xs[ZC_HARNESS_MAX_RANKS];
    double uo = unit_roundoff(dt), u32 = 0x1p-24;
    for (size_t i = (size_t)my_rank; i < count; i += (size_t)nranks) {
        for (int r = 0; r < nranks; r++)
            xs[r] = comp_value(dt, keys[r], r, i);
        double got = get_float(dt, recv, i), best = INFINITY;
        int found = 0;
        for (unsigned mask = 0; mask < (1u << nranks) && !found; mask++) {
            double s = 0, a = 0;
            int members = 0;
            for (int r = 0; r < nranks; r++) {
                if (mask >> r & 1) {
                    s += xs[r];
                    a += fabs(xs[r]);
                    members++;
                }
            }
            double tol = members * u32 * a + uo * fabs(got) + underflow_error(dt);
            if (op == ZC_OP_AVG) {
                s /= nranks;
                tol = tol / nranks + (uo + u32) * fabs(s) + underflow_error(dt);
            }
            found = fabs(got - s) <= tol;
            best = fmin(best, fabs(got - s));
        }
        CHECK(found,
              "%s: element %zu is %.9g, not the sum of any subset of the ranks' inputs "
              "(closest subset sum is %.3g away)",
              what, i, got, best);
        nnz += got != 0;
    }
    if (allsum(&nnz, 1))
        return 1;
    double k = fmax(1, round(x->density * (double)count)), parts = topk_parts(x, count);
    double lo = fmin((double)count, 0.9 * x->density * (double)count - parts);
    double hi = nranks * (1.1 * x->density * (double)count + 2 * parts);
    CHECK(count == 0 || (nnz >= fmax(1, lo) && nnz <= hi),
          "%s: %.0f nonzero values, expected %.0f..%.0f (k = %.0f per rank)", what, nnz,
          fmax(1, lo), hi, k);
    return 0;
}

/*
 * Top-k with error feedback over several calls (key 1, the first tensor of the
 * communicator, so zc_stats_t.residual_norm holds only its residuals). With sent_t =
 * x_t + res_{t-1} - res_t on every rank (docs/codecs.md, "Error feedback"), the sum of the
 * results of calls 1..T is the sum of the inputs less the last residuals:
 *   || sum_t y_t - sum_t exact_t || <= sum_r ||res_r,T||
 *   || y_t - exact_t ||             <= sum_r (||res_r,t-1|| + ||res_r,t||)
 * up to f32 rounding of the residual updates and sums, (T + N + 2) u32 per value. With
 * scatter the owner of each shard re-encodes the shard's sum with a residual of its own,
 * which enters the same identities; a rank's residual_norm is then sqrt(a^2 + b^2) of its
 * contribution residual a and owner residual b, and a + b <= sqrt(2) sqrt(a^2 + b^2), so the
 * bounds carry a factor sqrt(2).
 */
static int topk_feedback(const comp_ctx_t *x)
{
    const size_t count = 20011;
    const int calls = 4;
    float *send = malloc(count * 4), *recv = malloc(count * 4);
    double *cum_got = calloc(count, sizeof(double)), *cum_exact = calloc(count, sizeof(double));
    double prev_res = 0, slack_base = 0;
    CHECK(send && recv && cum_got && cum_exact, "out of memory");
    for (int t = 0; t < calls; t++) {
        uint64_t keys[ZC_HARNESS_MAX_RANKS];
        char what[128];
        snprintf(what, sizeof(what), "top-k error feedback, call %d of %zu x f32, %d ranks", t,
                 count, nranks);
        zc_harness_step("%s", what);
        for (int r = 0; r < nranks; r++)
            keys[r] = input_key(9000 + (uint64_t)t, r);
        comp_fill(ZC_DTYPE_F32, send, count, keys[my_rank], my_rank);
        zc_status_t status = zc_allreduce_key(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM, 1);
        CHECK(status == ZC_OK, "%s: %s", what, zc_status_string(status));
        if (same_on_every_rank(recv, count * 4, what))
            return 1;
        zc_stats_t st;
        if (get_stats(&st))
            return 1;
        /* [0] ||y - exact||^2 (share), [1] ||cum_got - cum_exact||^2, [2] ||S||^2, [3] res */
        double v[4] = {0, 0, 0, st.residual_norm};
        for (size_t i = (size_t)my_rank; i < count; i += (size_t)nranks) {
            double exact = 0, abs_sum = 0;
            for (int r = 0; r < nranks; r++) {
                double xv = comp_value(ZC_DTYPE_F32, keys[r], r, i);
                exact += xv;
                abs_sum += fabs(xv);
            }
            cum_got[i] += recv[i];
            cum_exact[i] += exact;
            v[0] += (recv[i] - exact) * (recv[i] - exact);
            v[1] += (cum_got[i] - cum_exact[i]) * (cum_got[i] - cum_exact[i]);
            v[2] += abs_sum * abs_sum;
        }
        if (allsum(v, 4))
            return 1;
        slack_base += sqrt(v[2]);
        v[3] *= x->scatter ? sqrt(2) : 1;
        double slack = (calls + nranks + 2) * 0x1p-24 * (slack_base + v[3] + prev_res);
        CHECK(v[3] > 0, "%s: no residual after top-k at density %g", what, x->density);
        CHECK(sqrt(v[0]) <= prev_res + v[3] + slack,
              "%s: ||result - exact|| = %.6g exceeds the residual norms %.6g + %.6g (+ %.3g)", what,
              sqrt(v[0]), prev_res, v[3], slack);
        CHECK(sqrt(v[1]) <= v[3] + slack,
              "%s: ||sum of results - sum of inputs|| = %.6g exceeds the residual norm %.6g "
              "(+ %.3g)",
              what, sqrt(v[1]), v[3], slack);
        prev_res = v[3];
    }
    free(send);
    free(recv);
    free(cum_got);
    free(cum_exact);
    return 0;
}

/*
 * GradiVeQ after its basis (f32). Inputs are two sinusoids, x_r[p] = sum_m a_rm cos(w_m p +
 * phi_rm): any K consecutive values of such a signal lie in the 4-dimensional space V spanned
 * by cos(w_m i) and sin(w_m i), i < K, whatever the offset of the slice in its part. The first
 * call (phases 0, so amplitudes add up) carries raw values and teaches every part's basis from
 * the sum; with ZIPCCL_GRADIVEQ_DIM=4 the basis spans V, up to rounding. Later calls lie in V
 * again plus noise n_r of known amplitude; the projection error of each slice is
 * (I - U U^T)(sum_r x_r - mu) (docs/codecs.md, "gradiveq"), so over the whole tensor
 *   || result - exact || <= || sum_r (x_r - s_r) || + slack
 * where s_r is the exact sinusoid and x_r - s_r the noise plus the f32 rounding of the input.
 * slack bounds rounding (u32 = 2^-24 each): U in f32 (2 sqrt(K d)), the encoding sgemm
 * (sqrt(d) K), the decoding sgemm ((d + 1) sqrt(d)), N sums and the mean's shares, and N
 * payload reduces on the ring and at the scatter owner (which adds payloads with
 * zc_codec_reduce rather than projecting twice), applied to
 * ||sum_r |x_r||| + ||mu||, where ||mu|| tiled over the tensor is at most sqrt(count) max|L|
 * (mu is a mean of slices of the first sum L).
 */
static double sinus(int rank, int call, size_t i)
{
    static const double w[2] = {2 * M_PI / 7.31, 2 * M_PI / 3.17};
    double v = 0;
    for (int m = 0; m < 2; m++) {
        uint64_t h = draw(input_key(7000 + (uint64_t)call * 16 + (uint64_t)m, rank), 0);
        double a = 0.5 + unit(h), phi = call == 0 ? 0 : 2 * M_PI * unit(mix64(h));
        v += a * cos(w[m] * (double)i + phi);
    }
    return v;
}

static float gradiveq_input(int rank, int call, size_t i, double noise)
{
    double n = noise * (2 * unit(draw(input_key(7500 + (uint64_t)call, rank), i)) - 1);
    return (float)(sinus(rank, call, i) + n);
}

static int gradiveq_projection(const comp_ctx_t *x, size_t count, uint64_t key)
{
    static const double noise[3] = {0, 0, 1e-2};
    float *send = malloc(count * 4), *recv = malloc(count * 4);
    double learn_max = 0;
    CHECK(send && recv, "out of memory");
    for (int t = 0; t < 3; t++) {
        char what[128];
        snprintf(what, sizeof(what), "gradiveq call %d of %zu x f32 (noise %g), %d ranks", t, count,
                 noise[t], nranks);
        zc_harness_step("%s", what);
        for (size_t i = 0; i < count; i++)
            send[i] = gradiveq_input(my_rank, t, i, noise[t]);
        zc_status_t status =
            zc_allreduce_key(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM, key);
        CHECK(status == ZC_OK, "%s: %s", what, zc_status_string(status));
        if (same_on_every_rank(recv, count * 4, what))
            return 1;
        /* [0] ||err||^2, [1] ||sum_r (x_r - s_r)||^2, [2] ||sum_r |x_r|||^2 */
        double v[3] = {0, 0, 0}, mx = 0;
        for (size_t i = (size_t)my_rank; i < count; i += (size_t)nranks) {
            double exact = 0, abs_sum = 0, off = 0;
            for (int r = 0; r < nranks; r++) {
                double xv = gradiveq_input(r, t, i, noise[t]);
                exact += xv;
                abs_sum += fabs(xv);
                off += xv - sinus(r, t, i);
            }
            double e = recv[i] - exact;
            if (t == 0) {
                /* version 0: the f32 sum (comp_bound's gradiveq case) */
                double tol = comp_bound(x, ZC_DTYPE_F32, ZC_OP_SUM, abs_sum, exact);
                CHECK(fabs(e) <= tol, "%s: element %zu is %.9g, expected %.9g within %.3g", what, i,
                      recv[i], exact, tol);
                mx = fmax(mx, fabs(exact));
            }
            v[0] += e * e;
            v[1] += off * off;
            v[2] += abs_sum * abs_sum;
        }
        if (allsum(v, 3))
            return 1;
        if (t == 0) {
            learn_max = mx;
            if (allmax(&learn_max, 1))
                return 1;
            continue;
        }
        double k = GRADIVEQ_SLICE, d = GRADIVEQ_DIM, n = nranks;
        double once = 2 * sqrt(k * d) + sqrt(d) * k + (d + 1) * sqrt(d) + 2 * n + 4;
        double factor = once + (x->ring || x->scatter ? n : 0);
        double slack = factor * 0x1p-24 * (sqrt(v[2]) + sqrt((double)count) * learn_max);
        double bound = sqrt(v[1]) + slack;
        fprintf(stderr, "rank %d: %s: ||error|| %.4g, bound %.4g (noise %.4g + rounding %.4g)\n",
                my_rank, what, sqrt(v[0]), bound, sqrt(v[1]), slack);
        CHECK(sqrt(v[0]) <= bound,
              "%s: ||result - exact|| = %.6g exceeds the projection bound %.6g (noise %.6g, "
              "rounding %.6g)",
              what, sqrt(v[0]), bound, sqrt(v[1]), slack);
    }
    free(send);
    free(recv);
    return 0;
}

static int comp_one(const comp_ctx_t *x, zc_dtype_t dt, zc_redop_t op, size_t count, int in_place,
                    uint64_t stream)
{
    char what[200];
    size_t bytes = count * zc_dtype_bytes(dt);
    uint64_t keys[ZC_HARNESS_MAX_RANKS];
    void *send, *recv;
    snprintf(what, sizeof(what), "%s %s: %zu x %s %s%s, %d ranks", x->cc->algo, x->cc->codec, count,
             zc_dtype_name(dt), zc_redop_name(op), in_place ? " in place" : "", nranks);
    zc_harness_step("%s", what);
    for (int r = 0; r < nranks; r++)
        keys[r] = input_key(stream, r);
    if (alloc_pair(bytes, &send, &recv))
        return 1;
    comp_fill(dt, send, count, keys[my_rank], my_rank);
    memcpy(recv, send, bytes);
    if (!in_place)
        memset(recv, 0xA5, bytes);
    zc_stats_t before, after;
    if (get_stats(&before))
        return 1;
    /* a key per call: stateful codecs see a new tensor, as the first-call checks assume */
    zc_status_t status =
        zc_allreduce_key(comm, in_place ? recv : send, recv, count, dt, op, 1000 + stream);
    CHECK(status == ZC_OK, "%s: %s", what, zc_status_string(status));
    if (get_stats(&after))
        return 1;
    /* the policy compresses every eligible call (ZIPCCL_MIN_BYTES=0); small ones may go raw
     * where an algorithm cannot split them, large ones must not */
    CHECK(nranks < 2 || count < 1000 || after.calls_compressed == before.calls_compressed + 1,
          "%s: not compressed (%llu compressed calls before, %llu after)", what,
          (unsigned long long)before.calls_compressed, (unsigned long long)after.calls_compressed);
    if (same_on_every_rank(recv, bytes, what))
        return 1;
    int rc = x->codec == ZC_CODEC_TOPK ? topk_check_first(x, dt, op, recv, count, keys, what)
                                       : comp_check_bound(x, dt, op, recv, count, keys, what);
    free(send);
    free(recv);
    return rc;
}

static int comp_rank(int rank, int size, void *arg)
{
    comp_ctx_t x = {.cc = arg, .chunk_bytes = CHUNK_BYTES, .density = TOPK_DENSITY};
    CHECK(zc_codec_find(x.cc->codec, &x.codec) == ZC_OK, "unknown codec %s", x.cc->codec);
    x.scatter = strcmp(x.cc->algo, "scatter") == 0;
    x.ring = strcmp(x.cc->algo, "ring") == 0;
    if (x.ring && x.codec == ZC_CODEC_QSGD)
        x.codec = ZC_CODEC_QSGD_INT; /* ZIPCCL_ALGO=ring runs qsgd as qsgd-int */
    x.levels = zc_qsgd_levels_for_bits(QSGD_BITS);
    if (start_rank(rank, size))
        return 1;
    if (x.codec == ZC_CODEC_TOPK && topk_feedback(&x))
        return 1;
    static const zc_dtype_t dtypes[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16};
    size_t counts[] = {1, 7, (size_t)size - 1, 1000, 65537, BIG_COUNT};
    uint64_t stream = 0;
    for (size_t d = 0; d < ZC_ARRAY_SIZE(dtypes); d++) {
        for (size_t c = 0; c < ZC_ARRAY_SIZE(counts); c++) {
            for (int o = 0; o < 2; o++) {
                zc_redop_t op = o ? ZC_OP_AVG : ZC_OP_SUM;
                stream++;
                if ((c == 2 && (counts[c] <= 1 || counts[c] == 7)) ||
                    (counts[c] == BIG_COUNT && (d > 0 || o > 0)))
                    continue; /* a repeated count; the big one only as an f32 sum */
                if (comp_one(&x, dtypes[d], op, counts[c], (int)((c + (size_t)o) & 1), stream))
                    return 1;
            }
        }
    }
    if (x.codec == ZC_CODEC_GRADIVEQ) {
        if (gradiveq_projection(&x, 6007, 2) || gradiveq_projection(&x, 100003, 3))
            return 1;
    }
    if (x.codec != ZC_CODEC_TOPK)
        fprintf(stderr, "rank %d: %s %s, %d ranks: largest error %.3f of its bound\n", rank,
                x.cc->algo, x.cc->codec, size, worst_ratio);
    if (end_rank())
        return 1;
    return 0;
}

static int case_compressed(const comp_case_t *cc)
{
    char codec[64], algo[64], bits[64], density[64], slice[64], dim[64], chunk[64];
    snprintf(codec, sizeof(codec), "ZIPCCL_CODEC=%s", cc->codec);
    snprintf(algo, sizeof(algo), "ZIPCCL_ALGO=%s", cc->algo);
    snprintf(bits, sizeof(bits), "ZIPCCL_QSGD_BITS=%d", QSGD_BITS);
    snprintf(density, sizeof(density), "ZIPCCL_TOPK_DENSITY=%g", TOPK_DENSITY);
    snprintf(slice, sizeof(slice), "ZIPCCL_GRADIVEQ_SLICE=%d", GRADIVEQ_SLICE);
    snprintf(dim, sizeof(dim), "ZIPCCL_GRADIVEQ_DIM=%d", GRADIVEQ_DIM);
    snprintf(chunk, sizeof(chunk), "ZIPCCL_CHUNK_BYTES=%u", CHUNK_BYTES);
    /* GradiVeQ: call 0 of a tensor raw and learned from, then compressed */
    char *const env[] = {codec,
                         algo,
                         bits,
                         density,
                         slice,
                         dim,
                         chunk,
                         "ZIPCCL_MIN_BYTES=0",
                         "ZIPCCL_GRADIVEQ_WARMUP=1",
                         "ZIPCCL_GRADIVEQ_REFRESH=0",
                         "ZIPCCL_SEED=12345",
                         "ZIPCCL_QSGD_SCALE=max",
                         "ZIPCCL_TOPK_VALUES=f32",
                         NULL};
    int failed = 0;
    for (int k = 0; k < 6 && cc->sizes[k] && !failed; k++) {
        zc_harness_opts_t o = {.nranks = cc->sizes[k], .deadline_s = 120, .env = env};
        uint64_t start = zc_time_ns();
        failed = run_ranks(&o, comp_rank, (void *)cc) != 0;
        fprintf(stderr, "%s %s, %d ranks: %s in %.1f s\n", cc->algo, cc->codec, cc->sizes[k],
                failed ? "FAILED" : "ok", elapsed_s(start));
    }
    return failed;
}

/* ---- unbiasedness of QSGD ------------------------------------------------------------------ */

/*
 * The same input all-reduced 200 times (the Philox counter advances with every call): each
 * rank's estimate of value v in a bucket of scale m <= M_r errs by (k - r) m / s with
 * k - r in {-frac(r), 1 - frac(r)}, mean 0 and variance <= (M_r / s)^2 / 4. Ranks draw
 * independently, and scatter's re-encode of the owner's sum (scale <= M2 = M (1 + 1/s)) is
 * unbiased given the first stage, so per element
 *   sigma^2 <= (sum_r M_r^2 + [scatter] M2^2) / (4 s^2)
 * and the mean of k calls has standard deviation sigma / sqrt(k). On the ring (qsgd-int) every
 * rank rounds with the shared scale m <= max_r M_r: sigma^2 <= N max_r M_r^2 / (4 s^2).
 * Checked: every element's
 * mean after 200 calls within 6 sigma / sqrt(200) (4096 elements: a false alarm has
 * probability 1e-5); the RMS over elements of the mean's error at k = 25, 50, 100, 200 below
 * 1.5 sigma / sqrt(k) (the RMS of 4096 errors concentrates within a few percent of its
 * expectation, itself below sigma / sqrt(k)); the RMS shrinks as 1/sqrt(k): RMS(50) /
 * RMS(200) within 2 +- 15% (5 of its standard deviations); and a single call errs (RMS(1) >
 * 0.4 sigma: for uniform inputs frac(r) is uniform, E[p(1-p)] = 1/6, so RMS(1) is about
 * 0.8 sigma), so the calls were really quantized with s levels and independent.
 */
static int unbiased_rank(int rank, int size, void *arg)
{
    const char *algo = arg;
    const size_t count = 4096;
    const int calls = 200;
    static const int checkpoints[] = {1, 25, 50, 100, 200};
    double rms[ZC_ARRAY_SIZE(checkpoints)];
    int scatter = strcmp(algo, "scatter") == 0, ring = strcmp(algo, "ring") == 0;
    double s = zc_qsgd_levels_for_bits(QSGD_BITS), sum_m = 0, sum_m2 = 0, max_m = 0;
    uint64_t keys[ZC_HARNESS_MAX_RANKS];
    float *send = malloc(count * 4), *recv = malloc(count * 4);
    double *mean = calloc(count, sizeof(double)), *exact = calloc(count, sizeof(double));
    CHECK(send && recv && mean && exact, "out of memory");
    if (start_rank(rank, size))
        return 1;
    for (int r = 0; r < size; r++) {
        keys[r] = input_key(8000, r);
        sum_m += amplitude(r);
        sum_m2 += amplitude(r) * amplitude(r);
        max_m = fmax(max_m, amplitude(r));
    }
    if (ring)
        sum_m2 = size * max_m * max_m;
    double m2 = sum_m * (1 + 1 / s + 0x1p-23);
    double sigma = sqrt((sum_m2 + (scatter ? m2 * m2 : 0)) / (4 * s * s));
    double bias = (2 * size + 4) * 0x1p-24 * sum_m * (1 + 2 / s); /* deterministic rounding */
    comp_fill(ZC_DTYPE_F32, send, count, keys[rank], rank);
    for (size_t i = (size_t)rank; i < count; i += (size_t)size)
        for (int r = 0; r < size; r++)
            exact[i] += comp_value(ZC_DTYPE_F32, keys[r], r, i);

    size_t next = 0;
    for (int k = 1; k <= calls; k++) {
        zc_harness_step("qsgd %s call %d", algo, k);
        zc_status_t status = zc_allreduce_key(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM, 77);
        CHECK(status == ZC_OK, "qsgd %s call %d: %s", algo, k, zc_status_string(status));
        double worst = 0;
        size_t worst_i = 0;
        for (size_t i = (size_t)rank; i < count; i += (size_t)size) {
            mean[i] += recv[i];
            double e = fabs(mean[i] / k - exact[i]);
            if (e > worst)
                worst = e, worst_i = i;
        }
        if (k != checkpoints[next])
            continue;
        double sq = 0;
        for (size_t i = (size_t)rank; i < count; i += (size_t)size)
            sq += (mean[i] / k - exact[i]) * (mean[i] / k - exact[i]);
        if (same_on_every_rank(recv, count * 4, "qsgd result") || allsum(&sq, 1))
            return 1;
        rms[next] = sqrt(sq / (double)count);
        double se = sigma / sqrt((double)k);
        fprintf(stderr,
                "rank %d: qsgd %s after %d calls: rms error of the mean %.4g (sigma/sqrt(k) "
                "<= %.4g)\n",
                rank, algo, k, rms[next], se);
        if (k == 1)
            CHECK(rms[next] > 0.4 * sigma, "one call erred by rms %.4g, expected about %.4g",
                  rms[next], 0.8 * sigma);
        else
            CHECK(rms[next] <= 1.5 * se + bias,
                  "after %d calls the mean errs by rms %.4g, more than 1.5 x %.4g", k, rms[next],
                  se);
        if (k == calls)
            CHECK(worst <= 6 * se + bias,
                  "after %d calls element %zu's mean errs by %.4g, more than 6 x %.4g", k, worst_i,
                  worst, se);
        next++;
    }
    double ratio = rms[2] / rms[4];
    CHECK(ratio >= 1.7 && ratio <= 2.3,
          "the mean's error does not shrink as 1/sqrt(calls): rms %.4g after 50, %.4g after 200 "
          "(ratio %.3f, expected 2)",
          rms[2], rms[4], ratio);
    zc_stats_t st;
    if (get_stats(&st))
        return 1;
    CHECK(st.calls_compressed >= (uint64_t)calls || size == 1,
          "only %llu of the %d calls were compressed", (unsigned long long)st.calls_compressed,
          calls);
    if (end_rank())
        return 1;
    free(send);
    free(recv);
    free(mean);
    free(exact);
    return 0;
}

static int case_unbiased(const char *algo)
{
    char algo_env[64], bits[64];
    snprintf(algo_env, sizeof(algo_env), "ZIPCCL_ALGO=%s", algo);
    snprintf(bits, sizeof(bits), "ZIPCCL_QSGD_BITS=%d", QSGD_BITS);
    char *const env[] = {"ZIPCCL_CODEC=qsgd",  algo_env,           bits, "ZIPCCL_QSGD_SCALE=max",
                         "ZIPCCL_MIN_BYTES=0", "ZIPCCL_SEED=4242", NULL};
    zc_harness_opts_t o = {.nranks = 4, .deadline_s = 120, .env = env};
    return run_ranks(&o, unbiased_rank, (void *)algo) != 0;
}

/* ---- zero counts and bad arguments --------------------------------------------------------- */

static int zero_rank(int rank, int size, void *arg)
{
    if (start_rank(rank, size))
        return 1;
    float buf[4] = {1, 2, 3, 4}, out[4] = {5, 6, 7, 8};
    zc_status_t status;
    for (size_t d = 0; d < ZC_ARRAY_SIZE(all_dtypes); d++) {
        zc_harness_step("count 0 of %s", zc_dtype_name(all_dtypes[d]));
        status = zc_allreduce(comm, NULL, NULL, 0, all_dtypes[d], ZC_OP_SUM);
        CHECK(status == ZC_OK, "count 0 with NULL buffers: %s", zc_status_string(status));
        status = zc_allreduce(comm, buf, out, 0, all_dtypes[d], ZC_OP_AVG);
        CHECK(status == ZC_OK, "count 0 with buffers: %s", zc_status_string(status));
        CHECK(out[0] == 5 && out[3] == 8, "count 0 wrote to the receive buffer");
        status = zc_allreduce(comm, buf, buf, 0, all_dtypes[d], ZC_OP_MAX);
        CHECK(status == ZC_OK, "count 0 in place: %s", zc_status_string(status));
    }
    /* every rank passes the same bad argument: local or collective, all must refuse */
    zc_harness_step("bad arguments");
    status = zc_allreduce(comm, NULL, out, 4, ZC_DTYPE_F32, ZC_OP_SUM);
    CHECK(status == ZC_ERR_INVALID_ARG, "NULL send buffer: %s", zc_status_string(status));
    status = zc_allreduce(comm, buf, NULL, 4, ZC_DTYPE_F32, ZC_OP_SUM);
    CHECK(status == ZC_ERR_INVALID_ARG, "NULL receive buffer: %s", zc_status_string(status));
    status = zc_allreduce(comm, buf, out, 4, ZC_DTYPE_COUNT, ZC_OP_SUM);
    CHECK(status == ZC_ERR_INVALID_ARG, "unknown dtype: %s", zc_status_string(status));
    status = zc_allreduce(comm, buf, out, 4, ZC_DTYPE_F32, ZC_OP_COUNT);
    CHECK(status == ZC_ERR_INVALID_ARG, "unknown op: %s", zc_status_string(status));
    status = zc_allreduce(comm, buf, buf + 1, 3, ZC_DTYPE_F32, ZC_OP_SUM);
    CHECK(status == ZC_ERR_INVALID_ARG, "overlapping buffers: %s", zc_status_string(status));
    status = zc_allreduce(NULL, buf, out, 4, ZC_DTYPE_F32, ZC_OP_SUM);
    CHECK(status == ZC_ERR_INVALID_ARG, "NULL communicator: %s", zc_status_string(status));
    zc_request_t *req = (zc_request_t *)&req;
    status = zc_iallreduce(comm, NULL, out, 4, ZC_DTYPE_F32, ZC_OP_SUM, 0, &req);
    CHECK(status == ZC_ERR_INVALID_ARG, "zc_iallreduce with a NULL buffer: %s",
          zc_status_string(status));
    CHECK(req == (zc_request_t *)&req, "zc_iallreduce wrote a request on error");

    /* and the communicator still works (f64: never compressed, so exact here) */
    zc_harness_step("a good call after the bad ones");
    double in64[4] = {1, 2, 3, 4}, out64[4] = {0};
    status = zc_allreduce(comm, in64, out64, 4, ZC_DTYPE_F64, ZC_OP_AVG);
    CHECK(status == ZC_OK, "a good call after the bad ones: %s", zc_status_string(status));
    for (int i = 0; i < 4; i++)
        CHECK(out64[i] == in64[i], "avg of equal inputs: element %d is %g, expected %g", i,
              out64[i], in64[i]);
    if (end_rank())
        return 1;
    return 0;
}

static int case_zero(void)
{
    char *const env[] = {"ZIPCCL_CODEC=qsgd", "ZIPCCL_MIN_BYTES=0", NULL};
    int failed = 0;
    for (int n = 1; n <= 3 && !failed; n += 2) {
        zc_harness_opts_t o = {.nranks = n, .deadline_s = 60, .env = env};
        failed = run_ranks(&o, zero_rank, NULL) != 0;
    }
    return failed;
}

/* ---- ranks that disagree -------------------------------------------------------------------- */

static int mismatch_rank(int rank, int size, void *arg)
{
    const size_t count = 100000; /* 400 KB: compressed with the compressed case's codec */
    float *send = malloc((count + 1) * 8), *recv = malloc((count + 1) * 8);
    CHECK(send && recv, "out of memory");
    for (size_t i = 0; i < count + 1; i++)
        send[i] = (float)(rank + 1);
    if (start_rank(rank, size))
        return 1;

    struct {
        const char *what;
        size_t count;
        zc_dtype_t dtype;
        zc_redop_t op;
        const char *mine, *theirs; /* what the message must name */
    } calls[] = {
        {"count", rank == 1 ? count + 1 : count, ZC_DTYPE_F32, ZC_OP_SUM, "100001", "100000"},
        {"type", count, rank == 2 ? ZC_DTYPE_F64 : ZC_DTYPE_F32, ZC_OP_SUM, "f64", "f32"},
        {"op", count, ZC_DTYPE_F32, rank == 0 ? ZC_OP_MAX : ZC_OP_SUM, "max", "sum"},
    };
    for (size_t k = 0; k < ZC_ARRAY_SIZE(calls); k++) {
        zc_harness_step("disagreeing on the %s", calls[k].what);
        logged[0] = '\0';
        uint64_t start = zc_time_ns();
        zc_status_t status =
            zc_allreduce(comm, send, recv, calls[k].count, calls[k].dtype, calls[k].op);
        double t = elapsed_s(start);
        CHECK(status == ZC_ERR_MISMATCH, "ranks disagreeing on the %s: %s", calls[k].what,
              zc_status_string(status));
        CHECK(t < 5, "failing on a mismatched %s took %.1f s", calls[k].what, t);
        CHECK(logged_has(calls[k].what) && logged_has(calls[k].mine) && logged_has(calls[k].theirs),
              "the error does not name the %s and both values (%s, %s): %s", calls[k].what,
              calls[k].mine, calls[k].theirs, logged);
    }
    /* nothing moved: the next call that agrees works */
    zc_harness_step("agreeing again");
    zc_status_t status = zc_allreduce(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_MAX);
    CHECK(status == ZC_OK, "the call after the mismatches: %s", zc_status_string(status));
    for (size_t i = 0; i < count; i++)
        CHECK(recv[i] == (float)size, "max after the mismatches: element %zu is %g, expected %d", i,
              recv[i], size);
    if (end_rank())
        return 1;
    free(send);
    free(recv);
    return 0;
}

static int case_mismatch(int compressed)
{
    char *const env_raw[] = {"ZIPCCL_CODEC=none", NULL};
    char *const env_comp[] = {"ZIPCCL_CODEC=qsgd", "ZIPCCL_ALGO=scatter", "ZIPCCL_MIN_BYTES=0",
                              NULL};
    zc_harness_opts_t o = {.nranks = 3, .deadline_s = 60, .env = compressed ? env_comp : env_raw};
    return run_ranks(&o, mismatch_rank, NULL) != 0;
}

/* ---- a rank killed mid-collective ----------------------------------------------------------- */

#define KILL_TIMEOUT_S 5
#define KILL_VICTIM 2

static int kill_rank(int rank, int size, void *arg)
{
    const size_t count = 8u << 20; /* 32 MiB of f32 per call */
    float *send = malloc(count * 4), *recv = malloc(count * 4);
    CHECK(send && recv, "out of memory");
    for (size_t i = 0; i < count; i++)
        send[i] = (float)((i % 1000) * 0.001);
    if (start_rank(rank, size))
        return 1;
    zc_status_t status = ZC_OK;
    double last_call_s = 0;
    uint64_t begin = zc_time_ns();
    for (int k = 0; status == ZC_OK && elapsed_s(begin) < 40; k++) {
        zc_harness_step("allreduce %d", k);
        uint64_t start = zc_time_ns();
        status = zc_allreduce(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM);
        last_call_s = elapsed_s(start);
    }
    CHECK(status == ZC_ERR_PEER || status == ZC_ERR_TIMEOUT, "all-reduce after rank %d died: %s",
          KILL_VICTIM, zc_status_string(status));
    /* the failing call: at most ZIPCCL_TIMEOUT_S after the last progress, plus one call */
    CHECK(last_call_s < KILL_TIMEOUT_S + 3, "the failing call took %.1f s, ZIPCCL_TIMEOUT_S is %d",
          last_call_s, KILL_TIMEOUT_S);
    CHECK(logged[0] != '\0', "the failure was not logged");
    /* the communicator is broken: the next call fails at once (docs/collectives.md) */
    zc_harness_step("a call on the broken communicator");
    uint64_t start = zc_time_ns();
    zc_status_t again = zc_allreduce(comm, send, recv, 16, ZC_DTYPE_F32, ZC_OP_SUM);
    CHECK(again == ZC_ERR_PEER || again == ZC_ERR_TIMEOUT, "a call after the failure returned %s",
          zc_status_string(again));
    CHECK(elapsed_s(start) < 1, "a call after the failure took %.1f s", elapsed_s(start));
    start = zc_time_ns();
    if (end_rank())
        return 1;
    CHECK(elapsed_s(start) < KILL_TIMEOUT_S + 3, "zc_comm_destroy took %.1f s", elapsed_s(start));
    free(send);
    free(recv);
    return FAILED_AS_EXPECTED;
}

static int case_kill(int compressed)
{
    char timeout[64];
    snprintf(timeout, sizeof(timeout), "ZIPCCL_TIMEOUT_S=%d", KILL_TIMEOUT_S);
    char *const env_raw[] = {"ZIPCCL_CODEC=none", timeout, NULL};
    char *const env_comp[] = {"ZIPCCL_CODEC=qsgd", "ZIPCCL_ALGO=scatter", timeout, NULL};
    zc_harness_opts_t o = {.nranks = 4,
                           .deadline_s = 60,
                           .kill_rank = KILL_VICTIM,
                           .kill_at_step = "allreduce 2",
                           .kill_after_s = 0.05,
                           .expect_fail_mask = 0xful & ~(1ul << KILL_VICTIM),
                           .expect_fail_status = FAILED_AS_EXPECTED,
                           .env = compressed ? env_comp : env_raw};
    uint64_t start = zc_time_ns();
    int rc = run_ranks(&o, kill_rank, NULL);
    fprintf(stderr, "rank %d killed: the run took %.1f s\n", KILL_VICTIM, elapsed_s(start));
    return rc != 0;
}

/* ---- nonblocking calls ---------------------------------------------------------------------- */

typedef struct nb_call {
    zc_dtype_t dtype;
    zc_redop_t op;
    size_t count;
    int in_place;
} nb_call_t;

/* Mixed raw and compressed (fp16 on the ring: deterministic, so results must be equal). */
static const nb_call_t nb_calls[] = {
    {ZC_DTYPE_F32, ZC_OP_SUM, 100003, 0}, {ZC_DTYPE_I32, ZC_OP_MAX, 1001, 0},
    {ZC_DTYPE_F64, ZC_OP_SUM, 77777, 1},  {ZC_DTYPE_F32, ZC_OP_SUM, 5000, 1},
    {ZC_DTYPE_U8, ZC_OP_PROD, 33, 0},     {ZC_DTYPE_BF16, ZC_OP_AVG, 4097, 0},
    {ZC_DTYPE_F16, ZC_OP_SUM, 0, 0},      {ZC_DTYPE_I64, ZC_OP_MIN, 300000, 0},
};
#define NB_CALLS ZC_ARRAY_SIZE(nb_calls)

static void nb_fill(const nb_call_t *c, void *buf, size_t k)
{
    uint64_t key = input_key(6000 + k, my_rank);
    if (is_float(c->dtype))
        comp_fill(c->dtype, buf, c->count, key, my_rank);
    else
        raw_fill(c->dtype, buf, c->count, key);
}

static int nb_rank(int rank, int size, void *arg)
{
    int thread_on = *(const int *)arg;
    void *send[NB_CALLS], *recv[NB_CALLS], *ref[NB_CALLS];
    zc_request_t *req[NB_CALLS];
    zc_status_t status;
    if (start_rank(rank, size))
        return 1;
    for (size_t k = 0; k < NB_CALLS; k++) {
        size_t bytes = nb_calls[k].count * zc_dtype_bytes(nb_calls[k].dtype) + 1;
        send[k] = malloc(bytes);
        recv[k] = malloc(bytes);
        ref[k] = malloc(bytes);
        CHECK(send[k] && recv[k] && ref[k], "out of memory");
    }
    /* the blocking results */
    for (size_t k = 0; k < NB_CALLS; k++) {
        const nb_call_t *c = &nb_calls[k];
        zc_harness_step("blocking call %zu", k);
        nb_fill(c, ref[k], k);
        status = zc_allreduce(comm, ref[k], ref[k], c->count, c->dtype, c->op);
        CHECK(status == ZC_OK, "blocking call %zu: %s", k, zc_status_string(status));
    }
    zc_stats_t st;
    if (get_stats(&st))
        return 1;
    CHECK(st.calls_compressed >= 2 || size == 1,
          "%llu compressed calls: the f32 and bf16 calls should be",
          (unsigned long long)st.calls_compressed);

    /* 0: zc_wait in order; 1: zc_test polling; 2 (progress thread): zc_wait on the last */
    for (int mode = 0; mode < (thread_on ? 3 : 2); mode++) {
        const char *how = mode == 0   ? "zc_wait in order"
                          : mode == 1 ? "zc_test polling"
                                      : "zc_wait on the last call first";
        for (size_t k = 0; k < NB_CALLS; k++) {
            const nb_call_t *c = &nb_calls[k];
            nb_fill(c, send[k], k);
            void *out = recv[k];
            if (c->in_place)
                out = memcpy(recv[k], send[k], c->count * zc_dtype_bytes(c->dtype));
            zc_harness_step("%s: starting call %zu", how, k);
            status = zc_iallreduce(comm, c->in_place ? out : send[k], out, c->count, c->dtype,
                                   c->op, 0, &req[k]);
            CHECK(status == ZC_OK && req[k], "zc_iallreduce %zu: %s", k, zc_status_string(status));
        }
        if (mode == 0) {
            for (size_t k = 0; k < NB_CALLS; k++) {
                zc_harness_step("%s: call %zu", how, k);
                status = zc_wait(&req[k]);
                CHECK(status == ZC_OK && !req[k], "zc_wait %zu: %s", k, zc_status_string(status));
            }
        } else if (mode == 2) {
            /*
             * With the progress thread zc_test only looks, so the order is observable: calls
             * complete in the order they were started, so once the last is done every
             * earlier one is done too.
             */
            zc_harness_step("%s", how);
            status = zc_wait(&req[NB_CALLS - 1]);
            CHECK(status == ZC_OK, "zc_wait %zu: %s", NB_CALLS - 1, zc_status_string(status));
            for (size_t k = 0; k + 1 < NB_CALLS; k++) {
                status = zc_test(&req[k]);
                CHECK(status == ZC_OK && !req[k],
                      "call %zu not complete after the last call completed: %s", k,
                      zc_status_string(status));
            }
        } else {
            /*
             * Every pending request is tested each round, the later ones too. Their
             * completion order is not observable here: zc_test on any request progresses the
             * whole queue, so an earlier call may finish inside the zc_test of a later one.
             */
            size_t done = 0;
            uint64_t polls = 0, start = zc_time_ns();
            while (done < NB_CALLS) {
                CHECK(elapsed_s(start) < 60, "%zu of %zu calls done after 60 s of zc_test", done,
                      NB_CALLS);
                for (size_t k = 0; k < NB_CALLS; k++) {
                    if (!req[k])
                        continue;
                    zc_harness_step("%s: call %zu", how, k);
                    status = zc_test(&req[k]);
                    polls++;
                    if (status == ZC_INPROGRESS) {
                        CHECK(req[k], "zc_test %zu cleared a request in progress", k);
                        continue;
                    }
                    CHECK(status == ZC_OK && !req[k], "zc_test %zu: %s", k,
                          zc_status_string(status));
                    done++;
                }
            }
            fprintf(stderr, "rank %d: %zu calls completed after %llu zc_test calls\n", rank,
                    (size_t)NB_CALLS, (unsigned long long)polls);
        }
        for (size_t k = 0; k < NB_CALLS; k++) {
            size_t bytes = nb_calls[k].count * zc_dtype_bytes(nb_calls[k].dtype);
            CHECK(memcmp(recv[k], ref[k], bytes) == 0,
                  "%s: call %zu (%zu x %s %s) differs from the blocking result", how, k,
                  nb_calls[k].count, zc_dtype_name(nb_calls[k].dtype),
                  zc_redop_name(nb_calls[k].op));
            if (same_on_every_rank(recv[k], bytes, how))
                return 1;
        }
    }
    if (end_rank())
        return 1;
    for (size_t k = 0; k < NB_CALLS; k++) {
        free(send[k]);
        free(recv[k]);
        free(ref[k]);
    }
    return 0;
}

static int case_nonblocking(int thread)
{
    char *const env[] = {"ZIPCCL_CODEC=fp16", "ZIPCCL_ALGO=ring", "ZIPCCL_MIN_BYTES=4KiB",
                         thread ? "ZIPCCL_PROGRESS_THREAD=1" : "ZIPCCL_PROGRESS_THREAD=0", NULL};
    zc_harness_opts_t o = {.nranks = 3, .deadline_s = 90, .env = env};
    return run_ranks(&o, nb_rank, &thread) != 0;
}

/* ---- launcher conventions ------------------------------------------------------------------- */

static int env_rank(int rank, int size, void *arg)
{
    if (start_rank(rank, size))
        return 1;
    if (raw_one(ZC_DTYPE_F32, ZC_OP_SUM, 10007, 0, 1) ||
        raw_one(ZC_DTYPE_I64, ZC_OP_MAX, 333, 1, 2))
        return 1;
    if (end_rank())
        return 1;
    return 0;
}

static int case_env_styles(void)
{
    static const zc_harness_env_style_t styles[] = {ZC_HARNESS_ENV_TORCHRUN, ZC_HARNESS_ENV_OPENMPI,
                                                    ZC_HARNESS_ENV_SLURM};
    static const char *const names[] = {"torchrun", "openmpi", "slurm"};
    int failed = 0;
    for (size_t k = 0; k < ZC_ARRAY_SIZE(styles) && !failed; k++) {
        zc_harness_opts_t o = {.nranks = 3, .deadline_s = 60, .env_style = styles[k]};
        failed = run_ranks(&o, env_rank, NULL) != 0;
        fprintf(stderr, "%s variables: %s\n", names[k], failed ? "FAILED" : "ok");
    }
    return failed;
}

/* ---- configuration in code ---------------------------------------------------------------- */

/*
 * The environment says codec none; the configuration object says fp16 on the
 * ring from 1 KiB and names a statistics file in a buffer that is overwritten
 * and a configuration that is destroyed before the communicator is: the
 * communicator must compress, and write its file where the setting said.
 */
static int config_rank(int rank, int size, void *arg)
{
    const char *dir = arg;
    const size_t count = 4096;
    float send[4096], recv[4096];
    for (size_t i = 0; i < count; i++)
        send[i] = (float)(rank + 1) * 0.25f + (float)i * 0x1p-12f;

    my_rank = rank;
    nranks = size;
    logged[0] = '\0';
    zc_log_set_sink(capture_sink, NULL);
    zc_comm_config_t *cfg = NULL;
    zc_harness_step("zc_comm_config");
    CHECK(zc_comm_config_create(1, &cfg) == ZC_OK, "zc_comm_config_create");
    char buf[256];
    CHECK(zc_comm_config_get(cfg, "ZIPCCL_CODEC", buf, sizeof(buf)) == ZC_OK &&
              strcmp(buf, "none") == 0,
          "the environment's ZIPCCL_CODEC reads as '%s', not none", buf);
    CHECK(zc_comm_config_set(cfg, "ZIPCCL_CODEC", "fp16") == ZC_OK &&
              zc_comm_config_set(cfg, "ZIPCCL_ALGO", "ring") == ZC_OK &&
              zc_comm_config_set(cfg, "ZIPCCL_MIN_BYTES", "1KiB") == ZC_OK,
          "zc_comm_config_set refused a valid setting");
    /* bad names and values are refused and leave the configuration as it was */
    CHECK(zc_comm_config_set(cfg, "ZIPCCL_CODEK", "qsgd") == ZC_ERR_INVALID_CONFIG &&
              logged_has("did you mean ZIPCCL_CODEC"),
          "an unknown name was not refused with the closest name: %s", logged);
    CHECK(zc_comm_config_set(cfg, "ZIPCCL_ALGO", "tree") == ZC_ERR_INVALID_CONFIG &&
              logged_has("auto|ring|allgather|scatter"),
          "a bad value was not refused with the choices: %s", logged);
    CHECK(zc_comm_config_get(cfg, "ZIPCCL_ALGO", buf, sizeof(buf)) == ZC_OK &&
              strcmp(buf, "ring") == 0,
          "ZIPCCL_ALGO reads '%s' after a refused set", buf);
    CHECK(zc_comm_config_set(NULL, "ZIPCCL_ALGO", "ring") == ZC_ERR_INVALID_ARG &&
              zc_comm_config_get(cfg, "ZIPCCL_NOPE", buf, sizeof(buf)) == ZC_ERR_INVALID_ARG &&
              zc_comm_init_config(NULL, &comm) == ZC_ERR_INVALID_ARG,
          "NULL or unknown arguments accepted");
    CHECK(zc_comm_config_set(cfg, "ZIPCCL_JOB_SECRET", "0123456789abcdef-config") == ZC_OK &&
              zc_comm_config_get(cfg, "ZIPCCL_JOB_SECRET", buf, sizeof(buf)) == ZC_OK &&
              strcmp(buf, "(set)") == 0,
          "the secret reads '%s', not (set)", buf);
    snprintf(buf, sizeof(buf), "%s/cfg-%%r.json", dir);
    CHECK(zc_comm_config_set(cfg, "ZIPCCL_STATS_FILE", buf) == ZC_OK, "set ZIPCCL_STATS_FILE");
    memset(buf, 'x', sizeof(buf) - 1); /* the configuration holds a copy, not this buffer */

    zc_harness_step("zc_comm_init_config");
    zc_status_t status = zc_comm_init_config(cfg, &comm);
    zc_comm_config_destroy(cfg);
    if (status == ZC_ERR_IO && rank == 0 && logged_has("cannot listen on port"))
        *root_port_taken = 1;
    CHECK(status == ZC_OK, "zc_comm_init_config: %s", zc_status_string(status));
    CHECK(zc_comm_rank(comm) == rank && zc_comm_size(comm) == size, "rank %d of %d",
          zc_comm_rank(comm), zc_comm_size(comm));

    zc_harness_step("allreduce");
    status = zc_allreduce(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM);
    CHECK(status == ZC_OK, "allreduce: %s", zc_status_string(status));
    zc_stats_t st;
    CHECK(zc_comm_stats(comm, &st) == ZC_OK && st.calls == 1 && st.calls_compressed == 1,
          "the call was not compressed (%llu of %llu): the configuration was not used",
          (unsigned long long)st.calls_compressed, (unsigned long long)st.calls);
    for (size_t i = 0; i < count; i++) {
        double want = 0;
        for (int r = 0; r < size; r++)
            want += (double)((float)(r + 1) * 0.25f + (float)i * 0x1p-12f);
        /* fp16 on the ring: each input and each partial sum rounded once to 11 bits */
        CHECK(fabs(recv[i] - want) <= fabs(want) * 0x1p-11 * (2 * size),
              "element %zu: %g, expected %g within fp16 rounding", i, recv[i], want);
    }
    zc_harness_step("zc_comm_destroy");
    zc_comm_destroy(comm);
    comm = NULL;
    char path[256];
    snprintf(path, sizeof(path), "%s/cfg-%d.json", dir, rank);
    CHECK(access(path, R_OK) == 0, "no statistics file %s", path);
    return 0;
}

static int case_config(void)
{
    char dir[64];
    snprintf(dir, sizeof(dir), "/tmp/zc-allreduce-config-XXXXXX");
    if (!mkdtemp(dir)) {
        perror("mkdtemp");
        return 1;
    }
    char *const env[] = {"ZIPCCL_CODEC=none", NULL};
    zc_harness_opts_t o = {.nranks = 2, .deadline_s = 60, .env = env};
    int rc = run_ranks(&o, config_rank, dir);
    for (int r = 0; r < 2; r++) {
        char path[128];
        snprintf(path, sizeof(path), "%s/cfg-%d.json", dir, r);
        unlink(path);
    }
    rmdir(dir);
    return rc != 0;
}

/* ---- statistics file ------------------------------------------------------------------------ */

/* A strict JSON syntax check (RFC 8259 values), enough to reject a broken file. */
static const char *json_value(const char *p, int depth);

static const char *json_ws(const char *p)
{
    while (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')
        p++;
    return p;
}

static const char *json_string(const char *p)
{
    if (*p++ != '"')
        return NULL;
    while (*p && *p != '"') {
        if ((unsigned char)*p < 0x20)
            return NULL;
        if (*p == '\\') {
            p++;
            if (*p == 'u') {
                for (int k = 1; k <= 4; k++)
                    if (!strchr("0123456789abcdefABCDEF", p[k]) || !p[k])
                        return NULL;
                p += 4;
            } else if (!*p || !strchr("\"\\/bfnrt", *p)) {
                return NULL;
            }
        }
        p++;
    }
    return *p == '"' ? p + 1 : NULL;
}

static const char *json_number(const char *p)
{
    if (*p == '-')
        p++;
    if (*p == '0')
        p++;
    else if (*p >= '1' && *p <= '9')
        while (*p >= '0' && *p <= '9')
            p++;
    else
        return NULL;
    if (*p == '.') {
        if (!(*++p >= '0' && *p <= '9'))
            return NULL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    if (*p == 'e' || *p == 'E') {
        p++;
        if (*p == '+' || *p == '-')
            p++;
        if (!(*p >= '0' && *p <= '9'))
            return NULL;
        while (*p >= '0' && *p <= '9')
            p++;
    }
    return p;
}

static const char *json_value(const char *p, int depth)
{
    if (depth > 64)
        return NULL;
    p = json_ws(p);
    if (*p == '{' || *p == '[') {
        char close = *p == '{' ? '}' : ']';
        p = json_ws(p + 1);
        if (*p == close)
            return p + 1;
        for (;;) {
            if (close == '}') {
                p = json_string(json_ws(p));
                if (!p)
                    return NULL;
                p = json_ws(p);
                if (*p++ != ':')
                    return NULL;
            }
            p = json_value(p, depth + 1);
            if (!p)
                return NULL;
            p = json_ws(p);
            if (*p == close)
                return p + 1;
            if (*p++ != ',')
                return NULL;
        }
    }
    if (*p == '"')
        return json_string(p);
    if (strncmp(p, "true", 4) == 0)
        return p + 4;
    if (strncmp(p, "false", 5) == 0)
        return p + 5;
    if (strncmp(p, "null", 4) == 0)
        return p + 4;
    return json_number(p);
}

/* The number after the first "key": in @p text, or NAN. */
static double json_find_number(const char *text, const char *key)
{
    char quoted[64];
    snprintf(quoted, sizeof(quoted), "\"%s\"", key);
    const char *p = strstr(text, quoted);
    if (!p)
        return NAN;
    p = json_ws(p + strlen(quoted));
    if (*p != ':')
        return NAN;
    p = json_ws(p + 1);
    char *end;
    double v = strtod(p, &end);
    return end == p ? NAN : v;
}

static char stats_dir[64];

static int stats_rank(int rank, int size, void *arg)
{
    const size_t count = 200000;
    float *send = malloc(count * 4), *recv = malloc(count * 4);
    CHECK(send && recv, "out of memory");
    comp_fill(ZC_DTYPE_F32, send, count, input_key(5000, rank), rank);
    if (start_rank(rank, size))
        return 1;
    /* rank 1 names its own file (zc_comm_set_stats_file), the others take ZIPCCL_STATS_FILE's */
    char named[128];
    snprintf(named, sizeof(named), "%s/named-%%r.json", stats_dir);
    CHECK(zc_comm_set_stats_file(NULL, named) == ZC_ERR_INVALID_ARG &&
              zc_comm_set_stats_file(comm, NULL) == ZC_ERR_INVALID_ARG,
          "zc_comm_set_stats_file accepted NULL");
    if (rank == 1) {
        zc_status_t set = zc_comm_set_stats_file(comm, named);
        CHECK(set == ZC_OK, "zc_comm_set_stats_file: %s", zc_status_string(set));
    }
    for (int k = 0; k < 5; k++) {
        zc_harness_step("call %d", k);
        zc_status_t status = zc_allreduce(comm, send, recv, count, ZC_DTYPE_F32, ZC_OP_SUM);
        CHECK(status == ZC_OK, "call %d: %s", k, zc_status_string(status));
    }
    int64_t tiny = 7;
    zc_status_t status = zc_allreduce(comm, &tiny, &tiny, 1, ZC_DTYPE_I64, ZC_OP_SUM);
    CHECK(status == ZC_OK, "raw call: %s", zc_status_string(status));
    zc_stats_t st;
    if (get_stats(&st))
        return 1;
    CHECK(st.calls == 6 && st.calls_compressed == 5, "%llu calls, %llu compressed; expected 6, 5",
          (unsigned long long)st.calls, (unsigned long long)st.calls_compressed);
    CHECK(st.bytes_in == 5 * count * 4 + 8, "bytes_in %llu, expected %zu",
          (unsigned long long)st.bytes_in, 5 * count * 4 + 8);
    CHECK(st.bytes_wire > 0 && st.bytes_wire < st.bytes_wire_raw,
          "qsgd sent %llu bytes, the raw ring would have sent %llu",
          (unsigned long long)st.bytes_wire, (unsigned long long)st.bytes_wire_raw);
    if (end_rank())
        return 1;

    char path[128], other[128];
    snprintf(path, sizeof(path), "%s/%s-%d.json", stats_dir, rank == 1 ? "named" : "stats", rank);
    snprintf(other, sizeof(other), "%s/%s-%d.json", stats_dir, rank == 1 ? "stats" : "named", rank);
    CHECK(access(other, F_OK) != 0, "%s written, the statistics belong in %s", other, path);
    FILE *f = fopen(path, "r");
    CHECK(f, "statistics file %s not written: %s", path, strerror(errno));
    static char text[1 << 16];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    CHECK(len > 0 && len < sizeof(text) - 1, "%s: %zu bytes", path, len);
    const char *end = json_value(text, 0);
    CHECK(end && *json_ws(end) == '\0', "%s is not valid JSON (at byte %td): %s", path,
          end ? end - text : (ptrdiff_t)-1, text);
    /* the totals come first in the file (the per-path rows follow) */
    double calls = json_find_number(text, "calls");
    double wire = json_find_number(text, "bytes_wire");
    double wire_raw = json_find_number(text, "bytes_wire_raw");
    CHECK(calls == (double)st.calls, "%s: calls %g, zc_comm_stats said %llu", path, calls,
          (unsigned long long)st.calls);
    CHECK(wire == (double)st.bytes_wire && wire_raw == (double)st.bytes_wire_raw,
          "%s: bytes_wire %g and bytes_wire_raw %g, zc_comm_stats said %llu and %llu", path, wire,
          wire_raw, (unsigned long long)st.bytes_wire, (unsigned long long)st.bytes_wire_raw);
    CHECK(wire < wire_raw, "%s: bytes_wire %g not below bytes_wire_raw %g", path, wire, wire_raw);
    CHECK(strstr(text, "\"algo\": \"allgather\", \"codec\": \"qsgd\""),
          "%s has no row for the allgather qsgd path: %s", path, text);
    free(send);
    free(recv);
    return 0;
}

static int case_stats(void)
{
    snprintf(stats_dir, sizeof(stats_dir), "/tmp/zc-allreduce-stats-XXXXXX");
    if (!mkdtemp(stats_dir)) {
        perror("mkdtemp");
        return 1;
    }
    char file[128];
    snprintf(file, sizeof(file), "ZIPCCL_STATS_FILE=%s/stats-%%r.json", stats_dir);
    char *const env[] = {"ZIPCCL_CODEC=qsgd", "ZIPCCL_ALGO=allgather", "ZIPCCL_MIN_BYTES=0", file,
                         NULL};
    zc_harness_opts_t o = {.nranks = 3, .deadline_s = 60, .env = env};
    int rc = run_ranks(&o, stats_rank, NULL);
    for (int r = 0; r < 3; r++) {
        char path[128];
        snprintf(path, sizeof(path), "%s/stats-%d.json", stats_dir, r);
        unlink(path);
        snprintf(path, sizeof(path), "%s/named-%d.json", stats_dir, r);
        unlink(path);
    }
    rmdir(stats_dir);
    return rc != 0;
}

/* ---- cases ---------------------------------------------------------------------------------- */

static const comp_case_t comp_cases[] = {
    {"ring", "fp16", {1, 2, 3, 4}},
    {"ring", "bf16", {1, 2, 3, 4}},
    {"ring", "gradiveq", {1, 2, 3, 4}},
    {"allgather", "qsgd", {1, 2, 3, 4}},
    {"allgather", "topk", {1, 2, 3, 4}},
    {"allgather", "fp16", {1, 2, 3, 4}},
    {"allgather", "bf16", {1, 2, 3, 4}},
    {"allgather", "gradiveq", {1, 2, 3, 4}},
    {"scatter", "qsgd", {1, 2, 3, 4}},
    {"scatter", "topk", {1, 2, 3, 4}},
    {"scatter", "fp16", {1, 2, 3, 4}},
    {"scatter", "bf16", {1, 2, 3, 4}},
    {"scatter", "gradiveq", {1, 2, 3, 4}},
    {"ring", "qsgd-int", {1, 2, 3, 4}},
    {"ring", "qsgd", {4}},
};

static const comp_case_t comp_cases_8[] = {
    {"ring", "fp16", {8}},
    {"allgather", "qsgd", {8}},
    {"scatter", "topk", {8}},
    {"scatter", "gradiveq", {8}},
};

static int run_case(const char *name)
{
    char label[64];
    for (int n = 1; n <= 8; n++) {
        snprintf(label, sizeof(label), "raw-%d", n);
        if (strcmp(name, label) == 0)
            return case_raw(n);
    }
    for (size_t k = 0; k < ZC_ARRAY_SIZE(comp_cases); k++) {
        snprintf(label, sizeof(label), "%s-%s", comp_cases[k].algo, comp_cases[k].codec);
        if (strcmp(name, label) == 0)
            return case_compressed(&comp_cases[k]);
    }
    for (size_t k = 0; k < ZC_ARRAY_SIZE(comp_cases_8); k++) {
        snprintf(label, sizeof(label), "%s-%s-8", comp_cases_8[k].algo, comp_cases_8[k].codec);
        if (strcmp(name, label) == 0)
            return case_compressed(&comp_cases_8[k]);
    }
    if (strcmp(name, "unbiased-allgather") == 0)
        return case_unbiased("allgather");
    if (strcmp(name, "unbiased-scatter") == 0)
        return case_unbiased("scatter");
    if (strcmp(name, "unbiased-ring") == 0)
        return case_unbiased("ring");
    if (strcmp(name, "zero-and-args") == 0)
        return case_zero();
    if (strcmp(name, "mismatch") == 0)
        return case_mismatch(0);
    if (strcmp(name, "mismatch-compressed") == 0)
        return case_mismatch(1);
    if (strcmp(name, "kill") == 0)
        return case_kill(0);
    if (strcmp(name, "kill-compressed") == 0)
        return case_kill(1);
    if (strcmp(name, "nonblocking") == 0)
        return case_nonblocking(0);
    if (strcmp(name, "nonblocking-thread") == 0)
        return case_nonblocking(1);
    if (strcmp(name, "env-styles") == 0)
        return case_env_styles();
    if (strcmp(name, "stats") == 0)
        return case_stats();
    if (strcmp(name, "config") == 0)
        return case_config();
    return -1;
}

int main(int argc, char **argv)
{
    root_port_taken = shared_map(sizeof(int));
    return root_port_taken ? case_main(argc, argv, run_case) : 1;
}
