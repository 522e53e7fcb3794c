/*
 * Commutative compressed ring (zc_algo_compressed_ring), for linear codecs (none, fp16,
 * bf16, gradiveq): a ring reduce-scatter and all-gather on payloads. Every
 * rank encodes its N segments separately; in N - 1 reduce-scatter steps each
 * rank receives its left neighbour's partial payload of a segment, adds its
 * own with zc_codec_reduce and passes the result on, until each rank holds one
 * segment summed over all ranks; N - 1 all-gather steps then pass the summed
 * payloads around, and every rank decodes each segment once. Each rank sends
 * 2 (N - 1) / N of a payload, as the raw ring sends of the vector, and decodes
 * once; payload sums are formed on one rank and copied as bytes, so every rank
 * decodes identical payloads and gets identical bits.
 *
 * Error: fp16/bf16 round every partial sum to half precision, so a segment's
 * sum carries N roundings (the encode and N - 1 reduce steps) instead of one.
 * GradiVeQ sums coefficients in f32; before its first basis (version 0) its
 * payloads are raw f32 and the ring sums them like the raw ring.
 *
 * Shared scales (qsgd-int: payloads add only when every rank quantized with
 * the same scales): before any encode, each rank computes its local scales
 * of every part (zc_codec_local_scales) and the ring all-reduces their
 * maximum, segment by segment as the payloads go: N - 1 reduce-scatter steps
 * (steps 2 (N - 1) on of the tag space) and N - 1 all-gather steps, a scale
 * per bucket, 4 bytes per bucket of values. Every part is then encoded with
 * the agreed scales (zc_codec_encode_shared).
 *
 * Pipelining: each segment is cut into C chunks of about ZIPCCL_CHUNK_BYTES
 * input bytes; part (k, c), segment k's chunk c, has its own payload,
 * codec-state slot k * C + c and rng stream. The C chunks run the ring
 * independently, so chunk c moves on while chunk c + 1 is encoded or reduced.
 * docs/collectives.md, "Commutative ring".
 */
#include "collectives/coll.h"

#include "common/compiler.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

typedef struct cr_part {
    size_t off, len;      /* elements of the vector */
    size_t cap;           /* zc_codec_bound(len) */
    size_t pos;           /* own payload, then the partial sum, at own + pos */
    size_t own_len;       /* its length, once encoded (then reduced) */
    const uint8_t *final; /* the summed payload, once here */
    size_t final_len;
    zc_codec_state_t *cs; /* slot k * C + c */
    int decoded;
} cr_part_t;

typedef struct cring {
    int n, rank, left, right;
    size_t nchunks, nparts; /* C chunks per segment, N * C parts */
    cr_part_t *parts;       /* part (k, c) at k * C + c */
    uint8_t *own;           /* own payloads, each replaced by the partial sum sent on */
    uint8_t *rs_in;         /* reduce-scatter step s, chunk c: left's partial at rs_pos[s C + c] */
    uint8_t *ag_in;         /* all-gather step s, chunk c: a summed payload at ag_pos[s C + c] */
    size_t *rs_pos, *ag_pos;
    zc_ucx_req_t *reqs;              /* 4 (N - 1) C: the four arrays below, in order */
    zc_ucx_req_t *rs_recv, *ag_recv; /* [s C + c] */
    zc_ucx_req_t *rs_send, *ag_send; /* [s C + c] */
    size_t *rs_done, *ag_done;       /* per chunk: steps completed */
    float *scratch;                  /* f16/bf16 results: one part's f32 values */
    size_t encoded;                  /* parts encoded, in encode order */
    size_t decoded;                  /* parts decoded into the result */
    /* shared scales, part p's from sc_pos[p]: segment k's are parts k C .. k C + C - 1 */
    size_t *sc_pos;                /* nparts + 1 */
    float *scales;                 /* local, then the reduce-scatter's running maxima */
    float *shared;                 /* the maxima, once agreed */
    float *sc_in;                  /* reduce-scatter: a segment's from the left, in place */
    zc_ucx_req_t *sc_reqs;         /* 4 (N - 1): receives (RS, AG), then sends (RS, AG) */
    size_t sc_rs_done, sc_ag_done; /* steps completed */
    int sc_ready;                  /* shared holds every scale */
} cring_t;

/* Segment @p k modulo the ring. */
static size_t seg(const cring_t *cr, long k)
{
    long n = cr->n;
    return (size_t)(((k % n) + n) % n);
}

static cr_part_t *part(cring_t *cr, size_t k, size_t c)
{
    return &cr->parts[k * cr->nchunks + c];
}

static void cring_fini(zc_coll_op_t *op)
{
    cring_t *cr = op->priv;

    if (!cr)
        return;
    if (op->status < 0 && cr->reqs)
        zc_coll_abandon(op, cr->reqs, 4 * (size_t)(cr->n - 1) * cr->nchunks);
    if (op->status < 0 && cr->sc_reqs)
        zc_coll_abandon(op, cr->sc_reqs, 4 * (size_t)(cr->n - 1));
    zc_coll_defer_free(op, cr->scales);
    zc_coll_defer_free(op, cr->shared);
    zc_coll_defer_free(op, cr->sc_in);
    free(cr->sc_reqs);
    free(cr->sc_pos);
    /* UCX may still touch these after a failure: freed with the communicator then */
    zc_coll_defer_free(op, cr->own);
    zc_coll_defer_free(op, cr->rs_in);
    zc_coll_defer_free(op, cr->ag_in);
    free(cr->reqs);
    free(cr->rs_pos);
    free(cr->ag_pos);
    free(cr->rs_done);
    free(cr->ag_done);
    free(cr->parts);
    zc_coll_defer_free(op, cr->scratch);
    free(cr);
    op->priv = NULL;
}

/* Adds @p add to the byte size *@p total; ZC_ERR_NO_MEMORY on overflow. */
static zc_status_t grow(size_t *total, size_t add)
{
    if (*total > SIZE_MAX - add)
        return ZC_ERR_NO_MEMORY;
    *total += add;
    return ZC_OK;
}

/* Parts, codec states, buffers; no transfer yet. */
static zc_status_t plan(zc_coll_op_t *op, cring_t *cr)
{
    const zc_codec_params_t *params = &op->path.params;
    size_t n = (size_t)cr->n, granule = zc_coll_granule(params);
    size_t esize = zc_dtype_bytes(op->dtype);
    size_t chunk_elems = ZC_MAX((size_t)op->comm->cfg.chunk_bytes / esize, 1);

    /* C from the longest segment, at most a granule per chunk of the shortest */
    size_t seg_max = ZC_DIV_UP(op->count, n), seg_min = op->count / n;
    size_t nchunks = zc_coll_nchunks(seg_max, seg_min, chunk_elems, granule);
    cr->nchunks = nchunks;
    cr->nparts = n * nchunks;
    size_t steps = (n - 1) * nchunks; /* (step, chunk) pairs of each phase */

    cr->parts = calloc(cr->nparts, sizeof(*cr->parts));
    cr->reqs = calloc(4 * steps + 1, sizeof(*cr->reqs)); /* zeroed: ZC_OK */
    cr->rs_pos = calloc(steps + 1, sizeof(size_t));
    cr->ag_pos = calloc(steps + 1, sizeof(size_t));
    cr->rs_done = calloc(nchunks, sizeof(size_t));
    cr->ag_done = calloc(nchunks, sizeof(size_t));
    if (!cr->parts || !cr->reqs || !cr->rs_pos || !cr->ag_pos || !cr->rs_done || !cr->ag_done)
        return ZC_ERR_NO_MEMORY;
    cr->rs_recv = cr->reqs; /* the receives first: one array to test while waiting */
    cr->ag_recv = cr->reqs + steps;
    cr->rs_send = cr->reqs + 2 * steps;
    cr->ag_send = cr->reqs + 3 * steps;

    size_t own_bytes = 0, max_len = 0;
    for (size_t p = cr->nparts; p-- > 0;) { /* the highest slot first: one allocation of slots */
        size_t k = p / nchunks, c = p % nchunks, seg_off, seg_len;
        cr_part_t *pt = &cr->parts[p];
        zc_coll_split(op->count, n, granule, k, &seg_off, &seg_len);
        zc_coll_split(seg_len, nchunks, granule, c, &pt->off, &pt->len);
        pt->off += seg_off;
        pt->cap = zc_codec_bound(params, pt->len);
        if (pt->cap == 0) {
            ZC_ERROR("compressed ring: invalid %s parameters", zc_codec_name(params->codec));
            return ZC_ERR_INVALID_CONFIG;
        }
        max_len = ZC_MAX(max_len, pt->len);
        if (op->tstate) {
            zc_status_t status =
                zc_state_slot(op->comm->store, op->tstate, p, params, pt->len, &pt->cs);
            if (status < 0) {
                ZC_ERROR("compressed ring: no %s state for segment %zu chunk %zu (%zu values): %s",
                         zc_codec_name(params->codec), k, c, pt->len, zc_status_string(status));
                return status;
            }
        }
    }
    for (size_t p = 0; p < cr->nparts; p++) {
        cr->parts[p].pos = own_bytes;
        ZC_CHECK(grow(&own_bytes, cr->parts[p].cap));
    }

    /* step s receives segment r - s - 1 (reduce-scatter) and segment r - s (all-gather) */
    size_t rs_bytes = 0, ag_bytes = 0;
    for (size_t s = 0; s + 1 < n; s++) {
        for (size_t c = 0; c < nchunks; c++) {
            cr->rs_pos[s * nchunks + c] = rs_bytes;
            cr->ag_pos[s * nchunks + c] = ag_bytes;
            ZC_CHECK(grow(&rs_bytes, part(cr, seg(cr, cr->rank - (long)s - 1), c)->cap));
            ZC_CHECK(grow(&ag_bytes, part(cr, seg(cr, cr->rank - (long)s), c)->cap));
        }
    }
    cr->own = zc_coll_alloc(op, own_bytes);
    cr->rs_in = zc_coll_alloc(op, ZC_MAX(rs_bytes, 1));
    cr->ag_in = zc_coll_alloc(op, ZC_MAX(ag_bytes, 1));
    if (!cr->own || !cr->rs_in || !cr->ag_in)
        return ZC_ERR_NO_MEMORY;
    if (op->dtype != ZC_DTYPE_F32) {
        cr->scratch = zc_coll_alloc(op, ZC_MAX(max_len, 1) * sizeof(float));
        if (!cr->scratch)
            return ZC_ERR_NO_MEMORY;
    }
    return ZC_OK;
}

/* Sends @p len bytes at @p buf to the right neighbour as step @p step of chunk @p c. */
static zc_status_t send_right(zc_coll_op_t *op, cring_t *cr, unsigned step, size_t c,
                              const uint8_t *buf, size_t len, zc_ucx_req_t *req)
{
    ZC_CHECK(zc_coll_isend(op, cr->right, zc_coll_tag(op, step, (unsigned)c), buf, len, req));
    op->stats.bytes_wire += len;
    return ZC_OK;
}

/* Scale segment @p k: its first scale and count. */
static float *sc_seg(const cring_t *cr, float *base, size_t k, size_t *n_p)
{
    size_t from = cr->sc_pos[k * cr->nchunks], to = cr->sc_pos[(k + 1) * cr->nchunks];
    *n_p = to - from;
    return base + from;
}

/* Local scales of every part, receives posted, segment r sent: the scale round begins. */
static zc_status_t scales_start(zc_coll_op_t *op, cring_t *cr)
{
    const zc_codec_params_t *params = &op->path.params;
    const size_t n = (size_t)cr->n, esize = zc_dtype_bytes(op->dtype);

    cr->sc_pos = calloc(cr->nparts + 1, sizeof(size_t));
    cr->sc_reqs = calloc(4 * (n - 1) + 1, sizeof(*cr->sc_reqs)); /* zeroed: ZC_OK */
    if (!cr->sc_pos || !cr->sc_reqs)
        return ZC_ERR_NO_MEMORY;
    for (size_t p = 0; p < cr->nparts; p++)
        cr->sc_pos[p + 1] = cr->sc_pos[p] + zc_codec_shared_scales(params, cr->parts[p].len);
    size_t total = ZC_MAX(cr->sc_pos[cr->nparts], 1);
    cr->scales = zc_coll_alloc(op, total * sizeof(float));
    cr->shared = zc_coll_alloc(op, total * sizeof(float));
    cr->sc_in = zc_coll_alloc(op, total * sizeof(float));
    if (!cr->scales || !cr->shared || !cr->sc_in)
        return ZC_ERR_NO_MEMORY;

    uint64_t t = zc_time_ns();
    for (size_t p = 0; p < cr->nparts; p++) {
        cr_part_t *pt = &cr->parts[p];
        const uint8_t *src = (const uint8_t *)op->sendbuf + pt->off * esize;
        zc_status_t status = zc_codec_local_scales(params, pt->cs, op->dtype, src, pt->len,
                                                   cr->scales + cr->sc_pos[p]);
        if (status < 0) {
            ZC_ERROR("compressed ring: %s scales of segment %zu chunk %zu (%zu values) failed: %s",
                     zc_codec_name(params->codec), p / cr->nchunks, p % cr->nchunks, pt->len,
                     zc_status_string(status));
            return status;
        }
    }
    zc_coll_account(&op->stats.encode_ns, t);
    if (n == 1) {
        memcpy(cr->shared, cr->scales, total * sizeof(float));
        cr->sc_ready = 1;
        return ZC_OK;
    }

    /* reduce-scatter step s brings segment r - s - 1, all-gather step s segment r - s */
    const unsigned base = 2 * (unsigned)(n - 1);
    zc_ucx_req_t *rs_recv = cr->sc_reqs, *ag_recv = rs_recv + (n - 1);
    for (size_t s = 0; s + 1 < n; s++) {
        size_t len;
        float *in = sc_seg(cr, cr->sc_in, seg(cr, cr->rank - (long)s - 1), &len);
        ZC_CHECK(zc_ucx_irecv(op->comm->ucx, cr->left, zc_coll_tag(op, base + (unsigned)s, 0), in,
                              len * sizeof(float), &rs_recv[s]));
        float *fin = sc_seg(cr, cr->shared, seg(cr, cr->rank - (long)s), &len);
        ZC_CHECK(zc_ucx_irecv(op->comm->ucx, cr->left,
                              zc_coll_tag(op, base + (unsigned)(n - 1 + s), 0), fin,
                              len * sizeof(float), &ag_recv[s]));
    }
    size_t len;
    float *own = sc_seg(cr, cr->scales, (size_t)cr->rank, &len);
    ZC_CHECK(send_right(op, cr, base, 0, (const uint8_t *)own, len * sizeof(float),
                        &cr->sc_reqs[2 * (n - 1)]));
    return ZC_OK;
}

/* ZC_OK when @p req brought @p len scales, ZC_INPROGRESS before, else the error (blamed). */
static zc_status_t scales_arrived(zc_coll_op_t *op, const zc_ucx_req_t *req, size_t len)
{
    if (req->status == ZC_INPROGRESS)
        return ZC_INPROGRESS;
    if (req->status < 0)
        return zc_coll_blame(op, req->peer, req->status);
    return zc_coll_check_length(op, req, len * sizeof(float), "compressed ring (scales)");
}

/*
 * The scale round as far as what arrived allows: each reduce-scatter step
 * takes the maximum with the left's and passes it on, the last one's result
 * (segment r + 1, final) starts the all-gather, whose steps land in shared
 * and are passed on. ZC_OK once every scale is agreed, ZC_INPROGRESS before.
 */
static zc_status_t scales_progress(zc_coll_op_t *op, cring_t *cr)
{
    const size_t last = (size_t)cr->n - 1;
    const unsigned base = 2 * (unsigned)last;
    zc_ucx_req_t *rs_recv = cr->sc_reqs, *ag_recv = rs_recv + last;
    zc_ucx_req_t *rs_send = ag_recv + last, *ag_send = rs_send + last;

    while (cr->sc_rs_done < last) {
        size_t s = cr->sc_rs_done, k = seg(cr, cr->rank - (long)s - 1), len;
        float *mine = sc_seg(cr, cr->scales, k, &len);
        const float *in = sc_seg(cr, cr->sc_in, k, &len);
        zc_status_t status = scales_arrived(op, &rs_recv[s], len);
        if (status != ZC_OK)
            return status;
        for (size_t i = 0; i < len; i++)
            mine[i] = in[i] > mine[i] ? in[i] : mine[i];
        cr->sc_rs_done++;
        if (s + 1 < last) {
            ZC_CHECK(send_right(op, cr, base + (unsigned)(s + 1), 0, (const uint8_t *)mine,
                                len * sizeof(float), &rs_send[s + 1]));
        } else {
            float *fin = sc_seg(cr, cr->shared, k, &len); /* segment r + 1: agreed */
            memcpy(fin, mine, len * sizeof(float));
            ZC_CHECK(send_right(op, cr, base + (unsigned)last, 0, (const uint8_t *)fin,
                                len * sizeof(float), &ag_send[0]));
        }
    }
    while (cr->sc_ag_done < last) {
        size_t s = cr->sc_ag_done, k = seg(cr, cr->rank - (long)s), len;
        float *fin = sc_seg(cr, cr->shared, k, &len);
        zc_status_t status = scales_arrived(op, &ag_recv[s], len);
        if (status != ZC_OK)
            return status;
        cr->sc_ag_done++;
        if (s + 1 < last)
            ZC_CHECK(send_right(op, cr, base + (unsigned)(last + s + 1), 0, (const uint8_t *)fin,
                                len * sizeof(float), &ag_send[s + 1]));
    }
    cr->sc_ready = 1;
    return ZC_OK;
}

static zc_status_t cring_start(zc_coll_op_t *op)
{
    const zc_codec_params_t *params = &op->path.params;

    if (!(zc_codec_caps(params->codec) & ZC_CODEC_CAP_LINEAR)) {
        ZC_ERROR(
            "compressed ring: codec %s cannot be summed compressed (not linear): use allgather or "
            "scatter",
            zc_codec_name(params->codec));
        return ZC_ERR_UNSUPPORTED;
    }
    /* the scale round takes 2 (N - 1) steps more */
    size_t steps =
        (zc_codec_shared_scales(params, op->count) > 0 ? 4 : 2) * (size_t)(op->comm->size - 1);
    if (steps > ZC_COLL_MAX_STEP) {
        ZC_ERROR("compressed ring: %d ranks need %zu steps, more than the %u a tag holds",
                 op->comm->size, steps, ZC_COLL_MAX_STEP);
        return ZC_ERR_UNSUPPORTED;
    }
    if (op->count == 0)
        return ZC_OK; /* nothing to move; progress() finds no priv and completes */
    cring_t *cr = calloc(1, sizeof(*cr));
    if (!cr)
        return ZC_ERR_NO_MEMORY;
    op->priv = cr;
    cr->n = op->comm->size;
    cr->rank = op->comm->rank;
    cr->left = (cr->rank + cr->n - 1) % cr->n;
    cr->right = (cr->rank + 1) % cr->n;
    ZC_CHECK(plan(op, cr)); /* fini frees what plan() allocated */
    if (zc_codec_shared_scales(params, op->count) > 0)
        ZC_CHECK(scales_start(op, cr));

    size_t nc = cr->nchunks;
    for (size_t s = 0; s + 1 < (size_t)cr->n; s++) {
        for (size_t c = 0; c < nc; c++) {
            size_t i = s * nc + c;
            ZC_CHECK(zc_ucx_irecv(
                op->comm->ucx, cr->left, zc_coll_tag(op, (unsigned)s, c), cr->rs_in + cr->rs_pos[i],
                part(cr, seg(cr, cr->rank - (long)s - 1), c)->cap, &cr->rs_recv[i]));
            ZC_CHECK(zc_ucx_irecv(op->comm->ucx, cr->left,
                                  zc_coll_tag(op, (unsigned)(cr->n - 1 + s), c),
                                  cr->ag_in + cr->ag_pos[i],
                                  part(cr, seg(cr, cr->rank - (long)s), c)->cap, &cr->ag_recv[i]));
        }
    }
    return ZC_OK;
}

/*
 * Encodes the next own part. Order: segment r (sent at reduce-scatter step 0)
 * then r - 1, r - 2, ... (added at steps 0, 1, ...), each chunk by chunk.
 */
static zc_status_t encode_next(zc_coll_op_t *op, cring_t *cr)
{
    size_t i = cr->encoded / cr->nchunks, c = cr->encoded % cr->nchunks;
    size_t k = seg(cr, cr->rank - (long)i);
    cr_part_t *pt = part(cr, k, c);
    const uint8_t *src = (const uint8_t *)op->sendbuf + pt->off * zc_dtype_bytes(op->dtype);
    uint8_t *payload = cr->own + pt->pos;
    zc_codec_rng_t rng = op->rng;

    rng.stream = (uint32_t)(k * cr->nchunks + c);
    uint64_t t = zc_time_ns();
    zc_status_t status =
        cr->shared ? zc_codec_encode_shared(&op->path.params, pt->cs, &rng, op->dtype, src, pt->len,
                                            cr->shared + cr->sc_pos[k * cr->nchunks + c], payload,
                                            pt->cap, &pt->own_len)
                   : zc_codec_encode(&op->path.params, pt->cs, &rng, op->dtype, src, pt->len,
                                     payload, pt->cap, &pt->own_len);
    zc_coll_account(&op->stats.encode_ns, t);
    if (status < 0) {
        ZC_ERROR("compressed ring: %s encode of segment %zu chunk %zu (%zu values) failed: %s",
                 zc_codec_name(op->path.params.codec), k, c, pt->len, zc_status_string(status));
        return status;
    }
    zc_coll_measure_error(op, pt->cs, payload, pt->own_len, src, pt->len);
    cr->encoded++;
    if (i == 0) {
        if (cr->n == 1) {
            pt->final = payload; /* one rank: own payload is the sum */
            pt->final_len = pt->own_len;
        } else {
            ZC_CHECK(send_right(op, cr, 0, c, payload, pt->own_len, &cr->rs_send[c]));
        }
    }
    return ZC_OK;
}

/*
 * Posts what arrived in the all-gather of chunk @p c on to the right (no
 * compute, so all of it at once) and marks it for decoding.
 */
static zc_status_t forward_gathered(zc_coll_op_t *op, cring_t *cr, size_t c)
{
    size_t nc = cr->nchunks, last = (size_t)cr->n - 1;

    while (cr->ag_done[c] < last) {
        size_t s = cr->ag_done[c], i = s * nc + c;
        zc_ucx_req_t *req = &cr->ag_recv[i];
        if (req->status == ZC_INPROGRESS)
            return ZC_OK;
        if (req->status < 0) /* the transport logged it */
            return zc_coll_blame(op, req->peer, req->status);
        cr_part_t *pt = part(cr, seg(cr, cr->rank - (long)s), c);
        pt->final = cr->ag_in + cr->ag_pos[i];
        pt->final_len = req->length;
        if (s + 1 < last)
            ZC_CHECK(send_right(op, cr, (unsigned)(last + s + 1), c, pt->final, pt->final_len,
                                &cr->ag_send[(s + 1) * nc + c]));
        cr->ag_done[c]++;
    }
    return ZC_OK;
}

/*
 * Reduce-scatter step rs_done[c] of chunk @p c when the left's partial is here
 * and own part is encoded: own part += partial, then on to the right (the last
 * step's result is the segment's sum: it starts the all-gather). Returns 1 when
 * it reduced, 0 when not ready, or an error.
 */
static int reduce_step(zc_coll_op_t *op, cring_t *cr, size_t c, zc_status_t *status_p)
{
    size_t nc = cr->nchunks, last = (size_t)cr->n - 1, s = cr->rs_done[c], i = s * nc + c;
    zc_ucx_req_t *req = &cr->rs_recv[i];

    if (s >= last || req->status == ZC_INPROGRESS || cr->encoded <= (s + 1) * nc + c)
        return 0;
    if (req->status < 0) {
        *status_p = zc_coll_blame(op, req->peer, req->status); /* the transport logged it */
        return -1;
    }
    size_t k = seg(cr, cr->rank - (long)s - 1);
    cr_part_t *pt = part(cr, k, c);
    uint8_t *mine = cr->own + pt->pos;
    uint64_t t = zc_time_ns();
    zc_status_t status = zc_codec_reduce(pt->cs, cr->rs_in + cr->rs_pos[i], req->length, mine,
                                         pt->own_len, mine, pt->cap, &pt->own_len);
    zc_coll_account(&op->stats.decode_ns, t);
    if (status < 0) {
        ZC_ERROR("compressed ring: rank %d's partial sum of segment %zu chunk %zu (%zu bytes) does "
                 "not add "
                 "to this rank's (%zu bytes): %s",
                 cr->left, k, c, req->length, pt->own_len, zc_status_string(status));
        *status_p = zc_coll_blame(op, cr->left, status);
        return -1;
    }
    cr->rs_done[c]++;
    if (s + 1 < last) {
        status = send_right(op, cr, (unsigned)(s + 1), c, mine, pt->own_len,
                            &cr->rs_send[(s + 1) * nc + c]);
    } else {
        pt->final = mine; /* segment r + 1: summed over every rank */
        pt->final_len = pt->own_len;
        status = send_right(op, cr, (unsigned)last, c, mine, pt->own_len, &cr->ag_send[c]);
    }
    if (status < 0) {
        *status_p = status;
        return -1;
    }
    return 1;
}

/* Decodes a summed part into the result and feeds it to its state; 1 when done, 0 if none. */
static int decode_step(zc_coll_op_t *op, cring_t *cr, zc_status_t *status_p)
{
    cr_part_t *pt = NULL;
    size_t p;

    for (p = 0; p < cr->nparts; p++) {
        if (cr->parts[p].final && !cr->parts[p].decoded) {
            pt = &cr->parts[p];
            break;
        }
    }
    if (!pt)
        return 0;
    /* recvbuf holds f32 sums in place: every sum includes own part, encoded before */
    float *acc = cr->scratch ? cr->scratch : (float *)op->recvbuf + pt->off;
    uint64_t t = zc_time_ns();
    memset(acc, 0, pt->len * sizeof(float));
    zc_status_t status = zc_codec_decode_add(pt->cs, pt->final, pt->final_len, acc, pt->len);
    zc_coll_account(&op->stats.decode_ns, t);
    if (status < 0) {
        ZC_ERROR(
            "compressed ring: the sum of segment %zu chunk %zu (%zu bytes, %zu values) does not "
            "decode: %s",
            p / cr->nchunks, p % cr->nchunks, pt->final_len, pt->len, zc_status_string(status));
        *status_p = zc_coll_blame(op, cr->left, status); /* who sent it */
        return -1;
    }
    status = zc_coll_part_done(op, pt->cs, acc, pt->len, pt->off);
    if (status < 0) {
        *status_p = status;
        return -1;
    }
    pt->decoded = 1;
    cr->decoded++;
    return 1;
}

/*
 * Forwards everything that arrived, then one step of work, the one others wait
 * for first: a reduction (the right neighbour waits for it), an encode, a
 * decode (only this rank waits for it).
 */
static zc_status_t cring_progress(zc_coll_op_t *op)
{
    cring_t *cr = op->priv;
    zc_status_t status = ZC_OK;

    if (!cr)
        return ZC_OK; /* count 0 */
    if (cr->sc_reqs && !cr->sc_ready) {
        status = scales_progress(op, cr);
        if (status == ZC_INPROGRESS) {
            status = zc_coll_test(op, cr->sc_reqs, 2 * (size_t)(cr->n - 1),
                                  "compressed ring (scales from the left)");
            return status == ZC_OK ? ZC_INPROGRESS : status;
        }
        ZC_CHECK(status);
    }
    for (size_t c = 0; c < cr->nchunks; c++)
        ZC_CHECK(forward_gathered(op, cr, c));
    for (size_t c = 0; c < cr->nchunks; c++) {
        int did = reduce_step(op, cr, c, &status);
        if (did < 0)
            return status;
        if (did)
            return ZC_INPROGRESS;
    }
    if (cr->encoded < cr->nparts) {
        ZC_CHECK(encode_next(op, cr));
        return ZC_INPROGRESS;
    }
    int did = decode_step(op, cr, &status);
    if (did < 0)
        return status;
    if (did)
        return ZC_INPROGRESS;
    if (cr->decoded < cr->nparts) {
        /* waiting on the left: the deadline */
        status = zc_coll_test(op, cr->rs_recv, 2 * (size_t)(cr->n - 1) * cr->nchunks,
                              "compressed ring (receiving from the left)");
        return status == ZC_OK ? ZC_INPROGRESS : status;
    }
    if (cr->sc_reqs) {
        status = zc_coll_test(op, cr->sc_reqs, 4 * (size_t)(cr->n - 1),
                              "compressed ring (sending scales to the right)");
        if (status != ZC_OK)
            return status;
    }
    return zc_coll_test(op, cr->reqs, 4 * (size_t)(cr->n - 1) * cr->nchunks,
                        "compressed ring (sending to the right)");
}

const zc_algo_t zc_algo_compressed_ring = {
    .start = cring_start,
    .progress = cring_progress,
    .fini = cring_fini,
};
