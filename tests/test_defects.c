/* test_defects.c — detection shown, not assumed: every test-only engine defect of
 * kvd_defects.h, run through the DEFAULT sweep (hx_axes_configs of an empty hx_axes: the axes
 * `kvdrift sweep` uses when given none) on stories260K, the synthetic "tiny" model,
 * llama-2-tiny-random and a 270-token prompt on the synthetic "tiny-draft" model (past the
 * streaming attention's key tile), must come out DRIFT, FLIP or NONFINITE wherever it can reach
 * a compared tensor; with the switch off, no legitimate configuration may be DRIFT or FLIP
 * (the false-alarm count is 0). Each defect is also swept with the OLD default axes (threads 1,
 * attn default: naive,blas x the default steps), so that the table shows what the axes added:
 * the thread-split and the streaming tile-boundary defects must pass the old default unseen
 * and be caught by the new one.
 *
 * The defect reaches every run of the engine (nothing is spared: a defect shared by every
 * configuration is still a defect). What keeps the sweep honest: the reference is MPFR code
 * that shares nothing with the engine's arithmetic, so the defect cannot reach it; and the
 * envelope is the members' spread around their own mean (envelope.h), so a bias that every
 * member shares cancels instead of widening E. The clean sweep runs first; when a defective
 * sweep's teacher path stays the clean one, the reference must come from the cache (asserted:
 * the same tokens), and the table prints how much the defect changed the envelope (largest E
 * ratio defective / clean over the compared tensors).
 *
 * Softmax without max subtraction is the same mathematics as with it: it changes values only
 * when exp overflows, i.e. when an attention logit exceeds ~88.7. On these models the logits
 * are far below that, the defect only moves rounding, and a harness that called it DRIFT there
 * would be raising a false alarm; the table reports what the sweep says. To show that the
 * harness catches it where it matters, the short-prompt models also get a "hot" variant: layer
 * 0's Wq scaled by the power of two that lifts this prompt's largest layer-0 attention logit
 * (measured through the engine's probe) into [128, 256). The hot variant's clean sweep must
 * raise no alarm, and the defect must make every configuration NONFINITE. Speculative decoding's
 * defects are outside what a sweep without --spec runs (test_spec.c catches them); they are
 * listed, not swept. Defects this file has no expectation for (other suites' own) are swept and
 * tabled without assertions.
 *
 * Sweeps: 4 greedy tokens, 8 SR members, 127-bit reference, one timed run per configuration
 * (time_once: speeds are not looked at). */
#include "plan/case.h"
#include "model/config.h"
#include "kvd_defects.h"
#include "kvd_engine.h"
#include "kvd_tokenizer.h"
#include "kvd_util.h"
#include "run/sweep.h"
#include "fixtures.h"
#include "plan/synth.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static const char prompt_text[] = "Once upon a time, there was a little girl";
#define N_GEN 4u
#define LONG_PROMPT 270u /* tokens of the tiny-draft prompt: past the key tile with N_GEN */

typedef struct defect_case {
    lm_defect d;
    bool every;      /* changes every configuration's mathematics: all must fail */
    bool exact_math; /* same mathematics as the correct code unless exp overflows */
    const char *not_swept; /* why the matrix does not sweep it, and what catches it; NULL:
                              swept */
    bool new_axes;   /* only the new default axes reach it: the old default must miss it */
} defect_case;

/* Chunk-dependent defects need only be caught somewhere: a step=1 prefill has no "next
 * token of its chunk", for example. */
static const defect_case known[] = {
    {LM_DEFECT_ROPE_POS_AFTER_CHUNK, false, false, NULL, false},
    {LM_DEFECT_MASK_NEXT_TOKEN, false, false, NULL, false},
    {LM_DEFECT_KV_SLOT_AT_BOUNDARY, false, false, NULL, false},
    {LM_DEFECT_ATTN_NO_SCALE, true, false, NULL, false},
    {LM_DEFECT_RMS_EPS_10X, true, false, NULL, false},
    {LM_DEFECT_SOFTMAX_NO_MAX, false, true, NULL, false},
    /* dense attention's kernel only (attention.c): attn=stream configurations compute right */
    {LM_DEFECT_GQA_INTERLEAVED, false, false, NULL, false},
    {LM_DEFECT_LOGITS_UNNORMED, true, false, NULL, false},
    {LM_DEFECT_HIST_DOUBLE_NEWEST, false, false, "sweep --spec only (test_spec)", false},
    {LM_DEFECT_HIST_NO_PROMPT, false, false, "sweep --spec only (test_spec)", false},
    {LM_DEFECT_ROLLBACK_KEEPS_ONE, false, false, "sweep --spec only (test_spec)", false},
    {LM_DEFECT_THREAD_SPLIT_SKIPS_ROW, false, false, NULL, true},
    {LM_DEFECT_STREAM_TILE_SKIPS_KEY, false, false, NULL, true},
    {LM_DEFECT_ROT_CONCAT_SLOT_ORDER, false, false, "needs rot= (rot_multiturn below)", false},
    {LM_DEFECT_F16_SUBNORMAL, false, false, "at model load (f16_subnormal below)", false},
    {LM_DEFECT_PREFIX_LAST_ROW_STALE, false, false, "needs prefix= (prefix_reuse below)", false},
    {LM_DEFECT_PREFIX_ROWS_SHIFTED, false, false, "needs prefix= (prefix_reuse below)", false},
    {LM_DEFECT_PREFIX_V_NEXT_LAYER, false, false, "needs prefix= (prefix_reuse below)", false},
    {LM_DEFECT_BATCH_KV_NEXT_ROWS, false, false, "needs batch= (batch below)", false},
    {LM_DEFECT_BATCH_LOGITS_LAST_ROW, false, false, "needs batch= (batch below)", false},
    {LM_DEFECT_BATCH_POS_OF_LAST, false, false, "needs batch= (batch below)", false},
    {LM_DEFECT_TP_RING_SKIPS_LAST, false, false, "needs tp= (tensor_parallel below)", false},
    {LM_DEFECT_TP_ROWS_MISALIGNED, false, false, "needs tp= (tensor_parallel below)", false},
    {LM_DEFECT_TP_COLS_SHIFTED, false, false, "needs tp= (tensor_parallel below)", false},
};
#define N_KNOWN (sizeof known / sizeof known[0])
#define N_ROWS ((size_t)LM_DEFECT_COUNT - 1) /* every defect: row k is defect k + 1 */

static const defect_case *known_case(lm_defect d)
{
    for (size_t i = 0; i < N_KNOWN; ++i)
        if (known[i].d == d)
            return &known[i];
    return NULL;
}

typedef struct cell {
    bool ran;
    bool refused;       /* the sweep refused to run (its error is the detection) */
    hx_class worst;     /* worst class over the configurations */
    size_t caught;      /* configurations classed DRIFT, FLIP or NONFINITE */
    size_t old_caught;  /* the same under the old default axes */
    bool path_moved;    /* the defective teacher path left the clean one */
    double e_ratio;     /* path kept: max over tensors of E(defective) / E(clean); else NaN */
    double r_min, r_med, r_max; /* configurations' worst err/E: smallest, median, largest */
    const char *unseen; /* why the defect cannot reach a compared tensor of this model, or NULL */
} cell;

/* One model's results, kept for the summary table. */
typedef struct model_result {
    const char *label;
    bool ran;
    size_t n_configs, n_old;
    size_t false_alarms;     /* clean sweep: configurations DRIFT, FLIP or NONFINITE */
    hx_class clean_worst;
    cell clean;              /* the clean sweep's err/E figures */
    cell d[N_ROWS];
    bool hot_ran;
    double max_logit;        /* largest layer-0 attention logit of the prompt (clean model) */
    float hot_scale;         /* the hot variant's Wq factor */
    size_t hot_false_alarms;
    hx_class hot_clean_worst;
    cell hot_clean;          /* the hot variant's clean err/E figures */
    cell hot;                /* softmax-no-max on the hot variant */
    double seconds;
} model_result;

#define N_MODELS 4
static model_result results[N_MODELS];

static int sweep_once(hx_sweep_result **out, const lm_model *m, const ref_model *rm,
                      const int32_t *prompt, uint32_t n_prompt, const hx_config *cfgs,
                      size_t n_cfgs, const char *cache, lm_err *err)
{
    /* jobs 2: the runs of a sweep are independent and their results identical for any jobs. */
    hx_sweep_params p = {.model = m, .ref = rm, .prompt = prompt, .n_prompt = n_prompt,
                         .n_gen = N_GEN, .configs = cfgs, .n_configs = n_cfgs,
                         .cache_dir = cache, .jobs = 2, .quiet = true, .time_once = true};
    return hx_sweep_run_all(out, &p, err);
}

static double ratio(double a, double b)
{
    return b > 0.0 ? a / b : (a > 0.0 ? (double)INFINITY : 1.0);
}

/* max over compared tensors of E(a) / E(b) (same shapes; NaN when they differ). */
static double envelope_ratio(const hx_envelope *a, const hx_envelope *b)
{
    if (a->n_layer != b->n_layer || a->n_pos != b->n_pos)
        return (double)NAN;
    double m = 0.0;
    for (uint32_t l = 0; l < a->n_layer; ++l) {
        m = fmax(m, ratio(a->k[l].e, b->k[l].e));
        m = fmax(m, ratio(a->v[l].e, b->v[l].e));
    }
    for (uint32_t p = 0; p < a->n_pos; ++p)
        m = fmax(m, ratio(a->logits[p].e, b->logits[p].e));
    return m;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Counts the configurations that fail and the worst class; into x (when not NULL) the
 * smallest, median and largest of the configurations' worst err/E (NaN ratios, from
 * nonfinite outputs, count as +Inf). */
static void fold(const hx_sweep_result *r, size_t *n_fail, hx_class *worst, cell *x)
{
    size_t n = r->report->n_configs;
    double *v = calloc(n ? n : 1, sizeof *v);
    *n_fail = 0;
    *worst = HX_EXACT;
    for (size_t i = 0; i < n; ++i) {
        const hx_config_report *c = &r->report->configs[i];
        *worst = hx_class_worst(*worst, c->cls);
        *n_fail += hx_class_fails(c->cls);
        if (v != NULL)
            v[i] = isnan(c->worst_ratio) ? (double)INFINITY : c->worst_ratio;
    }
    if (x != NULL && v != NULL && n > 0) {
        qsort(v, n, sizeof *v, cmp_double);
        x->r_min = v[0];
        x->r_med = v[n / 2];
        x->r_max = v[n - 1];
    }
    free(v);
}

/* The engine's threshold of that name (kvd_engine.h); fails the test when it is missing. */
static const lm_threshold *threshold(const char *name)
{
    const lm_threshold *t = lm_threshold_find(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    return t;
}

/* Why defect d cannot change any compared tensor (each layer's K and V, logits at chunk-final
 * rows) of a model with these hyperparameters on a prompt of n_prompt tokens, or NULL when it
 * can. */
static const char *unseen_reason(const lm_hparams *hp, uint32_t n_prompt, lm_defect d)
{
    if (d == LM_DEFECT_GQA_INTERLEAVED && hp->n_head == hp->n_head_kv)
        return "no GQA: h % n_kv == h / 1";
    if (d == LM_DEFECT_MASK_NEXT_TOKEN && hp->n_layer == 1)
        /* K and V are computed before attention; the only rows whose attention changes are
         * non-final rows of a chunk, and with one layer they reach no compared output. */
        return "1 layer: no compared output";
    if (d == LM_DEFECT_STREAM_TILE_SKIPS_KEY &&
        n_prompt + N_GEN < threshold("stream.key_tile")->value)
        return "prompt + generated within one key tile";
    return NULL;
}

/* Whether the report lists threshold `name` as not exercised. */
static bool unexercised(const hx_report *r, const char *name)
{
    for (uint32_t i = 0; i < r->n_unexercised; ++i)
        if (strncmp(r->unexercised[i], name, strlen(name)) == 0)
            return true;
    return false;
}

/* ---- the largest layer-0 attention logit, through the engine's probe ---- */


typedef struct qk_tape {
    uint32_t n, q_dim, kv_dim;
    float *q; /* [n][q_dim] layer 0, after RoPE */
    float *k; /* [n][kv_dim] layer 0, after RoPE */
} qk_tape;

static void qk_probe(void *user, uint32_t layer, const char *op, uint32_t pos0, uint32_t n,
                     const float *x, size_t row_elems)
{
    qk_tape *t = user;
    if (layer != 0 || pos0 + n > t->n)
        return;
    if (strcmp(op, "q") == 0 && row_elems == t->q_dim)
        memcpy(t->q + (size_t)pos0 * t->q_dim, x, (size_t)n * row_elems * sizeof *x);
    else if (strcmp(op, "k") == 0 && row_elems == t->kv_dim)
        memcpy(t->k + (size_t)pos0 * t->kv_dim, x, (size_t)n * row_elems * sizeof *x);
}

/* max over heads h and causal pairs j <= i of |q_i,h . k_j,g(h)| / sqrt(head_dim), in double;
 * -1 on failure. */
static double max_layer0_logit(const lm_model *m, const int32_t *prompt, uint32_t n)
{
    const lm_hparams *hp = &m->hp;
    qk_tape t = {n, hp->n_head * hp->head_dim, hp->n_head_kv * hp->head_dim, NULL, NULL};
    t.q = calloc((size_t)n * t.q_dim, sizeof *t.q);
    t.k = calloc((size_t)n * t.kv_dim, sizeof *t.k);
    lm_ctx *c = NULL;
    lm_err err = {0};
    double best = -1.0;
    const lm_ctx_params cp = {.backend = "naive", .n_threads = 1, .n_ctx = n};
    if (t.q && t.k && lm_ctx_create(&c, m, &cp, &err) == LM_OK) {
        lm_ctx_set_probe(c, qk_probe, &t);
        if (lm_forward(c, prompt, n, LM_LOGITS_NONE, NULL, &err) == LM_OK) {
            const uint32_t group = hp->n_head / hp->n_head_kv, hd = hp->head_dim;
            best = 0.0;
            for (uint32_t h = 0; h < hp->n_head; ++h)
                for (uint32_t i = 0; i < n; ++i)
                    for (uint32_t j = 0; j <= i; ++j) {
                        const float *q = t.q + (size_t)i * t.q_dim + (size_t)h * hd;
                        const float *k = t.k + (size_t)j * t.kv_dim + (size_t)(h / group) * hd;
                        double s = 0.0;
                        for (uint32_t e = 0; e < hd; ++e)
                            s += (double)q[e] * (double)k[e];
                        s = fabs(s) / sqrt((double)hd);
                        best = s > best ? s : best;
                    }
        }
    }
    lm_ctx_free(c);
    free(t.q);
    free(t.k);
    return best;
}

/* Scales layer 0's Wq by a power of two (exact) so that the largest layer-0 logit lands in
 * [128, 256), in both readings of the model (the engine's m, the reference's rm), and marks
 * the hash so no cache entry of the original is ever reused. The weights live in the models'
 * private malloc'd arenas, so the test may write them; the const on lm_layer and ref_layer only
 * promises that the engine and the reference will not. */
static float make_hot(lm_model *m, ref_model *rm, double max_logit)
{
    float f = 1.0f;
    while ((double)f * max_logit < 128.0)
        f *= 2.0f;
    const lm_hparams *hp = &m->hp;
    float *wq = (float *)(uintptr_t)m->layers[0].wq.f; /* [n_head * head_dim][n_embd] */
    float *rwq = (float *)(uintptr_t)rm->layers[0].wq; /* the same shape */
    for (size_t i = 0; i < (size_t)hp->n_head * hp->head_dim * hp->n_embd; ++i) {
        wq[i] *= f;
        rwq[i] *= f;
    }
    m->content_hash[0] ^= 0x5a;
    rm->content_hash[0] ^= 0x5a;
    m->n_weights = 0; /* no longer the file's weights: the readings are not compared */
    return f;
}

static void configs_of(hx_config **cfgs, size_t *n, const hx_axes *a)
{
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_axes_configs(cfgs, n, a, &err), LM_OK);
}

/* The default axes and the old default ones (before threads and attention were default axes). */
static const hx_axes new_axes = {0};
static const hx_axes old_axes = {.threads = "1", .attn = "default"};

/* Row k's defect, swept with both axis sets; x receives the results. */
static void run_defect(cell *x, const defect_case *dc, lm_defect d, const lm_model *m,
                       const ref_model *rm, const int32_t *prompt, uint32_t n_prompt,
                       const hx_config *cfgs,
                       size_t n_cfgs, const hx_config *old, size_t n_old, const char *cache,
                       const hx_sweep_result *clean)
{
    lm_err e2 = {0};
    hx_sweep_result *r = NULL;
    x->unseen = unseen_reason(&m->hp, n_prompt, d);
    lm_test_set_defect(d);
    int rc = sweep_once(&r, m, rm, prompt, n_prompt, cfgs, n_cfgs, cache, &e2);
    lm_test_set_defect(LM_DEFECT_NONE);
    x->ran = true;
    if (rc != LM_OK) {
        /* a refusal (e.g. the engine's weights disagree with the reference's reading) is a
         * detection; a known defect must run */
        x->refused = true;
        CU_ASSERT(dc == NULL);
        if (dc != NULL)
            fprintf(stderr, "\n  %s: sweep failed: %s\n", lm_defect_name(d), e2.msg);
        return;
    }
    fold(r, &x->caught, &x->worst, x);
    x->path_moved = memcmp(r->path, clean->path, N_GEN * sizeof *r->path) != 0;
    x->e_ratio = (double)NAN;
    if (!x->path_moved) {
        /* Same tokens: the MPFR reference is reused from the cache, untouched by the defect. */
        CU_ASSERT(r->ref_hit);
        x->e_ratio = envelope_ratio(r->env, clean->env);
    }
    hx_sweep_result_free(r);
    r = NULL;
    lm_test_set_defect(d);
    rc = sweep_once(&r, m, rm, prompt, n_prompt, old, n_old, cache, &e2);
    lm_test_set_defect(LM_DEFECT_NONE);
    CU_ASSERT(rc == LM_OK || dc == NULL);
    if (rc == LM_OK) {
        hx_class w;
        fold(r, &x->old_caught, &w, NULL);
    }
    hx_sweep_result_free(r);
    if (dc == NULL || dc->exact_math || x->unseen != NULL) {
        /* no expectation here; exact mathematics is judged on the hot variant; unseen: the
         * same compared mathematics on this model */
    } else if (dc->every ? x->caught != n_cfgs : x->caught == 0) {
        CU_FAIL("defect not caught as expected");
        fprintf(stderr, "\n  %s: %zu of %zu configurations caught\n", lm_defect_name(d),
                x->caught, n_cfgs);
    }
    if (dc != NULL && dc->new_axes && x->unseen == NULL)
        CU_ASSERT_EQUAL(x->old_caught, 0); /* only the new default axes reach it */
}

/* The hot variant and softmax without max subtraction (the model's weights are changed). */
static void run_hot(model_result *res, lm_model *m, ref_model *rm, const int32_t *prompt,
                    uint32_t n_prompt,
                    const hx_config *cfgs, size_t n_cfgs, const hx_config *old, size_t n_old,
                    const char *label)
{
    lm_err err = {0};
    char cache[1200];
    hx_sweep_result *clean = NULL, *r = NULL;
    res->max_logit = max_layer0_logit(m, prompt, n_prompt);
    CU_ASSERT_FATAL(res->max_logit > 0.0);
    res->hot_scale = make_hot(m, rm, res->max_logit);
    snprintf(cache, sizeof cache, "%s/defects-cache-%s-hot", tu_tmpdir(), label);
    int rc = sweep_once(&clean, m, rm, prompt, n_prompt, cfgs, n_cfgs, cache, &err);
    CU_ASSERT_EQUAL(rc, LM_OK);
    if (rc == LM_OK) {
        fold(clean, &res->hot_false_alarms, &res->hot_clean_worst, &res->hot_clean);
        CU_ASSERT_EQUAL(res->hot_false_alarms, 0);
        lm_test_set_defect(LM_DEFECT_SOFTMAX_NO_MAX);
        rc = sweep_once(&r, m, rm, prompt, n_prompt, cfgs, n_cfgs, cache, &err);
        lm_test_set_defect(LM_DEFECT_NONE);
        CU_ASSERT_EQUAL(rc, LM_OK);
        if (rc == LM_OK) {
            res->hot_ran = res->hot.ran = true;
            res->hot.e_ratio = (double)NAN; /* another model: no clean envelope to compare */
            fold(r, &res->hot.caught, &res->hot.worst, &res->hot);
            /* the defect sits in dense attention's softmax (attention.c): every dense
             * configuration overflows, the streaming ones compute right */
            size_t n_dense = 0;
            for (size_t i = 0; i < n_cfgs; ++i)
                n_dense += cfgs[i].attn != HX_ATTN_STREAM;
            CU_ASSERT_EQUAL(res->hot.caught, n_dense);
            CU_ASSERT_EQUAL(res->hot.worst, HX_NONFINITE);
        }
        hx_sweep_result_free(r);
        r = NULL;
        lm_test_set_defect(LM_DEFECT_SOFTMAX_NO_MAX);
        rc = sweep_once(&r, m, rm, prompt, n_prompt, old, n_old, cache, &err);
        lm_test_set_defect(LM_DEFECT_NONE);
        CU_ASSERT_EQUAL(rc, LM_OK);
        if (rc == LM_OK) {
            hx_class w;
            fold(r, &res->hot.old_caught, &w, NULL);
        }
    }
    if (rc != LM_OK)
        fprintf(stderr, "\n  %s hot variant: %s\n", label, err.msg);
    hx_sweep_result_free(r);
    hx_sweep_result_free(clean);
}

/* prompt: token ids, or NULL to tokenize prompt_text; hot: also the hot variant. */
static void run_model(model_result *res, const char *label, const char *path,
                      const int32_t *ids, uint32_t n_ids, bool hot)
{
    lm_err err = {0};
    lm_model *m = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    hx_config *cfgs = NULL, *old = NULL;
    size_t n_cfgs = 0, n_old = 0;
    hx_sweep_result *clean = NULL;
    res->label = label;
    /* the hot variant writes the weights: float32 in the arena, not the read-only file */
    CU_ASSERT_EQUAL_FATAL(lm_model_load_mode(&m, path, hot ? LM_WEIGHTS_ARENA : LM_WEIGHTS_FILE,
                                             &err), LM_OK);
    ref_model *rm = tf_ref_open(m);
    if (ids != NULL) {
        prompt = malloc(n_ids * sizeof *prompt);
        CU_ASSERT_FATAL(prompt != NULL);
        memcpy(prompt, ids, n_ids * sizeof *prompt);
        n_prompt = n_ids;
    } else {
        CU_ASSERT_EQUAL_FATAL(lm_tokenize(m->vocab, prompt_text, strlen(prompt_text), true,
                                          &prompt, &n_prompt, &err), LM_OK);
    }
    /* Boundaries: the prompt must be longer than the largest finite step below 16, and one
     * chunk of it long enough for the thread split. */
    CU_ASSERT_FATAL(n_prompt > 8);
    CU_ASSERT_FATAL(n_prompt >= threshold("threads.row_split")->value);
    configs_of(&cfgs, &n_cfgs, &new_axes);
    configs_of(&old, &n_old, &old_axes);
    res->n_configs = n_cfgs;
    res->n_old = n_old;
    char cache[1200];
    snprintf(cache, sizeof cache, "%s/defects-cache-%s", tu_tmpdir(), label);
    double t0 = lm_now_s();

    lm_test_set_defect(LM_DEFECT_NONE);
    lm_test_spare_backend(NULL); /* nothing spared: every run carries the defect */
    int rc = sweep_once(&clean, m, rm, prompt, (uint32_t)n_prompt, cfgs, n_cfgs, cache, &err);
    CU_ASSERT_EQUAL(rc, LM_OK);
    if (rc != LM_OK) {
        fprintf(stderr, "\n  %s: clean sweep failed: %s\n", label, err.msg);
        goto done;
    }
    fold(clean, &res->false_alarms, &res->clean_worst, &res->clean);
    res->clean.ran = true;
    for (size_t i = 0; i < n_cfgs; ++i) {
        const hx_config_report *c = &clean->report->configs[i];
        if (hx_class_fails(c->cls))
            fprintf(stderr, "\n  FALSE ALARM %s %s: %s %s", label, c->config,
                    hx_class_name(c->cls), c->reason);
    }
    CU_ASSERT_EQUAL(res->false_alarms, 0);
    /* The report says which thresholds the default sweep left unreached. */
    CU_ASSERT_EQUAL(unexercised(clean->report, "stream.key_tile"),
                    n_prompt + N_GEN < threshold("stream.key_tile")->value);
    CU_ASSERT(!unexercised(clean->report, "threads.row_split"));

    for (size_t k = 0; k < N_ROWS; ++k) {
        const lm_defect d = (lm_defect)(k + 1);
        const defect_case *dc = known_case(d);
        if (dc != NULL && dc->not_swept != NULL)
            continue;
        run_defect(&res->d[k], dc, d, m, rm, prompt, (uint32_t)n_prompt, cfgs, n_cfgs, old, n_old,
                   cache, clean);
    }
    if (hot)
        run_hot(res, m, rm, prompt, (uint32_t)n_prompt, cfgs, n_cfgs, old, n_old, label);
    res->ran = true;
done:
    lm_test_set_defect(LM_DEFECT_NONE);
    res->seconds = lm_now_s() - t0;
    hx_sweep_result_free(clean);
    free(cfgs);
    free(old);
    free(prompt);
    lm_model_free(m);
    ref_model_free(rm);
}

static void test_defects_stories260k(void)
{
    const char *path = tu_model_path("stories260K.gguf");
    if (path == NULL)
        return; /* SKIP printed by tu_model_path */
    run_model(&results[0], "stories260K", path, NULL, 0, true);
}

static void test_defects_synth_tiny(void)
{
    char path[1200];
    lm_err err = {0};
    snprintf(path, sizeof path, "%s/defects-tiny.gguf", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 11, LM_TYPE_F32, &err), LM_OK);
    run_model(&results[1], "synth:tiny", path, NULL, 0, true);
}

static void test_defects_llama2_tiny_random(void)
{
    const char *path = tu_model_path("llama-2-tiny-random.gguf");
    if (path == NULL)
        return; /* SKIP printed by tu_model_path */
    run_model(&results[2], "llama-2-tiny-random", path, NULL, 0, true);
}

/* A prompt past the streaming attention's key tile (LONG_PROMPT + N_GEN > the tile), on the
 * one-layer synthetic tiny-draft model so that the 127-bit reference of 274 positions stays
 * cheap: fixed pseudo-random ids below the vocabulary. */
static void test_defects_long_prompt(void)
{
    char path[1200];
    lm_err err = {0};
    snprintf(path, sizeof path, "%s/defects-tiny-draft.gguf", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny-draft", 11, LM_TYPE_F32, &err), LM_OK);
    CU_ASSERT_FATAL(LONG_PROMPT + N_GEN >= threshold("stream.key_tile")->value);
    int32_t ids[LONG_PROMPT];
    ids[0] = 1;
    for (uint32_t i = 1; i < LONG_PROMPT; ++i)
        ids[i] = (int32_t)(3 + (i * 37u) % 250u);
    run_model(&results[3], "tiny-draft 270 tok", path, ids, LONG_PROMPT, false);
}

/* The switch reaches exactly its defect and spares the named backend (the release library
 * has no switch at all: LM_DEFECT_ON is the constant 0 there). */
static void test_defects_switch_scoping(void)
{
    lm_test_set_defect(LM_DEFECT_RMS_EPS_10X);
    lm_test_spare_backend("naive-sr");
    CU_ASSERT(lm_test_defect_on("blas", LM_DEFECT_RMS_EPS_10X));
    CU_ASSERT(lm_test_defect_on("naive", LM_DEFECT_RMS_EPS_10X));
    CU_ASSERT(!lm_test_defect_on("naive-sr", LM_DEFECT_RMS_EPS_10X));
    CU_ASSERT(!lm_test_defect_on("blas", LM_DEFECT_ATTN_NO_SCALE));
    lm_test_spare_backend(NULL);
    CU_ASSERT(lm_test_defect_on("naive-sr", LM_DEFECT_RMS_EPS_10X));
    lm_test_set_defect(LM_DEFECT_NONE);
    CU_ASSERT(!lm_test_defect_on("blas", LM_DEFECT_NONE));
    CU_ASSERT(!lm_test_defect_on("blas", LM_DEFECT_RMS_EPS_10X));
    CU_ASSERT_STRING_EQUAL(lm_defect_name(LM_DEFECT_SOFTMAX_NO_MAX), "softmax-no-max");
    CU_ASSERT_PTR_NULL(lm_defect_name(LM_DEFECT_COUNT));
}

static void print_cell(const model_result *r, const cell *x, lm_defect d)
{
    char s[64] = "SKIPPED";
    const defect_case *dc = known_case(d);
    if (dc != NULL && dc->not_swept != NULL)
        snprintf(s, sizeof s, "- %s", dc->not_swept);
    else if (r->ran && x->refused)
        snprintf(s, sizeof s, "refused to run");
    else if (r->ran && x->ran && x->unseen != NULL)
        snprintf(s, sizeof s, "%s %zu/%zu (%s)", hx_class_name(x->worst), x->caught,
                 r->n_configs, x->unseen);
    else if (r->ran && x->ran)
        snprintf(s, sizeof s, "%s %zu/%zu, old %zu/%zu", hx_class_name(x->worst), x->caught,
                 r->n_configs, x->old_caught, r->n_old);
    else if (r->ran)
        snprintf(s, sizeof s, "(sweep failed)");
    fprintf(stderr, " | %-36s", s);
}

static void print_ratios(const model_result *r, const cell *x)
{
    char s[64] = "-";
    if (r->ran && x->ran && !x->refused)
        snprintf(s, sizeof s, "%.3g / %.3g / %.3g", x->r_min, x->r_med, x->r_max);
    fprintf(stderr, " | %-36s", s);
}

/* The table the closing note quotes: defect x model -> worst class (configurations failing /
 * total) under the default axes and under the old ones; the catch rates; the worst legitimate
 * err/E. */
static void test_defects_summary(void)
{
    bool any = false;
    for (size_t j = 0; j < N_MODELS; ++j)
        any |= results[j].ran;
    CU_ASSERT(any); /* the synthetic models always run */
    fprintf(stderr, "\n\n  defect detection by the default sweep (naive,blas x steps %s x threads "
                    "%s (naive: 1) x attn %s; n_gen %u) and by the old default (threads 1, attn "
                    "default): worst class, configurations DRIFT/FLIP/NONFINITE of all\n",
            HX_AXES_DEFAULT_STEPS, HX_AXES_DEFAULT_THREADS, HX_AXES_DEFAULT_ATTN, N_GEN);
    fprintf(stderr, "  %-24s", "defect");
    for (size_t j = 0; j < N_MODELS; ++j)
        fprintf(stderr, " | %-36s", results[j].label ? results[j].label : "(skipped)");
    fprintf(stderr, "\n");
    size_t caught_new = 0, caught_old = 0, n_def = 0, n_swept = 0, cells = 0, cells_new = 0,
           cells_old = 0;
    for (size_t k = 0; k < N_ROWS; ++k) {
        const lm_defect d = (lm_defect)(k + 1);
        fprintf(stderr, "  %-24s", lm_defect_name(d));
        bool cn = false, co = false;
        for (size_t j = 0; j < N_MODELS; ++j) {
            const cell *x = &results[j].d[k];
            print_cell(&results[j], x, d);
            if (!results[j].ran || !x->ran || x->unseen != NULL)
                continue;
            ++cells;
            const bool n1 = x->refused || x->caught > 0, o1 = x->refused || x->old_caught > 0;
            cells_new += n1;
            cells_old += o1;
            cn |= n1;
            co |= o1;
        }
        if (d == LM_DEFECT_SOFTMAX_NO_MAX)
            for (size_t j = 0; j < N_MODELS; ++j) {
                cn |= results[j].hot_ran && results[j].hot.caught > 0;
                co |= results[j].hot_ran && results[j].hot.old_caught > 0;
            }
        ++n_def;
        n_swept += known_case(d) == NULL || known_case(d)->not_swept == NULL;
        caught_new += cn;
        caught_old += co;
        fprintf(stderr, "\n");
    }
    fprintf(stderr, "  %-24s", "softmax-no-max, hot L0");
    for (size_t j = 0; j < N_MODELS; ++j)
        if (results[j].hot_ran)
            print_cell(&results[j], &results[j].hot, LM_DEFECT_SOFTMAX_NO_MAX);
        else
            fprintf(stderr, " | %-36s", "-");
    double worst_legit = 0.0;
    fprintf(stderr, "\n  %-24s", "none (false alarms)");
    for (size_t j = 0; j < N_MODELS; ++j) {
        char s[64] = "SKIPPED";
        if (results[j].ran) {
            snprintf(s, sizeof s, "%zu/%zu (worst %s)", results[j].false_alarms,
                     results[j].n_configs, hx_class_name(results[j].clean_worst));
            worst_legit = fmax(worst_legit, results[j].clean.r_max);
        }
        fprintf(stderr, " | %-36s", s);
    }
    fprintf(stderr, "\n  %-24s", "none, hot L0");
    for (size_t j = 0; j < N_MODELS; ++j) {
        char s[64] = "-";
        if (results[j].hot_ran) {
            snprintf(s, sizeof s, "%zu/%zu (worst %s)", results[j].hot_false_alarms,
                     results[j].n_configs, hx_class_name(results[j].hot_clean_worst));
            worst_legit = fmax(worst_legit, results[j].hot_clean.r_max);
        }
        fprintf(stderr, " | %-36s", s);
    }
    fprintf(stderr, "\n\n  configurations' worst err/E, default sweep (min / median / max; inf: "
                    "nonfinite)\n");
    fprintf(stderr, "  %-24s", "none (legitimate)");
    for (size_t j = 0; j < N_MODELS; ++j)
        print_ratios(&results[j], &results[j].clean);
    for (size_t k = 0; k < N_ROWS; ++k) {
        const defect_case *dc = known_case((lm_defect)(k + 1));
        if (dc != NULL && dc->not_swept != NULL)
            continue;
        fprintf(stderr, "\n  %-24s", lm_defect_name((lm_defect)(k + 1)));
        for (size_t j = 0; j < N_MODELS; ++j)
            print_ratios(&results[j], &results[j].d[k]);
    }
    fprintf(stderr, "\n\n  catch rate in this matrix: default sweep %zu of %zu defects (%zu swept "
                    "here; %zu of %zu model cells where the defect reaches a compared tensor); old "
                    "default %zu of %zu (%zu of %zu cells); worst legitimate err/E %.3g",
            caught_new, n_def, n_swept, cells_new, cells, caught_old, n_def, cells_old, cells,
            worst_legit);
    fprintf(stderr, "\n  largest layer-0 attention logit (hot: x Wq factor):");
    for (size_t j = 0; j < N_MODELS; ++j)
        if (results[j].hot_ran)
            fprintf(stderr, " %s %.3g (x%g)", results[j].label, results[j].max_logit,
                    (double)results[j].hot_scale);
    fprintf(stderr, "\n  wall seconds:");
    for (size_t j = 0; j < N_MODELS; ++j)
        if (results[j].ran)
            fprintf(stderr, " %s %.1f", results[j].label, results[j].seconds);
    fprintf(stderr, "\n  ");
}

/* ---- defects that need the two-turn schedule, a reference-side envelope, or the reference's
 * own dequantization ---- */

/* One sweep of cfgs with defect d (LM_DEFECT_NONE: clean); *caught = configurations failing,
 * *r_min / *r_max = the smallest / largest worst err/E among them (NaN when none). Returns the
 * sweep's status; err receives its error. */
static int sweep_defect(lm_defect d, const lm_model *m, const int32_t *prompt, uint32_t n_prompt,
                        uint32_t n_gen, const hx_config *cfgs, size_t n_cfgs, const char *cache,
                        bool engine_envelope, hx_sweep_result **keep, size_t *caught,
                        double *r_min, double *r_max, lm_err *err)
{
    ref_model *rm = tf_ref_open(m); /* the reference's own reading of m's file */
    hx_sweep_params p = {.model = m, .ref = rm, .prompt = prompt, .n_prompt = n_prompt,
                         .n_gen = n_gen, .configs = cfgs, .n_configs = n_cfgs,
                         .cache_dir = cache, .jobs = 2, .quiet = true,
                         .engine_envelope = engine_envelope, .time_once = true};
    hx_sweep_result *r = NULL;
    lm_test_spare_backend(NULL);
    lm_test_set_defect(d);
    int rc = hx_sweep_run_all(&r, &p, err);
    lm_test_set_defect(LM_DEFECT_NONE);
    ref_model_free(rm);
    *caught = 0;
    *r_min = *r_max = (double)NAN;
    for (size_t i = 0; rc == LM_OK && i < n_cfgs; ++i) {
        const hx_config_report *c = &r->report->configs[i];
        if (!hx_class_fails(c->cls))
            continue;
        double x = isnan(c->worst_ratio) ? (double)INFINITY : c->worst_ratio;
        *r_min = *caught == 0 ? x : fmin(*r_min, x);
        *r_max = *caught == 0 ? x : fmax(*r_max, x);
        ++*caught;
        if (d == LM_DEFECT_NONE)
            fprintf(stderr, "\n  FALSE ALARM %s: %s %s", c->config, hx_class_name(c->cls),
                    c->reason);
    }
    if (keep != NULL)
        *keep = r;
    else
        hx_sweep_result_free(r);
    return rc;
}

/* Rows of the summary printed by test_defects_sched_summary. */
typedef struct sched_row {
    const char *what, *model;
    bool ran;
    size_t n_old, caught_old, n_new, caught_new;
    double r_min, r_max; /* err/E over the configurations caught by the new default */
    double e_ratio;      /* precision defect: E(engine envelope, defect) / E(clean); else NaN */
    char note[400];
} sched_row;
#define N_SCHED_ROWS 4
static sched_row sched_rows[N_SCHED_ROWS];

/* The rotating case's configurations without and with the schedule axis (the case file's
 * default turn). */
static void rot_case_configs(hx_case **cs, hx_config **old_cfgs, size_t *n_old,
                             hx_config **new_cfgs, size_t *n_new)
{
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_case_load(cs, "cases/rotating.case", &err), LM_OK);
    CU_ASSERT_FATAL((*cs)->turn == HX_TURN_DEFAULT); /* the key is absent: the default applies */
    CU_ASSERT_EQUAL_FATAL(hx_case_configs(new_cfgs, n_new, *cs, &err), LM_OK);
    const uint32_t turn = (*cs)->turn;
    (*cs)->turn = 0;
    CU_ASSERT_EQUAL_FATAL(hx_case_configs(old_cfgs, n_old, *cs, &err), LM_OK);
    (*cs)->turn = turn;
}

/* A rotating-cache bug that only a multi-token chunk after a wrapped ring shows: the shipped
 * rotating case (max_size 8, keep 2, 20-token prompt), swept with the configurations the case
 * gave before the schedule axis existed and with its default now (each configuration with
 * multi-token chunks followed by its two-turn sibling). The old default never puts a chunk
 * after single-token steps, so it cannot see the defect; the new one must, and neither may
 * raise a false alarm. */
static void test_defects_rot_multiturn(void)
{
    sched_row *row = &sched_rows[0];
    row->what = "rot-concat-slot-order";
    row->model = "rotating.case";
    row->e_ratio = (double)NAN;
    hx_case *cs = NULL;
    hx_config *oldc = NULL, *newc = NULL;
    size_t n_old = 0, n_new = 0;
    rot_case_configs(&cs, &oldc, &n_old, &newc, &n_new);
    CU_ASSERT_FATAL(n_new > n_old);
    char path[1200], cache[1200];
    lm_err err = {0};
    snprintf(path, sizeof path, "%s/rot-case.gguf", tu_tmpdir());
    snprintf(cache, sizeof cache, "%s/defects-cache-rot-case", tu_tmpdir());
    CU_ASSERT_FATAL(cs->model.synth);
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, cs->model.preset, cs->model.seed, LM_TYPE_F32,
                                         &err), LM_OK);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    size_t fa = 0, fa_old = 0;
    double a, b;
    CU_ASSERT_EQUAL(sweep_defect(LM_DEFECT_NONE, m, cs->tokens, cs->n_tokens, cs->n_gen, newc,
                                 n_new, cache, false, NULL, &fa, &a, &b, &err), LM_OK);
    CU_ASSERT_EQUAL(fa, 0);
    CU_ASSERT_EQUAL(sweep_defect(LM_DEFECT_ROT_CONCAT_SLOT_ORDER, m, cs->tokens, cs->n_tokens,
                                 cs->n_gen, oldc, n_old, cache, false, NULL, &row->caught_old, &a,
                                 &b, &err), LM_OK);
    CU_ASSERT_EQUAL(row->caught_old, 0); /* the old default never sees it */
    hx_sweep_result *r = NULL;
    CU_ASSERT_EQUAL(sweep_defect(LM_DEFECT_ROT_CONCAT_SLOT_ORDER, m, cs->tokens, cs->n_tokens,
                                 cs->n_gen, newc, n_new, cache, false, &r, &row->caught_new,
                                 &row->r_min, &row->r_max, &err), LM_OK);
    CU_ASSERT(row->caught_new >= 1);
    size_t k = 0;
    for (size_t i = 0; r != NULL && i < n_new; ++i) {
        const hx_config_report *c = &r->report->configs[i];
        /* only two-turn rotating configurations can carry it */
        if (hx_class_fails(c->cls)) {
            CU_ASSERT(newc[i].turn != 0 && newc[i].rot_max != 0);
            if (k == 0)
                snprintf(row->note, sizeof row->note, "e.g. %s %s", c->config,
                         hx_class_name(c->cls));
            ++k;
        }
    }
    row->n_old = n_old;
    row->n_new = n_new;
    row->ran = true;
    (void)fa_old;
    hx_sweep_result_free(r);
    lm_model_free(m);
    free(oldc);
    free(newc);
    hx_case_free(cs);
}

/* A float16 KV cache: a precision defect in code every engine run shares. With the envelope
 * measured by the reference's own float32 SR model it is caught by every configuration with
 * err/E >> 1; the table also shows how much it widens an envelope measured by the engine's
 * naive-sr runs (which would carry it). Default steps and backends, the schedule axis on. */
static void test_defects_kv_f16(void)
{
    sched_row *row = &sched_rows[1];
    row->what = "kv-f16";
    row->model = "synth:tiny";
    char path[1200], cache[1200];
    lm_err err = {0};
    snprintf(path, sizeof path, "%s/kvf16-tiny.gguf", tu_tmpdir());
    snprintf(cache, sizeof cache, "%s/defects-cache-kvf16", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 11, LM_TYPE_F32, &err), LM_OK);
    lm_model *m = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_tokenize(m->vocab, prompt_text, strlen(prompt_text), true, &prompt,
                                      &n_prompt, &err), LM_OK);
    static const char backends[2][16] = {"naive", "blas"};
    static const uint32_t steps[] = {1, 2, 3, 5, 8, 16, 32, 64, 0};
    hx_config *cfgs = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(hx_sweep_cross(&cfgs, &n, backends, 2, steps, 9, NULL, 0, NULL, 0,
                                         &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_config_add_turns(&cfgs, &n, HX_TURN_DEFAULT, &err), LM_OK);
    size_t fa = 0;
    double a, b;
    hx_sweep_result *clean = NULL, *eng_clean = NULL, *eng_def = NULL;
    CU_ASSERT_EQUAL(sweep_defect(LM_DEFECT_NONE, m, prompt, (uint32_t)n_prompt, N_GEN, cfgs, n,
                                 cache, false, &clean, &fa, &a, &b, &err), LM_OK);
    CU_ASSERT_EQUAL(fa, 0);
    CU_ASSERT_EQUAL(sweep_defect(LM_DEFECT_KV_F16, m, prompt, (uint32_t)n_prompt, N_GEN, cfgs, n,
                                 cache, false, NULL, &row->caught_new, &row->r_min, &row->r_max,
                                 &err), LM_OK);
    CU_ASSERT_EQUAL(row->caught_new, n);
    /* A wide margin: float16 storage moves K and V by ~2^-11 relative, the SR envelope of
     * float32 arithmetic is a few 2^-24; 10 is far below the expected ratio and far above 1. */
    CU_ASSERT(row->r_min > 10.0);
    /* The same defect seen by an envelope of engine runs: how much wider it gets. */
    size_t c_eng = 0;
    CU_ASSERT_EQUAL(sweep_defect(LM_DEFECT_NONE, m, prompt, (uint32_t)n_prompt, N_GEN, cfgs, n,
                                 cache, true, &eng_clean, &fa, &a, &b, &err), LM_OK);
    CU_ASSERT_EQUAL(sweep_defect(LM_DEFECT_KV_F16, m, prompt, (uint32_t)n_prompt, N_GEN, cfgs, n,
                                 cache, true, &eng_def, &c_eng, &a, &b, &err), LM_OK);
    row->e_ratio = eng_clean && eng_def ? envelope_ratio(eng_def->env, eng_clean->env) : (double)NAN;
    CU_ASSERT(row->e_ratio > 10.0); /* the engine's own runs carry the defect into E */
    snprintf(row->note, sizeof row->note, "engine-run envelope: %zu/%zu caught, min err/E %.3g",
             c_eng, n, a);
    row->n_old = n;
    row->caught_old = row->caught_new;
    row->n_new = n;
    row->ran = true;
    hx_sweep_result_free(clean);
    hx_sweep_result_free(eng_clean);
    hx_sweep_result_free(eng_def);
    free(cfgs);
    free(prompt);
    lm_model_free(m);
}

/* float16 subnormals decoded at half their value by the engine's loader: a defect that the
 * engine, an engine-run envelope and a reference sharing the engine's loader would all carry.
 * The reference dequantizes the file itself, so the sweep stops with an error naming the
 * tensor, the element and both values (LM_E_DISAGREE: exit 1, a finding, not bad input): before the reference is computed, and again when the
 * reference comes from the cache (the clean sweep stored it). The model: the synthetic tiny
 * preset stored as F16 (its small weights include float16 subnormals; asserted). */
static void test_defects_f16_subnormal(void)
{
    sched_row *row = &sched_rows[2];
    row->what = "f16-subnormal";
    row->model = "synth:tiny F16";
    row->e_ratio = (double)NAN;
    row->r_min = row->r_max = (double)NAN;
    char path[1200], cache[1200];
    lm_err err = {0};
    snprintf(path, sizeof path, "%s/f16sub-tiny.gguf", tu_tmpdir());
    snprintf(cache, sizeof cache, "%s/defects-cache-f16sub", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 11, LM_TYPE_F16, &err), LM_OK);
    lm_model *m = NULL, *bad = NULL;
    int32_t *prompt = NULL;
    size_t n_prompt = 0;
    /* the defect is in the f16 decoder, which the arena runs once at load (with the weights
     * kept as F16 it would run inside the products, after the switch is off again) */
    CU_ASSERT_EQUAL_FATAL(lm_model_load_mode(&m, path, LM_WEIGHTS_ARENA, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_tokenize(m->vocab, prompt_text, strlen(prompt_text), true, &prompt,
                                      &n_prompt, &err), LM_OK);
    lm_test_set_defect(LM_DEFECT_F16_SUBNORMAL);
    int rc = lm_model_load_mode(&bad, path, LM_WEIGHTS_ARENA, &err);
    lm_test_set_defect(LM_DEFECT_NONE);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    /* The defect changed some weights: the file has float16 subnormals. */
    size_t n_diff = 0;
    for (uint32_t i = 0; i < m->n_weights; ++i)
        for (uint64_t j = 0; j < m->weights[i].n_elem; ++j)
            n_diff += m->weights[i].w.f[j] != bad->weights[i].w.f[j];
    CU_ASSERT_FATAL(n_diff > 0);
    static const char backends[2][16] = {"naive", "blas"};
    static const uint32_t steps[] = {1, 8, 0};
    hx_config *cfgs = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(hx_sweep_cross(&cfgs, &n, backends, 2, steps, 3, NULL, 0, NULL, 0,
                                         &err), LM_OK);
    size_t fa = 0;
    double a, b;
    lm_err e2 = {0};
    /* no cache entry yet, then with the clean sweep's entry in the cache */
    for (int pass = 0; pass < 2; ++pass) {
        if (pass == 1) {
            CU_ASSERT_EQUAL(sweep_defect(LM_DEFECT_NONE, m, prompt, (uint32_t)n_prompt, N_GEN,
                                         cfgs, n, cache, false, NULL, &fa, &a, &b, &err), LM_OK);
            CU_ASSERT_EQUAL(fa, 0);
        }
        memset(&e2, 0, sizeof e2);
        rc = sweep_defect(LM_DEFECT_NONE, bad, prompt, (uint32_t)n_prompt, N_GEN, cfgs, n,
                          pass == 0 ? cache : cache, false, NULL, &fa, &a, &b, &e2);
        CU_ASSERT_EQUAL(rc, LM_E_DISAGREE);
        CU_ASSERT_EQUAL(lm_status_exit_code(rc), 1); /* a finding, not bad input (2) */
        CU_ASSERT_PTR_NOT_NULL(strstr(e2.msg, "the reference's dequantization gives"));
        CU_ASSERT_PTR_NOT_NULL(strstr(e2.msg, "F16"));
    }
    snprintf(row->note, sizeof row->note, "%zu weights differ; sweep error: %.120s", n_diff,
             e2.msg);
    row->n_old = row->n_new = n;
    row->caught_old = row->caught_new = rc == LM_E_DISAGREE ? n : 0;
    row->ran = true;
    free(cfgs);
    free(prompt);
    lm_model_free(bad);
    lm_model_free(m);
}

static void test_defects_sched_summary(void)
{
    fprintf(stderr, "\n\n  defect | model | old default: caught/configs | new default: caught/"
                    "configs | err/E min..max | E widening (engine envelope) | note\n");
    for (size_t i = 0; i < N_SCHED_ROWS; ++i) {
        const sched_row *r = &sched_rows[i];
        if (r->what == NULL)
            continue;
        if (!r->ran) {
            fprintf(stderr, "  %s | %s | (did not run)\n", r->what, r->model);
            continue;
        }
        fprintf(stderr, "  %s | %s | %zu/%zu | %zu/%zu | %.3g..%.3g | %.3g | %s\n", r->what,
                r->model, r->caught_old, r->n_old, r->caught_new, r->n_new, r->r_min, r->r_max,
                r->e_ratio, r->note);
    }
    fprintf(stderr, "  ");
}

/* Defects ds[n_ds] that only one axis reaches, swept with axes over naive, blas and det on the
 * synthetic tiny model and stories260K (when present): clean, no configuration fails; with
 * each defect, some configuration that sets the axis fails on every model and none that does
 * not (is_plain) does: the defect lives only on that path, so the same sweep without the axis
 * cannot see it. */
static void sweep_axis_defects(const char *what, const hx_axes *axes, const lm_defect *ds,
                               size_t n_ds, bool (*is_plain)(const hx_config *c))
{
    char tiny[1200], cache[1200];
    lm_err err = {0};
    snprintf(tiny, sizeof tiny, "%s/%s-tiny.gguf", tu_tmpdir(), what);
    snprintf(cache, sizeof cache, "%s/defects-cache-%s", tu_tmpdir(), what);
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(tiny, "tiny", 13, LM_TYPE_F32, &err), LM_OK);
    const char *paths[2] = {tiny, tu_model_path("stories260K.gguf")};
    hx_config *cfgs = NULL;
    size_t n = 0, n_plain = 0;
    configs_of(&cfgs, &n, axes);
    for (size_t i = 0; i < n; ++i)
        n_plain += is_plain(&cfgs[i]);
    fprintf(stderr, "\n  %s defects (%zu configurations, %zu without the axis):", what, n, n_plain);
    for (size_t mi = 0; mi < 2; ++mi) {
        if (paths[mi] == NULL)
            continue;
        lm_model *m = NULL;
        int32_t *prompt = NULL;
        size_t n_prompt = 0;
        CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, paths[mi], &err), LM_OK);
        CU_ASSERT_EQUAL_FATAL(lm_tokenize(m->vocab, prompt_text, strlen(prompt_text), true,
                                          &prompt, &n_prompt, &err), LM_OK);
        size_t caught = 0;
        double a, b;
        CU_ASSERT_EQUAL(sweep_defect(LM_DEFECT_NONE, m, prompt, (uint32_t)n_prompt, N_GEN, cfgs,
                                     n, cache, false, NULL, &caught, &a, &b, &err), LM_OK);
        CU_ASSERT_EQUAL(caught, 0);
        for (size_t k = 0; k < n_ds; ++k) {
            hx_sweep_result *r = NULL;
            CU_ASSERT_EQUAL_FATAL(sweep_defect(ds[k], m, prompt, (uint32_t)n_prompt, N_GEN, cfgs,
                                               n, cache, false, &r, &caught, &a, &b, &err),
                                  LM_OK);
            size_t plain_failing = 0;
            for (size_t i = 0; i < n; ++i)
                plain_failing += is_plain(&cfgs[i]) && hx_class_fails(r->report->configs[i].cls);
            fprintf(stderr, "\n    %-12s %-24s %zu of %zu caught, smallest err/E %.3g",
                    mi == 0 ? "synth:tiny" : "stories260K", lm_defect_name(ds[k]), caught, n, a);
            CU_ASSERT(caught > 0);
            CU_ASSERT_EQUAL(plain_failing, 0);
            hx_sweep_result_free(r);
        }
        free(prompt);
        lm_model_free(m);
    }
    fprintf(stderr, "\n  ");
    free(cfgs);
}

static bool no_prefix(const hx_config *c)
{
    return c->prefix == 0;
}

static bool alone(const hx_config *c)
{
    return c->batch < 2;
}

static bool one_device(const hx_config *c)
{
    return c->tp < 2;
}

/* The prefix-cache defects of lm_ctx_adopt_prefix (a copy one row short, written one slot
 * late, V rows of the next layer), modelled on prefix-caching bugs of serving stacks, swept
 * with the prefix axis: none, a prefix chunked like the rest, a prefix chunked by 2. */
static void test_defects_prefix_reuse(void)
{
    static const lm_defect ds[] = {LM_DEFECT_PREFIX_LAST_ROW_STALE, LM_DEFECT_PREFIX_ROWS_SHIFTED,
                                   LM_DEFECT_PREFIX_V_NEXT_LAYER};
    const hx_axes axes = {.steps = "1,4,full", .backends = "naive,blas,det", .threads = "1",
                          .attn = "default", .prefix = "none,5,5:2"};
    sweep_axis_defects("prefix", &axes, ds, 3, no_prefix);
}

/* The batched-call defects of lm_forward_batch (K/V rows from the next sequence of the call,
 * the LAST logits from the call's last row, every sequence at the last one's position),
 * modelled on slot-mapping, logits-index and positions bugs of continuous batching, swept with
 * the batch axis: alone, three sequences prefilling alongside, three decoding alongside. */
static void test_defects_batch(void)
{
    static const lm_defect ds[] = {LM_DEFECT_BATCH_KV_NEXT_ROWS, LM_DEFECT_BATCH_LOGITS_LAST_ROW,
                                   LM_DEFECT_BATCH_POS_OF_LAST};
    const hx_axes axes = {.steps = "1,4,full", .backends = "naive,blas,det", .threads = "1",
                          .attn = "default", .batch = "1,4,4:decode"};
    sweep_axis_defects("batch", &axes, ds, 3, alone);
}

/* The tensor-parallel defects of tensor_parallel.c (the ring all-reduce's last hop lost, middle
 * row-parallel shards reading their weight columns one late, the last column shard's rows one
 * early), modelled on all-reduce and checkpoint-sharding bugs, swept with the tp axis: one
 * device, 2, 4 (ring and tree) and 8 shards (the misaligned shards exist from 4 on). */
static void test_defects_tensor_parallel(void)
{
    static const lm_defect ds[] = {LM_DEFECT_TP_RING_SKIPS_LAST, LM_DEFECT_TP_ROWS_MISALIGNED,
                                   LM_DEFECT_TP_COLS_SHIFTED};
    const hx_axes axes = {.steps = "4,full", .backends = "naive,blas,det", .threads = "1",
                          .attn = "default", .tp = "1,2,4,4:tree,8"};
    sweep_axis_defects("tp", &axes, ds, 3, one_device);
}

void test_defects_register(void)
{
    CU_pSuite s = CU_add_suite("defects", NULL, NULL);
    CU_add_test(s, "test_defects_switch_scoping", test_defects_switch_scoping);
    CU_add_test(s, "test_defects_stories260k", test_defects_stories260k);
    CU_add_test(s, "test_defects_synth_tiny", test_defects_synth_tiny);
    CU_add_test(s, "test_defects_llama2_tiny_random", test_defects_llama2_tiny_random);
    CU_add_test(s, "test_defects_long_prompt", test_defects_long_prompt);
    CU_add_test(s, "test_defects_summary", test_defects_summary);
    CU_add_test(s, "test_defects_rot_multiturn", test_defects_rot_multiturn);
    CU_add_test(s, "test_defects_kv_f16", test_defects_kv_f16);
    CU_add_test(s, "test_defects_f16_subnormal", test_defects_f16_subnormal);
    CU_add_test(s, "test_defects_prefix_reuse", test_defects_prefix_reuse);
    CU_add_test(s, "test_defects_batch", test_defects_batch);
    CU_add_test(s, "test_defects_tensor_parallel", test_defects_tensor_parallel);
    CU_add_test(s, "test_defects_sched_summary", test_defects_sched_summary);
}
