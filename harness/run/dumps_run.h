/* dumps_run.h — `kvdrift judge` as a library call: imported dumps (dump.h) classified against
 * the MPFR reference and the measured envelope of each precision profile, exactly as a sweep
 * classifies a configuration (hx_compare_capture), folded into an hx_report.
 *
 * What one call does, in order:
 *  (a) Checks that every dump holds the same n_prompt and prompt ids, the given prompt
 *      (LM_E_INPUT naming the dump and the index otherwise). Dumps whose ids part after the
 *      prompt (other greedy continuations fed back) are judged on the ids they share: each is
 *      cut to the common prefix (hx_dump_truncate; its tokens_generated kept whole), and a
 *      progress line says where they part.
 *  (b) The reference on those tokens: K/V of the n_prompt positions, logits at the union of the
 *      dumps' positions, through the reference cache (ref_cached).
 *  (c) Per profile (lm_profile_find; default: every profile): for f32, as sweep, `ensemble`
 *      SR runs of the reference's own float32 model (envelope_sr.h) when it implements the
 *      model and no dump holds log-probabilities; otherwise `ensemble` runs of naive-sr,
 *      seeds sr_seed + i, under that profile (stochastic rounding to its virtual precision at
 *      its sites, kvd_profile.h), each teacher-forced over the tokens in one chunk
 *      (hx_run_forced), folded by hx_envelope_from_ensemble (envelope.h's statistic, safety
 *      HX_ENVELOPE_SAFETY) and cached beside the reference under hx_envelope_key(reference
 *      key, ensemble, seed, safety, "judge-forced;<mode>;profile=<name>;path=<hash of the naive
 *      f32 forced run>"). For a dump of log-probabilities, the reference rows and the members'
 *      rows are turned into log-softmax first (in double, members rounded to float32) and the
 *      envelope measured on those.
 *  (d) Each dump under each profile: a capture made from the dump (K/V when kv/ is present,
 *      otherwise logits rows only) through hx_compare_capture against the reference and that
 *      profile's envelope, as configuration "<dump>@<profile>" (no baseline, so never EXACT),
 *      and its K/V rows through hx_kv_first_outside (kv_locate.h: the first (layer, position)
 *      outside the envelope, into the configuration's kv_first) and its hidden states through
 *      hx_hidden_first_outside (the first (state, position) outside, into hidden_first; the
 *      hidden states' E under f32, or a profile judged as f32, is that of the reference's SR
 *      members, measured (and cached) for them when the profile's own members are the
 *      engine's, which record none; under other profiles they are not judged);
 *      the greedy tokens (tokens_generated) against the reference's argmax on the dump's own
 *      path, the class there being that row's (hx_greedy_departure); KL statistics and the
 *      same-top-1 rate over the logits rows; the explaining profile (hx_explain_profile, with
 *      each profile's median logits E; a profile that rounds nothing on the model, as q8act on
 *      float32 weights, is the f32 hypothesis again: judged with f32's envelope, measured
 *      once, and no candidate); every pair of dumps (hx_dump_pair_compare, with the
 *      first profile's envelope).
 * Exit code (hx_report_exit_code): 1 when some dump is explained by none of the profiles. */
#ifndef HX_JUDGE_RUN_H
#define HX_JUDGE_RUN_H

#include "model/capture.h"
#include "model/dump.h"
#include "kvd_model.h"
#include "ref_model.h"
#include "model/report.h"

#include <stdbool.h>
#include <stdint.h>

#define HX_JUDGE_MAX_PROFILES 8u

typedef struct hx_judge_params {
    const lm_model *model;
    const ref_model *ref;            /* the reference's own view of the same file */
    const char *model_label;         /* for the report; NULL: "model" */
    const int32_t *prompt;           /* [n_prompt] */
    uint32_t n_prompt;
    hx_dump *const *dumps;           /* [n_dumps], validated by hx_dump_load */
    size_t n_dumps;                  /* >= 1 */
    const char *const *profiles;     /* [n_profiles] names; n_profiles 0 = every profile */
    uint32_t n_profiles;
    uint32_t precision;              /* reference bits; 0 = REF_DEFAULT_PREC */
    uint32_t ensemble;               /* 0 = 8 */
    uint64_t sr_seed;
    bool sr_seed_set;
    const char *cache_dir;
    int ref_threads;
    uint32_t jobs;                   /* naive-sr envelope members run side by side; 0 or 1 =
                                        one at a time (the members' bits do not depend on it) */
    /* Optional per dump (NULL: as the plain judge): names [n_dumps] its configuration in the
     * report instead of "<dir>@<profile>" (one profile per dump then); dump_profile [n_dumps]
     * the index into the profiles of the one profile that dump is judged under; baseline
     * [n_dumps] the index of the dump it is compared with bit for bit (hx_compare_capture's
     * base: EXACT, vs_base), -1 none (an adapter sweep's default configuration). */
    const char *const *names;
    const uint32_t *dump_profile;
    const int64_t *baseline;
    bool quiet;                      /* no progress lines (warnings still go to log) */
    /* Progress and warning lines, one per call, without a newline (the library never
     * prints); NULL: none. */
    lm_log_fn log;
    void *log_user;
} hx_judge_params;

int hx_judge_run_all(hx_report **out, const hx_judge_params *p, lm_err *err);

/* A capture holding dump d's ids and rows (and K/V when present; else k = v = NULL), shaped by
 * model m: what the judge compares, and what hx_capture_hash hashes for a dump's golden. */
int hx_dump_capture(hx_capture **out, const hx_dump *d, const lm_model *m, lm_err *err);

#endif
