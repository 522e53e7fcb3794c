/*
 * The multi-process test harness (see harness.h). Steps live in a memfd shared
 * by the parent and every rank, one slot per rank under a sequence lock, so the
 * parent can read a rank's step while the rank writes it, also after an exec.
 */
#include "harness.h"

#include "common/compiler.h"
#include "common/timer.h"
#include "transport/bootstrap/tcp.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

#define STEP_MAX 112
#define GRACE_S 5.0

typedef struct step_slot {
    atomic_uint seq; /* odd while the rank writes */
    uint64_t when_ns;
    char text[STEP_MAX];
} step_slot_t;

typedef struct step_page {
    step_slot_t slot[ZC_HARNESS_MAX_RANKS];
} step_page_t;

/* In a rank: its slot (NULL in the parent and outside a harness). */
static step_slot_t *my_slot;

typedef enum outcome {
    RUNNING,
    EXITED,
    SIGNALED,
    TIMED_OUT,  /* killed at the deadline */
    GRACE_OVER, /* killed after another rank failed */
} outcome_t;

typedef struct rank_state {
    pid_t pid;
    outcome_t outcome;
    int code; /* exit status or signal */
    char step[STEP_MAX];
    double at_s;      /* when it ended, since the start */
    int err_fd;       /* a memfd: the rank's stderr, forwarded to the harness's as it grows */
    off_t err_passed; /* bytes of it forwarded so far */
} rank_state_t;

/*
 * What UCX 1.13's tcp transport prints before it aborts a rank whose peer failed in the
 * middle of a transfer (a completion invoked twice: docs/failures.md). Not zipccl's doing
 * and not avoidable at an acceptable cost, so a run that failed only by it runs again once.
 */
static const char *const ucx_abort_marks[] = {"uct_iface.h:", "Assertion `comp->count > 0'"};

/* Result of run() when every rank that misbehaved was aborted by UCX's assertion above. */
#define RUN_UCX_ABORT (-2)

static const char *const launcher_vars[] = {
    "ZIPCCL_RANK",
    "ZIPCCL_SIZE",
    "ZIPCCL_ROOT",
    "ZIPCCL_JOB_ID",
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "TORCHELASTIC_RUN_ID",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "OMPI_MCA_ess_base_jobid",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "ZC_HARNESS_RANK",
    "ZC_HARNESS_SHM_FD",
    "ZC_HARNESS_ROOT",
};

static const char *const style_names[] = {"zipccl", "torchrun", "openmpi", "slurm"};

/* Whether @p port can be bound on 127.0.0.1 now. */
static int port_free(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return 0;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/*
 * A port below the kernel's ephemeral range: the ports bind(0) hands out are
 * the ones UCX and every other connection of the tests take too, so one of
 * them could grab it before rank 0 listens. Random, so that tests running in
 * parallel rarely try the same one.
 */
int zc_harness_free_port(void)
{
    int low = 32768;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f) {
        if (fscanf(f, "%d", &low) != 1)
            low = 32768;
        fclose(f);
    }
    if (low <= 10001)
        low = 32768;
    unsigned seed = (unsigned)getpid() ^ (unsigned)time(NULL) * 2654435761u;
    for (int i = 0; i < 1000; i++) {
        int port = 10000 + (int)(rand_r(&seed) % (unsigned)(low - 10000));
        if (port_free(port))
            return port;
    }
    errno = EADDRINUSE;
    return -1;
}

/* ---- steps ----------------------------------------------------------------------------------- */

static step_slot_t *slot_from_env(void)
{
    const char *fd_text = getenv("ZC_HARNESS_SHM_FD");
    const char *rank_text = getenv("ZC_HARNESS_RANK");
    if (!fd_text || !rank_text)
        return NULL;
    int fd = atoi(fd_text), rank = atoi(rank_text);
    if (rank < 0 || rank >= ZC_HARNESS_MAX_RANKS)
        return NULL;
    void *p = mmap(NULL, sizeof(step_page_t), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED)
        return NULL;
    return &((step_page_t *)p)->slot[rank];
}

void zc_harness_step(const char *fmt, ...)
{
    static int looked;
    if (!my_slot && !looked) {
        looked = 1; /* an exec'd rank: find the page from the environment, once */
        my_slot = slot_from_env();
    }
    if (!my_slot)
        return;
    char text[STEP_MAX];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);

    unsigned s = atomic_load_explicit(&my_slot->seq, memory_order_relaxed);
    atomic_store_explicit(&my_slot->seq, s + 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    memcpy(my_slot->text, text, sizeof(text));
    my_slot->when_ns = zc_time_ns();
    atomic_store_explicit(&my_slot->seq, s + 2, memory_order_release);
}

const char *zc_harness_root(void)
{
    return getenv("ZC_HARNESS_ROOT");
}

/* The parent's consistent copy of a rank's step; returns when it was announced (0: never). */
static uint64_t step_read(const step_slot_t *slot, char *text)
{
    for (int tries = 0; tries < 1000; tries++) {
        unsigned s1 = atomic_load_explicit(&slot->seq, memory_order_acquire);
        if (s1 & 1)
            continue;
        memcpy(text, slot->text, STEP_MAX);
        uint64_t when = slot->when_ns;
        atomic_thread_fence(memory_order_acquire);
        if (atomic_load_explicit(&slot->seq, memory_order_relaxed) == s1) {
            text[STEP_MAX - 1] = '\0';
            return s1 ? when : 0;
        }
    }
    snprintf(text, STEP_MAX, "(being written)");
    return 0;
}

/* ---- environment ----------------------------------------------------------------------------- */

typedef struct env_list {
    char **v;
    size_t n, cap;
} env_list_t;

static int env_is(const char *entry, const char *name)
{
    size_t n = strlen(name);
    return strncmp(entry, name, n) == 0 && entry[n] == '=';
}

static void env_remove(env_list_t *e, const char *name)
{
    for (size_t i = 0; i < e->n;) {
        if (env_is(e->v[i], name)) {
            free(e->v[i]);
            e->v[i] = e->v[--e->n];
        } else {
            i++;
        }
    }
}

static int env_add(env_list_t *e, const char *entry)
{
    const char *eq = strchr(entry, '=');
    if (!eq)
        return -1;
    char name[256];
    snprintf(name, sizeof(name), "%.*s", (int)(eq - entry), entry);
    env_remove(e, name);
    if (e->n + 2 > e->cap) {
        size_t cap = e->cap ? e->cap * 2 : 64;
        char **v = realloc(e->v, cap * sizeof(*v));
        if (!v)
            return -1;
        e->v = v;
        e->cap = cap;
    }
    e->v[e->n] = strdup(entry);
    if (!e->v[e->n])
        return -1;
    e->v[++e->n] = NULL;
    return 0;
}

static int env_addf(env_list_t *e, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static int env_addf(env_list_t *e, const char *fmt, ...)
{
    char entry[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(entry, sizeof(entry), fmt, ap);
    va_end(ap);
    return env_add(e, entry);
}

static void env_free(env_list_t *e)
{
    for (size_t i = 0; i < e->n; i++)
        free(e->v[i]);
    free(e->v);
}

/* The environment of rank @p rank: ours without any launcher's variables, then the style's. */
static char **rank_env(const zc_harness_opts_t *o, int rank, int port, int shm_fd, long job)
{
    env_list_t e = {0};
    int rc = 0, n = o->nranks;
    for (char **p = environ; p && *p && rc == 0; p++) {
        int drop = 0;
        for (size_t i = 0; i < sizeof(launcher_vars) / sizeof(launcher_vars[0]); i++)
            drop |= env_is(*p, launcher_vars[i]);
        if (!drop)
            rc |= env_add(&e, *p);
    }
    rc |= env_addf(&e, "ZC_HARNESS_RANK=%d", rank);
    rc |= env_addf(&e, "ZC_HARNESS_SHM_FD=%d", shm_fd);
    rc |= env_addf(&e, "ZC_HARNESS_ROOT=127.0.0.1:%d", port);
    switch (o->env_style) {
    case ZC_HARNESS_ENV_ZIPCCL:
        rc |= env_addf(&e, "ZIPCCL_RANK=%d", rank);
        rc |= env_addf(&e, "ZIPCCL_SIZE=%d", n);
        rc |= env_addf(&e, "ZIPCCL_ROOT=127.0.0.1:%d", port);
        rc |= env_addf(&e, "ZIPCCL_JOB_ID=harness-%ld", job);
        break;
    case ZC_HARNESS_ENV_TORCHRUN:
        rc |= env_addf(&e, "RANK=%d", rank);
        rc |= env_addf(&e, "WORLD_SIZE=%d", n);
        rc |= env_addf(&e, "LOCAL_RANK=%d", rank);
        rc |= env_addf(&e, "LOCAL_WORLD_SIZE=%d", n);
        rc |= env_addf(&e, "MASTER_ADDR=127.0.0.1");
        rc |= env_addf(&e, "MASTER_PORT=%d", port - ZC_BOOTSTRAP_TORCHRUN_PORT_OFFSET);
        rc |= env_addf(&e, "TORCHELASTIC_RUN_ID=harness-%ld", job);
        break;
    case ZC_HARNESS_ENV_OPENMPI:
        rc |= env_addf(&e, "OMPI_COMM_WORLD_RANK=%d", rank);
        rc |= env_addf(&e, "OMPI_COMM_WORLD_SIZE=%d", n);
        rc |= env_addf(&e, "OMPI_COMM_WORLD_LOCAL_RANK=%d", rank);
        rc |= env_addf(&e, "OMPI_COMM_WORLD_LOCAL_SIZE=%d", n);
        rc |= env_addf(&e, "OMPI_MCA_ess_base_jobid=%ld", job);
        rc |= env_addf(&e, "ZIPCCL_ROOT=127.0.0.1:%d", port);
        break;
    case ZC_HARNESS_ENV_SLURM:
        rc |= env_addf(&e, "SLURM_PROCID=%d", rank);
        rc |= env_addf(&e, "SLURM_NTASKS=%d", n);
        rc |= env_addf(&e, "SLURM_LOCALID=%d", rank);
        rc |= env_addf(&e, "SLURM_JOB_ID=%ld", job);
        rc |= env_addf(&e, "SLURM_STEP_ID=0");
        rc |= env_addf(&e, "ZIPCCL_ROOT=127.0.0.1:%d", port);
        break;
    }
    for (char *const *p = o->env; p && *p && rc == 0; p++)
        rc |= env_add(&e, *p);
    if (rc != 0 || !e.v) {
        env_free(&e);
        return NULL;
    }
    return e.v;
}

static void free_env(char **env)
{
    for (char **p = env; p && *p; p++)
        free(*p);
    free(env);
}

/* ---- running --------------------------------------------------------------------------------- */

static double since_s(uint64_t start_ns)
{
    return (double)(zc_time_ns() - start_ns) / 1e9;
}

static void sleep_ms(int ms)
{
    struct timespec ts = {.tv_sec = 0, .tv_nsec = ms * 1000000L};
    nanosleep(&ts, NULL);
}

static int expected_fail(const zc_harness_opts_t *o, int r)
{
    return (int)((o->expect_fail_mask >> r) & 1);
}

static int kill_requested(const zc_harness_opts_t *o)
{
    return o->kill_at_step != NULL || o->kill_after_s > 0;
}

/* Whether the finished rank @p r did what @p o expects; if not, why, in @p why. */
static int outcome_ok(const zc_harness_opts_t *o, int r, const rank_state_t *s, int killed,
                      char *why, size_t len)
{
    const char *in_step = s->step[0] ? " in step '" : "";
    const char *step = s->step;
    const char *end = s->step[0] ? "'" : "";

    switch (s->outcome) {
    case RUNNING: break;
    case TIMED_OUT:
        snprintf(why, len, "timed out after %g s in step '%s'",
                 o->deadline_s > 0 ? o->deadline_s : 60.0, s->step);
        return 0;
    case GRACE_OVER:
        snprintf(why, len,
                 "still running %g s after another rank failed; killed after %.1f s in step '%s'",
                 GRACE_S, s->at_s, s->step);
        return 0;
    case SIGNALED:
        if (kill_requested(o) && r == o->kill_rank && killed && s->code == SIGKILL)
            return 1;
        snprintf(why, len, "killed by signal %d (%s) after %.1f s%s%s%s", s->code,
                 strsignal(s->code), s->at_s, in_step, step, end);
        return 0;
    case EXITED:
        if (kill_requested(o) && r == o->kill_rank) {
            snprintf(why, len, "exit status %d after %.1f s, before the harness killed it%s%s%s",
                     s->code, s->at_s, in_step, step, end);
            return 0;
        }
        if (!expected_fail(o, r) && s->code == 0)
            return 1;
        if (expected_fail(o, r) && s->code != 0 &&
            (o->expect_fail_status == 0 || s->code == o->expect_fail_status))
            return 1;
        if (expected_fail(o, r) && s->code == 0)
            snprintf(why, len, "exit status 0 after %.1f s, but it was expected to fail%s%s%s",
                     s->at_s, in_step, step, end);
        else if (expected_fail(o, r))
            snprintf(why, len, "exit status %d after %.1f s, expected %d%s%s%s", s->code, s->at_s,
                     o->expect_fail_status, in_step, step, end);
        else
            snprintf(why, len, "exit status %d after %.1f s%s%s%s", s->code, s->at_s, in_step, step,
                     end);
        return 0;
    }
    return 0;
}

/* Copies what rank @p s wrote to its stderr since the last call to the harness's stderr. */
static void err_forward(rank_state_t *s)
{
    char buf[8192];
    ssize_t got;

    if (s->err_fd < 0)
        return;
    while ((got = pread(s->err_fd, buf, sizeof(buf), s->err_passed)) > 0) {
        s->err_passed += got;
        for (ssize_t done = 0, w; done < got; done += w) {
            w = write(2, buf + done, (size_t)(got - done));
            if (w <= 0)
                break;
        }
    }
}

/* Whether rank @p s's stderr holds every one of ucx_abort_marks. */
static int err_has_ucx_abort(const rank_state_t *s)
{
    size_t len = (size_t)s->err_passed;
    int found = 0;

    if (s->err_fd < 0 || len == 0)
        return 0;
    char *text = malloc(len + 1);
    if (text && pread(s->err_fd, text, len, 0) == (ssize_t)len) {
        text[len] = '\0';
        found = 1;
        for (size_t i = 0; i < ZC_ARRAY_SIZE(ucx_abort_marks); i++)
            found = found && strstr(text, ucx_abort_marks[i]) != NULL;
    }
    free(text);
    return found;
}

static void child_start(int rank, step_page_t *page, pid_t parent)
{
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent)
        _exit(125); /* the parent died before prctl */
    my_slot = &page->slot[rank];
}

static int run(const zc_harness_opts_t *o, zc_rank_main_fn fn, void *arg, char *const argv[])
{
    static long run_count;
    rank_state_t st[ZC_HARNESS_MAX_RANKS];
    char **envs[ZC_HARNESS_MAX_RANKS] = {0};
    double deadline_s = o->deadline_s > 0 ? o->deadline_s : 60.0;
    int n = o->nranks, result = -1, shm_fd = -1, port;
    step_page_t *page = MAP_FAILED;
    long job;

    if (n < 1 || n > ZC_HARNESS_MAX_RANKS || (unsigned)o->env_style > ZC_HARNESS_ENV_SLURM ||
        (kill_requested(o) && (o->kill_rank < 0 || o->kill_rank >= n))) {
        fprintf(stderr, "harness: bad options: %d ranks (1..%d), env style %d, kill rank %d\n", n,
                ZC_HARNESS_MAX_RANKS, (int)o->env_style, o->kill_rank);
        return -1;
    }
    port = zc_harness_free_port();
    if (port < 0) {
        fprintf(stderr, "harness: no free port on 127.0.0.1: %s\n", strerror(errno));
        return -1;
    }
    job = (long)getpid() * 1000 + ++run_count;

    shm_fd = memfd_create("zc_harness_steps", 0); /* inherited across exec, on purpose */
    if (shm_fd < 0 || ftruncate(shm_fd, sizeof(step_page_t)) < 0) {
        fprintf(stderr, "harness: memfd for steps: %s\n", strerror(errno));
        goto out_close_shm;
    }
    page = mmap(NULL, sizeof(step_page_t), PROT_READ | PROT_WRITE, MAP_SHARED, shm_fd, 0);
    if (page == MAP_FAILED) {
        fprintf(stderr, "harness: mmap for steps: %s\n", strerror(errno));
        goto out_close_shm;
    }
    memset(page, 0, sizeof(*page));
    for (int r = 0; r < n; r++) {
        envs[r] = rank_env(o, r, port, shm_fd, job);
        if (!envs[r]) {
            fprintf(stderr, "harness: out of memory for rank %d's environment\n", r);
            goto out_free_env;
        }
    }

    memset(st, 0, sizeof(st));
    for (int r = 0; r < n; r++)
        st[r].err_fd = memfd_create("zc_harness_stderr", MFD_CLOEXEC); /* -1: inherited */

    uint64_t start = zc_time_ns();
    uint64_t deadline = start + (uint64_t)(deadline_s * 1e9);
    pid_t parent = getpid();
    int running = 0;
    fflush(NULL); /* a child must not flush the parent's buffered output again */
    for (int r = 0; r < n; r++) {
        pid_t pid = fork();
        if (pid < 0) {
            fprintf(stderr, "harness: fork of rank %d: %s\n", r, strerror(errno));
            deadline = start; /* kill and reap the ranks already started */
            break;
        }
        if (pid == 0) {
            child_start(r, page, parent);
            if (st[r].err_fd >= 0)
                dup2(st[r].err_fd, 2);
            environ = envs[r];
            if (argv) {
                execvp(argv[0], argv);
                fprintf(stderr, "harness: rank %d: exec %s: %s\n", r, argv[0], strerror(errno));
                _exit(127);
            }
            zc_harness_step("started");
            int rc = fn(r, n, arg);
            fflush(NULL);
            _exit(rc == 0 ? 0 : (rc & 0xff) ? rc & 0xff : 1);
        }
        setpgid(pid, pid); /* also here: the child may not have run yet */
        st[r].pid = pid;
        st[r].outcome = RUNNING;
        running++;
    }

    int killed = 0, first_failed = -1;
    uint64_t kill_at = 0, grace_end = 0;
    if (kill_requested(o) && !o->kill_at_step)
        kill_at = start + (uint64_t)(o->kill_after_s * 1e9);

    while (running > 0) {
        for (int r = 0; r < n; r++) {
            int ws;
            err_forward(&st[r]);
            if (st[r].pid <= 0 || st[r].outcome != RUNNING ||
                waitpid(st[r].pid, &ws, WNOHANG) != st[r].pid)
                continue;
            step_read(&page->slot[r], st[r].step);
            st[r].at_s = since_s(start);
            if (WIFSIGNALED(ws)) {
                st[r].outcome = SIGNALED;
                st[r].code = WTERMSIG(ws);
            } else {
                st[r].outcome = EXITED;
                st[r].code = WEXITSTATUS(ws);
            }
            running--;
            char why[256];
            if (first_failed < 0 && !outcome_ok(o, r, &st[r], killed, why, sizeof(why))) {
                first_failed = r;
                grace_end = zc_time_ns() + (uint64_t)(GRACE_S * 1e9);
            }
        }
        if (running == 0)
            break;

        uint64_t now = zc_time_ns();
        if (kill_requested(o) && !killed && st[o->kill_rank].outcome == RUNNING) {
            if (!kill_at) {
                char text[STEP_MAX];
                uint64_t when = step_read(&page->slot[o->kill_rank], text);
                if (when && strncmp(text, o->kill_at_step, strlen(o->kill_at_step)) == 0)
                    kill_at = when + (uint64_t)(o->kill_after_s * 1e9);
            }
            if (kill_at && now >= kill_at) {
                kill(-st[o->kill_rank].pid, SIGKILL);
                killed = 1;
            }
        }
        int over = now >= deadline, grace_over = grace_end && now >= grace_end;
        if (over || grace_over) {
            for (int r = 0; r < n; r++) {
                if (st[r].pid <= 0 || st[r].outcome != RUNNING)
                    continue;
                step_read(&page->slot[r], st[r].step);
                kill(-st[r].pid, SIGKILL);
                waitpid(st[r].pid, NULL, 0);
                st[r].outcome = over ? TIMED_OUT : GRACE_OVER;
                st[r].at_s = since_s(start);
                running--;
            }
            break;
        }
        sleep_ms(2);
    }
    for (int r = 0; r < n; r++) {
        if (st[r].pid > 0)
            kill(-st[r].pid, SIGKILL); /* whatever a rank left behind in its group */
    }

    int bad = 0, ucx_aborts = 0;
    char lines[ZC_HARNESS_MAX_RANKS][400];
    for (int r = 0; r < n; r++) {
        char why[360];
        err_forward(&st[r]);
        if (st[r].pid <= 0) {
            snprintf(lines[bad++], sizeof(lines[0]), "rank %d: never started", r);
            continue;
        }
        if (!outcome_ok(o, r, &st[r], killed, why, sizeof(why))) {
            snprintf(lines[bad++], sizeof(lines[0]), "rank %d: %s", r, why);
            ucx_aborts +=
                st[r].outcome == SIGNALED && st[r].code == SIGABRT && err_has_ucx_abort(&st[r]);
        }
    }
    if (bad) {
        fprintf(stderr,
                "harness: %d of %d ranks did not behave as expected (env %s, root 127.0.0.1:%d, "
                "deadline %g s, %.1f s elapsed):\n",
                bad, n, style_names[o->env_style], port, deadline_s, since_s(start));
        for (int i = 0; i < bad; i++)
            fprintf(stderr, "harness:   %s\n", lines[i]);
    }
    result = !bad ? 0 : ucx_aborts == bad ? RUN_UCX_ABORT : -1;
    for (int r = 0; r < n; r++) {
        if (st[r].err_fd >= 0)
            close(st[r].err_fd);
    }

out_free_env:
    for (int r = 0; r < n; r++)
        free_env(envs[r]);
    munmap(page, sizeof(step_page_t));
out_close_shm:
    if (shm_fd >= 0)
        close(shm_fd);
    return result;
}

/* run(), once more when UCX's known assertion alone made the first run fail. */
static int run_or_rerun(const zc_harness_opts_t *o, zc_rank_main_fn fn, void *arg,
                        char *const argv[])
{
    int result = run(o, fn, arg, argv);
    if (result == RUN_UCX_ABORT) {
        fprintf(stderr, "harness: UCX 1.13's tcp assertion (uct_iface.h, comp->count > 0) "
                        "aborted the ranks above, not zipccl (docs/failures.md): running "
                        "the case again, once\n");
        result = run(o, fn, arg, argv);
    }
    return result == 0 ? 0 : -1;
}

int zc_harness_run(const zc_harness_opts_t *opts, zc_rank_main_fn fn, void *arg)
{
    if (!opts || !fn) {
        fprintf(stderr, "harness: zc_harness_run needs options and a rank function\n");
        return -1;
    }
    return run_or_rerun(opts, fn, arg, NULL);
}

int zc_harness_exec(const zc_harness_opts_t *opts, char *const argv[])
{
    if (!opts || !argv || !argv[0]) {
        fprintf(stderr, "harness: zc_harness_exec needs options and a command\n");
        return -1;
    }
    return run_or_rerun(opts, NULL, NULL, argv);
}
