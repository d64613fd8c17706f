/* split_search.h — prompts that find near ties: a prompt's split-risk forecast (one sweep of
 * naive:step=full:threads=1 under a profile: the reference's greedy path, the profile's
 * members, judge/split_risk.h), and a generator that edits a prompt token by token until the
 * reference's margin at some generated step falls below a threshold (`kvdrift search`).
 *
 * The generator: round r edits prompt index n - 1 - (r mod (n - 1)) (the first token, BOS as
 * most vocabularies add it, stays), trying HX_SEARCH_CANDIDATES token ids drawn uniformly from
 * [3, n_vocab) (splitmix64 from the seed; ids 0..2 are the control tokens of the usual
 * vocabularies) and keeping the candidate whose greedy path has the smallest top-2 margin in
 * naive:step=full:threads=1's float32 logits (a cheap proxy: no reference, no members), when
 * it is smaller than the current one. Whenever the proxy's margin is below the threshold, the
 * exact forecast decides (the reference's margin); the search goes on while it is not below
 * it, for at most max_rounds rounds. */
#ifndef HX_SPLIT_SEARCH_H
#define HX_SPLIT_SEARCH_H

#include "kvd_engine.h"
#include "ref_model.h"
#include "model/report.h"

#include <stdint.h>

#define HX_SEARCH_CANDIDATES 6u

typedef struct hx_search_params {
    const lm_model *model;
    const ref_model *ref;     /* the reference's own view of the same file */
    const char *model_label;  /* for messages; NULL: "model" */
    const char *profile;      /* "" or "f32": float32 */
    uint32_t n_gen;           /* generated steps forecast (>= 1) */
    uint32_t ensemble;        /* members; 0 = the sweep's default */
    const char *cache_dir;    /* reference and envelope cache (sweep.h) */
    uint32_t jobs;
    lm_log_fn log;            /* warnings (the sweep's), NULL: none */
    void *log_user;
} hx_search_params;

/* The forecast for prompt [n] (a sweep of one configuration, quiet). Input errors (a prompt
 * longer than the context) are LM_E_INPUT from the sweep. */
int hx_search_forecast(hx_split_forecast *out, const hx_search_params *p,
                       const int32_t *prompt /* [n] */, uint32_t n, lm_err *err);

/* The generator (above) from seed [n] (n >= 2) into *out ([n], malloc'd) with its exact
 * forecast in *f; *reached: the reference's smallest margin is below threshold. LM_E_INPUT
 * when n < 2. */
int hx_search_generate(int32_t **out, hx_split_forecast *f, bool *reached,
                       const hx_search_params *p, const int32_t *seed /* [n] */, uint32_t n,
                       double threshold, uint32_t max_rounds, uint64_t rng_seed, lm_err *err);

#endif
