/* ref_sr.h — the reference's own model implementation run in float32 with stochastic rounding
 * (SR): the members of the noise envelope. Independent of the engine's forward pass and
 * kernels (it reads the reference's own model view, ref_model.h), so a defect in engine code
 * is never inside the envelope that judges it.
 *
 * Same computation as ref_forward.c (same order of every reduction, layer by layer over all
 * tokens), every operation a float32 operation rounded up or down at random:
 *   - a + b, a * b, and each multiply-add acc + a*b of a dot product (one rounding: the product
 *     is exact in double, the sum is rounded to double): the value t rounds to the float below
 *     or above with probability proportional to its distance (unbiased);
 *   - exp, 1/sqrt, division, SiLU, RoPE's cos/sin: computed in double, then SR to float32.
 * Method: t in double -> RZ(|t| + u ulp(|t|)) with the sign of t, u = r 2^-29 uniform on
 * [0, 1) from 29 random bits, RZ the truncation to 24 significant bits, done as one integer
 * add of r to t's bit pattern and one mask (exact; a carry out of the significand is the
 * round-up into the next binade). The probability is resolved to 2^-29 ulp, and rounding a
 * sum to double first moves it by at most 2^-30 ulp. Values below 2^-126 keep 24 bits inside
 * a dot product (no gradual underflow); NaN and Inf pass through.
 * Random bits: counter-based and stateless, r = lowbias32(key + i * 0x9e3779b9) with key a
 * SplitMix64 hash of (seed, operation site, output element) and i the term index inside a
 * reduction. A matrix product (the bulk of the work) takes the coin of term i of output
 * (token t, row r) as A_t(i) ^ B_r(i): two lowbias32 streams, A keyed by (seed, site, t) with
 * the increment 0x9e3779b9 and B keyed by (seed, site, r) with 0x85ebca77: one XOR per multiply-add instead of one hash; each coin is uniform and the coins are
 * pairwise independent (ref_sr.c states exactly which sets are independent). Attention's
 * q . k and p . V run the same way (keys or head dimensions in the place of tokens, (token,
 * head) in the place of rows). The bits depend on (seed, site, element, term) only, never on
 * threads, lanes or chunking. These products are vectorized across 8 outputs that run their
 * left-to-right chains side by side (AVX-512, AVX2 or scalar, picked from the CPU; the vector
 * kernels fuse each multiply-add, the scalar one multiplies then adds, and since the product
 * of two floats is exact in double both round the same sum once: the bits never depend on
 * the kernel).
 *
 * Implemented: everything ref_forward.c implements (scaled embeddings, per-head Q/K norms,
 * sandwich norms, GeGLU, rope_freqs factors, a sliding layers' own theta, windows, sinks,
 * biases, MoE layers: router, top-k and gating by the reference's rules on the member's own
 * float32 router logits, so a member may route a near-tie differently, as a float32 engine
 * would) except rotating-cache schedules (ref_sr_supported says LM_E_UNSUPPORTED; callers fall
 * back to another envelope).
 *
 * Precision profiles: rq->sr_profile (ref_vprec.h; NULL: float32) rounds, after the float32
 * SR of each stage, the values at the profile's sites to its virtual precision, stochastically
 * (ref_vp_round): NORM (h after attn_norm and ffn_norm), V (after projection and bias),
 * HEAD_NORM (q, k after their norms), ROPE (q, k after RoPE), KV (k, v as attention reads and
 * the member captures them), SOFTMAX (each probability row), ATTN_OUT, POST_NORM (before its
 * add), RESIDUAL (x after each block's add), SWIGLU (the gated activation), MOE_GATES,
 * MOE_SUM (before its add), OUT_NORM; PER_WEIGHT sites round each product's input rows to
 * the format of its weight's ggml type (products of one input and one format read the same
 * rounded rows); WEIGHT rounds the embedding table's rows and every product's weight rows as
 * they are read (a tied output's rows as the lookup's). The rounding words come from their own
 * key family (seed, stage, row, site), apart from every arithmetic coin, so under the zeroed
 * profile a member has float32's bits. */
#ifndef REF_SR_H
#define REF_SR_H

#include "kvd_ref.h"
#include "ref_vprec.h"

/* One member's output, float32. */
typedef struct ref_sr_out {
    uint32_t n_layer, n_prompt, kv_dim, n_vocab, n_pos;
    uint32_t *pos;  /* [n_pos] logit positions (the request's, defaulted as ref_run does) */
    float *k;       /* [n_layer][n_prompt][kv_dim] after RoPE */
    float *v;       /* [n_layer][n_prompt][kv_dim] */
    float *logits;  /* [n_pos][n_vocab] */
    uint32_t n_embd;
    float *hidden;  /* [n_layer + 1][n_prompt][n_embd]: the embedding, then each layer's output
                       (ref_capture.hidden) */
    /* MoE models (else NULL, 0): every layer's routing of every token, the reference's rules on
     * this member's float32 router logits; dense layers: ids 0, margin +inf */
    uint32_t moe_k;
    uint32_t *moe_sel;  /* [n_layer][n_tokens][moe_k] expert ids, rank order */
    float *moe_margin;  /* [n_layer][n_tokens] k-th selected minus the largest unselected router
                           logit (in double, then float); +inf when moe_k = n_expert */
} ref_sr_out;

void ref_sr_out_free(ref_sr_out *o);
int ref_sr_supported(const ref_model *m, const ref_request *rq, lm_err *err);
/* One member with seed `seed` (single-threaded). */
int ref_sr_run(ref_sr_out *out, const ref_model *m, const ref_request *rq, uint64_t seed,
               lm_err *err);
/* Members i = 0..n-1 with seeds seed + i into out[n], on n_threads threads (0: online cores),
 * members in parallel; identical results for any thread count. rq->progress, when set, hears
 * the start (done 0) and every finished layer of any member (ref_progress.n_member = n). */
int ref_sr_ensemble(ref_sr_out *out, uint32_t n, const ref_model *m, const ref_request *rq,
                    uint64_t seed, int n_threads, lm_err *err);

/* Seconds per multiply-add of one member's matrix products on this machine, rows of n_in
 * elements: a ~20 ms calibration (for the cost line printed before an envelope). */
double ref_sr_calibrate_s_per_mac(uint64_t n_in);

/* SR of v to float32 with random bits r (exported for tests). */
float ref_sr_round(double v, uint32_t r);
#ifdef LM_TEST_HOOKS
extern int ref_sr_test_force_kernel; /* tests: 0 scalar, 1 avx2, 2 avx512; -1 the CPU's */
/* The coin words (29 bits) of a matrix product at site st of the member with seed `seed`,
 * through the table fills the product uses, token groups starting at token t0:
 * dst[(u * n_r + r) * n_i + i] = coin of term i of output (token t0 + u, row r), u < n_t. */
int ref_sr_test_mm_coins(uint64_t *dst, uint64_t seed, uint32_t st, uint64_t t0, uint64_t n_t,
                         uint64_t n_r, uint64_t n_i);
/* One SR matrix product of that member at site 0: out[t][r] (+)= in[t] . W[r] (+ b[r]),
 * in [n_rows][n_in], W [n_out][n_in], out [n_rows][n_out] (acc: added into out). */
int ref_sr_test_matmul(float *out, const float *in, const float *W, const float *b,
                       uint64_t n_rows, uint64_t n_in, uint64_t n_out, bool acc, uint64_t seed);
#endif

#endif
