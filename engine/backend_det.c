/* backend_det.c — the deterministic fast backend: the det kernels (det_kernels.h, where the
 * summation orders are stated) on the engine's one thread pool.
 *
 * Threading: a product is split into parts of output columns (gemm_nt: rows of B, the
 * weights, so each thread streams its own rows of the matrix; gemm_nn: columns of B, so each
 * thread packs only its own), which the pool's threads claim one after another (with many
 * rows of A, parts that shrink toward the end of the job: guided_claim), or, when
 * there are too few columns, into contiguous ranges of output rows; never along the
 * reduction, and each output element is computed by the same kernel code whichever thread
 * and tile it falls in. Results are therefore bitwise independent of the
 * thread count, of the prefill chunking and of decode (one row) vs prefill (many rows).
 * Products too small to repay a wake-up run on the calling thread (which changes no bit).
 *
 * The pool is the context's only pool: the forward pass runs its elementwise stages on it
 * too (lm_backend.pool), so no other threads compete with it. */
#include "backend.h"
#include "det_kernels.h"
#include "threadpool.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
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
    uint32_t part;     /* output columns per claimed part (guide 0) */
    uint32_t guide;    /* > 0: guided parts (guided_claim) instead */
    atomic_uint next;  /* the first output column no thread has claimed */
} det_job;

/* Many rows of A (prefill): parts shrink as the job runs out, so that the thread that finishes
 * first waits at most for a small last part instead of a fixed one. A thread claims the next
 * ceil(left / guide) columns (guide = 2 x threads) of the `left` unclaimed ones, rounded up to
 * a multiple of 24 (whole tiles), never past `bound` (the end of the claimed column's
 * product). Claims [*c0, *c1) from *next over columns [.., end); false when none is left. */
static bool guided_claim(atomic_uint *next, uint32_t end, uint32_t guide,
                         uint32_t (*bound)(const void *, uint32_t), const void *arg,
                         uint32_t *c0, uint32_t *c1)
{
    uint32_t s = atomic_load(next);
    do {
        if (s >= end)
            return false;
        const uint32_t left = end - s, b = bound != NULL ? bound(arg, s) : end;
        const uint32_t part = ((left + guide - 1) / guide + 23) / 24 * 24;
        *c1 = b - s < part ? b : s + part;
    } while (!atomic_compare_exchange_weak(next, &s, *c1));
    *c0 = s;
    return true;
}

/* Output columns [c0, c1) of gemm_nt (rows of B) or gemm_nn (columns of B). */
static void job_cols(const det_job *j, bool nn, uint32_t c0, uint32_t c1)
{
    if (nn)
        lm_det_gemm_nn(j->isa, j->m, c1 - c0, j->k, j->a, j->lda, j->b + c0, j->ldb, j->c + c0,
                       j->ldc);
    else
        lm_det_gemm_nt(j->isa, j->m, c1 - c0, j->k, j->alpha, j->a, j->lda,
                       j->b + (size_t)c0 * j->ldb, j->ldb, j->c + c0, j->ldc);
}

/* Each pool thread claims parts of j->part output columns (or guided parts) from j->next
 * until none is left, so a thread that the OS runs less (a loaded machine) takes fewer parts
 * instead of holding up the others; which thread computes a column changes none of its bits. */
static void claim_cols(det_job *j, bool nn)
{
    for (;;) {
        uint32_t c0, c1;
        if (j->guide > 0) {
            if (!guided_claim(&j->next, j->n, j->guide, NULL, NULL, &c0, &c1))
                return;
        } else {
            c0 = atomic_fetch_add(&j->next, j->part);
            if (c0 >= j->n)
                return;
            c1 = j->n - c0 < j->part ? j->n : c0 + j->part;
        }
        job_cols(j, nn, c0, c1);
    }
}

static void nt_cols(void *arg, uint32_t begin, uint32_t end)
{
    (void)begin, (void)end;
    claim_cols(arg, false);
}

static void nn_cols(void *arg, uint32_t begin, uint32_t end)
{
    (void)begin, (void)end;
    claim_cols(arg, true);
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

/* The pool for work of `macs` multiply-adds: none (the calling thread) below DET_MIN_FLOPS. */
static lm_pool *pool_for(const lm_backend *be, double macs)
{
    return macs >= DET_MIN_FLOPS ? be->pool : NULL;
}

/* Whether an m x n product is split by output columns (enough of them) rather than by rows. */
static bool split_by_cols(const lm_backend *be, uint32_t m, uint32_t n)
{
    return n >= 16 * (uint32_t)be->n_threads || n >= m;
}

/* The guide of guided_claim for a product with m rows of A: 0 (fixed parts) below
 * DET_GUIDED_M rows. */
#define DET_GUIDED_M 8u /* rows of A from which column parts are guided (guided_claim) */

static uint32_t guide_for(const lm_backend *be, uint32_t m)
{
    return m >= DET_GUIDED_M ? 2u * (uint32_t)be->n_threads : 0u;
}

/* Columns per claimed part of a product with few rows of A (fewer than DET_GUIDED_M): about
 * 4 parts per thread, a multiple of 24 (whole tiles of 3 and 8 rows of B). */
static uint32_t part_cols(const lm_backend *be, uint32_t n)
{
    const uint32_t parts = 4u * (uint32_t)be->n_threads;
    const uint32_t part = (n + parts - 1) / parts;
    return (part + 23) / 24 * 24;
}

/* Split by output columns (claimed in parts) when there are enough of them, else by rows. */
static void det_split(lm_backend *be, det_job *j, lm_pool_fn cols, lm_pool_fn rows)
{
    lm_pool *p = pool_for(be, (double)j->m * j->n * j->k);
    if (split_by_cols(be, j->m, j->n)) {
        j->part = part_cols(be, j->n);
        j->guide = guide_for(be, j->m);
        atomic_init(&j->next, 0);
        lm_pool_for(p, (uint32_t)be->n_threads, 1, cols, j);
    } else {
        lm_pool_for(p, j->m, 1, rows, j);
    }
}

static void det_gemm_nt(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                        const float *a /* [m][lda] */, size_t lda,
                        const float *b /* [n][ldb] */, size_t ldb,
                        float *c /* [m][ldc] */, size_t ldc)
{
    det_job j = {((det_backend *)be)->isa, m, n, k, alpha, a, b, lda, ldb, ldc, c, 0, 0, 0};
    det_split(be, &j, nt_cols, nt_rows);
}

static void det_gemm_nn(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                        const float *a /* [m][lda] */, size_t lda,
                        const float *b /* [k][ldb] */, size_t ldb,
                        float *c /* [m][ldc] */, size_t ldc)
{
    det_job j = {((det_backend *)be)->isa, m, n, k, 1.0f, a, b, lda, ldb, ldc, c, 0, 0, 0};
    det_split(be, &j, nn_cols, nn_rows);
}

/* A batch of gemm_nt products sharing A (lm_backend_i.gemm_nt_batch) as one job: each
 * product is cut into parts of columns as det_split cuts it alone, and the pool's threads
 * claim the parts of all the products from one counter, so a thread that finishes one
 * product's parts goes on with the next product's instead of waiting. Each part is the
 * kernel call det_split would make for it: the same bits. */
typedef struct det_batch {
    lm_det_isa isa;
    uint32_t m, k;
    float alpha;
    const float *a;
    size_t lda;
    const lm_nt_part *p;
    uint32_t count;
    /* product i's parts are [first[i], first[i + 1]); guided (guide > 0): its columns, counted
     * over the products one after the other */
    uint32_t first[LM_NT_BATCH_MAX + 1];
    uint32_t part[LM_NT_BATCH_MAX];      /* output columns per part of product i (guide 0) */
    uint32_t guide;                      /* > 0: guided parts (guided_claim) */
    atomic_uint next;                    /* the first part (guided: column) not claimed */
} det_batch;

/* The product holding part (guided: column) g of the batch. */
static uint32_t batch_product(const det_batch *j, uint32_t g)
{
    uint32_t i = 0;
    while (g >= j->first[i + 1])
        ++i;
    return i;
}

/* Guided parts stop at the end of their product. */
static uint32_t batch_bound(const void *arg, uint32_t g)
{
    const det_batch *j = arg;
    return j->first[batch_product(j, g) + 1];
}

static void batch_parts(void *arg, uint32_t begin, uint32_t end)
{
    (void)begin, (void)end;
    det_batch *j = arg;
    for (;;) {
        uint32_t i, c0, c1;
        if (j->guide > 0) {
            uint32_t g0, g1;
            if (!guided_claim(&j->next, j->first[j->count], j->guide, batch_bound, j, &g0, &g1))
                return;
            i = batch_product(j, g0);
            c0 = g0 - j->first[i], c1 = g1 - j->first[i];
        } else {
            const uint32_t g = atomic_fetch_add(&j->next, 1);
            if (g >= j->first[j->count])
                return;
            i = batch_product(j, g);
            c0 = (g - j->first[i]) * j->part[i];
            c1 = j->p[i].n - c0 < j->part[i] ? j->p[i].n : c0 + j->part[i];
        }
        const lm_nt_part *p = &j->p[i];
        lm_det_gemm_nt(j->isa, j->m, c1 - c0, j->k, j->alpha, j->a, j->lda,
                       p->b + (size_t)c0 * p->ldb, p->ldb, p->c + c0, p->ldc);
    }
}

static void det_gemm_nt_batch(lm_backend *be, uint32_t m, uint32_t k, float alpha,
                              const float *a /* [m][lda] */, size_t lda, const lm_nt_part *p,
                              uint32_t count)
{
    det_batch j = {.isa = ((det_backend *)be)->isa, .m = m, .k = k, .alpha = alpha, .a = a,
                   .lda = lda, .p = p, .count = count};
    double macs = 0.0;
    bool cols = count <= LM_NT_BATCH_MAX;
    for (uint32_t i = 0; i < count && cols; ++i) {
        cols = p[i].n > 0 && split_by_cols(be, m, p[i].n);
        macs += (double)m * p[i].n * k;
    }
    if (!cols || m == 0) { /* a product split by rows: one job each, as alone */
        for (uint32_t i = 0; i < count; ++i)
            det_gemm_nt(be, m, p[i].n, k, alpha, a, lda, p[i].b, p[i].ldb, p[i].c, p[i].ldc);
        return;
    }
    j.guide = guide_for(be, m);
    for (uint32_t i = 0; i < count; ++i) {
        j.part[i] = part_cols(be, p[i].n);
        j.first[i + 1] = j.first[i] + (j.guide > 0 ? p[i].n : (p[i].n + j.part[i] - 1) / j.part[i]);
    }
    atomic_init(&j.next, 0);
    lm_pool_for(pool_for(be, macs), (uint32_t)be->n_threads, 1, batch_parts, &j);
}

/* The same products on the calling thread only (lm_backend_i.gemm_nt_local, gemm_nn_local). */
static void det_gemm_nt_local(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                              const float *a /* [m][lda] */, size_t lda,
                              const float *b /* [n][ldb] */, size_t ldb,
                              float *c /* [m][ldc] */, size_t ldc)
{
    lm_det_gemm_nt(((det_backend *)be)->isa, m, n, k, alpha, a, lda, b, ldb, c, ldc);
}

static void det_gemm_nn_local(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                              const float *a /* [m][lda] */, size_t lda,
                              const float *b /* [k][ldb] */, size_t ldb,
                              float *c /* [m][ldc] */, size_t ldc)
{
    lm_det_gemm_nn(((det_backend *)be)->isa, m, n, k, a, lda, b, ldb, c, ldc);
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
    .gemm_nt_local = det_gemm_nt_local,
    .gemm_nn_local = det_gemm_nn_local,
    .gemm_nt_batch = det_gemm_nt_batch,
    .destroy = det_destroy,
};

/* The kernel path: $KVDRIFT_DET_ISA (scalar, avx2 or avx512; a path the CPU lacks is an
 * error) when set and not empty, else the best the CPU has. Forcing a path must not change a
 * bit: that is how an AVX-512 machine checks the AVX2 path (and the scalar one). */
static int det_isa(lm_det_isa *isa, lm_err *err)
{
    const lm_det_isa best = lm_det_isa_best();
    const char *e = getenv("KVDRIFT_DET_ISA");
    *isa = best;
    if (e == NULL || *e == '\0')
        return LM_OK;
    const int forced = lm_det_isa_parse(e);
    if (forced < 0)
        return LM_FAIL(err, LM_E_INPUT, "KVDRIFT_DET_ISA=%s: expected scalar, avx2 or avx512", e);
    if (forced > (int)best)
        return LM_FAIL(err, LM_E_INPUT, "KVDRIFT_DET_ISA=%s: this CPU has no %s (best: %s)", e, e,
                       lm_det_isa_name(best));
    *isa = (lm_det_isa)forced;
    return LM_OK;
}

/* Nothing on the machine decides det's bits (every path computes the same order with the
 * same IEEE operations), so the full form adds nothing to the platform key; the brief form
 * names the path this process runs. */
void lm_backend_det_describe(char *buf, size_t n, bool brief);
void lm_backend_det_describe(char *buf, size_t n, bool brief)
{
    lm_det_isa isa;
    lm_err err = {0};
    if (!brief)
        snprintf(buf, n, "%s", "");
    else if (det_isa(&isa, &err) == LM_OK)
        snprintf(buf, n, "det=%s", lm_det_isa_name(isa));
    else
        snprintf(buf, n, "det=invalid-isa");
}

int lm_backend_det_create(lm_backend **out, const char *spec, int n_threads, lm_err *err);
int lm_backend_det_create(lm_backend **out, const char *spec, int n_threads, lm_err *err)
{
    (void)spec;
    lm_det_isa isa;
    int rc = det_isa(&isa, err);
    if (rc != LM_OK)
        return rc;
    det_backend *d = calloc(1, sizeof *d);
    if (d == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "det backend: out of memory");
    if (n_threads <= 0) { /* 0 = all online cores */
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)nc : 1;
    }
    d->isa = isa;
    d->base.vt = &det_vt;
    d->base.n_threads = n_threads;
    if ((rc = lm_pool_create(&d->base.pool, n_threads, err)) != LM_OK) {
        free(d);
        return rc;
    }
    *out = &d->base;
    return LM_OK;
}
