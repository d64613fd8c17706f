/* test_batch.c — several sequences in one forward call (lm_forward_batch): a sequence batched
 * with co-resident ones (prefilling or decoding alongside) gets the bits it gets alone on the
 * row-independent backends (det, naive); a NaN in a co-resident sequence's cache never reaches
 * it; mismatched or shared contexts and too many rows are refused with nothing fed. Runs on the
 * synthetic "tiny" model (and its MoE preset for the per-sequence routing). */
#include "kvd_engine.h"
#include "fixtures.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static lm_ctx *ctx_of(const lm_model *m, const char *backend, uint32_t batch_rows)
{
    lm_err err = {0};
    const lm_ctx_params p = {.backend = backend, .n_threads = 1, .n_ctx = 48,
                             .batch_rows = batch_rows};
    lm_ctx *c = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&c, m, &p, &err), LM_OK);
    return c;
}

static void fill(int32_t *t, uint32_t n, uint32_t salt, uint32_t n_vocab)
{
    for (uint32_t i = 0; i < n; ++i)
        t[i] = (int32_t)((i * 7u + salt * 13u + 1u) % n_vocab);
}

#define N_OURS 10u
#define N_DEC 3u
#define N_COMP 3u

/* Our sequence: a prefill of N_OURS tokens in one call, then N_DEC decode steps; logits
 * [N_DEC + 1][n_vocab] (the prompt's last row, then each step's). batched: three co-resident
 * sequences share every call, prefilling 7, 12 and 5 tokens alongside our prompt (decode mode:
 * already prefilled, one decode row each per call). poison: a NaN planted in the first
 * co-resident sequence's cache before our prompt. */
static void run_ours(float *out, const lm_model *m, const char *backend, bool batched,
                     bool decode_mode, bool poison)
{
    lm_err err = {0};
    const uint32_t nv = m->hp.n_vocab;
    lm_ctx *ours = ctx_of(m, backend, 64), *comp[N_COMP];
    int32_t toks[N_OURS + N_DEC], ctoks[N_COMP][16];
    const uint32_t clen[N_COMP] = {7, 12, 5};
    fill(toks, N_OURS + N_DEC, 1, nv);
    for (uint32_t j = 0; j < N_COMP; ++j) {
        comp[j] = ctx_of(m, backend, 0);
        fill(ctoks[j], 16, 2 + j, nv);
        if (decode_mode)
            CU_ASSERT_EQUAL_FATAL(lm_forward(comp[j], ctoks[j], clen[j], LM_LOGITS_NONE, NULL,
                                             &err), LM_OK);
    }
    if (poison) {
        CU_ASSERT_EQUAL_FATAL(lm_forward(comp[0], ctoks[0], 1, LM_LOGITS_NONE, NULL, &err),
                              LM_OK);
        ((float *)lm_ctx_k(comp[0], 0))[0] = NAN; /* the cache row it attends to next */
    }
    lm_seq_chunk q[1 + N_COMP];
    const uint32_t done = poison ? 1 : 0;
    q[0] = (lm_seq_chunk){ours, toks, N_OURS, LM_LOGITS_LAST, out};
    for (uint32_t j = 0; j < N_COMP; ++j)
        q[1 + j] = decode_mode ? (lm_seq_chunk){comp[j], ctoks[j] + clen[j], 1, LM_LOGITS_NONE, NULL}
                               : (lm_seq_chunk){comp[j], ctoks[j] + (j == 0 ? done : 0),
                                                clen[j] - (j == 0 ? done : 0), LM_LOGITS_NONE,
                                                NULL};
    CU_ASSERT_EQUAL_FATAL(lm_forward_batch(q, batched ? 1 + N_COMP : 1, &err), LM_OK);
    for (uint32_t s = 0; s < N_DEC; ++s) {
        q[0] = (lm_seq_chunk){ours, toks + N_OURS + s, 1, LM_LOGITS_LAST, out + (s + 1) * nv};
        for (uint32_t j = 0; j < N_COMP; ++j) /* the others decode alongside */
            q[1 + j] = (lm_seq_chunk){comp[j], ctoks[j] + 13 + s, 1, LM_LOGITS_NONE, NULL};
        CU_ASSERT_EQUAL_FATAL(lm_forward_batch(q, batched ? 1 + N_COMP : 1, &err), LM_OK);
    }
    for (uint32_t j = 0; j < N_COMP; ++j)
        lm_ctx_free(comp[j]);
    lm_ctx_free(ours);
}

/* det and naive compute each row alone: batched or not, prefilling or decoding alongside, the
 * same bits. blas's products see more rows when batched (printed, not asserted: whether
 * OpenBLAS's kernels change with the row count depends on the shapes and the CPU). */
static void test_batch_row_independent_backends(void)
{
    const char *presets[] = {"tiny", "moe"};
    for (size_t pi = 0; pi < 2; ++pi) {
        lm_model *m = tf_synth_load(presets[pi], 17);
        const size_t nv = m->hp.n_vocab, bytes = (N_DEC + 1) * nv * sizeof(float);
        float *alone = malloc(bytes), *with = malloc(bytes);
        CU_ASSERT_FATAL(alone != NULL && with != NULL);
        const char *backends[] = {"det", "naive", "blas"};
        for (size_t b = 0; b < 3; ++b)
            for (int mode = 0; mode < 2; ++mode) {
                run_ours(alone, m, backends[b], false, mode == 1, false);
                run_ours(with, m, backends[b], true, mode == 1, false);
                const bool same = memcmp(alone, with, bytes) == 0;
                if (b < 2)
                    CU_ASSERT(same);
                /* blas: other rounding, never other rows. Reordered float32 sums of at most
                 * n_ff = 512 terms move a logit by a few 1e-6 of the row's largest; 1e-3 of it
                 * is far above that and far below what a wrong row would give (order 1). */
                double big = 0.0;
                for (size_t i = 0; i < (N_DEC + 1) * nv; ++i)
                    big = fmax(big, fabs((double)alone[i]));
                CU_ASSERT(tu_max_abs_diff(alone, with, (N_DEC + 1) * nv) <= 1e-3 * big);
                fprintf(stderr, "\n  %s %s batch=4%s: %s", presets[pi], backends[b],
                        mode ? ":decode" : "", same ? "bitwise equal to alone" : "other bits");
            }
        free(alone);
        free(with);
        lm_model_free(m);
    }
    fprintf(stderr, "\n  ");
}

/* A NaN in a co-resident sequence's cache stays there: our rows are finite and equal to the
 * clean batched run's. */
static void test_batch_isolation(void)
{
    lm_model *m = tf_synth_load("tiny", 17);
    const size_t nv = m->hp.n_vocab, bytes = (N_DEC + 1) * nv * sizeof(float);
    float *clean = malloc(bytes), *poisoned = malloc(bytes);
    CU_ASSERT_FATAL(clean != NULL && poisoned != NULL);
    run_ours(clean, m, "det", true, false, false);
    run_ours(poisoned, m, "det", true, false, true);
    bool finite = true;
    for (size_t i = 0; i < (N_DEC + 1) * nv; ++i)
        finite = finite && isfinite(poisoned[i]);
    CU_ASSERT(finite);
    CU_ASSERT_EQUAL(memcmp(clean, poisoned, bytes), 0);
    free(clean);
    free(poisoned);
    lm_model_free(m);
}

/* Refusals leave every context as it was. */
static void test_batch_refusals(void)
{
    lm_model *m = tf_synth_load("tiny", 17), *other = tf_synth_load("moe", 17);
    lm_ctx *lead = ctx_of(m, "det", 8), *a = ctx_of(m, "det", 0), *b = ctx_of(other, "det", 0);
    lm_ctx *small = ctx_of(m, "det", 0), *naive = ctx_of(m, "naive", 0);
    int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    lm_err e1 = {0}, e2 = {0}, e3 = {0}, e4 = {0}, e5 = {0};
    lm_seq_chunk q[2] = {{lead, t, 4, LM_LOGITS_NONE, NULL}, {b, t, 4, LM_LOGITS_NONE, NULL}};
    CU_ASSERT_EQUAL(lm_forward_batch(q, 2, &e1), LM_E_INPUT); /* another model */
    q[1].ctx = lead;
    CU_ASSERT_EQUAL(lm_forward_batch(q, 2, &e2), LM_E_INPUT); /* shared context */
    q[1] = (lm_seq_chunk){a, t, 5, LM_LOGITS_NONE, NULL};
    CU_ASSERT_EQUAL(lm_forward_batch(q, 2, &e3), LM_E_INPUT); /* 9 rows, 8 held */
    CU_ASSERT_PTR_NOT_NULL(strstr(e3.msg, "batch_rows"));
    q[0].ctx = small;
    q[1].n = 4;
    CU_ASSERT_EQUAL(lm_forward_batch(q, 2, &e4), LM_E_INPUT); /* leads no batch */
    q[0].ctx = lead;
    q[1].ctx = naive;
    CU_ASSERT_EQUAL(lm_forward_batch(q, 2, &e5), LM_E_INPUT); /* another backend */
    /* another thread count: the leading backend's attention slots would overrun the other
     * context's scratch */
    lm_err e6 = {0};
    const lm_ctx_params two = {.backend = "det", .n_threads = 2, .n_ctx = 48, .batch_rows = 8};
    lm_ctx *lead2 = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&lead2, m, &two, &e6), LM_OK);
    q[0].ctx = lead2;
    q[1].ctx = a;
    CU_ASSERT_EQUAL(lm_forward_batch(q, 2, &e6), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e6.msg, "thread count"));
    lm_ctx_free(lead2);
    CU_ASSERT(lm_ctx_n_past(lead) == 0 && lm_ctx_n_past(a) == 0 && lm_ctx_n_past(naive) == 0);
    lm_ctx_free(lead);
    lm_ctx_free(a);
    lm_ctx_free(b);
    lm_ctx_free(small);
    lm_ctx_free(naive);
    lm_model_free(m);
    lm_model_free(other);
}

void test_batch_register(void)
{
    CU_pSuite s = CU_add_suite("batch", NULL, NULL);
    CU_add_test(s, "test_batch_row_independent_backends", test_batch_row_independent_backends);
    CU_add_test(s, "test_batch_isolation", test_batch_isolation);
    CU_add_test(s, "test_batch_refusals", test_batch_refusals);
}
