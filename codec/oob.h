/*
 * The out-of-band section of a payload (docs/codecs.md, "Values out of band"):
 * values a codec's body cannot carry faithfully (NaN, infinities, magnitudes
 * past the codec's limit), sent exactly as f32 next to a body that holds 0 at
 * their positions. The decoded value there is the body's plus the section's.
 *
 * A section holds at most zc_oob_cap(count) entries, so that it adds little to
 * a payload's bound: past that, the encoder leaves the surplus values to the
 * body (which turns its bucket or slice into NaN) and a reduce writes them
 * into the body (zc_codec_ops_t.poison).
 *
 * Layout, little-endian: u64 n (1..cap), n f32 values, then the n positions
 * as LEB128 gaps (shortest form, at most 10 bytes), each the distance to the
 * previous position less one (from position -1): strictly increasing.
 *
 * Pure compute, used by codec.c and by the codecs that find their values out of
 * band themselves (encode_spill, encode_ef).
 */
#ifndef ZC_CODEC_OOB_H
#define ZC_CODEC_OOB_H

#include "common/dtype.h"

#include <zipccl/zipccl_status.h>

#include <stddef.h>
#include <stdint.h>

typedef struct zc_oob {
    uint64_t n, cap;
    uint64_t *pos; /* strictly increasing */
    float *val;
} zc_oob_t;

void zc_oob_free(zc_oob_t *oob);

/*
 * Sets every NaN and infinity of @p x to 0 and returns how many there were: a
 * residual after a body carried them past the section's cap.
 */
uint64_t zc_oob_clear_nonfinite(float *x, uint64_t n);

/* Room for @p cap entries, so that pushes up to there cannot fail. */
zc_status_t zc_oob_reserve(zc_oob_t *oob, uint64_t cap);

/* Appends one entry; @p pos must be above the last one's. */
zc_status_t zc_oob_push(zc_oob_t *oob, uint64_t pos, float val);

/*
 * Appends every value v of @p src (@p count values of @p dtype) with
 * !(|v| < @p limit) to @p oob, in position order; with @p finite_only, only
 * the finite ones.
 */
zc_status_t zc_oob_scan(zc_dtype_t dtype, const void *src, uint64_t count, float limit,
                        int finite_only, zc_oob_t *oob);

/*
 * Whether any of @p n f32 values has !(|v| < @p limit) (a NaN, an infinity or
 * a magnitude past the limit): a vectorized max over the bit patterns.
 */
int zc_oob_any(const float *x, size_t n, float limit);

/* Most entries a section for @p count values holds: 16 + count / 1024, at most count. */
uint64_t zc_oob_cap(uint64_t count);

/* Largest section for @p count values: 8 + 4 cap + the gaps' bytes (see oob.c). */
uint64_t zc_oob_bound(uint64_t count);

/* Bytes of the section @p oob writes (0 when it is empty). */
size_t zc_oob_size(const zc_oob_t *oob);

/* Writes the section (zc_oob_size bytes) at @p dst. */
void zc_oob_write(const zc_oob_t *oob, uint8_t *dst);

/*
 * Checks the section at the start of @p src[0..len) for @p count values:
 * ZC_ERR_CORRUPT unless n is 1..zc_oob_cap(count), the values fit, every gap is a
 * shortest-form varint of at most 10 bytes and every position is below count.
 * Sets *size_p to the section's bytes and, when @p oob is not NULL, reads the
 * entries into it (which must be empty).
 */
zc_status_t zc_oob_parse(const uint8_t *src, size_t len, uint64_t count, size_t *size_p,
                         zc_oob_t *oob);

/* The sum of two sections' entries: equal positions add in f32. */
zc_status_t zc_oob_merge(const zc_oob_t *a, const zc_oob_t *b, zc_oob_t *out);

/* dst[pos] += val for every entry. */
void zc_oob_add(const zc_oob_t *oob, float *dst);

#endif
