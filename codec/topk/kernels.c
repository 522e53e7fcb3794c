/* Top-k scalar kernels: the reference every SIMD variant is tested against. */
#include "codec/topk/topk_int.h"
#include "common/cpu.h"

/* The residual's sums, past the point where add_collect stops collecting. */
void zc_topk_add_rest(const float *x, float *res, size_t n)
{
    for (size_t i = 0; i < n; i++)
        res[i] += x[i];
}

/*
 * Branch-free: every value stores its position and the count advances only for
 * kept ones (about 1% of them, at random: a branch would mispredict). The stop
 * test runs once per block, so a block can write up to 64 entries past cap.
 * With @p res, the sums res + x are stored and collected (add_collect).
 */
static inline uint64_t collect_blocks(const float *x, float *res, size_t n, uint64_t first,
                                      uint32_t thr, uint64_t *idx, uint64_t cap)
{
    uint64_t c = 0;

    for (size_t i0 = 0; i0 < n; i0 += 64) {
        c = zc_topk_collect_steps(x, res, i0, n - i0 < 64 ? n : i0 + 64, first, thr, idx, c);
        if (c > cap)
            return zc_topk_past_cap(x, res, n - i0 < 64 ? n : i0 + 64, n, c);
    }
    return c;
}

static uint64_t collect_scalar(const float *x, size_t n, uint64_t first, uint32_t thr,
                               uint64_t *idx, uint64_t cap)
{
    return collect_blocks(x, NULL, n, first, thr, idx, cap);
}

static uint64_t add_collect_scalar(const float *x, float *res, size_t n, uint64_t first,
                                   uint32_t thr, uint64_t *idx, uint64_t cap)
{
    return collect_blocks(x, res, n, first, thr, idx, cap);
}

static uint64_t bucket_scalar(const float *x, size_t n, uint32_t lo, uint32_t width, uint32_t *keys,
                              uint64_t cap)
{
    uint64_t c = 0;

    for (size_t i0 = 0; i0 < n && c <= cap; i0 += 64)
        c = zc_topk_bucket_steps(x, i0, n - i0 < 64 ? n : i0 + 64, lo, width, keys, c);
    return c;
}

const zc_topk_kernels_t zc_topk_kernels_scalar = {
    .collect = collect_scalar,
    .add_collect = add_collect_scalar,
    .bucket = bucket_scalar,
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
