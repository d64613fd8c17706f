/* act_format.c — the format ggml's CPU backend converts a matrix product's float32 input to,
 * per weight type (ggml-cpu.c type_traits_cpu[type].vec_dot_type), and the Q8_0 / Q8_K block
 * quantizers of that input, bitwise what ggml-cpu computes on x86 with AVX2 or AVX-512.
 *
 * Which quantizer ggml-cpu runs there (its mul_mat converts src1 with
 * type_traits_cpu[vec_dot_type].from_float, the repacked weights with ggml_quantize_mat_t):
 *   Q8_0 (and Q8_1, whose values are Q8_0's plus a block sum): quantize_row_q8_0 of
 *     ggml-cpu/arch/x86/quants.c, not quantize_row_q8_0_ref. Per block of 32: amax = max |x|,
 *     d = amax / 127 stored as binary16, id = 127 / amax (0 when amax is 0; the reference
 *     takes 1 / d, which differs from 127 / amax by an ulp for some amax), q = x * id rounded
 *     to nearest, ties to even (_mm256_round_ps; the reference's roundf rounds ties away),
 *     saturated to [-128, 127]. The 4-row repack quantizer (ggml_quantize_mat_q8_0_4x8) is the
 *     same arithmetic.
 *   Q8_K: quantize_row_q8_K of that file calls quantize_row_q8_K_ref. Per block of 256:
 *     max = the first element (in order) of largest magnitude, with its sign; a block of zeros
 *     gives d = 0 and q = 0; else iscale = -127 / max, q = nearest_int(iscale * x) (ties to
 *     even), at most 127, and d = 1 / iscale (float32). The AVX2 repack quantizer of groups of
 *     4 rows (ggml_quantize_mat_q8_K_4x8, used for repacked Q4_K weights) differs in one case
 *     only: when +amax and -amax both occur it takes max = +amax, where the reference takes
 *     the first; not modelled (activations holding both signs of the same largest magnitude).
 * The value a product reads is q * d (d after its binary16 rounding for Q8_0), in float32. */
#include "kvd_profile.h"

#include "kvd_gguf.h"

#include <math.h>

static const lm_round_spec none = {LM_ROUND_NONE, 0, 0, 0};
static const lm_round_spec f16 = LM_ROUND_SPEC_F16;
static const lm_round_spec bf16 = LM_ROUND_SPEC_BF16;
static const lm_round_spec q8_0 = {LM_ROUND_Q8_0, 0, 0, 0};
static const lm_round_spec q8_k = {LM_ROUND_Q8_K, 0, 0, 0};

const lm_round_spec *lm_vec_dot_spec(uint32_t type)
{
    switch ((lm_tensor_type)type) {
    case LM_TYPE_F16:
        return &f16; /* ggml_cpu_fp32_to_fp16: round to nearest even */
    case LM_TYPE_BF16:
        return &bf16; /* ggml_cpu_fp32_to_bf16: round to nearest even */
    case LM_TYPE_Q1_0: case LM_TYPE_Q4_0: case LM_TYPE_Q5_0: case LM_TYPE_Q8_0:
    case LM_TYPE_MXFP4: case LM_TYPE_NVFP4: case LM_TYPE_IQ4_NL:
    case LM_TYPE_Q4_1: case LM_TYPE_Q5_1: /* Q8_1: Q8_0's values plus a block sum */
        return &q8_0;
    case LM_TYPE_Q2_K: case LM_TYPE_Q3_K: case LM_TYPE_Q4_K: case LM_TYPE_Q5_K:
    case LM_TYPE_Q6_K: case LM_TYPE_IQ2_XXS: case LM_TYPE_IQ2_XS: case LM_TYPE_IQ3_XXS:
    case LM_TYPE_IQ3_S: case LM_TYPE_IQ2_S: case LM_TYPE_IQ1_S: case LM_TYPE_IQ1_M:
    case LM_TYPE_IQ4_XS: case LM_TYPE_TQ1_0: case LM_TYPE_TQ2_0:
        return &q8_k;
    default:
        return &none; /* F32 (vec_dot_type F32) and types that are never a weight */
    }
}

uint32_t lm_q8_block_size(lm_round_kind kind)
{
    return kind == LM_ROUND_Q8_K ? 256u : 32u;
}

void lm_q8_0_scale(const float *x, uint32_t n, float *d_fp16, float *inv_d)
{
    float amax = 0.0f;
    for (uint32_t i = 0; i < n; ++i) /* left to right */
        if (fabsf(x[i]) > amax)
            amax = fabsf(x[i]);
    *inv_d = amax != 0.0f ? 127.0f / amax : 0.0f;
    *d_fp16 = lm_round_float_rn(amax / 127.0f, &f16);
}

void lm_q8_K_scale(const float *x, uint32_t n, float *d, float *iscale)
{
    float amax = 0.0f, max = 0.0f;
    for (uint32_t i = 0; i < n; ++i) /* left to right: the first of largest magnitude */
        if (fabsf(x[i]) > amax) {
            amax = fabsf(x[i]);
            max = x[i];
        }
    if (amax == 0.0f) {
        *d = *iscale = 0.0f;
        return;
    }
    *iscale = -127.0f / max;
    *d = 1.0f / *iscale;
}

void lm_q8_scale(lm_round_kind kind, const float *x, uint32_t n, float *d, float *inv)
{
    if (kind == LM_ROUND_Q8_K)
        lm_q8_K_scale(x, n, d, inv);
    else
        lm_q8_0_scale(x, n, d, inv);
}

int8_t lm_q8_code(float t)
{
    const float r = nearbyintf(t); /* ties to even in the default rounding mode */
    if (isnan(r))
        return -128; /* x86's cvtps_epi32 gives INT32_MIN, saturated by packs */
    return (int8_t)(r > 127.0f ? 127 : r < -128.0f ? -128 : (int)r);
}

void lm_q8_quantize(int8_t *q, float *d, lm_round_kind kind, const float *x, uint32_t n)
{
    float inv;
    lm_q8_scale(kind, x, n, d, &inv);
    for (uint32_t i = 0; i < n; ++i)
        q[i] = lm_q8_code(x[i] * inv);
}
