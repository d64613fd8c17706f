/* backend_blas.c — OpenBLAS backend: cblas_sgemm for chunks (m > 1), cblas_sgemv for one row.
 *
 * Order and threading: whatever OpenBLAS's kernel for this CPU does (on Zen 4 the Cooperlake
 * kernels: blocked, FMA, vectorized). Measured on the development machines: sgemm is
 * bitwise identical for 1 and 2 threads and across runs, but NOT across different row splits
 * (small calls go to another kernel) and sgemv never matches sgemm for one row. So this
 * backend is deterministic for a fixed chunk schedule and not chunk-invariant: that is the
 * behaviour kvdrift exists to measure, not a defect to hide.
 *
 * The thread count is OpenBLAS-global; two contexts in one process may want different
 * counts, so it is set before every call (cheap when unchanged).
 *
 * Weights kept in their file's type (weight_tiles.c): the backend's pool threads each decode
 * a tile of B's rows (about 96K floats; the same tiles at every thread count) and call
 * sgemm/sgemv on it with one OpenBLAS thread. sgemv's outputs do not depend on the rows beside
 * them, so one-row calls (decode, step=1) have the float32 arena's bits (measured: 0 of 442368
 * logits differ on SmolLM2 Q4_1); sgemm's do, so chunks of several rows differ from the arena
 * in most logits by a few ULP (SmolLM2 Q4_1, a 16-token prefill and 8 decode steps: 417419 of
 * 442368, max abs 5.5e-5 of logits up to 33). The tiles do not depend on the thread count, so
 * blas stays thread-invariant for a fixed chunk schedule; F32 weights are read in place
 * (stories260K: bits unchanged). */
#include "backend.h"
#include "kernel_isa.h"
#include "kvd_defects.h"
#include "kvd_engine.h"
#include "kvd_util.h"
#include "threadpool.h"

#include <cblas.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

static void blas_set_threads(const lm_backend *be)
{
    /* Not cached: anything else in the process (a benchmark, another context) may have
     * changed the global count since our last call. */
    openblas_set_num_threads(be->n_threads);
}

/* An empty sum is +0. OpenBLAS's sgemv returns without touching y when k == 0. */
static void zero_rows(float *c, uint32_t m, uint32_t n, size_t ldc)
{
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < n; ++j)
            c[(size_t)i * ldc + j] = 0.0f;
}

/* sgemm, or sgemv for one row, with OpenBLAS's current thread count: blas_gemm_nt after
 * setting the backend's, and one decoded tile of a weight in its file's type (weight_tiles.c,
 * on a pool thread) with the one OpenBLAS thread blas_tiles_begin set. */
static void blas_gemm_nt_tile(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                              const float *a /* [m][lda] */, size_t lda,
                              const float *b /* [n][ldb] */, size_t ldb,
                              float *c /* [m][ldc] */, size_t ldc)
{
    (void)be;
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        zero_rows(c, m, n, ldc);
        return;
    }
    if (m == 1) /* y[n] = alpha * B[n][k] . a[k] */
        cblas_sgemv(CblasRowMajor, CblasNoTrans, (blasint)n, (blasint)k, alpha, b, (blasint)ldb,
                    a, 1, 0.0f, c, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (blasint)m, (blasint)n, (blasint)k,
                    alpha, a, (blasint)lda, b, (blasint)ldb, 0.0f, c, (blasint)ldc);
}

static void blas_gemm_nt(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                         const float *a /* [m][lda] */, size_t lda,
                         const float *b /* [n][ldb] */, size_t ldb,
                         float *c /* [m][ldc] */, size_t ldc)
{
    blas_set_threads(be);
    blas_gemm_nt_tile(be, m, n, k, alpha, a, lda, b, ldb, c, ldc);
}

static void blas_gemm_nn(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                         const float *a /* [m][lda] */, size_t lda,
                         const float *b /* [k][ldb] */, size_t ldb,
                         float *c /* [m][ldc] */, size_t ldc)
{
    if (m == 0 || n == 0)
        return;
    if (k == 0) {
        zero_rows(c, m, n, ldc);
        return;
    }
    blas_set_threads(be);
    if (m == 1) /* y[n] = B[k][n]^T . a[k] */
        cblas_sgemv(CblasRowMajor, CblasTrans, (blasint)k, (blasint)n, 1.0f, b, (blasint)ldb,
                    a, 1, 0.0f, c, 1);
    else
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (blasint)m, (blasint)n, (blasint)k,
                    1.0f, a, (blasint)lda, b, (blasint)ldb, 0.0f, c, (blasint)ldc);
}

/* The pool's threads each call OpenBLAS at once: one OpenBLAS thread each (the global count;
 * the next blas_gemm_nt sets the backend's count again). */
static void blas_tiles_begin(lm_backend *be)
{
    (void)be;
    openblas_set_num_threads(1);
}

static void blas_destroy(lm_backend *be)
{
    lm_pool_free(be->pool);
    free(be);
}

static const lm_backend_i blas_vt = {
    .name = "blas",
    .gemm_nt = blas_gemm_nt,
    .gemm_nn = blas_gemm_nn,
    .gemm_nt_tile = blas_gemm_nt_tile,
    .tiles_begin = blas_tiles_begin,
    .destroy = blas_destroy,
};

#ifdef LM_TEST_HOOKS
static const char *test_core; /* lm_test_blas_core */
void lm_test_blas_core(const char *core)
{
    test_core = core;
}
#endif

/* openblas_get_corename(), or the test hook's name. */
static const char *core_name(void)
{
#ifdef LM_TEST_HOOKS
    if (test_core != NULL)
        return test_core;
#endif
    return openblas_get_corename();
}

/* The core (kernel set) OpenBLAS chose at run time, the instruction-set level its kernels need
 * against the CPU's, and when they are older the warning (kernel_isa.h): a DYNAMIC_ARCH
 * OpenBLAS that does not know the CPU falls back to old kernels without a word (Debian 12's
 * 0.3.21 runs Prescott's SSE3 kernels on CPUs newer than it). OPENBLAS_CORETYPE is read, to
 * name it as the cause when it is set, never written. */
void lm_backend_blas_kernels(lm_backend_kernels *out);
void lm_backend_blas_kernels(lm_backend_kernels *out)
{
    *out = (lm_backend_kernels){.older = false};
    lm_field_copy(out->name, sizeof out->name, core_name());
    const lm_isa_level k = lm_openblas_core_level(out->name), cpu = lm_cpu_isa_level();
    snprintf(out->isa, sizeof out->isa, "%s", lm_isa_level_name(k));
    snprintf(out->cpu_isa, sizeof out->cpu_isa, "%s", lm_isa_level_name(cpu));
    out->older = lm_openblas_warning(out->warning, sizeof out->warning, out->name, cpu,
                                     getenv("OPENBLAS_CORETYPE"));
}

/* What picks the bits here: OpenBLAS's build configuration and the core (kernel set) it chose
 * at run time (OPENBLAS_CORETYPE changes it). The thread count is a configuration axis, not a
 * platform part (sgemm was measured bitwise equal for 1 and 2 threads). The brief word is the
 * core, marked when its kernels are older than the CPU ("Prescott(sse3-kernels-on-avx512-cpu)");
 * the mark stays out of the full form, whose core name already separates goldens. */
void lm_backend_blas_describe(char *buf, size_t n, bool brief);
void lm_backend_blas_describe(char *buf, size_t n, bool brief)
{
    char config[192], core[64], mark[48];
    lm_field_copy(config, sizeof config, openblas_get_config());
    lm_field_copy(core, sizeof core, openblas_get_corename());
    if (brief) {
        lm_field_copy(core, sizeof core, core_name());
        lm_kernels_mark(mark, sizeof mark, lm_openblas_core_level(core), lm_cpu_isa_level());
        snprintf(buf, n, "%s%s", core, mark);
    } else
        snprintf(buf, n, "blas=%s; blas_core=%s", config, core);
}

int lm_backend_blas_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);
int lm_backend_blas_create(lm_backend **out, const char *spec, int n_threads, lm_err *err)
{
    (void)spec;
    lm_backend *be = calloc(1, sizeof *be);
    if (be == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "blas backend: out of memory");
    if (n_threads <= 0) { /* 0 = all online cores */
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)nc : 1;
    }
    be->vt = &blas_vt;
    be->n_threads = n_threads;
    /* the threads that decode and multiply the tiles of weights kept in their file's type
     * (weight_tiles.c); the forward pass's elementwise stages run on it too */
    int rc = lm_pool_create(&be->pool, n_threads, err);
    if (rc != LM_OK) {
        free(be);
        return rc;
    }
    *out = be;
    return LM_OK;
}
