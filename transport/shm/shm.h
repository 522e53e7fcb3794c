/*
 * Shared memory among the ranks of one host (the hierarchical all-reduce's
 * intra-host transport, collectives/hier.c): one POSIX shared-memory segment
 * per host group, created by its local rank 0 and opened by the others, then
 * unlinked at once, so that nothing is left in /dev/shm once every rank holds
 * it, whether the ranks exit or crash later.
 *
 * The segment holds one slot per local rank: two counters, each on a cache
 * line of its own (rounds this rank published, rounds it finished reading),
 * and two buffers of buf_bytes (rounds alternate between them). A rank writes
 * only its own slot's counters and buffers; the algorithm above decides the
 * meaning of a round. Counters are C11 atomics: release on publication,
 * acquire on the reads that wait for them.
 *
 * Liveness: every rank holds an open-file-description lock (F_OFD_SETLK) on
 * byte <slot> of the segment for as long as it has it open. The kernel drops
 * it when the process exits however it exits, so zc_shm_peer_alive tells a
 * dead peer (or one that closed the segment) from a live one with one fcntl,
 * across PID namespaces, and never blocks. A stalled peer still holds its
 * lock: its counters stop moving, which the caller's deadline catches.
 *
 * NUMA placement: a slot's two buffers are whole pages (the segment pads
 * them); zc_shm_place puts the calling rank's on its NUMA node. The counters
 * share pages with every slot's and are not placed.
 *
 * Thread safety: a rank uses its segment from one thread at a time.
 */
#ifndef ZC_TRANSPORT_SHM_H
#define ZC_TRANSPORT_SHM_H

#include <zipccl/zipccl_status.h>

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

/* Longest segment name, NUL included ("/zipccl-<pid>-<...>"). */
#define ZC_SHM_NAME_LEN 64

typedef struct zc_shm zc_shm_t;

/* One rank's counters, each on its own cache line (no false sharing between writers). */
typedef struct zc_shm_slot {
    _Atomic uint64_t written; /* rounds published: round k's data is in buffer k % 2 */
    _Atomic uint64_t beat;    /* moved by the rank while it works away from the segment */
    char pad_written[48];
    _Atomic uint64_t consumed; /* rounds this rank has finished reading from every slot */
    char pad_consumed[56];
} zc_shm_slot_t;

/*
 * Writes a segment name unique on this host into @p name: the process id, a
 * per-process counter and 32 random bits ("/zipccl-1234-0-9f3a01bc").
 */
void zc_shm_make_name(char name[ZC_SHM_NAME_LEN]);

/*
 * Creates the segment @p name (exclusively: an existing one is an error) for
 * @p nslots ranks with two buffers of @p buf_bytes each, maps it and takes
 * slot 0. Errors, logged with the name and the cause: ZC_ERR_IO (shm_open,
 * ftruncate, mmap or the lock failed: /dev/shm missing or full),
 * ZC_ERR_INVALID_ARG, ZC_ERR_NO_MEMORY.
 */
zc_status_t zc_shm_create(const char *name, int nslots, size_t buf_bytes, zc_shm_t **shm_p);

/*
 * Opens the segment @p name that another rank created with the same @p nslots
 * and @p buf_bytes and takes slot @p slot. ZC_ERR_IO when it cannot be opened
 * or mapped, ZC_ERR_MISMATCH when its header says other sizes (both logged).
 */
zc_status_t zc_shm_attach(const char *name, int slot, int nslots, size_t buf_bytes,
                          zc_shm_t **shm_p);

/* Removes the name @p name (the mappings stay); ZC_OK when it is already gone. */
zc_status_t zc_shm_unlink(const char *name);

/* Unmaps and closes (which drops this rank's lock); NULL is allowed. */
void zc_shm_destroy(zc_shm_t *shm);

/* The counters of slot @p slot. */
zc_shm_slot_t *zc_shm_slot(zc_shm_t *shm, int slot);

/* Buffer @p which (0 or 1) of slot @p slot: buf_bytes, page aligned. */
void *zc_shm_buf(zc_shm_t *shm, int slot, int which);

/* The buffer size the segment was made with. */
size_t zc_shm_buf_bytes(const zc_shm_t *shm);

/*
 * Places this rank's slot buffers (both) on NUMA node @p numa (an OS index, as
 * zc_topo_facts_t.numa): the segment's memory policy for those pages becomes
 * "preferred @p numa" (mbind, MPOL_PREFERRED: another node when that one is
 * full; the kernel keeps the policy with the segment, whichever rank faults a
 * page in), then this rank writes every page once (first touch: allocated
 * now, there, and no all-reduce pays the page faults). @p numa -1 (unknown):
 * the first touch only, on the node this thread runs on. Writes zeros: call it
 * before any rank uses the slot (collectives/hier.c: at creation). Errors:
 * ZC_ERR_INVALID_ARG (NULL, @p numa below -1 or above 4095), ZC_ERR_IO when the
 * kernel refuses the policy (no such node, no NUMA support; logged at warn;
 * the pages are still touched: a failed placement costs locality, nothing else).
 */
zc_status_t zc_shm_place(zc_shm_t *shm, int numa);

/*
 * 1 when the rank of slot @p slot still has the segment open (holds its lock),
 * 0 when it exited or closed it. A system call; callers poll it rarely.
 */
int zc_shm_peer_alive(zc_shm_t *shm, int slot);

#endif
