/* Internals of the UCX transport, shared by its source files. */
#ifndef ZC_TRANSPORT_UCX_INT_H
#define ZC_TRANSPORT_UCX_INT_H

#include "transport/ucx/ucx.h"

#include <ucp/api/ucp.h>

#include <pthread.h>

/*
 * UCX's side of an operation: the space UCX reserves in every request it
 * allocates (ucp_params_t.request_size), at the address nbx calls return.
 * It outlives the caller's zc_ucx_op_t when the operation is detached: the
 * completion callback then only unlinks and frees it.
 */
typedef struct zc_ucx_ureq {
    zc_ucx_op_t *owner; /* NULL once detached */
    zc_ucx_worker_t *worker;
    struct zc_ucx_ureq *prev, *next; /* the worker's in-flight list */
    int is_recv;
} zc_ucx_ureq_t;

struct zc_ucx_worker {
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *addr;
    size_t addr_len;
    pthread_mutex_t lock;
    int efd; /* ucp_worker_get_efd's descriptor, or -1: waits poll (zc_ucx_worker_sleep) */
    zc_ucx_ureq_t *inflight; /* head of the list of UCX requests not yet completed */
    zc_ucx_op_t *posting;    /* the receive being posted (op.c: zc_ucx_op_recv) */
};

struct zc_ucx_ep {
    zc_ucx_worker_t *worker;
    ucp_ep_h ep;
    zc_ucx_ep_error_fn on_error; /* NULL once closing */
    void *arg;
    void *closing; /* UCX's close request: zc_ucx_closing_t is the endpoint being closed */
};

typedef struct zc_ucx_peer {
    zc_ucx_comm_t *comm;
    zc_ucx_ep_t *ep;
    int rank;
    zc_status_t error;  /* ZC_OK, or what the endpoint's error handler reported */
    const char *reason; /* UCX's words for the error */
    int reported;       /* a request failed because of it and that was logged */
} zc_ucx_peer_t;

struct zc_ucx_comm {
    zc_ucx_worker_t *worker;
    zc_ucx_peer_t *peers;
    int rank;
    int size;
    int64_t timeout_s;
    int peer_errors;     /* endpoints in UCP_ERR_HANDLING_MODE_PEER (ZIPCCL_UCX_PEER_ERRORS) */
    int failure_pending; /* an endpoint failed since the last progress */
    int saw_failure;     /* a peer failed or a request was abandoned: close by force */
    const char *what;    /* the caller's operation of the wait in progress, or NULL */
    uint64_t completed;  /* requests completed successfully (zc_ucx_completed) */
    uint64_t posted;     /* requests started (zc_ucx_posted) */
    int quiet;           /* zc_ucx_set_quiet: failures are no longer logged */
};

/* The one conversion from ucs_status_t. */
zc_status_t zc_ucx_status(ucs_status_t status);

/*
 * Takes a reference on the process's UCP context, creating it on first use;
 * *wakeup_p says whether it has UCP_FEATURE_WAKEUP. Thread safe. Errors are
 * logged.
 */
zc_status_t zc_ucx_context_get(ucp_context_h *context_p, int *wakeup_p);
void zc_ucx_context_put(void);

/* The UCP tag of a message from @p sender with the caller's @p tag. */
static inline uint64_t zc_ucx_tag(int sender, uint64_t tag)
{
    return ((uint64_t)sender << ZC_UCX_TAG_BITS) | tag;
}

/*
 * op.c: detaches every operation in flight without touching its owner's
 * storage (which may be gone); receives are cancelled. Returns how many.
 */
size_t zc_ucx_worker_detach_all(zc_ucx_worker_t *worker);

/* request.c: what comm.c needs of it */
void zc_ucx_fail_peers(zc_ucx_comm_t *comm);

#endif
