/* attention_stream.c — streaming (online-softmax) and masked dense attention of a chunk over
 * the KV cache, with sliding windows, per-slot positions (rotating caches) and sink logits.
 * The rules and orders are stated in attention_stream.h; the matrix products go through the
 * backend, everything elementwise is fixed-order C here. */
/* The elementwise loops here are independent per element (no reduction is reordered), so
 * vectorizing them changes no bit (the same reasoning and options as attention.c); it comes
 * before the includes so that lm_expf, inlined into those loops, gets the same options. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-loop-vectorize", "no-trapping-math")
#endif

#include "attention_stream.h"

#include "attention_mend.h"
#include "expf.h"
#include "kvd_defects.h"
#include "kvd_engine.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* s[j] = lm_expf(s[j] - mx): a loop of its own so that it is vectorized. */
static void exp_shifted(float *s /* [n] */, size_t n, float mx)
{
    for (size_t j = 0; j < n; ++j)
        s[j] = lm_expf(s[j] - mx);
}

void lm_attn_visible_range(uint32_t q_pos, uint32_t window, uint32_t *lo, uint32_t *hi)
{
    *hi = q_pos + 1;
    *lo = (window == 0 || q_pos + 1 <= window) ? 0 : q_pos + 1 - window;
}

static int32_t slot_pos(const int32_t *kv_pos, uint32_t j)
{
    return kv_pos != NULL ? kv_pos[j] : (int32_t)j;
}

void lm_attn_mask_fill(float *mask, uint32_t n, uint32_t pos0, const int32_t *kv_pos,
                       uint32_t n_kv, uint32_t window)
{
    for (uint32_t i = 0; i < n; ++i)
        for (uint32_t j = 0; j < n_kv; ++j)
            mask[(size_t)i * n_kv + j] =
                lm_attn_visible(pos0 + i, slot_pos(kv_pos, j), window) ? 0.0f : -INFINITY;
}

uint32_t lm_softmax_sink_row(float *s, const float *mask, uint32_t n, const float *sink)
{
    float mx = -INFINITY;
    uint32_t n_vis = 0;
    for (uint32_t j = 0; j < n; ++j)
        if (mask == NULL || mask[j] == 0.0f) {
            mx = s[j] > mx ? s[j] : mx;
            ++n_vis;
        }
    if (sink != NULL)
        mx = *sink > mx ? *sink : mx;
    if (n_vis == 0 && sink == NULL) {
        for (uint32_t j = 0; j < n; ++j)
            s[j] = 0.0f;
        return 0;
    }
    float sum = 0.0f;
    for (uint32_t j = 0; j < n; ++j) {
        if (mask == NULL || mask[j] == 0.0f) {
            s[j] = lm_expf(s[j] - mx);
            sum += s[j];
        } else {
            s[j] = 0.0f;
        }
    }
    if (sink != NULL)
        sum += lm_expf(*sink - mx);
    for (uint32_t j = 0; j < n; ++j)
        s[j] = s[j] / sum;
    return n_vis;
}

size_t lm_attn_stream_scratch(uint32_t head_dim, uint32_t tile)
{
    if (tile == 0)
        tile = LM_ATTN_STREAM_TILE;
    /* scores [QB][tile], P.V tile [QB][hd], acc [QB][hd], m, l, alpha [QB] each */
    return (size_t)LM_ATTN_STREAM_QB * tile + 2 * (size_t)LM_ATTN_STREAM_QB * head_dim +
           3 * (size_t)LM_ATTN_STREAM_QB;
}

size_t lm_attn_masked_scratch(uint32_t n, uint32_t n_kv)
{
    return (size_t)n * n_kv + n_kv; /* scores [n][n_kv], one mask row [n_kv] */
}

/* Slots [*k_lo, *k_hi) that can hold a key visible to some query of positions [q0, q1]:
 * for a plain cache the causal/window range of the block; for a remapped cache every slot. */
static void block_key_range(const lm_attn_var_args *a, uint32_t q0, uint32_t q1, uint32_t *k_lo,
                            uint32_t *k_hi)
{
    if (a->kv_pos != NULL) {
        *k_lo = 0;
        *k_hi = a->n_kv;
        return;
    }
    uint32_t lo, hi_unused;
    lm_attn_visible_range(q0, a->window, &lo, &hi_unused);
    *k_lo = lo < a->n_kv ? lo : a->n_kv;
    *k_hi = q1 + 1 < a->n_kv ? q1 + 1 : a->n_kv;
}

/* The P . V rows of queries [q0, ...) over slots [k0, ...), as lm_attn_pv_mend sees them. */
typedef struct var_view {
    const lm_attn_var_args *a;
    uint32_t q0; /* chunk row of the product's row 0 */
    uint32_t k0; /* slot of the product's key 0 */
} var_view;

static bool var_key_visible(const void *ctx, uint32_t r, uint32_t j)
{
    const var_view *w = ctx;
    return lm_attn_var_visible(w->a, w->a->pos0 + w->q0 + r, w->k0 + j);
}

void lm_attention_stream(lm_backend *be, const lm_attn_var_args *a)
{
    const uint32_t hd = a->head_dim;
    const uint32_t tile = a->tile ? a->tile : LM_ATTN_STREAM_TILE;
    const uint32_t group = a->n_head / a->n_head_kv;
    const size_t q_stride = (size_t)a->n_head * hd;     /* floats between query rows */
    const size_t kv_stride = (size_t)a->n_head_kv * hd; /* floats between cache slots */
    LM_ASSERT(a->scratch_floats >= lm_attn_stream_scratch(hd, tile));
    LM_ASSERT(a->cache_max == 0 || a->kv_pos != NULL); /* the plain-cache ranges ignore it */
    float *sc = a->scratch;                               /* [QB][tile] scores, then P */
    float *pv = sc + (size_t)LM_ATTN_STREAM_QB * tile;    /* [QB][hd] P . V of one tile */
    float *acc = pv + (size_t)LM_ATTN_STREAM_QB * hd;     /* [QB][hd] running numerator */
    float *m = acc + (size_t)LM_ATTN_STREAM_QB * hd;      /* [QB] running max */
    float *l = m + LM_ATTN_STREAM_QB;                     /* [QB] running denominator */
    float *alpha = l + LM_ATTN_STREAM_QB;                 /* [QB] rescale of this tile */
    const bool skip_tile_key = LM_DEFECT_ON(be->vt->name, LM_DEFECT_STREAM_TILE_SKIPS_KEY);

    for (uint32_t h = 0; h < a->n_head; ++h) {
        const uint32_t g = h / group;
        const float *kg = a->k + (size_t)g * hd; /* [n_kv][hd], row stride kv_stride */
        const float *vg = a->v + (size_t)g * hd; /* [n_kv][hd], row stride kv_stride */
        for (uint32_t i0 = 0; i0 < a->n; i0 += LM_ATTN_STREAM_QB) {
            const uint32_t qb = a->n - i0 < LM_ATTN_STREAM_QB ? a->n - i0 : LM_ATTN_STREAM_QB;
            const float *qh = a->q + (size_t)i0 * q_stride + (size_t)h * hd; /* [qb][hd] */
            for (uint32_t r = 0; r < qb; ++r) {
                m[r] = a->sinks != NULL ? a->sinks[h] : -INFINITY;
                l[r] = a->sinks != NULL ? 1.0f : 0.0f;
                memset(acc + (size_t)r * hd, 0, hd * sizeof(float));
            }
            uint32_t k_lo, k_hi;
            block_key_range(a, a->pos0 + i0, a->pos0 + i0 + qb - 1, &k_lo, &k_hi);
            /* tiles fixed in slot space: [t0, t0 + tile) with t0 a multiple of tile */
            for (uint32_t t0 = k_lo / tile * tile; t0 < k_hi; t0 += tile) {
                const uint32_t tn = a->n_kv - t0 < tile ? a->n_kv - t0 : tile;
                /* plain cache: the block's rows see the contiguous union [k_lo, k_hi), so
                 * every tile here has a visible key; remapped: tile_used decides below */
                be->vt->gemm_nt(be, qb, tn, hd, a->scale, qh, q_stride,
                                kg + (size_t)t0 * kv_stride, kv_stride, sc, tn);
                bool tile_used = false;
                for (uint32_t r = 0; r < qb; ++r) {
                    float *srow = sc + (size_t)r * tn; /* [tn] */
                    const uint32_t qp = a->pos0 + i0 + r;
                    uint32_t j_lo = 0, j_hi = 0;        /* plain cache: visible [j_lo, j_hi) */
                    if (a->kv_pos == NULL) {
                        uint32_t lo, hi;
                        lm_attn_visible_range(qp, a->window, &lo, &hi);
                        j_lo = lo > t0 ? lo - t0 : 0;
                        j_hi = hi < t0 + tn ? (hi > t0 ? hi - t0 : 0) : tn;
                        j_lo = j_lo < j_hi ? j_lo : j_hi;
                        if (skip_tile_key && t0 > 0 && j_lo == 0 && j_hi > 0)
                            j_lo = 1; /* test defect: a later tile starts one key late */
                    }
                    float mt = -INFINITY;
                    uint32_t nv = 0;
                    if (a->kv_pos == NULL) {
                        for (uint32_t j = j_lo; j < j_hi; ++j)
                            mt = srow[j] > mt ? srow[j] : mt;
                        nv = j_hi - j_lo;
                    } else {
                        for (uint32_t j = 0; j < tn; ++j)
                            if (lm_attn_var_visible(a, qp, t0 + j)) {
                                mt = srow[j] > mt ? srow[j] : mt;
                                ++nv;
                            }
                    }
                    if (nv == 0) { /* nothing visible: this row keeps its state */
                        alpha[r] = 1.0f;
                        for (uint32_t j = 0; j < tn; ++j)
                            srow[j] = 0.0f;
                        continue;
                    }
                    tile_used = true;
                    const float mn = mt > m[r] ? mt : m[r];
                    /* m[r] = -inf (no sink, first visible tile): lm_expf(-inf) = +0 */
                    alpha[r] = lm_expf(m[r] - mn);
                    float sum = 0.0f;
                    if (a->kv_pos == NULL) {
                        for (uint32_t j = 0; j < j_lo; ++j)
                            srow[j] = 0.0f;
                        exp_shifted(srow + j_lo, j_hi - j_lo, mn);
                        for (uint32_t j = j_lo; j < j_hi; ++j)
                            sum += srow[j];
                        for (uint32_t j = j_hi; j < tn; ++j)
                            srow[j] = 0.0f;
                    } else {
                        for (uint32_t j = 0; j < tn; ++j) {
                            if (lm_attn_var_visible(a, qp, t0 + j)) {
                                srow[j] = lm_expf(srow[j] - mn);
                                sum += srow[j];
                            } else {
                                srow[j] = 0.0f;
                            }
                        }
                    }
                    l[r] = l[r] * alpha[r] + sum;
                    m[r] = mn;
                }
                if (!tile_used)
                    continue;
                /* SR ensemble and profiles: the weights P . V reads, as in dense attention; the
                 * tile's number in the site keeps each key's coins its own whatever the chunk
                 * (tiles are fixed in slot space; heads < 256 and tiles < 65536 keep the fields
                 * apart) */
                lm_backend_perturb(be, sc, qb, tn, tn,
                                   LM_SITE_SOFTMAX | h << 8 | (t0 / tile) << 16);
                be->vt->gemm_nn(be, qb, hd, tn, sc, tn, vg + (size_t)t0 * kv_stride, kv_stride,
                                pv, hd);
                const var_view view = {a, i0, t0};
                lm_attn_pv_mend(be, false, qb, hd, tn, sc, tn, vg + (size_t)t0 * kv_stride,
                                kv_stride, pv, hd, var_key_visible, &view);
                for (uint32_t r = 0; r < qb; ++r) {
                    float *ar = acc + (size_t)r * hd;
                    const float *pr = pv + (size_t)r * hd;
                    for (uint32_t d = 0; d < hd; ++d)
                        ar[d] = ar[d] * alpha[r] + pr[d];
                }
            }
            for (uint32_t r = 0; r < qb; ++r) {
                float *o = a->out + (size_t)(i0 + r) * q_stride + (size_t)h * hd; /* [hd] */
                const float *ar = acc + (size_t)r * hd;
                for (uint32_t d = 0; d < hd; ++d)
                    o[d] = l[r] > 0.0f ? ar[d] / l[r] : 0.0f;
            }
        }
    }
}

void lm_attention_masked(lm_backend *be, const lm_attn_var_args *a)
{
    const uint32_t hd = a->head_dim;
    const uint32_t group = a->n_head / a->n_head_kv;
    const size_t q_stride = (size_t)a->n_head * hd;
    const size_t kv_stride = (size_t)a->n_head_kv * hd;
    const uint32_t n_kv = a->n_kv;
    LM_ASSERT(a->scratch_floats >= lm_attn_masked_scratch(a->n, n_kv));
    LM_ASSERT(a->cache_max == 0 || a->kv_pos != NULL); /* block_key_range assumes it */
    float *s = a->scratch;                     /* [n][n_kv] */
    float *mask = s + (size_t)a->n * n_kv;     /* [n_kv] one row */
    uint32_t k_lo, k_hi;
    block_key_range(a, a->pos0, a->pos0 + a->n - 1, &k_lo, &k_hi);
    /* A backend that rounds stochastically draws the coin of a product's term l by l
     * (backend_naive_sr.c) and perturbs P by its index within the row: it is given the keys
     * from slot 0, as dense attention gives them, so that each key keeps its coins whatever
     * the chunk (the keys before the window have probability +0 and add nothing). */
    if (be->flags & LM_BE_STOCHASTIC_ROUNDING)
        k_lo = 0;
    const uint32_t nk = k_hi - k_lo;           /* slots the chunk can see */

    for (uint32_t h = 0; h < a->n_head; ++h) {
        const uint32_t g = h / group;
        const float *qh = a->q + (size_t)h * hd;                        /* [n][hd] */
        const float *kg = a->k + (size_t)k_lo * kv_stride + (size_t)g * hd; /* [nk][hd] */
        const float *vg = a->v + (size_t)k_lo * kv_stride + (size_t)g * hd; /* [nk][hd] */
        float *oh = a->out + (size_t)h * hd;                            /* [n][hd] */
        be->vt->gemm_nt(be, a->n, nk, hd, a->scale, qh, q_stride, kg, kv_stride, s, nk);
        for (uint32_t i = 0; i < a->n; ++i) {
            for (uint32_t j = 0; j < nk; ++j)
                mask[j] = lm_attn_var_visible(a, a->pos0 + i, k_lo + j) ? 0.0f : -INFINITY;
            lm_softmax_sink_row(s + (size_t)i * nk, mask, nk,
                                a->sinks != NULL ? &a->sinks[h] : NULL);
        }
        /* SR ensemble and profiles: the probabilities P . V reads, as in dense attention */
        lm_backend_perturb(be, s, a->n, nk, nk, LM_SITE_SOFTMAX | h << 8);
        be->vt->gemm_nn(be, a->n, hd, nk, s, nk, vg, kv_stride, oh, q_stride);
        const var_view view = {a, 0, k_lo};
        lm_attn_pv_mend(be, false, a->n, hd, nk, s, nk, vg, kv_stride, oh, q_stride,
                        var_key_visible, &view);
    }
}
