/*
 * Process-wide state for net, CollNet and the tuner alike: zipccl's log
 * through NCCL's logger, the ZIPCCL_* configuration, and the device list.
 *
 * Reference counted: every plugin context (net, CollNet, tuner; one per
 * communicator since v11) holds one from its init to its finalize. The first
 * reference loads the state, the last one frees it, so that the state after
 * NCCL's last finalize is the state of a fresh load: with
 * NCCL_NET_PLUGIN_REF_COUNT=0 NCCL then dlcloses the library (nothing may stay
 * allocated, it would leak at every reload), and when something else keeps the
 * library mapped (the tuner's own dlopen, NCCL_NET_PLUGIN_REF_COUNT=1) the next
 * communicator's init loads it again, exactly as after a reload.
 *
 * Devices are network interfaces (getifaddrs), filtered by ZIPCCL_NET_IFNAME:
 *   ""           every interface that is up with an IPv4 or global IPv6
 *                address; loopback only when there is no other
 *   "eth,ens1f0" interfaces whose name starts with one of these
 *   "^docker,lo" every interface but those starting with one of these
 * An interface is one device with one address: its first IPv4 address, else
 * its first IPv6 address that is not link-local (a link-local address needs a
 * scope that the 128-byte NCCL handle would have to carry for nothing).
 * Devices are ordered by interface index, which the kernel keeps for the
 * life of the interface, so that every process of a host numbers them alike
 * and net device i is CollNet device i.
 */
#include "common/log.h"
#include "plugin/nccl/plugin.h"

#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <net/if.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ZC_NCCL_MAX_DEVS 64
#define ZC_NCCL_DEFAULT_SPEED 10000 /* Mbit/s, when sysfs does not say (loopback, some VMs) */

typedef struct nccl_dev {
    char name[IF_NAMESIZE];
    char *pci_path; /* realpath of /sys/class/net/<name>/device, or NULL */
    unsigned ifindex;
    int speed;
    uint64_t guid;
    struct sockaddr_storage addr; /* port 0 */
    unsigned addr_len;
} nccl_dev_t;

static pthread_mutex_t setup_lock = PTHREAD_MUTEX_INITIALIZER;
static int setup_refs; /* live contexts; the state below is loaded while it is > 0 */
static ncclDebugLogger_t nccl_logger;
static zc_config_t setup_config;
static nccl_dev_t devs[ZC_NCCL_MAX_DEVS];
static int ndevs;

static void nccl_log_sink(void *arg, zc_log_level_t level, const char *file, int line,
                          const char *msg)
{
    ncclDebugLogger_t logger = __atomic_load_n(&nccl_logger, __ATOMIC_ACQUIRE);

    if (!logger)
        return;
    if (level <= ZC_LOG_WARN)
        logger(NCCL_LOG_WARN, NCCL_ALL, file, line, "zipccl: %s", msg);
    else
        logger(NCCL_LOG_INFO, NCCL_NET, file, line, "zipccl: %s", msg);
}

/* ZIPCCL_NET_IFNAME: does interface @p name qualify? (@p spec without a leading '^') */
static int ifname_listed(const char *spec, const char *name)
{
    const char *p = spec;

    while (*p) {
        size_t len = strcspn(p, ",");
        if (len > 0 && strncmp(name, p, len) == 0)
            return 1;
        p += len;
        if (*p == ',')
            p++;
    }
    return 0;
}

static int speed_of(const char *name)
{
    char path[PATH_MAX];
    int speed = -1;

    snprintf(path, sizeof(path), "/sys/class/net/%.*s/speed", IF_NAMESIZE, name);
    FILE *f = fopen(path, "r");
    if (f) {
        if (fscanf(f, "%d", &speed) != 1)
            speed = -1;
        fclose(f);
    }
    return speed > 0 ? speed : ZC_NCCL_DEFAULT_SPEED;
}

/* FNV-1a of the name; the low byte is the device index so that guids never collide. */
static uint64_t guid_of(const char *name, int dev)
{
    uint64_t h = 0xcbf29ce484222325ull;

    for (const char *p = name; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ull;
    return (h & ~0xffull) | (uint64_t)dev;
}

/* The address an interface offers: 2 for IPv4, 1 for a global IPv6 one, 0 for none. */
static int addr_rank(const struct sockaddr *sa)
{
    if (!sa)
        return 0;
    if (sa->sa_family == AF_INET)
        return 2;
    if (sa->sa_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)sa)->sin6_addr;
        return IN6_IS_ADDR_LINKLOCAL(a) ? 0 : 1;
    }
    return 0;
}

static int dev_compare(const void *a, const void *b)
{
    const nccl_dev_t *x = a, *y = b;
    return x->ifindex < y->ifindex ? -1 : x->ifindex > y->ifindex;
}

/*
 * What an empty ZIPCCL_NET_IFNAME means: container and VM bridges carry the same
 * address on every host (172.17.0.1, 192.168.122.1), so a peer told to connect
 * there reaches its own bridge; NCCL's socket transport leaves them out too.
 */
#define ZC_NCCL_IFNAME_DEFAULT "^docker,virbr"

/* Fills devs[] from getifaddrs; 0 devices is not an error here. */
static zc_status_t discover_devices(const char *spec)
{
    struct ifaddrs *list;
    nccl_dev_t found[ZC_NCCL_MAX_DEVS];
    int loopback[ZC_NCCL_MAX_DEVS];
    int best[ZC_NCCL_MAX_DEVS];
    int nfound = 0;
    if (!spec[0])
        spec = ZC_NCCL_IFNAME_DEFAULT;
    int exclude = spec[0] == '^';
    const char *names = exclude ? spec + 1 : spec;

    if (getifaddrs(&list) != 0) {
        ZC_ERROR("net: listing the network interfaces failed (getifaddrs): %s", strerror(errno));
        return ZC_ERR_IO;
    }
    for (struct ifaddrs *ifa = list; ifa; ifa = ifa->ifa_next) {
        int rank = addr_rank(ifa->ifa_addr);
        if (rank == 0 || !(ifa->ifa_flags & IFF_UP))
            continue;
        if (ifname_listed(names, ifa->ifa_name) == exclude)
            continue;
        int i = 0;
        while (i < nfound && strcmp(found[i].name, ifa->ifa_name) != 0)
            i++;
        if (i == nfound) {
            if (nfound == ZC_NCCL_MAX_DEVS)
                continue;
            memset(&found[i], 0, sizeof(found[i]));
            snprintf(found[i].name, sizeof(found[i].name), "%s", ifa->ifa_name);
            found[i].ifindex = if_nametoindex(ifa->ifa_name);
            loopback[i] = !!(ifa->ifa_flags & IFF_LOOPBACK);
            best[i] = 0;
            nfound++;
        }
        if (rank > best[i]) {
            socklen_t len = ifa->ifa_addr->sa_family == AF_INET ? sizeof(struct sockaddr_in)
                                                                : sizeof(struct sockaddr_in6);
            memcpy(&found[i].addr, ifa->ifa_addr, len);
            found[i].addr_len = len;
            best[i] = rank;
        }
    }
    freeifaddrs(list);

    /* loopback only when it was asked for by name, or when nothing else is there */
    int others = 0;
    for (int i = 0; i < nfound; i++)
        others += !loopback[i];
    ndevs = 0;
    for (int i = 0; i < nfound; i++) {
        if (loopback[i] && others > 0 && exclude)
            continue;
        devs[ndevs++] = found[i];
    }
    qsort(devs, ndevs, sizeof(devs[0]), dev_compare);

    for (int d = 0; d < ndevs; d++) {
        nccl_dev_t *dev = &devs[d];
        char path[PATH_MAX];
        if (dev->addr.ss_family == AF_INET)
            ((struct sockaddr_in *)&dev->addr)->sin_port = 0;
        else
            ((struct sockaddr_in6 *)&dev->addr)->sin6_port = 0;
        dev->speed = speed_of(dev->name);
        dev->guid = guid_of(dev->name, d);
        snprintf(path, sizeof(path), "/sys/class/net/%.*s/device", IF_NAMESIZE, dev->name);
        dev->pci_path = realpath(path, NULL); /* virtual interfaces have none */
        ZC_INFO("net: device %d is %s (speed %d Mbit/s%s%s)", d, dev->name, dev->speed,
                dev->pci_path ? ", " : "", dev->pci_path ? dev->pci_path : "");
    }
    return ZC_OK;
}

static ncclResult_t setup_once(void)
{
    zc_config_t cfg;
    zc_status_t status = zc_config_load(NULL, &cfg);

    if (status != ZC_OK)
        return zc_nccl_result(status); /* logged, naming the variable */
    status = zc_config_apply(&cfg);
    if (status != ZC_OK)
        return zc_nccl_result(status);
    setup_config = cfg;

    status = discover_devices(cfg.net_ifname);
    if (status != ZC_OK)
        return zc_nccl_result(status);
    if (ndevs == 0) {
        ZC_ERROR("net: no network interface is up with an IP address%s%s%s",
                 cfg.net_ifname[0] ? " among ZIPCCL_NET_IFNAME=\"" : "", cfg.net_ifname,
                 cfg.net_ifname[0] ? "\"" : "");
        return ncclSystemError;
    }
    return ncclSuccess;
}

static void free_devices(void)
{
    for (int d = 0; d < ndevs; d++) {
        free(devs[d].pci_path);
        devs[d].pci_path = NULL;
    }
    ndevs = 0;
}

ncclResult_t zc_nccl_setup(ncclDebugLogger_t logger)
{
    ncclResult_t result = ncclSuccess;

    pthread_mutex_lock(&setup_lock);
    /* NCCL hands every init the same logger; the first one that is not NULL wins */
    if (logger && !nccl_logger) {
        __atomic_store_n(&nccl_logger, logger, __ATOMIC_RELEASE);
        zc_log_set_sink(nccl_log_sink, NULL);
    }
    if (setup_refs == 0) {
        result = setup_once();
        if (result != ncclSuccess)
            free_devices(); /* a later init tries again, as NCCL does after a reload */
    }
    if (result == ncclSuccess)
        setup_refs++;
    pthread_mutex_unlock(&setup_lock);
    return result;
}

void zc_nccl_release(void)
{
    pthread_mutex_lock(&setup_lock);
    if (setup_refs > 0 && --setup_refs == 0)
        free_devices();
    pthread_mutex_unlock(&setup_lock);
}

const zc_config_t *zc_nccl_config(void)
{
    int ok;

    pthread_mutex_lock(&setup_lock);
    ok = setup_refs > 0;
    pthread_mutex_unlock(&setup_lock);
    return ok ? &setup_config : NULL;
}

int zc_nccl_ndevs(void)
{
    int n;

    pthread_mutex_lock(&setup_lock);
    n = setup_refs > 0 ? ndevs : 0;
    pthread_mutex_unlock(&setup_lock);
    return n;
}

ncclResult_t zc_nccl_properties(int dev, ncclNetProperties_v12_t *props)
{
    if (!props || dev < 0 || dev >= zc_nccl_ndevs())
        return ncclInternalError;

    const nccl_dev_t *d = &devs[dev];
    memset(props, 0, sizeof(*props));
    props->name = (char *)d->name;
    props->pciPath = d->pci_path;
    props->guid = d->guid;
    props->ptrSupport = NCCL_PTR_HOST;
    props->regIsGlobal = 0;
    props->forceFlush = 0;
    props->speed = d->speed;
    props->port = 0;
    props->latency = 0;
    props->maxComms = 65536;
    props->maxRecvs = 1;
    props->netDeviceType = NCCL_NET_DEVICE_HOST;
    props->netDeviceVersion = 0;
    props->vProps.ndevs = 1;
    props->vProps.devs[0] = dev;
    props->maxP2pBytes = NCCL_MAX_NET_SIZE_BYTES;
    props->maxCollBytes = NCCL_MAX_NET_SIZE_BYTES;
    props->maxMultiRequestSize = 1; /* NCCL 2.30 core never reads it; 1 as its own plugins */
    /* one host NIC per device, no rail or plane NCCL could pair NICs by (0 would be an id) */
    props->railId = NCCL_NET_ID_UNDEF;
    props->planeId = NCCL_NET_ID_UNDEF;
    return ncclSuccess;
}

ncclResult_t zc_nccl_device_addr(int dev, struct sockaddr_storage *addr, unsigned *len_p)
{
    if (!addr || !len_p || dev < 0 || dev >= zc_nccl_ndevs())
        return ncclInternalError;
    memcpy(addr, &devs[dev].addr, sizeof(*addr));
    *len_p = devs[dev].addr_len;
    return ncclSuccess;
}
