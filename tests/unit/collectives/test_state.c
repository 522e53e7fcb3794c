/* The per-tensor state store: lookup, reset on change, slots, LRU eviction, residual norm. */
#include "collectives/state.h"

#include "common/log.h"

#include <criterion/criterion.h>

#include <math.h>
#include <string.h>

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

static int residual_warnings;

static void count_residual_warnings(void *arg, zc_log_level_t level, const char *file, int line,
                                    const char *msg)
{
    (void)arg, (void)file, (void)line;
    if (level == ZC_LOG_WARN && strstr(msg, "error-feedback residual"))
        residual_warnings++;
}

/*
 * A residual dropped for room is gradient mass lost: every eviction is
 * counted, and each tensor is warned about once, however often it is dropped.
 */
Test(state, dropped_residuals_are_counted_and_warned_once)
{
    zc_state_store_t *store;
    zc_tensor_state_t *ts;
    zc_codec_state_t *cs;
    zc_codec_params_t p = topk_params();
    const size_t n = 1000; /* 4000 bytes of residual: two tensors fit in 10000 */
    static const uint64_t keys[] = {1, 2, 3, 1, 2, 3, 1};

    zc_log_set_sink(count_residual_warnings, NULL);
    residual_warnings = 0;
    cr_assert_eq(zc_state_store_create(10000, &store), ZC_OK);
    for (size_t i = 0; i < sizeof(keys) / sizeof(keys[0]); i++) {
        cr_assert_eq(zc_state_get(store, keys[i], n, ZC_DTYPE_F32, &p, &ts), ZC_OK);
        cr_assert_eq(zc_state_slot(store, ts, 0, &p, n, &cs), ZC_OK);
    }
    /* 1, 2 fit; then 3 drops 1, 1 drops 2, 2 drops 3, 3 drops 1, 1 drops 2 */
    cr_assert_eq(zc_state_store_evicted_residuals(store), 5);
    cr_assert_eq(residual_warnings, 3, "%d warnings for 3 tensors", residual_warnings);
    zc_state_store_destroy(store);
    zc_log_set_sink(NULL, NULL);
}

/* Values a state's encodes sent out of band are counted, also once the state is dropped. */
Test(state, out_of_band_values_are_counted)
{
    zc_state_store_t *store;
    zc_tensor_state_t *ts;
    zc_codec_state_t *cs;
    zc_codec_params_t p = topk_params();
    float x[100] = {0};
    uint8_t payload[4096];
    size_t len;

    x[3] = NAN;
    x[50] = INFINITY;
    cr_assert_eq(zc_state_store_create(1 << 20, &store), ZC_OK);
    cr_assert_eq(zc_state_get(store, 1, 100, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    cr_assert_eq(zc_state_slot(store, ts, 0, &p, 100, &cs), ZC_OK);
    cr_assert_leq(zc_codec_bound(&p, 100), sizeof(payload));
    cr_assert_eq(
        zc_codec_encode(&p, cs, NULL, ZC_DTYPE_F32, x, 100, payload, sizeof(payload), &len), ZC_OK);
    cr_assert_eq(zc_state_store_oob_values(store), 2);
    /* another count resets the tensor's state: the count stays */
    cr_assert_eq(zc_state_get(store, 1, 50, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    cr_assert_eq(zc_state_store_oob_values(store), 2);
    zc_state_store_destroy(store);
}

/*
 * GradiVeQ's learned ratio: none before a basis; after one raw call per slot
 * (warm-up 1, refresh 0) the count-weighted mean of the slots' d / K (tails
 * raw); it survives a reset for other codec parameters of the same tensor,
 * not one for another count.
 */
Test(state, learned_ratio_noted_and_kept)
{
    zc_state_store_t *store;
    zc_tensor_state_t *ts;
    zc_codec_state_t *cs[2];
    zc_codec_params_t p, q = topk_params();
    const size_t counts[2] = {64 * 100, 64 * 50 + 32};

    cr_assert_eq(zc_codec_params_default(ZC_CODEC_GRADIVEQ, &p), ZC_OK);
    p.gradiveq.slice = 64;
    p.gradiveq.dim = 8;
    p.gradiveq.refresh = 0;
    p.gradiveq_warmup = 1;
    cr_assert_eq(zc_state_store_create(1 << 24, &store), ZC_OK);
    cr_assert_eq(zc_state_get(store, 9, 10000, ZC_DTYPE_F32, &p, &ts), ZC_OK);
    for (int i = 0; i < 2; i++)
        cr_assert_eq(zc_state_slot(store, ts, (size_t)i, &p, counts[i], &cs[i]), ZC_OK);
    zc_state_note_ratio(ts, &p);
    cr_assert_eq(ts->learned_ratio[ZC_CODEC_GRADIVEQ], 0, "no basis yet");
    for (int i = 0; i < 2; i++) {
        float *x = malloc(counts[i] * sizeof(float));
        for (size_t j = 0; j < counts[i]; j++)
            x[j] = (float)sin(0.1 * (double)j * (double)(j % 7 + 1));
        cr_assert_eq(zc_codec_state_update(cs[i], x, counts[i]), ZC_OK);
        free(x);
    }
    zc_state_note_ratio(ts, &p);
    const double want = (100.0 * 8 + (50.0 * 8 + 32)) / (double)(counts[0] + counts[1]);
    cr_assert_float_eq(ts->learned_ratio[ZC_CODEC_GRADIVEQ], want, 1e-12, "%.9g, expected %.9g",
                       ts->learned_ratio[ZC_CODEC_GRADIVEQ], want);
    const double *r = zc_state_learned_ratios(store, 9, 10000, ZC_DTYPE_F32);
    cr_assert_not_null(r);
    cr_assert_eq(r[ZC_CODEC_GRADIVEQ], want);
    cr_assert_null(zc_state_learned_ratios(store, 9, 10001, ZC_DTYPE_F32), "another count");
    cr_assert_null(zc_state_learned_ratios(store, 10, 10000, ZC_DTYPE_F32), "another key");

    cr_assert_eq(zc_state_get(store, 9, 10000, ZC_DTYPE_F32, &q, &ts), ZC_OK); /* reset: top-k */
    cr_assert_eq(ts->nslots, 0);
    cr_assert_eq(ts->learned_ratio[ZC_CODEC_GRADIVEQ], want, "kept over another codec");
    cr_assert_eq(zc_state_get(store, 9, 20000, ZC_DTYPE_F32, &q, &ts), ZC_OK);
    cr_assert_eq(ts->learned_ratio[ZC_CODEC_GRADIVEQ], 0, "another count: measured anew");
    zc_state_store_destroy(store);
}
