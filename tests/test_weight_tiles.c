/* test_weight_tiles.c — products whose B is a weight kept in its file's type (weight_tiles.c)
 * against the same products on the float32 arena's values: bitwise for the backends whose
 * outputs depend only on their row of A, their row of B and k (naive, naive-sr, det at every
 * thread count), for every type the engine loads, on random odd shapes, including the
 * tensor-parallel views that start mid-block; and whole forward passes of models loaded both
 * ways. */
#include "../engine/backend.h"
#include "kvd_engine.h"
#include "plan/synth.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Random blocks of `type` for a [rows][k] matrix, each block drawn again (up to 10000 times)
 * until it decodes to finite values of magnitude <= 64, so that products compare real sums,
 * not infinities. Returns the bytes ([rows][row_bytes]); *f gets the decoded values. */
static uint8_t *random_blocks(lm_tensor_type type, uint32_t rows, uint32_t k, size_t *row_bytes,
                              float *f /* [rows][k] */, uint64_t *st)
{
    const size_t be = lm_tensor_type_block_elems(type), bb = lm_tensor_type_block_bytes(type);
    const size_t nb = (size_t)rows * k / be;
    *row_bytes = k / be * bb;
    uint8_t *q = malloc(nb * bb);
    CU_ASSERT_FATAL(q != NULL);
    const lm_to_f32_fn dec = lm_type_to_f32((uint32_t)type);
    for (size_t b = 0; b < nb; ++b) {
        uint8_t *blk = q + b * bb;
        float *v = f + b * be;
        bool ok = false;
        for (int tries = 0; tries < 10000 && !ok; ++tries) {
            for (size_t i = 0; i < bb; ++i)
                blk[i] = (uint8_t)tu_rand_u64(st);
            dec(blk, v, 1);
            ok = lm_blocks_first_bad(type, blk, v, 1) == 1;
            for (size_t i = 0; i < be && ok; ++i)
                ok = v[i] >= -64.0f && v[i] <= 64.0f;
        }
        CU_ASSERT_FATAL(ok);
    }
    return q;
}

/* One product C [m][n] = A [m][k] . B^T, B = columns [k0, k0 + kk) of rows of w (k columns
 * each), on be: the blocks' view against the float32 view of the same values. Returns
 * whether the two are bitwise equal. */
static bool blocks_equal_f32(lm_backend *be, const lm_wt *wq, const lm_wt *wf, uint32_t m,
                             uint32_t n, uint32_t k, uint32_t k0, const float *a /* [m][k] */,
                             float *c_q /* [m][n] */, float *c_f /* [m][n] */)
{
    const uint32_t kk = k - k0;
    const lm_nt_part pq0 = lm_nt_weight(wq, 0, n, k, c_q, n);
    const lm_nt_part pf0 = lm_nt_weight(wf, 0, n, k, c_f, n);
    CU_ASSERT(pq0.bq.data != NULL && pq0.b == NULL && pf0.bq.data == NULL);
    const lm_nt_part pq = lm_nt_sub(&pq0, 0, k0, n, c_q, n);
    const lm_nt_part pf = lm_nt_sub(&pf0, 0, k0, n, c_f, n);
    memset(c_q, 0xff, (size_t)m * n * sizeof *c_q); /* NaN: an output left unwritten differs */
    memset(c_f, 0, (size_t)m * n * sizeof *c_f);
    lm_gemm_nt_batch(be, m, kk, 1.0f, a + k0, k, &pq, 1);
    lm_gemm_nt_batch(be, m, kk, 1.0f, a + k0, k, &pf, 1);
    return memcmp(c_q, c_f, (size_t)m * n * sizeof *c_q) == 0;
}

/* Every loadable type (17), random odd shapes, 1 to 4 threads of det, naive and naive-sr. */
static void test_weight_tiles_fused_equals_arena(void)
{
    uint64_t st = tu_seed() ^ 0x71e5;
    static const char *const backends[] = {"naive", "naive-sr:seed=3", "det", "det", "det",
                                           "det"};
    static const int threads[] = {1, 1, 1, 2, 3, 4};
    const uint32_t ms[] = {1, 3, 9, 17}; /* det: one-row gemv, 4 x 8 tiles, packed tiles */
    uint32_t n_types = 0, n_products = 0, n_diff = 0;
    for (uint32_t t = 0; t < 256; ++t) {
        if (!lm_tensor_type_loadable((lm_tensor_type)t))
            continue;
        ++n_types;
        const uint32_t be_el = (uint32_t)lm_tensor_type_block_elems((lm_tensor_type)t);
        for (int shape = 0; shape < 3; ++shape) {
            /* k: 1 to 3 blocks (odd lengths for one-element types); n odd; the last shape is
             * larger than one tile at one thread (weight_tiles.c LM_WTILE_FLOATS) */
            const uint32_t k = be_el == 1 ? 1 + 2 * (uint32_t)(tu_rand_u64(&st) % 150)
                                          : be_el * (1 + (uint32_t)(tu_rand_u64(&st) % 3));
            const uint32_t n = shape == 2 ? 1 + 2 * (98304 / k / 2 + 20)
                                          : 1 + 2 * (uint32_t)(tu_rand_u64(&st) % 60);
            /* a tensor-parallel shard of k starting mid-block (or at 0) */
            const uint32_t k0 = shape == 1 && k > 1 ? 1 + (uint32_t)(tu_rand_u64(&st) % (k - 1))
                                                    : 0;
            const uint32_t m = ms[tu_rand_u64(&st) % 4];
            float *bf = malloc((size_t)n * k * sizeof *bf), *a = malloc((size_t)m * k * sizeof *a);
            float *cq = malloc((size_t)m * n * sizeof *cq), *cf = malloc((size_t)m * n * sizeof *cf);
            CU_ASSERT_FATAL(bf && a && cq && cf);
            size_t row_bytes;
            uint8_t *q = random_blocks((lm_tensor_type)t, n, k, &row_bytes, bf, &st);
            for (size_t i = 0; i < (size_t)m * k; ++i)
                a[i] = tu_rand_f32(&st);
            const lm_wt wq = {NULL, q, row_bytes, t};
            lm_wt wf = lm_wt_f32(bf);
            wf.type = t;
            for (size_t bi = 0; bi < sizeof backends / sizeof backends[0]; ++bi) {
                lm_backend *be = NULL;
                lm_err err = {0};
                CU_ASSERT_EQUAL_FATAL(lm_backend_create(&be, backends[bi], threads[bi], &err),
                                      LM_OK);
                CU_ASSERT_EQUAL_FATAL(lm_backend_reserve_wtiles(be, k, &err), LM_OK);
                const bool same = blocks_equal_f32(be, &wq, &wf, m, n, k, k0, a, cq, cf);
                CU_ASSERT(same);
                ++n_products;
                if (!same && n_diff++ < 5)
                    fprintf(stderr, "\n  %s, %d threads, %s: m %u n %u k %u from %u differs",
                            backends[bi], threads[bi], lm_tensor_type_name((lm_tensor_type)t), m,
                            n, k, k0);
                lm_backend_destroy(be);
            }
            free(q), free(bf), free(a), free(cq), free(cf);
        }
    }
    CU_ASSERT_EQUAL(n_types, 17);
    fprintf(stderr, "\n  %u types, %u products, %u differ from the float32 arena's", n_types,
            n_products, n_diff);
}

/* A batch of products with B in blocks of different types beside a float32 one (the forward
 * pass's Q, K, V of a mixed file) equals each product alone on float32 values. */
static void test_weight_tiles_mixed_batch(void)
{
    uint64_t st = tu_seed() ^ 0xba7c;
    const uint32_t k = 512, m = 5, n[3] = {37, 129, 3};
    const lm_tensor_type types[2] = {LM_TYPE_Q4_K, LM_TYPE_Q8_0};
    float *a = malloc((size_t)m * k * sizeof *a), *bf[3], *cq[3], *cf[3];
    uint8_t *q[2];
    lm_wt wq[3], wf[3];
    CU_ASSERT_FATAL(a != NULL);
    for (size_t i = 0; i < (size_t)m * k; ++i)
        a[i] = tu_rand_f32(&st);
    for (int i = 0; i < 3; ++i) {
        bf[i] = malloc((size_t)n[i] * k * sizeof(float));
        cq[i] = malloc((size_t)m * n[i] * sizeof(float));
        cf[i] = malloc((size_t)m * n[i] * sizeof(float));
        CU_ASSERT_FATAL(bf[i] && cq[i] && cf[i]);
        if (i < 2) {
            size_t rb;
            q[i] = random_blocks(types[i], n[i], k, &rb, bf[i], &st);
            wq[i] = (lm_wt){NULL, q[i], rb, (uint32_t)types[i]};
        } else {
            for (size_t j = 0; j < (size_t)n[i] * k; ++j)
                bf[i][j] = tu_rand_f32(&st);
            wq[i] = lm_wt_f32(bf[i]);
        }
        wf[i] = lm_wt_f32(bf[i]);
    }
    for (int threads = 1; threads <= 3; ++threads) {
        lm_backend *be = NULL;
        lm_err err = {0};
        CU_ASSERT_EQUAL_FATAL(lm_backend_create(&be, "det", threads, &err), LM_OK);
        CU_ASSERT_EQUAL_FATAL(lm_backend_reserve_wtiles(be, k, &err), LM_OK);
        lm_nt_part pq[3], pf[3];
        for (int i = 0; i < 3; ++i) {
            pq[i] = lm_nt_weight(&wq[i], 0, n[i], k, cq[i], n[i]);
            pf[i] = lm_nt_weight(&wf[i], 0, n[i], k, cf[i], n[i]);
        }
        lm_gemm_nt_batch(be, m, k, 1.0f, a, k, pq, 3);
        for (int i = 0; i < 3; ++i) {
            lm_gemm_nt_batch(be, m, k, 1.0f, a, k, &pf[i], 1);
            CU_ASSERT_EQUAL(memcmp(cq[i], cf[i], (size_t)m * n[i] * sizeof(float)), 0);
        }
        lm_backend_destroy(be);
    }
    for (int i = 0; i < 3; ++i)
        free(bf[i]), free(cq[i]), free(cf[i]);
    free(q[0]), free(q[1]), free(a);
}

/* Greedy logits of a few positions of path's model, loaded in mode, on backend/threads. */
static float *run_logits(const char *path, lm_weights_mode mode, const char *backend,
                         int threads, uint32_t step, uint32_t *nv)
{
    lm_model *m = NULL;
    lm_ctx *c = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_model_load_mode(&m, path, mode, &err), LM_OK);
    CU_ASSERT_EQUAL(m->weights_mode, mode);
    const lm_ctx_params p = {.backend = backend, .n_threads = threads, .n_ctx = 32};
    CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&c, m, &p, &err), LM_OK);
    *nv = m->hp.n_vocab;
    enum { N = 11 };
    int32_t tok[N];
    for (uint32_t i = 0; i < N; ++i)
        tok[i] = (int32_t)(1 + (i * 7919u) % (m->hp.n_vocab - 1));
    float *lg = malloc((size_t)(N + 1) * *nv * sizeof *lg); /* prefill's last + one per decode */
    CU_ASSERT_FATAL(lg != NULL);
    CU_ASSERT_EQUAL_FATAL(lm_prefill(c, tok, N - 4, step, lg, &err), LM_OK);
    for (uint32_t i = N - 4; i < N; ++i) /* decode: one row at a time */
        CU_ASSERT_EQUAL_FATAL(lm_forward(c, &tok[i], 1, LM_LOGITS_LAST,
                                         lg + (size_t)(i - (N - 4) + 1) * *nv, &err), LM_OK);
    lm_ctx_free(c);
    lm_model_free(m);
    return lg;
}

/* Synthetic models in F16 and BF16 (kept as stored) and gpt-oss with MXFP4 experts (expert
 * rows in blocks): the same logits bits with weights in the file's types as with the float32
 * arena. (The K-quant mixes need widths this size of model does not have; the real models'
 * cases cover them: cases/gemma3.case, cases/qwen2.5-coder-0.5b.case.) */
static void test_weight_tiles_model_file_equals_arena(void)
{
    static const struct { const char *preset; lm_tensor_type type; } models[] = {
        {"tiny", LM_TYPE_F16}, {"tiny", LM_TYPE_BF16}, {"gptoss-mxfp4", LM_TYPE_F16}};
    static const struct { const char *backend; int threads; uint32_t step; } cfg[] = {
        {"naive", 1, 0}, {"det", 1, 3}, {"det", 2, 0}, {"det", 4, 1}};
    for (size_t mi = 0; mi < sizeof models / sizeof models[0]; ++mi) {
        char path[1024];
        lm_err err = {0};
        snprintf(path, sizeof path, "%s/wtiles-%s-%zu.gguf", tu_tmpdir(), models[mi].preset, mi);
        CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, models[mi].preset, 17 + mi, models[mi].type,
                                             &err), LM_OK);
        for (size_t ci = 0; ci < sizeof cfg / sizeof cfg[0]; ++ci) {
            uint32_t nv;
            float *f = run_logits(path, LM_WEIGHTS_FILE, cfg[ci].backend, cfg[ci].threads,
                                  cfg[ci].step, &nv);
            float *a = run_logits(path, LM_WEIGHTS_ARENA, cfg[ci].backend, cfg[ci].threads,
                                  cfg[ci].step, &nv);
            const bool same = memcmp(f, a, (size_t)5 * nv * sizeof *f) == 0; /* rows written */
            CU_ASSERT(same);
            if (!same)
                fprintf(stderr, "\n  %s %s, %s %d threads step %u: file and arena differ",
                        models[mi].preset, lm_tensor_type_name(models[mi].type), cfg[ci].backend,
                        cfg[ci].threads, cfg[ci].step);
            free(f), free(a);
        }
    }
}

/* $KVDRIFT_WEIGHTS picks the mode; another value is one line. */
static void test_weight_tiles_mode_env(void)
{
    lm_weights_mode mode;
    lm_err err = {0};
    const char *old = getenv("KVDRIFT_WEIGHTS");
    char *keep = old != NULL ? strdup(old) : NULL;
    unsetenv("KVDRIFT_WEIGHTS");
    CU_ASSERT_EQUAL(lm_weights_mode_env(&mode, &err), LM_OK);
    CU_ASSERT_EQUAL(mode, LM_WEIGHTS_FILE);
    setenv("KVDRIFT_WEIGHTS", "arena", 1);
    CU_ASSERT_EQUAL(lm_weights_mode_env(&mode, &err), LM_OK);
    CU_ASSERT_EQUAL(mode, LM_WEIGHTS_ARENA);
    setenv("KVDRIFT_WEIGHTS", "file", 1);
    CU_ASSERT_EQUAL(lm_weights_mode_env(&mode, &err), LM_OK);
    CU_ASSERT_EQUAL(mode, LM_WEIGHTS_FILE);
    setenv("KVDRIFT_WEIGHTS", "f32", 1);
    CU_ASSERT_EQUAL(lm_weights_mode_env(&mode, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "KVDRIFT_WEIGHTS=f32: expected file or arena"));
    lm_model *m = NULL;
    lm_err load_err = {0};
    const char *path = tu_model_path("stories260K.gguf");
    if (path != NULL) { /* a good file: the value alone is refused */
        CU_ASSERT_EQUAL(lm_model_load(&m, path, &load_err), LM_E_INPUT);
        CU_ASSERT_PTR_NULL(m);
        CU_ASSERT_PTR_NOT_NULL(strstr(load_err.msg, "KVDRIFT_WEIGHTS=f32"));
    }
    if (keep != NULL)
        setenv("KVDRIFT_WEIGHTS", keep, 1);
    else
        unsetenv("KVDRIFT_WEIGHTS");
    free(keep);
}

void test_weight_tiles_register(void)
{
    CU_pSuite s = CU_add_suite("weight_tiles", NULL, NULL);
    CU_add_test(s, "test_weight_tiles_fused_equals_arena", test_weight_tiles_fused_equals_arena);
    CU_add_test(s, "test_weight_tiles_mixed_batch", test_weight_tiles_mixed_batch);
    CU_add_test(s, "test_weight_tiles_model_file_equals_arena",
                test_weight_tiles_model_file_equals_arena);
    CU_add_test(s, "test_weight_tiles_mode_env", test_weight_tiles_mode_env);
}
