/* variants.c — a context's architecture variants: attention implementation choice, windows
 * and sinks, the rotating KV cache's slot plan, the MoE FFN, and their scratch (variants.h). */
#include "variants.h"

#include "attention_stream.h"
#include "kvcache_rotating.h"
#include "moe.h"

#include <stdlib.h>
#include <string.h>

struct lm_variants {
    const lm_model *m;
    uint32_t n_ctx;
    bool stream;              /* attention implementation: streaming (else dense) */
    bool rotating;
    lm_rotcache rc;
    lm_rotcache_plan plan;    /* the current chunk's */
    bool plan_identity;       /* slot j holds position j for every slot: the plain layout */
    float *move_tmp;          /* [kv slots][kv_dim] rotating moves */
    float *attn;              /* stream or masked-dense scratch */
    size_t attn_floats;
    float *moe;               /* lm_moe_scratch(n_ctx) */
    size_t moe_floats;
    uint32_t *moe_sel;        /* [n_layer][n_ctx][k] routing of the last chunk */
    float *moe_margin;        /* [n_layer][n_ctx] */
    uint32_t *moe_n;          /* [n_layer] rows of the last chunk */
    float *moe_out;           /* [n_ctx][n_embd] */
    size_t peak_floats;       /* attention + MoE scratch floats, largest chunk so far */
    uint32_t peak_rows;
};

static bool layer_masked(const lm_model *m, uint32_t il)
{
    return m->layers[il].window != 0 || m->layers[il].sinks != NULL;
}

int lm_variants_create(lm_variants **out, const lm_model *m, const lm_ctx_params *p,
                       uint32_t n_ctx, lm_err *err)
{
    *out = NULL;
    const lm_hparams *hp = &m->hp;
    bool stream = false;
    if (p->attn != NULL && strcmp(p->attn, "stream") == 0)
        stream = true;
    else if (p->attn != NULL && strcmp(p->attn, "dense") != 0)
        return LM_FAIL(err, LM_E_INPUT, "context: unknown attention implementation '%s' (dense, "
                       "stream)", p->attn);
    lm_variants *v = calloc(1, sizeof *v);
    if (v == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "context: out of memory");
    v->m = m;
    v->n_ctx = n_ctx;
    v->stream = stream;
    int rc = LM_OK;
    const uint32_t kv_dim = hp->n_head_kv * hp->head_dim;
    if (p->rot_window && p->rot_max_size == 0) {
        rc = LM_FAIL(err, LM_E_INPUT, "context: the exact-window policy needs a rotating cache "
                     "(rot_max_size > 0)");
        goto fail;
    }
    if (p->rot_max_size != 0) {
        if ((rc = lm_rotcache_init(&v->rc, p->rot_max_size, p->rot_keep, n_ctx, err)) != LM_OK)
            goto fail;
        v->rotating = true;
        v->rc.window = p->rot_window;
    }
    bool masked = v->rotating;
    for (uint32_t il = 0; il < hp->n_layer; ++il)
        masked = masked || layer_masked(m, il);
    const uint32_t slots = lm_variants_kv_slots(v);
    if (stream)
        v->attn_floats = lm_attn_stream_scratch(hp->head_dim, 0);
    else if (masked)
        v->attn_floats = lm_attn_masked_scratch(n_ctx, slots);
    if (v->attn_floats && (v->attn = malloc(v->attn_floats * sizeof(float))) == NULL)
        goto nomem;
    if (v->rotating && (v->move_tmp = malloc((size_t)slots * kv_dim * sizeof(float))) == NULL)
        goto nomem;
    if (hp->n_expert > 0) {
        const uint32_t k = hp->n_expert_used;
        v->moe_floats = lm_moe_scratch(n_ctx, hp->n_embd, hp->n_ff_exp, hp->n_expert, k);
        v->moe = malloc(v->moe_floats * sizeof(float));
        v->moe_sel = malloc((size_t)hp->n_layer * n_ctx * k * sizeof(uint32_t));
        v->moe_margin = malloc((size_t)hp->n_layer * n_ctx * sizeof(float));
        v->moe_n = calloc(hp->n_layer, sizeof(uint32_t));
        v->moe_out = malloc((size_t)n_ctx * hp->n_embd * sizeof(float));
        if (!v->moe || !v->moe_sel || !v->moe_margin || !v->moe_n || !v->moe_out)
            goto nomem;
    }
    *out = v;
    return LM_OK;
nomem:
    rc = LM_FAIL(err, LM_E_NOMEM, "context: out of memory for attention/MoE scratch");
fail:
    lm_variants_free(v);
    return rc;
}

void lm_variants_free(lm_variants *v)
{
    if (v == NULL)
        return;
    lm_rotcache_release(&v->rc);
    free(v->move_tmp);
    free(v->attn);
    free(v->moe);
    free(v->moe_sel);
    free(v->moe_margin);
    free(v->moe_n);
    free(v->moe_out);
    free(v);
}

void lm_variants_reset(lm_variants *v)
{
    if (v->rotating)
        lm_rotcache_reset(&v->rc);
    memset(&v->plan, 0, sizeof v->plan);
}

uint32_t lm_variants_kv_slots(const lm_variants *v)
{
    /* a rotating cache holds up to max_size + chunk - 1 slots, chunk <= n_ctx */
    return v->rotating ? v->rc.cap : v->n_ctx;
}

bool lm_variants_needs_dense_scores(const lm_variants *v) { return !v->stream; }
const char *lm_variants_attn_name(const lm_variants *v) { return v->stream ? "stream" : "dense"; }
bool lm_variants_rotating(const lm_variants *v) { return v->rotating; }

int lm_variants_begin_chunk(lm_variants *v, uint32_t n_past, uint32_t n, lm_err *err)
{
    (void)n_past;
    v->peak_rows = n > v->peak_rows ? n : v->peak_rows;
    if (!v->rotating)
        return LM_OK;
    int rc = lm_rotcache_update(&v->rc, n, &v->plan, err);
    v->plan_identity = rc == LM_OK;
    for (uint32_t s = 0; s < v->plan.n_kv && v->plan_identity; ++s)
        v->plan_identity = v->plan.kv_pos[s] == (int32_t)s;
    /* the exact window masks a query past max_size even in the identity layout (one chunk
     * longer than the window) */
    if (v->rc.window && v->plan.pos0 + n > v->rc.max_size)
        v->plan_identity = false;
    return rc;
}

int lm_variants_rollback(lm_variants *v, uint32_t n_past, lm_err *err)
{
    return v->rotating ? lm_rotcache_rollback(&v->rc, n_past, err) : LM_OK;
}

uint32_t lm_variants_write_slot(const lm_variants *v, uint32_t n_past)
{
    return v->rotating ? v->plan.write0 : n_past;
}

void lm_variants_move_layer(lm_variants *v, float *k, float *vv, uint32_t kv_dim)
{
    if (!v->rotating || !v->plan.moved)
        return;
    lm_rotcache_apply(&v->plan, k, kv_dim, v->move_tmp);
    lm_rotcache_apply(&v->plan, vv, kv_dim, v->move_tmp);
}

bool lm_variants_attn_layer(const lm_variants *v, uint32_t il)
{
    return v->stream || v->rotating || layer_masked(v->m, il);
}

static void note(lm_variants *v, size_t floats)
{
    v->peak_floats = floats > v->peak_floats ? floats : v->peak_floats;
}

void lm_variants_attention(lm_variants *v, lm_backend *be, uint32_t il, const lm_attn_args *a)
{
    const lm_layer *L = &v->m->layers[il];
    /* a rotating cache that has not overflowed is the plain cache: the same kernel as without
     * it, so the two are bit-identical (not only equal in exact arithmetic) */
    if (v->rotating && v->plan_identity && !v->stream && !layer_masked(v->m, il)) {
        lm_attention_dense(be, a);
        note(v, lm_attention_dense_scratch(be, a->n, a->pos0 + a->n));
        return;
    }
    const bool plain = !v->rotating || v->plan_identity;
    lm_attn_var_args va = {
        .n = a->n,
        .pos0 = a->pos0,
        .n_kv = plain ? a->pos0 + a->n : v->plan.n_kv,
        .kv_pos = plain ? NULL : v->plan.kv_pos,
        .window = L->window,
        .cache_max = !plain && v->rc.window ? v->rc.max_size : 0,
        .cache_keep = !plain && v->rc.window ? v->rc.keep : 0,
        .sinks = L->sinks,
        .n_head = a->n_head,
        .n_head_kv = a->n_head_kv,
        .head_dim = a->head_dim,
        .scale = a->scale,
        .q = a->q,
        .k = a->k,
        .v = a->v,
        .out = a->out,
        .scratch = v->attn,
        .scratch_floats = v->attn_floats,
    };
    if (v->stream) {
        lm_attention_stream(be, &va);
        note(v, lm_attn_stream_scratch(a->head_dim, 0));
    } else {
        lm_attention_masked(be, &va);
        note(v, lm_attn_masked_scratch(va.n, va.n_kv));
    }
}

void lm_variants_note_dense(lm_variants *v, const lm_backend *be, uint32_t n, uint32_t n_kv)
{
    note(v, lm_attention_dense_scratch(be, n, n_kv));
}

bool lm_variants_moe_layer(const lm_variants *v, uint32_t il)
{
    return lm_wt_present(&v->m->layers[il].ffn_gate_inp);
}

float *lm_variants_moe(lm_variants *v, lm_backend *be, uint32_t il, uint32_t n, const float *xn,
                       const lm_round_spec *const *act)
{
    const lm_hparams *hp = &v->m->hp;
    const lm_layer *L = &v->m->layers[il];
    const uint32_t k = hp->n_expert_used;
    lm_moe_args a = {
        .n = n,
        .n_embd = hp->n_embd,
        .n_ff = hp->n_ff_exp,
        .n_expert = hp->n_expert,
        .n_used = k,
        .gating = (lm_moe_gating)hp->moe_gating,
        .x = xn,
        .w_router = &L->ffn_gate_inp,
        .w_gate = &L->ffn_gate_exps,
        .w_up = &L->ffn_up_exps,
        .w_down = &L->ffn_down_exps,
        .b_router = L->ffn_gate_inp_b,
        .b_gate = L->ffn_gate_exps_b,
        .b_up = L->ffn_up_exps_b,
        .b_down = L->ffn_down_exps_b,
        /* experts: SwiGLU whatever the dense FFN's activation, or gpt-oss's swiglu_oai (as the
         * reference computes them) */
        .act = hp->act == LM_ACT_SWIGLU_OAI ? LM_ACT_SWIGLU_OAI : LM_ACT_SWIGLU,
        .out = v->moe_out,
        .sel = v->moe_sel + (size_t)il * v->n_ctx * k,
        .margin = v->moe_margin + (size_t)il * v->n_ctx,
        .scratch = v->moe,
        .scratch_floats = v->moe_floats,
        .in_fmt = act,
    };
    lm_moe_forward(be, &a);
    v->moe_n[il] = n;
    note(v, lm_moe_scratch(n, hp->n_embd, hp->n_ff_exp, hp->n_expert, k));
    return v->moe_out;
}

const uint32_t *lm_variants_moe_sel(const lm_variants *v, uint32_t il, uint32_t *n, uint32_t *k,
                                    const float **margin)
{
    const lm_hparams *hp = &v->m->hp;
    if (v->moe_sel == NULL || il >= hp->n_layer || !lm_variants_moe_layer(v, il)) {
        *n = *k = 0;
        *margin = NULL;
        return NULL;
    }
    *n = v->moe_n[il];
    *k = hp->n_expert_used;
    *margin = v->moe_margin + (size_t)il * v->n_ctx;
    return v->moe_sel + (size_t)il * v->n_ctx * hp->n_expert_used;
}

const int32_t *lm_variants_kv_pos(const lm_variants *v, uint32_t *n)
{
    *n = v->rotating ? v->rc.size : 0;
    return v->rotating ? v->rc.pos : NULL;
}

size_t lm_variants_peak_bytes(const lm_variants *v) { return v->peak_floats * sizeof(float); }
uint32_t lm_variants_peak_rows(const lm_variants *v) { return v->peak_rows; }
