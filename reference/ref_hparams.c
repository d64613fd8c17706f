/* ref_hparams.c — the reference's own reading of the hyperparameters it uses, from the GGUF
 * metadata of the model's file, with its own table of per-architecture defaults, layer rules,
 * norms and activations (the harness compares it with the engine's reading: a misread key, a
 * wrong default or a wrong sliding pattern in either cannot pass unseen).
 *
 * Rules (llama.cpp's, per general.architecture):
 *   key prefix = the architecture name; head_count_kv defaults to head_count, key_length to
 *   embedding_length / head_count, rope.dimension_count to key_length;
 *   RMSNorm eps default: llama and gpt-oss 1e-5, gemma3 / qwen2 / qwen3 / qwen3moe 1e-6;
 *   gpt-oss: with a sliding_window, layer l slides iff l % 2 == 0 unless a pattern key says
 *   otherwise; rope.scaling.type "yarn": rope.scaling.factor and original_context_length
 *   (default context_length) as the engine must have them;
 *   rope.freq_base default: llama 10000, gemma3 / qwen2 / qwen3 1e6; RoPE pairs: llama
 *   adjacent (NORM), the others halves (NEOX);
 *   gemma3: sliding layers turn by rope.freq_base_swa (default 10000); with a
 *   sliding_window, layer l slides iff l % 6 < 5 unless a pattern key says otherwise;
 *   embeddings scaled by sqrt(embedding_length);
 *   a sliding_window_pattern key: a bool array (true = sliding) or a period N (l slides iff
 *   l % N < N - 1; 0: every layer slides);
 *   experts: expert_count (0 = dense), expert_used_count, expert_feed_forward_length (absent
 *   or 0: qwen3moe feed_forward_length / expert_used_count; gpt-oss requires the key; the
 *   others feed_forward_length);
 *   routing: qwen3moe always softmax over all with the top-k renormalised (gating 1), gpt-oss
 *   always softmax over the top-k logits (gating 0), the others by expert_gating_func (3: softmax over the top-k, gating 0; else softmax over all,
 *   renormalised iff expert_weights_norm: gating 1, or 2);
 *   norms and activations: llama, qwen2, qwen3, qwen3moe pre-norms and SwiGLU; gemma3 sandwich
 *   norms and GeGLU (tanh); gpt-oss pre-norms (its FFN pre-norm named post_attention_norm) and
 *   swiglu_oai experts; per-head Q/K norms: gemma3, qwen3, qwen3moe. */
#include "ref_model.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

/* An expert's FFN width when expert_feed_forward_length is absent or 0. */
typedef enum ref_ff_exp_rule {
    REF_FF_EXP_DENSE,    /* feed_forward_length */
    REF_FF_EXP_PER_USED, /* feed_forward_length / expert_used_count */
    REF_FF_EXP_REQUIRED, /* the key must be there */
} ref_ff_exp_rule;

typedef struct ref_arch_rule {
    const char *name;
    float eps, theta, theta_swa; /* theta_swa 0: sliding layers use theta */
    ref_rope_type rope;
    uint32_t period;             /* sliding pattern without a key (0: every layer) */
    bool embd_scale;
    int moe_fixed;               /* routing fixed by the architecture: -1 none (the keys say),
                                    else the gating (1 softmax renormalised, 0 softmax of the
                                    top-k) */
    bool yarn;                   /* rope.scaling.type "yarn" is read */
    ref_norm_place norm;
    ref_ffn_act act;
    bool qk_norm;
    const char *ffn_norm;        /* the FFN pre-norm's tensor, after "blk.N." */
    ref_ff_exp_rule ff_exp;      /* expert_feed_forward_length when absent or 0 */
} ref_arch_rule;

#define FFN_NORM "ffn_norm.weight"
static const ref_arch_rule rules[] = {
    {"llama", 1e-5f, 10000.0f, 0.0f, REF_ROPE_NORM, 0, false, -1, false, REF_NORM_PRE,
     REF_ACT_SWIGLU, false, FFN_NORM, REF_FF_EXP_DENSE},
    {"gemma3", 1e-6f, 1000000.0f, 10000.0f, REF_ROPE_NEOX, 6, true, -1, false, REF_NORM_SANDWICH,
     REF_ACT_GEGLU_TANH, true, FFN_NORM, REF_FF_EXP_DENSE},
    {"qwen2", 1e-6f, 1000000.0f, 0.0f, REF_ROPE_NEOX, 0, false, -1, false, REF_NORM_PRE,
     REF_ACT_SWIGLU, false, FFN_NORM, REF_FF_EXP_DENSE},
    {"qwen3", 1e-6f, 1000000.0f, 0.0f, REF_ROPE_NEOX, 0, false, -1, false, REF_NORM_PRE,
     REF_ACT_SWIGLU, true, FFN_NORM, REF_FF_EXP_DENSE},
    {"qwen3moe", 1e-6f, 1000000.0f, 0.0f, REF_ROPE_NEOX, 0, false, 1, false, REF_NORM_PRE,
     REF_ACT_SWIGLU, true, FFN_NORM, REF_FF_EXP_PER_USED},
    {"gpt-oss", 1e-5f, 10000.0f, 0.0f, REF_ROPE_NEOX, 2, false, 0, true, REF_NORM_PRE,
     REF_ACT_SWIGLU_OAI, false, "post_attention_norm.weight", REF_FF_EXP_REQUIRED},
};

static const ref_arch_rule *rule_of(const char *arch)
{
    for (size_t i = 0; arch != NULL && i < sizeof rules / sizeof rules[0]; ++i)
        if (strcmp(rules[i].name, arch) == 0)
            return &rules[i];
    return NULL;
}

bool ref_arch_known(const char *arch)
{
    return rule_of(arch) != NULL;
}

typedef struct rd {
    const lm_gguf *g;
    const char *arch;
    lm_err *err;
    int rc;
} rd;

static uint32_t get_u32(rd *r, const char *suffix, uint32_t def)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", r->arch, suffix);
    uint32_t v = def;
    if (r->rc == LM_OK)
        r->rc = lm_gguf_get_u32(r->g, key, def, &v, r->err);
    return v;
}

static float get_f32(rd *r, const char *suffix, float def)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", r->arch, suffix);
    float v = def;
    if (r->rc == LM_OK)
        r->rc = lm_gguf_get_f32(r->g, key, def, &v, r->err);
    return v;
}

static bool get_bool(rd *r, const char *suffix, bool def)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", r->arch, suffix);
    bool v = def;
    if (r->rc == LM_OK)
        r->rc = lm_gguf_get_bool(r->g, key, def, &v, r->err);
    return v;
}

static const char *get_str(rd *r, const char *suffix)
{
    char key[128];
    snprintf(key, sizeof key, "%s.%s", r->arch, suffix);
    const char *v = NULL;
    if (r->rc == LM_OK)
        r->rc = lm_gguf_get_str(r->g, key, NULL, &v, r->err);
    return v;
}

/* Experts: counts, width and routing by the rule's fixed gating or the file's keys. */
static void read_moe(ref_hparams *hp, rd *r, const ref_arch_rule *ru)
{
    hp->n_expert = get_u32(r, "expert_count", 0);
    hp->n_expert_used = get_u32(r, "expert_used_count", 0);
    hp->n_ff_exp = get_u32(r, "expert_feed_forward_length", 0);
    const uint32_t gating_func = get_u32(r, "expert_gating_func", 1);
    const bool norm = get_bool(r, "expert_weights_norm", false);
    if (hp->n_ff_exp == 0 && hp->n_expert > 0 && r->rc == LM_OK) {
        if (ru->ff_exp == REF_FF_EXP_REQUIRED)
            r->rc = LM_FAIL(r->err, LM_E_INPUT, "%s: missing metadata key '%s.expert_feed_"
                            "forward_length'", lm_gguf_path(r->g), r->arch);
        else
            hp->n_ff_exp = ru->ff_exp == REF_FF_EXP_PER_USED && hp->n_expert_used > 0
                               ? hp->n_ff / hp->n_expert_used : hp->n_ff;
    }
    hp->moe_gating = ru->moe_fixed >= 0 ? (uint32_t)ru->moe_fixed
                     : gating_func == 3 ? 0 : norm ? 1 : 2;
}

/* RoPE: base, the sliding layers' base, YaRN's factor and original context. */
static void read_rope(ref_hparams *hp, rd *r, const ref_arch_rule *ru)
{
    hp->rope_theta = get_f32(r, "rope.freq_base", ru->theta);
    hp->rope_theta_swa = get_f32(r, "rope.freq_base_swa", ru->theta_swa);
    const char *scaling = get_str(r, "rope.scaling.type");
    const bool yarn = ru->yarn && scaling != NULL && strcmp(scaling, "yarn") == 0;
    hp->rope_yarn_factor = yarn ? get_f32(r, "rope.scaling.factor", 0.0f) : 0.0f;
    hp->n_ctx_orig_yarn = yarn ? get_u32(r, "rope.scaling.original_context_length",
                                         hp->n_ctx_train)
                               : 0;
}

int ref_hparams_read(ref_hparams *hp, const lm_gguf *g, lm_err *err)
{
    memset(hp, 0, sizeof *hp);
    const char *path = lm_gguf_path(g), *arch = NULL;
    int rc = lm_gguf_get_str(g, "general.architecture", NULL, &arch, err);
    if (rc)
        return rc;
    const ref_arch_rule *ru = rule_of(arch);
    if (ru == NULL)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: architecture '%.64s' is not implemented by "
                       "the reference", path, arch ? arch : "(none)");
    snprintf(hp->arch, sizeof hp->arch, "%s", arch);
    rd r = {g, arch, err, LM_OK};
    hp->n_embd = get_u32(&r, "embedding_length", 0);
    hp->n_layer = get_u32(&r, "block_count", 0);
    hp->n_head = get_u32(&r, "attention.head_count", 0);
    hp->n_head_kv = get_u32(&r, "attention.head_count_kv", hp->n_head);
    hp->head_dim = get_u32(&r, "attention.key_length", hp->n_head ? hp->n_embd / hp->n_head : 0);
    hp->n_ff = get_u32(&r, "feed_forward_length", 0);
    hp->n_rot = get_u32(&r, "rope.dimension_count", hp->head_dim);
    hp->n_ctx_train = get_u32(&r, "context_length", 0);
    hp->rms_eps = get_f32(&r, "attention.layer_norm_rms_epsilon", ru->eps);
    hp->n_swa = get_u32(&r, "attention.sliding_window", 0);
    read_rope(hp, &r, ru);
    read_moe(hp, &r, ru);
    if (r.rc)
        return r.rc;
    if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_head == 0 || hp->n_head_kv == 0 ||
        hp->n_head % hp->n_head_kv != 0 || hp->head_dim == 0 || hp->n_ff == 0 ||
        hp->n_ctx_train == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: the reference reads inconsistent hyperparameters "
                       "(embedding_length %" PRIu32 ", block_count %" PRIu32 ", head_count %"
                       PRIu32 "/%" PRIu32 ", head dimension %" PRIu32 ", feed_forward_length %"
                       PRIu32 ", rope.dimension_count %" PRIu32 ", context_length %" PRIu32 ")",
                       path, hp->n_embd, hp->n_layer, hp->n_head, hp->n_head_kv, hp->head_dim,
                       hp->n_ff, hp->n_rot, hp->n_ctx_train);
    hp->rope_type = ru->rope;
    hp->norm_place = ru->norm;
    hp->act = ru->act;
    hp->qk_norm = ru->qk_norm;
    hp->embd_scale = ru->embd_scale ? sqrtf((float)hp->n_embd) : 0.0f;
    hp->ffn_norm = ru->ffn_norm;
    return LM_OK;
}

/* Whether layer l slides: a bool array pattern (true = sliding), a period N (l slides iff
 * l % N < N - 1; 0: every layer), or the rule's period. */
static int layer_slides(const lm_gguf *g, const char *arch, const ref_arch_rule *ru, uint32_t l,
                        bool *out, lm_err *err)
{
    char key[128];
    snprintf(key, sizeof key, "%s.attention.sliding_window_pattern", arch);
    int64_t ip = lm_gguf_find(g, key);
    uint32_t period = ru->period;
    if (ip >= 0 && lm_gguf_kv_type(g, (uint64_t)ip) == LM_GGUF_ARR) {
        const lm_gguf_arr *a = NULL;
        int rc = lm_gguf_get_arr(g, key, LM_GGUF_BOOL, &a, err);
        if (rc)
            return rc;
        *out = l < a->n && ((const uint8_t *)a->data)[l] != 0;
        return LM_OK;
    }
    if (ip >= 0) {
        int rc = lm_gguf_get_u32(g, key, 0, &period, err);
        if (rc)
            return rc;
    }
    *out = period == 0 || l % period + 1 < period;
    return LM_OK;
}

int ref_hparams_windows(uint32_t *window, const ref_hparams *hp, const lm_gguf *g, lm_err *err)
{
    const ref_arch_rule *ru = rule_of(hp->arch);
    if (ru == NULL)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: architecture '%.64s' is not implemented by "
                       "the reference", lm_gguf_path(g), hp->arch);
    for (uint32_t l = 0; l < hp->n_layer; ++l) {
        bool slides = false;
        int rc;
        if (hp->n_swa > 0 && (rc = layer_slides(g, hp->arch, ru, l, &slides, err)))
            return rc;
        window[l] = slides ? hp->n_swa : 0;
    }
    return LM_OK;
}
