/*
 * The policy: for each all-reduce, whether to compress, with which codec and
 * which algorithm. Decisions depend only on the call (count, dtype, op) and on
 * numbers every rank holds identically (the configuration and the
 * measurements rank 0 broadcast at init), so every rank decides the same; the
 * call header checks it anyway.
 *
 * Cost model (docs/collectives.md): for n ranks, B input bytes (f32), link
 * bandwidth W and latency L per ring step, codec ratio r (payload / input),
 * encode and decode speeds E and D (input bytes per second):
 *   raw ring   2 (n-1) (L + B / (n W)) + (n-1) B / (n A)     (A: add speed)
 *   cring      B / E + 2 (n-1) (L + r B / (n W)) + (n-1) r B / (n R) + B / D
 *   allgather  B / E + (n-1) (L + r B / W) + n B / D
 *   scatter    B / E + (n-1) (L + r B / (n W)) + B / D + B / (n E)
 *              + (n-1) (L + r B / (n W)) + B / D
 * (R: payload reduce speed). ZIPCCL_ALGO=auto takes the cheapest path that
 * the codec supports, raw included.
 */
#ifndef ZC_COLLECTIVES_POLICY_H
#define ZC_COLLECTIVES_POLICY_H

#include "common/config.h"
#include "transport/bootstrap/bootstrap.h"
#include "transport/ucx/ucx.h"

#include <zipccl/zipccl.h>

#include <stddef.h>

typedef enum zc_algo_id {
    ZC_ALGO_RAW = 0,   /* uncompressed ring (codec none) */
    ZC_ALGO_CRING,     /* ring on payloads of a linear codec */
    ZC_ALGO_ALLGATHER, /* compressed all-gather */
    ZC_ALGO_SCATTER,   /* compressed scatter-reduce-allgather */
    ZC_ALGO_COUNT
} zc_algo_id_t;

/* One decision: the algorithm and the codec with its parameters. */
typedef struct zc_path {
    zc_algo_id_t algo;
    zc_codec_params_t params; /* codec NONE for ZC_ALGO_RAW; gradiveq.ranks = ranks */
} zc_path_t;

/* What the cost model knows about the machine; identical on every rank. */
typedef struct zc_policy_inputs {
    double link_bw;  /* bytes/s one rank sends to its ring neighbour while receiving */
    double link_lat; /* seconds of one small message step */
    double add_bw;   /* f32 bytes/s of the raw reduction */
    double enc_bw[ZC_CODEC_COUNT];    /* f32 input bytes/s of encode */
    double dec_bw[ZC_CODEC_COUNT];    /* f32 output bytes/s of decode_add */
    double reduce_bw[ZC_CODEC_COUNT]; /* payload bytes/s of zc_codec_reduce (linear codecs) */
    double ratio[ZC_CODEC_COUNT];     /* payload bytes / f32 input bytes */
} zc_policy_inputs_t;

typedef struct zc_policy {
    int nranks;
    int codec_cfg; /* ZIPCCL_CODEC index: a zc_codec_id_t, or ZC_POLICY_CODEC_AUTO */
    int algo_cfg;  /* ZIPCCL_ALGO index: ZC_POLICY_ALGO_AUTO or a ring/allgather/scatter choice */
    size_t min_bytes;
    zc_codec_params_t params[ZC_CODEC_COUNT]; /* from the configuration, ranks = nranks */
    zc_policy_inputs_t in;
    int measured; /* in holds measurements (auto) rather than defaults */
} zc_policy_t;

#define ZC_POLICY_CODEC_AUTO ZC_CODEC_COUNT /* ZIPCCL_CODEC=auto */
#define ZC_POLICY_ALGO_AUTO 0               /* ZIPCCL_ALGO=auto; 1 ring, 2 allgather, 3 scatter */

/*
 * Fills @p pol from @p cfg for @p ucx's ranks. When ZIPCCL_CODEC or ZIPCCL_ALGO
 * is auto, measures (collectively, over @p ucx and @p bs) link bandwidth and
 * latency to the ring neighbours and this machine's codec speeds, and agrees on
 * them: the slowest link any rank measured, rank 0's codec speeds. Logs the
 * inputs at info level. Errors: the transport's, ZC_ERR_INVALID_CONFIG.
 */
zc_status_t zc_policy_init(zc_policy_t *pol, const zc_config_t *cfg, zc_bootstrap_t *bs,
                           zc_ucx_comm_t *ucx);

/* The path of one call. Never fails: ineligible calls get ZC_ALGO_RAW. */
zc_path_t zc_policy_choose(const zc_policy_t *pol, size_t count, zc_dtype_t dtype, zc_redop_t op);

/* Modelled seconds of @p path on @p bytes of f32 input (for the log, the tests and allreduce_perf).
 */
double zc_policy_cost(const zc_policy_t *pol, zc_algo_id_t algo, zc_codec_id_t codec, size_t bytes);

/* Whether @p algo can run @p codec (cring needs a linear codec, raw needs none). */
int zc_policy_supports(zc_algo_id_t algo, zc_codec_id_t codec);

/* "raw", "ring", "allgather", "scatter". */
const char *zc_algo_name(zc_algo_id_t algo);

#endif
