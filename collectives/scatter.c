/*
 * Compressed scatter-reduce-allgather (zc_algo_scatter): rank r owns shard r
 * of the vector. Every rank encodes each shard of its vector separately and
 * sends shard j's payload to rank j (all-to-all); owner r adds the N
 * contributions to its shard in rank order, compresses the sum once more and
 * sends that payload to every rank (all-gather); every rank, the owner
 * included, decodes all N final payloads. Each rank sends 2 (N - 1) / N of a
 * payload: the exchange that scales with N. docs/collectives.md,
 * "Scatter-reduce-allgather".
 *
 * The owner's step depends on the codec:
 * - decode mode (every codec but GradiVeQ): decode the N contributions into
 *   an f32 sum, re-encode it. QSGD stays unbiased: the second rounding draws
 *   from an rng stream of its own, independent of the first. fp16/bf16 round
 *   the f32 sum once. Stateful codecs (top-k, error feedback) re-encode with
 *   a state of their own (one per chunk of the owner's shard), so the owner's
 *   residual carries what the re-encoding dropped to the next call.
 * - reduce mode (linear codecs whose decoding needs a learned state, i.e.
 *   GradiVeQ): add the N payloads with zc_codec_reduce. A GradiVeQ payload sums
 *   exactly (coefficients in f32, the mean's shares counted up to N); decoding
 *   and re-encoding would instead project twice and, re-encoded as one
 *   contribution of N, restore only 1/N of the mean.
 *
 * Pipelining: each shard is cut into C chunks of about ZIPCCL_CHUNK_BYTES
 * input bytes. Part (j, c), shard j's chunk c, is encoded with the state in
 * slot j C + c and rng stream j C + c; chunks are encoded chunk by chunk (own
 * shard last in each), and the owner adds, re-encodes and sends chunk c as
 * soon as its N contributions are in, so all three stages overlap. The sum of
 * part (j, c) feeds slot j C + c on every rank (GradiVeQ learns the part's
 * basis from it; all ranks hold the same sum, so the same basis); the owner's
 * re-encode states are slots N C + c.
 */
#include "collectives/coll.h"

#include "common/compiler.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

/* rng streams of the owner's re-encodes: above every contribution's stream (a part index) */
#define REENCODE_STREAM 0x80000000u

typedef struct sc_part {
    size_t off, len;      /* elements of the vector */
    size_t cap;           /* zc_codec_bound(len) */
    size_t out_pos;       /* own contribution's payload in out */
    size_t out_len;       /* its length, once encoded */
    size_t fin_pos;       /* the owner's final payload in fin */
    size_t fin_len;       /* own shard's parts: once made */
    zc_codec_state_t *cs; /* slot j C + c: contributions, reduce, the learned state */
    int decoded;
} sc_part_t;

typedef struct scatter {
    int n, rank;
    int reduce_mode;
    size_t nchunks;     /* C chunks per shard */
    size_t nparts;      /* N C */
    sc_part_t *parts;   /* part (j, c) at j C + c */
    size_t in_stride;   /* bytes of one rank's contributions to own shard: own parts' caps */
    uint8_t *out;       /* own contributions, part p's at parts[p].out_pos */
    uint8_t *in;        /* contributions to own shard: rank j's chunk c at j in_stride + in_pos */
    uint8_t *fin;       /* final payloads, part p's at parts[p].fin_pos */
    size_t *in_pos;     /* [c]: chunk c's offset in a rank's contributions */
    zc_ucx_req_t *reqs; /* 4 N C: the four arrays below, in order (unused slots ZC_OK) */
    zc_ucx_req_t *recv_in;       /* [j C + c]: rank j's contribution to own chunk c */
    zc_ucx_req_t *recv_fin;      /* [p]: the owner's final payload of part p */
    zc_ucx_req_t *send_out;      /* [p]: own contribution of part p to its owner */
    zc_ucx_req_t *send_fin;      /* [j C + c]: own chunk c's final payload to rank j */
    zc_codec_state_t **owner_cs; /* [c]: the owner's re-encode (decode mode, stateful codecs) */
    float *sum;                  /* decode mode: f32 sum of one chunk of own shard */
    float *scratch;              /* f16/bf16 results: one part's f32 values */
    size_t encoded;              /* contributions encoded, in encode order */
    size_t own_chunk;            /* the chunk of own shard being summed */
    int added;                   /* its contributions added, in rank order */
    size_t decoded;              /* final payloads decoded into the result */
} scatter_t;

static sc_part_t *part(scatter_t *sc, size_t j, size_t c)
{
    return &sc->parts[j * sc->nchunks + c];
}

static void scatter_fini(zc_coll_op_t *op)
{
    scatter_t *sc = op->priv;

    if (!sc)
        return;
    if (op->status < 0 && sc->reqs)
        zc_coll_abandon(op, sc->reqs, 4 * sc->nparts);
    /* UCX may still touch these after a failure: freed with the communicator then */
    zc_coll_defer_free(op, sc->out);
    zc_coll_defer_free(op, sc->in);
    zc_coll_defer_free(op, sc->fin);
    free(sc->reqs);
    free(sc->parts);
    free(sc->in_pos);
    free(sc->owner_cs);
    zc_coll_defer_free(op, sc->sum);
    zc_coll_defer_free(op, sc->scratch);
    free(sc);
    op->priv = NULL;
}

static zc_status_t state_slot(zc_coll_op_t *op, size_t slot, size_t len, const char *what, size_t j,
                              size_t c, zc_codec_state_t **cs_p)
{
    zc_status_t status =
        zc_state_slot(op->comm->store, op->tstate, slot, &op->path.params, len, cs_p);
    if (status < 0)
        ZC_ERROR("scatter: no %s state for %s %zu chunk %zu (%zu values): %s",
                 zc_codec_name(op->path.params.codec), what, j, c, len, zc_status_string(status));
    return status;
}

/* Adds @p add to the byte size *@p total; ZC_ERR_NO_MEMORY on overflow. */
static zc_status_t grow(size_t *total, size_t add)
{
    if (*total > SIZE_MAX - add)
        return ZC_ERR_NO_MEMORY;
    *total += add;
    return ZC_OK;
}

/* Shards, chunks, codec states, buffers; no transfer yet. */
static zc_status_t plan(zc_coll_op_t *op, scatter_t *sc)
{
    const zc_codec_params_t *params = &op->path.params;
    unsigned caps = zc_codec_caps(params->codec);
    size_t n = (size_t)sc->n, granule = zc_coll_granule(params);
    size_t esize = zc_dtype_bytes(op->dtype);
    size_t chunk_elems = ZC_MAX((size_t)op->comm->cfg.chunk_bytes / esize, 1);

    sc->reduce_mode = (caps & ZC_CODEC_CAP_LINEAR) && !(caps & ZC_CODEC_CAP_STATELESS);
    /* C from the longest shard, at most a granule per chunk of the shortest */
    size_t nchunks = zc_coll_nchunks(ZC_DIV_UP(op->count, n), op->count / n, chunk_elems, granule);
    sc->nchunks = nchunks;
    sc->nparts = n * nchunks;

    sc->parts = calloc(sc->nparts, sizeof(*sc->parts));
    sc->reqs = calloc(4 * sc->nparts, sizeof(*sc->reqs)); /* zeroed: ZC_OK */
    sc->in_pos = calloc(nchunks, sizeof(*sc->in_pos));
    sc->owner_cs = calloc(nchunks, sizeof(*sc->owner_cs));
    if (!sc->parts || !sc->reqs || !sc->in_pos || !sc->owner_cs)
        return ZC_ERR_NO_MEMORY;
    sc->recv_in = sc->reqs;
    sc->recv_fin = sc->reqs + sc->nparts;
    sc->send_out = sc->reqs + 2 * sc->nparts;
    sc->send_fin = sc->reqs + 3 * sc->nparts;

    size_t max_len = 0;
    for (size_t p = sc->nparts; p-- > 0;) { /* the highest slot first: one allocation of slots */
        size_t j = p / nchunks, c = p % nchunks, shard_off, shard_len;
        sc_part_t *pt = &sc->parts[p];
        zc_coll_split(op->count, n, granule, j, &shard_off, &shard_len);
        zc_coll_split(shard_len, nchunks, granule, c, &pt->off, &pt->len);
        pt->off += shard_off;
        pt->cap = zc_codec_bound(params, pt->len);
        if (pt->cap == 0) {
            ZC_ERROR("scatter: invalid %s parameters", zc_codec_name(params->codec));
            return ZC_ERR_INVALID_CONFIG;
        }
        max_len = ZC_MAX(max_len, pt->len);
        if (op->tstate)
            ZC_CHECK(state_slot(op, p, pt->len, "shard", j, c, &pt->cs));
    }

    size_t out_bytes = 0, own_max = 0;
    for (size_t p = 0; p < sc->nparts; p++) {
        sc->parts[p].out_pos = sc->parts[p].fin_pos = out_bytes;
        ZC_CHECK(grow(&out_bytes, sc->parts[p].cap));
    }
    for (size_t c = 0; c < nchunks; c++) {
        const sc_part_t *own = part(sc, (size_t)sc->rank, c);
        sc->in_pos[c] = sc->in_stride;
        ZC_CHECK(grow(&sc->in_stride, own->cap));
        own_max = ZC_MAX(own_max, own->len);
    }
    if (sc->in_stride > SIZE_MAX / n)
        return ZC_ERR_NO_MEMORY;
    sc->out = zc_coll_alloc(op, out_bytes);
    sc->in = zc_coll_alloc(op, sc->in_stride * n);
    sc->fin = zc_coll_alloc(op, out_bytes);
    if (!sc->out || !sc->in || !sc->fin)
        return ZC_ERR_NO_MEMORY;
    if (!sc->reduce_mode && n > 1) {
        sc->sum = zc_coll_alloc(op, ZC_MAX(own_max, 1) * sizeof(float));
        if (!sc->sum)
            return ZC_ERR_NO_MEMORY;
        for (size_t c = 0; c < nchunks && op->tstate; c++)
            ZC_CHECK(state_slot(op, sc->nparts + c, part(sc, (size_t)sc->rank, c)->len,
                                "the re-encode of shard", (size_t)sc->rank, c, &sc->owner_cs[c]));
    }
    if (op->dtype != ZC_DTYPE_F32) {
        sc->scratch = zc_coll_alloc(op, ZC_MAX(max_len, 1) * sizeof(float));
        if (!sc->scratch)
            return ZC_ERR_NO_MEMORY;
    }
    return ZC_OK;
}

static zc_status_t scatter_start(zc_coll_op_t *op)
{
    if (op->count == 0)
        return ZC_OK; /* nothing to move; progress() finds no priv and completes */
    scatter_t *sc = calloc(1, sizeof(*sc));
    if (!sc)
        return ZC_ERR_NO_MEMORY;
    op->priv = sc;
    sc->n = op->comm->size;
    sc->rank = op->comm->rank;
    ZC_CHECK(plan(op, sc)); /* fini frees what plan() allocated */

    size_t nc = sc->nchunks;
    for (size_t c = 0; c < nc; c++) {
        const sc_part_t *own = part(sc, (size_t)sc->rank, c);
        uint64_t tag_in = zc_coll_tag(op, 0, (unsigned)c),
                 tag_fin = zc_coll_tag(op, 1, (unsigned)c);
        for (int i = 1; i < sc->n; i++) {
            size_t peer = (size_t)((sc->rank + sc->n - i) % sc->n);
            const sc_part_t *theirs = part(sc, peer, c);
            ZC_CHECK(zc_ucx_irecv(op->comm->ucx, (int)peer, tag_in,
                                  sc->in + peer * sc->in_stride + sc->in_pos[c], own->cap,
                                  &sc->recv_in[peer * nc + c]));
            ZC_CHECK(zc_ucx_irecv(op->comm->ucx, (int)peer, tag_fin, sc->fin + theirs->fin_pos,
                                  theirs->cap, &sc->recv_fin[peer * nc + c]));
        }
    }
    return ZC_OK;
}

/*
 * Encodes the next part of own vector and sends it to its owner. Order: chunk
 * by chunk, and in each the shards of ranks r + 1, r + 2, ..., own shard last
 * (ranks start on different owners; own needs no transfer).
 */
static zc_status_t encode_next(zc_coll_op_t *op, scatter_t *sc)
{
    size_t c = sc->encoded / (size_t)sc->n, i = sc->encoded % (size_t)sc->n;
    size_t j = (size_t)(sc->rank + 1 + (int)i) % (size_t)sc->n, p = j * sc->nchunks + c;
    sc_part_t *pt = &sc->parts[p];
    const uint8_t *src = (const uint8_t *)op->sendbuf + pt->off * zc_dtype_bytes(op->dtype);
    uint8_t *payload = sc->out + pt->out_pos;
    zc_codec_rng_t rng = op->rng;

    rng.stream = (uint32_t)p;
    uint64_t t = zc_time_ns();
    zc_status_t status = zc_codec_encode(&op->path.params, pt->cs, &rng, op->dtype, src, pt->len,
                                         payload, pt->cap, &pt->out_len);
    zc_coll_account(&op->stats.encode_ns, t);
    if (status < 0) {
        ZC_ERROR("scatter: %s encode of shard %zu chunk %zu (%zu values) failed: %s",
                 zc_codec_name(op->path.params.codec), j, c, pt->len, zc_status_string(status));
        return status;
    }
    zc_coll_measure_error(op, pt->cs, payload, pt->out_len, src, pt->len);
    if (j != (size_t)sc->rank) {
        ZC_CHECK(zc_coll_isend(op, (int)j, zc_coll_tag(op, 0, (unsigned)c), payload, pt->out_len,
                               &sc->send_out[p]));
        op->stats.bytes_wire += pt->out_len;
    }
    sc->encoded++;
    return ZC_OK;
}

/*
 * The owner's final payload of chunk own_chunk of its shard (re-encoded in
 * decode mode, the payloads' sum in reduce mode), sent to every rank.
 */
static zc_status_t finish_chunk(zc_coll_op_t *op, scatter_t *sc)
{
    size_t c = sc->own_chunk;
    sc_part_t *own = part(sc, (size_t)sc->rank, c);
    uint8_t *payload = sc->fin + own->fin_pos;

    if (!sc->reduce_mode && sc->n > 1) {
        zc_codec_rng_t rng = op->rng;
        rng.stream = REENCODE_STREAM | (uint32_t)c;
        uint64_t t = zc_time_ns();
        zc_status_t status = zc_codec_encode(&op->path.params, sc->owner_cs[c], &rng, ZC_DTYPE_F32,
                                             sc->sum, own->len, payload, own->cap, &own->fin_len);
        zc_coll_account(&op->stats.encode_ns, t);
        if (status < 0) {
            ZC_ERROR("scatter: %s re-encode of shard %d chunk %zu (%zu values) failed: %s",
                     zc_codec_name(op->path.params.codec), sc->rank, c, own->len,
                     zc_status_string(status));
            return status;
        }
    }
    uint64_t tag = zc_coll_tag(op, 1, (unsigned)c);
    for (int i = 1; i < sc->n; i++) {
        size_t peer = (size_t)((sc->rank + i) % sc->n);
        ZC_CHECK(zc_coll_isend(op, (int)peer, tag, payload, own->fin_len,
                               &sc->send_fin[peer * sc->nchunks + c]));
        op->stats.bytes_wire += own->fin_len;
    }
    sc->added = 0;
    sc->own_chunk++;
    return ZC_OK;
}

/*
 * Adds the next contribution to the chunk of own shard being summed, once it
 * is here; after the last, finishes the chunk. Contributions are added in rank
 * order whatever order they arrive in: the sum (and everything decoded from
 * it) does not depend on the network's timing. Returns 1 when it did work,
 * 0 when the contribution is not here yet, or an error.
 */
static int own_step(zc_coll_op_t *op, scatter_t *sc, zc_status_t *status_p)
{
    size_t c = sc->own_chunk, nc = sc->nchunks;
    int j = sc->added;
    sc_part_t *own = part(sc, (size_t)sc->rank, c);
    const uint8_t *payload;
    size_t len;
    zc_status_t status;

    if (c >= nc)
        return 0;
    if (j == sc->n) {
        *status_p = finish_chunk(op, sc);
        return *status_p < 0 ? -1 : 1;
    }
    if (j == sc->rank) {
        /* own contribution of chunk c: the last part encoded for chunk c */
        if (sc->encoded < (c + 1) * (size_t)sc->n)
            return 0;
        payload = sc->out + own->out_pos;
        len = own->out_len;
    } else {
        zc_ucx_req_t *req = &sc->recv_in[(size_t)j * nc + c];
        if (req->status == ZC_INPROGRESS)
            return 0;
        if (req->status < 0) {
            *status_p = zc_coll_blame(op, req->peer, req->status); /* the transport logged it */
            return -1;
        }
        payload = sc->in + (size_t)j * sc->in_stride + sc->in_pos[c];
        len = req->length;
    }

    uint8_t *acc = sc->fin + own->fin_pos;
    uint64_t t = zc_time_ns();
    if (sc->n == 1 || (sc->reduce_mode && j == 0)) {
        /* one rank: its payload is the sum, a second rounding would add error and nothing else */
        memcpy(acc, payload, len);
        own->fin_len = len;
        status = ZC_OK;
    } else if (sc->reduce_mode) {
        status =
            zc_codec_reduce(own->cs, acc, own->fin_len, payload, len, acc, own->cap, &own->fin_len);
    } else {
        if (j == 0)
            memset(sc->sum, 0, own->len * sizeof(float));
        status = zc_codec_decode_add(own->cs, payload, len, sc->sum, own->len);
    }
    zc_coll_account(&op->stats.decode_ns, t);
    if (status < 0) {
        ZC_ERROR("scatter: rank %d's payload of shard %d chunk %zu (%zu bytes, %zu values) does "
                 "not %s: %s",
                 j, sc->rank, c, len, own->len, sc->reduce_mode ? "reduce" : "decode",
                 zc_status_string(status));
        *status_p = zc_coll_blame(op, (int)j, status);
        return -1;
    }
    sc->added++;
    return 1;
}

/*
 * Decodes one final payload that is here, feeds the part's sum to its state
 * and stores it. Parts are disjoint and each is decoded from one payload into
 * zeros, so the order does not change a bit of the result. Returns 1 when it
 * decoded, 0 when none is here, or an error.
 */
static int decode_step(zc_coll_op_t *op, scatter_t *sc, zc_status_t *status_p)
{
    size_t nc = sc->nchunks, p;
    sc_part_t *pt = NULL;
    size_t len = 0;

    for (p = 0; p < sc->nparts && !pt; p++) {
        size_t j = p / nc, c = p % nc;
        if (sc->parts[p].decoded)
            continue;
        if (j == (size_t)sc->rank) {
            if (c < sc->own_chunk) {
                pt = &sc->parts[p];
                len = pt->fin_len;
            }
        } else if (sc->recv_fin[p].status == ZC_OK) {
            pt = &sc->parts[p];
            len = sc->recv_fin[p].length;
        } else if (sc->recv_fin[p].status < 0) {
            /* the transport logged it */
            *status_p = zc_coll_blame(op, sc->recv_fin[p].peer, sc->recv_fin[p].status);
            return -1;
        }
    }
    if (!pt)
        return 0;
    p--;
    /*
     * Decoding state: GradiVeQ's basis is slot p's on every rank. Decode-mode
     * codecs decode without one (their state is an error-feedback residual).
     */
    zc_codec_state_t *dec_cs = sc->reduce_mode ? pt->cs : NULL;
    /* recvbuf holds f32 sums in place: own part p was encoded before its owner could finish it */
    float *acc = sc->scratch ? sc->scratch : (float *)op->recvbuf + pt->off;
    uint64_t t = zc_time_ns();
    memset(acc, 0, pt->len * sizeof(float));
    zc_status_t status = zc_codec_decode_add(dec_cs, sc->fin + pt->fin_pos, len, acc, pt->len);
    zc_coll_account(&op->stats.decode_ns, t);
    if (status < 0) {
        ZC_ERROR("scatter: owner %zu's final payload of chunk %zu (%zu bytes, %zu values) does "
                 "not decode: %s",
                 p / nc, p % nc, len, pt->len, zc_status_string(status));
        *status_p = zc_coll_blame(op, (int)(p / nc), status);
        return -1;
    }
    status = zc_coll_part_done(op, pt->cs, acc, pt->len, pt->off);
    if (status < 0) {
        *status_p = status;
        return -1;
    }
    pt->decoded = 1;
    sc->decoded++;
    return 1;
}

/*
 * One step of work per call, the one others wait for first: the owner's sum of
 * its shard (every rank waits for it), an encode (the owners wait for it), a
 * decode (only this rank waits for it).
 */
static zc_status_t scatter_progress(zc_coll_op_t *op)
{
    scatter_t *sc = op->priv;
    zc_status_t status = ZC_OK;
    int did;

    if (!sc)
        return ZC_OK; /* count 0 */
    if ((did = own_step(op, sc, &status)) != 0)
        return did < 0 ? status : ZC_INPROGRESS;
    if (sc->encoded < sc->nparts) {
        ZC_CHECK(encode_next(op, sc));
        return ZC_INPROGRESS;
    }
    if ((did = decode_step(op, sc, &status)) != 0)
        return did < 0 ? status : ZC_INPROGRESS;
    if (sc->decoded < sc->nparts) {
        /* waiting for contributions or final payloads: the deadline */
        status = zc_coll_test(op, sc->reqs, 2 * sc->nparts, "scatter (receiving payloads)");
        return status == ZC_OK ? ZC_INPROGRESS : status;
    }
    return zc_coll_test(op, sc->reqs, 4 * sc->nparts, "scatter (sending payloads)");
}

const zc_algo_t zc_algo_scatter = {
    .start = scatter_start,
    .progress = scatter_progress,
    .fini = scatter_fini,
};
