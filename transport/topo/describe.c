/* The topology as one line for logs: zc_topo_describe. */
#include "transport/topo/line.h"
#include "transport/topo/topo_int.h"

#include <stdio.h>

static void line_add_busid(zc_topo_line_t *line, hwloc_obj_t obj)
{
    if (obj->type == HWLOC_OBJ_PCI_DEVICE)
        zc_topo_line_add(line, " %04x:%02x:%02x.%x", obj->attr->pcidev.domain,
                         obj->attr->pcidev.bus, obj->attr->pcidev.dev, obj->attr->pcidev.func);
}

/* A GPU's name: its CUDA (coprocessor) device, else its GPU device, else "-". */
static const char *gpu_name(hwloc_obj_t pci)
{
    const char *gpu = NULL;

    for (hwloc_obj_t child = pci->io_first_child; child; child = child->next_sibling) {
        if (child->type != HWLOC_OBJ_OS_DEVICE)
            continue;
        if (child->attr->osdev.type == HWLOC_OBJ_OSDEV_COPROC)
            return child->name;
        if (child->attr->osdev.type == HWLOC_OBJ_OSDEV_GPU && !gpu)
            gpu = child->name;
    }
    return gpu ? gpu : "-";
}

zc_status_t zc_topo_describe(const zc_topo_t *topo, char *buf, size_t len)
{
    zc_topo_line_t line = {.buf = buf, .len = len};
    zc_topo_nic_t *nics = NULL;
    size_t nic_count = 0;
    hwloc_obj_t pci = NULL;
    const char *sep = " ";
    zc_status_t status;

    if (!topo || !buf || !len)
        return ZC_ERR_INVALID_ARG;
    buf[0] = '\0';
    zc_topo_line_add(&line, "%s: %d packages, %d numa nodes, %d cores, %d pus; gpus", topo->source,
                     hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_PACKAGE),
                     hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_NUMANODE),
                     hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_CORE),
                     hwloc_get_nbobjs_by_type(topo->hw, HWLOC_OBJ_PU));
    /* display controllers (0x03) and processing accelerators (0x12) */
    while ((pci = hwloc_get_next_pcidev(topo->hw, pci)) != NULL) {
        unsigned base_class = pci->attr->pcidev.class_id >> 8;

        if (base_class != 0x03 && base_class != 0x12)
            continue;
        zc_topo_line_add(&line, "%s%s", sep, gpu_name(pci));
        line_add_busid(&line, pci);
        zc_topo_line_add_numa(&line, zc_topo_numa_of_obj(topo, pci));
        sep = ", ";
    }
    if (sep[0] == ' ')
        zc_topo_line_add(&line, " none");

    zc_topo_line_add(&line, "; nics");
    status = zc_topo_nics(topo, &nics, &nic_count);
    if (status < 0)
        return status;
    for (size_t i = 0; i < nic_count; i++) {
        char name[128];

        zc_topo_nic_format(&nics[i], name, sizeof(name));
        zc_topo_line_add(&line, "%s%s", i ? ", " : " ", name);
        line_add_busid(&line, nics[i].anchor);
        zc_topo_line_add_numa(&line, zc_topo_numa_of_obj(topo, nics[i].anchor));
    }
    if (!nic_count)
        zc_topo_line_add(&line, " none");
    free(nics);
    return line.cut ? ZC_ERR_BUFFER_TOO_SMALL : ZC_OK;
}
