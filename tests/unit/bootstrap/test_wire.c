/*
 * The tcp bootstrap's frames: the byte layout, the job hash's known answers, and
 * every way a hostile or confused frame is refused by the parser.
 */
#include "transport/bootstrap/wire.h"

#include <criterion/criterion.h>

#include <string.h>

TestSuite(wire, .timeout = 20);

static const zc_bs_expect_t expect = {
    .job = 0x0123456789abcdefull,
    .type = ZC_BS_MSG_ALLGATHER,
    .rank = 3,
    .seq = 17,
    .len = 8,
    .arg = 0,
};

static zc_bs_frame_t good_frame(void)
{
    return zc_bs_frame_make(expect.job, expect.type, expect.rank, expect.seq, expect.len,
                            expect.arg);
}

Test(wire, layout_is_big_endian_at_fixed_offsets)
{
    zc_bs_frame_t f = zc_bs_frame_make(0x1122334455667788ull, ZC_BS_MSG_BROADCAST, 0x01020304,
                                       0x0a0b0c0d, 0x0000000100000002ull, 0x00000007);
    uint8_t b[ZC_BS_HDR_LEN];
    static const uint8_t want[ZC_BS_HDR_LEN] = {
        'Z',  'C',  'B',  'S',  0x00, 0x02, 0x00, 0x06, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66,
        0x77, 0x88, 0x01, 0x02, 0x03, 0x04, 0x0a, 0x0b, 0x0c, 0x0d, 0x00, 0x00, 0x00, 0x01,
        0x00, 0x00, 0x00, 0x02, 0x00, 0x00, 0x00, 0x07, 0x00, 0x00, 0x00, 0x00,
    };
    zc_bs_frame_encode(&f, b);
    cr_assert_arr_eq(b, want, sizeof(want));

    zc_bs_frame_t back;
    zc_bs_frame_decode(b, &back);
    cr_assert(memcmp(&back, &f, sizeof(f)) == 0, "decode(encode(f)) != f");
}

Test(wire, job_hash_is_fnv1a_64)
{
    /* known answers of FNV-1a 64 (Fowler, Noll, Vo test vectors) */
    cr_assert_eq(zc_bs_job_hash(""), 0xcbf29ce484222325ull);
    cr_assert_eq(zc_bs_job_hash("a"), 0xaf63dc4c8601ec8cull);
    cr_assert_eq(zc_bs_job_hash("foobar"), 0x85944171f73967e8ull);
    cr_assert_neq(zc_bs_job_hash("job-1"), zc_bs_job_hash("job-2"));
}

Test(wire, a_good_frame_passes)
{
    zc_bs_frame_t f = good_frame();
    char why[256] = "untouched";
    cr_assert_eq(zc_bs_frame_check(&f, &expect, why, sizeof(why)), ZC_OK);
    cr_assert_eq(zc_bs_frame_check(&f, &expect, NULL, 0), ZC_OK, "why may be NULL");
}

static void refused(const zc_bs_frame_t *f, zc_status_t status, const char *reason)
{
    char why[256] = "";
    cr_assert_eq(zc_bs_frame_check(f, &expect, why, sizeof(why)), status, "%s", why);
    cr_assert(strstr(why, reason), "expected '%s' in '%s'", reason, why);
}

Test(wire, not_our_protocol_is_corrupt)
{
    zc_bs_frame_t f = good_frame();
    f.magic = 0x47455420; /* "GET " */
    refused(&f, ZC_ERR_CORRUPT, "not a zipccl bootstrap message (magic 0x47455420");

    f = good_frame();
    f.version = 1; /* before the proof of membership */
    refused(&f, ZC_ERR_CORRUPT, "protocol version 1, this build speaks 2");

    f = good_frame();
    f.reserved = 1;
    refused(&f, ZC_ERR_CORRUPT, "reserved header field");

    /* what an HTTP client sends, read as a header */
    uint8_t http[ZC_BS_HDR_LEN];
    memcpy(http, "GET / HTTP/1.1\r\nHost: example\r\nAccept: *", sizeof(http));
    zc_bs_frame_decode(http, &f);
    refused(&f, ZC_ERR_CORRUPT, "not a zipccl bootstrap message");
}

Test(wire, another_job_is_a_mismatch)
{
    zc_bs_frame_t f = good_frame();
    f.job ^= 1;
    refused(&f, ZC_ERR_MISMATCH,
            "the sender's job id hash 0x0123456789abcdee differs from the "
            "receiver's 0x0123456789abcdef");
    char why[256];
    cr_assert_eq(zc_bs_frame_check_job(&f, expect.job, why, sizeof(why)), ZC_ERR_MISMATCH);
    cr_assert_eq(zc_bs_frame_check_job(&f, f.job, why, sizeof(why)), ZC_OK);
}

Test(wire, every_field_is_checked)
{
    zc_bs_frame_t f = good_frame();
    f.type = ZC_BS_MSG_BARRIER;
    refused(&f, ZC_ERR_MISMATCH, "message type barrier (7), expected allgather");

    f = good_frame();
    f.type = 99;
    refused(&f, ZC_ERR_MISMATCH, "unknown message type");

    f = good_frame();
    f.rank = 2;
    refused(&f, ZC_ERR_MISMATCH, "claims to come from rank 2, expected rank 3");

    f = good_frame();
    f.seq = 18;
    refused(&f, ZC_ERR_MISMATCH, "belongs to operation #18, expected #17");

    f = good_frame();
    f.len = 12;
    refused(&f, ZC_ERR_MISMATCH, "sent 12 bytes, expected 8");

    f = good_frame();
    f.len = UINT64_MAX;
    refused(&f, ZC_ERR_MISMATCH, "sent 18446744073709551615 bytes, expected 8");

    f = good_frame();
    f.arg = 1;
    refused(&f, ZC_ERR_MISMATCH, "header argument 1, expected 0");
}

Test(wire, broadcast_root_and_hello_size_are_named)
{
    zc_bs_expect_t e = {
        .job = 1, .type = ZC_BS_MSG_BROADCAST, .rank = 0, .seq = 2, .len = 0, .arg = 2};
    zc_bs_frame_t f = zc_bs_frame_make(1, ZC_BS_MSG_BROADCAST, 0, 2, 0, 3);
    char why[256];
    cr_assert_eq(zc_bs_frame_check(&f, &e, why, sizeof(why)), ZC_ERR_MISMATCH);
    cr_assert(strstr(why, "broadcast from root 3, expected root 2"), "%s", why);

    e.type = ZC_BS_MSG_HELLO;
    f.type = ZC_BS_MSG_HELLO;
    f.arg = 4;
    cr_assert_eq(zc_bs_frame_check(&f, &e, why, sizeof(why)), ZC_ERR_MISMATCH);
    cr_assert(strstr(why, "says the job has 4 ranks, expected 2"), "%s", why);
}

Test(wire, reason_roundtrip)
{
    uint8_t p[4 + ZC_BS_REASON_MAX];
    char reason[ZC_BS_REASON_MAX + 1];
    zc_status_t status = ZC_OK;
    size_t len = zc_bs_reason_encode(ZC_ERR_TIMEOUT, "rank 3 did not connect", p);
    cr_assert_eq(len, 4 + strlen("rank 3 did not connect"));
    cr_assert_eq(zc_bs_reason_decode(p, len, &status, reason), ZC_OK);
    cr_assert_eq(status, ZC_ERR_TIMEOUT);
    cr_assert_str_eq(reason, "rank 3 did not connect");
}

Test(wire, reason_is_bounded_and_sanitized)
{
    uint8_t p[4 + ZC_BS_REASON_MAX + 8];
    char reason[ZC_BS_REASON_MAX + 1];
    char lng[600];
    zc_status_t status;
    memset(lng, 'x', sizeof(lng) - 1);
    lng[sizeof(lng) - 1] = '\0';
    cr_assert_eq(zc_bs_reason_encode(ZC_ERR_IO, lng, p), 4 + ZC_BS_REASON_MAX, "truncated");
    cr_assert_eq(zc_bs_reason_decode(p, 4 + ZC_BS_REASON_MAX, &status, reason), ZC_OK);
    cr_assert_eq(strlen(reason), ZC_BS_REASON_MAX);

    size_t len = zc_bs_reason_encode(ZC_ERR_IO, "a\nb\x1b[2Jc", p);
    cr_assert_eq(zc_bs_reason_decode(p, len, &status, reason), ZC_OK);
    cr_assert_str_eq(reason, "a?b?[2Jc", "control characters from the wire are replaced");

    cr_assert_eq(zc_bs_reason_decode(p, 3, &status, reason), ZC_ERR_CORRUPT, "shorter than 4");
    cr_assert_eq(zc_bs_reason_decode(p, 4 + ZC_BS_REASON_MAX + 1, &status, reason), ZC_ERR_CORRUPT,
                 "longer than the maximum");
}

Test(wire, reason_status_must_be_an_error)
{
    uint8_t p[4 + ZC_BS_REASON_MAX];
    char reason[ZC_BS_REASON_MAX + 1];
    zc_status_t status;
    static const int32_t not_errors[] = {0, 1, 7, -12345, INT32_MIN};
    for (size_t i = 0; i < sizeof(not_errors) / sizeof(not_errors[0]); i++) {
        size_t len = zc_bs_reason_encode((zc_status_t)not_errors[i], "x", p);
        cr_assert_eq(zc_bs_reason_decode(p, len, &status, reason), ZC_OK);
        cr_assert_eq(status, ZC_ERR_INTERNAL, "status %d from the wire", not_errors[i]);
    }
}

Test(wire, message_names)
{
    cr_assert_str_eq(zc_bs_msg_name(ZC_BS_MSG_ALLGATHER), "allgather");
    cr_assert_str_eq(zc_bs_msg_name(ZC_BS_MSG_BROADCAST), "broadcast");
    cr_assert_str_eq(zc_bs_msg_name(ZC_BS_MSG_BARRIER), "barrier");
    cr_assert_str_eq(zc_bs_msg_name(ZC_BS_MSG_HELLO), "hello");
    cr_assert_str_eq(zc_bs_msg_name(ZC_BS_MSG_CHALLENGE), "challenge");
    cr_assert_str_eq(zc_bs_msg_name(ZC_BS_MSG_PROOF), "proof");
    cr_assert_str_eq(zc_bs_msg_name(ZC_BS_MSG_JOINED), "joined");
    cr_assert_str_eq(zc_bs_msg_name(0), "unknown message type");
}
