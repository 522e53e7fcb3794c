/*
 * Philox4x32-10, the counter-based generator of Salmon et al., "Parallel random
 * numbers: as easy as 1, 2, 3" (SC'11). Stateless: four 32-bit outputs are a pure
 * function of a 128-bit counter and a 64-bit key, so any element's random draw
 * can be computed anywhere (SIMD lane, GPU thread) without a shared stream.
 *
 * zipccl keys it as ARCHITECTURE.md says: key = the 64-bit seed; counter =
 * (block, call counter, rank, stream). How codecs map elements to blocks is
 * documented with each codec (qsgd: docs/codecs.md).
 */
#ifndef ZC_COMMON_PHILOX_H
#define ZC_COMMON_PHILOX_H

#include "common/compiler.h"

#include <stdint.h>

#define ZC_PHILOX_M0 UINT32_C(0xD2511F53)
#define ZC_PHILOX_M1 UINT32_C(0xCD9E8D57)
#define ZC_PHILOX_W0 UINT32_C(0x9E3779B9) /* golden ratio */
#define ZC_PHILOX_W1 UINT32_C(0xBB67AE85) /* sqrt(3) - 1 */
#define ZC_PHILOX_ROUNDS 10

static inline ZC_HD void zc_philox4x32_10(const uint32_t ctr[4], const uint32_t key[2],
                                          uint32_t out[4])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];

    for (int r = 0; r < ZC_PHILOX_ROUNDS; r++) {
        uint64_t p0 = (uint64_t)ZC_PHILOX_M0 * c0;
        uint64_t p1 = (uint64_t)ZC_PHILOX_M1 * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += ZC_PHILOX_W0;
        k1 += ZC_PHILOX_W1;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

#endif
