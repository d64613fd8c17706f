/* test_compare.c — one configuration against baseline, reference and a measured envelope:
 * EXACT, NOISE, TIE_FLIP, DRIFT, FLIP and NONFINITE configurations built by hand, the greedy
 * divergence, and shape errors. */
#include "judge/compare.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

enum { NL = 2, NH = 1, HD = 4, NV = 6, NP = 3, NG = 3, NT = NP + NG, NPOS = 4, NM = 8 };
static const int32_t ref_path[NT] = {7, 8, 9, 1, 2, 3};

typedef struct fixture {
    ref_capture ref;
    double k[NL * NP * NH * HD], v[NL * NP * NH * HD], logits[NPOS * NV];
    uint32_t pos[NPOS];
    int32_t tokens[NT];
} fixture;

static void make_ref(fixture *f)
{
    memset(f, 0, sizeof *f);
    uint64_t st = tu_seed() ^ 0x636d70;
    for (size_t i = 0; i < sizeof f->k / sizeof f->k[0]; ++i) {
        f->k[i] = (double)tu_rand_f32(&st) + 1e-9 * (double)tu_rand_f32(&st);
        f->v[i] = (double)tu_rand_f32(&st) + 1e-9 * (double)tu_rand_f32(&st);
    }
    for (int p = 0; p < NPOS; ++p) {
        f->pos[p] = NP - 1 + (uint32_t)p;
        for (int j = 0; j < NV; ++j)
            f->logits[p * NV + j] = (double)tu_rand_f32(&st);
    }
    /* Rows at positions 2, 3, 4 choose the reference path's tokens 1, 2, 3 by a wide margin,
     * except position 3, a near tie: id 2 leads id 4 by 1e-6. */
    f->logits[0 * NV + 1] = 5.0;
    f->logits[1 * NV + 2] = 5.0;
    f->logits[1 * NV + 4] = 5.0 - 1e-6;
    f->logits[2 * NV + 3] = 5.0;
    f->logits[3 * NV + 0] = 5.0;
    memcpy(f->tokens, ref_path, sizeof ref_path);
    f->ref = (ref_capture){.version = 1, .prec = 127, .n_tokens = NT, .n_prompt = NP,
                           .n_layer = NL, .n_kv_head = NH, .head_dim = HD, .n_vocab = NV,
                           .n_pos = NPOS, .tokens = f->tokens, .pos = f->pos, .k = f->k,
                           .v = f->v, .logits = f->logits};
}

/* (float)(R + noise_i), noise_i = amp * ((seed + i) % 3 - 1): a deterministic +-amp pattern. */
static hx_capture *cap_from_ref(const fixture *f, double amp, int seed)
{
    hx_capture_shape s = {NL, NH, HD, NV, NP, NT, NPOS};
    hx_capture *c;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_capture_create(&c, &s, &err) == LM_OK);
    memcpy(c->tokens, ref_path, sizeof ref_path);
    memcpy(c->positions, f->pos, sizeof f->pos);
    size_t kv = NP * NH * HD;
    for (int l = 0; l < NL; ++l)
        for (size_t i = 0; i < kv; ++i) {
            c->k[l][i] = (float)(f->k[l * kv + i] + amp * (double)((seed + (int)i) % 3 - 1));
            c->v[l][i] = (float)(f->v[l * kv + i] + amp * (double)((seed + (int)i + 1) % 3 - 1));
        }
    for (int i = 0; i < NPOS * NV; ++i)
        c->logits[i] = (float)(f->logits[i] + amp * (double)((seed + i) % 3 - 1));
    return c;
}

typedef struct world {
    fixture f;
    hx_envelope *env;
    hx_capture *base;
} world;

static void make_world(world *w)
{
    make_ref(&w->f);
    hx_capture *members[NM];
    for (int m = 0; m < NM; ++m)
        members[m] = cap_from_ref(&w->f, 1e-6, m);
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_envelope_from_ensemble(&w->env, (const hx_capture *const *)members, NM,
                                              &w->f.ref, HX_ENVELOPE_SAFETY, &err) == LM_OK);
    for (int m = 0; m < NM; ++m)
        hx_capture_free(members[m]);
    w->base = cap_from_ref(&w->f, 0.0, 0);
}

static void free_world(world *w)
{
    hx_envelope_free(w->env);
    hx_capture_free(w->base);
}

static hx_config_report *run(hx_report *r, const char *name, const hx_capture *x,
                             const hx_capture *base, world *w)
{
    hx_config_report *c;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_report_add_config(r, &c, name, &err) == LM_OK);
    int rc = hx_compare_capture(c, x, base, &w->f.ref, w->env, &err);
    if (rc != LM_OK)
        fprintf(stderr, "\n  compare failed: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    return c;
}

static void test_compare_envelope_from_ensemble(void)
{
    world w;
    make_world(&w);
    CU_ASSERT(hx_envelope_complete(w.env));
    CU_ASSERT_EQUAL(w.env->n_members, NM);
    CU_ASSERT_EQUAL(w.env->n_pos, NPOS);
    CU_ASSERT_EQUAL(w.env->positions[1], 3);
    /* Noise 1e-6 plus float32 rounding of values below 5 (half an ulp, <= 2.4e-7):
     * dev in [1e-6, 1.3e-6], E twice that. */
    for (int l = 0; l < NL; ++l) {
        CU_ASSERT(w.env->k[l].dev >= 0.9e-6 && w.env->k[l].dev <= 1.3e-6);
        CU_ASSERT_EQUAL(w.env->k[l].e, 2.0 * w.env->k[l].dev);
    }
    for (int p = 0; p < NPOS; ++p) {
        CU_ASSERT(w.env->logits[p].e >= 1.9e-6 && w.env->logits[p].e <= 2.6e-6);
        /* The gap's spread around its mean (envelope.h): two +-1e-6 patterns of different
         * phase differ by >= 1.75e-6 from their mean difference for some member and token;
         * 1.6e-6 leaves room for float rounding of the top logit 5 (ulp 4.8e-7). */
        CU_ASSERT(w.env->logits[p].e_gap >= 2.0 * 1.6e-6);
    }
    free_world(&w);
}

static void test_compare_every_class(void)
{
    world w;
    make_world(&w);
    hx_report *r;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_report_create(&r, "unit", &err) == LM_OK);

    /* The baseline itself: EXACT everywhere. */
    hx_config_report *c = run(r, "naive:step=full", w.base, w.base, &w);
    CU_ASSERT_EQUAL(c->cls, HX_EXACT);
    CU_ASSERT(c->bitwise_baseline);
    CU_ASSERT_EQUAL(c->n_rows, 2 * NL + NPOS);
    CU_ASSERT_STRING_EQUAL(c->rows[0].name, "L0.K");
    CU_ASSERT_STRING_EQUAL(c->rows[3].name, "L1.V");
    CU_ASSERT_STRING_EQUAL(c->rows[4].name, "logits@2");
    CU_ASSERT_EQUAL(c->first_divergent, -1);
    CU_ASSERT_EQUAL(c->vs_base.max_abs, 0.0);
    CU_ASSERT_EQUAL(c->logits.n_top1_agree, NPOS);

    /* One element moved by 1e-7: NOISE, and not bitwise equal. */
    hx_capture *x = cap_from_ref(&w.f, 0.0, 0);
    x->k[1][5] += 1e-7f;
    c = run(r, "naive:step=2", x, w.base, &w);
    CU_ASSERT_EQUAL(c->cls, HX_NOISE);
    CU_ASSERT_FALSE(c->bitwise_baseline);
    CU_ASSERT_EQUAL(c->rows[0].cls, HX_EXACT); /* per tensor: L0.K still bitwise equal */
    CU_ASSERT_EQUAL(c->rows[2].cls, HX_NOISE);
    CU_ASSERT(c->vs_base.max_abs > 0.0);

    /* 1e-3 on one V element: DRIFT, named. */
    x->v[0][1] += 1e-3f;
    c = run(r, "naive:step=3", x, w.base, &w);
    CU_ASSERT_EQUAL(c->cls, HX_DRIFT);
    CU_ASSERT_PTR_NOT_NULL(strstr(c->reason, "L0.V"));
    hx_capture_free(x);

    /* The near tie at position 3 flips (id 4 one float32 ulp above 5), and the greedy path
     * follows it: TIE_FLIP, divergence at generated index 1. */
    x = cap_from_ref(&w.f, 0.0, 0);
    x->logits[1 * NV + 4] = nextafterf(5.0f, 6.0f);
    x->tokens[NP + 1] = 4;
    x->tokens[NP + 2] = 0;
    c = run(r, "blas:step=1", x, w.base, &w);
    CU_ASSERT_EQUAL(c->cls, HX_TIE_FLIP);
    CU_ASSERT_EQUAL(c->first_divergent, 1);
    CU_ASSERT_EQUAL(c->divergent_cls, HX_TIE_FLIP);
    CU_ASSERT_EQUAL(c->logits.n_top1_agree, NPOS - 1);
    hx_capture_free(x);

    /* A real flip at position 4 (id 5 far above the reference's choice): FLIP. */
    x = cap_from_ref(&w.f, 0.0, 0);
    x->logits[2 * NV + 5] = 6.0f;
    x->tokens[NP + 2] = 5;
    c = run(r, "blas:step=2", x, w.base, &w);
    CU_ASSERT_EQUAL(c->cls, HX_FLIP);
    CU_ASSERT_EQUAL(c->first_divergent, 2);
    CU_ASSERT_EQUAL(c->divergent_cls, HX_FLIP);
    hx_capture_free(x);

    /* The greedy tokens split while the teacher-forced row at that position agrees with R
     * (possible when the greedy run's decode steps round differently from the teacher-forced
     * evaluation): the split takes that row's class, here NOISE (no baseline: never EXACT). */
    x = cap_from_ref(&w.f, 0.0, 0);
    x->tokens[NP] = 0;
    c = run(r, "blas:step=3", x, NULL, &w);
    CU_ASSERT_EQUAL(c->first_divergent, 0);
    CU_ASSERT_EQUAL(c->divergent_cls, HX_NOISE);
    CU_ASSERT_EQUAL(c->cls, HX_NOISE);
    CU_ASSERT_FALSE(c->bitwise_baseline);
    hx_capture_free(x);

    /* NaN anywhere: NONFINITE. */
    x = cap_from_ref(&w.f, 0.0, 0);
    x->v[1][0] = NAN;
    c = run(r, "blas:step=4", x, w.base, &w);
    CU_ASSERT_EQUAL(c->cls, HX_NONFINITE);
    hx_capture_free(x);

    CU_ASSERT_EQUAL(hx_report_worst(r), HX_NONFINITE);
    hx_report_free(r);
    free_world(&w);
}

/* Only the generated tokens both sides hold are compared: a reference that generated one
 * token fewer (stopped early) is no divergence, for an identical or a noisy run alike. */
static void test_compare_shorter_reference_no_split(void)
{
    world w;
    make_world(&w);
    w.f.ref.n_tokens = NT - 1;
    hx_report *r;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_report_create(&r, "unit", &err) == LM_OK);
    hx_config_report *c = run(r, "naive:step=full", w.base, w.base, &w);
    CU_ASSERT_EQUAL(c->first_divergent, -1);
    CU_ASSERT_EQUAL(c->cls, HX_EXACT);
    hx_capture *x = cap_from_ref(&w.f, 0.0, 0);
    x->k[1][5] += 1e-7f;
    c = run(r, "naive:step=2", x, w.base, &w);
    CU_ASSERT_EQUAL(c->first_divergent, -1);
    CU_ASSERT_EQUAL(c->cls, HX_NOISE);
    hx_capture_free(x);
    hx_report_free(r);
    free_world(&w);
}

/* Prompt rows 0 .. NP-2 of c: (float)(rows + amp * pattern), rows [NP-1][NV] in double. */
static void add_prompt_rows(hx_capture *c, const double *rows, double amp, int seed)
{
    c->prompt_logits = malloc((NP - 1) * NV * sizeof *c->prompt_logits);
    CU_ASSERT_PTR_NOT_NULL_FATAL(c->prompt_logits);
    c->n_prompt_rows = NP - 1;
    for (int i = 0; i < (NP - 1) * NV; ++i)
        c->prompt_logits[i] = (float)(rows[i] + amp * (double)((seed + i) % 3 - 1));
}

/* Logits at every prompt position: the rows before the last prompt position are classified
 * like the others when capture, reference and envelope hold them: a near tie inside the
 * prompt that flips is a TIE_FLIP, a flip against a wide margin a FLIP; a capture without them
 * has only its usual rows compared. */
static void test_compare_prompt_rows(void)
{
    enum { NR = NP - 1 + NPOS }; /* reference rows at positions 0 .. NR-1 */
    fixture f;
    make_ref(&f);
    double logits[NR * NV];
    uint32_t pos[NR];
    uint64_t st = tu_seed() ^ 0x707274;
    for (int i = 0; i < (NP - 1) * NV; ++i)
        logits[i] = (double)tu_rand_f32(&st);
    /* position 0: id 2 leads id 4 by 1e-6 (a near tie); position 1: id 3 leads by far */
    logits[0 * NV + 2] = 5.0;
    logits[0 * NV + 4] = 5.0 - 1e-6;
    logits[1 * NV + 3] = 5.0;
    memcpy(logits + (NP - 1) * NV, f.logits, sizeof f.logits);
    for (uint32_t i = 0; i < NR; ++i)
        pos[i] = i;
    ref_capture ref = f.ref;
    ref.n_pos = NR;
    ref.pos = pos;
    ref.logits = logits;
    hx_capture *members[NM];
    for (int m = 0; m < NM; ++m) {
        members[m] = cap_from_ref(&f, 1e-6, m);
        add_prompt_rows(members[m], logits, 1e-6, m);
    }
    hx_envelope *env = NULL;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_envelope_from_ensemble(&env, (const hx_capture *const *)members, NM, &ref,
                                              HX_ENVELOPE_SAFETY, &err) == LM_OK);
    for (int m = 0; m < NM; ++m)
        hx_capture_free(members[m]);
    CU_ASSERT_EQUAL(env->n_pos, NR);
    hx_capture *base = cap_from_ref(&f, 0.0, 0);
    add_prompt_rows(base, logits, 0.0, 0);
    hx_report *r;
    CU_ASSERT_FATAL(hx_report_create(&r, "unit", &err) == LM_OK);
    hx_config_report *c;

    CU_ASSERT_FATAL(hx_report_add_config(r, &c, "base", &err) == LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_compare_capture(c, base, base, &ref, env, &err), LM_OK);
    CU_ASSERT_EQUAL(c->cls, HX_EXACT);
    CU_ASSERT_EQUAL(c->n_rows, 2 * NL + NR);
    CU_ASSERT_STRING_EQUAL(c->rows[2 * NL].name, "logits@0");
    CU_ASSERT_STRING_EQUAL(c->rows[2 * NL + NP - 1].name, "logits@2");

    /* the near tie at prompt position 0 flips (id 4 one float32 ulp above 5): TIE_FLIP */
    hx_capture *x = cap_from_ref(&f, 0.0, 0);
    add_prompt_rows(x, logits, 0.0, 0);
    x->prompt_logits[0 * NV + 4] = nextafterf(5.0f, 6.0f);
    CU_ASSERT_FATAL(hx_report_add_config(r, &c, "tie", &err) == LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_compare_capture(c, x, base, &ref, env, &err), LM_OK);
    CU_ASSERT_EQUAL(c->cls, HX_TIE_FLIP);
    CU_ASSERT_EQUAL(c->rows[2 * NL].cls, HX_TIE_FLIP);
    CU_ASSERT_EQUAL(c->first_divergent, -1); /* the generated tokens are the reference's */
    hx_capture_free(x);

    /* prompt position 1 flips against a margin of ~4: FLIP */
    x = cap_from_ref(&f, 0.0, 0);
    add_prompt_rows(x, logits, 0.0, 0);
    x->prompt_logits[1 * NV + 5] = 6.0f;
    CU_ASSERT_FATAL(hx_report_add_config(r, &c, "flip", &err) == LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_compare_capture(c, x, base, &ref, env, &err), LM_OK);
    CU_ASSERT_EQUAL(c->cls, HX_FLIP);
    CU_ASSERT_PTR_NOT_NULL(strstr(c->reason, "logits@1"));
    hx_capture_free(x);

    /* no prompt rows in the capture: the usual rows only, and not bitwise its baseline's */
    x = cap_from_ref(&f, 0.0, 0);
    CU_ASSERT_FATAL(hx_report_add_config(r, &c, "last only", &err) == LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_compare_capture(c, x, base, &ref, env, &err), LM_OK);
    CU_ASSERT_EQUAL(c->n_rows, 2 * NL + NPOS);
    CU_ASSERT_EQUAL(c->cls, HX_EXACT);
    hx_capture_free(x);

    hx_report_free(r);
    hx_capture_free(base);
    hx_envelope_free(env);
}

static void test_compare_shape_errors(void)
{
    world w;
    make_world(&w);
    hx_report *r;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_report_create(&r, "unit", &err) == LM_OK);
    hx_config_report *c;
    hx_report_add_config(r, &c, "blas:step=1", &err);
    hx_capture_shape s = {NL, NH, HD, NV + 1, NP, NT, NPOS};
    hx_capture *x;
    CU_ASSERT_FATAL(hx_capture_create(&x, &s, &err) == LM_OK);
    CU_ASSERT_EQUAL(hx_compare_capture(c, x, NULL, &w.f.ref, w.env, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "vocab 7"));
    lm_err_clear(&err);
    hx_capture_free(x);
    x = cap_from_ref(&w.f, 0.0, 0);
    x->positions[3] = 99;
    CU_ASSERT_EQUAL(hx_compare_capture(c, x, NULL, &w.f.ref, w.env, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "position 99"));
    lm_err_clear(&err);
    /* An ensemble that is too small, or misses a row. */
    hx_envelope *e;
    const hx_capture *few[1] = {x};
    CU_ASSERT_EQUAL(hx_envelope_from_ensemble(&e, few, 1, &w.f.ref, 2.0, &err), LM_E_INPUT);
    lm_err_clear(&err);
    const hx_capture *many[NM];
    for (int m = 0; m < NM; ++m)
        many[m] = x;
    CU_ASSERT_EQUAL(hx_envelope_from_ensemble(&e, many, NM, &w.f.ref, 2.0, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "no logits at position 5"));
    hx_capture_free(x);
    hx_report_free(r);
    free_world(&w);
}

void test_compare_register(void)
{
    CU_pSuite s = CU_add_suite("compare", NULL, NULL);
    CU_add_test(s, "test_compare_envelope_from_ensemble", test_compare_envelope_from_ensemble);
    CU_add_test(s, "test_compare_every_class", test_compare_every_class);
    CU_add_test(s, "test_compare_shorter_reference_no_split", test_compare_shorter_reference_no_split);
    CU_add_test(s, "test_compare_prompt_rows", test_compare_prompt_rows);
    CU_add_test(s, "test_compare_shape_errors", test_compare_shape_errors);
}
