/*
 * The config table and its typed parsers: every default valid, range edges,
 * units, enums, errors that name the variable and the range, "did you mean".
 * No test touches the process environment: configs come from local arrays.
 */
#include "common/config.h"
#include "common/cpu.h"
#include "common/log.h"

#include <criterion/criterion.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Every message the loader logs, with its level, in order. */
typedef struct log_capture {
    int count;
    int errors, warnings;
    char text[4096];
} log_capture_t;

static log_capture_t logs;
static zc_log_level_t initial_level; /* the logger's level before setup changed it */

static void capture_sink(void *arg, zc_log_level_t level, const char *file, int line,
                         const char *msg)
{
    log_capture_t *c = arg;
    size_t used = strlen(c->text);
    snprintf(c->text + used, sizeof(c->text) - used, "%s: %s\n", zc_log_level_name(level), msg);
    c->count++;
    c->errors += level == ZC_LOG_ERROR;
    c->warnings += level == ZC_LOG_WARN;
}

static void setup(void)
{
    memset(&logs, 0, sizeof(logs));
    initial_level = zc_log_level_current;
    zc_log_set_level(ZC_LOG_TRACE);
    zc_log_set_sink(capture_sink, &logs);
}

static void teardown(void)
{
    zc_log_set_sink(NULL, NULL);
    zc_log_set_level(ZC_LOG_WARN);
}

TestSuite(config, .init = setup, .fini = teardown);

static const zc_param_desc_t *param(const char *name)
{
    const zc_param_desc_t *p = zc_param_find(name);
    cr_assert_not_null(p, "%s is not in the table", name);
    return p;
}

static int64_t *field(zc_config_t *cfg, const zc_param_desc_t *p)
{
    return (int64_t *)((char *)cfg + p->offset);
}

/* Parses @p text with @p p; asserts success and returns the value. */
static int64_t parse_ok(const zc_param_desc_t *p, const char *text)
{
    int64_t v = INT64_C(0x5a5a5a5a5a5a5a5a);
    zc_status_t status = zc_param_parse(p, text, &v);
    cr_assert_eq(status, ZC_OK, "%s=\"%s\" rejected (%s)", p->name, text, zc_status_string(status));
    return v;
}

/* Asserts @p text is rejected with ZC_ERR_INVALID_CONFIG and the output left alone. */
static void parse_bad(const zc_param_desc_t *p, const char *text)
{
    const int64_t canary = INT64_C(0x5a5a5a5a5a5a5a5a);
    int64_t v = canary;
    zc_status_t status = zc_param_parse(p, text, &v);
    cr_assert_eq(status, ZC_ERR_INVALID_CONFIG, "%s=\"%s\" accepted as %" PRId64, p->name, text, v);
    cr_assert_eq(v, canary, "%s=\"%s\": rejected but the output was written", p->name, text);
}

/* Synthetic parameters of the kinds the table does not use yet (stored in the seed field). */
static const zc_param_desc_t size_param = {ZC_PARAM_KIND_SIZE,
                                           "ZIPCCL_TEST_SIZE",
                                           offsetof(zc_config_t, seed),
                                           "64KiB",
                                           0,
                                           INT64_MAX,
                                           NULL,
                                           0,
                                           "a size"};
static const zc_param_desc_t bounded_size_param = {ZC_PARAM_KIND_SIZE,
                                                   "ZIPCCL_TEST_BOUNDED_SIZE",
                                                   offsetof(zc_config_t, seed),
                                                   "4KiB",
                                                   4096,
                                                   INT64_C(1) << 30,
                                                   NULL,
                                                   0,
                                                   "a size in 4 KiB..1 GiB"};
static const zc_param_desc_t bool_param = {
    ZC_PARAM_KIND_BOOL, "ZIPCCL_TEST_BOOL", offsetof(zc_config_t, seed), "0", 0, 1, NULL, 0,
    "a switch"};

/* ---- the table ---- */

Test(config, table_is_well_formed)
{
    cr_assert_gt(zc_param_count(), 0);
    cr_assert_null(zc_param_at(zc_param_count()));
    for (size_t i = 0; i < zc_param_count(); i++) {
        const zc_param_desc_t *p = zc_param_at(i);
        cr_assert_not_null(p);
        cr_assert_eq(strncmp(p->name, ZC_CONFIG_PREFIX, strlen(ZC_CONFIG_PREFIX)), 0, "%s",
                     p->name);
        cr_assert_eq(zc_param_find(p->name), p, "%s not found by name", p->name);
        cr_assert(p->doc && strlen(p->doc) > 0, "%s has no doc", p->name);
        cr_assert_eq(p->offset % sizeof(int64_t), 0);
        cr_assert_lt(p->offset, sizeof(zc_config_t));
        cr_assert_str_neq(zc_param_kind_name(p->kind), "?");
        if (p->kind == ZC_PARAM_KIND_ENUM)
            cr_assert(p->choices && strlen(p->choices) > 0, "enum %s has no choices", p->name);
        else
            cr_assert_leq(p->min, p->max, "%s: min > max", p->name);
        for (size_t j = 0; j < i; j++) {
            cr_assert_str_neq(zc_param_at(j)->name, p->name, "%s listed twice", p->name);
            cr_assert_neq(zc_param_at(j)->offset, p->offset, "%s shares a field", p->name);
        }
    }
    cr_assert_null(zc_param_find("ZIPCCL_NO_SUCH_VARIABLE"));
    cr_assert_null(zc_param_find("zipccl_seed"), "lookup must be exact");
}

Test(config, every_default_parses_in_range)
{
    zc_config_t cfg;
    memset(&cfg, 0xa5, sizeof(cfg));
    zc_config_defaults(&cfg);
    for (size_t i = 0; i < zc_param_count(); i++) {
        const zc_param_desc_t *p = zc_param_at(i);
        int64_t v = parse_ok(p, p->def);
        if (p->kind != ZC_PARAM_KIND_STRING) /* a STRING's field is a pointer, checked below */
            cr_assert_eq(*field(&cfg, p), v, "%s: zc_config_defaults disagrees with the parser",
                         p->name);
        switch (p->kind) {
        case ZC_PARAM_KIND_INT_OR_AUTO:
            if (v == ZC_CONFIG_AUTO)
                break;
            /* fall through */
        case ZC_PARAM_KIND_INT:
        case ZC_PARAM_KIND_SIZE:
        case ZC_PARAM_KIND_DECIMAL:
            cr_assert(v >= p->min && v <= p->max,
                      "%s default %" PRId64 " outside %" PRId64 "..%" PRId64, p->name, v, p->min,
                      p->max);
            break;
        case ZC_PARAM_KIND_ENUM: {
            char name[64];
            zc_param_format(p, &cfg, name, sizeof(name));
            cr_assert_str_neq(name, "?", "%s default out of choices", p->name);
            break;
        }
        case ZC_PARAM_KIND_BOOL: cr_assert(v == 0 || v == 1); break;
        case ZC_PARAM_KIND_STRING:
            cr_assert(v >= p->min && v <= p->max, "%s default length %" PRId64, p->name, v);
            cr_assert_str_eq(*(const char *const *)(const void *)((const char *)&cfg + p->offset),
                             p->def, "%s", p->name);
            break;
        }
    }
}

Test(config, defaults_known_values)
{
    zc_config_t cfg;
    zc_config_defaults(&cfg);
    cr_assert_eq(cfg.qsgd_bits, 4);
    cr_assert_eq(cfg.qsgd_levels, ZC_CONFIG_AUTO);
    cr_assert_eq(cfg.qsgd_bucket, 512);
    cr_assert_eq(cfg.seed, 0);
    cr_assert_eq(cfg.log_level, ZC_LOG_WARN);
    cr_assert_eq(cfg.cpu, 0, "cpu defaults to auto");
}

Test(config, enum_choices_follow_the_c_enums)
{
    /* params.def promises enum choices in the order of the matching C enums. */
    char name[64];
    zc_config_t cfg;
    const zc_param_desc_t *level = param("ZIPCCL_LOG_LEVEL");
    for (int i = ZC_LOG_ERROR; i <= ZC_LOG_TRACE; i++) {
        cr_assert_eq(parse_ok(level, zc_log_level_name((zc_log_level_t)i)), i);
        cfg.log_level = i;
        zc_param_format(level, &cfg, name, sizeof(name));
        cr_assert_str_eq(name, zc_log_level_name((zc_log_level_t)i));
    }
    /* ZIPCCL_CPU: index 0 is auto, index i + 1 is zc_cpu_level_t i. */
    const zc_param_desc_t *cpu = param("ZIPCCL_CPU");
    cr_assert_eq(parse_ok(cpu, "auto"), 0);
    for (int i = ZC_CPU_SCALAR; i < ZC_CPU_NLEVELS; i++)
        cr_assert_eq(parse_ok(cpu, zc_cpu_level_name((zc_cpu_level_t)i)), i + 1);
    parse_bad(cpu, "avx512fp16");
}

Test(config, choice_constants_are_the_stored_indices)
{
    /* common/choices.h: one list gives the parser its names and the code its constants */
    cr_assert_eq(parse_ok(param("ZIPCCL_ALGO"), "scatter"), ZC_CFG_ALGO_SCATTER);
    cr_assert_eq(parse_ok(param("ZIPCCL_ALGO"), "auto"), ZC_CFG_ALGO_AUTO);
    cr_assert_eq(parse_ok(param("ZIPCCL_CODEC"), "auto"), ZC_CFG_CODEC_AUTO);
    cr_assert_eq(parse_ok(param("ZIPCCL_CODEC"), "gradiveq"), ZC_CFG_CODEC_GRADIVEQ);
    cr_assert_eq(parse_ok(param("ZIPCCL_CPU"), "avx2"), ZC_CFG_CPU_AVX2);
    cr_assert_eq(parse_ok(param("ZIPCCL_COLLNET_CODEC"), "bf16"), ZC_CFG_COLLNET_CODEC_BF16);
    cr_assert_eq(parse_ok(param("ZIPCCL_QSGD_CODING"), "elias"), ZC_CFG_QSGD_CODING_ELIAS);
    /* the list's trailing comma is no choice: neither a name nor part of the range */
    parse_bad(param("ZIPCCL_ALGO"), "");
    char range[128];
    zc_param_range(param("ZIPCCL_ALGO"), range, sizeof(range));
    cr_assert_str_eq(range, "auto|ring|allgather|scatter");
    zc_config_t cfg;
    zc_config_defaults(&cfg);
    cfg.algo = ZC_CFG_ALGO_COUNT;
    zc_param_format(param("ZIPCCL_ALGO"), &cfg, range, sizeof(range));
    cr_assert_str_eq(range, "?");
}

Test(config, log_level_default_matches_logger)
{
    /* Before anything sets it, the logger's level is the table's default (each test runs
     * in a fresh worker process, so initial_level is the value the program starts with). */
    zc_config_t cfg;
    zc_config_defaults(&cfg);
    cr_assert_eq(initial_level, (zc_log_level_t)cfg.log_level, "logger starts at %s, table says %s",
                 zc_log_level_name(initial_level),
                 zc_log_level_name((zc_log_level_t)cfg.log_level));
}

/* ---- INT and INT_OR_AUTO ---- */

Test(config, int_range_edges)
{
    for (size_t i = 0; i < zc_param_count(); i++) {
        const zc_param_desc_t *p = zc_param_at(i);
        char text[64];
        if (p->kind != ZC_PARAM_KIND_INT && p->kind != ZC_PARAM_KIND_INT_OR_AUTO)
            continue;
        snprintf(text, sizeof(text), "%" PRId64, p->min);
        cr_assert_eq(parse_ok(p, text), p->min, "%s min", p->name);
        snprintf(text, sizeof(text), "%" PRId64, p->max);
        cr_assert_eq(parse_ok(p, text), p->max, "%s max", p->name);
        if (p->min > INT64_MIN) {
            snprintf(text, sizeof(text), "%" PRId64, p->min - 1);
            parse_bad(p, text);
        }
        if (p->max < INT64_MAX) {
            snprintf(text, sizeof(text), "%" PRId64, p->max + 1);
            parse_bad(p, text);
        } else {
            parse_bad(p, "9223372036854775808"); /* INT64_MAX + 1 overflows the parser */
        }
    }
}

Test(config, int_syntax)
{
    const zc_param_desc_t *bits = param("ZIPCCL_QSGD_BITS");
    cr_assert_eq(parse_ok(bits, "8"), 8);
    cr_assert_eq(parse_ok(bits, "  8\t"), 8);
    cr_assert_eq(parse_ok(bits, "+8"), 8);
    cr_assert_eq(parse_ok(bits, "08"), 8, "a leading zero is decimal, not octal");
    cr_assert_eq(parse_ok(bits, "010"), 10, "a leading zero is decimal, not octal");
    cr_assert_eq(parse_ok(bits, "0x10"), 16);
    parse_bad(bits, "");
    parse_bad(bits, "   ");
    parse_bad(bits, "8 bits");
    parse_bad(bits, "8.0");
    parse_bad(bits, "eight");
    parse_bad(bits, "auto");
    parse_bad(bits, "99");
    parse_bad(bits, "-4");

    const zc_param_desc_t *seed = param("ZIPCCL_SEED");
    cr_assert_eq(parse_ok(seed, "9223372036854775807"), INT64_MAX);
    cr_assert_eq(parse_ok(seed, "0xdeadbeef"), INT64_C(0xdeadbeef));
    parse_bad(seed, "-1");
    parse_bad(seed, "99999999999999999999");
}

Test(config, int_or_auto)
{
    const zc_param_desc_t *levels = param("ZIPCCL_QSGD_LEVELS");
    cr_assert_eq(levels->kind, ZC_PARAM_KIND_INT_OR_AUTO);
    cr_assert_eq(parse_ok(levels, "auto"), ZC_CONFIG_AUTO);
    cr_assert_eq(parse_ok(levels, "AUTO"), ZC_CONFIG_AUTO);
    cr_assert_eq(parse_ok(levels, " Auto "), ZC_CONFIG_AUTO);
    cr_assert_eq(parse_ok(levels, "7"), 7);
    parse_bad(levels, "automatic");
    parse_bad(levels, "aut");
    parse_bad(levels, "-1"); /* the stored form of auto is not a way to spell it */
    parse_bad(levels, "0");
}

/* ---- SIZE ---- */

Test(config, size_units)
{
    const zc_param_desc_t *p = &size_param;
    cr_assert_eq(parse_ok(p, "0"), 0);
    cr_assert_eq(parse_ok(p, "4096"), 4096);
    cr_assert_eq(parse_ok(p, "64KiB"), 65536);
    cr_assert_eq(parse_ok(p, "64kib"), 65536);
    cr_assert_eq(parse_ok(p, "64K"), 65536);
    cr_assert_eq(parse_ok(p, "64KB"), 65536);
    cr_assert_eq(parse_ok(p, "1M"), INT64_C(1) << 20);
    cr_assert_eq(parse_ok(p, "1MiB"), INT64_C(1) << 20);
    cr_assert_eq(parse_ok(p, "2GiB"), INT64_C(2) << 30);
    cr_assert_eq(parse_ok(p, "3g"), INT64_C(3) << 30);
    cr_assert_eq(parse_ok(p, "5TiB"), INT64_C(5) << 40);
    cr_assert_eq(parse_ok(p, "7B"), 7);
    cr_assert_eq(parse_ok(p, " 4 k "), 4096);
    cr_assert_eq(parse_ok(p, "4\tKiB"), 4096);
    cr_assert_eq(parse_ok(p, "8388607TiB"), INT64_C(8388607) << 40);
    cr_assert_eq(parse_ok(p, "9223372036854775807"), INT64_MAX);

    parse_bad(p, "-1");
    parse_bad(p, "-1K");
    parse_bad(p, "12XB");
    parse_bad(p, "12 K B");
    parse_bad(p, "1.5M");
    parse_bad(p, "K");
    parse_bad(p, "");
    parse_bad(p, "1PiB");
    parse_bad(p, "8388608TiB");          /* 2^63: one past INT64_MAX */
    parse_bad(p, "9007199254740992KiB"); /* 2^53 KiB = 2^63 */
    parse_bad(p, "99999999999999999999");
    /* Overflows that would wrap to small positive values if the shift were unchecked. */
    parse_bad(p, "16777217TiB");          /* (2^24 + 1) << 40 = 2^64 + 2^40 */
    parse_bad(p, "18014398509481985KiB"); /* (2^54 + 1) << 10 = 2^64 + 1024 */
    parse_bad(p, "8589934593G");          /* (2^33 + 1) << 30 = 2^63 + 2^30 */
}

Test(config, size_range)
{
    const zc_param_desc_t *p = &bounded_size_param;
    cr_assert_eq(parse_ok(p, "4KiB"), 4096);
    cr_assert_eq(parse_ok(p, "1GiB"), INT64_C(1) << 30);
    parse_bad(p, "4095");
    parse_bad(p, "1025MiB");
    parse_bad(p, "0");

    char range[64];
    zc_param_range(p, range, sizeof(range));
    cr_assert_str_eq(range, "4KiB..1GiB");
}

/* ---- ENUM and BOOL ---- */

Test(config, enum_case_insensitive_and_unknown_rejected)
{
    const zc_param_desc_t *scale = param("ZIPCCL_QSGD_SCALE");
    cr_assert_eq(parse_ok(scale, "max"), 0);
    cr_assert_eq(parse_ok(scale, "MAX"), 0);
    cr_assert_eq(parse_ok(scale, "l2"), 1);
    cr_assert_eq(parse_ok(scale, "L2"), 1);
    cr_assert_eq(parse_ok(scale, " l2 "), 1);
    parse_bad(scale, "l1");
    parse_bad(scale, "ma");
    parse_bad(scale, "maxx");
    parse_bad(scale, "max,l2");
    parse_bad(scale, "");
    parse_bad(scale, "0");

    const zc_param_desc_t *coding = param("ZIPCCL_QSGD_CODING");
    cr_assert_eq(parse_ok(coding, "Fixed"), 0);
    cr_assert_eq(parse_ok(coding, "ELIAS"), 1);
    cr_assert_eq(parse_ok(coding, "auto"), 2);
    parse_bad(coding, "huffman");
}

Test(config, bool_forms)
{
    static const char *const yes[] = {"1",  "y",  "Y",    "yes",  "YES",
                                      "on", "On", "true", "TRUE", " true "};
    static const char *const no[] = {"0",   "n",   "N",     "no",    "No",
                                     "off", "OFF", "false", "False", "\tno\n"};
    static const char *const bad[] = {"", "2", "-1", "yess", "t", "f", "enable", "o", "10"};
    for (size_t i = 0; i < sizeof(yes) / sizeof(yes[0]); i++)
        cr_assert_eq(parse_ok(&bool_param, yes[i]), 1, "\"%s\"", yes[i]);
    for (size_t i = 0; i < sizeof(no) / sizeof(no[0]); i++)
        cr_assert_eq(parse_ok(&bool_param, no[i]), 0, "\"%s\"", no[i]);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        parse_bad(&bool_param, bad[i]);
}

/* ---- format and range ---- */

/* parse(format(v)) == v, and format is canonical: format(parse(format(v))) == format(v). */
static void check_round_trip(const zc_param_desc_t *p, const char *text)
{
    zc_config_t cfg;
    char once[128], twice[128];

    memset(&cfg, 0, sizeof(cfg));
    int64_t v = parse_ok(p, text);
    if (p->kind == ZC_PARAM_KIND_STRING) {
        *(const char **)(void *)((char *)&cfg + p->offset) = text;
        zc_param_format(p, &cfg, once, sizeof(once));
        cr_assert_str_eq(once, text, "%s: a string comes back as it went in", p->name);
        return;
    }
    *field(&cfg, p) = v;
    zc_param_format(p, &cfg, once, sizeof(once));
    int64_t back = parse_ok(p, once);
    cr_assert_eq(back, v, "%s: \"%s\" -> %" PRId64 " -> \"%s\" -> %" PRId64, p->name, text, v, once,
                 back);
    *field(&cfg, p) = back;
    zc_param_format(p, &cfg, twice, sizeof(twice));
    cr_assert_str_eq(twice, once, "%s: format is not canonical", p->name);
}

Test(config, format_parse_round_trip_every_param)
{
    const zc_param_desc_t *extra[] = {&size_param, &bounded_size_param, &bool_param};
    size_t n = zc_param_count() + sizeof(extra) / sizeof(extra[0]);
    int checked = 0;

    for (size_t i = 0; i < n; i++) {
        const zc_param_desc_t *p =
            i < zc_param_count() ? zc_param_at(i) : extra[i - zc_param_count()];
        char text[64];
        check_round_trip(p, p->def);
        switch (p->kind) {
        case ZC_PARAM_KIND_INT_OR_AUTO: check_round_trip(p, "auto"); /* fall through */
        case ZC_PARAM_KIND_INT:
        case ZC_PARAM_KIND_SIZE: {
            const int64_t probes[] = {p->min, p->max, p->min + (p->max - p->min) / 2,
                                      p->min + (p->max - p->min) / 3};
            for (size_t j = 0; j < sizeof(probes) / sizeof(probes[0]); j++) {
                snprintf(text, sizeof(text), "%" PRId64, probes[j]);
                check_round_trip(p, text);
            }
            break;
        }
        case ZC_PARAM_KIND_DECIMAL: {
            const int64_t probes[] = {p->min, p->max, p->min + (p->max - p->min) / 3};
            for (size_t j = 0; j < sizeof(probes) / sizeof(probes[0]); j++) {
                snprintf(text, sizeof(text), "%" PRId64 "e-6", probes[j]);
                check_round_trip(p, text);
            }
            break;
        }
        case ZC_PARAM_KIND_ENUM:
            for (const char *c = p->choices; *c;) {
                size_t len = strcspn(c, ",");
                snprintf(text, sizeof(text), "%.*s", (int)len, c);
                check_round_trip(p, text);
                c += len + (c[len] == ',');
            }
            break;
        case ZC_PARAM_KIND_BOOL:
            check_round_trip(p, "yes");
            check_round_trip(p, "off");
            break;
        case ZC_PARAM_KIND_STRING: check_round_trip(p, "node-7.example:29500"); break;
        }
        checked++;
    }
    cr_assert_eq(checked, (int)n);
}

Test(config, format_known_answers)
{
    zc_config_t cfg;
    char buf[64];
    memset(&cfg, 0, sizeof(cfg));

    static const struct {
        int64_t value;
        const char *text;
    } sizes[] = {{65536, "64KiB"},
                 {65537, "65537B"},
                 {INT64_C(3) << 40, "3TiB"},
                 {INT64_C(1024) << 40, "1024TiB"},
                 {0, "0B"}};
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        cfg.seed = sizes[i].value;
        zc_param_format(&size_param, &cfg, buf, sizeof(buf));
        cr_assert_str_eq(buf, sizes[i].text, "%" PRId64 " bytes", sizes[i].value);
    }
    cfg.seed = 5;
    zc_param_format(&bool_param, &cfg, buf, sizeof(buf));
    cr_assert_str_eq(buf, "1");

    cfg.qsgd_levels = ZC_CONFIG_AUTO;
    zc_param_format(param("ZIPCCL_QSGD_LEVELS"), &cfg, buf, sizeof(buf));
    cr_assert_str_eq(buf, "auto");
    cfg.qsgd_scale = 1;
    zc_param_format(param("ZIPCCL_QSGD_SCALE"), &cfg, buf, sizeof(buf));
    cr_assert_str_eq(buf, "l2");
    cfg.qsgd_scale = 2; /* out of the choices */
    zc_param_format(param("ZIPCCL_QSGD_SCALE"), &cfg, buf, sizeof(buf));
    cr_assert_str_eq(buf, "?");

    /* A short buffer is truncated and terminated, never overrun. */
    char tiny[4];
    memset(tiny, 'z', sizeof(tiny));
    cfg.seed = INT64_MAX;
    zc_param_format(param("ZIPCCL_SEED"), &cfg, tiny, sizeof(tiny));
    cr_assert_str_eq(tiny, "922");
}

Test(config, range_known_answers)
{
    char buf[128];
    zc_param_range(param("ZIPCCL_QSGD_BITS"), buf, sizeof(buf));
    cr_assert_str_eq(buf, "2..17");
    zc_param_range(param("ZIPCCL_QSGD_LEVELS"), buf, sizeof(buf));
    cr_assert_str_eq(buf, "1..65535 or auto");
    zc_param_range(param("ZIPCCL_QSGD_SCALE"), buf, sizeof(buf));
    cr_assert_str_eq(buf, "max|l2");
    zc_param_range(param("ZIPCCL_LOG_LEVEL"), buf, sizeof(buf));
    cr_assert_str_eq(buf, "error|warn|info|debug|trace");
    zc_param_range(&bool_param, buf, sizeof(buf));
    cr_assert_str_eq(buf, "0|1");

    char tiny[5];
    memset(tiny, 'z', sizeof(tiny));
    zc_param_range(param("ZIPCCL_LOG_LEVEL"), tiny, sizeof(tiny));
    cr_assert_str_eq(tiny, "erro");
}

/* ---- zc_config_load ---- */

Test(config, load_empty_gives_defaults)
{
    char *envp[] = {NULL};
    zc_config_t cfg, def;
    memset(&cfg, 0xa5, sizeof(cfg));
    zc_config_defaults(&def);
    cr_assert_eq(zc_config_load(envp, &cfg), ZC_OK);
    cr_assert_eq(memcmp(&cfg, &def, sizeof(cfg)), 0);
    cr_assert_eq(logs.count, 0, "unexpected log: %s", logs.text);
}

Test(config, load_values_over_defaults)
{
    char *envp[] = {"ZIPCCL_QSGD_BITS=8",
                    "ZIPCCL_QSGD_SCALE=L2",
                    "ZIPCCL_QSGD_LEVELS=auto",
                    "ZIPCCL_SEED=12345",
                    "ZIPCCL_LOG_LEVEL=debug",
                    "ZIPCCL_QSGD_BITS=6",
                    NULL};
    zc_config_t cfg, def;
    zc_config_defaults(&def);
    cr_assert_eq(zc_config_load(envp, &cfg), ZC_OK);
    cr_assert_eq(cfg.qsgd_bits, 6, "the later of two settings wins");
    cr_assert_eq(cfg.qsgd_scale, 1);
    cr_assert_eq(cfg.qsgd_levels, ZC_CONFIG_AUTO);
    cr_assert_eq(cfg.seed, 12345);
    cr_assert_eq(cfg.log_level, ZC_LOG_DEBUG);
    cr_assert_eq(cfg.qsgd_bucket, def.qsgd_bucket);
    cr_assert_eq(cfg.qsgd_coding, def.qsgd_coding);
    cr_assert_eq(cfg.cpu, def.cpu);
    cr_assert_eq(logs.count, 0, "unexpected log: %s", logs.text);
}

Test(config, load_bad_value_fails_naming_variable_and_range)
{
    char *envp[] = {"ZIPCCL_SEED=7", "ZIPCCL_QSGD_BITS=99", "ZIPCCL_QSGD_BUCKET=64", NULL};
    zc_config_t cfg, before;
    memset(&cfg, 0xa5, sizeof(cfg));
    before = cfg;

    cr_assert_eq(zc_config_load(envp, &cfg), ZC_ERR_INVALID_CONFIG);
    cr_assert_eq(memcmp(&cfg, &before, sizeof(cfg)), 0, "cfg_p written on failure");
    cr_assert_eq(logs.errors, 1, "logs: %s", logs.text);
    cr_assert_not_null(strstr(logs.text, "ZIPCCL_QSGD_BITS"), "logs: %s", logs.text);
    cr_assert_not_null(strstr(logs.text, "99"), "logs: %s", logs.text);
    cr_assert_not_null(strstr(logs.text, "2..17"), "logs: %s", logs.text);
}

Test(config, load_bad_enum_lists_choices)
{
    char *envp[] = {"ZIPCCL_QSGD_CODING=huffman", NULL};
    zc_config_t cfg, before;
    memset(&cfg, 0x3c, sizeof(cfg));
    before = cfg;
    cr_assert_eq(zc_config_load(envp, &cfg), ZC_ERR_INVALID_CONFIG);
    cr_assert_eq(memcmp(&cfg, &before, sizeof(cfg)), 0);
    cr_assert_eq(logs.errors, 1);
    cr_assert_not_null(strstr(logs.text, "ZIPCCL_QSGD_CODING"), "logs: %s", logs.text);
    cr_assert_not_null(strstr(logs.text, "fixed|elias|auto"), "logs: %s", logs.text);
}

Test(config, load_unknown_name_suggests_closest)
{
    char *envp[] = {"ZIPCCL_QSGD_BIT=4", NULL};
    zc_config_t cfg, def;
    zc_config_defaults(&def);
    cr_assert_eq(zc_config_load(envp, &cfg), ZC_OK, "an unknown name is a warning, not an error");
    cr_assert_eq(memcmp(&cfg, &def, sizeof(cfg)), 0);
    cr_assert_eq(logs.count, 1, "logs: %s", logs.text);
    cr_assert_eq(logs.warnings, 1, "logs: %s", logs.text);
    cr_assert_not_null(strstr(logs.text, "ZIPCCL_QSGD_BIT "), "logs: %s", logs.text);
    cr_assert_not_null(strstr(logs.text, "did you mean ZIPCCL_QSGD_BITS"), "logs: %s", logs.text);
}

Test(config, load_unknown_far_name_has_no_suggestion)
{
    char *envp[] = {"ZIPCCL_XYZZY_FROBNICATE=1", NULL};
    zc_config_t cfg;
    cr_assert_eq(zc_config_load(envp, &cfg), ZC_OK);
    cr_assert_eq(logs.warnings, 1, "logs: %s", logs.text);
    cr_assert_not_null(strstr(logs.text, "ZIPCCL_XYZZY_FROBNICATE"), "logs: %s", logs.text);
    cr_assert_null(strstr(logs.text, "did you mean"), "logs: %s", logs.text);
}

Test(config, load_ignores_other_variables)
{
    char *envp[] = {"PATH=/usr/bin",          "NCCL_DEBUG=INFO", "ZIPCCLX_QSGD_BITS=99",
                    "zipccl_qsgd_bits=99",    "ZIPCCL",          "ZIPCCL_QSGD_BITS",
                    "UCX_ZIPCCL_QSGD_BITS=1", "=ZIPCCL_SEED",    NULL};
    zc_config_t cfg, def;
    zc_config_defaults(&def);
    cr_assert_eq(zc_config_load(envp, &cfg), ZC_OK);
    cr_assert_eq(memcmp(&cfg, &def, sizeof(cfg)), 0);
    cr_assert_eq(logs.count, 0, "unexpected log: %s", logs.text);
}

Test(config, load_value_may_contain_equals_sign)
{
    /* Only the first '=' splits: "ZIPCCL_QSGD_SCALE=max=1" is the value "max=1", invalid. */
    char *envp[] = {"ZIPCCL_QSGD_SCALE=max=1", NULL};
    zc_config_t cfg;
    cr_assert_eq(zc_config_load(envp, &cfg), ZC_ERR_INVALID_CONFIG);
    cr_assert_not_null(strstr(logs.text, "max=1"), "logs: %s", logs.text);
}

/* ---- zc_edit_distance ---- */

Test(config, edit_distance_known_answers)
{
    static const struct {
        const char *a, *b;
        size_t d;
    } cases[] = {
        {"", "", 0},
        {"", "abc", 3},
        {"abc", "", 3},
        {"abc", "abc", 0},
        {"kitten", "sitting", 3},
        {"flaw", "lawn", 2},
        {"intention", "execution", 5},
        {"ZIPCCL_QSGD_BIT", "ZIPCCL_QSGD_BITS", 1},
        {"ZIPCCL_QSGD_BTIS", "ZIPCCL_QSGD_BITS", 2},
        {"zipccl_seed", "ZIPCCL_SEED", 0}, /* case-insensitive */
        {"ZIPCCL_SED", "ZIPCCL_SEED", 1},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        cr_assert_eq(zc_edit_distance(cases[i].a, cases[i].b), cases[i].d, "\"%s\" \"%s\"",
                     cases[i].a, cases[i].b);
        cr_assert_eq(zc_edit_distance(cases[i].b, cases[i].a), cases[i].d,
                     "symmetry: \"%s\" \"%s\"", cases[i].b, cases[i].a);
    }
}

Test(config, edit_distance_long_strings)
{
    /* Longer than the internal row: SIZE_MAX (no suggestion), never an overflow. */
    char a[300], b[300];
    memset(a, 'a', sizeof(a) - 1);
    a[sizeof(a) - 1] = '\0';
    memset(b, 'a', sizeof(b) - 1);
    b[sizeof(b) - 1] = '\0';
    cr_assert_eq(zc_edit_distance("abc", b), SIZE_MAX);
    b[100] = '\0';
    cr_assert_eq(zc_edit_distance(a, b), sizeof(a) - 1 - 100);
}

Test(config, load_unknown_very_long_name)
{
    /* A name longer than the loader's buffers warns and does not overrun. */
    static char entry[512];
    memset(entry, 'Q', sizeof(entry));
    memcpy(entry, "ZIPCCL_", 7);
    memcpy(entry + sizeof(entry) - 3, "=1", 3);
    char *envp[] = {entry, NULL};
    zc_config_t cfg;
    cr_assert_eq(zc_config_load(envp, &cfg), ZC_OK);
    cr_assert_eq(logs.warnings, 1, "logs: %s", logs.text);
}

Test(config_parse, decimal_forms_and_range)
{
    const zc_param_desc_t *p = zc_param_find("ZIPCCL_TOPK_DENSITY");
    int64_t v = -7;
    cr_assert_not_null(p);
    cr_assert_eq(p->kind, ZC_PARAM_KIND_DECIMAL);
    static const struct {
        const char *text;
        int64_t want;
    } good[] = {{"0.01", 10000}, {"1%", 10000},   {" 2.5% ", 25000}, {"1e-3", 1000},
                {"1", 1000000},  {"0.000001", 1}, {".5", 500000}};
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        cr_assert_eq(zc_param_parse(p, good[i].text, &v), ZC_OK, "'%s'", good[i].text);
        cr_assert_eq(v, good[i].want, "'%s' gave %" PRId64, good[i].text, v);
    }
    static const char *const bad[] = {"",     "%",     "abc",       "0.5x", "0",   "1.5",
                                      "-0.1", "1e400", "0.0000001", "nan",  "inf", "101%"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        v = -7;
        cr_assert_eq(zc_param_parse(p, bad[i], &v), ZC_ERR_INVALID_CONFIG, "'%s' accepted", bad[i]);
        cr_assert_eq(v, -7, "output written for '%s'", bad[i]);
    }
}

Test(config_apply, cpu_level_and_log_level)
{
    zc_config_t cfg;
    char *const scalar_env[] = {"ZIPCCL_CPU=scalar", "ZIPCCL_LOG_LEVEL=error", NULL};
    cr_assert_eq(zc_config_load(scalar_env, &cfg), ZC_OK);
    cr_assert_eq(zc_config_apply(&cfg), ZC_OK);
    cr_assert_eq(zc_cpu_level(), ZC_CPU_SCALAR);
    cr_assert_eq(zc_log_level_current, ZC_LOG_ERROR);

    char *const auto_env[] = {"ZIPCCL_CPU=auto", NULL};
    cr_assert_eq(zc_config_load(auto_env, &cfg), ZC_OK);
    cr_assert_eq(zc_config_apply(&cfg), ZC_OK);
    cr_assert_eq(zc_log_level_current, ZC_LOG_WARN);
    cr_assert_eq(zc_cpu_level(), zc_cpu_detect(), "auto lifts an earlier cap");

    if (zc_cpu_detect() < ZC_CPU_AVX512) {
        char *const high_env[] = {"ZIPCCL_CPU=avx512", NULL};
        cr_assert_eq(zc_config_load(high_env, &cfg), ZC_OK);
        cr_assert_eq(zc_config_apply(&cfg), ZC_ERR_INVALID_CONFIG);
    }
}

Test(config_parse, strings)
{
    const zc_param_desc_t *p = zc_param_find("ZIPCCL_ROOT");
    int64_t v = -7;
    cr_assert_not_null(p);
    cr_assert_eq(p->kind, ZC_PARAM_KIND_STRING);
    cr_assert_eq(zc_param_parse(p, "10.0.0.1:29500", &v), ZC_OK);
    cr_assert_eq(v, 14);
    static const char *const bad[] = {" host:1", "host:1 ", "ho\tst:1", "a\nb"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(zc_param_parse(p, bad[i], &v), ZC_ERR_INVALID_CONFIG, "'%s' accepted", bad[i]);

    char *const env[] = {"ZIPCCL_ROOT=[::1]:4000", "ZIPCCL_JOB_ID=train-42", NULL};
    zc_config_t cfg;
    cr_assert_eq(zc_config_load(env, &cfg), ZC_OK);
    cr_assert_str_eq(cfg.root, "[::1]:4000");
    cr_assert_str_eq(cfg.job_id, "train-42");
    char buf[64];
    zc_param_format(p, &cfg, buf, sizeof(buf));
    cr_assert_str_eq(buf, "[::1]:4000");
}

/* ---- agreement across ranks (config_agree.c) ------------------------------------------------ */

Test(config, agreed_variables_fill_the_record)
{
    size_t agreed = 0;
    for (size_t i = 0; i < zc_param_count(); i++)
        agreed += zc_param_at(i)->agreed != 0;
    cr_assert_eq(agreed * ZC_CONFIG_AGREED_VALUE_LEN, zc_config_agreed_size());
    /* what goes on the wire is agreed; what a rank may choose alone is not */
    cr_assert(param("ZIPCCL_CODEC")->agreed);
    cr_assert(param("ZIPCCL_MIN_BYTES")->agreed);
    cr_assert(param("ZIPCCL_QSGD_BITS")->agreed);
    cr_assert_not(param("ZIPCCL_TIMEOUT_S")->agreed);
    cr_assert_not(param("ZIPCCL_RANK")->agreed);
    cr_assert_not(param("ZIPCCL_JOB_SECRET")->agreed, "a secret is never sent, not even hashed");
}

/* Records of @p n ranks with default configs, rank @p odd setting @p name to @p value. */
static char *agreed_records(int n, int odd, const char *name, const char *value)
{
    size_t size = zc_config_agreed_size();
    char *all = calloc((size_t)n, size);
    cr_assert_not_null(all);
    for (int r = 0; r < n; r++) {
        zc_config_t cfg;
        zc_config_defaults(&cfg);
        if (r == odd)
            cr_assert_eq(zc_config_set(&cfg, name, value), ZC_OK);
        zc_config_agreed_record(&cfg, all + (size_t)r * size);
    }
    return all;
}

Test(config, agreed_compare_names_the_first_difference)
{
    char msg[256] = "";
    char *same = agreed_records(4, -1, NULL, NULL);
    cr_assert_eq(zc_config_agreed_compare(same, 4, msg, sizeof(msg)), 0);
    cr_assert_eq(zc_config_agreed_hash(same),
                 zc_config_agreed_hash(same + zc_config_agreed_size()));

    /* a local variable may differ */
    char *local = agreed_records(4, 3, "ZIPCCL_TIMEOUT_S", "7");
    cr_assert_eq(zc_config_agreed_compare(local, 4, msg, sizeof(msg)), 0);

    char *codec = agreed_records(4, 2, "ZIPCCL_CODEC", "none");
    cr_assert_eq(zc_config_agreed_compare(codec, 4, msg, sizeof(msg)), -1);
    cr_assert_str_eq(msg, "ZIPCCL_CODEC differs between ranks: rank 0 has auto, rank 2 has none; "
                          "every rank must set it alike");
    cr_assert_neq(zc_config_agreed_hash(codec),
                  zc_config_agreed_hash(codec + 2 * zc_config_agreed_size()));

    char *bytes = agreed_records(2, 1, "ZIPCCL_MIN_BYTES", "1MiB");
    cr_assert_eq(zc_config_agreed_compare(bytes, 2, msg, sizeof(msg)), -1);
    cr_assert(strstr(msg, "ZIPCCL_MIN_BYTES differs") && strstr(msg, "rank 1 has 1MiB"), "%s", msg);
    free(same);
    free(local);
    free(codec);
    free(bytes);
}
