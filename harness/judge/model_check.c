/* model_check.c — the engine's and the reference's readings of one model file compared
 * (model_check.h). */
#include "judge/model_check.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Neither model was built or changed in memory: both were read from one file. */
static bool both_from_file(const lm_model *m, const ref_model *r)
{
    return m->path != NULL && m->weights != NULL && m->n_weights > 0 && r->path != NULL &&
           r->weights != NULL && r->n_weights > 0;
}

static const ref_weight *ref_weight_named(const ref_model *r, const char *name)
{
    for (uint32_t i = 0; i < r->n_weights; ++i)
        if (strcmp(r->weights[i].name, name) == 0)
            return &r->weights[i];
    return NULL;
}

/* Bitwise: NaN payloads and signed zeros must agree too. The engine's values are decoded
 * (lm_wt_rows) a few rows at a time into buf [CHECK_FLOATS], compared piece by piece; the
 * element is looked for only in a piece that differs. */
#define CHECK_FLOATS ((size_t)1 << 16)
static int same_values(const char *path, const lm_weight *w, const ref_weight *rw, float *buf,
                       lm_err *err)
{
    const uint64_t rows = w->n_elem / w->cols;
    const uint64_t step = CHECK_FLOATS / w->cols > 0 ? CHECK_FLOATS / w->cols : 1;
    for (uint64_t r0 = 0; r0 < rows; r0 += step) {
        const uint64_t n = rows - r0 < step ? rows - r0 : step;
        const float *ref = rw->data + r0 * w->cols;
        lm_wt_rows(buf, &w->w, r0, n, w->cols);
        if (memcmp(buf, ref, (size_t)(n * w->cols) * sizeof *buf) == 0)
            continue;
        for (uint64_t j = 0; j < n * w->cols; ++j)
            if (memcmp(&buf[j], &ref[j], sizeof(float)) != 0)
                return LM_FAIL(err, LM_E_DISAGREE, "%s: tensor '%s' (%s) element %" PRIu64
                               ": the engine loaded %.9g, the reference's dequantization gives "
                               "%.9g", path, w->name, lm_tensor_type_name((lm_tensor_type)w->type),
                               r0 * w->cols + j, (double)buf[j], (double)ref[j]);
    }
    return LM_OK;
}

/* Every engine tensor's values against the reference's, then the reference's tensors the
 * engine did not load. */
static int check_each(const lm_model *m, const ref_model *r, float *buf, lm_err *err)
{
    for (uint32_t i = 0; i < m->n_weights; ++i) {
        const lm_weight *w = &m->weights[i];
        const ref_weight *rw = ref_weight_named(r, w->name);
        if (rw == NULL || rw->n_elem != w->n_elem)
            return LM_FAIL(err, LM_E_DISAGREE, "%s: the engine loaded tensor '%s' (%" PRIu64
                           " elements), the reference reads %s", m->path, w->name, w->n_elem,
                           rw == NULL ? "no such tensor" : "another element count");
        if (rw->type != w->type)
            return LM_FAIL(err, LM_E_DISAGREE, "%s: tensor '%s': the engine read type %s, the "
                           "reference %s", m->path, w->name,
                           lm_tensor_type_name((lm_tensor_type)w->type),
                           lm_tensor_type_name((lm_tensor_type)rw->type));
        int rc = same_values(m->path, w, rw, buf, err);
        if (rc != LM_OK)
            return rc;
    }
    if (r->n_weights != m->n_weights) /* every engine tensor is one of the reference's */
        for (uint32_t i = 0; i < r->n_weights; ++i) {
            uint32_t j = 0;
            while (j < m->n_weights && strcmp(m->weights[j].name, r->weights[i].name) != 0)
                ++j;
            if (j == m->n_weights)
                return LM_FAIL(err, LM_E_DISAGREE, "%s: the reference reads tensor '%s', the "
                               "engine did not load it", m->path, r->weights[i].name);
        }
    return LM_OK;
}

/* A layer's weight matrix: its GGUF name after "blk.N." and where each reading keeps it. */
typedef struct matrix_role {
    const char *name;
    size_t engine;    /* offsetof(lm_layer, ...): an lm_wt */
    size_t reference; /* offsetof(ref_layer, ...): a const float * */
} matrix_role;

#define ROLE(gguf, field) {gguf, offsetof(lm_layer, field), offsetof(ref_layer, field)}
static const matrix_role matrix_roles[] = {
    ROLE("attn_q.weight", wq),          ROLE("attn_k.weight", wk),
    ROLE("attn_v.weight", wv),          ROLE("attn_output.weight", wo),
    ROLE("ffn_gate.weight", w_gate),    ROLE("ffn_up.weight", w_up),
    ROLE("ffn_down.weight", w_down),    ROLE("ffn_gate_inp.weight", ffn_gate_inp),
    ROLE("ffn_gate_exps.weight", ffn_gate_exps), ROLE("ffn_up_exps.weight", ffn_up_exps),
    ROLE("ffn_down_exps.weight", ffn_down_exps),
};
#undef ROLE

static const lm_weight *engine_weight_named(const lm_model *m, const char *name)
{
    for (uint32_t i = 0; i < m->n_weights; ++i)
        if (strcmp(m->weights[i].name, name) == 0)
            return &m->weights[i];
    return NULL;
}

/* Each layer's matrices are wired to the tensor of their name in both readings: equal values
 * under equal names prove nothing if a product reads another tensor (wk where wv belongs). */
static int same_roles(const lm_model *m, const ref_model *r, lm_err *err)
{
    for (uint32_t l = 0; l < m->hp.n_layer; ++l)
        for (size_t k = 0; k < sizeof matrix_roles / sizeof matrix_roles[0]; ++k) {
            const matrix_role *role = &matrix_roles[k];
            char name[64];
            snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", l, role->name);
            const lm_weight *w = engine_weight_named(m, name);
            const ref_weight *rw = ref_weight_named(r, name);
            const lm_wt *e = (const lm_wt *)((const char *)&m->layers[l] + role->engine);
            const float *const *f =
                (const float *const *)((const char *)&r->layers[l] + role->reference);
            const bool engine_ok = w != NULL ? e->f == w->w.f && e->q == w->w.q
                                             : !lm_wt_present(e);
            const bool ref_ok = rw != NULL ? *f == rw->data : *f == NULL;
            if (!engine_ok || !ref_ok)
                return LM_FAIL(err, LM_E_DISAGREE, "%s: layer %" PRIu32 "'s %s product reads "
                               "another tensor than '%s' in the %s", m->path, l, role->name, name,
                               !engine_ok ? "engine" : "reference");
        }
    return LM_OK;
}

int hx_model_check_weights(const lm_model *m, const ref_model *r, lm_err *err)
{
    if (!both_from_file(m, r))
        return LM_OK;
    size_t widest = CHECK_FLOATS;
    for (uint32_t i = 0; i < m->n_weights; ++i)
        widest = m->weights[i].cols > widest ? m->weights[i].cols : widest;
    float *buf = malloc(widest * sizeof *buf);
    if (buf == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", m->path);
    int rc = check_each(m, r, buf, err);
    free(buf);
    return rc != LM_OK ? rc : same_roles(m, r, err);
}

#define SAME_U(what, mine, theirs)                                                             \
    do {                                                                                       \
        if ((uint64_t)(mine) != (uint64_t)(theirs))                                            \
            return LM_FAIL(err, LM_E_DISAGREE, "%s: reference reads %s = %" PRIu64 ", the "     \
                           "engine loaded %" PRIu64, m->path, what, (uint64_t)(mine),          \
                           (uint64_t)(theirs));                                                \
    } while (0)
#define SAME_F(what, mine, theirs)                                                             \
    do {                                                                                       \
        if ((mine) != (theirs))                                                                \
            return LM_FAIL(err, LM_E_DISAGREE, "%s: reference reads %s = %.9g, the engine "    \
                           "loaded %.9g", m->path, what, (double)(mine), (double)(theirs));    \
    } while (0)

/* The two readings' codes are compared as numbers below: they must mean the same. */
_Static_assert((int)REF_ROPE_NORM == (int)LM_ROPE_NORM && (int)REF_ROPE_NEOX == (int)LM_ROPE_NEOX,
               "RoPE pairing codes");
_Static_assert((int)REF_NORM_PRE == (int)LM_NORM_PRE &&
               (int)REF_NORM_SANDWICH == (int)LM_NORM_SANDWICH, "norm placement codes");
_Static_assert((int)REF_ACT_SWIGLU == (int)LM_ACT_SWIGLU &&
               (int)REF_ACT_GEGLU_TANH == (int)LM_ACT_GEGLU_TANH &&
               (int)REF_ACT_SWIGLU_OAI == (int)LM_ACT_SWIGLU_OAI, "FFN activation codes");

/* Shapes, norms, RoPE and the embedding scale. */
static int same_shape(const lm_model *m, const ref_hparams *rh, lm_err *err)
{
    const lm_hparams *hp = &m->hp;
    if (strcmp(rh->arch, hp->arch) != 0)
        return LM_FAIL(err, LM_E_DISAGREE, "%s: reference reads architecture '%s', the engine "
                       "loaded '%s'", m->path, rh->arch, hp->arch);
    SAME_U("the vocabulary size", rh->n_vocab, hp->n_vocab);
    SAME_U("embedding_length", rh->n_embd, hp->n_embd);
    SAME_U("block_count", rh->n_layer, hp->n_layer);
    SAME_U("attention.head_count", rh->n_head, hp->n_head);
    SAME_U("attention.head_count_kv", rh->n_head_kv, hp->n_head_kv);
    SAME_U("head dimension", rh->head_dim, hp->head_dim);
    SAME_U("feed_forward_length", rh->n_ff, hp->n_ff);
    SAME_U("context_length", rh->n_ctx_train, hp->n_ctx_train);
    SAME_U("rope.dimension_count", rh->n_rot, hp->n_rot);
    SAME_U("RoPE pairing (0 adjacent, 2 halves)", rh->rope_type, hp->rope_type);
    SAME_U("norm placement (0 pre, 1 sandwich)", rh->norm_place, hp->norm_place);
    SAME_U("FFN activation (0 SwiGLU, 1 GeGLU, 2 swiglu_oai)", rh->act, hp->act);
    SAME_U("per-head Q/K norms", rh->qk_norm, hp->qk_norm);
    SAME_U("tied output", rh->tied_output, hp->tied_output);
    SAME_F("attention.layer_norm_rms_epsilon", rh->rms_eps, hp->rms_eps);
    SAME_U("embedding scale by sqrt(n_embd)", rh->embd_scale != 0.0f, hp->embd_scale != 0.0f);
    SAME_F("embedding scale", rh->embd_scale, hp->embd_scale);
    return LM_OK;
}

/* RoPE bases and YaRN; experts. */
static int same_rope_moe(const lm_model *m, const ref_hparams *rh, lm_err *err)
{
    const lm_hparams *hp = &m->hp;
    SAME_F("rope.freq_base", rh->rope_theta, hp->rope_theta);
    /* either keeps 0 or the same theta when sliding layers turn like the others */
    const float swa_ref = rh->rope_theta_swa != 0.0f ? rh->rope_theta_swa : rh->rope_theta;
    const float swa_eng = hp->rope_theta_swa != 0.0f ? hp->rope_theta_swa : hp->rope_theta;
    SAME_F("sliding layers' rope theta", swa_ref, swa_eng);
    SAME_F("YaRN factor", rh->rope_yarn_factor, hp->rope_yarn_factor);
    SAME_U("YaRN original context", rh->n_ctx_orig_yarn, hp->n_ctx_orig_yarn);
    SAME_U("expert_count", rh->n_expert, hp->n_expert);
    if (rh->n_expert > 0) {
        SAME_U("expert_used_count", rh->n_expert_used, hp->n_expert_used);
        SAME_U("expert feed-forward length", rh->n_ff_exp, hp->n_ff_exp);
        SAME_U("expert routing (0 softmax of the top-k, 1 softmax renormalised, 2 softmax)",
               rh->moe_gating, hp->moe_gating);
    }
    return LM_OK;
}

int hx_model_check_hparams(const lm_model *m, const ref_model *r, lm_err *err)
{
    if (m->path == NULL || r->path == NULL)
        return LM_OK;
    int rc = same_shape(m, &r->hp, err);
    if (rc == LM_OK)
        rc = same_rope_moe(m, &r->hp, err);
    for (uint32_t l = 0; rc == LM_OK && l < m->hp.n_layer; ++l) {
        char what[64];
        snprintf(what, sizeof what, "layer %" PRIu32 " window", l);
        SAME_U(what, r->layers[l].window, m->layers[l].window);
    }
    return rc;
}

int hx_model_check(const lm_model *m, const ref_model *r, lm_err *err)
{
    int rc = hx_model_check_weights(m, r, err);
    return rc != LM_OK ? rc : hx_model_check_hparams(m, r, err);
}

int hx_models_open(lm_model **m, ref_model **r, const char *path, lm_err *err)
{
    *r = NULL;
    int rc = lm_model_load(m, path, err);
    if (rc == LM_OK && (rc = ref_model_open(r, path, err)) != LM_OK) {
        lm_model_free(*m);
        *m = NULL;
    }
    return rc;
}
