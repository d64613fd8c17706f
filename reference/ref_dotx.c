/* ref_dotx.c — exact inner product of an MPFR vector with a float32 row by splitting both into
 * integer digits on fixed grids, of widths chosen per product (method, error bound and cost in
 * ref_dotx.h). */
#include "ref_dotx.h"
#include "ref_calib.h"
#include "kvd_ref.h"
#include "kvd_util.h"

#include <math.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define DX_X86 1
#endif

#define MASK_BITS(b) ((uint32_t)((1ull << (b)) - 1u)) /* b <= 32 */

__extension__ typedef unsigned __int128 u128; /* GCC and Clang on 64-bit targets */

#ifdef LM_TEST_HOOKS
int ref_dx_test_force_kernel = -1;
_Thread_local unsigned long ref_dx_test_vv_cut, ref_dx_test_vv_rest;
uint32_t ref_dx_test_calib_bits[2];
uint64_t ref_dx_test_calib_vspan[4];
#endif

uint32_t ref_dx_k_cap_bits(mpfr_prec_t prec, uint32_t bits)
{
    return (uint32_t)((prec + 128 + bits - 1) / bits);
}

uint32_t ref_dx_k_cap(mpfr_prec_t prec)
{
    return ref_dx_k_cap_bits(prec, REF_DX_BITS);
}

/* ceil(log2(v)), v >= 1 */
static uint32_t ceil_log2(uint64_t v)
{
    uint32_t lg = 0;
    while ((1ull << lg) < v)
        ++lg;
    return lg;
}

uint32_t ref_dx_sum_bits(uint64_t n)
{
    const uint32_t lg = ceil_log2(n); /* of the padded length */
    return lg <= 17 ? 45u : 62u - lg;
}

/* The exponents of w[0..n)'s top (one above the highest set bit of its largest finite
 * magnitude) and of its lowest set bit; false when no element is finite and nonzero. Without
 * branches on the elements (zeros are common in quantized rows): an element that is zero, Inf
 * or NaN leaves big and the lowest bit's key as they are. */
static bool row_range(const float *w, uint64_t n, long *top, long *low)
{
    uint32_t big = 0, key = UINT32_MAX; /* key: the lowest set bit's exponent + 150 */
    for (uint64_t i = 0; i < n; ++i) {
        uint32_t u;
        memcpy(&u, &w[i], 4);
        u &= 0x7fffffffu;
        const bool ok = u - 1u < 0x7f7fffffu; /* 0 < u < 0x7f800000: finite, nonzero */
        const uint32_t ef = u >> 23;
        /* a normal's significand has its hidden bit; a subnormal's exponent is that of ef 1;
         * bit 24 keeps ctz defined for u = 0 (not ok) */
        const uint32_t M = (u & 0x7fffffu) | (ef ? 0x800000u : 0x1000000u);
        const uint32_t k = (ef ? ef : 1u) + (uint32_t)__builtin_ctz(M);
        big = ok && u > big ? u : big;
        key = ok && k < key ? k : key;
    }
    if (big == 0)
        return false;
    const uint32_t ef = big >> 23, M = ef ? (big & 0x7fffffu) | 0x800000u : big;
    *top = (ef ? (long)ef - 150 : -149) + 32 - __builtin_clz(M);
    *low = (long)key - 150;
    return true;
}

uint32_t ref_dx_row_span(const float *w, uint64_t n)
{
    long top = 0, low = 0;
    return row_range(w, n, &top, &low) ? (uint32_t)(top - low) : 0;
}

/* One row's cost in digit planes at width b: J = ceil(span / b), a row beyond REF_DX_JMAX
 * digits counted twice the cap. */
static uint64_t row_planes(uint32_t span, uint32_t b)
{
    const uint32_t j = (span + b - 1) / b;
    return j <= REF_DX_JMAX ? j : 2 * REF_DX_JMAX;
}

uint32_t ref_dx_pick_bits(const uint64_t *row_hist, const uint64_t *vspan, uint64_t n_vec,
                          mpfr_prec_t prec, uint64_t n)
{
    const uint32_t sum = ref_dx_sum_bits(n);
    uint32_t best = REF_DX_BITS;
    double best_cost = -1.0;
    for (uint32_t a = REF_DX_BITS; a <= REF_DX_BITS_MAX && a < sum; ++a) {
        const uint32_t b = sum - a, kc = ref_dx_k_cap_bits(prec, a);
        double ks = 0.0, js = 0.0;
        for (uint64_t t = 0; t < n_vec; ++t) {
            const uint64_t k = (vspan[t] + a - 1) / a;
            ks += (double)(k < kc ? k : kc);
        }
        for (uint32_t sp = 1; sp < REF_DX_SPAN_BINS; ++sp)
            js += (double)row_hist[sp] * (double)row_planes(sp, b);
        if (best_cost < 0.0 || ks * js < best_cost) {
            best_cost = ks * js;
            best = a;
        }
    }
    return best;
}

void ref_dx_widths(const uint64_t *row_hist, const uint64_t *vspan, uint64_t n_vec,
                   mpfr_prec_t prec, uint64_t n, uint32_t *a, uint32_t *b)
{
    *a = ref_dx_pick_bits(row_hist, vspan, n_vec, prec, n);
    *b = ref_dx_sum_bits(n) - *a;
}

static uint64_t pad16(uint64_t n)
{
    return (n + 15) & ~(uint64_t)15;
}

/* --- kernels: for each of R rows r of one digit plane each, A[r][k] += sum_i d[k][i] p[r][i]
 * over i < n (a multiple of 8) and k < K, in blocks of REF_DX_BLOCK elements (d's planes ds
 * doubles apart). Every accumulator takes one product per element, an integer below
 * 2^(a+b) <= 2^45, so every partial sum of one block is an integer below 2^53
 * (ref_dotx.h) and all kernels compute the same exact integers. R rows share each load of the
 * vector's digits. --- */

typedef void (*dx_kernel)(int64_t *const *A, const double *d, uint32_t K,
                          const double *const *p, uint32_t R, uint64_t n, uint64_t ds);

static void kern_scalar(int64_t *const *A, const double *d, uint32_t K, const double *const *p,
                        uint32_t R, uint64_t n, uint64_t ds)
{
    for (uint64_t i0 = 0; i0 < n; i0 += REF_DX_BLOCK) {
        uint64_t i1 = i0 + REF_DX_BLOCK < n ? i0 + REF_DX_BLOCK : n;
        for (uint32_t r = 0; r < R; ++r)
            for (uint32_t k = 0; k < K; ++k) {
                const double *x = d + k * ds, *w = p[r];
                double acc = 0.0;
                for (uint64_t i = i0; i < i1; ++i)
                    acc += x[i] * w[i];
                A[r][k] += (int64_t)acc;
            }
    }
}

#ifdef DX_X86
/* The loops over rows and planes of a kernel step are unrolled completely, so that the
 * accumulators live in registers (GCC at -O2 keeps them in memory otherwise: measured 7x
 * slower). Clang unrolls them by itself; its fuzzing build (ASan) does not finish in minutes
 * with the pragma. */
#if defined(__GNUC__) && !defined(__clang__)
#define DX_UNROLL _Pragma("GCC unroll 8")
#else
#define DX_UNROLL
#endif

/* One load of a weight vector for its KB products: without this GCC folds the load into each
 * FMA as a memory operand, which doubles the loads of a step (the kernel is load-bound then). */
#if defined(__GNUC__)
#define DX_KEEP_IN_REGISTER(v) __asm__("" : "+v"(v))
#else
#define DX_KEEP_IN_REGISTER(v) ((void)0)
#endif

__attribute__((target("avx2,fma"), always_inline)) static inline double hsum4(__m256d s)
{
    __m128d h = _mm_add_pd(_mm256_castpd256_pd128(s), _mm256_extractf128_pd(s, 1));
    return _mm_cvtsd_f64(_mm_add_sd(h, _mm_unpackhi_pd(h, h)));
}

/* KB digit planes k .. k+KB-1 of the vector against R rows over [i0, i1), 4 elements a step:
 * each loaded row vector serves KB planes, each loaded digit vector R rows; R KB independent
 * accumulators (no FMA waits for another of the same step). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
avx2_planes(int64_t *const *A, uint32_t k, const double *d, const double *const *p, uint64_t ds,
            uint64_t i0, uint64_t i1, const uint32_t R, const uint32_t KB)
{
    __m256d a[4][4];
    DX_UNROLL
    for (uint32_t r = 0; r < R; ++r)
        DX_UNROLL
        for (uint32_t b = 0; b < KB; ++b)
            a[r][b] = _mm256_setzero_pd();
    for (uint64_t i = i0; i < i1; i += 4) {
        __m256d xv[4];
        DX_UNROLL
        for (uint32_t kb = 0; kb < KB; ++kb)
            xv[kb] = _mm256_loadu_pd(d + (k + kb) * ds + i);
        DX_UNROLL
        for (uint32_t r = 0; r < R; ++r) {
            __m256d wv = _mm256_loadu_pd(p[r] + i);
            DX_KEEP_IN_REGISTER(wv);
            DX_UNROLL
            for (uint32_t kb = 0; kb < KB; ++kb)
                a[r][kb] = _mm256_fmadd_pd(xv[kb], wv, a[r][kb]);
        }
    }
    DX_UNROLL
    for (uint32_t r = 0; r < R; ++r)
        DX_UNROLL
        for (uint32_t b = 0; b < KB; ++b)
            A[r][k + b] += (int64_t)hsum4(a[r][b]);
}

/* KB (1..4) made a constant for the compiler; FN(KB, ...). */
#define DX_BY_KB(FN, KB, ...)                                                                     \
    do {                                                                                          \
        switch (KB) {                                                                             \
        case 1: FN(1, __VA_ARGS__); break;                                                        \
        case 2: FN(2, __VA_ARGS__); break;                                                        \
        case 3: FN(3, __VA_ARGS__); break;                                                        \
        default: FN(4, __VA_ARGS__); break;                                                       \
        }                                                                                         \
    } while (0)
#define AVX2_STEP(KB, RR) avx2_planes(A, k, d, p, ds, i0, i1, RR, KB)

__attribute__((target("avx2,fma"))) static void kern_avx2(int64_t *const *A, const double *d,
                                                          uint32_t K, const double *const *p,
                                                          uint32_t R, uint64_t n, uint64_t ds)
{
    for (uint64_t i0 = 0; i0 < n; i0 += REF_DX_BLOCK) {
        uint64_t i1 = i0 + REF_DX_BLOCK < n ? i0 + REF_DX_BLOCK : n;
        for (uint32_t k = 0; k < K;) {
            /* planes at once where R KB accumulators, KB digit vectors and a row vector fit 16
             * registers */
            uint32_t kb = R == 4 ? 3 : R == 3 ? 3 : 4;
            kb = K - k < kb ? K - k : kb;
            switch (R) {
            case 4: DX_BY_KB(AVX2_STEP, kb, 4); break;
            case 3: DX_BY_KB(AVX2_STEP, kb, 3); break;
            case 2: DX_BY_KB(AVX2_STEP, kb, 2); break;
            default: DX_BY_KB(AVX2_STEP, kb, 1); break;
            }
            k += kb;
        }
    }
}

__attribute__((target("avx512f"), always_inline)) static inline void
avx512_planes(int64_t *const *A, uint32_t k, const double *d, const double *const *p,
              uint64_t ds, uint64_t i0, uint64_t i1, const uint32_t R, const uint32_t KB)
{
    __m512d a[4][4];
    DX_UNROLL
    for (uint32_t r = 0; r < R; ++r)
        DX_UNROLL
        for (uint32_t b = 0; b < KB; ++b)
            a[r][b] = _mm512_setzero_pd();
    for (uint64_t i = i0; i < i1; i += 8) {
        __m512d xv[4];
        DX_UNROLL
        for (uint32_t kb = 0; kb < KB; ++kb)
            xv[kb] = _mm512_loadu_pd(d + (k + kb) * ds + i);
        DX_UNROLL
        for (uint32_t r = 0; r < R; ++r) {
            __m512d wv = _mm512_loadu_pd(p[r] + i);
            DX_KEEP_IN_REGISTER(wv);
            DX_UNROLL
            for (uint32_t kb = 0; kb < KB; ++kb)
                a[r][kb] = _mm512_fmadd_pd(xv[kb], wv, a[r][kb]);
        }
    }
    DX_UNROLL
    for (uint32_t r = 0; r < R; ++r)
        DX_UNROLL
        for (uint32_t b = 0; b < KB; ++b)
            A[r][k + b] += (int64_t)_mm512_reduce_add_pd(a[r][b]);
}

#define AVX512_STEP(KB, RR) avx512_planes(A, k, d, p, ds, i0, i1, RR, KB)

__attribute__((target("avx512f"))) static void kern_avx512(int64_t *const *A, const double *d,
                                                           uint32_t K, const double *const *p,
                                                           uint32_t R, uint64_t n, uint64_t ds)
{
    for (uint64_t i0 = 0; i0 < n; i0 += REF_DX_BLOCK) {
        uint64_t i1 = i0 + REF_DX_BLOCK < n ? i0 + REF_DX_BLOCK : n;
        for (uint32_t k = 0; k < K;) {
            /* 32 registers: four planes at once for up to 4 rows (16 accumulators) */
            const uint32_t kb = K - k < 4 ? K - k : 4;
            switch (R) {
            case 4: DX_BY_KB(AVX512_STEP, kb, 4); break;
            case 3: DX_BY_KB(AVX512_STEP, kb, 3); break;
            case 2: DX_BY_KB(AVX512_STEP, kb, 2); break;
            default: DX_BY_KB(AVX512_STEP, kb, 1); break;
            }
            k += kb;
        }
    }
}
#endif

static int cpu_kernel_detect(void)
{
#ifdef DX_X86
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f"))
        return 2;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return 1;
#endif
    return 0;
}

/* The CPU's kernel, detected once (every dot product asks). */
static int cpu_kernel(void)
{
    static atomic_int id = -1;
    int k = atomic_load_explicit(&id, memory_order_relaxed);
    if (k < 0) {
        k = cpu_kernel_detect();
        atomic_store_explicit(&id, k, memory_order_relaxed);
    }
    return k;
}

static int kernel_id(void)
{
#ifdef LM_TEST_HOOKS
    if (ref_dx_test_force_kernel >= 0 && ref_dx_test_force_kernel <= cpu_kernel())
        return ref_dx_test_force_kernel;
#endif
    return cpu_kernel();
}

const char *ref_dx_kernel(void)
{
    static const char *const names[3] = {"scalar", "avx2", "avx512"};
    return names[kernel_id()];
}

static dx_kernel pick_kernel(void)
{
#ifdef DX_X86
    switch (kernel_id()) {
    case 2: return kern_avx512;
    case 1: return kern_avx2;
    default: break;
    }
#endif
    return kern_scalar;
}

/* --- scratch --- */

int ref_dx_scratch_init(ref_dx_scratch *s, mpfr_prec_t prec, uint64_t n_cap, lm_err *err)
{
    memset(s, 0, sizeof *s);
    s->prec = prec;
    s->n_cap = n_cap;
    s->k_cap = ref_dx_k_cap(prec);
    const uint32_t nb_vv = 2 * s->k_cap; /* K + L at the narrowest digits */
    /* T < 2^(bits + 64): the digits and the final carry of a vector-vector product (a (K + L)
     * bits at most, a <= REF_DX_VV_BITS_MAX), or of a row product (a K <= prec + 128 + a - 1
     * bits of the vector's digits, b J <= 4 * 32 of the row's) */
    uint64_t vv_bits = 0;
    for (uint32_t a = REF_DX_BITS; a <= REF_DX_VV_BITS_MAX; ++a)
        if (2ull * a * ref_dx_k_cap_bits(prec, a) > vv_bits)
            vv_bits = 2ull * a * ref_dx_k_cap_bits(prec, a);
    const uint64_t row_bits = (uint64_t)prec + 128 + REF_DX_BITS_MAX + 32 * REF_DX_JMAX;
    s->n_limbs = ((vv_bits > row_bits ? vv_bits : row_bits) + 64) / 64 + 2;
    s->bucket = calloc((size_t)REF_DX_ROWS_MAX * REF_DX_JMAX * s->k_cap, sizeof *s->bucket);
    s->bucket_vv = calloc(nb_vv, sizeof *s->bucket_vv);
    s->limbs = calloc(s->n_limbs, sizeof *s->limbs);
    s->part = calloc(s->n_limbs, sizeof *s->part);
    s->prod = malloc((n_cap ? n_cap : 1) * sizeof *s->prod);
    s->terms = malloc((n_cap + 1) * sizeof *s->terms);
    if (!s->bucket || !s->bucket_vv || !s->limbs || !s->part || !s->prod || !s->terms) {
        free(s->bucket);
        free(s->bucket_vv);
        free(s->limbs);
        free(s->part);
        free(s->prod);
        free(s->terms);
        memset(s, 0, sizeof *s);
        return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory for the dot product scratch");
    }
    mpfr_init2(s->t, (mpfr_prec_t)(64 * s->n_limbs));
    for (uint64_t i = 0; i < n_cap; ++i)
        mpfr_init2(s->prod[i], prec + 24);
    return LM_OK;
}

void ref_dx_scratch_clear(ref_dx_scratch *s)
{
    if (s == NULL || s->bucket == NULL)
        return;
    for (uint64_t i = 0; i < s->n_cap; ++i)
        mpfr_clear(s->prod[i]);
    mpfr_clear(s->t);
    free(s->bucket);
    free(s->bucket_vv);
    free(s->limbs);
    free(s->part);
    free(s->prod);
    free(s->terms);
    memset(s, 0, sizeof *s);
}

/* --- splitting --- */

/* Storage for need doubles in *buf (64-byte aligned) and n exception indices in *exc, each
 * grown independently when too small (kept otherwise). */
static int grow(double **buf, uint64_t *cap, uint64_t need, uint32_t **exc, uint64_t *exc_cap,
                uint64_t n)
{
    if (need > *cap) {
        double *nb = aligned_alloc(64, ((need * sizeof(double)) + 63) & ~(size_t)63);
        if (nb == NULL)
            return -1;
        free(*buf);
        *buf = nb;
        *cap = need;
    }
    if (*exc == NULL || n > *exc_cap) {
        uint32_t *ne = malloc((n ? n : 1) * sizeof *ne);
        if (ne == NULL)
            return -1;
        free(*exc);
        *exc = ne;
        *exc_cap = n ? n : 1;
    }
    return 0;
}

/* Significand limbs of a regular number (custom interface and ordinary numbers alike). */
static const mp_limb_t *limbs_of(mpfr_srcptr x)
{
    return (const mp_limb_t *)mpfr_custom_get_significand(x);
}

static size_t n_limbs_of(mpfr_srcptr x)
{
    return (size_t)((mpfr_get_prec(x) + GMP_NUMB_BITS - 1) / GMP_NUMB_BITS);
}

/* Exponent of the lowest set bit of a regular x: x = m 2^(e - 64 nl), m the limbs. */
static long low_exp(mpfr_srcptr x)
{
    const mp_limb_t *m = limbs_of(x);
    size_t nl = n_limbs_of(x), j = 0;
    while (m[j] == 0)
        ++j; /* a regular number has its top bit set, so this stops */
    return (long)mpfr_get_exp(x) - (long)(64 * nl) + (long)(64 * j) + __builtin_ctzll(m[j]);
}

/* Bits [lo, lo + b) of the integer m[0..nl) (lo may be negative: zeros below bit 0), b <= 32. */
static uint32_t field(const mp_limb_t *m, size_t nl, long lo, uint32_t b)
{
    if (lo >= (long)(64 * nl) || lo + (long)b <= 0)
        return 0;
    if (lo < 0)
        return (uint32_t)((m[0] << (-lo)) & MASK_BITS(b));
    size_t li = (size_t)lo / 64, bi = (size_t)lo % 64;
    uint64_t r = m[li] >> bi;
    if (bi > 64 - b && li + 1 < nl)
        r |= m[li + 1] << (64 - bi);
    return (uint32_t)(r & MASK_BITS(b));
}

int ref_dx_vec_set(ref_dx_vec *v, mpfr_t *x, uint64_t n, uint32_t k_cap, lm_err *err)
{
    return ref_dx_vec_split(v, x, n, 1, REF_DX_BITS, k_cap, err);
}

ref_dx_range ref_dx_vec_range(mpfr_t *x, uint64_t n, uint64_t stride)
{
    ref_dx_range r = {0, 0, false};
    for (uint64_t i = 0; i < n; ++i) {
        mpfr_srcptr e = x[i * stride];
        if (!mpfr_regular_p(e))
            continue;
        const long t = (long)mpfr_get_exp(e), l = low_exp(e);
        r.top = !r.any || t > r.top ? t : r.top;
        r.low = !r.any || l < r.low ? l : r.low;
        r.any = true;
    }
    return r;
}

uint64_t ref_dx_range_span(ref_dx_range r)
{
    return r.any ? (uint64_t)(r.top - r.low) : 0;
}

uint64_t ref_dx_vec_span(mpfr_t *x, uint64_t n, uint64_t stride)
{
    return ref_dx_range_span(ref_dx_vec_range(x, n, stride));
}

int ref_dx_vec_split(ref_dx_vec *v, mpfr_t *src, uint64_t n, uint64_t stride, uint32_t bits,
                     uint32_t k_cap, lm_err *err)
{
    return ref_dx_vec_split_range(v, src, n, stride, ref_dx_vec_range(src, n, stride), bits,
                                  k_cap, err);
}

int ref_dx_vec_split_range(ref_dx_vec *v, mpfr_t *src, uint64_t n, uint64_t stride,
                           ref_dx_range r, uint32_t bits, uint32_t k_cap, lm_err *err)
{
    if (n > REF_DX_MAX_N)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "reference: dot products longer than %u elements "
                       "are not supported", (unsigned)REF_DX_MAX_N);
    v->n = n;
    v->n_pad = pad16(n);
    v->src = src;
    v->stride = stride;
    v->n_exc = 0;
    v->k = 0;
    v->bits = bits;
#define x(i) src[(i) * stride]
    const long top = r.top;
    uint64_t k = 0;
    if (r.any) {
        k = (uint64_t)(top - r.low + bits - 1) / bits;
        if (k > k_cap)
            k = k_cap;
    }
    if (grow(&v->d, &v->cap, (k ? k : 1) * v->n_pad, &v->exc, &v->exc_cap, n) != 0)
        return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory for a split vector");
    v->k = (uint32_t)k;
    v->top = top;
    memset(v->d, 0, k * v->n_pad * sizeof *v->d);
    const long bottom = top - (long)(bits * k);
    for (uint64_t i = 0; i < n; ++i) {
        if (mpfr_zero_p(x(i)))
            continue;
        if (!mpfr_regular_p(x(i)) || low_exp(x(i)) < bottom) {
            v->exc[v->n_exc++] = (uint32_t)i; /* NaN, Inf, or bits below the grid */
            continue;
        }
        const mp_limb_t *m = limbs_of(x(i));
        size_t nl = n_limbs_of(x(i));
        /* digit kk holds the bits of exponents [top - a(kk+1), top - a kk): in m those are
         * the bits from lo = 64 nl - e + top - a(kk+1) */
        long base = (long)(64 * nl) - (long)mpfr_get_exp(x(i)) + top;
        double sg = mpfr_signbit(x(i)) ? -1.0 : 1.0;
        for (uint64_t kk = 0; kk < k; ++kk)
            v->d[kk * v->n_pad + i] =
                sg * (double)field(m, nl, base - (long)(bits * (kk + 1)), bits);
    }
#undef x
    return LM_OK;
}

void ref_dx_vec_free(ref_dx_vec *v)
{
    if (v == NULL)
        return;
    free(v->d);
    free(v->exc);
    memset(v, 0, sizeof *v);
}

/* w = M 2^q with M the integer significand (24 bits at most); false for 0, NaN, Inf. */
static bool flt_parts(float w, uint32_t *M, long *q, bool *neg)
{
    uint32_t b;
    memcpy(&b, &w, 4);
    uint32_t ef = (b >> 23) & 0xffu, frac = b & 0x7fffffu;
    *neg = (b >> 31) != 0;
    if (ef == 0xffu || (ef == 0 && frac == 0))
        return false;
    *M = ef ? (frac | 0x800000u) : frac;
    *q = ef ? (long)ef - 150 : -149;
    return true;
}

/* Digits of w[i], i in [i0, i1), on the grid of 2^bottom with J planes of b bits (planes < J
 * of these elements are written, zeros included); elements with bits below the grid, NaN and
 * Inf are appended to the row's exceptions. */
static void row_digits_scalar(ref_dx_row *r, const float *w, uint64_t i0, uint64_t i1,
                              long bottom, uint32_t J, uint32_t b)
{
    for (uint64_t i = i0; i < i1; ++i) {
        uint32_t M;
        long q;
        bool neg;
        uint32_t bits;
        memcpy(&bits, &w[i], 4);
        for (uint32_t j = 0; j < J; ++j)
            r->p[j * r->n_pad + i] = 0.0;
        if (!flt_parts(w[i], &M, &q, &neg)) {
            if (((bits >> 23) & 0xffu) == 0xffu)
                r->exc[r->n_exc++] = (uint32_t)i; /* NaN, Inf */
            continue;
        }
        int tz = __builtin_ctz(M);
        long sh = q + tz - bottom; /* w = (M >> tz) 2^(bottom + sh); digits span b J bits */
        if (sh < 0) {
            r->exc[r->n_exc++] = (uint32_t)i;
            continue;
        }
        const u128 V = (u128)(M >> tz) << sh; /* < 2^(b J) <= 2^128 */
        const double sg = neg ? -1.0 : 1.0;
        for (uint32_t j = 0; j < J; ++j)
            r->p[j * r->n_pad + i] =
                sg * (double)(uint32_t)((V >> (b * (J - 1 - j))) & MASK_BITS(b));
    }
}

#ifdef DX_X86
/* The same digits four elements a step, in double: V = |w| 2^-bottom is an integer below
 * 2^(b J) exactly when w is on the grid (the scaling is exact), and digit j =
 * t - 2^b floor(t 2^-b) with t = floor(V 2^-b(J-1-j)); every step is exact, since each
 * value has at most 24 significant bits. A step with an element off the grid, NaN or Inf
 * (V not an integer below 2^(b J)) is done by row_digits_scalar. Returns the elements done. */
__attribute__((target("avx2"))) static uint64_t row_digits_avx2(ref_dx_row *r, const float *w,
                                                                uint64_t n, long bottom,
                                                                uint32_t J, uint32_t b)
{
    const __m256d scale = _mm256_set1_pd(ldexp(1.0, (int)-bottom)),
                  lim = _mm256_set1_pd(ldexp(1.0, (int)(b * J))),
                  sgn = _mm256_set1_pd(-0.0), base = _mm256_set1_pd(ldexp(1.0, (int)b)),
                  inv_base = _mm256_set1_pd(ldexp(1.0, -(int)b));
    __m256d down[REF_DX_JMAX];
    for (uint32_t j = 0; j < J; ++j)
        down[j] = _mm256_set1_pd(ldexp(1.0, -(int)(b * (J - 1 - j))));
    uint64_t i = 0;
    for (; i + 4 <= n; i += 4) {
        const __m256d x = _mm256_cvtps_pd(_mm_loadu_ps(w + i)); /* exact */
        const __m256d s = _mm256_and_pd(x, sgn);
        const __m256d a = _mm256_mul_pd(_mm256_andnot_pd(sgn, x), scale);
        const __m256d ok = _mm256_and_pd(
            _mm256_cmp_pd(a, _mm256_round_pd(a, _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC),
                          _CMP_EQ_OQ),
            _mm256_cmp_pd(a, lim, _CMP_LT_OQ));
        if (_mm256_movemask_pd(ok) != 0xf) {
            row_digits_scalar(r, w, i, i + 4, bottom, J, b);
            continue;
        }
        for (uint32_t j = 0; j < J; ++j) {
            const __m256d t = _mm256_round_pd(_mm256_mul_pd(a, down[j]),
                                              _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
            const __m256d hi = _mm256_round_pd(_mm256_mul_pd(t, inv_base),
                                               _MM_FROUND_TO_NEG_INF | _MM_FROUND_NO_EXC);
            const __m256d d = _mm256_sub_pd(t, _mm256_mul_pd(hi, base));
            _mm256_storeu_pd(r->p + j * r->n_pad + i, _mm256_or_pd(d, s));
        }
    }
    return i;
}
#endif

int ref_dx_row_set(ref_dx_row *r, const float *w, uint64_t n, lm_err *err)
{
    return ref_dx_row_split(r, w, n, REF_DX_BITS, err);
}

int ref_dx_row_split(ref_dx_row *r, const float *w, uint64_t n, uint32_t bits, lm_err *err)
{
    r->n = n;
    r->bits = bits;
    r->n_pad = pad16(n);
    r->src = w;
    r->n_exc = 0;
    r->j = 0;
    long top = 0, low = 0;
    uint64_t J = 0;
    if (row_range(w, n, &top, &low)) {
        J = (uint64_t)(top - low + bits - 1) / bits;
        if (J > REF_DX_JMAX)
            J = REF_DX_JMAX;
    }
    if (grow(&r->p, &r->cap, REF_DX_JMAX * r->n_pad, &r->exc, &r->exc_cap, n) != 0)
        return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory for a split weight row");
    r->j = (uint32_t)J;
    r->top = top;
    /* planes >= J, and the padding of every plane, stay zero */
    memset(r->p + J * r->n_pad, 0, (REF_DX_JMAX - J) * r->n_pad * sizeof *r->p);
    for (uint64_t j = 0; j < J; ++j)
        memset(r->p + j * r->n_pad + n, 0, (r->n_pad - n) * sizeof *r->p);
    const long bottom = top - (long)(bits * J);
    uint64_t done = 0;
#ifdef DX_X86
    if (J > 0 && kernel_id() >= 1)
        done = row_digits_avx2(r, w, n, bottom, (uint32_t)J, bits);
#endif
    row_digits_scalar(r, w, done, n, bottom, (uint32_t)J, bits);
    return LM_OK;
}

void ref_dx_row_free(ref_dx_row *r)
{
    if (r == NULL)
        return;
    free(r->p);
    free(r->exc);
    memset(r, 0, sizeof *r);
}

/* --- the dot product --- */

static void put_bits(mp_limb_t *l, uint64_t v, uint64_t off)
{
    uint64_t li = off / 64, bi = off % 64;
    l[li] |= v << bi;
    if (bi)
        l[li + 1] |= v >> (64 - bi);
}

/* l[0 .. n) = sum_{i < nb} A[i] 2^(b (nb-1-i)) in two's complement, sign-extended over every
 * limb: one pass carries each bucket's bits above its b digits into the next one up, then
 * the final carry goes in at b nb with its sign above it (|A[i]| < 2^62: no sum overflows). */
static void chain(mp_limb_t *l, size_t n, const int64_t *A, uint32_t nb, uint32_t b)
{
    int64_t carry = 0;
    memset(l, 0, n * sizeof *l);
    const uint64_t mask = (1ull << b) - 1u;
    for (uint32_t i = nb; i-- > 0;) {
        const int64_t v = A[i] + carry;
        const int64_t dig = (int64_t)((uint64_t)v & mask);
        /* floor(v 2^-b) (= (v - dig) 2^-b exactly) by shifts of non-negative values */
        carry = v < 0 ? -(int64_t)(~(uint64_t)v >> b) - 1 : (int64_t)((uint64_t)v >> b);
        put_bits(l, (uint64_t)dig, (uint64_t)b * (nb - 1 - i));
    }
    const uint64_t off = (uint64_t)b * nb;
    put_bits(l, (uint64_t)carry, off);
    if (carry < 0) {
        size_t k = off / 64 + 1;
        if (off % 64 != 0) /* the limb holding the carry's top bits: ones above them */
            l[k++] |= ~(uint64_t)0 << (off % 64);
        for (; k < n; ++k)
            l[k] = ~(uint64_t)0;
    }
}

/* l += p 2^sh, both two's complement over n limbs (the sum fits them). */
static void add_shifted(mp_limb_t *l, const mp_limb_t *p, size_t n, uint64_t sh)
{
    const size_t li = sh / 64;
    const unsigned bi = (unsigned)(sh % 64);
    u128 c = 0;
    for (size_t k = li; k < n; ++k) {
        const size_t q = k - li;
        uint64_t v = p[q] << bi;
        if (bi != 0 && q > 0)
            v |= p[q - 1] >> (64 - bi);
        c += (u128)l[k] + v;
        l[k] = (uint64_t)c;
        c >>= 64;
    }
}

/* Limbs that hold a T of at most bits + 64 bits (digits over bits bits, a final carry of 64)
 * in two's complement, with room for the sign and for the sums of shifted parts. */
static size_t use_limbs(const ref_dx_scratch *s, uint64_t bits)
{
    const size_t n = (size_t)((bits + 66) / 64) + 2;
    return n < s->n_limbs ? n : s->n_limbs;
}

/* |T| in place of its two's complement in s->limbs[0 .. s->n_use): returns the sign of T (-1,
 * 0, 1) and the limb count of |T| in *nl. */
static int magnitude(ref_dx_scratch *s, size_t *nl)
{
    const int sign = (int64_t)s->limbs[s->n_use - 1] < 0 ? -1 : 1;
    if (sign < 0) {
        u128 c = 1; /* |T| = ~T + 1 */
        for (size_t k = 0; k < s->n_use; ++k) {
            c += (u128)(uint64_t)~s->limbs[k];
            s->limbs[k] = (uint64_t)c;
            c >>= 64;
        }
    }
    size_t n = s->n_use;
    while (n > 0 && s->limbs[n - 1] == 0)
        --n;
    *nl = n;
    return n == 0 ? 0 : sign;
}

/* The exact product of element i of two operands (exact: out's precision is grown to the
 * sum of theirs), or NaN/Inf. */
typedef void (*exc_prod)(mpfr_ptr out, uint32_t i, const void *a, const void *b);

static void prod_vec_row(mpfr_ptr p, uint32_t i, const void *a, const void *b)
{
    const ref_dx_vec *x = a;
    const ref_dx_row *w = b;
    mpfr_srcptr xi = x->src[i * x->stride];
    if (mpfr_get_prec(p) < mpfr_get_prec(xi) + 24)
        mpfr_set_prec(p, mpfr_get_prec(xi) + 24);
    mpfr_mul_d(p, xi, (double)w->src[i], MPFR_RNDN);
}

static void prod_vec_vec(mpfr_ptr p, uint32_t i, const void *a, const void *b)
{
    const ref_dx_vec *x = a, *y = b;
    mpfr_srcptr xi = x->src[i * x->stride], yi = y->src[i * y->stride];
    if (mpfr_get_prec(p) < mpfr_get_prec(xi) + mpfr_get_prec(yi))
        mpfr_set_prec(p, mpfr_get_prec(xi) + mpfr_get_prec(yi));
    mpfr_mul(p, xi, yi, MPFR_RNDN);
}

/* out = T 2^base (T in s->limbs, two's complement) plus the exact products of the elements
 * i < n in either exception list (an element in both taken once), rounded once. */
static void finish(mpfr_t out, ref_dx_scratch *s, long base, const uint32_t *xe, uint32_t nxe,
                   const uint32_t *ye, uint32_t nye, uint64_t n, exc_prod prod, const void *a,
                   const void *b)
{
    mpz_t z;
    size_t nl = 0;
    const int sign = magnitude(s, &nl);
    mpz_roinit_n(z, s->limbs, sign < 0 ? -(mp_size_t)nl : (mp_size_t)nl);
    while (nxe > 0 && xe[nxe - 1] >= n)
        --nxe;
    while (nye > 0 && ye[nye - 1] >= n)
        --nye;
    if (nxe == 0 && nye == 0) {
        mpfr_set_z_2exp(out, z, (mpfr_exp_t)base, MPFR_RNDN); /* the one rounding; 0 -> +0 */
        return;
    }
    /* Elements off either grid: T exactly, plus their exact products, summed with one
     * rounding. */
    uint64_t nt = 0;
    mpfr_set_z_2exp(s->t, z, (mpfr_exp_t)base, MPFR_RNDN); /* exact: 64 n_limbs bits */
    s->terms[nt++] = s->t;
    uint32_t ia = 0, ib = 0;
    while (ia < nxe || ib < nye) {
        uint32_t i;
        if (ib >= nye || (ia < nxe && xe[ia] < ye[ib]))
            i = xe[ia++];
        else if (ia >= nxe || ye[ib] < xe[ia])
            i = ye[ib++];
        else {
            i = xe[ia++];
            ++ib;
        }
        prod(s->prod[nt - 1], i, a, b);
        s->terms[nt] = s->prod[nt - 1];
        ++nt;
    }
    mpfr_sum(out, s->terms, nt, MPFR_RNDN);
    if (mpfr_zero_p(out))
        mpfr_set_zero(out, 1);
}

/* Row w's result from its buckets A[j k_cap + k] (j < J, k < K): T = sum over the digit
 * pairs of A 2^(a(K-1-k) + b(J-1-j)), one chain per weight digit j (the vector's digits are
 * a bits apart, the row's b), in units of 2^(tx + tw - aK - bJ). */
static void finish_row(mpfr_t out, const ref_dx_vec *x, const ref_dx_row *w, const int64_t *A,
                       ref_dx_scratch *s)
{
    const uint32_t K = x->k, J = w->j;
    const bool grid = K > 0 && J > 0;
    s->n_use = use_limbs(s, grid ? (uint64_t)x->bits * K + (uint64_t)w->bits * J : 0);
    if (!grid)
        memset(s->limbs, 0, s->n_use * sizeof *s->limbs);
    else if (J == 1)
        chain(s->limbs, s->n_use, A, K, x->bits);
    else {
        memset(s->limbs, 0, s->n_use * sizeof *s->limbs);
        for (uint32_t j = 0; j < J; ++j) {
            chain(s->part, s->n_use, A + (size_t)j * s->k_cap, K, x->bits);
            add_shifted(s->limbs, s->part, s->n_use, (uint64_t)w->bits * (J - 1 - j));
        }
    }
    finish(out, s, grid ? x->top + w->top - (long)(x->bits * K + w->bits * J) : 0, x->exc,
           x->n_exc, w->exc, w->n_exc, x->n, prod_vec_row, x, w);
}

void ref_dx_dot_rows(mpfr_ptr *out, const ref_dx_vec *x, const ref_dx_row *const *w, uint32_t R,
                     ref_dx_scratch *s)
{
    const uint32_t K = x->k, kc = s->k_cap;
    /* every digit plane j of every row is a row of one plane with its own K buckets */
    int64_t *A[REF_DX_ROWS_MAX * REF_DX_JMAX];
    const double *pl[REF_DX_ROWS_MAX * REF_DX_JMAX];
    uint32_t nv = 0;
    for (uint32_t r = 0; r < R; ++r) {
        int64_t *Ar = s->bucket + (size_t)r * REF_DX_JMAX * kc;
        memset(Ar, 0, (size_t)w[r]->j * kc * sizeof *Ar);
        for (uint32_t j = 0; j < w[r]->j; ++j, ++nv) {
            A[nv] = Ar + (size_t)j * kc;
            pl[nv] = w[r]->p + (uint64_t)j * w[r]->n_pad;
        }
    }
    /* a block of the vector's digits serves every group of planes while it is in L1 */
    const dx_kernel kern = pick_kernel();
    for (uint64_t i0 = 0; K > 0 && i0 < x->n_pad; i0 += REF_DX_BLOCK) {
        const uint64_t len = x->n_pad - i0 < REF_DX_BLOCK ? x->n_pad - i0 : REF_DX_BLOCK;
        for (uint32_t g = 0; g < nv; g += REF_DX_ROWS) {
            const uint32_t G = nv - g < REF_DX_ROWS ? nv - g : REF_DX_ROWS;
            const double *p[REF_DX_ROWS];
            for (uint32_t r = 0; r < G; ++r)
                p[r] = pl[g + r] + i0;
            kern(A + g, x->d + i0, K, p, G, len, x->n_pad);
        }
    }
    for (uint32_t r = 0; r < R; ++r)
        finish_row(out[r], x, w[r], s->bucket + (size_t)r * REF_DX_JMAX * kc, s);
}

uint32_t ref_dx_vv_bits(uint64_t n, mpfr_prec_t prec)
{
    for (uint32_t a = REF_DX_VV_BITS_MAX; a >= REF_DX_BITS; --a)
        if (n * ref_dx_k_cap_bits(prec, a) <= (1ull << (62 - 2 * a)))
            return a;
    return 0;
}

bool ref_dx_vv_fits(uint64_t n, mpfr_prec_t prec)
{
    return ref_dx_vv_bits(n, prec) != 0;
}

/* Digit pairs of y's planes c .. c+G-1 (kernel rows of one plane) with x's planes k0 .. k1-1
 * into the buckets A[k + l]. */
static void vv_pairs(dx_kernel kern, int64_t *A, const ref_dx_vec *x, const ref_dx_vec *y,
                     uint32_t c, uint32_t G, uint32_t k0, uint32_t k1)
{
    int64_t *Ac[REF_DX_VV_ROWS];
    const double *pc[REF_DX_VV_ROWS];
    for (uint32_t r = 0; r < G; ++r) {
        Ac[r] = A + c + r + k0;
        pc[r] = y->d + (uint64_t)(c + r) * y->n_pad;
    }
    kern(Ac, x->d + (uint64_t)k0 * x->n_pad, k1 - k0, pc, G, x->n_pad, x->n_pad);
}

/* The x planes that y's planes from c on take first: every k with k + c <= S (all K without a
 * cut). */
static uint32_t vv_first(uint32_t K, uint64_t S, uint32_t c, bool cut)
{
    if (!cut)
        return K;
    return S + 1 <= c ? 0 : (S + 1 - c < K ? (uint32_t)(S + 1 - c) : K);
}

/* Whether |T| (limbs[0 .. nl), nl > 0) and every integer within E < 2^eb of it round to the
 * same P-bit number (to nearest): with q = bitlength - P dropped bits, the bits [eb + 1, q - 1)
 * of |T| neither all 0 nor all 1 put |T| - E and |T| + E strictly inside one half-ulp interval
 * (h 2^(q-1), (h+1) 2^(q-1)), h = |T| >> (q-1), all of whose points round alike.
 * mpfr_can_round(b, len - eb, MPFR_RNDN, MPFR_RNDN, P) asks the same question of an mpfr_t b:
 * it would need |T| copied into a len-bit mpfr_t for every dot product, and it accepts an
 * interval that holds a representable number but no midpoint (only midpoints separate
 * round-to-nearest results), which this test refuses. Either answer only decides whether the
 * remaining digit pairs are summed; the rounded sum is the same. */
static bool vv_rounds(const mp_limb_t *l, size_t nl, uint64_t eb, uint64_t P)
{
    const uint64_t len = 64 * (uint64_t)nl - (uint64_t)__builtin_clzll(l[nl - 1]);
    if (len < P + eb + 3)
        return false;
    const uint64_t lo = eb + 1, hi = len - P - 1; /* bits [lo, hi), hi > lo */
    bool zero = true, one = true;
    for (uint64_t i = lo / 64; i <= (hi - 1) / 64; ++i) {
        uint64_t m = ~(uint64_t)0;
        if (i == lo / 64)
            m &= ~(uint64_t)0 << (lo % 64);
        if (i == (hi - 1) / 64 && hi % 64 != 0)
            m &= ~(~(uint64_t)0 << (hi % 64));
        zero = zero && (l[i] & m) == 0;
        one = one && (l[i] & m) == m;
    }
    return !zero && !one;
}

void ref_dx_dot_vv(mpfr_t out, const ref_dx_vec *x, const ref_dx_vec *y, ref_dx_scratch *s)
{
    const uint32_t K = x->k, L = y->k, a = x->bits, nb = K + L > 0 ? K + L - 1 : 0;
    int64_t *A = s->bucket_vv;
    memset(A, 0, (nb + 1) * sizeof *A);
    const bool grid = K > 0 && L > 0;
    const long base = grid ? x->top + y->top - (long)(a * (K + L)) : 0;
    s->n_use = use_limbs(s, (uint64_t)a * nb);
    if (!grid) {
        memset(s->limbs, 0, s->n_use * sizeof *s->limbs);
        finish(out, s, base, x->exc, x->n_exc, y->exc, y->n_exc, x->n, prod_vec_vec, x, y);
        return;
    }
    const dx_kernel kern = pick_kernel();
    /* First the digit pairs k + l <= S, S the least with a (S + 1) >= P + REF_DX_VV_GUARD +
     * log2(n min(K, L)) + 2 (y's planes REF_DX_VV_ROWS at a time, each group with the x planes
     * its first plane needs: a few pairs beyond S too). The pairs left out, k + l > S, sum to
     * less than E = n min(K, L) sum_{s > S} 2^(2a) 2^(a(K+L-2-s)) < 2^eb units of 2^base,
     * eb = log2(n min(K, L)) + a(K + L - S - 1) + 1 (every digit below 2^a in magnitude, at
     * most min(K, L) pairs per position s). When every value within E of the partial sum
     * rounds alike (vv_rounds), that is the correctly rounded sum; otherwise (and with
     * elements off either grid) the remaining pairs follow and the exact sum is rounded. */
    const uint64_t P = (uint64_t)mpfr_get_prec(out), nm = x->n * (K < L ? K : L);
    const uint32_t lg_nm = ceil_log2(nm);
    const uint64_t need = P + REF_DX_VV_GUARD + lg_nm + 2;
    const uint64_t S = (need + a - 1) / a - 1;
    const bool cut = S < (uint64_t)K + L - 2 && x->n_exc == 0 && y->n_exc == 0;
    for (uint32_t c = 0; c < L; c += REF_DX_VV_ROWS) {
        const uint32_t G = L - c < REF_DX_VV_ROWS ? L - c : REF_DX_VV_ROWS;
        const uint32_t k1 = vv_first(K, S, c, cut);
        if (k1 > 0)
            vv_pairs(kern, A, x, y, c, G, 0, k1);
    }
    chain(s->limbs, s->n_use, A, nb, a);
    if (cut) {
        size_t nl = 0;
        const int sign = magnitude(s, &nl);
        const uint64_t eb = lg_nm + (uint64_t)a * (K + L - S - 1) + 1;
        if (sign != 0 && vv_rounds(s->limbs, nl, eb, P)) {
            mpz_t z;
            mpz_roinit_n(z, s->limbs, sign < 0 ? -(mp_size_t)nl : (mp_size_t)nl);
            mpfr_set_z_2exp(out, z, (mpfr_exp_t)base, MPFR_RNDN);
#ifdef LM_TEST_HOOKS
            ++ref_dx_test_vv_cut;
#endif
            return;
        }
#ifdef LM_TEST_HOOKS
        ++ref_dx_test_vv_rest;
#endif
        for (uint32_t c = 0; c < L; c += REF_DX_VV_ROWS)
            if (vv_first(K, S, c, true) < K)
                vv_pairs(kern, A, x, y, c, L - c < REF_DX_VV_ROWS ? L - c : REF_DX_VV_ROWS,
                         vv_first(K, S, c, true), K);
        chain(s->limbs, s->n_use, A, nb, a);
    }
    finish(out, s, base, x->exc, x->n_exc, y->exc, y->n_exc, x->n, prod_vec_vec, x, y);
}

void ref_dx_dot(mpfr_t out, const ref_dx_vec *x, const ref_dx_row *w, ref_dx_scratch *s)
{
    mpfr_ptr o = out;
    ref_dx_dot_rows(&o, x, &w, 1, s);
}

/* --- cost calibration --- */

/* One calibration round: the rows split from their float32 weights, then every vector's dot
 * products with all of them (as a matrix product's work item does). */
typedef struct dx_calib {
    ref_dx_row *rows;         /* [R] */
    const float *w;           /* [R][n_in] */
    unsigned n_rows;          /* R */
    uint32_t wbits;           /* the rows' digit width */
    const ref_dx_vec *v;      /* [T] */
    unsigned n_vec;           /* T */
    uint64_t n_in;
    mpfr_ptr *op;             /* [R] */
    const ref_dx_row *const *wr; /* [R] */
    ref_dx_scratch *s;
    lm_err *err;
} dx_calib;

static bool dx_calib_round(void *p)
{
    dx_calib *c = p;
    for (unsigned g = 0; g < c->n_rows; ++g)
        if (ref_dx_row_split(&c->rows[g], c->w + g * c->n_in, c->n_in, c->wbits, c->err) !=
            LM_OK)
            return false;
    for (unsigned t = 0; t < c->n_vec; ++t)
        ref_dx_dot_rows(c->op, &c->v[t], c->wr, c->n_rows, c->s);
    return true;
}

/* The smallest span sp with hist[1..sp] >= q of hist's weight (0 when hist is empty). */
static uint32_t span_quantile(const uint64_t *hist, double q)
{
    double total = 0.0, acc = 0.0;
    for (uint32_t sp = 1; sp < REF_DX_SPAN_BINS; ++sp)
        total += (double)hist[sp];
    for (uint32_t sp = 1; sp < REF_DX_SPAN_BINS; ++sp)
        if ((acc += (double)hist[sp]) >= q * total && hist[sp] > 0)
            return sp;
    return 0;
}

double ref_dx_calibrate(uint32_t prec, uint64_t n_in, const uint64_t *row_hist)
{
    enum { T = 4, R = 16 };
#ifdef LM_TEST_HOOKS
    _Static_assert(T == 4, "ref_dx_test_calib_vspan holds T spans");
#endif
    if (n_in < 2 || n_in > 65536)
        n_in = 1024;
    lm_err err = {0};
    ref_dx_scratch s;
    ref_dx_vec v[T];
    ref_dx_row rows[R];
    memset(v, 0, sizeof v);
    memset(rows, 0, sizeof rows);
    mpfr_t *x = malloc((size_t)T * n_in * sizeof *x);
    float *w = malloc(R * n_in * sizeof *w);
    mpfr_t o[R];
    double sec = 0.0;
    if (x == NULL || w == NULL || ref_dx_scratch_init(&s, prec, n_in, &err) != LM_OK) {
        free(x);
        free(w);
        return 0.0;
    }
    uint64_t z = REF_CALIB_SEED, vspan[T];
    for (uint64_t i = 0; i < (uint64_t)T * n_in; ++i) { /* activations of order 1, P bits */
        ref_calib_next(&z);
        mpfr_init2(x[i], prec);
        mpfr_set_ui(x[i], (unsigned long)(z >> 11), MPFR_RNDN);
        mpfr_div_ui(x[i], x[i], 3u + (unsigned)(z % 1000u), MPFR_RNDN);
        mpfr_mul_2si(x[i], x[i], -53, MPFR_RNDN);
    }
    /* row g spans the histogram's (g + 1/2) / R quantile */
    for (unsigned g = 0; g < R; ++g) {
        const uint32_t sp = span_quantile(row_hist, (g + 0.5) / R);
        ref_calib_fill_span(w + g * n_in, n_in, sp ? sp : 1, &z);
    }
    uint32_t a, b;
    for (unsigned t = 0; t < T; ++t)
        vspan[t] = ref_dx_vec_span(x + (size_t)t * n_in, n_in, 1);
    ref_dx_widths(row_hist, vspan, T, prec, n_in, &a, &b);
    mpfr_ptr op[R];
    const ref_dx_row *wr[R];
    for (unsigned g = 0; g < R; ++g) {
        mpfr_init2(o[g], prec);
        op[g] = o[g];
        wr[g] = &rows[g];
    }
    int ok = 1;
    for (unsigned t = 0; ok && t < T; ++t)
        ok = ref_dx_vec_split(&v[t], x + (size_t)t * n_in, n_in, 1, a,
                              ref_dx_k_cap_bits(prec, a), &err) == LM_OK;
    dx_calib c = {.rows = rows, .w = w, .n_rows = R, .wbits = b, .v = v, .n_vec = T,
                  .n_in = n_in, .op = op, .wr = wr, .s = &s, .err = &err};
    if (ok)
        sec = ref_calib_time(dx_calib_round, &c, (double)T * R * (double)n_in);
#ifdef LM_TEST_HOOKS
    ref_dx_test_calib_bits[0] = a;
    ref_dx_test_calib_bits[1] = b;
    memcpy(ref_dx_test_calib_vspan, vspan, sizeof vspan);
#endif
    for (unsigned g = 0; g < R; ++g) {
        mpfr_clear(o[g]);
        ref_dx_row_free(&rows[g]);
    }
    for (unsigned t = 0; t < T; ++t)
        ref_dx_vec_free(&v[t]);
    for (uint64_t i = 0; i < (uint64_t)T * n_in; ++i)
        mpfr_clear(x[i]);
    free(x);
    free(w);
    ref_dx_scratch_clear(&s);
    return sec;
}
