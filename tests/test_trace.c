/* test_trace.c — `kvdrift trace` (harness/run/trace.c) and the engine's per-operation probe:
 * identical configurations never part, naive vs blas part first where the backend first
 * computes (a matrix product of layer 0) and stay within the envelope, and an injected defect
 * is located at the operation that carries it. Runs on the synthetic "tiny" model always and
 * on stories260K when present. */
#include "cli/commands.h"
#include "kvd_defects.h"
#include "kvd_engine.h"
#include "kvd_tokenizer.h"
#include "plan/synth.h"
#include "test_util.h"
#include "run/trace.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OPS_PER_LAYER 11u /* attn_norm q k v attn attn_out attn_resid ffn_norm ffn_act ffn_out
                             residual (kvd_engine.h) */

typedef struct tmodel {
    lm_model *m;
    int32_t *prompt;
    uint32_t n_prompt;
} tmodel;

static bool load(tmodel *t, const char *path)
{
    lm_err err = {0};
    size_t n = 0;
    static const char text[] = "Once upon a time, there was a little girl";
    memset(t, 0, sizeof *t);
    if (lm_model_load(&t->m, path, &err) != LM_OK ||
        lm_tokenize(t->m->vocab, text, strlen(text), true, &t->prompt, &n, &err) != LM_OK) {
        fprintf(stderr, "\n  %s: %s\n", path, err.msg);
        return false;
    }
    t->n_prompt = (uint32_t)n;
    return true;
}

static void unload(tmodel *t)
{
    free(t->prompt);
    lm_model_free(t->m);
}

/* The models this run has: tiny always (written once), stories260K when present. */
static size_t models(const char *paths[2])
{
    static char tiny[1200];
    size_t n = 0;
    if (tiny[0] == '\0') {
        lm_err err = {0};
        snprintf(tiny, sizeof tiny, "%s/trace-tiny.gguf", tu_tmpdir());
        if (hx_synth_write(tiny, "tiny", 5, LM_TYPE_F32, &err) != LM_OK) {
            fprintf(stderr, "\n  synth: %s\n", err.msg);
            tiny[0] = '\0';
        }
    }
    if (tiny[0] != '\0')
        paths[n++] = tiny;
    const char *s = tu_model_path("stories260K.gguf");
    if (s != NULL) {
        static char st[1200];
        snprintf(st, sizeof st, "%s", s);
        paths[n++] = st;
    }
    return n;
}

/* Traces a against b; ensemble members run `jobs` side by side. */
static hx_trace_result *trace_jobs(const tmodel *t, const char *a, const char *b, uint32_t n_gen,
                                   uint32_t ensemble, uint32_t jobs)
{
    lm_err err = {0};
    hx_trace_params p = {.model = t->m, .prompt = t->prompt, .n_prompt = t->n_prompt,
                         .n_gen = n_gen, .ensemble = ensemble, .sr_seed = 99, .jobs = jobs};
    hx_trace_result *r = NULL;
    CU_ASSERT_EQUAL(hx_config_parse(&p.a, a, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_config_parse(&p.b, b, &err), LM_OK);
    int rc = hx_trace_run(&r, &p, &err);
    CU_ASSERT_EQUAL(rc, LM_OK);
    if (rc != LM_OK)
        fprintf(stderr, "\n  trace %s vs %s: %s\n", a, b, err.msg);
    return r;
}

static hx_trace_result *trace(const tmodel *t, const char *a, const char *b, uint32_t n_gen,
                              uint32_t ensemble)
{
    return trace_jobs(t, a, b, n_gen, ensemble, 1);
}

static const hx_trace_op *first(const hx_trace_result *r, bool beyond)
{
    int64_t i = beyond ? r->first_beyond : r->first_diff;
    return i >= 0 ? &r->ops[i] : NULL;
}

static void test_trace_identical_configs(void)
{
    const char *paths[2];
    size_t np = models(paths);
    CU_ASSERT_FATAL(np >= 1);
    for (size_t i = 0; i < np; ++i) {
        tmodel t;
        CU_ASSERT_FATAL(load(&t, paths[i]));
        hx_trace_result *r = trace(&t, "blas:step=3", "blas:step=3", 3, 0);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        /* Every operation of every layer, then out_norm and logits, at every position. */
        CU_ASSERT_EQUAL(r->n_ops, (size_t)t.m->hp.n_layer * OPS_PER_LAYER + 2);
        CU_ASSERT_EQUAL(r->ops[0].n_pos, t.n_prompt + 3);
        CU_ASSERT_STRING_EQUAL(r->ops[0].op, "attn_norm");
        CU_ASSERT_STRING_EQUAL(r->ops[r->n_ops - 1].op, "logits");
        CU_ASSERT_EQUAL(r->first_diff, -1);
        CU_ASSERT_EQUAL(r->first_beyond, -1);
        char line[512];
        hx_trace_summary(line, sizeof line, r, "A", "B");
        CU_ASSERT_PTR_NOT_NULL(strstr(line, "identical"));
        hx_trace_result_free(r);
        unload(&t);
    }
}

/* The RMSNorm is the same C code for both backends, so naive and blas agree bitwise on L0
 * attn_norm; they part at the first matrix product (q, k or v of layer 0). Every difference
 * must stay within the per-operation envelope: both are correct engines. */
static void test_trace_naive_vs_blas(void)
{
    const char *paths[2];
    size_t np = models(paths);
    for (size_t i = 0; i < np; ++i) {
        tmodel t;
        CU_ASSERT_FATAL(load(&t, paths[i]));
        hx_trace_result *r = trace(&t, "naive:step=full", "blas:step=full", 2, 8);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        const hx_trace_op *o = first(r, false);
        CU_ASSERT_PTR_NOT_NULL_FATAL(o);
        CU_ASSERT_EQUAL(o->layer, 0);
        CU_ASSERT(strcmp(o->op, "q") == 0 || strcmp(o->op, "k") == 0 || strcmp(o->op, "v") == 0);
        CU_ASSERT_EQUAL(r->ops[0].n_pos_diff, 0);
        CU_ASSERT(r->has_env);
        CU_ASSERT_EQUAL(r->first_beyond, -1);
        if (r->first_beyond >= 0)
            hx_trace_print(stderr, r, "naive:step=full", "blas:step=full", true);
        hx_trace_result_free(r);
        unload(&t);
    }
}

/* The envelope's members one at a time and three side by side: the same envelope at every
 * operation (its largest-difference position's E and the worst ratio, the same doubles). */
static void test_trace_members_side_by_side_same_envelope(void)
{
    const char *paths[2];
    size_t np = models(paths);
    for (size_t i = 0; i < np; ++i) {
        tmodel t;
        CU_ASSERT_FATAL(load(&t, paths[i]));
        hx_trace_result *r1 = trace_jobs(&t, "naive:step=full", "blas:step=full", 2, 8, 1);
        hx_trace_result *r3 = trace_jobs(&t, "naive:step=full", "blas:step=full", 2, 8, 3);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r1);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r3);
        CU_ASSERT_EQUAL_FATAL(r1->n_ops, r3->n_ops);
        size_t differ = 0;
        for (size_t k = 0; k < r1->n_ops; ++k)
            differ += memcmp(&r1->ops[k].e_at_max, &r3->ops[k].e_at_max, sizeof(double)) != 0 ||
                      memcmp(&r1->ops[k].worst_ratio, &r3->ops[k].worst_ratio,
                             sizeof(double)) != 0;
        CU_ASSERT_EQUAL(differ, 0);
        hx_trace_result_free(r1);
        hx_trace_result_free(r3);
        unload(&t);
    }
}

/* With defect d on blas ("naive" spared, which keeps the envelope's naive centre run and its
 * naive-sr members correct), a vs b part beyond the envelope first at layer 0's operation op,
 * at position 0; parts_there: their first bitwise difference is there too. */
static void check_defect_located(lm_defect d, const char *a, const char *b, const char *op,
                                 bool parts_there)
{
    const char *paths[2];
    size_t np = models(paths);
    for (size_t i = 0; i < np; ++i) {
        tmodel t;
        CU_ASSERT_FATAL(load(&t, paths[i]));
        lm_test_spare_backend("naive");
        lm_test_set_defect(d);
        hx_trace_result *r = trace(&t, a, b, 0, 8);
        lm_test_set_defect(LM_DEFECT_NONE);
        lm_test_spare_backend(NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(r);
        const hx_trace_op *o = first(r, false), *ob = first(r, true);
        CU_ASSERT_PTR_NOT_NULL_FATAL(o);
        CU_ASSERT_PTR_NOT_NULL_FATAL(ob);
        if (parts_there) {
            CU_ASSERT_EQUAL(o->layer, 0);
            CU_ASSERT_STRING_EQUAL(o->op, op);
        }
        CU_ASSERT_EQUAL(ob->layer, 0);
        CU_ASSERT_STRING_EQUAL(ob->op, op);
        CU_ASSERT_EQUAL(ob->beyond_pos, 0);
        hx_trace_result_free(r);
        unload(&t);
    }
}

/* RMSNorm eps 10x on blas only: the two part at L0 attn_norm, bitwise and beyond the
 * envelope. */
static void test_trace_locates_eps_defect(void)
{
    check_defect_located(LM_DEFECT_RMS_EPS_10X, "naive:step=full", "blas:step=full",
                         "attn_norm", true);
}

/* The mask admitting the next key of the chunk: invisible at step=1, so step=1 vs step=4 (both
 * blas, both defective) part beyond the envelope first at L0 attn, at position 0 (query 0 sees
 * key 1 of its chunk); q, k and v before it differ only by rounding. */
static void test_trace_locates_mask_defect(void)
{
    check_defect_located(LM_DEFECT_MASK_NEXT_TOKEN, "blas:step=1", "blas:step=4", "attn",
                         false);
}

static void test_trace_bad_input(void)
{
    const char *paths[2];
    size_t np = models(paths);
    CU_ASSERT_FATAL(np >= 1);
    tmodel t;
    CU_ASSERT_FATAL(load(&t, paths[0]));
    lm_err err = {0};
    hx_trace_result *r = NULL;
    hx_trace_params p = {.model = t.m, .prompt = t.prompt, .n_prompt = t.n_prompt,
                         .ensemble = 3};
    CU_ASSERT_EQUAL(hx_config_parse(&p.a, "naive", &err), LM_OK);
    CU_ASSERT_EQUAL(hx_config_parse(&p.b, "blas", &err), LM_OK);
    CU_ASSERT_EQUAL(hx_trace_run(&r, &p, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(r);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "ensemble"));
    lm_err_clear(&err);
    p.ensemble = 0;
    p.n_gen = t.m->hp.n_ctx_train; /* prompt + n_gen beyond the context */
    CU_ASSERT_EQUAL(hx_trace_run(&r, &p, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(r);
    lm_err_clear(&err);
    int32_t bad_tok = (int32_t)t.m->hp.n_vocab;
    p.n_gen = 0;
    p.prompt = &bad_tok;
    p.n_prompt = 1;
    CU_ASSERT_EQUAL(hx_trace_run(&r, &p, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "vocabulary"));
    unload(&t);

    /* The command: usage errors exit 2 with one line on stderr. */
    char *argv1[] = {"trace", (char *)paths[0], "--tokens", "1,2,3", "--a", "naive", NULL};
    CU_ASSERT_EQUAL(cmd_trace(6, argv1), 2); /* no --b */
    char *argv2[] = {"trace", "/nonexistent/model.gguf", "--tokens", "1,2", "--a", "naive",
                     "--b", "blas", NULL};
    CU_ASSERT_EQUAL(cmd_trace(8, argv2), 2);
    char *argv3[] = {"trace", (char *)paths[0], "--tokens", "1,2", "--a", "naive", "--b",
                     "blas:step=x", NULL};
    CU_ASSERT_EQUAL(cmd_trace(8, argv3), 2);
    char *argv4[] = {"trace", (char *)paths[0], "--tokens", "1,2", "--a", "naive", "--b", "blas",
                     "--ensemble", "2", NULL};
    CU_ASSERT_EQUAL(cmd_trace(10, argv4), 2);
}

void test_trace_register(void)
{
    CU_pSuite s = CU_add_suite("trace", NULL, NULL);
    CU_add_test(s, "test_trace_identical_configs", test_trace_identical_configs);
    CU_add_test(s, "test_trace_naive_vs_blas", test_trace_naive_vs_blas);
    CU_add_test(s, "test_trace_members_side_by_side_same_envelope",
                test_trace_members_side_by_side_same_envelope);
    CU_add_test(s, "test_trace_locates_eps_defect", test_trace_locates_eps_defect);
    CU_add_test(s, "test_trace_locates_mask_defect", test_trace_locates_mask_defect);
    CU_add_test(s, "test_trace_bad_input", test_trace_bad_input);
}
