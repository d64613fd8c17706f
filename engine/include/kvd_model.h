/* kvd_model.h — the engine's model: configuration and weights. Weight matrices stay in their
 * file's type, read from the file's read-only mapping and decoded block by block inside the
 * products (LM_WEIGHTS_FILE); LM_WEIGHTS_ARENA dequantizes them once into a float32 arena
 * instead, with the same values. The reference reads the same file through its own view
 * (ref_model.h). */
#ifndef KVD_MODEL_H
#define KVD_MODEL_H

#include "kvd_dequant.h"
#include "kvd_gguf.h"
#include "kvd_tokenizer.h"

typedef enum lm_rope_type {
    LM_ROPE_NORM = 0, /* rotate adjacent pairs (x[2i], x[2i+1]): GGUF llama */
    LM_ROPE_NEOX = 2  /* rotate halves (x[i], x[i + n_rot/2]) */
} lm_rope_type;

/* Where the RMSNorms sit in a layer. */
typedef enum lm_norm_place {
    LM_NORM_PRE = 0,     /* x += attn(norm(x)); x += ffn(norm(x)) (llama) */
    LM_NORM_SANDWICH = 1 /* x += post_norm(attn(norm(x))); x += post_norm(ffn(norm(x))) (gemma3) */
} lm_norm_place;

/* The FFN's gated activation. */
typedef enum lm_ffn_act {
    LM_ACT_SWIGLU = 0,    /* down(silu(gate(x)) * up(x)) */
    LM_ACT_GEGLU_TANH = 1, /* down(gelu_tanh(gate(x)) * up(x)) (gemma3) */
    /* gpt-oss's experts (ggml swiglu_oai, alpha 1.702, limit 7): with g = min(gate(x), 7),
     * u = clamp(up(x), -7, 7): down(g / (1 + exp(-1.702 g)) * (u + 1)) */
    LM_ACT_SWIGLU_OAI = 2
} lm_ffn_act;

/* How an architecture's feed-forward blocks route (the loader's rules, engine/model.c). */
typedef enum lm_arch_moe {
    /* dense, or MoE as the file's %s.expert_* keys say (gating func 1 or 3, expert_weights_norm) */
    LM_ARCH_MOE_FROM_FILE = 0,
    /* every layer MoE, routing fixed by the architecture as llama.cpp's graph fixes it:
     * softmax over all router logits, top-k, the k weights renormalised to sum 1 (qwen3moe);
     * expert_feed_forward_length defaults to feed_forward_length / expert_used_count; a file
     * whose expert_gating_func, expert_weights_norm or expert_weights_scale says otherwise is
     * refused */
    LM_ARCH_MOE_SOFTMAX_RENORM = 1,
    /* every layer MoE, top-k of the router logits, softmax over the k (gpt-oss: gating 0);
     * expert_feed_forward_length required; the same refusals */
    LM_ARCH_MOE_SOFTMAX_TOPK = 2
} lm_arch_moe;

/* GGUF tensor names of one architecture: global ones in full, per-layer ones after "blk.N.". */
typedef struct lm_arch_tensors {
    const char *tok_embd, *output_norm, *output;
    const char *attn_norm, *attn_q, *attn_k, *attn_v, *attn_output;
    const char *attn_q_bias, *attn_k_bias, *attn_v_bias, *attn_output_bias; /* optional */
    const char *ffn_norm, *ffn_gate, *ffn_up, *ffn_down;
    const char *attn_sinks;                                                 /* optional */
    const char *ffn_gate_inp, *ffn_gate_exps, *ffn_up_exps, *ffn_down_exps; /* MoE layers */
    const char *ffn_gate_inp_b, *ffn_gate_exps_b, *ffn_up_exps_b, *ffn_down_exps_b; /* optional */
    const char *attn_q_norm, *attn_k_norm;      /* per-head RMSNorm weights (lm_arch.qk_norm) */
    const char *attn_post_norm, *ffn_post_norm; /* LM_NORM_SANDWICH output norms */
    const char *rope_freqs;                     /* global, optional: per-pair frequency divisors */
} lm_arch_tensors;

/* Tensors the loader takes as optional for most rows that a row requires (lm_arch.required):
 * the set llama.cpp's loader requires for that architecture. */
enum {
    LM_ARCH_REQ_OUTPUT = 1u << 0,   /* output.weight (no tied output) */
    LM_ARCH_REQ_O_BIAS = 1u << 1,   /* attn_output.bias */
    LM_ARCH_REQ_SINKS = 1u << 2,    /* attn_sinks.weight */
    LM_ARCH_REQ_MOE_BIAS = 1u << 3  /* ffn_gate_inp.bias and the three expert stacks' biases */
};

/* One row of the architecture table (engine/arch.c): everything the loader and the forward
 * pass decide by general.architecture. */
typedef struct lm_arch {
    const char *name;         /* general.architecture */
    const char *key_prefix;   /* hyperparameter keys are "<key_prefix>.<key>" */
    lm_rope_type rope_type;
    float rope_theta;         /* when rope.freq_base is absent */
    float rms_eps;            /* when attention.layer_norm_rms_epsilon is absent */
    lm_norm_place norm_place;
    lm_ffn_act act;
    bool qk_norm;             /* per-head RMSNorm of Q and K over head_dim before RoPE */
    bool embd_scale_sqrt;     /* embeddings multiplied by sqrtf(n_embd) (float32) */
    bool rope_yarn;           /* rope.scaling.type "yarn" accepted (see lm_hparams) */
    bool rot_full;            /* rope.dimension_count must equal the head dimension */
    float rope_theta_swa;     /* sliding layers' theta when rope.freq_base_swa is absent; 0 =
                                 the same as the global layers */
    uint32_t swa_period;      /* sliding pattern when the file has none (see lm_hparams) */
    lm_arch_moe moe;
    unsigned required;        /* LM_ARCH_REQ_* bits: optional tensors this row requires */
    lm_arch_tensors tensors;
} lm_arch;

/* The table: rows 0 .. lm_arch_count()-1; lm_arch_at is NULL past the end. */
size_t lm_arch_count(void);
const lm_arch *lm_arch_at(size_t i);
/* The row whose name is `name`; NULL when none. */
const lm_arch *lm_arch_find(const char *name);
/* The supported names as "a, b or c" (for messages). */
const char *lm_arch_expected(void);

typedef struct lm_hparams {
    char arch[32];        /* general.architecture (a row of the architecture table) */
    uint32_t n_vocab;
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;   /* divides n_head (grouped-query attention) */
    uint32_t head_dim;    /* attention.key_length, default n_embd / n_head */
    uint32_t n_ff;
    uint32_t n_rot;       /* rope.dimension_count, <= head_dim, even */
    uint32_t n_ctx_train;
    float rms_eps;        /* attention.layer_norm_rms_epsilon */
    float rope_theta;     /* rope.freq_base, default 10000 */
    lm_rope_type rope_type;
    bool tied_output;     /* output.weight absent: output projection uses token_embd */
    lm_norm_place norm_place;
    lm_ffn_act act;
    bool qk_norm;         /* layers carry attn_q_norm / attn_k_norm (per-head RMSNorm) */
    float embd_scale;     /* embeddings are multiplied by this (float32); 0 = not scaled */
    float rope_theta_swa; /* sliding layers' RoPE theta; 0 = rope_theta */
    /* YaRN (%s.rope.scaling.type "yarn", as llama.cpp computes it: ggml rope_yarn with
     * ext_factor 1, beta_fast 32, beta_slow 1, attention factor 1): pair i of n_rot turns at
     * theta_i = pos base^(-2i/n_rot) m_i with m_i = s (1 - r_i) + r_i, s = 1 / rope_yarn_factor,
     * r_i = 1 - clamp((i - lo) / max(0.001, hi - lo), 0, 1), lo = max(0, floor(c(32))),
     * hi = min(n_rot - 1, ceil(c(1))), c(b) = n_rot ln(n_ctx_orig_yarn / (2 pi b)) / (2 ln base);
     * its cos and sin are multiplied by 1 + 0.1 ln(rope_yarn_factor) (llama.cpp's
     * yarn_attn_factor 1 / (1 + 0.1 ln f) times get_mscale(f) = 1 + 0.1 ln f, times ggml's own
     * factor 1 + 0.1 ln f: mathematically 1 + 0.1 ln f). */
    float rope_yarn_factor;   /* %s.rope.scaling.factor (> 1); 0 = no YaRN */
    uint32_t n_ctx_orig_yarn; /* %s.rope.scaling.original_context_length (default
                                 context_length) */
    /* --- architecture variants (llama.cpp key names, `%s` = arch); all 0 = plain llama --- */
    uint32_t n_swa;         /* %s.attention.sliding_window: a sliding layer's query at p sees keys
                               in (p - n_swa, p]; 0 = no sliding window */
    uint32_t swa_period;    /* %s.attention.sliding_window_pattern given as a period N
                               (llama.cpp set_swa_pattern): layer il slides iff il % N < N - 1;
                               0 when absent (every layer slides) or given per layer as an array;
                               lm_layer.window holds the resolved per-layer value */
    bool has_sinks;         /* some layer has blk.N.attn_sinks.weight (gpt-oss learned sinks) */
    uint32_t n_expert;      /* %s.expert_count; 0 = dense FFN */
    uint32_t n_expert_used; /* %s.expert_used_count (top-k), 1..min(n_expert, 32) */
    uint32_t n_ff_exp;      /* %s.expert_feed_forward_length (default feed_forward_length) */
    uint32_t moe_gating;    /* 0: softmax over the top-k logits (%s.expert_gating_func 3, gpt-oss);
                               1: softmax over all, top-k renormalised (func 1 with
                               %s.expert_weights_norm); 2: softmax over all, not renormalised */
} lm_hparams;

/* A weight matrix as the products read it: row-major [rows][cols] (cols = ggml ne[0]), its
 * values either float32 in memory (f) or the file's blocks of its type (q: each row
 * row_bytes bytes, decoded by lm_type_to_f32 into exactly the values the arena holds). A
 * weight that is absent has neither. */
typedef struct lm_wt {
    const float *f;     /* [rows][cols] float32 values, or NULL */
    const uint8_t *q;   /* [rows][row_bytes] blocks in the file's mapping, or NULL */
    size_t row_bytes;   /* bytes of one row of q (0 when q is NULL) */
    uint32_t type;      /* lm_tensor_type in the file (F32 for a weight built in memory) */
} lm_wt;

/* A float32 weight built in memory (type F32). */
static inline lm_wt lm_wt_f32(const float *f)
{
    lm_wt w = {f, NULL, 0, 0};
    return w;
}
/* Whether the weight is present. */
static inline bool lm_wt_present(const lm_wt *w)
{
    return w->f != NULL || w->q != NULL;
}
/* Rows [row0, row0 + n) of w, each of cols values, into out: [n][cols] float32 (bitwise the
 * arena's values: lm_type_to_f32's decoder). */
void lm_wt_rows(float *out, const lm_wt *w, uint64_t row0, uint64_t n, uint32_t cols);

/* One decoder layer. Row-major [out][in] as GGUF stores them (ne[0] = in). */
typedef struct lm_layer {
    const float *attn_norm; /* [n_embd] */
    lm_wt wq;           /* [n_head * head_dim][n_embd] */
    lm_wt wk;           /* [n_head_kv * head_dim][n_embd] */
    lm_wt wv;           /* [n_head_kv * head_dim][n_embd] */
    lm_wt wo;           /* [n_embd][n_head * head_dim] */
    const float *bq;        /* [n_head * head_dim] or NULL */
    const float *bk;        /* [n_head_kv * head_dim] or NULL */
    const float *bv;        /* [n_head_kv * head_dim] or NULL */
    const float *bo;        /* [n_embd] or NULL */
    const float *ffn_norm;  /* [n_embd] */
    lm_wt w_gate;       /* [n_ff][n_embd] */
    lm_wt w_up;         /* [n_ff][n_embd] */
    lm_wt w_down;       /* [n_embd][n_ff] */
    /* --- variants; NULL / 0 when absent --- */
    uint32_t window;              /* this layer's sliding window (hp.n_swa or 0 = full) */
    const float *sinks;           /* [n_head] learned sink logits (blk.N.attn_sinks.weight) */
    lm_wt ffn_gate_inp;       /* [n_expert][n_embd] router; present = MoE FFN (then
                                     w_gate, w_up, w_down are absent) */
    lm_wt ffn_gate_exps;      /* [n_expert][n_ff_exp][n_embd] */
    lm_wt ffn_up_exps;        /* [n_expert][n_ff_exp][n_embd] */
    lm_wt ffn_down_exps;      /* [n_expert][n_embd][n_ff_exp] */
    const float *ffn_gate_inp_b;  /* [n_expert] router bias or NULL */
    const float *ffn_gate_exps_b; /* [n_expert][n_ff_exp] or NULL */
    const float *ffn_up_exps_b;   /* [n_expert][n_ff_exp] or NULL */
    const float *ffn_down_exps_b; /* [n_expert][n_embd] or NULL */
    const float *attn_q_norm;     /* [head_dim] when hp.qk_norm */
    const float *attn_k_norm;     /* [head_dim] when hp.qk_norm */
    const float *attn_post_norm;  /* [n_embd] when hp.norm_place == LM_NORM_SANDWICH */
    const float *ffn_post_norm;   /* [n_embd] when hp.norm_place == LM_NORM_SANDWICH */
} lm_layer;

/* A weight as loaded: its GGUF name, its type in the file and its values (lm_wt_rows decodes
 * them: [n_elem / cols][cols]). */
typedef struct lm_weight {
    char name[64];
    lm_wt w;            /* f inside the model's arenas, or q inside the file's mapping */
    uint64_t n_elem;
    uint32_t cols;      /* ggml ne[0] */
    uint32_t type;      /* ggml type number as stored (lm_tensor_type, kvd_gguf.h) */
} lm_weight;

/* Where a model's weight matrices live (lm_model_load_mode). */
typedef enum lm_weights_mode {
    LM_WEIGHTS_FILE = 0, /* in the file's type, in its read-only mapping (F32 ones read in
                            place, the others decoded block by block inside the products) */
    LM_WEIGHTS_ARENA = 1 /* dequantized once into one float32 arena, the file then unmapped */
} lm_weights_mode;

/* Data another part of the program keeps with a model for the model's lifetime (the
 * reference's weight-span histograms), attached on first use by lm_model_ext_attach and
 * released by lm_model_free through release. One slot per model. */
typedef struct lm_model_ext lm_model_ext;
struct lm_model_ext {
    void (*release)(lm_model_ext *x);
};

typedef struct lm_model {
    lm_hparams hp;
    const lm_arch *arch;      /* the architecture table's row for hp.arch (NULL in models that
                                 tests build by hand) */
    lm_wt tok_embd;           /* [n_vocab][n_embd] */
    const float *output_norm; /* [n_embd] */
    lm_wt output;             /* [n_vocab][n_embd]; == tok_embd when hp.tied_output */
    const float *rope_freqs;  /* [n_rot / 2] frequency divisors (Llama 3.1) or NULL */
    lm_layer *layers;         /* [n_layer] */
    lm_vocab *vocab;          /* NULL if the file has no tokenizer */
    uint8_t content_hash[16]; /* XXH3-128 of the whole file, canonical big-endian bytes */
    uint64_t file_size;       /* bytes of the file when it was loaded */
    char *path;
    lm_weight *weights;       /* [n_weights]: every tensor loaded, in load order */
    uint32_t n_weights;
    lm_weights_mode weights_mode;
    void *weights_arena;      /* private: one allocation holding every float32 weight (ARENA),
                                 or the vectors (norms, biases) only (FILE) */
    size_t weights_n;         /* private: floats in weights_arena */
    const void *file_map;     /* private: the file's read-only mapping (FILE), or NULL */
    uint64_t file_map_bytes;  /* private: its length */
    lm_model_ext *ext;        /* private: the attached data or NULL, read and written only
                                 atomically (lm_model_ext_attach; this header is also C++'s) */
    bool borrowed;            /* a view of another model (lm_model_first_layers): nothing is
                                 attached to it */
} lm_model;

/* Loads and validates the model: every required tensor present with the right shape, the
 * configuration consistent. Unknown architectures or features are LM_E_UNSUPPORTED. The
 * weights' place is $KVDRIFT_WEIGHTS: "file" (the default when unset or empty) or "arena"
 * (lm_weights_mode); any other value is LM_E_INPUT. */
int lm_model_load(lm_model **out, const char *path, lm_err *err);
/* The same with the weights' place given. */
int lm_model_load_mode(lm_model **out, const char *path, lm_weights_mode mode, lm_err *err);
/* The mode $KVDRIFT_WEIGHTS names (LM_E_INPUT with one line for another value). */
int lm_weights_mode_env(lm_weights_mode *out, lm_err *err);
/* "file" or "arena". */
const char *lm_weights_mode_name(lm_weights_mode mode);
void lm_model_free(lm_model *m);
/* Bytes of memory available for new allocations now (MemAvailable of /proc/meminfo, else
 * free physical pages); UINT64_MAX when unknown. */
uint64_t lm_mem_available(void);
/* LM_OK when `needed` bytes fit in `available`, else LM_E_NOMEM with one line naming what,
 * both byte counts. */
int lm_mem_check(const char *what, uint64_t needed, uint64_t available, lm_err *err);
/* What loading a file and running one context will hold, predicted from the file's header
 * and tensor infos (nothing is read or allocated beyond them). */
typedef struct lm_mem_plan {
    uint64_t file;    /* the file, mapped (read while it loads; FILE: the weights' home) */
    uint64_t weights; /* the float32 arena: every weight dequantized (ARENA), or only the
                         vectors, norms and biases (FILE) */
    uint64_t kv;      /* the KV cache of the context (lm_ctx_predict_bytes) */
    uint64_t scratch; /* the context's scratch (lm_ctx_predict_bytes), tiles included */
    uint64_t tiles;   /* FILE: the products' decoded weight tiles (lm_ctx_predict_wtile_bytes);
                         0 for ARENA */
    uint64_t f32;     /* every weight as float32: what a float32 copy of the model holds (the
                         reference's own view) */
    lm_hparams hp;    /* the file's hyperparameters, as lm_model_load reads them */
} lm_mem_plan;
/* The plan for path and a context of n_ctx positions (0: the trained context), its weights
 * placed as lm_model_load places them ($KVDRIFT_WEIGHTS); the file's errors are
 * lm_model_load's (unsupported, missing tensors, wrong shapes). */
int lm_model_mem_plan(lm_mem_plan *out, const char *path, uint32_t n_ctx, lm_err *err);
/* LM_OK when m's file still has the size and content hash it had when m was loaded (or m was
 * built or changed in memory: no path, or no weight list); checked before each reference
 * pass, whose view of the model was read from the same file, so that a file replaced on disk
 * in between is one line rather than a reference of one file judged against another; else
 * LM_E_INPUT "PATH: changed on disk since it was loaded (...)" (also when it is gone or no
 * longer opens: the reason in the parentheses). */
int lm_model_file_unchanged(const lm_model *m, lm_err *err);
/* m's attached data, or NULL. */
lm_model_ext *lm_model_ext_get(const lm_model *m);
/* Attaches x to m unless data is attached already (another thread may attach at the same
 * time: one wins) or m is borrowed; returns what m holds afterwards, NULL for a borrowed m.
 * The caller releases x when it is not what is returned. */
lm_model_ext *lm_model_ext_attach(const lm_model *m, lm_model_ext *x);
/* Releases m's attached data (lm_model_free does; a model built by hand calls it before its
 * storage goes). */
void lm_model_ext_release(lm_model *m);
/* The weights a layer multiplies its activations by, in this order: wq, wk, wv, wo, w_gate,
 * w_up, w_down, ffn_gate_inp, ffn_gate_exps, ffn_up_exps, ffn_down_exps (NULL where the layer
 * has none). */
#define LM_LAYER_PRODUCTS 11
void lm_layer_product_weights(const lm_layer *L, const lm_wt *w[LM_LAYER_PRODUCTS]);
/* Content hash as 32 lowercase hex digits + NUL. */
void lm_model_hash_hex(const lm_model *m, char out[33]);

#endif
