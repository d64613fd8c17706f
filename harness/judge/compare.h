/* compare.h — one configuration against its baseline and the reference: every compared tensor
 * measured, classified against the envelope, and folded into an hx_config_report; and the
 * semantic divergence of a rotating-cache schedule.
 *
 * Inputs (all already captured; nothing here runs the engine or the reference):
 *   x     the configuration's capture (x->k == NULL: an imported dump without K/V, whose
 *         logits rows alone are compared): tokens = prompt + its own greedy continuation; logits rows
 *         teacher-forced on the reference's path, at positions the reference also stored;
 *   base  its baseline's capture (same backend/threads, one chunk), or x itself when x is the
 *         baseline, or NULL when there is none (then nothing can be EXACT);
 *   ref   the reference capture (float64; tokens = prompt + the reference's greedy path). For a
 *         rotating-cache configuration (config rot=MAX/KEEP) the caller passes the reference
 *         computed with that configuration's schedule (ref_request.rot_*, rot_step = its step)
 *         on the same token path, and x's K/V rows are those the engine computed for each
 *         prompt position in logical order, evicted positions included (capture.h), which is
 *         what that reference's K/V mean; so K/V rows compare position by position as usual;
 *   env   the envelope measured for this computation (one entry per layer and logits row).
 * Rows, in order: L<l>.K then L<l>.V for every layer, then logits@<position> for every prompt
 * row of x (hx_capture.prompt_logits) that the reference and the envelope hold, then for every
 * logits row of x. The greedy sequence: the first generated index g where x's tokens leave the reference
 * path; its class is the class of the row logits@(n_prompt - 1 + g) (the row that chose token g,
 * identical on both paths up to g); when that row was not captured the divergence counts as FLIP
 * ("unexplained"). */
#ifndef HX_COMPARE_H
#define HX_COMPARE_H

#include "model/capture.h"
#include "judge/envelope.h"
#include "kvd_ref.h"
#include "model/report.h"

/* Appends rows to c and sets bitwise_baseline, vs_base, first_divergent. Shapes that do not
 * match (layers, heads, dims, vocabulary, prompt length), or a logits position missing from
 * ref or env: LM_E_INPUT naming the position or dimension. */
int hx_compare_capture(hx_config_report *c, const hx_capture *x, const hx_capture *base,
                       const ref_capture *ref, const hx_envelope *env, lm_err *err);

/* LM_E_INPUT naming `what` when shape s (layers, kv heads, dims, vocabulary, prompt) is not
 * the reference's. */
int hx_compare_check_shape(const hx_capture_shape *s, const ref_capture *r, const char *what,
                           lm_err *err);

/* Semantic divergence of a rotating-cache configuration (sets c->sem_*): its schedule's
 * reference `a` against the one-chunk reference `b`, row by row over the shared teacher-forced
 * positions (both on the same token path): the largest |logit difference|, the smallest top-2
 * margin of b, and the first generated index whose argmax differs (-1: none). The semantic
 * change the schedule itself makes, as opposed to the numerical error of the engine. */
void hx_compare_semantic(hx_config_report *c, const ref_capture *a, const ref_capture *b);

#endif
