/*
 * The 16-byte payload header (docs/codecs.md), written and parsed by the host
 * codecs (codec.c) and the CUDA ones (codec/cuda) from this one definition,
 * so that a format change cannot reach one and not the other. Plain C with
 * ZC_HD: the functions compile for the host and, under nvcc, for the device.
 *
 * Layout, little-endian: bytes 0-1 "ZC", 2 version, 3 codec id, 4 flags,
 * 5-7 reserved (zero), 8-15 element count.
 *
 * Flags extend format version 1 without a new version: a decoder that does not
 * know a flag rejects the payload as ZC_ERR_CORRUPT (version 1 decoders,
 * including the CUDA ones, took byte 4 as reserved and reject any flag).
 * ZC_PAYLOAD_FLAG_OOB: an out-of-band section follows the header (codec.c,
 * docs/codecs.md "Values out of band"): values the body cannot carry, sent
 * exactly as f32 and added to what the body decodes to.
 * ZC_PAYLOAD_FLAG_CRC: the payload ends with the CRC-32C (common/crc32c.h,
 * little-endian) of every byte before it, this flag included (docs/codecs.md
 * "Payload checksum").
 */
#ifndef ZC_CODEC_PAYLOAD_H
#define ZC_CODEC_PAYLOAD_H

#include "common/compiler.h"

#include <zipccl/zipccl_codec.h>

#include <stddef.h>
#include <stdint.h>

#define ZC_PAYLOAD_MAGIC0 'Z'
#define ZC_PAYLOAD_MAGIC1 'C'
#define ZC_PAYLOAD_VERSION 1
#define ZC_PAYLOAD_FLAG_OOB 0x01u
#define ZC_PAYLOAD_FLAG_CRC 0x02u
#define ZC_PAYLOAD_CRC_BYTES 4
/* Flags the host decoders understand (codec.c); zc_payload_header_parse accepts none. */
#define ZC_PAYLOAD_FLAGS_KNOWN (ZC_PAYLOAD_FLAG_OOB | ZC_PAYLOAD_FLAG_CRC)

/* Byte by byte: the header may sit at any alignment, on the host or the device. */
static inline ZC_HD uint32_t zc_payload_ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline ZC_HD uint64_t zc_payload_ld64(const uint8_t *p)
{
    return (uint64_t)zc_payload_ld32(p) | (uint64_t)zc_payload_ld32(p + 4) << 32;
}

static inline ZC_HD void zc_payload_st32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

static inline ZC_HD void zc_payload_st64(uint8_t *p, uint64_t v)
{
    zc_payload_st32(p, (uint32_t)v);
    zc_payload_st32(p + 4, (uint32_t)(v >> 32));
}

static inline ZC_HD void zc_payload_header_write(uint8_t *dst, zc_codec_id_t codec, uint64_t count)
{
    dst[0] = ZC_PAYLOAD_MAGIC0;
    dst[1] = ZC_PAYLOAD_MAGIC1;
    dst[2] = ZC_PAYLOAD_VERSION;
    dst[3] = (uint8_t)codec;
    zc_payload_st32(dst + 4, 0);
    zc_payload_st64(dst + 8, count);
}

/*
 * Parses the header of @p len bytes at @p src into @p info_p, accepting the
 * flags in @p flags_ok: ZC_ERR_CORRUPT when it is short, not ours, names no
 * codec or carries another flag, ZC_ERR_MISMATCH for another format version
 * (a peer running another release).
 */
static inline ZC_HD zc_status_t zc_payload_header_parse_flags(const uint8_t *src, size_t len,
                                                              unsigned flags_ok,
                                                              zc_payload_info_t *info_p)
{
    if (len < ZC_PAYLOAD_HEADER_BYTES || src[0] != ZC_PAYLOAD_MAGIC0 ||
        src[1] != ZC_PAYLOAD_MAGIC1 || (src[4] & ~flags_ok) != 0 ||
        (zc_payload_ld32(src + 4) >> 8) != 0 || src[3] >= ZC_CODEC_COUNT)
        return ZC_ERR_CORRUPT;
    if (src[2] != ZC_PAYLOAD_VERSION)
        return ZC_ERR_MISMATCH;
    info_p->codec = (zc_codec_id_t)src[3];
    info_p->version = src[2];
    info_p->count = zc_payload_ld64(src + 8);
    return ZC_OK;
}

/* A header without flags: what the CUDA decoders, which read no out-of-band section, accept. */
static inline ZC_HD zc_status_t zc_payload_header_parse(const uint8_t *src, size_t len,
                                                        zc_payload_info_t *info_p)
{
    return zc_payload_header_parse_flags(src, len, 0, info_p);
}

#endif
