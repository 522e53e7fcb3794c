/*
 * The op driver: the call header every rank exchanges before data moves, the
 * queue of nonblocking calls, progress, deadlines, and the helpers algorithms
 * share (coll.h).
 *
 * Life of an op: zc_op_create (policy decision, per-tensor state) -> queued ->
 * at the head of the queue: header exchange (every rank sends its header to
 * every other rank) -> the headers agree: the algorithm's start, then its
 * progress until it is done -> fini, statistics, completion. Only the head op
 * runs, so calls complete in the order they were started.
 */
#include "collectives/op.h"

#include "codec/codec.h"
#include "collectives/hier.h"
#include "common/compiler.h"
#include "common/log.h"
#include "common/half.h"

#include <inttypes.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* PHASE_AGREED_FAIL: the headers disagree, which every rank found: nothing to tell the others */
enum { PHASE_QUEUED, PHASE_HEADER, PHASE_ALGO, PHASE_AGREED_FAIL, PHASE_DONE };

/* What every rank must agree on before an all-reduce moves data. */
typedef struct call_header {
    uint32_t magic;
    uint32_t dtype;
    uint64_t seq;
    uint64_t count;
    uint32_t op;
    uint32_t algo;
    uint32_t codec;
    uint32_t params_hash; /* zc_codec_params_hash: the codec params on the wire */
    /* not compared: this rank's encode and decode speeds on the tensor's previous call (f32
     * bytes/s; 0: none), from which every rank learns the same (learn_speeds) */
    double enc_bw, dec_bw;
} call_header_t;

#define HEADER_MAGIC 0x5a43414cu /* "ZCAL" */
_Static_assert(sizeof(call_header_t) == ZC_COLL_HEADER_BYTES, "coll.h states the header's size");

/*
 * Why a rank failed an op, sent to every peer (docs/failures.md). Its tag has
 * the header's step with a chunk number headers never use (they use 0) and
 * every sequence bit set: no op's message can match it.
 */
struct zc_coll_abort {
    uint32_t magic;
    int32_t origin;  /* the rank that failed first */
    int32_t culprit; /* the rank it blames (dead, stalled, sent bad data), or -1 */
    int32_t status;  /* the origin's zc_status_t */
    uint64_t seq;    /* the op it failed */
    char why[256];   /* "rank 3 lost rank 2 (...) in allreduce #7 (...)", NUL-terminated */
};

#define ABORT_MAGIC 0x5a434142u /* "ZCAB" */
#define ABORT_TAG ZC_UCX_TAG_MAX
/* How long zc_comm_destroy lets this rank's aborts leave before the connections close. */
#define ABORT_FLUSH_NS 2000000000ull
/*
 * How long a rank that lost a peer listens for an abort before it calls itself
 * the first to fail: a rank that failed first (it lost the peer that died)
 * sends its abort, then exits, and a rank that sees that exit before the abort
 * would otherwise blame the wrong peer.
 */
#define PEER_GRACE_NS 250000000ull
/*
 * How long a rank gathers the other ranks' aborts after a timeout (its own or
 * a peer's) before it names the stalled rank. Behind a stalled rank every
 * survivor waits for its neighbour and times out within about one pipeline
 * step of the others; each blames the rank it waits for, and only the one
 * behind the stalled rank is right. A rank blamed before its own deadline
 * passed answers with the rank it waits for (abort_alive), so the blames form
 * a chain. The stalled rank is the one blamed that sends no abort
 * (stall_settle).
 */
#define STALL_GRACE_NS 500000000ull

/* One sampled call in this many measures the codec's error, when statistics are on. */
#define ERROR_SAMPLE_PERIOD 16

/* one line per algorithm */
// clang-format off
static const zc_algo_t *const algos[ZC_ALGO_COUNT] = {
    [ZC_ALGO_RAW_RING] = &zc_algo_raw_ring,
    [ZC_ALGO_COMPRESSED_RING] = &zc_algo_compressed_ring,
    [ZC_ALGO_ALLGATHER] = &zc_algo_allgather,
    [ZC_ALGO_SCATTER] = &zc_algo_scatter,
    [ZC_ALGO_POWERSGD] = &zc_algo_powersgd,
};
// clang-format on

static uint64_t default_key(const void *sendbuf, size_t count)
{
    uint64_t k = (uint64_t)(uintptr_t)sendbuf * UINT64_C(0x9e3779b97f4a7c15) ^ count;
    return k ? k : 1;
}

static void describe(const zc_coll_op_t *op, char *buf, size_t len)
{
    snprintf(buf, len, "allreduce #%" PRIu64 " (%zu x %s %s, %s %s)", op->seq, op->count,
             zc_dtype_name(op->dtype), zc_redop_name(op->op), zc_algo_name(op->path.algo),
             zc_codec_name(op->path.params.codec));
}

/* ---- waiting: poll, then sleep (docs/collectives.md, "Progress, deadlines and failures") ---- */

/*
 * Waits no transport event announces (shared-memory rounds of the hierarchical
 * algorithm) poll; idle for longer than SHM_POLL_NS they sleep in steps of
 * SHM_STEP_NS, which their 20 ms liveness checks and deadline do not notice.
 */
#define SHM_POLL_NS 1000000ull
#define SHM_STEP_NS 100000ull

/* What the rounds of progress since a waiter's last look found (zc_comm_progress fills it). */
typedef struct wake {
    int busy; /* something moved, or an op has work no event announces: poll on */
    int shm;  /* an op waits for what no transport event announces: short steps */
    size_t n; /* workers whose events end a sleep */
    zc_ucx_worker_t *workers[ZC_UCX_SLEEP_MAX];
    uint64_t until_ns; /* the earliest timer: an op's deadline */
    unsigned waits;    /* ops registered (a hierarchical op sees its inner one's) */
} wake_t;

static zc_coll_op_t *queue_head(zc_comm_t *comm);

/* The waiter's record on this thread while its round of progress runs, else NULL. */
static _Thread_local wake_t *round_wake;

static void wake_add(wake_t *w, zc_ucx_worker_t *worker)
{
    for (size_t i = 0; i < w->n; i++)
        if (w->workers[i] == worker)
            return;
    if (w->n < ZC_UCX_SLEEP_MAX)
        w->workers[w->n++] = worker;
    else
        w->shm = 1; /* more than one sleep watches: steps */
}

/*
 * Idle since @p busy_ns (the last round that moved something): polls for
 * ZC_UCX_SPIN_NS, then sleeps on @p w's workers until an event or its timer.
 */
static void idle_wait(const wake_t *w, uint64_t now, uint64_t busy_ns)
{
    uint64_t idle = now - busy_ns;

    if (idle < ZC_UCX_SPIN_NS || w->n == 0 || (w->shm && idle < SHM_POLL_NS)) {
        sched_yield();
        return;
    }
    if (w->shm) {
        struct timespec ts = {.tv_nsec = (long)SHM_STEP_NS};
        nanosleep(&ts, NULL);
        return;
    }
    uint64_t until = ZC_MIN(w->until_ns, now + ZC_UCX_SLEEP_MAX_NS);
    if (until <= now || zc_ucx_worker_sleep(w->workers, w->n, until - now) == ZC_ERR_UNSUPPORTED)
        sched_yield();
}

/* A UCX-only wait on @p comm after a round of zc_ucx_progress that found @p events. */
static void ucx_idle(zc_comm_t *comm, unsigned events, uint64_t *busy_ns_p, uint64_t until_ns)
{
    wake_t w = {.n = 1, .workers = {zc_ucx_comm_worker(comm->ucx)}, .until_ns = until_ns};
    uint64_t now = zc_time_ns();

    if (events) {
        *busy_ns_p = now;
        return;
    }
    idle_wait(&w, now, *busy_ns_p);
}

/* The head op and what it had done before a round of progress: what changed is work. */
typedef struct round_snap {
    const zc_coll_op_t *op;
    int phase;
    uint64_t encode_ns, decode_ns, bytes_wire;
    uint64_t posted, completed;
    unsigned waits;
} round_snap_t;

static void round_snap(const zc_comm_t *comm, const zc_coll_op_t *op, const wake_t *w,
                       round_snap_t *s)
{
    *s = (round_snap_t){.op = op,
                        .phase = op->phase,
                        .encode_ns = op->stats.encode_ns,
                        .decode_ns = op->stats.decode_ns,
                        .bytes_wire = op->stats.bytes_wire,
                        .posted = zc_ucx_posted(comm->ucx),
                        .completed = zc_ucx_completed(comm->ucx),
                        .waits = w->waits};
}

/*
 * After a round of progress on @p comm: whether its head op may sleep, on what.
 * Any change is work (more may follow without an event: the algorithms do one
 * step per call); an op that only waits for its transfers sleeps on the
 * communicator's worker until its deadline; a hierarchical op waits for
 * shared memory (steps) unless its round ran an inner communicator's op that
 * waits for transfers (then on both workers: this one carries the aborts).
 */
static void round_note(zc_comm_t *comm, const round_snap_t *s, int activity, wake_t *w)
{
    const zc_coll_op_t *op = activity ? NULL : queue_head(comm);

    if (!op || op != s->op || op->phase != s->phase || op->phase == PHASE_QUEUED ||
        op->stats.encode_ns != s->encode_ns || op->stats.decode_ns != s->decode_ns ||
        op->stats.bytes_wire != s->bytes_wire || zc_ucx_posted(comm->ucx) != s->posted ||
        zc_ucx_completed(comm->ucx) != s->completed) {
        w->busy = 1;
        return;
    }
    if (op->phase == PHASE_ALGO && op->algo == &zc_algo_hier && w->waits == s->waits)
        w->shm = 1;
    wake_add(w, zc_ucx_comm_worker(comm->ucx));
    w->until_ns = ZC_MIN(w->until_ns, op->deadline_ns + 1000000ull); /* past it: it fails */
    w->waits++;
}

void zc_comm_wait_round(zc_comm_t *comm, uint64_t *busy_ns_p)
{
    wake_t w = {.until_ns = UINT64_MAX}, *outer = round_wake;

    round_wake = &w;
    int activity = zc_comm_progress(comm);
    round_wake = outer;
    uint64_t now = zc_time_ns();
    if (activity || w.busy) {
        *busy_ns_p = now;
        return;
    }
    idle_wait(&w, now, *busy_ns_p);
}

zc_status_t zc_op_create(zc_comm_t *comm, const void *sendbuf, void *recvbuf, size_t count,
                         zc_dtype_t dtype, zc_redop_t redop, uint64_t key, zc_coll_op_t **op_p)
{
    zc_coll_op_t *op = calloc(1, sizeof(*op));
    if (!op)
        return ZC_ERR_NO_MEMORY;
    op->comm = comm;
    op->sendbuf = sendbuf;
    op->recvbuf = recvbuf;
    op->count = count;
    op->dtype = dtype;
    op->op = redop;
    op->key = key ? key : default_key(sendbuf, count);
    op->status = ZC_INPROGRESS;
    op->culprit = -1;
    op->waiting_for = -1;
    op->phase = PHASE_QUEUED;
    op->path = zc_policy_choose(&comm->policy, count, dtype, redop);
    op->algo = algos[op->path.algo];
    op->rng.seed = (uint64_t)comm->cfg.seed;
    op->rng.rank = (uint32_t)comm->rank;
    *op_p = op;
    return ZC_OK;
}

void zc_op_free(zc_coll_op_t *op)
{
    if (!op)
        return;
    free(op->hdr_reqs);
    free(op->hdr_buf);
    free(op);
}

/* Fetches the per-tensor state and seeds the rng counter; the op's sequence number is final. */
static zc_status_t op_prepare(zc_coll_op_t *op)
{
    zc_comm_t *comm = op->comm;

    op->rng.counter = (uint32_t)op->seq;
    /*
     * Decided again now that the op is next in line: with what the tensor's
     * earlier calls measured (zc_policy_choose_tensor: ratios, speeds), which
     * every rank holds alike, as it ran the same calls. A hierarchical
     * communicator's all-reduces are routed first: the policy of its
     * communicator between hosts decides there (logged at debug level).
     */
    if (!op->control && !zc_hier_route(op)) {
        static const double none[ZC_CODEC_COUNT];
        const zc_tensor_state_t *ts = zc_state_find(comm->store, op->key, op->count, op->dtype);
        const zc_policy_learned_t lr = {.ratio = ts ? ts->learned_ratio : none,
                                        .enc_bw = ts ? ts->learned_enc_bw : NULL,
                                        .dec_bw = ts ? ts->learned_dec_bw : NULL};
        op->path = zc_policy_choose_tensor(&comm->policy, op->count, op->dtype, op->op, &lr);
        zc_policy_note(&comm->policy, op->count, op->dtype, op->op, &op->path, &lr);
        op->algo = algos[op->path.algo];
    }
    if (op->path.algo != ZC_ALGO_RAW_RING && zc_codec_needs_state(&op->path.params)) {
        ZC_CHECK(zc_state_get(comm->store, op->key, op->count, op->dtype, &op->path.params,
                              &op->tstate));
        op->rng.counter = op->tstate->calls;
    }
    int stats_on = comm->cfg.stats || comm->cfg.stats_file[0];
    op->stats.sample_err =
        stats_on && op->path.algo != ZC_ALGO_RAW_RING && op->seq % ERROR_SAMPLE_PERIOD == 0;
    return ZC_OK;
}

static void push_deadline(zc_coll_op_t *op, uint64_t now)
{
    op->deadline_ns = now + (uint64_t)op->comm->cfg.timeout_s * 1000000000ull;
}

static zc_status_t header_start(zc_coll_op_t *op)
{
    zc_comm_t *comm = op->comm;
    size_t peers = (size_t)comm->size - 1;
    call_header_t mine = {
        .magic = HEADER_MAGIC,
        .dtype = (uint32_t)op->dtype,
        .seq = op->seq,
        .count = op->count,
        .op = (uint32_t)op->op,
        .algo = (uint32_t)op->path.algo,
        .codec = (uint32_t)op->path.params.codec,
        .params_hash = zc_codec_params_hash(&op->path.params),
        .enc_bw = op->tstate ? op->tstate->own_enc_bw : 0.0,
        .dec_bw = op->tstate ? op->tstate->own_dec_bw : 0.0,
    };

    op->hdr_buf = calloc(peers + 1, sizeof(call_header_t));
    op->hdr_reqs = calloc(2 * peers + 1, sizeof(zc_ucx_req_t));
    if (!op->hdr_buf || !op->hdr_reqs)
        return ZC_ERR_NO_MEMORY;
    call_header_t *h = op->hdr_buf;
    h[0] = mine;
    uint64_t tag = zc_coll_tag(op, ZC_COLL_HEADER_STEP, 0);
    for (size_t i = 0; i < peers; i++) {
        int peer = (comm->rank + 1 + (int)i) % comm->size;
        ZC_CHECK(zc_ucx_irecv(comm->ucx, peer, tag, &h[1 + i], sizeof(*h), &op->hdr_reqs[i]));
    }
    for (size_t i = 0; i < peers; i++) {
        int peer = (comm->rank + 1 + (int)i) % comm->size;
        ZC_CHECK(zc_ucx_isend(comm->ucx, peer, tag, &h[0], sizeof(*h), &op->hdr_reqs[peers + i]));
        op->stats.bytes_wire += sizeof(*h);
    }
    return ZC_OK;
}

/* Compares every received header with ours; logs the first difference with both values. */
static zc_status_t header_check(zc_coll_op_t *op)
{
    zc_comm_t *comm = op->comm;
    const call_header_t *h = op->hdr_buf;
    char what[160];

    for (int i = 0; i + 1 < comm->size; i++) {
        const call_header_t *o = &h[1 + i];
        int peer = (comm->rank + 1 + i) % comm->size;
        const char *field = NULL;
        char mine[64], theirs[64];

        if (op->hdr_reqs[i].length != sizeof(*o) || o->magic != HEADER_MAGIC) {
            field = "call header";
            snprintf(mine, sizeof(mine), "a valid header");
            snprintf(theirs, sizeof(theirs), "%zu bytes of something else", op->hdr_reqs[i].length);
        } else if (o->count != h->count) {
            field = "count";
            snprintf(mine, sizeof(mine), "%" PRIu64, h->count);
            snprintf(theirs, sizeof(theirs), "%" PRIu64, o->count);
        } else if (o->dtype != h->dtype) {
            field = "datatype";
            snprintf(mine, sizeof(mine), "%s", zc_dtype_name((zc_dtype_t)h->dtype));
            snprintf(theirs, sizeof(theirs), "%s", zc_dtype_name((zc_dtype_t)o->dtype));
        } else if (o->op != h->op) {
            field = "operation";
            snprintf(mine, sizeof(mine), "%s", zc_redop_name((zc_redop_t)h->op));
            snprintf(theirs, sizeof(theirs), "%s", zc_redop_name((zc_redop_t)o->op));
        } else if (o->algo != h->algo || o->codec != h->codec || o->params_hash != h->params_hash) {
            field = "path (ZIPCCL_CODEC, ZIPCCL_ALGO, codec parameters or measurements differ)";
            snprintf(mine, sizeof(mine), "%s %s %08x", zc_algo_name((zc_algo_id_t)h->algo),
                     zc_codec_name((zc_codec_id_t)h->codec), h->params_hash);
            snprintf(theirs, sizeof(theirs), "%s %s %08x",
                     o->algo < ZC_ALGO_COUNT ? zc_algo_name((zc_algo_id_t)o->algo) : "?",
                     o->codec < ZC_CODEC_COUNT ? zc_codec_name((zc_codec_id_t)o->codec) : "?",
                     o->params_hash);
        } else if (o->seq != h->seq) {
            field = "call number";
            snprintf(mine, sizeof(mine), "%" PRIu64, h->seq);
            snprintf(theirs, sizeof(theirs), "%" PRIu64, o->seq);
        }
        if (field) {
            describe(op, what, sizeof(what));
            ZC_ERROR("%s: ranks disagree on the %s: rank %d has %s, rank %d has %s", what, field,
                     comm->rank, mine, peer, theirs);
            return ZC_ERR_MISMATCH;
        }
    }
    return ZC_OK;
}

/*
 * The agreed headers carried every rank's speeds on the tensor's previous call:
 * the slowest rank's become the tensor's learned ones (zc_policy_agree_speed),
 * alike on every rank, which all hold the same headers. Costs no message.
 */
static void learn_speeds(zc_coll_op_t *op)
{
    const call_header_t *h = op->hdr_buf;
    zc_tensor_state_t *ts = op->tstate;
    double enc = h->enc_bw, dec = h->dec_bw;

    if (!ts)
        return;
    for (int i = 1; i < op->comm->size; i++) {
        enc = ZC_MIN(enc, h[i].enc_bw);
        dec = ZC_MIN(dec, h[i].dec_bw);
    }
    if (!(enc > 0) || !(dec > 0))
        return;
    const zc_codec_id_t c = ts->params.codec;
    ts->learned_enc_bw[c] = zc_policy_agree_speed(ts->learned_enc_bw[c], enc);
    ts->learned_dec_bw[c] = zc_policy_agree_speed(ts->learned_dec_bw[c], dec);
}

/* This rank's speeds on @p op's codec work (zc_policy_codec_work), for the tensor's next call. */
static void measure_speeds(zc_coll_op_t *op)
{
    zc_tensor_state_t *ts = op->tstate;
    double enc_bytes, dec_bytes;

    zc_policy_codec_work(&op->comm->policy, op->path.algo, op->path.params.codec, op->count,
                         ts->learned_ratio, &enc_bytes, &dec_bytes);
    /* the tensor's first call (allocations, page faults) is a warm-up, not a measurement */
    if (ts->calls == 0 || !(enc_bytes > 0) || !op->stats.encode_ns || !op->stats.decode_ns)
        return;
    ts->own_enc_bw = enc_bytes / ((double)op->stats.encode_ns * 1e-9);
    ts->own_dec_bw = dec_bytes / ((double)op->stats.decode_ns * 1e-9);
}

zc_status_t zc_coll_blame(zc_coll_op_t *op, int peer, zc_status_t status)
{
    if (op->culprit < 0)
        op->culprit = peer;
    return status;
}

zc_status_t zc_coll_test(zc_coll_op_t *op, zc_ucx_req_t *reqs, size_t n, const char *what)
{
    size_t pending = 0;
    int recv_from = -1, send_to = -1;

    for (size_t i = 0; i < n; i++) {
        if (reqs[i].status == ZC_INPROGRESS) {
            pending++;
            if (reqs[i].is_recv && recv_from < 0)
                recv_from = reqs[i].peer;
            else if (!reqs[i].is_recv && send_to < 0)
                send_to = reqs[i].peer;
        } else if (reqs[i].status < 0) { /* the transport logged it, naming the peer */
            return zc_coll_blame(op, reqs[i].peer, reqs[i].status);
        }
    }
    if (pending == 0)
        return ZC_OK;
    /* a send still pending waits for its receiver to take it, a receive for its sender */
    op->waiting_for = recv_from >= 0 ? recv_from : send_to;
    uint64_t now = zc_time_ns();
    if (now <= op->deadline_ns)
        return ZC_INPROGRESS;

    char desc[160], peers[128];
    size_t used = 0;
    peers[0] = '\0';
    for (size_t i = 0; i < n && used + 24 < sizeof(peers); i++) {
        if (reqs[i].status != ZC_INPROGRESS)
            continue;
        zc_coll_blame(op, reqs[i].peer, ZC_ERR_TIMEOUT);
        int w = snprintf(peers + used, sizeof(peers) - used, "%s%s rank %d", used ? ", " : "",
                         reqs[i].is_recv ? "from" : "to", reqs[i].peer);
        used += (size_t)w;
    }
    describe(op, desc, sizeof(desc));
    ZC_ERROR("%s: timed out after %" PRId64 " s (ZIPCCL_TIMEOUT_S) in %s; waiting for %zu "
             "transfer(s): %s",
             desc, op->comm->cfg.timeout_s, what ? what : "?", pending, peers);
    return ZC_ERR_TIMEOUT;
}

zc_status_t zc_coll_check_length(zc_coll_op_t *op, const zc_ucx_req_t *req, size_t expected,
                                 const char *what)
{
    if (req->length == expected)
        return ZC_OK;
    char desc[160];
    describe(op, desc, sizeof(desc));
    ZC_ERROR("%s: rank %d sent %zu bytes in %s where %zu were due", desc, req->peer, req->length,
             what, expected);
    return zc_coll_blame(op, req->peer, ZC_ERR_MISMATCH);
}

void zc_coll_abandon(zc_coll_op_t *op, zc_ucx_req_t *reqs, size_t n)
{
    for (size_t i = 0; i < n; i++)
        zc_ucx_abandon(op->comm->ucx, &reqs[i], op->status < 0 ? op->status : ZC_ERR_INTERNAL);
}

/* Keeps @p ptr until the communicator is destroyed (UCX may still touch it). */
static void graveyard_add(zc_comm_t *comm, void *ptr)
{
    if (comm->graveyard_len == comm->graveyard_cap) {
        size_t cap = comm->graveyard_cap ? 2 * comm->graveyard_cap : 16;
        void **g = realloc(comm->graveyard, cap * sizeof(*g));
        if (!g) {
            /* leaking is safe; freeing a buffer UCX may still write is not */
            ZC_LOG_ONCE(ZC_LOG_WARN, "collectives: out of memory: leaking a transfer buffer");
            return;
        }
        comm->graveyard = g;
        comm->graveyard_cap = cap;
    }
    comm->graveyard[comm->graveyard_len++] = ptr;
}

void *zc_coll_alloc(zc_coll_op_t *op, size_t bytes)
{
    struct zc_coll_buf *fit = NULL, *spare = NULL;

    if (bytes < ZC_COLL_BUF_MIN)
        return malloc(bytes ? bytes : 1);
    for (int i = 0; i < ZC_COLL_BUFS; i++) {
        struct zc_coll_buf *b = &op->comm->bufs[i];
        if (b->lent)
            continue;
        if (b->ptr && b->cap >= bytes && (!fit || b->cap < fit->cap))
            fit = b;
        /* an empty slot, else the smallest idle block makes room */
        if (!spare || (spare->ptr && (!b->ptr || b->cap < spare->cap)))
            spare = b;
    }
    if (fit) {
        fit->lent = 1;
        return fit->ptr;
    }
    if (!spare) /* every slot lent: this one is not kept */
        return malloc(bytes);
    free(spare->ptr);
    spare->ptr = malloc(bytes);
    spare->cap = spare->ptr ? bytes : 0;
    spare->lent = spare->ptr != NULL;
    return spare->ptr;
}

void zc_coll_defer_free(zc_coll_op_t *op, void *ptr)
{
    if (!ptr)
        return;
    for (int i = 0; i < ZC_COLL_BUFS; i++) {
        struct zc_coll_buf *b = &op->comm->bufs[i];
        if (b->ptr != ptr)
            continue;
        b->lent = 0;
        if (op->status >= 0)
            return;    /* kept for the next call */
        b->ptr = NULL; /* UCX may still write into it: the slot lets it go */
        b->cap = 0;
        break;
    }
    if (op->status >= 0)
        free(ptr);
    else
        graveyard_add(op->comm, ptr);
}

#ifdef ZC_FAULT_INJECTION
/*
 * How long a rank that stops itself (ZC_TEST_FAULT's "stop") first progresses
 * its worker: the sends it posted before leave, as they would from a rank that
 * stalls between two sends.
 */
#define FAULT_STOP_FLUSH_NS 100000000ull

/*
 * ZC_TEST_FAULT=RANK:CALL:KIND (the tests' build only): the first data
 * send of rank RANK in its call number CALL (op->seq, from 0) carries a bad
 * payload: "short" sends half of it, "long" 2 MiB more than it (more than any
 * receive buffer), "corrupt" inverts its first 16 bytes (a codec's header),
 * "flip" one bit three quarters in (a body, as a bad link would).
 * ZC_TEST_FAULT=RANK:CALL:stop:PEER: rank RANK stops itself (SIGSTOP, the
 * whole process) before its first data send to rank PEER in call CALL, after
 * its sends to other peers went out; once resumed (SIGCONT) it sends as usual.
 */
static zc_status_t fault_isend(zc_coll_op_t *op, int peer, uint64_t tag, const void *buf,
                               size_t len, zc_ucx_req_t *req, int *done_p)
{
    static int fired;
    const char *spec = getenv("ZC_TEST_FAULT");
    int rank, stop_peer = -1, fields;
    unsigned long long call;
    char kind[16];

    *done_p = 0;
    if (fired || !spec || len < 16 ||
        (fields = sscanf(spec, "%d:%llu:%15[a-z]:%d", &rank, &call, kind, &stop_peer)) < 3 ||
        rank != op->comm->rank || call != op->seq)
        return ZC_OK;
    if (strcmp(kind, "stop") == 0) {
        if (fields != 4) {
            ZC_ERROR("ZC_TEST_FAULT: '%s': stop needs the peer (RANK:CALL:stop:PEER)", spec);
            return ZC_ERR_INVALID_CONFIG;
        }
        if (peer != stop_peer)
            return ZC_OK;
        fired = 1;
        uint64_t until = zc_time_ns() + FAULT_STOP_FLUSH_NS;
        while (zc_time_ns() < until)
            zc_ucx_progress(op->comm->ucx);
        ZC_WARN("ZC_TEST_FAULT: rank %d stops (SIGSTOP) before its send to rank %d in call %llu",
                rank, peer, call);
        raise(SIGSTOP);
        return ZC_OK;
    }
    fired = 1;
    size_t bad_len = len;
    uint8_t *bad = NULL;
    if (strcmp(kind, "short") == 0) {
        bad_len = len / 2;
    } else if (strcmp(kind, "long") == 0) {
        bad_len = len + (2u << 20);
    } else if (strcmp(kind, "corrupt") != 0 && strcmp(kind, "flip") != 0) {
        ZC_ERROR("ZC_TEST_FAULT: unknown kind '%s' (short, long, corrupt, flip, stop)", kind);
        return ZC_ERR_INVALID_CONFIG;
    }
    bad = calloc(1, bad_len > len ? bad_len : len);
    if (!bad)
        return ZC_ERR_NO_MEMORY;
    memcpy(bad, buf, len);
    if (strcmp(kind, "corrupt") == 0)
        for (size_t i = 0; i < 16; i++)
            bad[i] = (uint8_t)~bad[i];
    if (strcmp(kind, "flip") == 0)
        bad[len / 4 * 3] ^= 0x10;
    graveyard_add(op->comm, bad); /* in flight until the communicator goes */
    ZC_WARN("ZC_TEST_FAULT: rank %d sends a %s payload of %zu bytes (not %zu) to rank %d in "
            "call %llu",
            rank, kind, bad_len, len, peer, call);
    *done_p = 1;
    return zc_ucx_isend(op->comm->ucx, peer, tag, bad, bad_len, req);
}
#endif

zc_status_t zc_coll_isend(zc_coll_op_t *op, int peer, uint64_t tag, const void *buf, size_t len,
                          zc_ucx_req_t *req)
{
#ifdef ZC_FAULT_INJECTION
    int faulted;
    zc_status_t status = fault_isend(op, peer, tag, buf, len, req, &faulted);
    if (faulted || status < 0)
        return status;
#endif
    return zc_ucx_isend(op->comm->ucx, peer, tag, buf, len, req);
}

/* A peer's abort arrived (a callback inside progress): the first one breaks the communicator. */
static void abort_arrived(zc_ucx_req_t *req, void *arg)
{
    zc_comm_t *comm = arg;
    int peer = req->peer;
    const zc_coll_abort_t *a = &comm->abort_in[peer];

    if (req->status != ZC_OK)
        return; /* a dead peer's receive fails: the op in flight learns it from its own */
    if (req->length == sizeof(*a) && a->magic == ABORT_MAGIC)
        comm->abort_got[peer] = 1; /* stall_settle reads every one */
    if (comm->broken)
        return;
    comm->broken_ns = zc_time_ns();
    if (req->length != sizeof(*a) || a->magic != ABORT_MAGIC) {
        snprintf(comm->broken_why, sizeof(comm->broken_why),
                 "rank %d sent an abort of %zu bytes that does not parse", peer, req->length);
        comm->broken = ZC_ERR_PEER;
        return;
    }
    /* the text is the origin's; bound it whatever it sent */
    snprintf(comm->broken_why, sizeof(comm->broken_why), "%.*s", (int)sizeof(a->why) - 1, a->why);
    comm->broken = a->status == ZC_ERR_TIMEOUT ? ZC_ERR_TIMEOUT : ZC_ERR_PEER;
    zc_ucx_set_quiet(comm->ucx); /* the peers that exit next are not news */
}

zc_status_t zc_coll_abort_init(zc_comm_t *comm)
{
    size_t n = (size_t)comm->size;

    comm->abort_in = calloc(n, sizeof(*comm->abort_in));
    comm->abort_out = calloc(1, sizeof(*comm->abort_out));
    comm->abort_reqs = calloc(2 * n, sizeof(*comm->abort_reqs));
    comm->abort_got = calloc(n, 1);
    if (!comm->abort_in || !comm->abort_out || !comm->abort_reqs || !comm->abort_got) {
        ZC_ERROR("zc_comm_init: no memory for the abort messages of %d ranks", comm->size);
        return ZC_ERR_NO_MEMORY;
    }
    for (int r = 0; r < comm->size; r++) {
        if (r == comm->rank)
            continue;
        ZC_CHECK(zc_ucx_irecv_cb(comm->ucx, r, ABORT_TAG, &comm->abort_in[r],
                                 sizeof(comm->abort_in[r]), abort_arrived, comm,
                                 &comm->abort_reqs[r]));
    }
    return ZC_OK;
}

/* The first failure of @p op on this rank: why, in words every rank will print. */
static void failure_why(const zc_coll_op_t *op, zc_status_t status, const char *desc, char *buf,
                        size_t len)
{
    const zc_comm_t *comm = op->comm;

    if (status == ZC_ERR_TIMEOUT && op->culprit >= 0)
        snprintf(buf, len,
                 "rank %d timed out after %" PRId64 " s (ZIPCCL_TIMEOUT_S) waiting for rank %d "
                 "in %s",
                 comm->rank, comm->cfg.timeout_s, op->culprit, desc);
    else if (status == ZC_ERR_PEER && op->culprit >= 0)
        snprintf(buf, len, "rank %d lost rank %d (it died or its connection failed) in %s",
                 comm->rank, op->culprit, desc);
    else if (op->culprit >= 0)
        snprintf(buf, len, "rank %d rejected the data rank %d sent in %s: %s", comm->rank,
                 op->culprit, desc, zc_status_string(status));
    else
        snprintf(buf, len, "rank %d failed %s: %s", comm->rank, desc, zc_status_string(status));
}

/*
 * This rank failed @p op first: the communicator is broken here, and every
 * peer is told why (best effort: a dead peer's send fails, which is fine).
 */
/* Sends this rank's abort_out (culprit, status, seq and why filled) to every peer, once. */
static void abort_post(zc_comm_t *comm)
{
    zc_coll_abort_t *a = comm->abort_out;

    a->magic = ABORT_MAGIC;
    a->origin = comm->rank;
    comm->abort_sent = 1;
    zc_ucx_set_quiet(comm->ucx);
    zc_ucx_req_t *sends = comm->abort_reqs + comm->size;
    for (int r = 0; r < comm->size; r++) {
        sends[r].status = ZC_OK;
        if (r != comm->rank && zc_ucx_isend(comm->ucx, r, ABORT_TAG, a, sizeof(*a), &sends[r]) < 0)
            sends[r].status = ZC_ERR_PEER;
    }
}

static void abort_send(zc_coll_op_t *op, zc_status_t status)
{
    zc_comm_t *comm = op->comm;
    char desc[160];

    describe(op, desc, sizeof(desc));
    failure_why(op, status, desc, comm->broken_why, sizeof(comm->broken_why));
    comm->broken = status;
    if (!comm->abort_out || comm->abort_sent)
        return;
    zc_coll_abort_t *a = comm->abort_out;
    a->culprit = op->culprit;
    a->status = status;
    a->seq = op->seq;
    _Static_assert(sizeof(a->why) == sizeof(comm->broken_why), "the abort carries broken_why");
    memcpy(a->why, comm->broken_why, sizeof(a->why));
    ZC_ERROR("%s; telling the other ranks", comm->broken_why);
    abort_post(comm);
}

/*
 * A peer timed out waiting for this rank, whose own wait had not timed out
 * yet (it waits for the stalled rank, and started later, or a peer one call
 * ahead timed out in the next call's header exchange): without an abort of its
 * own it would look like the stalled one to every stall_settle. It says it is
 * alive, and blames the rank its op @p op waits for (op->waiting_for; nobody
 * when it knows none): a rank so blamed that is alive answers the same way,
 * so the chain of aborts ends at the stalled rank, which sends none.
 */
static void abort_alive(const zc_coll_op_t *op)
{
    zc_comm_t *comm = op->comm;

    if (!comm->abort_out || comm->abort_sent)
        return;
    for (int r = 0; r < comm->size; r++) {
        const zc_coll_abort_t *in = &comm->abort_in[r];
        if (r == comm->rank || !comm->abort_got[r] || in->status != ZC_ERR_TIMEOUT ||
            in->culprit != comm->rank)
            continue;
        zc_coll_abort_t *a = comm->abort_out;
        char desc[160];
        int len = snprintf(a->why, sizeof(a->why),
                           "rank %d, which rank %d timed out waiting for, is alive", comm->rank, r);
        a->culprit = op->waiting_for >= 0 && op->waiting_for != comm->rank ? op->waiting_for : -1;
        a->status = ZC_ERR_TIMEOUT;
        a->seq = op->seq;
        if (a->culprit >= 0 && len > 0 && (size_t)len < sizeof(a->why)) {
            describe(op, desc, sizeof(desc));
            snprintf(a->why + len, sizeof(a->why) - (size_t)len, "; it waits for rank %d in %s",
                     a->culprit, desc);
        }
        abort_post(comm);
        return;
    }
}

/*
 * The communicator is broken: no abort matters any more, and the receives of
 * peers that exit next must not fail (and be logged, naming a rank that is
 * merely leaving).
 */
static void abort_quiet(zc_comm_t *comm)
{
    for (int r = 0; comm->abort_reqs && r < comm->size; r++)
        zc_ucx_abandon(comm->ucx, &comm->abort_reqs[r], comm->broken);
}

void zc_coll_abort_flush(zc_comm_t *comm)
{
    if (!comm->abort_sent)
        return;
    zc_ucx_req_t *sends = comm->abort_reqs + comm->size;
    uint64_t busy_ns = zc_time_ns(), deadline = busy_ns + ABORT_FLUSH_NS;
    for (;;) {
        int pending = 0;
        for (int r = 0; r < comm->size; r++)
            pending += sends[r].status == ZC_INPROGRESS;
        if (!pending || zc_time_ns() > deadline)
            break;
        ucx_idle(comm, zc_ucx_progress(comm->ucx), &busy_ns, deadline);
    }
}

void zc_coll_store_result(zc_coll_op_t *op, float *acc, size_t count, size_t offset)
{
    float n = (float)op->comm->size;
    int avg = op->op == ZC_OP_AVG;

    switch (op->dtype) {
    case ZC_DTYPE_F32: {
        float *out = (float *)op->recvbuf + offset;
        if (out == acc && !avg)
            break; /* summed in place (the all-gather's f32 sums): a copy onto itself */
        for (size_t i = 0; i < count; i++)
            out[i] = avg ? acc[i] / n : acc[i];
        break;
    }
    case ZC_DTYPE_F16: {
        uint16_t *out = (uint16_t *)op->recvbuf + offset;
        for (size_t i = 0; i < count; i++)
            out[i] = zc_f32_to_f16(avg ? acc[i] / n : acc[i]);
        break;
    }
    case ZC_DTYPE_BF16: {
        uint16_t *out = (uint16_t *)op->recvbuf + offset;
        for (size_t i = 0; i < count; i++)
            out[i] = zc_f32_to_bf16(avg ? acc[i] / n : acc[i]);
        break;
    }
    default: break; /* compressed paths carry floating types only */
    }
}

zc_status_t zc_coll_part_done(zc_coll_op_t *op, zc_codec_state_t *cs, float *acc, size_t len,
                              size_t off)
{
    if (cs) {
        zc_status_t status = zc_codec_state_update(cs, acc, len);
        if (status < 0) {
            char desc[160];
            describe(op, desc, sizeof(desc));
            ZC_ERROR("%s: codec state update of the part at %zu failed: %s", desc, off,
                     zc_status_string(status));
            return status;
        }
    }
    uint64_t t = zc_time_ns();
    zc_coll_store_result(op, acc, len, off);
    zc_coll_account(&op->stats.decode_ns, t);
    return ZC_OK;
}

void zc_coll_measure_error(zc_coll_op_t *op, zc_codec_state_t *cs, const void *payload, size_t len,
                           const void *src, size_t count)
{
    if (!op->stats.sample_err || count == 0)
        return;
    float *x = malloc(count * sizeof(float));
    float *y = calloc(count, sizeof(float));
    if (x && y && zc_codec_decode_add(cs, payload, len, y, count) == ZC_OK) {
        zc_dtype_to_f32(op->dtype, src, count, x);
        double e2 = 0, n2 = 0;
        for (size_t i = 0; i < count; i++) {
            double d = (double)y[i] - x[i];
            e2 += d * d;
            n2 += (double)x[i] * x[i];
        }
        op->stats.err2 += e2;
        op->stats.norm2 += n2;
    }
    free(x);
    free(y);
}

/* @p op ends because the communicator broke (here earlier, or a peer's abort arrived). */
static void log_broken(const zc_coll_op_t *op)
{
    const zc_comm_t *comm = op->comm;
    char desc[160];

    describe(op, desc, sizeof(desc));
    if (op->phase == PHASE_QUEUED)
        ZC_LOG_ONCE(ZC_LOG_ERROR,
                    "%s: the communicator failed earlier (%s); destroy and recreate it", desc,
                    comm->broken_why);
    else
        ZC_ERROR("%s: aborted: %s", desc, comm->broken_why);
}

/*
 * After a timeout: the aborts that arrived (and this rank's own) say who
 * waited for whom. The stalled rank is one that is blamed for a timeout and
 * sent no abort itself; of several such, the lowest (then the lowest blamer),
 * so that every rank that holds the same aborts names the same. Its blamer's
 * text becomes broken_why. Nothing changes when no abort points at such a rank.
 */
static void stall_settle(zc_comm_t *comm)
{
    const zc_coll_abort_t *best = NULL;

    comm->stall_settled = 1;
    for (int r = 0; r < comm->size; r++) {
        const zc_coll_abort_t *a = r == comm->rank
                                       ? (comm->abort_sent ? comm->abort_out : NULL)
                                       : (comm->abort_got[r] ? &comm->abort_in[r] : NULL);
        if (!a || a->status != ZC_ERR_TIMEOUT || a->culprit < 0 || a->culprit >= comm->size)
            continue;
        int c = a->culprit;
        int reported = c == comm->rank ? comm->abort_sent : comm->abort_got[c];
        if (reported)
            continue;
        if (!best || c < best->culprit || (c == best->culprit && a->origin < best->origin))
            best = a;
    }
    if (best)
        snprintf(comm->broken_why, sizeof(comm->broken_why), "%.*s", (int)sizeof(best->why) - 1,
                 best->why);
}

/*
 * Listens until @p until for the other ranks' aborts (answering one that
 * blames this rank, @p op in flight), then names the stalled rank.
 */
static void stall_gather(const zc_coll_op_t *op, uint64_t until)
{
    zc_comm_t *comm = op->comm;
    uint64_t busy_ns = zc_time_ns();

    while (zc_time_ns() < until) {
        abort_alive(op);
        ucx_idle(comm, zc_ucx_progress(comm->ucx), &busy_ns, until);
    }
    stall_settle(comm);
}

/*
 * The final status of @p op, which failed here with @p status. Any failure but
 * a disagreement on the call header (every rank compared every header: all saw
 * it) may leave peers waiting for data of this op: the communicator breaks and
 * the peers are told (abort_send). A peer's abort that arrives within
 * PEER_GRACE_NS of a lost peer takes precedence: it names the rank that failed
 * first.
 */
static zc_status_t failure_settle(zc_coll_op_t *op, zc_status_t status)
{
    zc_comm_t *comm = op->comm;

    if (status >= 0 || op->phase == PHASE_AGREED_FAIL || comm->broken)
        return status;
    if (status == ZC_ERR_PEER) {
        uint64_t busy_ns = zc_time_ns(), until = busy_ns + PEER_GRACE_NS;
        while (!comm->broken && zc_time_ns() < until)
            ucx_idle(comm, zc_ucx_progress(comm->ucx), &busy_ns, until);
        if (comm->broken) {
            log_broken(op);
            return comm->broken;
        }
        /* a transfer posted to a dead peer fails where it is posted: find it */
        for (int r = 0; r < comm->size && op->culprit < 0; r++)
            if (zc_ucx_peer_failed(comm->ucx, r))
                op->culprit = r;
    }
    abort_send(op, status);
    if (status == ZC_ERR_TIMEOUT) {
        char mine[sizeof(comm->broken_why)];
        memcpy(mine, comm->broken_why, sizeof(mine));
        stall_gather(op, zc_time_ns() + STALL_GRACE_NS);
        if (strcmp(mine, comm->broken_why) != 0)
            log_broken(op); /* a rank further along the waits saw the stalled one */
    }
    return status;
}

/* Ends @p op with @p status: the algorithm lets go, statistics are recorded. */
static void op_finish(zc_coll_op_t *op, zc_status_t status)
{
    zc_comm_t *comm = op->comm;

    status = failure_settle(op, status);
    op->status = status;
    if (op->hdr_reqs && status < 0)
        zc_coll_abandon(op, op->hdr_reqs, 2 * ((size_t)comm->size - 1));
    if (op->hdr_buf && status < 0) {
        zc_coll_defer_free(op, op->hdr_buf); /* UCX may still write into it */
        op->hdr_buf = NULL;
    }
    if (op->phase == PHASE_ALGO)
        op->algo->fini(op);
    if (comm->broken)
        abort_quiet(comm);
    op->phase = PHASE_DONE;
    if (status == ZC_OK && !op->control) {
        if (op->tstate) {
            measure_speeds(op);
            op->tstate->calls++;
            zc_state_note_ratio(op->tstate, &op->path.params);
        }
        size_t bytes = op->count * zc_dtype_bytes(op->dtype);
        uint64_t raw = comm->size > 1 ? 2 * (uint64_t)(comm->size - 1) * bytes / comm->size : 0;
        zc_stats_record(&comm->stats, op->path.algo, op->path.params.codec, bytes, raw, &op->stats,
                        zc_time_ns() - op->start_ns);
    }
}

/* Moves the head op as far as it goes without blocking; returns its status. */
static zc_status_t op_advance(zc_coll_op_t *op)
{
    zc_comm_t *comm = op->comm;
    zc_status_t status;
    uint64_t now = zc_time_ns();

    /* time the caller spent away from zc_test does not count against the peers */
    if (op->last_poll_ns && now - op->last_poll_ns > 1000000000ull)
        op->deadline_ns += now - op->last_poll_ns;
    op->last_poll_ns = now;

    if (op->phase == PHASE_QUEUED) {
        op->start_ns = now;
        push_deadline(op, now);
    }
    if (comm->broken && op->phase < PHASE_AGREED_FAIL) {
        /* failed earlier here, or a peer's abort arrived: this op cannot complete */
        if (comm->broken == ZC_ERR_TIMEOUT && !comm->stall_settled)
            stall_gather(op, comm->broken_ns + STALL_GRACE_NS);
        log_broken(op);
        op_finish(op, comm->broken);
        return op->status;
    }

    switch (op->phase) {
    case PHASE_QUEUED:
        ZC_CHECK_GOTO(op_prepare(op), status, fail);
        op->phase = PHASE_HEADER;
        ZC_CHECK_GOTO(header_start(op), status, fail);
        /* fall through */
    case PHASE_HEADER:
        status =
            zc_coll_test(op, op->hdr_reqs, 2 * ((size_t)comm->size - 1), "call header exchange");
        if (status == ZC_INPROGRESS)
            return status;
        if (status < 0)
            goto fail;
        status = header_check(op);
        if (status < 0) {
            op->phase = PHASE_AGREED_FAIL;
            goto fail;
        }
        learn_speeds(op);
        op->waiting_for = -1; /* the headers are in: the algorithm's waits are others */
        op->phase = PHASE_ALGO;
        ZC_CHECK_GOTO(op->algo->start(op), status, fail);
        /* fall through */
    case PHASE_ALGO:
        status = op->algo->progress(op);
        if (status == ZC_INPROGRESS)
            return status;
        if (status < 0)
            goto fail;
        op_finish(op, ZC_OK);
        return ZC_OK;
    default: return op->status;
    }
fail:
    op_finish(op, status);
    return status;
}

static void lock(zc_comm_t *comm)
{
    if (comm->thread_on)
        pthread_mutex_lock(&comm->lock);
}

static void unlock(zc_comm_t *comm)
{
    if (comm->thread_on)
        pthread_mutex_unlock(&comm->lock);
}

static zc_coll_op_t *queue_head(zc_comm_t *comm)
{
    lock(comm);
    zc_coll_op_t *op = comm->head;
    unlock(comm);
    return op;
}

void zc_op_enqueue(zc_comm_t *comm, zc_coll_op_t *op)
{
    lock(comm);
    op->seq = comm->seq++;
    if (comm->tail)
        comm->tail->next = op;
    else
        comm->head = op;
    comm->tail = op;
    if (comm->thread_on)
        pthread_cond_broadcast(&comm->cond);
    unlock(comm);
}

int zc_op_done(zc_coll_op_t *op)
{
    lock(op->comm);
    int done = op->done;
    unlock(op->comm);
    return done;
}

int zc_comm_progress(zc_comm_t *comm)
{
    int activity = 0;
    zc_coll_op_t *op = queue_head(comm);
    wake_t *w = round_wake;
    round_snap_t snap = {0};

    if (!op)
        return 0;
    if (w)
        round_snap(comm, op, w, &snap);
    /* a broken communicator moves nothing: its peers may be gone, and are not our news */
    unsigned events = comm->broken ? 0 : zc_ucx_progress(comm->ucx);
    /* a deadline on this op's transfers: UCX's keepalive is an event every 20 s, not progress */
    uint64_t completed = zc_ucx_completed(comm->ucx);
    if (completed != comm->completed_seen) {
        comm->completed_seen = completed;
        if (op->phase != PHASE_QUEUED)
            push_deadline(op, zc_time_ns());
    }
    activity += (int)events;
    for (; op; op = queue_head(comm)) {
        if (op_advance(op) == ZC_INPROGRESS)
            break;
        /* done: dequeue, and start the next one in the same round */
        lock(comm);
        comm->head = op->next;
        if (!comm->head)
            comm->tail = NULL;
        op->next = NULL;
        op->done = 1;
        if (comm->thread_on)
            pthread_cond_broadcast(&comm->cond);
        unlock(comm);
        activity++;
    }
    if (w)
        round_note(comm, &snap, activity, w);
    return activity;
}
