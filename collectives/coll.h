/*
 * The collectives layer, internal: the communicator, one all-reduce in
 * flight (zc_coll_op_t), and the interface every algorithm implements.
 *
 * An algorithm is a nonblocking state machine. The driver (op.c) calls
 * start() once, then progress() repeatedly until it returns something other
 * than ZC_INPROGRESS, then fini(). progress() never blocks: it tests its
 * requests (zc_coll_test), computes what their completion allows (reduce a
 * chunk, encode the next, decode), posts the next sends and receives, and
 * returns. The driver progresses the UCX worker between calls. The same code
 * thus serves zc_allreduce (the caller's thread loops), zc_test (one round)
 * and the progress thread.
 *
 * Before start() the driver has exchanged the call header with every rank
 * (count, type, op, codec, algorithm: a mismatch fails every rank before any
 * data moves), fetched the per-tensor codec state and filled op->path.
 *
 * Tags: every message of an op carries zc_coll_tag(op, step, chunk): the op's
 * sequence number, a step and a chunk number, so that no two messages of one
 * (sender, receiver) pair in flight share a tag. The transport adds the sender.
 *
 * Buffers an algorithm has handed to UCX must not be freed while a request on
 * them may be in flight: after a failure, zc_coll_fail abandons the requests
 * and algorithms give their buffers to zc_coll_defer_free (freed when the
 * communicator goes, after UCX has let go of them).
 */
#ifndef ZC_COLLECTIVES_COLL_H
#define ZC_COLLECTIVES_COLL_H

#include "codec/codec.h"
#include "collectives/policy.h"
#include "collectives/state.h"
#include "collectives/stats.h"
#include "common/config.h"
#include "common/timer.h"
#include "transport/bootstrap/bootstrap.h"
#include "transport/ucx/ucx.h"

#include <zipccl/zipccl.h>

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

/* An op is what zc_iallreduce hands out as a zc_request_t. */
typedef struct zc_request zc_coll_op_t;

/* The abort message a failing rank sends every peer (op.c). */
typedef struct zc_coll_abort zc_coll_abort_t;

/* Tag layout (44 bits): seq 12 | step 16 | chunk 16. */
#define ZC_COLL_SEQ_BITS 12
#define ZC_COLL_STEP_BITS 16
#define ZC_COLL_CHUNK_BITS 16
#define ZC_COLL_MAX_STEP ((1u << ZC_COLL_STEP_BITS) - 2) /* the last step value is the header's */
/* Large buffers a communicator keeps between calls (zc_coll_alloc), and the least size kept. */
#define ZC_COLL_BUFS 8
#define ZC_COLL_BUF_MIN ((size_t)1 << 20)
#define ZC_COLL_MAX_CHUNKS (1u << ZC_COLL_CHUNK_BITS)
#define ZC_COLL_HEADER_STEP ((1u << ZC_COLL_STEP_BITS) - 1)
/* Bytes of the call header each rank sends every peer before an op's data (op.c). */
#define ZC_COLL_HEADER_BYTES 56

/* An algorithm's implementation; its id, name and codecs are algo.h's and policy.c's. */
typedef struct zc_algo {
    /* Allocates op->priv and posts the first transfers; no waiting. */
    zc_status_t (*start)(zc_coll_op_t *op);
    /* Advances without blocking: ZC_INPROGRESS, ZC_OK (result in op->recvbuf) or an error. */
    zc_status_t (*progress)(zc_coll_op_t *op);
    /*
     * Frees op->priv. Called once after start() (whatever it returned) when the
     * op is over. With op->status an error, requests may still be in flight:
     * call zc_coll_abandon on them and zc_coll_defer_free on their buffers.
     */
    void (*fini)(zc_coll_op_t *op);
} zc_algo_t;

/* algorithms (one file each, op.c's table indexes them by zc_algo_id_t) */
extern const zc_algo_t zc_algo_raw_ring;        /* raw_ring.c */
extern const zc_algo_t zc_algo_compressed_ring; /* compressed_ring.c */
extern const zc_algo_t zc_algo_allgather;       /* allgather.c */
extern const zc_algo_t zc_algo_scatter;         /* scatter.c */
extern const zc_algo_t zc_algo_powersgd;        /* powersgd.c */

/* One all-reduce from zc_iallreduce to completion. */
struct zc_request {
    zc_comm_t *comm;
    uint64_t seq; /* calls started on comm before this one */

    /* the call */
    const void *sendbuf;
    void *recvbuf; /* may equal sendbuf */
    size_t count;
    zc_dtype_t dtype;
    zc_redop_t op;
    uint64_t key;

    /* what the policy chose (identical on every rank; the header checks it) */
    zc_path_t path;            /* algorithm, codec params (gradiveq.ranks = size) */
    const zc_algo_t *algo;     /* from path.algo */
    zc_tensor_state_t *tstate; /* per-tensor state; NULL for stateless codecs */
    zc_codec_rng_t rng;        /* seed, rank, counter = the tensor's call number */
    void *priv;                /* the algorithm's */
    int control;               /* zc_comm_agree_max's: not in the statistics */

    /* driver */
    int phase; /* op.c's */
    zc_status_t status;
    int culprit; /* the rank a failure is blamed on (zc_coll_blame), or -1 */
    /* the rank this op last found it waits for (zc_coll_test, the hierarchical waits), or -1:
     * what it answers a peer that timed out waiting for it (op.c, abort_alive) */
    int waiting_for;
    uint64_t start_ns;
    uint64_t deadline_ns;   /* pushed back whenever a transfer of the comm completes */
    uint64_t last_poll_ns;  /* the driver's last look, to forgive gaps the caller made */
    zc_ucx_req_t *hdr_reqs; /* header exchange: N-1 receives, then N-1 sends */
    void *hdr_buf;          /* own header, then the N-1 received ones */

    /* measurements, folded into comm->stats at completion */
    zc_op_stats_t stats;

    zc_coll_op_t *next; /* comm's queue */
    int done;           /* set when status is final (under comm->lock with a progress thread) */
};

struct zc_comm {
    zc_config_t cfg;   /* its STRING values point into cfg_strings */
    char *cfg_strings; /* zc_config_own_strings' block */
    zc_bootstrap_t *bs;
    zc_ucx_comm_t *ucx;
    int rank, size;
    uint64_t seq;

    /*
     * Failures (docs/failures.md). An op that fails after data may have moved
     * breaks the communicator on every rank: the rank that fails first sends an
     * abort to every peer, each peer fails its op in flight with it.
     */
    zc_status_t broken;        /* the first failure's status: later calls fail fast with it */
    char broken_why[256];      /* "rank 1 failed allreduce #3: ..." (the first failure, any rank) */
    zc_coll_abort_t *abort_in; /* [size]: one posted receive per peer */
    unsigned char *abort_got;  /* [size]: abort_in[r] arrived and parses */
    uint64_t broken_ns;        /* when the first abort arrived */
    int stall_settled;         /* broken_why names the stalled rank the aborts point at */
    zc_coll_abort_t *abort_out; /* what this rank sent, once it failed */
    zc_ucx_req_t *abort_reqs;   /* [size] receives, then [size] sends */
    int abort_sent;
    uint64_t completed_seen; /* zc_ucx_completed at the last look: op deadlines */

    zc_policy_t policy;
    /* hier.h: the host groups, when ZIPCCL_TOPOLOGY makes this communicator hierarchical */
    struct zc_hier *hier;
    zc_state_store_t *store;
    zc_stats_book_t stats;
    char *stats_file; /* zc_comm_set_stats_file's copy, cfg.stats_file points at it; or NULL */

    /* nonblocking calls in start order; only the head runs */
    zc_coll_op_t *head, *tail;

    /* the progress thread (ZIPCCL_PROGRESS_THREAD=1) */
    int thread_on;
    int thread_stop;
    pthread_t thread;
    pthread_mutex_t lock;
    pthread_cond_t cond;

    /* buffers UCX may still touch after a failure: freed at destroy */
    void **graveyard;
    size_t graveyard_len, graveyard_cap;

    /* large buffers of finished calls, kept for the next ones (zc_coll_alloc) */
    struct zc_coll_buf {
        void *ptr;
        size_t cap;
        int lent; /* an op holds it */
    } bufs[ZC_COLL_BUFS];
};

/* The tag of (@p step, @p chunk) of @p op: step < ZC_COLL_MAX_STEP, chunk < ZC_COLL_MAX_CHUNKS. */
static inline uint64_t zc_coll_tag(const zc_coll_op_t *op, unsigned step, unsigned chunk)
{
    uint64_t seq = op->seq & ((UINT64_C(1) << ZC_COLL_SEQ_BITS) - 1);
    return seq << (ZC_COLL_STEP_BITS + ZC_COLL_CHUNK_BITS) | (uint64_t)step << ZC_COLL_CHUNK_BITS |
           chunk;
}

/*
 * Creates a communicator over @p bs with the configuration @p cfg (already
 * applied: zc_config_apply) instead of the environment's: the frontends that
 * need their own settings (the CollNet plugin's codec) and bootstrap (over
 * NCCL's handles, over MPI) use it. Collective over @p bs; takes @p bs (it is
 * destroyed with the communicator, or at once on failure).
 */
zc_status_t zc_comm_create(const zc_config_t *cfg, zc_bootstrap_t *bs, zc_comm_t **comm_p);

/*
 * Tests @p n requests without blocking (the driver progresses the worker):
 * ZC_OK when all completed successfully, ZC_INPROGRESS while some run, else the
 * first error (requests of a dead peer fail with ZC_ERR_PEER, blamed on it).
 * Fails with ZC_ERR_TIMEOUT, logging @p what and the peers still awaited (the
 * first one blamed), when ZIPCCL_TIMEOUT_S passed without any transfer of the
 * communicator completing (the driver pushes the deadline back on each one;
 * UCX's own traffic, keepalive included, does not count). Requests with status
 * other than ZC_INPROGRESS count as completed (so arrays may hold unused slots
 * set to ZC_OK).
 */
zc_status_t zc_coll_test(zc_coll_op_t *op, zc_ucx_req_t *reqs, size_t n, const char *what);

/*
 * Blames @p op's failure on rank @p peer (the sender of a payload this rank
 * rejected): the abort the other ranks get names it. Returns @p status.
 */
zc_status_t zc_coll_blame(zc_coll_op_t *op, int peer, zc_status_t status);

/*
 * Checks that the receive @p req (completed) brought exactly @p expected
 * bytes: ZC_OK, or ZC_ERR_MISMATCH logged with @p what and blamed on the
 * sender. For transfers whose length both ends know (the raw ring's chunks):
 * a short message would otherwise leave stale bytes in the result.
 */
zc_status_t zc_coll_check_length(zc_coll_op_t *op, const zc_ucx_req_t *req, size_t expected,
                                 const char *what);

/*
 * zc_ucx_isend for an algorithm's data. In a build with ZC_FAULT_INJECTION
 * (the tests' copy of this layer only, docs/failures.md) it can send a
 * corrupt, short or over-long payload instead, as ZC_TEST_FAULT asks.
 */
zc_status_t zc_coll_isend(zc_coll_op_t *op, int peer, uint64_t tag, const void *buf, size_t len,
                          zc_ucx_req_t *req);

/* comm.c: posts the abort receives (after the transport is up), collective-free. */
zc_status_t zc_coll_abort_init(zc_comm_t *comm);

/*
 * comm.c, before the transport goes: gives the aborts this rank sent a moment
 * (at most 2 s) to leave, so that peers learn why before they see this rank's
 * connections close.
 */
void zc_coll_abort_flush(zc_comm_t *comm);

/* Abandons @p n requests still in flight (after a failure); completed ones are left alone. */
void zc_coll_abandon(zc_coll_op_t *op, zc_ucx_req_t *reqs, size_t n);

/*
 * Frees @p ptr now when @p op succeeded (a buffer zc_coll_alloc lent goes back to the
 * communicator), else when the communicator is destroyed.
 */
void zc_coll_defer_free(zc_coll_op_t *op, void *ptr);

/*
 * A buffer of @p bytes for @p op (uninitialised, like malloc; NULL without memory), to be given
 * back with zc_coll_defer_free. From ZC_COLL_BUF_MIN bytes on, the communicator keeps up to
 * ZC_COLL_BUFS of them between calls and lends the smallest that fits: a fresh block of that
 * size comes from mmap, and the page faults of its first touch cost a 64 MiB QSGD call more than
 * its work (docs/results.md, "Idle polling that yields"). zc_comm_destroy frees them.
 */
void *zc_coll_alloc(zc_coll_op_t *op, size_t bytes);

/*
 * Writes the f32 accumulator @p acc (@p count values) to @p op's recvbuf at
 * element @p offset, in its dtype (f32, f16 or bf16, rounding to nearest even),
 * divided by the number of ranks for ZC_OP_AVG. @p acc may be that very part
 * of recvbuf when dtype is f32. Time it as decode.
 */
void zc_coll_store_result(zc_coll_op_t *op, float *acc, size_t count, size_t offset);

/*
 * The end of one part (@p len values at element @p off) whose f32 sum @p acc is
 * known, identical on every rank: feeds it to the part's codec state @p cs
 * (GradiVeQ learns its basis from it; NULL: none) and stores it in recvbuf
 * (zc_coll_store_result, timed as decode). Logs and returns the update's error.
 */
zc_status_t zc_coll_part_done(zc_coll_op_t *op, zc_codec_state_t *cs, float *acc, size_t len,
                              size_t off);

/*
 * On calls the driver samples (op->stats.sample_err), decodes @p payload (own,
 * @p len bytes, made from @p count values of op->dtype at @p src, with codec
 * state @p cs or NULL) and adds its squared error and the input's squared norm
 * to op->stats. A no-op on other calls. Not timed as decode.
 */
void zc_coll_measure_error(zc_coll_op_t *op, zc_codec_state_t *cs, const void *payload, size_t len,
                           const void *src, size_t count);

/* Adds the time since @p since_ns to a counter; times a section:
 *   uint64_t t = zc_time_ns(); ...; zc_coll_account(&op->stats.encode_ns, t); */
static inline void zc_coll_account(uint64_t *counter_ns, uint64_t since_ns)
{
    *counter_ns += zc_time_ns() - since_ns;
}

/* Split of @p count elements into @p parts nearly equal segments: segment i is [off, off+len). */
static inline void zc_coll_segment(size_t count, size_t parts, size_t i, size_t *off_p,
                                   size_t *len_p)
{
    size_t base = count / parts, extra = count % parts;
    *off_p = i * base + (i < extra ? i : extra);
    *len_p = base + (i < extra ? 1 : 0);
}

/*
 * Values a part boundary should be a multiple of: a QSGD bucket or a GradiVeQ
 * slice is then never split between two payloads (which would cost a partial
 * bucket or a raw tail in each), and f32 parts start 256-byte aligned.
 */
static inline size_t zc_coll_granule(const zc_codec_params_t *p)
{
    size_t g = zc_codec_granule(p);
    return g ? g : 64;
}

/*
 * Part @p i of @p parts over @p count values: as zc_coll_segment, with the
 * boundaries on multiples of @p granule when there are at least @p parts of them.
 */
static inline void zc_coll_split(size_t count, size_t parts, size_t granule, size_t i,
                                 size_t *off_p, size_t *len_p)
{
    size_t units = (count + granule - 1) / granule;
    if (units < parts) {
        zc_coll_segment(count, parts, i, off_p, len_p);
        return;
    }
    size_t uoff, ulen;
    zc_coll_segment(units, parts, i, &uoff, &ulen);
    *off_p = uoff * granule;
    *len_p = (count < (uoff + ulen) * granule ? count : (uoff + ulen) * granule) - *off_p;
}

/*
 * Chunks per part for pipelining: enough that the longest part's chunks hold
 * about @p chunk_elems values, at most one granule per chunk of the shortest
 * part, between 1 and ZC_COLL_MAX_CHUNKS.
 */
static inline size_t zc_coll_nchunks(size_t longest, size_t shortest, size_t chunk_elems,
                                     size_t granule)
{
    size_t c = (longest + chunk_elems - 1) / chunk_elems;
    size_t g = (shortest + granule - 1) / granule;
    c = c < g ? c : g;
    c = c > 1 ? c : 1;
    return c < ZC_COLL_MAX_CHUNKS ? c : ZC_COLL_MAX_CHUNKS;
}

#endif
