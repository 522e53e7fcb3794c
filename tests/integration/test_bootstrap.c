/*
 * The tcp bootstrap across processes: allgather, broadcast and barrier with every
 * launcher convention for 2, 3, 4 and 8 ranks; a root that starts late or never;
 * strangers, a duplicate rank, mismatched lengths; a rank killed mid-allgather;
 * hostile processes on the same host, with and without ZIPCCL_JOB_SECRET; a
 * member announcing a 1 TiB UCX worker address.
 *
 * Usage: test_bootstrap_mp CASE. Exits 0 when the case passed; otherwise the
 * harness or the failing check says why on stderr.
 */
#include "harness.h"
#include "rank_check.h"

#include "common/config.h"
#include "common/log.h"
#include "common/timer.h"
#include "transport/bootstrap/sock.h"
#include "transport/bootstrap/tcp.h"
#include "transport/bootstrap/wire.h"
#include "transport/ucx/ucx.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <inttypes.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static void rank_setup(int rank)
{
    my_rank = rank;
    logged[0] = '\0';
    zc_log_set_sink(capture_sink, NULL);
}

static int logged_has(const char *text)
{
    return strstr(logged, text) != NULL;
}

static void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - (double)(time_t)s) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static double elapsed_s(uint64_t start)
{
    return (double)(zc_time_ns() - start) / 1e9;
}

static int root_port(void)
{
    const char *root = zc_harness_root();
    const char *colon = root ? strrchr(root, ':') : NULL;
    return colon ? atoi(colon + 1) : -1;
}

/* Creates the bootstrap the way an application would: configuration, then the launcher. */
static zc_status_t create_from_env(zc_bootstrap_t **bs_p)
{
    zc_config_t cfg;
    zc_harness_step("config");
    zc_status_t status = zc_config_load(NULL, &cfg);
    if (status != ZC_OK)
        return status;
    zc_harness_step("create");
    return zc_bootstrap_tcp_create(&cfg, NULL, bs_p);
}

static uint8_t pattern(int rank, size_t len, size_t j)
{
    return (uint8_t)(rank * 31 + (int)(j * 7) + (int)len);
}

/* ---- collectives --------------------------------------------------------------------------- */

static int exercise(zc_bootstrap_t *bs, int rank, int size)
{
    static const size_t lens[] = {0, 1, 7, 4096, 200000};
    zc_status_t status;

    CHECK(bs->rank == rank && bs->size == size, "bootstrap says rank %d of %d", bs->rank, bs->size);
    for (size_t i = 0; i < ZC_ARRAY_SIZE(lens); i++) {
        size_t len = lens[i];
        uint8_t *mine = malloc(len + 1), *all = malloc(len * (size_t)size + 1);
        CHECK(mine && all, "out of memory");
        for (size_t j = 0; j < len; j++)
            mine[j] = pattern(rank, len, j);
        memset(all, 0xee, len * (size_t)size);
        zc_harness_step("allgather of %zu bytes", len);
        status = zc_bootstrap_allgather(bs, mine, len, all);
        CHECK(status == ZC_OK, "allgather of %zu bytes: %s", len, zc_status_string(status));
        for (int r = 0; r < size; r++) {
            for (size_t j = 0; j < len; j++)
                CHECK(all[(size_t)r * len + j] == pattern(r, len, j),
                      "allgather of %zu bytes: byte %zu of rank %d is %u, expected %u", len, j, r,
                      all[(size_t)r * len + j], pattern(r, len, j));
        }
        free(mine);
        free(all);
    }
    for (int root = 0; root < size; root++) {
        uint8_t buf[1000];
        for (size_t j = 0; j < sizeof(buf); j++)
            buf[j] = rank == root ? pattern(root, sizeof(buf), j) : 0xee;
        zc_harness_step("broadcast from %d", root);
        status = zc_bootstrap_broadcast(bs, buf, sizeof(buf), root);
        CHECK(status == ZC_OK, "broadcast from %d: %s", root, zc_status_string(status));
        for (size_t j = 0; j < sizeof(buf); j++)
            CHECK(buf[j] == pattern(root, sizeof(buf), j),
                  "broadcast from %d: byte %zu is %u, expected %u", root, j, buf[j],
                  pattern(root, sizeof(buf), j));
    }
    for (int i = 0; i < 5; i++) {
        zc_harness_step("barrier %d", i);
        status = zc_bootstrap_barrier(bs);
        CHECK(status == ZC_OK, "barrier %d: %s", i, zc_status_string(status));
    }
    return 0;
}

static int collectives_rank(int rank, int size, void *arg)
{
    double delay_root_s = arg ? *(double *)arg : 0;
    zc_bootstrap_t *bs = NULL;
    rank_setup(rank);
    if (rank == 0 && delay_root_s > 0) {
        zc_harness_step("sleeping before create");
        sleep_s(delay_root_s);
    }
    zc_status_t status = create_from_env(&bs);
    CHECK(status == ZC_OK, "create: %s", zc_status_string(status));
    int rc = exercise(bs, rank, size);
    zc_bootstrap_destroy(bs);
    return rc;
}

static int case_collectives(zc_harness_env_style_t style)
{
    static const int sizes[] = {2, 3, 4, 8};
    int failed = 0;
    for (size_t i = 0; i < ZC_ARRAY_SIZE(sizes); i++) {
        zc_harness_opts_t o = {.nranks = sizes[i], .deadline_s = 30, .env_style = style};
        uint64_t start = zc_time_ns();
        int rc = zc_harness_run(&o, collectives_rank, NULL);
        fprintf(stderr, "%d ranks: %s in %.2f s\n", sizes[i], rc ? "FAILED" : "ok",
                elapsed_s(start));
        failed |= rc != 0;
    }
    return failed;
}

static int case_late_root(void)
{
    double delay = 1.0;
    zc_harness_opts_t o = {.nranks = 4, .deadline_s = 30};
    return zc_harness_run(&o, collectives_rank, &delay) != 0;
}

/* ---- a root that never comes ---------------------------------------------------------------- */

static int root_absent_rank(int rank, int size, void *arg)
{
    zc_bootstrap_t *bs = NULL;
    rank_setup(rank);
    if (rank == 0)
        return 0; /* never listens */
    uint64_t start = zc_time_ns();
    zc_status_t status = create_from_env(&bs);
    double t = elapsed_s(start);
    char where[64];
    snprintf(where, sizeof(where), "at %s within 1 s", zc_harness_root());
    CHECK(status == ZC_ERR_TIMEOUT, "create: %s", zc_status_string(status));
    CHECK(logged_has("could not connect to rank 0") && logged_has(where),
          "the error names neither the root nor the timeout: %s", logged);
    CHECK(t >= 0.9 && t < 3, "gave up after %.2f s, ZIPCCL_TIMEOUT_S is 1", t);
    return FAILED_AS_EXPECTED;
}

static int case_root_absent(void)
{
    char *const env[] = {"ZIPCCL_TIMEOUT_S=1", NULL};
    zc_harness_opts_t o = {.nranks = 3,
                           .deadline_s = 20,
                           .expect_fail_mask = 0x6,
                           .expect_fail_status = FAILED_AS_EXPECTED,
                           .env = env};
    return zc_harness_run(&o, root_absent_rank, NULL) != 0;
}

/* ---- strangers ------------------------------------------------------------------------------- */

/* Shared by the ranks of one run (mapped before the fork). */
typedef struct shared {
    volatile int strangers_done;
    volatile int job_done;
    volatile int ready[ZC_HARNESS_MAX_RANKS];
} shared_t;

static shared_t *shared;

static int wait_until(volatile int *flag, int value, double timeout_s)
{
    uint64_t end = zc_time_ns() + (uint64_t)(timeout_s * 1e9);
    while (*flag < value) {
        if (zc_time_ns() > end)
            return -1;
        sleep_s(0.01);
    }
    return 0;
}

static int raw_connect(int port, double timeout_s)
{
    uint64_t end = zc_time_ns() + (uint64_t)(timeout_s * 1e9);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    while (zc_time_ns() < end) {
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0)
            return fd;
        if (fd >= 0)
            close(fd);
        sleep_s(0.05);
    }
    return -1;
}

/* Waits until the other side closes @p fd; 0 if it did within @p timeout_s. */
static int wait_closed(int fd, double timeout_s)
{
    uint64_t end = zc_time_ns() + (uint64_t)(timeout_s * 1e9);
    char buf[512];
    while (zc_time_ns() < end) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 50) > 0) {
            ssize_t n = recv(fd, buf, sizeof(buf), 0);
            if (n <= 0)
                return 0;
        }
    }
    return -1;
}

/* Ranks 0..2 are the job (size 3); rank 3 is a process of another job, rank 4 not ours at all. */
static int stranger_rank(int rank, int size, void *arg)
{
    zc_bootstrap_t *bs = NULL;
    zc_status_t status;
    int port = root_port();
    rank_setup(rank);

    if (rank == 3) {
        zc_harness_step("joining another job");
        status = zc_bootstrap_tcp_create_explicit(1, 3, "127.0.0.1", port, "another-job", 5, &bs);
        CHECK(status == ZC_ERR_MISMATCH, "create as a stranger: %s", zc_status_string(status));
        CHECK(logged_has("rejected rank 1") && logged_has("job id"),
              "the rejection does not say why: %s", logged);
        __atomic_add_fetch(&shared->strangers_done, 1, __ATOMIC_SEQ_CST);
        return 0;
    }
    if (rank == 4) {
        zc_harness_step("speaking http");
        static const char http[] = "GET / HTTP/1.1\r\nHost: x\r\nUser-Agent: stranger/1.0\r\n\r\n";
        int fd = raw_connect(port, 5);
        int silent = raw_connect(port, 5); /* connects and never says a word */
        CHECK(fd >= 0 && silent >= 0, "cannot connect to the root");
        CHECK(send(fd, http, sizeof(http) - 1, 0) == (ssize_t)sizeof(http) - 1, "send");
        CHECK(wait_closed(fd, 5) == 0, "the root kept an http connection open");
        close(fd);
        __atomic_add_fetch(&shared->strangers_done, 1, __ATOMIC_SEQ_CST);
        zc_harness_step("holding a silent connection");
        CHECK(wait_closed(silent, 10) == 0, "the root never closed a silent connection");
        close(silent);
        return 0;
    }

    if (rank > 0) {
        zc_harness_step("waiting for the strangers");
        CHECK(wait_until(&shared->strangers_done, 2, 10) == 0, "the strangers never finished");
    }
    status = create_from_env(&bs);
    CHECK(status == ZC_OK, "create: %s", zc_status_string(status));
    int rc = exercise(bs, rank, 3);
    zc_bootstrap_destroy(bs);
    if (rank == 0) {
        CHECK(logged_has("rejected a connection from 127.0.0.1") && logged_has("job id hash"),
              "rank 0 did not report the stranger of another job: %s", logged);
        CHECK(logged_has("not a zipccl bootstrap message"),
              "rank 0 did not report the http client: %s", logged);
    }
    return rc;
}

static int case_stranger(void)
{
    char *const env[] = {"ZIPCCL_SIZE=3", NULL};
    zc_harness_opts_t o = {.nranks = 5, .deadline_s = 30, .env = env};
    return zc_harness_run(&o, stranger_rank, NULL) != 0;
}

/* ---- a rank that connects twice ------------------------------------------------------------- */

/*
 * Every process was told the job has 4 ranks; rank 3 claims to be rank 1. Without
 * a secret the second claim could be anyone's: rank 0 refuses it alone, it
 * retries until the deadline, and rank 3's absence fails the job then. With a
 * secret both are proven members of the job: it fails at once.
 */
static int duplicate_rank(int rank, int size, void *arg)
{
    int secret = *(int *)arg;
    zc_bootstrap_t *bs = NULL;
    rank_setup(rank);
    if (rank == 3) {
        /* after ranks 1 and 2 joined, a second rank 1 */
        zc_harness_step("waiting to duplicate rank 1");
        CHECK(wait_until(&shared->ready[1], 1, 10) == 0 &&
                  wait_until(&shared->ready[2], 1, 10) == 0,
              "ranks 1 and 2 never started");
        sleep_s(0.3);
        setenv("ZIPCCL_RANK", "1", 1);
    } else {
        shared->ready[rank] = 1;
    }
    uint64_t start = zc_time_ns();
    zc_status_t status = create_from_env(&bs);
    double t = elapsed_s(start);
    if (secret) {
        CHECK(status == ZC_ERR_MISMATCH, "create: %s", zc_status_string(status));
        CHECK(logged_has("rank 1 connected twice: from 127.0.0.1:"),
              "the error does not name the duplicate: %s", logged);
        CHECK(t < 2.5, "failing took %.1f s", t);
        return FAILED_AS_EXPECTED;
    }
    CHECK(status == ZC_ERR_TIMEOUT, "create: %s", zc_status_string(status));
    /*
     * Rank 3 is missing; a rank whose own 3 s ran out a moment before rank 0's
     * has closed its connection by then and is listed too ("ranks 2, 3 did
     * not connect", seen once in a fresh-clone run): rank 3 last either way.
     */
    if (rank == 0)
        CHECK(logged_has("rank 1 has already joined from 127.0.0.1:") &&
                  logged_has(" 3 did not connect to rank 0"),
              "rank 0 names neither the refused claim nor the missing rank: %s", logged);
    if (rank == 3)
        CHECK(logged_has("could not join") && logged_has("rank 1 has already joined"),
              "the duplicate was not told why: %s", logged);
    CHECK(t >= 2.5 && t < 6, "failing took %.1f s, ZIPCCL_TIMEOUT_S is 3", t);
    return FAILED_AS_EXPECTED;
}

static int case_duplicate(int secret)
{
    char *const plain[] = {"ZIPCCL_TIMEOUT_S=3", NULL};
    char *const with_secret[] = {"ZIPCCL_TIMEOUT_S=3",
                                 "ZIPCCL_JOB_SECRET=correct horse battery staple", NULL};
    zc_harness_opts_t o = {.nranks = 4,
                           .deadline_s = 30,
                           .expect_fail_mask = 0xf,
                           .expect_fail_status = FAILED_AS_EXPECTED,
                           .env = secret ? with_secret : plain};
    return zc_harness_run(&o, duplicate_rank, &secret) != 0;
}

/* ---- ranks that disagree on a length -------------------------------------------------------- */

static int mismatch_rank(int rank, int size, void *arg)
{
    zc_bootstrap_t *bs = NULL;
    uint8_t mine[12] = {0}, all[3 * 12];
    rank_setup(rank);
    zc_status_t status = create_from_env(&bs);
    CHECK(status == ZC_OK, "create: %s", zc_status_string(status));
    zc_harness_step("allgather");
    status = zc_bootstrap_allgather(bs, mine, rank == 1 ? 12 : 8, all);
    CHECK(status == ZC_ERR_MISMATCH, "allgather: %s", zc_status_string(status));
    CHECK(logged_has("rank 1 in allgather #1: sent 12 bytes, expected 8"),
          "the error does not name the rank and the lengths: %s", logged);
    status = zc_bootstrap_barrier(bs);
    CHECK(status == ZC_ERR_MISMATCH, "a barrier after the failure: %s", zc_status_string(status));
    zc_bootstrap_destroy(bs);
    return FAILED_AS_EXPECTED;
}

static int case_mismatch(void)
{
    zc_harness_opts_t o = {.nranks = 3,
                           .deadline_s = 30,
                           .expect_fail_mask = 0x7,
                           .expect_fail_status = FAILED_AS_EXPECTED};
    return zc_harness_run(&o, mismatch_rank, NULL) != 0;
}

/* ---- a rank killed mid-allgather ------------------------------------------------------------ */

static int killed_rank(int rank, int size, void *arg)
{
    int victim = *(int *)arg;
    zc_bootstrap_t *bs = NULL;
    size_t len = 64 << 10;
    uint8_t *mine = calloc(1, len), *all = malloc(len * (size_t)size);
    rank_setup(rank);
    CHECK(mine && all, "out of memory");
    zc_status_t status = create_from_env(&bs);
    CHECK(status == ZC_OK, "create: %s", zc_status_string(status));
    uint64_t start = zc_time_ns();
    for (int i = 0; status == ZC_OK && elapsed_s(start) < 20; i++) {
        zc_harness_step("allgather %d", i);
        status = zc_bootstrap_allgather(bs, mine, len, all);
    }
    char name[32];
    snprintf(name, sizeof(name), "rank %d ", victim);
    CHECK(status == ZC_ERR_IO, "allgather after rank %d died: %s", victim,
          zc_status_string(status));
    CHECK(logged_has(name) && logged_has("during allgather #"),
          "the error does not name rank %d: %s", victim, logged);
    zc_bootstrap_destroy(bs);
    free(mine);
    free(all);
    return FAILED_AS_EXPECTED;
}

static int case_killed(int victim)
{
    char *const env[] = {"ZIPCCL_TIMEOUT_S=10", NULL};
    zc_harness_opts_t o = {.nranks = 4,
                           .deadline_s = 30,
                           .kill_rank = victim,
                           .kill_at_step = "allgather",
                           .kill_after_s = 0.3,
                           .expect_fail_mask = 0xful & ~(1ul << victim),
                           .expect_fail_status = FAILED_AS_EXPECTED,
                           .env = env};
    uint64_t start = zc_time_ns();
    int rc = zc_harness_run(&o, killed_rank, &victim);
    double t = elapsed_s(start);
    fprintf(stderr, "rank %d killed: the others failed; the run took %.2f s\n", victim, t);
    if (rc == 0 && t >= 5) {
        fprintf(stderr, "the survivors took %.1f s to notice, ZIPCCL_TIMEOUT_S is 10\n", t);
        return 1;
    }
    return rc != 0;
}

/* ---- hostile processes on the same host: strangers and a lying member -------------------- */

/*
 * Ranks 0..2 are the job (size 3, ZIPCCL_TIMEOUT_S=20); harness rank 3 is an attacker on
 * the same host that knows the job id (ZIPCCL_JOB_ID is in its environment, and the default
 * root:host:port is computable) but not ZIPCCL_JOB_SECRET: it speaks raw frames. Ranks 1 and
 * 2 join once the attack is under way; the job must complete with correct results, and the
 * attacker must have got nowhere.
 */
typedef enum attack {
    ATTACK_NONE,      /* the baseline: join time without an attacker */
    ATTACK_REPLAY,    /* another job's hello; replays any job hash the REJECT disclosed */
    ATTACK_RANK99,    /* the right job hash, rank 99 */
    ATTACK_DUPLICATE, /* the right job hash, rank 1 once rank 1 joined */
    ATTACK_FLOOD,     /* 3000 silent connections while the ranks join */
    ATTACK_SILENT,    /* 100 silent connections held through the join */
} attack_t;

typedef struct hostile {
    attack_t attack;
    int secret; /* the ranks have ZIPCCL_JOB_SECRET (the attacker does not use it) */
} hostile_t;

#define FLOOD_CONNECTIONS 3000

static int send_hello(int fd, uint64_t job, uint32_t rank, uint32_t size)
{
    uint8_t hdr[ZC_BS_HDR_LEN];
    zc_bs_frame_t f = zc_bs_frame_make(job, ZC_BS_MSG_HELLO, rank, 0, 0, size);
    zc_bs_frame_encode(&f, hdr);
    return send(fd, hdr, sizeof(hdr), MSG_NOSIGNAL) == (ssize_t)sizeof(hdr) ? 0 : -1;
}

/* Reads one frame and at most @p max payload bytes; -1 if the connection closed first. */
static int read_frame(int fd, zc_bs_frame_t *f, uint8_t *payload, size_t max, double timeout_s)
{
    uint8_t hdr[ZC_BS_HDR_LEN];
    int err;
    uint64_t deadline = zc_time_ns() + (uint64_t)(timeout_s * 1e9);
    if (zc_bs_recv_all(fd, hdr, sizeof(hdr), deadline, &err) != ZC_OK)
        return -1;
    zc_bs_frame_decode(hdr, f);
    if (f->len > max || zc_bs_recv_all(fd, payload, (size_t)f->len, deadline, &err) != ZC_OK)
        return -1;
    return 0;
}

/* The attacker's REJECT: its reason into @p reason; -1 if something else came. */
static int read_reject(int fd, char *reason)
{
    zc_bs_frame_t f;
    uint8_t payload[4 + ZC_BS_REASON_MAX];
    zc_status_t carried;
    if (read_frame(fd, &f, payload, sizeof(payload), 10) < 0 || f.type != ZC_BS_MSG_REJECT ||
        zc_bs_reason_decode(payload, (size_t)f.len, &carried, reason) != ZC_OK)
        return -1;
    return 0;
}

/* A claim of @p rank with the job's hash: the reply must refuse it and close the connection. */
static int claim_refused(int port, uint64_t job, uint32_t rank, int secret)
{
    char reason[ZC_BS_REASON_MAX + 1];
    int fd = raw_connect(port, 10);
    CHECK(fd >= 0, "cannot connect to the root");
    CHECK(send_hello(fd, job, rank, 3) == 0, "send hello");
    if (secret && rank < 3) {
        /* a plausible claim is challenged; the attacker cannot answer with the secret */
        zc_bs_frame_t f;
        uint8_t nonce[64];
        CHECK(read_frame(fd, &f, nonce, sizeof(nonce), 10) == 0 && f.type == ZC_BS_MSG_CHALLENGE,
              "claim of rank %u: no challenge", rank);
        uint8_t proof[ZC_BS_HDR_LEN + ZC_BS_PROOF_LEN] = {0};
        zc_bs_frame_t p = zc_bs_frame_make(job, ZC_BS_MSG_PROOF, rank, 0, ZC_BS_PROOF_LEN, 0);
        zc_bs_frame_encode(&p, proof);
        memcpy(proof + ZC_BS_HDR_LEN + ZC_BS_NONCE_LEN, nonce, ZC_BS_NONCE_LEN); /* a guess */
        CHECK(send(fd, proof, sizeof(proof), MSG_NOSIGNAL) == (ssize_t)sizeof(proof), "send");
    }
    CHECK(read_reject(fd, reason) == 0, "claim of rank %u was not refused", rank);
    fprintf(stderr, "attacker: claim of rank %u refused: %s\n", rank, reason);
    CHECK(wait_closed(fd, 5) == 0, "the root kept the refused connection open");
    close(fd);
    return 0;
}

static int attack_replay(int port, uint64_t job, int secret)
{
    char reason[ZC_BS_REASON_MAX + 1], hex[32];
    int fd = raw_connect(port, 10);
    CHECK(fd >= 0, "cannot connect to the root");
    CHECK(send_hello(fd, zc_bs_job_hash("another-job"), 1, 3) == 0, "send hello");
    CHECK(read_reject(fd, reason) == 0, "another job's hello was not rejected");
    close(fd);
    fprintf(stderr, "attacker: rejected: %s\n", reason);
    snprintf(hex, sizeof(hex), "%016" PRIx64, job);
    const char *leak = strstr(reason, "receiver's 0x");
    if (leak) {
        /* replay what the root disclosed, and hold rank 1's slot */
        uint64_t learned = strtoull(leak + strlen("receiver's 0x"), NULL, 16);
        int thief = raw_connect(port, 10);
        if (thief >= 0 && send_hello(thief, learned, 1, 3) == 0) {
            fprintf(stderr, "attacker: replayed the disclosed hash 0x%016" PRIx64 "\n", learned);
            __atomic_add_fetch(&shared->strangers_done, 1, __ATOMIC_SEQ_CST);
            (void)wait_until(&shared->job_done, 1, 25);
            close(thief);
        }
    }
    CHECK(!strstr(reason, hex), "the REJECT disclosed the job hash %s: %s", hex, reason);
    /* with a secret, knowing the job id (hence its hash) is not enough either */
    return secret ? claim_refused(port, job, 1, 1) : 0;
}

static int attack_flood(int port, int count)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < (rlim_t)count + 64) {
        rl.rlim_cur = ZC_MIN(rl.rlim_max, (rlim_t)count + 64);
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    int *fds = malloc(sizeof(*fds) * (size_t)count);
    CHECK(fds, "out of memory");
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    CHECK(raw_connect(port, 10) >= 0, "the root never listened"); /* leaked on purpose: silent */
    uint64_t start = zc_time_ns();
    int opened = 0;
    for (int i = 0; i < count; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
        if (fds[i] >= 0 && connect(fds[i], (struct sockaddr *)&a, sizeof(a)) < 0 &&
            errno != EINPROGRESS) {
            close(fds[i]);
            fds[i] = -1;
        }
        opened += fds[i] >= 0;
        if (i == count / 10)
            __atomic_add_fetch(&shared->strangers_done, 1, __ATOMIC_SEQ_CST);
    }
    fprintf(stderr, "attacker: %d connections opened in %.2f s\n", opened, elapsed_s(start));
    (void)wait_until(&shared->job_done, 1, 25);
    for (int i = 0; i < count; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    free(fds);
    return 0;
}

static int attacker(const hostile_t *h, int port)
{
    uint64_t job = zc_bs_job_hash(getenv("ZIPCCL_JOB_ID"));
    int rc = 0;
    switch (h->attack) {
    case ATTACK_NONE: break;
    case ATTACK_REPLAY: rc = attack_replay(port, job, h->secret); break;
    case ATTACK_RANK99: rc = claim_refused(port, job, 99, h->secret); break;
    case ATTACK_DUPLICATE:
        CHECK(wait_until(&shared->ready[1], 1, 10) == 0, "rank 1 never started");
        sleep_s(0.5); /* rank 1 has joined by now */
        rc = claim_refused(port, job, 1, h->secret);
        break;
    case ATTACK_FLOOD: return attack_flood(port, FLOOD_CONNECTIONS);
    case ATTACK_SILENT: {
        int fds[100];
        for (int i = 0; i < 100; i++)
            CHECK((fds[i] = raw_connect(port, 10)) >= 0, "cannot connect to the root");
        __atomic_add_fetch(&shared->strangers_done, 1, __ATOMIC_SEQ_CST);
        (void)wait_until(&shared->job_done, 1, 25);
        for (int i = 0; i < 100; i++)
            close(fds[i]);
        return 0;
    }
    }
    __atomic_add_fetch(&shared->strangers_done, 1, __ATOMIC_SEQ_CST);
    return rc;
}

static int hostile_rank(int rank, int size, void *arg)
{
    const hostile_t *h = arg;
    zc_bootstrap_t *bs = NULL;
    rank_setup(rank);
    if (rank == 3) {
        zc_harness_step("attacking");
        return attacker(h, root_port());
    }
    shared->ready[rank] = 1;
    if (rank == 2 || (rank == 1 && h->attack != ATTACK_DUPLICATE)) {
        zc_harness_step("waiting for the attack");
        CHECK(wait_until(&shared->strangers_done, 1, 20) == 0, "the attack never started");
    }
    uint64_t start = zc_time_ns();
    zc_status_t status = create_from_env(&bs);
    double join_s = elapsed_s(start);
    CHECK(status == ZC_OK, "create: %s", zc_status_string(status));
    if (rank == 2)
        fprintf(stderr, "rank 2 joined in %.3f s\n", join_s);
    CHECK(join_s < 20, "joining took %.1f s, ZIPCCL_TIMEOUT_S is 20", join_s);
    int rc = exercise(bs, rank, 3);
    zc_bootstrap_destroy(bs);
    if (rank == 0)
        shared->job_done = 1;
    return rc;
}

static int case_hostile(attack_t attack, int secret)
{
    hostile_t h = {.attack = attack, .secret = secret};
    char *const plain[] = {"ZIPCCL_SIZE=3", "ZIPCCL_TIMEOUT_S=20", NULL};
    char *const with_secret[] = {"ZIPCCL_SIZE=3", "ZIPCCL_TIMEOUT_S=20",
                                 "ZIPCCL_JOB_SECRET=correct horse battery staple", NULL};
    zc_harness_opts_t o = {.nranks = 4, .deadline_s = 60, .env = secret ? with_secret : plain};
    uint64_t start = zc_time_ns();
    int rc = zc_harness_run(&o, hostile_rank, &h);
    fprintf(stderr, "the job ran in %.2f s\n", elapsed_s(start));
    return rc != 0;
}

/*
 * A member that announces a worker address of 1 TiB: the others must refuse it, naming the
 * rank, and allocate nothing for it.
 */
static int huge_address_rank(int rank, int size, void *arg)
{
    zc_bootstrap_t *bs = NULL;
    zc_config_t cfg;
    rank_setup(rank);
    CHECK(zc_config_load(NULL, &cfg) == ZC_OK, "config");
    zc_status_t status = zc_bootstrap_tcp_create(&cfg, NULL, &bs);
    CHECK(status == ZC_OK, "create: %s", zc_status_string(status));
    if (rank == 2) {
        uint64_t mine = UINT64_C(1) << 40, lens[3];
        zc_harness_step("announcing 1 TiB");
        (void)zc_bootstrap_allgather(bs, &mine, sizeof(mine), lens);
        zc_bootstrap_destroy(bs);
        return 0;
    }
    zc_ucx_comm_t *comm = NULL;
    uint64_t start = zc_time_ns();
    zc_harness_step("ucx comm create");
    status = zc_ucx_comm_create(&cfg, bs, &comm);
    CHECK(status == ZC_ERR_CORRUPT, "comm create: %s", zc_status_string(status));
    CHECK(logged_has("rank 2 announced a worker address of 1099511627776 bytes"),
          "the error does not name the liar and its length: %s", logged);
    CHECK(elapsed_s(start) < 5, "failing took %.1f s", elapsed_s(start));
    zc_bootstrap_destroy(bs);
    return FAILED_AS_EXPECTED;
}

static int case_huge_address(void)
{
    char *const env[] = {"ZIPCCL_TIMEOUT_S=20", NULL};
    zc_harness_opts_t o = {.nranks = 3,
                           .deadline_s = 60,
                           .expect_fail_mask = 0x3,
                           .expect_fail_status = FAILED_AS_EXPECTED,
                           .env = env};
    return zc_harness_run(&o, huge_address_rank, NULL) != 0;
}

int main(int argc, char **argv)
{
    const char *name = argc > 1 ? argv[1] : "";
    shared = mmap(NULL, sizeof(*shared), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (shared == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    int rc;
    if (strcmp(name, "collectives-zipccl") == 0)
        rc = case_collectives(ZC_HARNESS_ENV_ZIPCCL);
    else if (strcmp(name, "collectives-torchrun") == 0)
        rc = case_collectives(ZC_HARNESS_ENV_TORCHRUN);
    else if (strcmp(name, "collectives-openmpi") == 0)
        rc = case_collectives(ZC_HARNESS_ENV_OPENMPI);
    else if (strcmp(name, "collectives-slurm") == 0)
        rc = case_collectives(ZC_HARNESS_ENV_SLURM);
    else if (strcmp(name, "late-root") == 0)
        rc = case_late_root();
    else if (strcmp(name, "root-absent") == 0)
        rc = case_root_absent();
    else if (strcmp(name, "stranger") == 0)
        rc = case_stranger();
    else if (strcmp(name, "duplicate") == 0)
        rc = case_duplicate(0);
    else if (strcmp(name, "duplicate+secret") == 0)
        rc = case_duplicate(1);
    else if (strcmp(name, "mismatch") == 0)
        rc = case_mismatch();
    else if (strcmp(name, "killed") == 0)
        rc = case_killed(2);
    else if (strcmp(name, "killed-root") == 0)
        rc = case_killed(0);
    else if (strcmp(name, "huge-address") == 0)
        rc = case_huge_address();
    else if (strncmp(name, "hostile-", 8) == 0) {
        static const char *const attacks[] = {"none",      "replay", "rank99",
                                              "duplicate", "flood",  "silent"};
        const char *a = name + 8;
        size_t alen = strcspn(a, "+");
        int secret = strcmp(a + alen, "+secret") == 0;
        rc = -1;
        for (size_t i = 0; i < ZC_ARRAY_SIZE(attacks); i++)
            if (strlen(attacks[i]) == alen && strncmp(a, attacks[i], alen) == 0 &&
                (secret || a[alen] == '\0'))
                rc = case_hostile((attack_t)i, secret);
        if (rc < 0) {
            fprintf(stderr, "unknown case '%s'\n", name);
            return 2;
        }
    } else {
        fprintf(stderr, "usage: %s CASE (unknown case '%s')\n", argv[0], name);
        return 2;
    }
    fprintf(stderr, "%s: %s\n", name, rc ? "FAILED" : "passed");
    return rc ? 1 : 0;
}
