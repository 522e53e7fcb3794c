/*
 * Non-finite and out-of-range values, codec by codec (docs/codecs.md, "Values
 * out of band"): a NaN or an infinity decodes to itself (an infinity of its
 * sign), a finite value past the body's range decodes to itself, every other
 * value decodes exactly as if that position held 0, and an error-feedback
 * residual never holds a non-finite value, so the next clean call is the one
 * a clean history gives.
 */
#include "codec/codec.h"
#include "common/compiler.h"

#include <criterion/criterion.h>
#include <criterion/parameterized.h>
#include <zipccl/zipccl_codec.h>

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define N 1000
#define POS 100 /* in the first QSGD bucket (512) and GradiVeQ slice 6 (K = 16) */

typedef enum special { SP_NAN, SP_PINF, SP_NINF, SP_HUGE, SP_DENORMAL, SP_COUNT } special_t;

static const char *const special_names[SP_COUNT] = {"nan", "+inf", "-inf", "1e38", "denormal"};

static float special_value(special_t sp)
{
    switch (sp) {
    case SP_NAN: return NAN;
    case SP_PINF: return INFINITY;
    case SP_NINF: return -INFINITY;
    case SP_HUGE: return 1e38f;
    default: return 1e-40f; /* subnormal in f32 */
    }
}

typedef enum kind {
    K_NONE,
    K_FP16,
    K_BF16,
    K_QSGD,
    K_QSGD_EF,
    K_TOPK,
    K_GVQ,
    K_GVQ_EF,
    K_COUNT
} kind_t;

static const char *const kind_names[K_COUNT] = {"none",    "fp16", "bf16",     "qsgd",
                                                "qsgd+ef", "topk", "gradiveq", "gradiveq+ef"};

static zc_codec_params_t params_of(kind_t k)
{
    static const zc_codec_id_t ids[K_COUNT] = {ZC_CODEC_NONE,     ZC_CODEC_FP16,    ZC_CODEC_BF16,
                                               ZC_CODEC_QSGD,     ZC_CODEC_QSGD,    ZC_CODEC_TOPK,
                                               ZC_CODEC_GRADIVEQ, ZC_CODEC_GRADIVEQ};
    zc_codec_params_t p;
    cr_assert_eq(zc_codec_params_default(ids[k], &p), ZC_OK);
    p.qsgd.error_feedback = k == K_QSGD_EF;
    p.topk.density = 0.05;
    p.gradiveq.slice = 16;
    p.gradiveq.dim = 4;
    p.gradiveq.ranks = 1;
    p.gradiveq.error_feedback = k == K_GVQ_EF;
    return p;
}

/* Fixed pseudo-random values in (-1, 1): an LCG, so the test needs no library RNG. */
static void fill(float *x, size_t n, uint32_t seed)
{
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        x[i] = (float)((double)(seed >> 8) / (1 << 23) - 1.0);
    }
}

typedef struct codec_run {
    zc_codec_params_t p;
    zc_codec_state_t *st;
    uint8_t *buf;
    size_t cap, len;
} codec_run_t;

/* @p ranks: payloads GradiVeQ sums before decoding (2 for a reduce) */
static void run_init(codec_run_t *r, kind_t k, uint32_t ranks)
{
    r->p = params_of(k);
    r->p.gradiveq.ranks = ranks;
    r->st = NULL;
    if (zc_codec_needs_state(&r->p))
        cr_assert_eq(zc_codec_state_create(&r->p, N, &r->st), ZC_OK);
    if (r->p.codec == ZC_CODEC_GRADIVEQ) {
        /* a basis learned from a fixed sum, the same in every run */
        float sum[N];
        fill(sum, N, 7);
        cr_assert_eq(zc_codec_state_update(r->st, sum, N), ZC_OK);
    }
    r->cap = zc_codec_bound(&r->p, N);
    cr_assert_gt(r->cap, 0);
    r->buf = malloc(r->cap);
    cr_assert_not_null(r->buf);
}

static void run_fini(codec_run_t *r)
{
    zc_codec_state_destroy(r->st);
    free(r->buf);
}

/* Encodes @p x (call @p counter) and decodes the payload into @p out (zeroed first). */
static void run_call(codec_run_t *r, const float *x, uint32_t counter, float *out)
{
    zc_codec_rng_t rng = {.seed = 42, .rank = 0, .stream = 0, .counter = counter};
    zc_status_t s =
        zc_codec_encode(&r->p, r->st, &rng, ZC_DTYPE_F32, x, N, r->buf, r->cap, &r->len);
    cr_assert_eq(s, ZC_OK, "encode: %s", zc_status_string(s));
    cr_assert_leq(r->len, r->cap);
    memset(out, 0, N * sizeof(float));
    s = zc_codec_decode_add(r->st, r->buf, r->len, out, N);
    cr_assert_eq(s, ZC_OK, "decode: %s", zc_status_string(s));
}

static int same_float(float a, float b)
{
    return (isnan(a) && isnan(b)) || a == b;
}

/* The decoded value at the special position, given what the body gives for a 0 there. */
static void check_at_pos(kind_t k, special_t sp, float got, float zero_got, const char *what)
{
    /* bf16 carries 1e38 in its body, rounded (unit roundoff 2^-8); the others send it exactly */
    const float tol = k == K_BF16 ? 0x1p-8f : 1e-6f;
    switch (sp) {
    case SP_NAN: cr_assert(isnan(got), "%s: %g, not NaN", what, got); break;
    case SP_PINF: cr_assert(got == INFINITY, "%s: %g, not +inf", what, got); break;
    case SP_NINF: cr_assert(got == -INFINITY, "%s: %g, not -inf", what, got); break;
    case SP_HUGE:
        cr_assert(isfinite(got) && fabsf(got - 1e38f) <= 1e38f * tol + fabsf(zero_got),
                  "%s: %g, not 1e38", what, got);
        break;
    default: cr_assert(isfinite(got), "%s: %g", what, got); break;
    }
}

typedef struct nf_case {
    kind_t kind;
    special_t sp;
} nf_case_t;

ParameterizedTestParameters(nonfinite, encode_decode)
{
    static nf_case_t cases[K_COUNT * SP_COUNT];
    for (int k = 0; k < K_COUNT; k++)
        for (int s = 0; s < SP_COUNT; s++)
            cases[k * SP_COUNT + s] = (nf_case_t){(kind_t)k, (special_t)s};
    return cr_make_param_array(nf_case_t, cases, K_COUNT * SP_COUNT);
}

/*
 * Two histories of one tensor, equal but for one position of the first call:
 * the special value in one, 0 in the other. The decoded first calls agree
 * everywhere else, bit for bit (denormals: within 1e-30); the residuals
 * agree, so the second, clean calls decode to the same values, all finite.
 */
ParameterizedTest(nf_case_t *c, nonfinite, encode_decode)
{
    const char *name = kind_names[c->kind], *spn = special_names[c->sp];
    static float x[N], x0[N], x2[N], da[N], db[N], ea[N], eb[N];
    codec_run_t a, b;

    /* topk keeps a finite 1e38 like any large value (and not another): no like-0 history */
    const int like_zero = c->sp != SP_DENORMAL && !(c->kind == K_TOPK && c->sp == SP_HUGE);

    fill(x, N, 1);
    fill(x2, N, 2);
    memcpy(x0, x, sizeof(x));
    x[POS] = special_value(c->sp);
    x0[POS] = 0;
    run_init(&a, c->kind, 1);
    run_init(&b, c->kind, 1);

    run_call(&a, x, 1, da);
    run_call(&b, x0, 1, db);
    check_at_pos(c->kind, c->sp, da[POS], db[POS], name);
    for (size_t i = 0; i < N; i++) {
        if (i == POS)
            continue;
        if (c->kind == K_TOPK && c->sp == SP_HUGE)
            continue;
        if (c->sp == SP_DENORMAL)
            cr_assert(isfinite(da[i]) && fabsf(da[i] - db[i]) <= 1e-30f,
                      "%s %s: value %zu: %g, %g with 0", name, spn, i, da[i], db[i]);
        else
            cr_assert(same_float(da[i], db[i]), "%s %s: value %zu: %g, %g with 0", name, spn, i,
                      da[i], db[i]);
    }
    if (a.st && a.st->residual) {
        for (size_t i = 0; i < N; i++)
            cr_assert(isfinite(a.st->residual[i]), "%s %s: residual %zu is %g", name, spn, i,
                      a.st->residual[i]);
        if (like_zero)
            cr_assert_eq(memcmp(a.st->residual, b.st->residual, N * sizeof(float)), 0,
                         "%s %s: the residual is not the one of a 0", name, spn);
    }
    /* values out of band are counted in the state */
    if (a.st)
        cr_assert_eq(a.st->oob_values,
                     c->sp == SP_DENORMAL || (c->sp == SP_HUGE && c->kind == K_TOPK) ? 0u : 1u,
                     "%s %s: %llu values out of band", name, spn,
                     (unsigned long long)a.st->oob_values);

    run_call(&a, x2, 2, ea);
    run_call(&b, x2, 2, eb);
    for (size_t i = 0; i < N; i++) {
        cr_assert(isfinite(ea[i]), "%s %s: next call, value %zu is %g", name, spn, i, ea[i]);
        if (like_zero)
            cr_assert(ea[i] == eb[i], "%s %s: next call, value %zu: %g, %g after a 0", name, spn, i,
                      ea[i], eb[i]);
    }
    run_fini(&a);
    run_fini(&b);
}

/*
 * Linear codecs: the sum of two payloads keeps the special value's sum at its
 * position (1e38 + 1e38 is finite in f32) and is elsewhere the sum with 0.
 */
ParameterizedTestParameters(nonfinite, reduce)
{
    static nf_case_t cases[4 * SP_COUNT];
    static const kind_t linear[4] = {K_NONE, K_FP16, K_BF16, K_GVQ};
    for (int k = 0; k < 4; k++)
        for (int s = 0; s < SP_COUNT; s++)
            cases[k * SP_COUNT + s] = (nf_case_t){linear[k], (special_t)s};
    return cr_make_param_array(nf_case_t, cases, 4 * SP_COUNT);
}

ParameterizedTest(nf_case_t *c, nonfinite, reduce)
{
    const char *name = kind_names[c->kind], *spn = special_names[c->sp];
    static float x[N], x0[N], da[N], db[N];
    codec_run_t a, b;
    size_t len;

    fill(x, N, 3);
    memcpy(x0, x, sizeof(x));
    x[POS] = special_value(c->sp);
    x0[POS] = 0;
    run_init(&a, c->kind, 2);
    run_init(&b, c->kind, 2);
    run_call(&a, x, 1, da);
    run_call(&b, x0, 1, db);
    /* a payload plus the clean one: the special value comes from one side only */
    uint8_t *sum = malloc(a.cap), *sum0 = malloc(b.cap);
    zc_status_t st = zc_codec_reduce(a.st, a.buf, a.len, b.buf, b.len, sum, a.cap, &len);
    cr_assert_eq(st, ZC_OK, "%s %s: reduce: %s", name, spn, zc_status_string(st));
    memset(da, 0, sizeof(da));
    cr_assert_eq(zc_codec_decode_add(a.st, sum, len, da, N), ZC_OK);
    cr_assert_eq(zc_codec_reduce(b.st, b.buf, b.len, b.buf, b.len, sum0, b.cap, &len), ZC_OK);
    memset(db, 0, sizeof(db));
    cr_assert_eq(zc_codec_decode_add(b.st, sum0, len, db, N), ZC_OK);
    check_at_pos(c->kind, c->sp, da[POS], db[POS], name);
    for (size_t i = 0; i < N; i++)
        if (i != POS)
            cr_assert(c->sp == SP_DENORMAL ? fabsf(da[i] - db[i]) <= 1e-30f : da[i] == db[i],
                      "%s %s: reduced value %zu: %g, %g with 0", name, spn, i, da[i], db[i]);
    /* in place (dst aliases a), with the out-of-band section of b only */
    memcpy(sum, b.buf, b.len);
    cr_assert_eq(zc_codec_reduce(a.st, sum, b.len, a.buf, a.len, sum, a.cap, &len), ZC_OK);
    memset(da, 0, sizeof(da));
    cr_assert_eq(zc_codec_decode_add(a.st, sum, len, da, N), ZC_OK);
    check_at_pos(c->kind, c->sp, da[POS], db[POS], name);
    free(sum);
    free(sum0);
    run_fini(&a);
    run_fini(&b);
}

/* fp16: finite values whose sum f32 holds stay finite, however large for binary16. */
Test(nonfinite, fp16_sums_past_65504)
{
    zc_codec_params_t p;
    float x[4] = {40000, -40000, 70000, 1}, out[4] = {0};
    uint8_t a[256], s[256];
    size_t alen, slen;

    cr_assert_eq(zc_codec_params_default(ZC_CODEC_FP16, &p), ZC_OK);
    cr_assert_leq(zc_codec_bound(&p, 4), sizeof(a));
    cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, x, 4, a, sizeof(a), &alen), ZC_OK);
    cr_assert_eq(zc_codec_decode_add(NULL, a, alen, out, 4), ZC_OK);
    cr_assert_eq(out[2], 70000.0f, "70000 decoded as %g", out[2]);
    cr_assert_eq(zc_codec_reduce(NULL, a, alen, a, alen, s, sizeof(s), &slen), ZC_OK);
    memset(out, 0, sizeof(out));
    cr_assert_eq(zc_codec_decode_add(NULL, s, slen, out, 4), ZC_OK);
    cr_assert_eq(out[0], 80000.0f, "40000 + 40000 decoded as %g", out[0]);
    cr_assert_eq(out[1], -80000.0f, "-40000 - 40000 decoded as %g", out[1]);
    cr_assert_eq(out[2], 140000.0f, "70000 + 70000 decoded as %g", out[2]);
    cr_assert_eq(out[3], 2.0f);
}

/* Hostile out-of-band sections: every one is ZC_ERR_CORRUPT and adds nothing. */
Test(nonfinite, hostile_sections)
{
    zc_codec_params_t p;
    float x[8] = {1, 2, NAN, 4, 5, INFINITY, 7, 8}, out[8];
    uint8_t a[512], bad[512];
    size_t len;

    cr_assert_eq(zc_codec_params_default(ZC_CODEC_QSGD, &p), ZC_OK);
    cr_assert_eq(zc_codec_encode(&p, NULL, NULL, ZC_DTYPE_F32, x, 8, a, sizeof(a), &len), ZC_OK);
    cr_assert(a[4] & 1, "no out-of-band flag");
    /* section: u64 n = 2, two f32, gaps 2 and 2 (positions 2 and 5) */
    cr_assert_eq(a[16], 2);
    cr_assert_eq(a[16 + 16], 2);
    cr_assert_eq(a[16 + 17], 2);
    struct {
        size_t at;
        uint8_t v;
    } edits[] = {
        {16, 0},         /* n = 0 */
        {16, 9},         /* n > count */
        {16 + 7, 0x80},  /* n huge */
        {16 + 17, 5},    /* second position 8: past the last value */
        {16 + 16, 0x80}, /* varint runs on into the next */
        {4, 0x03},       /* an unknown flag */
        {5, 0x01},       /* reserved byte */
    };
    for (size_t e = 0; e < sizeof(edits) / sizeof(edits[0]); e++) {
        memcpy(bad, a, len);
        bad[edits[e].at] = edits[e].v;
        memset(out, 0, sizeof(out));
        cr_assert_eq(zc_codec_decode_add(NULL, bad, len, out, 8), ZC_ERR_CORRUPT, "edit %zu", e);
        for (int i = 0; i < 8; i++)
            cr_assert_eq(out[i], 0.0f, "edit %zu wrote value %d", e, i);
    }
    /* truncated anywhere in the section */
    for (size_t cut = 16; cut < 16 + 8 + 8 + 2; cut++)
        cr_assert_eq(zc_codec_decode_add(NULL, a, cut, out, 8), ZC_ERR_CORRUPT, "cut %zu", cut);
    /* a codec whose encoder never writes a section */
    zc_codec_params_t np;
    cr_assert_eq(zc_codec_params_default(ZC_CODEC_NONE, &np), ZC_OK);
    cr_assert_eq(zc_codec_encode(&np, NULL, NULL, ZC_DTYPE_F32, x, 8, bad, sizeof(bad), &len),
                 ZC_OK);
    cr_assert_eq(bad[4], 0);
    bad[4] = 1;
    cr_assert_eq(zc_codec_decode_add(NULL, bad, len, out, 8), ZC_ERR_CORRUPT);
}

/* ---- past the section's cap (16 + count / 1024 entries: 16 for N values) ---- */

#define CAP 16
#define MANY 40 /* more special values than a section holds */

/* The n of the payload's section (0 without one). */
static uint64_t section_entries(const uint8_t *payload)
{
    uint64_t n = 0;
    if (!(payload[4] & 1))
        return 0;
    for (int i = 7; i >= 0; i--)
        n = n << 8 | payload[16 + i];
    return n;
}

/*
 * More NaN than the section holds: the first CAP go out of band, the body
 * carries the rest (QSGD, GradiVeQ: their bucket or slice turns NaN), every
 * one decodes non-finite, and error feedback keeps no NaN for the next call.
 */
Test(nonfinite, nan_past_the_cap)
{
    static const kind_t kinds[] = {K_QSGD, K_QSGD_EF, K_TOPK, K_GVQ, K_GVQ_EF};
    float x[N], out[N], clean[N];
    for (size_t c = 0; c < ZC_ARRAY_SIZE(kinds); c++) {
        codec_run_t r;
        run_init(&r, kinds[c], 1);
        fill(x, N, 3);
        for (int j = 0; j < MANY; j++)
            x[j * 25] = NAN;
        run_call(&r, x, 0, out);
        cr_assert_eq(section_entries(r.buf), CAP, "%s", kind_names[kinds[c]]);
        for (int j = 0; j < MANY; j++)
            cr_assert(isnan(out[j * 25]), "%s: NaN %d decoded to %g", kind_names[kinds[c]], j,
                      out[j * 25]);
        /* the next clean call: nothing non-finite came back from the residual */
        fill(clean, N, 5);
        run_call(&r, clean, 1, out);
        for (int i = 0; i < N; i++)
            cr_assert(isfinite(out[i]), "%s: clean call, value %d is %g", kind_names[kinds[c]], i,
                      out[i]);
        /* counted: CAP sent out of band, and the residual entries the body's NaN cleared */
        if (kinds[c] == K_QSGD_EF || kinds[c] == K_GVQ_EF)
            cr_assert_geq(r.st->oob_values, MANY, "%s", kind_names[kinds[c]]);
        run_fini(&r);
    }
}

/*
 * fp16: more finite values past 65504 than a section holds, in encode and in
 * reduce: the body goes wide (f32) and every value is exact.
 */
Test(nonfinite, fp16_past_the_cap)
{
    codec_run_t r;
    float x[N], out[N];
    uint8_t *sum;
    size_t slen;

    run_init(&r, K_FP16, 1);
    fill(x, N, 9);
    for (int j = 0; j < MANY; j++)
        x[j * 25] = 1e5f;
    run_call(&r, x, 0, out);
    cr_assert_eq(section_entries(r.buf), 0);
    cr_assert_eq(r.len, 16 + 4 * N, "the wide body");
    for (int j = 0; j < MANY; j++)
        cr_assert_eq(out[j * 25], 1e5f, "value %d: %g", j, out[j * 25]);

    /* sums past the range: 40000 + 40000 at MANY positions */
    fill(x, N, 9);
    for (int j = 0; j < MANY; j++)
        x[j * 25] = 40000.0f;
    run_call(&r, x, 1, out);
    cr_assert_eq(r.len, 16 + 2 * N, "nothing spills in one payload");
    sum = malloc(r.cap);
    cr_assert_eq(zc_codec_reduce(NULL, r.buf, r.len, r.buf, r.len, sum, r.cap, &slen), ZC_OK);
    cr_assert_eq(slen, 16 + 4 * N, "the sum goes wide");
    memset(out, 0, sizeof(out));
    cr_assert_eq(zc_codec_decode_add(NULL, sum, slen, out, N), ZC_OK);
    for (int j = 0; j < MANY; j++)
        cr_assert_eq(out[j * 25], 80000.0f, "sum %d: %g", j, out[j * 25]);
    /* a wide payload reduces with a narrow one: wide, f32 sums */
    uint8_t *sum2 = malloc(r.cap);
    cr_assert_eq(zc_codec_reduce(NULL, sum, slen, r.buf, r.len, sum2, r.cap, &slen), ZC_OK);
    memset(out, 0, sizeof(out));
    cr_assert_eq(zc_codec_decode_add(NULL, sum2, slen, out, N), ZC_OK);
    for (int j = 0; j < MANY; j++)
        cr_assert_eq(out[j * 25], 120000.0f, "sum %d: %g", j, out[j * 25]);
    free(sum2);
    free(sum);
    run_fini(&r);
}

/*
 * GradiVeQ reduce: two sections within the cap whose union is not; the entries
 * past it turn their slice into NaN, and every NaN position stays NaN.
 */
Test(nonfinite, gradiveq_reduce_past_the_cap)
{
    codec_run_t a, b;
    float x[N], y[N], out[N];
    size_t len;

    run_init(&a, K_GVQ, 2);
    run_init(&b, K_GVQ, 2);
    fill(x, N, 11);
    fill(y, N, 13);
    for (int j = 0; j < 12; j++) {
        x[j * 50] = NAN;
        y[j * 50 + 25] = INFINITY;
    }
    run_call(&a, x, 0, out);
    run_call(&b, y, 0, out);
    cr_assert_eq(section_entries(a.buf), 12);
    uint8_t *sum = malloc(a.cap);
    cr_assert_eq(zc_codec_reduce(a.st, a.buf, a.len, b.buf, b.len, sum, a.cap, &len), ZC_OK);
    cr_assert_eq(section_entries(sum), CAP);
    memset(out, 0, sizeof(out));
    cr_assert_eq(zc_codec_decode_add(a.st, sum, len, out, N), ZC_OK);
    for (int j = 0; j < 12; j++) {
        cr_assert(isnan(out[j * 50]), "NaN %d: %g", j, out[j * 50]);
        cr_assert(!isfinite(out[j * 50 + 25]), "inf %d: %g", j, out[j * 50 + 25]);
    }
    free(sum);
    run_fini(&a);
    run_fini(&b);
}
