/* kv_locate.h — where a dump's K/V rows, and its hidden states, first leave the envelope: the
 * judge's localisation of another engine's defect to a (layer, position), as trace.h does for
 * kvdrift's own engine operation by operation.
 *
 * Rows, in forward order: layer 0..n_layer-1, in each position 0..n_prompt-1, at each the K row
 * then the V row (one row: the n_kv_head x head_dim values of one position). Each row is
 * classified as hx_compare_capture classifies a whole K or V tensor (hx_classify_tensor, against
 * the E of that layer's tensor: the envelope holds one E per tensor); a row is outside when its
 * class fails (DRIFT: max |x - R| > E; NONFINITE). So a layer's K or V tensor is DRIFT or
 * NONFINITE exactly when one of its rows is outside. */
#ifndef HX_KV_LOCATE_H
#define HX_KV_LOCATE_H

#include "judge/envelope.h"
#include "kvd_ref.h"
#include "model/capture.h"
#include "model/report.h"

/* Fills out (checked true) from x's K/V against ref's and env's per-layer E. x without K/V
 * (x->k == NULL): out->checked false, LM_OK. Shapes that differ from ref's or env's:
 * LM_E_INPUT. */
int hx_kv_first_outside(hx_kv_first *out, const hx_capture *x, const ref_capture *ref,
                        const hx_envelope *env, lm_err *err);

/* Hidden states, in forward order: the embedding, then each layer's output, those x holds
 * (x->hidden entries not NULL), in each the positions 0..n_prompt-1; one row is a position's
 * n_embd values, classified as a whole tensor against the E of its state (the envelope holds
 * one E per hidden state), outside when its class fails. Fills out (checked true, and
 * out->states [the states x holds], malloc'd) from x's hidden states against ref's and env's.
 * x without hidden states: out->checked false, LM_OK; env without them (env->n_hidden 0):
 * out->no_envelope true, LM_OK. Shapes that differ from ref's or env's: LM_E_INPUT. */
int hx_hidden_first_outside(hx_hidden_first *out, const hx_capture *x, const ref_capture *ref,
                            const hx_envelope *env, lm_err *err);

#endif
