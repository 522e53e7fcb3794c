/* A log line built piece by piece (describe.c, leader.c); built with or without hwloc. */
#ifndef ZC_TRANSPORT_TOPO_LINE_H
#define ZC_TRANSPORT_TOPO_LINE_H

#include "common/compiler.h"

#include <stddef.h>

/* Once a piece no longer fits, cut is set and buf holds what fitted, NUL-terminated. */
typedef struct zc_topo_line {
    char *buf;
    size_t len, used;
    int cut;
} zc_topo_line_t;

/* Appends a printf-formatted piece to @p line (nothing once it is cut). */
void zc_topo_line_add(zc_topo_line_t *line, const char *fmt, ...) ZC_PRINTF(2, 3);

/* Appends " numa <n>", or " numa -" for -1 (unknown, or spanning nodes). */
void zc_topo_line_add_numa(zc_topo_line_t *line, int numa);

#endif
