/* kvcache_rotating.h — the slot bookkeeping of a rotating KV cache with `max_size` and
 * `keep` (engine-private), with MLX's RotatingKVCache semantics (mlx_lm cache.py):
 *
 * - A chunk of n > 1 tokens ("concat" update, prefill): the cached slots are put in temporal
 *   order (sorted by position), then, if more than max_size - 1 are cached, the oldest ones
 *   after the first `keep` are dropped so that exactly max_size - 1 remain (the first `keep`
 *   positions always stay), and the chunk is appended. The cache therefore grows to
 *   max_size + n - 1 slots during prefill, and which positions a token sees depends on the
 *   prefill step.
 * - A chunk of 1 token ("in-place" update, generation or step-1 prefill): if more than
 *   max_size slots are cached (right after a concat), the oldest after `keep` are dropped down
 *   to max_size; the cache then works as a circular buffer of max_size slots: the write slot
 *   advances by one and wraps from max_size to `keep`, overwriting the oldest non-kept token.
 *   The slot order is then not the logical order — valid because K is cached after RoPE and
 *   attention is permutation invariant over the keys.
 * - Attention after an update: chunk token i (position pos0 + i) attends to every cached slot
 *   whose position is <= its own (causal by position; rotating-cache layers have no other
 *   window). So each new token attends to at least min(max_size - 1, position) previous
 *   tokens, the first `keep` included. (Recent mlx_lm versions additionally mask the concat
 *   case with a window of max_size in slot-index space; kvdrift follows the rule above, which
 *   keeps the invariant the harness checks.)
 * - max_size >= every position reached: nothing is ever dropped, slot j holds position j, and
 *   the cache is the plain one.
 *
 * - The exact-window policy (lm_rotcache.window, lm_ctx_params.rot_window) keeps the same
 *   slots but makes attention chunk-invariant: the query at position q attends to the slots
 *   whose position k satisfies k <= q and (k < keep or q - k < max_size - keep), the set a
 *   single step sees above. A concat keeps max_size - 1 older positions, which is what its
 *   first row needs; its later rows are masked down to their window.
 *
 * This file keeps only positions; the caller moves its K/V rows as a plan says. */
#ifndef KVD_KVCACHE_ROTATING_H
#define KVD_KVCACHE_ROTATING_H

#include "kvd_common.h"

#include <stdbool.h>

typedef struct lm_rotcache {
    uint32_t max_size;   /* >= 2 */
    uint32_t keep;       /* < max_size */
    uint32_t cap;        /* slots: max_size + max_chunk - 1 */
    uint32_t max_chunk;
    uint32_t size;       /* slots in use: [0, size) */
    uint32_t idx;        /* next in-place write slot (MLX _idx) */
    uint32_t offset;     /* tokens seen: the position of the next token */
    bool window;         /* the exact-window policy (set after init; false: MLX's) */
    uint32_t rollback_min; /* smallest position a rollback may go back to: one past the last
                              position written over an older slot (in-place wrap) */
    int32_t *pos;        /* [cap] position held by each slot; -1 = empty */
    uint32_t *gather;    /* [cap] the last plan's moves */
    int32_t *tmp;        /* [cap] */
} lm_rotcache;

/* What one update did: the caller first moves its rows (new slot s < n_move takes the row of
 * old slot gather[s]; skip when !moved), then writes the chunk's rows at write0 .. write0+n-1,
 * then attends over slots [0, n_kv) with kv_pos as positions. */
typedef struct lm_rotcache_plan {
    bool moved;
    uint32_t n_move;
    const uint32_t *gather; /* [n_move] */
    uint32_t write0;
    uint32_t pos0;          /* position of the chunk's first token */
    uint32_t n_kv;
    const int32_t *kv_pos;  /* [n_kv] */
} lm_rotcache_plan;

int lm_rotcache_init(lm_rotcache *rc, uint32_t max_size, uint32_t keep, uint32_t max_chunk,
                     lm_err *err);
void lm_rotcache_release(lm_rotcache *rc);
void lm_rotcache_reset(lm_rotcache *rc);
/* Registers a chunk of n tokens (1 <= n <= max_chunk) and fills *plan (valid until the next
 * update). */
int lm_rotcache_update(lm_rotcache *rc, uint32_t n, lm_rotcache_plan *plan, lm_err *err);
/* Forgets positions >= n_past (n_past <= offset): their slots, which must be the last ones
 * (appended by a concat or by in-place writes that did not wrap), are emptied, and the next
 * chunk starts at n_past. LM_E_INPUT when n_past < rollback_min (a rolled-back token was
 * written over an older one, which is lost). */
int lm_rotcache_rollback(lm_rotcache *rc, uint32_t n_past, lm_err *err);
/* Moves rows [cap][dim] as the plan says (tmp: [n_move][dim] scratch). */
void lm_rotcache_apply(const lm_rotcache_plan *p, float *rows, uint32_t dim, float *tmp);
/* Whether the query at q_pos attends to a cached key of position k_pos (< 0: empty slot)
 * under rc's policy (causal; with rc->window also the exact window above). */
bool lm_rotcache_sees(const lm_rotcache *rc, uint32_t q_pos, int32_t k_pos);
/* After an update for a chunk starting at pos0: the positions token i attends to, ascending,
 * into out [n_kv]; returns their count. */
uint32_t lm_rotcache_visible(const lm_rotcache *rc, uint32_t pos0, uint32_t i, int32_t *out);

#endif
