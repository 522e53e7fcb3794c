/*
 * PowerSGD all-reduce (Vogels, Karimireddy, Jaggi, NeurIPS 2019, Algorithm 1)
 * in one collective: the two all-reduces PyTorch's hook issues separately run
 * here as two rounds of a small ring on the factors, inside one op.
 *
 * Each rank views its tensor as an R x C matrix (codec/powersgd/powersgd.h)
 * and adds its error-feedback residual: M = g + e. Then
 *   1. P = M Q (Q: the previous call's summed Q, drawn alike on every rank
 *      at first), ring-summed with one more value: 1 where a rank's input is
 *      not finite;
 *   2. every rank orthonormalises the summed P (the same bits everywhere:
 *      the ring forms each sum on one rank and copies it), Q = M^T P, the
 *      local Q kept, Q ring-summed;
 *   3. result = P Q^T (divided by N for an average), e = M - P Q_local^T, and
 *      the summed Q is the next call's warm start.
 * The result is P (sum_i M_i)^T P... = P P^T sum_i M_i: the projection of the
 * sum of the M_i on the span of P, identical on every rank.
 *
 * Raw calls (the whole tensor summed exactly on the same ring, in f32): the
 * first ZIPCCL_POWERSGD_WARMUP calls of a tensor, and any call where a rank's
 * input holds a NaN or an infinity (seen by every rank in the summed flag of
 * step 1): the sum then carries them where they went in, a rank with clean
 * input sends M and its residual restarts at 0 (all of it was sent), a rank
 * with the non-finite input sends it as it is and keeps its residual, and Q
 * is left alone.
 *
 * The ring: rank k sends to k + 1. Round steps s = 0 .. 2N-3: send segment
 * (k - s) mod N, receive segment (k - s - 1) mod N, reduce-scatter then
 * all-gather, one step at a time (P and Q are small; raw calls are the
 * warm-up). Deadlines, aborts and lost peers are the driver's (zc_coll_test).
 */
#include "codec/powersgd/powersgd.h"
#include "collectives/coll.h"
#include "common/compiler.h"
#include "common/log.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { ROUND_P, ROUND_Q, ROUND_RAW };

typedef struct psgd_ring {
    float *buf;           /* summed in place */
    size_t len;           /* values */
    unsigned step;        /* next step to post: 0 .. 2 (N-1) */
    unsigned tag_base;    /* step number of step 0 in the op's tags */
    int posted;           /* step - 1 is in flight */
    float *stage;         /* a reduce-scatter segment arrives here */
    zc_ucx_req_t reqs[2]; /* send, receive */
} psgd_ring_t;

typedef struct psgd {
    zc_codec_state_t *cs;
    zc_powersgd_state_t *g;
    zc_powersgd_shape_t shape;
    int round;
    int bad_input; /* this rank's input is not finite */
    float *m;      /* count: f32 input, + residual (M) unless bad_input or raw */
    float *p;      /* R r + 1: P, then the flag */
    float *q;      /* r C: the summed Q */
    float *q_local;
    psgd_ring_t ring;
} psgd_t;

static void segment(const psgd_ring_t *ring, int n, int seg, size_t *off_p, size_t *len_p)
{
    zc_coll_segment(ring->len, (size_t)n, (size_t)seg, off_p, len_p);
}

static void ring_begin(psgd_t *ps, float *buf, size_t len, unsigned tag_base)
{
    psgd_ring_t *ring = &ps->ring;
    ring->buf = buf;
    ring->len = len;
    ring->step = 0;
    ring->tag_base = tag_base;
    ring->posted = 0;
    ring->reqs[0].status = ZC_OK;
    ring->reqs[1].status = ZC_OK;
}

/* Advances the ring round; ZC_OK once every step is done. */
static zc_status_t ring_progress(zc_coll_op_t *op, psgd_ring_t *ring)
{
    const int n = op->comm->size, rank = op->comm->rank;
    const unsigned nsteps = 2 * (unsigned)(n - 1);

    for (;;) {
        if (ring->posted) {
            zc_status_t st = zc_coll_test(op, ring->reqs, 2, "powersgd ring");
            if (st != ZC_OK)
                return st;
            unsigned s = ring->step - 1;
            size_t off, len;
            segment(ring, n, (int)(((unsigned)rank + 2 * (unsigned)n - s - 1) % (unsigned)n), &off,
                    &len);
            if (len)
                ZC_CHECK(
                    zc_coll_check_length(op, &ring->reqs[1], len * sizeof(float), "powersgd ring"));
            if (s < nsteps / 2 && len) {
                uint64_t t = zc_time_ns();
                float *dst = ring->buf + off;
                for (size_t i = 0; i < len; i++)
                    dst[i] = ring->stage[i] + dst[i];
                zc_coll_account(&op->stats.decode_ns, t);
            }
            ring->posted = 0;
        }
        if (ring->step == nsteps)
            return ZC_OK;

        unsigned s = ring->step;
        int left = (rank + n - 1) % n, right = (rank + 1) % n;
        int send_seg = (int)(((unsigned)rank + 2 * (unsigned)n - s) % (unsigned)n);
        int recv_seg = (int)(((unsigned)rank + 2 * (unsigned)n - s - 1) % (unsigned)n);
        uint64_t tag = zc_coll_tag(op, ring->tag_base + s, 0);
        size_t soff, slen, roff, rlen;
        segment(ring, n, send_seg, &soff, &slen);
        segment(ring, n, recv_seg, &roff, &rlen);
        ring->reqs[0].status = ZC_OK;
        ring->reqs[1].status = ZC_OK;
        if (rlen) {
            float *dst = s < nsteps / 2 ? ring->stage : ring->buf + roff;
            ZC_CHECK(
                zc_ucx_irecv(op->comm->ucx, left, tag, dst, rlen * sizeof(float), &ring->reqs[1]));
        }
        if (slen) {
            ZC_CHECK(zc_coll_isend(op, right, tag, ring->buf + soff, slen * sizeof(float),
                                   &ring->reqs[0]));
            op->stats.bytes_wire += slen * sizeof(float);
        }
        ring->step++;
        ring->posted = 1;
    }
}

static zc_status_t alloc_floats(float **p, size_t n)
{
    *p = malloc((n ? n : 1) * sizeof(float));
    return *p ? ZC_OK : ZC_ERR_NO_MEMORY;
}

static zc_status_t psgd_start(zc_coll_op_t *op)
{
    const int n = op->comm->size;
    psgd_t *ps = calloc(1, sizeof(*ps));

    if (!ps)
        return ZC_ERR_NO_MEMORY;
    op->priv = ps;
    if (op->count == 0)
        return ZC_OK;
    if (!op->tstate) {
        ZC_ERROR("powersgd: no per-tensor state for a %zu-value all-reduce", op->count);
        return ZC_ERR_INTERNAL;
    }
    ZC_CHECK(zc_state_slot(op->comm->store, op->tstate, 0, &op->path.params, op->count, &ps->cs));
    ps->g = zc_powersgd_state(ps->cs);
    if (!ps->g)
        return ZC_ERR_INTERNAL;
    ps->shape = ps->g->shape;

    const zc_powersgd_shape_t *s = &ps->shape;
    const size_t np = (size_t)(s->rows * s->rank), nq = (size_t)(s->cols * s->rank);
    const size_t longest = ZC_MAX(op->count, ZC_MAX(np + 1, nq));
    ZC_CHECK(alloc_floats(&ps->m, op->count));
    ZC_CHECK(alloc_floats(&ps->ring.stage, ZC_DIV_UP(longest, (size_t)n)));

    uint64_t t = zc_time_ns();
    zc_dtype_to_f32(op->dtype, op->sendbuf, op->count, ps->m);
    if (op->tstate->calls < op->path.params.powersgd.warmup) {
        zc_coll_account(&op->stats.encode_ns, t);
        ps->round = ROUND_RAW;
        ring_begin(ps, ps->m, op->count, 0);
        return ZC_OK;
    }

    ZC_CHECK(alloc_floats(&ps->p, np + 1));
    ZC_CHECK(alloc_floats(&ps->q, nq));
    ZC_CHECK(alloc_floats(&ps->q_local, nq));
    ps->bad_input = !zc_powersgd_finite(ps->m, op->count);
    if (ps->bad_input) {
        memset(ps->p, 0, np * sizeof(float));
        ps->p[np] = 1.0f;
    } else {
        if (ps->cs->residual)
            for (size_t i = 0; i < op->count; i++)
                ps->m[i] += ps->cs->residual[i];
        if (zc_powersgd_fill(s, ps->g->qt, ps->g->draws))
            ps->g->draws++;
        zc_powersgd_project(s, ps->m, op->count, ps->g->qt, ps->p);
        ps->p[np] = 0.0f;
    }
    zc_coll_account(&op->stats.encode_ns, t);
    ps->round = ROUND_P;
    ring_begin(ps, ps->p, np + 1, 0);
    return ZC_OK;
}

/* Writes the f32 sum @p acc (count values) to recvbuf; may use acc as scratch. */
static void store(zc_coll_op_t *op, float *acc)
{
    uint64_t t = zc_time_ns();
    zc_coll_store_result(op, acc, op->count, 0);
    zc_coll_account(&op->stats.decode_ns, t);
}

/* The P round is in: orthonormalise it, compute and send Q; or switch to a raw call. */
static zc_status_t after_p(zc_coll_op_t *op, psgd_t *ps)
{
    const zc_powersgd_shape_t *s = &ps->shape;
    const size_t np = (size_t)(s->rows * s->rank), nq = (size_t)(s->cols * s->rank);
    const unsigned tag_base = 2 * (unsigned)(op->comm->size - 1);

    if (ps->p[np] != 0.0f || !zc_powersgd_finite(ps->p, np)) {
        /* a rank holds NaN or an infinity (or P overflowed): everyone sends what it has */
        ps->round = ROUND_RAW;
        ring_begin(ps, ps->m, op->count, tag_base);
        return ZC_OK;
    }
    uint64_t t = zc_time_ns();
    zc_powersgd_orthonormalise(s, ps->p);
    zc_powersgd_back(s, ps->m, op->count, ps->p, ps->q_local);
    memcpy(ps->q, ps->q_local, nq * sizeof(float));
    zc_coll_account(&op->stats.encode_ns, t);
    ps->round = ROUND_Q;
    ring_begin(ps, ps->q, nq, tag_base);
    return ZC_OK;
}

/* Both rounds are in: the result, the residual, the next warm start. */
static void after_q(zc_coll_op_t *op, psgd_t *ps)
{
    const zc_powersgd_shape_t *s = &ps->shape;
    const size_t nq = (size_t)(s->cols * s->rank);
    float *residual = ps->cs->residual;

    uint64_t t = zc_time_ns();
    if (residual || op->stats.sample_err) {
        /* M - P Q_local^T, in m: the residual (swapped in) and the sampled error */
        double n2 = 0, e2 = 0;
        if (op->stats.sample_err)
            for (size_t i = 0; i < op->count; i++)
                n2 += (double)ps->m[i] * ps->m[i];
        zc_powersgd_expand(s, ps->p, ps->q_local, op->count, -1.0f, ps->m);
        int finite = zc_powersgd_finite(ps->m, op->count);
        if (op->stats.sample_err) {
            for (size_t i = 0; i < op->count; i++)
                e2 += (double)ps->m[i] * ps->m[i];
            op->stats.err2 += e2;
            op->stats.norm2 += n2;
        }
        if (residual && !finite) /* an overflow in the product: never keep it */
            memset(ps->m, 0, op->count * sizeof(float));
        if (residual) {
            ps->cs->residual = ps->m;
            ps->m = residual;
        }
    }
    memcpy(ps->g->qt, ps->q, nq * sizeof(float)); /* not finite: fill draws it anew */
    zc_coll_account(&op->stats.encode_ns, t);

    t = zc_time_ns();
    float *acc = ps->m; /* free now: the old residual, or M */
    memset(acc, 0, op->count * sizeof(float));
    zc_powersgd_expand(s, ps->p, ps->q, op->count, 1.0f, acc);
    zc_coll_account(&op->stats.decode_ns, t);
    store(op, acc);
}

static zc_status_t psgd_progress(zc_coll_op_t *op)
{
    psgd_t *ps = op->priv;

    if (op->count == 0)
        return ZC_OK;
    for (;;) {
        zc_status_t st = ring_progress(op, &ps->ring);
        if (st != ZC_OK)
            return st;
        switch (ps->round) {
        case ROUND_P: ZC_CHECK(after_p(op, ps)); break;
        case ROUND_Q: after_q(op, ps); return ZC_OK;
        default:
            /* a raw call: clean ranks sent their residual too */
            if (ps->cs->residual && !ps->bad_input &&
                op->tstate->calls >= op->path.params.powersgd.warmup)
                memset(ps->cs->residual, 0, op->count * sizeof(float));
            store(op, ps->m);
            return ZC_OK;
        }
    }
}

static void psgd_fini(zc_coll_op_t *op)
{
    psgd_t *ps = op->priv;

    if (!ps)
        return;
    if (op->status < 0) {
        /* UCX may still touch the ring's buffers */
        if (ps->ring.buf)
            zc_coll_abandon(op, ps->ring.reqs, 2);
        zc_coll_defer_free(op, ps->ring.stage);
        zc_coll_defer_free(op, ps->m);
        zc_coll_defer_free(op, ps->p);
        zc_coll_defer_free(op, ps->q);
    } else {
        free(ps->ring.stage);
        free(ps->m);
        free(ps->p);
        free(ps->q);
    }
    free(ps->q_local);
    free(ps);
    op->priv = NULL;
}

const zc_algo_t zc_algo_powersgd = {
    .start = psgd_start,
    .progress = psgd_progress,
    .fini = psgd_fini,
};
