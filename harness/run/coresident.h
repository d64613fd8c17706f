/* coresident.h — the co-resident sequences of `batch=B`: B - 1 other requests that share every
 * forward call of the sequence under test, as a serving engine's continuous batching puts
 * them. Each has its own context (KV cache, positions, mask) and a seeded prompt; per call it
 * adds its next rows: as many prompt rows as the sequence under test feeds (prefilling
 * alongside), one decode row once its prompt is in, or, with `batch=B/decode`, one decode row
 * from the start (its prompt was fed alone beforehand). A sequence whose context is full sits
 * out (a finished request). Their tokens and lengths are fixed by a seed, so a configuration
 * always meets the same neighbours; their outputs are never looked at. */
#ifndef HX_CORESIDENT_H
#define HX_CORESIDENT_H

#include "model/config.h"
#include "kvd_engine.h"

#include <stdint.h>

typedef struct hx_coresident hx_coresident;

/* The rows a leading context needs for cfg's calls of at most n_ctx rows of its own
 * (lm_ctx_params.batch_rows): its own and at most as many for each co-resident sequence. */
uint32_t hx_coresident_rows(const hx_config *cfg, uint32_t n_ctx);

/* cfg->batch - 1 sequences on m, with cfg's backend, threads, attention, cache and profile,
 * each holding its prompt (up to n_ctx / 2 tokens, at least 1) plus n_ctx decode steps;
 * *out = NULL when cfg->batch < 2. In decode mode their prompts are fed here. */
int hx_coresident_create(hx_coresident **out, const lm_model *m, const hx_config *cfg,
                         uint32_t n_ctx, lm_err *err);
void hx_coresident_free(hx_coresident *c);
/* Every sequence back to its start (decode mode: its prompt fed again). */
int hx_coresident_reset(hx_coresident *c, lm_err *err);

/* One forward call of the sequence under test (lead; tokens [n], mode and logits as
 * lm_forward's) with every co-resident sequence's next rows (lm_forward_batch). */
int hx_coresident_forward(hx_coresident *c, lm_ctx *lead, const int32_t *tokens, uint32_t n,
                          lm_logits_mode mode, float *logits, lm_err *err);

#endif
