/* attention_stream.h — attention variants of one chunk over the KV cache (engine-private):
 * streaming (online-softmax, key tiles) attention, a dense attention that supports the same
 * masks, and the pure helpers both share (visibility of a key, softmax with a sink).
 *
 * Visibility rule (both implementations, and the reference): query i of a chunk sits at
 * position q_pos = pos0 + i. Cache slot j holds the key of position kv_pos[j] (kv_pos NULL:
 * slot j holds position j, the plain cache). The key is visible iff
 *     kv_pos[j] <= q_pos                              (causal)
 * and, when window > 0,
 *     q_pos - kv_pos[j] < window                      (sliding window: keys in (q_pos - window, q_pos])
 * which is llama.cpp's LLAMA_SWA_TYPE_STANDARD rule for `%s.attention.sliding_window`, and,
 * when cache_max > 0 (a rotating cache with the exact-window policy, kvcache_rotating.h),
 *     kv_pos[j] < cache_keep  or  q_pos - kv_pos[j] < cache_max - cache_keep
 *
 * Sinks (gpt-oss style): a learned logit per query head that joins the softmax denominator
 * only: p_j = exp(s_j) / (exp(sink_h) + sum_visible exp(s_k)); the sink has no value row. The
 * sink logit lives in the same space as the scaled scores s_j = scale * q.k_j (as llama.cpp's
 * soft_max with sinks). */
#ifndef KVD_ATTENTION_STREAM_H
#define KVD_ATTENTION_STREAM_H

#include "backend.h"

#include <stdbool.h>

/* Keys per tile of the streaming kernel, and queries per block (scores held at once:
 * LM_ATTN_STREAM_QB x tile floats, whatever the context length). */
#define LM_ATTN_STREAM_TILE 256u
#define LM_ATTN_STREAM_QB 64u

typedef struct lm_attn_var_args {
    uint32_t n;             /* queries in the chunk */
    uint32_t pos0;          /* position of query 0; query i sits at pos0 + i */
    uint32_t n_kv;          /* cache slots to consider (keys and values rows) */
    const int32_t *kv_pos;  /* [n_kv] position held by each slot (< 0: empty, never visible);
                               NULL: slot j holds position j */
    uint32_t window;        /* 0: no window; else keys in (q_pos - window, q_pos] */
    uint32_t cache_max;     /* 0: none; else the rotating cache's exact window (needs kv_pos) */
    uint32_t cache_keep;    /* < cache_max: positions always visible */
    const float *sinks;     /* [n_head] sink logits, or NULL: no sinks */
    uint32_t n_head;
    uint32_t n_head_kv;     /* divides n_head: query head h reads kv head h / (n_head / n_head_kv) */
    uint32_t head_dim;
    float scale;            /* multiplies Q.K */
    const float *q;         /* [n][n_head][head_dim] (after RoPE) */
    const float *k;         /* [n_kv][n_head_kv][head_dim] cache slots, K after RoPE */
    const float *v;         /* [n_kv][n_head_kv][head_dim] cache slots */
    float *out;             /* [n][n_head][head_dim] */
    uint32_t tile;          /* stream: keys per tile, 0 = LM_ATTN_STREAM_TILE */
    float *scratch;         /* lm_attn_stream_scratch / lm_attn_masked_scratch floats */
    size_t scratch_floats;  /* its size, checked (an always-on assert) */
} lm_attn_var_args;

/* ---- pure helpers (shared by the dense and the streaming path) ---- */

/* The visibility rule above for one (query position, key position) pair. */
static inline bool lm_attn_visible(uint32_t q_pos, int32_t k_pos, uint32_t window)
{
    if (k_pos < 0 || (uint32_t)k_pos > q_pos)
        return false;
    return window == 0 || q_pos - (uint32_t)k_pos < window;
}

/* The whole rule above for one query position and cache slot j of a. */
static inline bool lm_attn_var_visible(const lm_attn_var_args *a, uint32_t q_pos, uint32_t j)
{
    const int32_t k_pos = a->kv_pos != NULL ? a->kv_pos[j] : (int32_t)j;
    if (!lm_attn_visible(q_pos, k_pos, a->window))
        return false;
    return a->cache_max == 0 || (uint32_t)k_pos < a->cache_keep ||
           q_pos - (uint32_t)k_pos < a->cache_max - a->cache_keep;
}

/* For a plain cache (slot j = position j): the visible keys of the query at q_pos are the
 * slots [*lo, *hi). */
void lm_attn_visible_range(uint32_t q_pos, uint32_t window, uint32_t *lo, uint32_t *hi);

/* Additive mask row by row: mask[i][j] = 0 where the key of slot j is visible to query i,
 * -INFINITY elsewhere (the form llama.cpp's KQ mask has). */
void lm_attn_mask_fill(float *mask /* [n][n_kv] */, uint32_t n, uint32_t pos0,
                       const int32_t *kv_pos /* [n_kv] or NULL */, uint32_t n_kv,
                       uint32_t window);

/* Softmax of one score row in place under a mask, with an optional sink in the denominator.
 * s [n]: entries with mask[j] != 0 (mask NULL: none) become +0.0f. Order: max over the
 * visible entries and the sink (exact: order irrelevant); e_j = lm_expf(s_j - max); sum of the
 * e_j left to right in float from +0.0f, then + lm_expf(sink - max) last; p_j = e_j / sum.
 * No visible entry and no sink: the row is all +0.0f. Returns the number of visible entries. */
uint32_t lm_softmax_sink_row(float *s /* [n] */, const float *mask /* [n] or NULL */, uint32_t n,
                             const float *sink /* one logit or NULL */);

/* ---- attention implementations ---- */

/* Scratch floats of lm_attention_stream (independent of the context length). */
size_t lm_attn_stream_scratch(uint32_t head_dim, uint32_t tile);
/* Scratch floats of lm_attention_masked for a chunk of n queries over n_kv slots. */
size_t lm_attn_masked_scratch(uint32_t n, uint32_t n_kv);

/* Streaming attention. Per query head h, per block of LM_ATTN_STREAM_QB queries, per tile of
 * `tile` cache slots (tiles start at slot 0 and are fixed in slot space, so a query's tiles do
 * not depend on the chunk it is in):
 *   S = scale * Q_blk . K_tile^T               backend gemm_nt [qb][tile]
 *   per row: visible entries only; m' = max(m, max_j S_j); a = lm_expf(m - m');
 *            P_j = lm_expf(S_j - m') (masked: +0.0f); l = l * a + (sum_j P_j, left to right)
 *   T = P . V_tile                             backend gemm_nn [qb][head_dim]
 *   acc = acc * a + T                          per element
 *   a row with no visible key in the tile is left untouched (m, l, acc unchanged);
 *   a tile invisible to every row of the block is skipped.
 * Start: m = sink_h, l = 1 (the sink's own exp(sink - sink)), acc = 0 with a sink; m = -inf,
 * l = 0 without. End: out = acc / l. Never holds more than one tile of scores per block. */
void lm_attention_stream(lm_backend *be, const lm_attn_var_args *a);

/* Dense attention with the same masks and sinks: per head, the scores of the chunk over the
 * slots some query of it can see are materialised (backend gemm_nt), masked and softmaxed row
 * by row (lm_softmax_sink_row), handed to lm_backend_perturb at LM_SITE_SOFTMAX (as dense
 * attention's), then multiplied by V (backend gemm_nn). A stochastically rounding backend is
 * given every slot from 0 (its coins then depend on a key's slot, not on the chunk). */
void lm_attention_masked(lm_backend *be, const lm_attn_var_args *a);

#endif
