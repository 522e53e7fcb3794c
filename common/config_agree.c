/*
 * The comparison of the ranks' values of the variables every rank must set
 * alike, those of scope AGREED in common/params.def (config.h: zc_config_agreed_*).
 */
#include "common/compiler.h"
#include "common/config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/* The agreed variables (params.def's scope AGREED), in table order: the record's slots. */
static size_t agreed_count(void)
{
    size_t n = 0;
    for (size_t i = 0; i < zc_param_count(); i++)
        n += zc_param_at(i)->agreed != 0;
    return n;
}

size_t zc_config_agreed_size(void)
{
    return agreed_count() * ZC_CONFIG_AGREED_VALUE_LEN;
}

void zc_config_agreed_record(const zc_config_t *cfg, void *record)
{
    char *slot = record;
    memset(record, 0, zc_config_agreed_size());
    for (size_t i = 0; i < zc_param_count(); i++) {
        const zc_param_desc_t *param = zc_param_at(i);
        if (param->agreed) {
            zc_param_format(param, cfg, slot, ZC_CONFIG_AGREED_VALUE_LEN);
            slot += ZC_CONFIG_AGREED_VALUE_LEN;
        }
    }
}

uint64_t zc_config_agreed_hash(const void *record)
{
    const uint8_t *p = record;
    uint64_t h = UINT64_C(0xcbf29ce484222325);
    for (size_t i = 0; i < zc_config_agreed_size(); i++)
        h = (h ^ p[i]) * UINT64_C(0x100000001b3);
    return h;
}

int zc_config_agreed_compare(const void *records, int size, char *msg, size_t len)
{
    const char *all = records;
    const size_t stride = zc_config_agreed_size();

    size_t slot = 0;
    for (size_t i = 0; i < zc_param_count(); i++) {
        const zc_param_desc_t *param = zc_param_at(i);
        if (!param->agreed)
            continue;
        const char *first = all + slot * ZC_CONFIG_AGREED_VALUE_LEN;
        for (int r = 1; r < size; r++) {
            const char *other = all + (size_t)r * stride + slot * ZC_CONFIG_AGREED_VALUE_LEN;
            if (memcmp(first, other, ZC_CONFIG_AGREED_VALUE_LEN) == 0)
                continue;
            snprintf(msg, len,
                     "%s differs between ranks: rank 0 has %.*s, rank %d has %.*s; every rank "
                     "must set it alike",
                     param->name, ZC_CONFIG_AGREED_VALUE_LEN, first, r, ZC_CONFIG_AGREED_VALUE_LEN,
                     other);
            return -1;
        }
        slot++;
    }
    return 0;
}
