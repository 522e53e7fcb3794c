/*
 * The codec layer's public entry points (codec/codec.c) and the `none` codec:
 * registry, parameter checks, the 16-byte header, argument checks, output
 * capacity, and the raw codec's exact round trip.
 */
#include "codec_test.h"

#include "common/half.h"

#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define GUARD 32
#define GUARD_BYTE 0xA5

static zc_codec_params_t none_params(void)
{
    zc_codec_params_t p;
    cr_assert_eq(zc_codec_params_default(ZC_CODEC_NONE, &p), ZC_OK);
    return p;
}

/* ---------------------------------------------------------------- registry */

Test(codec_registry, names)
{
    cr_assert_str_eq(zc_codec_name(ZC_CODEC_NONE), "none");
    cr_assert_str_eq(zc_codec_name(ZC_CODEC_QSGD), "qsgd");
    cr_assert_null(zc_codec_name(ZC_CODEC_COUNT));
    cr_assert_null(zc_codec_name((zc_codec_id_t)-1));
    cr_assert_null(zc_codec_name((zc_codec_id_t)255));
}

Test(codec_registry, find)
{
    zc_codec_id_t id = ZC_CODEC_COUNT;
    cr_assert_eq(zc_codec_find("none", &id), ZC_OK);
    cr_assert_eq(id, ZC_CODEC_NONE);
    cr_assert_eq(zc_codec_find("qsgd", &id), ZC_OK);
    cr_assert_eq(id, ZC_CODEC_QSGD);
    /* every registered name finds its own id */
    for (int c = 0; c < ZC_CODEC_COUNT; c++) {
        cr_assert_eq(zc_codec_find(zc_codec_name((zc_codec_id_t)c), &id), ZC_OK);
        cr_assert_eq(id, (zc_codec_id_t)c);
    }
}

Test(codec_registry, unknown_name)
{
    static const char *const bad[] = {"", "QSGD", "qsg", "qsgdx", "none ", "top-k", "fp32"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        zc_codec_id_t id = (zc_codec_id_t)77;
        cr_assert_eq(zc_codec_find(bad[i], &id), ZC_ERR_INVALID_ARG, "name '%s'", bad[i]);
        cr_assert_eq(id, (zc_codec_id_t)77, "output written on failure for '%s'", bad[i]);
    }
    zc_codec_id_t id;
    cr_assert_eq(zc_codec_find(NULL, &id), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_find("qsgd", NULL), ZC_ERR_INVALID_ARG);
}

Test(codec_registry, levels_for_bits)
{
    cr_assert_eq(zc_qsgd_levels_for_bits(0), 0);
    cr_assert_eq(zc_qsgd_levels_for_bits(1), 0);
    cr_assert_eq(zc_qsgd_levels_for_bits(2), 1);
    cr_assert_eq(zc_qsgd_levels_for_bits(3), 3);
    cr_assert_eq(zc_qsgd_levels_for_bits(4), 7);
    cr_assert_eq(zc_qsgd_levels_for_bits(8), 127);
    cr_assert_eq(zc_qsgd_levels_for_bits(17), 65535);
    cr_assert_eq(zc_qsgd_levels_for_bits(18), 0);
    cr_assert_eq(zc_qsgd_levels_for_bits(32), 0);
    cr_assert_eq(zc_qsgd_levels_for_bits(UINT32_MAX), 0);
}

/* ------------------------------------------------------------------ params */

Test(codec_params, defaults)
{
    zc_codec_params_t p;
    cr_assert_eq(zc_codec_params_default(ZC_CODEC_QSGD, &p), ZC_OK);
    cr_assert_eq(p.codec, ZC_CODEC_QSGD);
    cr_assert_eq(p.qsgd.levels, 7);
    cr_assert_eq(p.qsgd.bucket, 512);
    cr_assert_eq(p.qsgd.scale, ZC_QSGD_SCALE_MAX);
    cr_assert_eq(p.qsgd.coding, ZC_QSGD_CODING_FIXED);
    cr_assert_eq(zc_codec_params_check(&p), ZC_OK);

    cr_assert_eq(zc_codec_params_default(ZC_CODEC_NONE, &p), ZC_OK);
    cr_assert_eq(p.codec, ZC_CODEC_NONE);
    cr_assert_eq(zc_codec_params_check(&p), ZC_OK);

    cr_assert_eq(zc_codec_params_default(ZC_CODEC_COUNT, &p), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_params_default((zc_codec_id_t)-1, &p), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_params_default(ZC_CODEC_QSGD, NULL), ZC_ERR_INVALID_ARG);
}

/* Every rejected parameter set: check says INVALID_CONFIG, bound says 0, encode refuses. */
static void expect_rejected(const zc_codec_params_t *p, const char *what)
{
    float x[4] = {1, 2, 3, 4};
    uint8_t out[256];
    size_t len = 12345;

    cr_assert_eq(zc_codec_params_check(p), ZC_ERR_INVALID_CONFIG, "%s accepted", what);
    cr_assert_eq(zc_codec_bound(p, 4), 0, "%s: bound not 0", what);
    cr_assert_eq(zc_codec_encode(p, NULL, NULL, ZC_DTYPE_F32, x, 4, out, sizeof(out), &len),
                 ZC_ERR_INVALID_CONFIG, "%s: encode did not refuse", what);
    cr_assert_eq(len, 12345, "%s: len_p written on failure", what);
}

static void expect_accepted(const zc_codec_params_t *p, const char *what)
{
    cr_assert_eq(zc_codec_params_check(p), ZC_OK, "%s rejected", what);
    cr_assert_gt(zc_codec_bound(p, 4), ZC_PAYLOAD_HEADER_BYTES, "%s: bound", what);
}

Test(codec_params, ranges)
{
    zc_codec_params_t p;

    p = qsgd_params(0, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
    expect_rejected(&p, "levels 0");
    p.qsgd.levels = 65536;
    expect_rejected(&p, "levels 65536");
    p.qsgd.levels = UINT32_MAX;
    expect_rejected(&p, "levels 2^32-1");
    p.qsgd.levels = 1;
    expect_accepted(&p, "levels 1");
    p.qsgd.levels = 65535;
    expect_accepted(&p, "levels 65535");

    p = qsgd_params(7, 0, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
    expect_rejected(&p, "bucket 0");
    p.qsgd.bucket = (UINT32_C(1) << 24) + 1;
    expect_rejected(&p, "bucket 2^24+1");
    p.qsgd.bucket = UINT32_MAX;
    expect_rejected(&p, "bucket 2^32-1");
    p.qsgd.bucket = 1;
    expect_accepted(&p, "bucket 1");
    p.qsgd.bucket = UINT32_C(1) << 24;
    expect_accepted(&p, "bucket 2^24");

    p = qsgd_params(7, 512, (zc_qsgd_scale_t)2, ZC_QSGD_CODING_FIXED);
    expect_rejected(&p, "scale 2");
    p.qsgd.scale = (zc_qsgd_scale_t)-1;
    expect_rejected(&p, "scale -1");
    p.qsgd.scale = ZC_QSGD_SCALE_L2;
    expect_accepted(&p, "scale l2");

    p = qsgd_params(7, 512, ZC_QSGD_SCALE_MAX, (zc_qsgd_coding_t)3);
    expect_rejected(&p, "coding 3");
    p.qsgd.coding = (zc_qsgd_coding_t)-1;
    expect_rejected(&p, "coding -1");
    p.qsgd.coding = ZC_QSGD_CODING_ELIAS;
    expect_accepted(&p, "coding elias");
    p.qsgd.coding = ZC_QSGD_CODING_AUTO;
    expect_accepted(&p, "coding auto");

    p = qsgd_params(7, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
    p.codec = ZC_CODEC_COUNT;
    expect_rejected(&p, "codec id COUNT");
    p.codec = (zc_codec_id_t)-1;
    expect_rejected(&p, "codec id -1");

    cr_assert_eq(zc_codec_params_check(NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_bound(NULL, 4), 0);
}

/* The none codec ignores the qsgd fields: its defaults plus garbage there still pass. */
Test(codec_params, none_ignores_qsgd_fields)
{
    zc_codec_params_t p = none_params();
    p.qsgd.levels = 0;
    p.qsgd.bucket = 0;
    cr_assert_eq(zc_codec_params_check(&p), ZC_OK);
    cr_assert_eq(zc_codec_bound(&p, 10), ZC_PAYLOAD_HEADER_BYTES + 40);
}

/* ------------------------------------------------------------- struct_size */

/* Every entry point that takes params refuses them: INVALID_ARG, bound 0, no state. */
static void expect_bad_size(const zc_codec_params_t *p, const char *what)
{
    float x[4] = {1, 2, 3, 4};
    uint8_t out[256];
    size_t len = 12345;
    zc_codec_state_t *st = NULL;

    cr_assert_eq(zc_codec_params_check(p), ZC_ERR_INVALID_ARG, "%s accepted", what);
    cr_assert_eq(zc_codec_bound(p, 4), 0, "%s: bound not 0", what);
    cr_assert_eq(zc_codec_needs_state(p), 0, "%s: needs a state", what);
    cr_assert_eq(zc_codec_state_create(p, 4, &st), ZC_ERR_INVALID_ARG, "%s: state", what);
    cr_assert_null(st);
    cr_assert_eq(zc_codec_encode(p, NULL, NULL, ZC_DTYPE_F32, x, 4, out, sizeof(out), &len),
                 ZC_ERR_INVALID_ARG, "%s: encode did not refuse", what);
    cr_assert_eq(len, 12345, "%s: len_p written on failure", what);
}

Test(codec_params, struct_size)
{
    zc_codec_params_t p;

    cr_assert_eq(zc_codec_params_default(ZC_CODEC_TOPK, &p), ZC_OK);
    cr_assert_eq(p.struct_size, sizeof(p));
    p.struct_size = 0;
    expect_bad_size(&p, "struct_size 0");
    /* built by hand, without zc_codec_params_default */
    memset(&p, 0, sizeof(p));
    p.codec = ZC_CODEC_NONE;
    expect_bad_size(&p, "hand-built none");

    /* the smallest size is where the codec's last field ends */
    const size_t qsgd_end = offsetof(zc_codec_params_t, qsgd.error_feedback) + sizeof(int);
    p = qsgd_params(7, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
    p.struct_size = (uint32_t)qsgd_end - 1;
    expect_bad_size(&p, "qsgd one byte short");
    p.struct_size = (uint32_t)qsgd_end;
    expect_accepted(&p, "qsgd ending at its last field");
    p.struct_size = sizeof(p) + 64; /* a newer caller's larger struct */
    expect_accepted(&p, "qsgd from a larger struct");

    /* none needs the id only */
    p = none_params();
    p.struct_size = offsetof(zc_codec_params_t, codec) + sizeof(zc_codec_id_t);
    expect_accepted(&p, "none with the id only");
    p.struct_size--;
    expect_bad_size(&p, "none without a whole id");
}

/* An older caller's shorter struct: nothing is read or written past its size (ASan watches). */
Test(codec_params, shorter_struct)
{
    const size_t end = offsetof(zc_codec_params_t, topk.values) + sizeof(zc_topk_values_t);
    cr_assert_lt(end, sizeof(zc_codec_params_t));
    uint8_t *buf = xmalloc(end + GUARD);
    memset(buf, GUARD_BYTE, end + GUARD);
    zc_codec_params_t *p = (zc_codec_params_t *)buf;

    cr_assert_eq(zc_codec_params_default_sized(ZC_CODEC_TOPK, p, end - 1), ZC_ERR_INVALID_ARG);
    cr_assert_eq(buf[0], GUARD_BYTE, "written on failure");
    cr_assert_eq(zc_codec_params_default_sized(ZC_CODEC_TOPK, p, end), ZC_OK);
    for (size_t i = end; i < end + GUARD; i++)
        cr_assert_eq(buf[i], GUARD_BYTE, "byte %zu written past the caller's size", i);
    /* read field by field: the object is shorter than the type */
    uint32_t size;
    zc_codec_id_t codec;
    double density;
    memcpy(&size, buf + offsetof(zc_codec_params_t, struct_size), sizeof(size));
    memcpy(&codec, buf + offsetof(zc_codec_params_t, codec), sizeof(codec));
    memcpy(&density, buf + offsetof(zc_codec_params_t, topk.density), sizeof(density));
    cr_assert_eq(size, end);
    cr_assert_eq(codec, ZC_CODEC_TOPK);
    cr_assert_float_eq(density, 0.01, 1e-15);

    const size_t n = 100;
    float x[100];
    fill_gauss(x, n, 3, 1.0);
    zc_codec_state_t *st;
    cr_assert_eq(zc_codec_state_create(p, n, &st), ZC_OK);
    size_t cap = zc_codec_bound(p, n), len;
    cr_assert_gt(cap, 0);
    uint8_t *out = xmalloc(cap);
    cr_assert_eq(zc_codec_encode(p, st, NULL, ZC_DTYPE_F32, x, n, out, cap, &len), ZC_OK);
    free(out);
    zc_codec_state_destroy(st);
    free(buf);

    /* a larger struct: the bytes past this library's are zeroed */
    uint8_t big[sizeof(zc_codec_params_t) + 16];
    memset(big, GUARD_BYTE, sizeof(big));
    cr_assert_eq(
        zc_codec_params_default_sized(ZC_CODEC_QSGD, (zc_codec_params_t *)big, sizeof(big)), ZC_OK);
    for (size_t i = sizeof(zc_codec_params_t); i < sizeof(big); i++)
        cr_assert_eq(big[i], 0);
    cr_assert_eq(((zc_codec_params_t *)big)->struct_size, sizeof(big));
}

/* ------------------------------------------------------------------ header */

static payload_t small_qsgd_payload(uint64_t n, float **x_p)
{
    zc_codec_params_t p = qsgd_params(7, 8, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
    zc_codec_rng_t rng = test_codec_rng(42, 0, 1);
    float *x = xmalloc(n * sizeof(float));
    fill_gauss(x, n, 7, 1.0);
    payload_t pl = encode_ok(&p, &rng, ZC_DTYPE_F32, x, n);
    if (x_p)
        *x_p = x;
    else
        free(x);
    return pl;
}

Test(codec_header, layout)
{
    const uint64_t n = 37;
    payload_t pl = small_qsgd_payload(n, NULL);
    const uint8_t *h = pl.buf;

    cr_assert_eq(h[0], 'Z');
    cr_assert_eq(h[1], 'C');
    cr_assert_eq(h[2], 1);
    cr_assert_eq(h[3], ZC_CODEC_QSGD);
    cr_assert_eq(h[4] | h[5] | h[6] | h[7], 0);
    uint64_t count = 0;
    for (int i = 7; i >= 0; i--)
        count = count << 8 | h[8 + i];
    cr_assert_eq(count, n);

    zc_payload_info_t info;
    cr_assert_eq(zc_payload_info(pl.buf, pl.len, &info), ZC_OK);
    cr_assert_eq(info.codec, ZC_CODEC_QSGD);
    cr_assert_eq(info.version, 1);
    cr_assert_eq(info.count, n);
    /* the header alone parses: info does not look at the body */
    cr_assert_eq(zc_payload_info(pl.buf, ZC_PAYLOAD_HEADER_BYTES, &info), ZC_OK);
    payload_free(&pl);

    /* a count above 2^32 is stored in all 8 bytes */
    zc_codec_params_t np = none_params();
    uint8_t hdr[ZC_PAYLOAD_HEADER_BYTES];
    size_t len;
    cr_assert_eq(zc_codec_encode(&np, NULL, NULL, ZC_DTYPE_F32, NULL, 0, hdr, sizeof(hdr), &len),
                 ZC_OK);
    cr_assert_eq(len, ZC_PAYLOAD_HEADER_BYTES);
    cr_assert_eq(hdr[3], ZC_CODEC_NONE);
    cr_assert_eq(zc_payload_info(hdr, len, &info), ZC_OK);
    cr_assert_eq(info.codec, ZC_CODEC_NONE);
    cr_assert_eq(info.count, 0);
    hdr[8] = 0x01;
    hdr[12] = 0x02;
    hdr[15] = 0x80;
    cr_assert_eq(zc_payload_info(hdr, len, &info), ZC_OK);
    cr_assert_eq(info.count, UINT64_C(0x8000000200000001));
}

Test(codec_header, info_errors)
{
    payload_t pl = small_qsgd_payload(5, NULL);
    zc_payload_info_t info = {.codec = (zc_codec_id_t)9, .version = 9, .count = 9};

    cr_assert_eq(zc_payload_info(NULL, pl.len, &info), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_payload_info(pl.buf, pl.len, NULL), ZC_ERR_INVALID_ARG);
    for (size_t len = 0; len < ZC_PAYLOAD_HEADER_BYTES; len++) {
        uint8_t *cut = exact_copy(pl.buf, len);
        cr_assert_eq(zc_payload_info(cut, len, &info), ZC_ERR_CORRUPT, "len %zu", len);
        free(cut);
    }
    cr_assert_eq(info.codec, (zc_codec_id_t)9, "info written on failure");
    cr_assert_eq(info.version, 9);
    cr_assert_eq(info.count, 9);
    payload_free(&pl);
}

/* The error each header byte's corruption must give. */
static zc_status_t header_byte_error(int byte)
{
    if (byte == 2 || byte >= 8)
        return ZC_ERR_MISMATCH; /* version, count */
    return ZC_ERR_CORRUPT;      /* magic, codec id, reserved */
}

/*
 * Every byte of the header inverted, and every single bit flipped: decode
 * fails with the documented error and leaves the output untouched (the
 * header is checked before the body is looked at).
 */
Test(codec_header, every_byte_and_bit)
{
    const uint64_t n = 37;
    float *x;
    payload_t pl = small_qsgd_payload(n, &x);
    float *dst = zeros_f32(n), *ref = zeros_f32(n);
    zc_payload_info_t info;

    for (size_t i = 0; i < n; i++)
        ref[i] = dst[i] = (float)i + 0.5f;
    for (int byte = 0; byte < ZC_PAYLOAD_HEADER_BYTES; byte++) {
        uint8_t *bad = exact_copy(pl.buf, pl.len);
        bad[byte] ^= 0xff;
        zc_status_t st = zc_codec_decode_add(NULL, bad, pl.len, dst, n);
        cr_assert_eq(st, header_byte_error(byte), "byte %d inverted: %s", byte,
                     zc_status_string(st));
        if (byte < 8)
            cr_assert_eq(zc_payload_info(bad, pl.len, &info), header_byte_error(byte),
                         "info, byte %d", byte);
        cr_assert(same_bits_f32(dst, ref, n), "byte %d: output changed", byte);

        for (int bit = 0; bit < 8; bit++) {
            memcpy(bad, pl.buf, pl.len);
            bad[byte] ^= (uint8_t)(1u << bit);
            st = zc_codec_decode_add(NULL, bad, pl.len, dst, n);
            cr_assert_lt(st, 0, "byte %d bit %d flipped: decoded", byte, bit);
            if (byte != 3) /* codec 1 -> 0 is a valid id: the none codec rejects the body */
                cr_assert_eq(st, header_byte_error(byte), "byte %d bit %d: %s", byte, bit,
                             zc_status_string(st));
            cr_assert(same_bits_f32(dst, ref, n), "byte %d bit %d: output changed", byte, bit);
        }
        free(bad);
    }
    payload_free(&pl);
    free(x);
    free(dst);
    free(ref);
}

Test(codec_header, count_mismatch)
{
    const uint64_t n = 37;
    payload_t pl = small_qsgd_payload(n, NULL);
    float *dst = zeros_f32(n + 1);

    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, dst, n - 1), ZC_ERR_MISMATCH);
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, dst, n + 1), ZC_ERR_MISMATCH);
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, dst, 0), ZC_ERR_MISMATCH);
    for (size_t i = 0; i <= n; i++)
        cr_assert_eq(dst[i], 0.0f, "output changed at %zu", i);
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, dst, n), ZC_OK);
    payload_free(&pl);
    free(dst);
}

/* ---------------------------------------------------------------- arguments */

Test(codec_args, encode_null_and_bad)
{
    zc_codec_params_t p = qsgd_params(7, 8, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
    float x[16] = {1};
    uint8_t out[512];
    size_t len = 777;

    cr_assert_eq(zc_codec_encode(NULL, NULL, NULL, ZC_DTYPE_F32, x, 16, out, sizeof(out), &len),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, NULL, 16, out, sizeof(out), &len),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, x, 16, NULL, sizeof(out), &len),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, x, 16, out, sizeof(out), NULL),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_encode(&p, NULL, NULL, (zc_dtype_t)3, x, 16, out, sizeof(out), &len),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_encode(&p, NULL, NULL, (zc_dtype_t)-1, x, 16, out, sizeof(out), &len),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(len, 777, "len_p written on failure");

    /* no values: src may be NULL */
    cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, NULL, 0, out, sizeof(out), &len),
                 ZC_OK);
    cr_assert_eq(len, ZC_PAYLOAD_HEADER_BYTES + 8);
}

Test(codec_args, decode_null)
{
    const uint64_t n = 16;
    payload_t pl = small_qsgd_payload(n, NULL);
    float dst[16] = {0};

    cr_assert_eq(zc_codec_decode_add(NULL, NULL, pl.len, dst, n), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, NULL, n), ZC_ERR_INVALID_ARG);
    payload_free(&pl);

    /* no values: dst may be NULL */
    zc_codec_params_t p = qsgd_params(7, 8, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
    payload_t empty = encode_ok(&p, NULL, ZC_DTYPE_F32, NULL, 0);
    cr_assert_eq(zc_codec_decode_add(NULL, empty.buf, empty.len, NULL, 0), ZC_OK);
    payload_free(&empty);
}

/* ----------------------------------------------------------------- capacity */

/*
 * For every cap below the payload's length: BUFFER_TOO_SMALL, len_p untouched,
 * and nothing written at or past cap. Checked twice: into a block of exactly
 * cap bytes (the ASan variant traps any write past it) and into a larger block
 * whose bytes past cap are guard bytes (the plain variant sees them change).
 */
static void check_caps(const zc_codec_params_t *p, zc_dtype_t dtype, const void *src, size_t n)
{
    payload_t ref = encode_ok(p, NULL, dtype, src, n);

    for (size_t cap = 0; cap < ref.len; cap++) {
        size_t len = 999999;
        uint8_t *exact = xmalloc(cap);
        zc_status_t st = zc_codec_encode(p, NULL, NULL, dtype, src, n, exact, cap, &len);
        cr_assert_eq(st, ZC_ERR_BUFFER_TOO_SMALL, "cap %zu of %zu: %s", cap, ref.len,
                     zc_status_string(st));
        cr_assert_eq(len, 999999, "cap %zu: len_p written", cap);
        free(exact);

        uint8_t *guarded = xmalloc(cap + GUARD);
        memset(guarded, GUARD_BYTE, cap + GUARD);
        st = zc_codec_encode(p, NULL, NULL, dtype, src, n, guarded, cap, &len);
        cr_assert_eq(st, ZC_ERR_BUFFER_TOO_SMALL);
        for (size_t i = cap; i < cap + GUARD; i++)
            cr_assert_eq(guarded[i], GUARD_BYTE, "cap %zu: byte %zu written", cap, i);
        free(guarded);
    }

    /* exactly the length is enough, and gives the same bytes */
    uint8_t *exact = xmalloc(ref.len);
    size_t len = 0;
    cr_assert_eq(zc_codec_encode(p, NULL, NULL, dtype, src, n, exact, ref.len, &len), ZC_OK);
    cr_assert_eq(len, ref.len);
    cr_assert_eq(memcmp(exact, ref.buf, len), 0);
    free(exact);
    payload_free(&ref);
}

Test(codec_capacity, every_short_cap)
{
    enum { N = 37 };
    float x[N];
    fill_gauss(x, N, 3, 1.0);
    x[20] = 0; /* a zero gap for the Elias coder */
    x[21] = 0;

    zc_codec_params_t none = none_params();
    check_caps(&none, ZC_DTYPE_F32, x, N);

    uint16_t h[N];
    for (int i = 0; i < N; i++)
        h[i] = zc_f32_to_f16(x[i]);
    check_caps(&none, ZC_DTYPE_F16, h, N);

    static const zc_qsgd_coding_t codings[] = {ZC_QSGD_CODING_FIXED, ZC_QSGD_CODING_ELIAS,
                                               ZC_QSGD_CODING_AUTO};
    static const uint32_t levels[] = {1, 7, 91, 65535};
    for (int c = 0; c < 3; c++) {
        for (int l = 0; l < 4; l++) {
            zc_codec_params_t p = qsgd_params(levels[l], 8, ZC_QSGD_SCALE_L2, codings[c]);
            check_caps(&p, ZC_DTYPE_F32, x, N);
            p.qsgd.bucket = 64; /* one bucket, shorter than d */
            check_caps(&p, ZC_DTYPE_F16, h, N);
        }
    }
}

/* The bound is a bound: a worst case for the Elias code (every level = s, no zero
 * gaps, alternating signs) fits, and so does the fixed code for every width. */
Test(codec_capacity, bound_holds_worst_case)
{
    enum { N = 300 };
    float x[N];
    for (int i = 0; i < N; i++)
        x[i] = i & 1 ? -1.0f : 1.0f; /* max scaling: |x| = scale, every level is s */

    static const uint32_t levels[] = {1, 2, 3, 7, 91, 127, 255, 4097, 65535};
    for (int c = 0; c < 3; c++) {
        for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++) {
            zc_codec_params_t p =
                qsgd_params(levels[l], 64, ZC_QSGD_SCALE_MAX, (zc_qsgd_coding_t)c);
            payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, N); /* asserts len <= bound */
            float *y = decode_ok(&pl, N);
            for (int i = 0; i < N; i++)
                cr_assert_float_eq(y[i], x[i], 1e-6, "s %u coding %d at %d", levels[l], c, i);
            free(y);
            payload_free(&pl);
        }
    }
}

/* -------------------------------------------------------------------- none */

Test(codec_none, exact_round_trip)
{
    static const float special[] = {0.0f,    -0.0f,     1.0f,       -1.5f,    FLT_MAX,   -FLT_MAX,
                                    FLT_MIN, 0x1p-149f, -0x1p-149f, INFINITY, -INFINITY, 3.14159f};
    enum { N = sizeof(special) / sizeof(special[0]) + 1000 };
    float x[N];
    memcpy(x, special, sizeof(special));
    fill_gauss(x + sizeof(special) / sizeof(special[0]), 1000, 11, 1e3);

    zc_codec_params_t p = none_params();
    payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, N);
    cr_assert_eq(pl.len, ZC_PAYLOAD_HEADER_BYTES + 4 * N);
    cr_assert_eq(zc_codec_bound(&p, N), ZC_PAYLOAD_HEADER_BYTES + 4 * N);

    /* -0 + x == x bit for bit for every x, -0 included */
    float y[N];
    for (int i = 0; i < N; i++)
        y[i] = -0.0f;
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, y, N), ZC_OK);
    cr_assert(same_bits_f32(x, y, N), "none round trip not exact");

    /* NaN stays NaN */
    float nan_in[3] = {1.0f, NAN, 2.0f}, nan_out[3] = {0};
    payload_t pn = encode_ok(&p, NULL, ZC_DTYPE_F32, nan_in, 3);
    cr_assert_eq(zc_codec_decode_add(NULL, pn.buf, pn.len, nan_out, 3), ZC_OK);
    cr_assert_eq(nan_out[0], 1.0f);
    cr_assert(isnan(nan_out[1]));
    cr_assert_eq(nan_out[2], 2.0f);
    payload_free(&pn);
    payload_free(&pl);
}

Test(codec_none, accumulates)
{
    enum { N = 513 };
    float x[N], acc[N], twice[N];
    fill_gauss(x, N, 5, 1.0);
    fill_gauss(acc, N, 6, 1.0);
    memset(twice, 0, sizeof(twice));

    zc_codec_params_t p = none_params();
    payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, N);
    float start[N];
    memcpy(start, acc, sizeof(acc));
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, acc, N), ZC_OK);
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, twice, N), ZC_OK);
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, twice, N), ZC_OK);
    for (int i = 0; i < N; i++) {
        cr_assert_eq(acc[i], start[i] + x[i], "sum at %d", i);
        cr_assert_eq(twice[i], 2.0f * x[i], "twice at %d", i);
    }
    payload_free(&pl);
}

Test(codec_none, half_inputs_widen_exactly)
{
    /* known answers: f16 1.0, -2.0, +inf, smallest subnormal 2^-24, largest 65504 */
    static const uint16_t f16[] = {0x3c00, 0xc000, 0x7c00, 0x0001, 0x7bff};
    static const float f16_want[] = {1.0f, -2.0f, INFINITY, 0x1p-24f, 65504.0f};
    /* bf16 1.0, -3.0, -inf, 2^-133 (subnormal), 0x1.fep127 */
    static const uint16_t bf16[] = {0x3f80, 0xc040, 0xff80, 0x0001, 0x7f7f};
    static const float bf16_want[] = {1.0f, -3.0f, -INFINITY, 0x1p-133f, 0x1.fep127f};
    zc_codec_params_t p = none_params();

    payload_t a = encode_ok(&p, NULL, ZC_DTYPE_F16, f16, 5);
    payload_t b = encode_ok(&p, NULL, ZC_DTYPE_BF16, bf16, 5);
    cr_assert_eq(a.len, ZC_PAYLOAD_HEADER_BYTES + 20);
    float *ya = decode_ok(&a, 5), *yb = decode_ok(&b, 5);
    for (int i = 0; i < 5; i++) {
        cr_assert_eq(ya[i], f16_want[i], "f16[%d] = %a", i, ya[i]);
        cr_assert_eq(yb[i], bf16_want[i], "bf16[%d] = %a", i, yb[i]);
    }
    free(ya);
    free(yb);
    payload_free(&a);
    payload_free(&b);
}

Test(codec_none, hostile)
{
    enum { N = 9 };
    float x[N] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    zc_codec_params_t p = none_params();
    payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, N);
    float dst[N] = {0};

    for (size_t len = 0; len < pl.len; len++) {
        uint8_t *cut = exact_copy(pl.buf, len);
        cr_assert_eq(zc_codec_decode_add(NULL, cut, len, dst, N), ZC_ERR_CORRUPT, "len %zu", len);
        free(cut);
    }
    for (size_t extra = 1; extra <= 8; extra++) {
        uint8_t *longer = padded_copy(pl.buf, pl.len, extra, 0);
        cr_assert_eq(zc_codec_decode_add(NULL, longer, pl.len + extra, dst, N), ZC_ERR_CORRUPT,
                     "%zu extra bytes", extra);
        free(longer);
    }
    for (int i = 0; i < N; i++)
        cr_assert_eq(dst[i], 0.0f);
    payload_free(&pl);
}
