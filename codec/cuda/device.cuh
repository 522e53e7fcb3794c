/*
 * Internals of libzipccl-cuda shared by the kernel files: device helpers (byte
 * order, the payload header, x86 float semantics, the status word), host
 * helpers (CUDA error conversion, workspace carving, grid sizes) and the
 * per-codec entry points that api.cu dispatches to.
 */
#ifndef ZC_CODEC_CUDA_DEVICE_CUH
#define ZC_CODEC_CUDA_DEVICE_CUH

#include "codec/cuda/cuda_codec.h"

extern "C" {
#include "codec/codec.h"
#include "common/half.h"
#include "common/log.h"
#include "common/philox.h"
}

#include <cuda_runtime.h>

#include <stddef.h>
#include <stdint.h>

#define ZC_CUDA_THREADS 256
/* Grid-stride loops never need more blocks than this to fill an H200 (132 SMs) many times. */
#define ZC_CUDA_MAX_BLOCKS 65535u
/* Workspace pieces start on this boundary (what cudaMalloc gives). */
#define ZC_CUDA_WS_ALIGN 256

/* ------------------------------------------------------------------ host */

/*
 * The one place where a cudaError_t becomes a zc_status_t: logs @p what with
 * CUDA's name for the error. Out of memory is ZC_ERR_NO_MEMORY, every other
 * failure ZC_ERR_INTERNAL.
 */
zc_status_t zc_cuda_status(cudaError_t err, const char *what);

/* ZC_OK, or the logged conversion of the last launch error after launching @p what. */
static inline zc_status_t zc_cuda_launched(const char *what)
{
    cudaError_t err = cudaGetLastError();
    return err == cudaSuccess ? ZC_OK : zc_cuda_status(err, what);
}

#define ZC_CUDA_CHECK(call, what)                                                                  \
    do {                                                                                           \
        cudaError_t zc_cuda_err_ = (call);                                                         \
        if (zc_cuda_err_ != cudaSuccess)                                                           \
            return zc_cuda_status(zc_cuda_err_, what);                                             \
    } while (0)

/* Blocks for @p n items of @p per_block each, at least 1 and at most ZC_CUDA_MAX_BLOCKS. */
static inline unsigned zc_cuda_blocks(uint64_t n, uint64_t per_block)
{
    uint64_t b = (n + per_block - 1) / per_block;
    return b == 0 ? 1u : b > ZC_CUDA_MAX_BLOCKS ? ZC_CUDA_MAX_BLOCKS : (unsigned)b;
}

/*
 * Workspace carving: the same calls size the workspace (base NULL) and hand out
 * its pieces, so the bound and the use cannot drift apart.
 */
typedef struct zc_cuda_ws {
    uint8_t *base;
    size_t used;
} zc_cuda_ws_t;

static inline void *zc_cuda_ws_take(zc_cuda_ws_t *ws, size_t bytes)
{
    size_t at = (ws->used + ZC_CUDA_WS_ALIGN - 1) & ~(size_t)(ZC_CUDA_WS_ALIGN - 1);
    ws->used = at + bytes;
    return ws->base ? ws->base + at : NULL;
}

/*
 * The per-tensor device state (cuda_codec.h). The host fields mirror what the
 * kernels are launched with; the device pointers hold the data.
 */
struct zc_cuda_state {
    zc_codec_params_t params;
    uint64_t count;
    float *residual;            /* device, count values; NULL without error feedback */
    void *cublas;               /* cublasHandle_t, GradiVeQ only */
    uint32_t dim, version, tag; /* GradiVeQ basis now on the device (version 0: none) */
    float *basis;               /* device, K x d row-major */
    float *offset;              /* device, d: U^T mu / N */
    float *lifted;              /* device, K x (d + 1) row-major: [U | mu] */
    float *staging;             /* pinned host buffer for uploads */
    size_t staging_floats;
    cudaEvent_t staged; /* recorded after the last upload from staging */
};

/* Per-codec implementations (api.cu checked the arguments). */
zc_status_t zc_cuda_half_encode(zc_codec_id_t codec, zc_dtype_t dtype, const void *dsrc,
                                uint64_t count, uint8_t *ddst, uint64_t *dlen, cudaStream_t stream);
zc_status_t zc_cuda_half_decode_add(zc_codec_id_t codec, const uint8_t *dsrc, size_t len,
                                    float *ddst, uint64_t count, float alpha, int32_t *dstatus,
                                    cudaStream_t stream);
zc_status_t zc_cuda_half_reduce(zc_codec_id_t codec, const uint8_t *da, size_t alen,
                                const uint8_t *db, size_t blen, uint64_t count, uint8_t *ddst,
                                uint64_t *dlen, int32_t *dstatus, cudaStream_t stream);
/* residual[i] = residual[i] + input[i] (x86 NaN rules, see zc_dev_add). */
zc_status_t zc_cuda_add_input(zc_dtype_t dtype, const void *dsrc, uint64_t count, float *dres,
                              cudaStream_t stream);

size_t zc_cuda_qsgd_workspace(const zc_codec_params_t *params, uint64_t count);
zc_status_t zc_cuda_qsgd_encode(const zc_codec_params_t *params, const zc_codec_rng_t *rng,
                                zc_dtype_t dtype, const void *dsrc, uint64_t count, uint8_t *ddst,
                                uint64_t *dlen, zc_cuda_ws_t *ws, cudaStream_t stream);
/* @p dstatus NULL: a payload this library just encoded, not checked again. */
zc_status_t zc_cuda_qsgd_decode_add(const zc_codec_params_t *params, const uint8_t *dsrc,
                                    size_t len, float *ddst, uint64_t count, float alpha,
                                    int32_t *dstatus, cudaStream_t stream);

size_t zc_cuda_topk_workspace(const zc_codec_params_t *params, uint64_t count);
/* Encodes the f32 residual and takes what was sent out of it (error feedback). */
zc_status_t zc_cuda_topk_encode(const zc_codec_params_t *params, float *dres, uint64_t count,
                                uint8_t *ddst, uint64_t *dlen, zc_cuda_ws_t *ws,
                                cudaStream_t stream);
zc_status_t zc_cuda_topk_decode_add(const zc_codec_params_t *params, const uint8_t *dsrc,
                                    size_t len, float *ddst, uint64_t count, int32_t *dstatus,
                                    zc_cuda_ws_t *ws, cudaStream_t stream);

size_t zc_cuda_gradiveq_workspace(const zc_codec_params_t *params, uint64_t count);
zc_status_t zc_cuda_gradiveq_encode(zc_cuda_state_t *state, zc_dtype_t dtype, const void *dsrc,
                                    uint64_t count, uint8_t *ddst, uint64_t *dlen, zc_cuda_ws_t *ws,
                                    cudaStream_t stream);
/* @p dstatus NULL: trusted (this library's own payload, for error feedback). */
zc_status_t zc_cuda_gradiveq_decode_add(zc_cuda_state_t *state, const uint8_t *dsrc, size_t len,
                                        float *ddst, uint64_t count, float alpha, int32_t *dstatus,
                                        zc_cuda_ws_t *ws, cudaStream_t stream);
zc_status_t zc_cuda_gradiveq_reduce(zc_cuda_state_t *state, const uint8_t *da, size_t alen,
                                    const uint8_t *db, size_t blen, uint64_t count, uint8_t *ddst,
                                    uint64_t *dlen, int32_t *dstatus, cudaStream_t stream);
/* Body length of a GradiVeQ payload for the state's basis (header included). */
size_t zc_cuda_gradiveq_len(const zc_cuda_state_t *state, uint64_t count);
zc_status_t zc_cuda_gradiveq_state_init(zc_cuda_state_t *state);
void zc_cuda_gradiveq_state_fini(zc_cuda_state_t *state);
zc_status_t zc_cuda_gradiveq_load(zc_cuda_state_t *state, const zc_codec_state_t *host,
                                  cudaStream_t stream);

/* ---------------------------------------------------------------- device */

__device__ __forceinline__ uint32_t zc_dev_ld32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

__device__ __forceinline__ uint64_t zc_dev_ld64(const uint8_t *p)
{
    return (uint64_t)zc_dev_ld32(p) | (uint64_t)zc_dev_ld32(p + 4) << 32;
}

__device__ __forceinline__ void zc_dev_st32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)v;
    p[1] = (uint8_t)(v >> 8);
    p[2] = (uint8_t)(v >> 16);
    p[3] = (uint8_t)(v >> 24);
}

__device__ __forceinline__ void zc_dev_st64(uint8_t *p, uint64_t v)
{
    zc_dev_st32(p, (uint32_t)v);
    zc_dev_st32(p + 4, (uint32_t)(v >> 32));
}

/* Bits of x (0 for 0), as zc_bitlen32. */
__device__ __forceinline__ unsigned zc_dev_bitlen32(uint32_t x)
{
    return 32u - (unsigned)__clz(x);
}

__device__ __forceinline__ unsigned zc_dev_bitlen64(uint64_t x)
{
    return 64u - (unsigned)__clzll((long long)x);
}

__device__ __forceinline__ bool zc_dev_isnan_bits(uint32_t u)
{
    return (u & 0x7fffffffu) > 0x7f800000u;
}

/*
 * Float arithmetic whose NaN results are x86's (SSE/AVX), so that NaN bit
 * patterns that land in a payload or a residual are the host's: a NaN operand
 * is returned quieted (the first one if both are), and an invalid operation
 * (inf - inf, 0 * inf) gives x86's default NaN 0xffc00000. The GPU would give
 * its canonical 0x7fffffff instead. Finite and infinite results are the IEEE
 * ones, rounded to nearest once (the _rn intrinsics are never contracted).
 */
#define ZC_X86_DEFAULT_NAN 0xffc00000u

__device__ __forceinline__ float zc_dev_quiet(uint32_t u)
{
    return __uint_as_float(u | 0x00400000u);
}

/* @p s, the IEEE result of an operation on @p a and @p b, with x86's NaN. */
__device__ __forceinline__ float zc_dev_x86_nan(float a, float b, float s)
{
    uint32_t ua = __float_as_uint(a), ub = __float_as_uint(b);
    if (zc_dev_isnan_bits(ua))
        return zc_dev_quiet(ua);
    if (zc_dev_isnan_bits(ub))
        return zc_dev_quiet(ub);
    return zc_dev_isnan_bits(__float_as_uint(s)) ? __uint_as_float(ZC_X86_DEFAULT_NAN) : s;
}

__device__ __forceinline__ float zc_dev_add(float a, float b)
{
    return zc_dev_x86_nan(a, b, __fadd_rn(a, b));
}

__device__ __forceinline__ float zc_dev_sub(float a, float b)
{
    return zc_dev_x86_nan(a, b, __fsub_rn(a, b));
}

__device__ __forceinline__ float zc_dev_mul(float a, float b)
{
    return zc_dev_x86_nan(a, b, __fmul_rn(a, b));
}

/* Element i of a codec input of @p dtype, widened exactly to f32. */
__device__ __forceinline__ float zc_dev_load(zc_dtype_t dtype, const void *src, uint64_t i)
{
    if (dtype == ZC_DTYPE_F32)
        return ((const float *)src)[i];
    uint16_t h = ((const uint16_t *)src)[i];
    return dtype == ZC_DTYPE_F16 ? zc_f16_to_f32(h) : zc_bf16_to_f32(h);
}

/* Records the first error of a decode; later ones keep it (every check fails the same way). */
__device__ __forceinline__ void zc_dev_fail(int32_t *status, zc_status_t code)
{
    atomicCAS((int *)status, 0, (int)code);
}

__device__ __forceinline__ bool zc_dev_failed(const int32_t *status)
{
    return status && *(const volatile int32_t *)status != 0;
}

/* The 16-byte payload header: codec/payload.h's, the host's own definition. */
__device__ __forceinline__ void zc_dev_header_write(uint8_t *dst, zc_codec_id_t codec,
                                                    uint64_t count)
{
    zc_payload_header_write(dst, codec, count);
}

/*
 * Checks the header as zc_payload_info and zc_codec_decode_add do, plus that the
 * codec is the one the device decoder was launched for.
 */
__device__ __forceinline__ zc_status_t zc_dev_header_check(const uint8_t *src, size_t len,
                                                           zc_codec_id_t codec, uint64_t count)
{
    zc_payload_info_t info;
    zc_status_t st = zc_payload_header_parse(src, len, &info);
    if (st != ZC_OK)
        return st;
    if (info.count != count || info.codec != codec)
        return ZC_ERR_MISMATCH;
    return ZC_OK;
}

#endif
