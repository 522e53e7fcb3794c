/* The process's one UCP context, shared by every communicator and refcounted. */
#include "common/log.h"
#include "transport/ucx/ucx_int.h"

#include <pthread.h>

static pthread_mutex_t context_lock = PTHREAD_MUTEX_INITIALIZER;
static ucp_context_h context;
static unsigned context_refs;
static int context_wakeup; /* the context has UCP_FEATURE_WAKEUP */

static void ureq_init(void *request)
{
    zc_ucx_ureq_t *ureq = request;
    ureq->owner = NULL;
    ureq->worker = NULL;
    ureq->prev = ureq->next = NULL;
}

/*
 * UCP_FEATURE_WAKEUP lets waits sleep on a worker's event descriptor
 * (zc_ucx_worker_sleep). UCX 1.13 keeps its transports with it: tcp, sysv or
 * posix shared memory with cma were chosen here as before, and self-sends
 * work; a UCX that refuses the feature gets a context without it, whose waits
 * poll as before.
 */
static zc_status_t context_create(ucp_context_h *context_p, int *wakeup_p)
{
    ucp_config_t *config;
    ucs_status_t status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        ZC_ERROR("ucx: reading the UCX configuration failed: %s", ucs_status_string(status));
        return zc_ucx_status(status);
    }
    ucp_params_t params = {
        .field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_REQUEST_SIZE |
                      UCP_PARAM_FIELD_REQUEST_INIT | UCP_PARAM_FIELD_MT_WORKERS_SHARED |
                      UCP_PARAM_FIELD_NAME,
        .features = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP,
        .request_size = sizeof(zc_ucx_ureq_t),
        .request_init = ureq_init,
        /* communicators may be driven by different threads */
        .mt_workers_shared = 1,
        .name = "zipccl",
    };
    status = ucp_init(&params, config, context_p);
    *wakeup_p = status == UCS_OK;
    if (status != UCS_OK) {
        ZC_DEBUG("ucx: no context with wakeup support (%s); waits will poll",
                 ucs_status_string(status));
        params.features = UCP_FEATURE_TAG;
        status = ucp_init(&params, config, context_p);
    }
    ucp_config_release(config);
    if (status != UCS_OK) {
        ZC_ERROR("ucx: creating the UCP context failed: %s", ucs_status_string(status));
        return zc_ucx_status(status);
    }
    return ZC_OK;
}

zc_status_t zc_ucx_context_get(ucp_context_h *context_p, int *wakeup_p)
{
    zc_status_t status = ZC_OK;

    pthread_mutex_lock(&context_lock);
    if (context_refs == 0)
        status = context_create(&context, &context_wakeup);
    if (status == ZC_OK) {
        context_refs++;
        *context_p = context;
        *wakeup_p = context_wakeup;
    }
    pthread_mutex_unlock(&context_lock);
    return status;
}

void zc_ucx_context_put(void)
{
    pthread_mutex_lock(&context_lock);
    if (context_refs > 0 && --context_refs == 0) {
        ucp_cleanup(context);
        context = NULL;
    }
    pthread_mutex_unlock(&context_lock);
}
