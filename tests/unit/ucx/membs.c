#include "tests/unit/ucx/membs.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct membs_group {
    int size;
    pthread_barrier_t barrier;
    const void **slots; /* what each rank contributes to the current operation */
};

typedef struct membs_ctx {
    membs_group_t *group;
    int rank;
} membs_ctx_t;

membs_group_t *membs_group_create(int size)
{
    membs_group_t *g = calloc(1, sizeof(*g));
    if (!g)
        return NULL;
    g->size = size;
    g->slots = calloc((size_t)size, sizeof(*g->slots));
    if (!g->slots || pthread_barrier_init(&g->barrier, NULL, (unsigned)size) != 0) {
        free(g->slots);
        free(g);
        return NULL;
    }
    return g;
}

void membs_group_destroy(membs_group_t *group)
{
    if (!group)
        return;
    pthread_barrier_destroy(&group->barrier);
    free(group->slots);
    free(group);
}

/* Every rank publishes a pointer, reads the others', and nobody moves on until all have read. */
static zc_status_t membs_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    membs_ctx_t *c = ctx;
    membs_group_t *g = c->group;

    g->slots[c->rank] = mine;
    pthread_barrier_wait(&g->barrier);
    for (int r = 0; r < g->size; r++)
        memcpy((char *)all + (size_t)r * len, g->slots[r], len);
    pthread_barrier_wait(&g->barrier);
    return ZC_OK;
}

static zc_status_t membs_broadcast(void *ctx, void *buf, size_t len, int root)
{
    membs_ctx_t *c = ctx;
    membs_group_t *g = c->group;

    if (c->rank == root)
        g->slots[root] = buf;
    pthread_barrier_wait(&g->barrier);
    if (c->rank != root)
        memcpy(buf, g->slots[root], len);
    pthread_barrier_wait(&g->barrier);
    return ZC_OK;
}

static zc_status_t membs_barrier(void *ctx)
{
    membs_ctx_t *c = ctx;
    pthread_barrier_wait(&c->group->barrier);
    return ZC_OK;
}

static void membs_destroy(void *ctx)
{
    free(ctx);
}

static const zc_bootstrap_ops_t membs_ops = {
    .name = "memory",
    .allgather = membs_allgather,
    .broadcast = membs_broadcast,
    .barrier = membs_barrier,
    .destroy = membs_destroy,
};

zc_status_t membs_create(membs_group_t *group, int rank, zc_bootstrap_t **bs_p)
{
    zc_bootstrap_t *bs = calloc(1, sizeof(*bs));
    membs_ctx_t *c = calloc(1, sizeof(*c));
    if (!bs || !c) {
        free(bs);
        free(c);
        return ZC_ERR_NO_MEMORY;
    }
    c->group = group;
    c->rank = rank;
    bs->ops = &membs_ops;
    bs->ctx = c;
    bs->rank = rank;
    bs->size = group->size;
    *bs_p = bs;
    return ZC_OK;
}

typedef struct thread_arg {
    membs_rank_t r;
    const zc_config_t *cfg;
    membs_body_fn body;
    zc_status_t create_status;
} thread_arg_t;

static void *rank_thread(void *p)
{
    thread_arg_t *t = p;

    t->create_status = zc_ucx_comm_create(t->cfg, t->r.bs, &t->r.comm);
    if (t->create_status != ZC_OK) {
        snprintf(t->r.error, sizeof(t->r.error), "zc_ucx_comm_create: %s",
                 zc_status_string(t->create_status));
        return NULL;
    }
    t->body(&t->r);
    /* nobody leaves before every body is done: a destroyed peer would fail the others */
    zc_bootstrap_barrier(t->r.bs);
    zc_ucx_comm_destroy(t->r.comm);
    return NULL;
}

int membs_run(int size, const zc_config_t *cfg, membs_body_fn body, void *arg, char *why,
              size_t why_len)
{
    zc_config_t defaults;
    membs_group_t *g = membs_group_create(size);
    thread_arg_t *t = calloc((size_t)size, sizeof(*t));
    pthread_t *tid = calloc((size_t)size, sizeof(*tid));
    int ret = 0;

    snprintf(why, why_len, "%s", "");
    if (!cfg) {
        zc_config_defaults(&defaults);
        cfg = &defaults;
    }
    if (!g || !t || !tid) {
        snprintf(why, why_len, "out of memory");
        ret = -1;
        goto out;
    }
    for (int r = 0; r < size; r++) {
        t[r].r.rank = r;
        t[r].r.size = size;
        t[r].r.arg = arg;
        t[r].cfg = cfg;
        t[r].body = body;
        if (membs_create(g, r, &t[r].r.bs) != ZC_OK) {
            snprintf(why, why_len, "out of memory");
            ret = -1;
            goto out;
        }
    }
    for (int r = 0; r < size; r++)
        pthread_create(&tid[r], NULL, rank_thread, &t[r]);
    for (int r = 0; r < size; r++)
        pthread_join(tid[r], NULL);
    for (int r = 0; r < size; r++) {
        if (t[r].r.error[0] && ret == 0) {
            snprintf(why, why_len, "rank %d: %s", r, t[r].r.error);
            ret = -1;
        }
    }
out:
    if (t)
        for (int r = 0; r < size; r++)
            zc_bootstrap_destroy(t[r].r.bs);
    free(tid);
    free(t);
    membs_group_destroy(g);
    return ret;
}
