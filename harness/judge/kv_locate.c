/* kv_locate.c — the first K/V row and the first hidden-state row outside the envelope
 * (kv_locate.h). */
#include "judge/kv_locate.h"

#include "judge/compare.h"
#include "model/classify.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Row p of one layer's tensor x (capture) and r (reference) against E e: whether it is outside,
 * and its error into *row_err. */
static int row_outside(bool *out, double *row_err, const float *x, const double *r, size_t n,
                       double e, lm_err *err)
{
    hx_verdict v;
    hx_metrics m;
    int rc = hx_classify_tensor(&v, &m, NULL, x, NULL, false, r, n, false, e, NAN, err);
    if (rc != LM_OK)
        return rc;
    *out = hx_class_fails(v.cls);
    *row_err = m.n_nonfinite > 0 || isnan(m.max_abs) ? (double)INFINITY : m.max_abs;
    return LM_OK;
}

int hx_kv_first_outside(hx_kv_first *out, const hx_capture *x, const ref_capture *ref,
                        const hx_envelope *env, lm_err *err)
{
    memset(out, 0, sizeof *out);
    out->layer = out->pos = -1;
    if (x->k == NULL)
        return LM_OK;
    const hx_capture_shape *s = &x->shape;
    int rc = hx_compare_check_shape(s, ref, "K/V rows", err);
    if (rc != LM_OK)
        return rc;
    if (env->n_layer != s->n_layer)
        return LM_FAIL(err, LM_E_INPUT, "envelope has %u layers, capture %u",
                       (unsigned)env->n_layer, (unsigned)s->n_layer);
    out->checked = true;
    const size_t n = (size_t)s->n_kv_head * s->head_dim;
    for (uint32_t l = 0; l < s->n_layer; ++l)
        for (uint32_t p = 0; p < s->n_prompt; ++p)
            for (int t = 0; t < 2; ++t) {
                const float *xr = (t ? x->v[l] : x->k[l]) + (size_t)p * n;
                const double *rr =
                    (t ? ref_capture_v(ref, l) : ref_capture_k(ref, l)) + (size_t)p * n;
                const double e = t ? env->v[l].e : env->k[l].e;
                bool outside = false;
                double row_err = 0.0;
                if ((rc = row_outside(&outside, &row_err, xr, rr, n, e, err)) != LM_OK)
                    return LM_FAIL(err, rc, "layer %u position %u %c: cannot classify",
                                   (unsigned)l, (unsigned)p, t ? 'V' : 'K');
                ++out->n_rows;
                if (!outside)
                    continue;
                if (out->n_outside++ == 0) {
                    out->layer = (int32_t)l;
                    out->pos = (int32_t)p;
                    out->tensor = t ? 'V' : 'K';
                    out->err = row_err;
                    out->e = e;
                }
            }
    return LM_OK;
}

/* err / E as the report states it: +Inf when E == 0 < err, 0 when both are 0. */
static double ratio_of(double e_err, double e)
{
    if (e > 0.0)
        return e_err / e;
    return e_err > 0.0 ? (double)INFINITY : 0.0;
}

/* Hidden state i (0: the embedding) of x against ref and env: its rows into out. */
static int hidden_state(hx_hidden_first *out, hx_hidden_state *st, const hx_capture *x,
                        const ref_capture *ref, const hx_envelope *env, uint32_t i, lm_err *err)
{
    const size_t n = x->n_embd;
    const double e = env->hidden[i].e;
    *st = (hx_hidden_state){.layer = (int32_t)i - 1, .e = e};
    for (uint32_t p = 0; p < x->shape.n_prompt; ++p) {
        bool outside = false;
        double row_err = 0.0;
        int rc = row_outside(&outside, &row_err, x->hidden[i] + (size_t)p * n,
                             ref_capture_hidden(ref, i) + (size_t)p * n, n, e, err);
        if (rc != LM_OK)
            return LM_FAIL(err, rc, "hidden state %u position %u: cannot classify", (unsigned)i,
                           (unsigned)p);
        ++out->n_rows;
        st->err = row_err > st->err ? row_err : st->err;
        if (!outside)
            continue;
        ++st->n_outside;
        if (out->n_outside++ == 0) {
            out->outside = true;
            out->layer = st->layer;
            out->pos = (int32_t)p;
            out->err = row_err;
            out->e = e;
        }
    }
    st->ratio = ratio_of(st->err, e);
    return LM_OK;
}

int hx_hidden_first_outside(hx_hidden_first *out, const hx_capture *x, const ref_capture *ref,
                            const hx_envelope *env, lm_err *err)
{
    memset(out, 0, sizeof *out);
    out->layer = out->pos = -1;
    if (x->hidden == NULL)
        return LM_OK;
    const hx_capture_shape *s = &x->shape;
    if (env->n_hidden == 0) {
        out->no_envelope = true;
        return LM_OK;
    }
    if (ref->hidden == NULL || ref->n_layer != s->n_layer || ref->n_prompt != s->n_prompt ||
        ref->n_embd != x->n_embd || env->n_hidden != s->n_layer + 1)
        return LM_FAIL(err, LM_E_INPUT, "hidden states: the capture (%u layers, %u positions, "
                       "%u wide), the reference (%u, %u, %u) and the envelope (%u states) "
                       "differ", (unsigned)s->n_layer, (unsigned)s->n_prompt,
                       (unsigned)x->n_embd, (unsigned)ref->n_layer, (unsigned)ref->n_prompt,
                       (unsigned)ref->n_embd, (unsigned)env->n_hidden);
    uint32_t held = 0;
    for (uint32_t i = 0; i <= s->n_layer; ++i)
        held += x->hidden[i] != NULL;
    out->states = calloc(held ? held : 1, sizeof *out->states);
    if (out->states == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    out->checked = true;
    for (uint32_t i = 0; i <= s->n_layer; ++i) {
        if (x->hidden[i] == NULL)
            continue;
        int rc = hidden_state(out, &out->states[out->n_states++], x, ref, env, i, err);
        if (rc != LM_OK)
            return rc;
    }
    return LM_OK;
}
