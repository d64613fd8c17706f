/* ref_model.h — the reference's own view of a model file: the GGUF container mapped by the
 * common reader (kvd_gguf.h), the hyperparameters read from its metadata by the reference's own
 * rules (ref_hparams.c), and every tensor it uses found by name and dequantized by the
 * reference's own code (ref_dequant.c) into float32 (ref_model.c). Nothing here comes from the
 * engine: the harness compares the two readings (harness/judge/model_check.h).
 *
 * Tests may build a ref_model by hand (path NULL, weights pointing into their own storage);
 * they release what the reference keeps with it by ref_model_release before the storage goes. */
#ifndef REF_MODEL_H
#define REF_MODEL_H

#include "kvd_gguf.h"

#include <stdbool.h>
#include <stdint.h>

/* RoPE pairs: adjacent (x[2i], x[2i+1]) or halves (x[i], x[i + n_rot/2]). */
typedef enum ref_rope_type {
    REF_ROPE_NORM = 0, /* GGUF llama */
    REF_ROPE_NEOX = 2
} ref_rope_type;

/* Where a layer's RMSNorms sit. */
typedef enum ref_norm_place {
    REF_NORM_PRE = 0,     /* x += attn(norm(x)); x += ffn(norm(x)) */
    REF_NORM_SANDWICH = 1 /* x += post_norm(attn(norm(x))); x += post_norm(ffn(norm(x))) */
} ref_norm_place;

/* The FFN's gated activation. */
typedef enum ref_ffn_act {
    REF_ACT_SWIGLU = 0,     /* down(silu(gate(x)) * up(x)) */
    REF_ACT_GEGLU_TANH = 1, /* down(gelu_tanh(gate(x)) * up(x)) */
    REF_ACT_SWIGLU_OAI = 2  /* experts only: ref_swiglu_oai (kvd_ref.h) */
} ref_ffn_act;

/* The hyperparameters the reference computes with (GGUF keys "<arch>.<key>", llama.cpp's
 * names; the defaults and layer rules per architecture are ref_hparams.c's). */
typedef struct ref_hparams {
    char arch[32];            /* general.architecture */
    uint32_t n_vocab;         /* rows of token_embd.weight */
    uint32_t n_embd;          /* embedding_length */
    uint32_t n_layer;         /* block_count */
    uint32_t n_head;          /* attention.head_count */
    uint32_t n_head_kv;       /* attention.head_count_kv (default n_head) */
    uint32_t head_dim;        /* attention.key_length (default n_embd / n_head) */
    uint32_t n_ff;            /* feed_forward_length */
    uint32_t n_rot;           /* rope.dimension_count (default head_dim) */
    uint32_t n_ctx_train;     /* context_length */
    float rms_eps;            /* attention.layer_norm_rms_epsilon */
    float rope_theta;         /* rope.freq_base */
    ref_rope_type rope_type;
    ref_norm_place norm_place;
    ref_ffn_act act;
    bool qk_norm;             /* per-head RMSNorm of Q and K over head_dim before RoPE */
    bool tied_output;         /* no output.weight: the output projection is token_embd */
    float embd_scale;         /* embeddings times sqrt(n_embd) (this float32 value); 0 = none */
    float rope_theta_swa;     /* sliding layers' theta (rope.freq_base_swa); 0 = rope_theta */
    float rope_yarn_factor;   /* rope.scaling.factor when rope.scaling.type is "yarn"; 0 = none */
    uint32_t n_ctx_orig_yarn; /* rope.scaling.original_context_length (default context_length) */
    uint32_t n_swa;           /* attention.sliding_window; 0 = none */
    uint32_t n_expert;        /* expert_count; 0 = dense FFN */
    uint32_t n_expert_used;   /* expert_used_count (top-k) */
    uint32_t n_ff_exp;        /* expert_feed_forward_length */
    uint32_t moe_gating;      /* 0: softmax over the top-k logits; 1: softmax over all, top-k
                                 renormalised; 2: softmax over all */
    const char *ffn_norm;     /* the FFN pre-norm's tensor name after "blk.N." (a static
                                 string; NULL in a model built in memory) */
} ref_hparams;

/* One decoder layer, weights row-major [out][in] as GGUF stores them (ne[0] = in). */
typedef struct ref_layer {
    const float *attn_norm;       /* [n_embd] */
    const float *wq;              /* [n_head * head_dim][n_embd] */
    const float *wk;              /* [n_head_kv * head_dim][n_embd] */
    const float *wv;              /* [n_head_kv * head_dim][n_embd] */
    const float *wo;              /* [n_embd][n_head * head_dim] */
    const float *bq;              /* [n_head * head_dim] or NULL */
    const float *bk;              /* [n_head_kv * head_dim] or NULL */
    const float *bv;              /* [n_head_kv * head_dim] or NULL */
    const float *bo;              /* [n_embd] or NULL */
    const float *ffn_norm;        /* [n_embd] */
    const float *w_gate;          /* [n_ff][n_embd] (NULL in a MoE layer) */
    const float *w_up;            /* [n_ff][n_embd] */
    const float *w_down;          /* [n_embd][n_ff] */
    uint32_t window;              /* this layer's sliding window (hp.n_swa) or 0 = full */
    const float *sinks;           /* [n_head] learned sink logits or NULL */
    const float *ffn_gate_inp;    /* [n_expert][n_embd] router; non-NULL = MoE FFN */
    const float *ffn_gate_exps;   /* [n_expert][n_ff_exp][n_embd] */
    const float *ffn_up_exps;     /* [n_expert][n_ff_exp][n_embd] */
    const float *ffn_down_exps;   /* [n_expert][n_embd][n_ff_exp] */
    const float *ffn_gate_inp_b;  /* [n_expert] or NULL */
    const float *ffn_gate_exps_b; /* [n_expert][n_ff_exp] or NULL */
    const float *ffn_up_exps_b;   /* [n_expert][n_ff_exp] or NULL */
    const float *ffn_down_exps_b; /* [n_expert][n_embd] or NULL */
    const float *attn_q_norm;     /* [head_dim] when hp.qk_norm */
    const float *attn_k_norm;     /* [head_dim] when hp.qk_norm */
    const float *attn_post_norm;  /* [n_embd] when hp.norm_place == REF_NORM_SANDWICH */
    const float *ffn_post_norm;   /* [n_embd] when hp.norm_place == REF_NORM_SANDWICH */
} ref_layer;

/* A tensor as the reference read it: its GGUF name, type in the file and float32 values. */
typedef struct ref_weight {
    char name[64];
    const float *data; /* [n_elem] */
    uint64_t n_elem;
    uint32_t type;     /* ggml type number as stored (lm_tensor_type) */
} ref_weight;

struct ref_span_table;

typedef struct ref_model {
    ref_hparams hp;
    const float *tok_embd;    /* [n_vocab][n_embd] */
    const float *output_norm; /* [n_embd] */
    const float *output;      /* [n_vocab][n_embd]; == tok_embd when hp.tied_output */
    const float *rope_freqs;  /* [n_rot / 2] frequency divisors or NULL */
    ref_layer *layers;        /* [n_layer] */
    uint8_t content_hash[16]; /* XXH3-128 of the whole file, canonical big-endian bytes */
    char *path;               /* the file; NULL for a model built in memory */
    ref_weight *weights;      /* [n_weights]: every tensor read, in reading order */
    uint32_t n_weights;
    float *arena;             /* private: one allocation holding every weight */
    struct ref_span_table *_Atomic spans; /* private: the weight-span histograms (ref_spans.h) */
} ref_model;

/* Maps path, reads the hyperparameters (ref_hparams_read), finds every tensor the reference
 * uses by name with its shape checked, dequantizes each (ref_dequant), hashes the file and
 * unmaps it. LM_E_UNSUPPORTED for an architecture or tensor type the reference does not
 * implement, LM_E_INPUT for a missing key or tensor or a wrong shape, naming the file. */
int ref_model_open(ref_model **out, const char *path, lm_err *err);
void ref_model_free(ref_model *m); /* NULL is fine */
/* Releases what the reference keeps with m (ref_model_free does; a model built by hand calls it
 * before its storage goes). */
void ref_model_release(ref_model *m);
/* Content hash as 32 lowercase hex digits + NUL. */
void ref_model_hash_hex(const ref_model *m, char out[33]);

/* The reference's reading of g's hyperparameters (ref_hparams.c; n_vocab is left 0: the
 * embedding's rows say it). LM_E_UNSUPPORTED for an architecture it has no rules for. */
int ref_hparams_read(ref_hparams *hp, const lm_gguf *g, lm_err *err);
/* Whether the reference has rules for general.architecture `arch`. */
bool ref_arch_known(const char *arch);
/* Each layer's sliding window into window[hp->n_layer] by the same rules. */
int ref_hparams_windows(uint32_t *window, const ref_hparams *hp, const lm_gguf *g, lm_err *err);

#endif
