/* test_classify.c — every class and every boundary of the rules in classify.h. */
#include "model/classify.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static hx_class cls_of(const hx_cls_input *in)
{
    hx_verdict v;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_classify(&v, in, &err), LM_OK);
    CU_ASSERT(v.reason[0] != '\0');
    return v.cls;
}

static void test_classify_order_and_names(void)
{
    CU_ASSERT(HX_NONFINITE > HX_FLIP && HX_FLIP > HX_DRIFT && HX_DRIFT > HX_SEMANTIC &&
              HX_SEMANTIC > HX_TIE_FLIP && HX_TIE_FLIP > HX_NOISE && HX_NOISE > HX_EXACT);
    for (int a = 0; a < HX_N_CLASSES; ++a) {
        CU_ASSERT_EQUAL(hx_class_from_name(hx_class_name((hx_class)a)), a);
        for (int b = 0; b < HX_N_CLASSES; ++b)
            CU_ASSERT_EQUAL(hx_class_worst((hx_class)a, (hx_class)b), a > b ? a : b);
    }
    CU_ASSERT_EQUAL(hx_class_from_name("BOGUS"), -1);
    CU_ASSERT_FALSE(hx_class_fails(HX_EXACT));
    CU_ASSERT_FALSE(hx_class_fails(HX_NOISE));
    CU_ASSERT_FALSE(hx_class_fails(HX_TIE_FLIP));
    CU_ASSERT_FALSE(hx_class_fails(HX_SEMANTIC));
    CU_ASSERT(hx_class_fails(HX_DRIFT));
    CU_ASSERT(hx_class_fails(HX_FLIP));
    CU_ASSERT(hx_class_fails(HX_NONFINITE));
}

static void test_classify_err_vs_envelope_boundary(void)
{
    const double e = 1e-5;
    hx_cls_input in = {.err = e, .e = e};
    CU_ASSERT_EQUAL(cls_of(&in), HX_NOISE);              /* err == E: NOISE (<=) */
    in.err = nextafter(e, 1.0);
    CU_ASSERT_EQUAL(cls_of(&in), HX_DRIFT);              /* next double above: DRIFT */
    in.err = nextafter(e, 0.0);
    CU_ASSERT_EQUAL(cls_of(&in), HX_NOISE);
    in.err = 0.0;
    in.e = 0.0;
    CU_ASSERT_EQUAL(cls_of(&in), HX_NOISE);              /* E = 0, err = 0 */
    in.err = 4.9e-324;                                   /* smallest subnormal above E = 0 */
    CU_ASSERT_EQUAL(cls_of(&in), HX_DRIFT);
}

static void test_classify_exact_needs_baseline_within_envelope(void)
{
    const double e = 1e-5;
    hx_cls_input in = {.bitwise_baseline = true, .err = e, .e = e};
    CU_ASSERT_EQUAL(cls_of(&in), HX_EXACT);              /* boundary: baseline err == E */
    in.err = nextafter(e, 1.0);
    CU_ASSERT_EQUAL(cls_of(&in), HX_DRIFT);              /* equal to a drifting baseline */
    /* Equal to a baseline whose argmax flips: the flip's class, never EXACT. */
    hx_cls_input f = {.bitwise_baseline = true, .err = 0.0, .e = e, .has_argmax = true,
                      .top1_x = 3, .top1_r = 4, .gap = 0.5, .e_gap = 0.1};
    CU_ASSERT_EQUAL(cls_of(&f), HX_FLIP);
    f.gap = 0.1;
    CU_ASSERT_EQUAL(cls_of(&f), HX_TIE_FLIP);
    f.top1_x = 4;
    CU_ASSERT_EQUAL(cls_of(&f), HX_EXACT);
    /* bitwise_baseline false with the same numbers: NOISE. */
    f.bitwise_baseline = false;
    CU_ASSERT_EQUAL(cls_of(&f), HX_NOISE);
}

static void test_classify_flip_boundaries(void)
{
    const double eg = 0.25; /* exactly representable, so gap == e_gap is exact */
    hx_cls_input in = {.err = 1e-6, .e = 1e-5, .has_argmax = true, .top1_x = 7, .top1_r = 2,
                       .gap = eg, .e_gap = eg};
    CU_ASSERT_EQUAL(cls_of(&in), HX_TIE_FLIP);           /* gap == E_gap: TIE_FLIP (<=) */
    in.gap = nextafter(eg, 1.0);
    CU_ASSERT_EQUAL(cls_of(&in), HX_FLIP);               /* next double above: FLIP */
    in.gap = 0.0;                                        /* an exact tie in R */
    CU_ASSERT_EQUAL(cls_of(&in), HX_TIE_FLIP);
    in.e_gap = 0.0;
    CU_ASSERT_EQUAL(cls_of(&in), HX_TIE_FLIP);           /* 0 <= 0 */
    in.gap = 4.9e-324;
    CU_ASSERT_EQUAL(cls_of(&in), HX_FLIP);
    /* A near-tie flip with more error than E: DRIFT (documented extension of the table). */
    in.gap = 0.1;
    in.e_gap = eg;
    in.err = nextafter(in.e, 1.0);
    CU_ASSERT_EQUAL(cls_of(&in), HX_DRIFT);
    in.err = in.e;
    CU_ASSERT_EQUAL(cls_of(&in), HX_TIE_FLIP);
    /* A real flip stays FLIP whatever err is. */
    in.gap = 1.0;
    in.err = 0.0;
    CU_ASSERT_EQUAL(cls_of(&in), HX_FLIP);
    in.err = 1.0;
    CU_ASSERT_EQUAL(cls_of(&in), HX_FLIP);
    /* Same argmax: the gap numbers are irrelevant. */
    in.top1_x = in.top1_r;
    CU_ASSERT_EQUAL(cls_of(&in), HX_DRIFT);
    /* No argmax (K/V): never a flip class even if the ids differ. */
    hx_cls_input kv = {.err = 1e-6, .e = 1e-5, .has_argmax = false, .top1_x = 1, .top1_r = 2,
                       .gap = 9.0, .e_gap = 0.0};
    CU_ASSERT_EQUAL(cls_of(&kv), HX_NOISE);
}

static void test_classify_nonfinite_wins(void)
{
    hx_cls_input in = {.x_nonfinite = true, .bitwise_baseline = true, .err = (double)NAN,
                       .e = (double)NAN, .has_argmax = true, .top1_x = 1, .top1_r = 2,
                       .gap = 100.0, .e_gap = 0.0};
    CU_ASSERT_EQUAL(cls_of(&in), HX_NONFINITE);
}

static void test_classify_rejects_bad_envelopes(void)
{
    hx_verdict v;
    lm_err err = {0};
    hx_cls_input in = {.err = 0.0, .e = (double)NAN};
    CU_ASSERT_EQUAL(hx_classify(&v, &in, &err), LM_E_INPUT);
    lm_err_clear(&err);
    in.e = -1.0;
    CU_ASSERT_EQUAL(hx_classify(&v, &in, &err), LM_E_INPUT);
    lm_err_clear(&err);
    in.e = 1.0;
    in.err = (double)NAN; /* NaN error without the nonfinite flag: a broken metric */
    CU_ASSERT_EQUAL(hx_classify(&v, &in, &err), LM_E_INPUT);
    lm_err_clear(&err);
    hx_cls_input f = {.err = 0.0, .e = 1.0, .has_argmax = true, .top1_x = 1, .top1_r = 2,
                      .gap = 0.5, .e_gap = (double)NAN};
    CU_ASSERT_EQUAL(hx_classify(&v, &f, &err), LM_E_INPUT);
    /* e_gap is not looked at when the argmax agrees. */
    lm_err_clear(&err);
    f.top1_x = 2;
    CU_ASSERT_EQUAL(hx_classify(&v, &f, &err), LM_OK);
    CU_ASSERT_EQUAL(v.cls, HX_NOISE);
}

static void test_classify_tensor_wrapper(void)
{
    hx_verdict v;
    hx_metrics m;
    hx_logit_metrics lm;
    lm_err err = {0};
    float x[3] = {1.0f, 2.0f, 3.0f};
    float b[3] = {1.0f, 2.0f, 3.0f};
    double r[3] = {1.0, 2.0, 3.0 + 1e-6};
    /* err 1e-6 (up to the rounding of 3 + 1e-6) against E 2e-6: EXACT with b equal. */
    CU_ASSERT_EQUAL(hx_classify_tensor(&v, &m, &lm, x, b, false, r, 3, true, 2e-6, 0.1, &err),
                    LM_OK);
    CU_ASSERT_EQUAL(v.cls, HX_EXACT);
    CU_ASSERT_EQUAL(lm.top1_x, 2);
    b[0] = nextafterf(1.0f, 2.0f);
    CU_ASSERT_EQUAL(hx_classify_tensor(&v, &m, NULL, x, b, true, r, 3, true, 2e-6, 0.1, &err),
                    LM_OK);
    CU_ASSERT_EQUAL(v.cls, HX_NOISE); /* b given: the memcmp decides, not the flag */
    CU_ASSERT_EQUAL(hx_classify_tensor(&v, &m, NULL, x, NULL, false, r, 3, false, 0.5e-6, 0.0,
                                       &err), LM_OK);
    CU_ASSERT_EQUAL(v.cls, HX_DRIFT);
    x[2] = 0.5f; /* argmax moves to id 1; R's gap 3 + 1e-6 - 2 > 0.1 */
    CU_ASSERT_EQUAL(hx_classify_tensor(&v, &m, NULL, x, NULL, false, r, 3, true, 10.0, 0.1, &err),
                    LM_OK);
    CU_ASSERT_EQUAL(v.cls, HX_FLIP);
    x[2] = (float)INFINITY;
    CU_ASSERT_EQUAL(hx_classify_tensor(&v, &m, &lm, x, NULL, false, r, 3, true, 10.0, 0.1, &err),
                    LM_OK);
    CU_ASSERT_EQUAL(v.cls, HX_NONFINITE);
    CU_ASSERT_EQUAL(m.n_nonfinite, 1);
    CU_ASSERT(isnan(lm.kl)); /* a nonfinite row never looks clean in the KL summary */
}

static void test_classify_first_divergence(void)
{
    int32_t a[4] = {1, 2, 3, 4}, b[4] = {1, 2, 9, 4};
    CU_ASSERT_EQUAL(hx_first_divergence(a, 4, a, 4), -1);
    CU_ASSERT_EQUAL(hx_first_divergence(a, 4, b, 4), 2);
    CU_ASSERT_EQUAL(hx_first_divergence(a, 3, a, 4), 3); /* shorter differs at its end */
    CU_ASSERT_EQUAL(hx_first_divergence(a, 0, b, 0), -1);
    CU_ASSERT_EQUAL(hx_first_divergence(a, 1, b, 0), 0);
}

void test_classify_register(void)
{
    CU_pSuite s = CU_add_suite("classify", NULL, NULL);
    CU_add_test(s, "test_classify_order_and_names", test_classify_order_and_names);
    CU_add_test(s, "test_classify_err_vs_envelope_boundary", test_classify_err_vs_envelope_boundary);
    CU_add_test(s, "test_classify_exact_needs_baseline_within_envelope",
                test_classify_exact_needs_baseline_within_envelope);
    CU_add_test(s, "test_classify_flip_boundaries", test_classify_flip_boundaries);
    CU_add_test(s, "test_classify_nonfinite_wins", test_classify_nonfinite_wins);
    CU_add_test(s, "test_classify_rejects_bad_envelopes", test_classify_rejects_bad_envelopes);
    CU_add_test(s, "test_classify_tensor_wrapper", test_classify_tensor_wrapper);
    CU_add_test(s, "test_classify_first_divergence", test_classify_first_divergence);
}
