#ifndef ZC_COMMON_TIMER_H
#define ZC_COMMON_TIMER_H

#include <stdint.h>
#include <time.h>

/* Monotonic time in nanoseconds. */
static inline uint64_t zc_time_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

#endif
