/*
 * The proof of membership (auth.h): known answers computed independently
 * (Python's hashlib: BLAKE2b-256 of the label and secret as the key, then
 * HMAC-SHA-256 of the role label, the big-endian fields and both nonces), and
 * every input changing the proof.
 */
#include "transport/bootstrap/auth.h"

#include <criterion/criterion.h>

#include <string.h>

TestSuite(auth, .timeout = 20);

static const char secret[] = "correct horse battery staple";

static zc_bs_transcript_t transcript(void)
{
    zc_bs_transcript_t t = {.job = 0x0123456789abcdefull, .rank = 3, .size = 8};
    for (int i = 0; i < 32; i++) {
        t.nonce_root[i] = (uint8_t)i;
        t.nonce_rank[i] = (uint8_t)(32 + i);
    }
    return t;
}

Test(auth, known_answers)
{
    static const uint8_t rank_proof[32] = {0xb4, 0xbe, 0xef, 0xe0, 0x92, 0xda, 0xd3, 0x4a,
                                           0xa5, 0xfe, 0xf1, 0x69, 0xb4, 0x10, 0x48, 0x46,
                                           0x9b, 0x51, 0xa1, 0xb5, 0x4a, 0xc1, 0x82, 0xe6,
                                           0xa4, 0x15, 0xad, 0x31, 0xa5, 0xa9, 0xa2, 0x97};
    static const uint8_t root_proof[32] = {0x73, 0x86, 0x94, 0xa4, 0x2c, 0x1f, 0xf8, 0xe2,
                                           0x50, 0xe4, 0x5e, 0x74, 0x7b, 0x7e, 0x60, 0x86,
                                           0xdc, 0x50, 0xef, 0x61, 0x38, 0x23, 0xbc, 0x79,
                                           0x04, 0x33, 0x62, 0x29, 0xa5, 0x79, 0x6b, 0x43};
    uint8_t key[ZC_BS_KEY_LEN], mac[32];
    zc_bs_transcript_t t = transcript();

    cr_assert_eq(zc_bs_key_derive(secret, strlen(secret), key), ZC_OK);
    zc_bs_mac(key, ZC_BS_ROLE_RANK, &t, mac);
    cr_assert_arr_eq(mac, rank_proof, 32);
    zc_bs_mac(key, ZC_BS_ROLE_ROOT, &t, mac);
    cr_assert_arr_eq(mac, root_proof, 32);
    cr_assert(zc_bs_mac_verify(key, ZC_BS_ROLE_ROOT, &t, root_proof));
    cr_assert(!zc_bs_mac_verify(key, ZC_BS_ROLE_RANK, &t, root_proof),
              "a root's proof must never pass as a rank's");
}

Test(auth, every_input_changes_the_proof)
{
    uint8_t key[ZC_BS_KEY_LEN], other_key[ZC_BS_KEY_LEN], mac[32];
    zc_bs_transcript_t t = transcript();
    cr_assert_eq(zc_bs_key_derive(secret, strlen(secret), key), ZC_OK);
    zc_bs_mac(key, ZC_BS_ROLE_RANK, &t, mac);

    cr_assert_eq(zc_bs_key_derive("correct horse battery stapLe", 28, other_key), ZC_OK);
    cr_assert(!zc_bs_mac_verify(other_key, ZC_BS_ROLE_RANK, &t, mac), "another secret");
    zc_bs_transcript_t v = t;
    v.job ^= 1ull << 40;
    cr_assert(!zc_bs_mac_verify(key, ZC_BS_ROLE_RANK, &v, mac), "another job");
    v = t;
    v.rank = 4;
    cr_assert(!zc_bs_mac_verify(key, ZC_BS_ROLE_RANK, &v, mac), "another rank");
    v = t;
    v.size = 9;
    cr_assert(!zc_bs_mac_verify(key, ZC_BS_ROLE_RANK, &v, mac), "another size");
    for (int i = 0; i < 32; i++) {
        v = t;
        v.nonce_root[i] ^= 0x80;
        cr_assert(!zc_bs_mac_verify(key, ZC_BS_ROLE_RANK, &v, mac), "root nonce byte %d", i);
        v = t;
        v.nonce_rank[i] ^= 1;
        cr_assert(!zc_bs_mac_verify(key, ZC_BS_ROLE_RANK, &v, mac), "rank nonce byte %d", i);
        uint8_t bad[32];
        memcpy(bad, mac, 32);
        bad[i] ^= 1;
        cr_assert(!zc_bs_mac_verify(key, ZC_BS_ROLE_RANK, &t, bad), "proof byte %d", i);
    }
    cr_assert(zc_bs_mac_verify(key, ZC_BS_ROLE_RANK, &t, mac));
}

Test(auth, short_secrets_are_refused)
{
    uint8_t key[ZC_BS_KEY_LEN];
    cr_assert_eq(zc_bs_key_derive("fifteen chars!!", 15, key), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bs_key_derive(NULL, 32, key), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_bs_key_derive("sixteen chars!!!", 16, key), ZC_OK);
}

Test(auth, nonces_differ)
{
    uint8_t a[32], b[32];
    cr_assert_eq(zc_bs_random(a, sizeof(a)), ZC_OK);
    cr_assert_eq(zc_bs_random(b, sizeof(b)), ZC_OK);
    /* equal 256-bit draws: probability 2^-256 */
    cr_assert(memcmp(a, b, sizeof(a)) != 0);
}
