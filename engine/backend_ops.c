/* backend_ops.c — the elementwise ops of the forward pass (RMSNorm, the gated activation,
 * RoPE): a backend's optional slot (lm_backend_i.rmsnorm, .glu, .rope) when it fills one, else
 * the shared fixed-order C below, which every CPU backend runs; and batches of products
 * sharing A (the slot gemm_nt_batch, else gemm_nt one product at a time), their input
 * converted per weight type where the profile says so (lm_gemm_nt_act). The C versions split
 * rows over the pool (threadpool.h); a row's bits never depend on the split. */

/* The loops are independent per element (no reduction is reordered), so vectorizing them
 * changes no bit; -O2 alone does not vectorize loops in GCC 12, and the selects in lm_expf are
 * only if-converted when comparisons may be assumed not to trap (no-trapping-math concerns
 * floating-point exception flags, never values). Before the includes so that lm_expf, inlined
 * into the loops, gets the same options. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-loop-vectorize", "no-trapping-math")
#endif

#include "backend.h"
#include "expf.h"
#include "threadpool.h"

#include <math.h>
#include <string.h>

/* y[i] = (x[i] * r) * w[i], r = 1 / sqrtf(ss / n + eps), ss = sum of x[i]*x[i] for i = 0..n-1
 * accumulated left to right in float from +0.0f; ss / n, + eps, sqrtf and 1/ are each one
 * float operation. */
static void rmsnorm_apply(float *y /* [n] */, const float *x /* [n] */, const float *w /* [n] */,
                          uint32_t n, float eps, float ss)
{
    const float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (uint32_t i = 0; i < n; ++i)
        y[i] = (x[i] * r) * w[i];
}

typedef struct norm_job {
    float *y;        /* [n][dim] */
    const float *x;  /* [n][dim] */
    const float *w;  /* [dim] */
    uint32_t dim;
    float eps;
} norm_job;

/* Rows NORM_GROUP at a time: their sums of squares advance side by side, each still its own
 * left-to-right chain, so that a row's adds do not wait on one another's latency (one chain
 * alone runs at one add per add latency); no bit depends on the grouping. */
#define NORM_GROUP 8u /* the chains below are written out for 8 */

static void norm_rows(void *arg, uint32_t begin, uint32_t end)
{
    const norm_job *j = arg;
    const size_t dim = j->dim;
    for (uint32_t t0 = begin; t0 < end; t0 += NORM_GROUP) {
        const uint32_t g = end - t0 < NORM_GROUP ? end - t0 : NORM_GROUP;
        const float *x = j->x + t0 * dim; /* [g][dim] */
        float ss[NORM_GROUP] = {0.0f};
        if (g == NORM_GROUP) { /* eight chains in registers */
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f, s4 = 0.0f, s5 = 0.0f, s6 = 0.0f,
                  s7 = 0.0f;
            for (size_t i = 0; i < dim; ++i) {
                const float *xi = x + i;
                s0 += xi[0] * xi[0];
                s1 += xi[dim] * xi[dim];
                s2 += xi[2 * dim] * xi[2 * dim];
                s3 += xi[3 * dim] * xi[3 * dim];
                s4 += xi[4 * dim] * xi[4 * dim];
                s5 += xi[5 * dim] * xi[5 * dim];
                s6 += xi[6 * dim] * xi[6 * dim];
                s7 += xi[7 * dim] * xi[7 * dim];
            }
            const float sums[NORM_GROUP] = {s0, s1, s2, s3, s4, s5, s6, s7};
            memcpy(ss, sums, sizeof ss);
        } else {
            for (uint32_t r = 0; r < g; ++r)
                for (size_t i = 0; i < dim; ++i)
                    ss[r] += x[r * dim + i] * x[r * dim + i];
        }
        for (uint32_t r = 0; r < g; ++r)
            rmsnorm_apply(j->y + (t0 + r) * dim, x + r * dim, j->w, j->dim, j->eps, ss[r]);
    }
}

/* LM_ACT_SWIGLU: g = (g / (1 + lm_expf(-g))) * u, SiLU of the gate times the up projection. */
LM_VECTOR_CLONES static void swiglu_span(float *g, const float *u, size_t count)
{
    for (size_t i = 0; i < count; ++i) {
        const float s = g[i] / (1.0f + lm_expf(-g[i]));
        g[i] = s * u[i];
    }
}

/* LM_ACT_GEGLU_TANH: g = (g / (1 + lm_expf(-2v))) * u with v = 0.7978845608f * (g + (0.044715f
 * * g) * g * g): gelu_tanh of the gate times the up projection, using 0.5 (1 + tanh(v)) =
 * 1 / (1 + exp(-2v)); every step one float operation, left to right. */
LM_VECTOR_CLONES static void geglu_span(float *g, const float *u, size_t count)
{
    for (size_t i = 0; i < count; ++i) {
        const float x = g[i];
        const float v = 0.7978845608f * (x + 0.044715f * x * x * x);
        g[i] = (x / (1.0f + lm_expf(-2.0f * v))) * u[i];
    }
}

/* LM_ACT_SWIGLU_OAI, ggml's swiglu_oai (alpha 1.702f, limit 7.0f): x = min(g, 7) (std::min: a
 * NaN g stays NaN), y = clamp(u, -7, 7), g = (x / (1 + lm_expf(1.702f * (-x)))) * (y + 1), each
 * operation one float rounding in that order. */
LM_VECTOR_CLONES static void swiglu_oai_span(float *g, const float *u, size_t count)
{
    const float limit = 7.0f, alpha = 1.702f;
    for (size_t i = 0; i < count; ++i) {
        const float x = limit < g[i] ? limit : g[i];
        const float y = u[i] < -limit ? -limit : limit < u[i] ? limit : u[i];
        g[i] = (x / (1.0f + lm_expf(alpha * (-x)))) * (y + 1.0f);
    }
}

void lm_glu(float *g, const float *u, size_t count, lm_ffn_act act)
{
    switch (act) {
    case LM_ACT_SWIGLU: swiglu_span(g, u, count); return;
    case LM_ACT_GEGLU_TANH: geglu_span(g, u, count); return;
    case LM_ACT_SWIGLU_OAI: swiglu_oai_span(g, u, count); return;
    }
    LM_ASSERT(!"lm_glu: unknown activation");
}

typedef struct glu_job {
    float *g;        /* [n][dim] */
    const float *u;  /* [n][dim] */
    uint32_t dim;
    lm_ffn_act act;
} glu_job;

static void glu_rows(void *arg, uint32_t begin, uint32_t end)
{
    const glu_job *j = arg;
    const size_t at = (size_t)begin * j->dim;
    lm_glu(j->g + at, j->u + at, (size_t)(end - begin) * j->dim, j->act);
}

/* RoPE on rows[n][n_heads][head_dim] at positions pos0..pos0+n-1. Pair i (i < n_rot/2) turns
 * by angle pos * theta^(-2i/n_rot): NORM pairs (2i, 2i+1), NEOX pairs (i, i + n_rot/2).
 * Dimensions >= n_rot pass through. a' = a*c - b*s, b' = a*s + b*c, each product rounded to
 * float (no FMA), c and s from the tables. */
typedef struct rope_job {
    const lm_rope_args *a;
    float *rows; /* [n][stride], heads at the start of each row */
} rope_job;

static void rope_rows(void *arg, uint32_t begin, uint32_t end)
{
    const rope_job *j = arg;
    const lm_rope_args *a = j->a;
    const uint32_t half = a->n_rot / 2;
    const uint32_t hd = a->head_dim;
    for (uint32_t t = begin; t < end; ++t) {
        const float *cs = a->cos_tab + (size_t)(a->pos0 + t) * half; /* [half] */
        const float *sn = a->sin_tab + (size_t)(a->pos0 + t) * half; /* [half] */
        for (uint32_t h = 0; h < a->n_heads; ++h) {
            float *v = j->rows + (size_t)t * a->stride + (size_t)h * hd; /* [head_dim] */
            for (uint32_t i = 0; i < half; ++i) {
                const uint32_t ia = a->neox ? i : 2 * i;
                const uint32_t ib = a->neox ? i + half : 2 * i + 1;
                const float x0 = v[ia], x1 = v[ib];
                v[ia] = x0 * cs[i] - x1 * sn[i];
                v[ib] = x0 * sn[i] + x1 * cs[i];
            }
        }
    }
}

void lm_gemm_nt_batch(lm_backend *be, uint32_t m, uint32_t k, float alpha, const float *a,
                      size_t lda, const lm_nt_part *p, uint32_t count)
{
    /* float32 B and B in blocks apart (each output's bits are its product's alone) */
    lm_nt_part f32[LM_NT_BATCH_MAX], blocks[LM_NT_BATCH_MAX];
    uint32_t n_f32 = 0, n_blocks = 0;
    LM_ASSERT(count <= LM_NT_BATCH_MAX);
    for (uint32_t i = 0; i < count; ++i) {
        if (p[i].bq.data != NULL)
            blocks[n_blocks++] = p[i];
        else
            f32[n_f32++] = p[i];
    }
    if (n_blocks > 0)
        lm_gemm_nt_blocks(be, m, k, alpha, a, lda, blocks, n_blocks);
    if (be->vt->gemm_nt_batch != NULL && n_f32 > 1) {
        be->vt->gemm_nt_batch(be, m, k, alpha, a, lda, f32, n_f32);
        return;
    }
    for (uint32_t i = 0; i < n_f32; ++i)
        be->vt->gemm_nt(be, m, f32[i].n, k, alpha, a, lda, f32[i].b, f32[i].ldb, f32[i].c,
                        f32[i].ldc);
}

void lm_gemm_nt_act(lm_backend *be, uint32_t site, uint32_t m, uint32_t k, const float *a,
                    size_t lda, const lm_nt_part *p, const lm_round_spec *const *act,
                    uint32_t count, float *scratch)
{
    LM_ASSERT(count <= LM_NT_BATCH_MAX);
    if (act == NULL || lm_profile_site(be->prof, site)->kind != LM_ROUND_VEC_DOT) {
        lm_gemm_nt_batch(be, m, k, 1.0f, a, lda, p, count);
        return;
    }
    bool done[LM_NT_BATCH_MAX] = {false};
    for (uint32_t i = 0; i < count; ++i) {
        if (done[i])
            continue;
        lm_nt_part group[LM_NT_BATCH_MAX];
        uint32_t n_group = 0;
        for (uint32_t j = i; j < count; ++j)
            if (!done[j] && act[j] == act[i]) {
                group[n_group++] = p[j];
                done[j] = true;
            }
        const float *in = a; /* [m][ld] */
        size_t ld = lda;
        if (act[i]->kind != LM_ROUND_NONE) {
            for (uint32_t t = 0; t < m; ++t)
                memcpy(scratch + (size_t)t * k, a + (size_t)t * lda, k * sizeof(float));
            lm_backend_round(be, scratch, m, k, k, site, act[i]);
            in = scratch;
            ld = k;
        }
        lm_gemm_nt_batch(be, m, k, 1.0f, in, ld, group, n_group);
    }
}

void lm_op_rmsnorm(lm_backend *be, lm_pool *pool, float *y, const float *x, const float *w,
                   uint32_t n, uint32_t dim, float eps)
{
    if (be->vt->rmsnorm != NULL) {
        be->vt->rmsnorm(be, y, x, w, n, dim, eps);
        return;
    }
    norm_job j = {y, x, w, dim, eps};
    lm_pool_for(pool, n, LM_POOL_MIN_ROWS, norm_rows, &j);
}

void lm_op_glu(lm_backend *be, lm_pool *pool, float *g, const float *u, uint32_t n, uint32_t dim,
               lm_ffn_act act)
{
    if (be->vt->glu != NULL) {
        be->vt->glu(be, g, u, n, dim, act);
        return;
    }
    glu_job j = {g, u, dim, act};
    lm_pool_for(pool, n, LM_POOL_MIN_ROWS, glu_rows, &j);
}

void lm_op_rope(lm_backend *be, lm_pool *pool, float *rows, uint32_t n, const lm_rope_args *a)
{
    if (be->vt->rope != NULL) {
        be->vt->rope(be, rows, n, a);
        return;
    }
    rope_job j = {a, rows};
    lm_pool_for(pool, n, LM_POOL_MIN_ROWS, rope_rows, &j);
}

void lm_add_bias(float *rows, const float *b, uint32_t n, uint32_t dim, size_t stride)
{
    for (uint32_t t = 0; t < n; ++t) {
        float *r = rows + (size_t)t * stride;
        for (uint32_t i = 0; i < dim; ++i)
            r[i] += b[i];
    }
}
