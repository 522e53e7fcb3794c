#include "transport/ucx/ucx_int.h"

zc_status_t zc_ucx_status(ucs_status_t status)
{
    if (UCS_IS_LINK_ERROR(status) || UCS_IS_ENDPOINT_ERROR(status))
        return ZC_ERR_PEER;
    switch (status) {
    case UCS_OK: return ZC_OK;
    case UCS_INPROGRESS: return ZC_INPROGRESS;
    case UCS_ERR_NO_MEMORY: return ZC_ERR_NO_MEMORY;
    case UCS_ERR_INVALID_PARAM:
    case UCS_ERR_INVALID_ADDR: return ZC_ERR_INVALID_ARG;
    case UCS_ERR_MESSAGE_TRUNCATED:
    case UCS_ERR_BUFFER_TOO_SMALL: return ZC_ERR_BUFFER_TOO_SMALL;
    case UCS_ERR_TIMED_OUT: return ZC_ERR_TIMEOUT;
    case UCS_ERR_UNSUPPORTED:
    case UCS_ERR_NOT_IMPLEMENTED: return ZC_ERR_UNSUPPORTED;
    /* the other side is gone or refuses us */
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_REJECTED:
    case UCS_ERR_NOT_CONNECTED:
    case UCS_ERR_CONNECTION_RESET: return ZC_ERR_PEER;
    default: return ZC_ERR_IO;
    }
}
