/* Compiler helpers and the error-propagation macros used in every layer. */
#ifndef ZC_COMMON_COMPILER_H
#define ZC_COMMON_COMPILER_H

#define ZC_EXPORT __attribute__((visibility("default")))
#define ZC_LIKELY(x) __builtin_expect(!!(x), 1)
#define ZC_UNLIKELY(x) __builtin_expect(!!(x), 0)
#define ZC_ARRAY_SIZE(a) (sizeof(a) / sizeof((a)[0]))
#define ZC_PRINTF(fmt, args) __attribute__((format(printf, fmt, args)))
#define ZC_MIN(a, b) ((a) < (b) ? (a) : (b))
#define ZC_MAX(a, b) ((a) > (b) ? (a) : (b))
#define ZC_DIV_UP(a, b) (((a) + (b)-1) / (b))

/*
 * A plain-C loop built three times, picked when the library loads: for
 * AVX-512, AVX2 and the baseline. Lanes change, not the order of any sum
 * (C11 mode: no contraction), so every clone gives the same bits; and the
 * loops that run between AVX-512 kernels do not run as SSE2 there. "avx512f",
 * not "arch=skylake-avx512": that one's tuning (256-bit preference) took
 * GradiVeQ's decode, written in 16-lane vectors, from 5.5 to 0.7 GB/s.
 */
/*
 * A bit-serial loop (variable shifts: Elias coding) built twice: with BMI2,
 * whose shlx/shrx take one micro-op where the baseline's shift by %cl takes
 * three and writes the flags, and for the baseline. Integer work: the same
 * bits from both.
 */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__CUDACC__)
#define ZC_WIDE_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#define ZC_SHIFT_CLONES __attribute__((target_clones("bmi2", "default")))
#else
#define ZC_WIDE_CLONES
#define ZC_SHIFT_CLONES
#endif

/* Inline helpers that CUDA code (codec/cuda) calls on the device as well: the same bits there. */
#ifdef __CUDACC__
#define ZC_HD __host__ __device__
#else
#define ZC_HD
#endif

/* Return the status of @p expr from the calling function when it is an error. */
#define ZC_CHECK(expr)                                                                             \
    do {                                                                                           \
        zc_status_t zc_check_status_ = (expr);                                                     \
        if (ZC_UNLIKELY(zc_check_status_ < 0))                                                     \
            return zc_check_status_;                                                               \
    } while (0)

/* Store the status of @p expr in @p status and jump to @p label when it is an error. */
#define ZC_CHECK_GOTO(expr, status, label)                                                         \
    do {                                                                                           \
        (status) = (expr);                                                                         \
        if (ZC_UNLIKELY((status) < 0))                                                             \
            goto label;                                                                            \
    } while (0)

#endif
