/*
 * The powersgd codec: one rank's rank-r approximation P Q^T of its tensor
 * viewed as a matrix (powersgd.h), one power iteration per call warm-started
 * from the state's Q, with error feedback on by default (Vogels et al. 2019,
 * Algorithm 1 with a single worker). An all-reduce with ZIPCCL_CODEC=powersgd
 * does not send these payloads: collectives/powersgd.c sums P and Q over the
 * ranks, which is the paper's method. The payload serves the codec interface
 * (zipccl_codec.h), the generic algorithms when a user asks for them
 * (ZIPCCL_ALGO=allgather or scatter: each rank's own approximation, summed),
 * the tests and codec_bench. Body layout (docs/codecs.md):
 *
 *   u32 rows R | u32 cols C | u32 rank r | u32 0
 *   P: R x r f32, row-major (orthonormal columns) | Q^T: r x C f32, row-major
 */
#include "codec/powersgd/powersgd.h"
#include "common/bitio.h"
#include "common/compiler.h"
#include "common/config.h"

#include <stdlib.h>
#include <string.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "powersgd copies payload floats as they are: little-endian hosts only"
#endif

#define BODY_HDR 16

/*
 * The product mixes a whole row and column: a NaN, an infinity or an outlier
 * would reach all of them. Such values go out of band, exactly.
 */
#define PSGD_OOB_LIMIT 0x1p64f

static zc_status_t powersgd_check(const zc_codec_params_t *p)
{
    if (p->powersgd.rank < 1 || p->powersgd.rank > ZC_POWERSGD_MAX_RANK ||
        (p->powersgd.error_feedback != 0 && p->powersgd.error_feedback != 1))
        return ZC_ERR_INVALID_CONFIG;
    return ZC_OK;
}

static int powersgd_error_feedback(const zc_codec_params_t *p)
{
    return p->powersgd.error_feedback;
}

static size_t powersgd_bound(const zc_codec_params_t *p, uint64_t count)
{
    zc_powersgd_shape_t s;

    if (count > ZC_POWERSGD_MAX_COUNT)
        return SIZE_MAX;
    if (count == 0)
        return BODY_HDR;
    zc_powersgd_shape(count, p->powersgd.rank, &s);
    return BODY_HDR + (size_t)zc_powersgd_factor_values(&s) * 4;
}

zc_powersgd_state_t *zc_powersgd_state(zc_codec_state_t *state)
{
    return state && state->params.codec == ZC_CODEC_POWERSGD ? state->priv : NULL;
}

static zc_status_t powersgd_encode(const zc_codec_params_t *params, zc_codec_state_t *state,
                                   const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src,
                                   uint64_t count, uint8_t *dst, size_t cap, size_t *len_p)
{
    zc_powersgd_state_t *g = zc_powersgd_state(state);
    zc_status_t status = ZC_OK;

    if (!g)
        return ZC_ERR_INVALID_ARG;
    if (count > ZC_POWERSGD_MAX_COUNT)
        return ZC_ERR_INVALID_ARG;
    if (count == 0) {
        if (cap < BODY_HDR)
            return ZC_ERR_BUFFER_TOO_SMALL;
        memset(dst, 0, BODY_HDR);
        *len_p = BODY_HDR;
        return ZC_OK;
    }
    const zc_powersgd_shape_t *s = &g->shape;
    const size_t np = (size_t)(s->rows * s->rank), nq = (size_t)(s->cols * s->rank);
    const size_t len = BODY_HDR + (np + nq) * 4;
    if (cap < len)
        return ZC_ERR_BUFFER_TOO_SMALL;

    float *m = NULL, *p = malloc((np + nq) * sizeof(float));
    if (!p)
        return ZC_ERR_NO_MEMORY;
    float *qt = p + np;
    const float *mat = src;
    if (dtype != ZC_DTYPE_F32 || ((uintptr_t)src & 3)) {
        m = malloc((size_t)count * sizeof(float));
        if (!m) {
            status = ZC_ERR_NO_MEMORY;
            goto out;
        }
        zc_dtype_to_f32(dtype, src, (size_t)count, m);
        mat = m;
    }
    if (zc_powersgd_fill(s, g->qt, g->draws))
        g->draws++;
    zc_powersgd_project(s, mat, count, g->qt, p);
    zc_powersgd_orthonormalise(s, p);
    zc_powersgd_back(s, mat, count, p, qt);
    memcpy(g->qt, qt, nq * sizeof(float)); /* the next call's warm start */

    zc_store_le32(dst, (uint32_t)s->rows);
    zc_store_le32(dst + 4, (uint32_t)s->cols);
    zc_store_le32(dst + 8, s->rank);
    zc_store_le32(dst + 12, 0);
    memcpy(dst + BODY_HDR, p, (np + nq) * sizeof(float));
    *len_p = len;
out:
    free(m);
    free(p);
    return status;
}

/*
 * Trusts nothing but the count: R x C must cover it with a short last row at
 * most, r within both and ZC_POWERSGD_MAX_RANK, the length exact.
 */
static zc_status_t powersgd_decode_add(zc_codec_state_t *state, const uint8_t *body, size_t len,
                                       float *dst, uint64_t count, float alpha)
{
    if (len < BODY_HDR)
        return ZC_ERR_CORRUPT;
    zc_powersgd_shape_t s = {
        .rows = zc_load_le32(body),
        .cols = zc_load_le32(body + 4),
        .rank = zc_load_le32(body + 8),
    };
    if (zc_load_le32(body + 12) != 0)
        return ZC_ERR_CORRUPT;
    if (count == 0)
        return len == BODY_HDR && s.rows == 0 && s.cols == 0 && s.rank == 0 ? ZC_OK
                                                                            : ZC_ERR_CORRUPT;
    if (s.rows == 0 || s.cols == 0 || s.rank == 0 || s.rank > ZC_POWERSGD_MAX_RANK ||
        s.rank > s.rows || s.rank > s.cols || s.rows * s.cols < count ||
        (s.rows - 1) * s.cols >= count)
        return ZC_ERR_CORRUPT;
    const uint64_t values = zc_powersgd_factor_values(&s);
    if (values > (SIZE_MAX - BODY_HDR) / 4 || len != BODY_HDR + (size_t)values * 4)
        return ZC_ERR_CORRUPT;

    /* the body sits at any byte offset: the factors are small, copy them aligned */
    float *p = malloc((size_t)values * sizeof(float));
    if (!p)
        return ZC_ERR_NO_MEMORY;
    memcpy(p, body + BODY_HDR, (size_t)values * sizeof(float));
    zc_powersgd_expand(&s, p, p + s.rows * s.rank, count, alpha, dst);
    free(p);
    (void)state;
    return ZC_OK;
}

static zc_status_t powersgd_state_init(zc_codec_state_t *state)
{
    zc_powersgd_state_t *g = calloc(1, sizeof(*g));

    if (!g)
        return ZC_ERR_NO_MEMORY;
    if (state->count > 0) {
        zc_powersgd_shape(state->count, state->params.powersgd.rank, &g->shape);
        g->qt = calloc((size_t)(g->shape.cols * g->shape.rank), sizeof(float));
        if (!g->qt) {
            free(g);
            return ZC_ERR_NO_MEMORY;
        }
    }
    state->priv = g;
    return ZC_OK;
}

static void powersgd_state_fini(zc_codec_state_t *state)
{
    zc_powersgd_state_t *g = state ? state->priv : NULL;

    if (!g)
        return;
    free(g->qt);
    free(g);
    state->priv = NULL;
}

static size_t powersgd_state_bytes(const zc_codec_state_t *state)
{
    const zc_powersgd_state_t *g = state->priv;
    return sizeof(*g) + (g ? (size_t)(g->shape.cols * g->shape.rank) * sizeof(float) : 0);
}

/* Rank 4 (the paper's ImageNet/CIFAR setting), 10 calls uncompressed, error feedback on. */
static void powersgd_params_default(zc_codec_params_t *p)
{
    p->powersgd.rank = 4;
    p->powersgd.warmup = 10;
    p->powersgd.error_feedback = 1;
}

static void powersgd_params_from_config(const zc_config_t *cfg, zc_codec_params_t *p)
{
    p->powersgd.rank = (uint32_t)cfg->powersgd_rank;
    p->powersgd.warmup = (uint32_t)cfg->powersgd_warmup;
    p->powersgd.error_feedback = (int)cfg->powersgd_ef;
}

/*
 * All on the wire: r sizes P and Q, the warm-up decides which calls send them,
 * and error feedback changes what a rank contributes (codec.h).
 */
static const zc_codec_field_t powersgd_fields[] = {
    ZC_CODEC_FIELD(powersgd.rank, INT, 1),
    ZC_CODEC_FIELD(powersgd.warmup, INT, 1),
    ZC_CODEC_FIELD(powersgd.error_feedback, INT, 1),
};

const zc_codec_ops_t zc_codec_powersgd_ops = {
    .name = "powersgd",
    .id = ZC_CODEC_POWERSGD,
    .caps = 0,
    .oob_limit = PSGD_OOB_LIMIT,
    .fields = powersgd_fields,
    .nfields = ZC_ARRAY_SIZE(powersgd_fields),
    .params_default = powersgd_params_default,
    .params_from_config = powersgd_params_from_config,
    .check = powersgd_check,
    .error_feedback = powersgd_error_feedback,
    /* two passes over M (r products each) to encode, one to expand; codec_bench measures */
    .nominal_encode_bw = 1e9,
    .nominal_decode_bw = 2e9,
    .bound = powersgd_bound,
    .encode = powersgd_encode,
    .decode_add = powersgd_decode_add,
    .state_init = powersgd_state_init,
    .state_fini = powersgd_state_fini,
    .state_bytes = powersgd_state_bytes,
};
