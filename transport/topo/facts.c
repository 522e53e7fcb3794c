/* A rank's facts from a topology, and this process's on this machine's topology (topo.h). */
#include "transport/topo/topo_int.h"

#include "common/log.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

zc_status_t zc_topo_facts(const zc_topo_t *topo, const char *cpulist, zc_topo_facts_t *facts_p)
{
    zc_topo_facts_t facts;
    zc_topo_nic_t nic;
    hwloc_obj_t start = NULL;
    hwloc_bitmap_t set;
    zc_status_t status;

    if (!topo || !facts_p)
        return ZC_ERR_INVALID_ARG;
    zc_topo_facts_unknown(&facts);
    set = hwloc_bitmap_alloc();
    if (!set)
        return ZC_ERR_NO_MEMORY;
    if (cpulist)
        ZC_CHECK_GOTO(zc_topo_parse_cpulist(cpulist, set), status, out_free_set);
    if (cpulist || zc_topo_process_cpuset(topo, set) == ZC_OK) {
        int spans, numa = zc_topo_numa_most_of(topo, set, &spans);

        facts.numa = spans ? -1 : numa;
        start = hwloc_get_obj_covering_cpuset(topo->hw, set);
    }
    if (!start) /* binding unknown, or beyond the cpus hwloc lists: the whole machine */
        start = hwloc_get_root_obj(topo->hw);

    status = zc_topo_nearest_to(topo, start, &nic);
    if (status == ZC_OK) {
        int written = zc_topo_nic_format(&nic, facts.nic, sizeof(facts.nic));

        if (written < 0 || (size_t)written >= sizeof(facts.nic))
            ZC_DEBUG("network device name cut to %zu bytes: %s", sizeof(facts.nic) - 1, facts.nic);
        facts.nic_numa = zc_topo_numa_of_obj(topo, nic.anchor);
    } else if (status != ZC_ERR_UNSUPPORTED) { /* no network device: none, not an error */
        goto out_free_set;
    }
    *facts_p = facts;
    status = ZC_OK;

out_free_set:
    hwloc_bitmap_free(set);
    return status;
}

/* This machine's topology, loaded at the first zc_topo_this_facts and kept: hwloc's discovery
 * takes tens of milliseconds, and every communicator a process creates asks. */
static pthread_mutex_t this_lock = PTHREAD_MUTEX_INITIALIZER;
static zc_topo_t *this_topo;
static char *this_path; /* what this_topo was loaded from: "" for discovery */

zc_status_t zc_topo_this_facts(const char *xml_path, zc_topo_facts_t *facts_p)
{
    const char *path = xml_path ? xml_path : "";
    zc_status_t status = ZC_OK;

    if (!facts_p)
        return ZC_ERR_INVALID_ARG;
    pthread_mutex_lock(&this_lock);
    if (!this_topo || strcmp(this_path, path) != 0) {
        zc_topo_t *topo = NULL;
        char *copy = strdup(path);

        if (!copy) {
            status = ZC_ERR_NO_MEMORY;
            goto out_unlock;
        }
        status = zc_topo_load_this(path, &topo); /* logged, naming the file */
        if (status != ZC_OK) {
            free(copy);
            if (path[0])
                goto out_unlock;
            ZC_LOG_ONCE(ZC_LOG_WARN, "hwloc cannot discover this machine: numa nodes and nics "
                                     "are unknown (shared memory is not placed, each host's "
                                     "leader is its local rank 0)");
            zc_topo_facts_unknown(facts_p);
            status = ZC_OK;
            goto out_unlock;
        }
        zc_topo_destroy(this_topo);
        free(this_path);
        this_topo = topo;
        this_path = copy;
    }
    status = zc_topo_facts(this_topo, NULL, facts_p);

out_unlock:
    pthread_mutex_unlock(&this_lock);
    return status;
}
