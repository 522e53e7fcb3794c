/*
 * Multi-process test harness: runs N ranks of a test on loopback, each in its
 * own process, with a deadline, and reports which rank failed and where.
 *
 *   static int rank_main(int rank, int size, void *arg) { ... return 0; }
 *   zc_harness_opts_t o = {.nranks = 4, .deadline_s = 60};
 *   cr_assert_eq(zc_harness_run(&o, rank_main, NULL), 0);
 *
 * Each child gets ZIPCCL_RANK, ZIPCCL_SIZE, ZIPCCL_ROOT=127.0.0.1:<free port>
 * and ZIPCCL_JOB_ID in its environment (unless opts->env_style asks for another
 * launcher's convention), runs the function and exits with its return value.
 * The parent waits until all exit or the deadline passes, kills the rest, and
 * prints one line per failed rank: exit status or signal, or "timed out after
 * 30 s in <step>" with the last step the rank announced with zc_harness_step.
 */
#ifndef ZC_TESTS_HARNESS_H
#define ZC_TESTS_HARNESS_H

typedef int (*zc_rank_main_fn)(int rank, int size, void *arg);

typedef enum zc_harness_env_style {
    ZC_HARNESS_ENV_ZIPCCL = 0, /* ZIPCCL_RANK, ZIPCCL_SIZE, ZIPCCL_ROOT */
    ZC_HARNESS_ENV_TORCHRUN,   /* RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT */
    ZC_HARNESS_ENV_OPENMPI,    /* OMPI_COMM_WORLD_RANK/SIZE + ZIPCCL_ROOT */
    ZC_HARNESS_ENV_SLURM,      /* SLURM_PROCID, SLURM_NTASKS + ZIPCCL_ROOT */
} zc_harness_env_style_t;

typedef struct zc_harness_opts {
    int nranks;
    double deadline_s; /* whole run; 0 means 60 */
    zc_harness_env_style_t env_style;
    int kill_rank;        /* >= 0: SIGKILL this rank ... */
    double kill_after_s;  /* ... this long after it announced the step named kill_at_step */
    const char *kill_at_step;
    /* ranks expected to fail (bit r set: rank r must exit non-zero, e.g. the survivors
     * of a killed peer that must report an error); 0: every rank must succeed */
    unsigned long expect_fail_mask;
} zc_harness_opts_t;

/*
 * Runs the ranks; returns 0 when every rank behaved as expected (exit 0, or
 * non-zero where expect_fail_mask says so, and the killed rank killed), else -1
 * after printing why to stderr.
 */
int zc_harness_run(const zc_harness_opts_t *opts, zc_rank_main_fn fn, void *arg);

/* In a rank: names the step it is in (shown if it times out); printf-style. */
void zc_harness_step(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* A free TCP port on 127.0.0.1 (bound and released; the harness uses it for the root). */
int zc_harness_free_port(void);

#endif
