/* test_ref_ops.c — the MPFR primitives of the reference (ref_ops.c): special values first, then
 * inputs with known exact answers, then random inputs against a 1000-bit computation. */
#include "kvd_ref.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define P 127

static ref_scratch scr;

static int setup(void)
{
    lm_err err = {0};
    return ref_scratch_init(&scr, P, 64, &err);
}

static int teardown(void)
{
    ref_scratch_clear(&scr);
    return 0;
}

/* |a - b| <= ulps * 2^(EXP(b) - P): a tolerance in units of b's last place at P bits */
static bool close_ulps(mpfr_t a, mpfr_t b, long ulps)
{
    if (mpfr_equal_p(a, b))
        return true;
    mpfr_t d;
    mpfr_init2(d, 2 * P);
    mpfr_sub(d, a, b, MPFR_RNDN);
    mpfr_abs(d, d, MPFR_RNDN);
    mpfr_div_2si(d, d, mpfr_get_exp(b) - P, MPFR_RNDN);
    bool ok = mpfr_cmp_si(d, ulps) <= 0;
    mpfr_clear(d);
    return ok;
}

static void test_ref_ops_special_values(void)
{
    mpfr_t *x = ref_vec_new(4, P), *w = ref_vec_new(4, P);
    mpfr_t r;
    mpfr_init2(r, P);
    /* n = 0: empty dot and sum are +0 */
    mpfr_set_si(r, 7, MPFR_RNDN);
    ref_dot(r, x, w, 0, &scr);
    CU_ASSERT(mpfr_zero_p(r) && !mpfr_signbit(r));
    mpfr_set_si(r, 7, MPFR_RNDN);
    ref_sum(r, x, 0);
    CU_ASSERT(mpfr_zero_p(r) && !mpfr_signbit(r));
    /* n = 1: one exact product */
    mpfr_set_flt(x[0], 1.5f, MPFR_RNDN);
    mpfr_set_flt(w[0], -0.25f, MPFR_RNDN);
    ref_dot(r, x, w, 1, &scr);
    CU_ASSERT(mpfr_cmp_d(r, -0.375) == 0);
    /* +-0 inputs */
    mpfr_set_zero(x[0], -1);
    ref_dot(r, x, w, 1, &scr);
    CU_ASSERT(mpfr_zero_p(r));
    /* NaN and Inf propagate, they are not swallowed */
    mpfr_set_nan(x[1]);
    mpfr_set_flt(w[1], 1.0f, MPFR_RNDN);
    ref_dot(r, x, w, 2, &scr);
    CU_ASSERT(mpfr_nan_p(r));
    mpfr_set_inf(x[1], 1);
    ref_dot(r, x, w, 2, &scr);
    CU_ASSERT(mpfr_inf_p(r) && mpfr_sgn(r) > 0);
    /* silu(0) = 0, silu(+Inf) = +Inf */
    mpfr_set_zero(x[0], 1);
    ref_silu(r, x[0], &scr);
    CU_ASSERT(mpfr_zero_p(r));
    mpfr_set_inf(x[0], 1);
    ref_silu(r, x[0], &scr);
    CU_ASSERT(mpfr_inf_p(r) && mpfr_sgn(r) > 0);
    /* softmax of one element is exactly 1 */
    mpfr_set_d(x[0], -123.25, MPFR_RNDN);
    ref_softmax(x, 1, &scr);
    CU_ASSERT(mpfr_cmp_ui(x[0], 1) == 0);
    /* RMSNorm of the zero vector is zero (eps keeps the scale finite) */
    for (int i = 0; i < 4; ++i)
        mpfr_set_zero(x[i], 1);
    const float ones[4] = {1.0f, 1.0f, 1.0f, 1.0f};
    ref_rmsnorm(w, x, ones, 4, 1e-5f, &scr);
    for (int i = 0; i < 4; ++i)
        CU_ASSERT(mpfr_zero_p(w[i]));
    mpfr_clear(r);
    ref_vec_free(x, 4);
    ref_vec_free(w, 4);
}

/* The fast exact weight conversion equals mpfr_set_flt on special values, subnormals and
 * random bit patterns, at one, two and four limbs. */
static void test_ref_ops_row_set_flt(void)
{
    static const uint32_t special[] = {0x00000000u, 0x80000000u, 0x7f800000u, 0xff800000u,
                                       0x7fc00000u, 0x00000001u, 0x807fffffu, 0x00400000u,
                                       0x00800000u, 0x7f7fffffu, 0x3f800000u, 0xbf800001u};
    enum { NS = sizeof special / sizeof special[0], NR = 2000 };
    const mpfr_prec_t precs[3] = {53, 127, 250};
    uint64_t rng = tu_seed() ^ 0x666c74u;
    float *w = malloc((NS + NR) * sizeof *w);
    for (int i = 0; i < NS; ++i)
        memcpy(&w[i], &special[i], 4);
    for (int i = 0; i < NR; ++i) {
        uint32_t b = (uint32_t)tu_rand_u64(&rng);
        memcpy(&w[NS + i], &b, 4);
    }
    lm_err err = {0};
    mpfr_t e;
    for (int pi = 0; pi < 3; ++pi) {
        ref_scratch s;
        CU_ASSERT_FATAL(ref_scratch_init(&s, precs[pi], NS + NR, &err) == LM_OK);
        ref_row_set_flt(&s, w, NS + NR);
        mpfr_init2(e, precs[pi]);
        int bad = 0;
        for (int i = 0; i < NS + NR; ++i) {
            mpfr_set_flt(e, w[i], MPFR_RNDN);
            if (mpfr_nan_p(e) ? !mpfr_nan_p(s.row[i])
                              : !(mpfr_equal_p(e, s.row[i]) && mpfr_signbit(e) == mpfr_signbit(s.row[i])))
                ++bad;
        }
        CU_ASSERT_EQUAL(bad, 0);
        /* usable as an operand: 1 * w = w */
        mpfr_set_ui(e, 1, MPFR_RNDN);
        mpfr_mul(e, e, s.row[10], MPFR_RNDN);
        CU_ASSERT(mpfr_cmp_ui(e, 1) == 0);
        mpfr_clear(e);
        ref_scratch_clear(&s);
    }
    free(w);
}

static void test_ref_ops_rmsnorm_constant_vectors(void)
{
    enum { N = 16 };
    mpfr_t *x = ref_vec_new(N, P), *y = ref_vec_new(N, P);
    float wt[N];
    for (int i = 0; i < N; ++i)
        wt[i] = (float)(i + 1) * 0.5f;
    /* x = c for all i, eps = 0: y[i] = sign(c) * w[i]. c = -4: every step is exact. */
    for (int i = 0; i < N; ++i)
        mpfr_set_si(x[i], -4, MPFR_RNDN);
    ref_rmsnorm(y, x, wt, N, 0.0f, &scr);
    for (int i = 0; i < N; ++i)
        CU_ASSERT(mpfr_cmp_d(y[i], -(double)wt[i]) == 0);
    /* c = 3: 1/sqrt(9) is rounded once, then two products: within 2 ulps of w[i] */
    mpfr_t e;
    mpfr_init2(e, P);
    for (int i = 0; i < N; ++i)
        mpfr_set_si(x[i], 3, MPFR_RNDN);
    ref_rmsnorm(y, x, wt, N, 0.0f, &scr);
    for (int i = 0; i < N; ++i) {
        mpfr_set_flt(e, wt[i], MPFR_RNDN);
        CU_ASSERT(close_ulps(y[i], e, 2));
    }
    /* eps is added to the mean: x = 1, eps = 3 (as float) -> y = w / 2 exactly */
    for (int i = 0; i < N; ++i)
        mpfr_set_si(x[i], 1, MPFR_RNDN);
    ref_rmsnorm(y, x, wt, N, 3.0f, &scr);
    for (int i = 0; i < N; ++i)
        CU_ASSERT(mpfr_cmp_d(y[i], (double)wt[i] / 2) == 0);
    /* aliasing out == x is allowed */
    ref_rmsnorm(x, x, wt, N, 3.0f, &scr);
    for (int i = 0; i < N; ++i)
        CU_ASSERT(mpfr_equal_p(x[i], y[i]));
    mpfr_clear(e);
    ref_vec_free(x, N);
    ref_vec_free(y, N);
}

static void test_ref_ops_softmax_known(void)
{
    mpfr_t *x = ref_vec_new(5, P);
    mpfr_t third;
    mpfr_init2(third, P);
    /* equal logits: 1/n; n = 4 is exact, n = 3 is 1/3 correctly rounded */
    for (int i = 0; i < 4; ++i)
        mpfr_set_d(x[i], 2.75, MPFR_RNDN);
    ref_softmax(x, 4, &scr);
    for (int i = 0; i < 4; ++i)
        CU_ASSERT(mpfr_cmp_d(x[i], 0.25) == 0);
    for (int i = 0; i < 3; ++i)
        mpfr_set_d(x[i], -1e6, MPFR_RNDN);
    ref_softmax(x, 3, &scr);
    mpfr_set_ui(third, 1, MPFR_RNDN);
    mpfr_div_ui(third, third, 3, MPFR_RNDN);
    for (int i = 0; i < 3; ++i)
        CU_ASSERT(mpfr_equal_p(x[i], third));
    /* two logits 0 and ln 3: (1/4, 3/4) to within 4 ulps (exp and log rounded once each) */
    mpfr_set_zero(x[0], 1);
    mpfr_set_ui(x[1], 3, MPFR_RNDN);
    mpfr_log(x[1], x[1], MPFR_RNDN);
    ref_softmax(x, 2, &scr);
    mpfr_set_d(third, 0.25, MPFR_RNDN);
    CU_ASSERT(close_ulps(x[0], third, 4));
    mpfr_set_d(third, 0.75, MPFR_RNDN);
    CU_ASSERT(close_ulps(x[1], third, 4));
    /* a -Inf logit gets probability exactly 0 */
    mpfr_set_inf(x[0], -1);
    mpfr_set_ui(x[1], 5, MPFR_RNDN);
    ref_softmax(x, 2, &scr);
    CU_ASSERT(mpfr_zero_p(x[0]));
    CU_ASSERT(mpfr_cmp_ui(x[1], 1) == 0);
    mpfr_clear(third);
    ref_vec_free(x, 5);
}

static void test_ref_ops_silu_known(void)
{
    /* silu(ln 3) = ln 3 / (1 + 1/3) = 0.75 ln 3, within 4 ulps (log, exp, add, div rounded) */
    mpfr_t z, r, e;
    mpfr_inits2(P, z, r, e, (mpfr_ptr)0);
    mpfr_set_ui(z, 3, MPFR_RNDN);
    mpfr_log(z, z, MPFR_RNDN);
    ref_silu(r, z, &scr);
    mpfr_mul_d(e, z, 0.75, MPFR_RNDN);
    CU_ASSERT(close_ulps(r, e, 4));
    /* odd-ish symmetry: silu(z) - silu(-z) = z */
    mpfr_t rn;
    mpfr_init2(rn, P);
    mpfr_neg(e, z, MPFR_RNDN);
    ref_silu(rn, e, &scr);
    mpfr_sub(e, r, rn, MPFR_RNDN);
    CU_ASSERT(close_ulps(e, z, 4));
    /* very negative z: silu(-1000) = -1000 e^-1000 / (1 + e^-1000), tiny and negative, not 0 */
    mpfr_set_si(z, -1000, MPFR_RNDN);
    ref_silu(r, z, &scr);
    CU_ASSERT(mpfr_sgn(r) < 0 && mpfr_get_exp(r) < -1400);
    mpfr_clears(z, r, e, rn, (mpfr_ptr)0);
}

static void test_ref_ops_rope_known(void)
{
    mpfr_t f, e;
    mpfr_inits2(P, f, e, (mpfr_ptr)0);
    /* i = 0: frequency exactly 1 */
    ref_rope_freq(f, 10000.0f, 0, 8);
    CU_ASSERT(mpfr_cmp_ui(f, 1) == 0);
    /* 16^(-4/8) = 1/4 and 10000^(-2/4) = 0.01 correctly rounded (mpfr_pow is) */
    ref_rope_freq(f, 16.0f, 2, 8);
    CU_ASSERT(mpfr_cmp_d(f, 0.25) == 0);
    ref_rope_freq(f, 10000.0f, 1, 4);
    mpfr_set_str(e, "0.01", 10, MPFR_RNDN);
    CU_ASSERT(mpfr_equal_p(f, e));

    enum { HD = 6, ROT = 4 };
    mpfr_t *cs = ref_vec_new(ROT, P), *x = ref_vec_new(HD, P);
    /* position 0: cos = 1, sin = 0, the rotation is the identity, bit for bit */
    ref_rope_cos_sin(cs, 0, 10000.0f, NULL, ROT, 0.0f, 0);
    for (int i = 0; i < HD; ++i)
        mpfr_set_d(x[i], 0.125 * (i + 1) - 0.3, MPFR_RNDN);
    ref_rope_apply(x, cs, ROT, REF_ROPE_NORM, &scr);
    for (int i = 0; i < HD; ++i) {
        mpfr_set_d(e, 0.125 * (i + 1) - 0.3, MPFR_RNDN);
        CU_ASSERT(mpfr_equal_p(x[i], e));
    }
    /* unit vector e0 at position 1: NORM pairs (0,1), NEOX pairs (0,2); angle 1 rad; dims past
     * n_rot are left alone */
    ref_rope_cos_sin(cs, 1, 10000.0f, NULL, ROT, 0.0f, 0);
    mpfr_t c1, s1;
    mpfr_inits2(P, c1, s1, (mpfr_ptr)0);
    mpfr_set_ui(e, 1, MPFR_RNDN);
    mpfr_sin_cos(s1, c1, e, MPFR_RNDN);
    for (int type = 0; type < 2; ++type) {
        ref_rope_type rt = type ? REF_ROPE_NEOX : REF_ROPE_NORM;
        for (int i = 0; i < HD; ++i)
            mpfr_set_ui(x[i], i == 0 || i == 5, MPFR_RNDN);
        ref_rope_apply(x, cs, ROT, rt, &scr);
        int partner = rt == REF_ROPE_NEOX ? 2 : 1;
        CU_ASSERT(mpfr_equal_p(x[0], c1));
        CU_ASSERT(mpfr_equal_p(x[partner], s1));
        for (int i = 1; i < 5; ++i)
            if (i != partner)
                CU_ASSERT(mpfr_zero_p(x[i]));
        CU_ASSERT(mpfr_cmp_ui(x[5], 1) == 0);
    }
    mpfr_clears(f, e, c1, s1, (mpfr_ptr)0);
    ref_vec_free(cs, ROT);
    ref_vec_free(x, HD);
}

static void test_ref_ops_dot_random_vs_1000_bits(void)
{
    enum { N = 64 };
    uint64_t rng = tu_seed() ^ 0x646f74u;
    mpfr_t *x = ref_vec_new(N, P), *w = ref_vec_new(N, P);
    mpfr_t r, ex, t, bound;
    mpfr_init2(r, P);
    mpfr_inits2(1000, ex, t, bound, (mpfr_ptr)0);
    for (int rep = 0; rep < 50; ++rep) {
        mpfr_set_zero(ex, 1);
        mpfr_set_zero(bound, 1);
        for (int i = 0; i < N; ++i) {
            /* x: a P-bit number (a float times a random odd P-bit factor), w: a float */
            mpfr_set_flt(x[i], tu_rand_f32(&rng), MPFR_RNDN);
            mpfr_set_ui(t, 3, MPFR_RNDN);
            mpfr_sqrt(t, t, MPFR_RNDN);
            mpfr_mul(x[i], x[i], t, MPFR_RNDN);
            mpfr_set_flt(w[i], tu_rand_f32(&rng) * 1000.0f, MPFR_RNDN);
            mpfr_mul(t, x[i], w[i], MPFR_RNDN); /* exact at 1000 bits */
            mpfr_add(ex, ex, t, MPFR_RNDN);
            mpfr_abs(t, t, MPFR_RNDN);
            mpfr_add(bound, bound, t, MPFR_RNDN);
        }
        ref_dot(r, x, w, N, &scr);
        /* standard recursive-summation bound: |err| <= 2 N u sum|x_i w_i|, u = 2^-P */
        mpfr_mul_ui(bound, bound, 2 * N, MPFR_RNDU);
        mpfr_div_2ui(bound, bound, P, MPFR_RNDU);
        mpfr_sub(t, r, ex, MPFR_RNDN);
        mpfr_abs(t, t, MPFR_RNDN);
        CU_ASSERT(mpfr_lessequal_p(t, bound));
    }
    mpfr_clear(r);
    mpfr_clears(ex, t, bound, (mpfr_ptr)0);
    ref_vec_free(x, N);
    ref_vec_free(w, N);
}

void test_ref_ops_register(void)
{
    CU_pSuite s = CU_add_suite("ref_ops", setup, teardown);
    CU_add_test(s, "test_ref_ops_special_values", test_ref_ops_special_values);
    CU_add_test(s, "test_ref_ops_row_set_flt", test_ref_ops_row_set_flt);
    CU_add_test(s, "test_ref_ops_rmsnorm_constant_vectors", test_ref_ops_rmsnorm_constant_vectors);
    CU_add_test(s, "test_ref_ops_softmax_known", test_ref_ops_softmax_known);
    CU_add_test(s, "test_ref_ops_silu_known", test_ref_ops_silu_known);
    CU_add_test(s, "test_ref_ops_rope_known", test_ref_ops_rope_known);
    CU_add_test(s, "test_ref_ops_dot_random_vs_1000_bits", test_ref_ops_dot_random_vs_1000_bits);
}
