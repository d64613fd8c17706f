/* test_dequant.c — f16/bf16 conversions (special values first) and block dequantization of
 * every supported type against hand-computed blocks. Every comparison here is exact: each
 * expected value is a dyadic rational representable in float32, and ggml's definitions are a
 * single float multiply (and add) of exactly representable operands. */
#include "kvd_dequant.h"
#include "test_util.h"

#include <math.h>
#include <string.h>

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_dequant_f16_special_values(void)
{
    CU_ASSERT_EQUAL(bits(lm_f16_to_f32(0x0000)), 0x00000000u); /* +0 */
    CU_ASSERT_EQUAL(bits(lm_f16_to_f32(0x8000)), 0x80000000u); /* -0 */
    CU_ASSERT_EQUAL(lm_f16_to_f32(0x0001), ldexpf(1.0f, -24));  /* smallest subnormal */
    CU_ASSERT_EQUAL(lm_f16_to_f32(0x8001), -ldexpf(1.0f, -24));
    CU_ASSERT_EQUAL(lm_f16_to_f32(0x03ff), ldexpf(1023.0f, -24)); /* largest subnormal */
    CU_ASSERT_EQUAL(lm_f16_to_f32(0x0400), ldexpf(1.0f, -14));    /* smallest normal */
    CU_ASSERT_EQUAL(lm_f16_to_f32(0x3c00), 1.0f);
    CU_ASSERT_EQUAL(lm_f16_to_f32(0xc000), -2.0f);
    CU_ASSERT_EQUAL(lm_f16_to_f32(0x3555), 0.333251953125f);
    CU_ASSERT_EQUAL(lm_f16_to_f32(0x7bff), 65504.0f);
    CU_ASSERT_TRUE(isinf(lm_f16_to_f32(0x7c00)) && lm_f16_to_f32(0x7c00) > 0.0f);
    CU_ASSERT_TRUE(isinf(lm_f16_to_f32(0xfc00)) && lm_f16_to_f32(0xfc00) < 0.0f);
    CU_ASSERT_TRUE(isnan(lm_f16_to_f32(0x7e00)));
    CU_ASSERT_TRUE(isnan(lm_f16_to_f32(0x7c01))); /* signalling payload stays NaN */

    CU_ASSERT_EQUAL(lm_f32_to_f16(0.0f), 0x0000);
    CU_ASSERT_EQUAL(lm_f32_to_f16(-0.0f), 0x8000);
    CU_ASSERT_EQUAL(lm_f32_to_f16(1.0f), 0x3c00);
    CU_ASSERT_EQUAL(lm_f32_to_f16(65504.0f), 0x7bff);
    CU_ASSERT_EQUAL(lm_f32_to_f16(65519.996f), 0x7bff); /* below the midpoint to Inf */
    CU_ASSERT_EQUAL(lm_f32_to_f16(65520.0f), 0x7c00);   /* tie with odd 0x7bff: up to Inf */
    CU_ASSERT_EQUAL(lm_f32_to_f16(1e10f), 0x7c00);
    CU_ASSERT_EQUAL(lm_f32_to_f16(-INFINITY), 0xfc00);
    uint16_t n = lm_f32_to_f16(NAN);
    CU_ASSERT_TRUE((n & 0x7c00) == 0x7c00 && (n & 0x3ff) != 0);
    /* A NaN whose payload lives only in the low 13 bits must not turn into Inf. */
    float low_nan;
    uint32_t lb = 0x7f800001u;
    memcpy(&low_nan, &lb, 4);
    CU_ASSERT_NOT_EQUAL(lm_f32_to_f16(low_nan) & 0x3ff, 0);
    /* Ties to even, normal range: 1 + 2^-11 is halfway between 1 and 1 + 2^-10. */
    CU_ASSERT_EQUAL(lm_f32_to_f16(1.0f + ldexpf(1.0f, -11)), 0x3c00);
    CU_ASSERT_EQUAL(lm_f32_to_f16(1.0f + 3.0f * ldexpf(1.0f, -11)), 0x3c02);
    CU_ASSERT_EQUAL(lm_f32_to_f16(1.0f + ldexpf(1.0f, -11) + ldexpf(1.0f, -20)), 0x3c01);
    /* Subnormal range. */
    CU_ASSERT_EQUAL(lm_f32_to_f16(ldexpf(1.0f, -24)), 0x0001);
    CU_ASSERT_EQUAL(lm_f32_to_f16(ldexpf(1.0f, -25)), 0x0000);          /* tie to even 0 */
    CU_ASSERT_EQUAL(lm_f32_to_f16(ldexpf(3.0f, -26)), 0x0001);          /* 0.75 ulp: up */
    CU_ASSERT_EQUAL(lm_f32_to_f16(ldexpf(1.5f, -24)), 0x0002);          /* tie: even 2 */
    CU_ASSERT_EQUAL(lm_f32_to_f16(ldexpf(2.5f, -24)), 0x0002);          /* tie: even 2 */
    CU_ASSERT_EQUAL(lm_f32_to_f16(ldexpf(1023.5f, -24)), 0x0400);       /* carries to normal */
    CU_ASSERT_EQUAL(lm_f32_to_f16(-ldexpf(1.0f, -30)), 0x8000);         /* underflow keeps sign */
    CU_ASSERT_EQUAL(lm_f32_to_f16(ldexpf(1.0f, -140)), 0x0000);         /* f32 subnormal */
    /* Every non-NaN f16 survives f16 -> f32 -> f16 unchanged. */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
        if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff))
            continue;
        bad += lm_f32_to_f16(lm_f16_to_f32((uint16_t)h)) != h;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static void test_dequant_bf16_special_values(void)
{
    CU_ASSERT_EQUAL(bits(lm_bf16_to_f32(0x8000)), 0x80000000u);
    CU_ASSERT_EQUAL(lm_bf16_to_f32(0x3f80), 1.0f);
    CU_ASSERT_EQUAL(lm_bf16_to_f32(0x0001), ldexpf(1.0f, -133)); /* subnormal */
    CU_ASSERT_TRUE(isinf(lm_bf16_to_f32(0xff80)));
    CU_ASSERT_TRUE(isnan(lm_bf16_to_f32(0x7fc0)));
    CU_ASSERT_EQUAL(lm_f32_to_bf16(-0.0f), 0x8000);
    CU_ASSERT_EQUAL(lm_f32_to_bf16(1.0f + ldexpf(1.0f, -8)), 0x3f80);        /* tie: even */
    CU_ASSERT_EQUAL(lm_f32_to_bf16(1.0f + 3.0f * ldexpf(1.0f, -8)), 0x3f82); /* tie: even */
    CU_ASSERT_EQUAL(lm_f32_to_bf16(1.0f + ldexpf(1.0f, -8) + ldexpf(1.0f, -20)), 0x3f81);
    float big;
    uint32_t bb = 0x7f7f8000u; /* halfway between the largest bf16 (odd) and Inf */
    memcpy(&big, &bb, 4);
    CU_ASSERT_EQUAL(lm_f32_to_bf16(big), 0x7f80);
    CU_ASSERT_EQUAL(lm_f32_to_bf16(INFINITY), 0x7f80);
    float low_nan;
    uint32_t lb = 0x7f800001u;
    memcpy(&low_nan, &lb, 4);
    CU_ASSERT_TRUE(isnan(lm_bf16_to_f32(lm_f32_to_bf16(low_nan))));
    int bad = 0;
    for (uint32_t h = 0; h < 65536; ++h) {
        if ((h & 0x7f80) == 0x7f80 && (h & 0x7f))
            continue;
        bad += lm_f32_to_bf16(lm_bf16_to_f32((uint16_t)h)) != h;
    }
    CU_ASSERT_EQUAL(bad, 0);
}

static lm_gguf_tensor tensor(lm_tensor_type type, uint64_t n, const void *data, uint64_t nbytes)
{
    lm_gguf_tensor t = {"t", type, 1, {n, 1, 1, 1}, n, nbytes, data};
    return t;
}

static void test_dequant_plain_types(void)
{
    lm_err err = {0};
    const float f[3] = {1.5f, -0.0f, INFINITY};
    float out[3];
    lm_gguf_tensor t = tensor(LM_TYPE_F32, 3, f, 12);
    CU_ASSERT_EQUAL(lm_gguf_tensor_to_f32(out, &t, &err), LM_OK);
    CU_ASSERT_EQUAL(memcmp(out, f, 12), 0);
    const uint8_t h[6] = {0x00, 0x3c, 0x00, 0x80, 0x01, 0x00}; /* 1.0, -0, 2^-24 (LE) */
    t = tensor(LM_TYPE_F16, 3, h, 6);
    CU_ASSERT_EQUAL(lm_gguf_tensor_to_f32(out, &t, &err), LM_OK);
    CU_ASSERT_EQUAL(out[0], 1.0f);
    CU_ASSERT_EQUAL(bits(out[1]), 0x80000000u);
    CU_ASSERT_EQUAL(out[2], ldexpf(1.0f, -24));
    const uint8_t b[6] = {0x80, 0x3f, 0x40, 0xc0, 0xc0, 0x7f}; /* 1.0, -3.0, NaN */
    t = tensor(LM_TYPE_BF16, 3, b, 6);
    CU_ASSERT_EQUAL(lm_gguf_tensor_to_f32(out, &t, &err), LM_OK);
    CU_ASSERT_EQUAL(out[0], 1.0f);
    CU_ASSERT_EQUAL(out[1], -3.0f);
    CU_ASSERT_TRUE(isnan(out[2]));
    /* Byte count inconsistent with the element count: refused, nothing read. */
    t = tensor(LM_TYPE_F16, 3, h, 5);
    CU_ASSERT_EQUAL(lm_gguf_tensor_to_f32(out, &t, &err), LM_E_INPUT);
}

static void test_dequant_q4_0(void)
{
    /* Two blocks. Block 0: d = 0.5 (f16 0x3800); byte j = low nibble j, high nibble 15 - j,
     * so element j = (j - 8) * 0.5 and element 16 + j = (7 - j) * 0.5.
     * Block 1: d = -2 (0xc000), every byte 0x8F: elements 0..15 = (15-8)*-2 = -14,
     * elements 16..31 = (8-8)*-2 = -0. */
    uint8_t blk[36];
    blk[0] = 0x00;
    blk[1] = 0x38;
    for (int j = 0; j < 16; ++j)
        blk[2 + j] = (uint8_t)(j | (15 - j) << 4);
    blk[18] = 0x00;
    blk[19] = 0xc0;
    memset(blk + 20, 0x8f, 16);
    lm_gguf_tensor t = tensor(LM_TYPE_Q4_0, 64, blk, 36);
    float out[64];
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_gguf_tensor_to_f32(out, &t, &err), LM_OK);
    CU_ASSERT_EQUAL(out[0], -4.0f);
    CU_ASSERT_EQUAL(out[8], 0.0f);
    CU_ASSERT_EQUAL(out[15], 3.5f);
    CU_ASSERT_EQUAL(out[16], 3.5f);
    CU_ASSERT_EQUAL(out[31], -4.0f);
    for (int j = 0; j < 16; ++j) {
        CU_ASSERT_EQUAL(out[j], 0.5f * (float)(j - 8));
        CU_ASSERT_EQUAL(out[16 + j], 0.5f * (float)(7 - j));
        CU_ASSERT_EQUAL(out[32 + j], -14.0f);
        CU_ASSERT_EQUAL(out[48 + j], 0.0f);
    }
    CU_ASSERT_EQUAL(bits(out[48]), 0x80000000u); /* 0 * -2 = -0, as ggml computes it */
}

static void test_dequant_q4_1(void)
{
    /* d = 0.25 (0x3400), m = -1 (0xbc00); byte j = low nibble 15 - j, high nibble j:
     * element j = (15 - j) * 0.25 - 1, element 16 + j = j * 0.25 - 1. */
    uint8_t blk[20] = {0x00, 0x34, 0x00, 0xbc};
    for (int j = 0; j < 16; ++j)
        blk[4 + j] = (uint8_t)((15 - j) | j << 4);
    lm_gguf_tensor t = tensor(LM_TYPE_Q4_1, 32, blk, 20);
    float out[32];
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_gguf_tensor_to_f32(out, &t, &err), LM_OK);
    CU_ASSERT_EQUAL(out[0], 2.75f);
    CU_ASSERT_EQUAL(out[15], -1.0f);
    CU_ASSERT_EQUAL(out[16], -1.0f);
    CU_ASSERT_EQUAL(out[31], 2.75f);
    for (int j = 0; j < 16; ++j) {
        CU_ASSERT_EQUAL(out[j], (float)(15 - j) * 0.25f - 1.0f);
        CU_ASSERT_EQUAL(out[16 + j], (float)j * 0.25f - 1.0f);
    }
}

static void test_dequant_q8_0(void)
{
    /* d = 0.125 (0x3000); q_j = j * 8 - 128 as int8: element j = q_j / 8 = j - 16. Second block
     * d = 65504 (0x7bff) with q = 127, -128: the largest magnitudes. */
    uint8_t blk[68] = {0x00, 0x30};
    for (int j = 0; j < 32; ++j)
        blk[2 + j] = (uint8_t)(int8_t)(j * 8 - 128);
    blk[34] = 0xff;
    blk[35] = 0x7b;
    for (int j = 0; j < 32; ++j)
        blk[36 + j] = j % 2 ? 0x80 : 0x7f;
    lm_gguf_tensor t = tensor(LM_TYPE_Q8_0, 64, blk, 68);
    float out[64];
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_gguf_tensor_to_f32(out, &t, &err), LM_OK);
    for (int j = 0; j < 32; ++j)
        CU_ASSERT_EQUAL(out[j], (float)(j - 16));
    CU_ASSERT_EQUAL(out[32], 127.0f * 65504.0f);
    CU_ASSERT_EQUAL(out[33], -128.0f * 65504.0f);
}

void test_dequant_register(void)
{
    CU_pSuite s = CU_add_suite("dequant", NULL, NULL);
    CU_add_test(s, "test_dequant_f16_special_values", test_dequant_f16_special_values);
    CU_add_test(s, "test_dequant_bf16_special_values", test_dequant_bf16_special_values);
    CU_add_test(s, "test_dequant_plain_types", test_dequant_plain_types);
    CU_add_test(s, "test_dequant_q4_0", test_dequant_q4_0);
    CU_add_test(s, "test_dequant_q4_1", test_dequant_q4_1);
    CU_add_test(s, "test_dequant_q8_0", test_dequant_q8_0);
}
