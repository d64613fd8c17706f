/* ref_dotx.h — the reference's exact inner product of an MPFR activation vector with a float32
 * weight row, by error-free splitting (Ozaki-style slices on a fixed-point grid):
 *
 *   x_i = sum_k  d_ik 2^(tx - a(k+1))   d_ik integers, |d_ik| < 2^a  (k < K, per vector)
 *   w_i = sum_j  c_ij 2^(tw - b(j+1))   c_ij integers, |c_ij| < 2^b  (j < J <= 4, per row)
 *
 * with tx (tw) the largest exponent of the vector (row) and a (b) its digit width: every
 * element whose significant bits lie inside the K (J) digits is split exactly. The widths are
 * free within a + b <= ref_dx_sum_bits(n) (45 for n <= 2^17): a vector is split once for
 * every row of a matrix, so a matrix whose rows span few bits (quantized weights: 12-15) takes
 * wide activation digits and fewer of them (ref_dx_pick_bits). Each product d_ik c_ij is an
 * integer below 2^(a+b), exact in double; the products of one (k, j) pair are summed in
 * double over blocks of 256 elements (one product per element and accumulator: every partial
 * sum of one block is an integer below 256 * 2^(a+b) <= 2^53, so every addition is exact, in
 * any order, with or without FMA, in any SIMD width), then in int64 across blocks (below
 * n 2^(a+b) <= 2^62). The sums of the K J pairs are carried into one integer T and the result
 * is T 2^(tx + tw - aK - bJ) rounded ONCE to the output's precision (mpfr_set_z_2exp, round to
 * nearest).
 * Elements that do not fit the grid (a vector spread over more than its digit cap, a weight
 * more than 4 digits below its row's largest, NaN, Inf) are left out of the grid and their
 * exact products x_i w_i (precision prec(x_i) + 24) are added with T by mpfr_sum, which is
 * correctly rounded too.
 *
 * Error bound: the result is the exact sum rounded to nearest at the output's precision P:
 *   |result - sum_i x_i w_i| <= 2^-P |sum_i x_i w_i| <= 2^-P sum_i |x_i w_i|
 * (half an ulp; cancellation costs nothing). The result therefore does not depend on the
 * digit widths, on the kernel (AVX-512, AVX2, scalar), on the order of the elements inside a
 * block, or on threads. An exact zero sum gives +0. NaN in, or Inf - Inf, or Inf * 0 gives NaN;
 * Inf gives Inf.
 *
 * Cost: K * J multiply-adds in double per element (K ~ (P + exponent spread of x) / a, J = 1
 * for most real weight rows at a fitting b): ~K*J/8 vector FMAs per element with AVX-512,
 * twice that with AVX2. */
#ifndef REF_DOTX_H
#define REF_DOTX_H

#include "kvd_common.h"

#include <mpfr.h>
#include <stdbool.h>
#include <stdint.h>

#define REF_DX_BITS 20u  /* the narrowest digit, of vectors and of ref_dx_dot_vv */
#define REF_DX_BITS_MAX 32u /* the widest vector digit */
#define REF_DX_JMAX 4u   /* digits per weight at most */
#define REF_DX_BLOCK 256u /* elements per exact double block */
#define REF_DX_ROWS 4u    /* rows a kernel call takes at once */
#define REF_DX_ROWS_MAX 32u /* rows ref_dx_dot_rows takes at once */
#define REF_DX_MAX_N (1u << 20) /* longest vector: int64 bucket sums stay below 2^62 */

/* An activation vector split into digits. */
typedef struct ref_dx_vec {
    uint64_t n, n_pad;   /* elements; n rounded up to 16 (zero digits beyond n) */
    uint32_t k;          /* digits per element (0: no element on the grid) */
    uint32_t bits;       /* digit width a, REF_DX_BITS .. REF_DX_BITS_MAX */
    long top;            /* tx */
    double *d;           /* [k][n_pad] digit k of element i at d[k * n_pad + i] */
    uint64_t cap;        /* doubles allocated in d */
    uint32_t n_exc;      /* elements off the grid, increasing */
    uint32_t *exc;       /* [exc_cap >= n] */
    uint64_t exc_cap;
    mpfr_t *src;         /* element i at src[i * stride] (read for the elements off the grid) */
    uint64_t stride;
} ref_dx_vec;

/* A float32 weight row split into digits. */
typedef struct ref_dx_row {
    uint64_t n, n_pad;
    uint32_t j;          /* digits per weight, 0..REF_DX_JMAX */
    uint32_t bits;       /* digit width b */
    long top;            /* tw */
    double *p;           /* [REF_DX_JMAX][n_pad] */
    uint64_t cap;        /* elements allocated per digit plane */
    uint32_t n_exc;
    uint32_t *exc;       /* [exc_cap >= n] */
    uint64_t exc_cap;
    const float *src;    /* [n] */
} ref_dx_row;

/* Per-thread scratch of ref_dx_dot. */
typedef struct ref_dx_scratch {
    uint64_t n_cap;      /* longest vector */
    uint32_t k_cap;      /* digits per activation at most (from the precision, at REF_DX_BITS) */
    int64_t *bucket;     /* [REF_DX_ROWS_MAX][REF_DX_JMAX][k_cap]: one per (row, digit j, k) */
    int64_t *bucket_vv;  /* [2 k_cap] (ref_dx_dot_vv) */
    mp_limb_t *limbs;    /* T's magnitude */
    size_t n_use;        /* the limbs of T in the current product (at most n_limbs) */
    mp_limb_t *part;     /* [n_limbs] one weight digit's part of T */
    size_t n_limbs;
    mpfr_t t;            /* T exactly */
    mpfr_t *prod;        /* [n_cap] exact products of the elements off the grid */
    mpfr_ptr *terms;     /* [n_cap + 1] */
    mpfr_prec_t prec;
} ref_dx_scratch;

/* Digits per activation at most for precision prec (~ (prec + 128) / 20): vectors whose
 * significant bits span more are split with their smallest elements off the grid. */
uint32_t ref_dx_k_cap(mpfr_prec_t prec);
/* The same at digit width bits: ceil((prec + 128) / bits), at most ref_dx_k_cap(prec). */
uint32_t ref_dx_k_cap_bits(mpfr_prec_t prec, uint32_t bits);
/* The largest a + b for vectors of n elements: 45 (256-element blocks below 2^53), less where
 * n 2^(a+b) would pass 2^62 (the int64 sums across blocks). */
uint32_t ref_dx_sum_bits(uint64_t n);
/* Bits spanned by the significant bits of a float32 row (largest exponent minus lowest set
 * bit; 0 without a finite nonzero element), and of an MPFR vector (elements x[i * stride]). */
uint32_t ref_dx_row_span(const float *w, uint64_t n);
uint64_t ref_dx_vec_span(mpfr_t *x, uint64_t n, uint64_t stride);
/* Where an MPFR vector's significant bits lie: top = the largest exponent of its regular
 * (finite nonzero) elements, low = the exponent of their lowest set bit; any = false (top =
 * low = 0) without a regular element. ref_dx_vec_split_range splits from it, so a vector
 * whose span picked the widths is read once more, not twice. */
typedef struct ref_dx_range {
    long top, low;
    bool any;
} ref_dx_range;
ref_dx_range ref_dx_vec_range(mpfr_t *x, uint64_t n, uint64_t stride);
/* The bits the range spans, top - low (ref_dx_vec_span). */
uint64_t ref_dx_range_span(ref_dx_range r);
#define REF_DX_SPAN_BINS 128u /* row spans of 127 bits and more share the last bin */
/* The vector digit width a for a product of n_vec vectors of n elements (spans vspan[n_vec])
 * with the rows whose spans are counted in row_hist[REF_DX_SPAN_BINS] (the rows then take
 * b = ref_dx_sum_bits(n) - a): the a in REF_DX_BITS .. REF_DX_BITS_MAX with the fewest digit
 * products, sum_t K_t(a) * sum_rows J_row(b) (a row beyond REF_DX_JMAX digits counts
 * 2 REF_DX_JMAX: its small elements would leave the grid), the smallest a on ties. */
uint32_t ref_dx_pick_bits(const uint64_t *row_hist, const uint64_t *vspan, uint64_t n_vec,
                          mpfr_prec_t prec, uint64_t n);
/* The digit widths of such a product: *a = ref_dx_pick_bits(...) for the vectors and
 * *b = ref_dx_sum_bits(n) - *a for the rows. The reference's matrix products, its cost
 * calibration (ref_calibrate_s_per_mac) and bench_ref all take their widths from here. */
void ref_dx_widths(const uint64_t *row_hist, const uint64_t *vspan, uint64_t n_vec,
                   mpfr_prec_t prec, uint64_t n, uint32_t *a, uint32_t *b);

int ref_dx_scratch_init(ref_dx_scratch *s, mpfr_prec_t prec, uint64_t n_cap, lm_err *err);
void ref_dx_scratch_clear(ref_dx_scratch *s);

/* Splits x[n] (every element at most prec bits, prec as given to the scratch) into v with
 * REF_DX_BITS-bit digits, at most k_cap of them; v's storage grows as needed (zero-initialize
 * v before the first call). x is kept by pointer. */
int ref_dx_vec_set(ref_dx_vec *v, mpfr_t *x, uint64_t n, uint32_t k_cap, lm_err *err);
/* The same with digits of bits bits (REF_DX_BITS .. REF_DX_BITS_MAX), at most k_cap of them
 * (k_cap <= ref_dx_k_cap_bits(prec, bits) for the scratch's precision). */
int ref_dx_vec_split(ref_dx_vec *v, mpfr_t *x, uint64_t n, uint64_t stride, uint32_t bits,
                     uint32_t k_cap, lm_err *err);
/* The same with x's range given (r == ref_dx_vec_range(x, n, stride)): x is not scanned for
 * it again. */
int ref_dx_vec_split_range(ref_dx_vec *v, mpfr_t *x, uint64_t n, uint64_t stride,
                           ref_dx_range r, uint32_t bits, uint32_t k_cap, lm_err *err);
void ref_dx_vec_free(ref_dx_vec *v);
/* Splits w[n] into digits of REF_DX_BITS bits (ref_dx_row_split: of bits bits, 1 .. 32). */
int ref_dx_row_set(ref_dx_row *r, const float *w, uint64_t n, lm_err *err);
int ref_dx_row_split(ref_dx_row *r, const float *w, uint64_t n, uint32_t bits, lm_err *err);
void ref_dx_row_free(ref_dx_row *r);

/* out = sum_i x_i w_i rounded once to out's precision (round to nearest); x->n == w->n and
 * x->bits + w->bits <= ref_dx_sum_bits(x->n). */
void ref_dx_dot(mpfr_t out, const ref_dx_vec *x, const ref_dx_row *w, ref_dx_scratch *s);

/* out[r] = x . w[r] for r < R <= REF_DX_ROWS_MAX (each as ref_dx_dot; the rows share the
 * loads of x's digits: REF_DX_ROWS digit planes of the rows a kernel call, every group of
 * planes on a block of x's digits before the next block). */
void ref_dx_dot_rows(mpfr_ptr *out, const ref_dx_vec *x, const ref_dx_row *const *w, uint32_t R,
                     ref_dx_scratch *s);

/* out = sum_{i < x->n} x_i y_i rounded once to out's precision (round to nearest), for two
 * MPFR vectors split with digits of the same width a (ref_dx_vv_bits), with x->n <= y->n and
 * x->n <= s->n_cap (y's elements from x->n on are not part of the sum; their digits meet x's
 * zero padding or nothing). Same bound as ref_dx_dot: the exact sum rounded once,
 * |error| <= 2^-P |sum|. Both grids: K and L digits of a bits, every digit product below
 * 2^(2a); y's planes enter the kernel as rows of one plane, so an accumulator of one block
 * gets one product per element (block sums below 256 2^(2a) <= 2^52 for a <= 22, exact), and
 * the int64 buckets, one per digit position k + l (the same exponent for every pair: equal
 * widths), sum the calls exactly: a bucket gets at most min(K, L) products per element, so
 * |bucket| < n min(K, L) 2^(2a) <= 2^62 when n k_cap(a) <= 2^(62 - 2a) (ref_dx_vv_bits).
 * The digit pairs far below the output's last bit come last, and only when needed (Ziv): with
 * both vectors on their grids, the pairs k + l <= S first, S the least with
 * a (S + 1) >= P + REF_DX_VV_GUARD + log2(n min(K, L)) + 2; the pairs left out sum to less
 * than 2^eb units of the last position, eb = log2(n min(K, L)) + a (K + L - S - 1) + 1, and
 * when every value within that of the partial sum rounds to the same P-bit number, that
 * number is the result (the correctly rounded exact sum); otherwise the remaining pairs
 * follow. The result is the same either way. */
#define REF_DX_VV_BITS_MAX 22u
#define REF_DX_VV_ROWS 4u   /* y's planes a kernel call takes at once */
#define REF_DX_VV_GUARD 32u /* bits beyond the output's precision before the pairs are cut */
#define REF_DX_VV_MAX (1u << 22) /* n k_cap at REF_DX_BITS: the longest vectors served */
void ref_dx_dot_vv(mpfr_t out, const ref_dx_vec *x, const ref_dx_vec *y, ref_dx_scratch *s);
/* The digit width for ref_dx_dot_vv on vectors of n elements at this precision: the widest a
 * <= REF_DX_VV_BITS_MAX with n ref_dx_k_cap_bits(prec, a) <= 2^(62 - 2a); 0 when even
 * REF_DX_BITS is too wide (n ref_dx_k_cap(prec) > REF_DX_VV_MAX). */
uint32_t ref_dx_vv_bits(uint64_t n, mpfr_prec_t prec);
/* ref_dx_dot_vv serves vectors of n elements at this precision (ref_dx_vv_bits != 0). */
bool ref_dx_vv_fits(uint64_t n, mpfr_prec_t prec);

/* Seconds per multiply-add of the split product at prec bits, one thread, from a ~20 ms
 * calibration: 4 activation vectors of n_in elements (order 1, full prec-bit significands)
 * against 16 float32 rows whose spans are the (g + 1/2) / 16 quantiles of row_hist
 * [REF_DX_SPAN_BINS] (rows by span, weighted by their share of the work), at the widths
 * ref_dx_widths picks for row_hist and those vectors, each round splitting the rows again as
 * a matrix product's work item does; 0 when it cannot allocate. */
double ref_dx_calibrate(uint32_t prec, uint64_t n_in, const uint64_t *row_hist);

/* Which kernel ref_dx_dot uses: "avx512", "avx2" or "scalar" (chosen once from the CPU). */
const char *ref_dx_kernel(void);
#ifdef LM_TEST_HOOKS
/* Tests force a kernel (0 scalar, 1 avx2, 2 avx512; -1: the CPU's choice). */
extern int ref_dx_test_force_kernel;
/* ref_dx_dot_vv's results from the cut pairs alone, and those that took the remaining pairs
 * after a cut, counted per thread */
extern _Thread_local unsigned long ref_dx_test_vv_cut, ref_dx_test_vv_rest;
/* the widths a, b the last ref_dx_calibrate ran at, and its 4 vectors' spans */
extern uint32_t ref_dx_test_calib_bits[2];
extern uint64_t ref_dx_test_calib_vspan[4];
#endif

#endif
