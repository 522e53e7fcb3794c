/*
 * The configuration object: every ZIPCCL_* variable, read once into an
 * immutable zc_config_t that is passed down explicitly. Tests build configs
 * from their own "NAME=VALUE" arrays without touching the environment.
 */
#ifndef ZC_COMMON_CONFIG_H
#define ZC_COMMON_CONFIG_H

#include "common/choices.h"

#include <zipccl/zipccl_status.h>

#include <stddef.h>
#include <stdint.h>

#define ZC_CONFIG_PREFIX "ZIPCCL_"
#define ZC_CONFIG_AUTO INT64_C(-1)    /* stored for "auto" by INT_OR_AUTO */
#define ZC_CONFIG_DECIMAL_ONE 1000000 /* a DECIMAL of 1.0 */

typedef enum zc_param_kind {
    ZC_PARAM_KIND_INT,
    ZC_PARAM_KIND_INT_OR_AUTO,
    ZC_PARAM_KIND_SIZE,
    ZC_PARAM_KIND_DECIMAL, /* a decimal number (or percentage), stored in millionths */
    ZC_PARAM_KIND_ENUM,
    ZC_PARAM_KIND_BOOL,
    ZC_PARAM_KIND_STRING, /* text of min..max characters, no control characters */
} zc_param_kind_t;

/* The C type of each kind's field in zc_config_t. */
#define ZC_PARAM_CTYPE_INT int64_t
#define ZC_PARAM_CTYPE_INT_OR_AUTO int64_t
#define ZC_PARAM_CTYPE_SIZE int64_t
#define ZC_PARAM_CTYPE_DECIMAL int64_t
#define ZC_PARAM_CTYPE_ENUM int64_t
#define ZC_PARAM_CTYPE_BOOL int64_t
/* points into the environment (or the envp given to zc_config_load) or at the default */
#define ZC_PARAM_CTYPE_STRING const char *

typedef struct zc_config {
#define ZC_PARAM(kind, scope, field, suffix, def, min, max, choices, doc)                          \
    ZC_PARAM_CTYPE_##kind field;
#include "common/params.def"
#undef ZC_PARAM
} zc_config_t;

typedef struct zc_param_desc {
    zc_param_kind_t kind;
    const char *name; /* full variable name, "ZIPCCL_SEED" */
    size_t offset;    /* of the int64_t field in zc_config_t */
    const char *def;  /* default, as text */
    int64_t min, max;
    const char *choices; /* ENUM: comma-separated names, with a trailing comma */
    int agreed;          /* scope AGREED: every rank must set it alike */
    const char *doc;
} zc_param_desc_t;

/* The table, in params.def order. */
size_t zc_param_count(void);
const zc_param_desc_t *zc_param_at(size_t index);
const zc_param_desc_t *zc_param_find(const char *name);
const char *zc_param_kind_name(zc_param_kind_t kind);

/* Fills @p cfg with every default. Cannot fail: the defaults are checked by the tests. */
void zc_config_defaults(zc_config_t *cfg);

/*
 * Parses @p envp ("NAME=VALUE" strings, NULL-terminated; NULL means the process
 * environment) over the defaults. A bad value logs an error naming the variable
 * and the accepted values, and returns ZC_ERR_INVALID_CONFIG with @p cfg_p
 * untouched. An unknown ZIPCCL_* name logs a warning with the closest known name.
 */
zc_status_t zc_config_load(char *const *envp, zc_config_t *cfg_p);

/*
 * Sets the variable @p name ("ZIPCCL_CODEC") of @p cfg to @p value, parsed as
 * zc_config_load does. A STRING keeps the pointer @p value (see
 * zc_config_own_strings). An unknown name or a bad value logs an error naming
 * the variable (and the closest name, or the accepted values) and returns
 * ZC_ERR_INVALID_CONFIG with @p cfg untouched.
 */
zc_status_t zc_config_set(zc_config_t *cfg, const char *name, const char *value);

/*
 * Copies every STRING value of @p cfg into one allocation, returned in
 * *@p block_p for the caller to free after the last use of @p cfg, and points
 * @p cfg at the copies: the configuration then outlives the environment or
 * the buffers it was read from.
 */
zc_status_t zc_config_own_strings(zc_config_t *cfg, char **block_p);

/*
 * Applies the process-wide settings of @p cfg: the log level (ZIPCCL_LOG_LEVEL)
 * and the CPU level kernels may use (ZIPCCL_CPU). A CPU level this processor
 * lacks logs an error and returns ZC_ERR_INVALID_CONFIG.
 */
zc_status_t zc_config_apply(const zc_config_t *cfg);

/*
 * Parses one @p value for @p param into @p value_p; ZC_ERR_INVALID_CONFIG (not
 * logged) if bad. For a STRING param it only checks @p value, and writes its length.
 */
zc_status_t zc_param_parse(const zc_param_desc_t *param, const char *value, int64_t *value_p);

/*
 * Whether @p param holds a secret (a STRING whose choices column says "secret"):
 * its value is never printed; zipccl-info shows "set" or "unset" instead.
 */
int zc_param_is_secret(const zc_param_desc_t *param);

/*
 * Writes the value of @p param in @p cfg as text, the inverse of zc_param_parse
 * (a secret's too: callers that print check zc_param_is_secret).
 */
void zc_param_format(const zc_param_desc_t *param, const zc_config_t *cfg, char *buf, size_t len);

/* Writes the accepted values of @p param ("2..17", "max|l2", "0B..1TiB") into @p buf. */
void zc_param_range(const zc_param_desc_t *param, char *buf, size_t len);

/*
 * Agreement across ranks (config_agree.c). Some variables decide what goes on
 * the wire or which path a call takes (the codec and its parameters, the
 * algorithm, the size thresholds, the frontends' switches): ranks that differ
 * there would hang or exchange what the others cannot read, so communicators
 * compare them at creation and fail on every rank, naming the first variable
 * that differs.
 *
 * Which variables are agreed is params.def's scope column (zc_param_desc_t's
 * agreed).
 * zc_config_agreed_record writes the agreed values of @p cfg as text into
 * @p record (zc_config_agreed_size() bytes, ZC_CONFIG_AGREED_VALUE_LEN per
 * variable, zero-padded: records compare bytewise); zc_config_agreed_hash is
 * a 64-bit FNV-1a of one. zc_config_agreed_compare takes @p size ranks'
 * records (rank r's at r * zc_config_agreed_size()) and returns 0 when they
 * agree, else -1 with "ZIPCCL_CODEC differs between ranks: rank 0 has qsgd,
 * rank 2 has none; ..." in @p msg (the same text on every rank that compares
 * the same records).
 */
#define ZC_CONFIG_AGREED_VALUE_LEN 32
size_t zc_config_agreed_size(void);
void zc_config_agreed_record(const zc_config_t *cfg, void *record);
uint64_t zc_config_agreed_hash(const void *record);
int zc_config_agreed_compare(const void *records, int size, char *msg, size_t len);

/* Edit distance between two strings, for "did you mean" suggestions. */
size_t zc_edit_distance(const char *a, const char *b);

#endif
