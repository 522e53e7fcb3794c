/*
 * What the host facts and the shared-memory placement cost, next to memcpy, in one process:
 *
 *   - zc_topo_this_facts: the first call (hwloc discovers this machine) and a later one (the
 *     topology is kept; only the binding is read), once per communicator at creation;
 *   - a rank's first round in a fresh segment: writing its two slot buffers (memcpy of
 *     2 x buf bytes) without placement (every page faults in during that first call) and after
 *     zc_shm_place (the faults were taken at creation), next to the same memcpy into warm pages;
 *   - zc_shm_place itself (mbind and the first touch), what creation pays instead.
 *
 * Usage: topo_bench [--buf BYTES] [--reps N] [--numa NODE] (defaults: 4 MiB, as hier.c's
 * buffers; 20; the node of this process, -1 when unknown). Median of the reps, each on a fresh
 * segment; run it alone (flock /tmp/zipccl-bench.lock).
 */
#include "common/timer.h"
#include "transport/shm/shm.h"
#include "transport/topo/topo.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_REPS 1000

static int compare_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

static double median_us(uint64_t *ns, int n)
{
    qsort(ns, (size_t)n, sizeof(*ns), compare_u64);
    return (double)ns[n / 2] / 1e3;
}

/* Nanoseconds of writing @p len bytes of @p src into slot 0's buffers of a fresh segment,
 * placed first when @p place; *place_ns_p: what zc_shm_place took. */
static uint64_t first_round(const void *src, size_t buf, int place, int numa, uint64_t *place_ns_p)
{
    char name[ZC_SHM_NAME_LEN];
    zc_shm_t *shm;
    zc_shm_make_name(name);
    if (zc_shm_create(name, 1, buf, &shm) != ZC_OK)
        exit(1);
    zc_shm_unlink(name);
    uint64_t t = zc_time_ns();
    if (place)
        zc_shm_place(shm, numa);
    *place_ns_p = zc_time_ns() - t;
    t = zc_time_ns();
    memcpy(zc_shm_buf(shm, 0, 0), src, buf);
    memcpy(zc_shm_buf(shm, 0, 1), (const char *)src + buf, buf);
    uint64_t ns = zc_time_ns() - t;
    zc_shm_destroy(shm);
    return ns;
}

int main(int argc, char **argv)
{
    size_t buf = (size_t)4 << 20;
    int reps = 20, numa = -2;
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--buf") == 0 && i + 1 < argc)
            buf = strtoull(argv[++i], NULL, 0);
        else if (strcmp(argv[i], "--reps") == 0 && i + 1 < argc)
            reps = atoi(argv[++i]);
        else if (strcmp(argv[i], "--numa") == 0 && i + 1 < argc)
            numa = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--buf BYTES] [--reps N] [--numa NODE]\n", argv[0]);
            return 2;
        }
    }
    if (reps < 1 || reps > MAX_REPS || buf == 0) {
        fprintf(stderr, "topo_bench: reps 1..%d, buf > 0\n", MAX_REPS);
        return 2;
    }

    zc_topo_facts_t facts;
    char text[128];
    uint64_t t = zc_time_ns();
    if (zc_topo_this_facts(NULL, &facts) != ZC_OK)
        return 1;
    double first_ms = (double)(zc_time_ns() - t) / 1e6;
    static uint64_t ns[MAX_REPS], place_ns[MAX_REPS], warm_ns[MAX_REPS], unplaced_ns[MAX_REPS],
        placed_ns[MAX_REPS];
    for (int r = 0; r < reps; r++) {
        t = zc_time_ns();
        zc_topo_this_facts(NULL, &facts);
        ns[r] = zc_time_ns() - t;
    }
    zc_topo_facts_format(&facts, text, sizeof(text));
    if (numa == -2)
        numa = facts.numa;
    printf("this process: %s; placing on node %d\n", text, numa);
    printf("zc_topo_this_facts: first call %.1f ms (hwloc discovery), later calls %.1f us\n",
           first_ms, median_us(ns, reps));

    char *src = malloc(2 * buf), *warm = malloc(2 * buf);
    if (!src || !warm)
        return 1;
    memset(src, 1, 2 * buf);
    memset(warm, 0, 2 * buf);
    for (int r = 0; r < reps; r++) {
        uint64_t unused;
        t = zc_time_ns();
        memcpy(warm, src, 2 * buf);
        warm_ns[r] = zc_time_ns() - t;
        unplaced_ns[r] = first_round(src, buf, 0, numa, &unused);
        placed_ns[r] = first_round(src, buf, 1, numa, &place_ns[r]);
    }
    double base = median_us(warm_ns, reps);
    printf("\n%-52s %10s %8s\n", "2 x buffer of one slot (median of reps)", "us", "x memcpy");
    printf("%-52s %10.1f %8.2f\n", "memcpy into warm pages (baseline)", base, 1.0);
    double unplaced = median_us(unplaced_ns, reps), placed = median_us(placed_ns, reps);
    double place = median_us(place_ns, reps);
    printf("%-52s %10.1f %8.2f\n", "first round, unplaced segment (page faults)", unplaced,
           unplaced / base);
    printf("%-52s %10.1f %8.2f\n", "first round, after zc_shm_place", placed, placed / base);
    printf("%-52s %10.1f %8.2f\n", "zc_shm_place (at creation: mbind + first touch)", place,
           place / base);
    printf("(buffers of %zu bytes, %d reps)\n", buf, reps);
    free(src);
    free(warm);
    return 0;
}
