/* test_metrics.c — error statistics: special values first, then random rows against a
 * direct recomputation in long double. */
#include "model/metrics.h"
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static void test_metrics_ulp_special_values(void)
{
    CU_ASSERT_EQUAL(hx_ulp32(1.0f, 1.0), 0);
    CU_ASSERT_EQUAL(hx_ulp32(nextafterf(1.0f, 2.0f), 1.0), 1);
    CU_ASSERT_EQUAL(hx_ulp32(nextafterf(1.0f, 0.0f), 1.0), 1);
    CU_ASSERT_EQUAL(hx_ulp32(-0.0f, 0.0), 0);       /* +0 and -0 are one point */
    CU_ASSERT_EQUAL(hx_ulp32(0.0f, -0.0), 0);
    /* Across zero: the smallest subnormals on each side are 2 apart. */
    CU_ASSERT_EQUAL(hx_ulp32(FLT_TRUE_MIN, -(double)FLT_TRUE_MIN), 2);
    CU_ASSERT_EQUAL(hx_ulp32(FLT_MAX, (double)INFINITY), 1);
    CU_ASSERT_EQUAL(hx_ulp32(FLT_MAX, 1e300), 1);   /* R rounds (overflows) to +Inf */
    CU_ASSERT_EQUAL(hx_ulp32((float)INFINITY, (double)INFINITY), 0);
    CU_ASSERT_EQUAL(hx_ulp32(NAN, 1.0), HX_ULP_NAN);
    CU_ASSERT_EQUAL(hx_ulp32(1.0f, (double)NAN), HX_ULP_NAN);
    /* R between two floats: distance to R rounded to nearest (1 + 2^-24 ties to even = 1). */
    CU_ASSERT_EQUAL(hx_ulp32(1.0f, 1.0 + ldexp(1.0, -24)), 0);
    CU_ASSERT_EQUAL(hx_ulp32(1.0f, 1.0 + 3 * ldexp(1.0, -24)), 2);
    /* 1 -> 2 spans 2^23 floats. */
    CU_ASSERT_EQUAL(hx_ulp32(2.0f, 1.0), UINT64_C(1) << 23);
    CU_ASSERT_EQUAL(hx_ulp32(-1.0f, 1.0), UINT64_C(0x3f800000) * 2);
}

static void test_metrics_empty_and_single(void)
{
    hx_metrics m;
    hx_metrics_compute(&m, NULL, NULL, 0);
    CU_ASSERT_EQUAL(m.n, 0);
    CU_ASSERT_EQUAL(m.max_abs, 0.0);
    CU_ASSERT_EQUAL(m.nmse, 0.0);
    CU_ASSERT_EQUAL(m.sig_digits, HX_SIG_DIGITS_MAX);
    float x = 1.5f;
    double r = 1.5;
    hx_metrics_compute(&m, &x, &r, 1);
    CU_ASSERT_EQUAL(m.max_abs, 0.0);
    CU_ASSERT_EQUAL(m.n_diff_bits, 0);
    CU_ASSERT_EQUAL(m.sig_digits, HX_SIG_DIGITS_MAX);
    r = 1.0; /* x = 1.5: abs 0.5, rel 0.5, nmse 0.25, sig -log10(0.5/1) */
    hx_metrics_compute(&m, &x, &r, 1);
    CU_ASSERT_EQUAL(m.max_abs, 0.5);
    CU_ASSERT_EQUAL(m.max_rel, 0.5);
    CU_ASSERT_EQUAL(m.nmse, 0.25);
    CU_ASSERT_EQUAL(m.n_diff_bits, 1);
    /* tolerance 1e-15: one log10 evaluation */
    CU_ASSERT_DOUBLE_EQUAL(m.sig_digits, -log10(0.5), 1e-15);
}

static void test_metrics_zero_reference_and_signed_zero(void)
{
    hx_metrics m;
    float x[2] = {-0.0f, 0.0f};
    double r[2] = {0.0, -0.0};
    hx_metrics_compute(&m, x, r, 2);
    CU_ASSERT_EQUAL(m.max_abs, 0.0);
    CU_ASSERT_EQUAL(m.max_rel, 0.0);   /* 0/0 counts 0 */
    CU_ASSERT_EQUAL(m.max_ulp, 0);
    CU_ASSERT_EQUAL(m.nmse, 0.0);      /* 0/0 = 0 */
    CU_ASSERT_EQUAL(m.n_diff_bits, 2); /* the bits of -0 and +0 differ */
    x[0] = 1e-3f;
    hx_metrics_compute(&m, x, r, 2);
    CU_ASSERT(isinf(m.max_rel));       /* nonzero over R == 0 */
    CU_ASSERT(isinf(m.nmse));          /* nonzero over sum R^2 == 0 */
    CU_ASSERT_EQUAL(m.sig_digits, 0.0);
}

static void test_metrics_nonfinite(void)
{
    hx_metrics m;
    float x[3] = {1.0f, NAN, 2.0f};
    double r[3] = {1.0, 1.0, 1.0};
    hx_metrics_compute(&m, x, r, 3);
    CU_ASSERT_EQUAL(m.n_nonfinite, 1);
    CU_ASSERT(isnan(m.max_abs));
    CU_ASSERT_EQUAL(m.max_ulp, HX_ULP_NAN);
    CU_ASSERT(isnan(m.nmse));
    CU_ASSERT_EQUAL(m.sig_digits, 0.0);
    x[1] = INFINITY;
    hx_metrics_compute(&m, x, r, 3);
    CU_ASSERT_EQUAL(m.n_nonfinite, 1);
    CU_ASSERT(isinf(m.max_abs));
    CU_ASSERT_EQUAL(m.argmax_abs, 1);
    x[1] = -INFINITY;
    CU_ASSERT(isnan(hx_kl_softmax(x, r, 3)));
}

static void test_metrics_random_vs_long_double(void)
{
    uint64_t st = tu_seed() ^ 0x6d657472;
    enum { N = 1000 };
    float *x = malloc(N * sizeof *x);
    double *r = malloc(N * sizeof *r);
    CU_ASSERT_FATAL(x && r);
    for (int i = 0; i < N; ++i) {
        r[i] = (double)tu_rand_f32(&st) * 4.0 + (double)tu_rand_f32(&st) * 1e-7;
        x[i] = (float)r[i] + tu_rand_f32(&st) * 1e-6f;
    }
    hx_metrics m;
    hx_metrics_compute(&m, x, r, N);
    long double num = 0, den = 0, mx = 0, mr = 0;
    for (int i = 0; i < N; ++i) {
        long double d = fabsl((long double)x[i] - (long double)r[i]);
        num += d * d;
        den += (long double)r[i] * r[i];
        if (d > mx)
            mx = d;
        if (d / fabsl((long double)r[i]) > mr)
            mr = d / fabsl((long double)r[i]);
    }
    /* max_abs: |x - R| of a float and a double is exact or within one double rounding */
    CU_ASSERT_DOUBLE_EQUAL(m.max_abs, (double)mx, (double)mx * 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(m.max_rel, (double)mr, (double)mr * 1e-14);
    /* NMSE: 1000-term double sums against long double: relative 1e-12 is generous */
    CU_ASSERT_DOUBLE_EQUAL(m.nmse, (double)(num / den), (double)(num / den) * 1e-12);
    CU_ASSERT(m.max_ulp >= 1);
    free(x);
    free(r);
}

static void test_metrics_argmax_topk(void)
{
    float x[6] = {1.0f, 3.0f, NAN, 3.0f, -1.0f, 2.0f};
    CU_ASSERT_EQUAL(hx_argmax_f32(x, 6), 1); /* tie 1 vs 3: lower id; NaN never wins */
    CU_ASSERT_EQUAL(hx_argmax_f32(x, 0), -1);
    float allnan[2] = {NAN, NAN};
    CU_ASSERT_EQUAL(hx_argmax_f32(allnan, 2), -1);
    int32_t ids[5];
    CU_ASSERT_EQUAL(hx_topk_f32(ids, x, 6, 5), 5);
    int32_t want[5] = {1, 3, 5, 0, 4};
    CU_ASSERT_EQUAL(memcmp(ids, want, sizeof want), 0);
    CU_ASSERT_EQUAL(hx_topk_f32(ids, x, 2, 5), 2);
    double r[3] = {0.5, -0.5, 0.5};
    CU_ASSERT_EQUAL(hx_argmax_f64(r, 3), 0);
    CU_ASSERT_EQUAL(hx_topk_f64(ids, r, 3, 2), 2);
    CU_ASSERT_EQUAL(ids[0], 0);
    CU_ASSERT_EQUAL(ids[1], 2);
}

static void test_metrics_kl_and_logits(void)
{
    /* Identical rows: KL 0 (clamped, never negative). */
    float x[4] = {1.0f, 2.0f, 3.0f, 4.0f};
    double r[4] = {1.0, 2.0, 3.0, 4.0};
    CU_ASSERT_EQUAL(hx_kl_softmax(x, r, 4), 0.0);
    /* Shifted by a constant: same softmax, so KL 0 up to rounding. Tolerance 1e-13: x's
     * log-sum-exp is about 104, its rounding (a few times 104 * 2^-53 ~ 1e-14) shifts every
     * log q_i alike, and KL picks that shift up once. */
    float xs[4] = {101.0f, 102.0f, 103.0f, 104.0f};
    CU_ASSERT_DOUBLE_EQUAL(hx_kl_softmax(xs, r, 4), 0.0, 1e-13);
    /* Two-token closed form: p = softmax(0, 0) = (1/2, 1/2), q = softmax(0, ln 3) = (1/4, 3/4):
     * KL = 1/2 ln 2 + 1/2 ln(2/3). Tolerance 1e-7: ln 3 rounded to float32. */
    float x2[2] = {0.0f, (float)log(3.0)};
    double r2[2] = {0.0, 0.0};
    CU_ASSERT_DOUBLE_EQUAL(hx_kl_softmax(x2, r2, 2), 0.5 * log(2.0) + 0.5 * log(2.0 / 3.0), 1e-7);
    /* Extreme logits stay finite (stable log-sum-exp). */
    float xe[2] = {1000.0f, -1000.0f};
    double re[2] = {-1000.0, 1000.0};
    double kl = hx_kl_softmax(xe, re, 2);
    CU_ASSERT(isfinite(kl));
    CU_ASSERT_DOUBLE_EQUAL(kl, 2000.0, 1e-9); /* KL ~ 2000 nats: p puts all mass on id 1 */
    CU_ASSERT_EQUAL(hx_kl_softmax(x, r, 0), 0.0);

    hx_logit_metrics lm;
    float xl[6] = {0.0f, 5.0f, 4.9f, 1.0f, 2.0f, 3.0f};
    double rl[6] = {0.0, 4.9, 5.0, 1.0, 2.0, 3.0};
    hx_logit_metrics_compute(&lm, xl, rl, 6);
    CU_ASSERT_EQUAL(lm.top1_x, 1);
    CU_ASSERT_EQUAL(lm.top1_r, 2);
    CU_ASSERT_FALSE(lm.top1_agree);
    CU_ASSERT_EQUAL(lm.top5_overlap, 5);
    CU_ASSERT_DOUBLE_EQUAL(lm.r_margin, 0.1, 1e-15); /* 5.0 - 4.9 in double */
    CU_ASSERT_DOUBLE_EQUAL(lm.r_gap, 0.1, 1e-15);
    float one = 3.0f;
    double rone = 3.0;
    hx_logit_metrics_compute(&lm, &one, &rone, 1);
    CU_ASSERT(isinf(lm.r_margin));
    CU_ASSERT_EQUAL(lm.r_gap, 0.0);
    CU_ASSERT_EQUAL(lm.top5_overlap, 1);

    hx_logit_agg a;
    hx_logit_agg_init(&a);
    CU_ASSERT_EQUAL(hx_logit_agg_top1_rate(&a), 1.0);
    CU_ASSERT(isinf(a.min_r_margin));
    hx_logit_metrics p1 = {.top1_agree = true, .kl = 0.25, .r_margin = 2.0, .top5_overlap = 5};
    hx_logit_metrics p2 = {.top1_agree = false, .kl = 0.75, .r_margin = 0.5, .top5_overlap = 3};
    hx_logit_agg_add(&a, &p1);
    hx_logit_agg_add(&a, &p2);
    CU_ASSERT_EQUAL(hx_logit_agg_kl_mean(&a), 0.5);
    CU_ASSERT_EQUAL(a.kl_max, 0.75);
    CU_ASSERT_EQUAL(hx_logit_agg_top1_rate(&a), 0.5);
    CU_ASSERT_EQUAL(hx_logit_agg_top5_mean(&a), 4.0);
    CU_ASSERT_EQUAL(a.min_r_margin, 0.5);
}

static void test_metrics_sig_digits_and_merge(void)
{
    CU_ASSERT_EQUAL(hx_sig_digits(0.0, 1.0), HX_SIG_DIGITS_MAX);
    CU_ASSERT_DOUBLE_EQUAL(hx_sig_digits(1e-6, 1.0), 6.0, 1e-12); /* one log10 */
    CU_ASSERT_EQUAL(hx_sig_digits(2.0, 1.0), 0.0);                /* clamped at 0 */
    CU_ASSERT_EQUAL(hx_sig_digits(1e-30, 1.0), HX_SIG_DIGITS_MAX); /* clamped at 17 */
    CU_ASSERT_EQUAL(hx_sig_digits((double)NAN, 1.0), 0.0);
    CU_ASSERT_EQUAL(hx_sig_digits(1.0, 0.0), 0.0);
    hx_metrics a = {.n = 2, .max_abs = 1.0, .argmax_abs = 1, .max_ulp = 3, .nmse = 0.1,
                    .sig_digits = 5.0};
    hx_metrics b = {.n = 3, .max_abs = 2.0, .argmax_abs = 0, .max_ulp = 2, .nmse = 0.05,
                    .sig_digits = 4.0, .n_nonfinite = 1};
    hx_metrics_merge_max(&a, &b);
    CU_ASSERT_EQUAL(a.n, 5);
    CU_ASSERT_EQUAL(a.max_abs, 2.0);
    CU_ASSERT_EQUAL(a.argmax_abs, 0);
    CU_ASSERT_EQUAL(a.max_ulp, 3);
    CU_ASSERT_EQUAL(a.nmse, 0.1);
    CU_ASSERT_EQUAL(a.sig_digits, 4.0);
    CU_ASSERT_EQUAL(a.n_nonfinite, 1);
    hx_metrics c = {.max_abs = NAN};
    hx_metrics_merge_max(&a, &c);
    CU_ASSERT(isnan(a.max_abs));
}

void test_metrics_register(void)
{
    CU_pSuite s = CU_add_suite("metrics", NULL, NULL);
    CU_add_test(s, "test_metrics_ulp_special_values", test_metrics_ulp_special_values);
    CU_add_test(s, "test_metrics_empty_and_single", test_metrics_empty_and_single);
    CU_add_test(s, "test_metrics_zero_reference_and_signed_zero",
                test_metrics_zero_reference_and_signed_zero);
    CU_add_test(s, "test_metrics_nonfinite", test_metrics_nonfinite);
    CU_add_test(s, "test_metrics_random_vs_long_double", test_metrics_random_vs_long_double);
    CU_add_test(s, "test_metrics_argmax_topk", test_metrics_argmax_topk);
    CU_add_test(s, "test_metrics_kl_and_logits", test_metrics_kl_and_logits);
    CU_add_test(s, "test_metrics_sig_digits_and_merge", test_metrics_sig_digits_and_merge);
}
