/*
 * PowerSGD's linear algebra on the matrix view of a flat tensor (powersgd.h).
 *
 * Zipccl's own fixed-order loops, not BLAS: a BLAS picks its summation order
 * by CPU type and thread count, and the orthonormalisation and the final
 * product must give the same bits on every rank. Products are streamed row by
 * row of M (read once per product) with Q^T (r x C) kept in cache; the dot
 * products of P = M Q sum in 16 lanes in a fixed order (GCC vectors, one clone
 * per CPU level: ZC_WIDE_CLONES), so nothing is reassociated.
 */
#include "codec/powersgd/powersgd.h"
#include "common/compiler.h"
#include "common/philox.h"

#include <math.h>
#include <string.h>

/* Columns of M per block of the expansion: the row buffer stays on the stack. */
#define EXPAND_BLOCK 512
#define LANES 16

/*
 * 16 floats: GCC's vector extension, split into the clone's widest registers
 * (ZC_WIDE_CLONES). Each lane's sum is the same sequence of additions in every
 * clone (C11: no contraction), so every CPU level gives the same bits.
 */
typedef float psgd_vec_t __attribute__((vector_size(LANES * sizeof(float))));
#define VLOAD(v, p) memcpy(&(v), (p), sizeof(psgd_vec_t))
#define VSTORE(p, v) memcpy((p), &(v), sizeof(psgd_vec_t))

void zc_powersgd_shape(uint64_t count, uint32_t rank, zc_powersgd_shape_t *shape_p)
{
    if (count == 0) {
        *shape_p = (zc_powersgd_shape_t){0, 0, 0};
        return;
    }
    uint64_t root = (uint64_t)sqrt((double)count);
    while (root * root > count)
        root--;
    while ((root + 1) * (root + 1) <= count)
        root++;

    uint64_t cols = 0;
    for (uint64_t d = root; d >= 1 && 4 * d >= root; d--) {
        if (count % d == 0) {
            cols = d;
            break;
        }
    }
    if (!cols)
        cols = root * root == count ? root : root + 1;
    shape_p->cols = cols;
    shape_p->rows = (count + cols - 1) / cols;
    uint64_t r = rank;
    r = r < shape_p->rows ? r : shape_p->rows;
    r = r < shape_p->cols ? r : shape_p->cols;
    shape_p->rank = (uint32_t)r;
}

/* Values of row @p i of M (the last row may be short). */
static size_t row_len(const zc_powersgd_shape_t *s, uint64_t count, uint64_t i)
{
    uint64_t left = count - i * s->cols;
    return (size_t)(left < s->cols ? left : s->cols);
}

/*
 * The dot product of @p n values in 16 lanes: lane l sums the products j = l mod
 * 16 in index order (the tail's included), then the lanes are added in order.
 */
static inline float dot(const float *a, const float *b, size_t n)
{
    psgd_vec_t acc = {0};
    size_t j = 0;
    for (; j + LANES <= n; j += LANES) {
        psgd_vec_t x, y;
        VLOAD(x, a + j);
        VLOAD(y, b + j);
        acc += x * y;
    }
    float lane[LANES];
    memcpy(lane, &acc, sizeof(lane));
    for (int l = 0; j < n; j++, l++)
        lane[l] += a[j] * b[j];
    float sum = 0;
    for (int l = 0; l < LANES; l++)
        sum += lane[l];
    return sum;
}

ZC_WIDE_CLONES void zc_powersgd_project(const zc_powersgd_shape_t *s, const float *m,
                                        uint64_t count, const float *qt, float *p)
{
    const uint32_t r = s->rank;
    for (uint64_t i = 0; i < s->rows; i++) {
        const float *row = m + i * s->cols;
        const size_t len = row_len(s, count, i);
        for (uint32_t k = 0; k < r; k++)
            p[i * r + k] = dot(row, qt + (size_t)k * s->cols, len);
    }
}

/* @p dst[0..n) += @p a @p x[0..n), value by value. */
static inline void axpy(float *dst, float a, const float *x, size_t n)
{
    size_t j = 0;
    for (; j + LANES <= n; j += LANES) {
        psgd_vec_t v, w;
        VLOAD(v, dst + j);
        VLOAD(w, x + j);
        v += a * w;
        VSTORE(dst + j, v);
    }
    for (; j < n; j++)
        dst[j] += a * x[j];
}

ZC_WIDE_CLONES void zc_powersgd_back(const zc_powersgd_shape_t *s, const float *m, uint64_t count,
                                     const float *p, float *qt)
{
    const uint32_t r = s->rank;
    memset(qt, 0, (size_t)r * s->cols * sizeof(float));
    for (uint64_t i = 0; i < s->rows; i++) {
        const float *row = m + i * s->cols;
        const size_t len = row_len(s, count, i);
        for (uint32_t k = 0; k < r; k++)
            axpy(qt + (size_t)k * s->cols, p[i * r + k], row, len);
    }
}

static double column_dot(const zc_powersgd_shape_t *s, const float *p, uint32_t a, uint32_t b)
{
    double sum = 0;
    for (uint64_t i = 0; i < s->rows; i++)
        sum += (double)p[i * s->rank + a] * p[i * s->rank + b];
    return sum;
}

void zc_powersgd_orthonormalise(const zc_powersgd_shape_t *s, float *p)
{
    const uint32_t r = s->rank;
    for (uint32_t k = 0; k < r; k++) {
        const double before = sqrt(column_dot(s, p, k, k));
        /* twice is enough (Giraud et al. 2005): one pass leaves float-sized overlaps */
        for (int pass = 0; pass < 2; pass++) {
            for (uint32_t l = 0; l < k; l++) {
                const double proj = column_dot(s, p, l, k);
                for (uint64_t i = 0; i < s->rows; i++)
                    p[i * r + k] = (float)(p[i * r + k] - proj * p[i * r + l]);
            }
        }
        const double norm = sqrt(column_dot(s, p, k, k));
        const int keep = isfinite(before) && before > 0 && isfinite(norm) && norm > 1e-5 * before;
        for (uint64_t i = 0; i < s->rows; i++)
            p[i * r + k] = keep ? (float)(p[i * r + k] / norm) : 0.0f;
    }
}

ZC_WIDE_CLONES void zc_powersgd_expand(const zc_powersgd_shape_t *s, const float *p,
                                       const float *qt, uint64_t count, float alpha, float *dst)
{
    const uint32_t r = s->rank;
    float acc[EXPAND_BLOCK];

    for (uint64_t i = 0; i < s->rows; i++) {
        const size_t len = row_len(s, count, i);
        float *out = dst + i * s->cols;
        for (size_t j0 = 0; j0 < len; j0 += EXPAND_BLOCK) {
            const size_t n = ZC_MIN((size_t)EXPAND_BLOCK, len - j0);
            memset(acc, 0, n * sizeof(float));
            for (uint32_t k = 0; k < r; k++)
                axpy(acc, p[i * r + k], qt + (size_t)k * s->cols + j0, n);
            axpy(out + j0, alpha, acc, n);
        }
    }
}

unsigned zc_powersgd_fill(const zc_powersgd_shape_t *s, float *qt, uint32_t draw)
{
    static const uint32_t key[2] = {ZC_POWERSGD_KEY0, ZC_POWERSGD_KEY1};
    const uint32_t shape_word =
        (uint32_t)(s->rows * UINT64_C(0x9e3779b97f4a7c15) >> 32) ^ (uint32_t)s->cols;
    unsigned drawn = 0;

    for (uint32_t k = 0; k < s->rank; k++) {
        float *q = qt + (size_t)k * s->cols;
        int zero = 1, bad = 0;
        for (uint64_t j = 0; j < s->cols; j++) {
            zero &= q[j] == 0.0f;
            bad |= !isfinite(q[j]);
        }
        if (!zero && !bad)
            continue;
        for (uint64_t j = 0; j < s->cols; j += 4) {
            const uint32_t ctr[4] = {(uint32_t)(j / 4), draw, k, shape_word};
            uint32_t out[4];
            zc_philox4x32_10(ctr, key, out);
            for (uint64_t t = 0; t < 4 && j + t < s->cols; t++)
                q[j + t] = (float)((double)out[t] * 0x1p-31 - 1.0); /* [-1, 1) */
        }
        drawn++;
    }
    return drawn;
}

ZC_WIDE_CLONES int zc_powersgd_finite(const float *x, uint64_t n)
{
    /* x - x is 0 for finite x and NaN otherwise: a branch-free pass in 16 lanes */
    psgd_vec_t acc = {0};
    uint64_t i = 0;
    for (; i + LANES <= n; i += LANES) {
        psgd_vec_t v;
        VLOAD(v, x + i);
        acc += v - v;
    }
    float lane[LANES], sum = 0;
    memcpy(lane, &acc, sizeof(lane));
    for (; i < n; i++)
        sum += x[i] - x[i];
    for (int l = 0; l < LANES; l++)
        sum += lane[l];
    return sum == 0;
}
