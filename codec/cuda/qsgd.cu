/*
 * QSGD with fixed coding on the GPU, byte-identical to codec/qsgd/qsgd.c.
 *
 * Encode is two kernels. scale_kernel: one warp per bucket finds the largest
 * magnitude (and, for the L2 scale, the sixteen lane sums in double in the
 * host's order, then the same 8-4-2-1 tree), and writes the bucket's scale.
 * pack_kernel: a block owns a run of elements that starts on a byte boundary
 * of the body (whole buckets when d <= kTile, else a kTile-value tile of one
 * bucket: kTile * b bits is whole bytes). It quantizes them into shared
 * memory, one Philox call per (64-value group, lane) exactly as
 * zc_qsgd_draw_group maps draws to values, then writes its bytes of the body,
 * each byte by one thread, gathering the b-bit codes that cover it. Every byte
 * of the payload is written by exactly one thread, so nothing needs atomics
 * and no memset comes first.
 *
 * Decode runs check_kernel (header, exact length, every scale word and every
 * code's magnitude) and then add_kernel, which adds nothing when the check
 * failed: the output is untouched by a bad payload.
 *
 * Float steps are the host's, one rounding each (__fmul_rn and friends are
 * never fused): r = min(|x| * inv, s), the draw compared with frac(r) * 2^32,
 * and on decode k * (scale / s), or k * scale / s in double where the host
 * does that (subnormal unit, scale near FLT_MAX).
 */
#include "codec/cuda/device.cuh"

#include <float.h>

namespace
{

constexpr uint32_t kTile = 2048; /* values a pack block owns at most: a multiple of 64 and 8 */
constexpr uint32_t kHeader = 8;  /* QSGD body header */
constexpr uint32_t kNanScale = 0x7fc00000u; /* the host's NAN */

/* Launch geometry and payload layout of one encode or decode, computed on the host. */
struct layout {
    uint64_t count, nb, full; /* values, buckets, whole buckets */
    uint64_t fb;              /* bytes of a whole bucket: 4 + ceil(d b / 8) */
    uint64_t total;           /* payload bytes, header included */
    uint64_t tasks;           /* block tasks */
    uint32_t d, s, b;
    uint32_t per_bucket; /* d > kTile: tiles per bucket; else 0 */
    uint32_t buckets;    /* d <= kTile: whole buckets per task */
};

layout make_layout(uint32_t d, uint32_t s, uint64_t count)
{
    layout l;
    l.count = count;
    l.d = d;
    l.s = s;
    l.b = 1 + (32 - (unsigned)__builtin_clz(s));
    l.full = count / d;
    l.nb = (count + d - 1) / d;
    l.fb = 4 + ((uint64_t)d * l.b + 7) / 8;
    const uint64_t tail = count % d;
    l.total =
        ZC_PAYLOAD_HEADER_BYTES + kHeader + l.full * l.fb + (tail ? 4 + (tail * l.b + 7) / 8 : 0);
    if (d > kTile) {
        l.per_bucket = (d + kTile - 1) / kTile;
        l.buckets = 0;
        l.tasks = l.nb * l.per_bucket;
    } else {
        l.per_bucket = 0;
        l.buckets = kTile / d;
        l.tasks = (l.nb + l.buckets - 1) / l.buckets;
    }
    return l;
}

/* Body offset of bucket j. */
__device__ __forceinline__ uint64_t bucket_offset(const layout &l, uint64_t j)
{
    return kHeader + j * l.fb;
}

__device__ __forceinline__ uint32_t bucket_len(const layout &l, uint64_t j)
{
    uint64_t first = j * l.d;
    return (uint32_t)(l.count - first < l.d ? l.count - first : l.d);
}

/* What one task owns: values [e0, e1), buckets [j0, j1), and within bucket j0 from value i0. */
struct task {
    uint64_t e0, e1, j0, j1;
    uint32_t i0;
    bool valid;
};

__device__ __forceinline__ task task_of(const layout &l, uint64_t t)
{
    task k;
    if (l.per_bucket) {
        k.j0 = t / l.per_bucket;
        k.j1 = k.j0 + 1;
        k.i0 = (uint32_t)(t % l.per_bucket) * kTile;
        uint32_t len = bucket_len(l, k.j0);
        k.valid = k.i0 < len; /* the tail bucket has fewer tiles */
        k.e0 = k.j0 * l.d + k.i0;
        k.e1 = k.j0 * l.d + (len - k.i0 < kTile ? len : k.i0 + kTile);
    } else {
        k.j0 = t * l.buckets;
        k.j1 = k.j0 + l.buckets < l.nb ? k.j0 + l.buckets : l.nb;
        k.i0 = 0;
        k.valid = true;
        k.e0 = k.j0 * l.d;
        k.e1 = k.j1 * l.d < l.count ? k.j1 * l.d : l.count;
    }
    return k;
}

/* Bucket (relative to j0) and position in it of the task's value e0 + local. */
__device__ __forceinline__ void locate(const layout &l, const task &k, uint32_t local, uint32_t *q,
                                       uint32_t *i)
{
    if (l.per_bucket) {
        *q = 0;
        *i = k.i0 + local;
    } else {
        *q = local / l.d;
        *i = local - *q * l.d;
    }
}

/* A bucket's quantization: how levels are drawn from its scale (bucket_quantize in qsgd.c). */
struct bucket_q {
    float scale, inv;
    int mode; /* 0: all levels 0 (zero or non-finite bucket); 1: |x| * inv; 2: |x / scale| * s */
};

__device__ __forceinline__ bucket_q bucket_setup(float scale, uint32_t s)
{
    bucket_q q = {scale, 0.0f, 0};
    if (__float_as_uint(scale) == kNanScale || scale == 0.0f)
        return q;
    q.inv = __fdiv_rn((float)s, scale);
    q.mode = isfinite(q.inv) ? 1 : 2;
    return q;
}

/* The b-bit sign-magnitude code of x (sign in bit b - 1), drawing u. */
__device__ __forceinline__ uint32_t quantize(float x, const bucket_q &q, uint32_t s, uint32_t sign,
                                             uint32_t u)
{
    if (q.mode == 0)
        return 0;
    const float smax = (float)s;
    float r;
    if (q.mode == 1)
        r = fminf(__fmul_rn(fabsf(x), q.inv), smax);
    else
        r = fminf(__fmul_rn(fabsf(__fdiv_rn(x, q.scale)), smax), smax);
    uint32_t k = (uint32_t)r;
    /* frac(r) has at most 24 significant bits: times 2^32 it is exact and below 2^32 */
    uint32_t t = (uint32_t)__fmul_rn(__fsub_rn(r, (float)k), 4294967296.0f);
    k += u < t;
    return signbit(x) && k ? k | sign : k;
}

/* ---------------------------------------------------------------- encode */

__global__ void scale_kernel(layout l, zc_dtype_t dtype, const void *src, int l2, float *scales)
{
    const unsigned lane = threadIdx.x & 31;
    const uint64_t warps = (uint64_t)gridDim.x * (blockDim.x / 32);

    for (uint64_t j = ((uint64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32; j < l.nb;
         j += warps) {
        const uint64_t first = j * l.d;
        const uint32_t len = bucket_len(l, j);
        uint32_t m = 0;
        for (uint32_t i = lane; i < len; i += 32) {
            uint32_t a = __float_as_uint(zc_dev_load(dtype, src, first + i)) & 0x7fffffffu;
            m = a > m ? a : m;
        }
        m = __reduce_max_sync(0xffffffffu, m);
        float scale;
        if (m >= 0x7f800000u) {
            scale = __uint_as_float(kNanScale);
        } else if (l2) {
            /* lane sums p[i & 15] in the host's order, then p[j] += p[j + w] for w = 8, 4, 2, 1 */
            double p = 0;
            if (lane < 16)
                for (uint32_t i = lane; i < len; i += 16) {
                    double v = zc_dev_load(dtype, src, first + i);
                    p = __dadd_rn(p, __dmul_rn(v, v));
                }
            for (int w = 8; w > 0; w >>= 1)
                p = __dadd_rn(p, __shfl_down_sync(0xffffffffu, p, w));
            double norm = __dsqrt_rn(p);
            scale = norm > FLT_MAX ? FLT_MAX : __double2float_rn(norm);
        } else {
            scale = __uint_as_float(m);
        }
        if (lane == 0)
            scales[j] = scale;
    }
}

struct encode_args {
    layout l;
    zc_dtype_t dtype;
    const void *src;
    const float *scales;
    uint8_t *dst;
    uint64_t *dlen;
    uint32_t key0, key1, counter, rank, stream;
    uint8_t scale_kind;
};

__global__ void __launch_bounds__(ZC_CUDA_THREADS) pack_kernel(encode_args a)
{
    __shared__ uint32_t codes[kTile];
    __shared__ float sh_scale[kTile];
    __shared__ float sh_inv[kTile];
    __shared__ uint8_t sh_mode[kTile];
    const layout &l = a.l;
    const uint32_t sign = 1u << (l.b - 1);
    uint8_t *body = a.dst + ZC_PAYLOAD_HEADER_BYTES;

    if (blockIdx.x == 0 && threadIdx.x == 0) {
        zc_dev_header_write(a.dst, ZC_CODEC_QSGD, l.count);
        zc_dev_st32(body, l.d);
        body[4] = (uint8_t)l.s;
        body[5] = (uint8_t)(l.s >> 8);
        body[6] = ZC_QSGD_CODING_FIXED;
        body[7] = a.scale_kind;
        *a.dlen = l.total;
    }
    for (uint64_t t = blockIdx.x; t < l.tasks; t += gridDim.x) {
        const task k = task_of(l, t);
        if (!k.valid)
            continue; /* uniform across the block */
        const uint32_t nq = (uint32_t)(k.j1 - k.j0);
        for (uint32_t q = threadIdx.x; q < nq; q += blockDim.x) {
            bucket_q bq = bucket_setup(a.scales[k.j0 + q], l.s);
            sh_scale[q] = bq.scale;
            sh_inv[q] = bq.inv;
            sh_mode[q] = (uint8_t)bq.mode;
        }
        __syncthreads();

        /* one Philox call per (group, lane): words w = 0..3 are values group * 64 + w * 16 + lane
         */
        const uint64_t g0 = k.e0 >> 6, groups = ((k.e1 - 1) >> 6) - g0 + 1;
        const uint32_t key[2] = {a.key0, a.key1};
        for (uint64_t x = threadIdx.x; x < groups * 16; x += blockDim.x) {
            const uint64_t g = g0 + x / 16;
            const uint32_t lane = (uint32_t)(x % 16);
            const uint32_t ctr[4] = {(uint32_t)(g * 16) + lane, a.counter, a.rank, a.stream};
            uint32_t u[4];
            zc_philox4x32_10(ctr, key, u);
            for (int w = 0; w < 4; w++) {
                const uint64_t e = g * 64 + (uint64_t)w * 16 + lane;
                if (e < k.e0 || e >= k.e1)
                    continue;
                const uint32_t local = (uint32_t)(e - k.e0);
                uint32_t q, i;
                locate(l, k, local, &q, &i);
                const bucket_q bq = {sh_scale[q], sh_inv[q], sh_mode[q]};
                codes[local] = quantize(zc_dev_load(a.dtype, a.src, e), bq, l.s, sign, u[w]);
            }
        }
        __syncthreads();

        /* the task's bytes of the body: [q0, q1) */
        const uint64_t base = bucket_offset(l, k.j0);
        const uint32_t last_len = bucket_len(l, k.j1 - 1);
        uint64_t q0, q1;
        if (l.per_bucket) {
            q0 = k.i0 == 0 ? base : base + 4 + (uint64_t)k.i0 * l.b / 8;
            const uint32_t i1 = (uint32_t)(k.e1 - k.j0 * l.d);
            q1 =
                base + 4 + (i1 == last_len ? ((uint64_t)i1 * l.b + 7) / 8 : (uint64_t)i1 * l.b / 8);
        } else {
            q0 = base;
            q1 = bucket_offset(l, k.j1 - 1) + 4 + ((uint64_t)last_len * l.b + 7) / 8;
        }
        for (uint64_t qb = q0 + threadIdx.x; qb < q1; qb += blockDim.x) {
            /* bucket relative to j0: a task's bytes and a bucket's size fit 32 bits */
            const uint32_t qi = l.per_bucket ? 0 : (uint32_t)(qb - base) / (uint32_t)l.fb;
            const uint64_t j = k.j0 + qi;
            const uint32_t r = (uint32_t)(qb - bucket_offset(l, j));
            const uint32_t len = bucket_len(l, j);
            uint8_t byte;
            if (r < 4) {
                /* scale word: the f32 scale, its sign bit the coding (0: fixed) */
                byte = (uint8_t)((__float_as_uint(sh_scale[qi]) & 0x7fffffffu) >> (8 * r));
            } else {
                const uint32_t bit = (r - 4) * 8;
                uint32_t i = bit / l.b, off = bit - i * l.b, got = 0, v = 0;
                while (got < 8) {
                    uint32_t c = 0;
                    if (i < len) {
                        uint32_t local = l.per_bucket ? i - k.i0 : qi * l.d + i;
                        c = codes[local];
                    }
                    v |= got == 0 ? c >> off : c << got;
                    got += got == 0 ? l.b - off : l.b;
                    i++;
                }
                byte = (uint8_t)v;
            }
            body[qb] = byte;
        }
        __syncthreads(); /* the shared arrays are refilled by the next task */
    }
}

/* ---------------------------------------------------------------- decode */

struct decode_args {
    layout l;
    const uint8_t *src;
    size_t len;
    float *dst;
    float alpha;
    int32_t *status;
};

/* The header checks of qsgd_decode_add, against the params the decoder was launched for. */
__device__ zc_status_t check_header(const decode_args &a)
{
    zc_status_t st = zc_dev_header_check(a.src, a.len, ZC_CODEC_QSGD, a.l.count);
    if (st != ZC_OK)
        return st;
    if (a.len - ZC_PAYLOAD_HEADER_BYTES < kHeader)
        return ZC_ERR_CORRUPT;
    const uint8_t *body = a.src + ZC_PAYLOAD_HEADER_BYTES;
    const uint32_t d = zc_dev_ld32(body), s = (uint32_t)body[4] | (uint32_t)body[5] << 8;
    if (d < 1 || d > (1u << 24) || s < 1 || body[6] > ZC_QSGD_CODING_AUTO ||
        body[7] > ZC_QSGD_SCALE_L2 || a.l.count > (UINT64_C(1) << 40))
        return ZC_ERR_CORRUPT;
    if (d != a.l.d || s != a.l.s)
        return ZC_ERR_MISMATCH;
    if (body[6] != ZC_QSGD_CODING_FIXED)
        return ZC_ERR_UNSUPPORTED;
    return a.len == a.l.total ? ZC_OK : ZC_ERR_CORRUPT;
}

/* The b-bit code of value i of bucket j (the payload's length is checked). */
__device__ __forceinline__ uint32_t code_at(const layout &l, const uint8_t *body, uint64_t j,
                                            uint32_t i)
{
    const uint64_t bit = (bucket_offset(l, j) + 4) * 8 + (uint64_t)i * l.b;
    const uint8_t *p = body + bit / 8;
    const uint32_t shift = (uint32_t)(bit % 8), bytes = (shift + l.b + 7) / 8;
    uint32_t v = 0;
    for (uint32_t k = 0; k < bytes; k++)
        v |= (uint32_t)p[k] << (8 * k);
    return (v >> shift) & ((1u << l.b) - 1);
}

__global__ void check_kernel(decode_args a)
{
    const layout &l = a.l;
    zc_status_t st = check_header(a);
    if (st != ZC_OK) {
        if (blockIdx.x == 0 && threadIdx.x == 0)
            zc_dev_fail(a.status, st);
        return;
    }
    const uint8_t *body = a.src + ZC_PAYLOAD_HEADER_BYTES;
    const uint32_t mag = (1u << (l.b - 1)) - 1;
    for (uint64_t t = blockIdx.x; t < l.tasks; t += gridDim.x) {
        const task k = task_of(l, t);
        if (!k.valid)
            continue;
        for (uint64_t e = k.e0 + threadIdx.x; e < k.e1; e += blockDim.x) {
            uint32_t q, i;
            locate(l, k, (uint32_t)(e - k.e0), &q, &i);
            const uint64_t j = k.j0 + q;
            const uint32_t word = zc_dev_ld32(body + bucket_offset(l, j));
            const uint32_t sbits = word & 0x7fffffffu;
            /* every bucket fixed-coded; an infinite scale is never written */
            bool bad = (word & 0x80000000u) || sbits == 0x7f800000u;
            if (sbits <= 0x7f800000u) /* a NaN bucket's codes are not read */
                bad |= (code_at(l, body, j, i) & mag) > l.s;
            if (bad)
                zc_dev_fail(a.status, ZC_ERR_CORRUPT);
        }
    }
}

__global__ void add_kernel(decode_args a)
{
    const layout &l = a.l;
    if (zc_dev_failed(a.status))
        return; /* the check found damage: add nothing */
    const uint8_t *body = a.src + ZC_PAYLOAD_HEADER_BYTES;
    const uint32_t sign = 1u << (l.b - 1);
    for (uint64_t t = blockIdx.x; t < l.tasks; t += gridDim.x) {
        const task k = task_of(l, t);
        if (!k.valid)
            continue;
        for (uint64_t e = k.e0 + threadIdx.x; e < k.e1; e += blockDim.x) {
            uint32_t q, i;
            locate(l, k, (uint32_t)(e - k.e0), &q, &i);
            const uint64_t j = k.j0 + q;
            const float raw =
                __uint_as_float(zc_dev_ld32(body + bucket_offset(l, j)) & 0x7fffffffu);
            if (isnan(raw)) {
                a.dst[e] = zc_dev_add(a.dst[e], raw); /* a non-finite bucket: NaN everywhere */
                continue;
            }
            /* level_scale() of qsgd.c: alpha flips signs exactly */
            float unit = __fdiv_rn(raw, (float)l.s);
            const bool exact = (raw > 0 && unit < FLT_MIN) || raw > 0x1p127f;
            unit = __fmul_rn(unit, a.alpha);
            const float scale = __fmul_rn(raw, a.alpha);
            const uint32_t code = code_at(l, body, j, i), kk = code & (sign - 1);
            float v = exact ? __double2float_rn(
                                  __ddiv_rn(__dmul_rn((double)kk, (double)scale), (double)l.s))
                            : __fmul_rn((float)kk, unit);
            a.dst[e] = zc_dev_add(a.dst[e], code & sign ? -v : v);
        }
    }
}

} // namespace

size_t zc_cuda_qsgd_workspace(const zc_codec_params_t *params, uint64_t count)
{
    zc_cuda_ws_t ws = {NULL, 0};
    zc_cuda_ws_take(&ws, (size_t)((count + params->qsgd.bucket - 1) / params->qsgd.bucket) * 4);
    return ws.used;
}

zc_status_t zc_cuda_qsgd_encode(const zc_codec_params_t *params, const zc_codec_rng_t *rng,
                                zc_dtype_t dtype, const void *dsrc, uint64_t count, uint8_t *ddst,
                                uint64_t *dlen, zc_cuda_ws_t *ws, cudaStream_t stream)
{
    const layout l = make_layout(params->qsgd.bucket, params->qsgd.levels, count);
    float *scales = (float *)zc_cuda_ws_take(ws, (size_t)l.nb * 4);

    if (l.nb > 0) {
        scale_kernel<<<zc_cuda_blocks(l.nb, ZC_CUDA_THREADS / 32), ZC_CUDA_THREADS, 0, stream>>>(
            l, dtype, dsrc, params->qsgd.scale == ZC_QSGD_SCALE_L2, scales);
        ZC_CHECK(zc_cuda_launched("qsgd scale kernel"));
    }
    encode_args a;
    a.l = l;
    a.dtype = dtype;
    a.src = dsrc;
    a.scales = scales;
    a.dst = ddst;
    a.dlen = dlen;
    a.key0 = (uint32_t)rng->seed;
    a.key1 = (uint32_t)(rng->seed >> 32);
    a.counter = rng->counter;
    a.rank = rng->rank;
    a.stream = rng->stream;
    a.scale_kind = (uint8_t)params->qsgd.scale;
    /* with no values there is one task-free block: it writes the headers */
    pack_kernel<<<zc_cuda_blocks(l.tasks, 1), ZC_CUDA_THREADS, 0, stream>>>(a);
    return zc_cuda_launched("qsgd pack kernel");
}

zc_status_t zc_cuda_qsgd_decode_add(const zc_codec_params_t *params, const uint8_t *dsrc,
                                    size_t len, float *ddst, uint64_t count, float alpha,
                                    int32_t *dstatus, cudaStream_t stream)
{
    decode_args a;
    a.l = make_layout(params->qsgd.bucket, params->qsgd.levels, count);
    a.src = dsrc;
    a.len = len;
    a.dst = ddst;
    a.alpha = alpha;
    a.status = dstatus;
    const unsigned blocks = zc_cuda_blocks(a.l.tasks, 1);
    if (dstatus) {
        check_kernel<<<blocks, ZC_CUDA_THREADS, 0, stream>>>(a);
        ZC_CHECK(zc_cuda_launched("qsgd check kernel"));
    }
    add_kernel<<<blocks, ZC_CUDA_THREADS, 0, stream>>>(a);
    return zc_cuda_launched("qsgd add kernel");
}
