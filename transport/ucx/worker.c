/* Workers on the shared UCP context, and endpoints between workers. */
#include "common/log.h"
#include "transport/ucx/ucx_int.h"

#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

zc_status_t zc_ucx_worker_create(const char *name, zc_ucx_worker_t **worker_p)
{
    zc_status_t status;

    if (!worker_p)
        return ZC_ERR_INVALID_ARG;
    zc_ucx_worker_t *w = calloc(1, sizeof(*w));
    if (!w) {
        ZC_ERROR("ucx: no memory for a worker");
        return ZC_ERR_NO_MEMORY;
    }
    w->efd = -1;
    pthread_mutex_init(&w->lock, NULL);
    int wakeup;
    ZC_CHECK_GOTO(zc_ucx_context_get(&w->context, &wakeup), status, err_destroy);

    /* with wakeup, UCX's default events: every send and receive completion, every arrival */
    ucp_worker_params_t params = {
        .field_mask = UCP_WORKER_PARAM_FIELD_THREAD_MODE | UCP_WORKER_PARAM_FIELD_NAME,
        /* one thread at a time, not always the same one */
        .thread_mode = UCS_THREAD_MODE_SERIALIZED,
        .name = name ? name : "zipccl",
    };
    ucs_status_t ustatus = ucp_worker_create(w->context, &params, &w->worker);
    if (ustatus != UCS_OK) {
        w->worker = NULL;
        ZC_ERROR("ucx: creating a worker failed: %s", ucs_status_string(ustatus));
        status = zc_ucx_status(ustatus);
        goto err_destroy;
    }
    ustatus = ucp_worker_get_address(w->worker, &w->addr, &w->addr_len);
    if (ustatus != UCS_OK) {
        w->addr = NULL;
        ZC_ERROR("ucx: reading the worker's address failed: %s", ucs_status_string(ustatus));
        status = zc_ucx_status(ustatus);
        goto err_destroy;
    }
    if (wakeup && (ustatus = ucp_worker_get_efd(w->worker, &w->efd)) != UCS_OK) {
        ZC_DEBUG("ucx: the worker has no event descriptor (%s); its waits poll",
                 ucs_status_string(ustatus));
        w->efd = -1;
    }
    *worker_p = w;
    return ZC_OK;

err_destroy:
    zc_ucx_worker_destroy(w);
    return status;
}

void zc_ucx_worker_destroy(zc_ucx_worker_t *w)
{
    if (!w)
        return;
    if (w->worker) {
        zc_ucx_worker_detach_all(w);
        if (w->addr)
            ucp_worker_release_address(w->worker, w->addr);
        ucp_worker_destroy(w->worker);
    }
    if (w->context)
        zc_ucx_context_put();
    pthread_mutex_destroy(&w->lock);
    free(w);
}

const void *zc_ucx_worker_address(const zc_ucx_worker_t *w, size_t *len_p)
{
    *len_p = w->addr_len;
    return w->addr;
}

unsigned zc_ucx_worker_progress(zc_ucx_worker_t *w)
{
    return ucp_worker_progress(w->worker);
}

zc_status_t zc_ucx_worker_arm(zc_ucx_worker_t *w)
{
    if (w->efd < 0)
        return ZC_ERR_UNSUPPORTED;
    ucs_status_t ustatus = ucp_worker_arm(w->worker);
    if (ustatus == UCS_OK)
        return ZC_OK;
    if (ustatus == UCS_ERR_BUSY)
        return ZC_INPROGRESS;
    /* a transport that cannot arm: this worker polls from now on */
    ZC_DEBUG("ucx: arming the worker failed (%s); its waits poll", ucs_status_string(ustatus));
    w->efd = -1;
    return ZC_ERR_UNSUPPORTED;
}

int zc_ucx_worker_fd(const zc_ucx_worker_t *w)
{
    return w->efd;
}

zc_status_t zc_ucx_worker_sleep(zc_ucx_worker_t *const *workers, size_t n, uint64_t timeout_ns)
{
    struct pollfd fds[ZC_UCX_SLEEP_MAX];

    if (n == 0 || n > ZC_UCX_SLEEP_MAX)
        return ZC_ERR_INVALID_ARG;
    for (size_t i = 0; i < n; i++) {
        zc_status_t status = zc_ucx_worker_arm(workers[i]);
        if (status != ZC_OK)
            return status;
        fds[i] = (struct pollfd){.fd = workers[i]->efd, .events = POLLIN};
    }
    struct timespec ts = {.tv_sec = (time_t)(timeout_ns / 1000000000ull),
                          .tv_nsec = (long)(timeout_ns % 1000000000ull)};
    /* woken, timed out or interrupted: the caller progresses and looks again */
    if (ppoll(fds, (nfds_t)n, &ts, NULL) < 0 && errno != EINTR)
        return ZC_ERR_IO;
    return ZC_OK;
}

void zc_ucx_worker_lock(zc_ucx_worker_t *w)
{
    pthread_mutex_lock(&w->lock);
}

void zc_ucx_worker_unlock(zc_ucx_worker_t *w)
{
    pthread_mutex_unlock(&w->lock);
}

static void ep_error(void *arg, ucp_ep_h uep, ucs_status_t ustatus)
{
    zc_ucx_ep_t *ep = arg;

    if (ep->on_error) /* NULL once closing */
        ep->on_error(ep->arg, zc_ucx_status(ustatus), ucs_status_string(ustatus));
}

zc_status_t zc_ucx_ep_create(zc_ucx_worker_t *w, const void *addr, size_t len,
                             zc_ucx_ep_error_fn on_error, void *arg, zc_ucx_ep_t **ep_p)
{
    if (!w || !addr || len == 0 || !ep_p)
        return ZC_ERR_INVALID_ARG;
    zc_ucx_ep_t *ep = calloc(1, sizeof(*ep));
    if (!ep)
        return ZC_ERR_NO_MEMORY;
    *ep = (zc_ucx_ep_t){.worker = w, .on_error = on_error, .arg = arg};
    ucp_ep_params_t params = {
        .field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE,
        .address = addr,
        .err_mode = UCP_ERR_HANDLING_MODE_NONE,
    };
    if (on_error) {
        params.field_mask |= UCP_EP_PARAM_FIELD_ERR_HANDLER;
        params.err_mode = UCP_ERR_HANDLING_MODE_PEER;
        params.err_handler.cb = ep_error;
        params.err_handler.arg = ep;
    }
    ucs_status_t ustatus = ucp_ep_create(w->worker, &params, &ep->ep);
    if (ustatus != UCS_OK) {
        free(ep);
        return zc_ucx_status(ustatus);
    }
    *ep_p = ep;
    return ZC_OK;
}

zc_ucx_closing_t *zc_ucx_ep_close(zc_ucx_ep_t *ep, int force)
{
    if (!ep)
        return NULL;
    ucp_request_param_t param = {
        .op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS,
        .flags = force ? UCP_EP_CLOSE_FLAG_FORCE : 0,
    };
    ep->on_error = NULL;
    ucs_status_ptr_t sp = ucp_ep_close_nbx(ep->ep, &param);
    if (!UCS_PTR_IS_PTR(sp)) {
        free(ep);
        return NULL;
    }
    /* the endpoint's memory is its error handler's argument until the close ends */
    ep->closing = sp;
    return (zc_ucx_closing_t *)ep;
}

int zc_ucx_closing_done(zc_ucx_closing_t *closing)
{
    zc_ucx_ep_t *ep = (zc_ucx_ep_t *)closing;

    if (ucp_request_check_status(ep->closing) == UCS_INPROGRESS)
        return 0;
    ucp_request_free(ep->closing);
    free(ep);
    return 1;
}

void zc_ucx_closing_abandon(zc_ucx_closing_t *closing)
{
    zc_ucx_ep_t *ep = (zc_ucx_ep_t *)closing;

    if (!ep)
        return;
    ucp_request_free(ep->closing);
    free(ep);
}

void zc_ucx_ep_log_transports(const zc_ucx_ep_t *ep, const char *prefix)
{
    char *text = NULL;
    size_t len = 0;

    if (!ZC_LOG_ENABLED(ZC_LOG_DEBUG))
        return;
    FILE *f = open_memstream(&text, &len);
    if (!f)
        return;
    ucp_ep_print_info(ep->ep, f);
    fclose(f);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n"))
        ZC_DEBUG("%s: %s", prefix, line);
    free(text);
}
