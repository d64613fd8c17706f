/* runner.h — runs one engine configuration and captures what the harness compares: K/V of
 * every layer after prefill, the greedy continuation, and logits teacher-forced on a given
 * path (normally the reference's greedy path) so rows stay comparable after a split. */
#ifndef HX_RUNNER_H
#define HX_RUNNER_H

#include "model/capture.h"
#include "model/config.h"
#include "kvd_engine.h"

typedef struct hx_run_request {
    const int32_t *prompt;  /* [n_prompt] */
    uint32_t n_prompt;      /* >= 1 */
    uint32_t n_gen;         /* greedy tokens to generate (no EOS stop: lengths stay equal) */
    const int32_t *forced;  /* [n_forced] the teacher path after the prompt; may be NULL when
                               n_forced == 0 */
    uint32_t n_forced;
    bool time_once;         /* the speeds are the captured run's alone (no repeats, below) */
    bool prompt_rows;       /* also capture the logits at prompt positions 0..n_prompt-2
                               (hx_capture.prompt_logits), from a second prefill of the same
                               schedule that computes every row's logits (not timed) */
    lm_layer_fn on_layer;   /* called after each layer of the captured run's prefill (progress
                               lines; lm_ctx_set_layer_fn), or NULL */
    void *on_layer_user;
} hx_run_request;

/* Timing: a short run's prefill and decode are repeated (on the captured token path) until each
 * has run for HX_TIME_MIN_S in total and at least HX_TIME_MIN_REPS times (at most
 * HX_TIME_MAX_REPS); the reported time is the median, single shots being too noisy on small
 * models. Repeats stop once prefill and decode together have run HX_TIME_ENOUGH_S: a run that
 * long is measured by its own shot, and repeating it would multiply a big model's sweep time.
 * Not for a two-turn configuration (turn > 0) or with time_once: one run's times. */
#define HX_TIME_MIN_S 0.05
#define HX_TIME_ENOUGH_S 1.0
#define HX_TIME_MIN_REPS 3
#define HX_TIME_MAX_REPS 64

/* Whether a timing repeat is due after n runs whose prefills and decodes took prefill_s and
 * decode_s in total (the rule above). */
bool hx_time_repeat_due(int n, double prefill_s, double decode_s);

typedef struct hx_run_stats {
    double prefill_s, decode_s;   /* wall seconds of the prefill and of the greedy decode: the
                                     median of repeated runs (hx_run_capture, HX_TIME_MIN_S) */
    uint32_t n_decode;            /* forward calls in the greedy decode */
    uint64_t ctx_bytes;           /* KV cache + scratch of the context: its peak footprint */
    bool reran_forced;            /* the greedy path left the teacher path, so the forced rows
                                     needed a second prefill */
} hx_run_stats;

/* Captures one configuration. Tokens = prompt + n_gen greedy ids (lm_argmax); logits rows at
 * positions n_prompt-1 .. n_prompt-1+n_forced, each computed on prompt + forced[0..j) in decode
 * mode (one token per forward call, as generation does); while the greedy path equals the
 * forced path the generation's own rows are used, so a config that never splits runs once.
 * Engine errors pass through; LM_E_INPUT when the context would exceed the model's. */
int hx_run_capture(hx_capture **out, hx_run_stats *stats, const lm_model *m, const hx_config *cfg,
                   const hx_run_request *rq, lm_err *err);

#endif
