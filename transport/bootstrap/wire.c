#include "transport/bootstrap/wire.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

uint64_t zc_bs_job_hash(const char *job_id)
{
    uint64_t h = UINT64_C(0xcbf29ce484222325); /* FNV-1a 64 offset basis */
    for (const unsigned char *p = (const unsigned char *)job_id; *p; p++) {
        h ^= *p;
        h *= UINT64_C(0x100000001b3); /* FNV 64 prime */
    }
    return h;
}

const char *zc_bs_msg_name(uint32_t type)
{
    switch (type) {
    case ZC_BS_MSG_HELLO: return "hello";
    case ZC_BS_MSG_WELCOME: return "welcome";
    case ZC_BS_MSG_REJECT: return "reject";
    case ZC_BS_MSG_ABORT: return "abort";
    case ZC_BS_MSG_ALLGATHER: return "allgather";
    case ZC_BS_MSG_BROADCAST: return "broadcast";
    case ZC_BS_MSG_BARRIER: return "barrier";
    case ZC_BS_MSG_CHALLENGE: return "challenge";
    case ZC_BS_MSG_PROOF: return "proof";
    case ZC_BS_MSG_JOINED: return "joined";
    }
    return "unknown message type";
}

zc_bs_frame_t zc_bs_frame_make(uint64_t job, zc_bs_msg_t type, uint32_t rank, uint32_t seq,
                               uint64_t len, uint32_t arg)
{
    zc_bs_frame_t f = {
        .magic = ZC_BS_MAGIC,
        .version = ZC_BS_WIRE_VERSION,
        .type = (uint16_t)type,
        .job = job,
        .rank = rank,
        .seq = seq,
        .len = len,
        .arg = arg,
        .reserved = 0,
    };
    return f;
}

static void put_be(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = bytes - 1; i >= 0; i--) {
        p[i] = (uint8_t)v;
        v >>= 8;
    }
}

static uint64_t get_be(const uint8_t *p, int bytes)
{
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v = v << 8 | p[i];
    return v;
}

void zc_bs_frame_encode(const zc_bs_frame_t *frame, uint8_t out[ZC_BS_HDR_LEN])
{
    put_be(out + 0, frame->magic, 4);
    put_be(out + 4, frame->version, 2);
    put_be(out + 6, frame->type, 2);
    put_be(out + 8, frame->job, 8);
    put_be(out + 16, frame->rank, 4);
    put_be(out + 20, frame->seq, 4);
    put_be(out + 24, frame->len, 8);
    put_be(out + 32, frame->arg, 4);
    put_be(out + 36, frame->reserved, 4);
}

void zc_bs_frame_decode(const uint8_t in[ZC_BS_HDR_LEN], zc_bs_frame_t *frame_p)
{
    zc_bs_frame_t f;
    f.magic = (uint32_t)get_be(in + 0, 4);
    f.version = (uint16_t)get_be(in + 4, 2);
    f.type = (uint16_t)get_be(in + 6, 2);
    f.job = get_be(in + 8, 8);
    f.rank = (uint32_t)get_be(in + 16, 4);
    f.seq = (uint32_t)get_be(in + 20, 4);
    f.len = get_be(in + 24, 8);
    f.arg = (uint32_t)get_be(in + 32, 4);
    f.reserved = (uint32_t)get_be(in + 36, 4);
    *frame_p = f;
}

#define WHY(...)                                                                                   \
    do {                                                                                           \
        if (why && why_len)                                                                        \
            snprintf(why, why_len, __VA_ARGS__);                                                   \
    } while (0)

zc_status_t zc_bs_frame_check_job(const zc_bs_frame_t *frame, uint64_t job, char *why,
                                  size_t why_len)
{
    if (frame->magic != ZC_BS_MAGIC) {
        WHY("not a zipccl bootstrap message (magic 0x%08" PRIx32 ", expected 0x%08" PRIx32 ")",
            frame->magic, ZC_BS_MAGIC);
        return ZC_ERR_CORRUPT;
    }
    if (frame->version != ZC_BS_WIRE_VERSION) {
        WHY("bootstrap protocol version %u, this build speaks %u", (unsigned)frame->version,
            (unsigned)ZC_BS_WIRE_VERSION);
        return ZC_ERR_CORRUPT;
    }
    if (frame->reserved != 0) {
        WHY("reserved header field is 0x%08" PRIx32 ", not 0", frame->reserved);
        return ZC_ERR_CORRUPT;
    }
    if (frame->job != job) {
        WHY("the sender's job id hash 0x%016" PRIx64 " differs from the receiver's 0x%016" PRIx64
            " (ZIPCCL_JOB_ID or the launcher's job id)",
            frame->job, job);
        return ZC_ERR_MISMATCH;
    }
    return ZC_OK;
}

zc_status_t zc_bs_frame_check(const zc_bs_frame_t *frame, const zc_bs_expect_t *expect, char *why,
                              size_t why_len)
{
    zc_status_t status = zc_bs_frame_check_job(frame, expect->job, why, why_len);
    if (status != ZC_OK)
        return status;
    if (frame->type != (uint32_t)expect->type) {
        WHY("message type %s (%u), expected %s", zc_bs_msg_name(frame->type), (unsigned)frame->type,
            zc_bs_msg_name(expect->type));
        return ZC_ERR_MISMATCH;
    }
    if (frame->rank != expect->rank) {
        WHY("message claims to come from rank %" PRIu32 ", expected rank %" PRIu32, frame->rank,
            expect->rank);
        return ZC_ERR_MISMATCH;
    }
    if (frame->seq != expect->seq) {
        WHY("message belongs to operation #%" PRIu32 ", expected #%" PRIu32
            " (ranks called different sequences of operations)",
            frame->seq, expect->seq);
        return ZC_ERR_MISMATCH;
    }
    if (frame->len != expect->len) {
        WHY("sent %" PRIu64 " bytes, expected %" PRIu64 " (every rank must pass the same length)",
            frame->len, expect->len);
        return ZC_ERR_MISMATCH;
    }
    if (frame->arg != expect->arg) {
        if (expect->type == ZC_BS_MSG_BROADCAST)
            WHY("broadcast from root %" PRIu32 ", expected root %" PRIu32, frame->arg, expect->arg);
        else if (expect->type == ZC_BS_MSG_HELLO)
            WHY("says the job has %" PRIu32 " ranks, expected %" PRIu32, frame->arg, expect->arg);
        else
            WHY("header argument %" PRIu32 ", expected %" PRIu32, frame->arg, expect->arg);
        return ZC_ERR_MISMATCH;
    }
    return ZC_OK;
}

size_t zc_bs_reason_encode(zc_status_t status, const char *reason,
                           uint8_t out[4 + ZC_BS_REASON_MAX])
{
    size_t n = strlen(reason);
    if (n > ZC_BS_REASON_MAX)
        n = ZC_BS_REASON_MAX;
    put_be(out, (uint32_t)(int32_t)status, 4);
    memcpy(out + 4, reason, n);
    return 4 + n;
}

zc_status_t zc_bs_reason_decode(const uint8_t *payload, size_t len, zc_status_t *status_p,
                                char *reason)
{
    if (len < 4 || len > 4 + ZC_BS_REASON_MAX)
        return ZC_ERR_CORRUPT;
    int32_t s = (int32_t)(uint32_t)get_be(payload, 4);
    /* an error this build knows; anything else (a newer peer's code, garbage) is internal */
    zc_status_t status = ZC_ERR_INTERNAL;
    if (s < 0 && strcmp(zc_status_string((zc_status_t)s), "unknown status") != 0)
        status = (zc_status_t)s;
    size_t n = len - 4;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = payload[4 + i];
        reason[i] = (c < 0x20 || c == 0x7f) ? '?' : (char)c;
    }
    reason[n] = '\0';
    *status_p = status;
    return ZC_OK;
}
