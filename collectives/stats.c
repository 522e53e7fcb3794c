/*
 * All-reduce statistics: one book per communicator, totals and a row per
 * (algorithm, codec) path; the table of ZIPCCL_STATS and the JSON of
 * ZIPCCL_STATS_FILE (docs/collectives.md, "Statistics").
 */
#include "collectives/coll.h"
#include "common/log.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void add_call(zc_stats_t *s, int compressed, uint64_t bytes_in, uint64_t bytes_wire_raw,
                     const zc_op_stats_t *op, uint64_t total_ns)
{
    s->calls++;
    s->calls_compressed += compressed != 0;
    s->bytes_in += bytes_in;
    s->bytes_wire += op->bytes_wire;
    s->bytes_wire_raw += bytes_wire_raw;
    s->encode_s += (double)op->encode_ns * 1e-9;
    s->decode_s += (double)op->decode_ns * 1e-9;
    s->total_s += (double)total_ns * 1e-9;
}

void zc_stats_record(zc_stats_book_t *book, int algo, zc_codec_id_t codec, uint64_t bytes_in,
                     uint64_t bytes_wire_raw, const zc_op_stats_t *op, uint64_t total_ns)
{
    const int compressed = algo != ZC_ALGO_RAW_RING && codec != ZC_CODEC_NONE;
    zc_stats_t *row = NULL;

    if (algo >= 0 && algo < ZC_ALGO_COUNT && (unsigned)codec < ZC_CODEC_COUNT)
        row = &book->rows[algo][codec];
    add_call(&book->total, compressed, bytes_in, bytes_wire_raw, op, total_ns);
    if (row)
        add_call(row, compressed, bytes_in, bytes_wire_raw, op, total_ns);

    /*
     * A sampled call's error is ||e|| / ||x|| over all its own payloads
     * (sqrt of the summed squares), and the book averages those per call. An
     * all-zero input has no relative error and is not a sample.
     */
    if (op->sample_err && op->norm2 > 0) {
        double rel = sqrt(op->err2 / op->norm2);
        book->rel_err_sum += rel;
        book->total.rel_err_samples++;
        if (row) {
            row->rel_err += rel;
            row->rel_err_samples++;
        }
    }
}

/* @p s with its rel_err sum @p rel_sum turned into the mean. */
static zc_stats_t with_mean(const zc_stats_t *s, double rel_sum)
{
    zc_stats_t out = *s;
    out.rel_err = s->rel_err_samples ? rel_sum / (double)s->rel_err_samples : 0.0;
    return out;
}

void zc_stats_totals(const zc_stats_book_t *book, double residual_norm, zc_stats_t *out)
{
    *out = with_mean(&book->total, book->rel_err_sum);
    out->residual_norm = residual_norm;
}

/* Raw-ring bytes over wire bytes: how much less this rank sent; NAN when it sent nothing. */
static double ratio_of(const zc_stats_t *s)
{
    return s->bytes_wire ? (double)s->bytes_wire_raw / (double)s->bytes_wire : NAN;
}

/* "scatter/qsgd", or "raw" for the raw ring. */
static void path_name(int algo, int codec, char *buf, size_t len)
{
    const char *a = zc_algo_name((zc_algo_id_t)algo), *c = zc_codec_name((zc_codec_id_t)codec);
    if (algo == ZC_ALGO_RAW_RING && codec == ZC_CODEC_NONE)
        snprintf(buf, len, "raw");
    else
        snprintf(buf, len, "%s/%s", a ? a : "?", c ? c : "?");
}

/*
 * The next path with calls from *@p index on (rows in (algorithm, codec) order), with its
 * mean error; 0 when there is none left. The table and the JSON list the same rows.
 */
static int next_path(const zc_stats_book_t *book, int *index, int *algo_p, int *codec_p,
                     zc_stats_t *row_p)
{
    for (; *index < ZC_ALGO_COUNT * ZC_CODEC_COUNT; (*index)++) {
        const int a = *index / ZC_CODEC_COUNT, c = *index % ZC_CODEC_COUNT;
        const zc_stats_t *s = &book->rows[a][c];
        if (!s->calls)
            continue;
        (*index)++;
        *algo_p = a;
        *codec_p = c;
        *row_p = with_mean(s, s->rel_err);
        return 1;
    }
    return 0;
}

#define MIB (1024.0 * 1024.0)

static void print_row(FILE *f, int rank, const char *name, const zc_stats_t *s, int with_residual)
{
    char ratio[16], rel[16], res[16];
    double r = ratio_of(s);

    if (isfinite(r))
        snprintf(ratio, sizeof(ratio), "%.2f", r);
    else
        snprintf(ratio, sizeof(ratio), "-");
    if (s->rel_err_samples)
        snprintf(rel, sizeof(rel), "%.3e", s->rel_err);
    else
        snprintf(rel, sizeof(rel), "-");
    if (with_residual)
        snprintf(res, sizeof(res), "%.3e", s->residual_norm);
    else
        snprintf(res, sizeof(res), "-");
    fprintf(f, "%4d  %-16s %8" PRIu64 " %11.3f %11.3f %7s %9.3f %9.3f %9.3f %10s %10s\n", rank,
            name, s->calls, (double)s->bytes_in / MIB, (double)s->bytes_wire / MIB, ratio,
            s->encode_s, s->decode_s, s->total_s, rel, res);
}

void zc_stats_print(const zc_stats_book_t *book, double residual_norm, int rank, int size, FILE *f)
{
    char name[64];
    zc_stats_t total, row;

    fprintf(f, "zipccl all-reduce statistics, rank %d of %d\n", rank, size);
    fprintf(f, "%4s  %-16s %8s %11s %11s %7s %9s %9s %9s %10s %10s\n", "rank", "path", "calls",
            "MiB in", "MiB wire", "ratio", "encode s", "decode s", "total s", "rel err",
            "residual");
    for (int i = 0, a, c; next_path(book, &i, &a, &c, &row);) {
        path_name(a, c, name, sizeof(name));
        print_row(f, rank, name, &row, 0);
    }
    zc_stats_totals(book, residual_norm, &total);
    print_row(f, rank, "total", &total, 1);
    if (book->oob_values)
        fprintf(f,
                "%4d  %" PRIu64 " values out of band (NaN, infinities, out of the codec's range)\n",
                rank, book->oob_values);
}

/* ---------------------------------------------------------------- JSON */

/*
 * A JSON number, or null where JSON has none (NaN, infinities): the shortest
 * of 15, 16 or 17 significant digits that reads back as the same double, so
 * that 0.41 is not written 0.40999999999999998 and nothing is lost.
 */
static void json_number(FILE *f, double x)
{
    char buf[32];

    if (!isfinite(x)) {
        fputs("null", f);
        return;
    }
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof(buf), "%.*g", digits, x);
        if (strtod(buf, NULL) == x)
            break;
    }
    fputs(buf, f);
}

/* A JSON string: quotes, backslashes and control characters escaped. */
static void json_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* The fields of @p s, without braces; the residual norm only for the total. */
static void json_fields(FILE *f, const zc_stats_t *s, int with_residual)
{
    fprintf(f,
            "\"calls\": %" PRIu64 ", \"calls_compressed\": %" PRIu64 ", \"bytes_in\": %" PRIu64
            ", \"bytes_wire\": %" PRIu64 ", \"bytes_wire_raw\": %" PRIu64 ", \"ratio\": ",
            s->calls, s->calls_compressed, s->bytes_in, s->bytes_wire, s->bytes_wire_raw);
    json_number(f, ratio_of(s));
    fputs(", \"encode_s\": ", f);
    json_number(f, s->encode_s);
    fputs(", \"decode_s\": ", f);
    json_number(f, s->decode_s);
    fputs(", \"total_s\": ", f);
    json_number(f, s->total_s);
    fputs(", \"rel_err\": ", f);
    json_number(f, s->rel_err_samples ? s->rel_err : NAN);
    fprintf(f, ", \"rel_err_samples\": %" PRIu64, s->rel_err_samples);
    if (with_residual) {
        fputs(", \"residual_norm\": ", f);
        json_number(f, s->residual_norm);
    }
}

static void json_write(FILE *f, const zc_stats_book_t *book, double residual_norm, int rank,
                       int size)
{
    zc_stats_t total, row;
    int first = 1;

    zc_stats_totals(book, residual_norm, &total);
    fprintf(f, "{\n  \"rank\": %d,\n  \"size\": %d,\n  \"total\": {", rank, size);
    json_fields(f, &total, 1);
    fprintf(f, ", \"values_out_of_band\": %" PRIu64, book->oob_values);
    fputs("},\n  \"paths\": [", f);
    for (int i = 0, a, c; next_path(book, &i, &a, &c, &row);) {
        const char *an = zc_algo_name((zc_algo_id_t)a), *cn = zc_codec_name((zc_codec_id_t)c);
        fputs(first ? "\n    {\"algo\": " : ",\n    {\"algo\": ", f);
        json_string(f, an ? an : "?");
        fputs(", \"codec\": ", f);
        json_string(f, cn ? cn : "?");
        fputs(", ", f);
        json_fields(f, &row, 0);
        fputc('}', f);
        first = 0;
    }
    fputs(first ? "]\n}\n" : "\n  ]\n}\n", f);
}

/* @p pattern with every "%r" replaced by @p rank; NULL when out of memory. */
static char *expand_path(const char *pattern, int rank)
{
    char num[16];
    size_t n = 0, len;
    const char *p;

    snprintf(num, sizeof(num), "%d", rank);
    len = strlen(num);
    for (p = pattern; *p; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            n += len;
            p++;
        } else {
            n++;
        }
    }
    char *out = malloc(n + 1), *o = out;
    if (!out)
        return NULL;
    for (p = pattern; *p; p++) {
        if (p[0] == '%' && p[1] == 'r') {
            memcpy(o, num, len);
            o += len;
            p++;
        } else {
            *o++ = *p;
        }
    }
    *o = '\0';
    return out;
}

zc_status_t zc_stats_write_json(const zc_stats_book_t *book, double residual_norm, int rank,
                                int size, const char *path)
{
    zc_status_t status = ZC_OK;
    char *name;
    FILE *f;

    if (!book || !path || !path[0])
        return ZC_ERR_INVALID_ARG;
    name = expand_path(path, rank);
    if (!name) {
        ZC_ERROR("stats: out of memory expanding ZIPCCL_STATS_FILE=%s", path);
        return ZC_ERR_NO_MEMORY;
    }
    f = fopen(name, "w");
    if (!f) {
        ZC_ERROR("stats: cannot open %s for writing (ZIPCCL_STATS_FILE=%s): %s", name, path,
                 strerror(errno));
        free(name);
        return ZC_ERR_IO;
    }
    json_write(f, book, residual_norm, rank, size);
    /* a full disk shows at the flush, in ferror or in fclose: any of them fails the write */
    errno = 0;
    int failed = fflush(f) != 0 || ferror(f);
    int err = errno ? errno : EIO;
    if (fclose(f) != 0 && !failed) {
        failed = 1;
        err = errno;
    }
    if (failed) {
        ZC_ERROR("stats: writing %s failed: %s", name, strerror(err));
        status = ZC_ERR_IO;
    }
    free(name);
    return status;
}
