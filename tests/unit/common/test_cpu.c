/* CPU level detection, capping and ZC_CPU_SELECT dispatch. */
#include "common/cpu.h"

#include <criterion/criterion.h>

#include <string.h>

static zc_cpu_level_t detected;

static void setup(void)
{
    detected = zc_cpu_detect();
}

/* The cap is process state: leave it uncapped (at the detected level) for whatever runs next. */
static void teardown(void)
{
    cr_assert_eq(zc_cpu_set_level(detected), ZC_OK);
    cr_assert_eq(zc_cpu_level(), detected);
}

TestSuite(cpu, .init = setup, .fini = teardown);

Test(cpu, detect_is_a_level_and_stable)
{
    cr_assert_geq((int)detected, (int)ZC_CPU_SCALAR);
    cr_assert_lt((int)detected, (int)ZC_CPU_NLEVELS);
    for (int i = 0; i < 10; i++)
        cr_assert_eq(zc_cpu_detect(), detected);
    /* Uncapped at start, the current level is the detected one. */
    cr_assert_eq(zc_cpu_level(), detected);
}

Test(cpu, detect_matches_builtin_features)
{
#if defined(__x86_64__)
    __builtin_cpu_init();
    int avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
               __builtin_cpu_supports("bmi2");
    int avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                 __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
    zc_cpu_level_t expected = avx512 ? ZC_CPU_AVX512 : avx2 ? ZC_CPU_AVX2 : ZC_CPU_SCALAR;
    cr_assert_eq(detected, expected, "detected %s, features say %s", zc_cpu_level_name(detected),
                 zc_cpu_level_name(expected));
#else
    cr_assert_eq(detected, ZC_CPU_SCALAR);
#endif
}

Test(cpu, set_level_at_or_below_detect)
{
    for (int level = ZC_CPU_SCALAR; level <= (int)detected; level++) {
        cr_assert_eq(zc_cpu_set_level((zc_cpu_level_t)level), ZC_OK, "level %d", level);
        cr_assert_eq(zc_cpu_level(), (zc_cpu_level_t)level);
    }
    /* Raising the cap again after lowering it works too. */
    cr_assert_eq(zc_cpu_set_level(ZC_CPU_SCALAR), ZC_OK);
    cr_assert_eq(zc_cpu_set_level(detected), ZC_OK);
    cr_assert_eq(zc_cpu_level(), detected);
}

Test(cpu, set_level_above_detect_is_unsupported)
{
    cr_assert_eq(zc_cpu_set_level(ZC_CPU_SCALAR), ZC_OK);
    for (int level = (int)detected + 1; level < ZC_CPU_NLEVELS; level++) {
        cr_assert_eq(zc_cpu_set_level((zc_cpu_level_t)level), ZC_ERR_UNSUPPORTED, "level %d",
                     level);
        cr_assert_eq(zc_cpu_level(), ZC_CPU_SCALAR, "a refused level changed the cap");
    }
}

Test(cpu, set_level_out_of_range_is_invalid)
{
    cr_assert_eq(zc_cpu_set_level(ZC_CPU_NLEVELS), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_cpu_set_level((zc_cpu_level_t)-1), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_cpu_set_level((zc_cpu_level_t)100), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_cpu_level(), detected);
}

Test(cpu, level_names)
{
    cr_assert_str_eq(zc_cpu_level_name(ZC_CPU_SCALAR), "scalar");
    cr_assert_str_eq(zc_cpu_level_name(ZC_CPU_AVX2), "avx2");
    cr_assert_str_eq(zc_cpu_level_name(ZC_CPU_AVX512), "avx512");
    cr_assert_str_eq(zc_cpu_level_name(ZC_CPU_NLEVELS), "?");
    cr_assert_str_eq(zc_cpu_level_name((zc_cpu_level_t)-1), "?");
}

typedef int (*kernel_fn)(void);
static int k_scalar(void)
{
    return ZC_CPU_SCALAR;
}
static int k_avx2(void)
{
    return ZC_CPU_AVX2;
}
static int k_avx512(void)
{
    return ZC_CPU_AVX512;
}

/* The variant ZC_CPU_SELECT should pick from @p present (bit i: variant i exists) at @p level. */
static int expected_pick(unsigned present, int level)
{
    for (int i = level; i > 0; i--)
        if (present & (1u << i))
            return i;
    return 0;
}

Test(cpu, select_picks_highest_present_at_or_below_level)
{
    const kernel_fn all[ZC_CPU_NLEVELS] = {k_scalar, k_avx2, k_avx512};

    /* Every subset of the SIMD variants (scalar always present) at every allowed level. */
    for (unsigned present = 1; present < (1u << ZC_CPU_NLEVELS); present += 2) {
        kernel_fn variants[ZC_CPU_NLEVELS];
        for (int i = 0; i < ZC_CPU_NLEVELS; i++)
            variants[i] = (present & (1u << i)) ? all[i] : NULL;
        for (int level = ZC_CPU_SCALAR; level <= (int)detected; level++) {
            cr_assert_eq(zc_cpu_set_level((zc_cpu_level_t)level), ZC_OK);
            int want = expected_pick(present, level);
            cr_assert_eq(zc_cpu_select_index((const void *const *)variants), want,
                         "present %#x level %d", present, level);
            kernel_fn k = ZC_CPU_SELECT(variants);
            cr_assert_not_null(k);
            cr_assert_eq(k(), want, "present %#x level %d picked %d", present, level, k());
        }
    }
}

Test(cpu, select_never_picks_above_detect)
{
    /* Uncapped, a variant for a level the processor lacks must not be chosen. */
    const kernel_fn variants[ZC_CPU_NLEVELS] = {k_scalar, k_avx2, k_avx512};
    kernel_fn k = ZC_CPU_SELECT(variants);
    cr_assert_eq(k(), (int)detected);
}

Test(cpu, select_scalar_only_falls_back)
{
    const kernel_fn variants[ZC_CPU_NLEVELS] = {k_scalar, NULL, NULL};
    for (int level = ZC_CPU_SCALAR; level <= (int)detected; level++) {
        cr_assert_eq(zc_cpu_set_level((zc_cpu_level_t)level), ZC_OK);
        cr_assert_eq(ZC_CPU_SELECT(variants), k_scalar, "level %d", level);
    }
}
