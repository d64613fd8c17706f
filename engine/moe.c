/* moe.c — mixture-of-experts FFN: router top-k, gating variants, SwiGLU experts (orders and
 * rules in moe.h). */
#include "moe.h"

#include "expf.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* a ranks before b: larger logit first, NaN last, equal -> lower id. */
static int ranks_before(float la, uint32_t a, float lb, uint32_t b)
{
    if (isnan(la) != isnan(lb))
        return !isnan(la);
    if (!isnan(la) && la != lb)
        return la > lb;
    return a < b;
}

void lm_moe_topk(uint32_t *sel, const float *logits, uint32_t n_expert, uint32_t k)
{
    LM_ASSERT(k <= n_expert && k <= LM_MOE_MAX_USED);
    uint32_t n_sel = 0;
    /* insertion into a sorted list of at most k: k is small (<= 32) */
    for (uint32_t e = 0; e < n_expert; ++e) {
        uint32_t at = n_sel;
        while (at > 0 && ranks_before(logits[e], e, logits[sel[at - 1]], sel[at - 1]))
            --at;
        if (at >= k)
            continue;
        const uint32_t last = n_sel < k ? n_sel : k - 1;
        for (uint32_t r = last; r > at; --r)
            sel[r] = sel[r - 1];
        sel[at] = e;
        if (n_sel < k)
            ++n_sel;
    }
}

float lm_moe_margin(const float *logits, uint32_t n_expert, const uint32_t *sel, uint32_t k)
{
    if (k == 0 || k >= n_expert)
        return INFINITY;
    float best_out = -INFINITY;
    for (uint32_t e = 0; e < n_expert; ++e) {
        bool chosen = false;
        for (uint32_t r = 0; r < k; ++r)
            chosen = chosen || sel[r] == e;
        if (!chosen && logits[e] > best_out)
            best_out = logits[e];
    }
    return logits[sel[k - 1]] - best_out;
}

void lm_moe_gate(float *w, const float *logits, uint32_t n_expert, const uint32_t *sel,
                 uint32_t k, lm_moe_gating gating)
{
    const float mx = logits[sel[0]]; /* the largest logit overall and among the selected */
    if (gating == LM_MOE_SOFTMAX_TOPK) {
        float sum = 0.0f;
        for (uint32_t r = 0; r < k; ++r) {
            w[r] = lm_expf(logits[sel[r]] - mx);
            sum += w[r];
        }
        for (uint32_t r = 0; r < k; ++r)
            w[r] = w[r] / sum;
        return;
    }
    float den = 0.0f;
    for (uint32_t e = 0; e < n_expert; ++e)
        den += lm_expf(logits[e] - mx);
    for (uint32_t r = 0; r < k; ++r)
        w[r] = lm_expf(logits[sel[r]] - mx) / den;
    if (gating == LM_MOE_SOFTMAX_ALL_RENORM) {
        float sum = 0.0f;
        for (uint32_t r = 0; r < k; ++r)
            sum += w[r];
        for (uint32_t r = 0; r < k; ++r)
            w[r] = w[r] / sum;
    }
}

size_t lm_moe_scratch(uint32_t n, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert,
                      uint32_t n_used)
{
    /* router [n][n_expert], gates [n][k], X_e [n][n_embd], G and U [n][n_ff],
     * Y_e [n][n_embd], per-rank outputs [n][k][n_embd], row index of each token [n], a
     * product's converted input [n][max(n_embd, n_ff)] */
    return (size_t)n * n_expert + (size_t)n * n_used + 2 * (size_t)n * n_embd +
           2 * (size_t)n * n_ff + (size_t)n * n_used * n_embd + n +
           (size_t)n * (n_embd > n_ff ? n_embd : n_ff);
}

void lm_moe_forward(lm_backend *be, const lm_moe_args *a)
{
    const uint32_t n = a->n, d = a->n_embd, ff = a->n_ff, ne = a->n_expert, k = a->n_used;
    LM_ASSERT(a->scratch_floats >= lm_moe_scratch(n, d, ff, ne, k));
    LM_ASSERT(k >= 1 && k <= ne && k <= LM_MOE_MAX_USED);
    float *router = a->scratch;                 /* [n][n_expert] */
    float *gates = router + (size_t)n * ne;     /* [n][k] */
    float *xe = gates + (size_t)n * k;          /* [m_e][n_embd] gathered rows */
    float *g = xe + (size_t)n * d;              /* [m_e][n_ff] */
    float *u = g + (size_t)n * ff;              /* [m_e][n_ff] */
    float *ye = u + (size_t)n * ff;             /* [m_e][n_embd] */
    float *yk = ye + (size_t)n * d;             /* [n][k][n_embd] output of each rank */
    uint32_t *rows = (uint32_t *)(void *)(yk + (size_t)n * k * d); /* [m_e] token of each row */
    float *act_in = (float *)(void *)(rows + n); /* [m][max(n_embd, n_ff)] */
    const lm_round_spec *const *act = a->in_fmt;

    const lm_nt_part pr = lm_nt_weight(a->w_router, 0, ne, d, router, ne);
    lm_gemm_nt_act(be, LM_SITE_NORM, n, d, a->x, d, &pr, act, 1, act_in);
    if (a->b_router != NULL)
        lm_add_bias(router, a->b_router, n, ne, ne);
    for (uint32_t t = 0; t < n; ++t) {
        const float *rt = router + (size_t)t * ne;
        uint32_t *st = a->sel + (size_t)t * k;
        lm_moe_topk(st, rt, ne, k);
        lm_moe_gate(gates + (size_t)t * k, rt, ne, st, k, a->gating);
        if (a->margin != NULL)
            a->margin[t] = lm_moe_margin(rt, ne, st, k);
    }
    lm_backend_perturb(be, gates, n, k, k, LM_SITE_MOE_GATES); /* SR ensemble and profiles */
    for (uint32_t e = 0; e < ne; ++e) {
        uint32_t m = 0;
        for (uint32_t t = 0; t < n; ++t)
            for (uint32_t r = 0; r < k; ++r)
                if (a->sel[(size_t)t * k + r] == e) {
                    memcpy(xe + (size_t)m * d, a->x + (size_t)t * d, d * sizeof(float));
                    rows[m++] = t * k + r; /* token t, rank r */
                }
        if (m == 0)
            continue;
        /* expert e's rows: [n_ff][n_embd] of gate and up, [n_embd][n_ff] of down */
        const lm_nt_part gu[2] = {lm_nt_weight(a->w_gate, (uint64_t)e * ff, ff, d, g, ff),
                                  lm_nt_weight(a->w_up, (uint64_t)e * ff, ff, d, u, ff)};
        lm_gemm_nt_act(be, LM_SITE_NORM, m, d, xe, d, gu, act ? act + 1 : NULL, 2, act_in);
        if (a->b_gate != NULL)
            lm_add_bias(g, a->b_gate + (size_t)e * ff, m, ff, ff);
        if (a->b_up != NULL)
            lm_add_bias(u, a->b_up + (size_t)e * ff, m, ff, ff);
        lm_glu(g, u, (size_t)m * ff, a->act);
        /* SR ensemble and profiles: the down projection's input, as the dense FFN's */
        lm_backend_perturb(be, g, m, ff, ff, LM_SITE_SWIGLU);
        const lm_nt_part dn = lm_nt_weight(a->w_down, (uint64_t)e * d, d, ff, ye, d);
        lm_gemm_nt_act(be, LM_SITE_SWIGLU, m, ff, g, ff, &dn, act ? act + 3 : NULL, 1, act_in);
        if (a->b_down != NULL)
            lm_add_bias(ye, a->b_down + (size_t)e * d, m, d, d);
        for (uint32_t i = 0; i < m; ++i)
            memcpy(yk + (size_t)rows[i] * d, ye + (size_t)i * d, d * sizeof(float));
    }
    for (uint32_t t = 0; t < n; ++t) {
        float *o = a->out + (size_t)t * d;
        for (uint32_t i = 0; i < d; ++i)
            o[i] = 0.0f;
        for (uint32_t r = 0; r < k; ++r) {
            const float w = gates[(size_t)t * k + r];
            const float *y = yk + ((size_t)t * k + r) * d;
            for (uint32_t i = 0; i < d; ++i)
                o[i] += w * y[i];
        }
    }
    lm_backend_perturb(be, a->out, n, d, d, LM_SITE_MOE_SUM); /* SR ensemble and profiles */
}
