/* model.c — model loading, driven by the architecture table (arch.c): hyperparameters from
 * GGUF metadata, every tensor's shape checked. Weight matrices stay in the file's read-only
 * mapping in their file's type (LM_WEIGHTS_FILE: F32 ones read in place, the others decoded
 * by the products, weight_tiles.c), or are dequantized once into one float32 arena, the file
 * then unmapped (LM_WEIGHTS_ARENA); vectors (norms, biases, sinks, RoPE factors) are float32
 * in an arena either way. The vocabulary copies what it needs. */
#include "kvd_engine.h"
#include "kvd_model.h"
#include "kvd_util.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <xxhash.h>

/* One weight to load: its GGUF name, expected shape (ne[0] = in, ne[1] = out, 1 when 1-D),
 * and where it goes: a vector's float32 pointer (dst) or a matrix's lm_wt (wdst). */
typedef struct want {
    char name[64];
    uint64_t ne0, ne1;
    bool optional;
    const float **dst; /* NULL for a matrix */
    lm_wt *wdst;       /* NULL for a vector */
    uint64_t ne2;      /* third extent (expert stacks), 1 for matrices and vectors */
} want;

typedef struct plan {
    want *w;
    size_t n, cap;
} plan;

static int plan_add(plan *p, const char *name, uint64_t ne0, uint64_t ne1, bool optional,
                    const float **dst, lm_wt *wdst, lm_err *err)
{
    if (p->n == p->cap) {
        size_t cap = p->cap ? 2 * p->cap : 64;
        want *w = realloc(p->w, cap * sizeof *w);
        if (w == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "model: out of memory");
        p->w = w;
        p->cap = cap;
    }
    want *w = &p->w[p->n++];
    snprintf(w->name, sizeof w->name, "%s", name);
    w->ne0 = ne0;
    w->ne1 = ne1;
    w->optional = optional;
    w->dst = dst;
    w->wdst = wdst;
    w->ne2 = 1;
    return LM_OK;
}

/* A 3-D tensor [ne2][ne1][ne0] (ggml order ne0, ne1, ne2), e.g. blk.N.ffn_gate_exps.weight. */
static int plan_add3(plan *p, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2,
                     lm_wt *wdst, lm_err *err)
{
    int rc = plan_add(p, name, ne0, ne1, false, NULL, wdst, err);
    if (rc == LM_OK)
        p->w[p->n - 1].ne2 = ne2;
    return rc;
}

/* "<key_prefix>.<suffix>" into buf[KEY_MAX]: an architecture's hyperparameter key. */
#define KEY_MAX 128
static const char *akey(char *buf, const lm_arch *a, const char *suffix)
{
    snprintf(buf, KEY_MAX, "%s.%s", a->key_prefix, suffix);
    return buf;
}

static int need_u32(const lm_gguf *g, const char *key, uint32_t *out, lm_err *err)
{
    if (lm_gguf_find(g, key) < 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: missing metadata key '%s'", lm_gguf_path(g), key);
    return lm_gguf_get_u32(g, key, 0, out, err);
}

/* Mixture-of-experts keys (llama.cpp names). Rules: expert_group_count > 1 (grouped routing)
 * and expert_shared_count > 0 (shared experts) are refused everywhere; an architecture whose
 * graph fixes the routing (lm_arch.moe) needs expert_count and expert_used_count and refuses a
 * file whose gating keys say otherwise. */
static int read_moe_hparams(lm_hparams *hp, const lm_arch *a, const lm_gguf *g, lm_err *err)
{
    char k[KEY_MAX];
    const char *path = lm_gguf_path(g);
    const bool fixed = a->moe != LM_ARCH_MOE_FROM_FILE;
    const bool topk = a->moe == LM_ARCH_MOE_SOFTMAX_TOPK;
    /* the gating keys' values that say the row's own routing */
    const uint32_t own_func = topk ? 3 : 1;
    const bool own_norm = fixed && !topk;
    uint32_t gating_func = own_func, groups = 0, shared = 0;
    bool norm = own_norm;
    float scale = 0.0f;
    int rc;
    if (fixed && ((rc = need_u32(g, akey(k, a, "expert_count"), &hp->n_expert, err))
                  || (rc = need_u32(g, akey(k, a, "expert_used_count"), &hp->n_expert_used, err))))
        return rc;
    if ((rc = lm_gguf_get_u32(g, akey(k, a, "expert_count"), 0, &hp->n_expert, err))
        || (rc = lm_gguf_get_u32(g, akey(k, a, "expert_used_count"), 0, &hp->n_expert_used, err))
        || (rc = lm_gguf_get_u32(g, akey(k, a, "expert_feed_forward_length"), 0, &hp->n_ff_exp,
                                 err))
        || (rc = lm_gguf_get_u32(g, akey(k, a, "expert_gating_func"), own_func, &gating_func,
                                 err))
        || (rc = lm_gguf_get_bool(g, akey(k, a, "expert_weights_norm"), norm, &norm, err))
        || (rc = lm_gguf_get_f32(g, akey(k, a, "expert_weights_scale"), 0.0f, &scale, err))
        || (rc = lm_gguf_get_u32(g, akey(k, a, "expert_group_count"), 0, &groups, err))
        || (rc = lm_gguf_get_u32(g, akey(k, a, "expert_shared_count"), 0, &shared, err)))
        return rc;
    if (groups > 1 || shared > 0)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: expert_group_count %" PRIu32 " and "
                       "expert_shared_count %" PRIu32 ": grouped routing and shared experts are "
                       "not supported", path, groups, shared);
    if (hp->n_expert == 0 && fixed)
        return LM_FAIL(err, LM_E_INPUT, "%s: expert_count 0, but every %s layer is a mixture "
                       "of experts", path, a->name);
    if (hp->n_expert == 0)
        return LM_OK;
    if (hp->n_ff_exp == 0 && topk)
        return LM_FAIL(err, LM_E_INPUT, "%s: missing metadata key '%s'", path,
                       akey(k, a, "expert_feed_forward_length"));
    if (hp->n_ff_exp == 0) /* absent or 0: llama.cpp's default for each row's graph */
        hp->n_ff_exp = fixed && hp->n_expert_used > 0 ? hp->n_ff / hp->n_expert_used : hp->n_ff;
    if (hp->n_expert > 256 || hp->n_expert_used == 0 || hp->n_expert_used > hp->n_expert
        || hp->n_expert_used > 32 || hp->n_ff_exp == 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: expert_count %" PRIu32 ", expert_used_count %" PRIu32
                       " and expert_feed_forward_length %" PRIu32 " must satisfy 1 <= used <= "
                       "count <= 256, used <= 32, length > 0", path, hp->n_expert,
                       hp->n_expert_used, hp->n_ff_exp);
    if (scale != 0.0f && scale != 1.0f)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: expert_weights_scale %g is not supported "
                       "(0 or 1: the gate weights unscaled)", path, (double)scale);
    if (fixed && (gating_func != own_func || norm != own_norm))
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: expert_gating_func %" PRIu32 " with "
                       "expert_weights_norm %s is not %s's routing (%s)", path, gating_func,
                       norm ? "true" : "false", a->name,
                       topk ? "3, softmax over the top-k logits, not renormalised"
                            : "1, softmax, with the top-k weights renormalised");
    if (gating_func == 3)
        hp->moe_gating = 0;
    else if (gating_func == 1 || gating_func == 0)
        hp->moe_gating = norm ? 1 : 2;
    else
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: expert_gating_func %" PRIu32 " is not "
                       "supported (1 softmax, 3 softmax over the selected)", path, gating_func);
    return LM_OK;
}

/* Sliding window and mixture-of-experts keys (llama.cpp names). The per-layer pattern is
 * resolved later (assign_windows), once the layers exist. */
static int read_variant_hparams(lm_hparams *hp, const lm_arch *a, const lm_gguf *g, lm_err *err)
{
    char k[KEY_MAX];
    int rc;
    if ((rc = lm_gguf_get_u32(g, akey(k, a, "attention.sliding_window"), 0, &hp->n_swa, err)))
        return rc;
    int64_t ip = lm_gguf_find(g, akey(k, a, "attention.sliding_window_pattern"));
    hp->swa_period = ip < 0 ? a->swa_period : 0; /* the row's pattern when the file has none */
    if (ip >= 0 && lm_gguf_kv_type(g, (uint64_t)ip) != LM_GGUF_ARR
        && (rc = lm_gguf_get_u32(g, akey(k, a, "attention.sliding_window_pattern"), 0, &hp->swa_period,
                                 err)))
        return rc;
    return read_moe_hparams(hp, a, g, err);
}

/* Per-layer windows: the pattern as a bool array (true = sliding) or a period N (layer il
 * slides iff il % N < N - 1, llama.cpp's set_swa_pattern; N = 1 none, 0 or absent: all). */
static int assign_windows(lm_model *m, const lm_gguf *g, lm_err *err)
{
    char k[KEY_MAX];
    lm_hparams *hp = &m->hp;
    if (hp->n_swa == 0)
        return LM_OK;
    const char *key = akey(k, m->arch, "attention.sliding_window_pattern");
    int64_t ip = lm_gguf_find(g, key);
    const lm_gguf_arr *arr = NULL;
    if (ip >= 0 && lm_gguf_kv_type(g, (uint64_t)ip) == LM_GGUF_ARR) {
        int rc = lm_gguf_get_arr(g, key, LM_GGUF_BOOL, &arr, err);
        if (rc)
            return rc;
        if (arr->n != hp->n_layer)
            return LM_FAIL(err, LM_E_INPUT, "%s: %s has %" PRIu64 " entries for %" PRIu32
                           " layers", lm_gguf_path(g), key, arr->n, hp->n_layer);
    }
    for (uint32_t l = 0; l < hp->n_layer; ++l) {
        bool slides = arr != NULL ? ((const uint8_t *)arr->data)[l] != 0
                    : hp->swa_period == 0 ? true : l % hp->swa_period < hp->swa_period - 1;
        m->layers[l].window = slides ? hp->n_swa : 0;
    }
    return LM_OK;
}

/* rope.scaling.*: none, or YaRN where the row accepts it (lm_hparams: rope_yarn_factor). Every
 * other scaling, and YaRN keys with values other than the ones llama.cpp computes with
 * (attn_factor 1, yarn_beta_fast 32, yarn_beta_slow 1, yarn_ext_factor 1, yarn_attn_factor 1,
 * no yarn_log_multiplier), is refused rather than ignored. */
static int read_rope_scaling(lm_hparams *hp, const lm_arch *a, const lm_gguf *g, lm_err *err)
{
    char k[KEY_MAX];
    const char *path = lm_gguf_path(g), *scaling;
    int rc;
    if ((rc = lm_gguf_get_str(g, akey(k, a, "rope.scaling.type"), NULL, &scaling, err)))
        return rc;
    const bool yarn = scaling != NULL && strcmp(scaling, "yarn") == 0 && a->rope_yarn;
    if (scaling != NULL && strcmp(scaling, "none") != 0 && !yarn)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: rope scaling '%.32s' is not supported%s",
                       path, scaling, a->rope_yarn ? " (none or yarn)" : "");
    static const struct { const char *key; float want; } fixed[] = {
        {"rope.scaling.attn_factor", 1.0f},    {"rope.scaling.yarn_beta_fast", 32.0f},
        {"rope.scaling.yarn_beta_slow", 1.0f}, {"rope.scaling.yarn_ext_factor", 1.0f},
        {"rope.scaling.yarn_attn_factor", 1.0f}, {"rope.scaling.yarn_log_multiplier", 0.0f},
    };
    for (size_t i = 0; i < sizeof fixed / sizeof fixed[0]; ++i) {
        float v = fixed[i].want;
        if ((rc = lm_gguf_get_f32(g, akey(k, a, fixed[i].key), v, &v, err)))
            return rc;
        if (v != fixed[i].want)
            return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: %s = %g is not supported (%g)", path, k,
                           (double)v, (double)fixed[i].want);
    }
    hp->rope_yarn_factor = 0.0f;
    hp->n_ctx_orig_yarn = 0;
    if (!yarn)
        return LM_OK;
    float factor = 0.0f;
    if ((rc = lm_gguf_get_f32(g, akey(k, a, "rope.scaling.factor"), 0.0f, &factor, err))
        || (rc = lm_gguf_get_u32(g, akey(k, a, "rope.scaling.original_context_length"),
                                 hp->n_ctx_train, &hp->n_ctx_orig_yarn, err)))
        return rc;
    if (!(factor >= 1.0f) || factor > 1e6f || hp->n_ctx_orig_yarn == 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: YaRN needs rope.scaling.factor in [1, 1e6] (%g) "
                       "and original_context_length > 0 (%" PRIu32 ")", path, (double)factor,
                       hp->n_ctx_orig_yarn);
    hp->rope_yarn_factor = factor;
    return LM_OK;
}

static int read_hparams(lm_hparams *hp, const lm_arch **row, const lm_gguf *g, lm_err *err)
{
    char k[KEY_MAX];
    const char *path = lm_gguf_path(g);
    const char *arch;
    int rc = lm_gguf_get_str(g, "general.architecture", NULL, &arch, err);
    if (rc)
        return rc;
    if (arch == NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s: missing metadata key 'general.architecture'", path);
    const lm_arch *a = *row = lm_arch_find(arch);
    if (a == NULL)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: architecture '%.64s' is not supported "
                       "(expected %s)", path, arch, lm_arch_expected());
    snprintf(hp->arch, sizeof hp->arch, "%s", arch);
    if ((rc = need_u32(g, akey(k, a, "embedding_length"), &hp->n_embd, err))
        || (rc = need_u32(g, akey(k, a, "block_count"), &hp->n_layer, err))
        || (rc = need_u32(g, akey(k, a, "attention.head_count"), &hp->n_head, err))
        || (rc = need_u32(g, akey(k, a, "feed_forward_length"), &hp->n_ff, err))
        || (rc = need_u32(g, akey(k, a, "context_length"), &hp->n_ctx_train, err)))
        return rc;
    if (hp->n_embd == 0 || hp->n_layer == 0 || hp->n_head == 0 || hp->n_ff == 0
        || hp->n_ctx_train == 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: zero in embedding_length (%" PRIu32 "), block_count "
                       "(%" PRIu32 "), head_count (%" PRIu32 "), feed_forward_length (%" PRIu32
                       ") or context_length (%" PRIu32 ")", path, hp->n_embd, hp->n_layer,
                       hp->n_head, hp->n_ff, hp->n_ctx_train);
    if ((rc = lm_gguf_get_u32(g, akey(k, a, "attention.head_count_kv"), hp->n_head, &hp->n_head_kv,
                              err)))
        return rc;
    if (hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: head_count_kv %" PRIu32 " does not divide "
                       "head_count %" PRIu32, path, hp->n_head_kv, hp->n_head);
    if (hp->n_embd % hp->n_head != 0 && lm_gguf_find(g, akey(k, a, "attention.key_length")) < 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: embedding_length %" PRIu32 " is not a multiple of "
                       "head_count %" PRIu32 " and no attention.key_length is given", path,
                       hp->n_embd, hp->n_head);
    if ((rc = lm_gguf_get_u32(g, akey(k, a, "attention.key_length"), hp->n_embd / hp->n_head,
                              &hp->head_dim, err)))
        return rc;
    uint32_t vlen;
    if ((rc = lm_gguf_get_u32(g, akey(k, a, "attention.value_length"), hp->head_dim, &vlen, err)))
        return rc;
    if (hp->head_dim == 0 || vlen != hp->head_dim)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: key_length %" PRIu32 " and value_length %"
                       PRIu32 " must be equal and nonzero", path, hp->head_dim, vlen);
    if ((rc = lm_gguf_get_u32(g, akey(k, a, "rope.dimension_count"), hp->head_dim, &hp->n_rot, err)))
        return rc;
    if (hp->n_rot == 0 || hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: rope.dimension_count %" PRIu32 " must be even and "
                       "in 2..head_dim (%" PRIu32 ")", path, hp->n_rot, hp->head_dim);
    if ((rc = lm_gguf_get_f32(g, akey(k, a, "attention.layer_norm_rms_epsilon"), a->rms_eps, &hp->rms_eps,
                              err))
        || (rc = lm_gguf_get_f32(g, akey(k, a, "rope.freq_base"), a->rope_theta, &hp->rope_theta, err)))
        return rc;
    if (!(hp->rms_eps >= 0.0f) || !(hp->rms_eps < 1.0f))
        return LM_FAIL(err, LM_E_INPUT, "%s: layer_norm_rms_epsilon %g is not in [0, 1)", path,
                       (double)hp->rms_eps);
    if (!(hp->rope_theta > 0.0f) || hp->rope_theta > 1e30f)
        return LM_FAIL(err, LM_E_INPUT, "%s: rope.freq_base %g is not a positive finite number",
                       path, (double)hp->rope_theta);
    if (a->rot_full && hp->n_rot != hp->head_dim)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: rope.dimension_count %" PRIu32 " differs "
                       "from the head dimension %" PRIu32 ", which %s does not support", path,
                       hp->n_rot, hp->head_dim, a->name);
    if ((rc = read_rope_scaling(hp, a, g, err)))
        return rc;
    if ((rc = read_variant_hparams(hp, a, g, err)))
        return rc;
    hp->rope_type = a->rope_type;
    hp->norm_place = a->norm_place;
    hp->act = a->act;
    hp->qk_norm = a->qk_norm;
    hp->embd_scale = a->embd_scale_sqrt ? sqrtf((float)hp->n_embd) : 0.0f;
    if ((rc = lm_gguf_get_f32(g, akey(k, a, "rope.freq_base_swa"), a->rope_theta_swa,
                              &hp->rope_theta_swa, err)))
        return rc;
    if (!(hp->rope_theta_swa >= 0.0f) || hp->rope_theta_swa > 1e30f)
        return LM_FAIL(err, LM_E_INPUT, "%s: rope.freq_base_swa %g is not a finite number >= 0",
                       path, (double)hp->rope_theta_swa);
    return LM_OK;
}

/* Whether a layer tensor of the row's names must be in the file: NEED_NONE ones are left out
 * of the plan, so that a file holding one is refused (check_shapes) instead of being run
 * without it. */
typedef enum need { NEED_REQUIRED, NEED_OPTIONAL, NEED_NONE } need;

static need need_if(bool used, bool required)
{
    return !used ? NEED_NONE : required ? NEED_REQUIRED : NEED_OPTIONAL;
}

static int build_plan(plan *p, lm_model *m, const lm_gguf *g, lm_err *err)
{
    lm_hparams *hp = &m->hp;
    const lm_arch_tensors *tn = &m->arch->tensors;
    const unsigned req = m->arch->required;
    uint64_t E = hp->n_embd, V = hp->n_vocab, F = hp->n_ff;
    uint64_t Q = (uint64_t)hp->n_head * hp->head_dim, KV = (uint64_t)hp->n_head_kv * hp->head_dim;
    int rc;
    if ((rc = plan_add(p, tn->tok_embd, E, V, false, NULL, &m->tok_embd, err))
        || (rc = plan_add(p, tn->output_norm, E, 1, false, &m->output_norm, NULL, err)))
        return rc;
    if ((rc = plan_add(p, tn->rope_freqs, hp->n_rot / 2, 1, true, &m->rope_freqs, NULL, err)))
        return rc;
    hp->tied_output = !(req & LM_ARCH_REQ_OUTPUT) && lm_gguf_tensor_find(g, tn->output) == NULL;
    if (!hp->tied_output && (rc = plan_add(p, tn->output, E, V, false, NULL, &m->output, err)))
        return rc;
    const bool moe = hp->n_expert > 0, sandwich = hp->norm_place == LM_NORM_SANDWICH;
    const bool sinks_req = req & LM_ARCH_REQ_SINKS, bo_req = req & LM_ARCH_REQ_O_BIAS;
    char name[64];
    for (uint32_t l = 0; l < hp->n_layer; ++l) {
        lm_layer *L = &m->layers[l];
        const struct {
            const char *suffix;
            uint64_t ne0, ne1;
            need nd;
            const float **dst;
            lm_wt *wdst;
        } t[] = {
            {tn->attn_norm, E, 1, NEED_REQUIRED, &L->attn_norm, NULL},
            {tn->attn_q, E, Q, NEED_REQUIRED, NULL, &L->wq},
            {tn->attn_k, E, KV, NEED_REQUIRED, NULL, &L->wk},
            {tn->attn_v, E, KV, NEED_REQUIRED, NULL, &L->wv},
            {tn->attn_output, Q, E, NEED_REQUIRED, NULL, &L->wo},
            {tn->attn_q_bias, Q, 1, NEED_OPTIONAL, &L->bq, NULL},
            {tn->attn_k_bias, KV, 1, NEED_OPTIONAL, &L->bk, NULL},
            {tn->attn_v_bias, KV, 1, NEED_OPTIONAL, &L->bv, NULL},
            {tn->attn_output_bias, E, 1, need_if(true, bo_req), &L->bo, NULL},
            {tn->ffn_norm, E, 1, NEED_REQUIRED, &L->ffn_norm, NULL},
            /* a mixture-of-experts layer has no dense FFN */
            {tn->ffn_gate, E, F, need_if(!moe, true), NULL, &L->w_gate},
            {tn->ffn_up, E, F, need_if(!moe, true), NULL, &L->w_up},
            {tn->ffn_down, F, E, need_if(!moe, true), NULL, &L->w_down},
            {tn->attn_sinks, hp->n_head, 1, need_if(true, sinks_req), &L->sinks, NULL},
            {tn->attn_q_norm, hp->head_dim, 1, need_if(true, hp->qk_norm), &L->attn_q_norm, NULL},
            {tn->attn_k_norm, hp->head_dim, 1, need_if(true, hp->qk_norm), &L->attn_k_norm, NULL},
            {tn->attn_post_norm, E, 1, need_if(sandwich, true), &L->attn_post_norm, NULL},
            {tn->ffn_post_norm, E, 1, need_if(sandwich, true), &L->ffn_post_norm, NULL},
        };
        for (size_t i = 0; i < sizeof t / sizeof t[0]; ++i) {
            if (t[i].nd == NEED_NONE)
                continue;
            snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", l, t[i].suffix);
            if ((rc = plan_add(p, name, t[i].ne0, t[i].ne1, t[i].nd == NEED_OPTIONAL, t[i].dst,
                               t[i].wdst, err)))
                return rc;
        }
        if (hp->n_expert > 0) { /* MoE FFN: router and expert stacks replace the dense FFN */
            const uint64_t X = hp->n_expert, FE = hp->n_ff_exp;
            snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", l, tn->ffn_gate_inp);
            if ((rc = plan_add(p, name, E, X, false, NULL, &L->ffn_gate_inp, err)))
                return rc;
            snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", l, tn->ffn_gate_exps);
            if ((rc = plan_add3(p, name, E, FE, X, &L->ffn_gate_exps, err)))
                return rc;
            snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", l, tn->ffn_up_exps);
            if ((rc = plan_add3(p, name, E, FE, X, &L->ffn_up_exps, err)))
                return rc;
            snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", l, tn->ffn_down_exps);
            if ((rc = plan_add3(p, name, FE, E, X, &L->ffn_down_exps, err)))
                return rc;
            /* biases (LM_ARCH_REQ_MOE_BIAS, else optional): router [n_expert], gate and up
             * [n_expert][n_ff_exp], down [n_expert][n_embd] (ggml ne {n_ff_exp, n_expert},
             * {n_embd, n_expert}) */
            const struct { const char *s; uint64_t ne0, ne1; const float **dst; } b[] = {
                {tn->ffn_gate_inp_b, X, 1, &L->ffn_gate_inp_b},
                {tn->ffn_gate_exps_b, FE, X, &L->ffn_gate_exps_b},
                {tn->ffn_up_exps_b, FE, X, &L->ffn_up_exps_b},
                {tn->ffn_down_exps_b, E, X, &L->ffn_down_exps_b},
            };
            for (size_t i = 0; i < sizeof b / sizeof b[0]; ++i) {
                snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", l, b[i].s);
                if ((rc = plan_add(p, name, b[i].ne0, b[i].ne1, !(req & LM_ARCH_REQ_MOE_BIAS),
                                   b[i].dst, NULL, err)))
                    return rc;
            }
        }
    }
    return LM_OK;
}

/* Every tensor of the plan present (unless optional) with exactly the expected shape, and
 * every tensor of the file in the plan: a tensor the forward pass would not read is refused,
 * as llama.cpp's loader refuses a file with tensors it did not create. */
static int check_shapes(const plan *p, const lm_gguf *g, const char *arch, uint64_t *total,
                        uint64_t *vectors, lm_err *err)
{
    const char *path = lm_gguf_path(g);
    *total = *vectors = 0;
    for (size_t i = 0; i < p->n; ++i) {
        const want *w = &p->w[i];
        const lm_gguf_tensor *t = lm_gguf_tensor_find(g, w->name);
        if (t == NULL) {
            if (w->optional)
                continue;
            return LM_FAIL(err, LM_E_INPUT, "%s: missing tensor '%s'", path, w->name);
        }
        bool ok = t->ne[0] == w->ne0 && t->ne[1] == w->ne1 && t->ne[2] == w->ne2 && t->ne[3] == 1
               && t->n_dims == (w->ne2 > 1 ? 3u : w->ne1 == 1 ? 1u : 2u);
        if (!ok)
            return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s' has shape [%" PRIu64 ", %" PRIu64
                           ", %" PRIu64 ", %" PRIu64 "] (%" PRIu32 " dims), expected [%" PRIu64
                           ", %" PRIu64 "]", path, w->name, t->ne[0], t->ne[1], t->ne[2],
                           t->ne[3], t->n_dims, w->ne0, w->ne1);
        if (lm_add_u64(total, *total, t->n_elem)
            || (w->dst != NULL && lm_add_u64(vectors, *vectors, t->n_elem)))
            return LM_FAIL(err, LM_E_INPUT, "%s: weights too large", path);
    }
    for (uint64_t i = 0; i < lm_gguf_n_tensors(g); ++i) {
        const char *name = lm_gguf_tensor_at(g, i)->name;
        size_t j = 0;
        while (j < p->n && strcmp(p->w[j].name, name) != 0)
            ++j;
        if (j == p->n)
            return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%.64s' is not part of a %s model",
                           path, name, arch);
    }
    return LM_OK;
}

uint64_t lm_mem_available(void)
{
    FILE *f = fopen("/proc/meminfo", "r");
    if (f != NULL) {
        char line[128];
        unsigned long long kb;
        while (fgets(line, sizeof line, f) != NULL)
            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                fclose(f);
                return kb > UINT64_MAX / 1024 ? UINT64_MAX : (uint64_t)kb * 1024;
            }
        fclose(f);
    }
    long pages = sysconf(_SC_AVPHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || size <= 0)
        return UINT64_MAX;
    return (uint64_t)pages * (uint64_t)size;
}

int lm_mem_check(const char *what, uint64_t needed, uint64_t available, lm_err *err)
{
    if (needed <= available)
        return LM_OK;
    return LM_FAIL(err, LM_E_NOMEM, "%s: needs %" PRIu64 " bytes (%.1f GiB) of memory, %" PRIu64
                   " bytes (%.1f GiB) available", what, needed, (double)needed / 1073741824.0,
                   available, (double)available / 1073741824.0);
}

/* One line listing every part of the file kvdrift cannot load: tensors by type (with counts)
 * and the architecture. */
static int check_supported(const lm_gguf *g, lm_err *err)
{
    uint32_t count[256] = {0};
    uint64_t n = lm_gguf_n_tensors(g);
    bool any = false;
    for (uint64_t i = 0; i < n; ++i) {
        lm_tensor_type t = lm_gguf_tensor_at(g, i)->type;
        if (!lm_tensor_type_loadable(t)) {
            ++count[(uint32_t)t & 255u]; /* the reader only accepts ggml type numbers < 256 */
            any = true;
        }
    }
    const char *arch = NULL;
    int rc = lm_gguf_get_str(g, "general.architecture", NULL, &arch, err);
    if (rc)
        return rc;
    bool arch_bad = arch != NULL && lm_arch_find(arch) == NULL;
    if (!any && !arch_bad)
        return LM_OK;
    char msg[768];
    size_t len = 0;
    for (uint32_t t = 0; t < 256 && len < sizeof msg; ++t)
        if (count[t])
            len += (size_t)snprintf(msg + len, sizeof msg - len, "%s%" PRIu32 " tensor%s %s",
                                    len ? ", " : "", count[t], count[t] == 1 ? "" : "s",
                                    lm_tensor_type_name((lm_tensor_type)t));
    if (arch_bad && len < sizeof msg)
        snprintf(msg + len, sizeof msg - len, "%sarchitecture '%.64s' (expected %s)",
                 len ? ", " : "", arch, lm_arch_expected());
    return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: unsupported: %s", lm_gguf_path(g), msg);
}

#define HUGE_PAGE ((size_t)2 << 20)

/* The float32 arena of `bytes` bytes, or NULL. From one huge page's size on, it is 2 MiB
 * aligned and transparent huge pages are asked for (madvise, before the first touch) where the
 * kernel offers them: a decode step streams every weight once, and with 4 KiB pages that
 * stream needs a new TLB entry every 64 cache lines (bench_engine measures the read rate with
 * both page sizes). Values are untouched either way. */
static float *arena_alloc(size_t bytes)
{
    if (bytes < HUGE_PAGE)
        return malloc(bytes ? bytes : 1);
    const size_t rounded = (bytes + HUGE_PAGE - 1) / HUGE_PAGE * HUGE_PAGE;
    float *a = aligned_alloc(HUGE_PAGE, rounded);
#ifdef MADV_HUGEPAGE
    if (a != NULL)
        (void)madvise(a, rounded, MADV_HUGEPAGE); /* advice: refused, 4 KiB pages remain */
#endif
    return a;
}

/* The first damaged block of t (lm_blocks_first_bad) found by decoding it a piece at a time
 * into buf [DECODE_FLOATS]: nothing of it is kept. */
#define DECODE_FLOATS ((size_t)1 << 16)
static int check_blocks(const lm_gguf *g, const lm_gguf_tensor *t, float *buf, lm_err *err)
{
    const uint64_t be = lm_tensor_type_block_elems(t->type), bb = lm_tensor_type_block_bytes(t->type);
    const uint64_t nb = t->n_elem / be, step = DECODE_FLOATS / be;
    const lm_to_f32_fn fn = lm_type_to_f32((uint32_t)t->type);
    if (be == 1) /* F32, F16, BF16: their values are the weights */
        return LM_OK;
    for (uint64_t b0 = 0; b0 < nb; b0 += step) {
        const uint64_t n = nb - b0 < step ? nb - b0 : step;
        const uint8_t *src = (const uint8_t *)t->data + b0 * bb;
        fn(src, buf, n);
        const uint64_t bad = lm_blocks_first_bad(t->type, src, buf, n);
        if (bad < n)
            return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s' (%s) block %" PRIu64 " of %" PRIu64
                           " has a NaN or infinite scale (or decodes to one): the file is damaged",
                           lm_gguf_path(g), t->name, lm_tensor_type_name(t->type), b0 + bad, nb);
    }
    return LM_OK;
}

/* w as the file holds t: F32 read in place when the mapping aligns it for floats, else the
 * blocks (whole ones per row: lm_gguf_tensor_to_f32's check). */
static int place_in_file(lm_wt *w, const lm_gguf_tensor *t, lm_err *err)
{
    const uint64_t be = lm_tensor_type_block_elems(t->type), bb = lm_tensor_type_block_bytes(t->type);
    if (be == 0 || t->ne[0] % be != 0 || t->n_elem / be * bb != t->nbytes)
        return LM_FAIL(err, LM_E_INPUT, "tensor '%s': %" PRIu64 " elements and %" PRIu64
                       " bytes do not form whole %s blocks", t->name, t->n_elem, t->nbytes,
                       lm_tensor_type_name(t->type));
    *w = (lm_wt){.type = (uint32_t)t->type};
    if (t->type == LM_TYPE_F32 && (uintptr_t)t->data % _Alignof(float) == 0) {
        w->f = t->data;
        return LM_OK;
    }
    w->q = t->data;
    w->row_bytes = (size_t)(t->ne[0] / be * bb);
    return LM_OK;
}

static int load_weights(lm_model *m, const lm_gguf *g, lm_weights_mode mode, lm_err *err)
{
    plan p = {0};
    uint64_t total, vectors;
    float *buf = NULL;
    int rc = build_plan(&p, m, g, err);
    if (rc == LM_OK)
        rc = check_shapes(&p, g, m->arch->name, &total, &vectors, err);
    if (rc)
        goto done;
    const uint64_t arena_n = mode == LM_WEIGHTS_ARENA ? total : vectors;
    if (arena_n > SIZE_MAX / sizeof(float) / 2) {
        rc = LM_FAIL(err, LM_E_NOMEM, "%s: weights too large", lm_gguf_path(g));
        goto done;
    }
    /* The float32 arena must fit in memory: refuse now rather than be killed later. */
    if ((rc = lm_mem_check(lm_gguf_path(g), arena_n * sizeof(float), lm_mem_available(), err)))
        goto done;
    m->weights = calloc(p.n ? p.n : 1, sizeof *m->weights);
    float *arena = m->weights ? arena_alloc((size_t)arena_n * sizeof(float)) : NULL;
    if (arena == NULL || (mode == LM_WEIGHTS_FILE && (buf = malloc(DECODE_FLOATS * sizeof *buf))
                                                        == NULL)) {
        free(arena);
        rc = LM_FAIL(err, LM_E_NOMEM, "%s: out of memory for %" PRIu64 " float32 weights",
                     lm_gguf_path(g), arena_n);
        goto done;
    }
    m->weights_arena = arena;
    m->weights_n = (size_t)arena_n;
    m->weights_mode = mode;
    float *dst = arena;
    for (size_t i = 0; i < p.n; ++i) {
        const lm_gguf_tensor *t = lm_gguf_tensor_find(g, p.w[i].name);
        if (t == NULL)
            continue; /* optional and absent: the pointer stays NULL */
        lm_weight *wt = &m->weights[m->n_weights];
        if (p.w[i].dst == NULL && mode == LM_WEIGHTS_FILE) { /* a matrix, left in the file */
            if ((rc = place_in_file(&wt->w, t, err)) || (rc = check_blocks(g, t, buf, err)))
                goto done;
        } else {
            if ((rc = lm_gguf_tensor_to_f32(dst, t, err)))
                goto done;
            const uint64_t nb = t->n_elem / lm_tensor_type_block_elems(t->type);
            const uint64_t bad = lm_blocks_first_bad(t->type, t->data, dst, nb);
            if (bad < nb) {
                rc = LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s' (%s) block %" PRIu64 " of %"
                             PRIu64 " has a NaN or infinite scale (or decodes to one): the file "
                             "is damaged", lm_gguf_path(g), t->name,
                             lm_tensor_type_name(t->type), bad, nb);
                goto done;
            }
            wt->w = (lm_wt){.f = dst, .type = (uint32_t)t->type};
            dst += t->n_elem;
        }
        if (p.w[i].dst != NULL)
            *p.w[i].dst = wt->w.f;
        else
            *p.w[i].wdst = wt->w;
        snprintf(wt->name, sizeof wt->name, "%s", p.w[i].name);
        wt->n_elem = t->n_elem;
        wt->cols = (uint32_t)t->ne[0];
        wt->type = (uint32_t)t->type;
        ++m->n_weights;
    }
    if (m->hp.tied_output)
        m->output = m->tok_embd;
done:
    free(buf);
    free(p.w);
    return rc;
}

static int load_vocab(lm_model *m, const lm_gguf *g, lm_err *err)
{
    if (lm_gguf_find(g, "tokenizer.ggml.model") < 0)
        return LM_OK; /* a weights-only file: vocab stays NULL */
    int rc = lm_vocab_load(&m->vocab, g, err);
    if (rc)
        return rc;
    /* Ids the tokenizer produces index the embedding: they must all be inside it. */
    if (lm_vocab_n_tokens(m->vocab) > m->hp.n_vocab)
        return LM_FAIL(err, LM_E_INPUT, "%s: the tokenizer has %" PRIu32 " tokens but "
                       "token_embd only %" PRIu32 " rows", lm_gguf_path(g),
                       lm_vocab_n_tokens(m->vocab), m->hp.n_vocab);
    return LM_OK;
}

/* The header phase of a load: what the file supports, the hyperparameters, the vocabulary
 * size and the layer array (no tensor read yet). */
static int load_header(lm_model *m, const lm_gguf *g, lm_err *err)
{
    const char *path = lm_gguf_path(g);
    int rc;
    if ((rc = check_supported(g, err)) || (rc = read_hparams(&m->hp, &m->arch, g, err)))
        return rc;
    const char *emb_name = m->arch->tensors.tok_embd;
    const lm_gguf_tensor *emb = lm_gguf_tensor_find(g, emb_name);
    if (emb == NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s: missing tensor '%s'", path, emb_name);
    if (emb->ne[1] == 0 || emb->ne[1] > INT32_MAX)
        return LM_FAIL(err, LM_E_INPUT, "%s: %s has %" PRIu64 " rows", path, emb_name,
                       emb->ne[1]);
    m->hp.n_vocab = (uint32_t)emb->ne[1];
    /* Each layer needs at least 9 tensors: bounds block_count before allocating for it. */
    if (m->hp.n_layer > lm_gguf_n_tensors(g) / 9)
        return LM_FAIL(err, LM_E_INPUT, "%s: block_count %" PRIu32 " but the file has only %"
                       PRIu64 " tensors", path, m->hp.n_layer, lm_gguf_n_tensors(g));
    m->layers = calloc(m->hp.n_layer, sizeof *m->layers);
    if (m->layers == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    return LM_OK;
}

const char *lm_weights_mode_name(lm_weights_mode mode)
{
    return mode == LM_WEIGHTS_ARENA ? "arena" : "file";
}

int lm_weights_mode_env(lm_weights_mode *out, lm_err *err)
{
    const char *e = getenv("KVDRIFT_WEIGHTS");
    *out = LM_WEIGHTS_FILE;
    if (e == NULL || *e == '\0' || strcmp(e, "file") == 0)
        return LM_OK;
    if (strcmp(e, "arena") == 0) {
        *out = LM_WEIGHTS_ARENA;
        return LM_OK;
    }
    return LM_FAIL(err, LM_E_INPUT, "KVDRIFT_WEIGHTS=%.64s: expected file or arena", e);
}

int lm_model_load(lm_model **out, const char *path, lm_err *err)
{
    lm_weights_mode mode;
    *out = NULL;
    int rc = lm_weights_mode_env(&mode, err);
    return rc != LM_OK ? rc : lm_model_load_mode(out, path, mode, err);
}

int lm_model_load_mode(lm_model **out, const char *path, lm_weights_mode mode, lm_err *err)
{
    *out = NULL;
    lm_gguf *g = NULL;
    lm_model *m = calloc(1, sizeof *m);
    if (m == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    int rc = lm_gguf_open(&g, path, err);
    if (rc)
        goto fail;
    if ((m->path = strdup(path)) == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
        goto fail;
    }
    if ((rc = load_header(m, g, err)) || (rc = load_weights(m, g, mode, err))
        || (rc = load_vocab(m, g, err)) || (rc = assign_windows(m, g, err)))
        goto fail;
    for (uint32_t l = 0; l < m->hp.n_layer; ++l)
        m->hp.has_sinks = m->hp.has_sinks || m->layers[l].sinks != NULL;
    /* Content hash of the exact file bytes: the cache and golden key of this model. */
    XXH128_hash_t h = XXH3_128bits(lm_gguf_bytes(g), (size_t)lm_gguf_size(g));
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, h);
    memcpy(m->content_hash, canon.digest, sizeof m->content_hash);
    m->file_size = lm_gguf_size(g);
    if (mode == LM_WEIGHTS_FILE) /* the weight matrices live in it */
        m->file_map = lm_gguf_keep_map(g, &m->file_map_bytes);
    lm_gguf_close(g);
    *out = m;
    return LM_OK;
fail:
    lm_gguf_close(g);
    lm_model_free(m);
    return rc;
}

/* path now opens and has content_hash (XXH3-128, canonical bytes) and, unless size is 0, size
 * bytes. */
static int file_unchanged(const char *path, const uint8_t content_hash[16], uint64_t size,
                          lm_err *err)
{
    lm_gguf *g = NULL;
    int rc = lm_gguf_open(&g, path, err);
    if (rc != LM_OK) { /* gone, unreadable or no longer a valid file: changed all the same */
        char why[sizeof err->msg];
        snprintf(why, sizeof why, "%s", err->msg);
        lm_err_clear(err); /* the first error set stays: this one replaces it */
        return LM_FAIL(err, LM_E_INPUT, "%s: changed on disk since it was loaded (%s)", path,
                       why);
    }
    uint8_t hash[16];
    XXH128_canonical_t canon;
    const uint64_t now = lm_gguf_size(g);
    if (size == 0 || now == size) {
        XXH128_canonicalFromHash(&canon, XXH3_128bits(lm_gguf_bytes(g), (size_t)now));
        memcpy(hash, canon.digest, sizeof hash);
    }
    lm_gguf_close(g);
    if (size != 0 && now != size)
        return LM_FAIL(err, LM_E_INPUT, "%s: changed on disk since it was loaded (%" PRIu64
                       " bytes then, %" PRIu64 " now)", path, size, now);
    if (memcmp(hash, content_hash, sizeof hash) != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: changed on disk since it was loaded (%" PRIu64
                       " bytes, another content hash)", path, now);
    return LM_OK;
}

int lm_model_file_unchanged(const lm_model *m, lm_err *err)
{
    if (m->path == NULL || m->file_size == 0 || m->n_weights == 0)
        return LM_OK; /* built or changed in memory: no file to compare with */
    return file_unchanged(m->path, m->content_hash, m->file_size, err);
}

int lm_model_mem_plan(lm_mem_plan *out, const char *path, uint32_t n_ctx, lm_err *err)
{
    memset(out, 0, sizeof *out);
    lm_gguf *g = NULL;
    plan p = {0};
    uint64_t total = 0, vectors = 0;
    lm_weights_mode mode;
    int rc = lm_weights_mode_env(&mode, err);
    if (rc != LM_OK)
        return rc;
    lm_model *m = calloc(1, sizeof *m);
    if (m == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    rc = lm_gguf_open(&g, path, err);
    if (rc == LM_OK && (rc = load_header(m, g, err)) == LM_OK
        && (rc = build_plan(&p, m, g, err)) == LM_OK
        && (rc = check_shapes(&p, g, m->arch->name, &total, &vectors, err)) == LM_OK) {
        const uint64_t arena = mode == LM_WEIGHTS_ARENA ? total : vectors;
        out->hp = m->hp;
        out->file = lm_gguf_size(g);
        out->weights = arena > UINT64_MAX / sizeof(float) ? UINT64_MAX : arena * sizeof(float);
        lm_ctx_predict_bytes(&out->kv, &out->scratch, &m->hp,
                             n_ctx ? n_ctx : m->hp.n_ctx_train);
        out->f32 = total > UINT64_MAX / sizeof(float) ? UINT64_MAX : total * sizeof(float);
        out->tiles = mode == LM_WEIGHTS_FILE ? lm_ctx_predict_wtile_bytes(&m->hp) : 0;
        out->scratch += out->tiles;
    }
    free(p.w);
    lm_gguf_close(g);
    lm_model_free(m);
    return rc;
}

void lm_model_free(lm_model *m)
{
    if (m == NULL)
        return;
    lm_model_ext_release(m);
    lm_vocab_free(m->vocab);
    free(m->weights_arena);
    if (m->file_map != NULL)
        munmap((void *)(uintptr_t)m->file_map, (size_t)m->file_map_bytes);
    free(m->weights);
    free(m->layers);
    free(m->path);
    free(m);
}

lm_model_ext *lm_model_ext_get(const lm_model *m)
{
    return __atomic_load_n(&m->ext, __ATOMIC_ACQUIRE);
}

lm_model_ext *lm_model_ext_attach(const lm_model *m, lm_model_ext *x)
{
    if (m->borrowed)
        return NULL;
    /* the slot is the one member that changes after load: models are never defined const */
    lm_model_ext **slot = &((lm_model *)m)->ext, *cur = NULL;
    return __atomic_compare_exchange_n(slot, &cur, x, false, __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE)
               ? x
               : cur;
}

void lm_model_ext_release(lm_model *m)
{
    lm_model_ext *x = __atomic_exchange_n(&m->ext, NULL, __ATOMIC_ACQ_REL);
    if (x != NULL)
        x->release(x);
}

void lm_model_hash_hex(const lm_model *m, char out[33])
{
    lm_hex_encode(out, m->content_hash, sizeof m->content_hash);
}

void lm_layer_product_weights(const lm_layer *L, const lm_wt *w[LM_LAYER_PRODUCTS])
{
    const lm_wt *all[LM_LAYER_PRODUCTS] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->w_gate, &L->w_up,
                                           &L->w_down, &L->ffn_gate_inp, &L->ffn_gate_exps,
                                           &L->ffn_up_exps, &L->ffn_down_exps};
    memcpy(w, all, sizeof all);
}
