/* Loading a topology (this machine or an XML file), NUMA and CPU queries. */
#include "transport/topo/topo_int.h"

#include "common/log.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define ZC_TOPO_THIS_MACHINE "this machine"

/* Highest PU index a CPU list may name: far above any machine, low enough to bound a bitmap. */
#define ZC_TOPO_MAX_CPU 65535

/* What hwloc's GPU and display components would start in the caller: not for zc_topo_load_this. */
static const char *const gpu_components[] = {"cuda", "nvml", "opencl", "gl", "rsmi", "levelzero"};

/* zc_topo_load, and zc_topo_load_this when @p this_machine. */
static zc_status_t load(const char *xml_path, int this_machine, zc_topo_t **topo_p)
{
    zc_status_t status;
    zc_topo_t *topo;
    int from_xml = xml_path && xml_path[0];

    if (!topo_p)
        return ZC_ERR_INVALID_ARG;
    if (from_xml && access(xml_path, R_OK) != 0) {
        ZC_ERROR("cannot read hwloc topology xml %s: %s", xml_path, strerror(errno));
        return ZC_ERR_IO;
    }

    topo = calloc(1, sizeof(*topo));
    if (!topo)
        return ZC_ERR_NO_MEMORY;
    topo->source = strdup(from_xml ? xml_path : ZC_TOPO_THIS_MACHINE);
    if (!topo->source) {
        status = ZC_ERR_NO_MEMORY;
        goto err_free_topo;
    }
    if (hwloc_topology_init(&topo->hw) != 0) {
        ZC_ERROR("hwloc_topology_init failed: %s", strerror(errno));
        status = ZC_ERR_NO_MEMORY;
        goto err_free_topo;
    }
    /* Without this, hwloc drops every PCI and OS device, XML ones included. */
    hwloc_topology_set_io_types_filter(topo->hw, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (this_machine) {
        /* fails for a component this hwloc lacks: nothing to leave out then */
        for (size_t i = 0; i < ZC_ARRAY_SIZE(gpu_components); i++)
            hwloc_topology_set_components(topo->hw, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                          gpu_components[i]);
        if (from_xml)
            hwloc_topology_set_flags(topo->hw, HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM);
    }
    if (from_xml && hwloc_topology_set_xml(topo->hw, xml_path) != 0) {
        ZC_ERROR("hwloc cannot parse topology xml %s: %s", xml_path, strerror(errno));
        status = ZC_ERR_CORRUPT;
        goto err_destroy_hw;
    }
    if (hwloc_topology_load(topo->hw) != 0) {
        if (from_xml) {
            ZC_ERROR("hwloc cannot load topology xml %s: %s", xml_path, strerror(errno));
            status = ZC_ERR_CORRUPT;
        } else {
            ZC_ERROR("hwloc cannot discover the topology of this machine: %s", strerror(errno));
            status = ZC_ERR_INTERNAL;
        }
        goto err_destroy_hw;
    }
    topo->this_system = hwloc_topology_is_thissystem(topo->hw);
    ZC_DEBUG("loaded the topology of %s", topo->source);
    *topo_p = topo;
    return ZC_OK;

err_destroy_hw:
    hwloc_topology_destroy(topo->hw);
    topo->hw = NULL;
err_free_topo:
    free(topo->source);
    free(topo);
    return status;
}

zc_status_t zc_topo_load(const char *xml_path, zc_topo_t **topo_p)
{
    return load(xml_path, 0, topo_p);
}

zc_status_t zc_topo_load_this(const char *xml_path, zc_topo_t **topo_p)
{
    return load(xml_path, 1, topo_p);
}

void zc_topo_destroy(zc_topo_t *topo)
{
    if (!topo)
        return;
    if (topo->hw)
        hwloc_topology_destroy(topo->hw);
    free(topo->source);
    free(topo);
}

int zc_topo_is_this_system(const zc_topo_t *topo)
{
    return topo && topo->this_system;
}

int zc_topo_numa_of_obj(const zc_topo_t *topo, hwloc_obj_t obj)
{
    obj = hwloc_get_non_io_ancestor_obj(topo->hw, obj);
    if (!obj || !obj->nodeset || hwloc_bitmap_weight(obj->nodeset) != 1)
        return -1;
    return hwloc_bitmap_first(obj->nodeset); /* nodesets are indexed by NUMA OS index */
}

/* Reads 1 to @p max_digits hex digits at *p (no sign, space or 0x: sscanf would take those). */
static int parse_hex(const char **p, int max_digits, unsigned *value_p)
{
    unsigned value = 0;
    int digits = 0;

    for (; digits < max_digits; digits++, (*p)++) {
        char c = **p;
        unsigned d;

        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            break;
        value = value * 16 + d;
    }
    *value_p = value;
    return digits > 0;
}

/* "[domain:]bus:device.function", as lspci -D, hwloc and CUDA (8-digit domain) write it. */
static int parse_busid(const char *busid, unsigned *domain, unsigned *bus, unsigned *dev,
                       unsigned *func)
{
    const char *p = busid;
    unsigned first, second;

    if (!parse_hex(&p, 8, &first) || *p++ != ':' || !parse_hex(&p, 4, &second))
        return 0;
    if (*p == ':') { /* first was the domain */
        p++;
        *domain = first;
        *bus = second;
        if (!parse_hex(&p, 2, dev))
            return 0;
    } else {
        *domain = 0;
        *bus = first;
        *dev = second;
    }
    return *p++ == '.' && parse_hex(&p, 1, func) && *p == '\0' && *bus <= 0xff && *dev <= 0x1f &&
           *func <= 0x7;
}

zc_status_t zc_topo_find_pci(const zc_topo_t *topo, const char *busid, hwloc_obj_t *obj_p)
{
    unsigned domain, bus, dev, func;
    hwloc_obj_t obj;

    if (!parse_busid(busid, &domain, &bus, &dev, &func)) {
        ZC_ERROR("malformed pci bus id '%s' (expected domain:bus:device.function, "
                 "as 0000:3b:00.0)",
                 busid);
        return ZC_ERR_INVALID_ARG;
    }
    obj = hwloc_get_pcidev_by_busid(topo->hw, domain, bus, dev, func);
    if (!obj) {
        ZC_ERROR("no pci device %04x:%02x:%02x.%x in the topology of %s", domain, bus, dev, func,
                 topo->source);
        return ZC_ERR_INVALID_ARG;
    }
    *obj_p = obj;
    return ZC_OK;
}

zc_status_t zc_topo_process_cpuset(const zc_topo_t *topo, hwloc_bitmap_t set)
{
    if (!topo->this_system) {
        ZC_INFO("the topology of %s is not this machine: this process's binding is unknown",
                topo->source);
        return ZC_ERR_UNSUPPORTED;
    }
    if (hwloc_get_cpubind(topo->hw, set, HWLOC_CPUBIND_PROCESS) != 0) {
        if (errno == ENOSYS) {
            ZC_INFO("this system cannot report the cpu binding of a process");
            return ZC_ERR_UNSUPPORTED;
        }
        ZC_ERROR("cannot read this process's cpu binding: %s", strerror(errno));
        return ZC_ERR_IO;
    }
    return ZC_OK;
}

/* Parses the kernel's list format strictly ("0-3,8"; no spaces, ranges ascending). */
zc_status_t zc_topo_parse_cpulist(const char *list, hwloc_bitmap_t set)
{
    const char *p = list;

    hwloc_bitmap_zero(set);
    for (;;) {
        char *end;
        unsigned long first, last;

        if (*p < '0' || *p > '9')
            goto err_malformed;
        first = strtoul(p, &end, 10);
        last = first;
        if (*end == '-') {
            p = end + 1;
            if (*p < '0' || *p > '9')
                goto err_malformed;
            last = strtoul(p, &end, 10);
        }
        if (last < first || last > ZC_TOPO_MAX_CPU)
            goto err_malformed;
        hwloc_bitmap_set_range(set, (unsigned)first, (int)last);
        p = end;
        if (*p != ',')
            break;
        p++;
    }
    if (*p == '\0')
        return ZC_OK;

err_malformed:
    ZC_ERROR("malformed cpu list '%s' (expected ascending ranges of cpus up to %d, as 0-3,8-11)",
             list, ZC_TOPO_MAX_CPU);
    return ZC_ERR_INVALID_ARG;
}

int zc_topo_numa_most_of(const zc_topo_t *topo, hwloc_const_bitmap_t set, int *spans_p)
{
    hwloc_bitmap_t common = hwloc_bitmap_alloc();
    hwloc_obj_t node = NULL;
    int best = -1, best_weight = 0, touched = 0;

    if (!common)
        return -1;
    while ((node = hwloc_get_next_obj_by_type(topo->hw, HWLOC_OBJ_NUMANODE, node)) != NULL) {
        int weight;

        if (!node->cpuset)
            continue;
        hwloc_bitmap_and(common, node->cpuset, set);
        weight = hwloc_bitmap_weight(common);
        touched += weight > 0;
        if (weight > best_weight ||
            (weight == best_weight && weight > 0 && node->os_index < (unsigned)best)) {
            best = (int)node->os_index;
            best_weight = weight;
        }
    }
    hwloc_bitmap_free(common);
    *spans_p = touched > 1;
    return best;
}

zc_status_t zc_topo_numa_of_cpuset(const zc_topo_t *topo, const char *cpulist, int *numa_p)
{
    zc_status_t status;
    hwloc_bitmap_t set;
    int numa, spans;

    if (!topo || !numa_p)
        return ZC_ERR_INVALID_ARG;
    if (hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_NUMANODE) <= 0) {
        ZC_INFO("the topology of %s has no numa node", topo->source);
        return ZC_ERR_UNSUPPORTED;
    }
    set = hwloc_bitmap_alloc();
    if (!set)
        return ZC_ERR_NO_MEMORY;
    if (cpulist)
        ZC_CHECK_GOTO(zc_topo_parse_cpulist(cpulist, set), status, out_free_set);
    else
        ZC_CHECK_GOTO(zc_topo_process_cpuset(topo, set), status, out_free_set);

    numa = zc_topo_numa_most_of(topo, set, &spans);
    if (!cpulist && spans && hwloc_get_last_cpu_location(topo->hw, set, HWLOC_CPUBIND_THREAD) == 0)
        numa = zc_topo_numa_most_of(topo, set, &spans); /* unbound: where it runs now */
    if (numa < 0) {
        char text[256];

        hwloc_bitmap_list_snprintf(text, sizeof(text), set);
        ZC_ERROR("cpus %s are not in the topology of %s", text, topo->source);
        status = ZC_ERR_INVALID_ARG;
        goto out_free_set;
    }
    *numa_p = numa;
    status = ZC_OK;

out_free_set:
    hwloc_bitmap_free(set);
    return status;
}

zc_status_t zc_topo_cpubind(const zc_topo_t *topo, char *cpulist, size_t len)
{
    zc_status_t status;
    hwloc_bitmap_t set;
    int written;

    if (!topo || !cpulist || !len)
        return ZC_ERR_INVALID_ARG;
    set = hwloc_bitmap_alloc();
    if (!set)
        return ZC_ERR_NO_MEMORY;
    ZC_CHECK_GOTO(zc_topo_process_cpuset(topo, set), status, out_free_set);
    written = hwloc_bitmap_list_snprintf(NULL, 0, set);
    if (written < 0 || (size_t)written >= len) {
        status = ZC_ERR_BUFFER_TOO_SMALL;
        goto out_free_set;
    }
    hwloc_bitmap_list_snprintf(cpulist, len, set);
    status = ZC_OK;

out_free_set:
    hwloc_bitmap_free(set);
    return status;
}

zc_status_t zc_topo_numa_of_pci(const zc_topo_t *topo, const char *busid, int *numa_p)
{
    hwloc_obj_t obj;

    if (!topo || !busid || !numa_p)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_topo_find_pci(topo, busid, &obj));
    *numa_p = zc_topo_numa_of_obj(topo, obj);
    return ZC_OK;
}

zc_status_t zc_topo_bind_thread(const zc_topo_t *topo, int numa)
{
    zc_status_t status;
    hwloc_bitmap_t set;
    hwloc_obj_t node;
    char text[256];

    if (!topo || numa < 0)
        return ZC_ERR_INVALID_ARG;
    node = hwloc_get_numanode_obj_by_os_index(topo->hw, (unsigned)numa);
    if (!node || !node->cpuset) {
        ZC_ERROR("no numa node %d in the topology of %s", numa, topo->source);
        return ZC_ERR_INVALID_ARG;
    }
    set = hwloc_bitmap_alloc();
    if (!set)
        return ZC_ERR_NO_MEMORY;
    ZC_CHECK_GOTO(zc_topo_process_cpuset(topo, set), status, out_free_set);
    hwloc_bitmap_list_snprintf(text, sizeof(text), set);
    hwloc_bitmap_and(set, set, node->cpuset);
    if (hwloc_bitmap_iszero(set)) {
        ZC_ERROR("numa node %d has none of this process's cpus (%s)", numa, text);
        status = ZC_ERR_INVALID_ARG;
        goto out_free_set;
    }
    if (hwloc_set_cpubind(topo->hw, set, HWLOC_CPUBIND_THREAD) != 0) {
        hwloc_bitmap_list_snprintf(text, sizeof(text), set);
        ZC_ERROR("cannot bind this thread to cpus %s of numa node %d: %s", text, numa,
                 strerror(errno));
        status = ZC_ERR_IO;
        goto out_free_set;
    }
    status = ZC_OK;

out_free_set:
    hwloc_bitmap_free(set);
    return status;
}
