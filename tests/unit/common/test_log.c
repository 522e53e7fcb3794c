/* Logging: level filtering before argument evaluation, sinks, once and rate-limited variants. */
#include "common/log.h"
#include "common/timer.h"

#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <stdio.h>
#include <string.h>

#define MAX_CAPTURED 16

typedef struct captured {
    int count;
    zc_log_level_t level[MAX_CAPTURED];
    int line[MAX_CAPTURED];
    char file[MAX_CAPTURED][256];
    char msg[MAX_CAPTURED][256];
} captured_t;

static captured_t cap;

static void capture_sink(void *arg, zc_log_level_t level, const char *file, int line,
                         const char *msg)
{
    captured_t *c = arg;
    if (c->count < MAX_CAPTURED) {
        c->level[c->count] = level;
        c->line[c->count] = line;
        snprintf(c->file[c->count], sizeof(c->file[0]), "%s", file);
        snprintf(c->msg[c->count], sizeof(c->msg[0]), "%s", msg);
    }
    c->count++;
}

static void setup(void)
{
    memset(&cap, 0, sizeof(cap));
    zc_log_set_level(ZC_LOG_WARN);
    zc_log_set_sink(capture_sink, &cap);
}

static void teardown(void)
{
    zc_log_set_sink(NULL, NULL);
    zc_log_set_level(ZC_LOG_WARN);
}

TestSuite(log, .init = setup, .fini = teardown);

static int evaluated;

static int side_effect(void)
{
    return ++evaluated;
}

Test(log, disabled_level_does_not_evaluate_arguments)
{
    evaluated = 0;
    ZC_INFO("info %d", side_effect());
    ZC_DEBUG("debug %d", side_effect());
    ZC_TRACE("trace %d", side_effect());
    ZC_LOG(ZC_LOG_DEBUG, "log %d", side_effect());
    ZC_LOG_ONCE(ZC_LOG_INFO, "once %d", side_effect());
    ZC_LOG_RATELIMIT(ZC_LOG_TRACE, 1, "ratelimit %d", side_effect());
    cr_assert_eq(evaluated, 0, "a disabled message evaluated its arguments %d times", evaluated);
    cr_assert_eq(cap.count, 0, "a disabled message reached the sink");

    ZC_WARN("warn %d", side_effect());
    ZC_ERROR("error %d", side_effect());
    cr_assert_eq(evaluated, 2);
    cr_assert_eq(cap.count, 2);
    cr_assert_str_eq(cap.msg[0], "warn 1");
    cr_assert_str_eq(cap.msg[1], "error 2");
}

Test(log, every_level_filters_the_ones_above_it)
{
    for (int threshold = ZC_LOG_ERROR; threshold <= ZC_LOG_TRACE; threshold++) {
        zc_log_set_level((zc_log_level_t)threshold);
        cap.count = 0;
        evaluated = 0;
        ZC_ERROR("%d", side_effect());
        ZC_WARN("%d", side_effect());
        ZC_INFO("%d", side_effect());
        ZC_DEBUG("%d", side_effect());
        ZC_TRACE("%d", side_effect());
        cr_assert_eq(cap.count, threshold + 1, "threshold %d", threshold);
        cr_assert_eq(evaluated, threshold + 1, "threshold %d", threshold);
        for (int i = 0; i < cap.count; i++)
            cr_assert_eq(cap.level[i], (zc_log_level_t)i, "threshold %d message %d", threshold, i);
    }
}

Test(log, sink_receives_level_file_line_and_message)
{
    int line = __LINE__ + 1;
    ZC_WARN("peer %d timed out after %d s in %s", 3, 30, "allgather");
    cr_assert_eq(cap.count, 1);
    cr_assert_eq(cap.level[0], ZC_LOG_WARN);
    cr_assert_eq(cap.line[0], line);
    cr_assert_str_eq(cap.msg[0], "peer 3 timed out after 30 s in allgather");
    const char *base = strrchr(cap.file[0], '/');
    cr_assert_str_eq(base ? base + 1 : cap.file[0], "test_log.c");
}

Test(log, long_message_is_truncated_not_overflowed)
{
    char big[4096];
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    ZC_ERROR("%s", big);
    cr_assert_eq(cap.count, 1);
    /* The capture buffer holds 255 characters; the sink got at least that many x's. */
    cr_assert_eq(strspn(cap.msg[0], "x"), sizeof(cap.msg[0]) - 1);
}

Test(log, null_sink_restores_stderr, .init = cr_redirect_stderr)
{
    setup();
    zc_log_set_sink(NULL, NULL);
    int line = __LINE__ + 1;
    ZC_WARN("shard %d of %d", 2, 8);
    fflush(stderr);
    cr_assert_eq(cap.count, 0, "the old sink still receives messages");

    char expected[128];
    snprintf(expected, sizeof(expected), "zipccl warn test_log.c:%d: shard 2 of 8\n", line);
    cr_assert_stderr_eq_str(expected);
}

Test(log, once_emits_once_across_a_loop)
{
    for (int i = 0; i < 100; i++)
        ZC_LOG_ONCE(ZC_LOG_WARN, "once %d", i);
    cr_assert_eq(cap.count, 1);
    cr_assert_str_eq(cap.msg[0], "once 0");

    /* A second call site has its own flag. */
    for (int i = 0; i < 100; i++) {
        ZC_LOG_ONCE(ZC_LOG_ERROR, "first site %d", i);
        ZC_LOG_ONCE(ZC_LOG_ERROR, "second site %d", i);
    }
    cr_assert_eq(cap.count, 3);
    cr_assert_str_eq(cap.msg[1], "first site 0");
    cr_assert_str_eq(cap.msg[2], "second site 0");
}

Test(log, once_waits_until_its_level_is_enabled)
{
    /* Reached while disabled, it is not spent: it fires on the first enabled pass. */
    for (int pass = 0; pass < 3; pass++) {
        zc_log_set_level(pass == 0 ? ZC_LOG_WARN : ZC_LOG_DEBUG);
        ZC_LOG_ONCE(ZC_LOG_DEBUG, "pass %d", pass);
    }
    cr_assert_eq(cap.count, 1);
    cr_assert_str_eq(cap.msg[0], "pass 1");
}

Test(log, ratelimit_emits_once_in_a_tight_loop)
{
    uint64_t start = zc_time_ns();
    for (int i = 0; i < 1000; i++)
        ZC_LOG_RATELIMIT(ZC_LOG_WARN, 10000, "retry %d", i);
    uint64_t elapsed_ms = (zc_time_ns() - start) / 1000000;
    /* The bound holds only if the loop itself took under the 10 s interval. */
    cr_assert_lt(elapsed_ms, 10000);
    cr_assert_eq(cap.count, 1);
    cr_assert_str_eq(cap.msg[0], "retry 0");
}

Test(log, ratelimit_pass_reopens_after_the_interval)
{
    uint64_t last = 0;
    cr_assert_eq(zc_log_ratelimit_pass(&last, 10000), 1, "the first call must pass");
    cr_assert_neq(last, 0);
    uint64_t stamp = last;
    cr_assert_eq(zc_log_ratelimit_pass(&last, 10000), 0);
    cr_assert_eq(last, stamp, "a refused call moved the timestamp");

    /* 5 s ago is still inside the 10 s window (catches a wrong time unit). */
    last = zc_time_ns() - 5ull * 1000000000ull;
    stamp = last;
    cr_assert_eq(zc_log_ratelimit_pass(&last, 10000), 0);
    cr_assert_eq(last, stamp);

    /* Pretend the last message was 20 s ago: the 10 s window is over. */
    last = zc_time_ns() - 20ull * 1000000000ull;
    cr_assert_eq(zc_log_ratelimit_pass(&last, 10000), 1);
    cr_assert_eq(zc_log_ratelimit_pass(&last, 10000), 0);

    /* Interval 0 never limits. */
    last = 0;
    for (int i = 0; i < 10; i++)
        cr_assert_eq(zc_log_ratelimit_pass(&last, 0), 1, "call %d", i);
}

Test(log, level_names)
{
    static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
    for (int i = 0; i <= ZC_LOG_TRACE; i++)
        cr_assert_str_eq(zc_log_level_name((zc_log_level_t)i), names[i]);
    cr_assert_str_eq(zc_log_level_name((zc_log_level_t)5), "?");
    cr_assert_str_eq(zc_log_level_name((zc_log_level_t)-1), "?");
}
