/*
 * none, fp16 and bf16 on the GPU: element-wise casts, so one thread handles
 * four values (16 or 8 bytes, one vector load and store when the buffers
 * allow) in a grid-stride loop. The conversions are common/half.h's own
 * functions compiled for the device, so the bytes are the host's: round to
 * nearest even, overflow to infinity, NaNs kept (quieted) with their sign and
 * top payload bits. Decoders check the header and the length in every block
 * and add nothing unless both are right; reduce picks NaNs as the host does.
 */
#include "codec/cuda/device.cuh"

namespace
{

constexpr int kVec = 4; /* values per thread and loop step */

/* Value of element @p i narrowed (or, for none, widened) for codec @p C from dtype @p D. */
template <int C, int D> __device__ __forceinline__ uint32_t encode_one(const void *src, uint64_t i)
{
    if (C == ZC_CODEC_FP16 && D == ZC_DTYPE_F16)
        return ((const uint16_t *)src)[i];
    if (C == ZC_CODEC_BF16 && D == ZC_DTYPE_BF16)
        return ((const uint16_t *)src)[i];
    if (C == ZC_CODEC_NONE && D == ZC_DTYPE_F32)
        return ((const uint32_t *)src)[i]; /* the bits as they are, NaN payloads included */
    float f = zc_dev_load((zc_dtype_t)D, src, i);
    if (C == ZC_CODEC_FP16)
        return zc_f32_to_f16(f);
    if (C == ZC_CODEC_BF16)
        return zc_f32_to_bf16(f);
    return __float_as_uint(f);
}

template <int C, int D, bool VEC>
__global__ void encode_kernel(const void *src, uint64_t n, uint8_t *dst, uint64_t *dlen)
{
    const uint64_t esize = C == ZC_CODEC_NONE ? 4 : 2;
    uint8_t *body = dst + ZC_PAYLOAD_HEADER_BYTES;
    const uint64_t groups = (n + kVec - 1) / kVec;

    if (blockIdx.x == 0 && threadIdx.x == 0) {
        zc_dev_header_write(dst, (zc_codec_id_t)C, n);
        *dlen = ZC_PAYLOAD_HEADER_BYTES + esize * n;
    }
    for (uint64_t g = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; g < groups;
         g += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t i = g * kVec;
        uint32_t v[kVec];
        if (VEC && i + kVec <= n) {
            /* one vector load: the encoders below only pick bits out of it */
            if (D == ZC_DTYPE_F32) {
                float4 f = ((const float4 *)src)[g];
                float t[kVec] = {f.x, f.y, f.z, f.w};
                for (int j = 0; j < kVec; j++)
                    v[j] = encode_one<C, D>(t, j);
            } else {
                uint2 h = ((const uint2 *)src)[g];
                uint16_t t[kVec] = {(uint16_t)h.x, (uint16_t)(h.x >> 16), (uint16_t)h.y,
                                    (uint16_t)(h.y >> 16)};
                for (int j = 0; j < kVec; j++)
                    v[j] = encode_one<C, D>(t, j);
            }
            if (esize == 4)
                ((uint4 *)body)[g] = make_uint4(v[0], v[1], v[2], v[3]);
            else
                ((uint2 *)body)[g] = make_uint2(v[0] | v[1] << 16, v[2] | v[3] << 16);
            continue;
        }
        for (uint64_t j = i; j < n && j < i + kVec; j++) {
            uint32_t x = encode_one<C, D>(src, j);
            body[esize * j] = (uint8_t)x;
            body[esize * j + 1] = (uint8_t)(x >> 8);
            if (esize == 4) {
                body[esize * j + 2] = (uint8_t)(x >> 16);
                body[esize * j + 3] = (uint8_t)(x >> 24);
            }
        }
    }
}

/* Payload value j of codec @p C widened to f32 (bits as the host reads them). */
template <int C> __device__ __forceinline__ float decode_one(const uint8_t *body, uint64_t j)
{
    if (C == ZC_CODEC_NONE)
        return __uint_as_float(zc_dev_ld32(body + 4 * j));
    uint16_t h = (uint16_t)(body[2 * j] | body[2 * j + 1] << 8);
    return C == ZC_CODEC_FP16 ? zc_f16_to_f32(h) : zc_bf16_to_f32(h);
}

/* Header and exact body length; every block computes the same verdict. */
template <int C>
__device__ __forceinline__ zc_status_t check_payload(const uint8_t *src, size_t len, uint64_t n)
{
    const uint64_t esize = C == ZC_CODEC_NONE ? 4 : 2;
    zc_status_t st = zc_dev_header_check(src, len, (zc_codec_id_t)C, n);
    if (st == ZC_OK && len - ZC_PAYLOAD_HEADER_BYTES != esize * n)
        st = ZC_ERR_CORRUPT;
    return st;
}

template <int C>
__global__ void decode_add_kernel(const uint8_t *src, size_t len, float *dst, uint64_t n,
                                  float alpha, int32_t *status)
{
    zc_status_t st = check_payload<C>(src, len, n);
    if (st != ZC_OK) {
        if (blockIdx.x == 0 && threadIdx.x == 0)
            zc_dev_fail(status, st);
        return;
    }
    const uint8_t *body = src + ZC_PAYLOAD_HEADER_BYTES;
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (uint64_t)gridDim.x * blockDim.x)
        dst[j] = zc_dev_add(dst[j], zc_dev_mul(alpha, decode_one<C>(body, j)));
}

/*
 * Sum of two payload values, rounded back, as the host's reduce: a NaN in a
 * wins over one in b (quieted), otherwise the f32 sum (x86's default NaN for
 * inf - inf) rounded once to the format.
 */
template <int C>
__device__ __forceinline__ uint32_t reduce_one(const uint8_t *a, const uint8_t *b, uint64_t j)
{
    if (C == ZC_CODEC_NONE)
        return __float_as_uint(zc_dev_add(decode_one<C>(a, j), decode_one<C>(b, j)));
    uint16_t x = (uint16_t)(a[2 * j] | a[2 * j + 1] << 8);
    uint16_t y = (uint16_t)(b[2 * j] | b[2 * j + 1] << 8);
    if (C == ZC_CODEC_FP16) {
        if ((x & 0x7fffu) > 0x7c00u)
            return x | 0x0200u;
        if ((y & 0x7fffu) > 0x7c00u)
            return y | 0x0200u;
        return zc_f32_to_f16(zc_dev_add(zc_f16_to_f32(x), zc_f16_to_f32(y)));
    }
    if ((x & 0x7fffu) > 0x7f80u)
        return x | 0x0040u;
    if ((y & 0x7fffu) > 0x7f80u)
        return y | 0x0040u;
    return zc_f32_to_bf16(zc_dev_add(zc_bf16_to_f32(x), zc_bf16_to_f32(y)));
}

template <int C>
__global__ void reduce_kernel(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                              uint64_t n, uint8_t *dst, uint64_t *dlen, int32_t *status)
{
    const uint64_t esize = C == ZC_CODEC_NONE ? 4 : 2;
    zc_status_t st = check_payload<C>(a, alen, n);
    if (st == ZC_OK)
        st = check_payload<C>(b, blen, n);
    if (st != ZC_OK) {
        if (blockIdx.x == 0 && threadIdx.x == 0)
            zc_dev_fail(status, st);
        return;
    }
    /* dst may be a or b: a valid b's header equals a's, so rewriting it races with no one */
    if (blockIdx.x == 0 && threadIdx.x < ZC_PAYLOAD_HEADER_BYTES) {
        dst[threadIdx.x] = a[threadIdx.x];
        if (threadIdx.x == 0)
            *dlen = alen;
    }
    const uint8_t *ab = a + ZC_PAYLOAD_HEADER_BYTES, *bb = b + ZC_PAYLOAD_HEADER_BYTES;
    uint8_t *db = dst + ZC_PAYLOAD_HEADER_BYTES;
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t r = reduce_one<C>(ab, bb, j);
        for (uint64_t k = 0; k < esize; k++)
            db[esize * j + k] = (uint8_t)(r >> (8 * k));
    }
}

__global__ void add_input_kernel(zc_dtype_t dtype, const void *src, uint64_t n, float *res)
{
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < n;
         j += (uint64_t)gridDim.x * blockDim.x)
        res[j] = zc_dev_add(res[j], zc_dev_load(dtype, src, j));
}

template <int C, int D>
void launch_encode(const void *src, uint64_t n, uint8_t *dst, uint64_t *dlen, cudaStream_t stream)
{
    const uintptr_t in_align = D == ZC_DTYPE_F32 ? 16 : 8, out_align = C == ZC_CODEC_NONE ? 16 : 8;
    const bool vec = (uintptr_t)src % in_align == 0 &&
                     (uintptr_t)(dst + ZC_PAYLOAD_HEADER_BYTES) % out_align == 0;
    const unsigned blocks = zc_cuda_blocks((n + kVec - 1) / kVec, ZC_CUDA_THREADS);
    if (vec)
        encode_kernel<C, D, true><<<blocks, ZC_CUDA_THREADS, 0, stream>>>(src, n, dst, dlen);
    else
        encode_kernel<C, D, false><<<blocks, ZC_CUDA_THREADS, 0, stream>>>(src, n, dst, dlen);
}

template <int C>
void launch_encode_dtype(zc_dtype_t dtype, const void *src, uint64_t n, uint8_t *dst,
                         uint64_t *dlen, cudaStream_t stream)
{
    switch (dtype) {
    case ZC_DTYPE_F16: launch_encode<C, ZC_DTYPE_F16>(src, n, dst, dlen, stream); break;
    case ZC_DTYPE_BF16: launch_encode<C, ZC_DTYPE_BF16>(src, n, dst, dlen, stream); break;
    default: launch_encode<C, ZC_DTYPE_F32>(src, n, dst, dlen, stream); break;
    }
}

} // namespace

zc_status_t zc_cuda_half_encode(zc_codec_id_t codec, zc_dtype_t dtype, const void *dsrc,
                                uint64_t count, uint8_t *ddst, uint64_t *dlen, cudaStream_t stream)
{
    switch (codec) {
    case ZC_CODEC_FP16:
        launch_encode_dtype<ZC_CODEC_FP16>(dtype, dsrc, count, ddst, dlen, stream);
        break;
    case ZC_CODEC_BF16:
        launch_encode_dtype<ZC_CODEC_BF16>(dtype, dsrc, count, ddst, dlen, stream);
        break;
    default: launch_encode_dtype<ZC_CODEC_NONE>(dtype, dsrc, count, ddst, dlen, stream); break;
    }
    return zc_cuda_launched("cast encode kernel");
}

zc_status_t zc_cuda_half_decode_add(zc_codec_id_t codec, const uint8_t *dsrc, size_t len,
                                    float *ddst, uint64_t count, float alpha, int32_t *dstatus,
                                    cudaStream_t stream)
{
    const unsigned blocks = zc_cuda_blocks(count, ZC_CUDA_THREADS);
    switch (codec) {
    case ZC_CODEC_FP16:
        decode_add_kernel<ZC_CODEC_FP16>
            <<<blocks, ZC_CUDA_THREADS, 0, stream>>>(dsrc, len, ddst, count, alpha, dstatus);
        break;
    case ZC_CODEC_BF16:
        decode_add_kernel<ZC_CODEC_BF16>
            <<<blocks, ZC_CUDA_THREADS, 0, stream>>>(dsrc, len, ddst, count, alpha, dstatus);
        break;
    default:
        decode_add_kernel<ZC_CODEC_NONE>
            <<<blocks, ZC_CUDA_THREADS, 0, stream>>>(dsrc, len, ddst, count, alpha, dstatus);
        break;
    }
    return zc_cuda_launched("cast decode kernel");
}

zc_status_t zc_cuda_half_reduce(zc_codec_id_t codec, const uint8_t *da, size_t alen,
                                const uint8_t *db, size_t blen, uint64_t count, uint8_t *ddst,
                                uint64_t *dlen, int32_t *dstatus, cudaStream_t stream)
{
    const unsigned blocks = zc_cuda_blocks(count, ZC_CUDA_THREADS);
    switch (codec) {
    case ZC_CODEC_FP16:
        reduce_kernel<ZC_CODEC_FP16><<<blocks, ZC_CUDA_THREADS, 0, stream>>>(
            da, alen, db, blen, count, ddst, dlen, dstatus);
        break;
    case ZC_CODEC_BF16:
        reduce_kernel<ZC_CODEC_BF16><<<blocks, ZC_CUDA_THREADS, 0, stream>>>(
            da, alen, db, blen, count, ddst, dlen, dstatus);
        break;
    default:
        reduce_kernel<ZC_CODEC_NONE><<<blocks, ZC_CUDA_THREADS, 0, stream>>>(
            da, alen, db, blen, count, ddst, dlen, dstatus);
        break;
    }
    return zc_cuda_launched("cast reduce kernel");
}

zc_status_t zc_cuda_add_input(zc_dtype_t dtype, const void *dsrc, uint64_t count, float *dres,
                              cudaStream_t stream)
{
    add_input_kernel<<<zc_cuda_blocks(count, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
        dtype, dsrc, count, dres);
    return zc_cuda_launched("error-feedback input kernel");
}
