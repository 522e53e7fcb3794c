/*
 * Bit writer and reader against a bit-at-a-time reference packer: LSB-first
 * layout, byte counts, overflow that never writes past cap, overrun that
 * never reads past len and returns zeros.
 */
#include "common/bitio.h"

#include <criterion/criterion.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* xorshift64*: a fixed, dependency-free stream for the random sequences. */
static uint64_t rng_state;

static uint32_t rng_next(void)
{
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return (uint32_t)((rng_state * UINT64_C(2685821657736338717)) >> 32);
}

static uint32_t low_bits(uint32_t v, unsigned n)
{
    return n == 32 ? v : v & ((UINT32_C(1) << n) - 1);
}

/* The reference: bit i of the stream is bit (i % 8) of byte i / 8. */
static void ref_put(uint8_t *buf, uint64_t *bitpos, uint32_t value, unsigned n)
{
    for (unsigned i = 0; i < n; i++, (*bitpos)++)
        if ((value >> i) & 1)
            buf[*bitpos / 8] |= (uint8_t)(1u << (*bitpos % 8));
}

static uint32_t ref_get(const uint8_t *buf, uint64_t *bitpos, unsigned n)
{
    uint32_t v = 0;
    for (unsigned i = 0; i < n; i++, (*bitpos)++)
        v |= (uint32_t)((buf[*bitpos / 8] >> (*bitpos % 8)) & 1) << i;
    return v;
}

Test(bitio, bitlen32_known_answers)
{
    static const struct {
        uint32_t x;
        unsigned bits;
    } known[] = {{0, 0},           {1, 1},           {2, 2},
                 {3, 2},           {4, 3},           {255, 8},
                 {256, 9},         {0x7fffffff, 31}, {0x80000000u, 32},
                 {0xffffffffu, 32}};
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        cr_assert_eq(zc_bitlen32(known[i].x), known[i].bits, "bitlen32(0x%x)", known[i].x);
    for (unsigned k = 0; k < 32; k++) {
        cr_assert_eq(zc_bitlen32(UINT32_C(1) << k), k + 1, "2^%u", k);
        cr_assert_eq(zc_bitlen32((UINT32_C(1) << k) | 1), k + 1, "2^%u | 1", k);
        if (k > 0)
            cr_assert_eq(zc_bitlen32((UINT32_C(1) << k) - 1), k, "2^%u - 1", k);
    }
}

Test(bitio, little_endian_loads_and_stores)
{
    uint8_t b[8];
    zc_store_le32(b, 0x11223344u);
    cr_assert(b[0] == 0x44 && b[1] == 0x33 && b[2] == 0x22 && b[3] == 0x11);
    cr_assert_eq(zc_load_le32(b), 0x11223344u);
    zc_store_le64(b, UINT64_C(0x0102030405060708));
    for (int i = 0; i < 8; i++)
        cr_assert_eq(b[i], 8 - i, "byte %d", i);
    cr_assert_eq(zc_load_le64(b), UINT64_C(0x0102030405060708));
}

Test(bitio, known_layout)
{
    uint8_t buf[8];
    zc_bitwriter_t w;
    zc_bw_init(&w, buf, sizeof(buf));
    zc_bw_put(&w, 0x5, 3);        /* bits 0..2 = 101 */
    zc_bw_put(&w, 0xffffffe0, 5); /* only the low 5 bits (00000) count */
    zc_bw_put(&w, 0xabc, 12);     /* bits 8..19 */
    cr_assert_eq(zc_bw_bits(&w), 20);
    cr_assert_eq(zc_bw_flush(&w), 3);
    cr_assert_eq(buf[0], 0x05);
    cr_assert_eq(buf[1], 0xbc);
    cr_assert_eq(buf[2], 0x0a, "the pad bits must be zero");
}

/* Writes @p count random (width, value) pairs, reads them back, compares with the reference. */
static void round_trip(unsigned count, unsigned min_width, unsigned max_width, uint64_t seed)
{
    unsigned *widths = malloc((count ? count : 1) * sizeof(*widths));
    uint32_t *values = malloc((count ? count : 1) * sizeof(*values));
    cr_assert(widths && values);
    rng_state = seed;
    uint64_t total = 0;
    for (unsigned i = 0; i < count; i++) {
        widths[i] = min_width + rng_next() % (max_width - min_width + 1);
        values[i] = rng_next(); /* high garbage above the width: the writer must drop it */
        total += widths[i];
    }
    size_t bytes = (size_t)((total + 7) / 8);
    /* Exactly sized heap buffers: under ASan any access past them aborts. */
    uint8_t *buf = malloc(bytes ? bytes : 1);
    uint8_t *ref = calloc(bytes ? bytes : 1, 1);
    cr_assert(buf && ref);
    memset(buf, 0xcc, bytes ? bytes : 1);

    zc_bitwriter_t w;
    uint64_t refpos = 0;
    zc_bw_init(&w, buf, bytes);
    for (unsigned i = 0; i < count; i++) {
        zc_bw_put(&w, values[i], widths[i]);
        ref_put(ref, &refpos, values[i], widths[i]);
        cr_assert_eq(zc_bw_bits(&w), refpos);
    }
    size_t written = zc_bw_flush(&w);
    cr_assert_eq(written, bytes, "seed %llu: flush wrote %zu bytes for %llu bits",
                 (unsigned long long)seed, written, (unsigned long long)total);
    cr_assert_eq(memcmp(buf, ref, bytes), 0, "seed %llu: stream differs from the reference",
                 (unsigned long long)seed);

    zc_bitreader_t r;
    refpos = 0;
    zc_br_init(&r, buf, bytes);
    for (unsigned i = 0; i < count; i++) {
        uint32_t got = zc_br_get(&r, widths[i]);
        uint32_t want = ref_get(ref, &refpos, widths[i]);
        cr_assert_eq(want, low_bits(values[i], widths[i]));
        cr_assert_eq(got, want, "seed %llu item %u (width %u): %#x, expected %#x",
                     (unsigned long long)seed, i, widths[i], got, want);
        cr_assert_eq(zc_br_consumed(&r), (size_t)((refpos + 7) / 8), "item %u", i);
    }
    cr_assert_eq(r.overrun, 0);
    cr_assert_eq(zc_br_consumed(&r), bytes);
    free(widths);
    free(values);
    free(buf);
    free(ref);
}

Test(bitio, round_trip_random_widths)
{
    for (uint64_t seed = 1; seed <= 40; seed++)
        round_trip(1 + (unsigned)(seed * 37 % 500), 0, 32, seed * UINT64_C(0x9e3779b97f4a7c15));
}

Test(bitio, round_trip_each_width)
{
    /* Every fixed width, with counts that end on and off a byte boundary. */
    for (unsigned width = 0; width <= 32; width++)
        for (unsigned count = 0; count <= 24; count += 3)
            round_trip(count, width, width, UINT64_C(0xabcdef) + width * 31 + count);
}

Test(bitio, round_trip_extreme_values)
{
    uint8_t buf[132];
    zc_bitwriter_t w;
    zc_bitreader_t r;
    zc_bw_init(&w, buf, sizeof(buf));
    for (unsigned n = 0; n <= 32; n++) {
        zc_bw_put(&w, 0xffffffffu, n);
        zc_bw_put(&w, 0, n);
    }
    size_t bytes = zc_bw_flush(&w);
    cr_assert_eq(bytes, 132); /* 2 * (0 + 1 + ... + 32) = 1056 bits */
    zc_br_init(&r, buf, bytes);
    for (unsigned n = 0; n <= 32; n++) {
        cr_assert_eq(zc_br_get(&r, n), low_bits(0xffffffffu, n), "ones, width %u", n);
        cr_assert_eq(zc_br_get(&r, n), 0, "zeros, width %u", n);
    }
    cr_assert_eq(r.overrun, 0);
}

/* ---- writer overflow ---- */

#define GUARD 0xa5
#define GUARD_BYTES 16

Test(bitio, writer_overflow_reported_and_bounded)
{
    /* For every capacity and every stream length around it, in three width patterns:
     * flush fails exactly when the stream needs more than cap bytes, and never writes
     * past cap. */
    static const unsigned patterns[][4] = {{1, 1, 1, 1}, {7, 13, 3, 9}, {32, 32, 32, 32}};
    for (size_t cap = 0; cap <= 13; cap++) {
        for (size_t pat = 0; pat < 3; pat++) {
            for (unsigned items = 0; items <= 130; items++) {
                uint8_t buf[13 + GUARD_BYTES];
                memset(buf, GUARD, sizeof(buf));
                zc_bitwriter_t w;
                zc_bw_init(&w, buf, cap);
                uint64_t bits = 0;
                for (unsigned i = 0; i < items; i++) {
                    unsigned n = patterns[pat][i % 4];
                    zc_bw_put(&w, 0x5a5a5a5a ^ i, n);
                    bits += n;
                }
                size_t need = (size_t)((bits + 7) / 8);
                size_t got = zc_bw_flush(&w);
                if (need <= cap)
                    cr_assert_eq(got, need, "cap %zu, %llu bits", cap, (unsigned long long)bits);
                else
                    cr_assert_eq(got, SIZE_MAX, "cap %zu, %llu bits: overflow not reported", cap,
                                 (unsigned long long)bits);
                for (size_t i = cap; i < sizeof(buf); i++)
                    cr_assert_eq(buf[i], GUARD, "cap %zu, %llu bits: byte %zu written", cap,
                                 (unsigned long long)bits, i);
            }
        }
    }
}

Test(bitio, writer_overflow_is_sticky)
{
    uint8_t buf[4 + GUARD_BYTES];
    memset(buf, GUARD, sizeof(buf));
    zc_bitwriter_t w;
    zc_bw_init(&w, buf, 4);
    zc_bw_put(&w, 0xffffffff, 32);
    zc_bw_put(&w, 0xffffffff, 32); /* does not fit */
    cr_assert_eq(zc_bw_flush(&w), SIZE_MAX);
    cr_assert_eq(zc_bw_flush(&w), SIZE_MAX, "a second flush forgot the overflow");
    zc_bw_put(&w, 1, 1);
    cr_assert_eq(zc_bw_flush(&w), SIZE_MAX);
    for (size_t i = 4; i < sizeof(buf); i++)
        cr_assert_eq(buf[i], GUARD, "byte %zu written", i);
}

Test(bitio, writer_exact_heap_buffer)
{
    /* Under ASan: a stream that exactly fills a heap buffer of every small size touches
     * nothing outside it, and one more bit overflows without touching it either. */
    for (size_t cap = 1; cap <= 40; cap++) {
        uint8_t *buf = malloc(cap);
        cr_assert_not_null(buf);
        zc_bitwriter_t w;
        zc_bw_init(&w, buf, cap);
        for (size_t i = 0; i < cap * 8; i++)
            zc_bw_put(&w, (uint32_t)i, 1);
        cr_assert_eq(zc_bw_flush(&w), cap);
        zc_bw_init(&w, buf, cap);
        for (size_t i = 0; i < cap * 8 + 1; i++)
            zc_bw_put(&w, 1, 1);
        cr_assert_eq(zc_bw_flush(&w), SIZE_MAX);
        free(buf);
    }
}

/* ---- reader overrun ---- */

Test(bitio, reader_past_end_returns_zeros_and_sets_overrun)
{
    for (size_t len = 0; len <= 20; len++) {
        uint8_t *buf = malloc(len ? len : 1); /* exact size: ASan catches a read past it */
        cr_assert_not_null(buf);
        memset(buf, 0xff, len);
        zc_bitreader_t r;
        zc_br_init(&r, buf, len);
        for (size_t i = 0; i < len; i++) {
            cr_assert_eq(zc_br_get(&r, 8), 0xff, "len %zu byte %zu", len, i);
            cr_assert_eq(r.overrun, 0, "len %zu byte %zu", len, i);
        }
        cr_assert_eq(zc_br_consumed(&r), len);
        for (unsigned n = 1; n <= 32; n++) {
            cr_assert_eq(zc_br_get(&r, n), 0, "len %zu: get(%u) past the end", len, n);
            cr_assert_eq(r.overrun, 1, "len %zu: get(%u) past the end not reported", len, n);
        }
        cr_assert_eq(zc_br_consumed(&r), len, "consumed counts bytes that do not exist");
        free(buf);
    }
}

/* A size the compiler cannot see: with a visible 1-byte object GCC warns about the
 * 8-byte load on the refill path that the length check makes unreachable. */
static volatile size_t one_byte = 1;

/* A reader of a heap block of exactly one byte, @p byte; the caller frees the block. */
static uint8_t *one_byte_reader(uint8_t byte, zc_bitreader_t *r)
{
    uint8_t *buf = malloc(one_byte);
    cr_assert_not_null(buf);
    buf[0] = byte;
    zc_br_init(r, buf, one_byte);
    return buf;
}

Test(bitio, reader_straddling_the_end)
{
    /* One byte of ones, read as 4 + 8 bits: the 4 real bits then zeros for the missing ones. */
    zc_bitreader_t r;
    uint8_t *buf = one_byte_reader(0xff, &r);
    cr_assert_eq(zc_br_get(&r, 4), 0xf);
    cr_assert_eq(r.overrun, 0);
    cr_assert_eq(zc_br_get(&r, 8), 0xf, "missing high bits must read as zero");
    cr_assert_eq(r.overrun, 1);
    cr_assert_eq(zc_br_get(&r, 32), 0);
    cr_assert_eq(zc_br_get(&r, 0), 0);
    cr_assert_eq(r.overrun, 1, "overrun is sticky");
    free(buf);
}

Test(bitio, reader_zero_width_reads_nothing)
{
    zc_bitreader_t r;
    uint8_t *buf = one_byte_reader(0x81, &r);
    cr_assert_eq(zc_br_get(&r, 0), 0);
    cr_assert_eq(zc_br_consumed(&r), 0);
    cr_assert_eq(zc_br_get(&r, 1), 1);
    cr_assert_eq(zc_br_get(&r, 0), 0);
    cr_assert_eq(zc_br_get(&r, 7), 0x40);
    cr_assert_eq(r.overrun, 0);
    free(buf);
}

/* ---- align and consumed ---- */

Test(bitio, align_and_consumed)
{
    uint8_t buf[16];
    zc_bitwriter_t w;
    zc_bw_init(&w, buf, sizeof(buf));
    zc_bw_put(&w, 0x5, 3);
    zc_bw_put(&w, 0, 5); /* the writer's side of an align */
    zc_bw_put(&w, 0xab, 8);
    zc_bw_put(&w, 0x1, 1);
    zc_bw_put(&w, 0, 7);
    zc_bw_put(&w, 0xcdef, 16);
    cr_assert_eq(zc_bw_flush(&w), 5);

    zc_bitreader_t r;
    zc_br_init(&r, buf, 5);
    cr_assert_eq(zc_br_consumed(&r), 0);
    zc_br_align(&r); /* at a boundary: no-op */
    cr_assert_eq(zc_br_consumed(&r), 0);
    cr_assert_eq(zc_br_get(&r, 3), 0x5);
    cr_assert_eq(zc_br_consumed(&r), 1, "a partly read byte counts as consumed");
    zc_br_align(&r);
    cr_assert_eq(zc_br_consumed(&r), 1);
    cr_assert_eq(zc_br_get(&r, 8), 0xab);
    cr_assert_eq(zc_br_consumed(&r), 2);
    zc_br_align(&r);
    cr_assert_eq(zc_br_consumed(&r), 2, "align at a boundary skipped a byte");
    cr_assert_eq(zc_br_get(&r, 1), 1);
    zc_br_align(&r);
    cr_assert_eq(zc_br_consumed(&r), 3);
    cr_assert_eq(zc_br_get(&r, 16), 0xcdef);
    cr_assert_eq(zc_br_consumed(&r), 5);
    cr_assert_eq(r.overrun, 0);
}

Test(bitio, consumed_tracks_every_bit)
{
    /* One bit at a time across both refill paths (8-byte loads, then the tail). */
    enum { LEN = 41 };
    uint8_t buf[LEN];
    for (int i = 0; i < LEN; i++)
        buf[i] = (uint8_t)(i * 37 + 11);
    zc_bitreader_t r;
    zc_br_init(&r, buf, LEN);
    for (unsigned bit = 0; bit < LEN * 8; bit++) {
        uint32_t b = zc_br_get(&r, 1);
        cr_assert_eq(b, (uint32_t)(buf[bit / 8] >> (bit % 8)) & 1, "bit %u", bit);
        cr_assert_eq(zc_br_consumed(&r), bit / 8 + 1, "after bit %u", bit);
    }
    cr_assert_eq(r.overrun, 0);
}

Test(bitio, align_after_random_reads)
{
    /* Any prefix of reads then align lands on the byte the reference says. */
    enum { LEN = 64 };
    uint8_t buf[LEN];
    rng_state = 77;
    for (int i = 0; i < LEN; i++)
        buf[i] = (uint8_t)rng_next();
    for (unsigned trial = 0; trial < 200; trial++) {
        zc_bitreader_t r;
        zc_br_init(&r, buf, LEN);
        uint64_t pos = 0;
        unsigned steps = rng_next() % 12;
        for (unsigned s = 0; s < steps; s++) {
            unsigned n = rng_next() % 33;
            uint32_t got = zc_br_get(&r, n);
            cr_assert_eq(got, ref_get(buf, &pos, n));
        }
        zc_br_align(&r);
        pos = (pos + 7) / 8 * 8;
        cr_assert_eq(zc_br_consumed(&r), pos / 8, "trial %u", trial);
        uint32_t next = zc_br_get(&r, 8);
        cr_assert_eq(next, buf[pos / 8], "trial %u: byte after align", trial);
    }
}
