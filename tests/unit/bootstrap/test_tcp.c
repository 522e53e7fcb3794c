/*
 * The tcp bootstrap over real sockets in one process: ranks are threads, and the
 * hostile side (a stranger, a duplicate, a peer that lies about lengths or
 * hangs up, a root that misbehaves) is the test itself speaking raw frames.
 */
#include "transport/bootstrap/tcp.h"

#include "bootstrap_test.h"
#include "common/timer.h"
#include "transport/bootstrap/auth.h"
#include "transport/bootstrap/wire.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <time.h>

static void setup(void)
{
    bs_log_start();
}

static void teardown(void)
{
    bs_log_stop();
}

TestSuite(tcp, .init = setup, .fini = teardown, .timeout = 20);

#define JOB "unit-job"
#define SECRET "unit-test secret of the job"

static double since_s(uint64_t start)
{
    return (double)(zc_time_ns() - start) / 1e9;
}

/* ---- ranks as threads ---------------------------------------------------------------------- */

typedef struct rank_thread rank_thread_t;
typedef zc_status_t (*rank_op_fn)(rank_thread_t *rt, zc_bootstrap_t *bs);

struct rank_thread {
    pthread_t tid;
    int rank, size, port, timeout_s;
    const char *host, *job;
    const char *secret; /* NULL: none */
    rank_op_fn op;
    zc_status_t status;    /* of create */
    zc_status_t op_status; /* of op, when create succeeded */
    zc_status_t again;     /* a barrier after op failed: the sticky error */
    double op_s;           /* how long op took */
};

static void *rank_thread_main(void *p)
{
    rank_thread_t *rt = p;
    zc_bootstrap_t *bs = NULL;
    zc_bootstrap_tcp_args_t a = {.rank = rt->rank,
                                 .size = rt->size,
                                 .host = rt->host,
                                 .port = rt->port,
                                 .listen_fd = -1,
                                 .job_id = rt->job,
                                 .secret = rt->secret,
                                 .secret_len = rt->secret ? strlen(rt->secret) : 0,
                                 .timeout_s = rt->timeout_s};
    rt->status = zc_bootstrap_tcp_join(&a, &bs);
    if (rt->status == ZC_OK && rt->op) {
        uint64_t start = zc_time_ns();
        rt->op_status = rt->op(rt, bs);
        rt->op_s = since_s(start);
        if (rt->op_status != ZC_OK)
            rt->again = zc_bootstrap_barrier(bs);
    }
    zc_bootstrap_destroy(bs);
    return NULL;
}

static void rank_init(rank_thread_t *rt, int rank, int size, const char *host, int port,
                      rank_op_fn op)
{
    memset(rt, 0, sizeof(*rt));
    rt->rank = rank;
    rt->size = size;
    rt->host = host;
    rt->port = port;
    rt->timeout_s = 10;
    rt->job = JOB;
    rt->op = op;
    rt->status = rt->op_status = ZC_ERR_INTERNAL;
}

static void rank_run(rank_thread_t *rt)
{
    cr_assert_eq(pthread_create(&rt->tid, NULL, rank_thread_main, rt), 0);
}

static void rank_start(rank_thread_t *rt, int rank, int size, const char *host, int port,
                       rank_op_fn op)
{
    rank_init(rt, rank, size, host, port, op);
    rank_run(rt);
}

static void rank_join(rank_thread_t *rt)
{
    pthread_join(rt->tid, NULL);
}

static uint8_t pattern(int rank, size_t j)
{
    return (uint8_t)(rank * 37 + (int)j);
}

static zc_status_t exercise(rank_thread_t *rt, zc_bootstrap_t *bs)
{
    uint8_t mine[100], all[8 * 100], buf[50];
    zc_status_t status;
    if (bs->rank != rt->rank || bs->size != rt->size)
        return ZC_ERR_INTERNAL;
    for (size_t j = 0; j < sizeof(mine); j++)
        mine[j] = pattern(rt->rank, j);
    if ((status = zc_bootstrap_allgather(bs, mine, sizeof(mine), all)) != ZC_OK)
        return status;
    for (int r = 0; r < rt->size; r++) {
        for (size_t j = 0; j < sizeof(mine); j++) {
            if (all[(size_t)r * sizeof(mine) + j] != pattern(r, j))
                return ZC_ERR_CORRUPT;
        }
    }
    for (int root = 0; root < rt->size; root++) {
        for (size_t j = 0; j < sizeof(buf); j++)
            buf[j] = rt->rank == root ? pattern(root, j) : 0;
        if ((status = zc_bootstrap_broadcast(bs, buf, sizeof(buf), root)) != ZC_OK)
            return status;
        for (size_t j = 0; j < sizeof(buf); j++) {
            if (buf[j] != pattern(root, j))
                return ZC_ERR_CORRUPT;
        }
    }
    if ((status = zc_bootstrap_allgather(bs, NULL, 0, NULL)) != ZC_OK)
        return status;
    return zc_bootstrap_barrier(bs);
}

static void run_job(int size, const char *host)
{
    rank_thread_t rt[8];
    int port = bs_free_port();
    cr_assert_gt(port, 0);
    for (int r = 0; r < size; r++)
        rank_start(&rt[r], r, size, host, port, exercise);
    for (int r = 0; r < size; r++)
        rank_join(&rt[r]);
    for (int r = 0; r < size; r++) {
        cr_assert_eq(rt[r].status, ZC_OK, "rank %d create: %s\n%s", r,
                     zc_status_string(rt[r].status), bs_log.text);
        cr_assert_eq(rt[r].op_status, ZC_OK, "rank %d: %s\n%s", r,
                     zc_status_string(rt[r].op_status), bs_log.text);
    }
    cr_assert_eq(bs_log.errors + bs_log.warnings, 0, "%s", bs_log.text);
}

Test(tcp, ranks_as_threads_ipv4)
{
    run_job(2, "127.0.0.1");
    run_job(5, "127.0.0.1");
}

Test(tcp, ipv6_loopback)
{
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a = {.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_LOOPBACK_INIT};
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        cr_skip_test("no IPv6 loopback here");
    close(fd);
    run_job(3, "::1");
}

Test(tcp, host_name)
{
    run_job(3, "localhost");
}

Test(tcp, one_rank_needs_no_socket)
{
    zc_bootstrap_t *bs = NULL;
    uint8_t mine[3] = {1, 2, 3}, all[3] = {0};
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(0, 1, NULL, 0, JOB, 1, &bs), ZC_OK);
    cr_assert_str_eq(bs->ops->name, "tcp");
    cr_assert_eq(zc_bootstrap_allgather(bs, mine, sizeof(mine), all), ZC_OK);
    cr_assert_arr_eq(all, mine, sizeof(mine));
    cr_assert_eq(zc_bootstrap_broadcast(bs, mine, sizeof(mine), 0), ZC_OK);
    cr_assert_eq(zc_bootstrap_barrier(bs), ZC_OK);
    zc_bootstrap_destroy(bs);
    zc_bootstrap_destroy(NULL);
}

Test(tcp, bad_arguments)
{
    zc_bootstrap_t *bs = (zc_bootstrap_t *)0x1;
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(2, 2, "h", 5, JOB, 1, &bs), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(-1, 2, "h", 5, JOB, 1, &bs), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(0, 0, "h", 5, JOB, 1, &bs), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(1, 2, "h", 0, JOB, 1, &bs), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(1, 2, "h", 65536, JOB, 1, &bs),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(1, 2, NULL, 5, JOB, 1, &bs), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(1, 2, "", 5, JOB, 1, &bs), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(1, 2, "h", 5, NULL, 1, &bs), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(1, 2, "h", 5, JOB, 0, &bs), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(0, 1, NULL, 0, JOB, 1, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(bs, (zc_bootstrap_t *)0x1, "bs_p written on failure");

    cr_assert_eq(zc_bootstrap_tcp_create_explicit(0, 1, NULL, 0, JOB, 1, &bs), ZC_OK);
    uint8_t b[4];
    cr_assert_eq(zc_bootstrap_allgather(bs, NULL, 4, b), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_allgather(bs, b, 4, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_broadcast(bs, b, 4, 1), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_broadcast(bs, b, 4, -1), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_broadcast(bs, NULL, 4, 0), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bootstrap_barrier(bs), ZC_OK, "bad arguments do not fail the bootstrap");
    zc_bootstrap_destroy(bs);
}

/* ---- deadlines ----------------------------------------------------------------------------- */

Test(tcp, no_root_times_out_naming_it)
{
    int port = bs_free_port();
    zc_bootstrap_t *bs = NULL;
    char message[128];
    uint64_t start = zc_time_ns();
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(1, 2, "127.0.0.1", port, JOB, 1, &bs),
                 ZC_ERR_TIMEOUT);
    double t = since_s(start);
    cr_assert(t >= 0.9 && t < 2.5, "gave up after %.2f s with a 1 s timeout", t);
    snprintf(message, sizeof(message),
             "rank 1 could not connect to rank 0 at 127.0.0.1:%d within "
             "1 s",
             port);
    cr_assert(bs_logged(message), "%s", bs_log.text);
    cr_assert(bs_logged("Connection refused"), "the last error: %s", bs_log.text);
    cr_assert_eq(bs_log.errors, 1, "%s", bs_log.text);
}

Test(tcp, root_alone_times_out_naming_the_missing_ranks)
{
    int port = bs_free_port();
    zc_bootstrap_t *bs = NULL;
    char message[128];
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(0, 3, NULL, port, JOB, 1, &bs), ZC_ERR_TIMEOUT);
    snprintf(message, sizeof(message), "ranks 1, 2 did not connect to rank 0 (port %d) within 1 s",
             port);
    cr_assert(bs_logged(message), "%s", bs_log.text);
}

Test(tcp, unresolvable_host)
{
    zc_bootstrap_t *bs = NULL;
    zc_status_t status =
        zc_bootstrap_tcp_create_explicit(1, 2, "no-such-host.invalid", 5000, JOB, 1, &bs);
    /* EAI_NONAME at once, or a resolver that cannot be reached retried until the deadline */
    cr_assert(status == ZC_ERR_INVALID_CONFIG || status == ZC_ERR_TIMEOUT, "%s",
              zc_status_string(status));
    cr_assert(bs_logged("'no-such-host.invalid'"), "%s", bs_log.text);
}

Test(tcp, port_in_use)
{
    int port = bs_free_port();
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 1) == 0);
    zc_bootstrap_t *bs = NULL;
    char message[64];
    cr_assert_eq(zc_bootstrap_tcp_create_explicit(0, 2, NULL, port, JOB, 1, &bs), ZC_ERR_IO);
    snprintf(message, sizeof(message), "rank 0 cannot listen on port %d", port);
    cr_assert(bs_logged(message) && bs_logged("in use"), "%s", bs_log.text);
    close(fd);
}

/* ---- the hostile side: raw frames ------------------------------------------------------------ */

static int raw_connect(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    for (int i = 0; i < 500; i++) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        cr_assert_geq(fd, 0);
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
            return fd;
        close(fd);
        nanosleep(&(struct timespec){.tv_nsec = 10000000}, NULL);
    }
    cr_assert_fail("nothing listens on port %d", port);
    return -1;
}

static void raw_send(int fd, zc_bs_frame_t f, const void *payload)
{
    uint8_t hdr[ZC_BS_HDR_LEN];
    zc_bs_frame_encode(&f, hdr);
    cr_assert_eq(send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL), (ssize_t)sizeof(hdr));
    if (f.len && payload)
        cr_assert_eq(send(fd, payload, f.len, MSG_NOSIGNAL), (ssize_t)f.len);
}

static int raw_recv_all(int fd, void *buf, size_t len)
{
    size_t got = 0;
    while (got < len) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 5000) <= 0)
            return -1;
        ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
        if (n <= 0)
            return -1;
        got += (size_t)n;
    }
    return 0;
}

/* The next frame and its payload (at most @p cap bytes); -1 if the connection closed. */
static int raw_recv(int fd, zc_bs_frame_t *f, void *payload, size_t cap)
{
    uint8_t hdr[ZC_BS_HDR_LEN];
    if (raw_recv_all(fd, hdr, sizeof(hdr)) < 0)
        return -1;
    zc_bs_frame_decode(hdr, f);
    cr_assert_leq(f->len, cap, "a %llu-byte payload", (unsigned long long)f->len);
    return f->len ? raw_recv_all(fd, payload, f->len) : 0;
}

/* Whether the other side closes @p fd within 5 s (reading and dropping what comes). */
static int raw_closed(int fd)
{
    char buf[256];
    struct pollfd p = {.fd = fd, .events = POLLIN};
    while (poll(&p, 1, 5000) > 0) {
        if (recv(fd, buf, sizeof(buf), 0) <= 0)
            return 1;
    }
    return 0;
}

static void raw_hello(int fd, const char *job, uint32_t rank, uint32_t size)
{
    raw_send(fd, zc_bs_frame_make(zc_bs_job_hash(job), ZC_BS_MSG_HELLO, rank, 0, 0, size), NULL);
}

/* Reads a REJECT or ABORT and checks its status and reason (copied to @p reason). */
static void raw_expect_reason_text(int fd, zc_bs_msg_t type, zc_status_t status, const char *text,
                                   char *reason)
{
    zc_bs_frame_t f;
    uint8_t payload[4 + ZC_BS_REASON_MAX];
    zc_status_t carried;
    cr_assert_eq(raw_recv(fd, &f, payload, sizeof(payload)), 0, "no %s came", zc_bs_msg_name(type));
    cr_assert_eq(f.type, type, "a %s instead of a %s", zc_bs_msg_name(f.type),
                 zc_bs_msg_name(type));
    cr_assert_eq(zc_bs_reason_decode(payload, f.len, &carried, reason), ZC_OK);
    cr_assert_eq(carried, status, "%s", zc_status_string(carried));
    cr_assert(strstr(reason, text), "expected '%s' in '%s'", text, reason);
}

static void raw_expect_reason(int fd, zc_bs_msg_t type, zc_status_t status, const char *text)
{
    char reason[ZC_BS_REASON_MAX + 1];
    raw_expect_reason_text(fd, type, status, text, reason);
}

Test(tcp, a_connection_that_is_not_ours_is_dropped)
{
    rank_thread_t root, one;
    int port = bs_free_port();
    rank_start(&root, 0, 2, NULL, port, exercise);
    int fd = raw_connect(port);
    static const char http[] = "GET / HTTP/1.1\r\nHost: example\r\nAccept: */*\r\n\r\n";
    cr_assert_eq(send(fd, http, sizeof(http) - 1, 0), (ssize_t)sizeof(http) - 1);
    cr_assert(raw_closed(fd), "rank 0 kept an http client connected");
    close(fd);

    rank_start(&one, 1, 2, "127.0.0.1", port, exercise);
    rank_join(&one);
    rank_join(&root);
    cr_assert_eq(root.status, ZC_OK, "%s", bs_log.text);
    cr_assert_eq(root.op_status, ZC_OK, "%s", bs_log.text);
    cr_assert_eq(one.op_status, ZC_OK, "%s", bs_log.text);
    cr_assert(bs_logged("rank 0 dropped a connection from 127.0.0.1:") &&
                  bs_logged("not a zipccl bootstrap message (magic 0x47455420"),
              "%s", bs_log.text);
}

Test(tcp, another_job_is_rejected_and_not_counted)
{
    rank_thread_t root, one;
    int port = bs_free_port();
    rank_start(&root, 0, 2, NULL, port, exercise);
    int fd = raw_connect(port);
    raw_hello(fd, "some-other-job", 1, 2);
    char reason[ZC_BS_REASON_MAX + 1], hash[24];
    raw_expect_reason_text(fd, ZC_BS_MSG_REJECT, ZC_ERR_MISMATCH, "the job ids differ", reason);
    /* nothing of this job's: a stranger must not learn the hash to replay it */
    snprintf(hash, sizeof(hash), "%016llx", (unsigned long long)zc_bs_job_hash(JOB));
    cr_assert(!strstr(reason, hash) && !strstr(reason, "0x"), "the reason discloses: %s", reason);
    cr_assert(raw_closed(fd));
    close(fd);

    rank_start(&one, 1, 2, "127.0.0.1", port, exercise);
    rank_join(&one);
    rank_join(&root);
    cr_assert_eq(root.op_status, ZC_OK, "%s", bs_log.text);
    cr_assert_eq(one.op_status, ZC_OK, "%s", bs_log.text);
    cr_assert(bs_logged("rank 0 rejected a connection from 127.0.0.1:"), "%s", bs_log.text);
    cr_assert_eq(bs_log.errors, 0, "a stranger is a warning, not an error: %s", bs_log.text);
}

Test(tcp, a_stranger_process_is_told_why)
{
    rank_thread_t root, stranger, one;
    int port = bs_free_port();
    rank_start(&root, 0, 2, NULL, port, exercise);
    rank_init(&stranger, 1, 2, "127.0.0.1", port, NULL);
    stranger.job = "other";
    rank_run(&stranger);
    rank_join(&stranger);
    rank_start(&one, 1, 2, "127.0.0.1", port, exercise);
    rank_join(&one);
    rank_join(&root);
    char message[96];
    snprintf(message, sizeof(message),
             "rank 0 at 127.0.0.1:%d rejected rank 1: rank 0 belongs to another job", port);
    cr_assert_eq(stranger.status, ZC_ERR_MISMATCH, "%s", bs_log.text);
    cr_assert(bs_logged(message), "%s", bs_log.text);
    cr_assert_eq(root.op_status, ZC_OK, "%s", bs_log.text);
    cr_assert_eq(one.op_status, ZC_OK, "%s", bs_log.text);
}

Test(tcp, silent_and_half_sent_connections_do_not_block)
{
    rank_thread_t root, one;
    int port = bs_free_port();
    rank_start(&root, 0, 2, NULL, port, exercise);
    int silent = raw_connect(port);
    int half = raw_connect(port);
    uint8_t hdr[ZC_BS_HDR_LEN];
    zc_bs_frame_t f = zc_bs_frame_make(zc_bs_job_hash(JOB), ZC_BS_MSG_HELLO, 1, 0, 0, 2);
    zc_bs_frame_encode(&f, hdr);
    cr_assert_eq(send(half, hdr, 20, 0), 20);
    close(half);

    rank_start(&one, 1, 2, "127.0.0.1", port, exercise);
    rank_join(&one);
    rank_join(&root);
    cr_assert_eq(root.op_status, ZC_OK, "%s", bs_log.text);
    cr_assert(raw_closed(silent), "rank 0 kept a silent connection after every rank joined");
    close(silent);
}

/* A claim rank 0 refuses: the REJECT, then the job goes on with the real rank 1. */
static void claim_refused_job_goes_on(const char *secret, uint32_t rank, uint32_t size, int retry,
                                      const char *message)
{
    rank_thread_t root, one, two;
    int port = bs_free_port();
    bs_log_start();
    zc_log_set_level(ZC_LOG_DEBUG); /* "rank 1 joined from" below */
    rank_init(&root, 0, 3, NULL, port, exercise);
    root.secret = secret;
    rank_run(&root);
    rank_init(&one, 1, 3, "127.0.0.1", port, exercise);
    one.secret = secret;
    rank_run(&one);
    if (rank == 1) { /* a second rank 1: wait until rank 0 took the first */
        for (int i = 0; i < 2500 && !bs_logged("bootstrap: rank 1 joined from"); i++)
            nanosleep(&(struct timespec){.tv_nsec = 2000000}, NULL);
        cr_assert(bs_logged("bootstrap: rank 1 joined from"), "rank 1 did not join: %s",
                  bs_log.text);
    }
    int fd = raw_connect(port);
    raw_hello(fd, JOB, rank, size);
    zc_bs_frame_t f;
    uint8_t payload[4 + ZC_BS_REASON_MAX];
    char reason[ZC_BS_REASON_MAX + 1];
    zc_status_t carried;
    cr_assert_eq(raw_recv(fd, &f, payload, sizeof(payload)), 0, "no answer");
    cr_assert_eq(f.type, ZC_BS_MSG_REJECT, "a %s", zc_bs_msg_name(f.type));
    cr_assert_eq(f.arg, retry ? ZC_BS_REJECT_RETRY : 0u, "retry flag %u", f.arg);
    cr_assert_eq(zc_bs_reason_decode(payload, f.len, &carried, reason), ZC_OK);
    cr_assert(strstr(reason, message), "expected '%s' in '%s'", message, reason);
    cr_assert(raw_closed(fd), "the refused connection stays open");
    close(fd);
    rank_init(&two, 2, 3, "127.0.0.1", port, exercise);
    two.secret = secret;
    rank_run(&two);
    rank_join(&two);
    rank_join(&one);
    rank_join(&root);
    cr_assert_eq(root.op_status, ZC_OK, "%s", bs_log.text);
    cr_assert_eq(one.op_status, ZC_OK, "%s", bs_log.text);
    cr_assert_eq(two.op_status, ZC_OK, "%s", bs_log.text);
    cr_assert_eq(bs_log.errors, 0, "a refused claim is a warning: %s", bs_log.text);
}

Test(tcp, a_duplicate_claim_is_refused_and_the_job_goes_on)
{
    claim_refused_job_goes_on(NULL, 1, 3, 1, "rank 1 has already joined");
    cr_assert(bs_logged("rank 1 has already joined from 127.0.0.1:"), "%s", bs_log.text);
}

Test(tcp, a_rank_out_of_range_or_a_different_size_is_refused_and_the_job_goes_on)
{
    claim_refused_job_goes_on(NULL, 5, 3, 0, "rank 5 is outside 1..2");
    claim_refused_job_goes_on(NULL, 0, 3, 0, "rank 0 is outside 1..2");
    claim_refused_job_goes_on(NULL, 99, 3, 0, "rank 99 is outside 1..2");
    claim_refused_job_goes_on(NULL, 2, 4, 0, "rank 2 says the job has 4 ranks, rank 0 says 3");
    claim_refused_job_goes_on(SECRET, 99, 3, 0, "rank 99 is outside 1..2");
}

Test(tcp, a_silent_connection_is_closed_after_its_step_time)
{
    rank_thread_t root;
    int port = bs_free_port();
    rank_start(&root, 0, 2, NULL, port, exercise);
    uint64_t start = zc_time_ns();
    int silent = raw_connect(port);
    cr_assert(raw_closed(silent), "rank 0 kept a silent connection while it waited for rank 1");
    double t = since_s(start);
    cr_assert(t >= ZC_BOOTSTRAP_STEP_MS / 1000.0 - 0.1 && t < ZC_BOOTSTRAP_STEP_MS / 1000.0 + 2,
              "closed after %.2f s", t);
    close(silent);
    rank_thread_t one;
    rank_start(&one, 1, 2, "127.0.0.1", port, exercise);
    rank_join(&one);
    rank_join(&root);
    cr_assert_eq(root.op_status, ZC_OK, "%s", bs_log.text);
}

static zc_status_t allgather8(rank_thread_t *rt, zc_bootstrap_t *bs)
{
    uint8_t mine[8] = {0}, all[8 * 8];
    return zc_bootstrap_allgather(bs, mine, sizeof(mine), all);
}

/* A raw rank 1 that joined rank 0 (in a thread running allgather8) properly. */
static int raw_joined(rank_thread_t *root, int size)
{
    int port = bs_free_port();
    rank_init(root, 0, size, NULL, port, allgather8);
    root->timeout_s = 30;
    rank_run(root);
    int fd = raw_connect(port);
    zc_bs_frame_t f;
    raw_hello(fd, JOB, 1, (uint32_t)size);
    cr_assert_eq(raw_recv(fd, &f, NULL, 0), 0);
    cr_assert_eq(f.type, ZC_BS_MSG_JOINED, "%s", zc_bs_msg_name(f.type));
    cr_assert_eq(raw_recv(fd, &f, NULL, 0), 0);
    cr_assert_eq(f.type, ZC_BS_MSG_WELCOME, "%s", zc_bs_msg_name(f.type));
    return fd;
}

static void peer_breaks_allgather(zc_bs_frame_t f, size_t payload_len, const char *message)
{
    rank_thread_t root;
    uint8_t payload[64] = {0};
    bs_log_start();
    int fd = raw_joined(&root, 2);
    f.job = zc_bs_job_hash(JOB);
    raw_send(fd, f, NULL);
    if (payload_len)
        cr_assert_eq(send(fd, payload, payload_len, MSG_NOSIGNAL), (ssize_t)payload_len);
    raw_expect_reason(fd, ZC_BS_MSG_ABORT, ZC_ERR_MISMATCH, message);
    rank_join(&root);
    cr_assert_eq(root.op_status, ZC_ERR_MISMATCH, "%s", bs_log.text);
    cr_assert_eq(root.again, ZC_ERR_MISMATCH, "later operations return the error again");
    cr_assert(bs_logged(message), "%s", bs_log.text);
    cr_assert_lt(root.op_s, 5, "took %.1f s", root.op_s);
    close(fd);
}

Test(tcp, a_wrong_size_message_fails_the_operation)
{
    peer_breaks_allgather(zc_bs_frame_make(0, ZC_BS_MSG_ALLGATHER, 1, 1, 12, 0), 12,
                          "rank 1 in allgather #1: sent 12 bytes, expected 8");
}

Test(tcp, an_out_of_sequence_message_fails_the_operation)
{
    peer_breaks_allgather(zc_bs_frame_make(0, ZC_BS_MSG_ALLGATHER, 1, 2, 8, 0), 8,
                          "rank 1 in allgather #1: message belongs to operation #2, expected #1");
}

Test(tcp, another_operation_fails_the_operation)
{
    peer_breaks_allgather(zc_bs_frame_make(0, ZC_BS_MSG_BARRIER, 1, 1, 0, 0), 0,
                          "rank 1 in allgather #1: message type barrier (7), expected allgather");
}

Test(tcp, a_message_claiming_another_rank_fails_the_operation)
{
    peer_breaks_allgather(zc_bs_frame_make(0, ZC_BS_MSG_ALLGATHER, 2, 1, 8, 0), 8,
                          "rank 1 in allgather #1: message claims to come from rank 2");
}

Test(tcp, a_peer_hanging_up_mid_operation_fails_promptly)
{
    rank_thread_t root;
    int fd = raw_joined(&root, 2);
    raw_send(fd, zc_bs_frame_make(zc_bs_job_hash(JOB), ZC_BS_MSG_ALLGATHER, 1, 1, 8, 0), NULL);
    cr_assert_eq(send(fd, "abc", 3, 0), 3);
    close(fd);
    rank_join(&root);
    cr_assert_eq(root.op_status, ZC_ERR_IO, "%s", bs_log.text);
    cr_assert_lt(root.op_s, 2, "noticed after %.1f s; the timeout is 30 s", root.op_s);
    cr_assert(bs_logged("rank 1 (127.0.0.1:") &&
                  bs_logged(") closed its connection during allgather #1"),
              "%s", bs_log.text);
}

static zc_status_t allgather_big(rank_thread_t *rt, zc_bootstrap_t *bs)
{
    size_t len = 4 << 20;
    uint8_t *mine = calloc(1, len), *all = malloc(2 * len);
    zc_status_t status = zc_bootstrap_allgather(bs, mine, len, all);
    free(mine);
    free(all);
    return status;
}

Test(tcp, sending_to_a_closed_peer_is_an_error_not_sigpipe)
{
    rank_thread_t root;
    int port = bs_free_port();
    rank_start(&root, 0, 2, NULL, port, allgather_big);
    int fd = raw_connect(port);
    zc_bs_frame_t f;
    raw_hello(fd, JOB, 1, 2);
    cr_assert_eq(raw_recv(fd, &f, NULL, 0), 0);
    size_t len = 4 << 20;
    uint8_t *zeros = calloc(1, len);
    raw_send(fd, zc_bs_frame_make(zc_bs_job_hash(JOB), ZC_BS_MSG_ALLGATHER, 1, 1, len, 0), zeros);
    free(zeros);
    close(fd); /* before reading the 8 MiB answer */
    rank_join(&root);
    cr_assert_eq(root.op_status, ZC_ERR_IO, "%s", bs_log.text);
    cr_assert(bs_logged("rank 1 (127.0.0.1:") && bs_logged("during allgather #1"), "%s",
              bs_log.text);
}

/* ---- a misbehaving root, seen from rank 1 ---------------------------------------------------- */

static int raw_listen(int *port_p)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof(a);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert(fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, 4) == 0 &&
              getsockname(fd, (struct sockaddr *)&a, &len) == 0);
    *port_p = ntohs(a.sin_port);
    return fd;
}

/* Accepts rank 1 of 2 (in a thread running allgather8), checks its hello, welcomes it and
 * reads its allgather contribution. */
static int raw_root(rank_thread_t *rt, int *lfd_p)
{
    int port;
    *lfd_p = raw_listen(&port);
    rank_init(rt, 1, 2, "127.0.0.1", port, allgather8);
    rt->timeout_s = 30;
    rank_run(rt);
    int fd = accept(*lfd_p, NULL, NULL);
    cr_assert_geq(fd, 0);
    zc_bs_frame_t f;
    zc_bs_expect_t hello = {.job = zc_bs_job_hash(JOB),
                            .type = ZC_BS_MSG_HELLO,
                            .rank = 1,
                            .seq = 0,
                            .len = 0,
                            .arg = 2};
    char why[256] = "";
    cr_assert_eq(raw_recv(fd, &f, NULL, 0), 0);
    cr_assert_eq(zc_bs_frame_check(&f, &hello, why, sizeof(why)), ZC_OK, "%s", why);
    raw_send(fd, zc_bs_frame_make(zc_bs_job_hash(JOB), ZC_BS_MSG_JOINED, 0, 0, 0, 0), NULL);
    raw_send(fd, zc_bs_frame_make(zc_bs_job_hash(JOB), ZC_BS_MSG_WELCOME, 0, 0, 0, 0), NULL);
    uint8_t mine[8];
    cr_assert_eq(raw_recv(fd, &f, mine, sizeof(mine)), 0);
    cr_assert_eq(f.type, ZC_BS_MSG_ALLGATHER);
    cr_assert_eq(f.seq, 1);
    cr_assert_eq(f.len, 8);
    return fd;
}

Test(tcp, a_root_sending_the_wrong_length_fails_the_rank)
{
    rank_thread_t rt;
    int lfd, fd = raw_root(&rt, &lfd);
    uint8_t all[12] = {0};
    raw_send(fd, zc_bs_frame_make(zc_bs_job_hash(JOB), ZC_BS_MSG_ALLGATHER, 0, 1, 12, 0), all);
    rank_join(&rt);
    cr_assert_eq(rt.op_status, ZC_ERR_MISMATCH, "%s", bs_log.text);
    cr_assert(bs_logged("rank 0 (127.0.0.1:") &&
                  bs_logged(") in allgather #1: sent 12 bytes, expected 16"),
              "%s", bs_log.text);
    cr_assert(raw_closed(fd), "rank 1 did not hang up after the error");
    close(fd);
    close(lfd);
}

Test(tcp, a_root_of_another_protocol_fails_the_rank)
{
    rank_thread_t rt;
    int lfd, fd = raw_root(&rt, &lfd);
    static const char reply[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n";
    cr_assert_eq(send(fd, reply, sizeof(reply) - 1, 0), (ssize_t)sizeof(reply) - 1);
    rank_join(&rt);
    cr_assert_eq(rt.op_status, ZC_ERR_CORRUPT, "%s", bs_log.text);
    cr_assert(bs_logged("not a zipccl bootstrap message"), "%s", bs_log.text);
    close(fd);
    close(lfd);
}

Test(tcp, the_roots_abort_reaches_the_rank)
{
    rank_thread_t rt;
    int lfd, fd = raw_root(&rt, &lfd);
    uint8_t payload[4 + ZC_BS_REASON_MAX];
    size_t len = zc_bs_reason_encode(ZC_ERR_TIMEOUT, "rank 7 timed out", payload);
    raw_send(fd, zc_bs_frame_make(zc_bs_job_hash(JOB), ZC_BS_MSG_ABORT, 0, 1, len, 0), payload);
    rank_join(&rt);
    cr_assert_eq(rt.op_status, ZC_ERR_TIMEOUT, "the root's status: %s", bs_log.text);
    cr_assert_eq(rt.again, ZC_ERR_TIMEOUT, "sticky");
    cr_assert(bs_logged("allgather #1 failed at rank 0: rank 7 timed out"), "%s", bs_log.text);
    close(fd);
    close(lfd);
}

Test(tcp, a_root_hanging_up_fails_the_rank_promptly)
{
    rank_thread_t rt;
    int lfd, fd = raw_root(&rt, &lfd);
    close(fd);
    rank_join(&rt);
    cr_assert_eq(rt.op_status, ZC_ERR_IO, "%s", bs_log.text);
    cr_assert_lt(rt.op_s, 2, "noticed after %.1f s; the timeout is 30 s", rt.op_s);
    cr_assert(bs_logged("rank 0 (127.0.0.1:") &&
                  bs_logged(") closed its connection during allgather #1"),
              "%s", bs_log.text);
    close(lfd);
}

/* ---- with a job secret ------------------------------------------------------------------------
 */

Test(tcp, a_job_with_a_secret_runs)
{
    rank_thread_t rt[4];
    int port = bs_free_port();
    for (int r = 0; r < 4; r++) {
        rank_init(&rt[r], r, 4, "127.0.0.1", port, exercise);
        rt[r].secret = SECRET;
        rank_run(&rt[r]);
    }
    for (int r = 0; r < 4; r++)
        rank_join(&rt[r]);
    for (int r = 0; r < 4; r++)
        cr_assert_eq(rt[r].op_status, ZC_OK, "rank %d: %s", r, bs_log.text);
    cr_assert_eq(bs_log.errors + bs_log.warnings, 0, "%s", bs_log.text);
}

/*
 * Rank 1 with @p bad_secret is turned away with @p message; then ranks 1 and 2 with
 * the job's secret join (3 ranks: a root without a secret joins the liar at once
 * and frees its rank when it hangs up, before the job is complete).
 */
static void bad_secret_is_turned_away(const char *root_secret, const char *bad_secret,
                                      const char *message)
{
    rank_thread_t rt[3], liar;
    int port = bs_free_port();
    bs_log_start();
    rank_init(&rt[0], 0, 3, NULL, port, exercise);
    rt[0].secret = root_secret;
    rank_run(&rt[0]);
    rank_init(&liar, 1, 3, "127.0.0.1", port, NULL);
    liar.secret = bad_secret;
    uint64_t start = zc_time_ns();
    rank_run(&liar);
    rank_join(&liar);
    cr_assert_eq(liar.status, ZC_ERR_MISMATCH, "%s", bs_log.text);
    cr_assert(bs_logged(message), "expected '%s' in\n%s", message, bs_log.text);
    cr_assert_lt(since_s(start), 3, "turned away after %.1f s, not at once", since_s(start));
    for (int r = 1; r < 3; r++) {
        rank_init(&rt[r], r, 3, "127.0.0.1", port, exercise);
        rt[r].secret = root_secret;
        rank_run(&rt[r]);
    }
    for (int r = 0; r < 3; r++)
        rank_join(&rt[r]);
    for (int r = 0; r < 3; r++)
        cr_assert_eq(rt[r].op_status, ZC_OK, "rank %d: %s", r, bs_log.text);
}

Test(tcp, a_rank_with_another_secret_is_refused_and_the_job_goes_on)
{
    bad_secret_is_turned_away(SECRET, "another secret of sixteen+",
                              "wrong proof of the job secret");
    cr_assert(bs_logged("rank 0 refused a connection from 127.0.0.1:") &&
                  bs_logged("claiming rank 1: wrong proof"),
              "%s", bs_log.text);
}

Test(tcp, secret_on_one_side_only_is_named)
{
    bad_secret_is_turned_away(SECRET, NULL, "requires a job secret and rank 1 has none");
    bad_secret_is_turned_away(NULL, SECRET, "has no job secret and rank 1 has one");
}

Test(tcp, a_short_secret_is_a_bad_argument)
{
    zc_bootstrap_t *bs = NULL;
    zc_bootstrap_tcp_args_t a = {.rank = 0,
                                 .size = 1,
                                 .listen_fd = -1,
                                 .job_id = JOB,
                                 .secret = "short",
                                 .secret_len = 5,
                                 .timeout_s = 1};
    cr_assert_eq(zc_bootstrap_tcp_join(&a, &bs), ZC_ERR_INVALID_ARG);
    cr_assert_null(bs);
    cr_assert(bs_logged("a secret too short") && !bs_logged("short,"), "%s", bs_log.text);
}

/* A raw rank 1 that knows the secret: hello, challenge, proof; checks the root's JOINED. */
static int raw_proven(int port, const uint8_t key[ZC_BS_KEY_LEN], uint32_t size)
{
    int fd = raw_connect(port);
    zc_bs_frame_t f;
    zc_bs_transcript_t tr = {.job = zc_bs_job_hash(JOB), .rank = 1, .size = size};
    uint8_t proof[ZC_BS_PROOF_LEN];
    raw_hello(fd, JOB, 1, size);
    cr_assert_eq(raw_recv(fd, &f, tr.nonce_root, sizeof(tr.nonce_root)), 0);
    cr_assert_eq(f.type, ZC_BS_MSG_CHALLENGE, "%s", zc_bs_msg_name(f.type));
    cr_assert_eq(zc_bs_random(tr.nonce_rank, sizeof(tr.nonce_rank)), ZC_OK);
    memcpy(proof, tr.nonce_rank, ZC_BS_NONCE_LEN);
    zc_bs_mac(key, ZC_BS_ROLE_RANK, &tr, proof + ZC_BS_NONCE_LEN);
    raw_send(fd, zc_bs_frame_make(tr.job, ZC_BS_MSG_PROOF, 1, 0, sizeof(proof), 0), proof);
    return fd;
}

Test(tcp, a_proven_duplicate_fails_the_job)
{
    rank_thread_t root;
    uint8_t key[ZC_BS_KEY_LEN], mac[ZC_BS_MAC_LEN];
    zc_bs_frame_t f;
    int port = bs_free_port();
    cr_assert_eq(zc_bs_key_derive(SECRET, strlen(SECRET), key), ZC_OK);
    rank_init(&root, 0, 3, NULL, port, exercise);
    root.secret = SECRET;
    rank_run(&root);
    int first = raw_proven(port, key, 3);
    cr_assert_eq(raw_recv(first, &f, mac, sizeof(mac)), 0);
    cr_assert_eq(f.type, ZC_BS_MSG_JOINED, "%s", zc_bs_msg_name(f.type));
    int second = raw_proven(port, key, 3);
    raw_expect_reason(second, ZC_BS_MSG_REJECT, ZC_ERR_MISMATCH, "rank 1 connected twice");
    raw_expect_reason(first, ZC_BS_MSG_ABORT, ZC_ERR_MISMATCH, "rank 1 connected twice");
    rank_join(&root);
    cr_assert_eq(root.status, ZC_ERR_MISMATCH, "%s", bs_log.text);
    cr_assert_eq(bs_log.errors, 1, "logged once: %s", bs_log.text);
    close(first);
    close(second);
}

/* ---- a root that is not what it claims, or refuses for a while --------------------------------
 */

static int raw_accept_hello(int lfd)
{
    int fd = accept(lfd, NULL, NULL);
    zc_bs_frame_t f;
    cr_assert_geq(fd, 0);
    cr_assert_eq(raw_recv(fd, &f, NULL, 0), 0);
    cr_assert_eq(f.type, ZC_BS_MSG_HELLO, "%s", zc_bs_msg_name(f.type));
    return fd;
}

Test(tcp, a_root_that_cannot_prove_the_secret_fails_the_rank)
{
    rank_thread_t rt;
    int port, lfd = raw_listen(&port);
    rank_init(&rt, 1, 2, "127.0.0.1", port, NULL);
    rt.secret = SECRET;
    rank_run(&rt);
    int fd = raw_accept_hello(lfd);
    uint8_t nonce[ZC_BS_NONCE_LEN] = {1}, proof[ZC_BS_PROOF_LEN], mac[ZC_BS_MAC_LEN] = {0};
    uint64_t job = zc_bs_job_hash(JOB);
    zc_bs_frame_t f;
    raw_send(fd, zc_bs_frame_make(job, ZC_BS_MSG_CHALLENGE, 0, 0, sizeof(nonce), 0), nonce);
    cr_assert_eq(raw_recv(fd, &f, proof, sizeof(proof)), 0);
    cr_assert_eq(f.type, ZC_BS_MSG_PROOF);
    raw_send(fd, zc_bs_frame_make(job, ZC_BS_MSG_JOINED, 0, 0, sizeof(mac), 0), mac);
    rank_join(&rt);
    cr_assert_eq(rt.status, ZC_ERR_MISMATCH, "%s", bs_log.text);
    cr_assert(bs_logged("cannot prove it knows the job secret"), "%s", bs_log.text);
    close(fd);
    close(lfd);
}

Test(tcp, a_rank_retries_a_reset_or_a_refusal_that_may_pass)
{
    rank_thread_t rt;
    int port, lfd = raw_listen(&port);
    uint64_t job = zc_bs_job_hash(JOB);
    zc_log_set_level(ZC_LOG_DEBUG);
    rank_init(&rt, 1, 2, "127.0.0.1", port, NULL);
    rank_run(&rt);
    close(raw_accept_hello(lfd)); /* reset before accepting the rank */
    int fd = raw_accept_hello(lfd);
    uint8_t payload[4 + ZC_BS_REASON_MAX];
    size_t len = zc_bs_reason_encode(ZC_ERR_MISMATCH, "rank 1 has already joined", payload);
    raw_send(fd, zc_bs_frame_make(job, ZC_BS_MSG_REJECT, 0, 0, len, ZC_BS_REJECT_RETRY), payload);
    close(fd);
    fd = raw_accept_hello(lfd);
    raw_send(fd, zc_bs_frame_make(job, ZC_BS_MSG_JOINED, 0, 0, 0, 0), NULL);
    raw_send(fd, zc_bs_frame_make(job, ZC_BS_MSG_WELCOME, 0, 0, 0, 0), NULL);
    rank_join(&rt);
    cr_assert_eq(rt.status, ZC_OK, "%s", bs_log.text);
    cr_assert(bs_logged("rank 1 tries again: rank 0 (127.0.0.1:") &&
                  bs_logged("rank 1 tries again: rank 0 at 127.0.0.1:") &&
                  bs_logged("rejected rank 1: rank 1 has already joined"),
              "%s", bs_log.text);
    close(fd);
    close(lfd);
}

Test(tcp, a_final_refusal_is_not_retried)
{
    rank_thread_t rt;
    int port, lfd = raw_listen(&port);
    uint64_t job = zc_bs_job_hash(JOB);
    rank_init(&rt, 1, 2, "127.0.0.1", port, NULL);
    uint64_t start = zc_time_ns();
    rank_run(&rt);
    int fd = raw_accept_hello(lfd);
    uint8_t payload[4 + ZC_BS_REASON_MAX];
    size_t len = zc_bs_reason_encode(ZC_ERR_MISMATCH, "rank 1 says the job has 2 ranks", payload);
    raw_send(fd, zc_bs_frame_make(job, ZC_BS_MSG_REJECT, 0, 0, len, 0), payload);
    rank_join(&rt);
    cr_assert_eq(rt.status, ZC_ERR_MISMATCH, "%s", bs_log.text);
    cr_assert_lt(since_s(start), 2, "failed after %.1f s", since_s(start));
    close(fd);
    close(lfd);
}
