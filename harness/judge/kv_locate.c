/* kv_locate.c — the first K/V row outside the envelope (kv_locate.h). */
#include "judge/kv_locate.h"

#include "judge/compare.h"
#include "model/classify.h"

#include <math.h>
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
