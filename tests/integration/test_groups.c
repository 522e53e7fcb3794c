/*
 * Host groups with every rank's facts (issue 19): 4 ranks as 2 hosts of 2 (ZIPCCL_HOST_ID),
 * ZIPCCL_TOPOLOGY=hierarchical, ZIPCCL_LOG_LEVEL=info. Every rank logs its own place and
 * facts and its host's line, rank 0 every host's line; the test checks that the lines carry the
 * ranks' NUMA nodes, the NIC with its node and the leader, and that every rank logged the same
 * line for its host as rank 0 did (the facts reached every rank: the allgather agreed).
 *
 *   fixture       ZIPCCL_TOPO_XML=tests/fixtures/topo/2numa-2pu-nic.xml (PU 0 on node 0,
 *                 PU 1 on node 1, eth0 on node 1), taken as this machine: rank 0 unbound
 *                 (CPUs 0-1), rank 1 on CPU 1, rank 2 on CPU 1, rank 3 on CPU 0. Known answers:
 *                 host 0 "ranks 1 0; numa 1 -", leader rank 1 (local rank 0: each host's
 *                 leader comes first); host 1 "ranks 2 3; numa 1 0", leader rank 2. Skipped
 *                 (exit 77) where CPUs 0 and 1 are not both allowed, and without hwloc.
 *   this-machine  this machine's topology, as found: each rank's own facts
 *                 (zc_topo_this_facts, before zc_comm_init) must be what the lines say
 *                 (without hwloc: every fact unknown, every leader local rank 0).
 *   unreadable-xml rank 2's ZIPCCL_TOPO_XML names no file: every rank's zc_comm_init fails
 *                 with ZC_ERR_INVALID_CONFIG naming rank 2 (skipped without hwloc).
 *
 * Rank 0 checks every rank's report once all have all-reduced (a barrier). Each run
 * all-reduces once through the hierarchy (its shared memory placed; on a node
 * this machine lacks, the fixture's node 1, refused with a warning) and checks the exact sum
 * (ZIPCCL_CODEC=none). Usage: test_groups CASE FIXTURES_DIR. Exits 0 when it passed.
 */
#include "harness.h"
#include "rank_check.h"

#include "transport/topo/topo.h"
#include "zc_build_config.h"

#include <zipccl/zipccl.h>

#include <sched.h>

#define NRANKS 4
#define PER_HOST 2
#define LINE 512
#define COUNT ((size_t)1 << 16)

/* What the ranks report to the test, in memory shared with them. */
typedef struct report {
    zc_topo_facts_t facts[NRANKS];   /* each rank's own, asked before zc_comm_init */
    char host_line[NRANKS][2][LINE]; /* "host N: ..." as rank r logged it, "" if not */
    char rank_line[NRANKS][LINE];    /* "rank r is local rank ..." */
    volatile int root_port_taken;
} report_t;

static report_t *report;
static const char *fixtures;
static int use_fixture, unreadable;

/* The CPUs each rank is bound to in the fixture case: first and last. */
static const int fixture_cpus[NRANKS][2] = {{0, 1}, {1, 1}, {1, 1}, {0, 0}};

static int bind_to(int first, int last)
{
    cpu_set_t set;
    CPU_ZERO(&set);
    for (int cpu = first; cpu <= last; cpu++)
        CPU_SET(cpu, &set);
    return sched_setaffinity(0, sizeof(set), &set);
}

/* Copies the rest of the line at @p at (up to the newline) into @p out. */
static void copy_line(const char *at, char *out)
{
    size_t n = strcspn(at, "\n");
    snprintf(out, LINE, "%.*s", (int)(n < LINE - 1 ? n : LINE - 1), at);
}

/* Finds what this rank logged about the groups. */
static int collect(int rank)
{
    static const char host_tag[] = "zc_comm_init: host ";
    static const char rank_tag[] = "zc_comm_init: rank ";
    for (const char *p = strstr(logged, host_tag); p; p = strstr(p + 1, host_tag)) {
        int n = -1, used = 0;
        CHECK(sscanf(p + strlen(host_tag), "%d: %n", &n, &used) == 1 && used > 0 && n >= 0 && n < 2,
              "unreadable host line: %.80s", p);
        CHECK(report->host_line[rank][n][0] == '\0', "host %d logged twice", n);
        copy_line(p + strlen(host_tag) + used, report->host_line[rank][n]);
    }
    for (const char *p = strstr(logged, rank_tag); p; p = strstr(p + 1, rank_tag)) {
        copy_line(p + strlen("zc_comm_init: "), report->rank_line[rank]);
        if (strstr(report->rank_line[rank], " is local rank "))
            return 0; /* not the line that closes zc_comm_init ("rank 0 of 4, bootstrap ...") */
    }
    CHECK(0, "no 'zc_comm_init: rank R is local rank' line in what was logged");
    return 1;
}

/*
 * Host @p n's ranks in local order (its leader, the rank nearest its NIC, first: the leaders
 * of every host are local rank 0) into @p ranks, and the line they make into @p out (NULL: none).
 */
static void local_order(int n, int *ranks, char *out)
{
    zc_topo_facts_t facts[PER_HOST];
    for (int l = 0; l < PER_HOST; l++)
        facts[l] = report->facts[n * PER_HOST + l];
    const int lead = zc_topo_pick_leader(facts, PER_HOST);
    ranks[0] = n * PER_HOST + lead;
    for (int l = 0, k = 1; l < PER_HOST; l++)
        if (l != lead)
            ranks[k++] = n * PER_HOST + l;
    for (int l = 0; l < PER_HOST; l++)
        facts[l] = report->facts[ranks[l]];
    if (out)
        zc_topo_format_host(ranks, facts, PER_HOST, out, LINE);
}

static int check_lines(void)
{
    static const char *const fixture_hosts[2] = {
        "ranks 1 0; numa 1 -; nic eth0 numa 1; leader rank 1 (local 0)",
        "ranks 2 3; numa 1 0; nic eth0 numa 1; leader rank 2 (local 0)",
    };
    char want[LINE];
    int order[PER_HOST];
    for (int n = 0; n < 2; n++) {
        local_order(n, order, want);
        if (use_fixture)
            CHECK(strcmp(want, fixture_hosts[n]) == 0, "host %d: the ranks found '%s'", n, want);
        CHECK(strcmp(report->host_line[0][n], want) == 0, "rank 0 logged host %d as '%s', not '%s'",
              n, report->host_line[0][n], want);
    }
    for (int r = 0; r < NRANKS; r++) {
        int mine = r / PER_HOST, local = 0;
        char facts[128], prefix[64];
        local_order(mine, order, NULL);
        while (order[local] != r)
            local++;
        CHECK(strcmp(report->host_line[r][mine], report->host_line[0][mine]) == 0,
              "rank %d logged its host %d as '%s', rank 0 as '%s'", r, mine,
              report->host_line[r][mine], report->host_line[0][mine]);
        if (r != 0)
            CHECK(report->host_line[r][1 - mine][0] == '\0',
                  "rank %d logged the other host too: '%s'", r, report->host_line[r][1 - mine]);
        zc_topo_facts_format(&report->facts[r], facts, sizeof(facts));
        snprintf(prefix, sizeof(prefix), "rank %d is local rank %d of %d on host %d of 2", r, local,
                 PER_HOST, mine);
        CHECK(strncmp(report->rank_line[r], prefix, strlen(prefix)) == 0, "rank %d logged '%s'", r,
              report->rank_line[r]);
        CHECK(strstr(report->rank_line[r], facts) != NULL, "rank %d's line '%s' lacks '%s'", r,
              report->rank_line[r], facts);
        fprintf(stderr, "rank %d: %s\n  host %d: %s\n", r, report->rank_line[r], mine,
                report->host_line[r][mine]);
    }
    return 0;
}

static int rank_main(int rank, int size, void *arg)
{
    char id[32];
    my_rank = rank;
    zc_log_set_sink(capture_sink, NULL);
    if (use_fixture) {
        char path[1024];
        const int *cpus = fixture_cpus[rank];
        CHECK(bind_to(cpus[0], cpus[1]) == 0, "cannot bind to cpus %d-%d", cpus[0], cpus[1]);
        snprintf(path, sizeof(path), "%s/2numa-2pu-nic.xml", fixtures);
        setenv("ZIPCCL_TOPO_XML", path, 1);
    }
    if (unreadable && rank == 2) {
        char path[1024];
        snprintf(path, sizeof(path), "%s/no-such-topology.xml", fixtures);
        setenv("ZIPCCL_TOPO_XML", path, 1);
    }
    snprintf(id, sizeof(id), "test-host-%d", rank / PER_HOST);
    setenv("ZIPCCL_HOST_ID", id, 1);
    setenv("ZIPCCL_TOPOLOGY", "hierarchical", 1);
    setenv("ZIPCCL_LOG_LEVEL", "info", 1);
    setenv("ZIPCCL_CODEC", "none", 1); /* an exact sum to check */
    zc_status_t status = ZC_OK;
    if (!unreadable)
        status = zc_topo_this_facts(getenv("ZIPCCL_TOPO_XML"), &report->facts[rank]);
    CHECK(status == ZC_OK, "zc_topo_this_facts: %s", zc_status_string(status));

    zc_comm_t *comm = NULL;
    zc_harness_step("zc_comm_init");
    status = zc_comm_init(&comm);
    if (status == ZC_ERR_IO && rank == 0 && strstr(logged, "cannot listen on port"))
        report->root_port_taken = 1;
    if (unreadable) {
        /* every rank fails alike, naming rank 2; rank 2 also said why */
        CHECK(status == ZC_ERR_INVALID_CONFIG, "zc_comm_init: %s, not ZC_ERR_INVALID_CONFIG",
              zc_status_string(status));
        CHECK(strstr(logged, "rank 2 cannot read its topology (ZIPCCL_TOPO_XML)"),
              "the failure does not name rank 2");
        CHECK(rank != 2 || strstr(logged, "no-such-topology.xml: No such file"),
              "rank 2 does not name its file");
        return FAILED_AS_EXPECTED;
    }
    CHECK(status == ZC_OK, "zc_comm_init: %s", zc_status_string(status));
    if (collect(rank))
        return 1;

    zc_harness_step("allreduce");
    float *v = malloc(COUNT * sizeof(float));
    CHECK(v, "out of memory");
    for (size_t i = 0; i < COUNT; i++)
        v[i] = (float)(rank + 1) * (float)(i % 7);
    status = zc_allreduce(comm, v, v, COUNT, ZC_DTYPE_F32, ZC_OP_SUM);
    CHECK(status == ZC_OK, "allreduce: %s", zc_status_string(status));
    for (size_t i = 0; i < COUNT; i++)
        CHECK(v[i] == 10.0f * (float)(i % 7), "value %zu is %g, not %g", i, v[i],
              10.0 * (double)(i % 7));
    free(v);
    /* the all-reduce was a barrier: every rank's report is in */
    if (rank == 0 && check_lines())
        return 1;
    zc_comm_destroy(comm);
    (void)size;
    (void)arg;
    return 0;
}

/* Whether this process may run on both CPU 0 and CPU 1. */
static int cpus_0_and_1_allowed(void)
{
    cpu_set_t set;
    return sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_ISSET(0, &set) && CPU_ISSET(1, &set);
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "fixture") != 0 && strcmp(argv[1], "this-machine") != 0 &&
                      strcmp(argv[1], "unreadable-xml") != 0)) {
        fprintf(stderr, "usage: %s fixture|this-machine|unreadable-xml FIXTURES_DIR\n", argv[0]);
        return 2;
    }
    use_fixture = strcmp(argv[1], "fixture") == 0;
    unreadable = strcmp(argv[1], "unreadable-xml") == 0;
    fixtures = argv[2];
    if ((use_fixture || unreadable) && !ZC_HAVE_HWLOC) {
        fprintf(stderr, "%s: skipped: built without hwloc (ZIPCCL_TOPO_XML is ignored)\n", argv[1]);
        return 77;
    }
    if (use_fixture && !cpus_0_and_1_allowed()) {
        fprintf(stderr, "%s: skipped: cpus 0 and 1 are not both allowed here\n", argv[1]);
        return 77;
    }
    report = shared_map(sizeof(*report));
    if (!report)
        return 1;
    zc_harness_opts_t o = {.nranks = NRANKS,
                           .deadline_s = 90,
                           .expect_fail_mask = unreadable ? (1ul << NRANKS) - 1 : 0,
                           .expect_fail_status = FAILED_AS_EXPECTED};
    int rc = -1;
    for (int attempt = 0; attempt < 3 && rc != 0; attempt++) {
        if (attempt && !report->root_port_taken)
            break;
        memset(report, 0, sizeof(*report));
        rc = zc_harness_run(&o, rank_main, NULL);
    }
    fprintf(stderr, "%s: %s\n", argv[1], rc ? "FAILED" : "passed");
    return rc ? 1 : 0;
}
