/* dumps.h — the judge's decisions about imported dumps beyond the per-row classes (which are
 * classify.h's, through hx_compare_capture): KL statistics, which profile explains a dump, the
 * greedy sequence's departure, and two dumps against each other. Pure functions of measured
 * numbers; nothing here runs an engine or the reference. */
#ifndef HX_DUMPS_H
#define HX_DUMPS_H

#include "model/classify.h"
#include "model/report.h"

#include <stdbool.h>
#include <stdint.h>

/* llama-perplexity's summary of per-row KL values kl [n] (sorted in place, ascending) with
 * n_same rows whose argmax equals the reference's: see hx_kl_stats (report.h). n == 0 gives
 * zeros and same_top1 = 1. */
void hx_kl_stats_compute(hx_kl_stats *out, double *kl /* [n] */, uint32_t n, uint32_t n_same);

/* Value at fraction f of sorted v [n] (n >= 1), linear between closest ranks. */
double hx_percentile_sorted(const double *v /* [n] */, uint32_t n, double f);

/* Which profile explains a dump: among profiles k = 0..n-1 that are candidates (idle NULL or
 * idle[k] false) and whose class cls[k] passes (hx_class_fails false), the one with the
 * smallest e_scale[k] (its median logits envelope); the first of equals. -1 when none passes.
 * idle[k] marks a profile that rounds nothing on the judged model (lm_profile_rounds_on): it
 * computes what f32 computes, and its envelope differs from f32's only by the draw of its
 * ensemble, so it explains nothing f32 does not. */
int hx_explain_profile(const hx_class *cls /* [n] */, const double *e_scale /* [n] */,
                       const bool *idle /* [n] or NULL */, uint32_t n);

/* The greedy sequence: gen [n_gen] is the dump's own continuation of the prompt; path [n_path]
 * the tokens its logits rows were computed on after the prompt; r_top [n_path + 1] the
 * reference's argmax at the rows n_prompt-1+j (j = 0..n_path; -1 where that row is absent).
 * Compared at each j while gen and path agree before j (the rows are then on gen's own path)
 * and the row exists: the first j with gen[j] != r_top[j] is the departure. *compared gets the
 * number of indices compared. Returns the departure or -1. */
int64_t hx_greedy_departure(const int32_t *gen, uint32_t n_gen, const int32_t *path,
                            uint32_t n_path, const int32_t *r_top, uint32_t *compared);

/* Where a greedy continuation leaves the reference, and by how much the reference preferred
 * its own choice there. */
typedef struct hx_departure {
    int64_t at;         /* generated index of the departure (hx_greedy_departure); -1 none */
    uint32_t compared;  /* generated indices compared */
    int32_t chose;      /* at the departure: the continuation's id */
    int32_t ref_top;    /* and the reference's argmax */
    double margin;      /* R[ref_top] - R[chose] in that row (> 0 unless tied); NaN when at < 0 */
} hx_departure;

/* hx_greedy_departure of gen [n_gen] on path [n_path] with the reference's rows r_rows
 * [n_path + 1] (row j at position n_prompt-1+j, [n_vocab] each; NULL where absent), and the
 * ids and the reference's margin at the departure. */
int hx_departure_find(hx_departure *out, const int32_t *gen, uint32_t n_gen,
                      const int32_t *path, uint32_t n_path,
                      const double *const *r_rows /* [n_path + 1] */, uint32_t n_vocab,
                      lm_err *err);

/* Two dumps' rows a [n][n_vocab] and b [n][n_vocab] at the same positions pos [n], with the
 * reference rows r [n][n_vocab] and the logits envelope e [n] at those positions: fills every
 * field of out except a and b. */
void hx_dump_pair_compare(hx_dump_pair *out, const float *a, const float *b, const double *r,
                          const double *e, const uint32_t *pos, uint32_t n, uint32_t n_vocab);

#endif
