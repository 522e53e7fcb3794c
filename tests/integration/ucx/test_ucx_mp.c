/*
 * The UCX transport across processes, bootstrapped by the tcp provider:
 * all-to-all exchanges of 0 B .. 64 MiB with content checks for 2, 3, 4 and 8
 * ranks, and a rank killed in the middle of 64 MiB transfers, which the others
 * must report as a failure of that peer within seconds.
 *
 * Usage: test_ucx_mp CASE (alltoall-N, kill-N). Exits 0 when the case passed;
 * otherwise the harness or the failing check says why on stderr. UCX_TLS from
 * the environment selects the transports (the meson tests run both the
 * default and tcp alone).
 */
#include "harness.h"
#include "rank_check.h"

#include "common/config.h"
#include "common/log.h"
#include "common/timer.h"
#include "transport/bootstrap/tcp.h"
#include "transport/ucx/ucx.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double elapsed_s(uint64_t start)
{
    return (double)(zc_time_ns() - start) / 1e9;
}

/* Config from the environment the harness set, the tcp bootstrap, a communicator. */
static zc_status_t setup(int rank, zc_config_t *cfg, zc_bootstrap_t **bs_p, zc_ucx_comm_t **comm_p)
{
    my_rank = rank;
    logged[0] = '\0';
    zc_log_set_sink(capture_sink, NULL);
    zc_harness_step("setup");
    ZC_CHECK(zc_config_load(NULL, cfg));
    ZC_CHECK(zc_config_apply(cfg));
    ZC_CHECK(zc_bootstrap_tcp_create(cfg, NULL, bs_p));
    zc_status_t status = zc_ucx_comm_create(cfg, *bs_p, comm_p);
    if (status != ZC_OK) {
        zc_bootstrap_destroy(*bs_p);
        *bs_p = NULL;
    }
    return status;
}

/*
 * Content of the message from @p src to @p dst of @p len bytes: 64-bit words
 * from a per-message seed, so that a message delivered to the wrong receive
 * or from the wrong sender is caught. Words, not bytes: 64 MiB x 64 pairs must
 * be generated and checked in a second on two cores.
 */
static uint64_t seed_of(int src, int dst, size_t len)
{
    uint64_t x = ((uint64_t)src << 40) ^ ((uint64_t)dst << 20) ^ (uint64_t)len;
    x ^= x >> 33;
    x *= 0xFF51AFD7ED558CCDull;
    return x ^ (x >> 29);
}

static void fill(void *buf, size_t len, int src, int dst)
{
    uint64_t seed = seed_of(src, dst, len), w;
    size_t n = len / 8;
    uint8_t *b = buf;
    for (size_t i = 0; i < n; i++) {
        w = seed + i * 0x9E3779B97F4A7C15ull;
        memcpy(b + i * 8, &w, 8);
    }
    w = seed + n * 0x9E3779B97F4A7C15ull;
    memcpy(b + n * 8, &w, len % 8);
}

/* The first byte that differs, or len. */
static size_t check(const void *buf, size_t len, int src, int dst)
{
    uint64_t seed = seed_of(src, dst, len), w, got;
    size_t n = len / 8;
    const uint8_t *b = buf;
    for (size_t i = 0; i < n; i++) {
        w = seed + i * 0x9E3779B97F4A7C15ull;
        memcpy(&got, b + i * 8, 8);
        if (got != w)
            for (size_t j = 0; j < 8; j++)
                if (b[i * 8 + j] != ((uint8_t *)&w)[j])
                    return i * 8 + j;
    }
    w = seed + n * 0x9E3779B97F4A7C15ull;
    for (size_t j = 0; j < len % 8; j++)
        if (b[n * 8 + j] != ((uint8_t *)&w)[j])
            return n * 8 + j;
    return len;
}

/* ---- all-to-all ------------------------------------------------------------------------------ */

static const size_t sizes[] = {0, 1, 4096, 1 << 20, 64 << 20};

/*
 * Up to 1 MiB every message is posted at once (2N requests in flight). Bigger
 * ones go in N rounds (send to rank + k, receive from rank - k) so that a rank
 * holds two 64 MiB buffers, not 2N.
 */
#define ALL_AT_ONCE_MAX (1 << 20)

static int alltoall_size(zc_ucx_comm_t *comm, int rank, int size, size_t len, uint64_t tag)
{
    int rounds = len <= ALL_AT_ONCE_MAX ? 1 : size;
    int per_round = size / rounds;
    uint8_t *out = malloc(len * (size_t)per_round + 1), *in = malloc(len * (size_t)per_round + 1);
    zc_ucx_req_t *req = calloc(2 * (size_t)per_round, sizeof(*req));
    CHECK(out && in && req, "out of memory for %zu bytes", len);

    for (int k = 0; k < rounds; k++) {
        zc_harness_step("all-to-all of %zu bytes, round %d", len, k);
        uint64_t completed = zc_ucx_completed(comm);
        for (int i = 0; i < per_round; i++) {
            int to = rounds == 1 ? i : (rank + k) % size;
            int from = rounds == 1 ? i : (rank - k + size) % size;
            fill(out + (size_t)i * len, len, rank, to);
            memset(in + (size_t)i * len, 0xA5, len);
            CHECK(zc_ucx_irecv(comm, from, tag, in + (size_t)i * len, len, &req[i]) == ZC_OK,
                  "irecv from %d", from);
            CHECK(zc_ucx_isend(comm, to, tag, out + (size_t)i * len, len, &req[per_round + i]) ==
                      ZC_OK,
                  "isend to %d", to);
        }
        zc_status_t st = zc_ucx_waitall(comm, req, 2 * (size_t)per_round, "all-to-all");
        CHECK(st == ZC_OK, "waitall of %zu bytes: %s", len, zc_status_string(st));
        /* every request counts once, and nothing else does (the collectives' deadlines) */
        uint64_t counted = zc_ucx_completed(comm) - completed;
        CHECK(counted == 2 * (uint64_t)per_round, "%llu requests counted completed, %d were",
              (unsigned long long)counted, 2 * per_round);
        for (int i = 0; i < per_round; i++) {
            int from = rounds == 1 ? i : (rank - k + size) % size;
            CHECK(req[i].length == len, "%zu of %zu bytes from %d", req[i].length, len, from);
            size_t bad = check(in + (size_t)i * len, len, from, rank);
            CHECK(bad == len, "%zu bytes from %d differ at byte %zu", len, from, bad);
        }
    }
    free(req);
    free(in);
    free(out);
    return 0;
}

static int alltoall_rank(int rank, int size, void *arg)
{
    size_t max = *(size_t *)arg;
    zc_config_t cfg;
    zc_bootstrap_t *bs = NULL;
    zc_ucx_comm_t *comm = NULL;

    zc_status_t status = setup(rank, &cfg, &bs, &comm);
    CHECK(status == ZC_OK, "setup: %s", zc_status_string(status));
    for (size_t s = 0; s < ZC_ARRAY_SIZE(sizes) && sizes[s] <= max; s++)
        if (alltoall_size(comm, rank, size, sizes[s], s) != 0)
            return 1;
    /* nobody closes before everyone is done: a closed peer is a failed peer */
    zc_harness_step("barrier");
    CHECK(zc_bootstrap_barrier(bs) == ZC_OK, "barrier");
    zc_ucx_comm_destroy(comm);
    zc_bootstrap_destroy(bs);
    CHECK(logged[0] == '\0', "something was logged: %s", logged);
    return 0;
}

static int case_alltoall(int n)
{
    /* every size for every n: 8 ranks x 64 MiB take about 3.5 s over tcp on 2 cores */
    size_t max = (size_t)64 << 20;
    zc_harness_opts_t o = {.nranks = n, .deadline_s = 100};
    return zc_harness_run(&o, alltoall_rank, &max) != 0;
}

/* ---- one message past 2^31 and 2^32 bytes (suite slow) --------------------------------------- */

/* Rank 0 sends @p len bytes to rank 1 and rank 1 sends them back: both directions checked. */
static int big_rank(int rank, int size, void *arg)
{
    size_t len = *(size_t *)arg;
    zc_config_t cfg;
    zc_bootstrap_t *bs = NULL;
    zc_ucx_comm_t *comm = NULL;
    zc_ucx_req_t req;
    uint8_t *buf = malloc(len);

    CHECK(buf, "out of memory for %zu bytes", len);
    zc_status_t status = setup(rank, &cfg, &bs, &comm);
    CHECK(status == ZC_OK, "setup: %s", zc_status_string(status));
    for (int dir = 0; dir < 2; dir++) {
        int from = dir, to = 1 - dir;
        zc_harness_step("%zu bytes from %d to %d", len, from, to);
        uint64_t t0 = zc_time_ns();
        if (rank == from) {
            fill(buf, len, from, to);
            CHECK(zc_ucx_isend(comm, to, 7, buf, len, &req) == ZC_OK, "isend");
        } else {
            CHECK(zc_ucx_irecv(comm, from, 7, buf, len, &req) == ZC_OK, "irecv");
        }
        status = zc_ucx_wait(comm, &req, "big message");
        CHECK(status == ZC_OK, "wait: %s", zc_status_string(status));
        if (rank == to) {
            CHECK(req.length == len, "received %zu of %zu bytes", req.length, len);
            size_t bad = check(buf, len, from, to);
            CHECK(bad == len, "byte %zu of %zu differs", bad, len);
            fprintf(stderr, "rank %d: %zu bytes from %d in %.2f s\n", rank, len, from,
                    elapsed_s(t0));
        }
    }
    zc_harness_step("barrier");
    CHECK(zc_bootstrap_barrier(bs) == ZC_OK, "barrier");
    zc_ucx_comm_destroy(comm);
    zc_bootstrap_destroy(bs);
    free(buf);
    return 0;
}

static int case_big(size_t len)
{
    zc_harness_opts_t o = {.nranks = 2, .deadline_s = 600};
    return zc_harness_run(&o, big_rank, &len) != 0;
}

/* ---- a rank killed mid-transfer -------------------------------------------------------------- */

#define KILL_LEN (64 << 20)

/*
 * Every rank exchanges 64 MiB with every other, over and over, until the victim
 * is killed in the middle of one exchange. Each survivor's wait must fail with
 * ZC_ERR_PEER in well under 5 s (ZIPCCL_TIMEOUT_S is 30), and the first error it
 * logged must name the victim.
 */
static int kill_rank(int rank, int size, void *arg)
{
    int victim = *(int *)arg;
    zc_config_t cfg;
    zc_bootstrap_t *bs = NULL;
    zc_ucx_comm_t *comm = NULL;
    size_t len = KILL_LEN;
    uint8_t *out = malloc(len), *in = malloc(len * (size_t)size);
    zc_ucx_req_t *req = calloc(2 * (size_t)size, sizeof(*req));

    CHECK(out && in && req, "out of memory");
    memset(out, rank, len);
    zc_status_t status = setup(rank, &cfg, &bs, &comm);
    CHECK(status == ZC_OK, "setup: %s", zc_status_string(status));
    CHECK(cfg.timeout_s == 30, "ZIPCCL_TIMEOUT_S is %lld, not 30", (long long)cfg.timeout_s);
    /* the first survivor is quiet from the start: its failures are not logged, still returned */
    const int quiet = rank == (victim + 1) % size;
    if (quiet)
        zc_ucx_set_quiet(comm);

    /* seconds from the start of the exchange that failed to its error */
    double fail_s = 0;
    uint64_t start = zc_time_ns();
    for (int it = 0; status == ZC_OK && elapsed_s(start) < 30; it++) {
        zc_harness_step("transfer %d", it);
        uint64_t t0 = zc_time_ns();
        size_t n = 0;
        /* posting fails too once the victim is known dead: that is then the error */
        for (int p = 0; p < size && status == ZC_OK; p++) {
            if (p == rank)
                continue;
            status = zc_ucx_irecv(comm, p, (uint64_t)it, in + (size_t)p * len, len, &req[n]);
            if (status == ZC_OK)
                status = zc_ucx_isend(comm, p, (uint64_t)it, out, len, &req[++n]);
            n += status == ZC_OK;
        }
        if (status == ZC_OK)
            status = zc_ucx_waitall(comm, req, n, "kill test");
        fail_s = elapsed_s(t0);
    }
    CHECK(rank != victim, "the victim survived 30 s of transfers");
    CHECK(status == ZC_ERR_PEER, "transfers ended with %s", zc_status_string(status));
    CHECK(fail_s < 5, "noticing the dead peer took %.1f s", fail_s);
    CHECK(zc_ucx_peer_failed(comm, victim), "peer %d is not known failed", victim);
    for (int p = 0; p < size; p++)
        CHECK(p == victim || !zc_ucx_peer_failed(comm, p), "peer %d, alive, is known failed", p);
    char name[64];
    snprintf(name, sizeof(name), "ucx: peer %d failed (", victim);
    if (quiet)
        CHECK(logged[0] == '\0', "a quiet communicator logged: %s", logged);
    else
        CHECK(strncmp(logged, name, strlen(name)) == 0, "the first error does not name peer %d: %s",
              victim, logged);
    /*
     * Stay a moment before leaving: a survivor that exits is a dead peer too, and
     * the others must have noticed the victim first for this test to mean anything.
     */
    uint64_t linger = zc_time_ns();
    while (elapsed_s(linger) < 1.5)
        zc_ucx_progress(comm);
    zc_ucx_comm_destroy(comm);
    zc_bootstrap_destroy(bs);
    fprintf(stderr, "rank %d: failed as expected, %.2f s into the exchange\n", rank, fail_s);
    return FAILED_AS_EXPECTED;
}

static int case_kill(int n, int victim)
{
    char *const env[] = {"ZIPCCL_TIMEOUT_S=30", NULL};
    zc_harness_opts_t o = {
        .nranks = n,
        .deadline_s = 60,
        .kill_rank = victim,
        .kill_at_step = "transfer 2",
        .kill_after_s = 0.02,
        .expect_fail_mask = ((1ul << n) - 1) & ~(1ul << victim),
        .expect_fail_status = FAILED_AS_EXPECTED,
        .env = env,
    };
    return zc_harness_run(&o, kill_rank, &victim) != 0;
}

/* ---- a rank killed while the others wait for it -----------------------------------------------
 */

/*
 * The victim has exchanged one message with everyone (so every connection is
 * up), then stops and is killed while the others wait for a message from it.
 * No transfer is in flight: only UCX's error detection (a reset tcp connection,
 * a keepalive round over shared memory) can tell them, and it must do so well
 * before ZIPCCL_TIMEOUT_S.
 */
static int idle_kill_rank(int rank, int size, void *arg)
{
    int victim = *(int *)arg;
    zc_config_t cfg;
    zc_bootstrap_t *bs = NULL;
    zc_ucx_comm_t *comm = NULL;
    uint64_t out = (uint64_t)rank, in[ZC_HARNESS_MAX_RANKS];
    zc_ucx_req_t req[2 * ZC_HARNESS_MAX_RANKS];

    zc_status_t status = setup(rank, &cfg, &bs, &comm);
    CHECK(status == ZC_OK, "setup: %s", zc_status_string(status));
    zc_harness_step("hello");
    for (int p = 0; p < size; p++) {
        CHECK(zc_ucx_irecv(comm, p, 1, &in[p], 8, &req[p]) == ZC_OK, "irecv");
        CHECK(zc_ucx_isend(comm, p, 1, &out, 8, &req[size + p]) == ZC_OK, "isend");
    }
    status = zc_ucx_waitall(comm, req, 2 * (size_t)size, "hello");
    CHECK(status == ZC_OK, "hello: %s", zc_status_string(status));
    if (rank == victim) {
        zc_harness_step("idle");
        for (;;)
            pause();
    }
    zc_harness_step("waiting for rank %d", victim);
    CHECK(zc_ucx_irecv(comm, victim, 2, &in[0], 8, &req[0]) == ZC_OK, "irecv");
    uint64_t t0 = zc_time_ns();
    status = zc_ucx_wait(comm, &req[0], "idle kill test");
    double s = elapsed_s(t0);
    CHECK(status == ZC_ERR_PEER, "wait ended with %s after %.1f s", zc_status_string(status), s);
    CHECK(s < 5, "noticing the dead peer took %.1f s", s);
    char name[64];
    snprintf(name, sizeof(name), "ucx: peer %d failed (", victim);
    CHECK(strncmp(logged, name, strlen(name)) == 0, "the first error does not name peer %d: %s",
          victim, logged);
    uint64_t linger = zc_time_ns();
    while (elapsed_s(linger) < 3)
        zc_ucx_progress(comm);
    zc_ucx_comm_destroy(comm);
    zc_bootstrap_destroy(bs);
    fprintf(stderr, "rank %d: failed as expected after %.2f s\n", rank, s);
    return FAILED_AS_EXPECTED;
}

static int case_idle_kill(int n, int victim)
{
    char *const env[] = {"ZIPCCL_TIMEOUT_S=30", NULL};
    zc_harness_opts_t o = {
        .nranks = n,
        .deadline_s = 60,
        .kill_rank = victim,
        .kill_at_step = "idle",
        .kill_after_s = 0.3,
        .expect_fail_mask = ((1ul << n) - 1) & ~(1ul << victim),
        .expect_fail_status = FAILED_AS_EXPECTED,
        .env = env,
    };
    return zc_harness_run(&o, idle_kill_rank, &victim) != 0;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "";
    int n = 0, rc;

    if (sscanf(name, "alltoall-%d", &n) == 1 && n >= 1 && n <= ZC_HARNESS_MAX_RANKS) {
        rc = case_alltoall(n);
    } else if (sscanf(name, "kill-%d", &n) == 1 && n >= 2 && n <= ZC_HARNESS_MAX_RANKS) {
        /* not rank 0: it is also the bootstrap's root, whose death the bootstrap reports */
        rc = case_kill(n, n - 1);
    } else if (strncmp(name, "big-", 4) == 0) {
        /* big-SIZE: one message of SIZE bytes each way ("2GiB", "4GiB") */
        zc_param_desc_t desc = {.kind = ZC_PARAM_KIND_SIZE, .min = 1, .max = INT64_MAX};
        int64_t len;
        if (zc_param_parse(&desc, name + 4, &len) != ZC_OK) {
            fprintf(stderr, "%s: bad size '%s'\n", argv[0], name + 4);
            return 2;
        }
        rc = case_big((size_t)len);
    } else if (sscanf(name, "idle-kill-%d", &n) == 1 && n >= 2 && n <= ZC_HARNESS_MAX_RANKS) {
        rc = case_idle_kill(n, n - 1);
    } else {
        fprintf(stderr,
                "usage: %s alltoall-N | kill-N | idle-kill-N | big-SIZE (unknown case '%s')\n",
                argv[0], name);
        return 2;
    }
    const char *tls = getenv("UCX_TLS");
    fprintf(stderr, "%s (UCX_TLS=%s): %s\n", name, tls ? tls : "default", rc ? "FAILED" : "passed");
    return rc ? 1 : 0;
}
