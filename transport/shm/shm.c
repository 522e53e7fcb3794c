/* Shared-memory segments of a host group (shm.h). */
#include "transport/shm/shm.h"

#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/mempolicy.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#define SHM_MAGIC UINT64_C(0x7a63636c73686d31) /* "zccl" "shm1" */
#define SHM_ALIGN 64
/* Highest NUMA node zc_shm_place takes: the kernel's MAX_NUMNODES is at most 1024. */
#define SHM_MAX_NUMA 4095
#define SHM_LONG_BITS (8 * sizeof(unsigned long))

/* The segment's first bytes: what the creator made it for. */
typedef struct shm_header {
    uint64_t magic;
    uint64_t nslots;
    uint64_t buf_bytes;
    char pad[SHM_ALIGN - 24];
} shm_header_t;

struct zc_shm {
    int fd;
    void *base;
    size_t len;
    int nslots;
    int slot;
    size_t buf_bytes;
    size_t buf_stride; /* buf_bytes rounded up to pages: a slot's buffers are whole pages */
    zc_shm_slot_t *slots;
    unsigned char *data;
};

_Static_assert(sizeof(zc_shm_slot_t) == 2 * SHM_ALIGN, "one cache line per counter");
_Static_assert(sizeof(shm_header_t) == SHM_ALIGN, "the slots start aligned");

static size_t round_up(size_t n, size_t align)
{
    return (n + align - 1) / align * align;
}

static size_t page_bytes(void)
{
    long page = sysconf(_SC_PAGESIZE);
    return page > 0 ? (size_t)page : 4096;
}

/* The buffers start on a page, each a whole number of pages: zc_shm_place binds pages. */
static size_t data_offset(int nslots)
{
    return round_up(sizeof(shm_header_t) + (size_t)nslots * sizeof(zc_shm_slot_t), page_bytes());
}

static size_t segment_len(int nslots, size_t buf_bytes)
{
    return data_offset(nslots) + (size_t)nslots * 2 * round_up(buf_bytes, page_bytes());
}

void zc_shm_make_name(char name[ZC_SHM_NAME_LEN])
{
    static _Atomic unsigned counter;
    uint32_t nonce = 0;

    if (getrandom(&nonce, sizeof(nonce), GRND_NONBLOCK) != (ssize_t)sizeof(nonce))
        nonce = (uint32_t)getpid() * 2654435761u ^ (uint32_t)(uintptr_t)&nonce;
    snprintf(name, ZC_SHM_NAME_LEN, "/zipccl-%ld-%u-%08x", (long)getpid(),
             atomic_fetch_add(&counter, 1), nonce);
}

/* Locks byte @p slot for as long as this open file description lives. */
static int lock_slot(int fd, int slot)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1};
    return fcntl(fd, F_OFD_SETLK, &fl);
}

/* Maps @p fd (@p len bytes) and fills @p shm; logs and returns ZC_ERR_IO on failure. */
static zc_status_t map(zc_shm_t *shm, const char *name, size_t len)
{
    shm->base = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_SHARED, shm->fd, 0);
    if (shm->base == MAP_FAILED) {
        shm->base = NULL;
        ZC_ERROR("shm %s: cannot map %zu bytes: %s", name, len, strerror(errno));
        return ZC_ERR_IO;
    }
    shm->len = len;
    shm->slots = (zc_shm_slot_t *)((unsigned char *)shm->base + sizeof(shm_header_t));
    shm->data = (unsigned char *)shm->base + data_offset(shm->nslots);
    return ZC_OK;
}

static zc_status_t open_common(const char *name, int slot, int nslots, size_t buf_bytes, int create,
                               zc_shm_t **shm_p)
{
    zc_status_t status = ZC_ERR_IO;

    if (!name || !shm_p || nslots < 1 || slot < 0 || slot >= nslots || buf_bytes == 0)
        return ZC_ERR_INVALID_ARG;
    zc_shm_t *shm = calloc(1, sizeof(*shm));
    if (!shm)
        return ZC_ERR_NO_MEMORY;
    shm->nslots = nslots;
    shm->slot = slot;
    shm->buf_bytes = buf_bytes;
    shm->buf_stride = round_up(buf_bytes, page_bytes());
    size_t len = segment_len(nslots, buf_bytes);
    shm->fd = shm_open(name, O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0), 0600);
    if (shm->fd < 0) {
        ZC_ERROR("shm %s: cannot %s it: %s", name, create ? "create" : "open", strerror(errno));
        goto err_free;
    }
    if (create && ftruncate(shm->fd, (off_t)len) != 0) {
        ZC_ERROR("shm %s: cannot size it to %zu bytes (is /dev/shm full?): %s", name, len,
                 strerror(errno));
        goto err_close;
    }
    if (!create) {
        struct stat st;
        if (fstat(shm->fd, &st) != 0 || (size_t)st.st_size != len) {
            ZC_ERROR("shm %s: holds %lld bytes where %d slots of 2 x %zu bytes take %zu", name,
                     (long long)st.st_size, nslots, buf_bytes, len);
            status = ZC_ERR_MISMATCH;
            goto err_close;
        }
    }
    ZC_CHECK_GOTO(map(shm, name, len), status, err_close);
    shm_header_t *h = shm->base;
    if (create) {
        h->nslots = (uint64_t)nslots;
        h->buf_bytes = buf_bytes;
        for (int i = 0; i < nslots; i++) {
            atomic_init(&shm->slots[i].written, 0);
            atomic_init(&shm->slots[i].consumed, 0);
        }
        atomic_thread_fence(memory_order_release);
        h->magic = SHM_MAGIC;
    } else if (h->magic != SHM_MAGIC || h->nslots != (uint64_t)nslots ||
               h->buf_bytes != buf_bytes) {
        ZC_ERROR("shm %s: made for %llu slots of 2 x %llu bytes, opened for %d of 2 x %zu", name,
                 (unsigned long long)h->nslots, (unsigned long long)h->buf_bytes, nslots,
                 buf_bytes);
        status = ZC_ERR_MISMATCH;
        goto err_unmap;
    }
    if (lock_slot(shm->fd, slot) != 0) {
        ZC_ERROR("shm %s: cannot lock slot %d: %s", name, slot, strerror(errno));
        goto err_unmap;
    }
    *shm_p = shm;
    return ZC_OK;

err_unmap:
    munmap(shm->base, shm->len);
err_close:
    close(shm->fd);
    if (create)
        shm_unlink(name);
err_free:
    free(shm);
    return status;
}

zc_status_t zc_shm_create(const char *name, int nslots, size_t buf_bytes, zc_shm_t **shm_p)
{
    return open_common(name, 0, nslots, buf_bytes, 1, shm_p);
}

zc_status_t zc_shm_attach(const char *name, int slot, int nslots, size_t buf_bytes,
                          zc_shm_t **shm_p)
{
    return open_common(name, slot, nslots, buf_bytes, 0, shm_p);
}

zc_status_t zc_shm_unlink(const char *name)
{
    if (shm_unlink(name) == 0 || errno == ENOENT)
        return ZC_OK;
    ZC_ERROR("shm %s: cannot unlink it: %s", name, strerror(errno));
    return ZC_ERR_IO;
}

void zc_shm_destroy(zc_shm_t *shm)
{
    if (!shm)
        return;
    if (shm->base)
        munmap(shm->base, shm->len);
    if (shm->fd >= 0)
        close(shm->fd);
    free(shm);
}

zc_shm_slot_t *zc_shm_slot(zc_shm_t *shm, int slot)
{
    return &shm->slots[slot];
}

void *zc_shm_buf(zc_shm_t *shm, int slot, int which)
{
    return shm->data + ((size_t)slot * 2 + (size_t)which) * shm->buf_stride;
}

size_t zc_shm_buf_bytes(const zc_shm_t *shm)
{
    return shm->buf_bytes;
}

zc_status_t zc_shm_place(zc_shm_t *shm, int numa)
{
    zc_status_t status = ZC_OK;

    if (!shm || numa < -1 || numa > SHM_MAX_NUMA)
        return ZC_ERR_INVALID_ARG;
    unsigned char *first = zc_shm_buf(shm, shm->slot, 0);
    size_t len = 2 * shm->buf_stride;
    if (numa >= 0) {
        unsigned long nodes[SHM_MAX_NUMA / SHM_LONG_BITS + 1] = {0};
        nodes[(size_t)numa / SHM_LONG_BITS] = 1ul << ((size_t)numa % SHM_LONG_BITS);
        /* the kernel reads maxnode - 1 bits; MPOL_PREFERRED: another node when this one is full
         * (MPOL_BIND would fail the page fault, a SIGBUS); the policy stays with the segment's
         * pages, whoever faults them in */
        if (syscall(SYS_mbind, first, len, MPOL_PREFERRED, nodes, (unsigned long)numa + 2,
                    MPOL_MF_MOVE) != 0) {
            ZC_WARN("shm: cannot place slot %d's buffers (%zu bytes) on numa node %d: %s; "
                    "they stay where this rank first touches them",
                    shm->slot, len, numa, strerror(errno));
            status = ZC_ERR_IO;
        }
    }
    /* first touch, by the owner, before any rank reads the slot: the pages are allocated now,
     * on the node of the policy (or this thread's), and no call pays their faults */
    memset(first, 0, len);
    return status;
}

int zc_shm_peer_alive(zc_shm_t *shm, int slot)
{
    struct flock fl = {.l_type = F_WRLCK, .l_whence = SEEK_SET, .l_start = slot, .l_len = 1};

    if (fcntl(shm->fd, F_OFD_GETLK, &fl) != 0)
        return 1; /* cannot tell: the deadline decides */
    return fl.l_type != F_UNLCK;
}
