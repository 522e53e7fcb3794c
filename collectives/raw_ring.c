/*
 * The raw ring all-reduce: reduce-scatter then all-gather over N segments,
 * each segment cut into chunks that move independently (pipelined), for every
 * dtype and operation.
 *
 * Steps. Rank r sends to r + 1 and receives from r - 1. At step s (0 .. 2N-3)
 * it sends segment (r - s) mod N and receives segment (r - s - 1) mod N; the
 * same formula serves both phases. Steps 0 .. N-2 are the reduce-scatter: the
 * received values are reduced into recvbuf (out of place from sendbuf, so
 * sendbuf is never copied), and after step N-2 rank r holds the full reduction
 * of segment r + 1. Steps N-1 .. 2N-3 are the all-gather: received values land
 * in recvbuf directly. Segment k is thus reduced along one chain k, k+1, ...,
 * k-1 by one rank each, in a fixed order, and then copied: every rank gets the
 * same bits. ZC_OP_AVG divides the owned segment before the all-gather, for
 * the same reason.
 *
 * Chunks. Every segment is cut into the same number C of chunks (the longest
 * segment divided into pieces of about ZIPCCL_CHUNK_BYTES); chunk c of every
 * segment travels the 2(N-1) steps on its own: it is sent at step s as soon as
 * its step s-1 arrived and was reduced, whatever the other chunks do. So a
 * chunk is on the wire while the previous one is reduced, and a slow step of
 * one chunk does not stall the others.
 *
 * Per chunk at most one send, one reduce-scatter receive and one all-gather
 * receive are in flight. A reduce-scatter receive goes to a staging slot the
 * chunk holds from its admission to its last reduction; RING_SLOTS slots bound
 * the staging memory, and chunks are admitted in order as slots free up. Since
 * every rank admits in the same order, the lowest unfinished chunk is always
 * admitted everywhere and can always advance: no deadlock. All-gather
 * receives need no slot and are posted as early as allowed: the region a chunk
 * receives at step N-1+j is the one it sent at step j, so the receive waits for
 * that send to complete (UCX may read a send buffer until then).
 *
 * Tags: (step, chunk) numbered step * C + chunk and split over zc_coll_tag's
 * step and chunk fields, so C may exceed 2^16 when N is small; C is capped so
 * that the number stays below ZC_COLL_MAX_STEP * 2^16. Chunks of length 0 (an
 * empty segment when count < N) send nothing: both ends know the length, and
 * every receive is checked against it (check_arrived).
 */
#include "collectives/coll.h"
#include "collectives/reduce.h"
#include "common/compiler.h"
#include "common/log.h"

#include <stdlib.h>
#include <string.h>

/*
 * Staging slots: chunks in the reduce-scatter at once. With receives posted
 * ahead, a few chunks in flight keep the ring busy while one is reduced; more
 * only add staging memory (RING_SLOTS * ZIPCCL_CHUNK_BYTES). bench/ring_mpi
 * on 4 ranks (64 MiB) found 1 to 8 slots, with chunks of 256 KiB to 4 MiB,
 * within the run-to-run noise of each other.
 */
#define RING_SLOTS 4

/* Slots start on a page: CMA and the kernel's socket copies work page by page. */
#define RING_ALIGN 4096

/* The requests of one chunk, in the ring's request array. */
enum { REQ_SEND, REQ_RS, REQ_AG, REQS_PER_CHUNK };

typedef struct ring_chunk {
    unsigned send_next; /* next step to send: 0 .. nsteps */
    unsigned send_done; /* sends completed; they complete in step order */
    unsigned rs_next;   /* next reduce-scatter step to receive: 0 .. N-1 */
    unsigned ag_next;   /* next all-gather step to receive: N-1 .. nsteps */
    unsigned char in_flight[REQS_PER_CHUNK];
    int slot; /* staging slot while in the reduce-scatter, else -1 */
    int finished;
} ring_chunk_t;

typedef struct ring {
    int n, rank, left, right;
    unsigned nsteps; /* 2 (N - 1) */
    size_t esize;
    size_t nchunks;    /* per segment: C */
    size_t slot_bytes; /* the longest chunk */
    char *staging;     /* nslots * slot_bytes */
    int free_slots[RING_SLOTS];
    unsigned nslots, nfree;
    size_t admitted; /* chunks 0 .. admitted-1 have started */
    size_t lo;       /* chunks below lo are finished */
    size_t finished;
    ring_chunk_t *chunks;
    zc_ucx_req_t *reqs; /* REQS_PER_CHUNK per chunk */
} ring_t;

/* Element range [*off_p, *off_p + *len_p) of chunk @p c of segment @p seg. */
static void chunk_range(const zc_coll_op_t *op, const ring_t *ring, int seg, size_t c,
                        size_t *off_p, size_t *len_p)
{
    size_t soff, slen, coff;
    zc_coll_segment(op->count, (size_t)ring->n, (size_t)seg, &soff, &slen);
    zc_coll_segment(slen, ring->nchunks, c, &coff, len_p);
    *off_p = soff + coff;
}

static int send_seg(const ring_t *ring, unsigned step)
{
    return (int)(((unsigned)ring->rank + (unsigned)ring->n - step % (unsigned)ring->n) %
                 (unsigned)ring->n);
}

static int recv_seg(const ring_t *ring, unsigned step)
{
    return send_seg(ring, step + 1);
}

static uint64_t ring_tag(const zc_coll_op_t *op, const ring_t *ring, unsigned step, size_t c)
{
    uint64_t id = (uint64_t)step * ring->nchunks + c;
    return zc_coll_tag(op, (unsigned)(id >> ZC_COLL_CHUNK_BITS),
                       (unsigned)(id & (ZC_COLL_MAX_CHUNKS - 1)));
}

static zc_ucx_req_t *chunk_req(ring_t *ring, size_t c, int which)
{
    return &ring->reqs[c * REQS_PER_CHUNK + (size_t)which];
}

/* Sends step @p step of chunk @p c. A chunk of length 0 completes at once. */
static zc_status_t post_send(zc_coll_op_t *op, ring_t *ring, size_t c, unsigned step)
{
    ring_chunk_t *ch = &ring->chunks[c];
    zc_ucx_req_t *req = chunk_req(ring, c, REQ_SEND);
    size_t off, len;

    chunk_range(op, ring, send_seg(ring, step), c, &off, &len);
    /* step 0 sends the own input (sendbuf is recvbuf in place); later steps reduced values */
    const char *base = step == 0 ? (const char *)op->sendbuf : (const char *)op->recvbuf;
    if (len == 0) {
        req->status = ZC_OK;
    } else {
        ZC_CHECK(zc_coll_isend(op, ring->right, ring_tag(op, ring, step, c),
                               base + off * ring->esize, len * ring->esize, req));
        op->stats.bytes_wire += len * ring->esize;
    }
    ch->in_flight[REQ_SEND] = 1;
    ch->send_next = step + 1;
    return ZC_OK;
}

/* Receives step @p step of chunk @p c: into its slot (reduce-scatter) or recvbuf (all-gather). */
static zc_status_t post_recv(zc_coll_op_t *op, ring_t *ring, size_t c, unsigned step)
{
    ring_chunk_t *ch = &ring->chunks[c];
    const int which = step < ring->nsteps / 2 ? REQ_RS : REQ_AG;
    zc_ucx_req_t *req = chunk_req(ring, c, which);
    size_t off, len;

    chunk_range(op, ring, recv_seg(ring, step), c, &off, &len);
    if (len == 0) {
        req->status = ZC_OK;
    } else {
        char *dst = which == REQ_RS ? ring->staging + (size_t)ch->slot * ring->slot_bytes
                                    : (char *)op->recvbuf + off * ring->esize;
        ZC_CHECK(zc_ucx_irecv(op->comm->ucx, ring->left, ring_tag(op, ring, step, c), dst,
                              len * ring->esize, req));
    }
    ch->in_flight[which] = 1;
    return ZC_OK;
}

/*
 * Step @p step of chunk @p c arrived: it must be as long as posted. UCX fails
 * a longer message, but completes a shorter one, which would leave stale
 * values in the result on every rank.
 */
static zc_status_t check_arrived(zc_coll_op_t *op, ring_t *ring, size_t c, unsigned step,
                                 const char *what)
{
    const int which = step < ring->nsteps / 2 ? REQ_RS : REQ_AG;
    size_t off, len;

    chunk_range(op, ring, recv_seg(ring, step), c, &off, &len);
    if (len == 0)
        return ZC_OK; /* nothing was posted: both ends know */
    return zc_coll_check_length(op, chunk_req(ring, c, which), len * ring->esize, what);
}

/* Reduce-scatter step @p step of chunk @p c arrived: reduce it into recvbuf. */
static void reduce_arrived(zc_coll_op_t *op, ring_t *ring, size_t c, unsigned step)
{
    ring_chunk_t *ch = &ring->chunks[c];
    size_t off, len;
    uint64_t t = zc_time_ns();

    chunk_range(op, ring, recv_seg(ring, step), c, &off, &len);
    char *out = (char *)op->recvbuf + off * ring->esize;
    const char *own = (const char *)op->sendbuf + off * ring->esize;
    const char *in = ring->staging + (size_t)ch->slot * ring->slot_bytes;
    zc_reduce_apply3(op->dtype, op->op, out, own, in, len);
    if (step + 2 == (unsigned)ring->n) {
        /* the last reduction: this rank owns the chunk's final value */
        if (op->op == ZC_OP_AVG)
            zc_reduce_avg(op->dtype, out, len, ring->n);
        ring->free_slots[ring->nfree++] = ch->slot;
        ch->slot = -1;
    }
    zc_coll_account(&op->stats.decode_ns, t);
}

/*
 * Advances chunk @p c as far as its transfers allow; sets *progressed when
 * anything changed. Errors are the transport's (already logged).
 */
static zc_status_t chunk_advance(zc_coll_op_t *op, ring_t *ring, size_t c, int *progressed)
{
    ring_chunk_t *ch = &ring->chunks[c];
    const unsigned rs_steps = ring->nsteps / 2;
    zc_status_t st;
    int moved;

    do {
        moved = 0;
        if (ch->in_flight[REQ_SEND]) {
            st = zc_coll_test(op, chunk_req(ring, c, REQ_SEND), 1, "ring send");
            if (st < 0)
                return st;
            if (st == ZC_OK) {
                ch->in_flight[REQ_SEND] = 0;
                ch->send_done++;
                moved = 1;
            }
        }
        if (ch->in_flight[REQ_RS]) {
            st = zc_coll_test(op, chunk_req(ring, c, REQ_RS), 1, "ring reduce-scatter");
            if (st < 0)
                return st;
            if (st == ZC_OK) {
                ch->in_flight[REQ_RS] = 0;
                ZC_CHECK(check_arrived(op, ring, c, ch->rs_next, "ring reduce-scatter"));
                reduce_arrived(op, ring, c, ch->rs_next);
                ch->rs_next++;
                moved = 1;
            }
        }
        if (ch->in_flight[REQ_AG]) {
            st = zc_coll_test(op, chunk_req(ring, c, REQ_AG), 1, "ring all-gather");
            if (st < 0)
                return st;
            if (st == ZC_OK) {
                ch->in_flight[REQ_AG] = 0;
                ZC_CHECK(check_arrived(op, ring, c, ch->ag_next, "ring all-gather"));
                ch->ag_next++;
                moved = 1;
            }
        }

        /* step s goes out once step s-1 is in (reduced, for the reduce-scatter) */
        unsigned s = ch->send_next;
        if (!ch->in_flight[REQ_SEND] && s < ring->nsteps &&
            (s == 0 || (s <= rs_steps ? ch->rs_next >= s : ch->ag_next >= s))) {
            ZC_CHECK(post_send(op, ring, c, s));
            moved = 1;
        }
        if (!ch->in_flight[REQ_RS] && ch->rs_next < rs_steps) {
            ZC_CHECK(post_recv(op, ring, c, ch->rs_next));
            moved = 1;
        }
        /* all-gather step N-1+j overwrites what send step j read */
        if (!ch->in_flight[REQ_AG] && ch->ag_next < ring->nsteps &&
            ch->send_done > ch->ag_next - rs_steps) {
            ZC_CHECK(post_recv(op, ring, c, ch->ag_next));
            moved = 1;
        }
        *progressed |= moved;
    } while (moved);

    if (!ch->finished && ch->send_done == ring->nsteps && ch->ag_next == ring->nsteps) {
        ch->finished = 1;
        ring->finished++;
    }
    return ZC_OK;
}

static void ring_fini(zc_coll_op_t *op)
{
    ring_t *ring = op->priv;

    if (!ring)
        return;
    if (op->status < 0 && ring->reqs) {
        /* transfers may still run: stop them; UCX may still write into staging */
        zc_coll_abandon(op, ring->reqs, ring->nchunks * REQS_PER_CHUNK);
        zc_coll_defer_free(op, ring->staging);
    } else {
        free(ring->staging);
    }
    free(ring->reqs);
    free(ring->chunks);
    free(ring);
    op->priv = NULL;
}

static zc_status_t ring_start(zc_coll_op_t *op)
{
    const int n = op->comm->size;
    const size_t esize = zc_dtype_bytes(op->dtype);
    ring_t *ring;

    if (esize == 0 || (unsigned)op->op >= ZC_OP_COUNT) {
        /* the entry points check the call; reaching here is a bug */
        ZC_ERROR("ring: invalid dtype %d or operation %d", (int)op->dtype, (int)op->op);
        return ZC_ERR_INTERNAL;
    }
    ring = calloc(1, sizeof(*ring));
    if (!ring) {
        ZC_ERROR("ring: out of memory for the state of a %zu-value all-reduce", op->count);
        return ZC_ERR_NO_MEMORY;
    }
    op->priv = ring;
    ring->n = n;
    ring->rank = op->comm->rank;
    ring->left = (ring->rank + n - 1) % n;
    ring->right = (ring->rank + 1) % n;
    ring->nsteps = 2 * (unsigned)(n - 1);
    ring->esize = esize;

    if (op->count == 0)
        return ZC_OK; /* nothing moves; progress reports completion */
    if (n == 1) {
        if (op->recvbuf != op->sendbuf)
            memcpy(op->recvbuf, op->sendbuf, op->count * esize);
        return ZC_OK;
    }

    /* C chunks per segment, each about chunk_bytes; the tag space bounds C */
    const size_t max_seg = ZC_DIV_UP(op->count, (size_t)n);
    const size_t chunk_elems = ZC_MAX((size_t)op->comm->cfg.chunk_bytes / esize, (size_t)1);
    const uint64_t tag_ids = (uint64_t)ZC_COLL_MAX_STEP * ZC_COLL_MAX_CHUNKS;
    size_t nchunks = ZC_DIV_UP(max_seg, chunk_elems);
    nchunks = (size_t)ZC_MIN((uint64_t)nchunks, tag_ids / ring->nsteps);
    ring->nchunks = nchunks;
    ring->slot_bytes = ZC_DIV_UP(max_seg, nchunks) * esize;
    ring->slot_bytes = ZC_DIV_UP(ring->slot_bytes, RING_ALIGN) * RING_ALIGN;
    ring->nslots = (unsigned)ZC_MIN(nchunks, (size_t)RING_SLOTS);

    ring->chunks = calloc(nchunks, sizeof(*ring->chunks));
    ring->reqs = calloc(nchunks * REQS_PER_CHUNK, sizeof(*ring->reqs)); /* all ZC_OK: unused */
    if (!ring->chunks || !ring->reqs ||
        posix_memalign((void **)&ring->staging, RING_ALIGN, ring->nslots * ring->slot_bytes)) {
        ring->staging = NULL;
        ZC_ERROR("ring: out of memory for %zu chunks and %u staging slots of %zu bytes", nchunks,
                 ring->nslots, ring->slot_bytes);
        return ZC_ERR_NO_MEMORY;
    }
    for (unsigned i = 0; i < ring->nslots; i++)
        ring->free_slots[ring->nfree++] = (int)(ring->nslots - 1 - i); /* slot 0 first */
    for (size_t c = 0; c < nchunks; c++) {
        ring->chunks[c].slot = -1;
        ring->chunks[c].ag_next = ring->nsteps / 2;
    }
    return ZC_OK;
}

static zc_status_t ring_progress(zc_coll_op_t *op)
{
    ring_t *ring = op->priv;
    int progressed;

    if (op->count == 0 || ring->n == 1)
        return ZC_OK;
    do {
        progressed = 0;
        /* admit chunks in order while staging slots are free */
        while (ring->admitted < ring->nchunks && ring->nfree > 0) {
            ring->chunks[ring->admitted++].slot = ring->free_slots[--ring->nfree];
            progressed = 1;
        }
        for (size_t c = ring->lo; c < ring->admitted; c++) {
            if (ring->chunks[c].finished)
                continue;
            ZC_CHECK(chunk_advance(op, ring, c, &progressed));
        }
        while (ring->lo < ring->admitted && ring->chunks[ring->lo].finished)
            ring->lo++;
        /* a chunk that finished its reduce-scatter freed a slot: admit and go round again */
    } while (progressed && ring->finished < ring->nchunks && ring->nfree > 0 &&
             ring->admitted < ring->nchunks);
    return ring->finished == ring->nchunks ? ZC_OK : ZC_INPROGRESS;
}

const zc_algo_t zc_algo_raw_ring = {
    .start = ring_start,
    .progress = ring_progress,
    .fini = ring_fini,
};
