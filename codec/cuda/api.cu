/*
 * The entry points of libzipccl-cuda (cuda_codec.h): argument checks on the
 * host, the error-feedback sequence (residual += input, encode the residual,
 * take the payload back out of it) and the dispatch to each codec's kernels.
 * Nothing here waits for the device.
 */
#include "codec/cuda/device.cuh"

#include <stdlib.h>
#include <string.h>

zc_status_t zc_cuda_status(cudaError_t err, const char *what)
{
    ZC_ERROR("cuda: %s failed: %s (%s)", what, cudaGetErrorName(err), cudaGetErrorString(err));
    return err == cudaErrorMemoryAllocation ? ZC_ERR_NO_MEMORY : ZC_ERR_INTERNAL;
}

namespace
{

/*
 * Codecs with device kernels. A codec added on the host only is refused
 * (ZC_ERR_UNSUPPORTED) instead of reaching the half kernels, the dispatch's
 * default below.
 */
bool has_kernels(zc_codec_id_t codec)
{
    switch (codec) {
    case ZC_CODEC_NONE:
    case ZC_CODEC_QSGD:
    case ZC_CODEC_FP16:
    case ZC_CODEC_BF16:
    case ZC_CODEC_TOPK:
    case ZC_CODEC_GRADIVEQ: return true;
    default: return false;
    }
}

/* Values in one payload: what every host decoder accepts. */
constexpr uint64_t kMaxCount = UINT64_C(1) << 40;

} // namespace

extern "C" {

ZC_EXPORT zc_status_t zc_cuda_device_count(int *count_p)
{
    int n = 0;
    if (!count_p)
        return ZC_ERR_INVALID_ARG;
    /* no driver, no device, a driver too old: the host codecs are used instead */
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        (void)cudaGetLastError();
        n = 0;
    }
    *count_p = n;
    return ZC_OK;
}

/* The device kernels write no checksum trailer (ZIPCCL_CHECKSUM): the host codecs do. */
static bool wants_checksum(const zc_codec_params_t *params)
{
    return params->struct_size >= offsetof(zc_codec_params_t, checksum) + sizeof(uint32_t) &&
           params->checksum != 0;
}

ZC_EXPORT zc_status_t zc_cuda_codec_supported(const zc_codec_params_t *params)
{
    if (!params)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_codec_params_check(params));
    if (wants_checksum(params))
        return ZC_ERR_UNSUPPORTED;
    if (!has_kernels(params->codec))
        return ZC_ERR_UNSUPPORTED;
    if (params->codec == ZC_CODEC_QSGD && params->qsgd.coding != ZC_QSGD_CODING_FIXED)
        return ZC_ERR_UNSUPPORTED; /* docs/cuda.md: why Elias stays on the host */
    return ZC_OK;
}

ZC_EXPORT size_t zc_cuda_codec_workspace_size(const zc_codec_params_t *params, uint64_t count)
{
    if (!params || zc_codec_params_check(params) != ZC_OK || count > kMaxCount)
        return 0;
    switch (params->codec) {
    case ZC_CODEC_QSGD: return zc_cuda_qsgd_workspace(params, count);
    case ZC_CODEC_TOPK: return zc_cuda_topk_workspace(params, count);
    case ZC_CODEC_GRADIVEQ: return zc_cuda_gradiveq_workspace(params, count);
    default: return 0;
    }
}

ZC_EXPORT void zc_cuda_state_destroy(zc_cuda_state_t *state)
{
    if (!state)
        return;
    if (state->params.codec == ZC_CODEC_GRADIVEQ)
        zc_cuda_gradiveq_state_fini(state);
    cudaFree(state->residual);
    free(state);
}

ZC_EXPORT zc_status_t zc_cuda_state_create(const zc_codec_params_t *params, uint64_t count,
                                           zc_cuda_stream_t stream, zc_cuda_state_t **state_p)
{
    zc_status_t status;

    if (!params || !state_p || count > kMaxCount)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_cuda_codec_supported(params));
    zc_cuda_state_t *s = (zc_cuda_state_t *)calloc(1, sizeof(*s));
    if (!s)
        return ZC_ERR_NO_MEMORY;
    zc_codec_params_copy(params, &s->params);
    s->count = count;
    if (zc_codec_error_feedback(params)) {
        const size_t bytes = (count ? (size_t)count : 1) * sizeof(float);
        cudaError_t err = cudaMalloc(&s->residual, bytes);
        if (err == cudaSuccess)
            err = cudaMemsetAsync(s->residual, 0, bytes, stream);
        if (err != cudaSuccess) {
            status = zc_cuda_status(err, "allocating the error-feedback residual");
            goto err_destroy;
        }
    }
    if (params->codec == ZC_CODEC_GRADIVEQ)
        ZC_CHECK_GOTO(zc_cuda_gradiveq_state_init(s), status, err_destroy);
    *state_p = s;
    return ZC_OK;

err_destroy:
    zc_cuda_state_destroy(s);
    return status;
}

ZC_EXPORT const float *zc_cuda_state_residual(const zc_cuda_state_t *state)
{
    return state ? state->residual : NULL;
}

ZC_EXPORT zc_status_t zc_cuda_state_load_basis(zc_cuda_state_t *state, const zc_codec_state_t *host,
                                               zc_cuda_stream_t stream)
{
    if (!state || !host)
        return ZC_ERR_INVALID_ARG;
    if (state->params.codec != ZC_CODEC_GRADIVEQ)
        return ZC_OK;
    if (host->count != state->count || !zc_codec_params_equal(&host->params, &state->params) ||
        !host->priv)
        return ZC_ERR_MISMATCH;
    return zc_cuda_gradiveq_load(state, host, stream);
}

ZC_EXPORT size_t zc_cuda_codec_encoded_size(const zc_codec_params_t *params,
                                            const zc_cuda_state_t *state, uint64_t count)
{
    if (!params || zc_codec_params_check(params) != ZC_OK || count > kMaxCount)
        return 0;
    const size_t body = zc_codec_bound(params, count);
    switch (params->codec) {
    case ZC_CODEC_NONE:
    case ZC_CODEC_FP16:
    case ZC_CODEC_BF16: return body; /* the bound is the length */
    case ZC_CODEC_QSGD: return params->qsgd.coding == ZC_QSGD_CODING_FIXED ? body : 0;
    case ZC_CODEC_GRADIVEQ: return state ? zc_cuda_gradiveq_len(state, count) : 0;
    default: return 0;
    }
}

ZC_EXPORT zc_status_t zc_cuda_codec_encode(const zc_codec_params_t *params, zc_cuda_state_t *state,
                                           const zc_codec_rng_t *rng, zc_dtype_t dtype,
                                           const void *dsrc, uint64_t count, void *ddst, size_t cap,
                                           uint64_t *dlen, void *workspace, size_t workspace_size,
                                           zc_cuda_stream_t stream)
{
    static const zc_codec_rng_t rng_zero = {0, 0, 0, 0};
    cudaStream_t st = (cudaStream_t)stream;

    if (!params || !ddst || !dlen || (count > 0 && !dsrc) || zc_dtype_size(dtype) == 0 ||
        count > kMaxCount)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_cuda_codec_supported(params));
    if (zc_codec_needs_state(params)) {
        if (!state)
            return ZC_ERR_INVALID_ARG;
        if (state->count != count || !zc_codec_params_equal(&state->params, params))
            return ZC_ERR_MISMATCH;
    } else {
        state = NULL;
    }
    if (cap < zc_codec_bound(params, count))
        return ZC_ERR_BUFFER_TOO_SMALL; /* the length is known only on the device */
    const size_t need = zc_cuda_codec_workspace_size(params, count);
    if (workspace_size < need || (need > 0 && !workspace))
        return ZC_ERR_BUFFER_TOO_SMALL;
    if (!rng)
        rng = &rng_zero;

    uint8_t *dst = (uint8_t *)ddst;
    zc_cuda_ws_t ws = {(uint8_t *)workspace, 0};
    const void *src = dsrc;
    zc_dtype_t in = dtype;
    if (state && state->residual) {
        /* error feedback: encode input + residual, then residual -= what was sent */
        ZC_CHECK(zc_cuda_add_input(dtype, dsrc, count, state->residual, st));
        src = state->residual;
        in = ZC_DTYPE_F32;
    }
    switch (params->codec) {
    case ZC_CODEC_QSGD:
        ZC_CHECK(zc_cuda_qsgd_encode(params, rng, in, src, count, dst, dlen, &ws, st));
        if (state && state->residual)
            ZC_CHECK(zc_cuda_qsgd_decode_add(params, dst, zc_codec_bound(params, count),
                                             state->residual, count, -1.0f, NULL, st));
        return ZC_OK;
    case ZC_CODEC_TOPK:
        /* top-k always has a residual; the subtraction is fused into its writer */
        return zc_cuda_topk_encode(params, state->residual, count, dst, dlen, &ws, st);
    case ZC_CODEC_GRADIVEQ:
        ZC_CHECK(zc_cuda_gradiveq_encode(state, in, src, count, dst, dlen, &ws, st));
        if (state->residual) {
            zc_cuda_ws_t again = {(uint8_t *)workspace, 0}; /* stream order: free again */
            ZC_CHECK(zc_cuda_gradiveq_decode_add(state, dst, zc_cuda_gradiveq_len(state, count),
                                                 state->residual, count, -1.0f, NULL, &again, st));
        }
        return ZC_OK;
    default: return zc_cuda_half_encode(params->codec, in, src, count, dst, dlen, st);
    }
}

ZC_EXPORT zc_status_t zc_cuda_codec_decode_add(const zc_codec_params_t *params,
                                               zc_cuda_state_t *state, const void *dsrc, size_t len,
                                               float *ddst, uint64_t count, int32_t *dstatus,
                                               void *workspace, size_t workspace_size,
                                               zc_cuda_stream_t stream)
{
    cudaStream_t st = (cudaStream_t)stream;

    if (!params || !dsrc || !dstatus || (count > 0 && !ddst) || count > kMaxCount)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_codec_params_check(params));
    if (!has_kernels(params->codec) || wants_checksum(params))
        return ZC_ERR_UNSUPPORTED;
    if (params->codec == ZC_CODEC_GRADIVEQ &&
        (!state || state->params.codec != ZC_CODEC_GRADIVEQ || state->count != count))
        return state ? ZC_ERR_MISMATCH : ZC_ERR_INVALID_ARG;
    const size_t need = zc_cuda_codec_workspace_size(params, count);
    if (workspace_size < need || (need > 0 && !workspace))
        return ZC_ERR_BUFFER_TOO_SMALL;

    ZC_CUDA_CHECK(cudaMemsetAsync(dstatus, 0, sizeof(*dstatus), st), "status reset");
    const uint8_t *src = (const uint8_t *)dsrc;
    zc_cuda_ws_t ws = {(uint8_t *)workspace, 0};
    switch (params->codec) {
    case ZC_CODEC_QSGD:
        return zc_cuda_qsgd_decode_add(params, src, len, ddst, count, 1.0f, dstatus, st);
    case ZC_CODEC_TOPK:
        return zc_cuda_topk_decode_add(params, src, len, ddst, count, dstatus, &ws, st);
    case ZC_CODEC_GRADIVEQ:
        return zc_cuda_gradiveq_decode_add(state, src, len, ddst, count, 1.0f, dstatus, &ws, st);
    default:
        return zc_cuda_half_decode_add(params->codec, src, len, ddst, count, 1.0f, dstatus, st);
    }
}

ZC_EXPORT zc_status_t zc_cuda_codec_reduce(const zc_codec_params_t *params, zc_cuda_state_t *state,
                                           uint64_t count, const void *da, size_t alen,
                                           const void *db, size_t blen, void *ddst, size_t cap,
                                           uint64_t *dlen, int32_t *dstatus,
                                           zc_cuda_stream_t stream)
{
    cudaStream_t st = (cudaStream_t)stream;

    if (!params || !da || !db || !ddst || !dlen || !dstatus || count > kMaxCount)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_codec_params_check(params));
    if (!has_kernels(params->codec) || !zc_codec_ops(params->codec)->reduce ||
        wants_checksum(params))
        return ZC_ERR_UNSUPPORTED;
    if (params->codec == ZC_CODEC_GRADIVEQ &&
        (!state || state->params.codec != ZC_CODEC_GRADIVEQ || state->count != count))
        return state ? ZC_ERR_MISMATCH : ZC_ERR_INVALID_ARG;
    if (cap < alen)
        return ZC_ERR_BUFFER_TOO_SMALL;

    ZC_CUDA_CHECK(cudaMemsetAsync(dstatus, 0, sizeof(*dstatus), st), "status reset");
    const uint8_t *a = (const uint8_t *)da, *b = (const uint8_t *)db;
    uint8_t *dst = (uint8_t *)ddst;
    if (params->codec == ZC_CODEC_GRADIVEQ)
        return zc_cuda_gradiveq_reduce(state, a, alen, b, blen, count, dst, dlen, dstatus, st);
    return zc_cuda_half_reduce(params->codec, a, alen, b, blen, count, dst, dlen, dstatus, st);
}

ZC_EXPORT const zc_cuda_codec_api_t *zc_cuda_codec_get_api(uint32_t version)
{
    static const zc_cuda_codec_api_t api = {
        ZC_CUDA_CODEC_API_VERSION, zc_cuda_device_count,     zc_cuda_codec_workspace_size,
        zc_cuda_codec_supported,   zc_cuda_state_create,     zc_cuda_state_destroy,
        zc_cuda_state_residual,    zc_cuda_state_load_basis, zc_cuda_codec_encoded_size,
        zc_cuda_codec_encode,      zc_cuda_codec_decode_add, zc_cuda_codec_reduce,
    };
    return version == ZC_CUDA_CODEC_API_VERSION ? &api : NULL;
}

} /* extern "C" */
