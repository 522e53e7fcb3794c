#include "common/log.h"
#include "common/timer.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

zc_log_level_t zc_log_level_current = ZC_LOG_WARN;

static zc_log_sink_fn log_sink;
static void *log_sink_arg;

/* zc_log_mute's nesting depth on this thread */
static _Thread_local int muted;

void zc_log_mute(int on)
{
    muted += on ? 1 : -1;
}

static const char *const level_names[] = {"error", "warn", "info", "debug", "trace"};

void zc_log_set_level(zc_log_level_t level)
{
    zc_log_level_current = level;
}

void zc_log_set_sink(zc_log_sink_fn sink, void *arg)
{
    log_sink = sink;
    log_sink_arg = arg;
}

const char *zc_log_level_name(zc_log_level_t level)
{
    return (unsigned)level < ZC_ARRAY_SIZE(level_names) ? level_names[level] : "?";
}

void zc_log_emit(zc_log_level_t level, const char *file, int line, const char *fmt, ...)
{
    char msg[1024];
    va_list ap;

    if (muted && zc_log_level_current < ZC_LOG_DEBUG)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);

    if (log_sink) {
        log_sink(log_sink_arg, level, file, line, msg);
        return;
    }
    const char *base = strrchr(file, '/');
    fprintf(stderr, "zipccl %s %s:%d: %s\n", zc_log_level_name(level), base ? base + 1 : file, line,
            msg);
}

int zc_log_ratelimit_pass(uint64_t *last_ns, uint64_t interval_ms)
{
    uint64_t now = zc_time_ns();
    uint64_t last = __atomic_load_n(last_ns, __ATOMIC_RELAXED);

    if (last != 0 && now - last < interval_ms * 1000000ull)
        return 0;
    return __atomic_compare_exchange_n(last_ns, &last, now, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}
