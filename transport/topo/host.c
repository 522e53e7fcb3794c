/* Host identities and which ranks share a host. */
#include "transport/topo/topo.h"

#include "common/log.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* "<hostname>/<16 hex>" with its NUL fills the 64 bytes: 46 + 1 + 16 + 1. */
#define ZC_TOPO_HOSTNAME_KEPT 46

/* What tells one machine, and one shared-memory domain on it, from another. */
static const char *const machine_sources[] = {
    "/proc/sys/kernel/random/boot_id", /* per boot of a kernel: shared by its containers */
    "/etc/machine-id",                 /* per installation; copied into some images */
};

/* FNV-1a, 64-bit (Fowler, Noll, Vo; offset basis and prime from the reference). */
static uint64_t fnv1a(uint64_t hash, const void *data, size_t len)
{
    const unsigned char *p = data;

    for (size_t i = 0; i < len; i++) {
        hash ^= p[i];
        hash *= UINT64_C(0x100000001b3);
    }
    return hash;
}

zc_status_t zc_topo_host_id_make(const char *hostname, const void *machine, size_t machine_len,
                                 char out[ZC_TOPO_HOST_ID_LEN])
{
    char id[ZC_TOPO_HOST_ID_LEN] = {0};
    uint64_t hash = UINT64_C(0xcbf29ce484222325);

    if (!hostname || !hostname[0] || !out || (!machine && machine_len))
        return ZC_ERR_INVALID_ARG;
    /* The whole hostname is hashed: names cut to the same prefix still differ. */
    hash = fnv1a(hash, hostname, strlen(hostname) + 1);
    if (machine_len)
        hash = fnv1a(hash, machine, machine_len);
    snprintf(id, sizeof(id), "%.*s/%016" PRIx64, ZC_TOPO_HOSTNAME_KEPT, hostname, hash);
    memcpy(out, id, sizeof(id));
    return ZC_OK;
}

/* Appends "<label>=<bytes of the file>;" to @p buf; returns the bytes read, 0 if unreadable. */
static size_t append_file(const char *path, char *buf, size_t cap, size_t *used)
{
    FILE *file = fopen(path, "r");
    size_t got = 0;
    int n;

    if (!file)
        return 0;
    n = snprintf(buf + *used, cap - *used, "%s=", path);
    if (n > 0 && (size_t)n < cap - *used) {
        *used += (size_t)n;
        got = fread(buf + *used, 1, cap - *used - 1, file);
        *used += got;
        buf[(*used)++] = ';';
    }
    fclose(file);
    return got;
}

zc_status_t zc_topo_host_id(char out[ZC_TOPO_HOST_ID_LEN])
{
    char hostname[HOST_NAME_MAX + 1] = {0};
    char machine[512];
    size_t used = 0, found = 0;
    ssize_t ns_len;

    if (!out)
        return ZC_ERR_INVALID_ARG;
    if (gethostname(hostname, sizeof(hostname) - 1) != 0 || !hostname[0]) {
        ZC_ERROR("cannot read this host's name: %s", hostname[0] ? strerror(errno) : "empty");
        return ZC_ERR_IO;
    }
    for (size_t i = 0; i < ZC_ARRAY_SIZE(machine_sources); i++)
        found += append_file(machine_sources[i], machine, sizeof(machine), &used);
    if (!found)
        ZC_LOG_ONCE(ZC_LOG_WARN,
                    "neither %s nor %s is readable: ranks on different machines named %s "
                    "would count as one host",
                    machine_sources[0], machine_sources[1], hostname);
    /* Containers that share a kernel but not an IPC namespace cannot share memory. */
    ns_len = readlink("/proc/self/ns/ipc", machine + used, sizeof(machine) - used);
    if (ns_len > 0)
        used += (size_t)ns_len;
    return zc_topo_host_id_make(hostname, machine, used, out);
}

typedef struct host_entry {
    const char *id;
    size_t len;
    int rank;
} host_entry_t;

/* By identity, then by rank: each host's ranks end up together, in rank order. */
static int compare_entries(const void *pa, const void *pb)
{
    const host_entry_t *a = pa, *b = pb;
    int c = memcmp(a->id, b->id, ZC_MIN(a->len, b->len));

    if (c)
        return c;
    if (a->len != b->len)
        return a->len < b->len ? -1 : 1;
    return (a->rank > b->rank) - (a->rank < b->rank);
}

zc_status_t zc_topo_group_hosts(const char *ids, size_t id_len, int size, int rank,
                                int *local_rank_p, int *local_size_p, int *node_index_p,
                                int *node_count_p, int *node_of_rank)
{
    host_entry_t *entries;
    int *group_of_rank, *node_of_group;
    int groups = 0, next_node = 0, local_rank = -1, local_size = 0;
    zc_status_t status;

    if (!ids || !id_len || size <= 0 || rank < 0 || rank >= size ||
        (size_t)size > SIZE_MAX / id_len || !local_rank_p || !local_size_p || !node_index_p ||
        !node_count_p)
        return ZC_ERR_INVALID_ARG;

    entries = malloc((size_t)size * sizeof(*entries));
    if (!entries)
        return ZC_ERR_NO_MEMORY;
    /* one array for both: group_of_rank[size], then node_of_group[size] */
    group_of_rank = malloc(2 * (size_t)size * sizeof(*group_of_rank));
    if (!group_of_rank) {
        status = ZC_ERR_NO_MEMORY;
        goto out_free_entries;
    }
    node_of_group = group_of_rank + size;

    for (int r = 0; r < size; r++) {
        entries[r].id = ids + (size_t)r * id_len;
        entries[r].len = strnlen(entries[r].id, id_len);
        entries[r].rank = r;
        if (!entries[r].len) {
            ZC_ERROR("rank %d sent an empty host identity", r);
            status = ZC_ERR_CORRUPT;
            goto out_free_groups;
        }
    }
    qsort(entries, (size_t)size, sizeof(*entries), compare_entries);

    for (int i = 0, start = 0; i < size; i++) {
        if (i > 0 && (entries[i].len != entries[i - 1].len ||
                      memcmp(entries[i].id, entries[i - 1].id, entries[i].len) != 0)) {
            groups++;
            start = i;
        }
        group_of_rank[entries[i].rank] = groups;
        if (entries[i].rank == rank)
            local_rank = i - start;
    }
    groups++;

    /* Number hosts by their lowest rank: a numbering every rank computes alike. */
    for (int g = 0; g < groups; g++)
        node_of_group[g] = -1;
    for (int r = 0; r < size; r++) {
        int g = group_of_rank[r];

        if (node_of_group[g] < 0)
            node_of_group[g] = next_node++;
        local_size += g == group_of_rank[rank];
    }

    *local_rank_p = local_rank;
    *local_size_p = local_size;
    *node_index_p = node_of_group[group_of_rank[rank]];
    *node_count_p = groups;
    if (node_of_rank)
        for (int r = 0; r < size; r++)
            node_of_rank[r] = node_of_group[group_of_rank[r]];
    status = ZC_OK;

out_free_groups:
    free(group_of_rank);
out_free_entries:
    free(entries);
    return status;
}

zc_status_t zc_topo_local_ranks(zc_bootstrap_t *bs, int *local_rank_p, int *local_size_p,
                                int *node_index_p, int *node_count_p, int *node_of_rank)
{
    char mine[ZC_TOPO_HOST_ID_LEN];
    zc_status_t status;
    char *all;

    if (!bs || !bs->ops || bs->size <= 0 || bs->rank < 0 || bs->rank >= bs->size)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_topo_host_id(mine));
    all = malloc((size_t)bs->size * ZC_TOPO_HOST_ID_LEN);
    if (!all)
        return ZC_ERR_NO_MEMORY;
    ZC_CHECK_GOTO(zc_bootstrap_allgather(bs, mine, sizeof(mine), all), status, out_free_all);
    status = zc_topo_group_hosts(all, ZC_TOPO_HOST_ID_LEN, bs->size, bs->rank, local_rank_p,
                                 local_size_p, node_index_p, node_count_p, node_of_rank);

out_free_all:
    free(all);
    return status;
}
