/* Codec parameters from the configuration table: each codec reads its own ZIPCCL_* variables. */
#include "codec/codec.h"
#include "common/config.h"

zc_status_t zc_codec_params_from_config(const zc_config_t *cfg, zc_codec_id_t codec,
                                        zc_codec_params_t *params_p)
{
    zc_codec_params_t p;

    ZC_CHECK(zc_codec_params_default(codec, &p));
    /* every codec's fields, as zc_codec_params_default fills them */
    for (unsigned c = 0; c < ZC_CODEC_COUNT; c++) {
        const zc_codec_ops_t *ops = zc_codec_ops((zc_codec_id_t)c);
        if (ops->params_from_config)
            ops->params_from_config(cfg, &p);
    }
    p.checksum = cfg->checksum ? 1 : 0; /* every codec's payloads alike */
    ZC_CHECK(zc_codec_params_check(&p));
    *params_p = p;
    return ZC_OK;
}
