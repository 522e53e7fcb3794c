/*
 * Element-wise reduction kernels of the raw path, for every dtype and op.
 */
#ifndef ZC_COLLECTIVES_REDUCE_H
#define ZC_COLLECTIVES_REDUCE_H

#include <zipccl/zipccl.h>

#include <stddef.h>

/*
 * dst[i] = dst[i] (op) src[i], i < count. ZC_OP_AVG adds (the division comes at
 * the end, zc_reduce_avg). f16/bf16 compute in f32 and round to nearest even;
 * integers wrap (unsigned arithmetic); min/max of a NaN give NaN.
 * @p dst and @p src may be equal, otherwise must not overlap.
 */
void zc_reduce_apply(zc_dtype_t dtype, zc_redop_t op, void *dst, const void *src, size_t count);

/* out[i] = a[i] (op) b[i]: the same, out of place (@p out may equal @p a or @p b). */
void zc_reduce_apply3(zc_dtype_t dtype, zc_redop_t op, void *out, const void *a, const void *b,
                      size_t count);

/* buf[i] /= nranks: floating types divide (f16/bf16 via f32), integers truncate toward zero. */
void zc_reduce_avg(zc_dtype_t dtype, void *buf, size_t count, int nranks);

#endif
