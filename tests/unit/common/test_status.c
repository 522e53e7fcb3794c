/* zc_status_string: one distinct description per code, a fixed one for anything else. */
#include <zipccl/zipccl_status.h>

#include <criterion/criterion.h>

#include <string.h>

static const zc_status_t all_statuses[] = {
    ZC_OK,
    ZC_INPROGRESS,
    ZC_ERR_INVALID_ARG,
    ZC_ERR_INVALID_CONFIG,
    ZC_ERR_NO_MEMORY,
    ZC_ERR_BUFFER_TOO_SMALL,
    ZC_ERR_CORRUPT,
    ZC_ERR_UNSUPPORTED,
    ZC_ERR_MISMATCH,
    ZC_ERR_IO,
    ZC_ERR_TIMEOUT,
    ZC_ERR_INTERNAL,
    ZC_ERR_PEER,
};
#define NSTATUS (sizeof(all_statuses) / sizeof(all_statuses[0]))

Test(status, values_are_abi)
{
    /* The numbers are part of the ABI: 0 ok, 1 in progress, errors -1..-11 in order. */
    cr_assert_eq(ZC_OK, 0);
    cr_assert_eq(ZC_INPROGRESS, 1);
    for (size_t i = 2; i < NSTATUS; i++)
        cr_assert_eq((int)all_statuses[i], -(int)(i - 1), "status #%zu is %d", i,
                     (int)all_statuses[i]);
}

Test(status, every_code_has_a_distinct_known_string)
{
    for (size_t i = 0; i < NSTATUS; i++) {
        const char *s = zc_status_string(all_statuses[i]);
        cr_assert_not_null(s);
        cr_assert_gt(strlen(s), 0);
        cr_assert_str_neq(s, "unknown status", "status %d has no description",
                          (int)all_statuses[i]);
        for (const char *c = s; *c; c++)
            cr_assert(!(*c >= 'A' && *c <= 'Z'), "\"%s\" is not lower-case", s);
        for (size_t j = 0; j < i; j++)
            cr_assert_str_neq(s, zc_status_string(all_statuses[j]),
                              "statuses %d and %d share \"%s\"", (int)all_statuses[i],
                              (int)all_statuses[j], s);
    }
}

Test(status, unknown_value)
{
    static const int unknown[] = {2, 3, -12, -13, 100, -1000, 0x7fffffff, -0x7fffffff - 1};
    for (size_t i = 0; i < sizeof(unknown) / sizeof(unknown[0]); i++)
        cr_assert_str_eq(zc_status_string((zc_status_t)unknown[i]), "unknown status", "value %d",
                         unknown[i]);
}
