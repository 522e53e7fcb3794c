/*
 * QSGD (codec/qsgd): payload shape and determinism, scalar against AVX2 and AVX-512,
 * the statistics the paper proves (Alistarh et al. 2017, Lemma 3.1), exact
 * sizes, Elias-omega, non-finite input, and hostile payloads.
 *
 * Statistical tests use fixed seeds; their tolerances come from Hoeffding's
 * inequality for the number of samples drawn, stated next to each test, never
 * from the values observed.
 */
#include "codec_test.h"

#include "codec/codec.h"
#include "codec/qsgd/qsgd.h"
#include "common/bitio.h"
#include "common/cpu.h"
#include "common/half.h"
#include "common/philox.h"

#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#define HDR ZC_PAYLOAD_HEADER_BYTES
#define BODY_HDR 8 /* u32 bucket, u16 levels, u8 coding, u8 scale kind */
#define ELIAS_FLAG UINT32_C(0x80000000)

static const zc_qsgd_coding_t all_codings[] = {ZC_QSGD_CODING_FIXED, ZC_QSGD_CODING_ELIAS,
                                               ZC_QSGD_CODING_AUTO};
static const zc_qsgd_scale_t all_scales[] = {ZC_QSGD_SCALE_MAX, ZC_QSGD_SCALE_L2};

/* ------------------------------------------------------------ test helpers */

static unsigned bitlen(uint32_t x)
{
    unsigned n = 0;
    while (x) {
        n++;
        x >>= 1;
    }
    return n;
}

/* Fixed code width for s levels: a sign bit and bitlen(s). */
static unsigned width_for(uint32_t s)
{
    return 1 + bitlen(s);
}

/* Elias-omega length, written independently of the codec: L(1) = 1,
 * L(k) = bitlen(k) + L(bitlen(k) - 1). */
static unsigned omega_len(uint32_t k)
{
    return k <= 1 ? 1 : bitlen(k) + omega_len(bitlen(k) - 1);
}

/* n bits at bit offset pos of buf, least-significant first. */
static uint32_t get_bits(const uint8_t *buf, uint64_t pos, unsigned n)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < n; i++, pos++)
        v |= (uint32_t)(buf[pos >> 3] >> (pos & 7) & 1) << i;
    return v;
}

/* Exact length of a fixed-coded payload: 16 + 8 + sum over buckets of 4 + ceil(len*b/8). */
static size_t fixed_payload_len(uint64_t n, uint32_t d, uint32_t s)
{
    const unsigned b = width_for(s);
    size_t len = HDR + BODY_HDR;
    for (uint64_t first = 0; first < n; first += d) {
        uint64_t m = n - first < d ? n - first : d;
        len += 4 + (m * b + 7) / 8;
    }
    return len;
}

/*
 * The signed levels and per-bucket scales of a fixed-coded payload, parsed with
 * the test's own bit reader (levels[n], scales[ceil(n/d)]).
 */
static void parse_fixed(const payload_t *pl, uint64_t n, int32_t *levels, float *scales)
{
    const uint8_t *body = pl->buf + HDR;
    const uint32_t d = (uint32_t)get_bits(body, 0, 32);
    const uint32_t s = get_bits(body, 32, 16);
    const unsigned b = width_for(s);
    size_t pos = BODY_HDR;

    cr_assert_eq(body[6], ZC_QSGD_CODING_FIXED);
    for (uint64_t first = 0, j = 0; first < n; first += d, j++) {
        uint64_t m = n - first < d ? n - first : d;
        uint32_t word = get_bits(body + pos, 0, 32);
        cr_assert_eq(word & ELIAS_FLAG, 0, "fixed bucket %llu flagged elias",
                     (unsigned long long)j);
        scales[j] = zc_f32_from_bits(word);
        pos += 4;
        for (uint64_t i = 0; i < m; i++) {
            uint32_t code = get_bits(body + pos, i * b, b);
            int32_t k = (int32_t)(code & ((UINT32_C(1) << (b - 1)) - 1));
            levels[first + i] = code >> (b - 1) ? -k : k;
        }
        pos += (m * b + 7) / 8;
    }
    cr_assert_eq(HDR + pos, pl->len);
}

/* Bytes of one Elias-coded bucket's levels (scale word excluded). */
static size_t elias_bucket_bytes(const int32_t *levels, uint64_t m)
{
    uint64_t bits = 0, nnz = 0, prev = UINT64_MAX;
    for (uint64_t i = 0; i < m; i++) {
        if (!levels[i])
            continue;
        bits += omega_len((uint32_t)(i - prev)) + 1 + omega_len((uint32_t)abs(levels[i]));
        prev = i;
        nnz++;
    }
    bits += omega_len((uint32_t)nnz + 1);
    return (size_t)((bits + 7) / 8);
}

static size_t fixed_bucket_bytes(uint64_t m, uint32_t s)
{
    return (size_t)((m * width_for(s) + 7) / 8);
}

/* Bucket scale the codec should use, computed in double. */
static double bucket_scale(const float *x, size_t m, zc_qsgd_scale_t kind)
{
    double r = 0;
    for (size_t i = 0; i < m; i++)
        r = kind == ZC_QSGD_SCALE_MAX ? fmax(r, fabs(x[i])) : r + (double)x[i] * x[i];
    return kind == ZC_QSGD_SCALE_MAX ? r : sqrt(r);
}

static payload_t encode_with(uint32_t s, uint32_t d, zc_qsgd_scale_t scale, zc_qsgd_coding_t coding,
                             const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src, size_t n)
{
    zc_codec_params_t p = qsgd_params(s, d, scale, coding);
    return encode_ok(&p, rng, dtype, src, n);
}

/* Decodes once into zeros and adds the result into the double accumulator. */
static void decode_accumulate(const payload_t *pl, size_t n, float *tmp, double *acc, double *acc2)
{
    memset(tmp, 0, n * sizeof(float));
    cr_assert_eq(zc_codec_decode_add(NULL, pl->buf, pl->len, tmp, n), ZC_OK);
    for (size_t i = 0; i < n; i++) {
        acc[i] += tmp[i];
        if (acc2)
            acc2[i] += (double)tmp[i] * tmp[i];
    }
}

static int have_avx512(void)
{
    return zc_cpu_detect() >= ZC_CPU_AVX512;
}

static int have_avx2(void)
{
    return zc_cpu_detect() >= ZC_CPU_AVX2;
}

/* The SIMD levels this CPU runs, lowest first; returns how many. */
static int simd_levels(zc_cpu_level_t out[ZC_CPU_NLEVELS])
{
    int n = 0;
    for (int l = ZC_CPU_SCALAR + 1; l <= (int)zc_cpu_detect(); l++)
        out[n++] = (zc_cpu_level_t)l;
    return n;
}

/* ---------------------------------------------------- shape, determinism */

Test(qsgd_roundtrip, shape_and_header)
{
    enum { N = 1000 };
    float x[N];
    fill_gauss(x, N, 1, 1.0);
    zc_codec_rng_t rng = test_codec_rng(1, 0, 0);

    for (int c = 0; c < 3; c++) {
        payload_t pl =
            encode_with(91, 100, ZC_QSGD_SCALE_L2, all_codings[c], &rng, ZC_DTYPE_F32, x, N);
        const uint8_t *b = pl.buf + HDR;
        cr_assert_eq(get_bits(b, 0, 32), 100, "bucket field");
        cr_assert_eq(get_bits(b, 32, 16), 91, "levels field");
        cr_assert_eq(b[6], all_codings[c], "coding field");
        cr_assert_eq(b[7], ZC_QSGD_SCALE_L2, "scale field");
        zc_payload_info_t info;
        cr_assert_eq(zc_payload_info(pl.buf, pl.len, &info), ZC_OK);
        cr_assert_eq(info.codec, ZC_CODEC_QSGD);
        cr_assert_eq(info.count, N);
        /* every decoded value is sign(x) * k * scale / s for an integer k in [0, s] */
        float *y = decode_ok(&pl, N);
        for (size_t j = 0; j < N; j += 100) {
            double scale = bucket_scale(x + j, 100, ZC_QSGD_SCALE_L2);
            for (size_t i = j; i < j + 100; i++) {
                double k = y[i] / scale * 91;
                cr_assert(y[i] == 0 || (y[i] < 0) == (x[i] < 0), "sign at %zu", i);
                cr_assert_leq(fabs(k - nearbyint(k)), 1e-3, "level not an integer at %zu", i);
                cr_assert_leq(fabs(k), 91 + 1e-3, "level above s at %zu", i);
            }
        }
        free(y);
        payload_free(&pl);
    }
}

/*
 * Every group of 64 values (one Philox block of 16 calls) must decode
 * differently under two different rng settings. Values round independently;
 * one whose fraction is p rounds the same way in both with probability
 * p^2 + (1 - p)^2, 2/3 on average over Gaussian input, so a group of 40 or
 * more agrees by chance with probability about (2/3)^40 = 1e-7.
 */
static void assert_groups_differ(const payload_t *a, const payload_t *b, size_t n, const char *what)
{
    float *ya = decode_ok(a, n), *yb = decode_ok(b, n);
    for (size_t g = 0; g < n; g += 64) {
        size_t m = n - g < 64 ? n - g : 64;
        cr_assert(!same_bits_f32(ya + g, yb + g, m), "%s: values %zu..%zu drew the same", what, g,
                  g + m - 1);
    }
    free(ya);
    free(yb);
}

static void check_determinism(zc_cpu_level_t level)
{
    enum { N = 1000 };
    float x[N];
    fill_gauss(x, N, 2, 1.0);
    const zc_codec_rng_t base = {
        .seed = 0x1234567887654321ull, .rank = 3, .stream = 1, .counter = 10};
    zc_codec_rng_t variants[5];
    static const char *const names[5] = {"counter", "rank", "seed low", "seed high", "stream"};
    for (int v = 0; v < 5; v++)
        variants[v] = base;
    variants[0].counter++;
    variants[1].rank++;
    variants[2].seed ^= 1;
    variants[3].seed ^= UINT64_C(1) << 63; /* the high key word matters too */
    variants[4].stream++;

    cr_assert_eq(zc_cpu_set_level(level), ZC_OK);
    for (int c = 0; c < 3; c++) {
        for (int sc = 0; sc < 2; sc++) {
            payload_t a =
                encode_with(7, 128, all_scales[sc], all_codings[c], &base, ZC_DTYPE_F32, x, N);
            payload_t b =
                encode_with(7, 128, all_scales[sc], all_codings[c], &base, ZC_DTYPE_F32, x, N);
            cr_assert_eq(a.len, b.len);
            cr_assert_eq(memcmp(a.buf, b.buf, a.len), 0, "same rng, different payloads");
            for (int v = 0; v < 5; v++) {
                payload_t o = encode_with(7, 128, all_scales[sc], all_codings[c], &variants[v],
                                          ZC_DTYPE_F32, x, N);
                assert_groups_differ(&a, &o, N, names[v]);
                payload_free(&o);
            }
            payload_free(&a);
            payload_free(&b);
        }
    }
    cr_assert_eq(zc_cpu_set_level(zc_cpu_detect()), ZC_OK);
}

Test(qsgd_roundtrip, determinism_scalar)
{
    check_determinism(ZC_CPU_SCALAR);
}

Test(qsgd_roundtrip, determinism_avx512)
{
    if (!have_avx512())
        cr_skip_test("no AVX-512 on this CPU");
    check_determinism(ZC_CPU_AVX512);
}

Test(qsgd_roundtrip, determinism_avx2)
{
    if (!have_avx2())
        cr_skip_test("no AVX2 on this CPU");
    check_determinism(ZC_CPU_AVX2);
}

Test(qsgd_roundtrip, decode_accumulates)
{
    enum { N = 777 };
    float x[N], start[N];
    fill_gauss(x, N, 3, 1.0);
    fill_gauss(start, N, 4, 1.0);
    zc_codec_rng_t rng = test_codec_rng(5, 0, 0);

    for (int c = 0; c < 3; c++) {
        payload_t pl =
            encode_with(7, 64, ZC_QSGD_SCALE_MAX, all_codings[c], &rng, ZC_DTYPE_F32, x, N);
        float *once = decode_ok(&pl, N);
        float *twice = decode_ok(&pl, N);
        float acc[N];
        memcpy(acc, start, sizeof(acc));
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, twice, N), ZC_OK);
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, acc, N), ZC_OK);
        for (int i = 0; i < N; i++) {
            cr_assert_eq(twice[i], 2.0f * once[i], "coding %d: twice at %d", c, i);
            cr_assert_eq(acc[i], start[i] + once[i], "coding %d: sum at %d", c, i);
        }
        free(once);
        free(twice);
        payload_free(&pl);
    }
}

/*
 * Known answer for the documented draw mapping (qsgd.h, docs/codecs.md): value
 * i draws word (i >> 4) & 3 of Philox4x32-10 at counter ((i >> 6) * 16 +
 * (i & 15), counter, rank, stream) under key (seed low, seed high), and its
 * level is floor(r) + [u < frac(r) 2^32]. Inputs are chosen so that r = |x| s /
 * scale is exact in float: bucket max 2^E, other values m 2^(E-4), m = 0..16,
 * so r = m s / 16. E = -140 puts s / scale past FLT_MAX: the encoder's
 * small-scale path must draw the same numbers. d = 100 is not a multiple of 64.
 */
static uint32_t ref_draw(const zc_codec_rng_t *rng, uint64_t i)
{
    const uint32_t ctr[4] = {(uint32_t)((i >> 6) * 16 + (i & 15)), rng->counter, rng->rank,
                             rng->stream};
    const uint32_t key[2] = {(uint32_t)rng->seed, (uint32_t)(rng->seed >> 32)};
    uint32_t out[4];
    zc_philox4x32_10(ctr, key, out);
    return out[(i >> 4) & 3];
}

static void check_draw_mapping(zc_cpu_level_t level)
{
    enum { N = 1000, D = 100 };
    static const int exps[] = {0, -140, 20, -100, -140};
    static const uint32_t levels[] = {1, 7, 91, 65535};
    float x[N];
    double r[N];
    test_rng_t tr = {161};

    for (size_t first = 0, j = 0; first < N; first += D, j++) {
        int e = exps[j % 5];
        for (size_t i = first; i < first + D; i++) {
            unsigned m = i == first ? 16 : (unsigned)(test_rng_next(&tr) % 17);
            x[i] = ldexpf((float)m, e - 4) * (test_rng_next(&tr) & 1 ? -1.0f : 1.0f);
            r[i] = m / 16.0;
        }
    }
    cr_assert_eq(zc_cpu_set_level(level), ZC_OK);
    for (size_t li = 0; li < 4; li++) {
        const uint32_t s = levels[li];
        const zc_codec_rng_t rng = {
            .seed = 0xfedcba9876543210ull + li, .rank = 5, .stream = 6, .counter = 7};
        payload_t pl =
            encode_with(s, D, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED, &rng, ZC_DTYPE_F32, x, N);
        int32_t lv[N];
        float scales[N / D];
        parse_fixed(&pl, N, lv, scales);
        for (size_t i = 0; i < N; i++) {
            double ri = r[i] * s, fl = floor(ri);
            uint32_t t = (uint32_t)((ri - fl) * 4294967296.0);
            int32_t k = (int32_t)fl + (ref_draw(&rng, i) < t);
            int32_t want = signbit(x[i]) ? -k : k;
            cr_assert_eq(lv[i], want, "level %s s %u: value %zu (%a) has level %d, want %d",
                         zc_cpu_level_name(level), s, i, x[i], lv[i], want);
        }
        payload_free(&pl);
    }
    cr_assert_eq(zc_cpu_set_level(zc_cpu_detect()), ZC_OK);
}

Test(qsgd_rng, documented_mapping_scalar)
{
    check_draw_mapping(ZC_CPU_SCALAR);
}

Test(qsgd_rng, documented_mapping_avx512)
{
    if (!have_avx512())
        cr_skip_test("no AVX-512 on this CPU");
    check_draw_mapping(ZC_CPU_AVX512);
}

Test(qsgd_rng, documented_mapping_avx2)
{
    if (!have_avx2())
        cr_skip_test("no AVX2 on this CPU");
    check_draw_mapping(ZC_CPU_AVX2);
}

/*
 * The format's limit is 2^40 values (the decoder refuses more): bound is 0
 * there, encode refuses up front without reading src (only 64 values exist
 * behind it: the -asan variant traps any read past them), decode refuses
 * before touching dst.
 */
Test(qsgd_roundtrip, count_limit)
{
    const uint64_t limit = UINT64_C(1) << 40;
    float x[64] = {1.0f};
    uint8_t out[4096];
    size_t len = 5;

    for (int c = 0; c < 3; c++) {
        zc_codec_params_t p = qsgd_params(7, 64, ZC_QSGD_SCALE_MAX, all_codings[c]);
        cr_assert_gt(zc_codec_bound(&p, limit), limit / 4);
        cr_assert_eq(zc_codec_bound(&p, limit + 1), 0);
        cr_assert_eq(zc_codec_bound(&p, UINT64_MAX), 0);
        zc_status_t st =
            zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, x, limit + 1, out, sizeof(out), &len);
        cr_assert_eq(st, ZC_ERR_INVALID_ARG, "coding %d: %s", c, zc_status_string(st));
        cr_assert_eq(len, 5);

        payload_t pl = encode_ok(&p, NULL, ZC_DTYPE_F32, x, 64);
        zc_store_le64(pl.buf + 8, limit + 1);
        float y[64] = {0};
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, y, limit + 1), ZC_ERR_CORRUPT);
        for (int i = 0; i < 64; i++)
            cr_assert_eq(y[i], 0.0f);
        payload_free(&pl);
    }
}

/* --------------------------------------- scalar against every SIMD level */

/*
 * Inputs that reach every branch: Gaussian segments of 97 values at magnitudes
 * from subnormal to 1e30, all-zero segments, exact zeros, and (optionally) a
 * NaN; the segment length is prime so buckets straddle magnitudes.
 */
static void fill_mixed(float *x, size_t n, uint64_t seed, int nonfinite)
{
    static const float mags[] = {1.0f, 1e-3f, 0.0f, 1e30f, 1e-40f, 3.0f, 1e-20f, 0x1p-140f};
    test_rng_t r = {seed};
    for (size_t i = 0; i < n; i++) {
        float m = mags[(i / 97) % (sizeof(mags) / sizeof(mags[0]))];
        x[i] = (float)(m * test_rng_gauss(&r));
        if (i % 13 == 5)
            x[i] = 0.0f;
        if (i % 29 == 7)
            x[i] = -0.0f;
    }
    if (nonfinite && n > 300)
        x[250] = NAN;
}

static void to_dtype(const float *x, size_t n, zc_dtype_t dtype, void *out)
{
    uint16_t *h = out;
    if (dtype == ZC_DTYPE_F32)
        memcpy(out, x, n * sizeof(float));
    for (size_t i = 0; dtype != ZC_DTYPE_F32 && i < n; i++)
        h[i] = dtype == ZC_DTYPE_F16 ? zc_f32_to_f16(x[i]) : zc_f32_to_bf16(x[i]);
}

static payload_t encode_at(zc_cpu_level_t level, const zc_codec_params_t *p,
                           const zc_codec_rng_t *rng, zc_dtype_t dtype, const void *src, size_t n)
{
    cr_assert_eq(zc_cpu_set_level(level), ZC_OK);
    return encode_ok(p, rng, dtype, src, n);
}

static void decode_at(zc_cpu_level_t level, const payload_t *pl, float *dst, size_t n)
{
    cr_assert_eq(zc_cpu_set_level(level), ZC_OK);
    cr_assert_eq(zc_codec_decode_add(NULL, pl->buf, pl->len, dst, n), ZC_OK);
}

static void simd_matches_scalar(zc_qsgd_coding_t coding)
{
    static const size_t sizes[] = {0, 1, 2, 15, 16, 17, 63, 64, 65, 1009, 4099, 100003};
    static const uint32_t buckets[] = {1, 64, 100, 512, 5000};
    static const zc_dtype_t dtypes[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16};
    /* the levels of b = 2, 3, 4, 5, 8, 17 bits, and two that are not 2^k - 1 */
    static const uint32_t levels[] = {1, 3, 7, 15, 127, 65535, 5, 91};
    const size_t nmax = 100003;
    zc_cpu_level_t simd[ZC_CPU_NLEVELS];
    const int nsimd = simd_levels(simd);

    if (nsimd == 0)
        cr_skip_test("no SIMD level on this CPU");
    float *x = xmalloc(nmax * sizeof(float));
    void *src = xmalloc(nmax * sizeof(float));
    float *start = xmalloc(nmax * sizeof(float));
    float *ys = xmalloc(nmax * sizeof(float)), *yv = xmalloc(nmax * sizeof(float));
    fill_gauss(start, nmax, 99, 1.0);

    for (size_t ni = 0; ni < sizeof(sizes) / sizeof(sizes[0]); ni++) {
        const size_t n = sizes[ni];
        const int big = n > 10000;
        fill_mixed(x, n, 1000 + n, ni % 2);
        for (size_t t = 0; t < 3; t++) {
            if (big && dtypes[t] != ZC_DTYPE_F32)
                continue; /* the conversions are not kernels; keep the run short */
            to_dtype(x, n, dtypes[t], src);
            for (size_t bi = 0; bi < 5; bi++) {
                if (big && (buckets[bi] == 1 || buckets[bi] == 64))
                    continue;
                for (size_t li = 0; li < 8; li++) {
                    if (big && li % 2)
                        continue;
                    for (int sc = 0; sc < 2; sc++) {
                        zc_codec_params_t p =
                            qsgd_params(levels[li], buckets[bi], all_scales[sc], coding);
                        zc_codec_rng_t rng = {.seed = n * 31 + li,
                                              .rank = (uint32_t)bi,
                                              .stream = (uint32_t)sc,
                                              .counter = (uint32_t)t};
                        payload_t a = encode_at(ZC_CPU_SCALAR, &p, &rng, dtypes[t], src, n);
                        memcpy(ys, start, n * sizeof(float));
                        decode_at(ZC_CPU_SCALAR, &a, ys, n);
                        for (int lv = 0; lv < nsimd; lv++) {
                            const char *ln = zc_cpu_level_name(simd[lv]);
                            payload_t v = encode_at(simd[lv], &p, &rng, dtypes[t], src, n);
                            cr_assert_eq(a.len, v.len,
                                         "%s n %zu d %u s %u scale %d dtype %zu: lengths", ln, n,
                                         buckets[bi], levels[li], sc, t);
                            cr_assert_eq(
                                memcmp(a.buf, v.buf, a.len), 0,
                                "%s n %zu d %u s %u scale %d dtype %zu: payload bytes differ", ln,
                                n, buckets[bi], levels[li], sc, t);
                            memcpy(yv, start, n * sizeof(float));
                            decode_at(simd[lv], &a, yv, n);
                            cr_assert(same_bits_f32(ys, yv, n),
                                      "%s n %zu d %u s %u scale %d dtype %zu: decodes differ", ln,
                                      n, buckets[bi], levels[li], sc, t);
                            payload_free(&v);
                        }
                        payload_free(&a);
                    }
                }
            }
        }
    }
    free(x);
    free(src);
    free(start);
    free(ys);
    free(yv);
    cr_assert_eq(zc_cpu_set_level(zc_cpu_detect()), ZC_OK);
}

Test(qsgd_simd, fixed)
{
    simd_matches_scalar(ZC_QSGD_CODING_FIXED);
}
Test(qsgd_simd, elias)
{
    simd_matches_scalar(ZC_QSGD_CODING_ELIAS);
}
Test(qsgd_simd, auto_coding)
{
    simd_matches_scalar(ZC_QSGD_CODING_AUTO);
}

#if defined(__x86_64__)
/* The kernels themselves, on offsets and lengths the payload tests may not line up. */
static void kernels_match_scalar(const zc_qsgd_kernels_t *kv)
{
    const zc_qsgd_kernels_t *ks = &zc_qsgd_kernels_scalar;
    enum { N = 300 };
    float x[N];
    fill_mixed(x, N, 77, 0);
    fill_gauss(x, 97, 78, 1.0);
    zc_qsgd_rng_t rng = {.key = {1, 2}, .counter = 3, .rank = 4, .stream = 5};

    for (size_t off = 0; off < 40; off += 3) {
        for (size_t n = 0; n + off <= N; n += 17) {
            cr_assert_eq(ks->max_abs_bits(x + off, n), kv->max_abs_bits(x + off, n), "max %zu", n);
            double a = ks->sum_squares(x + off, n), b = kv->sum_squares(x + off, n);
            cr_assert_eq(memcmp(&a, &b, sizeof(a)), 0, "sum_squares off %zu n %zu", off, n);
            for (uint64_t first = 0; first < 200; first += 37) {
                int32_t la[N], lb[N];
                ks->quantize(x + off, n, first, 6.5f, 7, &rng, la);
                kv->quantize(x + off, n, first, 6.5f, 7, &rng, lb);
                cr_assert(n == 0 || memcmp(la, lb, n * sizeof(int32_t)) == 0,
                          "quantize off %zu n %zu first %llu", off, n, (unsigned long long)first);
            }
            float sa[N], sb[N];
            for (size_t i = 0; i < n; i++)
                sa[i] = sb[i] = x[N - 1 - i];
            ks->add(x + off, n, sa);
            kv->add(x + off, n, sb);
            for (size_t i = 0; i < n; i++)
                cr_assert_eq(zc_f32_bits(sa[i]), zc_f32_bits(x[N - 1 - i] + x[off + i]),
                             "add off %zu n %zu at %zu", off, n, i);
            cr_assert(same_bits_f32(sa, sb, n), "add off %zu n %zu", off, n);
        }
    }
    /* pack and unpack on random level vectors for every width */
    test_rng_t r = {5};
    for (unsigned b = 2; b <= 17; b++) {
        const uint32_t s = (UINT32_C(1) << (b - 1)) - 1;
        for (size_t n = 0; n < 80; n += 7) {
            int32_t lv[80];
            uint8_t pa[200], pb[200];
            for (size_t i = 0; i < n; i++)
                lv[i] = (int32_t)(test_rng_next(&r) % (2 * s + 1)) - (int32_t)s;
            memset(pa, 0x5a, sizeof(pa));
            memset(pb, 0x5a, sizeof(pb));
            ks->pack(lv, n, b, pa);
            kv->pack(lv, n, b, pb);
            cr_assert_eq(memcmp(pa, pb, sizeof(pa)), 0, "pack b %u n %zu", b, n);
            float da[80] = {0}, db[80] = {0};
            cr_assert_eq(ks->unpack_add(pa, n, b, s, 0.25f, da), 0);
            cr_assert_eq(kv->unpack_add(pa, n, b, s, 0.25f, db), 0);
            cr_assert(same_bits_f32(da, db, n), "unpack b %u n %zu", b, n);
            for (size_t i = 0; i < n; i++)
                cr_assert_eq(da[i], 0.25f * (float)lv[i], "unpack b %u at %zu", b, i);
        }
    }
}

/*
 * quantize against the documented draws (zc_qsgd_draw_group), value by value:
 * r spread over [0, s] so that frac(r) 2^32 covers both halves of the uint32
 * range (AVX2 converts to signed only), the edges 0.5 (t = 2^31 exactly) and
 * just below 1, and starts whose block counter (first >> 6) * 16 wraps in 32 bits.
 */
static void quantize_matches_draws(const zc_qsgd_kernels_t *kv)
{
    enum { N = 64 * 9 + 23 };
    static const uint64_t firsts[] = {
        0, 5, 64, 1000003, (UINT64_C(1) << 28) * 64 - 70, (UINT64_C(1) << 34) + 41};
    static const uint32_t levels[] = {1, 7, 65535};
    float x[N];
    test_rng_t tr = {4242};
    const zc_qsgd_rng_t rng = {
        .key = {0x9abcdef0u, 0x12345678u}, .counter = 11, .rank = 2, .stream = 1};
    size_t high = 0;

    for (size_t li = 0; li < 3; li++) {
        const uint32_t s = levels[li];
        const float inv = (float)s; /* r = |x| s, |x| <= 1 */
        for (size_t i = 0; i < N; i++) {
            float f = (float)(test_rng_next(&tr) >> 40) * 0x1p-24f;
            x[i] = test_rng_next(&tr) & 1 ? -f : f;
        }
        x[3] = 0.5f / inv;
        x[4] = -nextafterf(1.0f, 0.0f);
        x[5] = 1.0f;
        x[6] = 2.0f; /* clamped to s */
        x[7] = -0.0f;
        x[70] = nextafterf(0.5f, 1.0f);
        x[71] = nextafterf(0.5f, 0.0f);
        for (size_t fi = 0; fi < sizeof(firsts) / sizeof(firsts[0]); fi++) {
            const uint64_t first = firsts[fi];
            int32_t la[N], lb[N];
            zc_qsgd_kernels_scalar.quantize(x, N, first, inv, s, &rng, la);
            kv->quantize(x, N, first, inv, s, &rng, lb);
            uint32_t u[64];
            uint64_t group = UINT64_MAX;
            for (size_t i = 0; i < N; i++) {
                uint64_t e = first + i;
                if (e >> 6 != group) {
                    group = e >> 6;
                    zc_qsgd_draw_group(&rng, group, u);
                }
                float r = fminf(fabsf(x[i]) * inv, (float)s);
                uint32_t k = (uint32_t)r;
                uint32_t t = (uint32_t)((r - (float)k) * 4294967296.0f);
                high += t >= UINT32_C(0x80000000);
                k += u[e & 63] < t;
                int32_t want = signbit(x[i]) ? -(int32_t)k : (int32_t)k;
                cr_assert_eq(la[i], want, "scalar s %u first %llu value %zu", s,
                             (unsigned long long)first, i);
                cr_assert_eq(lb[i], want, "simd s %u first %llu value %zu (%a): %d, want %d", s,
                             (unsigned long long)first, i, x[i], lb[i], want);
            }
        }
    }
    cr_assert_gt(high, 1000, "too few values with frac * 2^32 >= 2^31");
}

static void check_kernels(zc_cpu_level_t level, const zc_qsgd_kernels_t *kv)
{
    cr_assert_eq(zc_cpu_set_level(level), ZC_OK);
    cr_assert_eq(zc_qsgd_kernels(), kv, "dispatch at %s", zc_cpu_level_name(level));
    kernels_match_scalar(kv);
    quantize_matches_draws(kv);
    cr_assert_eq(zc_cpu_set_level(zc_cpu_detect()), ZC_OK);
}

Test(qsgd_simd, kernels_direct_avx2)
{
    if (!have_avx2())
        cr_skip_test("no AVX2 on this CPU");
    check_kernels(ZC_CPU_AVX2, &zc_qsgd_kernels_avx2);
}

Test(qsgd_simd, kernels_direct_avx512)
{
    if (!have_avx512())
        cr_skip_test("no AVX-512 on this CPU");
    check_kernels(ZC_CPU_AVX512, &zc_qsgd_kernels_avx512);
}
#endif

/* ------------------------------------------------------------ statistics */

/*
 * Unbiasedness: E[decode] = x (Lemma 3.1 (i)).
 *
 * Each decoded value is unit * k with k in {floor(r), floor(r) + 1}, unit =
 * scale / s, so it lies in an interval of width unit. Over T independent
 * encodes (different counters: disjoint Philox counter blocks), Hoeffding
 * gives P(|mean - x| >= c * unit / sqrt(T)) <= 2 exp(-2 c^2). With c = 3
 * (six standard deviations of the worst case, sd <= unit / (2 sqrt(T))) that
 * is 3.1e-8 per coordinate; over the N * 4 configurations * 2 tests checked
 * here (union bound) about 2.5e-4: a false failure is that unlikely.
 *
 * Aggregate bias, signed by each value's sign: S = sum_i sign(x_i) (mean_i -
 * x_i) / unit_i is (1/T) times a sum of N T independent terms each in an
 * interval of width 1, so P(|S| >= 3 sqrt(N / T)) <= 2 exp(-18) = 3e-8. That
 * catches a systematic rounding bias of 3 / sqrt(N T) = 0.002 level per value.
 *
 * Float rounding adds at most a few ulp of the scale per value (unit = scale/s
 * and k * unit are each rounded): 4 * 2^-24 * scale is added to the bound.
 */
#define UNBIAS_T 2000
#define UNBIAS_C 3.0

static void check_unbiased(const float *x, const void *src, zc_dtype_t dtype, size_t n, uint32_t s,
                           uint32_t d, zc_qsgd_scale_t kind, zc_qsgd_coding_t coding, int trials,
                           uint64_t seed)
{
    double *acc = calloc(n, sizeof(double));
    float *tmp = zeros_f32(n);
    cr_assert_not_null(acc);

    for (int t = 0; t < trials; t++) {
        zc_codec_rng_t rng = test_codec_rng(seed, 0, (uint32_t)t);
        payload_t pl = encode_with(s, d, kind, coding, &rng, dtype, src, n);
        decode_accumulate(&pl, n, tmp, acc, NULL);
        payload_free(&pl);
    }
    double signed_bias = 0;
    size_t scored = 0;
    for (size_t first = 0; first < n; first += d) {
        size_t m = n - first < d ? n - first : d;
        double scale = bucket_scale(x + first, m, kind);
        double unit = scale / s;
        double tol = UNBIAS_C * unit / sqrt(trials) + 4 * 0x1p-24 * scale;
        for (size_t i = first; i < first + m; i++) {
            double mean = acc[i] / trials;
            cr_assert_leq(fabs(mean - x[i]), tol,
                          "s %u d %u scale %d: value %zu mean %.9g, x %.9g, tolerance %.3g", s, d,
                          kind, i, mean, x[i], tol);
            if (unit > 0 && x[i] != 0) {
                signed_bias += (x[i] > 0 ? 1 : -1) * (mean - x[i]) / unit;
                scored++;
            }
        }
    }
    double sb_tol = UNBIAS_C * sqrt((double)scored / trials) + 4 * 0x1p-24 * (double)scored * s;
    cr_assert_leq(fabs(signed_bias), sb_tol, "s %u scale %d: signed bias %.4g levels > %.4g", s,
                  kind, signed_bias, sb_tol);
    free(acc);
    free(tmp);
}

Test(qsgd_stats, unbiased)
{
    enum { N = 1000 };
    float x[N];
    fill_gauss(x, N, 21, 1.0);
    /* a few values in the top level's interval and exact levels */
    x[3] = 0;
    x[4] = -1e-6f;
    /* d = 256: the last bucket has 232 values */
    check_unbiased(x, x, ZC_DTYPE_F32, N, 7, 256, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED, UNBIAS_T,
                   100);
    check_unbiased(x, x, ZC_DTYPE_F32, N, 16, 256, ZC_QSGD_SCALE_L2, ZC_QSGD_CODING_ELIAS, UNBIAS_T,
                   200);
    check_unbiased(x, x, ZC_DTYPE_F32, N, 1, 100, ZC_QSGD_SCALE_L2, ZC_QSGD_CODING_AUTO, UNBIAS_T,
                   300);
    check_unbiased(x, x, ZC_DTYPE_F32, N, 65535, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED,
                   UNBIAS_T, 400);
}

/*
 * f16 and bf16 input: the estimate is unbiased for the f32 value of each half
 * (same bound as above, fewer trials), and the payload is exactly that of the
 * f32 values the halves widen to.
 */
Test(qsgd_stats, half_inputs)
{
    enum { N = 600, T = 1000 };
    float x[N], wide[N];
    uint16_t h[N];
    fill_gauss(x, N, 22, 3.0);
    static const zc_dtype_t dtypes[] = {ZC_DTYPE_F16, ZC_DTYPE_BF16};

    for (int t = 0; t < 2; t++) {
        to_dtype(x, N, dtypes[t], h);
        for (int i = 0; i < N; i++)
            wide[i] = dtypes[t] == ZC_DTYPE_F16 ? zc_f16_to_f32(h[i]) : zc_bf16_to_f32(h[i]);
        for (int c = 0; c < 3; c++) {
            zc_codec_rng_t rng = test_codec_rng(8, 1, 2);
            payload_t a =
                encode_with(7, 128, ZC_QSGD_SCALE_L2, all_codings[c], &rng, dtypes[t], h, N);
            payload_t b =
                encode_with(7, 128, ZC_QSGD_SCALE_L2, all_codings[c], &rng, ZC_DTYPE_F32, wide, N);
            cr_assert_eq(a.len, b.len);
            cr_assert_eq(memcmp(a.buf, b.buf, a.len), 0, "dtype %d coding %d: payloads differ", t,
                         c);
            payload_free(&a);
            payload_free(&b);
        }
        check_unbiased(wide, h, dtypes[t], N, 7, 128, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_AUTO, T,
                       500 + t);
    }
}

/*
 * Variance, Lemma 3.1 (ii) with bucket d in place of n (§4):
 * E||Q(v) - v||^2 <= min(d / s^2, sqrt(d) / s) ||v||^2 for L2 scaling.
 *
 * Per bucket, X = sum_i e_i^2 with independent e_i^2 in [0, unit^2] (unit =
 * ||v|| / s). The mean of X over T independent encodes exceeds E[X] by
 * 3 unit^2 sqrt(d / T) or more with probability <= exp(-18) (Hoeffding, d T
 * terms each in an interval of width unit^2 / T). Two checks:
 *  - the measured mean is within that of the exact expectation
 *    E[X] = sum_i unit^2 p_i (1 - p_i), p_i = frac(|v_i| / unit) (two-sided:
 *    catches a wrong rounding probability in either direction);
 *  - the measured mean is at most the lemma's bound plus that sampling error.
 * The exact expectation also gives the expected decoded variance for max
 * scaling, checked the same way.
 */
static void check_variance(uint32_t s, uint32_t d, zc_qsgd_scale_t kind, int trials, uint64_t seed,
                           double *ratio_p)
{
    enum { NB = 4 };
    const size_t n = (size_t)NB * d;
    float *x = xmalloc(n * sizeof(float)), *y = zeros_f32(n);
    double sq_err[NB] = {0};
    fill_gauss(x, n, seed, 1.0);

    for (int t = 0; t < trials; t++) {
        zc_codec_rng_t rng = test_codec_rng(seed, 0, (uint32_t)t);
        payload_t pl = encode_with(s, d, kind, ZC_QSGD_CODING_FIXED, &rng, ZC_DTYPE_F32, x, n);
        memset(y, 0, n * sizeof(float));
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, y, n), ZC_OK);
        for (size_t i = 0; i < n; i++)
            sq_err[i / d] += ((double)y[i] - x[i]) * ((double)y[i] - x[i]);
        payload_free(&pl);
    }
    double ratio = 0;
    for (int j = 0; j < NB; j++) {
        const float *v = x + (size_t)j * d;
        double norm2 = 0, expect = 0;
        for (size_t i = 0; i < d; i++)
            norm2 += (double)v[i] * v[i];
        double unit = bucket_scale(v, d, kind) / s;
        for (size_t i = 0; i < d; i++) {
            double r = fabs(v[i]) / unit, p = r - floor(r);
            expect += unit * unit * p * (1 - p);
        }
        double mean = sq_err[j] / trials;
        double tol = 3 * unit * unit * sqrt((double)d / trials);
        cr_assert_leq(
            fabs(mean - expect), tol,
            "s %u d %u scale %d bucket %d: E||Q-v||^2 measured %.6g, exact %.6g, tol %.3g", s, d,
            kind, j, mean, expect, tol);
        if (kind == ZC_QSGD_SCALE_L2) {
            double lemma = fmin((double)d / ((double)s * s), sqrt((double)d) / s) * norm2;
            cr_assert_leq(mean, lemma + tol, "s %u d %u bucket %d: %.6g above Lemma 3.1's %.6g", s,
                          d, j, mean, lemma);
        }
        ratio += mean / norm2 / NB;
    }
    free(x);
    free(y);
    if (ratio_p)
        *ratio_p = ratio;
}

Test(qsgd_stats, variance_lemma_3_1)
{
    double r4, r16, rmax;
    check_variance(4, 512, ZC_QSGD_SCALE_L2, 400, 31, &r4);
    check_variance(16, 512, ZC_QSGD_SCALE_L2, 400, 32, &r16);
    check_variance(1, 64, ZC_QSGD_SCALE_L2, 400, 33, NULL);
    check_variance(7, 512, ZC_QSGD_SCALE_MAX, 400, 34, &rmax);
    cr_log_info("relative variance, Gaussian, d 512: l2 s=4 %.3f, l2 s=16 %.3f, max s=7 %.4f", r4,
                r16, rmax);
}

/* ------------------------------------------------------------------ sizes */

/* Fixed coding: exactly 16 + 8 + sum over buckets (4 + ceil(len * b / 8)) bytes. */
Test(qsgd_size, fixed_exact)
{
    static const size_t sizes[] = {0, 1, 2, 7, 63, 64, 65, 1009, 4096, 10007};
    static const uint32_t buckets[] = {1, 3, 64, 100, 128, 512, 4096};
    static const uint32_t levels[] = {1, 2, 3, 5, 7, 15, 16, 91, 127, 255, 65535};
    float *x = xmalloc(10007 * sizeof(float));
    fill_gauss(x, 10007, 41, 1.0);

    for (size_t ni = 0; ni < sizeof(sizes) / sizeof(sizes[0]); ni++) {
        for (size_t bi = 0; bi < sizeof(buckets) / sizeof(buckets[0]); bi++) {
            for (size_t li = 0; li < sizeof(levels) / sizeof(levels[0]); li++) {
                payload_t pl = encode_with(levels[li], buckets[bi], ZC_QSGD_SCALE_MAX,
                                           ZC_QSGD_CODING_FIXED, NULL, ZC_DTYPE_F32, x, sizes[ni]);
                cr_assert_eq(pl.len, fixed_payload_len(sizes[ni], buckets[bi], levels[li]),
                             "n %zu d %u s %u: %zu bytes", sizes[ni], buckets[bi], levels[li],
                             pl.len);
                payload_free(&pl);
            }
        }
    }
    free(x);

    /* full buckets: b + 32/d bits per value, e.g. 4.0625 at 4 bits, d = 512 */
    enum { N = 512 * 16 };
    float *g = xmalloc(N * sizeof(float));
    fill_gauss(g, N, 42, 1.0);
    static const unsigned bits[] = {2, 4, 8};
    static const double want[] = {2.0625, 4.0625, 8.0625};
    for (int i = 0; i < 3; i++) {
        payload_t pl = encode_with(zc_qsgd_levels_for_bits(bits[i]), 512, ZC_QSGD_SCALE_MAX,
                                   ZC_QSGD_CODING_FIXED, NULL, ZC_DTYPE_F32, g, N);
        double per = (double)(pl.len - HDR - BODY_HDR) * 8 / N;
        cr_assert_eq(per, want[i], "%u bits: %.6f bits per value", bits[i], per);
        payload_free(&pl);
    }
    free(g);
}

/*
 * Elias at s ~ sqrt(d) (Corollary 3.3): d = 8192, s = 91, L2 scaling, Gaussian
 * input, 16 buckets. The reference measures 2.77 bits per value (algorithms.md
 * A.6); the bound is the paper's 2.8 plus this payload's own overhead (24
 * header bytes and up to 7 padding bits per bucket). One value costs 0 bits
 * (level 0) or a gap, sign and level code of at most about 10 bits at this
 * density: a standard deviation under 3 bits, so under 3 / sqrt(131072) =
 * 0.0083 for the mean, and 2.77 sits 3.6 of those below the bound. Below the
 * entropy floor (2.16, A.6) would mean levels were lost.
 *
 * The exact length is also checked: the Elias bucket sizes recomputed from the
 * levels of the fixed payload drawn with the same rng, and auto = per bucket
 * the smaller of the two (ties to fixed), never larger than either coding.
 */
Test(qsgd_size, elias_sqrt_d)
{
    enum { D = 8192, NB = 16, N = D * NB, S = 91 };
    float *x = xmalloc(N * sizeof(float));
    fill_gauss(x, N, 51, 1.0);
    zc_codec_rng_t rng = test_codec_rng(52, 0, 0);

    payload_t fx =
        encode_with(S, D, ZC_QSGD_SCALE_L2, ZC_QSGD_CODING_FIXED, &rng, ZC_DTYPE_F32, x, N);
    payload_t el =
        encode_with(S, D, ZC_QSGD_SCALE_L2, ZC_QSGD_CODING_ELIAS, &rng, ZC_DTYPE_F32, x, N);
    payload_t au =
        encode_with(S, D, ZC_QSGD_SCALE_L2, ZC_QSGD_CODING_AUTO, &rng, ZC_DTYPE_F32, x, N);

    double bits = (double)el.len * 8 / N;
    double overhead = (double)(HDR + BODY_HDR) * 8 / N + 7.0 * NB / N;
    cr_log_info("elias, d %d s %d: %.4f bits per value (%zu bytes)", D, S, bits, el.len);
    cr_assert_leq(bits, 2.8 + overhead, "%.4f bits per value", bits);
    cr_assert_geq(bits, 2.16, "%.4f bits per value: below the entropy floor", bits);

    int32_t *lv = xmalloc(N * sizeof(int32_t));
    float scales[NB];
    parse_fixed(&fx, N, lv, scales);
    size_t want_el = HDR + BODY_HDR, want_au = HDR + BODY_HDR;
    for (int j = 0; j < NB; j++) {
        size_t e = elias_bucket_bytes(lv + (size_t)j * D, D), f = fixed_bucket_bytes(D, S);
        want_el += 4 + e;
        want_au += 4 + (e < f ? e : f);
    }
    cr_assert_eq(el.len, want_el, "elias payload %zu bytes, levels say %zu", el.len, want_el);
    cr_assert_eq(au.len, want_au, "auto payload %zu bytes, levels say %zu", au.len, want_au);
    cr_assert_leq(au.len, el.len);
    cr_assert_leq(au.len, fx.len);

    float *yf = decode_ok(&fx, N), *ye = decode_ok(&el, N), *ya = decode_ok(&au, N);
    cr_assert(same_bits_f32(yf, ye, N), "elias decodes other values than fixed");
    cr_assert(same_bits_f32(yf, ya, N), "auto decodes other values than fixed");
    free(yf);
    free(ye);
    free(ya);
    free(lv);
    free(x);
    payload_free(&fx);
    payload_free(&el);
    payload_free(&au);
}

/*
 * auto against fixed and elias over many settings and a sparse input (ReLU-like:
 * half the values zero) where buckets go either way: never larger than either,
 * exactly the per-bucket minimum, and the same decoded values.
 */
Test(qsgd_size, auto_is_per_bucket_min)
{
    enum { N = 5003 };
    float x[N];
    fill_gauss(x, N, 61, 1.0);
    for (int i = 0; i < N; i++)
        if ((i / 300) % 2 && x[i] < 0.5f)
            x[i] = 0; /* sparse stretches */
    static const uint32_t levels[] = {1, 3, 7, 16, 91, 127, 65535};
    static const uint32_t buckets[] = {1, 16, 100, 512, 2048};

    for (size_t li = 0; li < 7; li++) {
        for (size_t bi = 0; bi < 5; bi++) {
            for (int sc = 0; sc < 2; sc++) {
                const uint32_t s = levels[li], d = buckets[bi];
                zc_codec_rng_t rng = test_codec_rng(li, (uint32_t)bi, (uint32_t)sc);
                payload_t fx = encode_with(s, d, all_scales[sc], ZC_QSGD_CODING_FIXED, &rng,
                                           ZC_DTYPE_F32, x, N);
                payload_t el = encode_with(s, d, all_scales[sc], ZC_QSGD_CODING_ELIAS, &rng,
                                           ZC_DTYPE_F32, x, N);
                payload_t au = encode_with(s, d, all_scales[sc], ZC_QSGD_CODING_AUTO, &rng,
                                           ZC_DTYPE_F32, x, N);
                int32_t *lv = xmalloc(N * sizeof(int32_t));
                float *scales = xmalloc((N / d + 1) * sizeof(float));
                parse_fixed(&fx, N, lv, scales);
                size_t want_el = HDR + BODY_HDR, want_au = HDR + BODY_HDR;
                for (size_t first = 0; first < N; first += d) {
                    size_t m = N - first < d ? N - first : d;
                    size_t e = elias_bucket_bytes(lv + first, m), f = fixed_bucket_bytes(m, s);
                    want_el += 4 + e;
                    want_au += 4 + (e < f ? e : f);
                }
                cr_assert_eq(el.len, want_el, "s %u d %u: elias %zu, want %zu", s, d, el.len,
                             want_el);
                cr_assert_eq(au.len, want_au, "s %u d %u: auto %zu, want %zu", s, d, au.len,
                             want_au);
                cr_assert_leq(au.len, fx.len < el.len ? fx.len : el.len);
                float *yf = decode_ok(&fx, N), *ye = decode_ok(&el, N), *ya = decode_ok(&au, N);
                cr_assert(same_bits_f32(yf, ye, N), "s %u d %u: elias values differ", s, d);
                cr_assert(same_bits_f32(yf, ya, N), "s %u d %u: auto values differ", s, d);
                free(yf);
                free(ye);
                free(ya);
                free(lv);
                free(scales);
                payload_free(&fx);
                payload_free(&el);
                payload_free(&au);
            }
        }
    }
}

/* -------------------------------------------------------------- special input */

Test(qsgd_special, empty_and_single)
{
    for (int c = 0; c < 3; c++) {
        payload_t pl =
            encode_with(7, 512, ZC_QSGD_SCALE_MAX, all_codings[c], NULL, ZC_DTYPE_F32, NULL, 0);
        cr_assert_eq(pl.len, HDR + BODY_HDR, "coding %d: empty payload %zu bytes", c, pl.len);
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, NULL, 0), ZC_OK);
        payload_free(&pl);

        /* one value, max scaling: |x| is the scale, r = |x| * (s / |x|) is s up to float
         * rounding, so the level is s (or, when r rounds just below s, s - 1 with probability
         * below s * 2^-23): decoded within one level plus float rounding */
        static const float one[] = {1.0f, -2.5f, 3e-30f, -7e30f, 0x1p-126f};
        for (int i = 0; i < 5; i++) {
            for (uint32_t s = 1; s <= 65535; s = s * 5 + 2) {
                zc_codec_rng_t rng = test_codec_rng(1, 2, 3);
                payload_t p1 = encode_with(s, 512, ZC_QSGD_SCALE_MAX, all_codings[c], &rng,
                                           ZC_DTYPE_F32, &one[i], 1);
                float *y = decode_ok(&p1, 1);
                cr_assert_leq(fabs((double)y[0] - one[i]), fabs(one[i]) * (1.0 / s + 0x1p-22),
                              "coding %d s %u: %a decoded to %a", c, s, one[i], y[0]);
                free(y);
                payload_free(&p1);
            }
        }
    }
}

/* Primes and n not a multiple of d: every value lands where it belongs. */
Test(qsgd_special, odd_sizes)
{
    static const size_t sizes[] = {2, 3, 5, 7, 11, 13, 101, 1009, 7919};
    static const uint32_t buckets[] = {2, 7, 64, 100, 1000};
    float *x = xmalloc(7919 * sizeof(float));
    /* distinct magnitudes per value, so a misplaced value shows */
    for (int i = 0; i < 7919; i++)
        x[i] = (float)((i % 2 ? -1 : 1) * (1 + i % 17));

    for (size_t ni = 0; ni < 9; ni++) {
        for (size_t bi = 0; bi < 5; bi++) {
            for (int c = 0; c < 3; c++) {
                /* s = 65535, max scaling: every value within scale / s of x */
                payload_t pl = encode_with(65535, buckets[bi], ZC_QSGD_SCALE_MAX, all_codings[c],
                                           NULL, ZC_DTYPE_F32, x, sizes[ni]);
                float *y = decode_ok(&pl, sizes[ni]);
                for (size_t i = 0; i < sizes[ni]; i++)
                    cr_assert_leq(fabs(y[i] - x[i]), 17.0 / 65535 + 1e-5,
                                  "n %zu d %u coding %d: %zu is %g, want %g", sizes[ni],
                                  buckets[bi], c, i, y[i], x[i]);
                free(y);
                payload_free(&pl);
            }
        }
    }
    free(x);
}

Test(qsgd_special, zero_buckets_exact)
{
    enum { N = 700, D = 100 };
    float x[N];
    fill_gauss(x, N, 71, 1.0);
    for (int i = 100; i < 200; i++)
        x[i] = 0.0f;
    for (int i = 300; i < 400; i++)
        x[i] = i % 2 ? -0.0f : 0.0f;
    for (int i = 600; i < N; i++)
        x[i] = 0.0f; /* the tail bucket, too */

    for (int c = 0; c < 3; c++) {
        for (int sc = 0; sc < 2; sc++) {
            for (uint32_t s = 1; s <= 65535; s = s * 4 + 3) {
                zc_codec_rng_t rng = test_codec_rng(s, 0, 0);
                payload_t pl =
                    encode_with(s, D, all_scales[sc], all_codings[c], &rng, ZC_DTYPE_F32, x, N);
                float *y = decode_ok(&pl, N);
                for (int i = 0; i < N; i++) {
                    int zero_bucket = (i >= 100 && i < 200) || (i >= 300 && i < 400) || i >= 600;
                    if (zero_bucket)
                        cr_assert(y[i] == 0.0f && !signbit(y[i]),
                                  "coding %d scale %d s %u: %d is %a", c, sc, s, i, y[i]);
                    else
                        cr_assert(isfinite(y[i]), "coding %d: %d not finite", c, i);
                }
                free(y);
                payload_free(&pl);
            }
        }
    }
}

/*
 * A NaN or an infinity anywhere in a bucket goes out of band: it decodes to
 * itself and every other value, in its bucket too, decodes exactly as with a
 * 0 in its place, for every coding, scale and dtype.
 */
Test(qsgd_special, nonfinite_buckets)
{
    enum { N = 550, D = 100 };
    static const float bad[] = {NAN, INFINITY, -INFINITY};
    static const int where[] = {0, 1, 57, 99}; /* offset inside bucket 2 (values 200..299) */
    static const zc_dtype_t dtypes[] = {ZC_DTYPE_F32, ZC_DTYPE_F16, ZC_DTYPE_BF16};
    float x[N], xb[N], clean_x[N];
    uint16_t h[N];
    fill_gauss(clean_x, N, 81, 1.0);

    for (int t = 0; t < 3; t++) {
        for (int c = 0; c < 3; c++) {
            for (int sc = 0; sc < 2; sc++) {
                for (int bv = 0; bv < 3; bv++) {
                    for (int w = 0; w < 4; w++) {
                        memcpy(x, clean_x, sizeof(x));
                        x[200 + where[w]] = bad[bv];
                        x[N - 1] = bad[(bv + 1) % 3]; /* and in the short tail bucket */
                        const void *src = x;
                        if (dtypes[t] != ZC_DTYPE_F32) {
                            to_dtype(x, N, dtypes[t], h);
                            src = h;
                        }
                        zc_codec_rng_t rng = test_codec_rng(9, 0, (uint32_t)w);
                        payload_t pl = encode_with(7, D, all_scales[sc], all_codings[c], &rng,
                                                   dtypes[t], src, N);
                        memcpy(xb, clean_x, sizeof(xb));
                        xb[200 + where[w]] = 0;
                        xb[N - 1] = 0;
                        const void *srcb = xb;
                        uint16_t hb[N];
                        if (dtypes[t] != ZC_DTYPE_F32) {
                            to_dtype(xb, N, dtypes[t], hb);
                            srcb = hb;
                        }
                        payload_t plb = encode_with(7, D, all_scales[sc], all_codings[c], &rng,
                                                    dtypes[t], srcb, N);
                        float *y = decode_ok(&pl, N), *yb = decode_ok(&plb, N);
                        for (int i = 0; i < N; i++) {
                            float want = yb[i];
                            if (i == 200 + where[w])
                                want = bad[bv];
                            else if (i == N - 1)
                                want = bad[(bv + 1) % 3];
                            cr_assert(isnan(want) ? isnan(y[i]) : y[i] == want,
                                      "dtype %d coding %d scale %d: %d is %g, want %g", t, c, sc, i,
                                      y[i], want);
                        }
                        free(y);
                        free(yb);
                        payload_free(&plb);
                        payload_free(&pl);
                    }
                }
            }
        }
    }
}

/*
 * Extreme magnitudes: finite input never decodes to an infinity, and every
 * decoded value is k * scale / s for its level k to within float rounding of
 * the result (2^-22 relative, plus 2^-149 absolute below FLT_MIN). Buckets at
 * 2^-140 (subnormal scale), 2^-120 (subnormal unit), 1, 2^60 and just under
 * 2^64: magnitudes from 2^64 up go out of band, exact (test_nonfinite.c).
 */
Test(qsgd_special, extreme_magnitudes)
{
    enum { D = 16, NB = 6, N = D * NB };
    static const float mags[NB] = {0x1p-140f, 0x1p-120f, 1.0f, 0x1p60f, 0x1.fffffep63f, 0x1p-149f};
    float x[N];
    test_rng_t r = {91};
    for (int j = 0; j < NB; j++) {
        for (int i = 0; i < D; i++) {
            double u = test_rng_uniform(&r) * 2 - 1;
            x[j * D + i] = (float)(mags[j] * u);
        }
        x[j * D] = mags[j]; /* the bucket's max is the magnitude itself */
    }
    static const uint32_t levels[] = {1, 3, 7, 25, 91, 127, 65535};

    for (size_t li = 0; li < 7; li++) {
        const uint32_t s = levels[li];
        for (int c = 0; c < 3; c++) {
            for (int sc = 0; sc < 2; sc++) {
                zc_codec_rng_t rng = test_codec_rng(s, 0, 0);
                payload_t pl =
                    encode_with(s, D, all_scales[sc], all_codings[c], &rng, ZC_DTYPE_F32, x, N);
                payload_t fx = encode_with(s, D, all_scales[sc], ZC_QSGD_CODING_FIXED, &rng,
                                           ZC_DTYPE_F32, x, N);
                int32_t lv[N];
                float scales[NB];
                parse_fixed(&fx, N, lv, scales);
                float *y = decode_ok(&pl, N);
                for (int i = 0; i < N; i++) {
                    double want = (double)lv[i] * scales[i / D] / s;
                    double tol = 0x1p-22 * fabs(want) + 0x1p-149;
                    cr_assert(isfinite(y[i]),
                              "s %u coding %d scale %d: value %d (%a) decoded to %a", s, c, sc, i,
                              x[i], y[i]);
                    cr_assert_leq(
                        fabs(y[i] - want), tol,
                        "s %u coding %d scale %d: value %d level %d scale %a: %a, want %a", s, c,
                        sc, i, lv[i], scales[i / D], y[i], want);
                }
                free(y);
                payload_free(&pl);
                payload_free(&fx);
            }
        }
    }
}

/* ----------------------------------------------------------------- hostile */

static zc_status_t decode_status(const uint8_t *buf, size_t len, size_t n)
{
    uint8_t *copy = exact_copy(buf, len);
    float *dst = zeros_f32(n);
    zc_status_t st = zc_codec_decode_add(NULL, copy, len, dst, n);
    free(copy);
    free(dst);
    return st;
}

Test(qsgd_hostile, truncated_and_extended)
{
    enum { N = 45 };
    float x[N];
    fill_gauss(x, N, 101, 1.0);
    x[10] = x[11] = x[12] = 0;

    for (int c = 0; c < 3; c++) {
        for (uint32_t s = 1; s <= 65535; s = s * 6 + 1) {
            zc_codec_rng_t rng = test_codec_rng(s, 1, 1);
            payload_t pl =
                encode_with(s, 8, ZC_QSGD_SCALE_L2, all_codings[c], &rng, ZC_DTYPE_F32, x, N);
            for (size_t len = 0; len < pl.len; len++) {
                zc_status_t st = decode_status(pl.buf, len, N);
                cr_assert_eq(st, ZC_ERR_CORRUPT, "coding %d s %u: cut to %zu of %zu: %s", c, s, len,
                             pl.len, zc_status_string(st));
            }
            for (size_t extra = 1; extra <= 9; extra++) {
                for (int fill = 0; fill < 2; fill++) {
                    uint8_t *longer = padded_copy(pl.buf, pl.len, extra, fill ? 0xff : 0);
                    zc_status_t st = decode_status(longer, pl.len + extra, N);
                    cr_assert_eq(st, ZC_ERR_CORRUPT, "coding %d s %u: %zu extra bytes: %s", c, s,
                                 extra, zc_status_string(st));
                    free(longer);
                }
            }
            payload_free(&pl);
        }
    }
}

/* Random flips of 1 to 4 bits in the body: an error or a success, never a crash
 * (the -asan variant checks every access). */
Test(qsgd_hostile, random_bit_flips)
{
    enum { N = 333, ROUNDS = 1500 };
    float x[N];
    fill_gauss(x, N, 111, 1.0);
    for (int i = 40; i < 80; i++)
        x[i] = 0;
    x[200] = NAN; /* a NaN bucket too */
    test_rng_t r = {112};

    for (int c = 0; c < 3; c++) {
        for (int sc = 0; sc < 2; sc++) {
            payload_t pl =
                encode_with(5, 32, all_scales[sc], all_codings[c], NULL, ZC_DTYPE_F32, x, N);
            int ok = 0, corrupt = 0;
            for (int round = 0; round < ROUNDS; round++) {
                uint8_t *bad = exact_copy(pl.buf, pl.len);
                int flips = 1 + (int)(test_rng_next(&r) % 4);
                for (int f = 0; f < flips; f++) {
                    uint64_t bit = test_rng_next(&r) % ((pl.len - HDR) * 8);
                    bad[HDR + bit / 8] ^= (uint8_t)(1u << (bit % 8));
                }
                zc_status_t st = decode_status(bad, pl.len, N);
                cr_assert(st == ZC_OK || st == ZC_ERR_CORRUPT, "coding %d round %d: %s", c, round,
                          zc_status_string(st));
                ok += st == ZC_OK;
                corrupt += st == ZC_ERR_CORRUPT;
                free(bad);
            }
            /* s = 5 leaves code space unused, and every length is checked: some flips must be
             * caught */
            cr_assert_gt(corrupt, 0, "coding %d: no flip detected", c);
            payload_free(&pl);
        }
    }
}

/*
 * Fixed coding, s = 5 (b = 4 bits, magnitudes 6 and 7 unused): every single bit
 * flip inside the codes decodes iff the flipped code's magnitude is still <= s;
 * a magnitude above s is ZC_ERR_CORRUPT. Flips in the padding change nothing.
 */
Test(qsgd_hostile, fixed_flip_above_s)
{
    enum { N = 61, D = 20, S = 5, B = 4 };
    float x[N];
    fill_gauss(x, N, 121, 1.0);
    payload_t pl =
        encode_with(S, D, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED, NULL, ZC_DTYPE_F32, x, N);
    float *clean = decode_ok(&pl, N);
    int above = 0;
    size_t pos = HDR + BODY_HDR;

    for (size_t first = 0; first < N; first += D) {
        size_t m = N - first < D ? N - first : D;
        pos += 4;
        size_t bytes = (m * B + 7) / 8;
        for (size_t bit = 0; bit < bytes * 8; bit++) {
            uint8_t *bad = exact_copy(pl.buf, pl.len);
            bad[pos + bit / 8] ^= (uint8_t)(1u << (bit % 8));
            float *y = zeros_f32(N);
            zc_status_t st = zc_codec_decode_add(NULL, bad, pl.len, y, N);
            if (bit < m * B) {
                uint32_t code = get_bits(bad + pos, bit / B * B, B);
                if ((code & 7) > S) {
                    above++;
                    cr_assert_eq(st, ZC_ERR_CORRUPT, "bucket at %zu bit %zu: magnitude %u: %s",
                                 first, bit, code & 7, zc_status_string(st));
                } else {
                    cr_assert_eq(st, ZC_OK, "bucket at %zu bit %zu: magnitude %u: %s", first, bit,
                                 code & 7, zc_status_string(st));
                    size_t i = first + bit / B;
                    cr_assert(y[i] != clean[i] || (y[i] == 0 && clean[i] == 0),
                              "flip at value %zu changed nothing", i);
                }
            } else {
                cr_assert_eq(st, ZC_OK, "padding bit flip: %s", zc_status_string(st));
                cr_assert(same_bits_f32(y, clean, N));
            }
            free(y);
            free(bad);
        }
        pos += bytes;
    }
    cr_assert_gt(above, 0, "no flip produced a magnitude above s");
    free(clean);
    payload_free(&pl);
}

/* Random bodies behind a valid header: an error or a success, never a crash. */
Test(qsgd_hostile, garbage_bodies)
{
    static const uint64_t counts[] = {0, 1, 37, 1000};
    test_rng_t r = {131};
    uint8_t buf[HDR + 600];

    for (int round = 0; round < 4000; round++) {
        uint64_t n = counts[round % 4];
        size_t body = (size_t)(test_rng_next(&r) % 600);
        buf[0] = 'Z';
        buf[1] = 'C';
        buf[2] = 1;
        buf[3] = ZC_CODEC_QSGD;
        zc_store_le32(buf + 4, 0);
        zc_store_le64(buf + 8, n);
        for (size_t i = 0; i < body; i++)
            buf[HDR + i] = (uint8_t)test_rng_next(&r);
        if (body >= BODY_HDR && round % 3) {
            /* a plausible body header, so that the buckets get parsed */
            zc_store_le32(buf + HDR, 1 + (uint32_t)(test_rng_next(&r) % 64));
            buf[HDR + 4] = (uint8_t)(1 + test_rng_next(&r) % 200);
            buf[HDR + 5] = round % 7 == 0;
            buf[HDR + 6] = (uint8_t)(test_rng_next(&r) % 3);
            buf[HDR + 7] = (uint8_t)(test_rng_next(&r) % 2);
        }
        zc_status_t st = decode_status(buf, HDR + body, n);
        cr_assert(st == ZC_OK || st == ZC_ERR_CORRUPT, "round %d: %s", round, zc_status_string(st));
    }
}

/* Hand-built Elias payloads: one bucket of 8 values, s = 7, scale 1. */
typedef struct elias_body {
    uint8_t buf[256];
    zc_bitwriter_t w;
} elias_body_t;

static void elias_begin(elias_body_t *e, uint32_t scale_bits, uint32_t flag)
{
    uint8_t *p = e->buf;
    memset(e->buf, 0, sizeof(e->buf));
    p[0] = 'Z';
    p[1] = 'C';
    p[2] = 1;
    p[3] = ZC_CODEC_QSGD;
    zc_store_le64(p + 8, 8);
    zc_store_le32(p + HDR, 8);
    p[HDR + 4] = 7;
    p[HDR + 5] = 0;
    p[HDR + 6] = ZC_QSGD_CODING_ELIAS;
    p[HDR + 7] = ZC_QSGD_SCALE_MAX;
    zc_store_le32(p + HDR + BODY_HDR, scale_bits | flag);
    zc_bw_init(&e->w, p + HDR + BODY_HDR + 4, sizeof(e->buf) - HDR - BODY_HDR - 4);
}

static void elias_nonzero(elias_body_t *e, uint32_t gap, int neg, uint32_t k)
{
    zc_elias_put(&e->w, gap);
    zc_bw_put(&e->w, (uint32_t)neg, 1);
    zc_elias_put(&e->w, k);
}

static zc_status_t elias_finish(elias_body_t *e, float out[8])
{
    size_t n = zc_bw_flush(&e->w);
    cr_assert_neq(n, SIZE_MAX);
    uint8_t *copy = exact_copy(e->buf, HDR + BODY_HDR + 4 + n);
    memset(out, 0, 8 * sizeof(float));
    zc_status_t st = zc_codec_decode_add(NULL, copy, HDR + BODY_HDR + 4 + n, out, 8);
    free(copy);
    return st;
}

Test(qsgd_hostile, crafted_elias)
{
    elias_body_t e;
    float y[8];
    const uint32_t one = 0x3f800000u; /* 1.0f */

    /* control: a valid payload, 3 nonzeros at 0, 4, 7, decodes as built */
    elias_begin(&e, one, ELIAS_FLAG);
    zc_elias_put(&e.w, 3 + 1);
    elias_nonzero(&e, 1, 0, 7);
    elias_nonzero(&e, 4, 1, 2);
    elias_nonzero(&e, 3, 0, 1);
    cr_assert_eq(elias_finish(&e, y), ZC_OK);
    static const float want[8] = {1.0f, 0, 0, 0, -2.0f / 7, 0, 0, 1.0f / 7};
    for (int i = 0; i < 8; i++)
        cr_assert_float_eq(y[i], want[i], 1e-7, "value %d: %g", i, y[i]);

    /* all 8 nonzero is fine; 9 is more nonzeros than values */
    elias_begin(&e, one, ELIAS_FLAG);
    zc_elias_put(&e.w, 8 + 1);
    for (int i = 0; i < 8; i++)
        elias_nonzero(&e, 1, 0, 1);
    cr_assert_eq(elias_finish(&e, y), ZC_OK);
    elias_begin(&e, one, ELIAS_FLAG);
    zc_elias_put(&e.w, 9 + 1);
    for (int i = 0; i < 9; i++)
        elias_nonzero(&e, 1, 0, 1);
    cr_assert_eq(elias_finish(&e, y), ZC_ERR_CORRUPT, "nnz 9 in a bucket of 8");
    elias_begin(&e, one, ELIAS_FLAG);
    zc_elias_put(&e.w, UINT32_MAX); /* nnz + 1 wraps if added carelessly */
    cr_assert_eq(elias_finish(&e, y), ZC_ERR_CORRUPT, "nnz 2^32-2");

    /* a gap past the bucket's end */
    elias_begin(&e, one, ELIAS_FLAG);
    zc_elias_put(&e.w, 2 + 1);
    elias_nonzero(&e, 5, 0, 1);
    elias_nonzero(&e, 3, 0, 1); /* position 7 is the last; 5 + 3 - 1 = 7 is fine */
    cr_assert_eq(elias_finish(&e, y), ZC_OK);
    elias_begin(&e, one, ELIAS_FLAG);
    zc_elias_put(&e.w, 2 + 1);
    elias_nonzero(&e, 5, 0, 1);
    elias_nonzero(&e, 4, 0, 1); /* position 8 */
    cr_assert_eq(elias_finish(&e, y), ZC_ERR_CORRUPT, "gap past the bucket");
    elias_begin(&e, one, ELIAS_FLAG);
    zc_elias_put(&e.w, 1 + 1);
    elias_nonzero(&e, UINT32_MAX, 0, 1);
    cr_assert_eq(elias_finish(&e, y), ZC_ERR_CORRUPT, "gap 2^32-1");

    /* a level above s */
    elias_begin(&e, one, ELIAS_FLAG);
    zc_elias_put(&e.w, 1 + 1);
    elias_nonzero(&e, 1, 0, 8);
    cr_assert_eq(elias_finish(&e, y), ZC_ERR_CORRUPT, "level 8 > s = 7");

    /* fewer nonzeros than announced: the body ends early */
    elias_begin(&e, one, ELIAS_FLAG);
    zc_elias_put(&e.w, 4 + 1);
    elias_nonzero(&e, 1, 0, 1);
    cr_assert_eq(elias_finish(&e, y), ZC_ERR_CORRUPT, "body ends before nnz codes");

    /* an overlong omega code (all ones) */
    elias_begin(&e, one, ELIAS_FLAG);
    for (int i = 0; i < 40; i++)
        zc_bw_put(&e.w, 0xffffffffu, 32);
    cr_assert_eq(elias_finish(&e, y), ZC_ERR_CORRUPT, "overlong code");

    /* a NaN bucket must carry no nonzeros */
    elias_begin(&e, 0x7fc00000u, ELIAS_FLAG);
    zc_elias_put(&e.w, 1);
    cr_assert_eq(elias_finish(&e, y), ZC_OK);
    for (int i = 0; i < 8; i++)
        cr_assert(isnan(y[i]));
    elias_begin(&e, 0x7fc00000u, ELIAS_FLAG);
    zc_elias_put(&e.w, 1 + 1);
    elias_nonzero(&e, 1, 0, 1);
    cr_assert_eq(elias_finish(&e, y), ZC_ERR_CORRUPT, "NaN bucket with a nonzero");

    /* an infinite scale never comes from the encoder */
    elias_begin(&e, 0x7f800000u, ELIAS_FLAG);
    zc_elias_put(&e.w, 1);
    cr_assert_eq(elias_finish(&e, y), ZC_ERR_CORRUPT, "infinite scale");

    /* a fixed-coded bucket in a payload that says elias */
    elias_begin(&e, one, 0);
    zc_bw_put(&e.w, 0, 32);
    cr_assert_eq(elias_finish(&e, y), ZC_ERR_CORRUPT, "fixed bucket in an elias payload");
}

/* Bad body-header fields: rejected before any bucket is read. */
Test(qsgd_hostile, body_header_fields)
{
    enum { N = 20 };
    float x[N];
    fill_gauss(x, N, 141, 1.0);
    payload_t pl =
        encode_with(7, 8, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED, NULL, ZC_DTYPE_F32, x, N);
    struct {
        int offset, size;
        uint32_t value;
        const char *what;
    } bad[] = {
        {0, 4, 0, "bucket 0"},
        {0, 4, (UINT32_C(1) << 24) + 1, "bucket 2^24+1"},
        {0, 4, 7, "bucket 7 (other length)"},
        {4, 2, 0, "levels 0"},
        {6, 1, 3, "coding 3"},
        {6, 1, ZC_QSGD_CODING_ELIAS, "coding elias on fixed buckets"},
        {7, 1, 2, "scale kind 2"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t *p = exact_copy(pl.buf, pl.len);
        if (bad[i].size == 4)
            zc_store_le32(p + HDR + bad[i].offset, bad[i].value);
        else if (bad[i].size == 2) {
            p[HDR + bad[i].offset] = (uint8_t)bad[i].value;
            p[HDR + bad[i].offset + 1] = (uint8_t)(bad[i].value >> 8);
        } else {
            p[HDR + bad[i].offset] = (uint8_t)bad[i].value;
        }
        float y[N] = {0};
        cr_assert_eq(zc_codec_decode_add(NULL, p, pl.len, y, N), ZC_ERR_CORRUPT, "%s", bad[i].what);
        for (int j = 0; j < N; j++)
            cr_assert_eq(y[j], 0.0f, "%s: output changed", bad[i].what);
        free(p);
    }
    payload_free(&pl);
}

/* ------------------------------------------------------------------- elias */

/* ------------------------------------------------- Elias bytes, reference */

/* A bit-serial writer, one bit at a time, least-significant first in each byte. */
typedef struct ref_bits {
    uint8_t *buf;
    uint64_t pos;
} ref_bits_t;

static void ref_put(ref_bits_t *r, uint32_t v, unsigned n)
{
    for (unsigned i = 0; i < n; i++, r->pos++)
        if (v >> i & 1)
            r->buf[r->pos >> 3] |= (uint8_t)(1u << (r->pos & 7));
}

/*
 * Elias omega as docs/codecs.md states it, without the codec's tables: groups
 * g_m .. g_1 (g_1 = k, g_{j+1} = bitlen(g_j) - 1 down to 1), each a 1 bit and
 * its low bitlen - 1 bits, then a 0 bit.
 */
static void ref_omega(ref_bits_t *r, uint32_t k)
{
    uint32_t g[8];
    int m = 0;
    for (; k > 1; k = bitlen(k) - 1)
        g[m++] = k;
    while (m-- > 0) {
        ref_put(r, 1, 1);
        ref_put(r, g[m], bitlen(g[m]) - 1);
    }
    ref_put(r, 0, 1);
}

/*
 * The Elias payload that the fixed payload @p fx (same input, rng and params
 * but the coding) implies, built bit by bit: the levels and scales of the two
 * codings are the same draws.
 */
static payload_t ref_elias_payload(const payload_t *fx, uint64_t n, uint32_t d, uint32_t s)
{
    const unsigned b = width_for(s);
    payload_t out = {calloc(1, fx->len * 4 + 64), 0};
    cr_assert_not_null(out.buf);
    memcpy(out.buf, fx->buf, HDR + BODY_HDR);
    out.buf[HDR + 6] = ZC_QSGD_CODING_ELIAS;
    size_t in = HDR + BODY_HDR, at = HDR + BODY_HDR;
    for (uint64_t first = 0; first < n; first += d) {
        const uint64_t m = n - first < d ? n - first : d;
        zc_store_le32(out.buf + at, zc_load_le32(fx->buf + in) | ELIAS_FLAG);
        in += 4;
        at += 4;
        ref_bits_t r = {out.buf + at, 0};
        uint64_t nnz = 0;
        for (uint64_t i = 0; i < m; i++)
            nnz += (get_bits(fx->buf + in, i * b, b) & ((1u << (b - 1)) - 1)) != 0;
        ref_omega(&r, (uint32_t)nnz + 1);
        uint64_t prev = UINT64_MAX;
        for (uint64_t i = 0; i < m; i++) {
            uint32_t code = get_bits(fx->buf + in, i * b, b), k = code & ((1u << (b - 1)) - 1);
            if (k == 0)
                continue;
            ref_omega(&r, (uint32_t)(i - prev));
            ref_put(&r, code >> (b - 1), 1);
            ref_omega(&r, k);
            prev = i;
        }
        in += (m * b + 7) / 8;
        at += (r.pos + 7) / 8;
    }
    out.len = at;
    return out;
}

/*
 * Elias payloads, byte for byte, against the reference writer above: the
 * 4-bit default, the theory setting (s = 91, d = 8192, L2), levels and gaps
 * past the codec's 4096-entry tables (s = 65535; a bucket of zeros but one),
 * a short tail bucket, and a buffer of exactly the payload's length (the
 * bounds-checked writer for the buckets near its end).
 */
Test(elias, payload_bytes_match_reference)
{
    static const struct {
        uint32_t s, d;
        zc_qsgd_scale_t scale;
        size_t n;
        int sparse;
    } cases[] = {
        {7, 512, ZC_QSGD_SCALE_MAX, 5000, 0},    {91, 8192, ZC_QSGD_SCALE_L2, 20000, 0},
        {65535, 64, ZC_QSGD_SCALE_MAX, 1000, 0}, {7, 8192, ZC_QSGD_SCALE_MAX, 16384 + 77, 1},
        {1, 100, ZC_QSGD_SCALE_MAX, 999, 0},
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        const size_t n = cases[c].n;
        float *x = xmalloc(n * sizeof(float));
        fill_gauss(x, n, 40 + c, 1.0);
        if (cases[c].sparse) /* one large value a bucket: gaps of thousands */
            for (size_t i = 0; i < n; i++)
                x[i] = i % 8192 == 4100 ? 1.0f : x[i] * 1e-6f;
        zc_codec_rng_t rng = test_codec_rng(5, 2, (uint32_t)c);
        zc_codec_params_t pf =
            qsgd_params(cases[c].s, cases[c].d, cases[c].scale, ZC_QSGD_CODING_FIXED);
        zc_codec_params_t pe =
            qsgd_params(cases[c].s, cases[c].d, cases[c].scale, ZC_QSGD_CODING_ELIAS);
        payload_t fx = encode_ok(&pf, &rng, ZC_DTYPE_F32, x, n);
        payload_t el = encode_ok(&pe, &rng, ZC_DTYPE_F32, x, n);
        payload_t want = ref_elias_payload(&fx, n, cases[c].d, cases[c].s);
        cr_assert_eq(el.len, want.len, "case %zu: length %zu, reference %zu", c, el.len, want.len);
        cr_assert_arr_eq(el.buf, want.buf, el.len, "case %zu: bytes", c);
        uint8_t *tight = xmalloc(el.len);
        size_t len = 0;
        cr_assert_eq(zc_codec_encode(&pe, NULL, &rng, ZC_DTYPE_F32, x, n, tight, el.len, &len),
                     ZC_OK, "case %zu: a buffer of the payload's length", c);
        cr_assert_eq(len, el.len);
        cr_assert_arr_eq(tight, el.buf, len, "case %zu: bytes, tight buffer", c);
        free(tight);
        payload_free(&want);
        payload_free(&el);
        payload_free(&fx);
        free(x);
    }
}

/* ----------------------------------------------------- error feedback, fused */

/*
 * One error-feedback step at each of two states: @p fused encodes into a
 * bound-sized buffer (ops.encode_ef), @p generic into one byte less, which
 * sends it down the generic path (addition, scan, encode, decode_add(-1)).
 * Both must give the same payload, residual bits and out-of-band count.
 */
static void ef_step_pair(const zc_codec_params_t *p, zc_codec_state_t *fused,
                         zc_codec_state_t *generic, const zc_codec_rng_t *rng, const float *x,
                         size_t n, const char *what)
{
    const size_t bound = zc_codec_bound(p, n);
    uint8_t *a = xmalloc(bound), *b = xmalloc(bound);
    size_t la = 0, lb = 0;
    cr_assert_eq(zc_codec_encode(p, fused, rng, ZC_DTYPE_F32, x, n, a, bound, &la), ZC_OK, "%s",
                 what);
    cr_assert_eq(zc_codec_encode(p, generic, rng, ZC_DTYPE_F32, x, n, b, bound - 1, &lb), ZC_OK,
                 "%s", what);
    cr_assert_eq(la, lb, "%s: payload length", what);
    cr_assert_arr_eq(a, b, la, "%s: payload bytes", what);
    cr_assert(same_bits_f32(fused->residual, generic->residual, n), "%s: residual", what);
    cr_assert_eq(fused->oob_values, generic->oob_values, "%s: out-of-band count", what);
    free(a);
    free(b);
}

/*
 * The fused error feedback against the generic path, step after step, for
 * every coding and scale: clean steps, a step with NaN, infinities and
 * magnitudes past 2^64 (sent out of band), one with more of them than the
 * section holds (the rest turn buckets into NaN, whose residual is cleared;
 * finite ones near FLT_MAX give scales whose levels are computed in double),
 * and one of subnormal buckets.
 */
Test(qsgd_ef, fused_matches_generic)
{
    enum { N = 5000, D = 512 }; /* a short tail bucket; the section holds 16 + 4 */
    float *x = xmalloc(N * sizeof(float));
    for (int c = 0; c < 3; c++) {
        for (int sc = 0; sc < 2; sc++) {
            zc_codec_params_t p = qsgd_params(7, D, all_scales[sc], all_codings[c]);
            p.qsgd.error_feedback = 1;
            zc_codec_state_t *fused = NULL, *generic = NULL;
            cr_assert_eq(zc_codec_state_create(&p, N, &fused), ZC_OK);
            cr_assert_eq(zc_codec_state_create(&p, N, &generic), ZC_OK);
            for (int t = 0; t < 6; t++) {
                fill_gauss(x, N, 300 + (uint64_t)t, 1.0);
                if (t == 1) {
                    x[3] = NAN;
                    x[700] = INFINITY;
                    x[701] = -0x1p70f;
                    x[N - 1] = -INFINITY;
                } else if (t == 2) {
                    for (int i = 0; i < 30; i++)
                        x[100 + 97 * i] = i % 3 ? NAN : INFINITY;
                    x[4000] = 3e38f;
                    x[4001] = -3.3e38f;
                } else if (t == 4) {
                    for (int i = 1024; i < 2048; i++)
                        x[i] *= 0x1p-140f;
                }
                char what[64];
                snprintf(what, sizeof(what), "coding %d scale %d step %d", c, sc, t);
                zc_codec_rng_t rng = test_codec_rng(11, 0, (uint32_t)t);
                ef_step_pair(&p, fused, generic, &rng, x, N, what);
            }
            zc_codec_state_destroy(fused);
            zc_codec_state_destroy(generic);
        }
    }
    free(x);
}

/* The fused steps at every CPU level give the scalar level's payloads and residuals. */
Test(qsgd_ef, fused_identical_across_levels)
{
    enum { N = 70000 + 5 };
    static const zc_cpu_level_t levels[] = {ZC_CPU_AVX2, ZC_CPU_AVX512};
    zc_codec_params_t p = qsgd_params(7, 512, ZC_QSGD_SCALE_MAX, ZC_QSGD_CODING_FIXED);
    p.qsgd.error_feedback = 1;
    float *x = xmalloc(N * sizeof(float));
    const size_t bound = zc_codec_bound(&p, N);
    uint8_t *want = xmalloc(bound), *got = xmalloc(bound);
    for (size_t l = 0; l < 2; l++) {
        if (zc_cpu_detect() < levels[l])
            continue;
        zc_codec_state_t *ref = NULL, *st = NULL;
        cr_assert_eq(zc_codec_state_create(&p, N, &ref), ZC_OK);
        cr_assert_eq(zc_codec_state_create(&p, N, &st), ZC_OK);
        for (int t = 0; t < 3; t++) {
            fill_gauss(x, N, 700 + (uint64_t)t, 1.0);
            zc_codec_rng_t rng = test_codec_rng(12, 1, (uint32_t)t);
            size_t lw = 0, lg = 0;
            cr_assert_eq(zc_cpu_set_level(ZC_CPU_SCALAR), ZC_OK);
            cr_assert_eq(zc_codec_encode(&p, ref, &rng, ZC_DTYPE_F32, x, N, want, bound, &lw),
                         ZC_OK);
            cr_assert_eq(zc_cpu_set_level(levels[l]), ZC_OK);
            cr_assert_eq(zc_codec_encode(&p, st, &rng, ZC_DTYPE_F32, x, N, got, bound, &lg), ZC_OK);
            cr_assert_eq(lw, lg);
            cr_assert_arr_eq(want, got, lw, "level %d step %d", (int)levels[l], t);
            cr_assert(same_bits_f32(ref->residual, st->residual, N));
        }
        zc_codec_state_destroy(ref);
        zc_codec_state_destroy(st);
    }
    cr_assert_eq(zc_cpu_set_level(zc_cpu_detect()), ZC_OK);
    free(want);
    free(got);
    free(x);
}

Test(elias, known_lengths)
{
    /* algorithms.md A.6: omega(1) = 1, omega(2..3) = 3, omega(4..7) = 6, omega(8..15) = 7,
     * omega(16..31) = 11 */
    static const struct {
        uint32_t lo, hi;
        unsigned len;
    } ranges[] = {{1, 1, 1}, {2, 3, 3}, {4, 7, 6}, {8, 15, 7}, {16, 31, 11}};
    for (int r = 0; r < 5; r++)
        for (uint32_t k = ranges[r].lo; k <= ranges[r].hi; k++) {
            cr_assert_eq(omega_len(k), ranges[r].len, "test's omega(%u)", k);
            cr_assert_eq(zc_elias_len(k), ranges[r].len, "omega(%u)", k);
        }
    cr_assert_eq(zc_elias_len(UINT32_MAX), omega_len(UINT32_MAX));
}

static void elias_roundtrip(const uint32_t *ks, size_t n)
{
    uint8_t *buf = xmalloc(n * 8 + 8);
    zc_bitwriter_t w;
    zc_bw_init(&w, buf, n * 8 + 8);
    uint64_t bits = 0;
    for (size_t i = 0; i < n; i++) {
        zc_elias_put(&w, ks[i]);
        bits += omega_len(ks[i]);
        cr_assert_eq(zc_bw_bits(&w), bits, "length after omega(%u)", ks[i]);
    }
    size_t len = zc_bw_flush(&w);
    cr_assert_eq(len, (bits + 7) / 8);
    uint8_t *exact = exact_copy(buf, len);
    zc_bitreader_t r;
    zc_br_init(&r, exact, len);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(zc_elias_get(&r), ks[i], "code %zu", i);
    cr_assert_eq(r.overrun, 0);
    /* one more read runs past the end: a 0 bit (the value 1) read as padding, or overrun */
    free(exact);
    free(buf);
}

Test(elias, roundtrip)
{
    enum { N = 20000 };
    uint32_t *ks = xmalloc(N * sizeof(uint32_t));
    for (uint32_t k = 1; k <= N; k++)
        ks[k - 1] = k;
    elias_roundtrip(ks, N);

    size_t n = 0;
    for (unsigned b = 0; b < 32; b++) {
        uint32_t p = UINT32_C(1) << b;
        ks[n++] = p;
        if (p > 1)
            ks[n++] = p - 1;
        ks[n++] = p + 1;
    }
    ks[n++] = UINT32_MAX;
    ks[n++] = UINT32_MAX - 1;
    elias_roundtrip(ks, n);

    test_rng_t r = {151};
    for (n = 0; n < N; n++) {
        uint32_t v = (uint32_t)test_rng_next(&r) >> (test_rng_next(&r) % 32);
        ks[n] = v ? v : 1;
    }
    elias_roundtrip(ks, N);
    free(ks);
}

Test(elias, malformed)
{
    /* all ones: groups never end */
    uint8_t ones[16];
    memset(ones, 0xff, sizeof(ones));
    zc_bitreader_t r;
    zc_br_init(&r, ones, sizeof(ones));
    cr_assert_eq(zc_elias_get(&r), 0);

    /* a code cut short: omega(1000) is 16 bits; give it one byte */
    uint8_t buf[8];
    zc_bitwriter_t w;
    zc_bw_init(&w, buf, sizeof(buf));
    zc_elias_put(&w, 1000);
    cr_assert_eq(zc_bw_flush(&w), (omega_len(1000) + 7) / 8);
    zc_br_init(&r, buf, 1);
    zc_elias_get(&r);
    cr_assert(r.overrun, "reading a cut code did not overrun");
}
