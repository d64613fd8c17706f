/* test_ref_forward.c — the whole reference pass (ref_forward.c, ref_validate.c): bad input
 * first, then hand-built models against the plain float64 forward pass of tests/fixtures.c
 * (tf_forward_f64, an independent second opinion), thread-count and causality invariance, and stories260K (argmax, P vs 2P agreement). */
#include "fixtures.h"
#include "kvd_ref.h"
#include "test_ref_model.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>

/* --- tests --- */

static void test_ref_forward_bad_input(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NORM);
    trm_build(&t, &hp, false, 1);
    int32_t tok[3] = {1, 2, 3};
    ref_request rq = {.tokens = tok, .n_tokens = 3, .n_prompt = 3, .n_threads = 1};
    ref_capture c;
    lm_err err = {0};
    /* token id out of range (n_vocab 11), and negative */
    tok[1] = 11;
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_INPUT);
    CU_ASSERT(strstr(err.msg, "token id 11") != NULL);
    tok[1] = -1;
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_INPUT);
    tok[1] = 2;
    /* n_prompt 0 or past the end, empty sequence */
    rq.n_prompt = 0;
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_INPUT);
    rq.n_prompt = 4;
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_INPUT);
    rq.n_prompt = 3;
    rq.n_tokens = 0;
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_INPUT);
    rq.n_tokens = 3;
    /* positions out of range or not increasing; precision out of range */
    uint32_t pos[2] = {2, 3};
    rq.pos = pos;
    rq.n_pos = 2;
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_INPUT);
    pos[0] = 1;
    pos[1] = 1;
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_INPUT);
    rq.pos = NULL;
    rq.prec = 20;
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_INPUT);
    rq.prec = 0;
    /* an architecture the reference does not implement */
    strcpy(t.r.hp.arch, "mamba");
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_UNSUPPORTED);
    CU_ASSERT(strstr(err.msg, "mamba") != NULL);
    strcpy(t.r.hp.arch, "llama");
    t.r.hp.rope_type = (ref_rope_type)7;
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_UNSUPPORTED);
    t.r.hp.rope_type = REF_ROPE_NORM;
    /* a norm placement or activation the reference does not compute */
    t.r.hp.norm_place = (ref_norm_place)7;
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_UNSUPPORTED);
    CU_ASSERT(strstr(err.msg, "norm placement 7") != NULL);
    t.r.hp.norm_place = REF_NORM_PRE;
    t.r.hp.act = (ref_ffn_act)7;
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_compute(&c, &t.r, &rq, &err), LM_E_UNSUPPORTED);
    CU_ASSERT(strstr(err.msg, "activation 7") != NULL);
    t.r.hp.act = REF_ACT_SWIGLU;
    /* every architecture of the engine's table, with its own feature values */
    for (size_t i = 0; i < lm_arch_count(); ++i) {
        const lm_arch *a = lm_arch_at(i);
        snprintf(t.r.hp.arch, sizeof t.r.hp.arch, "%s", a->name);
        t.r.hp.rope_type = (ref_rope_type)a->rope_type;
        t.r.hp.norm_place = (ref_norm_place)a->norm_place;
        t.r.hp.act = (ref_ffn_act)a->act;
        /* a row whose layers are all MoE (its activation is an experts' one): one expert */
        t.r.hp.n_expert = t.r.hp.n_expert_used = a->moe != LM_ARCH_MOE_FROM_FILE ? 1 : 0;
        lm_err_clear(&err);
        CU_ASSERT_EQUAL(ref_model_supported(&t.r, &err), LM_OK);
    }
    t.r.hp.n_expert = t.r.hp.n_expert_used = 0;
    t.r.hp.act = REF_ACT_SWIGLU_OAI; /* swiglu_oai is the experts' activation only */
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_model_supported(&t.r, &err), LM_E_UNSUPPORTED);
    trm_free(&t);
}

/* Reference vs the float64 computation above. Tolerance 1e-10 absolute on values of order 1:
 * float64 rounding of these short sums (n_embd 8, n_ff 12, up to 7 positions) stays below
 * ~1e-14, so 1e-10 leaves a wide margin while any wrong pairing, scale, mask, head mapping or
 * missing bias moves values by >= 1e-3. */
static void check_vs_double(lm_rope_type rope, uint32_t n_rot, bool bias, bool tied)
{
    trm t;
    lm_hparams hp = trm_hparams(rope);
    hp.n_rot = n_rot;
    hp.tied_output = tied;
    trm_build(&t, &hp, bias, tu_seed() + n_rot + (bias ? 100 : 0));
    enum { N = 7 };
    int32_t tok[N] = {3, 1, 4, 1, 5, 9, 2};
    uint32_t pos[N] = {0, 1, 2, 3, 4, 5, 6};
    ref_request rq = {.tokens = tok, .n_tokens = N, .n_prompt = N, .pos = pos, .n_pos = N,
                      .n_threads = 2};
    ref_capture c;
    lm_err err = {0};
    CU_ASSERT_FATAL(ref_compute(&c, &t.r, &rq, &err) == LM_OK);
    double *kl = calloc((size_t)N * 8, 8); /* [N][kv_dim 8] */
    CU_ASSERT_FATAL(kl != NULL);
    double *xl = calloc((size_t)N * hp.n_embd, 8); /* [N][n_embd] */
    CU_ASSERT_FATAL(xl != NULL);
    double *lg = tf_forward_f64(&t.m, tok, N, kl, xl); /* the float64 oracle (fixtures.h) */
    double maxd = 0, maxv = 0;
    /* hidden state 0 is the embedding rows, exactly; the last the oracle's residual stream */
    CU_ASSERT_EQUAL_FATAL(c.n_embd, hp.n_embd);
    for (uint32_t i = 0; i < N * hp.n_embd; ++i)
        CU_ASSERT_EQUAL(ref_capture_hidden(&c, 0)[i],
                        (double)t.m.tok_embd.f[(size_t)tok[i / hp.n_embd] * hp.n_embd +
                                             i % hp.n_embd]);
    const double *xr = ref_capture_hidden(&c, hp.n_layer);
    for (uint32_t i = 0; i < N * hp.n_embd; ++i)
        maxd = fmax(maxd, fabs(xl[i] - xr[i]));
    for (uint32_t i = 0; i < N * hp.n_vocab; ++i) {
        maxd = fmax(maxd, fabs(lg[i] - c.logits[i]));
        maxv = fmax(maxv, fabs(lg[i]));
    }
    const double *k = ref_capture_k(&c, hp.n_layer - 1);
    for (uint32_t i = 0; i < N * hp.n_head_kv * hp.head_dim; ++i)
        maxd = fmax(maxd, fabs(kl[i] - k[i]));
    CU_ASSERT(maxv > 0.1); /* the comparison is not between near-zero values */
    CU_ASSERT(maxd < 1e-10);
    if (maxd >= 1e-10)
        fprintf(stderr, "\n  rope %d n_rot %u bias %d tied %d: max diff %.3g\n", (int)rope, n_rot,
                bias, tied, maxd);
    free(lg);
    free(kl);
    free(xl);
    ref_capture_free(&c);
    trm_free(&t);
}

static void test_ref_forward_matches_float64_norm(void)
{
    check_vs_double(LM_ROPE_NORM, 2, false, false);
    check_vs_double(LM_ROPE_NORM, 4, true, true);
}

static void test_ref_forward_matches_float64_neox(void)
{
    check_vs_double(LM_ROPE_NEOX, 4, false, true);
    check_vs_double(LM_ROPE_NEOX, 2, true, false);
}

/* One layer, one token, closed form: attention over a single position has probability exactly
 * 1, so the block output is Wo Wv h; with W_down = 0 the FFN adds nothing; the logits are
 * output . rmsnorm(x) with x = e + Wo Wv rmsnorm(e). Computed here in MPFR step by step. */

/* The pass's matrix-product dot product, computed independently: products and sum exact at
 * 4096 bits (inputs here span far fewer), then rounded once to out's precision. */
static void exact_dot(mpfr_t out, mpfr_t *x, mpfr_t *w, uint64_t n)
{
    mpfr_t acc, p;
    mpfr_inits2(4096, acc, p, (mpfr_ptr)0);
    mpfr_set_zero(acc, 1);
    for (uint64_t i = 0; i < n; ++i) {
        mpfr_mul(p, x[i], w[i], MPFR_RNDN);
        mpfr_add(acc, acc, p, MPFR_RNDN);
    }
    mpfr_set(out, acc, MPFR_RNDN);
    if (mpfr_zero_p(out))
        mpfr_set_zero(out, 1);
    mpfr_clears(acc, p, (mpfr_ptr)0);
}

static void test_ref_forward_one_layer_closed_form(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NORM);
    hp.n_layer = 1;
    trm_build(&t, &hp, false, 7);
    float *wd = (float *)t.layers[0].w_down.f;
    memset(wd, 0, (size_t)hp.n_embd * hp.n_ff * sizeof *wd);
    int32_t tok[1] = {5};
    ref_request rq = {.tokens = tok, .n_tokens = 1, .n_prompt = 1, .n_threads = 1};
    ref_result *r;
    lm_err err = {0};
    CU_ASSERT_FATAL(ref_run(&r, &t.r, &rq, &err) == LM_OK);
    ref_scratch s;
    CU_ASSERT_FATAL(ref_scratch_init(&s, REF_DEFAULT_PREC, 64, &err) == LM_OK);
    uint32_t e = hp.n_embd, kd = hp.n_head_kv * hp.head_dim, qd = hp.n_head * hp.head_dim;
    mpfr_t *x = ref_vec_new(e, REF_DEFAULT_PREC), *h = ref_vec_new(e, REF_DEFAULT_PREC),
           *v = ref_vec_new(kd, REF_DEFAULT_PREC), *a = ref_vec_new(qd, REF_DEFAULT_PREC),
           *w = ref_vec_new(qd, REF_DEFAULT_PREC), *lg = ref_vec_new(hp.n_vocab, REF_DEFAULT_PREC);
    for (uint32_t i = 0; i < e; ++i)
        mpfr_set_flt(x[i], t.m.tok_embd.f[5 * e + i], MPFR_RNDN);
    ref_rmsnorm(h, x, t.layers[0].attn_norm, e, hp.rms_eps, &s);
    for (uint32_t r0 = 0; r0 < kd; ++r0) {
        for (uint32_t i = 0; i < e; ++i)
            mpfr_set_flt(w[i], t.layers[0].wv.f[r0 * e + i], MPFR_RNDN);
        exact_dot(v[r0], h, w, e);
    }
    /* each query head copies its KV head's value (probability 1) */
    for (uint32_t hh = 0; hh < hp.n_head; ++hh)
        for (uint32_t d = 0; d < hp.head_dim; ++d)
            mpfr_set(a[hh * hp.head_dim + d],
                     v[(hh / (hp.n_head / hp.n_head_kv)) * hp.head_dim + d], MPFR_RNDN);
    mpfr_t o;
    mpfr_init2(o, REF_DEFAULT_PREC);
    for (uint32_t r0 = 0; r0 < e; ++r0) {
        for (uint32_t i = 0; i < qd; ++i)
            mpfr_set_flt(w[i], t.layers[0].wo.f[r0 * qd + i], MPFR_RNDN);
        exact_dot(o, a, w, qd);
        mpfr_add(x[r0], x[r0], o, MPFR_RNDN);
    }
    ref_rmsnorm(h, x, t.m.output_norm, e, hp.rms_eps, &s);
    bool all_equal = true;
    for (uint32_t r0 = 0; r0 < hp.n_vocab; ++r0) {
        for (uint32_t i = 0; i < e; ++i)
            mpfr_set_flt(w[i], t.m.output.f[r0 * e + i], MPFR_RNDN);
        exact_dot(lg[r0], h, w, e);
        /* the FFN adds exact zeros (W_down = 0), and the softmax weight is exactly 1, so every
         * rounding step is the same as the pass's: bitwise equality is expected */
        all_equal &= mpfr_equal_p(lg[r0], r->logits[r0]) != 0;
    }
    CU_ASSERT(all_equal);
    /* K/V captured for the prompt: V equals Wv h bitwise */
    for (uint32_t i = 0; i < kd; ++i)
        CU_ASSERT(mpfr_equal_p(v[i], r->v[i]));
    mpfr_clear(o);
    ref_vec_free(x, e); ref_vec_free(h, e); ref_vec_free(v, kd); ref_vec_free(a, qd);
    ref_vec_free(w, qd); ref_vec_free(lg, hp.n_vocab);
    ref_scratch_clear(&s);
    ref_result_free(r);
    trm_free(&t);
}

static bool results_equal(const ref_result *a, const ref_result *b)
{
    uint64_t kv = (uint64_t)a->n_layer * a->n_prompt * a->n_kv_head * a->head_dim;
    if (a->n_pos != b->n_pos || kv != (uint64_t)b->n_layer * b->n_prompt * b->n_kv_head * b->head_dim)
        return false;
    for (uint64_t i = 0; i < kv; ++i)
        if (!mpfr_equal_p(a->k[i], b->k[i]) || !mpfr_equal_p(a->v[i], b->v[i]))
            return false;
    for (uint64_t i = 0; i < (uint64_t)a->n_pos * a->n_vocab; ++i)
        if (!mpfr_equal_p(a->logits[i], b->logits[i]))
            return false;
    for (uint64_t i = 0; i < (a->n_layer + 1ull) * a->n_prompt * a->n_embd; ++i)
        if (!mpfr_equal_p(a->hidden[i], b->hidden[i]))
            return false;
    return true;
}

static void test_ref_forward_thread_count_invariant(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NEOX);
    hp.n_rot = 4;
    trm_build(&t, &hp, true, 11);
    int32_t tok[6] = {1, 2, 3, 4, 5, 6};
    ref_request rq = {.tokens = tok, .n_tokens = 6, .n_prompt = 4};
    ref_result *r1, *r3;
    lm_err err = {0};
    rq.n_threads = 1;
    CU_ASSERT_FATAL(ref_run(&r1, &t.r, &rq, &err) == LM_OK);
    rq.n_threads = 3;
    CU_ASSERT_FATAL(ref_run(&r3, &t.r, &rq, &err) == LM_OK);
    CU_ASSERT_EQUAL(r1->n_pos, 3); /* default: last prompt position and both forced ones */
    CU_ASSERT(results_equal(r1, r3));
    ref_result_free(r1);
    ref_result_free(r3);
    trm_free(&t);
}

/* Causality: the logits at position p depend only on tokens 0..p, so a run over tokens[0..p]
 * gives bitwise the same logits as position p of a longer run (same operations, same order). */
static void test_ref_forward_causal(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NORM);
    trm_build(&t, &hp, false, 13);
    int32_t tok[6] = {6, 5, 4, 3, 2, 1};
    ref_request lng = {.tokens = tok, .n_tokens = 6, .n_prompt = 2, .n_threads = 2};
    ref_request sh = {.tokens = tok, .n_tokens = 4, .n_prompt = 4, .n_threads = 1};
    ref_result *a, *b;
    lm_err err = {0};
    CU_ASSERT_FATAL(ref_run(&a, &t.r, &lng, &err) == LM_OK);
    CU_ASSERT_FATAL(ref_run(&b, &t.r, &sh, &err) == LM_OK);
    CU_ASSERT_EQUAL(a->n_pos, 5);
    CU_ASSERT_EQUAL(a->pos[2], 3);
    bool eq = true;
    for (uint32_t i = 0; i < hp.n_vocab; ++i)
        eq &= mpfr_equal_p(a->logits[2 * hp.n_vocab + i], b->logits[i]) != 0;
    CU_ASSERT(eq);
    ref_result_free(a);
    ref_result_free(b);
    trm_free(&t);
}

static ref_model *load_stories(void)
{
    const char *p = tu_model_path("stories260K.gguf");
    if (p == NULL)
        return NULL;
    ref_model *m = NULL;
    lm_err err = {0};
    if (ref_model_open(&m, p, &err) != LM_OK) {
        fprintf(stderr, "\n  %s\n", err.msg);
        CU_FAIL("stories260K.gguf does not load");
        return NULL;
    }
    return m;
}

static void test_ref_forward_stories_argmax(void)
{
    ref_model *m = load_stories();
    if (m == NULL)
        return;
    const int32_t tok[5] = {1, 403, 407, 261, 378}; /* BOS "Once upon a time" */
    ref_request rq = {.tokens = tok, .n_tokens = 5, .n_prompt = 5};
    ref_capture c;
    lm_err err = {0};
    CU_ASSERT_FATAL(ref_compute(&c, m, &rq, &err) == LM_OK);
    CU_ASSERT_EQUAL(c.n_pos, 1);
    CU_ASSERT_EQUAL(c.pos[0], 4);
    uint32_t best = 0;
    for (uint32_t i = 1; i < c.n_vocab; ++i)
        if (c.logits[i] > c.logits[best])
            best = i;
    CU_ASSERT_EQUAL(best, 432); /* "," as llama2.c's own run of this model continues */
    ref_capture_free(&c);
    ref_model_free(m);
}

static void test_ref_forward_stories_validate_100_bits(void)
{
    ref_model *m = load_stories();
    if (m == NULL)
        return;
    const int32_t tok[5] = {1, 403, 407, 261, 378};
    ref_request rq = {.tokens = tok, .n_tokens = 5, .n_prompt = 4};
    ref_agreement *ag;
    uint32_t n;
    lm_err err = {0};
    CU_ASSERT_FATAL(ref_validate(&ag, &n, m, &rq, &err) == LM_OK);
    CU_ASSERT_EQUAL(n, 3 * m->hp.n_layer + 2); /* K, V, hidden states (embedding too), logits */
    CU_ASSERT_STRING_EQUAL(ag[n - 1].name, "logits");
    CU_ASSERT(ag[n - 1].min_bits >= 100.0); /* the acceptance bound */
    CU_ASSERT(ag[n - 1].min_bits < 127.5);  /* capped at P: agreement is measured, not assumed */
    for (uint32_t i = 0; i + 1 < n; ++i)
        CU_ASSERT(ag[i].min_bits >= 100.0);
    free(ag);
    ref_model_free(m);
}

static void test_ref_forward_agreement_rules(void)
{
    mpfr_t *a = ref_vec_new(4, 64), *b = ref_vec_new(4, 128);
    ref_agreement ag;
    /* all zero on both sides: equal, full P bits */
    ref_agreement_of(&ag, "z", a, b, 4, 64);
    CU_ASSERT_EQUAL(ag.min_bits, 64.0);
    /* b = 0, a != 0: 0 bits */
    mpfr_set_ui(a[2], 1, MPFR_RNDN);
    ref_agreement_of(&ag, "z", a, b, 4, 64);
    CU_ASSERT_EQUAL(ag.min_bits, 0.0);
    CU_ASSERT_EQUAL(ag.worst, 2);
    /* relative difference 2^-40 exactly: 40 bits */
    mpfr_set_ui(b[2], 1, MPFR_RNDN);
    mpfr_set_ui(a[2], 1, MPFR_RNDN);
    mpfr_add_d(a[2], a[2], ldexp(1.0, -40), MPFR_RNDN);
    ref_agreement_of(&ag, "z", a, b, 4, 64);
    CU_ASSERT_DOUBLE_EQUAL(ag.min_bits, 40.0, 1e-9); /* log2 of an exact power of two */
    ref_vec_free(a, 4);
    ref_vec_free(b, 4);
}

/* The context limit and the memory estimate are checked before any MPFR work: more tokens than
 * n_ctx_train is refused naming the context; a request whose estimate exceeds the machine's
 * memory is refused naming GiB; the estimate grows with tokens and precision. */
static void test_ref_forward_limits_before_work(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NORM);
    trm_build(&t, &hp, false, 17);
    int32_t tok[6] = {1, 2, 3, 4, 5, 6};
    ref_request rq = {.tokens = tok, .n_tokens = 6, .n_prompt = 3, .n_threads = 1};
    lm_err err = {0};
    t.r.hp.n_ctx_train = 5;
    CU_ASSERT_EQUAL(ref_request_check(&t.r, &rq, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "context of 5"));
    t.r.hp.n_ctx_train = 6;
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_request_check(&t.r, &rq, &err), LM_OK);
    uint64_t small = ref_memory_estimate(&t.r, &rq);
    rq.prec = 4096;
    CU_ASSERT(ref_memory_estimate(&t.r, &rq) > small);
    rq.prec = 0;
    /* the same request against a model whose shape needs more memory than exists: refused by
     * the estimate alone (no weights of that size are touched) */
    t.r.hp.n_ctx_train = 0;
    t.r.hp.n_layer = 1u << 30;
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(ref_request_check(&t.r, &rq, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "GiB"));
    t.r.hp.n_layer = hp.n_layer;
    trm_free(&t);
}

void test_ref_forward_register(void)
{
    CU_pSuite s = CU_add_suite("ref_forward", NULL, NULL);
    CU_add_test(s, "test_ref_forward_bad_input", test_ref_forward_bad_input);
    CU_add_test(s, "test_ref_forward_limits_before_work", test_ref_forward_limits_before_work);
    CU_add_test(s, "test_ref_forward_agreement_rules", test_ref_forward_agreement_rules);
    CU_add_test(s, "test_ref_forward_one_layer_closed_form", test_ref_forward_one_layer_closed_form);
    CU_add_test(s, "test_ref_forward_matches_float64_norm", test_ref_forward_matches_float64_norm);
    CU_add_test(s, "test_ref_forward_matches_float64_neox", test_ref_forward_matches_float64_neox);
    CU_add_test(s, "test_ref_forward_thread_count_invariant", test_ref_forward_thread_count_invariant);
    CU_add_test(s, "test_ref_forward_causal", test_ref_forward_causal);
    CU_add_test(s, "test_ref_forward_stories_argmax", test_ref_forward_stories_argmax);
    CU_add_test(s, "test_ref_forward_stories_validate_100_bits",
                test_ref_forward_stories_validate_100_bits);
}
