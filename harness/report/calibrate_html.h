/* calibrate_html.h — calibrate.html, the split-risk calibration page (`make calibrate`,
 * bench/calibrate_split.c): from the bins table calibrate-bins.tsv, per reliability table a
 * reliability diagram (each non-empty bin's mean predicted risk against the observed fraction
 * with its 90% interval, log-log, the diagonal where forecast and outcome agree) and the rows
 * as a table, then the per-profile totals. Self-contained as report.html (report/html_page.h).
 *
 * calibrate-bins.tsv: the header line HX_CALIB_BINS_HEADER, then one line per bin,
 *   table  bin_lo  bin_hi  n  mean_pred  observed  obs_lo90  obs_hi90
 * tab-separated; rows of one table are consecutive lines with the same first field. A table
 * named HX_CALIB_PROFILE_PREFIX + a profile holds one row, [0, 1], the profile's totals. */
#ifndef HX_CALIBRATE_HTML_H
#define HX_CALIBRATE_HTML_H

#include "kvd_common.h"

#define HX_CALIB_BINS_HEADER                                                                    \
    "table\tbin_lo\tbin_hi\tn\tmean_pred\tobserved\tobs_lo90\tobs_hi90"
#define HX_CALIB_PROFILE_PREFIX "profile "

/* Reads bins_tsv and writes html_path (atomically). LM_E_INPUT "FILE:LINE: reason" for a
 * header other than HX_CALIB_BINS_HEADER, a line without its 8 fields, a number that does not
 * parse, a count that is negative or not whole, a probability outside [0, 1], bin_lo > bin_hi or
 * obs_lo90 > obs_hi90 (in a bin with n > 0);
 * lm_read_file's and lm_write_file's errors as they are. */
int hx_calibrate_html_write(const char *bins_tsv, const char *html_path, lm_err *err);

#endif
