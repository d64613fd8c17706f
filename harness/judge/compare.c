/* compare.c — classify a configuration's capture against its baseline, the reference and the
 * envelope; build the envelope from an ensemble of captures. */
#include "compare.h"

#include <stdlib.h>
#include <string.h>

/* The reference's layout (kvd_ref.h): k, v [n_layer][n_prompt][n_kv_head][head_dim]; read
 * through the struct fields so the harness needs no reference code to compare. */
static const double *ref_k(const ref_capture *r, uint32_t l, size_t kv)
{
    return r->k + (size_t)l * kv;
}

static const double *ref_v(const ref_capture *r, uint32_t l, size_t kv)
{
    return r->v + (size_t)l * kv;
}

static int64_t ref_row(const ref_capture *r, uint32_t pos)
{
    for (uint32_t i = 0; i < r->n_pos; ++i)
        if (r->pos[i] == pos)
            return i;
    return -1;
}

static int64_t env_row(const hx_envelope *e, uint32_t pos)
{
    for (uint32_t i = 0; i < e->n_pos; ++i)
        if (e->positions[i] == pos)
            return i;
    return -1;
}

static int check_shape(const hx_capture_shape *s, const ref_capture *r, const char *what,
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
    int rc = check_shape(s, ref, c->config, err);
    if (rc != LM_OK)
        return rc;
    if (base && (rc = check_shape(&base->shape, ref, "baseline", err)) != LM_OK)
        return rc;
    if (env->n_layer != s->n_layer)
        return LM_FAIL(err, LM_E_INPUT, "envelope has %u layers, capture %u",
                       (unsigned)env->n_layer, (unsigned)s->n_layer);
    size_t kv = hx_capture_kv_elems(s);
    bool all_bitwise = base != NULL, first_base = true;
    char name[32];
    for (uint32_t l = 0; x->k != NULL && l < s->n_layer; ++l) {
        snprintf(name, sizeof name, "L%u.K", (unsigned)l);
        rc = add_row(c, name, x->k[l], base ? base->k[l] : NULL, ref_k(ref, l, kv), kv, false,
                     &env->k[l], &all_bitwise, &first_base, err);
        if (rc != LM_OK)
            return rc;
        snprintf(name, sizeof name, "L%u.V", (unsigned)l);
        rc = add_row(c, name, x->v[l], base ? base->v[l] : NULL, ref_v(ref, l, kv), kv, false,
                     &env->v[l], &all_bitwise, &first_base, err);
        if (rc != LM_OK)
            return rc;
    }
    size_t nv = s->n_vocab;
    hx_class *row_cls = calloc(s->n_pos ? s->n_pos : 1, sizeof *row_cls);
    if (row_cls == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "compare: out of memory");
    for (uint32_t i = 0; i < s->n_pos && rc == LM_OK; ++i) {
        uint32_t pos = x->positions[i];
        int64_t rr = ref_row(ref, pos), er = env_row(env, pos);
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

int hx_envelope_from_ensemble(hx_envelope **out, const hx_capture *const *members,
                              uint32_t n_members, const ref_capture *ref, double safety,
                              lm_err *err)
{
    *out = NULL;
    if (n_members < HX_ENVELOPE_MIN_MEMBERS)
        return LM_FAIL(err, LM_E_INPUT, "envelope: %u ensemble members, at least %u needed",
                       (unsigned)n_members, HX_ENVELOPE_MIN_MEMBERS);
    for (uint32_t m = 0; m < n_members; ++m) {
        int rc = check_shape(&members[m]->shape, ref, "ensemble member", err);
        if (rc != LM_OK)
            return rc;
    }
    hx_envelope *e;
    int rc = hx_envelope_create(&e, ref->n_layer, ref->n_pos, ref->pos, safety, err);
    if (rc != LM_OK)
        return rc;
    e->n_members = n_members;
    const float **ptr = malloc(n_members * sizeof *ptr);
    if (ptr == NULL) {
        hx_envelope_free(e);
        return LM_FAIL(err, LM_E_NOMEM, "envelope: out of memory");
    }
    size_t kv = (size_t)ref->n_prompt * ref->n_kv_head * ref->head_dim;
    for (uint32_t l = 0; l < ref->n_layer && rc == LM_OK; ++l) {
        for (uint32_t m = 0; m < n_members; ++m)
            ptr[m] = members[m]->k[l];
        rc = hx_env_tensor_measure(&e->k[l], ptr, n_members, ref_k(ref, l, kv), kv, false, safety,
                                   err);
        for (uint32_t m = 0; m < n_members && rc == LM_OK; ++m)
            ptr[m] = members[m]->v[l];
        if (rc == LM_OK)
            rc = hx_env_tensor_measure(&e->v[l], ptr, n_members, ref_v(ref, l, kv), kv, false,
                                       safety, err);
    }
    size_t nv = ref->n_vocab;
    for (uint32_t i = 0; i < ref->n_pos && rc == LM_OK; ++i) {
        for (uint32_t m = 0; m < n_members && rc == LM_OK; ++m) {
            int64_t row = hx_capture_row(members[m], ref->pos[i]);
            if (row < 0)
                rc = LM_FAIL(err, LM_E_INPUT, "envelope: member %u has no logits at position %u",
                             (unsigned)m, (unsigned)ref->pos[i]);
            else
                ptr[m] = members[m]->logits + (size_t)row * nv;
        }
        if (rc == LM_OK)
            rc = hx_env_tensor_measure(&e->logits[i], ptr, n_members, ref->logits + i * nv, nv,
                                       true, safety, err);
    }
    free(ptr);
    if (rc != LM_OK) {
        hx_envelope_free(e);
        return rc;
    }
    *out = e;
    return LM_OK;
}
