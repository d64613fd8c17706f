/* compare_topk.h — a dump of top-k rows (ids and log-probabilities a server returned, no full
 * row) classified with what is there, and a statement of what it cannot prove.
 *
 * Per row at position p, with R the reference's log-softmax row (double) and E, e_gap the
 * log-probability envelope's entries at p:
 *   x's choice  top1_x = the returned id of the largest log-probability (ties to the lower id):
 *               a server's top-k is its k largest, so this is its argmax;
 *   argmax      top1_x against R's argmax; where they differ, gap = R[top1_r] - R[top1_x]
 *               (exact: R is complete) against e_gap decides TIE_FLIP against FLIP
 *               (classify.h's rule 2, unchanged);
 *   err         max |x_i - R_i| over the returned ids only; err > E is DRIFT (proved: those
 *               ids alone exceed the envelope), err <= E is NOISE at those ids only (the
 *               other n_vocab - k ids are unchecked: a full row could still drift);
 *   KL          hx_kl_lower_topk, a lower bound on KL(softmax R || server);
 *   EXACT       the row's ids and log-probability bits equal the baseline's row at p (rule 4).
 * Rows are named "logits@<p>" as the judge's are; the reason ends "(top-k: K of V ids)". */
#ifndef HX_COMPARE_TOPK_H
#define HX_COMPARE_TOPK_H

#include "judge/envelope.h"
#include "kvd_ref.h"
#include "model/dump.h"
#include "model/report.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A lower bound on KL(P || Q), P = softmax of the log-softmax row r_lp [nv] (exp(r_lp)), Q
 * the server's distribution known at ids [k] (log-probabilities lp [k], distinct ids): by the
 * data-processing inequality on the partition {each returned id} + {the rest},
 *   sum_S p_i log(p_i / q_i) + p_rest log(p_rest / q_rest'),
 * with q_rest' = max(0, 1 - sum_S q_i) + nv * 2^-23 (the most a float32 log-softmax row's
 * rounding can leave unaccounted, so that q_rest' is never below the server's true rest); a
 * larger q_rest' only lowers the bound. Clamped to >= 0; 0 when k == 0. In double, ids in the
 * given order. */
double hx_kl_lower_topk(const double *r_lp /* [nv] */, size_t nv, const int32_t *ids /* [k] */,
                        const float *lp /* [k] */, size_t k);

/* Row i of top-k dump d against the row at the same position of top-k dump base (rule 4
 * above): true when base has that position and both rows hold the same ids with the same
 * log-probability bits. *max_abs (optional) is raised to the largest |d - base| over the ids
 * both rows hold. */
bool hx_topk_row_same_bits(const hx_dump *d, uint32_t i, const hx_dump *base, double *max_abs);

/* Appends the rows of top-k dump d (d->topk > 0) to c against the reference log-softmax rows
 * ref_lp and the log-probability envelope env_lp; base (optional, a top-k dump of the same
 * prompt) is the bit-for-bit baseline. Sets c->bitwise_baseline and fills *sum. LM_E_INPUT
 * when a row's position is absent from ref_lp or env_lp, or an id is outside the vocabulary. */
int hx_compare_topk(hx_config_report *c, hx_topk_summary *sum, const hx_dump *d,
                    const hx_dump *base, const ref_capture *ref_lp, const hx_envelope *env_lp,
                    lm_err *err);

#endif
