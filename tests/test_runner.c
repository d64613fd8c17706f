/* test_runner.c — capturing one configuration from the engine: greedy tokens, K/V after
 * prefill, teacher-forced rows on and off the greedy path, the layer callback of the prefill.
 * Needs stories260K (SKIP otherwise). */
#include "run/runner.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static void test_runner_forced_rows_and_rerun(void)
{
    lm_model *m = tu_load_model("stories260K.gguf");
    if (m == NULL)
        return;
    lm_err err = {0};
    const int32_t prompt[6] = {1, 403, 9038, 2982, 29892, 727}; /* ids < 512 are checked below */
    int32_t p6[6];
    for (int i = 0; i < 6; ++i)
        p6[i] = prompt[i] % (int32_t)m->hp.n_vocab;
    hx_config cfg;
    CU_ASSERT_FATAL(hx_config_parse(&cfg, "naive:step=2", &err) == LM_OK);
    enum { NG = 8 };
    hx_run_request rq = {.prompt = p6, .n_prompt = 6, .n_gen = NG};
    hx_capture *free_run, *on, *off;
    hx_run_stats st;
    CU_ASSERT_FATAL(hx_run_capture(&free_run, &st, m, &cfg, &rq, &err) == LM_OK);
    CU_ASSERT_EQUAL(free_run->shape.n_pos, 1);
    CU_ASSERT_EQUAL(free_run->positions[0], 5);
    CU_ASSERT_EQUAL(st.n_decode, NG - 1);
    CU_ASSERT(st.ctx_bytes > 0);
    const int32_t *greedy = free_run->tokens + 6;

    /* Forced on its own greedy path: one run, rows are the generation's. */
    rq.forced = greedy;
    rq.n_forced = NG;
    CU_ASSERT_FATAL(hx_run_capture(&on, &st, m, &cfg, &rq, &err) == LM_OK);
    CU_ASSERT_FALSE(st.reran_forced);
    CU_ASSERT_EQUAL(on->shape.n_pos, NG + 1);
    CU_ASSERT_EQUAL(memcmp(on->tokens, free_run->tokens, (6 + NG) * sizeof(int32_t)), 0);
    size_t nv = m->hp.n_vocab;
    /* Same schedule, same engine: bitwise equal rows and K/V (no tolerance). */
    CU_ASSERT_EQUAL(memcmp(on->logits, free_run->logits, nv * sizeof(float)), 0);
    CU_ASSERT_EQUAL(memcmp(on->k[0], free_run->k[0], hx_capture_kv_elems(&on->shape) * 4), 0);
    /* Each forced row's argmax is the next greedy token. */
    for (uint32_t j = 0; j + 1 < NG; ++j)
        CU_ASSERT_EQUAL(lm_argmax(on->logits + j * nv, m->hp.n_vocab), greedy[j]);

    /* A forced path that leaves the greedy one at index 3: rerun; rows 0..3 equal bitwise
     * (same prefix, same calls), later rows differ, tokens are still the greedy ones. */
    int32_t alt[NG];
    memcpy(alt, greedy, sizeof alt);
    alt[3] = (greedy[3] + 1) % (int32_t)m->hp.n_vocab;
    rq.forced = alt;
    CU_ASSERT_FATAL(hx_run_capture(&off, &st, m, &cfg, &rq, &err) == LM_OK);
    CU_ASSERT(st.reran_forced);
    CU_ASSERT_EQUAL(memcmp(off->tokens, free_run->tokens, (6 + NG) * sizeof(int32_t)), 0);
    CU_ASSERT_EQUAL(memcmp(off->logits, on->logits, 4 * nv * sizeof(float)), 0);
    CU_ASSERT_NOT_EQUAL(memcmp(off->logits + 4 * nv, on->logits + 4 * nv, nv * sizeof(float)), 0);

    /* Too long for the model's context. */
    rq.n_gen = m->hp.n_ctx_train;
    hx_capture *none;
    CU_ASSERT_EQUAL(hx_run_capture(&none, &st, m, &cfg, &rq, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(none);
    hx_capture_free(free_run);
    hx_capture_free(on);
    hx_capture_free(off);
    lm_model_free(m);
}

/* The timing rule: short runs repeat to a minimum count and time, long runs count once. */
static void test_runner_time_repeat_rule(void)
{
    CU_ASSERT_TRUE(hx_time_repeat_due(1, 0.01, 0.01));   /* short: repeat */
    CU_ASSERT_TRUE(hx_time_repeat_due(2, 0.2, 0.2));     /* too few repeats yet */
    CU_ASSERT_FALSE(hx_time_repeat_due(3, 0.2, 0.2));    /* enough of both */
    CU_ASSERT_TRUE(hx_time_repeat_due(5, 0.2, 0.01));    /* decode below its minimum time */
    CU_ASSERT_FALSE(hx_time_repeat_due(HX_TIME_MAX_REPS, 0.001, 0.001)); /* cap on count */
    /* A run whose first shot already took HX_TIME_ENOUGH_S is measured by that shot, even
     * with a decode below its minimum (a long prompt and few generated tokens). */
    CU_ASSERT_FALSE(hx_time_repeat_due(1, HX_TIME_ENOUGH_S, 0.0));
    CU_ASSERT_FALSE(hx_time_repeat_due(1, 120.0, 0.5));
}

/* The layer callback of a run request: after each layer of each prefill chunk, in order, with
 * the chunk's length; never during the decode steps. */
typedef struct layer_log {
    uint32_t calls, bad;
    uint32_t next;     /* the layer expected next (1..n_layer) */
    uint32_t lens[8];  /* the chunk length of each completed pass over the layers */
    uint32_t n_chunks;
} layer_log;

static void count_layer(void *user, uint32_t layer, uint32_t n_layer, uint32_t n)
{
    layer_log *l = user;
    ++l->calls;
    l->bad += layer != l->next;
    l->next = layer == n_layer ? 1 : layer + 1;
    if (layer == n_layer && l->n_chunks < 8)
        l->lens[l->n_chunks++] = n;
}

static void test_runner_layer_fn_prefill_only(void)
{
    lm_model *m = tu_load_model("stories260K.gguf");
    if (m == NULL)
        return;
    lm_err err = {0};
    const int32_t p5[5] = {1, 40, 90, 29, 72};
    const char *cfgs[2] = {"naive:step=full", "naive:step=2"};
    const uint32_t want_chunks[2] = {1, 3}, want_len[2][3] = {{5, 0, 0}, {2, 2, 1}};
    for (int k = 0; k < 2; ++k) {
        hx_config cfg;
        CU_ASSERT_FATAL(hx_config_parse(&cfg, cfgs[k], &err) == LM_OK);
        layer_log l = {.next = 1};
        hx_run_request rq = {.prompt = p5, .n_prompt = 5, .n_gen = 4, .time_once = true,
                             .on_layer = count_layer, .on_layer_user = &l};
        hx_capture *c;
        hx_run_stats st;
        CU_ASSERT_FATAL(hx_run_capture(&c, &st, m, &cfg, &rq, &err) == LM_OK);
        CU_ASSERT_EQUAL(l.calls, want_chunks[k] * m->hp.n_layer);
        CU_ASSERT_EQUAL(l.bad, 0);
        CU_ASSERT_EQUAL(l.n_chunks, want_chunks[k]);
        for (uint32_t i = 0; i < want_chunks[k] && i < l.n_chunks; ++i)
            CU_ASSERT_EQUAL(l.lens[i], want_len[k][i]);
        hx_capture_free(c);
    }
    lm_model_free(m);
}

void test_runner_register(void)
{
    CU_pSuite s = CU_add_suite("runner", NULL, NULL);
    CU_add_test(s, "test_runner_forced_rows_and_rerun", test_runner_forced_rows_and_rerun);
    CU_add_test(s, "test_runner_time_repeat_rule", test_runner_time_repeat_rule);
    CU_add_test(s, "test_runner_layer_fn_prefill_only", test_runner_layer_fn_prefill_only);
}
