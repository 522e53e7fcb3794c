/*
 * CRC-32C (Castagnoli, reflected polynomial 0x82f63b78), the checksum of
 * iSCSI, ext4 and SSE4.2's crc32 instruction: ZIPCCL_CHECKSUM's payload
 * trailer (docs/codecs.md, "Payload checksum").
 */
#ifndef ZC_COMMON_CRC32C_H
#define ZC_COMMON_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/*
 * The CRC-32C of @p len bytes at @p data ("123456789" gives 0xe3069283): the
 * crc32 instruction where the CPU has SSE4.2, else a table, same result.
 */
uint32_t zc_crc32c(const void *data, size_t len);

/* The table version alone, for tests that compare the two. */
uint32_t zc_crc32c_portable(const void *data, size_t len);

#endif
