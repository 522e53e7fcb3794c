/*
 * Communicators: creation from the environment or a caller's bootstrap, the
 * progress thread, and teardown (statistics, state, transport).
 */
#include "collectives/op.h"

#include "collectives/hier.h"
#include "common/compiler.h"
#include "common/log.h"
#include "transport/bootstrap/tcp.h"

#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

/* A caller's hooks behind the bootstrap interface. */
typedef struct hooks_ctx {
    zc_bootstrap_hooks_t hooks;
    void *ctx;
} hooks_ctx_t;

static zc_status_t hooks_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    hooks_ctx_t *h = ctx;
    return h->hooks.allgather(h->ctx, mine, len, all);
}

static zc_status_t hooks_broadcast(void *ctx, void *buf, size_t len, int root)
{
    hooks_ctx_t *h = ctx;
    return h->hooks.broadcast(h->ctx, buf, len, root);
}

static zc_status_t hooks_barrier(void *ctx)
{
    hooks_ctx_t *h = ctx;
    return h->hooks.barrier(h->ctx);
}

static void hooks_destroy(void *ctx)
{
    hooks_ctx_t *h = ctx;
    if (h && h->hooks.destroy)
        h->hooks.destroy(h->ctx);
    free(h);
}

static const zc_bootstrap_ops_t hooks_ops = {
    .name = "caller",
    .allgather = hooks_allgather,
    .broadcast = hooks_broadcast,
    .barrier = hooks_barrier,
    .destroy = hooks_destroy,
};

/* Runs the queue whenever it holds ops (zc_comm_wait_round's rule); sleeps otherwise. */
static void *progress_thread(void *arg)
{
    zc_comm_t *comm = arg;
    uint64_t busy_ns = 0;

    pthread_mutex_lock(&comm->lock);
    for (;;) {
        if (!comm->head)
            busy_ns = 0;
        while (!comm->head && !comm->thread_stop)
            pthread_cond_wait(&comm->cond, &comm->lock);
        if (!comm->head && comm->thread_stop)
            break;
        pthread_mutex_unlock(&comm->lock);
        if (!busy_ns)
            busy_ns = zc_time_ns(); /* a new op: poll first */
        zc_comm_wait_round(comm, &busy_ns);
        pthread_mutex_lock(&comm->lock);
    }
    pthread_mutex_unlock(&comm->lock);
    return NULL;
}

/*
 * Fails on every rank, naming the first variable that differs, when the ranks'
 * wire settings disagree (common/config.h): before any UCX endpoint exists, so
 * that no rank waits for messages another will never send. One small allgather
 * of hashes; the values themselves only when the hashes differ.
 */
static zc_status_t agree_config(const zc_config_t *cfg, zc_bootstrap_t *bs)
{
    typedef struct agree_header {
        uint32_t magic;
        uint32_t record_size;
        uint64_t hash;
    } agree_header_t;
    const size_t record_size = zc_config_agreed_size();
    agree_header_t mine = {.magic = 0x5a434647u /* "ZCFG" */, .record_size = (uint32_t)record_size};
    agree_header_t *headers = calloc((size_t)bs->size, sizeof(*headers));
    char *records = calloc((size_t)bs->size + 1, record_size);
    zc_status_t status = ZC_ERR_NO_MEMORY;
    char msg[256];

    if (!headers || !records) {
        ZC_ERROR("zc_comm_init: no memory to compare the configuration of %d ranks", bs->size);
        goto out_free;
    }
    char *own = records + (size_t)bs->size * record_size;
    zc_config_agreed_record(cfg, own);
    mine.hash = zc_config_agreed_hash(own);
    ZC_CHECK_GOTO(zc_bootstrap_allgather(bs, &mine, sizeof(mine), headers), status, out_free);
    int same = 1;
    for (int r = 0; r < bs->size; r++) {
        if (headers[r].magic != mine.magic || headers[r].record_size != mine.record_size) {
            ZC_ERROR("zc_comm_init: rank %d runs another version of zipccl (its configuration "
                     "record has %" PRIu32 " bytes, this rank's %zu)",
                     r, headers[r].record_size, record_size);
            status = ZC_ERR_INVALID_CONFIG;
            goto out_free;
        }
        same &= headers[r].hash == mine.hash;
    }
    status = ZC_OK;
    if (same)
        goto out_free;
    ZC_CHECK_GOTO(zc_bootstrap_allgather(bs, own, record_size, records), status, out_free);
    if (zc_config_agreed_compare(records, bs->size, msg, sizeof(msg)) != 0) {
        ZC_ERROR("zc_comm_init: rank %d of %d: %s", bs->rank, bs->size, msg);
        status = ZC_ERR_INVALID_CONFIG;
    }
out_free:
    free(records);
    free(headers);
    return status;
}

static void comm_free(zc_comm_t *comm)
{
    if (comm->thread_on) {
        pthread_mutex_lock(&comm->lock);
        comm->thread_stop = 1;
        pthread_cond_broadcast(&comm->cond);
        pthread_mutex_unlock(&comm->lock);
        pthread_join(comm->thread, NULL);
        comm->thread_on = 0;
    }
    pthread_cond_destroy(&comm->cond);
    pthread_mutex_destroy(&comm->lock);
    zc_hier_destroy(comm->hier);
    zc_state_store_destroy(comm->store);
    if (comm->ucx)
        zc_coll_abort_flush(comm);
    zc_ucx_comm_destroy(comm->ucx); /* after this UCX touches no buffer of ours */
    free(comm->abort_in);
    free(comm->abort_out);
    free(comm->abort_reqs);
    free(comm->abort_got);
    for (size_t i = 0; i < comm->graveyard_len; i++)
        free(comm->graveyard[i]);
    free(comm->graveyard);
    for (int i = 0; i < ZC_COLL_BUFS; i++)
        free(comm->bufs[i].ptr);
    zc_bootstrap_destroy(comm->bs);
    free(comm->stats_file);
    free(comm->cfg_strings);
    free(comm);
}

zc_status_t zc_comm_create(const zc_config_t *cfg, zc_bootstrap_t *bs, zc_comm_t **comm_p)
{
    zc_status_t status;
    zc_comm_t *comm = calloc(1, sizeof(*comm));

    if (!comm) {
        zc_bootstrap_destroy(bs);
        return ZC_ERR_NO_MEMORY;
    }
    comm->cfg = *cfg;
    if (zc_config_own_strings(&comm->cfg, &comm->cfg_strings) != ZC_OK) {
        zc_bootstrap_destroy(bs);
        free(comm);
        return ZC_ERR_NO_MEMORY;
    }
    comm->bs = bs;
    comm->rank = bs->rank;
    comm->size = bs->size;
    pthread_mutex_init(&comm->lock, NULL);
    pthread_cond_init(&comm->cond, NULL);

    ZC_CHECK_GOTO(agree_config(cfg, bs), status, fail);
    ZC_CHECK_GOTO(zc_ucx_comm_create(cfg, bs, &comm->ucx), status, fail);
    ZC_CHECK_GOTO(zc_coll_abort_init(comm), status, fail);
    ZC_CHECK_GOTO(zc_policy_init(&comm->policy, cfg, bs, comm->ucx), status, fail);
    ZC_CHECK_GOTO(zc_state_store_create((size_t)cfg->state_max_bytes, &comm->store), status, fail);
    ZC_CHECK_GOTO(zc_hier_create(comm, &comm->hier), status, fail);
    if (cfg->progress_thread) {
        if (pthread_create(&comm->thread, NULL, progress_thread, comm) != 0) {
            ZC_ERROR("zc_comm_init: cannot start the progress thread");
            status = ZC_ERR_NO_MEMORY;
            goto fail;
        }
        comm->thread_on = 1;
    }
    static const char *const algo_choices[] = {ZC_CHOICE_NAMES(ZC_CHOICES_ALGO)};
    ZC_INFO("zc_comm_init: rank %d of %d, bootstrap %s, codec %s, algo %s, min bytes %" PRId64 "%s",
            comm->rank, comm->size, bs->ops->name,
            cfg->codec == ZC_POLICY_CODEC_AUTO ? "auto" : zc_codec_name((zc_codec_id_t)cfg->codec),
            algo_choices[cfg->algo], cfg->min_bytes,
            cfg->progress_thread ? ", progress thread" : "");
    *comm_p = comm;
    return ZC_OK;
fail:
    comm_free(comm);
    return status;
}

/* A zc_comm_config_t: a configuration whose STRING values it owns. */
struct zc_comm_config {
    zc_config_t cfg;
    char *strings; /* zc_config_own_strings' block */
};

ZC_EXPORT zc_status_t zc_comm_config_create(int read_env, zc_comm_config_t **config_p)
{
    char *no_env[] = {NULL};
    zc_comm_config_t *config;

    if (!config_p)
        return ZC_ERR_INVALID_ARG;
    config = calloc(1, sizeof(*config));
    if (!config)
        return ZC_ERR_NO_MEMORY;
    zc_status_t status = zc_config_load(read_env ? NULL : no_env, &config->cfg);
    if (status == ZC_OK)
        status = zc_config_own_strings(&config->cfg, &config->strings);
    if (status != ZC_OK) {
        free(config);
        return status;
    }
    *config_p = config;
    return ZC_OK;
}

ZC_EXPORT zc_status_t zc_comm_config_set(zc_comm_config_t *config, const char *name,
                                         const char *value)
{
    char *strings;

    if (!config || !name || !value)
        return ZC_ERR_INVALID_ARG;
    zc_config_t cfg = config->cfg;
    ZC_CHECK(zc_config_set(&cfg, name, value));
    /* @p value is the caller's: take copies of every string, then let the old ones go */
    ZC_CHECK(zc_config_own_strings(&cfg, &strings));
    free(config->strings);
    config->strings = strings;
    config->cfg = cfg;
    return ZC_OK;
}

ZC_EXPORT zc_status_t zc_comm_config_get(const zc_comm_config_t *config, const char *name,
                                         char *buf, size_t len)
{
    const zc_param_desc_t *param = name ? zc_param_find(name) : NULL;

    if (!config || !param || !buf || len == 0)
        return ZC_ERR_INVALID_ARG;
    zc_param_format(param, &config->cfg, buf, len);
    if (zc_param_is_secret(param) && buf[0]) /* never handed out, not even to its owner */
        snprintf(buf, len, "(set)");
    return ZC_OK;
}

ZC_EXPORT void zc_comm_config_destroy(zc_comm_config_t *config)
{
    if (!config)
        return;
    free(config->strings);
    free(config);
}

/* zc_comm_init's work for @p cfg: the process-wide settings, the tcp bootstrap, the comm. */
static zc_status_t init_tcp(const zc_config_t *cfg, zc_comm_t **comm_p)
{
    zc_bootstrap_t *bs;

    ZC_CHECK(zc_config_apply(cfg));
    ZC_CHECK(zc_bootstrap_tcp_create(cfg, NULL, &bs));
    return zc_comm_create(cfg, bs, comm_p);
}

ZC_EXPORT zc_status_t zc_comm_init(zc_comm_t **comm_p)
{
    zc_config_t cfg;

    if (!comm_p)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_config_load(NULL, &cfg));
    return init_tcp(&cfg, comm_p);
}

ZC_EXPORT zc_status_t zc_comm_init_config(const zc_comm_config_t *config, zc_comm_t **comm_p)
{
    if (!config || !comm_p)
        return ZC_ERR_INVALID_ARG;
    return init_tcp(&config->cfg, comm_p);
}

/* zc_comm_init_bootstrap's work for @p cfg (NULL: the environment's). */
static zc_status_t init_hooks(const zc_config_t *cfg, int rank, int size,
                              const zc_bootstrap_hooks_t *hooks, void *ctx, zc_comm_t **comm_p)
{
    zc_config_t env_cfg;

    if (!comm_p || !hooks || !hooks->allgather || !hooks->broadcast || !hooks->barrier ||
        size < 1 || size > ZC_UCX_MAX_RANKS || rank < 0 || rank >= size) {
        ZC_ERROR("zc_comm_init_bootstrap: invalid arguments (rank %d, size %d, hooks %s)", rank,
                 size, hooks ? "incomplete" : "NULL");
        if (hooks && hooks->destroy)
            hooks->destroy(ctx);
        return ZC_ERR_INVALID_ARG;
    }
    zc_status_t status = ZC_OK;
    if (!cfg) {
        status = zc_config_load(NULL, &env_cfg);
        cfg = &env_cfg;
    }
    if (status == ZC_OK)
        status = zc_config_apply(cfg);
    zc_bootstrap_t *bs = calloc(1, sizeof(*bs));
    hooks_ctx_t *h = calloc(1, sizeof(*h));
    if (!bs || !h || status != ZC_OK) {
        free(bs);
        free(h);
        if (hooks->destroy)
            hooks->destroy(ctx);
        return status != ZC_OK ? status : ZC_ERR_NO_MEMORY;
    }
    h->hooks = *hooks;
    h->ctx = ctx;
    bs->ops = &hooks_ops;
    bs->ctx = h;
    bs->rank = rank;
    bs->size = size;
    return zc_comm_create(cfg, bs, comm_p);
}

ZC_EXPORT zc_status_t zc_comm_init_bootstrap(int rank, int size, const zc_bootstrap_hooks_t *hooks,
                                             void *ctx, zc_comm_t **comm_p)
{
    return init_hooks(NULL, rank, size, hooks, ctx, comm_p);
}

ZC_EXPORT zc_status_t zc_comm_init_bootstrap_config(const zc_comm_config_t *config, int rank,
                                                    int size, const zc_bootstrap_hooks_t *hooks,
                                                    void *ctx, zc_comm_t **comm_p)
{
    if (!config) {
        if (hooks && hooks->destroy)
            hooks->destroy(ctx);
        return ZC_ERR_INVALID_ARG;
    }
    return init_hooks(&config->cfg, rank, size, hooks, ctx, comm_p);
}

ZC_EXPORT void zc_comm_destroy(zc_comm_t *comm)
{
    if (!comm)
        return;
    /* finish what was started: every rank is doing the same, or the deadline ends it */
    if (comm->thread_on) {
        pthread_mutex_lock(&comm->lock);
        while (comm->head)
            pthread_cond_wait(&comm->cond, &comm->lock);
        pthread_mutex_unlock(&comm->lock);
    } else {
        uint64_t busy_ns = zc_time_ns();
        while (comm->head)
            zc_comm_wait_round(comm, &busy_ns);
    }
    double residual = zc_comm_residual_norm(comm);
    comm->stats.oob_values = zc_comm_oob_values(comm);
    if (comm->cfg.stats)
        zc_stats_print(&comm->stats, residual, comm->rank, comm->size, stderr);
    if (comm->cfg.stats_file[0])
        zc_stats_write_json(&comm->stats, residual, comm->rank, comm->size, comm->cfg.stats_file);
    comm_free(comm);
}
