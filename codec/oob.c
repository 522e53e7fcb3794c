#include "codec/oob.h"

#include "codec/payload.h"
#include "common/compiler.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* A 64-bit gap takes at most 10 varint bytes. */
#define OOB_VARINT_MAX 10
#define OOB_BLOCK 1024

void zc_oob_free(zc_oob_t *oob)
{
    free(oob->pos);
    free(oob->val);
    memset(oob, 0, sizeof(*oob));
}

zc_status_t zc_oob_reserve(zc_oob_t *oob, uint64_t cap)
{
    if (cap <= oob->cap)
        return ZC_OK;
    uint64_t *p = realloc(oob->pos, (size_t)cap * sizeof(*p));
    if (!p)
        return ZC_ERR_NO_MEMORY;
    oob->pos = p;
    float *v = realloc(oob->val, (size_t)cap * sizeof(*v));
    if (!v)
        return ZC_ERR_NO_MEMORY;
    oob->val = v;
    oob->cap = cap;
    return ZC_OK;
}

uint64_t zc_oob_clear_nonfinite(float *x, uint64_t n)
{
    uint64_t cleared = 0;
    for (uint64_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) {
            x[i] = 0.0f;
            cleared++;
        }
    }
    return cleared;
}

zc_status_t zc_oob_push(zc_oob_t *oob, uint64_t pos, float val)
{
    if (oob->n == oob->cap)
        ZC_CHECK(zc_oob_reserve(oob, oob->cap ? 2 * oob->cap : 16));
    oob->pos[oob->n] = pos;
    oob->val[oob->n++] = val;
    return ZC_OK;
}

/*
 * Whether any |x[i]| >= limit or is NaN: on the bit patterns, |x| >= limit is
 * (bits & 0x7fffffff) >= bits(limit) for a positive limit, and a NaN's bits
 * are above every infinity's. A max over integers, no branch; whole blocks
 * have a constant trip count, which the compiler vectorizes at -O2.
 */
static uint32_t max_abs_bits(const float *x, size_t n)
{
    uint32_t m = 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof(b));
        b &= 0x7fffffffu;
        m = b > m ? b : m;
    }
    return m;
}

/*
 * Signed: below 2^31 the order is the same, and SSE2 compares signed 32-bit
 * lanes. Cloned for the wide vector units: it runs between AVX-512 code
 * (GradiVeQ's sgemm), where an SSE2 loop is slow.
 */
ZC_WIDE_CLONES
static uint32_t max_abs_bits_block(const float *x)
{
    int32_t m = 0;
    for (size_t i = 0; i < OOB_BLOCK; i++) {
        int32_t b;
        memcpy(&b, &x[i], sizeof(b));
        b &= 0x7fffffff;
        m = b > m ? b : m;
    }
    return (uint32_t)m;
}

int zc_oob_any(const float *x, size_t n, float limit)
{
    uint32_t lim, m = 0;
    memcpy(&lim, &limit, sizeof(lim));
    for (; n >= OOB_BLOCK; x += OOB_BLOCK, n -= OOB_BLOCK)
        m = ZC_MAX(m, max_abs_bits_block(x));
    return ZC_MAX(m, max_abs_bits(x, n)) >= lim;
}

static zc_status_t scan_f32(const float *x, size_t n, uint64_t first, uint32_t lim, uint32_t top,
                            zc_oob_t *oob)
{
    if ((n == OOB_BLOCK ? max_abs_bits_block(x) : max_abs_bits(x, n)) < lim)
        return ZC_OK;
    for (size_t i = 0; i < n; i++) {
        uint32_t b;
        memcpy(&b, &x[i], sizeof(b));
        b &= 0x7fffffffu;
        if (b >= lim && b <= top)
            ZC_CHECK(zc_oob_push(oob, first + i, x[i]));
    }
    return ZC_OK;
}

zc_status_t zc_oob_scan(zc_dtype_t dtype, const void *src, uint64_t count, float limit,
                        int finite_only, zc_oob_t *oob)
{
    const size_t esize = zc_dtype_size(dtype);
    const uint32_t top = finite_only ? 0x7f7fffffu : UINT32_MAX; /* FLT_MAX's bits */
    uint32_t lim;
    float tmp[OOB_BLOCK];

    memcpy(&lim, &limit, sizeof(lim));
    for (uint64_t first = 0; first < count; first += OOB_BLOCK) {
        size_t n = (size_t)ZC_MIN((uint64_t)OOB_BLOCK, count - first);
        const float *x = (const float *)src + first;
        if (dtype != ZC_DTYPE_F32) {
            zc_dtype_to_f32(dtype, (const uint8_t *)src + first * esize, n, tmp);
            x = tmp;
        }
        ZC_CHECK(scan_f32(x, n, first, lim, top, oob));
    }
    return ZC_OK;
}

static unsigned varint_len(uint64_t v)
{
    unsigned n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

uint64_t zc_oob_cap(uint64_t count)
{
    return ZC_MIN(count, 16 + count / 1024);
}

/*
 * At most n = zc_oob_cap(count) entries, whose gaps g_j sum with the n
 * positions to at most count: a gap takes at most 10 bytes, and
 * varint_len(g) <= 1 + g / 7 (a gap of b >= 1 bits takes ceil(b / 7) bytes
 * and b <= g), so the gaps take at most min(10 n, n + count / 7) bytes, next
 * to 8 + 4 n.
 */
uint64_t zc_oob_bound(uint64_t count)
{
    const uint64_t n = zc_oob_cap(count);
    return 8 + 4 * n + ZC_MIN(OOB_VARINT_MAX * n, n + count / 7);
}

size_t zc_oob_size(const zc_oob_t *oob)
{
    if (oob->n == 0)
        return 0;
    size_t bytes = 8 + 4 * (size_t)oob->n;
    uint64_t prev = UINT64_MAX; /* position -1 */
    for (uint64_t j = 0; j < oob->n; j++) {
        bytes += varint_len(oob->pos[j] - prev - 1);
        prev = oob->pos[j];
    }
    return bytes;
}

void zc_oob_write(const zc_oob_t *oob, uint8_t *dst)
{
    uint64_t prev = UINT64_MAX;

    if (oob->n == 0)
        return;
    zc_payload_st64(dst, oob->n);
    dst += 8;
    for (uint64_t j = 0; j < oob->n; j++) {
        uint32_t b;
        memcpy(&b, &oob->val[j], sizeof(b));
        zc_payload_st32(dst, b);
        dst += 4;
    }
    for (uint64_t j = 0; j < oob->n; j++) {
        uint64_t g = oob->pos[j] - prev - 1;
        prev = oob->pos[j];
        while (g >= 0x80) {
            *dst++ = (uint8_t)(g | 0x80);
            g >>= 7;
        }
        *dst++ = (uint8_t)g;
    }
}

zc_status_t zc_oob_parse(const uint8_t *src, size_t len, uint64_t count, size_t *size_p,
                         zc_oob_t *oob)
{
    if (len < 8)
        return ZC_ERR_CORRUPT;
    uint64_t n = zc_payload_ld64(src);
    if (n == 0 || n > zc_oob_cap(count) || n > (len - 8) / 4)
        return ZC_ERR_CORRUPT;
    size_t at = 8 + 4 * (size_t)n;
    uint64_t next = 0; /* the smallest position the next gap may give */
    for (uint64_t j = 0; j < n; j++) {
        uint64_t g = 0;
        unsigned shift = 0, k = 0;
        for (;;) {
            if (at >= len || k == OOB_VARINT_MAX)
                return ZC_ERR_CORRUPT;
            uint8_t byte = src[at++];
            if (shift == 63 && byte > 1)
                return ZC_ERR_CORRUPT; /* past 64 bits */
            g |= (uint64_t)(byte & 0x7f) << shift;
            shift += 7;
            k++;
            if (!(byte & 0x80)) {
                if (byte == 0 && k > 1)
                    return ZC_ERR_CORRUPT; /* not the shortest form */
                break;
            }
        }
        /* next <= count: no wrap */
        if (g >= count - next)
            return ZC_ERR_CORRUPT;
        uint64_t pos = next + g;
        next = pos + 1;
        if (oob) {
            uint32_t b = zc_payload_ld32(src + 8 + 4 * j);
            float v;
            memcpy(&v, &b, sizeof(v));
            ZC_CHECK(zc_oob_push(oob, pos, v));
        }
    }
    *size_p = at;
    return ZC_OK;
}

zc_status_t zc_oob_merge(const zc_oob_t *a, const zc_oob_t *b, zc_oob_t *out)
{
    uint64_t i = 0, j = 0;

    while (i < a->n || j < b->n) {
        if (j == b->n || (i < a->n && a->pos[i] < b->pos[j])) {
            ZC_CHECK(zc_oob_push(out, a->pos[i], a->val[i]));
            i++;
        } else if (i == a->n || b->pos[j] < a->pos[i]) {
            ZC_CHECK(zc_oob_push(out, b->pos[j], b->val[j]));
            j++;
        } else {
            ZC_CHECK(zc_oob_push(out, a->pos[i], a->val[i] + b->val[j]));
            i++;
            j++;
        }
    }
    return ZC_OK;
}

void zc_oob_add(const zc_oob_t *oob, float *dst)
{
    for (uint64_t j = 0; j < oob->n; j++)
        dst[oob->pos[j]] += oob->val[j];
}
