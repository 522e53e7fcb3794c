/*
 * Philox4x32-10 against the known-answer vectors of Random123 (kat_vectors,
 * philox4x32 with 10 rounds), plus statistical sanity of its output.
 */
#include "common/philox.h"

#include <criterion/criterion.h>

#include <stdint.h>

typedef struct philox_kat {
    uint32_t ctr[4];
    uint32_t key[2];
    uint32_t out[4];
} philox_kat_t;

static const philox_kat_t kats[] = {
    {{0x00000000, 0x00000000, 0x00000000, 0x00000000},
     {0x00000000, 0x00000000},
     {0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8}},
    {{0xffffffff, 0xffffffff, 0xffffffff, 0xffffffff},
     {0xffffffff, 0xffffffff},
     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd}},
    {{0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344},
     {0xa4093822, 0x299f31d0},
     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}},
};

Test(philox, random123_known_answers)
{
    for (size_t i = 0; i < sizeof(kats) / sizeof(kats[0]); i++) {
        uint32_t out[4];
        zc_philox4x32_10(kats[i].ctr, kats[i].key, out);
        for (int j = 0; j < 4; j++)
            cr_assert_eq(out[j], kats[i].out[j], "vector %zu word %d: %08x, expected %08x", i, j,
                         out[j], kats[i].out[j]);
    }
}

Test(philox, inputs_are_not_modified)
{
    uint32_t ctr[4] = {1, 2, 3, 4}, key[2] = {5, 6}, out[4];
    zc_philox4x32_10(ctr, key, out);
    cr_assert(ctr[0] == 1 && ctr[1] == 2 && ctr[2] == 3 && ctr[3] == 4);
    cr_assert(key[0] == 5 && key[1] == 6);
}

Test(philox, every_input_word_matters)
{
    /* Flipping any one bit of counter or key changes the block (a dropped word would not). */
    const uint32_t ctr0[4] = {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344};
    const uint32_t key0[2] = {0xa4093822, 0x299f31d0};
    uint32_t ref[4];
    zc_philox4x32_10(ctr0, key0, ref);

    for (int word = 0; word < 6; word++) {
        for (int bit = 0; bit < 32; bit++) {
            uint32_t ctr[4] = {ctr0[0], ctr0[1], ctr0[2], ctr0[3]};
            uint32_t key[2] = {key0[0], key0[1]};
            uint32_t out[4];
            if (word < 4)
                ctr[word] ^= UINT32_C(1) << bit;
            else
                key[word - 4] ^= UINT32_C(1) << bit;
            zc_philox4x32_10(ctr, key, out);
            int changed = 0;
            for (int j = 0; j < 4; j++)
                changed += __builtin_popcount(out[j] ^ ref[j]);
            /* Avalanche: Binomial(128, 1/2) bits flip, sigma = sqrt(32) ~ 5.7; 32 is 5.7 sigma */
            cr_assert_geq(changed, 32, "word %d bit %d flips only %d output bits", word, bit,
                          changed);
            cr_assert_leq(changed, 96, "word %d bit %d flips %d output bits", word, bit, changed);
        }
    }
}

/*
 * 2^16 draws (counters 0..2^14-1, four words each, key fixed) in 16 equal
 * bins by the top 4 bits. Under uniformity the statistic sum (O-E)^2/E is
 * chi-square with 15 degrees of freedom; its 0.999 quantile is 37.697. The
 * input is fixed, so the outcome is deterministic: the bound is the one a fair
 * generator fails with probability 1e-3, not one tuned to this stream.
 */
#define CHI2_DRAWS (1u << 16)
#define CHI2_BINS 16
#define CHI2_CRIT_15DF_P999 37.697

static double chi_square(const uint32_t counts[CHI2_BINS])
{
    const double expected = (double)CHI2_DRAWS / CHI2_BINS;
    double chi2 = 0.0;
    for (int b = 0; b < CHI2_BINS; b++) {
        double d = (double)counts[b] - expected;
        chi2 += d * d / expected;
    }
    return chi2;
}

Test(philox, chi_square_top_and_bottom_nibble)
{
    const uint32_t key[2] = {0x01234567, 0x89abcdef};
    uint32_t top[CHI2_BINS] = {0}, bottom[CHI2_BINS] = {0};
    uint32_t ones[32] = {0};

    for (uint32_t i = 0; i < CHI2_DRAWS / 4; i++) {
        const uint32_t ctr[4] = {i, 0, 7, 0};
        uint32_t out[4];
        zc_philox4x32_10(ctr, key, out);
        for (int j = 0; j < 4; j++) {
            top[out[j] >> 28]++;
            bottom[out[j] & 15]++;
            for (int b = 0; b < 32; b++)
                ones[b] += (out[j] >> b) & 1;
        }
    }
    double chi2_top = chi_square(top), chi2_bottom = chi_square(bottom);
    cr_assert_lt(chi2_top, CHI2_CRIT_15DF_P999, "top nibble chi2 %.2f", chi2_top);
    cr_assert_lt(chi2_bottom, CHI2_CRIT_15DF_P999, "bottom nibble chi2 %.2f", chi2_bottom);

    /* Each bit is Binomial(2^16, 1/2): mean 32768, sigma 128; allow 5 sigma over 32 bits. */
    for (int b = 0; b < 32; b++)
        cr_assert_leq(ones[b] > 32768 ? ones[b] - 32768 : 32768 - ones[b], 5 * 128,
                      "bit %d is one %u times in %u draws", b, ones[b], CHI2_DRAWS);
}

Test(philox, distinct_counters_give_distinct_blocks)
{
    /* 2^12 consecutive counters on each of the four words: no two 128-bit outputs collide
     * (a collision among 2^14 random 128-bit values has probability ~2^-101). */
    enum { N = 1 << 12 };
    static uint32_t blocks[4 * N][4];
    const uint32_t key[2] = {42, 0};

    for (int word = 0; word < 4; word++) {
        for (uint32_t i = 0; i < N; i++) {
            uint32_t ctr[4] = {0, 0, 0, 0};
            ctr[word] = i + (word ? 1 : 0); /* the all-zero counter only once */
            zc_philox4x32_10(ctr, key, blocks[word * N + i]);
        }
    }
    /* Sort-free check: hash the first word into buckets and compare within a bucket. */
    enum { HBITS = 14 };
    static int32_t head[1 << HBITS], next[4 * N];
    for (int i = 0; i < (1 << HBITS); i++)
        head[i] = -1;
    for (int32_t i = 0; i < 4 * N; i++) {
        uint32_t h = blocks[i][0] >> (32 - HBITS);
        for (int32_t j = head[h]; j >= 0; j = next[j])
            cr_assert(blocks[i][0] != blocks[j][0] || blocks[i][1] != blocks[j][1] ||
                          blocks[i][2] != blocks[j][2] || blocks[i][3] != blocks[j][3],
                      "blocks %d and %d collide", i, j);
        next[i] = head[h];
        head[h] = i;
    }
}
