/* test_backend_sr.c — the stochastic-rounding naive backend (engine/backend_naive_sr.c):
 * exact values stay exact, roundings are unbiased, seeds decide the coins, and a seed is
 * bitwise reproducible and independent of how calls are split. */
#include "../engine/backend.h"
#include "kvd_common.h"
#include "fixtures.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Exported by backend_naive_sr.c for this test. */
float lm_sr_round(double s, double e, uint64_t coin53);
float lm_sr_perturb_value(uint64_t seed, uint32_t site, uint32_t idx, float x);

#define ULP1 1.1920928955078125e-07 /* 2^-23: the float spacing in [1, 2) */
#define COIN_MAX ((UINT64_C(1) << 53) - 1)

static lm_backend *sr_new(uint64_t seed)
{
    lm_backend *be = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_backend_sr_create(&be, seed, &err), LM_OK);
    return be;
}

/* One dot product through gemm_nt: 1 x 1 output. */
static float sr_dot(uint64_t seed, const float *a, const float *b, uint32_t k)
{
    lm_backend *be = sr_new(seed);
    float c = NAN;
    be->vt->gemm_nt(be, 1, 1, k, 1.0f, a, k, b, k, &c, 1);
    lm_backend_destroy(be);
    return c;
}

static void test_backend_sr_exact_values_unchanged(void)
{
    /* Representable values come back as they are whatever the coin, both extremes included. */
    const double vals[] = {0.0, 1.5, -3.25, 1.0 + ULP1, 0x1p-140 /* subnormal float */, 0x1p100};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; ++i) {
        float want = (float)vals[i];
        CU_ASSERT_EQUAL((double)want, vals[i]); /* the test's own premise */
        CU_ASSERT_EQUAL(lm_sr_round(vals[i], 0.0, 0), want);
        CU_ASSERT_EQUAL(lm_sr_round(vals[i], 0.0, COIN_MAX), want);
    }
    /* Through the backend: small integers, every product and partial sum exact, so every seed
     * gives exactly the integer result (and alpha = 0.5 halves it exactly). */
    float a[6] = {1, 2, 3, -4, 5, 6}, b[6] = {7, -8, 9, 10, 11, 12};
    for (uint64_t seed = 0; seed < 64; ++seed) {
        CU_ASSERT_EQUAL(sr_dot(seed, a, b, 6), 7.0f - 16.0f + 27.0f - 40.0f + 55.0f + 72.0f);
        lm_backend *be = sr_new(seed);
        float c = NAN;
        be->vt->gemm_nt(be, 1, 1, 6, 0.5f, a, 6, b, 6, &c, 1);
        CU_ASSERT_EQUAL(c, 52.5f);
        lm_backend_destroy(be);
    }
}

static void test_backend_sr_neighbours_only(void)
{
    /* t = 1 + 0.25 ulp: only 1 and 1 + ulp may come out; the coin's extremes pick each. */
    double t = 1.0 + 0.25 * ULP1;
    CU_ASSERT_EQUAL(lm_sr_round(t, 0.0, 0), nextafterf(1.0f, 2.0f));
    CU_ASSERT_EQUAL(lm_sr_round(t, 0.0, COIN_MAX), 1.0f);
    /* The error term counts: s = 1 exactly but e > 0 means t is just above 1. */
    CU_ASSERT_EQUAL(lm_sr_round(1.0, 1e-20, 0), nextafterf(1.0f, 2.0f));
    CU_ASSERT_EQUAL(lm_sr_round(1.0, 1e-20, COIN_MAX), 1.0f);
    /* e < 0: t just below 1, so 1 is the upper neighbour and almost always chosen. */
    CU_ASSERT_EQUAL(lm_sr_round(1.0, -1e-20, 0), 1.0f);
    CU_ASSERT_EQUAL(lm_sr_round(1.0, -1e-20, COIN_MAX), nextafterf(1.0f, 0.0f));
    /* NaN and Inf pass through. */
    CU_ASSERT(isnan(lm_sr_round(NAN, 0.0, 0)));
    CU_ASSERT_EQUAL(lm_sr_round(INFINITY, 0.0, 0), INFINITY);
}

static void test_backend_sr_mean_converges(void)
{
    /* Dot product [1, 5*2^-27] . [1, 1] = 1 + 0.3125 ulp exactly (every product exact); with
     * N seeds the fraction rounded up estimates p = 0.3125. Binomial standard deviation
     * sqrt(p (1 - p) / N) = 0.00328 for N = 20000; tolerance 5 sd = 0.0164 (a correct SR fails
     * it with probability < 1e-6; a biased rounding such as RN (p -> 0) or truncation fails). */
    const uint32_t n = 20000;
    const double p = 0.3125;
    float a[2] = {1.0f, 5.0f * 0x1p-27f}, b[2] = {1.0f, 1.0f};
    uint64_t base = tu_seed();
    uint32_t up = 0, other = 0;
    for (uint32_t i = 0; i < n; ++i) {
        float c = sr_dot(base + i, a, b, 2);
        if (c == nextafterf(1.0f, 2.0f))
            ++up;
        else if (c != 1.0f)
            ++other;
    }
    CU_ASSERT_EQUAL(other, 0);
    double frac = (double)up / n, sd = sqrt(p * (1.0 - p) / n);
    CU_ASSERT(fabs(frac - p) <= 5.0 * sd);
    /* Negative side, straight through lm_sr_round with independent coins: t = -(2 + 0.75 ulp2),
     * ulp2 = 2^-22; P(away from zero) = 0.75, sd = sqrt(0.75 * 0.25 / N) = 0.00306, tolerance
     * 5 sd. The mean of the roundings must then be t within 5 sd of one ulp. */
    uint64_t st = base ^ 0x5eedull;
    double t = -(2.0 + 0.75 * 0x1p-22), sum = 0.0;
    for (uint32_t i = 0; i < n; ++i)
        sum += (double)lm_sr_round(t, 0.0, tu_rand_u64(&st) >> 11);
    double mean = sum / n;
    CU_ASSERT(fabs(mean - t) <= 5.0 * sqrt(0.75 * 0.25 / n) * 0x1p-22);
}

static void test_backend_sr_seeds_differ_but_close(void)
{
    enum { M = 6, N = 10, K = 96 };
    float a[M * K], b[N * K], c1[M * N], c2[M * N], c1b[M * N];
    uint64_t st = tu_seed();
    tf_fill(a, M * K, 1.0f, 0.0f, &st); /* operands in [-1, 1) */
    tf_fill(b, N * K, 1.0f, 0.0f, &st);
    lm_backend *b1 = sr_new(1), *b2 = sr_new(2), *b1b = sr_new(1);
    b1->vt->gemm_nt(b1, M, N, K, 0.125f, a, K, b, K, c1, N);
    b2->vt->gemm_nt(b2, M, N, K, 0.125f, a, K, b, K, c2, N);
    b1b->vt->gemm_nt(b1b, M, N, K, 0.125f, a, K, b, K, c1b, N);
    size_t ndiff = 0;
    for (size_t i = 0; i < M; ++i)
        for (size_t j = 0; j < N; ++j) {
            /* Each SR step errs by < 1 ulp of its result <= 2^-23 |acc_l|, and |acc_l| <=
             * (1 + K 2^-23) sum |a b|; the alpha scaling adds one more such error. So each
             * result is within alpha 2^-23 (K + 1)(1 + K 2^-23) sum_l |a_l b_l| of alpha times
             * the exact dot (which double holds to 2^-53 relative here); K + 2 covers it. */
            double exact = 0.0, mag = 0.0;
            for (size_t l = 0; l < K; ++l) {
                exact += (double)a[i * K + l] * (double)b[j * K + l];
                mag += fabs((double)a[i * K + l] * (double)b[j * K + l]);
            }
            double bound = 0.125 * (K + 2) * 0x1p-23 * mag;
            CU_ASSERT(fabs((double)c1[i * N + j] - 0.125 * exact) <= bound);
            CU_ASSERT(fabs((double)c2[i * N + j] - 0.125 * exact) <= bound);
            ndiff += c1[i * N + j] != c2[i * N + j];
        }
    /* 96 random terms each: nearly every element sees a coin that goes the other way. */
    CU_ASSERT(ndiff > (size_t)(M * N) / 2);
    CU_ASSERT_EQUAL(memcmp(c1, c1b, sizeof c1), 0); /* same seed: same bits */
    lm_backend_destroy(b1);
    lm_backend_destroy(b2);
    lm_backend_destroy(b1b);
}

static void test_backend_sr_same_seed_any_split(void)
{
    /* The coins depend on the operation, not on call order: the rows computed one call at a
     * time (as prefill step=1 does), in reverse order, equal the one-call result bitwise; and
     * gemm_nn on B transposed equals gemm_nt (same terms, same order, same coins). */
    enum { M = 5, N = 7, K = 33 };
    float a[M * K], b[N * K], bt[K * N], whole[M * N], split[M * N], nn[M * N];
    uint64_t st = tu_seed() + 17;
    tf_fill(a, M * K, 1.0f, 0.0f, &st); /* operands in [-1, 1) */
    tf_fill(b, N * K, 1.0f, 0.0f, &st);
    for (size_t j = 0; j < N; ++j)
        for (size_t l = 0; l < K; ++l)
            bt[l * N + j] = b[j * K + l];
    lm_backend *be = sr_new(99);
    be->vt->gemm_nt(be, M, N, K, 1.0f, a, K, b, K, whole, N);
    for (int i = M - 1; i >= 0; --i)
        be->vt->gemm_nt(be, 1, N, K, 1.0f, a + (size_t)i * K, K, b, K, split + (size_t)i * N, N);
    be->vt->gemm_nn(be, M, N, K, a, K, bt, N, nn, N);
    CU_ASSERT_EQUAL(memcmp(whole, split, sizeof whole), 0);
    CU_ASSERT_EQUAL(memcmp(whole, nn, sizeof whole), 0);
    lm_backend_destroy(be);
}

static void test_backend_sr_factory_names(void)
{
    lm_backend *be = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL(lm_backend_create(&be, "naive-sr:seed=18446744073709551615", 2, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(be->vt->name, "naive-sr");
    CU_ASSERT_EQUAL(be->n_threads, 1);
    lm_backend_destroy(be);
    CU_ASSERT_EQUAL(lm_backend_create(&be, "naive-sr", 1, &err), LM_OK);
    lm_backend_destroy(be);
    CU_ASSERT_EQUAL(lm_backend_create(&be, "naive-sr:seed=x", 1, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(be);
    CU_ASSERT(strstr(err.msg, "naive-sr:seed=x") != NULL);
    lm_err e2 = {0};
    CU_ASSERT_EQUAL(lm_backend_create(&be, "naive-srx", 1, &e2), LM_E_INPUT);
}

/* The perturb slot's distribution (backend_naive_sr.c sr_perturb_one): x -> SR(x + ulp * U),
 * U uniform on (-1/2, 1/2), gives x with probability 3/4 and each neighbour with 1/8 inside a
 * binade; the mean is x. N = 40000 draws over (seed, index): the binomial standard deviation
 * of a frequency is <= sqrt(0.25 * 0.75 / N) = 0.0022, so tolerances of 0.012 (> 5 sd) cannot
 * fail by chance; the mean's sd is ulp * 0.5 / sqrt(N) = 0.0025 ulp, tolerance 0.015 ulp. */
static void test_backend_sr_perturb_distribution(void)
{
    const float x = 1.5f;
    const uint32_t n = 40000;
    uint32_t stay = 0, up = 0, down = 0, other = 0;
    double sum = 0.0;
    for (uint32_t i = 0; i < n; ++i) {
        float y = lm_sr_perturb_value(i / 100, 7, i % 100, x);
        sum += (double)y - (double)x;
        if (y == x)
            ++stay;
        else if ((double)y == (double)x + ULP1)
            ++up;
        else if ((double)y == (double)x - ULP1)
            ++down;
        else
            ++other;
    }
    CU_ASSERT_EQUAL(other, 0);
    CU_ASSERT_DOUBLE_EQUAL((double)stay / n, 0.75, 0.012);
    CU_ASSERT_DOUBLE_EQUAL((double)up / n, 0.125, 0.012);
    CU_ASSERT_DOUBLE_EQUAL((double)down / n, 0.125, 0.012);
    CU_ASSERT_DOUBLE_EQUAL(sum / n / ULP1, 0.0, 0.015);
    /* Zeros (masked probabilities) and non-finite values pass unchanged; so does everything for
     * the naive and blas backends, which have no perturb slot. */
    for (uint64_t seed = 0; seed < 16; ++seed) {
        CU_ASSERT_EQUAL(lm_sr_perturb_value(seed, 1, 0, 0.0f), 0.0f);
        CU_ASSERT(isinf(lm_sr_perturb_value(seed, 1, 0, INFINITY)));
        CU_ASSERT(isnan(lm_sr_perturb_value(seed, 1, 0, NAN)));
    }
    lm_backend *be = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_backend_create(&be, "naive", 1, &err), LM_OK);
    CU_ASSERT_PTR_NULL(be->vt->perturb);
    lm_backend_destroy(be);
}

/* The slot's result depends on (seed, site, index in the row, value) only: the same rows give
 * the same bits in one call or row by row, and whatever row of the buffer they sit in; another
 * seed or site draws other coins. */
static void test_backend_sr_perturb_any_split(void)
{
    enum { R = 3, E = 5, S = 6 };
    float base[R][S], one[R][S], split[R][S], moved[R][S];
    uint64_t st = tu_seed();
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < S; ++j)
            base[r][j] = 1.0f + tu_rand_f32(&st);
    lm_backend *be = sr_new(5);
    memcpy(one, base, sizeof base);
    be->vt->perturb(be, &one[0][0], R, E, S, 2);
    memcpy(split, base, sizeof base);
    for (int r = 0; r < R; ++r)
        be->vt->perturb(be, split[r], 1, E, S, 2);
    CU_ASSERT_EQUAL(memcmp(one, split, sizeof one), 0);
    /* Row 2's values placed in row 0: the same result. */
    memcpy(moved, base, sizeof base);
    memcpy(moved[0], base[2], sizeof base[2]);
    be->vt->perturb(be, &moved[0][0], 1, E, S, 2);
    CU_ASSERT_EQUAL(memcmp(moved[0], one[2], E * sizeof(float)), 0);
    /* Padding past `elems` is never touched. */
    for (int r = 0; r < R; ++r)
        CU_ASSERT_EQUAL(one[r][E], base[r][E]);
    /* Changes happen, by at most one neighbour, and differ with seed and site. */
    size_t changed = 0;
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < E; ++j) {
            CU_ASSERT(fabs((double)one[r][j] - (double)base[r][j]) <= 2.0 * ULP1);
            changed += one[r][j] != base[r][j];
        }
    (void)changed; /* 15 values, each changed with p = 1/4: may be 0 (p = 1.3%), not asserted */
    uint32_t diff_seed = 0, diff_site = 0;
    for (uint32_t i = 0; i < 2000; ++i) {
        float v = 1.0f + (float)i * 0x1p-12f;
        diff_seed += lm_sr_perturb_value(1, 2, 0, v) != lm_sr_perturb_value(2, 2, 0, v);
        diff_site += lm_sr_perturb_value(1, 2, 0, v) != lm_sr_perturb_value(1, 3, 0, v);
    }
    /* Independent coins differ with probability 1 - (9/16 + 2/64) = 0.406: ~812 of 2000, sd
     * 22; the bound 600 is 9 sd below. */
    CU_ASSERT(diff_seed > 600);
    CU_ASSERT(diff_site > 600);
    lm_backend_destroy(be);
}

void test_backend_sr_register(void)
{
    CU_pSuite s = CU_add_suite("backend_sr", NULL, NULL);
    CU_add_test(s, "test_backend_sr_exact_values_unchanged", test_backend_sr_exact_values_unchanged);
    CU_add_test(s, "test_backend_sr_neighbours_only", test_backend_sr_neighbours_only);
    CU_add_test(s, "test_backend_sr_mean_converges", test_backend_sr_mean_converges);
    CU_add_test(s, "test_backend_sr_seeds_differ_but_close", test_backend_sr_seeds_differ_but_close);
    CU_add_test(s, "test_backend_sr_same_seed_any_split", test_backend_sr_same_seed_any_split);
    CU_add_test(s, "test_backend_sr_factory_names", test_backend_sr_factory_names);
    CU_add_test(s, "test_backend_sr_perturb_distribution", test_backend_sr_perturb_distribution);
    CU_add_test(s, "test_backend_sr_perturb_any_split", test_backend_sr_perturb_any_split);
}
