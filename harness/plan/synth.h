/* synth.h — deterministic synthetic llama models (GGUF) for demos, tests and benchmarks. */
#ifndef HX_SYNTH_H
#define HX_SYNTH_H

#include "kvd_gguf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Hyperparameters of a synthetic llama model (output projection always tied). */
typedef struct hx_synth_params {
    char name[32];       /* general.name */
    uint32_t n_embd;
    uint32_t n_layer;
    uint32_t n_head;
    uint32_t n_head_kv;  /* divides n_head */
    uint32_t n_ff;
    uint32_t n_vocab;    /* >= HX_SYNTH_MIN_VOCAB */
    uint32_t n_ctx;      /* llama.context_length */
    float rope_theta;    /* llama.rope.freq_base */
    float rms_eps;       /* llama.attention.layer_norm_rms_epsilon */
    /* architecture variants (llama.cpp key names); zero = plain llama */
    uint32_t n_swa;          /* llama.attention.sliding_window (0 = none) */
    uint32_t swa_period;     /* llama.attention.sliding_window_pattern as a period N: layer il
                                slides iff il % N < N - 1 (0 = every layer slides) */
    bool sinks;              /* blk.N.attn_sinks.weight [n_head] learned sink logits */
    uint32_t n_expert;       /* llama.expert_count (0 = dense FFN) */
    uint32_t n_expert_used;  /* llama.expert_used_count */
    uint32_t n_ff_exp;       /* llama.expert_feed_forward_length */
    bool mask_token;         /* the last token id is "<mask>" (control): masked-diffusion samplers */
    uint32_t gating_func;    /* llama.expert_gating_func: 1 softmax over all, renormalised over
                                the top-k (expert_weights_norm true); 3 softmax over the top-k */
    bool experts_mxfp4;      /* expert matrices written as MXFP4 (gpt-oss's released format;
                                n_embd and n_ff_exp multiples of 32) */
    char arch[16];           /* general.architecture and key prefix: "" = llama; "gemma3" adds
                                per-head Q/K norms and post norms (its table row supplies the
                                sliding pattern, the sliding theta and the embedding scale);
                                "qwen3" adds per-head Q/K norms; "qwen3moe" is qwen3 with
                                experts (n_expert > 0, gating_func 1; the routing keys are
                                not written: the row fixes them); "gpt-oss" (gating_func 3)
                                adds biases, YaRN keys, output.weight and gpt-oss's names */
    uint32_t head_dim;       /* attention.key_length (0 = n_embd / n_head) */
    bool output_copy;        /* an output.weight of its own holding the embedding's values (as
                                gpt-oss always has): an untied projection's size, tied values */
    lm_tensor_type weight_type; /* the preset's weight type (kvdrift synth without --type):
                                   F32 (0), F16, BF16, or Q4_K for the Q4_K_M-like mix */
} hx_synth_params;

/* What hx_synth_write_info wrote. */
typedef struct hx_synth_info {
    uint8_t sha256[32];  /* SHA-256 of the file's bytes */
    uint64_t bytes;      /* file size */
    uint64_t n_tensors;
    uint64_t n_params;   /* elements of every tensor */
    uint64_t n_active;   /* elements a token reads: experts counted used of count (the token
                            embedding whole) */
} hx_synth_info;

/* Control tokens, 256 byte pieces and "▁": the smallest vocabulary synth writes. */
#define HX_SYNTH_MIN_VOCAB 260u
#define HX_SYNTH_MAX_VOCAB 262144u

/* Name of the i-th preset, or NULL past the last one. */
const char *hx_synth_preset_name(size_t i);
/* Fills *out with a preset's hyperparameters; unknown name -> LM_E_INPUT listing the presets. */
int hx_synth_preset(hx_synth_params *out, const char *name, lm_err *err);
/* Checks that p describes a model synth can write (LM_E_INPUT naming the bad field). */
int hx_synth_check(const hx_synth_params *p, lm_err *err);

/* Writes the model atomically and streaming: the header and tensor infos first, then each
 * tensor generated and written in pieces of 2^20 values, so memory stays a few MiB whatever
 * the model's size. type: LM_TYPE_F32, LM_TYPE_F16 or LM_TYPE_BF16 for the weight matrices and
 * the embedding (norm vectors are always F32, as llama.cpp stores them), or LM_TYPE_Q4_K for
 * a Q4_K_M-like mix of Q4_K and Q6_K (synth.c, tensor_type); experts are MXFP4 when p says so.
 * The bytes depend only on (p, seed, type). info (may be NULL): the file's digest and counts. */
int hx_synth_write_info(hx_synth_info *info, const char *path, const hx_synth_params *p,
                        uint64_t seed, lm_tensor_type type, lm_err *err);
/* The counts and file size hx_synth_write_info would give (sha256 left zero), without
 * generating or writing anything (any seed gives the same size). */
int hx_synth_measure(hx_synth_info *info, const hx_synth_params *p, lm_tensor_type type,
                     lm_err *err);
/* hx_synth_write_info without the info. */
int hx_synth_write_params(const char *path, const hx_synth_params *p, uint64_t seed,
                          lm_tensor_type type, lm_err *err);
/* The same for a named preset. */
int hx_synth_write(const char *path, const char *preset, uint64_t seed, lm_tensor_type type,
                   lm_err *err);
/* The largest preset hx_synth_cache_write writes (bytes as float32). */
#define HX_SYNTH_CACHE_MAX ((uint64_t)1 << 30)
/* Whether preset `name` is larger than HX_SYNTH_CACHE_MAX as float32 (gptoss-20b, gemma3-4b,
 * moe-26b-a4b): written only by `kvdrift synth` (commands, benchmarks), never as a cache entry
 * or whole by a test. *bytes (may be NULL): its float32 size. False for an unknown name. */
bool hx_synth_preset_large(const char *name, uint64_t *bytes);
/* The F32 preset model as a cache entry at path (a preset larger than HX_SYNTH_CACHE_MAX:
 * LM_E_INPUT naming `kvdrift synth` instead): written fresh on every call (its bytes depend
 * only on preset, seed and this file, so a copy left by an older kvdrift or damaged on disk is
 * never used), and when the copy that was there differs from the fresh one (XXH3-128 of both),
 * one warning line through log says so (log NULL: none). */
int hx_synth_cache_write(const char *path, const char *preset, uint64_t seed, lm_log_fn log,
                         void *log_user, lm_err *err);

#endif
