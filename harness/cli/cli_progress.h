/* cli_progress.h — what a long reference pass or SR envelope costs, said before it starts, and
 * its progress while it runs (on stderr): on a terminal one line rewritten in place about once a
 * second, otherwise a plain line at least every 5 seconds; nothing when quiet. Used as the
 * ref_request.progress callback by `kvdrift ref`, `kvdrift sweep` and `kvdrift judge`. */
#ifndef KVD_CLI_PROGRESS_H
#define KVD_CLI_PROGRESS_H

#include "kvd_ref.h"

#include <stdbool.h>

typedef struct hx_progress {
    const char *prefix; /* before "reference: " / "envelope: " ("sweep: " or "") */
    bool quiet, tty;
    bool open_line;    /* a tty line was written and not ended */
    double last;       /* elapsed seconds of the last line */
    const char *cache_dir; /* where the result will be cached (named in the cost line) or NULL */
} hx_progress;

void hx_progress_init(hx_progress *p, const char *prefix, bool quiet);
/* One line: multiply-adds of rq, the estimated seconds (a ~20 ms calibration of this machine's
 * dot product, divided over threads; 0 = all cores) and where the result will be cached
 * (cache_dir NULL: not cached). */
void hx_progress_cost(hx_progress *p, const ref_model *m, const ref_request *rq, int threads,
                      const char *cache_dir);
/* ref_progress_fn: user is an hx_progress. The start of a pass (done 0) prints the cost line
 * (hx_progress_cost with the pass's threads and p->cache_dir; for an envelope, its members at
 * the SR kernel's calibrated speed). */
void hx_progress_cb(void *user, const ref_progress *pr);
/* Ends a tty line left open. */
void hx_progress_end(hx_progress *p);

#endif
