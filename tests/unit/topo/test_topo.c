/*
 * Loading topologies (fixtures, this machine, bad files), the log line, NUMA
 * nodes of CPU lists and PCI devices, this process's binding.
 */
#include "topo_test.h"

#include "common/config.h"

#include <sched.h>

TestSuite(topo, .init = topo_test_setup, .fini = topo_test_teardown);

Test(topo, fixture_loads_as_another_machine)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);

    cr_assert_eq(zc_topo_is_this_system(topo), 0);
    zc_topo_destroy(topo);
}

Test(topo, describe_fixture_known_answer)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    char line[1024];

    cr_assert_eq(zc_topo_describe(topo, line, sizeof(line)), ZC_OK);
    cr_assert_str_eq(line,
                     FIXTURE_2SOCKET ": 2 packages, 2 numa nodes, 8 cores, 16 pus; "
                                     "gpus cuda0 0000:19:00.0 numa 0, cuda1 0000:3b:00.0 numa 0, "
                                     "cuda2 0000:5f:00.0 numa 1, cuda3 0000:87:00.0 numa 1, "
                                     "cuda4 0000:b1:00.0 numa -; "
                                     "nics eno1 0000:02:00.0 numa 0, mlx5_0:1 0000:1a:00.0 numa 0, "
                                     "eth1 0000:60:00.0 numa 1");
    zc_topo_destroy(topo);
}

Test(topo, describe_fixture_without_nic)
{
    zc_topo_t *topo = load_fixture(FIXTURE_NO_NIC);
    char line[1024];

    cr_assert_eq(zc_topo_describe(topo, line, sizeof(line)), ZC_OK);
    cr_assert_str_eq(line, FIXTURE_NO_NIC ": 1 packages, 1 numa nodes, 4 cores, 8 pus; "
                                          "gpus cuda0 0000:01:00.0 numa 0; nics none");
    zc_topo_destroy(topo);
}

Test(topo, describe_cuts_a_long_line)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    char full[1024], cut[40];

    cr_assert_eq(zc_topo_describe(topo, full, sizeof(full)), ZC_OK);
    for (size_t len = 1; len <= sizeof(cut); len++) {
        memset(cut, 'x', sizeof(cut));
        cr_assert_eq(zc_topo_describe(topo, cut, len), ZC_ERR_BUFFER_TOO_SMALL, "len %zu", len);
        cr_assert_eq(strlen(cut), len - 1, "len %zu", len);
        cr_assert_eq(strncmp(cut, full, len - 1), 0, "len %zu", len);
    }
    cr_assert_eq(zc_topo_describe(topo, full, strlen(full) + 1), ZC_OK);
    cr_assert_eq(zc_topo_describe(topo, full, strlen(full)), ZC_ERR_BUFFER_TOO_SMALL);
    cr_assert_eq(zc_topo_describe(topo, NULL, 10), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_describe(topo, full, 0), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_describe(NULL, full, sizeof(full)), ZC_ERR_INVALID_ARG);
    zc_topo_destroy(topo);
}

Test(topo, this_machine_loads)
{
    zc_topo_t *topo = NULL, *again = NULL;
    char line[4096];

    cr_assert_eq(zc_topo_load(NULL, &topo), ZC_OK);
    cr_assert_eq(zc_topo_is_this_system(topo), 1);
    cr_assert_eq(zc_topo_describe(topo, line, sizeof(line)), ZC_OK);
    cr_assert_eq(strncmp(line, "this machine: ", 14), 0, "%s", line);
    cr_assert_null(strstr(line, " 0 pus"), "%s", line);
    /* an empty path (ZIPCCL_TOPO_XML unset) means this machine too */
    cr_assert_eq(zc_topo_load("", &again), ZC_OK);
    cr_assert_eq(zc_topo_is_this_system(again), 1);
    cr_assert_eq(topo_logs.errors, 0, "%s", topo_logs.text);
    zc_topo_destroy(again);
    zc_topo_destroy(topo);
}

Test(topo, path_from_the_configuration)
{
    char *const env[] = {"ZIPCCL_TOPO_XML=" FIXTURE_NO_NIC, NULL};
    char *const no_env[] = {NULL};
    zc_config_t cfg;
    zc_topo_t *topo = NULL;

    cr_assert_eq(zc_config_load(env, &cfg), ZC_OK);
    cr_assert_eq(zc_topo_load(cfg.topo_xml, &topo), ZC_OK);
    cr_assert_eq(zc_topo_is_this_system(topo), 0);
    zc_topo_destroy(topo);
    cr_assert_eq(zc_config_load(no_env, &cfg), ZC_OK); /* the default: this machine */
    cr_assert_str_eq(cfg.topo_xml, "");
    cr_assert_eq(zc_topo_load(cfg.topo_xml, &topo), ZC_OK);
    cr_assert_eq(zc_topo_is_this_system(topo), 1);
    zc_topo_destroy(topo);
}

Test(topo, missing_xml_names_the_path)
{
    const char *path = ZC_TOPO_FIXTURES "/no-such-topology.xml";
    zc_topo_t *topo = (zc_topo_t *)&topo_logs; /* must stay untouched */

    cr_assert_eq(zc_topo_load(path, &topo), ZC_ERR_IO);
    cr_assert_eq(topo, (zc_topo_t *)&topo_logs);
    cr_assert_eq(topo_logs.errors, 1, "%s", topo_logs.text);
    cr_assert_not_null(strstr(topo_logs.text, path), "%s", topo_logs.text);
    cr_assert_not_null(strstr(topo_logs.text, "No such file"), "%s", topo_logs.text);
}

Test(topo, malformed_xml_names_the_path)
{
    static const char *const bodies[] = {
        "not xml at all\n",
        "<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n<object type=\"Machine\"",
        "<?xml version=\"1.0\"?>\n<html><body/></html>\n",
    };

    for (size_t i = 0; i < ZC_ARRAY_SIZE(bodies); i++) {
        char path[] = "/tmp/zc-topo-bad-XXXXXX";
        int fd = mkstemp(path);
        zc_topo_t *topo = NULL;

        cr_assert_geq(fd, 0);
        cr_assert_eq(write(fd, bodies[i], strlen(bodies[i])), (ssize_t)strlen(bodies[i]));
        close(fd);
        topo_logs.text[0] = '\0';
        topo_logs.errors = 0;
        cr_assert_eq(zc_topo_load(path, &topo), ZC_ERR_CORRUPT, "body %zu", i);
        cr_assert_null(topo);
        cr_assert_eq(topo_logs.errors, 1, "%s", topo_logs.text);
        cr_assert_not_null(strstr(topo_logs.text, path), "%s", topo_logs.text);
        unlink(path);
    }
}

Test(topo, bad_arguments)
{
    cr_assert_eq(zc_topo_load(FIXTURE_2SOCKET, NULL), ZC_ERR_INVALID_ARG);
    zc_topo_destroy(NULL);
    cr_assert_eq(zc_topo_is_this_system(NULL), 0);
}

Test(topo, numa_of_cpu_lists)
{
    static const struct {
        const char *cpus;
        int numa;
    } cases[] = {
        {"0-3,8-11", 0},                   /* package 0 with its hyperthread siblings */
        {"4-7,12-15", 1}, {"8", 0},        /* a sibling, numbered after package 1's first threads */
        {"12", 1},        {"0,4,5", 1},    /* most of the cpus win */
        {"0,4", 0},                        /* a tie goes to the lowest node */
        {"0-15", 0},      {"15,16,17", 1}, /* cpus beyond the machine are ignored */
    };
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);

    for (size_t i = 0; i < ZC_ARRAY_SIZE(cases); i++) {
        int numa = -7;

        cr_assert_eq(zc_topo_numa_of_cpuset(topo, cases[i].cpus, &numa), ZC_OK, "%s",
                     cases[i].cpus);
        cr_assert_eq(numa, cases[i].numa, "%s: numa %d", cases[i].cpus, numa);
    }
    cr_assert_eq(topo_logs.errors, 0, "%s", topo_logs.text);
    zc_topo_destroy(topo);
}

Test(topo, numa_of_bad_cpu_lists)
{
    static const char *const bad[] = {"",     "abc", "3-1", "0-", "1,,2",
                                      "0-3x", " 1",  "-1",  "1,", "70000"};
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    int numa = -7;

    for (size_t i = 0; i < ZC_ARRAY_SIZE(bad); i++) {
        topo_logs.errors = 0;
        cr_assert_eq(zc_topo_numa_of_cpuset(topo, bad[i], &numa), ZC_ERR_INVALID_ARG, "'%s'",
                     bad[i]);
        cr_assert_eq(topo_logs.errors, 1, "'%s': %s", bad[i], topo_logs.text);
    }
    /* well formed, but no such cpu */
    cr_assert_eq(zc_topo_numa_of_cpuset(topo, "16-31", &numa), ZC_ERR_INVALID_ARG);
    cr_assert_not_null(strstr(topo_logs.text, "cpus 16-31 are not in the topology"), "%s",
                       topo_logs.text);
    cr_assert_eq(numa, -7);
    /* this process's binding has nothing to do with a fixture */
    cr_assert_eq(zc_topo_numa_of_cpuset(topo, NULL, &numa), ZC_ERR_UNSUPPORTED);
    cr_assert_eq(zc_topo_numa_of_cpuset(topo, "0", NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_numa_of_cpuset(NULL, "0", &numa), ZC_ERR_INVALID_ARG);
    cr_assert_eq(numa, -7);
    zc_topo_destroy(topo);
}

Test(topo, numa_of_pci_devices)
{
    static const struct {
        const char *busid;
        int numa;
    } cases[] = {
        {"0000:19:00.0", 0},     {"0000:3b:00.0", 0},  {"0000:5f:00.0", 1},
        {"0000:87:00.0", 1},     {"0000:b1:00.0", -1}, /* attached to the whole machine */
        {"00000000:5F:00.0", 1},                       /* as cudaDeviceGetPCIBusId writes it */
        {"1a:00.0", 0},                                /* domain omitted */
        {"0000:60:00.0", 1},
    };
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    int numa = -7;

    for (size_t i = 0; i < ZC_ARRAY_SIZE(cases); i++) {
        cr_assert_eq(zc_topo_numa_of_pci(topo, cases[i].busid, &numa), ZC_OK, "%s", cases[i].busid);
        cr_assert_eq(numa, cases[i].numa, "%s: numa %d", cases[i].busid, numa);
    }
    numa = -7;
    cr_assert_eq(zc_topo_numa_of_pci(topo, "0000:99:00.0", &numa), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_numa_of_pci(topo, "0000:19:00.0 ", &numa), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_numa_of_pci(topo, NULL, &numa), ZC_ERR_INVALID_ARG);
    cr_assert_eq(numa, -7);
    zc_topo_destroy(topo);
}

/* The calling thread's affinity in list format, as the kernel reports it. */
static void affinity_list(char *buf, size_t len)
{
    cpu_set_t set;
    size_t used = 0;

    cr_assert_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    buf[0] = '\0';
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        int last = cpu;

        if (!CPU_ISSET(cpu, &set))
            continue;
        while (last + 1 < CPU_SETSIZE && CPU_ISSET(last + 1, &set))
            last++;
        used += (size_t)snprintf(buf + used, len - used, used ? ",%d" : "%d", cpu);
        if (last > cpu)
            used += (size_t)snprintf(buf + used, len - used, "-%d", last);
        cpu = last;
    }
}

Test(topo, this_process_binding)
{
    zc_topo_t *topo = NULL;
    char bound[1024], expected[1024];
    int numa = -7, numa_of_list = -7;

    cr_assert_eq(zc_topo_load(NULL, &topo), ZC_OK);
    cr_assert_eq(zc_topo_cpubind(topo, bound, sizeof(bound)), ZC_OK);
    affinity_list(expected, sizeof(expected));
    cr_assert_str_eq(bound, expected);
    cr_assert_eq(zc_topo_cpubind(topo, bound, 1), ZC_ERR_BUFFER_TOO_SMALL);

    cr_assert_eq(zc_topo_numa_of_cpuset(topo, NULL, &numa), ZC_OK, "%s", topo_logs.text);
    cr_assert_geq(numa, 0);
    cr_assert_eq(zc_topo_numa_of_cpuset(topo, expected, &numa_of_list), ZC_OK);
    cr_assert_geq(numa_of_list, 0);
    zc_topo_destroy(topo);
}

Test(topo, bind_thread_stays_inside_the_process_binding)
{
    zc_topo_t *topo = NULL;
    cpu_set_t before, after;
    int numa = -1;

    cr_assert_eq(zc_topo_load(NULL, &topo), ZC_OK);
    cr_assert_eq(sched_getaffinity(0, sizeof(before), &before), 0);
    cr_assert_eq(zc_topo_numa_of_cpuset(topo, NULL, &numa), ZC_OK);
    cr_assert_eq(zc_topo_bind_thread(topo, numa), ZC_OK, "%s", topo_logs.text);
    cr_assert_eq(sched_getaffinity(0, sizeof(after), &after), 0);
    cr_assert_gt(CPU_COUNT(&after), 0);
    /* every cpu now allowed was allowed before, and sits on that node */
    for (int cpu = 0; cpu < CPU_SETSIZE; cpu++) {
        char one[16];
        int one_numa = -1;

        if (!CPU_ISSET(cpu, &after))
            continue;
        cr_assert(CPU_ISSET(cpu, &before), "cpu %d was not allowed", cpu);
        snprintf(one, sizeof(one), "%d", cpu);
        cr_assert_eq(zc_topo_numa_of_cpuset(topo, one, &one_numa), ZC_OK);
        cr_assert_eq(one_numa, numa, "cpu %d", cpu);
    }
    cr_assert_eq(zc_topo_bind_thread(topo, 1 << 20), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_bind_thread(topo, -1), ZC_ERR_INVALID_ARG);
    zc_topo_destroy(topo);
}

Test(topo, fixture_has_no_process_binding)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    char bound[64] = "untouched";

    cr_assert_eq(zc_topo_cpubind(topo, bound, sizeof(bound)), ZC_ERR_UNSUPPORTED);
    cr_assert_str_eq(bound, "untouched");
    cr_assert_eq(zc_topo_bind_thread(topo, 0), ZC_ERR_UNSUPPORTED);
    cr_assert_eq(zc_topo_bind_thread(topo, 5), ZC_ERR_INVALID_ARG); /* no such node */
    zc_topo_destroy(topo);
}
