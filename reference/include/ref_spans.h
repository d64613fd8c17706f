/* ref_spans.h — the weight-span histograms of a model's matrices (rows counted by
 * ref_dx_row_span, the last bin REF_DX_SPAN_BINS - 1 holding every longer span), kept with the
 * model (ref_model.spans) for its lifetime: each matrix is counted once, whole, and every later
 * product with it reads the counts. Safe to call from several threads at once. The counts
 * only steer the digit widths (ref_dx_widths), never the numbers: counts kept for a matrix
 * that is later changed in place cost speed, not exactness. */
#ifndef KVD_REF_SPANS_H
#define KVD_REF_SPANS_H

#include "ref_dotx.h"
#include "ref_model.h"

#include <stdbool.h>
#include <stdint.h>

/* The histogram of w [n_out][n_in] kept with m into hist[REF_DX_SPAN_BINS]; false when m keeps
 * none for it (hist untouched). A matrix is known by w, n_out and n_in. */
bool ref_spans_find(const ref_model *m, const float *w, uint64_t n_out, uint64_t n_in,
                    uint64_t *hist);
/* Keeps hist as w's histogram with m (one that is kept already stays). Nothing is kept when
 * memory runs out: products then count again, never wrongly. */
void ref_spans_keep(const ref_model *m, const float *w, uint64_t n_out, uint64_t n_in,
                    const uint64_t *hist);
/* Counts w's rows [r0, r1) into hist (hist += their spans), w's rows n_in long. */
void ref_spans_count(uint64_t *hist, const float *w, uint64_t n_in, uint64_t r0, uint64_t r1);
/* Frees what m keeps (ref_model_release); m keeps nothing afterwards. */
void ref_spans_release(ref_model *m);

#endif
