/* compare_topk.c — top-k rows against the reference and the envelope (contract in
 * compare_topk.h). */
#include "judge/compare_topk.h"

#include "kvd_util.h"
#include "model/classify.h"
#include "model/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double hx_kl_lower_topk(const double *r_lp, size_t nv, const int32_t *ids, const float *lp,
                        size_t k)
{
    if (k == 0)
        return 0.0;
    double kl = 0.0, p_s = 0.0, q_s = 0.0;
    for (size_t j = 0; j < k; ++j) {
        const double p = exp(r_lp[ids[j]]), q = exp((double)lp[j]);
        p_s += p;
        q_s += q;
        if (p > 0.0)
            kl += p * (r_lp[ids[j]] - (double)lp[j]);
    }
    /* the rest's mass of P summed directly: 1 - p_s loses its digits when p_s is near 1 */
    double p_rest = 0.0;
    uint8_t *in = calloc(nv ? nv : 1, 1);
    if (in == NULL)
        return 0.0; /* no bound is a valid lower bound */
    for (size_t j = 0; j < k; ++j)
        in[ids[j]] = 1;
    for (size_t v = 0; v < nv; ++v)
        if (!in[v])
            p_rest += exp(r_lp[v]);
    free(in);
    const double q_rest = fmax(0.0, 1.0 - q_s) + (double)nv * 0x1p-23;
    if (p_rest > 0.0)
        kl += p_rest * log(p_rest / q_rest);
    return kl > 0.0 ? kl : 0.0;
}

/* Row i of d: its ids and values, sorted by id (distinct ids; -1 entries dropped). */
static size_t row_entries(int32_t *ids, float *lp, const hx_dump *d, uint32_t i)
{
    size_t k = 0;
    for (uint32_t j = 0; j < d->topk; ++j) {
        int32_t id = d->topk_ids[(size_t)i * d->topk + j];
        if (id < 0)
            continue;
        size_t at = k;
        while (at > 0 && ids[at - 1] > id) {
            ids[at] = ids[at - 1];
            lp[at] = lp[at - 1];
            --at;
        }
        ids[at] = id;
        lp[at] = d->rows[(size_t)i * d->n_vocab + (uint32_t)id];
        ++k;
    }
    return k;
}

bool hx_topk_row_same_bits(const hx_dump *d, uint32_t i, const hx_dump *base, double *max_abs)
{
    if (base == NULL)
        return false;
    const int64_t bi = lm_index_of_u32(base->positions, base->n_pos, d->positions[i]);
    if (bi < 0)
        return false;
    int32_t ids[HX_TOPK_ROW_MAX], bids[HX_TOPK_ROW_MAX];
    float lp[HX_TOPK_ROW_MAX], blp[HX_TOPK_ROW_MAX];
    const size_t k = row_entries(ids, lp, d, i), bk = row_entries(bids, blp, base, (uint32_t)bi);
    /* both lists are sorted by id: a merge pairs the ids both rows hold */
    for (size_t a = 0, b = 0; max_abs != NULL && a < k && b < bk;) {
        if (ids[a] == bids[b]) {
            *max_abs = fmax(*max_abs, fabs((double)lp[a] - (double)blp[b]));
            ++a, ++b;
        } else if (ids[a] < bids[b]) {
            ++a;
        } else {
            ++b;
        }
    }
    return bk == k && memcmp(bids, ids, k * sizeof *ids) == 0 &&
           memcmp(blp, lp, k * sizeof *lp) == 0;
}

/* R's two best ids of row r [nv] (second -1 when nv == 1). */
static void top2(int32_t *a, int32_t *b, const double *r, size_t nv)
{
    *a = hx_argmax_f64(r, nv);
    *b = -1;
    for (size_t v = 0; v < nv; ++v)
        if ((int32_t)v != *a && (*b < 0 || r[v] > r[*b]))
            *b = (int32_t)v;
}

static int one_row(hx_config_report *c, hx_topk_summary *sum, const hx_dump *d, uint32_t i,
                   const hx_dump *base, const double *r, const hx_env_tensor *et, bool *bitwise,
                   lm_err *err)
{
    const size_t nv = d->n_vocab;
    int32_t ids[HX_TOPK_ROW_MAX];
    float lp[HX_TOPK_ROW_MAX];
    double rs[HX_TOPK_ROW_MAX];
    const size_t k = row_entries(ids, lp, d, i);
    for (size_t j = 0; j < k; ++j)
        rs[j] = r[ids[j]];
    hx_tensor_row row = {0};
    snprintf(row.name, sizeof row.name, "logits@%u", (unsigned)d->positions[i]);
    row.is_logits = true;
    row.e = et->e;
    row.e_gap = et->e_gap;
    hx_metrics_compute(&row.vs_ref, lp, rs, k);
    const int32_t jx = hx_argmax_f32(lp, k);
    int32_t r1, r2;
    top2(&r1, &r2, r, nv);
    hx_logit_metrics *lg = &row.lg;
    lg->top1_x = jx >= 0 ? ids[jx] : -1;
    lg->top1_r = r1;
    lg->top1_agree = lg->top1_x == r1;
    lg->r_margin = r2 >= 0 ? r[r1] - r[r2] : (double)INFINITY;
    lg->r_gap = lg->top1_x >= 0 ? r[r1] - r[lg->top1_x] : (double)INFINITY;
    lg->kl = hx_kl_lower_topk(r, nv, ids, lp, k);
    int32_t rtop[HX_TOPK];
    const size_t nr = hx_topk_f64(rtop, r, nv, k < HX_TOPK ? k : HX_TOPK);
    bool has_r1 = false;
    uint32_t missing = 0;
    for (size_t a = 0; a < nr; ++a) {
        bool found = false;
        for (size_t j = 0; j < k; ++j)
            found |= ids[j] == rtop[a];
        lg->top5_overlap += found;
        missing += !found;
    }
    for (size_t j = 0; j < k; ++j)
        has_r1 |= ids[j] == r1;
    const bool same = hx_topk_row_same_bits(d, i, base, NULL);
    *bitwise &= same;
    hx_cls_input in = {.x_nonfinite = row.vs_ref.n_nonfinite > 0 || k == 0,
                       .bitwise_baseline = same, .err = row.vs_ref.max_abs, .e = et->e,
                       .has_argmax = k > 0, .top1_x = lg->top1_x, .top1_r = r1,
                       .gap = lg->r_gap, .e_gap = et->e_gap};
    hx_verdict v;
    int rc = hx_classify(&v, &in, err);
    if (rc != LM_OK)
        return LM_FAIL(err, rc, "%s: cannot classify", row.name);
    row.cls = v.cls;
    snprintf(row.reason, sizeof row.reason, "%.200s (top-k: %zu of %zu ids)", v.reason, k, nv);
    double mass = 0.0;
    for (size_t j = 0; j < k; ++j)
        mass += exp((double)lp[j]);
    sum->n_rows++;
    sum->k = k > sum->k ? (uint32_t)k : sum->k;
    sum->k_min = sum->n_rows == 1 || k < sum->k_min ? (uint32_t)k : sum->k_min;
    sum->n_ref_top1_missing += !has_r1;
    sum->n_ref_topk_missing += missing > 0;
    sum->n_noise_at_k += row.cls == HX_NOISE || row.cls == HX_EXACT;
    sum->mass_min = sum->n_rows == 1 || mass < sum->mass_min ? mass : sum->mass_min;
    sum->kl_lower_max = fmax(sum->kl_lower_max, lg->kl);
    return hx_config_report_add_row(c, &row, err);
}

int hx_compare_topk(hx_config_report *c, hx_topk_summary *sum, const hx_dump *d,
                    const hx_dump *base, const ref_capture *ref_lp, const hx_envelope *env_lp,
                    lm_err *err)
{
    memset(sum, 0, sizeof *sum);
    sum->n_vocab = d->n_vocab;
    if (d->topk == 0 || d->topk > HX_TOPK_ROW_MAX)
        return LM_FAIL(err, LM_E_INPUT, "%s: %u ids per row (expected 1..%u)", c->config,
                       (unsigned)d->topk, (unsigned)HX_TOPK_ROW_MAX);
    if (ref_lp->n_vocab != d->n_vocab)
        return LM_FAIL(err, LM_E_INPUT, "%s: vocabulary %u, the reference's %u", c->config,
                       (unsigned)d->n_vocab, (unsigned)ref_lp->n_vocab);
    for (size_t j = 0; j < (size_t)d->n_pos * d->topk; ++j)
        if (d->topk_ids[j] >= (int32_t)d->n_vocab)
            return LM_FAIL(err, LM_E_INPUT, "%s: id %d outside the vocabulary of %u", c->config,
                           (int)d->topk_ids[j], (unsigned)d->n_vocab);
    bool bitwise = base != NULL && base->n_pos == d->n_pos;
    int rc = LM_OK;
    for (uint32_t i = 0; i < d->n_pos && rc == LM_OK; ++i) {
        const uint32_t pos = d->positions[i];
        const int64_t rr = ref_capture_find_pos(ref_lp, pos);
        const int64_t er = lm_index_of_u32(env_lp->positions, env_lp->n_pos, pos);
        if (rr < 0 || er < 0) {
            rc = LM_FAIL(err, LM_E_INPUT, "%s: position %u is not in the %s", c->config,
                         (unsigned)pos, rr < 0 ? "reference" : "envelope");
            break;
        }
        rc = one_row(c, sum, d, i, base, ref_capture_logits(ref_lp, (uint32_t)rr),
                     &env_lp->logits[er], &bitwise, err);
    }
    c->bitwise_baseline = rc == LM_OK && bitwise;
    return rc;
}
