/*
 * The CUDA codecs (codec/cuda, libzipccl-cuda.so) against the host codecs:
 * for the same params, rng, dtype and input the device payload must be the
 * host's byte for byte (GradiVeQ's projected coefficients: within the
 * dot-product error bound, docs/cuda.md), the device decoder must add the same
 * floats, and every payload the host decoder rejects the device decoder must
 * reject with the same status, leaving its output untouched.
 *
 * Suite 'gpu': without a CUDA device the program prints one line and exits 77,
 * which meson counts as skipped.
 */
#include "codec/codec.h"
#include "codec/cuda/cuda_codec.h"
#include "codec/gradiveq/gradiveq.h"
#include "common/bitio.h"
#include "common/half.h"
#include "tests/unit/codec/codec_test.h"

#include <criterion/criterion.h>
#include <cuda_runtime.h>

#include <float.h>
#include <stdio.h>

#define CU(call)                                                                                   \
    do {                                                                                           \
        cudaError_t cu_err_ = (call);                                                              \
        cr_assert_eq(cu_err_, cudaSuccess, "%s: %s", #call, cudaGetErrorString(cu_err_));          \
    } while (0)

static void *dalloc(size_t n)
{
    void *p = NULL;
    CU(cudaMalloc(&p, n ? n : 1));
    return p;
}

static void *to_dev(const void *src, size_t n)
{
    void *p = dalloc(n);
    if (n)
        CU(cudaMemcpy(p, src, n, cudaMemcpyHostToDevice));
    return p;
}

static void to_host(void *dst, const void *src, size_t n)
{
    CU(cudaDeviceSynchronize());
    if (n)
        CU(cudaMemcpy(dst, src, n, cudaMemcpyDeviceToHost));
}

/* Device buffers of one codec call. */
typedef struct gpu_bufs {
    uint8_t *payload;
    size_t cap;
    uint64_t *dlen;
    int32_t *dstatus;
    void *ws;
    size_t ws_size;
} gpu_bufs_t;

static gpu_bufs_t dev_new(const zc_codec_params_t *p, uint64_t n)
{
    gpu_bufs_t d;
    d.cap = zc_codec_bound(p, n);
    cr_assert_gt(d.cap, 0);
    d.payload = dalloc(d.cap);
    d.dlen = dalloc(8);
    d.dstatus = dalloc(4);
    d.ws_size = zc_cuda_codec_workspace_size(p, n);
    d.ws = d.ws_size ? dalloc(d.ws_size) : NULL;
    return d;
}

static void dev_free(gpu_bufs_t *d)
{
    cudaFree(d->payload);
    cudaFree(d->dlen);
    cudaFree(d->dstatus);
    cudaFree(d->ws);
}

/* Index of the first differing byte, or -1. */
static long first_diff(const uint8_t *a, const uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return (long)i;
    return -1;
}

/* Same bits, or both NaN (NaN payloads follow x86 rules on the device; see device.cuh). */
static void assert_same_floats(const float *want, const float *got, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        if (isnan(want[i]) && isnan(got[i]))
            continue;
        cr_assert_eq(zc_f32_bits(want[i]), zc_f32_bits(got[i]),
                     "%s: value %zu: host %a (0x%08x), device %a (0x%08x)", what, i, want[i],
                     zc_f32_bits(want[i]), got[i], zc_f32_bits(got[i]));
    }
}

/*
 * Encodes @p src (@p n values of @p dtype) @p steps times on both sides, the
 * rng counter advancing, and asserts identical payloads and (with error
 * feedback) identical residuals after every step.
 */
static void same_encode(const zc_codec_params_t *p, zc_dtype_t dtype, const void *src, uint64_t n,
                        int steps, uint64_t seed)
{
    const size_t bytes = (size_t)n * zc_dtype_size(dtype);
    const int stateful = zc_codec_needs_state(p);
    zc_codec_state_t *hs = stateful ? state_new(p, n) : NULL;
    zc_cuda_state_t *ds = NULL;
    if (stateful)
        cr_assert_eq(zc_cuda_state_create(p, n, 0, &ds), ZC_OK);
    gpu_bufs_t d = dev_new(p, n);
    void *dsrc = to_dev(src, bytes);
    uint8_t *hp = xmalloc(d.cap), *gp = xmalloc(d.cap);

    for (int step = 0; step < steps; step++) {
        zc_codec_rng_t rng = test_codec_rng(seed, 3, (uint32_t)step);
        size_t hlen = 0;
        uint64_t glen = 0;
        cr_assert_eq(zc_codec_encode(p, hs, &rng, dtype, src, n, hp, d.cap, &hlen), ZC_OK);
        zc_status_t st = zc_cuda_codec_encode(p, ds, &rng, dtype, dsrc, n, d.payload, d.cap, d.dlen,
                                              d.ws, d.ws_size, 0);
        cr_assert_eq(st, ZC_OK, "device encode: %s", zc_status_string(st));
        to_host(&glen, d.dlen, 8);
        cr_assert_eq(glen, hlen, "%s n=%llu dtype=%d step %d: device %llu bytes, host %zu",
                     zc_codec_name(p->codec), (unsigned long long)n, dtype, step,
                     (unsigned long long)glen, hlen);
        to_host(gp, d.payload, hlen);
        long at = first_diff(hp, gp, hlen);
        cr_assert_eq(at, -1, "%s n=%llu dtype=%d step %d: byte %ld of %zu: host %02x device %02x",
                     zc_codec_name(p->codec), (unsigned long long)n, dtype, step, at, hlen,
                     at >= 0 ? hp[at] : 0, at >= 0 ? gp[at] : 0);
        if (hs && hs->residual) {
            float *r = xmalloc((size_t)n * 4);
            to_host(r, zc_cuda_state_residual(ds), (size_t)n * 4);
            assert_same_floats(hs->residual, r, (size_t)n, "residual");
            free(r);
        }
    }
    free(hp);
    free(gp);
    cudaFree(dsrc);
    dev_free(&d);
    zc_cuda_state_destroy(ds);
    zc_codec_state_destroy(hs);
}

/* Decodes @p payload on the device onto a copy of @p init into @p out; the device's status. */
static zc_status_t device_decode(const zc_codec_params_t *p, zc_cuda_state_t *ds,
                                 const uint8_t *payload, size_t len, uint64_t n, const float *init,
                                 float *out)
{
    gpu_bufs_t d = dev_new(p, n);
    uint8_t *dpay = to_dev(payload, len); /* exactly len bytes */
    float *ddst = to_dev(init, (size_t)n * 4);
    int32_t gst = 1;
    cr_assert_eq(zc_cuda_codec_decode_add(p, ds, dpay, len, ddst, n, d.dstatus, d.ws, d.ws_size, 0),
                 ZC_OK);
    to_host(&gst, d.dstatus, 4);
    to_host(out, ddst, (size_t)n * 4);
    cudaFree(dpay);
    cudaFree(ddst);
    dev_free(&d);
    return (zc_status_t)gst;
}

/*
 * Decodes @p payload on both sides onto @p init: the same status; on success
 * the same floats, on failure a device output equal to @p init.
 */
static void same_decode(const zc_codec_params_t *p, zc_codec_state_t *hs, zc_cuda_state_t *ds,
                        const uint8_t *payload, size_t len, uint64_t n, const float *init,
                        zc_status_t want)
{
    float *h = xmalloc((size_t)n * 4), *g = xmalloc((size_t)n * 4);
    memcpy(h, init, (size_t)n * 4);
    zc_status_t hst = zc_codec_decode_add(hs, payload, len, h, n);
    cr_assert_eq(hst, want, "host decode: %s, want %s", zc_status_string(hst),
                 zc_status_string(want));

    zc_status_t gst = device_decode(p, ds, payload, len, n, init, g);
    cr_assert_eq(gst, want, "device decode: %s, want %s", zc_status_string(gst),
                 zc_status_string(want));
    if (want == ZC_OK)
        assert_same_floats(h, g, (size_t)n, "decode");
    else
        cr_assert(same_bits_f32(init, g, (size_t)n), "a rejected payload changed the output");
    free(h);
    free(g);
}

/* A rejected payload on the device: the given status and the output untouched. */
static void device_rejects(const zc_codec_params_t *p, zc_cuda_state_t *ds, const uint8_t *payload,
                           size_t len, uint64_t n, zc_status_t want)
{
    float *init = xmalloc((size_t)n * 4 + 4), *g = xmalloc((size_t)n * 4 + 4);
    fill_gauss(init, (size_t)n, 99, 1.0);
    zc_status_t gst = device_decode(p, ds, payload, len, n, init, g);
    cr_assert_eq(gst, want, "device decode: %s, want %s", zc_status_string(gst),
                 zc_status_string(want));
    cr_assert(same_bits_f32(init, g, (size_t)n), "a rejected payload changed the output");
    free(init);
    free(g);
}

/* n values of @p dtype: Gaussian, with zeros, and (when @p special) NaN, Inf, overflow, subnormals.
 */
static void *make_input(zc_dtype_t dtype, size_t n, uint64_t seed, int special)
{
    float *f = xmalloc(n * 4 + 4);
    fill_gauss(f, n, seed, 3.0);
    for (size_t i = 0; i < n; i += 17)
        f[i] = 0.0f;
    if (special && n > 40) {
        const uint32_t bits[] = {0x7fc00000u, 0xffa01234u, 0x7f800001u, 0x7f800000u,
                                 0xff800000u, 0x477ff000u, 0x477fefffu, 0x00000001u,
                                 0x80000000u, 0x387fffffu, 0x7f7fffffu, 0x33800000u};
        for (size_t k = 0; k < ZC_ARRAY_SIZE(bits); k++)
            f[(k * 7 + 3) % n] = zc_f32_from_bits(bits[k]);
    }
    if (dtype == ZC_DTYPE_F32)
        return f;
    uint16_t *h = xmalloc(n * 2 + 2);
    for (size_t i = 0; i < n; i++)
        h[i] = dtype == ZC_DTYPE_F16 ? zc_f32_to_f16(f[i]) : zc_f32_to_bf16(f[i]);
    free(f);
    return h;
}

static const uint64_t odd_sizes[] = {0, 1, 3, 4, 5, 63, 64, 65, 1001, 4097, 65537};
static const zc_dtype_t dtypes[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16};

/* ------------------------------------------------------------ casts */

Test(cuda_casts, payloads_identical)
{
    const zc_codec_id_t codecs[] = {ZC_CODEC_NONE, ZC_CODEC_FP16, ZC_CODEC_BF16};
    for (size_t c = 0; c < ZC_ARRAY_SIZE(codecs); c++)
        for (size_t t = 0; t < ZC_ARRAY_SIZE(dtypes); t++)
            for (size_t s = 0; s < ZC_ARRAY_SIZE(odd_sizes); s++) {
                const zc_codec_params_t p = params_of(codecs[c]);
                void *x = make_input(dtypes[t], odd_sizes[s], 10 + s, 1);
                same_encode(&p, dtypes[t], x, odd_sizes[s], 1, 1);
                free(x);
            }
}

Test(cuda_casts, decode_and_reduce_identical)
{
    const zc_codec_id_t codecs[] = {ZC_CODEC_NONE, ZC_CODEC_FP16, ZC_CODEC_BF16};
    const uint64_t n = 4099;
    for (size_t c = 0; c < ZC_ARRAY_SIZE(codecs); c++) {
        const zc_codec_params_t p = params_of(codecs[c]);
        float *x = make_input(ZC_DTYPE_F32, n, 5, 1), *y = make_input(ZC_DTYPE_F32, n, 6, 1);
        y[100] = INFINITY;
        x[100] = -INFINITY; /* inf - inf: x86's default NaN on both sides */
        payload_t a = encode_ok(&p, NULL, ZC_DTYPE_F32, x, n),
                  b = encode_ok(&p, NULL, ZC_DTYPE_F32, y, n);
        float *init = make_input(ZC_DTYPE_F32, n, 7, 1);
        same_decode(&p, NULL, NULL, a.buf, a.len, n, init, ZC_OK);

        uint8_t *hr = xmalloc(a.len), *gr = xmalloc(a.len);
        size_t hlen = 0;
        uint64_t glen = 0;
        cr_assert_eq(zc_codec_reduce(NULL, a.buf, a.len, b.buf, b.len, hr, a.len, &hlen), ZC_OK);
        gpu_bufs_t d = dev_new(&p, n);
        uint8_t *da = to_dev(a.buf, a.len), *db = to_dev(b.buf, b.len);
        int32_t gst = 1;
        /* in place into b, as a ring does */
        cr_assert_eq(zc_cuda_codec_reduce(&p, NULL, n, da, a.len, db, b.len, db, b.len, d.dlen,
                                          d.dstatus, 0),
                     ZC_OK);
        to_host(&gst, d.dstatus, 4);
        to_host(&glen, d.dlen, 8);
        to_host(gr, db, a.len);
        cr_assert_eq(gst, ZC_OK);
        cr_assert_eq(glen, hlen);
        cr_assert_eq(first_diff(hr, gr, hlen), -1, "%s reduce differs", zc_codec_name(p.codec));
        cudaFree(da);
        cudaFree(db);
        dev_free(&d);
        free(hr);
        free(gr);
        free(init);
        free(x);
        free(y);
        payload_free(&a);
        payload_free(&b);
    }
}

Test(cuda_casts, corrupt_rejected)
{
    const uint64_t n = 1000;
    const zc_codec_params_t p = params_of(ZC_CODEC_FP16);
    float *x = make_input(ZC_DTYPE_F32, n, 8, 0), *init = make_input(ZC_DTYPE_F32, n, 9, 0);
    payload_t a = encode_ok(&p, NULL, ZC_DTYPE_F32, x, n);
    uint8_t *bad = xmalloc(a.len + 1);

    same_decode(&p, NULL, NULL, a.buf, a.len - 1, n, init, ZC_ERR_CORRUPT); /* truncated */
    memcpy(bad, a.buf, a.len);
    bad[a.len] = 0;
    same_decode(&p, NULL, NULL, bad, a.len + 1, n, init, ZC_ERR_CORRUPT); /* oversized */
    bad[0] = 'X';
    same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT); /* magic */
    memcpy(bad, a.buf, a.len);
    bad[5] = 1;
    same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT); /* reserved */
    memcpy(bad, a.buf, a.len);
    bad[2] = 2;
    same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_MISMATCH); /* version */
    memcpy(bad, a.buf, a.len);
    bad[8] ^= 1;
    same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_MISMATCH); /* count */
    same_decode(&p, NULL, NULL, a.buf, 10, n, init, ZC_ERR_CORRUPT);   /* shorter than a header */
    free(bad);
    free(x);
    free(init);
    payload_free(&a);
}

/* ------------------------------------------------------------- qsgd */

Test(cuda_qsgd, payloads_identical)
{
    const uint32_t levels[] = {1, 5, 7, 127, 65535};
    const uint32_t buckets[] = {1, 7, 64, 512, 2049, 5000};
    const uint64_t sizes[] = {0, 1, 63, 1000, 4099, 20011};
    for (size_t l = 0; l < ZC_ARRAY_SIZE(levels); l++)
        for (size_t b = 0; b < ZC_ARRAY_SIZE(buckets); b++)
            for (int scale = 0; scale <= 1; scale++)
                for (size_t s = 0; s < ZC_ARRAY_SIZE(sizes); s++) {
                    const zc_dtype_t dt = dtypes[(l + b + s) % 3];
                    zc_codec_params_t p = qsgd_params(levels[l], buckets[b], (zc_qsgd_scale_t)scale,
                                                      ZC_QSGD_CODING_FIXED);
                    void *x = make_input(dt, sizes[s], 100 + s, 0);
                    same_encode(&p, dt, x, sizes[s], 2, 1000 + l);
                    free(x);
                }
}

Test(cuda_qsgd, error_feedback_identical)
{
    zc_codec_params_t p = qsgd_params(7, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
    p.qsgd.error_feedback = 1;
    for (size_t t = 0; t < ZC_ARRAY_SIZE(dtypes); t++) {
        void *x = make_input(dtypes[t], 10007, 31, 0);
        same_encode(&p, dtypes[t], x, 10007, 4, 77);
        free(x);
    }
}

/* Non-finite buckets, scales whose unit is subnormal or whose s / scale overflows, near FLT_MAX. */
Test(cuda_qsgd, extreme_values_identical)
{
    const uint64_t n = 4096;
    float *x = make_input(ZC_DTYPE_F32, n, 41, 1);
    for (size_t i = 1024; i < 1536; i++)
        x[i] *= 1e-42f; /* subnormal bucket: scale / s underflows, s / scale overflows */
    for (size_t i = 2048; i < 2560; i++)
        x[i] = (i & 1 ? -1 : 1) * FLT_MAX * (float)(i % 7 + 1) / 8;
    for (int scale = 0; scale <= 1; scale++) {
        zc_codec_params_t p = qsgd_params(65535, 512, (zc_qsgd_scale_t)scale, ZC_QSGD_CODING_FIXED);
        same_encode(&p, ZC_DTYPE_F32, x, n, 2, 5);
        zc_codec_rng_t rng = test_codec_rng(5, 0, 0);
        payload_t a = encode_ok(&p, &rng, ZC_DTYPE_F32, x, n);
        float *init = make_input(ZC_DTYPE_F32, n, 42, 0);
        same_decode(&p, NULL, NULL, a.buf, a.len, n, init, ZC_OK);
        float *g = xmalloc(n * 4);
        /* a NaN or Inf in a bucket decodes to NaN everywhere in it */
        memcpy(g, init, n * 4);
        cr_assert_eq(zc_codec_decode_add(NULL, a.buf, a.len, g, n), ZC_OK);
        cr_assert(isnan(g[3]) && isnan(g[500]));
        free(g);
        free(init);
        payload_free(&a);
    }
    free(x);
}

Test(cuda_qsgd, decode_identical)
{
    const uint32_t buckets[] = {1, 100, 512, 3000};
    for (size_t b = 0; b < ZC_ARRAY_SIZE(buckets); b++)
        for (int bits = 2; bits <= 17; bits += 5) {
            const uint64_t n = 12345;
            zc_codec_params_t p = qsgd_params(zc_qsgd_levels_for_bits((unsigned)bits), buckets[b],
                                              ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
            float *x = make_input(ZC_DTYPE_F32, n, 50 + b, 1),
                  *init = make_input(ZC_DTYPE_F32, n, 3, 0);
            zc_codec_rng_t rng = test_codec_rng(9, 1, 2);
            payload_t a = encode_ok(&p, &rng, ZC_DTYPE_F32, x, n);
            same_decode(&p, NULL, NULL, a.buf, a.len, n, init, ZC_OK);
            payload_free(&a);
            free(x);
            free(init);
        }
}

Test(cuda_qsgd, corrupt_rejected)
{
    const uint64_t n = 3000;
    /* s = 5 in 4-bit codes: magnitudes 6 and 7 are representable and invalid */
    zc_codec_params_t p = qsgd_params(5, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
    float *x = make_input(ZC_DTYPE_F32, n, 61, 0), *init = make_input(ZC_DTYPE_F32, n, 62, 0);
    payload_t a = encode_ok(&p, NULL, ZC_DTYPE_F32, x, n);
    uint8_t *bad = xmalloc(a.len + 1);
    const size_t first_codes = ZC_PAYLOAD_HEADER_BYTES + 8 + 4;

    same_decode(&p, NULL, NULL, a.buf, a.len - 1, n, init, ZC_ERR_CORRUPT);
    memcpy(bad, a.buf, a.len);
    bad[a.len] = 0;
    same_decode(&p, NULL, NULL, bad, a.len + 1, n, init, ZC_ERR_CORRUPT);
    memcpy(bad, a.buf, a.len);
    bad[first_codes + 600] = 0x77; /* two codes of magnitude 7 > s, in the second bucket's... */
    bad[a.len - 1] |= 0x07;        /* ...and the last bucket */
    same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);
    memcpy(bad, a.buf, a.len);
    bad[ZC_PAYLOAD_HEADER_BYTES + 8 + 3] |= 0x80; /* an Elias flag in a fixed payload */
    same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);
    memcpy(bad, a.buf, a.len);
    zc_store_le32(bad + ZC_PAYLOAD_HEADER_BYTES + 8, 0x7f800000u); /* an infinite scale */
    same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);
    memcpy(bad, a.buf, a.len);
    zc_store_le32(bad + ZC_PAYLOAD_HEADER_BYTES, 0); /* bucket 0 */
    same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);
    memcpy(bad, a.buf, a.len);
    bad[ZC_PAYLOAD_HEADER_BYTES + 6] = 3; /* unknown coding */
    same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);

    /* well formed, but not what the device decoder was sized for, or not supported there */
    memcpy(bad, a.buf, a.len);
    zc_store_le32(bad + ZC_PAYLOAD_HEADER_BYTES, 256);
    device_rejects(&p, NULL, bad, a.len, n, ZC_ERR_MISMATCH);
    zc_codec_params_t pe = p;
    pe.qsgd.coding = ZC_QSGD_CODING_ELIAS;
    payload_t e = encode_ok(&pe, NULL, ZC_DTYPE_F32, x, n);
    device_rejects(&p, NULL, e.buf, e.len, n, ZC_ERR_UNSUPPORTED);
    payload_free(&e);
    free(bad);
    free(x);
    free(init);
    payload_free(&a);
}

/* ------------------------------------------------------------- topk */

typedef struct topk_case {
    double density;
    uint64_t n;
} topk_case_t;

Test(cuda_topk, payloads_identical)
{
    /* exact selection (small n), the sampled path (n >= 4 s), k = n, dense and sparse */
    const topk_case_t cases[] = {{0.01, 1},       {0.01, 7},      {0.01, 1000},
                                 {0.3, 4097},     {1.0, 1001},    {0.1, 200003},
                                 {0.01, 1000003}, {0.001, 65537}, {0.5, 100000}};
    for (size_t c = 0; c < ZC_ARRAY_SIZE(cases); c++)
        for (int f16 = 0; f16 <= 1; f16++) {
            zc_codec_params_t p = params_of(ZC_CODEC_TOPK);
            p.topk.density = cases[c].density;
            p.topk.values = f16 ? ZC_TOPK_VALUES_F16 : ZC_TOPK_VALUES_F32;
            const zc_dtype_t dt = dtypes[(c + f16) % 3];
            void *x = make_input(dt, cases[c].n, 200 + c, 0);
            same_encode(&p, dt, x, cases[c].n, 3, 0);
            free(x);
        }
}

/* Ties at the k-th key, mostly zeros, and non-finite values (fewer and more than k). */
Test(cuda_topk, hard_inputs_identical)
{
    const uint64_t n = 300007;
    float *x = xmalloc(n * 4);
    zc_codec_params_t p = params_of(ZC_CODEC_TOPK);
    p.topk.density = 0.1;

    for (uint64_t i = 0; i < n; i++)
        x[i] = (float)(i % 5) - 2.0f; /* five values: the sample's threshold misses, ties */
    same_encode(&p, ZC_DTYPE_F32, x, n, 2, 0);
    memset(x, 0, n * 4);
    for (uint64_t i = 0; i < n; i += 1000)
        x[i] = (float)i; /* fewer nonzeros than k */
    same_encode(&p, ZC_DTYPE_F32, x, n, 2, 0);
    fill_gauss(x, n, 71, 1.0);
    for (uint64_t i = 0; i < 100; i++)
        x[i * 997] = i & 1 ? NAN : -INFINITY;
    same_encode(&p, ZC_DTYPE_F32, x, n, 2, 0);
    p.topk.values = ZC_TOPK_VALUES_F16;
    for (uint64_t i = 0; i < n; i += 3)
        x[i] = FLT_MAX * (i & 2 ? -1.0f : 1.0f); /* e = 113: the round-down exception */
    same_encode(&p, ZC_DTYPE_F32, x, n, 2, 0);
    p.topk.density = 0.0001; /* more non-finite values than k */
    for (uint64_t i = 0; i < n; i += 7)
        x[i] = NAN;
    same_encode(&p, ZC_DTYPE_F32, x, n, 2, 0);
    free(x);
}

/* Encodes with a fresh state and returns the payload (host). */
static payload_t topk_payload(const zc_codec_params_t *p, const float *x, uint64_t n)
{
    zc_codec_state_t *st = state_new(p, n);
    size_t cap = zc_codec_bound(p, n), len = 0;
    uint8_t *buf = xmalloc(cap);
    cr_assert_eq(zc_codec_encode(p, st, NULL, ZC_DTYPE_F32, x, n, buf, cap, &len), ZC_OK);
    zc_codec_state_destroy(st);
    payload_t out = {exact_copy(buf, len), len};
    free(buf);
    return out;
}

Test(cuda_topk, decode_identical)
{
    const double densities[] = {0.001, 0.01, 0.3, 1.0};
    const uint64_t n = 150001;
    for (size_t d = 0; d < ZC_ARRAY_SIZE(densities); d++)
        for (int f16 = 0; f16 <= 1; f16++) {
            zc_codec_params_t p = params_of(ZC_CODEC_TOPK);
            p.topk.density = densities[d];
            p.topk.values = f16 ? ZC_TOPK_VALUES_F16 : ZC_TOPK_VALUES_F32;
            float *x = make_input(ZC_DTYPE_F32, n, 300 + d, 1),
                  *init = make_input(ZC_DTYPE_F32, n, 4, 0);
            payload_t a = topk_payload(&p, x, n);
            same_decode(&p, NULL, NULL, a.buf, a.len, n, init, ZC_OK);
            payload_free(&a);
            free(x);
            free(init);
        }
}

/* The host's verdict on @p payload, and the same from the device (see same_decode). */
static void same_verdict(const zc_codec_params_t *p, const uint8_t *payload, size_t len, uint64_t n,
                         const float *init)
{
    float *h = xmalloc((size_t)n * 4);
    memcpy(h, init, (size_t)n * 4);
    const zc_status_t want = zc_codec_decode_add(NULL, payload, len, h, n);
    free(h);
    same_decode(p, NULL, NULL, payload, len, n, init, want);
}

Test(cuda_topk, corrupt_rejected)
{
    const uint64_t n = 20000;
    float *init = make_input(ZC_DTYPE_F32, n, 402, 0);
    for (int rice = 0; rice <= 1; rice++) {
        zc_codec_params_t p = params_of(ZC_CODEC_TOPK);
        float *y = make_input(ZC_DTYPE_F32, n, 401, 0);
        if (rice) {
            p.topk.density = 0.3; /* i.i.d. positions, mean gap 2.3: Rice with b = 0 or 1 */
        } else {
            /* 19 zero gaps and one of 19481: varint takes 22 bytes, Rice at least 30 */
            p.topk.density = 0.001;
            for (uint64_t i = 0; i < n; i++)
                y[i] *= 1e-3f;
            for (uint64_t i = 0; i < 19; i++)
                y[i] = 100.0f;
            y[19500] = 100.0f;
        }
        payload_t a = topk_payload(&p, y, n);
        const uint8_t *body = a.buf + ZC_PAYLOAD_HEADER_BYTES;
        cr_assert_eq(body[9], rice, "the test wants a %s payload", rice ? "Rice" : "varint");
        const uint64_t c = zc_load_le64(body);
        const size_t sec = ZC_PAYLOAD_HEADER_BYTES + 12 + c * 4;
        uint8_t *bad = xmalloc(a.len + 1);

        same_decode(&p, NULL, NULL, a.buf, a.len, n, init, ZC_OK);
        same_decode(&p, NULL, NULL, a.buf, a.len - 1, n, init, ZC_ERR_CORRUPT);
        memcpy(bad, a.buf, a.len);
        bad[a.len] = 0;
        same_decode(&p, NULL, NULL, bad, a.len + 1, n, init, ZC_ERR_CORRUPT);
        memcpy(bad, a.buf, a.len);
        bad[ZC_PAYLOAD_HEADER_BYTES + 8] = 2; /* value format */
        same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);
        memcpy(bad, a.buf, a.len);
        bad[ZC_PAYLOAD_HEADER_BYTES + 10] = rice ? 41 : 1; /* Rice parameter */
        same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);
        memcpy(bad, a.buf, a.len);
        bad[ZC_PAYLOAD_HEADER_BYTES + 11] = 1; /* an exponent with f32 values */
        same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);
        memcpy(bad, a.buf, a.len);
        zc_store_le64(bad + ZC_PAYLOAD_HEADER_BYTES, n + 1); /* more kept than values */
        same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);
        memcpy(bad, a.buf, a.len);
        zc_store_le64(bad + ZC_PAYLOAD_HEADER_BYTES, c + 1); /* one more: a shorter section */
        same_verdict(&p, bad, a.len, n, init);
        if (!rice) {
            memcpy(bad, a.buf, a.len);
            bad[a.len - 1] |= 0x80; /* the last gap runs off the end */
            same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);
            bad[a.len] = 0; /* ... or ends in a zero byte: longer than its shortest form */
            same_decode(&p, NULL, NULL, bad, a.len + 1, n, init, ZC_ERR_CORRUPT);
            memcpy(bad, a.buf, a.len);
            bad[a.len - 1] = 0x7f; /* the long gap moved past the last element */
            bad[a.len - 2] |= 0x80;
            same_decode(&p, NULL, NULL, bad, a.len, n, init, ZC_ERR_CORRUPT);
        }
        /* every single bit of the position section flipped: the host's verdict each time */
        for (size_t at = sec; at < a.len && at < sec + 64; at++)
            for (int bit = 0; bit < 8; bit++) {
                memcpy(bad, a.buf, a.len);
                bad[at] ^= (uint8_t)(1u << bit);
                same_verdict(&p, bad, a.len, n, init);
            }
        free(bad);
        free(y);
        payload_free(&a);
    }
    free(init);
}

/* ---------------------------------------------------------- gradiveq */

/* Dot-product error bound gamma_m = m u / (1 - m u), u = 2^-24 (Higham, Accuracy and
 * Stability, 3.1). */
static double gamma_n(double m)
{
    return m * 0x1p-24 / (1 - m * 0x1p-24);
}

/* Encodes @p n f32 at @p dx on the device into @p out: a payload of the host's @p hlen bytes. */
static void device_encode_as_host(const zc_codec_params_t *p, zc_cuda_state_t *ds,
                                  const gpu_bufs_t *d, const float *dx, uint64_t n, uint8_t *out,
                                  size_t hlen)
{
    uint64_t glen = 0;

    cr_assert_eq(zc_cuda_codec_encode(p, ds, NULL, ZC_DTYPE_F32, dx, n, d->payload, d->cap, d->dlen,
                                      d->ws, d->ws_size, 0),
                 ZC_OK);
    to_host(&glen, d->dlen, 8);
    cr_assert_eq(glen, hlen);
    to_host(out, d->payload, hlen);
}

Test(cuda_gradiveq, raw_and_projected)
{
    const uint64_t n = 64 * 1000 + 37; /* a tail of 37 raw values */
    zc_codec_params_t p = params_of(ZC_CODEC_GRADIVEQ);
    p.gradiveq.dim = 8;
    p.gradiveq.ranks = 2;
    float *x = make_input(ZC_DTYPE_F32, n, 501, 0);
    zc_codec_state_t *hs = state_new(&p, n);
    zc_cuda_state_t *ds = NULL;
    cr_assert_eq(zc_cuda_state_create(&p, n, 0, &ds), ZC_OK);

    /* version 0: raw values, byte for byte */
    gpu_bufs_t d = dev_new(&p, n);
    float *dx = to_dev(x, n * 4);
    size_t hlen = 0;
    uint8_t *hp = xmalloc(d.cap), *gp = xmalloc(d.cap);
    cr_assert_eq(zc_codec_encode(&p, hs, NULL, ZC_DTYPE_F32, x, n, hp, d.cap, &hlen), ZC_OK);
    device_encode_as_host(&p, ds, &d, dx, n, gp, hlen);
    cr_assert_eq(first_diff(hp, gp, hlen), -1);

    /* a basis learned on the host from x, uploaded */
    cr_assert_eq(zc_codec_state_update(hs, x, n), ZC_OK);
    cr_assert_eq(zc_cuda_state_load_basis(ds, hs, 0), ZC_OK);
    cr_assert_eq(zc_codec_encode(&p, hs, NULL, ZC_DTYPE_F32, x, n, hp, d.cap, &hlen), ZC_OK);
    cr_assert_eq(zc_cuda_codec_encoded_size(&p, ds, n), hlen);
    device_encode_as_host(&p, ds, &d, dx, n, gp, hlen);
    const size_t hdr = ZC_PAYLOAD_HEADER_BYTES + 24;
    cr_assert_eq(first_diff(hp, gp, hdr), -1, "headers differ");
    zc_gradiveq_view_t v;
    cr_assert_eq(zc_gradiveq_view(hs, &v), ZC_OK);
    const uint32_t k = v.slice, dim = v.dim;
    const uint64_t slices = n / k;
    for (uint64_t r = 0; r < slices; r++)
        for (uint32_t j = 0; j < dim; j++) {
            double mag = fabs(v.offset[j]);
            for (uint32_t i = 0; i < k; i++)
                mag += fabs((double)x[r * k + i] * v.basis[i * dim + j]);
            float hc, gc;
            memcpy(&hc, hp + hdr + 4 * (r * dim + j), 4);
            memcpy(&gc, gp + hdr + 4 * (r * dim + j), 4);
            cr_assert_leq(fabs((double)hc - gc), 2 * gamma_n(k + 1) * mag,
                          "coefficient %u of slice %llu: host %a device %a", j,
                          (unsigned long long)r, hc, gc);
        }
    const size_t tail_at = hdr + slices * dim * 4;
    cr_assert_eq(first_diff(hp + tail_at, gp + tail_at, hlen - tail_at), -1, "tails differ");

    /* decoding the host's payload: within the bound of its d + 1 products and one addition */
    float *init = make_input(ZC_DTYPE_F32, n, 502, 0), *h = xmalloc(n * 4), *g = xmalloc(n * 4);
    memcpy(h, init, n * 4);
    cr_assert_eq(zc_codec_decode_add(hs, hp, hlen, h, n), ZC_OK);
    uint8_t *dp = to_dev(hp, hlen);
    float *dd = to_dev(init, n * 4);
    int32_t gst = 1;
    cr_assert_eq(zc_cuda_codec_decode_add(&p, ds, dp, hlen, dd, n, d.dstatus, d.ws, d.ws_size, 0),
                 ZC_OK);
    to_host(&gst, d.dstatus, 4);
    to_host(g, dd, n * 4);
    cr_assert_eq(gst, ZC_OK);
    for (uint64_t r = 0; r < slices; r++)
        for (uint32_t i = 0; i < k; i++) {
            double mag = fabs(init[r * k + i]) + fabs(0.5 * v.mean[i]);
            for (uint32_t j = 0; j < dim; j++) {
                float c;
                memcpy(&c, hp + hdr + 4 * (r * dim + j), 4);
                mag += fabs((double)c * v.basis[i * dim + j]);
            }
            cr_assert_leq(fabs((double)h[r * k + i] - g[r * k + i]), 2 * gamma_n(dim + 2) * mag,
                          "value %llu", (unsigned long long)(r * k + i));
        }
    assert_same_floats(h + slices * k, g + slices * k, n - slices * k, "tail");

    /* reduce: element-wise f32 sums, byte for byte, and m = 2 */
    uint8_t *hr = xmalloc(hlen), *gr = xmalloc(hlen);
    size_t rlen = 0;
    cr_assert_eq(zc_codec_reduce(hs, hp, hlen, hp, hlen, hr, hlen, &rlen), ZC_OK);
    uint8_t *dq = to_dev(hp, hlen);
    cr_assert_eq(
        zc_cuda_codec_reduce(&p, ds, n, dp, hlen, dq, hlen, dq, hlen, d.dlen, d.dstatus, 0), ZC_OK);
    to_host(&gst, d.dstatus, 4);
    to_host(gr, dq, hlen);
    cr_assert_eq(gst, ZC_OK);
    cr_assert_eq(first_diff(hr, gr, rlen), -1, "reduce differs");
    /* a third contribution exceeds N = 2 */
    cr_assert_eq(
        zc_cuda_codec_reduce(&p, ds, n, dp, hlen, dq, hlen, dq, hlen, d.dlen, d.dstatus, 0), ZC_OK);
    to_host(&gst, d.dstatus, 4);
    cr_assert_eq(gst, ZC_ERR_MISMATCH);

    /* a payload of another basis (tag) is a mismatch, and adds nothing */
    hp[ZC_PAYLOAD_HEADER_BYTES + 12] ^= 1;
    device_rejects(&p, ds, hp, hlen, n, ZC_ERR_MISMATCH);
    hp[ZC_PAYLOAD_HEADER_BYTES + 12] ^= 1;
    device_rejects(&p, ds, hp, hlen - 4, n, ZC_ERR_CORRUPT);

    cudaFree(dq);
    free(hr);
    free(gr);
    cudaFree(dp);
    cudaFree(dd);
    free(init);
    free(h);
    free(g);
    free(hp);
    free(gp);
    cudaFree(dx);
    dev_free(&d);
    zc_cuda_state_destroy(ds);
    zc_codec_state_destroy(hs);
    free(x);
}

/* --------------------------------------------------------------- api */

Test(cuda_api, bad_arguments)
{
    zc_codec_params_t p = params_of(ZC_CODEC_QSGD);
    gpu_bufs_t d = dev_new(&p, 100);
    float *dx = dalloc(400);
    int n = -1;

    cr_assert_eq(zc_cuda_device_count(&n), ZC_OK);
    cr_assert_geq(n, 1);
    cr_assert_eq(zc_cuda_device_count(NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_cuda_codec_encode(NULL, NULL, NULL, ZC_DTYPE_F32, dx, 100, d.payload, d.cap,
                                      d.dlen, d.ws, d.ws_size, 0),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_cuda_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, dx, 100, d.payload, d.cap - 1,
                                      d.dlen, d.ws, d.ws_size, 0),
                 ZC_ERR_BUFFER_TOO_SMALL);
    cr_assert_eq(zc_cuda_codec_encode(&p, NULL, NULL, ZC_DTYPE_I32, dx, 100, d.payload, d.cap,
                                      d.dlen, d.ws, d.ws_size, 0),
                 ZC_ERR_INVALID_ARG);
    if (d.ws_size)
        cr_assert_eq(zc_cuda_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, dx, 100, d.payload, d.cap,
                                          d.dlen, d.ws, d.ws_size - 1, 0),
                     ZC_ERR_BUFFER_TOO_SMALL);
    p.qsgd.coding = ZC_QSGD_CODING_AUTO;
    cr_assert_eq(zc_cuda_codec_supported(&p), ZC_ERR_UNSUPPORTED);
    p.qsgd.levels = 0;
    cr_assert_eq(zc_cuda_codec_supported(&p), ZC_ERR_INVALID_CONFIG);

    zc_codec_params_t t = params_of(ZC_CODEC_TOPK);
    cr_assert_gt(zc_cuda_codec_workspace_size(&t, 1000), 0);
    /* top-k needs its state; a state of another count is a mismatch */
    zc_cuda_state_t *ds = NULL;
    cr_assert_eq(zc_cuda_codec_encode(&t, NULL, NULL, ZC_DTYPE_F32, dx, 100, d.payload,
                                      zc_codec_bound(&t, 100), d.dlen, d.ws, d.ws_size, 0),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_cuda_state_create(&t, 99, 0, &ds), ZC_OK);
    void *tws = dalloc(zc_cuda_codec_workspace_size(&t, 100));
    cr_assert_eq(zc_cuda_codec_encode(&t, ds, NULL, ZC_DTYPE_F32, dx, 100, d.payload,
                                      zc_codec_bound(&t, 100), d.dlen, tws,
                                      zc_cuda_codec_workspace_size(&t, 100), 0),
                 ZC_ERR_MISMATCH);
    zc_codec_params_t q = params_of(ZC_CODEC_QSGD);
    cr_assert_eq(zc_cuda_codec_reduce(&q, NULL, 100, d.payload, 10, d.payload, 10, d.payload, 10,
                                      d.dlen, d.dstatus, 0),
                 ZC_ERR_UNSUPPORTED);
    const zc_cuda_codec_api_t *api = zc_cuda_codec_get_api(ZC_CUDA_CODEC_API_VERSION);
    cr_assert_not_null(api);
    cr_assert_eq(api->encode, zc_cuda_codec_encode);
    cr_assert_null(zc_cuda_codec_get_api(ZC_CUDA_CODEC_API_VERSION + 1));
    cudaFree(tws);
    zc_cuda_state_destroy(ds);
    zc_cuda_state_destroy(NULL);
    cudaFree(dx);
    dev_free(&d);
}

/*
 * Without a device the whole program is skipped (exit 77: meson's "skipped"),
 * with one line saying so; otherwise Criterion runs every test above.
 */
int main(int argc, char *argv[])
{
    struct criterion_test_set *tests = criterion_initialize();
    int devices = 0;
    int rc = 0;

    zc_cuda_device_count(&devices);
    if (devices == 0) {
        printf("no CUDA device: skipping %zu gpu tests\n", tests->tests);
        criterion_finalize(tests);
        return 77;
    }
    if (criterion_handle_args(argc, argv, true))
        rc = !criterion_run_all_tests(tests);
    criterion_finalize(tests);
    return rc;
}
