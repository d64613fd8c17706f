/* test_ref_gelu.c — GELU in two-limb arithmetic (ref_gelu.c) against the MPFR sequence that
 * defines it (nine roundings to nearest, mpfr_tanh): the same bits, no tolerance, at precisions
 * from 2 to 128 bits (small ones make ties and carries frequent), on random arguments of both
 * signs, on products built to be exact ties, on special values, and through ref_gelu_tanh; the
 * fast path must serve almost every ordinary argument. */
#include "kvd_ref.h"
#include "ref_gelu.h"
#include "test_util.h"

#include <math.h>
#include <stdint.h>

static uint64_t rng = 0x9e3779b97f4a7c15u; /* tu_rand_u64 state (fixed: reproducible) */


/* The definition: the MPFR sequence with mpfr_tanh, all at out's precision. */
static void gelu_mpfr(mpfr_t out, const mpfr_t z, const mpfr_t c, const mpfr_t k)
{
    mpfr_t t;
    mpfr_init2(t, mpfr_get_prec(out));
    mpfr_sqr(t, z, MPFR_RNDN);
    mpfr_mul(t, t, z, MPFR_RNDN);
    mpfr_mul(t, t, c, MPFR_RNDN);
    mpfr_add(t, t, z, MPFR_RNDN);
    mpfr_mul(t, t, k, MPFR_RNDN);
    mpfr_tanh(t, t, MPFR_RNDN);
    mpfr_add_ui(t, t, 1, MPFR_RNDN);
    mpfr_mul(t, t, z, MPFR_RNDN);
    mpfr_div_2ui(out, t, 1, MPFR_RNDN);
    mpfr_clear(t);
}

static bool same(mpfr_t a, mpfr_t b)
{
    if (mpfr_nan_p(a) || mpfr_nan_p(b))
        return mpfr_nan_p(a) && mpfr_nan_p(b);
    return mpfr_equal_p(a, b) && mpfr_signbit(a) == mpfr_signbit(b);
}


/* One argument: the fast path (when it serves) and ref_gelu_tanh against the definition. */
static void check_one(mpfr_t z, ref_scratch *s, long *bad, long *served)
{
    mpfr_t r, m;
    mpfr_inits2(s->prec, r, m, (mpfr_ptr)0);
    gelu_mpfr(m, z, s->gelu_c, s->gelu_k);
    if (ref_gelu_tanh_f2(r, z, s->gelu_c, s->gelu_k)) {
        ++*served;
        *bad += !same(r, m);
    }
    ref_gelu_tanh(r, z, s);
    *bad += !same(r, m);
    mpfr_clears(r, m, (mpfr_ptr)0);
}

static void test_ref_gelu_matches_mpfr(void)
{
    const mpfr_prec_t precs[] = {2, 3, 5, 8, 11, 16, 24, 53, 63, 64, 65, 100, 113, 127, 128};
    for (size_t pi = 0; pi < sizeof precs / sizeof precs[0]; ++pi) {
        const mpfr_prec_t p = precs[pi];
        lm_err err = {0};
        ref_scratch s;
        CU_ASSERT_FATAL(ref_scratch_init(&s, p, 1, &err) == LM_OK);
        mpfr_t z;
        mpfr_init2(z, p);
        long bad = 0, served = 0, n = 0;
        for (int i = 0; i < 3000; ++i, ++n) {
            /* most in the activations' range, some far out (tanh = +-1, tiny arguments) */
            if (i % 4 == 3)
                tu_rand_mpfr(z, &rng, -80, 12);
            else
                tu_rand_mpfr(z, &rng, -6, 4);
            check_one(z, &s, &bad, &served);
        }
        /* z = +-(1 + 2^-(p/2)) 2^j: z^2 = (1 + 2^(1 - p/2) + 2^-p) 2^2j is an exact tie at p */
        for (int j = -3; j <= 3 && p % 2 == 0 && p >= 4; ++j) {
            mpfr_set_ui_2exp(z, 1, -(mpfr_exp_t)(p / 2), MPFR_RNDN);
            mpfr_add_ui(z, z, 1, MPFR_RNDN);
            mpfr_mul_2si(z, z, j, MPFR_RNDN);
            check_one(z, &s, &bad, &served);
            mpfr_neg(z, z, MPFR_RNDN);
            check_one(z, &s, &bad, &served);
            n += 2;
        }
        /* short significands: exact products, sums with long carries */
        for (long v = -40; v <= 40; ++v, ++n) {
            mpfr_set_si_2exp(z, v, -3, MPFR_RNDN);
            check_one(z, &s, &bad, &served);
        }
        CU_ASSERT_EQUAL(bad, 0);
        if (bad != 0)
            printf("\n    precision %ld: %ld of %ld differ ", (long)p, bad, n);
        /* tanh cannot be decided in fixed point for results below 2^(P + 8 - 192), and
         * 1 + tanh = 0 goes to MPFR: still most arguments take the fast path */
        CU_ASSERT(served > n * 6 / 10);
        mpfr_clear(z);
        ref_scratch_clear(&s);
    }
}

static void test_ref_gelu_special(void)
{
    lm_err err = {0};
    ref_scratch s;
    CU_ASSERT_FATAL(ref_scratch_init(&s, 127, 1, &err) == LM_OK);
    mpfr_t z, r, m;
    mpfr_inits2(127, z, r, m, (mpfr_ptr)0);
    const double vals[] = {0.0, -0.0, INFINITY, -INFINITY, NAN, 1e300, -1e300, 0x1p-600,
                           -0x1p-600, 40.0, -40.0, -3.0, 1.0, -1.0};
    for (size_t i = 0; i < sizeof vals / sizeof vals[0]; ++i) {
        mpfr_set_d(z, vals[i], MPFR_RNDN);
        gelu_mpfr(m, z, s.gelu_c, s.gelu_k);
        ref_gelu_tanh(r, z, &s);
        CU_ASSERT(same(r, m));
    }
    /* in place, as the reference calls it */
    mpfr_set_d(z, -0.8125, MPFR_RNDN);
    gelu_mpfr(m, z, s.gelu_c, s.gelu_k);
    CU_ASSERT(ref_gelu_tanh_f2(z, z, s.gelu_c, s.gelu_k));
    CU_ASSERT(same(z, m));
    /* not served: non-regular, tanh = -1 (1 + tanh = 0), beyond 2^20 binades, a mixed or wider
     * precision */
    mpfr_set_zero(z, 1);
    CU_ASSERT(!ref_gelu_tanh_f2(r, z, s.gelu_c, s.gelu_k));
    mpfr_set_si(z, -40, MPFR_RNDN);
    CU_ASSERT(!ref_gelu_tanh_f2(r, z, s.gelu_c, s.gelu_k));
    mpfr_set_ui_2exp(z, 1, 1L << 21, MPFR_RNDN);
    CU_ASSERT(!ref_gelu_tanh_f2(r, z, s.gelu_c, s.gelu_k));
    mpfr_t w;
    mpfr_init2(w, 129);
    mpfr_set_d(w, 0.5, MPFR_RNDN);
    CU_ASSERT(!ref_gelu_tanh_f2(r, w, s.gelu_c, s.gelu_k));
    mpfr_clears(z, r, m, w, (mpfr_ptr)0);
    ref_scratch_clear(&s);
}

void test_ref_gelu_register(void)
{
    CU_pSuite s = CU_add_suite("ref_gelu", NULL, NULL);
    CU_add_test(s, "test_ref_gelu_matches_mpfr", test_ref_gelu_matches_mpfr);
    CU_add_test(s, "test_ref_gelu_special", test_ref_gelu_special);
}
