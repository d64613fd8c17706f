/* forced.h — one engine configuration run teacher-forced over a given token list (the input an
 * imported dump was made from): logits at chosen positions, K/V of the first n_kv positions. */
#ifndef HX_FORCED_H
#define HX_FORCED_H

#include "model/capture.h"
#include "model/config.h"
#include "kvd_engine.h"

typedef struct hx_forced_request {
    const int32_t *tokens;   /* [n_tokens] */
    uint32_t n_tokens;       /* >= 1 */
    uint32_t n_kv;           /* K/V rows captured: positions 0..n_kv-1 (1..n_tokens) */
    const uint32_t *pos;     /* [n_pos] logits positions, strictly increasing, < n_tokens */
    uint32_t n_pos;
    bool hidden;             /* also the residual stream after each layer at positions
                                0..n_kv-1 (the engine's "residual" checkpoint,
                                lm_ctx_set_probe) into the capture's hidden[l + 1]; the
                                embedding is no engine checkpoint: hidden[0] stays NULL */
} hx_forced_request;

/* Feeds every token under cfg's schedule (hx_drive_feed: chunks of step, turn=D's two turns;
 * backend, threads, attn and profile as cfg sets them; a rotating cache is refused: the K/V
 * rows are read from the cache's slots), each call's logits computed for all its rows and the
 * rows at rq->pos kept; then the cache's first n_kv rows of every layer. The capture's tokens
 * are rq->tokens and n_prompt is n_kv. LM_E_INPUT for a bad request. */
int hx_run_forced(hx_capture **out, const lm_model *m, const hx_config *cfg,
                  const hx_forced_request *rq, lm_err *err);

/* Called (one call at a time) after member i of hx_run_forced_members has run: done members
 * so far, and the seconds since the first started. */
typedef void (*hx_member_done_fn)(void *user, uint32_t i, uint32_t done, double elapsed_s);

/* The naive-sr members of the ensemble under profile ("" = f32; ensemble.h): hx_run_forced of
 * hx_ensemble_member(profile, seed, i) into mem[i], i = 0..m-1, on up to `jobs` threads (0 or
 * 1, one after another). Each
 * member is its own context on the shared, read-only model, so mem[i] has the same bits
 * whatever jobs is. On failure every mem[i] is freed and NULL, and the first failing member's
 * error (in member order) is returned. */
int hx_run_forced_members(hx_capture **mem /* [m] */, uint32_t m, const lm_model *model,
                          const char *profile, uint64_t seed, const hx_forced_request *rq,
                          uint32_t jobs, hx_member_done_fn done, void *user, lm_err *err);

#endif
