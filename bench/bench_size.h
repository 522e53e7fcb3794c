/*
 * Byte counts on the command line of the benchmarks that link nothing of zipccl's
 * (nccl_collnet_bench loads the plugin, preload_mpi_bench runs under the preload
 * library): "512", "64K", "1.5M", "2G", binary multiples, either case.
 */
#ifndef ZC_BENCH_SIZE_H
#define ZC_BENCH_SIZE_H

#include <stddef.h>
#include <stdlib.h>

static inline size_t bench_parse_size(const char *s)
{
    char *end;
    double v = strtod(s, &end);
    if (*end == 'K' || *end == 'k')
        v *= 1024;
    else if (*end == 'M' || *end == 'm')
        v *= 1024 * 1024;
    else if (*end == 'G' || *end == 'g')
        v *= 1024.0 * 1024 * 1024;
    return (size_t)v;
}

#endif
