/*
 * The UCX transport in one process: each rank is a thread with its own
 * communicator (worker), connected through the in-memory bootstrap, over the
 * transports UCX picks on this machine (UCX_TLS as the test runs it).
 */
#include "common/config.h"
#include "common/log.h"
#include "common/timer.h"
#include "tests/unit/ucx/membs.h"
#include "transport/ucx/ucx.h"

/* warnings and errors only: 32 messages of up to 511 bytes are plenty */
#define LOG_CAPTURE_MAX 32
#define LOG_CAPTURE_LEN 512
#include "tests/unit/ucx/log_capture.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void setup(void)
{
    capture_start(ZC_LOG_WARN);
}

TestSuite(ucx, .init = setup, .fini = capture_stop, .timeout = 120);

/* A stuck rank fails its test in seconds, not after the default 300 s. */
static zc_config_t test_config(int64_t timeout_s)
{
    zc_config_t cfg;
    zc_config_defaults(&cfg);
    cfg.timeout_s = timeout_s;
    return cfg;
}

#define RUN(size, cfg, body, arg)                                                                  \
    do {                                                                                           \
        char why_[600];                                                                            \
        int ret_ = membs_run((size), (cfg), (body), (arg), why_, sizeof(why_));                    \
        cr_assert_eq(ret_, 0, "%s (log: %s)", why_, cap_count ? cap_msg[0] : "");                  \
    } while (0)

/* Byte i of the message from @p src to @p dst tagged @p tag: distinct per message. */
static uint8_t pattern(int src, int dst, uint64_t tag, size_t i)
{
    uint64_t x = (uint64_t)i * 0x9E3779B97F4A7C15ull ^ ((uint64_t)src << 48) ^
                 ((uint64_t)dst << 40) ^ tag * 0xD6E8FEB86659FD93ull;
    return (uint8_t)(x >> 56 ^ x >> 13 ^ x);
}

static void fill(uint8_t *buf, size_t len, int src, int dst, uint64_t tag)
{
    for (size_t i = 0; i < len; i++)
        buf[i] = pattern(src, dst, tag, i);
}

/* The first byte that differs from the pattern, or len. */
static size_t check(const uint8_t *buf, size_t len, int src, int dst, uint64_t tag)
{
    for (size_t i = 0; i < len; i++)
        if (buf[i] != pattern(src, dst, tag, i))
            return i;
    return len;
}

/* ---- create, destroy ---- */

static void body_identity(membs_rank_t *r)
{
    MEMBS_CHECK(r, zc_ucx_comm_rank(r->comm) == r->rank, "rank %d", zc_ucx_comm_rank(r->comm));
    MEMBS_CHECK(r, zc_ucx_comm_size(r->comm) == r->size, "size %d", zc_ucx_comm_size(r->comm));
}

Test(ucx, create_and_destroy_1_2_4_ranks)
{
    zc_config_t cfg = test_config(20);
    RUN(1, &cfg, body_identity, NULL);
    RUN(2, &cfg, body_identity, NULL);
    RUN(4, &cfg, body_identity, NULL);
}

/* ---- every size, to every rank (itself included), content checked ---- */

typedef struct sizes_arg {
    const size_t *sizes;
    size_t nsizes;
} sizes_arg_t;

static void body_all_to_all(membs_rank_t *r)
{
    const sizes_arg_t *a = r->arg;
    int n = r->size;

    for (size_t s = 0; s < a->nsizes; s++) {
        size_t len = a->sizes[s];
        uint64_t tag = s + 1;
        uint8_t *out = malloc(len * (size_t)n + 1), *in = malloc(len * (size_t)n + 1);
        zc_ucx_req_t *req = calloc(2 * (size_t)n, sizeof(*req));
        MEMBS_CHECK(r, out && in && req, "out of memory for %zu bytes", len);
        for (int p = 0; p < n; p++) {
            fill(out + (size_t)p * len, len, r->rank, p, tag);
            memset(in + (size_t)p * len, 0xA5, len);
        }
        for (int p = 0; p < n; p++)
            MEMBS_CHECK(r,
                        zc_ucx_irecv(r->comm, p, tag, in + (size_t)p * len, len, &req[p]) == ZC_OK,
                        "irecv");
        for (int p = 0; p < n; p++)
            MEMBS_CHECK(
                r, zc_ucx_isend(r->comm, p, tag, out + (size_t)p * len, len, &req[n + p]) == ZC_OK,
                "isend");
        zc_status_t st = zc_ucx_waitall(r->comm, req, 2 * (size_t)n, "all-to-all");
        MEMBS_CHECK(r, st == ZC_OK, "waitall of %zu bytes: %s", len, zc_status_string(st));
        for (int p = 0; p < n; p++) {
            MEMBS_CHECK(r, req[p].length == len, "from %d got %zu of %zu bytes", p, req[p].length,
                        len);
            size_t bad = check(in + (size_t)p * len, len, p, r->rank, tag);
            MEMBS_CHECK(r, bad == len, "%zu bytes from %d differ at byte %zu", len, p, bad);
        }
        free(req);
        free(in);
        free(out);
    }
}

Test(ucx, sizes_0_to_64MiB_content_checked)
{
    static const size_t sizes[] = {0,     1,           7,           64,       4096, 8191,
                                   65536, 1000 * 1000, 1024 * 1024, 64 << 20, 4097};
    sizes_arg_t a = {sizes, ZC_ARRAY_SIZE(sizes)};
    zc_config_t cfg = test_config(60);
    RUN(2, &cfg, body_all_to_all, &a);
}

Test(ucx, three_ranks_all_to_all)
{
    static const size_t sizes[] = {0, 1, 4096, 1 << 20};
    sizes_arg_t a = {sizes, ZC_ARRAY_SIZE(sizes)};
    zc_config_t cfg = test_config(30);
    RUN(3, &cfg, body_all_to_all, &a);
}

Test(ucx, without_peer_error_handling_too)
{
    /* ZIPCCL_UCX_PEER_ERRORS=0: UCX may pick shared memory; the contract is the same */
    static const size_t sizes[] = {0, 1, 4096, 1 << 20, 8 << 20};
    sizes_arg_t a = {sizes, ZC_ARRAY_SIZE(sizes)};
    zc_config_t cfg = test_config(30);
    cfg.ucx_peer_errors = 0;
    RUN(3, &cfg, body_all_to_all, &a);
}

/* ---- many outstanding requests per peer ---- */

#define MANY 2000

static void body_many(membs_rank_t *r)
{
    int peer = 1 - r->rank;
    uint64_t *out = calloc(MANY, sizeof(*out)), *in = calloc(MANY, sizeof(*in));
    zc_ucx_req_t *req = calloc(2 * MANY, sizeof(*req));
    MEMBS_CHECK(r, out && in && req, "out of memory");

    /* receives posted in the reverse order of the sends, each on its own tag */
    for (int i = 0; i < MANY; i++) {
        int t = MANY - 1 - i;
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, peer, (uint64_t)t, &in[t], 8, &req[i]) == ZC_OK,
                    "irecv %d", t);
    }
    for (int i = 0; i < MANY; i++) {
        out[i] = (uint64_t)r->rank << 32 | (uint64_t)i;
        MEMBS_CHECK(r,
                    zc_ucx_isend(r->comm, peer, (uint64_t)i, &out[i], 8, &req[MANY + i]) == ZC_OK,
                    "isend %d", i);
    }
    zc_status_t st = zc_ucx_waitall(r->comm, req, 2 * MANY, "many");
    MEMBS_CHECK(r, st == ZC_OK, "waitall: %s", zc_status_string(st));
    for (int i = 0; i < MANY; i++)
        MEMBS_CHECK(r, in[i] == ((uint64_t)peer << 32 | (uint64_t)i), "tag %d got 0x%" PRIx64, i,
                    in[i]);
    free(req);
    free(in);
    free(out);
}

Test(ucx, many_outstanding_requests_per_peer)
{
    zc_config_t cfg = test_config(30);
    RUN(2, &cfg, body_many, NULL);
}

/* ---- matching by sender and by tag ---- */

/*
 * Ranks 1 and 2 both send tag 5 to rank 0 (and tag 6 after it); rank 0 posts the
 * receive from 2 first and tag 6 before tag 5: each receive gets its sender's
 * message of its tag.
 */
static void body_match(membs_rank_t *r)
{
    uint32_t out[2], in[3][2] = {{0}};
    zc_ucx_req_t req[4];

    if (r->rank == 0) {
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 2, 5, &in[2][0], 4, &req[0]) == ZC_OK, "irecv");
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 1, 6, &in[1][1], 4, &req[1]) == ZC_OK, "irecv");
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 1, 5, &in[1][0], 4, &req[2]) == ZC_OK, "irecv");
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 2, 6, &in[2][1], 4, &req[3]) == ZC_OK, "irecv");
        zc_status_t st = zc_ucx_waitall(r->comm, req, 4, "match");
        MEMBS_CHECK(r, st == ZC_OK, "waitall: %s", zc_status_string(st));
        for (int src = 1; src <= 2; src++)
            for (int t = 0; t < 2; t++)
                MEMBS_CHECK(r, in[src][t] == (uint32_t)(src * 100 + 5 + t), "from %d tag %d got %u",
                            src, 5 + t, in[src][t]);
    } else {
        out[0] = (uint32_t)(r->rank * 100 + 5);
        out[1] = (uint32_t)(r->rank * 100 + 6);
        MEMBS_CHECK(r, zc_ucx_isend(r->comm, 0, 5, &out[0], 4, &req[0]) == ZC_OK, "isend");
        MEMBS_CHECK(r, zc_ucx_isend(r->comm, 0, 6, &out[1], 4, &req[1]) == ZC_OK, "isend");
        zc_status_t st = zc_ucx_waitall(r->comm, req, 2, "match");
        MEMBS_CHECK(r, st == ZC_OK, "waitall: %s", zc_status_string(st));
    }
}

Test(ucx, receives_match_sender_and_tag)
{
    zc_config_t cfg = test_config(20);
    RUN(3, &cfg, body_match, NULL);
}

/* ---- order per (peer, tag) ---- */

#define ORDERED 64

/* Message i has a size that alternates eager and rendezvous, and carries i. */
static size_t ordered_len(int i)
{
    return i % 3 == 0 ? (size_t)(256 << 10) + (size_t)i : (size_t)8 + (size_t)i;
}

static void body_order(membs_rank_t *r)
{
    size_t max = ordered_len(0) + ORDERED;
    uint8_t *buf = malloc(max * ORDERED);
    zc_ucx_req_t *req = calloc(ORDERED, sizeof(*req));
    MEMBS_CHECK(r, buf && req, "out of memory");

    for (int i = 0; i < ORDERED; i++) {
        uint8_t *b = buf + (size_t)i * max;
        if (r->rank == 1) {
            fill(b, ordered_len(i), 1, 0, (uint64_t)i);
            MEMBS_CHECK(r, zc_ucx_isend(r->comm, 0, 42, b, ordered_len(i), &req[i]) == ZC_OK,
                        "isend");
        } else {
            MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 1, 42, b, max, &req[i]) == ZC_OK, "irecv");
        }
    }
    zc_status_t st = zc_ucx_waitall(r->comm, req, ORDERED, "order");
    MEMBS_CHECK(r, st == ZC_OK, "waitall: %s", zc_status_string(st));
    if (r->rank == 0) {
        for (int i = 0; i < ORDERED; i++) {
            MEMBS_CHECK(r, req[i].length == ordered_len(i), "receive %d got %zu bytes, not %zu", i,
                        req[i].length, ordered_len(i));
            size_t len = ordered_len(i);
            MEMBS_CHECK(r, check(buf + (size_t)i * max, len, 1, 0, (uint64_t)i) == len,
                        "receive %d holds another message", i);
        }
    }
    free(req);
    free(buf);
}

Test(ucx, same_peer_and_tag_arrive_in_send_order)
{
    zc_config_t cfg = test_config(30);
    RUN(2, &cfg, body_order, NULL);
}

/*
 * ---- sleeping until the worker has work (zc_ucx_worker_sleep) ----
 * After the ranks' first message: before it, UCX 1.13's descriptor was readable at once after
 * every arm here (2500 sleeps in 0.1 s), so a waiter then polls in effect.
 */

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Progresses until a round finds nothing, then sleeps; until @p done or @p budget_s passed. */
static int sleep_until(zc_ucx_comm_t *comm, const zc_status_t *done, uint64_t timeout_ns,
                       double budget_s, int *slept_p)
{
    uint64_t t0 = zc_time_ns();
    while (*done == ZC_INPROGRESS && (double)(zc_time_ns() - t0) / 1e9 < budget_s) {
        if (zc_ucx_progress(comm) > 0)
            continue;
        zc_ucx_worker_t *w = zc_ucx_comm_worker(comm);
        zc_status_t st = zc_ucx_worker_sleep(&w, 1, timeout_ns);
        if (st == ZC_OK)
            ++*slept_p;
        else if (st != ZC_INPROGRESS)
            return st;
    }
    return ZC_OK;
}

static void body_sleep(membs_rank_t *r)
{
    uint8_t buf[64];
    zc_ucx_req_t req;
    int slept = 0;

    zc_bootstrap_barrier(r->bs);
    if (r->rank == 1) {
        struct timespec late = {.tv_nsec = 300000000L};
        nanosleep(&late, NULL);
        memset(buf, 9, sizeof(buf));
        MEMBS_CHECK(r, zc_ucx_isend(r->comm, 0, 0x20, buf, sizeof(buf), &req) == ZC_OK, "isend");
        MEMBS_CHECK(r, zc_ucx_wait(r->comm, &req, "send") == ZC_OK, "send");
    } else {
        /* a message wakes a sleep of 10 s at once, and the wait costs next to no CPU */
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 1, 0x20, buf, sizeof(buf), &req) == ZC_OK, "irecv");
        uint64_t t0 = zc_time_ns();
        double cpu0 = thread_cpu_s();
        MEMBS_CHECK(r, sleep_until(r->comm, &req.status, 10000000000ull, 5.0, &slept) == ZC_OK,
                    "sleep");
        double wall = (double)(zc_time_ns() - t0) / 1e9, cpu = thread_cpu_s() - cpu0;
        MEMBS_CHECK(r, req.status == ZC_OK && buf[0] == 9 && buf[63] == 9, "receive: %s",
                    zc_status_string(req.status));
        MEMBS_CHECK(r, slept >= 1, "never slept");
        MEMBS_CHECK(r, wall >= 0.2 && wall < 2.0,
                    "woke %.3f s after the wait began (sent at 0.3 s)", wall);
        MEMBS_CHECK(r, cpu < 0.3 * wall, "%.3f s of CPU in %.3f s of waiting", cpu, wall);
    }

    /* nothing to wait for: sleeps end at their timeout */
    zc_status_t never = ZC_INPROGRESS;
    slept = 0;
    uint64_t t0 = zc_time_ns();
    MEMBS_CHECK(r, sleep_until(r->comm, &never, 20000000ull, 0.1, &slept) == ZC_OK, "sleep");
    double s = (double)(zc_time_ns() - t0) / 1e9;
    MEMBS_CHECK(r, slept >= 1 && slept <= 8, "%d sleeps of 20 ms in %.3f s", slept, s);
    zc_bootstrap_barrier(r->bs);
}

Test(ucx, sleep_ends_at_timeout_or_at_a_message)
{
    zc_config_t cfg = test_config(20);
    RUN(2, &cfg, body_sleep, NULL);
    cfg.ucx_peer_errors = 0; /* shared memory and cma: they wake sleepers too */
    RUN(2, &cfg, body_sleep, NULL);
}

Test(ucx, sleep_refuses_bad_arguments)
{
    cr_assert_eq(zc_ucx_worker_sleep(NULL, 0, 1000), ZC_ERR_INVALID_ARG);
    zc_ucx_worker_t *w[ZC_UCX_SLEEP_MAX + 1] = {NULL};
    cr_assert_eq(zc_ucx_worker_sleep(w, ZC_UCX_SLEEP_MAX + 1, 1000), ZC_ERR_INVALID_ARG);
}

/* ---- deadlines ---- */

static void body_timeout(membs_rank_t *r)
{
    uint8_t buf[16];
    zc_ucx_req_t req, late;

    if (r->rank == 0) {
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 1, 0x9, buf, sizeof(buf), &req) == ZC_OK, "irecv");
        uint64_t t0 = zc_time_ns();
        zc_status_t st = zc_ucx_wait(r->comm, &req, "unit step 3");
        double s = (double)(zc_time_ns() - t0) / 1e9;
        MEMBS_CHECK(r, st == ZC_ERR_TIMEOUT, "wait returned %s", zc_status_string(st));
        MEMBS_CHECK(r, req.status == ZC_ERR_TIMEOUT, "request status %d", req.status);
        MEMBS_CHECK(r, s >= 0.99 && s < 3.0, "timed out after %.2f s, not 1 s", s);
    }
    /* the communicator still works after a timeout */
    zc_bootstrap_barrier(r->bs);
    if (r->rank == 0) {
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 1, 0xA, buf, sizeof(buf), &late) == ZC_OK, "irecv");
    } else {
        memset(buf, 7, sizeof(buf));
        MEMBS_CHECK(r, zc_ucx_isend(r->comm, 0, 0xA, buf, sizeof(buf), &late) == ZC_OK, "isend");
    }
    zc_status_t st = zc_ucx_wait(r->comm, &late, "after the timeout");
    MEMBS_CHECK(r, st == ZC_OK, "wait after the timeout: %s", zc_status_string(st));
    MEMBS_CHECK(r, buf[0] == 7 && buf[15] == 7, "wrong data after the timeout");
}

Test(ucx, wait_without_sender_times_out_naming_peer_and_operation)
{
    zc_config_t cfg = test_config(1);
    RUN(2, &cfg, body_timeout, NULL);
    const char *want[] = {
        "peer 1", "recv of 16 bytes", "tag 0x9", "timed out after 1 s", "unit step 3", NULL};
    cr_assert_not_null(captured_with(want),
                       "no message naming the peer and the operation (%d "
                       "captured, first: %s)",
                       cap_count, cap_count ? cap_msg[0] : "");
    cr_assert_eq(captured_count("timed out"), 1, "the timeout was logged %d times",
                 captured_count("timed out"));
}

static void body_waitall_timeout(membs_rank_t *r)
{
    uint8_t a[4] = {1, 2, 3, 4}, b[4];
    zc_ucx_req_t req[3];

    if (r->rank == 0) {
        /* one request succeeds, two never do: both are abandoned with the timeout */
        MEMBS_CHECK(r, zc_ucx_isend(r->comm, 0, 1, a, 4, &req[0]) == ZC_OK, "isend");
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 0, 1, b, 4, &req[1]) == ZC_OK, "irecv");
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 1, 2, b, 4, &req[2]) == ZC_OK, "irecv");
        zc_status_t st = zc_ucx_waitall(r->comm, req, 3, "gather");
        MEMBS_CHECK(r, st == ZC_ERR_TIMEOUT, "waitall returned %s", zc_status_string(st));
        MEMBS_CHECK(r, req[0].status == ZC_OK && req[1].status == ZC_OK,
                    "the requests that could finish did not: %d %d", req[0].status, req[1].status);
        MEMBS_CHECK(r, req[2].status == ZC_ERR_TIMEOUT, "request status %d", req[2].status);
        MEMBS_CHECK(r, memcmp(a, b, 4) == 0, "self message corrupted");
    }
}

Test(ucx, waitall_deadline_names_the_stuck_request)
{
    zc_config_t cfg = test_config(1);
    RUN(2, &cfg, body_waitall_timeout, NULL);
    const char *want[] = {"recv of 4 bytes tag 0x2 from peer 1", "in gather",
                          "1 of 3 requests incomplete", NULL};
    cr_assert_not_null(captured_with(want),
                       "no message naming the stuck request (%d captured, "
                       "first: %s)",
                       cap_count, cap_count ? cap_msg[0] : "");
}

/* ---- truncation ---- */

static void body_truncate(membs_rank_t *r)
{
    uint8_t big[100] = {0}, small[10];
    zc_ucx_req_t req;

    if (r->rank == 1) {
        MEMBS_CHECK(r, zc_ucx_isend(r->comm, 0, 3, big, sizeof(big), &req) == ZC_OK, "isend");
    } else {
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 1, 3, small, sizeof(small), &req) == ZC_OK, "irecv");
    }
    zc_status_t st = zc_ucx_wait(r->comm, &req, "truncation");
    if (r->rank == 0)
        MEMBS_CHECK(r, st == ZC_ERR_BUFFER_TOO_SMALL, "wait returned %s", zc_status_string(st));
}

Test(ucx, longer_message_than_buffer_fails_the_receive)
{
    zc_config_t cfg = test_config(20);
    RUN(2, &cfg, body_truncate, NULL);
    const char *want[] = {"recv of 10 bytes tag 0x3 from peer 1", "longer than the buffer", NULL};
    cr_assert_not_null(captured_with(want), "%d captured, first: %s", cap_count,
                       cap_count ? cap_msg[0] : "");
}

/* ---- callbacks and test ---- */

typedef struct chain {
    zc_ucx_comm_t *comm;
    int calls;
    zc_status_t last;
    zc_ucx_req_t next;
    uint32_t value;
} chain_t;

/* On the first completion, posts a second receive from inside the callback. */
static void chain_done(zc_ucx_req_t *req, void *arg)
{
    chain_t *c = arg;
    c->calls++;
    c->last = req->status;
    if (c->calls == 1)
        zc_ucx_irecv_cb(c->comm, 1, 8, &c->value, 4, chain_done, c, &c->next);
}

static void body_callbacks(membs_rank_t *r)
{
    zc_ucx_req_t req[2];
    uint32_t v[2] = {11, 22}, first = 0;

    if (r->rank == 1) {
        MEMBS_CHECK(r, zc_ucx_isend(r->comm, 0, 7, &v[0], 4, &req[0]) == ZC_OK, "isend");
        MEMBS_CHECK(r, zc_ucx_isend(r->comm, 0, 8, &v[1], 4, &req[1]) == ZC_OK, "isend");
        zc_status_t st = zc_ucx_waitall(r->comm, req, 2, "callbacks");
        MEMBS_CHECK(r, st == ZC_OK, "waitall: %s", zc_status_string(st));
        return;
    }
    chain_t c = {.comm = r->comm};
    MEMBS_CHECK(r, zc_ucx_irecv_cb(r->comm, 1, 7, &first, 4, chain_done, &c, &req[0]) == ZC_OK,
                "irecv");
    /* zc_ucx_test until both callbacks ran, under our own deadline */
    uint64_t deadline = zc_time_ns() + 10000000000ull;
    while (c.calls < 2 && zc_time_ns() < deadline)
        zc_ucx_test(r->comm, c.calls == 0 ? &req[0] : &c.next);
    MEMBS_CHECK(r, c.calls == 2, "%d callbacks ran", c.calls);
    MEMBS_CHECK(r, c.last == ZC_OK && req[0].status == ZC_OK && c.next.status == ZC_OK,
                "statuses %d %d", req[0].status, c.next.status);
    MEMBS_CHECK(r, first == 11 && c.value == 22, "got %u and %u", first, c.value);
    MEMBS_CHECK(r, zc_ucx_test(r->comm, &req[0]) == ZC_OK, "test of a completed request");
}

Test(ucx, callbacks_run_once_and_may_post)
{
    zc_config_t cfg = test_config(20);
    RUN(2, &cfg, body_callbacks, NULL);
}

/* ---- bad arguments ---- */

static void body_bad_args(membs_rank_t *r)
{
    zc_ucx_comm_t *c = r->comm;
    uint8_t buf[8] = {0};
    zc_ucx_req_t req, sentinel;
    memset(&sentinel, 0x5A, sizeof(sentinel));

#define BAD(call)                                                                                  \
    do {                                                                                           \
        req = sentinel;                                                                            \
        zc_status_t st_ = (call);                                                                  \
        MEMBS_CHECK(r, st_ == ZC_ERR_INVALID_ARG, "%s returned %s", #call, zc_status_string(st_)); \
        MEMBS_CHECK(r, memcmp(&req, &sentinel, sizeof(req)) == 0, "%s wrote the request", #call);  \
    } while (0)

    BAD(zc_ucx_isend(NULL, 0, 0, buf, 8, &req));
    BAD(zc_ucx_isend(c, -1, 0, buf, 8, &req));
    BAD(zc_ucx_isend(c, r->size, 0, buf, 8, &req));
    BAD(zc_ucx_isend(c, 0, ZC_UCX_TAG_MAX + 1, buf, 8, &req));
    BAD(zc_ucx_isend(c, 0, UINT64_MAX, buf, 8, &req));
    BAD(zc_ucx_isend(c, 0, 0, NULL, 8, &req));
    BAD(zc_ucx_irecv(NULL, 0, 0, buf, 8, &req));
    BAD(zc_ucx_irecv(c, -1, 0, buf, 8, &req));
    BAD(zc_ucx_irecv(c, r->size, 0, buf, 8, &req));
    BAD(zc_ucx_irecv(c, 0, ZC_UCX_TAG_MAX + 1, buf, 8, &req));
    BAD(zc_ucx_irecv(c, 0, 0, NULL, 1, &req));
    BAD(zc_ucx_test(NULL, &req));
    BAD(zc_ucx_test(c, NULL));
    BAD(zc_ucx_wait(NULL, &req, "x"));
    BAD(zc_ucx_waitall(c, NULL, 2, "x"));
#undef BAD
    MEMBS_CHECK(r, zc_ucx_isend(c, 0, 0, buf, 8, NULL) == ZC_ERR_INVALID_ARG, "NULL request");
    MEMBS_CHECK(r, zc_ucx_irecv(c, 0, 0, buf, 8, NULL) == ZC_ERR_INVALID_ARG, "NULL request");
    /* the largest tag and empty messages with a NULL buffer are fine */
    zc_ucx_req_t ok[2];
    MEMBS_CHECK(r, zc_ucx_irecv(c, r->rank, ZC_UCX_TAG_MAX, NULL, 0, &ok[0]) == ZC_OK, "irecv");
    MEMBS_CHECK(r, zc_ucx_isend(c, r->rank, ZC_UCX_TAG_MAX, NULL, 0, &ok[1]) == ZC_OK, "isend");
    MEMBS_CHECK(r, zc_ucx_waitall(c, ok, 2, "largest tag") == ZC_OK, "waitall");
    MEMBS_CHECK(r, ok[0].length == 0, "length %zu", ok[0].length);
    MEMBS_CHECK(r, zc_ucx_waitall(c, NULL, 0, "nothing") == ZC_OK, "empty waitall");
}

Test(ucx, bad_arguments_are_refused_and_leave_the_request_alone)
{
    zc_config_t cfg = test_config(20);
    RUN(2, &cfg, body_bad_args, NULL);
}

static zc_status_t fake_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    return ZC_ERR_IO;
}

static const zc_bootstrap_ops_t failing_ops = {.name = "failing", .allgather = fake_allgather};

Test(ucx, create_refuses_bad_arguments_and_returns_bootstrap_errors)
{
    zc_config_t cfg = test_config(20);
    zc_ucx_comm_t *comm = (zc_ucx_comm_t *)(uintptr_t)0x1;
    zc_bootstrap_t bs = {.ops = &failing_ops, .rank = 0, .size = 2};

    cr_assert_eq(zc_ucx_comm_create(NULL, &bs, &comm), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_ucx_comm_create(&cfg, NULL, &comm), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_ucx_comm_create(&cfg, &bs, NULL), ZC_ERR_INVALID_ARG);
    bs.size = ZC_UCX_MAX_RANKS + 1;
    cr_assert_eq(zc_ucx_comm_create(&cfg, &bs, &comm), ZC_ERR_INVALID_ARG);
    bs.size = 2;
    bs.rank = 2;
    cr_assert_eq(zc_ucx_comm_create(&cfg, &bs, &comm), ZC_ERR_INVALID_ARG);
    bs.rank = -1;
    cr_assert_eq(zc_ucx_comm_create(&cfg, &bs, &comm), ZC_ERR_INVALID_ARG);
    bs.rank = 0;
    /* the bootstrap's error comes back unchanged, and the communicator is not written */
    cr_assert_eq(zc_ucx_comm_create(&cfg, &bs, &comm), ZC_ERR_IO);
    cr_assert_eq(comm, (zc_ucx_comm_t *)(uintptr_t)0x1);
    zc_ucx_comm_destroy(NULL);
}

/* ---- a peer that goes away ---- */

/*
 * Rank 1 destroys its communicator while rank 0 waits for a message from it.
 * Inside one process only a closed tcp connection shows that a worker went
 * away: the process itself is alive, so a transport that checks process
 * liveness (shared memory, where UCX supports peer failure there) would not.
 * UCX 1.13 uses tcp anyway once peer error handling is on; this runs where
 * UCX_TLS=tcp makes sure of it (test ucx-tcp). The integration tests kill
 * whole processes.
 */
static void body_peer_gone(membs_rank_t *r)
{
    uint8_t buf[64] = {0};
    zc_ucx_req_t req[2];

    /* talk once so that the connection exists */
    if (r->rank == 0) {
        MEMBS_CHECK(r, zc_ucx_isend(r->comm, 1, 1, buf, 8, &req[0]) == ZC_OK, "isend");
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 1, 1, buf + 8, 8, &req[1]) == ZC_OK, "irecv");
    } else {
        MEMBS_CHECK(r, zc_ucx_isend(r->comm, 0, 1, buf, 8, &req[0]) == ZC_OK, "isend");
        MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 0, 1, buf + 8, 8, &req[1]) == ZC_OK, "irecv");
    }
    MEMBS_CHECK(r, zc_ucx_waitall(r->comm, req, 2, "hello") == ZC_OK, "hello");
    zc_bootstrap_barrier(r->bs);
    if (r->rank == 1) {
        zc_ucx_comm_destroy(r->comm);
        r->comm = NULL;
        return;
    }
    MEMBS_CHECK(r, zc_ucx_irecv(r->comm, 1, 2, buf, sizeof(buf), &req[0]) == ZC_OK, "irecv");
    uint64_t t0 = zc_time_ns();
    zc_status_t st = zc_ucx_wait(r->comm, &req[0], "goodbye");
    double s = (double)(zc_time_ns() - t0) / 1e9;
    MEMBS_CHECK(r, st == ZC_ERR_PEER, "wait returned %s after %.1f s", zc_status_string(st), s);
    MEMBS_CHECK(r, s < 5, "the failure took %.1f s to notice", s);
    /* a new operation with the dead peer fails at once */
    MEMBS_CHECK(r, zc_ucx_isend(r->comm, 1, 3, buf, 8, &req[1]) == ZC_ERR_PEER, "isend");
}

Test(ucx, dead_peer_fails_the_wait_naming_it)
{
    const char *tls = getenv("UCX_TLS");
    if (!tls || strcmp(tls, "tcp") != 0)
        cr_skip_test("runs with UCX_TLS=tcp (test ucx-tcp): only tcp shows a worker going away");
    zc_config_t cfg = test_config(30);
    RUN(2, &cfg, body_peer_gone, NULL);
    const char *want[] = {"peer 1 failed", "recv of 64 bytes tag 0x2", "in goodbye", NULL};
    cr_assert_not_null(captured_with(want), "%d captured, first: %s", cap_count,
                       cap_count ? cap_msg[0] : "");
    cr_assert_eq(captured_count("peer 1 failed"), 1, "logged %d times",
                 captured_count("peer 1 failed"));
}
