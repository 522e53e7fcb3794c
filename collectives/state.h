/*
 * Per-tensor state: the codec state of each tensor (error-feedback residual,
 * GradiVeQ basis) and its call counter, keyed by the caller's tensor key.
 * Bounded by ZIPCCL_STATE_MAX_BYTES: the least recently used tensor's state is
 * dropped when a new one would not fit (logged at info; a dropped
 * error-feedback residual is counted and warned about once per tensor). A tensor's state
 * is reset when its count, dtype or codec parameters change.
 */
#ifndef ZC_COLLECTIVES_STATE_H
#define ZC_COLLECTIVES_STATE_H

#include <zipccl/zipccl.h>

#include <stddef.h>
#include <stdint.h>

typedef struct zc_state_store zc_state_store_t;

/*
 * One tensor's state. An algorithm encodes a tensor as one or more parts
 * (segments of a ring, shards of a scatter, chunks of a pipeline), each with a
 * codec state of its own in a numbered slot; the slots an algorithm uses are
 * its business, and they are the same on every call with the same path.
 */
typedef struct zc_tensor_state {
    uint64_t key;
    size_t count;
    zc_dtype_t dtype;
    zc_codec_params_t params;
    uint32_t calls; /* calls completed with this state: the rng counter */
    size_t bytes;   /* what the store charges for it (the parts' states) */
    /*
     * Per codec that learns its ratio (zc_codec_learns_ratio): payload over
     * raw bytes of this tensor's calls, from its states after its last call
     * with that codec (identical on every rank); 0: never measured. Kept when
     * the state is reset for other codec parameters.
     */
    double learned_ratio[ZC_CODEC_COUNT];
    /*
     * Per codec: f32 input bytes/s of encode and decode on this tensor's calls,
     * the slowest rank's, as the ranks agreed (zc_policy_agree_speed, in the
     * call header exchange); 0: not yet. Kept like learned_ratio.
     */
    double learned_enc_bw[ZC_CODEC_COUNT];
    double learned_dec_bw[ZC_CODEC_COUNT];
    /* this rank's own speeds on the tensor's last call (of codec params.codec), sent in the next
     * call's header; 0: none yet (the first call, a warm-up, is not measured). Rank-local. */
    double own_enc_bw, own_dec_bw;

    /* store's */
    size_t nslots;
    zc_codec_state_t **slots;
    size_t *slot_counts;
    struct zc_tensor_state *lru_prev, *lru_next, *hash_next;
} zc_tensor_state_t;

zc_status_t zc_state_store_create(size_t max_bytes, zc_state_store_t **store_p);
void zc_state_store_destroy(zc_state_store_t *store);

/*
 * The state of tensor @p key for a call with @p count values of @p dtype
 * encoded with @p params: the existing one when all three match, else a fresh
 * one (the old dropped). Marks it most recently used. Errors: ZC_ERR_NO_MEMORY.
 */
zc_status_t zc_state_get(zc_state_store_t *store, uint64_t key, size_t count, zc_dtype_t dtype,
                         const zc_codec_params_t *params, zc_tensor_state_t **ts_p);

/*
 * The learned ratios (zc_tensor_state_t.learned_ratio) of tensor @p key if the
 * store holds it with @p count values of @p dtype; NULL if not. Changes nothing.
 */
const double *zc_state_learned_ratios(const zc_state_store_t *store, uint64_t key, size_t count,
                                      zc_dtype_t dtype);

/*
 * The state of tensor @p key if the store holds it with @p count values of
 * @p dtype (its learned numbers: zc_policy_learned_t); NULL if not. Changes nothing.
 */
const zc_tensor_state_t *zc_state_find(const zc_state_store_t *store, uint64_t key, size_t count,
                                       zc_dtype_t dtype);

/*
 * Records in @p ts the ratio its slots' states learned (their learned ratios
 * weighted by their counts) for the codec of @p params, if it learns one.
 */
void zc_state_note_ratio(zc_tensor_state_t *ts, const zc_codec_params_t *params);

/*
 * The codec state in @p slot of @p ts for a part of @p count values encoded
 * with @p params (zc_codec_needs_state must hold), created on first use or when
 * the count or params changed; evicts least recently used other tensors to
 * keep the store under its bound (one tensor larger than the bound is still
 * served, with a warning). Errors: ZC_ERR_NO_MEMORY, ZC_ERR_INVALID_CONFIG.
 */
zc_status_t zc_state_slot(zc_state_store_t *store, zc_tensor_state_t *ts, size_t slot,
                          const zc_codec_params_t *params, size_t count,
                          zc_codec_state_t **state_p);

/* Tensors whose error-feedback residual was dropped for room (their gradient mass is lost). */
uint64_t zc_state_store_evicted_residuals(const zc_state_store_t *store);
/* Values the states' encodes sent out of band (non-finite, past the range), dropped ones too. */
uint64_t zc_state_store_oob_values(const zc_state_store_t *store);

/* Bytes held, tensors held, and the L2 norm over every residual. */
size_t zc_state_store_bytes(const zc_state_store_t *store);
size_t zc_state_store_tensors(const zc_state_store_t *store);
double zc_state_store_residual_norm(const zc_state_store_t *store);

#endif
