/* speculative_check.h — one row of the speculative-decoding check: a configuration with spec = K > 0
 * run against plain decoding (speculative_run.h), judged (speculative_verdict.h), and, when the verdict is a
 * token SEQ_MISMATCH under MLX's rotating cache, the same configuration with the exact-window
 * policy run and judged too, to tell the policy's chunk dependence (SEMANTIC) from a bug. */
#ifndef HX_SPECCHECK_H
#define HX_SPECCHECK_H

#include "judge/speculative_verdict.h"

typedef struct hx_spec_row {
    hx_config cfg;              /* spec = K > 0, draft set */
    hx_seq_verdict v;           /* the final verdict */
    uint32_t n_rounds, n_drafted, n_accepted; /* of the speculative decode */
    bool window_checked;        /* the exact-window counterpart was run */
    hx_class window_cls;        /* its class (valid when window_checked) */
} hx_spec_row;

/* draft_model: as hx_spec_run_pair. e, e_gap: the near-tie bounds (speculative_verdict.h). */
int hx_spec_check_config(hx_spec_row *out, const lm_model *target, const lm_model *draft_model,
                         const hx_config *cfg, const int32_t *prompt, uint32_t n_prompt,
                         uint32_t n_gen, const lm_penalty_params *pen, double e, double e_gap,
                         lm_err *err);

#endif
