/* ref_vprec.h — virtual precisions of the reference's SR members (ref_sr.h): which values of the
 * forward pass a precision profile rounds, to what, and the stochastic rounding (SR) of float32
 * rows to one such precision. The reference's own statement of that rounding: a caller (the
 * harness) fills a ref_sr_profile from an engine profile's table; nothing here runs engine code.
 *
 * Rounding of one value x with a random word r (32 uniform bits), unbiased (E[result] = x):
 *   FLOAT (bits significand bits with the implicit one, smallest normal exponent emin, largest
 *   exponent emax): lo <= x <= hi the format's neighbours of x, up to hi with probability
 *   (x - lo) / (hi - lo) exactly: the low s bits of x's float32 pattern (s = 24 - bits, plus
 *   emin - E below the format's normal range, E x's exponent) are its distance above lo in
 *   units of 2^-s (hi - lo), and adding the low s bits of r to the pattern carries into the
 *   kept bits (a round-up, into the exponent when the significand overflows) exactly when
 *   they and r's sum reach 2^s; the s bits are then cleared. Below the format's smallest
 *   subnormal q (s > 23): +-q with probability |x| / q (r as 2^-32 steps), else +-0. A result
 *   beyond the format's largest finite is +-Inf; zeros, NaN and Inf are unchanged.
 *   Q8_0, Q8_K (ggml-cpu's quantizers of a product's input, per block of 32 or 256 consecutive
 *   elements of a row, a shorter last block): the block's scale d and inverse as round to
 *   nearest computes them (Q8_0: amax = max |x|, inverse 127 / amax, d = amax / 127 rounded to
 *   nearest binary16; Q8_K: max the first element of largest magnitude with its sign,
 *   inverse -127 / max, d = 1 / inverse; a block of zeros: 0, 0), t = x * inverse (one float
 *   product), the integer above floor(t) with probability t - floor(t) (r as 2^-32 steps),
 *   saturated to [-128, 127] (NaN: -128), value = code * d.
 * These are the rounding rules of the engine's naive-sr round slot (backend_naive_sr.c), whose
 * coins resolve the probability to 2^-53 where these resolve it to 2^-32 (Q8 and the tiny
 * range; FLOAT above it is exact): a bias below 2^-32 of a step. */
#ifndef REF_VPREC_H
#define REF_VPREC_H

#include <stdbool.h>
#include <stdint.h>

typedef enum ref_vp_kind {
    REF_VP_NONE = 0,  /* float32 as computed */
    REF_VP_FLOAT,     /* a binary format: bits, emin, emax */
    REF_VP_Q8_0,      /* Q8_0 blocks of 32 */
    REF_VP_Q8_K,      /* Q8_K blocks of 256 */
    REF_VP_PER_WEIGHT /* at a site: each weight product's input rounded to its weight type's
                         format (ref_sr_profile.per_type); the site itself is not rounded */
} ref_vp_kind;

typedef struct ref_vp {
    ref_vp_kind kind;
    uint8_t bits;  /* FLOAT: significand bits, 2..24 */
    int16_t emin;  /* FLOAT: smallest normal exponent (>= -126) */
    int16_t emax;  /* FLOAT: largest exponent (<= 127); beyond the largest finite: Inf */
} ref_vp;

/* Where a profile rounds, in the reference's forward pass (ref_sr.c names the values). */
typedef enum ref_vp_site {
    REF_VP_NORM = 0,   /* attn_norm / ffn_norm outputs: the q/k/v, gate/up and router inputs */
    REF_VP_ROPE,       /* q and K rows after RoPE */
    REF_VP_SOFTMAX,    /* attention probabilities */
    REF_VP_SWIGLU,     /* the gated activation: the down projection's input */
    REF_VP_RESIDUAL,   /* the residual stream after each add */
    REF_VP_OUT_NORM,   /* the final norm's output: the output projection's input */
    REF_VP_V,          /* V rows after projection and bias */
    REF_VP_ATTN_OUT,   /* the attention output: Wo's input */
    REF_VP_KV,         /* K and V rows as cached (and captured) */
    REF_VP_WEIGHT,     /* the embedding table and every weight matrix (not norms, not biases) */
    REF_VP_POST_NORM,  /* a sandwich norm's output, before its add */
    REF_VP_HEAD_NORM,  /* q and k after their per-head RMSNorm, before RoPE */
    REF_VP_MOE_GATES,  /* a token's expert weights */
    REF_VP_MOE_SUM,    /* a token's weighted sum of its experts' outputs, before its add */
    REF_VP_N_SITES
} ref_vp_site;

#define REF_VP_N_TYPES 64u /* ggml type numbers per_type covers */

/* A precision profile as the reference's SR members apply it. All-NONE (zeroed): float32. */
typedef struct ref_sr_profile {
    ref_vp site[REF_VP_N_SITES];
    /* REF_VP_PER_WEIGHT sites: the format a product's input takes for a weight of ggml type
     * t < REF_VP_N_TYPES (FLOAT, Q8_0, Q8_K or NONE; types beyond: NONE) */
    ref_vp per_type[REF_VP_N_TYPES];
} ref_sr_profile;

/* Whether p (NULL: float32) rounds anything. */
bool ref_sr_profile_rounds(const ref_sr_profile *p);

/* The random words of the SR members: lowbias32 (Chris Wellons' 32-bit finalizer). */
static inline uint32_t ref_lowbias32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Word i of the stream keyed key: lowbias32(key + i * 0x9e3779b9). */
static inline uint32_t ref_coin(uint32_t key, uint64_t i)
{
    return ref_lowbias32(key + (uint32_t)i * 0x9e3779b9u);
}

/* x[n] rounded in place to vp (FLOAT, Q8_0 or Q8_K; NONE and PER_WEIGHT leave it), element i
 * with the word ref_coin(key, i); Q8 blocks start at x[0]. */
void ref_vp_round(float *x /* [n] */, uint64_t n, const ref_vp *vp, uint32_t key);

#endif
