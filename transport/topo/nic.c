/* The network devices of a topology and the one nearest a PCI device, named for UCX. */
#include "transport/topo/topo_int.h"

#include "common/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Port states as the kernel's ib_port_state numbers them: only these carry traffic. */
#define ZC_IB_PORT_ACTIVE 4
#define ZC_IB_PORT_ACTIVE_DEFER 5

/* Picks the port to name from hwloc's "Port<N>State" infos of an OpenFabrics device. */
static void read_ports(hwloc_obj_t ofdev, zc_topo_nic_t *nic)
{
    unsigned lowest = 0, lowest_active = 0;

    for (unsigned i = 0; i < ofdev->infos_count; i++) {
        const char *name = ofdev->infos[i].name, *value = ofdev->infos[i].value;
        unsigned port;
        int consumed = 0, state;

        if (!name || !value || sscanf(name, "Port%uState%n", &port, &consumed) != 1 || !consumed ||
            name[consumed] != '\0' || port == 0)
            continue;
        state = atoi(value);
        if (!lowest || port < lowest)
            lowest = port;
        if ((state == ZC_IB_PORT_ACTIVE || state == ZC_IB_PORT_ACTIVE_DEFER) &&
            (!lowest_active || port < lowest_active))
            lowest_active = port;
    }
    nic->port = lowest_active ? lowest_active : lowest ? lowest : 1;
    nic->usable = lowest_active || !lowest; /* no state listed: assume it works */
}

zc_status_t zc_topo_nics(const zc_topo_t *topo, zc_topo_nic_t **nics_p, size_t *count_p)
{
    int max = hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_OS_DEVICE);
    zc_topo_nic_t *nics;
    hwloc_obj_t osdev = NULL;
    size_t count = 0;

    if (max <= 0) {
        *nics_p = NULL;
        *count_p = 0;
        return ZC_OK;
    }
    nics = calloc((size_t)max, sizeof(*nics));
    if (!nics)
        return ZC_ERR_NO_MEMORY;
    while ((osdev = hwloc_get_next_osdev(topo->hw, osdev)) != NULL) {
        hwloc_obj_osdev_type_t type = osdev->attr->osdev.type;
        zc_topo_nic_t *nic = NULL;

        if ((type != HWLOC_OBJ_OSDEV_NETWORK && type != HWLOC_OBJ_OSDEV_OPENFABRICS) ||
            !osdev->name || !osdev->parent)
            continue;
        for (size_t i = 0; i < count && !nic; i++)
            if (nics[i].anchor == osdev->parent)
                nic = &nics[i];
        if (!nic) {
            nic = &nics[count++];
            nic->anchor = osdev->parent;
            nic->usable = 1;
            if (nic->anchor->type == HWLOC_OBJ_PCI_DEVICE)
                nic->link_speed = nic->anchor->attr->pcidev.linkspeed;
        }
        if (type == HWLOC_OBJ_OSDEV_OPENFABRICS && !nic->rdma) {
            nic->rdma = 1;
            nic->name = osdev->name; /* UCX names the RDMA device, not its IPoIB netdev */
            read_ports(osdev, nic);
        } else if (type == HWLOC_OBJ_OSDEV_NETWORK && !nic->name) {
            nic->name = osdev->name;
        }
    }
    if (!count) {
        free(nics);
        nics = NULL;
    }
    *nics_p = nics;
    *count_p = count;
    return ZC_OK;
}

int zc_topo_nic_format(const zc_topo_nic_t *nic, char *buf, size_t len)
{
    if (nic->rdma)
        return snprintf(buf, len, "%s:%u", nic->name, nic->port);
    return snprintf(buf, len, "%s", nic->name);
}

/* Where a NIC sits relative to the start object. */
typedef struct nic_place {
    size_t index; /* in the NIC list, i.e. hwloc order */
    int up;       /* steps from the start up to the common ancestor: fewer is nearer */
    int down;     /* steps from the common ancestor down to the NIC */
} nic_place_t;

static nic_place_t place_nic(hwloc_obj_t *chain, int chain_len, hwloc_obj_t anchor, size_t index)
{
    nic_place_t place = {.index = index, .up = chain_len, .down = 0};

    for (hwloc_obj_t obj = anchor; obj; obj = obj->parent, place.down++)
        for (int i = 0; i < chain_len; i++)
            if (chain[i] == obj) {
                place.up = i;
                return place;
            }
    return place; /* not reached: the root is on both paths */
}

/* Negative when @p a is nearer than @p b: the order documented at zc_topo_nearest_nic. */
static int compare_places(const zc_topo_nic_t *nics, const nic_place_t *a, const nic_place_t *b)
{
    const zc_topo_nic_t *na = &nics[a->index], *nb = &nics[b->index];

    if (na->usable != nb->usable)
        return nb->usable - na->usable;
    if (a->up != b->up)
        return a->up - b->up;
    if (na->rdma != nb->rdma)
        return nb->rdma - na->rdma;
    if (na->link_speed != nb->link_speed)
        return na->link_speed > nb->link_speed ? -1 : 1;
    if (a->down != b->down)
        return a->down - b->down;
    return a->index < b->index ? -1 : 1;
}

/* The object to measure from: the PCI device, or what covers this process's binding. */
static zc_status_t find_start(const zc_topo_t *topo, const char *busid, hwloc_obj_t *start_p)
{
    zc_status_t status;
    hwloc_bitmap_t set;

    if (busid)
        return zc_topo_find_pci(topo, busid, start_p);
    set = hwloc_bitmap_alloc();
    if (!set)
        return ZC_ERR_NO_MEMORY;
    ZC_CHECK_GOTO(zc_topo_process_cpuset(topo, set), status, out_free_set);
    *start_p = hwloc_get_obj_covering_cpuset(topo->hw, set);
    if (!*start_p) /* a binding beyond the cpus hwloc lists (restricted by a cgroup) */
        *start_p = hwloc_get_root_obj(topo->hw);
    status = ZC_OK;

out_free_set:
    hwloc_bitmap_free(set);
    return status;
}

zc_status_t zc_topo_nearest_to(const zc_topo_t *topo, hwloc_obj_t start, zc_topo_nic_t *nic_p)
{
    zc_topo_nic_t *nics = NULL;
    hwloc_obj_t *chain;
    nic_place_t best = {0}, place;
    size_t count = 0;
    int chain_len = 0;

    ZC_CHECK(zc_topo_nics(topo, &nics, &count));
    if (!count) /* nics is NULL */
        return ZC_ERR_UNSUPPORTED;
    for (hwloc_obj_t obj = start; obj; obj = obj->parent)
        chain_len++;
    chain = malloc((size_t)chain_len * sizeof(*chain));
    if (!chain) {
        free(nics);
        return ZC_ERR_NO_MEMORY;
    }
    chain_len = 0;
    for (hwloc_obj_t obj = start; obj; obj = obj->parent)
        chain[chain_len++] = obj;

    for (size_t i = 0; i < count; i++) {
        place = place_nic(chain, chain_len, nics[i].anchor, i);
        if (i == 0 || compare_places(nics, &place, &best) < 0)
            best = place;
    }
    *nic_p = nics[best.index];
    ZC_DEBUG("nearest network device in %s: %s (%d up, %d down)", topo->source,
             nics[best.index].name, best.up, best.down);
    free(chain);
    free(nics);
    return ZC_OK;
}

zc_status_t zc_topo_nearest_nic(const zc_topo_t *topo, const char *busid, char *nic_name,
                                size_t len)
{
    zc_topo_nic_t nic;
    hwloc_obj_t start;
    zc_status_t status;
    char name[256];
    int written;

    if (!topo || !nic_name || !len)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(find_start(topo, busid, &start));
    status = zc_topo_nearest_to(topo, start, &nic);
    if (status == ZC_ERR_UNSUPPORTED)
        ZC_INFO("no network device in the topology of %s: UCX_NET_DEVICES is left to ucx",
                topo->source);
    if (status != ZC_OK)
        return status;
    written = zc_topo_nic_format(&nic, name, sizeof(name));
    if (written < 0 || (size_t)written >= ZC_MIN(len, sizeof(name)))
        return ZC_ERR_BUFFER_TOO_SMALL;
    memcpy(nic_name, name, (size_t)written + 1);
    ZC_DEBUG("nearest network device to %s in %s: %s", busid ? busid : "this process", topo->source,
             name);
    return ZC_OK;
}
