/* ref_variants.h — the reference's attention and FFN variants in MPFR: sliding-window
 * visibility, softmax with a sink logit, rotating-cache attention schedules, MoE routing and
 * gating. Written independently of the engine's kernels (only the rules are shared, stated
 * here again):
 *
 * - window w > 0: the query at position p sees the keys at positions (p - w, p].
 * - sink: a per-head logit joining the softmax denominator only.
 * - rotating cache (max_size, keep) under a prefill step: modelled as the sorted set of
 *   cached positions. A chunk of n > 1 tokens first reduces the set to at most max_size - 1
 *   (the first `keep` and the most recent ones stay), then appends the chunk; token i of the
 *   chunk sees the set plus the chunk's tokens 0..i. A single token first reduces the set to
 *   at most max_size in the same way, then, if the set is full (max_size), replaces the oldest
 *   position after the first `keep`; it sees the whole set. The prompt's chunks follow the
 *   step, or two turns (ref_rot_schedule_make_turns): decode steps between two chunked parts.
 * - MoE top-k: the k largest logits, equal logits -> lower expert id first, rank order.
 *   margin = k-th selected logit - largest unselected logit (+inf when k = n_expert).
 *   gating 0: softmax over the selected logits; 1: softmax over all, selected renormalised
 *   (the same number as 0, exactly, in exact arithmetic); 2: softmax over all, selected as is. */
#ifndef KVD_REF_VARIANTS_H
#define KVD_REF_VARIANTS_H

#include "kvd_ref.h"

/* In place: x[i] = exp(x[i] - M) / (exp(sink - M) + sum_j exp(x[j] - M)), M the maximum of the
 * x and the sink; the sum runs left to right, the sink term added last. sink NULL: plain
 * softmax. n >= 1. */
void ref_softmax_sink(mpfr_t *x, uint64_t n, const float *sink, ref_scratch *s);

/* The window rule for one (query, key) position pair (window 0: causal only). */
bool ref_window_visible(uint32_t q_pos, uint32_t k_pos, uint32_t window);

/* Attention schedule of a rotating cache for a token sequence fed as a prefill of n_prompt
 * tokens in chunks of `step` (0 = one chunk), then single tokens up to n_tokens. */
typedef struct ref_rot_schedule {
    uint32_t n_tokens;
    uint64_t *start;  /* [n_tokens + 1] offsets into vis */
    uint32_t *vis;    /* positions seen by token t: vis[start[t] .. start[t+1]), ascending */
} ref_rot_schedule;

int ref_rot_schedule_make(ref_rot_schedule *out, uint32_t max_size, uint32_t keep, uint32_t step,
                          uint32_t n_prompt, uint32_t n_tokens, lm_err *err);
/* The same for a prompt fed in two turns: positions [0, turn_at) in chunks of `step`, then
 * turn_d single tokens, then [turn_at + turn_d, n_prompt) in chunks of `step` (turn_at =
 * n_prompt, turn_d = 0: the plain prefill above). LM_E_INPUT when the turns do not fit. */
int ref_rot_schedule_make_turns(ref_rot_schedule *out, uint32_t max_size, uint32_t keep,
                                uint32_t step, uint32_t turn_at, uint32_t turn_d,
                                uint32_t n_prompt, uint32_t n_tokens, lm_err *err);
void ref_rot_schedule_free(ref_rot_schedule *s);

/* MoE routing on MPFR logits (see above); k <= n_expert. */
/* Whether expert x is among the n*k selections sel (an MoE layer computes only those). */
bool ref_moe_expert_used(const uint32_t *sel, uint64_t n_sel, uint32_t x);
void ref_moe_topk(uint32_t *sel /* [k] */, mpfr_t *logits /* [n_expert] */, uint32_t n_expert,
                  uint32_t k);
/* margin into out (at out's precision); +inf when k == n_expert */
void ref_moe_margin(mpfr_t out, mpfr_t *logits, uint32_t n_expert, const uint32_t *sel,
                    uint32_t k);
/* w[r] for the selected experts (w at least k numbers; sums left to right). */
void ref_moe_gate(mpfr_t *w, mpfr_t *logits, uint32_t n_expert, const uint32_t *sel, uint32_t k,
                  int gating, ref_scratch *s);

#endif
