/* test_moe.c — MoE routing (top-k, tie rule, margin), gating variants and the expert FFN
 * against a double-precision closed form. */
#include "../engine/moe.h"
#include "fixtures.h"
#include "kvd_profile.h"
#include "test_util.h"

#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_moe_topk_ties_and_nan(void)
{
    const float l[6] = {1.0f, 3.0f, NAN, 3.0f, 2.0f, 3.0f};
    uint32_t sel[6]; /* [k], k up to 6 below */
    lm_moe_topk(sel, l, 6, 2); /* three experts tie at 3: the lower ids 1, 3 win */
    CU_ASSERT(sel[0] == 1 && sel[1] == 3);
    CU_ASSERT_EQUAL(lm_moe_margin(l, 6, sel, 2), 0.0f); /* expert 5 ties the 2nd: margin 0 */
    lm_moe_topk(sel, l, 6, 4);
    CU_ASSERT(sel[0] == 1 && sel[1] == 3 && sel[2] == 5 && sel[3] == 4);
    CU_ASSERT_EQUAL(lm_moe_margin(l, 6, sel, 4), 1.0f); /* 2 - 1; NaN is ignored */
    const float m[3] = {NAN, -1.0f, NAN};
    lm_moe_topk(sel, m, 3, 2); /* a number before any NaN, NaNs by id */
    CU_ASSERT(sel[0] == 1 && sel[1] == 0);
    lm_moe_topk(sel, l, 6, 6);
    CU_ASSERT(isinf(lm_moe_margin(l, 6, sel, 6)));
    /* descending input: order is by logit, not by position */
    const float d[5] = {-5.0f, -4.0f, -3.0f, -2.0f, -1.0f};
    lm_moe_topk(sel, d, 5, 3);
    CU_ASSERT(sel[0] == 4 && sel[1] == 3 && sel[2] == 2);
    CU_ASSERT_EQUAL(lm_moe_margin(d, 5, sel, 3), 1.0f);
}

static void test_moe_gate_variants(void)
{
    const float eq[8] = {0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f, 0.5f};
    uint32_t sel[2];
    float w[2];
    lm_moe_topk(sel, eq, 8, 2);
    lm_moe_gate(w, eq, 8, sel, 2, LM_MOE_SOFTMAX_TOPK);
    CU_ASSERT(w[0] == 0.5f && w[1] == 0.5f); /* exact: 1 / 2 */
    lm_moe_gate(w, eq, 8, sel, 2, LM_MOE_SOFTMAX_ALL);
    CU_ASSERT(w[0] == 0.125f && w[1] == 0.125f); /* exact: 1 / 8 */
    lm_moe_gate(w, eq, 8, sel, 2, LM_MOE_SOFTMAX_ALL_RENORM);
    CU_ASSERT(w[0] == 0.5f && w[1] == 0.5f);
    /* unequal: closed form in double; the two renormalised variants agree to rounding */
    const float l[4] = {2.0f, -1.0f, 0.25f, 1.5f};
    uint32_t s3[3];
    float w3[3], v3[3], a3[3];
    lm_moe_topk(s3, l, 4, 3); /* 0, 3, 2 */
    CU_ASSERT(s3[0] == 0 && s3[1] == 3 && s3[2] == 2);
    lm_moe_gate(w3, l, 4, s3, 3, LM_MOE_SOFTMAX_TOPK);
    lm_moe_gate(v3, l, 4, s3, 3, LM_MOE_SOFTMAX_ALL_RENORM);
    lm_moe_gate(a3, l, 4, s3, 3, LM_MOE_SOFTMAX_ALL);
    double den_sel = 0.0, den_all = 0.0;
    for (int r = 0; r < 3; ++r)
        den_sel += exp((double)l[s3[r]]);
    for (int e = 0; e < 4; ++e)
        den_all += exp((double)l[e]);
    for (int r = 0; r < 3; ++r) {
        const double want = exp((double)l[s3[r]]) / den_sel;
        /* 4 ulp of 1.0f (4.8e-7): lm_expf (<= 2 ulp), a 3-term sum, one division */
        CU_ASSERT(fabs((double)w3[r] - want) < 4.8e-7);
        CU_ASSERT(fabs((double)v3[r] - want) < 4.8e-7);
        CU_ASSERT(fabs((double)a3[r] - exp((double)l[s3[r]]) / den_all) < 4.8e-7);
    }
}

typedef struct moe_problem {
    uint32_t n, d, ff, ne, k;
    float *x, *wr, *wg, *wu, *wd;
    float *br, *bg, *bu, *bd; /* biases (gpt-oss) or NULL */
    lm_ffn_act act;
} moe_problem;

static void moe_make(moe_problem *p, uint64_t *rng, uint32_t n, uint32_t ne, uint32_t k)
{
    p->n = n;
    p->d = 16;
    p->ff = 24;
    p->ne = ne;
    p->k = k;
    p->x = tf_rand_vec((size_t)n * p->d, 1.0f, rng);
    p->wr = tf_rand_vec((size_t)ne * p->d, 1.0f, rng);
    p->wg = tf_rand_vec((size_t)ne * p->ff * p->d, 0.5f, rng);
    p->wu = tf_rand_vec((size_t)ne * p->ff * p->d, 0.5f, rng);
    p->wd = tf_rand_vec((size_t)ne * p->d * p->ff, 0.5f, rng);
    p->br = p->bg = p->bu = p->bd = NULL;
    p->act = LM_ACT_SWIGLU;
}

/* gpt-oss's experts: every bias, swiglu_oai, gate and up weights 6 times larger (gate and up
 * values of standard deviation ~7, so that the limit 7 clamps a good part of them). */
static void moe_make_oai(moe_problem *p, uint64_t *rng, uint32_t n, uint32_t ne, uint32_t k)
{
    moe_make(p, rng, n, ne, k);
    for (size_t i = 0; i < (size_t)ne * p->ff * p->d; ++i) {
        p->wg[i] *= 6.0f;
        p->wu[i] *= 6.0f;
    }
    p->br = tf_rand_vec(ne, 1.0f, rng);
    p->bg = tf_rand_vec((size_t)ne * p->ff, 1.0f, rng);
    p->bu = tf_rand_vec((size_t)ne * p->ff, 1.0f, rng);
    p->bd = tf_rand_vec((size_t)ne * p->d, 1.0f, rng);
    p->act = LM_ACT_SWIGLU_OAI;
}

static void moe_free(moe_problem *p)
{
    free(p->x);
    free(p->wr);
    free(p->wg);
    free(p->wu);
    free(p->wd);
    free(p->br);
    free(p->bg);
    free(p->bu);
    free(p->bd);
}

static void moe_run(lm_backend *be, const moe_problem *p, uint32_t t0, uint32_t n,
                    lm_moe_gating gating, float *out, uint32_t *sel, float *margin)
{
    const lm_wt wr = lm_wt_f32(p->wr), wg = lm_wt_f32(p->wg), wu = lm_wt_f32(p->wu),
                wd = lm_wt_f32(p->wd);
    lm_moe_args a = {
        .n = n, .n_embd = p->d, .n_ff = p->ff, .n_expert = p->ne, .n_used = p->k,
        .gating = gating, .x = p->x + (size_t)t0 * p->d, .w_router = &wr, .w_gate = &wg,
        .w_up = &wu, .w_down = &wd, .b_router = p->br, .b_gate = p->bg, .b_up = p->bu,
        .b_down = p->bd, .act = p->act, .out = out + (size_t)t0 * p->d,
        .sel = sel + (size_t)t0 * p->k, .margin = margin + t0,
    };
    a.scratch_floats = lm_moe_scratch(n, p->d, p->ff, p->ne, p->k);
    a.scratch = malloc(a.scratch_floats * sizeof(float));
    lm_moe_forward(be, &a);
    free(a.scratch);
}

/* Closed form of one token in double, given the routing (compared separately); *clamped
 * counts the gate or up values swiglu_oai clamps (when p->act is it). */
static void moe_closed_form(double *out /* [d] */, const moe_problem *p, uint32_t t,
                            const uint32_t *sel, uint32_t *clamped)
{
    double lg[64], h[64];
    const float *x = p->x + (size_t)t * p->d;
    for (uint32_t e = 0; e < p->ne; ++e) {
        lg[e] = p->br ? (double)p->br[e] : 0.0;
        for (uint32_t i = 0; i < p->d; ++i)
            lg[e] += (double)x[i] * (double)p->wr[(size_t)e * p->d + i];
    }
    double den = 0.0;
    for (uint32_t r = 0; r < p->k; ++r)
        den += exp(lg[sel[r]]);
    for (uint32_t i = 0; i < p->d; ++i)
        out[i] = 0.0;
    for (uint32_t r = 0; r < p->k; ++r) {
        const uint32_t e = sel[r];
        for (uint32_t f = 0; f < p->ff; ++f) {
            double g = p->bg ? (double)p->bg[(size_t)e * p->ff + f] : 0.0;
            double u = p->bu ? (double)p->bu[(size_t)e * p->ff + f] : 0.0;
            for (uint32_t i = 0; i < p->d; ++i) {
                g += (double)x[i] * (double)p->wg[((size_t)e * p->ff + f) * p->d + i];
                u += (double)x[i] * (double)p->wu[((size_t)e * p->ff + f) * p->d + i];
            }
            if (p->act == LM_ACT_SWIGLU_OAI) {
                *clamped += (g > 7.0) + (fabs(u) > 7.0);
                g = fmin(g, 7.0);
                u = fmax(-7.0, fmin(u, 7.0));
                h[f] = g / (1.0 + exp(-1.702 * g)) * (u + 1.0);
            } else {
                h[f] = g / (1.0 + exp(-g)) * u;
            }
        }
        const double w = exp(lg[e]) / den;
        for (uint32_t i = 0; i < p->d; ++i) {
            double y = p->bd ? (double)p->bd[(size_t)e * p->d + i] : 0.0;
            for (uint32_t f = 0; f < p->ff; ++f)
                y += h[f] * (double)p->wd[((size_t)e * p->d + i) * p->ff + f];
            out[i] += w * y;
        }
    }
}

/* Reference top-k in double: the expected routing when the float margin is not a near-tie. */
static void topk_double(uint32_t *sel, const moe_problem *p, uint32_t t)
{
    float lg[64];
    const float *x = p->x + (size_t)t * p->d;
    for (uint32_t e = 0; e < p->ne; ++e) {
        double s = p->br ? (double)p->br[e] : 0.0;
        for (uint32_t i = 0; i < p->d; ++i)
            s += (double)x[i] * (double)p->wr[(size_t)e * p->d + i];
        lg[e] = (float)s;
    }
    lm_moe_topk(sel, lg, p->ne, p->k);
}

/* p run on be with gating, every output against the closed form in double: the largest error
 * into *worst, the largest |closed form| into *big, clamped values counted into *clamped.
 * Returns whether the routing is the exact one wherever the router margin exceeds 1e-5 (a
 * smaller margin is a near tie the float router may resolve either way). */
static bool moe_vs_closed_form(lm_backend *be, const moe_problem *p, lm_moe_gating gating,
                               double *worst, double *big, uint32_t *clamped)
{
    float *out = malloc((size_t)p->n * p->d * sizeof(float));
    uint32_t *sel = malloc((size_t)p->n * p->k * sizeof(uint32_t));
    float *margin = malloc(p->n * sizeof(float));
    CU_ASSERT_FATAL(out != NULL && sel != NULL && margin != NULL);
    moe_run(be, p, 0, p->n, gating, out, sel, margin);
    double want[16];
    uint32_t sd[32];
    bool routed_ok = true;
    *worst = *big = 0.0;
    for (uint32_t t = 0; t < p->n; ++t) {
        topk_double(sd, p, t);
        if (margin[t] > 1e-5f)
            routed_ok &= memcmp(sd, sel + (size_t)t * p->k, p->k * sizeof(uint32_t)) == 0;
        CU_ASSERT(margin[t] >= 0.0f);
        moe_closed_form(want, p, t, sel + (size_t)t * p->k, clamped);
        for (uint32_t i = 0; i < p->d; ++i) {
            const double e = fabs((double)out[(size_t)t * p->d + i] - want[i]);
            *worst = e > *worst || isnan(e) ? e : *worst;
            *big = fmax(*big, fabs(want[i]));
        }
    }
    free(out);
    free(sel);
    free(margin);
    return routed_ok;
}

static void test_moe_forward_matches_closed_form(void)
{
    static const char *backends[] = {"naive", "blas"};
    static const uint32_t shapes[][2] = {{8, 2}, {32, 4}, {4, 4}, {5, 1}};
    static const lm_moe_gating gatings[] = {LM_MOE_SOFTMAX_TOPK, LM_MOE_SOFTMAX_ALL_RENORM};
    uint64_t rng = tu_seed() ^ 0x3e3u;
    for (int b = 0; b < 2; ++b) {
        lm_backend *be = NULL;
        lm_err err = {0};
        CU_ASSERT_FATAL(lm_backend_create(&be, backends[b], 1, &err) == LM_OK);
        for (int s = 0; s < 4; ++s)
            for (int gi = 0; gi < 2; ++gi) {
                moe_problem p;
                moe_make(&p, &rng, 13, shapes[s][0], shapes[s][1]);
                double worst, big;
                uint32_t clamped = 0;
                CU_ASSERT(moe_vs_closed_form(be, &p, gatings[gi], &worst, &big, &clamped));
                /* 1e-5: outputs are O(1) (16- and 24-term dots of O(0.5) weights); float
                 * accumulation over ~40 terms per path stays below ~5e-6, while a wrong gate
                 * weight, expert or activation changes outputs by >= 1e-2 */
                if (worst > 1e-5)
                    printf("\n  moe %s %ux%u gating %d: max err %.3g\n", backends[b], p.ne, p.k,
                           (int)gatings[gi], worst);
                CU_ASSERT(worst <= 1e-5);
                moe_free(&p);
            }
        lm_backend_destroy(be);
    }
}

/* gpt-oss's experts: router and expert biases and swiglu_oai against the closed form in
 * double, with the softmax over the top-k, on both backends. Tolerance relative to the
 * largest output (~30-45): the float path rounds ~60 terms per output (router, 16-term dots,
 * 24-term down dots, the gate sum), each within 2^-24 relative of values up to that size. The
 * worst case of those roundings (60 * 2^-24 = 3.6e-6) is above the 2e-6 bound, so the bound is
 * a margin over what is measured, not a proof: the errors partly cancel (sqrt(60) * 2^-24 =
 * 4.6e-7), and the measured maximum is 2.8e-7 of the largest output (naive, 16 experts, top
 * 4), 7x below the bound. A missing bias (of size ~1), a clamp left out (values up to ~40
 * instead of 7) or silu's slope 1 instead of 1.702 moves outputs by more than 1e-2 of it. */
static void test_moe_biases_swiglu_oai(void)
{
    static const char *backends[] = {"naive", "blas"};
    static const uint32_t shapes[][2] = {{8, 2}, {16, 4}};
    uint64_t rng = tu_seed() ^ 0x0a1u;
    uint32_t clamped = 0;
    for (int b = 0; b < 2; ++b) {
        lm_backend *be = NULL;
        lm_err err = {0};
        CU_ASSERT_FATAL(lm_backend_create(&be, backends[b], 1, &err) == LM_OK);
        for (int s = 0; s < 2; ++s) {
            moe_problem p;
            moe_make_oai(&p, &rng, 11, shapes[s][0], shapes[s][1]);
            double worst, big;
            CU_ASSERT(moe_vs_closed_form(be, &p, LM_MOE_SOFTMAX_TOPK, &worst, &big, &clamped));
            if (worst > 2e-6 * big)
                printf("\n  moe oai %s %ux%u: max err %.3g of %.3g\n", backends[b], p.ne, p.k,
                       worst, big);
            CU_ASSERT(worst <= 2e-6 * big);
            moe_free(&p);
        }
        lm_backend_destroy(be);
    }
    CU_ASSERT(clamped > 100); /* the limit was exercised */
}

/* Naive backend: a token's output, routing and margin do not depend on its chunk. */
static void test_moe_chunk_invariant_naive(void)
{
    uint64_t rng = tu_seed() ^ 0x99u;
    moe_problem p;
    moe_make(&p, &rng, 20, 8, 2);
    lm_backend *be = NULL;
    lm_err err = {0};
    CU_ASSERT_FATAL(lm_backend_create(&be, "naive", 1, &err) == LM_OK);
    const size_t no = (size_t)p.n * p.d;
    float *o1 = malloc(no * sizeof(float)), *o2 = malloc(no * sizeof(float));
    uint32_t *s1 = malloc((size_t)p.n * p.k * sizeof(uint32_t));
    uint32_t *s2 = malloc((size_t)p.n * p.k * sizeof(uint32_t));
    float m1[20], m2[20];
    moe_run(be, &p, 0, p.n, LM_MOE_SOFTMAX_TOPK, o1, s1, m1);
    for (uint32_t t = 0; t < p.n; t += 3)
        moe_run(be, &p, t, p.n - t < 3 ? p.n - t : 3, LM_MOE_SOFTMAX_TOPK, o2, s2, m2);
    CU_ASSERT_EQUAL(memcmp(o1, o2, no * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(s1, s2, (size_t)p.n * p.k * sizeof(uint32_t)), 0);
    CU_ASSERT_EQUAL(memcmp(m1, m2, sizeof m1), 0);
    free(o1);
    free(o2);
    free(s1);
    free(s2);
    lm_backend_destroy(be);
    moe_free(&p);
}

/* Every gating computes its exponentials after subtracting the largest logit: with one router
 * logit 300 above the others (exp(300) overflows float), the top expert's gate is exactly 1
 * and every other selected gate exactly 0, for every gating and wherever the top expert sits;
 * a gate shifted by any other logit is Inf / Inf there. */
static void test_moe_gate_dominant_logit(void)
{
    enum { NE = 8, K = 3 };
    const lm_moe_gating gatings[3] = {LM_MOE_SOFTMAX_TOPK, LM_MOE_SOFTMAX_ALL_RENORM,
                                      LM_MOE_SOFTMAX_ALL};
    for (uint32_t top = 0; top < NE; ++top)
        for (int g = 0; g < 3; ++g) {
            float logits[NE];
            for (uint32_t e = 0; e < NE; ++e)
                logits[e] = e == top ? 300.0f : -(float)e * 0.25f;
            uint32_t sel[K];
            float w[K];
            lm_moe_topk(sel, logits, NE, K);
            CU_ASSERT_EQUAL(sel[0], top);
            lm_moe_gate(w, logits, NE, sel, K, gatings[g]);
            CU_ASSERT_EQUAL(w[0], 1.0f);
            for (uint32_t r = 1; r < K; ++r)
                CU_ASSERT_EQUAL(w[r], 0.0f);
        }
}

/* A profile that rounds the SwiGLU output (f16act) rounds the experts' too, as the dense
 * FFN's: the output moves away from the closed form in double by more than the float path's
 * 1e-5 (test_moe_forward_matches_closed_form), and by less than binary16 rounding of every
 * expert activation can move it: |x| <= 1 and |w| <= 0.5 over 16 terms bound gate and up by
 * 8, so |H| <= 8 * 8; each H_f moves by <= 2^-11 |H_f|, through 24 down weights of |w| <= 0.5
 * and gate weights summing to 1: 24 * 0.5 * 2^-11 * 64 = 0.375, plus the float path's 1e-5. */
static void test_moe_profile_rounds_expert_activations(void)
{
    uint64_t rng = tu_seed() ^ 0x3e5u;
    lm_backend *be = NULL;
    lm_err err = {0};
    CU_ASSERT_FATAL(lm_backend_create(&be, "naive", 1, &err) == LM_OK);
    be->prof = lm_profile_find("f16act");
    CU_ASSERT_FATAL(be->prof != NULL);
    moe_problem p;
    moe_make(&p, &rng, 13, 8, 2);
    double worst, big;
    uint32_t clamped = 0;
    moe_vs_closed_form(be, &p, LM_MOE_SOFTMAX_TOPK, &worst, &big, &clamped);
    CU_ASSERT(worst > 1e-5);
    CU_ASSERT(worst <= 0.375 + 1e-5);
    moe_free(&p);
    lm_backend_destroy(be);
}

void test_moe_register(void)
{
    CU_pSuite s = CU_add_suite("moe", NULL, NULL);
    CU_add_test(s, "test_moe_topk_ties_and_nan", test_moe_topk_ties_and_nan);
    CU_add_test(s, "test_moe_gate_variants", test_moe_gate_variants);
    CU_add_test(s, "test_moe_gate_dominant_logit", test_moe_gate_dominant_logit);
    CU_add_test(s, "test_moe_profile_rounds_expert_activations",
                test_moe_profile_rounds_expert_activations);
    CU_add_test(s, "test_moe_forward_matches_closed_form", test_moe_forward_matches_closed_form);
    CU_add_test(s, "test_moe_chunk_invariant_naive", test_moe_chunk_invariant_naive);
    CU_add_test(s, "test_moe_biases_swiglu_oai", test_moe_biases_swiglu_oai);
}
