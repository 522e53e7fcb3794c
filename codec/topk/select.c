/*
 * Which values top-k keeps. As in gradient dropping (Aji & Heafield 2017, and
 * the first author's Marian code: a strided sample, sorted, gives the
 * threshold) and DGC (Lin et al. 2018: a strided sample, then an exact top-k
 * among the candidates when the count misses), the threshold comes from a
 * strided sample of the keys and one pass keeps every key at or above it. When
 * that count misses k by more than the tolerance, the exact k largest are
 * selected instead by a radix select over all keys.
 */
#include "codec/topk/topk_int.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Digits of the radix select, most significant first: key bits 21..30, 10..20, 0..9. */
#define DIGIT0_SHIFT 21
#define DIGIT_BINS 2048

uint64_t zc_topk_target(uint64_t n, double density)
{
    if (n == 0)
        return 0;
    double k = floor(density * (double)n + 0.5);
    if (k < 1)
        return 1;
    return k >= (double)n ? n : (uint64_t)k;
}

uint64_t zc_topk_max_kept(uint64_t n, uint64_t k)
{
    uint64_t m = k + k / ZC_TOPK_TOL_DIV;
    return m < n ? m : n;
}

uint64_t zc_topk_sample_size(uint64_t n, double density)
{
    double s = ceil(ZC_TOPK_SAMPLE_TAIL / density);
    if (s < ZC_TOPK_SAMPLE_MIN)
        s = ZC_TOPK_SAMPLE_MIN;
    if (s * ZC_TOPK_SAMPLE_MAX_DIV > (double)n)
        return 0;
    return (uint64_t)s;
}

/* Digit @p d (0, 1, 2) of a key is (key >> digit_shift(d)) & digit_mask(d). */
static inline unsigned digit_shift(int d)
{
    return d == 0 ? DIGIT0_SHIFT : d == 1 ? 10 : 0;
}

static inline uint32_t digit_mask(int d)
{
    return d == 1 ? 0x7ffu : 0x3ffu;
}

/*
 * hist[v] += the number of 32-bit words w of src[0..m) with (w >> shift) & mask
 * == v. Words are read with memcpy, so src may hold floats (their keys' top
 * digit is (bits >> 21) & 0x3ff: the mask drops the sign). Four interleaved
 * tables: a narrow distribution repeats one digit, and one counter would
 * serialize every increment on the store before it.
 */
static void hist_digits(const void *src, size_t m, unsigned shift, uint32_t mask, uint64_t *hist)
{
    enum { CHUNK = 1u << 30 }; /* 32-bit counters never overflow within a chunk */
    static const size_t table_bytes = 4 * DIGIT_BINS * sizeof(uint32_t);
    uint32_t h[4][DIGIT_BINS];
    const uint8_t *p = src;

    for (size_t i = 0; i < m;) {
        const size_t end = m - i > CHUNK ? i + CHUNK : m;
        memset(h, 0, table_bytes);
        for (; i + 4 <= end; i += 4) {
            uint32_t w[4];
            memcpy(w, p + 4 * i, sizeof(w));
            h[0][(w[0] >> shift) & mask]++;
            h[1][(w[1] >> shift) & mask]++;
            h[2][(w[2] >> shift) & mask]++;
            h[3][(w[3] >> shift) & mask]++;
        }
        for (; i < end; i++) {
            uint32_t w;
            memcpy(&w, p + 4 * i, sizeof(w));
            h[0][(w >> shift) & mask]++;
        }
        for (uint32_t v = 0; v <= mask; v++)
            hist[v] += (uint64_t)h[0][v] + h[1][v] + h[2][v] + h[3][v];
    }
}

/*
 * The digit value holding the k-th largest of the histogram: the largest v with
 * count(digits > v) < k; *k_p becomes k - count(digits > v), *above_p grows by it.
 */
static unsigned hist_pick(const uint64_t *hist, uint64_t *k_p, uint64_t *above_p)
{
    uint64_t above = 0;
    unsigned v = DIGIT_BINS - 1;
    for (;; v--) {
        if (above + hist[v] >= *k_p || v == 0)
            break;
        above += hist[v];
    }
    *k_p -= above;
    *above_p += above;
    return v;
}

uint32_t zc_topk_radix_select(uint32_t *keys, size_t m, uint64_t k, uint64_t *above_p)
{
    uint64_t hist[DIGIT_BINS];
    uint64_t above = 0;
    uint32_t prefix = 0;

    for (int d = 0; d < 3; d++) {
        const unsigned shift = digit_shift(d);
        const uint32_t mask = digit_mask(d);
        memset(hist, 0, sizeof(hist));
        hist_digits(keys, m, shift, mask, hist);
        unsigned v = hist_pick(hist, &k, &above);
        prefix |= (uint32_t)v << shift;
        if (d == 2)
            break;
        /* keep the keys of that digit only: all share the prefix from here on */
        size_t w = 0;
        for (size_t i = 0; i < m; i++) {
            keys[w] = keys[i];
            w += ((keys[i] >> shift) & mask) == v;
        }
        m = w;
    }
    *above_p = above;
    return prefix;
}

/*
 * The k largest by one histogram pass over x for the top digit, then the radix
 * select on the keys of the bucket holding the k-th (a small fraction of them
 * unless the input is tied or narrow; gathered by the bucket kernel), then the
 * collect kernel's positions of every key at or above the k-th, of which the
 * ties past the first k - above are dropped: the first ties by index are kept.
 * Those positions are as many as the keys above top's bucket and in it at most;
 * beyond the kept-position buffer they go to a buffer of their own, and beyond
 * n / 8 of them (a tied or narrow input) one scalar pass over x does both.
 */
static zc_status_t select_exact(const zc_topk_kernels_t *kern, const float *x, uint64_t n,
                                uint64_t k, uint64_t *idx, uint64_t *count_p)
{
    uint64_t hist[DIGIT_BINS] = {0};
    uint64_t above = 0, kk = k, c = 0;

    if (k == n) { /* everything but the zeros */
        for (uint64_t i = 0; i < n; i++) {
            idx[c] = i;
            c += zc_topk_key(x[i]) != 0;
        }
        *count_p = c;
        return ZC_OK;
    }
    hist_digits(x, (size_t)n, DIGIT0_SHIFT, digit_mask(0), hist);
    const uint32_t top = hist_pick(hist, &kk, &above);
    const size_t m = (size_t)hist[top];
    const uint64_t ge_max = above + m; /* keys at or above any key of top's bucket */
    uint32_t *keys = malloc((m + ZC_TOPK_COLLECT_SLACK) * sizeof(*keys));
    if (!keys)
        return ZC_ERR_NO_MEMORY;
    const uint64_t w =
        kern->bucket(x, (size_t)n, top << DIGIT0_SHIFT, UINT32_C(1) << DIGIT0_SHIFT, keys, m);
    if (w != m) { /* x changed since the histogram */
        free(keys);
        return ZC_ERR_INTERNAL;
    }
    uint64_t above_in = 0;
    const uint32_t kth = zc_topk_radix_select(keys, m, kk, &above_in);
    free(keys);
    above += above_in;

    /* zeros are never kept: with k-th key 0, only the nonzero keys (all above it) are */
    uint64_t ties = kth == 0 ? 0 : k - above;
    const uint64_t cap = zc_topk_max_kept(n, k);
    if (ge_max > cap && ge_max > n / 8) {
        for (uint64_t i = 0; i < n; i++) {
            uint32_t key = zc_topk_key(x[i]);
            if (ZC_UNLIKELY(key >= kth)) {
                if (key == kth) {
                    if (ties == 0)
                        continue;
                    ties--;
                }
                idx[c++] = i;
            }
        }
        *count_p = c;
        return ZC_OK;
    }
    uint64_t *ge_idx = idx;
    if (ge_max > cap) {
        ge_idx = malloc((size_t)(ge_max + ZC_TOPK_COLLECT_SLACK) * sizeof(*ge_idx));
        if (!ge_idx)
            return ZC_ERR_NO_MEMORY;
    }
    const uint64_t ge = kern->collect(x, (size_t)n, 0, kth == 0 ? 1 : kth, ge_idx, ge_max);
    for (uint64_t j = 0; j < ge && ge <= ge_max; j++) {
        if (zc_topk_key(x[ge_idx[j]]) == kth) {
            if (ties == 0)
                continue;
            ties--;
        }
        idx[c++] = ge_idx[j];
    }
    if (ge_idx != idx)
        free(ge_idx);
    if (ge > ge_max)
        return ZC_ERR_INTERNAL; /* x changed since the histogram */
    *count_p = c;
    return ZC_OK;
}

/*
 * zc_topk_select, and with @p res its fused error feedback: the values are then
 * res[i] + x[i], sampled as such and stored into res by the pass that collects
 * them (add_collect), or by an add-only pass before exact selection. On return,
 * error or not, res holds the sums.
 */
static zc_status_t select_impl(const float *x, float *res, uint64_t n, double density,
                               uint64_t *idx, uint64_t *count_p, zc_topk_path_t *path_p)
{
    const zc_topk_kernels_t *kern = zc_topk_kernels();
    const uint64_t k = zc_topk_target(n, density);
    const uint64_t s = zc_topk_sample_size(n, density);
    int added = 0;

    if (n == 0) {
        *count_p = 0;
        *path_p = ZC_TOPK_PATH_NONE;
        return ZC_OK;
    }
    if (s > 0 && k < n) {
        uint32_t *keys = malloc((size_t)s * sizeof(*keys));
        if (!keys) {
            if (res)
                zc_topk_add_rest(x, res, (size_t)n);
            return ZC_ERR_NO_MEMORY;
        }
        /* every stride-th key, from the middle of the first stride */
        const uint64_t stride = n / s;
        const uint64_t at = stride / 2;
        if (res) {
            for (uint64_t j = 0; j < s; j++)
                keys[j] = zc_topk_key(res[at + j * stride] + x[at + j * stride]);
        } else {
            for (uint64_t j = 0; j < s; j++)
                keys[j] = zc_topk_key(x[at + j * stride]);
        }
        uint64_t above;
        uint32_t thr = zc_topk_radix_select(keys, (size_t)s, zc_topk_target(s, density), &above);
        free(keys);
        /* every non-finite value is kept whenever the count allows it */
        if (thr > ZC_TOPK_INF_KEY)
            thr = ZC_TOPK_INF_KEY;
        if (thr > 0) { /* else mostly zeros: exact selection drops them */
            const uint64_t tol = k / ZC_TOPK_TOL_DIV;
            uint64_t c;
            if (res) {
                c = kern->add_collect(x, res, (size_t)n, 0, thr, idx, k + tol);
                added = 1;
            } else {
                c = kern->collect(x, (size_t)n, 0, thr, idx, k + tol);
            }
            if (c + tol >= k && c <= k + tol) {
                *count_p = c;
                *path_p = ZC_TOPK_PATH_SAMPLED;
                return ZC_OK;
            }
        }
    }
    /* no key reaches UINT32_MAX: the kernel only adds */
    if (res && !added)
        kern->add_collect(x, res, (size_t)n, 0, UINT32_MAX, idx, 0);
    *path_p = ZC_TOPK_PATH_EXACT;
    return select_exact(kern, res ? res : x, n, k, idx, count_p);
}

zc_status_t zc_topk_select(const float *x, uint64_t n, double density, uint64_t *idx,
                           uint64_t *count_p, zc_topk_path_t *path_p)
{
    return select_impl(x, NULL, n, density, idx, count_p, path_p);
}

zc_status_t zc_topk_select_add(const float *x, float *res, uint64_t n, double density,
                               uint64_t *idx, uint64_t *count_p, zc_topk_path_t *path_p)
{
    return select_impl(x, res, n, density, idx, count_p, path_p);
}
