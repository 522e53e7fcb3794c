/*
 * A multilayer perceptron for the examples: dense layers (BLAS sgemm), ReLU
 * between them, softmax cross-entropy on the last, SGD with momentum.
 *
 *     int sizes[] = {784, 512, 256, 10};
 *     mlp_t m;
 *     mlp_create(sizes, 4, 64, seed, &m);
 *     loss = mlp_grad(&m, x, y, n, 1.0 / n);   // gradients in m.layer[l].gw, .gb
 *     mlp_step(&m, lr, momentum);
 *
 * Layer l maps sizes[l] inputs to sizes[l + 1] outputs: y = x W + b, with W
 * sizes[l] x sizes[l + 1], row-major, and x one row per example. Everything is
 * deterministic: the initial weights come from the seed alone, and the
 * results of one build on one machine depend only on the inputs (as long as
 * BLAS runs with a fixed number of threads).
 */
#ifndef ZC_EXAMPLES_MLP_H
#define ZC_EXAMPLES_MLP_H

#include <stddef.h>
#include <stdint.h>

#define MLP_MAX_LAYERS 8

/* splitmix64 (Steele, Lea, Flood, OOPSLA 2014): small, fast, and every seed is a good one. */
typedef struct mlp_rng {
    uint64_t state;
} mlp_rng_t;

/* Next 64 random bits. */
uint64_t mlp_rng_next(mlp_rng_t *rng);
/* Uniform double in [0, 1). */
double mlp_rng_uniform(mlp_rng_t *rng);
/* Uniform integer in [0, n), n >= 1, without modulo bias. */
uint64_t mlp_rng_below(mlp_rng_t *rng, uint64_t n);
/* Fisher-Yates: writes a uniformly random permutation of 0..n-1 to perm. */
void mlp_shuffle(mlp_rng_t *rng, uint32_t *perm, size_t n);

typedef struct mlp_layer {
    int in, out;
    float *w, *b;   /* weights (in x out) and biases (out) */
    float *gw, *gb; /* their gradients, filled by mlp_grad */
    float *vw, *vb; /* momentum buffers */
} mlp_layer_t;

typedef struct mlp {
    int nlayers;
    int max_batch;
    mlp_layer_t layer[MLP_MAX_LAYERS];
    /* act[l]: max_batch x layer[l].out outputs of layer l (after ReLU; the last holds
     * softmax probabilities, then dLoss/dlogits); delta: the backward pass's scratch */
    float *act[MLP_MAX_LAYERS];
    float *delta[2];
} mlp_t;

/*
 * Builds a network of @p nsizes - 1 layers (2..MLP_MAX_LAYERS + 1 sizes, each
 * >= 1) for batches of up to @p max_batch examples. Weights are He-initialised
 * (uniform with variance 2 / fan-in) from @p seed, biases and momentum are 0.
 * Returns 0, or -1 after printing why (bad sizes, out of memory); on failure
 * nothing is left allocated.
 */
int mlp_create(const int *sizes, int nsizes, int max_batch, uint64_t seed, mlp_t *m);
/* Frees everything mlp_create allocated; a zeroed or half-built mlp_t is fine. */
void mlp_destroy(mlp_t *m);

/* Number of parameters (weights and biases). */
size_t mlp_params(const mlp_t *m);

/*
 * Forward pass on @p n <= max_batch examples (rows of @p x); leaves the class
 * probabilities in act[nlayers - 1]. Adds each example's cross-entropy loss
 * to *@p loss_sum and the number classified correctly (argmax, lowest class
 * on ties) to *@p correct; either may be NULL.
 */
void mlp_forward(mlp_t *m, const float *x, const uint8_t *y, int n, double *loss_sum,
                 uint64_t *correct);

/*
 * Forward and backward pass on @p n examples: every layer's gw and gb become
 * @p scale times the gradient of the summed cross-entropy over the @p n
 * examples (scale 1 / n gives the mean's gradient; a data-parallel rank with a
 * shard of a global batch of B passes 1 / B so that the ranks' gradients sum
 * to the batch mean). Returns the summed loss.
 */
double mlp_grad(mlp_t *m, const float *x, const uint8_t *y, int n, float scale);

/*
 * One SGD step with heavy-ball momentum (as PyTorch): v = momentum v + g;
 * w -= lr v. Momentum 0 is plain SGD, w -= lr g, and leaves v alone.
 */
void mlp_step(mlp_t *m, float lr, float momentum);

/*
 * Momentum before communication (momentum correction, Lin et al., "Deep
 * Gradient Compression", ICLR 2018, eq. 4): v = momentum v + g, and the
 * gradients become v. A data-parallel rank then all-reduces its velocity and
 * takes mlp_step(m, lr, 0) with the sum: the same update as global momentum
 * when the sum is exact (it is linear), but a sparsifying codec with error
 * feedback then delays velocity, not bare gradients.
 */
void mlp_local_momentum(mlp_t *m, float momentum);

/*
 * Evaluates @p n examples in batches of max_batch: adds the summed loss to
 * *@p loss_sum and the number classified correctly to *@p correct.
 */
void mlp_evaluate(mlp_t *m, const float *x, const uint8_t *y, size_t n, double *loss_sum,
                  uint64_t *correct);

/* FNV-1a 64 over the bits of every weight and bias: equal digests, equal models. */
uint64_t mlp_digest(const mlp_t *m);

#endif
