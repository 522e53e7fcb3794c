/*
 * ncclNet v11 connection setup: listen, connect, accept and the TCP handshake
 * that exchanges UCX worker addresses (net.c's top comment is the design).
 */
#include "plugin/nccl/net_int.h"

#include "common/log.h"
#include "common/timer.h"
#include "transport/bootstrap/sock.h"

#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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

static void format_addr(const struct sockaddr_storage *ss, char *buf, size_t len)
{
    zc_bs_addr_string((const struct sockaddr *)ss, sizeof(*ss), buf, len);
}

/* A new id in this worker's tag space. */
static uint32_t next_id(net_ctx_t *ctx)
{
    uint32_t id = ctx->next_conn_id;
    ctx->next_conn_id = id == NET_CONN_ID_MAX ? 1 : id + 1;
    return id;
}

void zc_net_shake_end(net_shake_t *shake)
{
    if (shake->fd >= 0)
        close(shake->fd);
    shake->fd = -1;
    free(shake->out);
    free(shake->in);
    shake->out = shake->in = NULL;
}

/*
 * Starts a handshake on connected (or connecting) @p fd: our hello (@p conn_id,
 * our worker's address @p addr) out, the peer's expected within @p timeout_s.
 */
static zc_status_t shake_start(net_shake_t *shake, int fd, uint32_t conn_id, const void *addr,
                               size_t addr_len, int64_t timeout_s)
{
    net_hello_t hello = {
        .magic = NET_MAGIC_HELLO, .conn_id = conn_id, .addr_len = (uint32_t)addr_len};

    shake->fd = fd;
    shake->deadline_ns = zc_time_ns() + (uint64_t)timeout_s * 1000000000ull;
    shake->out_len = sizeof(hello) + addr_len;
    shake->out = malloc(shake->out_len);
    shake->in = malloc(sizeof(net_hello_t) + NET_WORKER_ADDR_MAX);
    if (!shake->out || !shake->in) {
        ZC_ERROR("net: no memory for a connection");
        return ZC_ERR_NO_MEMORY;
    }
    memcpy(shake->out, &hello, sizeof(hello));
    memcpy(shake->out + sizeof(hello), addr, addr_len);
    shake->in_len = sizeof(net_hello_t);
    return ZC_OK;
}

/*
 * Moves the handshake of connection @p conn_id on without blocking: ZC_OK when
 * both hellos crossed, ZC_INPROGRESS while not, an error (logged) when it
 * failed (ZC_ERR_PEER: refused or reset; ZC_ERR_IO) or timed out
 * (ZC_ERR_TIMEOUT, after @p timeout_s, for the message).
 */
static zc_status_t shake_progress(net_shake_t *shake, uint32_t conn_id, int64_t timeout_s)
{
    const char *what = "the handshake";
    int err = 0;

    if (!shake->connected) {
        zc_status_t status = zc_bs_connect_test(shake->fd, &err);
        if (status == ZC_INPROGRESS)
            goto pending;
        if (status != ZC_OK) {
            ZC_ERROR("net: connecting to %s failed: %s", shake->peer, strerror(err));
            return err == ECONNREFUSED || err == ECONNRESET ? ZC_ERR_PEER : ZC_ERR_IO;
        }
        shake->connected = 1;
    }
    if (zc_bs_send_some(shake->fd, shake->out, shake->out_len, &shake->out_off, &err) != ZC_OK) {
        what = strerror(err);
        goto failed;
    }
    for (;;) {
        if (zc_bs_recv_some(shake->fd, shake->in, shake->in_len, &shake->in_off, &err) != ZC_OK) {
            what = err == 0 ? "the peer closed the connection" : strerror(err);
            goto failed;
        }
        if (shake->in_off < shake->in_len || shake->in_len > sizeof(net_hello_t))
            break;
        /* the header is in: the address follows */
        const net_hello_t *hello = (const net_hello_t *)shake->in;
        if (hello->magic != NET_MAGIC_HELLO || hello->conn_id != conn_id || hello->addr_len == 0 ||
            hello->addr_len > NET_WORKER_ADDR_MAX) {
            what = "not a zipccl peer of this connection";
            goto failed;
        }
        shake->in_len += hello->addr_len;
    }
    if (shake->out_off == shake->out_len && shake->in_off == shake->in_len &&
        shake->in_len > sizeof(net_hello_t))
        return ZC_OK;
pending:
    if (zc_time_ns() > shake->deadline_ns) {
        ZC_ERROR("net: connection %u with %s not set up after %lld s", conn_id, shake->peer,
                 (long long)timeout_s);
        return ZC_ERR_TIMEOUT;
    }
    return ZC_INPROGRESS;
failed:
    ZC_ERROR("net: handshake of connection %u with %s failed: %s", conn_id, shake->peer, what);
    return ZC_ERR_IO;
}

/* The handshake is done: @p comm's endpoint to the peer's worker, the socket closed. */
static zc_status_t shake_finish(net_comm_t *comm, net_shake_t *shake)
{
    const net_hello_t *hello = (const net_hello_t *)shake->in;

    memcpy(comm->peer, shake->peer, sizeof(comm->peer));
    zc_status_t status =
        zc_ucx_ep_create(comm->ctx->worker, shake->in + sizeof(net_hello_t), hello->addr_len,
                         comm->ctx->cfg.ucx_peer_errors ? zc_net_ep_failed : NULL, comm, &comm->ep);
    if (status != ZC_OK) {
        comm->ep = NULL;
        ZC_ERROR("net: creating the endpoint to %s failed: %s", comm->peer,
                 zc_status_string(status));
        return status;
    }
    zc_net_shake_end(shake);
    char prefix[NET_ADDR_LEN + 16];
    snprintf(prefix, sizeof(prefix), "net: to %s", comm->peer);
    zc_ucx_ep_log_transports(comm->ep, prefix);
    return ZC_OK;
}

/* A failed handshake: the peer's side (gone, refused, silent) or ours. */
static ncclResult_t shake_result(zc_status_t status)
{
    return status == ZC_ERR_TIMEOUT || status == ZC_ERR_PEER || status == ZC_ERR_IO
               ? ncclRemoteError
               : ncclSystemError;
}

ncclResult_t zc_net_listen(void *ctx_arg, int dev, void *handle, void **listenComm)
{
    net_ctx_t *ctx = zc_net_ctx_of(ctx_arg);
    struct sockaddr_storage addr;
    unsigned addr_len;
    int err = 0;

    if (!ctx || !handle || !listenComm || zc_nccl_device_addr(dev, &addr, &addr_len) != ncclSuccess)
        return ncclInternalError;

    zc_net_lock(ctx);
    uint32_t conn_id = next_id(ctx);
    net_comm_t *lc = zc_net_comm_alloc(ctx, NET_LISTEN, dev, conn_id);
    net_comm_t *recv = zc_net_comm_alloc(ctx, NET_RECV, dev, conn_id);
    if (!lc || !recv)
        goto err_free;
    lc->recv = recv;
    format_addr(&addr, lc->peer, sizeof(lc->peer));
    if (zc_bs_listen_at((const struct sockaddr *)&addr, addr_len, 16, &lc->fd, &addr, &err) !=
        ZC_OK) {
        ZC_ERROR("net: listening on %s (device %d) failed: %s", lc->peer, dev, strerror(err));
        goto err_free;
    }
    format_addr(&addr, lc->peer, sizeof(lc->peer));

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
    zc_net_unlock(ctx);
    *listenComm = lc;
    return ncclSuccess;

err_free:
    if (lc && lc->fd >= 0)
        close(lc->fd);
    free(lc);
    free(recv);
    zc_net_unlock(ctx);
    return ncclSystemError;
}

/* First call of a connect: the comm, a nonblocking connect, the hello ready to go. */
static ncclResult_t connect_start(net_ctx_t *ctx, int dev, const net_handle_t *h,
                                  net_comm_t **comm_p)
{
    struct sockaddr_storage addr = {0};
    socklen_t addr_len;
    int fd = -1, err = 0;

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

    net_comm_t *comm = zc_net_comm_alloc(ctx, NET_SEND, dev, h->conn_id);
    if (!comm)
        return ncclSystemError;
    format_addr(&addr, comm->peer, sizeof(comm->peer));
    memcpy(comm->shake.peer, comm->peer, sizeof(comm->peer));
    if (zc_bs_connect_start((const struct sockaddr *)&addr, addr_len, &fd, &err) != ZC_OK) {
        ZC_ERROR("net: connecting to %s failed: %s", comm->peer, strerror(err));
        free(comm);
        return ncclRemoteError;
    }
    if (shake_start(&comm->shake, fd, comm->conn_id, ctx->addr, ctx->addr_len,
                    ctx->cfg.timeout_s) != ZC_OK) {
        zc_net_shake_end(&comm->shake);
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
    net_ctx_t *ctx = zc_net_ctx_of(ctx_arg);
    net_handle_t *h = handle;

    if (!ctx || !h || !sendComm || dev < 0 || dev >= zc_nccl_ndevs())
        return ncclInternalError;
    if (h->magic != NET_MAGIC_HANDLE || h->conn_id == 0 || h->conn_id > NET_CONN_ID_MAX) {
        ZC_ERROR("net: connect was given a handle that listen did not write");
        return ncclInternalError;
    }

    zc_net_lock(ctx);
    net_comm_t *comm = h->stage;
    if (!comm) {
        ncclResult_t result = connect_start(ctx, dev, h, &comm);
        if (result != ncclSuccess) {
            zc_net_unlock(ctx);
            return result;
        }
        h->stage = comm;
    } else if (!zc_net_comm_of(comm, NET_SEND) || comm->ctx != ctx) {
        zc_net_unlock(ctx);
        ZC_ERROR("net: connect was given a handle whose connection state is not ours");
        return ncclInternalError;
    }
    zc_status_t status = shake_progress(&comm->shake, comm->conn_id, ctx->cfg.timeout_s);
    if (status == ZC_INPROGRESS) {
        zc_net_unlock(ctx);
        *sendComm = NULL;
        return ncclSuccess;
    }
    h->stage = NULL;
    if (status == ZC_OK)
        status = shake_finish(comm, &comm->shake);
    if (status != ZC_OK) {
        zc_net_comm_close_unlock(comm);
        return shake_result(status);
    }
    ZC_DEBUG("net: connected to %s (dev %d, connection %u)", comm->peer, dev, comm->conn_id);
    zc_net_unlock(ctx);
    if (sendDevComm)
        *sendDevComm = NULL;
    *sendComm = comm;
    return ncclSuccess;
}

/* Takes new connectors into @p listen's free handshake slots; ncclSystemError (logged). */
static ncclResult_t accept_new(net_comm_t *listen)
{
    net_ctx_t *ctx = listen->ctx;

    for (int i = 0; i < NET_MAX_PENDING; i++) {
        net_shake_t *shake = &listen->pending[i];
        if (shake->fd >= 0)
            continue;
        struct sockaddr_storage from;
        int fd = -1, err = 0;
        zc_status_t status = zc_bs_accept(listen->fd, &fd, &from, &err);
        if (status == ZC_INPROGRESS)
            break;
        if (status != ZC_OK) {
            ZC_ERROR("net: accepting on %s failed: %s", listen->peer, strerror(err));
            return ncclSystemError;
        }
        *shake = (net_shake_t){.fd = -1, .connected = 1};
        format_addr(&from, shake->peer, sizeof(shake->peer));
        if (shake_start(shake, fd, listen->conn_id, ctx->addr, ctx->addr_len, ctx->cfg.timeout_s) !=
            ZC_OK) {
            zc_net_shake_end(shake);
            return ncclSystemError;
        }
    }
    return ncclSuccess;
}

ncclResult_t zc_net_accept(void *listenComm, void **recvComm,
                           ncclNetDeviceHandle_v11_t **recvDevComm)
{
    net_comm_t *listen = zc_net_comm_of(listenComm, NET_LISTEN);

    if (!listen || !recvComm)
        return ncclInternalError;
    net_ctx_t *ctx = listen->ctx;
    zc_net_lock(ctx);
    net_comm_t *recv = listen->recv;
    if (!recv) {
        zc_net_unlock(ctx);
        ZC_ERROR("net: accept called again on listener %u after it returned its connection",
                 listen->conn_id);
        return ncclInternalError;
    }
    ncclResult_t result = accept_new(listen);
    if (result != ncclSuccess) {
        zc_net_unlock(ctx);
        return result;
    }
    /* the first to complete its handshake is the connection; strangers are dropped (logged) */
    int winner = -1;
    for (int i = 0; i < NET_MAX_PENDING && winner < 0; i++) {
        net_shake_t *shake = &listen->pending[i];
        if (shake->fd < 0)
            continue;
        zc_status_t status = shake_progress(shake, listen->conn_id, ctx->cfg.timeout_s);
        if (status == ZC_OK)
            status = shake_finish(recv, shake);
        if (status == ZC_OK)
            winner = i;
        else if (status != ZC_INPROGRESS)
            zc_net_shake_end(shake);
    }
    if (winner < 0) {
        zc_net_unlock(ctx);
        *recvComm = NULL;
        return ncclSuccess;
    }
    for (int i = 0; i < NET_MAX_PENDING; i++)
        zc_net_shake_end(&listen->pending[i]);
    listen->recv = NULL;
    ZC_DEBUG("net: accepted %s on %s (connection %u)", recv->peer, listen->peer, recv->conn_id);
    zc_net_unlock(ctx);
    if (recvDevComm)
        *recvDevComm = NULL;
    *recvComm = recv;
    return ncclSuccess;
}

ncclResult_t zc_net_close_listen(void *listenComm)
{
    net_comm_t *listen = zc_net_comm_of(listenComm, NET_LISTEN);

    if (!listen)
        return ncclInternalError;
    net_ctx_t *ctx = listen->ctx;
    zc_net_lock(ctx);
    close(listen->fd);
    for (int i = 0; i < NET_MAX_PENDING; i++)
        zc_net_shake_end(&listen->pending[i]);
    net_comm_t *recv = listen->recv;
    listen->magic = NET_MAGIC_DEAD;
    free(listen);
    if (recv) {
        ctx->refs--;                    /* the recv comm still holds one */
        zc_net_comm_close_unlock(recv); /* never accepted */
    } else {
        zc_net_ctx_unref_unlock(ctx);
    }
    return ncclSuccess;
}
