/*
 * Fashion-MNIST from Debian's dataset-fashion-mnist package: gzip'd IDX files
 * in /usr/share/datasets/fashion-mnist (or another folder given to fmnist_load).
 * Images become floats in [0, 1].
 */
#ifndef ZC_EXAMPLES_FMNIST_H
#define ZC_EXAMPLES_FMNIST_H

#include <stddef.h>
#include <stdint.h>

#define FMNIST_DEFAULT_DIR "/usr/share/datasets/fashion-mnist"
#define FMNIST_PIXELS 784
#define FMNIST_CLASSES 10

typedef struct fmnist_set {
    size_t count;
    float *images;   /* count x 784, row-major, in [0, 1] */
    uint8_t *labels; /* count, 0..9 */
} fmnist_set_t;

/*
 * Loads the "train" or "t10k" set from @p dir. On failure prints why (naming
 * the dataset-fashion-mnist package when the files are missing) and returns -1.
 */
int fmnist_load(const char *dir, const char *set, fmnist_set_t *out);
void fmnist_free(fmnist_set_t *set);

#endif
