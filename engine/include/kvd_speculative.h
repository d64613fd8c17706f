/* kvd_speculative.h — logits processors with a token history (llama.cpp's "penalties" sampler) and
 * speculative decoding (a draft proposes K tokens, the target verifies them in one chunk, the
 * KV cache of rejected tokens is rolled back), over the engine's one chunked forward pass. */
#ifndef KVD_SPEC_H
#define KVD_SPEC_H

#include "kvd_engine.h"

/* ---- logits processors: repetition, frequency and presence penalties ----
 * Semantics and option names of llama.cpp (src/llama-sampler.cpp, penalties sampler):
 * the history is a window of the last `repeat_last_n` accepted tokens (prompt tokens are
 * accepted too) with a count per token; apply() visits every distinct token id of the
 * window once (count c > 0) and does, in float:
 *     l = l <= 0 ? l * repeat_penalty : l / repeat_penalty;
 *     l = l - ((float)c * frequency_penalty + (float)(c > 0) * presence_penalty);
 * Disabled (apply changes nothing, accept records nothing) when repeat_last_n == 0 or
 * (repeat_penalty == 1 and frequency_penalty == 0 and presence_penalty == 0). */
typedef struct lm_penalty_params {
    float repeat_penalty;    /* --repeat-penalty, > 0 and finite (1 = off) */
    uint32_t repeat_last_n;  /* --repeat-last-n, window length (0 = off) */
    float frequency_penalty; /* --frequency-penalty, finite (0 = off) */
    float presence_penalty;  /* --presence-penalty, finite (0 = off) */
} lm_penalty_params;

/* llama.cpp's defaults: repeat_penalty 1, repeat_last_n 64, frequency 0, presence 0. */
lm_penalty_params lm_penalty_defaults(void);

typedef struct lm_penalty lm_penalty;
/* LM_E_INPUT naming the bad parameter (repeat_penalty <= 0, NaN or infinite values). */
int lm_penalty_create(lm_penalty **out, const lm_penalty_params *p, uint32_t n_vocab, lm_err *err);
void lm_penalty_free(lm_penalty *s);
void lm_penalty_reset(lm_penalty *s);
bool lm_penalty_enabled(const lm_penalty *s);
/* Appends token to the window (the oldest leaves a full window). Ids >= n_vocab are ignored. */
void lm_penalty_accept(lm_penalty *s, int32_t token);
/* Applies the penalties to logits [n_vocab] in place. */
void lm_penalty_apply(lm_penalty *s, float *logits);
/* The window, oldest first, into out [repeat_last_n]; returns its length. */
uint32_t lm_penalty_history(const lm_penalty *s, int32_t *out);
/* FNV-1a 64 of the window's length and tokens (oldest first): equal windows, equal hashes. */
uint64_t lm_penalty_history_hash(const lm_penalty *s);

/* ---- speculative decoding ---- */

/* Forgets every cached position >= n_past (n_past <= lm_ctx_n_past): the next forward starts
 * at n_past. With a rotating cache the slots holding those positions are dropped; that needs
 * them to have been appended, not written over older ones (always the case for a verify
 * chunk of >= 2 tokens): otherwise LM_E_INPUT, since the overwritten positions are lost. */
int lm_ctx_rollback(lm_ctx *c, uint32_t n_past, lm_err *err);

/* A view of m's first n_layer layers (the same weights, embedding, output norm and output
 * projection: a self-draft, the CPU analogue of a multi-token-prediction head). The view
 * borrows everything from m: never lm_model_free it; it lives as long as m.
 * LM_E_INPUT unless 1 <= n_layer <= m's layers. */
int lm_model_first_layers(lm_model *view, const lm_model *m, uint32_t n_layer, lm_err *err);

typedef struct lm_spec_params {
    uint32_t n_draft;        /* K tokens drafted per round; 0 = plain decoding (no draft) */
    uint32_t step;           /* prompt prefill chunk (0 = one chunk), target and draft alike */
    uint32_t n_gen;          /* tokens to generate, >= 1 */
    lm_penalty_params pen;   /* processors (both paths apply them to the target's logits) */
} lm_spec_params;

/* What a decode produced, per generated token i < n_gen (arrays owned by the caller). */
typedef struct lm_spec_trace {
    int32_t *tokens;        /* [n_gen] */
    uint64_t *hist_hash;    /* [n_gen] lm_penalty_history_hash of the window token i was chosen
                               with (before it was accepted) */
    float *logits;          /* [n_gen][n_vocab] raw target logits token i was chosen from, or
                               NULL (not recorded) */
    uint32_t n_rounds;      /* verify chunks (speculative) or single steps (plain) */
    uint32_t n_drafted;     /* draft tokens proposed */
    uint32_t n_accepted;    /* draft tokens the target accepted */
} lm_spec_trace;

/* Greedy decoding of n_gen tokens after prompt [n_prompt] with the processors applied to the
 * target's logits (argmax after lm_penalty_apply; the history holds the prompt, then every
 * generated token). n_draft == 0: plain decoding, one token per forward call (draft unused,
 * may be NULL). n_draft > 0: each round the draft context proposes up to n_draft tokens
 * greedily from its own raw logits, the target runs [last token, drafts] as one chunk with
 * every row's logits, takes row i's processed argmax as token i and continues while it equals
 * draft i + 1; rejected positions are rolled back in both contexts. Either way token i is the
 * processed argmax of a target logits row whose context is the prompt + tokens 0..i-1, so
 * the two paths agree token for token exactly when those rows agree in their argmax.
 * Both contexts must be empty (n_past 0) and hold prompt + n_gen + n_draft positions. */
int lm_spec_generate(lm_ctx *target, lm_ctx *draft, const int32_t *prompt, uint32_t n_prompt,
                     const lm_spec_params *p, lm_spec_trace *out, lm_err *err);

#endif
