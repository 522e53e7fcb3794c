/*
 * The codecs on the GPU: the same payloads as the host codecs
 * (include/zipccl/zipccl_codec.h, docs/codecs.md), produced and consumed in
 * device memory, stream-ordered. Built into libzipccl-cuda.so only when nvcc is
 * found (meson.build: have_cuda; the summary's "cuda" line says why not).
 * docs/cuda.md describes the kernels.
 *
 * Who calls it: today nothing in the product does. Its users are
 * tests/gpu/test_cuda_codecs.c (against the host codecs) and codec_bench
 * --device cuda. The preload library's ncclAllReduce path on device buffers is
 * where it is meant to be wired in (encode and decode on the user's stream
 * instead of staging through host memory); that frontend is to load it with
 * dlopen and take its functions from zc_cuda_codec_get_api, so that neither
 * libzipccl.so nor the preload library ever depends on libcudart.
 *
 * Rules every entry point follows:
 * - Every buffer argument named d* is device memory (cudaMalloc; no managed
 *   memory is needed or assumed). Host-side arguments are read before the call
 *   returns.
 * - Work is queued on @p stream and nothing synchronizes the host: results that
 *   depend on the data (a payload's length, a decoder's verdict) are written to
 *   device memory (@p dlen, @p dstatus) in stream order. The return value only
 *   says whether the work was queued (argument checks, launch errors).
 * - Scratch memory comes from the caller: @p workspace (device memory, 256-byte
 *   aligned, @p workspace_size bytes), at least zc_cuda_codec_workspace_size().
 *   It may be reused as soon as the queued work is done (stream order).
 * - The encoder writes the bytes the host encoder writes for the same params,
 *   rng, dtype and input (gradiveq's projected coefficients excepted: cuBLAS
 *   sums in another order than the host BLAS, docs/cuda.md).
 * - Thread safety: calls sharing a state or a workspace must be stream-ordered
 *   (one stream, or events between streams); others are independent.
 */
#ifndef ZC_CODEC_CUDA_CODEC_H
#define ZC_CODEC_CUDA_CODEC_H

#include <zipccl/zipccl_codec.h>

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A cudaStream_t (the same type: cudaStream_t is struct CUstream_st *), without CUDA's headers. */
typedef struct CUstream_st *zc_cuda_stream_t;

/*
 * Per-tensor device state: the error-feedback residual (device memory, one f32
 * per value) and GradiVeQ's basis, uploaded from the host state that learned it.
 */
typedef struct zc_cuda_state zc_cuda_state_t;

/* Version of the table below; bumped on any change to it. */
#define ZC_CUDA_CODEC_API_VERSION 1

/*
 * Number of CUDA devices usable by this process into @p count_p: 0 (with
 * ZC_OK) when there is no driver or no device, so callers can fall back to the
 * host codecs. ZC_ERR_INVALID_ARG for a NULL pointer.
 */
zc_status_t zc_cuda_device_count(int *count_p);

/*
 * Device workspace, in bytes, that encoding, decoding or reducing @p count
 * values with @p params needs (one size covers all three); 0 if params are
 * invalid (check them with zc_codec_params_check). May be 0 for codecs that
 * need none: then @p workspace may be NULL.
 */
size_t zc_cuda_codec_workspace_size(const zc_codec_params_t *params, uint64_t count);

/*
 * ZC_OK when the device encoder handles @p params; ZC_ERR_UNSUPPORTED for
 * QSGD's Elias and auto codings (fixed coding only on the device,
 * docs/cuda.md); ZC_ERR_INVALID_CONFIG for invalid params.
 */
zc_status_t zc_cuda_codec_supported(const zc_codec_params_t *params);

/*
 * Creates the device state for @p count values encoded with @p params: a
 * zeroed device residual when the params use error feedback, GradiVeQ's basis
 * slots and a cuBLAS handle. The residual is zeroed on @p stream. Errors:
 * ZC_ERR_INVALID_ARG, ZC_ERR_INVALID_CONFIG, ZC_ERR_NO_MEMORY (device memory),
 * ZC_ERR_UNSUPPORTED (see zc_cuda_codec_supported), ZC_ERR_INTERNAL (CUDA or
 * cuBLAS failure, logged with its name).
 */
zc_status_t zc_cuda_state_create(const zc_codec_params_t *params, uint64_t count,
                                 zc_cuda_stream_t stream, zc_cuda_state_t **state_p);

/* Frees @p state (NULL allowed). The caller makes sure no queued work still uses it. */
void zc_cuda_state_destroy(zc_cuda_state_t *state);

/*
 * The device residual of @p state (count f32 values, device memory), NULL
 * without error feedback: for residual norms and tests; read it in stream order.
 */
const float *zc_cuda_state_residual(const zc_cuda_state_t *state);

/*
 * GradiVeQ: uploads the basis that @p host (a host state with the same params
 * and count, fed with zc_codec_state_update) holds now, on @p stream; the
 * device encoder and decoder then use that basis version. A host state still
 * at version 0 leaves the device at version 0 (raw payloads). The host copy is
 * read before this returns (staged through pinned memory the state owns).
 * ZC_ERR_MISMATCH when @p host was made for other params or count; a no-op
 * for other codecs.
 */
zc_status_t zc_cuda_state_load_basis(zc_cuda_state_t *state, const zc_codec_state_t *host,
                                     zc_cuda_stream_t stream);

/*
 * The payload length an encode of @p count values will write, when it does not
 * depend on the data (none, fp16, bf16, QSGD fixed, GradiVeQ with the state's
 * current basis); 0 when it does (top-k): read *dlen after the stream.
 */
size_t zc_cuda_codec_encoded_size(const zc_codec_params_t *params, const zc_cuda_state_t *state,
                                  uint64_t count);

/*
 * Encodes @p count values of @p dtype at @p dsrc into @p ddst (@p cap bytes,
 * at least zc_codec_bound(params, count): the length is found on the device,
 * so the whole bound must be there), and writes the payload length to the
 * device word @p dlen. @p state as for zc_codec_encode (this API's device
 * state); @p rng NULL for all-zero draws. With error feedback, the residual is
 * updated on the device exactly as the host does it.
 * Errors (returned): ZC_ERR_INVALID_ARG, ZC_ERR_INVALID_CONFIG,
 * ZC_ERR_BUFFER_TOO_SMALL (cap or workspace below the bound), ZC_ERR_MISMATCH
 * (state for other params or count), ZC_ERR_UNSUPPORTED, ZC_ERR_INTERNAL
 * (launch failure, logged).
 */
zc_status_t zc_cuda_codec_encode(const zc_codec_params_t *params, zc_cuda_state_t *state,
                                 const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *dsrc,
                                 uint64_t count, void *ddst, size_t cap, uint64_t *dlen,
                                 void *workspace, size_t workspace_size, zc_cuda_stream_t stream);

/*
 * Decodes the payload at @p dsrc (@p len bytes, a length the receiver knows)
 * and adds its values into the f32 @p ddst[0..count). The payload must be one
 * that @p params describe (codec, QSGD bucket and levels; top-k at most as
 * many kept values as params' density allows): the device decoder is sized
 * from them. @p state: GradiVeQ's device state, NULL for other codecs.
 * The verdict goes to the device word @p dstatus, a zc_status_t:
 * ZC_OK; ZC_ERR_CORRUPT (every check of the host decoder: magic, lengths,
 * ranges, codes, positions, padding); ZC_ERR_MISMATCH (count, version, basis,
 * or a well-formed payload of other params than @p params); ZC_ERR_UNSUPPORTED
 * (QSGD Elias coding). Unlike the host decoder, @p ddst is left unchanged on
 * every error: the whole payload is checked before anything is added.
 * Returned: ZC_ERR_INVALID_ARG, ZC_ERR_INVALID_CONFIG, ZC_ERR_BUFFER_TOO_SMALL
 * (workspace), ZC_ERR_INTERNAL.
 */
zc_status_t zc_cuda_codec_decode_add(const zc_codec_params_t *params, zc_cuda_state_t *state,
                                     const void *dsrc, size_t len, float *ddst, uint64_t count,
                                     int32_t *dstatus, void *workspace, size_t workspace_size,
                                     zc_cuda_stream_t stream);

/*
 * Adds two payloads of @p count values of a linear codec (none, fp16, bf16,
 * gradiveq) without decoding them, as zc_codec_reduce does, into @p ddst
 * (@p cap bytes, at least @p alen; it may be @p da or @p db); the length goes
 * to @p dlen and the verdict to @p dstatus (as for decode; ddst unchanged on
 * error). Returned: ZC_ERR_UNSUPPORTED for a codec that is not linear, and
 * the errors of decode.
 */
zc_status_t zc_cuda_codec_reduce(const zc_codec_params_t *params, zc_cuda_state_t *state,
                                 uint64_t count, const void *da, size_t alen, const void *db,
                                 size_t blen, void *ddst, size_t cap, uint64_t *dlen,
                                 int32_t *dstatus, zc_cuda_stream_t stream);

/* The entry points as one table, for dlopen: the core looks up zc_cuda_codec_get_api only. */
typedef struct zc_cuda_codec_api {
    uint32_t version; /* ZC_CUDA_CODEC_API_VERSION */
    zc_status_t (*device_count)(int *count_p);
    size_t (*workspace_size)(const zc_codec_params_t *params, uint64_t count);
    zc_status_t (*supported)(const zc_codec_params_t *params);
    zc_status_t (*state_create)(const zc_codec_params_t *params, uint64_t count,
                                zc_cuda_stream_t stream, zc_cuda_state_t **state_p);
    void (*state_destroy)(zc_cuda_state_t *state);
    const float *(*state_residual)(const zc_cuda_state_t *state);
    zc_status_t (*state_load_basis)(zc_cuda_state_t *state, const zc_codec_state_t *host,
                                    zc_cuda_stream_t stream);
    size_t (*encoded_size)(const zc_codec_params_t *params, const zc_cuda_state_t *state,
                           uint64_t count);
    zc_status_t (*encode)(const zc_codec_params_t *params, zc_cuda_state_t *state,
                          const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *dsrc,
                          uint64_t count, void *ddst, size_t cap, uint64_t *dlen, void *workspace,
                          size_t workspace_size, zc_cuda_stream_t stream);
    zc_status_t (*decode_add)(const zc_codec_params_t *params, zc_cuda_state_t *state,
                              const void *dsrc, size_t len, float *ddst, uint64_t count,
                              int32_t *dstatus, void *workspace, size_t workspace_size,
                              zc_cuda_stream_t stream);
    zc_status_t (*reduce)(const zc_codec_params_t *params, zc_cuda_state_t *state, uint64_t count,
                          const void *da, size_t alen, const void *db, size_t blen, void *ddst,
                          size_t cap, uint64_t *dlen, int32_t *dstatus, zc_cuda_stream_t stream);
} zc_cuda_codec_api_t;

/*
 * The table for @p version (ZC_CUDA_CODEC_API_VERSION), or NULL when this
 * library was built for another version: the caller then uses the host codecs.
 */
const zc_cuda_codec_api_t *zc_cuda_codec_get_api(uint32_t version);

#ifdef __cplusplus
}
#endif

#endif
