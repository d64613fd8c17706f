/* classify.h — the classes of docs/DESIGN.md's table as pure functions of already measured numbers.
 *
 * Rules, applied in this order to one compared tensor (one layer's K or V, or one logits row):
 *   1. NONFINITE  x has a NaN or +-Inf anywhere.
 *   2. Argmax (logits only, has_argmax): when top1_x != top1_r,
 *        gap <= e_gap and err <= e   -> TIE_FLIP   (a near tie that rounding may flip)
 *        gap <= e_gap and err >  e   -> DRIFT      (the flip itself is within rounding, but the
 *                                                   row carries more error than rounding explains:
 *                                                   the table has no row for this case, and
 *                                                   passing it would hide a defect)
 *        gap >  e_gap                -> FLIP
 *      where gap = R[top1_r] - R[top1_x] (>= 0) and e_gap the envelope of that difference.
 *   3. Same argmax (or no argmax):  err <= e -> NOISE,  err > e -> DRIFT.
 *   4. EXACT replaces NOISE when x is bitwise equal to its baseline: bitwise equality makes x's
 *      numbers the baseline's, so "the baseline is within E of R" is rule 3 on the same data.
 *      A configuration bitwise equal to a baseline that drifts, flips or tie-flips gets that
 *      class, never EXACT (a defect shared by every configuration is still a defect).
 * Boundaries: err == e is NOISE (<=), the next double above e is DRIFT; gap == e_gap is
 * TIE_FLIP, the next double above is FLIP. err is max_i |x_i - R_i| in double (hx_metrics.max_abs)
 * and e is the envelope's per-tensor E (envelope.h). */
#ifndef HX_CLASSIFY_H
#define HX_CLASSIFY_H

#include "kvd_common.h"
#include "model/metrics.h"

#include <stdbool.h>
#include <stdint.h>

/* Worst last: the numeric order is the severity order, so worst-of is max. */
typedef enum hx_class {
    HX_EXACT = 0,
    HX_NOISE = 1,
    HX_TIE_FLIP = 2,
    HX_SEMANTIC = 3,    /* neither rounding nor a bug: the configuration's cache policy makes
                           its rows attend to other keys than the comparison's, by definition
                           (MLX's rotating cache in a multi-token chunk, speculative_verdict.h) */
    HX_DRIFT = 4,
    HX_FLIP = 5,
    HX_NONFINITE = 6,
    HX_SEQ_MISMATCH = 7, /* not numerical: speculative decoding chose other tokens, or with
                           another processor history, than plain decoding (speculative_verdict.h) */
    HX_ERROR = 8        /* nothing to classify: another engine's adapter did not produce a
                           usable dump (it hung, crashed, wrote none or a malformed one, or
                           computed another model) */
} hx_class;
#define HX_N_CLASSES 9

/* "EXACT", "NOISE", "TIE_FLIP", "SEMANTIC", "DRIFT", "FLIP", "NONFINITE", "SEQ_MISMATCH",
 * "ERROR". */
const char *hx_class_name(hx_class c);
/* Inverse of hx_class_name; -1 when s names no class. */
int hx_class_from_name(const char *s);
/* The more severe of a and b (ERROR > SEQ_MISMATCH > NONFINITE > FLIP > DRIFT > SEMANTIC > TIE_FLIP >
 * NOISE > EXACT). */
hx_class hx_class_worst(hx_class a, hx_class b);
/* CI default: DRIFT, FLIP, NONFINITE, SEQ_MISMATCH, ERROR fail; EXACT, NOISE, TIE_FLIP, SEMANTIC
 * pass. */
bool hx_class_fails(hx_class c);

typedef struct hx_cls_input {
    bool x_nonfinite;      /* any NaN/Inf in x */
    bool bitwise_baseline; /* x is bitwise equal to its baseline B (B's bits = x's bits) */
    double err;            /* max_i |x_i - R_i|, finite when !x_nonfinite */
    double e;              /* envelope E for this tensor, >= 0 */
    bool has_argmax;       /* logits: apply rule 2 */
    int32_t top1_x, top1_r;
    double gap;            /* R[top1_r] - R[top1_x], >= 0 */
    double e_gap;          /* envelope of that difference, >= 0 */
} hx_cls_input;

typedef struct hx_verdict {
    hx_class cls;
    char reason[256]; /* one line with the deciding numbers, e.g. "err 3.1e-06 > E 1.2e-06" */
} hx_verdict;

/* Applies the rules. LM_E_INPUT (and no verdict) when e or e_gap (if used) is negative or NaN,
 * or err is NaN while x_nonfinite is false: the caller has no envelope or a broken metric. */
int hx_classify(hx_verdict *out, const hx_cls_input *in, lm_err *err);

/* Convenience over whole tensors: measures x [n] vs r [n] and classifies. b [n] is the
 * baseline or NULL; when b is NULL, bitwise_baseline says whether x equals it (e.g. from a hash
 * comparison). Logits rows (is_logits) use e_gap and argmax. m_out (optional) gets the
 * metrics vs R; lm_out (optional, logits only) the logit metrics. */
int hx_classify_tensor(hx_verdict *out, hx_metrics *m_out, hx_logit_metrics *lm_out,
                       const float *x /* [n] */, const float *b /* [n] or NULL */,
                       bool bitwise_baseline, const double *r /* [n] */, size_t n, bool is_logits,
                       double e, double e_gap, lm_err *err);

/* First index where two token sequences differ (a shorter sequence differs at its end);
 * -1 when they are equal. */
int64_t hx_first_divergence(const int32_t *a /* [na] */, size_t na, const int32_t *b /* [nb] */,
                            size_t nb);

#endif
