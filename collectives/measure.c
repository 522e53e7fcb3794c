/*
 * The policy's live inputs: link bandwidth and latency to the ring
 * neighbours, and this machine's codec speeds, measured at init when a
 * setting is auto and agreed by every rank (policy.c is the model they feed).
 */
#include "collectives/coll.h"
#include "codec/codec.h"
#include "common/compiler.h"
#include "common/log.h"
#include "common/philox.h"
#include "common/timer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * Link measurement: exchanges with both ring neighbours at once (what one ring
 * step does); the bandwidth from the best of several, so that a rank arriving
 * late or a first rendezvous only costs a round. 3 x 4 MiB take about 10 ms at
 * 10 Gb/s and 0.1 s at 1 Gb/s.
 */
#define LINK_BIG_BYTES (4u << 20)
#define LINK_BIG_ROUNDS 3
#define LINK_SMALL_BYTES 8
#define LINK_SMALL_ROUNDS 10

/*
 * Latencies: the small ring steps above and rounds of a small message to and from every peer at
 * once (what a call's header and the all-gather do), each back to back; the medians, not the
 * best, since a call pays the steps it gets: where ranks share cores, a step waits for a peer
 * to be scheduled (milliseconds) far more often than the luckiest of ten (microseconds) shows.
 */
#define ROUND_BYTES 64
#define ROUND_REPS 15

/* Codec measurement, every rank at once: 4 MiB of N(0,1) (larger than L2), best of 3. */
#define CODEC_VALUES (1u << 20)
#define CODEC_REPS 3
#define CODEC_DATA_SEED UINT64_C(0x706f6c696379) /* "policy" */

static double clamp_rate(double bytes, double secs)
{
    /* a timer that saw nothing still gives a finite, positive rate */
    return bytes / (secs > 1e-9 ? secs : 1e-9);
}

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

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/*
 * One round: a small message to and from every peer at once; seconds into *@p secs_p. @p sbuf
 * and @p rbuf hold ROUND_BYTES per peer; @p reqs 2 (size - 1) requests.
 */
static zc_status_t small_round(zc_ucx_comm_t *ucx, unsigned round, char *sbuf, char *rbuf,
                               zc_ucx_req_t *reqs, double *secs_p)
{
    const int rank = zc_ucx_comm_rank(ucx), size = zc_ucx_comm_size(ucx);
    size_t nreq = 0;
    zc_status_t status = ZC_OK;
    uint64_t t0 = zc_time_ns();

    for (int i = 1; i < size && status == ZC_OK; i++) {
        const int from = (rank + size - i) % size;
        status = zc_ucx_irecv(ucx, from, measure_tag(round), rbuf + (size_t)(i - 1) * ROUND_BYTES,
                              ROUND_BYTES, &reqs[nreq]);
        nreq += status == ZC_OK;
    }
    for (int i = 1; i < size && status == ZC_OK; i++) {
        status = zc_ucx_isend(ucx, (rank + i) % size, measure_tag(round),
                              sbuf + (size_t)(i - 1) * ROUND_BYTES, ROUND_BYTES, &reqs[nreq]);
        nreq += status == ZC_OK;
    }
    /* what was posted must end before its buffers may go, failed or not */
    zc_status_t wait = zc_ucx_waitall(ucx, reqs, nreq, "policy round measurement");
    ZC_CHECK(status);
    ZC_CHECK(wait);
    *secs_p = (double)(zc_time_ns() - t0) * 1e-9;
    return ZC_OK;
}

/*
 * This rank's link to its ring neighbours into @p in: bytes/s, the median seconds of a small
 * ring step and of a small round with every peer.
 */
zc_status_t zc_policy_measure_link(zc_ucx_comm_t *ucx, zc_policy_inputs_t *in)
{
    const int rank = zc_ucx_comm_rank(ucx), size = zc_ucx_comm_size(ucx);
    const int right = (rank + 1) % size, left = (rank + size - 1) % size;
    double small = INFINITY, big = INFINITY, t = 0, steps[LINK_SMALL_ROUNDS], rounds[ROUND_REPS];
    zc_status_t status = ZC_OK;
    unsigned round = 0;

    _Static_assert(LINK_BIG_BYTES >= ROUND_BYTES * 64, "the round buffers fit 64 peers");
    const size_t buf_bytes = ZC_MAX((size_t)LINK_BIG_BYTES, (size_t)size * ROUND_BYTES);
    char *sbuf = malloc(buf_bytes), *rbuf = malloc(buf_bytes);
    zc_ucx_req_t *reqs = calloc(2 * (size_t)size, sizeof(*reqs));
    if (!sbuf || !rbuf || !reqs) {
        ZC_ERROR("policy: cannot allocate 2 x %zu bytes to measure the link", buf_bytes);
        free(sbuf);
        free(rbuf);
        free(reqs);
        return ZC_ERR_NO_MEMORY;
    }
    /* touch every page now, so that no round pays for page faults */
    memset(sbuf, 0x5a, buf_bytes);
    memset(rbuf, 0, buf_bytes);

    for (int i = 0; i < LINK_SMALL_ROUNDS; i++) {
        ZC_CHECK_GOTO(exchange(ucx, left, right, round++, sbuf, rbuf, LINK_SMALL_BYTES, &t), status,
                      err_leak);
        small = ZC_MIN(small, t);
        steps[i] = t;
    }
    for (int i = 0; i < LINK_BIG_ROUNDS; i++) {
        ZC_CHECK_GOTO(exchange(ucx, left, right, round++, sbuf, rbuf, LINK_BIG_BYTES, &t), status,
                      err_leak);
        big = ZC_MIN(big, t);
    }
    for (int i = 0; i < ROUND_REPS; i++)
        ZC_CHECK_GOTO(small_round(ucx, round++, sbuf, rbuf, reqs, &rounds[i]), status, err_leak);
    free(sbuf);
    free(rbuf);
    free(reqs);

    qsort(steps, LINK_SMALL_ROUNDS, sizeof(steps[0]), cmp_double);
    qsort(rounds, ROUND_REPS, sizeof(rounds[0]), cmp_double);
    in->link_lat = ZC_MAX(steps[LINK_SMALL_ROUNDS / 2], 1e-9);
    in->round_lat = ZC_MAX(rounds[ROUND_REPS / 2], 1e-9);
    /* the wire's own latency is paid once per message: the rest of the big step is bandwidth */
    in->link_bw = clamp_rate(LINK_BIG_BYTES, big - small);
    ZC_DEBUG("policy: rank %d link (to %d, from %d): %.3g GB/s (best of %d x %u bytes less the "
             "best of %d x %d bytes), a step %.1f us, a round %.1f us (medians of %d and %d)",
             rank, right, left, in->link_bw * 1e-9, LINK_BIG_ROUNDS, LINK_BIG_BYTES,
             LINK_SMALL_ROUNDS, LINK_SMALL_BYTES, in->link_lat * 1e6, in->round_lat * 1e6,
             LINK_SMALL_ROUNDS, ROUND_REPS);
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

/* Encode, decode_add and (linear codecs) reduce speeds and the ratio of @p codec on this rank. */
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
    params.gradiveq_warmup = 1; /* one raw call to learn from, then compressed calls to time */
    if (zc_codec_needs_state(&params)) {
        ZC_CHECK_GOTO(zc_codec_state_create(&params, n, &state), status, err);
        /* GradiVeQ encodes raw in its warm-up: learn a basis so that encode does its work */
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
    /* qsgd-int: one payload is narrower than the ring's sums, which its model counts */
    in->ratio[codec] =
        zc_codec_shared_scales(&params, n) ? zc_codec_wire_ratio(&params) : (double)len / (4.0 * n);
    zc_codec_state_destroy(state);
    return ZC_OK;

err_state:
    zc_codec_state_destroy(state);
err:
    ZC_ERROR("policy: measuring codec %s on %zu values failed: %s", zc_codec_name(codec), n,
             zc_status_string(status));
    return status;
}

/* This rank's add speed and codec numbers, into @p in. */
static zc_status_t measure_codecs(const zc_policy_t *pol, uint64_t seed, zc_policy_inputs_t *in)
{
    const size_t n = CODEC_VALUES;
    const unsigned mask = zc_policy_codecs_in_play(pol);
    codec_bench_t b = {0};
    zc_status_t status = ZC_OK;
    double add = INFINITY;

    for (int c = 0; c < ZC_CODEC_COUNT; c++) {
        if (!(mask & 1u << c))
            continue;
        /* as measure_codec sizes them: a sum of two payloads (qsgd-int's is a bit wider) */
        zc_codec_params_t params = pol->params[c];
        if (pol->nranks < 2)
            zc_codec_params_set_ranks(&params, 2);
        b.cap = ZC_MAX(b.cap, zc_codec_bound(&params, n));
    }
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

    /* zeroing an accumulator, as the all-gather and the scatter do before a chunk's first
       payload: the bulk of a sparse decode (top-k's decode_add touches its entries only) */
    double zero = INFINITY;
    for (int i = 0; i < CODEC_REPS; i++) {
        uint64_t t0 = zc_time_ns();
        memset(b.acc, 0, n * sizeof(float));
        __asm__ volatile("" : : "r"(b.acc) : "memory"); /* the stores happen, each time */
        zero = ZC_MIN(zero, (double)(zc_time_ns() - t0) * 1e-9);
    }
    in->zero_bw = clamp_rate(4.0 * n, zero);

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

/* What each rank contributes to the agreement: its link, its codec numbers, or why it has none. */
typedef struct rank_report {
    zc_policy_inputs_t in;
    int64_t status;
} rank_report_t;

/*
 * The agreed inputs from every rank's report: the slowest of every rate (a call waits for its
 * slowest rank), the longest round, rank 0's ratios (every rank measured them on the same data
 * with the same draws). @p all holds @p size reports; 0, or the first failure's status.
 */
static zc_status_t agree(const rank_report_t *all, int size, int rank, zc_policy_inputs_t *in)
{
    *in = all[0].in;
    for (int r = 0; r < size; r++) {
        const zc_policy_inputs_t *o = &all[r].in;
        if (all[r].status < 0) {
            if (r != rank)
                ZC_ERROR("policy: rank %d failed to measure its link or codecs (%s)", r,
                         zc_status_string((zc_status_t)all[r].status));
            return (zc_status_t)all[r].status;
        }
        zc_policy_inputs_slowest(in, o);
    }
    return ZC_OK;
}

/*
 * Every rank measures its link, then its codecs, all at once: ranks that share a host's cores
 * and memory share them in a call too, so speeds measured together are the speeds a call gets.
 * One allgather of the reports agrees on them (agree) and rounds them to classes
 * (zc_policy_round_inputs); a failure on any rank fails every rank, which all learn from the
 * same allgather, so none is left waiting.
 */
zc_status_t zc_policy_measure(zc_policy_t *pol, uint64_t seed, zc_bootstrap_t *bs,
                              zc_ucx_comm_t *ucx)
{
    const int rank = bs->rank, size = bs->size;
    rank_report_t mine, *all;
    zc_status_t status;

    memset(&mine, 0, sizeof(mine));
    mine.in = pol->in; /* nominal: one rank has no link, and no term of the model uses it */
    if (size > 1)
        mine.status = zc_policy_measure_link(ucx, &mine.in);
    if (mine.status == ZC_OK)
        mine.status = measure_codecs(pol, seed, &mine.in);

    all = malloc((size_t)size * sizeof(*all));
    if (!all) {
        ZC_ERROR("policy: cannot allocate the measurement reports of %d ranks", size);
        return ZC_ERR_NO_MEMORY;
    }
    status = zc_bootstrap_allgather(bs, &mine, sizeof(mine), all);
    if (status == ZC_OK)
        status = agree(all, size, rank, &pol->in);
    free(all);
    ZC_CHECK(status);
    zc_policy_round_inputs(&pol->in);
    pol->measured = 1;
    return ZC_OK;
}

/*
 * The inputs of an auto configuration: rank 0's ZIPCCL_POLICY_FILE when it
 * holds them, else measured (and saved there by rank 0). Rank 0 tells every
 * rank what it read, or why it failed, so all take the same branch whatever
 * their own setting.
 */
static zc_status_t policy_inputs(zc_policy_t *pol, const zc_config_t *cfg, zc_bootstrap_t *bs,
                                 zc_ucx_comm_t *ucx)
{
    const char *path = cfg->policy_file;
    struct {
        zc_policy_inputs_t in;
        int64_t status, loaded;
    } file;

    memset(&file, 0, sizeof(file));
    if (bs->rank == 0 && path[0] != '\0') {
        int loaded = 0;
        file.in = pol->in;
        file.status = zc_policy_file_load(pol, path, &file.in, &loaded);
        file.loaded = loaded;
    }
    ZC_CHECK(zc_bootstrap_broadcast(bs, &file, sizeof(file), 0));
    if (file.status < 0) {
        if (bs->rank != 0)
            ZC_ERROR("policy: rank 0 cannot use its ZIPCCL_POLICY_FILE (%s)",
                     zc_status_string((zc_status_t)file.status));
        return (zc_status_t)file.status;
    }
    if (file.loaded) {
        pol->in = file.in;
        /* the file's rates are classes already; the nominal rates of codecs not in play too */
        zc_policy_round_inputs(&pol->in);
        pol->measured = 1;
        if (bs->rank == 0)
            ZC_INFO("policy: inputs read from ZIPCCL_POLICY_FILE=%s", path);
        return ZC_OK;
    }
    ZC_CHECK(zc_policy_measure(pol, (uint64_t)cfg->seed, bs, ucx));
    if (bs->rank == 0 && path[0] != '\0' && zc_policy_file_save(pol, path) == ZC_OK)
        ZC_INFO("policy: inputs measured and written to ZIPCCL_POLICY_FILE=%s", path);
    return ZC_OK;
}

zc_status_t zc_policy_init(zc_policy_t *pol, const zc_config_t *cfg, zc_bootstrap_t *bs,
                           zc_ucx_comm_t *ucx)
{
    zc_policy_t p;

    if (!pol || !cfg || !bs || !ucx)
        return ZC_ERR_INVALID_ARG;
    ZC_CHECK(zc_policy_configure(&p, cfg, zc_ucx_comm_size(ucx)));
    p.log_decisions = bs->rank == 0;
    if (zc_policy_needs_measurement(&p))
        ZC_CHECK(policy_inputs(&p, cfg, bs, ucx));
    if (bs->rank == 0)
        zc_policy_log(&p);
    *pol = p;
    return ZC_OK;
}
