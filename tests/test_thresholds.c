/* test_thresholds.c — the engine's exported thresholds (kvd_engine.h lm_threshold) are where
 * its code paths really change, shown with the test-only defects that live on those paths:
 * a chunk one row (or a cache one key) below a threshold computes the same bits with the
 * defect as without it, a chunk (or cache) at the threshold does not. And the harness's
 * coverage lines (judge/coverage.h) name exactly the thresholds a configuration set leaves
 * unreached. Model: the one-layer synthetic tiny-draft preset (32 wide, 4 heads on 2 KV
 * heads), written to the test folder. */
#include "judge/coverage.h"
#include "kvd_defects.h"
#include "kvd_engine.h"
#include "model/report.h"
#include "plan/synth.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const lm_threshold *threshold(const char *name)
{
    const lm_threshold *t = lm_threshold_find(name);
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    return t;
}

static lm_model *load_draft(void)
{
    char path[1200];
    lm_err err = {0};
    lm_model *m = NULL;
    snprintf(path, sizeof path, "%s/thresholds-tiny-draft.gguf", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny-draft", 3, LM_TYPE_F32, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    return m;
}

/* One chunk of n tokens (ids 1 + (i * 7) % 500) on a fresh context; out receives layer 0's K
 * rows [n][kv_dim] then the last row's logits [n_vocab]. */
static void one_chunk(const lm_model *m, const char *backend, int threads, const char *attn,
                      uint32_t n, float *out)
{
    const lm_hparams *hp = &m->hp;
    const size_t kv = (size_t)hp->n_head_kv * hp->head_dim;
    int32_t *tok = malloc(n * sizeof *tok);
    CU_ASSERT_FATAL(tok != NULL);
    for (uint32_t i = 0; i < n; ++i)
        tok[i] = (int32_t)(1 + (i * 7u) % 500u);
    lm_ctx *c = NULL;
    lm_err err = {0};
    const lm_ctx_params p = {.backend = backend, .n_threads = threads, .n_ctx = n, .attn = attn};
    CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&c, m, &p, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_forward(c, tok, n, LM_LOGITS_LAST, out + n * kv, &err), LM_OK);
    memcpy(out, lm_ctx_k(c, 0), n * kv * sizeof *out);
    lm_ctx_free(c);
    free(tok);
}

/* Whether defect d changes the bits of a chunk of n tokens. */
static bool defect_shows(const lm_model *m, lm_defect d, const char *backend, int threads,
                         const char *attn, uint32_t n)
{
    const size_t len = (size_t)n * m->hp.n_head_kv * m->hp.head_dim + m->hp.n_vocab;
    float *a = calloc(len, sizeof *a), *b = calloc(len, sizeof *b);
    CU_ASSERT_FATAL(a != NULL && b != NULL);
    one_chunk(m, backend, threads, attn, n, a);
    lm_test_set_defect(d);
    one_chunk(m, backend, threads, attn, n, b);
    lm_test_set_defect(LM_DEFECT_NONE);
    const bool differ = memcmp(a, b, len * sizeof *a) != 0;
    free(a);
    free(b);
    return differ;
}

/* stream.key_tile: a query attending over value - 1 cache slots stays in one key tile. */
static void test_thresholds_stream_key_tile(void)
{
    lm_model *m = load_draft();
    const lm_threshold *t = threshold("stream.key_tile");
    CU_ASSERT_EQUAL(t->kind, LM_THR_KEYS);
    CU_ASSERT_STRING_EQUAL(t->attn, "stream");
    CU_ASSERT_FALSE(defect_shows(m, LM_DEFECT_STREAM_TILE_SKIPS_KEY, "naive", 1, "stream",
                                 t->value - 1));
    CU_ASSERT_TRUE(defect_shows(m, LM_DEFECT_STREAM_TILE_SKIPS_KEY, "naive", 1, "stream",
                                t->value));
    /* dense attention never tiles */
    CU_ASSERT_FALSE(defect_shows(m, LM_DEFECT_STREAM_TILE_SKIPS_KEY, "naive", 1, "dense",
                                 t->value));
    lm_model_free(m);
}

/* threads.row_split: a chunk of value - 1 rows stays on one thread, whatever the threads. */
static void test_thresholds_row_split(void)
{
    lm_model *m = load_draft();
    const lm_threshold *t = threshold("threads.row_split");
    CU_ASSERT_EQUAL(t->kind, LM_THR_CHUNK_ROWS);
    CU_ASSERT_TRUE(t->threads);
    CU_ASSERT_FALSE(defect_shows(m, LM_DEFECT_THREAD_SPLIT_SKIPS_ROW, "blas", 2, NULL,
                                 t->value - 1));
    CU_ASSERT_TRUE(defect_shows(m, LM_DEFECT_THREAD_SPLIT_SKIPS_ROW, "blas", 2, NULL, t->value));
    /* one thread, or a backend that runs on one thread: never split */
    CU_ASSERT_FALSE(defect_shows(m, LM_DEFECT_THREAD_SPLIT_SKIPS_ROW, "blas", 1, NULL, t->value));
    CU_ASSERT_TRUE(lm_backend_flags("naive") & LM_BE_ONE_THREAD);
    CU_ASSERT_FALSE(defect_shows(m, LM_DEFECT_THREAD_SPLIT_SKIPS_ROW, "naive", 2, NULL,
                                 t->value));
    lm_model_free(m);
}

/* The table itself: named, positive, each kind's fields filled. */
static void test_thresholds_table(void)
{
    CU_ASSERT(lm_threshold_count() >= 5);
    CU_ASSERT_PTR_NULL(lm_threshold_at(lm_threshold_count()));
    for (size_t i = 0; i < lm_threshold_count(); ++i) {
        const lm_threshold *t = lm_threshold_at(i);
        CU_ASSERT(t->name != NULL && t->name[0] != '\0');
        CU_ASSERT(t->what != NULL && t->what[0] != '\0');
        CU_ASSERT(t->value >= (t->kind == LM_THR_REUSED ? 1u : 2u));
        CU_ASSERT(t->kind == LM_THR_CHUNK_ROWS || t->kind == LM_THR_KEYS ||
                  t->kind == LM_THR_REUSED || t->kind == LM_THR_SEQS ||
                  t->kind == LM_THR_SHARDS);
        CU_ASSERT(t->backend == NULL || lm_backend_known(t->backend, strlen(t->backend)));
    }
}

static bool listed(const hx_report *r, const char *name)
{
    for (uint32_t i = 0; i < r->n_unexercised; ++i)
        if (strncmp(r->unexercised[i], name, strlen(name)) == 0 &&
            r->unexercised[i][strlen(name)] == ':')
            return true;
    return false;
}

/* Coverage: which thresholds a configuration set reaches, from the prompt and the axes. */
static void test_thresholds_coverage(void)
{
    hx_report *r = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_report_create(&r, "t", &err), LM_OK);
    hx_config c[2] = {{.backend = "naive", .step = 0, .threads = 1},
                      {.backend = "blas", .step = 0, .threads = HX_THREADS_ALL,
                       .attn = HX_ATTN_STREAM}};
    const uint32_t tile = threshold("stream.key_tile")->value;
    const uint32_t qb = threshold("stream.query_block")->value;
    /* a short prompt: no second key tile or query block; the split happens (blas, all) */
    hx_coverage_fill(r, c, 2, 20, 4);
    CU_ASSERT(listed(r, "stream.key_tile"));
    CU_ASSERT(listed(r, "stream.query_block"));
    CU_ASSERT(listed(r, "dense.query_block"));
    CU_ASSERT(listed(r, "prefix.reuse"));
    CU_ASSERT_FALSE(listed(r, "threads.row_split"));
    CU_ASSERT_FALSE(listed(r, "blas.multi_row"));
    CU_ASSERT_PTR_NOT_NULL(strstr(r->covered, "attn default,stream"));
    /* prompt + generated reach the tile: listed no more; a one-row step reaches no chunk
     * threshold */
    hx_coverage_fill(r, c, 2, tile - 4, 4);
    CU_ASSERT_FALSE(listed(r, "stream.key_tile"));
    CU_ASSERT_FALSE(listed(r, "stream.query_block"));
    c[1].step = 1;
    hx_coverage_fill(r, c, 2, qb + 10, 4);
    CU_ASSERT(listed(r, "stream.query_block"));
    CU_ASSERT(listed(r, "threads.row_split"));
    CU_ASSERT(listed(r, "blas.multi_row"));
    /* a rotating cache bounds the slots a query attends over */
    c[1].rot_max = 8;
    c[1].rot_keep = 2;
    hx_coverage_fill(r, c, 2, tile + 10, 4);
    CU_ASSERT(listed(r, "stream.key_tile"));
    /* no threaded configuration at all */
    c[1].threads = 1;
    hx_coverage_fill(r, c, 2, 20, 4);
    CU_ASSERT(listed(r, "threads.row_split"));
    hx_report_free(r);
}

/* A reused prefix is reached by a configuration with prefix=P on a prompt of two or more
 * tokens (the last prompt token is always computed, so a one-token prompt reuses nothing);
 * a second sequence in a call by one with batch=B >= 2; shards by one with tp=N >= 2. */
static void test_thresholds_prefix_reuse(void)
{
    hx_report *r = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_report_create(&r, "t", &err), LM_OK);
    hx_config c[2] = {{.backend = "naive", .step = 4}, {.backend = "det", .step = 4}};
    hx_coverage_fill(r, c, 2, 20, 4);
    CU_ASSERT(listed(r, "prefix.reuse"));
    c[1].prefix = 8;
    hx_coverage_fill(r, c, 2, 20, 4);
    CU_ASSERT_FALSE(listed(r, "prefix.reuse"));
    hx_coverage_fill(r, c, 2, 1, 4);
    CU_ASSERT(listed(r, "prefix.reuse"));
    /* a second sequence in a call: batch=B with B >= 2 */
    CU_ASSERT(listed(r, "batch.sequences"));
    c[0].batch = 4;
    hx_coverage_fill(r, c, 2, 20, 4);
    CU_ASSERT_FALSE(listed(r, "batch.sequences"));
    /* tensor-parallel shards: tp=N with N >= 2 */
    CU_ASSERT(listed(r, "tp.shards"));
    c[1].tp = 2;
    hx_coverage_fill(r, c, 2, 20, 4);
    CU_ASSERT_FALSE(listed(r, "tp.shards"));
    hx_report_free(r);
}

void test_thresholds_register(void)
{
    CU_pSuite s = CU_add_suite("thresholds", NULL, NULL);
    CU_add_test(s, "test_thresholds_table", test_thresholds_table);
    CU_add_test(s, "test_thresholds_stream_key_tile", test_thresholds_stream_key_tile);
    CU_add_test(s, "test_thresholds_row_split", test_thresholds_row_split);
    CU_add_test(s, "test_thresholds_coverage", test_thresholds_coverage);
    CU_add_test(s, "test_thresholds_prefix_reuse", test_thresholds_prefix_reuse);
}
