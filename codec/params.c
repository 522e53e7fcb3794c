/* Codec parameters from the configuration table (ZIPCCL_QSGD_* and friends). */
#include "codec/codec.h"
#include "common/config.h"

zc_status_t zc_codec_params_from_config(const zc_config_t *cfg, zc_codec_id_t codec,
                                        zc_codec_params_t *params_p)
{
    _Static_assert((int)ZC_CFG_QSGD_SCALE_MAX == (int)ZC_QSGD_SCALE_MAX &&
                       (int)ZC_CFG_QSGD_SCALE_L2 == (int)ZC_QSGD_SCALE_L2 &&
                       (int)ZC_CFG_QSGD_CODING_FIXED == (int)ZC_QSGD_CODING_FIXED &&
                       (int)ZC_CFG_QSGD_CODING_ELIAS == (int)ZC_QSGD_CODING_ELIAS &&
                       (int)ZC_CFG_QSGD_CODING_AUTO == (int)ZC_QSGD_CODING_AUTO &&
                       (int)ZC_CFG_TOPK_VALUES_F32 == (int)ZC_TOPK_VALUES_F32 &&
                       (int)ZC_CFG_TOPK_VALUES_F16 == (int)ZC_TOPK_VALUES_F16,
                   "the QSGD and top-k choices of common/choices.h are zipccl_codec.h's enums");
    zc_codec_params_t p;

    ZC_CHECK(zc_codec_params_default(codec, &p));
    p.qsgd.levels = cfg->qsgd_levels == ZC_CONFIG_AUTO
                        ? zc_qsgd_levels_for_bits((unsigned)cfg->qsgd_bits)
                        : (uint32_t)cfg->qsgd_levels;
    p.qsgd.bucket = (uint32_t)cfg->qsgd_bucket;
    p.qsgd.scale = (zc_qsgd_scale_t)cfg->qsgd_scale;
    p.qsgd.coding = (zc_qsgd_coding_t)cfg->qsgd_coding;
    p.qsgd.error_feedback = (int)cfg->qsgd_ef;
    p.topk.density = (double)cfg->topk_density / ZC_CONFIG_DECIMAL_ONE;
    p.topk.values = (zc_topk_values_t)cfg->topk_values;
    p.gradiveq.slice = (uint32_t)cfg->gradiveq_slice;
    p.gradiveq.dim = cfg->gradiveq_dim == ZC_CONFIG_AUTO ? 0 : (uint32_t)cfg->gradiveq_dim;
    p.gradiveq.energy = (double)cfg->gradiveq_energy / ZC_CONFIG_DECIMAL_ONE;
    p.gradiveq.samples = (uint32_t)cfg->gradiveq_samples;
    p.gradiveq.refresh = (uint32_t)cfg->gradiveq_refresh;
    p.gradiveq.error_feedback = (int)cfg->gradiveq_ef;
    ZC_CHECK(zc_codec_params_check(&p));
    *params_p = p;
    return ZC_OK;
}
