/* test_act_format.c — ggml-cpu's activation formats (engine/act_format.c): the vec_dot_type
 * table per weight type, and the Q8_K and Q8_0 quantizers bit-equal to blocks that ggml's own
 * code wrote (tests/data/ggml_q8: all zeros, a largest element that is negative, ties, the two
 * signs of the largest magnitude, random blocks where ggml's x86 Q8_0 and its reference
 * quantizer disagree). */
#include "kvd_gguf.h"
#include "kvd_profile.h"
#include "test_util.h"

#include "data/ggml_q8/expected.h"

#include <string.h>

static void test_act_format_vec_dot_table(void)
{
    /* ggml-cpu.c type_traits_cpu[type].vec_dot_type */
    static const uint32_t q8_k[] = {LM_TYPE_Q2_K, LM_TYPE_Q3_K, LM_TYPE_Q4_K, LM_TYPE_Q5_K,
                                    LM_TYPE_Q6_K, LM_TYPE_IQ4_XS, LM_TYPE_IQ2_XXS, LM_TYPE_IQ1_M,
                                    LM_TYPE_TQ2_0};
    static const uint32_t q8_0[] = {LM_TYPE_Q4_0, LM_TYPE_Q5_0, LM_TYPE_Q8_0, LM_TYPE_MXFP4,
                                    LM_TYPE_IQ4_NL, LM_TYPE_Q4_1, LM_TYPE_Q5_1};
    for (size_t i = 0; i < sizeof q8_k / sizeof *q8_k; ++i)
        CU_ASSERT_EQUAL(lm_vec_dot_spec(q8_k[i])->kind, LM_ROUND_Q8_K);
    for (size_t i = 0; i < sizeof q8_0 / sizeof *q8_0; ++i)
        CU_ASSERT_EQUAL(lm_vec_dot_spec(q8_0[i])->kind, LM_ROUND_Q8_0);
    const lm_round_spec *h = lm_vec_dot_spec(LM_TYPE_F16), *b = lm_vec_dot_spec(LM_TYPE_BF16);
    CU_ASSERT(h->kind == LM_ROUND_FLOAT && h->bits == 11 && h->emin == -14 && h->emax == 15);
    CU_ASSERT(b->kind == LM_ROUND_FLOAT && b->bits == 8 && b->emin == -126 && b->emax == 127);
    CU_ASSERT_EQUAL(lm_vec_dot_spec(LM_TYPE_F32)->kind, LM_ROUND_NONE);
    /* one pointer per format: a product batch groups its weights by it */
    CU_ASSERT_PTR_EQUAL(lm_vec_dot_spec(LM_TYPE_Q4_K), lm_vec_dot_spec(LM_TYPE_Q6_K));
    CU_ASSERT_PTR_EQUAL(lm_vec_dot_spec(LM_TYPE_Q5_0), lm_vec_dot_spec(LM_TYPE_Q8_0));
    CU_ASSERT_EQUAL(lm_q8_block_size(LM_ROUND_Q8_K), 256u);
    CU_ASSERT_EQUAL(lm_q8_block_size(LM_ROUND_Q8_0), 32u);
}

/* One block through lm_q8_quantize and through lm_round_rows_rn against ggml's codes q and
 * scale d: codes equal, d bit-equal, every rounded value q * d exactly (no tolerance: ggml's
 * dequantized value is the same float product). */
static void check_block(lm_round_kind kind, const float *x, const int8_t *q, float d, uint32_t n,
                        const char *what)
{
    int8_t got[256];
    float gd;
    lm_q8_quantize(got, &gd, kind, x, n);
    int bad = memcmp(&gd, &d, sizeof d) != 0;
    for (uint32_t i = 0; i < n; ++i)
        bad += got[i] != q[i];
    float r[256];
    memcpy(r, x, n * sizeof *r);
    const lm_round_spec spec = {kind, 0, 0, 0};
    lm_round_rows_rn(r, 1, n, n, &spec);
    for (uint32_t i = 0; i < n; ++i)
        bad += memcmp(&r[i], &(float){(float)q[i] * d}, sizeof(float)) != 0;
    if (bad)
        printf("\n  %s: %d mismatches (d %a, ggml %a)", what, bad, (double)gd, (double)d);
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_act_format_q8_K_matches_ggml(void)
{
    check_block(LM_ROUND_Q8_K, q8k_x0, q8k_q0, q8k_d0, 256, "Q8_K zeros");
    check_block(LM_ROUND_Q8_K, q8k_x1, q8k_q1, q8k_d1, 256, "Q8_K negative max");
    check_block(LM_ROUND_Q8_K, q8k_x2, q8k_q2, q8k_d2, 256, "Q8_K ties");
    check_block(LM_ROUND_Q8_K, q8k_x3, q8k_q3, q8k_d3, 256, "Q8_K -a before +a");
    check_block(LM_ROUND_Q8_K, q8k_x4, q8k_q4, q8k_d4, 256, "Q8_K random");
    /* the ties of block 2 (iscale = -1): -0.5 -> 0, -1.5 -> 2, -2.5 -> 2 (to even) */
    CU_ASSERT(q8k_x2[1] == -3.5f && q8k_q2[1] == 4);
    CU_ASSERT(q8k_x2[3] == -1.5f && q8k_q2[3] == 2);
    CU_ASSERT(q8k_x2[5] == 0.5f && q8k_q2[5] == 0);
    /* block 3 holds -0.75 (first) and +0.75: the first sets iscale = -127 / -0.75 > 0 */
    CU_ASSERT(q8k_d3 > 0.0f && q8k_q3[20] == -127 && q8k_q3[200] == 127);
}

static void test_act_format_q8_0_matches_ggml_x86(void)
{
    check_block(LM_ROUND_Q8_0, q80_x0, q80_q0, q80_d0, 32, "Q8_0 zeros");
    check_block(LM_ROUND_Q8_0, q80_x1, q80_q1, q80_d1, 32, "Q8_0 ties");
    check_block(LM_ROUND_Q8_0, q80_x2, q80_q2, q80_d2, 32, "Q8_0 random 1");
    check_block(LM_ROUND_Q8_0, q80_x3, q80_q3, q80_d3, 32, "Q8_0 random 2");
    /* ties go to even (_mm256_round_ps), not away from zero (the reference's roundf) */
    CU_ASSERT(q80_x1[1] == -2.5f && q80_q1[1] == -2);
    /* a shorter last block (a row of 40): its own amax */
    float x[40] = {0};
    x[0] = 127.0f;
    x[33] = 2.0f;
    x[34] = 1.0f;
    const lm_round_spec q8 = {LM_ROUND_Q8_0, 0, 0, 0};
    lm_round_rows_rn(x, 1, 40, 40, &q8);
    float d2, inv2;
    lm_q8_0_scale((const float[]){2.0f}, 1, &d2, &inv2);
    CU_ASSERT_EQUAL(x[0], 127.0f);
    CU_ASSERT_EQUAL(x[33], 127.0f * d2);
    CU_ASSERT_EQUAL(x[34], 64.0f * d2); /* 1 * 127 / 2 = 63.5: the tie goes to 64 */
}

void test_act_format_register(void)
{
    CU_pSuite s = CU_add_suite("act_format", NULL, NULL);
    CU_add_test(s, "test_act_format_vec_dot_table", test_act_format_vec_dot_table);
    CU_add_test(s, "test_act_format_q8_K_matches_ggml", test_act_format_q8_K_matches_ggml);
    CU_add_test(s, "test_act_format_q8_0_matches_ggml_x86", test_act_format_q8_0_matches_ggml_x86);
}
