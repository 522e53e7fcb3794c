/*
 * Logging: five levels, a stderr sink by default and a pluggable sink (the
 * NCCL plugin routes messages through the logger NCCL hands to init).
 *
 * The level test happens before the arguments are evaluated, so a disabled
 * message costs one load and one branch. Hot paths do not log at all.
 */
#ifndef ZC_COMMON_LOG_H
#define ZC_COMMON_LOG_H

#include "common/compiler.h"

#include <stdint.h>

typedef enum zc_log_level {
    ZC_LOG_ERROR = 0,
    ZC_LOG_WARN = 1,
    ZC_LOG_INFO = 2,
    ZC_LOG_DEBUG = 3,
    ZC_LOG_TRACE = 4,
} zc_log_level_t;

/* A sink receives one formatted message without trailing newline. */
typedef void (*zc_log_sink_fn)(void *arg, zc_log_level_t level, const char *file, int line,
                               const char *msg);

extern zc_log_level_t zc_log_level_current;

void zc_log_set_level(zc_log_level_t level);
/*
 * Mutes (@p on non-zero) or unmutes this thread's messages, nestable, unless the
 * level is debug or trace: for work whose messages would mislead, such as a
 * communicator inside another that numbers its ranks differently.
 */
void zc_log_mute(int on);
/* Installs @p sink (NULL restores stderr). Not thread safe against concurrent logging. */
void zc_log_set_sink(zc_log_sink_fn sink, void *arg);
const char *zc_log_level_name(zc_log_level_t level);

void zc_log_emit(zc_log_level_t level, const char *file, int line, const char *fmt, ...)
    ZC_PRINTF(4, 5);

#define ZC_LOG_ENABLED(level) ((level) <= zc_log_level_current)

#define ZC_LOG(level, ...)                                                                         \
    do {                                                                                           \
        if (ZC_LOG_ENABLED(level))                                                                 \
            zc_log_emit(level, __FILE__, __LINE__, __VA_ARGS__);                                   \
    } while (0)

#define ZC_ERROR(...) ZC_LOG(ZC_LOG_ERROR, __VA_ARGS__)
#define ZC_WARN(...) ZC_LOG(ZC_LOG_WARN, __VA_ARGS__)
#define ZC_INFO(...) ZC_LOG(ZC_LOG_INFO, __VA_ARGS__)
#define ZC_DEBUG(...) ZC_LOG(ZC_LOG_DEBUG, __VA_ARGS__)
#define ZC_TRACE(...) ZC_LOG(ZC_LOG_TRACE, __VA_ARGS__)

/* Logs the first time this line is reached, never again in this process. */
#define ZC_LOG_ONCE(level, ...)                                                                    \
    do {                                                                                           \
        static int zc_log_once_done_;                                                              \
        if (ZC_LOG_ENABLED(level) &&                                                               \
            !__atomic_exchange_n(&zc_log_once_done_, 1, __ATOMIC_RELAXED))                         \
            zc_log_emit(level, __FILE__, __LINE__, __VA_ARGS__);                                   \
    } while (0)

/* Logs at most once per @p interval_ms milliseconds from this line. */
int zc_log_ratelimit_pass(uint64_t *last_ns, uint64_t interval_ms);
#define ZC_LOG_RATELIMIT(level, interval_ms, ...)                                                  \
    do {                                                                                           \
        static uint64_t zc_log_rl_last_;                                                           \
        if (ZC_LOG_ENABLED(level) && zc_log_ratelimit_pass(&zc_log_rl_last_, (interval_ms)))       \
            zc_log_emit(level, __FILE__, __LINE__, __VA_ARGS__);                                   \
    } while (0)

#endif
