/* compare.c — classify a configuration's capture against its baseline, the reference and the
 * envelope; build the envelope from an ensemble of captures. */
#include "judge/compare.h"
#include "kvd_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int hx_compare_check_shape(const hx_capture_shape *s, const ref_capture *r, const char *what,
                           lm_err *err)
{
    if (s->n_layer != r->n_layer || s->n_kv_head != r->n_kv_head || s->head_dim != r->head_dim ||
        s->n_vocab != r->n_vocab || s->n_prompt != r->n_prompt)
        return LM_FAIL(err, LM_E_INPUT,
                       "%s: shape %u layers x %u kv heads x %u dims, vocab %u, prompt %u does not "
                       "match the reference's %u x %u x %u, %u, %u",
                       what, (unsigned)s->n_layer, (unsigned)s->n_kv_head, (unsigned)s->head_dim,
                       (unsigned)s->n_vocab, (unsigned)s->n_prompt, (unsigned)r->n_layer,
                       (unsigned)r->n_kv_head, (unsigned)r->head_dim, (unsigned)r->n_vocab,
                       (unsigned)r->n_prompt);
    return LM_OK;
}

/* Classifies one tensor and appends its row; folds x vs base into c->vs_base. */
static int add_row(hx_config_report *c, const char *name, const float *x, const float *b,
                   const double *r, size_t n, bool is_logits, const hx_env_tensor *et,
                   bool *all_bitwise, bool *first_base, lm_err *err)
{
    hx_tensor_row row = {0};
    snprintf(row.name, sizeof row.name, "%s", name);
    row.is_logits = is_logits;
    row.e = et->e;
    row.e_gap = et->e_gap;
    hx_verdict v;
    int rc = hx_classify_tensor(&v, &row.vs_ref, &row.lg, x, b, false, r, n, is_logits, et->e,
                                et->e_gap, err);
    if (rc != LM_OK)
        return LM_FAIL(err, rc, "%s: cannot classify", name);
    row.cls = v.cls;
    memcpy(row.reason, v.reason, sizeof row.reason);
    if (b) {
        hx_metrics mb;
        hx_metrics_compute_f32(&mb, x, b, n);
        if (*first_base)
            c->vs_base = mb;
        else
            hx_metrics_merge_max(&c->vs_base, &mb);
        *first_base = false;
        *all_bitwise &= memcmp(x, b, n * sizeof *x) == 0;
    }
    return hx_config_report_add_row(c, &row, err);
}

/* Rotating caches need nothing special here: x holds K/V per logical position (evicted ones
 * included, as written during prefill) and ref is the reference with x's own schedule, so
 * rows pair up by position exactly as with the plain cache (compare.h, capture.h). */
int hx_compare_capture(hx_config_report *c, const hx_capture *x, const hx_capture *base,
                       const ref_capture *ref, const hx_envelope *env, lm_err *err)
{
    const hx_capture_shape *s = &x->shape;
    int rc = hx_compare_check_shape(s, ref, c->config, err);
    if (rc != LM_OK)
        return rc;
    if (base && (rc = hx_compare_check_shape(&base->shape, ref, "baseline", err)) != LM_OK)
        return rc;
    if (env->n_layer != s->n_layer)
        return LM_FAIL(err, LM_E_INPUT, "envelope has %u layers, capture %u",
                       (unsigned)env->n_layer, (unsigned)s->n_layer);
    size_t kv = hx_capture_kv_elems(s);
    bool all_bitwise = base != NULL, first_base = true;
    char name[32];
    for (uint32_t l = 0; x->k != NULL && l < s->n_layer; ++l) {
        snprintf(name, sizeof name, "L%u.K", (unsigned)l);
        rc = add_row(c, name, x->k[l], base ? base->k[l] : NULL, ref_capture_k(ref, l), kv, false,
                     &env->k[l], &all_bitwise, &first_base, err);
        if (rc != LM_OK)
            return rc;
        snprintf(name, sizeof name, "L%u.V", (unsigned)l);
        rc = add_row(c, name, x->v[l], base ? base->v[l] : NULL, ref_capture_v(ref, l), kv, false,
                     &env->v[l], &all_bitwise, &first_base, err);
        if (rc != LM_OK)
            return rc;
    }
    size_t nv = s->n_vocab;
    /* The prompt's rows before its last position, where x, the reference and the envelope all
     * hold them (the sweep asks for them when their cost allows): classified like every logits
     * row, so a near tie inside the prompt is a TIE_FLIP and a real one a FLIP. */
    for (uint32_t pos = 0; pos < x->n_prompt_rows && rc == LM_OK; ++pos) {
        int64_t rr = ref_capture_find_pos(ref, pos);
        int64_t er = lm_index_of_u32(env->positions, env->n_pos, pos);
        if (rr < 0 || er < 0)
            continue;
        const float *br = base ? hx_capture_logits_at(base, pos) : NULL;
        if (base && br == NULL)
            all_bitwise = false;
        snprintf(name, sizeof name, "logits@%u", (unsigned)pos);
        rc = add_row(c, name, x->prompt_logits + (size_t)pos * nv, br,
                     ref->logits + (size_t)rr * nv, nv, true, &env->logits[er], &all_bitwise,
                     &first_base, err);
    }
    if (rc != LM_OK)
        return rc;
    hx_class *row_cls = calloc(s->n_pos ? s->n_pos : 1, sizeof *row_cls);
    if (row_cls == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "compare: out of memory");
    for (uint32_t i = 0; i < s->n_pos && rc == LM_OK; ++i) {
        uint32_t pos = x->positions[i];
        int64_t rr = ref_capture_find_pos(ref, pos), er = lm_index_of_u32(env->positions, env->n_pos, pos);
        int64_t br = base ? hx_capture_row(base, pos) : -1;
        if (rr < 0 || er < 0) {
            rc = LM_FAIL(err, LM_E_INPUT, "%s: logits position %u is not in the %s", c->config,
                         (unsigned)pos, rr < 0 ? "reference" : "envelope");
            break;
        }
        snprintf(name, sizeof name, "logits@%u", (unsigned)pos);
        if (base && br < 0)
            all_bitwise = false;
        rc = add_row(c, name, x->logits + i * nv, br >= 0 ? base->logits + (size_t)br * nv : NULL,
                     ref->logits + (size_t)rr * nv, nv, true, &env->logits[er], &all_bitwise,
                     &first_base, err);
        row_cls[i] = c->rows[c->n_rows - 1].cls;
    }
    if (rc == LM_OK) {
        if (base)
            all_bitwise &= base->shape.n_tokens == s->n_tokens && base->shape.n_pos == s->n_pos &&
                           memcmp(base->tokens, x->tokens, s->n_tokens * sizeof *x->tokens) == 0;
        c->bitwise_baseline = all_bitwise;
        int64_t g = hx_first_divergence(x->tokens + s->n_prompt, s->n_tokens - s->n_prompt,
                                        ref->tokens + ref->n_prompt,
                                        ref->n_tokens - ref->n_prompt);
        /* Only the tokens both sides generated are compared: a shorter run is not a split. */
        size_t common = s->n_tokens - s->n_prompt;
        if (ref->n_tokens - ref->n_prompt < common)
            common = ref->n_tokens - ref->n_prompt;
        if (g >= 0 && (size_t)g < common) {
            int64_t row = hx_capture_row(x, s->n_prompt - 1 + (uint32_t)g);
            hx_class at = row >= 0 ? row_cls[row] : HX_FLIP;
            hx_config_report_set_divergence(c, g, at);
        }
    }
    free(row_cls);
    return rc;
}

void hx_compare_semantic(hx_config_report *c, const ref_capture *a, const ref_capture *b)
{
    c->sem_checked = true;
    c->sem_first = -1;
    c->sem_max_abs = 0.0;
    c->sem_min_margin = INFINITY;
    size_t nv = b->n_vocab;
    for (uint32_t i = 0; i < b->n_pos; ++i) {
        int64_t ra = ref_capture_find_pos(a, b->pos[i]);
        if (ra < 0)
            continue;
        const double *x = ref_capture_logits(a, (uint32_t)ra); /* [n_vocab] */
        const double *y = ref_capture_logits(b, i);            /* [n_vocab] */
        double top1 = -INFINITY, top2 = -INFINITY;
        for (size_t v = 0; v < nv; ++v) {
            double d = fabs(x[v] - y[v]);
            if (d > c->sem_max_abs)
                c->sem_max_abs = d;
            if (y[v] > top1) {
                top2 = top1;
                top1 = y[v];
            } else if (y[v] > top2) {
                top2 = y[v];
            }
        }
        if (top1 - top2 < c->sem_min_margin)
            c->sem_min_margin = top1 - top2;
        /* row i is at position n_prompt-1+j: generated index j (prompt rows before it count in
         * the largest difference and the margin only) */
        if (c->sem_first < 0 && b->pos[i] + 1 >= b->n_prompt &&
            hx_argmax_f64(x, nv) != hx_argmax_f64(y, nv))
            c->sem_first = (int64_t)b->pos[i] - (int64_t)(b->n_prompt - 1);
    }
}
