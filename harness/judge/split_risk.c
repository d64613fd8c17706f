/* split_risk.c — the split-risk forecast from exact margins and member spreads (contract and
 * error model in split_risk.h). */
#include "judge/split_risk.h"

#include "model/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

double hx_split_step_p(double margin, double sd)
{
    if (isnan(margin) || isnan(sd) || margin < 0.0 || sd < 0.0)
        return (double)NAN;
    if (margin == 0.0)
        return 0.5;
    if (sd == 0.0 || isinf(margin))
        return 0.0;
    /* Phi(-x) = erfc(x / sqrt 2) / 2, accurate in the far tail (no 1 - Phi cancellation). */
    return 0.5 * erfc(margin / (sd * sqrt(2.0)));
}

double hx_split_combine(const double *p, uint32_t n)
{
    double log_keep = 0.0; /* sum of log(1 - p_i), in step order */
    for (uint32_t i = 0; i < n; ++i) {
        if (isnan(p[i]))
            return (double)NAN;
        log_keep += log1p(-p[i]);
    }
    const double r = -expm1(log_keep);
    return r > 0.0 ? r : 0.0; /* never -0 */
}

double hx_split_chi2(uint32_t k, bool upper)
{
    const double a = 2.0 / (9.0 * (double)k);
    const double c = 1.0 - a + (upper ? HX_SPLIT_Z : -HX_SPLIT_Z) * sqrt(a);
    return c > 0.0 ? (double)k * c * c * c : 0.0;
}

/* risk with every sd scaled by f (sd NaN-free here); pair: the two-engine form (each step's
 * p replaced by 2 p (1 - p)). */
static double risk_scaled(const double *margin, const double *sd, uint32_t n, double f,
                          bool pair)
{
    double log_keep = 0.0;
    for (uint32_t i = 0; i < n; ++i) {
        const double p = hx_split_step_p(margin[i], sd[i] * f);
        log_keep += log1p(-(pair ? 2.0 * p * (1.0 - p) : p));
    }
    const double r = -expm1(log_keep);
    return r > 0.0 ? r : 0.0; /* never -0 */
}

int hx_split_forecast_make(hx_split_forecast *out, const char *profile, const double *margin,
                           const double *sd, uint32_t n_steps, uint32_t n_members, lm_err *err)
{
    memset(out, 0, sizeof *out);
    snprintf(out->profile, sizeof out->profile, "%s", profile && profile[0] ? profile : "f32");
    out->n_steps = n_steps;
    out->n_members = n_members;
    out->likely_step = -1;
    out->min_step = -1;
    out->min_margin = out->likely_margin = out->likely_sd = (double)NAN;
    if (n_members < 2)
        return LM_FAIL(err, LM_E_INPUT, "split risk: %u members, at least 2 needed",
                       (unsigned)n_members);
    out->valid = true;
    for (uint32_t i = 0; i < n_steps; ++i) {
        if (isnan(margin[i]) || margin[i] < 0.0)
            return LM_FAIL(err, LM_E_INPUT, "split risk: step %u has margin %g (must be >= 0)",
                           (unsigned)i, margin[i]);
        if (isnan(sd[i]) || sd[i] < 0.0)
            out->valid = false;
        if (out->min_step < 0 || margin[i] < out->min_margin) {
            out->min_margin = margin[i];
            out->min_step = i;
        }
    }
    if (!out->valid) {
        out->risk = out->lo = out->hi = (double)NAN;
        out->pair = out->pair_lo = out->pair_hi = (double)NAN;
        return LM_OK;
    }
    /* The first split's distribution over steps: q_i = p_i * prod_{k<i} (1 - p_k). */
    double keep = 1.0;
    for (uint32_t i = 0; i < n_steps; ++i) {
        const double p = hx_split_step_p(margin[i], sd[i]);
        const double q = p * keep;
        if (q > out->likely_p) {
            out->likely_p = q;
            out->likely_step = i;
            out->likely_margin = margin[i];
            out->likely_sd = sd[i];
        }
        keep *= 1.0 - p;
    }
    const double m = (double)n_members;
    const double f_lo = sqrt(m / hx_split_chi2(n_members, true));
    const double chi_lo = hx_split_chi2(n_members, false);
    const double f_hi = chi_lo > 0.0 ? sqrt(m / chi_lo) : (double)INFINITY;
    out->risk = risk_scaled(margin, sd, n_steps, 1.0, false);
    out->lo = risk_scaled(margin, sd, n_steps, f_lo, false);
    out->hi = risk_scaled(margin, sd, n_steps, f_hi, false);
    /* 2 p (1 - p) grows with p up to p = 1/2, which no step exceeds: monotone in sd too. */
    out->pair = risk_scaled(margin, sd, n_steps, 1.0, true);
    out->pair_lo = risk_scaled(margin, sd, n_steps, f_lo, true);
    out->pair_hi = risk_scaled(margin, sd, n_steps, f_hi, true);
    return LM_OK;
}

double hx_split_margin(const double *row, size_t n)
{
    int32_t top[2];
    if (hx_topk_f64(top, row, n, 2) < 2)
        return (double)INFINITY;
    return row[top[0]] - row[top[1]];
}

/* Index of absolute position pos among env's logits rows, or -1. */
static int64_t env_row(const hx_envelope *env, uint32_t pos)
{
    for (uint32_t i = 0; i < env->n_pos; ++i)
        if (env->positions[i] == pos)
            return i;
    return -1;
}

int hx_split_forecast_ref(hx_split_forecast *out, const char *profile, const ref_capture *ref,
                          const hx_envelope *env, uint32_t first_pos, uint32_t n_steps,
                          lm_err *err)
{
    double *margin = malloc((n_steps ? n_steps : 1) * sizeof *margin);
    double *sd = malloc((n_steps ? n_steps : 1) * sizeof *sd);
    int rc = LM_OK;
    if (margin == NULL || sd == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "split risk: out of memory");
    for (uint32_t i = 0; rc == LM_OK && i < n_steps; ++i) {
        const uint32_t pos = first_pos + i;
        const int64_t r = ref_capture_find_pos(ref, pos);
        const int64_t e = env_row(env, pos);
        if (r < 0 || e < 0)
            rc = LM_FAIL(err, LM_E_INPUT, "split risk: no %s logits at position %u",
                         r < 0 ? "reference" : "envelope", (unsigned)pos);
        else {
            margin[i] = hx_split_margin(ref_capture_logits(ref, (uint32_t)r), ref->n_vocab);
            sd[i] = env->logits[e].split_sd;
        }
    }
    if (rc == LM_OK)
        rc = hx_split_forecast_make(out, profile, margin, sd, n_steps, env->n_members, err);
    free(margin);
    free(sd);
    return rc;
}

uint32_t hx_split_path_steps(const ref_capture *ref, const hx_envelope *env, uint32_t first_pos)
{
    uint32_t n = 0;
    for (uint32_t pos = first_pos; pos < ref->n_tokens; ++pos) {
        const int64_t r = ref_capture_find_pos(ref, pos);
        if (r < 0 || env_row(env, pos) < 0)
            break;
        ++n; /* every earlier step took the reference's argmax: this one is on its path */
        if (pos + 1 == ref->n_tokens ||
            hx_argmax_f64(ref_capture_logits(ref, (uint32_t)r), ref->n_vocab) !=
                ref->tokens[pos + 1])
            break;
    }
    return n;
}
