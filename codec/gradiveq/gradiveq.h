/*
 * GradiVeQ internals: the per-tensor basis and how it is learned (basis.c),
 * shared with the payload code (gradiveq.c). The payload layout and the
 * learning rule are documented in docs/codecs.md.
 */
#ifndef ZC_CODEC_GRADIVEQ_H
#define ZC_CODEC_GRADIVEQ_H

#include "codec/codec.h"

#include <stddef.h>
#include <stdint.h>

#define ZC_GRADIVEQ_MIN_SLICE 2u
#define ZC_GRADIVEQ_MAX_SLICE 4096u
/* Sampled slices per basis: the config table's range, and what keeps j * M + r in 64 bits. */
#define ZC_GRADIVEQ_MAX_SAMPLES (UINT32_C(1) << 20)
/* Warm-up calls: the config table's range. */
#define ZC_GRADIVEQ_MAX_WARMUP (UINT32_C(1) << 20)
/* Values in one payload: the decoder refuses more, so the encoder must too. */
#define ZC_GRADIVEQ_MAX_COUNT (UINT64_C(1) << 40)

/*
 * Slices sampled for learning are clipped to this multiple of the median norm
 * of the sampled finite slices that are not all zero: one outlier (a value of
 * 1e30, a slice 1e4 times the others) can then weigh no more than 64 median
 * slices in the covariance, and turns at most one direction of the basis.
 */
#define ZC_GRADIVEQ_CLIP 8.0

/* Philox key of the slice sampler: "GradiVeQ", fixed so that every rank draws alike. */
#define ZC_GRADIVEQ_SAMPLE_KEY0 UINT32_C(0x64617247)
#define ZC_GRADIVEQ_SAMPLE_KEY1 UINT32_C(0x51655669)

/* The codec's part of zc_codec_state_t (state->priv). */
typedef struct zc_gradiveq_state {
    uint32_t slice;        /* K */
    uint32_t ranks;        /* N */
    uint32_t dim;          /* d of the current basis; 0 before the first */
    uint32_t version;      /* basis version: 0 = no basis yet, then 1, 2, ... */
    uint32_t tag;          /* fingerprint of (K, d, basis, mean); 0 at version 0 */
    uint64_t samples_used; /* finite slices the current basis was learned from (weighted) */
    uint64_t updates;      /* state_update calls so far: the number of the call under way */
    /*
     * The clipped raw slices learned from so far: their weight, mean and the
     * upper triangle of the sum of centred outer products (K x K), in
     * double. A refresh halves the old weight before adding its call's slices.
     */
    double acc_weight;
    double *acc_mean;
    double *acc_m2;
    float *basis;        /* K x d, row-major: column j is the j-th principal direction */
    float *mean;         /* K: mu, the sample mean of the sampled slices */
    float *offset;       /* d: U^T mu / N, subtracted from every slice's coefficients */
    float *lifted_basis; /* K x (d + 1), row-major: [U | mu], what decoding multiplies by */
    double *eigenvalues; /* K, descending: of the sample covariance */
    float *scratch;      /* scratch_len floats, grown on first need */
    size_t scratch_len;
} zc_gradiveq_state_t;

/*
 * Values per encode block (1 MiB of f32): large enough that per-block overhead
 * vanishes, small enough that the block's converted input and coefficients
 * stay in cache and every size fits an int.
 */
#define ZC_GRADIVEQ_CHUNK 262144u

/*
 * The slice index of sample j (0 <= j < S) out of M slices, at update number
 * @p update (1 for the first call of state_update): stratified with one Philox
 * offset r = philox((update lo, update hi, 0, 0), key)[1:0] mod M, so
 * index = floor((j * M + r) / S). S <= M, so the indices are distinct and spread
 * evenly; they move with every recomputation.
 */
uint64_t zc_gradiveq_sample_offset(uint64_t update, uint64_t slices);

/*
 * Whether the call under way on @p state travels raw (a version-0 payload):
 * one of the gradiveq_warmup first calls, every refresh-th call after them,
 * or any call while there is no basis yet. A function of the call count and
 * the agreed parameters, so every rank decides alike; the raw calls' sums are
 * the only ones the basis is learned from.
 */
int zc_gradiveq_call_raw(const zc_codec_state_t *state);

/* basis.c: zc_codec_ops_t.state_update. */
zc_status_t zc_gradiveq_learn(zc_codec_state_t *state, const float *sum, uint64_t count);

/* What a test may inspect of a state; the pointers stay valid until the next update. */
typedef struct zc_gradiveq_view {
    uint32_t slice, dim, version, tag;
    uint64_t samples_used;
    const float *basis;        /* slice x dim, row-major; NULL at version 0 */
    const float *mean;         /* slice */
    const float *offset;       /* dim */
    const double *eigenvalues; /* slice, descending */
} zc_gradiveq_view_t;

zc_status_t zc_gradiveq_view(const zc_codec_state_t *state, zc_gradiveq_view_t *view_p);

#endif
