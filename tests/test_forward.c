/* test_forward.c — the forward pass: against a double-precision forward on a synthetic
 * in-memory model (GQA, biases, partial rotary dims, NORM and NEOX RoPE), logits-only-where-
 * asked equivalence (every backend and synth preset, with the last layer's skipped rows), chunk-size invariance of the naive backend (bitwise, logits and KV cache),
 * blas vs naive within a stated bound, bad input, and stories260K's known greedy text. */
#include "fixtures.h"
#include "kvd_engine.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------- a synthetic model built in memory (no file, no loader) ---------- */

/* 2 layers, n_embd 24, 4 query heads on 2 kv heads of head_dim 8 (q_dim 32 != n_embd),
 * n_rot 6 < head_dim, every bias present, tied output. Weights uniform in +-2/sqrt(fan_in):
 * large enough that logits are not flat. The double-precision forward it is checked against
 * is tf_forward_f64 (fixtures.h). */
static void synth_build_eps(tf_model *s, lm_rope_type rope, uint64_t seed, float eps, float embd)
{
    lm_hparams hp;
    memset(&hp, 0, sizeof hp);
    snprintf(hp.arch, sizeof hp.arch, "llama");
    hp.n_vocab = 40, hp.n_embd = 24, hp.n_layer = 2, hp.n_head = 4, hp.n_head_kv = 2;
    hp.head_dim = 8, hp.n_ff = 40, hp.n_rot = 6, hp.n_ctx_train = 256;
    hp.rms_eps = eps, hp.rope_theta = 10000.0f, hp.rope_type = rope, hp.tied_output = true;
    const size_t d = hp.n_embd, q = 32, ff = hp.n_ff;
    const float sd = 2.0f / sqrtf((float)d), sq = 2.0f / sqrtf((float)q), sf = 2.0f / sqrtf((float)ff);
    const tf_scales sc = {.embd = embd, .norm = 0.5f, .wq = sd, .wk = sd, .wv = sd, .wo = sq,
                          .w_gate_up = sd, .w_down = sf, .bias = 0.1f};
    tf_model_build(s, &hp, true, &sc, seed);
}

/* The model above with eps 1e-5 and embeddings of scale 1. */
static void synth_build(tf_model *s, lm_rope_type rope, uint64_t seed)
{
    synth_build_eps(s, rope, seed, 1e-5f, 1.0f);
}

/* ---------- helpers ---------- */

static lm_ctx *ctx_new(const lm_model *m, const char *backend, uint32_t n_ctx)
{
    lm_ctx *c = NULL;
    lm_err err = {0};
    const lm_ctx_params p = {.backend = backend, .n_threads = 1, .n_ctx = n_ctx};
    if (lm_ctx_create(&c, m, &p, &err) != LM_OK)
        fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_FATAL(c != NULL);
    return c;
}

/* Feeds tokens[n] in chunks of `step` (0 = one chunk) with LM_LOGITS_ALL: logits [n][n_vocab]. */
static void run_all(lm_ctx *c, const int32_t *tok, uint32_t n, uint32_t step, float *logits)
{
    const uint32_t nv = lm_ctx_model(c)->hp.n_vocab;
    lm_err err = {0};
    lm_ctx_reset(c);
    for (uint32_t done = 0; done < n;) {
        uint32_t len = step == 0 || n - done < step ? n - done : step;
        CU_ASSERT_FATAL(lm_forward(c, tok + done, len, LM_LOGITS_ALL, logits + (size_t)done * nv, &err) == LM_OK);
        done += len;
    }
}

static void rand_tokens(int32_t *tok, uint32_t n, uint32_t n_vocab, uint64_t seed)
{
    uint64_t st = seed;
    tok[0] = 1;
    for (uint32_t i = 1; i < n; ++i)
        tok[i] = (int32_t)(3 + tu_rand_u64(&st) % (n_vocab - 3));
}

static lm_model *stories;
static bool stories_tried;

static const lm_model *stories_model(void)
{
    if (!stories_tried) {
        stories_tried = true;
        const char *path = tu_model_path("stories260K.gguf");
        lm_err err = {0};
        if (path != NULL && lm_model_load(&stories, path, &err) != LM_OK) {
            fprintf(stderr, "\n  %s\n", err.msg);
            CU_FAIL("stories260K.gguf does not load");
        }
    }
    return stories;
}

static int suite_clean(void)
{
    lm_model_free(stories);
    stories = NULL;
    stories_tried = false;
    return 0;
}

/* ---------- tests ---------- */

/* The engine on backend be, fed tok[n] in chunks of each of steps[n_steps], against the
 * double forward of m, every position. Bound: |engine - double| <= 1e-4 * max(1, max|logit|).
 * Expected float32 error on these models is ~1e-6 relative (dot products of <= 40 terms, 2
 * layers, u = 6e-8); any wrong convention moves logits by O(0.1) or more. */
static void check_vs_double(const lm_model *m, const int32_t *tok, uint32_t n, const char *be,
                            const uint32_t *steps, int n_steps, const char *what)
{
    const size_t nl = (size_t)n * m->hp.n_vocab;
    double *ref = tf_forward_f64(m, tok, n, NULL, NULL);
    double mx = 1.0;
    for (size_t i = 0; i < nl; ++i)
        mx = fmax(mx, fabs(ref[i]));
    float *lg = malloc(nl * sizeof *lg);
    CU_ASSERT_FATAL(lg != NULL);
    for (int si = 0; si < n_steps; ++si) {
        lm_ctx *c = ctx_new(m, be, n);
        run_all(c, tok, n, steps[si], lg);
        double worst = 0;
        for (size_t i = 0; i < nl; ++i)
            worst = fmax(worst, fabs((double)lg[i] - ref[i]));
        if (!(worst <= 1e-4 * mx))
            fprintf(stderr, "\n  %s %s step %u: max abs error %g (max |logit| %g)\n", be, what,
                    steps[si], worst, mx);
        CU_ASSERT(worst <= 1e-4 * mx);
        lm_ctx_free(c);
    }
    free(lg);
    free(ref);
}

/* Float32 engine vs the double forward on the synthetic model (check_vs_double): RoPE pairing,
 * GQA mapping, a missing bias, the mask, chunking. */
static void test_forward_matches_double_reference(void)
{
    enum { N = 150 }; /* > LM_ATTN_Q_BLOCK: a one-chunk run uses two causal blocks */
    int32_t tok[N];
    static const uint32_t steps[] = {0, 1, 5, 140};
    for (int r = 0; r < 2; ++r) {
        tf_model s;
        synth_build(&s, r == 0 ? LM_ROPE_NORM : LM_ROPE_NEOX, tu_seed() + (uint64_t)r);
        rand_tokens(tok, N, s.m.hp.n_vocab, tu_seed());
        check_vs_double(&s.m, tok, N, "naive", steps, 4, r == 0 ? "rope norm" : "rope neox");
        check_vs_double(&s.m, tok, N, "blas", steps, 4, r == 0 ? "rope norm" : "rope neox");
        tf_model_free(&s);
    }
}

/* Every RMSNorm (each layer's two and the output norm) uses the model's epsilon: with eps 0.5
 * and embeddings of scale 0.05 (mean square of a row about 1e-3), eps dominates each norm's
 * denominator, so a norm that used another epsilon (a constant 1e-5, say) moves the logits by
 * far more than check_vs_double's bound. */
static void test_forward_norm_eps_matters(void)
{
    enum { N = 24 };
    int32_t tok[N];
    static const uint32_t steps[] = {0, 5};
    tf_model s;
    synth_build_eps(&s, LM_ROPE_NEOX, tu_seed() + 11, 0.5f, 0.05f);
    rand_tokens(tok, N, s.m.hp.n_vocab, tu_seed());
    check_vs_double(&s.m, tok, N, "naive", steps, 2, "eps 0.5");
    tf_model_free(&s);
}

/* Every layer's K and V cache of c's first n positions, appended to kv [n_layer][2][n][kv_dim]. */
static void copy_kv(lm_ctx *c, const lm_model *m, uint32_t n, float *kv)
{
    const size_t kvf = (size_t)n * m->hp.n_head_kv * m->hp.head_dim;
    for (uint32_t il = 0; il < m->hp.n_layer; ++il) {
        memcpy(kv + (2 * il) * kvf, lm_ctx_k(c, il), kvf * sizeof *kv);
        memcpy(kv + (2 * il + 1) * kvf, lm_ctx_v(c, il), kvf * sizeof *kv);
    }
}

/* LM_LOGITS_LAST must give exactly the bits of the last row of LM_LOGITS_ALL, and every
 * logits mode the same K and V: the output projection runs only for the rows asked for, and
 * on a chunk-invariant backend the last layer runs past K and V only for them (forward.c,
 * out_rows; LM_LOGITS_NONE: for none). A chunk-invariant backend is also fed in chunks of 1
 * and 5 (lm_prefill: NONE chunks, then LAST), which must change no bit either.
 * Returns the number of runs that differ. */
static int check_last_equals_all(const lm_model *m, uint32_t n, const char *backend, int threads,
                                 const char *profile)
{
    const uint32_t nv = m->hp.n_vocab;
    const size_t kv_floats = 2 * (size_t)m->hp.n_layer * n * m->hp.n_head_kv * m->hp.head_dim;
    int32_t *tok = malloc(n * sizeof *tok);
    float *all = malloc((size_t)n * nv * sizeof *all), *last = malloc(nv * sizeof *last);
    float *kv_all = malloc(kv_floats * sizeof *kv_all), *kv = malloc(kv_floats * sizeof *kv);
    CU_ASSERT_FATAL(tok && all && last && kv_all && kv);
    rand_tokens(tok, n, nv, tu_seed() ^ 7);
    lm_ctx *c = NULL;
    lm_err err = {0};
    const lm_ctx_params p = {.backend = backend, .n_threads = threads, .n_ctx = n,
                             .profile = profile};
    if (lm_ctx_create(&c, m, &p, &err) != LM_OK)
        fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_FATAL(c != NULL);
    CU_ASSERT_FATAL(lm_forward(c, tok, n, LM_LOGITS_ALL, all, &err) == LM_OK);
    copy_kv(c, m, n, kv_all);
    const bool invariant = lm_backend_flags(backend) & LM_BE_CHUNK_INVARIANT;
    static const uint32_t steps[] = {0, 1, 5};
    int bad = 0;
    for (size_t si = 0; si < (invariant ? 3u : 1u); ++si) {
        lm_ctx_reset(c);
        CU_ASSERT_FATAL(lm_prefill(c, tok, n, steps[si], last, &err) == LM_OK);
        CU_ASSERT_EQUAL(lm_ctx_n_past(c), n);
        copy_kv(c, m, n, kv);
        const bool same_logits = memcmp(last, all + (size_t)(n - 1) * nv, nv * sizeof *last) == 0;
        const bool same_kv = memcmp(kv, kv_all, kv_floats * sizeof *kv) == 0;
        if (!same_logits || !same_kv)
            fprintf(stderr, "\n  %s x%d step %u: LAST differs from ALL (logits %d, kv %d)",
                    backend, threads, steps[si], same_logits, same_kv);
        bad += !same_logits || !same_kv;
    }
    lm_ctx_free(c);
    free(tok), free(all), free(last), free(kv_all), free(kv);
    return bad;
}

static void test_forward_last_equals_all_row(void)
{
    tf_model s;
    synth_build(&s, LM_ROPE_NORM, tu_seed());
    static const char *const be[] = {"naive", "blas", "det"};
    for (int b = 0; b < 3; ++b)
        CU_ASSERT_EQUAL(check_last_equals_all(&s.m, 19, be[b], 1, NULL), 0);
    CU_ASSERT_EQUAL(check_last_equals_all(&s.m, 19, "det", 2, NULL), 0);
    tf_model_free(&s);
    const lm_model *m = stories_model();
    if (m != NULL)
        for (int b = 0; b < 3; ++b)
            CU_ASSERT_EQUAL(check_last_equals_all(m, 40, be[b], 2, NULL), 0);
}

/* The same on every synth preset (biases, q/k norms, sandwich norms, sliding windows, sinks,
 * MoE: the last layers that are skipped and those that are not) with naive, the SR ensemble's
 * backend, and det at 1 and 3 threads (under a profile that rounds the products' inputs). */
static void test_forward_last_equals_all_presets(void)
{
    const char *name;
    char path[1024];
    lm_model *m;
    for (size_t i = 0; (m = tf_preset_model(i, "last", 5, &name, path)) != NULL; ++i) {
        CU_ASSERT_EQUAL(check_last_equals_all(m, 23, "naive", 1, NULL), 0);
        CU_ASSERT_EQUAL(check_last_equals_all(m, 23, "det", 1, NULL), 0);
        CU_ASSERT_EQUAL(check_last_equals_all(m, 23, "naive-sr:seed=3", 1, NULL), 0);
        CU_ASSERT_EQUAL(check_last_equals_all(m, 23, "det", 3, "f16act"), 0);
        lm_model_free(m);
        remove(path);
    }
}

/* A token whose embedding is NaN makes its own position and later ones non-finite; the
 * positions before it cannot see it, so their logits are those of the same prompt with a finite
 * token there: bit for bit on a chunk-invariant backend, finite on blas (whose one-row products
 * round otherwise). Every synth preset (windows, sinks, MoE), dense and streaming attention and
 * a rotating cache (an exact window, and MLX's policy), prefill steps 5 and one chunk. The
 * causal mask hides a later key's value behind P = +0, and 0 * NaN is NaN: without
 * lm_attn_pv_mend every earlier position of the NaN token's block or tile turns NaN. */
static void test_forward_nan_token_reaches_only_later_positions(void)
{
    enum { N = 24, AT = 13 };
    static const struct {
        const char *backend;
        int threads;
        const char *attn;
        uint32_t rot_max;
        bool rot_window;
    } cfg[] = {{"naive", 1, NULL, 0, false},   {"det", 2, NULL, 0, false},
               {"blas", 2, NULL, 0, false},
               {"naive", 1, "stream", 0, false}, {"det", 2, NULL, 8, true},
               {"naive", 1, NULL, 8, false},     {"cuda-det", 1, NULL, 0, false},
               {"cuda", 1, "stream", 0, false}}; /* the device rows: skipped without one */
    static const uint32_t steps[] = {0, 5};
    const char *name;
    char path[1024];
    lm_model *m;
    for (size_t i = 0; (m = tf_preset_model(i, "nantok", 9, &name, path)) != NULL; ++i) {
        const uint32_t nv = m->hp.n_vocab, d = m->hp.n_embd;
        int32_t tok[N], clean[N];
        rand_tokens(tok, N, nv, tu_seed() ^ i);
        const int32_t nan_tok = tok[AT];
        memcpy(clean, tok, sizeof tok);
        clean[AT] = nan_tok == 3 ? 4 : 3;
        /* the NaN is written into the embedding: float32 in the arena, not the read-only file */
        lm_err lerr = {0};
        lm_model_free(m);
        CU_ASSERT_EQUAL_FATAL(lm_model_load_mode(&m, path, LM_WEIGHTS_ARENA, &lerr), LM_OK);
        float *emb = (float *)(uintptr_t)m->tok_embd.f + (size_t)nan_tok * d; /* [n_embd] */
        float *lg = malloc((size_t)N * nv * sizeof *lg);  /* [N][n_vocab] */
        float *ref = malloc((size_t)N * nv * sizeof *ref); /* [N][n_vocab] */
        CU_ASSERT_FATAL(lg && ref);
        for (size_t k = 0; k < sizeof cfg / sizeof cfg[0]; ++k) {
            lm_ctx *c = NULL;
            lm_err err = {0};
            const lm_ctx_params p = {.backend = cfg[k].backend, .n_threads = cfg[k].threads,
                                     .n_ctx = N, .attn = cfg[k].attn,
                                     .rot_max_size = cfg[k].rot_max,
                                     .rot_window = cfg[k].rot_window};
            const int rc = lm_ctx_create(&c, m, &p, &err);
            if (rc == LM_E_UNSUPPORTED &&
                (lm_backend_flags(cfg[k].backend) & LM_BE_MAY_BE_ABSENT) != 0) {
                if (i == 0)
                    fprintf(stderr, "\n  SKIP %s: %s\n", cfg[k].backend, err.msg);
                continue;
            }
            CU_ASSERT_FATAL(rc == LM_OK);
            const bool exact = (lm_backend_flags(cfg[k].backend) & LM_BE_CHUNK_INVARIANT) != 0;
            for (size_t si = 0; si < sizeof steps / sizeof steps[0]; ++si) {
                const float saved = emb[d / 2];
                run_all(c, clean, N, steps[si], ref);
                emb[d / 2] = NAN;
                run_all(c, tok, N, steps[si], lg);
                emb[d / 2] = saved;
                int earlier_bad = 0, own_finite = 1;
                for (uint32_t t = 0; t < AT; ++t)
                    for (uint32_t v = 0; v < nv; ++v) {
                        const float x = lg[(size_t)t * nv + v], r = ref[(size_t)t * nv + v];
                        if ((int32_t)v == nan_tok)
                            continue; /* a tied output row holds the NaN too */
                        earlier_bad += exact ? memcmp(&x, &r, sizeof x) != 0 : !isfinite(x);
                    }
                for (uint32_t v = 0; v < nv; ++v)
                    own_finite &= (int32_t)v == nan_tok || isfinite(lg[(size_t)AT * nv + v]);
                if (earlier_bad || own_finite)
                    fprintf(stderr, "\n  %s on %s (attn %s, rotating %u%s) step %u: %d logits "
                            "before position %d differ%s\n", name, cfg[k].backend,
                            cfg[k].attn ? cfg[k].attn : "dense", cfg[k].rot_max,
                            cfg[k].rot_window ? " window" : "", steps[si], earlier_bad, AT,
                            own_finite ? "; its own logits are finite" : "");
                CU_ASSERT_EQUAL(earlier_bad, 0);
                CU_ASSERT(!own_finite);
            }
            lm_ctx_free(c);
        }
        free(lg), free(ref);
        lm_model_free(m);
        remove(path);
    }
}

/* Naive backend: logits of the last prompt position and every layer's K and V cache are
 * bitwise identical for prefill steps 1, 2, 3, 7 and one chunk. */
static void check_naive_step_invariant(const lm_model *m, uint32_t n)
{
    const uint32_t nv = m->hp.n_vocab, nl = m->hp.n_layer;
    const size_t kv_floats = (size_t)n * m->hp.n_head_kv * m->hp.head_dim;
    int32_t *tok = malloc(n * sizeof *tok);
    float *base = malloc(nv * sizeof *base), *lg = malloc(nv * sizeof *lg);
    float *kb = malloc(nl * kv_floats * sizeof *kb), *vb = malloc(nl * kv_floats * sizeof *vb);
    CU_ASSERT_FATAL(tok && base && lg && kb && vb);
    rand_tokens(tok, n, nv, tu_seed() ^ 3);
    lm_ctx *c = ctx_new(m, "naive", n);
    lm_err err = {0};
    CU_ASSERT_FATAL(lm_prefill(c, tok, n, 0, base, &err) == LM_OK);
    for (uint32_t il = 0; il < nl; ++il) {
        memcpy(kb + il * kv_floats, lm_ctx_k(c, il), kv_floats * sizeof *kb);
        memcpy(vb + il * kv_floats, lm_ctx_v(c, il), kv_floats * sizeof *vb);
    }
    static const uint32_t steps[] = {1, 2, 3, 7};
    for (size_t si = 0; si < 4; ++si) {
        lm_ctx_reset(c);
        CU_ASSERT_FATAL(lm_prefill(c, tok, n, steps[si], lg, &err) == LM_OK);
        int same_kv = 1;
        for (uint32_t il = 0; il < nl; ++il) {
            same_kv &= memcmp(kb + il * kv_floats, lm_ctx_k(c, il), kv_floats * sizeof *kb) == 0;
            same_kv &= memcmp(vb + il * kv_floats, lm_ctx_v(c, il), kv_floats * sizeof *vb) == 0;
        }
        const int same_logits = memcmp(base, lg, nv * sizeof *lg) == 0;
        if (!same_kv || !same_logits)
            fprintf(stderr, "\n  naive step %u differs from one chunk (kv %d, logits %d)\n",
                    steps[si], same_kv, same_logits);
        CU_ASSERT(same_kv);
        CU_ASSERT(same_logits);
    }
    lm_ctx_free(c);
    free(tok), free(base), free(lg), free(kb), free(vb);
}

static void test_forward_naive_step_invariant(void)
{
    tf_model s;
    synth_build(&s, LM_ROPE_NEOX, tu_seed());
    check_naive_step_invariant(&s.m, 23);
    check_naive_step_invariant(&s.m, 200); /* two causal blocks in one chunk */
    tf_model_free(&s);
    const lm_model *m = stories_model();
    if (m != NULL)
        check_naive_step_invariant(m, 300);
}

/* blas vs naive on stories260K (and the synthetic model), steps 1, 7 and one chunk:
 * max |blas - naive| <= 1e-4 * max(1, max|naive logit|). Both are float32 computations of
 * the same sums in other orders; their difference is a few ulps of the intermediate values
 * (~1e-6 relative), so 1e-4 leaves a 100x margin while a real defect (one wrong term) is
 * O(1e-2) or more. The observed figure is printed. */
static void check_blas_close(const lm_model *m, uint32_t n)
{
    const uint32_t nv = m->hp.n_vocab;
    int32_t *tok = malloc(n * sizeof *tok);
    float *ref = malloc(nv * sizeof *ref), *lg = malloc(nv * sizeof *lg);
    CU_ASSERT_FATAL(tok && ref && lg);
    rand_tokens(tok, n, nv, tu_seed() ^ 11);
    lm_err err = {0};
    lm_ctx *cn = ctx_new(m, "naive", n), *cb = ctx_new(m, "blas", n);
    CU_ASSERT_FATAL(lm_prefill(cn, tok, n, 0, ref, &err) == LM_OK);
    double mx = 1.0;
    for (uint32_t i = 0; i < nv; ++i)
        mx = fmax(mx, fabs((double)ref[i]));
    static const uint32_t steps[] = {1, 7, 0};
    for (int si = 0; si < 3; ++si) {
        lm_ctx_reset(cb);
        CU_ASSERT_FATAL(lm_prefill(cb, tok, n, steps[si], lg, &err) == LM_OK);
        double worst = 0;
        for (uint32_t i = 0; i < nv; ++i)
            worst = fmax(worst, fabs((double)lg[i] - (double)ref[i]));
        fprintf(stderr, "\n  %s blas step %u vs naive: max abs %.3g (max |logit| %.3g)",
                m->path ? "model" : "synthetic", steps[si], worst, mx);
        CU_ASSERT(worst <= 1e-4 * mx);
    }
    lm_ctx_free(cn);
    lm_ctx_free(cb);
    free(tok), free(ref), free(lg);
}

static void test_forward_blas_close_to_naive(void)
{
    tf_model s;
    synth_build(&s, LM_ROPE_NORM, tu_seed() + 5);
    check_blas_close(&s.m, 30);
    tf_model_free(&s);
    const lm_model *m = stories_model();
    if (m != NULL)
        check_blas_close(m, 300);
}

/* Bad input is refused with LM_E_INPUT and leaves the context as it was. */
static void test_forward_bad_input(void)
{
    tf_model s;
    synth_build(&s, LM_ROPE_NORM, tu_seed());
    lm_err err = {0};
    lm_ctx *c = NULL;
    lm_ctx_params p = {.backend = "naive", .n_ctx = 257};
    CU_ASSERT_EQUAL(lm_ctx_create(&c, &s.m, &p, &err), LM_E_INPUT); /* > n_ctx_train 256 */
    CU_ASSERT_PTR_NULL(c);
    lm_err_clear(&err);
    p.n_ctx = 8;
    p.backend = "gpu9";
    CU_ASSERT_EQUAL(lm_ctx_create(&c, &s.m, &p, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(c);
    c = ctx_new(&s.m, "naive", 8);
    CU_ASSERT_EQUAL(lm_ctx_n_ctx(c), 8);
    CU_ASSERT_STRING_EQUAL(lm_ctx_backend_name(c), "naive");
    CU_ASSERT(lm_ctx_scratch_bytes(c) > 0);
    CU_ASSERT_PTR_NULL(lm_ctx_k(c, 2));
    float lg[40];
    int32_t tok[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_forward(c, tok, 0, LM_LOGITS_LAST, lg, &err), LM_E_INPUT);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_forward(c, tok, 9, LM_LOGITS_LAST, lg, &err), LM_E_INPUT);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_forward(c, tok, 2, LM_LOGITS_LAST, NULL, &err), LM_E_INPUT);
    tok[1] = 40;
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_forward(c, tok, 3, LM_LOGITS_LAST, lg, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "40"));
    tok[1] = -1;
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_forward(c, tok, 3, LM_LOGITS_LAST, lg, &err), LM_E_INPUT);
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_prefill(c, tok, 0, 1, lg, &err), LM_E_INPUT);
    CU_ASSERT_EQUAL(lm_ctx_n_past(c), 0);
    tok[1] = 2;
    lm_err_clear(&err);
    CU_ASSERT_EQUAL(lm_forward(c, tok, 8, LM_LOGITS_NONE, NULL, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_forward(c, tok, 1, LM_LOGITS_LAST, lg, &err), LM_E_INPUT); /* full */
    CU_ASSERT_EQUAL(lm_ctx_n_past(c), 8);
    lm_ctx_free(c);
    lm_ctx_free(NULL);
    tf_model_free(&s);
}

/* stories260K, prompt "Once upon a time" as ids (BOS 1 403 407 261 378), greedy 32 tokens:
 * the model's published continuation, with every backend and step. */
static void test_forward_stories_greedy_text(void)
{
    const lm_model *m = stories_model();
    if (m == NULL || m->vocab == NULL)
        return;
    static const char want[] = "Once upon a time, there was a little girl named Lily. She loved "
                               "to play outside in the park. One day, she saw";
    int32_t tok[5 + 32] = {1, 403, 407, 261, 378};
    static const char *const be[] = {"naive", "blas"};
    static const uint32_t steps[] = {1, 3, 0};
    float *lg = malloc(m->hp.n_vocab * sizeof *lg);
    CU_ASSERT_FATAL(lg != NULL);
    for (int b = 0; b < 2; ++b)
        for (int si = 0; si < 3; ++si) {
            lm_ctx *c = ctx_new(m, be[b], 5 + 32);
            lm_err err = {0};
            CU_ASSERT_FATAL(lm_prefill(c, tok, 5, steps[si], lg, &err) == LM_OK);
            for (int i = 0; i < 32; ++i) {
                tok[5 + i] = lm_argmax(lg, m->hp.n_vocab);
                CU_ASSERT_FATAL(lm_forward(c, &tok[5 + i], 1, LM_LOGITS_LAST, lg, &err) == LM_OK);
            }
            char *text = NULL;
            CU_ASSERT_FATAL(lm_detokenize(m->vocab, tok, 5 + 32, &text, &err) == LM_OK);
            if (strcmp(text, want) != 0)
                fprintf(stderr, "\n  %s step %u: '%s'\n", be[b], steps[si], text);
            CU_ASSERT_STRING_EQUAL(text, want);
            free(text);
            lm_ctx_free(c);
        }
    free(lg);
}

void test_forward_register(void)
{
    CU_pSuite s = CU_add_suite("forward", NULL, suite_clean);
    CU_add_test(s, "test_forward_matches_double_reference", test_forward_matches_double_reference);
    CU_add_test(s, "test_forward_norm_eps_matters", test_forward_norm_eps_matters);
    CU_add_test(s, "test_forward_last_equals_all_row", test_forward_last_equals_all_row);
    CU_add_test(s, "test_forward_last_equals_all_presets", test_forward_last_equals_all_presets);
    CU_add_test(s, "test_forward_nan_token_reaches_only_later_positions",
                test_forward_nan_token_reaches_only_later_positions);
    CU_add_test(s, "test_forward_naive_step_invariant", test_forward_naive_step_invariant);
    CU_add_test(s, "test_forward_blas_close_to_naive", test_forward_blas_close_to_naive);
    CU_add_test(s, "test_forward_bad_input", test_forward_bad_input);
    CU_add_test(s, "test_forward_stories_greedy_text", test_forward_stories_greedy_text);
}
