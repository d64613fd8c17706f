/* trace.h — where two configurations first part: every named operation of the forward pass
 * (the engine's checkpoints, lm_ctx_set_probe) recorded for configurations A and B on the same
 * tokens, compared position by position in forward order, bitwise and against a measured
 * per-operation noise envelope. `kvdrift trace` prints it.
 *
 * Tokens: the prompt, prefilled in each configuration's own chunks (logits of every row are
 * computed, which changes no other bit: the engine computes each logits row alone), then n_gen
 * decode steps fed one token at a time on A's greedy path, so both see the same positions.
 *
 * Operations, in forward order: per layer attn_norm, q, k, v, attn, attn_out, attn_resid,
 * ffn_norm, ffn_act, ffn_out, residual (kvd_engine.h), then out_norm and logits (layer ==
 * n_layer) for every position.
 *
 * Envelope (per operation and position, when ensemble >= HX_ENVELOPE_MIN_MEMBERS): M runs of
 * the "naive-sr" backend (stochastic rounding, seeds sr_seed + i, step=full, on the same
 * tokens) against one run of "naive" (fixed order, step=full):
 *   E(op, pos) = HX_ENVELOPE_SAFETY * max_m max_i |x^m_i - x^naive_i|
 * Both sides of that difference are rounded computations, as A and B are, so |A - B| <= E is
 * "as far apart as rounding puts two runs"; beyond it the two compute different things (or one
 * has a rounding-sensitive defect). Positions are absolute (0 = first prompt token). */
#ifndef HX_TRACE_H
#define HX_TRACE_H

#include "model/config.h"
#include "kvd_engine.h"

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

typedef struct hx_trace_op {
    uint32_t layer;      /* n_layer for out_norm and logits */
    char op[16];         /* "attn_norm", "q", ..., "out_norm", "logits" */
    size_t row_elems;
    uint32_t n_pos;      /* positions compared (rows both runs produced) */
    uint32_t n_pos_diff; /* positions whose rows differ in any bit */
    int64_t first_pos;   /* first differing position, -1 when none */
    double max_abs;      /* max over positions and elements of |A - B| (NaN when NaN met) */
    uint32_t max_pos;    /* position of max_abs */
    uint64_t max_ulp;    /* float32 ULP distance at most (HX_ULP_NAN with a NaN) */
    bool nonfinite;      /* A or B has NaN/Inf here */
    double e_at_max;     /* envelope at max_pos (NaN without envelope) */
    double worst_ratio;  /* max over positions of max_abs(pos) / E(pos) (Inf when E = 0 < diff) */
    int64_t beyond_pos;  /* first position whose |A - B| exceeds E (or is nonfinite), -1 none */
} hx_trace_op;

typedef struct hx_trace_params {
    const lm_model *model;
    const int32_t *prompt; /* [n_prompt] */
    uint32_t n_prompt;     /* >= 1 */
    uint32_t n_gen;        /* decode steps after the prompt, on A's greedy path */
    hx_config a, b;
    uint32_t ensemble;     /* SR members for the envelope; 0 = no envelope, else >= 8 */
    uint64_t sr_seed;      /* member i uses sr_seed + i */
    uint32_t jobs;         /* members run side by side; 0 or 1 = one at a time (the envelope's
                              bits do not depend on it) */
} hx_trace_params;

typedef struct hx_trace_result {
    uint32_t n_prompt, n_gen;
    int32_t *path;         /* [n_gen] A's greedy tokens (fed to both) */
    size_t n_ops;
    hx_trace_op *ops;      /* [n_ops] forward order */
    int64_t first_diff;    /* index into ops of the first with any differing bit, -1: identical */
    int64_t first_beyond;  /* index of the first beyond the envelope, -1: none or no envelope */
    bool has_env;
    uint32_t ensemble;
    hx_config a, b;        /* the two configurations (for the "why" of the summary) */
} hx_trace_result;

/* Runs A, B (and the ensemble), compares. LM_E_INPUT for an empty prompt, a token out of range,
 * prompt + n_gen beyond the model's context, 0 < ensemble < 8, or a backend the engine does
 * not know; engine errors pass through. NaN/Inf are results, not errors. */
int hx_trace_run(hx_trace_result **out, const hx_trace_params *p, lm_err *err);
void hx_trace_result_free(hx_trace_result *r);

/* One line: "A vs B part first at L0 q (max abs 2.4e-07 at pos 3, 5 of 12 positions);
 * first beyond the envelope: none" or "A vs B: identical at every operation (...)". */
void hx_trace_summary(char *buf, size_t n, const hx_trace_result *r, const char *a_name,
                      const char *b_name);
/* The summary line, then (table) one row per operation: bits differing at how many positions,
 * first such position, max |A - B| and ULP, E at that position, worst |A - B| / E over
 * positions, and a mark ("=", "bits", "BEYOND", "NONFINITE"). */
void hx_trace_print(FILE *f, const hx_trace_result *r, const char *a_name, const char *b_name,
                    bool table);

#endif
