/*
 * GradiVeQ on the GPU: the basis is learned on the host (codec/gradiveq/basis.c,
 * LAPACK) and uploaded; projection and reconstruction are cuBLAS sgemm calls
 * on blocks of rows, as the host does with its BLAS:
 *
 *   encode:  C (rows x d) = X (rows x K) U (K x d), onto rows preset to -U^T mu / N
 *   decode:  T (rows x K) = alpha [C | m/N] (rows x (d+1)) [U | mu]^T, then dst += T
 *
 * cuBLAS is column-major: a row-major matrix is its transpose there, so both
 * products are written transposed (C^T = U^T X^T, T^T = [U | mu] [C | m/N]^T).
 * The math mode is CUBLAS_PEDANTIC_MATH: plain f32, never TF32.
 *
 * Headers, raw values (version 0) and tails are byte-identical to the host's;
 * the coefficients are not: cuBLAS sums the K products in another order than
 * the host BLAS, so they agree to the dot-product error bound (docs/cuda.md).
 *
 * The validating decoder checks the header on the device and multiplies into
 * workspace (beta = 0); a last kernel adds into dst only when the header was
 * right, so a bad payload leaves dst untouched. The error-feedback subtraction
 * of the encoder's own payload multiplies straight into the residual.
 */
#include "codec/cuda/device.cuh"

extern "C" {
#include "codec/gradiveq/gradiveq.h"
}

#include <cublas_v2.h>

#include <stdlib.h>
#include <string.h>

namespace
{

constexpr uint32_t kHdr = 24; /* body header */
/* Values per sgemm block: large enough to fill the GPU, small enough to bound the workspace. */
constexpr uint64_t kChunkValues = UINT64_C(1) << 22;

/* The one place where a cublasStatus_t becomes a zc_status_t. */
zc_status_t blas_status(cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return ZC_OK;
    ZC_ERROR("cuda: %s failed: %s", what, cublasGetStatusName(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED ? ZC_ERR_NO_MEMORY : ZC_ERR_INTERNAL;
}

uint64_t chunk_rows(uint32_t k)
{
    return kChunkValues / k;
}

/* Body values after the header, as body_values() of gradiveq.c. */
uint64_t body_values(uint32_t k, uint32_t d, uint32_t version, uint64_t count)
{
    return version == 0 ? count : count / k * d + count % k;
}

struct hdr {
    uint32_t slice, dim, version, tag, contributions, ranks;
};

__device__ __forceinline__ void hdr_store(uint8_t *body, const hdr &h)
{
    zc_dev_st32(body, h.slice);
    zc_dev_st32(body + 4, h.dim);
    zc_dev_st32(body + 8, h.version);
    zc_dev_st32(body + 12, h.tag);
    zc_dev_st32(body + 16, h.contributions);
    zc_dev_st32(body + 20, h.ranks);
}

/* header_parse() of gradiveq.c on the device, against the state's basis @p want. */
__device__ zc_status_t hdr_parse(const uint8_t *src, size_t len, uint64_t count, const hdr &want,
                                 hdr *h_p)
{
    zc_status_t st = zc_dev_header_check(src, len, ZC_CODEC_GRADIVEQ, count);
    if (st != ZC_OK)
        return st;
    const uint8_t *body = src + ZC_PAYLOAD_HEADER_BYTES;
    const size_t blen = len - ZC_PAYLOAD_HEADER_BYTES;
    if (blen < kHdr || count > ZC_GRADIVEQ_MAX_COUNT)
        return ZC_ERR_CORRUPT;
    hdr h;
    h.slice = zc_dev_ld32(body);
    h.dim = zc_dev_ld32(body + 4);
    h.version = zc_dev_ld32(body + 8);
    h.tag = zc_dev_ld32(body + 12);
    h.contributions = zc_dev_ld32(body + 16);
    h.ranks = zc_dev_ld32(body + 20);
    if (h.slice < ZC_GRADIVEQ_MIN_SLICE || h.slice > ZC_GRADIVEQ_MAX_SLICE || h.dim > h.slice ||
        (h.version == 0) != (h.dim == 0) || (h.version == 0) != (h.tag == 0) ||
        h.contributions == 0 || h.ranks == 0)
        return ZC_ERR_CORRUPT;
    if (h.slice != want.slice || h.ranks != want.ranks || h.version != want.version ||
        h.dim != want.dim || h.tag != want.tag || h.contributions > h.ranks)
        return ZC_ERR_MISMATCH;
    const uint64_t values = h.version == 0 ? count : count / h.slice * h.dim + count % h.slice;
    if (blen - kHdr != values * 4)
        return ZC_ERR_CORRUPT;
    *h_p = h;
    return ZC_OK;
}

/* Both headers and the length. */
__global__ void encode_head_kernel(hdr h, uint8_t *dst, uint64_t count, uint64_t len,
                                   uint64_t *dlen)
{
    if (threadIdx.x == 0) {
        zc_dev_header_write(dst, ZC_CODEC_GRADIVEQ, count);
        hdr_store(dst + ZC_PAYLOAD_HEADER_BYTES, h);
        *dlen = len;
    }
}

/* out[i] (f32, any alignment: byte stores) = values first..first+n of src, widened. */
__global__ void raw_kernel(zc_dtype_t dtype, const void *src, uint64_t first, uint64_t n,
                           uint8_t *out)
{
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        zc_dev_st32(out + 4 * i, __float_as_uint(zc_dev_load(dtype, src, first + i)));
}

/* dst[i] = src[first + i] widened to f32 (aligned workspace). */
__global__ void widen_kernel(zc_dtype_t dtype, const void *src, uint64_t first, uint64_t n,
                             float *dst)
{
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        dst[i] = zc_dev_load(dtype, src, first + i);
}

/* Every row of c (rows x d) starts at -offset. */
__global__ void preset_kernel(const float *offset, uint32_t d, uint64_t rows, float *c)
{
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * d;
         i += (uint64_t)gridDim.x * blockDim.x)
        c[i] = -offset[i % d];
}

/*
 * Coefficients @p c (rows x d, bytes) with one more column m/N: the lifted
 * block. The share is the checked header's (@p share_dev) or, for the
 * encoder's own payload, @p share.
 */
__global__ void lift_kernel(const uint8_t *c, uint32_t d, uint64_t rows, float share,
                            const float *share_dev, const int32_t *status, float *lifted)
{
    const bool bad = zc_dev_failed(status);
    if (share_dev && !bad)
        share = *share_dev;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < rows * (d + 1);
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t r = i / (d + 1), j = i % (d + 1);
        /* a rejected payload multiplies zeros: nothing of it reaches even the workspace */
        lifted[i] = bad ? 0.0f : j == d ? share : __uint_as_float(zc_dev_ld32(c + 4 * (r * d + j)));
    }
}

/* dst += t, when the payload checked out. */
__global__ void add_block_kernel(const float *t, uint64_t n, float *dst, const int32_t *status)
{
    if (zc_dev_failed(status))
        return;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        dst[i] = zc_dev_add(dst[i], t[i]);
}

/* dst += alpha * raw f32 values (version 0 bodies and tails), when the payload checked out. */
__global__ void add_raw_kernel(const uint8_t *src, uint64_t n, float alpha, float *dst,
                               const int32_t *status)
{
    if (zc_dev_failed(status))
        return;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x)
        dst[i] = zc_dev_add(dst[i], zc_dev_mul(alpha, __uint_as_float(zc_dev_ld32(src + 4 * i))));
}

__global__ void check_kernel(const uint8_t *src, size_t len, uint64_t count, hdr want,
                             int32_t *status, float *share)
{
    hdr h;
    zc_status_t st = hdr_parse(src, len, count, want, &h);
    if (st != ZC_OK)
        zc_dev_fail(status, st);
    else
        *share = __double2float_rn((double)h.contributions / h.ranks);
}

/* Both payloads checked, and their contributions together at most N (gradiveq_reduce). */
__global__ void reduce_check_kernel(const uint8_t *a, size_t alen, const uint8_t *b, size_t blen,
                                    uint64_t count, hdr want, int32_t *status)
{
    hdr ha, hb;
    zc_status_t st = hdr_parse(a, alen, count, want, &ha);
    if (st == ZC_OK)
        st = hdr_parse(b, blen, count, want, &hb);
    if (st == ZC_OK && (uint64_t)ha.contributions + hb.contributions > ha.ranks)
        st = ZC_ERR_MISMATCH;
    if (st != ZC_OK)
        zc_dev_fail(status, st);
}

/*
 * Coefficients and tails add element-wise and the contributions add up. dst may
 * be a or b: every value is read before it is written by the same thread, and
 * only block 0's first thread reads and then rewrites the header (the check
 * ran in the kernel before, so no other block reads it).
 */
__global__ void reduce_kernel(const uint8_t *a, size_t alen, const uint8_t *b, uint8_t *dst,
                              uint64_t *dlen, const int32_t *status)
{
    if (zc_dev_failed(status))
        return;
    const uint64_t n = (alen - ZC_PAYLOAD_HEADER_BYTES - kHdr) / 4;
    const uint8_t *av = a + ZC_PAYLOAD_HEADER_BYTES + kHdr,
                  *bv = b + ZC_PAYLOAD_HEADER_BYTES + kHdr;
    uint8_t *out = dst + ZC_PAYLOAD_HEADER_BYTES + kHdr;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < n;
         i += (uint64_t)gridDim.x * blockDim.x) {
        float x = __uint_as_float(zc_dev_ld32(av + 4 * i));
        float y = __uint_as_float(zc_dev_ld32(bv + 4 * i));
        zc_dev_st32(out + 4 * i, __float_as_uint(zc_dev_add(x, y)));
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        const uint32_t m = zc_dev_ld32(a + ZC_PAYLOAD_HEADER_BYTES + 16) +
                           zc_dev_ld32(b + ZC_PAYLOAD_HEADER_BYTES + 16);
        uint8_t head[ZC_PAYLOAD_HEADER_BYTES + kHdr];
        for (uint32_t i = 0; i < sizeof(head); i++)
            head[i] = a[i];
        zc_dev_st32(head + ZC_PAYLOAD_HEADER_BYTES + 16, m);
        for (uint32_t i = 0; i < sizeof(head); i++)
            dst[i] = head[i];
        *dlen = alen;
    }
}

hdr state_hdr(const zc_cuda_state_t *s)
{
    hdr h;
    h.slice = s->params.gradiveq.slice;
    h.dim = s->dim;
    h.version = s->version;
    h.tag = s->tag;
    h.contributions = 1;
    h.ranks = s->params.gradiveq.ranks;
    return h;
}

bool aligned4(const void *p)
{
    return ((uintptr_t)p & 3) == 0;
}

} // namespace

size_t zc_cuda_gradiveq_len(const zc_cuda_state_t *state, uint64_t count)
{
    return ZC_PAYLOAD_HEADER_BYTES + kHdr +
           (size_t)body_values(state->params.gradiveq.slice, state->dim, state->version, count) * 4;
}

size_t zc_cuda_gradiveq_workspace(const zc_codec_params_t *params, uint64_t count)
{
    const uint64_t k = params->gradiveq.slice;
    const uint64_t rows = chunk_rows((uint32_t)k);
    zc_cuda_ws_t ws = {NULL, 0};
    /* encode: widened input and unaligned coefficients; decode: lifted block and product */
    zc_cuda_ws_take(&ws, (size_t)(rows * k * 4));
    zc_cuda_ws_take(&ws, (size_t)(rows * (k + 1) * 4));
    zc_cuda_ws_take(&ws, 8); /* share, as the decoder's check found it */
    (void)count;
    return ws.used;
}

zc_status_t zc_cuda_gradiveq_state_init(zc_cuda_state_t *s)
{
    const size_t k = s->params.gradiveq.slice;
    cublasHandle_t h;
    ZC_CHECK(blas_status(cublasCreate(&h), "cublasCreate"));
    s->cublas = h;
    ZC_CHECK(blas_status(cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH), "cublasSetMathMode"));
    /* room for any d <= K: a new basis never reallocates (cudaFree would synchronize) */
    ZC_CUDA_CHECK(cudaMalloc(&s->basis, k * k * 4), "cudaMalloc of the gradiveq basis");
    ZC_CUDA_CHECK(cudaMalloc(&s->offset, k * 4), "cudaMalloc of the gradiveq offset");
    ZC_CUDA_CHECK(cudaMalloc(&s->lifted, k * (k + 1) * 4), "cudaMalloc of the gradiveq basis");
    s->staging_floats = k * k + k + k * (k + 1);
    ZC_CUDA_CHECK(cudaMallocHost(&s->staging, s->staging_floats * 4), "cudaMallocHost");
    ZC_CUDA_CHECK(cudaEventCreateWithFlags(&s->staged, cudaEventDisableTiming), "cudaEventCreate");
    ZC_CUDA_CHECK(cudaEventRecord(s->staged, 0), "cudaEventRecord");
    return ZC_OK;
}

void zc_cuda_gradiveq_state_fini(zc_cuda_state_t *s)
{
    if (s->cublas)
        cublasDestroy((cublasHandle_t)s->cublas);
    cudaFree(s->basis);
    cudaFree(s->offset);
    cudaFree(s->lifted);
    cudaFreeHost(s->staging);
    if (s->staged)
        cudaEventDestroy(s->staged);
}

zc_status_t zc_cuda_gradiveq_load(zc_cuda_state_t *s, const zc_codec_state_t *host,
                                  cudaStream_t stream)
{
    const zc_gradiveq_state_t *g = (const zc_gradiveq_state_t *)host->priv;
    const size_t k = s->params.gradiveq.slice, d = g->dim;

    if (g->version == 0 || d == 0) {
        s->version = s->dim = s->tag = 0;
        return ZC_OK;
    }
    /* the previous upload must have left the staging buffer before it is overwritten */
    ZC_CUDA_CHECK(cudaEventSynchronize(s->staged), "cudaEventSynchronize");
    float *basis = s->staging, *offset = basis + k * d, *lifted = offset + d;
    memcpy(basis, g->basis, k * d * 4);
    memcpy(offset, g->offset, d * 4);
    memcpy(lifted, g->lifted_basis, k * (d + 1) * 4);
    ZC_CUDA_CHECK(cudaMemcpyAsync(s->basis, basis, k * d * 4, cudaMemcpyHostToDevice, stream),
                  "gradiveq basis upload");
    ZC_CUDA_CHECK(cudaMemcpyAsync(s->offset, offset, d * 4, cudaMemcpyHostToDevice, stream),
                  "gradiveq offset upload");
    ZC_CUDA_CHECK(
        cudaMemcpyAsync(s->lifted, lifted, k * (d + 1) * 4, cudaMemcpyHostToDevice, stream),
        "gradiveq basis upload");
    ZC_CUDA_CHECK(cudaEventRecord(s->staged, stream), "cudaEventRecord");
    s->dim = g->dim;
    s->version = g->version;
    s->tag = g->tag;
    return ZC_OK;
}

zc_status_t zc_cuda_gradiveq_encode(zc_cuda_state_t *s, zc_dtype_t dtype, const void *dsrc,
                                    uint64_t count, uint8_t *ddst, uint64_t *dlen, zc_cuda_ws_t *ws,
                                    cudaStream_t stream)
{
    const uint32_t k = s->params.gradiveq.slice, d = s->dim;
    const hdr h = state_hdr(s);
    uint8_t *coef = ddst + ZC_PAYLOAD_HEADER_BYTES + kHdr;
    const uint64_t rows_max = chunk_rows(k);
    float *xbuf = (float *)zc_cuda_ws_take(ws, (size_t)(rows_max * k * 4));
    float *cbuf = (float *)zc_cuda_ws_take(ws, (size_t)(rows_max * (k + 1) * 4));

    encode_head_kernel<<<1, 32, 0, stream>>>(h, ddst, count, zc_cuda_gradiveq_len(s, count), dlen);
    ZC_CHECK(zc_cuda_launched("gradiveq header kernel"));
    if (s->version == 0) {
        if (count)
            raw_kernel<<<zc_cuda_blocks(count, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
                dtype, dsrc, 0, count, coef);
        return zc_cuda_launched("gradiveq raw kernel");
    }
    cublasHandle_t blas = (cublasHandle_t)s->cublas;
    ZC_CHECK(blas_status(cublasSetStream(blas, stream), "cublasSetStream"));
    const uint64_t slices = count / k;
    const size_t esize = zc_dtype_size(dtype);
    const bool direct_in = dtype == ZC_DTYPE_F32 && aligned4(dsrc);
    const bool direct_out = aligned4(coef);
    const float one = 1.0f;
    for (uint64_t r0 = 0; r0 < slices; r0 += rows_max) {
        const uint64_t rows = slices - r0 < rows_max ? slices - r0 : rows_max;
        const float *x = (const float *)((const char *)dsrc + r0 * k * esize);
        float *c = direct_out ? (float *)(coef + r0 * d * 4) : cbuf;
        if (!direct_in) {
            widen_kernel<<<zc_cuda_blocks(rows * k, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
                dtype, dsrc, r0 * k, rows * k, xbuf);
            x = xbuf;
        }
        preset_kernel<<<zc_cuda_blocks(rows * d, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
            s->offset, d, rows, c);
        ZC_CHECK(zc_cuda_launched("gradiveq preset kernel"));
        ZC_CHECK(blas_status(cublasSgemm(blas, CUBLAS_OP_N, CUBLAS_OP_N, (int)d, (int)rows, (int)k,
                                         &one, s->basis, (int)d, x, (int)k, &one, c, (int)d),
                             "cublasSgemm (gradiveq projection)"));
        if (!direct_out)
            ZC_CUDA_CHECK(cudaMemcpyAsync(coef + r0 * d * 4, c, rows * d * 4,
                                          cudaMemcpyDeviceToDevice, stream),
                          "gradiveq coefficient copy");
    }
    const uint64_t tail = count % k;
    if (tail)
        raw_kernel<<<1, ZC_CUDA_THREADS, 0, stream>>>(dtype, dsrc, slices * k, tail,
                                                      coef + slices * d * 4);
    return zc_cuda_launched("gradiveq tail kernel");
}

zc_status_t zc_cuda_gradiveq_decode_add(zc_cuda_state_t *s, const uint8_t *dsrc, size_t len,
                                        float *ddst, uint64_t count, float alpha, int32_t *dstatus,
                                        zc_cuda_ws_t *ws, cudaStream_t stream)
{
    const uint32_t k = s->params.gradiveq.slice, d = s->dim;
    const uint64_t rows_max = chunk_rows(k);
    float *tbuf = (float *)zc_cuda_ws_take(ws, (size_t)(rows_max * k * 4));
    float *lbuf = (float *)zc_cuda_ws_take(ws, (size_t)(rows_max * (k + 1) * 4));
    float *share_dev = (float *)zc_cuda_ws_take(ws, 8);
    const uint8_t *coef = dsrc + ZC_PAYLOAD_HEADER_BYTES + kHdr;

    if (dstatus) {
        check_kernel<<<1, 1, 0, stream>>>(dsrc, len, count, state_hdr(s), dstatus, share_dev);
        ZC_CHECK(zc_cuda_launched("gradiveq check kernel"));
    }
    if (s->version == 0) {
        if (count)
            add_raw_kernel<<<zc_cuda_blocks(count, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
                coef, count, alpha, ddst, dstatus);
        return zc_cuda_launched("gradiveq raw add kernel");
    }
    cublasHandle_t blas = (cublasHandle_t)s->cublas;
    ZC_CHECK(blas_status(cublasSetStream(blas, stream), "cublasSetStream"));
    const uint64_t slices = count / k;
    /*
     * The share m / N comes from the payload; trusted payloads are the encoder's
     * own (m = 1). The validating path reads the share the check kernel found,
     * through the lift kernel, so the host never waits for it.
     */
    const float own_share = (float)(1.0 / s->params.gradiveq.ranks);
    const float zero = 0.0f, one = 1.0f;
    for (uint64_t r0 = 0; r0 < slices; r0 += rows_max) {
        const uint64_t rows = slices - r0 < rows_max ? slices - r0 : rows_max;
        lift_kernel<<<zc_cuda_blocks(rows * (d + 1), ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0,
                      stream>>>(coef + r0 * d * 4, d, rows, own_share, dstatus ? share_dev : NULL,
                                dstatus, lbuf);
        ZC_CHECK(zc_cuda_launched("gradiveq lift kernel"));
        if (dstatus) {
            ZC_CHECK(blas_status(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)k, (int)rows,
                                             (int)(d + 1), &alpha, s->lifted, (int)(d + 1), lbuf,
                                             (int)(d + 1), &zero, tbuf, (int)k),
                                 "cublasSgemm (gradiveq reconstruction)"));
            add_block_kernel<<<zc_cuda_blocks(rows * k, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0,
                               stream>>>(tbuf, rows * k, ddst + r0 * k, dstatus);
            ZC_CHECK(zc_cuda_launched("gradiveq add kernel"));
        } else {
            ZC_CHECK(blas_status(cublasSgemm(blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)k, (int)rows,
                                             (int)(d + 1), &alpha, s->lifted, (int)(d + 1), lbuf,
                                             (int)(d + 1), &one, ddst + r0 * k, (int)k),
                                 "cublasSgemm (gradiveq reconstruction)"));
        }
    }
    const uint64_t tail = count % k;
    if (tail)
        add_raw_kernel<<<1, ZC_CUDA_THREADS, 0, stream>>>(coef + slices * d * 4, tail, alpha,
                                                          ddst + slices * k, dstatus);
    return zc_cuda_launched("gradiveq tail add kernel");
}

zc_status_t zc_cuda_gradiveq_reduce(zc_cuda_state_t *s, const uint8_t *da, size_t alen,
                                    const uint8_t *db, size_t blen, uint64_t count, uint8_t *ddst,
                                    uint64_t *dlen, int32_t *dstatus, cudaStream_t stream)
{
    const uint64_t n =
        alen > ZC_PAYLOAD_HEADER_BYTES + kHdr ? (alen - ZC_PAYLOAD_HEADER_BYTES - kHdr) / 4 : 0;
    reduce_check_kernel<<<1, 1, 0, stream>>>(da, alen, db, blen, count, state_hdr(s), dstatus);
    reduce_kernel<<<zc_cuda_blocks(n, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
        da, alen, db, ddst, dlen, dstatus);
    return zc_cuda_launched("gradiveq reduce kernel");
}
