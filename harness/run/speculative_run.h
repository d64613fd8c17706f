/* speculative_run.h — the speculative-decoding check's runs: for one configuration with spec=K > 0,
 * plain decoding (spec=0) and speculative decoding with the same prefill step, backend,
 * threads, attention and cache, and the same logits processors, each traced per generated
 * token (token, processor-history hash, raw and processed target logits). */
#ifndef HX_SPECULATIVE_RUN_H
#define HX_SPECULATIVE_RUN_H

#include "model/config.h"
#include "model/speculative_pair.h"
#include "kvd_speculative.h"

/* Runs both decodes. draft_model: the model cfg->draft names, loaded by the caller, or NULL
 * when cfg->draft is "self:L" (then the target's first L layers draft). The draft context
 * runs on the same backend and threads with the plain cache (the draft's cache changes which
 * tokens are proposed, never which are accepted). Contexts hold prompt + 2 n_gen + K + 1
 * positions (capped at the model's), so a rollback that leaks positions shows as a sequence
 * difference, not as a full context. LM_E_INPUT for cfg->spec == 0, a missing or malformed
 * draft, or a draft vocabulary other than the target's. */
int hx_spec_run_pair(hx_spec_pair *out, const lm_model *target, const lm_model *draft_model,
                     const hx_config *cfg, const int32_t *prompt, uint32_t n_prompt,
                     uint32_t n_gen, const lm_penalty_params *pen, lm_err *err);
void hx_spec_pair_free(hx_spec_pair *p);

/* "self:L" / "self/L" -> L (>= 1); false for anything else. */
bool hx_draft_self_layers(const char *draft, uint32_t *n_layer);

#endif
