/* f16.c — float32 to IEEE binary16 and to bfloat16, rounded to nearest, ties to even: the
 * encodings the GGUF writer stores and the engine's float16 KV rounding uses. Decoding is each
 * part's own (engine/dequant.c, reference/ref_dequant.c). */
#include "kvd_gguf.h"

#include <string.h>

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
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

uint16_t lm_f32_to_bf16(float f)
{
    uint32_t x = f32_bits(f);
    if ((x & 0x7fffffffu) > 0x7f800000u) /* NaN: truncate and force quiet */
        return (uint16_t)((x >> 16) | 0x40u);
    x += 0x7fffu + ((x >> 16) & 1u); /* ties to even; overflow carries to Inf correctly */
    return (uint16_t)(x >> 16);
}
