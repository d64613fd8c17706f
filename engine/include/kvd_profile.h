/* kvd_profile.h — precision profiles: where an engine rounds to what (a virtual precision per
 * rounding site, Verificarlo's VPREC idea), for the engine itself (round to nearest at each
 * site) and for the stochastic-rounding ensembles behind the envelope (stochastic rounding to
 * the same virtual precision at the same sites: the reference's SR members, ref_vprec.h, as
 * the harness states this table to them, hx_ensemble_ref_profile; the engine's naive-sr
 * members, backend_naive_sr.c).
 *
 * Sites (lm_perturb_site below): NORM (RMSNorm outputs, the inputs of the q/k/v and
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
 *   q8act  the input of every weight matrix product (from NORM, ATTN_OUT, SWIGLU, OUT_NORM)
 *          converted as ggml's CPU backend converts it for that product's weight type
 *          (LM_ROUND_VEC_DOT, lm_vec_dot_spec): Q8_0 blocks for Q4_0/Q5_0/Q8_0/MXFP4/IQ4_NL
 *          (and Q4_1/Q5_1, whose Q8_1 holds the same values), Q8_K blocks for the K-quants and
 *          IQ2..IQ4_XS, binary16 for F16, bfloat16 for BF16, nothing for F32. One site's
 *          output feeding weights of different types is converted once per type.
 *   f16act the same activations rounded to IEEE binary16 whatever the weight type (ggml's CPU
 *          path for F16 weights, whose products convert their float32 input to F16 first)
 * Q8_0 and Q8_K blocks as act_format.c states (ggml-cpu's x86 quantizers): per block of 32
 * (Q8_0) or 256 (Q8_K) consecutive elements of a row (a shorter last block when the row
 * length is not a multiple), a scale d and an inverse, q = x * inverse rounded to nearest
 * (ties to even) and saturated to int8, value = q * d. */
#ifndef KVD_PROFILE_H
#define KVD_PROFILE_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stdint.h>

/* Where the forward pass calls lm_backend_i.perturb (backend.h), the sites a profile rounds
 * (kept distinct so that the stages draw independent coins). */
typedef enum lm_perturb_site {
    LM_SITE_NORM = 1,     /* attn_norm / ffn_norm output */
    LM_SITE_ROPE,         /* q and K rows after RoPE */
    LM_SITE_SOFTMAX,      /* attention probabilities (| query head << 8, see attention.c) */
    LM_SITE_SWIGLU,       /* silu(gate) * up */
    LM_SITE_RESIDUAL,     /* x after each residual add */
    LM_SITE_OUT_NORM,     /* final RMSNorm before the output projection */
    /* Sites that only a precision profile rounds (never perturbed without one, so the f32
     * ensemble's bits do not depend on them): */
    LM_SITE_V,            /* V rows after projection and bias */
    LM_SITE_ATTN_OUT,     /* attention output, the input of Wo */
    LM_SITE_KV,           /* K and V rows as stored in the cache */
    LM_SITE_WEIGHT,       /* weight matrices, once per context */
    /* A sandwich norm's output (attn_post_norm, ffn_post_norm), which is added to the residual
     * stream and enters no weight product: perturbed without a profile like NORM .. OUT_NORM
     * (lm_site_perturbed), numbered after WEIGHT so that every other site keeps its number
     * and so its coins. */
    LM_SITE_POST_NORM,
    /* Numbered after POST_NORM for the same reason, and perturbed like it: */
    LM_SITE_HEAD_NORM,    /* q and k after their per-head RMSNorm (Qwen3, Gemma 3), before RoPE */
    LM_SITE_MOE_GATES,    /* a token's expert weights (the router's gating, after top-k) */
    LM_SITE_MOE_SUM,      /* a token's weighted sum of its experts' outputs */
} lm_perturb_site;

typedef enum lm_round_kind {
    LM_ROUND_NONE = 0,  /* float32 as computed */
    LM_ROUND_FLOAT = 1, /* to a binary format of `bits` significand bits (implicit bit
                           included), exponents emin..emax (values below 2^emin subnormal) */
    LM_ROUND_Q8_0 = 2,  /* Q8_0 blocks of 32 (see above) */
    LM_ROUND_Q8_K = 3,  /* Q8_K blocks of 256 (see above) */
    LM_ROUND_VEC_DOT = 4 /* at a site: each weight product's input, as lm_vec_dot_spec of its
                            weight's type (lm_gemm_nt_act); the site itself is not rounded */
} lm_round_kind;

typedef struct lm_round_spec {
    lm_round_kind kind;
    uint8_t bits;  /* LM_ROUND_FLOAT: significand bits, 2..24 */
    int16_t emin;  /* LM_ROUND_FLOAT: smallest normal exponent */
    int16_t emax;  /* LM_ROUND_FLOAT: largest exponent; beyond it: Inf */
} lm_round_spec;

/* IEEE binary16 and bfloat16 as LM_ROUND_FLOAT specs (initializers). */
#define LM_ROUND_SPEC_F16 {LM_ROUND_FLOAT, 11, -14, 15}
#define LM_ROUND_SPEC_BF16 {LM_ROUND_FLOAT, 8, -126, 127}

/* The profiles' rounding rules as named in envelope cache keys (sweep, judge): a new name
 * whenever some profile rounds differently, so that no stale envelope is loaded. */
#define LM_PROFILE_RULES "sr-vprec-v3"

#define LM_N_SITES 15 /* sites are 1..14 (lm_perturb_site); index 0 unused */

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
/* p's place in the table (lm_profile_at(lm_profile_index(p)) == p); p must come from
 * lm_profile_find or lm_profile_at. */
uint32_t lm_profile_index(const lm_profile *p);
/* A bound on lm_profile_count(), for tables indexed as lm_profile_at. */
#define LM_PROFILES_MAX 8u
/* "f32, f16kv, bf16, tf32, q8act or f16act" for messages. */
const char *lm_profile_expected(void);
/* The rounding at site (the low 8 bits of a lm_perturb_site value); NONE for f32 or NULL. */
const lm_round_spec *lm_profile_site(const lm_profile *p, uint32_t site);
/* Whether the profile rounds anything at all. */
bool lm_profile_rounds(const lm_profile *p);
struct lm_model;
/* Whether the profile changes a value of m's forward pass: it rounds at some site, or converts
 * a product's input (LM_ROUND_VEC_DOT) for a weight of m whose type has a conversion. q8act on
 * a model whose weights are all float32 rounds nothing: it computes what f32 computes. */
bool lm_profile_rounds_on(const lm_profile *p, const struct lm_model *m);

/* Round to nearest (ties to even) of one float32 to a LM_ROUND_FLOAT spec; NaN, Inf and zeros
 * unchanged; a value beyond the format's largest finite after rounding becomes +-Inf. */
float lm_round_float_rn(float x, const lm_round_spec *s);
/* For stochastic rounding: the two neighbours lo <= x <= hi of x in the spec's format and the
 * probability (x - lo) / (hi - lo) of rounding up, in double (exact: the format's spacing is a
 * power of two). When x is representable (or NaN, Inf, zero), *lo = *hi = x and 0 is returned;
 * a neighbour beyond the format's largest finite is +-Inf (x on the format's grid beyond it:
 * *lo = *hi = +-Inf). */
double lm_round_float_bracket(float x, const lm_round_spec *s, float *lo, float *hi);
/* Rounds rows x [n][stride] (first elems of each row live) to nearest per the spec: FLOAT,
 * Q8_0 or Q8_K (blocks from the start of each row); NONE and VEC_DOT leave them. */
void lm_round_rows_rn(float *x /* [n][stride] */, uint32_t n, uint32_t elems, size_t stride,
                      const lm_round_spec *s);

/* act_format.c: ggml-cpu's conversion of a product's float32 input per weight type. */
/* The rounding ggml-cpu applies to the input of a product whose weight has ggml type `type`
 * (lm_tensor_type): a LM_ROUND_FLOAT (F16, BF16), LM_ROUND_Q8_0 or LM_ROUND_Q8_K spec, or
 * LM_ROUND_NONE (F32). Static storage: equal formats give the same pointer. */
const lm_round_spec *lm_vec_dot_spec(uint32_t type);
/* Elements per block of a Q8 kind: 256 for LM_ROUND_Q8_K, else 32. */
uint32_t lm_q8_block_size(lm_round_kind kind);
/* Q8_0 of one block x [n]: the scale fp16(amax / 127) and the inverse 127 / amax (0, 0 for
 * a block of zeros), as ggml-cpu's x86 quantize_row_q8_0. */
void lm_q8_0_scale(const float *x /* [n] */, uint32_t n, float *d_fp16, float *inv_d);
/* Q8_K of one block x [n]: iscale = -127 / max (max: the first element of largest magnitude,
 * signed) and d = 1 / iscale; 0, 0 for a block of zeros (quantize_row_q8_K_ref). */
void lm_q8_K_scale(const float *x /* [n] */, uint32_t n, float *d, float *iscale);
/* lm_q8_0_scale or lm_q8_K_scale by kind (LM_ROUND_Q8_0 or LM_ROUND_Q8_K). */
void lm_q8_scale(lm_round_kind kind, const float *x /* [n] */, uint32_t n, float *d,
                 float *inv);
/* The int8 code of t = x * inverse: nearest integer, ties to even, saturated to [-128, 127]
 * (NaN: -128). */
int8_t lm_q8_code(float t);
/* One block x [n] quantized: codes q [n] and scale d (value i is q[i] * d). */
void lm_q8_quantize(int8_t *q /* [n] */, float *d, lm_round_kind kind, const float *x /* [n] */,
                    uint32_t n);

#endif
