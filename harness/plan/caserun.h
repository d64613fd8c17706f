/* caserun.h — runs one case file for `kvdrift check` and `kvdrift bless`: resolves its model
 * (a file, or a synthetic preset written into the cache folder), tokenizes its prompt, and runs
 * the whole sweep (sweep.h); then looks every configuration up in the golden file.
 *
 * A model file that does not exist, a device backend (LM_BE_DEVICE) without its device, or a
 * backend loaded at run time (LM_BE_LOADED, blis) without its library, is not an error: the case is skipped (skipped = true, the
 * reason in skip_reason) and its report lists the configurations, unrun, with
 * hx_config_report.skipped set, so JUnit shows them as <skipped/>.
 *
 * A case naming another engine (engine = ADAPTER, case.h) runs that adapter's sweep instead
 * (run/adapter_sweep.h: its knob axes from [knobs], each configuration's dump judged under the
 * profile its setting implies); its golden entries are the dumps' bits under the adapter's
 * key (golden_key.h hx_golden_key_adapter), pinned to its engine_version. An adapter that says
 * it is not installed here (plan/adapter_resolve.h: LM_E_UNSUPPORTED) skips the case; a knob or
 * value it does not declare is LM_E_INPUT naming the case file, before anything runs. */
#ifndef HX_CASERUN_H
#define HX_CASERUN_H

#include "plan/case.h"
#include "judge/fingerprint.h"
#include "judge/golden.h"
#include "judge/golden_key.h"
#include "kvd_model.h"
#include "ref_model.h"
#include "model/report.h"
#include "run/adapter_sweep.h"
#include "run/sweep.h"

#include <stdbool.h>

typedef struct hx_caserun_opts {
    const char *cache_dir; /* reference/envelope/synthetic-model cache; NULL: lm_cache_dir's
                              default ($KVDRIFT_CACHE, else ~/.cache/kvdrift) */
    bool strict;           /* --strict (ORed with the case's strict_bits into the report) */
    bool quiet;            /* no sweep progress lines */
    void (*log)(void *user, const char *line); /* the sweep's progress lines (sweep.h); NULL:
                                                  none */
    void *log_user;
    uint32_t jobs;         /* engine runs in parallel (sweep.h); 0/1 one at a time */
} hx_caserun_opts;

typedef struct hx_caserun {
    hx_case *c;                 /* the parsed case (owned) */
    char model_path[4096];      /* the GGUF actually loaded (synthetic: its cache file) */
    bool skipped;               /* model file absent: nothing ran */
    char skip_reason[256];
    lm_model *model;            /* NULL when skipped */
    ref_model *ref;             /* the reference's own view of the same file; NULL when skipped */
    uint32_t n_prompt;
    char rope_probe[17];        /* the golden keys' libm probe of the model over the positions
                                   its runs read, 0..n_prompt+n_gen-1 (golden_key.h) */
    hx_sweep_result *sweep;     /* NULL when skipped */
    hx_golden_input input;      /* what its golden entries are pinned to (model, tokens,
                                   version; set when it ran) */
    hx_report *report;          /* sweep->report (adapter->report), or (skipped) a report of
                                   unrun configs; owned through the sweep when it ran, else by
                                   this struct */
    bool own_report;
    /* Another engine's case (c->engine): */
    char adapter_path[4096];    /* its executable (hx_adapter_resolve) */
    hx_adapter_desc *desc;      /* its description; NULL for kvdrift's engine */
    hx_adapter_config *knob_configs; /* [n_knob_configs] the [knobs] axes' cross product */
    size_t n_knob_configs;
    hx_adapter_sweep_result *adapter; /* its run; NULL when skipped */
} hx_caserun;

/* Runs the already loaded case c (ownership of c passes to *out, also on error). */
int hx_caserun_create(hx_caserun **out, hx_case *c, const hx_caserun_opts *o, lm_err *err);
void hx_caserun_free(hx_caserun *r);

/* Golden file of a case: DIR/<name>.json; DIR is golden_dir when given, else the folder
 * "golden" beside the case file (cases/x.case -> cases/golden/x.json, wherever kvdrift runs). */
#define HX_GOLDEN_SUBDIR "golden"
int hx_caserun_golden_path(char *out, size_t cap, const char *golden_dir, const hx_case *c,
                           lm_err *err);

/* Fills the golden entry of run i (hash, top-5 of the logits row at the last prompt position,
 * and r->input). */
int hx_caserun_entry(hx_golden_entry *e, const hx_caserun *r, size_t i, lm_err *err);

/* The golden key of run i's configuration on this machine (golden_key.h). */
void hx_caserun_key(hx_golden_key *k, const hx_caserun *r, size_t i, const hx_fingerprint *fp);

/* Another engine's case, in two steps (caserun_engine.c). Plan: the adapter resolved and
 * described and the [knobs] axes planned into r->desc and r->knob_configs, or r->skipped when
 * the adapter is not installed here. Run: its sweep on r->model (loaded) and prompt [n_prompt]
 * into r->adapter and r->report. */
int hx_caserun_engine_plan(hx_caserun *r, lm_err *err);
int hx_caserun_engine_run(hx_caserun *r, const int32_t *prompt, const hx_caserun_opts *o,
                          lm_err *err);
/* The configuration names of r->knob_configs in report order (the adapter's baseline first),
 * or the engine as written when it was not described (not installed): *out malloc'd [*n]. */
int hx_caserun_engine_names(char (**out)[HX_CONFIG_STR_MAX], size_t *n, const hx_caserun *r,
                            lm_err *err);

#endif
