/*
 * Top-k on the GPU, byte-identical to codec/topk (select.c, gaps.c, topk.c).
 *
 * Selection keeps the host's algorithm, so the same positions come out:
 *  1. the strided sample of keys and its radix select (three digit passes:
 *     histogram kernels, then a one-thread pick) give the threshold, capped at
 *     the infinity's key;
 *  2. a counting pass over tiles, a scan of the tile counts, and the 10%
 *     tolerance test, all on the device;
 *  3. when the sample is not tried or misses: the exact k-th largest key by
 *     the same radix select over every value, ties at it broken by position;
 *  4. stream compaction by scan: every tile knows how many kept values and
 *     ties come before it, a block scan gives each value its slot.
 * Which path ran is decided on the device: the kernels of every path are
 * queued, and those of a path not taken return at once (a flag in the plan),
 * so the host never waits.
 *
 * Writing: one pass gathers the f16 exponent and the sizes of both position
 * codings (the three Rice candidates), one thread chooses as gaps.c does and
 * writes the headers, then values (with the error-feedback subtraction of the
 * residual fused) and positions, each gap's byte or bit offset from a scan of
 * the code lengths. Rice codes are OR-ed into a zeroed bit buffer and copied.
 *
 * Decoding checks the whole payload before adding anything. LEB128 gaps are
 * found from their terminating bytes (a scan of the bytes without bit 7).
 * Rice codes are decoded speculatively from the start of every 1024-bit
 * chunk; one thread then follows the true code boundaries from chunk to chunk
 * until they meet a speculative boundary (Rice codes resynchronize within a
 * few codes), and a last pass decodes each chunk from its true entry. A scan
 * of gap + 1 gives the positions, checked against the element count.
 */
#include "codec/cuda/device.cuh"

extern "C" {
#include "codec/topk/topk_int.h"
}

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

namespace
{

constexpr uint32_t kItems = 16;                      /* per thread, blocked */
constexpr uint32_t kTile = ZC_CUDA_THREADS * kItems; /* values per scan tile */
constexpr uint32_t kBins = 2048;                     /* radix digit bins */
constexpr uint32_t kHeader = 12;                     /* top-k body header */
constexpr uint32_t kChunkBits = 1024;                /* Rice decode chunk */
constexpr uint32_t kHistBlocks = 1024;               /* histogram grid */
constexpr uint64_t kNone = ~UINT64_C(0);

enum phase : uint32_t {
    PH_TRY_SAMPLED = 1, /* sampled threshold set: count and test it */
    PH_NEED_EXACT = 2,  /* exact selection needed: radix select over every value */
    PH_EXACT_COUNT = 3, /* exact predicate set: count */
    PH_FINAL = 4,       /* predicate and totals final: compact */
};

/* Everything the encode and decode kernels tell each other; one per call, in the workspace. */
struct plan {
    uint32_t phase;
    uint32_t radix_run;
    unsigned long long radix_k, radix_above;
    uint32_t radix_prefix;
    /* keep key > gt, and the first `ties` values with key == eq */
    uint32_t gt, eq;
    unsigned long long ties;
    unsigned long long total_gt, total_eq, c;
    /* encoding */
    uint32_t fmax; /* largest finite kept key */
    uint32_t cand[3];
    unsigned long long q[3], varint_bytes, rice_bytes;
    uint32_t rice, b;
    int32_t e;
    unsigned long long sec_off, total_bits; /* positions section (payload offset), bits */
    /* decoding */
    unsigned long long sec_start, sec_len, end_bit, codes;
    uint32_t coding, f16, ok;
    unsigned long long hist[kBins];
};

/* Host-side view of one call. */
struct shape {
    uint64_t n, k, s, ks, cmax, tol;
    uint64_t tiles, ctiles; /* scan tiles over the values and over the kept positions */
    uint32_t f16;
};

shape make_shape(const zc_codec_params_t *p, uint64_t n)
{
    shape h;
    h.n = n;
    h.k = zc_topk_target(n, p->topk.density);
    h.s = zc_topk_sample_size(n, p->topk.density);
    h.ks = h.s ? zc_topk_target(h.s, p->topk.density) : 0;
    h.cmax = zc_topk_max_kept(n, h.k);
    h.tol = h.k / ZC_TOPK_TOL_DIV;
    h.tiles = (n + kTile - 1) / kTile;
    h.ctiles = (h.cmax + kTile - 1) / kTile;
    h.f16 = p->topk.values == ZC_TOPK_VALUES_F16;
    return h;
}

__device__ __forceinline__ uint32_t key_of(float x)
{
    return __float_as_uint(x) & 0x7fffffffu;
}

/* Digit d (0, 1, 2) of a key: bits 21..30, 10..20, 0..9 (select.c). */
__device__ __forceinline__ uint32_t digit_shift(uint32_t d)
{
    return d == 0 ? 21 : d == 1 ? 10 : 0;
}

__device__ __forceinline__ uint32_t digit_mask(uint32_t d)
{
    return d == 1 ? 0x7ffu : 0x3ffu;
}

/* ------------------------------------------------------------ selection */

__global__ void init_kernel(plan *pl, uint32_t phase, uint64_t radix_k)
{
    pl->phase = phase;
    pl->radix_run = phase == PH_TRY_SAMPLED;
    pl->radix_k = radix_k;
    pl->radix_above = 0;
    pl->radix_prefix = 0;
}

/* keys[j] = key of x[stride / 2 + j * stride]: the host's strided sample. */
__global__ void sample_kernel(const float *x, uint64_t n, uint64_t s, uint32_t *keys)
{
    const uint64_t stride = n / s;
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < s;
         j += (uint64_t)gridDim.x * blockDim.x)
        keys[j] = key_of(x[stride / 2 + j * stride]);
}

/*
 * Histogram of digit @p d over the words of src[0..m) whose higher digits equal
 * the prefix found so far (all of them for d = 0): the keys select.c keeps.
 */
__global__ void hist_kernel(plan *pl, const uint32_t *src, uint64_t m, uint32_t d)
{
    __shared__ uint32_t h[kBins];
    if (!pl->radix_run)
        return;
    for (uint32_t v = threadIdx.x; v < kBins; v += blockDim.x)
        h[v] = 0;
    __syncthreads();
    const uint32_t shift = digit_shift(d), mask = digit_mask(d);
    const uint32_t high = d == 0 ? 31 : shift + (d == 1 ? 11 : 10); /* bits above this digit */
    const uint32_t want = pl->radix_prefix >> high;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < m;
         i += (uint64_t)gridDim.x * blockDim.x) {
        const uint32_t key = src[i] & 0x7fffffffu;
        if ((key >> high) == want)
            atomicAdd(&h[(key >> shift) & mask], 1u);
    }
    __syncthreads();
    for (uint32_t v = threadIdx.x; v < kBins; v += blockDim.x)
        if (h[v])
            atomicAdd(&pl->hist[v], (unsigned long long)h[v]);
}

/* hist_pick of select.c: the digit holding the k-th largest; clears the histogram. */
__global__ void pick_kernel(plan *pl, uint32_t d)
{
    if (!pl->radix_run)
        return;
    if (threadIdx.x == 0) {
        unsigned long long above = 0;
        uint32_t v = kBins - 1;
        for (;; v--) {
            if (above + pl->hist[v] >= pl->radix_k || v == 0)
                break;
            above += pl->hist[v];
        }
        pl->radix_k -= above;
        pl->radix_above += above;
        pl->radix_prefix |= v << digit_shift(d);
    }
    __syncthreads();
    for (uint32_t v = threadIdx.x; v < kBins; v += blockDim.x)
        pl->hist[v] = 0;
}

/* After the sample's select: the threshold, capped at infinity's key, or exact selection. */
__global__ void sampled_plan_kernel(plan *pl)
{
    uint32_t thr = pl->radix_prefix;
    if (thr > ZC_TOPK_INF_KEY)
        thr = ZC_TOPK_INF_KEY; /* every non-finite value is kept whenever the count allows it */
    pl->radix_run = 0;
    if (thr > 0) {
        pl->gt = thr - 1; /* key >= thr */
        pl->eq = 0;
        pl->ties = 0;
        pl->phase = PH_TRY_SAMPLED;
    } else {
        pl->phase = PH_NEED_EXACT; /* mostly zeros: exact selection drops them */
    }
}

/* Per tile: how many keys are above gt, and how many equal eq (when ties are to be broken). */
__global__ void count_kernel(plan *pl, uint32_t want, const float *x, uint64_t n, uint64_t tiles,
                             unsigned long long *tile_gt, unsigned long long *tile_eq)
{
    typedef cub::BlockReduce<unsigned long long, ZC_CUDA_THREADS> reduce_t;
    __shared__ typename reduce_t::TempStorage tmp;
    if (pl->phase != want)
        return;
    const uint32_t gt = pl->gt, eq = pl->eq;
    const bool ties = pl->ties > 0;
    for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const uint64_t first = t * kTile + (uint64_t)threadIdx.x * kItems;
        unsigned long long both = 0; /* eq count << 32 | gt count: at most kItems each */
        for (uint32_t i = 0; i < kItems && first + i < n; i++) {
            const uint32_t key = key_of(x[first + i]);
            both += (key > gt) | (unsigned long long)(ties && key == eq) << 32;
        }
        both = reduce_t(tmp).Sum(both);
        if (threadIdx.x == 0) {
            tile_gt[t] = both & 0xffffffffu;
            tile_eq[t] = both >> 32;
        }
        __syncthreads();
    }
}

/*
 * Exclusive scan of vals[0..m) in place by one block; the sum goes to *total.
 * @p saturate: sums stop at 2^63 (position decoding: a hostile payload's gaps
 * must not wrap around). Runs only when pl->phase is @p want (0: always).
 */
__global__ void tile_scan_kernel(plan *pl, uint32_t want, unsigned long long *vals,
                                 const unsigned long long *m_dev, uint64_t m_host,
                                 unsigned long long *total, int saturate)
{
    typedef cub::BlockScan<unsigned long long, ZC_CUDA_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    __shared__ unsigned long long carry;
    if (want && pl->phase != want)
        return;
    const uint64_t m = m_dev ? (*m_dev + kTile - 1) / kTile : m_host;
    const unsigned long long cap = UINT64_C(1) << 63;
    if (threadIdx.x == 0)
        carry = 0;
    __syncthreads();
    for (uint64_t base = 0; base < m; base += blockDim.x) {
        const uint64_t i = base + threadIdx.x;
        unsigned long long v = i < m ? vals[i] : 0, ex;
        if (saturate) {
            v = v > cap ? cap : v; /* a sum of two such values still fits */
            scan_t(tmp).ExclusiveScan(v, ex, 0ull, [](unsigned long long a, unsigned long long b) {
                unsigned long long s = a + b;
                return s > (UINT64_C(1) << 63) ? (UINT64_C(1) << 63) : s;
            });
        } else {
            scan_t(tmp).ExclusiveSum(v, ex);
        }
        unsigned long long c = carry;
        unsigned long long out = c + ex;
        if (saturate && out > cap)
            out = cap;
        if (i < m)
            vals[i] = out;
        __syncthreads();
        if (threadIdx.x == blockDim.x - 1) {
            const unsigned long long sum = out + v;
            carry = saturate && sum > cap ? cap : sum;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0)
        *total = carry;
}

/* The sampled count against the tolerance: accept it, or go exact. */
__global__ void accept_kernel(plan *pl, uint64_t k, uint64_t tol)
{
    if (pl->phase != PH_TRY_SAMPLED)
        return;
    const unsigned long long c = pl->total_gt;
    if (c + tol >= k && c <= k + tol) {
        pl->c = c;
        pl->phase = PH_FINAL;
    } else {
        pl->phase = PH_NEED_EXACT;
    }
}

/* Exact selection: everything nonzero when k = n, else the radix select over all keys. */
__global__ void exact_setup_kernel(plan *pl, uint64_t k, uint64_t n)
{
    if (pl->phase != PH_NEED_EXACT)
        return;
    if (k == n) {
        pl->gt = 0;
        pl->eq = 0;
        pl->ties = 0;
        pl->phase = PH_EXACT_COUNT;
        pl->radix_run = 0;
        return;
    }
    pl->radix_run = 1;
    pl->radix_k = k;
    pl->radix_above = 0;
    pl->radix_prefix = 0;
}

__global__ void exact_plan_kernel(plan *pl, uint64_t k)
{
    if (!pl->radix_run)
        return;
    pl->radix_run = 0;
    const uint32_t kth = pl->radix_prefix;
    pl->gt = kth;
    pl->eq = kth;
    /* zeros are never kept: with the k-th key 0 only the nonzero keys (all above it) are */
    pl->ties = kth == 0 ? 0 : k - pl->radix_above;
    pl->phase = PH_EXACT_COUNT;
}

__global__ void exact_total_kernel(plan *pl)
{
    if (pl->phase != PH_EXACT_COUNT)
        return;
    pl->c = pl->total_gt + (pl->total_eq < pl->ties ? pl->total_eq : pl->ties);
    pl->phase = PH_FINAL;
}

/* Stream compaction: idx[slot] = position of every kept value, in order. */
__global__ void compact_kernel(const plan *pl, const float *x, uint64_t n, uint64_t tiles,
                               const unsigned long long *tile_gt, const unsigned long long *tile_eq,
                               uint64_t *idx)
{
    typedef cub::BlockScan<unsigned long long, ZC_CUDA_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    const uint32_t gt = pl->gt, eq = pl->eq;
    const unsigned long long ties = pl->ties;
    for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const uint64_t first = t * kTile + (uint64_t)threadIdx.x * kItems;
        uint32_t keys[kItems];
        unsigned long long both = 0;
        for (uint32_t i = 0; i < kItems; i++) {
            keys[i] = first + i < n ? key_of(x[first + i]) : 0;
            both += (keys[i] > gt) | (unsigned long long)(ties && keys[i] == eq) << 32;
        }
        unsigned long long ex;
        scan_t(tmp).ExclusiveSum(both, ex);
        unsigned long long ngt = tile_gt[t] + (ex & 0xffffffffu), neq = tile_eq[t] + (ex >> 32);
        for (uint32_t i = 0; i < kItems && first + i < n; i++) {
            const bool above = keys[i] > gt, tie = ties && keys[i] == eq;
            const bool kept = above || (tie && neq < ties);
            if (kept)
                idx[ngt + (neq < ties ? neq : ties)] = first + i;
            ngt += above;
            neq += tie;
        }
        __syncthreads();
    }
}

/* ------------------------------------------------------------- writing */

/* Rice candidates of gaps.c from the last position and the count. */
__global__ void rice_setup_kernel(plan *pl, const uint64_t *idx)
{
    const unsigned long long c = pl->c;
    pl->fmax = 0;
    pl->q[0] = pl->q[1] = pl->q[2] = 0;
    pl->varint_bytes = 0;
    if (c == 0)
        return;
    /* sum of gaps = idx_last + 1 - c <= 2^40, so the product stays below 2^57 */
    const uint64_t sum = idx[c - 1] + 1 - c;
    const uint64_t m = (sum * 45426u >> 16) / c; /* ln 2 * 2^16 */
    const uint32_t b0 = m ? zc_dev_bitlen64(m) - 1 : 0;
    const uint32_t cand[3] = {b0 ? b0 - 1 : b0, b0, b0 + 1};
    for (int t = 0; t < 3; t++)
        pl->cand[t] = cand[t] > ZC_TOPK_RICE_MAX_PARAM ? ZC_TOPK_RICE_MAX_PARAM : cand[t];
}

__device__ __forceinline__ uint64_t gap_at(const uint64_t *idx, uint64_t j)
{
    return j == 0 ? idx[0] : idx[j] - idx[j - 1] - 1;
}

/* Sizes of both codings and the f16 exponent's input, summed over the kept values. */
__global__ void stats_kernel(plan *pl, const float *x, const uint64_t *idx, uint64_t cmax)
{
    typedef cub::BlockReduce<unsigned long long, ZC_CUDA_THREADS> reduce_t;
    __shared__ typename reduce_t::TempStorage tmp;
    const unsigned long long c = pl->c;
    const uint32_t c0 = pl->cand[0], c1 = pl->cand[1], c2 = pl->cand[2];
    unsigned long long q0 = 0, q1 = 0, q2 = 0, vb = 0;
    uint32_t fmax = 0;
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < c && j < cmax;
         j += (uint64_t)gridDim.x * blockDim.x) {
        const uint64_t g = gap_at(idx, j);
        q0 += g >> c0;
        q1 += g >> c1;
        q2 += g >> c2;
        vb += zc_varint_len(g);
        const uint32_t key = key_of(x[idx[j]]);
        if (key < ZC_TOPK_INF_KEY && key > fmax)
            fmax = key;
    }
    q0 = reduce_t(tmp).Sum(q0);
    __syncthreads();
    q1 = reduce_t(tmp).Sum(q1);
    __syncthreads();
    q2 = reduce_t(tmp).Sum(q2);
    __syncthreads();
    vb = reduce_t(tmp).Sum(vb);
    __syncthreads();
    const unsigned long long fm = reduce_t(tmp).Reduce(
        (unsigned long long)fmax,
        [](unsigned long long a, unsigned long long b) { return a > b ? a : b; });
    if (threadIdx.x == 0) {
        atomicAdd(&pl->q[0], q0);
        atomicAdd(&pl->q[1], q1);
        atomicAdd(&pl->q[2], q2);
        atomicAdd(&pl->varint_bytes, vb);
        atomicMax(&pl->fmax, (uint32_t)fm);
    }
}

/* topk_encode's choices, and both headers. */
__global__ void choose_kernel(plan *pl, uint8_t *dst, uint64_t n, uint32_t f16, uint64_t *dlen)
{
    const unsigned long long c = pl->c;
    unsigned long long rice_bytes = ~0ull;
    uint32_t b = 0;
    if (c) {
        for (int t = 0; t < 3; t++) {
            unsigned long long bytes = (pl->q[t] + c * (1 + pl->cand[t]) + 7) / 8;
            if (bytes < rice_bytes) {
                b = pl->cand[t];
                rice_bytes = bytes;
            }
        }
    }
    const uint32_t rice = rice_bytes < pl->varint_bytes;
    int32_t e = 0;
    if (f16 && pl->fmax != 0) {
        e = (int32_t)(pl->fmax >> 23) - 127 - 14; /* a subnormal max gives -141: clamped */
        e = e < -126 ? -126 : e;
    }
    pl->rice = rice;
    pl->f16 = f16;
    pl->b = rice ? b : 0;
    pl->e = e;
    const unsigned long long vbytes = c * (f16 ? 2 : 4);
    const unsigned long long ibytes = rice ? rice_bytes : pl->varint_bytes;
    pl->sec_off = ZC_PAYLOAD_HEADER_BYTES + kHeader + vbytes;
    pl->total_bits = 0;
    zc_dev_header_write(dst, ZC_CODEC_TOPK, n);
    uint8_t *body = dst + ZC_PAYLOAD_HEADER_BYTES;
    zc_dev_st64(body, c);
    body[8] = (uint8_t)f16;
    body[9] = (uint8_t)rice;
    body[10] = (uint8_t)pl->b;
    body[11] = (uint8_t)(int8_t)e;
    *dlen = ZC_PAYLOAD_HEADER_BYTES + kHeader + vbytes + ibytes;
}

/*
 * The kept values (f32 bits, or f16 of a * 2^-e) and, fused, the error-feedback
 * subtraction of what they decode to: residual = a - sent, or 0 where a
 * non-finite value went out whole (zc_topk_sink_add with subtract).
 */
__global__ void values_kernel(const plan *pl, float *x, const uint64_t *idx, uint64_t cmax,
                              uint8_t *dst)
{
    const unsigned long long c = pl->c;
    const int32_t e = pl->e;
    const uint32_t f16 = pl->f16;
    uint8_t *vals = dst + ZC_PAYLOAD_HEADER_BYTES + kHeader;
    const float inv = __uint_as_float((uint32_t)(127 - e) << 23);
    const float scale = __uint_as_float((uint32_t)(127 + e) << 23);
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < c && j < cmax;
         j += (uint64_t)gridDim.x * blockDim.x) {
        const float a = x[idx[j]];
        float sent;
        if (!f16) {
            zc_dev_st32(vals + 4 * j, __float_as_uint(a));
            sent = a;
        } else {
            uint16_t h = zc_f32_to_f16(zc_dev_mul(a, inv));
            /* within 2^-11 of FLT_MAX, rounding up gives 2^128: round down instead */
            if (e == 113 && (h & 0x7fffu) == 0x7800u)
                h--;
            vals[2 * j] = (uint8_t)h;
            vals[2 * j + 1] = (uint8_t)(h >> 8);
            sent = zc_dev_mul(zc_f16_to_f32(h), scale);
        }
        x[idx[j]] = key_of(sent) < ZC_TOPK_INF_KEY ? zc_dev_sub(a, sent) : 0.0f;
    }
}

__device__ __forceinline__ uint64_t code_len(const plan *pl, uint64_t g)
{
    return pl->rice ? (g >> pl->b) + 1 + pl->b : zc_varint_len(g);
}

/* Per tile of kept positions: the bits (Rice) or bytes (varint) of their codes. */
__global__ void code_tile_kernel(const plan *pl, const uint64_t *idx, uint64_t ctiles,
                                 unsigned long long *tile_len)
{
    typedef cub::BlockReduce<unsigned long long, ZC_CUDA_THREADS> reduce_t;
    __shared__ typename reduce_t::TempStorage tmp;
    const unsigned long long c = pl->c;
    for (uint64_t t = blockIdx.x; t < ctiles; t += gridDim.x) {
        const uint64_t first = t * kTile + (uint64_t)threadIdx.x * kItems;
        unsigned long long sum = 0;
        for (uint32_t i = 0; i < kItems && first + i < c; i++)
            sum += code_len(pl, gap_at(idx, first + i));
        sum = reduce_t(tmp).Sum(sum);
        if (threadIdx.x == 0)
            tile_len[t] = sum;
        __syncthreads();
    }
}

/* Writes every gap's code at its offset: varint bytes in place, Rice bits into @p bits. */
__global__ void code_write_kernel(const plan *pl, const uint64_t *idx, uint64_t ctiles,
                                  const unsigned long long *tile_len, uint8_t *dst,
                                  unsigned long long *bits)
{
    typedef cub::BlockScan<unsigned long long, ZC_CUDA_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    const unsigned long long c = pl->c;
    const uint32_t b = pl->b;
    uint8_t *sec = dst + pl->sec_off;
    for (uint64_t t = blockIdx.x; t < ctiles; t += gridDim.x) {
        const uint64_t first = t * kTile + (uint64_t)threadIdx.x * kItems;
        unsigned long long sum = 0;
        for (uint32_t i = 0; i < kItems && first + i < c; i++)
            sum += code_len(pl, gap_at(idx, first + i));
        unsigned long long off;
        scan_t(tmp).ExclusiveSum(sum, off);
        off += tile_len[t];
        for (uint32_t i = 0; i < kItems && first + i < c; i++) {
            uint64_t g = gap_at(idx, first + i);
            if (!pl->rice) {
                while (g >= 0x80) {
                    sec[off++] = (uint8_t)(g | 0x80);
                    g >>= 7;
                }
                sec[off++] = (uint8_t)g;
                continue;
            }
            /* q zero bits (already zero), the stop bit, then the low b bits: at most 41 bits */
            const uint64_t q = g >> b;
            const unsigned long long code = 1 | (g & ((UINT64_C(1) << b) - 1)) << 1;
            const unsigned long long at = off + q;
            const uint32_t sh = (uint32_t)(at % 64);
            atomicOr(&bits[at / 64], code << sh);
            if (sh + 1 + b > 64)
                atomicOr(&bits[at / 64 + 1], code >> (64 - sh));
            off += q + 1 + b;
        }
        __syncthreads();
    }
}

/* The Rice section: whole bytes of the bit buffer (the pad bits are zero). */
__global__ void rice_copy_kernel(const plan *pl, const unsigned long long *total_bits,
                                 const unsigned long long *bits, uint8_t *dst, uint64_t bound)
{
    if (!pl->rice)
        return;
    const unsigned long long bytes = (*total_bits + 7) / 8;
    uint8_t *sec = dst + pl->sec_off;
    const uint8_t *src = (const uint8_t *)bits;
    for (uint64_t i = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; i < bytes && i < bound;
         i += (uint64_t)gridDim.x * blockDim.x)
        sec[i] = src[i];
}

/* ------------------------------------------------------------- decoding */

__global__ void dec_header_kernel(plan *pl, const uint8_t *src, size_t len, uint64_t n,
                                  uint64_t cmax, uint64_t bound, int32_t *status)
{
    pl->ok = 0;
    zc_status_t st = zc_dev_header_check(src, len, ZC_CODEC_TOPK, n);
    if (st == ZC_OK && len - ZC_PAYLOAD_HEADER_BYTES < kHeader)
        st = ZC_ERR_CORRUPT;
    if (st != ZC_OK) {
        zc_dev_fail(status, st);
        return;
    }
    const uint8_t *body = src + ZC_PAYLOAD_HEADER_BYTES;
    const uint64_t c = zc_dev_ld64(body);
    const uint32_t format = body[8], coding = body[9], b = body[10];
    const int32_t e = (int8_t)body[11];
    st = ZC_OK;
    if (format > 1 || coding > 1 || c > n || n > ZC_TOPK_MAX_COUNT)
        st = ZC_ERR_CORRUPT;
    else if ((coding == 0 && b != 0) || b > ZC_TOPK_RICE_MAX_PARAM)
        st = ZC_ERR_CORRUPT;
    else if ((format == 0 && e != 0) || e < -126 || e > 113)
        st = ZC_ERR_CORRUPT;
    const uint64_t vsize = format ? 2 : 4, rest = len - ZC_PAYLOAD_HEADER_BYTES - kHeader;
    if (st == ZC_OK && c > rest / vsize)
        st = ZC_ERR_CORRUPT;
    if (st == ZC_OK && c > cmax)
        st = ZC_ERR_MISMATCH; /* more than params' density keeps: not sized for it */
    if (st == ZC_OK && len > bound)
        st = ZC_ERR_CORRUPT; /* a position section longer than any c positions take */
    if (st != ZC_OK) {
        zc_dev_fail(status, st);
        return;
    }
    pl->c = c;
    pl->coding = coding;
    pl->b = b;
    pl->e = e;
    pl->f16 = format;
    pl->sec_start = ZC_PAYLOAD_HEADER_BYTES + kHeader + c * vsize;
    pl->sec_len = len - pl->sec_start;
    pl->ok = 1;
}

/* Varint: terminating bytes (bit 7 clear) per tile of the section. */
__global__ void vint_count_kernel(const plan *pl, const uint8_t *src, uint64_t tiles,
                                  unsigned long long *tile_n)
{
    typedef cub::BlockReduce<unsigned long long, ZC_CUDA_THREADS> reduce_t;
    __shared__ typename reduce_t::TempStorage tmp;
    if (!pl->ok || pl->coding != 0)
        return;
    const uint8_t *sec = src + pl->sec_start;
    const unsigned long long len = pl->sec_len;
    for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const uint64_t first = t * kTile + (uint64_t)threadIdx.x * kItems;
        unsigned long long m = 0;
        for (uint32_t i = 0; i < kItems && first + i < len; i++)
            m += !(sec[first + i] & 0x80);
        m = reduce_t(tmp).Sum(m);
        if (threadIdx.x == 0)
            tile_n[t] = m;
        __syncthreads();
    }
}

/* Varint: every terminating byte ends gap j (its rank): read it backwards, check it. */
__global__ void vint_gaps_kernel(plan *pl, const uint8_t *src, uint64_t tiles,
                                 const unsigned long long *tile_n, uint64_t n, uint64_t *gaps,
                                 int32_t *status)
{
    typedef cub::BlockScan<unsigned long long, ZC_CUDA_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    if (!pl->ok || pl->coding != 0)
        return;
    const uint8_t *sec = src + pl->sec_start;
    const unsigned long long len = pl->sec_len, c = pl->c;
    for (uint64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const uint64_t first = t * kTile + (uint64_t)threadIdx.x * kItems;
        unsigned long long m = 0;
        for (uint32_t i = 0; i < kItems && first + i < len; i++)
            m += !(sec[first + i] & 0x80);
        unsigned long long j;
        scan_t(tmp).ExclusiveSum(m, j);
        j += tile_n[t];
        for (uint32_t i = 0; i < kItems && first + i < len; i++) {
            const uint64_t p = first + i;
            if (sec[p] & 0x80)
                continue;
            /*
             * The gap's bytes: p and the continuation bytes before it. The host
             * reads at most 6 bytes (42 bits) a gap, so 6 continuation bytes
             * before a terminator are already too many.
             */
            uint32_t more = 0;
            while (more < 6 && p > more && (sec[p - more - 1] & 0x80))
                more++;
            bool bad = more == 6 || j >= c;
            bad |= sec[p] == 0 && more > 0; /* overlong: the shortest form only */
            uint64_t g = 0;
            for (uint32_t k = 0; !bad && k <= more; k++)
                g |= (uint64_t)(sec[p - more + k] & 0x7f) << (7 * k);
            bad |= g > n - 1; /* the position scan checks the sums */
            if (bad)
                zc_dev_fail(status, ZC_ERR_CORRUPT);
            else
                gaps[j] = g;
            j++;
        }
        __syncthreads();
    }
}

/* Varint: exactly c gaps, and the section ends on a terminating byte. */
__global__ void vint_check_kernel(plan *pl, const uint8_t *src, const unsigned long long *total,
                                  int32_t *status)
{
    if (!pl->ok || pl->coding != 0)
        return;
    const unsigned long long len = pl->sec_len;
    if (*total != pl->c || (len > 0 && (src[pl->sec_start + len - 1] & 0x80)))
        zc_dev_fail(status, ZC_ERR_CORRUPT);
}

/* --- Rice --- */

struct rice_code {
    uint64_t next, g;
    bool bad;
};

/* The Rice code at bit p of the section (len bits), as zc_topk_rice_decode reads it. */
__device__ __forceinline__ rice_code rice_at(const uint8_t *sec, uint64_t nbits, uint64_t p,
                                             uint32_t b, uint64_t qmax)
{
    rice_code r = {0, 0, true};
    uint64_t z = p;
    /* the stop bit: zero bytes are skipped whole */
    while (z < nbits) {
        const uint32_t byte = sec[z / 8] >> (z % 8);
        if (byte) {
            z += __ffs(byte) - 1;
            break;
        }
        z += 8 - z % 8;
        if (z - p > qmax + 8)
            return r; /* past any valid quotient */
    }
    if (z >= nbits || z - p > qmax || z + 1 + b > nbits)
        return r;
    uint64_t low = 0;
    for (uint32_t k = 0; k < b; k++) {
        const uint64_t at = z + 1 + k;
        low |= (uint64_t)((sec[at / 8] >> (at % 8)) & 1) << k;
    }
    r.g = (z - p) << b | low;
    r.next = z + 1 + b;
    r.bad = false;
    return r;
}

struct chunk_info {
    unsigned long long exit, count, bad, entry, first;
};

/* Speculative decode of every chunk from its first bit; marks the code starts it meets. */
__global__ void rice_spec_kernel(const plan *pl, const uint8_t *src, uint64_t chunks_bound,
                                 uint64_t n, uint32_t *marks, chunk_info *ci)
{
    if (!pl->ok || pl->coding != 1)
        return;
    const uint8_t *sec = src + pl->sec_start;
    const uint64_t nbits = pl->sec_len * 8, qmax = n >> pl->b;
    const uint64_t chunks = (nbits + kChunkBits - 1) / kChunkBits;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
         t < chunks && t < chunks_bound; t += (uint64_t)gridDim.x * blockDim.x) {
        uint32_t *w = marks + t * (kChunkBits / 32);
        for (uint32_t i = 0; i < kChunkBits / 32; i++)
            w[i] = 0;
        const uint64_t end = (t + 1) * kChunkBits;
        uint64_t p = t * kChunkBits, count = 0, bad = kNone;
        while (p < end && p < nbits) {
            w[(p % kChunkBits) / 32] |= 1u << (p % 32);
            rice_code r = rice_at(sec, nbits, p, pl->b, qmax);
            if (r.bad) {
                bad = p;
                break;
            }
            p = r.next;
            count++;
        }
        ci[t].exit = p;
        ci[t].count = count;
        ci[t].bad = bad;
    }
}

/* Code starts of chunk t's speculative path before bit p (p inside the chunk). */
__device__ __forceinline__ uint64_t marks_before(const uint32_t *marks, uint64_t t, uint64_t p)
{
    const uint32_t *w = marks + t * (kChunkBits / 32);
    const uint32_t off = (uint32_t)(p - t * kChunkBits);
    uint64_t m = 0;
    for (uint32_t i = 0; i < off / 32; i++)
        m += __popc(w[i]);
    if (off % 32)
        m += __popc(w[off / 32] & ((1u << (off % 32)) - 1));
    return m;
}

/*
 * One thread follows the true boundaries: from each chunk's true entry it
 * decodes (and checks) codes until one starts on a speculative boundary of a
 * chunk whose speculative path had no bad code; from there the paths agree.
 */
__global__ void rice_sync_kernel(plan *pl, const uint8_t *src, uint64_t n, const uint32_t *marks,
                                 chunk_info *ci, int32_t *status)
{
    if (!pl->ok || pl->coding != 1)
        return;
    const uint8_t *sec = src + pl->sec_start;
    const uint64_t nbits = pl->sec_len * 8, qmax = n >> pl->b, c = pl->c;
    const uint64_t chunks = (nbits + kChunkBits - 1) / kChunkBits;
    uint64_t p = 0, done = 0, end_bit = c == 0 ? 0 : kNone;
    for (uint64_t t = 0; t < chunks; t++) {
        ci[t].entry = p;
        ci[t].first = done;
        const uint64_t end = (t + 1) * kChunkBits;
        while (p < end && p < nbits && done < c) {
            const bool mark =
                (marks[t * (kChunkBits / 32) + (p % kChunkBits) / 32] >> (p % 32)) & 1;
            if (mark && ci[t].bad == kNone) {
                done += ci[t].count - marks_before(marks, t, p);
                p = ci[t].exit;
                if (done >= c) {
                    if (done > c) {
                        zc_dev_fail(status, ZC_ERR_CORRUPT); /* codes past the c-th */
                        pl->ok = 0;
                        return;
                    }
                    end_bit = p;
                }
                break;
            }
            rice_code r = rice_at(sec, nbits, p, pl->b, qmax);
            if (r.bad) {
                zc_dev_fail(status, ZC_ERR_CORRUPT);
                pl->ok = 0;
                return;
            }
            p = r.next;
            if (++done == c)
                end_bit = p;
        }
    }
    /* c codes, then zero padding to the byte, then nothing */
    bool bad = done != c || end_bit == kNone || (end_bit + 7) / 8 != pl->sec_len;
    for (uint64_t k = end_bit; !bad && k < nbits; k++)
        bad = (sec[k / 8] >> (k % 8)) & 1;
    if (bad) {
        zc_dev_fail(status, ZC_ERR_CORRUPT);
        pl->ok = 0;
    }
}

/* Decodes each chunk's codes from its true entry (all checked by the sync pass). */
__global__ void rice_gaps_kernel(const plan *pl, const uint8_t *src, uint64_t chunks_bound,
                                 uint64_t n, const chunk_info *ci, uint64_t *gaps)
{
    if (!pl->ok || pl->coding != 1)
        return;
    const uint8_t *sec = src + pl->sec_start;
    const uint64_t nbits = pl->sec_len * 8, qmax = n >> pl->b, c = pl->c;
    const uint64_t chunks = (nbits + kChunkBits - 1) / kChunkBits;
    for (uint64_t t = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x;
         t < chunks && t < chunks_bound; t += (uint64_t)gridDim.x * blockDim.x) {
        uint64_t p = ci[t].entry, j = ci[t].first;
        const uint64_t end = (t + 1) * kChunkBits;
        while (p < end && j < c) {
            rice_code r = rice_at(sec, nbits, p, pl->b, qmax);
            gaps[j++] = r.g;
            p = r.next;
        }
    }
}

/* --- positions and values --- */

/* Per tile of gaps: the sum of gap + 1 (saturating), for the position scan. */
__global__ void pos_tile_kernel(const plan *pl, const uint64_t *gaps, uint64_t ctiles,
                                unsigned long long *tile_sum, const int32_t *status)
{
    typedef cub::BlockReduce<unsigned long long, ZC_CUDA_THREADS> reduce_t;
    __shared__ typename reduce_t::TempStorage tmp;
    if (!pl->ok || zc_dev_failed(status))
        return;
    const unsigned long long c = pl->c;
    for (uint64_t t = blockIdx.x; t < ctiles; t += gridDim.x) {
        const uint64_t first = t * kTile + (uint64_t)threadIdx.x * kItems;
        unsigned long long s = 0; /* each gap < 2^40: 16 of them cannot overflow */
        for (uint32_t i = 0; i < kItems && first + i < c; i++)
            s += gaps[first + i] + 1;
        s = reduce_t(tmp).Sum(s); /* 4096 gaps below 2^40: below 2^52 */
        if (threadIdx.x == 0)
            tile_sum[t] = s;
        __syncthreads();
    }
}

/* Positions = running sum of gap + 1, minus 1; each must be below n. Written over the gaps. */
__global__ void pos_write_kernel(const plan *pl, uint64_t *gaps, uint64_t ctiles,
                                 const unsigned long long *tile_sum, uint64_t n, int32_t *status)
{
    typedef cub::BlockScan<unsigned long long, ZC_CUDA_THREADS> scan_t;
    __shared__ typename scan_t::TempStorage tmp;
    if (!pl->ok || zc_dev_failed(status))
        return;
    const unsigned long long c = pl->c;
    for (uint64_t t = blockIdx.x; t < ctiles; t += gridDim.x) {
        const uint64_t first = t * kTile + (uint64_t)threadIdx.x * kItems;
        unsigned long long s = 0;
        for (uint32_t i = 0; i < kItems && first + i < c; i++)
            s += gaps[first + i] + 1;
        unsigned long long next;
        scan_t(tmp).ExclusiveSum(s, next);
        next += tile_sum[t]; /* saturated at 2^63 by the tile scan: far above any n */
        for (uint32_t i = 0; i < kItems && first + i < c; i++) {
            next += gaps[first + i] + 1;
            if (next > n)
                zc_dev_fail(status, ZC_ERR_CORRUPT); /* a gap past the last element */
            gaps[first + i] = next - 1;
        }
        __syncthreads();
    }
}

__global__ void add_kernel(const plan *pl, const uint8_t *src, const uint64_t *pos, uint64_t cmax,
                           float *dst, const int32_t *status)
{
    if (!pl->ok || zc_dev_failed(status))
        return;
    const unsigned long long c = pl->c;
    const uint8_t *vals = src + ZC_PAYLOAD_HEADER_BYTES + kHeader;
    const float scale = __uint_as_float((uint32_t)(127 + pl->e) << 23);
    for (uint64_t j = (uint64_t)blockIdx.x * blockDim.x + threadIdx.x; j < c && j < cmax;
         j += (uint64_t)gridDim.x * blockDim.x) {
        float f;
        if (pl->f16)
            f = zc_dev_mul(zc_f16_to_f32((uint16_t)(vals[2 * j] | vals[2 * j + 1] << 8)), scale);
        else
            f = __uint_as_float(zc_dev_ld32(vals + 4 * j));
        dst[pos[j]] = zc_dev_add(dst[pos[j]], f);
    }
}

/* ------------------------------------------------------------ workspace */

struct enc_ws {
    plan *pl;
    uint32_t *keys;
    unsigned long long *tile_gt, *tile_eq, *tile_len, *total;
    uint64_t *idx;
    unsigned long long *bits;
    size_t bits_bytes;
};

enc_ws carve_encode(zc_cuda_ws_t *ws, const shape &h)
{
    enc_ws w;
    w.pl = (plan *)zc_cuda_ws_take(ws, sizeof(plan));
    w.keys = (uint32_t *)zc_cuda_ws_take(ws, (size_t)h.s * 4);
    w.tile_gt = (unsigned long long *)zc_cuda_ws_take(ws, (size_t)h.tiles * 8);
    w.tile_eq = (unsigned long long *)zc_cuda_ws_take(ws, (size_t)h.tiles * 8);
    w.tile_len = (unsigned long long *)zc_cuda_ws_take(ws, (size_t)h.ctiles * 8);
    w.total = (unsigned long long *)zc_cuda_ws_take(ws, 8);
    w.idx = (uint64_t *)zc_cuda_ws_take(ws, (size_t)(h.cmax + 1) * 8);
    /* Rice is chosen only when smaller than varint: at most cmax * varint_len(n - 1) bytes */
    unsigned vmax = 1;
    for (uint64_t v = h.n ? h.n - 1 : 0; v >= 0x80; v >>= 7)
        vmax++;
    w.bits_bytes = (size_t)((h.cmax * vmax + 7) / 8 * 8 + 16); /* + a word written past the end */
    w.bits = (unsigned long long *)zc_cuda_ws_take(ws, w.bits_bytes);
    return w;
}

struct dec_ws {
    plan *pl;
    uint64_t *gaps;
    unsigned long long *tile_n, *tile_sum, *total;
    uint32_t *marks;
    chunk_info *ci;
    uint64_t tiles, chunks;
};

/* Decode pieces for a payload of @p len bytes: the position section is shorter than that. */
dec_ws carve_decode(zc_cuda_ws_t *ws, const shape &h, size_t len)
{
    dec_ws w;
    w.tiles = (len + kTile - 1) / kTile;
    w.chunks = ((uint64_t)len * 8 + kChunkBits - 1) / kChunkBits;
    w.pl = (plan *)zc_cuda_ws_take(ws, sizeof(plan));
    w.gaps = (uint64_t *)zc_cuda_ws_take(ws, (size_t)(h.cmax + 1) * 8);
    w.tile_n = (unsigned long long *)zc_cuda_ws_take(ws, (size_t)w.tiles * 8);
    w.tile_sum = (unsigned long long *)zc_cuda_ws_take(ws, (size_t)h.ctiles * 8);
    w.total = (unsigned long long *)zc_cuda_ws_take(ws, 8);
    w.marks = (uint32_t *)zc_cuda_ws_take(ws, (size_t)w.chunks * (kChunkBits / 8));
    w.ci = (chunk_info *)zc_cuda_ws_take(ws, (size_t)w.chunks * sizeof(chunk_info));
    return w;
}

/* Three digit passes of the radix select over m words at src (run only when pl->radix_run). */
zc_status_t radix_select(plan *pl, const uint32_t *src, uint64_t m, cudaStream_t stream)
{
    const unsigned blocks = zc_cuda_blocks(m, ZC_CUDA_THREADS * 16) < kHistBlocks
                                ? zc_cuda_blocks(m, ZC_CUDA_THREADS * 16)
                                : kHistBlocks;
    for (uint32_t d = 0; d < 3; d++) {
        hist_kernel<<<blocks, ZC_CUDA_THREADS, 0, stream>>>(pl, src, m, d);
        pick_kernel<<<1, ZC_CUDA_THREADS, 0, stream>>>(pl, d);
    }
    return zc_cuda_launched("topk radix select");
}

} // namespace

size_t zc_cuda_topk_workspace(const zc_codec_params_t *params, uint64_t count)
{
    const shape h = make_shape(params, count);
    zc_cuda_ws_t e = {NULL, 0}, d = {NULL, 0};
    carve_encode(&e, h);
    /* a payload this call can decode is at most the bound long */
    carve_decode(&d, h, zc_codec_bound(params, count));
    return e.used > d.used ? e.used : d.used;
}

zc_status_t zc_cuda_topk_encode(const zc_codec_params_t *params, float *dres, uint64_t count,
                                uint8_t *ddst, uint64_t *dlen, zc_cuda_ws_t *ws,
                                cudaStream_t stream)
{
    const shape h = make_shape(params, count);
    const enc_ws w = carve_encode(ws, h);
    const unsigned tile_blocks = zc_cuda_blocks(h.tiles, 1);
    const unsigned ctile_blocks = zc_cuda_blocks(h.ctiles, 1);
    const unsigned kept_blocks = zc_cuda_blocks(h.cmax, ZC_CUDA_THREADS);
    const bool sampled = h.s > 0 && h.k < h.n;

    ZC_CUDA_CHECK(cudaMemsetAsync(w.pl, 0, sizeof(plan), stream), "topk plan memset");
    ZC_CUDA_CHECK(cudaMemsetAsync(w.bits, 0, w.bits_bytes, stream), "topk bit buffer memset");
    if (count == 0) {
        /* nothing kept: the headers alone (the plan is zero: c = 0, varint, no values) */
        choose_kernel<<<1, 1, 0, stream>>>(w.pl, ddst, count, h.f16, dlen);
        return zc_cuda_launched("topk header kernel");
    }
    init_kernel<<<1, 1, 0, stream>>>(w.pl, sampled ? PH_TRY_SAMPLED : PH_NEED_EXACT, h.ks);
    if (sampled) {
        sample_kernel<<<zc_cuda_blocks(h.s, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
            dres, count, h.s, w.keys);
        ZC_CHECK(radix_select(w.pl, w.keys, h.s, stream));
        sampled_plan_kernel<<<1, 1, 0, stream>>>(w.pl);
        count_kernel<<<tile_blocks, ZC_CUDA_THREADS, 0, stream>>>(w.pl, PH_TRY_SAMPLED, dres, count,
                                                                  h.tiles, w.tile_gt, w.tile_eq);
        tile_scan_kernel<<<1, ZC_CUDA_THREADS, 0, stream>>>(w.pl, PH_TRY_SAMPLED, w.tile_gt, NULL,
                                                            h.tiles, &w.pl->total_gt, 0);
        accept_kernel<<<1, 1, 0, stream>>>(w.pl, h.k, h.tol);
    }
    exact_setup_kernel<<<1, 1, 0, stream>>>(w.pl, h.k, count);
    ZC_CHECK(radix_select(w.pl, (const uint32_t *)dres, count, stream));
    exact_plan_kernel<<<1, 1, 0, stream>>>(w.pl, h.k);
    count_kernel<<<tile_blocks, ZC_CUDA_THREADS, 0, stream>>>(w.pl, PH_EXACT_COUNT, dres, count,
                                                              h.tiles, w.tile_gt, w.tile_eq);
    tile_scan_kernel<<<1, ZC_CUDA_THREADS, 0, stream>>>(w.pl, PH_EXACT_COUNT, w.tile_gt, NULL,
                                                        h.tiles, &w.pl->total_gt, 0);
    tile_scan_kernel<<<1, ZC_CUDA_THREADS, 0, stream>>>(w.pl, PH_EXACT_COUNT, w.tile_eq, NULL,
                                                        h.tiles, &w.pl->total_eq, 0);
    exact_total_kernel<<<1, 1, 0, stream>>>(w.pl);
    compact_kernel<<<tile_blocks, ZC_CUDA_THREADS, 0, stream>>>(w.pl, dres, count, h.tiles,
                                                                w.tile_gt, w.tile_eq, w.idx);
    ZC_CHECK(zc_cuda_launched("topk selection"));

    rice_setup_kernel<<<1, 1, 0, stream>>>(w.pl, w.idx);
    stats_kernel<<<kept_blocks, ZC_CUDA_THREADS, 0, stream>>>(w.pl, dres, w.idx, h.cmax);
    choose_kernel<<<1, 1, 0, stream>>>(w.pl, ddst, count, h.f16, dlen);
    code_tile_kernel<<<ctile_blocks, ZC_CUDA_THREADS, 0, stream>>>(w.pl, w.idx, h.ctiles,
                                                                   w.tile_len);
    tile_scan_kernel<<<1, ZC_CUDA_THREADS, 0, stream>>>(w.pl, 0, w.tile_len, &w.pl->c, 0,
                                                        &w.pl->total_bits, 0);
    code_write_kernel<<<ctile_blocks, ZC_CUDA_THREADS, 0, stream>>>(w.pl, w.idx, h.ctiles,
                                                                    w.tile_len, ddst, w.bits);
    rice_copy_kernel<<<zc_cuda_blocks(w.bits_bytes, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
        w.pl, &w.pl->total_bits, w.bits, ddst, w.bits_bytes);
    /* last: it rewrites the residual that the passes above read */
    values_kernel<<<kept_blocks, ZC_CUDA_THREADS, 0, stream>>>(w.pl, dres, w.idx, h.cmax, ddst);
    return zc_cuda_launched("topk writing");
}

zc_status_t zc_cuda_topk_decode_add(const zc_codec_params_t *params, const uint8_t *dsrc,
                                    size_t len, float *ddst, uint64_t count, int32_t *dstatus,
                                    zc_cuda_ws_t *ws, cudaStream_t stream)
{
    const shape h = make_shape(params, count);
    const size_t bound = zc_codec_bound(params, count);
    /* longer payloads are rejected by the header kernel: nothing reads past the bound */
    const dec_ws w = carve_decode(ws, h, len < bound ? len : bound);
    const unsigned ctile_blocks = zc_cuda_blocks(h.ctiles, 1);

    ZC_CUDA_CHECK(cudaMemsetAsync(w.pl, 0, sizeof(plan), stream), "topk plan memset");
    dec_header_kernel<<<1, 1, 0, stream>>>(w.pl, dsrc, len, count, h.cmax, bound, dstatus);
    /* varint */
    vint_count_kernel<<<zc_cuda_blocks(w.tiles, 1), ZC_CUDA_THREADS, 0, stream>>>(
        w.pl, dsrc, w.tiles, w.tile_n);
    tile_scan_kernel<<<1, ZC_CUDA_THREADS, 0, stream>>>(w.pl, 0, w.tile_n, NULL, w.tiles, w.total,
                                                        0);
    vint_gaps_kernel<<<zc_cuda_blocks(w.tiles, 1), ZC_CUDA_THREADS, 0, stream>>>(
        w.pl, dsrc, w.tiles, w.tile_n, count, w.gaps, dstatus);
    vint_check_kernel<<<1, 1, 0, stream>>>(w.pl, dsrc, w.total, dstatus);
    /* Rice */
    rice_spec_kernel<<<zc_cuda_blocks(w.chunks, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
        w.pl, dsrc, w.chunks, count, w.marks, w.ci);
    rice_sync_kernel<<<1, 1, 0, stream>>>(w.pl, dsrc, count, w.marks, w.ci, dstatus);
    rice_gaps_kernel<<<zc_cuda_blocks(w.chunks, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
        w.pl, dsrc, w.chunks, count, w.ci, w.gaps);
    /* positions, checked, then the values */
    pos_tile_kernel<<<ctile_blocks, ZC_CUDA_THREADS, 0, stream>>>(w.pl, w.gaps, h.ctiles,
                                                                  w.tile_sum, dstatus);
    tile_scan_kernel<<<1, ZC_CUDA_THREADS, 0, stream>>>(w.pl, 0, w.tile_sum, &w.pl->c, 0, w.total,
                                                        1);
    pos_write_kernel<<<ctile_blocks, ZC_CUDA_THREADS, 0, stream>>>(w.pl, w.gaps, h.ctiles,
                                                                   w.tile_sum, count, dstatus);
    add_kernel<<<zc_cuda_blocks(h.cmax, ZC_CUDA_THREADS), ZC_CUDA_THREADS, 0, stream>>>(
        w.pl, dsrc, w.gaps, h.cmax, ddst, dstatus);
    return zc_cuda_launched("topk decode");
}
