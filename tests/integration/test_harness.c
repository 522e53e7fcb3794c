/*
 * The multi-process harness itself: what it reports for each way a rank can end
 * (exit status, signal, deadline, another rank's failure), expected failures,
 * the one rerun after UCX 1.13's tcp assertion,
 * kills at a step, the environment of each launcher style, exec'd ranks and the
 * process-group cleanup.
 *
 * Usage: test_harness CASE. Exits 0 when the case passed.
 */
#include "harness.h"

#include "common/config.h"
#include "common/log.h"
#include "common/timer.h"
#include "transport/bootstrap/tcp.h"

#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "check failed: %s: ", #cond);                                          \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static char report[16384];

/* Runs the harness with its stderr (and the ranks') captured into report, then echoed. */
static int run_captured(const zc_harness_opts_t *o, zc_rank_main_fn fn, void *arg,
                        char *const argv[])
{
    fflush(stderr);
    int saved = dup(2);
    FILE *tmp = tmpfile();
    if (saved < 0 || !tmp) {
        perror("capture");
        exit(1);
    }
    dup2(fileno(tmp), 2);
    int rc = fn ? zc_harness_run(o, fn, arg) : zc_harness_exec(o, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(report, 1, sizeof(report) - 1, tmp);
    report[n] = '\0';
    fclose(tmp);
    fprintf(stderr, "---- harness returned %d; its output:\n%s----\n", rc, report);
    return rc;
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

/* ---- outcomes ------------------------------------------------------------------------------- */

static int return_rank_number(int rank, int size, void *arg)
{
    int who = *(int *)arg;
    return rank == who ? 7 : 0;
}

static int case_ok(void)
{
    int nobody = -1;
    zc_harness_opts_t o = {.nranks = 4};
    CHECK(run_captured(&o, return_rank_number, &nobody, NULL) == 0, "4 ranks returning 0");
    CHECK(report[0] == '\0', "a successful run printed: %s", report);
    return 0;
}

static int case_exit_status(void)
{
    int who = 2;
    zc_harness_opts_t o = {.nranks = 4};
    CHECK(run_captured(&o, return_rank_number, &who, NULL) == -1, "rank 2 returned 7");
    CHECK(strstr(report, "rank 2: exit status 7"), "report: %s", report);
    CHECK(!strstr(report, "rank 1:") && !strstr(report, "rank 0:"), "others reported");
    return 0;
}

static int raise_term(int rank, int size, void *arg)
{
    if (rank == 1)
        raise(SIGTERM);
    return 0;
}

static int case_signal(void)
{
    zc_harness_opts_t o = {.nranks = 2};
    CHECK(run_captured(&o, raise_term, NULL, NULL) == -1, "rank 1 raised SIGTERM");
    CHECK(strstr(report, "rank 1: killed by signal 15"), "report: %s", report);
    return 0;
}

/*
 * Rank 1 prints UCX 1.13's tcp assertion and aborts in the first *@p arg runs (a counter
 * in memory shared with the harness's parent); @p arg NULL: it aborts without the text.
 */
static int ucx_abort(int rank, int size, void *arg)
{
    atomic_int *aborts_left = arg;
    if (rank != 1)
        return 0;
    if (!aborts_left)
        abort();
    if (atomic_fetch_sub(aborts_left, 1) > 0) {
        fprintf(stderr, "[vm:1:0:1]   uct_iface.h:884  Assertion `comp->count > 0' failed: "
                        "comp=0x1 count=0 status=-80\n");
        abort();
    }
    return 0;
}

static int case_ucx_abort(void)
{
    zc_harness_opts_t o = {.nranks = 2};
    atomic_int *left =
        mmap(NULL, sizeof(*left), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(left != MAP_FAILED, "mmap");

    atomic_store(left, 1); /* once: the second run passes */
    CHECK(run_captured(&o, ucx_abort, left, NULL) == 0, "ran again after UCX's abort");
    CHECK(strstr(report, "rank 1: killed by signal 6") &&
              strstr(report, "running the case again, once") &&
              strstr(report, "Assertion `comp->count > 0' failed"),
          "report: %s", report);

    atomic_store(left, 2); /* twice: the case fails */
    CHECK(run_captured(&o, ucx_abort, left, NULL) == -1, "UCX's abort twice is a failure");
    CHECK(atomic_load(left) == 0, "ran %d times, not 2", 2 - atomic_load(left));

    CHECK(run_captured(&o, ucx_abort, NULL, NULL) == -1, "an abort of another kind");
    CHECK(!strstr(report, "running the case again"), "ran again: %s", report);
    munmap(left, sizeof(*left));
    return 0;
}

static int stuck_rank(int rank, int size, void *arg)
{
    if (rank != 1)
        return 0;
    zc_harness_step("stuck in phase %d", 2);
    for (;;)
        pause();
}

static int case_timeout(void)
{
    zc_harness_opts_t o = {.nranks = 3, .deadline_s = 1};
    uint64_t start = zc_time_ns();
    CHECK(run_captured(&o, stuck_rank, NULL, NULL) == -1, "rank 1 never returns");
    CHECK(elapsed_s(start) < 3, "the deadline of 1 s took %.1f s", elapsed_s(start));
    CHECK(strstr(report, "rank 1: timed out after 1 s in step 'stuck in phase 2'"), "report: %s",
          report);
    CHECK(!strstr(report, "rank 0:") && !strstr(report, "rank 2:"), "others reported");
    return 0;
}

static int return_arg(int rank, int size, void *arg)
{
    return rank == 1 ? *(int *)arg : 0;
}

static int case_expect_fail(void)
{
    zc_harness_opts_t o = {.nranks = 3, .expect_fail_mask = 0x2};
    int code = 3;
    CHECK(run_captured(&o, return_arg, &code, NULL) == 0, "rank 1 failed as expected");
    code = 0;
    CHECK(run_captured(&o, return_arg, &code, NULL) == -1, "rank 1 succeeded, expected to fail");
    CHECK(strstr(report, "rank 1: exit status 0") && strstr(report, "expected to fail"),
          "report: %s", report);

    o.expect_fail_status = 3;
    code = 3;
    CHECK(run_captured(&o, return_arg, &code, NULL) == 0, "rank 1 exited 3 as expected");
    code = 4;
    CHECK(run_captured(&o, return_arg, &code, NULL) == -1, "rank 1 exited 4, expected 3");
    CHECK(strstr(report, "rank 1: exit status 4") && strstr(report, "expected 3"), "report: %s",
          report);
    return 0;
}

/* ---- kills ---------------------------------------------------------------------------------- */

static int phases_rank(int rank, int size, void *arg)
{
    int reach = *(int *)arg;
    if (rank != 1)
        return 0;
    zc_harness_step("warming up");
    sleep_s(0.2);
    if (!reach)
        return 0;
    zc_harness_step("transfer %d", 1);
    sleep_s(20);
    return 0;
}

static int case_kill_at_step(void)
{
    int reach = 1;
    zc_harness_opts_t o = {.nranks = 3,
                           .deadline_s = 10,
                           .kill_rank = 1,
                           .kill_at_step = "transfer",
                           .kill_after_s = 0.1};
    uint64_t start = zc_time_ns();
    CHECK(run_captured(&o, phases_rank, &reach, NULL) == 0, "rank 1 killed in 'transfer 1'");
    CHECK(elapsed_s(start) < 2, "the kill came after %.1f s", elapsed_s(start));

    reach = 0;
    CHECK(run_captured(&o, phases_rank, &reach, NULL) == -1, "rank 1 exits before 'transfer'");
    CHECK(strstr(report, "rank 1: exit status 0") && strstr(report, "before the harness killed"),
          "report: %s", report);

    /* a zeroed kill request kills nobody, although kill_rank is 0 */
    zc_harness_opts_t zero = {.nranks = 2};
    CHECK(run_captured(&zero, phases_rank, &reach, NULL) == 0, "no kill requested");
    return 0;
}

static int fail_then_hang(int rank, int size, void *arg)
{
    if (rank == 0)
        return 1;
    zc_harness_step("waiting for rank 0");
    for (;;)
        pause();
}

static int case_grace(void)
{
    zc_harness_opts_t o = {.nranks = 2, .deadline_s = 25};
    uint64_t start = zc_time_ns();
    CHECK(run_captured(&o, fail_then_hang, NULL, NULL) == -1, "rank 0 failed");
    CHECK(elapsed_s(start) < 8, "the other rank was killed after %.1f s", elapsed_s(start));
    CHECK(strstr(report, "rank 0: exit status 1") &&
              strstr(report, "rank 1: still running 5 s after another rank failed") &&
              strstr(report, "'waiting for rank 0'"),
          "report: %s", report);
    return 0;
}

/* ---- environment ---------------------------------------------------------------------------- */

static const char *const conflicting[] = {"RANK",         "WORLD_SIZE",   "MASTER_ADDR",
                                          "MASTER_PORT",  "ZIPCCL_RANK",  "ZIPCCL_ROOT",
                                          "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK"};

static int env_rank(int rank, int size, void *arg)
{
    zc_harness_env_style_t style = *(zc_harness_env_style_t *)arg;
    static const char *const own[][3] = {
        {"ZIPCCL_RANK", "ZIPCCL_SIZE", "ZIPCCL_JOB_ID"},
        {"RANK", "WORLD_SIZE", "TORCHELASTIC_RUN_ID"},
        {"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_MCA_ess_base_jobid"},
        {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_JOB_ID"},
    };
    char text[16];
    const char *v;

    snprintf(text, sizeof(text), "%d", rank);
    v = getenv(own[style][0]);
    CHECK(v && strcmp(v, text) == 0, "%s=%s in rank %d", own[style][0], v ? v : "(unset)", rank);
    snprintf(text, sizeof(text), "%d", size);
    v = getenv(own[style][1]);
    CHECK(v && strcmp(v, text) == 0, "%s=%s, size %d", own[style][1], v ? v : "(unset)", size);
    CHECK(getenv(own[style][2]), "%s unset", own[style][2]);
    for (size_t i = 0; i < ZC_ARRAY_SIZE(conflicting); i++) {
        int mine = 0;
        for (int k = 0; k < 3; k++)
            mine |= strcmp(conflicting[i], own[style][k]) == 0;
        mine |= strcmp(conflicting[i], "ZIPCCL_ROOT") == 0 && style != ZC_HARNESS_ENV_TORCHRUN;
        mine |= strncmp(conflicting[i], "MASTER_", 7) == 0 && style == ZC_HARNESS_ENV_TORCHRUN;
        CHECK(mine || !getenv(conflicting[i]), "%s is set in style %d", conflicting[i], (int)style);
    }

    /* what the bootstrap makes of it is what the harness announces */
    zc_config_t cfg;
    zc_bootstrap_tcp_params_t p;
    char root[300];
    CHECK(zc_config_load(NULL, &cfg) == ZC_OK, "config");
    CHECK(zc_bootstrap_tcp_resolve(&cfg, NULL, &p) == ZC_OK, "resolve");
    snprintf(root, sizeof(root), "%s:%d", p.host, p.port);
    CHECK(p.rank == rank && p.size == size, "resolved rank %d of %d", p.rank, p.size);
    CHECK(zc_harness_root() && strcmp(root, zc_harness_root()) == 0,
          "resolved root %s, the harness says %s", root, zc_harness_root());
    return 0;
}

static int case_env_styles(void)
{
    /* the parent's own launcher variables must not leak into any style */
    for (size_t i = 0; i < ZC_ARRAY_SIZE(conflicting); i++)
        setenv(conflicting[i], "99", 1);
    for (int s = ZC_HARNESS_ENV_ZIPCCL; s <= ZC_HARNESS_ENV_SLURM; s++) {
        zc_harness_env_style_t style = (zc_harness_env_style_t)s;
        zc_harness_opts_t o = {.nranks = 3, .env_style = style};
        CHECK(run_captured(&o, env_rank, &style, NULL) == 0, "env style %d", s);
    }
    return 0;
}

static int extra_env_rank(int rank, int size, void *arg)
{
    const char *t = getenv("ZIPCCL_TIMEOUT_S"), *r = getenv("ZIPCCL_RANK");
    CHECK(t && strcmp(t, "7") == 0, "ZIPCCL_TIMEOUT_S=%s", t ? t : "(unset)");
    CHECK(r && strcmp(r, "5") == 0, "ZIPCCL_RANK=%s: opts.env must override the style", r);
    return 0;
}

static int case_extra_env(void)
{
    char *const env[] = {"ZIPCCL_TIMEOUT_S=3", "ZIPCCL_RANK=5", "ZIPCCL_TIMEOUT_S=7", NULL};
    zc_harness_opts_t o = {.nranks = 2, .env = env};
    CHECK(run_captured(&o, extra_env_rank, NULL, NULL) == 0, "extra environment");
    return 0;
}

/* ---- exec ----------------------------------------------------------------------------------- */

/* What an exec'd rank runs: checks its environment, announces a step, rank 1 hangs. */
static int exec_child(void)
{
    const char *r = getenv("ZIPCCL_RANK");
    if (!r)
        return 10;
    zc_harness_step("exec'd rank %s waiting", r);
    if (atoi(r) == 1) {
        for (;;)
            pause();
    }
    return 0;
}

static int case_exec(void)
{
    char *const argv[] = {"/proc/self/exe", "exec-child", NULL};
    zc_harness_opts_t o = {.nranks = 3, .deadline_s = 1.5};
    CHECK(run_captured(&o, NULL, NULL, argv) == -1, "rank 1 hangs");
    CHECK(strstr(report, "rank 1: timed out after 1.5 s in step 'exec'd rank 1 waiting'"),
          "report: %s", report);
    CHECK(!strstr(report, "rank 0:") && !strstr(report, "rank 2:"), "others reported");

    char *const missing[] = {"/nonexistent/program", NULL};
    CHECK(run_captured(&o, NULL, NULL, missing) == -1, "exec of a missing program");
    CHECK(strstr(report, "rank 0: exit status 127"), "report: %s", report);
    return 0;
}

/* ---- process groups ------------------------------------------------------------------------- */

static volatile pid_t *grandchild;

static int spawn_rank(int rank, int size, void *arg)
{
    if (rank != 0)
        return 0;
    pid_t pid = fork();
    if (pid == 0) {
        sleep_s(60);
        _exit(0);
    }
    *grandchild = pid;
    return 0;
}

/* Whether @p pid still runs (not gone, not a zombie). */
static int alive(pid_t pid)
{
    char path[64], stat[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(stat, 1, sizeof(stat) - 1, f);
    fclose(f);
    stat[n] = '\0';
    const char *close_paren = strrchr(stat, ')');
    return close_paren && close_paren[1] == ' ' && close_paren[2] != 'Z';
}

static int case_process_group(void)
{
    grandchild =
        mmap(NULL, sizeof(*grandchild), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    CHECK(grandchild != MAP_FAILED, "mmap");
    zc_harness_opts_t o = {.nranks = 2};
    CHECK(run_captured(&o, spawn_rank, NULL, NULL) == 0, "rank 0 left a child behind");
    CHECK(*grandchild > 0, "no grandchild started");
    for (int i = 0; i < 100 && alive(*grandchild); i++)
        sleep_s(0.01);
    CHECK(!alive(*grandchild), "rank 0's child %d outlived the run", (int)*grandchild);
    return 0;
}

int main(int argc, char **argv)
{
    static const struct {
        const char *name;
        int (*fn)(void);
    } cases[] = {
        {"ok", case_ok},
        {"exit-status", case_exit_status},
        {"signal", case_signal},
        {"ucx-abort", case_ucx_abort},
        {"timeout", case_timeout},
        {"expect-fail", case_expect_fail},
        {"kill-at-step", case_kill_at_step},
        {"grace", case_grace},
        {"env-styles", case_env_styles},
        {"extra-env", case_extra_env},
        {"exec", case_exec},
        {"exec-child", exec_child},
        {"process-group", case_process_group},
    };
    const char *name = argc > 1 ? argv[1] : "";
    for (size_t i = 0; i < ZC_ARRAY_SIZE(cases); i++) {
        if (strcmp(name, cases[i].name) == 0) {
            int rc = cases[i].fn();
            if (cases[i].fn != exec_child)
                fprintf(stderr, "%s: %s\n", name, rc ? "FAILED" : "passed");
            return rc;
        }
    }
    fprintf(stderr, "usage: %s CASE (unknown case '%s')\n", argv[0], name);
    return 2;
}
