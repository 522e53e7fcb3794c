/*
 * The facts record, its text, each host's leader and the log-line builder
 * (topo.h, line.h): built with or without hwloc.
 */
#include "transport/topo/line.h"
#include "transport/topo/topo.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void zc_topo_line_add(zc_topo_line_t *line, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (line->cut)
        return;
    va_start(ap, fmt);
    n = vsnprintf(line->buf + line->used, line->len - line->used, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= line->len - line->used) {
        line->cut = 1;
        line->used = line->len - 1;
    } else {
        line->used += (size_t)n;
    }
}

/* " <n>", or " -" for -1 */
static void add_node(zc_topo_line_t *line, int numa)
{
    if (numa >= 0)
        zc_topo_line_add(line, " %d", numa);
    else
        zc_topo_line_add(line, " -");
}

void zc_topo_line_add_numa(zc_topo_line_t *line, int numa)
{
    zc_topo_line_add(line, " numa");
    add_node(line, numa);
}

void zc_topo_facts_unknown(zc_topo_facts_t *facts)
{
    memset(facts, 0, sizeof(*facts));
    facts->numa = -1;
    facts->nic_numa = -1;
}

void zc_topo_facts_sanitize(zc_topo_facts_t *facts)
{
    facts->nic[sizeof(facts->nic) - 1] = '\0';
    if (facts->numa < -1)
        facts->numa = -1;
    if (facts->nic_numa < -1)
        facts->nic_numa = -1;
}

int zc_topo_pick_leader(const zc_topo_facts_t *facts, int n_local)
{
    if (!facts || n_local < 1)
        return -1;
    for (int l = 0; l < n_local; l++)
        if (facts[l].numa >= 0 && facts[l].nic[0] && facts[l].numa == facts[l].nic_numa)
            return l;
    return 0;
}

/* " nic <name> numa <n>" or " nic none" */
static void add_nic(zc_topo_line_t *line, const zc_topo_facts_t *facts)
{
    if (!facts->nic[0]) {
        zc_topo_line_add(line, " none");
        return;
    }
    zc_topo_line_add(line, " %.*s", (int)sizeof(facts->nic), facts->nic);
    zc_topo_line_add_numa(line, facts->nic_numa);
}

zc_status_t zc_topo_facts_format(const zc_topo_facts_t *facts, char *buf, size_t len)
{
    zc_topo_line_t line = {.buf = buf, .len = len};

    if (!facts || !buf || !len)
        return ZC_ERR_INVALID_ARG;
    buf[0] = '\0';
    zc_topo_line_add(&line, "numa");
    add_node(&line, facts->numa);
    zc_topo_line_add(&line, ", nic");
    add_nic(&line, facts);
    return line.cut ? ZC_ERR_BUFFER_TOO_SMALL : ZC_OK;
}

zc_status_t zc_topo_format_host(const int *ranks, const zc_topo_facts_t *facts, int n, char *buf,
                                size_t len)
{
    zc_topo_line_t line = {.buf = buf, .len = len};
    int same_nic = 1, leader;

    if (!ranks || !facts || n < 1 || !buf || !len)
        return ZC_ERR_INVALID_ARG;
    buf[0] = '\0';
    zc_topo_line_add(&line, "ranks");
    for (int l = 0; l < n; l++)
        zc_topo_line_add(&line, " %d", ranks[l]);
    zc_topo_line_add(&line, "; numa");
    for (int l = 0; l < n; l++) {
        add_node(&line, facts[l].numa);
        same_nic &= strncmp(facts[l].nic, facts[0].nic, sizeof(facts[l].nic)) == 0 &&
                    facts[l].nic_numa == facts[0].nic_numa;
    }
    if (same_nic) {
        zc_topo_line_add(&line, "; nic");
        add_nic(&line, &facts[0]);
    } else { /* each rank's, in local order */
        zc_topo_line_add(&line, "; nics");
        for (int l = 0; l < n; l++) {
            add_nic(&line, &facts[l]);
            if (l + 1 < n)
                zc_topo_line_add(&line, ",");
        }
    }
    leader = zc_topo_pick_leader(facts, n);
    zc_topo_line_add(&line, "; leader rank %d (local %d)", ranks[leader], leader);
    return line.cut ? ZC_ERR_BUFFER_TOO_SMALL : ZC_OK;
}
