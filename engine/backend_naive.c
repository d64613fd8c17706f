/* backend_naive.c — the reference backend: plain C, one thread, a fixed summation order.
 *
 * Order (the contract the chunk-invariance tests rely on): every output element is one dot
 * product accumulated in a float that starts at +0.0f and adds the products a[l]*b[l] for
 * l = 0, 1, ..., k-1, strictly left to right, each product rounded to float before the add
 * (the build uses -ffp-contract=off, so no FMA is formed). gemm_nt then multiplies by alpha
 * once. No element depends on m, on the other rows of A, or on how a caller split its rows
 * into calls, so a forward pass that uses only this backend gives the same bits for any
 * prefill chunk size by construction. */
#include "backend.h"

#include <stdlib.h>

static void naive_gemm_nt(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                          const float *a /* [m][lda] */, size_t lda,
                          const float *b /* [n][ldb] */, size_t ldb,
                          float *c /* [m][ldc] */, size_t ldc)
{
    (void)be;
    for (uint32_t i = 0; i < m; ++i) {
        const float *ai = a + (size_t)i * lda;
        float *ci = c + (size_t)i * ldc;
        for (uint32_t j = 0; j < n; ++j) {
            const float *bj = b + (size_t)j * ldb;
            float s = 0.0f;
            for (uint32_t l = 0; l < k; ++l)
                s += ai[l] * bj[l];
            ci[j] = alpha * s;
        }
    }
}

/* C[i][j] = sum_l A[i][l] * B[l][j]. The loop nest is i, l, j so that the inner loop runs
 * over contiguous j (and may be vectorized across j), yet every C[i][j] still receives its
 * terms in the order l = 0..k-1 starting from +0.0f: the same order as naive_gemm_nt. */
static void naive_gemm_nn(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                          const float *a /* [m][lda] */, size_t lda,
                          const float *b /* [k][ldb] */, size_t ldb,
                          float *c /* [m][ldc] */, size_t ldc)
{
    (void)be;
    for (uint32_t i = 0; i < m; ++i) {
        const float *ai = a + (size_t)i * lda;
        float *ci = c + (size_t)i * ldc;
        for (uint32_t j = 0; j < n; ++j)
            ci[j] = 0.0f;
        for (uint32_t l = 0; l < k; ++l) {
            const float ail = ai[l];
            const float *bl = b + (size_t)l * ldb;
            for (uint32_t j = 0; j < n; ++j)
                ci[j] += ail * bl[j];
        }
    }
}

static void naive_destroy(lm_backend *be)
{
    free(be);
}

static const lm_backend_i naive_vt = {
    .name = "naive",
    .gemm_nt = naive_gemm_nt,
    .gemm_nn = naive_gemm_nn,
    .destroy = naive_destroy,
};

int lm_backend_naive_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);
int lm_backend_naive_create(lm_backend **out, const char *spec, int n_threads, lm_err *err)
{
    (void)spec;
    (void)n_threads; /* always one thread: the order above is the point of this backend */
    lm_backend *be = calloc(1, sizeof *be);
    if (be == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "naive backend: out of memory");
    be->vt = &naive_vt;
    be->n_threads = 1;
    *out = be;
    return LM_OK;
}
