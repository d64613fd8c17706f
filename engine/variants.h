/* variants.h — the architecture variants of a context (engine-private): which attention
 * implementation runs (dense | stream), sliding windows and sinks per layer, the rotating KV
 * cache's slot plan, the MoE FFN, and the scratch and peak-scratch accounting they need.
 * forward.c owns the plain llama path and calls in here only where a variant applies, so a
 * plain model in dense mode computes exactly what it did before (same kernels, same bits). */
#ifndef KVD_VARIANTS_H
#define KVD_VARIANTS_H

#include "kvd_engine.h"

#include "attention.h"
#include "backend.h"

typedef struct lm_variants lm_variants;

/* Validates p->attn and the rotating-cache parameters against the model; allocates every
 * scratch buffer once, sized for chunks of up to n_ctx tokens. */
int lm_variants_create(lm_variants **out, const lm_model *m, const lm_ctx_params *p,
                       uint32_t n_ctx, lm_err *err);
void lm_variants_free(lm_variants *v);
void lm_variants_reset(lm_variants *v);

/* KV slots per layer the context must allocate (n_ctx, or more for a rotating cache). */
uint32_t lm_variants_kv_slots(const lm_variants *v);
/* Whether the plain dense score buffer [n_ctx][n_ctx] is needed (dense mode). */
bool lm_variants_needs_dense_scores(const lm_variants *v);
const char *lm_variants_attn_name(const lm_variants *v);
bool lm_variants_rotating(const lm_variants *v);

/* Start of a chunk of n tokens at position n_past: the rotating cache's bookkeeping. */
int lm_variants_begin_chunk(lm_variants *v, uint32_t n_past, uint32_t n, lm_err *err);
/* Forgets positions >= n_past (the rotating cache's slots; nothing to do otherwise). */
int lm_variants_rollback(lm_variants *v, uint32_t n_past, lm_err *err);
/* Slot of the chunk's first new K/V row in every layer (n_past without a rotating cache). */
uint32_t lm_variants_write_slot(const lm_variants *v, uint32_t n_past);
/* Moves one layer's cached rows as the chunk's rotating plan says (nothing otherwise).
 * k, v: [slots][kv_dim]. */
void lm_variants_move_layer(lm_variants *v, float *k, float *vv, uint32_t kv_dim);

/* Whether layer il takes the variant attention (stream mode, a window, sinks or a rotating
 * cache); otherwise forward.c runs lm_attention_dense and reports it with note_dense. */
bool lm_variants_attn_layer(const lm_variants *v, uint32_t il);
/* Attention of layer il for a chunk: a carries n, pos0, heads, scale, q, the layer's k and v
 * slot arrays and out (a->scores is not used). */
void lm_variants_attention(lm_variants *v, lm_backend *be, uint32_t il, const lm_attn_args *a);
/* Peak accounting of the plain dense path: n queries over n_kv keys on backend be. */
void lm_variants_note_dense(lm_variants *v, const lm_backend *be, uint32_t n, uint32_t n_kv);

/* Whether layer il's FFN is a mixture of experts. */
bool lm_variants_moe_layer(const lm_variants *v, uint32_t il);
/* MoE FFN of layer il: xn [n][n_embd] normed input, act the products' activation formats
 * (lm_moe_args.in_fmt, may be NULL); returns its output [n][n_embd] (a buffer of the variants,
 * valid until the next call). */
float *lm_variants_moe(lm_variants *v, lm_backend *be, uint32_t il, uint32_t n, const float *xn,
                       const lm_round_spec *const *act);
/* Routing of layer il in the last chunk: ids [n][k] in rank order and margins [n]. */
const uint32_t *lm_variants_moe_sel(const lm_variants *v, uint32_t il, uint32_t *n, uint32_t *k,
                                    const float **margin);

/* Rotating cache: positions of the slots [*n] after the last chunk; NULL otherwise. */
const int32_t *lm_variants_kv_pos(const lm_variants *v, uint32_t *n);

/* Largest attention + MoE scratch (bytes) a chunk has used so far, and the largest chunk. */
size_t lm_variants_peak_bytes(const lm_variants *v);
uint32_t lm_variants_peak_rows(const lm_variants *v);

#endif
