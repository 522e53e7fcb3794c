/*
 * What a rank of an integration test shares with the others: a check macro
 * that names the rank, the exit status of an expected failure, and a log sink
 * that keeps every message the rank logged (for asserting on error text) and
 * echoes it to stderr with the rank.
 */
#ifndef ZC_TESTS_RANK_CHECK_H
#define ZC_TESTS_RANK_CHECK_H

#include "common/log.h"

#include <stdio.h>
#include <string.h>

/* A rank's exit status for "failed as the test expects". */
#define FAILED_AS_EXPECTED 3

#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "rank %d: check failed: %s: ", my_rank, #cond);                        \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fprintf(stderr, "\n");                                                                 \
            return 1;                                                                              \
        }                                                                                          \
    } while (0)

static int my_rank = -1;

/* every message this rank logged */
static char logged[16384];

static void capture_sink(void *arg, zc_log_level_t level, const char *file, int line,
                         const char *msg)
{
    size_t used = strlen(logged);
    snprintf(logged + used, sizeof(logged) - used, "%s\n", msg);
    fprintf(stderr, "rank %d: %s: %s\n", my_rank, zc_log_level_name(level), msg);
}

#endif
