/*
 * All-reduce statistics of one communicator: totals (zc_stats_t, public) and
 * one row per (algorithm, codec) path, printed as a table at destroy
 * (ZIPCCL_STATS=1) and written as JSON (ZIPCCL_STATS_FILE).
 */
#ifndef ZC_COLLECTIVES_STATS_H
#define ZC_COLLECTIVES_STATS_H

#include "collectives/algo.h"

#include <zipccl/zipccl.h>

#include <stdint.h>
#include <stdio.h>

/* What one op measured; algorithms add to it. */
typedef struct zc_op_stats {
    uint64_t bytes_wire; /* bytes this rank sent (payloads and headers) */
    uint64_t encode_ns;
    uint64_t decode_ns;
    int sample_err; /* set by the driver on sampled calls: algorithms call zc_coll_measure_error */
    double err2;    /* sum of squared errors of own payloads (sampled calls) */
    double norm2;   /* sum of squared inputs of those payloads */
} zc_op_stats_t;

typedef struct zc_stats_book {
    zc_stats_t total;
    zc_stats_t rows[ZC_ALGO_COUNT][ZC_CODEC_COUNT];
    double rel_err_sum; /* of total; rows keep theirs in rows[][].rel_err as sums until read */
    /* values this rank sent out of band or whose residual it cleared (NaN, infinities, out of
     * range; docs/codecs.md): the state store's count, set before the book is printed */
    uint64_t oob_values;
} zc_stats_book_t;

/* Records one completed call that took @p total_ns. */
void zc_stats_record(zc_stats_book_t *book, int algo, zc_codec_id_t codec, uint64_t bytes_in,
                     uint64_t bytes_wire_raw, const zc_op_stats_t *op, uint64_t total_ns);

/* Totals with means computed; @p residual_norm from the state store. */
void zc_stats_totals(const zc_stats_book_t *book, double residual_norm, zc_stats_t *out);

/* The table, one line per path used plus a total, headed by the rank. */
void zc_stats_print(const zc_stats_book_t *book, double residual_norm, int rank, int size, FILE *f);

/* JSON to @p path ("%r" replaced by the rank). ZC_ERR_IO (logged) when it cannot be written. */
zc_status_t zc_stats_write_json(const zc_stats_book_t *book, double residual_norm, int rank,
                                int size, const char *path);

#endif
