/*
 * The inputs of the preload tests, the same on the host and (compiled by nvcc) on the device:
 * rank r's element i of call k is a hash of (k, r, i), so every rank can compute every other
 * rank's input and the exact result. tests/preload/nccl and tests/gpu/preload_nccl.cu draw
 * them here; a result checked on one side means the same on the other.
 */
#ifndef ZC_TEST_PRELOAD_INPUTS_H
#define ZC_TEST_PRELOAD_INPUTS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define ZC_TEST_HD __host__ __device__
#else
#define ZC_TEST_HD
#endif

/* splitmix64's finalizer (Steele, Lea, Flood 2014): every input bit reaches every output bit. */
static inline ZC_TEST_HD uint64_t mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

/* Rank r's inputs lie in [-a_r, a_r]: a payload credited to the wrong rank shows. */
static inline ZC_TEST_HD double amplitude(int r)
{
    return 1.0 + r / 4.0;
}

/* The 64 random bits behind rank @p r's element @p i of call @p k. */
static inline ZC_TEST_HD uint64_t input_hash(int k, int r, size_t i)
{
    return mix64(mix64((uint64_t)k * 0x9E3779B97F4A7C15ull + (uint64_t)r) + i);
}

/* @p h's top 53 bits as a value uniform in [-a_r, a_r]. */
static inline ZC_TEST_HD double input_uniform(uint64_t h, int r)
{
    return amplitude(r) * (2.0 * (double)(h >> 11) * 0x1p-53 - 1.0);
}

/* FNV-1a over @p len bytes: ranks compare results by this hash, not byte by byte. */
static inline uint64_t fnv1a64(const void *buf, size_t len)
{
    const unsigned char *p = (const unsigned char *)buf;
    uint64_t h = 0xcbf29ce484222325ull;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

#endif
