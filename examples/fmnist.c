#include "examples/fmnist.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

static uint32_t be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads a whole gzip'd IDX file: checks the magic (0x0000080N, N = dims) and
 * returns the payload after the header, with the dimensions. */
static unsigned char *read_idx(const char *path, unsigned dims, uint32_t *shape)
{
    gzFile f = gzopen(path, "rb");
    if (!f) {
        fprintf(stderr,
                "fmnist: cannot open %s: %s\n"
                "fmnist: install the dataset with: apt-get install dataset-fashion-mnist\n",
                path, strerror(errno ? errno : ENOENT));
        return NULL;
    }
    unsigned char head[16];
    size_t head_len = 4 + 4 * dims;
    size_t total = 1;
    unsigned char *data = NULL;

    if (gzread(f, head, (unsigned)head_len) != (int)head_len || be32(head) != 0x800u + dims) {
        fprintf(stderr, "fmnist: %s is not an IDX file with %u dimensions\n", path, dims);
        goto out;
    }
    for (unsigned i = 0; i < dims; i++) {
        shape[i] = be32(head + 4 + 4 * i);
        total *= shape[i];
    }
    data = malloc(total ? total : 1);
    if (!data || gzread(f, data, (unsigned)total) != (int)total) {
        fprintf(stderr, "fmnist: %s is truncated (expected %zu bytes of data)\n", path, total);
        free(data);
        data = NULL;
    }
out:
    gzclose(f);
    return data;
}

int fmnist_load(const char *dir, const char *set, fmnist_set_t *out)
{
    char path[4096];
    uint32_t ishape[3], lshape[1];

    memset(out, 0, sizeof(*out));
    snprintf(path, sizeof(path), "%s/%s-images-idx3-ubyte.gz", dir, set);
    unsigned char *pixels = read_idx(path, 3, ishape);
    if (!pixels)
        return -1;
    snprintf(path, sizeof(path), "%s/%s-labels-idx1-ubyte.gz", dir, set);
    unsigned char *labels = read_idx(path, 1, lshape);
    if (!labels) {
        free(pixels);
        return -1;
    }
    if (ishape[0] != lshape[0] || ishape[1] * ishape[2] != FMNIST_PIXELS) {
        fprintf(stderr, "fmnist: %s set: %u images of %ux%u but %u labels\n", set, ishape[0],
                ishape[1], ishape[2], lshape[0]);
        free(pixels);
        free(labels);
        return -1;
    }
    out->count = ishape[0];
    out->images = malloc(out->count * FMNIST_PIXELS * sizeof(float));
    if (!out->images) {
        free(pixels);
        free(labels);
        return -1;
    }
    for (size_t i = 0; i < out->count * FMNIST_PIXELS; i++)
        out->images[i] = pixels[i] / 255.0f;
    out->labels = labels;
    free(pixels);
    return 0;
}

void fmnist_free(fmnist_set_t *set)
{
    free(set->images);
    free(set->labels);
    memset(set, 0, sizeof(*set));
}
