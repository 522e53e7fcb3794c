/*
 * CPU feature detection and runtime dispatch. Kernels come in variants per
 * level; the scalar one always exists and is the reference the tests compare
 * every other variant with.
 */
#ifndef ZC_COMMON_CPU_H
#define ZC_COMMON_CPU_H

#include <zipccl/zipccl_status.h>

typedef enum zc_cpu_level {
    ZC_CPU_SCALAR = 0,
    ZC_CPU_AVX2 = 1,   /* AVX2 + FMA + BMI2 + F16C */
    ZC_CPU_AVX512 = 2, /* AVX-512 F, BW, DQ, VL */
    ZC_CPU_NLEVELS
} zc_cpu_level_t;

/* The best level this processor supports. */
zc_cpu_level_t zc_cpu_detect(void);
/* The level kernels are chosen for: the detected one unless lowered by zc_cpu_set_level. */
zc_cpu_level_t zc_cpu_level(void);
/* Caps the level (ZIPCCL_CPU, tests). A level above zc_cpu_detect() is ZC_ERR_UNSUPPORTED. */
zc_status_t zc_cpu_set_level(zc_cpu_level_t level);
const char *zc_cpu_level_name(zc_cpu_level_t level);

/*
 * Picks the variant for the current level: the entry at the highest index
 * not above zc_cpu_level() that is non-NULL. variants[ZC_CPU_SCALAR] must be set.
 */
#define ZC_CPU_SELECT(variants) ((variants)[zc_cpu_select_index((const void *const *)(variants))])
int zc_cpu_select_index(const void *const variants[ZC_CPU_NLEVELS]);

#endif
