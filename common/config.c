#include "common/config.h"
#include "common/compiler.h"
#include "common/cpu.h"
#include "common/log.h"

#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

extern char **environ;

static const zc_param_desc_t params[] = {
#define ZC_PARAM_SCOPE_AGREED 1
#define ZC_PARAM_SCOPE_LOCAL 0
#define ZC_PARAM(kind, scope, field, suffix, def, min, max, choices, doc)                          \
    {ZC_PARAM_KIND_##kind,                                                                         \
     ZC_CONFIG_PREFIX suffix,                                                                      \
     offsetof(zc_config_t, field),                                                                 \
     def,                                                                                          \
     min,                                                                                          \
     max,                                                                                          \
     choices,                                                                                      \
     ZC_PARAM_SCOPE_##scope,                                                                       \
     doc},
#include "common/params.def"
#undef ZC_PARAM
};

size_t zc_param_count(void)
{
    return ZC_ARRAY_SIZE(params);
}

const zc_param_desc_t *zc_param_at(size_t index)
{
    return index < ZC_ARRAY_SIZE(params) ? &params[index] : NULL;
}

const zc_param_desc_t *zc_param_find(const char *name)
{
    for (size_t i = 0; i < ZC_ARRAY_SIZE(params); i++)
        if (strcmp(params[i].name, name) == 0)
            return &params[i];
    return NULL;
}

const char *zc_param_kind_name(zc_param_kind_t kind)
{
    switch (kind) {
    case ZC_PARAM_KIND_INT: return "integer";
    case ZC_PARAM_KIND_INT_OR_AUTO: return "integer or auto";
    case ZC_PARAM_KIND_SIZE: return "size";
    case ZC_PARAM_KIND_DECIMAL: return "decimal";
    case ZC_PARAM_KIND_ENUM: return "enum";
    case ZC_PARAM_KIND_BOOL: return "boolean";
    case ZC_PARAM_KIND_STRING: return "string";
    }
    return "?";
}

static int64_t *param_field(const zc_param_desc_t *param, zc_config_t *cfg)
{
    return (int64_t *)((char *)cfg + param->offset);
}

static const char **param_string(const zc_param_desc_t *param, zc_config_t *cfg)
{
    return (const char **)(void *)((char *)cfg + param->offset);
}

/* Stores @p value (already checked) for @p param: STRING keeps the pointer. */
static zc_status_t param_store(const zc_param_desc_t *param, const char *value, zc_config_t *cfg)
{
    if (param->kind == ZC_PARAM_KIND_STRING) {
        int64_t len;
        ZC_CHECK(zc_param_parse(param, value, &len));
        *param_string(param, cfg) = value;
        return ZC_OK;
    }
    return zc_param_parse(param, value, param_field(param, cfg));
}

static const char *skip_space(const char *s)
{
    while (isspace((unsigned char)*s))
        s++;
    return s;
}

static int rest_is_space(const char *s)
{
    return *skip_space(s) == '\0';
}

/* Index of @p word in the comma-separated @p choices, case-insensitive; -1 if absent. */
static int64_t enum_index(const char *choices, const char *word, size_t word_len)
{
    int64_t index = 0;
    for (const char *c = choices; *c; index++) {
        size_t len = strcspn(c, ",");
        if (len == word_len && strncasecmp(c, word, len) == 0)
            return index;
        c += len;
        if (*c == ',')
            c++;
    }
    return -1;
}

/*
 * Decimal, or hexadecimal after "0x". Not strtoll's base 0: its octal reading of a
 * leading zero would turn ZIPCCL_QSGD_BUCKET=0512 into 330 and reject "08".
 */
static int parse_int(const char *value, int64_t *v_p, const char **end_p)
{
    const char *digits = value + (*value == '+' || *value == '-');
    int base = digits[0] == '0' && (digits[1] == 'x' || digits[1] == 'X') ? 16 : 10;
    char *end;
    errno = 0;
    long long v = strtoll(value, &end, base);
    if (end == value || errno == ERANGE)
        return -1;
    *v_p = v;
    *end_p = end;
    return 0;
}

static int parse_size(const char *value, int64_t *v_p)
{
    static const struct {
        const char *suffix;
        int shift;
    } units[] = {
        {"", 0},     {"b", 0},  {"k", 10},  {"kb", 10},  {"kib", 10}, {"m", 20},  {"mb", 20},
        {"mib", 20}, {"g", 30}, {"gb", 30}, {"gib", 30}, {"t", 40},   {"tb", 40}, {"tib", 40},
    };
    const char *end;
    int64_t v;

    if (parse_int(value, &v, &end) < 0 || v < 0)
        return -1;
    end = skip_space(end);
    size_t len = strlen(end);
    while (len > 0 && isspace((unsigned char)end[len - 1]))
        len--;
    for (size_t i = 0; i < ZC_ARRAY_SIZE(units); i++) {
        if (strlen(units[i].suffix) == len && strncasecmp(units[i].suffix, end, len) == 0) {
            if (v > (INT64_MAX >> units[i].shift))
                return -1;
            *v_p = v << units[i].shift;
            return 0;
        }
    }
    return -1;
}

/*
 * A decimal number ("0.01", "1e-3", "5%") in millionths, rounded to nearest.
 * strtod is locale-dependent; zipccl never calls setlocale, and programs that do
 * keep "C" numerics in practice.
 */
static int parse_decimal(const char *value, size_t len, int64_t *v_p)
{
    char buf[64], *end;

    if (len == 0 || len >= sizeof(buf))
        return -1;
    memcpy(buf, value, len);
    buf[len] = '\0';
    double scale = 1e6;
    if (buf[len - 1] == '%') {
        buf[--len] = '\0';
        scale = 1e4;
    }
    errno = 0;
    double d = strtod(buf, &end);
    if (end == buf || *skip_space(end) != '\0' || errno == ERANGE || !(fabs(d) < 9e12))
        return -1;
    *v_p = llround(d * scale);
    return 0;
}

zc_status_t zc_param_parse(const zc_param_desc_t *param, const char *value, int64_t *value_p)
{
    const char *end;
    int64_t v;

    if (param->kind == ZC_PARAM_KIND_STRING) {
        /* taken as it is: no control characters, no surrounding spaces to guess about */
        v = (int64_t)strlen(value);
        for (const char *c = value; *c; c++)
            if (iscntrl((unsigned char)*c))
                return ZC_ERR_INVALID_CONFIG;
        if (v > 0 && (isspace((unsigned char)value[0]) || isspace((unsigned char)value[v - 1])))
            return ZC_ERR_INVALID_CONFIG;
        if (v < param->min || v > param->max)
            return ZC_ERR_INVALID_CONFIG;
        *value_p = v;
        return ZC_OK;
    }
    value = skip_space(value);
    size_t len = strlen(value);
    while (len > 0 && isspace((unsigned char)value[len - 1]))
        len--;

    switch (param->kind) {
    case ZC_PARAM_KIND_INT_OR_AUTO:
        if (len == 4 && strncasecmp(value, "auto", 4) == 0) {
            *value_p = ZC_CONFIG_AUTO;
            return ZC_OK;
        }
        /* fall through */
    case ZC_PARAM_KIND_INT:
        if (parse_int(value, &v, &end) < 0 || !rest_is_space(end))
            return ZC_ERR_INVALID_CONFIG;
        break;
    case ZC_PARAM_KIND_SIZE:
        if (parse_size(value, &v) < 0)
            return ZC_ERR_INVALID_CONFIG;
        break;
    case ZC_PARAM_KIND_DECIMAL:
        if (parse_decimal(value, len, &v) < 0)
            return ZC_ERR_INVALID_CONFIG;
        break;
    case ZC_PARAM_KIND_ENUM:
        v = enum_index(param->choices, value, len);
        if (v < 0)
            return ZC_ERR_INVALID_CONFIG;
        *value_p = v;
        return ZC_OK;
    case ZC_PARAM_KIND_BOOL:
        v = enum_index("0,n,no,off,false", value, len);
        if (v >= 0) {
            *value_p = 0;
            return ZC_OK;
        }
        v = enum_index("1,y,yes,on,true", value, len);
        if (v < 0)
            return ZC_ERR_INVALID_CONFIG;
        *value_p = 1;
        return ZC_OK;
    default: return ZC_ERR_INTERNAL;
    }
    if (v < param->min || v > param->max)
        return ZC_ERR_INVALID_CONFIG;
    *value_p = v;
    return ZC_OK;
}

static void format_size(int64_t v, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    size_t u = 0;
    while (u + 1 < ZC_ARRAY_SIZE(units) && v != 0 && (v & 1023) == 0) {
        v >>= 10;
        u++;
    }
    snprintf(buf, len, "%" PRId64 "%s", v, units[u]);
}

/* Millionths as the shortest decimal: 10000 -> "0.01". */
static void format_decimal(int64_t v, char *buf, size_t len)
{
    int64_t whole = v / 1000000, frac = llabs(v % 1000000);
    int digits = 6;
    while (digits > 0 && frac % 10 == 0) {
        frac /= 10;
        digits--;
    }
    if (digits == 0)
        snprintf(buf, len, "%" PRId64, whole);
    else
        snprintf(buf, len, "%s%" PRId64 ".%0*" PRId64, v < 0 && whole == 0 ? "-" : "", whole,
                 digits, frac);
}

static void enum_name(const char *choices, int64_t index, char *buf, size_t len)
{
    const char *c = choices;
    for (int64_t i = 0; i < index && c; i++) {
        c = strchr(c, ',');
        if (c)
            c++;
    }
    if (!c || !*c) {
        snprintf(buf, len, "?");
        return;
    }
    snprintf(buf, len, "%.*s", (int)strcspn(c, ","), c);
}

int zc_param_is_secret(const zc_param_desc_t *param)
{
    return param->kind == ZC_PARAM_KIND_STRING && param->choices &&
           strcmp(param->choices, "secret") == 0;
}

void zc_param_format(const zc_param_desc_t *param, const zc_config_t *cfg, char *buf, size_t len)
{
    if (param->kind == ZC_PARAM_KIND_STRING) {
        snprintf(buf, len, "%s", *param_string(param, (zc_config_t *)cfg));
        return;
    }
    int64_t v = *param_field(param, (zc_config_t *)cfg);

    switch (param->kind) {
    case ZC_PARAM_KIND_INT_OR_AUTO:
        if (v == ZC_CONFIG_AUTO) {
            snprintf(buf, len, "auto");
            break;
        }
        /* fall through */
    case ZC_PARAM_KIND_INT: snprintf(buf, len, "%" PRId64, v); break;
    case ZC_PARAM_KIND_SIZE: format_size(v, buf, len); break;
    case ZC_PARAM_KIND_DECIMAL: format_decimal(v, buf, len); break;
    case ZC_PARAM_KIND_ENUM: enum_name(param->choices, v, buf, len); break;
    case ZC_PARAM_KIND_BOOL: snprintf(buf, len, "%d", v ? 1 : 0); break;
    case ZC_PARAM_KIND_STRING: break; /* handled above */
    }
}

void zc_param_range(const zc_param_desc_t *param, char *buf, size_t len)
{
    char lo[32], hi[32];

    if (len == 0)
        return;
    switch (param->kind) {
    case ZC_PARAM_KIND_INT:
    case ZC_PARAM_KIND_INT_OR_AUTO:
        snprintf(buf, len, "%" PRId64 "..%" PRId64 "%s", param->min, param->max,
                 param->kind == ZC_PARAM_KIND_INT_OR_AUTO ? " or auto" : "");
        break;
    case ZC_PARAM_KIND_SIZE:
        format_size(param->min, lo, sizeof(lo));
        format_size(param->max, hi, sizeof(hi));
        snprintf(buf, len, "%s..%s", lo, hi);
        break;
    case ZC_PARAM_KIND_DECIMAL:
        format_decimal(param->min, lo, sizeof(lo));
        format_decimal(param->max, hi, sizeof(hi));
        snprintf(buf, len, "%s..%s", lo, hi);
        break;
    case ZC_PARAM_KIND_ENUM: {
        size_t i = 0;
        for (const char *c = param->choices; *c && c[1] && i + 1 < len; c++) /* not the last ',' */
            buf[i++] = *c == ',' ? '|' : *c;
        buf[i] = '\0';
        break;
    }
    case ZC_PARAM_KIND_BOOL: snprintf(buf, len, "0|1"); break;
    case ZC_PARAM_KIND_STRING:
        snprintf(buf, len, "%" PRId64 "..%" PRId64 " characters", param->min, param->max);
        break;
    }
}

void zc_config_defaults(zc_config_t *cfg)
{
    for (size_t i = 0; i < ZC_ARRAY_SIZE(params); i++) {
        if (param_store(&params[i], params[i].def, cfg) != ZC_OK && /* the tests reject such */
            params[i].kind != ZC_PARAM_KIND_STRING)                 /* a table */
            *param_field(&params[i], cfg) = 0;
    }
}

size_t zc_edit_distance(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    size_t row[128];

    if (lb + 1 > ZC_ARRAY_SIZE(row))
        return SIZE_MAX;
    for (size_t j = 0; j <= lb; j++)
        row[j] = j;
    for (size_t i = 1; i <= la; i++) {
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= lb; j++) {
            size_t up = row[j];
            size_t cost = toupper((unsigned char)a[i - 1]) != toupper((unsigned char)b[j - 1]);
            row[j] = ZC_MIN(ZC_MIN(row[j] + 1, row[j - 1] + 1), diag + cost);
            diag = up;
        }
    }
    return row[lb];
}

/* The known name closest to @p name, if close enough to be a typo; else NULL. */
static const char *closest_name(const char *name)
{
    const char *best = NULL;
    size_t best_dist = SIZE_MAX;

    for (size_t i = 0; i < ZC_ARRAY_SIZE(params); i++) {
        size_t d = zc_edit_distance(name, params[i].name);
        if (d < best_dist) {
            best_dist = d;
            best = params[i].name;
        }
    }
    return best && best_dist <= ZC_MAX(strlen(name) / 3, 2) ? best : NULL;
}

static void warn_unknown(const char *name, size_t name_len)
{
    char buf[128];
    snprintf(buf, sizeof(buf), "%.*s", (int)name_len, name);
    const char *best = closest_name(buf);
    if (best)
        ZC_WARN("unknown variable %s ignored; did you mean %s?", buf, best);
    else
        ZC_WARN("unknown variable %s ignored (zipccl-info lists the known ones)", buf);
}

/* The parameter named @p name (@p name_len characters, not necessarily terminated), or NULL. */
static const zc_param_desc_t *param_lookup(const char *name, size_t name_len)
{
    for (size_t i = 0; i < ZC_ARRAY_SIZE(params); i++)
        if (strlen(params[i].name) == name_len && strncmp(params[i].name, name, name_len) == 0)
            return &params[i];
    return NULL;
}

/* Stores @p value for @p param, or logs why it is bad. STRING keeps the pointer. */
static zc_status_t store_logged(const zc_param_desc_t *param, const char *value, zc_config_t *cfg)
{
    if (param_store(param, value, cfg) == ZC_OK)
        return ZC_OK;
    char range[256];
    zc_param_range(param, range, sizeof(range));
    if (zc_param_is_secret(param))
        ZC_ERROR("invalid %s (a secret: its value is not shown): expected %s %s", param->name,
                 zc_param_kind_name(param->kind), range);
    else
        ZC_ERROR("invalid %s=\"%s\": expected %s %s", param->name, value,
                 zc_param_kind_name(param->kind), range);
    return ZC_ERR_INVALID_CONFIG;
}

zc_status_t zc_config_load(char *const *envp, zc_config_t *cfg_p)
{
    zc_config_t cfg;
    const size_t prefix_len = strlen(ZC_CONFIG_PREFIX);

    zc_config_defaults(&cfg);
    if (!envp)
        envp = environ;
    for (; envp && *envp; envp++) {
        const char *entry = *envp;
        const char *eq = strchr(entry, '=');
        if (!eq || strncmp(entry, ZC_CONFIG_PREFIX, prefix_len) != 0)
            continue;
        const zc_param_desc_t *param = param_lookup(entry, (size_t)(eq - entry));
        if (!param) {
            warn_unknown(entry, (size_t)(eq - entry));
            continue;
        }
        ZC_CHECK(store_logged(param, eq + 1, &cfg));
    }
    *cfg_p = cfg;
    return ZC_OK;
}

zc_status_t zc_config_set(zc_config_t *cfg, const char *name, const char *value)
{
    if (!cfg || !name || !value)
        return ZC_ERR_INVALID_ARG;
    const zc_param_desc_t *param = param_lookup(name, strlen(name));
    if (!param) {
        const char *best = closest_name(name);
        if (best)
            ZC_ERROR("unknown variable %s; did you mean %s?", name, best);
        else
            ZC_ERROR("unknown variable %s (zipccl-info lists the known ones)", name);
        return ZC_ERR_INVALID_CONFIG;
    }
    return store_logged(param, value, cfg);
}

zc_status_t zc_config_own_strings(zc_config_t *cfg, char **block_p)
{
    size_t total = 0;
    for (size_t i = 0; i < ZC_ARRAY_SIZE(params); i++)
        if (params[i].kind == ZC_PARAM_KIND_STRING)
            total += strlen(*param_string(&params[i], cfg)) + 1;
    char *block = malloc(total), *at = block;
    if (!block)
        return ZC_ERR_NO_MEMORY;
    for (size_t i = 0; i < ZC_ARRAY_SIZE(params); i++) {
        if (params[i].kind != ZC_PARAM_KIND_STRING)
            continue;
        const char **field = param_string(&params[i], cfg);
        size_t len = strlen(*field) + 1;
        memcpy(at, *field, len);
        *field = at;
        at += len;
    }
    *block_p = block;
    return ZC_OK;
}

zc_status_t zc_config_apply(const zc_config_t *cfg)
{
    _Static_assert((int)ZC_CFG_LOG_LEVEL_ERROR == (int)ZC_LOG_ERROR &&
                       (int)ZC_CFG_LOG_LEVEL_TRACE == (int)ZC_LOG_TRACE,
                   "ZIPCCL_LOG_LEVEL's choices are zc_log_level_t's");
    static const zc_cpu_level_t cpu_levels[] = {
        [ZC_CFG_CPU_SCALAR] = ZC_CPU_SCALAR,
        [ZC_CFG_CPU_AVX2] = ZC_CPU_AVX2,
        [ZC_CFG_CPU_AVX512] = ZC_CPU_AVX512,
    };
    zc_log_set_level((zc_log_level_t)cfg->log_level);
    zc_cpu_level_t want = cfg->cpu == ZC_CFG_CPU_AUTO ? zc_cpu_detect() : cpu_levels[cfg->cpu];
    if (zc_cpu_set_level(want) != ZC_OK) {
        ZC_ERROR("ZIPCCL_CPU=%s, but this processor supports at most %s", zc_cpu_level_name(want),
                 zc_cpu_level_name(zc_cpu_detect()));
        return ZC_ERR_INVALID_CONFIG;
    }
    return ZC_OK;
}
