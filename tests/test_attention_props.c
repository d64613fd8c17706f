/* test_attention_props.c — properties every attention implementation (dense, streaming,
 * masked dense) on every CPU backend must hold, whatever its block, tile or lane layout:
 * a key whose score exceeds every other visible score by far more than float's exp range
 * (200, while lm_expf(-88.8) is already 0) takes the whole probability, so each query that
 * sees it returns exactly that key's value row, at every key index (every lane of a max
 * reduction, every tail), and no query returns a non-finite value. A softmax whose max
 * misses one entry, or subtracts a max that is not the row's, overflows there. */
#include "../engine/attention.h"
#include "../engine/attention_stream.h"
#include "../engine/backend.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { HD = 8, NH = 2, NKV = 1, MAX_KV = 21 };

/* q [n][NH][HD]: component 0 of every head is 1, the rest 0. k [n_kv][NKV][HD]: small random
 * values, and key `big`'s component 0 is 200 (score 200 at scale 1). v random. */
static void fill(float *q, float *k, float *v, uint32_t n, uint32_t n_kv, uint32_t big,
                 uint64_t *st)
{
    for (uint32_t i = 0; i < n * NH * HD; ++i)
        q[i] = i % HD == 0 ? 1.0f : 0.0f;
    for (uint32_t i = 0; i < n_kv * NKV * HD; ++i) {
        k[i] = 0.5f * tu_rand_f32(st);
        v[i] = tu_rand_f32(st);
    }
    k[(size_t)big * NKV * HD] = 200.0f;
}

/* Query i (position pos0 + i) against out: the big key's value row when it is visible. */
static int check_out(const float *out, const float *v, uint32_t n, uint32_t pos0, uint32_t big,
                     const char *what, uint32_t n_kv)
{
    int bad = 0;
    for (uint32_t i = 0; i < n; ++i)
        for (uint32_t h = 0; h < NH; ++h) {
            const float *o = out + ((size_t)i * NH + h) * HD;
            for (uint32_t d = 0; d < HD; ++d) {
                const bool sees = pos0 + i >= big;
                const bool ok = sees ? o[d] == v[(size_t)big * NKV * HD + d] : isfinite(o[d]);
                if (!ok && bad++ == 0)
                    fprintf(stderr, "\n  %s: n_kv %u, big key %u, query %u head %u dim %u: %g\n",
                            what, n_kv, big, pos0 + i, h, d, (double)o[d]);
            }
        }
    return bad;
}

static void test_attention_props_dominant_key(void)
{
    const char *backends[3] = {"naive", "blas", "det"};
    uint64_t st = tu_seed();
    float q[MAX_KV * NH * HD], k[MAX_KV * NKV * HD], v[MAX_KV * NKV * HD], out[MAX_KV * NH * HD];
    const size_t var_floats = lm_attn_masked_scratch(MAX_KV, MAX_KV) >
                                      lm_attn_stream_scratch(HD, 4)
                                  ? lm_attn_masked_scratch(MAX_KV, MAX_KV)
                                  : lm_attn_stream_scratch(HD, 4);
    float *var_scratch = malloc(var_floats * sizeof(float));
    CU_ASSERT_FATAL(var_scratch != NULL);
    int bad = 0;
    for (int b = 0; b < 3; ++b) {
        for (int threads = 1; threads <= 2; ++threads) {
            lm_backend *be = NULL;
            lm_err err = {0};
            CU_ASSERT_FATAL(lm_backend_create(&be, backends[b], threads, &err) == LM_OK);
            float *scores = malloc(lm_attention_dense_scratch(be, MAX_KV, MAX_KV) * sizeof(float));
            CU_ASSERT_FATAL(scores != NULL);
            for (uint32_t n_kv = 1; n_kv <= MAX_KV; ++n_kv)
                for (uint32_t big = 0; big < n_kv; ++big)
                    for (int chunk = 0; chunk < 2; ++chunk) {
                        /* decode: one query at the last position; prefill: every position */
                        const uint32_t n = chunk ? n_kv : 1, pos0 = n_kv - n;
                        fill(q, k, v, n, n_kv, big, &st);
                        const lm_attn_args a = {.n = n, .pos0 = pos0, .n_head = NH,
                                                .n_head_kv = NKV, .head_dim = HD, .scale = 1.0f,
                                                .q = q, .k = k, .v = v, .out = out,
                                                .scores = scores, .pool = be->pool};
                        lm_attention_dense(be, &a);
                        bad += check_out(out, v, n, pos0, big, backends[b], n_kv);
                        for (int impl = 0; impl < 2; ++impl) {
                            lm_attn_var_args va = {.n = n, .pos0 = pos0, .n_kv = n_kv,
                                                   .n_head = NH, .n_head_kv = NKV, .head_dim = HD,
                                                   .scale = 1.0f, .q = q, .k = k, .v = v,
                                                   .out = out, .tile = 4, .scratch = var_scratch,
                                                   .scratch_floats = var_floats};
                            if (impl == 0)
                                lm_attention_stream(be, &va);
                            else
                                lm_attention_masked(be, &va);
                            bad += check_out(out, v, n, pos0, big,
                                             impl == 0 ? "stream" : "masked", n_kv);
                        }
                    }
            free(scores);
            lm_backend_destroy(be);
        }
    }
    CU_ASSERT_EQUAL(bad, 0);
    free(var_scratch);
}

void test_attention_props_register(void)
{
    CU_pSuite s = CU_add_suite("attention_props", NULL, NULL);
    CU_add_test(s, "test_attention_props_dominant_key", test_attention_props_dominant_key);
}
