/* backend_det.c — the deterministic fast backend: the det kernels (det_kernels.h, where the
 * summation orders are stated) on the engine's one thread pool.
 *
 * Threading: a product is split into contiguous ranges of output columns (gemm_nt: rows of
 * B, the weights, so each thread streams its own part of the matrix; gemm_nn: rows of A),
 * never along the reduction, and each output element is computed by the same kernel code
 * whichever thread and tile it falls in. Results are therefore bitwise independent of the
 * thread count, of the prefill chunking and of decode (one row) vs prefill (many rows).
 * Products too small to repay a wake-up run on the calling thread (which changes no bit).
 *
 * The pool is the context's only pool: the forward pass runs its elementwise stages on it
 * too (lm_backend.pool), so no other threads compete with it. */
#include "backend.h"
#include "det_kernels.h"
#include "threadpool.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DET_MIN_FLOPS 65536.0 /* below this many multiply-adds a product stays serial */

typedef struct det_backend {
    lm_backend base;
    lm_det_isa isa;
} det_backend;

typedef struct det_job {
    lm_det_isa isa;
    uint32_t m, n, k;
    float alpha;
    const float *a, *b;
    size_t lda, ldb, ldc;
    float *c;
} det_job;

/* gemm_nt over output columns [begin, end) (rows of B). */
static void nt_cols(void *arg, uint32_t begin, uint32_t end)
{
    const det_job *j = arg;
    lm_det_gemm_nt(j->isa, j->m, end - begin, j->k, j->alpha, j->a, j->lda,
                   j->b + (size_t)begin * j->ldb, j->ldb, j->c + begin, j->ldc);
}

/* gemm_nt over output rows [begin, end) (rows of A): when B has too few rows to split. */
static void nt_rows(void *arg, uint32_t begin, uint32_t end)
{
    const det_job *j = arg;
    lm_det_gemm_nt(j->isa, end - begin, j->n, j->k, j->alpha, j->a + (size_t)begin * j->lda,
                   j->lda, j->b, j->ldb, j->c + (size_t)begin * j->ldc, j->ldc);
}

/* gemm_nn over output rows [begin, end). */
static void nn_rows(void *arg, uint32_t begin, uint32_t end)
{
    const det_job *j = arg;
    lm_det_gemm_nn(j->isa, end - begin, j->n, j->k, j->a + (size_t)begin * j->lda, j->lda, j->b,
                   j->ldb, j->c + (size_t)begin * j->ldc, j->ldc);
}

static lm_pool *pool_for(const lm_backend *be, uint32_t m, uint32_t n, uint32_t k)
{
    return (double)m * n * k >= DET_MIN_FLOPS ? be->pool : NULL;
}

static void det_gemm_nt(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                        const float *a /* [m][lda] */, size_t lda,
                        const float *b /* [n][ldb] */, size_t ldb,
                        float *c /* [m][ldc] */, size_t ldc)
{
    det_job j = {((det_backend *)be)->isa, m, n, k, alpha, a, b, lda, ldb, ldc, c};
    lm_pool *p = pool_for(be, m, n, k);
    if (n >= 16 * (uint32_t)be->n_threads || n >= m)
        lm_pool_for(p, n, 8, nt_cols, &j);
    else
        lm_pool_for(p, m, 1, nt_rows, &j);
}

static void det_gemm_nn(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                        const float *a /* [m][lda] */, size_t lda,
                        const float *b /* [k][ldb] */, size_t ldb,
                        float *c /* [m][ldc] */, size_t ldc)
{
    det_job j = {((det_backend *)be)->isa, m, n, k, 1.0f, a, b, lda, ldb, ldc, c};
    lm_pool_for(pool_for(be, m, n, k), m, 1, nn_rows, &j);
}

static void det_destroy(lm_backend *be)
{
    lm_pool_free(be->pool);
    free(be);
}

static const lm_backend_i det_vt = {
    .name = "det",
    .gemm_nt = det_gemm_nt,
    .gemm_nn = det_gemm_nn,
    .destroy = det_destroy,
};

const char *lm_backend_det_isa(const lm_backend *be);
const char *lm_backend_det_isa(const lm_backend *be)
{
    return be->vt == &det_vt ? lm_det_isa_name(((const det_backend *)be)->isa) : NULL;
}

/* isa < 0: the best this CPU supports; a forced path must be supported by the CPU. */
static int det_create(lm_backend **out, int n_threads, int isa, lm_err *err)
{
    const lm_det_isa best = lm_det_isa_best();
    if (isa > (int)best)
        return LM_FAIL(err, LM_E_INPUT, "backend det: this CPU has no %s (best: %s)",
                       lm_det_isa_name((lm_det_isa)isa), lm_det_isa_name(best));
    det_backend *d = calloc(1, sizeof *d);
    if (d == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "det backend: out of memory");
    if (n_threads <= 0) { /* 0 = all online cores */
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)nc : 1;
    }
    d->isa = isa < 0 ? best : (lm_det_isa)isa;
    d->base.vt = &det_vt;
    d->base.n_threads = n_threads;
    int rc = lm_pool_create(&d->base.pool, n_threads, err);
    if (rc != LM_OK) {
        free(d);
        return rc;
    }
    *out = &d->base;
    return LM_OK;
}

int lm_backend_det_create(lm_backend **out, int n_threads, lm_err *err);
int lm_backend_det_create(lm_backend **out, int n_threads, lm_err *err)
{
    return det_create(out, n_threads, -1, err);
}

/* "det:isa=NAME" forces a kernel path (scalar, avx2, avx512): the bits must not change. */
int lm_backend_det_create_named(lm_backend **out, const char *name, int n_threads, lm_err *err);
int lm_backend_det_create_named(lm_backend **out, const char *name, int n_threads, lm_err *err)
{
    if (strncmp(name, "det:isa=", 8) != 0 || lm_det_isa_parse(name + 8) < 0)
        return LM_FAIL(err, LM_E_INPUT, "backend '%s': expected det:isa=scalar|avx2|avx512", name);
    return det_create(out, n_threads, lm_det_isa_parse(name + 8), err);
}
