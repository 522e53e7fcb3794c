/*
 * The policy's pure model: eligibility, the configured or cheapest path of
 * each call and the cost model (docs/collectives.md, "Cost model"); measure.c
 * supplies the measured inputs.
 *
 * Everything zc_policy_choose reads is in zc_policy_t and identical on every
 * rank: the configuration, and inputs that are either nominal constants (no
 * auto setting: nothing measured) or the numbers the ranks agreed on at init.
 * choose() and the cost functions are pure arithmetic on them, evaluated in
 * the same order by the same binary, so every rank takes the same decision.
 */
#include "collectives/policy.h"
#include "codec/codec.h"
#include "codec/powersgd/powersgd.h"
#include "common/compiler.h"
#include "common/log.h"

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
#define NOMINAL_ZERO_BW 20e9

/*
 * Where raw is a candidate, a compressed path must model this much faster to
 * be taken: the model ignores per-payload overheads (headers, codec calls,
 * more messages) that count where latency dominates, so gains within its error
 * are not gains, and a lossy codec should buy real time for the accuracy it
 * costs.
 */
#define RAW_MIN_GAIN 0.1

/* Relative difference below which two paths model alike (the rounding of equal sums in another
   order): cheapest() then keeps the earlier candidate. */
#define MODEL_TIE 1e-9

/*
 * Measured rates are rounded to powers of 2^(1/CLASSES_PER_OCTAVE) (zc_policy_round_inputs):
 * steps of 19%, narrower than the model's own error, meant to be wider than the run-to-run
 * spread of a measurement on a quiet cluster (on the loaded emulated cluster of docs/results.md
 * the spread was far wider; ZIPCCL_POLICY_FILE is the exact guarantee).
 */
#define CLASSES_PER_OCTAVE 4

/* Sizes of f32 sums the init log shows the decision for: 64 KiB .. 1 GiB by 4x. */
#define LOG_SIZE_MIN (64u << 10)
#define LOG_SIZE_STEPS 8

/* ---------------------------------------------------------------- support */

int zc_policy_supports(zc_algo_id_t algo, zc_codec_id_t codec)
{
    if ((unsigned)codec >= ZC_CODEC_COUNT)
        return 0;
    switch (algo) {
    case ZC_ALGO_RAW_RING: return codec == ZC_CODEC_NONE;
    case ZC_ALGO_COMPRESSED_RING: return (zc_codec_caps(codec) & ZC_CODEC_CAP_LINEAR) != 0;
    case ZC_ALGO_ALLGATHER:
    case ZC_ALGO_SCATTER: return 1;
    case ZC_ALGO_POWERSGD: return codec == ZC_CODEC_POWERSGD;
    default: return 0;
    }
}

const char *zc_algo_name(zc_algo_id_t algo)
{
    static const char *const names[ZC_ALGO_COUNT] = {
        [ZC_ALGO_RAW_RING] = "raw",        [ZC_ALGO_COMPRESSED_RING] = "ring",
        [ZC_ALGO_ALLGATHER] = "allgather", [ZC_ALGO_SCATTER] = "scatter",
        [ZC_ALGO_POWERSGD] = "powersgd",
    };
    return (unsigned)algo < ZC_ALGO_COUNT ? names[algo] : NULL;
}

zc_algo_id_t zc_algo_from_choice(int algo_choice)
{
    switch (algo_choice) {
    case ZC_CFG_ALGO_RING: return ZC_ALGO_COMPRESSED_RING;
    case ZC_CFG_ALGO_ALLGATHER: return ZC_ALGO_ALLGATHER;
    default: return ZC_ALGO_SCATTER;
    }
}

/* ---------------------------------------------------------------- cost model */

/*
 * Seconds of one ring step: the measured step, but at least a round's cost per peer. Steps
 * measured back to back run in lockstep (20 us on the emulated cluster, where a round with
 * every peer measured 0.8 ms and a call's steps cost milliseconds): a step moves one message
 * each way where a round moves n - 1, so it costs at least the round's share of one.
 */
static double step_lat(const zc_policy_t *pol)
{
    const zc_policy_inputs_t *in = &pol->in;
    return pol->nranks > 1 ? ZC_MAX(in->link_lat, in->round_lat / (pol->nranks - 1)) : in->link_lat;
}

/*
 * PowerSGD (collectives/powersgd.c) on @p count values: P = M Q and Q = M^T P
 * (encode speed), then P Q^T (decode speed) over the f32 input, and two ring
 * rounds of (R r + 1) and C r values: each 2 (n-1) steps of a 1/n segment.
 * Its ratio is exact, from the matrix view of the count: no data needed.
 */
static double powersgd_cost(const zc_policy_t *pol, double count)
{
    const zc_policy_inputs_t *in = &pol->in;
    const double n = pol->nranks, W = in->link_bw, L = step_lat(pol), B = 4.0 * count;
    zc_powersgd_shape_t s;

    zc_powersgd_shape((uint64_t)count, pol->params[ZC_CODEC_POWERSGD].powersgd.rank, &s);
    const double factors = 4.0 * (double)(zc_powersgd_factor_values(&s) + 1);
    return B / in->enc_bw[ZC_CODEC_POWERSGD] + B / in->dec_bw[ZC_CODEC_POWERSGD] +
           4.0 * (n - 1.0) * L + 2.0 * (n - 1.0) * factors / (n * W) +
           (n - 1.0) * factors / (n * in->add_bw);
}

/*
 * Whether PowerSGD sends less than half of @p count values: a tensor too
 * small or too thin for a rank-r view to pay (a bias, a 1-D tensor) goes raw.
 */
static int powersgd_pays(const zc_policy_t *pol, size_t count)
{
    zc_powersgd_shape_t s;
    zc_powersgd_shape(count, pol->params[ZC_CODEC_POWERSGD].powersgd.rank, &s);
    return s.rows >= 2 && s.cols >= 2 && 2 * (zc_powersgd_factor_values(&s) + 1) <= count;
}

/* @p learned[codec] where measured (> 0), else @p dflt. */
static double learned_or(const double *learned, zc_codec_id_t codec, double dflt)
{
    return learned && learned[codec] > 0 ? learned[codec] : dflt;
}

/*
 * Whether the scatter's owner sums @p codec's payloads (zc_codec_reduce) instead of decoding
 * and re-encoding them: linear codecs whose decoding needs a learned state (GradiVeQ), as
 * collectives/scatter.c decides.
 */
static int scatter_reduces(zc_codec_id_t codec)
{
    const unsigned caps = zc_codec_caps(codec);
    return (caps & ZC_CODEC_CAP_LINEAR) && !(caps & ZC_CODEC_CAP_STATELESS);
}

/*
 * Seconds of @p algo's codec work with @p codec on @p count values at init's speeds (E0, D0,
 * R0, Z0: pol->in), payloads at ratio @p r (P = r B): encode into *@p enc_p, and into *@p dec_p
 * what a call times as decode (the algorithms' decode_ns): decodes, payload
 * reduces and the accumulators' zeroing where the decode is sparse:
 *
 *   ring            enc B/E0                 dec (n-1) P / (n R0) + B/D0
 *   allgather       enc B/E0                 dec n B/D0            (+ B/Z0 sparse)
 *   scatter         enc B/E0 + B/(n E0)      dec 2 B/D0            (+ B/(n Z0) + B/Z0 sparse)
 *   scatter, reduce enc B/E0                 dec (n-1) P / (n R0) + B/D0
 *
 * A sparse decode's B/D0 per payload of the whole vector is its payload's entries (top-k's
 * payloads have a fixed ratio, the one D0 was measured at). A tensor's learned speeds scale
 * each side as a whole (path_cost_r): a contention that slows its encode or decode slows every
 * pass of it alike, so a speed learned on one algorithm converts to another by these seconds.
 */
static void codec_secs(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec, double count,
                       double r, double *enc_p, double *dec_p)
{
    const zc_policy_inputs_t *in = &pol->in;
    const double n = pol->nranks, B = 4.0 * count, P = r * B;
    const double E = in->enc_bw[codec], D = in->dec_bw[codec], R = in->reduce_bw[codec];
    /* a sparse decode (zc_codec_sparse_decode: top-k) touches its entries, so the zeroing of
       the accumulators is most of it; a dense one reads and writes every value: within D */
    const double Z = zc_codec_sparse_decode(codec) ? in->zero_bw : INFINITY;

    switch (algo) {
    case ZC_ALGO_COMPRESSED_RING: *enc_p = B / E, *dec_p = (n - 1.0) * P / (n * R) + B / D; break;
    case ZC_ALGO_ALLGATHER: *enc_p = B / E, *dec_p = n * B / D + B / Z; break;
    case ZC_ALGO_SCATTER:
        if (scatter_reduces(codec))
            *enc_p = B / E, *dec_p = (n - 1.0) * P / (n * R) + B / D;
        else
            *enc_p = B / E + B / (n * E), *dec_p = 2.0 * B / D + B / (n * Z) + B / Z;
        break;
    default: *enc_p = 0, *dec_p = 0; break;
    }
}

/*
 * Modelled seconds of @p algo with @p codec on @p count values whose raw form
 * is @p elem bytes each. Codec speeds and ratios are per f32 input byte
 * (B = 4 count); the raw ring moves the caller's type (count * elem bytes).
 * The formulas are policy.h's: every call pays one round with every peer (M)
 * for its header, then each algorithm its own: the rings 2 (n-1) steps (L
 * each: a rank sends what it just received), the all-gather one round (every
 * payload posted at once), the scatter two; its bytes; and its codec work
 * (codec_secs). They add the stages up without crediting the overlap of
 * pipelining, so compression is modelled slightly pessimistically.
 */
static double path_cost_r(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec,
                          double count, double elem, const zc_policy_learned_t *lr)
{
    const zc_policy_inputs_t *in = &pol->in;
    const double n = pol->nranks, W = in->link_bw, L = step_lat(pol);
    const double B = 4.0 * count;
    const double M = n > 1 ? in->round_lat : 0.0; /* a round with every peer; one rank: none */
    const double header = M;                      /* the call header */

    if (!zc_policy_supports(algo, codec))
        return INFINITY;
    if (algo == ZC_ALGO_RAW_RING)
        return header + 2.0 * (n - 1.0) * (L + count * elem / (n * W)) +
               (n - 1.0) * B / (n * in->add_bw);
    if (algo == ZC_ALGO_POWERSGD)
        return header + powersgd_cost(pol, count);

    const double r = learned_or(lr ? lr->ratio : NULL, codec, in->ratio[codec]);
    /*
     * The tensor's own calls' speeds, once the ranks agreed on them (zc_policy_agree_speed):
     * speeds of the work zc_policy_codec_work counts, so each side's seconds at init's speeds
     * scale by init's speed over the learned one.
     */
    const double E = learned_or(lr ? lr->enc_bw : NULL, codec, in->enc_bw[codec]);
    const double D = learned_or(lr ? lr->dec_bw : NULL, codec, in->dec_bw[codec]);
    const double P = r * B; /* payload bytes of the whole vector */
    double enc, dec;
    codec_secs(pol, algo, codec, count, r, &enc, &dec);
    const double codec_s = enc * (in->enc_bw[codec] / E) + dec * (in->dec_bw[codec] / D);
    /* codecs that share scales (qsgd-int): a ring all-reduce of their maximum first */
    const double S = 4.0 * (double)zc_codec_shared_scales(&pol->params[codec], (uint64_t)count);
    switch (algo) {
    case ZC_ALGO_COMPRESSED_RING:
        return header + (S > 0 ? 2.0 * (n - 1.0) * (L + S / (n * W)) : 0.0) +
               2.0 * (n - 1.0) * (L + P / (n * W)) + codec_s;
    case ZC_ALGO_ALLGATHER: return header + M + (n - 1.0) * P / W + codec_s;
    default: /* scatter: shards out, owner sums its shard, all-gather of the sums */
        return header + M + (n - 1.0) * P / (n * W) + M + (n - 1.0) * P / (n * W) + codec_s;
    }
}

void zc_policy_codec_work(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec,
                          size_t count, const double *learned, double *enc_bytes, double *dec_bytes)
{
    *enc_bytes = 0, *dec_bytes = 0;
    if ((unsigned)codec >= ZC_CODEC_COUNT || codec == ZC_CODEC_NONE || algo == ZC_ALGO_RAW_RING ||
        algo == ZC_ALGO_POWERSGD || !zc_policy_supports(algo, codec))
        return;
    const double r = learned_or(learned, codec, pol->in.ratio[codec]);
    double enc, dec;
    codec_secs(pol, algo, codec, (double)count, r, &enc, &dec);
    *enc_bytes = enc * pol->in.enc_bw[codec];
    *dec_bytes = dec * pol->in.dec_bw[codec];
}

static double path_cost(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec,
                        double count, double elem)
{
    return path_cost_r(pol, algo, codec, count, elem, NULL);
}

double zc_policy_cost(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec, size_t bytes)
{
    return path_cost(pol, algo, codec, (double)bytes / 4.0, 4.0);
}

double zc_policy_cost_tensor(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec,
                             size_t bytes, const zc_policy_learned_t *lr)
{
    return path_cost_r(pol, algo, codec, (double)bytes / 4.0, 4.0, lr);
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
 * Candidates are tried in a fixed order (ring, all-gather, scatter) and a
 * later one must be cheaper by more than rounding (MODEL_TIE), so ties
 * resolve the same way on every rank and in every run. The tie that occurs:
 * the ring and a scatter whose owner sums payloads (GradiVeQ) send the same
 * bytes and do the same codec work, and 2 (n-1) steps of L >= M / (n-1)
 * against two rounds M model alike: the ring, as before the scatter's
 * reduces were modelled (on the emulated cluster neither was reliably
 * faster: docs/results.md, "Sparse decodes").
 */
static zc_path_t cheapest(const zc_policy_t *pol, const zc_codec_id_t *codecs, size_t ncodecs,
                          int with_raw, double count, double elem, const zc_policy_learned_t *lr)
{
    zc_algo_id_t best_algo = ZC_ALGO_RAW_RING;
    zc_codec_id_t best_codec = ZC_CODEC_NONE;
    double best = INFINITY;

    for (size_t i = 0; i < ncodecs; i++) {
        for (int a = ZC_ALGO_COMPRESSED_RING; a < ZC_ALGO_COUNT; a++) {
            if (pol->algo_cfg != ZC_POLICY_ALGO_AUTO &&
                a != (int)zc_algo_from_choice(pol->algo_cfg))
                continue;
            double c = path_cost_r(pol, (zc_algo_id_t)a, codecs[i], count, elem, lr);
            if (c < best * (1.0 - MODEL_TIE)) {
                best = c;
                best_algo = (zc_algo_id_t)a;
                best_codec = codecs[i];
            }
        }
    }
    if (with_raw && !(best < (1.0 - RAW_MIN_GAIN) *
                                 path_cost(pol, ZC_ALGO_RAW_RING, ZC_CODEC_NONE, count, elem)))
        return make_path(pol, ZC_ALGO_RAW_RING, ZC_CODEC_NONE);
    return make_path(pol, best_algo, best_codec);
}

/*
 * ZIPCCL_AUTO_LOWRANK=1: PowerSGD instead of @p best (auto's choice among the other
 * codecs and raw, weighed as chosen: at the tensor's @p learned ratios) where it pays
 * (powersgd_pays) and models at least RAW_MIN_GAIN faster. Its ratio is not an estimate: the
 * factors' size follows from the count alone, so it is exactly what past calls of the tensor sent,
 * whatever the gradients hold; its speeds are measured at init (measure.c: one power iteration and
 * one expansion). Off by default: error feedback and a warm-up change what the optimiser sees, the
 * user's call.
 */
static zc_path_t powersgd_auto(const zc_policy_t *pol, size_t count, double elem,
                               const zc_path_t *best, const zc_policy_learned_t *lr)
{
    int take = pol->auto_lowrank && powersgd_pays(pol, count) &&
               powersgd_cost(pol, (double)count) <
                   (1.0 - RAW_MIN_GAIN) *
                       path_cost_r(pol, best->algo, best->params.codec, (double)count, elem, lr);
    /* made afresh either way: a struct copy need not copy padding, which callers compare */
    return take ? make_path(pol, ZC_ALGO_POWERSGD, ZC_CODEC_POWERSGD)
                : make_path(pol, best->algo, best->params.codec);
}

zc_path_t zc_policy_choose(const zc_policy_t *pol, size_t count, zc_dtype_t dtype, zc_redop_t op)
{
    return zc_policy_choose_learned(pol, count, dtype, op, NULL);
}

zc_path_t zc_policy_choose_learned(const zc_policy_t *pol, size_t count, zc_dtype_t dtype,
                                   zc_redop_t op, const double *learned)
{
    const zc_policy_learned_t lr = {.ratio = learned};
    return zc_policy_choose_tensor(pol, count, dtype, op, &lr);
}

zc_path_t zc_policy_choose_tensor(const zc_policy_t *pol, size_t count, zc_dtype_t dtype,
                                  zc_redop_t op, const zc_policy_learned_t *lr)
{
    const double *learned = lr ? lr->ratio : NULL;

    if (!eligible(pol, count, dtype, op))
        return make_path(pol, ZC_ALGO_RAW_RING, ZC_CODEC_NONE);

    const double n = (double)count, elem = (double)zc_dtype_size(dtype);

    if (pol->codec_cfg == ZC_CODEC_POWERSGD && pol->algo_cfg == ZC_POLICY_ALGO_AUTO)
        return make_path(pol, powersgd_pays(pol, count) ? ZC_ALGO_POWERSGD : ZC_ALGO_RAW_RING,
                         powersgd_pays(pol, count) ? ZC_CODEC_POWERSGD : ZC_CODEC_NONE);
    if (pol->codec_cfg != ZC_POLICY_CODEC_AUTO) {
        const zc_codec_id_t codec = (zc_codec_id_t)pol->codec_cfg;
        if (pol->algo_cfg != ZC_POLICY_ALGO_AUTO) {
            zc_algo_id_t algo = zc_algo_from_choice(pol->algo_cfg);
            /* a codec whose payloads do not add may have a twin whose do (qsgd: qsgd-int) */
            if (algo == ZC_ALGO_COMPRESSED_RING && zc_codec_ring_codec(codec) != ZC_CODEC_NONE)
                return make_path(pol, algo, zc_codec_ring_codec(codec));
            if (!zc_policy_supports(algo, codec)) {
                ZC_LOG_ONCE(ZC_LOG_WARN,
                            "policy: ZIPCCL_ALGO=%s needs a linear codec (payloads summed "
                            "without decoding) and %s is not one; using allgather",
                            zc_algo_name(algo), zc_codec_name(codec));
                algo = ZC_ALGO_ALLGATHER;
            }
            return make_path(pol, algo, codec);
        }
        /*
         * A codec that learns its ratio from the tensor (GradiVeQ) runs the
         * compressed ring until it has: its warm-up calls are raw, and learn.
         */
        if (learned && zc_codec_learns_ratio(codec) && !(learned[codec] > 0) &&
            zc_policy_supports(ZC_ALGO_COMPRESSED_RING, codec))
            return make_path(pol, ZC_ALGO_COMPRESSED_RING, codec);
        /* with its ring twin if it has one (qsgd: qsgd-int); one rank: the codec as configured
         * all the same, so that its tests exercise it */
        const zc_codec_id_t pair[] = {codec, zc_codec_ring_codec(codec)};
        size_t npair = pair[1] != ZC_CODEC_NONE && pair[1] != codec ? 2 : 1;
        return cheapest(pol, pair, npair, pol->nranks > 1, n, elem, lr);
    }

    if (pol->nranks < 2)
        return make_path(pol, ZC_ALGO_RAW_RING, ZC_CODEC_NONE);
    /*
     * Auto considers the stateless codecs; with ZIPCCL_AUTO_LOWRANK=1 also the
     * codecs that learn their ratio from the tensor (GradiVeQ), by the ratio
     * they learned: a tensor the caller follows (@p learned non-NULL) that has
     * none yet runs such a codec first, its warm-up raw calls exact and learned
     * from; and PowerSGD (powersgd_auto). Top-k, and the low-rank methods
     * unless asked for, change what the optimiser sees: the user's call
     * (ZIPCCL_CODEC), not the cost model's.
     */
    for (int c = 0; pol->auto_lowrank && learned && c < ZC_CODEC_COUNT; c++) {
        const zc_algo_id_t ring = ZC_ALGO_COMPRESSED_RING;
        if (zc_codec_learns_ratio((zc_codec_id_t)c) && !(learned[c] > 0) &&
            (pol->algo_cfg == ZC_POLICY_ALGO_AUTO || zc_algo_from_choice(pol->algo_cfg) == ring))
            return make_path(pol, ring, (zc_codec_id_t)c);
    }
    zc_codec_id_t auto_codecs[3 + ZC_CODEC_COUNT] = {ZC_CODEC_BF16, ZC_CODEC_QSGD,
                                                     ZC_CODEC_QSGD_INT};
    size_t ncodecs = 3;
    /* and those that learned their ratio on this tensor's gradients, weighed by it */
    for (int c = 0; pol->auto_lowrank && learned && c < ZC_CODEC_COUNT; c++)
        if (learned[c] > 0 && zc_codec_learns_ratio((zc_codec_id_t)c))
            auto_codecs[ncodecs++] = (zc_codec_id_t)c;
    /*
     * On f16 and bf16 input the bf16 codec would send as many bytes as the
     * raw ring (and round f16's mantissa away): only qsgd (and qsgd-int) can
     * gain there.
     */
    zc_path_t best = elem == 2.0 ? cheapest(pol, auto_codecs + 1, ncodecs - 1, 1, n, elem, lr)
                                 : cheapest(pol, auto_codecs, ncodecs, 1, n, elem, lr);
    return powersgd_auto(pol, count, elem, &best, lr);
}

/* ---------------------------------------------------------------- classes and the decision log */

static double round_class(double x)
{
    if (!(x > 0) || !isfinite(x))
        return x;
    return exp2(floor(log2(x) * CLASSES_PER_OCTAVE + 0.5) / CLASSES_PER_OCTAVE);
}

void zc_policy_round_inputs(zc_policy_inputs_t *in)
{
    in->link_bw = round_class(in->link_bw);
    in->link_lat = round_class(in->link_lat);
    in->round_lat = round_class(in->round_lat);
    in->add_bw = round_class(in->add_bw);
    in->zero_bw = round_class(in->zero_bw);
    for (int c = 0; c < ZC_CODEC_COUNT; c++) {
        in->enc_bw[c] = round_class(in->enc_bw[c]);
        in->dec_bw[c] = round_class(in->dec_bw[c]);
        in->reduce_bw[c] = round_class(in->reduce_bw[c]);
    }
}

double zc_policy_agree_speed(double prev, double slowest)
{
    if (!(slowest > 0) || !isfinite(slowest))
        return prev;
    const double c = round_class(slowest);
    return prev > 0 && prev < c ? prev : c;
}

/* The decision log's entry of (count, dtype) in @p seen, or NULL when the table is full (said
 * once). */
static zc_policy_seen_t *seen_slot(zc_policy_seen_t *seen, size_t count, zc_dtype_t dtype)
{
    /* open addressing on (count, dtype) */
    const uint64_t h = ((uint64_t)count * 0x9e3779b97f4a7c15ull) ^ (uint64_t)dtype;
    for (size_t i = 0; i < ZC_POLICY_SEEN; i++) {
        zc_policy_seen_t *e = &seen[(h + i) % ZC_POLICY_SEEN];
        if (!e->used || (e->count == count && e->dtype == (uint8_t)dtype))
            return e;
    }
    ZC_LOG_ONCE(ZC_LOG_INFO, "policy: %d sizes seen; decisions for further sizes not logged",
                ZC_POLICY_SEEN);
    return NULL;
}

void zc_policy_note(zc_policy_t *pol, size_t count, zc_dtype_t dtype, zc_redop_t op,
                    const zc_path_t *path, const zc_policy_learned_t *lr)
{
    if (!pol->log_decisions || !eligible(pol, count, dtype, op) || !ZC_LOG_ENABLED(ZC_LOG_INFO))
        return;
    zc_policy_seen_t *slot = seen_slot(pol->seen, count, dtype);
    if (!slot)
        return;
    if (slot->used && slot->algo == (uint8_t)path->algo &&
        slot->codec == (uint8_t)path->params.codec)
        return;

    const double elem = (double)zc_dtype_size(dtype), n = (double)count;
    const double cost = path_cost_r(pol, path->algo, path->params.codec, n, elem, lr);
    const double raw = path_cost(pol, ZC_ALGO_RAW_RING, ZC_CODEC_NONE, n, elem);
    char was[48] = "first call", speeds[80] = "";
    const zc_codec_id_t pc = path->params.codec;
    if (lr && lr->enc_bw && lr->dec_bw && lr->enc_bw[pc] > 0 && lr->dec_bw[pc] > 0)
        snprintf(speeds, sizeof(speeds), "; the tensor's %s enc %.3g GB/s dec %.3g GB/s",
                 zc_codec_name(pc), lr->enc_bw[pc] * 1e-9, lr->dec_bw[pc] * 1e-9);
    if (slot->used)
        snprintf(was, sizeof(was), "was %s%s%s", zc_algo_name((zc_algo_id_t)slot->algo),
                 slot->algo == ZC_ALGO_RAW_RING ? "" : "/",
                 slot->algo == ZC_ALGO_RAW_RING ? "" : zc_codec_name((zc_codec_id_t)slot->codec));
    ZC_INFO("policy: %zu x %s sums go %s%s%s (%s): modelled %.3g ms, raw ring %.3g ms%s%s", count,
            zc_dtype_name(dtype), zc_algo_name(path->algo),
            path->algo == ZC_ALGO_RAW_RING ? "" : "/",
            path->algo == ZC_ALGO_RAW_RING ? "" : zc_codec_name(path->params.codec), was,
            cost * 1e3, raw * 1e3, speeds,
            pol->codec_cfg == ZC_POLICY_CODEC_AUTO || pol->algo_cfg == ZC_POLICY_ALGO_AUTO
                ? ""
                : " (configured)");
    slot->used = 1;
    slot->count = count;
    slot->dtype = (uint8_t)dtype;
    slot->algo = (uint8_t)path->algo;
    slot->codec = (uint8_t)path->params.codec;
}

/* ---------------------------------------------------------------- hierarchical variants */

const char *zc_hier_variant_name(zc_hier_variant_t variant)
{
    static const char *const names[ZC_HIER_VARIANTS] = {"flat", "shards", "leader"};
    return (unsigned)variant < ZC_HIER_VARIANTS ? names[variant] : "?";
}

void zc_policy_inputs_slowest(zc_policy_inputs_t *acc, const zc_policy_inputs_t *o)
{
    acc->link_bw = ZC_MIN(acc->link_bw, o->link_bw);
    acc->link_lat = ZC_MAX(acc->link_lat, o->link_lat);
    acc->round_lat = ZC_MAX(acc->round_lat, o->round_lat);
    acc->add_bw = ZC_MIN(acc->add_bw, o->add_bw);
    acc->zero_bw = ZC_MIN(acc->zero_bw, o->zero_bw);
    for (int c = 0; c < ZC_CODEC_COUNT; c++) {
        acc->enc_bw[c] = ZC_MIN(acc->enc_bw[c], o->enc_bw[c]);
        acc->dec_bw[c] = ZC_MIN(acc->dec_bw[c], o->dec_bw[c]);
        acc->reduce_bw[c] = ZC_MIN(acc->reduce_bw[c], o->reduce_bw[c]);
    }
}

/*
 * Modelled seconds of the path @p pol chooses for @p count values of @p dtype, costed on
 * @p a2a (NULL: @p pol) when that path is an all-to-all (all-gather, scatter).
 */
static double chosen_cost(const zc_policy_t *pol, const zc_policy_t *a2a, double count,
                          zc_dtype_t dtype, zc_redop_t op)
{
    if (pol->nranks < 2 || count < 1)
        return 0.0; /* one host: nothing crosses */
    const zc_path_t path = zc_policy_choose(pol, (size_t)count, dtype, op);
    const int all_to_all = path.algo == ZC_ALGO_ALLGATHER || path.algo == ZC_ALGO_SCATTER;
    return path_cost(a2a && all_to_all ? a2a : pol, path.algo, path.params.codec, count,
                     (double)zc_dtype_bytes(dtype));
}

void zc_policy_hier_set_flat(zc_policy_hier_t *m, const zc_policy_t *flat, double a2a_share)
{
    m->flat = *flat;
    m->flat_a2a = *flat;
    m->flat_a2a.in.link_bw = flat->in.link_bw / ZC_MAX(a2a_share, 1.0);
}

double zc_policy_hier_cost(const zc_policy_hier_t *m, zc_hier_variant_t variant, size_t count,
                           zc_dtype_t dtype, zc_redop_t op)
{
    if ((unsigned)variant >= ZC_HIER_VARIANTS || !(m->variants & 1u << variant))
        return INFINITY;
    if (variant == ZC_HIER_FLAT)
        return chosen_cost(&m->flat, &m->flat_a2a, (double)count, dtype, op);
    /* hier.c keeps the hosts' sums of float sums and averages in f32, and runs them as f32 sums */
    const int widen = zc_dtype_size(dtype) != 0 && (op == ZC_OP_SUM || op == ZC_OP_AVG);
    const zc_dtype_t inner_type = widen ? ZC_DTYPE_F32 : dtype;
    const zc_redop_t inner_op = op == ZC_OP_AVG ? ZC_OP_SUM : op;
    const double R = m->local_ranks, n = (double)count;
    const double B = n * (double)zc_dtype_bytes(dtype), F = widen ? 4.0 * n : B;
    /* each rank copies the other ranks' shards (its own it reads in place), the owner adds */
    const double scatter = B * (R - 1.0) / R / m->shm_copy_bw + F / m->shm_add_bw;
    if (variant == ZC_HIER_SHARDS)
        return scatter + chosen_cost(&m->shared, NULL, ceil(n / R), inner_type, inner_op) +
               B / m->shm_copy_bw;
    return scatter + F / m->shm_copy_bw + chosen_cost(&m->alone, NULL, n, inner_type, inner_op) +
           2.0 * B / m->shm_copy_bw;
}

zc_hier_variant_t zc_policy_hier_choose(const zc_policy_hier_t *m, size_t count, zc_dtype_t dtype,
                                        zc_redop_t op)
{
    zc_hier_variant_t best = ZC_HIER_VARIANTS;
    double best_cost = INFINITY;
    for (int v = 0; v < ZC_HIER_VARIANTS; v++) {
        if (!(m->variants & 1u << v))
            continue;
        double c = zc_policy_hier_cost(m, (zc_hier_variant_t)v, count, dtype, op);
        if (best == ZC_HIER_VARIANTS || c < best_cost) {
            best = (zc_hier_variant_t)v;
            best_cost = c;
        }
    }
    return best == ZC_HIER_VARIANTS ? ZC_HIER_SHARDS : best;
}

void zc_policy_hier_note(zc_policy_hier_t *m, size_t count, zc_dtype_t dtype, zc_redop_t op,
                         zc_hier_variant_t variant)
{
    if (!m->log_decisions || !ZC_LOG_ENABLED(ZC_LOG_INFO))
        return;
    zc_policy_seen_t *slot = seen_slot(m->seen, count, dtype);
    if (!slot || (slot->used && slot->algo == (uint8_t)variant))
        return;
    char was[32] = "first call";
    if (slot->used)
        snprintf(was, sizeof(was), "was %s", zc_hier_variant_name((zc_hier_variant_t)slot->algo));
    ZC_INFO("policy: %zu x %s %ss go %s (%s): modelled flat %.3g ms, shards %.3g ms, leader "
            "%.3g ms",
            count, zc_dtype_name(dtype), zc_redop_name(op), zc_hier_variant_name(variant), was,
            zc_policy_hier_cost(m, ZC_HIER_FLAT, count, dtype, op) * 1e3,
            zc_policy_hier_cost(m, ZC_HIER_SHARDS, count, dtype, op) * 1e3,
            zc_policy_hier_cost(m, ZC_HIER_LEADER, count, dtype, op) * 1e3);
    slot->used = 1;
    slot->count = count;
    slot->dtype = (uint8_t)dtype;
    slot->algo = (uint8_t)variant;
}

/* ---------------------------------------------------------------- configuration */

static void nominal_inputs(zc_policy_t *pol)
{
    zc_policy_inputs_t *in = &pol->in;
    in->link_bw = NOMINAL_LINK_BW;
    in->link_lat = NOMINAL_LINK_LAT;
    in->round_lat = NOMINAL_LINK_LAT;
    in->add_bw = NOMINAL_ADD_BW;
    in->zero_bw = NOMINAL_ZERO_BW;
    for (int c = 0; c < ZC_CODEC_COUNT; c++) {
        const zc_codec_ops_t *ops = zc_codec_ops((zc_codec_id_t)c);
        in->enc_bw[c] = ops->nominal_encode_bw;
        in->dec_bw[c] = ops->nominal_decode_bw;
        /* not linear: never used (cring is unsupported); finite keeps the arithmetic tidy */
        in->reduce_bw[c] = ops->nominal_reduce_bw > 0 ? ops->nominal_reduce_bw : NOMINAL_ADD_BW;
        in->ratio[c] = zc_codec_wire_ratio(&pol->params[c]);
    }
}

unsigned zc_policy_codecs_in_play(const zc_policy_t *pol)
{
    if (pol->codec_cfg == ZC_POLICY_CODEC_AUTO)
        return 1u << ZC_CODEC_BF16 | 1u << ZC_CODEC_QSGD | 1u << ZC_CODEC_QSGD_INT |
               (pol->auto_lowrank ? 1u << ZC_CODEC_GRADIVEQ | 1u << ZC_CODEC_POWERSGD : 0u);
    /* qsgd with its ring twin qsgd-int: ZIPCCL_ALGO=ring runs it, auto considers it */
    const zc_codec_id_t twin = zc_codec_ring_codec((zc_codec_id_t)pol->codec_cfg);
    unsigned mask = 1u << pol->codec_cfg;
    if (twin != ZC_CODEC_NONE && pol->algo_cfg == ZC_POLICY_ALGO_AUTO)
        mask |= 1u << twin;
    else if (twin != ZC_CODEC_NONE && zc_algo_from_choice(pol->algo_cfg) == ZC_ALGO_COMPRESSED_RING)
        mask = 1u << twin;
    return mask;
}

zc_status_t zc_policy_configure(zc_policy_t *pol, const zc_config_t *cfg, int nranks)
{
    _Static_assert((int)ZC_CFG_CODEC_NONE == (int)ZC_CODEC_NONE &&
                       (int)ZC_CFG_CODEC_QSGD == (int)ZC_CODEC_QSGD &&
                       (int)ZC_CFG_CODEC_FP16 == (int)ZC_CODEC_FP16 &&
                       (int)ZC_CFG_CODEC_BF16 == (int)ZC_CODEC_BF16 &&
                       (int)ZC_CFG_CODEC_TOPK == (int)ZC_CODEC_TOPK &&
                       (int)ZC_CFG_CODEC_GRADIVEQ == (int)ZC_CODEC_GRADIVEQ &&
                       (int)ZC_CFG_CODEC_QSGD_INT == (int)ZC_CODEC_QSGD_INT &&
                       (int)ZC_CFG_CODEC_POWERSGD == (int)ZC_CODEC_POWERSGD &&
                       (int)ZC_CFG_CODEC_AUTO == (int)ZC_CODEC_COUNT,
                   "ZIPCCL_CODEC's choices are the zc_codec_id_t values, then auto");
    zc_policy_t p;

    if (!pol || !cfg || nranks < 1)
        return ZC_ERR_INVALID_ARG;
    memset(&p, 0, sizeof(p));
    p.nranks = nranks;
    p.codec_cfg = (int)cfg->codec;
    p.algo_cfg = (int)cfg->algo;
    p.min_bytes = (size_t)cfg->min_bytes;
    p.auto_lowrank = (int)cfg->auto_lowrank;
    if (p.codec_cfg < 0 || p.codec_cfg > ZC_POLICY_CODEC_AUTO || p.algo_cfg < 0 ||
        p.algo_cfg >= ZC_CFG_ALGO_COUNT) {
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
    *pol = p;
    return ZC_OK;
}

int zc_policy_needs_measurement(const zc_policy_t *pol)
{
    /* codec none always runs raw: nothing to decide, nothing to measure */
    return pol->codec_cfg == ZC_POLICY_CODEC_AUTO ||
           (pol->algo_cfg == ZC_POLICY_ALGO_AUTO && pol->codec_cfg != ZC_CODEC_NONE);
}

/* "%.3g GB/s"-style rate into @p buf. */
static const char *fmt_rate(char *buf, size_t len, double bytes_per_s)
{
    snprintf(buf, len, "%.3g GB/s", bytes_per_s * 1e-9);
    return buf;
}

void zc_policy_log(const zc_policy_t *pol)
{
    if (!ZC_LOG_ENABLED(ZC_LOG_INFO))
        return;
    if (!pol->measured) {
        ZC_INFO(
            "policy: %d rank%s, codec %s, algo %s, from %zu bytes (fixed: nothing measured)",
            pol->nranks, pol->nranks == 1 ? "" : "s", zc_codec_name((zc_codec_id_t)pol->codec_cfg),
            pol->algo_cfg == ZC_POLICY_ALGO_AUTO ? "auto"
                                                 : zc_algo_name(zc_algo_from_choice(pol->algo_cfg)),
            pol->min_bytes);
        return;
    }

    char line[1024], r1[32], r2[32], r3[32];
    size_t off = 0;
    const unsigned mask = zc_policy_codecs_in_play(pol);

#define APPEND(...)                                                                                \
    do {                                                                                           \
        if (off < sizeof(line))                                                                    \
            off += (size_t)snprintf(line + off, sizeof(line) - off, __VA_ARGS__);                  \
    } while (0)

    APPEND("policy: %d rank%s, link %s, step %.1f us, round %.1f us%s, add %s, zero %s",
           pol->nranks, pol->nranks == 1 ? "" : "s", fmt_rate(r1, sizeof(r1), pol->in.link_bw),
           pol->in.link_lat * 1e6, pol->in.round_lat * 1e6,
           pol->nranks > 1 ? " (slowest rank)" : " (none: one rank)",
           fmt_rate(r2, sizeof(r2), pol->in.add_bw), fmt_rate(r3, sizeof(r3), pol->in.zero_bw));
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
               zc_algo_name(p.algo), p.algo == ZC_ALGO_RAW_RING ? "" : "/",
               p.algo == ZC_ALGO_RAW_RING ? "" : zc_codec_name(p.params.codec));
    }
    ZC_INFO("%s", line);
#undef APPEND
}
