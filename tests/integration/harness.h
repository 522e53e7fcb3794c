/*
 * Multi-process test harness: runs N ranks of a test on loopback, each in its
 * own process, with a deadline, and reports which rank failed and where.
 *
 *   static int rank_main(int rank, int size, void *arg) { ... return 0; }
 *   zc_harness_opts_t o = {.nranks = 4, .deadline_s = 60};
 *   if (zc_harness_run(&o, rank_main, NULL) != 0) ... the test failed
 *
 * Each child gets ZIPCCL_RANK, ZIPCCL_SIZE, ZIPCCL_ROOT=127.0.0.1:<free port>
 * and ZIPCCL_JOB_ID in its environment (unless opts->env_style asks for another
 * launcher's convention; the variables of the other conventions are removed),
 * runs the function and exits with its return value. The parent waits until all
 * exit or the deadline passes, kills the rest, and prints one line per rank that
 * did not behave as expected: "rank 2: exit status 1", "rank 2: killed by signal
 * 11", "rank 2: timed out after 30 s in step 'allgather 7'", with the last step
 * the rank announced with zc_harness_step.
 *
 * Every rank runs in its own process group, which the harness kills (SIGKILL)
 * at the deadline, so helpers a rank started die with it; a rank also dies when
 * the test program does (PR_SET_PDEATHSIG). When a rank fails unexpectedly, the
 * others get 5 more seconds (less if the deadline comes first) to finish or fail
 * on their own, then they are killed: a broken test does not wait for its deadline.
 *
 * A rank's stderr goes through a memfd that the harness copies to its own stderr
 * as it grows. A run whose only failures are ranks aborted by UCX 1.13's tcp
 * assertion (a completion invoked twice after a peer failed mid-transfer, which
 * the rank's stderr shows) runs again, once, saying so (docs/failures.md).
 *
 * Safe to call from a Criterion test (the children never return into Criterion)
 * or from a plain main(). Not thread safe: one run at a time per process.
 */
#ifndef ZC_TESTS_HARNESS_H
#define ZC_TESTS_HARNESS_H

typedef int (*zc_rank_main_fn)(int rank, int size, void *arg);

/* Most ranks one run starts (expect_fail_mask has one bit per rank). */
#define ZC_HARNESS_MAX_RANKS 64

typedef enum zc_harness_env_style {
    ZC_HARNESS_ENV_ZIPCCL = 0, /* ZIPCCL_RANK, ZIPCCL_SIZE, ZIPCCL_ROOT, ZIPCCL_JOB_ID */
    ZC_HARNESS_ENV_TORCHRUN,   /* RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT (the
                                  root's port - 1: the bootstrap listens on MASTER_PORT + 1),
                                  TORCHELASTIC_RUN_ID */
    ZC_HARNESS_ENV_OPENMPI,    /* OMPI_COMM_WORLD_RANK/SIZE/LOCAL_RANK, OMPI_MCA_ess_base_jobid
                                  + ZIPCCL_ROOT */
    ZC_HARNESS_ENV_SLURM,      /* SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_JOB_ID,
                                  SLURM_STEP_ID + ZIPCCL_ROOT */
} zc_harness_env_style_t;

typedef struct zc_harness_opts {
    int nranks;        /* 1..ZC_HARNESS_MAX_RANKS */
    double deadline_s; /* whole run; 0 means 60 */
    zc_harness_env_style_t env_style;
    /*
     * A kill, requested by kill_at_step != NULL or kill_after_s > 0 (so that a
     * zeroed struct kills nobody): SIGKILL rank kill_rank kill_after_s seconds
     * after it announced a step that starts with kill_at_step (NULL: after the
     * start). The killed rank must be killed by it; exiting before is a failure.
     */
    int kill_rank;
    double kill_after_s;
    const char *kill_at_step;
    /* ranks expected to fail (bit r set: rank r must exit non-zero, e.g. the survivors
     * of a killed peer that must report an error); 0: every rank must succeed */
    unsigned long expect_fail_mask;
    /* non-zero: the exit status those ranks must have (a test's "failed as expected"
     * code, so that failing for another reason is still caught) */
    int expect_fail_status;
    /* NULL or a NULL-terminated list of "NAME=VALUE" set in every rank after the
     * style's variables (a later entry replaces an earlier one of the same name) */
    char *const *env;
} zc_harness_opts_t;

/*
 * Runs the ranks; returns 0 when every rank behaved as expected (exit 0, or
 * non-zero where expect_fail_mask says so, and the killed rank killed), else -1
 * after printing why to stderr.
 */
int zc_harness_run(const zc_harness_opts_t *opts, zc_rank_main_fn fn, void *arg);

/*
 * As zc_harness_run, but every rank execs @p argv (argv[0] looked up in PATH) with
 * the environment above; the rank is only in the environment. A program linked
 * with the harness can still announce steps: ZC_HARNESS_SHM_FD and ZC_HARNESS_RANK
 * tell zc_harness_step where. Exit status 127: the exec failed.
 */
int zc_harness_exec(const zc_harness_opts_t *opts, char *const argv[]);

/* In a rank: names the step it is in (shown if it times out); printf-style, at most
 * 111 characters kept. Does nothing outside a harness rank. Async-signal unsafe. */
void zc_harness_step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* In a rank: "127.0.0.1:<port>" where rank 0's bootstrap listens in this run,
 * whatever the env style (from ZC_HARNESS_ROOT); NULL outside a harness rank. */
const char *zc_harness_root(void);

/* A free TCP port on 127.0.0.1 (bound and released; the harness uses it for the root);
 * -1 if none could be bound. */
int zc_harness_free_port(void);

#endif
