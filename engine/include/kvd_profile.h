/* kvd_profile.h — precision profiles: where an engine rounds to what (a virtual precision per
 * rounding site, Verificarlo's VPREC idea), for the engine itself (round to nearest at each
 * site) and for the stochastic-rounding ensemble behind the envelope (stochastic rounding to
 * the same virtual precision at the same sites, backend_naive_sr.c).
 *
 * Sites (lm_perturb_site, backend.h): NORM (RMSNorm outputs, the inputs of the q/k/v and
 * gate/up projections), ROPE (q and K rows after RoPE), SOFTMAX (attention probabilities),
 * SWIGLU (the input of the down projection), RESIDUAL (the residual stream after each add),
 * OUT_NORM (the input of the output projection), V (V rows after projection and bias),
 * ATTN_OUT (the attention output, input of Wo), KV (K and V rows as stored in the cache),
 * WEIGHT (every weight matrix and the embedding table, rounded once per context), POST_NORM
 * (a sandwich norm's output, added to the residual stream: rounded where the profile rounds
 * that stream, never as a projection input).
 *
 * The profiles (lm_profile_find):
 *   f32    nothing rounded beyond float32 (today's engine and envelope)
 *   f16kv  KV to IEEE binary16 (11-bit significand, exponents -14..15, subnormals, overflow
 *          to Inf): llama.cpp's default F16 KV cache
 *   bf16   WEIGHT, NORM, ROPE, SOFTMAX, SWIGLU, RESIDUAL, OUT_NORM, V, ATTN_OUT, KV,
 *          POST_NORM to bfloat16 (8-bit significand, float32's exponent range); products
 *          still accumulate in float32 (MLX running a bfloat16 model)
 *   tf32   every matrix-product input to TF32 (11-bit significand, float32's exponents):
 *          WEIGHT, NORM, ROPE, V, SOFTMAX, ATTN_OUT, SWIGLU, OUT_NORM (tensor-core TF32)
 *   q8act  the activations entering weight matrix products (NORM, ATTN_OUT, SWIGLU,
 *          OUT_NORM) quantized to Q8_0 blocks (ggml's CPU path for quantized weights)
 *   f16act the same activations rounded to IEEE binary16 (ggml's CPU path for F16 weights,
 *          whose products convert their float32 input to F16 first)
 * Q8_0 as ggml's quantize_row_q8_0_ref: per block of 32 consecutive elements of a row (a
 * shorter last block when the row length is not a multiple of 32), amax = max |x|, d = amax /
 * 127 (float), q = roundf(x * (1/d)) (half away from zero; 0 when d == 0), value = q *
 * fp16(d) with fp16(d) the binary16 rounding of d. */
#ifndef KVD_PROFILE_H
#define KVD_PROFILE_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stdint.h>

typedef enum lm_round_kind {
    LM_ROUND_NONE = 0,  /* float32 as computed */
    LM_ROUND_FLOAT = 1, /* to a binary format of `bits` significand bits (implicit bit
                           included), exponents emin..emax (values below 2^emin subnormal) */
    LM_ROUND_Q8_0 = 2   /* Q8_0 blocks of 32 (see above) */
} lm_round_kind;

typedef struct lm_round_spec {
    lm_round_kind kind;
    uint8_t bits;  /* LM_ROUND_FLOAT: significand bits, 2..24 */
    int16_t emin;  /* LM_ROUND_FLOAT: smallest normal exponent */
    int16_t emax;  /* LM_ROUND_FLOAT: largest exponent; beyond it: Inf */
} lm_round_spec;

#define LM_N_SITES 12 /* sites are 1..11 (lm_perturb_site); index 0 unused */

typedef struct lm_profile {
    const char *name;
    const char *about;                 /* one line for --help and reports */
    lm_round_spec site[LM_N_SITES];    /* indexed by lm_perturb_site */
} lm_profile;

/* The profile named s ("f32", "f16kv", "bf16", "tf32", "q8act", "f16act"); NULL when unknown. NULL or
 * "" give f32. */
const lm_profile *lm_profile_find(const char *s);
/* Profiles in table order: i = 0..lm_profile_count()-1. */
const lm_profile *lm_profile_at(uint32_t i);
uint32_t lm_profile_count(void);
/* "f32, f16kv, bf16, tf32, q8act or f16act" for messages. */
const char *lm_profile_expected(void);
/* The rounding at site (the low 8 bits of a lm_perturb_site value); NONE for f32 or NULL. */
const lm_round_spec *lm_profile_site(const lm_profile *p, uint32_t site);
/* Whether the profile rounds anything at all. */
bool lm_profile_rounds(const lm_profile *p);

/* Round to nearest (ties to even) of one float32 to a LM_ROUND_FLOAT spec; NaN, Inf and zeros
 * unchanged; a value beyond the format's largest finite after rounding becomes +-Inf. */
float lm_round_float_rn(float x, const lm_round_spec *s);
/* For stochastic rounding: the two neighbours lo <= x <= hi of x in the spec's format and the
 * probability (x - lo) / (hi - lo) of rounding up, in double (exact: the format's spacing is a
 * power of two). When x is representable (or NaN, Inf, zero), *lo = *hi = x and 0 is returned.
 * A hi beyond the format's largest finite is +-Inf. */
double lm_round_float_bracket(float x, const lm_round_spec *s, float *lo, float *hi);
/* Rounds rows x [n][stride] (first elems of each row live) to nearest per the spec. */
void lm_round_rows_rn(float *x /* [n][stride] */, uint32_t n, uint32_t elems, size_t stride,
                      const lm_round_spec *s);
/* Q8_0 of one block: the scale fp16(d) and 1/d as ggml computes them (d = amax / 127). */
void lm_q8_0_scale(const float *x /* [n] */, uint32_t n, float *d_fp16, float *inv_d);

#endif
