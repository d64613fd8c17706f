/* test_attention_stream.c — streaming and masked attention (windows, remapped slots, sinks)
 * against a double-precision closed form, and their helpers; masked attention's chunk
 * invariance under stochastic rounding and its rounding of probabilities under a profile. */
#include "../engine/attention_stream.h"
#include "kvd_profile.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Closed form in double: out[i][h] = sum_j p_j v_j, p_j = e^{s_j} / (e^{sink} + sum e^{s_k}). */
static void closed_form(double *out /* [n][n_head][hd] */, const lm_attn_var_args *a)
{
    const uint32_t hd = a->head_dim, group = a->n_head / a->n_head_kv;
    double *s = malloc(sizeof(double) * (a->n_kv ? a->n_kv : 1));
    for (uint32_t i = 0; i < a->n; ++i)
        for (uint32_t h = 0; h < a->n_head; ++h) {
            const uint32_t g = h / group;
            const float *q = a->q + ((size_t)i * a->n_head + h) * hd;
            double mx = a->sinks ? (double)a->sinks[h] : -(double)INFINITY;
            for (uint32_t j = 0; j < a->n_kv; ++j) {
                const int32_t kp = a->kv_pos ? a->kv_pos[j] : (int32_t)j;
                const uint32_t qp = a->pos0 + i;
                const int vis = kp >= 0 && (uint32_t)kp <= qp &&
                                (a->window == 0 || qp - (uint32_t)kp < a->window);
                if (!vis) {
                    s[j] = NAN;
                    continue;
                }
                const float *k = a->k + ((size_t)j * a->n_head_kv + g) * hd;
                double d = 0.0;
                for (uint32_t e = 0; e < hd; ++e)
                    d += (double)q[e] * (double)k[e];
                s[j] = d * (double)a->scale;
                mx = s[j] > mx ? s[j] : mx;
            }
            double den = a->sinks ? exp((double)a->sinks[h] - mx) : 0.0;
            for (uint32_t j = 0; j < a->n_kv; ++j)
                if (!isnan(s[j]))
                    den += exp(s[j] - mx);
            double *o = out + ((size_t)i * a->n_head + h) * hd;
            for (uint32_t e = 0; e < hd; ++e)
                o[e] = 0.0;
            for (uint32_t j = 0; j < a->n_kv; ++j) {
                if (isnan(s[j]))
                    continue;
                const double p = exp(s[j] - mx) / den;
                const float *v = a->v + ((size_t)j * a->n_head_kv + g) * hd;
                for (uint32_t e = 0; e < hd; ++e)
                    o[e] += p * (double)v[e];
            }
        }
    free(s);
}

typedef struct problem {
    uint32_t n, pos0, n_kv, n_head, n_head_kv, hd;
    float *q, *k, *v, *sinks;
    int32_t *kv_pos;
} problem;

static void problem_make(problem *p, uint64_t *rng, uint32_t n, uint32_t pos0, uint32_t n_kv,
                         bool sinks, bool permuted)
{
    p->n = n;
    p->pos0 = pos0;
    p->n_kv = n_kv;
    p->n_head = 4;
    p->n_head_kv = 2;
    p->hd = 8;
    const size_t nq = (size_t)n * p->n_head * p->hd, nk = (size_t)n_kv * p->n_head_kv * p->hd;
    p->q = malloc(nq * sizeof(float));
    p->k = malloc(nk * sizeof(float));
    p->v = malloc(nk * sizeof(float));
    for (size_t i = 0; i < nq; ++i)
        p->q[i] = 3.0f * tu_rand_f32(rng); /* scores of a few units: a peaked softmax */
    for (size_t i = 0; i < nk; ++i) {
        p->k[i] = tu_rand_f32(rng);
        p->v[i] = tu_rand_f32(rng);
    }
    p->sinks = NULL;
    if (sinks) {
        p->sinks = malloc(p->n_head * sizeof(float));
        for (uint32_t h = 0; h < p->n_head; ++h)
            p->sinks[h] = 2.0f * tu_rand_f32(rng);
    }
    p->kv_pos = NULL;
    if (permuted) { /* a shuffled cache (a circular buffer's slot order), one empty slot */
        p->kv_pos = malloc(n_kv * sizeof(int32_t));
        for (uint32_t j = 0; j < n_kv; ++j)
            p->kv_pos[j] = (int32_t)j;
        for (uint32_t j = n_kv - 1; j > 0; --j) {
            uint32_t r = (uint32_t)(tu_rand_u64(rng) % (j + 1));
            int32_t t = p->kv_pos[j];
            p->kv_pos[j] = p->kv_pos[r];
            p->kv_pos[r] = t;
        }
        p->kv_pos[n_kv / 2] = -1;
    }
}

static void problem_free(problem *p)
{
    free(p->q);
    free(p->k);
    free(p->v);
    free(p->sinks);
    free(p->kv_pos);
}

static lm_attn_var_args args_of(const problem *p, uint32_t window, float *out)
{
    lm_attn_var_args a = {
        .n = p->n, .pos0 = p->pos0, .n_kv = p->n_kv, .kv_pos = p->kv_pos, .window = window,
        .sinks = p->sinks, .n_head = p->n_head, .n_head_kv = p->n_head_kv, .head_dim = p->hd,
        .scale = 1.0f / sqrtf((float)p->hd), .q = p->q, .k = p->k, .v = p->v, .out = out,
        .tile = 16,
    };
    return a;
}

/* Max abs difference between a float result and the closed form. */
static double max_err(const float *got, const double *want, size_t n)
{
    double e = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double d = fabs((double)got[i] - want[i]);
        e = d > e || isnan(d) ? d : e;
    }
    return e;
}

static void check_case(lm_backend *be, uint64_t *rng, uint32_t window, bool sinks, bool permuted)
{
    problem p;
    problem_make(&p, rng, 37, 50, 87, sinks, permuted);
    const size_t no = (size_t)p.n * p.n_head * p.hd;
    float *o_s = malloc(no * sizeof(float)), *o_d = malloc(no * sizeof(float));
    double *want = malloc(no * sizeof(double));
    lm_attn_var_args a = args_of(&p, window, o_s);
    closed_form(want, &a);
    a.scratch_floats = lm_attn_stream_scratch(p.hd, a.tile);
    a.scratch = malloc(a.scratch_floats * sizeof(float));
    lm_attention_stream(be, &a);
    free(a.scratch);
    a.out = o_d;
    a.scratch_floats = lm_attn_masked_scratch(p.n, p.n_kv);
    a.scratch = malloc(a.scratch_floats * sizeof(float));
    lm_attention_masked(be, &a);
    free(a.scratch);
    /* Tolerance 2e-6: outputs are convex combinations of |v| <= 1 and each float op adds at
     * most ~6e-8 relative; 8-term dots, <= 88-term sums and lm_expf (<= 2 ulp) stay well
     * below 2e-6, while a wrong mask or a lost rescale moves results by >= 1e-2. */
    const double es = max_err(o_s, want, no), ed = max_err(o_d, want, no);
    if (es > 2e-6 || ed > 2e-6)
        printf("\n  %s window=%u sinks=%d permuted=%d: stream err %.3g, dense err %.3g\n",
               be->vt->name, window, (int)sinks, (int)permuted, es, ed);
    CU_ASSERT(es <= 2e-6);
    CU_ASSERT(ed <= 2e-6);
    free(o_s);
    free(o_d);
    free(want);
    problem_free(&p);
}

static void test_attention_stream_matches_closed_form(void)
{
    static const char *backends[] = {"naive", "blas"};
    uint64_t rng = tu_seed();
    for (int b = 0; b < 2; ++b) {
        lm_backend *be = NULL;
        lm_err err = {0};
        CU_ASSERT_FATAL(lm_backend_create(&be, backends[b], 1, &err) == LM_OK);
        const uint32_t windows[] = {0, 1, 7, 40, 1000};
        for (int w = 0; w < 5; ++w)
            for (int sk = 0; sk < 2; ++sk)
                for (int pm = 0; pm < 2; ++pm)
                    check_case(be, &rng, windows[w], sk, pm);
        lm_backend_destroy(be);
    }
}

/* Window 1 and no sink: every query sees only itself, so out = its own V row exactly. */
static void test_attention_stream_window_one_is_identity(void)
{
    uint64_t rng = tu_seed() ^ 0x51u;
    problem p;
    problem_make(&p, &rng, 20, 10, 30, false, false);
    const size_t no = (size_t)p.n * p.n_head * p.hd;
    float *o = malloc(no * sizeof(float));
    lm_backend *be = NULL;
    lm_err err = {0};
    CU_ASSERT_FATAL(lm_backend_create(&be, "naive", 1, &err) == LM_OK);
    lm_attn_var_args a = args_of(&p, 1, o);
    a.scratch_floats = lm_attn_stream_scratch(p.hd, a.tile);
    a.scratch = malloc(a.scratch_floats * sizeof(float));
    lm_attention_stream(be, &a);
    int bad = 0;
    for (uint32_t i = 0; i < p.n; ++i)
        for (uint32_t h = 0; h < p.n_head; ++h)
            for (uint32_t e = 0; e < p.hd; ++e) /* p = 1 exactly: 1 * v / 1 is exact */
                bad += o[((size_t)i * p.n_head + h) * p.hd + e] !=
                       p.v[((size_t)(p.pos0 + i) * p.n_head_kv + h / 2) * p.hd + e];
    CU_ASSERT_EQUAL(bad, 0);
    free(a.scratch);
    free(o);
    lm_backend_destroy(be);
    problem_free(&p);
}

/* Streaming attention on backend (windows 0 and 13) gives the same bits fed in pieces of 1, 7
 * and 64 queries as in one chunk. */
static void check_stream_chunk_invariant(const char *backend, uint64_t seed)
{
    uint64_t rng = tu_seed() ^ seed;
    problem p;
    problem_make(&p, &rng, 90, 0, 90, true, false);
    const size_t row = (size_t)p.n_head * p.hd, no = p.n * row;
    float *o1 = malloc(no * sizeof(float)), *o2 = malloc(no * sizeof(float));
    lm_backend *be = NULL;
    lm_err err = {0};
    CU_ASSERT_FATAL(lm_backend_create(&be, backend, 1, &err) == LM_OK);
    for (int w = 0; w < 2; ++w) {
        lm_attn_var_args a = args_of(&p, w ? 13 : 0, o1);
        a.scratch_floats = lm_attn_stream_scratch(p.hd, a.tile);
        a.scratch = malloc(a.scratch_floats * sizeof(float));
        lm_attention_stream(be, &a);
        static const uint32_t steps[] = {1, 7, 64};
        for (int si = 0; si < 3; ++si) {
            for (uint32_t done = 0; done < p.n; done += steps[si]) {
                lm_attn_var_args c = a;
                c.n = p.n - done < steps[si] ? p.n - done : steps[si];
                c.pos0 = done;
                c.n_kv = done + c.n;
                c.q = p.q + done * row;
                c.out = o2 + done * row;
                lm_attention_stream(be, &c);
            }
            CU_ASSERT_EQUAL(memcmp(o1, o2, no * sizeof(float)), 0);
        }
        free(a.scratch);
    }
    free(o1);
    free(o2);
    lm_backend_destroy(be);
    problem_free(&p);
}

/* With the naive backend a query's result does not depend on how the queries were chunked:
 * tiles are fixed in slot space and a tile a row cannot see leaves that row untouched. */
static void test_attention_stream_chunk_invariant_naive(void)
{
    check_stream_chunk_invariant("naive", 0x77u);
}

/* The SR ensemble's backend perturbs each tile's weights with coins of the key's slot (the
 * tile's number and the key's index in it), so streaming stays chunk-invariant there too. */
static void test_attention_stream_chunk_invariant_sr(void)
{
    check_stream_chunk_invariant("naive-sr:seed=5", 0x7au);
}

/* A profile that rounds the attention probabilities (bf16) rounds the weights each tile's
 * P . V reads in streaming attention too: the output moves, by at most 2^-8 max|v| (each
 * weight e_j moves by at most 2^-8 e_j, and the output is sum e_j v_j / sum e_j with the
 * denominator unrounded), plus each run's float sums and rescalings of at most 30 terms
 * (<= 30 * 2^-24 max|v| each, two runs). */
static void test_attention_stream_profile_rounds_probabilities(void)
{
    uint64_t rng = tu_seed() ^ 0x7bu;
    problem p;
    problem_make(&p, &rng, 30, 0, 30, false, false);
    const size_t no = (size_t)p.n * p.n_head * p.hd;
    float *o[2] = {malloc(no * sizeof(float)), malloc(no * sizeof(float))};
    CU_ASSERT_FATAL(o[0] != NULL && o[1] != NULL);
    lm_backend *be = NULL;
    lm_err err = {0};
    CU_ASSERT_FATAL(lm_backend_create(&be, "naive", 1, &err) == LM_OK);
    lm_attn_var_args a = args_of(&p, 9, o[0]);
    a.tile = 8;
    a.scratch_floats = lm_attn_stream_scratch(p.hd, a.tile);
    a.scratch = malloc(a.scratch_floats * sizeof(float));
    CU_ASSERT_FATAL(a.scratch != NULL);
    lm_attention_stream(be, &a);
    be->prof = lm_profile_find("bf16");
    CU_ASSERT_FATAL(be->prof != NULL);
    a.out = o[1];
    lm_attention_stream(be, &a);
    float vmax = 0.0f, dmax = 0.0f;
    for (size_t i = 0; i < (size_t)p.n_kv * p.n_head_kv * p.hd; ++i)
        vmax = fabsf(p.v[i]) > vmax ? fabsf(p.v[i]) : vmax;
    for (size_t i = 0; i < no; ++i)
        dmax = fabsf(o[1][i] - o[0][i]) > dmax ? fabsf(o[1][i] - o[0][i]) : dmax;
    CU_ASSERT(dmax > 0.0f);
    CU_ASSERT(dmax <= ldexpf(vmax, -8) + 60.0f * ldexpf(vmax, -24));
    free(a.scratch);
    free(o[0]);
    free(o[1]);
    lm_backend_destroy(be);
    problem_free(&p);
}

/* Masked attention over a chunk fed in pieces of `step` queries (0: one chunk) into out. */
static void masked_in_steps(lm_backend *be, const lm_attn_var_args *a, uint32_t step, float *out)
{
    const size_t row = (size_t)a->n_head * a->head_dim;
    for (uint32_t done = 0; done < a->n;) {
        lm_attn_var_args c = *a;
        c.n = step == 0 || a->n - done < step ? a->n - done : step;
        c.pos0 = a->pos0 + done;
        c.n_kv = c.pos0 + c.n;
        c.q = a->q + done * row;
        c.out = out + done * row;
        lm_attention_masked(be, &c);
        done += c.n;
    }
}

/* Masked attention of a problem of n queries at positions 0.. over n slots (window, sinks as
 * asked) on a backend, with two output buffers o[0], o[1] of no floats; a.out = o[0]. */
typedef struct masked_run {
    problem p;
    lm_backend *be;
    lm_attn_var_args a;
    float *o[2];
    size_t no;
} masked_run;

static void masked_setup(masked_run *r, uint64_t seed, uint32_t n, uint32_t window, bool sinks,
                         const char *backend)
{
    uint64_t rng = tu_seed() ^ seed;
    problem_make(&r->p, &rng, n, 0, n, sinks, false);
    r->no = (size_t)n * r->p.n_head * r->p.hd;
    r->o[0] = malloc(r->no * sizeof(float));
    r->o[1] = malloc(r->no * sizeof(float));
    CU_ASSERT_FATAL(r->o[0] != NULL && r->o[1] != NULL);
    lm_err err = {0};
    r->be = NULL;
    CU_ASSERT_FATAL(lm_backend_create(&r->be, backend, 1, &err) == LM_OK);
    r->a = args_of(&r->p, window, r->o[0]);
    r->a.scratch_floats = lm_attn_masked_scratch(n, n);
    r->a.scratch = malloc(r->a.scratch_floats * sizeof(float));
    CU_ASSERT_FATAL(r->a.scratch != NULL);
}

static void masked_teardown(masked_run *r)
{
    free(r->a.scratch);
    free(r->o[0]);
    free(r->o[1]);
    lm_backend_destroy(r->be);
    problem_free(&r->p);
}

/* The SR ensemble's backend in masked attention (sliding windows, sinks): the same bits for
 * every chunking, as in dense attention; its coins belong to a key's slot, not to where the
 * chunk's first visible key is. */
static void test_attention_masked_chunk_invariant_sr(void)
{
    masked_run r;
    masked_setup(&r, 0x78u, 60, 13, true, "naive-sr:seed=5");
    masked_in_steps(r.be, &r.a, 0, r.o[0]);
    static const uint32_t steps[] = {1, 7, 32};
    for (int si = 0; si < 3; ++si) {
        masked_in_steps(r.be, &r.a, steps[si], r.o[1]);
        CU_ASSERT_EQUAL(memcmp(r.o[0], r.o[1], r.no * sizeof(float)), 0);
    }
    masked_teardown(&r);
}

/* A profile that rounds the attention probabilities (bf16) rounds them in masked attention
 * too: the output moves, by at most what rounding each p_j to 8 significant bits can move it:
 * |p_j - bf16(p_j)| <= 2^-8 p_j and sum p_j <= 1, so |delta out| <= 2^-8 max|v|, plus each
 * run's float sum of at most 30 terms (<= 30 * 2^-24 max|v| each, two runs). */
static void test_attention_masked_profile_rounds_probabilities(void)
{
    masked_run r;
    masked_setup(&r, 0x79u, 30, 9, false, "naive");
    lm_attention_masked(r.be, &r.a);
    r.be->prof = lm_profile_find("bf16");
    CU_ASSERT_FATAL(r.be->prof != NULL);
    r.a.out = r.o[1];
    lm_attention_masked(r.be, &r.a);
    float vmax = 0.0f, dmax = 0.0f;
    for (size_t i = 0; i < (size_t)r.p.n_kv * r.p.n_head_kv * r.p.hd; ++i)
        vmax = fabsf(r.p.v[i]) > vmax ? fabsf(r.p.v[i]) : vmax;
    for (size_t i = 0; i < r.no; ++i)
        dmax = fabsf(r.o[1][i] - r.o[0][i]) > dmax ? fabsf(r.o[1][i] - r.o[0][i]) : dmax;
    CU_ASSERT(dmax > 0.0f);
    CU_ASSERT(dmax <= ldexpf(vmax, -8) + 60.0f * ldexpf(vmax, -24));
    masked_teardown(&r);
}

static void test_attention_stream_softmax_sink_row(void)
{
    /* equal logits: 1/n each (n = 4: exactly 0.25) */
    float s[4] = {0.5f, 0.5f, 0.5f, 0.5f};
    CU_ASSERT_EQUAL(lm_softmax_sink_row(s, NULL, 4, NULL), 4);
    for (int j = 0; j < 4; ++j)
        CU_ASSERT_EQUAL(s[j], 0.25f);
    /* a sink equal to the logits takes its share of the denominator: 1/5 each */
    float t[4] = {1.0f, 1.0f, 1.0f, 1.0f}, sink = 1.0f;
    lm_softmax_sink_row(t, NULL, 4, &sink);
    for (int j = 0; j < 4; ++j)
        CU_ASSERT_EQUAL(t[j], 1.0f / 5.0f);
    /* masked entries become +0 and do not count; a -inf sink is no sink */
    float u[3] = {3.0f, 100.0f, 3.0f}, mask[3] = {0.0f, -INFINITY, 0.0f}, ninf = -INFINITY;
    CU_ASSERT_EQUAL(lm_softmax_sink_row(u, mask, 3, &ninf), 2);
    CU_ASSERT_EQUAL(u[0], 0.5f);
    CU_ASSERT_EQUAL(u[1], 0.0f);
    CU_ASSERT_EQUAL(u[2], 0.5f);
    /* huge logits: max subtraction keeps it finite */
    float w2[2] = {1e30f, 1e30f};
    lm_softmax_sink_row(w2, NULL, 2, NULL);
    CU_ASSERT_EQUAL(w2[0], 0.5f);
    /* nothing visible and no sink: all zero */
    float z[2] = {1.0f, 2.0f}, mz[2] = {-INFINITY, -INFINITY};
    CU_ASSERT_EQUAL(lm_softmax_sink_row(z, mz, 2, NULL), 0);
    CU_ASSERT_EQUAL(z[0], 0.0f);
    CU_ASSERT_EQUAL(z[1], 0.0f);
}

static void test_attention_stream_mask_and_range(void)
{
    uint32_t lo, hi;
    lm_attn_visible_range(10, 0, &lo, &hi);
    CU_ASSERT(lo == 0 && hi == 11);
    lm_attn_visible_range(10, 4, &lo, &hi); /* (6, 10] */
    CU_ASSERT(lo == 7 && hi == 11);
    lm_attn_visible_range(2, 4, &lo, &hi);
    CU_ASSERT(lo == 0 && hi == 3);
    float mask[2][5];
    lm_attn_mask_fill(&mask[0][0], 2, 2, NULL, 5, 2); /* queries at 2, 3; window 2 */
    const int want[2][5] = {{0, 1, 1, 0, 0}, {0, 0, 1, 1, 0}};
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 5; ++j)
            CU_ASSERT_EQUAL(mask[i][j] == 0.0f, want[i][j]);
    CU_ASSERT(lm_attn_visible(5, 5, 0) && !lm_attn_visible(5, 6, 0) && !lm_attn_visible(5, -1, 0));
}

/* The streaming scratch does not grow with the context; the dense one grows with n * n_kv. */
static void test_attention_stream_scratch_bounded(void)
{
    CU_ASSERT(lm_attn_stream_scratch(64, 0) == lm_attn_stream_scratch(64, LM_ATTN_STREAM_TILE));
    CU_ASSERT(lm_attn_masked_scratch(512, 16384) == (size_t)512 * 16384 + 16384);
    CU_ASSERT(lm_attn_stream_scratch(64, 256) < lm_attn_masked_scratch(64, 512));
}

void test_attention_stream_register(void)
{
    CU_pSuite s = CU_add_suite("attention_stream", NULL, NULL);
    CU_add_test(s, "test_attention_stream_softmax_sink_row", test_attention_stream_softmax_sink_row);
    CU_add_test(s, "test_attention_stream_mask_and_range", test_attention_stream_mask_and_range);
    CU_add_test(s, "test_attention_stream_window_one_is_identity",
                test_attention_stream_window_one_is_identity);
    CU_add_test(s, "test_attention_stream_matches_closed_form",
                test_attention_stream_matches_closed_form);
    CU_add_test(s, "test_attention_stream_chunk_invariant_naive",
                test_attention_stream_chunk_invariant_naive);
    CU_add_test(s, "test_attention_stream_scratch_bounded", test_attention_stream_scratch_bounded);
    CU_add_test(s, "test_attention_masked_chunk_invariant_sr",
                test_attention_masked_chunk_invariant_sr);
    CU_add_test(s, "test_attention_stream_chunk_invariant_sr",
                test_attention_stream_chunk_invariant_sr);
    CU_add_test(s, "test_attention_stream_profile_rounds_probabilities",
                test_attention_stream_profile_rounds_probabilities);
    CU_add_test(s, "test_attention_masked_profile_rounds_probabilities",
                test_attention_masked_profile_rounds_probabilities);
}
