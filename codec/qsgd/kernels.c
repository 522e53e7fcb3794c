/* QSGD scalar kernels: the reference every SIMD variant is tested against. */
#include "codec/qsgd/qsgd.h"
#include "common/half.h"
#include "common/philox.h"

#include <math.h>

void zc_qsgd_draw_group(const zc_qsgd_rng_t *rng, uint64_t group, uint32_t u[64])
{
    for (uint32_t lane = 0; lane < 16; lane++) {
        uint32_t ctr[4] = {(uint32_t)(group * 16) + lane, rng->counter, rng->rank, rng->stream};
        uint32_t out[4];
        zc_philox4x32_10(ctr, rng->key, out);
        for (int w = 0; w < 4; w++)
            u[w * 16 + lane] = out[w];
    }
}

static uint32_t max_abs_bits_scalar(const float *x, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t a = zc_f32_bits(x[i]) & 0x7fffffffu;
        m = a > m ? a : m;
    }
    return m;
}

/*
 * Sixteen lane sums, then halves added (8, 4, 2, 1): the order SIMD and GPU
 * variants can follow exactly, so an L2 scale is bit-identical everywhere.
 * Products of two floats are exact in double, so fused and unfused agree.
 */
static double sum_squares_scalar(const float *x, size_t n)
{
    double p[16] = {0};
    for (size_t i = 0; i < n; i++)
        p[i & 15] += (double)x[i] * x[i];
    for (int w = 8; w > 0; w >>= 1)
        for (int j = 0; j < w; j++)
            p[j] += p[j + w];
    return p[0];
}

static void quantize_scalar(const float *x, size_t n, uint64_t first, float inv, uint32_t s,
                            const zc_qsgd_rng_t *rng, int32_t *levels)
{
    uint32_t u[64];
    uint64_t group = UINT64_MAX;
    const float smax = (float)s;

    for (size_t i = 0; i < n; i++) {
        uint64_t e = first + i;
        if (e >> 6 != group) {
            group = e >> 6;
            zc_qsgd_draw_group(rng, group, u);
        }
        float r = fminf(fabsf(x[i]) * inv, smax);
        uint32_t k = (uint32_t)r;
        /* frac(r) has at most 24 significant bits, so frac * 2^32 is exact and < 2^32 */
        uint32_t t = (uint32_t)((r - (float)k) * 4294967296.0f);
        k += u[e & 63] < t;
        levels[i] = signbit(x[i]) ? -(int32_t)k : (int32_t)k;
    }
}

static void pack_scalar(const int32_t *levels, size_t n, unsigned b, uint8_t *dst)
{
    zc_bitwriter_t w;
    const uint32_t sign = UINT32_C(1) << (b - 1);

    zc_bw_init(&w, dst, ZC_DIV_UP(n * b, 8));
    for (size_t i = 0; i < n; i++) {
        int32_t l = levels[i];
        zc_bw_put(&w, l < 0 ? (uint32_t)-l | sign : (uint32_t)l, b);
    }
    zc_bw_flush(&w);
}

static int unpack_add_scalar(const uint8_t *src, size_t n, unsigned b, uint32_t s, float unit,
                             float *dst)
{
    zc_bitreader_t r;
    const uint32_t sign = UINT32_C(1) << (b - 1);
    uint32_t worst = 0;

    zc_br_init(&r, src, ZC_DIV_UP(n * b, 8));
    for (size_t i = 0; i < n; i++) {
        uint32_t code = zc_br_get(&r, b);
        uint32_t k = code & (sign - 1);
        worst |= k > s;
        float v = (float)k * unit;
        dst[i] += code & sign ? -v : v;
    }
    return worst ? -1 : 0;
}

static void add_scalar(const float *x, size_t n, float *dst)
{
    for (size_t i = 0; i < n; i++)
        dst[i] += x[i];
}

const zc_qsgd_kernels_t zc_qsgd_kernels_scalar = {
    .max_abs_bits = max_abs_bits_scalar,
    .sum_squares = sum_squares_scalar,
    .quantize = quantize_scalar,
    .pack = pack_scalar,
    .unpack_add = unpack_add_scalar,
    .add = add_scalar,
};

const zc_qsgd_kernels_t *zc_qsgd_kernels(void)
{
    static const zc_qsgd_kernels_t *const variants[ZC_CPU_NLEVELS] = {
        [ZC_CPU_SCALAR] = &zc_qsgd_kernels_scalar,
#if defined(__x86_64__)
        [ZC_CPU_AVX2] = &zc_qsgd_kernels_avx2,
        [ZC_CPU_AVX512] = &zc_qsgd_kernels_avx512,
#endif
    };
    return ZC_CPU_SELECT(variants);
}
