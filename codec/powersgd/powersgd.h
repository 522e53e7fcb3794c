/*
 * PowerSGD internals (Vogels, Karimireddy, Jaggi, NeurIPS 2019, Algorithm 1):
 * the matrix view of a flat tensor and the rank-r power iteration's steps,
 * shared by the codec (powersgd.c: one rank's own P, Q as a payload) and the
 * collective that sums P and Q over the ranks (collectives/powersgd.c).
 *
 * A tensor of n values is an R x C row-major matrix M (powersgd_shape). With
 * Q (C x r, stored transposed as Qt, r x C) from the previous step:
 *   P = M Q; sum P over the ranks; orthonormalise P; Q = M^T P; sum Q;
 *   result = P Q^T; error feedback keeps M - P (M^T P)^T on each rank.
 * Every loop here runs in a fixed order with fixed partial sums, so equal
 * inputs give equal bits on every rank: the orthonormalisation of the summed P
 * and the product of the summed P and Q are computed by every rank alike.
 * Pure compute: no allocation except where a function says so, no logging.
 */
#ifndef ZC_CODEC_POWERSGD_H
#define ZC_CODEC_POWERSGD_H

#include "codec/codec.h"

#include <stddef.h>
#include <stdint.h>

#define ZC_POWERSGD_MAX_RANK 64u
/* Values in one tensor: R and C then fit 32 bits, the payload's fields. */
#define ZC_POWERSGD_MAX_COUNT (UINT64_C(1) << 40)

/* Philox key of the initial Q ("PowerSGD"): every rank draws the same Q. */
#define ZC_POWERSGD_KEY0 UINT32_C(0x65776f50)
#define ZC_POWERSGD_KEY1 UINT32_C(0x44475372)

/* The matrix a flat tensor is viewed as, and the rank used on it. */
typedef struct zc_powersgd_shape {
    uint64_t rows, cols; /* R, C: rows * cols >= count, the last row may be short */
    uint32_t rank;       /* min(r, R, C) */
} zc_powersgd_shape_t;

/*
 * The view of @p count values at rank @p rank (0 x 0 for none): C the largest divisor
 * of count at most sqrt(count) when it is at least sqrt(count) / 4 (an exact
 * factorisation: a row-major weight matrix of a power-of-two width comes out
 * as itself, e.g. 784 x 512), else C = ceil(sqrt(count)) and R = ceil(count /
 * C) with the last row short (its missing values are zeros).
 */
void zc_powersgd_shape(uint64_t count, uint32_t rank, zc_powersgd_shape_t *shape_p);

/* Values P and Q^T hold: (R + C) r. */
static inline uint64_t zc_powersgd_factor_values(const zc_powersgd_shape_t *s)
{
    return (s->rows + s->cols) * s->rank;
}

/* P (R x r, row-major) = M Q, M the @p count values at @p m, Q given as Qt (r x C). */
void zc_powersgd_project(const zc_powersgd_shape_t *s, const float *m, uint64_t count,
                         const float *qt, float *p);

/* Qt (r x C) = (M^T P)^T. */
void zc_powersgd_back(const zc_powersgd_shape_t *s, const float *m, uint64_t count, const float *p,
                      float *qt);

/*
 * Orthonormalises the r columns of P (R x r, row-major) in place: modified
 * Gram-Schmidt applied twice, column 0 first, dot products in double. A
 * column with nothing left after the projections (below 1e-5 of its norm
 * before them, zero or not finite) becomes zero.
 */
void zc_powersgd_orthonormalise(const zc_powersgd_shape_t *s, float *p);

/* dst[0..count) += alpha (P Qt) (the first count values of the R x C product). */
void zc_powersgd_expand(const zc_powersgd_shape_t *s, const float *p, const float *qt,
                        uint64_t count, float alpha, float *dst);

/*
 * Warm start: every column of Q (row of Qt) that is zero or holds a value
 * that is not finite is drawn anew, uniform in [-1, 1) from Philox keyed by
 * ZC_POWERSGD_KEY with counter (R, C, @p draw, row): the same on every rank
 * whatever its ZIPCCL_SEED (which may differ between ranks) or tensor key
 * (a pointer, by default). Returns the number of rows drawn.
 */
unsigned zc_powersgd_fill(const zc_powersgd_shape_t *s, float *qt, uint32_t draw);

/* Whether all @p n values are finite. */
int zc_powersgd_finite(const float *x, uint64_t n);

/* The codec's part of zc_codec_state_t (state->priv): the warm-start Q. */
typedef struct zc_powersgd_state {
    zc_powersgd_shape_t shape;
    float *qt;      /* r x C */
    uint32_t draws; /* zc_powersgd_fill calls so far (each draws new columns) */
} zc_powersgd_state_t;

/* The state's Q of @p state (a powersgd codec state), or NULL. */
zc_powersgd_state_t *zc_powersgd_state(zc_codec_state_t *state);

#endif
