/*
 * The codec facts each ops table owns (codec/codec.h), over the whole
 * registry: the parameter fields behind equality, the call header's hash and
 * the smallest struct_size; defaults and configuration; granule, wire ratio,
 * nominal speeds, state size, linearity and the rank count.
 */
#include "codec/codec.h"
#include "common/config.h"

#include "codec_test.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <string.h>

static const zc_codec_ops_t *ops_of(unsigned c)
{
    const zc_codec_ops_t *ops = zc_codec_ops((zc_codec_id_t)c);
    cr_assert_not_null(ops, "codec %u has no ops", c);
    return ops;
}

static zc_codec_params_t defaults(unsigned c)
{
    zc_codec_params_t p;
    cr_assert_eq(zc_codec_params_default((zc_codec_id_t)c, &p), ZC_OK);
    return p;
}

/* Changes the field at @p f of @p p to another valid-looking value. */
static void perturb(zc_codec_params_t *p, const zc_codec_field_t *f)
{
    uint8_t *at = (uint8_t *)p + f->offset;
    if (f->kind == ZC_CODEC_FIELD_F64) {
        double v;
        memcpy(&v, at, sizeof(v));
        v = v * 0.5 + 0.25;
        memcpy(at, &v, sizeof(v));
    } else {
        at[0] ^= 1;
    }
}

Test(codec_ops, table_is_complete)
{
    for (unsigned c = 0; c < ZC_CODEC_COUNT; c++) {
        const zc_codec_ops_t *ops = ops_of(c);
        cr_assert_eq(ops->id, (zc_codec_id_t)c);
        cr_assert_not_null(ops->name);
        cr_assert(ops->bound && ops->encode && ops->decode_add, "%s", ops->name);
        /* linearity is one fact: the cap, the reduce op and a reduce speed agree */
        int linear = (ops->caps & ZC_CODEC_CAP_LINEAR) != 0;
        cr_assert_eq(linear, ops->reduce != NULL, "%s", ops->name);
        cr_assert_eq(linear, ops->nominal_reduce_bw > 0, "%s", ops->name);
        cr_assert_gt(ops->nominal_encode_bw, 0, "%s", ops->name);
        cr_assert_gt(ops->nominal_decode_bw, 0, "%s", ops->name);
        cr_assert_eq(ops->nfields == 0, ops->fields == NULL, "%s", ops->name);
        cr_assert_eq(ops->nfields == 0, ops->params_default == NULL, "%s", ops->name);
        cr_assert_eq(ops->state_fini == NULL, ops->state_init == NULL, "%s", ops->name);
    }
}

/* A codec's fields lie past the id and struct_size, and no two codecs share a byte. */
Test(codec_ops, fields_are_disjoint)
{
    static uint8_t owner[sizeof(zc_codec_params_t)];
    for (unsigned c = 0; c < ZC_CODEC_COUNT; c++) {
        const zc_codec_ops_t *ops = ops_of(c);
        for (unsigned i = 0; i < ops->nfields; i++) {
            const zc_codec_field_t *f = &ops->fields[i];
            cr_assert_geq(f->offset, offsetof(zc_codec_params_t, codec) + sizeof(zc_codec_id_t));
            cr_assert_leq(f->offset + f->size, sizeof(zc_codec_params_t));
            cr_assert(f->kind != ZC_CODEC_FIELD_F64 || f->size == sizeof(double));
            for (size_t b = f->offset; b < f->offset + f->size; b++) {
                cr_assert_eq(owner[b], 0, "%s field %u overlaps codec %u", ops->name, i,
                             owner[b] - 1u);
                owner[b] = (uint8_t)(c + 1);
            }
        }
    }
}

Test(codec_ops, defaults_pass_check)
{
    for (unsigned c = 0; c < ZC_CODEC_COUNT; c++) {
        zc_codec_params_t p = defaults(c);
        cr_assert_eq(p.codec, (zc_codec_id_t)c);
        cr_assert_eq(zc_codec_params_check(&p), ZC_OK, "%s", zc_codec_name(p.codec));
        /* every codec's fields are set: switching codec afterwards stays valid */
        for (unsigned d = 0; d < ZC_CODEC_COUNT; d++) {
            zc_codec_params_t q = p;
            q.codec = (zc_codec_id_t)d;
            cr_assert_eq(zc_codec_params_check(&q), ZC_OK);
        }
    }
}

Test(codec_ops, equal_and_hash_follow_the_fields)
{
    for (unsigned c = 0; c < ZC_CODEC_COUNT; c++) {
        const zc_codec_ops_t *ops = ops_of(c);
        zc_codec_params_t a = defaults(c), b = defaults(c);
        cr_assert(zc_codec_params_equal(&a, &b));
        cr_assert_eq(zc_codec_params_hash(&a), zc_codec_params_hash(&b));

        /* another codec's fields and padding do not count */
        for (unsigned d = 0; d < ZC_CODEC_COUNT; d++) {
            if (d == c)
                continue;
            for (unsigned i = 0; i < ops_of(d)->nfields; i++) {
                zc_codec_params_t q = a;
                perturb(&q, &ops_of(d)->fields[i]);
                cr_assert(zc_codec_params_equal(&a, &q), "%s", ops->name);
                cr_assert_eq(zc_codec_params_hash(&a), zc_codec_params_hash(&q));
            }
            zc_codec_params_t q = a;
            q.codec = (zc_codec_id_t)d;
            cr_assert_not(zc_codec_params_equal(&a, &q));
            cr_assert_neq(zc_codec_params_hash(&a), zc_codec_params_hash(&q));
        }
        /* each own field counts for equality, and for the hash when on the wire */
        for (unsigned i = 0; i < ops->nfields; i++) {
            zc_codec_params_t q = a;
            perturb(&q, &ops->fields[i]);
            cr_assert_not(zc_codec_params_equal(&a, &q), "%s field %u", ops->name, i);
            cr_assert_eq(zc_codec_params_hash(&a) != zc_codec_params_hash(&q), ops->fields[i].wire,
                         "%s field %u", ops->name, i);
        }
    }
}

/* The energy field compares as a double: -0 and +0 are one value. */
Test(codec_ops, doubles_compare_as_numbers)
{
    zc_codec_params_t a = defaults(ZC_CODEC_GRADIVEQ), b = a;
    a.gradiveq.energy = 0.0;
    b.gradiveq.energy = -0.0;
    cr_assert(zc_codec_params_equal(&a, &b));
}

static uint32_t fnv1a(uint32_t h, const void *data, size_t len)
{
    const uint8_t *p = data;
    for (size_t i = 0; i < len; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* Known answers: the id, then the wire fields in declaration order (the call header's hash). */
Test(codec_ops, hash_known_answers)
{
    zc_codec_params_t p = defaults(ZC_CODEC_FP16);
    cr_assert_eq(zc_codec_params_hash(&p), fnv1a(2166136261u, &p.codec, sizeof(p.codec)));

    p = defaults(ZC_CODEC_QSGD);
    p.qsgd.error_feedback = 1;
    uint32_t h = fnv1a(2166136261u, &p.codec, sizeof(p.codec));
    h = fnv1a(h, &p.qsgd.levels, sizeof(p.qsgd.levels));
    h = fnv1a(h, &p.qsgd.bucket, sizeof(p.qsgd.bucket));
    h = fnv1a(h, &p.qsgd.scale, sizeof(p.qsgd.scale));
    h = fnv1a(h, &p.qsgd.coding, sizeof(p.qsgd.coding));
    h = fnv1a(h, &p.qsgd.error_feedback, sizeof(p.qsgd.error_feedback));
    cr_assert_eq(zc_codec_params_hash(&p), h);

    p = defaults(ZC_CODEC_TOPK);
    h = fnv1a(2166136261u, &p.codec, sizeof(p.codec));
    h = fnv1a(h, &p.topk.density, sizeof(p.topk.density));
    h = fnv1a(h, &p.topk.values, sizeof(p.topk.values));
    cr_assert_eq(zc_codec_params_hash(&p), h);
}

Test(codec_ops, from_config)
{
    char *env[] = {"ZIPCCL_QSGD_BITS=8",       "ZIPCCL_QSGD_BUCKET=128",
                   "ZIPCCL_QSGD_CODING=elias", "ZIPCCL_QSGD_EF=1",
                   "ZIPCCL_TOPK_DENSITY=0.05", "ZIPCCL_TOPK_VALUES=f16",
                   "ZIPCCL_GRADIVEQ_SLICE=32", "ZIPCCL_GRADIVEQ_DIM=4",
                   "ZIPCCL_GRADIVEQ_EF=1",     NULL};
    zc_config_t cfg;
    zc_codec_params_t p;

    cr_assert_eq(zc_config_load(env, &cfg), ZC_OK);
    cr_assert_eq(zc_codec_params_from_config(&cfg, ZC_CODEC_TOPK, &p), ZC_OK);
    cr_assert_eq(p.codec, ZC_CODEC_TOPK);
    cr_assert_eq(p.qsgd.levels, 127);
    cr_assert_eq(p.qsgd.bucket, 128);
    cr_assert_eq(p.qsgd.coding, ZC_QSGD_CODING_ELIAS);
    cr_assert_eq(p.qsgd.error_feedback, 1);
    cr_assert_float_eq(p.topk.density, 0.05, 1e-12);
    cr_assert_eq(p.topk.values, ZC_TOPK_VALUES_F16);
    cr_assert_eq(p.gradiveq.slice, 32);
    cr_assert_eq(p.gradiveq.dim, 4);
    cr_assert_eq(p.gradiveq.ranks, 1);
    cr_assert_eq(p.gradiveq.error_feedback, 1);

    char *bad[] = {"ZIPCCL_GRADIVEQ_SLICE=8", "ZIPCCL_GRADIVEQ_DIM=9", NULL};
    cr_assert_eq(zc_config_load(bad, &cfg), ZC_OK);
    cr_assert_eq(zc_codec_params_from_config(&cfg, ZC_CODEC_GRADIVEQ, &p), ZC_ERR_INVALID_CONFIG);
    cr_assert_eq(zc_codec_params_from_config(&cfg, ZC_CODEC_QSGD, &p), ZC_OK);
}

Test(codec_ops, set_ranks)
{
    for (unsigned c = 0; c < ZC_CODEC_COUNT; c++) {
        zc_codec_params_t p = defaults(c), q = p;
        zc_codec_params_set_ranks(&q, 6);
        cr_assert_eq(zc_codec_params_equal(&p, &q),
                     c != ZC_CODEC_GRADIVEQ && c != ZC_CODEC_QSGD_INT);
    }
    zc_codec_params_t p = defaults(ZC_CODEC_GRADIVEQ);
    zc_codec_params_set_ranks(&p, 6);
    cr_assert_eq(p.gradiveq.ranks, 6);
    p = defaults(ZC_CODEC_QSGD_INT);
    zc_codec_params_set_ranks(&p, 6);
    cr_assert_eq(p.qsgd_int.ranks, 6);
}

Test(codec_ops, granule)
{
    for (unsigned c = 0; c < ZC_CODEC_COUNT; c++) {
        zc_codec_params_t p = defaults(c);
        size_t want = c == ZC_CODEC_QSGD       ? p.qsgd.bucket
                      : c == ZC_CODEC_QSGD_INT ? p.qsgd_int.bucket
                      : c == ZC_CODEC_GRADIVEQ ? p.gradiveq.slice
                                               : 0;
        cr_assert_eq(zc_codec_granule(&p), want, "%s", zc_codec_name(p.codec));
    }
}

/* The ratio the cost model starts from is what a large payload measures (fixed coding: exact). */
Test(codec_ops, wire_ratio_matches_payloads)
{
    const size_t n = 1 << 16;
    float *x = xmalloc(n * sizeof(float));
    fill_gauss(x, n, 42, 1.0);

    static const zc_codec_id_t exact[] = {ZC_CODEC_NONE, ZC_CODEC_FP16, ZC_CODEC_BF16,
                                          ZC_CODEC_QSGD};
    for (size_t k = 0; k < sizeof(exact) / sizeof(exact[0]); k++) {
        zc_codec_params_t p = defaults(exact[k]);
        size_t cap = zc_codec_bound(&p, n), len;
        uint8_t *buf = xmalloc(cap);
        cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, x, n, buf, cap, &len), ZC_OK);
        /* the model leaves the headers out (amortised): they are all the difference */
        double extra = (double)len - zc_codec_wire_ratio(&p) * 4.0 * n;
        cr_assert(extra >= ZC_PAYLOAD_HEADER_BYTES && extra <= 64, "%s: %g bytes beyond the model",
                  zc_codec_name(p.codec), extra);
        free(buf);
    }
    /* top-k: its expected size on unstructured input, within 5% */
    zc_codec_params_t p = defaults(ZC_CODEC_TOPK);
    zc_codec_state_t *st;
    cr_assert_eq(zc_codec_state_create(&p, n, &st), ZC_OK);
    size_t cap = zc_codec_bound(&p, n), len;
    uint8_t *buf = xmalloc(cap);
    cr_assert_eq(zc_codec_encode(&p, st, NULL, ZC_DTYPE_F32, x, n, buf, cap, &len), ZC_OK);
    double measured = (double)len / (4.0 * n), model = zc_codec_wire_ratio(&p);
    cr_assert_lt(fabs(measured - model), 0.05 * model, "topk: %g vs %g", measured, model);
    zc_codec_state_destroy(st);
    free(buf);

    p = defaults(ZC_CODEC_GRADIVEQ);
    cr_assert_eq(zc_codec_wire_ratio(&p), 1.0); /* dim learned: nothing credited */
    p.gradiveq.dim = 8;
    /* refresh 20: 19 calls of d / K, one raw */
    cr_assert_eq(zc_codec_wire_ratio(&p), (19 * (8.0 / 64.0) + 1) / 20);
    p.gradiveq.refresh = 0;
    cr_assert_eq(zc_codec_wire_ratio(&p), 8.0 / 64.0);
    free(x);
}

Test(codec_ops, state_bytes)
{
    const size_t n = 1000;
    zc_codec_params_t p = defaults(ZC_CODEC_TOPK);
    zc_codec_state_t *st;
    cr_assert_eq(zc_codec_state_create(&p, n, &st), ZC_OK);
    size_t plain = zc_codec_state_bytes(st);
    cr_assert_geq(plain, n * sizeof(float));
    zc_codec_state_destroy(st);

    /* GradiVeQ adds its K x K matrices: twice in double, twice in float */
    p = defaults(ZC_CODEC_GRADIVEQ);
    cr_assert_eq(zc_codec_state_create(&p, n, &st), ZC_OK);
    size_t k = p.gradiveq.slice;
    cr_assert_eq(zc_codec_state_bytes(st), plain - n * sizeof(float) + k * k * 24);
    zc_codec_state_destroy(st);
}

/* ZIPCCL_CODEC's choices (common/params.def) are the codec names in id order, then auto. */
Test(codec_ops, config_names_every_codec)
{
    char var[64];
    char *env[] = {var, NULL};
    zc_config_t cfg;

    for (unsigned c = 0; c <= ZC_CODEC_COUNT; c++) {
        snprintf(var, sizeof(var), "ZIPCCL_CODEC=%s",
                 c < ZC_CODEC_COUNT ? zc_codec_name((zc_codec_id_t)c) : "auto");
        cr_assert_eq(zc_config_load(env, &cfg), ZC_OK, "%s", var);
        cr_assert_eq(cfg.codec, (int64_t)c, "%s gives index %lld", var, (long long)cfg.codec);
    }
}
