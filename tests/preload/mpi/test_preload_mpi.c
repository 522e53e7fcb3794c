/*
 * libzipccl-preload.so under a real MPI program (run by mpirun through zipccl-run; meson.build
 * gives the environment of each case):
 *
 *   passthrough  ineligible calls (int sums, float MAX, double MIN, float and double sums
 *                below ZIPCCL_MIN_BYTES, an int MPI_Iallreduce) give results bit-identical
 *                to PMPI_Allreduce's, and no zipccl communicator is made (no statistics file)
 *   unchanged    eligible-sized float and double sums under an environment that turns the
 *                preload off (ZIPCCL_CODEC=none, ZIPCCL_PRELOAD_MPI=0, a bad variable) or
 *                makes zipccl fail to connect (no UCX transport): bit-identical to
 *                PMPI_Allreduce, no statistics file
 *   compressed   eligible float and double sums (out of place, MPI_IN_PLACE, MPI_Iallreduce,
 *                at and around ZIPCCL_MIN_BYTES) within QSGD's error bound and identical on
 *                every rank, ineligible ones in between still bit-identical; the statistics
 *                file counts exactly the eligible calls, all compressed, with fewer bytes
 *   raw          ZIPCCL_CODEC=none with ZIPCCL_PRELOAD_RAW=1: eligible float and double sums
 *                (out of place, MPI_IN_PLACE, MPI_Iallreduce, at ZIPCCL_MIN_BYTES) run on
 *                zipccl's raw ring; their integer-valued inputs make every summation order
 *                exact, so the result equals the exact sum and PMPI_Allreduce's byte for
 *                byte; the doubles need more than f32's 24 bits, so a sum in f32 fails; the
 *                statistics file counts exactly these calls, none compressed
 *   split        sub-communicators of MPI_Comm_split (even and odd ranks): the same checks
 *                on them and on MPI_COMM_WORLD, twice; freeing one writes its statistics
 *   error        ranks passing different counts (MPI_ERRORS_RETURN): every rank gets
 *                MPI_ERR_OTHER, and later calls on that communicator go to MPI unchanged;
 *                with ZC_TEST_FAIL_RANK (engine/failing_engine.c) a call on MPI_COMM_WORLD
 *                that fails on that rank only: every rank passes through from the next call
 *
 * Bit-identity is checked against PMPI_Allreduce called directly on the same inputs (the
 * preload only interposes MPI_*). The exact sums are computed in double from every rank's
 * input, which each rank regenerates (a hash of the case, the call, the rank and the index).
 *
 * Usage: mpirun -np N zipccl-run --codec qsgd --stats-file DIR/s.%r.json -- test_preload_mpi CASE
 * Exit status 0 when every check passed; a failed check prints the rank and the call and
 * aborts the job.
 */
#include <mpi.h>

#include <math.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static int world_rank, world_size;
static const char *case_name;

static void fail(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));

static void fail(const char *fmt, ...)
{
    va_list ap;
    fprintf(stderr, "test_preload_mpi %s: rank %d: ", case_name, world_rank);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    int up = 0, down = 0;
    MPI_Initialized(&up);
    MPI_Finalized(&down);
    if (up && !down)
        MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1);
}

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond))                                                                               \
            fail(__VA_ARGS__);                                                                     \
    } while (0)

/* ---- inputs ------------------------------------------------------------------------------- */

static uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Rank r's inputs lie in [-a_r, a_r]: a payload credited to the wrong rank shows. */
static double amplitude(int rank)
{
    return 1.0 + rank / 4.0;
}

/* Element @p i of world rank @p rank's input of call @p call, as the float it is sent as. */
static float value(int call, int rank, size_t i)
{
    uint64_t h = mix64(mix64(0x5EED0000u + (uint64_t)call) ^ mix64((uint64_t)rank + 77) ^
                       mix64(i + 0x9E3779B97F4A7C15ull));
    double u = (double)(h >> 11) * 0x1p-53;
    return (float)(amplitude(rank) * (2 * u - 1));
}

static int int_value(int call, int rank, size_t i)
{
    return (int)(mix64(((uint64_t)call << 40) ^ ((uint64_t)rank << 32) ^ i) % 2000001) - 1000000;
}

static uint64_t fnv1a64(const void *buf, size_t len)
{
    const unsigned char *p = buf;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

static void *xmalloc(size_t len)
{
    void *p = malloc(len ? len : 1);
    CHECK(p, "out of memory (%zu bytes)", len);
    return p;
}

/* MPI_Allreduce, or MPI_Iallreduce and MPI_Wait when @p nonblocking: must succeed. */
static void allreduce(const char *what, const void *src, void *out, size_t count, MPI_Datatype type,
                      MPI_Op op, MPI_Comm comm, int nonblocking)
{
    int rc;
    if (nonblocking) {
        MPI_Request req;
        rc = MPI_Iallreduce(src, out, (int)count, type, op, comm, &req);
        CHECK(rc == MPI_SUCCESS, "%s: MPI_Iallreduce returned %d", what, rc);
        rc = MPI_Wait(&req, MPI_STATUS_IGNORE);
        CHECK(req == MPI_REQUEST_NULL, "%s: MPI_Wait left the request", what);
    } else {
        rc = MPI_Allreduce(src, out, (int)count, type, op, comm);
    }
    CHECK(rc == MPI_SUCCESS, "%s: returned %d", what, rc);
}

/* ---- bit-identity with PMPI ---------------------------------------------------------------- */

/*
 * MPI_Allreduce of @p count values of @p type (float, double or int: @p elem bytes) filled
 * from call @p call, compared byte for byte with PMPI_Allreduce of the same input; in place
 * when @p in_place, through MPI_Iallreduce when @p nonblocking.
 */
static void same_as_pmpi(const char *what, int call, MPI_Datatype type, MPI_Op op, size_t count,
                         int in_place, int nonblocking, MPI_Comm comm)
{
    size_t elem = type == MPI_DOUBLE ? 8 : 4;
    char *in = xmalloc(count * elem), *got = xmalloc(count * elem), *want = xmalloc(count * elem);
    for (size_t i = 0; i < count; i++) {
        if (type == MPI_INT)
            ((int *)in)[i] = int_value(call, world_rank, i);
        else if (type == MPI_DOUBLE)
            ((double *)in)[i] = value(call, world_rank, i) + 0x1p-30 * (double)(i % 7);
        else
            ((float *)in)[i] = value(call, world_rank, i);
    }
    int rc;
    if (in_place) {
        memcpy(got, in, count * elem);
        memcpy(want, in, count * elem);
        rc = PMPI_Allreduce(MPI_IN_PLACE, want, (int)count, type, op, comm);
    } else {
        rc = PMPI_Allreduce(in, want, (int)count, type, op, comm);
    }
    CHECK(rc == MPI_SUCCESS, "%s: PMPI_Allreduce returned %d", what, rc);
    allreduce(what, in_place ? MPI_IN_PLACE : in, got, count, type, op, comm, nonblocking);
    for (size_t i = 0; i < count * elem; i++)
        CHECK(got[i] == want[i], "%s: byte %zu of %zu differs from PMPI_Allreduce's (%d, not %d)",
              what, i, count * elem, got[i], want[i]);
    free(in);
    free(got);
    free(want);
}

/* ---- compressed calls --------------------------------------------------------------------- */

/* QSGD's level count s from ZIPCCL_QSGD_BITS (params.def: s = 2^(b-1) - 1, default b = 4). */
static double qsgd_levels(void)
{
    const char *b = getenv("ZIPCCL_QSGD_BITS");
    int bits = b ? atoi(b) : 4;
    return ldexp(1.0, bits - 1) - 1;
}

/*
 * The error bound of one element of a QSGD all-reduce (max scale) over the world ranks
 * @p members (test_allreduce.c's comp_bound, scatter case, which also covers allgather):
 * each rank's estimate errs by less than m/s <= a_r/s plus two f32 roundings; scatter's
 * owner re-encodes the partial sum (values below M (1 + 1/s + 2 u32), M = sum a_r): one more
 * such error; then N+2 f32 roundings of the accumulator, and the result's own rounding.
 * @p f64_input adds the rounding of every input to the f32 copy the preload reduces.
 */
static double qsgd_bound(const int *members, int n, double abs_sum, double exact, int f64_input)
{
    double u32 = 0x1p-24, s = qsgd_levels(), once = 1 / s + 2 * u32, big_m = 0;
    for (int k = 0; k < n; k++)
        big_m += amplitude(members[k]);
    double err = once * big_m + once * big_m * (1 + once);
    if (f64_input)
        err += u32 * abs_sum;
    err += (n + 2) * u32 * (abs_sum + err);
    err += n * 0x1p-53 / (1 - n * 0x1p-53) * abs_sum; /* the reference's own rounding */
    return err + u32 * (fabs(exact) + err) + 0x1p-126;
}

/*
 * An eligible sum of @p count floats (doubles when @p f64) from call @p call on @p comm,
 * whose ranks are the world ranks @p members: every element within qsgd_bound of the exact
 * sum, every rank holding the same bytes. Returns 1 (the call counts as a zipccl call).
 */
static int compressed_call(const char *what, int call, size_t count, int f64, int in_place,
                           int nonblocking, MPI_Comm comm, const int *members, int n)
{
    size_t elem = f64 ? 8 : 4;
    char *in = xmalloc(count * elem), *out = xmalloc(count * elem);
    for (size_t i = 0; i < count; i++) {
        if (f64)
            ((double *)in)[i] = value(call, world_rank, i);
        else
            ((float *)in)[i] = value(call, world_rank, i);
    }
    MPI_Datatype type = f64 ? MPI_DOUBLE : MPI_FLOAT;
    const void *src = in;
    if (in_place) {
        memcpy(out, in, count * elem);
        src = MPI_IN_PLACE;
    }
    allreduce(what, src, out, count, type, MPI_SUM, comm, nonblocking);
    for (size_t i = 0; !in_place && i < count; i++) {
        double v = f64 ? ((double *)in)[i] : ((float *)in)[i];
        CHECK(v == value(call, world_rank, i), "%s: the send buffer changed at %zu", what, i);
    }

    double worst = 0;
    for (size_t i = 0; i < count; i++) {
        double exact = 0, abs_sum = 0;
        for (int k = 0; k < n; k++) {
            double v = value(call, members[k], i);
            exact += v;
            abs_sum += fabs(v);
        }
        double got = f64 ? ((double *)out)[i] : ((float *)out)[i];
        double bound = qsgd_bound(members, n, abs_sum, exact, f64);
        CHECK(fabs(got - exact) <= bound, "%s: element %zu is %.9g, exact %.9g: error %.3g > %.3g",
              what, i, got, exact, fabs(got - exact), bound);
        if (fabs(got - exact) / bound > worst)
            worst = fabs(got - exact) / bound;
    }
    /* identical on every rank: the same hash as the lowest and the highest */
    uint64_t h = fnv1a64(out, count * elem), lo, hi;
    PMPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, comm);
    PMPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, comm);
    CHECK(lo == hi && h == lo, "%s: ranks hold different results", what);
    if (world_rank == 0)
        fprintf(stderr, "rank 0: %s: largest error %.3f of the bound\n", what, worst);
    free(in);
    free(out);
    return 1;
}

/* ---- raw calls ----------------------------------------------------------------------------- */

/*
 * World rank @p rank's element @p i of call @p call for the raw ring: an integer, exact in
 * any summation order of up to 64 ranks; as a double, one of up to 41 bits, which f32's 24
 * bits cannot hold (a sum done in f32 differs).
 */
static double raw_value(int call, int rank, size_t i, int f64)
{
    double v = (double)int_value(call, rank, i); /* |v| <= 10^6 < 2^20 */
    return f64 ? v * 1048576.0 + (double)(i % 7) : v;
}

/*
 * An eligible sum of @p count floats (doubles when @p f64) from call @p call over
 * MPI_COMM_WORLD under ZIPCCL_PRELOAD_RAW: equal to the exact sum of every rank's input and
 * byte for byte to PMPI_Allreduce's. Returns 1 (the call counts as a zipccl call).
 */
static int raw_call(const char *what, int call, size_t count, int f64, int in_place,
                    int nonblocking)
{
    size_t elem = f64 ? 8 : 4;
    MPI_Datatype type = f64 ? MPI_DOUBLE : MPI_FLOAT;
    char *in = xmalloc(count * elem), *out = xmalloc(count * elem), *want = xmalloc(count * elem);
    for (size_t i = 0; i < count; i++) {
        if (f64)
            ((double *)in)[i] = raw_value(call, world_rank, i, 1);
        else
            ((float *)in)[i] = (float)raw_value(call, world_rank, i, 0);
    }
    int rc = PMPI_Allreduce(in, want, (int)count, type, MPI_SUM, MPI_COMM_WORLD);
    CHECK(rc == MPI_SUCCESS, "%s: PMPI_Allreduce returned %d", what, rc);
    const void *src = in;
    if (in_place) {
        memcpy(out, in, count * elem);
        src = MPI_IN_PLACE;
    }
    allreduce(what, src, out, count, type, MPI_SUM, MPI_COMM_WORLD, nonblocking);
    for (size_t i = 0; i < count; i++) {
        double exact = 0;
        for (int r = 0; r < world_size; r++)
            exact += raw_value(call, r, i, f64);
        double got = f64 ? ((double *)out)[i] : ((float *)out)[i];
        CHECK(got == exact, "%s: element %zu is %.17g, the exact sum %.17g", what, i, got, exact);
    }
    for (size_t i = 0; i < count * elem; i++)
        CHECK(out[i] == want[i], "%s: byte %zu of %zu differs from PMPI_Allreduce's", what, i,
              count * elem);
    free(in);
    free(out);
    free(want);
    return 1;
}

/* ---- statistics files ---------------------------------------------------------------------- */

/* ZIPCCL_STATS_FILE with %r replaced by the world rank, plus @p suffix; NULL when unset. */
static char *stats_name(const char *suffix)
{
    const char *pattern = getenv("ZIPCCL_STATS_FILE");
    if (!pattern || !pattern[0])
        return NULL;
    char *out = xmalloc(strlen(pattern) + strlen(suffix) + 32), *o = out;
    for (const char *p = pattern; *p; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            o += sprintf(o, "%d", world_rank);
            p++;
        } else {
            *o++ = *p;
        }
    }
    strcpy(o, suffix);
    return out;
}

typedef struct stats {
    unsigned long long calls, calls_compressed, bytes_wire, bytes_wire_raw;
} stats_t;

static unsigned long long json_field(const char *text, const char *name, const char *file)
{
    char key[64];
    snprintf(key, sizeof(key), "\"%s\": ", name);
    const char *p = strstr(text, key);
    CHECK(p, "%s: no field %s", file, name);
    return strtoull(p + strlen(key), NULL, 10);
}

/* Reads the "total" object of a statistics file; 0 when it does not exist. */
static int stats_read(const char *name, stats_t *s)
{
    FILE *f = fopen(name, "r");
    if (!f)
        return 0;
    char text[16384];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    const char *total = strstr(text, "\"total\": {");
    CHECK(total, "%s: no \"total\" object in: %s", name, text);
    s->calls = json_field(total, "calls", name);
    s->calls_compressed = json_field(total, "calls_compressed", name);
    s->bytes_wire = json_field(total, "bytes_wire", name);
    s->bytes_wire_raw = json_field(total, "bytes_wire_raw", name);
    return 1;
}

/* Every zipccl call of the file compressed, exactly @p calls of them, fewer bytes sent. */
static void stats_expect(const char *suffix, int calls)
{
    char *name = stats_name(suffix);
    stats_t s;
    CHECK(name, "ZIPCCL_STATS_FILE is not set");
    CHECK(stats_read(name, &s), "%s was not written", name);
    CHECK(s.calls == (unsigned long long)calls, "%s: %llu calls, expected %d", name, s.calls,
          calls);
    CHECK(s.calls_compressed == s.calls, "%s: %llu of %llu calls compressed", name,
          s.calls_compressed, s.calls);
    CHECK(s.bytes_wire < s.bytes_wire_raw, "%s: %llu bytes sent, not fewer than raw %llu", name,
          s.bytes_wire, s.bytes_wire_raw);
    fprintf(stderr, "rank %d: %s: %llu calls, %llu bytes sent for %llu raw (%.2fx)\n", world_rank,
            name, s.calls, s.bytes_wire, s.bytes_wire_raw,
            (double)s.bytes_wire_raw / (double)s.bytes_wire);
    free(name);
}

/*
 * Exactly @p calls zipccl calls in the file, none compressed, all on one path: the raw ring
 * without a codec. It sends at least the raw ring's bytes (plus its call headers).
 */
static void stats_expect_raw(const char *suffix, int calls)
{
    char *name = stats_name(suffix), path[128], text[16384];
    stats_t s;
    CHECK(name, "ZIPCCL_STATS_FILE is not set");
    CHECK(stats_read(name, &s), "%s was not written", name);
    CHECK(s.calls == (unsigned long long)calls, "%s: %llu calls, expected %d", name, s.calls,
          calls);
    CHECK(s.calls_compressed == 0, "%s: %llu of %llu calls compressed", name, s.calls_compressed,
          s.calls);
    CHECK(s.bytes_wire_raw > 0 && s.bytes_wire >= s.bytes_wire_raw,
          "%s: %llu bytes sent, fewer than the raw ring's %llu", name, s.bytes_wire,
          s.bytes_wire_raw);
    FILE *f = fopen(name, "r");
    CHECK(f, "%s cannot be read", name);
    text[fread(text, 1, sizeof(text) - 1, f)] = '\0';
    fclose(f);
    snprintf(path, sizeof(path), "{\"algo\": \"raw\", \"codec\": \"none\", \"calls\": %d,", calls);
    const char *paths = strstr(text, "\"paths\": [");
    CHECK(paths && strstr(paths, path) && !strstr(strstr(paths, path) + 1, "{\"algo\""),
          "%s: the calls did not all take the path %s", name, path);
    fprintf(stderr, "rank %d: %s: %llu calls on the raw ring, %llu bytes sent for %llu raw\n",
            world_rank, name, s.calls, s.bytes_wire, s.bytes_wire_raw);
    free(name);
}

static void stats_expect_none(const char *suffix)
{
    char *name = stats_name(suffix);
    stats_t s;
    if (!name)
        return;
    CHECK(!stats_read(name, &s), "%s exists: a zipccl communicator was made", name);
    free(name);
}

/* Removes this rank's statistics files of an earlier run (before anything can write them). */
static void stats_clean(void)
{
    static const char *const suffixes[] = {"", ".comm1", ".comm2", ".comm3", ".comm4", ".comm5"};
    for (size_t i = 0; i < sizeof(suffixes) / sizeof(suffixes[0]); i++) {
        char *name = stats_name(suffixes[i]);
        if (name)
            unlink(name);
        free(name);
    }
}

/* ---- cases --------------------------------------------------------------------------------- */

#define MIN_FLOATS 16384 /* ZIPCCL_MIN_BYTES (64 KiB) of f32; f64 counts 4 bytes a value too */
#define BIG 100003

/* The ineligible calls, all bit-identical to PMPI's. Returns the next call number. */
static int ineligible_calls(int call, MPI_Comm comm)
{
    same_as_pmpi("int sum", call++, MPI_INT, MPI_SUM, BIG, 0, 0, comm);
    same_as_pmpi("int sum in place", call++, MPI_INT, MPI_SUM, BIG, 1, 0, comm);
    same_as_pmpi("int max", call++, MPI_INT, MPI_MAX, 1000, 0, 0, comm);
    same_as_pmpi("float max", call++, MPI_FLOAT, MPI_MAX, BIG, 0, 0, comm);
    same_as_pmpi("float min in place", call++, MPI_FLOAT, MPI_MIN, BIG, 1, 0, comm);
    same_as_pmpi("double max", call++, MPI_DOUBLE, MPI_MAX, BIG, 0, 0, comm);
    same_as_pmpi("float sum below min bytes", call++, MPI_FLOAT, MPI_SUM, MIN_FLOATS - 1, 0, 0,
                 comm);
    same_as_pmpi("float sum of 1", call++, MPI_FLOAT, MPI_SUM, 1, 1, 0, comm);
    /* below ZIPCCL_MIN_BYTES whether a double counts 4 bytes (compressed) or 8 (raw) */
    same_as_pmpi("double sum below min bytes", call++, MPI_DOUBLE, MPI_SUM, MIN_FLOATS / 2 - 1, 1,
                 0, comm);
    same_as_pmpi("int iallreduce", call++, MPI_INT, MPI_SUM, BIG, 0, 1, comm);
    same_as_pmpi("float prod", call++, MPI_FLOAT, MPI_PROD, 5000, 0, 0, comm);
    return call;
}

static int case_passthrough(void)
{
    ineligible_calls(100, MPI_COMM_WORLD);
    MPI_Finalize();
    stats_expect_none("");
    return 0;
}

static int case_unchanged(void)
{
    int call = 200;
    same_as_pmpi("float sum", call++, MPI_FLOAT, MPI_SUM, BIG, 0, 0, MPI_COMM_WORLD);
    same_as_pmpi("float sum in place", call++, MPI_FLOAT, MPI_SUM, BIG, 1, 0, MPI_COMM_WORLD);
    same_as_pmpi("double sum", call++, MPI_DOUBLE, MPI_SUM, BIG, 0, 0, MPI_COMM_WORLD);
    same_as_pmpi("float iallreduce", call++, MPI_FLOAT, MPI_SUM, BIG, 0, 1, MPI_COMM_WORLD);
    ineligible_calls(call, MPI_COMM_WORLD);
    MPI_Finalize();
    stats_expect_none("");
    return 0;
}

static int case_raw(void)
{
    int calls = 0, call = 600;

    calls += raw_call("float sum", call++, BIG, 0, 0, 0);
    call = ineligible_calls(call, MPI_COMM_WORLD);
    calls += raw_call("float sum in place", call++, BIG, 0, 1, 0);
    calls += raw_call("float sum at min bytes", call++, MIN_FLOATS, 0, 1, 0);
    calls += raw_call("float sum of 1M", call++, 1 << 20, 0, 0, 0);
    calls += raw_call("double sum", call++, BIG, 1, 0, 0);
    calls += raw_call("double sum in place at min bytes", call++, MIN_FLOATS / 2, 1, 1, 0);
    calls += raw_call("float iallreduce", call++, BIG, 0, 0, 1);
    calls += raw_call("double iallreduce in place", call++, BIG, 1, 1, 1);
    MPI_Finalize();
    stats_expect_raw("", calls);
    stats_expect_none(".comm2");
    return 0;
}

static int *world_members(void)
{
    int *m = xmalloc((size_t)world_size * sizeof(*m));
    for (int r = 0; r < world_size; r++)
        m[r] = r;
    return m;
}

static int case_compressed(void)
{
    int *all = world_members(), n = world_size, calls = 0, call = 300;
    MPI_Comm w = MPI_COMM_WORLD;

    calls += compressed_call("float sum", call++, BIG, 0, 0, 0, w, all, n);
    call = ineligible_calls(call, w);
    calls += compressed_call("float sum in place", call++, BIG, 0, 1, 0, w, all, n);
    calls += compressed_call("float sum at min bytes", call++, MIN_FLOATS, 0, 1, 0, w, all, n);
    calls += compressed_call("float sum of 1M", call++, 1 << 20, 0, 1, 0, w, all, n);
    calls += compressed_call("double sum", call++, BIG, 1, 0, 0, w, all, n);
    calls += compressed_call("double sum in place at min", call++, MIN_FLOATS, 1, 1, 0, w, all, n);
    calls += compressed_call("float iallreduce", call++, BIG, 0, 0, 1, w, all, n);
    calls += compressed_call("float iallreduce in place", call++, BIG, 0, 1, 1, w, all, n);
    /* the same buffer again (a stable tensor key, as a training loop's gradients) */
    calls += compressed_call("float sum again", 300, BIG, 0, 0, 0, w, all, n);
    free(all);
    MPI_Finalize();
    stats_expect("", calls);
    stats_expect_none(".comm2");
    return 0;
}

static int case_split(void)
{
    int *all = world_members(), world_calls = 0, call = 400;
    CHECK(world_size >= 4 && world_size % 2 == 0, "split needs an even number of ranks >= 4");

    world_calls +=
        compressed_call("world sum", call++, BIG, 0, 1, 0, MPI_COMM_WORLD, all, world_size);
    for (int round = 0; round < 2; round++) {
        MPI_Comm half;
        int color = world_rank % 2, n = 0, members[64];
        CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, world_rank, &half) == MPI_SUCCESS,
              "MPI_Comm_split failed");
        for (int r = color; r < world_size; r += 2)
            members[n++] = r;
        int sub_calls = 0;
        sub_calls += compressed_call("half sum", call++, BIG, 0, 0, 0, half, members, n);
        world_calls += compressed_call("world sum between", call++, BIG, 0, 1, 0, MPI_COMM_WORLD,
                                       all, world_size);
        call = ineligible_calls(call, half);
        sub_calls += compressed_call("half sum in place", call++, BIG, 0, 1, 0, half, members, n);
        sub_calls += compressed_call("half double sum", call++, BIG, 1, 0, 0, half, members, n);
        /* zipccl communicators 1 (world), 2 and 3 (the halves of each round) */
        char suffix[16];
        snprintf(suffix, sizeof(suffix), ".comm%d", round + 2);
        stats_expect_none(suffix);
        CHECK(MPI_Comm_free(&half) == MPI_SUCCESS, "MPI_Comm_free failed");
        /* freeing the communicator destroyed its zipccl communicator, which wrote its file */
        stats_expect(suffix, sub_calls);
    }
    world_calls +=
        compressed_call("world sum after", call++, BIG, 0, 0, 0, MPI_COMM_WORLD, all, world_size);
    free(all);
    MPI_Finalize();
    stats_expect("", world_calls);
    return 0;
}

static int case_error(void)
{
    MPI_Comm dup;
    int *all = world_members();
    CHECK(MPI_Comm_dup(MPI_COMM_WORLD, &dup) == MPI_SUCCESS, "MPI_Comm_dup failed");
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);

    compressed_call("dup sum", 500, BIG, 0, 0, 0, dup, all, world_size);
    /* rank 0 passes one value more: zipccl's call header differs on every rank */
    size_t count = BIG + (world_rank == 0);
    float *buf = xmalloc(count * sizeof(*buf));
    for (size_t i = 0; i < count; i++)
        buf[i] = 1.0f;
    int rc = MPI_Allreduce(MPI_IN_PLACE, buf, (int)count, MPI_FLOAT, MPI_SUM, dup);
    int cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_OTHER, "mismatched counts returned %d (class %d), not MPI_ERR_OTHER", rc,
          cls);
    free(buf);
    /* later eligible calls on dup pass through: bit-identical to PMPI */
    same_as_pmpi("float sum after the error", 501, MPI_FLOAT, MPI_SUM, BIG, 0, 0, dup);
    same_as_pmpi("float sum in place after the error", 502, MPI_FLOAT, MPI_SUM, BIG, 1, 0, dup);
    /* MPI_COMM_WORLD's own zipccl communicator is unaffected */
    compressed_call("world sum", 503, BIG, 0, 0, 0, MPI_COMM_WORLD, all, world_size);

    /*
     * A call that fails on one rank only and succeeds on the others (ZC_TEST_FAIL_RANK: the
     * libzipccl.so.0 of tests/preload/mpi/engine/ makes it fail there after zipccl ran it):
     * from the next call on every rank passes through together, bit-identical to PMPI. Ranks
     * that did not switch with it would run zipccl against PMPI and hang.
     */
    const char *fail_rank = getenv("ZC_TEST_FAIL_RANK");
    if (fail_rank) {
        MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
        size_t n = (size_t)atol(getenv("ZC_TEST_FAIL_COUNT"));
        float *one = xmalloc(n * sizeof(*one));
        for (size_t i = 0; i < n; i++)
            one[i] = 1.0f;
        rc = MPI_Allreduce(MPI_IN_PLACE, one, (int)n, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        MPI_Error_class(rc, &cls);
        if (world_rank == atoi(fail_rank))
            CHECK(cls == MPI_ERR_OTHER, "the call failing on this rank returned %d (class %d)", rc,
                  cls);
        else
            CHECK(rc == MPI_SUCCESS, "the call failing on rank %s returned %d here", fail_rank, rc);
        free(one);
        same_as_pmpi("world float sum after one rank's failure", 504, MPI_FLOAT, MPI_SUM, BIG, 0, 0,
                     MPI_COMM_WORLD);
        same_as_pmpi("world double sum in place after one rank's failure", 505, MPI_DOUBLE, MPI_SUM,
                     BIG, 1, 0, MPI_COMM_WORLD);
    }
    MPI_Comm_free(&dup);
    free(all);
    MPI_Finalize();
    /* dup (congruent to MPI_COMM_WORLD, made first) wrote the plain name: its one good call */
    stats_expect("", 1);
    /* MPI_COMM_WORLD: call 503 and, on every rank, the call zipccl ran before it "failed" */
    stats_expect(".comm2", fail_rank ? 2 : 1);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {{"passthrough", case_passthrough},
                 {"unchanged", case_unchanged},
                 {"compressed", case_compressed},
                 {"raw", case_raw},
                 {"split", case_split},
                 {"error", case_error}};

    case_name = argc == 2 ? argv[1] : "?";
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        if (strcmp(case_name, cases[c].name) != 0)
            continue;
        MPI_Init(&argc, &argv);
        MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
        MPI_Comm_size(MPI_COMM_WORLD, &world_size);
        stats_clean();
        MPI_Barrier(MPI_COMM_WORLD);
        return cases[c].fn();
    }
    fprintf(stderr, "usage: test_preload_mpi passthrough|unchanged|compressed|raw|split|error\n");
    return 2;
}
