/* kvd_ref.h — the independent MPFR reference forward pass: ground truth for every comparison.
 *
 * The reference shares only the GGUF container reader with the engine (kvd_gguf.h); it reads
 * the hyperparameters and dequantizes the weights itself (ref_model.h). Every arithmetic
 * operation — RMSNorm, RoPE sin/cos, dot products, the 1/sqrt(head_dim) scale, softmax exp,
 * SiLU exp, residuals, the output projection — is done in MPFR at `prec` bits, round to
 * nearest, with the summation order stated at each reduction (ref_ops.c). Weights enter as the
 * exact float32 values (mpfr_set_flt is exact for prec >= 24).
 *
 * Capture file format (version 2; also described in reference/FORMAT.md). All integers are
 * little-endian; offsets in bytes.
 *
 *   0   char[8]  magic "KVDREF01"
 *   8   u32      format version (REF_FORMAT_VERSION)
 *   12  u32      precision in bits the values were computed at
 *   16  u8[16]   model content hash (ref_model.content_hash, as stored there)
 *   32  u32      n_tokens         (prompt + teacher-forced continuation)
 *   36  u32      n_prompt         (1 <= n_prompt <= n_tokens)
 *   40  u32      n_layer
 *   44  u32      n_kv_head
 *   48  u32      head_dim
 *   52  u32      n_vocab
 *   56  u32      n_pos            (number of positions whose logits are stored)
 *   60  u32      reference version (REF_VERSION: the algorithm, not the file layout)
 *   64  u32      n_embd
 *   68  u32      zero
 *   72  i32[n_tokens]  token ids
 *       u32[n_pos]     logit positions, strictly increasing, each < n_tokens
 *       zero bytes up to the next multiple of 8 (so that the tensors are 8-byte aligned)
 *       f64 tensors, each IEEE binary64 rounded to nearest from the MPFR value:
 *         for layer 0..n_layer-1:  K [n_prompt][n_kv_head][head_dim] (after RoPE),
 *                                  V [n_prompt][n_kv_head][head_dim]
 *         hidden [n_layer + 1][n_prompt][n_embd]: the embedding (input of layer 0), then the
 *                residual stream after each layer
 *         logits [n_pos][n_vocab]
 *   end-16 u8[16] XXH3-128 of every byte before it, canonical (big-endian) form.
 *
 * A reader refuses a file whose size is not exactly what its header implies, whose hash does
 * not match, or whose header is inconsistent (LM_E_INPUT naming the file and the reason). */
#ifndef KVD_REF_H
#define KVD_REF_H

#include "fs.h"
#include "ref_model.h"

#include <mpfr.h>
#include <stdbool.h>
#include <stdint.h>

#define REF_MAGIC "KVDREF01"
#define REF_FORMAT_VERSION 2u /* 2: n_embd and the hidden states */
/* Bumped whenever the computed numbers could change (it is part of the cache key).
 * 2: matrix products by the exact split dot product (ref_dotx.h), rounded once.
 * 3: attention's q.k and p.v products by the exact split dot product too (ref_dx_dot_vv).
 * 4: the hidden states are captured (capture format 2). */
#define REF_VERSION 4u
/* 127 bits: MPFR's two-limb fast path (measured faster than 128 here; see bench_ref). */
#define REF_DEFAULT_PREC 127u
#define REF_MIN_PREC 53u
#define REF_MAX_PREC 4096u
#define REF_MAX_THREADS 256u /* threads of one pass at most */

/* Progress of a running pass (ref_request.progress): reported once before it starts (done 0)
 * and after every matrix product; for an SR envelope (ref_sr_ensemble, n_member > 0) after
 * every layer of any member, counted over all members. */
typedef struct ref_progress {
    uint32_t layer, n_layer; /* the layer being computed (n_layer: the output projection); an
                                envelope's members are at different layers: 0 there */
    uint32_t n_member;       /* 0: one reference pass; else the envelope's member count */
    uint32_t members_done;   /* the envelope's members finished */
    double done, total;      /* multiply-adds done and in all (ref_macs, times n_member) */
    double elapsed_s;        /* since the pass started */
    const ref_model *m;      /* the pass's model and request */
    const struct ref_request *rq;
} ref_progress;
typedef void (*ref_progress_fn)(void *user, const ref_progress *p);

/* Processes that compute one pass together (ref_mpi.c runs one over MPI). The output rows of
 * every matrix product, and the (token, head) pairs of attention, are split into contiguous
 * ranges, one per member; each member computes its range and one allgather per product gives
 * every member all of them. Everything else is computed by every member. Every value is
 * computed by the same operations whichever member computes it, so the results are bitwise
 * the same for any number of members. */
struct ref_request;
typedef struct ref_group {
    int rank, size;   /* this member, 0..size-1, of size */
    int threads;      /* default threads per member (0: every online core) */
    /* Collective: member r's part is bytes [displ[r], displ[r] + count[r]) of buf, each member
     * writing its own part before the call; afterwards every member's buf holds every part.
     * LM_OK, or an error (no member may use buf then). */
    int (*allgather)(const struct ref_group *g, void *buf, const uint64_t *count,
                     const uint64_t *displ, lm_err *err);
    /* Rank 0 only, before a pass: tells the other members what to compute (ref_mpi.c sends
     * the request and the model's path and hash); NULL when every member calls ref_run
     * itself. */
    int (*begin)(const struct ref_group *g, const ref_model *m,
                 const struct ref_request *rq, lm_err *err);
    void *user;
} ref_group;

/* What to compute. */
typedef struct ref_request {
    const int32_t *tokens; /* [n_tokens]: prompt, then teacher-forced continuation */
    uint32_t n_tokens;
    uint32_t n_prompt;     /* 1..n_tokens; K, V and hidden states are captured for these
                              positions */
    const uint32_t *pos;   /* [n_pos] logit positions, strictly increasing, < n_tokens; NULL:
                              the default (last prompt position and every one after it) */
    uint32_t n_pos;
    uint32_t prec;         /* bits; 0 = REF_DEFAULT_PREC */
    int n_threads;         /* 0 = number of online cores; results never depend on it */
    /* Attention schedule of a rotating KV cache (ref_variants.h): 0 = the plain causal cache.
     * The positions each token sees then depend on the prefill step, so it is part of the
     * request (and of the cache key). */
    uint32_t rot_max_size;
    uint32_t rot_keep;
    uint32_t rot_step;     /* prefill chunk size the schedule follows (0 = one chunk) */
    /* Two turns (0, 0: one prefill): prompt positions [0, rot_turn_at) in chunks of rot_step,
     * rot_turn_d single tokens, then the rest of the prompt in chunks of rot_step. Rotating
     * cache only (the plain cache computes the same numbers for any schedule). */
    uint32_t rot_turn_at;
    uint32_t rot_turn_d;
    /* false (default): every matrix-product dot product is exact and rounded once (ref_dotx.h);
     * true: MPFR multiply-adds, each rounded (ref_dot): the slower pure-MPFR pass that
     * `ref --validate-against mpfr` compares with. Part of the cache key. */
    bool mpfr_dot;
    /* The SR members' precision profile (ref_vprec.h; NULL: float32). The MPFR pass ignores
     * it; the SR members' cache keys name it (the harness's envelope key). */
    const struct ref_sr_profile *sr_profile;
    /* Called from the calling thread after every matrix product (NULL: none); never changes
     * the numbers and is not part of the cache key. */
    ref_progress_fn progress;
    void *progress_user;
    /* The processes computing this pass together; NULL: the process's group (ref_group_set),
     * if any, else this process alone. Never changes the numbers; not part of the cache key. */
    const ref_group *group;
    /* Warnings of the disk cache (ref_cached: an unusable cache folder, an entry recomputed
     * or not stored), one line per call (NULL: dropped); not part of the cache key. */
    lm_log_fn log;
    void *log_user;
} ref_request;

/* A capture: what the reference computed, rounded to float64. ref_capture_free releases it. */
typedef struct ref_capture {
    uint32_t version;        /* REF_VERSION of the code that computed it */
    uint32_t prec;
    uint8_t model_hash[16];
    uint32_t n_tokens, n_prompt, n_layer, n_kv_head, head_dim, n_vocab, n_pos, n_embd;
    int32_t *tokens;         /* [n_tokens] */
    uint32_t *pos;           /* [n_pos] */
    double *k;               /* [n_layer][n_prompt][n_kv_head][head_dim], after RoPE */
    double *v;               /* [n_layer][n_prompt][n_kv_head][head_dim] */
    double *hidden;          /* [n_layer + 1][n_prompt][n_embd]: [0] the embedding as layer 0
                                reads it (scaled where the model scales), [l + 1] the residual
                                stream after layer l */
    double *logits;          /* [n_pos][n_vocab] */
} ref_capture;

void ref_capture_free(ref_capture *c); /* frees the arrays and zeroes *c; NULL is fine */
/* Whether every logit of the capture is finite. The MPFR reference neither rounds to float32
 * nor overflows, so a NaN or Inf there comes from the model file itself (a NaN or Inf weight);
 * nothing can be classified against it. LM_E_INPUT naming model (the file as given) and the
 * first such position, else LM_OK. */
int ref_capture_check_finite(const ref_capture *ref, const char *model, lm_err *err);
/* K (or V) of one layer: [n_prompt][n_kv_head][head_dim]. */
const double *ref_capture_k(const ref_capture *c, uint32_t layer);
const double *ref_capture_v(const ref_capture *c, uint32_t layer);
/* Hidden state i (0: the embedding, l + 1: after layer l): [n_prompt][n_embd]. */
const double *ref_capture_hidden(const ref_capture *c, uint32_t i);
/* Logits row of stored position index i (not the token position): [n_vocab]. */
const double *ref_capture_logits(const ref_capture *c, uint32_t i);
/* Index of token position p among the stored logit positions, or -1. */
int64_t ref_capture_find_pos(const ref_capture *c, uint32_t p);

/* --- computing (ref_forward.c) --- */

/* LM_OK when the reference implements every feature of m, else LM_E_UNSUPPORTED naming it. */
int ref_model_supported(const ref_model *m, lm_err *err);
/* Checks a request against a model: token ids in range, no more tokens than the model's context
 * (n_ctx_train, the limit run/sweep/check apply), positions valid, precision in range, and
 * ref_memory_estimate within the machine's physical memory. LM_E_INPUT naming the limit. */
int ref_request_check(const ref_model *m, const ref_request *rq, lm_err *err);
/* Bytes the reference pass holds at its peak for rq, estimated before starting: every MPFR
 * value (struct plus limbs at the request's precision) of the per-token activations, the
 * captured K/V, hidden states and logits, plus the float64 capture. A lower bound within a small factor. */
uint64_t ref_memory_estimate(const ref_model *m, const ref_request *rq);
/* Runs the whole reference pass and rounds the results into *out (zeroed first). */
int ref_compute(ref_capture *out, const ref_model *m, const ref_request *rq, lm_err *err);

/* The unrounded results, for --validate and tests: MPFR values at rq->prec. */
typedef struct ref_result {
    uint32_t prec;
    uint32_t n_layer, n_prompt, n_kv_head, head_dim, n_vocab, n_pos, n_embd;
    uint32_t *pos;  /* [n_pos] */
    mpfr_t *k;      /* [n_layer][n_prompt][n_kv_head][head_dim] */
    mpfr_t *v;      /* [n_layer][n_prompt][n_kv_head][head_dim] */
    mpfr_t *hidden; /* [n_layer + 1][n_prompt][n_embd], as ref_capture.hidden */
    mpfr_t *logits; /* [n_pos][n_vocab] */
    /* MoE models only (else NULL / 0): the reference's routing of every token in every layer
     * (dense layers keep zeros), for routing-flip reports. */
    uint32_t moe_k, moe_n_tokens;
    uint32_t *moe_sel;   /* [n_layer][moe_n_tokens][moe_k] expert ids, rank order */
    double *moe_margin;  /* [n_layer][moe_n_tokens] k-th minus (k+1)-th router logit */
} ref_result;

int ref_run(ref_result **out, const ref_model *m, const ref_request *rq, lm_err *err);
/* Multiply-adds of the pass rq describes (every projection of every token, the causal
 * attention products, the output projection of the logit positions; MoE: the experts computed). */
double ref_macs(const ref_model *m, const ref_request *rq);
/* Seconds per multiply-add of this machine's matrix products in the pass rq describes on m,
 * one thread, from a ~20 ms calibration of the split dot product (ref_dx_calibrate) on rows
 * of n_embd elements spanning what m's weight rows span, weighted by their multiply-adds in
 * the pass, at the digit widths the products pick (for the cost line printed before a pass).
 * The spans are counted with n_threads threads and kept with m, so the pass reads them; 0
 * when memory runs out. */
double ref_calibrate_s_per_mac(const ref_model *m, const ref_request *rq, int n_threads);
/* Seconds of a pass that do not depend on its tokens: the split of every weight row into
 * digits, once per pass (n_threads threads), timed on a sample of m's weights (a few ms); for
 * the cost line printed before a pass. */
double ref_fixed_cost_s(const ref_model *m, int n_threads);
void ref_result_free(ref_result *r);
/* Rounds a result to float64 into a capture (tokens and model hash copied from rq, m). */
int ref_result_to_capture(ref_capture *out, const ref_result *r, const ref_model *m,
                          const ref_request *rq, lm_err *err);

/* --- several processes (ref_forward.c, ref_mpi.c) --- */

/* The group every ref_run of this process joins when its request names none (NULL: none). */
void ref_group_set(const ref_group *g);
const ref_group *ref_group_get(void);
/* Collective: every member's status st (with its message in *err when st != LM_OK). LM_OK
 * when all are LM_OK; else the failure of the lowest failing rank, its message prefixed
 * with "rank R: " on the other members. Every member of a pass calls it at the same points. */
int ref_group_agree(const ref_group *g, int st, lm_err *err);

/* Under mpirun with 2 or more ranks (a build with MPI): every rank but 0 serves rank 0's
 * reference passes (the model's path, hash and the request come from rank 0; each rank loads
 * the file at that path and refuses one whose hash differs) until rank 0 exits, then returns
 * true with its exit code in *rc; rank 0 returns false after setting the process's group, and
 * every ref_run it makes is computed by all ranks. Without MPI, outside mpirun or with one
 * rank: false, and nothing changes. Call it first thing in main. */
bool ref_mpi_start(int *argc, char ***argv, int *rc);
/* Rank 0: releases the other ranks and finalizes MPI (also run at exit; idempotent). */
void ref_mpi_stop(void);

/* --- the reference's own dequantization (ref_dequant.c) --- */

/* Dequantizes n_elem values of ggml type `type` from data: [nbytes] into out: [n_elem], from the
 * bit layout, independently of the engine. LM_E_UNSUPPORTED for a type it does not implement. */
int ref_dequant(float *out, uint32_t type, const void *data, uint64_t nbytes, uint64_t n_elem,
                lm_err *err);
/* The same for the elements [first, first + count) of that tensor only, into out: [count]
 * (the whole tensor's type and size are checked as ref_dequant does). */
int ref_dequant_range(float *out, uint32_t type, const void *data, uint64_t nbytes,
                      uint64_t n_elem, uint64_t first, uint64_t count, lm_err *err);
/* --- capture files (ref_capture.c) --- */

/* Writes atomically (fs.h lm_write_file: temp file in the same folder, fsync, rename). */
int ref_capture_write(const ref_capture *c, const char *path, lm_err *err);
/* ref_capture_write up to the rename: *out is the staged write (fs.h), to be committed. */
int ref_capture_stage(lm_wfile **out, const ref_capture *c, const char *path, lm_err *err);
/* Reads and fully validates (sizes, hash); LM_E_INPUT naming path and the reason. */
int ref_capture_read(ref_capture *out, const char *path, lm_err *err);
/* Writes logits.npy [n_pos][n_vocab] and layerNN_k.npy / layerNN_v.npy
 * [n_prompt][n_kv_head][head_dim] into dir (created if absent): float64 '<f8', C order,
 * NumPy format 1.0 with the header padded to 64 bytes. Each file written atomically. */
int ref_capture_write_npy(const ref_capture *c, const char *dir, lm_err *err);
/* ref_capture_write_npy up to the renames: out[0..1 + 2 * n_layer) receive the staged writes
 * (logits, then each layer's K and V), for lm_wfile_commit_all with other files; on failure
 * none is left staged. */
int ref_capture_stage_npy(lm_wfile **out, const ref_capture *c, const char *dir, lm_err *err);
/* Writes one float64 .npy of the given shape (ndim 1..4), atomically. */
int ref_npy_write(const char *path, const double *data, uint32_t ndim, const uint64_t *shape,
                  lm_err *err);

/* --- disk cache (ref_cache.c) --- */

/* The cache key: XXH3-128 over (REF_VERSION, model hash, tokens, n_prompt, logit positions
 * (after defaulting), precision), as 32 lowercase hex digits + NUL. */
void ref_cache_key(char out[33], const ref_model *m, const ref_request *rq);
/* Loads the capture for (m, rq) from the cache, or computes and stores it. A corrupt or
 * mismatching entry (bad hash, truncated, another request's data) is reported through rq->log
 * as recomputed and replaced, never trusted. A cache folder that cannot be created or written
 * is reported through rq->log and the capture computed anyway (the cache costs time, never
 * correctness). *hit (may be NULL) tells whether it was loaded. */
int ref_cached(ref_capture *out, const ref_model *m, const ref_request *rq, const char *cache_dir,
               bool *hit, lm_err *err);

/* --- self-validation (ref_validate.c) --- */

/* Agreement of one tensor computed at P (a) and at 2P (b). For each element, agreeing bits =
 * -log2(|a - b| / |b|), capped at P; a == b (both zero included) counts as P bits; b == 0 with
 * a != 0 counts as 0 bits. */
typedef struct ref_agreement {
    char name[32];       /* "layer00.k", ..., "embedding", "layer00.out", ..., "logits" */
    double min_bits;     /* minimum over elements */
    double mean_bits;
    double min_digits;   /* min_bits * log10(2) */
    uint64_t worst;      /* flat index of the element with the fewest agreeing bits */
    uint64_t n;
} ref_agreement;

/* Runs rq at P = rq->prec (default 127) and at 2P; fills out[n_layer * 3 + 2] (per layer K then
 * V, then the hidden states: the embedding and each layer's output, then logits). *n_out
 * receives the count. */
int ref_validate(ref_agreement **out, uint32_t *n_out, const ref_model *m, const ref_request *rq,
                 lm_err *err);
/* The same, with the 2P run's dot products by MPFR multiply-adds when mpfr_dot (a pure-MPFR
 * pass: the exact split dot product of the P run is then checked against an independent
 * implementation). */
int ref_validate_against(ref_agreement **out, uint32_t *n_out, const ref_model *m,
                         const ref_request *rq, bool mpfr_dot, lm_err *err);
/* Agreement between two MPFR arrays (exported for tests). */
void ref_agreement_of(ref_agreement *out, const char *name, mpfr_t *a, mpfr_t *b,
                      uint64_t n, uint32_t prec);

/* --- MPFR primitives (ref_ops.c); every array element has the precision of its scratch.
 * Input arrays are not const-qualified only because ISO C11 cannot convert mpfr_t * to
 * const mpfr_t * without a warning; none of these functions writes its inputs. --- */

/* Per-thread scratch: temporaries at one precision and one row of converted weights. */
typedef struct ref_scratch {
    _Alignas(64) mpfr_t t, u, acc, acc_neg; /* 64-byte aligned and padded: scratches of
                                               different threads never share a cache line */
    mpfr_t gelu_c, gelu_k; /* RN(0.044715), RN(sqrt(RN(2 / RN(pi)))) at prec (ref_gelu_tanh) */
    mpfr_prec_t prec;
    mpfr_t *row;           /* [row_cap]: filled only by ref_row_set_flt */
    mp_limb_t *row_limbs;  /* [row_cap][limbs of prec], row's significands */
    mpfr_t *tmp;           /* private: storage of t, u, acc */
    uint64_t row_cap;
} ref_scratch;

int ref_scratch_init(ref_scratch *s, mpfr_prec_t prec, uint64_t row_cap, lm_err *err);
void ref_scratch_clear(ref_scratch *s);
/* Allocates n MPFR numbers at prec, set to +0, in one 64-byte aligned block (MPFR custom
 * interface: never mpfr_clear or mpfr_set_prec them). NULL on allocation failure. */
mpfr_t *ref_vec_new(uint64_t n, mpfr_prec_t prec);
void ref_vec_free(mpfr_t *v, uint64_t n);

/* s->row[i] = w[i] exactly, for i < n <= row_cap. Same value as mpfr_set_flt (tested), but
 * written straight into the significand (mpfr_set_flt costs ~80 ns, as much as a multiply-add). */
void ref_row_set_flt(ref_scratch *s, const float *w, uint64_t n);
/* out = sum_i x[i] * w[i]: each product rounded to nearest (mpfr_mul), the products with the
 * sign bit clear summed left to right into one accumulator and those with it set into another
 * (mpfr_add, rounded to nearest), then the two added once. Same error bound as one left-to-right
 * chain, |err| <= (n+1) 2^-P sum |x_i w_i|, but every accumulation is a same-sign addition:
 * measured 20-25% faster than one chain on non-repeating data (MPFR's add/subtract branch is
 * otherwise a coin flip per term). mpfr_fma and mpfr_dot were measured slower. n = 0 gives +0. */
void ref_dot(mpfr_t out, mpfr_t *x, mpfr_t *w, uint64_t n, ref_scratch *s);
/* out = sum of x[i] left to right; n = 0 gives +0. */
void ref_sum(mpfr_t out, mpfr_t *x, uint64_t n);
/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i]   (w float32, exact; mean: squares summed
 * left to right, then divided by n). out may alias x. */
void ref_rmsnorm(mpfr_t *out, mpfr_t *x, const float *w, uint64_t n, float eps,
                 ref_scratch *s);
/* In place: x[i] = exp(x[i] - max) / sum_j exp(x[j] - max); sum left to right. n >= 1. */
void ref_softmax(mpfr_t *x, uint64_t n, ref_scratch *s);
/* out = z / (1 + exp(-z)). */
void ref_silu(mpfr_t out, const mpfr_t z, ref_scratch *s);
/* ggml's swiglu_oai (gpt-oss): x = min(g, 7) (NaN stays NaN), y = clamp(u, -7, 7),
 * out = x / (1 + exp(-a x)) * (y + 1) with a = 1.702f (its float32 value), each operation
 * rounded; uses t, u, acc. out may alias g, not u. */
void ref_swiglu_oai(mpfr_t out, const mpfr_t g, const mpfr_t u, ref_scratch *s);
/* out = gelu_tanh(z) = z / 2 * (1 + tanh(sqrt(2/pi) * (z + 0.044715 z^3))); uses t. */
void ref_gelu_tanh(mpfr_t out, const mpfr_t z, ref_scratch *s);
/* Rotation angle frequency theta^(-2i/n_rot), into out (at out's precision). */
void ref_rope_freq(mpfr_t out, float theta, uint32_t i, uint32_t n_rot);
/* Rotates the first n_rot dims of one head x[head_dim] at position pos: NORM rotates
 * (x[2i], x[2i+1]), NEOX rotates (x[i], x[i + n_rot/2]), both by pos * theta^(-2i/n_rot).
 * cs: [n_rot/2][2] precomputed (cos, sin) of those angles (ref_rope_cos_sin). */
void ref_rope_apply(mpfr_t *x, mpfr_t *cs, uint32_t n_rot, ref_rope_type type,
                    ref_scratch *s);
/* YaRN's ramp over the pairs (ref_rope_cos_sin below): *lo = max(0, floor(c(32))), *hi =
 * min(n_rot - 1, ceil(c(1))), c(b) = n_rot ln(n_ctx_orig / (2 pi b)) / (2 ln theta), in double
 * (integers); the same for every pair and position, shared by the MPFR reference and the SR
 * ensemble (ref_sr.c). */
void ref_yarn_ramp(double *lo, double *hi, float theta, uint32_t n_rot, uint32_t n_ctx_orig);
/* cs[i][0] = cos(pos * freq_i), cs[i][1] = sin(pos * freq_i) for i < n_rot/2. */
/* factors: [n_rot/2] divisors of each pair's frequency (Llama 3.1 rope_freqs) or NULL.
 * yarn_factor > 0: YaRN as llama.cpp computes it (beta_fast 32, beta_slow 1, ext_factor 1): freq_i is multiplied by m_i = s (1 - r_i) + r_i, s = 1 / yarn_factor,
 * r_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1), lo = max(0, floor(c(32))),
 * hi = min(n_rot - 1, ceil(c(1))), c(b) = n_rot ln(n_ctx_orig / (2 pi b)) / (2 ln theta)
 * (lo and hi, integers, from double arithmetic; m_i at the output's precision); cos and sin
 * are then multiplied by 1 + 0.1 ln(yarn_factor), each rounded. */
void ref_rope_cos_sin(mpfr_t *cs, uint32_t pos, float theta, const float *factors,
                      uint32_t n_rot, float yarn_factor, uint32_t n_ctx_orig);

#endif
