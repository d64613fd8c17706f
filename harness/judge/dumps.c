/* dumps.c — KL statistics, the explaining profile, greedy departure, dump against dump. */
#include "judge/dumps.h"

#include "model/metrics.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

double hx_percentile_sorted(const double *v, uint32_t n, double f)
{
    if (f <= 0.0)
        return v[0];
    if (f >= 1.0)
        return v[n - 1];
    double p = f * (double)(n - 1);
    uint32_t i = (uint32_t)p;
    p -= (double)i;
    uint32_t j = i + 1 < n ? i + 1 : n - 1;
    return (1.0 - p) * v[i] + p * v[j];
}

void hx_kl_stats_compute(hx_kl_stats *out, double *kl, uint32_t n, uint32_t n_same)
{
    memset(out, 0, sizeof *out);
    out->n = n;
    out->same_top1 = n ? (double)n_same / (double)n : 1.0;
    if (n == 0)
        return;
    double sum = 0.0;
    for (uint32_t i = 0; i < n; ++i) /* in row order, before sorting */
        sum += kl[i];
    out->mean = sum / (double)n;
    qsort(kl, n, sizeof *kl, cmp_double);
    out->max = kl[n - 1];
    out->p999 = hx_percentile_sorted(kl, n, 0.999);
    out->p99 = hx_percentile_sorted(kl, n, 0.99);
    out->p90 = hx_percentile_sorted(kl, n, 0.90);
    out->median = hx_percentile_sorted(kl, n, 0.5);
}

int hx_explain_profile(const hx_class *cls, const double *e_scale, const bool *idle, uint32_t n)
{
    int best = -1;
    for (uint32_t k = 0; k < n; ++k)
        if ((idle == NULL || !idle[k]) && !hx_class_fails(cls[k]) &&
            (best < 0 || e_scale[k] < e_scale[best]))
            best = (int)k;
    return best;
}

int64_t hx_greedy_departure(const int32_t *gen, uint32_t n_gen, const int32_t *path,
                            uint32_t n_path, const int32_t *r_top, uint32_t *compared)
{
    *compared = 0;
    for (uint32_t j = 0; j < n_gen && j <= n_path; ++j) {
        if (j > 0 && (j - 1 >= n_path || gen[j - 1] != path[j - 1]))
            break; /* the rows after this are on another path than gen's */
        if (r_top[j] < 0)
            break;
        ++*compared;
        if (gen[j] != r_top[j])
            return (int64_t)j;
    }
    return -1;
}

int hx_departure_find(hx_departure *out, const int32_t *gen, uint32_t n_gen,
                      const int32_t *path, uint32_t n_path, const double *const *r_rows,
                      uint32_t n_vocab, lm_err *err)
{
    *out = (hx_departure){.at = -1, .chose = -1, .ref_top = -1, .margin = NAN};
    int32_t *top = malloc(((size_t)n_path + 1) * sizeof *top);
    if (top == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (uint32_t j = 0; j <= n_path; ++j)
        top[j] = r_rows[j] ? hx_argmax_f64(r_rows[j], n_vocab) : -1;
    out->at = hx_greedy_departure(gen, n_gen, path, n_path, top, &out->compared);
    if (out->at >= 0) {
        const double *r = r_rows[out->at];
        out->chose = gen[out->at];
        out->ref_top = top[out->at];
        out->margin = r[out->ref_top] - r[out->chose];
    }
    free(top);
    return LM_OK;
}

void hx_dump_pair_compare(hx_dump_pair *out, const float *a, const float *b, const double *r,
                          const double *e, const uint32_t *pos, uint32_t n, uint32_t n_vocab)
{
    out->n_shared = n;
    out->max_abs = 0.0;
    out->first_apart = out->first_argmax = -1;
    double kla = 0.0, klb = 0.0;
    for (uint32_t i = 0; i < n; ++i) {
        const float *x = a + (size_t)i * n_vocab, *y = b + (size_t)i * n_vocab;
        const double *ri = r + (size_t)i * n_vocab;
        double m = 0.0;
        for (uint32_t v = 0; v < n_vocab; ++v) {
            double d = fabs((double)x[v] - (double)y[v]);
            if (d > m)
                m = d;
        }
        if (m > out->max_abs)
            out->max_abs = m;
        bool flip = hx_argmax_f32(x, n_vocab) != hx_argmax_f32(y, n_vocab);
        if (flip && out->first_argmax < 0)
            out->first_argmax = pos[i];
        if ((flip || m > e[i]) && out->first_apart < 0)
            out->first_apart = pos[i];
        kla += hx_kl_softmax(x, ri, n_vocab);
        klb += hx_kl_softmax(y, ri, n_vocab);
    }
    out->kl_mean_a = n ? kla / (double)n : 0.0;
    out->kl_mean_b = n ? klb / (double)n : 0.0;
    snprintf(out->closer, sizeof out->closer, "%s",
             out->kl_mean_a < out->kl_mean_b ? "a" : out->kl_mean_b < out->kl_mean_a ? "b" : "tie");
}
