/* speculative_verdict.c — SEQ_MISMATCH / TIE_FLIP / NOISE / EXACT for speculative vs plain decoding
 * (rules in speculative_verdict.h). */
#include "judge/speculative_verdict.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static double row_max_abs(const float *a, const float *b, uint32_t n)
{
    double m = 0.0;
    for (uint32_t i = 0; i < n; ++i) {
        const double d = fabs((double)a[i] - (double)b[i]);
        m = d > m || isnan(d) ? d : m;
    }
    return m;
}

/* First step whose row of raw (n_gen rows of n elements) holds a NaN or +-Inf; -1: none. */
static int64_t first_nonfinite_row(const float *raw, uint32_t n_gen, uint32_t n)
{
    for (uint32_t s = 0; s < n_gen; ++s)
        for (uint32_t i = 0; i < n; ++i)
            if (!isfinite(raw[(size_t)s * n + i]))
                return s;
    return -1;
}

/* Rule 4 (speculative_verdict.h) on v, the last rule applied to any verdict. */
static void apply_nonfinite(hx_seq_verdict *v)
{
    if (v->nonfinite_step < 0 || hx_class_worst(v->cls, HX_NONFINITE) != HX_NONFINITE)
        return;
    v->cls = HX_NONFINITE;
    snprintf(v->reason, sizeof v->reason, "step %lld: the speculative decode's raw row holds "
             "a NaN or Inf", (long long)v->nonfinite_step);
}

/* Plain's processed row at step s (history: prompt + plain tokens 0..s-1) into row. */
static int processed_row(float *row, const hx_spec_pair *p, uint32_t s, const int32_t *prompt,
                         uint32_t n_prompt, const lm_penalty_params *pen, lm_err *err)
{
    lm_penalty *h = NULL;
    int rc = lm_penalty_create(&h, pen, p->n_vocab, err);
    if (rc != LM_OK)
        return rc;
    for (uint32_t i = 0; i < n_prompt; ++i)
        lm_penalty_accept(h, prompt[i]);
    for (uint32_t i = 0; i < s; ++i)
        lm_penalty_accept(h, p->plain.tokens[i]);
    memcpy(row, p->plain.raw + (size_t)s * p->n_vocab, p->n_vocab * sizeof(float));
    lm_penalty_apply(h, row);
    lm_penalty_free(h);
    return LM_OK;
}

int hx_seq_judge(hx_seq_verdict *out, const hx_spec_pair *p, const int32_t *prompt,
                 uint32_t n_prompt, const lm_penalty_params *pen, double e, double e_gap,
                 lm_err *err)
{
    hx_seq_verdict v = {.first_tok = -1, .first_hist = -1, .err = NAN, .gap = NAN};
    const uint32_t nv = p->n_vocab;
    bool bitwise = true;
    for (uint32_t s = 0; s < p->n_gen; ++s) {
        if (v.first_hist < 0 && p->plain.hist[s] != p->spec.hist[s])
            v.first_hist = s;
        const float *a = p->plain.raw + (size_t)s * nv, *b = p->spec.raw + (size_t)s * nv;
        if (v.first_tok < 0) {
            const double d = row_max_abs(a, b, nv);
            v.max_abs = d > v.max_abs ? d : v.max_abs;
            bitwise = bitwise && memcmp(a, b, nv * sizeof *a) == 0;
        }
        if (v.first_tok < 0 && p->plain.tokens[s] != p->spec.tokens[s])
            v.first_tok = s;
    }
    if (v.first_hist >= 0 && (v.first_tok < 0 || v.first_hist <= v.first_tok)) {
        v.cls = HX_SEQ_MISMATCH;
        snprintf(v.reason, sizeof v.reason, "processor history differs from plain decoding's at "
                 "step %lld", (long long)v.first_hist);
    } else if (v.first_tok >= 0) {
        const uint32_t s = (uint32_t)v.first_tok;
        float *row = malloc(nv * sizeof *row);
        if (row == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "spec check: out of memory");
        int rc = processed_row(row, p, s, prompt, n_prompt, pen, err);
        if (rc != LM_OK) {
            free(row);
            return rc;
        }
        const int32_t tp = p->plain.tokens[s], ts = p->spec.tokens[s];
        v.gap = (double)row[tp] - (double)row[ts];
        free(row);
        v.err = row_max_abs(p->plain.raw + (size_t)s * nv, p->spec.raw + (size_t)s * nv, nv);
        const bool tie = v.err <= e && v.gap <= e_gap;
        v.cls = tie ? HX_TIE_FLIP : HX_SEQ_MISMATCH;
        snprintf(v.reason, sizeof v.reason,
                 "step %u: token %d, plain decoding %d; verify-row err %.3g %s E %.3g, gap %.3g "
                 "%s E_gap %.3g%s", s, (int)ts, (int)tp, v.err, v.err <= e ? "<=" : ">", e,
                 v.gap, v.gap <= e_gap ? "<=" : ">", e_gap, tie ? " (numerical near tie)" : "");
    } else {
        v.cls = bitwise ? HX_EXACT : HX_NOISE;
        snprintf(v.reason, sizeof v.reason, "%u tokens and histories equal; rows %s (max |d| "
                 "%.3g)", p->n_gen, bitwise ? "bitwise equal" : "differ", v.max_abs);
    }
    v.nonfinite_step = first_nonfinite_row(p->spec.raw, p->n_gen, nv);
    apply_nonfinite(&v);
    *out = v;
    return LM_OK;
}

bool hx_seq_policy_question(const hx_seq_verdict *v, const hx_config *cfg, double e)
{
    if (cfg->rot_max == 0 || cfg->rot_window)
        return false;
    if (v->cls == HX_NOISE)
        return v->max_abs > e;
    return v->cls == HX_SEQ_MISMATCH && v->first_tok >= 0 &&
           (v->first_hist < 0 || v->first_hist > v->first_tok);
}

void hx_seq_explain_policy(hx_seq_verdict *v, const hx_seq_verdict *window)
{
    char was[sizeof v->reason];
    snprintf(was, sizeof was, "%s", v->reason);
    if (hx_class_fails(window->cls)) {
        snprintf(v->reason, sizeof v->reason, "%.200s; the exact-window policy fails too (%s, "
                 "step %lld): not the cache policy", was, hx_class_name(window->cls),
                 (long long)window->first_tok);
        return;
    }
    snprintf(v->reason, sizeof v->reason, "%.170s; MLX's rotating cache: a verify chunk's rows "
             "see older keys than a single step; the same decode with the exact window is %s: "
             "the policy's chunk dependence, not %s", was, hx_class_name(window->cls),
             v->cls == HX_NOISE ? "rounding" : "a decoding bug");
    v->cls = HX_SEMANTIC;
    apply_nonfinite(v);
}
