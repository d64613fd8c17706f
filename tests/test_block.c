/* test_block.c — bidirectional chunks and the iterative block sampler (kvd_block.h). */
#include "kvd_block.h"
#include "fixtures.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lm_model *mask_model(void)
{
    return tf_synth_load("tiny-mask", 7);
}

/* Causal: row 0 of a chunk ignores the later tokens; bidirectional: it sees them. */
static void test_block_bidir_attention(void)
{
    lm_model *m = mask_model();
    lm_err err = {0};
    const uint32_t nv = m->hp.n_vocab;
    lm_ctx_params cp = {.backend = "naive", .n_ctx = 16};
    lm_ctx *c = NULL;
    CU_ASSERT_FATAL(lm_ctx_create(&c, m, &cp, &err) == LM_OK);
    float *a = malloc(3 * nv * sizeof(float)), *b = malloc(3 * nv * sizeof(float));
    const int32_t t1[3] = {300, 301, 302}, t2[3] = {300, 305, 306};
    for (int bidir = 0; bidir < 2; ++bidir) {
        lm_ctx_set_bidir(c, bidir);
        lm_ctx_reset(c);
        CU_ASSERT_FATAL(lm_forward(c, t1, 3, LM_LOGITS_ALL, a, &err) == LM_OK);
        lm_ctx_reset(c);
        CU_ASSERT_FATAL(lm_forward(c, t2, 3, LM_LOGITS_ALL, b, &err) == LM_OK);
        const bool same_row0 = memcmp(a, b, nv * sizeof(float)) == 0;
        CU_ASSERT_EQUAL(same_row0, !bidir);
    }
    lm_ctx_free(c);
    free(a);
    free(b);
    lm_model_free(m);
}

static void test_block_sampler_commits(void)
{
    lm_model *m = mask_model();
    lm_err err = {0};
    const int32_t mask = (int32_t)m->hp.n_vocab - 1;
    const int32_t prompt[6] = {1, 300, 310, 320, 300, 310};
    int32_t tok[2][16];
    uint32_t iter[2][16];
    const uint32_t steps[2] = {1, 0};
    for (int r = 0; r < 2; ++r) {
        lm_ctx_params cp = {.backend = "naive", .n_ctx = 32};
        lm_ctx *c = NULL;
        CU_ASSERT_FATAL(lm_ctx_create(&c, m, &cp, &err) == LM_OK);
        lm_block_params p = {.block = 8, .n_blocks = 2, .max_iters = 5, .threshold = 0.5,
                             .mask_id = mask, .step = steps[r]};
        lm_block_trace tr = {.tokens = tok[r], .iter = iter[r]};
        CU_ASSERT_FATAL(lm_block_generate(c, prompt, 6, &p, &tr, &err) == LM_OK);
        CU_ASSERT(tr.n_iters >= 2 && tr.n_iters <= 10);
        /* decisions were taken, so their margins are finite and >= 0 */
        CU_ASSERT(tr.min_logit_gap >= 0.0 && isfinite(tr.min_logit_gap));
        CU_ASSERT(tr.min_commit_gap >= 0.0 && isfinite(tr.min_commit_gap));
        for (int i = 0; i < 16; ++i) {
            CU_ASSERT_NOT_EQUAL(tok[r][i], mask);
            CU_ASSERT(iter[r][i] >= 1 && iter[r][i] <= 5);
        }
        lm_ctx_free(c);
    }
    /* the naive backend's rows do not depend on the prefill chunk: equal runs */
    CU_ASSERT(memcmp(tok[0], tok[1], sizeof tok[0]) == 0);
    CU_ASSERT(memcmp(iter[0], iter[1], sizeof iter[0]) == 0);
    /* threshold 0: every position passes in the first iteration */
    lm_ctx_params cp = {.backend = "naive", .n_ctx = 32};
    lm_ctx *c = NULL;
    CU_ASSERT_FATAL(lm_ctx_create(&c, m, &cp, &err) == LM_OK);
    lm_block_params p = {.block = 8, .n_blocks = 1, .max_iters = 5, .threshold = 0.0,
                         .mask_id = mask};
    lm_block_trace tr = {.tokens = tok[0], .iter = iter[0]};
    CU_ASSERT_FATAL(lm_block_generate(c, prompt, 6, &p, &tr, &err) == LM_OK);
    CU_ASSERT_EQUAL(tr.n_iters, 1u);
    lm_ctx_reset(c);
    p.mask_id = (int32_t)m->hp.n_vocab;
    CU_ASSERT_EQUAL(lm_block_generate(c, prompt, 6, &p, &tr, &err), LM_E_INPUT);
    lm_ctx_free(c);
    lm_model_free(m);
}

/* LLaDA's low-confidence schedule: iteration t of S commits ceil(left / (S - t + 1))
 * positions, so S = 4 on a block of 8 commits 2 per iteration in 4 iterations, and S = 16 one
 * per iteration in 8; no early stop; the naive backend gives the same run at every step. */
static void test_block_low_confidence_schedule(void)
{
    lm_model *m = mask_model();
    lm_err err = {0};
    const int32_t mask = (int32_t)m->hp.n_vocab - 1;
    const int32_t prompt[6] = {1, 300, 310, 320, 300, 310};
    const uint32_t caps[2] = {4, 16}, want_iters[2] = {4, 8}, per_iter[2] = {2, 1};
    for (int r = 0; r < 2; ++r) {
        int32_t tok[2][8];
        uint32_t iter[2][8];
        for (int st = 0; st < 2; ++st) {
            lm_ctx_params cp = {.backend = "naive", .n_ctx = 32};
            lm_ctx *c = NULL;
            CU_ASSERT_FATAL(lm_ctx_create(&c, m, &cp, &err) == LM_OK);
            lm_block_params p = {.block = 8, .n_blocks = 1, .max_iters = caps[r],
                                 .criterion = LM_BLOCK_LOW_CONFIDENCE, .mask_id = mask,
                                 .step = st ? 0 : 1};
            lm_block_trace tr = {.tokens = tok[st], .iter = iter[st]};
            CU_ASSERT_FATAL(lm_block_generate(c, prompt, 6, &p, &tr, &err) == LM_OK);
            CU_ASSERT_EQUAL(tr.n_iters, want_iters[r]);
            uint32_t count[17] = {0};
            for (int i = 0; i < 8; ++i) {
                CU_ASSERT_NOT_EQUAL(tok[st][i], mask);
                CU_ASSERT_FATAL(iter[st][i] >= 1 && iter[st][i] <= want_iters[r]);
                count[iter[st][i]]++;
            }
            for (uint32_t t = 1; t <= want_iters[r]; ++t)
                CU_ASSERT_EQUAL(count[t], per_iter[r]);
            CU_ASSERT(tr.min_commit_gap >= 0.0 && isfinite(tr.min_commit_gap));
            lm_ctx_free(c);
        }
        CU_ASSERT(memcmp(tok[0], tok[1], sizeof tok[0]) == 0);
        CU_ASSERT(memcmp(iter[0], iter[1], sizeof iter[0]) == 0);
    }
    lm_model_free(m);
}

/* A block model whose masked positions all get the same logits: with Wo = 0 attention adds
 * nothing, so a row depends only on its own token. embd is the embedding scale (tied output):
 * at 1 the logits are a few units apart; at 1e5 the top logit leads by far more than 745, where
 * exp underflows to 0 in double, so every candidate is certain (confidence exactly 1, entropy
 * exactly 0). */
static void tie_model(tf_model *t, float embd)
{
    lm_hparams hp;
    memset(&hp, 0, sizeof hp);
    snprintf(hp.arch, sizeof hp.arch, "llama");
    hp.n_vocab = 40, hp.n_embd = 16, hp.n_layer = 2, hp.n_head = 2, hp.n_head_kv = 2;
    hp.head_dim = 8, hp.n_ff = 32, hp.n_rot = 8, hp.n_ctx_train = 64;
    hp.rms_eps = 1e-5f, hp.rope_theta = 10000.0f, hp.rope_type = LM_ROPE_NORM;
    hp.tied_output = true;
    const tf_scales sc = {.embd = embd, .norm = 0.5f, .wq = 0.5f, .wk = 0.5f, .wv = 0.5f,
                          .wo = 0.0f, .w_gate_up = 0.5f, .w_down = 0.3f};
    tf_model_build(t, &hp, false, &sc, 11);
    /* The mask token (39) embeds as half of token 5 (tok_embd is the arena's first matrix):
     * a masked row's own logit is then half of token 5's, never the row's largest, so the
     * softmax mass sits on a candidate. */
    for (uint32_t d = 0; d < hp.n_embd; ++d)
        t->arena[39 * hp.n_embd + d] = 0.5f * t->arena[5 * hp.n_embd + d];
}

/* One block of 4 after a 3-token prompt; iter receives each position's iteration. */
static void run_tie_block(const lm_model *m, lm_block_criterion crit, double threshold,
                          uint32_t iter[4], double *min_commit_gap)
{
    lm_err err = {0};
    lm_ctx_params cp = {.backend = "naive", .n_ctx = 16};
    lm_ctx *c = NULL;
    CU_ASSERT_FATAL(lm_ctx_create(&c, m, &cp, &err) == LM_OK);
    const int32_t prompt[3] = {1, 7, 9};
    int32_t tok[4];
    lm_block_params p = {.block = 4, .n_blocks = 1, .max_iters = 4, .criterion = crit,
                         .threshold = threshold, .mask_id = 39};
    lm_block_trace tr = {.tokens = tok, .iter = iter};
    CU_ASSERT_FATAL(lm_block_generate(c, prompt, 3, &p, &tr, &err) == LM_OK);
    *min_commit_gap = tr.min_commit_gap;
    lm_ctx_free(c);
}

/* Ties go to the lower position, for every criterion: every masked position of tie_model's
 * block has the same logits, so every choice among them is a tie. LOW_CONFIDENCE over 4
 * iterations commits one position per iteration, lowest first; CONFIDENCE (threshold 1, not
 * reached) and ENTROPY (threshold 0, not reached) commit the single best, position 0, then
 * stop as stable at iteration 2. */
static void test_block_ties_to_lower_position(void)
{
    tf_model t;
    tie_model(&t, 1.0f);
    const lm_block_criterion crit[3] = {LM_BLOCK_LOW_CONFIDENCE, LM_BLOCK_CONFIDENCE,
                                        LM_BLOCK_ENTROPY};
    const double thr[3] = {0.0, 1.0, 0.0};
    const uint32_t want[3][4] = {{1, 2, 3, 4}, {1, 2, 2, 2}, {1, 2, 2, 2}};
    for (int k = 0; k < 3; ++k) {
        uint32_t iter[4];
        double gap;
        run_tie_block(&t.m, crit[k], thr[k], iter, &gap);
        for (int i = 0; i < 4; ++i)
            CU_ASSERT_EQUAL(iter[i], want[k][i]);
        CU_ASSERT_EQUAL(gap, 0.0); /* every decision was a tie */
    }
    tf_model_free(&t);
}

/* Thresholds are inclusive: a certain candidate (confidence exactly 1, entropy exactly 0)
 * passes CONFIDENCE 1 and ENTROPY 0, so every position commits at iteration 1. */
static void test_block_thresholds_inclusive(void)
{
    tf_model t;
    tie_model(&t, 1e5f);
    const lm_block_criterion crit[2] = {LM_BLOCK_CONFIDENCE, LM_BLOCK_ENTROPY};
    const double thr[2] = {1.0, 0.0};
    for (int k = 0; k < 2; ++k) {
        uint32_t iter[4];
        double gap;
        run_tie_block(&t.m, crit[k], thr[k], iter, &gap);
        for (int i = 0; i < 4; ++i)
            CU_ASSERT_EQUAL(iter[i], 1u);
        CU_ASSERT_EQUAL(gap, 0.0); /* |confidence - threshold| = 0 */
    }
    tf_model_free(&t);
}

void test_block_register(void)
{
    CU_pSuite s = CU_add_suite("block", NULL, NULL);
    CU_add_test(s, "test_block_bidir_attention", test_block_bidir_attention);
    CU_add_test(s, "test_block_sampler_commits", test_block_sampler_commits);
    CU_add_test(s, "test_block_low_confidence_schedule", test_block_low_confidence_schedule);
    CU_add_test(s, "test_block_ties_to_lower_position", test_block_ties_to_lower_position);
    CU_add_test(s, "test_block_thresholds_inclusive", test_block_thresholds_inclusive);
}
