#include "common/cpu.h"
#include "common/compiler.h"

#if defined(__x86_64__)
#include <cpuid.h>

/* Not every compiler's __builtin_cpu_supports knows "f16c": CPUID.1:ECX bit 29. */
static int has_f16c(void)
{
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c & bit_F16C) != 0;
}
#endif

static zc_cpu_level_t cpu_cap = ZC_CPU_NLEVELS;

/*
 * What this processor has, asked once: kernels look their level up on every
 * call, and has_f16c's CPUID is slow (a VM exit under a hypervisor).
 */
static int detected_level = -1;

static zc_cpu_level_t detect(void)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return ZC_CPU_AVX512;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
        __builtin_cpu_supports("bmi2") && has_f16c())
        return ZC_CPU_AVX2;
#endif
    return ZC_CPU_SCALAR;
}

zc_cpu_level_t zc_cpu_detect(void)
{
    int level = __atomic_load_n(&detected_level, __ATOMIC_RELAXED);
    if (level < 0) {
        level = (int)detect(); /* every thread finds the same */
        __atomic_store_n(&detected_level, level, __ATOMIC_RELAXED);
    }
    return (zc_cpu_level_t)level;
}

zc_cpu_level_t zc_cpu_level(void)
{
    zc_cpu_level_t detected = zc_cpu_detect();
    zc_cpu_level_t cap = __atomic_load_n(&cpu_cap, __ATOMIC_RELAXED);
    return cap < detected ? cap : detected;
}

zc_status_t zc_cpu_set_level(zc_cpu_level_t level)
{
    if ((unsigned)level >= ZC_CPU_NLEVELS)
        return ZC_ERR_INVALID_ARG;
    if (level > zc_cpu_detect())
        return ZC_ERR_UNSUPPORTED;
    __atomic_store_n(&cpu_cap, level, __ATOMIC_RELAXED);
    return ZC_OK;
}

const char *zc_cpu_level_name(zc_cpu_level_t level)
{
    static const char *const names[] = {"scalar", "avx2", "avx512"};
    return (unsigned)level < ZC_ARRAY_SIZE(names) ? names[level] : "?";
}

int zc_cpu_select_index(const void *const variants[ZC_CPU_NLEVELS])
{
    for (int i = (int)zc_cpu_level(); i > 0; i--)
        if (variants[i])
            return i;
    return 0;
}
