/* expf.h — lm_expf: the engine's own float32 e^x (engine-private, header-only so that the
 * elementwise loops calling it can be vectorized).
 *
 * Why not libm's expf: glibc picks an FMA or a non-FMA build of expf by CPU, and they differ
 * in the last bit on some inputs (glibc 2.36, all 2^32 floats: 2 of them, x = 32.564632f and
 * x = -63.099461f; GLIBC_TUNABLES=glibc.cpu.hwcaps=-FMA,-AVX2 selects the non-FMA build), so the
 * same binary can give different logits on different machines; and a call per element cannot be vectorized without
 * -ffast-math, which kvdrift never uses. lm_expf uses only +, -, *, comparisons and integer
 * bit operations, each correctly rounded IEEE float arithmetic (the build forbids FMA
 * contraction), so its result depends on nothing but x.
 *
 * Method: k = nearest integer to x * log2(e) (round-to-nearest via the 1.5 * 2^23 shifter);
 * r = (x - k * ln2_hi) - k * ln2_lo (Cody-Waite: k * ln2_hi is exact, ln2_hi has 16
 * significant bits and |k| <= 150); e^r by its degree-7 Taylor polynomial in Horner form
 * (|r| <= 0.347: truncation error < 2.6e-9 relative); then times 2^k as two exact powers of
 * two 2^(k/2) * 2^(k - k/2), so that results in the subnormal range are rounded once, at the
 * last multiply. Accuracy: within 2 ulp of e^x over the whole float range (test_expf checks
 * every 97th float in [-104, 89] and special values). Special values: NaN -> NaN, -Inf -> +0,
 * +Inf -> +Inf, x > 88.73 -> +Inf, x < -103.98 -> +0. */
#ifndef KVD_EXPF_H
#define KVD_EXPF_H

#include <stdint.h>
#include <string.h>

/* LM_VECTOR_CLONES on an elementwise loop builds it for AVX-512, AVX2 and the x86-64
 * baseline and picks one at load time (GCC function multiversioning). Every lane performs the
 * same IEEE operations as the scalar code (no reduction is reordered, and -ffp-contract=off
 * forbids FMA contraction in every clone), so the choice changes speed, never a bit. Not under
 * ThreadSanitizer: the clones' resolvers run while the dynamic loader relocates, before its
 * runtime is up, and an instrumented resolver crashes there. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && !defined(__SANITIZE_THREAD__)
#define LM_VECTOR_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
#else
#define LM_VECTOR_CLONES
#endif

static inline float lm_expf_pow2(int32_t k) /* 2^k for k in [-126, 127] */
{
    const uint32_t bits = (uint32_t)(k + 127) << 23;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static inline float lm_expf(float x)
{
    const float shifter = 0x1.8p23f;
    /* clamp: also keeps k inside the range the scaling below handles; NaN passes through */
    float xc = x < -104.0f ? -104.0f : x;
    xc = xc > 89.0f ? 89.0f : xc;
    const float t = xc * 0x1.715476p+0f + shifter; /* x log2(e) + 1.5 * 2^23 */
    const float kf = t - shifter;                   /* nearest integer, exactly */
    const float r = (xc - kf * 0x1.62e4p-1f) - kf * 0x1.7f7d1cp-20f;
    float p = 0x1.a01a02p-13f;          /* 1/5040 */
    p = p * r + 0x1.6c16c2p-10f;        /* 1/720 */
    p = p * r + 0x1.111112p-7f;         /* 1/120 */
    p = p * r + 0x1.555556p-5f;         /* 1/24 */
    p = p * r + 0x1.555556p-3f;         /* 1/6 */
    p = p * r + 0x1.0p-1f;              /* 1/2 */
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    int32_t k = (int32_t)(tb - 0x4b400000u); /* the integer the shifter left in t's mantissa */
    k = k < -150 ? -150 : k;                 /* only reached for NaN, whose result is NaN */
    k = k > 128 ? 128 : k;
    const int32_t k1 = k / 2;
    return (p * lm_expf_pow2(k1)) * lm_expf_pow2(k - k1);
}

#endif
