/* envelope_sr.h — the noise envelope measured by the reference's own model run in float32 with
 * stochastic rounding (reference/ref_sr.h), not by the engine, under a precision profile
 * rounded by the reference at the profile's sites (hx_ensemble_ref_profile): members
 * i = 0..n-1 with seeds seed + i on the reference's token sequence and logit positions, run in
 * parallel on
 * n_threads (0: all cores; never changes the result), folded by hx_envelope_from_ensemble
 * (the statistic of envelope.h) against the reference capture. Whether these members or the
 * engine's naive-sr ones measure an envelope is hx_envelope_source's answer (ensemble.h). */
#ifndef HX_ENVELOPE_SR_H
#define HX_ENVELOPE_SR_H

#include "judge/envelope.h"
#include "run/ensemble.h"
#include "kvd_ref.h"

/* Identifies this ensemble in the envelope's cache key (change it whenever ref_sr.c's or
 * ref_vprec.c's numbers could change). */
#define HX_ENVELOPE_SR_MODE \
    "ref-sr:vprec-v1:coin=lowbias32-xor-mm-att-v3:sr=intadd29-v2:stat=mean-spread-v2"

/* The ensemble's source (hx_ensemble_source) for an envelope of ref's tokens and positions. */
hx_member_source hx_envelope_source(const ref_model *m, const ref_capture *ref,
                                    const char *profile, bool engine_only);
/* The ensemble's part of the envelope's cache key for profile ("" or "f32": float32, which
 * names no profile): HX_ENVELOPE_SR_MODE, then ";profile=RULES:NAME" (LM_PROFILE_RULES) for
 * another profile, into buf[cap]; returns the length (snprintf's). */
int hx_envelope_sr_mode(char *buf, size_t cap, const char *profile);
/* progress (may be NULL) hears the members' progress (ref_sr_ensemble). */
int hx_envelope_from_ref_sr(hx_envelope **out, const ref_model *m, const ref_capture *ref,
                            const char *profile, uint32_t n_members, uint64_t seed,
                            int n_threads, double safety, ref_progress_fn progress,
                            void *progress_user, lm_err *err);

#endif
