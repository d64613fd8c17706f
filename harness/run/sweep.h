/* sweep.h — one whole sweep as a library call: every configuration of a case run, captured,
 * compared with its baseline, the MPFR reference and the measured noise envelope, folded into
 * an hx_report. `kvdrift sweep` prints and writes that report; `kvdrift check` / `bless` use the
 * same call and then look at the kept captures (hashes, top-5 summaries).
 *
 * What one call does, in order:
 *  (a) The common teacher path is the reference's own greedy path. It starts as the greedy
 *      continuation of the "naive" backend at step=full, threads 1 (fixed summation order,
 *      chunk-invariant by construction); after (b) every position is checked against the
 *      reference's argmax on that path, and wherever they differ the path takes the
 *      reference's token, naive's greedy continuation after it, and the reference is computed
 *      again (at most n_gen rounds; usually none). path_source says whether a repair happened
 *      (HX_PATH_REFERENCE) or naive's path already was the reference's (HX_PATH_NAIVE_FULL);
 *      either way ref_leaves_at ends at -1.
 *  (b) The reference capture of prompt + path (K/V of the prompt positions, logits at
 *      n_prompt-1 .. n_prompt-1+n_gen, and at every prompt position before them when the
 *      cost allows: HX_PROMPT_ROWS_MAX_COST, HX_PROMPT_ROWS_MAX_BYTES; the report says which,
 *      and the reference's smallest top-2 margin over every row) via ref_cached in cache_dir:
 *      computed once, then loaded. The configurations and the engine's ensemble then capture
 *      the prompt rows too (hx_run_request.prompt_rows), and every one is classified.
 *  (c) The envelope, one per precision profile among the configurations (config key
 *      profile=, kvd_profile.h; each configuration is classified against its own profile's
 *      envelope). For f32: `ensemble` SR runs of the reference's own float32 model
 *      (envelope_sr.h: independent of the engine, so an engine defect never widens the envelope
 *      that judges it; extra = HX_ENVELOPE_SR_MODE in the key below) when it implements the
 *      model and engine_envelope is false; otherwise, and for every other profile (its members
 *      then rounding stochastically at the profile's sites, the hooks being the engine's), `ensemble` runs of the "naive-sr" backend (stochastic rounding of every
 *      matrix product's multiply-adds and random rounding of every elementwise stage, see
 *      backend_naive_sr.c; the statistic, a spread around the members' mean, in envelope.h)
 *      at step=full with seeds sr_seed + i, i = 0..ensemble-1, captured by
 *      hx_run_capture on the same path, folded by hx_envelope_from_ensemble with
 *      HX_ENVELOPE_SAFETY, and cached beside the reference: key hx_envelope_key(reference key,
 *      ensemble, sr_seed, safety, extra) with extra = "<ensemble mode>;path=<XXH3-128 of the
 *      teacher-path run's capture>" (that hash changes whenever the engine's naive arithmetic
 *      does, so an engine change never reuses an old envelope), file hx_envelope_cache_path.
 *      A cached envelope whose key does not match is recomputed, never used.
 *  (d) Each configuration: hx_run_capture on the path; its baseline (same backend, threads and
 *      attn, step=full) is run once and shared by every configuration that needs it (when the
 *      baseline is itself in the list, its own capture is used); hx_compare_capture against
 *      baseline, reference and envelope; XXH3-128 hash (hx_capture_hash); speed and memory:
 *      prefill_tps = n_prompt / prefill_s, decode_tps = n_decode / decode_s, peak_mem_bytes =
 *      ctx_bytes (KV cache + scratch; weights are shared and not counted).
 *      A rotating-cache configuration (rot=MAX/KEEP) is compared instead against the reference
 *      with its own schedule (ref_request rot_max_size/rot_keep, rot_step = its step; cached
 *      like the plain one), and that reference is compared with the same cache's one-chunk
 *      reference (rot_step 0) into the report's sem_* fields (semantic divergence: argmax
 *      changes, max |dlogit|, smallest one-chunk margin, over the teacher-forced rows); with
 *      the exact-window policy (rot=MAX/KEEP/window) both are the step-1 schedule, which is what
 *      that policy computes at every step (sem_same_schedule). The
 *      envelope stays the plain cache's one-chunk ensemble (an approximation of the rounding
 *      noise of another schedule: same operations, different key sets).
 *      A two-turn configuration (turn=D, config.h hx_turn_split) feeds the same prompt tokens
 *      in another schedule: with the plain cache it computes the same mathematics and is judged
 *      against the shared reference and envelope; with a rotating cache its schedule reference
 *      follows the two turns (ref_request.rot_turn_*).
 *      Before (b), the engine's weights and hyperparameters are checked against the
 *      reference's own reading of the model file (judge/model_check.h hx_model_check), also
 *      when the reference comes from the cache: a difference is LM_E_DISAGREE naming it.
 *  (e) MoE models only: routing flips of every configuration against the reference's routing
 *      of the prompt, the TIE band measured with the same `ensemble` size and seeds as (c)
 *      (hx_routing_measure, routing.h); the numbers go to routing and into the report.
 * Progress: one line per configuration (and one each for path, reference, envelope, routing)
 * through the log callback unless quiet; the library itself prints nothing.
 *
 * Parallelism: jobs > 1 runs the ensemble members and the configurations of backends without
 * LM_BE_SHARES_PROCESS_STATE on that many threads (each run has its own context; the model is
 * read-only); the others (blas) run alone afterwards, because OpenBLAS's thread count is
 * process-global and concurrent calls were measured to change bits. Results are identical for
 * any jobs (tested); only the measured speeds of the parallel runs are then shared-CPU numbers.
 *
 * Errors: LM_E_INPUT for bad parameters (no configurations, ensemble < 8, prompt + n_gen
 * beyond the model's context, a token id out of range), naming the thing; engine, reference and
 * I/O errors pass through. A configuration that produces NaN/Inf is not an error: it is
 * classified NONFINITE. On error *out is NULL and nothing is written. */
#ifndef HX_SWEEP_H
#define HX_SWEEP_H

#include "model/capture.h"
#include "model/config.h"
#include "judge/envelope.h"
#include "kvd_engine.h"
#include "kvd_profile.h"
#include "kvd_ref.h"
#include "model/report.h"
#include "run/routing.h"
#include "run/runner.h"

#include <stdbool.h>
#include <stdint.h>

#define HX_SWEEP_DEFAULT_ENSEMBLE 8u
#define HX_SWEEP_DEFAULT_SEED 0x6b76647269667431ull /* "kvdrift1" */
/* Every prompt position's logits are classified when that adds at most this fraction to the
 * reference pass and one configuration's prompt logits fit in HX_PROMPT_ROWS_MAX_BYTES. */
#define HX_PROMPT_ROWS_MAX_COST 0.5
#define HX_PROMPT_ROWS_MAX_BYTES (256.0 * 1048576.0)

typedef struct hx_sweep_params {
    const lm_model *model;
    const ref_model *ref;     /* the reference's own view of the same file (ref_model_open) */
    const char *model_label;  /* written into the report (path or synth:...); NULL: "model" */
    const char *case_name;    /* report case name; NULL: "sweep" */
    const int32_t *prompt;    /* [n_prompt] token ids */
    uint32_t n_prompt;        /* >= 1 */
    uint32_t n_gen;           /* greedy tokens per configuration = teacher path length; may be 0 */
    const hx_config *configs; /* [n_configs], run and reported in this order */
    size_t n_configs;         /* >= 1 */
    uint32_t precision;       /* reference bits; 0 = REF_DEFAULT_PREC */
    uint32_t ensemble;        /* SR members; 0 = HX_SWEEP_DEFAULT_ENSEMBLE; must be >= 8 */
    uint64_t sr_seed;         /* member i uses sr_seed + i (wrapping) */
    bool sr_seed_set;         /* false: HX_SWEEP_DEFAULT_SEED (so 0 is a usable seed) */
    const char *cache_dir;    /* reference + envelope cache; NULL/"": lm_cache_dir's default */
    int ref_threads;          /* reference threads; 0 = all online cores (never changes results) */
    uint32_t jobs;            /* engine runs in parallel; 0 or 1 = one at a time */
    bool strict_bits;         /* copied into the report (check's policy) */
    bool quiet;               /* no progress lines (warnings still go to log) */
    /* Progress and warning lines, one per call, without a newline (the library never prints);
     * NULL: none. */
    void (*log)(void *user, const char *line);
    void *log_user;
    ref_progress_fn ref_progress; /* the reference passes' progress callback (ref_request),
                                     NULL: none */
    void *ref_progress_user;
    bool time_once;           /* speeds from one run each instead of the median of repeats
                                 (hx_run_request.time_once): for callers that read only classes */
    bool engine_envelope;     /* envelope members from the engine's naive-sr backend even when
                                 the reference's SR model implements the model (envelope_sr.h) */
} hx_sweep_params;

typedef enum hx_path_source {
    HX_PATH_NAIVE_FULL = 0, /* naive:step=full:threads=1's greedy path, equal to R's */
    HX_PATH_REFERENCE = 1   /* R's greedy path, repaired where naive's path left it */
} hx_path_source;

/* Everything one configuration produced, kept for check/bless. */
typedef struct hx_sweep_run {
    hx_config cfg;
    hx_capture *cap;      /* tokens = prompt + own greedy; logits rows teacher-forced on path */
    uint8_t hash[16];     /* hx_capture_hash(cap) */
    char hash_hex[33];
    hx_run_stats stats;
    double wall_s;        /* wall seconds of its engine run (hx_run_capture) */
    int64_t baseline;     /* index into hx_sweep_result.runs of its baseline when the baseline
                             is among the configurations (its own index when it is one), else
                             -1: the baseline was run privately */
    const hx_capture *base; /* the baseline's capture either way (owned by the result) */
} hx_sweep_run;

typedef struct hx_sweep_result {
    hx_report *report;        /* configs[i] <-> runs[i] <-> params.configs[i] */
    hx_sweep_run *runs;       /* [n_runs] */
    size_t n_runs;
    hx_capture **extra_base;  /* [n_extra_base] baselines not among the configurations */
    size_t n_extra_base;
    hx_path_source path_source;
    int32_t *path;            /* [n_gen] the teacher path */
    uint8_t path_hash[16];    /* hx_capture_hash of the teacher-path run (prompt + greedy) */
    uint32_t n_gen;
    int64_t ref_leaves_at;    /* -1 once (b) is done: R's argmax equals the path everywhere */
    int32_t ref_token_at;     /* R's argmax there (valid when ref_leaves_at >= 0) */
    ref_capture ref;          /* the reference on prompt + path */
    bool prompt_rows;         /* logits classified at every prompt position (prompt_rows_allowed
                                 in sweep.c); false: at the last one only */
    uint32_t *pos;            /* [n_prompt + n_gen] 0, 1, ...: the reference's positions when
                                 prompt_rows */
    char ref_key[33];         /* ref_cache_key */
    bool ref_hit;             /* loaded from the cache */
    hx_envelope *env;         /* the first configuration's profile's envelope (one of below) */
    hx_envelope *env_prof[LM_PROFILES_MAX]; /* per lm_profile_at(i); NULL: not used */
    bool env_hit;             /* loaded from the cache */
    hx_routing_result routing; /* (e) MoE routing flips (measured false for a dense model) */
    bool env_ref_sr;          /* members: SR runs of the reference's model (envelope_sr.h);
                                 false: the engine's naive-sr backend */
    /* Wall seconds of each phase (for the overhead benchmark). */
    double path_s, ref_s, ensemble_s, configs_s, compare_s, total_s;
} hx_sweep_result;

int hx_sweep_run_all(hx_sweep_result **out, const hx_sweep_params *p, lm_err *err);

#ifdef LM_TEST_HOOKS
/* Test builds only: when >= 0, the first teacher path is made wrong at this generated index
 * (token + 1), so that the repair toward the reference's greedy path is exercised. */
extern int64_t hx_sweep_test_poison_path;
#endif
void hx_sweep_result_free(hx_sweep_result *r);

#endif
