/* ref_sr.c — the reference's model in float32 with stochastic rounding: the envelope's members
 * (method, randomness and scope in ref_sr.h). */
#include "ref_sr.h"
#include "ref_calib.h"
#include "ref_variants.h"
#include "kvd_util.h"

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

/* Key of one output element: (seed key, site, a, b). */
static uint32_t key_of(uint64_t skey, uint32_t site, uint64_t a, uint64_t b)
{
    return (uint32_t)(mix64(skey ^ mix64(((uint64_t)site << 40) ^ (a * 0x9e3779b97f4a7c15ull) ^
                                         (b * 0xc2b2ae3d27d4eb4full))) >> 32);
}

static inline uint32_t coin(uint32_t key, uint64_t i)
{
    return ref_coin(key, i);
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

/* SR of v to 24 significant bits, returned in a double (see ref_sr.h): the coin word c < 2^29 is
 * added to the 29 bits below v's 24-bit significand (a carry is a round-up, into the exponent
 * when the significand overflows) and those 29 bits are cleared. The sign bit is never reached
 * (|v| + 2^29 ulp53 < 2^1024 for finite v); +-Inf has zero low bits and stays; a NaN stays a NaN
 * (its quiet bit 51 is above the cleared bits). */
static inline double sr29(double v, uint64_t c)
{
    return bitsd((dbits(v) + c) & ~((1ull << 29) - 1));
}

/* sr29 with the top 29 bits of r. */
static inline double sr24(double v, uint32_t r)
{
    return sr29(v, r >> 3);
}

float ref_sr_round(double v, uint32_t r)
{
    return (float)sr24(v, r);
}

/* x + y (floats as doubles) with one SR rounding of the sum rounded to double. */
static inline double sr_add(double x, double y, uint32_t r)
{
    return sr24(x + y, r);
}

/* --- one member --- */

enum { S_NORM, S_Q, S_K, S_V, S_ROPE, S_ATT, S_O, S_FFN_NORM, S_GATE, S_UP, S_SWIGLU, S_DOWN,
       S_RES, S_N_SITES };
/* Sites of the architecture variants' operations (scaled embeddings, Q/K norms, sandwich
 * norms), numbered apart from the sites above (vsite) so that a llama-shaped model's keys do
 * not depend on them. */
enum { V_EMBD, V_QK_NORM, V_ATT_POST, V_ATT_ADD, V_FFN_POST, V_FFN_ADD, V_ROUTER, V_GATE_W,
       V_MOE_ADD, V_N_SITES };
/* Expert x's gate, up and down products of a layer: esite, numbered apart from both. */
enum { E_GATE, E_UP, E_ACT, E_DOWN, E_N_SITES };

typedef struct srf {
    const ref_model *m;
    const ref_hparams *hp;
    uint64_t skey;
    int kern;        /* sr_kernel() of the run: the SR kernel and coin fill every product uses */
    uint32_t n, layer, q_dim, kv_dim;
    float *x, *h, *q, *k, *v, *att, *g, *up, *cs, *tmp;
    float *sc;       /* [4][n] scores, then probabilities, of up to 4 heads */
    float *cs_swa;   /* [n][n_rot] cos/sin at the sliding layers' own theta, or NULL (= cs) */
    float *y;        /* [n][n_embd] a block's output before its post-norm (sandwich models) */
    uint32_t ff_cur; /* columns of g and up: n_ff, or n_ff_exp inside an MoE layer */
    float *router;   /* [n][n_expert] router logits (MoE) */
    float *gw;       /* [n][k] gate weights of the selected experts */
    float *ye;       /* [n][n_embd] one expert's output for every token */
    float *yk;       /* [n][k][n_embd] output of each selected expert */
    uint32_t *sel;   /* [n][k] selected experts, rank order */
    ref_sr_out *out; /* the member's output: routing recorded there (moe_sel, moe_margin) */
    float *xt;       /* [max_in][npad] transposed input of a matrix product */
    double *wd;      /* [4][max_in] the weight rows of a matrix product as doubles */
    uint64_t *at;    /* [max_in + 2][npad] a matrix product's token coin words (A) */
    uint64_t *bt;    /* [4][max_in + 2] the row coin words (B) of a block of 4 rows */
    /* attention (attention_layer; hdp: head_dim rounded up to LANES, kvp = n_head_kv hdp) */
    float *kt;       /* [n_head_kv][head_dim][npad] K transposed per KV head */
    float *vp;       /* [n][kvp] V, each head padded to hdp */
    uint64_t *akt;   /* [n_head_kv][head_dim + 1][npad] token coin words of q . k */
    uint64_t *avp;   /* [n][kvp] token coin words of p . V */
    double *qw;      /* [4][head_dim] query rows as doubles */
    uint64_t *bq;    /* [4][head_dim + 1] row coin words of q . k */
    double *pw;      /* [4][n] probability rows as doubles */
    uint64_t *bv;    /* [4][n] row coin words of p . V */
    uint64_t npad;   /* n rounded up to LANES */
    const ref_sr_profile *prof; /* rq->sr_profile when it rounds anything, else NULL */
    float *rrow;     /* [max_in] a product's input row or weight row rounded by the profile */
    void (*on_layer)(void *user); /* called after every layer and the output, or NULL */
    void *on_layer_user;
} srf;

/* The seed key of a member (srf.skey). */
static uint64_t seed_key(uint64_t seed)
{
    return mix64(seed ^ 0x5352726566ull);
}

static uint32_t site(const srf *f, uint32_t s)
{
    return f->layer * S_N_SITES + s;
}

static uint32_t vsite(const srf *f, uint32_t s)
{
    return (1u << 19) + f->layer * V_N_SITES + s;
}

static uint32_t esite(const srf *f, uint32_t x, uint32_t s)
{
    return (1u << 18) + (f->layer * f->hp->n_expert + x) * E_N_SITES + s;
}

/* The embedding table's rounding words at WEIGHT (ref_vprec.h): the lookup's rows and, when the
 * output is tied to the table, the output projection's rows, so that both read one rounding. */
#define ST_EMBD_TABLE (1u << 20)

/* --- the profile's rounding (ref_vprec.h) --- */

/* The profile's rounding at site s when it rounds the site's values (FLOAT, Q8_0, Q8_K), else
 * NULL. */
static const ref_vp *vp_at(const srf *f, ref_vp_site s)
{
    if (f->prof == NULL)
        return NULL;
    const ref_vp *vp = &f->prof->site[s];
    return vp->kind == REF_VP_NONE || vp->kind == REF_VP_PER_WEIGHT ? NULL : vp;
}

/* The key of the rounding words of row `row` of a value of stage st (sub: which value, which
 * rounding), apart from every arithmetic coin by the salted seed key. */
static uint32_t vp_key(const srf *f, uint32_t st, uint64_t row, uint64_t sub)
{
    return key_of(f->skey ^ 0x7670726563ull, st, row, sub);
}

/* Rows x [n][e] rounded to the profile's precision at site s (nothing when it does not round
 * there), row t with the words of vp_key(st, t, which << 8 | s). */
static void vp_rows(const srf *f, ref_vp_site s, float *x, uint64_t n, uint64_t e, uint32_t st,
                    uint64_t which)
{
    const ref_vp *vp = vp_at(f, s);
    for (uint64_t t = 0; vp != NULL && t < n; ++t)
        ref_vp_round(x + t * e, e, vp, vp_key(f, st, t, which << 8 | s));
}

/* The ggml type of the weight tensor holding W (0, float32, for a model built in memory). */
static uint32_t weight_type(const ref_model *m, const float *W)
{
    const uintptr_t p = (uintptr_t)W;
    for (uint32_t i = 0; m->weights != NULL && i < m->n_weights; ++i) {
        const ref_weight *w = &m->weights[i];
        const uintptr_t lo = (uintptr_t)w->data;
        if (p >= lo && p < lo + w->n_elem * sizeof(float))
            return w->type;
    }
    return 0;
}

/* How a matrix product reads its operands under the profile:
 *   in: its input rows rounded to the format its weight's type gets (REF_VP_PER_WEIGHT at the
 *       input's site), with the words of the stage in_st that produced the input and the
 *       format: products of one input and one format read the same rounded values, as ggml
 *       converts an input once per format;
 *   w:  its weight rows rounded at REF_VP_WEIGHT, row r with the words of (w_st, r).
 * NULL: read as they are. */
typedef struct mm_vp {
    const ref_vp *in;
    uint32_t in_st;
    const ref_vp *w;
    uint32_t w_st;
} mm_vp;

static mm_vp mm_vp_of(const srf *f, ref_vp_site in_site, uint32_t in_st, const float *W,
                      uint32_t w_st)
{
    mm_vp v = {.in_st = in_st, .w = vp_at(f, REF_VP_WEIGHT), .w_st = w_st};
    if (f->prof != NULL && f->prof->site[in_site].kind == REF_VP_PER_WEIGHT) {
        const uint32_t t = weight_type(f->m, W);
        const ref_vp *vp = t < REF_VP_N_TYPES ? &f->prof->per_type[t] : NULL;
        v.in = vp != NULL && vp->kind != REF_VP_NONE ? vp : NULL;
    }
    return v;
}

/* --- matrix products --- */

/* The coins of a matrix product at site st come from two tables instead of one hash per
 * multiply-add: the coin (the 29 bits sr29 adds) of term i of output (t, r) is
 *   c(t, r, i) = A_t(i) ^ B_r(i),
 *   A_t(i) = lowbias32(ka_t + i * INC_A) >> 3,  ka_t = key_of(seed key, st, t, ~0)  (token t)
 *   B_r(i) = lowbias32(kb_r + i * INC_B) >> 3,  kb_r = key_of(seed key, st, ~0, r)  (row r)
 * for i < n_in (the multiply-adds), i = n_in (the bias add) and i = n_in + 1 (the add into the
 * destination). A holds npad x (n_in + 2) words per product, B 4 x (n_in + 2) per block of 4
 * rows: the kernel's coin is one XOR. With the hash words taken as independent and uniform,
 * every coin is uniform on [0, 2^29) (a uniform word XOR an independent one), and coins are
 * independent unless their (token, row) pairs, all at one term i, close a cycle: the coins of
 * one output's reduction, of one token's outputs at one term and of one row's outputs at one
 * term are each mutually independent, while e.g. c(t, r, i) ^ c(t, r', i) ^ c(t', r, i) ^
 * c(t', r', i) = 0. Pairwise independence is what the rounding errors' means, variances and
 * covariances depend on, so each rounding stays unbiased and errors of different operations
 * stay uncorrelated. The increments differ so that a token key equal to a row key does not make
 * A_t = B_r (coins 0: truncation for a whole output). The words depend on (seed, site, t, r,
 * i) only, never on lanes, token groups, padding, kernels or threads. */
#define INC_A 0x9e3779b9u
#define INC_B 0x85ebca77u

static uint32_t key_a(const srf *f, uint32_t st, uint64_t t)
{
    return key_of(f->skey, st, t, UINT64_MAX);
}

static uint32_t key_b(const srf *f, uint32_t st, uint64_t r)
{
    return key_of(f->skey, st, UINT64_MAX, r);
}

/* dst[i] = lowbias32(key + i * inc) >> 3 for i < n. */
static void fill_row_scalar(uint64_t *dst, uint32_t key, uint32_t inc, uint64_t n)
{
    for (uint64_t i = 0; i < n; ++i)
        dst[i] = ref_lowbias32(key + (uint32_t)i * inc) >> 3;
}

/* dst[i * ld + l] = lowbias32(key[l] + i * inc) >> 3 for i < n, l < LANES. */
static void fill_cols_scalar(uint64_t *dst, uint64_t ld, const uint32_t *key, uint32_t inc,
                             uint64_t n)
{
    for (uint64_t i = 0; i < n; ++i)
        for (unsigned l = 0; l < LANES; ++l)
            dst[i * ld + l] = ref_lowbias32(key[l] + (uint32_t)i * inc) >> 3;
}

/* 8 outputs (tokens) of one weight row: acc_l = sr29(acc_l + w[i] * xt[i][l], a[i][l] ^ b[i]),
 * i left to right; the product is exact in double, the sum is rounded to double. The vector
 * versions run the lanes of sr_dot8_scalar with the same IEEE double and integer operations in
 * the same order (the multiply and add fused, which rounds the same exact sum once: see
 * madd4), so all three give the same bits. xt and a: row stride ld. */
static void sr_dot8_scalar(float *out, const double *w, const uint64_t *b, const float *xt,
                           const uint64_t *a, uint64_t ld, uint64_t n)
{
    double acc[LANES];
    for (unsigned l = 0; l < LANES; ++l)
        acc[l] = 0.0;
    for (uint64_t i = 0; i < n; ++i) {
        const double wi = w[i];
        const float *xr = xt + i * ld;
        const uint64_t *ar = a + i * ld;
        for (unsigned l = 0; l < LANES; ++l)
            acc[l] = sr29(acc[l] + wi * (double)xr[l], ar[l] ^ b[i]);
    }
    for (unsigned l = 0; l < LANES; ++l)
        out[l] = (float)acc[l];
}

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>

/* lowbias32 of 8 words, then >> 3: 29-bit coin words. */
__attribute__((target("avx2"), always_inline)) static inline __m256i coins29_8(__m256i x)
{
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32(0x7feb352d));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 15));
    x = _mm256_mullo_epi32(x, _mm256_set1_epi32((int)0x846ca68bu));
    x = _mm256_xor_si256(x, _mm256_srli_epi32(x, 16));
    return _mm256_srli_epi32(x, 3);
}

/* The 8 words of v zero-extended into dst[0..8). */
__attribute__((target("avx2"), always_inline)) static inline void store_u64x8(uint64_t *dst,
                                                                           __m256i v)
{
    _mm256_storeu_si256((__m256i *)dst, _mm256_cvtepu32_epi64(_mm256_castsi256_si128(v)));
    _mm256_storeu_si256((__m256i *)(dst + 4),
                        _mm256_cvtepu32_epi64(_mm256_extracti128_si256(v, 1)));
}

__attribute__((target("avx2"))) static void fill_row_avx2(uint64_t *dst, uint32_t key,
                                                          uint32_t inc, uint64_t n)
{
    const __m256i step = _mm256_set1_epi32((int)(8u * inc));
    __m256i x = _mm256_add_epi32(_mm256_set1_epi32((int)key),
                                 _mm256_mullo_epi32(_mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7),
                                                    _mm256_set1_epi32((int)inc)));
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8, x = _mm256_add_epi32(x, step))
        store_u64x8(dst + i, coins29_8(x));
    fill_row_scalar(dst + i, key + (uint32_t)i * inc, inc, n - i);
}

__attribute__((target("avx2"))) static void fill_cols_avx2(uint64_t *dst, uint64_t ld,
                                                           const uint32_t *key, uint32_t inc,
                                                           uint64_t n)
{
    const __m256i step = _mm256_set1_epi32((int)inc);
    __m256i x = _mm256_loadu_si256((const __m256i *)key);
    for (uint64_t i = 0; i < n; ++i, x = _mm256_add_epi32(x, step))
        store_u64x8(dst + i * ld, coins29_8(x));
}

/* d[i] = s[i] for i below the largest multiple of 4 <= n; returns that count. */
__attribute__((target("avx2"))) static uint64_t to_f64_avx2(double *d, const float *s, uint64_t n)
{
    uint64_t i = 0;
    for (; i + 4 <= n; i += 4)
        _mm256_storeu_pd(d + i, _mm256_cvtps_pd(_mm_loadu_ps(s + i)));
    return i;
}

/* sr29 of acc + w x on 4 lanes with coin words c. w and x hold floats, so w x is exact in
 * double (two 24-bit significands, far from the double range's ends) and the FMA rounds the
 * same exact sum once as sr_dot8_scalar's multiply, then add: the same bits. */
__attribute__((target("avx2,fma"), always_inline)) static inline __m256d
madd4(__m256d acc, __m256d w, __m256d x, __m256i c)
{
    const __m256i s = _mm256_castpd_si256(_mm256_fmadd_pd(w, x, acc));
    const __m256i t = _mm256_add_epi64(s, c);
    return _mm256_castsi256_pd(_mm256_and_si256(t, _mm256_set1_epi64x(~((1ll << 29) - 1))));
}

/* One multiply-add step of a row's 8 lanes (lo, hi: lanes 0-3, 4-7) with weight *wp and row
 * coin word *bp. */
#define SR_STEP8(lo, hi, wp, bp)                                                                 \
    do {                                                                                         \
        const __m256d wi_ = _mm256_broadcast_sd(wp);                                             \
        const __m256i bi_ = _mm256_set1_epi64x((long long)*(bp));                                \
        lo = madd4(lo, wi_, xl, _mm256_xor_si256(al, bi_));                                      \
        hi = madd4(hi, wi_, xh, _mm256_xor_si256(ah, bi_));                                      \
    } while (0)

/* The lanes of 8 tokens of xt row i as doubles (xl: 0-3, xh: 4-7), and their coin words. */
#define SR_LOAD8(i)                                                                              \
    const __m256 x_ = _mm256_loadu_ps(xt + (i) * ld);                                            \
    const __m256d xl = _mm256_cvtps_pd(_mm256_castps256_ps128(x_));                              \
    const __m256d xh = _mm256_cvtps_pd(_mm256_extractf128_ps(x_, 1));                            \
    const __m256i al = _mm256_loadu_si256((const __m256i *)(a + (i) * ld));                      \
    const __m256i ah = _mm256_loadu_si256((const __m256i *)(a + (i) * ld + 4))

/* 4 rows at once, in named registers: 8 independent chains hide the latency of one SR step. */
__attribute__((target("avx2,fma"))) static void
sr_dot8_avx2_4(float *out, const double *const *w, const uint64_t *const *b, const float *xt,
               const uint64_t *a, uint64_t ld, uint64_t n)
{
    __m256d lo0 = _mm256_setzero_pd(), hi0 = lo0, lo1 = lo0, hi1 = lo0, lo2 = lo0, hi2 = lo0,
            lo3 = lo0, hi3 = lo0;
    const double *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];
    const uint64_t *b0 = b[0], *b1 = b[1], *b2 = b[2], *b3 = b[3];
    for (uint64_t i = 0; i < n; ++i) {
        SR_LOAD8(i);
        SR_STEP8(lo0, hi0, w0 + i, b0 + i);
        SR_STEP8(lo1, hi1, w1 + i, b1 + i);
        SR_STEP8(lo2, hi2, w2 + i, b2 + i);
        SR_STEP8(lo3, hi3, w3 + i, b3 + i);
    }
    const __m256d acc[8] = {lo0, hi0, lo1, hi1, lo2, hi2, lo3, hi3};
    for (unsigned j = 0; j < 8; ++j)
        _mm_storeu_ps(out + 4 * j, _mm256_cvtpd_ps(acc[j]));
}

__attribute__((target("avx2,fma"))) static void
sr_dot8_avx2_1(float *out, const double *w, const uint64_t *b, const float *xt, const uint64_t *a,
               uint64_t ld, uint64_t n)
{
    __m256d lo = _mm256_setzero_pd(), hi = lo;
    for (uint64_t i = 0; i < n; ++i) {
        SR_LOAD8(i);
        SR_STEP8(lo, hi, w + i, b + i);
    }
    _mm_storeu_ps(out, _mm256_cvtpd_ps(lo));
    _mm_storeu_ps(out + 4, _mm256_cvtpd_ps(hi));
}

__attribute__((target("avx2,fma"))) static void
sr_dot8_avx2(float *out, const double *const *w, const uint64_t *const *b, const float *xt,
             const uint64_t *a, uint64_t ld, uint64_t n, unsigned R)
{
    if (R == 4)
        sr_dot8_avx2_4(out, w, b, xt, a, ld, n);
    else
        for (unsigned r = 0; r < R; ++r)
            sr_dot8_avx2_1(out + LANES * r, w[r], b[r], xt, a, ld, n);
}

__attribute__((target("avx512f,avx2"), always_inline)) static inline void
sr_dot8_avx512_rows(float *out, const double *const *w, const uint64_t *const *b,
                    const float *xt, const uint64_t *a, uint64_t ld, uint64_t n, const unsigned R)
{
    __m512d acc[4];
    const __m512i keep = _mm512_set1_epi64(~((1ll << 29) - 1));
    for (unsigned r = 0; r < R; ++r)
        acc[r] = _mm512_setzero_pd();
    for (uint64_t i = 0; i < n; ++i) {
        const __m512d x = _mm512_cvtps_pd(_mm256_loadu_ps(xt + i * ld));
        const __m512i ai = _mm512_loadu_si512(a + i * ld);
        for (unsigned r = 0; r < R; ++r) {
            const __m512i c = _mm512_xor_si512(ai, _mm512_set1_epi64((long long)b[r][i]));
            const __m512i s =
                _mm512_castpd_si512(_mm512_fmadd_pd(_mm512_set1_pd(w[r][i]), x, acc[r]));
            acc[r] = _mm512_castsi512_pd(_mm512_and_si512(_mm512_add_epi64(s, c), keep));
        }
    }
    for (unsigned r = 0; r < R; ++r)
        _mm256_storeu_ps(out + LANES * r, _mm512_cvtpd_ps(acc[r]));
}

__attribute__((target("avx512f,avx2"))) static void sr_dot8_avx512(float *out,
                                                                  const double *const *w,
                                                                  const uint64_t *const *b,
                                                                  const float *xt,
                                                                  const uint64_t *a, uint64_t ld,
                                                                  uint64_t n, unsigned R)
{
    if (R == 4)
        sr_dot8_avx512_rows(out, w, b, xt, a, ld, n, 4);
    else
        for (unsigned r = 0; r < R; ++r)
            sr_dot8_avx512_rows(out + LANES * r, w + r, b + r, xt, a, ld, n, 1);
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
    best = __builtin_cpu_supports("avx512f")
               ? 2
               : (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? 1 : 0);
#endif
#ifdef LM_TEST_HOOKS
    if (ref_sr_test_force_kernel >= 0 && ref_sr_test_force_kernel <= best)
        return ref_sr_test_force_kernel;
#endif
    return best;
}

static void fill_row(uint64_t *dst, uint32_t key, uint32_t inc, uint64_t n, int kern)
{
#if defined(__GNUC__) && defined(__x86_64__)
    if (kern > 0) {
        fill_row_avx2(dst, key, inc, n);
        return;
    }
#endif
    (void)kern;
    fill_row_scalar(dst, key, inc, n);
}

static void fill_cols(uint64_t *dst, uint64_t ld, const uint32_t *key, uint32_t inc, uint64_t n,
                      int kern)
{
#if defined(__GNUC__) && defined(__x86_64__)
    if (kern > 0) {
        fill_cols_avx2(dst, ld, key, inc, n);
        return;
    }
#endif
    (void)kern;
    fill_cols_scalar(dst, ld, key, inc, n);
}

/* Rows w[0..R) (R <= 4) with row coin words b[0..R) against 8 tokens (xt and their coin words
 * a, row stride ld): out[r][l]. */
static void sr_dot8(float *out, const double *const *w, const uint64_t *const *b,
                    const float *xt, const uint64_t *a, uint64_t ld, uint64_t n, unsigned R,
                    int kern)
{
#if defined(__GNUC__) && defined(__x86_64__)
    if (kern == 2) {
        sr_dot8_avx512(out, w, b, xt, a, ld, n, R);
        return;
    }
    if (kern == 1) {
        sr_dot8_avx2(out, w, b, xt, a, ld, n, R);
        return;
    }
#endif
    (void)kern;
    for (unsigned r = 0; r < R; ++r)
        sr_dot8_scalar(out + LANES * r, w[r], b[r], xt, a, ld, n);
}

/* The token coin words A at site st of tokens t0 + u, u < nt (a multiple of LANES), in groups
 * of LANES: at[i * ld + u] = A_{t0 + u}(i), i < nc. */
static void fill_token_coins(const srf *f, uint64_t *at, uint64_t ld, uint64_t t0, uint64_t nt,
                             uint64_t nc, uint32_t st, int kern)
{
    for (uint64_t g = 0; g < nt; g += LANES) {
        uint32_t ka[LANES];
        for (unsigned l = 0; l < LANES; ++l)
            ka[l] = key_a(f, st, t0 + g + l);
        fill_cols(at + g, ld, ka, INC_A, nc, kern);
    }
}

/* d[i] = s[i], i < n (exact). */
static void to_f64(double *d, const float *s, uint64_t n, int kern)
{
    uint64_t i = 0;
#if defined(__GNUC__) && defined(__x86_64__)
    if (kern > 0)
        i = to_f64_avx2(d, s, n);
#endif
    (void)kern;
    for (; i < n; ++i)
        d[i] = (double)s[i];
}

/* out[t][r] (+)= in[t] . W[r] (+ b[r]) for t < n_rows, with SR; in [n_rows][n_in],
 * W [n_out][n_in]; operands rounded as v says (NULL: none). */
static void matmul(srf *f, float *out, const float *in, const float *W, const float *b,
                   uint64_t n_rows, uint64_t n_in, uint64_t n_out, bool acc, uint32_t st,
                   const mm_vp *v)
{
    const uint64_t np = (n_rows + LANES - 1) / LANES * LANES, nc = n_in + 2;
    const int kern = f->kern;
    memset(f->xt, 0, n_in * np * sizeof *f->xt);
    for (uint64_t t = 0; t < n_rows; ++t) {
        const float *row = in + t * n_in; /* [n_in] */
        if (v != NULL && v->in != NULL) {
            memcpy(f->rrow, row, n_in * sizeof *row);
            ref_vp_round(f->rrow, n_in, v->in,
                         vp_key(f, v->in_st, t, 1u << 16 | v->in->kind << 8 | v->in->bits));
            row = f->rrow;
        }
        for (uint64_t i = 0; i < n_in; ++i)
            f->xt[i * np + t] = row[i];
    }
    uint64_t *const at = f->at;
    fill_token_coins(f, at, np, 0, np, nc, st, kern);
    for (uint64_t r0 = 0; r0 < n_out; r0 += 4) {
        const unsigned R = n_out - r0 < 4 ? (unsigned)(n_out - r0) : 4;
        const double *wr[4];
        const uint64_t *br[4];
        for (unsigned g = 0; g < R; ++g) {
            double *d = f->wd + g * n_in;
            const float *wrow = W + (r0 + g) * n_in; /* [n_in] */
            if (v != NULL && v->w != NULL) {
                memcpy(f->rrow, wrow, n_in * sizeof *wrow);
                ref_vp_round(f->rrow, n_in, v->w, vp_key(f, v->w_st, r0 + g, REF_VP_WEIGHT));
                wrow = f->rrow;
            }
            to_f64(d, wrow, n_in, kern);
            wr[g] = d;
            uint64_t *bg = f->bt + g * nc;
            fill_row(bg, key_b(f, st, r0 + g), INC_B, nc, kern);
            br[g] = bg;
        }
        for (uint64_t t0 = 0; t0 < np; t0 += LANES) {
            float o[4 * LANES];
            sr_dot8(o, wr, br, f->xt + t0, at + t0, np, n_in, R, kern);
            for (unsigned g = 0; g < R; ++g)
                for (unsigned l = 0; l < LANES && t0 + l < n_rows; ++l) {
                    const uint64_t t = t0 + l, r = r0 + g;
                    double y = o[g * LANES + l];
                    if (b)
                        y = sr29(y + (double)b[r], at[n_in * np + t] ^ br[g][n_in]);
                    float *d = &out[t * n_out + r];
                    *d = acc ? (float)sr29((double)*d + y, at[(n_in + 1) * np + t] ^
                                                               br[g][n_in + 1])
                             : (float)y;
                }
        }
    }
}

/* out[i] = x[i] / sqrt(mean(x^2) + eps) * w[i] over e values, every step SR (sum of squares
 * left to right); out may be x. */
static void rmsnorm(srf *f, float *out, const float *x, const float *w, uint64_t e, uint64_t row,
                    uint32_t st)
{
    uint32_t key = key_of(f->skey, st, row, 0);
    double ss = 0.0;
    for (uint64_t i = 0; i < e; ++i) {
        double p = (double)x[i] * (double)x[i];
        ss = sr_add(ss, p, coin(key, i));
    }
    double mean = sr24(ss / (double)e, coin(key, e));
    double t = sr_add(mean, (double)f->hp->rms_eps, coin(key, e + 1));
    double inv = sr24(1.0 / sqrt(t), coin(key, e + 2));
    for (uint64_t i = 0; i < e; ++i) {
        double y = sr24((double)x[i] * inv, coin(key, e + 3 + 2 * i));
        out[i] = (float)sr24(y * (double)w[i], coin(key, e + 4 + 2 * i));
    }
}

/* (a, b) <- (a c - b s, a s + b c), each product and sum SR. */
static void rotate(float *a, float *b, double c, double s, uint32_t key, uint64_t i)
{
    double ac = sr24((double)*a * c, coin(key, 6 * i)),
           bs = sr24((double)*b * s, coin(key, 6 * i + 1)),
           as = sr24((double)*a * s, coin(key, 6 * i + 2)),
           bc = sr24((double)*b * c, coin(key, 6 * i + 3));
    *a = (float)sr_add(ac, -bs, coin(key, 6 * i + 4));
    *b = (float)sr_add(as, bc, coin(key, 6 * i + 5));
}

/* YaRN's multiplier m_i of pair i (ref_model.h, ref_hparams) on the ramp lo..hi
 * (ref_yarn_ramp), in double. */
static double yarn_mult(const ref_hparams *hp, uint32_t i, double lo, double hi)
{
    const double r = 1.0 - fmin(1.0, fmax(0.0, ((double)i - lo) / fmax(0.001, hi - lo)));
    return (1.0 - r) / (double)hp->rope_yarn_factor + r;
}

/* cos/sin of position t at theta (frequency i times YaRN's m_i with YaRN, divided by
 * factors[i] when the model has them), in double, times YaRN's magnitude 1 + 0.1 ln(factor),
 * SR to float: cs[2i] = cos, cs[2i + 1] = sin. */
static void rope_table(srf *f, float *cs, uint64_t t, float theta, uint32_t st)
{
    const ref_hparams *hp = f->hp;
    const float *fac = f->m->rope_freqs;
    uint32_t key = key_of(f->skey, st, t, 0);
    double lo = 0.0, hi = 0.0;
    if (hp->rope_yarn_factor > 0.0f)
        ref_yarn_ramp(&lo, &hi, theta, hp->n_rot, hp->n_ctx_orig_yarn);
    for (uint32_t i = 0; i < hp->n_rot / 2; ++i) {
        double fr = pow((double)theta, -2.0 * i / hp->n_rot), mag = 1.0;
        if (hp->rope_yarn_factor > 0.0f) { /* YaRN: frequency and magnitude */
            fr *= yarn_mult(hp, i, lo, hi);
            mag = 1.0 + 0.1 * log((double)hp->rope_yarn_factor);
        }
        double ang = (double)t * (fac ? fr / (double)fac[i] : fr);
        cs[2 * i] = (float)sr24(cos(ang) * mag, coin(key, 2 * i));
        cs[2 * i + 1] = (float)sr24(sin(ang) * mag, coin(key, 2 * i + 1));
    }
}

static void rope(srf *f, uint64_t t)
{
    const ref_hparams *hp = f->hp;
    const uint32_t half = hp->n_rot / 2;
    if (f->layer == 0) { /* the tables once per position */
        rope_table(f, f->cs + t * hp->n_rot, t, hp->rope_theta, S_N_SITES * 1000u);
        if (f->cs_swa != NULL)
            rope_table(f, f->cs_swa + t * hp->n_rot, t, hp->rope_theta_swa,
                       S_N_SITES * 1000u + 1);
    }
    /* a sliding layer turns by the sliding theta when the model has one */
    const bool swa = f->cs_swa != NULL && f->m->layers[f->layer].window != 0;
    const float *cs = (swa ? f->cs_swa : f->cs) + t * hp->n_rot;
    const uint32_t nh[2] = {hp->n_head, hp->n_head_kv};
    float *base[2] = {f->q + t * f->q_dim, f->k + t * f->kv_dim};
    for (int w = 0; w < 2; ++w)
        for (uint32_t h = 0; h < nh[w]; ++h) {
            float *x = base[w] + (uint64_t)h * hp->head_dim;
            uint32_t key = key_of(f->skey, site(f, S_ROPE), t, (uint64_t)w << 32 | h);
            for (uint32_t i = 0; i < half; ++i) {
                if (hp->rope_type == REF_ROPE_NEOX)
                    rotate(&x[i], &x[i + half], cs[2 * i], cs[2 * i + 1], key, i);
                else
                    rotate(&x[2 * i], &x[2 * i + 1], cs[2 * i], cs[2 * i + 1], key, i);
            }
        }
}

/* Attention of the current layer, every token t and head h: the scores over the visible keys
 * j_lo..t (the window's keys are contiguous), softmax with the sink, then p . V. Both products
 * run on the matrix-product kernel, with the coins of the matrix products (two streams, see
 * there):
 *   q . k: for token t and KV head g, the rows are the query heads of g (up to 4 at a time),
 *          the lanes key positions j (K transposed per KV head, f->kt), the terms d <
 *          head_dim, then SR of acc * scale (term head_dim); coins A_{g,j}(d) ^ B_{t,h}(d) at
 *          site S_ATT + 2^21 (A keyed by g 2^32 + j, B by t n_head + h);
 *   p . V: the rows are those heads' probabilities over j_lo..t, the lanes 8 dimensions of head
 *          g (V with each head padded to a multiple of 8, f->vp), the terms j; coins
 *          A_{g,d}(j) ^ B_{t,h}(j) at site S_ATT + 2^22 (A keyed by g 2^32 + d).
 * Softmax of (t, h): each subtraction, exp, sum and division SR with coin(key_of(seed key,
 * S_ATT, t, h), c), c counting up in that order. */
static void attention_layer(srf *f, float scale)
{
    const int kern = f->kern;
    const ref_hparams *hp = f->hp;
    const ref_layer *L = &f->m->layers[f->layer];
    const uint64_t n = f->n, np = f->npad, hd = hp->head_dim,
                   hdp = (hd + LANES - 1) / LANES * LANES, nkv = hp->n_head_kv, kvp = nkv * hdp,
                   rep = hp->n_head / hp->n_head_kv;
    const uint32_t st_qk = site(f, S_ATT) + (1u << 21), st_pv = site(f, S_ATT) + (1u << 22);
    float *kt = f->kt, *vp = f->vp;
    memset(kt, 0, nkv * hd * np * sizeof *kt);
    memset(vp, 0, n * kvp * sizeof *vp);
    for (uint64_t j = 0; j < n; ++j)
        for (uint64_t g = 0; g < nkv; ++g)
            for (uint64_t d = 0; d < hd; ++d) {
                kt[(g * hd + d) * np + j] = f->k[j * f->kv_dim + g * hd + d];
                vp[j * kvp + g * hdp + d] = f->v[j * f->kv_dim + g * hd + d];
            }
    for (uint64_t g = 0; g < nkv; ++g) {
        fill_token_coins(f, f->akt + g * (hd + 1) * np, np, g << 32, np, hd + 1, st_qk, kern);
        fill_token_coins(f, f->avp + g * hdp, kvp, g << 32, hdp, n, st_pv, kern);
    }
    for (uint64_t t = 0; t < n; ++t) {
        uint64_t j_lo = 0;
        while (j_lo < t && !ref_window_visible((uint32_t)t, (uint32_t)j_lo, L->window))
            ++j_lo;
        const uint64_t m = t + 1 - j_lo;
        for (uint64_t g = 0; g < nkv; ++g)
            for (uint64_t h0 = g * rep; h0 < (g + 1) * rep; h0 += 4) {
                const unsigned R = (g + 1) * rep - h0 < 4 ? (unsigned)((g + 1) * rep - h0) : 4;
                const double *wr[4];
                const uint64_t *br[4];
                float o[4 * LANES];
                /* scores */
                const uint64_t *akt = f->akt + g * (hd + 1) * np;
                for (unsigned u = 0; u < R; ++u) {
                    to_f64(f->qw + u * hd, f->q + t * f->q_dim + (h0 + u) * hd, hd, kern);
                    fill_row(f->bq + u * (hd + 1), key_b(f, st_qk, t * hp->n_head + h0 + u),
                             INC_B, hd + 1, kern);
                    wr[u] = f->qw + u * hd;
                    br[u] = f->bq + u * (hd + 1);
                }
                for (uint64_t j0 = j_lo / LANES * LANES; j0 <= t; j0 += LANES) {
                    sr_dot8(o, wr, br, kt + g * hd * np + j0, akt + j0, np, hd, R, kern);
                    for (unsigned u = 0; u < R; ++u)
                        for (uint64_t j = j0 < j_lo ? j_lo : j0; j < j0 + LANES && j <= t; ++j)
                            f->sc[u * n + j - j_lo] = (float)sr29(
                                (double)o[u * LANES + j - j0] * (double)scale,
                                akt[hd * np + j] ^ br[u][hd]);
                }
                /* softmax */
                for (unsigned u = 0; u < R; ++u) {
                    const uint64_t h = h0 + u;
                    float *sc = f->sc + u * n;
                    const uint32_t key = key_of(f->skey, site(f, S_ATT), t, h);
                    uint64_t c = 0;
                    double mx = -(double)INFINITY;
                    for (uint64_t i = 0; i < m; ++i)
                        mx = (double)sc[i] > mx ? (double)sc[i] : mx;
                    const double sink = L->sinks ? (double)L->sinks[h] : -(double)INFINITY;
                    mx = sink > mx ? sink : mx;
                    double sum = 0.0;
                    for (uint64_t i = 0; i < m; ++i) {
                        double d = sr_add((double)sc[i], -mx, coin(key, c++));
                        sc[i] = (float)sr24(exp(d), coin(key, c++));
                        sum = sr_add(sum, (double)sc[i], coin(key, c++));
                    }
                    if (L->sinks) {
                        double d = sr_add(sink, -mx, coin(key, c++));
                        double es = sr24(exp(d), coin(key, c++));
                        sum = sr_add(sum, es, coin(key, c++));
                    }
                    for (uint64_t i = 0; i < m; ++i)
                        sc[i] = (float)sr24((double)sc[i] / sum, coin(key, c++));
                    vp_rows(f, REF_VP_SOFTMAX, sc, 1, m, site(f, S_ATT), t * hp->n_head + h);
                    double *pw = f->pw + u * n;
                    for (uint64_t i = 0; i < m; ++i)
                        pw[i] = (double)sc[i];
                    uint64_t *bv = f->bv + u * n;
                    /* the window's keys j_lo..t: word i of the row's stream is key j_lo + i */
                    fill_row(bv, key_b(f, st_pv, t * hp->n_head + h) + (uint32_t)j_lo * INC_B,
                             INC_B, m, kern);
                    wr[u] = pw;
                    br[u] = bv;
                }
                /* p . V */
                for (uint64_t d0 = 0; d0 < hd; d0 += LANES) {
                    const uint64_t off = j_lo * kvp + g * hdp + d0;
                    sr_dot8(o, wr, br, vp + off, f->avp + off, kvp, m, R, kern);
                    for (unsigned u = 0; u < R; ++u)
                        for (uint64_t d = d0; d < d0 + LANES && d < hd; ++d)
                            f->att[t * f->q_dim + (h0 + u) * hd + d] = o[u * LANES + d - d0];
                }
            }
    }
}

/* g = act(g) * up over f->ff_cur columns: the activation (SiLU, or GELU with the tanh
 * approximation) in double, SR to float, then the product SR. */
static void gated_act(srf *f, uint64_t t, uint32_t st, bool gelu)
{
    const uint64_t nff = f->ff_cur;
    uint32_t key = key_of(f->skey, st, t, 0);
    for (uint64_t i = 0; i < nff; ++i) {
        double g = f->g[t * nff + i], a;
        if (gelu)
            a = 0.5 * g * (1.0 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)));
        else
            a = g / (1.0 + exp(-g));
        double s = sr24(a, coin(key, 2 * i));
        f->g[t * nff + i] = (float)sr24(s * (double)f->up[t * nff + i], coin(key, 2 * i + 1));
    }
}

/* gpt-oss's swiglu_oai (kvd_ref.h ref_swiglu_oai) on f->g, f->up: x = min(g, 7),
 * y = clamp(u, -7, 7); x / (1 + exp(-1.702f x)) in double, SR; y + 1, SR; their product, SR. */
static void oai_act(srf *f, uint64_t t, uint32_t st)
{
    const uint64_t nff = f->ff_cur;
    uint32_t key = key_of(f->skey, st, t, 0);
    for (uint64_t i = 0; i < nff; ++i) {
        const double g = f->g[t * nff + i], u = f->up[t * nff + i];
        const double x = 7.0 < g ? 7.0 : g, y = u < -7.0 ? -7.0 : 7.0 < u ? 7.0 : u;
        const double a = sr24(x / (1.0 + exp(-(double)1.702f * x)), coin(key, 3 * i));
        const double y1 = sr_add(y, 1.0, coin(key, 3 * i + 1));
        f->g[t * nff + i] = (float)sr24(a * y1, coin(key, 3 * i + 2));
    }
}

/* x += in . W^T (+ b); with a post-norm (sandwich): x += rmsnorm(in . W^T (+ b)) * post (the
 * norm's output rounded at REF_VP_POST_NORM), the sum SR per element. sv: V_ATT_POST or
 * V_FFN_POST (its add site follows it). v: the product's operands (matmul). */
static void block_out(srf *f, const float *in, const float *W, const float *b, uint64_t n_in,
                      const float *post, uint32_t st, uint32_t sv, const mm_vp *v)
{
    const uint64_t n = f->n, e = f->hp->n_embd;
    if (post == NULL) {
        matmul(f, f->x, in, W, b, n, n_in, e, true, st, v);
        return;
    }
    matmul(f, f->y, in, W, b, n, n_in, e, false, st, v);
    for (uint64_t t = 0; t < n; ++t) {
        rmsnorm(f, f->y + t * e, f->y + t * e, post, e, t, vsite(f, sv));
        vp_rows(f, REF_VP_POST_NORM, f->y + t * e, 1, e, vsite(f, sv), t);
        uint32_t key = key_of(f->skey, vsite(f, sv + 1), t, 0);
        for (uint64_t i = 0; i < e; ++i)
            f->x[t * e + i] =
                (float)sr_add((double)f->x[t * e + i], (double)f->y[t * e + i], coin(key, i));
    }
}

/* Per-head RMSNorm of Q and K over head_dim before RoPE (eps = rms_eps): the n_head query
 * heads, then the n_head_kv key heads, of token t. */
static void qk_norm(srf *f, const ref_layer *L, uint64_t t)
{
    const ref_hparams *hp = f->hp;
    const uint64_t per = hp->n_head + hp->n_head_kv;
    for (uint64_t h = 0; h < per; ++h) {
        float *x = h < hp->n_head ? f->q + t * f->q_dim + h * hp->head_dim
                                  : f->k + t * f->kv_dim + (h - hp->n_head) * hp->head_dim;
        rmsnorm(f, x, x, h < hp->n_head ? L->attn_q_norm : L->attn_k_norm, hp->head_dim,
                t * per + h, vsite(f, V_QK_NORM));
    }
}

/* a ranks before b among router logits l: larger first, NaN last, equal -> lower id */
static bool ranks_before(const float *l, uint32_t a, uint32_t b)
{
    const bool na = isnan(l[a]), nb = isnan(l[b]);
    if (na != nb)
        return !na;
    if (!na && l[a] != l[b])
        return l[a] > l[b];
    return a < b;
}

/* Routing of token t (the reference's rules, ref_variants.h): top-k of its router logits, then
 * the gate weights of the hparams' gating (0: softmax over the selected; 1: softmax over all,
 * the selected renormalised; 2: softmax over all, the selected as they are), every subtraction,
 * exp, sum and division SR, sums left to right. */
static void route(srf *f, uint64_t t)
{
    const ref_hparams *hp = f->hp;
    const uint32_t ne = hp->n_expert, k = hp->n_expert_used;
    const float *l = f->router + t * ne;
    uint32_t *sel = f->sel + t * k;
    for (uint32_t r = 0; r < k; ++r) { /* k passes of "best not yet chosen" */
        uint32_t best = UINT32_MAX;
        for (uint32_t x = 0; x < ne; ++x) {
            bool taken = false;
            for (uint32_t q = 0; q < r; ++q)
                taken = taken || sel[q] == x;
            if (!taken && (best == UINT32_MAX || ranks_before(l, x, best)))
                best = x;
        }
        sel[r] = best;
    }
    const uint32_t key = key_of(f->skey, vsite(f, V_GATE_W), t, 0);
    uint64_t c = 0;
    const double u = l[sel[0]];
    double acc = 0.0;
    float *w = f->gw + t * k;
    if (hp->moe_gating != 0)
        for (uint32_t x = 0; x < ne; ++x, c += 3) {
            double ex = sr24(exp(sr_add(l[x], -u, coin(key, c))), coin(key, c + 1));
            acc = sr_add(acc, ex, coin(key, c + 2));
        }
    for (uint32_t r = 0; r < k; ++r) {
        double ex = sr24(exp(sr_add(l[sel[r]], -u, coin(key, c))), coin(key, c + 1));
        c += 2;
        if (hp->moe_gating == 0)
            acc = sr_add(acc, ex, coin(key, c++));
        else
            ex = sr24(ex / acc, coin(key, c++));
        w[r] = (float)ex;
    }
    if (hp->moe_gating == 1) {
        acc = 0.0;
        for (uint32_t r = 0; r < k; ++r)
            acc = sr_add(acc, w[r], coin(key, c++));
    }
    if (hp->moe_gating != 2)
        for (uint32_t r = 0; r < k; ++r)
            w[r] = (float)sr24((double)w[r] / acc, coin(key, c++));
}

/* Router margin of token t: its k-th selected logit minus the largest unselected one (NaN
 * logits skipped), +inf when every expert is selected or none is left. */
static float margin(const srf *f, uint64_t t)
{
    const uint32_t ne = f->hp->n_expert, k = f->hp->n_expert_used;
    const float *l = f->router + t * ne;
    const uint32_t *sel = f->sel + t * k;
    int64_t best = -1;
    for (uint32_t x = 0; x < ne && k < ne; ++x) {
        bool taken = false;
        for (uint32_t q = 0; q < k; ++q)
            taken = taken || sel[q] == x;
        if (!taken && !isnan(l[x]) && (best < 0 || l[x] > l[best]))
            best = x;
    }
    return best < 0 ? INFINITY : (float)((double)l[sel[k - 1]] - (double)l[best]);
}

/* MoE FFN of the current layer on f->h (the reference's moe_ffn): router logits, routing,
 * every expert some token selected computed for every token, each token keeping its selected
 * experts' outputs, then x += sum over ranks r of w_r y_r (each multiply-add one SR rounding,
 * r left to right), the sum added to x with one SR rounding. */
static void moe_ffn(srf *f, const ref_layer *L)
{
    const ref_hparams *hp = f->hp;
    const uint64_t n = f->n, e = hp->n_embd, fe = hp->n_ff_exp, k = hp->n_expert_used;
    const mm_vp vr = mm_vp_of(f, REF_VP_NORM, site(f, S_FFN_NORM), L->ffn_gate_inp,
                              vsite(f, V_ROUTER));
    matmul(f, f->router, f->h, L->ffn_gate_inp, L->ffn_gate_inp_b, n, e, hp->n_expert, false,
           vsite(f, V_ROUTER), &vr);
    for (uint64_t t = 0; t < n; ++t)
        route(f, t);
    vp_rows(f, REF_VP_MOE_GATES, f->gw, n, k, vsite(f, V_GATE_W), 0);
    memcpy(f->out->moe_sel + (uint64_t)f->layer * n * k, f->sel, n * k * sizeof *f->sel);
    for (uint64_t t = 0; t < n; ++t)
        f->out->moe_margin[(uint64_t)f->layer * n + t] = margin(f, t);
    f->ff_cur = (uint32_t)fe;
    for (uint32_t x = 0; x < hp->n_expert; ++x) {
        if (!ref_moe_expert_used(f->sel, n * k, x))
            continue;
        const float *bg = L->ffn_gate_exps_b ? L->ffn_gate_exps_b + (uint64_t)x * fe : NULL;
        const float *bu = L->ffn_up_exps_b ? L->ffn_up_exps_b + (uint64_t)x * fe : NULL;
        const float *bd = L->ffn_down_exps_b ? L->ffn_down_exps_b + (uint64_t)x * e : NULL;
        const float *wg = L->ffn_gate_exps + (uint64_t)x * fe * e,
                    *wu = L->ffn_up_exps + (uint64_t)x * fe * e,
                    *wd = L->ffn_down_exps + (uint64_t)x * e * fe;
        const mm_vp vg = mm_vp_of(f, REF_VP_NORM, site(f, S_FFN_NORM), wg, esite(f, x, E_GATE)),
                    vu = mm_vp_of(f, REF_VP_NORM, site(f, S_FFN_NORM), wu, esite(f, x, E_UP)),
                    vd = mm_vp_of(f, REF_VP_SWIGLU, esite(f, x, E_ACT), wd, esite(f, x, E_DOWN));
        matmul(f, f->g, f->h, wg, bg, n, e, fe, false, esite(f, x, E_GATE), &vg);
        matmul(f, f->up, f->h, wu, bu, n, e, fe, false, esite(f, x, E_UP), &vu);
        for (uint64_t t = 0; t < n; ++t) {
            if (hp->act == REF_ACT_SWIGLU_OAI)
                oai_act(f, t, esite(f, x, E_ACT));
            else
                gated_act(f, t, esite(f, x, E_ACT), false);
        }
        vp_rows(f, REF_VP_SWIGLU, f->g, n, fe, esite(f, x, E_ACT), 0);
        matmul(f, f->ye, f->g, wd, bd, n, fe, e, false, esite(f, x, E_DOWN), &vd);
        for (uint64_t t = 0; t < n; ++t)
            for (uint64_t r = 0; r < k; ++r)
                if (f->sel[t * k + r] == x)
                    memcpy(f->yk + (t * k + r) * e, f->ye + t * e, e * sizeof(float));
    }
    f->ff_cur = hp->n_ff;
    /* with REF_VP_MOE_SUM the sums wait in ye (free now), rounded, then added */
    const ref_vp *vs = vp_at(f, REF_VP_MOE_SUM);
    for (uint64_t t = 0; t < n; ++t) {
        const uint32_t key = key_of(f->skey, vsite(f, V_MOE_ADD), t, 0);
        float *sum = f->ye + t * e; /* [n_embd] */
        for (uint64_t i = 0; i < e; ++i) {
            double acc = 0.0;
            for (uint64_t r = 0; r < k; ++r)
                acc = sr24(acc + (double)f->gw[t * k + r] * (double)f->yk[(t * k + r) * e + i],
                           coin(key, i * (k + 1) + r));
            if (vs != NULL)
                sum[i] = (float)acc;
            else
                f->x[t * e + i] =
                    (float)sr_add((double)f->x[t * e + i], acc, coin(key, i * (k + 1) + k));
        }
        if (vs == NULL)
            continue;
        vp_rows(f, REF_VP_MOE_SUM, sum, 1, e, vsite(f, V_MOE_ADD), t);
        for (uint64_t i = 0; i < e; ++i)
            f->x[t * e + i] =
                (float)sr_add((double)f->x[t * e + i], (double)sum[i], coin(key, i * (k + 1) + k));
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
    free(o->hidden);
    free(o->moe_sel);
    free(o->moe_margin);
    memset(o, 0, sizeof *o);
}

int ref_sr_supported(const ref_model *m, const ref_request *rq, lm_err *err)
{
    int st = ref_request_check(m, rq, err);
    if (st)
        return st;
    if (rq->rot_max_size != 0)
        return LM_FAIL(err, LM_E_UNSUPPORTED,
                       "SR reference: rotating-cache schedules are not implemented");
    return LM_OK;
}

static void srf_free(srf *f)
{
    float *all[] = {f->x,  f->h,      f->q,   f->k,  f->v,  f->att, f->g,      f->up, f->cs,
                    f->sc, f->tmp,    f->xt,  f->cs_swa, f->y, f->router, f->gw, f->ye, f->yk};
    for (size_t i = 0; i < sizeof all / sizeof *all; ++i)
        free(all[i]);
    free(f->sel);
    free(f->wd);
    free(f->at);
    free(f->bt);
    free(f->kt);
    free(f->vp);
    free(f->akt);
    free(f->avp);
    free(f->qw);
    free(f->bq);
    free(f->pw);
    free(f->bv);
    free(f->rrow);
}

static int sr_run(ref_sr_out *out, const ref_model *m, const ref_request *rq, uint64_t seed,
                  void (*on_layer)(void *), void *on_layer_user, lm_err *err)
{
    memset(out, 0, sizeof *out);
    int st = ref_sr_supported(m, rq, err);
    if (st)
        return st;
    const ref_hparams *hp = &m->hp;
    srf f = {.m = m, .hp = hp, .skey = seed_key(seed), .kern = sr_kernel(), .n = rq->n_tokens,
             .on_layer = on_layer, .on_layer_user = on_layer_user};
    f.q_dim = hp->n_head * hp->head_dim;
    f.kv_dim = hp->n_head_kv * hp->head_dim;
    const uint64_t n = f.n, e = hp->n_embd;
    f.npad = (n + LANES - 1) / LANES * LANES;
    uint64_t max_in = e > f.q_dim ? e : f.q_dim;
    const uint64_t ffw = hp->n_ff > hp->n_ff_exp ? hp->n_ff : hp->n_ff_exp;
    if (ffw > max_in)
        max_in = ffw;
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
    const uint64_t hidl = (uint64_t)rq->n_prompt * e; /* one hidden state's elements */
    out->n_embd = (uint32_t)e;
    out->hidden = malloc((hp->n_layer + 1ull) * hidl * sizeof(float));
    f.x = malloc(n * e * sizeof(float));
    f.h = malloc(f.npad * e * sizeof(float));
    f.q = malloc(n * f.q_dim * sizeof(float));
    f.k = malloc(n * f.kv_dim * sizeof(float));
    f.v = malloc(n * f.kv_dim * sizeof(float));
    f.att = malloc(n * f.q_dim * sizeof(float));
    f.g = malloc(n * ffw * sizeof(float));
    f.up = malloc(n * ffw * sizeof(float));
    f.ff_cur = hp->n_ff;
    const uint64_t k = hp->n_expert_used;
    if (hp->n_expert > 0) {
        f.router = malloc(n * hp->n_expert * sizeof(float));
        f.gw = malloc(n * k * sizeof(float));
        f.ye = malloc(n * e * sizeof(float));
        f.yk = malloc(n * k * e * sizeof(float));
        f.sel = malloc(n * k * sizeof *f.sel);
        out->moe_k = (uint32_t)k;
        out->moe_sel = calloc(hp->n_layer * n * k, sizeof *out->moe_sel);
        out->moe_margin = malloc(hp->n_layer * n * sizeof *out->moe_margin);
        for (uint64_t i = 0; out->moe_margin && i < hp->n_layer * n; ++i)
            out->moe_margin[i] = INFINITY;
    }
    f.out = out;
    f.cs = malloc(n * (hp->n_rot ? hp->n_rot : 1) * sizeof(float));
    f.sc = malloc(4 * n * sizeof(float));
    f.tmp = malloc((uint64_t)out->n_pos * e * sizeof(float));
    f.xt = malloc(max_in * f.npad * sizeof(float));
    f.wd = malloc(4 * max_in * sizeof(double));
    f.at = malloc((max_in + 2) * f.npad * sizeof *f.at);
    f.bt = malloc(4 * (max_in + 2) * sizeof *f.bt);
    const uint64_t hd = hp->head_dim, kvp = hp->n_head_kv * ((hd + LANES - 1) / LANES * LANES);
    f.kt = malloc(f.kv_dim * f.npad * sizeof *f.kt);
    f.vp = malloc(n * kvp * sizeof *f.vp);
    f.akt = malloc(hp->n_head_kv * (hd + 1) * f.npad * sizeof *f.akt);
    f.avp = malloc(n * kvp * sizeof *f.avp);
    f.qw = malloc(4 * hd * sizeof *f.qw);
    f.bq = malloc(4 * (hd + 1) * sizeof *f.bq);
    f.pw = malloc(4 * n * sizeof *f.pw);
    f.bv = malloc(4 * n * sizeof *f.bv);
    f.rrow = malloc(max_in * sizeof *f.rrow);
    f.prof = ref_sr_profile_rounds(rq->sr_profile) ? rq->sr_profile : NULL;
    const bool own_swa = hp->rope_theta_swa != 0.0f && hp->rope_theta_swa != hp->rope_theta;
    bool sandwich = false;
    for (uint32_t l = 0; l < hp->n_layer; ++l)
        sandwich |= m->layers[l].attn_post_norm != NULL || m->layers[l].ffn_post_norm != NULL;
    if (own_swa)
        f.cs_swa = malloc(n * (hp->n_rot ? hp->n_rot : 1) * sizeof(float));
    if (sandwich)
        f.y = malloc(n * e * sizeof(float));
    if (!out->pos || !out->k || !out->v || !out->logits || !out->hidden || !f.x || !f.h || !f.q || !f.k || !f.v ||
        !f.att || !f.g || !f.up || !f.cs || !f.sc || !f.tmp || !f.xt || !f.wd ||
        !f.at || !f.bt || !f.kt || !f.vp || !f.akt || !f.avp || !f.qw || !f.bq || !f.pw ||
        !f.bv || !f.rrow ||
        (own_swa && !f.cs_swa) || (sandwich && !f.y) ||
        (hp->n_expert > 0 &&
         (!f.router || !f.gw || !f.ye || !f.yk || !f.sel || !out->moe_sel || !out->moe_margin))) {
        srf_free(&f);
        ref_sr_out_free(out);
        return LM_FAIL(err, LM_E_NOMEM, "SR reference: out of memory");
    }
    const ref_vp *vw = vp_at(&f, REF_VP_WEIGHT);
    for (uint64_t t = 0; t < n; ++t) {
        memcpy(f.x + t * e, m->tok_embd + (uint64_t)rq->tokens[t] * e, e * sizeof(float));
        if (vw != NULL) /* the table's row as the profile rounds it (matmul's words) */
            ref_vp_round(f.x + t * e, e, vw,
                         vp_key(&f, ST_EMBD_TABLE, (uint64_t)rq->tokens[t], REF_VP_WEIGHT));
    }
    if (hp->embd_scale != 0.0f) { /* x *= sqrt(n_embd), the factor SR to float once */
        const uint32_t key = key_of(f.skey, vsite(&f, V_EMBD), n, 0);
        const double c = sr24(sqrt((double)e), coin(key, 0));
        for (uint64_t t = 0; t < n; ++t) {
            const uint32_t kt = key_of(f.skey, vsite(&f, V_EMBD), t, 0);
            for (uint64_t i = 0; i < e; ++i)
                f.x[t * e + i] = (float)sr24((double)f.x[t * e + i] * c, coin(kt, i));
        }
    }
    memcpy(out->hidden, f.x, hidl * sizeof(float));
    const float scale = (float)(1.0 / sqrt((double)hp->head_dim));
    for (uint32_t l = 0; l < hp->n_layer; ++l) {
        const ref_layer *L = &m->layers[l];
        f.layer = l;
        /* the profile's sites in the engine's order (ref_vprec.h): NORM, V, HEAD_NORM, ROPE,
         * KV (what is cached and captured), SOFTMAX (in attention_layer), ATTN_OUT,
         * RESIDUAL after each add, SWIGLU; PER_WEIGHT in each product, WEIGHT in each
         * product's rows */
        for (uint64_t t = 0; t < n; ++t)
            rmsnorm(&f, f.h + t * e, f.x + t * e, L->attn_norm, e, t, site(&f, S_NORM));
        vp_rows(&f, REF_VP_NORM, f.h, n, e, site(&f, S_NORM), 0);
        const uint32_t st_h = site(&f, S_NORM);
        const mm_vp vq = mm_vp_of(&f, REF_VP_NORM, st_h, L->wq, site(&f, S_Q)),
                    vk = mm_vp_of(&f, REF_VP_NORM, st_h, L->wk, site(&f, S_K)),
                    vv = mm_vp_of(&f, REF_VP_NORM, st_h, L->wv, site(&f, S_V));
        matmul(&f, f.q, f.h, L->wq, L->bq, n, e, f.q_dim, false, site(&f, S_Q), &vq);
        matmul(&f, f.k, f.h, L->wk, L->bk, n, e, f.kv_dim, false, site(&f, S_K), &vk);
        matmul(&f, f.v, f.h, L->wv, L->bv, n, e, f.kv_dim, false, site(&f, S_V), &vv);
        vp_rows(&f, REF_VP_V, f.v, n, f.kv_dim, site(&f, S_V), 0);
        for (uint64_t t = 0; L->attn_q_norm != NULL && t < n; ++t)
            qk_norm(&f, L, t);
        if (L->attn_q_norm != NULL) {
            vp_rows(&f, REF_VP_HEAD_NORM, f.q, n, f.q_dim, vsite(&f, V_QK_NORM), 0);
            vp_rows(&f, REF_VP_HEAD_NORM, f.k, n, f.kv_dim, vsite(&f, V_QK_NORM), 1);
        }
        for (uint64_t t = 0; hp->n_rot && t < n; ++t)
            rope(&f, t);
        vp_rows(&f, REF_VP_ROPE, f.q, n, f.q_dim, site(&f, S_ROPE), 0);
        vp_rows(&f, REF_VP_ROPE, f.k, n, f.kv_dim, site(&f, S_ROPE), 1);
        vp_rows(&f, REF_VP_KV, f.k, n, f.kv_dim, site(&f, S_K), 1);
        vp_rows(&f, REF_VP_KV, f.v, n, f.kv_dim, site(&f, S_V), 1);
        memcpy(out->k + l * kvl, f.k, kvl * sizeof(float));
        memcpy(out->v + l * kvl, f.v, kvl * sizeof(float));
        attention_layer(&f, scale);
        vp_rows(&f, REF_VP_ATTN_OUT, f.att, n, f.q_dim, site(&f, S_ATT), 0);
        const mm_vp vo = mm_vp_of(&f, REF_VP_ATTN_OUT, site(&f, S_ATT), L->wo, site(&f, S_O));
        block_out(&f, f.att, L->wo, L->bo, f.q_dim, L->attn_post_norm, site(&f, S_O),
                  V_ATT_POST, &vo);
        vp_rows(&f, REF_VP_RESIDUAL, f.x, n, e, site(&f, S_RES), 0);
        for (uint64_t t = 0; t < n; ++t)
            rmsnorm(&f, f.h + t * e, f.x + t * e, L->ffn_norm, e, t, site(&f, S_FFN_NORM));
        vp_rows(&f, REF_VP_NORM, f.h, n, e, site(&f, S_FFN_NORM), 0);
        if (L->ffn_gate_inp != NULL) {
            moe_ffn(&f, L);
        } else {
            const uint32_t st_f = site(&f, S_FFN_NORM), st_g = site(&f, S_SWIGLU);
            const mm_vp vg = mm_vp_of(&f, REF_VP_NORM, st_f, L->w_gate, site(&f, S_GATE)),
                        vu = mm_vp_of(&f, REF_VP_NORM, st_f, L->w_up, site(&f, S_UP)),
                        vd = mm_vp_of(&f, REF_VP_SWIGLU, st_g, L->w_down, site(&f, S_DOWN));
            matmul(&f, f.g, f.h, L->w_gate, NULL, n, e, hp->n_ff, false, site(&f, S_GATE), &vg);
            matmul(&f, f.up, f.h, L->w_up, NULL, n, e, hp->n_ff, false, site(&f, S_UP), &vu);
            for (uint64_t t = 0; t < n; ++t)
                gated_act(&f, t, st_g, hp->act == REF_ACT_GEGLU_TANH);
            vp_rows(&f, REF_VP_SWIGLU, f.g, n, hp->n_ff, st_g, 0);
            block_out(&f, f.g, L->w_down, NULL, hp->n_ff, L->ffn_post_norm, site(&f, S_DOWN),
                      V_FFN_POST, &vd);
        }
        vp_rows(&f, REF_VP_RESIDUAL, f.x, n, e, site(&f, S_RES), 1);
        memcpy(out->hidden + (l + 1ull) * hidl, f.x, hidl * sizeof(float));
        if (f.on_layer)
            f.on_layer(f.on_layer_user);
    }
    f.layer = hp->n_layer;
    for (uint32_t i = 0; i < out->n_pos; ++i)
        rmsnorm(&f, f.tmp + (uint64_t)i * e, f.x + (uint64_t)out->pos[i] * e, m->output_norm, e,
                out->pos[i], site(&f, S_NORM));
    vp_rows(&f, REF_VP_OUT_NORM, f.tmp, out->n_pos, e, site(&f, S_NORM), 0);
    const mm_vp vout = mm_vp_of(&f, REF_VP_OUT_NORM, site(&f, S_NORM), m->output,
                                m->output == m->tok_embd ? ST_EMBD_TABLE : site(&f, S_Q));
    matmul(&f, out->logits, f.tmp, m->output, NULL, out->n_pos, e, hp->n_vocab, false,
           site(&f, S_Q), &vout);
    if (f.on_layer)
        f.on_layer(f.on_layer_user);
    srf_free(&f);
    return LM_OK;
}

int ref_sr_run(ref_sr_out *out, const ref_model *m, const ref_request *rq, uint64_t seed,
               lm_err *err)
{
    return sr_run(out, m, rq, seed, NULL, NULL, err);
}

#ifdef LM_TEST_HOOKS
int ref_sr_test_mm_coins(uint64_t *dst, uint64_t seed, uint32_t st, uint64_t t0, uint64_t n_t,
                         uint64_t n_r, uint64_t n_i)
{
    const srf f = {.skey = seed_key(seed)};
    const int kern = sr_kernel();
    const uint64_t nt = (n_t + LANES - 1) / LANES * LANES;
    uint64_t *at = malloc(n_i * nt * sizeof *at), *bt = malloc(n_i * sizeof *bt);
    if (at == NULL || bt == NULL) {
        free(at);
        free(bt);
        return LM_E_NOMEM;
    }
    fill_token_coins(&f, at, nt, t0, nt, n_i, st, kern);
    for (uint64_t r = 0; r < n_r; ++r) {
        fill_row(bt, key_b(&f, st, r), INC_B, n_i, kern);
        for (uint64_t t = 0; t < n_t; ++t)
            for (uint64_t i = 0; i < n_i; ++i)
                dst[(t * n_r + r) * n_i + i] = at[i * nt + t] ^ bt[i];
    }
    free(at);
    free(bt);
    return LM_OK;
}

int ref_sr_test_matmul(float *out, const float *in, const float *W, const float *b,
                       uint64_t n_rows, uint64_t n_in, uint64_t n_out, bool acc, uint64_t seed)
{
    const uint64_t np = (n_rows + LANES - 1) / LANES * LANES;
    srf f = {.skey = seed_key(seed), .kern = sr_kernel(), .n = (uint32_t)n_rows, .npad = np};
    f.xt = malloc(n_in * np * sizeof *f.xt);
    f.wd = malloc(4 * n_in * sizeof *f.wd);
    f.at = malloc((n_in + 2) * np * sizeof *f.at);
    f.bt = malloc(4 * (n_in + 2) * sizeof *f.bt);
    const int rc = f.xt && f.wd && f.at && f.bt ? LM_OK : LM_E_NOMEM;
    if (rc == LM_OK)
        matmul(&f, out, in, W, b, n_rows, n_in, n_out, acc, 0, NULL);
    srf_free(&f);
    return rc;
}
#endif

/* One calibration round: R rows of n_in weights against T = LANES columns, the kernel every
 * matrix product runs. */
typedef struct sr_calib {
    float *o;                  /* [R * LANES] */
    const double *const *wr;   /* [R] rows of n_in */
    const uint64_t *const *br; /* [R] row coin words of n_in */
    const float *xt;           /* [n_in][LANES] */
    const uint64_t *at;        /* [n_in][LANES] token coin words */
    uint64_t n_in;
    unsigned R;
    int kern;
} sr_calib;

static bool sr_calib_round(void *p)
{
    const sr_calib *c = p;
    sr_dot8(c->o, c->wr, c->br, c->xt, c->at, LANES, c->n_in, c->R, c->kern);
    return true;
}

double ref_sr_calibrate_s_per_mac(uint64_t n_in)
{
    enum { R = 4, T = LANES };
    if (n_in == 0 || n_in > 65536)
        n_in = 1024;
    double *w = malloc(R * n_in * sizeof *w);
    float *xt = malloc(n_in * T * sizeof *xt);
    uint64_t *at = malloc(n_in * T * sizeof *at), *bt = malloc(R * n_in * sizeof *bt);
    double s = 0.0;
    if (w != NULL && xt != NULL && at != NULL && bt != NULL) {
        const int kern = sr_kernel();
        uint64_t z = REF_CALIB_SEED;
        ref_calib_fill_f64(w, R * n_in, 0x1p-30, &z);
        ref_calib_fill_f32(xt, n_in * T, 0x1p-23f, &z);
        uint32_t ka[T];
        for (unsigned l = 0; l < T; ++l)
            ka[l] = ref_lowbias32(l + 1);
        fill_cols(at, T, ka, INC_A, n_in, kern);
        for (unsigned r = 0; r < R; ++r)
            fill_row(bt + r * n_in, ref_lowbias32(T + r + 1), INC_B, n_in, kern);
        const double *wr[R] = {w, w + n_in, w + 2 * n_in, w + 3 * n_in};
        const uint64_t *br[R] = {bt, bt + n_in, bt + 2 * n_in, bt + 3 * n_in};
        float o[R * T];
        sr_calib c = {.o = o, .wr = wr, .br = br, .xt = xt, .at = at, .n_in = n_in, .R = R,
                      .kern = kern};
        s = ref_calib_time(sr_calib_round, &c, (double)R * T * n_in);
    }
    free(w);
    free(xt);
    free(at);
    free(bt);
    return s;
}

/* --- members in parallel --- */

typedef struct ens_job {
    ref_sr_out *out;
    uint32_t n;
    const ref_model *m;
    const ref_request *rq;
    uint64_t seed;
    atomic_uint next;
    atomic_int failed;
    lm_err err;
    pthread_mutex_t mu;
    /* progress (rq->progress): layers finished over all members, members finished */
    atomic_uint layers_done, members_done;
    double t0, macs; /* start time; multiply-adds of all members */
} ens_job;

/* Progress after a member's layer: one report at a time (a busy lock skips this one). The
 * count is read under the lock, so that successive reports never go down (a count taken
 * before the lock could be reported after a later one). */
static void ens_layer_done(void *p)
{
    ens_job *j = p;
    const unsigned per = j->m->hp.n_layer + 1u; /* layers and the output */
    atomic_fetch_add(&j->layers_done, 1);
    if (j->rq->progress == NULL || pthread_mutex_trylock(&j->mu) != 0)
        return;
    const unsigned done = atomic_load(&j->layers_done);
    ref_progress pr = {.n_layer = j->m->hp.n_layer,
                       .n_member = j->n, .members_done = atomic_load(&j->members_done),
                       .done = j->macs * done / ((double)per * j->n), .total = j->macs,
                       .elapsed_s = lm_now_s() - j->t0, .m = j->m, .rq = j->rq};
    j->rq->progress(j->rq->progress_user, &pr);
    pthread_mutex_unlock(&j->mu);
}

static void *ens_worker(void *p)
{
    ens_job *j = p;
    for (;;) {
        unsigned i = atomic_fetch_add(&j->next, 1);
        if (i >= j->n || atomic_load(&j->failed))
            break;
        lm_err e = {0};
        if (sr_run(&j->out[i], j->m, j->rq, j->seed + i, ens_layer_done, j, &e) == LM_OK) {
            atomic_fetch_add(&j->members_done, 1);
        } else {
            pthread_mutex_lock(&j->mu);
            if (!atomic_load(&j->failed))
                j->err = e;
            atomic_store(&j->failed, 1);
            pthread_mutex_unlock(&j->mu);
        }
    }
    return NULL;
}

int ref_sr_ensemble(ref_sr_out *out, uint32_t n, const ref_model *m, const ref_request *rq,
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
    ens_job j = {.out = out, .n = n, .m = m, .rq = rq, .seed = seed, .t0 = lm_now_s(),
                 .macs = n * ref_macs(m, rq)};
    atomic_init(&j.next, 0);
    atomic_init(&j.failed, 0);
    atomic_init(&j.layers_done, 0);
    atomic_init(&j.members_done, 0);
    if (rq->progress) {
        ref_request with_threads = *rq; /* the cost line divides over the member threads */
        with_threads.n_threads = nt;
        ref_progress pr = {.n_layer = m->hp.n_layer, .n_member = n, .total = j.macs, .m = m,
                           .rq = &with_threads};
        rq->progress(rq->progress_user, &pr);
    }
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
