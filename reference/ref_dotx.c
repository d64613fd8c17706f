/* ref_dotx.c — exact inner product of an MPFR vector with a float32 row by splitting both into
 * 20-bit integer digits on fixed grids (method, error bound and cost in ref_dotx.h). */
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

#define DIGIT_MASK ((1u << REF_DX_BITS) - 1u)

__extension__ typedef unsigned __int128 u128; /* GCC and Clang on 64-bit targets */

#ifdef LM_TEST_HOOKS
int ref_dx_test_force_kernel = -1;
#endif

uint32_t ref_dx_k_cap(mpfr_prec_t prec)
{
    return (uint32_t)((prec + 128 + REF_DX_BITS - 1) / REF_DX_BITS);
}

static uint64_t pad16(uint64_t n)
{
    return (n + 15) & ~(uint64_t)15;
}

/* --- kernels: for each of R rows r, A[r][k + j] += sum_i d[k][i] * p[r][j][i] over i < n (a
 * multiple of 8), in blocks of REF_DX_BLOCK elements (d's planes ds doubles apart, p's ps). Every product is an integer below 2^40 and every partial
 * sum of one block and one bucket an integer below 2^50 (ref_dotx.h), so all kernels compute
 * the same exact integers. R rows share each load of the vector's digits. --- */

typedef void (*dx_kernel)(int64_t *const *A, const double *d, uint32_t K,
                          const double *const *p, uint32_t J, uint32_t R, uint64_t n,
                          uint64_t ds, uint64_t ps);

static void kern_scalar(int64_t *const *A, const double *d, uint32_t K, const double *const *p,
                        uint32_t J, uint32_t R, uint64_t n, uint64_t ds, uint64_t ps)
{
    for (uint64_t i0 = 0; i0 < n; i0 += REF_DX_BLOCK) {
        uint64_t i1 = i0 + REF_DX_BLOCK < n ? i0 + REF_DX_BLOCK : n;
        for (uint32_t r = 0; r < R; ++r)
            for (uint32_t k = 0; k < K; ++k)
                for (uint32_t j = 0; j < J; ++j) {
                    const double *x = d + k * ds, *w = p[r] + j * ps;
                    double acc = 0.0;
                    for (uint64_t i = i0; i < i1; ++i)
                        acc += x[i] * w[i];
                    A[r][k + j] += (int64_t)acc;
                }
    }
}

#ifdef DX_X86
/* The loops over rows, planes and digits of a kernel step are unrolled completely, so that the
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

/* KB digit planes k .. k+KB-1 of the vector against R rows of J planes each over [i0, i1), 4
 * elements a step: each loaded weight vector serves KB planes, each loaded digit vector R J
 * products; bucket k + s of row r collects the products with kb + j = s (at most
 * min(KB, J) <= 4 per element: block sums below 256 * 4 * 2^40 = 2^50, exact). */
__attribute__((target("avx2,fma"), always_inline)) static inline void
avx2_planes(int64_t *const *A, uint32_t k, const double *d, const double *const *p, uint64_t ds,
            uint64_t ps, uint64_t i0, uint64_t i1, const uint32_t J, const uint32_t R,
            const uint32_t KB)
{
    __m256d a[4][REF_DX_JMAX + 3];
    DX_UNROLL
    for (uint32_t r = 0; r < R; ++r)
        DX_UNROLL
        for (uint32_t b = 0; b < J + KB - 1; ++b)
            a[r][b] = _mm256_setzero_pd();
    for (uint64_t i = i0; i < i1; i += 4) {
        __m256d xv[4];
        DX_UNROLL
        for (uint32_t kb = 0; kb < KB; ++kb)
            xv[kb] = _mm256_loadu_pd(d + (k + kb) * ds + i);
        DX_UNROLL
        for (uint32_t r = 0; r < R; ++r)
            DX_UNROLL
            for (uint32_t j = 0; j < J; ++j) {
                __m256d wv = _mm256_loadu_pd(p[r] + j * ps + i);
                DX_KEEP_IN_REGISTER(wv);
                DX_UNROLL
                for (uint32_t kb = 0; kb < KB; ++kb)
                    a[r][j + kb] = _mm256_fmadd_pd(xv[kb], wv, a[r][j + kb]);
            }
    }
    DX_UNROLL
    for (uint32_t r = 0; r < R; ++r)
        DX_UNROLL
        for (uint32_t b = 0; b < J + KB - 1; ++b)
            A[r][k + b] += (int64_t)hsum4(a[r][b]);
}

/* J (1..4) made a constant for the compiler. */
#define DX_BY_J(FN, J, ...)                                                                       \
    do {                                                                                          \
        switch (J) {                                                                              \
        case 1: FN(__VA_ARGS__, 1); break;                                                        \
        case 2: FN(__VA_ARGS__, 2); break;                                                        \
        case 3: FN(__VA_ARGS__, 3); break;                                                        \
        default: FN(__VA_ARGS__, 4); break;                                                       \
        }                                                                                         \
    } while (0)
/* KB (1..4) and J (1..4) made constants for the compiler. */
#define DX_BY_KB(FN, KB, J)                                                                       \
    do {                                                                                          \
        switch (KB) {                                                                             \
        case 1: DX_BY_J(FN, J, 1); break;                                                         \
        case 2: DX_BY_J(FN, J, 2); break;                                                         \
        case 3: DX_BY_J(FN, J, 3); break;                                                         \
        default: DX_BY_J(FN, J, 4); break;                                                        \
        }                                                                                         \
    } while (0)
#define AVX2_R4(KB, JJ) avx2_planes(A, k, d, p, ds, ps, i0, i1, JJ, 4, KB)
#define AVX2_R1(KB, JJ) avx2_planes(A + r, k, d, p + r, ds, ps, i0, i1, JJ, 1, KB)
/* RR (2 or 3) rows of one plane each, KB planes of the vector at once */
#define AVX2_RN(KB, RR) avx2_planes(A, k, d, p, ds, ps, i0, i1, 1, RR, KB)
/* KB (1..3) made a constant for the compiler. */
#define DX_BY_KB3(FN, KB, ...)                                                                    \
    do {                                                                                          \
        switch (KB) {                                                                             \
        case 1: FN(1, __VA_ARGS__); break;                                                        \
        case 2: FN(2, __VA_ARGS__); break;                                                        \
        default: FN(3, __VA_ARGS__); break;                                                       \
        }                                                                                         \
    } while (0)
/* KB (1..4) made a constant for the compiler. */
#define DX_BY_KB4(FN, KB, ...)                                                                    \
    do {                                                                                          \
        switch (KB) {                                                                             \
        case 1: FN(1, __VA_ARGS__); break;                                                        \
        case 2: FN(2, __VA_ARGS__); break;                                                        \
        case 3: FN(3, __VA_ARGS__); break;                                                        \
        default: FN(4, __VA_ARGS__); break;                                                       \
        }                                                                                         \
    } while (0)

__attribute__((target("avx2,fma"))) static void kern_avx2(int64_t *const *A, const double *d,
                                                          uint32_t K, const double *const *p,
                                                          uint32_t J, uint32_t R, uint64_t n,
                                                          uint64_t ds, uint64_t ps)
{
    for (uint64_t i0 = 0; i0 < n; i0 += REF_DX_BLOCK) {
        uint64_t i1 = i0 + REF_DX_BLOCK < n ? i0 + REF_DX_BLOCK : n;
        for (uint32_t k = 0; k < K;) {
            /* several planes at once where the accumulators fit 16 registers: two for 4 rows
             * and J <= 2, three for 3 rows of one plane, four for 2 rows of one plane, up to
             * four for a row alone (J + 3 accumulators, 4 digit vectors) */
            uint32_t kb = R == 4 ? (J <= 2 && K - k >= 2 ? 2 : 1)
                          : R == 3 && J == 1 ? 3 : 4;
            kb = K - k < kb ? K - k : kb;
            if (R == 4 && kb == 2)
                DX_BY_J(AVX2_R4, J, 2);
            else if (R == 4)
                DX_BY_J(AVX2_R4, J, 1);
            else if (R == 3 && J == 1)
                DX_BY_KB3(AVX2_RN, kb, 3);
            else if (R == 2 && J == 1)
                DX_BY_KB4(AVX2_RN, kb, 2);
            else
                for (uint32_t r = 0; r < R; ++r)
                    DX_BY_KB(AVX2_R1, kb, J);
            k += kb;
        }
    }
}

__attribute__((target("avx512f"), always_inline)) static inline void
avx512_planes(int64_t *const *A, uint32_t k, const double *d, const double *const *p,
              uint64_t ds, uint64_t ps, uint64_t i0, uint64_t i1, const uint32_t J,
              const uint32_t R, const uint32_t KB)
{
    __m512d a[4][REF_DX_JMAX + 3];
    DX_UNROLL
    for (uint32_t r = 0; r < R; ++r)
        DX_UNROLL
        for (uint32_t b = 0; b < J + KB - 1; ++b)
            a[r][b] = _mm512_setzero_pd();
    for (uint64_t i = i0; i < i1; i += 8) {
        __m512d xv[4];
        DX_UNROLL
        for (uint32_t kb = 0; kb < KB; ++kb)
            xv[kb] = _mm512_loadu_pd(d + (k + kb) * ds + i);
        DX_UNROLL
        for (uint32_t r = 0; r < R; ++r)
            DX_UNROLL
            for (uint32_t j = 0; j < J; ++j) {
                __m512d wv = _mm512_loadu_pd(p[r] + j * ps + i);
                DX_KEEP_IN_REGISTER(wv);
                DX_UNROLL
                for (uint32_t kb = 0; kb < KB; ++kb)
                    a[r][j + kb] = _mm512_fmadd_pd(xv[kb], wv, a[r][j + kb]);
            }
    }
    DX_UNROLL
    for (uint32_t r = 0; r < R; ++r)
        DX_UNROLL
        for (uint32_t b = 0; b < J + KB - 1; ++b)
            A[r][k + b] += (int64_t)_mm512_reduce_add_pd(a[r][b]);
}

#define AVX512_R4(KB, JJ) avx512_planes(A, k, d, p, ds, ps, i0, i1, JJ, 4, KB)
#define AVX512_R1(KB, JJ) avx512_planes(A + r, k, d, p + r, ds, ps, i0, i1, JJ, 1, KB)

__attribute__((target("avx512f"))) static void kern_avx512(int64_t *const *A, const double *d,
                                                           uint32_t K, const double *const *p,
                                                           uint32_t J, uint32_t R, uint64_t n,
                                                           uint64_t ds, uint64_t ps)
{
    for (uint64_t i0 = 0; i0 < n; i0 += REF_DX_BLOCK) {
        uint64_t i1 = i0 + REF_DX_BLOCK < n ? i0 + REF_DX_BLOCK : n;
        for (uint32_t k = 0; k < K;) {
            /* 32 registers: four planes at once for 4 rows and J <= 3, two for J = 4, up to
             * four for a row alone */
            uint32_t kb = K - k < 4 ? K - k : 4;
            if (R == 4 && (J == 4 || kb < 4))
                kb = kb >= 2 ? 2 : 1;
            if (R == 4 && kb == 4)
                DX_BY_J(AVX512_R4, J, 4);
            else if (R == 4 && kb == 2)
                DX_BY_J(AVX512_R4, J, 2);
            else if (R == 4)
                DX_BY_J(AVX512_R4, J, 1);
            else
                for (uint32_t r = 0; r < R; ++r)
                    DX_BY_KB(AVX512_R1, kb, J);
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
    uint32_t nb = s->k_cap + REF_DX_JMAX, nb_vv = 2 * s->k_cap;
    /* T < 2^(20 nb + 64): the digits and the final carry (nb_vv > nb: two vectors) */
    s->n_limbs = (REF_DX_BITS * nb_vv + 64) / 64 + 2;
    s->bucket = calloc((size_t)REF_DX_ROWS_MAX * nb, sizeof *s->bucket);
    s->bucket_vv = calloc(nb_vv, sizeof *s->bucket_vv);
    s->limbs = calloc(s->n_limbs, sizeof *s->limbs);
    s->prod = malloc((n_cap ? n_cap : 1) * sizeof *s->prod);
    s->terms = malloc((n_cap + 1) * sizeof *s->terms);
    if (!s->bucket || !s->bucket_vv || !s->limbs || !s->prod || !s->terms) {
        free(s->bucket);
        free(s->bucket_vv);
        free(s->limbs);
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

/* Bits [lo, lo + 20) of the integer m[0..nl) (lo may be negative: zeros below bit 0). */
static uint32_t field20(const mp_limb_t *m, size_t nl, long lo)
{
    if (lo >= (long)(64 * nl) || lo + (long)REF_DX_BITS <= 0)
        return 0;
    if (lo < 0)
        return (uint32_t)((m[0] << (-lo)) & DIGIT_MASK);
    size_t li = (size_t)lo / 64, bi = (size_t)lo % 64;
    uint64_t r = m[li] >> bi;
    if (bi > 64 - REF_DX_BITS && li + 1 < nl)
        r |= m[li + 1] << (64 - bi);
    return (uint32_t)(r & DIGIT_MASK);
}

int ref_dx_vec_set(ref_dx_vec *v, mpfr_t *x, uint64_t n, uint32_t k_cap, lm_err *err)
{
    return ref_dx_vec_set_stride(v, x, n, 1, k_cap, err);
}

int ref_dx_vec_set_stride(ref_dx_vec *v, mpfr_t *src, uint64_t n, uint64_t stride,
                          uint32_t k_cap, lm_err *err)
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
#define x(i) src[(i) * stride]
    long top = 0, low = 0;
    bool any = false;
    for (uint64_t i = 0; i < n; ++i) {
        if (!mpfr_regular_p(x(i)))
            continue;
        long e = (long)mpfr_get_exp(x(i)), lo = low_exp(x(i));
        if (!any || e > top)
            top = e;
        if (!any || lo < low)
            low = lo;
        any = true;
    }
    uint64_t k = 0;
    if (any) {
        k = (uint64_t)(top - low + REF_DX_BITS - 1) / REF_DX_BITS;
        if (k > k_cap)
            k = k_cap;
    }
    if (grow(&v->d, &v->cap, (k ? k : 1) * v->n_pad, &v->exc, &v->exc_cap, n) != 0)
        return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory for a split vector");
    v->k = (uint32_t)k;
    v->top = top;
    memset(v->d, 0, k * v->n_pad * sizeof *v->d);
    const long bottom = top - (long)(REF_DX_BITS * k);
    for (uint64_t i = 0; i < n; ++i) {
        if (mpfr_zero_p(x(i)))
            continue;
        if (!mpfr_regular_p(x(i)) || low_exp(x(i)) < bottom) {
            v->exc[v->n_exc++] = (uint32_t)i; /* NaN, Inf, or bits below the grid */
            continue;
        }
        const mp_limb_t *m = limbs_of(x(i));
        size_t nl = n_limbs_of(x(i));
        /* digit kk holds the bits of exponents [top - 20(kk+1), top - 20 kk): in m those are
         * the bits from lo = 64 nl - e + top - 20(kk+1) */
        long base = (long)(64 * nl) - (long)mpfr_get_exp(x(i)) + top;
        double sg = mpfr_signbit(x(i)) ? -1.0 : 1.0;
        for (uint64_t kk = 0; kk < k; ++kk)
            v->d[kk * v->n_pad + i] =
                sg * (double)field20(m, nl, base - (long)(REF_DX_BITS * (kk + 1)));
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

/* Digits of w[i], i in [i0, i1), on the grid of 2^bottom with J planes (planes < J of these
 * elements are written, zeros included); elements with bits below the grid, NaN and Inf are
 * appended to the row's exceptions. */
static void row_digits_scalar(ref_dx_row *r, const float *w, uint64_t i0, uint64_t i1,
                              long bottom, uint32_t J)
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
        long sh = q + tz - bottom; /* w = (M >> tz) 2^(bottom + sh); digits span 20 J bits */
        if (sh < 0) {
            r->exc[r->n_exc++] = (uint32_t)i;
            continue;
        }
        const u128 V = (u128)(M >> tz) << sh; /* < 2^(20 J) <= 2^80 */
        const double sg = neg ? -1.0 : 1.0;
        for (uint32_t j = 0; j < J; ++j)
            r->p[j * r->n_pad + i] =
                sg * (double)(uint32_t)((V >> (REF_DX_BITS * (J - 1 - j))) & DIGIT_MASK);
    }
}

#ifdef DX_X86
/* The same digits four elements a step, in double: V = |w| 2^-bottom is an integer below
 * 2^(20 J) exactly when w is on the grid (the scaling is exact), and digit j =
 * t - 2^20 floor(t 2^-20) with t = floor(V 2^-20(J-1-j)); every step is exact, since each
 * value has at most 24 significant bits. A step with an element off the grid, NaN or Inf
 * (V not an integer below 2^(20 J)) is done by row_digits_scalar. Returns the elements done. */
__attribute__((target("avx2"))) static uint64_t row_digits_avx2(ref_dx_row *r, const float *w,
                                                                uint64_t n, long bottom,
                                                                uint32_t J)
{
    const __m256d scale = _mm256_set1_pd(ldexp(1.0, (int)-bottom)),
                  lim = _mm256_set1_pd(ldexp(1.0, (int)(REF_DX_BITS * J))),
                  sgn = _mm256_set1_pd(-0.0), base = _mm256_set1_pd(0x1p20),
                  inv_base = _mm256_set1_pd(0x1p-20);
    __m256d down[REF_DX_JMAX];
    for (uint32_t j = 0; j < J; ++j)
        down[j] = _mm256_set1_pd(ldexp(1.0, -(int)(REF_DX_BITS * (J - 1 - j))));
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
            row_digits_scalar(r, w, i, i + 4, bottom, J);
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
    r->n = n;
    r->n_pad = pad16(n);
    r->src = w;
    r->n_exc = 0;
    r->j = 0;
    /* the largest exponent: from the largest finite magnitude; the lowest set bit: per
     * element */
    uint32_t big = 0;
    long low = 0;
    bool any = false;
    for (uint64_t i = 0; i < n; ++i) {
        uint32_t bits;
        memcpy(&bits, &w[i], 4);
        bits &= 0x7fffffffu;
        if (bits == 0 || bits >= 0x7f800000u)
            continue;
        big = bits > big ? bits : big;
        const uint32_t ef = bits >> 23, M = ef ? (bits & 0x7fffffu) | 0x800000u : bits;
        const long lo = (ef ? (long)ef - 150 : -149) + __builtin_ctz(M);
        low = !any || lo < low ? lo : low;
        any = true;
    }
    long top = 0;
    uint64_t J = 0;
    if (any) {
        const uint32_t ef = big >> 23, M = ef ? (big & 0x7fffffu) | 0x800000u : big;
        top = (ef ? (long)ef - 150 : -149) + 32 - __builtin_clz(M);
        J = (uint64_t)(top - low + REF_DX_BITS - 1) / REF_DX_BITS;
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
    const long bottom = top - (long)(REF_DX_BITS * J);
    uint64_t done = 0;
#ifdef DX_X86
    if (J > 0 && kernel_id() >= 1)
        done = row_digits_avx2(r, w, n, bottom, (uint32_t)J);
#endif
    row_digits_scalar(r, w, done, n, bottom, (uint32_t)J);
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

/* Carries the buckets A[0..nb) (A[s] in units of 2^(20(nb-1-s)) of the last) into |T|'s limbs;
 * returns the sign of T (-1, 0, 1) and the limb count in *nl. One pass writes T in two's
 * complement (the digits, then the final carry sign-extended over the remaining limbs); a
 * negative T is then negated in place. */
static int carry_out(ref_dx_scratch *s, const int64_t *A, uint32_t nb, size_t *nl)
{
    int64_t carry = 0;
    memset(s->limbs, 0, s->n_limbs * sizeof *s->limbs);
    for (uint32_t i = nb; i-- > 0;) {
        int64_t v = A[i] + carry;
        int64_t dig = (int64_t)((uint64_t)v & DIGIT_MASK);
        carry = (v - dig) / (1 << REF_DX_BITS); /* exact: floor division */
        put_bits(s->limbs, (uint64_t)dig, (uint64_t)REF_DX_BITS * (nb - 1 - i));
    }
    /* T = carry 2^(20 nb) + digits: the carry's 64 bits at 20 nb, its sign above them */
    const uint64_t off = (uint64_t)REF_DX_BITS * nb;
    put_bits(s->limbs, (uint64_t)carry, off);
    const int sign = carry < 0 ? -1 : 1;
    if (sign < 0) {
        size_t k = off / 64 + 1;
        if (off % 64 != 0) /* the limb holding the carry's top bits: ones above them */
            s->limbs[k++] |= ~(uint64_t)0 << (off % 64);
        for (; k < s->n_limbs; ++k)
            s->limbs[k] = ~(uint64_t)0;
        u128 c = 1; /* |T| = ~T + 1 */
        for (k = 0; k < s->n_limbs; ++k) {
            c += (u128)(uint64_t)~s->limbs[k];
            s->limbs[k] = (uint64_t)c;
            c >>= 64;
        }
    }
    size_t n = s->n_limbs;
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

/* out = T 2^base (T from the buckets A[0 .. nb), nb = 0: T = 0) plus the exact products of the
 * elements i < n in either exception list (an element in both taken once), rounded once. */
static void finish(mpfr_t out, ref_dx_scratch *s, int64_t *A, uint32_t nb, long base,
                   const uint32_t *xe, uint32_t nxe, const uint32_t *ye, uint32_t nye,
                   uint64_t n, exc_prod prod, const void *a, const void *b)
{
    mpz_t z;
    int sign = 0;
    size_t nl = 0;
    if (nb > 0)
        sign = carry_out(s, A, nb, &nl);
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

/* Row w's result from its buckets A[0 .. K+J-1) (J: the planes the kernel ran, >= w->j). */
static void finish_row(mpfr_t out, const ref_dx_vec *x, const ref_dx_row *w, uint32_t J,
                       int64_t *A, ref_dx_scratch *s)
{
    const uint32_t K = x->k;
    const bool grid = K > 0 && J > 0;
    finish(out, s, A, grid ? K + J - 1 : 0,
           grid ? x->top + w->top - (long)(REF_DX_BITS * (K + J)) : 0, x->exc, x->n_exc, w->exc,
           w->n_exc, x->n, prod_vec_row, x, w);
}

void ref_dx_dot_rows(mpfr_ptr *out, const ref_dx_vec *x, const ref_dx_row *const *w, uint32_t R,
                     ref_dx_scratch *s)
{
    const uint32_t nb = s->k_cap + REF_DX_JMAX;
    int64_t *A[REF_DX_ROWS_MAX];
    uint32_t J[REF_DX_ROWS_MAX / REF_DX_ROWS]; /* the planes each kernel group runs */
    for (uint32_t r = 0; r < R; ++r) {
        A[r] = s->bucket + (size_t)r * nb;
        memset(A[r], 0, nb * sizeof *A[r]);
        if (r % REF_DX_ROWS == 0)
            J[r / REF_DX_ROWS] = 0;
        if (w[r]->j > J[r / REF_DX_ROWS])
            J[r / REF_DX_ROWS] = w[r]->j;
    }
    /* a block of the vector's digits serves every group of rows while it is in L1 */
    const dx_kernel kern = pick_kernel();
    for (uint64_t i0 = 0; x->k > 0 && i0 < x->n_pad; i0 += REF_DX_BLOCK) {
        const uint64_t len = x->n_pad - i0 < REF_DX_BLOCK ? x->n_pad - i0 : REF_DX_BLOCK;
        for (uint32_t g = 0; g < R; g += REF_DX_ROWS) {
            const uint32_t G = R - g < REF_DX_ROWS ? R - g : REF_DX_ROWS;
            const double *p[REF_DX_ROWS];
            for (uint32_t r = 0; r < G; ++r)
                p[r] = w[g + r]->p + i0;
            if (J[g / REF_DX_ROWS] > 0)
                kern(A + g, x->d + i0, x->k, p, J[g / REF_DX_ROWS], G, len, x->n_pad,
                     w[g]->n_pad);
        }
    }
    for (uint32_t r = 0; r < R; ++r)
        finish_row(out[r], x, w[r], J[r / REF_DX_ROWS], A[r], s);
}

bool ref_dx_vv_fits(uint64_t n, mpfr_prec_t prec)
{
    return n * ref_dx_k_cap(prec) <= REF_DX_VV_MAX;
}

void ref_dx_dot_vv(mpfr_t out, const ref_dx_vec *x, const ref_dx_vec *y, ref_dx_scratch *s)
{
    const uint32_t K = x->k, L = y->k, nb = K + L > 0 ? K + L - 1 : 0;
    int64_t *A = s->bucket_vv;
    memset(A, 0, (nb + 1) * sizeof *A);
    if (K > 0 && L > 0) {
        const dx_kernel kern = pick_kernel();
        /* y's planes as rows of one plane each, REF_DX_ROWS at a time: plane l feeds the
         * buckets from l on (every accumulator of a kernel takes one product per element) */
        for (uint32_t c = 0; c < L; c += REF_DX_ROWS) {
            const uint32_t G = L - c < REF_DX_ROWS ? L - c : REF_DX_ROWS;
            int64_t *Ac[REF_DX_ROWS];
            const double *pc[REF_DX_ROWS];
            for (uint32_t r = 0; r < G; ++r) {
                Ac[r] = A + c + r;
                pc[r] = y->d + (uint64_t)(c + r) * y->n_pad;
            }
            kern(Ac, x->d, K, pc, 1, G, x->n_pad, x->n_pad, y->n_pad);
        }
    }
    const bool grid = K > 0 && L > 0;
    finish(out, s, A, grid ? nb : 0, grid ? x->top + y->top - (long)(REF_DX_BITS * (K + L)) : 0,
           x->exc, x->n_exc, y->exc, y->n_exc, x->n, prod_vec_vec, x, y);
}

void ref_dx_dot(mpfr_t out, const ref_dx_vec *x, const ref_dx_row *w, ref_dx_scratch *s)
{
    mpfr_ptr o = out;
    ref_dx_dot_rows(&o, x, &w, 1, s);
}

/* --- cost calibration --- */

/* One calibration round: the rows set from their float32 weights, then every vector's dot
 * products with them. */
typedef struct dx_calib {
    ref_dx_row *rows;         /* [REF_DX_ROWS] */
    const float *w;           /* [REF_DX_ROWS][n_in] */
    const ref_dx_vec *v;      /* [T] */
    unsigned n_vec;           /* T */
    uint64_t n_in;
    mpfr_ptr *op;             /* [REF_DX_ROWS] */
    const ref_dx_row *const *wr; /* [REF_DX_ROWS] */
    ref_dx_scratch *s;
    lm_err *err;
} dx_calib;

static bool dx_calib_round(void *p)
{
    dx_calib *c = p;
    for (unsigned g = 0; g < REF_DX_ROWS; ++g)
        if (ref_dx_row_set(&c->rows[g], c->w + g * c->n_in, c->n_in, c->err) != LM_OK)
            return false;
    for (unsigned t = 0; t < c->n_vec; ++t)
        ref_dx_dot_rows(c->op, &c->v[t], c->wr, REF_DX_ROWS, c->s);
    return true;
}

double ref_calibrate_s_per_mac(uint32_t prec, uint64_t n_in)
{
    enum { T = 4 };
    if (n_in == 0 || n_in > 65536)
        n_in = 1024;
    lm_err err = {0};
    ref_dx_scratch s;
    ref_dx_vec v[T];
    ref_dx_row rows[REF_DX_ROWS];
    memset(v, 0, sizeof v);
    memset(rows, 0, sizeof rows);
    mpfr_t *x = malloc((size_t)T * n_in * sizeof *x);
    float *w = malloc(REF_DX_ROWS * n_in * sizeof *w);
    mpfr_t o[REF_DX_ROWS];
    double sec = 0.0;
    if (x == NULL || w == NULL || ref_dx_scratch_init(&s, prec, n_in, &err) != LM_OK) {
        free(x);
        free(w);
        return 0.0;
    }
    uint64_t z = REF_CALIB_SEED;
    for (uint64_t i = 0; i < (uint64_t)T * n_in; ++i) { /* activations of order 1, P bits */
        ref_calib_next(&z);
        mpfr_init2(x[i], prec);
        mpfr_set_ui(x[i], (unsigned long)(z >> 11), MPFR_RNDN);
        mpfr_div_ui(x[i], x[i], 3u + (unsigned)(z % 1000u), MPFR_RNDN);
        mpfr_mul_2si(x[i], x[i], -53, MPFR_RNDN);
    }
    ref_calib_fill_f32(w, REF_DX_ROWS * n_in, 0x1p-30f, &z);
    mpfr_ptr op[REF_DX_ROWS];
    const ref_dx_row *wr[REF_DX_ROWS];
    for (unsigned g = 0; g < REF_DX_ROWS; ++g) {
        mpfr_init2(o[g], prec);
        op[g] = o[g];
        wr[g] = &rows[g];
    }
    int ok = 1;
    for (unsigned t = 0; ok && t < T; ++t)
        ok = ref_dx_vec_set(&v[t], x + (size_t)t * n_in, n_in, s.k_cap, &err) == LM_OK;
    dx_calib c = {.rows = rows, .w = w, .v = v, .n_vec = T, .n_in = n_in, .op = op, .wr = wr,
                  .s = &s, .err = &err};
    if (ok)
        sec = ref_calib_time(dx_calib_round, &c, (double)T * REF_DX_ROWS * (double)n_in);
    for (unsigned g = 0; g < REF_DX_ROWS; ++g) {
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
