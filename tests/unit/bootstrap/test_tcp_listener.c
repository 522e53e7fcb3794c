/*
 * zc_bootstrap_tcp_create_listener: rank 0 adopts a socket that already listens
 * (the NCCL CollNet plugin publishes its address in listen() and joins in
 * connect()). Ranks are threads, as in test_tcp.c.
 */
#include "transport/bootstrap/tcp.h"

#include "bootstrap_test.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>

static void setup(void)
{
    bs_log_start();
}

static void teardown(void)
{
    bs_log_stop();
}

TestSuite(tcp_listener, .init = setup, .fini = teardown, .timeout = 20);

#define JOB "listener-job"

/* A blocking socket listening on 127.0.0.1, port chosen by the kernel, in *port_p. */
static int listening_socket(int *port_p)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_geq(fd, 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 16), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port_p = ntohs(a.sin_port);
    return fd;
}

static int fd_is_open(int fd)
{
    return fcntl(fd, F_GETFD) != -1 || errno != EBADF;
}

typedef struct lrank {
    pthread_t tid;
    int rank, size, port, fd;
    const char *job;
    zc_status_t status, op_status;
} lrank_t;

static void *lrank_main(void *p)
{
    lrank_t *r = p;
    zc_bootstrap_t *bs = NULL;
    r->status = zc_bootstrap_tcp_create_listener(r->rank, r->size, "127.0.0.1", r->port, r->fd,
                                                 r->job, 10, &bs);
    if (r->status != ZC_OK)
        return NULL;
    /* each rank contributes rank * 3 + j; everyone must see every rank's bytes in order */
    uint8_t mine[24], all[4 * 24];
    for (size_t j = 0; j < sizeof(mine); j++)
        mine[j] = (uint8_t)(r->rank * 3 + (int)j);
    r->op_status = zc_bootstrap_allgather(bs, mine, sizeof(mine), all);
    for (int q = 0; r->op_status == ZC_OK && q < r->size; q++) {
        for (size_t j = 0; j < sizeof(mine); j++) {
            if (all[(size_t)q * sizeof(mine) + j] != (uint8_t)(q * 3 + (int)j))
                r->op_status = ZC_ERR_CORRUPT;
        }
    }
    if (r->op_status == ZC_OK)
        r->op_status = zc_bootstrap_barrier(bs);
    zc_bootstrap_destroy(bs);
    return NULL;
}

static void run_listener_job(int size)
{
    lrank_t r[4];
    int port, lfd = listening_socket(&port);
    cr_assert_leq(size, 4);
    for (int i = 0; i < size; i++) {
        r[i] =
            (lrank_t){.rank = i, .size = size, .port = port, .fd = i == 0 ? lfd : -1, .job = JOB};
        r[i].status = r[i].op_status = ZC_ERR_INTERNAL;
    }
    /* the others first: they queue in the backlog of a socket nobody accepts on yet */
    for (int i = size - 1; i >= 0; i--)
        cr_assert_eq(pthread_create(&r[i].tid, NULL, lrank_main, &r[i]), 0);
    for (int i = 0; i < size; i++)
        pthread_join(r[i].tid, NULL);
    for (int i = 0; i < size; i++) {
        cr_expect_eq(r[i].status, ZC_OK, "rank %d create: %s", i, zc_status_string(r[i].status));
        cr_expect_eq(r[i].op_status, ZC_OK, "rank %d allgather: %s", i,
                     zc_status_string(r[i].op_status));
    }
    cr_expect_eq(bs_log.errors, 0, "%s", bs_log.text);
}

Test(tcp_listener, two_ranks)
{
    run_listener_job(2);
}

Test(tcp_listener, four_ranks)
{
    run_listener_job(4);
}

/* The adopted socket is closed once the ranks joined: its port no longer accepts. */
Test(tcp_listener, socket_taken)
{
    lrank_t r[2];
    int port, lfd = listening_socket(&port);
    for (int i = 0; i < 2; i++)
        r[i] = (lrank_t){.rank = i, .size = 2, .port = port, .fd = i == 0 ? lfd : -1, .job = JOB};
    for (int i = 0; i < 2; i++)
        cr_assert_eq(pthread_create(&r[i].tid, NULL, lrank_main, &r[i]), 0);
    for (int i = 0; i < 2; i++)
        pthread_join(r[i].tid, NULL);
    cr_assert_eq(r[0].status, ZC_OK);
    cr_assert_eq(r[1].status, ZC_OK);

    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    cr_assert_geq(fd, 0);
    cr_expect_neq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0,
                  "port %d still accepts after the bootstrap", port);
    close(fd);
}

/* A stranger of another job on the adopted socket is rejected and does not count. */
Test(tcp_listener, stranger_rejected)
{
    lrank_t r[3];
    int port, lfd = listening_socket(&port);
    r[0] = (lrank_t){.rank = 0, .size = 2, .port = port, .fd = lfd, .job = JOB};
    r[1] = (lrank_t){.rank = 1, .size = 2, .port = port, .fd = -1, .job = "other-job"};
    r[2] = (lrank_t){.rank = 1, .size = 2, .port = port, .fd = -1, .job = JOB};
    cr_assert_eq(pthread_create(&r[0].tid, NULL, lrank_main, &r[0]), 0);
    cr_assert_eq(pthread_create(&r[1].tid, NULL, lrank_main, &r[1]), 0);
    pthread_join(r[1].tid, NULL);
    cr_expect_eq(r[1].status, ZC_ERR_MISMATCH, "%s", zc_status_string(r[1].status));
    cr_assert_eq(pthread_create(&r[2].tid, NULL, lrank_main, &r[2]), 0);
    pthread_join(r[2].tid, NULL);
    pthread_join(r[0].tid, NULL);
    cr_expect_eq(r[0].status, ZC_OK);
    cr_expect_eq(r[0].op_status, ZC_OK);
    cr_expect_eq(r[2].status, ZC_OK);
    cr_expect_eq(r[2].op_status, ZC_OK);
}

/* Rank 0 without a socket, another rank with one: ZC_ERR_INVALID_ARG, and the socket closed. */
Test(tcp_listener, bad_arguments)
{
    zc_bootstrap_t *bs = NULL;
    int port, lfd;

    cr_expect_eq(zc_bootstrap_tcp_create_listener(0, 2, "127.0.0.1", 5000, -1, JOB, 1, &bs),
                 ZC_ERR_INVALID_ARG);
    lfd = listening_socket(&port);
    cr_expect_eq(zc_bootstrap_tcp_create_listener(1, 2, "127.0.0.1", port, lfd, JOB, 1, &bs),
                 ZC_ERR_INVALID_ARG);
    cr_expect(!fd_is_open(lfd), "the socket given to rank 1 was not closed");
    lfd = listening_socket(&port);
    cr_expect_eq(zc_bootstrap_tcp_create_listener(0, 2, "127.0.0.1", port, lfd, NULL, 1, &bs),
                 ZC_ERR_INVALID_ARG);
    cr_expect(!fd_is_open(lfd), "the socket was not closed after a bad job id");
    cr_expect_null(bs);

    /* one rank: nothing to accept, no socket */
    cr_expect_eq(zc_bootstrap_tcp_create_listener(0, 1, "", 0, -1, JOB, 1, &bs), ZC_OK);
    cr_expect_not_null(bs);
    zc_bootstrap_destroy(bs);
}

/* Rank 0 alone on its socket: times out naming the missing rank, and closes the socket. */
Test(tcp_listener, timeout_closes)
{
    zc_bootstrap_t *bs = NULL;
    int port, lfd = listening_socket(&port);
    cr_expect_eq(zc_bootstrap_tcp_create_listener(0, 2, "127.0.0.1", port, lfd, JOB, 1, &bs),
                 ZC_ERR_TIMEOUT);
    cr_expect(bs_logged("did not connect to rank 0"), "%s", bs_log.text);
    cr_expect(!fd_is_open(lfd), "the socket was not closed after the timeout");
}
