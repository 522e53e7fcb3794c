/*
 * Elias omega code, as QSGD's lossless stage (Alistarh et al. 2017, §3.2:
 * "start from the binary representation of k, prepend the length of this
 * representation, then recursively encode this prefix").
 *
 * Code of k: groups g_m, ..., g_1, then a 0 bit, where g_1 = k and g_{j+1} =
 * bitlen(g_j) - 1 until it reaches 1. Each group begins with its leading 1 bit,
 * which is what tells the decoder another group follows.
 */
#include "codec/qsgd/qsgd.h"

void zc_elias_put_slow(zc_bitwriter_t *w, uint32_t k)
{
    uint32_t groups[6];
    unsigned widths[6];
    int m = 0;

    while (k > 1) {
        unsigned b = zc_bitlen32(k);
        groups[m] = k;
        widths[m] = b;
        m++;
        k = b - 1;
    }
    while (m-- > 0) {
        /* leading 1 and the remaining b - 1 bits, in one put of at most 32 bits */
        zc_bw_put(w, 1, 1);
        zc_bw_put(w, groups[m], widths[m] - 1);
    }
    zc_bw_put(w, 0, 1);
}

uint32_t zc_elias_get_slow(zc_bitreader_t *r)
{
    uint32_t n = 1;

    for (int groups = 0; groups < 6; groups++) {
        if (zc_br_get(r, 1) == 0)
            return n;
        if (n > 31)
            return 0; /* a 33-bit group cannot encode a 32-bit value */
        n = (UINT32_C(1) << n) | zc_br_get(r, n);
    }
    return 0;
}
