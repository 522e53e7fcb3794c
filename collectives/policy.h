/*
 * The policy: for each all-reduce, whether to compress, with which codec and
 * which algorithm. Decisions depend only on the call (count, dtype, op) and on
 * numbers every rank holds identically (the configuration, the measurements
 * the ranks agreed on at init, and what a tensor's own calls measured, agreed
 * in its call headers: zc_policy_learned_t), so every rank decides the same;
 * the call header checks it anyway.
 *
 * Cost model (docs/collectives.md): for n ranks, B input bytes (f32), link
 * bandwidth W, L the seconds of one ring step of small messages and M of one
 * round of small messages with every peer (both measured as such, the median),
 * codec ratio r (payload / input), encode and decode speeds E and D (input
 * bytes per second); every path first pays one round M for the call header,
 * then its own steps and rounds (a step costs at least M / (n-1): measured
 * back to back, steps run in lockstep and look cheaper than in a call):
 *   raw ring   M + 2 (n-1) (L + B / (n W)) + (n-1) B / (n A)     (A: add speed)
 *   ring       M + B / E + 2 (n-1) (L + r B / (n W)) + (n-1) r B / (n R) + B / D
 *              + 2 (n-1) (L + S / (n W))   with shared scales (qsgd-int): S = 4 per bucket
 *   allgather  M + B / E + M + (n-1) r B / W + n B / D [+ B / Z]  (one round: every peer at once)
 *   scatter    M + B / E + M + (n-1) r B / (n W) + B / D + B / (n E) [+ B / (n Z)]
 *              + M + (n-1) r B / (n W) + B / D [+ B / Z]          (two rounds)
 * (R: payload reduce speed; [Z]: zeroing the accumulators, charged where the decode is sparse,
 * top-k's, and within D for the dense ones; a scatter whose owner sums payloads, GradiVeQ's,
 * charges (n-1) r B / (n R) for the owner's B / D + B / (n E)). A tensor's learned speeds
 * scale a path's encode and decode seconds by init's speed over the learned one
 * (zc_policy_codec_work). ZIPCCL_ALGO=auto takes the cheapest path that
 * the codec supports, raw included. Measured rates are rounded to classes
 * (powers of 2^(1/4)) so that two runs on the same cluster decide alike.
 */
#ifndef ZC_COLLECTIVES_POLICY_H
#define ZC_COLLECTIVES_POLICY_H

#include "collectives/algo.h"
#include "common/config.h"
#include "transport/bootstrap/bootstrap.h"
#include "transport/ucx/ucx.h"

#include <zipccl/zipccl.h>

#include <stddef.h>
#include <stdint.h>

/* One decision: the algorithm and the codec with its parameters. */
typedef struct zc_path {
    zc_algo_id_t algo;
    zc_codec_params_t params; /* codec NONE for ZC_ALGO_RAW_RING; gradiveq.ranks = ranks */
} zc_path_t;

/* What the cost model knows about the machine; identical on every rank. */
typedef struct zc_policy_inputs {
    double link_bw;   /* bytes/s one rank sends to its ring neighbour while receiving */
    double link_lat;  /* seconds of one ring step of small messages (median) */
    double round_lat; /* seconds of one round of small messages with every peer (median) */
    double add_bw;    /* f32 bytes/s of the raw reduction */
    double zero_bw;   /* f32 bytes/s of zeroing an accumulator (memset): sparse decodes */
    double enc_bw[ZC_CODEC_COUNT];    /* f32 input bytes/s of encode */
    double dec_bw[ZC_CODEC_COUNT];    /* f32 output bytes/s of decode_add */
    double reduce_bw[ZC_CODEC_COUNT]; /* payload bytes/s of zc_codec_reduce (linear codecs) */
    double ratio[ZC_CODEC_COUNT];     /* payload bytes / f32 input bytes */
} zc_policy_inputs_t;

/* A size the decision log has seen (zc_policy_note), with the path it last logged. */
typedef struct zc_policy_seen {
    uint64_t count;
    uint8_t dtype, algo, codec, used;
} zc_policy_seen_t;

#define ZC_POLICY_SEEN 1024 /* sizes the decision log follows */

/*
 * What a tensor's own calls measured, per codec (0 or a NULL array: not
 * measured), identical on every rank: ratios (zc_tensor_state_t.learned_ratio)
 * and encode and decode speeds the ranks agreed on (zc_policy_agree_speed;
 * zc_tensor_state_t.learned_enc_bw, learned_dec_bw). Each replaces the init
 * measurement of its codec in the cost model.
 */
typedef struct zc_policy_learned {
    const double *ratio;
    const double *enc_bw;
    const double *dec_bw;
} zc_policy_learned_t;

typedef struct zc_policy {
    int nranks;
    int codec_cfg; /* ZIPCCL_CODEC index: a zc_codec_id_t, or ZC_POLICY_CODEC_AUTO */
    int algo_cfg;  /* ZIPCCL_ALGO index: ZC_POLICY_ALGO_AUTO or a ring/allgather/scatter choice */
    size_t min_bytes;
    int auto_lowrank; /* ZIPCCL_AUTO_LOWRANK: auto may pick GradiVeQ and PowerSGD */
    zc_codec_params_t params[ZC_CODEC_COUNT]; /* from the configuration, ranks = nranks */
    zc_policy_inputs_t in;
    int measured;      /* in holds measurements (auto) rather than defaults */
    int log_decisions; /* rank 0: zc_policy_note logs each size's path when it changes */
    zc_policy_seen_t seen[ZC_POLICY_SEEN];
} zc_policy_t;

#define ZC_POLICY_CODEC_AUTO ZC_CFG_CODEC_AUTO /* ZIPCCL_CODEC=auto, after the codec ids */
#define ZC_POLICY_ALGO_AUTO ZC_CFG_ALGO_AUTO

/* policy.c: the pure model, arithmetic on zc_policy_t alone */

/*
 * Fills @p pol from @p cfg for @p nranks ranks, with nominal inputs (nothing
 * measured). Errors: ZC_ERR_INVALID_CONFIG (logged, naming the variable).
 */
zc_status_t zc_policy_configure(zc_policy_t *pol, const zc_config_t *cfg, int nranks);

/* Whether the configuration leaves a choice to the cost model, which then wants measurements. */
int zc_policy_needs_measurement(const zc_policy_t *pol);

/* The codecs choose() may use with this configuration, as a mask of 1 << zc_codec_id_t. */
unsigned zc_policy_codecs_in_play(const zc_policy_t *pol);

/* Logs the inputs and the paths they give f32 sums from 64 KiB to 1 GiB (info level). */
void zc_policy_log(const zc_policy_t *pol);

/* measure.c: the live measurements, collective */

/*
 * Measures (collectively, over @p ucx and @p bs) link bandwidth to the ring
 * neighbours, the median small ring step and small round with every peer, and
 * codec speeds on every rank at once, with the codecs' random draws keyed by
 * @p seed, and agrees on them: the slowest rate and the longest step and round
 * any rank measured, rank 0's ratios, rounded to classes
 * (zc_policy_round_inputs), into pol->in. A failure on any rank fails every
 * rank. Errors: the transport's, ZC_ERR_NO_MEMORY.
 */
zc_status_t zc_policy_measure(zc_policy_t *pol, uint64_t seed, zc_bootstrap_t *bs,
                              zc_ucx_comm_t *ucx);

/*
 * zc_policy_configure for @p ucx's ranks; then, when ZIPCCL_CODEC or
 * ZIPCCL_ALGO is auto, the inputs from rank 0's ZIPCCL_POLICY_FILE if it
 * holds this configuration's, else zc_policy_measure (saved to that file when
 * set); logs the inputs at info level. Errors: zc_policy_measure's, and
 * ZC_ERR_INVALID_CONFIG / ZC_ERR_IO for a policy file that is not one, is
 * damaged or cannot be read (on every rank).
 */
zc_status_t zc_policy_init(zc_policy_t *pol, const zc_config_t *cfg, zc_bootstrap_t *bs,
                           zc_ucx_comm_t *ucx);

/* policy_file.c: the measured inputs kept in ZIPCCL_POLICY_FILE, on rank 0 */

/*
 * Reads @p path into @p in when it holds the inputs of @p pol's configuration
 * (*@p loaded_p = 1). A missing file, or one of another configuration
 * (warned), leaves @p in alone with *@p loaded_p = 0. Errors:
 * ZC_ERR_INVALID_CONFIG (not a policy file, or damaged), ZC_ERR_IO.
 */
zc_status_t zc_policy_file_load(const zc_policy_t *pol, const char *path, zc_policy_inputs_t *in,
                                int *loaded_p);

/* Writes @p pol's inputs to @p path (replaced whole). Errors: ZC_ERR_IO (warned). */
zc_status_t zc_policy_file_save(const zc_policy_t *pol, const char *path);

/* The path of one call. Never fails: ineligible calls get ZC_ALGO_RAW_RING. */
zc_path_t zc_policy_choose(const zc_policy_t *pol, size_t count, zc_dtype_t dtype, zc_redop_t op);

/*
 * zc_policy_choose for a tensor whose codecs that learn their ratio
 * (zc_codec_learns_ratio: GradiVeQ) measured @p learned[codec] on its own
 * gradients (zc_tensor_state_t.learned_ratio; NULL or 0: not measured).
 * Identical on every rank, as the states are. A measured ratio replaces the
 * codec's nominal one in the cost model; ZIPCCL_CODEC=auto then considers
 * such a codec too. ZIPCCL_CODEC=gradiveq with ZIPCCL_ALGO=auto runs the
 * compressed ring until the tensor has a ratio (its warm-up is raw calls
 * learned from), then the cheapest path with it.
 */
zc_path_t zc_policy_choose_learned(const zc_policy_t *pol, size_t count, zc_dtype_t dtype,
                                   zc_redop_t op, const double *learned);

/*
 * zc_policy_choose_learned with every number the tensor's own calls measured
 * (@p lr, or NULL: none): its learned ratios, and the encode and decode speeds
 * its calls measured in place of init's (a 64 MiB encode under contention runs
 * several times slower than init's 4 MiB on one rank alone).
 */
zc_path_t zc_policy_choose_tensor(const zc_policy_t *pol, size_t count, zc_dtype_t dtype,
                                  zc_redop_t op, const zc_policy_learned_t *lr);

/*
 * The work a call of @p algo with @p codec on @p count values does encoding
 * and decoding, as the cost model counts it, in f32 input bytes at init's
 * speeds: the model's encode seconds at init's speeds times init's E, its
 * decode seconds (decodes, payload reduces, a sparse decode's zeroing) times
 * init's D. For a dense codec that is bytes decoded (all-gather n B, scatter
 * 2 B); top-k's all-gather and scatter both zero about B, so their work
 * differs far less than n B against 2 B. @p learned: the tensor's learned
 * ratios (NULL or 0: init's), which weigh payload reduces. 0 for raw and
 * PowerSGD, whose speeds are not learned. A call's encode and decode seconds
 * divided into them are speeds with which the model reproduces that call's
 * codec time, and predicts the other algorithms' at the same slowdown.
 */
void zc_policy_codec_work(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec,
                          size_t count, const double *learned, double *enc_bytes,
                          double *dec_bytes);

/*
 * A tensor's learned speed after a call whose headers carried @p slowest, the
 * lowest of the speeds every rank measured on its previous call of the tensor
 * (0: a rank had none): @p slowest rounded to its class (zc_policy_round_inputs),
 * but never above @p prev (the tensor's learned speed so far, 0: none), so
 * that a path measured faster under one algorithm does not send the tensor
 * back and forth between two; @p prev when @p slowest is 0. Pure arithmetic
 * on numbers every rank holds alike: every rank learns the same.
 */
double zc_policy_agree_speed(double prev, double slowest);

/*
 * Rounds every measured rate of @p in (link, add, codec speeds; not the ratios,
 * which follow from fixed data and draws) to the nearest power of 2^(1/4), so
 * that runs whose measurements differ within a class take the same decisions.
 */
void zc_policy_round_inputs(zc_policy_inputs_t *in);

/*
 * With pol->log_decisions (rank 0 after zc_policy_init), logs at info level
 * the first path of each eligible (count, type) and every change of it (the
 * tensor's learned ratio can change it), with the modelled seconds of the path
 * and of the raw ring, and the tensor's learned speeds when the path's codec
 * has some. @p lr as zc_policy_choose_tensor's (or NULL).
 */
void zc_policy_note(zc_policy_t *pol, size_t count, zc_dtype_t dtype, zc_redop_t op,
                    const zc_path_t *path, const zc_policy_learned_t *lr);

/* Modelled seconds of @p path on @p bytes of f32 input (for the log, the tests and allreduce_perf).
 */
double zc_policy_cost(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec, size_t bytes);

/* zc_policy_cost with a tensor's learned ratios and speeds (@p lr, or NULL: init's). */
double zc_policy_cost_tensor(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec,
                             size_t bytes, const zc_policy_learned_t *lr);

/* ---- the hierarchical variants (policy.c, "hierarchical"; hier.c measures and agrees the inputs)
 */

/* How a hierarchical communicator runs one all-reduce (docs/collectives.md, "Hierarchical"). */
typedef enum zc_hier_variant {
    ZC_HIER_FLAT,   /* every rank as remote: the flat policy's path */
    ZC_HIER_SHARDS, /* each local rank all-reduces its shard between hosts, all at once */
    ZC_HIER_LEADER, /* the host's leader alone all-reduces the whole host sum between hosts */
    ZC_HIER_VARIANTS
} zc_hier_variant_t;

/*
 * What the variant model knows, identical on every rank of the job (hier.c
 * agrees every input over all of them: the slowest rate, the longest latency,
 * class-rounded). @p shared and @p alone are policies of a communicator
 * between hosts (H ranks): @p shared with the link every local rank gets while
 * all R of them transfer at once (they share the host's NIC: measured so), for
 * the shards; @p alone with the link the leader gets by itself (measured with
 * the other local ranks idle). @p flat is the flat communicator's policy with
 * measured inputs (measured on its ring, whose steps cross between hosts where
 * it does); @p flat_a2a the same with the link an all-to-all gets: every rank
 * of a host sends to the other hosts at once (zc_policy_hier_set_flat).
 */
typedef struct zc_policy_hier {
    int local_ranks;    /* R */
    unsigned variants;  /* the variants the configuration allows: 1 << zc_hier_variant_t */
    double shm_copy_bw; /* bytes/s a rank copies into the host's shared memory, all at once */
    double shm_add_bw;  /* f32 bytes/s a rank adds from the host's shared memory, all at once */
    zc_policy_t flat, flat_a2a, shared, alone;
    int log_decisions; /* rank 0: zc_policy_hier_note logs each size's variant when it changes */
    zc_policy_seen_t seen[ZC_POLICY_SEEN];
} zc_policy_hier_t;

/*
 * Modelled seconds of @p variant for one call; INFINITY for a variant the
 * configuration does not allow. Shards: the shared-memory reduce-scatter
 * (B (R - 1) / R / copy + F / add), the all-reduce between hosts of F / R on @p shared
 * (its policy's path), the all-gather (B / copy). Leader: the same
 * reduce-scatter, the shards gathered to the leader (F / copy), the
 * all-reduce of F on @p alone, the result stored and broadcast (2 B / copy).
 * B: the call's bytes; F: the bytes the hosts' sums are kept in (f32 for
 * f32/f16/bf16 sums and averages, else B). Flat: the path @p flat chooses,
 * costed on @p flat (rings) or @p flat_a2a (all-gather, scatter).
 */
double zc_policy_hier_cost(const zc_policy_hier_t *m, zc_hier_variant_t variant, size_t count,
                           zc_dtype_t dtype, zc_redop_t op);

/*
 * Sets m->flat to @p flat and m->flat_a2a to @p flat with its link divided by
 * @p a2a_share: how many times less of a host's NIC a rank gets in an
 * all-to-all than on the ring the link was measured on (R (N - R) / (N - 1) of
 * each rank's payloads leave the host while all R ranks send, against the
 * ring's steps that leave the busiest host: 1 where ranks are numbered host
 * by host).
 */
void zc_policy_hier_set_flat(zc_policy_hier_t *m, const zc_policy_t *flat, double a2a_share);

/* The cheapest allowed variant of a call (ties: the lower zc_hier_variant_t). */
zc_hier_variant_t zc_policy_hier_choose(const zc_policy_hier_t *m, size_t count, zc_dtype_t dtype,
                                        zc_redop_t op);

/*
 * With m->log_decisions, logs at info level the first variant of each
 * (count, type) and every change of it, with the three modelled costs.
 */
void zc_policy_hier_note(zc_policy_hier_t *m, size_t count, zc_dtype_t dtype, zc_redop_t op,
                         zc_hier_variant_t variant);

/* "flat", "shards", "leader". */
const char *zc_hier_variant_name(zc_hier_variant_t variant);

/*
 * Agreement of measured inputs: lowers every rate of @p acc (link, add, zeroing, codec
 * speeds) to @p o's and raises its latencies to @p o's (a call waits for its
 * slowest rank); ratios are left alone.
 */
void zc_policy_inputs_slowest(zc_policy_inputs_t *acc, const zc_policy_inputs_t *o);

/*
 * Measures this rank's link to its ring neighbours on @p ucx (collective over
 * @p ucx's ranks) into in->link_bw, link_lat, round_lat, as zc_policy_measure
 * does before it agrees. Errors: the transport's, ZC_ERR_NO_MEMORY.
 */
zc_status_t zc_policy_measure_link(zc_ucx_comm_t *ucx, zc_policy_inputs_t *in);

/* Whether @p algo can run @p codec (the compressed ring needs a linear codec, raw needs none). */
int zc_policy_supports(zc_algo_id_t algo, zc_codec_id_t codec);

#endif
