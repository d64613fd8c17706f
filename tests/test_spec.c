/* test_spec.c — logits processors with history, KV rollback and speculative decoding checked
 * token for token against plain decoding (engine/penalties.c, engine/speculative.c,
 * harness/run/speculative_run.c, harness/judge/speculative_verdict.c).
 *
 * The equality runs use the naive backend, whose rows do not depend on the chunk they are
 * computed in, so a verify chunk's logits are bitwise the single-step ones: the check is then
 * exact (envelope 0, every configuration EXACT), and any difference is a bookkeeping bug.
 * The three defects of kvd_defects.h that concern this path (history double-counts the newest
 * token, history starts without the prompt, rollback keeps one rejected token) must each make
 * some configuration SEQ_MISMATCH; the correct code must make none, on every synthetic preset
 * but smollm2-135m (its 135M float32 weights take longer to write and run than the whole
 * test-time budget of this suite) and on stories260K when it is present. */
#include "cli/commands.h"
#include "kvd_defects.h"
#include "kvd_speculative.h"
#include "run/speculative_check.h"
#include "run/speculative_run.h"
#include "plan/synth.h"
#include "fixtures.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- penalties: llama.cpp's arithmetic ---- */

static void test_spec_penalties_llama_semantics(void)
{
    lm_err err = {0};
    lm_penalty *s = NULL;
    const lm_penalty_params p = {.repeat_penalty = 2.0f, .repeat_last_n = 3,
                                 .frequency_penalty = 0.25f, .presence_penalty = 0.5f};
    CU_ASSERT_FATAL(lm_penalty_create(&s, &p, 8, &err) == LM_OK);
    const int32_t acc[] = {1, 2, 2, 3}; /* window 3: token 1 leaves */
    for (size_t i = 0; i < 4; ++i)
        lm_penalty_accept(s, acc[i]);
    int32_t hist[3];
    CU_ASSERT_EQUAL(lm_penalty_history(s, hist), 3u);
    CU_ASSERT(hist[0] == 2 && hist[1] == 2 && hist[2] == 3);
    float l[8] = {1, 4, 3, -2, 5, 0, 0, 0};
    lm_penalty_apply(s, l);
    /* exact in float: powers of two and small integers */
    CU_ASSERT_EQUAL(l[1], 4.0f);                         /* left the window */
    CU_ASSERT_EQUAL(l[2], 3.0f / 2.0f - (2 * 0.25f + 0.5f)); /* positive: divided, count 2 */
    CU_ASSERT_EQUAL(l[3], -2.0f * 2.0f - (0.25f + 0.5f));    /* negative: multiplied, count 1 */
    CU_ASSERT_EQUAL(l[4], 5.0f);
    const uint64_t h = lm_penalty_history_hash(s);
    lm_penalty_accept(s, 3);
    CU_ASSERT_NOT_EQUAL(lm_penalty_history_hash(s), h);
    lm_penalty_free(s);

    /* disabled: repeat 1, no frequency/presence -> nothing changes; window 0 -> nothing kept */
    const lm_penalty_params off = {.repeat_penalty = 1.0f, .repeat_last_n = 64};
    CU_ASSERT_FATAL(lm_penalty_create(&s, &off, 8, &err) == LM_OK);
    lm_penalty_accept(s, 1);
    float m[8] = {1, 4, 3, -2, 5, 0, 0, 0};
    lm_penalty_apply(s, m);
    CU_ASSERT_EQUAL(m[1], 4.0f);
    CU_ASSERT_FALSE(lm_penalty_enabled(s));
    lm_penalty_free(s);
    const lm_penalty_params bad = {.repeat_penalty = 0.0f, .repeat_last_n = 64};
    CU_ASSERT_EQUAL(lm_penalty_create(&s, &bad, 8, &err), LM_E_INPUT);
}

/* After lm_penalty_reset an object acts exactly as a fresh one: the same later history gives
 * the same penalised logits, bit for bit (token 1 was counted before the reset and comes back
 * after it, so counts carried over would show in its frequency penalty). */
static void test_spec_penalty_reset_is_fresh(void)
{
    lm_err err = {0};
    const lm_penalty_params p = {.repeat_penalty = 1.5f, .repeat_last_n = 4,
                                 .frequency_penalty = 0.25f, .presence_penalty = 0.5f};
    lm_penalty *used = NULL, *fresh = NULL;
    CU_ASSERT_FATAL(lm_penalty_create(&used, &p, 8, &err) == LM_OK);
    CU_ASSERT_FATAL(lm_penalty_create(&fresh, &p, 8, &err) == LM_OK);
    const int32_t before[] = {1, 1, 2, 3, 1, 6};
    for (size_t i = 0; i < sizeof before / sizeof before[0]; ++i)
        lm_penalty_accept(used, before[i]);
    float scratch[8] = {0};
    lm_penalty_apply(used, scratch);
    lm_penalty_reset(used);
    const int32_t after[] = {1, 4, 1, 5, 7, 4};
    for (size_t i = 0; i < sizeof after / sizeof after[0]; ++i) {
        lm_penalty_accept(used, after[i]);
        lm_penalty_accept(fresh, after[i]);
        float a[8] = {1, 4, 3, -2, 5, 0.5f, -1, 2}, b[8];
        memcpy(b, a, sizeof a);
        lm_penalty_apply(used, a);
        lm_penalty_apply(fresh, b);
        CU_ASSERT(memcmp(a, b, sizeof a) == 0);
        CU_ASSERT_EQUAL(lm_penalty_history_hash(used), lm_penalty_history_hash(fresh));
    }
    lm_penalty_free(used);
    lm_penalty_free(fresh);
}

/* ---- CONFIG keys spec= and draft= ---- */

static void test_spec_config_keys(void)
{
    lm_err err = {0};
    hx_config c;
    CU_ASSERT_FATAL(hx_config_parse(&c, "naive:step=4:spec=2:draft=self:3", &err) == LM_OK);
    CU_ASSERT_EQUAL(c.spec, 2u);
    CU_ASSERT_STRING_EQUAL(c.draft, "self:3");
    uint32_t l = 0;
    CU_ASSERT(hx_draft_self_layers(c.draft, &l) && l == 3);
    char s[HX_CONFIG_STR_MAX];
    hx_config_format(s, sizeof s, &c);
    CU_ASSERT_STRING_EQUAL(s, "naive:step=4:spec=2:draft=self:3");
    hx_config d;
    CU_ASSERT_FATAL(hx_config_parse(&d, s, &err) == LM_OK);
    CU_ASSERT(hx_config_equal(&c, &d));
    CU_ASSERT_FATAL(hx_config_parse(&c, "blas:draft=synth:tiny-draft:seed=3", &err) == LM_OK);
    CU_ASSERT_STRING_EQUAL(c.draft, "synth:tiny-draft:seed=3");
    CU_ASSERT_EQUAL(hx_config_parse(&c, "naive:spec=65", &err), LM_E_INPUT);
    CU_ASSERT_EQUAL(hx_config_parse(&c, "naive:spec=1:spec=2", &err), LM_E_INPUT);
    CU_ASSERT_EQUAL(hx_config_parse(&c, "naive:draft=", &err), LM_E_INPUT);
    CU_ASSERT_FALSE(hx_draft_self_layers("self:0", &l));
    CU_ASSERT_FALSE(hx_draft_self_layers("selfish", &l));
}

/* ---- models ---- */

static lm_model *synth_model(const char *preset)
{
    return tf_synth_load(preset, 7);
}

/* A prompt that repeats itself, so that the penalties change choices. */
static void make_prompt(int32_t *p, uint32_t n, uint32_t n_vocab)
{
    for (uint32_t i = 0; i < n; ++i)
        p[i] = (int32_t)(300u + (i * 7u) % 11u) % (int32_t)n_vocab;
}

/* ---- rollback ---- */

/* After forward(A[0..n)) and rollback to n - r, the next token's logits equal those after
 * forward(A[0..n-r)) — bitwise with the naive backend, plain and rotating cache alike (both
 * chunks are concats that trim the rotating cache the same way). */
static void rollback_case(const lm_model *m, uint32_t rot_max, uint32_t rot_keep)
{
    lm_err err = {0};
    const uint32_t nv = m->hp.n_vocab;
    int32_t toks[24];
    make_prompt(toks, 24, nv);
    float *a = malloc(nv * 5 * sizeof(float)), *b = malloc(nv * 5 * sizeof(float));
    lm_ctx_params cp = {.backend = "naive", .n_ctx = 64, .rot_max_size = rot_max,
                        .rot_keep = rot_keep};
    lm_ctx *c1 = NULL, *c2 = NULL;
    CU_ASSERT_FATAL(lm_ctx_create(&c1, m, &cp, &err) == LM_OK);
    CU_ASSERT_FATAL(lm_ctx_create(&c2, m, &cp, &err) == LM_OK);
    CU_ASSERT_FATAL(lm_prefill(c1, toks, 16, 4, a, &err) == LM_OK);
    CU_ASSERT_FATAL(lm_prefill(c2, toks, 16, 4, b, &err) == LM_OK);
    CU_ASSERT_FATAL(lm_forward(c1, toks + 16, 5, LM_LOGITS_ALL, a, &err) == LM_OK);
    CU_ASSERT_FATAL(lm_ctx_rollback(c1, 18, &err) == LM_OK);
    CU_ASSERT_EQUAL(lm_ctx_n_past(c1), 18u);
    CU_ASSERT_FATAL(lm_forward(c2, toks + 16, 2, LM_LOGITS_ALL, b, &err) == LM_OK);
    CU_ASSERT_FATAL(lm_forward(c1, toks + 20, 1, LM_LOGITS_LAST, a, &err) == LM_OK);
    CU_ASSERT_FATAL(lm_forward(c2, toks + 20, 1, LM_LOGITS_LAST, b, &err) == LM_OK);
    CU_ASSERT(memcmp(a, b, nv * sizeof(float)) == 0);
    CU_ASSERT_EQUAL(lm_ctx_rollback(c1, 30, &err), LM_E_INPUT); /* beyond the cache */
    lm_ctx_free(c1);
    lm_ctx_free(c2);
    free(a);
    free(b);
}

static void test_spec_rollback(void)
{
    lm_model *m = synth_model("tiny");
    rollback_case(m, 0, 0);
    rollback_case(m, 8, 2);
    /* rotating cache, in-place writes that wrapped: the overwritten positions are lost */
    lm_err err = {0};
    lm_ctx_params cp = {.backend = "naive", .n_ctx = 64, .rot_max_size = 8, .rot_keep = 2};
    lm_ctx *c = NULL;
    CU_ASSERT_FATAL(lm_ctx_create(&c, m, &cp, &err) == LM_OK);
    int32_t toks[12];
    make_prompt(toks, 12, m->hp.n_vocab);
    for (uint32_t i = 0; i < 12; ++i)
        CU_ASSERT_FATAL(lm_forward(c, toks + i, 1, LM_LOGITS_NONE, NULL, &err) == LM_OK);
    CU_ASSERT_EQUAL(lm_ctx_rollback(c, 10, &err), LM_E_INPUT);
    lm_ctx_free(c);
    lm_model_free(m);
}

/* ---- the check ---- */

typedef struct spec_tally {
    size_t runs, fails, ties, semantic, drafted, accepted;
    hx_class worst;
} spec_tally;

/* The cache the check runs with: plain (max 0) or rotating with a policy. */
typedef struct rot_cfg {
    uint32_t max, keep;
    bool window;
} rot_cfg;

static const lm_penalty_params pen_on = {.repeat_penalty = 1.3f, .repeat_last_n = 16,
                                         .frequency_penalty = 0.2f, .presence_penalty = 0.3f};

/* Every K x step x draft on the naive backend (speculative_check.h: with MLX's rotating cache a token
 * SEQ_MISMATCH is re-judged under the exact window); tally of the verdicts. */
static spec_tally check_model_rot(const lm_model *m, const lm_model *pair_draft,
                                  const char *label, bool verbose, rot_cfg rot)
{
    spec_tally t = {0};
    const uint32_t steps[] = {1, 3, 0};
    const uint32_t ks[] = {1, 2, 4};
    const char *drafts[] = {"self:1", "self:2", "pair"};
    int32_t prompt[12];
    make_prompt(prompt, 12, m->hp.n_vocab);
    const uint32_t n_gen = 24;
    for (size_t di = 0; di < 3; ++di) {
        if (di == 2 && pair_draft == NULL)
            continue;
        if (di == 1 && m->hp.n_layer < 3)
            continue;
        for (size_t ki = 0; ki < 3; ++ki)
            for (size_t si = 0; si < 3; ++si) {
                hx_config c = {.backend = "naive", .step = steps[si], .spec = ks[ki],
                               .rot_max = rot.max, .rot_keep = rot.keep,
                               .rot_window = rot.window};
                snprintf(c.draft, sizeof c.draft, "%s", di == 2 ? "synth:tiny-draft" : drafts[di]);
                lm_err err = {0};
                hx_spec_row row;
                int rc = hx_spec_check_config(&row, m, di == 2 ? pair_draft : NULL, &c, prompt, 12,
                                              n_gen, &pen_on, 0.0, 0.0, &err);
                if (rc != LM_OK)
                    fprintf(stderr, "\n  %s: %s\n", label, err.msg);
                CU_ASSERT_FATAL(rc == LM_OK);
                const hx_seq_verdict *v = &row.v;
                t.runs++;
                t.fails += hx_class_fails(v->cls);
                t.ties += v->cls == HX_TIE_FLIP;
                t.semantic += v->cls == HX_SEMANTIC;
                t.drafted += row.n_drafted;
                t.accepted += row.n_accepted;
                t.worst = hx_class_worst(t.worst, v->cls);
                if (verbose && v->cls != HX_EXACT) {
                    char s[HX_CONFIG_STR_MAX];
                    hx_config_format(s, sizeof s, &c);
                    fprintf(stderr, "\n  %s %s: %s %s", label, s, hx_class_name(v->cls), v->reason);
                }
            }
    }
    return t;
}

static spec_tally check_model(const lm_model *m, const lm_model *pair_draft, const char *label,
                              bool verbose)
{
    return check_model_rot(m, pair_draft, label, verbose, (rot_cfg){0});
}

static void test_spec_equals_plain_on_presets(void)
{
    lm_model *draft = synth_model("tiny-draft");
    fprintf(stderr, "\n  %-18s %5s %6s %9s  %s\n", "model", "runs", "fails", "accepted",
            "worst");
    for (size_t i = 0; hx_synth_preset_name(i) != NULL; ++i) {
        const char *name = hx_synth_preset_name(i);
        if (strcmp(name, "smollm2-135m") == 0 || hx_synth_preset_large(name, NULL))
            continue; /* the large presets' architectures: tiny-sized ones of them are here */
        lm_model *m = synth_model(name);
        spec_tally t = check_model(m, draft, name, true);
        fprintf(stderr, "  %-18s %5zu %6zu %4zu/%-4zu  %s\n", name, t.runs, t.fails, t.accepted,
                t.drafted, hx_class_name(t.worst));
        CU_ASSERT_EQUAL(t.fails, 0u);
        CU_ASSERT_EQUAL(t.worst, HX_EXACT);
        lm_model_free(m);
    }
    const char *sp = tu_model_path("stories260K.gguf");
    if (sp != NULL) {
        lm_model *m = NULL;
        lm_err err = {0};
        CU_ASSERT_FATAL(lm_model_load(&m, sp, &err) == LM_OK);
        spec_tally t = check_model(m, NULL, "stories260K", true);
        fprintf(stderr, "  %-18s %5zu %6zu %4zu/%-4zu  %s\n", "stories260K", t.runs, t.fails,
                t.accepted, t.drafted, hx_class_name(t.worst));
        CU_ASSERT_EQUAL(t.fails, 0u);
        lm_model_free(m);
    }
    lm_model_free(draft);
}

static void test_spec_defects_caught(void)
{
    lm_model *m = synth_model("tiny");
    lm_model *draft = synth_model("tiny-draft");
    const lm_defect ds[] = {LM_DEFECT_HIST_DOUBLE_NEWEST, LM_DEFECT_HIST_NO_PROMPT,
                            LM_DEFECT_ROLLBACK_KEEPS_ONE};
    for (size_t i = 0; i < 3; ++i) {
        lm_test_set_defect(ds[i]);
        spec_tally t = check_model(m, draft, "tiny", false);
        lm_test_set_defect(LM_DEFECT_NONE);
        fprintf(stderr, "  defect %-20s: %zu of %zu configurations SEQ_MISMATCH\n",
                lm_defect_name(ds[i]), t.fails, t.runs);
        CU_ASSERT(t.fails > 0);
        CU_ASSERT_EQUAL(t.worst, HX_SEQ_MISMATCH);
    }
    lm_model_free(draft);
    lm_model_free(m);
}

/* A rotating cache of 8 keeping 2 with a 12-token prompt and 24 generated tokens: past its
 * window from the prefill on. The exact-window policy makes a verify chunk's rows see what
 * single steps see, so the check passes (every row; slot orders differ from single steps', so
 * rows may differ by rounding: NOISE). MLX's policy lets a verify chunk's later rows see
 * older keys: speculative output differs from plain decoding (some row), and every such row is
 * SEMANTIC, explained by the exact-window run, never SEQ_MISMATCH. The three defects still
 * fail under MLX's policy: their window counterparts fail too. */
static void test_spec_rotating_policies(void)
{
    lm_model *m = synth_model("tiny");
    lm_model *draft = synth_model("tiny-draft");
    const rot_cfg win = {.max = 8, .keep = 2, .window = true}, mlx = {.max = 8, .keep = 2};
    spec_tally tw = check_model_rot(m, draft, "tiny rot=8/2/window", false, win);
    spec_tally tm = check_model_rot(m, draft, "tiny rot=8/2", false, mlx);
    fprintf(stderr, "\n  rot 8/2 window: %zu runs, %zu fail, %zu SEMANTIC, worst %s; MLX: %zu "
            "runs, %zu fail, %zu SEMANTIC, worst %s\n", tw.runs, tw.fails, tw.semantic,
            hx_class_name(tw.worst), tm.runs, tm.fails, tm.semantic, hx_class_name(tm.worst));
    CU_ASSERT_EQUAL(tw.fails, 0u);
    CU_ASSERT_EQUAL(tw.semantic, 0u);
    CU_ASSERT(tw.worst <= HX_NOISE);
    CU_ASSERT_EQUAL(tm.fails, 0u);
    CU_ASSERT(tm.semantic > 0);
    const lm_defect ds[] = {LM_DEFECT_HIST_DOUBLE_NEWEST, LM_DEFECT_HIST_NO_PROMPT,
                            LM_DEFECT_ROLLBACK_KEEPS_ONE};
    for (size_t i = 0; i < 3; ++i) {
        lm_test_set_defect(ds[i]);
        spec_tally t = check_model_rot(m, draft, "tiny rot=8/2", false, mlx);
        lm_test_set_defect(LM_DEFECT_NONE);
        fprintf(stderr, "  defect %-20s, rot 8/2: %zu of %zu SEQ_MISMATCH\n",
                lm_defect_name(ds[i]), t.fails, t.runs);
        CU_ASSERT(t.fails > 0);
    }
    lm_model_free(draft);
    lm_model_free(m);
}

/* kvdrift sweep --spec and --sampler block end to end: exit 0, both tables written beside the
 * reports with their verdict lines. */
static void test_spec_sweep_cli(void)
{
    char out[600], cache[600], path[700];
    snprintf(out, sizeof out, "%s/spec-sweep", tu_tmpdir());
    snprintf(cache, sizeof cache, "%s/spec-cache", tu_tmpdir());
    char *argv[] = {"sweep", "synth:tiny-mask", "--tokens", "1,300,301,302,300,301", "-n", "6",
                    "--steps", "2,full", "--backends", "naive", "--spec", "0,2", "--draft",
                    "self:2", "--repeat-penalty", "1.3", "--sampler", "block", "--block-size",
                    "4", "--cache", cache, "-o", out, "-q", NULL};
    fflush(stdout);
    CU_ASSERT_EQUAL(cmd_sweep((int)(sizeof argv / sizeof argv[0]) - 1, argv), 0);
    const char *want[6][2] = {{"spec.txt", "verdict pass"},
                              {"block.txt", "the engine is fine"},
                              {"report.json", "\"spec\": {"},
                              {"report.json", "\"block_sampler\": {"},
                              {"report.json", "\"verdict\": \"the engine is fine"},
                              {"report.md", "## Speculative decoding vs plain decoding"}};
    for (int i = 0; i < 6; ++i) {
        snprintf(path, sizeof path, "%s/%s", out, want[i][0]);
        FILE *f = fopen(path, "r");
        CU_ASSERT_PTR_NOT_NULL_FATAL(f);
        static char buf[1 << 20];
        size_t n = fread(buf, 1, sizeof buf - 1, f);
        buf[n] = '\0';
        fclose(f);
        CU_ASSERT_PTR_NOT_NULL(strstr(buf, want[i][1]));
    }
}

void test_spec_register(void)
{
    CU_pSuite s = CU_add_suite("spec", NULL, NULL);
    CU_add_test(s, "test_spec_penalties_llama_semantics", test_spec_penalties_llama_semantics);
    CU_add_test(s, "test_spec_penalty_reset_is_fresh", test_spec_penalty_reset_is_fresh);
    CU_add_test(s, "test_spec_rollback", test_spec_rollback);
    CU_add_test(s, "test_spec_config_keys", test_spec_config_keys);
    CU_add_test(s, "test_spec_equals_plain_on_presets", test_spec_equals_plain_on_presets);
    CU_add_test(s, "test_spec_defects_caught", test_spec_defects_caught);
    CU_add_test(s, "test_spec_rotating_policies", test_spec_rotating_policies);
    CU_add_test(s, "test_spec_sweep_cli", test_spec_sweep_cli);
}
