#include "examples/mlp.h"

#include <cblas.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

uint64_t mlp_rng_next(mlp_rng_t *rng)
{
    uint64_t z = (rng->state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double mlp_rng_uniform(mlp_rng_t *rng)
{
    return (double)(mlp_rng_next(rng) >> 11) * 0x1p-53;
}

uint64_t mlp_rng_below(mlp_rng_t *rng, uint64_t n)
{
    /* Rejection of the incomplete last block of n values: every result equally likely. */
    uint64_t limit = UINT64_MAX - UINT64_MAX % n;
    uint64_t r;
    do {
        r = mlp_rng_next(rng);
    } while (r >= limit);
    return r % n;
}

void mlp_shuffle(mlp_rng_t *rng, uint32_t *perm, size_t n)
{
    for (size_t i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)mlp_rng_below(rng, i);
        uint32_t t = perm[i - 1];
        perm[i - 1] = perm[j];
        perm[j] = t;
    }
}

static float *alloc_floats(size_t n)
{
    return calloc(n, sizeof(float));
}

void mlp_destroy(mlp_t *m)
{
    if (!m)
        return;
    for (int l = 0; l < MLP_MAX_LAYERS; l++) {
        mlp_layer_t *L = &m->layer[l];
        free(L->w);
        free(L->b);
        free(L->gw);
        free(L->gb);
        free(L->vw);
        free(L->vb);
        free(m->act[l]);
    }
    free(m->delta[0]);
    free(m->delta[1]);
    memset(m, 0, sizeof(*m));
}

int mlp_create(const int *sizes, int nsizes, int max_batch, uint64_t seed, mlp_t *m)
{
    memset(m, 0, sizeof(*m));
    if (nsizes < 2 || nsizes > MLP_MAX_LAYERS + 1 || max_batch < 1) {
        fprintf(stderr,
                "mlp: %d layer sizes and batches of %d: need 2..%d sizes and a batch >= 1\n",
                nsizes, max_batch, MLP_MAX_LAYERS + 1);
        return -1;
    }
    /* the backward pass keeps a delta as wide as each hidden layer */
    size_t widest = 1;
    for (int l = 0; l < nsizes; l++) {
        if (sizes[l] < 1) {
            fprintf(stderr, "mlp: layer size %d is %d, must be >= 1\n", l, sizes[l]);
            return -1;
        }
        if (l > 0 && l < nsizes - 1 && (size_t)sizes[l] > widest)
            widest = (size_t)sizes[l];
    }

    mlp_rng_t rng = {seed};
    m->nlayers = nsizes - 1;
    m->max_batch = max_batch;
    for (int l = 0; l < m->nlayers; l++) {
        mlp_layer_t *L = &m->layer[l];
        size_t nw = (size_t)sizes[l] * (size_t)sizes[l + 1];
        L->in = sizes[l];
        L->out = sizes[l + 1];
        L->w = alloc_floats(nw);
        L->gw = alloc_floats(nw);
        L->vw = alloc_floats(nw);
        L->b = alloc_floats((size_t)L->out);
        L->gb = alloc_floats((size_t)L->out);
        L->vb = alloc_floats((size_t)L->out);
        m->act[l] = alloc_floats((size_t)max_batch * (size_t)L->out);
        if (!L->w || !L->gw || !L->vw || !L->b || !L->gb || !L->vb || !m->act[l])
            goto err_no_memory;
        /* He et al. 2015: variance 2 / fan-in keeps ReLU activations at scale; a uniform
         * on [-a, a] has variance a^2 / 3. */
        double a = sqrt(6.0 / L->in);
        for (size_t i = 0; i < nw; i++)
            L->w[i] = (float)((2 * mlp_rng_uniform(&rng) - 1) * a);
    }
    m->delta[0] = alloc_floats((size_t)max_batch * widest);
    m->delta[1] = alloc_floats((size_t)max_batch * widest);
    if (!m->delta[0] || !m->delta[1])
        goto err_no_memory;
    return 0;

err_no_memory:
    fprintf(stderr, "mlp: out of memory for a network of %zu parameters and batches of %d\n",
            mlp_params(m), max_batch);
    mlp_destroy(m);
    return -1;
}

size_t mlp_params(const mlp_t *m)
{
    size_t n = 0;
    for (int l = 0; l < m->nlayers; l++)
        n += (size_t)m->layer[l].in * (size_t)m->layer[l].out + (size_t)m->layer[l].out;
    return n;
}

/* out = in W + b for n rows. */
static void dense(const mlp_layer_t *L, const float *in, int n, float *out)
{
    for (int i = 0; i < n; i++)
        memcpy(out + (size_t)i * L->out, L->b, (size_t)L->out * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, L->out, L->in, 1.0f, in, L->in, L->w,
                L->out, 1.0f, out, L->out);
}

void mlp_forward(mlp_t *m, const float *x, const uint8_t *y, int n, double *loss_sum,
                 uint64_t *correct)
{
    const float *in = x;
    for (int l = 0; l < m->nlayers; l++) {
        const mlp_layer_t *L = &m->layer[l];
        float *out = m->act[l];
        dense(L, in, n, out);
        if (l + 1 < m->nlayers) {
            for (size_t i = 0; i < (size_t)n * (size_t)L->out; i++)
                out[i] = out[i] > 0 ? out[i] : 0;
        }
        in = out;
    }

    const int C = m->layer[m->nlayers - 1].out;
    double loss = 0;
    uint64_t right = 0;
    for (int i = 0; i < n; i++) {
        float *row = m->act[m->nlayers - 1] + (size_t)i * C;
        int best = 0;
        for (int c = 1; c < C; c++)
            best = row[c] > row[best] ? c : best;
        float mx = row[best];
        /* log-softmax from the shifted logit: no log(0) when a probability underflows */
        double shifted = y ? (double)row[y[i]] - mx : 0;
        double sum = 0;
        for (int c = 0; c < C; c++) {
            row[c] = expf(row[c] - mx);
            sum += row[c];
        }
        if (y) {
            loss += log(sum) - shifted;
            right += y[i] == best;
        }
        for (int c = 0; c < C; c++)
            row[c] = (float)(row[c] / sum);
    }
    if (loss_sum)
        *loss_sum += loss;
    if (correct)
        *correct += right;
}

double mlp_grad(mlp_t *m, const float *x, const uint8_t *y, int n, float scale)
{
    double loss = 0;
    mlp_forward(m, x, y, n, &loss, NULL);

    const int last = m->nlayers - 1;
    const int C = m->layer[last].out;
    float *d = m->act[last];
    /* d(loss)/d(logits) = softmax - one-hot, scaled here once so that every gradient is too */
    for (int i = 0; i < n; i++) {
        float *row = d + (size_t)i * C;
        row[y[i]] -= 1.0f;
        for (int c = 0; c < C; c++)
            row[c] *= scale;
    }
    int which = 0;
    for (int l = last; l >= 0; l--) {
        mlp_layer_t *L = &m->layer[l];
        const float *in = l > 0 ? m->act[l - 1] : x;
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, L->in, L->out, n, 1.0f, in, L->in, d,
                    L->out, 0.0f, L->gw, L->out);
        /* bias gradient: column sums, rows in order (no BLAS: its order may vary) */
        memset(L->gb, 0, (size_t)L->out * sizeof(float));
        for (int i = 0; i < n; i++) {
            const float *row = d + (size_t)i * L->out;
            for (int j = 0; j < L->out; j++)
                L->gb[j] += row[j];
        }
        if (l == 0)
            break;
        /* back through W and the ReLU of the layer below */
        float *prev = m->delta[which];
        which ^= 1;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, n, L->in, L->out, 1.0f, d, L->out,
                    L->w, L->out, 0.0f, prev, L->in);
        for (size_t i = 0; i < (size_t)n * (size_t)L->in; i++)
            prev[i] = in[i] > 0 ? prev[i] : 0;
        d = prev;
    }
    return loss;
}

static void momentum_step(float *w, float *v, const float *g, size_t n, float lr, float momentum)
{
    if (momentum == 0.0f) {
        /* plain SGD: v may hold mlp_local_momentum's velocity, which must survive */
        for (size_t i = 0; i < n; i++)
            w[i] -= lr * g[i];
        return;
    }
    for (size_t i = 0; i < n; i++) {
        v[i] = momentum * v[i] + g[i];
        w[i] -= lr * v[i];
    }
}

void mlp_step(mlp_t *m, float lr, float momentum)
{
    for (int l = 0; l < m->nlayers; l++) {
        mlp_layer_t *L = &m->layer[l];
        momentum_step(L->w, L->vw, L->gw, (size_t)L->in * (size_t)L->out, lr, momentum);
        momentum_step(L->b, L->vb, L->gb, (size_t)L->out, lr, momentum);
    }
}

static void accumulate(float *v, float *g, size_t n, float momentum)
{
    for (size_t i = 0; i < n; i++)
        g[i] = v[i] = momentum * v[i] + g[i];
}

void mlp_local_momentum(mlp_t *m, float momentum)
{
    for (int l = 0; l < m->nlayers; l++) {
        mlp_layer_t *L = &m->layer[l];
        accumulate(L->vw, L->gw, (size_t)L->in * (size_t)L->out, momentum);
        accumulate(L->vb, L->gb, (size_t)L->out, momentum);
    }
}

void mlp_evaluate(mlp_t *m, const float *x, const uint8_t *y, size_t n, double *loss_sum,
                  uint64_t *correct)
{
    const size_t D = (size_t)m->layer[0].in;
    for (size_t i = 0; i < n; i += (size_t)m->max_batch) {
        int b = (int)(n - i < (size_t)m->max_batch ? n - i : (size_t)m->max_batch);
        mlp_forward(m, x + i * D, y + i, b, loss_sum, correct);
    }
}

static uint64_t fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ull;
    }
    return h;
}

uint64_t mlp_digest(const mlp_t *m)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (int l = 0; l < m->nlayers; l++) {
        const mlp_layer_t *L = &m->layer[l];
        h = fnv1a(h, L->w, (size_t)L->in * (size_t)L->out * sizeof(float));
        h = fnv1a(h, L->b, (size_t)L->out * sizeof(float));
    }
    return h;
}
