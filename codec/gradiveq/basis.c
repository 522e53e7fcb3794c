/*
 * GradiVeQ: learning the per-tensor PCA basis from the aggregated gradient
 * (Yu et al., "GradiVeQ: Vector Quantization for Bandwidth-Efficient Gradient
 * Aggregation in Distributed CNN Training", NeurIPS 2018, §3), as the paper
 * trains it: from uncompressed (raw) aggregated sums only, a warm-up of raw
 * calls first, then a raw call every refresh (zc_gradiveq_call_raw).
 *
 * Every rank calls state_update with the identical all-reduce result, so every
 * rank samples the same slices, builds the same covariance and the same basis:
 * nothing is sent. That holds only if the arithmetic is the same everywhere, so
 * the mean and covariance are summed in double in one fixed order with plain
 * loops (no BLAS, whose kernels and threads reorder sums), and the eigenvectors
 * get a canonical sign. The eigensolver (LAPACK) is deterministic for the same
 * library and CPU; the basis tag in every payload turns any divergence into
 * ZC_ERR_MISMATCH instead of wrong sums.
 */
#include "codec/gradiveq/gradiveq.h"
#include "common/bitio.h"
#include "common/philox.h"

#include <lapacke.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

uint64_t zc_gradiveq_sample_offset(uint64_t update, uint64_t slices)
{
    const uint32_t key[2] = {ZC_GRADIVEQ_SAMPLE_KEY0, ZC_GRADIVEQ_SAMPLE_KEY1};
    const uint32_t ctr[4] = {(uint32_t)update, (uint32_t)(update >> 32), 0, 0};
    uint32_t out[4];

    zc_philox4x32_10(ctr, key, out);
    return ((uint64_t)out[1] << 32 | out[0]) % slices;
}

static int slice_finite(const float *x, uint32_t k)
{
    for (uint32_t i = 0; i < k; i++)
        if (!isfinite(x[i]))
            return 0;
    return 1;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*
 * The scale of each sampled slice for learning: 1, or ZC_GRADIVEQ_CLIP times
 * the median norm of the sampled finite slices that are not all zero over the
 * slice's norm when it is above that; -1 for a non-finite slice (skipped).
 * The norms are summed in double in index order and the median found by a
 * sort: the same on every rank.
 */
static zc_status_t slice_scales(const float *sum, uint64_t slices, uint64_t samples,
                                uint64_t offset, uint32_t k, double *scale)
{
    double *sorted = malloc((size_t)samples * sizeof(*sorted));
    size_t nonzero = 0;

    if (!sorted)
        return ZC_ERR_NO_MEMORY;
    for (uint64_t j = 0; j < samples; j++) {
        const float *x = sum + (j * slices + offset) / samples * k;
        if (!slice_finite(x, k)) {
            scale[j] = -1;
            continue;
        }
        double n2 = 0;
        for (uint32_t i = 0; i < k; i++)
            n2 += (double)x[i] * x[i];
        scale[j] = sqrt(n2); /* the norm, for now */
        if (scale[j] > 0)
            sorted[nonzero++] = scale[j];
    }
    double bound = INFINITY;
    if (nonzero > 0) {
        qsort(sorted, nonzero, sizeof(*sorted), cmp_double);
        bound = ZC_GRADIVEQ_CLIP * sorted[(nonzero - 1) / 2];
    }
    for (uint64_t j = 0; j < samples; j++)
        if (scale[j] >= 0)
            scale[j] = scale[j] > bound ? bound / scale[j] : 1.0;
    free(sorted);
    return ZC_OK;
}

/*
 * Adds the clipped finite sampled slices of one raw sum to the state's moments
 * (Chan, Golub and LeVeque's pairwise update: this call's mean and centred sum
 * of outer products, two passes in double, slices in index order, merged into
 * the accumulated ones), so that a basis learns from every raw call, the
 * older ones at the weight a refresh left them. *@p added_p: the slices added.
 */
static zc_status_t accumulate(zc_gradiveq_state_t *g, const float *sum, uint64_t slices,
                              uint64_t samples, uint64_t offset, uint64_t *added_p)
{
    const uint32_t k = g->slice;
    uint64_t used = 0;
    double *scale = malloc((size_t)samples * sizeof(*scale));
    double *mean = calloc((size_t)k, sizeof(*mean)), *y = malloc((size_t)k * sizeof(*y));
    double *m2 = calloc((size_t)k * k, sizeof(*m2));
    zc_status_t status = ZC_OK;

    if (!scale || !mean || !y || !m2) {
        status = ZC_ERR_NO_MEMORY;
        goto out;
    }
    ZC_CHECK_GOTO(slice_scales(sum, slices, samples, offset, k, scale), status, out);
    for (uint64_t j = 0; j < samples; j++) {
        const float *x = sum + (j * slices + offset) / samples * k;
        if (scale[j] < 0)
            continue;
        for (uint32_t i = 0; i < k; i++)
            mean[i] += scale[j] * x[i];
        used++;
    }
    if (used == 0)
        goto out;
    for (uint32_t i = 0; i < k; i++)
        mean[i] /= (double)used;
    for (uint64_t j = 0; j < samples; j++) {
        const float *x = sum + (j * slices + offset) / samples * k;
        if (scale[j] < 0)
            continue;
        for (uint32_t i = 0; i < k; i++)
            y[i] = scale[j] * x[i] - mean[i];
        /* upper triangle, one rank-1 update per sample: each entry sums in sample order */
        for (uint32_t a = 0; a < k; a++) {
            double *row = m2 + (size_t)a * k;
            const double ya = y[a];
            for (uint32_t b = a; b < k; b++)
                row[b] += ya * y[b];
        }
    }

    /* merge: weights na (accumulated) and nb (this call) */
    const double na = g->acc_weight, nb = (double)used, nt = na + nb;
    for (uint32_t i = 0; i < k; i++)
        y[i] = mean[i] - g->acc_mean[i]; /* delta */
    for (uint32_t a = 0; a < k; a++) {
        double *row = g->acc_m2 + (size_t)a * k;
        const double *add = m2 + (size_t)a * k;
        for (uint32_t b = a; b < k; b++)
            row[b] += add[b] + y[a] * y[b] * (na * nb / nt);
    }
    for (uint32_t i = 0; i < k; i++)
        g->acc_mean[i] += y[i] * (nb / nt);
    g->acc_weight = nt;

out:
    *added_p = used;
    free(scale);
    free(mean);
    free(y);
    free(m2);
    return status;
}

/*
 * Eigenvalues (ascending) and eigenvectors (columns of @p z, column-major) of
 * the symmetric @p cov, which is destroyed. MRRR (dsyevr) first; the QR
 * algorithm (dsyev) if it does not converge, which MRRR can fail to do on
 * tight clusters, common in rank-deficient gradients.
 */
static zc_status_t eigen(uint32_t k, double *cov, double *w, double *z)
{
    const lapack_int n = (lapack_int)k;
    lapack_int found = 0;
    lapack_int *isuppz = malloc(2 * (size_t)k * sizeof(*isuppz));
    double *copy = malloc((size_t)k * k * sizeof(*copy));
    lapack_int info;

    if (!isuppz || !copy) {
        free(isuppz);
        free(copy);
        return ZC_ERR_NO_MEMORY;
    }
    memcpy(copy, cov, (size_t)k * k * sizeof(*copy));
    info = LAPACKE_dsyevr(LAPACK_COL_MAJOR, 'V', 'A', 'U', n, cov, n, 0, 0, 0, 0, 0, &found, w, z,
                          n, isuppz);
    if (info != 0 || found != n) {
        info = LAPACKE_dsyev(LAPACK_COL_MAJOR, 'V', 'U', n, copy, n, w);
        if (info == 0)
            memcpy(z, copy, (size_t)k * k * sizeof(*z));
    }
    free(isuppz);
    free(copy);
    if (info == LAPACK_WORK_MEMORY_ERROR || info == LAPACK_TRANSPOSE_MEMORY_ERROR)
        return ZC_ERR_NO_MEMORY;
    return info == 0 ? ZC_OK : ZC_ERR_INTERNAL;
}

/* Smallest d >= 1 whose leading eigenvalues keep @p energy of their sum (paper eq. 6). */
static uint32_t dim_for_energy(const double *lambda, uint32_t k, double energy)
{
    double total = 0, kept = 0;

    for (uint32_t i = 0; i < k; i++)
        total += lambda[i] > 0 ? lambda[i] : 0;
    for (uint32_t d = 1; d <= k; d++) {
        kept += lambda[d - 1] > 0 ? lambda[d - 1] : 0;
        if (kept >= energy * total)
            return d;
    }
    return k; /* unreachable: at d = k kept == total, summed in the same order */
}

/* FNV-1a over the little-endian bytes of one 32-bit word. */
static uint32_t fnv1a32(uint32_t h, uint32_t word)
{
    for (int i = 0; i < 4; i++) {
        h ^= (word >> (8 * i)) & 0xffu;
        h *= UINT32_C(16777619);
    }
    return h;
}

static uint32_t basis_tag(uint32_t k, uint32_t d, const float *basis, const float *mean)
{
    uint32_t h = UINT32_C(2166136261);
    uint32_t bits;

    h = fnv1a32(h, k);
    h = fnv1a32(h, d);
    for (size_t i = 0; i < (size_t)k * d; i++) {
        memcpy(&bits, &basis[i], sizeof(bits));
        h = fnv1a32(h, bits);
    }
    for (uint32_t i = 0; i < k; i++) {
        memcpy(&bits, &mean[i], sizeof(bits));
        h = fnv1a32(h, bits);
    }
    return h ? h : 1; /* 0 is the tag of version 0 */
}

/* Fits a basis to the accumulated moments; leaves the state as it was on any error. */
static zc_status_t fit(zc_gradiveq_state_t *g, const zc_codec_params_t *p)
{
    const uint32_t k = g->slice;
    zc_status_t status = ZC_OK;

    double *w = malloc((size_t)k * sizeof(double));
    double *cov = malloc((size_t)k * k * sizeof(double));
    double *z = malloc((size_t)k * k * sizeof(double));
    double *eigenvalues = malloc((size_t)k * sizeof(double));
    float *basis = NULL, *fmean = malloc((size_t)k * sizeof(float)), *off = NULL, *lifted = NULL;
    if (!w || !cov || !z || !eigenvalues || !fmean) {
        status = ZC_ERR_NO_MEMORY;
        goto out;
    }
    /* the covariance: divided by the weight, so eigenvalues are mean squares along directions */
    for (uint32_t a = 0; a < k; a++) {
        for (uint32_t b = a; b < k; b++) {
            double c = g->acc_m2[(size_t)a * k + b] / g->acc_weight;
            cov[(size_t)a * k + b] = c;
            cov[(size_t)b * k + a] = c;
        }
    }
    ZC_CHECK_GOTO(eigen(k, cov, w, z), status, out);

    for (uint32_t i = 0; i < k; i++)
        eigenvalues[i] = w[k - 1 - i];
    const uint32_t d =
        p->gradiveq.dim ? p->gradiveq.dim : dim_for_energy(eigenvalues, k, p->gradiveq.energy);

    basis = malloc((size_t)k * d * sizeof(float));
    off = malloc((size_t)d * sizeof(float));
    lifted = malloc((size_t)k * (d + 1) * sizeof(float));
    if (!basis || !off || !lifted) {
        status = ZC_ERR_NO_MEMORY;
        goto out;
    }
    for (uint32_t j = 0; j < d; j++) {
        /* column j: the eigenvector of the j-th largest eigenvalue, its largest entry positive */
        const double *v = z + (size_t)(k - 1 - j) * k;
        uint32_t top = 0;
        for (uint32_t i = 1; i < k; i++)
            if (fabs(v[i]) > fabs(v[top]))
                top = i;
        const double sign = v[top] < 0 ? -1.0 : 1.0;
        for (uint32_t i = 0; i < k; i++)
            basis[(size_t)i * d + j] = (float)(sign * v[i]);
    }
    for (uint32_t i = 0; i < k; i++) {
        fmean[i] = (float)g->acc_mean[i];
        memcpy(lifted + (size_t)i * (d + 1), basis + (size_t)i * d, (size_t)d * sizeof(float));
        lifted[(size_t)i * (d + 1) + d] = fmean[i];
    }
    /* the per-slice constant U^T mu / N, from the rounded U and mu that decoding uses */
    for (uint32_t j = 0; j < d; j++) {
        double acc = 0;
        for (uint32_t i = 0; i < k; i++)
            acc += (double)basis[(size_t)i * d + j] * fmean[i];
        off[j] = (float)(acc / g->ranks);
    }

    free(g->basis);
    free(g->mean);
    free(g->offset);
    free(g->lifted_basis);
    free(g->eigenvalues);
    g->basis = basis;
    g->mean = fmean;
    g->offset = off;
    g->lifted_basis = lifted;
    g->eigenvalues = eigenvalues;
    basis = fmean = off = lifted = NULL;
    eigenvalues = NULL;
    g->dim = d;
    g->samples_used = (uint64_t)(g->acc_weight + 0.5);
    g->tag = basis_tag(k, d, g->basis, g->mean);
    g->version = g->version == UINT32_MAX ? 1 : g->version + 1;

out:
    free(w);
    free(cov);
    free(z);
    free(eigenvalues);
    free(basis);
    free(fmean);
    free(off);
    free(lifted);
    return status;
}

static uint64_t warmup_of(const zc_codec_params_t *p)
{
    return p->gradiveq_warmup ? p->gradiveq_warmup : 1;
}

int zc_gradiveq_call_raw(const zc_codec_state_t *state)
{
    const zc_gradiveq_state_t *g = state->priv;
    const zc_codec_params_t *p = &state->params;
    const uint64_t w = warmup_of(p), r = p->gradiveq.refresh, t = g->updates;

    return g->version == 0 || t < w || (r != 0 && (t - w + 1) % r == 0);
}

/*
 * Learns from raw calls only: their sums are the exact aggregated gradients,
 * where a compressed call's decoded sum lies in the old basis (learning from
 * it could only shrink the basis, never turn it). The warm-up's calls add up;
 * the basis is fitted at its end and at every refresh, which first halves the
 * weight of what came before it, so that the basis follows the gradient.
 */
zc_status_t zc_gradiveq_learn(zc_codec_state_t *state, const float *sum, uint64_t count)
{
    zc_gradiveq_state_t *g = state->priv;
    const zc_codec_params_t *p = &state->params;

    if (!g || count > ZC_GRADIVEQ_MAX_COUNT)
        return ZC_ERR_INVALID_ARG;
    const uint64_t call = g->updates;
    const int raw = zc_gradiveq_call_raw(state);
    g->updates++;
    const uint64_t slices = count / g->slice;
    if (slices == 0 || !raw)
        return ZC_OK; /* no whole slice (all raw), or a compressed call: nothing to learn */

    const uint32_t k = g->slice;
    if (!g->acc_m2) {
        g->acc_mean = calloc(k, sizeof(double));
        g->acc_m2 = calloc((size_t)k * k, sizeof(double));
        if (!g->acc_mean || !g->acc_m2)
            return ZC_ERR_NO_MEMORY;
    }
    if (g->version != 0) {
        g->acc_weight *= 0.5; /* a refresh: the last fit's slices count half */
        for (size_t i = 0; i < (size_t)k * k; i++)
            g->acc_m2[i] *= 0.5;
    }
    const uint64_t samples = ZC_MIN(slices, (uint64_t)p->gradiveq.samples);
    uint64_t added;
    ZC_CHECK(
        accumulate(g, sum, slices, samples, zc_gradiveq_sample_offset(g->updates, slices), &added));
    if (call + 1 < warmup_of(p) || g->acc_weight == 0)
        return ZC_OK; /* still warming up, or nothing finite yet: the next call is raw too */
    return fit(g, p);
}

zc_status_t zc_gradiveq_view(const zc_codec_state_t *state, zc_gradiveq_view_t *view_p)
{
    const zc_gradiveq_state_t *g;

    if (!state || !view_p || state->params.codec != ZC_CODEC_GRADIVEQ || !(g = state->priv))
        return ZC_ERR_INVALID_ARG;
    view_p->slice = g->slice;
    view_p->dim = g->dim;
    view_p->version = g->version;
    view_p->tag = g->tag;
    view_p->samples_used = g->samples_used;
    view_p->basis = g->basis;
    view_p->mean = g->mean;
    view_p->offset = g->offset;
    view_p->eigenvalues = g->eigenvalues;
    return ZC_OK;
}
