/*
 * The tcp bootstrap's wire format: every message is a fixed 40-byte frame
 * header in network byte order, then `len` payload bytes.
 *
 *   offset  size  field
 *        0     4  magic    "ZCBS" (0x5a434253): not ours -> the connection is dropped
 *        4     2  version  ZC_BS_WIRE_VERSION
 *        6     2  type     zc_bs_msg_t
 *        8     8  job      FNV-1a 64 of the job id: another job's process is rejected
 *       16     4  rank     the sender's rank (the root sends 0)
 *       20     4  seq      the operation's number: 0 for the handshake, then 1, 2, ...
 *       24     8  len      payload bytes that follow
 *       32     4  arg      broadcast: the root rank; HELLO: the job's size; REJECT:
 *                          ZC_BS_REJECT_RETRY or 0; else 0
 *       36     4  reserved 0
 *
 * The job hash only tells jobs apart: the job id is no secret (the default one,
 * root:host:port, is known to anyone who can reach the port). Membership is
 * proven, when the job has a secret, by the CHALLENGE / PROOF / JOINED exchange
 * of auth.h.
 *
 * Payloads, each of an exact length or bounded (a receiver reads no more):
 * HELLO, WELCOME none; CHALLENGE the root's nonce (ZC_BS_NONCE_LEN); PROOF the
 * rank's nonce then its MAC (ZC_BS_PROOF_LEN); JOINED the root's MAC with a
 * secret (ZC_BS_MAC_LEN), else none; DATA of ALLGATHER/BROADCAST the op's bytes,
 * whose length every rank knows beforehand; BARRIER none; REJECT and ABORT a
 * 4-byte status (int32, zc_status_t) then a reason of at most ZC_BS_REASON_MAX
 * bytes, not NUL-terminated. A REJECT carries the job hash of the hello it
 * answers and a reason that names nothing of the receiver's job: a process of
 * another job learns why it was refused, not how to pass.
 *
 * The parser functions here do not log and touch no socket: the provider (tcp.c)
 * logs with its context, and the unit tests feed them hostile frames directly.
 */
#ifndef ZC_TRANSPORT_BOOTSTRAP_WIRE_H
#define ZC_TRANSPORT_BOOTSTRAP_WIRE_H

#include <zipccl/zipccl_status.h>

#include <stddef.h>
#include <stdint.h>

#define ZC_BS_MAGIC UINT32_C(0x5a434253) /* "ZCBS" */
#define ZC_BS_WIRE_VERSION 2
#define ZC_BS_HDR_LEN 40
#define ZC_BS_REASON_MAX 256
#define ZC_BS_NONCE_LEN 32
#define ZC_BS_MAC_LEN 32
#define ZC_BS_PROOF_LEN (ZC_BS_NONCE_LEN + ZC_BS_MAC_LEN)
/* REJECT's arg: the claim may pass on a later attempt (its rank slot is taken now). */
#define ZC_BS_REJECT_RETRY 1

typedef enum zc_bs_msg {
    ZC_BS_MSG_HELLO = 1,     /* rank -> root: "I am rank R of a job of arg ranks" */
    ZC_BS_MSG_WELCOME = 2,   /* root -> rank: every rank joined */
    ZC_BS_MSG_REJECT = 3,    /* root -> a connection it refuses: status + reason */
    ZC_BS_MSG_ABORT = 4,     /* root -> ranks: operation seq failed: status + reason */
    ZC_BS_MSG_ALLGATHER = 5, /* DATA of an allgather */
    ZC_BS_MSG_BROADCAST = 6, /* DATA of a broadcast; arg = its root */
    ZC_BS_MSG_BARRIER = 7,   /* a barrier's arrival and release, no payload */
    ZC_BS_MSG_CHALLENGE = 8, /* root -> rank with a secret: the root's nonce */
    ZC_BS_MSG_PROOF = 9,     /* rank -> root: the rank's nonce and MAC */
    ZC_BS_MSG_JOINED = 10,   /* root -> rank: its claim is accepted (with a secret: root's MAC) */
} zc_bs_msg_t;

typedef struct zc_bs_frame {
    uint32_t magic;
    uint16_t version;
    uint16_t type;
    uint64_t job;
    uint32_t rank;
    uint32_t seq;
    uint64_t len;
    uint32_t arg;
    uint32_t reserved;
} zc_bs_frame_t;

/* What a receiver expects of the next frame; zc_bs_frame_check compares. */
typedef struct zc_bs_expect {
    uint64_t job;
    zc_bs_msg_t type;
    uint32_t rank; /* the sender's */
    uint32_t seq;
    uint64_t len; /* exact payload length */
    uint32_t arg;
} zc_bs_expect_t;

/* FNV-1a 64 of @p job_id (NUL-terminated). */
uint64_t zc_bs_job_hash(const char *job_id);

/* Lower-case name of @p type for messages ("allgather", "hello"); "message type N" if unknown. */
const char *zc_bs_msg_name(uint32_t type);

/* A frame for this job with the given fields, magic and version set. */
zc_bs_frame_t zc_bs_frame_make(uint64_t job, zc_bs_msg_t type, uint32_t rank, uint32_t seq,
                               uint64_t len, uint32_t arg);

void zc_bs_frame_encode(const zc_bs_frame_t *frame, uint8_t out[ZC_BS_HDR_LEN]);
void zc_bs_frame_decode(const uint8_t in[ZC_BS_HDR_LEN], zc_bs_frame_t *frame_p);

/*
 * Checks that @p frame is a zipccl bootstrap frame of this job: ZC_ERR_CORRUPT if
 * the magic, version or reserved field is wrong (not our protocol: drop the
 * connection), ZC_ERR_MISMATCH if it belongs to another job. Writes the reason
 * into @p why (may be NULL); for another job it names both hashes, so it is for
 * the receiver's log, never for the wire.
 */
zc_status_t zc_bs_frame_check_job(const zc_bs_frame_t *frame, uint64_t job, char *why,
                                  size_t why_len);

/*
 * zc_bs_frame_check_job, then the type, sender, sequence number, length and arg
 * against @p expect: ZC_ERR_MISMATCH naming the first field that differs, with
 * both values, in @p why. A REJECT or ABORT frame is not checked here: the
 * caller reads its reason (see zc_bs_reason_decode) instead.
 */
zc_status_t zc_bs_frame_check(const zc_bs_frame_t *frame, const zc_bs_expect_t *expect, char *why,
                              size_t why_len);

/*
 * REJECT/ABORT payload: writes status and @p reason (truncated to ZC_BS_REASON_MAX)
 * into @p out (4 + ZC_BS_REASON_MAX bytes); returns the payload length.
 */
size_t zc_bs_reason_encode(zc_status_t status, const char *reason,
                           uint8_t out[4 + ZC_BS_REASON_MAX]);

/*
 * Parses a REJECT/ABORT payload of @p len bytes: the carried status (an error
 * status this build knows; anything else reads as ZC_ERR_INTERNAL) into @p status_p and the reason,
 * NUL-terminated and with control characters replaced by '?', into @p reason
 * (at least ZC_BS_REASON_MAX + 1 bytes). ZC_ERR_CORRUPT if @p len is out of range.
 */
zc_status_t zc_bs_reason_decode(const uint8_t *payload, size_t len, zc_status_t *status_p,
                                char *reason);

#endif
