/* test_ref_exp.c — the correctly rounded exp and tanh (ref_exp.c): every result must be the
 * same bits as mpfr_exp / mpfr_tanh with MPFR_RNDN (no tolerance: both are the exact value
 * rounded to nearest), on special values, on random arguments over 220 binades of both signs
 * and at precisions on both sides of REF_EXP_MAX_PREC; and the fixed-point approximations must
 * keep their stated error bounds against a 400-bit evaluation:
 *   |A - exp(x)| <= 2^(EXP(A) - 186),   |Q - tanh(x)| <= 61 2^-192 < 2^-186;
 * and tanh's shortcut to +-1 must agree with MPFR on both sides of its threshold. */
#include "ref_exp.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>

static uint64_t rng = 0x243f6a8885a308d3u; /* tu_rand_u64 state (fixed: reproducible) */



static bool same(mpfr_t a, mpfr_t b)
{
    if (mpfr_nan_p(a) || mpfr_nan_p(b))
        return mpfr_nan_p(a) && mpfr_nan_p(b);
    return mpfr_equal_p(a, b) && mpfr_signbit(a) == mpfr_signbit(b);
}

static void test_ref_exp_special(void)
{
    mpfr_t x, r, m;
    mpfr_inits2(127, x, r, m, (mpfr_ptr)0);
    const double vals[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 511.9, -511.9, 512.0, -512.0,
                           1e6, -1e6, 0x1p-300, -0x1p-300, 0.6931471805599453, 1.0, -1.0};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; ++i) {
        mpfr_set_d(x, vals[i], MPFR_RNDN);
        ref_exp(r, x);
        mpfr_exp(m, x, MPFR_RNDN);
        CU_ASSERT(same(r, m));
        ref_tanh(r, x);
        mpfr_tanh(m, x, MPFR_RNDN);
        CU_ASSERT(same(r, m));
    }
    /* in place, as the reference calls it */
    mpfr_set_d(x, -3.25, MPFR_RNDN);
    mpfr_exp(m, x, MPFR_RNDN);
    ref_exp(x, x);
    CU_ASSERT(same(x, m));
    mpfr_clears(x, r, m, (mpfr_ptr)0);
}

/* n random arguments of x_prec bits (exponents in [lo, hi]) into results of r_prec bits:
 * ref_exp and ref_tanh against mpfr_exp and mpfr_tanh, mismatches added to *bad_exp and
 * *bad_tanh. */
static void count_mismatches(mpfr_prec_t x_prec, mpfr_prec_t r_prec, int n, long lo, long hi,
                             long *bad_exp, long *bad_tanh)
{
    mpfr_t x, r, m;
    mpfr_init2(x, x_prec);
    mpfr_inits2(r_prec, r, m, (mpfr_ptr)0);
    for (int i = 0; i < n; ++i) {
        tu_rand_mpfr(x, &rng, lo, hi);
        ref_exp(r, x);
        mpfr_exp(m, x, MPFR_RNDN);
        *bad_exp += !same(r, m);
        ref_tanh(r, x);
        mpfr_tanh(m, x, MPFR_RNDN);
        *bad_tanh += !same(r, m);
    }
    mpfr_clears(x, r, m, (mpfr_ptr)0);
}

/* Bitwise against MPFR at several precisions, arguments of every exponent in [-200, 9]. */
static void test_ref_exp_matches_mpfr(void)
{
    const mpfr_prec_t precs[] = {53, 64, 113, 127, 128, 160, REF_EXP_MAX_PREC, 200};
    long bad_exp = 0, bad_tanh = 0;
    for (size_t pi = 0; pi < sizeof precs / sizeof precs[0]; ++pi)
        count_mismatches(precs[pi], precs[pi], 4000, -200, 9, &bad_exp, &bad_tanh);
    CU_ASSERT_EQUAL(bad_exp, 0);
    CU_ASSERT_EQUAL(bad_tanh, 0);
}

/* Bitwise against MPFR where tanh's rounding to +-1 starts, (P + 2) ln 2 / 2 at precision P
 * (the fixed-point path returns +-1 from k >= P + 3 and from |x| >= 64 on), and around
 * |x| = 64 and 2|x| = ln 2 (where a = exp(2|x|) crosses 2: the k = 0 / k = 1 branches). */
static void test_ref_tanh_thresholds(void)
{
    const mpfr_prec_t precs[] = {24, 53, 113, 127, 128, 160, REF_EXP_MAX_PREC};
    long bad = 0, ones = 0, n = 0;
    for (size_t pi = 0; pi < sizeof precs / sizeof precs[0]; ++pi) {
        const mpfr_prec_t p = precs[pi];
        mpfr_t x, r, m, lo;
        mpfr_inits2(p, x, r, m, (mpfr_ptr)0);
        mpfr_init2(lo, 64);
        const double centres[] = {(double)(p + 2) * 0.34657359027997264, 64.0,
                                  0.34657359027997264};
        for (size_t c = 0; c < sizeof centres / sizeof centres[0]; ++c) {
            for (int i = 0; i < 600; ++i) {
                /* centre * (1 + d), |d| < 2^-4 for the first two, < 2^-20 for ln 2 / 2 */
                tu_rand_mpfr(x, &rng, c == 2 ? -20 : -4, c == 2 ? -20 : -4);
                mpfr_add_ui(x, x, 1, MPFR_RNDN);
                mpfr_set_d(lo, centres[c], MPFR_RNDN);
                mpfr_mul(x, x, lo, MPFR_RNDN);
                if (tu_rand_u64(&rng) & 1)
                    mpfr_neg(x, x, MPFR_RNDN);
                ref_tanh(r, x);
                mpfr_tanh(m, x, MPFR_RNDN);
                bad += !same(r, m);
                ones += mpfr_cmpabs_ui(m, 1) == 0;
                ++n;
            }
        }
        mpfr_clears(x, r, m, lo, (mpfr_ptr)0);
    }
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT(ones > n / 10 && ones < n - n / 10); /* both sides of the threshold were hit */
}

/* Arguments of other precisions than the destination (the path reads x's significand
 * directly): 24, 53 and 300-bit arguments into 127-bit results. */
static void test_ref_exp_mixed_precisions(void)
{
    const mpfr_prec_t xprec[] = {24, 53, 300};
    long bad = 0;
    for (size_t i = 0; i < sizeof xprec / sizeof xprec[0]; ++i)
        count_mismatches(xprec[i], 127, 3000, -70, 7, &bad, &bad);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The approximations keep their bounds, measured against 400-bit values (whose own error,
 * 2^-400 relative, is far below the bounds), for 127-bit and 300-bit arguments. */
static void test_ref_exp_error_bounds(void)
{
    mpfr_t a, q, e, d, bound;
    mpfr_init2(a, 192);
    mpfr_init2(q, 200);
    mpfr_inits2(400, e, d, bound, (mpfr_ptr)0);
    mpfr_set_ui_2exp(bound, 61, -192, MPFR_RNDN);
    double worst_exp = -1000, worst_tanh = -1000; /* log2 of the largest error seen */
    const mpfr_prec_t xprec[] = {127, 300};
    for (size_t pi = 0; pi < 2; ++pi) {
        mpfr_t x;
        mpfr_init2(x, xprec[pi]);
        for (int i = 0; i < (pi == 0 ? 20000 : 4000); ++i) {
            tu_rand_mpfr(x, &rng, -60, 8);
            CU_ASSERT_FATAL(ref_exp_approx(a, x));
            mpfr_exp(e, x, MPFR_RNDN);
            mpfr_sub(d, a, e, MPFR_RNDN);
            if (!mpfr_zero_p(d)) {
                /* >= log2 |d| / 2^EXP(A) */
                double l = (double)mpfr_get_exp(d) - (double)mpfr_get_exp(a);
                worst_exp = l > worst_exp ? l : worst_exp;
            }
            CU_ASSERT(mpfr_zero_p(d) || mpfr_get_exp(d) <= mpfr_get_exp(a) - 186);
            if (mpfr_get_exp(x) > 6) { /* |x| >= 64: not served */
                CU_ASSERT(!ref_tanh_approx(q, x));
                continue;
            }
            CU_ASSERT_FATAL(ref_tanh_approx(q, x));
            mpfr_tanh(e, x, MPFR_RNDN);
            mpfr_sub(d, q, e, MPFR_RNDN);
            if (!mpfr_zero_p(d))
                worst_tanh = (double)mpfr_get_exp(d) > worst_tanh ? (double)mpfr_get_exp(d)
                                                                  : worst_tanh;
            CU_ASSERT(mpfr_cmpabs(d, bound) <= 0);
        }
        mpfr_clear(x);
    }
    mpfr_t x;
    mpfr_init2(x, 127);
    /* out of the fixed-point range: not served */
    mpfr_set_ui(x, 512, MPFR_RNDN);
    CU_ASSERT(!ref_exp_approx(a, x));
    mpfr_set_ui(x, 64, MPFR_RNDN);
    CU_ASSERT(!ref_tanh_approx(q, x));
    mpfr_set_zero(x, 1);
    CU_ASSERT(!ref_exp_approx(a, x));
    CU_ASSERT(!ref_tanh_approx(q, x));
    printf("\n    exp: largest error 2^%.0f of 2^EXP(A) (bound 2^-186); tanh: 2^%.0f "
           "(bound 61 2^-192) ", worst_exp, worst_tanh);
    mpfr_clears(x, a, q, e, d, bound, (mpfr_ptr)0);
}

void test_ref_exp_register(void)
{
    CU_pSuite s = CU_add_suite("ref_exp", NULL, NULL);
    CU_add_test(s, "test_ref_exp_special", test_ref_exp_special);
    CU_add_test(s, "test_ref_exp_matches_mpfr", test_ref_exp_matches_mpfr);
    CU_add_test(s, "test_ref_exp_error_bounds", test_ref_exp_error_bounds);
    CU_add_test(s, "test_ref_tanh_thresholds", test_ref_tanh_thresholds);
    CU_add_test(s, "test_ref_exp_mixed_precisions", test_ref_exp_mixed_precisions);
}
