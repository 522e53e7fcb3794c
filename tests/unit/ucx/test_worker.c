/*
 * The level under communicators: workers, endpoints from worker addresses,
 * tagged operations with full 64-bit tags, cancel, detach, failing operations
 * and closing. Two workers in one thread, progressed by turns.
 */
#include "common/timer.h"
#include "transport/ucx/ucx.h"

#include <criterion/criterion.h>

#include <string.h>

typedef struct pair {
    zc_ucx_worker_t *a, *b;
    zc_ucx_ep_t *ab; /* a's endpoint to b */
} pair_t;

static void pair_open(pair_t *p)
{
    size_t len = 0;
    cr_assert_eq(zc_ucx_worker_create("test-a", &p->a), ZC_OK);
    cr_assert_eq(zc_ucx_worker_create("test-b", &p->b), ZC_OK);
    const void *addr = zc_ucx_worker_address(p->b, &len);
    cr_assert(addr && len > 0);
    cr_assert_eq(zc_ucx_ep_create(p->a, addr, len, NULL, NULL, &p->ab), ZC_OK);
}

static void pair_close(pair_t *p)
{
    zc_ucx_closing_t *c = zc_ucx_ep_close(p->ab, 0);
    uint64_t deadline = zc_time_ns() + 10 * 1000000000ull;
    while (c && !zc_ucx_closing_done(c)) {
        cr_assert_lt(zc_time_ns(), deadline, "the endpoint did not close within 10 s");
        zc_ucx_worker_progress(p->a);
        zc_ucx_worker_progress(p->b);
    }
    zc_ucx_worker_destroy(p->a);
    zc_ucx_worker_destroy(p->b);
}

/* Progresses both workers until every operation in @p ops left ZC_INPROGRESS (10 s at most). */
static void drive(pair_t *p, zc_ucx_op_t **ops, int n)
{
    uint64_t deadline = zc_time_ns() + 10 * 1000000000ull;
    for (;;) {
        int busy = 0;
        for (int i = 0; i < n; i++)
            busy |= ops[i]->status == ZC_INPROGRESS;
        if (!busy)
            return;
        cr_assert_lt(zc_time_ns(), deadline, "operations still in flight after 10 s");
        zc_ucx_worker_progress(p->a);
        zc_ucx_worker_progress(p->b);
    }
}

static int calls;
static void count_call(zc_ucx_op_t *op, void *arg)
{
    calls++;
    cr_expect_eq(arg, (void *)&calls);
    cr_expect_neq(op->status, ZC_INPROGRESS, "a callback sees the final status");
}

Test(ucx_worker, send_recv_full_tags)
{
    pair_t p;
    pair_open(&p);
    /* tags above the communicators' 44 bits are the caller's too */
    const uint64_t tags[2] = {UINT64_C(0xfedcba9876543210), UINT64_C(0x7fffffff00000005)};
    char out[2][100000], in[2][100000];
    zc_ucx_op_t s[2], r[2];
    memset(out[0], 'x', sizeof(out[0]));
    memset(out[1], 'y', sizeof(out[1]));
    calls = 0;
    for (int i = 0; i < 2; i++)
        cr_assert_eq(zc_ucx_op_recv(p.b, tags[i], in[i], sizeof(in[i]), count_call, &calls, &r[i]),
                     ZC_OK);
    /* sent in the other order: each receive matches its own tag */
    cr_assert_eq(zc_ucx_op_send(p.ab, tags[1], out[1], 777, count_call, &calls, &s[1]), ZC_OK);
    cr_assert_eq(zc_ucx_op_send(p.ab, tags[0], out[0], sizeof(out[0]), count_call, &calls, &s[0]),
                 ZC_OK);
    zc_ucx_op_t *ops[] = {&s[0], &s[1], &r[0], &r[1]};
    drive(&p, ops, 4);
    cr_expect_eq(calls, 4, "one callback per operation");
    cr_expect_eq(r[0].status, ZC_OK);
    cr_expect_eq(r[0].length, sizeof(out[0]));
    cr_expect_eq(r[1].status, ZC_OK);
    cr_expect_eq(r[1].length, 777);
    cr_expect_eq(s[0].length, sizeof(out[0]));
    cr_expect(memcmp(in[0], out[0], sizeof(out[0])) == 0);
    cr_expect(memcmp(in[1], out[1], 777) == 0);
    pair_close(&p);
}

Test(ucx_worker, truncated_receive)
{
    pair_t p;
    pair_open(&p);
    char out[4096] = {0}, in[100];
    zc_ucx_op_t s, r;
    cr_assert_eq(zc_ucx_op_recv(p.b, 9, in, sizeof(in), NULL, NULL, &r), ZC_OK);
    cr_assert_eq(zc_ucx_op_send(p.ab, 9, out, sizeof(out), NULL, NULL, &s), ZC_OK);
    zc_ucx_op_t *ops[] = {&s, &r};
    drive(&p, ops, 2);
    cr_expect_eq(r.status, ZC_ERR_BUFFER_TOO_SMALL);
    cr_expect_eq(r.length, 0);
    cr_expect_not_null(r.reason, "UCX's words for the failure");
    pair_close(&p);
}

static int is_op(zc_ucx_op_t *op, void *arg)
{
    return op == arg;
}

Test(ucx_worker, cancel_detach_and_fail)
{
    pair_t p;
    pair_open(&p);
    char in[3][16];
    zc_ucx_op_t r[3];
    calls = 0;
    for (int i = 0; i < 3; i++)
        cr_assert_eq(
            zc_ucx_op_recv(p.b, 100 + (uint64_t)i, in[i], sizeof(in[i]), count_call, &calls, &r[i]),
            ZC_OK);

    /* cancelled: completes, callback included, as a lost peer */
    zc_ucx_op_cancel(&r[0]);
    zc_ucx_op_t *ops[] = {&r[0]};
    drive(&p, ops, 1);
    cr_expect_eq(r[0].status, ZC_ERR_PEER);
    cr_expect_eq(calls, 1);

    /* detached: no callback, ever; the storage is free at once */
    zc_ucx_op_detach(&r[1]);
    memset(&r[1], 0xa5, sizeof(r[1]));

    /* failed by the caller: exactly the matching ones, with the given status and reason */
    cr_expect_eq(zc_ucx_worker_fail_ops(p.b, is_op, &r[0], ZC_ERR_TIMEOUT, "test"), 0,
                 "a completed operation is not in flight");
    cr_expect_eq(zc_ucx_worker_fail_ops(p.b, is_op, &r[2], ZC_ERR_TIMEOUT, "test"), 1);
    cr_expect_eq(r[2].status, ZC_ERR_TIMEOUT);
    cr_expect_str_eq(r[2].reason, "test");
    cr_expect_eq(calls, 2, "the failed operation's callback ran, the detached one's did not");
    for (int i = 0; i < 100; i++)
        zc_ucx_worker_progress(p.b);
    cr_expect_eq(calls, 2);
    pair_close(&p);
}
