/* backend_det.c — the deterministic fast backend: the det kernels (det_kernels.h, where the
 * summation orders are stated) on the engine's one thread pool.
 *
 * Threading: a product is split into parts of output columns (gemm_nt: rows of B, the
 * weights, so each thread streams its own rows of the matrix; gemm_nn: columns of B, so each
 * thread packs only its own), which the pool's threads claim one after another (one row of
 * A, or at least DET_PACK_MIN_M rows: parts that shrink as the columns run out; 2 to
 * DET_PACK_MIN_M - 1 rows: parts of one size), or, when
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
#include "kernel_isa.h"
#include "kvd_engine.h"
#include "threadpool.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>


typedef struct det_backend {
    lm_backend base;
    lm_det_isa isa;
} det_backend;

/* Parts of the output columns of up to LM_NT_BATCH_MAX products, numbered one after the
 * other (product i's columns are [first[i], first[i + 1])), which the pool's threads claim
 * from one counter: a thread that the OS runs less (a loaded machine) takes fewer parts
 * instead of holding up the others, and a thread that finishes one product's parts goes on
 * with the next product's. A part never spans two products. Which thread computes a column,
 * and in which part, changes none of its bits. */
typedef struct det_claims {
    uint32_t count;
    uint32_t first[LM_NT_BATCH_MAX + 1];
    uint32_t part[LM_NT_BATCH_MAX]; /* columns per part of product i; 0: shrinking parts */
    uint32_t shrink;                /* shrinking parts: the columns left divided by this */
    atomic_uint next;               /* the first column no thread has claimed */
} det_claims;

#define DET_MIN_PART 24u /* columns of the smallest shrinking part (whole tiles of 3, 6 and 8) */

/* Claims the next part: product *i, its columns [*c0, *c1); false when none is left. A
 * product with part[i] = 0 (one row of A: decode, bound by reading B; or many rows: prefill,
 * parts of many multiply-adds each) gets parts of the columns left (of the whole batch) /
 * shrink, rounded up to a multiple of DET_MIN_PART: long streams first, then smaller and
 * smaller parts, so that the threads finish within about one small part of each other. */
static bool claim_part(det_claims *cl, uint32_t *i, uint32_t *c0, uint32_t *c1)
{
    const uint32_t end = cl->first[cl->count];
    uint32_t c = atomic_load_explicit(&cl->next, memory_order_relaxed);
    for (;;) {
        if (c >= end)
            return false;
        uint32_t p = 0;
        while (c >= cl->first[p + 1])
            ++p;
        uint32_t size = cl->part[p];
        if (size == 0) {
            size = ((end - c) / cl->shrink + DET_MIN_PART - 1) / DET_MIN_PART * DET_MIN_PART;
            size = size < DET_MIN_PART ? DET_MIN_PART : size;
        }
        const uint32_t e = cl->first[p + 1] - c < size ? cl->first[p + 1] : c + size;
        if (atomic_compare_exchange_weak_explicit(&cl->next, &c, e, memory_order_relaxed,
                                                  memory_order_relaxed)) {
            *i = p;
            *c0 = c - cl->first[p];
            *c1 = e - cl->first[p];
            return true;
        }
    }
}

/* The pool for work of `macs` multiply-adds: none (the calling thread) below LM_POOL_MIN_MACS. */
static lm_pool *pool_for(const lm_backend *be, double macs)
{
    return macs >= LM_POOL_MIN_MACS ? be->pool : NULL;
}

/* Whether an m x n product is split by output columns (enough of them) rather than by rows. */
static bool split_by_cols(const lm_backend *be, uint32_t m, uint32_t n)
{
    return n >= 16 * (uint32_t)be->n_threads || n >= m;
}

/* Columns per claimed part: 0 (shrinking parts) for one row of A and for DET_PACK_MIN_M rows
 * or more; else about 4 parts per thread, a multiple of 24 (whole tiles of 3 and 8 rows of
 * B). */
static uint32_t part_cols(const lm_backend *be, uint32_t m, uint32_t n)
{
    if (m == 1 || m >= DET_PACK_MIN_M)
        return 0;
    const uint32_t parts = 4u * (uint32_t)be->n_threads;
    const uint32_t part = (n + parts - 1) / parts;
    return (part + 23) / 24 * 24;
}

/* claim_part's parts of count products, product i with p[i].n output columns. */
static void claims_init(const lm_backend *be, det_claims *cl, uint32_t m, const lm_nt_part *p,
                        uint32_t count)
{
    cl->count = count;
    cl->first[0] = 0;
    for (uint32_t i = 0; i < count; ++i) {
        cl->part[i] = part_cols(be, m, p[i].n);
        cl->first[i + 1] = cl->first[i] + p[i].n;
    }
    cl->shrink = 2u * (uint32_t)be->n_threads;
    atomic_init(&cl->next, 0);
}

/* gemm_nt products sharing A [m][lda], or one gemm_nn product, split by output columns. */
typedef struct det_job {
    lm_det_isa isa;
    bool nn;
    uint32_t m, k;
    float alpha;
    const float *a;
    size_t lda;
    const lm_nt_part *p; /* [claims.count]; for gemm_nn, b is [k][ldb] and columns are b + j */
    det_claims claims;
} det_job;

static void job_cols(void *arg, uint32_t begin, uint32_t end)
{
    (void)begin, (void)end;
    det_job *j = arg;
    uint32_t i, c0, c1;
    while (claim_part(&j->claims, &i, &c0, &c1)) {
        const lm_nt_part *p = &j->p[i];
        if (j->nn)
            lm_det_gemm_nn(j->isa, j->m, c1 - c0, j->k, j->a, j->lda, p->b + c0, p->ldb,
                           p->c + c0, p->ldc);
        else
            lm_det_gemm_nt(j->isa, j->m, c1 - c0, j->k, j->alpha, j->a, j->lda,
                           p->b + (size_t)c0 * p->ldb, p->ldb, p->c + c0, p->ldc);
    }
}

/* gemm_nt over output rows [begin, end) (rows of A): when B has too few rows to split. */
static void nt_rows(void *arg, uint32_t begin, uint32_t end)
{
    const det_job *j = arg;
    const lm_nt_part *p = &j->p[0];
    lm_det_gemm_nt(j->isa, end - begin, p->n, j->k, j->alpha, j->a + (size_t)begin * j->lda,
                   j->lda, p->b, p->ldb, p->c + (size_t)begin * p->ldc, p->ldc);
}

/* gemm_nn over output rows [begin, end). */
static void nn_rows(void *arg, uint32_t begin, uint32_t end)
{
    const det_job *j = arg;
    const lm_nt_part *p = &j->p[0];
    lm_det_gemm_nn(j->isa, end - begin, p->n, j->k, j->a + (size_t)begin * j->lda, j->lda, p->b,
                   p->ldb, p->c + (size_t)begin * p->ldc, p->ldc);
}

/* One product: split by output columns (claimed in parts) when there are enough of them,
 * else by rows. */
static void det_split(lm_backend *be, det_job *j)
{
    const lm_nt_part *p = &j->p[0];
    lm_pool *pool = pool_for(be, (double)j->m * p->n * j->k);
    if (split_by_cols(be, j->m, p->n)) {
        claims_init(be, &j->claims, j->m, p, 1);
        lm_pool_for(pool, (uint32_t)be->n_threads, 1, job_cols, j);
    } else {
        lm_pool_for(pool, j->m, 1, j->nn ? nn_rows : nt_rows, j);
    }
}

static void det_gemm_nt(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                        const float *a /* [m][lda] */, size_t lda,
                        const float *b /* [n][ldb] */, size_t ldb,
                        float *c /* [m][ldc] */, size_t ldc)
{
    const lm_nt_part p = {n, b, ldb, c, ldc, {0}};
    det_job j = {.isa = ((det_backend *)be)->isa, .m = m, .k = k, .alpha = alpha, .a = a,
                 .lda = lda, .p = &p};
    det_split(be, &j);
}

static void det_gemm_nn(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                        const float *a /* [m][lda] */, size_t lda,
                        const float *b /* [k][ldb] */, size_t ldb,
                        float *c /* [m][ldc] */, size_t ldc)
{
    const lm_nt_part p = {n, b, ldb, c, ldc, {0}};
    det_job j = {.isa = ((det_backend *)be)->isa, .nn = true, .m = m, .k = k, .alpha = 1.0f,
                 .a = a, .lda = lda, .p = &p};
    det_split(be, &j);
}

/* A batch of gemm_nt products sharing A (lm_backend_i.gemm_nt_batch) as one job: each
 * product is cut into parts of columns as det_split cuts it alone, and the pool's threads
 * claim the parts of all the products from one counter (det_claims). Each part is the kernel
 * call det_split would make for it: the same bits. */
static void det_gemm_nt_batch(lm_backend *be, uint32_t m, uint32_t k, float alpha,
                              const float *a /* [m][lda] */, size_t lda, const lm_nt_part *p,
                              uint32_t count)
{
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
    det_job j = {.isa = ((det_backend *)be)->isa, .m = m, .k = k, .alpha = alpha, .a = a,
                 .lda = lda, .p = p};
    claims_init(be, &j.claims, m, p, count);
    lm_pool_for(pool_for(be, macs), (uint32_t)be->n_threads, 1, job_cols, &j);
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

/* det's kernels are its own: the path this process runs ("avx512", "avx2", "scalar"), never
 * older than the CPU unless KVDRIFT_DET_ISA asks for it (then no warning: the user chose it). */
void lm_backend_det_kernels(lm_backend_kernels *out);
void lm_backend_det_kernels(lm_backend_kernels *out)
{
    *out = (lm_backend_kernels){.older = false};
    lm_det_isa isa;
    lm_err err = {0};
    const bool ok = det_isa(&isa, &err) == LM_OK;
    snprintf(out->name, sizeof out->name, "%s", ok ? lm_det_isa_name(isa) : "invalid-isa");
    snprintf(out->isa, sizeof out->isa, "%s",
             ok && isa != LM_DET_SCALAR ? lm_det_isa_name(isa) : "unknown");
    snprintf(out->cpu_isa, sizeof out->cpu_isa, "%s", lm_isa_level_name(lm_cpu_isa_level()));
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
