/* adapter_sweep.h — another engine's knobs as sweep axes: each configuration of an adapter
 * (model/adapter.h) run through run/adapter_exec.h into a dump, checked (hx_dump_load), then
 * every dump judged at once by hx_judge_run_all (run/dumps_run.h), each under the profile its
 * setting implies (or the caller's) and bit for bit against the adapter's default
 * configuration, so the report is a sweep's: one row per configuration.
 *
 * What one call does, in order:
 *  (a) The baseline (every knob at its default) first, then each configuration, in order: a
 *      fresh folder under a temporary folder of the cache, the adapter run with
 *        --model MODEL --tokens IDS --n-gen N --out DIR [--set KEY=VALUE ...]
 *      (only knobs that differ from their default are set), stdout must stay empty, then the
 *      dump loaded and checked against the model. Anything wrong (no start, a time-out, a
 *      signal, a non-zero exit, output on stdout, no dump, a malformed one, another prompt)
 *      makes that configuration an ERROR row with one line saying why; the others go on.
 *  (b) The dumps that loaded judged together (hx_judge_run_all), names as configurations.
 *  (c) "Not the same model": a configuration whose greedy continuation leaves the reference
 *      at its first token (when it has one), that agrees with the reference's argmax on fewer than half of its
 *      rows, and whose worst err/E exceeds HX_ADAPTER_FOREIGN_RATIO becomes an ERROR ("not the
 *      same model") instead of a FLIP: its logits are another model's, not a rounding or a
 *      numerical defect.
 *  (d) The report: every configuration in order (the baseline first), ERROR rows included;
 *      configurations with a dump keep their dump section (KL, explaining profile).
 * None ran (every configuration ERROR): LM_E_INPUT naming the first reason. The temporary
 * folder is removed whatever happens. */
#ifndef HX_ADAPTER_SWEEP_H
#define HX_ADAPTER_SWEEP_H

#include "kvd_model.h"
#include "ref_model.h"
#include "model/adapter.h"
#include "model/report.h"

#include <stdbool.h>
#include <stdint.h>

#define HX_ADAPTER_FOREIGN_RATIO 1000.0
#define HX_ADAPTER_DEFAULT_TIMEOUT 600.0

typedef struct hx_adapter_sweep_params {
    const char *adapter_path;          /* the executable */
    const hx_adapter_desc *desc;       /* its description (hx_adapter_desc_parse) */
    const hx_adapter_config *configs;  /* [n_configs] (hx_adapter_plan) */
    size_t n_configs;
    const lm_model *model;
    const ref_model *ref;              /* the reference's own view of the same file */
    const char *model_path;            /* the GGUF given to the adapter */
    const char *model_label;
    const int32_t *prompt;             /* [n_prompt] */
    uint32_t n_prompt;
    uint32_t n_gen;
    const char *profile;               /* every configuration under this profile; NULL: each
                                          under the one its setting implies */
    double timeout_s;                  /* per adapter run; 0: HX_ADAPTER_DEFAULT_TIMEOUT */
    uint32_t precision, ensemble;      /* as hx_judge_params */
    uint64_t sr_seed;
    bool sr_seed_set;
    const char *cache_dir;
    uint32_t jobs;
    bool quiet;
    lm_log_fn log;
    void *log_user;
} hx_adapter_sweep_params;

/* The dumps' bits kept for goldens: per report configuration, the XXH3-128 of its dump as the
 * adapter wrote it (hash of the capture made from it, hx_capture_hash, before the judge cuts
 * continuations that part to their shared ids) and its logits at the last prompt position. */
typedef struct hx_adapter_sweep_result {
    hx_report *report;
    size_t n;                          /* = report->n_configs */
    bool *ran;                         /* [n] a dump was judged (not an ERROR row) */
    uint8_t (*hash)[16];               /* [n] */
    float **last_row;                  /* [n] -> [n_vocab] logits at n_prompt - 1, NULL when
                                          not ran */
    uint32_t n_vocab;
} hx_adapter_sweep_result;

int hx_adapter_sweep_run(hx_adapter_sweep_result **out, const hx_adapter_sweep_params *p,
                         lm_err *err);
void hx_adapter_sweep_result_free(hx_adapter_sweep_result *r);

#endif
