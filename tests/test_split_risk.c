/* test_split_risk.c — the split-risk forecast (judge/split_risk.h) on constructed margins and
 * spreads: special values first, then monotonicity, the combination over steps, the interval,
 * and the forecast read from a hand-made reference capture and envelope. */
#include "judge/split_risk.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Phi(-1) = erfc(1 / sqrt 2) / 2 to 17 digits (tables of the normal distribution). */
#define PHI_M1 0.15865525393145707

static void test_split_risk_step_special_values(void)
{
    /* A tie splits half the time whatever the spread, also with none. */
    CU_ASSERT_EQUAL(hx_split_step_p(0.0, 1.0), 0.5);
    CU_ASSERT_EQUAL(hx_split_step_p(0.0, 0.0), 0.5);
    CU_ASSERT_EQUAL(hx_split_step_p(0.0, 1e-30), 0.5);
    /* No spread: a positive margin never splits; an infinite margin never does either. */
    CU_ASSERT_EQUAL(hx_split_step_p(1e-30, 0.0), 0.0);
    CU_ASSERT_EQUAL(hx_split_step_p((double)INFINITY, 1.0), 0.0);
    /* An infinite spread is a coin toss. */
    CU_ASSERT_EQUAL(hx_split_step_p(1.0, (double)INFINITY), 0.5);
    CU_ASSERT(isnan(hx_split_step_p((double)NAN, 1.0)));
    CU_ASSERT(isnan(hx_split_step_p(1.0, (double)NAN)));
    CU_ASSERT(isnan(hx_split_step_p(-1.0, 1.0)));
    CU_ASSERT(isnan(hx_split_step_p(1.0, -1.0)));
    /* Huge margins (1e6 spreads): 0 in double (Phi(-1e6) underflows). */
    CU_ASSERT_EQUAL(hx_split_step_p(1e3, 1e-3), 0.0);
    /* Far tail without cancellation: Phi(-10) = 7.62e-24. Tolerance 1e-12 relative: erfc's
     * accuracy (a few ulp). */
    CU_ASSERT_DOUBLE_EQUAL(hx_split_step_p(10.0, 1.0) / 7.6198530241604696e-24, 1.0, 1e-12);
    /* One spread: Phi(-1). Tolerance 1e-15: erfc's few ulp at 0.16. */
    CU_ASSERT_DOUBLE_EQUAL(hx_split_step_p(0.25, 0.25), PHI_M1, 1e-15);
}

static void test_split_risk_step_monotone(void)
{
    /* Smaller margin or larger spread: never less likely to split; strictly where both p are
     * inside (0, 1/2). */
    const double sd[] = {1e-4, 1e-3, 1e-2, 0.1, 1.0};
    for (size_t s = 0; s < sizeof sd / sizeof sd[0]; ++s) {
        double prev = 0.5;
        for (double m = 1e-6; m < 2.0; m *= 1.5) {
            const double p = hx_split_step_p(m, sd[s]);
            CU_ASSERT(p <= prev);
            if (p > 0.0 && prev < 0.5)
                CU_ASSERT(p < prev);
            prev = p;
        }
    }
    for (double m = 1e-3; m < 1.0; m *= 3.0) {
        double prev = 0.0;
        for (double s = 1e-4; s < 10.0; s *= 1.7) {
            const double p = hx_split_step_p(m, s);
            CU_ASSERT(p >= prev);
            CU_ASSERT(p <= 0.5);
            prev = p;
        }
    }
}

static void test_split_risk_combine(void)
{
    CU_ASSERT_EQUAL(hx_split_combine(NULL, 0), 0.0);
    const double half[2] = {0.5, 0.5};
    /* 1 - 0.25, exact in binary: tolerance 1e-16 for log1p/expm1's rounding. */
    CU_ASSERT_DOUBLE_EQUAL(hx_split_combine(half, 2), 0.75, 1e-15);
    const double one[3] = {0.1, 1.0, 0.2};
    CU_ASSERT_EQUAL(hx_split_combine(one, 3), 1.0);
    const double nan3[3] = {0.1, (double)NAN, 0.2};
    CU_ASSERT(isnan(hx_split_combine(nan3, 3)));
    /* Tiny probabilities add (1 - prod(1 - p) by products would round to 0 here). Tolerance
     * 1e-12 relative: log1p/expm1 are accurate to a few ulp. */
    const double tiny[3] = {1e-20, 2e-20, 3e-20};
    CU_ASSERT_DOUBLE_EQUAL(hx_split_combine(tiny, 3) / 6e-20, 1.0, 1e-12);
    /* Random p against the product form, where that form is accurate (p >= 1e-3). */
    uint64_t st = tu_seed();
    printf("\n  test_split_risk_combine seed %llu (KVD_TEST_SEED)\n", (unsigned long long)st);
    for (int trial = 0; trial < 100; ++trial) {
        double p[32], keep = 1.0;
        const uint32_t n = 1 + (uint32_t)(tu_rand_u64(&st) % 32);
        for (uint32_t i = 0; i < n; ++i) {
            p[i] = 1e-3 + 0.5 * fabs((double)tu_rand_f32(&st) * (double)tu_rand_f32(&st));
            keep *= 1.0 - p[i];
        }
        /* Tolerance 1e-13: 32 roundings of each form, both relative ~1e-16 each. */
        CU_ASSERT_DOUBLE_EQUAL(hx_split_combine(p, n), 1.0 - keep, 1e-13);
    }
}

static void test_split_risk_chi2_quantiles(void)
{
    /* Wilson-Hilferty against exact tables: chi2(8) 5% = 2.73264, 95% = 15.50731; chi2(32)
     * 5% = 20.07191, 95% = 46.19426. Tolerance 1% relative (the approximation's documented
     * accuracy for k >= 8; measured 0.5% at k = 8). */
    CU_ASSERT_DOUBLE_EQUAL(hx_split_chi2(8, false) / 2.73264, 1.0, 0.01);
    CU_ASSERT_DOUBLE_EQUAL(hx_split_chi2(8, true) / 15.50731, 1.0, 0.01);
    CU_ASSERT_DOUBLE_EQUAL(hx_split_chi2(32, false) / 20.07191, 1.0, 0.01);
    CU_ASSERT_DOUBLE_EQUAL(hx_split_chi2(32, true) / 46.19426, 1.0, 0.01);
}

static void test_split_risk_forecast(void)
{
    lm_err err = {0};
    hx_split_forecast f;
    /* One tie among wide margins: the tie is the likely step, and it splits half the time
     * whatever the members say (lo = hi = risk, up to the far-tail terms of the others). */
    const double margin[4] = {5.0, 6.0, 0.0, 7.0};
    const double sd[4] = {1.0, 1.0, 1.0, 1.0};
    CU_ASSERT_EQUAL_FATAL(hx_split_forecast_make(&f, "bf16", margin, sd, 4, 8, &err), LM_OK);
    CU_ASSERT(f.valid);
    CU_ASSERT_STRING_EQUAL(f.profile, "bf16");
    CU_ASSERT_EQUAL(f.n_steps, 4);
    CU_ASSERT_EQUAL(f.likely_step, 2);
    CU_ASSERT_EQUAL(f.likely_margin, 0.0);
    CU_ASSERT_EQUAL(f.min_step, 2);
    const double p[4] = {hx_split_step_p(5.0, 1.0), hx_split_step_p(6.0, 1.0), 0.5,
                         hx_split_step_p(7.0, 1.0)};
    /* Tolerance 1e-15: the same terms combined in the same order, up to log1p rounding. */
    CU_ASSERT_DOUBLE_EQUAL(f.risk, hx_split_combine(p, 4), 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(f.likely_p, 0.5 * (1.0 - p[0]) * (1.0 - p[1]), 1e-15);
    CU_ASSERT(f.lo <= f.risk && f.risk <= f.hi);
    /* Phi(-5 / 0.72) ~ 2e-12 at the low end and Phi(-5 / 1.71) ~ 2e-3 at the high end: the
     * interval's width comes from the non-tied steps only. */
    CU_ASSERT(f.lo >= 0.5 && f.hi < 0.51);
    /* Two engines at the tie: one splits and the other not half the time (2 * 1/4 each way). */
    CU_ASSERT(f.pair >= 0.5 && f.pair < 0.51);
    CU_ASSERT(f.pair_lo <= f.pair && f.pair <= f.pair_hi);

    /* Huge margins: ~0, and the interval is [0, 0] in double. */
    const double wide[3] = {1e3, 2e3, 3e3};
    CU_ASSERT_EQUAL(hx_split_forecast_make(&f, "", wide, sd, 3, 8, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(f.profile, "f32");
    CU_ASSERT_EQUAL(f.risk, 0.0);
    CU_ASSERT_EQUAL(f.hi, 0.0);
    CU_ASSERT_EQUAL(f.likely_step, -1);

    /* Margin of one spread at every step of N: 1 - (1 - Phi(-1))^N. Tolerance 1e-14. */
    double m1[32], s1[32];
    for (int i = 0; i < 32; ++i)
        m1[i] = s1[i] = 0.125;
    CU_ASSERT_EQUAL(hx_split_forecast_make(&f, "tf32", m1, s1, 32, 8, &err), LM_OK);
    CU_ASSERT_DOUBLE_EQUAL(f.risk, 1.0 - pow(1.0 - PHI_M1, 32), 1e-14);
    CU_ASSERT_DOUBLE_EQUAL(f.pair, 1.0 - pow(1.0 - 2.0 * PHI_M1 * (1.0 - PHI_M1), 32), 1e-14);
    CU_ASSERT_EQUAL(f.likely_step, 0); /* equal steps: the first is the likeliest first split */
    /* More members pin the spread: a narrower interval around the same risk. */
    const double m = 2.0, s = 0.5; /* Phi(-4) = 3.2e-5 */
    hx_split_forecast few, many;
    CU_ASSERT_EQUAL(hx_split_forecast_make(&few, "f32", &m, &s, 1, 8, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_split_forecast_make(&many, "f32", &m, &s, 1, 128, &err), LM_OK);
    CU_ASSERT_EQUAL(few.risk, many.risk);
    CU_ASSERT(few.lo < many.lo && many.hi < few.hi);
    CU_ASSERT(few.lo < few.risk && few.risk < few.hi);

    /* A step without a spread (a member was not finite): no forecast, but no error. */
    const double sd_nan[2] = {1.0, (double)NAN};
    CU_ASSERT_EQUAL(hx_split_forecast_make(&f, "bf16", margin, sd_nan, 2, 8, &err), LM_OK);
    CU_ASSERT_FALSE(f.valid);
    CU_ASSERT(isnan(f.risk) && isnan(f.lo) && isnan(f.hi));
    /* Bad input. */
    const double neg[1] = {-0.5};
    CU_ASSERT_EQUAL(hx_split_forecast_make(&f, "f32", neg, sd, 1, 8, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "margin"));
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(hx_split_forecast_make(&f, "f32", margin, sd, 1, 1, &err), LM_E_INPUT);
    lm_err_clear(&err);
    /* No step: nothing can split. */
    CU_ASSERT_EQUAL(hx_split_forecast_make(&f, "f32", NULL, NULL, 0, 8, &err), LM_OK);
    CU_ASSERT_EQUAL(f.risk, 0.0);
    CU_ASSERT_EQUAL(f.min_step, -1);
}

/* A reference of 5 tokens (2 prompt), vocabulary 3, logits at positions 1..4, and an envelope
 * holding the same rows, made by hand. */
static void test_split_risk_from_reference(void)
{
    int32_t tokens[5] = {0, 1, 2, 0, 1};
    uint32_t pos[4] = {1, 2, 3, 4};
    /* Rows: argmax 2 (margin 0.5: 1.0 - 0.5), argmax 0 (margin 0.1), argmax 2 (margin 0.3, but
     * tokens[4] = 1: the token list leaves the reference's path there), argmax 1. */
    double logits[4][3] = {{0.0, 0.5, 1.0}, {0.3, 0.2, -1.0}, {0.0, 0.1, 0.4}, {0.0, 1.0, 0.0}};
    ref_capture ref = {.n_tokens = 5, .n_prompt = 2, .n_vocab = 3, .n_pos = 4,
                       .tokens = tokens, .pos = pos, .logits = &logits[0][0]};
    lm_err err = {0};
    hx_envelope *env;
    CU_ASSERT_EQUAL_FATAL(hx_envelope_create(&env, 0, 4, pos, 2.0, &err), LM_OK);
    env->n_members = 8;
    for (uint32_t i = 0; i < 4; ++i)
        env->logits[i].split_sd = 0.1;
    /* Steps from position 1: rows 1 and 2 decide tokens 2 and 0 as the reference would; row 3,
     * in the reference's context still, picks 2 where the list holds 1: the step that leaves
     * the path is the third and last. From position 4, the last, its row's decision: one. */
    CU_ASSERT_EQUAL(hx_split_path_steps(&ref, env, 1), 3);
    CU_ASSERT_EQUAL(hx_split_path_steps(&ref, env, 3), 1);
    CU_ASSERT_EQUAL(hx_split_path_steps(&ref, env, 4), 1);
    tokens[4] = 2; /* now the list follows row 3: rows 1..4 all decide on the path */
    CU_ASSERT_EQUAL(hx_split_path_steps(&ref, env, 1), 4);
    tokens[4] = 1;
    hx_split_forecast f;
    CU_ASSERT_EQUAL_FATAL(hx_split_forecast_ref(&f, "bf16", &ref, env, 1, 2, &err), LM_OK);
    /* Margins 0.5 and 0.1 (tolerance 1e-15: one double subtraction of these constants). */
    CU_ASSERT_EQUAL(f.min_step, 1);
    CU_ASSERT_DOUBLE_EQUAL(f.min_margin, 0.1, 1e-15);
    CU_ASSERT_EQUAL(f.likely_step, 1);
    const double p[2] = {hx_split_step_p(0.5, 0.1), hx_split_step_p(0.3 - 0.2, 0.1)};
    CU_ASSERT_DOUBLE_EQUAL(f.risk, hx_split_combine(p, 2), 1e-15);
    CU_ASSERT_DOUBLE_EQUAL(f.risk, PHI_M1, 1e-6); /* step 0's Phi(-5) = 2.9e-7 adds little */
    /* A position the envelope lacks: one line naming it. */
    CU_ASSERT_EQUAL(hx_split_forecast_ref(&f, "bf16", &ref, env, 4, 2, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "position 5"));
    lm_err_clear(&err);
    hx_envelope_free(env);
}

static void test_split_risk_report_line(void)
{
    hx_report *r;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_report_create(&r, "t", &err), LM_OK);
    char line[512];
    hx_split_line(line, sizeof line, r);
    CU_ASSERT_STRING_EQUAL(line, "");
    const double m[3] = {1.0, 0.069, 1.0}, s[3] = {0.01, 0.05, 0.01};
    CU_ASSERT_EQUAL(hx_split_forecast_make(&r->split[0], "f32", m, s, 3, 8, &err), LM_OK);
    const double s2[3] = {1e-4, 1e-4, 1e-4};
    CU_ASSERT_EQUAL(hx_split_forecast_make(&r->split[1], "bf16", m, s2, 3, 8, &err), LM_OK);
    r->n_split = 2;
    hx_split_line(line, sizeof line, r);
    /* Phi(-0.069 / 0.05) = 8.4%; the interval's ends from spreads x0.72 and x1.71. */
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "split risk within 3 tokens: f32 8.4% ["));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "bf16 0% [0%, 0%]"));
    CU_ASSERT_PTR_NOT_NULL(strstr(line, "(f32: most likely at step 1, margin 0.069)"));
    /* report.html and report.md carry the same line. */
    const hx_report *one = r;
    char *page = NULL;
    size_t len = 0;
    CU_ASSERT_EQUAL_FATAL(hx_report_html_text(&page, &len, &one, 1, false, &err), LM_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(page, line));
    free(page);
    CU_ASSERT_EQUAL_FATAL(hx_report_md_text(&page, &len, &one, 1, false, &err), LM_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(page, line));
    free(page);
    char pc[16];
    hx_split_pct(pc, sizeof pc, 2e-5);
    CU_ASSERT_STRING_EQUAL(pc, "<0.01%");
    hx_split_pct(pc, sizeof pc, 0.31);
    CU_ASSERT_STRING_EQUAL(pc, "31%");
    hx_split_pct(pc, sizeof pc, 0.0002);
    CU_ASSERT_STRING_EQUAL(pc, "0.02%");
    hx_report_free(r);
}

void test_split_risk_register(void)
{
    CU_pSuite s = CU_add_suite("split_risk", NULL, NULL);
    CU_add_test(s, "test_split_risk_step_special_values", test_split_risk_step_special_values);
    CU_add_test(s, "test_split_risk_step_monotone", test_split_risk_step_monotone);
    CU_add_test(s, "test_split_risk_combine", test_split_risk_combine);
    CU_add_test(s, "test_split_risk_chi2_quantiles", test_split_risk_chi2_quantiles);
    CU_add_test(s, "test_split_risk_forecast", test_split_risk_forecast);
    CU_add_test(s, "test_split_risk_from_reference", test_split_risk_from_reference);
    CU_add_test(s, "test_split_risk_report_line", test_split_risk_report_line);
}
