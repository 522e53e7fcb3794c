/* Top-k scalar kernels: the reference every SIMD variant is tested against. */
#include "codec/topk/topk_int.h"
#include "common/cpu.h"

/*
 * Branch-free: every value stores its position and the count advances only for
 * kept ones (about 1% of them, at random: a branch would mispredict). The stop
 * test runs once per block, so a block can write up to 64 entries past cap.
 */
static uint64_t collect_scalar(const float *x, size_t n, uint64_t first, uint32_t thr,
                               uint64_t *idx, uint64_t cap)
{
    uint64_t c = 0;

    for (size_t i0 = 0; i0 < n; i0 += 64) {
        size_t end = n - i0 < 64 ? n : i0 + 64;
        for (size_t i = i0; i < end; i++) {
            idx[c] = first + i;
            c += zc_topk_key(x[i]) >= thr;
        }
        if (c > cap)
            break;
    }
    return c;
}

/* The residual's sums, past the point where add_collect stops collecting. */
void zc_topk_add_rest(const float *x, float *res, size_t n)
{
    for (size_t i = 0; i < n; i++)
        res[i] += x[i];
}

/* collect_scalar with the sum stored first: the same blocks, the same early stop of the positions.
 */
static uint64_t add_collect_scalar(const float *x, float *res, size_t n, uint64_t first,
                                   uint32_t thr, uint64_t *idx, uint64_t cap)
{
    uint64_t c = 0;
    size_t i0 = 0;

    for (; i0 < n && c <= cap; i0 += 64) {
        size_t end = n - i0 < 64 ? n : i0 + 64;
        for (size_t i = i0; i < end; i++) {
            float r = res[i] + x[i];
            res[i] = r;
            idx[c] = first + i;
            c += zc_topk_key(r) >= thr;
        }
    }
    if (i0 < n)
        zc_topk_add_rest(x + i0, res + i0, n - i0);
    return c;
}

const zc_topk_kernels_t zc_topk_kernels_scalar = {
    .collect = collect_scalar,
    .add_collect = add_collect_scalar,
};

const zc_topk_kernels_t *zc_topk_kernels(void)
{
    static const zc_topk_kernels_t *const variants[ZC_CPU_NLEVELS] = {
        [ZC_CPU_SCALAR] = &zc_topk_kernels_scalar,
#if defined(__x86_64__)
        [ZC_CPU_AVX2] = &zc_topk_kernels_avx2,
        [ZC_CPU_AVX512] = &zc_topk_kernels_avx512,
#endif
    };
    return ZC_CPU_SELECT(variants);
}
