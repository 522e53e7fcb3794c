/*
 * The policy: eligibility, the configured or cheapest path of each call, and
 * the measurements behind the cost model (docs/collectives.md, "Cost model").
 *
 * Everything zc_policy_choose reads is in zc_policy_t and identical on every
 * rank: the configuration, and inputs that are either nominal constants (no
 * auto setting: nothing measured) or the numbers the ranks agreed on at init.
 * choose() and the cost functions are pure arithmetic on them, evaluated in
 * the same order by the same binary, so every rank takes the same decision.
 */
#include "collectives/coll.h"
#include "codec/codec.h"
#include "common/compiler.h"
#include "common/log.h"
#include "common/philox.h"
#include "common/timer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/*
 * Nominal inputs, used when nothing is auto (so nothing is measured): only
 * zc_policy_cost reads them then (logs, allreduce_perf). A 10 Gb/s link with
 * 20 us steps; the codecs' nominal speeds and their ratios from the
 * parameters are theirs (zc_codec_ops_t: nominal_*_bw, wire_ratio).
 */
#define NOMINAL_LINK_BW 1.25e9
#define NOMINAL_LINK_LAT 20e-6
#define NOMINAL_ADD_BW 10e9

/*
 * Link measurement: exchanges with both ring neighbours at once (what one ring
 * step does), best of several rounds so that a rank arriving late or a first
 * rendezvous only costs a round. 3 x 4 MiB take about 10 ms at 10 Gb/s and
 * 0.1 s at 1 Gb/s.
 */
#define LINK_BIG_BYTES (4u << 20)
#define LINK_BIG_ROUNDS 3
#define LINK_SMALL_BYTES 8
#define LINK_SMALL_ROUNDS 10

/* Codec measurement on rank 0: 4 MiB of N(0,1) (larger than L2, as gradients are), best of 3. */
#define CODEC_VALUES (1u << 20)
#define CODEC_REPS 3
#define CODEC_DATA_SEED UINT64_C(0x706f6c696379) /* "policy" */

/*
 * Where raw is a candidate, a compressed path must model this much faster to
 * be taken: the model ignores per-payload overheads (headers, codec calls,
 * more messages) that count where latency dominates, so gains within its error
 * are not gains, and a lossy codec should buy real time for the accuracy it
 * costs.
 */
#define RAW_MIN_GAIN 0.1

/* Sizes of f32 sums the init log shows the decision for: 64 KiB .. 1 GiB by 4x. */
#define LOG_SIZE_MIN (64u << 10)
#define LOG_SIZE_STEPS 8

static double clamp_rate(double bytes, double secs)
{
    /* a timer that saw nothing still gives a finite, positive rate */
    return bytes / (secs > 1e-9 ? secs : 1e-9);
}

/* ---------------------------------------------------------------- support */

int zc_policy_supports(zc_algo_id_t algo, zc_codec_id_t codec)
{
    if ((unsigned)codec >= ZC_CODEC_COUNT)
        return 0;
    switch (algo) {
    case ZC_ALGO_RAW: return codec == ZC_CODEC_NONE;
    case ZC_ALGO_CRING: return (zc_codec_caps(codec) & ZC_CODEC_CAP_LINEAR) != 0;
    case ZC_ALGO_ALLGATHER:
    case ZC_ALGO_SCATTER: return 1;
    default: return 0;
    }
}

const char *zc_algo_name(zc_algo_id_t algo)
{
    static const char *const names[ZC_ALGO_COUNT] = {
        [ZC_ALGO_RAW] = "raw",
        [ZC_ALGO_CRING] = "ring",
        [ZC_ALGO_ALLGATHER] = "allgather",
        [ZC_ALGO_SCATTER] = "scatter",
    };
    return (unsigned)algo < ZC_ALGO_COUNT ? names[algo] : NULL;
}

/* ZIPCCL_ALGO's index (1 ring, 2 allgather, 3 scatter) as an algorithm. */
static zc_algo_id_t algo_from_cfg(int algo_cfg)
{
    switch (algo_cfg) {
    case 1: return ZC_ALGO_CRING;
    case 2: return ZC_ALGO_ALLGATHER;
    default: return ZC_ALGO_SCATTER;
    }
}

/* ---------------------------------------------------------------- cost model */

/*
 * Modelled seconds of @p algo with @p codec on @p count values whose raw form
 * is @p elem bytes each. Codec speeds and ratios are per f32 input byte
 * (B = 4 count); the raw ring moves the caller's type (count * elem bytes).
 * The formulas are policy.h's; they add the stages up without crediting the
 * overlap of pipelining, so compression is modelled slightly pessimistically.
 */
static double path_cost(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec,
                        double count, double elem)
{
    const zc_policy_inputs_t *in = &pol->in;
    const double n = pol->nranks, W = in->link_bw, L = in->link_lat;
    const double B = 4.0 * count;

    if (!zc_policy_supports(algo, codec))
        return INFINITY;
    if (algo == ZC_ALGO_RAW)
        return 2.0 * (n - 1.0) * (L + count * elem / (n * W)) + (n - 1.0) * B / (n * in->add_bw);

    const double r = in->ratio[codec], E = in->enc_bw[codec], D = in->dec_bw[codec];
    const double P = r * B; /* payload bytes of the whole vector */
    switch (algo) {
    case ZC_ALGO_CRING:
        return B / E + 2.0 * (n - 1.0) * (L + P / (n * W)) +
               (n - 1.0) * P / (n * in->reduce_bw[codec]) + B / D;
    case ZC_ALGO_ALLGATHER: return B / E + (n - 1.0) * (L + P / W) + n * B / D;
    default: /* scatter: shards out, owner decodes and re-encodes its shard, all-gather, decode */
        return B / E + (n - 1.0) * (L + P / (n * W)) + B / D + B / (n * E) +
               (n - 1.0) * (L + P / (n * W)) + B / D;
    }
}

double zc_policy_cost(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec, size_t bytes)
{
    return path_cost(pol, algo, codec, (double)bytes / 4.0, 4.0);
}

/* ---------------------------------------------------------------- choose */

static int eligible(const zc_policy_t *pol, size_t count, zc_dtype_t dtype, zc_redop_t op)
{
    if (dtype != ZC_DTYPE_F32 && dtype != ZC_DTYPE_F16 && dtype != ZC_DTYPE_BF16)
        return 0;
    if (op != ZC_OP_SUM && op != ZC_OP_AVG)
        return 0;
    if (count == 0 || pol->codec_cfg == ZC_CODEC_NONE)
        return 0;
    size_t elem = zc_dtype_size(dtype);
    /* count * elem would overflow only for tensors far above any min_bytes */
    return count > SIZE_MAX / elem || count * elem >= pol->min_bytes;
}

static zc_path_t make_path(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec)
{
    zc_path_t path;
    /* byte for byte (padding included) the same on every rank: callers may hash or compare it */
    memset(&path, 0, sizeof(path));
    path.algo = algo;
    memcpy(&path.params, &pol->params[codec], sizeof(path.params));
    return path;
}

/*
 * The cheapest of @p codecs x the compressed algorithms allowed (@p algo_cfg);
 * with @p with_raw, raw unless that path models at least RAW_MIN_GAIN faster.
 * Candidates are tried in a fixed order and a later one must be strictly
 * cheaper, so ties resolve the same way on every rank.
 */
static zc_path_t cheapest(const zc_policy_t *pol, const zc_codec_id_t *codecs, size_t ncodecs,
                          int with_raw, double count, double elem)
{
    zc_algo_id_t best_algo = ZC_ALGO_RAW;
    zc_codec_id_t best_codec = ZC_CODEC_NONE;
    double best = INFINITY;

    for (size_t i = 0; i < ncodecs; i++) {
        for (int a = ZC_ALGO_CRING; a < ZC_ALGO_COUNT; a++) {
            if (pol->algo_cfg != ZC_POLICY_ALGO_AUTO && a != (int)algo_from_cfg(pol->algo_cfg))
                continue;
            double c = path_cost(pol, (zc_algo_id_t)a, codecs[i], count, elem);
            if (c < best) {
                best = c;
                best_algo = (zc_algo_id_t)a;
                best_codec = codecs[i];
            }
        }
    }
    if (with_raw &&
        !(best < (1.0 - RAW_MIN_GAIN) * path_cost(pol, ZC_ALGO_RAW, ZC_CODEC_NONE, count, elem)))
        return make_path(pol, ZC_ALGO_RAW, ZC_CODEC_NONE);
    return make_path(pol, best_algo, best_codec);
}

zc_path_t zc_policy_choose(const zc_policy_t *pol, size_t count, zc_dtype_t dtype, zc_redop_t op)
{
    if (!eligible(pol, count, dtype, op))
        return make_path(pol, ZC_ALGO_RAW, ZC_CODEC_NONE);

    const double n = (double)count, elem = (double)zc_dtype_size(dtype);

    if (pol->codec_cfg != ZC_POLICY_CODEC_AUTO) {
        const zc_codec_id_t codec = (zc_codec_id_t)pol->codec_cfg;
        if (pol->algo_cfg != ZC_POLICY_ALGO_AUTO) {
            zc_algo_id_t algo = algo_from_cfg(pol->algo_cfg);
            if (!zc_policy_supports(algo, codec)) {
                ZC_LOG_ONCE(ZC_LOG_WARN,
                            "policy: ZIPCCL_ALGO=%s needs a linear codec (payloads summed "
                            "without decoding) and %s is not one; using allgather",
                            zc_algo_name(algo), zc_codec_name(codec));
                algo = ZC_ALGO_ALLGATHER;
            }
            return make_path(pol, algo, codec);
        }
        /* one rank: the codec as configured all the same, so that its tests exercise it */
        return cheapest(pol, &codec, 1, pol->nranks > 1, n, elem);
    }

    if (pol->nranks < 2)
        return make_path(pol, ZC_ALGO_RAW, ZC_CODEC_NONE);
    /*
     * Auto considers the stateless codecs only: top-k and GradiVeQ keep
     * per-tensor state and change what the optimiser sees (error feedback,
     * a learned basis), which is the user's call (ZIPCCL_CODEC), not the
     * cost model's.
     */
    static const zc_codec_id_t auto_codecs[] = {ZC_CODEC_BF16, ZC_CODEC_QSGD};
    /*
     * On f16 and bf16 input the bf16 codec would send as many bytes as the
     * raw ring (and round f16's mantissa away): only qsgd can gain there.
     */
    if (elem == 2.0)
        return cheapest(pol, auto_codecs + 1, 1, 1, n, elem);
    return cheapest(pol, auto_codecs, ZC_ARRAY_SIZE(auto_codecs), 1, n, elem);
}

/* ---------------------------------------------------------------- measurement */

/*
 * Tags of the measurement's messages: step ZC_COLL_MAX_STEP, which no op
 * uses (ops stay below it, the call header above), so they cannot match an
 * op's messages even if a rank starts its first call while its neighbour is
 * still measuring.
 */
static uint64_t measure_tag(unsigned round)
{
    return (uint64_t)ZC_COLL_MAX_STEP << ZC_COLL_CHUNK_BITS | round;
}

/* One ring step: receive from @p left while sending to @p right; seconds into *secs_p. */
static zc_status_t exchange(zc_ucx_comm_t *ucx, int left, int right, unsigned round,
                            const void *sbuf, void *rbuf, size_t len, double *secs_p)
{
    zc_ucx_req_t reqs[2];
    zc_status_t status;
    uint64_t t0 = zc_time_ns();

    ZC_CHECK(zc_ucx_irecv(ucx, left, measure_tag(round), rbuf, len, &reqs[0]));
    status = zc_ucx_isend(ucx, right, measure_tag(round), sbuf, len, &reqs[1]);
    if (status < 0) {
        /* the receive is in flight: it must end before its buffer may go */
        zc_ucx_waitall(ucx, reqs, 1, "policy link measurement");
        return status;
    }
    ZC_CHECK(zc_ucx_waitall(ucx, reqs, 2, "policy link measurement"));
    *secs_p = (double)(zc_time_ns() - t0) * 1e-9;
    return ZC_OK;
}

/* This rank's link to its ring neighbours: bytes/s and seconds per small step. */
static zc_status_t measure_link(zc_ucx_comm_t *ucx, double *bw_p, double *lat_p)
{
    const int rank = zc_ucx_comm_rank(ucx), size = zc_ucx_comm_size(ucx);
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    double small = INFINITY, big = INFINITY, t = 0;
    zc_status_t status = ZC_OK;
    unsigned round = 0;

    char *sbuf = malloc(LINK_BIG_BYTES), *rbuf = malloc(LINK_BIG_BYTES);
    if (!sbuf || !rbuf) {
        ZC_ERROR("policy: cannot allocate 2 x %u bytes to measure the link", LINK_BIG_BYTES);
        free(sbuf);
        free(rbuf);
        return ZC_ERR_NO_MEMORY;
    }
    /* touch every page now, so that no round pays for page faults */
    memset(sbuf, 0x5a, LINK_BIG_BYTES);
    memset(rbuf, 0, LINK_BIG_BYTES);

    for (int i = 0; i < LINK_SMALL_ROUNDS; i++) {
        ZC_CHECK_GOTO(exchange(ucx, left, right, round++, sbuf, rbuf, LINK_SMALL_BYTES, &t), status,
                      err_leak);
        small = ZC_MIN(small, t);
    }
    for (int i = 0; i < LINK_BIG_ROUNDS; i++) {
        ZC_CHECK_GOTO(exchange(ucx, left, right, round++, sbuf, rbuf, LINK_BIG_BYTES, &t), status,
                      err_leak);
        big = ZC_MIN(big, t);
    }
    free(sbuf);
    free(rbuf);

    *lat_p = ZC_MAX(small, 1e-9);
    /* the latency is paid once per message: the rest of the big step is bandwidth */
    *bw_p = clamp_rate(LINK_BIG_BYTES, big - small);
    ZC_DEBUG("policy: rank %d link (to %d, from %d): %.3g GB/s, %.1f us per step "
             "(best of %d x %u bytes and %d x %d bytes)",
             rank, right, left, *bw_p * 1e-9, *lat_p * 1e6, LINK_BIG_ROUNDS, LINK_BIG_BYTES,
             LINK_SMALL_ROUNDS, LINK_SMALL_BYTES);
    return ZC_OK;

err_leak:
    /*
     * After a failed wait UCX may still write into rbuf (and read sbuf) until
     * the communicator is destroyed, which the failing init does next: the
     * buffers are left to it rather than freed under UCX.
     */
    return status;
}

/* N(0,1) by Box-Muller on Philox draws: codec speeds and ratios on unstructured data. */
static void fill_gaussian(float *x, size_t n)
{
    const uint32_t key[2] = {(uint32_t)CODEC_DATA_SEED, (uint32_t)(CODEC_DATA_SEED >> 32)};
    for (size_t i = 0; i < n; i += 2) {
        uint32_t ctr[4] = {(uint32_t)i, (uint32_t)((uint64_t)i >> 32), 0, 0}, out[4];
        zc_philox4x32_10(ctr, key, out);
        double u1 = ((double)out[0] + 0.5) * 0x1p-32, u2 = (double)out[1] * 0x1p-32;
        double rad = sqrt(-2.0 * log(u1)), ang = 2.0 * M_PI * u2;
        x[i] = (float)(rad * cos(ang));
        if (i + 1 < n)
            x[i + 1] = (float)(rad * sin(ang));
    }
}

typedef struct codec_bench {
    float *src, *acc;
    uint8_t *pa, *pb;
    size_t cap;
} codec_bench_t;

/* Encode, decode_add and (linear codecs) reduce speeds and the ratio of @p codec on rank 0. */
static zc_status_t measure_codec(const zc_policy_t *pol, zc_codec_id_t codec, uint64_t seed,
                                 codec_bench_t *b, zc_policy_inputs_t *in)
{
    const size_t n = CODEC_VALUES;
    zc_codec_params_t params = pol->params[codec];
    zc_codec_state_t *state = NULL;
    zc_codec_rng_t rng = {.seed = seed, .rank = 0, .stream = 0, .counter = 0};
    double enc = INFINITY, dec = INFINITY, red = INFINITY;
    size_t len = 0, rlen = 0;
    zc_status_t status = ZC_OK;

    /* two GradiVeQ payloads must be summable: at least two rank shares of the mean */
    if (pol->nranks < 2)
        zc_codec_params_set_ranks(&params, 2);
    if (zc_codec_needs_state(&params)) {
        ZC_CHECK_GOTO(zc_codec_state_create(&params, n, &state), status, err);
        /* GradiVeQ encodes raw until it has a basis: learn one so that encode does its work */
        ZC_CHECK_GOTO(zc_codec_state_update(state, b->src, n), status, err_state);
    }
    for (int i = 0; i < CODEC_REPS; i++) {
        uint64_t t0 = zc_time_ns();
        rng.counter = (uint32_t)i;
        ZC_CHECK_GOTO(
            zc_codec_encode(&params, state, &rng, ZC_DTYPE_F32, b->src, n, b->pa, b->cap, &len),
            status, err_state);
        enc = ZC_MIN(enc, (double)(zc_time_ns() - t0) * 1e-9);
    }
    for (int i = 0; i < CODEC_REPS; i++) {
        uint64_t t0 = zc_time_ns();
        ZC_CHECK_GOTO(zc_codec_decode_add(state, b->pa, len, b->acc, n), status, err_state);
        dec = ZC_MIN(dec, (double)(zc_time_ns() - t0) * 1e-9);
    }
    if (zc_codec_caps(codec) & ZC_CODEC_CAP_LINEAR) {
        for (int i = 0; i < CODEC_REPS; i++) {
            uint64_t t0 = zc_time_ns();
            ZC_CHECK_GOTO(zc_codec_reduce(state, b->pa, len, b->pa, len, b->pb, b->cap, &rlen),
                          status, err_state);
            red = ZC_MIN(red, (double)(zc_time_ns() - t0) * 1e-9);
        }
        in->reduce_bw[codec] = clamp_rate((double)len, red);
    }
    in->enc_bw[codec] = clamp_rate(4.0 * n, enc);
    in->dec_bw[codec] = clamp_rate(4.0 * n, dec);
    in->ratio[codec] = (double)len / (4.0 * n);
    zc_codec_state_destroy(state);
    return ZC_OK;

err_state:
    zc_codec_state_destroy(state);
err:
    ZC_ERROR("policy: measuring codec %s on %zu values failed: %s", zc_codec_name(codec), n,
             zc_status_string(status));
    return status;
}

/* The codecs choose() may use with this configuration: the ones worth measuring. */
static unsigned codecs_in_play(const zc_policy_t *pol)
{
    if (pol->codec_cfg == ZC_POLICY_CODEC_AUTO)
        return 1u << ZC_CODEC_BF16 | 1u << ZC_CODEC_QSGD;
    return 1u << pol->codec_cfg;
}

/* Rank 0's add speed and codec numbers, into @p in. */
static zc_status_t measure_codecs(const zc_policy_t *pol, uint64_t seed, zc_policy_inputs_t *in)
{
    const size_t n = CODEC_VALUES;
    const unsigned mask = codecs_in_play(pol);
    codec_bench_t b = {0};
    zc_status_t status = ZC_OK;
    double add = INFINITY;

    for (int c = 0; c < ZC_CODEC_COUNT; c++)
        if (mask & 1u << c)
            b.cap = ZC_MAX(b.cap, zc_codec_bound(&pol->params[c], n));
    b.src = malloc(n * sizeof(float));
    b.acc = calloc(n, sizeof(float));
    b.pa = malloc(b.cap);
    b.pb = malloc(b.cap);
    if (!b.src || !b.acc || !b.pa || !b.pb) {
        ZC_ERROR("policy: cannot allocate %zu bytes to measure codec speeds",
                 2 * n * sizeof(float) + 2 * b.cap);
        status = ZC_ERR_NO_MEMORY;
        goto out;
    }
    fill_gaussian(b.src, n);

    /* the raw ring's reduction: an f32 add of a received segment into the accumulator */
    for (int i = 0; i < CODEC_REPS; i++) {
        uint64_t t0 = zc_time_ns();
        zc_dtype_add_f32(ZC_DTYPE_F32, b.src, n, b.acc);
        add = ZC_MIN(add, (double)(zc_time_ns() - t0) * 1e-9);
    }
    in->add_bw = clamp_rate(4.0 * n, add);

    for (int c = 0; c < ZC_CODEC_COUNT && status == ZC_OK; c++)
        if (mask & 1u << c)
            status = measure_codec(pol, (zc_codec_id_t)c, seed, &b, in);

out:
    free(b.src);
    free(b.acc);
    free(b.pa);
    free(b.pb);
    return status;
}

/* What each rank contributes to the agreement on the link. */
typedef struct link_report {
    double bw, lat;
    int64_t status;
} link_report_t;

/* What rank 0 broadcasts: its codec numbers, or why it has none. */
typedef struct codec_report {
    zc_policy_inputs_t in;
    int64_t status;
} codec_report_t;

/*
 * Measures and agrees (collective over @p bs and @p ucx): every rank its link,
 * rank 0 the codecs; the slowest link and rank 0's codec numbers end up in
 * every rank's pol->in. A failure on any rank fails every rank, which all
 * learn from the same allgather or broadcast, so none is left waiting.
 */
static zc_status_t measure_and_agree(zc_policy_t *pol, const zc_config_t *cfg, zc_bootstrap_t *bs,
                                     zc_ucx_comm_t *ucx)
{
    const int rank = bs->rank, size = bs->size;
    link_report_t mine = {NOMINAL_LINK_BW, NOMINAL_LINK_LAT, ZC_OK}, *all;
    codec_report_t codecs;
    zc_status_t status;

    /* one rank has no link: the nominal numbers stand (no term of the model uses them) */
    if (size > 1)
        mine.status = measure_link(ucx, &mine.bw, &mine.lat);

    memset(&codecs, 0, sizeof(codecs));
    if (rank == 0) {
        codecs.in = pol->in;
        codecs.status = measure_codecs(pol, (uint64_t)cfg->seed, &codecs.in);
    }

    all = malloc((size_t)size * sizeof(*all));
    if (!all) {
        ZC_ERROR("policy: cannot allocate the link reports of %d ranks", size);
        return ZC_ERR_NO_MEMORY;
    }
    status = zc_bootstrap_allgather(bs, &mine, sizeof(mine), all);
    if (status < 0) {
        free(all);
        return status;
    }
    double bw = INFINITY, lat = 0;
    for (int r = 0; r < size; r++) {
        if (all[r].status < 0) {
            status = (zc_status_t)all[r].status;
            if (r != rank)
                ZC_ERROR("policy: rank %d failed to measure its link (%s)", r,
                         zc_status_string(status));
            break;
        }
        bw = ZC_MIN(bw, all[r].bw);
        lat = ZC_MAX(lat, all[r].lat);
    }
    free(all);
    if (status < 0)
        return status;

    ZC_CHECK(zc_bootstrap_broadcast(bs, &codecs, sizeof(codecs), 0));
    if (codecs.status < 0) {
        if (rank != 0)
            ZC_ERROR("policy: rank 0 failed to measure codec speeds (%s)",
                     zc_status_string((zc_status_t)codecs.status));
        return (zc_status_t)codecs.status;
    }
    pol->in = codecs.in;
    pol->in.link_bw = bw;
    pol->in.link_lat = lat;
    pol->measured = 1;
    return ZC_OK;
}

/* ---------------------------------------------------------------- init */

static void nominal_inputs(zc_policy_t *pol)
{
    zc_policy_inputs_t *in = &pol->in;
    in->link_bw = NOMINAL_LINK_BW;
    in->link_lat = NOMINAL_LINK_LAT;
    in->add_bw = NOMINAL_ADD_BW;
    for (int c = 0; c < ZC_CODEC_COUNT; c++) {
        const zc_codec_ops_t *ops = zc_codec_ops((zc_codec_id_t)c);
        in->enc_bw[c] = ops->nominal_encode_bw;
        in->dec_bw[c] = ops->nominal_decode_bw;
        /* not linear: never used (cring is unsupported); finite keeps the arithmetic tidy */
        in->reduce_bw[c] = ops->nominal_reduce_bw > 0 ? ops->nominal_reduce_bw : NOMINAL_ADD_BW;
        in->ratio[c] = zc_codec_wire_ratio(&pol->params[c]);
    }
}

/* "%.3g GB/s"-style rate into @p buf. */
static const char *fmt_rate(char *buf, size_t len, double bytes_per_s)
{
    snprintf(buf, len, "%.3g GB/s", bytes_per_s * 1e-9);
    return buf;
}

/* The inputs and what they decide, in two info lines (rank 0; the others hold the same). */
static void log_inputs(const zc_policy_t *pol)
{
    char line[1024], r1[32], r2[32], r3[32];
    size_t off = 0;
    const unsigned mask = codecs_in_play(pol);

#define APPEND(...)                                                                                \
    do {                                                                                           \
        if (off < sizeof(line))                                                                    \
            off += (size_t)snprintf(line + off, sizeof(line) - off, __VA_ARGS__);                  \
    } while (0)

    APPEND("policy: %d rank%s, link %s %.1f us%s, add %s", pol->nranks, pol->nranks == 1 ? "" : "s",
           fmt_rate(r1, sizeof(r1), pol->in.link_bw), pol->in.link_lat * 1e6,
           pol->nranks > 1 ? " (slowest rank)" : " (none: one rank)",
           fmt_rate(r2, sizeof(r2), pol->in.add_bw));
    for (int c = 1; c < ZC_CODEC_COUNT; c++) {
        if (!(mask & 1u << c))
            continue;
        APPEND("; %s enc %s dec %s", zc_codec_name((zc_codec_id_t)c),
               fmt_rate(r1, sizeof(r1), pol->in.enc_bw[c]),
               fmt_rate(r2, sizeof(r2), pol->in.dec_bw[c]));
        if (zc_codec_caps((zc_codec_id_t)c) & ZC_CODEC_CAP_LINEAR)
            APPEND(" reduce %s", fmt_rate(r3, sizeof(r3), pol->in.reduce_bw[c]));
        APPEND(" ratio %.4g", pol->in.ratio[c]);
    }
    ZC_INFO("%s", line);

    off = 0;
    APPEND("policy: f32 sums go");
    for (int i = 0; i < LOG_SIZE_STEPS; i++) {
        size_t bytes = (size_t)LOG_SIZE_MIN << (2 * i);
        zc_path_t p = zc_policy_choose(pol, bytes / 4, ZC_DTYPE_F32, ZC_OP_SUM);
        int unit = bytes >= ((size_t)1 << 30) ? 2 : bytes >= ((size_t)1 << 20) ? 1 : 0;
        APPEND("%s %zu %s %s%s%s", i ? "," : "", bytes >> (10 * (unit + 1)),
               unit == 2   ? "GiB"
               : unit == 1 ? "MiB"
                           : "KiB",
               zc_algo_name(p.algo), p.algo == ZC_ALGO_RAW ? "" : "/",
               p.algo == ZC_ALGO_RAW ? "" : zc_codec_name(p.params.codec));
    }
    ZC_INFO("%s", line);
#undef APPEND
}

zc_status_t zc_policy_init(zc_policy_t *pol, const zc_config_t *cfg, zc_bootstrap_t *bs,
                           zc_ucx_comm_t *ucx)
{
    zc_policy_t p;

    if (!pol || !cfg || !bs || !ucx)
        return ZC_ERR_INVALID_ARG;
    memset(&p, 0, sizeof(p));
    p.nranks = zc_ucx_comm_size(ucx);
    p.codec_cfg = (int)cfg->codec;
    p.algo_cfg = (int)cfg->algo;
    p.min_bytes = (size_t)cfg->min_bytes;
    if (p.codec_cfg < 0 || p.codec_cfg > ZC_POLICY_CODEC_AUTO || p.algo_cfg < 0 || p.algo_cfg > 3) {
        ZC_ERROR("policy: ZIPCCL_CODEC index %d or ZIPCCL_ALGO index %d out of range", p.codec_cfg,
                 p.algo_cfg);
        return ZC_ERR_INVALID_CONFIG;
    }

    for (int c = 0; c < ZC_CODEC_COUNT; c++) {
        zc_status_t status = zc_codec_params_from_config(cfg, (zc_codec_id_t)c, &p.params[c]);
        if (status < 0) {
            if (c == ZC_CODEC_GRADIVEQ && cfg->gradiveq_dim > cfg->gradiveq_slice)
                ZC_ERROR("policy: ZIPCCL_GRADIVEQ_DIM=%" PRId64
                         " is above ZIPCCL_GRADIVEQ_SLICE=%" PRId64,
                         cfg->gradiveq_dim, cfg->gradiveq_slice);
            else
                ZC_ERROR("policy: the %s parameters of the configuration are invalid (%s)",
                         zc_codec_name((zc_codec_id_t)c), zc_status_string(status));
            return status;
        }
    }
    for (int c = 0; c < ZC_CODEC_COUNT; c++)
        zc_codec_params_set_ranks(&p.params[c], (uint32_t)p.nranks);
    nominal_inputs(&p);

    const int codec_auto = p.codec_cfg == ZC_POLICY_CODEC_AUTO;
    const int algo_auto = p.algo_cfg == ZC_POLICY_ALGO_AUTO;
    /* codec none always runs raw: nothing to decide, nothing to measure */
    if (codec_auto || (algo_auto && p.codec_cfg != ZC_CODEC_NONE)) {
        ZC_CHECK(measure_and_agree(&p, cfg, bs, ucx));
        if (p.codec_cfg == ZC_CODEC_GRADIVEQ && p.params[ZC_CODEC_GRADIVEQ].gradiveq.dim == 0 &&
            bs->rank == 0)
            ZC_WARN("policy: ZIPCCL_CODEC=gradiveq learns its dimension from the gradients "
                    "(ZIPCCL_GRADIVEQ_DIM=auto), so the cost model cannot credit its compression "
                    "and ZIPCCL_ALGO=auto will mostly run raw; set ZIPCCL_GRADIVEQ_DIM or "
                    "ZIPCCL_ALGO=ring");
    }
    if (bs->rank == 0 && ZC_LOG_ENABLED(ZC_LOG_INFO)) {
        if (p.measured)
            log_inputs(&p);
        else
            ZC_INFO("policy: %d rank%s, codec %s, algo %s, from %" PRId64
                    " bytes (fixed: nothing measured)",
                    p.nranks, p.nranks == 1 ? "" : "s", zc_codec_name((zc_codec_id_t)p.codec_cfg),
                    algo_auto ? "auto" : zc_algo_name(algo_from_cfg(p.algo_cfg)), cfg->min_bytes);
    }
    *pol = p;
    return ZC_OK;
}
