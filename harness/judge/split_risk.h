/* split_risk.h — the split-risk forecast: from the reference's exact top-2 margins along its
 * greedy path and the ensemble members' spread of the logit difference that decides each step,
 * the probability that an engine whose rounding errors are like the members' leaves that path
 * within N generated tokens, and where it most likely does.
 *
 * Error model (docs/DESIGN.md, "Split risk", states it with its reasons):
 *   step i (generated index i, logits row n_prompt - 1 + i) is decided by D_i = R_t1 - R_t2 >= 0,
 *   R's top token minus its runner-up (exact: the MPFR reference). An engine computes
 *   D_i + e_i with e_i ~ Normal(0, s_i^2), where s_i is the members' root-mean-square deviation
 *   of x_t1 - x_t2 from D_i (hx_env_tensor.split_sd, envelope.h). The step splits when the
 *   engine's difference is negative: p_i = Phi(-D_i / s_i) (1/2 at a tie; 0 when s_i = 0 and
 *   D_i > 0). Only the runner-up is considered.
 *   Steps are independent; the engine follows the reference's path until its first split and
 *   the forecast stops there (the teacher-forced rows after it are not the engine's context),
 *   so risk(N) = 1 - prod_{i<N} (1 - p_i) and the first split is at i with probability
 *   q_i = p_i prod_{k<i} (1 - p_k); likely_step is the i with the largest q_i.
 * Two engines (an evaluation's two configurations, each an independent draw of the model): at
 * step i one splits and the other does not with probability 2 p_i (1 - p_i); both splitting
 * alike is counted as agreeing (both take the runner-up), and the steps after it keep the
 * reference's margins (an approximation). pair(N) = 1 - prod_{i<N} (1 - 2 p_i (1 - p_i)).
 * Interval: s_i is estimated from M members, so M s_i^2 / sigma_i^2 ~ chi-square(M). The
 * HX_SPLIT_LEVEL two-sided interval of sigma_i is s_i * [sqrt(M / chi2_hi), sqrt(M / chi2_lo)]
 * (chi-square quantiles by Wilson-Hilferty, within 1% of the exact ones for M >= 8); the same
 * factor scales every step (the same members measure every step, so their sampling error is
 * shared), and risk, monotone in every s_i, is evaluated at both ends. The interval says how
 * far M members pin the spread; it does not cover the model's own assumptions (calibration,
 * bench/calibrate_split.c, checks those against observed splits). */
#ifndef HX_SPLIT_RISK_H
#define HX_SPLIT_RISK_H

#include "judge/envelope.h"
#include "kvd_common.h"
#include "kvd_ref.h"
#include "model/report.h"

#include <stdint.h>

/* The standard normal quantile at (1 + HX_SPLIT_LEVEL) / 2 (model/report.h). */
#define HX_SPLIT_Z 1.6448536269514722

/* Phi(-margin / sd): the probability that a step with exact margin >= 0 and spread sd >= 0
 * splits. 1/2 at margin 0 (any sd); 0 when sd is 0 and margin > 0; NaN when either is NaN or
 * negative. */
double hx_split_step_p(double margin, double sd);

/* 1 - prod (1 - p[i]) over i < n, in double (log1p sums, so tiny p do not vanish); 0 when n is
 * 0; NaN when some p[i] is NaN. */
double hx_split_combine(const double *p /* [n] */, uint32_t n);

/* The q-quantile of chi-square with k degrees of freedom for q = (1 -+ HX_SPLIT_LEVEL) / 2
 * (upper: true for the upper one), by Wilson-Hilferty. */
double hx_split_chi2(uint32_t k, bool upper);

/* The forecast over steps 0..n_steps-1 from margin[i] (the reference's exact top-2 margin)
 * and sd[i] (the members' spread, hx_env_tensor.split_sd), n_members >= 2 members.
 * profile is copied into out->profile. A NaN sd makes the forecast invalid (valid false, risk,
 * lo and hi NaN). LM_E_INPUT when a margin is negative or NaN, or n_members < 2. */
int hx_split_forecast_make(hx_split_forecast *out, const char *profile,
                           const double *margin /* [n_steps] */, const double *sd /* [n_steps] */,
                           uint32_t n_steps, uint32_t n_members, lm_err *err);

/* The reference's exact top-2 margin of one logits row (hx_topk_f64); +Inf when n < 2. */
double hx_split_margin(const double *row /* [n] */, size_t n);

/* The forecast along n_steps generated steps whose logits rows sit at absolute positions
 * first_pos .. first_pos + n_steps - 1 of ref and env (env's positions must hold them:
 * LM_E_INPUT naming the position otherwise). */
int hx_split_forecast_ref(hx_split_forecast *out, const char *profile, const ref_capture *ref,
                          const hx_envelope *env, uint32_t first_pos, uint32_t n_steps,
                          lm_err *err);

/* How many generated steps from first_pos are decided on the reference's greedy path in ref's
 * own token list: consecutive positions pos = first_pos, first_pos + 1, ... < n_tokens with a
 * logits row in ref and in env, up to and including the first whose argmax in ref differs from
 * tokens[pos + 1] or that is the last position (its context, tokens[0..pos], is still the
 * reference's path). On a judged dump's tokens: the steps before the dump's path leaves the
 * reference's, the step where it leaves, and the last position's (the decision of the last
 * generated token, which the token list does not hold). */
uint32_t hx_split_path_steps(const ref_capture *ref, const hx_envelope *env, uint32_t first_pos);

#endif
