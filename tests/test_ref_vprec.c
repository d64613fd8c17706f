/* test_ref_vprec.c — the reference SR members' rounding to a virtual precision (ref_vprec.c):
 * special values first, then every result one of the engine's two neighbours
 * (lm_round_float_bracket) going up with the engine's probability, over binary16 (normal,
 * subnormal, below its smallest subnormal, past its largest finite), bfloat16 and TF32; Q8_0 and
 * Q8_K blocks with the engine's scales (lm_q8_scale), codes floor or floor + 1 of x * inverse,
 * saturated, unbiased, Q8_K's signed max; and a member under a profile: K/V as the profile caches them, the
 * profile's rounding present (members differ from float32's), q8act on float32 weights and the
 * zeroed profile giving float32's bits. Seed: KVD_TEST_SEED (printed). */
#include "ref_sr.h"
#include "ref_vprec.h"
#include "kvd_profile.h"
#include "test_ref_model.h"

#include <math.h>
#include <stdio.h>

static const ref_vp vf16 = {REF_VP_FLOAT, 11, -14, 15};
static const ref_vp vbf16 = {REF_VP_FLOAT, 8, -126, 127};
static const ref_vp vtf32 = {REF_VP_FLOAT, 11, -126, 127};
static const lm_round_spec sf16 = LM_ROUND_SPEC_F16;
static const lm_round_spec sbf16 = LM_ROUND_SPEC_BF16;
static const lm_round_spec stf32 = {LM_ROUND_FLOAT, 11, -126, 127};

static uint64_t next(uint64_t *z)
{
    *z = *z * 6364136223846793005ull + 1442695040888963407ull;
    return *z >> 11;
}

static void test_ref_vprec_special_values(void)
{
    const ref_vp *fmts[3] = {&vf16, &vbf16, &vtf32};
    for (int f = 0; f < 3; ++f) {
        float x[6] = {0.0f, -0.0f, INFINITY, -INFINITY, NAN, 1.5f};
        for (uint32_t key = 0; key < 64; ++key) {
            float y[6];
            memcpy(y, x, sizeof y);
            ref_vp_round(y, 6, fmts[f], key * 0x9e3779b9u);
            CU_ASSERT(y[0] == 0.0f && !signbit(y[0]));
            CU_ASSERT(y[1] == 0.0f && signbit(y[1]));
            CU_ASSERT(y[2] == INFINITY && y[3] == -INFINITY);
            CU_ASSERT(isnan(y[4]));
            CU_ASSERT(y[5] == 1.5f); /* representable in all three */
        }
    }
    /* binary16's own values stay: its largest finite, smallest normal and subnormal */
    float h[4] = {65504.0f, -0x1p-14f, 0x1p-24f, 3.0f * 0x1p-20f};
    for (uint32_t key = 0; key < 64; ++key) {
        float y[4];
        memcpy(y, h, sizeof y);
        ref_vp_round(y, 4, &vf16, key);
        CU_ASSERT(memcmp(y, h, sizeof y) == 0);
    }
    /* NONE and PER_WEIGHT leave values; a Q8 block of zeros stays zeros */
    const ref_vp none = {REF_VP_NONE, 0, 0, 0}, pw = {REF_VP_PER_WEIGHT, 0, 0, 0},
                 q0 = {REF_VP_Q8_0, 0, 0, 0}, qk = {REF_VP_Q8_K, 0, 0, 0};
    float v[3] = {0.1f, -0.2f, 0.3f}, w[3];
    memcpy(w, v, sizeof w);
    ref_vp_round(w, 3, &none, 1);
    ref_vp_round(w, 3, &pw, 1);
    CU_ASSERT(memcmp(v, w, sizeof w) == 0);
    float z[40] = {0};
    ref_vp_round(z, 40, &q0, 5);
    ref_vp_round(z, 40, &qk, 5);
    for (int i = 0; i < 40; ++i)
        CU_ASSERT(z[i] == 0.0f);
    CU_ASSERT_FALSE(ref_sr_profile_rounds(NULL));
}

/* x in 400 random magnitudes per format (binary16: 2^-30 .. 2^17, so below the smallest
 * subnormal, subnormal, normal and past 65504; bfloat16 and TF32: 2^-140 .. 2^127, float32
 * subnormals included), 256 copies each with distinct words: every result is the engine's lo
 * or hi, and sum over all of ([went up] - p) stays within 6 sd of 0 (sd <= sqrt(N) / 2, the
 * Bernoulli draws being independent: distinct words of lowbias32 at distinct counters). */
static void test_ref_vprec_float_matches_engine_bracket(void)
{
    uint64_t z = tu_seed();
    const ref_vp *fmts[3] = {&vf16, &vbf16, &vtf32};
    const lm_round_spec *specs[3] = {&sf16, &sbf16, &stf32};
    const int lo_e[3] = {-30, -140, -140}, hi_e[3] = {17, 127, 127};
    enum { N_X = 400, COPIES = 256 };
    for (int f = 0; f < 3; ++f) {
        double dev = 0.0, n = 0.0;
        bool only_neighbours = true;
        int went_inf = 0;
        for (int k = 0; k < N_X; ++k) {
            const int e = lo_e[f] + (int)(next(&z) % (uint64_t)(hi_e[f] - lo_e[f]));
            const double mant = 1.0 + (double)(next(&z) & 0xffffffu) * 0x1p-24;
            const float x = (float)ldexp((next(&z) & 1) ? -mant : mant, e);
            float lo, hi, y[COPIES];
            const double p = lm_round_float_bracket(x, specs[f], &lo, &hi);
            for (int i = 0; i < COPIES; ++i)
                y[i] = x;
            ref_vp_round(y, COPIES, fmts[f], (uint32_t)next(&z));
            for (int i = 0; i < COPIES; ++i) {
                const bool up = y[i] == hi && lo != hi;
                only_neighbours &= y[i] == lo || y[i] == hi;
                went_inf += isinf(y[i]);
                dev += (up ? 1.0 : 0.0) - (lo != hi ? p : 0.0);
                n += 1.0;
            }
        }
        CU_ASSERT(only_neighbours);
        CU_ASSERT(fabs(dev) < 6.0 * sqrt(n) / 2.0);
        if (f == 0)
            CU_ASSERT(went_inf > 0); /* 2^16 .. 2^17 lies past binary16's largest finite */
    }
    /* the boundary cases by hand: 1 + 2^-12 (a quarter step of binary16 at 1) goes up a
     * quarter of the time; 2^-26 (a quarter of binary16's smallest subnormal) likewise, to it;
     * 65520 (half-way to the overflow boundary's neighbour 65536) half the time to Inf */
    const float xs[3] = {1.0f + 0x1p-12f, 0x1p-26f, 65520.0f};
    const float ups[3] = {1.0f + 0x1p-10f, 0x1p-24f, INFINITY};
    const double want[3] = {0.25, 0.25, 0.5};
    for (int c = 0; c < 3; ++c) {
        static float y[65536];
        for (int i = 0; i < 65536; ++i)
            y[i] = xs[c];
        ref_vp_round(y, 65536, &vf16, 0x5eedu);
        double up = 0.0;
        for (int i = 0; i < 65536; ++i)
            up += y[i] == ups[c];
        /* 6 sd of the mean of 2^16 Bernoulli draws: sd <= 0.5 / 256 */
        CU_ASSERT(fabs(up / 65536.0 - want[c]) < 6.0 * 0.5 / 256.0);
    }
}

/* Q8_0 (blocks of 32, a shorter last block of 8) and Q8_K (one block of 256, one of 44):
 * values are c * d with the engine's d for that block and c floor(x * inverse) or one more,
 * saturated to [-128, 127]; the mean of c over 2048 keys is x * inverse within 6 sd (per
 * element sd <= 0.5 / sqrt(2048)), except where saturation clips it. */
static void test_ref_vprec_q8_blocks(void)
{
    uint64_t z = tu_seed();
    const ref_vp q[2] = {{REF_VP_Q8_0, 0, 0, 0}, {REF_VP_Q8_K, 0, 0, 0}};
    const lm_round_kind kind[2] = {LM_ROUND_Q8_0, LM_ROUND_Q8_K};
    const uint32_t n[2] = {40, 300}, block[2] = {32, 256};
    enum { KEYS = 2048 };
    for (int k = 0; k < 2; ++k) {
        float x[300];
        for (uint32_t i = 0; i < n[k]; ++i)
            x[i] = (float)((double)(int64_t)(next(&z) % 2000001) - 1e6) * 1e-6f;
        double mean[300] = {0};
        bool codes_ok = true;
        for (uint32_t key = 0; key < KEYS; ++key) {
            float y[300];
            memcpy(y, x, n[k] * sizeof *x);
            ref_vp_round(y, n[k], &q[k], key * 0x2545f491u);
            for (uint32_t b = 0; b < n[k]; b += block[k]) {
                const uint32_t nb = n[k] - b < block[k] ? n[k] - b : block[k];
                float d, inv;
                lm_q8_scale(kind[k], x + b, nb, &d, &inv);
                for (uint32_t i = b; i < b + nb; ++i) {
                    const float t = x[i] * inv, fl = floorf(t);
                    const float c = y[i] / d;
                    codes_ok &= c == fl || c == fl + 1.0f || (c == 127.0f && fl >= 127.0f) ||
                                 (c == -128.0f && fl < -128.0f);
                    codes_ok &= c == rintf(c) && c >= -128.0f && c <= 127.0f;
                    mean[i] += (double)c / KEYS;
                }
            }
        }
        CU_ASSERT(codes_ok);
        bool unbiased = true;
        for (uint32_t b = 0; b < n[k]; b += block[k]) {
            const uint32_t nb = n[k] - b < block[k] ? n[k] - b : block[k];
            float d, inv;
            lm_q8_scale(kind[k], x + b, nb, &d, &inv);
            for (uint32_t i = b; i < b + nb; ++i) {
                const double t = (double)(x[i] * inv);
                if (t <= 127.0 && t >= -128.0)
                    unbiased &= fabs(mean[i] - t) < 6.0 * 0.5 / sqrt((double)KEYS);
            }
        }
        CU_ASSERT(unbiased);
    }
    /* Q8_K's max is the first element of largest magnitude with its sign: in {-2, 2, 1} it is
     * -2, iscale 63.5, so -2 and 2 are the exact codes -127 and 127 whatever the word */
    float y[3] = {-2.0f, 2.0f, 1.0f}, d, inv;
    lm_q8_scale(LM_ROUND_Q8_K, y, 3, &d, &inv);
    ref_vp_round(y, 3, &q[1], 9);
    CU_ASSERT(inv == 63.5f);
    CU_ASSERT(y[0] == -127.0f * d && y[1] == 127.0f * d);
    CU_ASSERT(y[2] == 63.0f * d || y[2] == 64.0f * d);
}

/* A member under f16kv, bf16 and tf32 caches K and V in that profile's format (f16kv and
 * bf16: the KV site; tf32: ROPE and V) and differs from the float32 member of the same seed;
 * the zeroed profile and q8act on this float32-weight model give float32's bits exactly. */
static void test_ref_vprec_member_sites(void)
{
    trm t;
    lm_hparams hp = trm_hparams(LM_ROPE_NEOX);
    trm_build(&t, &hp, true, 5);
    int32_t tok[9] = {1, 5, 9, 2, 7, 3, 10, 4, 8};
    ref_request rq = {.tokens = tok, .n_tokens = 9, .n_prompt = 7};
    lm_err err = {0};
    ref_sr_out f32;
    CU_ASSERT_FATAL(ref_sr_run(&f32, &t.r, &rq, 3, &err) == LM_OK);
    const size_t kv = (size_t)f32.n_layer * f32.n_prompt * f32.kv_dim,
                 nl = (size_t)f32.n_pos * f32.n_vocab;
    ref_sr_profile p;
    const ref_vp *fmt[3] = {&vf16, &vbf16, &vtf32};
    const lm_round_spec *spec[3] = {&sf16, &sbf16, &stf32};
    for (int c = 0; c < 3; ++c) {
        memset(&p, 0, sizeof p);
        if (c < 2) {
            p.site[REF_VP_KV] = *fmt[c];
        } else {
            p.site[REF_VP_ROPE] = *fmt[c];
            p.site[REF_VP_V] = *fmt[c];
        }
        rq.sr_profile = &p;
        ref_sr_out o;
        CU_ASSERT_FATAL(ref_sr_run(&o, &t.r, &rq, 3, &err) == LM_OK);
        bool in_format = true;
        for (size_t i = 0; i < kv; ++i)
            in_format &= lm_round_float_rn(o.k[i], spec[c]) == o.k[i] &&
                         lm_round_float_rn(o.v[i], spec[c]) == o.v[i];
        CU_ASSERT(in_format);
        CU_ASSERT(memcmp(o.logits, f32.logits, nl * sizeof(float)) != 0);
        ref_sr_out_free(&o);
    }
    /* zeroed, and per weight on float32 weights (types 0 of a model built in memory) */
    memset(&p, 0, sizeof p);
    for (int z = 0; z < 2; ++z) {
        if (z == 1) {
            p.site[REF_VP_NORM] = p.site[REF_VP_ATTN_OUT] = p.site[REF_VP_SWIGLU] =
                p.site[REF_VP_OUT_NORM] = (ref_vp){REF_VP_PER_WEIGHT, 0, 0, 0};
            p.per_type[LM_TYPE_Q4_K] = (ref_vp){REF_VP_Q8_K, 0, 0, 0};
        }
        rq.sr_profile = &p;
        ref_sr_out o;
        CU_ASSERT_FATAL(ref_sr_run(&o, &t.r, &rq, 3, &err) == LM_OK);
        CU_ASSERT(memcmp(o.k, f32.k, kv * sizeof(float)) == 0);
        CU_ASSERT(memcmp(o.logits, f32.logits, nl * sizeof(float)) == 0);
        ref_sr_out_free(&o);
    }
    ref_sr_out_free(&f32);
    trm_free(&t);
}

void test_ref_vprec_register(void)
{
    CU_pSuite s = CU_add_suite("ref_vprec", NULL, NULL);
    CU_add_test(s, "test_ref_vprec_special_values", test_ref_vprec_special_values);
    CU_add_test(s, "test_ref_vprec_float_matches_engine_bracket",
                test_ref_vprec_float_matches_engine_bracket);
    CU_add_test(s, "test_ref_vprec_q8_blocks", test_ref_vprec_q8_blocks);
    CU_add_test(s, "test_ref_vprec_member_sites", test_ref_vprec_member_sites);
}
