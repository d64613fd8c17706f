/* test_ctx_reuse.c — a context reused after lm_ctx_reset, or rolled back, computes what a
 * fresh one computes, bit for bit, for every architecture variant a context carries state for
 * (a rotating KV cache in both policies, sliding windows with sinks, mixture-of-experts
 * routing, both attention implementations); a rollback the cache cannot honour (its rows were
 * written over) is refused with LM_E_INPUT instead. */
#include "kvd_engine.h"
#include "kvd_speculative.h"
#include "fixtures.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Prefill tok[0..n) in chunks of `step` then decode `gen` greedy tokens; every logits row of
 * the decode steps goes to out [gen][n_vocab]. */
static int run(lm_ctx *c, const int32_t *tok, uint32_t n, uint32_t step, uint32_t gen, float *out,
               uint32_t nv)
{
    lm_err err = {0};
    if (lm_prefill(c, tok, n, step, out, &err) != LM_OK) {
        fprintf(stderr, "\n  prefill: %s\n", err.msg);
        return -1;
    }
    for (uint32_t g = 1; g < gen; ++g) {
        const int32_t t = lm_argmax(out + (size_t)(g - 1) * nv, nv);
        if (lm_forward(c, &t, 1, LM_LOGITS_LAST, out + (size_t)g * nv, &err) != LM_OK) {
            fprintf(stderr, "\n  decode: %s\n", err.msg);
            return -1;
        }
    }
    return 0;
}

static void test_ctx_reuse_after_reset(void)
{
    static const struct {
        const char *preset, *attn;
        uint32_t rot, keep;
        bool window;
    } cfg[] = {
        {"tiny", "dense", 8, 2, false}, {"tiny", "stream", 8, 2, true},
        {"tiny", "dense", 0, 0, false}, {"sinks-alt", "dense", 0, 0, false},
        {"sinks-alt", "stream", 0, 0, false}, {"moe-32x4", "dense", 0, 0, false},
        {"sinks-alt", "dense", 8, 1, true},
    };
    enum { GEN = 6 };
    int32_t first[20], second[13];
    uint64_t st = tu_seed();
    for (size_t i = 0; i < sizeof cfg / sizeof cfg[0]; ++i) {
        lm_model *m = tf_synth_load(cfg[i].preset, 3);
        const uint32_t nv = m->hp.n_vocab;
        for (size_t j = 0; j < 20; ++j)
            first[j] = (int32_t)(tu_rand_u64(&st) % nv);
        for (size_t j = 0; j < 13; ++j)
            second[j] = (int32_t)(tu_rand_u64(&st) % nv);
        const lm_ctx_params cp = {.backend = "naive", .n_ctx = 48, .attn = cfg[i].attn,
                                  .rot_max_size = cfg[i].rot, .rot_keep = cfg[i].keep,
                                  .rot_window = cfg[i].window};
        lm_ctx *used = NULL, *fresh = NULL;
        lm_err err = {0};
        CU_ASSERT_FATAL(lm_ctx_create(&used, m, &cp, &err) == LM_OK);
        CU_ASSERT_FATAL(lm_ctx_create(&fresh, m, &cp, &err) == LM_OK);
        float *a = malloc((size_t)GEN * nv * sizeof(float));
        float *b = malloc((size_t)GEN * nv * sizeof(float));
        CU_ASSERT_FATAL(a != NULL && b != NULL);
        CU_ASSERT_FATAL(run(used, first, 20, 7, GEN, a, nv) == 0);
        lm_ctx_reset(used);
        CU_ASSERT_EQUAL(lm_ctx_n_past(used), 0u);
        CU_ASSERT_FATAL(run(used, second, 13, 5, GEN, a, nv) == 0);
        CU_ASSERT_FATAL(run(fresh, second, 13, 5, GEN, b, nv) == 0);
        const bool same = memcmp(a, b, (size_t)GEN * nv * sizeof(float)) == 0;
        if (!same)
            fprintf(stderr, "\n  %s attn=%s rot=%u/%u%s: reused context differs from a fresh "
                    "one\n", cfg[i].preset, cfg[i].attn, cfg[i].rot, cfg[i].keep,
                    cfg[i].window ? " window" : "");
        CU_ASSERT(same);
        free(a);
        free(b);
        lm_ctx_free(used);
        lm_ctx_free(fresh);
        lm_model_free(m);
    }
}

/* Rotating cache, exact-window policy (a position's result depends only on the tokens, not on
 * the chunking): after feeding `fed` tokens one at a time, a rollback to r either is refused
 * with LM_E_INPUT or leaves a context whose next step equals a fresh context fed tokens
 * [0, r) then the same token. 7 tokens stay within the 8 slots (every rollback must
 * succeed); 16 wrap around, writing over older positions. */
static void test_ctx_reuse_rollback_or_refuse(void)
{
    lm_model *m = tf_synth_load("tiny", 3);
    const uint32_t nv = m->hp.n_vocab;
    const lm_ctx_params cp = {.backend = "naive", .n_ctx = 32, .rot_max_size = 8, .rot_keep = 2,
                              .rot_window = true};
    int32_t tok[16];
    uint64_t st = tu_seed() + 1;
    for (size_t j = 0; j < 16; ++j)
        tok[j] = (int32_t)(tu_rand_u64(&st) % nv);
    const int32_t next = 5;
    float *a = malloc(nv * sizeof(float)), *b = malloc(nv * sizeof(float));
    CU_ASSERT_FATAL(a != NULL && b != NULL);
    const uint32_t fed_n[2] = {7, 16};
    int accepted = 0;
    for (int f = 0; f < 2; ++f) {
        const uint32_t fed = fed_n[f];
        for (uint32_t r = 0; r < fed; ++r) {
            lm_err err = {0};
            lm_ctx *c = NULL, *fresh = NULL;
            CU_ASSERT_FATAL(lm_ctx_create(&c, m, &cp, &err) == LM_OK);
            for (uint32_t j = 0; j < fed; ++j)
                CU_ASSERT_FATAL(lm_forward(c, &tok[j], 1, LM_LOGITS_NONE, NULL, &err) == LM_OK);
            const int rc = lm_ctx_rollback(c, r, &err);
            if (rc != LM_OK) {
                CU_ASSERT_EQUAL(rc, LM_E_INPUT);
                CU_ASSERT(fed > 8); /* within the slots every rollback is honoured */
                lm_ctx_free(c);
                continue;
            }
            ++accepted;
            CU_ASSERT_FATAL(lm_forward(c, &next, 1, LM_LOGITS_LAST, a, &err) == LM_OK);
            CU_ASSERT_FATAL(lm_ctx_create(&fresh, m, &cp, &err) == LM_OK);
            for (uint32_t j = 0; j < r; ++j)
                CU_ASSERT_FATAL(lm_forward(fresh, &tok[j], 1, LM_LOGITS_NONE, NULL, &err) ==
                                LM_OK);
            CU_ASSERT_FATAL(lm_forward(fresh, &next, 1, LM_LOGITS_LAST, b, &err) == LM_OK);
            const bool same = memcmp(a, b, nv * sizeof(float)) == 0;
            if (!same)
                fprintf(stderr, "\n  %u tokens fed, rolled back to %u: next step differs from a "
                        "fresh context's\n", fed, r);
            CU_ASSERT(same);
            lm_ctx_free(c);
            lm_ctx_free(fresh);
        }
    }
    CU_ASSERT(accepted >= 7);
    free(a);
    free(b);
    lm_model_free(m);
}

void test_ctx_reuse_register(void)
{
    CU_pSuite s = CU_add_suite("ctx_reuse", NULL, NULL);
    CU_add_test(s, "test_ctx_reuse_after_reset", test_ctx_reuse_after_reset);
    CU_add_test(s, "test_ctx_reuse_rollback_or_refuse", test_ctx_reuse_rollback_or_refuse);
}
