/* specrun.h — the speculative-decoding check's runs: for one configuration with spec=K > 0,
 * plain decoding (spec=0) and speculative decoding with the same prefill step, backend,
 * threads, attention and cache, and the same logits processors, each traced per generated
 * token (token, processor-history hash, raw and processed target logits). */
#ifndef HX_SPECRUN_H
#define HX_SPECRUN_H

#include "config.h"
#include "kvd_speculative.h"

typedef struct hx_spec_side {
    int32_t *tokens;     /* [n_gen] */
    uint64_t *hist;      /* [n_gen] processor-history hash token i was chosen with */
    float *raw;          /* [n_gen][n_vocab] target logits of token i */
    uint32_t n_rounds, n_drafted, n_accepted;
} hx_spec_side;

typedef struct hx_spec_pair {
    hx_config cfg;       /* the speculative configuration (spec = K > 0) */
    uint32_t n_gen;
    uint32_t n_vocab;
    hx_spec_side plain;  /* spec = 0 */
    hx_spec_side spec;   /* spec = K with cfg.draft */
} hx_spec_pair;

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
