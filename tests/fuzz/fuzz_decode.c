/*
 * libFuzzer target for one codec's decoder, and its reduce when the codec is
 * linear. Built once per codec by tests/fuzz/meson.build with
 * -DFUZZ_CODEC=ZC_CODEC_<NAME>, by clang with -fsanitize=fuzzer,address,undefined.
 *
 * Input: a little-endian u16 count, then a body. The target puts a valid
 * 16-byte header for FUZZ_CODEC and that count in front of the body (the
 * header's own checks are covered by the unit tests), so every input reaches
 * the codec's body parser. Codecs that need a state get one made from the
 * default parameters (a GradiVeQ warm-up of one call) for that count by
 * fuzz_state_create (fuzz_state.h), as fuzz_corpus makes the seeds.
 *
 * Besides what the sanitizers catch, the target aborts on a status the API
 * does not document for the call, on a reduce result longer than the buffer,
 * on a reduce result that does not decode, and when reducing in place gives
 * other bytes than reducing into a separate buffer.
 */
#include "fuzz_state.h"

#include <zipccl/zipccl_codec.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifndef FUZZ_CODEC
#error "build with -DFUZZ_CODEC=ZC_CODEC_<NAME>"
#endif

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void fail(const char *what, zc_status_t status)
{
    fprintf(stderr, "fuzz_%s: %s: %s\n", zc_codec_name(FUZZ_CODEC), what, zc_status_string(status));
    abort();
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    if (!p)
        abort();
    return p;
}

/* The header of docs/codecs.md: "ZC", version 1, codec id, 4 reserved zero bytes, u64 count. */
static void header_write(uint8_t *p, uint64_t count)
{
    p[0] = 'Z';
    p[1] = 'C';
    p[2] = 1;
    p[3] = (uint8_t)FUZZ_CODEC;
    memset(p + 4, 0, 4);
    for (int i = 0; i < 8; i++)
        p[8 + i] = (uint8_t)(count >> (8 * i));
}

/* Decoders answer a hostile body with ZC_ERR_CORRUPT or ZC_ERR_MISMATCH, nothing else. */
static int decode_status_ok(zc_status_t st)
{
    return st == ZC_OK || st == ZC_ERR_CORRUPT || st == ZC_ERR_MISMATCH;
}

static void fuzz_reduce(zc_codec_state_t *state, const zc_codec_params_t *params,
                        const uint8_t *payload, size_t len, uint64_t count)
{
    const size_t bound = zc_codec_bound(params, count);
    const size_t cap = bound > len ? bound : len;
    uint8_t *out = xmalloc(cap), *inplace = xmalloc(cap);
    size_t out_len = 0, inplace_len = 0;

    zc_status_t st = zc_codec_reduce(state, payload, len, payload, len, out, cap, &out_len);
    if (!decode_status_ok(st) && st != ZC_ERR_BUFFER_TOO_SMALL)
        fail("reduce", st);
    if (st == ZC_OK) {
        if (out_len > cap)
            fail("reduce wrote past its capacity", st);
        float *y = calloc(count ? (size_t)count : 1, sizeof(float));
        if (!y)
            abort();
        zc_status_t st_sum = zc_codec_decode_add(state, out, out_len, y, count);
        if (st_sum != ZC_OK)
            fail("decode of a reduce result", st_sum);
        free(y);

        memcpy(inplace, payload, len);
        st = zc_codec_reduce(state, inplace, len, payload, len, inplace, cap, &inplace_len);
        if (st != ZC_OK)
            fail("reduce in place, where into another buffer succeeded", st);
        if (inplace_len != out_len || memcmp(inplace, out, out_len) != 0)
            fail("reduce in place differs from reduce into another buffer", st);
    }
    free(inplace);
    free(out);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    zc_codec_params_t params;
    zc_codec_state_t *state = NULL;
    zc_status_t st;

    if (size < 2)
        return 0;
    const uint64_t count = (uint64_t)data[0] | (uint64_t)data[1] << 8;
    const size_t len = ZC_PAYLOAD_HEADER_BYTES + (size - 2);
    /* exactly sized, so that AddressSanitizer sees a read one byte past the payload */
    uint8_t *payload = xmalloc(len);
    header_write(payload, count);
    memcpy(payload + ZC_PAYLOAD_HEADER_BYTES, data + 2, size - 2);

    st = zc_codec_params_default(FUZZ_CODEC, &params);
    if (st != ZC_OK)
        fail("params_default", st);
    params.gradiveq_warmup = 1; /* the one taught sum makes the basis, as in fuzz_corpus */
    if (zc_codec_needs_state(&params)) {
        st = fuzz_state_create(&params, count, &state);
        if (st != ZC_OK)
            fail("state_create", st);
    }

    float *dst = calloc(count ? (size_t)count : 1, sizeof(float));
    if (!dst)
        abort();
    st = zc_codec_decode_add(state, payload, len, dst, count);
    if (!decode_status_ok(st))
        fail("decode_add", st);
    free(dst);

    if (zc_codec_caps(FUZZ_CODEC) & ZC_CODEC_CAP_LINEAR)
        fuzz_reduce(state, &params, payload, len, count);

    zc_codec_state_destroy(state);
    free(payload);
    return 0;
}
