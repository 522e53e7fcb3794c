/*
 * Proof of membership for the tcp bootstrap: a job secret shared by every rank
 * (ZIPCCL_JOB_SECRET, or one a frontend hands out through its own trusted
 * channel) and a challenge-response over fresh nonces from both sides.
 *
 *   rank -> root  HELLO      job hash, rank, size            (nothing secret)
 *   root -> rank  CHALLENGE  nonce_root                      (nothing secret)
 *   rank -> root  PROOF      nonce_rank, MAC(key, "rank", job, rank, size, nonce_root, nonce_rank)
 *   root -> rank  JOINED     MAC(key, "root", job, rank, size, nonce_root, nonce_rank)
 *
 * The MAC is HMAC-SHA-256 (libsodium) keyed with BLAKE2b-256 of the secret; the
 * role label keeps a root's answer from ever being a valid rank proof, and the
 * root's nonce makes every proof good for one connection only (no replay). The
 * root sends its own MAC only to a rank whose proof it verified, so a stranger
 * learns nothing derived from the secret. Comparisons are constant-time.
 *
 * Nonces come from libsodium's randombytes (the kernel's getrandom).
 */
#ifndef ZC_TRANSPORT_BOOTSTRAP_AUTH_H
#define ZC_TRANSPORT_BOOTSTRAP_AUTH_H

#include <zipccl/zipccl_status.h>

#include <stddef.h>
#include <stdint.h>

#define ZC_BS_KEY_LEN 32
/* A secret shorter than this is refused: it could be guessed offline from one proof. */
#define ZC_BS_SECRET_MIN 16

typedef enum zc_bs_role {
    ZC_BS_ROLE_RANK = 0, /* the proof a joining rank sends */
    ZC_BS_ROLE_ROOT = 1, /* the proof rank 0 answers with */
} zc_bs_role_t;

/* What one handshake's MACs cover. */
typedef struct zc_bs_transcript {
    uint64_t job;
    uint32_t rank;
    uint32_t size;
    uint8_t nonce_root[32];
    uint8_t nonce_rank[32];
} zc_bs_transcript_t;

/*
 * Derives the MAC key from @p secret (@p len bytes, at least ZC_BS_SECRET_MIN).
 * ZC_ERR_INVALID_ARG if too short; ZC_ERR_INTERNAL if libsodium cannot start.
 */
zc_status_t zc_bs_key_derive(const void *secret, size_t len, uint8_t key[ZC_BS_KEY_LEN]);

/* Fills @p buf with @p len unpredictable bytes; ZC_ERR_INTERNAL if libsodium cannot start. */
zc_status_t zc_bs_random(void *buf, size_t len);

/* The MAC of @p t for @p role (32 bytes). */
void zc_bs_mac(const uint8_t key[ZC_BS_KEY_LEN], zc_bs_role_t role, const zc_bs_transcript_t *t,
               uint8_t mac[32]);

/* 1 when @p mac is the MAC of @p t for @p role, in constant time; else 0. */
int zc_bs_mac_verify(const uint8_t key[ZC_BS_KEY_LEN], zc_bs_role_t role,
                     const zc_bs_transcript_t *t, const uint8_t mac[32]);

/* Zeroes @p key so that it does not linger in freed memory. */
void zc_bs_key_wipe(uint8_t key[ZC_BS_KEY_LEN]);

#endif
