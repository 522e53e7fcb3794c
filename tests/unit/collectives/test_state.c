/* The per-tensor state store: lookup, reset on change, slots, LRU eviction, residual norm. */
#include "collectives/state.h"

#include <criterion/criterion.h>

#include <math.h>

static zc_codec_params_t topk_params(void)
{
    zc_codec_params_t p;
    cr_assert_eq(zc_codec_params_default(ZC_CODEC_TOPK, &p), ZC_OK);
    return p;
}

Test(state, same_key_same_state)
{
    zc_state_store_t *store;
    zc_tensor_state_t *a, *b;
    zc_codec_params_t p = topk_params();

    cr_assert_eq(zc_state_store_create(1 << 20, &store), ZC_OK);
    cr_assert_eq(zc_state_get(store, 7, 100, ZC_DTYPE_F32, &p, &a), ZC_OK);
    a->calls = 3;
    cr_assert_eq(zc_state_get(store, 7, 100, ZC_DTYPE_F32, &p, &b), ZC_OK);
    cr_assert_eq(a, b);
    cr_assert_eq(b->calls, 3);
    cr_assert_eq(zc_state_get(store, 8, 100, ZC_DTYPE_F32, &p, &b), ZC_OK);
    cr_assert_neq(a, b);
    cr_assert_eq(zc_state_store_tensors(store), 2);
    zc_state_store_destroy(store);
}

Test(state, reset_when_count_dtype_or_params_change)
{
    zc_state_store_t *store;
    zc_tensor_state_t *ts;
    zc_codec_state_t *cs;
    zc_codec_params_t p = topk_params();

    cr_assert_eq(zc_state_store_create(1 << 20, &store), ZC_OK);
    cr_assert_eq(zc_state_get(store, 1, 100, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    cr_assert_eq(zc_state_slot(store, ts, 0, &p, 100, &cs), ZC_OK);
    ts->calls = 5;
    cr_assert_gt(zc_state_store_bytes(store), 100 * sizeof(float) - 1);

    cr_assert_eq(zc_state_get(store, 1, 101, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    cr_assert_eq(ts->calls, 0, "a new count starts a new state");
    cr_assert_eq(zc_state_store_bytes(store), 0, "the old slots were freed");
    ts->calls = 5;
    cr_assert_eq(zc_state_get(store, 1, 101, ZC_DTYPE_F16, &p, &ts), ZC_OK);
    cr_assert_eq(ts->calls, 0, "a new dtype starts a new state");
    ts->calls = 5;
    p.topk.density = 0.02;
    cr_assert_eq(zc_state_get(store, 1, 101, ZC_DTYPE_F16, &p, &ts), ZC_OK);
    cr_assert_eq(ts->calls, 0, "new params start a new state");
    cr_assert_eq(zc_state_store_tensors(store), 1);
    zc_state_store_destroy(store);
}

Test(state, slots_are_kept_and_remade_on_change)
{
    zc_state_store_t *store;
    zc_tensor_state_t *ts;
    zc_codec_state_t *a, *b, *c;
    zc_codec_params_t p = topk_params();

    cr_assert_eq(zc_state_store_create(1 << 20, &store), ZC_OK);
    cr_assert_eq(zc_state_get(store, 1, 100, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    cr_assert_eq(zc_state_slot(store, ts, 3, &p, 50, &a), ZC_OK);
    cr_assert_eq(zc_state_slot(store, ts, 0, &p, 50, &b), ZC_OK);
    cr_assert_neq(a, b);
    cr_assert_eq(zc_state_slot(store, ts, 3, &p, 50, &c), ZC_OK);
    cr_assert_eq(a, c, "the same slot, count and params give the same state");
    size_t before = zc_state_store_bytes(store);
    cr_assert_eq(zc_state_slot(store, ts, 3, &p, 60, &c), ZC_OK);
    cr_assert_gt(zc_state_store_bytes(store), before, "a larger part charges more");
    zc_state_store_destroy(store);
}

Test(state, least_recently_used_is_dropped)
{
    zc_state_store_t *store;
    zc_tensor_state_t *ts;
    zc_codec_state_t *cs;
    zc_codec_params_t p = topk_params();
    size_t n = 1000; /* residual of 4000 bytes per tensor */

    cr_assert_eq(zc_state_store_create(10000, &store), ZC_OK);
    for (uint64_t key = 1; key <= 2; key++) {
        cr_assert_eq(zc_state_get(store, key, n, ZC_DTYPE_F32, &p, &ts), ZC_OK);
        cr_assert_eq(zc_state_slot(store, ts, 0, &p, n, &cs), ZC_OK);
        ts->calls = (uint32_t)key;
    }
    /* touch 1: 2 is now the least recently used */
    cr_assert_eq(zc_state_get(store, 1, n, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    cr_assert_eq(zc_state_get(store, 3, n, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    cr_assert_eq(zc_state_slot(store, ts, 0, &p, n, &cs), ZC_OK);
    cr_assert_eq(zc_state_store_tensors(store), 2);
    cr_assert_leq(zc_state_store_bytes(store), 10000);
    cr_assert_eq(zc_state_get(store, 1, n, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    cr_assert_eq(ts->calls, 1, "tensor 1 kept its state");
    cr_assert_eq(zc_state_get(store, 2, n, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    cr_assert_eq(ts->calls, 0, "tensor 2 was dropped");
    zc_state_store_destroy(store);
}

Test(state, oversized_tensor_is_still_served)
{
    zc_state_store_t *store;
    zc_tensor_state_t *ts;
    zc_codec_state_t *cs;
    zc_codec_params_t p = topk_params();

    cr_assert_eq(zc_state_store_create(100, &store), ZC_OK);
    cr_assert_eq(zc_state_get(store, 1, 1000, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    cr_assert_eq(zc_state_slot(store, ts, 0, &p, 1000, &cs), ZC_OK);
    cr_assert_not_null(cs);
    zc_state_store_destroy(store);
}

Test(state, residual_norm_sums_every_slot)
{
    zc_state_store_t *store;
    zc_tensor_state_t *ts;
    zc_codec_state_t *cs;
    zc_codec_params_t p = topk_params();
    float x[200];
    uint8_t payload[4096];
    size_t len;

    p.topk.density = 0.01; /* keeps 2 of 200: the rest stays in the residual */
    for (int i = 0; i < 200; i++)
        x[i] = 1.0f + (float)i / 200.0f;
    cr_assert_eq(zc_state_store_create(1 << 20, &store), ZC_OK);
    cr_assert_eq(zc_state_get(store, 1, 400, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    double want2 = 0;
    for (size_t slot = 0; slot < 2; slot++) {
        cr_assert_eq(zc_state_slot(store, ts, slot, &p, 200, &cs), ZC_OK);
        cr_assert_eq(
            zc_codec_encode(&p, cs, NULL, ZC_DTYPE_F32, x, 200, payload, sizeof(payload), &len),
            ZC_OK);
        double r = zc_codec_state_residual_norm(cs);
        cr_assert_gt(r, 0);
        want2 += r * r;
    }
    cr_assert_float_eq(zc_state_store_residual_norm(store), sqrt(want2), 1e-9);
    zc_state_store_destroy(store);
}
