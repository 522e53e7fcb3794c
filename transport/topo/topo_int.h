/* Internals of transport/topo shared by its files: the object and the NIC list. */
#ifndef ZC_TRANSPORT_TOPO_INT_H
#define ZC_TRANSPORT_TOPO_INT_H

#include "transport/topo/topo.h"

#include <hwloc.h>

struct zc_topo {
    hwloc_topology_t hw;
    int this_system;
    char *source; /* "this machine" or the XML path, for messages */
};

/* A network device: the OS devices (netdev, OpenFabrics) hanging on one parent. */
typedef struct zc_topo_nic {
    hwloc_obj_t anchor; /* their parent: the PCI device, usually */
    const char *name;   /* the OpenFabrics device if any, else the first netdev */
    unsigned port;      /* RDMA: the port to name; 0 for a plain netdev */
    int rdma;           /* has an OpenFabrics device */
    int usable;         /* 0 when every port hwloc lists is down */
    float link_speed;   /* GB/s of the anchor's PCIe link, 0 when unknown */
} zc_topo_nic_t;

/* Every network device of @p topo, in hwloc order, in a malloc'd array (NULL when none). */
zc_status_t zc_topo_nics(const zc_topo_t *topo, zc_topo_nic_t **nics_p, size_t *count_p);

/* Writes @p nic's UCX_NET_DEVICES name; returns what snprintf returns. */
int zc_topo_nic_format(const zc_topo_nic_t *nic, char *buf, size_t len);

/* The PCI device @p busid; logs and returns ZC_ERR_INVALID_ARG when malformed or absent. */
zc_status_t zc_topo_find_pci(const zc_topo_t *topo, const char *busid, hwloc_obj_t *obj_p);

/* OS index of the single NUMA node near @p obj (any object), or -1 when it spans several. */
int zc_topo_numa_of_obj(const zc_topo_t *topo, hwloc_obj_t obj);

/* This process's CPU binding (this machine only); logs why not. */
zc_status_t zc_topo_process_cpuset(const zc_topo_t *topo, hwloc_bitmap_t set);

/* Parses a CPU list (the kernel's list format, strictly) into @p set; logs ZC_ERR_INVALID_ARG. */
zc_status_t zc_topo_parse_cpulist(const char *list, hwloc_bitmap_t set);

/*
 * The NUMA node holding most of @p set (OS index), the lowest on a tie; -1 if
 * none holds any. *@p spans_p: whether more than one node holds some.
 */
int zc_topo_numa_most_of(const zc_topo_t *topo, hwloc_const_bitmap_t set, int *spans_p);

/*
 * The network device nearest @p start (zc_topo_nearest_nic's order) into
 * *@p nic_p, ZC_ERR_UNSUPPORTED when @p topo has none (not logged).
 */
zc_status_t zc_topo_nearest_to(const zc_topo_t *topo, hwloc_obj_t start, zc_topo_nic_t *nic_p);

#endif
