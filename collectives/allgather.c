/*
 * Compressed all-gather (zc_algo_allgather): every rank encodes its vector,
 * sends the payload to every other rank, receives everyone's and adds all N
 * decoded contributions in rank order into an f32 accumulator. Any codec
 * works, stateful or not, linear or not. Each rank sends and receives N - 1
 * payloads: the cheapest exchange for a few ranks, and the only one that
 * decodes every contribution exactly once (no second rounding).
 *
 * Pipelining: the vector is cut into chunks of about ZIPCCL_CHUNK_BYTES input
 * bytes, each with its own payload, codec-state slot (slot c) and rng stream
 * (stream c, so that chunks draw independent roundings). Every progress() call
 * does at most one encode or one decode and returns, so the driver progresses
 * UCX in between: chunk c travels while chunk c + 1 is encoded, and arrived
 * chunks are decoded while later ones travel. docs/collectives.md,
 * "Compressed all-gather".
 */
#include "collectives/coll.h"

#include "common/compiler.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

typedef struct ag_chunk {
    size_t off, len;      /* elements of the vector */
    size_t cap;           /* zc_codec_bound(len): a payload never exceeds it */
    size_t pos;           /* byte offset of the chunk's payload in a rank's payload area */
    size_t own_len;       /* this rank's payload length, once encoded */
    zc_codec_state_t *cs; /* slot c, NULL for stateless codecs */
} ag_chunk_t;

typedef struct allgather {
    int n, rank;
    size_t nchunks;
    ag_chunk_t *chunks;
    size_t stride;       /* bytes of one rank's payload area: the sum of the chunks' caps */
    uint8_t *payloads;   /* rank j's payload of chunk c at j * stride + chunks[c].pos */
    zc_ucx_req_t *recvs; /* [j * nchunks + c]: rank j's chunk c (own slots stay ZC_OK) */
    zc_ucx_req_t *sends; /* [j * nchunks + c]: own chunk c to rank j (own slots stay ZC_OK) */
    float *scratch;      /* f16/bf16 results: one chunk's f32 sum; NULL for f32 (recvbuf) */
    size_t encoded;      /* chunks encoded and posted */
    size_t dec_chunk;    /* the chunk being decoded */
    int dec_src;         /* the next rank whose payload of dec_chunk is added */
} allgather_t;

static void allgather_fini(zc_coll_op_t *op)
{
    allgather_t *ag = op->priv;

    if (!ag)
        return;
    size_t nreq = (size_t)ag->n * ag->nchunks;
    if (op->status < 0) {
        if (ag->recvs)
            zc_coll_abandon(op, ag->recvs, nreq);
        if (ag->sends)
            zc_coll_abandon(op, ag->sends, nreq);
    }
    zc_coll_defer_free(op, ag->payloads); /* freed now unless UCX may still touch it */
    free(ag->recvs);
    free(ag->sends);
    free(ag->chunks);
    zc_coll_defer_free(op, ag->scratch);
    free(ag);
    op->priv = NULL;
}

/* Chunks, their codec states and buffer positions; no transfer yet. */
static zc_status_t plan(zc_coll_op_t *op, allgather_t *ag)
{
    const zc_codec_params_t *params = &op->path.params;
    size_t esize = zc_dtype_bytes(op->dtype);
    size_t chunk_elems = ZC_MAX((size_t)op->comm->cfg.chunk_bytes / esize, 1);
    size_t granule = zc_coll_granule(params);
    size_t nchunks = zc_coll_nchunks(op->count, op->count, chunk_elems, granule);

    ag->nchunks = nchunks;
    ag->chunks = calloc(nchunks, sizeof(*ag->chunks));
    if (!ag->chunks)
        return ZC_ERR_NO_MEMORY;

    size_t max_len = 0;
    for (size_t c = nchunks; c-- > 0;) { /* the highest slot first: one allocation of slots */
        ag_chunk_t *ch = &ag->chunks[c];
        zc_coll_split(op->count, nchunks, granule, c, &ch->off, &ch->len);
        ch->cap = zc_codec_bound(params, ch->len);
        if (ch->cap == 0) {
            ZC_ERROR("allgather: invalid %s parameters", zc_codec_name(params->codec));
            return ZC_ERR_INVALID_CONFIG;
        }
        max_len = ZC_MAX(max_len, ch->len);
        if (op->tstate) {
            zc_status_t status =
                zc_state_slot(op->comm->store, op->tstate, c, params, ch->len, &ch->cs);
            if (status < 0) {
                ZC_ERROR("allgather: no %s state for chunk %zu (%zu values): %s",
                         zc_codec_name(params->codec), c, ch->len, zc_status_string(status));
                return status;
            }
        }
    }
    for (size_t c = 0; c < nchunks; c++) {
        if (ag->stride > SIZE_MAX - ag->chunks[c].cap)
            return ZC_ERR_NO_MEMORY;
        ag->chunks[c].pos = ag->stride;
        ag->stride += ag->chunks[c].cap;
    }
    if (ag->stride > SIZE_MAX / (size_t)ag->n)
        return ZC_ERR_NO_MEMORY;
    ag->payloads = zc_coll_alloc(op, ag->stride * (size_t)ag->n);
    ag->recvs = calloc((size_t)ag->n * nchunks, sizeof(*ag->recvs)); /* zeroed: ZC_OK */
    ag->sends = calloc((size_t)ag->n * nchunks, sizeof(*ag->sends));
    if (!ag->payloads || !ag->recvs || !ag->sends)
        return ZC_ERR_NO_MEMORY;
    if (op->dtype != ZC_DTYPE_F32) {
        ag->scratch = zc_coll_alloc(op, max_len * sizeof(float));
        if (!ag->scratch)
            return ZC_ERR_NO_MEMORY;
    }
    return ZC_OK;
}

static zc_status_t allgather_start(zc_coll_op_t *op)
{
    zc_status_t status;

    if (op->count == 0)
        return ZC_OK; /* nothing to move; progress() finds no priv and completes */
    allgather_t *ag = calloc(1, sizeof(*ag));
    if (!ag)
        return ZC_ERR_NO_MEMORY;
    op->priv = ag;
    ag->n = op->comm->size;
    ag->rank = op->comm->rank;
    ZC_CHECK(plan(op, ag)); /* fini frees what plan() allocated */

    /* every receive up front: payloads land wherever they arrive first */
    for (size_t c = 0; c < ag->nchunks; c++) {
        const ag_chunk_t *ch = &ag->chunks[c];
        uint64_t tag = zc_coll_tag(op, 0, (unsigned)c);
        for (int i = 1; i < ag->n; i++) {
            int peer = (ag->rank + ag->n - i) % ag->n;
            uint8_t *buf = ag->payloads + (size_t)peer * ag->stride + ch->pos;
            status = zc_ucx_irecv(op->comm->ucx, peer, tag, buf, ch->cap,
                                  &ag->recvs[(size_t)peer * ag->nchunks + c]);
            if (status < 0)
                return status;
        }
    }
    return ZC_OK;
}

/* Encodes the next chunk and sends its payload to every other rank. */
static zc_status_t encode_next(zc_coll_op_t *op, allgather_t *ag)
{
    size_t c = ag->encoded;
    ag_chunk_t *ch = &ag->chunks[c];
    const uint8_t *src = (const uint8_t *)op->sendbuf + ch->off * zc_dtype_bytes(op->dtype);
    uint8_t *payload = ag->payloads + (size_t)ag->rank * ag->stride + ch->pos;
    zc_codec_rng_t rng = op->rng;

    rng.stream = (uint32_t)c;
    uint64_t t = zc_time_ns();
    zc_status_t status = zc_codec_encode(&op->path.params, ch->cs, &rng, op->dtype, src, ch->len,
                                         payload, ch->cap, &ch->own_len);
    zc_coll_account(&op->stats.encode_ns, t);
    if (status < 0) {
        ZC_ERROR("allgather: %s encode of chunk %zu (%zu values) failed: %s",
                 zc_codec_name(op->path.params.codec), c, ch->len, zc_status_string(status));
        return status;
    }
    zc_coll_measure_error(op, ch->cs, payload, ch->own_len, src, ch->len);

    uint64_t tag = zc_coll_tag(op, 0, (unsigned)c);
    for (int i = 1; i < ag->n; i++) {
        int peer = (ag->rank + i) % ag->n; /* ranks start on different peers */
        ZC_CHECK(zc_coll_isend(op, peer, tag, payload, ch->own_len,
                               &ag->sends[(size_t)peer * ag->nchunks + c]));
        op->stats.bytes_wire += ch->own_len;
    }
    ag->encoded++;
    return ZC_OK;
}

/*
 * Adds the next contribution (chunk dec_chunk, rank dec_src) once it is here.
 * Ranks are added in rank order, whatever order they arrived in, so that every
 * rank computes the same f32 sums bit for bit. After the last rank the chunk's
 * sum feeds its codec state and is stored in recvbuf.
 */
static zc_status_t decode_next(zc_coll_op_t *op, allgather_t *ag)
{
    size_t c = ag->dec_chunk;
    ag_chunk_t *ch = &ag->chunks[c];
    int j = ag->dec_src;
    const uint8_t *payload = ag->payloads + (size_t)j * ag->stride + ch->pos;
    size_t len;
    zc_status_t status;

    if (j == ag->rank) {
        if (c >= ag->encoded)
            return ZC_INPROGRESS;
        len = ch->own_len;
    } else {
        zc_ucx_req_t *req = &ag->recvs[(size_t)j * ag->nchunks + c];
        status = zc_coll_test(op, req, 1, "allgather (receiving payloads)");
        if (status != ZC_OK)
            return status;
        len = req->length;
    }

    /* recvbuf holds f32 sums in place: chunk c of sendbuf was encoded already (c < encoded) */
    float *acc = ag->scratch ? ag->scratch : (float *)op->recvbuf + ch->off;
    uint64_t t = zc_time_ns();
    if (j == 0)
        memset(acc, 0, ch->len * sizeof(float));
    status = zc_codec_decode_add(ch->cs, payload, len, acc, ch->len);
    zc_coll_account(&op->stats.decode_ns, t);
    if (status < 0) {
        ZC_ERROR("allgather: rank %d's payload of chunk %zu (%zu bytes, %zu values) does not "
                 "decode: %s",
                 j, c, len, ch->len, zc_status_string(status));
        return zc_coll_blame(op, j, status);
    }
    if (++ag->dec_src < ag->n)
        return ZC_INPROGRESS;

    status = zc_coll_part_done(op, ch->cs, acc, ch->len, ch->off);
    if (status < 0)
        return status;
    ag->dec_src = 0;
    ag->dec_chunk++;
    return ZC_INPROGRESS;
}

static zc_status_t allgather_progress(zc_coll_op_t *op)
{
    allgather_t *ag = op->priv;

    if (!ag)
        return ZC_OK; /* count 0 */
    /* own chunks first: every other rank waits for them */
    if (ag->encoded < ag->nchunks) {
        ZC_CHECK(encode_next(op, ag));
        return ZC_INPROGRESS;
    }
    if (ag->dec_chunk < ag->nchunks)
        return decode_next(op, ag);
    return zc_coll_test(op, ag->sends, (size_t)ag->n * ag->nchunks, "allgather (sending payloads)");
}

const zc_algo_t zc_algo_allgather = {
    .start = allgather_start,
    .progress = allgather_progress,
    .fini = allgather_fini,
};
