/* classify.c — EXACT/NOISE/TIE_FLIP/DRIFT/FLIP/NONFINITE from measured errors and envelopes. */
#include "model/classify.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

static const char *const names[HX_N_CLASSES] = {"EXACT", "NOISE", "TIE_FLIP",  "SEMANTIC",
                                                "DRIFT", "FLIP",  "NONFINITE", "SEQ_MISMATCH", "ERROR"};

const char *hx_class_name(hx_class c)
{
    return (unsigned)c < HX_N_CLASSES ? names[c] : "?";
}

int hx_class_from_name(const char *s)
{
    for (int i = 0; i < HX_N_CLASSES; ++i)
        if (strcmp(s, names[i]) == 0)
            return i;
    return -1;
}

hx_class hx_class_worst(hx_class a, hx_class b)
{
    return a > b ? a : b;
}

bool hx_class_fails(hx_class c)
{
    return c >= HX_DRIFT;
}

static bool bad_bound(double v)
{
    return isnan(v) || v < 0.0;
}

int hx_classify(hx_verdict *out, const hx_cls_input *in, lm_err *err)
{
    hx_verdict v = {0};
    if (in->x_nonfinite) {
        v.cls = HX_NONFINITE;
        snprintf(v.reason, sizeof v.reason, "NaN or Inf in the output");
        *out = v;
        return LM_OK;
    }
    if (bad_bound(in->e) || isnan(in->err))
        return LM_FAIL(err, LM_E_INPUT, "classify: envelope E=%g or error %g is not a number >= 0",
                       in->e, in->err);
    bool within = in->err <= in->e;
    if (in->has_argmax && in->top1_x != in->top1_r) {
        if (bad_bound(in->e_gap) || isnan(in->gap))
            return LM_FAIL(err, LM_E_INPUT, "classify: logit-gap envelope %g or gap %g invalid",
                           in->e_gap, in->gap);
        if (in->gap > in->e_gap) {
            v.cls = HX_FLIP;
            snprintf(v.reason, sizeof v.reason,
                     "argmax %d != reference %d; reference gap %.3g > envelope %.3g",
                     (int)in->top1_x, (int)in->top1_r, in->gap, in->e_gap);
        } else if (within) {
            v.cls = HX_TIE_FLIP;
            snprintf(v.reason, sizeof v.reason,
                     "argmax %d != reference %d; near tie: gap %.3g <= envelope %.3g",
                     (int)in->top1_x, (int)in->top1_r, in->gap, in->e_gap);
        } else {
            v.cls = HX_DRIFT;
            snprintf(v.reason, sizeof v.reason,
                     "near-tie flip (gap %.3g <= %.3g) but err %.3g > E %.3g", in->gap,
                     in->e_gap, in->err, in->e);
        }
    } else if (within) {
        v.cls = in->bitwise_baseline ? HX_EXACT : HX_NOISE;
        snprintf(v.reason, sizeof v.reason, "%serr %.3g <= E %.3g",
                 in->bitwise_baseline ? "bitwise equal to baseline; " : "", in->err, in->e);
    } else {
        v.cls = HX_DRIFT;
        snprintf(v.reason, sizeof v.reason, "%serr %.3g > E %.3g",
                 in->bitwise_baseline ? "bitwise equal to a baseline that drifts; " : "",
                 in->err, in->e);
    }
    *out = v;
    return LM_OK;
}

int hx_classify_tensor(hx_verdict *out, hx_metrics *m_out, hx_logit_metrics *lm_out,
                       const float *x, const float *b, bool bitwise_baseline, const double *r,
                       size_t n, bool is_logits, double e, double e_gap, lm_err *err)
{
    hx_metrics m;
    hx_metrics_compute(&m, x, r, n);
    hx_cls_input in = {
        .x_nonfinite = m.n_nonfinite > 0,
        .bitwise_baseline = b ? memcmp(x, b, n * sizeof *x) == 0 : bitwise_baseline,
        .err = m.max_abs,
        .e = e,
        .has_argmax = is_logits,
        .e_gap = e_gap,
    };
    hx_logit_metrics lm = {0};
    if (is_logits) {
        /* Also for nonfinite rows: their KL is NaN, so summaries cannot look clean. */
        hx_logit_metrics_compute(&lm, x, r, n);
        in.top1_x = lm.top1_x;
        in.top1_r = lm.top1_r;
        in.gap = lm.r_gap;
    }
    int st = hx_classify(out, &in, err);
    if (m_out)
        *m_out = m;
    if (lm_out)
        *lm_out = lm;
    return st;
}

int64_t hx_first_divergence(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    size_t n = na < nb ? na : nb;
    for (size_t i = 0; i < n; ++i)
        if (a[i] != b[i])
            return (int64_t)i;
    return na == nb ? -1 : (int64_t)n;
}
