/*
 * transport/shm: segments of a host group. Creation and attachment (sizes checked, names
 * exclusive, unlink leaves the mappings), the layout (buffers aligned and disjoint, counters
 * shared between processes), and liveness: a peer that holds its slot is alive, one that
 * exited, was killed or closed the segment is not, in the same process or another. NUMA
 * placement: a rank's buffers get the policy and are touched, nobody else's, seen from every
 * mapping, from this process or another; refused nodes and bad arguments. (This machine may
 * have one NUMA node: the tests place on a node that has memory, read from the kernel.)
 */
#include "transport/shm/shm.h"

#include <criterion/criterion.h>

#include <errno.h>
#include <linux/mempolicy.h>
#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#define BUF_BYTES 4096

static char name[ZC_SHM_NAME_LEN];

static void setup(void)
{
    zc_shm_make_name(name);
}

static void teardown(void)
{
    zc_shm_unlink(name);
}

TestSuite(shm, .init = setup, .fini = teardown, .timeout = 30);

Test(shm, names_differ)
{
    char other[ZC_SHM_NAME_LEN];
    zc_shm_make_name(other);
    cr_assert_str_neq(name, other);
    cr_assert_eq(name[0], '/');
    cr_assert_null(strchr(name + 1, '/'), "a POSIX shm name has one slash: %s", name);
}

Test(shm, create_attach_share)
{
    zc_shm_t *a, *b;
    cr_assert_eq(zc_shm_create(name, 3, BUF_BYTES, &a), ZC_OK);
    cr_assert_eq(zc_shm_attach(name, 2, 3, BUF_BYTES, &b), ZC_OK);
    cr_assert_eq(zc_shm_buf_bytes(a), BUF_BYTES);
    /* buffers 64-byte aligned and disjoint */
    for (int s = 0; s < 3; s++)
        for (int w = 0; w < 2; w++) {
            unsigned char *p = zc_shm_buf(a, s, w);
            cr_assert_eq((uintptr_t)p % 64, 0);
            memset(p, 16 * s + w, BUF_BYTES);
        }
    for (int s = 0; s < 3; s++)
        for (int w = 0; w < 2; w++) {
            const unsigned char *p = zc_shm_buf(b, s, w);
            cr_assert_eq(p[0], 16 * s + w);
            cr_assert_eq(p[BUF_BYTES - 1], 16 * s + w);
        }
    atomic_store(&zc_shm_slot(a, 1)->written, 7);
    cr_assert_eq(atomic_load(&zc_shm_slot(b, 1)->written), 7);
    cr_assert_eq(atomic_load(&zc_shm_slot(b, 1)->consumed), 0);
    /* unlinked: no new attachment, the old ones still share */
    cr_assert_eq(zc_shm_unlink(name), ZC_OK);
    cr_assert_eq(zc_shm_unlink(name), ZC_OK, "an unlinked name is not an error");
    zc_shm_t *c = NULL;
    cr_assert_eq(zc_shm_attach(name, 1, 3, BUF_BYTES, &c), ZC_ERR_IO);
    cr_assert_null(c);
    atomic_store(&zc_shm_slot(b, 0)->consumed, 3);
    cr_assert_eq(atomic_load(&zc_shm_slot(a, 0)->consumed), 3);
    zc_shm_destroy(b);
    zc_shm_destroy(a);
    zc_shm_destroy(NULL);
}

Test(shm, refuses_wrong_sizes_and_duplicates)
{
    zc_shm_t *a, *b = NULL;
    cr_assert_eq(zc_shm_create(name, 2, BUF_BYTES, &a), ZC_OK);
    cr_assert_eq(zc_shm_create(name, 2, BUF_BYTES, &b), ZC_ERR_IO, "created twice");
    cr_assert_eq(zc_shm_attach(name, 1, 3, BUF_BYTES, &b), ZC_ERR_MISMATCH);
    cr_assert_eq(zc_shm_attach(name, 1, 2, 2 * BUF_BYTES, &b), ZC_ERR_MISMATCH);
    cr_assert_eq(zc_shm_attach(name, 2, 2, BUF_BYTES, &b), ZC_ERR_INVALID_ARG, "slot past the end");
    cr_assert_eq(zc_shm_attach(name, 0, 2, 0, &b), ZC_ERR_INVALID_ARG);
    cr_assert_null(b);
    zc_shm_destroy(a);
}

Test(shm, liveness_within_a_process)
{
    zc_shm_t *a, *b;
    cr_assert_eq(zc_shm_create(name, 2, BUF_BYTES, &a), ZC_OK);
    cr_assert_eq(zc_shm_peer_alive(a, 1), 0, "nobody holds slot 1 yet");
    cr_assert_eq(zc_shm_attach(name, 1, 2, BUF_BYTES, &b), ZC_OK);
    cr_assert_eq(zc_shm_peer_alive(a, 1), 1);
    cr_assert_eq(zc_shm_peer_alive(b, 0), 1);
    zc_shm_destroy(b);
    cr_assert_eq(zc_shm_peer_alive(a, 1), 0, "a closed slot is gone");
    zc_shm_destroy(a);
}

/* A child that attaches to slot 1, says so through @p ready, then waits for its end. */
static pid_t attach_child(volatile int *ready)
{
    pid_t pid = fork();
    if (pid == 0) {
        zc_shm_t *c;
        if (zc_shm_attach(name, 1, 2, BUF_BYTES, &c) != ZC_OK)
            _exit(1);
        *ready = 1;
        for (;;)
            pause();
    }
    cr_assert_gt(pid, 0);
    for (int i = 0; i < 5000 && !*ready; i++)
        usleep(1000);
    cr_assert(*ready, "the child did not attach");
    return pid;
}

Test(shm, liveness_across_processes)
{
    volatile int *ready =
        mmap(NULL, sizeof(int), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq((void *)ready, MAP_FAILED);
    zc_shm_t *a;
    cr_assert_eq(zc_shm_create(name, 2, BUF_BYTES, &a), ZC_OK);
    pid_t pid = attach_child(ready);
    cr_assert_eq(zc_shm_peer_alive(a, 1), 1, "an attached child is alive");
    /* stopped is still alive: the deadline, not the lock, finds a stall */
    kill(pid, SIGSTOP);
    cr_assert_eq(zc_shm_peer_alive(a, 1), 1, "a stopped child still holds its slot");
    kill(pid, SIGKILL);
    cr_assert_eq(waitpid(pid, NULL, 0), pid);
    cr_assert_eq(zc_shm_peer_alive(a, 1), 0, "a killed child's slot is free");
    zc_shm_destroy(a);
    munmap((void *)ready, sizeof(int));
}

/* ---- NUMA placement ------------------------------------------------------------------------- */

#define PLACE_BYTES ((size_t)64 << 10)

static size_t page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* Pages of [p, p + len) in memory. */
static size_t resident(void *p, size_t len)
{
    unsigned char v[256];
    size_t pages = len / page(), count = 0;
    cr_assert_leq(pages, sizeof(v));
    cr_assert_eq(mincore(p, len, v), 0, "%s", strerror(errno));
    for (size_t i = 0; i < pages; i++)
        count += v[i] & 1;
    return count;
}

/* The memory policy of the page at @p p: its mode, and the first word of its nodes. */
static int policy_of(void *p, unsigned long *nodes_p)
{
    unsigned long nodes[64] = {0}; /* 4096 nodes: more than any kernel's nr_node_ids */
    int mode = -1;
    cr_assert_eq(syscall(SYS_get_mempolicy, &mode, nodes, 8 * sizeof(nodes), p, MPOL_F_ADDR), 0,
                 "%s", strerror(errno));
    *nodes_p = nodes[0];
    return mode;
}

/* The NUMA node holding the (resident) page at @p p. */
static int node_of(void *p)
{
    int node = -1;
    cr_assert_eq(syscall(SYS_get_mempolicy, &node, NULL, 0, p, MPOL_F_NODE | MPOL_F_ADDR), 0, "%s",
                 strerror(errno));
    return node;
}

/* A node with memory: where this process's own fresh page went. */
static int node_with_memory(void)
{
    unsigned char *p =
        mmap(NULL, page(), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cr_assert_neq((void *)p, MAP_FAILED);
    p[0] = 1;
    int node = node_of(p);
    munmap(p, page());
    cr_assert_geq(node, 0);
    cr_assert_lt(node, 64, "the tests read one word of nodes");
    return node;
}

/* Slot @p slot's buffers, as one range (they are adjacent and whole pages). */
static void *slot_bufs(zc_shm_t *shm, int slot)
{
    unsigned char *first = zc_shm_buf(shm, slot, 0);
    cr_assert_eq((unsigned char *)zc_shm_buf(shm, slot, 1), first + PLACE_BYTES);
    return first;
}

/* Slot 1's pages, seen through @p a: all in memory, preferring @p node, and on it. */
static void assert_placed(zc_shm_t *a, int node)
{
    unsigned char *bufs = slot_bufs(a, 1);
    unsigned long nodes;
    cr_assert_eq(resident(bufs, 2 * PLACE_BYTES), 2 * PLACE_BYTES / page(), "touched by its owner");
    for (size_t off = 0; off < 2 * PLACE_BYTES; off += page()) {
        cr_assert_eq(policy_of(bufs + off, &nodes), MPOL_PREFERRED, "page at %zu", off);
        cr_assert_eq(nodes, 1ul << node, "page at %zu", off);
        cr_assert_eq(node_of(bufs + off), node, "page at %zu", off);
        cr_assert_eq(bufs[off], 0);
    }
}

Test(shm, buffers_are_whole_pages)
{
    zc_shm_t *a;
    cr_assert_eq(zc_shm_create(name, 3, 1000, &a), ZC_OK);
    for (int s = 0; s < 3; s++)
        for (int w = 0; w < 2; w++)
            cr_assert_eq((uintptr_t)zc_shm_buf(a, s, w) % page(), 0, "slot %d buffer %d", s, w);
    cr_assert_eq((unsigned char *)zc_shm_buf(a, 0, 1) - (unsigned char *)zc_shm_buf(a, 0, 0),
                 (ptrdiff_t)page(), "1000 bytes take a page");
    zc_shm_destroy(a);
}

Test(shm, place_sets_the_policy_and_touches_its_own_buffers_only)
{
    int node = node_with_memory();
    zc_shm_t *a, *b;
    unsigned long nodes;
    cr_assert_eq(zc_shm_create(name, 2, PLACE_BYTES, &a), ZC_OK);
    cr_assert_eq(zc_shm_attach(name, 1, 2, PLACE_BYTES, &b), ZC_OK);
    cr_assert_eq(resident(slot_bufs(a, 0), 2 * PLACE_BYTES), 0, "nothing touched yet");
    cr_assert_eq(resident(slot_bufs(a, 1), 2 * PLACE_BYTES), 0, "nothing touched yet");

    cr_assert_eq(zc_shm_place(b, node), ZC_OK);
    assert_placed(a, node); /* seen through the other rank's mapping */
    cr_assert_eq(resident(slot_bufs(a, 0), 2 * PLACE_BYTES), 0, "slot 0 is its owner's to touch");
    cr_assert_eq(policy_of(slot_bufs(a, 0), &nodes), MPOL_DEFAULT, "slot 0 keeps the default");
    zc_shm_destroy(b);
    zc_shm_destroy(a);
}

Test(shm, place_on_an_unknown_node_touches_only)
{
    zc_shm_t *a, *b;
    unsigned long nodes;
    cr_assert_eq(zc_shm_create(name, 2, PLACE_BYTES, &a), ZC_OK);
    cr_assert_eq(zc_shm_attach(name, 1, 2, PLACE_BYTES, &b), ZC_OK);
    cr_assert_eq(zc_shm_place(b, -1), ZC_OK);
    cr_assert_eq(resident(slot_bufs(a, 1), 2 * PLACE_BYTES), 2 * PLACE_BYTES / page());
    cr_assert_eq(policy_of(slot_bufs(a, 1), &nodes), MPOL_DEFAULT);
    cr_assert_eq(resident(slot_bufs(a, 0), 2 * PLACE_BYTES), 0);
    zc_shm_destroy(b);
    zc_shm_destroy(a);
}

Test(shm, place_refused_or_bad_arguments)
{
    zc_shm_t *a;
    unsigned long nodes;
    cr_assert_eq(zc_shm_create(name, 1, PLACE_BYTES, &a), ZC_OK);
    /* beyond any kernel's MAX_NUMNODES (1024 at most): refused, the pages still touched */
    cr_assert_eq(zc_shm_place(a, 4095), ZC_ERR_IO);
    cr_assert_eq(resident(slot_bufs(a, 0), 2 * PLACE_BYTES), 2 * PLACE_BYTES / page());
    cr_assert_eq(policy_of(slot_bufs(a, 0), &nodes), MPOL_DEFAULT);
    cr_assert_eq(zc_shm_place(a, -2), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_shm_place(a, 4096), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_shm_place(NULL, 0), ZC_ERR_INVALID_ARG);
    zc_shm_destroy(a);
}

Test(shm, place_from_another_process)
{
    int node = node_with_memory();
    zc_shm_t *a;
    cr_assert_eq(zc_shm_create(name, 2, PLACE_BYTES, &a), ZC_OK);
    pid_t pid = fork();
    if (pid == 0) {
        zc_shm_t *c;
        if (zc_shm_attach(name, 1, 2, PLACE_BYTES, &c) != ZC_OK || zc_shm_place(c, node) != ZC_OK)
            _exit(1);
        zc_shm_destroy(c);
        _exit(0);
    }
    cr_assert_gt(pid, 0);
    int wstatus = -1;
    cr_assert_eq(waitpid(pid, &wstatus, 0), pid);
    cr_assert(WIFEXITED(wstatus) && WEXITSTATUS(wstatus) == 0, "the child failed to place");
    assert_placed(a, node); /* the policy and the pages stay with the segment */
    zc_shm_destroy(a);
}
