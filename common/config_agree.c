/*
 * Which ZIPCCL_* variables every rank must set alike, and the comparison of
 * the ranks' values (config.h: zc_config_agreed_*).
 */
#include "common/compiler.h"
#include "common/config.h"

#include <stdint.h>
#include <stdio.h>
#include <string.h>

/*
 * Variables that decide what goes on the wire or which path a call takes: a
 * rank with another value would send what the others cannot read, or wait for
 * a message they never send. Every variable of params.def is in exactly one of
 * these two lists (the unit test checks it), so a new one must be classified.
 */
static const char *const agreed_names[] = {
    "ZIPCCL_QSGD_BITS",
    "ZIPCCL_QSGD_LEVELS",
    "ZIPCCL_QSGD_BUCKET",
    "ZIPCCL_QSGD_SCALE",
    "ZIPCCL_QSGD_CODING",
    "ZIPCCL_TOPK_DENSITY",
    "ZIPCCL_TOPK_VALUES",
    "ZIPCCL_GRADIVEQ_SLICE",
    "ZIPCCL_GRADIVEQ_DIM",
    "ZIPCCL_GRADIVEQ_ENERGY",
    "ZIPCCL_GRADIVEQ_SAMPLES",
    "ZIPCCL_GRADIVEQ_REFRESH",
    "ZIPCCL_UCX_PEER_ERRORS",
    "ZIPCCL_CODEC",
    "ZIPCCL_ALGO",
    "ZIPCCL_MIN_BYTES",
    "ZIPCCL_STATE_MAX_BYTES",
    "ZIPCCL_CHUNK_BYTES",
    "ZIPCCL_COLLNET_CODEC",
    "ZIPCCL_COLLNET_QSGD_BITS",
    "ZIPCCL_PRELOAD_MPI",
    "ZIPCCL_PRELOAD_NCCL",
};

/*
 * Variables that may differ: they change this rank's logging, speed, deadline
 * or identity, not the messages. The seed and error feedback change the values
 * a rank contributes, not their format; rank, size and job id are the
 * bootstrap's to check (the secret too: its proof). (STATE_MAX_BYTES is agreed: a GradiVeQ basis
 * evicted on one rank only would no longer be the one the others project on.)
 */
static const char *const local_names[] = {
    "ZIPCCL_LOG_LEVEL",       "ZIPCCL_SEED",       "ZIPCCL_CPU",        "ZIPCCL_QSGD_EF",
    "ZIPCCL_GRADIVEQ_EF",     "ZIPCCL_RANK",       "ZIPCCL_SIZE",       "ZIPCCL_ROOT",
    "ZIPCCL_JOB_ID",          "ZIPCCL_JOB_SECRET", "ZIPCCL_TIMEOUT_S",  "ZIPCCL_TOPO_XML",
    "ZIPCCL_PROGRESS_THREAD", "ZIPCCL_STATS",      "ZIPCCL_STATS_FILE", "ZIPCCL_NET_IFNAME",
};

int zc_param_agreed(const zc_param_desc_t *param)
{
    for (size_t i = 0; i < ZC_ARRAY_SIZE(agreed_names); i++)
        if (strcmp(param->name, agreed_names[i]) == 0)
            return 1;
    for (size_t i = 0; i < ZC_ARRAY_SIZE(local_names); i++)
        if (strcmp(param->name, local_names[i]) == 0)
            return 0;
    return -1;
}

size_t zc_config_agreed_size(void)
{
    return ZC_ARRAY_SIZE(agreed_names) * ZC_CONFIG_AGREED_VALUE_LEN;
}

void zc_config_agreed_record(const zc_config_t *cfg, void *record)
{
    char *slot = record;
    memset(record, 0, zc_config_agreed_size());
    for (size_t i = 0; i < ZC_ARRAY_SIZE(agreed_names); i++, slot += ZC_CONFIG_AGREED_VALUE_LEN) {
        const zc_param_desc_t *param = zc_param_find(agreed_names[i]);
        if (param)
            zc_param_format(param, cfg, slot, ZC_CONFIG_AGREED_VALUE_LEN);
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

    for (size_t i = 0; i < ZC_ARRAY_SIZE(agreed_names); i++) {
        const char *first = all + i * ZC_CONFIG_AGREED_VALUE_LEN;
        for (int r = 1; r < size; r++) {
            const char *other = all + (size_t)r * stride + i * ZC_CONFIG_AGREED_VALUE_LEN;
            if (memcmp(first, other, ZC_CONFIG_AGREED_VALUE_LEN) == 0)
                continue;
            snprintf(msg, len,
                     "%s differs between ranks: rank 0 has %.*s, rank %d has %.*s; every rank "
                     "must set it alike",
                     agreed_names[i], ZC_CONFIG_AGREED_VALUE_LEN, first, r,
                     ZC_CONFIG_AGREED_VALUE_LEN, other);
            return -1;
        }
    }
    return 0;
}
