/*
 * transport/shm: segments of a host group. Creation and attachment (sizes checked, names
 * exclusive, unlink leaves the mappings), the layout (buffers aligned and disjoint, counters
 * shared between processes), and liveness: a peer that holds its slot is alive, one that
 * exited, was killed or closed the segment is not, in the same process or another.
 */
#include "transport/shm/shm.h"

#include <criterion/criterion.h>

#include <signal.h>
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
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
