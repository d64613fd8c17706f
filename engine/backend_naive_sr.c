/* backend_naive_sr.c — the naive backend with stochastic rounding (SR): the ensemble member
 * behind the harness's measured noise envelope (Verrou's "average" mode, Verificarlo's SR).
 *
 * Order: exactly backend_naive.c's — every output element is one dot product that starts at
 * +0.0f and takes the terms l = 0, 1, ..., k-1 strictly left to right; gemm_nt then scales by
 * alpha once. What changes is the rounding. Each multiply-add acc + a[l]*b[l] is one operation:
 *   - the product p = (double)a * (double)b is exact in double (24 + 24 = 48 significand bits
 *     <= 53; float exponents cannot overflow or underflow a double product);
 *   - the sum acc + p is made exact as a double-double by TwoSum (Knuth): s = fl64(acc + p),
 *     e = the rounding error of that addition, acc + p == s + e exactly (no overflow possible:
 *     |acc|, |p| < 2^256);
 *   - t = s + e is rounded to one of its two neighbouring floats lo < t < hi, up with
 *     probability (t - lo) / (hi - lo) (unbiased: E[SR(t)] = t). s - lo is exact (Sterbenz:
 *     lo and s are within a factor 2, or lo is 0); adding e and dividing by the power of two
 *     hi - lo round in double, so the probability carries a relative error <= 2^-52 and the
 *     random threshold is quantized to 2^-53: the bias is below 2^-51 ulp per operation.
 *     Values exactly representable as floats (e == 0 and s a float) are returned unchanged.
 *     Beyond FLT_MAX, NaN and Inf: rounded to nearest (IEEE overflow/propagation).
 * The alpha scaling of gemm_nt is one more SR rounding of the exact product alpha * acc.
 * So one SR rounding per term where the naive backend has two round-to-nearest roundings
 * (product, then sum); the spread per term is comparable (variance <= ulp^2/4 vs 2 x ulp^2/12).
 *
 * Randomness: counter-based, no state. The coin of one operation is
 *   u = mix(mix(key(seed) ^ (bits(a[l]), bits(b[l])) ^ l * odd) ^ bits(acc)) >> 11,
 * uniform on [0, 2^53), mix the SplitMix64 finalizer, and the rounding goes up when
 * u < p * 2^53.
 * The "counter" is thus the operation itself (its index in the dot product and its operands),
 * not a position in a call sequence: results depend only on (seed, inputs), never on call
 * order, on how a caller splits rows into calls (prefill step) or on threads. A given seed is
 * bitwise reproducible; different seeds give independent coins. Two operations with identical
 * operands and index share a coin within one run (they would also produce the same value in
 * any deterministic arithmetic), which is the price of statelessness.
 *
 * Elementwise stages: the perturb slot (backend.h) re-rounds the float32 result of every
 * elementwise stage of the forward pass (norms, RoPE, softmax, SwiGLU, residual adds), which
 * otherwise round to nearest identically in every member, so that the ensemble's spread
 * measures the rounding noise of the whole computation (sr_perturb_one states the
 * distribution). Its coins come from a key derived from the seed apart from the gemm coins.
 *
 * Created through lm_backend_create with the name "naive-sr" (seed 0) or "naive-sr:seed=N"
 * (N decimal, 0..2^64-1), see kvd_engine.h; always one thread. */
#include "backend.h"
#include "kvd_util.h"
#include "kvd_engine.h"

#include <errno.h>
#include <stdbool.h>
#include <float.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct sr_backend {
    lm_backend base; /* first: the forward pass sees an lm_backend */
    uint64_t seed;
} sr_backend;

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t f32_bits(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

/* The coin of one operation: 53 uniform bits from (seed, index, three operand bit patterns),
 * in two SplitMix64 finalizer rounds: pre = mix(skey ^ (a, b) ^ idx) does not depend on the
 * running sum, so it is computed off the dot product's dependency chain; only the second
 * round, mix(pre ^ bits(acc)), waits for the previous step. skey = mix64(seed ^ golden ratio),
 * computed once per call. */
static inline uint64_t sr_coin(uint64_t skey, uint64_t idx, float acc, float a, float b)
{
    uint64_t pre = mix64(skey ^ (((uint64_t)f32_bits(a) << 32) | f32_bits(b)) ^
                         (idx * 0xd6e8feb86659fd93ull));
    return mix64(pre ^ f32_bits(acc)) >> 11;
}

static uint64_t sr_key(uint64_t seed)
{
    return mix64(seed ^ 0x9e3779b97f4a7c15ull);
}

/* Rounds the exact value t = s + e (s = fl64(t), |e| <= ulp64(s)/2) to a neighbouring float,
 * up with probability (t - lo)/(hi - lo), using the 53 random bits coin53: up exactly when
 * coin53 * (hi - lo) < (t - lo) * 2^53, both sides computed without division (coin53 * ulp is
 * exact, ulp being a power of two; t - lo = (s - lo) + e rounds once, relative 2^-53). The
 * direction test and the neighbour are computed from bits, branch-light: the coin makes the
 * final choice unpredictable, so fewer branches means fewer mispredictions. */
static inline float sr_round(double s, double e, uint64_t coin53)
{
    float f = (float)s;
    double fd = (double)f;
    if (!isfinite(fd))
        return f; /* NaN, Inf, or overflow beyond FLT_MAX's rounding boundary: RN */
    if (fd == s && e == 0.0)
        return f; /* exactly representable */
    bool above = fd < s || (fd == s && e > 0.0); /* t > f: f is lo, the other neighbour hi */
    uint32_t u = f32_bits(f);
    uint32_t ou;
    if ((u & 0x7fffffffu) == 0)
        ou = above ? 1u : 0x80000001u;                  /* +-0: the smallest subnormal */
    else
        ou = (above == !(u >> 31)) ? u + 1u : u - 1u;   /* away from / towards zero */
    float o;
    memcpy(&o, &ou, sizeof o);
    if (!isfinite(o))
        return f; /* between FLT_MAX and the overflow boundary: RN keeps FLT_MAX */
    float lo = above ? f : o, hi = above ? o : f;
    double ulp = (double)hi - (double)lo; /* a power of two, exact */
    double d = (s - (double)lo) + e;      /* t - lo in (0, ulp) */
    return (double)coin53 * ulp < d * 9007199254740992.0 /* 2^53 */ ? hi : lo;
}

float lm_sr_round(double s, double e, uint64_t coin53);
/* sr_round, exported for tests/test_backend_sr.c (declared there). */
float lm_sr_round(double s, double e, uint64_t coin53)
{
    return sr_round(s, e, coin53);
}

/* acc + a*b with one SR rounding; l is the term's index in its dot product. */
static inline float sr_madd(uint64_t skey, uint32_t l, float acc, float a, float b)
{
    double p = (double)a * (double)b; /* exact */
    double x = (double)acc;
    double s = x + p;                 /* TwoSum: s + e == x + p exactly */
    double bv = s - x;
    double av = s - bv;
    double e = (x - av) + (p - bv);
    return sr_round(s, e, sr_coin(skey, l, acc, a, b));
}

/* alpha * acc with one SR rounding (index ~0 keeps its coins apart from the terms'). */
static inline float sr_scale(uint64_t skey, float alpha, float acc)
{
    if (alpha == 1.0f)
        return acc; /* exact: no rounding, no coin */
    double p = (double)alpha * (double)acc; /* exact, so its error term is 0 */
    return sr_round(p, 0.0, sr_coin(skey, UINT64_MAX, acc, alpha, alpha));
}

static void sr_gemm_nt(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                       const float *a /* [m][lda] */, size_t lda,
                       const float *b /* [n][ldb] */, size_t ldb,
                       float *c /* [m][ldc] */, size_t ldc)
{
    uint64_t skey = sr_key(((sr_backend *)be)->seed); /* the coins' key */
    for (uint32_t i = 0; i < m; ++i) {
        const float *ai = a + (size_t)i * lda;
        float *ci = c + (size_t)i * ldc;
        uint32_t j = 0;
        /* Four outputs at a time: four independent dependency chains (each SR step waits on
         * its coin, which hashes the previous sum), the same per-element order as below. */
        for (; j + 4 <= n; j += 4) {
            const float *b0 = b + (size_t)j * ldb, *b1 = b0 + ldb, *b2 = b1 + ldb,
                        *b3 = b2 + ldb;
            float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
            for (uint32_t l = 0; l < k; ++l) {
                const float x = ai[l];
                s0 = sr_madd(skey, l, s0, x, b0[l]);
                s1 = sr_madd(skey, l, s1, x, b1[l]);
                s2 = sr_madd(skey, l, s2, x, b2[l]);
                s3 = sr_madd(skey, l, s3, x, b3[l]);
            }
            ci[j] = sr_scale(skey, alpha, s0);
            ci[j + 1] = sr_scale(skey, alpha, s1);
            ci[j + 2] = sr_scale(skey, alpha, s2);
            ci[j + 3] = sr_scale(skey, alpha, s3);
        }
        for (; j < n; ++j) {
            const float *bj = b + (size_t)j * ldb;
            float s = 0.0f;
            for (uint32_t l = 0; l < k; ++l)
                s = sr_madd(skey, l, s, ai[l], bj[l]);
            ci[j] = sr_scale(skey, alpha, s);
        }
    }
}

/* Same loop nest as naive_gemm_nn (i, l, j): each C[i][j] takes its terms l = 0..k-1 from
 * +0.0f, so its value and its coins equal those of the matching gemm_nt dot product. */
static void sr_gemm_nn(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                       const float *a /* [m][lda] */, size_t lda,
                       const float *b /* [k][ldb] */, size_t ldb,
                       float *c /* [m][ldc] */, size_t ldc)
{
    uint64_t skey = sr_key(((sr_backend *)be)->seed); /* the coins' key */
    for (uint32_t i = 0; i < m; ++i) {
        const float *ai = a + (size_t)i * lda;
        float *ci = c + (size_t)i * ldc;
        for (uint32_t j = 0; j < n; ++j)
            ci[j] = 0.0f;
        for (uint32_t l = 0; l < k; ++l) {
            const float ail = ai[l];
            const float *bl = b + (size_t)l * ldb;
            for (uint32_t j = 0; j < n; ++j)
                ci[j] = sr_madd(skey, l, ci[j], ail, bl[j]);
        }
    }
}

/* ulp(x): the spacing of the floats just above |x|, 2^(E - 150) for a biased exponent E >= 1
 * and 2^-149 for subnormals, as a double built from bits (exact). */
static inline double f32_ulp(float x)
{
    uint32_t e = (f32_bits(x) >> 23) & 0xffu;
    uint64_t de = (uint64_t)(e ? e : 1u) + 1023u - 150u; /* double's biased exponent */
    double u;
    uint64_t b = de << 52;
    memcpy(&u, &b, sizeof u);
    return u;
}

/* One value's random rounding (Verificarlo MCA "rr" at virtual precision 24): the stored float
 * x stands for an exact value known only to lie within about half an ulp of it, modelled as
 * t = x + ulp(x) * xi, xi uniform on (-1/2, 1/2) (2^-52 grid, never 0), which is then
 * stochastically rounded back to a float (sr_round: unbiased between its two neighbours). t is
 * carried exactly as the double-double s + e (TwoSum), so the only quantization is xi's.
 * Result: x itself with probability 3/4, the float neighbour above or below with 1/8 each
 * (away from binade edges); mean x, standard deviation ulp/2 — an error of up to 1 ulp, as
 * round-to-nearest's |error| <= ulp/2 compounded with the unknown error x already carries.
 * Zeros and non-finite values are returned unchanged (as in Verificarlo: an exact zero, e.g.
 * a masked probability, carries no rounding error). */
static inline float sr_perturb_one(uint64_t pre, float x)
{
    if (x == 0.0f || !isfinite(x))
        return x;
    uint64_t c1 = mix64(pre ^ f32_bits(x));
    uint64_t c2 = mix64(c1 ^ 0x632be59bd9b4e019ull);
    double xi = ((double)(c1 >> 12) + 0.5) * 0x1p-52 - 0.5; /* in (-1/2, 1/2), exact */
    double d = f32_ulp(x) * xi;                              /* exact: a power-of-two scale */
    double xd = (double)x;
    double s = xd + d; /* TwoSum: s + e == x + d exactly */
    double bv = s - xd;
    double av = s - bv;
    double e = (xd - av) + (d - bv);
    return sr_round(s, e, c2 >> 11);
}

float lm_sr_perturb_value(uint64_t seed, uint32_t site, uint32_t idx, float x);
/* One value through sr_perturb, exported for tests/test_backend_sr.c (declared there). */
float lm_sr_perturb_value(uint64_t seed, uint32_t site, uint32_t idx, float x)
{
    uint64_t skey = sr_key(seed) ^ 0x3c6ef372fe94f82bull;
    return sr_perturb_one(mix64(skey ^ ((uint64_t)site << 32 | idx)), x);
}

/* The perturb slot: every live value of rows x [n][stride] re-rounded by sr_perturb_one. The
 * coin of element j of a row is mix(mix(pkey ^ (site, j)) ^ bits(x_j)), pkey derived from the
 * seed apart from the gemm coins' key: it depends on the seed, the stage, the index within the
 * row and the value, never on which row of a chunk or which call the row came in, so a
 * member's result does not depend on prefill step or on order. */
static void sr_perturb(lm_backend *be, float *x /* [n][stride] */, uint32_t n, uint32_t elems,
                       size_t stride, uint32_t site)
{
    uint64_t skey = sr_key(((sr_backend *)be)->seed) ^ 0x3c6ef372fe94f82bull;
    for (uint32_t t = 0; t < n; ++t) {
        float *r = x + (size_t)t * stride; /* [elems] */
        for (uint32_t j = 0; j < elems; ++j)
            r[j] = sr_perturb_one(mix64(skey ^ ((uint64_t)site << 32 | j)), r[j]);
    }
}

/* The round slot: stochastic rounding of every live value of rows x [n][stride] to a
 * profile's virtual precision at site (kvd_profile.h), the SR counterpart of the round to
 * nearest an engine running the profile does: LM_ROUND_FLOAT goes to the neighbour above with
 * probability (x - lo) / (hi - lo) (lm_round_float_bracket); LM_ROUND_Q8_0 and LM_ROUND_Q8_K
 * keep ggml's block scale (d and its inverse as round to nearest computes them, lm_q8_scale)
 * and round t = x * inverse (one float product, as ggml) to the integer above with
 * probability t - floor(t), saturated to int8 as ggml's codes (lm_q8_code). Unbiased inside
 * the int8 range, so the members spread around the exact value by up to one step of the
 * virtual precision. The coin of element j: mix(mix(rkey ^ (site, j)) ^ bits(x_j)) with rkey
 * derived from the seed apart from the gemm and perturb keys: like perturb, independent of
 * the row's place in a chunk. */
static void sr_round_rows(lm_backend *be, float *x /* [n][stride] */, uint32_t n, uint32_t elems,
                          size_t stride, uint32_t site, const lm_round_spec *spec)
{
    uint64_t rkey = sr_key(((sr_backend *)be)->seed) ^ 0xa54ff53a5f1d36f1ull;
    const bool q8 = spec->kind == LM_ROUND_Q8_0 || spec->kind == LM_ROUND_Q8_K;
    if (spec->kind != LM_ROUND_FLOAT && !q8)
        return;
    const uint32_t block = lm_q8_block_size(spec->kind);
    for (uint32_t t = 0; t < n; ++t) {
        float *r = x + (size_t)t * stride; /* [elems] */
        for (uint32_t b = 0; b < elems; b += block) {
            uint32_t nb = elems - b < block ? elems - b : block;
            float d = 1.0f, inv = 1.0f;
            if (q8)
                lm_q8_scale(spec->kind, r + b, nb, &d, &inv);
            for (uint32_t j = b; j < b + nb; ++j) {
                uint64_t coin = mix64(mix64(rkey ^ ((uint64_t)site << 32 | j)) ^ f32_bits(r[j]));
                double u = (double)(coin >> 11) * 0x1p-53; /* uniform on [0, 1) */
                if (!q8) {
                    float lo, hi;
                    double pu = lm_round_float_bracket(r[j], spec, &lo, &hi);
                    r[j] = u < pu ? hi : lo;
                } else {
                    float q = r[j] * inv;
                    float fl = floorf(q);
                    r[j] = (float)lm_q8_code(u < (double)(q - fl) ? fl + 1.0f : fl) * d;
                }
            }
        }
    }
}

static void sr_destroy(lm_backend *be)
{
    free(be);
}

static const lm_backend_i sr_vt = {
    .name = "naive-sr",
    .gemm_nt = sr_gemm_nt,
    .gemm_nn = sr_gemm_nn,
    .destroy = sr_destroy,
    .perturb = sr_perturb,
    .round = sr_round_rows,
};

int lm_backend_sr_create(lm_backend **out, uint64_t seed, lm_err *err)
{
    *out = NULL;
    sr_backend *be = calloc(1, sizeof *be);
    if (be == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "naive-sr backend: out of memory");
    be->base.vt = &sr_vt;
    be->base.n_threads = 1; /* one thread: the fixed order is part of the contract */
    be->seed = seed;
    *out = &be->base;
    return LM_OK;
}

int lm_backend_sr_create_named(lm_backend **out, const char *name, int n_threads, lm_err *err);
/* The registry's create: name is "naive-sr" or "naive-sr:seed=N". */
int lm_backend_sr_create_named(lm_backend **out, const char *name, int n_threads, lm_err *err)
{
    (void)n_threads;
    *out = NULL;
    uint64_t seed = 0;
    const char *rest = name + strlen("naive-sr");
    if (*rest != '\0') {
        const char *v = rest + strlen(":seed=");
        if (strncmp(rest, ":seed=", 6) != 0 || *v < '0' || *v > '9')
            return LM_FAIL(err, LM_E_INPUT, "backend '%s': expected naive-sr or naive-sr:seed=N",
                           name);
        if (!lm_parse_u64z(v, 0, UINT64_MAX, &seed))
            return LM_FAIL(err, LM_E_INPUT, "backend '%s': seed is not an integer in 0..2^64-1",
                           name);
    }
    return lm_backend_sr_create(out, seed, err);
}
