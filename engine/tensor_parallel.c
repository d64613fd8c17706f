/* tensor_parallel.c — column- and row-parallel weight products (contract in
 * tensor_parallel.h). */
#include "tensor_parallel.h"

#include "kvd_defects.h"

/* Shard s of n over len items: [*lo, *hi). */
static void shard(uint32_t len, uint32_t n, uint32_t s, uint32_t *lo, uint32_t *hi)
{
    *lo = (uint32_t)((uint64_t)len * s / n);
    *hi = (uint32_t)((uint64_t)len * (s + 1) / n);
}

void lm_tp_gemm_cols(lm_backend *be, const lm_tp *tp, uint32_t site, uint32_t m, uint32_t k,
                     const float *a, size_t lda, const lm_nt_part *p,
                     const lm_round_spec *const *act, uint32_t count, float *scratch)
{
    if (tp->n <= 1) {
        lm_gemm_nt_act(be, site, m, k, a, lda, p, act, count, scratch);
        return;
    }
    for (uint32_t s = 0; s < tp->n; ++s) {
        lm_nt_part q[LM_NT_BATCH_MAX];
        for (uint32_t i = 0; i < count; ++i) {
            uint32_t lo, hi;
            shard(p[i].n, tp->n, s, &lo, &hi);
            /* test defect: the last shard's weight rows taken one row early */
            const uint32_t w0 = s + 1 == tp->n && lo > 0 &&
                                        LM_DEFECT_ON(be->vt->name, LM_DEFECT_TP_COLS_SHIFTED)
                                    ? lo - 1
                                    : lo;
            q[i] = lm_nt_sub(&p[i], w0, 0, hi - lo, p[i].c + lo, p[i].ldc);
        }
        lm_gemm_nt_act(be, site, m, k, a, lda, q, act, count, scratch);
    }
}

/* The all-reduce of partials [n][len] (flattened results) into element e of the result. */
static float ring_sum(const float *partials, size_t len, uint32_t n, uint32_t chunk, size_t e,
                      bool skip_last)
{
    float acc = partials[(size_t)chunk * len + e];
    for (uint32_t j = 1; j < n; ++j) {
        if (skip_last && j + 1 == n)
            break; /* test defect: the ring's last hop lost */
        acc += partials[(size_t)((chunk + j) % n) * len + e];
    }
    return acc;
}

static float tree_sum(const float *partials, size_t len, uint32_t lo, uint32_t hi, size_t e)
{
    if (hi - lo == 1)
        return partials[(size_t)lo * len + e];
    const uint32_t mid = lo + (hi - lo) / 2;
    return tree_sum(partials, len, lo, mid, e) + tree_sum(partials, len, mid, hi, e);
}

void lm_tp_gemm_rows(lm_backend *be, const lm_tp *tp, uint32_t site, uint32_t m, uint32_t k,
                     const float *a, size_t lda, const lm_nt_part *p, const lm_round_spec *act,
                     float *scratch, float *partials)
{
    const lm_round_spec *const *acts = act != NULL ? &act : NULL;
    const size_t len = (size_t)m * p->n; /* one shard's [m][n_out] */
    if (tp->reduce == LM_TP_FIXED) {
        /* every leaf its own product, whichever shard holds it; then the fixed tree */
        for (uint32_t l = 0; l < LM_TP_MAX; ++l) {
            uint32_t lo, hi;
            shard(k, LM_TP_MAX, l, &lo, &hi);
            const lm_nt_part q = lm_nt_sub(p, 0, lo, p->n, partials + (size_t)l * len, p->n);
            lm_gemm_nt_act(be, site, m, hi - lo, a + lo, lda, &q, acts, 1, scratch);
        }
        for (size_t e = 0; e < len; ++e)
            p->c[(e / p->n) * p->ldc + e % p->n] = tree_sum(partials, len, 0, LM_TP_MAX, e);
        return;
    }
    if (tp->n <= 1) {
        lm_gemm_nt_act(be, site, m, k, a, lda, p, acts, 1, scratch);
        return;
    }
    const bool skewed = LM_DEFECT_ON(be->vt->name, LM_DEFECT_TP_ROWS_MISALIGNED);
    for (uint32_t s = 0; s < tp->n; ++s) {
        uint32_t lo, hi;
        shard(k, tp->n, s, &lo, &hi);
        /* test defect: shards after the first read their weight columns one column late */
        const uint32_t w0 = skewed && s > 0 && hi < k ? lo + 1 : lo;
        const lm_nt_part q = lm_nt_sub(p, 0, w0, p->n, partials + (size_t)s * len, p->n);
        lm_gemm_nt_act(be, site, m, hi - lo, a + lo, lda, &q, acts, 1, scratch);
    }
    const bool skip_last = LM_DEFECT_ON(be->vt->name, LM_DEFECT_TP_RING_SKIPS_LAST);
    for (uint32_t c = 0; c < tp->n; ++c) {
        size_t e0 = len * c / tp->n, e1 = len * (c + 1) / tp->n;
        for (size_t e = e0; e < e1; ++e) {
            const float v = tp->reduce == LM_TP_TREE ? tree_sum(partials, len, 0, tp->n, e)
                                                     : ring_sum(partials, len, tp->n, c, e, skip_last);
            p->c[(e / p->n) * p->ldc + e % p->n] = v;
        }
    }
}
