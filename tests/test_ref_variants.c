/* test_ref_variants.c — the reference's window/sink softmax, rotating-cache schedule and MoE
 * routing/gating: exact answers first, then double closed forms, then a cross-check of the
 * schedule against the engine's independent rotating-cache bookkeeping. */
#include "ref_variants.h"
#include "../engine/kvcache_rotating.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
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

static void test_ref_variants_softmax_sink_exact(void)
{
    mpfr_t *x = ref_vec_new(4, P), *y = ref_vec_new(4, P), *q = ref_vec_new(1, P);
    for (int i = 0; i < 4; ++i)
        mpfr_set_d(x[i], 0.75, MPFR_RNDN);
    const float sink = 0.75f;
    ref_softmax_sink(x, 4, &sink, &scr); /* five equal terms: each 1/5 correctly rounded */
    mpfr_set_ui(q[0], 1, MPFR_RNDN);
    mpfr_div_ui(q[0], q[0], 5, MPFR_RNDN);
    for (int i = 0; i < 4; ++i)
        CU_ASSERT(mpfr_equal_p(x[i], q[0]));
    /* without a sink it is exactly ref_softmax */
    for (int i = 0; i < 4; ++i) {
        mpfr_set_d(x[i], 0.5 * i - 1.0, MPFR_RNDN);
        mpfr_set(y[i], x[i], MPFR_RNDN);
    }
    ref_softmax_sink(x, 4, NULL, &scr);
    ref_softmax(y, 4, &scr);
    for (int i = 0; i < 4; ++i)
        CU_ASSERT(mpfr_equal_p(x[i], y[i]));
    /* a sink far above the scores takes (almost) all the mass, without overflow */
    const float big = 80.0f;
    mpfr_set_d(x[0], -80.0, MPFR_RNDN);
    ref_softmax_sink(x, 1, &big, &scr); /* e^-160 / (1 + e^-160) */
    CU_ASSERT(mpfr_number_p(x[0]) && mpfr_cmp_d(x[0], 1e-69) < 0 && mpfr_sgn(x[0]) > 0);
    ref_vec_free(x, 4);
    ref_vec_free(y, 4);
    ref_vec_free(q, 1);
}

static void test_ref_variants_softmax_sink_closed_form(void)
{
    uint64_t rng = tu_seed() ^ 0xabcu;
    mpfr_t *x = ref_vec_new(9, P);
    double xd[9];
    for (int trial = 0; trial < 20; ++trial) {
        const float sink = 4.0f * tu_rand_f32(&rng);
        double mx = (double)sink, den = 0.0;
        for (int i = 0; i < 9; ++i) {
            xd[i] = 4.0 * (double)tu_rand_f32(&rng);
            mpfr_set_d(x[i], xd[i], MPFR_RNDN);
            mx = xd[i] > mx ? xd[i] : mx;
        }
        for (int i = 0; i < 9; ++i)
            den += exp(xd[i] - mx);
        den += exp((double)sink - mx);
        ref_softmax_sink(x, 9, &sink, &scr);
        for (int i = 0; i < 9; ++i) { /* double closed form: ~1e-15 relative; allow 1e-14 */
            const double want = exp(xd[i] - mx) / den;
            CU_ASSERT(fabs(mpfr_get_d(x[i], MPFR_RNDN) - want) <= 1e-14 * want);
        }
    }
    ref_vec_free(x, 9);
    CU_ASSERT(ref_window_visible(10, 7, 4) && !ref_window_visible(10, 6, 4));
    CU_ASSERT(ref_window_visible(10, 0, 0) && !ref_window_visible(10, 11, 0));
}

/* The reference's sorted-set model and the engine's slot bookkeeping are written separately;
 * they must give every token the same positions. */
static void test_ref_variants_rotating_schedule_matches_engine(void)
{
    static const uint32_t cfg[][3] = {{4, 1, 1}, {4, 1, 2}, {4, 1, 6}, {8, 4, 3}, {8, 4, 16},
                                      {16, 0, 7}, {10, 9, 64}, {2, 0, 5}, {33, 4, 64}};
    const uint32_t n_prompt = 70, n_tokens = 90;
    int32_t vis[256];
    for (int c = 0; c < 9; ++c) {
        ref_rot_schedule rs;
        lm_err err = {0};
        CU_ASSERT_FATAL(ref_rot_schedule_make(&rs, cfg[c][0], cfg[c][1], cfg[c][2], n_prompt,
                                              n_tokens, &err) == LM_OK);
        lm_rotcache rc;
        lm_rotcache_plan p;
        CU_ASSERT_FATAL(lm_rotcache_init(&rc, cfg[c][0], cfg[c][1], cfg[c][2], &err) == LM_OK);
        int same = 1;
        for (uint32_t done = 0; done < n_tokens;) {
            const uint32_t n =
                done < n_prompt ? (n_prompt - done < cfg[c][2] ? n_prompt - done : cfg[c][2]) : 1;
            CU_ASSERT_FATAL(lm_rotcache_update(&rc, n, &p, &err) == LM_OK);
            for (uint32_t i = 0; i < n; ++i) {
                const uint32_t m = lm_rotcache_visible(&rc, done, i, vis);
                const uint64_t a = rs.start[done + i], b = rs.start[done + i + 1];
                same &= m == b - a;
                for (uint32_t j = 0; same && j < m; ++j)
                    same &= (uint32_t)vis[j] == rs.vis[a + j];
            }
            done += n;
        }
        if (!same)
            printf("\n  schedule mismatch: max_size %u keep %u step %u\n", cfg[c][0], cfg[c][1],
                   cfg[c][2]);
        CU_ASSERT(same);
        lm_rotcache_release(&rc);
        ref_rot_schedule_free(&rs);
    }
    /* max_size >= the sequence: every token sees 0..t */
    ref_rot_schedule rs;
    lm_err err = {0};
    CU_ASSERT_FATAL(ref_rot_schedule_make(&rs, 90, 4, 7, n_prompt, n_tokens, &err) == LM_OK);
    int plain = 1;
    for (uint32_t t = 0; t < n_tokens; ++t) {
        plain &= rs.start[t + 1] - rs.start[t] == t + 1;
        for (uint32_t j = 0; plain && j <= t; ++j)
            plain &= rs.vis[rs.start[t] + j] == j;
    }
    CU_ASSERT(plain);
    ref_rot_schedule_free(&rs);
    CU_ASSERT(ref_rot_schedule_make(&rs, 4, 4, 1, 3, 5, &err) == LM_E_INPUT);
}

static void test_ref_variants_moe_routing_and_gates(void)
{
    mpfr_t *l = ref_vec_new(6, P), *w = ref_vec_new(4, P), *v = ref_vec_new(4, P);
    mpfr_t *mg = ref_vec_new(1, P);
    const double ld[6] = {1.0, 3.0, 3.0, -2.0, 2.0, 3.0};
    for (int e = 0; e < 6; ++e)
        mpfr_set_d(l[e], ld[e], MPFR_RNDN);
    uint32_t sel[4];
    ref_moe_topk(sel, l, 6, 2); /* ties at 3: ids 1, 2 */
    CU_ASSERT(sel[0] == 1 && sel[1] == 2);
    ref_moe_margin(mg[0], l, 6, sel, 2);
    CU_ASSERT(mpfr_zero_p(mg[0]));
    ref_moe_topk(sel, l, 6, 4);
    CU_ASSERT(sel[0] == 1 && sel[1] == 2 && sel[2] == 5 && sel[3] == 4);
    ref_moe_margin(mg[0], l, 6, sel, 4);
    CU_ASSERT(mpfr_cmp_d(mg[0], 1.0) == 0);
    /* gating: closed form, and variants 0 and 1 agree to a few ulps at P bits */
    double den_sel = 0.0, den_all = 0.0;
    for (int r = 0; r < 4; ++r)
        den_sel += exp(ld[sel[r]]);
    for (int e = 0; e < 6; ++e)
        den_all += exp(ld[e]);
    ref_moe_gate(w, l, 6, sel, 4, 0, &scr);
    ref_moe_gate(v, l, 6, sel, 4, 1, &scr);
    /* Tolerance 1e-15 absolute on weights in (0, 1]: the P-bit result rounded to double is
     * within 2^-54 of the truth, and the double closed form (libm exp, <= 6-term sum, one
     * division) within ~4 ulp of 1 (~9e-16); a wrong selection or denominator moves a weight by
     * >= 1e-2. */
    for (int r = 0; r < 4; ++r) {
        const double want = exp(ld[sel[r]]) / den_sel;
        CU_ASSERT(fabs(mpfr_get_d(w[r], MPFR_RNDN) - want) <= 1e-15);
        mpfr_sub(mg[0], w[r], v[r], MPFR_RNDN);
        CU_ASSERT(mpfr_zero_p(mg[0]) || mpfr_get_exp(mg[0]) < mpfr_get_exp(w[r]) - (P - 8));
    }
    ref_moe_gate(w, l, 6, sel, 4, 2, &scr);
    for (int r = 0; r < 4; ++r) /* tolerance 1e-15: as above */
        CU_ASSERT(fabs(mpfr_get_d(w[r], MPFR_RNDN) - exp(ld[sel[r]]) / den_all) <= 1e-15);
    ref_vec_free(l, 6);
    ref_vec_free(w, 4);
    ref_vec_free(v, 4);
    ref_vec_free(mg, 1);
}

void test_ref_variants_register(void)
{
    CU_pSuite s = CU_add_suite("ref_variants", setup, teardown);
    CU_add_test(s, "test_ref_variants_softmax_sink_exact", test_ref_variants_softmax_sink_exact);
    CU_add_test(s, "test_ref_variants_softmax_sink_closed_form",
                test_ref_variants_softmax_sink_closed_form);
    CU_add_test(s, "test_ref_variants_rotating_schedule_matches_engine",
                test_ref_variants_rotating_schedule_matches_engine);
    CU_add_test(s, "test_ref_variants_moe_routing_and_gates",
                test_ref_variants_moe_routing_and_gates);
}
