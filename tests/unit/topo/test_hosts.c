/*
 * Host identities and grouping ranks by host: synthetic identity arrays with
 * known answers, a brute-force reference on a large shuffled job, and the
 * bootstrap path through an in-memory fake provider.
 */
#include "topo_test.h"

#include <ctype.h>
#include <stdint.h>

TestSuite(hosts, .init = topo_test_setup, .fini = topo_test_teardown);

#define ID_LEN ZC_TOPO_HOST_ID_LEN

/* Lays out @p names as the allgather would: ID_LEN bytes per rank, NUL-padded. */
static char *make_ids(const char *const *names, int size)
{
    char *ids = calloc((size_t)size, ID_LEN);

    cr_assert_not_null(ids);
    for (int r = 0; r < size; r++)
        snprintf(ids + (size_t)r * ID_LEN, ID_LEN, "%s", names[r]);
    return ids;
}

typedef struct grouping {
    int local_rank, local_size, node_index, node_count;
} grouping_t;

static grouping_t group(const char *ids, size_t id_len, int size, int rank, int *node_of_rank)
{
    grouping_t g = {-7, -7, -7, -7};

    cr_assert_eq(zc_topo_group_hosts(ids, id_len, size, rank, &g.local_rank, &g.local_size,
                                     &g.node_index, &g.node_count, node_of_rank),
                 ZC_OK, "rank %d", rank);
    return g;
}

Test(hosts, eight_ranks_on_three_interleaved_hosts)
{
    /* hosts sort as b < c < z, but are numbered by their lowest rank: z 0, b 1, c 2 */
    const char *names[8] = {"node-z/9", "node-b/2", "node-c/3", "node-z/9",
                            "node-b/2", "node-z/9", "node-c/3", "node-b/2"};
    const grouping_t expected[8] = {
        {0, 3, 0, 3}, {0, 3, 1, 3}, {0, 2, 2, 3}, {1, 3, 0, 3},
        {1, 3, 1, 3}, {2, 3, 0, 3}, {1, 2, 2, 3}, {2, 3, 1, 3},
    };
    const int node_of_rank_expected[8] = {0, 1, 2, 0, 1, 0, 2, 1};
    char *ids = make_ids(names, 8);

    for (int r = 0; r < 8; r++) {
        int node_of_rank[8];
        grouping_t g = group(ids, ID_LEN, 8, r, node_of_rank);

        cr_assert_eq(g.local_rank, expected[r].local_rank, "rank %d", r);
        cr_assert_eq(g.local_size, expected[r].local_size, "rank %d", r);
        cr_assert_eq(g.node_index, expected[r].node_index, "rank %d", r);
        cr_assert_eq(g.node_count, expected[r].node_count, "rank %d", r);
        cr_assert_arr_eq(node_of_rank, node_of_rank_expected, sizeof(node_of_rank), "rank %d", r);
    }
    free(ids);
}

Test(hosts, one_host)
{
    const char *names[5] = {"h/0", "h/0", "h/0", "h/0", "h/0"};
    char *ids = make_ids(names, 5);

    for (int r = 0; r < 5; r++) {
        grouping_t g = group(ids, ID_LEN, 5, r, NULL);

        cr_assert_eq(g.local_rank, r);
        cr_assert_eq(g.local_size, 5);
        cr_assert_eq(g.node_index, 0);
        cr_assert_eq(g.node_count, 1);
    }
    free(ids);
}

Test(hosts, one_rank_per_host)
{
    const char *names[4] = {"d", "c", "b", "a"};
    char *ids = make_ids(names, 4);

    for (int r = 0; r < 4; r++) {
        grouping_t g = group(ids, ID_LEN, 4, r, NULL);

        cr_assert_eq(g.local_rank, 0);
        cr_assert_eq(g.local_size, 1);
        cr_assert_eq(g.node_index, r);
        cr_assert_eq(g.node_count, 4);
    }
    free(ids);
}

Test(hosts, single_rank)
{
    grouping_t g = group("me", 3, 1, 0, NULL);

    cr_assert_eq(g.local_rank, 0);
    cr_assert_eq(g.local_size, 1);
    cr_assert_eq(g.node_index, 0);
    cr_assert_eq(g.node_count, 1);
}

Test(hosts, identities_compare_as_strings)
{
    /* bytes after the NUL do not count; a prefix is another host; no NUL at all is fine */
    char ids[4][8] = {{'h', 'o', 's', 't', '1', 0, 'x', 'x'},
                      {'h', 'o', 's', 't', '1', 0, 'y', 0},
                      {'h', 'o', 's', 't', '1', '0', 0, 0},
                      {'h', 'o', 's', 't', '1', '0', '0', '0'}};
    int node_of_rank[4];
    const int expected[4] = {0, 0, 1, 2};

    group(&ids[0][0], 8, 4, 0, node_of_rank);
    cr_assert_arr_eq(node_of_rank, expected, sizeof(expected));
}

/* A small deterministic generator (Knuth's MMIX LCG), for the shuffled job. */
static uint32_t next_random(uint64_t *state)
{
    *state = *state * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
    return (uint32_t)(*state >> 33);
}

Test(hosts, large_shuffled_job_matches_brute_force)
{
    enum { SIZE = 3000, HOSTS = 97 };
    static char names_buf[SIZE][16];
    static const char *names[SIZE];
    static int node_of_rank[SIZE], host_of[SIZE];
    uint64_t state = 12345;
    char *ids;

    for (int r = 0; r < SIZE; r++) {
        host_of[r] = (int)(next_random(&state) % HOSTS);
        snprintf(names_buf[r], sizeof(names_buf[r]), "host%d", host_of[r]);
        names[r] = names_buf[r];
    }
    ids = make_ids(names, SIZE);
    for (int rank = 0; rank < SIZE; rank += 37) {
        grouping_t g = group(ids, ID_LEN, SIZE, rank, node_of_rank);
        int local_rank = 0, local_size = 0, nodes_before = 0, node_count = 0, lowest = rank;

        for (int r = 0; r < rank; r++)
            if (host_of[r] == host_of[rank] && r < lowest)
                lowest = r;
        for (int r = 0; r < SIZE; r++) {
            int first = 1; /* r is the lowest rank of its host */

            for (int q = 0; q < r && first; q++)
                first = host_of[q] != host_of[r];
            node_count += first;
            nodes_before += first && r < lowest;
            local_size += host_of[r] == host_of[rank];
            local_rank += host_of[r] == host_of[rank] && r < rank;
        }
        cr_assert_eq(g.local_rank, local_rank, "rank %d", rank);
        cr_assert_eq(g.local_size, local_size, "rank %d", rank);
        cr_assert_eq(g.node_index, nodes_before, "rank %d", rank);
        cr_assert_eq(g.node_count, node_count, "rank %d", rank);
        for (int r = 0; r < SIZE; r++)
            cr_assert_eq(node_of_rank[r] == g.node_index, host_of[r] == host_of[rank],
                         "rank %d vs %d", r, rank);
    }
    free(ids);
}

Test(hosts, empty_identity_is_corrupt)
{
    const char *names[3] = {"a", "", "a"};
    char *ids = make_ids(names, 3);
    int local_rank = -7, local_size = -7, node_index = -7, node_count = -7;
    int node_of_rank[3] = {-7, -7, -7};

    cr_assert_eq(zc_topo_group_hosts(ids, ID_LEN, 3, 0, &local_rank, &local_size, &node_index,
                                     &node_count, node_of_rank),
                 ZC_ERR_CORRUPT);
    cr_assert_not_null(strstr(topo_logs.text, "rank 1 sent an empty host identity"), "%s",
                       topo_logs.text);
    cr_assert_eq(local_rank + local_size + node_index + node_count, -28);
    cr_assert_eq(node_of_rank[0] + node_of_rank[1] + node_of_rank[2], -21);
    free(ids);
}

Test(hosts, bad_arguments)
{
    const char ids[2][4] = {"a", "b"};
    int a, b, c, d;

    cr_assert_eq(zc_topo_group_hosts(NULL, 4, 2, 0, &a, &b, &c, &d, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_group_hosts(&ids[0][0], 0, 2, 0, &a, &b, &c, &d, NULL),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_group_hosts(&ids[0][0], 4, 0, 0, &a, &b, &c, &d, NULL),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_group_hosts(&ids[0][0], 4, 2, -1, &a, &b, &c, &d, NULL),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_group_hosts(&ids[0][0], 4, 2, 2, &a, &b, &c, &d, NULL),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_group_hosts(&ids[0][0], 4, 2, 0, NULL, &b, &c, &d, NULL),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_group_hosts(&ids[0][0], 4, 2, 0, &a, &b, &c, NULL, NULL),
                 ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_group_hosts(&ids[0][0], SIZE_MAX / 2, 3, 0, &a, &b, &c, &d, NULL),
                 ZC_ERR_INVALID_ARG); /* size * id_len overflows */
}

/* Checks the "<hostname cut to 46>/<16 lower-case hex>" layout, NUL-padded. */
static void assert_id_layout(const char *id, const char *hostname)
{
    size_t len = strnlen(id, ID_LEN), kept = strlen(hostname) < 46 ? strlen(hostname) : 46;

    cr_assert_lt(len, (size_t)ID_LEN);
    cr_assert_eq(len, kept + 17, "%s", id);
    cr_assert_eq(strncmp(id, hostname, kept), 0, "%s", id);
    cr_assert_eq(id[kept], '/');
    for (size_t i = kept + 1; i < len; i++)
        cr_assert(isxdigit((unsigned char)id[i]) && !isupper((unsigned char)id[i]), "%s", id);
    for (size_t i = len; i < ID_LEN; i++)
        cr_assert_eq(id[i], '\0', "byte %zu", i);
}

Test(hosts, host_id_is_stable_and_fits)
{
    char first[ID_LEN], second[ID_LEN], hostname[256] = {0};

    memset(first, 'x', sizeof(first));
    cr_assert_eq(zc_topo_host_id(first), ZC_OK);
    cr_assert_eq(zc_topo_host_id(second), ZC_OK);
    cr_assert_arr_eq(first, second, ID_LEN);
    cr_assert_eq(gethostname(hostname, sizeof(hostname) - 1), 0);
    assert_id_layout(first, hostname);
    cr_assert_eq(zc_topo_host_id(NULL), ZC_ERR_INVALID_ARG);
}

Test(hosts, same_hostname_on_two_machines_differs)
{
    char a[ID_LEN], b[ID_LEN], again[ID_LEN];
    const char boot_a[] = "boot_id=4f1d0bd2-6d41-4c5c-9a4b-2f0a8c3e1d11;";
    const char boot_b[] = "boot_id=9b2e7c11-0d3f-4e8a-b5c6-71d2e4f0a922;";

    cr_assert_eq(zc_topo_host_id_make("worker", boot_a, sizeof(boot_a), a), ZC_OK);
    cr_assert_eq(zc_topo_host_id_make("worker", boot_b, sizeof(boot_b), b), ZC_OK);
    cr_assert_eq(zc_topo_host_id_make("worker", boot_a, sizeof(boot_a), again), ZC_OK);
    assert_id_layout(a, "worker");
    assert_id_layout(b, "worker");
    cr_assert_str_neq(a, b);
    cr_assert_arr_eq(a, again, ID_LEN);
    /* other hostname, same machine: differs too */
    cr_assert_eq(zc_topo_host_id_make("worker2", boot_a, sizeof(boot_a), b), ZC_OK);
    cr_assert_str_neq(a, b);
    /* no machine bytes at all is allowed (nothing readable): the hostname alone */
    cr_assert_eq(zc_topo_host_id_make("worker", NULL, 0, b), ZC_OK);
    assert_id_layout(b, "worker");
}

Test(hosts, long_hostnames_are_cut_but_still_differ)
{
    char long_a[101], long_b[101], a[ID_LEN], b[ID_LEN];

    memset(long_a, 'n', 100);
    long_a[100] = '\0';
    memcpy(long_b, long_a, sizeof(long_a));
    long_b[99] = 'm'; /* differs after the part that is kept */
    cr_assert_eq(zc_topo_host_id_make(long_a, "m", 1, a), ZC_OK);
    cr_assert_eq(zc_topo_host_id_make(long_b, "m", 1, b), ZC_OK);
    assert_id_layout(a, long_a);
    assert_id_layout(b, long_b);
    cr_assert_eq(strlen(a), (size_t)ID_LEN - 1);
    cr_assert_eq(strncmp(a, b, 47), 0);
    cr_assert_str_neq(a, b);
}

Test(hosts, host_id_make_bad_arguments)
{
    char out[ID_LEN] = "untouched";

    cr_assert_eq(zc_topo_host_id_make(NULL, "m", 1, out), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_host_id_make("", "m", 1, out), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_host_id_make("h", NULL, 1, out), ZC_ERR_INVALID_ARG);
    cr_assert_eq(zc_topo_host_id_make("h", "m", 1, NULL), ZC_ERR_INVALID_ARG);
    cr_assert_str_eq(out, "untouched");
}

/* In-memory bootstrap: this rank's blob at its slot, the others' from a table. */
typedef struct fake_bootstrap {
    const char *const *others; /* NULL entry: the same identity as this rank */
    size_t len_seen;
    char mine_seen[ID_LEN];
    zc_status_t fail_with;
} fake_bootstrap_t;

static zc_bootstrap_t fake_bs;

static zc_status_t fake_allgather(void *ctx, const void *mine, size_t len, void *all)
{
    fake_bootstrap_t *fake = ctx;
    char *out = all;

    if (fake->fail_with)
        return fake->fail_with;
    fake->len_seen = len;
    memcpy(fake->mine_seen, mine, ZC_MIN(len, sizeof(fake->mine_seen)));
    for (int r = 0; r < fake_bs.size; r++) {
        if (r == fake_bs.rank || !fake->others[r]) {
            memcpy(out + (size_t)r * len, mine, len);
        } else {
            memset(out + (size_t)r * len, 0, len);
            snprintf(out + (size_t)r * len, len, "%s", fake->others[r]);
        }
    }
    return ZC_OK;
}

static const zc_bootstrap_ops_t fake_ops = {.name = "fake", .allgather = fake_allgather};

Test(hosts, local_ranks_over_a_bootstrap)
{
    /* rank 2 of 6; ranks 0, 3 and 5 share its host, 1 and 4 are elsewhere */
    const char *const others[6] = {NULL, "elsewhere/0123456789abcdef", NULL,
                                   NULL, "elsewhere/0123456789abcdef", NULL};
    fake_bootstrap_t fake = {.others = others};
    int local_rank = -7, local_size = -7, node_index = -7, node_count = -7, node_of_rank[6];
    const int expected[6] = {0, 1, 0, 0, 1, 0};
    char mine[ID_LEN];

    fake_bs = (zc_bootstrap_t){.ops = &fake_ops, .ctx = &fake, .rank = 2, .size = 6};
    cr_assert_eq(zc_topo_local_ranks(&fake_bs, &local_rank, &local_size, &node_index, &node_count,
                                     node_of_rank),
                 ZC_OK);
    cr_assert_eq(fake.len_seen, (size_t)ID_LEN);
    cr_assert_eq(zc_topo_host_id(mine), ZC_OK);
    cr_assert_arr_eq(fake.mine_seen, mine, ID_LEN);
    cr_assert_eq(local_rank, 1);
    cr_assert_eq(local_size, 4);
    cr_assert_eq(node_index, 0);
    cr_assert_eq(node_count, 2);
    cr_assert_arr_eq(node_of_rank, expected, sizeof(expected));
}

Test(hosts, local_ranks_returns_the_bootstrap_error)
{
    const char *const others[2] = {NULL, NULL};
    fake_bootstrap_t fake = {.others = others, .fail_with = ZC_ERR_TIMEOUT};
    int local_rank = -7, local_size = -7, node_index = -7, node_count = -7;

    fake_bs = (zc_bootstrap_t){.ops = &fake_ops, .ctx = &fake, .rank = 1, .size = 2};
    cr_assert_eq(
        zc_topo_local_ranks(&fake_bs, &local_rank, &local_size, &node_index, &node_count, NULL),
        ZC_ERR_TIMEOUT);
    cr_assert_eq(local_rank + local_size + node_index + node_count, -28);

    fake_bs.rank = 2; /* out of range */
    cr_assert_eq(
        zc_topo_local_ranks(&fake_bs, &local_rank, &local_size, &node_index, &node_count, NULL),
        ZC_ERR_INVALID_ARG);
    cr_assert_eq(
        zc_topo_local_ranks(NULL, &local_rank, &local_size, &node_index, &node_count, NULL),
        ZC_ERR_INVALID_ARG);
}
