/*
 * zipccl status codes, shared by every public entry point.
 *
 * ZC_OK is 0, ZC_INPROGRESS is 1, every error is negative. The numeric values
 * are part of the ABI: new codes are appended, never renumbered.
 */
#ifndef ZIPCCL_STATUS_H
#define ZIPCCL_STATUS_H

#ifdef __cplusplus
extern "C" {
#endif

typedef enum zc_status {
    ZC_OK = 0,                    /**< success */
    ZC_INPROGRESS = 1,            /**< operation started, not complete: test again */
    ZC_ERR_INVALID_ARG = -1,      /**< a bad argument (NULL pointer, size out of range) */
    ZC_ERR_INVALID_CONFIG = -2,   /**< a ZIPCCL_* variable or parameter is out of range */
    ZC_ERR_NO_MEMORY = -3,        /**< an allocation failed */
    ZC_ERR_BUFFER_TOO_SMALL = -4, /**< the output buffer cannot hold the result */
    ZC_ERR_CORRUPT = -5,          /**< a payload failed validation: nothing was written */
    ZC_ERR_UNSUPPORTED = -6,      /**< valid request this build or codec does not support */
    ZC_ERR_MISMATCH = -7,         /**< payload does not match the receiver (size, codec, version) */
    ZC_ERR_IO = -8,               /**< a file or system call failed */
    ZC_ERR_TIMEOUT = -9,          /**< a deadline passed */
    ZC_ERR_INTERNAL = -10,        /**< a broken invariant: a bug in zipccl */
    ZC_ERR_PEER = -11,            /**< a peer process failed or became unreachable */
} zc_status_t;

/**
 * Returns a static, lower-case description of @p status ("corrupt payload").
 * Never NULL; unknown values give "unknown status". Thread safe.
 */
const char *zc_status_string(zc_status_t status);

#ifdef __cplusplus
}
#endif

#endif
