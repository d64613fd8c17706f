/* envelope.h — the noise envelope E: how far legitimate float32 rounding moves each compared
 * tensor away from the reference, measured from an ensemble of runs that differ only in
 * rounding (stochastic rounding / permuted reduction orders), never configured by hand.
 *
 * The members: M >= HX_ENVELOPE_MIN_MEMBERS runs of the "naive-sr" backend on the same tokens,
 * seeds seed..seed+M-1, which differ in the rounding of every float32 operation: stochastic
 * rounding of each multiply-add of every matrix product, and a random re-rounding (Verificarlo
 * MCA "rr", virtual precision 24: x -> SR(x + ulp(x) * U(-1/2, 1/2))) of every elementwise
 * stage's output (backend.h perturb slot; backend_naive_sr.c states the distribution).
 *
 * Three statistics carry the name "envelope", one per question, all from the same naive-sr
 * members and the same safety factor:
 *   - here (sweep, check): each configuration against the REFERENCE R. A shared defect moves
 *     every member and R apart alike, so E must not contain the distance to R: it is the spread
 *     around the members' mean (below).
 *   - trace (trace.h): configuration A against configuration B, operation by operation, with no
 *     reference in the loop. Both are rounded runs, so the question is "as far apart as two
 *     rounded runs"; the distance of each member to one fixed-order naive run answers it.
 *   - MoE routing (routing.h): a discrete decision, not a tensor: the band is on the router
 *     margin, and the truth is the reference's routing, so it is the members' margin deviation
 *     from the reference's margin (a member that routes differently contributes that margin).
 *     It uses the sweep's own ensemble size and seeds.
 *
 * Statistic, per compared tensor t (each layer's K, each layer's V, each logits row, and,
 * when the members hold them, each hidden state: the embedding and each layer's output), in
 * double, members in order: with mu_i = mean over members of x^m_i,
 *   dev_m   = max_i |x^m_i - mu_i|                      (member m's distance from the mean)
 *   dev     = max_m dev_m                              (the ensemble's spread, not its bias)
 *   E       = safety * dev                             (safety = HX_ENVELOPE_SAFETY = 2)
 * and for logits rows, with t* = argmax R and g^m_j = x^m_{t*} - x^m_j (the logit difference
 * to R's top token), whose mean over members is mu_{t*} - mu_j:
 *   gapdev  = max_m max_j |g^m_j - (mu_{t*} - mu_j)|    (how much rounding moves a logit
 *                                                        difference around its mean)
 *   E_gap   = safety * gapdev
 * and, for the split-risk forecast (judge/split_risk.h), with t1, t2 = R's top two tokens
 * (hx_topk_f64) and D = R_t1 - R_t2 the decision R takes at this row:
 *   split_sd = sqrt(mean_m ((x^m_t1 - x^m_t2) - D)^2)  (the members' root-mean-square
 *                                                        deviation of that deciding difference
 *                                                        from R's: the maximum-likelihood
 *                                                        scale of a zero-mean normal, M degrees
 *                                                        of freedom)
 * Why the spread around the mean and not the distance to R: every member runs the same engine
 * code, so a defect in it (a wrong epsilon, a missing scale) moves all members alike. Measured
 * as max |x^m - R| that shared bias widens E until it hides itself (with the test-only defects
 * of kvd_defects.h, E measured that way let most of them pass as NOISE); around the mean it
 * cancels, and a constant offset
 * added to every member leaves E unchanged (tests/test_envelope.c pins this). The bias is still
 * recorded, bias = max_i |mu_i - R_i|, for diagnosis; it is not part of E.
 * The safety factor 2 covers that M members sample the rounding distribution's tail only
 * partly (the max of 8 draws sits near its 89th percentile) and that a configuration's error
 * vs R is its own rounding plus the deterministic round-to-nearest part that every member
 * shares (the mean's own distance from R), each comparable to one member's deviation.
 * Legitimate configurations' err/E stays below 1 with margin on stories260K,
 * llama-2-tiny-random and the synthetic presets (tests/test_defects.c counts the false alarms
 * and requires none).
 * Significant digits from the spread (CADNA-style, normwise): with mu_i and sd_i the mean and
 * sample standard deviation of x^m_i over members (two-pass, members in order),
 *   sig_digits = -log10(max_i sd_i / max_i |mu_i|), clamped to [0, 17] (17 when sd == 0).
 *
 * File format (cached beside the reference; little-endian):
 *   "KVDENV\0\0" (8 bytes), u32 version (HX_ENVELOPE_VERSION), u8 key[16], f64 safety,
 *   u32 n_members, n_layer, n_pos, n_hidden (0 or n_layer + 1), u32 positions[n_pos],
 *   per tensor (K of layers 0.., V of layers 0.., logits rows 0.., hidden states 0..): f64 dev,
 *   e, gapdev, e_gap, sig_digits, bias, split_sd (gapdev/e_gap/split_sd NaN but for logits),
 *   u8 xxh3_128[16]: XXH3-128 (canonical bytes) of every byte before it.
 * Version 2: dev and gapdev are spreads around the members' mean (version 1 measured them
 * from R), bias added. Version 3: the checksum trailer (a flipped bit is detected). Version 4:
 * split_sd. Version 5: the hidden states. */
#ifndef HX_ENVELOPE_H
#define HX_ENVELOPE_H

#include "model/capture.h"
#include "kvd_common.h"
#include "kvd_ref.h"

#include <stdbool.h>
#include <stdint.h>

#define HX_ENVELOPE_SAFETY 2.0
#define HX_ENVELOPE_MIN_MEMBERS 8u
#define HX_ENVELOPE_VERSION 5u

typedef struct hx_env_tensor {
    double dev;        /* max over members of max_i |x_i - mu_i| (mu: the members' mean) */
    double e;          /* safety * dev: the envelope E */
    double gapdev;     /* logits: max over members, j of |g_j - mean g_j|, g_j = x_top - x_j;
                          NaN for K/V */
    double e_gap;      /* logits: safety * gapdev; NaN for K/V */
    double sig_digits; /* from the members' spread, see above */
    double bias;       /* max_i |mu_i - R_i|: the ensemble's shared distance from R (diagnosis
                          only, not part of E) */
    double split_sd;   /* logits: the members' RMS deviation of x_t1 - x_t2 (R's top two)
                          from R's; NaN for K/V and when a row has fewer than two tokens */
} hx_env_tensor;

typedef struct hx_envelope {
    uint8_t key[16];      /* cache key (hx_envelope_key) */
    double safety;
    uint32_t n_members;
    uint32_t n_layer;
    uint32_t n_pos;
    hx_env_tensor *k;     /* [n_layer] */
    hx_env_tensor *v;     /* [n_layer] */
    uint32_t *positions;  /* [n_pos] absolute position of each logits row */
    hx_env_tensor *logits; /* [n_pos] */
    uint32_t n_hidden;    /* 0: no hidden states measured (members without them); else
                             n_layer + 1 */
    hx_env_tensor *hidden; /* [n_hidden]: [0] the embedding, [l + 1] the output of layer l */
} hx_envelope;

/* Allocates an envelope with every tensor unset (NaN). */
int hx_envelope_create(hx_envelope **out, uint32_t n_layer, uint32_t n_pos,
                       const uint32_t *positions /* [n_pos] */, double safety, lm_err *err);
void hx_envelope_free(hx_envelope *e);

/* Measures one tensor from M member tensors members[m] [n] against r [n]. is_logits adds the
 * gap statistic. LM_E_INPUT when M < HX_ENVELOPE_MIN_MEMBERS, R is nonfinite, or R has no
 * argmax for logits. A nonfinite member value (R being finite) is a defect every member shares,
 * not rounding: the tensor gets dev = e = 0 (and gapdev = e_gap = 0 for logits), sig_digits 0
 * and bias = +Inf, so that no configuration passes on it unless it equals R; split_sd is then
 * NaN (no forecast rests on it). */
int hx_env_tensor_measure(hx_env_tensor *out, const float *const *members /* [M] -> [n] */,
                          uint32_t n_members, const double *r /* [n] */, size_t n, bool is_logits,
                          double safety, lm_err *err);

/* Gives e room for n_layer + 1 hidden states, every one unset (NaN). */
int hx_envelope_add_hidden(hx_envelope *e, lm_err *err);

/* True once every tensor has been measured. */
bool hx_envelope_complete(const hx_envelope *e);

/* Writes atomically (fs.h lm_write_file); reads back, checking magic, version, the checksum,
 * sizes, and that the stored key equals expect_key (a stale cache entry is an error,
 * LM_E_INPUT, never silently used). Truncated or corrupt files (one flipped bit anywhere):
 * LM_E_INPUT naming the path. */
int hx_envelope_save(const hx_envelope *e, const char *path, lm_err *err);
int hx_envelope_load(hx_envelope **out, const char *path, const uint8_t expect_key[16],
                     lm_err *err);

/* The naive-sr backend's coin scheme and elementwise perturbation (backend_naive_sr.c, the
 * sites of backend.h), part of the ensemble mode of every envelope made of naive-sr members
 * (kvdrift sweep's and kvdrift judge's): change it whenever those members' numbers could
 * change, so that an envelope cached under another scheme is never reused. */
#define HX_NAIVE_SR_MODE "coin=splitmix-v3:perturb=mca-rr24-v5"

/* The envelope's cache key, derived from the reference's (ref_cache_key: REF_VERSION, model
 * hash, tokens, n_prompt, logit positions, precision), so both caches are keyed the same way and
 * an envelope can never outlive its reference entry: XXH3-128 (canonical bytes) over, little-
 * endian: "kvdrift-envelope-cache" (22 bytes), u32 HX_ENVELOPE_VERSION, the reference key's 32
 * hex digits, u32 n_members, u64 seed, f64 safety, u32 n_extra, u8 extra[n_extra] (e.g. the
 * ensemble mode or schedule; NULL/0 when none). The file is <cache dir>/<hex>.kvdenv, beside
 * the reference's <ref key>.kvdref. */
void hx_envelope_key(uint8_t out[16], const char ref_key_hex[33], uint32_t n_members,
                     uint64_t seed, double safety, const void *extra, uint32_t n_extra);
/* "<dir>/<32 hex digits>.kvdenv"; LM_E_INPUT when it does not fit in cap. */
int hx_envelope_cache_path(char *out, size_t cap, const char *dir, const uint8_t key[16],
                           lm_err *err);

/* Builds the envelope from an ensemble of n_members captures (runs that differ only in
 * rounding) and the reference: every layer's K and V and every reference logits row (each
 * member must hold that row), and the hidden states when every member holds all of them (and
 * the reference has them; else n_hidden stays 0). key is left zero for the caller
 * (hx_envelope_key). */
int hx_envelope_from_ensemble(hx_envelope **out, const hx_capture *const *members,
                              uint32_t n_members, const ref_capture *ref, double safety,
                              lm_err *err);

#endif
