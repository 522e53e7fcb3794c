/*
 * QSGD internals: the per-CPU-level kernels and the Elias-omega code.
 * The orchestration (buckets, scales, coding choice, payload layout) is in qsgd.c;
 * the layout itself is documented in docs/codecs.md.
 */
#ifndef ZC_CODEC_QSGD_H
#define ZC_CODEC_QSGD_H

#include "common/bitio.h"
#include "common/cpu.h"

#include <zipccl/zipccl_codec.h>

#include <float.h>

#include <stddef.h>
#include <stdint.h>

/* Philox key and the three counter words fixed for one encode call. */
typedef struct zc_qsgd_rng {
    uint32_t key[2];
    uint32_t counter, rank, stream;
} zc_qsgd_rng_t;

/*
 * Magnitudes from 2^64 up (the bits of 0x1p64f and above, NaN included) go out
 * of band (ops.oob_limit of qsgd and qsgd-int): a QSGD bucket whose largest one
 * reaches it stops encode_try, and the generic layer runs encode on the input
 * with them masked; qsgd-int's local scales leave them out.
 */
#define ZC_QSGD_OOB_BITS 0x5f800000u

static inline zc_qsgd_rng_t zc_qsgd_rng(const zc_codec_rng_t *crng)
{
    zc_qsgd_rng_t rng = {
        .key = {(uint32_t)crng->seed, (uint32_t)(crng->seed >> 32)},
        .counter = crng->counter,
        .rank = crng->rank,
        .stream = crng->stream,
    };
    return rng;
}

/*
 * Element i of the tensor draws u_i = philox(ctr, key)[w] with
 *   ctr = ((i >> 6) * 16 + (i & 15), counter, rank, stream),  w = (i >> 4) & 3,
 * so that one Philox call per 16 lanes covers 64 consecutive elements: element
 * offset (i & 63) = w * 16 + lane. SIMD lanes and GPU threads draw without shuffles.
 */
void zc_qsgd_draw_group(const zc_qsgd_rng_t *rng, uint64_t group, uint32_t u[64]);

typedef struct zc_qsgd_kernels {
    /* Largest |x| bit pattern (sign cleared): >= 0x7f800000 means a NaN or Inf. */
    uint32_t (*max_abs_bits)(const float *x, size_t n);
    double (*sum_squares)(const float *x, size_t n);
    /*
     * levels[i] = sign(x[i]) * k with k = floor(r) + [u < frac(r) * 2^32],
     * r = min(|x[i]| * inv, s), u the draw of element first + i. E[k] = r: unbiased.
     */
    void (*quantize)(const float *x, size_t n, uint64_t first, float inv, uint32_t s,
                     const zc_qsgd_rng_t *rng, int32_t *levels);
    /* Packs levels as b-bit sign-magnitude codes (sign in bit b-1), LSB first, into
     * ceil(n * b / 8) bytes. */
    void (*pack)(const int32_t *levels, size_t n, unsigned b, uint8_t *dst);
    /* Inverse of pack, adding code * unit into dst; returns -1 if a magnitude exceeds s. */
    int (*unpack_add)(const uint8_t *src, size_t n, unsigned b, uint32_t s, float unit, float *dst);
    /* dst[i] += x[i] (error feedback's addition, as zc_dtype_add_f32 makes it). */
    void (*add)(const float *x, size_t n, float *dst);
} zc_qsgd_kernels_t;

extern const zc_qsgd_kernels_t zc_qsgd_kernels_scalar;
#if defined(__x86_64__)
extern const zc_qsgd_kernels_t zc_qsgd_kernels_avx2;
extern const zc_qsgd_kernels_t zc_qsgd_kernels_avx512;
#endif

/* The kernels for the current CPU level (zc_cpu_level()). */
const zc_qsgd_kernels_t *zc_qsgd_kernels(void);

/* qsgd.c, shared with qsgd_int.c */

struct zc_config;
/* s from ZIPCCL_QSGD_LEVELS, else from ZIPCCL_QSGD_BITS. */
uint32_t zc_qsgd_levels_from_config(const struct zc_config *cfg);

/* A bucket's scale of @p kind: its largest magnitude (@p max_bits, from max_abs_bits) or L2 norm.
 */
float zc_qsgd_bucket_scale(const zc_qsgd_kernels_t *kern, zc_qsgd_scale_t kind, const float *x,
                           size_t len, uint32_t max_bits);
/*
 * Levels of @p len values (element @p first on) of magnitude at most @p scale,
 * unbiased, in -s..s; all zero for scale 0.
 */
void zc_qsgd_quantize_scaled(const zc_qsgd_kernels_t *kern, const zc_qsgd_rng_t *rng,
                             const float *x, size_t len, uint64_t first, float scale, uint32_t s,
                             int32_t *levels);

/*
 * A level's value, k * scale / s. In float as k * unit, except in buckets where
 * that goes wrong: a subnormal unit (scale < s * FLT_MIN) has lost bits that
 * bias every value of the bucket, up to all of them for unit = 0; and with a
 * scale near FLT_MAX, k * unit can round past it to infinity. There it is done
 * in double and rounded once: k <= s keeps it at most the scale.
 */
typedef struct zc_qsgd_level_scale {
    float unit; /* scale / s */
    float scale;
    uint32_t s;
    int exact; /* compute in double */
} zc_qsgd_level_scale_t;

/* @p alpha (+1 or -1) flips the sign of every value, exactly. */
static inline zc_qsgd_level_scale_t zc_qsgd_level_scale(float scale, uint32_t s, float alpha)
{
    zc_qsgd_level_scale_t ls = {.unit = scale / (float)s, .scale = scale, .s = s};
    ls.exact = (scale > 0 && ls.unit < FLT_MIN) || scale > 0x1p127f;
    ls.unit *= alpha;
    ls.scale *= alpha;
    return ls;
}

static inline float zc_qsgd_level_value(const zc_qsgd_level_scale_t *ls, uint32_t k)
{
    return ls->exact ? (float)((double)k * ls->scale / ls->s) : (float)k * ls->unit;
}

/*
 * Fixed codes of b bits whose levels zc_qsgd_level_value computes in double,
 * added into @p dst; -1 if a magnitude exceeds @p bound.
 */
int zc_qsgd_unpack_add_exact(const uint8_t *src, size_t n, unsigned b, uint32_t bound,
                             const zc_qsgd_level_scale_t *ls, float *dst);

/*
 * Elias omega (the paper's recursive Elias code) of k >= 1, in elias.c. The
 * codes of small values come from tables that elias_gen builds from
 * zc_elias_put_slow at compile time (elias_table.c in the build folder):
 *   zc_elias_enc_table[k], k < 4096: the code's bits (as written, LSB first) | length << 24
 *   zc_elias_dec_table[w]: for the next 12 stream bits w, value | length << 8 of the
 *                          code they begin with, or 0 when that code is longer
 *   zc_elias_triple_table[w]: for QSGD's nonzero records omega(gap) sign omega(k) that
 *                          fit in the 12 bits w: gap | k << 8 | sign << 16 | length << 24,
 *                          or 0 when the record is longer
 */
#define ZC_ELIAS_TABLE_BITS 12
#define ZC_ELIAS_TABLE_SIZE (1u << ZC_ELIAS_TABLE_BITS)

extern const uint32_t zc_elias_enc_table[ZC_ELIAS_TABLE_SIZE];
extern const uint16_t zc_elias_dec_table[ZC_ELIAS_TABLE_SIZE];
extern const uint32_t zc_elias_triple_table[ZC_ELIAS_TABLE_SIZE];

void zc_elias_put_slow(zc_bitwriter_t *w, uint32_t k);
/* Reads one code; returns 0 (never a valid value) on a malformed or overlong code. */
uint32_t zc_elias_get_slow(zc_bitreader_t *r);

static inline unsigned zc_elias_len(uint32_t k)
{
    if (ZC_LIKELY(k < ZC_ELIAS_TABLE_SIZE))
        return zc_elias_enc_table[k] >> 24;
    unsigned len = 1;
    while (k > 1) {
        unsigned b = zc_bitlen32(k);
        len += b;
        k = b - 1;
    }
    return len;
}

static inline void zc_elias_put(zc_bitwriter_t *w, uint32_t k)
{
    if (ZC_LIKELY(k < ZC_ELIAS_TABLE_SIZE)) {
        uint32_t e = zc_elias_enc_table[k];
        zc_bw_put(w, e & 0xffffffu, e >> 24);
    } else {
        zc_elias_put_slow(w, k);
    }
}

static inline uint32_t zc_elias_get(zc_bitreader_t *r)
{
    uint16_t e = zc_elias_dec_table[zc_br_peek(r, ZC_ELIAS_TABLE_BITS)];
    if (ZC_LIKELY(e != 0)) {
        zc_br_skip(r, e >> 8);
        return e & 0xffu;
    }
    return zc_elias_get_slow(r);
}

#endif
