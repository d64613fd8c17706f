/* moe.h — mixture-of-experts FFN (engine-private): router, top-k selection, gating, SwiGLU
 * experts combined with the gate weights.
 *
 * GGUF (llama.cpp names): `%s.expert_count`, `%s.expert_used_count`,
 * `%s.expert_feed_forward_length`, `%s.expert_gating_func` (1 softmax, 3 softmax over the
 * selected weights as gpt-oss), `%s.expert_weights_norm` (renormalise the selected weights);
 * tensors blk.N.ffn_gate_inp.weight (ggml ne {n_embd, n_expert}, row-major
 * [n_expert][n_embd]), blk.N.ffn_gate_exps.weight and blk.N.ffn_up_exps.weight (ne {n_embd,
 * n_ff_exp, n_expert}: [n_expert][n_ff_exp][n_embd]), blk.N.ffn_down_exps.weight (ne {n_ff_exp,
 * n_embd, n_expert}: [n_expert][n_embd][n_ff_exp]).
 *
 * Selection rule: the k largest router logits; equal logits -> the lower expert id first; NaN
 * is never selected while a number is left. The selected list is in rank order (largest first).
 * Router margin: logit of the k-th selected minus the largest unselected logit (>= 0; +inf when
 * k == n_expert): a routing decision is as fragile as an argmax with that margin. */
#ifndef KVD_MOE_H
#define KVD_MOE_H

#include "backend.h"

typedef enum lm_moe_gating {
    /* softmax over the k selected logits only (gpt-oss; llama.cpp gating func 3) */
    LM_MOE_SOFTMAX_TOPK = 0,
    /* softmax over all n_expert logits, take the selected, renormalise them to sum 1
     * (llama.cpp gating func 1 with expert_weights_norm; Mixtral). Mathematically equal to
     * LM_MOE_SOFTMAX_TOPK; rounded differently (the denominator sums all experts first). */
    LM_MOE_SOFTMAX_ALL_RENORM = 1,
    /* softmax over all logits, selected weights used as they are (gating func 1, no norm) */
    LM_MOE_SOFTMAX_ALL = 2
} lm_moe_gating;

#define LM_MOE_MAX_USED 32u

/* sel[k]: the selected expert ids in rank order (rule above). k <= n_expert, k <= LM_MOE_MAX_USED. */
void lm_moe_topk(uint32_t *sel /* [k] */, const float *logits /* [n_expert] */, uint32_t n_expert,
                 uint32_t k);
/* Router margin of a selection (see above). */
float lm_moe_margin(const float *logits /* [n_expert] */, uint32_t n_expert,
                    const uint32_t *sel /* [k] */, uint32_t k);
/* Gate weights w[r] of the selected experts sel[r] (rank order). Orders: every max is exact;
 * sums run left to right in float from +0.0f, over the selected in rank order
 * (SOFTMAX_TOPK, and the renormalisation) or over all experts in id order (the full softmax
 * denominator); each exponential is lm_expf(logit - max); each weight is one division. */
void lm_moe_gate(float *w /* [k] */, const float *logits /* [n_expert] */, uint32_t n_expert,
                 const uint32_t *sel /* [k] */, uint32_t k, lm_moe_gating gating);

typedef struct lm_moe_args {
    uint32_t n;             /* tokens (rows) of the chunk */
    uint32_t n_embd;
    uint32_t n_ff;          /* per expert */
    uint32_t n_expert;
    uint32_t n_used;        /* k */
    lm_moe_gating gating;
    const float *x;         /* [n][n_embd] normed input */
    const lm_wt *w_router;  /* [n_expert][n_embd] */
    const lm_wt *w_gate;    /* [n_expert][n_ff][n_embd] */
    const lm_wt *w_up;      /* [n_expert][n_ff][n_embd] */
    const lm_wt *w_down;    /* [n_expert][n_embd][n_ff] */
    const float *b_router;  /* [n_expert] or NULL */
    const float *b_gate;    /* [n_expert][n_ff] or NULL */
    const float *b_up;      /* [n_expert][n_ff] or NULL */
    const float *b_down;    /* [n_expert][n_embd] or NULL */
    lm_ffn_act act;         /* the experts' gated activation (lm_glu) */
    float *out;             /* [n][n_embd] (overwritten) */
    uint32_t *sel;          /* [n][n_used] selected experts, rank order (written) */
    float *margin;          /* [n] router margin (written), or NULL */
    float *scratch;         /* lm_moe_scratch(n, ...) floats */
    size_t scratch_floats;
    const lm_round_spec *const *in_fmt; /* [4] activation formats of the router, the experts'
                                        gate, up and down products (lm_gemm_nt_act: sites NORM,
                                        NORM, NORM, SWIGLU), or NULL */
} lm_moe_args;

/* Scratch floats lm_moe_forward needs for a chunk of n tokens. */
size_t lm_moe_scratch(uint32_t n, uint32_t n_embd, uint32_t n_ff, uint32_t n_expert,
                      uint32_t n_used);

/* The MoE FFN of a chunk:
 *   R = x . W_router^T (+ b_router)            lm_gemm_nt_act [n][n_expert] (whole chunk),
 *                                              then the bias added (one float add)
 *   per token: sel = top-k(R_t), w = gate(R_t, sel), margin
 *   per expert e (id order): the rows routed to e, in token order, gathered into X_e;
 *     G = X_e . Wg_e^T (+ bg_e), U = X_e . Wu_e^T (+ bu_e)   lm_gemm_nt_act [m_e][n_ff]
 *     H = act(G, U)                            lm_glu, then lm_backend_perturb at
 *                                              LM_SITE_SWIGLU (SR ensemble, profiles)
 *     Y_e = H . Wd_e^T (+ bd_e)                lm_gemm_nt_act [m_e][n_embd]
 *   out_t = sum over ranks r = 0..k-1 of w_r * Y_{sel_r}[t], left to right from +0.0f.
 * With the naive backend every element is a fixed-order dot, so the result of a token does
 * not depend on which other tokens share its chunk (routing included). */
void lm_moe_forward(lm_backend *be, const lm_moe_args *a);

#endif
