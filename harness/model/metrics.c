/* metrics.c — error statistics of float32 tensors and logits rows against float64 references. */
#include "model/metrics.h"

#include <math.h>
#include <string.h>

/* Order-preserving map of float32 bits onto integers: consecutive floats differ by 1,
 * +0 and -0 both map to 0, negative floats to negative integers. */
static int64_t ordered_key(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    int64_t mag = (int64_t)(u & 0x7fffffffu);
    return (u & 0x80000000u) ? -mag : mag;
}

uint64_t hx_ulp32(float x, double r)
{
    if (isnan(x) || isnan(r))
        return HX_ULP_NAN;
    int64_t d = ordered_key(x) - ordered_key((float)r);
    return (uint64_t)(d < 0 ? -d : d);
}

double hx_sig_digits(double err, double scale)
{
    if (isnan(err) || isinf(err) || isnan(scale))
        return 0.0;
    if (err == 0.0)
        return HX_SIG_DIGITS_MAX;
    if (scale == 0.0 || isinf(scale))
        return isinf(scale) ? HX_SIG_DIGITS_MAX : 0.0;
    double d = -log10(err / scale);
    if (d < 0.0)
        return 0.0;
    return d > HX_SIG_DIGITS_MAX ? HX_SIG_DIGITS_MAX : d;
}

/* NaN-propagating max: once NaN, stays NaN. */
static double nanmax(double a, double b)
{
    if (isnan(a) || isnan(b))
        return ((double)NAN);
    return a > b ? a : b;
}

static void compute(hx_metrics *out, const float *x, const double *rd, const float *rf, size_t n)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    double num = 0.0, den = 0.0; /* sum (x-R)^2 and sum R^2, index order */
    bool any_nan = false;
    for (size_t i = 0; i < n; ++i) {
        double xi = (double)x[i];
        double ri = rd ? rd[i] : (double)rf[i];
        if (!isfinite(x[i]))
            out->n_nonfinite++;
        float r32 = (float)ri;
        if (memcmp(&x[i], &r32, sizeof r32) != 0)
            out->n_diff_bits++;
        double d = fabs(xi - ri);
        if (isnan(d)) {
            any_nan = true;
        } else if (d > out->max_abs) {
            out->max_abs = d;
            out->argmax_abs = i;
        }
        double rel = ri != 0.0 ? d / fabs(ri) : (d == 0.0 ? 0.0 : ((double)INFINITY));
        out->max_rel = nanmax(out->max_rel, rel);
        uint64_t u = hx_ulp32(x[i], ri);
        if (u > out->max_ulp)
            out->max_ulp = u;
        num += d * d;
        den += ri * ri;
        out->r_absmax = nanmax(out->r_absmax, fabs(ri));
    }
    if (any_nan)
        out->max_abs = ((double)NAN);
    if (den == 0.0)
        out->nmse = num == 0.0 ? 0.0 : (isnan(num) ? ((double)NAN) : ((double)INFINITY));
    else
        out->nmse = num / den;
    out->sig_digits = out->n_nonfinite ? 0.0 : hx_sig_digits(out->max_abs, out->r_absmax);
    if (out->max_abs == 0.0)
        out->sig_digits = HX_SIG_DIGITS_MAX;
}

void hx_metrics_compute(hx_metrics *out, const float *x, const double *r, size_t n)
{
    compute(out, x, r, NULL, n);
}

void hx_metrics_compute_f32(hx_metrics *out, const float *x, const float *b, size_t n)
{
    compute(out, x, NULL, b, n);
}

void hx_metrics_merge_max(hx_metrics *a, const hx_metrics *b)
{
    a->n += b->n;
    a->n_nonfinite += b->n_nonfinite;
    a->n_diff_bits += b->n_diff_bits;
    if (isnan(b->max_abs) || (!isnan(a->max_abs) && b->max_abs > a->max_abs))
        a->argmax_abs = b->argmax_abs;
    a->max_abs = nanmax(a->max_abs, b->max_abs);
    a->max_rel = nanmax(a->max_rel, b->max_rel);
    if (b->max_ulp > a->max_ulp)
        a->max_ulp = b->max_ulp;
    a->nmse = nanmax(a->nmse, b->nmse);
    a->r_absmax = nanmax(a->r_absmax, b->r_absmax);
    if (b->sig_digits < a->sig_digits)
        a->sig_digits = b->sig_digits;
}

int32_t hx_argmax_f32(const float *x, size_t n)
{
    int32_t best = -1;
    for (size_t i = 0; i < n; ++i)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best]))
            best = (int32_t)i;
    return best;
}

int32_t hx_argmax_f64(const double *r, size_t n)
{
    int32_t best = -1;
    for (size_t i = 0; i < n; ++i)
        if (!isnan(r[i]) && (best < 0 || r[i] > r[best]))
            best = (int32_t)i;
    return best;
}

/* Insertion into a best-first list of k ids: strictly greater values go first, so equal
 * values keep index order (ties to the lower id). */
#define TOPK_BODY(x)                                                                   \
    size_t m = 0;                                                                      \
    for (size_t i = 0; i < n; ++i) {                                                   \
        if (isnan(x[i]))                                                               \
            continue;                                                                  \
        if (m == k && !(x[i] > x[ids[k - 1]]))                                         \
            continue;                                                                  \
        size_t j = m < k ? m++ : k - 1;                                                \
        while (j > 0 && x[i] > x[ids[j - 1]]) {                                        \
            ids[j] = ids[j - 1];                                                       \
            --j;                                                                       \
        }                                                                              \
        ids[j] = (int32_t)i;                                                           \
    }                                                                                  \
    return m;

size_t hx_topk_f32(int32_t *ids, const float *x, size_t n, size_t k)
{
    if (k == 0)
        return 0;
    TOPK_BODY(x)
}

size_t hx_topk_f64(int32_t *ids, const double *r, size_t n, size_t k)
{
    if (k == 0)
        return 0;
    TOPK_BODY(r)
}

double hx_kl_softmax(const float *x, const double *r, size_t n)
{
    if (n == 0)
        return 0.0;
    double mx = -((double)INFINITY), mr = -((double)INFINITY);
    for (size_t i = 0; i < n; ++i) {
        if (!isfinite(x[i]) || !isfinite(r[i]))
            return ((double)NAN);
        if ((double)x[i] > mx)
            mx = (double)x[i];
        if (r[i] > mr)
            mr = r[i];
    }
    double sx = 0.0, sr = 0.0; /* sum exp(v - max), index order */
    for (size_t i = 0; i < n; ++i) {
        sx += exp((double)x[i] - mx);
        sr += exp(r[i] - mr);
    }
    double lx = mx + log(sx), lr = mr + log(sr); /* log-sum-exp of each row */
    double kl = 0.0;
    for (size_t i = 0; i < n; ++i) {
        double logp = r[i] - lr;
        double p = exp(logp);
        if (p == 0.0)
            continue;
        kl += p * (logp - ((double)x[i] - lx));
    }
    return kl < 0.0 ? 0.0 : kl;
}

void hx_logit_metrics_compute(hx_logit_metrics *out, const float *x, const double *r, size_t n)
{
    memset(out, 0, sizeof *out);
    out->top1_x = hx_argmax_f32(x, n);
    out->top1_r = hx_argmax_f64(r, n);
    out->top1_agree = out->top1_x == out->top1_r;
    int32_t tx[HX_TOPK], tr[HX_TOPK];
    size_t nx = hx_topk_f32(tx, x, n, HX_TOPK), nr = hx_topk_f64(tr, r, n, HX_TOPK);
    for (size_t i = 0; i < nx; ++i)
        for (size_t j = 0; j < nr; ++j)
            out->top5_overlap += tx[i] == tr[j];
    out->r_margin = nr >= 2 ? r[tr[0]] - r[tr[1]] : ((double)INFINITY);
    out->r_gap = (out->top1_x >= 0 && out->top1_r >= 0) ? r[out->top1_r] - r[out->top1_x] : ((double)NAN);
    out->kl = hx_kl_softmax(x, r, n);
}

void hx_logit_agg_init(hx_logit_agg *a)
{
    memset(a, 0, sizeof *a);
    a->min_r_margin = ((double)INFINITY);
}

void hx_logit_agg_add(hx_logit_agg *a, const hx_logit_metrics *m)
{
    a->n_pos++;
    a->n_top1_agree += m->top1_agree;
    a->kl_sum += m->kl;
    a->kl_max = nanmax(a->kl_max, m->kl);
    a->top5_overlap_sum += (double)m->top5_overlap;
    if (m->r_margin < a->min_r_margin)
        a->min_r_margin = m->r_margin;
}

double hx_logit_agg_kl_mean(const hx_logit_agg *a)
{
    return a->n_pos ? a->kl_sum / (double)a->n_pos : 0.0;
}

double hx_logit_agg_top1_rate(const hx_logit_agg *a)
{
    return a->n_pos ? (double)a->n_top1_agree / (double)a->n_pos : 1.0;
}

double hx_logit_agg_top5_mean(const hx_logit_agg *a)
{
    return a->n_pos ? a->top5_overlap_sum / (double)a->n_pos : 0.0;
}
