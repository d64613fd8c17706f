/* coverage.h — what a sweep's configurations exercise of the engine's code paths: the axis
 * values they cover, and each engine threshold (kvd_engine.h lm_threshold, read from the
 * engine, never copied) that none of them reaches, recorded in the report so that the table
 * header, report.json and report.md say what the sweep did NOT look at.
 *
 * A configuration reaches a threshold when it matches the threshold's attention
 * implementation (attn default = dense), backend and thread condition (>= 2 threads on a
 * backend without LM_BE_ONE_THREAD) and, for LM_THR_CHUNK_ROWS, its largest forward call
 * (its step, at most the prompt; step=full: the prompt) has at least `value` rows; for
 * LM_THR_KEYS, its largest attended slot count has at least `value` slots: prompt + generated
 * positions (the last teacher-forced row attends over all of them), with a rotating cache at
 * most max_size + chunk - 1. Reaching a threshold is necessary for the path behind it to run,
 * not sufficient (e.g. sliding windows shorten what a query attends over). */
#ifndef HX_COVERAGE_H
#define HX_COVERAGE_H

#include "model/config.h"
#include "model/report.h"

#include <stddef.h>
#include <stdint.h>

/* Fills r->covered and r->unexercised[] for configurations cfgs[n] on a prompt of n_prompt
 * tokens followed by n_gen generated ones. */
void hx_coverage_fill(hx_report *r, const hx_config *cfgs, size_t n, uint32_t n_prompt,
                      uint32_t n_gen);

#endif
