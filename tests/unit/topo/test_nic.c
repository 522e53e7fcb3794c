/*
 * The network device nearest a GPU, on the 2-socket fixture and edited copies
 * of it: every tier of the order (same switch, same package, anywhere), the
 * RDMA port rule, devices that are down, names that do not fit, bad bus ids.
 */
#include "topo_test.h"

TestSuite(nic, .init = topo_test_setup, .fini = topo_test_teardown);

static void assert_nearest(zc_topo_t *topo, const char *busid, const char *expected)
{
    char name[64] = "untouched";

    cr_assert_eq(zc_topo_nearest_nic(topo, busid, name, sizeof(name)), ZC_OK, "%s: %s", busid,
                 topo_logs.text);
    cr_assert_str_eq(name, expected, "nearest to %s", busid);
}

Test(nic, nearest_to_each_gpu)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);

    assert_nearest(topo, "0000:19:00.0", "mlx5_0:1"); /* cuda0: behind the same switch */
    assert_nearest(topo, "0000:3b:00.0", "mlx5_0:1"); /* cuda1: same package; RDMA, not eno1 */
    assert_nearest(topo, "0000:5f:00.0", "eth1");     /* cuda2: behind the same switch */
    assert_nearest(topo, "0000:87:00.0", "eth1");     /* cuda3: same package */
    assert_nearest(topo, "0000:b1:00.0", "mlx5_0:1"); /* cuda4: no locality; RDMA first */
    cr_assert_eq(topo_logs.errors, 0, "%s", topo_logs.text);
    zc_topo_destroy(topo);
}

Test(nic, nearest_to_a_nic_is_itself)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);

    assert_nearest(topo, "0000:02:00.0", "eno1");
    assert_nearest(topo, "0000:1a:00.0", "mlx5_0:1");
    assert_nearest(topo, "0000:60:00.0", "eth1");
    zc_topo_destroy(topo);
}

Test(nic, bus_id_forms)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);

    assert_nearest(topo, "00000000:19:00.0", "mlx5_0:1"); /* cudaDeviceGetPCIBusId */
    assert_nearest(topo, "00000000:5F:00.0", "eth1");
    assert_nearest(topo, "19:00.0", "mlx5_0:1");
    zc_topo_destroy(topo);
}

Test(nic, unknown_or_malformed_bus_id)
{
    static const char *const bad[] = {"gpu0",         "0000:19:00.0x", "",
                                      "0000:19:00",   "0000:100:00.0", "0000:19:20.0",
                                      "0000:19:00.8", " 0000:19:00.0", "-0:19:00.0",
                                      "0x0:19:00.0",  "0000:19:0x.0"};
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    char name[64] = "untouched";

    cr_assert_eq(zc_topo_nearest_nic(topo, "0000:99:00.0", name, sizeof(name)), ZC_ERR_INVALID_ARG);
    cr_assert_eq(topo_logs.errors, 1, "%s", topo_logs.text);
    cr_assert_not_null(strstr(topo_logs.text, "no pci device 0000:99:00.0 in the topology of"),
                       "%s", topo_logs.text);
    for (size_t i = 0; i < ZC_ARRAY_SIZE(bad); i++) {
        topo_logs.text[0] = '\0';
        cr_assert_eq(zc_topo_nearest_nic(topo, bad[i], name, sizeof(name)), ZC_ERR_INVALID_ARG,
                     "'%s'", bad[i]);
        cr_assert_not_null(strstr(topo_logs.text, "malformed pci bus id"), "'%s': %s", bad[i],
                           topo_logs.text);
    }
    cr_assert_str_eq(name, "untouched");
    cr_assert_eq(zc_topo_nearest_nic(NULL, "0000:19:00.0", name, sizeof(name)), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_nearest_nic(topo, "0000:19:00.0", NULL, 8), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_nearest_nic(topo, "0000:19:00.0", name, 0), ZC_ERR_INVALID_ARG);
    zc_topo_destroy(topo);
}

Test(nic, no_network_device_is_unsupported)
{
    zc_topo_t *topo = load_fixture(FIXTURE_NO_NIC);
    char name[64] = "untouched";

    cr_assert_eq(zc_topo_nearest_nic(topo, "0000:01:00.0", name, sizeof(name)), ZC_ERR_UNSUPPORTED);
    cr_assert_str_eq(name, "untouched");
    cr_assert_eq(topo_logs.errors, 0, "%s", topo_logs.text);
    cr_assert_not_null(strstr(topo_logs.text, "info: no network device in the topology"), "%s",
                       topo_logs.text);
    /* a bad bus id is still an error of the caller's */
    cr_assert_eq(zc_topo_nearest_nic(topo, "0000:99:00.0", name, sizeof(name)), ZC_ERR_INVALID_ARG);
    zc_topo_destroy(topo);
}

Test(nic, name_that_does_not_fit)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    char name[16];

    memcpy(name, "untouched", 10);
    cr_assert_eq(zc_topo_nearest_nic(topo, "0000:19:00.0", name, 8), ZC_ERR_BUFFER_TOO_SMALL);
    cr_assert_str_eq(name, "untouched");
    cr_assert_eq(zc_topo_nearest_nic(topo, "0000:19:00.0", name, 9), ZC_OK); /* "mlx5_0:1" */
    cr_assert_str_eq(name, "mlx5_0:1");
    zc_topo_destroy(topo);
}

/* Loads the 2-socket fixture edited by @p edits ({from, to}, ..., NULL) and asks for a NIC. */
static void assert_edited(const char *const *edits, const char *busid, const char *expected)
{
    char path[64], previous[64] = "";
    zc_topo_t *topo;

    for (const char *const *edit = edits; *edit; edit += 2) {
        edit_fixture(previous[0] ? previous : FIXTURE_2SOCKET, edit[0], edit[1], path,
                     sizeof(path));
        if (previous[0])
            unlink(previous);
        memcpy(previous, path, sizeof(path));
    }
    topo = load_fixture(path);
    unlink(path);
    assert_nearest(topo, busid, expected);
    zc_topo_destroy(topo);
}

#define PORT1_ACTIVE "<info name=\"Port1State\" value=\"4\"/>"
#define MLX5_0_RDMA "name=\"mlx5_0\" osdev_type=\"3\""
#define MLX5_0_NOT_RDMA "name=\"mlx5_0\" osdev_type=\"4\"" /* a DMA engine: ignored */
#define ENO1_LINK "[15d9:1521] 01\" pci_link_speed=\"0.500000\""
#define IB_LINK "[15b3:0007] 00\" pci_link_speed=\"31.507692\""
#define ETH1_LINK "[8086:0003] 02\" pci_link_speed=\"15.753846\""

Test(nic, rdma_port_is_the_lowest_active_one)
{
    const char *edits[] = {PORT1_ACTIVE,
                           "<info name=\"Port1State\" value=\"1\"/>"
                           "<info name=\"Port3State\" value=\"4\"/>"
                           "<info name=\"Port2State\" value=\"5\"/>",
                           NULL};

    assert_edited(edits, "0000:19:00.0", "mlx5_0:2");
}

Test(nic, rdma_port_defaults_to_1)
{
    const char *edits[] = {PORT1_ACTIVE, "", NULL};

    assert_edited(edits, "0000:19:00.0", "mlx5_0:1");
}

Test(nic, rdma_device_with_every_port_down_comes_last)
{
    const char *edits[] = {
        PORT1_ACTIVE,
        "<info name=\"Port1State\" value=\"1\"/><info name=\"Port2State\" value=\"2\"/>", NULL};

    /* cuda0 then takes eno1 (same package) over eth1 (the other package) */
    assert_edited(edits, "0000:19:00.0", "eno1");
}

Test(nic, netdev_names_a_device_without_openfabrics)
{
    const char *edits[] = {MLX5_0_RDMA, MLX5_0_NOT_RDMA, NULL};

    /* the ConnectX without its RDMA device: only its IPoIB netdev is left to name */
    assert_edited(edits, "0000:19:00.0", "ib0");
}

Test(nic, rdma_before_a_faster_ethernet)
{
    const char *edits[] = {ENO1_LINK, "[15d9:1521] 01\" pci_link_speed=\"63.000000\"", NULL};

    assert_edited(edits, "0000:3b:00.0", "mlx5_0:1");
}

Test(nic, faster_link_among_equals)
{
    const char *ib_faster[] = {MLX5_0_RDMA, MLX5_0_NOT_RDMA, NULL};
    const char *eno1_faster[] = {MLX5_0_RDMA, MLX5_0_NOT_RDMA, IB_LINK,
                                 "[15b3:0007] 00\" pci_link_speed=\"0.250000\"", NULL};

    /* cuda1 has ib0 and eno1 in its package, under other host bridges */
    assert_edited(ib_faster, "0000:3b:00.0", "ib0");
    assert_edited(eno1_faster, "0000:3b:00.0", "eno1");
}

Test(nic, fewer_bridges_among_equals)
{
    const char *edits[] = {MLX5_0_RDMA, MLX5_0_NOT_RDMA,
                           IB_LINK,     "[15b3:0007] 00\" pci_link_speed=\"1.000000\"",
                           ENO1_LINK,   "[15d9:1521] 01\" pci_link_speed=\"1.000000\"",
                           ETH1_LINK,   "[8086:0003] 02\" pci_link_speed=\"1.000000\"",
                           NULL};

    /* cuda4 hangs on the machine: eno1 has one bridge, ib0 and eth1 two */
    assert_edited(edits, "0000:b1:00.0", "eno1");
}

Test(nic, fixture_has_no_process_binding)
{
    zc_topo_t *topo = load_fixture(FIXTURE_2SOCKET);
    char name[64] = "untouched";

    cr_assert_eq(zc_topo_nearest_nic(topo, NULL, name, sizeof(name)), ZC_ERR_UNSUPPORTED);
    cr_assert_str_eq(name, "untouched");
    zc_topo_destroy(topo);
}

Test(nic, nearest_to_this_process)
{
    zc_topo_t *topo = NULL;
    char name[64] = "", line[8192];
    zc_status_t status;

    cr_assert_eq(zc_topo_load(NULL, &topo), ZC_OK);
    status = zc_topo_nearest_nic(topo, NULL, name, sizeof(name));
    cr_assert(status == ZC_OK || status == ZC_ERR_UNSUPPORTED, "%s", zc_status_string(status));
    cr_assert_eq(zc_topo_describe(topo, line, sizeof(line)), ZC_OK);
    if (status == ZC_OK) { /* the name is one of the machine's nics */
        cr_assert_neq(name[0], '\0');
        cr_assert_not_null(strstr(strstr(line, "; nics "), name), "%s not in %s", name, line);
    } else {
        cr_assert_not_null(strstr(line, "; nics none"), "%s", line);
    }
    zc_topo_destroy(topo);
}
