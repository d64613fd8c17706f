/* ref_sr.c — the reference's model in float32 with stochastic rounding: the envelope's members
 * (method, randomness and scope in ref_sr.h). */
#include "ref_sr.h"
#include "ref_variants.h"

#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define LANES 8u

/* --- randomness --- */

static uint64_t mix64(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static inline uint32_t lowbias32(uint32_t x)
{
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

/* Key of one output element: (seed key, site, a, b). */
static uint32_t key_of(uint64_t skey, uint32_t site, uint64_t a, uint64_t b)
{
    return (uint32_t)(mix64(skey ^ mix64(((uint64_t)site << 40) ^ (a * 0x9e3779b97f4a7c15ull) ^
                                         (b * 0xc2b2ae3d27d4eb4full))) >> 32);
}

static inline uint32_t coin(uint32_t key, uint64_t i)
{
    return lowbias32(key + (uint32_t)i * 0x9e3779b9u);
}

/* --- rounding --- */

static inline uint64_t dbits(double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    return u;
}

static inline double bitsd(uint64_t u)
{
    double d;
    memcpy(&d, &u, 8);
    return d;
}

/* SR of s + e to 24 significant bits, returned in a double (see ref_sr.h). */
static inline double sr24(double s, double e, uint32_t r)
{
    const uint64_t sb = dbits(s);
    const uint64_t sign = sb & 0x8000000000000000ull;
    const double a = bitsd(sb & 0x7fffffffffffffffull);
    const double b = sign ? -e : e;
    const double ulp = bitsd(sb & 0x7ff0000000000000ull) * 0x1p-23;
    const double u = (double)(r >> 3) * 0x1p-29;
    const double v = a + (b + u * ulp);
    const double rz = bitsd((dbits(v) & ~((1ull << 29) - 1)) | sign);
    return (sb & 0x7ff0000000000000ull) == 0x7ff0000000000000ull ? s : rz;
}

float ref_sr_round(double s, double e, uint32_t r)
{
    return (float)sr24(s, e, r);
}

/* x + y (floats as doubles) with one SR rounding. */
static inline double sr_add(double x, double y, uint32_t r)
{
    double s = x + y, bv = s - x, av = s - bv;
    return sr24(s, (x - av) + (y - bv), r);
}

/* --- one member --- */

enum { S_NORM, S_Q, S_K, S_V, S_ROPE, S_ATT, S_O, S_FFN_NORM, S_GATE, S_UP, S_SWIGLU, S_DOWN,
       S_RES, S_N_SITES };

typedef struct srf {
    const lm_model *m;
    const lm_hparams *hp;
    uint64_t skey;
    uint32_t n, layer, q_dim, kv_dim;
    float *x, *h, *q, *k, *v, *att, *g, *up, *cs, *sc, *tmp;
    float *xt;       /* [max_in][npad] transposed input of a matrix product */
    uint64_t npad;   /* n rounded up to LANES */
} srf;

static uint32_t site(const srf *f, uint32_t s)
{
    return f->layer * S_N_SITES + s;
}

/* 8 outputs (tokens) of one weight row: acc_l = SR(acc_l + w[i] * xt[i][l]), i left to right.
 * The vector versions run the lanes of sr_dot8_scalar with the same IEEE double and integer
 * operations in the same order (no FMA), so all three give the same bits. */
static void sr_dot8_scalar(float *out, const float *w, const float *xt, uint64_t ld, uint64_t n,
                           const uint32_t *key)
{
    double acc[LANES];
    for (unsigned l = 0; l < LANES; ++l)
        acc[l] = 0.0;
    for (uint64_t i = 0; i < n; ++i) {
        const double wi = (double)w[i];
        const uint32_t inc = (uint32_t)i * 0x9e3779b9u;
        const float *xr = xt + i * ld;
        for (unsigned l = 0; l < LANES; ++l) {
            double p = wi * (double)xr[l]; /* exact */
            double s = acc[l] + p, bv = s - acc[l], av = s - bv;
            double e = (acc[l] - av) + (p - bv);
            acc[l] = sr24(s, e, lowbias32(key[l] + inc));
        }
    }
    for (unsigned l = 0; l < LANES; ++l)
        out[l] = (float)acc[l];
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

__attribute__((target("avx2"), always_inline)) static inline __m256i lowbias8(__m256i x)
{
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846ca68bu));
    return _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
}

/* sr24 on 4 lanes; r: 4 random words. */
__attribute__((target("avx2"), always_inline)) static inline __m256d sr24_4(__m256d s, __m256d e,
                                                                         __m128i r)
{
    const __m256i sb = _mm256_castpd_si256(s);
    const __m256i sign = _mm256_and_si256(sb, _mm256_set1_epi64x((long long)0x8000000000000000ull));
    const __m256i expo = _mm256_and_si256(sb, _mm256_set1_epi64x(0x7ff0000000000000ll));
    const __m256d a = _mm256_castsi256_pd(_mm256_xor_si256(sb, sign));
    const __m256d b = _mm256_castsi256_pd(_mm256_xor_si256(_mm256_castpd_si256(e), sign));
    const __m256d ulp = _mm256_mul_pd(_mm256_castsi256_pd(expo), _mm256_set1_pd(0x1p-23));
    const __m256d u = _mm256_mul_pd(_mm256_cvtepi32_pd(_mm_srli_epi32(r, 3)),
                                    _mm256_set1_pd(0x1p-29));
    const __m256d v = _mm256_add_pd(a, _mm256_add_pd(b, _mm256_mul_pd(u, ulp)));
    const __m256i rz = _mm256_or_si256(
        _mm256_and_si256(_mm256_castpd_si256(v), _mm256_set1_epi64x(~((1ll << 29) - 1))), sign);
    const __m256i inf = _mm256_cmpeq_epi64(expo, _mm256_set1_epi64x(0x7ff0000000000000ll));
    return _mm256_blendv_pd(_mm256_castsi256_pd(rz), s, _mm256_castsi256_pd(inf));
}

__attribute__((target("avx2"), always_inline)) static inline __m256d madd4(__m256d acc, __m256d p,
                                                                        __m128i r)
{
    __m256d s = _mm256_add_pd(acc, p), bv = _mm256_sub_pd(s, acc), av = _mm256_sub_pd(s, bv);
    __m256d e = _mm256_add_pd(_mm256_sub_pd(acc, av), _mm256_sub_pd(p, bv));
    return sr24_4(s, e, r);
}

/* R rows (R <= 4) at once: R independent chains hide the latency of one SR step. */
__attribute__((target("avx2"), always_inline)) static inline void
sr_dot8_avx2_rows(float *out, const float *const *w, const float *xt, uint64_t ld, uint64_t n,
                  const uint32_t *key, const unsigned R)
{
    __m256d lo[4], hi[4];
    __m256i k[4];
    for (unsigned r = 0; r < R; ++r) {
        lo[r] = hi[r] = _mm256_setzero_pd();
        k[r] = _mm256_loadu_si256((const __m256i *)(key + LANES * r));
    }
    for (uint64_t i = 0; i < n; ++i) {
        const __m256 x = _mm256_loadu_ps(xt + i * ld);
        const __m256d xl = _mm256_cvtps_pd(_mm256_castps256_ps128(x));
        const __m256d xh = _mm256_cvtps_pd(_mm256_extractf128_ps(x, 1));
        const __m256i inc = _mm256_set1_epi32((int)((uint32_t)i * 0x9e3779b9u));
        for (unsigned r = 0; r < R; ++r) {
            const __m256d wi = _mm256_set1_pd((double)w[r][i]);
            const __m256i rb = lowbias8(_mm256_add_epi32(k[r], inc));
            lo[r] = madd4(lo[r], _mm256_mul_pd(wi, xl), _mm256_castsi256_si128(rb));
            hi[r] = madd4(hi[r], _mm256_mul_pd(wi, xh), _mm256_extracti128_si256(rb, 1));
        }
    }
    for (unsigned r = 0; r < R; ++r) {
        _mm_storeu_ps(out + LANES * r, _mm256_cvtpd_ps(lo[r]));
        _mm_storeu_ps(out + LANES * r + 4, _mm256_cvtpd_ps(hi[r]));
    }
}

__attribute__((target("avx2"))) static void sr_dot8_avx2(float *out, const float *const *w,
                                                         const float *xt, uint64_t ld,
                                                         uint64_t n, const uint32_t *key,
                                                         unsigned R)
{
    if (R == 4)
        sr_dot8_avx2_rows(out, w, xt, ld, n, key, 4);
    else
        for (unsigned r = 0; r < R; ++r)
            sr_dot8_avx2_rows(out + LANES * r, w + r, xt, ld, n, key + LANES * r, 1);
}

__attribute__((target("avx512f"), always_inline)) static inline void
sr_dot8_avx512_rows(float *out, const float *const *w, const float *xt, uint64_t ld, uint64_t n,
                    const uint32_t *key, const unsigned R)
{
    __m512d acc[4];
    __m256i k[4];
    const __m512i smask = _mm512_set1_epi64((long long)0x8000000000000000ull);
    const __m512i emask = _mm512_set1_epi64(0x7ff0000000000000ll);
    for (unsigned r = 0; r < R; ++r) {
        acc[r] = _mm512_setzero_pd();
        k[r] = _mm256_loadu_si256((const __m256i *)(key + LANES * r));
    }
    for (uint64_t i = 0; i < n; ++i) {
        const __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(xt + i * ld));
        const __m256i inc = _mm256_set1_epi32((int)((uint32_t)i * 0x9e3779b9u));
        for (unsigned r = 0; r < R; ++r) {
            const __m512d p = _mm512_mul_pd(_mm512_set1_pd((double)w[r][i]), x);
            const __m256i rb = lowbias8(_mm256_add_epi32(k[r], inc));
            __m512d s = _mm512_add_pd(acc[r], p), bv = _mm512_sub_pd(s, acc[r]),
                    av = _mm512_sub_pd(s, bv);
            __m512d e = _mm512_add_pd(_mm512_sub_pd(acc[r], av), _mm512_sub_pd(p, bv));
            const __m512i sb = _mm512_castpd_si512(s);
            const __m512i sign = _mm512_and_si512(sb, smask);
            const __m512i expo = _mm512_and_si512(sb, emask);
            const __m512d a = _mm512_castsi512_pd(_mm512_xor_si512(sb, sign));
            const __m512d b = _mm512_castsi512_pd(_mm512_xor_si512(_mm512_castpd_si512(e), sign));
            const __m512d ulp = _mm512_mul_pd(_mm512_castsi512_pd(expo), _mm512_set1_pd(0x1p-23));
            const __m512d u = _mm512_mul_pd(_mm512_cvtepi32_pd(_mm256_srli_epi32(rb, 3)),
                                            _mm512_set1_pd(0x1p-29));
            const __m512d v = _mm512_add_pd(a, _mm512_add_pd(b, _mm512_mul_pd(u, ulp)));
            const __m512i rz = _mm512_or_si512(
                _mm512_and_si512(_mm512_castpd_si512(v), _mm512_set1_epi64(~((1ll << 29) - 1))),
                sign);
            const __mmask8 inf = _mm512_cmpeq_epi64_mask(expo, emask);
            acc[r] = _mm512_mask_blend_pd(inf, _mm512_castsi512_pd(rz), s);
        }
    }
    for (unsigned r = 0; r < R; ++r)
        _mm256_storeu_ps(out + LANES * r, _mm512_cvtpd_ps(acc[r]));
}

__attribute__((target("avx512f"))) static void sr_dot8_avx512(float *out, const float *const *w,
                                                             const float *xt, uint64_t ld,
                                                             uint64_t n, const uint32_t *key,
                                                             unsigned R)
{
    if (R == 4)
        sr_dot8_avx512_rows(out, w, xt, ld, n, key, 4);
    else
        for (unsigned r = 0; r < R; ++r)
            sr_dot8_avx512_rows(out + LANES * r, w + r, xt, ld, n, key + LANES * r, 1);
}
#endif

#ifdef LM_TEST_HOOKS
int ref_sr_test_force_kernel = -1; /* 0 scalar, 1 avx2, 2 avx512 (when the CPU has it) */
#endif

static int sr_kernel(void)
{
    int best = 0;
#if defined(__GNUC__) && defined(__x86_64__)
    __builtin_cpu_init();
    best = __builtin_cpu_supports("avx512f") ? 2 : (__builtin_cpu_supports("avx2") ? 1 : 0);
#endif
#ifdef LM_TEST_HOOKS
    if (ref_sr_test_force_kernel >= 0 && ref_sr_test_force_kernel <= best)
        return ref_sr_test_force_kernel;
#endif
    return best;
}

/* Rows w[0..R) (R <= 4) against 8 tokens: out[r][l], key[r][l]. */
static void sr_dot8(float *out, const float *const *w, const float *xt, uint64_t ld, uint64_t n,
                    const uint32_t *key, unsigned R, int kern)
{
#if defined(__GNUC__) && defined(__x86_64__)
    if (kern == 2) {
        sr_dot8_avx512(out, w, xt, ld, n, key, R);
        return;
    }
    if (kern == 1) {
        sr_dot8_avx2(out, w, xt, ld, n, key, R);
        return;
    }
#endif
    (void)kern;
    for (unsigned r = 0; r < R; ++r)
        sr_dot8_scalar(out + LANES * r, w[r], xt, ld, n, key + LANES * r);
}

/* out[t][r] (+)= in[t] . W[r] (+ b[r]) for t < f->n, with SR; in [n][n_in], W [n_out][n_in]. */
static void matmul(srf *f, float *out, const float *in, const float *W, const float *b,
                   uint64_t n_rows, uint64_t n_in, uint64_t n_out, bool acc, uint32_t st)
{
    const uint64_t np = (n_rows + LANES - 1) / LANES * LANES;
    const int kern = sr_kernel();
    memset(f->xt, 0, n_in * np * sizeof *f->xt);
    for (uint64_t t = 0; t < n_rows; ++t)
        for (uint64_t i = 0; i < n_in; ++i)
            f->xt[i * np + t] = in[t * n_in + i];
    for (uint64_t r0 = 0; r0 < n_out; r0 += 4) {
        const unsigned R = n_out - r0 < 4 ? (unsigned)(n_out - r0) : 4;
        const float *wr[4];
        for (unsigned g = 0; g < R; ++g)
            wr[g] = W + (r0 + g) * n_in;
        for (uint64_t t0 = 0; t0 < np; t0 += LANES) {
            uint32_t key[4 * LANES];
            float o[4 * LANES];
            for (unsigned g = 0; g < R; ++g)
                for (unsigned l = 0; l < LANES; ++l)
                    key[g * LANES + l] = key_of(f->skey, st, t0 + l, r0 + g);
            sr_dot8(o, wr, f->xt + t0, np, n_in, key, R, kern);
            for (unsigned g = 0; g < R; ++g)
                for (unsigned l = 0; l < LANES && t0 + l < n_rows; ++l) {
                    const uint64_t t = t0 + l, r = r0 + g;
                    double y = o[g * LANES + l];
                    uint32_t k2 = key_of(f->skey, st + (1u << 20), t, r);
                    if (b)
                        y = sr_add(y, (double)b[r], coin(k2, 0));
                    float *d = &out[t * n_out + r];
                    *d = acc ? (float)sr_add((double)*d, y, coin(k2, 1)) : (float)y;
                }
        }
    }
}

/* out[e] = x[e] / sqrt(mean(x^2) + eps) * w[e], every step SR (sum of squares left to right). */
static void rmsnorm(srf *f, float *out, const float *x, const float *w, uint64_t row, uint32_t st)
{
    const uint64_t e = f->hp->n_embd;
    uint32_t key = key_of(f->skey, st, row, 0);
    double ss = 0.0;
    for (uint64_t i = 0; i < e; ++i) {
        double p = (double)x[i] * (double)x[i];
        ss = sr_add(ss, p, coin(key, i));
    }
    double mean = sr24(ss / (double)e, 0.0, coin(key, e));
    double t = sr_add(mean, (double)f->hp->rms_eps, coin(key, e + 1));
    double inv = sr24(1.0 / sqrt(t), 0.0, coin(key, e + 2));
    for (uint64_t i = 0; i < e; ++i) {
        double y = sr24((double)x[i] * inv, 0.0, coin(key, e + 3 + 2 * i));
        out[i] = (float)sr24(y * (double)w[i], 0.0, coin(key, e + 4 + 2 * i));
    }
}

/* (a, b) <- (a c - b s, a s + b c), each product and sum SR. */
static void rotate(float *a, float *b, double c, double s, uint32_t key, uint64_t i)
{
    double ac = sr24((double)*a * c, 0.0, coin(key, 6 * i)),
           bs = sr24((double)*b * s, 0.0, coin(key, 6 * i + 1)),
           as = sr24((double)*a * s, 0.0, coin(key, 6 * i + 2)),
           bc = sr24((double)*b * c, 0.0, coin(key, 6 * i + 3));
    *a = (float)sr_add(ac, -bs, coin(key, 6 * i + 4));
    *b = (float)sr_add(as, bc, coin(key, 6 * i + 5));
}

static void rope(srf *f, uint64_t t)
{
    const lm_hparams *hp = f->hp;
    const uint32_t half = hp->n_rot / 2;
    float *cs = f->cs + t * hp->n_rot;
    if (f->layer == 0) { /* cos/sin in double, SR to float once per position */
        uint32_t key = key_of(f->skey, S_N_SITES * 1000u, t, 0);
        for (uint32_t i = 0; i < half; ++i) {
            double ang = (double)t * pow((double)hp->rope_theta, -2.0 * i / hp->n_rot);
            cs[2 * i] = (float)sr24(cos(ang), 0.0, coin(key, 2 * i));
            cs[2 * i + 1] = (float)sr24(sin(ang), 0.0, coin(key, 2 * i + 1));
        }
    }
    const uint32_t nh[2] = {hp->n_head, hp->n_head_kv};
    float *base[2] = {f->q + t * f->q_dim, f->k + t * f->kv_dim};
    for (int w = 0; w < 2; ++w)
        for (uint32_t h = 0; h < nh[w]; ++h) {
            float *x = base[w] + (uint64_t)h * hp->head_dim;
            uint32_t key = key_of(f->skey, site(f, S_ROPE), t, (uint64_t)w << 32 | h);
            for (uint32_t i = 0; i < half; ++i) {
                if (hp->rope_type == LM_ROPE_NEOX)
                    rotate(&x[i], &x[i + half], cs[2 * i], cs[2 * i + 1], key, i);
                else
                    rotate(&x[2 * i], &x[2 * i + 1], cs[2 * i], cs[2 * i + 1], key, i);
            }
        }
}

/* One (token, head): scores over visible keys, softmax with the sink, then p . V. */
static void attention(srf *f, uint64_t t, uint32_t h, float scale)
{
    const lm_hparams *hp = f->hp;
    const lm_layer *L = &f->m->layers[f->layer];
    const uint64_t hd = hp->head_dim, kvh = h / (hp->n_head / hp->n_head_kv);
    const float *q = f->q + t * f->q_dim + h * hd;
    uint32_t key = key_of(f->skey, site(f, S_ATT), t, h);
    uint64_t m = 0, c = 0;
    double mx = -(double)INFINITY;
    for (uint64_t j = 0; j <= t; ++j) {
        if (!ref_window_visible((uint32_t)t, (uint32_t)j, L->window))
            continue;
        const float *k = f->k + j * f->kv_dim + kvh * hd;
        uint32_t kk = key_of(f->skey, site(f, S_ATT) + (1u << 21), t * hp->n_head + h, j);
        double acc = 0.0;
        for (uint64_t d = 0; d < hd; ++d)
            acc = sr_add(acc, (double)q[d] * (double)k[d], coin(kk, d));
        double s = sr24(acc * (double)scale, 0.0, coin(kk, hd));
        f->sc[m++] = (float)s;
        if (s > mx)
            mx = s;
    }
    double sink = L->sinks ? (double)L->sinks[h] : -(double)INFINITY;
    if (sink > mx)
        mx = sink;
    double sum = 0.0;
    for (uint64_t i = 0; i < m; ++i) {
        double d = sr_add((double)f->sc[i], -mx, coin(key, c++));
        f->sc[i] = (float)sr24(exp(d), 0.0, coin(key, c++));
        sum = sr_add(sum, (double)f->sc[i], coin(key, c++));
    }
    if (L->sinks) {
        double d = sr_add(sink, -mx, coin(key, c++));
        double es = sr24(exp(d), 0.0, coin(key, c++));
        sum = sr_add(sum, es, coin(key, c++));
    }
    for (uint64_t i = 0; i < m; ++i)
        f->sc[i] = (float)sr24((double)f->sc[i] / sum, 0.0, coin(key, c++));
    float *o = f->att + t * f->q_dim + h * hd;
    for (uint64_t d = 0; d < hd; ++d) {
        double acc = 0.0;
        uint64_t i = 0;
        for (uint64_t j = 0; j <= t; ++j) {
            if (!ref_window_visible((uint32_t)t, (uint32_t)j, L->window))
                continue;
            double p = (double)f->sc[i++] * (double)f->v[j * f->kv_dim + kvh * hd + d];
            acc = sr_add(acc, p, coin(key, c++));
        }
        o[d] = (float)acc;
    }
}

static void swiglu(srf *f, uint64_t t)
{
    const uint64_t nff = f->hp->n_ff;
    uint32_t key = key_of(f->skey, site(f, S_SWIGLU), t, 0);
    for (uint64_t i = 0; i < nff; ++i) {
        double g = f->g[t * nff + i];
        double s = sr24(g / (1.0 + exp(-g)), 0.0, coin(key, 2 * i));
        f->g[t * nff + i] = (float)sr24(s * (double)f->up[t * nff + i], 0.0, coin(key, 2 * i + 1));
    }
}

void ref_sr_out_free(ref_sr_out *o)
{
    if (o == NULL)
        return;
    free(o->pos);
    free(o->k);
    free(o->v);
    free(o->logits);
    memset(o, 0, sizeof *o);
}

int ref_sr_supported(const lm_model *m, const ref_request *rq, lm_err *err)
{
    int st = ref_request_check(m, rq, err);
    if (st)
        return st;
    if (m->hp.n_expert > 0)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "SR reference: MoE layers are not implemented");
    if (rq->rot_max_size != 0)
        return LM_FAIL(err, LM_E_UNSUPPORTED,
                       "SR reference: rotating-cache schedules are not implemented");
    return LM_OK;
}

static void srf_free(srf *f)
{
    float *all[] = {f->x, f->h, f->q, f->k, f->v, f->att, f->g, f->up, f->cs, f->sc, f->tmp, f->xt};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
        free(all[i]);
}

int ref_sr_run(ref_sr_out *out, const lm_model *m, const ref_request *rq, uint64_t seed,
               lm_err *err)
{
    memset(out, 0, sizeof *out);
    int st = ref_sr_supported(m, rq, err);
    if (st)
        return st;
    const lm_hparams *hp = &m->hp;
    srf f = {.m = m, .hp = hp, .skey = mix64(seed ^ 0x5352726566ull), .n = rq->n_tokens};
    f.q_dim = hp->n_head * hp->head_dim;
    f.kv_dim = hp->n_head_kv * hp->head_dim;
    const uint64_t n = f.n, e = hp->n_embd;
    f.npad = (n + LANES - 1) / LANES * LANES;
    uint64_t max_in = e > f.q_dim ? e : f.q_dim;
    if (hp->n_ff > max_in)
        max_in = hp->n_ff;
    out->n_layer = hp->n_layer;
    out->n_prompt = rq->n_prompt;
    out->kv_dim = f.kv_dim;
    out->n_vocab = hp->n_vocab;
    out->n_pos = rq->pos ? rq->n_pos : rq->n_tokens - rq->n_prompt + 1;
    out->pos = malloc(out->n_pos * sizeof *out->pos);
    for (uint32_t i = 0; out->pos && i < out->n_pos; ++i)
        out->pos[i] = rq->pos ? rq->pos[i] : rq->n_prompt - 1 + i;
    const uint64_t kvl = (uint64_t)rq->n_prompt * f.kv_dim;
    out->k = malloc(hp->n_layer * kvl * sizeof(float) + 1);
    out->v = malloc(hp->n_layer * kvl * sizeof(float) + 1);
    out->logits = malloc((uint64_t)out->n_pos * hp->n_vocab * sizeof(float));
    f.x = malloc(n * e * sizeof(float));
    f.h = malloc(f.npad * e * sizeof(float));
    f.q = malloc(n * f.q_dim * sizeof(float));
    f.k = malloc(n * f.kv_dim * sizeof(float));
    f.v = malloc(n * f.kv_dim * sizeof(float));
    f.att = malloc(n * f.q_dim * sizeof(float));
    f.g = malloc(n * hp->n_ff * sizeof(float));
    f.up = malloc(n * hp->n_ff * sizeof(float));
    f.cs = malloc(n * (hp->n_rot ? hp->n_rot : 1) * sizeof(float));
    f.sc = malloc(n * sizeof(float));
    f.tmp = malloc((uint64_t)out->n_pos * e * sizeof(float));
    f.xt = malloc(max_in * f.npad * sizeof(float));
    if (!out->pos || !out->k || !out->v || !out->logits || !f.x || !f.h || !f.q || !f.k || !f.v ||
        !f.att || !f.g || !f.up || !f.cs || !f.sc || !f.tmp || !f.xt) {
        srf_free(&f);
        ref_sr_out_free(out);
        return LM_FAIL(err, LM_E_NOMEM, "SR reference: out of memory");
    }
    for (uint64_t t = 0; t < n; ++t)
        memcpy(f.x + t * e, m->tok_embd + (uint64_t)rq->tokens[t] * e, e * sizeof(float));
    const float scale = (float)(1.0 / sqrt((double)hp->head_dim));
    for (uint32_t l = 0; l < hp->n_layer; ++l) {
        const lm_layer *L = &m->layers[l];
        f.layer = l;
        for (uint64_t t = 0; t < n; ++t)
            rmsnorm(&f, f.h + t * e, f.x + t * e, L->attn_norm, t, site(&f, S_NORM));
        matmul(&f, f.q, f.h, L->wq, L->bq, n, e, f.q_dim, false, site(&f, S_Q));
        matmul(&f, f.k, f.h, L->wk, L->bk, n, e, f.kv_dim, false, site(&f, S_K));
        matmul(&f, f.v, f.h, L->wv, L->bv, n, e, f.kv_dim, false, site(&f, S_V));
        for (uint64_t t = 0; hp->n_rot && t < n; ++t)
            rope(&f, t);
        memcpy(out->k + l * kvl, f.k, kvl * sizeof(float));
        memcpy(out->v + l * kvl, f.v, kvl * sizeof(float));
        for (uint64_t t = 0; t < n; ++t)
            for (uint32_t h = 0; h < hp->n_head; ++h)
                attention(&f, t, h, scale);
        matmul(&f, f.x, f.att, L->wo, L->bo, n, f.q_dim, e, true, site(&f, S_O));
        for (uint64_t t = 0; t < n; ++t)
            rmsnorm(&f, f.h + t * e, f.x + t * e, L->ffn_norm, t, site(&f, S_FFN_NORM));
        matmul(&f, f.g, f.h, L->w_gate, NULL, n, e, hp->n_ff, false, site(&f, S_GATE));
        matmul(&f, f.up, f.h, L->w_up, NULL, n, e, hp->n_ff, false, site(&f, S_UP));
        for (uint64_t t = 0; t < n; ++t)
            swiglu(&f, t);
        matmul(&f, f.x, f.g, L->w_down, NULL, n, hp->n_ff, e, true, site(&f, S_DOWN));
    }
    f.layer = hp->n_layer;
    for (uint32_t i = 0; i < out->n_pos; ++i)
        rmsnorm(&f, f.tmp + (uint64_t)i * e, f.x + (uint64_t)out->pos[i] * e, m->output_norm,
                out->pos[i], site(&f, S_NORM));
    matmul(&f, out->logits, f.tmp, m->output, NULL, out->n_pos, e, hp->n_vocab, false,
           site(&f, S_Q));
    srf_free(&f);
    return LM_OK;
}

/* --- members in parallel --- */

typedef struct ens_job {
    ref_sr_out *out;
    uint32_t n;
    const lm_model *m;
    const ref_request *rq;
    uint64_t seed;
    atomic_uint next;
    atomic_int failed;
    lm_err err;
    pthread_mutex_t mu;
} ens_job;

static void *ens_worker(void *p)
{
    ens_job *j = p;
    for (;;) {
        unsigned i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n || atomic_load(&j->failed))
            break;
        lm_err e = {0};
        if (ref_sr_run(&j->out[i], j->m, j->rq, j->seed + i, &e) != LM_OK) {
            pthread_mutex_lock(&j->mu);
            if (!atomic_load(&j->failed))
                j->err = e;
            atomic_store(&j->failed, 1);
            pthread_mutex_unlock(&j->mu);
        }
    }
    return NULL;
}

int ref_sr_ensemble(ref_sr_out *out, uint32_t n, const lm_model *m, const ref_request *rq,
                    uint64_t seed, int n_threads, lm_err *err)
{
    memset(out, 0, n * sizeof *out);
    int st = ref_sr_supported(m, rq, err);
    if (st)
        return st;
    long c = sysconf(_SC_NPROCESSORS_ONLN);
    int nt = n_threads > 0 ? n_threads : (c < 1 ? 1 : (int)c);
    if ((uint32_t)nt > n)
        nt = (int)n;
    if (nt > 64)
        nt = 64;
    ens_job j = {.out = out, .n = n, .m = m, .rq = rq, .seed = seed};
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    pthread_mutex_init(&j.mu, NULL);
    pthread_t th[64];
    int started = 0;
    for (int t = 1; t < nt; ++t) {
        if (pthread_create(&th[t], NULL, ens_worker, &j) != 0)
            break;
        started = t;
    }
    ens_worker(&j);
    for (int t = 1; t <= started; ++t)
        pthread_join(th[t], NULL);
    pthread_mutex_destroy(&j.mu);
    if (atomic_load(&j.failed)) {
        for (uint32_t i = 0; i < n; ++i)
            ref_sr_out_free(&out[i]);
        *err = j.err;
        return err->code ? err->code : LM_E_NOMEM;
    }
    return LM_OK;
}
