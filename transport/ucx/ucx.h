/*
 * UCX point-to-point transport, in two levels, neither showing UCX's types.
 *
 * Workers, endpoints and tagged operations (zc_ucx_worker_t, zc_ucx_ep_t,
 * zc_ucx_op_t): a UCP worker on the process's one UCP context, endpoints to
 * other workers from their addresses (exchanged however the caller likes),
 * tagged nonblocking send and receive with full 64-bit tags and completion
 * callbacks, cancellation, closing with a deadline the caller drives. For
 * frontends that connect peer by peer (plugin/nccl/net.c: ncclNet) and for
 * the communicators below, which are built on it.
 *
 * Communicators (zc_ucx_comm_t): one worker per communicator, an endpoint to
 * every rank (itself included), addresses exchanged over a bootstrap, ranked
 * tags, waits with deadlines and peer-failure reporting.
 *
 *   zc_ucx_comm_t *comm;
 *   ZC_CHECK(zc_ucx_comm_create(cfg, bs, &comm));     // collective over bs
 *   zc_ucx_req_t r[2];
 *   zc_ucx_irecv(comm, left, 7, in, n, &r[0]);
 *   zc_ucx_isend(comm, right, 7, out, n, &r[1]);
 *   status = zc_ucx_waitall(comm, r, 2, "ring step 3");
 *   zc_ucx_comm_destroy(comm);
 *
 * Tags. UCX matches a receive on (tag & mask) and has no source filter, so the
 * 64-bit UCP tag carries the sender: bits 63..44 hold the sending rank, bits
 * 43..0 the caller's tag. A receive from peer p for tag t matches exactly
 * (p << 44 | t) with a full mask, so the caller's tags are private to each
 * (sender, receiver) pair and a communicator holds at most 2^20 ranks. Tags
 * of different communicators never meet: each has its own worker.
 *
 * Ordering: messages from one peer with one tag are matched in the order they
 * were sent (UCX's guarantee for one endpoint); nothing is promised across
 * peers or tags. A message shorter than the receive buffer is fine (the
 * request's length says how much came); a longer one fails the receive with
 * ZC_ERR_BUFFER_TOO_SMALL.
 *
 * Deadlines and failures. zc_ucx_wait and zc_ucx_waitall give up after the
 * configuration's timeout_s (ZIPCCL_TIMEOUT_S) with ZC_ERR_TIMEOUT. Endpoints
 * use UCX's peer error handling (UCP_ERR_HANDLING_MODE_PEER) unless
 * ZIPCCL_UCX_PEER_ERRORS=0: when a peer dies (connection reset, keepalive
 * failure) every request to or from it completes with ZC_ERR_PEER at the next
 * progress, without waiting for the deadline. The error is logged once per
 * dead peer, a timeout once per wait, each where it is found, with the peer,
 * the operation, its size and tag and the caller's name for the wait:
 *   "ucx: peer 3 failed (Connection reset by remote peer) during recv of
 *    4194304 bytes tag 0x5 in allreduce step 2"
 * A communicator that saw a failure stays usable for the other peers.
 *
 * The price of peer error handling in UCX 1.13: only transports that report
 * peer failures qualify, so ranks on one host talk over tcp loopback instead of
 * shared memory and CMA (ZIPCCL_UCX_PEER_ERRORS=0 gets those back, and leaves
 * a dead peer to the deadline).
 *
 * Threads. The context is shared and thread safe. A worker, with its
 * endpoints, operations and communicator, must be used by one thread at a time
 * (UCS_THREAD_MODE_SERIALIZED); different workers may be driven by different
 * threads concurrently. A caller that drives one worker from several threads
 * serializes them with the worker's mutex (zc_ucx_worker_lock). Completion
 * and endpoint-error callbacks run inside progress, on that thread.
 */
#ifndef ZC_TRANSPORT_UCX_H
#define ZC_TRANSPORT_UCX_H

#include "common/config.h"
#include "transport/bootstrap/bootstrap.h"

#include <zipccl/zipccl_status.h>

#include <stddef.h>
#include <stdint.h>

#define ZC_UCX_TAG_BITS 44
#define ZC_UCX_RANK_BITS 20
/* The largest tag a caller may use. */
#define ZC_UCX_TAG_MAX ((UINT64_C(1) << ZC_UCX_TAG_BITS) - 1)
/* The most ranks a communicator may have. */
#define ZC_UCX_MAX_RANKS (1 << ZC_UCX_RANK_BITS)

/* ---- workers, endpoints, tagged operations ---- */

typedef struct zc_ucx_worker zc_ucx_worker_t;
typedef struct zc_ucx_ep zc_ucx_ep_t;
typedef struct zc_ucx_op zc_ucx_op_t;
typedef struct zc_ucx_closing zc_ucx_closing_t;

/*
 * Creates a worker (named @p name in UCX's diagnostics) on the process's UCP
 * context, taking a reference on the context (created on first use, thread
 * safe), and reads its address. Errors: ZC_ERR_INVALID_ARG (NULL
 * @p worker_p), UCX's converted (logged). On error *worker_p is untouched.
 */
zc_status_t zc_ucx_worker_create(const char *name, zc_ucx_worker_t **worker_p);

/*
 * Detaches the operations still in flight (as zc_ucx_op_detach), destroys the
 * worker and releases the context reference. Endpoints must have been closed.
 * NULL is allowed.
 */
void zc_ucx_worker_destroy(zc_ucx_worker_t *worker);

/* The worker's address for peers' zc_ucx_ep_create; owned by the worker, freed with it. */
const void *zc_ucx_worker_address(const zc_ucx_worker_t *worker, size_t *len_p);

/*
 * Progresses the worker once: completes operations (running their callbacks)
 * and endpoint errors (running their handlers). Returns the number of UCX
 * events processed (0: nothing happened). Never blocks.
 */
unsigned zc_ucx_worker_progress(zc_ucx_worker_t *worker);

/*
 * Sleeping instead of polling (UCP_FEATURE_WAKEUP). A waiter progresses the
 * worker until a round finds nothing, then arms it: ZC_OK means nothing is
 * pending and its descriptor (zc_ucx_worker_fd) becomes readable at the next
 * event (a message or a send completion, a peer failure, UCX's own traffic);
 * ZC_INPROGRESS means events are pending (progress again, do not sleep);
 * ZC_ERR_UNSUPPORTED means this worker cannot wake a sleeper (a UCX or a
 * transport without wakeup support): the caller polls, as it would without
 * wakeup. Same thread rules as progress.
 */
zc_status_t zc_ucx_worker_arm(zc_ucx_worker_t *worker);
/* The worker's event descriptor (readable once an armed worker has events), or -1: none. */
int zc_ucx_worker_fd(const zc_ucx_worker_t *worker);

/* The most workers one sleep watches. */
#define ZC_UCX_SLEEP_MAX 4

/*
 * How a waiter waits (zc_ucx_waitall, and the collectives' waits): it polls
 * (progress, sched_yield between rounds that found nothing) for ZC_UCX_SPIN_NS
 * after the last round that moved something, then sleeps (zc_ucx_worker_sleep)
 * for at most ZC_UCX_SLEEP_MAX_NS at a time. 0.5 ms: the gaps inside a call (a
 * reply on its way, a peer's next chunk) are shorter and waking costs more
 * than them; with 50 us, QSGD's all-gather of 64 MiB at 1 Gbit/s ran 6-13%
 * slower than polling on a quiet machine, with 0.5 ms 2-6% (docs/results.md).
 * 100 ms: well under the 1 s gap a collective forgives a caller that stayed
 * away, and often enough for UCX's timers (keepalive).
 */
#define ZC_UCX_SPIN_NS 500000ull
#define ZC_UCX_SLEEP_MAX_NS 100000000ull

/*
 * Arms the @p n (1..ZC_UCX_SLEEP_MAX) workers and sleeps until one has an event
 * or @p timeout_ns passes (a signal may end it sooner). Returns ZC_OK after
 * sleeping; without sleeping, the first arm's ZC_INPROGRESS (events pending:
 * progress) or ZC_ERR_UNSUPPORTED (poll instead); ZC_ERR_IO when poll fails.
 * Each worker must have been progressed until it found nothing, on this thread.
 */
zc_status_t zc_ucx_worker_sleep(zc_ucx_worker_t *const *workers, size_t n, uint64_t timeout_ns);

/*
 * The worker's mutex, for callers that drive it from several threads: every
 * call on the worker, its endpoints and operations then holds it, so that
 * callbacks run with it held. Not recursive.
 */
void zc_ucx_worker_lock(zc_ucx_worker_t *worker);
void zc_ucx_worker_unlock(zc_ucx_worker_t *worker);

/*
 * An endpoint's failure, reported once, inside progress: @p status is
 * ZC_ERR_PEER for a dead or closed peer (else UCX's error converted), @p reason
 * UCX's words for it (static storage). The handler only records it: it must
 * not close the endpoint or destroy the worker.
 */
typedef void (*zc_ucx_ep_error_fn)(void *arg, zc_status_t status, const char *reason);

/*
 * Creates an endpoint on @p worker to the worker whose address is @p addr
 * (zc_ucx_worker_address on the peer, @p len bytes). With @p on_error, UCX's
 * peer error handling (UCP_ERR_HANDLING_MODE_PEER) is on and @p on_error(@p
 * arg, ...) reports the peer's failure; with NULL it is off (UCX may then use
 * transports that cannot report failures, such as shared memory). Errors:
 * ZC_ERR_INVALID_ARG, UCX's converted (not logged: the caller names the peer).
 */
zc_status_t zc_ucx_ep_create(zc_ucx_worker_t *worker, const void *addr, size_t len,
                             zc_ucx_ep_error_fn on_error, void *arg, zc_ucx_ep_t **ep_p);

/*
 * Starts closing @p ep (flushing its sends, or at once with @p force: a failed
 * endpoint cannot be flushed) and frees it; the error handler no longer runs.
 * Returns NULL when the close is done, else the close in progress, which
 * zc_ucx_closing_done polls (progress the worker meanwhile) and
 * zc_ucx_closing_abandon gives up on. NULL @p ep returns NULL.
 */
zc_ucx_closing_t *zc_ucx_ep_close(zc_ucx_ep_t *ep, int force);
/* 1 (and @p closing freed) once the close completed, else 0. */
int zc_ucx_closing_done(zc_ucx_closing_t *closing);
/* Stops waiting for @p closing (freed; UCX finishes on its own). NULL is allowed. */
void zc_ucx_closing_abandon(zc_ucx_closing_t *closing);

/*
 * Logs at debug level, line by line, which transports UCX chose for @p ep
 * (UCX's own description), each line as "<prefix>: <line>". Nothing when
 * debug logging is off.
 */
void zc_ucx_ep_log_transports(const zc_ucx_ep_t *ep, const char *prefix);

/* Completion callback of an operation: @p op->status, length and reason are final. */
typedef void (*zc_ucx_op_fn)(zc_ucx_op_t *op, void *arg);

/*
 * A tagged send or receive, in storage the caller owns, valid and unmoved
 * while status is ZC_INPROGRESS (until it completes or is detached).
 */
struct zc_ucx_op {
    zc_status_t status; /* ZC_INPROGRESS, then the final status */
    size_t length;      /* once ZC_OK: bytes received (receive) or sent (send) */
    const char *reason; /* once failed: UCX's words for it (static storage) */

    /* private to transport/ucx */
    void *handle; /* UCX's request while in flight */
    zc_ucx_worker_t *worker;
    zc_ucx_op_fn done;
    void *done_arg;
};

/*
 * Starts sending @p len bytes at @p buf on @p ep with the UCP tag @p tag (all
 * 64 bits are the caller's). @p buf must stay valid and unchanged until the
 * operation completes (or, once detached, until the worker is destroyed).
 * Returns ZC_OK when started; op->status says whether it already completed
 * (@p done then ran before this returns). Errors, with nothing started and
 * @p done not run: ZC_ERR_INVALID_ARG, UCX's converted (op->status and
 * op->reason say it; not logged).
 */
zc_status_t zc_ucx_op_send(zc_ucx_ep_t *ep, uint64_t tag, const void *buf, size_t len,
                           zc_ucx_op_fn done, void *arg, zc_ucx_op_t *op);

/*
 * Starts receiving up to @p len bytes into @p buf on @p worker, matching the
 * UCP tag @p tag exactly (a tag receive has no source: the tag must say who
 * sends). Completes with op->length the message's size, ZC_ERR_BUFFER_TOO_SMALL
 * when it was longer, ZC_ERR_PEER when UCX cancelled it (the sender of a
 * rendezvous it matched is gone, or zc_ucx_op_cancel). A message that already
 * arrived may complete it inside this call. Errors as zc_ucx_op_send.
 */
zc_status_t zc_ucx_op_recv(zc_ucx_worker_t *worker, uint64_t tag, void *buf, size_t len,
                           zc_ucx_op_fn done, void *arg, zc_ucx_op_t *op);

/*
 * Asks UCX to cancel a receive in flight: it completes (callback included),
 * with ZC_ERR_PEER, inside this call or a later progress; a message already
 * being received may still complete it with ZC_OK. Sends cannot be cancelled:
 * nothing happens to them, nor to completed operations.
 */
void zc_ucx_op_cancel(zc_ucx_op_t *op);

/*
 * Gives up on @p op if it is in flight: its callback will not run and its
 * storage is free again at once; a receive is cancelled. UCX may still read a
 * send's buffer, or write a receive's buffer that was already being filled,
 * until the operation ends inside UCX or the worker is destroyed.
 * op->status is left ZC_INPROGRESS for the caller to set.
 */
void zc_ucx_op_detach(zc_ucx_op_t *op);

/*
 * Detaches every operation in flight on @p worker for which @p match(op, arg)
 * returns nonzero, then completes each with @p status and @p reason, running
 * its callback (which may post new operations). Returns how many.
 */
size_t zc_ucx_worker_fail_ops(zc_ucx_worker_t *worker, int (*match)(zc_ucx_op_t *op, void *arg),
                              void *arg, zc_status_t status, const char *reason);

/* ---- communicators ---- */

typedef struct zc_ucx_comm zc_ucx_comm_t;
typedef struct zc_ucx_req zc_ucx_req_t;

/*
 * Completion callback: runs once per request, when it completes with success
 * or error, with req->status and req->length already final. It runs on the
 * thread that drives the communicator: inside zc_ucx_progress, zc_ucx_test,
 * zc_ucx_wait(all), zc_ucx_comm_destroy, or inside zc_ucx_isend/irecv itself
 * when the operation completes at once. It may reuse or free @p req's storage
 * and may post new operations on the communicator; it must not destroy it.
 */
typedef void (*zc_ucx_done_fn)(zc_ucx_req_t *req, void *arg);

/*
 * A send or receive, in storage the caller owns. zc_ucx_isend/irecv fill every
 * field; the caller reads status and length. The storage must stay valid (and
 * unmoved) while status is ZC_INPROGRESS, that is until the request completes,
 * a wait on it returns, or the communicator is destroyed.
 */
struct zc_ucx_req {
    zc_status_t status; /* ZC_INPROGRESS, then the final status */
    size_t length;      /* once ZC_OK: bytes received (recv) or sent (send) */

    /* private to transport/ucx */
    zc_ucx_op_t op; /* the operation underneath */
    zc_ucx_comm_t *comm;
    zc_ucx_done_fn done;
    void *done_arg;
    uint64_t tag;
    size_t len;
    int peer;
    int is_recv;
};

/*
 * Collective over @p bs (every rank calls it): takes a reference on the
 * process's UCP context (created on first use, thread safe), creates a worker,
 * allgathers the worker addresses through @p bs and creates an endpoint to
 * every rank with peer error handling. The communicator has bs->rank and
 * bs->size; @p bs is not kept. @p cfg gives the deadline of every wait
 * (timeout_s) and is copied.
 *
 * Errors: ZC_ERR_INVALID_ARG (NULL, more than ZC_UCX_MAX_RANKS ranks), the
 * bootstrap's error, or UCX's converted (ZC_ERR_NO_MEMORY, ZC_ERR_IO, ...),
 * logged once. On error @p comm_p is untouched.
 */
zc_status_t zc_ucx_comm_create(const zc_config_t *cfg, zc_bootstrap_t *bs, zc_ucx_comm_t **comm_p);

/*
 * Closes the endpoints (flushing them when the communicator saw no failure,
 * else forcing them closed), abandons requests still in flight (their
 * callbacks do not run, their storage is not touched again), destroys the
 * worker and releases the context reference. Local: no other rank need call it
 * at the same time. NULL is allowed.
 */
void zc_ucx_comm_destroy(zc_ucx_comm_t *comm);

int zc_ucx_comm_rank(const zc_ucx_comm_t *comm);
int zc_ucx_comm_size(const zc_ucx_comm_t *comm);

/*
 * Starts sending @p len bytes at @p buf to rank @p peer with tag @p tag
 * (0..ZC_UCX_TAG_MAX). @p buf must stay valid and unchanged until the request
 * completes. Sizes from 0 bytes to gigabytes; UCX picks eager or rendezvous.
 *
 * Returns ZC_OK when the request was started; req->status then says whether
 * it already completed (a send may finish at once, its callback then runs
 * before this returns). Errors, with nothing started and nothing to wait for:
 * ZC_ERR_INVALID_ARG (NULL comm/req, NULL buf with len > 0, peer out of range,
 * tag > ZC_UCX_TAG_MAX: @p req untouched), ZC_ERR_PEER (the peer has failed),
 * or UCX's error converted (logged).
 */
zc_status_t zc_ucx_isend(zc_ucx_comm_t *comm, int peer, uint64_t tag, const void *buf, size_t len,
                         zc_ucx_req_t *req);

/*
 * Starts receiving up to @p len bytes into @p buf from rank @p peer with tag
 * @p tag. Completes with req->length the size of the message, or with
 * ZC_ERR_BUFFER_TOO_SMALL when the message was longer than @p len. A message
 * that already arrived completes the receive inside this call. Arguments and
 * errors as zc_ucx_isend.
 */
zc_status_t zc_ucx_irecv(zc_ucx_comm_t *comm, int peer, uint64_t tag, void *buf, size_t len,
                         zc_ucx_req_t *req);

/* zc_ucx_isend / zc_ucx_irecv with a completion callback @p done (may be NULL). */
zc_status_t zc_ucx_isend_cb(zc_ucx_comm_t *comm, int peer, uint64_t tag, const void *buf,
                            size_t len, zc_ucx_done_fn done, void *arg, zc_ucx_req_t *req);
zc_status_t zc_ucx_irecv_cb(zc_ucx_comm_t *comm, int peer, uint64_t tag, void *buf, size_t len,
                            zc_ucx_done_fn done, void *arg, zc_ucx_req_t *req);

/*
 * Progresses the worker once: completes requests (running their callbacks),
 * and fails the requests of peers UCX reported dead. Returns the number of UCX
 * events processed (0: nothing happened). Never blocks.
 */
unsigned zc_ucx_progress(zc_ucx_comm_t *comm);

/*
 * The number of requests of @p comm that completed successfully so far: data
 * of the caller's moved. UCX's own traffic (keepalive, wireup) does not count,
 * so a deadline measured from the last change is one on the caller's
 * transfers, not on UCX's (whose keepalive makes progress every 20 s even
 * with a stalled peer).
 */
uint64_t zc_ucx_completed(const zc_ucx_comm_t *comm);

/* The number of requests of @p comm started so far (isend, irecv). */
uint64_t zc_ucx_posted(const zc_ucx_comm_t *comm);

/* @p comm's worker, for zc_ucx_worker_sleep. */
zc_ucx_worker_t *zc_ucx_comm_worker(const zc_ucx_comm_t *comm);

/*
 * From now on, failed requests of @p comm are not logged: its user has given
 * up on it and said why, and the peers that leave next (closing their
 * connections) are not news. Requests still fail as before.
 */
void zc_ucx_set_quiet(zc_ucx_comm_t *comm);

/* Whether UCX reported rank @p peer failed (its endpoint's error handler ran). */
int zc_ucx_peer_failed(const zc_ucx_comm_t *comm, int peer);

/*
 * Progresses once and returns req->status: ZC_INPROGRESS while in flight, else
 * the final status (ZC_OK, ZC_ERR_PEER, ZC_ERR_BUFFER_TOO_SMALL, ...).
 */
zc_status_t zc_ucx_test(zc_ucx_comm_t *comm, zc_ucx_req_t *req);

/*
 * Progresses the worker until @p req completes, its peer fails, or timeout_s
 * seconds pass. @p what names the caller's operation for the error message
 * ("allgather step 2"; NULL: none). Returns the request's final status, or
 * ZC_ERR_TIMEOUT after logging "ucx: recv of N bytes tag 0x.. from peer P timed
 * out after T s in <what>". A request that timed out is abandoned: its status
 * becomes ZC_ERR_TIMEOUT, its callback does not run, its storage is free again;
 * UCX may still read a send buffer, or write a receive buffer that was already
 * being filled, until the communicator is destroyed.
 */
zc_status_t zc_ucx_wait(zc_ucx_comm_t *comm, zc_ucx_req_t *req, const char *what);

/*
 * Gives up on @p req if it is still in flight: it gets @p status, its callback
 * does not run and its storage is free again (a receive is cancelled; UCX may
 * still read a send buffer until the communicator is destroyed). A completed
 * request is left alone.
 */
void zc_ucx_abandon(zc_ucx_comm_t *comm, zc_ucx_req_t *req, zc_status_t status);

/*
 * Waits for all @p n requests under one deadline. Returns ZC_OK when every one
 * succeeded. On the first failure (an error status, a dead peer, the deadline)
 * it stops waiting and returns that error; the requests still in flight are
 * abandoned as in zc_ucx_wait, with that status. When it returns, none of the
 * requests is in flight.
 */
zc_status_t zc_ucx_waitall(zc_ucx_comm_t *comm, zc_ucx_req_t *reqs, size_t n, const char *what);

#endif
