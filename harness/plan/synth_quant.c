/* synth_quant.c — block encoders for synthetic models (synth_quant.h): round to nearest
 * block by block, scales chosen from each block's extremes. */
#include "plan/synth_quant.h"

#include "kvd_dequant.h"

#include <math.h>
#include <string.h>

/* Nearest integer to v (halves away from zero), clamped to lo..hi. */
static int nearest(float v, int lo, int hi)
{
    const float r = v >= 0.0f ? floorf(v + 0.5f) : -floorf(-v + 0.5f);
    return r < (float)lo ? lo : r > (float)hi ? hi : (int)r;
}

static void put_f16(uint8_t *p, float v)
{
    const uint16_t h = lm_f32_to_f16(v);
    p[0] = (uint8_t)h;
    p[1] = (uint8_t)(h >> 8);
}

/* MXFP4 blocks of x[n] (n a multiple of 32) into out[n / 32 * 17]: per block of 32, the scale
 * byte e = floor(log2(amax)) - 2 + 127 (0 when amax = 0; clamped to 0..254) and d = 2^(e - 128),
 * each value's e2m1 code the first i of ggml's kvalues_mxfp4 (doubled e2m1 values) with the
 * smallest |kvalues[i] d - x| (ggml's quantize_row_mxfp4_ref, with floor(log2) taken from
 * frexp's exponent: exact). Nibbles as ggml's: element j low, j + 16 high. A value >= 0 is
 * nearest to a code of 0..7 and a negative one to 0 or 9..15 (a code of the other sign is
 * strictly farther, and a tie with 0 goes to code 0, the first), so only those are searched. */
static void to_mxfp4(uint8_t *out, const float *x, uint64_t n)
{
    static const int8_t kv[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    for (uint64_t b = 0; b < n / 32; ++b, x += 32, out += 17) {
        float amax = 0.0f;
        for (int j = 0; j < 32; ++j)
            amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
        int ex = 0;
        if (amax > 0.0f)
            (void)frexpf(amax, &ex); /* amax = m 2^ex, m in [0.5, 1): floor(log2) = ex - 1 */
        int e = amax > 0.0f ? ex - 1 - 2 + 127 : 0;
        e = e < 0 ? 0 : e > 254 ? 254 : e;
        const float d = ldexpf(1.0f, e - 128);
        out[0] = (uint8_t)e;
        for (int j = 0; j < 16; ++j) {
            uint8_t q[2];
            for (int h = 0; h < 2; ++h) {
                const float v = x[j + 16 * h];
                int best = 0;
                float best_err = fabsf(v);
                for (int i = v < 0.0f ? 9 : 1, end = i + 7; i < end; ++i) {
                    const float er = fabsf((float)kv[i] * d - v);
                    if (er < best_err) {
                        best = i;
                        best_err = er;
                    }
                }
                q[h] = (uint8_t)best;
            }
            out[1 + j] = (uint8_t)(q[0] | q[1] << 4);
        }
    }
}

/* Q4_K: per 32-element sub-block j, m_j = -min(0, min x) and s_j = (max x + m_j) / 15; the
 * super-block's d = max s_j / 63 and dmin = max m_j / 63 (rounded to f16), the six-bit sc_j =
 * nearest(s_j / d) and mn_j = nearest(m_j / dmin), then q = nearest((x + dmin mn_j) / (d sc_j))
 * in 0..15. */
static void to_q4_k(uint8_t *out, const float *x, uint64_t n)
{
    for (uint64_t b = 0; b < n / 256; ++b, x += 256, out += 144) {
        float s[8], m[8], smax = 0.0f, mmax = 0.0f;
        for (int j = 0; j < 8; ++j) {
            float lo = 0.0f, hi = 0.0f;
            for (int l = 0; l < 32; ++l) {
                lo = x[32 * j + l] < lo ? x[32 * j + l] : lo;
                hi = x[32 * j + l] > hi ? x[32 * j + l] : hi;
            }
            m[j] = -lo;
            s[j] = (hi - lo) / 15.0f;
            smax = s[j] > smax ? s[j] : smax;
            mmax = m[j] > mmax ? m[j] : mmax;
        }
        put_f16(out, smax / 63.0f);
        put_f16(out + 2, mmax / 63.0f);
        const float d = lm_f16_to_f32((uint16_t)(out[0] | out[1] << 8));
        const float dmin = lm_f16_to_f32((uint16_t)(out[2] | out[3] << 8));
        int sc[8], mn[8];
        for (int j = 0; j < 8; ++j) {
            sc[j] = d > 0.0f ? nearest(s[j] / d, 0, 63) : 0;
            mn[j] = dmin > 0.0f ? nearest(m[j] / dmin, 0, 63) : 0;
        }
        uint8_t *scales = out + 4, *qs = out + 16;
        for (int j = 0; j < 4; ++j) {
            scales[j] = (uint8_t)(sc[j] | (sc[j + 4] >> 4) << 6);
            scales[j + 4] = (uint8_t)(mn[j] | (mn[j + 4] >> 4) << 6);
            scales[j + 8] = (uint8_t)((sc[j + 4] & 0xf) | (mn[j + 4] & 0xf) << 4);
        }
        for (int j = 0; j < 8; j += 2)
            for (int l = 0; l < 32; ++l) {
                int q[2];
                for (int h = 0; h < 2; ++h) {
                    const float step = d * (float)sc[j + h];
                    const float v = x[32 * (j + h) + l] + dmin * (float)mn[j + h];
                    q[h] = step > 0.0f ? nearest(v / step, 0, 15) : 0;
                }
                qs[16 * j + l] = (uint8_t)(q[0] | q[1] << 4);
            }
    }
}

/* Q6_K: per 16-element sub-block j, s_j = max |x| / 31; d = max s_j / 127 (rounded to f16),
 * the int8 sc_j = nearest(s_j / d) and q = nearest(x / (d sc_j)) in -32..31, stored + 32. */
static void to_q6_k(uint8_t *out, const float *x, uint64_t n)
{
    for (uint64_t b = 0; b < n / 256; ++b, x += 256, out += 210) {
        float s[16], smax = 0.0f;
        for (int j = 0; j < 16; ++j) {
            float amax = 0.0f;
            for (int l = 0; l < 16; ++l)
                amax = fabsf(x[16 * j + l]) > amax ? fabsf(x[16 * j + l]) : amax;
            s[j] = amax / 31.0f;
            smax = s[j] > smax ? s[j] : smax;
        }
        put_f16(out + 208, smax / 127.0f);
        const float d = lm_f16_to_f32((uint16_t)(out[208] | out[209] << 8));
        int8_t *sc = (int8_t *)(out + 192);
        uint8_t q[256];
        for (int j = 0; j < 16; ++j) {
            sc[j] = (int8_t)(d > 0.0f ? nearest(s[j] / d, -128, 127) : 0);
            const float step = d * (float)sc[j];
            for (int l = 0; l < 16; ++l)
                q[16 * j + l] = (uint8_t)(32 + (step > 0.0f ? nearest(x[16 * j + l] / step, -32, 31)
                                                          : 0));
        }
        /* halves of 128: ql[64], qh[32]; element l, l + 32, l + 64, l + 96 of a half share
         * qh[l] (bits 0-1, 2-3, 4-5, 6-7) and take ql[l] low, ql[l + 32] low, ql[l] high,
         * ql[l + 32] high */
        for (int h = 0; h < 2; ++h) {
            uint8_t *ql = out + 64 * h, *qh = out + 128 + 32 * h;
            const uint8_t *qq = q + 128 * h;
            for (int l = 0; l < 32; ++l) {
                ql[l] = (uint8_t)((qq[l] & 0xf) | (qq[l + 64] & 0xf) << 4);
                ql[l + 32] = (uint8_t)((qq[l + 32] & 0xf) | (qq[l + 96] & 0xf) << 4);
                qh[l] = (uint8_t)(qq[l] >> 4 | (qq[l + 32] >> 4) << 2 | (qq[l + 64] >> 4) << 4
                                  | (qq[l + 96] >> 4) << 6);
            }
        }
    }
}

bool hx_synth_type_encodable(lm_tensor_type type)
{
    return type == LM_TYPE_F32 || type == LM_TYPE_F16 || type == LM_TYPE_BF16
           || type == LM_TYPE_MXFP4 || type == LM_TYPE_Q4_K || type == LM_TYPE_Q6_K;
}

void hx_synth_encode(uint8_t *out, const float *x, uint64_t n, lm_tensor_type type)
{
    switch (type) {
    case LM_TYPE_MXFP4: to_mxfp4(out, x, n); break;
    case LM_TYPE_Q4_K: to_q4_k(out, x, n); break;
    case LM_TYPE_Q6_K: to_q6_k(out, x, n); break;
    default: lm_gguf_f32_encode(out, x, n, type); break;
    }
}
