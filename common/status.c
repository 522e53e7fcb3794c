#include "common/compiler.h"

#include <zipccl/zipccl_status.h>

ZC_EXPORT const char *zc_status_string(zc_status_t status)
{
    switch (status) {
    case ZC_OK: return "success";
    case ZC_INPROGRESS: return "in progress";
    case ZC_ERR_INVALID_ARG: return "invalid argument";
    case ZC_ERR_INVALID_CONFIG: return "invalid configuration";
    case ZC_ERR_NO_MEMORY: return "out of memory";
    case ZC_ERR_BUFFER_TOO_SMALL: return "buffer too small";
    case ZC_ERR_CORRUPT: return "corrupt payload";
    case ZC_ERR_UNSUPPORTED: return "unsupported";
    case ZC_ERR_MISMATCH: return "payload does not match receiver";
    case ZC_ERR_IO: return "i/o error";
    case ZC_ERR_TIMEOUT: return "timed out";
    case ZC_ERR_INTERNAL: return "internal error";
    case ZC_ERR_PEER: return "peer failed";
    }
    return "unknown status";
}
