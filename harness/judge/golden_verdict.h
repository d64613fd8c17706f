/* golden_verdict.h — the golden decision of `kvdrift check`: per configuration, its capture hash
 * against the golden entry under its key, and that entry's input against the run's.
 *
 *   entry blessed for other input             -> stale    (fails: "re-bless")
 *   no entry under the key, but one under another key of the same configuration blessed for
 *   other input (a changed prompt changes the key)
 *                                             -> stale    (fails: "re-bless")
 *   no entry under the key otherwise          -> absent   (the class decides; strict fails)
 *   same input, equal hash                    -> match    (the class is kept: a golden match is
 *                                                          a flag, never a class)
 *   same input, other hash                    -> mismatch (the class decides; strict fails)
 *
 * The class stays the classification's (EXACT means bitwise equal to the baseline): bless
 * refuses failing classes, so bits equal to the golden that classify as a failure mean the
 * reference or the envelope changed since blessing, and that verdict is kept. */
#ifndef HX_GOLDEN_JUDGE_H
#define HX_GOLDEN_JUDGE_H

#include "judge/golden.h"
#include "model/report.h"

/* Counts of hx_golden_judge, indexed by hx_golden_status. */
typedef struct hx_golden_counts {
    size_t n[5];
} hx_golden_counts;

/* Judges every configuration of r: keys[i] is configuration i's golden key, now[i] its entry as
 * it would be blessed now (hash, top-5, input). Sets golden, golden_key and golden_note of each
 * configuration (skipped ones, and an adapter's ERROR rows that left no bits, are left alone)
 * and adds to counts. */
int hx_golden_judge(hx_report *r, const hx_golden *g, const char *const *keys /* [n_configs] */,
                    const hx_golden_entry *now /* [n_configs] */, hx_golden_counts *counts,
                    lm_err *err);

#endif
