/* Helpers of the topology tests: fixture paths, captured log messages, edited fixtures. */
#ifndef ZC_TESTS_TOPO_TEST_H
#define ZC_TESTS_TOPO_TEST_H

#include "common/log.h"
#include "transport/topo/topo.h"

#include <criterion/criterion.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifndef ZC_TOPO_FIXTURES
#error "ZC_TOPO_FIXTURES (the folder of the hwloc XML fixtures) must be defined"
#endif

/* 2 packages, GPUs cuda0..cuda4, NICs eno1, mlx5_0 (port 1 active), eth1: see the XML. */
#define FIXTURE_2SOCKET ZC_TOPO_FIXTURES "/2socket-gpu-nic.xml"
/* 1 package, cuda0 and an NVMe disk, no network device. */
#define FIXTURE_NO_NIC ZC_TOPO_FIXTURES "/1socket-no-nic.xml"
/* PU 0 on NUMA node 0, PU 1 on node 1, Ethernet eth0 on node 1. */
#define FIXTURE_2NUMA ZC_TOPO_FIXTURES "/2numa-2pu-nic.xml"

/* Every message logged since topo_test_setup, "level: text\n" each. */
typedef struct topo_logs {
    int count, errors;
    char text[8192];
} topo_logs_t;

static topo_logs_t topo_logs;

static inline void topo_capture_sink(void *arg, zc_log_level_t level, const char *file, int line,
                                     const char *msg)
{
    topo_logs_t *logs = arg;
    size_t used = strlen(logs->text);

    snprintf(logs->text + used, sizeof(logs->text) - used, "%s: %s\n", zc_log_level_name(level),
             msg);
    logs->count++;
    logs->errors += level == ZC_LOG_ERROR;
}

static inline void topo_test_setup(void)
{
    memset(&topo_logs, 0, sizeof(topo_logs));
    zc_log_set_level(ZC_LOG_DEBUG);
    zc_log_set_sink(topo_capture_sink, &topo_logs);
}

static inline void topo_test_teardown(void)
{
    zc_log_set_sink(NULL, NULL);
    zc_log_set_level(ZC_LOG_WARN);
}

static inline zc_topo_t *load_fixture(const char *path)
{
    zc_topo_t *topo = NULL;

    cr_assert_eq(zc_topo_load(path, &topo), ZC_OK, "loading %s", path);
    cr_assert_not_null(topo);
    return topo;
}

/*
 * Writes a copy of the fixture at @p path with every @p from replaced by @p to
 * into a temporary file, whose path goes to @p out (the caller unlinks it).
 * Asserts that @p from occurs.
 */
static inline void edit_fixture(const char *path, const char *from, const char *to, char *out,
                                size_t out_len)
{
    FILE *in = fopen(path, "r");
    static char text[1 << 16];
    size_t len;
    int fd;
    FILE *file;

    cr_assert_not_null(in, "opening %s", path);
    len = fread(text, 1, sizeof(text) - 1, in);
    fclose(in);
    text[len] = '\0';
    cr_assert_not_null(strstr(text, from), "'%s' is not in %s", from, path);

    snprintf(out, out_len, "/tmp/zc-topo-fixture-XXXXXX");
    fd = mkstemp(out);
    cr_assert_geq(fd, 0);
    file = fdopen(fd, "w");
    cr_assert_not_null(file);
    for (const char *p = text, *hit; *p; p = hit + strlen(from)) {
        hit = strstr(p, from);
        if (!hit) {
            fputs(p, file);
            break;
        }
        fwrite(p, 1, (size_t)(hit - p), file);
        fputs(to, file);
    }
    cr_assert_eq(fclose(file), 0);
}

#endif
