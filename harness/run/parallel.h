/* parallel.h — independent jobs on a few threads: the SR ensembles' members and sweep's
 * configurations (each job its own engine context on a shared, read-only model). */
#ifndef HX_PARALLEL_H
#define HX_PARALLEL_H

#include "kvd_common.h"

#include <stdint.h>

#define HX_JOBS_MAX 64u /* threads hx_run_jobs starts at most */

/* Job i; LM_OK or an error code with *err filled. */
typedef int (*hx_job_fn)(void *ctx, uint32_t i, lm_err *err);
/* After job i returned rc: one call at a time, in the order the jobs finish (a fold done here
 * must not depend on that order, e.g. a maximum). */
typedef void (*hx_job_done_fn)(void *ctx, uint32_t i, int rc);

/* Jobs i = 0..n-1, claimed in order by up to `jobs` threads (0 or 1: one after another on the
 * calling thread, as when no thread can be started). Once a job has failed no further job
 * starts. Returns LM_OK, or the error of the failing job with the lowest i. done may be NULL. */
int hx_run_jobs(uint32_t n, uint32_t jobs, hx_job_fn run, hx_job_done_fn done, void *ctx,
                lm_err *err);

#endif
