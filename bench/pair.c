#include "bench/pair.h"

#include "common/compiler.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static int full_io(int fd, void *buf, size_t len, int writing)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = writing ? write(fd, p, len) : read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

zc_status_t bench_pair_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    bench_pair_t *c = ctx;
    uint8_t *slots = all;
    if (full_io(c->fd, (void *)mine, len, 1) < 0 ||
        full_io(c->fd, slots + (size_t)(1 - c->rank) * len, len, 0) < 0) {
        fprintf(stderr, "%s: rank %d: the other rank is gone\n", program_invocation_short_name,
                c->rank);
        return ZC_ERR_IO;
    }
    memcpy(slots + (size_t)c->rank * len, mine, len);
    return ZC_OK;
}

zc_status_t bench_pair_barrier(void *ctx)
{
    uint8_t mine = 1, all[2];
    return bench_pair_allgather(ctx, &mine, 1, all);
}

const zc_bootstrap_ops_t bench_pair_ops = {
    .name = "socketpair",
    .allgather = bench_pair_allgather,
    .barrier = bench_pair_barrier,
};

zc_status_t bench_pair_bw(zc_ucx_comm_t *comm, int rank, size_t size, int iters, int window,
                          uint8_t *buf, zc_ucx_req_t *req)
{
    uint64_t ack = 0;
    zc_ucx_req_t ack_req;

    for (int i = 0; i < iters; i++) {
        zc_ucx_req_t *r = &req[i % window];
        if (i >= window)
            ZC_CHECK(zc_ucx_wait(comm, r, "bandwidth window"));
        if (rank == 0)
            ZC_CHECK(zc_ucx_isend(comm, 1, BENCH_PAIR_TAG_DATA, buf, size, r));
        else
            ZC_CHECK(zc_ucx_irecv(comm, 0, BENCH_PAIR_TAG_DATA, buf, size, r));
    }
    ZC_CHECK(zc_ucx_waitall(comm, req, (size_t)(iters < window ? iters : window), "bandwidth"));
    if (rank == 0)
        ZC_CHECK(zc_ucx_irecv(comm, 1, BENCH_PAIR_TAG_ACK, &ack, sizeof(ack), &ack_req));
    else
        ZC_CHECK(zc_ucx_isend(comm, 0, BENCH_PAIR_TAG_ACK, &ack, sizeof(ack), &ack_req));
    return zc_ucx_wait(comm, &ack_req, "bandwidth ack");
}

int bench_pair_fork(const char *prefix, bench_rank_fn rank_main, void *arg)
{
    int fds[2];
    if (socketpair(AF_UNIX, SOCK_STREAM, 0, fds) != 0) {
        fprintf(stderr, "%ssocketpair: %s\n", prefix, strerror(errno));
        return -1;
    }
    fflush(stdout); /* or the child prints this process's buffered output again */
    pid_t pid = fork();
    if (pid < 0) {
        fprintf(stderr, "%sfork: %s\n", prefix, strerror(errno));
        return -1;
    }
    if (pid == 0) {
        close(fds[0]);
        _exit(rank_main(1, fds[1], arg));
    }
    close(fds[1]);
    int rc = rank_main(0, fds[0], arg);
    close(fds[0]);
    int status;
    waitpid(pid, &status, 0);
    return rc != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0;
}
