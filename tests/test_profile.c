/* test_profile.c — precision profiles: round to nearest at a virtual precision (binary16 with
 * subnormals and overflow, bfloat16, TF32's range), the stochastic neighbours and their
 * probability, the naive-sr round slot's frequency (binary16, Q8_K), the engine storing K/V as
 * binary16 under f16kv (RN and SR), Gemma's sandwich norms left unrounded by the activation
 * profiles, q8act converting each product's input per weight type, and the CONFIG key
 * profile=, and each profile's envelope from the reference's SR members against the one from
 * the engine's naive-sr members. (The Q8_0 / Q8_K quantizers themselves: test_act_format.c;
 * the reference's own rounding: test_ref_vprec.c.) */
#include "../engine/backend.h"
#include "model/config.h"
#include "fixtures.h"
#include "kvd_engine.h"
#include "kvd_profile.h"
#include "run/sweep.h"
#include "run/envelope_sr.h"
#include "run/forced.h"
#include "plan/synth.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static const lm_round_spec f16 = {LM_ROUND_FLOAT, 11, -14, 15};
static const lm_round_spec bf16 = {LM_ROUND_FLOAT, 8, -126, 127};
static const lm_round_spec tf32 = {LM_ROUND_FLOAT, 11, -126, 127};

static void test_profile_round_nearest_special_values(void)
{
    /* zeros, Inf, NaN unchanged */
    CU_ASSERT_EQUAL(lm_round_float_rn(0.0f, &f16), 0.0f);
    CU_ASSERT(signbit(lm_round_float_rn(-0.0f, &f16)));
    CU_ASSERT(isinf(lm_round_float_rn(INFINITY, &f16)));
    CU_ASSERT(isnan(lm_round_float_rn(NAN, &bf16)));
    /* binary16: ties to even, overflow, subnormals */
    CU_ASSERT_EQUAL(lm_round_float_rn(1.0f + 0x1p-11f, &f16), 1.0f);
    CU_ASSERT_EQUAL(lm_round_float_rn(1.0f + 3 * 0x1p-11f, &f16), 1.0f + 0x1p-9f);
    CU_ASSERT_EQUAL(lm_round_float_rn(-(1.0f + 0x1p-11f + 0x1p-20f), &f16), -(1.0f + 0x1p-10f));
    CU_ASSERT_EQUAL(lm_round_float_rn(65504.0f, &f16), 65504.0f);
    CU_ASSERT_EQUAL(lm_round_float_rn(65519.0f, &f16), 65504.0f);
    CU_ASSERT(isinf(lm_round_float_rn(65520.0f, &f16)));     /* the tie rounds up: overflow */
    CU_ASSERT(isinf(lm_round_float_rn(-1e6f, &f16)) && lm_round_float_rn(-1e6f, &f16) < 0);
    CU_ASSERT_EQUAL(lm_round_float_rn(0x1p-24f, &f16), 0x1p-24f);  /* smallest subnormal */
    CU_ASSERT_EQUAL(lm_round_float_rn(0x1p-25f, &f16), 0.0f);      /* tie to even: 0 */
    CU_ASSERT_EQUAL(lm_round_float_rn(0x1.8p-25f, &f16), 0x1p-24f);
    CU_ASSERT_EQUAL(lm_round_float_rn(0x1.ff8p-15f, &f16), 0x1.ff8p-15f); /* largest subnormal */
    CU_ASSERT_EQUAL(lm_round_float_rn(0x1.ffcp-15f, &f16), 0x1p-14f); /* tie: to even */
    CU_ASSERT_EQUAL(lm_round_float_rn(0x1.0003p-14f, &f16), 0x1p-14f);
    /* bfloat16 and TF32 keep float32's exponent range */
    CU_ASSERT_EQUAL(lm_round_float_rn(1.0f + 0x1p-8f, &bf16), 1.0f);
    CU_ASSERT_EQUAL(lm_round_float_rn(1.0f + 3 * 0x1p-8f, &bf16), 1.0f + 0x1p-6f);
    CU_ASSERT_EQUAL(lm_round_float_rn(3.14159265f, &bf16), 3.140625f);
    CU_ASSERT_EQUAL(lm_round_float_rn(65520.0f, &tf32), 65536.0f);
    CU_ASSERT_EQUAL(lm_round_float_rn(0x1.0018p-100f, &tf32), 0x1p-100f); /* still normal */
    CU_ASSERT(isinf(lm_round_float_rn(3.4e38f, &bf16))); /* above bfloat16's largest finite */
}

static void test_profile_bracket_probability(void)
{
    float lo, hi;
    double p = lm_round_float_bracket(1.0f + 0x1p-12f, &f16, &lo, &hi);
    CU_ASSERT_EQUAL(lo, 1.0f);
    CU_ASSERT_EQUAL(hi, 1.0f + 0x1p-10f);
    CU_ASSERT_EQUAL(p, 0.25); /* exact: (x - lo) / (hi - lo) with power-of-two spacing */
    p = lm_round_float_bracket(-(1.0f + 0x1p-12f), &f16, &lo, &hi);
    CU_ASSERT_EQUAL(lo, -(1.0f + 0x1p-10f));
    CU_ASSERT_EQUAL(hi, -1.0f);
    CU_ASSERT_EQUAL(p, 0.75);
    p = lm_round_float_bracket(1.5f, &f16, &lo, &hi); /* representable */
    CU_ASSERT(p == 0.0 && lo == 1.5f && hi == 1.5f);
    p = lm_round_float_bracket(65510.0f, &f16, &lo, &hi); /* above the largest finite */
    CU_ASSERT_EQUAL(lo, 65504.0f);
    CU_ASSERT(isinf(hi));
}

/* The naive-sr round slot goes up with probability (x - lo) / (hi - lo): 4000 copies of
 * 1 + 2^-12 under binary16 (p = 1/4) at different indices. Tolerance 0.03 = 4.4 standard
 * deviations of the binomial frequency (sqrt(p(1-p)/4000) = 0.0068). */
static void test_profile_sr_slot_frequency(void)
{
    lm_backend *be = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_backend_create(&be, "naive-sr:seed=7", 1, &err), LM_OK);
    be->prof = lm_profile_find("f16kv");
    enum { N = 4000 };
    float *x = malloc(N * sizeof *x);
    for (int i = 0; i < N; ++i)
        x[i] = 1.0f + 0x1p-12f;
    lm_backend_perturb(be, x, 1, N, N, LM_SITE_KV);
    int up = 0;
    for (int i = 0; i < N; ++i) {
        CU_ASSERT(x[i] == 1.0f || x[i] == 1.0f + 0x1p-10f);
        up += x[i] != 1.0f;
    }
    CU_ASSERT(fabs((double)up / N - 0.25) < 0.03);
    /* f32: the new sites are not perturbed at all (the f32 ensemble's bits do not change) */
    be->prof = lm_profile_find("f32");
    for (int i = 0; i < N; ++i)
        x[i] = 1.0f + 0x1p-12f;
    lm_backend_perturb(be, x, 1, N, N, LM_SITE_KV);
    lm_backend_perturb(be, x, 1, N, N, LM_SITE_V);
    for (int i = 0; i < N; ++i)
        CU_ASSERT_EQUAL(x[i], 1.0f + 0x1p-12f);
    /* f32: a sandwich norm's output, the per-head q/k norms' and a MoE layer's gates and
     * weighted sum are perturbed, as every stage of the f32 forward pass */
    static const uint32_t stages[] = {LM_SITE_POST_NORM, LM_SITE_HEAD_NORM, LM_SITE_MOE_GATES,
                                      LM_SITE_MOE_SUM};
    for (size_t s = 0; s < sizeof stages / sizeof *stages; ++s) {
        for (int i = 0; i < N; ++i)
            x[i] = 1.0f + 0x1p-12f;
        lm_backend_perturb(be, x, 1, N, N, stages[s]);
        int moved = 0;
        for (int i = 0; i < N; ++i)
            moved += x[i] != 1.0f + 0x1p-12f;
        CU_ASSERT(moved > 0);
    }
    free(x);
    lm_backend_destroy(be);
}

/* Under f16kv every cached K and V value is a binary16 number (round to nearest for naive,
 * stochastic for naive-sr); under f32 some are not. Needs stories260K (skipped when absent). */
static void test_profile_engine_f16kv_cache(void)
{
    lm_model *m = tu_load_model("stories260K.gguf");
    if (m == NULL)
        return;
    lm_err err = {0};
    const int32_t toks[8] = {1, 403, 407, 261, 378, 432, 383, 286};
    const char *backends[3] = {"naive", "naive-sr:seed=3", "naive"};
    const char *profiles[3] = {"f16kv", "f16kv", "f32"};
    size_t kv = 8u * m->hp.n_head_kv * m->hp.head_dim;
    for (int c = 0; c < 3; ++c) {
        lm_ctx_params cp = {.backend = backends[c], .n_ctx = 8, .profile = profiles[c]};
        lm_ctx *ctx = NULL;
        CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&ctx, m, &cp, &err), LM_OK);
        float *last = malloc(m->hp.n_vocab * sizeof *last);
        CU_ASSERT_EQUAL_FATAL(lm_prefill(ctx, toks, 8, 3, last, &err), LM_OK);
        free(last);
        size_t not16 = 0;
        for (uint32_t l = 0; l < m->hp.n_layer; ++l)
            for (size_t i = 0; i < kv; ++i) {
                float k = lm_ctx_k(ctx, l)[i], v = lm_ctx_v(ctx, l)[i];
                not16 += lm_round_float_rn(k, &f16) != k;
                not16 += lm_round_float_rn(v, &f16) != v;
            }
        if (c < 2) {
            CU_ASSERT_EQUAL(not16, 0u);
        } else {
            CU_ASSERT(not16 > 0u);
        }
        lm_ctx_free(ctx);
    }
    lm_ctx_params bad = {.backend = "naive", .profile = "fp8"};
    lm_ctx *ctx = NULL;
    CU_ASSERT_EQUAL(lm_ctx_create(&ctx, m, &bad, &err), LM_E_INPUT);
    lm_model_free(m);
}

/* Rows seen by the probe at one op: how many, and how many already rounded to the spec (a
 * fixed point of round to nearest). */
typedef struct grid_count {
    const char *op;
    const lm_round_spec *spec;
    size_t rows, on_grid;
} grid_count;

static void count_on_grid(void *user, uint32_t layer, const char *op, uint32_t pos0, uint32_t n,
                          const float *x, size_t row_elems)
{
    (void)layer;
    (void)pos0;
    grid_count *g = user;
    if (strcmp(op, g->op) != 0)
        return;
    float *r = malloc(row_elems * sizeof *r);
    for (uint32_t t = 0; t < n; ++t) {
        memcpy(r, x + t * row_elems, row_elems * sizeof *r);
        lm_round_rows_rn(r, 1, (uint32_t)row_elems, row_elems, g->spec);
        g->on_grid += memcmp(r, x + t * row_elems, row_elems * sizeof *r) == 0;
        ++g->rows;
    }
    free(r);
}

/* Gemma's sandwich norms (attn_post_norm, ffn_post_norm; probed as attn_out and ffn_out) feed
 * the residual stream, not a weight product: f16act rounds the projections' inputs (attn_norm
 * is on the binary16 grid) and leaves the post-norms' outputs in float32 as ggml does; q8act
 * rounds a copy of each product's input (attn_norm as probed stays float32); bf16 rounds the
 * post-norms as it rounds the residual stream. */
static void test_profile_engine_sandwich_norms(void)
{
    lm_model *m = tf_synth_load("gemma3", 1);
    lm_err err = {0};
    const lm_round_spec q8 = {LM_ROUND_Q8_0, 0, 0, 0};
    int32_t toks[12];
    for (uint32_t i = 0; i < 12; ++i)
        toks[i] = (int32_t)((1 + 7919u * i) % m->hp.n_vocab);
    const struct {
        const char *profile, *op;
        const lm_round_spec *spec;
        bool rounded;
    } cases[] = {{"q8act", "attn_norm", &q8, false},  {"q8act", "attn_out", &q8, false},
                 {"q8act", "ffn_out", &q8, false},    {"f16act", "attn_norm", &f16, true},
                 {"f16act", "attn_out", &f16, false}, {"f16act", "ffn_out", &f16, false},
                 {"bf16", "attn_out", &bf16, true},   {"bf16", "ffn_out", &bf16, true}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; ++c) {
        lm_ctx_params cp = {.backend = "naive", .n_ctx = 12, .profile = cases[c].profile};
        lm_ctx *ctx = NULL;
        CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&ctx, m, &cp, &err), LM_OK);
        grid_count g = {.op = cases[c].op, .spec = cases[c].spec};
        lm_ctx_set_probe(ctx, count_on_grid, &g);
        float *last = malloc(m->hp.n_vocab * sizeof *last);
        CU_ASSERT_EQUAL_FATAL(lm_prefill(ctx, toks, 12, 0, last, &err), LM_OK);
        free(last);
        CU_ASSERT_EQUAL(g.rows, 12u * m->hp.n_layer);
        if (g.on_grid != (cases[c].rounded ? g.rows : 0))
            fprintf(stderr, "\n  %s %s: %zu of %zu rows on the grid\n", cases[c].profile,
                    cases[c].op, g.on_grid, g.rows);
        CU_ASSERT_EQUAL(g.on_grid, cases[c].rounded ? g.rows : 0u);
        lm_ctx_free(ctx);
    }
    lm_model_free(m);
}

/* The last position's logits of 10 tokens (prefill steps of 4) on the naive backend with
 * attention attn (NULL: dense) under profile, into out [n_vocab]. */
static void logits_under(float *out, const lm_model *m, const char *attn, const char *profile)
{
    lm_err err = {0};
    int32_t toks[10];
    for (uint32_t i = 0; i < 10; ++i)
        toks[i] = (int32_t)((3 + 7919u * i) % m->hp.n_vocab);
    lm_ctx_params cp = {.backend = "naive", .n_ctx = 10, .attn = attn, .profile = profile};
    lm_ctx *ctx = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&ctx, m, &cp, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_prefill(ctx, toks, 10, 4, out, &err), LM_OK);
    lm_ctx_free(ctx);
}

/* bf16 under streaming attention rounds the weights each key tile's P . V reads, as a
 * bfloat16 flash-attention kernel does (dense attention rounds the normalized probabilities;
 * test_attention_stream.c bounds the rounding itself): the context is created, streaming and
 * dense bf16 differ, and they lie within twice bf16's own distance from f32 of each other. The
 * factor 2 is a chosen sanity bound, not a derived one (two bf16 computations of one model
 * should not be further apart than bf16 is from f32); measured here 0.27 and 0.42. */
static void test_profile_engine_stream_bf16(void)
{
    lm_model *m = tf_synth_load("tiny", 3);
    const uint32_t nv = m->hp.n_vocab;
    float *sb = malloc(nv * sizeof *sb), *db = malloc(nv * sizeof *db);
    float *df = malloc(nv * sizeof *df);
    CU_ASSERT_FATAL(sb && db && df);
    logits_under(sb, m, "stream", "bf16");
    logits_under(db, m, NULL, "bf16");
    logits_under(df, m, NULL, "f32");
    const double d_impl = tu_max_abs_diff(sb, db, nv), d_prof = tu_max_abs_diff(db, df, nv);
    if (!(d_impl > 0.0 && d_impl < 2.0 * d_prof))
        fprintf(stderr, "\n  stream-dense under bf16 %g, bf16-f32 %g\n", d_impl, d_prof);
    CU_ASSERT(d_impl > 0.0 && d_impl < 2.0 * d_prof);
    free(sb), free(db), free(df);
    lm_model_free(m);
}

/* Rows x cols of src copied to *cur rounded to nearest in s, advancing *cur. */
static lm_wt rounded(float **cur, const lm_wt *src, uint64_t rows, uint64_t cols,
                     const lm_round_spec *s)
{
    float *dst = *cur;
    lm_wt_rows(dst, src, 0, rows, (uint32_t)cols);
    lm_round_rows_rn(dst, (uint32_t)rows, (uint32_t)cols, cols, s);
    *cur += rows * cols;
    lm_wt w = lm_wt_f32(dst);
    w.type = src->type; /* the file's type: what the profile's product inputs follow */
    return w;
}

/* A shallow copy of m (*copy, *layers) whose embedding, output and every layer's weight
 * matrices (a MoE layer's router and experts included) were rounded to s beforehand, into
 * *store (the caller frees the three). */
static void prerounded_model(lm_model *copy, lm_layer **layers, float **store, const lm_model *m,
                             const lm_round_spec *s)
{
    const lm_hparams *hp = &m->hp;
    const uint64_t d = hp->n_embd, q = (uint64_t)hp->n_head * hp->head_dim,
                   kv = (uint64_t)hp->n_head_kv * hp->head_dim, ne = hp->n_expert,
                   ffe = hp->n_ff_exp, ff = hp->n_ff;
    const uint64_t layer = 2 * q * d + 2 * kv * d + ne * d + 3 * ne * ffe * d + 3 * ff * d;
    *store = malloc((2 * hp->n_vocab * d + hp->n_layer * layer) * sizeof **store);
    *layers = malloc(hp->n_layer * sizeof **layers);
    CU_ASSERT_FATAL(*store != NULL && *layers != NULL);
    float *cur = *store;
    *copy = *m;
    copy->tok_embd = rounded(&cur, &m->tok_embd, hp->n_vocab, d, s);
    copy->output = hp->tied_output ? copy->tok_embd : rounded(&cur, &m->output, hp->n_vocab, d, s);
    for (uint32_t il = 0; il < hp->n_layer; ++il) {
        const lm_layer *L = &m->layers[il];
        lm_layer *R = &(*layers)[il];
        *R = *L;
        R->wq = rounded(&cur, &L->wq, q, d, s);
        R->wk = rounded(&cur, &L->wk, kv, d, s);
        R->wv = rounded(&cur, &L->wv, kv, d, s);
        R->wo = rounded(&cur, &L->wo, d, q, s);
        if (lm_wt_present(&L->ffn_gate_inp)) {
            R->ffn_gate_inp = rounded(&cur, &L->ffn_gate_inp, ne, d, s);
            R->ffn_gate_exps = rounded(&cur, &L->ffn_gate_exps, ne * ffe, d, s);
            R->ffn_up_exps = rounded(&cur, &L->ffn_up_exps, ne * ffe, d, s);
            R->ffn_down_exps = rounded(&cur, &L->ffn_down_exps, ne * d, ffe, s);
        } else {
            R->w_gate = rounded(&cur, &L->w_gate, ff, d, s);
            R->w_up = rounded(&cur, &L->w_up, ff, d, s);
            R->w_down = rounded(&cur, &L->w_down, d, ff, s);
        }
    }
    copy->layers = *layers;
}

/* Counts the rows of op that are on the spec's grid, in MoE layers only. */
typedef struct moe_grid {
    const lm_model *m;
    grid_count g;
} moe_grid;

static void count_moe_on_grid(void *user, uint32_t layer, const char *op, uint32_t pos0,
                              uint32_t n, const float *x, size_t row_elems)
{
    moe_grid *mg = user;
    if (layer < mg->m->hp.n_layer && lm_wt_present(&mg->m->layers[layer].ffn_gate_inp))
        count_on_grid(&mg->g, layer, op, pos0, n, x, row_elems);
}

/* The profiles that round weights (bf16, tf32) round a MoE layer's router and experts as they
 * round every other weight matrix: on the moe and gptoss presets (gpt-oss: expert biases,
 * swiglu_oai) the logits under the profile equal, bit for bit, the same profile's logits on a
 * copy of the model whose matrices were rounded to the profile's weight format beforehand
 * (rounding to nearest is idempotent), which they would not with one matrix left in float32.
 * And bf16 computes the layer's output, the gates' weighted sum of the experts, in bfloat16 as
 * a bfloat16 engine does: every MoE layer's ffn_out row is on bfloat16's grid. */
static void test_profile_engine_moe_weights(void)
{
    static const char *const presets[] = {"moe", "gptoss"};
    static const char *const profiles[] = {"bf16", "tf32"};
    lm_err err = {0};
    for (size_t pi = 0; pi < sizeof presets / sizeof *presets; ++pi) {
        lm_model *m = tf_synth_load(presets[pi], 2);
        const uint32_t nv = m->hp.n_vocab;
        float *a = malloc(nv * sizeof *a), *b = malloc(nv * sizeof *b);
        CU_ASSERT_FATAL(a != NULL && b != NULL);
        for (size_t fi = 0; fi < sizeof profiles / sizeof *profiles; ++fi) {
            const lm_round_spec *w = lm_profile_site(lm_profile_find(profiles[fi]), LM_SITE_WEIGHT);
            lm_model pre;
            lm_layer *layers;
            float *store;
            prerounded_model(&pre, &layers, &store, m, w);
            logits_under(a, m, NULL, profiles[fi]);
            logits_under(b, &pre, NULL, profiles[fi]);
            if (memcmp(a, b, nv * sizeof *a) != 0)
                fprintf(stderr, "\n  %s %s: %g from the pre-rounded model\n", presets[pi],
                        profiles[fi], tu_max_abs_diff(a, b, nv));
            CU_ASSERT_EQUAL(memcmp(a, b, nv * sizeof *a), 0);
            free(store), free(layers);
        }
        int32_t toks[12];
        for (uint32_t i = 0; i < 12; ++i)
            toks[i] = (int32_t)((1 + 7919u * i) % nv);
        lm_ctx_params cp = {.backend = "naive", .n_ctx = 12, .profile = "bf16"};
        lm_ctx *ctx = NULL;
        CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&ctx, m, &cp, &err), LM_OK);
        moe_grid mg = {m, {.op = "ffn_out", .spec = &bf16}};
        lm_ctx_set_probe(ctx, count_moe_on_grid, &mg);
        CU_ASSERT_EQUAL_FATAL(lm_prefill(ctx, toks, 12, 0, a, &err), LM_OK);
        CU_ASSERT(mg.g.rows > 0);
        CU_ASSERT_EQUAL(mg.g.on_grid, mg.g.rows);
        lm_ctx_free(ctx);
        free(a), free(b);
        lm_model_free(m);
    }
}

/* q8act converts each product's input as ggml-cpu does for its weight's type: with F32
 * weights nothing (the f32 bits), with F16 weights binary16 (f16act's bits: f16act rounds the
 * same inputs in place), with MXFP4 experts beside F32 attention Q8_0 for the experts only
 * (bits that differ from f32's). Logits compared bit for bit: the same operations in the same
 * order give the same floats. */
static void test_profile_engine_q8act_per_weight_type(void)
{
    static const struct {
        const char *preset;
        lm_tensor_type type;
        const char *twin; /* the profile q8act must equal bitwise, or NULL: must differ from f32 */
    } cases[] = {{"tiny", LM_TYPE_F32, "f32"}, {"gemma3", LM_TYPE_F16, "f16act"},
                 {"gptoss-mxfp4", LM_TYPE_F32, NULL}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; ++c) {
        char path[512];
        snprintf(path, sizeof path, "%s/q8act-%s.gguf", tu_tmpdir(), cases[c].preset);
        lm_err err = {0};
        lm_model *m = NULL;
        CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, cases[c].preset, 5, cases[c].type, &err), LM_OK);
        CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
        const size_t nv = m->hp.n_vocab;
        float *q = malloc(nv * sizeof *q), *t = malloc(nv * sizeof *t), *f = malloc(nv * sizeof *f);
        logits_under(q, m, NULL, "q8act");
        logits_under(f, m, NULL, "f32");
        if (cases[c].twin != NULL) {
            logits_under(t, m, NULL, cases[c].twin);
            CU_ASSERT(memcmp(q, t, nv * sizeof *q) == 0);
        }
        const bool same_as_f32 = memcmp(q, f, nv * sizeof *q) == 0;
        CU_ASSERT_EQUAL(same_as_f32, cases[c].type == LM_TYPE_F32 && cases[c].twin != NULL);
        /* lm_profile_rounds_on says so without running it; a profile rounding at a site always
         * acts */
        CU_ASSERT_EQUAL(lm_profile_rounds_on(lm_profile_find("q8act"), m), !same_as_f32);
        CU_ASSERT(lm_profile_rounds_on(lm_profile_find("f16kv"), m));
        CU_ASSERT_FALSE(lm_profile_rounds_on(lm_profile_find("f32"), m));
        free(q);
        free(t);
        free(f);
        lm_model_free(m);
    }
}

/* The naive-sr round slot under Q8_K: blocks of 256 whose first element 127 sets iscale = -1
 * (d = -1); every other element 0.25 (t = -0.25) goes to code 0 (value 0) with probability
 * 3/4 and to code -1 (value 1) with 1/4. 4080 such elements: tolerance 0.03 as above. */
static void test_profile_sr_slot_q8_K(void)
{
    lm_backend *be = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_backend_create(&be, "naive-sr:seed=11", 1, &err), LM_OK);
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x);
    for (int i = 0; i < N; ++i)
        x[i] = i % 256 == 0 ? 127.0f : 0.25f;
    const lm_round_spec q8k = {LM_ROUND_Q8_K, 0, 0, 0};
    lm_backend_round(be, x, 1, N, N, LM_SITE_SWIGLU, &q8k);
    int up = 0, off = 0;
    for (int i = 0; i < N; ++i) {
        if (i % 256 == 0) {
            off += x[i] != 127.0f;
            continue;
        }
        off += x[i] != 0.0f && x[i] != 1.0f;
        up += x[i] == 1.0f;
    }
    CU_ASSERT_EQUAL(off, 0);
    CU_ASSERT(fabs((double)up / (N - 16) - 0.25) < 0.03);
    free(x);
    lm_backend_destroy(be);
}

static void test_profile_config_key(void)
{
    hx_config c;
    lm_err err = {0};
    char s[HX_CONFIG_STR_MAX];
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, "naive:step=2:profile=f16kv", &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(c.profile, "f16kv");
    CU_ASSERT(lm_profile_count() <= LM_PROFILES_MAX);
    for (uint32_t i = 0; i < lm_profile_count(); ++i) /* the table place, found by name too */
        CU_ASSERT_EQUAL(lm_profile_index(lm_profile_find(lm_profile_at(i)->name)), i);
    hx_config_format(s, sizeof s, &c);
    CU_ASSERT_STRING_EQUAL(s, "naive:step=2:profile=f16kv");
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, "naive:profile=f32", &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(c.profile, "");
    hx_config_format(s, sizeof s, &c);
    CU_ASSERT_STRING_EQUAL(s, "naive:step=full");
    CU_ASSERT_EQUAL(hx_config_parse(&c, "naive:profile=fp8", &err), LM_E_INPUT);
    CU_ASSERT_EQUAL(hx_config_parse(&c, "naive:profile=bf16:profile=bf16", &err), LM_E_INPUT);
    hx_config *v = calloc(1, sizeof *v);
    size_t n = 1;
    snprintf(v[0].backend, sizeof v[0].backend, "naive");
    CU_ASSERT_EQUAL_FATAL(hx_config_cross_profile(&v, &n, "--profile", "f32,tf32,q8act", &err),
                          LM_OK);
    CU_ASSERT_EQUAL(n, 3u);
    CU_ASSERT_STRING_EQUAL(v[1].profile, "tf32");
    CU_ASSERT_EQUAL(hx_config_cross_profile(&v, &n, "--profile", "f32,f32", &err), LM_E_INPUT);
    CU_ASSERT_EQUAL(hx_config_cross_profile(&v, &n, "--profile", "f32,x", &err), LM_E_INPUT);
    free(v);
    for (uint32_t i = 0; i < lm_profile_count(); ++i)
        CU_ASSERT_PTR_EQUAL(lm_profile_find(lm_profile_at(i)->name), lm_profile_at(i));
    CU_ASSERT_FALSE(lm_profile_rounds(lm_profile_find("f32")));
    CU_ASSERT(lm_profile_rounds(lm_profile_find("q8act")));
}

/* sweep --profile: kvdrift's own naive engine run under f16kv and q8act (round to nearest at
 * the profile's sites) is judged against that profile's envelope: no false alarm, and far
 * beyond f32's envelope (so the profile's envelope, not f32's, is what was used). */
static void test_profile_sweep_axis(void)
{
    lm_model *m = tu_load_model("stories260K.gguf");
    if (m == NULL)
        return;
    lm_err err = {0};
    hx_config *c = NULL;
    size_t n = 0;
    static const char be[1][16] = {"naive"};
    static const uint32_t steps[2] = {3, 0};
    CU_ASSERT_EQUAL_FATAL(hx_sweep_cross(&c, &n, be, 1, steps, 2, NULL, 0, NULL, 0, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_config_cross_profile(&c, &n, "--profile", "f32,f16kv,q8act", &err),
                          LM_OK);
    CU_ASSERT_EQUAL_FATAL(n, 6u);
    char cache[512];
    snprintf(cache, sizeof cache, "%s/profile-sweep-cache", tu_tmpdir());
    const int32_t toks[5] = {1, 403, 407, 261, 378};
    ref_model *rm = tf_ref_open(m);
    hx_sweep_params p = {.model = m, .ref = rm,
                         .prompt = toks, .n_prompt = 5, .n_gen = 4, .configs = c,
                         .n_configs = n, .cache_dir = cache, .ref_threads = 1, .quiet = true};
    hx_sweep_result *r = NULL;
    int rc = hx_sweep_run_all(&r, &p, &err);
    if (rc != LM_OK)
        fprintf(stderr, "sweep: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    CU_ASSERT_PTR_NOT_NULL(r->env_prof[0]);
    CU_ASSERT_PTR_NOT_NULL(r->env_prof[1]);
    CU_ASSERT_PTR_NULL(r->env_prof[2]); /* bf16: no configuration uses it */
    for (size_t i = 0; i < n; ++i) {
        const hx_config_report *cr = &r->report->configs[i];
        CU_ASSERT_FALSE(hx_class_fails(cr->cls));
        CU_ASSERT(cr->worst_ratio <= 1.0);
    }
    /* the f16kv run's logits error is far beyond f32's envelope at the same row */
    const hx_config_report *c32 = &r->report->configs[1], *c16 = &r->report->configs[3];
    CU_ASSERT_STRING_EQUAL(c16->config, "naive:step=full:profile=f16kv");
    CU_ASSERT(c16->vs_ref.max_abs > 10.0 * c32->e_logits_max);
    hx_sweep_result_free(r);
    free(c);
    lm_model_free(m);
    ref_model_free(rm);
}

/* The largest E of an envelope's K tensors, V tensors and logits rows. */
typedef struct env_max {
    double k, v, logits;
} env_max;

static env_max env_max_of(const hx_envelope *e)
{
    env_max m = {0.0, 0.0, 0.0};
    for (uint32_t l = 0; l < e->n_layer; ++l) {
        m.k = fmax(m.k, e->k[l].e);
        m.v = fmax(m.v, e->v[l].e);
    }
    for (uint32_t i = 0; i < e->n_pos; ++i)
        m.logits = fmax(m.logits, e->logits[i].e);
    return m;
}

/* Every profile's envelope from 8 SR members of the reference's model (hx_envelope_from_ref_sr,
 * what sweep and judge use) against the one from 8 naive-sr members of the engine under the
 * same profile (what they used before, and still use with --envelope engine), on the tiny
 * synthetic model widened to 256 (2 layers) with Q4_K_M-like weights (Q4_K and Q6_K: q8act
 * converts product inputs to Q8_K blocks), 12 prompt tokens and 4 forced ones:
 *   - agreement: the largest E of K, of V and of the logits rows within a factor of 2 of the
 *     engine's, both ways. Both ensembles round the same sites to the same virtual precision,
 *     which dominates their spread (binary16 and bfloat16 steps are 2^13 and 2^16 float32
 *     ulps; a Q8 step ~1/127 of its block's largest value), so they agree up to: the spread
 *     being the maximum over 8 draws (the largest of 8 deviations scatters by tens of per
 *     cent between independent ensembles), the engine's coins being shared by equal values
 *     in one column (backend_naive_sr.c: its roundings are correlated, the reference's are
 *     not), and the float32 noise under the profile's (each side's own model of it). 2 covers
 *     these with margin and is what E's own safety factor is (envelope.h); a site rounded by
 *     one side only moves E by the ratio of the two precisions (2^13 for binary16), far
 *     outside it;
 *   - a profile that rounds more coarsely than float32 has a logits E more than 16 times
 *     f32's (measured: two to three orders of magnitude), and f16kv's K and V E more than 16
 *     times f32's: the profile's rounding is applied, not dropped. */
static void test_profile_ref_sr_envelope_matches_engine(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/profile-env-tiny-q4k.gguf", tu_tmpdir());
    lm_err err = {0};
    hx_synth_params sp;
    CU_ASSERT_EQUAL_FATAL(hx_synth_preset(&sp, "tiny", &err), LM_OK);
    sp.n_embd = 256; /* the mix quantizes whole 256-element rows */
    sp.n_layer = 2;
    sp.head_dim = 32; /* 8 heads of 32 */
    sp.n_ff = 512;
    CU_ASSERT_EQUAL_FATAL(hx_synth_write_params(path, &sp, 3, LM_TYPE_Q4_K, &err), LM_OK);
    lm_model *m = NULL;
    ref_model *rm = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(ref_model_open(&rm, path, &err), LM_OK);
    int32_t tok[16];
    for (int i = 0; i < 16; ++i)
        tok[i] = 3 + (int32_t)((i * 37u + 11u) % 500u);
    ref_request rq = {.tokens = tok, .n_tokens = 16, .n_prompt = 12};
    ref_capture ref;
    CU_ASSERT_EQUAL_FATAL(ref_compute(&ref, rm, &rq, &err), LM_OK);
    const hx_forced_request frq = {.tokens = ref.tokens, .n_tokens = ref.n_tokens,
                                   .n_kv = ref.n_prompt, .pos = ref.pos, .n_pos = ref.n_pos};
    static const char *const names[] = {"f32", "f16kv", "bf16", "tf32", "q8act", "f16act"};
    env_max f32 = {0.0, 0.0, 0.0};
    for (size_t p = 0; p < sizeof names / sizeof *names; ++p) {
        hx_envelope *er = NULL, *ee = NULL;
        hx_capture *mem[8] = {NULL};
        CU_ASSERT_EQUAL_FATAL(hx_envelope_from_ref_sr(&er, rm, &ref, names[p], 8, 100, 0,
                                                      HX_ENVELOPE_SAFETY, NULL, NULL, &err),
                              LM_OK);
        CU_ASSERT_EQUAL_FATAL(hx_run_forced_members(mem, 8, m, names[p], 100, &frq, 2, NULL,
                                                    NULL, &err), LM_OK);
        CU_ASSERT_EQUAL_FATAL(hx_envelope_from_ensemble(&ee, (const hx_capture *const *)mem, 8,
                                                        &ref, HX_ENVELOPE_SAFETY, &err), LM_OK);
        const env_max r = env_max_of(er), e = env_max_of(ee);
        printf("\n    %-6s E reference-SR / naive-sr: K %.3g / %.3g, V %.3g / %.3g, logits "
               "%.3g / %.3g", names[p], r.k, e.k, r.v, e.v, r.logits, e.logits);
        const double q[3] = {r.k / e.k, r.v / e.v, r.logits / e.logits};
        for (int i = 0; i < 3; ++i)
            CU_ASSERT(q[i] >= 0.5 && q[i] <= 2.0);
        if (p == 0)
            f32 = r;
        else
            CU_ASSERT(r.logits > 16.0 * f32.logits);
        if (strcmp(names[p], "f16kv") == 0)
            CU_ASSERT(r.k > 16.0 * f32.k && r.v > 16.0 * f32.v);
        for (int i = 0; i < 8; ++i)
            hx_capture_free(mem[i]);
        hx_envelope_free(er);
        hx_envelope_free(ee);
    }
    ref_capture_free(&ref);
    ref_model_free(rm);
    lm_model_free(m);
}

void test_profile_register(void)
{
    CU_pSuite s = CU_add_suite("profile", NULL, NULL);
    CU_add_test(s, "test_profile_round_nearest_special_values",
                test_profile_round_nearest_special_values);
    CU_add_test(s, "test_profile_bracket_probability", test_profile_bracket_probability);
    CU_add_test(s, "test_profile_sr_slot_frequency", test_profile_sr_slot_frequency);
    CU_add_test(s, "test_profile_engine_f16kv_cache", test_profile_engine_f16kv_cache);
    CU_add_test(s, "test_profile_engine_sandwich_norms", test_profile_engine_sandwich_norms);
    CU_add_test(s, "test_profile_engine_stream_bf16", test_profile_engine_stream_bf16);
    CU_add_test(s, "test_profile_engine_moe_weights", test_profile_engine_moe_weights);
    CU_add_test(s, "test_profile_engine_q8act_per_weight_type",
                test_profile_engine_q8act_per_weight_type);
    CU_add_test(s, "test_profile_sr_slot_q8_K", test_profile_sr_slot_q8_K);
    CU_add_test(s, "test_profile_config_key", test_profile_config_key);
    CU_add_test(s, "test_profile_sweep_axis", test_profile_sweep_axis);
    CU_add_test(s, "test_profile_ref_sr_envelope_matches_engine",
                test_profile_ref_sr_envelope_matches_engine);
}
