/* drive.h — the one way the harness runs kvdrift's own engine. A CONFIG becomes the context's
 * parameters (backend, threads, attention, cache, precision profile) and a schedule of forward
 * calls over a token list (chunks of `step`, the two-turn split of `turn=D`); every forward call
 * of the schedule is handed to a callback with its rows of logits. Every run path of the
 * harness (runner.c, forced.c, trace.c, routing.c, speculative_run.c, block_sweep.c and
 * `kvdrift run`) opens its contexts here and feeds its prompts through hx_drive_feed.
 *
 * A key a path cannot honour is refused, never dropped: each caller states the CONFIG keys it
 * honours (HX_KEY_*), and hx_drive_open refuses a configuration that sets any other with one
 * line naming the key and the path ("trace: CONFIG key spec= (speculative decoding) is not
 * supported here"). The backend is always honoured. */
#ifndef HX_DRIVE_H
#define HX_DRIVE_H

#include "model/config.h"
#include "kvd_engine.h"

#include <stdbool.h>
#include <stdint.h>

/* The CONFIG keys, one bit each (the backend is not among them: every path honours it). */
enum {
    HX_KEY_STEP = 1u << 0,
    HX_KEY_THREADS = 1u << 1,
    HX_KEY_ATTN = 1u << 2,
    HX_KEY_ROT = 1u << 3,
    HX_KEY_PROFILE = 1u << 4,
    HX_KEY_TURN = 1u << 5,
    HX_KEY_SPEC = 1u << 6,
    HX_KEY_DRAFT = 1u << 7,
    HX_KEY_PREFIX = 1u << 8,
    HX_KEY_BATCH = 1u << 9,
    HX_KEY_TP = 1u << 10,
    HX_KEY_END = 1u << 11, /* one past the last key: a new key goes before it */
};
#define HX_KEYS_ALL (HX_KEY_END - 1u)
/* Everything but speculative decoding: the keys of a plain greedy or teacher-forced run. */
#define HX_KEYS_PLAIN (HX_KEYS_ALL & ~(HX_KEY_SPEC | HX_KEY_DRAFT))

/* The keys cfg sets to something other than their default (step=full, the engine's threads,
 * the engine's attention, the plain cache, f32, one turn, no reused prefix, alone, one device,
 * plain decoding). */
unsigned hx_config_keys(const hx_config *cfg);
/* The key's name as a CONFIG string spells it ("step", "rot", ...); key is one HX_KEY_ bit. */
const char *hx_config_key_name(unsigned key);

/* LM_OK when cfg sets no key outside `honoured`; else LM_E_INPUT with "WHO: CONFIG key K= is
 * not supported here" for the first such key in HX_KEY_ order. */
int hx_drive_check(const hx_config *cfg, unsigned honoured, const char *who, lm_err *err);

/* A context for cfg on m holding n_ctx positions, leading batched calls of batch_rows rows
 * (0: none); no key is checked (the co-resident sequences' contexts). */
int hx_drive_open_ctx(lm_ctx **out, const lm_model *m, const hx_config *cfg, uint32_t n_ctx,
                      uint32_t batch_rows, lm_err *err);

/* A configuration's run: the context of the sequence under test and, with batch=B, its
 * co-resident sequences (coresident.h), which share every forward call fed through
 * hx_drive_feed and hx_drive_decode. */
typedef struct hx_drive hx_drive;

/* hx_drive_check, then the drive of cfg on m, its context holding n_ctx positions. */
int hx_drive_open(hx_drive **out, const lm_model *m, const hx_config *cfg, uint32_t n_ctx,
                  unsigned honoured, const char *who, lm_err *err);
void hx_drive_close(hx_drive *d);
/* The context of the sequence under test (its cache, probes, callbacks). */
lm_ctx *hx_drive_ctx(const hx_drive *d);
/* Every cached position forgotten, the co-resident sequences back at their start. */
int hx_drive_reset(hx_drive *d, lm_err *err);

/* Which logits each forward call of a feed computes. */
typedef enum hx_rows {
    HX_ROWS_NONE = 0,  /* none (the output projection is skipped) */
    HX_ROWS_FINAL = 1, /* the feed's last position only (the prompt's next-token row) */
    HX_ROWS_ALL = 2    /* every position of every forward call */
} hx_rows;

/* One forward call of a feed: tokens [n] at absolute positions pos0 .. pos0 + n - 1. logits:
 * HX_ROWS_ALL: [n][n_vocab], valid during the callback only; HX_ROWS_FINAL: the caller's
 * final row [n_vocab] on the feed's last call, NULL before; HX_ROWS_NONE: NULL. */
typedef struct hx_chunk {
    const int32_t *tokens; /* [n] */
    uint32_t pos0, n;
    const float *logits;
} hx_chunk;
/* Called after each forward call, in order; a status other than LM_OK stops the feed and is
 * returned by hx_drive_feed. */
typedef int (*hx_chunk_fn)(void *user, const lm_ctx *ctx, const hx_chunk *ch, lm_err *err);

/* The schedule of the drive's configuration cfg over tokens[n] (n >= 1), appended to what its
 * context ctx holds, every call shared with the co-resident sequences. With cfg->prefix and an
 * empty ctx, first a prefix-cache hit: min(prefix, n - 1) tokens fed by an earlier request
 * in a context of its own, chunked by prefix_step, whose K/V rows ctx adopts
 * (lm_ctx_adopt_prefix; fn sees that context's calls). Then the rest: with cfg->turn the two
 * turns of hx_turn_split (the first part in chunks of step, the decode steps one token per
 * call, the rest in chunks of step), else one prefill in chunks of step (0 = one chunk).
 * final [n_vocab]: receives the last position's logits with HX_ROWS_FINAL (else unused, may be
 * NULL). fn (may be NULL) sees every call. Engine errors pass through. */
int hx_drive_feed(hx_drive *d, const int32_t *tokens, uint32_t n, hx_rows rows, float *final,
                  hx_chunk_fn fn, void *user, lm_err *err);

/* One decode step: tok at the next position, its logits into row [n_vocab] (NULL: none). */
int hx_drive_decode(hx_drive *d, int32_t tok, float *row, lm_err *err);

#endif
