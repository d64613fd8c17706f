/* capture.h — what one engine configuration produced (tokens, KV cache after prefill, logits
 * at the compared positions), its canonical byte serialization and its XXH3-128 hash.
 *
 * Canonical serialization, format HX_CAPTURE_FORMAT = 1, every field little-endian:
 *   u32 format            (= 1)
 *   u32 n_layer, n_kv_head, head_dim, n_vocab, n_prompt, n_tokens, n_pos
 *   i32 tokens[n_tokens]               prompt ids then generated ids
 *   for layer 0..n_layer-1:
 *     f32 K[n_prompt][n_kv_head][head_dim]   (IEEE-754 bits as stored, NaN payloads included)
 *     f32 V[n_prompt][n_kv_head][head_dim]
 *   u32 positions[n_pos]               absolute positions of the logits rows, increasing
 *   f32 logits[n_pos][n_vocab]
 * K/V rows are in logical position order 0..n_prompt-1. With a rotating KV cache (config
 * rot=MAX/KEEP) the cache after prefill no longer holds every position (and its slots are not in
 * position order), so the capture holds, per position, the K/V rows the engine computed for that
 * position under the configuration's schedule (taken as each chunk writes them, runner.c),
 * including positions evicted later; the reference's K/V (ref_request.rot_*) mean the same.
 * With max_size >= the sequence length nothing is evicted and these are the plain cache's rows.
 * The dimensions are hashed too, so captures of different shapes never share a hash.
 * The hash is XXH3-128 (seed 0) of these bytes, shown as 32 lowercase hex digits of its
 * canonical (big-endian) form — XXH128_canonicalFromHash, the same form as the model hash. */
#ifndef HX_CAPTURE_H
#define HX_CAPTURE_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#define HX_CAPTURE_FORMAT 1u

typedef struct hx_capture_shape {
    uint32_t n_layer, n_kv_head, head_dim, n_vocab;
    uint32_t n_prompt; /* positions whose K/V are captured */
    uint32_t n_tokens; /* prompt + generated ids (>= n_prompt) */
    uint32_t n_pos;    /* logits rows */
} hx_capture_shape;

typedef struct hx_capture {
    hx_capture_shape shape;
    int32_t *tokens;    /* [n_tokens] */
    float **k;          /* [n_layer] -> [n_prompt][n_kv_head][head_dim], K after RoPE */
    float **v;          /* [n_layer] -> [n_prompt][n_kv_head][head_dim] */
    uint32_t *positions; /* [n_pos] absolute position of each logits row */
    float *logits;      /* [n_pos][n_vocab] */
    /* Logits at the prompt positions before the last (0 .. n_prompt_rows-1), when the run was
     * asked for them (hx_run_request.prompt_rows): [n_prompt_rows][n_vocab], malloc'd, freed
     * by hx_capture_free; NULL / 0 otherwise. Not part of the canonical bytes or the hash. */
    uint32_t n_prompt_rows;
    float *prompt_logits;
    /* Hidden states at the prompt positions, when known (a dump's hidden/, an SR member):
     * hidden [n_layer + 1] -> [n_prompt][n_embd], [0] the embedding as layer 0 reads it,
     * [l + 1] the residual stream after layer l; an entry NULL where absent, hidden NULL when
     * none. malloc'd, freed by hx_capture_free; not part of the canonical bytes or the hash. */
    uint32_t n_embd;
    float **hidden;
} hx_capture;

/* Allocates every array zero-filled (one block per tensor); the caller fills them.
 * LM_E_INPUT when n_tokens < n_prompt, LM_E_NOMEM on overflow or allocation failure. */
int hx_capture_create(hx_capture **out, const hx_capture_shape *shape, lm_err *err);
void hx_capture_free(hx_capture *c);

/* Elements in one layer's K (= V): n_prompt * n_kv_head * head_dim. */
size_t hx_capture_kv_elems(const hx_capture_shape *s);

/* Feeds the canonical bytes, in order, to sink(user, bytes, n) in pieces (the tensors are passed
 * straight from memory on little-endian hosts: no copy of the whole capture). A sink returns
 * 0 to go on, nonzero to stop (then this returns LM_E_IO). */
typedef int (*hx_sink_fn)(void *user, const void *bytes, size_t n);
int hx_capture_serialize(const hx_capture *c, hx_sink_fn sink, void *user, lm_err *err);

/* XXH3-128 of the canonical bytes, streamed through an XXH3 state; out is the canonical
 * big-endian form. */
int hx_capture_hash(uint8_t out[16], const hx_capture *c, lm_err *err);
/* (16 bytes -> 32 lowercase hex digits: lm_hex_encode in util.h.) 32 hex digits (either case) -> 16 bytes; LM_E_INPUT when malformed. */
int hx_hash_from_hex(uint8_t out[16], const char *hex, lm_err *err);

/* Writes the canonical bytes to a stream (for `--dump` and tests). */
int hx_capture_write(const hx_capture *c, FILE *f, lm_err *err);

/* Index of the logits row for absolute position pos, or -1. */
int64_t hx_capture_row(const hx_capture *c, uint32_t pos);
/* The logits row [n_vocab] at absolute position pos: a logits row, else a prompt row; NULL
 * when the capture holds neither. */
const float *hx_capture_logits_at(const hx_capture *c, uint32_t pos);

/* An engine probe's rows [pos0, pos0 + n) of x [n][row_elems] at one layer, those below
 * position limit, into dst[layer] ([limit][row_elems]); nothing when layer >= n_layer or
 * pos0 >= limit. The K/V and hidden-state probes of runner.c and forced.c keep rows this way. */
void hx_capture_keep_rows(float *const *dst, uint32_t n_layer, uint32_t limit, uint32_t layer,
                          uint32_t pos0, uint32_t n, const float *x, size_t row_elems);

#endif
