/*
 * The state of a stateful codec as both fuzz_corpus and the fuzz targets make
 * it: created from @p params for @p count values, then taught one fixed sum
 * (zc_codec_state_update), so that seeds of a codec with learned state
 * (GradiVeQ's basis) decode in the targets and the fuzzer starts deep in the
 * decoder. The sum is computed in integers, so that gcc (fuzz_corpus) and
 * clang (the targets) produce the same floats.
 */
#ifndef ZC_TEST_FUZZ_STATE_H
#define ZC_TEST_FUZZ_STATE_H

#include <zipccl/zipccl_codec.h>

#include <stdint.h>
#include <stdlib.h>

static inline zc_status_t fuzz_state_create(const zc_codec_params_t *params, uint64_t count,
                                            zc_codec_state_t **state_p)
{
    zc_codec_state_t *state;
    zc_status_t st = zc_codec_state_create(params, count, &state);
    if (st != ZC_OK)
        return st;
    float *sum = malloc(count ? (size_t)count * sizeof(float) : 1);
    if (!sum) {
        zc_codec_state_destroy(state);
        return ZC_ERR_NO_MEMORY;
    }
    uint32_t h = 0x9e3779b9u;
    for (uint64_t i = 0; i < count; i++) {
        h ^= h << 13; /* xorshift32 (Marsaglia 2003) */
        h ^= h >> 17;
        h ^= h << 5;
        /* a smooth part shared by neighbouring slices plus noise, in steps of 1/64 */
        sum[i] = (float)((int32_t)(i % 64) - 32 + (int32_t)(h % 33) - 16) / 64.0f;
    }
    st = zc_codec_state_update(state, sum, count);
    free(sum);
    if (st != ZC_OK) {
        zc_codec_state_destroy(state);
        return st;
    }
    *state_p = state;
    return ZC_OK;
}

#endif
