/*
 * ncclNet v11 over UCX: NCCL's point-to-point traffic between nodes.
 *
 * Objects. A plugin context (init) holds one UCP worker on the process's
 * shared UCP context (transport/ucx, refcounted). Its comms and their requests
 * all progress that worker. NCCL calls listen/connect/accept/regMr/close* from
 * its service thread and isend/irecv/test from its progress thread, so the
 * worker is UCS_THREAD_MODE_SERIALIZED and every entry point takes the
 * context's mutex: UCX callbacks (completions, endpoint errors) run inside
 * ucp_worker_progress, with the mutex held.
 *
 * Connections. A TCP handshake exchanges UCX worker addresses, as NCCL's own
 * transports and zipccl's bootstrap do. listen opens a nonblocking listening
 * socket on the device's address, port 0, and writes into NCCL's 128-byte
 * handle a compact address (family, port, 16 address bytes), a magic and a
 * 32-bit connection id unique within the listening worker. connect (on the
 * peer) connects to it and sends a hello (magic, id, its worker address);
 * accept takes the socket, checks the hello, answers with its own worker
 * address and closes the socket (it runs up to NET_MAX_PENDING handshakes at
 * once and drops those that fail, so a stranger holds up nobody). Both are
 * resumable, return NULL until done, and give up after ZIPCCL_TIMEOUT_S;
 * connect keeps the sendComm being built in the handle bytes (NCCL calls
 * again with the same buffer). Each side then holds a UCP endpoint to the
 * other's worker with peer error handling: the sender's carries the data, the
 * receiver's only learns when the sender dies. Why not UCX's client/server
 * endpoints (ucp_listener), which a first version used: UCX 1.13 gives them
 * tcp "rma" lanes on every interface and rendezvous over those from 8 KiB (4x
 * slower than worker-address endpoints at 64 KiB on loopback in
 * bench/nccl_net_bench.c), and closing some while others between the same two
 * processes were being set up failed the new ones ("Connection reset by
 * remote peer") in a few percent of runs of tests/plugin/net's threads case.
 * Worker-address endpoints are what zipccl's transport uses.
 *
 * Data. UCP tag send/recv with the 64-bit tag (id << 32 | NCCL tag) so that
 * messages of different connections never match. UCX keeps the order of one
 * endpoint's messages with one tag, which is NCCL's order. maxRecvs is 1:
 * irecv with n != 1 fails. Each comm has NCCL_NET_MAX_REQUESTS request
 * slots; with all in flight isend and irecv answer *request = NULL (try
 * again). test reports the received size. Memory registration is only a
 * cookie (host memory: UCX registers what its transports need and caches it);
 * NCCL_PTR_CUDA fails, as ptrSupport is HOST. iflush has nothing to flush.
 *
 * Failures. A peer that dies or closes fails the endpoint (UCX peer error
 * handling, unless ZIPCCL_UCX_PEER_ERRORS=0). Its sends fail in UCX; its
 * receives cannot (a tag receive has no source), so test cancels a receive
 * still pending once the endpoint failed, after draining the worker: data the
 * peer sent before it went away arrives before its disconnection. test then
 * returns ncclRemoteError and logs the peer's address once per comm. With
 * ZIPCCL_UCX_PEER_ERRORS=0 nothing reports a dead peer, so a request then
 * fails after ZIPCCL_TIMEOUT_S instead; with peer errors on, a transfer waits
 * as long as NCCL does (ranks may reach a collective minutes apart). Closing
 * a comm flushes its endpoint (forcing it when the peer failed) within
 * ZIPCCL_TIMEOUT_S, then leaves it to UCX; without peer error handling it
 * does not wait for a failed peer's transfers, which would never complete.
 */
#include "common/log.h"
#include "common/timer.h"
#include "plugin/nccl/plugin.h"
#include "transport/ucx/ucx_int.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define NET_MAGIC_CTX 0x7a636e6574637478ull    /* "zcnetctx" */
#define NET_MAGIC_HANDLE 0x7a636e657468646cull /* "zcnethdl" */
#define NET_MAGIC_HELLO 0x7a636e657468656cull  /* "zcnethel" */
#define NET_MAGIC_COMM 0x7a636e6574636f6dull   /* "zcnetcom" */
#define NET_MAGIC_MR 0x7a636e65746d7268ull     /* "zcnetmrh" */
#define NET_MAGIC_DEAD 0xdeadull

#define NET_CONN_ID_MAX 0x7fffffffu
#define NET_ADDR_LEN 64
#define NET_WORKER_ADDR_MAX 8192 /* worker addresses of hosts with many devices stay far below */
#define NET_MAX_PENDING 4 /* handshakes a listener runs at once: a silent stranger blocks none */

/* What NCCL carries from listen to connect; the stage is the connector's only. */
typedef struct net_handle {
    uint64_t magic;
    uint32_t conn_id;
    uint16_t family; /* AF_INET or AF_INET6 */
    uint16_t port;   /* network byte order */
    uint8_t addr[16];
    struct net_comm *stage; /* the sendComm connect is building, NULL before */
} net_handle_t;
_Static_assert(sizeof(net_handle_t) <= NCCL_NET_HANDLE_MAXSIZE, "handle exceeds NCCL's 128 bytes");

/* Each side's handshake message, followed by addr_len bytes of UCX worker address. */
typedef struct net_hello {
    uint64_t magic;
    uint32_t conn_id;
    uint32_t addr_len;
} net_hello_t;

typedef struct net_ctx {
    uint64_t magic;
    pthread_mutex_t lock;
    ucp_context_h context;
    ucp_worker_h worker;
    ucp_address_t *addr; /* the worker's, for handshakes */
    size_t addr_len;
    zc_config_t cfg;
    uint64_t comm_id;
    int traffic_class;
    uint32_t next_conn_id;
    int refs; /* NCCL's (until finalize) and one per listen/send/recv comm */
} net_ctx_t;

typedef enum net_kind { NET_LISTEN = 1, NET_SEND, NET_RECV } net_kind_t;

typedef struct net_comm net_comm_t;

/* A request slot: free when neither NCCL holds it nor UCX still works on it. */
typedef struct net_req {
    net_comm_t *comm;
    void *ucx; /* the UCX request in flight, NULL once it completed */
    int used;  /* handed to NCCL, not yet reported done */
    int done;
    int is_recv;
    int tag;
    ucs_status_t status;
    size_t size; /* posted size, then the received length */
    uint64_t start_ns;
} net_req_t;

/* A handshake in progress: our hello going out, the peer's coming in. */
typedef struct net_shake {
    int fd;
    int connected;
    char peer[NET_ADDR_LEN]; /* the other side's address, for messages */
    uint64_t deadline_ns;
    uint8_t *out;
    size_t out_len, out_off;
    uint8_t *in;
    size_t in_len, in_off; /* in_len: the header's size until the header is in */
} net_shake_t;

struct net_comm {
    uint64_t magic;
    net_kind_t kind;
    net_ctx_t *ctx;
    int dev;
    uint32_t conn_id;
    char peer[NET_ADDR_LEN];              /* for messages: the other side's address */
    int fd;                               /* listen: the listening socket */
    net_shake_t shake;                    /* send: until connected */
    net_shake_t pending[NET_MAX_PENDING]; /* listen: handshakes with connectors */
    ucp_ep_h ep;            /* to the peer's worker: data (send) or failure notice (recv) */
    ucs_status_t ep_status; /* UCS_OK, or what the endpoint's error handler reported */
    int reported;           /* the failure was logged */
    net_req_t reqs[NCCL_NET_MAX_REQUESTS];
    net_comm_t *recv; /* listen: the recvComm accept hands out, NULL once handed out */
};

typedef struct net_mr {
    uint64_t magic;
    void *data;
    size_t size;
} net_mr_t;

static ucp_tag_t data_tag(uint32_t conn_id, int tag)
{
    return ((uint64_t)conn_id << 32) | (uint32_t)tag;
}

static void format_addr(const struct sockaddr *sa, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN] = "?";

    if (sa->sa_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &in->sin_addr, host, sizeof(host));
        snprintf(buf, len, "%s:%u", host, ntohs(in->sin_port));
    } else if (sa->sa_family == AF_INET6) {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &in6->sin6_addr, host, sizeof(host));
        snprintf(buf, len, "[%s]:%u", host, ntohs(in6->sin6_port));
    } else {
        snprintf(buf, len, "(address family %d)", sa->sa_family);
    }
}

static net_ctx_t *ctx_of(void *ctx)
{
    net_ctx_t *c = ctx;
    return c && c->magic == NET_MAGIC_CTX ? c : NULL;
}

static net_comm_t *comm_of(void *comm, net_kind_t kind)
{
    net_comm_t *c = comm;
    return c && c->magic == NET_MAGIC_COMM && (kind == 0 || c->kind == kind) ? c : NULL;
}

static void ctx_destroy(net_ctx_t *ctx)
{
    if (ctx->addr)
        ucp_worker_release_address(ctx->worker, ctx->addr);
    if (ctx->worker)
        ucp_worker_destroy(ctx->worker);
    if (ctx->context)
        zc_ucx_context_put();
    pthread_mutex_destroy(&ctx->lock);
    ctx->magic = NET_MAGIC_DEAD;
    free(ctx);
}

/* Drops a reference; the caller holds the lock, which this releases. */
static void ctx_unref_unlock(net_ctx_t *ctx)
{
    int last = --ctx->refs == 0;
    pthread_mutex_unlock(&ctx->lock);
    if (last)
        ctx_destroy(ctx);
}

/* Progresses until the worker is idle (bounded: a busy peer cannot hold us here). */
static void progress(net_ctx_t *ctx)
{
    for (int i = 0; i < 64 && ucp_worker_progress(ctx->worker) != 0; i++)
        ;
}

static void send_done(void *request, ucs_status_t status, void *user_data)
{
    net_req_t *req = user_data;

    req->status = status;
    req->done = 1;
    req->ucx = NULL;
    ucp_request_free(request);
}

static void recv_done(void *request, ucs_status_t status, const ucp_tag_recv_info_t *info,
                      void *user_data)
{
    net_req_t *req = user_data;

    req->status = status;
    if (status == UCS_OK)
        req->size = info->length;
    req->done = 1;
    req->ucx = NULL;
    ucp_request_free(request);
}

static void ep_failed(void *arg, ucp_ep_h ep, ucs_status_t status)
{
    net_comm_t *comm = arg;

    /* Inside progress: record only. The peer may simply have closed its side. */
    if (comm->ep_status == UCS_OK)
        comm->ep_status = status;
    ZC_DEBUG("net: connection %u with %s ended: %s", comm->conn_id, comm->peer,
             ucs_status_string(status));
}

static void req_start(net_req_t *req, net_comm_t *comm, int is_recv, int tag, size_t size)
{
    req->comm = comm;
    req->ucx = NULL;
    req->used = 1;
    req->done = 0;
    req->is_recv = is_recv;
    req->tag = tag;
    req->status = UCS_INPROGRESS;
    req->size = size;
    req->start_ns = zc_time_ns();
}

/* Records what an nbx call returned: completed at once, in flight, or failed. */
static void req_posted(net_req_t *req, ucs_status_ptr_t sp)
{
    if (UCS_PTR_IS_PTR(sp)) {
        if (!req->done)
            req->ucx = sp;
        return;
    }
    req->status = UCS_PTR_STATUS(sp);
    req->done = 1;
}

static ucs_status_ptr_t post_send(ucp_ep_h ep, net_req_t *req, const void *data, size_t size,
                                  ucp_tag_t tag)
{
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA,
        .cb.send = send_done,
        .user_data = req,
    };
    return ucp_tag_send_nbx(ep, data, size, tag, &param);
}

static ucs_status_ptr_t post_recv(net_comm_t *comm, net_req_t *req, void *data, size_t size,
                                  ucp_tag_t tag)
{
    /*
     * No immediate completion: UCX 1.13 leaves recv_info untouched when a
     * receive completes inside ucp_tag_recv_nbx, so the size would be lost;
     * the callback always has it (and may run before this returns).
     */
    ucp_request_param_t param = {
        .op_attr_mask =
            UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA | UCP_OP_ATTR_FLAG_NO_IMM_CMPL,
        .cb.recv = recv_done,
        .user_data = req,
    };
    return ucp_tag_recv_nbx(comm->ctx->worker, data, size, tag, UINT64_MAX, &param);
}

static ucp_err_handling_mode_t err_mode(const net_ctx_t *ctx)
{
    return ctx->cfg.ucx_peer_errors ? UCP_ERR_HANDLING_MODE_PEER : UCP_ERR_HANDLING_MODE_NONE;
}

/* A new id in this worker's tag space. */
static uint32_t next_id(net_ctx_t *ctx)
{
    uint32_t id = ctx->next_conn_id;
    ctx->next_conn_id = id == NET_CONN_ID_MAX ? 1 : id + 1;
    return id;
}

static net_comm_t *comm_alloc(net_ctx_t *ctx, net_kind_t kind, int dev, uint32_t conn_id)
{
    net_comm_t *comm = calloc(1, sizeof(*comm));
    if (!comm) {
        ZC_ERROR("net: no memory for a connection");
        return NULL;
    }
    comm->magic = NET_MAGIC_COMM;
    comm->kind = kind;
    comm->ctx = ctx;
    comm->dev = dev;
    comm->conn_id = conn_id;
    comm->fd = -1;
    comm->shake.fd = -1;
    for (int i = 0; i < NET_MAX_PENDING; i++)
        comm->pending[i].fd = -1;
    comm->ep_status = UCS_OK;
    snprintf(comm->peer, sizeof(comm->peer), "(not connected)");
    return comm;
}

static void shake_end(net_shake_t *shake)
{
    if (shake->fd >= 0)
        close(shake->fd);
    shake->fd = -1;
    free(shake->out);
    free(shake->in);
    shake->out = shake->in = NULL;
}

static int comm_busy(const net_comm_t *comm)
{
    for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
        if (comm->reqs[i].ucx)
            return 1;
    return 0;
}

static void cancel_recvs(net_comm_t *comm)
{
    for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
        if (comm->reqs[i].ucx && comm->reqs[i].is_recv)
            ucp_request_cancel(comm->ctx->worker, comm->reqs[i].ucx);
}

/*
 * Closes the endpoint and waits for the comm's UCX requests within the
 * deadline; frees the comm unless UCX may still write into it. Called with
 * the lock held; drops the comm's reference on the context (and the lock).
 */
static void comm_close_unlock(net_comm_t *comm)
{
    net_ctx_t *ctx = comm->ctx;
    /* without peer error handling, UCX never completes the requests of a dead peer */
    int hopeless = comm->ep_status != UCS_OK && !ctx->cfg.ucx_peer_errors;
    uint64_t deadline =
        zc_time_ns() + (hopeless ? 0 : (uint64_t)ctx->cfg.timeout_s * 1000000000ull);
    void *close_req = NULL;

    shake_end(&comm->shake);
    cancel_recvs(comm);
    if (comm->ep) {
        ucp_request_param_t param = {
            .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
            .flags = comm->ep_status != UCS_OK ? UCP_EP_CLOSE_FLAG_FORCE : 0,
        };
        ucs_status_ptr_t sp = ucp_ep_close_nbx(comm->ep, &param);
        if (UCS_PTR_IS_PTR(sp))
            close_req = sp;
        comm->ep = NULL;
    }
    for (;;) {
        progress(ctx);
        if (close_req && ucp_request_check_status(close_req) != UCS_INPROGRESS) {
            ucp_request_free(close_req);
            close_req = NULL;
        }
        if (!close_req && !comm_busy(comm))
            break;
        if (zc_time_ns() > deadline) {
            if (!hopeless)
                ZC_WARN("net: closing the connection with %s did not finish within %lld s; "
                        "leaving it to UCX",
                        comm->peer, (long long)ctx->cfg.timeout_s);
            if (close_req)
                ucp_request_free(close_req);
            cancel_recvs(comm);
            progress(ctx);
            if (comm_busy(comm)) {
                /* UCX still owns requests inside the comm: keep its memory */
                comm->magic = NET_MAGIC_DEAD;
                ctx_unref_unlock(ctx);
                return;
            }
            break;
        }
        /* let the progress thread use the worker between our polls */
        pthread_mutex_unlock(&ctx->lock);
        sched_yield();
        pthread_mutex_lock(&ctx->lock);
    }
    comm->magic = NET_MAGIC_DEAD;
    free(comm);
    ctx_unref_unlock(ctx);
}

/* ---- init, devices, properties, finalize ---- */

ncclResult_t zc_net_init(void **ctx_p, uint64_t commId, ncclNetCommConfig_v11_t *config,
                         ncclDebugLogger_t logFunction, ncclProfilerCallback_t profFunction)
{
    if (!ctx_p)
        return ncclInternalError;
    ncclResult_t result = zc_nccl_setup(logFunction);
    if (result != ncclSuccess)
        return result;

    net_ctx_t *ctx = calloc(1, sizeof(*ctx));
    if (!ctx) {
        ZC_ERROR("net: no memory for a plugin context");
        return ncclSystemError;
    }
    ctx->magic = NET_MAGIC_CTX;
    pthread_mutex_init(&ctx->lock, NULL);
    ctx->cfg = *zc_nccl_config();
    ctx->comm_id = commId;
    ctx->traffic_class = config ? config->trafficClass : NCCL_NET_TRAFFIC_CLASS_UNDEF;
    ctx->next_conn_id = 1;
    ctx->refs = 1;

    zc_status_t status = zc_ucx_context_get(&ctx->context);
    if (status != ZC_OK) {
        ctx_destroy(ctx);
        return zc_nccl_result(status);
    }
    ucp_worker_params_t wparams = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_NAME,
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
        .name = "zipccl-net",
    };
    ucs_status_t ustatus = ucp_worker_create(ctx->context, &wparams, &ctx->worker);
    if (ustatus != UCS_OK) {
        ZC_ERROR("net: creating a UCP worker failed: %s", ucs_status_string(ustatus));
        ctx->worker = NULL;
        ctx_destroy(ctx);
        return zc_nccl_result(zc_ucx_status(ustatus));
    }
    ustatus = ucp_worker_get_address(ctx->worker, &ctx->addr, &ctx->addr_len);
    if (ustatus != UCS_OK || ctx->addr_len > NET_WORKER_ADDR_MAX) {
        ZC_ERROR("net: the UCP worker's address is unavailable (%s, %zu bytes)",
                 ucs_status_string(ustatus), ustatus == UCS_OK ? ctx->addr_len : 0);
        if (ustatus != UCS_OK)
            ctx->addr = NULL;
        ctx_destroy(ctx);
        return ncclSystemError;
    }
    ZC_INFO("net: plugin context for comm 0x%llx ready (%d devices)", (unsigned long long)commId,
            zc_nccl_ndevs());
    *ctx_p = ctx;
    return ncclSuccess;
}

ncclResult_t zc_net_devices(int *ndev)
{
    if (!ndev)
        return ncclInternalError;
    *ndev = zc_nccl_ndevs();
    return ncclSuccess;
}

ncclResult_t zc_net_get_properties(int dev, ncclNetProperties_v11_t *props)
{
    return zc_nccl_properties(dev, props);
}

ncclResult_t zc_net_finalize(void *ctx_arg)
{
    if (!ctx_arg)
        return ncclSuccess; /* NCCL finalizes a context whose init failed */
    net_ctx_t *ctx = ctx_of(ctx_arg);
    if (!ctx)
        return ncclInternalError;
    pthread_mutex_lock(&ctx->lock);
    ctx->magic = NET_MAGIC_DEAD; /* no new comms; open ones keep it alive */
    ctx_unref_unlock(ctx);
    return ncclSuccess;
}

/* ---- connection setup ---- */

/* Which transports UCX chose for an endpoint, at debug level: UCX's own description. */
static void log_transports(const net_comm_t *comm)
{
    char *text = NULL;
    size_t len = 0;

    if (!ZC_LOG_ENABLED(ZC_LOG_DEBUG))
        return;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    ucp_ep_print_info(comm->ep, f);
    fclose(f);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        ZC_DEBUG("net: to %s: %s", comm->peer, line);
    free(text);
}

/* Starts a handshake on connected (or connecting) @p fd: our hello out, the peer's expected. */
static ucs_status_t shake_start(net_ctx_t *ctx, uint32_t conn_id, net_shake_t *shake, int fd)
{
    net_hello_t hello = {
        .magic = NET_MAGIC_HELLO, .conn_id = conn_id, .addr_len = (uint32_t)ctx->addr_len};

    shake->fd = fd;
    shake->deadline_ns = zc_time_ns() + (uint64_t)ctx->cfg.timeout_s * 1000000000ull;
    shake->out_len = sizeof(hello) + ctx->addr_len;
    shake->out = malloc(shake->out_len);
    shake->in = malloc(sizeof(net_hello_t) + NET_WORKER_ADDR_MAX);
    if (!shake->out || !shake->in) {
        ZC_ERROR("net: no memory for a connection");
        return UCS_ERR_NO_MEMORY;
    }
    memcpy(shake->out, &hello, sizeof(hello));
    memcpy(shake->out + sizeof(hello), ctx->addr, ctx->addr_len);
    shake->in_len = sizeof(net_hello_t);
    return UCS_OK;
}

/*
 * Moves the handshake on without blocking: UCS_OK when both hellos crossed,
 * UCS_INPROGRESS while not, an error (logged) when it failed or timed out.
 */
static ucs_status_t shake_progress(net_ctx_t *ctx, uint32_t conn_id, net_shake_t *shake)
{
    const char *what = "the handshake";

    if (!shake->connected) {
        struct pollfd pfd = {.fd = shake->fd, .events = POLLOUT};
        int err = 0;
        socklen_t len = sizeof(err);
        if (poll(&pfd, 1, 0) == 0)
            goto pending;
        if (getsockopt(shake->fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0)
            err = errno;
        if (err != 0) {
            ZC_ERROR("net: connecting to %s failed: %s", shake->peer, strerror(err));
            return err == ECONNREFUSED || err == ECONNRESET ? UCS_ERR_UNREACHABLE
                                                            : UCS_ERR_IO_ERROR;
        }
        shake->connected = 1;
    }
    while (shake->out_off < shake->out_len) {
        ssize_t n = send(shake->fd, shake->out + shake->out_off, shake->out_len - shake->out_off,
                         MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n < 0) {
            what = strerror(errno);
            goto failed;
        }
        shake->out_off += (size_t)n;
    }
    while (shake->in_off < shake->in_len) {
        ssize_t n = recv(shake->fd, shake->in + shake->in_off, shake->in_len - shake->in_off, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            break;
        if (n <= 0) {
            what = n == 0 ? "the peer closed the connection" : strerror(errno);
            goto failed;
        }
        shake->in_off += (size_t)n;
        if (shake->in_off == sizeof(net_hello_t) && shake->in_len == sizeof(net_hello_t)) {
            const net_hello_t *hello = (const net_hello_t *)shake->in;
            if (hello->magic != NET_MAGIC_HELLO || hello->conn_id != conn_id ||
                hello->addr_len == 0 || hello->addr_len > NET_WORKER_ADDR_MAX) {
                what = "not a zipccl peer of this connection";
                goto failed;
            }
            shake->in_len += hello->addr_len;
        }
    }
    if (shake->out_off == shake->out_len && shake->in_off == shake->in_len &&
        shake->in_len > sizeof(net_hello_t))
        return UCS_OK;
pending:
    if (zc_time_ns() > shake->deadline_ns) {
        ZC_ERROR("net: connection %u with %s not set up after %lld s", conn_id, shake->peer,
                 (long long)ctx->cfg.timeout_s);
        return UCS_ERR_TIMED_OUT;
    }
    return UCS_INPROGRESS;
failed:
    ZC_ERROR("net: handshake of connection %u with %s failed: %s", conn_id, shake->peer, what);
    return UCS_ERR_IO_ERROR;
}

/* The handshake is done: our endpoint to the peer's worker, the socket closed. */
static ucs_status_t shake_finish(net_comm_t *comm, net_shake_t *shake)
{
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                      UCP_EP_PARAM_FIELD_ERR_HANDLER,
        .address = (const ucp_address_t *)(shake->in + sizeof(net_hello_t)),
        .err_mode = err_mode(comm->ctx),
        .err_handler = {.cb = ep_failed, .arg = comm},
    };
    memcpy(comm->peer, shake->peer, sizeof(comm->peer));
    ucs_status_t status = ucp_ep_create(comm->ctx->worker, &params, &comm->ep);
    if (status != UCS_OK) {
        comm->ep = NULL;
        ZC_ERROR("net: creating the endpoint to %s failed: %s", comm->peer,
                 ucs_status_string(status));
        return status;
    }
    shake_end(shake);
    log_transports(comm);
    return UCS_OK;
}

static ncclResult_t shake_result(ucs_status_t status)
{
    return status == UCS_ERR_TIMED_OUT || status == UCS_ERR_UNREACHABLE ||
                   status == UCS_ERR_IO_ERROR
               ? ncclRemoteError
               : ncclSystemError;
}

static int socket_nonblocking(int family)
{
    int fd = socket(family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return fd;
}

ncclResult_t zc_net_listen(void *ctx_arg, int dev, void *handle, void **listenComm)
{
    net_ctx_t *ctx = ctx_of(ctx_arg);
    struct sockaddr_storage addr;
    unsigned addr_len;

    if (!ctx || !handle || !listenComm || zc_nccl_device_addr(dev, &addr, &addr_len) != ncclSuccess)
        return ncclInternalError;

    pthread_mutex_lock(&ctx->lock);
    uint32_t conn_id = next_id(ctx);
    net_comm_t *lc = comm_alloc(ctx, NET_LISTEN, dev, conn_id);
    net_comm_t *recv = comm_alloc(ctx, NET_RECV, dev, conn_id);
    if (!lc || !recv)
        goto err_free;
    lc->recv = recv;
    format_addr((const struct sockaddr *)&addr, lc->peer, sizeof(lc->peer));
    lc->fd = socket_nonblocking(addr.ss_family);
    socklen_t len = sizeof(addr);
    if (lc->fd < 0 || bind(lc->fd, (const struct sockaddr *)&addr, addr_len) != 0 ||
        listen(lc->fd, 16) != 0 || getsockname(lc->fd, (struct sockaddr *)&addr, &len) != 0) {
        ZC_ERROR("net: listening on %s (device %d) failed: %s", lc->peer, dev, strerror(errno));
        goto err_free;
    }
    format_addr((const struct sockaddr *)&addr, lc->peer, sizeof(lc->peer));

    net_handle_t h = {.magic = NET_MAGIC_HANDLE, .conn_id = conn_id};
    if (addr.ss_family == AF_INET) {
        const struct sockaddr_in *in = (const struct sockaddr_in *)&addr;
        h.family = AF_INET;
        h.port = in->sin_port;
        memcpy(h.addr, &in->sin_addr, 4);
    } else {
        const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)&addr;
        h.family = AF_INET6;
        h.port = in6->sin6_port;
        memcpy(h.addr, &in6->sin6_addr, 16);
    }
    memset(handle, 0, NCCL_NET_HANDLE_MAXSIZE);
    memcpy(handle, &h, sizeof(h));
    ctx->refs += 2;
    ZC_DEBUG("net: listening on %s (dev %d) for connection %u", lc->peer, dev, conn_id);
    pthread_mutex_unlock(&ctx->lock);
    *listenComm = lc;
    return ncclSuccess;

err_free:
    if (lc && lc->fd >= 0)
        close(lc->fd);
    free(lc);
    free(recv);
    pthread_mutex_unlock(&ctx->lock);
    return ncclSystemError;
}

/* First call of a connect: the comm, a nonblocking connect, the hello ready to go. */
static ncclResult_t connect_start(net_ctx_t *ctx, int dev, const net_handle_t *h,
                                  net_comm_t **comm_p)
{
    struct sockaddr_storage addr = {0};
    socklen_t addr_len;

    if (h->family == AF_INET) {
        struct sockaddr_in *in = (struct sockaddr_in *)&addr;
        in->sin_family = AF_INET;
        in->sin_port = h->port;
        memcpy(&in->sin_addr, h->addr, 4);
        addr_len = sizeof(*in);
    } else if (h->family == AF_INET6) {
        struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&addr;
        in6->sin6_family = AF_INET6;
        in6->sin6_port = h->port;
        memcpy(&in6->sin6_addr, h->addr, 16);
        addr_len = sizeof(*in6);
    } else {
        ZC_ERROR("net: connection handle with address family %u", h->family);
        return ncclInternalError;
    }

    net_comm_t *comm = comm_alloc(ctx, NET_SEND, dev, h->conn_id);
    if (!comm)
        return ncclSystemError;
    format_addr((const struct sockaddr *)&addr, comm->peer, sizeof(comm->peer));
    memcpy(comm->shake.peer, comm->peer, sizeof(comm->peer));
    int fd = socket_nonblocking(addr.ss_family);
    if (fd < 0 ||
        (connect(fd, (const struct sockaddr *)&addr, addr_len) != 0 && errno != EINPROGRESS)) {
        ZC_ERROR("net: connecting to %s failed: %s", comm->peer, strerror(errno));
        if (fd >= 0)
            close(fd);
        free(comm);
        return ncclRemoteError;
    }
    if (shake_start(ctx, comm->conn_id, &comm->shake, fd) != UCS_OK) {
        shake_end(&comm->shake);
        free(comm);
        return ncclSystemError;
    }
    ctx->refs++;
    *comm_p = comm;
    return ncclSuccess;
}

ncclResult_t zc_net_connect(void *ctx_arg, int dev, void *handle, void **sendComm,
                            ncclNetDeviceHandle_v11_t **sendDevComm)
{
    net_ctx_t *ctx = ctx_of(ctx_arg);
    net_handle_t *h = handle;

    if (!ctx || !h || !sendComm || dev < 0 || dev >= zc_nccl_ndevs())
        return ncclInternalError;
    if (h->magic != NET_MAGIC_HANDLE || h->conn_id == 0 || h->conn_id > NET_CONN_ID_MAX) {
        ZC_ERROR("net: connect was given a handle that listen did not write");
        return ncclInternalError;
    }

    pthread_mutex_lock(&ctx->lock);
    net_comm_t *comm = h->stage;
    if (!comm) {
        ncclResult_t result = connect_start(ctx, dev, h, &comm);
        if (result != ncclSuccess) {
            pthread_mutex_unlock(&ctx->lock);
            return result;
        }
        h->stage = comm;
    } else if (!comm_of(comm, NET_SEND) || comm->ctx != ctx) {
        pthread_mutex_unlock(&ctx->lock);
        ZC_ERROR("net: connect was given a handle whose connection state is not ours");
        return ncclInternalError;
    }
    ucs_status_t status = shake_progress(ctx, comm->conn_id, &comm->shake);
    if (status == UCS_INPROGRESS) {
        pthread_mutex_unlock(&ctx->lock);
        *sendComm = NULL;
        return ncclSuccess;
    }
    h->stage = NULL;
    if (status == UCS_OK)
        status = shake_finish(comm, &comm->shake);
    if (status != UCS_OK) {
        comm_close_unlock(comm);
        return shake_result(status);
    }
    ZC_DEBUG("net: connected to %s (dev %d, connection %u)", comm->peer, dev, comm->conn_id);
    pthread_mutex_unlock(&ctx->lock);
    if (sendDevComm)
        *sendDevComm = NULL;
    *sendComm = comm;
    return ncclSuccess;
}

ncclResult_t zc_net_accept(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v11_t **recvDevComm)
{
    net_comm_t *listen = comm_of(listenComm, NET_LISTEN);

    if (!listen || !recvComm)
        return ncclInternalError;
    net_ctx_t *ctx = listen->ctx;
    pthread_mutex_lock(&ctx->lock);
    net_comm_t *recv = listen->recv;
    if (!recv) {
        pthread_mutex_unlock(&ctx->lock);
        ZC_ERROR("net: accept called again on listener %u after it returned its connection",
                 listen->conn_id);
        return ncclInternalError;
    }
    /* take new connectors while a handshake slot is free */
    for (int i = 0; i < NET_MAX_PENDING; i++) {
        net_shake_t *shake = &listen->pending[i];
        if (shake->fd >= 0)
            continue;
        struct sockaddr_storage from;
        socklen_t len = sizeof(from);
        int fd = accept4(listen->fd, (struct sockaddr *)&from, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED)
                break;
            int err = errno;
            pthread_mutex_unlock(&ctx->lock);
            ZC_ERROR("net: accepting on %s failed: %s", listen->peer, strerror(err));
            return ncclSystemError;
        }
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        *shake = (net_shake_t){.fd = -1, .connected = 1};
        format_addr((const struct sockaddr *)&from, shake->peer, sizeof(shake->peer));
        if (shake_start(ctx, listen->conn_id, shake, fd) != UCS_OK) {
            shake_end(shake);
            pthread_mutex_unlock(&ctx->lock);
            return ncclSystemError;
        }
    }
    /* the first to complete its handshake is the connection; strangers are dropped (logged) */
    int winner = -1;
    for (int i = 0; i < NET_MAX_PENDING && winner < 0; i++) {
        net_shake_t *shake = &listen->pending[i];
        if (shake->fd < 0)
            continue;
        ucs_status_t status = shake_progress(ctx, listen->conn_id, shake);
        if (status == UCS_OK)
            status = shake_finish(recv, shake);
        if (status == UCS_OK)
            winner = i;
        else if (status != UCS_INPROGRESS)
            shake_end(shake);
    }
    if (winner < 0) {
        pthread_mutex_unlock(&ctx->lock);
        *recvComm = NULL;
        return ncclSuccess;
    }
    for (int i = 0; i < NET_MAX_PENDING; i++)
        shake_end(&listen->pending[i]);
    listen->recv = NULL;
    ZC_DEBUG("net: accepted %s on %s (connection %u)", recv->peer, listen->peer, recv->conn_id);
    pthread_mutex_unlock(&ctx->lock);
    if (recvDevComm)
        *recvDevComm = NULL;
    *recvComm = recv;
    return ncclSuccess;
}

ncclResult_t zc_net_close_listen(void *listenComm)
{
    net_comm_t *listen = comm_of(listenComm, NET_LISTEN);

    if (!listen)
        return ncclInternalError;
    net_ctx_t *ctx = listen->ctx;
    pthread_mutex_lock(&ctx->lock);
    close(listen->fd);
    for (int i = 0; i < NET_MAX_PENDING; i++)
        shake_end(&listen->pending[i]);
    net_comm_t *recv = listen->recv;
    listen->magic = NET_MAGIC_DEAD;
    free(listen);
    if (recv) {
        ctx->refs--;             /* the recv comm still holds one */
        comm_close_unlock(recv); /* never accepted */
    } else {
        ctx_unref_unlock(ctx);
    }
    return ncclSuccess;
}

ncclResult_t zc_net_close_send(void *sendComm)
{
    net_comm_t *comm = comm_of(sendComm, NET_SEND);

    if (!comm)
        return ncclInternalError;
    pthread_mutex_lock(&comm->ctx->lock);
    comm_close_unlock(comm);
    return ncclSuccess;
}

ncclResult_t zc_net_close_recv(void *recvComm)
{
    net_comm_t *comm = comm_of(recvComm, NET_RECV);

    if (!comm)
        return ncclInternalError;
    pthread_mutex_lock(&comm->ctx->lock);
    comm_close_unlock(comm);
    return ncclSuccess;
}

/* ---- memory registration ---- */

ncclResult_t zc_net_reg_mr(void *comm_arg, void *data, size_t size, int type, void **mhandle)
{
    net_comm_t *comm = comm_of(comm_arg, 0);

    if (!comm || comm->kind == NET_LISTEN || !mhandle || (!data && size > 0))
        return ncclInternalError;
    if (type != NCCL_PTR_HOST) {
        ZC_ERROR("net: registration of memory of type %d refused: the plugin offers host memory "
                 "only (NCCL_PTR_HOST)",
                 type);
        return ncclInternalError;
    }
    net_mr_t *mr = malloc(sizeof(*mr));
    if (!mr) {
        ZC_ERROR("net: no memory for a memory registration");
        return ncclSystemError;
    }
    *mr = (net_mr_t){.magic = NET_MAGIC_MR, .data = data, .size = size};
    *mhandle = mr;
    return ncclSuccess;
}

ncclResult_t zc_net_reg_mr_dmabuf(void *comm, void *data, size_t size, int type, uint64_t offset,
                                  int fd, void **mhandle)
{
    /* host memory needs no dma-buf: the address is enough */
    return zc_net_reg_mr(comm, data, size, type, mhandle);
}

ncclResult_t zc_net_dereg_mr(void *comm_arg, void *mhandle)
{
    net_comm_t *comm = comm_of(comm_arg, 0);
    net_mr_t *mr = mhandle;

    if (!comm || comm->kind == NET_LISTEN || !mr || mr->magic != NET_MAGIC_MR)
        return ncclInternalError;
    mr->magic = NET_MAGIC_DEAD;
    free(mr);
    return ncclSuccess;
}

static int mr_ok(const void *mhandle)
{
    const net_mr_t *mr = mhandle;
    return !mr || mr->magic == NET_MAGIC_MR;
}

/* ---- data ---- */

static net_req_t *req_get(net_comm_t *comm)
{
    for (int i = 0; i < NCCL_NET_MAX_REQUESTS; i++)
        if (!comm->reqs[i].used && !comm->reqs[i].ucx)
            return &comm->reqs[i];
    return NULL;
}

ncclResult_t zc_net_isend(void *sendComm, void *data, size_t size, int tag, void *mhandle,
                          void *phandle, void **request)
{
    net_comm_t *comm = comm_of(sendComm, NET_SEND);

    if (!comm || !request || (!data && size > 0) || !mr_ok(mhandle))
        return ncclInternalError;
    net_ctx_t *ctx = comm->ctx;
    pthread_mutex_lock(&ctx->lock);
    if (comm->ep_status != UCS_OK) {
        int first = !comm->reported;
        comm->reported = 1;
        pthread_mutex_unlock(&ctx->lock);
        if (first)
            ZC_ERROR("net: peer %s lost (%s) before a send of %zu bytes tag %d", comm->peer,
                     ucs_status_string(comm->ep_status), size, tag);
        return ncclRemoteError;
    }
    net_req_t *req = req_get(comm);
    if (!req) {
        pthread_mutex_unlock(&ctx->lock);
        *request = NULL; /* NCCL tries again */
        return ncclSuccess;
    }
    req_start(req, comm, 0, tag, size);
    req_posted(req, post_send(comm->ep, req, data, size, data_tag(comm->conn_id, tag)));
    if (req->done && req->status != UCS_OK && req->status != UCS_ERR_CANCELED) {
        ucs_status_t status = req->status;
        req->used = 0;
        pthread_mutex_unlock(&ctx->lock);
        ZC_ERROR("net: send of %zu bytes tag %d to %s failed: %s", size, tag, comm->peer,
                 ucs_status_string(status));
        return zc_nccl_result(zc_ucx_status(status));
    }
    pthread_mutex_unlock(&ctx->lock);
    *request = req;
    return ncclSuccess;
}

/* Why a request failed, logged once per comm for a lost peer; the caller holds the lock. */
static ncclResult_t req_failed(net_comm_t *comm, net_req_t *req, ucs_status_t status)
{
    const char *op = req->is_recv ? "receive" : "send";

    if (status == UCS_ERR_MESSAGE_TRUNCATED) {
        ZC_ERROR("net: a message from %s with tag %d is larger than the %zu-byte receive "
                 "posted for it",
                 comm->peer, req->tag, req->size);
        return ncclInternalError;
    }
    if (status == UCS_ERR_TIMED_OUT) {
        ZC_ERROR("net: %s of %zu bytes tag %d with %s timed out after %lld s", op, req->size,
                 req->tag, comm->peer, (long long)comm->ctx->cfg.timeout_s);
        return ncclRemoteError;
    }
    /*
     * Only a lost peer cancels a receive: test does when the endpoint failed,
     * and UCX does when the sender of a rendezvous it matched is gone, which it
     * may find before the endpoint's error callback has run.
     */
    if (comm->ep_status != UCS_OK || (req->is_recv && status == UCS_ERR_CANCELED)) {
        if (!comm->reported)
            ZC_ERROR("net: peer %s lost (%s) during a %s of %zu bytes tag %d", comm->peer,
                     ucs_status_string(comm->ep_status != UCS_OK ? comm->ep_status : status), op,
                     req->size, req->tag);
        comm->reported = 1;
        return ncclRemoteError;
    }
    ZC_ERROR("net: %s of %zu bytes tag %d with %s failed: %s", op, req->size, req->tag, comm->peer,
             ucs_status_string(status));
    return zc_nccl_result(zc_ucx_status(status));
}

ncclResult_t zc_net_irecv(void *recvComm, int n, void **data, size_t *sizes, int *tags,
                          void **mhandles, void **phandles, void **request)
{
    net_comm_t *comm = comm_of(recvComm, NET_RECV);

    if (!comm || !request || !data || !sizes || !tags)
        return ncclInternalError;
    if (n != 1) {
        ZC_ERROR("net: irecv of %d buffers; the plugin announced maxRecvs 1", n);
        return ncclInternalError;
    }
    if ((!data[0] && sizes[0] > 0) || (mhandles && !mr_ok(mhandles[0])))
        return ncclInternalError;

    net_ctx_t *ctx = comm->ctx;
    pthread_mutex_lock(&ctx->lock);
    net_req_t *req = req_get(comm);
    if (!req) {
        pthread_mutex_unlock(&ctx->lock);
        *request = NULL;
        return ncclSuccess;
    }
    /* posted even when the peer is gone: what it sent before may be waiting in UCX */
    req_start(req, comm, 1, tags[0], sizes[0]);
    req_posted(req, post_recv(comm, req, data[0], sizes[0], data_tag(comm->conn_id, tags[0])));
    if (req->done && req->status != UCS_OK && req->status != UCS_ERR_MESSAGE_TRUNCATED) {
        ncclResult_t result = req_failed(comm, req, req->status);
        req->used = 0;
        pthread_mutex_unlock(&ctx->lock);
        return result;
    }
    pthread_mutex_unlock(&ctx->lock);
    *request = req;
    return ncclSuccess;
}

ncclResult_t zc_net_iflush(void *recvComm, int n, void **data, int *sizes, void **mhandles,
                           void **request)
{
    if (!comm_of(recvComm, NET_RECV) || !request)
        return ncclInternalError;
    *request = NULL; /* host memory: nothing to flush */
    return ncclSuccess;
}

ncclResult_t zc_net_test(void *request, int *done, int *sizes)
{
    net_req_t *req = request;

    if (!req || !done || !comm_of(req->comm, 0) || !req->used)
        return ncclInternalError;
    net_comm_t *comm = req->comm;
    net_ctx_t *ctx = comm->ctx;
    pthread_mutex_lock(&ctx->lock);
    if (!req->done)
        progress(ctx);
    if (!req->done && req->ucx) {
        ucs_status_t why = UCS_OK;
        if (comm->ep_status != UCS_OK)
            why = comm->ep_status; /* progress above drained what the peer sent */
        else if (!ctx->cfg.ucx_peer_errors &&
                 zc_time_ns() - req->start_ns > (uint64_t)ctx->cfg.timeout_s * 1000000000ull)
            why = UCS_ERR_TIMED_OUT;
        if (why == UCS_ERR_TIMED_OUT && comm->ep_status == UCS_OK)
            comm->ep_status = why; /* the peer is taken for dead: no more sends, forced close */
        if (why != UCS_OK && req->is_recv) {
            ucp_request_cancel(ctx->worker, req->ucx);
            progress(ctx);
        }
        if (why != UCS_OK && !req->done) {
            /* a send UCX still holds: abandon the slot to UCX, which frees it on completion */
            req->done = 1;
            req->status = why;
        } else if (why == UCS_ERR_TIMED_OUT && req->status != UCS_OK) {
            req->status = why;
        }
    }
    if (!req->done) {
        pthread_mutex_unlock(&ctx->lock);
        *done = 0;
        return ncclSuccess;
    }
    ucs_status_t status = req->status;
    size_t size = req->size;
    req->used = 0;
    if (status != UCS_OK) {
        ncclResult_t result = req_failed(comm, req, status);
        pthread_mutex_unlock(&ctx->lock);
        *done = 0;
        return result;
    }
    pthread_mutex_unlock(&ctx->lock);
    *done = 1;
    if (sizes)
        sizes[0] = size > INT_MAX ? INT_MAX : (int)size;
    return ncclSuccess;
}
