/*
 * The floating element types every layer widens to f32: codecs take them as
 * input and accumulate in f32, the collectives reduce and stage them. The
 * names and sizes of every public type are zipccl.h's (zc_dtype_name,
 * zc_dtype_bytes), in dtype.c as well.
 */
#ifndef ZC_COMMON_DTYPE_H
#define ZC_COMMON_DTYPE_H

#include <zipccl/zipccl_codec.h>

#include <stddef.h>

/* Element size of @p dtype in bytes when it is F32, F16 or BF16; 0 for every other type. */
size_t zc_dtype_size(zc_dtype_t dtype);

/* Converts @p count values of @p dtype (F32, F16 or BF16) at @p src to f32 at @p dst. */
void zc_dtype_to_f32(zc_dtype_t dtype, const void *src, size_t count, float *dst);

/* Adds @p count values of @p dtype (F32, F16 or BF16) at @p src into the f32 @p dst (distinct
 * buffers, or @p src == @p dst). */
void zc_dtype_add_f32(zc_dtype_t dtype, const void *src, size_t count, float *dst);

#endif
