/* ensemble.h — the one owner of the noise ensemble: which runs make its members, member i's
 * configuration, and running the members side by side while the caller folds each one into its
 * statistic (an envelope, a routing band, a per-operation bound).
 *
 * Sources, picked once per model, request and profile by hx_ensemble_source:
 *   HX_MEMBERS_REF_SR    SR runs of the reference's own float32 model (ref_sr.h): code the
 *                        engine does not share, under any profile (its sites' rounding
 *                        applied by the reference, ref_vprec.h, as hx_ensemble_ref_profile
 *                        states it); not for rotating-cache schedules
 *   HX_MEMBERS_NAIVE_SR  the engine's naive-sr backend (stochastic rounding at every float32
 *                        operation, and at the profile's sites under a profile): member i is
 *                        hx_ensemble_member(profile, seed, i), one chunk on one thread; what
 *                        engine_only asks for (sweep --envelope engine, a judge of
 *                        log-probabilities, whose envelope needs the engine's rows)
 * Member i's seed is seed + i in both, so a member's bits never depend on how many run at once
 * or in which order they finish. */
#ifndef HX_ENSEMBLE_H
#define HX_ENSEMBLE_H

#include "model/config.h"
#include "kvd_engine.h"
#include "kvd_ref.h"
#include "ref_sr.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum hx_member_source { HX_MEMBERS_REF_SR = 0, HX_MEMBERS_NAIVE_SR = 1 } hx_member_source;

/* The members for profile ("" or "f32": float32) on m and rq: the reference's SR model when
 * engine_only is false, the profile is known and ref_sr_supported accepts m and rq; else
 * naive-sr. why[why_n] (may be NULL) receives the reason the reference's model was not used
 * ("" when it was). */
hx_member_source hx_ensemble_source(const ref_model *m, const ref_request *rq, const char *profile,
                                    bool engine_only, char *why, size_t why_n);
/* The reference SR members' statement of profile (lm_profile_find; unknown, "" and "f32":
 * float32, all NONE): each engine site's rounding at the reference's matching site, and for
 * the sites that convert per weight type (q8act) the format of every ggml type
 * (lm_vec_dot_spec). */
void hx_ensemble_ref_profile(ref_sr_profile *out, const char *profile);
/* "reference-SR" or "naive-sr". */
const char *hx_member_source_name(hx_member_source s);

/* naive-sr member i: backend naive-sr, one chunk, one thread, sr_seed = seed + i, the profile
 * ("" and "f32" alike: no profile). */
hx_config hx_ensemble_member(const char *profile, uint64_t seed, uint32_t i);

/* Runs engine member i (its configuration given) on any thread; LM_OK or an error in *err. */
typedef int (*hx_member_run_fn)(void *user, const hx_config *member, uint32_t i, lm_err *err);
/* After member i returned rc: one call at a time, in the order members finish (a fold done
 * here must not depend on that order, e.g. a maximum, or store by i). May be NULL. */
typedef void (*hx_member_fold_fn)(void *user, uint32_t i, int rc);

/* naive-sr members i = 0..n-1 on up to `jobs` threads (0 or 1: one after another). Returns
 * LM_OK or the error of the failing member with the lowest i (no member starts after one
 * failed). */
int hx_ensemble_run_engine(uint32_t n, uint64_t seed, const char *profile, uint32_t jobs,
                           hx_member_run_fn run, hx_member_fold_fn fold, void *user, lm_err *err);

/* Reference SR members i = 0..n-1 of m on rq (ref_sr_ensemble on n_threads threads, 0: online
 * cores), each handed to fold(user, i, member) in member order, then freed. */
typedef void (*hx_ref_member_fold_fn)(void *user, uint32_t i, const ref_sr_out *member);
int hx_ensemble_run_ref(uint32_t n, uint64_t seed, const ref_model *m, const ref_request *rq,
                        int n_threads, hx_ref_member_fold_fn fold, void *user, lm_err *err);

#endif
