/* Without hwloc (meson.build's summary says why): every rank's facts are unknown (topo.h). */
#include "transport/topo/topo.h"

#include "common/log.h"

zc_status_t zc_topo_this_facts(const char *xml_path, zc_topo_facts_t *facts_p)
{
    if (!facts_p)
        return ZC_ERR_INVALID_ARG;
    if (xml_path && xml_path[0])
        ZC_LOG_ONCE(ZC_LOG_WARN,
                    "ZIPCCL_TOPO_XML=%s is ignored: zipccl was built without hwloc, numa nodes "
                    "and nics are unknown",
                    xml_path);
    zc_topo_facts_unknown(facts_p);
    return ZC_OK;
}
