/*
 * The statistics book: what record adds up, the means totals compute, the
 * table's rows, and JSON that python3's json module parses strictly (no NaN or
 * Infinity, no duplicate keys) with the values recorded.
 */
#include "collectives/policy.h"
#include "collectives/stats.h"
#include "common/log.h"

#include <criterion/criterion.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- log capture ---- */

static int cap_count;
static char cap_msg[8][512];

static void capture_sink(void *arg, zc_log_level_t level, const char *file, int line,
                         const char *msg)
{
    if (cap_count < 8 && level == ZC_LOG_ERROR)
        snprintf(cap_msg[cap_count++], sizeof(cap_msg[0]), "%s", msg);
}

static void setup(void)
{
    cap_count = 0;
    zc_log_set_sink(capture_sink, NULL);
}

static void teardown(void)
{
    zc_log_set_sink(NULL, NULL);
}

TestSuite(stats, .init = setup, .fini = teardown, .timeout = 30);

/* ---- a book with known contents ---- */

static zc_op_stats_t op_stats(uint64_t wire, uint64_t enc_ns, uint64_t dec_ns, int sampled,
                              double err2, double norm2)
{
    zc_op_stats_t s = {.bytes_wire = wire,
                       .encode_ns = enc_ns,
                       .decode_ns = dec_ns,
                       .sample_err = sampled,
                       .err2 = err2,
                       .norm2 = norm2};
    return s;
}

/*
 * One raw call, four scatter/qsgd calls (two sampled with relative errors
 * 0.5 and 0.25, one unsampled whose err2 must be ignored, one sampled on an
 * all-zero input that is no sample), one allgather/bf16 call sampled at 0.125.
 */
static void fill_book(zc_stats_book_t *book)
{
    zc_op_stats_t s;

    memset(book, 0, sizeof(*book));
    s = op_stats(1500, 0, 0, 0, 0, 0);
    zc_stats_record(book, ZC_ALGO_RAW_RING, ZC_CODEC_NONE, 1000, 1500, &s, 2000000);
    s = op_stats(200, 1000000, 2000000, 1, 1.0, 4.0); /* sqrt(1/4) = 0.5 */
    zc_stats_record(book, ZC_ALGO_SCATTER, ZC_CODEC_QSGD, 4096, 1536, &s, 5000000);
    s = op_stats(300, 3000000, 4000000, 1, 1.0, 16.0); /* sqrt(1/16) = 0.25 */
    zc_stats_record(book, ZC_ALGO_SCATTER, ZC_CODEC_QSGD, 4096, 1536, &s, 7000000);
    s = op_stats(100, 500000, 500000, 0, 9.0, 1.0); /* not sampled: err2 ignored */
    zc_stats_record(book, ZC_ALGO_SCATTER, ZC_CODEC_QSGD, 4096, 1536, &s, 1000000);
    s = op_stats(100, 500000, 500000, 1, 0.0, 0.0); /* zero input: no relative error */
    zc_stats_record(book, ZC_ALGO_SCATTER, ZC_CODEC_QSGD, 4096, 1536, &s, 1000000);
    s = op_stats(4096, 250000000, 750000000, 1, 1.0, 64.0); /* sqrt(1/64) = 0.125 */
    zc_stats_record(book, ZC_ALGO_ALLGATHER, ZC_CODEC_BF16, 8192, 12288, &s, 2000000000);
}

Test(stats, record_and_totals)
{
    zc_stats_book_t book;
    zc_stats_t t;

    fill_book(&book);
    zc_stats_totals(&book, 2.5, &t);
    cr_assert_eq(t.calls, 6);
    cr_assert_eq(t.calls_compressed, 5);
    cr_assert_eq(t.bytes_in, 1000 + 4 * 4096 + 8192);
    cr_assert_eq(t.bytes_wire, 1500 + 200 + 300 + 100 + 100 + 4096);
    cr_assert_eq(t.bytes_wire_raw, 1500 + 4 * 1536 + 12288);
    cr_assert_float_eq(t.encode_s, 0.255, 1e-12);
    cr_assert_float_eq(t.decode_s, 0.757, 1e-12);
    cr_assert_float_eq(t.total_s, 2.016, 1e-12);
    cr_assert_eq(t.rel_err_samples, 3);
    cr_assert_float_eq(t.rel_err, (0.5 + 0.25 + 0.125) / 3, 1e-15);
    cr_assert_eq(t.residual_norm, 2.5);

    /* rows: the path's own sums, the rel_err still a sum until read */
    const zc_stats_t *q = &book.rows[ZC_ALGO_SCATTER][ZC_CODEC_QSGD];
    cr_assert_eq(q->calls, 4);
    cr_assert_eq(q->calls_compressed, 4);
    cr_assert_eq(q->bytes_wire, 700);
    cr_assert_eq(q->rel_err_samples, 2);
    cr_assert_float_eq(q->rel_err, 0.75, 1e-15);
    const zc_stats_t *r = &book.rows[ZC_ALGO_RAW_RING][ZC_CODEC_NONE];
    cr_assert_eq(r->calls, 1);
    cr_assert_eq(r->calls_compressed, 0);
    cr_assert_eq(r->rel_err_samples, 0);
    uint64_t calls = 0;
    for (int a = 0; a < ZC_ALGO_COUNT; a++)
        for (int c = 0; c < ZC_CODEC_COUNT; c++)
            calls += book.rows[a][c].calls;
    cr_assert_eq(calls, t.calls, "every call in exactly one row");
}

Test(stats, empty_book)
{
    zc_stats_book_t book;
    zc_stats_t t;

    memset(&book, 0, sizeof(book));
    zc_stats_totals(&book, 0, &t);
    cr_assert_eq(t.calls, 0);
    cr_assert_eq(t.rel_err, 0.0, "no samples: 0, not 0/0");
    cr_assert_eq(t.rel_err_samples, 0);
}

Test(stats, out_of_range_path_counts_in_the_total_only)
{
    zc_stats_book_t book;
    zc_op_stats_t s = op_stats(10, 0, 0, 0, 0, 0);

    memset(&book, 0, sizeof(book));
    zc_stats_record(&book, ZC_ALGO_COUNT, ZC_CODEC_QSGD, 40, 60, &s, 1);
    zc_stats_record(&book, ZC_ALGO_SCATTER, ZC_CODEC_COUNT, 40, 60, &s, 1);
    cr_assert_eq(book.total.calls, 2);
    for (int a = 0; a < ZC_ALGO_COUNT; a++)
        for (int c = 0; c < ZC_CODEC_COUNT; c++)
            cr_assert_eq(book.rows[a][c].calls, 0);
}

/* ---- the table ---- */

/* The line of @p text that contains @p needle, copied into @p line; 0 when none. */
static int find_line(const char *text, const char *needle, char *line, size_t len)
{
    for (const char *p = text; *p;) {
        const char *end = strchr(p, '\n');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        if (n < len) {
            memcpy(line, p, n);
            line[n] = '\0';
            if (strstr(line, needle))
                return 1;
        }
        p += n + (end != NULL);
    }
    return 0;
}

Test(stats, table_has_a_row_per_path_and_a_total)
{
    zc_stats_book_t book;
    char *text = NULL, line[256];
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);

    cr_assert_not_null(f);
    fill_book(&book);
    book.oob_values = 7;
    zc_stats_print(&book, 2.5, 3, 8, f);
    fclose(f);

    cr_assert(strstr(text, "rank 3 of 8"), "%s", text);
    int lines = 0;
    for (const char *p = text; (p = strchr(p, '\n')); p++)
        lines++;
    cr_assert_eq(lines, 2 + 3 + 1 + 1, "title, header, 3 paths, total, out of band:\n%s", text);
    cr_assert(strstr(text, "   3  7 values out of band"), "%s", text);

    cr_assert(find_line(text, "raw", line, sizeof(line)), "%s", text);
    cr_assert(strstr(line, "   3  raw "), "the rank opens the row: '%s'", line);
    cr_assert(strstr(line, " 1.00 "), "raw ring ratio 1: '%s'", line);

    /* qsgd: 4 x 1536 raw-ring bytes over 700 sent = 8.78; mean error (0.5 + 0.25) / 2 */
    cr_assert(find_line(text, "scatter/qsgd", line, sizeof(line)), "%s", text);
    cr_assert(strstr(line, " 4 ") && strstr(line, " 8.78 ") && strstr(line, "3.750e-01"), "'%s'",
              line);
    cr_assert(find_line(text, "allgather/bf16", line, sizeof(line)), "%s", text);
    cr_assert(strstr(line, "1.250e-01") && strstr(line, " 3.00 "), "'%s'", line);

    cr_assert(find_line(text, "   3  total ", line, sizeof(line)), "%s", text);
    cr_assert(strstr(line, " 6 ") && strstr(line, "2.500e+00"), "'%s'", line);
    cr_assert_null(strstr(text, "ring/"), "unused paths have no row");
    free(text);
}

/* ---- JSON ---- */

/*
 * Parses @p path with python3 (whose path meson passes in PYTHON3), strictly,
 * and writes what @p expr (a Python expression of d, the document) prints to
 * @p out. Returns the exit status.
 */
static int python_eval(const char *path, const char *expr, char *out, size_t len)
{
    const char *python = getenv("PYTHON3");
    char script[] = "/tmp/zc-stats-check-XXXXXX";
    char cmd[1024];

    cr_assert_not_null(python, "PYTHON3 is not set (meson sets it)");
    int fd = mkstemp(script);
    cr_assert_geq(fd, 0);
    FILE *f = fdopen(fd, "w");
    fprintf(f,
            "import json, sys\n"
            "def const(name):\n"
            "    raise ValueError('not JSON: ' + name)\n"
            "def pairs(kv):\n"
            "    keys = [k for k, _ in kv]\n"
            "    if len(keys) != len(set(keys)):\n"
            "        raise ValueError('duplicate key in ' + repr(keys))\n"
            "    return dict(kv)\n"
            "with open(sys.argv[1]) as f:\n"
            "    d = json.load(f, parse_constant=const, object_pairs_hook=pairs)\n"
            "print(%s)\n",
            expr);
    fclose(f);
    snprintf(cmd, sizeof(cmd), "'%s' '%s' '%s' 2>&1", python, script, path);
    FILE *p = popen(cmd, "r");
    cr_assert_not_null(p);
    size_t n = fread(out, 1, len - 1, p);
    out[n] = '\0';
    if (n && out[n - 1] == '\n')
        out[n - 1] = '\0';
    int status = pclose(p);
    unlink(script);
    return status;
}

/* @p expr of @p path's document prints exactly @p expected, and Python parsed it. */
static void python_expect(const char *path, const char *expr, const char *expected)
{
    char out[1024];

    cr_assert_eq(python_eval(path, expr, out, sizeof(out)), 0, "%s", out);
    cr_assert_str_eq(out, expected, "%s", expr);
}

static char dir[] = "/tmp/zc-stats-json-XXXXXX";

static void json_setup(void)
{
    setup();
    cr_assert_not_null(mkdtemp(dir));
}

static void json_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    cr_assert_eq(system(cmd), 0);
    teardown();
}

Test(stats, json_parses_with_the_recorded_values, .init = json_setup, .fini = json_teardown)
{
    zc_stats_book_t book;
    char pattern[256], path[256];

    fill_book(&book);
    book.oob_values = 3;
    snprintf(pattern, sizeof(pattern), "%s/stats-%%r.json", dir);
    snprintf(path, sizeof(path), "%s/stats-5.json", dir);
    cr_assert_eq(zc_stats_write_json(&book, 2.5, 5, 8, pattern), ZC_OK);
    cr_assert_eq(access(path, R_OK), 0, "%%r became the rank: %s", path);

    python_expect(path,
                  "d['rank'], d['size'], d['total']['calls'], "
                  "d['total']['calls_compressed'], d['total']['bytes_in'], "
                  "d['total']['bytes_wire'], d['total']['bytes_wire_raw'], "
                  "d['total']['rel_err_samples'], d['total']['residual_norm'], "
                  "d['total']['values_out_of_band'], "
                  "[(p['algo'], p['codec'], p['calls']) for p in d['paths']]",
                  "5 8 6 5 25576 6296 19932 3 2.5 3 [('raw', 'none', 1), "
                  "('allgather', 'bf16', 1), ('scatter', 'qsgd', 4)]");

    /* doubles survive exactly (17 digits); a path without samples has rel_err null */
    python_expect(path,
                  "d['total']['rel_err'] == (0.5 + 0.25 + 0.125) / 3, "
                  "abs(d['total']['encode_s'] - 0.255) < 1e-12, "
                  "d['paths'][0]['rel_err'], float(d['paths'][0]['ratio']), "
                  "d['paths'][2]['rel_err'], float(d['paths'][1]['ratio']), "
                  "'residual_norm' in d['paths'][0]",
                  "True True None 1.0 0.375 3.0 False");
}

Test(stats, json_of_an_empty_book_is_valid, .init = json_setup, .fini = json_teardown)
{
    zc_stats_book_t book;
    char path[256];

    memset(&book, 0, sizeof(book));
    snprintf(path, sizeof(path), "%s/empty.json", dir);
    cr_assert_eq(zc_stats_write_json(&book, 0, 0, 1, path), ZC_OK);
    /* nothing sent: the ratio and the error are null, not NaN */
    python_expect(path,
                  "d['paths'], d['total']['calls'], d['total']['ratio'], "
                  "d['total']['rel_err']",
                  "[] 0 None None");
}

Test(stats, json_rank_in_every_place_of_the_name, .init = json_setup, .fini = json_teardown)
{
    zc_stats_book_t book;
    char pattern[256], path[256];

    memset(&book, 0, sizeof(book));
    snprintf(pattern, sizeof(pattern), "%s/r%%r-%%r%%x.json", dir);
    snprintf(path, sizeof(path), "%s/r12-12%%x.json", dir);
    cr_assert_eq(zc_stats_write_json(&book, 0, 12, 16, pattern), ZC_OK);
    cr_assert_eq(access(path, R_OK), 0, "expected %s", path);
}

Test(stats, json_unwritable_path_is_an_io_error)
{
    zc_stats_book_t book;

    memset(&book, 0, sizeof(book));
    cr_assert_eq(zc_stats_write_json(&book, 0, 1, 2, "/nonexistent-zc-dir/stats-%r.json"),
                 ZC_ERR_IO);
    cr_assert_eq(cap_count, 1);
    cr_assert(strstr(cap_msg[0], "/nonexistent-zc-dir/stats-1.json") &&
                  strstr(cap_msg[0], "No such file"),
              "%s", cap_msg[0]);
    /* a full device fails at the flush, not silently */
    if (access("/dev/full", W_OK) == 0) {
        cr_assert_eq(zc_stats_write_json(&book, 0, 1, 2, "/dev/full"), ZC_ERR_IO);
        cr_assert_eq(cap_count, 2);
        cr_assert(strstr(cap_msg[1], "/dev/full"), "%s", cap_msg[1]);
    }
}

Test(stats, json_bad_arguments)
{
    zc_stats_book_t book;

    memset(&book, 0, sizeof(book));
    cr_assert_eq(zc_stats_write_json(NULL, 0, 0, 1, "x.json"), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_stats_write_json(&book, 0, 0, 1, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_stats_write_json(&book, 0, 0, 1, ""), ZC_ERR_INVALID_ARG);
}
