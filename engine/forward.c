/* forward.c — the llama-family forward pass over one chunk of tokens, and the context that
 * owns its KV cache and scratch.
 *
 * Per chunk of n tokens at positions [p, p + n), x [n][n_embd]:
 *   x = tok_embd[tokens]
 *   per layer:  xn = rmsnorm(x) * attn_norm
 *               q = xn.Wq^T (+bq);  K, V rows of the cache at [p, p+n) = xn.Wk^T (+bk), xn.Wv^T (+bv)
 *               RoPE on q and on the new K rows;  att = attention(q, K[0,p+n), V[0,p+n))
 *               x = x + (att.Wo^T (+bo))
 *               xn = rmsnorm(x) * ffn_norm
 *               x = x + (silu(xn.Wg^T) * (xn.Wu^T)).Wd^T
 *   logits, only for the rows asked for: rmsnorm(x_row) * output_norm, then . output^T
 * Every matrix product goes through the backend (weight products by lm_gemm_nt_act, which
 * converts their input per weight type under q8act); RMSNorm, the gated activation and RoPE go
 * through lm_op_* (backend_ops.c: a backend's optional slot, else shared C), everything else
 * elementwise is here, in plain C with the order stated at each function, exp by lm_expf
 * (expf.h, not libm). Elementwise work is split over the backend's thread count by rows
 * (threadpool.h); a row's bits never depend on the split, and the naive backend runs
 * everything on one thread.
 * All scratch is allocated by lm_ctx_create; nothing is allocated per token, except where
 * attention recomputes a row that read a non-finite value it cannot see (attention_mend.c).
 * Checkpoints: with a probe set (lm_ctx_set_probe), each named operation's rows are handed
 * to it as they are computed (kvdrift trace). Test builds (LM_TEST_HOOKS) also carry the
 * defect switch of kvd_defects.h at the places marked "test defect"; release builds do not.
 * Extension point: other attention variants are further functions of attention.h chosen in
 * attn_block (keep the "attn" probe after whichever runs). */

/* The elementwise loops here are independent per element (no reduction is reordered), so
 * vectorizing them changes no bit; -O2 alone does not vectorize loops in GCC 12, and the
 * selects in lm_expf are only if-converted when comparisons may be assumed not to trap
 * (no-trapping-math concerns floating-point exception flags, never values). It comes
 * before the includes so that lm_expf, inlined into those loops, gets the same options. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-loop-vectorize", "no-trapping-math")
#endif

#include "kvd_engine.h"
#include "kvd_block.h"
#include "kvd_speculative.h"

#include "kvd_defects.h"
#include "kvd_dequant.h"
#include "attention.h"
#include "backend.h"
#include "expf.h"
#include "kvcache.h"
#include "tensor_parallel.h"
#include "threadpool.h"
#include "variants.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* The activation format (lm_vec_dot_spec) of each weight product of a layer: what ggml's CPU
 * backend converts that product's input to, from the weight's type in the file. */
typedef struct layer_act {
    const lm_round_spec *wq, *wk, *wv, *wo, *gate, *up, *down;
    const lm_round_spec *moe[4]; /* router, experts' gate, up, down (lm_moe_args.in_fmt) */
} layer_act;

struct lm_ctx {
    const lm_model *m;
    lm_backend *be;
    lm_pool *pool;    /* elementwise row parallelism: backend's thread count; NULL = serial */
    uint32_t n_ctx;   /* capacity in positions; also the largest chunk */
    uint32_t n_past;  /* positions already in the cache */
    lm_kvcache kv;
    float *rope_cos;  /* [n_ctx][n_rot / 2] */
    float *rope_sin;  /* [n_ctx][n_rot / 2] */
    const float *rope_cos_swa; /* sliding layers' table (hp.rope_theta_swa), else = rope_cos */
    const float *rope_sin_swa;
    /* scratch, each sized for a call of max(n_ctx, batch_rows) rows ("rows" below) */
    float *x;         /* [n_ctx][n_embd] residual stream */
    float *xn;        /* [n_ctx][n_embd] normed input of a block, then the block's output */
    float *q;         /* [n_ctx][n_head * head_dim] */
    float *att;       /* [n_ctx][n_head * head_dim] */
    float *ff_gate;   /* [n_ctx][n_ff] */
    float *ff_up;     /* [n_ctx][n_ff] */
    float *scores;    /* [lm_attention_dense_scratch(be, n_ctx, n_ctx)] (dense mode; 1 in stream) */
    float *kbuf;      /* [batch_rows][n_kv_head * head_dim] a batched call's new K rows, before
                         they go to each sequence's cache (NULL: leads no batch) */
    float *vbuf;      /* [batch_rows][n_kv_head * head_dim] the same for V */
    uint32_t batch_rows; /* rows of the largest batched call it leads (0: none) */
    lm_tp tp;         /* tensor-parallel shards of the layers' weight products */
    float *tp_part;   /* [LM_TP_SHARDS_MAX][rows][n_embd] row-parallel partial sums (tp.n > 1 or
                         the fixed reduction; else 1 float) */
    float *act_in;    /* [n_ctx][max(n_embd, q_dim, n_ff)] a product's converted input (when
                         the profile converts per weight type; else 1 float) */
    layer_act *act;   /* [n_layer] the layers' activation formats, or NULL when the profile
                         converts no product input per weight type */
    const lm_round_spec *act_output; /* the output projection's */
    lm_variants *var; /* attention implementation, windows, sinks, rotating cache, MoE */
    size_t scratch_bytes;
    bool bidir;        /* chunks attend bidirectionally inside themselves (block sampler) */
    lm_probe_fn probe; /* per-operation checkpoints, NULL = none */
    void *probe_user;
    lm_layer_fn on_layer; /* after each layer of a chunk (progress), NULL = none */
    void *on_layer_user;
    const lm_model *m_user; /* the caller's model; m is a copy with float32 weight matrices
                               when the profile rounds WEIGHT or a device backend needs them
                               (own_weights; else m_user itself) */
    lm_model *m_round;      /* that copy (NULL when none) */
    float *w_round;         /* [w_round_n] its weight matrices, one block */
    size_t w_round_n;
    lm_layer *layers_round; /* [n_layer] its layers */
};

/* ---- elementwise stages (the ops themselves: backend_ops.c) ---- */

/* Row-parallel jobs: each processes rows [begin, end) of a chunk; a row's result does not
 * depend on which thread computes it or on the other rows. */

/* x[t] = x[t] + (y[t] (+ b)): the block output, bias first, then the residual add. */
typedef struct residual_job {
    float *x;        /* [n][dim] */
    float *y;        /* [n][dim] */
    const float *b;  /* [dim] or NULL */
    uint32_t dim;
} residual_job;

static void residual_rows(void *arg, uint32_t begin, uint32_t end)
{
    const residual_job *j = arg;
    for (uint32_t t = begin; t < end; ++t) {
        float *x = j->x + (size_t)t * j->dim, *y = j->y + (size_t)t * j->dim;
        if (j->b != NULL)
            for (uint32_t i = 0; i < j->dim; ++i)
                y[i] += j->b[i];
        for (uint32_t i = 0; i < j->dim; ++i)
            x[i] += y[i];
    }
}

/* Rows per thread below which a chunk's elementwise work stays on the calling thread. */
#define MIN_ROWS LM_POOL_MIN_ROWS

/* Checkpoint of op's rows x [n][elems] at positions n_past.. (kvd_engine.h lm_probe_fn): one
 * predictable branch per operation and chunk when no probe is set. */
static inline void probe(const lm_ctx *c, uint32_t il, const char *op, const float *x, uint32_t n,
                         size_t elems)
{
    if (c->probe != NULL)
        c->probe(c->probe_user, il, op, c->n_past, n, x, elems);
}

/* RMSNorm of n rows of n_embd, its output then through lm_backend_perturb at site. */
static void rmsnorm_at(lm_ctx *c, float *y, const float *x, const float *w, uint32_t n,
                       uint32_t site)
{
    float eps = c->m->hp.rms_eps;
    if (LM_DEFECT_ON(c->be->vt->name, LM_DEFECT_RMS_EPS_10X))
        eps *= 10.0f; /* test defect: epsilon read with the wrong exponent */
    const uint32_t d = c->m->hp.n_embd;
    lm_op_rmsnorm(c->be, c->pool, y, x, w, n, d, eps);
    lm_backend_perturb(c->be, y, n, d, d, site);
}

/* attn_norm / ffn_norm: the input of the projections (site NORM). */
static void rmsnorm_chunk(lm_ctx *c, float *y, const float *x, const float *w, uint32_t n)
{
    rmsnorm_at(c, y, x, w, n, LM_SITE_NORM);
}

/* A sandwich norm (attn_post_norm, ffn_post_norm): site POST_NORM. */
static void post_norm_chunk(lm_ctx *c, float *y, const float *x, const float *w, uint32_t n)
{
    rmsnorm_at(c, y, x, w, n, LM_SITE_POST_NORM);
}

/* Per-head RMSNorm: rows [n_rows][head_dim] (contiguous heads of q or k), eps = rms_eps. */
static void head_norm_chunk(lm_ctx *c, float *rows, const float *w, uint32_t n_rows)
{
    const uint32_t hd = c->m->hp.head_dim;
    lm_op_rmsnorm(c->be, c->pool, rows, rows, w, n_rows, hd, c->m->hp.rms_eps);
    lm_backend_perturb(c->be, rows, n_rows, hd, hd, LM_SITE_HEAD_NORM);
}

static void residual_chunk(lm_ctx *c, float *x, float *y, const float *b, uint32_t n)
{
    residual_job j = {x, y, b, c->m->hp.n_embd};
    lm_pool_for(c->pool, n, MIN_ROWS, residual_rows, &j);
    lm_backend_perturb(c->be, x, n, j.dim, j.dim, LM_SITE_RESIDUAL); /* SR ensemble only */
}

/* RoPE with layer il's table (the sliding-layer theta when the layer slides) of n rows that are
 * chunk rows [r0, r0 + n). */
static void rope_chunk(lm_ctx *c, uint32_t il, float *rows, uint32_t r0, uint32_t n,
                       uint32_t n_heads, size_t stride)
{
    const bool swa = c->m->layers[il].window != 0;
    const lm_hparams *hp = &c->m->hp;
    lm_rope_args j = {.cos_tab = swa ? c->rope_cos_swa : c->rope_cos,
                      .sin_tab = swa ? c->rope_sin_swa : c->rope_sin, .stride = stride,
                      .pos0 = c->n_past + r0, .n_heads = n_heads, .head_dim = hp->head_dim,
                      .n_rot = hp->n_rot, .neox = hp->rope_type == LM_ROPE_NEOX};
    if (LM_DEFECT_ON(c->be->vt->name, LM_DEFECT_ROPE_POS_AFTER_CHUNK) && c->n_past > 0)
        /* test defect: a later chunk's first position counted one too far (kept inside the
         * table so that the defect computes wrong angles, never reads out of bounds) */
        j.pos0 = j.pos0 + 1 <= c->n_ctx - n ? j.pos0 + 1 : c->n_ctx - n;
    lm_op_rope(c->be, c->pool, rows, n, &j);
    lm_backend_perturb(c->be, rows, n, n_heads * c->m->hp.head_dim, stride,
                       LM_SITE_ROPE); /* SR ensemble only */
}

/* ---- the layer ---- */

/* One sequence's rows of a forward call: rows [row0, row0 + n) of the leading context's
 * scratch belong to the sequence of ctx (its KV cache, positions, mask, routing). A plain call
 * has one part, the leading context itself, at row 0. */
typedef struct seq_part {
    lm_ctx *ctx;
    uint32_t row0, n;
} seq_part;

/* Attention block of layer il for the call's n rows in c->x (c leads: its backend, scratch and
 * weights). Each part appends its K, V rows at its own positions [n_past, n_past + n) and
 * attends over its own cache only; the block's output is added to rows [r0, n) of c->x (r0 = 0:
 * every row; rows before r0 only feed the cache, see out_rows; r0 > 0 only with one part).
 * With one part, K and V are written straight into its cache; with several, into c's kbuf,
 * vbuf, then copied to each part's slots. The matrix products run once over all n rows. */
static void attn_block(lm_ctx *c, const seq_part *parts, uint32_t n_parts, uint32_t il,
                       uint32_t n, uint32_t r0)
{
    const lm_hparams *hp = &c->m->hp;
    const lm_layer *L = &c->m->layers[il];
    lm_backend *be = c->be;
    const uint32_t d = hp->n_embd;
    const uint32_t q_dim = hp->n_head * hp->head_dim;
    const uint32_t kv_dim = hp->n_head_kv * hp->head_dim;
    const bool batched = n_parts > 1;
    const uint32_t np = parts[0].n; /* the leading sequence's rows: what a probe sees */
    /* rotating cache: move this layer's rows as the chunk's plan says; the new rows then go
     * to the plan's slot (plain cache: slot = position = n_past) */
    uint32_t slot[LM_BATCH_MAX];
    for (uint32_t s = 0; s < n_parts; ++s) {
        lm_ctx *pc = parts[s].ctx;
        lm_variants_move_layer(pc->var, lm_kvcache_k(&pc->kv, il, 0),
                               lm_kvcache_v(&pc->kv, il, 0), kv_dim);
        slot[s] = lm_variants_write_slot(pc->var, pc->n_past); /* the part's first row */
        if (LM_DEFECT_ON(be->vt->name, LM_DEFECT_KV_SLOT_AT_BOUNDARY) && slot[s] > 0)
            slot[s] -= 1; /* test defect: a later chunk overwrites the previous chunk's last row */
    }
    float *kc = batched ? c->kbuf : lm_kvcache_k(&c->kv, il, slot[0]); /* [n][kv_dim] new rows */
    float *vc = batched ? c->vbuf : lm_kvcache_v(&c->kv, il, slot[0]); /* [n][kv_dim] new rows */

    const uint32_t nq = n - r0; /* rows of q: chunk rows [r0, n), q's row 0 is chunk row r0 */
    rmsnorm_chunk(c, c->xn, c->x, L->attn_norm, n);
    probe(c, il, "attn_norm", c->xn, np, d);
    const lm_nt_part qkv[3] = {lm_nt_weight(&L->wk, 0, kv_dim, d, kc, kv_dim),
                               lm_nt_weight(&L->wv, 0, kv_dim, d, vc, kv_dim),
                               lm_nt_weight(&L->wq, 0, q_dim, d, c->q, q_dim)};
    const layer_act *A = c->act != NULL ? &c->act[il] : NULL;
    const lm_round_spec *const *act = A ? (const lm_round_spec *const[]){A->wk, A->wv, A->wq}
                                        : NULL;
    if (r0 == 0) { /* one batch of the three products */
        lm_tp_gemm_cols(be, &c->tp, LM_SITE_NORM, n, d, c->xn, d, qkv, act, 3, c->act_in);
    } else {
        lm_tp_gemm_cols(be, &c->tp, LM_SITE_NORM, n, d, c->xn, d, qkv, act, 2, c->act_in);
        if (nq > 0)
            lm_tp_gemm_cols(be, &c->tp, LM_SITE_NORM, nq, d, c->xn + (size_t)r0 * d, d, &qkv[2],
                            act ? &act[2] : NULL, 1, c->act_in);
    }
    if (L->bq != NULL)
        lm_add_bias(c->q, L->bq, nq, q_dim, q_dim);
    if (L->bk != NULL)
        lm_add_bias(kc, L->bk, n, kv_dim, kv_dim);
    if (L->bv != NULL)
        lm_add_bias(vc, L->bv, n, kv_dim, kv_dim);
    lm_backend_perturb(be, vc, n, kv_dim, kv_dim, LM_SITE_V); /* profiles only */
    if (L->attn_q_norm != NULL) { /* per-head RMSNorm over head_dim, before RoPE */
        head_norm_chunk(c, c->q, L->attn_q_norm, nq * hp->n_head);
        head_norm_chunk(c, kc, L->attn_k_norm, n * hp->n_head_kv);
    }
    for (uint32_t s = 0; s < n_parts; ++s) { /* each part at its own positions */
        const seq_part *p = &parts[s];
        if (batched) {
            rope_chunk(p->ctx, il, c->q + (size_t)p->row0 * q_dim, 0, p->n, hp->n_head, q_dim);
            rope_chunk(p->ctx, il, kc + (size_t)p->row0 * kv_dim, 0, p->n, hp->n_head_kv,
                       kv_dim);
        } else {
            rope_chunk(c, il, c->q, r0, nq, hp->n_head, q_dim);
            rope_chunk(c, il, kc, 0, n, hp->n_head_kv, kv_dim);
        }
    }
    /* profiles only: K and V as the cache stores them (f16kv: binary16) */
    lm_backend_perturb(be, kc, n, kv_dim, kv_dim, LM_SITE_KV);
    lm_backend_perturb(be, vc, n, kv_dim, kv_dim, LM_SITE_KV);
    if (LM_DEFECT_ON(be->vt->name, LM_DEFECT_KV_F16))
        for (size_t i = 0; i < (size_t)n * kv_dim; ++i) { /* test defect: a float16 KV cache */
            kc[i] = lm_f16_to_f32(lm_f32_to_f16(kc[i]));
            vc[i] = lm_f16_to_f32(lm_f32_to_f16(vc[i]));
        }
    probe(c, il, "q", c->q, batched ? np : nq, q_dim); /* a probe sees every row: r0 = 0 */
    probe(c, il, "k", kc, np, kv_dim);
    probe(c, il, "v", vc, np, kv_dim);
    const bool next_rows = LM_DEFECT_ON(be->vt->name, LM_DEFECT_BATCH_KV_NEXT_ROWS);
    for (uint32_t s = 0; batched && s < n_parts; ++s) { /* rows [n][n_kv_head][head_dim] */
        const seq_part *p = &parts[s];
        /* test defect: the rows of the next sequence of the call */
        const seq_part *from = next_rows ? &parts[(s + 1) % n_parts] : p;
        const uint32_t rows = from->n < p->n ? from->n : p->n;
        memcpy(lm_kvcache_k(&p->ctx->kv, il, slot[s]), kc + (size_t)from->row0 * kv_dim,
               (size_t)rows * kv_dim * sizeof *kc);
        memcpy(lm_kvcache_v(&p->ctx->kv, il, slot[s]), vc + (size_t)from->row0 * kv_dim,
               (size_t)rows * kv_dim * sizeof *vc);
    }
    if (nq == 0)
        return;

    for (uint32_t s = 0; s < n_parts; ++s) { /* each part over its own cache */
        const seq_part *p = &parts[s];
        lm_ctx *pc = p->ctx;
        uint32_t pos0 = pc->n_past + (batched ? 0 : r0);
        if (batched && LM_DEFECT_ON(be->vt->name, LM_DEFECT_BATCH_POS_OF_LAST)) {
            /* test defect: the last sequence's position (kept inside this context) */
            const uint32_t last = parts[n_parts - 1].ctx->n_past;
            pos0 = last <= pc->n_ctx - p->n ? last : pc->n_ctx - p->n;
        }
        const lm_attn_args a = {
            .n = batched ? p->n : nq,
            .pos0 = pos0,
            .n_head = hp->n_head,
            .n_head_kv = hp->n_head_kv,
            .head_dim = hp->head_dim,
            .scale = LM_DEFECT_ON(be->vt->name, LM_DEFECT_ATTN_NO_SCALE)
                         ? 1.0f /* test defect: the 1/sqrt(head_dim) factor forgotten */
                         : 1.0f / sqrtf((float)hp->head_dim),
            .q = c->q + (size_t)p->row0 * q_dim,
            .k = lm_kvcache_k(&pc->kv, il, 0),
            .v = lm_kvcache_v(&pc->kv, il, 0),
            .out = c->att + (size_t)p->row0 * q_dim,
            .scores = pc->scores,
            .pool = pc->pool,
            .bidir = pc->bidir,
        };
        if (lm_variants_attn_layer(pc->var, il)) {
            lm_variants_attention(pc->var, be, il, &a);
        } else {
            lm_attention_dense(be, &a);
            lm_variants_note_dense(pc->var, be, a.n, pc->n_past + p->n);
        }
    }
    lm_backend_perturb(be, c->att, nq, q_dim, q_dim, LM_SITE_ATTN_OUT); /* profiles only */
    probe(c, il, "attn", c->att, batched ? np : nq, q_dim);

    float *x = c->x + (size_t)r0 * d; /* [nq][n_embd] the rows that go on */
    const lm_nt_part o = lm_nt_weight(&L->wo, 0, d, q_dim, c->xn, d);
    lm_tp_gemm_rows(be, &c->tp, LM_SITE_ATTN_OUT, nq, q_dim, c->att, q_dim, &o,
                    A ? A->wo : NULL, c->act_in, c->tp_part);
    if (L->attn_post_norm != NULL) { /* sandwich: the branch output (+ bias) normed, then added */
        if (L->bo != NULL)
            lm_add_bias(c->xn, L->bo, nq, d, d);
        post_norm_chunk(c, c->xn, c->xn, L->attn_post_norm, nq);
    }
    residual_chunk(c, x, c->xn, L->attn_post_norm != NULL ? NULL : L->bo, nq);
    probe(c, il, "attn_out", c->xn, batched ? np : nq, d);
    probe(c, il, "attn_resid", x, batched ? np : nq, d);
}

/* FFN block of layer il on rows [r0, n) of the call in c->x (as attn_block). A dense FFN's
 * products run once over every part's rows; a MoE layer routes each part with its own context
 * (its routing record and scratch), so experts group the rows of one sequence at a time. */
static void ffn_block(lm_ctx *c, const seq_part *parts, uint32_t n_parts, uint32_t il,
                      uint32_t n_chunk, uint32_t r0)
{
    const lm_hparams *hp = &c->m->hp;
    const lm_layer *L = &c->m->layers[il];
    lm_backend *be = c->be;
    const uint32_t d = hp->n_embd;
    const uint32_t ff = hp->n_ff;
    const uint32_t n = n_chunk - r0;
    const uint32_t np = n_parts > 1 ? parts[0].n : n; /* the rows a probe sees */
    float *x = c->x + (size_t)r0 * d; /* [n][n_embd] */
    if (n == 0)
        return;

    rmsnorm_chunk(c, c->xn, x, L->ffn_norm, n);
    probe(c, il, "ffn_norm", c->xn, np, d);
    if (lm_variants_moe_layer(c->var, il)) {
        for (uint32_t s = 0; s < n_parts; ++s) {
            const uint32_t row0 = n_parts > 1 ? parts[s].row0 : 0;
            const uint32_t rows = n_parts > 1 ? parts[s].n : n;
            lm_ctx *pc = parts[s].ctx;
            float *y = lm_variants_moe(pc->var, be, il, rows, c->xn + (size_t)row0 * d,
                                       c->act != NULL ? c->act[il].moe : NULL); /* [rows][d] */
            if (s == 0)
                probe(c, il, "ffn_out", y, rows, d);
            residual_chunk(c, x + (size_t)row0 * d, y, NULL, rows);
        }
        probe(c, il, "residual", x, np, d);
        return;
    }
    const lm_nt_part gate_up[2] = {lm_nt_weight(&L->w_gate, 0, ff, d, c->ff_gate, ff),
                                   lm_nt_weight(&L->w_up, 0, ff, d, c->ff_up, ff)};
    const layer_act *A = c->act != NULL ? &c->act[il] : NULL;
    lm_tp_gemm_cols(be, &c->tp, LM_SITE_NORM, n, d, c->xn, d, gate_up,
                    A ? (const lm_round_spec *const[]){A->gate, A->up} : NULL, 2, c->act_in);
    lm_op_glu(be, c->pool, c->ff_gate, c->ff_up, n, ff, hp->act);
    lm_backend_perturb(be, c->ff_gate, n, ff, ff, LM_SITE_SWIGLU); /* SR ensemble only */
    probe(c, il, "ffn_act", c->ff_gate, np, ff);
    const lm_nt_part down = lm_nt_weight(&L->w_down, 0, d, ff, c->xn, d);
    lm_tp_gemm_rows(be, &c->tp, LM_SITE_SWIGLU, n, ff, c->ff_gate, ff, &down,
                    A ? A->down : NULL, c->act_in, c->tp_part);
    if (L->ffn_post_norm != NULL) /* sandwich */
        post_norm_chunk(c, c->xn, c->xn, L->ffn_post_norm, n);
    residual_chunk(c, x, c->xn, NULL, n);
    probe(c, il, "ffn_out", c->xn, np, d);
    probe(c, il, "residual", x, np, d);
}

/* The first row of the chunk whose output of layer il is read after it: 0 except in the last
 * layer, where only the rows the logits mode asks for go on past K and V (LAST: the last row;
 * NONE: none), as llama.cpp's graphs drop the rows without an output there. Only when that
 * changes no bit of what is computed: the backend's rows are independent of their chunk
 * (LM_BE_CHUNK_INVARIANT), no probe wants every row's checkpoints, the layer's attention is
 * the dense one over the plain cache (the variants plan with the chunk's rows), its FFN is
 * dense (MoE records every row's routing) and queries are causal (a bidirectional chunk is
 * one block). */
static uint32_t out_rows(const lm_ctx *c, uint32_t il, uint32_t n, lm_logits_mode mode)
{
    if (il + 1 != c->m->hp.n_layer || mode == LM_LOGITS_ALL ||
        !(c->be->flags & LM_BE_CHUNK_INVARIANT) ||
        c->probe != NULL || c->bidir || lm_variants_attn_layer(c->var, il) ||
        lm_variants_moe_layer(c->var, il))
        return 0;
    return mode == LM_LOGITS_LAST ? n - 1 : n;
}

/* Logits of call row t into out [n_vocab]; a probe sees it at position pos (UINT32_MAX: a
 * co-resident sequence's row, not probed). Always one row per call, so a position's logits
 * are the same bits whether it was asked for alone (LAST) or with every other row (ALL):
 * with BLAS a multi-row sgemm would round differently from the one-row sgemv. */
static void logits_row(lm_ctx *c, uint32_t t, uint32_t pos, float *out /* [n_vocab] */)
{
    const lm_hparams *hp = &c->m->hp;
    const uint32_t d = hp->n_embd;
    float *xr = c->xn + (size_t)t * d; /* [n_embd], free after the last layer */
    lm_op_rmsnorm(c->be, NULL, xr, c->x + (size_t)t * d, c->m->output_norm, 1, d, hp->rms_eps);
    if (LM_DEFECT_ON(c->be->vt->name, LM_DEFECT_LOGITS_UNNORMED))
        for (uint32_t i = 0; i < d; ++i) /* test defect: the norm's 1/rms factor left out */
            xr[i] = c->x[(size_t)t * d + i] * c->m->output_norm[i];
    lm_backend_perturb(c->be, xr, 1, d, d, LM_SITE_OUT_NORM); /* SR ensemble only */
    if (c->probe != NULL && pos != UINT32_MAX)
        c->probe(c->probe_user, hp->n_layer, "out_norm", pos, 1, xr, d);
    const lm_nt_part o = lm_nt_weight(&c->m->output, 0, hp->n_vocab, d, out, hp->n_vocab);
    lm_gemm_nt_act(c->be, LM_SITE_OUT_NORM, 1, d, xr, d, &o, c->act ? &c->act_output : NULL, 1,
                   c->act_in);
}

/* ---- public API ---- */

/* The checks of one sequence's chunk before anything of it runs. */
static int check_chunk(const lm_ctx *c, const int32_t *tokens, uint32_t n, lm_logits_mode mode,
                       const float *logits, lm_err *err)
{
    const lm_hparams *hp = &c->m->hp;
    if (n == 0)
        return LM_FAIL(err, LM_E_INPUT, "forward: empty chunk");
    if (n > c->n_ctx - c->n_past)
        return LM_FAIL(err, LM_E_INPUT, "forward: %u positions + %u new exceed the context of %u",
                       c->n_past, n, c->n_ctx);
    if (mode != LM_LOGITS_NONE && mode != LM_LOGITS_LAST && mode != LM_LOGITS_ALL)
        return LM_FAIL(err, LM_E_INPUT, "forward: unknown logits mode %d", (int)mode);
    if (mode != LM_LOGITS_NONE && logits == NULL)
        return LM_FAIL(err, LM_E_INPUT, "forward: logits requested but no output buffer");
    for (uint32_t t = 0; t < n; ++t)
        if (tokens[t] < 0 || (uint32_t)tokens[t] >= hp->n_vocab)
            return LM_FAIL(err, LM_E_INPUT, "forward: token id %d at %u out of range [0, %u)",
                           (int)tokens[t], t, hp->n_vocab);
    if (c->bidir && lm_ctx_attn_variants(c))
        return LM_FAIL(err, LM_E_INPUT, "forward: bidirectional chunks need dense attention "
                       "without windows, sinks or a rotating cache");
    return LM_OK;
}

/* Rows [row0, row0 + n) of c->x = the tokens' embeddings (times embd_scale when set). */
static void embed(lm_ctx *c, const int32_t *tokens, uint32_t n, uint32_t row0)
{
    const lm_hparams *hp = &c->m->hp;
    const uint32_t d = hp->n_embd;
    float *x = c->x + (size_t)row0 * d; /* [n][n_embd] */
    for (uint32_t t = 0; t < n; ++t)
        lm_wt_rows(x + (size_t)t * d, &c->m->tok_embd, (uint64_t)tokens[t], 1, d);
    if (hp->embd_scale != 0.0f) /* one float multiply per element (gemma3: sqrtf(n_embd)) */
        for (size_t i = 0; i < (size_t)n * d; ++i)
            x[i] *= hp->embd_scale;
}

/* The logits a part's mode asks for, from call rows [row0, row0 + n) of a call of `total`
 * rows. */
static void part_logits(lm_ctx *c, uint32_t row0, uint32_t n, uint32_t total, uint32_t pos0,
                        bool probed, lm_logits_mode mode, float *logits)
{
    const uint32_t nv = c->m->hp.n_vocab;
    if (mode == LM_LOGITS_LAST && total > n &&
        LM_DEFECT_ON(c->be->vt->name, LM_DEFECT_BATCH_LOGITS_LAST_ROW))
        row0 = total - n; /* test defect: the call's last row */
    for (uint32_t t = mode == LM_LOGITS_LAST ? n - 1 : 0; mode != LM_LOGITS_NONE && t < n; ++t)
        logits_row(c, row0 + t, probed ? pos0 + t : UINT32_MAX,
                   mode == LM_LOGITS_LAST ? logits : logits + (size_t)t * nv);
}

int lm_forward(lm_ctx *c, const int32_t *tokens, uint32_t n, lm_logits_mode mode, float *logits,
               lm_err *err)
{
    const lm_hparams *hp = &c->m->hp;
    int rc = check_chunk(c, tokens, n, mode, logits, err);
    if (rc != LM_OK)
        return rc;
    if ((rc = lm_variants_begin_chunk(c->var, c->n_past, n, err)) != LM_OK)
        return rc;
    embed(c, tokens, n, 0);
    const seq_part part = {c, 0, n};
    for (uint32_t il = 0; il < hp->n_layer; ++il) {
        const uint32_t r0 = out_rows(c, il, n, mode);
        attn_block(c, &part, 1, il, n, r0);
        ffn_block(c, &part, 1, il, n, r0);
        if (c->on_layer != NULL)
            c->on_layer(c->on_layer_user, il + 1, hp->n_layer, n);
    }
    part_logits(c, 0, n, n, c->n_past, true, mode, logits);
    if (c->be->vt->check != NULL && (rc = c->be->vt->check(c->be, err)) != LM_OK)
        return rc;
    c->n_past += n;
    return LM_OK;
}

int lm_forward_batch(const lm_seq_chunk *seqs, uint32_t n_seq, lm_err *err)
{
    if (n_seq == 0 || n_seq > LM_BATCH_MAX)
        return LM_FAIL(err, LM_E_INPUT, "forward: %u sequences in one call (1..%u)", n_seq,
                       LM_BATCH_MAX);
    lm_ctx *c = seqs[0].ctx;
    if (n_seq == 1)
        return lm_forward(c, seqs[0].tokens, seqs[0].n, seqs[0].mode, seqs[0].logits, err);
    const lm_hparams *hp = &c->m->hp;
    seq_part parts[LM_BATCH_MAX];
    uint32_t total = 0;
    int rc = LM_OK;
    for (uint32_t s = 0; s < n_seq; ++s) {
        const lm_seq_chunk *q = &seqs[s];
        if ((rc = check_chunk(q->ctx, q->tokens, q->n, q->mode, q->logits, err)) != LM_OK)
            return rc;
        /* the same threads too: each sequence's attention scratch is sized for its own
         * backend's slots, and the leading backend runs every sequence's attention */
        if (q->ctx->m_user != c->m_user || q->ctx->be->prof != c->be->prof ||
            strcmp(q->ctx->be->vt->name, c->be->vt->name) != 0 ||
            q->ctx->be->n_threads != c->be->n_threads)
            return LM_FAIL(err, LM_E_INPUT, "forward: sequence %u runs another model, backend, "
                           "thread count or profile than the leading one", s);
        for (uint32_t r = 0; r < s; ++r)
            if (seqs[r].ctx == q->ctx)
                return LM_FAIL(err, LM_E_INPUT, "forward: sequences %u and %u share a context",
                               r, s);
        parts[s] = (seq_part){q->ctx, total, q->n};
        total += q->n;
    }
    if (total > c->batch_rows)
        return LM_FAIL(err, LM_E_INPUT, "forward: %u rows of %u sequences; the leading context "
                       "holds %u (lm_ctx_params.batch_rows)", total, n_seq, c->batch_rows);
    for (uint32_t s = 0; s < n_seq; ++s) {
        lm_ctx *pc = seqs[s].ctx;
        if ((rc = lm_variants_begin_chunk(pc->var, pc->n_past, seqs[s].n, err)) != LM_OK) {
            /* nothing fed: the sequences already planned go back to where they were */
            for (uint32_t r = 0; r < s; ++r) {
                lm_err ignored = {0};
                lm_variants_rollback(seqs[r].ctx->var, seqs[r].ctx->n_past, &ignored);
            }
            return rc;
        }
        embed(c, seqs[s].tokens, seqs[s].n, parts[s].row0);
    }
    for (uint32_t il = 0; il < hp->n_layer; ++il) {
        attn_block(c, parts, n_seq, il, total, 0);
        ffn_block(c, parts, n_seq, il, total, 0);
        if (c->on_layer != NULL)
            c->on_layer(c->on_layer_user, il + 1, hp->n_layer, total);
    }
    for (uint32_t s = 0; s < n_seq; ++s)
        part_logits(c, parts[s].row0, seqs[s].n, total, seqs[s].ctx->n_past, s == 0,
                    seqs[s].mode, seqs[s].logits);
    if (c->be->vt->check != NULL && (rc = c->be->vt->check(c->be, err)) != LM_OK)
        return rc;
    for (uint32_t s = 0; s < n_seq; ++s)
        seqs[s].ctx->n_past += seqs[s].n;
    return LM_OK;
}

bool lm_ctx_attn_variants(const lm_ctx *c)
{
    for (uint32_t il = 0; il < c->m->hp.n_layer; ++il)
        if (lm_variants_attn_layer(c->var, il))
            return true;
    return false;
}

int lm_prefill(lm_ctx *c, const int32_t *tokens, uint32_t n, uint32_t step, float *last_logits,
               lm_err *err)
{
    if (n == 0)
        return LM_FAIL(err, LM_E_INPUT, "prefill: empty prompt");
    if (n > c->n_ctx - c->n_past)
        return LM_FAIL(err, LM_E_INPUT, "prefill: %u positions + %u new exceed the context of %u",
                       c->n_past, n, c->n_ctx);
    if (step == 0 || step > n)
        step = n;
    for (uint32_t done = 0; done < n;) {
        const uint32_t len = n - done < step ? n - done : step;
        const bool last = done + len == n;
        int rc = lm_forward(c, tokens + done, len, last ? LM_LOGITS_LAST : LM_LOGITS_NONE,
                            last ? last_logits : NULL, err);
        if (rc != LM_OK)
            return rc;
        done += len;
    }
    return LM_OK;
}

/* YaRN's multiplier m_i of pair i at base theta (kvd_model.h, lm_hparams), in double. */
static double yarn_mult(const lm_hparams *hp, float theta, uint32_t i)
{
    const double two_pi = 6.283185307179586, n_rot = hp->n_rot, base = log((double)theta);
    const double orig = hp->n_ctx_orig_yarn;
    const double c_fast = n_rot * log(orig / (two_pi * 32.0)) / (2.0 * base);
    const double c_slow = n_rot * log(orig / (two_pi * 1.0)) / (2.0 * base);
    const double lo = fmax(0.0, floor(c_fast)), hi = fmin(n_rot - 1.0, ceil(c_slow));
    const double y = ((double)i - lo) / fmax(0.001, hi - lo);
    const double r = 1.0 - fmin(1.0, fmax(0.0, y));
    const double s = 1.0 / (double)hp->rope_yarn_factor;
    return s * (1.0 - r) + r;
}

void lm_rope_table(const lm_model *m, float theta, uint32_t n_pos, float *cos_tab,
                   float *sin_tab)
{
    const uint32_t half = m->hp.n_rot / 2;
    for (uint32_t i = 0; i < half; ++i) {
        double freq = pow((double)theta, -2.0 * (double)i / (double)m->hp.n_rot);
        if (m->rope_freqs != NULL) /* Llama 3.1: pair i's frequency divided by its factor */
            freq /= (double)m->rope_freqs[i];
        double mag = 1.0;
        if (m->hp.rope_yarn_factor != 0.0f) { /* YaRN: between s freq and freq; magnitude */
            freq *= yarn_mult(&m->hp, theta, i);
            mag = 1.0 + 0.1 * log((double)m->hp.rope_yarn_factor);
        }
        for (uint32_t pos = 0; pos < n_pos; ++pos) {
            const double ang = (double)pos * freq;
            cos_tab[(size_t)pos * half + i] = (float)(cos(ang) * mag); /* x * 1.0 == x */
            sin_tab[(size_t)pos * half + i] = (float)(sin(ang) * mag);
        }
    }
}

/* Whether some weight product of m reads blocks (then the backend needs tile scratch). */
static bool has_blocks(const lm_model *m)
{
    bool any = m->tok_embd.q != NULL || m->output.q != NULL;
    for (uint32_t il = 0; il < m->hp.n_layer && !any; ++il) {
        const lm_wt *w[LM_LAYER_PRODUCTS];
        lm_layer_product_weights(&m->layers[il], w);
        for (int i = 0; i < LM_LAYER_PRODUCTS; ++i)
            any = any || w[i]->q != NULL;
    }
    return any;
}

/* src [rows][cols] as float32 values into *cur (rounded at the WEIGHT site when round),
 * advancing *cur. */
static lm_wt f32_copy(lm_ctx *c, float **cur, const lm_wt *src, uint32_t rows, uint32_t cols,
                      bool round)
{
    float *dst = *cur;
    lm_wt_rows(dst, src, 0, rows, cols);
    if (round)
        lm_backend_perturb(c->be, dst, rows, cols, cols, LM_SITE_WEIGHT);
    *cur += (size_t)rows * cols;
    lm_wt w = lm_wt_f32(dst);
    w.type = src->type;
    return w;
}

/* The context computes with a private copy of the model whose embedding table and weight
 * matrices are float32 (a dense FFN's three, or a MoE layer's router and its experts' three;
 * norm weights and biases are float32 already) when the profile rounds WEIGHT (bf16, tf32:
 * the copy rounded once) or when its backend reads float32 weights from its own memory
 * (bind_weights, a device backend) and the model keeps its file's types. */
static int own_weights(lm_ctx *c, const lm_profile *prof, lm_err *err)
{
    const lm_model *m = c->m_user;
    const bool round = lm_profile_site(prof, LM_SITE_WEIGHT)->kind != LM_ROUND_NONE;
    if (!round && !(c->be->vt->bind_weights != NULL && has_blocks(m)))
        return LM_OK;
    const lm_hparams *hp = &m->hp;
    const uint64_t d = hp->n_embd, q_dim = (uint64_t)hp->n_head * hp->head_dim,
                   kv_dim = (uint64_t)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
    const uint64_t ne = hp->n_expert, ffe = hp->n_ff_exp;
    uint64_t total = (uint64_t)hp->n_vocab * d * (hp->tied_output ? 1 : 2);
    for (uint32_t il = 0; il < hp->n_layer; ++il)
        total += 2 * q_dim * d + 2 * kv_dim * d +
                 (lm_wt_present(&m->layers[il].ffn_gate_inp) ? ne * d + 3 * ne * ffe * d
                                                             : 3 * ff * d);
    c->m_round = malloc(sizeof *c->m_round);
    c->layers_round = malloc((hp->n_layer ? hp->n_layer : 1) * sizeof *c->layers_round);
    c->w_round = malloc(total * sizeof(float));
    if (c->m_round == NULL || c->layers_round == NULL || c->w_round == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "profile %s: cannot allocate %llu float32 weights",
                       prof->name, (unsigned long long)total);
    c->w_round_n = (size_t)total;
    *c->m_round = *m;
    float *cur = c->w_round;
    c->m_round->tok_embd = f32_copy(c, &cur, &m->tok_embd, hp->n_vocab, (uint32_t)d, round);
    c->m_round->output = hp->tied_output
                             ? c->m_round->tok_embd
                             : f32_copy(c, &cur, &m->output, hp->n_vocab, (uint32_t)d, round);
    for (uint32_t il = 0; il < hp->n_layer; ++il) {
        const lm_layer *L = &m->layers[il];
        lm_layer *R = &c->layers_round[il];
        *R = *L;
        R->wq = f32_copy(c, &cur, &L->wq, (uint32_t)q_dim, (uint32_t)d, round);
        R->wk = f32_copy(c, &cur, &L->wk, (uint32_t)kv_dim, (uint32_t)d, round);
        R->wv = f32_copy(c, &cur, &L->wv, (uint32_t)kv_dim, (uint32_t)d, round);
        R->wo = f32_copy(c, &cur, &L->wo, (uint32_t)d, (uint32_t)q_dim, round);
        if (lm_wt_present(&L->ffn_gate_inp)) { /* experts as [n_expert * rows][cols] */
            R->ffn_gate_inp = f32_copy(c, &cur, &L->ffn_gate_inp, (uint32_t)ne, (uint32_t)d,
                                       round);
            R->ffn_gate_exps = f32_copy(c, &cur, &L->ffn_gate_exps, (uint32_t)(ne * ffe),
                                        (uint32_t)d, round);
            R->ffn_up_exps = f32_copy(c, &cur, &L->ffn_up_exps, (uint32_t)(ne * ffe),
                                      (uint32_t)d, round);
            R->ffn_down_exps = f32_copy(c, &cur, &L->ffn_down_exps, (uint32_t)(ne * d),
                                        (uint32_t)ffe, round);
            continue;
        }
        R->w_gate = f32_copy(c, &cur, &L->w_gate, (uint32_t)ff, (uint32_t)d, round);
        R->w_up = f32_copy(c, &cur, &L->w_up, (uint32_t)ff, (uint32_t)d, round);
        R->w_down = f32_copy(c, &cur, &L->w_down, (uint32_t)d, (uint32_t)ff, round);
    }
    c->m_round->layers = c->layers_round;
    c->m = c->m_round;
    return LM_OK;
}

/* The widest reduction of a weight product: the most columns a decoded tile row holds. */
static uint32_t product_k_max(const lm_hparams *hp)
{
    const uint32_t q_dim = hp->n_head * hp->head_dim;
    uint32_t k = hp->n_embd > q_dim ? hp->n_embd : q_dim;
    k = hp->n_ff > k ? hp->n_ff : k;
    return hp->n_ff_exp > k ? hp->n_ff_exp : k;
}

uint64_t lm_ctx_predict_wtile_bytes(const lm_hparams *hp)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    return lm_wtile_bytes(product_k_max(hp), cpus > 1 ? (uint32_t)cpus : 1u);
}

/* Whether the profile converts some product input per weight type (LM_ROUND_VEC_DOT). */
static bool converts_per_weight(const lm_profile *prof)
{
    for (uint32_t s = 0; s < LM_N_SITES; ++s)
        if (lm_profile_site(prof, s)->kind == LM_ROUND_VEC_DOT)
            return true;
    return false;
}

/* c->act from the file types of the caller's model's weights (c->m_user). */
static int act_formats(lm_ctx *c, lm_err *err)
{
    const lm_model *m = c->m_user;
    c->act = calloc(m->hp.n_layer ? m->hp.n_layer : 1, sizeof *c->act);
    if (c->act == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "context: out of memory");
    for (uint32_t il = 0; il < m->hp.n_layer; ++il) {
        const lm_wt *w[LM_LAYER_PRODUCTS];
        lm_layer_product_weights(&m->layers[il], w);
        const lm_round_spec **f[LM_LAYER_PRODUCTS] = {&c->act[il].wq, &c->act[il].wk, &c->act[il].wv,
                                       &c->act[il].wo, &c->act[il].gate, &c->act[il].up,
                                       &c->act[il].down, &c->act[il].moe[0], &c->act[il].moe[1],
                                       &c->act[il].moe[2], &c->act[il].moe[3]};
        for (int i = 0; i < LM_LAYER_PRODUCTS; ++i)
            *f[i] = lm_vec_dot_spec(w[i]->type);
    }
    c->act_output = lm_vec_dot_spec(m->output.type);
    return LM_OK;
}

/* Floats of a row of act_in: the widest product input (n_embd, q_dim or n_ff). */
static size_t act_row(const lm_hparams *hp)
{
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim;
    size_t w = hp->n_embd > q_dim ? hp->n_embd : q_dim;
    return hp->n_ff > w ? hp->n_ff : w;
}

/* One scratch allocation carved into aligned pieces. */
static float *carve(char **cursor, size_t n_floats)
{
    float *p = (float *)(void *)*cursor;
    *cursor += (n_floats * sizeof(float) + 63) / 64 * 64;
    return p;
}

/* The pieces of a context's scratch arena, in carving order: rope cos, sin; x, xn; q, att;
 * ff_gate, ff_up; scores; swa cos, sin; act_in; kbuf, vbuf; tp_part. */
enum { N_SCRATCH = 15 };
typedef struct scratch_shape {
    size_t n_ctx, rows;    /* positions; rows of the largest chunk (>= n_ctx) */
    bool own_swa;          /* sliding layers have their own RoPE tables */
    size_t batch_rows;     /* lm_ctx_params.batch_rows */
    size_t dense;          /* floats of the dense attention scores (1 = none) */
    size_t act;            /* floats of the activation-format input (1 = none) */
    size_t tp_part;        /* floats of the tensor-parallel partial sums (1 = none) */
} scratch_shape;

/* sizes[N_SCRATCH] in floats; returns the arena's bytes (64-byte aligned pieces). */
static size_t scratch_sizes(size_t sizes[N_SCRATCH], const lm_hparams *hp, const scratch_shape *s)
{
    const size_t q_dim = (size_t)hp->n_head * hp->head_dim, half = hp->n_rot / 2;
    const size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    const size_t v[N_SCRATCH] = {
        s->n_ctx * half, s->n_ctx * half,                             /* rope cos, sin */
        s->rows * hp->n_embd, s->rows * hp->n_embd,                   /* x, xn */
        s->rows * q_dim, s->rows * q_dim,                             /* q, att */
        s->rows * hp->n_ff, s->rows * hp->n_ff,                       /* ff_gate, ff_up */
        s->dense,                                                     /* scores */
        s->own_swa ? s->n_ctx * half : 1, s->own_swa ? s->n_ctx * half : 1, /* swa cos, sin */
        s->act,                                                       /* act_in */
        s->batch_rows * kv_dim + 1, s->batch_rows * kv_dim + 1,       /* kbuf, vbuf */
        s->tp_part,                                                   /* tp_part */
    };
    size_t total = 64;
    for (size_t i = 0; i < N_SCRATCH; ++i) {
        sizes[i] = v[i];
        total += (v[i] * sizeof(float) + 63) / 64 * 64;
    }
    return total;
}

void lm_ctx_predict_bytes(uint64_t *kv, uint64_t *scratch, const lm_hparams *hp, uint32_t n_ctx)
{
    const long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    const size_t slots = cpus > 1 ? (size_t)cpus : 1; /* the dense scores' per-thread rows */
    const size_t rows = n_ctx < LM_ATTN_Q_BLOCK ? n_ctx : LM_ATTN_Q_BLOCK;
    const scratch_shape shape = {
        .n_ctx = n_ctx, .rows = n_ctx, .batch_rows = 0, .act = 1, .tp_part = 1,
        .own_swa = hp->rope_theta_swa != 0.0f && hp->rope_theta_swa != hp->rope_theta,
        .dense = (slots * rows > n_ctx ? slots * rows : n_ctx) * (size_t)n_ctx};
    size_t sizes[N_SCRATCH];
    *scratch = scratch_sizes(sizes, hp, &shape);
    *kv = 2u * (uint64_t)hp->n_layer * n_ctx * hp->n_head_kv * hp->head_dim * sizeof(float);
}

int lm_ctx_create(lm_ctx **out, const lm_model *m, const lm_ctx_params *p, lm_err *err)
{
    *out = NULL;
    const lm_hparams *hp = &m->hp;
    const lm_ctx_params defaults = {0};
    if (p == NULL)
        p = &defaults;
    uint32_t n_ctx = p->n_ctx ? p->n_ctx : hp->n_ctx_train;
    if (n_ctx == 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: context size 0 (no n_ctx and no context_length)",
                       m->path ? m->path : "model");
    if (hp->n_ctx_train != 0 && n_ctx > hp->n_ctx_train)
        return LM_FAIL(err, LM_E_INPUT, "%s: context of %u positions exceeds the trained %u",
                       m->path ? m->path : "model", n_ctx, hp->n_ctx_train);
    if (hp->n_head == 0 || hp->n_head_kv == 0 || hp->n_head % hp->n_head_kv != 0 ||
        hp->n_rot > hp->head_dim || hp->n_rot % 2 != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: inconsistent heads/rotary configuration",
                       m->path ? m->path : "model");

    const lm_profile *prof = lm_profile_find(p->profile);
    if (prof == NULL)
        return LM_FAIL(err, LM_E_INPUT, "profile '%s': unknown (expected %s)", p->profile,
                       lm_profile_expected());

    const bool pow2 = p->tp <= 1 || (p->tp & (p->tp - 1)) == 0;
    if (p->tp > LM_TP_SHARDS_MAX || p->tp_reduce < LM_TP_RING || p->tp_reduce > LM_TP_FIXED ||
        (p->tp_reduce != LM_TP_RING && !pow2))
        return LM_FAIL(err, LM_E_INPUT, "context: %u tensor-parallel shards, reduction %d (0..%u "
                       "shards; a power of two for the tree and fixed reductions)", p->tp,
                       p->tp_reduce, LM_TP_SHARDS_MAX);
    lm_ctx *c = calloc(1, sizeof *c);
    if (c == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "context: out of memory");
    c->tp = (lm_tp){.n = p->tp > 1 ? p->tp : 1, .reduce = (lm_tp_reduce)p->tp_reduce};
    c->m = c->m_user = m;
    c->n_ctx = n_ctx;
    int rc = lm_backend_create(&c->be, p->backend, p->n_threads, err);
    if (rc != LM_OK)
        goto fail;
    c->be->prof = prof;
    if ((rc = own_weights(c, prof, err)) != LM_OK)
        goto fail;
    if (has_blocks(c->m) && (rc = lm_backend_reserve_wtiles(c->be, product_k_max(hp), err)))
        goto fail;
    const bool per_weight = converts_per_weight(prof);
    if (per_weight && (rc = act_formats(c, err)) != LM_OK)
        goto fail;
    if (c->be->vt->bind_weights != NULL) {
        rc = c->w_round != NULL && has_blocks(m)
                 ? c->be->vt->bind_weights(c->be, c->w_round, c->w_round_n, err)
                 : c->be->vt->bind_weights(c->be, m->weights_arena, m->weights_n, err);
        if (rc != LM_OK)
            goto fail;
    }
    if (c->be->pool != NULL) /* the backend's pool serves the elementwise stages too */
        c->pool = c->be->pool;
    else if ((rc = lm_pool_create(&c->pool, c->be->n_threads, err)) != LM_OK)
        goto fail;
    const uint32_t kv_dim = hp->n_head_kv * hp->head_dim;
    rc = lm_variants_create(&c->var, c->m, p, n_ctx, err); /* c->m: rounded experts */
    if (rc != LM_OK)
        goto fail;
    rc = lm_kvcache_init(&c->kv, hp->n_layer, lm_variants_kv_slots(c->var), kv_dim, err);
    if (rc != LM_OK)
        goto fail;

    const bool own_swa = hp->rope_theta_swa != 0.0f && hp->rope_theta_swa != hp->rope_theta;
    c->batch_rows = p->batch_rows;
    const size_t rows = p->batch_rows > n_ctx ? p->batch_rows : n_ctx;
    const scratch_shape shape = {
        .n_ctx = n_ctx, .rows = rows, .own_swa = own_swa, .batch_rows = p->batch_rows,
        .dense = lm_variants_needs_dense_scores(c->var) ? lm_attention_dense_scratch(c->be, n_ctx,
                                                                                    n_ctx) : 1,
        .act = per_weight ? rows * act_row(hp) : 1,
        .tp_part = c->tp.n > 1 || c->tp.reduce == LM_TP_FIXED
                       ? (size_t)LM_TP_SHARDS_MAX * rows * hp->n_embd : 1};
    size_t sizes[N_SCRATCH];
    const size_t total = scratch_sizes(sizes, hp, &shape);
    char *arena = aligned_alloc(64, (total + 63) / 64 * 64);
    if (arena == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "context: cannot allocate %zu bytes of scratch", total);
        goto fail;
    }
    char *cur = arena;
    c->rope_cos = carve(&cur, sizes[0]); /* first piece: also the arena to free */
    c->rope_sin = carve(&cur, sizes[1]);
    c->x = carve(&cur, sizes[2]);
    c->xn = carve(&cur, sizes[3]);
    c->q = carve(&cur, sizes[4]);
    c->att = carve(&cur, sizes[5]);
    c->ff_gate = carve(&cur, sizes[6]);
    c->ff_up = carve(&cur, sizes[7]);
    c->scores = carve(&cur, sizes[8]);
    float *cos_swa = carve(&cur, sizes[9]), *sin_swa = carve(&cur, sizes[10]);
    c->act_in = carve(&cur, sizes[11]);
    c->kbuf = p->batch_rows ? carve(&cur, sizes[12]) : NULL;
    c->vbuf = p->batch_rows ? carve(&cur, sizes[13]) : NULL;
    c->tp_part = carve(&cur, sizes[14]);
    c->scratch_bytes = total + c->be->wtile_slots * c->be->wtile_floats * sizeof(float);
    lm_rope_table(c->m, hp->rope_theta, n_ctx, c->rope_cos, c->rope_sin);
    c->rope_cos_swa = c->rope_cos;
    c->rope_sin_swa = c->rope_sin;
    if (own_swa) {
        lm_rope_table(c->m, hp->rope_theta_swa, n_ctx, cos_swa, sin_swa);
        c->rope_cos_swa = cos_swa;
        c->rope_sin_swa = sin_swa;
    }
    *out = c;
    return LM_OK;
fail:
    lm_ctx_free(c);
    return rc;
}

void lm_ctx_free(lm_ctx *c)
{
    if (c == NULL)
        return;
    free(c->rope_cos);
    lm_kvcache_release(&c->kv);
    lm_variants_free(c->var);
    if (c->be == NULL || c->pool != c->be->pool)
        lm_pool_free(c->pool);
    lm_backend_destroy(c->be);
    free(c->w_round);
    free(c->layers_round);
    free(c->m_round);
    free(c->act);
    free(c);
}

const lm_model *lm_ctx_model(const lm_ctx *c) { return c->m_user; }
uint32_t lm_ctx_n_past(const lm_ctx *c) { return c->n_past; }
uint32_t lm_ctx_n_ctx(const lm_ctx *c) { return c->n_ctx; }
void lm_ctx_reset(lm_ctx *c)
{
    c->n_past = 0;
    lm_variants_reset(c->var);
}
size_t lm_ctx_scratch_bytes(const lm_ctx *c) { return c->scratch_bytes; }

int lm_ctx_adopt_prefix(lm_ctx *dst, const lm_ctx *src, uint32_t n, lm_err *err)
{
    if (dst->m_user != src->m_user || lm_variants_rotating(dst->var) ||
        lm_variants_rotating(src->var))
        return LM_FAIL(err, LM_E_INPUT, "prefix reuse: needs two contexts of the same model with "
                       "the plain cache");
    if (dst->n_past != 0 || n > src->n_past || n > dst->n_ctx)
        return LM_FAIL(err, LM_E_INPUT, "prefix reuse of %u positions: the source holds %u, the "
                       "target %u of %u", n, src->n_past, dst->n_past, dst->n_ctx);
    const lm_hparams *hp = &dst->m->hp;
    const size_t kv_dim = (size_t)hp->n_head_kv * hp->head_dim;
    /* test defects: a copy one row short, written one slot late, V of the next layer */
    const uint32_t rows =
        LM_DEFECT_ON(dst->be->vt->name, LM_DEFECT_PREFIX_LAST_ROW_STALE) && n > 0 ? n - 1 : n;
    const uint32_t to =
        LM_DEFECT_ON(dst->be->vt->name, LM_DEFECT_PREFIX_ROWS_SHIFTED) && n < dst->n_ctx;
    const bool v_next = LM_DEFECT_ON(dst->be->vt->name, LM_DEFECT_PREFIX_V_NEXT_LAYER);
    for (uint32_t il = 0; il < hp->n_layer; ++il) { /* rows [position][n_kv_head][head_dim] */
        const uint32_t vl = v_next ? (il + 1) % hp->n_layer : il;
        memcpy(lm_kvcache_k(&dst->kv, il, to), lm_kvcache_k(&src->kv, il, 0),
               rows * kv_dim * sizeof(float));
        memcpy(lm_kvcache_v(&dst->kv, il, to), lm_kvcache_v(&src->kv, vl, 0),
               rows * kv_dim * sizeof(float));
    }
    dst->n_past = n;
    return LM_OK;
}

void lm_ctx_share_hooks(lm_ctx *dst, const lm_ctx *src)
{
    dst->probe = src->probe;
    dst->probe_user = src->probe_user;
    dst->on_layer = src->on_layer;
    dst->on_layer_user = src->on_layer_user;
}

void lm_ctx_set_bidir(lm_ctx *c, bool on) { c->bidir = on; }

int lm_ctx_rollback(lm_ctx *c, uint32_t n_past, lm_err *err)
{
    if (n_past > c->n_past)
        return LM_FAIL(err, LM_E_INPUT, "rollback to %u positions: only %u cached", n_past,
                       c->n_past);
    int rc = lm_variants_rollback(c->var, n_past, err);
    if (rc == LM_OK)
        c->n_past = n_past;
    return rc;
}

void lm_ctx_set_probe(lm_ctx *c, lm_probe_fn fn, void *user)
{
    c->probe = fn;
    c->probe_user = user;
}

void lm_ctx_set_layer_fn(lm_ctx *c, lm_layer_fn fn, void *user)
{
    c->on_layer = fn;
    c->on_layer_user = user;
}
const char *lm_ctx_backend_name(const lm_ctx *c) { return c->be->vt->name; }
const char *lm_ctx_attn_name(const lm_ctx *c) { return lm_variants_attn_name(c->var); }

size_t lm_ctx_peak_scratch_bytes(const lm_ctx *c)
{
    /* rows a chunk touches: x, xn, q, att, ff_gate, ff_up, act_in when converting */
    const lm_hparams *hp = &c->m->hp;
    const size_t row = 2 * (size_t)hp->n_embd + 2 * (size_t)hp->n_head * hp->head_dim +
                       2 * (size_t)hp->n_ff + (c->act != NULL ? act_row(hp) : 0);
    return lm_variants_peak_bytes(c->var) + (size_t)lm_variants_peak_rows(c->var) * row * sizeof(float);
}

size_t lm_ctx_peak_attn_scratch_bytes(const lm_ctx *c) { return lm_variants_peak_bytes(c->var); }

const uint32_t *lm_ctx_moe_routing(const lm_ctx *c, uint32_t il, uint32_t *n, uint32_t *k,
                                   const float **margin)
{
    return lm_variants_moe_sel(c->var, il, n, k, margin);
}

const int32_t *lm_ctx_kv_pos(const lm_ctx *c, uint32_t *n_slots)
{
    return lm_variants_kv_pos(c->var, n_slots);
}

const float *lm_ctx_k(const lm_ctx *c, uint32_t layer)
{
    return layer < c->kv.n_layer ? lm_kvcache_k(&c->kv, layer, 0) : NULL;
}

const float *lm_ctx_v(const lm_ctx *c, uint32_t layer)
{
    return layer < c->kv.n_layer ? lm_kvcache_v(&c->kv, layer, 0) : NULL;
}
