/*
 * Positions of the kept values as gaps: gap_j = idx_j - idx_{j-1} - 1 with
 * idx_{-1} = -1, so that gaps are >= 0 and a dense run costs zero-valued gaps.
 * Two codings, the smaller chosen per payload (docs/codecs.md):
 *   LEB128 varint: 7 bits a byte, low groups first, high bit = more follows;
 *   Golomb-Rice with parameter b (Golomb 1966; Rice 1979): q = gap >> b as q
 *   zero bits and a one bit, then the low b bits, packed least-significant
 *   first. For geometric gaps of mean m the best parameter is near
 *   log2(m ln 2) (Gallager & van Voorhis 1975), which at 1% density is within
 *   0.1 bit of the entropy of the positions (reference/algorithms.md E.3).
 */
#include "codec/topk/topk_int.h"

#define LN2_Q16 45426u /* ln 2 * 2^16 */

uint64_t zc_topk_varint_bytes(const uint64_t *idx, uint64_t c)
{
    uint64_t bytes = 0, next = 0;
    for (uint64_t j = 0; j < c; j++) {
        bytes += zc_varint_len(idx[j] - next);
        next = idx[j] + 1;
    }
    return bytes;
}

static unsigned bitlen64(uint64_t x)
{
    return x ? 64u - (unsigned)__builtin_clzll(x) : 0u;
}

unsigned zc_topk_rice_choose(const uint64_t *idx, uint64_t c, uint64_t *bytes_p)
{
    /* sum of gaps = idx_last + 1 - c <= 2^40, so the product stays below 2^57 */
    const uint64_t sum = idx[c - 1] + 1 - c;
    const uint64_t m = (sum * LN2_Q16 >> 16) / c;
    const unsigned b0 = m ? bitlen64(m) - 1 : 0;
    unsigned cand[3] = {b0 ? b0 - 1 : b0, b0, b0 + 1};
    uint64_t q[3] = {0, 0, 0}, next = 0;

    for (int t = 0; t < 3; t++)
        cand[t] = cand[t] > ZC_TOPK_RICE_MAX_PARAM ? ZC_TOPK_RICE_MAX_PARAM : cand[t];
    for (uint64_t j = 0; j < c; j++) {
        uint64_t g = idx[j] - next;
        next = idx[j] + 1;
        q[0] += g >> cand[0];
        q[1] += g >> cand[1];
        q[2] += g >> cand[2];
    }
    unsigned best = cand[0];
    uint64_t best_bytes = UINT64_MAX;
    for (int t = 0; t < 3; t++) {
        uint64_t bytes = (q[t] + c * (1 + cand[t]) + 7) / 8;
        if (bytes < best_bytes) {
            best = cand[t];
            best_bytes = bytes;
        }
    }
    *bytes_p = best_bytes;
    return best;
}

void zc_topk_varint_write(const uint64_t *idx, uint64_t c, uint8_t *dst)
{
    uint64_t next = 0;
    for (uint64_t j = 0; j < c; j++) {
        uint64_t g = idx[j] - next;
        next = idx[j] + 1;
        while (g >= 0x80) {
            *dst++ = (uint8_t)(g | 0x80);
            g >>= 7;
        }
        *dst++ = (uint8_t)g;
    }
}

size_t zc_topk_rice_write(const uint64_t *idx, uint64_t c, unsigned b, uint8_t *dst, size_t bytes)
{
    zc_bitwriter_t w;
    uint64_t next = 0;

    zc_bw_init(&w, dst, bytes);
    for (uint64_t j = 0; j < c; j++) {
        uint64_t g = idx[j] - next;
        next = idx[j] + 1;
        uint64_t q = g >> b;
        uint64_t code = 1 | (g & ((UINT64_C(1) << b) - 1)) << 1; /* stop bit, then the low bits */
        if (ZC_LIKELY(q + 1 + b <= 56)) {
            zc_bw_put(&w, code << q, (unsigned)(q + 1 + b));
            continue;
        }
        for (; q > 56; q -= 56)
            zc_bw_put(&w, 0, 56);
        zc_bw_put(&w, 0, (unsigned)q);
        zc_bw_put(&w, code, 1 + b);
    }
    return zc_bw_flush(&w);
}

/*
 * Position j goes into the block; a full block has its values added. The last
 * block is added only once the whole section has been checked, so a payload
 * of at most one block adds nothing unless it is valid; in a longer one, the
 * blocks before the damage have been added.
 */
static inline void block_put(const zc_topk_sink_t *sink, uint64_t *pos, uint64_t j, uint64_t c,
                             uint64_t p)
{
    pos[j % ZC_TOPK_DECODE_BLOCK] = p;
    if (j % ZC_TOPK_DECODE_BLOCK == ZC_TOPK_DECODE_BLOCK - 1 && j + 1 < c)
        zc_topk_sink_add(sink, pos, j + 1 - ZC_TOPK_DECODE_BLOCK, ZC_TOPK_DECODE_BLOCK);
}

/* Adds the values of the last block of @p c positions (1 to a whole block). */
static inline void block_flush(const zc_topk_sink_t *sink, const uint64_t *pos, uint64_t c)
{
    if (c == 0)
        return;
    size_t m = (size_t)((c - 1) % ZC_TOPK_DECODE_BLOCK) + 1;
    zc_topk_sink_add(sink, pos, c - m, m);
}

zc_status_t zc_topk_varint_decode(const uint8_t *src, size_t len, uint64_t c, uint64_t n,
                                  const zc_topk_sink_t *sink)
{
    const uint8_t *p = src, *end = src + len;
    uint64_t next = 0, pos[ZC_TOPK_DECODE_BLOCK];

    for (uint64_t j = 0; j < c; j++) {
        uint64_t g = 0;
        for (unsigned shift = 0;; shift += 7) {
            /* 6 bytes hold 42 bits, more than any gap below 2^40 */
            if (p == end || shift > 35)
                return ZC_ERR_CORRUPT;
            uint8_t byte = *p++;
            g |= (uint64_t)(byte & 0x7f) << shift;
            if (!(byte & 0x80)) {
                if (byte == 0 && shift > 0)
                    return ZC_ERR_CORRUPT; /* overlong: the encoder writes the shortest form */
                break;
            }
        }
        if (next >= n || g > n - 1 - next)
            return ZC_ERR_CORRUPT;
        next += g;
        block_put(sink, pos, j, c, next++);
    }
    if (p != end)
        return ZC_ERR_CORRUPT;
    block_flush(sink, pos, c);
    return ZC_OK;
}

/* One gap bit by bit: long quotients, and the end of the stream. */
static zc_status_t rice_get_slow(zc_bitreader_t *r, unsigned b, uint64_t qmax, uint64_t *g_p)
{
    uint64_t q = 0;
    while (zc_br_get(r, 1) == 0) {
        if (r->overrun || ++q > qmax)
            return ZC_ERR_CORRUPT;
    }
    uint64_t low = zc_br_get(r, b < 32 ? b : 32);
    if (b > 32)
        low |= (uint64_t)zc_br_get(r, b - 32) << 32;
    if (r->overrun)
        return ZC_ERR_CORRUPT;
    *g_p = q << b | low;
    return ZC_OK;
}

zc_status_t zc_topk_rice_decode(const uint8_t *src, size_t len, uint64_t c, uint64_t n, unsigned b,
                                const zc_topk_sink_t *sink)
{
    const uint64_t qmax = n >> b, low_mask = (UINT64_C(1) << b) - 1;
    zc_bitreader_t r;
    uint64_t next = 0, pos[ZC_TOPK_DECODE_BLOCK];

    zc_br_init(&r, src, len);
    for (uint64_t j = 0; j < c; j++) {
        uint64_t g;
        if (r.nbits < 48)
            zc_br_refill(&r);
        /* bits above nbits in acc are zeros or the stream's own next bits */
        unsigned q = r.acc ? (unsigned)__builtin_ctzll(r.acc) : 64;
        unsigned used = q + 1 + b;
        if (ZC_LIKELY(used <= r.nbits && used < 64)) {
            if (q > qmax)
                return ZC_ERR_CORRUPT;
            g = (uint64_t)q << b | ((r.acc >> (q + 1)) & low_mask);
            r.acc >>= used;
            r.nbits -= used;
        } else {
            ZC_CHECK(rice_get_slow(&r, b, qmax, &g));
        }
        if (next >= n || g > n - 1 - next)
            return ZC_ERR_CORRUPT;
        next += g;
        block_put(sink, pos, j, c, next++);
    }
    /* the rest of the last byte is zero padding, and nothing follows it */
    if (r.acc & ((UINT64_C(1) << (r.nbits & 7)) - 1))
        return ZC_ERR_CORRUPT;
    zc_br_align(&r);
    if (zc_br_consumed(&r) != len)
        return ZC_ERR_CORRUPT;
    block_flush(sink, pos, c);
    return ZC_OK;
}
