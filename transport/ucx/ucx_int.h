/* Internals of the UCX transport, shared by its source files. */
#ifndef ZC_TRANSPORT_UCX_INT_H
#define ZC_TRANSPORT_UCX_INT_H

#include "transport/ucx/ucx.h"

#include <ucp/api/ucp.h>

/*
 * UCX's side of a request: the space UCX reserves in every request it
 * allocates (ucp_params_t.request_size), at the address nbx calls return.
 * It outlives the caller's zc_ucx_req_t when a request is abandoned: the
 * completion callback then only unlinks and frees it.
 */
typedef struct zc_ucx_ureq {
    zc_ucx_req_t *owner; /* NULL once abandoned */
    zc_ucx_comm_t *comm;
    struct zc_ucx_ureq *prev, *next; /* the communicator's in-flight list */
    int peer;
    int is_recv;
} zc_ucx_ureq_t;

typedef struct zc_ucx_peer {
    zc_ucx_comm_t *comm;
    ucp_ep_h ep;
    int rank;
    ucs_status_t error; /* UCS_OK, or what UCX's error handler reported */
    int reported;       /* a request failed because of it and that was logged */
} zc_ucx_peer_t;

struct zc_ucx_comm {
    ucp_context_h context;
    ucp_worker_h worker;
    zc_ucx_peer_t *peers;
    int rank;
    int size;
    int64_t timeout_s;
    int peer_errors;         /* endpoints in UCP_ERR_HANDLING_MODE_PEER (ZIPCCL_UCX_PEER_ERRORS) */
    zc_ucx_ureq_t *inflight; /* head of the list of UCX requests not yet completed */
    int failure_pending;     /* an endpoint failed since the last progress */
    int saw_failure;         /* a peer failed or a request was abandoned: close by force */
    const char *what;        /* the caller's operation of the wait in progress, or NULL */
    zc_ucx_req_t *posting;   /* the receive being posted (request.c: post_recv) */
    uint64_t completed;      /* requests completed successfully (zc_ucx_completed) */
    int quiet;               /* zc_ucx_set_quiet: failures are no longer logged */
};

/* The one conversion from ucs_status_t. */
zc_status_t zc_ucx_status(ucs_status_t status);

/*
 * Takes a reference on the process's UCP context, creating it on first use.
 * Thread safe. Errors are logged.
 */
zc_status_t zc_ucx_context_get(ucp_context_h *context_p);
void zc_ucx_context_put(void);

/* The UCP tag of a message from @p sender with the caller's @p tag. */
static inline ucp_tag_t zc_ucx_tag(int sender, uint64_t tag)
{
    return ((ucp_tag_t)sender << ZC_UCX_TAG_BITS) | tag;
}

/* request.c: what comm.c needs of it */
void zc_ucx_abandon_all(zc_ucx_comm_t *comm);
void zc_ucx_fail_peers(zc_ucx_comm_t *comm);

#endif
