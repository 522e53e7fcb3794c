#include "transport/bootstrap/auth.h"

#include <sodium.h>

#include <string.h>

_Static_assert(crypto_auth_hmacsha256_BYTES == 32, "the proofs are 32 bytes");
_Static_assert(crypto_auth_hmacsha256_KEYBYTES == ZC_BS_KEY_LEN, "the key is 32 bytes");

/* sodium_init is thread-safe and idempotent (libsodium >= 1.0.11): 0 first time, 1 after. */
static zc_status_t sodium_ready(void)
{
    return sodium_init() < 0 ? ZC_ERR_INTERNAL : ZC_OK;
}

zc_status_t zc_bs_key_derive(const void *secret, size_t len, uint8_t key[ZC_BS_KEY_LEN])
{
    static const char label[] = "zipccl bootstrap key v1";
    crypto_generichash_state st;

    if (!secret || len < ZC_BS_SECRET_MIN)
        return ZC_ERR_INVALID_ARG;
    if (sodium_ready() != ZC_OK)
        return ZC_ERR_INTERNAL;
    crypto_generichash_init(&st, NULL, 0, ZC_BS_KEY_LEN);
    crypto_generichash_update(&st, (const unsigned char *)label, sizeof(label));
    crypto_generichash_update(&st, secret, len);
    crypto_generichash_final(&st, key, ZC_BS_KEY_LEN);
    sodium_memzero(&st, sizeof(st));
    return ZC_OK;
}

zc_status_t zc_bs_random(void *buf, size_t len)
{
    if (sodium_ready() != ZC_OK)
        return ZC_ERR_INTERNAL;
    randombytes_buf(buf, len);
    return ZC_OK;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    for (int i = 3; i >= 0; i--, v >>= 8)
        p[i] = (uint8_t)v;
}

void zc_bs_mac(const uint8_t key[ZC_BS_KEY_LEN], zc_bs_role_t role, const zc_bs_transcript_t *t,
               uint8_t mac[32])
{
    static const char *const labels[] = {"zipccl bootstrap v2 rank proof",
                                         "zipccl bootstrap v2 root proof"};
    crypto_auth_hmacsha256_state st;
    uint8_t fields[16];

    /* fixed-width big-endian fields: no two transcripts encode alike */
    put_be32(fields, (uint32_t)(t->job >> 32));
    put_be32(fields + 4, (uint32_t)t->job);
    put_be32(fields + 8, t->rank);
    put_be32(fields + 12, t->size);
    crypto_auth_hmacsha256_init(&st, key, ZC_BS_KEY_LEN);
    crypto_auth_hmacsha256_update(&st, (const unsigned char *)labels[role],
                                  strlen(labels[role]) + 1);
    crypto_auth_hmacsha256_update(&st, fields, sizeof(fields));
    crypto_auth_hmacsha256_update(&st, t->nonce_root, sizeof(t->nonce_root));
    crypto_auth_hmacsha256_update(&st, t->nonce_rank, sizeof(t->nonce_rank));
    crypto_auth_hmacsha256_final(&st, mac);
    sodium_memzero(&st, sizeof(st));
}

int zc_bs_mac_verify(const uint8_t key[ZC_BS_KEY_LEN], zc_bs_role_t role,
                     const zc_bs_transcript_t *t, const uint8_t mac[32])
{
    uint8_t expected[32];
    zc_bs_mac(key, role, t, expected);
    int ok = crypto_verify_32(expected, mac) == 0;
    sodium_memzero(expected, sizeof(expected));
    return ok;
}

void zc_bs_key_wipe(uint8_t key[ZC_BS_KEY_LEN])
{
    sodium_memzero(key, ZC_BS_KEY_LEN);
}
