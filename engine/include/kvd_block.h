/* kvd_block.h — an iterative block sampler in the style of masked-diffusion language models,
 * over the engine's one chunked forward pass with bidirectional attention inside the block.
 *
 * For each block of `block` positions after the prompt (n_blocks blocks, one after another):
 * every position starts as mask_id. Iteration t = 1, 2, ...: the block (committed tokens and
 * masks) is run as one bidirectional chunk after the cached prefix, every row's logits
 * computed; for each still-masked position, p = softmax(row) (double, max subtracted), the
 * candidate = argmax over ids != mask_id, confidence = p[candidate], entropy = -sum p ln p.
 * Committed this iteration: every masked position whose confidence >= threshold (criterion
 * CONFIDENCE) or entropy <= threshold (ENTROPY); if none passes, the single best one
 * (highest confidence, lowest entropy; ties to the lower position), so each iteration commits
 * at least one. Early stops: when every candidate equals the previous iteration's (a stable
 * prediction), or at iteration max_iters, all remaining positions are committed at once. A
 * committed token never changes. The finished block is then run once more as a bidirectional
 * chunk and kept in the cache as context for the next block.
 * Criterion LOW_CONFIDENCE instead is LLaDA's low-confidence remasking schedule: iteration t
 * (1-based) of S = max_iters commits the k = ceil(left / (S - t + 1)) masked positions of
 * highest confidence (ties to the lower position), left being the positions still masked;
 * no threshold and no stability stop, so a block takes min(S, block) iterations. */
#ifndef KVD_BLOCK_H
#define KVD_BLOCK_H

#include "kvd_engine.h"

/* Chunks of this context attend bidirectionally inside themselves (only with dense attention
 * and no windows, sinks or rotating cache: lm_forward fails otherwise). Causal by default. */
void lm_ctx_set_bidir(lm_ctx *c, bool on);

typedef enum lm_block_criterion {
    LM_BLOCK_CONFIDENCE = 0,
    LM_BLOCK_ENTROPY = 1,
    LM_BLOCK_LOW_CONFIDENCE = 2
} lm_block_criterion;

typedef struct lm_block_params {
    uint32_t block;          /* positions per block, >= 1 */
    uint32_t n_blocks;       /* blocks, >= 1 */
    uint32_t max_iters;      /* iteration cap per block, >= 1 */
    lm_block_criterion criterion;
    double threshold;        /* confidence in (0, 1] or entropy >= 0 (nats); unused by
                                LOW_CONFIDENCE */
    int32_t mask_id;         /* the mask token */
    uint32_t step;           /* prompt prefill chunk (0 = one chunk) */
} lm_block_params;

typedef struct lm_block_trace {
    int32_t *tokens;     /* [n_blocks * block] the completion */
    uint32_t *iter;      /* [n_blocks * block] iteration (1-based, within its block) that
                            committed each position */
    uint32_t n_iters;    /* iterations run, all blocks */
    /* How close the decisions came to going the other way (how much noise would flip one):
     * the smallest top-1 minus top-2 logit of a candidate (non-mask ids), and the smallest
     * probability margin of a commit decision: |confidence - threshold| (or |entropy -
     * threshold|) of every position, and best minus runner-up when the single best is taken;
     * LOW_CONFIDENCE: the k-th committed confidence minus the best one left masked. */
    double min_logit_gap;
    double min_commit_gap;
} lm_block_trace;

/* The context must be empty, on dense attention, and hold prompt + n_blocks * block
 * positions; it is left causal again afterwards. */
int lm_block_generate(lm_ctx *c, const int32_t *prompt, uint32_t n_prompt,
                      const lm_block_params *p, lm_block_trace *out, lm_err *err);

#endif
