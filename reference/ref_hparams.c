/* ref_hparams.c — the reference's own reading of the hyperparameters it uses, from the GGUF
 * metadata of the model's file, with its own table of per-architecture defaults and layer
 * rules; the engine's loaded configuration must agree, so that a misread key (a freq_base
 * ignored, a wrong default, a wrong sliding pattern) cannot enter the reference unseen.
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
 *   or 0: qwen3moe feed_forward_length / expert_used_count, the others feed_forward_length);
 *   routing: qwen3moe always softmax over all with the top-k renormalised (gating 1), gpt-oss
 *   always softmax over the top-k logits (gating 0), the others by expert_gating_func (3: softmax over the top-k, gating 0; else softmax over all,
 *   renormalised iff expert_weights_norm: gating 1, or 2). */
#include "kvd_ref.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

typedef struct ref_arch_rule {
    const char *name;
    float eps, theta, theta_swa; /* theta_swa 0: sliding layers use theta */
    lm_rope_type rope;
    uint32_t period;             /* sliding pattern without a key (0: every layer) */
    bool embd_scale;
    int moe_fixed;               /* routing fixed by the architecture: -1 none (the keys say),
                                    else the gating (1 softmax renormalised, 0 softmax of the
                                    top-k) */
    bool yarn;                   /* rope.scaling.type "yarn" is read */
} ref_arch_rule;

static const ref_arch_rule rules[] = {
    {"llama", 1e-5f, 10000.0f, 0.0f, LM_ROPE_NORM, 0, false, -1, false},
    {"gemma3", 1e-6f, 1000000.0f, 10000.0f, LM_ROPE_NEOX, 6, true, -1, false},
    {"qwen2", 1e-6f, 1000000.0f, 0.0f, LM_ROPE_NEOX, 0, false, -1, false},
    {"qwen3", 1e-6f, 1000000.0f, 0.0f, LM_ROPE_NEOX, 0, false, -1, false},
    {"qwen3moe", 1e-6f, 1000000.0f, 0.0f, LM_ROPE_NEOX, 0, false, 1, false},
    {"gpt-oss", 1e-5f, 10000.0f, 0.0f, LM_ROPE_NEOX, 2, false, 0, true},
};

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

#define SAME_U(what, mine, theirs)                                                             \
    do {                                                                                       \
        if ((uint64_t)(mine) != (uint64_t)(theirs))                                            \
            return LM_FAIL(err, LM_E_DISAGREE, "%s: reference reads %s = %" PRIu64 ", the engine "  \
                           "loaded %" PRIu64, m->path, what, (uint64_t)(mine),                 \
                           (uint64_t)(theirs));                                                \
    } while (0)
#define SAME_F(what, mine, theirs)                                                             \
    do {                                                                                       \
        if ((mine) != (theirs))                                                                \
            return LM_FAIL(err, LM_E_DISAGREE, "%s: reference reads %s = %.9g, the engine loaded "  \
                           "%.9g", m->path, what, (double)(mine), (double)(theirs));           \
    } while (0)

/* Whether layer l slides, by the reference's rules. */
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

static int check(const lm_model *m, const lm_gguf *g, lm_err *err)
{
    const lm_hparams *hp = &m->hp;
    const char *arch = NULL;
    int rc = lm_gguf_get_str(g, "general.architecture", NULL, &arch, err);
    if (rc)
        return rc;
    const ref_arch_rule *ru = NULL;
    for (size_t i = 0; arch != NULL && i < sizeof rules / sizeof rules[0]; ++i)
        if (strcmp(rules[i].name, arch) == 0)
            ru = &rules[i];
    if (ru == NULL)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: architecture '%.64s' is not implemented by "
                       "the reference", m->path, arch ? arch : "(none)");
    if (strcmp(arch, hp->arch) != 0)
        return LM_FAIL(err, LM_E_DISAGREE, "%s: reference reads architecture '%.64s', the engine "
                       "loaded '%s'", m->path, arch, hp->arch);
    rd r = {g, arch, err, LM_OK};
    const uint32_t n_embd = get_u32(&r, "embedding_length", 0);
    const uint32_t n_layer = get_u32(&r, "block_count", 0);
    const uint32_t n_head = get_u32(&r, "attention.head_count", 0);
    const uint32_t n_head_kv = get_u32(&r, "attention.head_count_kv", n_head);
    const uint32_t head_dim = get_u32(&r, "attention.key_length", n_head ? n_embd / n_head : 0);
    const uint32_t n_ff = get_u32(&r, "feed_forward_length", 0);
    const uint32_t n_rot = get_u32(&r, "rope.dimension_count", head_dim);
    const float eps = get_f32(&r, "attention.layer_norm_rms_epsilon", ru->eps);
    const float theta = get_f32(&r, "rope.freq_base", ru->theta);
    const float theta_swa = get_f32(&r, "rope.freq_base_swa", ru->theta_swa);
    const uint32_t n_swa = get_u32(&r, "attention.sliding_window", 0);
    const uint32_t n_expert = get_u32(&r, "expert_count", 0);
    const uint32_t n_used = get_u32(&r, "expert_used_count", 0);
    uint32_t n_ff_exp = get_u32(&r, "expert_feed_forward_length", 0);
    const uint32_t gating_func = get_u32(&r, "expert_gating_func", 1);
    if (r.rc)
        return r.rc;
    bool norm = false;
    char key[128];
    snprintf(key, sizeof key, "%s.expert_weights_norm", arch);
    if ((rc = lm_gguf_get_bool(g, key, false, &norm, err)))
        return rc;
    if (n_ff_exp == 0 && n_expert > 0)
        n_ff_exp = ru->moe_fixed >= 0 && n_used > 0 ? n_ff / n_used : n_ff;
    const uint32_t gating = ru->moe_fixed >= 0 ? (uint32_t)ru->moe_fixed
                            : gating_func == 3 ? 0 : norm ? 1 : 2;
    /* YaRN: type, factor, original context (default context_length) */
    const char *scaling = NULL;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    if ((rc = lm_gguf_get_str(g, key, NULL, &scaling, err)))
        return rc;
    const bool yarn = ru->yarn && scaling != NULL && strcmp(scaling, "yarn") == 0;
    const float yarn_factor = yarn ? get_f32(&r, "rope.scaling.factor", 0.0f) : 0.0f;
    const uint32_t n_ctx_train = get_u32(&r, "context_length", 0);
    const uint32_t n_orig = yarn ? get_u32(&r, "rope.scaling.original_context_length", n_ctx_train)
                                 : 0;
    if (r.rc)
        return r.rc;
    SAME_U("embedding_length", n_embd, hp->n_embd);
    SAME_U("block_count", n_layer, hp->n_layer);
    SAME_U("attention.head_count", n_head, hp->n_head);
    SAME_U("attention.head_count_kv", n_head_kv, hp->n_head_kv);
    SAME_U("head dimension", head_dim, hp->head_dim);
    SAME_U("feed_forward_length", n_ff, hp->n_ff);
    SAME_U("rope.dimension_count", n_rot, hp->n_rot);
    SAME_U("RoPE pairing (0 adjacent, 2 halves)", ru->rope, hp->rope_type);
    SAME_F("attention.layer_norm_rms_epsilon", eps, hp->rms_eps);
    SAME_F("rope.freq_base", theta, hp->rope_theta);
    /* the engine keeps 0 or the same theta when sliding layers turn like the others */
    const float swa_eff = theta_swa != 0.0f ? theta_swa : theta;
    const float swa_eng = hp->rope_theta_swa != 0.0f ? hp->rope_theta_swa : hp->rope_theta;
    SAME_F("sliding layers' rope theta", swa_eff, swa_eng);
    SAME_F("YaRN factor", yarn_factor, hp->rope_yarn_factor);
    SAME_U("YaRN original context", n_orig, hp->n_ctx_orig_yarn);
    SAME_U("expert_count", n_expert, hp->n_expert);
    if (n_expert > 0) {
        SAME_U("expert_used_count", n_used, hp->n_expert_used);
        SAME_U("expert feed-forward length", n_ff_exp, hp->n_ff_exp);
        SAME_U("expert routing (0 softmax of the top-k, 1 softmax renormalised, 2 softmax)",
               gating, hp->moe_gating);
    }
    SAME_U("embedding scale by sqrt(n_embd)", ru->embd_scale, hp->embd_scale != 0.0f);
    if (ru->embd_scale)
        SAME_F("embedding scale", sqrtf((float)n_embd), hp->embd_scale);
    for (uint32_t l = 0; l < n_layer; ++l) {
        bool slides = false;
        if (n_swa > 0 && (rc = layer_slides(g, arch, ru, l, &slides, err)))
            return rc;
        char what[64];
        snprintf(what, sizeof what, "layer %" PRIu32 " window", l);
        SAME_U(what, slides ? n_swa : 0, m->layers[l].window);
    }
    return LM_OK;
}

int ref_hparams_check(const lm_model *m, lm_err *err)
{
    if (m->path == NULL || m->weights == NULL)
        return LM_OK;
    lm_gguf *g = NULL;
    int rc = lm_gguf_open(&g, m->path, err);
    if (rc)
        return rc;
    rc = check(m, g, err);
    lm_gguf_close(g);
    return rc;
}
