/* test_mem_check.c — memory predicted before loading (harness/plan/mem_check.c, the engine's
 * lm_model_mem_plan and lm_ctx_predict_bytes) and a model file changed on disk after loading. */
#include "fs.h"
#include "kvd_engine.h"
#include "plan/mem_check.h"
#include "plan/synth.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static const char *tiny_path(const char *name)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s", tu_tmpdir(), name);
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_synth_write(p, "tiny", 0, LM_TYPE_F16, &err), LM_OK);
    return p;
}

static void test_mem_check_tokens_bound(void)
{
    CU_ASSERT_EQUAL(hx_mem_tokens_bound(NULL, NULL), 0);
    CU_ASSERT_EQUAL(hx_mem_tokens_bound("", NULL), 2);
    CU_ASSERT_EQUAL(hx_mem_tokens_bound("Once upon", NULL), 11);
    CU_ASSERT_EQUAL(hx_mem_tokens_bound(NULL, "1"), 1);
    CU_ASSERT_EQUAL(hx_mem_tokens_bound(NULL, "1,2,3"), 3);
}

/* The plan's figures are what loading and a context then take: the file's size, the float32
 * arena exactly, the KV cache exactly, and at least the scratch lm_ctx_create allocates (the
 * plan counts dense scores for every CPU). */
static void test_mem_check_plan_matches_load(void)
{
    const char *path = tiny_path("mem-tiny.gguf");
    lm_err err = {0};
    lm_mem_plan mp;
    CU_ASSERT_EQUAL_FATAL(lm_model_mem_plan(&mp, path, 48, &err), LM_OK);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    CU_ASSERT_EQUAL(mp.file, m->file_size);
    CU_ASSERT_EQUAL(mp.weights, (uint64_t)m->weights_n * sizeof(float));
    CU_ASSERT_EQUAL(mp.hp.n_vocab, m->hp.n_vocab);
    CU_ASSERT_EQUAL(mp.kv, 2u * m->hp.n_layer * 48u * m->hp.n_head_kv * m->hp.head_dim * 4u);
    for (int threads = 1; threads <= 2; ++threads) {
        lm_ctx_params cp = {.backend = "det", .n_threads = threads, .n_ctx = 48};
        lm_ctx *c = NULL;
        CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&c, m, &cp, &err), LM_OK);
        CU_ASSERT_TRUE(mp.scratch >= lm_ctx_scratch_bytes(c));
        CU_ASSERT_TRUE(mp.scratch <= 2 * lm_ctx_scratch_bytes(c) + 65536);
        lm_ctx_free(c);
    }
    lm_model_free(m);
    /* a file that is no model: the loader's error */
    const char *junk = tu_write_file("mem-junk.gguf", "GGUF", 4);
    CU_ASSERT_EQUAL(lm_model_mem_plan(&mp, junk, 8, &err), LM_E_INPUT);
}

/* Too little memory: LM_E_NOMEM, one line with every figure; enough: LM_OK and the sum. */
static void test_mem_check_refusal(void)
{
    const char *path = tiny_path("mem-tiny2.gguf");
    lm_err err = {0};
    const hx_mem_need need = {.n_ctx = 64, .ref_tokens = 16};
    uint64_t needed = 0;
    CU_ASSERT_EQUAL(hx_mem_check(&needed, path, &need, UINT64_MAX, &err), LM_OK);
    lm_mem_plan mp;
    CU_ASSERT_EQUAL_FATAL(lm_model_mem_plan(&mp, path, 64, &err), LM_OK);
    CU_ASSERT_TRUE(needed > mp.file + mp.weights + mp.kv + mp.scratch); /* + the reference's */
    CU_ASSERT_EQUAL(hx_mem_check(NULL, path, &need, needed, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_mem_check(NULL, path, &need, needed - 1, &err), LM_E_NOMEM);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "needs "));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "float32 weights"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "KV cache"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "reference"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "GiB available"));
    CU_ASSERT_PTR_NULL(strchr(err.msg, '\n'));
    lm_err_clear(&err);
    const hx_mem_need none = {0};
    uint64_t bare = 0;
    CU_ASSERT_EQUAL(hx_mem_check(&bare, path, &none, UINT64_MAX, &err), LM_OK);
    CU_ASSERT_EQUAL(bare, mp.file + mp.weights);
}

/* A file replaced after loading (other bytes, same size; or another size) is reported. */
static void test_mem_check_file_changed(void)
{
    const char *path = tiny_path("mem-tiny3.gguf");
    lm_err err = {0};
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_model_file_unchanged(m, &err), LM_OK);
    char *bytes;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&bytes, &n, path, SIZE_MAX, &err), LM_OK);
    bytes[n - 1] ^= 1; /* the last tensor's last byte */
    CU_ASSERT_EQUAL_FATAL(lm_write_file(path, bytes, n, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_model_file_unchanged(m, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "another content hash"));
    lm_err_clear(&err);
    CU_ASSERT_EQUAL_FATAL(lm_write_file(path, bytes, n / 2, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_model_file_unchanged(m, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "changed on disk since it was loaded"));
    fprintf(stderr, "\n  %s", err.msg);
    lm_err_clear(&err);
    bytes[n - 1] ^= 1;
    CU_ASSERT_EQUAL_FATAL(lm_write_file(path, bytes, n, &err), LM_OK);
    CU_ASSERT_EQUAL(lm_model_file_unchanged(m, &err), LM_OK);
    free(bytes);
    lm_model_free(m);
}

void test_mem_check_register(void)
{
    CU_pSuite s = CU_add_suite("mem_check", NULL, NULL);
    CU_add_test(s, "test_mem_check_tokens_bound", test_mem_check_tokens_bound);
    CU_add_test(s, "test_mem_check_plan_matches_load", test_mem_check_plan_matches_load);
    CU_add_test(s, "test_mem_check_refusal", test_mem_check_refusal);
    CU_add_test(s, "test_mem_check_file_changed", test_mem_check_file_changed);
}
