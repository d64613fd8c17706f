/* test_sampler.c — greedy argmax tie and NaN rules; seeded sampling: reproducible, respects
 * top-k / top-p, and draws with the right frequencies. */
#include "kvd_engine.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>

static void test_sampler_argmax_special_values(void)
{
    const float ties[4] = {1.0f, 3.0f, 3.0f, -2.0f};
    CU_ASSERT_EQUAL(lm_argmax(ties, 4), 1);
    const float nan_first[3] = {NAN, -5.0f, -7.0f};
    CU_ASSERT_EQUAL(lm_argmax(nan_first, 3), 1);
    const float nan_mid[3] = {0.5f, NAN, 0.25f};
    CU_ASSERT_EQUAL(lm_argmax(nan_mid, 3), 0);
    const float infs[3] = {-INFINITY, INFINITY, INFINITY};
    CU_ASSERT_EQUAL(lm_argmax(infs, 3), 1);
    const float all_ninf[2] = {-INFINITY, -INFINITY};
    CU_ASSERT_EQUAL(lm_argmax(all_ninf, 2), 0);
    const float zeros[2] = {-0.0f, 0.0f}; /* -0 == +0: a tie, lowest id */
    CU_ASSERT_EQUAL(lm_argmax(zeros, 2), 0);
    const float one[1] = {NAN};
    CU_ASSERT_EQUAL(lm_argmax(one, 1), 0);
}

static void test_sampler_bad_params(void)
{
    lm_sampler *s = NULL;
    lm_err err = {0};
    lm_sampler_params p = {.temperature = 1.0f, .top_p = 0.0f};
    CU_ASSERT_EQUAL(lm_sampler_create(&s, &p, 10, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(s);
    lm_err_clear(&err);
    p.top_p = 1.0f;
    CU_ASSERT_EQUAL(lm_sampler_create(&s, &p, 0, &err), LM_E_INPUT);
    lm_err_clear(&err);
    p.temperature = NAN;
    CU_ASSERT_EQUAL(lm_sampler_create(&s, &p, 10, &err), LM_E_INPUT);
    lm_sampler_free(NULL);
}

static void test_sampler_greedy_when_temperature_zero(void)
{
    lm_sampler *s = NULL;
    lm_err err = {0};
    lm_sampler_params p = {.temperature = 0.0f, .top_p = 1.0f, .seed = tu_seed()};
    CU_ASSERT_FATAL(lm_sampler_create(&s, &p, 5, &err) == LM_OK);
    const float l[5] = {0.1f, 2.0f, NAN, 2.0f, -1.0f};
    for (int i = 0; i < 10; ++i)
        CU_ASSERT_EQUAL(lm_sample(s, l), 1);
    lm_sampler_free(s);
}

/* Same seed, same draws; top_k = 2 never leaves the two best; a tiny top_p keeps the best
 * only; NaN logits are never drawn. */
static void test_sampler_seeded_and_truncated(void)
{
    enum { V = 50, DRAWS = 2000 };
    float l[V];
    uint64_t st = tu_seed();
    for (int i = 0; i < V; ++i)
        l[i] = 2.0f * tu_rand_f32(&st);
    l[7] = NAN;
    const int32_t best = lm_argmax(l, V);
    int32_t second = best == 0 ? 1 : 0;
    for (int i = 0; i < V; ++i)
        if (i != best && !isnan(l[i]) && l[i] > l[second])
            second = i;
    lm_err err = {0};
    lm_sampler *a = NULL, *b = NULL, *k2 = NULL, *p0 = NULL;
    lm_sampler_params p = {.temperature = 1.5f, .top_p = 1.0f, .seed = tu_seed()};
    CU_ASSERT_FATAL(lm_sampler_create(&a, &p, V, &err) == LM_OK);
    CU_ASSERT_FATAL(lm_sampler_create(&b, &p, V, &err) == LM_OK);
    p.top_k = 2;
    CU_ASSERT_FATAL(lm_sampler_create(&k2, &p, V, &err) == LM_OK);
    p.top_k = 0;
    p.top_p = 1e-6f;
    CU_ASSERT_FATAL(lm_sampler_create(&p0, &p, V, &err) == LM_OK);
    int distinct = 0, seen[V] = {0};
    for (int i = 0; i < DRAWS; ++i) {
        const int32_t x = lm_sample(a, l);
        CU_ASSERT_EQUAL(x, lm_sample(b, l));
        CU_ASSERT(x >= 0 && x < V && x != 7);
        if (!seen[x]++)
            ++distinct;
        const int32_t y = lm_sample(k2, l);
        CU_ASSERT(y == best || y == second);
        CU_ASSERT_EQUAL(lm_sample(p0, l), best);
    }
    CU_ASSERT(distinct > 10); /* T = 1.5 over 49 logits in [-2, 2): far from greedy */
    lm_sampler_free(a);
    lm_sampler_free(b);
    lm_sampler_free(k2);
    lm_sampler_free(p0);
}

/* Two tokens with logits ln 3 and 0 at T = 1: P(token 0) = 0.75. Over N = 20000 draws the
 * count's standard deviation is sqrt(N p (1-p)) ~ 61; accept 6 sigma (false alarm < 1e-8). */
static void test_sampler_frequencies(void)
{
    enum { N = 20000 };
    const float l[2] = {logf(3.0f), 0.0f};
    lm_err err = {0};
    lm_sampler *s = NULL;
    lm_sampler_params p = {.temperature = 1.0f, .top_p = 1.0f, .seed = tu_seed()};
    CU_ASSERT_FATAL(lm_sampler_create(&s, &p, 2, &err) == LM_OK);
    int zeros = 0;
    for (int i = 0; i < N; ++i)
        zeros += lm_sample(s, l) == 0;
    const double sd = sqrt(N * 0.75 * 0.25);
    if (fabs(zeros - 0.75 * N) > 6 * sd)
        fprintf(stderr, "\n  token 0 drawn %d of %d times, expected %.0f\n", zeros, N, 0.75 * N);
    CU_ASSERT(fabs(zeros - 0.75 * N) <= 6 * sd);
    lm_sampler_free(s);
}

/* The nucleus boundary. Logits ln 5, ln 3, ln 2 at T = 1: p = 0.5, 0.3, 0.2 (float rounding of
 * the logits moves these by ~1e-7, far from the 0.01 margins below). top_p = 0.79: the nucleus
 * is {0, 1} (0.5 < 0.79 <= 0.8), token 2 is never drawn and token 1 has 0.3 / 0.8 = 0.375;
 * top_p = 0.81: token 2 is in (0.8 < 0.81) with 0.2. N = 4000 draws, counts within 6 sigma
 * (sd = sqrt(N p (1-p)); false alarm < 1e-8). */
static void test_sampler_top_p_boundary(void)
{
    enum { N = 4000 };
    const float l[3] = {logf(5.0f), logf(3.0f), logf(2.0f)};
    const float top_ps[2] = {0.79f, 0.81f};
    const double p1[2] = {0.375, 0.3}, p2[2] = {0.0, 0.2};
    for (int k = 0; k < 2; ++k) {
        lm_err err = {0};
        lm_sampler *s = NULL;
        lm_sampler_params p = {.temperature = 1.0f, .top_p = top_ps[k], .seed = tu_seed() + 17};
        CU_ASSERT_FATAL(lm_sampler_create(&s, &p, 3, &err) == LM_OK);
        int count[3] = {0, 0, 0};
        for (int i = 0; i < N; ++i)
            ++count[lm_sample(s, l)];
        const double sd1 = sqrt(N * p1[k] * (1.0 - p1[k])), sd2 = sqrt(N * p2[k] * (1.0 - p2[k]));
        if (fabs(count[1] - N * p1[k]) > 6 * sd1 || fabs(count[2] - N * p2[k]) > 6 * sd2)
            fprintf(stderr, "\n  top_p %.2f: counts %d %d %d of %d\n", (double)top_ps[k],
                    count[0], count[1], count[2], N);
        CU_ASSERT(fabs(count[1] - N * p1[k]) <= 6 * sd1);
        if (p2[k] == 0.0) {
            CU_ASSERT_EQUAL(count[2], 0);
        } else {
            CU_ASSERT(fabs(count[2] - N * p2[k]) <= 6 * sd2);
        }
        lm_sampler_free(s);
    }
}

/* Temperature divides the logit differences: P(i) is proportional to exp(l_i / T), checked at
 * T = 2 and T = 0.5 on two logits 2 apart (P(top) = 1 / (1 + e^(-2/T)): 0.731 and 0.982), so
 * a temperature applied twice, squared or not at all is far outside 6 standard deviations. */
static void test_sampler_temperature_law(void)
{
    enum { N = 20000 };
    const float l[2] = {0.0f, -2.0f};
    const float temps[2] = {2.0f, 0.5f};
    for (int k = 0; k < 2; ++k) {
        lm_err err = {0};
        lm_sampler *s = NULL;
        lm_sampler_params p = {.temperature = temps[k], .top_p = 1.0f, .seed = tu_seed() + 5};
        CU_ASSERT_FATAL(lm_sampler_create(&s, &p, 2, &err) == LM_OK);
        int zeros = 0;
        for (int i = 0; i < N; ++i)
            zeros += lm_sample(s, l) == 0;
        const double p0 = 1.0 / (1.0 + exp(-2.0 / (double)temps[k]));
        const double sd = sqrt(N * p0 * (1.0 - p0));
        if (fabs(zeros - p0 * N) > 6 * sd)
            fprintf(stderr, "\n  T %.1f: token 0 drawn %d of %d times, expected %.0f\n",
                    (double)temps[k], zeros, N, p0 * N);
        CU_ASSERT(fabs(zeros - p0 * N) <= 6 * sd);
        lm_sampler_free(s);
    }
}

/* Top-p keeps the shortest prefix whose weight reaches top_p of the total, reaching included:
 * four equal logits (weights exactly 1) and top_p 0.5 (target exactly 2.0) keep exactly the
 * first two ids (ties sorted by id), so ids 2 and 3 are never drawn; at top_p 0.75 (target
 * exactly 3.0) id 3 is never drawn and id 2 is. */
static void test_sampler_top_p_exact_reach(void)
{
    enum { N = 2000 };
    const float l[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    const float top_ps[2] = {0.5f, 0.75f};
    const uint32_t kept[2] = {2, 3};
    for (int k = 0; k < 2; ++k) {
        lm_err err = {0};
        lm_sampler *s = NULL;
        lm_sampler_params p = {.temperature = 1.0f, .top_p = top_ps[k], .seed = tu_seed() + 3};
        CU_ASSERT_FATAL(lm_sampler_create(&s, &p, 4, &err) == LM_OK);
        int count[4] = {0, 0, 0, 0};
        for (int i = 0; i < N; ++i)
            ++count[lm_sample(s, l)];
        for (uint32_t id = 0; id < 4; ++id) {
            if (id < kept[k]) {
                CU_ASSERT(count[id] > 0);
            } else {
                CU_ASSERT_EQUAL(count[id], 0);
            }
        }
        lm_sampler_free(s);
    }
}

/* Candidates with equal logits are ordered by id, lowest first, before top-k cuts them: with
 * three ids tied at the top and top_k 1 (or 2) only the lowest (two) tied ids are ever drawn. */
static void test_sampler_top_k_ties_by_id(void)
{
    enum { N = 400 };
    const float l[5] = {0.0f, 1.0f, 0.5f, 1.0f, 1.0f};
    for (uint32_t top_k = 1; top_k <= 2; ++top_k) {
        lm_err err = {0};
        lm_sampler *s = NULL;
        lm_sampler_params p = {.temperature = 1.0f, .top_k = top_k, .top_p = 1.0f,
                               .seed = tu_seed() + 9};
        CU_ASSERT_FATAL(lm_sampler_create(&s, &p, 5, &err) == LM_OK);
        int count[5] = {0};
        for (int i = 0; i < N; ++i)
            ++count[lm_sample(s, l)];
        CU_ASSERT(count[1] > 0);
        CU_ASSERT_EQUAL(count[3] > 0, top_k == 2);
        CU_ASSERT_EQUAL(count[0] + count[2] + count[4], 0);
        lm_sampler_free(s);
    }
}

void test_sampler_register(void)
{
    CU_pSuite s = CU_add_suite("sampler", NULL, NULL);
    CU_add_test(s, "test_sampler_argmax_special_values", test_sampler_argmax_special_values);
    CU_add_test(s, "test_sampler_bad_params", test_sampler_bad_params);
    CU_add_test(s, "test_sampler_greedy_when_temperature_zero", test_sampler_greedy_when_temperature_zero);
    CU_add_test(s, "test_sampler_seeded_and_truncated", test_sampler_seeded_and_truncated);
    CU_add_test(s, "test_sampler_frequencies", test_sampler_frequencies);
    CU_add_test(s, "test_sampler_top_p_boundary", test_sampler_top_p_boundary);
    CU_add_test(s, "test_sampler_temperature_law", test_sampler_temperature_law);
    CU_add_test(s, "test_sampler_top_p_exact_reach", test_sampler_top_p_exact_reach);
    CU_add_test(s, "test_sampler_top_k_ties_by_id", test_sampler_top_k_ties_by_id);
}
