/* test_seqcheck.c — the speculative-decoding verdict's rules (speculative_verdict.h) on hand-built trace
 * pairs: a token difference is a TIE_FLIP only when BOTH the verify row's error is within E
 * and plain's lead is within E_gap; a history that differs before (or at) the first token
 * difference is a SEQ_MISMATCH whatever the rows; equal tokens are EXACT or NOISE; a NaN or
 * Inf in a speculative row is NONFINITE, also after the cache-policy explanation. */
#include "judge/speculative_verdict.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { NV = 4, NG = 3 };

typedef struct pair_buf {
    int32_t tok[2][NG];
    uint64_t hist[2][NG];
    float raw[2][NG][NV];
    hx_spec_pair p;
} pair_buf;

/* Both sides: tokens 1, 1, 1 with histories 10, 11, 12 and the same rows. */
static void pair_init(pair_buf *b)
{
    memset(b, 0, sizeof *b);
    static const float row[NV] = {0.0f, 2.0f, 1.995f, -1.0f};
    for (int side = 0; side < 2; ++side)
        for (int s = 0; s < NG; ++s) {
            b->tok[side][s] = 1;
            b->hist[side][s] = 10u + (uint64_t)s;
            memcpy(b->raw[side][s], row, sizeof row);
        }
    b->p.n_gen = NG;
    b->p.n_vocab = NV;
    b->p.plain = (hx_spec_side){.tokens = b->tok[0], .hist = b->hist[0], .raw = &b->raw[0][0][0]};
    b->p.spec = (hx_spec_side){.tokens = b->tok[1], .hist = b->hist[1], .raw = &b->raw[1][0][0]};
}

static hx_class judge(const pair_buf *b)
{
    const int32_t prompt[1] = {0};
    const lm_penalty_params pen = lm_penalty_defaults(); /* repeat 1: rows unchanged */
    hx_seq_verdict v;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_seq_judge(&v, &b->p, prompt, 1, &pen, 1e-3, 1e-2, &err) == LM_OK);
    return v.cls;
}

static void test_seqcheck_rules(void)
{
    pair_buf b;
    pair_init(&b);
    CU_ASSERT_EQUAL(judge(&b), HX_EXACT);
    b.raw[1][2][3] += 1e-4f; /* rows differ by rounding, tokens equal */
    CU_ASSERT_EQUAL(judge(&b), HX_NOISE);

    /* step 1: spec took token 2, plain's lead 0.005 <= E_gap 0.01 */
    pair_init(&b);
    b.tok[1][1] = 2;
    b.raw[1][1][0] += 1e-4f; /* err 1e-4 <= E 1e-3 */
    CU_ASSERT_EQUAL(judge(&b), HX_TIE_FLIP);
    b.raw[1][1][3] += 0.5f; /* err 0.5 > E: the verify row is wrong, not a rounding */
    CU_ASSERT_EQUAL(judge(&b), HX_SEQ_MISMATCH);

    pair_init(&b);
    b.tok[1][1] = 2;
    b.raw[0][1][2] = b.raw[1][1][2] = 1.9f; /* err 0, lead 0.1 > E_gap: no near tie */
    CU_ASSERT_EQUAL(judge(&b), HX_SEQ_MISMATCH);

    /* histories: differing at the token's step or before it is a mismatch; after it, a
     * consequence (the near tie of step 1 decides) */
    static const int hist_step[3] = {1, 0, 2};
    static const hx_class want[3] = {HX_SEQ_MISMATCH, HX_SEQ_MISMATCH, HX_TIE_FLIP};
    for (int k = 0; k < 3; ++k) {
        pair_init(&b);
        b.tok[1][1] = 2;
        b.hist[1][hist_step[k]] ^= 0x5u;
        for (int s = hist_step[k] + 1; s < NG; ++s)
            b.hist[1][s] ^= 0x5u;
        CU_ASSERT_EQUAL(judge(&b), want[k]);
    }
    /* a history difference with equal tokens */
    pair_init(&b);
    b.hist[1][2] ^= 0x5u;
    CU_ASSERT_EQUAL(judge(&b), HX_SEQ_MISMATCH);

    /* a NaN or Inf in the speculative rows, tokens equal or a near tie, is NONFINITE (the row
     * is broken, not rounded), also where plain's row holds the same value; a history
     * mismatch stays the more severe verdict */
    static const float bad[3] = {NAN, INFINITY, -INFINITY};
    for (int k = 0; k < 3; ++k) {
        pair_init(&b);
        b.raw[1][2][0] = bad[k];
        CU_ASSERT_EQUAL(judge(&b), HX_NONFINITE);
        b.raw[0][2][0] = bad[k];
        CU_ASSERT_EQUAL(judge(&b), HX_NONFINITE);
        pair_init(&b);
        b.tok[1][1] = 2;
        b.raw[1][1][0] += 1e-4f;
        b.raw[1][2][3] = bad[k];
        CU_ASSERT_EQUAL(judge(&b), HX_NONFINITE);
        b.hist[1][0] ^= 0x5u;
        CU_ASSERT_EQUAL(judge(&b), HX_SEQ_MISMATCH);
    }
}

/* Rule 4 is the last word: a SEQ_MISMATCH whose speculative rows hold a NaN or Inf stays a
 * failure when the exact-window policy explains the token difference (SEMANTIC would pass
 * it): NONFINITE, as classify's rule 1 makes any tensor with a NaN; without the NaN the same
 * explanation gives SEMANTIC. */
static void test_seqcheck_nonfinite_survives_policy(void)
{
    const int32_t prompt[1] = {0};
    const lm_penalty_params pen = lm_penalty_defaults();
    const hx_seq_verdict window = {.cls = HX_EXACT, .first_tok = -1, .first_hist = -1,
                                   .nonfinite_step = -1};
    for (int with_nan = 0; with_nan < 2; ++with_nan) {
        pair_buf b;
        pair_init(&b);
        b.tok[1][1] = 2;
        b.raw[1][1][3] += 0.5f; /* err 0.5 > E: SEQ_MISMATCH */
        if (with_nan)
            b.raw[1][2][0] = NAN;
        hx_seq_verdict v;
        lm_err err = {0};
        CU_ASSERT_FATAL(hx_seq_judge(&v, &b.p, prompt, 1, &pen, 1e-3, 1e-2, &err) == LM_OK);
        CU_ASSERT_EQUAL(v.cls, HX_SEQ_MISMATCH);
        CU_ASSERT_EQUAL(v.nonfinite_step, with_nan ? 2 : -1);
        hx_seq_explain_policy(&v, &window);
        CU_ASSERT_EQUAL(v.cls, with_nan ? HX_NONFINITE : HX_SEMANTIC);
        CU_ASSERT_EQUAL(hx_class_fails(v.cls), with_nan == 1);
    }
}

void test_seqcheck_register(void)
{
    CU_pSuite s = CU_add_suite("seqcheck", NULL, NULL);
    CU_add_test(s, "test_seqcheck_rules", test_seqcheck_rules);
    CU_add_test(s, "test_seqcheck_nonfinite_survives_policy",
                test_seqcheck_nonfinite_survives_policy);
}
