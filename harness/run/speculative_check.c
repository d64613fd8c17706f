/* speculative_check.c — one configuration's speculative-decoding check with the rotating-cache policy
 * counterfactual (speculative_check.h). */
#include "run/speculative_check.h"
#include "run/speculative_run.h"

#include <string.h>

/* Runs cfg's pair and judges it; *st gets the speculative decode's counts. */
static int run_judge(hx_seq_verdict *v, hx_spec_row *st, const lm_model *target,
                     const lm_model *draft_model, const hx_config *cfg, const int32_t *prompt,
                     uint32_t n_prompt, uint32_t n_gen, const lm_penalty_params *pen, double e,
                     double e_gap, lm_err *err)
{
    hx_spec_pair p;
    int rc = hx_spec_run_pair(&p, target, draft_model, cfg, prompt, n_prompt, n_gen, pen, err);
    if (rc != LM_OK)
        return rc;
    rc = hx_seq_judge(v, &p, prompt, n_prompt, pen, e, e_gap, err);
    if (st != NULL) {
        st->n_rounds = p.spec.n_rounds;
        st->n_drafted = p.spec.n_drafted;
        st->n_accepted = p.spec.n_accepted;
    }
    hx_spec_pair_free(&p);
    return rc;
}

int hx_spec_check_config(hx_spec_row *out, const lm_model *target, const lm_model *draft_model,
                         const hx_config *cfg, const int32_t *prompt, uint32_t n_prompt,
                         uint32_t n_gen, const lm_penalty_params *pen, double e, double e_gap,
                         lm_err *err)
{
    memset(out, 0, sizeof *out);
    out->cfg = *cfg;
    int rc = run_judge(&out->v, out, target, draft_model, cfg, prompt, n_prompt, n_gen, pen, e,
                       e_gap, err);
    if (rc != LM_OK || !hx_seq_policy_question(&out->v, cfg, e))
        return rc;
    hx_config w = *cfg;
    w.rot_window = true;
    hx_seq_verdict wv;
    rc = run_judge(&wv, NULL, target, draft_model, &w, prompt, n_prompt, n_gen, pen, e, e_gap,
                   err);
    if (rc != LM_OK)
        return rc;
    out->window_checked = true;
    out->window_cls = wv.cls;
    hx_seq_explain_policy(&out->v, &wv);
    return LM_OK;
}
