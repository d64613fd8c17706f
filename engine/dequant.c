/* dequant.c — the engine's dequantization: one float32 decoder per tensor type it loads (the
 * types' geometry is common/gguf_types.c's), and the f16/bf16 decoders.
 *
 * Block layouts exactly as ggml defines them (ggml-common.h), little-endian; QK_K = 256:
 *   Q4_0  32 in 18: f16 d, qs[16]. Byte j: element j low nibble, j + 16 high; x = (q - 8) d.
 *   Q4_1  32 in 20: f16 d, f16 m, qs[16] (same nibbles); x = q d + m.
 *   Q5_0  32 in 22: f16 d, u32 qh, qs[16]; 5th bit of element j is qh bit j; x = (q - 16) d.
 *   Q5_1  32 in 24: f16 d, f16 m, u32 qh, qs[16]; x = q d + m.
 *   Q8_0  32 in 34: f16 d, int8 qs[32]; x = q d.
 *   Q2_K 256 in 84: scales[16] (low nibble scale, high nibble min), qs[64], f16 d, f16 dmin;
 *         x = (d sc) q - (dmin m), q 2 bits.
 *   Q3_K 256 in 110: hmask[32], qs[64], scales[12] (16 six-bit scales, offset 32), f16 d;
 *         x = (d (sc - 32)) (q - (hbit ? 0 : 4)), q 2 low bits.
 *   Q4_K 256 in 144: f16 d, f16 dmin, scales[12] (8 six-bit scale/min pairs), qs[128];
 *         x = (d sc) q - (dmin m).
 *   Q5_K 256 in 176: f16 d, f16 dmin, scales[12], qh[32], qs[128]; as Q4_K with a 5th bit.
 *   Q6_K 256 in 210: ql[128], qh[64], int8 scales[16], f16 d; x = (d sc) (q - 32).
 *   Q8_K 256 in 292: f32 d, int8 qs[256], int16 bsums[16] (unused here); x = d q.
 *   IQ4_NL 32 in 18: f16 d, qs[16]; x = d kvalues[q].
 *   IQ4_XS 256 in 136: f16 d, u16 scales_h, scales_l[4], qs[128]; eight 32-blocks with six-bit
 *         scale ls (offset 32); x = (d (ls - 32)) kvalues[q].
 *   MXFP4 32 in 17: u8 e (E8M0), qs[16] (nibbles as Q4_0); x = kvalues_mxfp4[q] d with
 *         kvalues_mxfp4 the e2m1 values doubled and d = 2^(e - 128) (ggml_e8m0_to_fp32_half:
 *         bits 0x00200000 << e for e < 2, (e - 1) << 23 otherwise; e = 255, NaN in the MX
 *         spec, decodes as 2^127 as in ggml). Every product is exact.
 * Each product and sum is done in float32, in the order of ggml's reference dequantizers
 * (ggml-quants.c dequantize_row_*): f16 widened exactly, then float multiplies and adds (no
 * fused multiply-add: the build uses -ffp-contract=off), so the values are bitwise ggml's. */
/* The decoders' loops are independent per element (integer unpacking, exact conversions, one
 * float multiply and at most one add per value, no reduction), so vectorizing them changes no
 * bit; -O2 alone does not vectorize loops in GCC 12. The products decode every block they
 * read on each use (weight_tiles.c), which makes these loops a decode step's hot path. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("tree-loop-vectorize", "no-trapping-math")
#endif
/* Each block decoder is also built for AVX2 (GCC's target clones, chosen once per process by
 * the CPU): the same operations on wider vectors, so the same values. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
#define DECODER __attribute__((target_clones("avx2", "default")))
#else
#define DECODER
#endif

#include "kvd_defects.h"
#include "kvd_dequant.h"
#include "kvd_model.h"

#include <inttypes.h>
#include <math.h>
#include <string.h>

static float bits_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, 4);
    return f;
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
        if (LM_DEFECT_ON(NULL, LM_DEFECT_F16_SUBNORMAL))
            e = 0; /* test defect: one shift too many counted, the value halved */
        do {
            man <<= 1;
            ++e;
        } while ((man & 0x400u) == 0);
        man &= 0x3ffu;
        return bits_f32(sign | (uint32_t)(127 - 15 - e) << 23 | (man << 13));
    }
    return bits_f32(sign | (exp + 127 - 15) << 23 | (man << 13));
}

float lm_bf16_to_f32(uint16_t h)
{
    return bits_f32((uint32_t)h << 16);
}

static uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* lm_f16_to_f32 with the normal numbers' exponent rebias inline (the same bits); zeros,
 * subnormals, infinities and NaNs take lm_f16_to_f32 itself. */
static inline float f16_to_f32_fast(uint16_t h)
{
    const uint32_t exp = (h >> 10) & 0x1fu;
    if (exp == 0 || exp == 0x1f)
        return lm_f16_to_f32(h);
    return bits_f32((uint32_t)(h & 0x8000u) << 16 | (exp + 112u) << 23 | (uint32_t)(h & 0x3ffu) << 13);
}

static float f16at(const uint8_t *p)
{
    return f16_to_f32_fast(rd16(p));
}

/* IQ4_NL / IQ4_XS code book (ggml kvalues_iq4nl). */
static const int8_t kvalues_iq4nl[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                         1, 13, 25, 38, 53, 69, 89, 113};

DECODER static void f32_to_f32(const uint8_t *p, float *out, uint64_t n)
{
    memcpy(out, p, (size_t)n * 4); /* little-endian host (x86-64, aarch64) */
}

DECODER static void f16_to_f32(const uint8_t *p, float *out, uint64_t n)
{
    for (uint64_t i = 0; i < n; ++i)
        out[i] = f16_to_f32_fast(rd16(p + 2 * i));
}

DECODER static void bf16_to_f32(const uint8_t *p, float *out, uint64_t n)
{
    for (uint64_t i = 0; i < n; ++i)
        out[i] = lm_bf16_to_f32(rd16(p + 2 * i));
}

DECODER static void q4_0_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 18, out += 32) {
        float d = f16at(p);
        const uint8_t *qs = p + 2;
        for (int j = 0; j < 16; ++j) {
            out[j] = (float)((int)(qs[j] & 0x0f) - 8) * d;
            out[j + 16] = (float)((int)(qs[j] >> 4) - 8) * d;
        }
    }
}

DECODER static void q4_1_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 20, out += 32) {
        float d = f16at(p), m = f16at(p + 2);
        const uint8_t *qs = p + 4;
        for (int j = 0; j < 16; ++j) {
            out[j] = (float)(qs[j] & 0x0f) * d + m;
            out[j + 16] = (float)(qs[j] >> 4) * d + m;
        }
    }
}

DECODER static void q5_0_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 22, out += 32) {
        float d = f16at(p);
        uint32_t qh = rd32(p + 2);
        const uint8_t *qs = p + 6;
        for (int j = 0; j < 16; ++j) {
            int x0 = (int)((qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10)) - 16;
            int x1 = (int)((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10)) - 16;
            out[j] = (float)x0 * d;
            out[j + 16] = (float)x1 * d;
        }
    }
}

DECODER static void q5_1_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 24, out += 32) {
        float d = f16at(p), m = f16at(p + 2);
        uint32_t qh = rd32(p + 4);
        const uint8_t *qs = p + 8;
        for (int j = 0; j < 16; ++j) {
            int x0 = (int)((qs[j] & 0x0f) | (((qh >> j) << 4) & 0x10));
            int x1 = (int)((qs[j] >> 4) | ((qh >> (j + 12)) & 0x10));
            out[j] = (float)x0 * d + m;
            out[j + 16] = (float)x1 * d + m;
        }
    }
}

DECODER static void q8_0_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 34, out += 32) {
        float d = f16at(p);
        for (int j = 0; j < 32; ++j)
            out[j] = (float)(int8_t)p[2 + j] * d;
    }
}

DECODER static void q2_k_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 84) {
        const uint8_t *scales = p, *q = p + 16;
        float d = f16at(p + 80), dmin = f16at(p + 82);
        int is = 0;
        for (int n = 0; n < 256; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; ++half) {
                    uint8_t sc = scales[is++];
                    float dl = d * (float)(sc & 0xf), ml = dmin * (float)(sc >> 4);
                    for (int l = 0; l < 16; ++l)
                        *out++ = dl * (float)((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
        }
    }
}

/* The sixteen six-bit Q3_K scales (offset 32 not yet removed) from their 12 packed bytes: the
 * low four bits of scale i are the low nibble of byte i for i < 8, else the high nibble of byte
 * i - 8; its top two bits are bits 2 (i / 4) and 2 (i / 4) + 1 of byte 8 + i % 4. */
static void q3_k_scales(const uint8_t *s, int out[16])
{
    for (int i = 0; i < 16; ++i) {
        int lo = i < 8 ? s[i] & 0xf : s[i - 8] >> 4;
        int hi = (s[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = lo | hi << 4;
    }
}

DECODER static void q3_k_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 110) {
        const uint8_t *hm = p, *q = p + 32;
        int sc[16];
        q3_k_scales(p + 96, sc);
        float d_all = f16at(p + 108);
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < 256; n += 128, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m = (uint8_t)(m << 1)) {
                for (int half = 0; half < 2; ++half) {
                    float dl = d_all * (float)(sc[is++] - 32);
                    for (int l = 0; l < 16; ++l) {
                        int k = l + 16 * half;
                        int v = ((q[k] >> shift) & 3) - ((hm[k] & m) ? 0 : 4);
                        *out++ = dl * (float)v;
                    }
                }
            }
        }
    }
}

/* Scale and min j (0..7) of a Q4_K / Q5_K block (ggml get_scale_min_k4). */
static void scale_min_k4(int j, const uint8_t *q, int *d, int *m)
{
    if (j < 4) {
        *d = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *d = (q[j + 4] & 0xf) | ((q[j - 4] >> 6) << 4);
        *m = (q[j + 4] >> 4) | ((q[j] >> 6) << 4);
    }
}

DECODER static void q4_k_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 144) {
        float d = f16at(p), dmin = f16at(p + 2);
        const uint8_t *scales = p + 4, *q = p + 16;
        for (int is = 0; is < 8; is += 2, q += 32) {
            int sc, m;
            scale_min_k4(is, scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            scale_min_k4(is + 1, scales, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; ++l)
                *out++ = d1 * (float)(q[l] & 0xf) - m1;
            for (int l = 0; l < 32; ++l)
                *out++ = d2 * (float)(q[l] >> 4) - m2;
        }
    }
}

DECODER static void q5_k_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 176) {
        float d = f16at(p), dmin = f16at(p + 2);
        const uint8_t *scales = p + 4, *qh = p + 16, *ql = p + 48;
        uint8_t u1 = 1, u2 = 2;
        for (int is = 0; is < 8; is += 2, ql += 32, u1 = (uint8_t)(u1 << 2),
             u2 = (uint8_t)(u2 << 2)) {
            int sc, m;
            scale_min_k4(is, scales, &sc, &m);
            float d1 = d * (float)sc, m1 = dmin * (float)m;
            scale_min_k4(is + 1, scales, &sc, &m);
            float d2 = d * (float)sc, m2 = dmin * (float)m;
            for (int l = 0; l < 32; ++l)
                *out++ = d1 * (float)((ql[l] & 0xf) + (qh[l] & u1 ? 16 : 0)) - m1;
            for (int l = 0; l < 32; ++l)
                *out++ = d2 * (float)((ql[l] >> 4) + (qh[l] & u2 ? 16 : 0)) - m2;
        }
    }
}

DECODER static void q6_k_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 210) {
        float d = f16at(p + 208);
        const uint8_t *ql = p, *qh = p + 128;
        const int8_t *sc = (const int8_t *)(p + 192);
        for (int n = 0; n < 256; n += 128, out += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; ++l) {
                int is = l / 16;
                int q1 = ((ql[l] & 0xf) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 0xf) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                out[l] = d * (float)sc[is] * (float)q1;
                out[l + 32] = d * (float)sc[is + 2] * (float)q2;
                out[l + 64] = d * (float)sc[is + 4] * (float)q3;
                out[l + 96] = d * (float)sc[is + 6] * (float)q4;
            }
        }
    }
}

DECODER static void q8_k_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 292) {
        float d;
        memcpy(&d, p, 4);
        for (int j = 0; j < 256; ++j)
            *out++ = d * (float)(int8_t)p[4 + j];
    }
}

DECODER static void iq4_nl_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 18, out += 32) {
        float d = f16at(p);
        const uint8_t *qs = p + 2;
        for (int j = 0; j < 16; ++j) {
            out[j] = d * (float)kvalues_iq4nl[qs[j] & 0xf];
            out[j + 16] = d * (float)kvalues_iq4nl[qs[j] >> 4];
        }
    }
}

DECODER static void iq4_xs_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 136) {
        float d = f16at(p);
        uint16_t scales_h = rd16(p + 2);
        const uint8_t *scales_l = p + 4, *qs = p + 8;
        for (int ib = 0; ib < 8; ++ib, out += 32, qs += 16) {
            int ls = ((scales_l[ib / 2] >> 4 * (ib % 2)) & 0xf) | (((scales_h >> 2 * ib) & 3) << 4);
            float dl = d * (float)(ls - 32);
            for (int j = 0; j < 16; ++j) {
                out[j] = dl * (float)kvalues_iq4nl[qs[j] & 0xf];
                out[j + 16] = dl * (float)kvalues_iq4nl[qs[j] >> 4];
            }
        }
    }
}

/* MXFP4 code book (ggml kvalues_mxfp4: e2m1 values times 2). */
static const int8_t kvalues_mxfp4[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

DECODER static void mxfp4_to_f32(const uint8_t *p, float *out, uint64_t nb)
{
    for (uint64_t b = 0; b < nb; ++b, p += 17, out += 32) {
        const uint32_t e = p[0];
        const float d = bits_f32(e < 2 ? UINT32_C(0x00200000) << e : (e - 1) << 23);
        const uint8_t *qs = p + 1;
        for (int j = 0; j < 16; ++j) {
            out[j] = (float)kvalues_mxfp4[qs[j] & 0xf] * d;
            out[j + 16] = (float)kvalues_mxfp4[qs[j] >> 4] * d;
        }
    }
}

/* Indexed by ggml type number; NULL where the engine does not load the type. */
static const lm_to_f32_fn to_f32[] = {
    [LM_TYPE_F32] = f32_to_f32,     [LM_TYPE_F16] = f16_to_f32,     [LM_TYPE_Q4_0] = q4_0_to_f32,
    [LM_TYPE_Q4_1] = q4_1_to_f32,   [LM_TYPE_Q5_0] = q5_0_to_f32,   [LM_TYPE_Q5_1] = q5_1_to_f32,
    [LM_TYPE_Q8_0] = q8_0_to_f32,   [LM_TYPE_Q2_K] = q2_k_to_f32,   [LM_TYPE_Q3_K] = q3_k_to_f32,
    [LM_TYPE_Q4_K] = q4_k_to_f32,   [LM_TYPE_Q5_K] = q5_k_to_f32,   [LM_TYPE_Q6_K] = q6_k_to_f32,
    [LM_TYPE_Q8_K] = q8_k_to_f32,   [LM_TYPE_IQ4_NL] = iq4_nl_to_f32,
    [LM_TYPE_IQ4_XS] = iq4_xs_to_f32, [LM_TYPE_BF16] = bf16_to_f32, [LM_TYPE_MXFP4] = mxfp4_to_f32,
};

uint64_t lm_blocks_first_bad(lm_tensor_type type, const uint8_t *src, const float *decoded,
                             uint64_t n_blocks)
{
    const lm_type_geom *t = lm_type_geom_of(type);
    if (t == NULL || t->block_elems == 1)
        return n_blocks;
    for (uint64_t b = 0; b < n_blocks; ++b) {
        if (type == LM_TYPE_MXFP4 && src[b * t->block_bytes] == 0xFF)
            return b;
        /* a value is not finite exactly when its exponent bits are all ones */
        uint32_t inf_or_nan = 0;
        for (uint32_t i = 0; i < t->block_elems; ++i) {
            uint32_t u;
            memcpy(&u, &decoded[b * t->block_elems + i], sizeof u);
            inf_or_nan |= (u & 0x7f800000u) == 0x7f800000u;
        }
        if (inf_or_nan)
            return b;
    }
    return n_blocks;
}

lm_to_f32_fn lm_type_to_f32(uint32_t type)
{
    if (lm_type_geom_of(type) == NULL || type >= sizeof to_f32 / sizeof to_f32[0])
        return NULL;
    return to_f32[type];
}

bool lm_tensor_type_loadable(lm_tensor_type type)
{
    return lm_type_to_f32((uint32_t)type) != NULL;
}

int lm_gguf_tensor_to_f32(float *out, const lm_gguf_tensor *t, lm_err *err)
{
    const lm_to_f32_fn fn = lm_type_to_f32((uint32_t)t->type);
    if (fn == NULL)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "tensor '%s': type %d (%s) cannot be dequantized",
                       t->name, (int)t->type, lm_tensor_type_name(t->type));
    const lm_type_geom *g = lm_type_geom_of((uint32_t)t->type);
    uint64_t be = g->block_elems;
    if (t->ne[0] % be != 0 || t->n_elem % be != 0 || t->n_elem / be * g->block_bytes != t->nbytes)
        return LM_FAIL(err, LM_E_INPUT, "tensor '%s': %" PRIu64 " elements and %" PRIu64
                       " bytes do not form whole %s blocks", t->name, t->n_elem, t->nbytes,
                       g->name);
    fn(t->data, out, t->n_elem / be); /* data: [nbytes], validated by the reader */
    return LM_OK;
}

void lm_wt_rows(float *out, const lm_wt *w, uint64_t row0, uint64_t n, uint32_t cols)
{
    if (w->f != NULL) {
        memcpy(out, w->f + row0 * cols, (size_t)(n * cols) * sizeof *out);
        return;
    }
    /* rows are whole blocks (ne[0] is a multiple of the block, checked at load), one after
     * the other: n rows are n * cols / block_elems consecutive blocks */
    const uint64_t be = lm_tensor_type_block_elems((lm_tensor_type)w->type);
    lm_type_to_f32(w->type)(w->q + row0 * w->row_bytes, out, n * cols / be);
}
