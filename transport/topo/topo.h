/*
 * Topology: where this process runs and what is near it, from hwloc.
 *
 *   - which ranks share a host (hierarchical all-reduce), from host identities
 *     exchanged over the bootstrap;
 *   - this process's CPU binding and NUMA node (binding the progress thread);
 *   - the network device nearest a GPU, named as UCX_NET_DEVICES wants it.
 *
 * A zc_topo_t is either this machine (discovered by hwloc, I/O devices
 * included) or an hwloc XML file: the tests load XML fixtures of machines they
 * do not run on (tests/fixtures/topo/). Queries that concern the running
 * process (its binding, binding a thread) need this machine and return
 * ZC_ERR_UNSUPPORTED on an XML topology, except one loaded by zc_topo_load_this:
 * ZIPCCL_TOPO_XML is this machine's topology, read from a file.
 *
 * The communicator uses it at creation (collectives/hier.c): every rank finds
 * its facts (zc_topo_this_facts: its NUMA node, the network device nearest it
 * and that device's node), the host-grouping allgather gives every rank every
 * rank's, each host's leader is the rank nearest its NIC (zc_topo_pick_leader;
 * hier.c makes it local rank 0 of its host),
 * and each rank's shared-memory buffers are placed on its node
 * (transport/shm). Host grouping, the leader and the facts record are built
 * with or without hwloc; the queries below that read a zc_topo_t are built only
 * when hwloc is found (meson's summary says when it is off): without it
 * zc_topo_this_facts says "unknown" (facts_none.c).
 *
 * Files: topo.c (loading, NUMA and CPU queries), describe.c (the log line),
 * nic.c (network devices near a PCI device), facts.c (a rank's facts from a
 * topology; this machine's topology, loaded once per process), host.c (host
 * grouping), leader.c (the leader and the facts' text, without hwloc).
 *
 * Thread safety: a loaded zc_topo_t is read-only; every query may run
 * concurrently with the others (hwloc's queries are thread safe after load).
 * zc_topo_bind_thread changes the calling thread's binding only.
 */
#ifndef ZC_TRANSPORT_TOPO_H
#define ZC_TRANSPORT_TOPO_H

#include "transport/bootstrap/bootstrap.h"

#include <zipccl/zipccl_status.h>

#include <stddef.h>
#include <stdint.h>

/* Bytes of a host identity, terminating NUL and zero padding included. */
#define ZC_TOPO_HOST_ID_LEN 64

typedef struct zc_topo zc_topo_t;

/*
 * Loads a topology into @p topo_p: this machine when @p xml_path is NULL or
 * empty, else the hwloc XML file at @p xml_path (hwloc 1.x or 2.x format).
 * I/O devices are kept where hwloc deems them important (GPUs, NICs, storage
 * and the bridges above them). Errors, logged naming the path:
 * ZC_ERR_IO (file missing or unreadable), ZC_ERR_CORRUPT (hwloc rejects the
 * file), ZC_ERR_NO_MEMORY, ZC_ERR_INTERNAL (hwloc fails on this machine).
 * The caller owns *topo_p and frees it with zc_topo_destroy.
 */
zc_status_t zc_topo_load(const char *xml_path, zc_topo_t **topo_p);

/* Frees @p topo; NULL is allowed. */
void zc_topo_destroy(zc_topo_t *topo);

/* 1 when @p topo describes the machine this process runs on, 0 for an XML file. */
int zc_topo_is_this_system(const zc_topo_t *topo);

/*
 * Writes one line for logs into @p buf: the source, counts of packages, NUMA
 * nodes, cores and PUs, then the GPUs and NICs with their PCI bus id and NUMA
 * node ("-" when their locality spans NUMA nodes):
 *   "this machine: 2 packages, 2 numa nodes, 8 cores, 16 pus; gpus cuda0
 *    0000:19:00.0 numa 0, ...; nics mlx5_0:1 0000:1a:00.0 numa 0, ..."
 * Returns ZC_ERR_BUFFER_TOO_SMALL when the line was cut; @p buf then holds
 * the cut line, NUL-terminated (the exception to "written only on success":
 * a cut line is still worth logging). ZC_ERR_INVALID_ARG for NULL or len 0.
 */
zc_status_t zc_topo_describe(const zc_topo_t *topo, char *buf, size_t len);

/*
 * The NUMA node (its OS index, as numactl and /sys/devices/system/node number
 * it) of a set of CPUs. @p cpulist uses the kernel's list format ("0-3,8-11",
 * OS indexes of PUs, as taskset -c and /sys cpulist files): the node holding
 * most of those CPUs wins, the lowest index on a tie. NULL means this
 * process's binding (this machine only); when that binding spans several
 * nodes (an unbound process), the node of the CPU the calling thread last ran
 * on. Errors: ZC_ERR_INVALID_ARG (malformed list, or none of its CPUs in the
 * topology), ZC_ERR_UNSUPPORTED (NULL on an XML topology, or a topology
 * without NUMA information).
 */
zc_status_t zc_topo_numa_of_cpuset(const zc_topo_t *topo, const char *cpulist, int *numa_p);

/*
 * Writes this process's CPU binding in list format ("0-3,8-11") into
 * @p cpulist. ZC_ERR_UNSUPPORTED on an XML topology or where the OS cannot
 * say, ZC_ERR_BUFFER_TOO_SMALL when it does not fit in @p len bytes.
 */
zc_status_t zc_topo_cpubind(const zc_topo_t *topo, char *cpulist, size_t len);

/*
 * The NUMA node (OS index) near the PCI device @p busid ("0000:3b:00.0"; the
 * domain may be omitted or have 8 digits, as CUDA writes it), or -1 when its
 * locality spans several nodes (hwloc attached it to the whole machine).
 * ZC_ERR_INVALID_ARG when @p busid is malformed or not in the topology.
 */
zc_status_t zc_topo_numa_of_pci(const zc_topo_t *topo, const char *busid, int *numa_p);

/*
 * Binds the calling thread to the CPUs of NUMA node @p numa (OS index) that
 * this process may use: the intersection with the process binding, so that a
 * launcher's binding (mpirun --bind-to, taskset) is never widened.
 * ZC_ERR_INVALID_ARG: no such node, or the process has no CPU on it;
 * ZC_ERR_UNSUPPORTED: an XML topology; ZC_ERR_IO: the OS refused the binding.
 */
zc_status_t zc_topo_bind_thread(const zc_topo_t *topo, int numa);

/*
 * Names the network device nearest the PCI device @p busid (a GPU, usually),
 * or nearest this process's binding when @p busid is NULL (this machine only),
 * in the form UCX_NET_DEVICES takes:
 *   - an RDMA device (hwloc OpenFabrics device): "<device>:<port>", the lowest
 *     port in state ACTIVE, else the lowest port hwloc lists, else port 1
 *     ("mlx5_0:1"); its IPoIB or RoCE netdev is not named separately;
 *   - any other network device: its interface name ("eth2").
 * Nearest means, in order: a device with a usable port (an RDMA device whose
 * listed ports are all down comes last); the deepest common ancestor in the
 * hwloc tree (same PCIe switch, then same host bridge, then same package or
 * NUMA node, then anywhere in the machine); RDMA before plain Ethernet; the
 * faster PCIe link; the fewer bridges between; the first in hwloc's order.
 * Errors: ZC_ERR_INVALID_ARG (busid malformed or not in the topology),
 * ZC_ERR_UNSUPPORTED (the topology has no network device: leave
 * UCX_NET_DEVICES unset and let UCX choose; logged at info level),
 * ZC_ERR_BUFFER_TOO_SMALL (the name does not fit in @p len bytes).
 */
zc_status_t zc_topo_nearest_nic(const zc_topo_t *topo, const char *busid, char *nic_name,
                                size_t len);

/*
 * Loads this machine's topology into @p topo_p: discovered when @p xml_path is
 * NULL or empty, else read from the hwloc XML file at @p xml_path and taken as
 * this machine's (hwloc's HWLOC_TOPOLOGY_FLAG_IS_THISSYSTEM: binding queries
 * ask the OS, with the file's CPU and NUMA numbering): ZIPCCL_TOPO_XML, for
 * machines whose firmware misreports locality, and for tests. hwloc's GPU and
 * display components (cuda, nvml, opencl, gl, rsmi, levelzero) are left out:
 * they would start GPU runtimes in the caller, and the facts need only PCI
 * and network devices. Errors as zc_topo_load's.
 */
zc_status_t zc_topo_load_this(const char *xml_path, zc_topo_t **topo_p);

/* Bytes of a network device's name in zc_topo_facts_t, NUL included. */
#define ZC_TOPO_NIC_NAME_LEN 32

/*
 * What a rank knows of its place on its host: exchanged as bytes at
 * communicator creation (fixed size, no pointers), so every rank holds every
 * rank's. Unknown is -1 and "".
 */
typedef struct zc_topo_facts {
    int32_t numa;                   /* NUMA node (OS index) of the rank's CPU binding; -1 when
                                       unknown or when the binding spans several nodes */
    int32_t nic_numa;               /* NUMA node of the device below; -1 when there is none or
                                       its locality spans several nodes */
    char nic[ZC_TOPO_NIC_NAME_LEN]; /* the network device nearest the binding, as
                                       zc_topo_nearest_nic names it; "" when none */
} zc_topo_facts_t;

/* Sets every field of @p facts to unknown. */
void zc_topo_facts_unknown(zc_topo_facts_t *facts);

/*
 * Makes @p facts, received from another rank, safe to use: the name
 * NUL-terminated, a node below -1 made -1.
 */
void zc_topo_facts_sanitize(zc_topo_facts_t *facts);

/*
 * The facts of a rank bound to @p cpulist (list format, as
 * zc_topo_numa_of_cpuset; NULL: this process's binding, this machine only) on
 * @p topo: its NUMA node (-1 when the CPUs span nodes, or are not in the
 * topology), the network device nearest those CPUs (zc_topo_nearest_nic's
 * order, measured from the smallest object covering them; from the whole
 * machine when the binding is unknown) and that device's node. A name longer
 * than the field is cut (logged at debug). Errors: ZC_ERR_INVALID_ARG (NULL
 * argument, malformed @p cpulist), ZC_ERR_NO_MEMORY; an unknown binding is
 * not an error (the node is -1).
 */
zc_status_t zc_topo_facts(const zc_topo_t *topo, const char *cpulist, zc_topo_facts_t *facts_p);

/*
 * This process's facts, on this machine's topology (zc_topo_load_this of
 * @p xml_path, loaded at the first call and kept for the life of the process;
 * a later call with another path loads that one). Without hwloc, or when
 * hwloc cannot discover this machine (logged once, warn), the facts are
 * unknown and ZC_OK is returned. Errors: the file @p xml_path cannot be
 * loaded (as zc_topo_load's, logged with the path), ZC_ERR_NO_MEMORY. Thread
 * safe (one mutex around the load and the query).
 */
zc_status_t zc_topo_this_facts(const char *xml_path, zc_topo_facts_t *facts_p);

/*
 * The leader of a host whose @p n_local ranks have the facts @p facts (in
 * local rank order): the lowest local index whose NUMA node is known and is
 * its nearest network device's node, the rank that reaches the NIC without
 * crossing the inter-socket link; 0 when no rank is (nothing known, no NIC, no
 * rank on the NIC's node). Pure: every rank holding the same facts picks the
 * same leader. -1 when @p facts is NULL or @p n_local < 1.
 */
int zc_topo_pick_leader(const zc_topo_facts_t *facts, int n_local);

/*
 * Writes a rank's facts for logs into @p buf: "numa 0, nic mlx5_0:1 numa 0"
 * ("numa -, nic none" when unknown). ZC_ERR_BUFFER_TOO_SMALL when cut (@p buf
 * holds the cut text), ZC_ERR_INVALID_ARG for NULL or len 0.
 */
zc_status_t zc_topo_facts_format(const zc_topo_facts_t *facts, char *buf, size_t len);

/*
 * Writes one host's line for logs into @p buf: its @p n ranks (global numbers
 * @p ranks, in local order), their NUMA nodes, the NIC nearest them with its
 * node, and the leader (zc_topo_pick_leader over @p facts):
 *   "ranks 2 3; numa 0 1; nic eth1 numa 1; leader rank 3 (local 1)"
 * When the ranks name different NICs, each rank's, in local order:
 *   "...; nics mlx5_0:1 numa 0, eth1 numa 1; ..."
 * ZC_ERR_BUFFER_TOO_SMALL when cut (@p buf holds the cut line),
 * ZC_ERR_INVALID_ARG for NULL, n < 1 or len 0.
 */
zc_status_t zc_topo_format_host(const int *ranks, const zc_topo_facts_t *facts, int n, char *buf,
                                size_t len);

/*
 * This host's identity: "<hostname>/<16 hex digits>", NUL-padded to
 * ZC_TOPO_HOST_ID_LEN bytes, with the hostname cut to 46 characters. The hex
 * digits hash the full hostname, the kernel's boot id, /etc/machine-id and
 * this process's IPC namespace: containers with the same hostname on two
 * machines differ (boot ids differ), and so do containers on one machine that
 * cannot share memory (IPC namespaces differ). Stable for the life of a boot.
 * ZC_ERR_IO when the hostname cannot be read.
 */
zc_status_t zc_topo_host_id(char out[ZC_TOPO_HOST_ID_LEN]);

/*
 * The pure part of zc_topo_host_id: the identity of @p hostname on a machine
 * whose identifying bytes (boot id, machine id, namespace) are @p machine.
 * ZC_ERR_INVALID_ARG for a NULL or empty hostname.
 */
zc_status_t zc_topo_host_id_make(const char *hostname, const void *machine, size_t machine_len,
                                 char out[ZC_TOPO_HOST_ID_LEN]);

/*
 * Groups @p size ranks by host, from their identities: rank r's is the string
 * at @p ids + r * @p id_len (NUL-terminated or exactly id_len bytes). For
 * @p rank, writes its position among the ranks of its host (local ranks in
 * rank order), the number of ranks on its host, its host's index and the
 * number of hosts. Hosts are numbered in the order of their lowest rank, so
 * every rank computes the same numbering. @p node_of_rank, when not NULL,
 * receives @p size entries: the host index of every rank.
 * Errors: ZC_ERR_INVALID_ARG (bad sizes, rank out of range),
 * ZC_ERR_CORRUPT (an empty identity, naming its rank), ZC_ERR_NO_MEMORY.
 * O(size log size).
 */
zc_status_t zc_topo_group_hosts(const char *ids, size_t id_len, int size, int rank,
                                int *local_rank_p, int *local_size_p, int *node_index_p,
                                int *node_count_p, int *node_of_rank);

/*
 * zc_topo_group_hosts over the identities of every rank of @p bs, exchanged
 * with one allgather of ZC_TOPO_HOST_ID_LEN bytes: a collective call.
 * Bootstrap errors are returned as the provider reported them.
 */
zc_status_t zc_topo_local_ranks(zc_bootstrap_t *bs, int *local_rank_p, int *local_size_p,
                                int *node_index_p, int *node_count_p, int *node_of_rank);

#endif
