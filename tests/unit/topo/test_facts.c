/*
 * Each rank's facts (NUMA node, nearest NIC and its node) from the fixtures
 * and from this process's binding on a fixture taken as this machine; the
 * host's leader over fact tables; the facts' and the host's log text;
 * records received from other ranks made safe.
 */
#include "topo_test.h"

#include <dirent.h>
#include <errno.h>
#include <sched.h>

TestSuite(facts, .init = topo_test_setup, .fini = topo_test_teardown);
TestSuite(leader, .init = topo_test_setup, .fini = topo_test_teardown);

static zc_topo_facts_t make(int numa, const char *nic, int nic_numa)
{
    zc_topo_facts_t f;

    zc_topo_facts_unknown(&f);
    f.numa = numa;
    snprintf(f.nic, sizeof(f.nic), "%s", nic);
    f.nic_numa = nic_numa;
    return f;
}

static void assert_facts(const zc_topo_facts_t *got, int numa, const char *nic, int nic_numa,
                         const char *what)
{
    cr_assert_eq(got->numa, numa, "%s: numa %d, expected %d", what, got->numa, numa);
    cr_assert_str_eq(got->nic, nic, "%s", what);
    cr_assert_eq(got->nic_numa, nic_numa, "%s: nic numa %d, expected %d", what, got->nic_numa,
                 nic_numa);
}

static zc_topo_facts_t facts_of(zc_topo_t *topo, const char *cpulist)
{
    zc_topo_facts_t f = make(-7, "untouched", -7);

    cr_assert_eq(zc_topo_facts(topo, cpulist, &f), ZC_OK, "%s: %s", cpulist, topo_logs.text);
    return f;
}

/* A binding and the facts it must give. */
typedef struct facts_case {
    const char *cpus;
    int numa;
    const char *nic;
    int nic_numa;
} facts_case_t;

static void assert_cases(const char *fixture, const facts_case_t *cases, size_t n)
{
    zc_topo_t *topo = load_fixture(fixture);

    for (size_t i = 0; i < n; i++) {
        zc_topo_facts_t f = facts_of(topo, cases[i].cpus);

        assert_facts(&f, cases[i].numa, cases[i].nic, cases[i].nic_numa, cases[i].cpus);
    }
    cr_assert_eq(topo_logs.errors, 0, "%s", topo_logs.text);
    zc_topo_destroy(topo);
}

Test(facts, two_sockets_each_node_and_its_nic)
{
    static const facts_case_t cases[] = {
        /* node 0 holds PUs 0-3,8-11 with eno1 and mlx5_0 (RDMA first); node 1 4-7,12-15, eth1 */
        {"0-3", 0, "mlx5_0:1", 0},
        {"8", 0, "mlx5_0:1", 0},
        {"4-7", 1, "eth1", 1},
        {"12-13", 1, "eth1", 1},
        /* across both nodes: no node; the nic nearest the whole machine */
        {"0-15", -1, "mlx5_0:1", 0},
        {"3,4", -1, "mlx5_0:1", 0},
        /* cpus the machine does not have: unknown place, measured from the machine */
        {"100-101", -1, "mlx5_0:1", 0},
    };
    assert_cases(FIXTURE_2SOCKET, cases, ZC_ARRAY_SIZE(cases));
}

Test(facts, two_nodes_of_one_pu)
{
    static const facts_case_t cases[] = {
        {"0", 0, "eth0", 1},
        {"1", 1, "eth0", 1},
        {"0-1", -1, "eth0", 1},
    };
    assert_cases(FIXTURE_2NUMA, cases, ZC_ARRAY_SIZE(cases));
}

Test(facts, no_nic_is_none_not_an_error)
{
    zc_topo_t *topo = load_fixture(FIXTURE_NO_NIC);
    zc_topo_facts_t f = facts_of(topo, "0-3");

    assert_facts(&f, 0, "", -1, "0-3");
    cr_assert_eq(topo_logs.errors, 0, "%s", topo_logs.text);
    zc_topo_destroy(topo);
}

Test(facts, binding_of_a_foreign_fixture_is_unknown)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    zc_topo_facts_t f = facts_of(topo, NULL);

    assert_facts(&f, -1, "mlx5_0:1", 0, "this process on another machine's topology");
    cr_assert_eq(topo_logs.errors, 0, "%s", topo_logs.text);
    zc_topo_destroy(topo);
}

Test(facts, bad_arguments)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    zc_topo_facts_t f = make(-7, "untouched", -7);

    cr_assert_eq(zc_topo_facts(topo, "0-", &f), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_facts(topo, "3-1", &f), ZC_ERR_INVALID_ARG);
    assert_facts(&f, -7, "untouched", -7, "written only on success");
    cr_assert_eq(zc_topo_facts(NULL, "0", &f), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_facts(topo, "0", NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_this_facts(NULL, NULL), ZC_ERR_INVALID_ARG);
    zc_topo_destroy(topo);
}

Test(facts, long_nic_name_is_cut)
{
    char path[256];
    zc_topo_t *topo;
    zc_topo_facts_t f;

    edit_fixture(FIXTURE_2NUMA, "name=\"eth0\"", "name=\"enp65s0f0np0-with-a-name-far-too-long\"",
                 path, sizeof(path));
    topo = load_fixture(path);
    f = facts_of(topo, "1");
    cr_assert_eq(strlen(f.nic), ZC_TOPO_NIC_NAME_LEN - 1);
    cr_assert_eq(strncmp(f.nic, "enp65s0f0np0-with-a-name-far-too-long", ZC_TOPO_NIC_NAME_LEN - 1),
                 0, "%s", f.nic);
    cr_assert_eq(f.numa, 1);
    cr_assert_eq(f.nic_numa, 1);
    zc_topo_destroy(topo);
    unlink(path);
}

/* Binds every thread of this process (Criterion's included) to @p cpu; 0 when not allowed. */
static int bind_to(int cpu)
{
    cpu_set_t set;
    DIR *tasks = opendir("/proc/self/task");
    struct dirent *task;
    int ok = tasks != NULL;

    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    while (ok && (task = readdir(tasks)) != NULL)
        if (task->d_name[0] != '.')
            ok = sched_setaffinity((pid_t)atoi(task->d_name), sizeof(set), &set) == 0 ||
                 errno == ESRCH; /* a thread that just ended */
    if (tasks)
        closedir(tasks);
    return ok;
}

/* The first cpu this process may run on. */
static int first_allowed_cpu(void)
{
    cpu_set_t set;

    cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++)
        if (CPU_ISSET(cpu, &set))
            return cpu;
    cr_assert_fail("no cpu allowed");
    return -1;
}

Test(facts, this_process_on_a_fixture_taken_as_this_machine)
{
    /* ZIPCCL_TOPO_XML is this machine's topology: the OS's binding, in the file's numbering */
    int cpu = first_allowed_cpu();
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    zc_topo_facts_t got = make(-7, "untouched", -7), expected;
    char one[16];

    cr_assert(bind_to(cpu));
    snprintf(one, sizeof(one), "%d", cpu);
    expected = facts_of(topo, one); /* a cpu beyond the fixture's 16: unknown, from the machine */
    cr_assert_eq(zc_topo_this_facts(FIXTURE_2SOCKET, &got), ZC_OK, "%s", topo_logs.text);
    cr_assert_eq(memcmp(&got, &expected, sizeof(got)), 0, "cpu %d: numa %d nic %s numa %d", cpu,
                 got.numa, got.nic, got.nic_numa);
    if (cpu < 16)
        cr_assert_eq(got.numa, cpu % 8 < 4 ? 0 : 1, "cpu %d", cpu);
    zc_topo_destroy(topo);
}

Test(facts, this_process_follows_its_binding)
{
    /* the topology is loaded once; the binding is read at every call */
    zc_topo_facts_t f;

    if (!bind_to(0) || sched_getcpu() != 0)
        cr_skip_test("cpu 0 is not allowed here");
    cr_assert_eq(zc_topo_this_facts(FIXTURE_2NUMA, &f), ZC_OK, "%s", topo_logs.text);
    assert_facts(&f, 0, "eth0", 1, "bound to cpu 0");
    if (!bind_to(1))
        cr_skip_test("cpu 1 is not allowed here");
    cr_assert_eq(zc_topo_this_facts(FIXTURE_2NUMA, &f), ZC_OK);
    assert_facts(&f, 1, "eth0", 1, "bound to cpu 1");
    /* another file: loaded in its place */
    cr_assert_eq(zc_topo_this_facts(FIXTURE_NO_NIC, &f), ZC_OK);
    assert_facts(&f, 0, "", -1, "no nic, cpu 1");
}

Test(facts, this_machine)
{
    zc_topo_t *topo = NULL;
    zc_topo_facts_t got, expected;
    char bound[1024];

    cr_assert_eq(zc_topo_this_facts(NULL, &got), ZC_OK, "%s", topo_logs.text);
    cr_assert_eq(zc_topo_this_facts("", &expected), ZC_OK);
    cr_assert_eq(memcmp(&got, &expected, sizeof(got)), 0, "NULL and \"\" both discover");
    cr_assert_eq(zc_topo_load(NULL, &topo), ZC_OK);
    cr_assert_eq(zc_topo_cpubind(topo, bound, sizeof(bound)), ZC_OK);
    expected = facts_of(topo, bound);
    cr_assert_eq(memcmp(&got, &expected, sizeof(got)), 0, "binding %s: numa %d nic %s numa %d",
                 bound, got.numa, got.nic, got.nic_numa);
    zc_topo_destroy(topo);
}

Test(facts, unreadable_file_is_an_error)
{
    const char *path = ZC_TOPO_FIXTURES "/no-such-topology.xml";
    zc_topo_facts_t f = make(-7, "untouched", -7);

    cr_assert_eq(zc_topo_this_facts(path, &f), ZC_ERR_IO);
    assert_facts(&f, -7, "untouched", -7, "written only on success");
    cr_assert_not_null(strstr(topo_logs.text, path), "%s", topo_logs.text);
}

Test(facts, format_known_answers)
{
    zc_topo_facts_t f = make(1, "mlx5_0:1", 0), unknown;
    char text[64], small[12];

    cr_assert_eq(zc_topo_facts_format(&f, text, sizeof(text)), ZC_OK);
    cr_assert_str_eq(text, "numa 1, nic mlx5_0:1 numa 0");
    f = make(0, "eth1", -1);
    cr_assert_eq(zc_topo_facts_format(&f, text, sizeof(text)), ZC_OK);
    cr_assert_str_eq(text, "numa 0, nic eth1 numa -");
    zc_topo_facts_unknown(&unknown);
    cr_assert_eq(zc_topo_facts_format(&unknown, text, sizeof(text)), ZC_OK);
    cr_assert_str_eq(text, "numa -, nic none");
    cr_assert_eq(zc_topo_facts_format(&unknown, small, sizeof(small)), ZC_ERR_BUFFER_TOO_SMALL);
    cr_assert_str_eq(small, "numa -, nic");
    cr_assert_eq(zc_topo_facts_format(&unknown, NULL, 8), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_facts_format(NULL, text, sizeof(text)), ZC_ERR_INVALID_ARG);
}

Test(facts, sanitize_a_received_record)
{
    zc_topo_facts_t f;

    memset(&f, 'x', sizeof(f)); /* no NUL anywhere: as a broken peer could send */
    f.numa = -5;
    f.nic_numa = INT32_MIN;
    zc_topo_facts_sanitize(&f);
    cr_assert_eq(f.numa, -1);
    cr_assert_eq(f.nic_numa, -1);
    cr_assert_eq(strlen(f.nic), ZC_TOPO_NIC_NAME_LEN - 1);
    f.numa = 3;
    f.nic_numa = 2;
    zc_topo_facts_sanitize(&f);
    cr_assert_eq(f.numa, 3, "a known node stays");
    cr_assert_eq(f.nic_numa, 2);
    cr_assert_eq(sizeof(zc_topo_facts_t), 8 + ZC_TOPO_NIC_NAME_LEN, "sent as bytes: no padding");
}

/* ---- the leader ------------------------------------------------------------------------------ */

Test(leader, nic_on_node_1_ranks_on_0_1_and_unknown)
{
    /* one NIC on node 1: every rank names it; the first rank on node 1 leads */
    const zc_topo_facts_t host[] = {make(-1, "eth1", 1), make(0, "eth1", 1), make(1, "eth1", 1),
                                    make(1, "eth1", 1)};

    cr_assert_eq(zc_topo_pick_leader(host, 4), 2);
    cr_assert_eq(zc_topo_pick_leader(host, 3), 2);
    cr_assert_eq(zc_topo_pick_leader(host + 2, 2), 0, "ties: the lowest local index");
    cr_assert_eq(zc_topo_pick_leader(host, 2), 0, "nobody on node 1: local rank 0");
}

Test(leader, each_rank_near_a_nic_of_its_own)
{
    /* two NICs, one per node: the lowest local index next to its NIC */
    const zc_topo_facts_t host[] = {make(1, "mlx5_0:1", 0), make(1, "mlx5_1:1", 1),
                                    make(0, "mlx5_0:1", 0)};

    cr_assert_eq(zc_topo_pick_leader(host, 3), 1);
}

Test(leader, no_nic)
{
    const zc_topo_facts_t host[] = {make(0, "", -1), make(1, "", -1), make(0, "", 0)};

    cr_assert_eq(zc_topo_pick_leader(host, 3), 0, "a node without a nic name leads nothing");
}

Test(leader, all_unknown)
{
    zc_topo_facts_t host[4];

    for (int l = 0; l < 4; l++)
        zc_topo_facts_unknown(&host[l]);
    cr_assert_eq(zc_topo_pick_leader(host, 4), 0);
    /* a nic whose locality spans nodes, ranks whose node is unknown: -1 is no match for -1 */
    for (int l = 0; l < 4; l++)
        host[l] = make(-1, "eth0", -1);
    cr_assert_eq(zc_topo_pick_leader(host, 4), 0);
    host[3] = make(0, "eth0", -1);
    cr_assert_eq(zc_topo_pick_leader(host, 4), 0);
}

Test(leader, bad_arguments)
{
    zc_topo_facts_t one = make(0, "eth0", 0);

    cr_assert_eq(zc_topo_pick_leader(&one, 1), 0);
    cr_assert_eq(zc_topo_pick_leader(NULL, 1), -1);
    cr_assert_eq(zc_topo_pick_leader(&one, 0), -1);
}

Test(leader, from_the_facts_of_a_fixture)
{
    /* ranks bound across both sockets, to socket 1 (eth1's) and to socket 0 (mlx5_0's) */
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    zc_topo_facts_t host[3];

    host[0] = facts_of(topo, "0-15");
    host[1] = facts_of(topo, "4-7");
    host[2] = facts_of(topo, "0-3");
    cr_assert_eq(zc_topo_pick_leader(host, 3), 1);
    cr_assert_eq(zc_topo_pick_leader(host, 1), 0);
    zc_topo_destroy(topo);
}

Test(leader, host_line_known_answers)
{
    const int ranks[] = {2, 3, 6};
    const zc_topo_facts_t same[] = {make(0, "eth1", 1), make(1, "eth1", 1), make(-1, "eth1", 1)};
    const zc_topo_facts_t differ[] = {make(0, "mlx5_0:1", 0), make(1, "eth1", 1), make(-1, "", -1)};
    zc_topo_facts_t unknown[2];
    char line[256], cut[20];

    cr_assert_eq(zc_topo_format_host(ranks, same, 3, line, sizeof(line)), ZC_OK);
    cr_assert_str_eq(line, "ranks 2 3 6; numa 0 1 -; nic eth1 numa 1; leader rank 3 (local 1)");
    cr_assert_eq(zc_topo_format_host(ranks, differ, 3, line, sizeof(line)), ZC_OK);
    cr_assert_str_eq(line, "ranks 2 3 6; numa 0 1 -; nics mlx5_0:1 numa 0, eth1 numa 1, none; "
                           "leader rank 2 (local 0)");
    zc_topo_facts_unknown(&unknown[0]);
    zc_topo_facts_unknown(&unknown[1]);
    cr_assert_eq(zc_topo_format_host(ranks + 1, unknown, 2, line, sizeof(line)), ZC_OK);
    cr_assert_str_eq(line, "ranks 3 6; numa - -; nic none; leader rank 3 (local 0)");
    cr_assert_eq(zc_topo_format_host(ranks, same, 3, cut, sizeof(cut)), ZC_ERR_BUFFER_TOO_SMALL);
    cr_assert_str_eq(cut, "ranks 2 3 6; numa 0");
    cr_assert_eq(zc_topo_format_host(ranks, same, 0, line, sizeof(line)), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_format_host(NULL, same, 3, line, sizeof(line)), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_format_host(ranks, same, 3, line, 0), ZC_ERR_INVALID_ARG);
}
