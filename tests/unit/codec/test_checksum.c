/*
 * ZIPCCL_CHECKSUM (docs/codecs.md, "Payload checksum"): CRC-32C against known
 * answers, the trailer on every codec's payloads, and a flipped bit anywhere
 * in a payload failing decode and reduce where, without the trailer, it can
 * change a value silently.
 */
#include "codec/codec.h"
#include "common/compiler.h"
#include "common/crc32c.h"

#include <criterion/criterion.h>
#include <zipccl/zipccl_codec.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 3000

Test(crc32c, known_answers)
{
    /* the check value of CRC-32C, and RFC 3720's 32 bytes of zeros and of ones */
    cr_assert_eq(zc_crc32c("123456789", 9), 0xe3069283u);
    uint8_t z[32] = {0}, f[32];
    memset(f, 0xff, sizeof(f));
    cr_assert_eq(zc_crc32c(z, 32), 0x8a9136aau);
    cr_assert_eq(zc_crc32c(f, 32), 0x62a8ab43u);
    cr_assert_eq(zc_crc32c("", 0), 0);
}

Test(crc32c, instruction_and_table_agree)
{
    uint8_t buf[1031];
    for (size_t i = 0; i < sizeof(buf); i++)
        buf[i] = (uint8_t)(i * 131 + 7);
    /* every length and start, so that both the 8-byte steps and the tail are covered */
    for (size_t off = 0; off < 9; off++)
        for (size_t len = 0; len + off <= sizeof(buf); len += 37)
            cr_assert_eq(zc_crc32c(buf + off, len), zc_crc32c_portable(buf + off, len),
                         "offset %zu, %zu bytes", off, len);
}

static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((double)(seed >> 8) / (1 << 23) - 1.0);
    }
}

static const zc_codec_id_t codecs[] = {ZC_CODEC_NONE, ZC_CODEC_QSGD, ZC_CODEC_FP16,
                                       ZC_CODEC_BF16, ZC_CODEC_TOPK, ZC_CODEC_GRADIVEQ};

typedef struct enc {
    zc_codec_params_t p;
    zc_codec_state_t *st;
    uint8_t *buf;
    size_t cap, len;
} enc_t;

static void enc_init(enc_t *e, zc_codec_id_t codec, int checksum, const float *x)
{
    cr_assert_eq(zc_codec_params_default(codec, &e->p), ZC_OK);
    e->p.checksum = (uint32_t)checksum;
    e->p.gradiveq.slice = 16;
    e->p.gradiveq.dim = 4;
    e->p.gradiveq.ranks = 2;
    e->st = NULL;
    if (zc_codec_needs_state(&e->p)) {
        cr_assert_eq(zc_codec_state_create(&e->p, N, &e->st), ZC_OK);
        if (codec == ZC_CODEC_GRADIVEQ)
            cr_assert_eq(zc_codec_state_update(e->st, x, N), ZC_OK);
    }
    e->cap = zc_codec_bound(&e->p, N);
    e->buf = malloc(e->cap);
    cr_assert_eq(zc_codec_encode(&e->p, e->st, NULL, ZC_DTYPE_F32, x, N, e->buf, e->cap, &e->len),
                 ZC_OK, "%s", zc_codec_name(codec));
}

static void enc_fini(enc_t *e)
{
    zc_codec_state_destroy(e->st);
    free(e->buf);
}

Test(checksum, trailer_on_every_codec)
{
    float x[N], a[N], b[N];
    fill(x, N, 1);
    for (size_t c = 0; c < ZC_ARRAY_SIZE(codecs); c++) {
        enc_t plain, sum;
        enc_init(&plain, codecs[c], 0, x);
        enc_init(&sum, codecs[c], 1, x);
        const char *name = zc_codec_name(codecs[c]);
        cr_assert_eq(sum.cap, plain.cap + 4, "%s: the bound has room for the trailer", name);
        cr_assert_eq(sum.len, plain.len + 4, "%s", name);
        cr_assert_eq(sum.buf[4], plain.buf[4] | 2, "%s: the flag", name);
        cr_assert_eq(memcmp(sum.buf + 5, plain.buf + 5, plain.len - 5), 0, "%s", name);
        uint32_t crc = (uint32_t)sum.buf[sum.len - 4] | (uint32_t)sum.buf[sum.len - 3] << 8 |
                       (uint32_t)sum.buf[sum.len - 2] << 16 | (uint32_t)sum.buf[sum.len - 1] << 24;
        cr_assert_eq(crc, zc_crc32c(sum.buf, sum.len - 4), "%s", name);
        /* it decodes to what the payload without a trailer decodes to */
        memset(a, 0, sizeof(a));
        memset(b, 0, sizeof(b));
        cr_assert_eq(zc_codec_decode_add(plain.st, plain.buf, plain.len, a, N), ZC_OK);
        cr_assert_eq(zc_codec_decode_add(sum.st, sum.buf, sum.len, b, N), ZC_OK, "%s", name);
        cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "%s", name);
        /* parameters with and without differ, for the call check */
        cr_assert_not(zc_codec_params_equal(&plain.p, &sum.p));
        cr_assert_neq(zc_codec_params_hash(&plain.p), zc_codec_params_hash(&sum.p));
        enc_fini(&plain);
        enc_fini(&sum);
    }
}

/* A flipped bit anywhere: the checksum fails the decode and writes nothing. */
Test(checksum, every_flipped_bit_is_caught)
{
    float x[N], out[N];
    fill(x, N, 2);
    for (size_t c = 0; c < ZC_ARRAY_SIZE(codecs); c++) {
        enc_t e;
        enc_init(&e, codecs[c], 1, x);
        uint8_t *bad = malloc(e.len);
        /* every bit of the first 64 bytes and the last 8, and every 7th bit in between */
        for (size_t bit = 0; bit < 8 * e.len; bit += bit < 512 || bit >= 8 * e.len - 64 ? 1 : 7) {
            memcpy(bad, e.buf, e.len);
            bad[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            memset(out, 0, sizeof(out));
            zc_status_t s = zc_codec_decode_add(e.st, bad, e.len, out, N);
            cr_assert_neq(s, ZC_OK, "%s: bit %zu flipped, decoded", zc_codec_name(codecs[c]), bit);
            for (size_t i = 0; i < N; i++)
                cr_assert_eq(out[i], 0.0f, "%s: bit %zu flipped, value %zu written",
                             zc_codec_name(codecs[c]), bit, i);
        }
        free(bad);
        enc_fini(&e);
    }
}

/*
 * Without it the same flip changes a sum silently: a bit of a QSGD level, on
 * a fixed-rate body that is exactly as long as expected, decodes with ZC_OK.
 */
Test(checksum, without_it_a_flip_is_silent)
{
    float x[N], good[N], out[N];
    fill(x, N, 3);
    enc_t e;
    enc_init(&e, ZC_CODEC_QSGD, 0, x);
    memset(good, 0, sizeof(good));
    cr_assert_eq(zc_codec_decode_add(NULL, e.buf, e.len, good, N), ZC_OK);
    e.buf[e.len - 100] ^= 0x10;
    memset(out, 0, sizeof(out));
    cr_assert_eq(zc_codec_decode_add(NULL, e.buf, e.len, out, N), ZC_OK);
    cr_assert_neq(memcmp(good, out, sizeof(out)), 0, "the flip changed a value");
    enc_fini(&e);
}

/* Reduce checks both inputs before writing, and seals what it writes. */
Test(checksum, reduce_checks_and_seals)
{
    float x[N], y[N], out[N];
    fill(x, N, 4);
    fill(y, N, 5);
    enc_t a, b;
    enc_init(&a, ZC_CODEC_BF16, 1, x);
    enc_init(&b, ZC_CODEC_BF16, 1, y);
    uint8_t *dst = malloc(a.cap);
    size_t len = 0;
    cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, dst, a.cap, &len), ZC_OK);
    cr_assert_eq(len, a.len);
    cr_assert(dst[4] & 2);
    memset(out, 0, sizeof(out));
    cr_assert_eq(zc_codec_decode_add(NULL, dst, len, out, N), ZC_OK);
    b.buf[100] ^= 1;
    memset(dst, 0x5a, a.cap);
    cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, dst, a.cap, &len),
                 ZC_ERR_CORRUPT);
    cr_assert_eq(dst[0], 0x5a, "nothing written");
    /* one byte short of the trailer's room */
    b.buf[100] ^= 1;
    cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, dst, a.len - 1, &len),
                 ZC_ERR_BUFFER_TOO_SMALL);
    free(dst);
    enc_fini(&a);
    enc_fini(&b);
}

/* A caller built before the field: its struct ends earlier, and means no checksum. */
Test(checksum, older_callers_get_none)
{
    zc_codec_params_t p, none;
    cr_assert_eq(zc_codec_params_default(ZC_CODEC_FP16, &p), ZC_OK);
    none = p;
    p.checksum = 1; /* past the caller's struct: not its to set */
    p.struct_size = (uint32_t)offsetof(zc_codec_params_t, checksum);
    cr_assert_eq(zc_codec_bound(&p, N), zc_codec_bound(&none, N));
    cr_assert(zc_codec_params_equal(&p, &none));
    p.checksum = 2;
    p.struct_size = sizeof(p);
    cr_assert_eq(zc_codec_params_check(&p), ZC_ERR_INVALID_CONFIG);
}
