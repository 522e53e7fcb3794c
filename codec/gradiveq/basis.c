/*
 * GradiVeQ: learning the per-tensor PCA basis from the aggregated gradient
 * (Yu et al., "GradiVeQ: Vector Quantization for Bandwidth-Efficient Gradient
 * Aggregation in Distributed CNN Training", NeurIPS 2018, §3).
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

/*
 * Sample mean and covariance (divided by the sample count, so the eigenvalues
 * are the mean squared coordinates of the centred samples along each
 * direction) of the finite sampled slices, in double, slices in index order.
 * @p cov gets the full K x K matrix. Returns the number of finite samples.
 */
static uint64_t sample_moments(const float *sum, uint64_t slices, uint64_t samples, uint64_t offset,
                               uint32_t k, double *mean, double *cov, double *y)
{
    uint64_t used = 0;

    memset(mean, 0, k * sizeof(*mean));
    memset(cov, 0, (size_t)k * k * sizeof(*cov));
    for (uint64_t j = 0; j < samples; j++) {
        const float *x = sum + (j * slices + offset) / samples * k;
        if (!slice_finite(x, k))
            continue;
        for (uint32_t i = 0; i < k; i++)
            mean[i] += x[i];
        used++;
    }
    if (used == 0)
        return 0;
    for (uint32_t i = 0; i < k; i++)
        mean[i] /= (double)used;

    for (uint64_t j = 0; j < samples; j++) {
        const float *x = sum + (j * slices + offset) / samples * k;
        if (!slice_finite(x, k))
            continue;
        for (uint32_t i = 0; i < k; i++)
            y[i] = x[i] - mean[i];
        /* upper triangle, one rank-1 update per sample: each entry sums in sample order */
        for (uint32_t a = 0; a < k; a++) {
            double *row = cov + (size_t)a * k;
            const double ya = y[a];
            for (uint32_t b = a; b < k; b++)
                row[b] += ya * y[b];
        }
    }
    for (uint32_t a = 0; a < k; a++) {
        for (uint32_t b = a; b < k; b++) {
            double c = cov[(size_t)a * k + b] / (double)used;
            cov[(size_t)a * k + b] = c;
            cov[(size_t)b * k + a] = c;
        }
    }
    return used;
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

/* Recomputes the basis from @p sum; leaves the state as it was on any error. */
static zc_status_t recompute(zc_gradiveq_state_t *g, const zc_codec_params_t *p, const float *sum,
                             uint64_t count)
{
    const uint32_t k = g->slice;
    const uint64_t slices = count / k;
    const uint64_t samples = ZC_MIN(slices, (uint64_t)p->gradiveq.samples);
    const uint64_t offset = zc_gradiveq_sample_offset(g->updates, slices);
    zc_status_t status = ZC_OK;

    double *mean = malloc(2 * (size_t)k * sizeof(double));
    double *w = malloc((size_t)k * sizeof(double));
    double *cov = malloc((size_t)k * k * sizeof(double));
    double *z = malloc((size_t)k * k * sizeof(double));
    double *eigenvalues = malloc((size_t)k * sizeof(double));
    float *basis = NULL, *fmean = malloc((size_t)k * sizeof(float)), *off = NULL, *lifted = NULL;
    if (!mean || !w || !cov || !z || !eigenvalues || !fmean) {
        status = ZC_ERR_NO_MEMORY;
        goto out;
    }

    uint64_t used = sample_moments(sum, slices, samples, offset, k, mean, cov, mean + k);
    if (used == 0)
        goto out; /* every sampled slice non-finite: keep the basis, try again next update */
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
        fmean[i] = (float)mean[i];
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
    g->samples_used = used;
    g->tag = basis_tag(k, d, g->basis, g->mean);
    g->version = g->version == UINT32_MAX ? 1 : g->version + 1;
    g->since = 0;

out:
    free(mean);
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

zc_status_t zc_gradiveq_learn(zc_codec_state_t *state, const float *sum, uint64_t count)
{
    zc_gradiveq_state_t *g = state->priv;
    const zc_codec_params_t *p = &state->params;

    if (!g || count > ZC_GRADIVEQ_MAX_COUNT)
        return ZC_ERR_INVALID_ARG;
    g->updates++;
    g->since++;
    if (count / g->slice == 0)
        return ZC_OK; /* no whole slice: everything travels raw, there is nothing to learn */
    if (g->version != 0 && (p->gradiveq.refresh == 0 || g->since < p->gradiveq.refresh))
        return ZC_OK;
    return recompute(g, p, sum, count);
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
