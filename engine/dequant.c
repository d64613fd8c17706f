/* dequant.c — tensor element types: block sizes, f16/bf16 conversions, dequantization to f32.
 *
 * Block layouts exactly as ggml defines them (ggml-common.h), little-endian:
 *   Q4_0: 32 elements in 18 bytes: f16 d, then 16 bytes qs. Byte j holds element j in its low
 *         nibble and element j + 16 in its high nibble; x = (nibble - 8) * d.
 *   Q4_1: 32 elements in 20 bytes: f16 d, f16 m, then 16 bytes qs (same nibble order);
 *         x = nibble * d + m.
 *   Q8_0: 32 elements in 34 bytes: f16 d, then 32 int8 qs; x = qs[j] * d.
 * Each product and sum is done in float32 as ggml's reference dequantizers do (d widened from
 * f16 exactly, then one float multiply, and for Q4_1 one float add: no fused multiply-add since
 * the build uses -ffp-contract=off), so the values are bitwise those of ggml. */
#include "kvd_gguf.h"

#include <inttypes.h>
#include <string.h>

size_t lm_tensor_type_block_bytes(lm_tensor_type type)
{
    switch (type) {
    case LM_TYPE_F32: return 4;
    case LM_TYPE_F16: return 2;
    case LM_TYPE_BF16: return 2;
    case LM_TYPE_Q4_0: return 18;
    case LM_TYPE_Q4_1: return 20;
    case LM_TYPE_Q8_0: return 34;
    }
    return 0;
}

size_t lm_tensor_type_block_elems(lm_tensor_type type)
{
    switch (type) {
    case LM_TYPE_F32: case LM_TYPE_F16: case LM_TYPE_BF16: return 1;
    case LM_TYPE_Q4_0: case LM_TYPE_Q4_1: case LM_TYPE_Q8_0: return 32;
    }
    return 0;
}

const char *lm_tensor_type_name(lm_tensor_type type)
{
    switch (type) {
    case LM_TYPE_F32: return "F32";
    case LM_TYPE_F16: return "F16";
    case LM_TYPE_BF16: return "BF16";
    case LM_TYPE_Q4_0: return "Q4_0";
    case LM_TYPE_Q4_1: return "Q4_1";
    case LM_TYPE_Q8_0: return "Q8_0";
    }
    return "unknown";
}

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Exact: every f16 value is a float32 value. Subnormals are normalised by shifting. */
float lm_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) /* Inf or NaN: keep the payload (shifted into the top mantissa bits) */
        return bits_f32(sign | 0x7f800000u | (man << 13));
    if (exp == 0) {
        if (man == 0)
            return bits_f32(sign); /* ±0 */
        /* subnormal: value = man * 2^-24; normalise */
        int e = -1;
        do {
            man <<= 1;
            ++e;
        } while ((man & 0x400u) == 0);
        man &= 0x3ffu;
        return bits_f32(sign | (uint32_t)(127 - 15 - e) << 23 | (man << 13));
    }
    return bits_f32(sign | (exp + 127 - 15) << 23 | (man << 13));
}

/* Round to nearest, ties to even; overflow goes to ±Inf, NaN stays NaN (quiet). */
uint16_t lm_f32_to_f16(float f)
{
    uint32_t x = f32_bits(f);
    uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    uint32_t exp = (x >> 23) & 0xffu;
    uint32_t man = x & 0x7fffffu;
    if (exp == 0xff) /* Inf, or NaN with the quiet bit set so a payload cannot become Inf */
        return (uint16_t)(sign | 0x7c00u | (man ? 0x200u | (man >> 13) : 0));
    int e = (int)exp - 127 + 15; /* f16 biased exponent */
    if (e >= 0x1f)
        return (uint16_t)(sign | 0x7c00u);
    if (e <= 0) {
        /* subnormal in f16 (or zero): value = m * 2^-24 with m = full mantissa >> shift */
        if (e < -10)
            return sign; /* below half the smallest subnormal: rounds to ±0 */
        uint32_t m = man | 0x800000u;     /* implicit bit */
        uint32_t shift = (uint32_t)(14 - e); /* 24-bit mantissa -> 10-bit subnormal field */
        uint32_t q = m >> shift;
        uint32_t rem = m & ((1u << shift) - 1);
        uint32_t half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1u)))
            ++q; /* may carry into the smallest normal: the encoding handles it */
        return (uint16_t)(sign | q);
    }
    uint32_t q = ((uint32_t)e << 10) | (man >> 13);
    uint32_t rem = man & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (q & 1u)))
        ++q; /* a carry out of the mantissa bumps the exponent; up to 0x7c00 = Inf */
    return (uint16_t)(sign | q);
}

float lm_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

uint16_t lm_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate and force quiet */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u); /* ties to even; overflow carries to Inf correctly */
    return (uint16_t)(x >> 16);
}

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

int lm_gguf_tensor_to_f32(float *out, const lm_gguf_tensor *t, lm_err *err)
{
    size_t be = lm_tensor_type_block_elems(t->type);
    size_t bb = lm_tensor_type_block_bytes(t->type);
    if (be == 0)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "tensor '%s': type %d cannot be dequantized",
                       t->name, (int)t->type);
    if (t->ne[0] % be != 0 || t->n_elem % be != 0 || t->n_elem / be * bb != t->nbytes)
        return LM_FAIL(err, LM_E_INPUT, "tensor '%s': %" PRIu64 " elements and %" PRIu64
                       " bytes do not form whole %s blocks", t->name, t->n_elem, t->nbytes,
                       lm_tensor_type_name(t->type));
    const uint8_t *p = t->data; /* [nbytes], validated by the reader */
    uint64_t nb = t->n_elem / be;
    switch (t->type) {
    case LM_TYPE_F32:
        memcpy(out, p, (size_t)t->nbytes); /* little-endian host (x86-64, aarch64) */
        break;
    case LM_TYPE_F16:
        for (uint64_t i = 0; i < nb; ++i)
            out[i] = lm_f16_to_f32(rd16(p + 2 * i));
        break;
    case LM_TYPE_BF16:
        for (uint64_t i = 0; i < nb; ++i)
            out[i] = lm_bf16_to_f32(rd16(p + 2 * i));
        break;
    case LM_TYPE_Q4_0:
        for (uint64_t b = 0; b < nb; ++b, p += 18, out += 32) {
            float d = lm_f16_to_f32(rd16(p));
            const uint8_t *qs = p + 2;
            for (int j = 0; j < 16; ++j) {
                out[j] = (float)((int)(qs[j] & 0x0f) - 8) * d;
                out[j + 16] = (float)((int)(qs[j] >> 4) - 8) * d;
            }
        }
        break;
    case LM_TYPE_Q4_1:
        for (uint64_t b = 0; b < nb; ++b, p += 20, out += 32) {
            float d = lm_f16_to_f32(rd16(p));
            float m = lm_f16_to_f32(rd16(p + 2));
            const uint8_t *qs = p + 4;
            for (int j = 0; j < 16; ++j) {
                out[j] = (float)(qs[j] & 0x0f) * d + m;
                out[j + 16] = (float)(qs[j] >> 4) * d + m;
            }
        }
        break;
    case LM_TYPE_Q8_0:
        for (uint64_t b = 0; b < nb; ++b, p += 34, out += 32) {
            float d = lm_f16_to_f32(rd16(p));
            for (int j = 0; j < 32; ++j)
                out[j] = (float)(int8_t)p[2 + j] * d;
        }
        break;
    }
    return LM_OK;
}
