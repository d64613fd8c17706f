/* kvd_engine.h — the float32 inference engine: context, chunked forward pass, sampling. */
#ifndef KVD_ENGINE_H
#define KVD_ENGINE_H

#include "kvd_model.h"

/* Checkpoint callback (optional, lm_ctx_set_probe): called on the calling thread after each named operation of
 * a chunk with that operation's rows, x [n][row_elems] for positions pos0 .. pos0+n-1. layer <
 * n_layer: "attn_norm", "q" and "k" (after RoPE), "v", "attn" (softmax(QK^T).V, before the
 * output projection), "attn_out" (after Wo and its bias), "attn_resid" (residual stream after
 * the attention block), "ffn_norm", "ffn_act" (silu(gate) * up), "ffn_out", "residual"
 * (residual stream after the layer); layer == n_layer: "out_norm" (final RMSNorm of a row whose
 * logits are computed). x is valid only during the call; op is a static string. */
typedef void (*lm_probe_fn)(void *user, uint32_t layer, const char *op, uint32_t pos0, uint32_t n,
                            const float *x, size_t row_elems);

/* The most threads any kvdrift component runs (engine pool and OpenBLAS, reference pass): every
 * --threads option and case file is checked against it. */
#define LM_MAX_THREADS 256u

typedef struct lm_ctx_params {
    const char *backend; /* a registered name (lm_backend_at; NULL = "blas"); a LM_BE_SEEDED
                            backend also as NAME:seed=N (lm_backend_seeded_name) */
    int n_threads;       /* blas: OpenBLAS threads (0 = all cores; at most LM_MAX_THREADS);
                            det: its pool's threads (the same rule); also the threads of the
                            row-parallel elementwise work; naive: ignored (always 1) */
    uint32_t n_ctx;      /* KV cache capacity in positions (0 = prompt + generation chosen by
                            the caller must fit in hp.n_ctx_train) */
    const char *attn;      /* attention implementation: "dense" (NULL) materialises a chunk's
                              scores against the whole cache; "stream" walks the cache in key
                              tiles with an online softmax (scratch independent of context) */
    uint32_t rot_max_size; /* rotating KV cache (MLX semantics, kvcache_rotating.h): 0 = off */
    uint32_t rot_keep;     /* positions always kept at the start (< rot_max_size) */
    bool rot_window;       /* rotating cache policy. false: MLX's (a chunk of n > 1 tokens
                              keeps max_size - 1 older positions and its row i attends to them
                              all, so a row sees up to max_size + i keys and what it sees
                              depends on the chunking). true: an exact window, whatever the
                              chunking: the query at position q attends to the first rot_keep
                              positions and the positions in (q - (rot_max_size - rot_keep), q],
                              at most rot_max_size keys, the set a single step sees under
                              MLX's policy (the same slots are kept; rows are masked) */
    uint32_t tp;           /* tensor-parallel shards of the weight products (tensor_parallel.h:
                              Q, K, V, gate, up column-parallel, O and down row-parallel, the
                              output projection and MoE experts whole); 0 or 1 = none, at most
                              LM_TP_MAX */
    int tp_reduce;         /* how row-parallel partial sums combine (lm_tp_reduce) */
    uint32_t batch_rows;   /* rows of the largest batched forward call this context leads
                              (lm_forward_batch: its own rows and its co-resident sequences'),
                              its scratch sized for them; 0 = it leads none */
    const char *profile;   /* precision profile (kvd_profile.h): NULL/"f32" = none; otherwise
                              the forward pass rounds at the profile's sites (round to nearest;
                              the naive-sr backend rounds stochastically) */
} lm_ctx_params;

typedef enum lm_logits_mode {
    LM_LOGITS_NONE = 0, /* compute no logits (output projection skipped entirely) */
    LM_LOGITS_LAST = 1, /* logits of the chunk's last position only: out [n_vocab] */
    LM_LOGITS_ALL = 2   /* logits of every position of the chunk: out [n][n_vocab] */
} lm_logits_mode;

typedef struct lm_ctx lm_ctx;

/* Allocates the KV cache and every scratch buffer once; nothing is allocated per token (but
 * for the copy of V in which attention recomputes a row that read a non-finite value at a key
 * it cannot see, engine/attention_mend.c). */
int lm_ctx_create(lm_ctx **out, const lm_model *m, const lm_ctx_params *p, lm_err *err);
/* Bytes a context of n_ctx positions will allocate, predicted from hp alone: *kv the KV cache,
 * *scratch lm_ctx_create's scratch arena (the same pieces) for the default parameters (no
 * profile, batch or tensor-parallel shards; dense attention scores for as many threads as
 * the machine has CPUs). Not counted: the per-chunk scratch of sliding-window masks and MoE
 * (lm_ctx_peak_scratch_bytes: a chunk's rows times the active experts' width). */
void lm_ctx_predict_bytes(uint64_t *kv, uint64_t *scratch, const lm_hparams *hp, uint32_t n_ctx);
/* Bytes of the decoded weight tiles a context allocates for a model that keeps its file's
 * types (weight_tiles.c), for as many threads as the machine has CPUs. */
uint64_t lm_ctx_predict_wtile_bytes(const lm_hparams *hp);
void lm_ctx_free(lm_ctx *c);

/* The RoPE tables every context of m reads: for pair i < n_rot/2 and position pos < n_pos,
 * cos_tab/sin_tab [n_pos][n_rot/2] = float(cos/sin(pos * freq_i)), freq_i = pow(theta,
 * -2i/n_rot) (divided by rope_freqs[i] when the model has them), in double. These pow/cos/sin
 * calls are the only C-library maths a forward pass depends on (expf is the engine's own,
 * sqrtf and fmaf are correctly rounded), so two machines whose tables agree for a model agree
 * on everything libm contributes to its bits. Called with hp.rope_theta, and with
 * hp.rope_theta_swa for the sliding layers when that differs. */
void lm_rope_table(const lm_model *m, float theta, uint32_t n_pos, float *cos_tab,
                   float *sin_tab);

/* Processes tokens[n] at positions [n_past, n_past + n): appends their K (after RoPE) and V
 * to the cache, attends causally over the whole cache, and writes logits per `mode`.
 * n must be >= 1 and n_past + n <= n_ctx; ids must be < n_vocab. */
int lm_forward(lm_ctx *c, const int32_t *tokens, uint32_t n, lm_logits_mode mode,
               float *logits, lm_err *err);

#define LM_TP_SHARDS_MAX 8u /* lm_ctx_params.tp at most */
/* How a row-parallel product's shards combine (tensor_parallel.h). */
typedef enum lm_tp_reduce {
    LM_TP_RING = 0,  /* NCCL's ring all-reduce order */
    LM_TP_TREE = 1,  /* pairwise over the shards (a power of two of them) */
    LM_TP_FIXED = 2  /* a tree fixed by k alone: LM_TP_SHARDS_MAX leaves of k, each its own
                        product, pairwise; the same bits for any shard count dividing it */
} lm_tp_reduce;

/* Several sequences in one forward call, as a serving engine batches them: each sequence's
 * chunk (prefill rows, or one decode row) at its own positions in its own context (KV cache,
 * mask, routing), the matrix products run once over every row (the leading sequence's rows
 * first, then the others in order). A sequence's attention reads its own cache only. */
#define LM_BATCH_MAX 64u
typedef struct lm_seq_chunk {
    lm_ctx *ctx;           /* the sequence's context; seqs[0].ctx leads (backend, scratch) */
    const int32_t *tokens; /* [n] */
    uint32_t n;            /* >= 1 */
    lm_logits_mode mode;
    float *logits;         /* as lm_forward's; NULL with LM_LOGITS_NONE */
} lm_seq_chunk;
/* Runs seqs[n_seq] (1..LM_BATCH_MAX) as one forward call: all contexts of one model, backend
 * and profile, each its own; the leading one created with batch_rows >= the sum of n (not
 * needed for n_seq == 1, which is lm_forward). A probe or layer callback of the leading
 * context sees its own rows only. LM_E_INPUT for a bad chunk (as lm_forward), mismatched or
 * shared contexts, or too many rows; nothing is fed then. */
int lm_forward_batch(const lm_seq_chunk *seqs, uint32_t n_seq, lm_err *err);

/* Prefill: feeds tokens[n] in chunks of `step` tokens (0 = one chunk) and writes the last
 * position's logits to last_logits [n_vocab]. */
int lm_prefill(lm_ctx *c, const int32_t *tokens, uint32_t n, uint32_t step, float *last_logits,
               lm_err *err);

const lm_model *lm_ctx_model(const lm_ctx *c);
/* Whether any layer of c attends with a sliding window, sinks or a rotating cache (masks a
 * bidirectional chunk of the block sampler cannot use). */
bool lm_ctx_attn_variants(const lm_ctx *c);
uint32_t lm_ctx_n_past(const lm_ctx *c);
uint32_t lm_ctx_n_ctx(const lm_ctx *c);
/* Forget every cached position (the next forward starts at position 0). */
void lm_ctx_reset(lm_ctx *c);
/* A prefix-cache hit: dst (empty) takes the K and V rows of src's first n positions, every
 * layer, as an earlier request computed them, and continues at position n. Both contexts hold
 * the same model with the plain cache (a rotating one evicts rows by its own schedule);
 * LM_E_INPUT otherwise, or when dst is not empty, src holds fewer than n positions or dst has
 * room for fewer. */
int lm_ctx_adopt_prefix(lm_ctx *dst, const lm_ctx *src, uint32_t n, lm_err *err);
/* dst gets src's probe and layer callbacks (lm_ctx_set_probe, lm_ctx_set_layer_fn). */
void lm_ctx_share_hooks(lm_ctx *dst, const lm_ctx *src);
/* KV cache of one layer: [n_past][n_head_kv][head_dim], K after RoPE. */
const float *lm_ctx_k(const lm_ctx *c, uint32_t layer);
const float *lm_ctx_v(const lm_ctx *c, uint32_t layer);
/* Installs (or, with NULL, removes) the per-operation checkpoint callback; a context without
 * one pays one untaken branch per operation and chunk. */
void lm_ctx_set_probe(lm_ctx *c, lm_probe_fn probe, void *user);
/* Layer callback (optional): called on the calling thread after layer `layer` (1..n_layer) of
 * every chunk lm_forward processes, n the chunk's positions; for progress lines. */
typedef void (*lm_layer_fn)(void *user, uint32_t layer, uint32_t n_layer, uint32_t n);
/* Installs (or, with NULL, removes) the layer callback. */
void lm_ctx_set_layer_fn(lm_ctx *c, lm_layer_fn fn, void *user);
/* Bytes of scratch (excluding weights and KV cache) this context allocated. */
size_t lm_ctx_scratch_bytes(const lm_ctx *c);
const char *lm_ctx_backend_name(const lm_ctx *c);
/* "dense" or "stream". */
const char *lm_ctx_attn_name(const lm_ctx *c);
/* The engine's own peak scratch so far: the largest attention (or MoE) scratch one kernel call
 * used plus the activation rows of the largest chunk (bytes; excludes weights and KV cache). */
size_t lm_ctx_peak_scratch_bytes(const lm_ctx *c);
/* The attention (or MoE) part of it alone: the largest scratch one kernel call used. */
size_t lm_ctx_peak_attn_scratch_bytes(const lm_ctx *c);
/* MoE routing of layer il in the last forward call: expert ids [*n][*k] in rank order and
 * router margins [*n] (k-th minus (k+1)-th logit). NULL when the layer is not MoE. */
const uint32_t *lm_ctx_moe_routing(const lm_ctx *c, uint32_t il, uint32_t *n, uint32_t *k,
                                   const float **margin);
/* With a rotating cache, lm_ctx_k/v return the layer's slots (positions lm_ctx_kv_pos()),
 * not positions 0..n_past-1. NULL without a rotating cache. */
const int32_t *lm_ctx_kv_pos(const lm_ctx *c, uint32_t *n_slots);
/* --- backends: an enumerable registry (engine/backend.c holds the one table) --- */

/* Capability flags: what callers may assume about a backend, asked instead of its name. */
enum {
    /* Keeps process-global state (OpenBLAS's thread count): never run it beside another run
     * in the same process. */
    LM_BE_SHARES_PROCESS_STATE = 1u << 0,
    /* Each output's summation order is fixed and independent of how rows are split into calls
     * (prefill step) and of threads: every step and thread count gives the same bits. */
    LM_BE_CHUNK_INVARIANT = 1u << 1,
    /* Takes a seed in its name, NAME:seed=N (lm_backend_seeded_name): a member of the noise
     * ensemble, not a configuration users choose (lm_backend_known is false for it). */
    LM_BE_SEEDED = 1u << 2,
    /* Rounds stochastically: each operation errs by up to one ulp (2u), not half of one. */
    LM_BE_STOCHASTIC_ROUNDING = 1u << 3,
    /* Runs its products on an accelerator: creating it fails with LM_E_UNSUPPORTED ("no CUDA
     * device") where none is present, and tests and cases skip it visibly there. */
    LM_BE_DEVICE = 1u << 4,
    /* Runs every stage on the calling thread whatever n_threads says: a thread-count axis
     * computes nothing new on it. */
    LM_BE_ONE_THREAD = 1u << 5,
    /* Its library is loaded at run time (dlopen): creating it fails with LM_E_UNSUPPORTED
     * ("BLIS not installed") where the library is absent, and tests and cases skip it visibly
     * there, as LM_BE_DEVICE backends without a device. */
    LM_BE_LOADED = 1u << 6,
};
/* The flags under which a registered backend may be unable to run here (LM_E_UNSUPPORTED from
 * lm_backend_create, skipped visibly rather than failed). */
#define LM_BE_MAY_BE_ABSENT (LM_BE_DEVICE | LM_BE_LOADED)

/* The kernel set a backend runs on this machine (lm_backend_info.kernels). */
typedef struct lm_backend_kernels {
    char name[48];     /* OpenBLAS's core ("Prescott"), BLIS's configuration ("haswell"), det's
                          instruction-set path ("avx512"); "" when the library is absent */
    char isa[16];      /* the instruction-set level those kernels need: "sse3", "avx", "avx2",
                          "avx512" or "unknown" */
    char cpu_isa[16];  /* the level this CPU runs, the same words */
    bool older;        /* the kernels are older than the CPU: the library did not pick a kernel
                          set made for it */
    char warning[400]; /* when older: one line (no newline) saying what runs and what to do */
} lm_backend_kernels;

typedef struct lm_backend_info {
    const char *name;    /* what lm_ctx_params.backend and CONFIG strings name it by */
    const char *summary; /* one line: summation order and threading */
    unsigned flags;      /* LM_BE_* */
    /* Mantissa bits (with the implicit one) the products' operands are rounded to before they
     * are multiplied: 0 = float32, unrounded; 11 for TF32, 8 for bfloat16. */
    unsigned operand_bits;
    /* (optional: NULL = nothing beyond the compiler, build flags and libm) What on this machine
     * decides this backend's bits, written NUL-terminated into buf[n]: with brief false as
     * "key=value" parts joined by "; " (no newline; hashed into the golden-file platform
     * key), with brief true as one short word for one-line platform summaries. */
    void (*describe)(char *buf, size_t n, bool brief);
    /* (optional: NULL = portable C, nothing picked at run time) The kernel set this backend
     * runs here, and whether it is older than the CPU (engine/kernel_isa.h). */
    void (*kernels)(lm_backend_kernels *out);
} lm_backend_info;

/* The kernels of the backend named name (its part before ':'); false, with *out zeroed, when
 * it has no kernels hook or is unknown. */
bool lm_backend_kernels_of(lm_backend_kernels *out, const char *name);

/* The registry: backends 0 .. lm_backend_count()-1, in a fixed order. */
size_t lm_backend_count(void);
/* NULL when i >= lm_backend_count(). */
const lm_backend_info *lm_backend_at(size_t i);
/* The backend named by name[0..len), or by its part before ':' (a seeded name); NULL when
 * none. */
const lm_backend_info *lm_backend_find(const char *name, size_t len);
/* Flags of the backend a NUL-terminated name (or seeded name) selects; 0 when unknown. */
unsigned lm_backend_flags(const char *name);
/* Whether name[0..len) names a backend a user may choose (registered, not LM_BE_SEEDED), and
 * those names as "a, b or c" for messages (generated from the registry). */
bool lm_backend_known(const char *name, size_t len);
const char *lm_backend_expected(void);
/* Creates and destroys the named backend: LM_OK when it can run here, else the status and
 * message creating it gives (LM_E_UNSUPPORTED "no CUDA device" for a LM_BE_DEVICE backend on a
 * machine without one, "BLIS not installed" for blis without libblis.so.4). */
int lm_backend_probe(const char *name, lm_err *err);
/* "<backend>:seed=<seed>" into buf, the name that creates a LM_BE_SEEDED backend with that
 * seed (LM_BACKEND_NAME_MAX bytes suffice for a registered name). */
#define LM_BACKEND_NAME_MAX 48
void lm_backend_seeded_name(char *buf, size_t n, const char *backend, uint64_t seed);
/* The same for "naive-sr", the stochastic-rounding ensemble member. */
#define LM_SR_NAME_MAX LM_BACKEND_NAME_MAX
void lm_sr_backend_name(char *buf, size_t n, uint64_t seed);

/* --- thresholds: the sizes at which the engine takes another code path ---
 * A sweep whose configurations never reach one never runs the code behind it; the harness
 * reads this table (never a copy of its numbers) to say what a sweep exercised. */
typedef enum lm_threshold_kind {
    LM_THR_CHUNK_ROWS = 0, /* reached by one forward call of at least `value` tokens */
    LM_THR_KEYS = 1,       /* reached by a query that attends over at least `value` cache slots */
    LM_THR_REUSED = 2,     /* reached by a prompt whose first `value` or more positions' K/V
                              rows were adopted from an earlier request (lm_ctx_adopt_prefix) */
    LM_THR_SEQS = 3,       /* reached by a forward call holding rows of at least `value`
                              sequences (lm_forward_batch) */
    LM_THR_SHARDS = 4      /* reached by weight products split over at least `value`
                              tensor-parallel shards (lm_ctx_params.tp) */
} lm_threshold_kind;

typedef struct lm_threshold {
    const char *name;    /* "stream.key_tile", ... */
    lm_threshold_kind kind;
    uint32_t value;      /* the smallest count that takes the other path */
    const char *attn;    /* only with this attention implementation ("dense", "stream"); NULL:
                            any */
    const char *backend; /* only on this backend; NULL: any */
    bool threads;        /* only with >= 2 threads on a backend without LM_BE_ONE_THREAD */
    const char *what;    /* the other path, in words */
} lm_threshold;

size_t lm_threshold_count(void);
/* NULL when i >= lm_threshold_count(). */
const lm_threshold *lm_threshold_at(size_t i);
/* The threshold of that name; NULL when none. */
const lm_threshold *lm_threshold_find(const char *name);

/* --- sampling --- */
typedef struct lm_sampler_params {
    float temperature; /* <= 0: greedy */
    uint32_t top_k;    /* 0: off */
    float top_p;       /* >= 1: off */
    uint64_t seed;
} lm_sampler_params;

typedef struct lm_sampler lm_sampler;
int lm_sampler_create(lm_sampler **out, const lm_sampler_params *p, uint32_t n_vocab, lm_err *err);
void lm_sampler_free(lm_sampler *s);
int32_t lm_sample(lm_sampler *s, const float *logits /* [n_vocab] */);
/* Greedy choice: the largest logit, ties to the lowest id; NaN never wins. */
int32_t lm_argmax(const float *logits, uint32_t n);

#endif
