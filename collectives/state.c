/*
 * The per-tensor state store: a hash table of tensor states with an LRU list,
 * bounded in bytes (ZIPCCL_STATE_MAX_BYTES).
 */
#include "collectives/state.h"

#include "codec/codec.h"
#include "common/log.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define BUCKETS 1024 /* a power of two */

struct zc_state_store {
    size_t max_bytes;
    size_t bytes;
    size_t tensors;
    zc_tensor_state_t *buckets[BUCKETS];
    zc_tensor_state_t *mru, *lru; /* most and least recently used */
    uint64_t evicted_residuals;   /* tensors dropped for room while holding a residual */
    uint64_t oob_values_dropped;  /* values out of band counted by states since dropped */
    uint64_t *warned;             /* keys whose dropped residual was warned about, once each */
    size_t nwarned, warned_cap;
};

static size_t bucket_of(uint64_t key)
{
    key ^= key >> 33;
    key *= UINT64_C(0xff51afd7ed558ccd);
    key ^= key >> 33;
    return (size_t)(key & (BUCKETS - 1));
}

zc_status_t zc_state_store_create(size_t max_bytes, zc_state_store_t **store_p)
{
    zc_state_store_t *store = calloc(1, sizeof(*store));
    if (!store)
        return ZC_ERR_NO_MEMORY;
    store->max_bytes = max_bytes;
    *store_p = store;
    return ZC_OK;
}

static void lru_unlink(zc_state_store_t *store, zc_tensor_state_t *ts)
{
    if (ts->lru_prev)
        ts->lru_prev->lru_next = ts->lru_next;
    else
        store->mru = ts->lru_next;
    if (ts->lru_next)
        ts->lru_next->lru_prev = ts->lru_prev;
    else
        store->lru = ts->lru_prev;
    ts->lru_prev = ts->lru_next = NULL;
}

static void lru_push_front(zc_state_store_t *store, zc_tensor_state_t *ts)
{
    ts->lru_next = store->mru;
    ts->lru_prev = NULL;
    if (store->mru)
        store->mru->lru_prev = ts;
    store->mru = ts;
    if (!store->lru)
        store->lru = ts;
}

static void slots_clear(zc_state_store_t *store, zc_tensor_state_t *ts)
{
    for (size_t i = 0; i < ts->nslots; i++) {
        if (ts->slots[i])
            store->oob_values_dropped += ts->slots[i]->oob_values;
        zc_codec_state_destroy(ts->slots[i]);
    }
    free(ts->slots);
    free(ts->slot_counts);
    ts->slots = NULL;
    ts->slot_counts = NULL;
    ts->nslots = 0;
    store->bytes -= ts->bytes;
    ts->bytes = 0;
}

static void tensor_drop(zc_state_store_t *store, zc_tensor_state_t *ts)
{
    zc_tensor_state_t **pp = &store->buckets[bucket_of(ts->key)];
    while (*pp != ts)
        pp = &(*pp)->hash_next;
    *pp = ts->hash_next;
    lru_unlink(store, ts);
    slots_clear(store, ts);
    store->tensors--;
    free(ts);
}

void zc_state_store_destroy(zc_state_store_t *store)
{
    if (!store)
        return;
    while (store->lru)
        tensor_drop(store, store->lru);
    free(store->warned);
    free(store);
}

zc_status_t zc_state_get(zc_state_store_t *store, uint64_t key, size_t count, zc_dtype_t dtype,
                         const zc_codec_params_t *params, zc_tensor_state_t **ts_p)
{
    zc_tensor_state_t *ts = store->buckets[bucket_of(key)];

    while (ts && ts->key != key)
        ts = ts->hash_next;
    double learned[ZC_CODEC_COUNT] = {0}, enc[ZC_CODEC_COUNT] = {0}, dec[ZC_CODEC_COUNT] = {0};
    if (ts &&
        (ts->count != count || ts->dtype != dtype || !zc_codec_params_equal(&ts->params, params))) {
        ZC_DEBUG("state: tensor %016" PRIx64 " changed (count %zu -> %zu): state reset", key,
                 ts->count, count);
        if (ts->count == count && ts->dtype == dtype) { /* another codec: its measurements hold */
            memcpy(learned, ts->learned_ratio, sizeof(learned));
            memcpy(enc, ts->learned_enc_bw, sizeof(enc));
            memcpy(dec, ts->learned_dec_bw, sizeof(dec));
        }
        tensor_drop(store, ts);
        ts = NULL;
    }
    if (!ts) {
        ts = calloc(1, sizeof(*ts));
        if (!ts)
            return ZC_ERR_NO_MEMORY;
        ts->key = key;
        ts->count = count;
        ts->dtype = dtype;
        ts->params = *params;
        memcpy(ts->learned_ratio, learned, sizeof(learned));
        memcpy(ts->learned_enc_bw, enc, sizeof(enc));
        memcpy(ts->learned_dec_bw, dec, sizeof(dec));
        size_t b = bucket_of(key);
        ts->hash_next = store->buckets[b];
        store->buckets[b] = ts;
        store->tensors++;
    } else {
        lru_unlink(store, ts);
    }
    lru_push_front(store, ts);
    *ts_p = ts;
    return ZC_OK;
}

const zc_tensor_state_t *zc_state_find(const zc_state_store_t *store, uint64_t key, size_t count,
                                       zc_dtype_t dtype)
{
    const zc_tensor_state_t *ts = store->buckets[bucket_of(key)];

    while (ts && ts->key != key)
        ts = ts->hash_next;
    return ts && ts->count == count && ts->dtype == dtype ? ts : NULL;
}

const double *zc_state_learned_ratios(const zc_state_store_t *store, uint64_t key, size_t count,
                                      zc_dtype_t dtype)
{
    const zc_tensor_state_t *ts = zc_state_find(store, key, count, dtype);
    return ts ? ts->learned_ratio : NULL;
}

void zc_state_note_ratio(zc_tensor_state_t *ts, const zc_codec_params_t *params)
{
    double bytes = 0, values = 0;

    if (!zc_codec_learns_ratio(params->codec))
        return;
    for (size_t i = 0; i < ts->nslots; i++) {
        double r = zc_codec_learned_ratio(ts->slots[i]);
        if (!(r > 0))
            return; /* a part that learned nothing yet: no ratio for the tensor */
        bytes += r * (double)ts->slot_counts[i];
        values += (double)ts->slot_counts[i];
    }
    if (values > 0)
        ts->learned_ratio[params->codec] = bytes / values;
}

/* Whether @p key's dropped residual was warned about; remembers it if not. */
static int warned_before(zc_state_store_t *store, uint64_t key)
{
    for (size_t i = 0; i < store->nwarned; i++)
        if (store->warned[i] == key)
            return 1;
    if (store->nwarned == store->warned_cap) {
        size_t cap = store->warned_cap ? 2 * store->warned_cap : 16;
        uint64_t *w = realloc(store->warned, cap * sizeof(*w));
        if (!w)
            return 0; /* warn again rather than never */
        store->warned = w;
        store->warned_cap = cap;
    }
    store->warned[store->nwarned++] = key;
    return 0;
}

/*
 * An evicted error-feedback residual is gradient mass that was never sent and
 * now never will be: counted, and warned about once per tensor.
 */
static void evict_note(zc_state_store_t *store, const zc_tensor_state_t *victim)
{
    double norm2 = 0;
    int residual = 0;

    for (size_t i = 0; i < victim->nslots; i++) {
        if (victim->slots[i] && victim->slots[i]->residual) {
            double r = zc_codec_state_residual_norm(victim->slots[i]);
            norm2 += r * r;
            residual = 1;
        }
    }
    if (!residual) {
        ZC_INFO("state: dropping the state of tensor %016" PRIx64
                " (least recently used, %zu bytes) to stay under ZIPCCL_STATE_MAX_BYTES",
                victim->key, victim->bytes);
        return;
    }
    store->evicted_residuals++;
    if (!warned_before(store, victim->key))
        ZC_WARN("state: dropping the error-feedback residual of tensor %016" PRIx64
                " (least recently used, %zu bytes, L2 norm %.3e) to stay under "
                "ZIPCCL_STATE_MAX_BYTES=%zu: that gradient mass is lost; raise the bound",
                victim->key, victim->bytes, sqrt(norm2), store->max_bytes);
}

/* Drops least recently used tensors other than @p keep until @p need more bytes fit. */
static void make_room(zc_state_store_t *store, const zc_tensor_state_t *keep, size_t need)
{
    while (store->bytes + need > store->max_bytes) {
        zc_tensor_state_t *victim = store->lru;
        while (victim == keep)
            victim = victim->lru_prev;
        if (!victim) {
            ZC_LOG_ONCE(ZC_LOG_WARN,
                        "state: one tensor needs %zu bytes of codec state, more than "
                        "ZIPCCL_STATE_MAX_BYTES=%zu; keeping it anyway",
                        store->bytes + need, store->max_bytes);
            return;
        }
        evict_note(store, victim);
        tensor_drop(store, victim);
    }
}

zc_status_t zc_state_slot(zc_state_store_t *store, zc_tensor_state_t *ts, size_t slot,
                          const zc_codec_params_t *params, size_t count, zc_codec_state_t **state_p)
{
    if (slot >= ts->nslots) {
        size_t n = slot + 1;
        zc_codec_state_t **s = realloc(ts->slots, n * sizeof(*s));
        if (!s)
            return ZC_ERR_NO_MEMORY;
        ts->slots = s;
        size_t *c = realloc(ts->slot_counts, n * sizeof(*c));
        if (!c)
            return ZC_ERR_NO_MEMORY;
        ts->slot_counts = c;
        for (size_t i = ts->nslots; i < n; i++) {
            ts->slots[i] = NULL;
            ts->slot_counts[i] = 0;
        }
        ts->nslots = n;
    }
    zc_codec_state_t *cs = ts->slots[slot];
    if (cs && (ts->slot_counts[slot] != count || !zc_codec_params_equal(&cs->params, params))) {
        size_t old = zc_codec_state_bytes(cs);
        ts->bytes -= old;
        store->bytes -= old;
        zc_codec_state_destroy(cs);
        ts->slots[slot] = cs = NULL;
    }
    if (!cs) {
        ZC_CHECK(zc_codec_state_create(params, count, &cs));
        size_t bytes = zc_codec_state_bytes(cs);
        make_room(store, ts, bytes);
        ts->slots[slot] = cs;
        ts->slot_counts[slot] = count;
        ts->bytes += bytes;
        store->bytes += bytes;
    }
    *state_p = cs;
    return ZC_OK;
}

size_t zc_state_store_bytes(const zc_state_store_t *store)
{
    return store ? store->bytes : 0;
}

uint64_t zc_state_store_evicted_residuals(const zc_state_store_t *store)
{
    return store ? store->evicted_residuals : 0;
}

/* Over every live codec state: values sent out of band, and the residuals' squared norm. */
static void live_totals(const zc_state_store_t *store, uint64_t *oob_p, double *norm2_p)
{
    uint64_t oob = 0;
    double norm2 = 0;
    for (const zc_tensor_state_t *ts = store->mru; ts; ts = ts->lru_next)
        for (size_t i = 0; i < ts->nslots; i++)
            if (ts->slots[i]) {
                double r = zc_codec_state_residual_norm(ts->slots[i]);
                norm2 += r * r;
                oob += ts->slots[i]->oob_values;
            }
    *oob_p = oob;
    *norm2_p = norm2;
}

uint64_t zc_state_store_oob_values(const zc_state_store_t *store)
{
    uint64_t oob;
    double norm2;
    if (!store)
        return 0;
    live_totals(store, &oob, &norm2);
    return oob + store->oob_values_dropped;
}

size_t zc_state_store_tensors(const zc_state_store_t *store)
{
    return store ? store->tensors : 0;
}

double zc_state_store_residual_norm(const zc_state_store_t *store)
{
    uint64_t oob;
    double norm2;
    if (!store)
        return 0;
    live_totals(store, &oob, &norm2);
    return sqrt(norm2);
}
