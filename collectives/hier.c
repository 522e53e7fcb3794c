/*
 * Hierarchical all-reduce (hier.h): host groups at communicator creation, the
 * inter-host communicator over a subset of the bootstrap, the inputs of the
 * variant model (policy.h, zc_policy_hier_t), and the algorithm's two
 * variants: reduce-scatter through shared memory, then either (shards) the
 * all-reduce of each local rank's shard between hosts and an all-gather
 * through shared memory, or (leader) the shards gathered to the host's leader,
 * its all-reduce of the whole host sum between hosts and a broadcast through
 * shared memory.
 *
 * Shared memory protocol (transport/shm/shm.h): rounds numbered from 0 for the
 * life of the communicator; round g uses buffer g % 2 of every slot. A rank
 * writes round g once every rank has consumed round g - 2 (consumed >= g - 1),
 * publishes written = g + 1, waits until every rank has published round g,
 * reads, and publishes consumed = g + 1. In the reduce-scatter, round k carries
 * piece k of every shard (the slot holds a piece per shard) and the owner of a
 * shard sums the pieces of slots 0, 1, ... in that order: one rank computes
 * each shard, in a fixed order, so the result does not depend on timing. In
 * the all-gather, round k carries piece k of the rank's own shard; in the
 * gather to the leader, piece k of every other rank's shard of the host sum
 * (the leader writes nothing); in the broadcast, piece k of the leader's result
 * (the others write nothing).
 */
#include "collectives/hier.h"

#include "collectives/op.h"
#include "collectives/reduce.h"
#include "common/compiler.h"
#include "common/dtype.h"
#include "common/log.h"
#include "transport/shm/shm.h"
#include "transport/topo/topo.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Bytes of each of a slot's two buffers: rounds of 4 MiB amortize the synchronisation. */
#define HIER_BUF_BYTES ((size_t)4 << 20)
/* The broadcast's rounds end with the leader's path between hosts (the statistics' codec). */
#define HIER_PATH_BYTES 256
_Static_assert(sizeof(zc_path_t) <= HIER_PATH_BYTES, "a path fits the broadcast's trailer");
/* Shard boundaries fall on multiples of this many values (QSGD buckets, 256-byte alignment). */
#define HIER_GRANULE 4096
/*
 * The local rank that runs the leader variant's all-reduce between hosts: the same local index
 * on every host, since the leaders' communicator is that local rank's cross. host_order puts
 * each host's leader, the rank nearest its NIC, first.
 */
#define HIER_LEADER 0
/* How often a wait asks the kernel whether the peers it waits for still live. */
#define LIVENESS_PERIOD_NS 20000000ull

struct zc_hier {
    int local_rank, local_size, node, nodes;
    int *local_ranks; /* [local_size]: the global ranks of this host, in order */
    int *cross_ranks; /* [nodes]: the global rank of each host's rank with this local rank */
    zc_shm_t *shm;
    zc_comm_t *cross;        /* between hosts: this local rank's counterparts, flat */
    uint64_t round;          /* shared-memory rounds completed on this communicator */
    zc_hier_variant_t fixed; /* ZIPCCL_TOPOLOGY=shards or leader: every call's variant */
    zc_policy_hier_t *model; /* auto or hierarchical: the variant model; else NULL */
    /* cross->policy.in for shards calls (as created) and for leader calls (the link alone) */
    zc_policy_inputs_t cross_shared, cross_alone;
};

/* ---- a bootstrap over a subset of another's ranks --------------------------------------------
 * Every rank of the parent calls every operation (the subsets of a partition each run the same
 * sequence); lengths may differ between subsets, so each operation first gathers them. */

typedef struct subset {
    zc_bootstrap_t *parent;
    const int *members; /* [n]: parent ranks, in subset rank order */
    int n;
} subset_t;

/* Gathers every parent rank's @p len bytes, then copies the members' into @p all (n * len). */
static zc_status_t subset_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    subset_t *s = ctx;
    zc_bootstrap_t *p = s->parent;
    uint64_t my_len = len, *lens = calloc((size_t)p->size, sizeof(*lens));
    zc_status_t status = ZC_ERR_NO_MEMORY;
    unsigned char *every = NULL, *padded = NULL;

    if (!lens)
        return status;
    ZC_CHECK_GOTO(zc_bootstrap_allgather(p, &my_len, sizeof(my_len), lens), status, out);
    uint64_t stride = 0;
    for (int r = 0; r < p->size; r++)
        stride = lens[r] > stride ? lens[r] : stride;
    every = malloc((size_t)p->size * stride + 1);
    padded = calloc(1, stride + 1);
    if (!every || !padded) {
        status = ZC_ERR_NO_MEMORY;
        goto out;
    }
    if (len)
        memcpy(padded, mine, len);
    ZC_CHECK_GOTO(zc_bootstrap_allgather(p, padded, stride, every), status, out);
    for (int i = 0; i < s->n; i++) {
        if (lens[s->members[i]] != len) {
            ZC_ERROR("hierarchical bootstrap: rank %d gave %" PRIu64 " bytes, rank %d %zu",
                     s->members[i], lens[s->members[i]], p->rank, len);
            status = ZC_ERR_MISMATCH;
            goto out;
        }
        if (len)
            memcpy((unsigned char *)all + (size_t)i * len, every + (size_t)s->members[i] * stride,
                   len);
    }
    status = ZC_OK;
out:
    free(padded);
    free(every);
    free(lens);
    return status;
}

static zc_status_t subset_broadcast(void *ctx, void *buf, size_t len, int root)
{
    subset_t *s = ctx;
    if (root < 0 || root >= s->n)
        return ZC_ERR_INVALID_ARG;
    unsigned char *all = malloc((size_t)s->n * len + 1);
    if (!all)
        return ZC_ERR_NO_MEMORY;
    zc_status_t status = subset_allgather(ctx, buf, len, all);
    if (status == ZC_OK && len)
        memcpy(buf, all + (size_t)root * len, len);
    free(all);
    return status;
}

static zc_status_t subset_barrier(void *ctx)
{
    subset_t *s = ctx;
    return zc_bootstrap_barrier(s->parent);
}

static void subset_destroy(void *ctx)
{
    free(ctx);
}

static const zc_bootstrap_ops_t subset_ops = {
    .name = "hierarchical subset",
    .allgather = subset_allgather,
    .broadcast = subset_broadcast,
    .barrier = subset_barrier,
    .destroy = subset_destroy,
};

/* ---- setup ----------------------------------------------------------------------------------- */

void zc_hier_destroy(zc_hier_t *hier)
{
    if (!hier)
        return;
    if (hier->cross) {
        /* the parent prints the statistics, the inter-host calls' included */
        hier->cross->cfg.stats = 0;
        hier->cross->cfg.stats_file = "";
        zc_log_mute(1);
        zc_comm_destroy(hier->cross);
        zc_log_mute(0);
    }
    zc_shm_destroy(hier->shm);
    free(hier->model);
    free(hier->local_ranks);
    free(hier->cross_ranks);
    free(hier);
}

int zc_hier_groups(const zc_hier_t *hier, int *local_rank_p, int *local_size_p, int *node_p,
                   int *nodes_p)
{
    if (!hier)
        return -1;
    *local_rank_p = hier->local_rank;
    *local_size_p = hier->local_size;
    *node_p = hier->node;
    *nodes_p = hier->nodes;
    return 0;
}

/*
 * The ranks of host @p n in local order into @p order: the host's leader first
 * (zc_topo_pick_leader over its ranks' facts in rank order: the rank nearest
 * its NIC), then its other ranks in rank order. The leaders of every host are
 * thus local rank 0, and their communicator between hosts is local rank 0's.
 * @p host ([size]) is scratch. Returns the host's rank count. Pure: every rank
 * computes every host's order alike from the agreed facts.
 */
static int host_order(const int *node_of_rank, const zc_topo_facts_t *facts, int size, int n,
                      int *order, zc_topo_facts_t *host)
{
    int count = 0;
    for (int r = 0; r < size; r++)
        if (node_of_rank[r] == n) {
            order[count] = r;
            host[count++] = facts[r];
        }
    const int lead = zc_topo_pick_leader(host, count), first = order[lead];
    memmove(order + 1, order, (size_t)lead * sizeof(*order));
    order[0] = first;
    return count;
}

/*
 * Logs, at info level, this rank's place and facts, its host's line (on every rank: the ranks of
 * a host log the same line) and, on rank 0, every host's line.
 */
static void log_groups(const zc_comm_t *comm, const char *id, const int *node_of_rank, int nodes,
                       int local_rank, int local_size, const char *topology,
                       const zc_topo_facts_t *facts)
{
    if (!ZC_LOG_ENABLED(ZC_LOG_INFO))
        return;
    char line[1024];
    zc_topo_facts_format(&facts[comm->rank], line, sizeof(line));
    ZC_INFO("zc_comm_init: rank %d is local rank %d of %d on host %d of %d (%.*s); %s; "
            "topology %s",
            comm->rank, local_rank, local_size, node_of_rank[comm->rank], nodes,
            ZC_TOPO_HOST_ID_LEN, id, line, topology);
    int *ranks = malloc((size_t)comm->size * sizeof(*ranks));
    zc_topo_facts_t *host = malloc((size_t)comm->size * sizeof(*host));
    for (int n = 0; ranks && host && n < nodes; n++) {
        if (comm->rank != 0 && n != node_of_rank[comm->rank])
            continue;
        int count = host_order(node_of_rank, facts, comm->size, n, ranks, host);
        for (int l = 0; l < count; l++)
            host[l] = facts[ranks[l]];
        zc_topo_format_host(ranks, host, count, line, sizeof(line)); /* a cut line still tells */
        ZC_INFO("zc_comm_init: host %d: %s", n, line);
    }
    free(host);
    free(ranks);
}

/* What each rank tells the others at creation: its host, and its place on it. */
typedef struct host_record {
    char id[ZC_TOPO_HOST_ID_LEN];
    zc_topo_facts_t facts;
    int32_t facts_status; /* not ZC_OK: ZIPCCL_TOPO_XML could not be read (logged there) */
    int32_t pad;
} host_record_t;

/* What each rank tells the others about its host's segment. */
typedef struct shm_note {
    char name[ZC_SHM_NAME_LEN];
    int32_t status;
    int32_t pad;
} shm_note_t;

/*
 * Local rank 0 creates the segment; the others open it; everyone learns whether
 * every rank of the job has its segment; then it is unlinked. ZC_ERR_IO (logged
 * where it failed, named here) when any rank lacks it.
 */
static zc_status_t shm_setup(zc_comm_t *comm, zc_hier_t *h)
{
    shm_note_t mine = {.status = ZC_OK}, *all = calloc((size_t)comm->size, sizeof(*all));
    zc_status_t status;

    if (!all)
        return ZC_ERR_NO_MEMORY;
    if (h->local_rank == 0) {
        zc_shm_make_name(mine.name);
        mine.status = zc_shm_create(mine.name, h->local_size, HIER_BUF_BYTES, &h->shm);
    }
    ZC_CHECK_GOTO(zc_bootstrap_allgather(comm->bs, &mine, sizeof(mine), all), status, out);
    const shm_note_t *leader = &all[h->local_ranks[0]];
    if (h->local_rank != 0) {
        mine.status = leader->status;
        if (leader->status == ZC_OK) {
            char name[ZC_SHM_NAME_LEN];
            memcpy(name, leader->name, sizeof(name));
            name[sizeof(name) - 1] = '\0';
            mine.status =
                zc_shm_attach(name, h->local_rank, h->local_size, HIER_BUF_BYTES, &h->shm);
        }
    }
    ZC_CHECK_GOTO(zc_bootstrap_allgather(comm->bs, &mine, sizeof(mine), all), status, out);
    if (h->local_rank == 0 && h->shm)
        zc_shm_unlink(mine.name); /* every local rank holds it, or gave up on it */
    status = ZC_OK;
    for (int r = 0; r < comm->size; r++) {
        if (all[r].status != ZC_OK) {
            ZC_ERROR("zc_comm_init: rank %d has no shared memory with its host's ranks: %s", r,
                     zc_status_string((zc_status_t)all[r].status));
            status = ZC_ERR_IO;
            break;
        }
    }
out:
    free(all);
    return status;
}

/* The communicator between hosts: this local rank's counterparts, flat, over a bootstrap subset. */
static zc_status_t cross_setup(zc_comm_t *comm, zc_hier_t *h)
{
    subset_t *s = calloc(1, sizeof(*s));
    zc_bootstrap_t *bs = calloc(1, sizeof(*bs));
    if (!s || !bs) {
        free(s);
        free(bs);
        return ZC_ERR_NO_MEMORY;
    }
    s->parent = comm->bs;
    s->members = h->cross_ranks;
    s->n = h->nodes;
    bs->ops = &subset_ops;
    bs->ctx = s;
    bs->rank = h->node;
    bs->size = h->nodes;
    zc_config_t cfg = comm->cfg;
    cfg.topology = ZC_CFG_TOPOLOGY_FLAT;
    cfg.progress_thread = 0; /* the parent's op drives it */
    cfg.policy_file = "";    /* measured, not shared with the parent's file */
    ZC_CHECK(zc_comm_create(&cfg, bs, &h->cross));
    /* Local ranks share the host's NIC: each of them gets its share of the nominal bandwidth
     * (a measured one was measured with every local rank measuring at once); the leader
     * alone gets all of it (model_setup measures both where the model needs them). */
    h->cross_alone = h->cross->policy.in;
    if (!h->cross->policy.measured)
        h->cross->policy.in.link_bw /= h->local_size;
    else
        h->cross_alone.link_bw *= h->local_size;
    h->cross_shared = h->cross->policy.in;
    return ZC_OK;
}

/* What each rank measured for the variant model (model_setup). */
typedef struct model_report {
    zc_policy_inputs_t shared, alone; /* alone: where leader is set */
    double copy_bw, add_bw;
    int64_t status;
    int64_t leader; /* measured alone: the leader of a host, with hosts to measure to */
} model_report_t;

/*
 * Copy and f32 add speeds of this rank through its own slot of the host's shared memory
 * (every local rank at once, as a call runs them): the best of 3 over one buffer.
 */
static zc_status_t measure_shm(zc_hier_t *h, double *copy_bw_p, double *add_bw_p)
{
    const size_t n = HIER_BUF_BYTES / sizeof(float);
    float *src = malloc(HIER_BUF_BYTES), *acc = calloc(n, sizeof(float));
    void *buf = zc_shm_buf(h->shm, h->local_rank, 0); /* no round has used it yet */
    double copy = INFINITY, add = INFINITY;

    if (!src || !acc) {
        free(src);
        free(acc);
        ZC_ERROR("zc_comm_init: cannot allocate 2 x %zu bytes to measure shared memory",
                 (size_t)HIER_BUF_BYTES);
        return ZC_ERR_NO_MEMORY;
    }
    for (size_t i = 0; i < n; i++)
        src[i] = (float)(i % 1021);
    for (int rep = 0; rep < 3; rep++) {
        uint64_t t = zc_time_ns();
        memcpy(buf, src, HIER_BUF_BYTES);
        copy = ZC_MIN(copy, (double)(zc_time_ns() - t) * 1e-9);
        t = zc_time_ns();
        zc_dtype_add_f32(ZC_DTYPE_F32, buf, n, acc);
        add = ZC_MIN(add, (double)(zc_time_ns() - t) * 1e-9);
    }
    free(src);
    free(acc);
    *copy_bw_p = HIER_BUF_BYTES / ZC_MAX(copy, 1e-9);
    *add_bw_p = HIER_BUF_BYTES / ZC_MAX(add, 1e-9);
    return ZC_OK;
}

/*
 * The variant model's inputs, agreed over every rank of the job (the ranks of different local
 * ranks measure different links): the flat policy with measured inputs (comm's own, or measured
 * now), shared-memory speeds (every rank at once), the link between hosts with every local
 * rank measuring at once (the shards' share of the NIC), then with the leaders alone; the
 * slowest of each over every rank that measured it, rounded to classes. Collective over comm.
 */
static zc_status_t model_setup(zc_comm_t *comm, zc_hier_t *h, const int *node_of_rank,
                               unsigned variants)
{
    zc_policy_hier_t *m = calloc(1, sizeof(*m));
    zc_policy_t *flat = malloc(sizeof(*flat));
    model_report_t mine, *all = calloc((size_t)comm->size, sizeof(*all));
    zc_status_t status = ZC_ERR_NO_MEMORY;

    if (!m || !flat || !all)
        goto out;
    m->local_ranks = h->local_size;
    m->variants = variants;
    *flat = comm->policy;
    if (!flat->measured)
        ZC_CHECK_GOTO(zc_policy_measure(flat, (uint64_t)comm->cfg.seed, comm->bs, comm->ucx),
                      status, out);
    /* the flat ring's steps that leave the busiest host (its link was measured on them), and
     * the share of each rank's payloads that leave its host in an all-to-all, all R at once */
    int crossings = 1;
    for (int n = 0; n < h->nodes; n++) {
        int leave = 0;
        for (int r = 0; r < comm->size; r++)
            leave += node_of_rank[r] == n && node_of_rank[(r + 1) % comm->size] != n;
        crossings = ZC_MAX(crossings, leave);
    }
    const double N = comm->size, R = h->local_size;
    zc_policy_hier_set_flat(m, flat, R * (N - R) / (N - 1) / crossings);
    memset(&mine, 0, sizeof(mine));
    mine.shared = mine.alone = h->cross->policy.in;
    mine.status = measure_shm(h, &mine.copy_bw, &mine.add_bw);
    if (mine.status == ZC_OK && h->nodes > 1)
        mine.status = zc_policy_measure_link(h->cross->ucx, &mine.shared);
    ZC_CHECK_GOTO(zc_bootstrap_barrier(comm->bs), status, out);
    mine.leader = h->nodes > 1 && h->local_rank == HIER_LEADER;
    if (mine.status == ZC_OK && mine.leader)
        mine.status = zc_policy_measure_link(h->cross->ucx, &mine.alone);
    ZC_CHECK_GOTO(zc_bootstrap_allgather(comm->bs, &mine, sizeof(mine), all), status, out);

    zc_policy_inputs_t shared = all[0].shared, alone = all[0].shared;
    int leaders = 0;
    double copy_bw = all[0].copy_bw, add_bw = all[0].add_bw;
    for (int r = 0; r < comm->size; r++) {
        if (all[r].status < 0) {
            ZC_ERROR("zc_comm_init: rank %d failed to measure its links between hosts or its "
                     "shared memory (%s)",
                     r, zc_status_string((zc_status_t)all[r].status));
            status = (zc_status_t)all[r].status;
            goto out;
        }
        zc_policy_inputs_slowest(&shared, &all[r].shared);
        copy_bw = ZC_MIN(copy_bw, all[r].copy_bw);
        add_bw = ZC_MIN(add_bw, all[r].add_bw);
    }
    for (int r = 0; r < comm->size; r++) {
        if (all[r].leader && leaders++ == 0)
            alone = all[r].alone;
        else if (all[r].leader)
            zc_policy_inputs_slowest(&alone, &all[r].alone);
    }
    /* the codecs' and the add's speeds: the flat policy's, agreed over every rank already */
    for (zc_policy_inputs_t *in = &shared; in; in = in == &shared ? &alone : NULL) {
        memcpy(in->enc_bw, m->flat.in.enc_bw, sizeof(in->enc_bw));
        memcpy(in->dec_bw, m->flat.in.dec_bw, sizeof(in->dec_bw));
        memcpy(in->reduce_bw, m->flat.in.reduce_bw, sizeof(in->reduce_bw));
        in->add_bw = m->flat.in.add_bw;
        zc_policy_round_inputs(in);
    }
    m->shm_copy_bw = zc_policy_agree_speed(0, copy_bw);
    m->shm_add_bw = zc_policy_agree_speed(0, add_bw);
    m->shared = m->alone = h->cross->policy;
    m->shared.in = shared;
    m->alone.in = alone;
    m->flat.log_decisions = m->flat_a2a.log_decisions = 0;
    m->shared.log_decisions = m->alone.log_decisions = 0;
    m->log_decisions = comm->rank == 0;
    /* the cross communicators decide their own paths: shards calls with what they measured
     * themselves, the leaders' calls with the link alone */
    h->cross_alone.link_bw = alone.link_bw;
    h->cross_alone.link_lat = alone.link_lat;
    h->cross_alone.round_lat = alone.round_lat;
    if (comm->rank == 0)
        ZC_INFO("zc_comm_init: variant model: shared memory copy %.3g GB/s, add %.3g GB/s; "
                "between hosts %.3g GB/s per local rank with all %d at once (step %.1f us, "
                "round %.1f us), %.3g GB/s for the leader alone (step %.1f us, round %.1f us)",
                m->shm_copy_bw * 1e-9, m->shm_add_bw * 1e-9, shared.link_bw * 1e-9, h->local_size,
                shared.link_lat * 1e6, shared.round_lat * 1e6, alone.link_bw * 1e-9,
                alone.link_lat * 1e6, alone.round_lat * 1e6);
    h->model = m;
    m = NULL;
    status = ZC_OK;
out:
    free(all);
    free(flat);
    free(m);
    return status;
}

zc_status_t zc_hier_create(zc_comm_t *comm, zc_hier_t **hier_p)
{
    static const char *const topologies[] = {ZC_CHOICE_NAMES(ZC_CHOICES_TOPOLOGY)};
    const int size = comm->size;
    host_record_t mine = {.facts_status = ZC_OK};
    char *id = mine.id;
    int local_rank, local_size, node, nodes;
    zc_status_t status;

    *hier_p = NULL;
    if (comm->bs->ops == &subset_ops)
        return ZC_OK; /* the communicator between hosts: one rank per host by construction */
    if (comm->cfg.host_id[0])
        snprintf(id, ZC_TOPO_HOST_ID_LEN, "%s", comm->cfg.host_id);
    else
        ZC_CHECK(zc_topo_host_id(id));
    zc_topo_facts_unknown(&mine.facts);
    mine.facts_status = zc_topo_this_facts(comm->cfg.topo_xml, &mine.facts);
    char *ids = malloc((size_t)size * ZC_TOPO_HOST_ID_LEN);
    host_record_t *records = malloc((size_t)size * sizeof(*records));
    zc_topo_facts_t *facts = malloc((size_t)size * sizeof(*facts));
    zc_topo_facts_t *scratch = malloc((size_t)size * sizeof(*scratch));
    int *node_of_rank = calloc((size_t)size, sizeof(int));
    int *per_node = calloc((size_t)size, sizeof(int));
    zc_hier_t *h = calloc(1, sizeof(*h));
    status = ZC_ERR_NO_MEMORY;
    if (!ids || !records || !facts || !scratch || !node_of_rank || !per_node || !h)
        goto out;
    ZC_CHECK_GOTO(zc_bootstrap_allgather(comm->bs, &mine, sizeof(mine), records), status, out);
    for (int r = 0; r < size; r++) {
        if (records[r].facts_status != ZC_OK) {
            ZC_ERROR("zc_comm_init: rank %d cannot read its topology (ZIPCCL_TOPO_XML): %s", r,
                     zc_status_string((zc_status_t)records[r].facts_status));
            status = ZC_ERR_INVALID_CONFIG;
            goto out;
        }
        memcpy(ids + (size_t)r * ZC_TOPO_HOST_ID_LEN, records[r].id, ZC_TOPO_HOST_ID_LEN);
        facts[r] = records[r].facts;
        zc_topo_facts_sanitize(&facts[r]);
    }
    ZC_CHECK_GOTO(zc_topo_group_hosts(ids, ZC_TOPO_HOST_ID_LEN, size, comm->rank, &local_rank,
                                      &local_size, &node, &nodes, node_of_rank),
                  status, out);
    int equal = 1;
    for (int r = 0; r < size; r++)
        per_node[node_of_rank[r]]++;
    for (int n = 1; n < nodes; n++)
        equal &= per_node[n] == per_node[0];

    const int topology = (int)comm->cfg.topology;
    const int forced = topology != ZC_CFG_TOPOLOGY_AUTO && topology != ZC_CFG_TOPOLOGY_FLAT;
    int hier;
    if (forced && !equal) {
        ZC_ERROR("zc_comm_init: ZIPCCL_TOPOLOGY=%s needs the same number of ranks on every "
                 "host; host 0 has %d, host %d has %d",
                 topologies[topology], per_node[0], node, local_size);
        status = ZC_ERR_INVALID_CONFIG;
        goto out;
    }
    if (forced)
        hier = local_size >= 2; /* one rank per host: nothing to share */
    else if (topology == ZC_CFG_TOPOLOGY_AUTO)
        hier = nodes >= 2 && equal && local_size >= 2;
    else
        hier = 0;
    int *order = per_node; /* reused: a host's ranks in local order (host_order) */
    host_order(node_of_rank, facts, size, node, order, scratch);
    for (int l = 0; l < local_size; l++)
        if (order[l] == comm->rank)
            local_rank = l;
    log_groups(comm, id, node_of_rank, nodes, local_rank, local_size,
               topologies[hier ? topology : ZC_CFG_TOPOLOGY_FLAT], facts);
    status = ZC_OK;
    if (!hier)
        goto out;

    h->local_rank = local_rank;
    h->local_size = local_size;
    h->node = node;
    h->nodes = nodes;
    h->local_ranks = calloc((size_t)local_size, sizeof(int));
    h->cross_ranks = calloc((size_t)nodes, sizeof(int));
    if (!h->local_ranks || !h->cross_ranks) {
        status = ZC_ERR_NO_MEMORY;
        goto out;
    }
    memcpy(h->local_ranks, order, (size_t)local_size * sizeof(*order));
    for (int n = 0; n < nodes; n++) {
        host_order(node_of_rank, facts, size, n, order, scratch);
        h->cross_ranks[n] = order[local_rank];
    }
    status = shm_setup(comm, h);
    if (status == ZC_ERR_IO && topology == ZC_CFG_TOPOLOGY_AUTO) {
        ZC_WARN("zc_comm_init: ZIPCCL_TOPOLOGY=auto: staying flat without shared memory");
        status = ZC_OK;
        goto out;
    }
    if (status != ZC_OK)
        goto out;
    zc_shm_place(h->shm, mine.facts.numa); /* a hint: a refusal is logged, nothing fails */
    ZC_CHECK_GOTO(cross_setup(comm, h), status, out);
    h->fixed = topology == ZC_CFG_TOPOLOGY_LEADER ? ZC_HIER_LEADER : ZC_HIER_SHARDS;
    if (topology == ZC_CFG_TOPOLOGY_AUTO || topology == ZC_CFG_TOPOLOGY_HIERARCHICAL)
        ZC_CHECK_GOTO(model_setup(comm, h, node_of_rank,
                                  1u << ZC_HIER_SHARDS | 1u << ZC_HIER_LEADER |
                                      (topology == ZC_CFG_TOPOLOGY_AUTO ? 1u << ZC_HIER_FLAT : 0u)),
                      status, out);
    *hier_p = h;
    h = NULL;
out:
    zc_hier_destroy(h);
    free(per_node);
    free(node_of_rank);
    free(scratch);
    free(facts);
    free(records);
    free(ids);
    return status;
}

double zc_comm_residual_norm(const zc_comm_t *comm)
{
    double own = zc_state_store_residual_norm(comm->store);
    if (!comm->hier)
        return own;
    double cross = zc_comm_residual_norm(comm->hier->cross);
    return sqrt(own * own + cross * cross);
}

uint64_t zc_comm_oob_values(const zc_comm_t *comm)
{
    uint64_t own = zc_state_store_oob_values(comm->store);
    return comm->hier ? own + zc_comm_oob_values(comm->hier->cross) : own;
}

/* The variant of a call: the configured one, or the model's; from the call and agreed inputs. */
static zc_hier_variant_t variant_of(const zc_hier_t *h, const zc_coll_op_t *op)
{
    if (!h->model)
        return h->fixed;
    return zc_policy_hier_choose(h->model, op->count, op->dtype, op->op);
}

int zc_hier_route(zc_coll_op_t *op)
{
    const zc_comm_t *comm = op->comm;

    if (!comm->hier || op->control || op->count < (size_t)comm->hier->local_size)
        return 0;
    const zc_hier_variant_t variant = variant_of(comm->hier, op);
    if (comm->hier->model)
        zc_policy_hier_note(comm->hier->model, op->count, op->dtype, op->op, variant);
    if (variant == ZC_HIER_FLAT)
        return 0;
    memset(&op->path, 0, sizeof(op->path));
    op->path.algo = ZC_ALGO_RAW_RING;
    memcpy(&op->path.params, &comm->policy.params[ZC_CODEC_NONE], sizeof(op->path.params));
    op->algo = &zc_algo_hier;
    return 1;
}

/* ---- the algorithm --------------------------------------------------------------------------- */

enum { STEP_SCATTER, STEP_TO_LEADER, STEP_CROSS, STEP_BCAST, STEP_GATHER, STEP_DONE };

typedef struct hier_op {
    zc_hier_t *h;
    int step;
    int leader;           /* the leader variant (else shards) */
    size_t esize;         /* bytes of the caller's type */
    size_t fsize;         /* bytes of a value of the host's sum: 4 with widen, else esize */
    size_t *off, *len;    /* [local_size]: the shards */
    size_t piece;         /* values of a shard per reduce-scatter round */
    size_t gpiece;        /* values of the caller's type per all-gather or broadcast round */
    size_t lpiece;        /* values of the host's sum per round of the gather to the leader */
    uint64_t rs_rounds;   /* reduce-scatter rounds: the longest shard over piece */
    uint64_t tl_rounds;   /* leader: rounds of the gather to the leader: longest shard / lpiece */
    uint64_t ag_rounds;   /* all-gather rounds: the longest shard over gpiece; leader: broadcast
                           * rounds, the count over gpiece */
    uint64_t k;           /* next round of the current step */
    int wrote;            /* round k's data is published */
    uint64_t seen;        /* sum of every slot's counters at the last look: progress */
    uint64_t liveness_ns; /* when the peers were last checked */
    int widen;            /* f32/f16/bf16 sum or average: the host's sum is kept in f32 */
    float *acc;           /* widen: this rank's shard of the sum (recvbuf's own for f32) */
    void *sum;            /* leader variant, on the leader: the whole host sum (f32 or recvbuf) */
    void *owned;          /* what this op allocated of acc and sum */
    zc_coll_op_t *child;  /* the inter-host all-reduce */
} hier_op_t;

static zc_status_t hier_start(zc_coll_op_t *op)
{
    zc_hier_t *h = op->comm->hier;
    const int L = h->local_size;
    hier_op_t *ho = calloc(1, sizeof(*ho));
    if (!ho)
        return ZC_ERR_NO_MEMORY;
    op->priv = ho;
    ho->h = h;
    ho->leader = variant_of(h, op) == ZC_HIER_LEADER;
    ho->off = calloc((size_t)L, sizeof(size_t));
    ho->len = calloc((size_t)L, sizeof(size_t));
    if (!ho->off || !ho->len)
        return ZC_ERR_NO_MEMORY;
    ho->esize = zc_dtype_bytes(op->dtype);
    size_t longest = 0;
    for (int s = 0; s < L; s++) {
        zc_coll_split(op->count, (size_t)L, HIER_GRANULE, (size_t)s, &ho->off[s], &ho->len[s]);
        longest = ho->len[s] > longest ? ho->len[s] : longest;
    }
    ho->widen = zc_dtype_size(op->dtype) != 0 && (op->op == ZC_OP_SUM || op->op == ZC_OP_AVG);
    ho->fsize = ho->widen ? sizeof(float) : ho->esize;
    ho->piece = HIER_BUF_BYTES / ho->esize / (size_t)L;
    ho->gpiece = (HIER_BUF_BYTES - (ho->leader ? HIER_PATH_BYTES : 0)) / ho->esize;
    ho->lpiece = HIER_BUF_BYTES / ho->fsize;
    ho->rs_rounds = (longest + ho->piece - 1) / ho->piece;
    ho->tl_rounds = ho->leader ? (longest + ho->lpiece - 1) / ho->lpiece : 0;
    ho->ag_rounds = ((ho->leader ? op->count : longest) + ho->gpiece - 1) / ho->gpiece;
    const int me = h->local_rank, whole = ho->leader && me == HIER_LEADER;
    if (ho->widen && op->dtype == ZC_DTYPE_F32) {
        ho->sum = op->recvbuf;
    } else if (ho->widen) {
        /* the leader keeps the whole host sum in f32; the others their shard */
        ho->owned = malloc((whole ? op->count : ho->len[me]) * sizeof(float));
        if (!ho->owned)
            return ZC_ERR_NO_MEMORY;
        ho->sum = ho->owned;
    } else {
        ho->sum = op->recvbuf;
    }
    if (ho->widen)
        ho->acc = (float *)ho->sum + (whole || op->dtype == ZC_DTYPE_F32 ? ho->off[me] : 0);
    if (!whole)
        ho->sum = NULL;
    ho->step = STEP_SCATTER;
    return ZC_OK;
}

/* Values of shard @p s in round @p k with @p piece values per round. */
static size_t piece_len(const hier_op_t *ho, int s, uint64_t k, size_t piece)
{
    size_t begin = (size_t)k * piece;
    if (begin >= ho->len[s])
        return 0;
    return ho->len[s] - begin < piece ? ho->len[s] - begin : piece;
}

static const char *const step_names[] = {"hierarchical reduce-scatter (shared memory)",
                                         "gather to the host's leader (shared memory)",
                                         "hierarchical inter-host all-reduce",
                                         "broadcast from the host's leader (shared memory)",
                                         "hierarchical all-gather (shared memory)",
                                         "done"};

/*
 * ZC_OK when every slot's counter (@p consumed: the consumed ones, else written)
 * is at least @p target; ZC_INPROGRESS while some are below and the peers live
 * and move (a counter, or the beat of a peer in its all-reduce between hosts); ZC_ERR_PEER when a
 * peer waited for has left the segment (exited or died), ZC_ERR_TIMEOUT when no counter moved for
 * ZIPCCL_TIMEOUT_S: both logged, blamed on the peer furthest behind.
 */
static zc_status_t wait_slots(zc_coll_op_t *op, hier_op_t *ho, int consumed, uint64_t target)
{
    zc_hier_t *h = ho->h;
    uint64_t sum = 0, low = UINT64_MAX;
    int behind = -1, pending = 0;

    for (int s = 0; s < h->local_size; s++) {
        zc_shm_slot_t *slot = zc_shm_slot(h->shm, s);
        uint64_t w = atomic_load_explicit(&slot->written, memory_order_acquire);
        uint64_t c = atomic_load_explicit(&slot->consumed, memory_order_acquire);
        uint64_t v = consumed ? c : w;
        sum += w + c + atomic_load_explicit(&slot->beat, memory_order_relaxed);
        if (v < target) {
            pending++;
            if (v < low) {
                low = v;
                behind = s;
            }
        }
    }
    if (!pending)
        return ZC_OK;
    op->waiting_for = h->local_ranks[behind];
    uint64_t now = zc_time_ns();
    if (sum != ho->seen) {
        ho->seen = sum;
        op->deadline_ns = now + (uint64_t)op->comm->cfg.timeout_s * 1000000000ull;
    }
    if (now - ho->liveness_ns > LIVENESS_PERIOD_NS) {
        ho->liveness_ns = now;
        for (int s = 0; s < h->local_size; s++) {
            /* only the peers waited for: one that finished and left is no failure */
            zc_shm_slot_t *slot = zc_shm_slot(h->shm, s);
            uint64_t v = atomic_load_explicit(consumed ? &slot->consumed : &slot->written,
                                              memory_order_acquire);
            if (s == h->local_rank || v >= target || zc_shm_peer_alive(h->shm, s))
                continue;
            ZC_ERROR("rank %d: allreduce #%" PRIu64 " (%zu values): lost rank %d (local rank %d "
                     "of this host): it left the host's shared memory in the %s",
                     op->comm->rank, op->seq, op->count, h->local_ranks[s], s,
                     step_names[ho->step]);
            return zc_coll_blame(op, h->local_ranks[s], ZC_ERR_PEER);
        }
    }
    if (now <= op->deadline_ns)
        return ZC_INPROGRESS;
    ZC_ERROR("rank %d: allreduce #%" PRIu64 " (%zu values): timed out after %" PRId64
             " s (ZIPCCL_TIMEOUT_S) in the %s; waiting for %d local rank(s), furthest behind "
             "rank %d (local rank %d)",
             op->comm->rank, op->seq, op->count, op->comm->cfg.timeout_s, step_names[ho->step],
             pending, h->local_ranks[behind], behind);
    return zc_coll_blame(op, h->local_ranks[behind], ZC_ERR_TIMEOUT);
}

/*
 * Round @p g as far as it goes: once every rank consumed round g - 2, @p write
 * fills this rank's buffer g % 2 and the round is published; once every rank
 * published it, @p read takes what it needs from every slot's buffer g % 2.
 * ZC_OK when the round is complete here.
 */
static zc_status_t shm_round(zc_coll_op_t *op, hier_op_t *ho, uint64_t g,
                             void (*write)(zc_coll_op_t *, hier_op_t *, unsigned char *),
                             void (*read)(zc_coll_op_t *, hier_op_t *, int))
{
    zc_hier_t *h = ho->h;
    zc_shm_slot_t *mine = zc_shm_slot(h->shm, h->local_rank);
    zc_status_t status;

    if (!ho->wrote) {
        if ((status = wait_slots(op, ho, 1, g > 0 ? g - 1 : 0)) != ZC_OK)
            return status;
        write(op, ho, zc_shm_buf(h->shm, h->local_rank, (int)(g % 2)));
        atomic_store_explicit(&mine->written, g + 1, memory_order_release);
        ho->wrote = 1;
    }
    if ((status = wait_slots(op, ho, 0, g + 1)) != ZC_OK)
        return status;
    uint64_t t = zc_time_ns();
    read(op, ho, (int)(g % 2));
    zc_coll_account(&op->stats.decode_ns, t);
    atomic_store_explicit(&mine->consumed, g + 1, memory_order_release);
    ho->wrote = 0;
    return ZC_OK;
}

/*
 * Reduce-scatter, round ho->k: piece k of every other rank's shard into this rank's slot (its
 * own piece the owner reads from its sendbuf: scatter_read).
 */
static void scatter_write(zc_coll_op_t *op, hier_op_t *ho, unsigned char *buf)
{
    const size_t piece_bytes = ho->piece * ho->esize;
    uint64_t t = zc_time_ns();
    for (int s = 0; s < ho->h->local_size; s++) {
        size_t n = piece_len(ho, s, ho->k, ho->piece);
        if (n && s != ho->h->local_rank)
            memcpy(buf + (size_t)s * piece_bytes,
                   (const unsigned char *)op->sendbuf +
                       (ho->off[s] + (size_t)ho->k * ho->piece) * ho->esize,
                   n * ho->esize);
    }
    zc_coll_account(&op->stats.encode_ns, t);
}

/* Reduce-scatter, round ho->k: slot @p s's piece of this rank's shard; its own, in its sendbuf. */
static const void *scatter_piece(const zc_coll_op_t *op, const hier_op_t *ho, int s, int which)
{
    const int me = ho->h->local_rank;
    if (s == me)
        return (const unsigned char *)op->sendbuf +
               (ho->off[me] + (size_t)ho->k * ho->piece) * ho->esize;
    return (const unsigned char *)zc_shm_buf(ho->h->shm, s, which) +
           (size_t)me * ho->piece * ho->esize;
}

/*
 * Reduce-scatter, round ho->k: this rank's shard's pieces summed in slot order (scatter_piece).
 * The first two are added in one pass: in f32 the same sum, bit for bit, as a copy of the first
 * and an add of the second.
 */
static void scatter_read(zc_coll_op_t *op, hier_op_t *ho, int which)
{
    const int L = ho->h->local_size, me = ho->h->local_rank;
    size_t n = piece_len(ho, me, ho->k, ho->piece);
    if (!n)
        return;
    if (ho->widen) {
        /* in f32, in slot order; f32 input is added exactly as the flat paths do */
        float *acc = ho->acc + (size_t)ho->k * ho->piece;
        int s = 1;
        if (op->dtype == ZC_DTYPE_F32 && L > 1) {
            zc_reduce_apply3(ZC_DTYPE_F32, ZC_OP_SUM, acc, scatter_piece(op, ho, 0, which),
                             scatter_piece(op, ho, 1, which), n);
            s = 2;
        } else {
            zc_dtype_to_f32(op->dtype, scatter_piece(op, ho, 0, which), n, acc);
        }
        for (; s < L; s++)
            zc_dtype_add_f32(op->dtype, scatter_piece(op, ho, s, which), n, acc);
        return;
    }
    unsigned char *dst =
        (unsigned char *)op->recvbuf + (ho->off[me] + (size_t)ho->k * ho->piece) * ho->esize;
    const void *own = scatter_piece(op, ho, me, which);
    const zc_redop_t rop = op->op == ZC_OP_AVG ? ZC_OP_SUM : op->op;
    if (L == 1 && dst != own)
        memcpy(dst, own, n * ho->esize);
    else if (L > 1)
        zc_reduce_apply3(op->dtype, rop, dst, scatter_piece(op, ho, 0, which),
                         scatter_piece(op, ho, 1, which), n);
    for (int s = 2; s < L; s++)
        zc_reduce_apply(op->dtype, rop, dst, scatter_piece(op, ho, s, which), n);
}

/* All-gather, round ho->k: piece k of this rank's (final) shard into its slot. */
static void gather_write(zc_coll_op_t *op, hier_op_t *ho, unsigned char *buf)
{
    const int me = ho->h->local_rank;
    size_t n = piece_len(ho, me, ho->k, ho->gpiece);
    if (n)
        memcpy(buf,
               (unsigned char *)op->recvbuf +
                   (ho->off[me] + (size_t)ho->k * ho->gpiece) * ho->esize,
               n * ho->esize);
}

/* All-gather, round ho->k: piece k of every other shard into recvbuf. */
static void gather_read(zc_coll_op_t *op, hier_op_t *ho, int which)
{
    for (int s = 0; s < ho->h->local_size; s++) {
        size_t n = piece_len(ho, s, ho->k, ho->gpiece);
        if (s != ho->h->local_rank && n)
            memcpy((unsigned char *)op->recvbuf +
                       (ho->off[s] + (size_t)ho->k * ho->gpiece) * ho->esize,
                   zc_shm_buf(ho->h->shm, s, which), n * ho->esize);
    }
}

/* This rank's shard of the host sum: its f32 accumulator, or its part of recvbuf. */
static unsigned char *own_shard(zc_coll_op_t *op, hier_op_t *ho)
{
    return ho->widen ? (unsigned char *)ho->acc
                     : (unsigned char *)op->recvbuf + ho->off[ho->h->local_rank] * ho->esize;
}

/* Gather to the leader, round ho->k: piece k of this rank's shard of the host sum (not the
 * leader's: it has its own in place). */
static void to_leader_write(zc_coll_op_t *op, hier_op_t *ho, unsigned char *buf)
{
    const int me = ho->h->local_rank;
    size_t n = piece_len(ho, me, ho->k, ho->lpiece);
    if (me != HIER_LEADER && n)
        memcpy(buf, own_shard(op, ho) + (size_t)ho->k * ho->lpiece * ho->fsize, n * ho->fsize);
}

/* Gather to the leader, round ho->k: the leader copies piece k of every other shard. */
static void to_leader_read(zc_coll_op_t *op, hier_op_t *ho, int which)
{
    (void)op;
    if (ho->h->local_rank != HIER_LEADER)
        return;
    for (int s = 0; s < ho->h->local_size; s++) {
        size_t n = piece_len(ho, s, ho->k, ho->lpiece);
        if (s != HIER_LEADER && n)
            memcpy((unsigned char *)ho->sum + (ho->off[s] + (size_t)ho->k * ho->lpiece) * ho->fsize,
                   zc_shm_buf(ho->h->shm, s, which), n * ho->fsize);
    }
}

/* Values of the whole vector in broadcast round ho->k. */
static size_t bcast_len(const zc_coll_op_t *op, const hier_op_t *ho)
{
    size_t begin = (size_t)ho->k * ho->gpiece;
    return op->count - begin < ho->gpiece ? op->count - begin : ho->gpiece;
}

/* Broadcast, round ho->k: the leader's piece k of the result, and its path between hosts. */
static void bcast_write(zc_coll_op_t *op, hier_op_t *ho, unsigned char *buf)
{
    if (ho->h->local_rank != HIER_LEADER)
        return;
    memcpy(buf, (unsigned char *)op->recvbuf + (size_t)ho->k * ho->gpiece * ho->esize,
           bcast_len(op, ho) * ho->esize);
    memcpy(buf + HIER_BUF_BYTES - HIER_PATH_BYTES, &op->path, sizeof(op->path));
}

/* Broadcast, round ho->k: the others copy it, and take the path into their statistics. */
static void bcast_read(zc_coll_op_t *op, hier_op_t *ho, int which)
{
    if (ho->h->local_rank == HIER_LEADER)
        return;
    const unsigned char *buf = zc_shm_buf(ho->h->shm, HIER_LEADER, which);
    memcpy((unsigned char *)op->recvbuf + (size_t)ho->k * ho->gpiece * ho->esize, buf,
           bcast_len(op, ho) * ho->esize);
    memcpy(&op->path, buf + HIER_BUF_BYTES - HIER_PATH_BYTES, sizeof(op->path));
}

/* The global rank of the cross communicator's rank @p r; -1 for none (r < 0 or out of range). */
static int cross_global(const zc_hier_t *h, int r)
{
    return r >= 0 && r < h->nodes ? h->cross_ranks[r] : -1;
}

/*
 * The inter-host all-reduce, in place, on this local rank's communicator between hosts: of its
 * shard (shards), or, on the leader, of the whole host sum (leader), with the link the cross
 * communicator's policy is told it has for that variant.
 */
static zc_status_t cross_step(zc_coll_op_t *op, hier_op_t *ho)
{
    zc_hier_t *h = ho->h;
    const int me = h->local_rank;
    const size_t count = ho->leader ? op->count : ho->len[me];

    if (!ho->child) {
        const zc_redop_t rop = op->op == ZC_OP_AVG ? ZC_OP_SUM : op->op;
        void *buf = ho->leader ? ho->sum : own_shard(op, ho);
        h->cross->policy.in = ho->leader ? h->cross_alone : h->cross_shared;
        ZC_CHECK(zc_op_create(h->cross, buf, buf, count, ho->widen ? ZC_DTYPE_F32 : op->dtype, rop,
                              op->key, &ho->child));
        zc_op_enqueue(h->cross, ho->child);
    }
    zc_log_mute(1); /* its messages number ranks by host: this op tells what failed */
    zc_comm_progress(h->cross);
    zc_log_mute(0);
    /* the local ranks that wait for this one (the leader variant's others, the shards' that
     * finished first) see it live and work: their deadline moves as the counters would */
    atomic_fetch_add_explicit(&zc_shm_slot(h->shm, me)->beat, 1, memory_order_relaxed);
    /* the child has a deadline of its own; this op waits for it */
    op->deadline_ns = zc_time_ns() + (uint64_t)op->comm->cfg.timeout_s * 1000000000ull;
    if (!zc_op_done(ho->child)) {
        op->waiting_for = cross_global(h, ho->child->waiting_for);
        return ZC_INPROGRESS;
    }
    zc_coll_op_t *child = ho->child;
    zc_status_t status = child->status;
    op->stats.bytes_wire += child->stats.bytes_wire;
    op->stats.encode_ns += child->stats.encode_ns;
    op->stats.decode_ns += child->stats.decode_ns;
    op->stats.err2 += child->stats.err2;
    op->stats.norm2 += child->stats.norm2;
    if (status == ZC_OK) {
        op->path = child->path; /* the statistics show the codec that crossed the network */
    } else {
        int culprit = cross_global(h, child->culprit);
        char blame[32] = "", what[48];
        if (culprit >= 0)
            snprintf(blame, sizeof(blame), ", blamed on rank %d", culprit);
        if (ho->leader)
            snprintf(what, sizeof(what), "the host sum (leader, local rank %d)", me);
        else
            snprintf(what, sizeof(what), "local rank %d's shard", me);
        ZC_ERROR("rank %d: allreduce #%" PRIu64 " (%zu values): the all-reduce between hosts of "
                 "%s (%s %s) failed: %s%s",
                 op->comm->rank, op->seq, op->count, what, zc_algo_name(child->path.algo),
                 zc_codec_name(child->path.params.codec), zc_status_string(status), blame);
        if (culprit >= 0)
            zc_coll_blame(op, culprit, status);
    }
    ho->child = NULL;
    zc_op_free(child);
    return status;
}

/* The sum of this rank's part is complete: stores it in the caller's type (and averages). */
static void part_done(zc_coll_op_t *op, hier_op_t *ho, void *sum, size_t count, size_t off)
{
    uint64_t t = zc_time_ns();
    if (ho->widen)
        zc_coll_store_result(op, sum, count, off);
    else if (op->op == ZC_OP_AVG)
        zc_reduce_avg(op->dtype, (unsigned char *)op->recvbuf + off * ho->esize, count,
                      op->comm->size);
    zc_coll_account(&op->stats.decode_ns, t);
}

static zc_status_t hier_progress(zc_coll_op_t *op)
{
    hier_op_t *ho = op->priv;
    zc_hier_t *h = ho->h;
    const int me = h->local_rank, on_leader = me == HIER_LEADER;
    zc_status_t status = ZC_OK;
    const uint64_t base = h->round + ho->rs_rounds, bbase = base + ho->tl_rounds;

    while (status == ZC_OK && ho->step != STEP_DONE) {
        switch (ho->step) {
        case STEP_SCATTER:
            if (ho->k == ho->rs_rounds) {
                ho->step = ho->leader ? STEP_TO_LEADER : STEP_CROSS;
                ho->k = 0;
                break;
            }
            status = shm_round(op, ho, h->round + ho->k, scatter_write, scatter_read);
            ho->k += status == ZC_OK;
            break;
        case STEP_TO_LEADER:
            if (ho->k == ho->tl_rounds) {
                ho->step = on_leader ? STEP_CROSS : STEP_BCAST;
                ho->k = 0;
                break;
            }
            status = shm_round(op, ho, base + ho->k, to_leader_write, to_leader_read);
            ho->k += status == ZC_OK;
            break;
        case STEP_CROSS:
            if (h->nodes > 1)
                status = cross_step(op, ho);
            if (status == ZC_OK && ho->leader) {
                part_done(op, ho, ho->sum, op->count, 0);
                ho->step = STEP_BCAST;
            } else if (status == ZC_OK) {
                part_done(op, ho, ho->acc, ho->len[me], ho->off[me]);
                ho->step = STEP_GATHER;
            }
            break;
        case STEP_BCAST:
        case STEP_GATHER:
            if (ho->k == ho->ag_rounds) {
                h->round += ho->rs_rounds + ho->tl_rounds + ho->ag_rounds;
                ho->step = STEP_DONE;
                break;
            }
            if (ho->step == STEP_BCAST)
                status = shm_round(op, ho, bbase + ho->k, bcast_write, bcast_read);
            else
                status = shm_round(op, ho, bbase + ho->k, gather_write, gather_read);
            ho->k += status == ZC_OK;
            break;
        }
    }
    return status;
}

static void hier_fini(zc_coll_op_t *op)
{
    hier_op_t *ho = op->priv;
    if (!ho)
        return;
    if (ho->child) {
        /* this op failed while its shard was between hosts: the inter-host communicator
         * fails that call too (its peers learn it from this communicator's abort) */
        zc_comm_t *cross = ho->h->cross;
        if (!cross->broken) {
            cross->broken = ZC_ERR_PEER;
            snprintf(cross->broken_why, sizeof(cross->broken_why), "%s", op->comm->broken_why);
        }
        zc_log_mute(1);
        while (!zc_op_done(ho->child))
            zc_comm_progress(cross);
        zc_log_mute(0);
        zc_op_free(ho->child);
    }
    if (ho->owned)
        zc_coll_defer_free(op, ho->owned); /* the inter-host transfers may have written into it */
    free(ho->off);
    free(ho->len);
    free(ho);
    op->priv = NULL;
}

const zc_algo_t zc_algo_hier = {
    .start = hier_start,
    .progress = hier_progress,
    .fini = hier_fini,
};
