/*
 * Top-k (codec/topk): which values are kept (count within the tolerance, the
 * largest by magnitude, the exact fallback), the error-feedback identity bit
 * for bit, the payload layout read by the test's own parser, the choice of
 * index coding, non-finite values, sizes, scalar against AVX-512, and hostile
 * payloads.
 *
 * The payload is parsed here from docs/codecs.md with an independent reader;
 * expected sets come from qsort. Tolerances are those the codec documents
 * (10% on the sampled count), never tuned to the values observed.
 */
#include "codec_test.h"

#include "codec/codec.h"
#include "codec/topk/topk_int.h"
#include "common/cpu.h"
#include "common/half.h"

#include <criterion/criterion.h>

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#define HDR ZC_PAYLOAD_HEADER_BYTES
#define BODY_HDR 12 /* u64 kept, u8 format, u8 coding, u8 rice b, i8 f16 exponent */

/* ------------------------------------------------------------ test helpers */

static zc_codec_params_t topk_params(double density, zc_topk_values_t values)
{
    zc_codec_params_t p = params_of(ZC_CODEC_TOPK);
    p.topk.density = density;
    p.topk.values = values;
    return p;
}

/* One error-feedback step: encodes into a bound-sized buffer, returns an exact-size copy. */
static payload_t step(const zc_codec_params_t *p, zc_codec_state_t *s, zc_dtype_t dtype,
                      const void *src, size_t n)
{
    size_t bound = zc_codec_bound(p, n);
    cr_assert_gt(bound, 0);
    uint8_t *tmp = xmalloc(bound);
    size_t len = 0;
    zc_status_t st = zc_codec_encode(p, s, NULL, dtype, src, n, tmp, bound, &len);
    cr_assert_eq(st, ZC_OK, "encode of %zu values: %s", n, zc_status_string(st));
    cr_assert_leq(len, bound, "payload %zu bytes > bound %zu", len, bound);
    cr_assert_geq(len, HDR + BODY_HDR);
    payload_t out = {exact_copy(tmp, len), len};
    free(tmp);
    return out;
}

static uint32_t key_of(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    return u & 0x7fffffffu;
}

static uint64_t le(const uint8_t *p, unsigned bytes)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < bytes; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* n bits at bit offset pos of buf, least-significant first. */
static uint64_t get_bits(const uint8_t *buf, uint64_t pos, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; i++, pos++)
        v |= (uint64_t)(buf[pos >> 3] >> (pos & 7) & 1) << i;
    return v;
}

static unsigned varint_len(uint64_t g)
{
    unsigned n = 1;
    for (; g >= 128; g >>= 7)
        n++;
    return n;
}

/* Sizes of the two codings of a position list, computed from their definitions. */
static uint64_t varint_size(const uint64_t *pos, uint64_t c)
{
    uint64_t bytes = 0;
    for (uint64_t j = 0; j < c; j++)
        bytes += varint_len(pos[j] - (j ? pos[j - 1] + 1 : 0));
    return bytes;
}

static uint64_t rice_size(const uint64_t *pos, uint64_t c, unsigned b)
{
    uint64_t bits = 0;
    for (uint64_t j = 0; j < c; j++)
        bits += ((pos[j] - (j ? pos[j - 1] + 1 : 0)) >> b) + 1 + b;
    return (bits + 7) / 8;
}

/* A payload as docs/codecs.md describes it. */
typedef struct parsed {
    uint64_t count; /* element count of the header */
    uint64_t kept;
    unsigned format, coding, b;
    int e;
    uint64_t *pos;  /* kept positions */
    float *val;     /* their decoded values */
    size_t idx_len; /* bytes of the position section */
    uint64_t oob_n; /* values out of band (non-finite), and their positions */
    uint64_t oob_pos[64];
} parsed_t;

static float f16_scaled(uint16_t h, int e)
{
    return zc_f16_to_f32(h) * ldexpf(1.0f, e);
}

static parsed_t parse(const payload_t *pl)
{
    parsed_t r = {0};
    cr_assert_geq(pl->len, HDR + BODY_HDR);
    cr_assert_eq(pl->buf[0], 'Z');
    cr_assert_eq(pl->buf[3], ZC_CODEC_TOPK);
    r.count = le(pl->buf + 8, 8);
    size_t at = HDR;
    if (pl->buf[4] & 1) {
        /* the out-of-band section (docs/codecs.md): n, n f32 values, n varint gaps */
        r.oob_n = le(pl->buf + HDR, 8);
        cr_assert_leq(r.oob_n, 64, "more values out of band than the test puts");
        at += 8 + 4 * r.oob_n;
        for (uint64_t j = 0, next = 0; j < r.oob_n; j++) {
            uint64_t g = 0;
            for (unsigned shift = 0;; shift += 7) {
                g |= (uint64_t)(pl->buf[at] & 0x7f) << shift;
                if (!(pl->buf[at++] & 0x80))
                    break;
            }
            r.oob_pos[j] = next + g;
            next = r.oob_pos[j] + 1;
        }
    }
    const uint8_t *body = pl->buf + at;
    r.kept = le(body, 8);
    r.format = body[8];
    r.coding = body[9];
    r.b = body[10];
    r.e = (int8_t)body[11];
    cr_assert_leq(r.kept, r.count);
    cr_assert(r.format <= 1 && r.coding <= 1);
    const size_t vsize = r.format ? 2 : 4;
    const uint8_t *vals = body + BODY_HDR, *idx = vals + r.kept * vsize;
    cr_assert_geq(pl->len, at + BODY_HDR + r.kept * vsize);
    r.idx_len = pl->len - at - BODY_HDR - r.kept * vsize;
    r.pos = xmalloc(r.kept * sizeof(uint64_t));
    r.val = xmalloc(r.kept * sizeof(float));
    uint64_t next = 0, bit = 0, byte = 0;
    for (uint64_t j = 0; j < r.kept; j++) {
        uint64_t g = 0;
        if (r.coding == 0) {
            for (unsigned shift = 0;; shift += 7) {
                cr_assert_lt(byte, r.idx_len, "varint runs past the section");
                g |= (uint64_t)(idx[byte] & 0x7f) << shift;
                if (!(idx[byte++] & 0x80))
                    break;
            }
        } else {
            uint64_t q = 0;
            while (get_bits(idx, bit++, 1) == 0)
                q++;
            g = q << r.b | get_bits(idx, bit, r.b);
            bit += r.b;
            cr_assert_leq((bit + 7) / 8, r.idx_len, "rice runs past the section");
        }
        r.pos[j] = next + g;
        next = r.pos[j] + 1;
        cr_assert_lt(r.pos[j], r.count);
        if (r.format == 0) {
            uint32_t u = (uint32_t)le(vals + 4 * j, 4);
            memcpy(&r.val[j], &u, 4);
        } else {
            r.val[j] = f16_scaled((uint16_t)le(vals + 2 * j, 2), r.e);
        }
    }
    uint64_t used = r.coding == 0 ? byte : (bit + 7) / 8;
    cr_assert_eq(used, r.idx_len, "position section %zu bytes, %llu used", r.idx_len,
                 (unsigned long long)used);
    return r;
}

static void parsed_free(parsed_t *r)
{
    free(r->pos);
    free(r->val);
}

static int is_out_of_band(const parsed_t *r, uint64_t i)
{
    for (uint64_t j = 0; j < r->oob_n; j++)
        if (r->oob_pos[j] == i)
            return 1;
    return 0;
}

static int is_kept(const parsed_t *r, uint64_t i)
{
    uint64_t lo = 0, hi = r->kept;
    while (lo < hi) {
        uint64_t mid = (lo + hi) / 2;
        if (r->pos[mid] < i)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < r->kept && r->pos[lo] == i;
}

/* The exact selection by sorting: key descending, index ascending, zeros excluded. */
static const float *sort_src;
static int by_key_desc(const void *a, const void *b)
{
    uint64_t i = *(const uint64_t *)a, j = *(const uint64_t *)b;
    uint32_t ki = key_of(sort_src[i]), kj = key_of(sort_src[j]);
    if (ki != kj)
        return ki > kj ? -1 : 1;
    return i < j ? -1 : 1;
}
static int by_index(const void *a, const void *b)
{
    uint64_t i = *(const uint64_t *)a, j = *(const uint64_t *)b;
    return i < j ? -1 : i > j;
}

/* Expected positions of an exact top-k, increasing; returns their number. */
static uint64_t expected_exact(const float *x, uint64_t n, uint64_t k, uint64_t *out)
{
    uint64_t *order = xmalloc(n * sizeof(uint64_t));
    for (uint64_t i = 0; i < n; i++)
        order[i] = i;
    sort_src = x;
    qsort(order, n, sizeof(uint64_t), by_key_desc);
    uint64_t c = 0;
    for (uint64_t j = 0; j < k && j < n && key_of(x[order[j]]) != 0; j++)
        out[c++] = order[j];
    qsort(out, c, sizeof(uint64_t), by_index);
    free(order);
    return c;
}

/* Every kept key >= every dropped key. */
static void assert_largest(const float *a, uint64_t n, const parsed_t *r)
{
    uint32_t min_kept = UINT32_MAX, max_dropped = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint32_t k = key_of(a[i]);
        if (is_kept(r, i))
            min_kept = k < min_kept ? k : min_kept;
        else
            max_dropped = k > max_dropped ? k : max_dropped;
    }
    if (r->kept > 0 && r->kept < n)
        cr_assert_geq(min_kept, max_dropped, "a dropped value is larger than a kept one");
}

static float *gauss_new(size_t n, uint64_t seed)
{
    float *x = xmalloc(n * sizeof(float));
    fill_gauss(x, n, seed, 1.0);
    return x;
}

static int have_avx512(void)
{
    return zc_cpu_detect() >= ZC_CPU_AVX512;
}

/* ------------------------------------------------------------------ params */

Test(topk_params, checks)
{
    static const double bad[] = {0.0, -0.01, 1.0000001, 2.0, NAN, INFINITY, -INFINITY};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        zc_codec_params_t p = topk_params(bad[i], ZC_TOPK_VALUES_F32);
        cr_assert_eq(zc_codec_params_check(&p), ZC_ERR_INVALID_CONFIG, "density %g", bad[i]);
        cr_assert_eq(zc_codec_bound(&p, 100), 0);
    }
    zc_codec_params_t p = topk_params(0.01, (zc_topk_values_t)2);
    cr_assert_eq(zc_codec_params_check(&p), ZC_ERR_INVALID_CONFIG);
    static const double good[] = {1e-9, 0.001, 0.01, 0.5, 1.0};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        p = topk_params(good[i], ZC_TOPK_VALUES_F16);
        cr_assert_eq(zc_codec_params_check(&p), ZC_OK, "density %g", good[i]);
        cr_assert(zc_codec_needs_state(&p), "top-k always runs with error feedback");
    }
}

Test(topk_params, caps_and_defaults)
{
    /* needs a state, biased, payloads do not add */
    cr_assert_eq(zc_codec_caps(ZC_CODEC_TOPK), 0);
    zc_codec_params_t p;
    cr_assert_eq(zc_codec_params_default(ZC_CODEC_TOPK, &p), ZC_OK);
    cr_assert_eq(p.topk.density, 0.01);
    cr_assert_eq(p.topk.values, ZC_TOPK_VALUES_F32);
    cr_assert_str_eq(zc_codec_name(ZC_CODEC_TOPK), "topk");
}

Test(topk_params, target_count)
{
    cr_assert_eq(zc_topk_target(0, 0.01), 0);
    cr_assert_eq(zc_topk_target(1, 0.01), 1);
    cr_assert_eq(zc_topk_target(1000, 1e-9), 1);
    cr_assert_eq(zc_topk_target(1000, 0.01), 10);
    cr_assert_eq(zc_topk_target(1050, 0.01), 11); /* 10.5 rounds up */
    cr_assert_eq(zc_topk_target(1049, 0.01), 10);
    cr_assert_eq(zc_topk_target(77, 1.0), 77);
    cr_assert_eq(zc_topk_max_kept(1000, 100), 110);
    cr_assert_eq(zc_topk_max_kept(105, 100), 105);
}

/*
 * Bound: header + at most k + k/10 values, each with a value and a varint gap,
 * + the largest out-of-band section: e = 16 + n / 1024 entries (at most n),
 * each a value and a gap of at most 10 bytes, the gaps also at most e + n / 7.
 */
static uint64_t oob_bound(uint64_t n)
{
    uint64_t e = n < 16 + n / 1024 ? n : 16 + n / 1024, gaps = e + n / 7;
    return 8 + 4 * e + (10 * e < gaps ? 10 * e : gaps);
}

Test(topk_params, bound_formula)
{
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    cr_assert_eq(zc_codec_bound(&p, 0), HDR + BODY_HDR + oob_bound(0));
    cr_assert_eq(zc_codec_bound(&p, 1), HDR + BODY_HDR + 1 * (4 + 1) + oob_bound(1));
    /* n = 1e6: k = 10000, at most 11000 kept, gaps < 2^21 take 3 bytes */
    cr_assert_eq(zc_codec_bound(&p, 1000000),
                 HDR + BODY_HDR + 11000 * (4 + 3) + oob_bound(1000000));
    p.topk.values = ZC_TOPK_VALUES_F16;
    cr_assert_eq(zc_codec_bound(&p, 1000000),
                 HDR + BODY_HDR + 11000 * (2 + 3) + oob_bound(1000000));
    cr_assert_eq(zc_codec_bound(&p, (UINT64_C(1) << 40) + 1), 0, "beyond the count limit");
}

/* --------------------------------------------------------------- selection */

/* Gaussian input takes the sampled path; the count is within 10% of k. */
Test(topk_select, sampled_count_within_tolerance)
{
    const size_t n = 1 << 20;
    const double rho = 0.01;
    const uint64_t k = zc_topk_target(n, rho), tol = k / 10;
    cr_assert_gt(zc_topk_sample_size(n, rho), 0, "this size must be sampled");
    uint64_t *idx = xmalloc((zc_topk_max_kept(n, k) + ZC_TOPK_COLLECT_SLACK) * sizeof(uint64_t));
    for (uint64_t seed = 1; seed <= 5; seed++) {
        float *x = gauss_new(n, seed);
        uint64_t c = 0;
        zc_topk_path_t path;
        cr_assert_eq(zc_topk_select(x, n, rho, idx, &c, &path), ZC_OK);
        cr_assert_eq(path, ZC_TOPK_PATH_SAMPLED, "seed %llu", (unsigned long long)seed);
        cr_assert(c + tol >= k && c <= k + tol, "kept %llu, k %llu", (unsigned long long)c,
                  (unsigned long long)k);
        /* threshold semantics: everything at least as large as the smallest kept is kept */
        uint32_t min_kept = UINT32_MAX;
        for (uint64_t j = 0; j < c; j++) {
            cr_assert(j == 0 || idx[j] > idx[j - 1]);
            min_kept = key_of(x[idx[j]]) < min_kept ? key_of(x[idx[j]]) : min_kept;
        }
        uint64_t at_least = 0;
        for (size_t i = 0; i < n; i++)
            at_least += key_of(x[i]) >= min_kept;
        cr_assert_eq(at_least, c);
        free(x);
    }
    free(idx);
}

/* The same through the codec: the payload's kept count, within tolerance. */
Test(topk_select, payload_count_within_tolerance)
{
    const size_t n = 1 << 20;
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = gauss_new(n, 11);
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    parsed_t r = parse(&pl);
    const uint64_t k = zc_topk_target(n, 0.01);
    cr_assert(r.kept + k / 10 >= k && r.kept <= k + k / 10, "kept %llu of k %llu",
              (unsigned long long)r.kept, (unsigned long long)k);
    assert_largest(x, n, &r);
    parsed_free(&r);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

/* All magnitudes tied: the sample's threshold keeps everything, so exact
 * selection keeps exactly k, the ties broken by the lower index. */
Test(topk_select, ties_fall_back_to_exact)
{
    const size_t n = 1 << 20;
    const double rho = 0.01;
    const uint64_t k = zc_topk_target(n, rho);
    float *x = xmalloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        x[i] = i % 3 ? -1.0f : 1.0f;
    uint64_t *idx = xmalloc((zc_topk_max_kept(n, k) + ZC_TOPK_COLLECT_SLACK) * sizeof(uint64_t));
    uint64_t c = 0;
    zc_topk_path_t path;
    cr_assert_eq(zc_topk_select(x, n, rho, idx, &c, &path), ZC_OK);
    cr_assert_eq(path, ZC_TOPK_PATH_EXACT);
    cr_assert_eq(c, k);
    for (uint64_t j = 0; j < c; j++)
        cr_assert_eq(idx[j], j, "tie %llu", (unsigned long long)j);
    free(idx);
    free(x);
}

/* Large values exactly where the strided sample looks: the sampled threshold
 * keeps a quarter of k, so the exact fallback runs and keeps exactly k, the
 * largest (checked against qsort). */
Test(topk_select, sample_unfriendly_falls_back_to_exact)
{
    const size_t n = 1 << 20;
    const double rho = 0.01;
    const uint64_t k = zc_topk_target(n, rho), s = zc_topk_sample_size(n, rho);
    cr_assert_gt(s, 0);
    const uint64_t stride = n / s;
    float *x = gauss_new(n, 5);
    for (uint64_t j = 0; j < s; j++)
        x[j * stride + stride / 2] *= 1000.0f;
    uint64_t *idx = xmalloc((zc_topk_max_kept(n, k) + ZC_TOPK_COLLECT_SLACK) * sizeof(uint64_t));
    uint64_t *want = xmalloc(k * sizeof(uint64_t));
    uint64_t c = 0;
    zc_topk_path_t path;
    cr_assert_eq(zc_topk_select(x, n, rho, idx, &c, &path), ZC_OK);
    cr_assert_eq(path, ZC_TOPK_PATH_EXACT);
    cr_assert_eq(c, k);
    cr_assert_eq(expected_exact(x, n, k, want), k);
    cr_assert_arr_eq(idx, want, k * sizeof(uint64_t));
    free(want);
    free(idx);
    free(x);
}

/* Mostly zeros: zeros are never sent, so fewer than k are kept: all nonzeros. */
Test(topk_select, zeros_never_kept)
{
    const size_t n = 1 << 20;
    float *x = zeros_f32(n);
    for (size_t i = 0; i < n; i += 1000)
        x[i] = (float)(i % 7) - 3.0f; /* some of these are zero too */
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    parsed_t r = parse(&pl);
    uint64_t nnz = 0;
    for (size_t i = 0; i < n; i++)
        nnz += x[i] != 0;
    cr_assert_eq(r.kept, nnz);
    for (uint64_t j = 0; j < r.kept; j++)
        cr_assert_neq(x[r.pos[j]], 0.0f);
    parsed_free(&r);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

/* Exact path sizes, odd and tiny, against qsort: the same set, exactly k. */
Test(topk_select, exact_matches_qsort)
{
    static const size_t sizes[] = {1, 2, 3, 7, 17, 100, 1001, 4099, 65537};
    static const double dens[] = {1e-9, 0.01, 0.1, 0.37, 0.5, 1.0};
    size_t runs = 0;
    /* kinds: Gaussian with some ties and zeros; small integers, tied throughout (cluster_rank's) */
    for (size_t a = 0; a < 2 * sizeof(sizes) / sizeof(sizes[0]); a++) {
        for (size_t d = 0; d < sizeof(dens) / sizeof(dens[0]); d++) {
            const size_t n = sizes[a / 2];
            if (zc_topk_sample_size(n, dens[d]) > 0 && zc_topk_target(n, dens[d]) < n)
                continue; /* sampled: not an exact count */
            runs++;
            float *x = gauss_new(n, 100 + a);
            for (size_t i = 0; i < n; i += a % 2 ? 1 : 5)
                x[i] = a % 2 ? (float)((i * 7) % 61) - 30.0f : (i / 5) % 3 ? 0.5f : 0.0f;
            zc_codec_params_t p = topk_params(dens[d], ZC_TOPK_VALUES_F32);
            zc_codec_state_t *s = state_new(&p, n);
            payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
            parsed_t r = parse(&pl);
            const uint64_t k = zc_topk_target(n, dens[d]);
            uint64_t *want = xmalloc(k * sizeof(uint64_t));
            uint64_t c = expected_exact(x, n, k, want);
            cr_assert_eq(r.kept, c, "n %zu density %g: kept %llu, want %llu", n, dens[d],
                         (unsigned long long)r.kept, (unsigned long long)c);
            cr_assert_arr_eq(r.pos, want, c * sizeof(uint64_t), "n %zu density %g", n, dens[d]);
            for (uint64_t j = 0; j < c; j++)
                cr_assert_eq(zc_f32_bits(r.val[j]), zc_f32_bits(x[r.pos[j]]), "value sent exactly");
            free(want);
            parsed_free(&r);
            payload_free(&pl);
            free(x);
            zc_codec_state_destroy(s);
        }
    }
    cr_assert_geq(runs, 50);
}

/* Radix select on its own: the k-th largest and the count above it, against qsort. */
Test(topk_select, radix_select_known_answers)
{
    uint32_t keys[] = {5, 1, 5, 9, 0, 7, 5, 0x7fffffffu, 0x7f800000u, 3};
    const size_t m = sizeof(keys) / sizeof(keys[0]);
    /* sorted descending: 7fffffff 7f800000 9 7 5 5 5 3 1 0 */
    static const uint32_t kth[] = {0x7fffffffu, 0x7f800000u, 9, 7, 5, 5, 5, 3, 1, 0};
    static const uint64_t above[] = {0, 1, 2, 3, 4, 4, 4, 7, 8, 9};
    for (uint64_t k = 1; k <= m; k++) {
        uint32_t tmp[sizeof(keys) / sizeof(keys[0])];
        memcpy(tmp, keys, sizeof(keys));
        uint64_t ab = 99;
        cr_assert_eq(zc_topk_radix_select(tmp, m, k, &ab), kth[k - 1], "k %llu",
                     (unsigned long long)k);
        cr_assert_eq(ab, above[k - 1], "k %llu", (unsigned long long)k);
    }
}

/* ------------------------------------------------------- error feedback */

/*
 * sent + new residual = input + old residual (computed in f32 as the generic
 * layer does), exactly: checked in double, where the sum of two floats is
 * exact, and bit for bit at every dropped position.
 */
static void check_conservation(double rho, zc_topk_values_t values, zc_dtype_t dtype, size_t n)
{
    zc_codec_params_t p = topk_params(rho, values);
    zc_codec_state_t *s = state_new(&p, n);
    float *a = zeros_f32(n), *in32 = xmalloc(n * sizeof(float));
    uint16_t *in16 = xmalloc(n * sizeof(uint16_t));

    for (int t = 0; t < 4; t++) {
        fill_gauss(in32, n, 1000 + (uint64_t)t, t == 2 ? 1e-3 : 1.0);
        const void *src = in32;
        for (size_t i = 0; i < n; i++) {
            float v = in32[i];
            if (dtype == ZC_DTYPE_F16) {
                in16[i] = zc_f32_to_f16(v);
                v = zc_f16_to_f32(in16[i]);
                src = in16;
            } else if (dtype == ZC_DTYPE_BF16) {
                in16[i] = zc_f32_to_bf16(v);
                v = zc_bf16_to_f32(in16[i]);
                src = in16;
            }
            a[i] += v; /* what the residual holds when encode starts */
        }
        payload_t pl = step(&p, s, dtype, src, n);
        parsed_t r = parse(&pl);
        float *sent = decode_ok(&pl, n);
        const float *res = s->residual;
        assert_largest(a, n, &r);
        for (size_t i = 0; i < n; i++) {
            if (!is_kept(&r, i)) {
                cr_assert_eq(zc_f32_bits(res[i]), zc_f32_bits(a[i]),
                             "step %d: dropped value %zu changed", t, i);
                cr_assert_eq(sent[i], 0.0f);
                continue;
            }
            cr_assert_eq((double)sent[i] + (double)res[i], (double)a[i],
                         "step %d, value %zu: %a + %a != %a", t, i, sent[i], res[i], a[i]);
            if (values == ZC_TOPK_VALUES_F32)
                cr_assert(sent[i] == a[i] && res[i] == 0.0f, "f32 values are sent exactly");
            else /* f16 rounding of a * 2^-e: 2^-11 relative, 2^-25 absolute below 2^-14 */
                cr_assert_leq(fabsf(res[i]), fmaxf(fabsf(a[i]) * 0x1p-11f, ldexpf(1, r.e - 25)),
                              "f16 rounding error");
        }
        memcpy(a, res, n * sizeof(float));
        free(sent);
        parsed_free(&r);
        payload_free(&pl);
    }
    free(in16);
    free(in32);
    free(a);
    zc_codec_state_destroy(s);
}

Test(topk_ef, conservation_f32_values_exact_path)
{
    check_conservation(0.05, ZC_TOPK_VALUES_F32, ZC_DTYPE_F32, 10007);
}

Test(topk_ef, conservation_f16_values_exact_path)
{
    check_conservation(0.05, ZC_TOPK_VALUES_F16, ZC_DTYPE_F32, 10007);
}

Test(topk_ef, conservation_f32_values_sampled_path)
{
    cr_assert_gt(zc_topk_sample_size(300000, 0.05), 0);
    check_conservation(0.05, ZC_TOPK_VALUES_F32, ZC_DTYPE_F32, 300000);
}

Test(topk_ef, conservation_f16_values_sampled_path)
{
    check_conservation(0.05, ZC_TOPK_VALUES_F16, ZC_DTYPE_F32, 300000);
}

Test(topk_ef, conservation_f16_input)
{
    check_conservation(0.02, ZC_TOPK_VALUES_F32, ZC_DTYPE_F16, 5003);
    check_conservation(0.02, ZC_TOPK_VALUES_F16, ZC_DTYPE_F16, 5003);
}

Test(topk_ef, conservation_bf16_input)
{
    check_conservation(0.02, ZC_TOPK_VALUES_F32, ZC_DTYPE_BF16, 5003);
    check_conservation(0.02, ZC_TOPK_VALUES_F16, ZC_DTYPE_BF16, 5003);
}

/* What is dropped is sent later: with a constant input (all values distinct)
 * and density 0.1, every coordinate has been sent within 10 steps, where
 * top-k without error feedback would send the same 100 every time. */
Test(topk_ef, dropped_values_are_sent_later)
{
    const size_t n = 1000;
    zc_codec_params_t p = topk_params(0.1, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = xmalloc(n * sizeof(float)), *sum = zeros_f32(n);
    for (size_t i = 0; i < n; i++)
        x[i] = 1.0f + (float)i * 1e-4f;
    for (int t = 0; t < 10; t++) {
        payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
        cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, sum, n), ZC_OK);
        payload_free(&pl);
    }
    for (size_t i = 0; i < n; i++)
        cr_assert_gt(sum[i], 0.0f, "value %zu never sent", i);
    zc_codec_state_destroy(s);
    free(sum);
    free(x);
}

Test(topk_ef, residual_norm)
{
    const size_t n = 20000;
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    cr_assert_eq(zc_codec_state_residual_norm(s), 0.0);
    float *x = gauss_new(n, 77);
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    parsed_t r = parse(&pl);
    double want = 0, all = 0;
    for (size_t i = 0; i < n; i++) {
        all += (double)x[i] * x[i];
        if (!is_kept(&r, i))
            want += (double)x[i] * x[i];
    }
    double got = zc_codec_state_residual_norm(s);
    cr_assert_eq(got, sqrt(want), "residual norm %.17g, want %.17g", got, sqrt(want));
    cr_assert_lt(got, sqrt(all), "the largest 1%% carry energy");
    parsed_free(&r);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

Test(topk_ef, state_required_and_matched)
{
    const size_t n = 100;
    float x[100] = {0};
    uint8_t buf[4096];
    size_t len = 0;
    zc_codec_params_t p = topk_params(0.1, ZC_TOPK_VALUES_F32);
    cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, x, n, buf, sizeof(buf), &len),
                 ZC_ERR_INVALID_ARG);
    zc_codec_params_t other = topk_params(0.2, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&other, n);
    cr_assert_eq(zc_codec_encode(&p, s, NULL, ZC_DTYPE_F32, x, n, buf, sizeof(buf), &len),
                 ZC_ERR_MISMATCH);
    zc_codec_state_destroy(s);
    other = topk_params(0.1, ZC_TOPK_VALUES_F16);
    s = state_new(&other, n);
    cr_assert_eq(zc_codec_encode(&p, s, NULL, ZC_DTYPE_F32, x, n, buf, sizeof(buf), &len),
                 ZC_ERR_MISMATCH);
    zc_codec_state_destroy(s);
    s = state_new(&p, n + 1);
    cr_assert_eq(zc_codec_encode(&p, s, NULL, ZC_DTYPE_F32, x, n, buf, sizeof(buf), &len),
                 ZC_ERR_MISMATCH);
    zc_codec_state_destroy(s);
    cr_assert_eq(len, 0, "nothing written on failure");
}

/* A buffer one byte short fails, and leaves the input in the residual for next time. */
Test(topk_ef, buffer_too_small_keeps_input)
{
    const size_t n = 5000;
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n), *t = state_new(&p, n);
    float *x = gauss_new(n, 3);
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    uint8_t *buf = xmalloc(pl.len);
    size_t len = 0;
    cr_assert_eq(zc_codec_encode(&p, t, NULL, ZC_DTYPE_F32, x, n, buf, pl.len - 1, &len),
                 ZC_ERR_BUFFER_TOO_SMALL);
    cr_assert(same_bits_f32(t->residual, x, n), "the input stays in the residual");
    cr_assert_eq(zc_codec_encode(&p, t, NULL, ZC_DTYPE_F32, x, n, buf, HDR + 3, &len),
                 ZC_ERR_BUFFER_TOO_SMALL);
    free(buf);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
    zc_codec_state_destroy(t);
}

/* ---------------------------------------------------------------- roundtrip */

Test(topk_roundtrip, decode_accumulates)
{
    const size_t n = 3001;
    zc_codec_params_t p = topk_params(0.05, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = gauss_new(n, 21), *base = gauss_new(n, 22), *acc = xmalloc(n * sizeof(float));
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    float *sent = decode_ok(&pl, n);
    memcpy(acc, base, n * sizeof(float));
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, acc, n), ZC_OK);
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, acc, n), ZC_OK);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(acc[i], (base[i] + sent[i]) + sent[i], "value %zu", i);
    free(sent);
    free(acc);
    free(base);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

Test(topk_roundtrip, empty_and_single)
{
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, 0);
    float none[1] = {0};
    payload_t pl = step(&p, s, ZC_DTYPE_F32, none, 0);
    cr_assert_eq(pl.len, HDR + BODY_HDR);
    cr_assert_eq(le(pl.buf + HDR, 8), 0);
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, none, 0), ZC_OK);
    payload_free(&pl);
    zc_codec_state_destroy(s);

    s = state_new(&p, 1);
    float one = -3.5f;
    pl = step(&p, s, ZC_DTYPE_F32, &one, 1);
    parsed_t r = parse(&pl);
    cr_assert_eq(r.kept, 1);
    cr_assert_eq(r.pos[0], 0);
    cr_assert_eq(r.val[0], -3.5f);
    cr_assert_eq(s->residual[0], 0.0f);
    parsed_free(&r);
    payload_free(&pl);
    /* a zero is not sent */
    one = 0.0f;
    s->residual[0] = 0.0f;
    pl = step(&p, s, ZC_DTYPE_F32, &one, 1);
    cr_assert_eq(le(pl.buf + HDR, 8), 0);
    payload_free(&pl);
    zc_codec_state_destroy(s);
}

Test(topk_roundtrip, density_one_keeps_everything)
{
    static const size_t sizes[] = {2, 3, 1023, 70001};
    for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++) {
        const size_t n = sizes[a];
        zc_codec_params_t p = topk_params(1.0, ZC_TOPK_VALUES_F32);
        zc_codec_state_t *s = state_new(&p, n);
        float *x = gauss_new(n, 40 + a);
        payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
        parsed_t r = parse(&pl);
        cr_assert_eq(r.kept, n);
        cr_assert_eq(r.coding, 1, "all gaps 0: Rice b = 0, one bit each");
        cr_assert_eq(r.b, 0);
        cr_assert_eq(r.idx_len, (n + 7) / 8);
        float *out = decode_ok(&pl, n);
        cr_assert(same_bits_f32(out, x, n), "lossless at density 1");
        for (size_t i = 0; i < n; i++)
            cr_assert_eq(s->residual[i], 0.0f);
        free(out);
        parsed_free(&r);
        payload_free(&pl);
        free(x);
        zc_codec_state_destroy(s);
    }
}

Test(topk_roundtrip, tiny_density_keeps_the_largest)
{
    const size_t n = 50001;
    zc_codec_params_t p = topk_params(1e-9, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = gauss_new(n, 8);
    size_t arg = 0;
    for (size_t i = 1; i < n; i++)
        arg = fabsf(x[i]) > fabsf(x[arg]) ? i : arg;
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    parsed_t r = parse(&pl);
    cr_assert_eq(r.kept, 1);
    cr_assert_eq(r.pos[0], arg);
    cr_assert_eq(r.val[0], x[arg]);
    parsed_free(&r);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

/* f16 values: the largest finite kept magnitude maps into [2^14, 2^15), so
 * large values stay finite and small ones keep f16's precision. */
Test(topk_roundtrip, f16_scale)
{
    static const float scales[] = {1e-30f, 1e-6f, 1.0f, 1e5f, 1e30f, 3e38f};
    const size_t n = 2000;
    for (size_t a = 0; a < sizeof(scales) / sizeof(scales[0]); a++) {
        zc_codec_params_t p = topk_params(0.1, ZC_TOPK_VALUES_F16);
        zc_codec_state_t *s = state_new(&p, n);
        float *x = gauss_new(n, 50 + a);
        for (size_t i = 0; i < n; i++)
            x[i] = fminf(fmaxf(x[i] * scales[a], -FLT_MAX), FLT_MAX);
        payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
        parsed_t r = parse(&pl);
        cr_assert_eq(r.format, 1);
        float max = 0;
        for (uint64_t j = 0; j < r.kept; j++)
            max = fmaxf(max, fabsf(x[r.pos[j]]));
        float scaled = ldexpf(max, -r.e);
        if (r.e > -126)
            cr_assert(scaled >= 0x1p14f && scaled < 0x1p15f, "scale %g: max %g, e %d", scales[a],
                      max, r.e);
        for (uint64_t j = 0; j < r.kept; j++) {
            float v = x[r.pos[j]];
            cr_assert(isfinite(r.val[j]), "value %g sent as %g", v, r.val[j]);
            uint16_t h = zc_f32_to_f16(ldexpf(v, -r.e));
            if (isinf(f16_scaled(h, r.e)))
                h--; /* next to FLT_MAX: rounded toward zero rather than to infinity */
            cr_assert_eq(r.val[j], f16_scaled(h, r.e));
            cr_assert_leq(fabsf(r.val[j] - v), fabsf(v) * 0x1p-11f, "%a sent as %a", v, r.val[j]);
        }
        parsed_free(&r);
        payload_free(&pl);
        free(x);
        zc_codec_state_destroy(s);
    }
}

/* The selection draws nothing at random: the same input gives the same bytes. */
Test(topk_roundtrip, deterministic)
{
    const size_t n = 400000;
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s1 = state_new(&p, n), *s2 = state_new(&p, n);
    float *x = gauss_new(n, 9);
    payload_t a = step(&p, s1, ZC_DTYPE_F32, x, n);
    zc_codec_rng_t rng = test_codec_rng(5, 3, 77);
    uint8_t *buf = xmalloc(zc_codec_bound(&p, n));
    size_t len = 0;
    cr_assert_eq(
        zc_codec_encode(&p, s2, &rng, ZC_DTYPE_F32, x, n, buf, zc_codec_bound(&p, n), &len), ZC_OK);
    cr_assert_eq(len, a.len);
    cr_assert_arr_eq(buf, a.buf, len);
    free(buf);
    payload_free(&a);
    free(x);
    zc_codec_state_destroy(s1);
    zc_codec_state_destroy(s2);
}

/* ------------------------------------------------------------------- sizes */

/*
 * Gaussian input at 1%: k values of 32 bits plus Rice gaps. Gaps are nearly
 * geometric with mean 99; Rice with b = 6 costs 1 + 6 + E[g >> 6] ~ 8.1 bits
 * (reference/algorithms.md E.3), so about 0.01 * (32 + 8.1) = 0.40 bits per
 * coordinate, plus 10% more kept at worst: at most 0.45. No coding can beat
 * the entropy of the positions, log2 C(n, c) / c bits per kept value.
 */
Test(topk_size, gaussian_one_percent)
{
    const size_t n = 1 << 20;
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = gauss_new(n, 31);
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    parsed_t r = parse(&pl);
    double bpc = pl.len * 8.0 / n;
    cr_assert_leq(bpc, 0.45, "%.4f bits per coordinate", bpc);
    cr_assert_eq(r.coding, 1, "Rice is the smaller on near-geometric gaps");
    double idx_bits = r.idx_len * 8.0 / r.kept;
    double entropy =
        (lgamma(n + 1.0) - lgamma(r.kept + 1.0) - lgamma(n - r.kept + 1.0)) / log(2.0) / r.kept;
    cr_assert_geq(idx_bits, entropy, "%.3f bits per index beat the entropy %.3f", idx_bits,
                  entropy);
    cr_assert_leq(idx_bits, entropy + 0.2, "%.3f bits per index, entropy %.3f", idx_bits, entropy);
    parsed_free(&r);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

/* Rice wins on near-geometric gaps; the payload is the smaller coding, and its
 * parameter is no worse than its neighbours. */
Test(topk_size, rice_chosen_when_smaller)
{
    const size_t n = 200000;
    zc_codec_params_t p = topk_params(0.02, ZC_TOPK_VALUES_F16);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = gauss_new(n, 32);
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    parsed_t r = parse(&pl);
    cr_assert_eq(r.coding, 1);
    uint64_t rb = rice_size(r.pos, r.kept, r.b);
    cr_assert_eq(r.idx_len, rb);
    cr_assert_lt(rb, varint_size(r.pos, r.kept));
    cr_assert_leq(rb, rice_size(r.pos, r.kept, r.b + 1));
    if (r.b > 0)
        cr_assert_leq(rb, rice_size(r.pos, r.kept, r.b - 1));
    parsed_free(&r);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

/* Pairs of neighbours 100000 apart: gaps alternate 0 and ~10^5. Varint takes
 * 1 + 3 bytes a pair (16 bits a gap); Rice at any b spends >= 17.5 bits a gap. */
Test(topk_size, varint_chosen_when_smaller)
{
    const size_t n = 2000000;
    float *x = zeros_f32(n);
    size_t nnz = 0;
    for (size_t i = 0; i + 1 < n; i += 100002, nnz += 2)
        x[i] = x[i + 1] = 1.0f + (float)i / n;
    zc_codec_params_t p = topk_params(1.0, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    parsed_t r = parse(&pl);
    cr_assert_eq(r.kept, nnz);
    cr_assert_eq(r.coding, 0);
    cr_assert_eq(r.b, 0);
    uint64_t vb = varint_size(r.pos, r.kept);
    cr_assert_eq(r.idx_len, vb);
    for (unsigned b = 0; b <= 40; b++)
        cr_assert_gt(rice_size(r.pos, r.kept, b), vb, "rice b = %u", b);
    float *out = decode_ok(&pl, n);
    cr_assert(same_bits_f32(out, x, n));
    free(out);
    parsed_free(&r);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

/* The bound holds over sizes, densities and value formats, and is tight
 * enough to be useful: the payload is at least half of it at 1%. */
Test(topk_size, bound_never_exceeded)
{
    static const size_t sizes[] = {1, 5, 64, 999, 16385, 100003, 262144};
    static const double dens[] = {1e-6, 0.001, 0.01, 0.1, 0.9, 1.0};
    for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++) {
        for (size_t d = 0; d < sizeof(dens) / sizeof(dens[0]); d++) {
            for (int f = 0; f < 2; f++) {
                const size_t n = sizes[a];
                zc_codec_params_t p = topk_params(dens[d], (zc_topk_values_t)f);
                zc_codec_state_t *s = state_new(&p, n);
                float *x = gauss_new(n, a * 100 + d);
                for (int t = 0; t < 2; t++) {
                    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n); /* asserts len <= bound */
                    payload_free(&pl);
                }
                free(x);
                zc_codec_state_destroy(s);
            }
        }
    }
}

/* ------------------------------------------------------------ non-finite */

/*
 * Non-finite values go out of band, whole: they arrive as themselves and
 * leave 0 in the residual (sent + residual = inf + 0 = inf), so the next step
 * is finite again; the body keeps the k largest finite values.
 */
static void check_nonfinite(zc_topk_values_t values)
{
    const size_t n = 1000;
    zc_codec_params_t p = topk_params(0.01, values);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = gauss_new(n, 60);
    x[17] = NAN;
    x[500] = INFINITY;
    x[999] = -INFINITY;
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    parsed_t r = parse(&pl);
    cr_assert_eq(r.kept, 10);
    cr_assert_eq(r.oob_n, 3);
    cr_assert(is_out_of_band(&r, 17) && is_out_of_band(&r, 500) && is_out_of_band(&r, 999));
    float *out = decode_ok(&pl, n);
    cr_assert(isnan(out[17]));
    cr_assert(isinf(out[500]) && out[500] > 0);
    cr_assert(isinf(out[999]) && out[999] < 0);
    for (size_t i = 0; i < n; i++) {
        cr_assert(isfinite(s->residual[i]), "residual %zu is %g", i, s->residual[i]);
        if (i != 17 && i != 500 && i != 999)
            cr_assert(isfinite(out[i]));
    }
    cr_assert_eq(s->residual[17], 0.0f);
    cr_assert_eq(s->residual[500], 0.0f);
    cr_assert_eq(s->residual[999], 0.0f);
    /* the body: the 10 largest finite values */
    float *finite = xmalloc(n * sizeof(float));
    memcpy(finite, x, n * sizeof(float));
    finite[17] = finite[500] = finite[999] = 0;
    uint64_t want[10];
    cr_assert_eq(expected_exact(finite, n, 10, want), 10);
    for (int j = 0; j < 10; j++)
        cr_assert(is_kept(&r, want[j]));
    free(finite);
    free(out);
    parsed_free(&r);
    payload_free(&pl);

    /* next step: finite input, finite payload */
    fill_gauss(x, n, 61, 1.0);
    pl = step(&p, s, ZC_DTYPE_F32, x, n);
    out = decode_ok(&pl, n);
    for (size_t i = 0; i < n; i++)
        cr_assert(isfinite(out[i]) && isfinite(s->residual[i]));
    free(out);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

Test(topk_nonfinite, propagate_f32_values)
{
    check_nonfinite(ZC_TOPK_VALUES_F32);
}

Test(topk_nonfinite, propagate_f16_values)
{
    check_nonfinite(ZC_TOPK_VALUES_F16);
}

/* More non-finite values than k: all go out of band, the body keeps the largest finite one. */
Test(topk_nonfinite, more_than_k)
{
    const size_t n = 100;
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = gauss_new(n, 62);
    x[7] = INFINITY;
    x[50] = NAN;
    x[60] = NAN;
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    parsed_t r = parse(&pl);
    cr_assert_eq(r.oob_n, 3);
    cr_assert(is_out_of_band(&r, 7) && is_out_of_band(&r, 50) && is_out_of_band(&r, 60));
    cr_assert_eq(r.kept, 1);
    x[7] = x[50] = x[60] = 0;
    uint64_t want;
    cr_assert_eq(expected_exact(x, n, 1, &want), 1);
    cr_assert_eq(r.pos[0], want);
    for (size_t i = 0; i < n; i++)
        cr_assert(isfinite(s->residual[i]), "residual %zu is %g", i, s->residual[i]);
    parsed_free(&r);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

/* Non-finite values on the sampled path go out of band; the body is the largest finite ones. */
Test(topk_nonfinite, sampled_path)
{
    const size_t n = 1 << 20;
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = gauss_new(n, 63);
    for (size_t i = 12345; i < n; i += 200000)
        x[i] = (i / 200000) % 2 ? NAN : -INFINITY;
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    parsed_t r = parse(&pl);
    for (size_t i = 12345; i < n; i += 200000) {
        cr_assert(is_out_of_band(&r, i), "non-finite value %zu not out of band", i);
        x[i] = 0;
    }
    assert_largest(x, n, &r);
    parsed_free(&r);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

/* --------------------------------------------------------- scalar vs SIMD */

static payload_t encode_at(zc_cpu_level_t level, const zc_codec_params_t *p, const float *x,
                           size_t n, float **residual_p)
{
    cr_assert_eq(zc_cpu_set_level(level), ZC_OK);
    zc_codec_state_t *s = state_new(p, n);
    payload_t pl = step(p, s, ZC_DTYPE_F32, x, n);
    *residual_p = xmalloc(n * sizeof(float));
    memcpy(*residual_p, s->residual, n * sizeof(float));
    zc_codec_state_destroy(s);
    cr_assert_eq(zc_cpu_set_level(zc_cpu_detect()), ZC_OK);
    return pl;
}

Test(topk_kernels, avx512_payloads_identical)
{
    if (!have_avx512())
        cr_skip_test("no AVX-512 on this CPU");
    static const size_t sizes[] = {65536 * 4 + 13, 1 << 20};
    static const double dens[] = {0.01, 0.05, 0.2};
    for (size_t a = 0; a < sizeof(sizes) / sizeof(sizes[0]); a++) {
        for (size_t d = 0; d < sizeof(dens) / sizeof(dens[0]); d++) {
            const size_t n = sizes[a];
            zc_codec_params_t p = topk_params(dens[d], ZC_TOPK_VALUES_F32);
            float *x = gauss_new(n, 70 + a);
            x[n - 1] = 100.0f; /* in the scalar tail of the SIMD loop */
            float *r1, *r2;
            payload_t s1 = encode_at(ZC_CPU_SCALAR, &p, x, n, &r1);
            payload_t s2 = encode_at(ZC_CPU_AVX512, &p, x, n, &r2);
            cr_assert_eq(s1.len, s2.len, "n %zu density %g", n, dens[d]);
            cr_assert_arr_eq(s1.buf, s2.buf, s1.len, "n %zu density %g", n, dens[d]);
            cr_assert(same_bits_f32(r1, r2, n));
            free(r1);
            free(r2);
            payload_free(&s1);
            payload_free(&s2);
            free(x);
        }
    }
}

/* The SIMD kernel tables this CPU runs, with their levels. */
typedef struct simd_kernels {
    zc_cpu_level_t level;
    const zc_topk_kernels_t *kern;
} simd_kernels_t;

static size_t simd_kernels(simd_kernels_t out[2])
{
    size_t m = 0;
    if (zc_cpu_detect() >= ZC_CPU_AVX2)
        out[m++] = (simd_kernels_t){ZC_CPU_AVX2, &zc_topk_kernels_avx2};
    if (zc_cpu_detect() >= ZC_CPU_AVX512)
        out[m++] = (simd_kernels_t){ZC_CPU_AVX512, &zc_topk_kernels_avx512};
    return m;
}

/* simd_kernels; the test is skipped when this CPU has no SIMD level. */
static size_t simd_kernels_or_skip(simd_kernels_t out[2])
{
    const size_t m = simd_kernels(out);
    if (m == 0)
        cr_skip_test("no SIMD level on this CPU");
    return m;
}

/* The collect kernels alone, over odd lengths, offsets and thresholds, and their early stop. */
Test(topk_kernels, collect_identical)
{
    simd_kernels_t simd[2];
    const size_t m = simd_kernels_or_skip(simd);
    const size_t n = 5000;
    float *x = gauss_new(n, 80);
    uint64_t *a = xmalloc((n + ZC_TOPK_COLLECT_SLACK) * sizeof(uint64_t));
    uint64_t *b = xmalloc((n + ZC_TOPK_COLLECT_SLACK) * sizeof(uint64_t));
    static const float thr[] = {0.0f, 0.5f, 2.0f, 3.5f, 100.0f};
    for (size_t k = 0; k < m; k++) {
        const zc_topk_kernels_t *kv = simd[k].kern;
        for (size_t t = 0; t < sizeof(thr) / sizeof(thr[0]); t++) {
            for (size_t len = 0; len < 300; len += 7) {
                uint64_t ca =
                    zc_topk_kernels_scalar.collect(x + 3, len, 1000, key_of(thr[t]), a, n);
                uint64_t cb = kv->collect(x + 3, len, 1000, key_of(thr[t]), b, n);
                cr_assert_eq(ca, cb, "level %d", (int)simd[k].level);
                cr_assert_arr_eq(a, b, ca * sizeof(uint64_t));
            }
            uint64_t ca = zc_topk_kernels_scalar.collect(x, n, 0, key_of(thr[t]), a, n);
            cr_assert_eq(kv->collect(x, n, 0, key_of(thr[t]), b, n), ca);
            cr_assert_arr_eq(a, b, ca * sizeof(uint64_t));
            /* a cap below the count: both report more than the cap */
            if (ca > 10) {
                cr_assert_gt(zc_topk_kernels_scalar.collect(x, n, 0, key_of(thr[t]), a, 10), 10);
                cr_assert_gt(kv->collect(x, n, 0, key_of(thr[t]), b, 10), 10);
            }
        }
    }
    free(a);
    free(b);
    free(x);
}

/*
 * The bucket kernels (exact selection's keys of one top digit) against the
 * reference: odd lengths and offsets, buckets empty, narrow and holding most
 * keys, integers with many ties, and a cap below the count.
 */
Test(topk_kernels, bucket_identical)
{
    simd_kernels_t simd[2];
    const size_t m = simd_kernels_or_skip(simd);
    const size_t n = 5000;
    float *x = gauss_new(n, 83);
    for (size_t i = 0; i < n; i += 3)
        x[i] = (float)((i * 7) % 61) - 30.0f; /* ties */
    uint32_t *a = xmalloc((n + ZC_TOPK_COLLECT_SLACK) * sizeof(uint32_t));
    uint32_t *b = xmalloc((n + ZC_TOPK_COLLECT_SLACK) * sizeof(uint32_t));
    /* [lo, lo + width): top digits of 0.5..1, 1..2, 28..32 and 2^-126.., a narrow range, none */
    const uint32_t lo[] = {key_of(0.5f), key_of(1.0f), key_of(28.0f), 0, key_of(30.0f), 0};
    const uint32_t width[] = {1u << 21, 1u << 23, 1u << 21, 1u << 30, 1, 0};
    for (size_t k = 0; k < m; k++) {
        const zc_topk_kernels_t *kv = simd[k].kern;
        for (size_t r = 0; r < sizeof(lo) / sizeof(lo[0]); r++) {
            for (size_t len = 0; len < 300; len += 7) {
                uint64_t ca = zc_topk_kernels_scalar.bucket(x + 3, len, lo[r], width[r], a, n);
                uint64_t cb = kv->bucket(x + 3, len, lo[r], width[r], b, n);
                cr_assert_eq(ca, cb, "level %d range %zu length %zu", (int)simd[k].level, r, len);
                cr_assert_arr_eq(a, b, ca * sizeof(uint32_t));
            }
            uint64_t ca = zc_topk_kernels_scalar.bucket(x, n, lo[r], width[r], a, n);
            cr_assert_eq(kv->bucket(x, n, lo[r], width[r], b, n), ca, "range %zu", r);
            cr_assert_arr_eq(a, b, ca * sizeof(uint32_t));
            for (uint64_t j = 0; j < ca; j++)
                cr_assert(a[j] - lo[r] < width[r], "range %zu: key %u outside", r, a[j]);
            if (ca > 10) {
                cr_assert_gt(zc_topk_kernels_scalar.bucket(x, n, lo[r], width[r], a, 10), 10);
                cr_assert_gt(kv->bucket(x, n, lo[r], width[r], b, 10), 10);
            }
        }
    }
    free(a);
    free(b);
    free(x);
}

/*
 * add_collect of every level against the reference: the residual plus the
 * input in f32, then collect_scalar on the sums. Odd lengths and offsets, a
 * threshold no key reaches (the add-only use), and a cap below the count:
 * every sum is still stored.
 */
Test(topk_kernels, add_collect_matches_add_then_collect)
{
    const size_t n = 5000;
    float *x = gauss_new(n, 81), *res0 = gauss_new(n, 82);
    float *want = xmalloc(n * sizeof(float)), *got = xmalloc(n * sizeof(float));
    uint64_t *a = xmalloc((n + ZC_TOPK_COLLECT_SLACK) * sizeof(uint64_t));
    uint64_t *b = xmalloc((n + ZC_TOPK_COLLECT_SLACK) * sizeof(uint64_t));
    const zc_topk_kernels_t *kerns[3] = {&zc_topk_kernels_scalar};
    simd_kernels_t simd[2];
    size_t nk = 1 + simd_kernels(simd);
    for (size_t k = 1; k < nk; k++)
        kerns[k] = simd[k - 1].kern;
    for (size_t i = 0; i < n; i += 17)
        res0[i] = -x[i]; /* sums of exactly 0: never kept */
    static const float thr[] = {0.0f, 0.5f, 2.0f, 3.5f, 100.0f, INFINITY};
    for (size_t k = 0; k < nk; k++) {
        for (size_t t = 0; t < sizeof(thr) / sizeof(thr[0]); t++) {
            const uint32_t key = isinf(thr[t]) ? UINT32_MAX : key_of(thr[t]);
            for (size_t len = 0; len < 300; len += 7) {
                for (size_t i = 0; i < len; i++)
                    want[i] = res0[3 + i] + x[3 + i];
                memcpy(got, res0 + 3, len * sizeof(float));
                uint64_t ca = zc_topk_kernels_scalar.collect(want, len, 1000, key, a, n);
                uint64_t cb = kerns[k]->add_collect(x + 3, got, len, 1000, key, b, n);
                cr_assert_eq(ca, cb, "kernels %zu, length %zu", k, len);
                cr_assert_arr_eq(a, b, ca * sizeof(uint64_t));
                cr_assert(same_bits_f32(want, got, len), "kernels %zu: the sums", k);
            }
            for (size_t i = 0; i < n; i++)
                want[i] = res0[i] + x[i];
            memcpy(got, res0, n * sizeof(float));
            uint64_t ca = zc_topk_kernels_scalar.collect(want, n, 0, key, a, n);
            cr_assert_eq(kerns[k]->add_collect(x, got, n, 0, key, b, n), ca);
            cr_assert_arr_eq(a, b, ca * sizeof(uint64_t));
            cr_assert(same_bits_f32(want, got, n));
            if (ca > 10) {
                memcpy(got, res0, n * sizeof(float));
                cr_assert_gt(kerns[k]->add_collect(x, got, n, 0, key, b, 10), 10);
                cr_assert(same_bits_f32(want, got, n), "kernels %zu: every sum past the cap", k);
            }
        }
    }
    free(a);
    free(b);
    free(got);
    free(want);
    free(res0);
    free(x);
}

/*
 * The fused error feedback (encode_ef, f32 input) against the generic path,
 * which a buffer one byte below the bound selects: the same payload and the
 * same residual bits, step after step, on the sampled and the exact path,
 * with both value formats, and at a step with NaN and infinities (the fused
 * encode stops and the generic scan takes over).
 */
Test(topk_ef, fused_matches_generic)
{
    static const size_t sizes[] = {10007, 300000};
    for (size_t z = 0; z < 2; z++) {
        for (int f16 = 0; f16 < 2; f16++) {
            const size_t n = sizes[z];
            zc_codec_params_t p = topk_params(0.01, f16 ? ZC_TOPK_VALUES_F16 : ZC_TOPK_VALUES_F32);
            zc_codec_state_t *fused = state_new(&p, n), *generic = state_new(&p, n);
            const size_t bound = zc_codec_bound(&p, n);
            uint8_t *pa = xmalloc(bound), *pb = xmalloc(bound);
            float *x = xmalloc(n * sizeof(float));
            for (int t = 0; t < 4; t++) {
                fill_gauss(x, n, 500 + (uint64_t)t, t == 1 ? 1e-3 : 1.0);
                if (t == 2) {
                    x[5] = NAN;
                    x[n / 2] = INFINITY;
                    x[n - 1] = -INFINITY;
                }
                size_t la = 0, lb = 0;
                cr_assert_eq(zc_codec_encode(&p, fused, NULL, ZC_DTYPE_F32, x, n, pa, bound, &la),
                             ZC_OK);
                cr_assert_eq(
                    zc_codec_encode(&p, generic, NULL, ZC_DTYPE_F32, x, n, pb, bound - 1, &lb),
                    ZC_OK);
                cr_assert_eq(la, lb, "n %zu f16 %d step %d", n, f16, t);
                cr_assert_arr_eq(pa, pb, la, "n %zu f16 %d step %d: payload", n, f16, t);
                cr_assert(same_bits_f32(fused->residual, generic->residual, n),
                          "n %zu f16 %d step %d: residual", n, f16, t);
                cr_assert_eq(fused->oob_values, generic->oob_values);
            }
            free(x);
            free(pa);
            free(pb);
            zc_codec_state_destroy(fused);
            zc_codec_state_destroy(generic);
        }
    }
}

/* Error-feedback steps at every SIMD level give the scalar level's payloads and residuals. */
Test(topk_kernels, ef_steps_identical_across_levels)
{
    const size_t n = 300000 + 13;
    zc_codec_params_t p = topk_params(0.01, ZC_TOPK_VALUES_F32);
    simd_kernels_t simd[2];
    const size_t m = simd_kernels_or_skip(simd);
    zc_codec_state_t *ref = state_new(&p, n), *st[2] = {state_new(&p, n), state_new(&p, n)};
    float *x = xmalloc(n * sizeof(float));
    for (int t = 0; t < 3; t++) {
        fill_gauss(x, n, 900 + (uint64_t)t, 1.0);
        x[n - 1] = 100.0f; /* in the scalar tail of the SIMD loops */
        cr_assert_eq(zc_cpu_set_level(ZC_CPU_SCALAR), ZC_OK);
        payload_t want = step(&p, ref, ZC_DTYPE_F32, x, n);
        for (size_t k = 0; k < m; k++) {
            cr_assert_eq(zc_cpu_set_level(simd[k].level), ZC_OK);
            payload_t got = step(&p, st[k], ZC_DTYPE_F32, x, n);
            cr_assert_eq(got.len, want.len, "level %d step %d", (int)simd[k].level, t);
            cr_assert_arr_eq(got.buf, want.buf, want.len);
            cr_assert(same_bits_f32(st[k]->residual, ref->residual, n));
            payload_free(&got);
        }
        payload_free(&want);
    }
    cr_assert_eq(zc_cpu_set_level(zc_cpu_detect()), ZC_OK);
    free(x);
    zc_codec_state_destroy(ref);
    zc_codec_state_destroy(st[0]);
    zc_codec_state_destroy(st[1]);
}

/* ------------------------------------------------------------------ hostile */

/* A payload of the generic header for n values and the given body. */
static payload_t forge(uint64_t n, const uint8_t *body, size_t blen)
{
    payload_t pl = {xmalloc(HDR + blen), HDR + blen};
    memset(pl.buf, 0, HDR);
    pl.buf[0] = 'Z';
    pl.buf[1] = 'C';
    pl.buf[2] = 1;
    pl.buf[3] = ZC_CODEC_TOPK;
    for (int i = 0; i < 8; i++)
        pl.buf[8 + i] = (uint8_t)(n >> (8 * i));
    if (blen)
        memcpy(pl.buf + HDR, body, blen);
    return pl;
}

static void body_header(uint8_t *b, uint64_t kept, unsigned format, unsigned coding, unsigned rb,
                        int e)
{
    for (int i = 0; i < 8; i++)
        b[i] = (uint8_t)(kept >> (8 * i));
    b[8] = (uint8_t)format;
    b[9] = (uint8_t)coding;
    b[10] = (uint8_t)rb;
    b[11] = (uint8_t)(int8_t)e;
}

static zc_status_t decode_forged(uint64_t n, const uint8_t *body, size_t blen, int *unchanged_p)
{
    payload_t pl = forge(n, body, blen);
    float *dst = xmalloc((n ? n : 1) * sizeof(float));
    for (uint64_t i = 0; i < n; i++)
        dst[i] = (float)i;
    zc_status_t st = zc_codec_decode_add(NULL, pl.buf, pl.len, dst, n);
    int same = 1;
    for (uint64_t i = 0; i < n; i++)
        same &= dst[i] == (float)i;
    if (unchanged_p)
        *unchanged_p = same;
    free(dst);
    payload_free(&pl);
    return st;
}

/* Hand-built payloads decode to known answers: the documented layout, both codings. */
Test(topk_hostile, known_answers)
{
    /* n = 10, positions 2, 3, 9 as varint gaps 2, 0, 5; f32 values 1.5, -2, 4 */
    uint8_t b[BODY_HDR + 12 + 3];
    body_header(b, 3, 0, 0, 0, 0);
    const float v[3] = {1.5f, -2.0f, 4.0f};
    memcpy(b + BODY_HDR, v, sizeof(v)); /* little-endian host */
    b[BODY_HDR + 12] = 2;
    b[BODY_HDR + 13] = 0;
    b[BODY_HDR + 14] = 5;
    payload_t pl = forge(10, b, sizeof(b));
    float *out = decode_ok(&pl, 10);
    const float want[10] = {0, 0, 1.5f, -2.0f, 0, 0, 0, 0, 0, 4.0f};
    cr_assert_arr_eq(out, want, sizeof(want));
    free(out);
    payload_free(&pl);

    /* the same as Rice, b = 1: gap 2 = q 1, low 0: bits 0 1 0; gap 0: 1 0; gap 5 = q 2, low 1:
     * 0 0 1 1 -> bit stream (first bit lowest) 0,1,0, 1,0, 0,0,1,1 = 0x8a, 0x01 */
    uint8_t c[BODY_HDR + 6 + 2];
    body_header(c, 3, 1, 1, 1, 0);
    const uint16_t h[3] = {zc_f32_to_f16(1.5f), zc_f32_to_f16(-2.0f), zc_f32_to_f16(4.0f)};
    memcpy(c + BODY_HDR, h, sizeof(h));
    c[BODY_HDR + 6] = 0x8a;
    c[BODY_HDR + 7] = 0x01;
    pl = forge(10, c, sizeof(c));
    out = decode_ok(&pl, 10);
    cr_assert_arr_eq(out, want, sizeof(want));
    free(out);
    payload_free(&pl);

    /* f16 with scale exponent -20: h * 2^-20 */
    c[11] = (uint8_t)(int8_t)-20;
    pl = forge(10, c, sizeof(c));
    out = decode_ok(&pl, 10);
    cr_assert_eq(out[2], 1.5f * 0x1p-20f);
    cr_assert_eq(out[9], 4.0f * 0x1p-20f);
    free(out);
    payload_free(&pl);
}

Test(topk_hostile, bad_headers)
{
    uint8_t b[BODY_HDR + 8 + 2] = {0};
    int same;
    /* valid: 2 values at positions 0 and 1 (varint gaps 0, 0) */
    body_header(b, 2, 0, 0, 0, 0);
    cr_assert_eq(decode_forged(4, b, sizeof(b), &same), ZC_OK);

    struct {
        uint64_t kept;
        unsigned format, coding, rb;
        int e;
        const char *what;
    } bad[] = {
        {5, 0, 0, 0, 0, "kept > count"},
        {3, 0, 0, 0, 0, "kept values do not fit"},
        {UINT64_MAX, 0, 0, 0, 0, "huge kept"},
        {UINT64_C(1) << 62, 1, 1, 0, 0, "huge kept, f16"},
        {2, 2, 0, 0, 0, "unknown value format"},
        {2, 0, 2, 0, 0, "unknown coding"},
        {2, 0, 0, 3, 0, "varint with a Rice parameter"},
        {2, 0, 1, 41, 0, "Rice parameter above 40"},
        {2, 0, 0, 0, 1, "f32 with a scale exponent"},
        {2, 1, 0, 0, -127, "f16 exponent too small"},
        {2, 1, 0, 0, 114, "f16 exponent too large"},
        {1, 0, 0, 0, 0, "kept count one short: bytes left over"},
        {0, 0, 0, 0, 0, "no values, bytes left over"},
    };
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        body_header(b, bad[i].kept, bad[i].format, bad[i].coding, bad[i].rb, bad[i].e);
        cr_assert_eq(decode_forged(4, b, sizeof(b), &same), ZC_ERR_CORRUPT, "%s", bad[i].what);
        cr_assert(same, "%s: output changed", bad[i].what);
    }
    /* shorter than the body header */
    for (size_t len = 0; len < BODY_HDR; len++)
        cr_assert_eq(decode_forged(4, b, len, NULL), ZC_ERR_CORRUPT, "body of %zu bytes", len);
}

Test(topk_hostile, bad_positions_varint)
{
    /* n = 8, two f32 values, then the varint gaps given */
    struct {
        uint8_t gaps[8];
        size_t len;
        zc_status_t want;
        const char *what;
    } cases[] = {
        {{0, 6}, 2, ZC_OK, "positions 0 and 7"},
        {{0, 7}, 2, ZC_ERR_CORRUPT, "position 8 = n"},
        {{8, 0}, 2, ZC_ERR_CORRUPT, "first position out of range"},
        {{7, 0}, 2, ZC_ERR_CORRUPT, "second position past the end"},
        {{3, 0xff, 0x7f}, 3, ZC_ERR_CORRUPT, "positions wrap past n"},
        {{0x80, 0x00, 0}, 3, ZC_ERR_CORRUPT, "overlong varint"},
        {{0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0}, 8, ZC_ERR_CORRUPT, "seven-byte varint"},
        {{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, 8, ZC_ERR_CORRUPT, "endless varint"},
        {{0}, 1, ZC_ERR_CORRUPT, "one gap missing"},
        {{0, 0x80}, 2, ZC_ERR_CORRUPT, "varint cut short"},
        {{0, 1, 0}, 3, ZC_ERR_CORRUPT, "a byte left over"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t b[BODY_HDR + 8 + 8] = {0};
        body_header(b, 2, 0, 0, 0, 0);
        memcpy(b + BODY_HDR + 8, cases[i].gaps, cases[i].len);
        int same;
        cr_assert_eq(decode_forged(8, b, BODY_HDR + 8 + cases[i].len, &same), cases[i].want, "%s",
                     cases[i].what);
        /* fewer than a block of positions: a failure adds nothing */
        cr_assert(cases[i].want == ZC_OK || same, "%s: output changed", cases[i].what);
    }
}

Test(topk_hostile, bad_positions_rice)
{
    /* n = 8, two f32 values, Rice b = 1, then the bytes given */
    struct {
        uint8_t bits[8];
        size_t len;
        unsigned b;
        zc_status_t want;
        const char *what;
    } cases[] = {
        /* gaps 0 (1 0), 6 = q 3 low 0 (0 0 0 1 0): bits 1,0,0,0,0,1,0 = 0x21 */
        {{0x21}, 1, 1, ZC_OK, "positions 0 and 7"},
        /* gap 7 = q 3 low 1: bits 1,0, 0,0,0,1,1 = 0x61 */
        {{0x61}, 1, 1, ZC_ERR_CORRUPT, "position 8 = n"},
        {{0xa1}, 1, 1, ZC_ERR_CORRUPT, "nonzero padding"},
        {{0x21, 0x00}, 2, 1, ZC_ERR_CORRUPT, "a byte left over"},
        {{0x01}, 1, 1, ZC_ERR_CORRUPT, "second gap cut short"},
        {{0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00},
         8,
         1,
         ZC_ERR_CORRUPT,
         "endless unary run"},
        {{0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80},
         8,
         1,
         ZC_ERR_CORRUPT,
         "long unary run beyond n"},
        {{0x03, 0, 0, 0, 0, 0}, 6, 40, ZC_ERR_CORRUPT, "b = 40, cut short"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        uint8_t b[BODY_HDR + 8 + 8] = {0};
        body_header(b, 2, 0, 1, cases[i].b, 0);
        memcpy(b + BODY_HDR + 8, cases[i].bits, cases[i].len);
        int same;
        cr_assert_eq(decode_forged(8, b, BODY_HDR + 8 + cases[i].len, &same), cases[i].want, "%s",
                     cases[i].what);
        cr_assert(cases[i].want == ZC_OK || same, "%s: output changed", cases[i].what);
    }
}

/* Every prefix of a valid payload is refused, and so is one byte more. */
static void check_truncations(zc_topk_values_t values, size_t n, double rho)
{
    zc_codec_params_t p = topk_params(rho, values);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = gauss_new(n, 90);
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    float *dst = zeros_f32(n);
    for (size_t len = 0; len < pl.len; len++) {
        uint8_t *cut = exact_copy(pl.buf, len);
        zc_status_t st = zc_codec_decode_add(NULL, cut ? cut : pl.buf, len, dst, n);
        cr_assert_eq(st, ZC_ERR_CORRUPT, "prefix of %zu/%zu bytes: %s", len, pl.len,
                     zc_status_string(st));
        free(cut);
    }
    uint8_t *more = xmalloc(pl.len + 1);
    memcpy(more, pl.buf, pl.len);
    for (int byte = 0; byte < 256; byte += 85) {
        more[pl.len] = (uint8_t)byte;
        cr_assert_eq(zc_codec_decode_add(NULL, more, pl.len + 1, dst, n), ZC_ERR_CORRUPT);
    }
    free(more);
    free(dst);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}

/* Up to one block (256) of kept values, a damaged payload adds nothing: the
 * last block waits for the whole position section to check out. */
Test(topk_hostile, last_block_added_only_when_valid)
{
    static const size_t kept[] = {255, 256, 257, 512};
    for (size_t a = 0; a < sizeof(kept) / sizeof(kept[0]); a++) {
        const size_t n = kept[a] * 10;
        zc_codec_params_t p = topk_params(0.1, ZC_TOPK_VALUES_F32);
        zc_codec_state_t *s = state_new(&p, n);
        float *x = gauss_new(n, 93);
        payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
        cr_assert_eq(le(pl.buf + HDR, 8), kept[a]);
        uint8_t *more = xmalloc(pl.len + 1);
        memcpy(more, pl.buf, pl.len);
        more[pl.len] = 0;
        float *dst = zeros_f32(n);
        cr_assert_eq(zc_codec_decode_add(NULL, more, pl.len + 1, dst, n), ZC_ERR_CORRUPT);
        size_t changed = 0;
        for (size_t i = 0; i < n; i++)
            changed += dst[i] != 0;
        /* 512: the first block went in before the damage showed */
        cr_assert_eq(changed, kept[a] <= 256 ? 0 : 256, "%zu kept: %zu changed", kept[a], changed);
        free(dst);
        free(more);
        payload_free(&pl);
        free(x);
        zc_codec_state_destroy(s);
    }
}

Test(topk_hostile, truncated_and_oversized)
{
    check_truncations(ZC_TOPK_VALUES_F32, 3000, 0.01); /* Rice */
    check_truncations(ZC_TOPK_VALUES_F16, 3000, 0.01);
    check_truncations(ZC_TOPK_VALUES_F32, 40, 0.05); /* a single kept value */
}

/*
 * Every single-bit flip of a payload: decoding either succeeds (a flipped
 * value or a different valid position list) or reports an error; nothing is
 * touched out of bounds (the ASan build checks, the output has exactly n floats).
 */
Test(topk_hostile, bit_flips)
{
    static const zc_topk_values_t formats[] = {ZC_TOPK_VALUES_F32, ZC_TOPK_VALUES_F16};
    for (int f = 0; f < 2; f++) {
        const size_t n = 500;
        zc_codec_params_t p = topk_params(0.04, formats[f]);
        zc_codec_state_t *s = state_new(&p, n);
        float *x = gauss_new(n, 91);
        payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
        float *dst = xmalloc(n * sizeof(float));
        size_t ok = 0, bad = 0;
        for (size_t bit = 0; bit < pl.len * 8; bit++) {
            uint8_t *m = exact_copy(pl.buf, pl.len);
            m[bit / 8] ^= (uint8_t)(1u << (bit % 8));
            memset(dst, 0, n * sizeof(float));
            zc_status_t st = zc_codec_decode_add(NULL, m, pl.len, dst, n);
            /* a flip in the codec id may name GradiVeQ, which wants a state */
            cr_assert(st == ZC_OK || st == ZC_ERR_CORRUPT || st == ZC_ERR_MISMATCH ||
                          st == ZC_ERR_INVALID_ARG,
                      "bit %zu: %s", bit, zc_status_string(st));
            st == ZC_OK ? ok++ : bad++;
            free(m);
        }
        /* flips in the values decode; every flip in the 16-byte header fails, and so
         * do those of kept-count bits 9..63 (a count above 500) */
        cr_assert_gt(ok, 0);
        cr_assert_geq(bad, 128 + 55);
        free(dst);
        payload_free(&pl);
        free(x);
        zc_codec_state_destroy(s);
    }
}

Test(topk_hostile, count_mismatch)
{
    const size_t n = 100;
    zc_codec_params_t p = topk_params(0.1, ZC_TOPK_VALUES_F32);
    zc_codec_state_t *s = state_new(&p, n);
    float *x = gauss_new(n, 92);
    payload_t pl = step(&p, s, ZC_DTYPE_F32, x, n);
    float *dst = zeros_f32(n + 1);
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, dst, n + 1), ZC_ERR_MISMATCH);
    cr_assert_eq(zc_codec_decode_add(NULL, pl.buf, pl.len, dst, n - 1), ZC_ERR_MISMATCH);
    free(dst);
    payload_free(&pl);
    free(x);
    zc_codec_state_destroy(s);
}
