/*
 * Bit writer and reader with bounds checks.
 *
 * Bits are packed least-significant first into little-endian bytes: a value put
 * with n bits is read back by a get of n bits. Both sides are sticky on error:
 * a writer that runs out of room stops writing and reports it at finish; a
 * reader past the end returns zeros and reports it, so a decoder checks once
 * per bucket rather than per bit, and never touches memory out of bounds.
 */
#ifndef ZC_COMMON_BITIO_H
#define ZC_COMMON_BITIO_H

#include "common/compiler.h"

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* Number of bits in the binary representation of x (0 for 0). */
static inline unsigned zc_bitlen32(uint32_t x)
{
    return x ? 32u - (unsigned)__builtin_clz(x) : 0u;
}

static inline uint64_t zc_load_le64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline void zc_store_le64(uint8_t *p, uint64_t v)
{
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    memcpy(p, &v, sizeof(v));
}

static inline uint32_t zc_load_le32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline void zc_store_le32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

typedef struct zc_bitwriter {
    uint8_t *buf;
    size_t cap;   /* bytes available at buf */
    size_t pos;   /* whole bytes written; never above cap */
    uint64_t acc; /* pending bits (fewer than 8 between puts), LSB first */
    unsigned nbits;
    int overflow;
} zc_bitwriter_t;

static inline void zc_bw_init(zc_bitwriter_t *w, void *buf, size_t cap)
{
    w->buf = (uint8_t *)buf;
    w->cap = cap;
    w->pos = 0;
    w->acc = 0;
    w->nbits = 0;
    w->overflow = 0;
}

/* Moves whole bytes from acc to buf one at a time, within cap. */
static inline void zc_bw_drain(zc_bitwriter_t *w)
{
    while (w->nbits >= 8) {
        if (w->pos < w->cap)
            w->buf[w->pos++] = (uint8_t)w->acc;
        else
            w->overflow = 1;
        w->acc >>= 8;
        w->nbits -= 8;
    }
}

/*
 * Appends the low @p n bits of @p value, 0 <= n <= 56. Away from the end of the
 * buffer this is one unaligned 8-byte store (bytes past the new end are zeros
 * that the next put overwrites); near the end, bytes go one at a time.
 */
static inline void zc_bw_put(zc_bitwriter_t *w, uint64_t value, unsigned n)
{
    w->acc |= (value & ((UINT64_C(1) << n) - 1)) << w->nbits;
    w->nbits += n;
    if (ZC_LIKELY(w->cap - w->pos >= 8)) {
        zc_store_le64(w->buf + w->pos, w->acc);
        unsigned bytes = w->nbits >> 3; /* nbits <= 63: at most 7 */
        w->pos += bytes;
        w->acc = bytes ? w->acc >> (bytes * 8) : w->acc;
        w->nbits &= 7;
    } else {
        zc_bw_drain(w);
    }
}

/* Bits written so far, pending ones included (exact unless the writer overflowed). */
static inline uint64_t zc_bw_bits(const zc_bitwriter_t *w)
{
    return (uint64_t)w->pos * 8 + w->nbits;
}

/* Pads with zeros to a byte boundary and flushes; returns the byte count, or SIZE_MAX on overflow.
 */
static inline size_t zc_bw_flush(zc_bitwriter_t *w)
{
    w->nbits = (w->nbits + 7) & ~7u;
    zc_bw_drain(w);
    w->acc = 0;
    return w->overflow ? SIZE_MAX : w->pos;
}

typedef struct zc_bitreader {
    const uint8_t *buf;
    size_t len; /* bytes readable at buf */
    size_t pos; /* next byte to load into acc */
    uint64_t acc;
    unsigned nbits;
    int overrun;
} zc_bitreader_t;

static inline void zc_br_init(zc_bitreader_t *r, const void *buf, size_t len)
{
    r->buf = (const uint8_t *)buf;
    r->len = len;
    r->pos = 0;
    r->acc = 0;
    r->nbits = 0;
    r->overrun = 0;
}

static inline void zc_br_refill(zc_bitreader_t *r)
{
    if (ZC_LIKELY(r->len - r->pos >= 8)) {
        r->acc |= zc_load_le64(r->buf + r->pos) << r->nbits;
        unsigned take = (63 - r->nbits) >> 3;
        r->pos += take;
        r->nbits += take * 8;
        return;
    }
    while (r->nbits <= 56 && r->pos < r->len) {
        r->acc |= (uint64_t)r->buf[r->pos++] << r->nbits;
        r->nbits += 8;
    }
}

/* Reads @p n bits, 0 <= n <= 32. Past the end it returns zeros and sets overrun. */
static inline uint32_t zc_br_get(zc_bitreader_t *r, unsigned n)
{
    if (r->nbits < n) {
        zc_br_refill(r);
        if (ZC_UNLIKELY(r->nbits < n)) {
            r->overrun = 1;
            r->nbits = n; /* the missing high bits read as zeros */
        }
    }
    uint32_t v = (uint32_t)(n == 32 ? r->acc : (r->acc & ((UINT64_C(1) << n) - 1)));
    r->acc = n == 64 ? 0 : r->acc >> n;
    r->nbits -= n;
    return v;
}

/*
 * Returns the next @p n bits (0 < n <= 32) without consuming them; bits past
 * the end read as zeros. Pair with zc_br_skip, which flags the overrun.
 */
static inline uint32_t zc_br_peek(zc_bitreader_t *r, unsigned n)
{
    if (r->nbits < n)
        zc_br_refill(r);
    return (uint32_t)(r->acc & ((UINT64_C(1) << n) - 1));
}

/* Consumes @p n bits (n <= 32) already looked at with zc_br_peek. */
static inline void zc_br_skip(zc_bitreader_t *r, unsigned n)
{
    if (ZC_UNLIKELY(r->nbits < n)) {
        r->overrun = 1;
        r->acc = 0;
        r->nbits = 0;
        return;
    }
    r->acc >>= n;
    r->nbits -= n;
}

/* Skips to the next byte boundary. */
static inline void zc_br_align(zc_bitreader_t *r)
{
    unsigned drop = r->nbits & 7;
    r->acc >>= drop;
    r->nbits -= drop;
}

/* Bytes consumed so far, counting a partly read byte as consumed. */
static inline size_t zc_br_consumed(const zc_bitreader_t *r)
{
    return r->pos - r->nbits / 8;
}

#endif
