/*
 * A rank of test_preload_nccl's local-scope case: loads LIBSTANDIN_USER with RTLD_LOCAL (its
 * stand-in NCCL with it) and runs zc_standin_user_run with the first unique id of
 * ZC_TEST_NCCL_IDS. This program is not linked with NCCL.
 *
 * Usage: local_main LIBSTANDIN_USER (ZIPCCL_RANK, ZIPCCL_SIZE, ZC_TEST_NCCL_IDS set).
 */
#include "standin_nccl.h"

#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *ids = getenv("ZC_TEST_NCCL_IDS");
    ncclUniqueId id;

    if (argc != 2 || !ids || strlen(ids) < 2 * NCCL_UNIQUE_ID_BYTES || !getenv("ZIPCCL_RANK") ||
        !getenv("ZIPCCL_SIZE")) {
        fprintf(stderr, "usage: ZIPCCL_RANK=r ZIPCCL_SIZE=n ZC_TEST_NCCL_IDS=hex %s LIB\n",
                argv[0]);
        return 2;
    }
    for (int b = 0; b < NCCL_UNIQUE_ID_BYTES; b++) {
        unsigned v = 0;
        if (sscanf(ids + 2 * b, "%2x", &v) != 1)
            return 2;
        id.internal[b] = (char)v;
    }
    void *lib = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
        fprintf(stderr, "dlopen %s: %s\n", argv[1], dlerror());
        return 1;
    }
    int (*run)(int, int, ncclUniqueId);
    *(void **)&run = dlsym(lib, "zc_standin_user_run");
    if (!run) {
        fprintf(stderr, "no zc_standin_user_run in %s\n", argv[1]);
        return 1;
    }
    return run(atoi(getenv("ZIPCCL_RANK")), atoi(getenv("ZIPCCL_SIZE")), id);
}
