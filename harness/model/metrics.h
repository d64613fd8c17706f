/* metrics.h — how far a float32 tensor x is from its float64 reference R.
 *
 * Every reduction below runs in double, over elements in index order 0..n-1, on one thread,
 * so the numbers are reproducible bit for bit. */
#ifndef HX_METRICS_H
#define HX_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Significant digits are clamped to [0, HX_SIG_DIGITS_MAX]; an exact match reports the max. */
#define HX_SIG_DIGITS_MAX 17.0
/* max_ulp when x or R is NaN: the distance is undefined. */
#define HX_ULP_NAN UINT64_MAX

typedef struct hx_metrics {
    size_t n;            /* elements compared */
    size_t n_nonfinite;  /* elements of x that are NaN or +-Inf */
    size_t n_diff_bits;  /* elements whose float32 bits differ from (float)R_i (-0 != +0) */
    double max_abs;      /* max_i |x_i - R_i| (NaN if any x_i or R_i is NaN; Inf if one is Inf) */
    size_t argmax_abs;   /* first index reaching max_abs (0 when n == 0) */
    double max_rel;      /* max_i |x_i - R_i| / |R_i|; an element with R_i == 0 counts 0 when
                            x_i == 0 and +Inf otherwise */
    uint64_t max_ulp;    /* max_i ulp32(x_i, R_i), see hx_ulp32; HX_ULP_NAN if any NaN */
    double nmse;         /* sum (x_i-R_i)^2 / sum R_i^2, both sums in index order; 0/0 = 0,
                            nonzero/0 = +Inf */
    double r_absmax;     /* max_i |R_i|: the tensor's scale */
    double sig_digits;   /* -log10(max_abs / r_absmax), normwise, clamped to [0, 17]:
                            decimal digits of x that are right relative to the tensor's scale
                            (CADNA-style); 17 when max_abs == 0 (also for r_absmax == 0),
                            0 when nonfinite */
} hx_metrics;

/* Distance in float32 representable numbers between x and R rounded to float32 (round to
 * nearest even, which may overflow to +-Inf). Both are mapped to the ordered integer line on
 * which consecutive floats differ by 1 and +0 and -0 are the same point (0); the result is
 * |key(x) - key((float)R)|. So ulp32(1.0f, 1.0) = 0, ulp32(nextafterf(1,2), 1.0) = 1,
 * ulp32(-0.0f, +0.0) = 0, ulp32(FLT_MAX, +Inf) = 1, and NaN anywhere gives HX_ULP_NAN. */
uint64_t hx_ulp32(float x, double r);

/* Fills out for x [n] vs r [n]. n may be 0 (everything 0, sig_digits 17). */
void hx_metrics_compute(hx_metrics *out, const float *x /* [n] */, const double *r /* [n] */,
                        size_t n);

/* The same statistics for float32 x vs float32 b (a baseline), b widened to double exactly. */
void hx_metrics_compute_f32(hx_metrics *out, const float *x /* [n] */, const float *b /* [n] */,
                            size_t n);

/* Significant digits of an error relative to a scale: -log10(err/scale) clamped to [0, 17];
 * err == 0 gives 17; NaN or Inf err gives 0. */
double hx_sig_digits(double err, double scale);

/* Greedy choice over n logits: largest value, ties to the lowest id, NaN never wins (the
 * engine's lm_argmax rule). -1 when n == 0 or every value is NaN. */
int32_t hx_argmax_f32(const float *x, size_t n);
int32_t hx_argmax_f64(const double *r, size_t n);

#define HX_TOPK 5

/* Metrics of one logits row x [n_vocab] vs its reference row r [n_vocab]. */
typedef struct hx_logit_metrics {
    int32_t top1_x;      /* argmax of x (hx_argmax_f32) */
    int32_t top1_r;      /* argmax of R */
    bool top1_agree;
    uint32_t top5_overlap; /* |top5(x) ∩ top5(R)|, top-k by value, ties to lower id; k = min(5, n) */
    double r_margin;     /* R's top-2 margin: R[top1] - R[second] (+Inf when n_vocab == 1) */
    double r_gap;        /* R[top1_r] - R[top1_x] >= 0: how far x's choice trails in R */
    double kl;           /* KL(softmax(R) || softmax(x)), see hx_kl_softmax */
} hx_logit_metrics;

/* KL(softmax(r) || softmax(x)) in double: with the log-sum-exp of each row taken around its
 * max (stable), sum_i p_i (log p_i - log q_i) in index order; terms with p_i == 0 count 0.
 * Clamped to >= 0 (rounding can leave -1e-17 for identical rows). NaN when any element of x or
 * r is nonfinite; 0 when n == 0. */
double hx_kl_softmax(const float *x /* [n] */, const double *r /* [n] */, size_t n);

/* Top-k ids of a row, best first, ties to the lower id, NaN never chosen; returns the count
 * written (<= k). */
size_t hx_topk_f32(int32_t *ids /* [k] */, const float *x /* [n] */, size_t n, size_t k);
size_t hx_topk_f64(int32_t *ids /* [k] */, const double *r /* [n] */, size_t n, size_t k);

void hx_logit_metrics_compute(hx_logit_metrics *out, const float *x /* [n_vocab] */,
                              const double *r /* [n_vocab] */, size_t n_vocab);

/* Aggregate over positions (teacher-forced logits): mean and max KL, top-1 agreement rate,
 * mean top-5 overlap, smallest R margin seen. Add positions in order; the mean is
 * sum/count with the sum in position order. */
typedef struct hx_logit_agg {
    uint32_t n_pos;
    uint32_t n_top1_agree;
    double kl_sum, kl_max;
    double top5_overlap_sum;
    double min_r_margin; /* +Inf when n_pos == 0 */
} hx_logit_agg;

void hx_logit_agg_init(hx_logit_agg *a);
void hx_logit_agg_add(hx_logit_agg *a, const hx_logit_metrics *m);
double hx_logit_agg_kl_mean(const hx_logit_agg *a);      /* 0 when empty */
double hx_logit_agg_top1_rate(const hx_logit_agg *a);    /* 1 when empty */
double hx_logit_agg_top5_mean(const hx_logit_agg *a);    /* 0 when empty */

/* Folds b into a for a per-configuration summary over several tensors: counts add; max_abs,
 * max_rel, max_ulp, r_absmax and nmse take the larger (so nmse becomes the worst tensor's
 * NMSE, not a pooled one); sig_digits takes the smaller; argmax_abs is a's or b's accordingly
 * (an index inside that tensor). NaN in either max wins. */
void hx_metrics_merge_max(hx_metrics *a, const hx_metrics *b);

#endif
