/* report_diff.h — `kvdrift diff OLD/report.json NEW/report.json`: per configuration (matched
 * by case name and configuration string) the class change, the worst err/E change, new argmax
 * flips (fewer positions agreeing with the reference's top-1, or a first divergence that moved
 * earlier or appeared) and the decode speed change; which of them are regressions.
 *
 * A regression: the configuration now fails and did not; its class got worse (severity order)
 * into TIE_FLIP or beyond; it has new flips; it disappeared; or (slow_pct > 0) its decode
 * tok/s fell by more than slow_pct percent. Reads single-case report.json files and
 * several-case ones (check --json, {"reports": [...]}). */
#ifndef HX_REPORT_DIFF_H
#define HX_REPORT_DIFF_H

#include "model/config.h"
#include "kvd_common.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hx_diff_side {
    bool present;
    char cls[16];
    bool fails;
    double ratio;          /* worst_err_over_envelope */
    int64_t top1, n_pos;   /* logits.top1_agree, logits.positions */
    int64_t first_div;     /* first_divergent, -1 none */
    double decode_tps;     /* 0 = not measured */
} hx_diff_side;

typedef struct hx_diff_row {
    char case_name[128];
    char config[HX_CONFIG_STR_MAX];
    hx_diff_side old, new_;
    bool regression;
    char why[200];         /* the regressions, "; " joined ("" when none) */
} hx_diff_row;

/* A report file larger than this is refused unread (check --json of hundreds of cases stays
 * far below it). */
#define HX_REPORT_DIFF_MAX_BYTES (256u << 20)

/* Reads both files and fills *rows (malloc'd): every configuration of OLD in its order, then
 * the ones only NEW has. LM_E_IO / LM_E_INPUT naming the file and what is wrong. */
int hx_report_diff(hx_diff_row **rows, size_t *n, const char *old_path, const char *new_path,
                   double slow_pct, lm_err *err);

#endif
