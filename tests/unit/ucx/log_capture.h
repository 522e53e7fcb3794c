/*
 * Log capture for tests whose ranks are threads (membs.h): every message the
 * library logs, with its level, in order, under a lock. A test file includes
 * this once; LOG_CAPTURE_MAX and LOG_CAPTURE_LEN, defined before, size the
 * record (messages past the first LOG_CAPTURE_MAX are counted, not kept).
 */
#ifndef ZC_TESTS_UCX_LOG_CAPTURE_H
#define ZC_TESTS_UCX_LOG_CAPTURE_H

#include "common/log.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

#ifndef LOG_CAPTURE_MAX
#define LOG_CAPTURE_MAX 64
#endif
#ifndef LOG_CAPTURE_LEN
#define LOG_CAPTURE_LEN 1024
#endif

static pthread_mutex_t cap_lock = PTHREAD_MUTEX_INITIALIZER;
static int cap_count;
static zc_log_level_t cap_level[LOG_CAPTURE_MAX];
static char cap_msg[LOG_CAPTURE_MAX][LOG_CAPTURE_LEN];

static inline void capture_sink(void *arg, zc_log_level_t level, const char *file, int line,
                                const char *msg)
{
    (void)arg, (void)file, (void)line;
    pthread_mutex_lock(&cap_lock);
    if (cap_count < LOG_CAPTURE_MAX) {
        cap_level[cap_count] = level;
        snprintf(cap_msg[cap_count], sizeof(cap_msg[0]), "%s", msg);
    }
    cap_count++;
    pthread_mutex_unlock(&cap_lock);
}

/* Forgets what was captured and captures from @p level up. */
static inline void capture_start(zc_log_level_t level)
{
    cap_count = 0;
    zc_log_set_level(level);
    zc_log_set_sink(capture_sink, NULL);
}

static inline void capture_stop(void)
{
    zc_log_set_sink(NULL, NULL);
}

/* Messages at @p level containing @p needle. */
static inline int captured(zc_log_level_t level, const char *needle)
{
    int n = 0;
    for (int i = 0; i < cap_count && i < LOG_CAPTURE_MAX; i++)
        n += cap_level[i] == level && strstr(cap_msg[i], needle) != NULL;
    return n;
}

/* The first message at @p level containing @p needle, or NULL. */
static inline const char *captured_msg(zc_log_level_t level, const char *needle)
{
    for (int i = 0; i < cap_count && i < LOG_CAPTURE_MAX; i++)
        if (cap_level[i] == level && strstr(cap_msg[i], needle))
            return cap_msg[i];
    return NULL;
}

/* Messages at any level containing @p needle. */
static inline int captured_count(const char *needle)
{
    int n = 0;
    for (int i = 0; i < cap_count && i < LOG_CAPTURE_MAX; i++)
        n += strstr(cap_msg[i], needle) != NULL;
    return n;
}

/* The first captured message containing every one of @p needles (NULL-terminated), or NULL. */
static inline const char *captured_with(const char *const *needles)
{
    for (int i = 0; i < cap_count && i < LOG_CAPTURE_MAX; i++) {
        int all = 1;
        for (const char *const *n = needles; *n; n++)
            all &= strstr(cap_msg[i], *n) != NULL;
        if (all)
            return cap_msg[i];
    }
    return NULL;
}

#endif
