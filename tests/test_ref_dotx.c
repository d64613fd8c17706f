/* test_ref_dotx.c — the exact split dot product (ref_dotx.c): every result must equal the exact
 * sum rounded once to nearest (oracle: products and a left-to-right sum at 40000 bits, exact for
 * every input here), so |result - exact| <= 2^-P |exact| <= 2^-P sum |x_i w_i| holds with no
 * tolerance; adversarial inputs (cancellation, 800 binades of range, subnormal weights, zeros,
 * NaN/Inf), every kernel the CPU has, 1, 4 and up to 32 rows at once, 127 and 254 bits, and the MPFR
 * multiply-add dot product (ref_dot) within its own bound (n+1) 2^-P sum |x_i w_i|; and the
 * product of two MPFR vectors (ref_dx_dot_vv) against the same kind of oracle. */
#include "kvd_ref.h"
#include "ref_dotx.h"
#include "test_util.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define NMAX 1100
#define ORACLE_PREC 40000

typedef struct dx_case {
    mpfr_prec_t prec;
    uint64_t n;
    mpfr_t *x;   /* [NMAX] */
    float w[4][NMAX];
} dx_case;

static void case_init(dx_case *c, mpfr_prec_t prec, uint64_t n)
{
    memset(c, 0, sizeof *c);
    c->prec = prec;
    c->n = n;
    c->x = ref_vec_new(NMAX, prec);
}

static void case_free(dx_case *c)
{
    ref_vec_free(c->x, NMAX);
}

/* exact = sum x_i w_i at ORACLE_PREC (every product and partial sum exact here), rounded once
 * to prec into out; sabs = sum |x_i w_i| (rounded up, for the bound). */
static void oracle(mpfr_t out, mpfr_t sabs, mpfr_t *x, const float *w, uint64_t n)
{
    mpfr_t acc, p, ab;
    mpfr_inits2(ORACLE_PREC, acc, p, ab, (mpfr_ptr)0);
    mpfr_set_zero(acc, 1);
    mpfr_set_zero(ab, 1);
    for (uint64_t i = 0; i < n; ++i) {
        mpfr_mul_d(p, x[i], (double)w[i], MPFR_RNDN);
        mpfr_add(acc, acc, p, MPFR_RNDN);
        mpfr_abs(p, p, MPFR_RNDN);
        mpfr_add(ab, ab, p, MPFR_RNDU);
    }
    mpfr_set(out, acc, MPFR_RNDN);
    if (mpfr_zero_p(out))
        mpfr_set_zero(out, 1);
    mpfr_set(sabs, ab, MPFR_RNDU);
    mpfr_clears(acc, p, ab, (mpfr_ptr)0);
}

/* ref_dx_dot_vv with kernel kern (0 scalar, 1 avx2, 2 avx512, where the CPU has it). */
static void vv_kernel(mpfr_t out, const ref_dx_vec *x, const ref_dx_vec *y, ref_dx_scratch *s,
                      int kern)
{
#ifdef LM_TEST_HOOKS
    ref_dx_test_force_kernel = kern;
#else
    (void)kern;
#endif
    ref_dx_dot_vv(out, x, y, s);
#ifdef LM_TEST_HOOKS
    ref_dx_test_force_kernel = -1;
#endif
}

/* Runs rows r < R of c through ref_dx_dot_rows (and row 0 through ref_dx_dot) with kernel kern,
 * the vector split into digits of a bits and the rows of b bits; each must equal the oracle
 * exactly (NaN: both NaN). Returns the number of mismatches. */
static int check_case_ab(dx_case *c, uint32_t R, int kern, uint32_t a, uint32_t b)
{
    lm_err err = {0};
    ref_dx_scratch s;
    ref_dx_vec v;
    ref_dx_row rows[4];
    memset(&v, 0, sizeof v);
    memset(rows, 0, sizeof rows);
    CU_ASSERT_FATAL(ref_dx_scratch_init(&s, c->prec, NMAX, &err) == LM_OK);
    CU_ASSERT_FATAL(ref_dx_vec_split(&v, c->x, c->n, 1, a, ref_dx_k_cap_bits(c->prec, a), &err) ==
                    LM_OK);
    mpfr_t out[4], one, ex, sabs, d;
    mpfr_ptr o[4];
    const ref_dx_row *w[4];
    for (uint32_t r = 0; r < 4; ++r) {
        mpfr_init2(out[r], c->prec);
        o[r] = out[r];
        CU_ASSERT_FATAL(ref_dx_row_split(&rows[r], c->w[r], c->n, b, &err) == LM_OK);
        w[r] = &rows[r];
    }
    mpfr_inits2(c->prec, one, ex, (mpfr_ptr)0);
    mpfr_init2(sabs, 64);
    mpfr_init2(d, 2 * c->prec + 64);
    int bad = 0;
#ifdef LM_TEST_HOOKS
    ref_dx_test_force_kernel = kern;
#else
    (void)kern;
#endif
    ref_dx_dot_rows(o, &v, w, R, &s);
    ref_dx_dot(one, &v, &rows[0], &s);
#ifdef LM_TEST_HOOKS
    ref_dx_test_force_kernel = -1;
#endif
    for (uint32_t r = 0; r < R; ++r) {
        oracle(ex, sabs, c->x, c->w[r], c->n);
        bool same = mpfr_nan_p(ex) ? mpfr_nan_p(out[r])
                                   : (mpfr_equal_p(out[r], ex) && mpfr_signbit(out[r]) ==
                                                                      mpfr_signbit(ex));
        if (!same)
            ++bad;
        /* the stated bound, checked on its own: |result - exact| <= 2^-P sum |x w| */
        if (mpfr_number_p(ex) && mpfr_number_p(out[r])) {
            mpfr_sub(d, out[r], ex, MPFR_RNDN);
            mpfr_abs(d, d, MPFR_RNDU);
            mpfr_mul_2si(sabs, sabs, -(long)c->prec, MPFR_RNDU);
            if (mpfr_cmp(d, sabs) > 0)
                ++bad;
        }
    }
    if (!(mpfr_nan_p(one) && mpfr_nan_p(out[0])) && !mpfr_equal_p(one, out[0]))
        ++bad; /* one row alone == the same row among four */
    for (uint32_t r = 0; r < 4; ++r) {
        mpfr_clear(out[r]);
        ref_dx_row_free(&rows[r]);
    }
    mpfr_clears(one, ex, sabs, d, (mpfr_ptr)0);
    ref_dx_vec_free(&v);
    ref_dx_scratch_clear(&s);
    return bad;
}

static int check_case(dx_case *c, uint32_t R, int kern)
{
    return check_case_ab(c, R, kern, REF_DX_BITS, REF_DX_BITS);
}

/* Digit widths (a, b): the narrowest and widest vector digits, and pairs at the largest sum
 * a + b = 45 that the products of real rows take (ref_dx_pick_bits). */
static const uint32_t widths[][2] = {{20, 20}, {20, 25}, {23, 22}, {30, 15}, {32, 13}};
#define N_WIDTHS (sizeof widths / sizeof *widths)

/* Every kernel the CPU has (avx512 and avx2 only where supported), 1 and 4 rows, every pair
 * of digit widths. */
static int check_all(dx_case *c)
{
    int bad = 0;
    for (size_t wi = 0; wi < N_WIDTHS; ++wi)
        for (int kern = 0; kern <= 2; ++kern) {
            bad += check_case_ab(c, 4, kern, widths[wi][0], widths[wi][1]);
            bad += check_case_ab(c, 1, kern, widths[wi][0], widths[wi][1]);
        }
    return bad;
}

/* x_i: a full prec-bit significand times 2^(spread * u), u uniform in [-1, 1]. */
static void fill_random(dx_case *c, uint64_t *st, int spread)
{
    for (uint64_t i = 0; i < c->n; ++i) {
        mpfr_set_ui(c->x[i], (unsigned long)(tu_rand_u64(st) >> 1), MPFR_RNDN);
        mpfr_div_ui(c->x[i], c->x[i], 3 + (unsigned long)(tu_rand_u64(st) % 1000), MPFR_RNDN);
        mpfr_mul_2si(c->x[i], c->x[i], -63 + (long)(spread * tu_rand_f32(st)), MPFR_RNDN);
        if (tu_rand_u64(st) & 1)
            mpfr_neg(c->x[i], c->x[i], MPFR_RNDN);
        for (int r = 0; r < 4; ++r)
            c->w[r][i] = tu_rand_f32(st) * ldexpf(1.0f, (int)(tu_rand_u64(st) % 9) - 4);
    }
}

static void test_ref_dotx_random(void)
{
    uint64_t st = tu_seed() ^ 0xd07u;
    const uint64_t sizes[] = {1, 3, 16, 17, 255, 256, 257, 576, 1100};
    const mpfr_prec_t precs[] = {127, 254, 53};
    int bad = 0;
    for (size_t p = 0; p < 3; ++p)
        for (size_t k = 0; k < sizeof sizes / sizeof *sizes; ++k) {
            dx_case c;
            case_init(&c, precs[p], sizes[k]);
            fill_random(&c, &st, 12);
            bad += check_all(&c);
            case_free(&c);
        }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Sums of one sign, negative and positive, for every digit count of the vector (spread 0 to
 * 130 binades: K = 7 .. 13) and of the rows (row r spans ~20 r + 10 bits: J = 1 .. 4), so that
 * the carried integer ends at every bit offset within a limb, the last limb included. */
static void test_ref_dotx_one_sign_every_width(void)
{
    uint64_t st = tu_seed() ^ 0x519u;
    int bad = 0;
    for (int spread = 0; spread <= 130; spread += 10)
        for (int neg = 0; neg <= 1; ++neg) {
            dx_case c;
            case_init(&c, 127, 300);
            fill_random(&c, &st, spread);
            for (uint64_t i = 0; i < c.n; ++i) {
                mpfr_setsign(c.x[i], c.x[i], neg, MPFR_RNDN);
                for (int r = 0; r < 4; ++r)
                    c.w[r][i] = ldexpf((float)(1 + tu_rand_u64(&st) % 1024),
                                       -(int)((i % (uint64_t)(r + 1)) * 20));
            }
            bad += check_all(&c);
            case_free(&c);
        }
    CU_ASSERT_EQUAL(bad, 0);
}

/* Up to REF_DX_ROWS_MAX rows at once, groups of rows with different digit counts (row r spans
 * ~20 (r % 4) + 10 bits: J = 1 .. 4 inside one kernel group, and groups whose largest J
 * differ), vectors of several blocks: every result equals the row's ref_dx_dot, bit for bit,
 * with every kernel the CPU has. */
static void test_ref_dotx_many_rows(void)
{
    uint64_t st = tu_seed() ^ 0x3a2u;
    enum { N = 700 };
    lm_err err = {0};
    ref_dx_scratch s;
    ref_dx_vec v;
    memset(&v, 0, sizeof v);
    mpfr_t *x = ref_vec_new(N, 127);
    float *w = malloc((size_t)REF_DX_ROWS_MAX * N * sizeof *w);
    ref_dx_row *rows = calloc(REF_DX_ROWS_MAX, sizeof *rows);
    CU_ASSERT_FATAL(w != NULL && rows != NULL);
    CU_ASSERT_FATAL(ref_dx_scratch_init(&s, 127, N, &err) == LM_OK);
    for (uint64_t i = 0; i < N; ++i) {
        mpfr_set_ui(x[i], (unsigned long)(tu_rand_u64(&st) >> 1), MPFR_RNDN);
        mpfr_div_ui(x[i], x[i], 3 + (unsigned long)(tu_rand_u64(&st) % 1000), MPFR_RNDN);
        mpfr_mul_2si(x[i], x[i], -63 + (long)(tu_rand_u64(&st) % 30), MPFR_RNDN);
        if (tu_rand_u64(&st) & 1)
            mpfr_neg(x[i], x[i], MPFR_RNDN);
    }
    CU_ASSERT_FATAL(ref_dx_vec_set(&v, x, N, s.k_cap, &err) == LM_OK);
    mpfr_t out[REF_DX_ROWS_MAX], one;
    mpfr_ptr o[REF_DX_ROWS_MAX];
    const ref_dx_row *wr[REF_DX_ROWS_MAX];
    mpfr_init2(one, 127);
    for (uint32_t r = 0; r < REF_DX_ROWS_MAX; ++r) {
        /* row 5 alone keeps J = 1 in its group of four: groups differ in their largest J */
        const uint32_t span = r / 4 == 1 ? 0 : r % 4;
        for (uint64_t i = 0; i < N; ++i)
            w[r * N + i] = ldexpf((float)((int)(tu_rand_u64(&st) % 2001) - 1000),
                                  -(int)((i % (span + 1)) * 20));
        CU_ASSERT_FATAL(ref_dx_row_set(&rows[r], w + r * N, N, &err) == LM_OK);
        wr[r] = &rows[r];
        mpfr_init2(out[r], 127);
        o[r] = out[r];
    }
    int bad = 0;
    const uint32_t counts[] = {REF_DX_ROWS_MAX, 13, 6};
    for (int kern = 0; kern <= 2; ++kern)
        for (size_t c = 0; c < sizeof counts / sizeof *counts; ++c) {
#ifdef LM_TEST_HOOKS
            ref_dx_test_force_kernel = kern;
#endif
            ref_dx_dot_rows(o, &v, wr, counts[c], &s);
            for (uint32_t r = 0; r < counts[c]; ++r) {
                ref_dx_dot(one, &v, &rows[r], &s);
                bad += !mpfr_equal_p(one, out[r]) || mpfr_signbit(one) != mpfr_signbit(out[r]);
            }
#ifdef LM_TEST_HOOKS
            ref_dx_test_force_kernel = -1;
#endif
        }
    CU_ASSERT_EQUAL(bad, 0);
    for (uint32_t r = 0; r < REF_DX_ROWS_MAX; ++r) {
        mpfr_clear(out[r]);
        ref_dx_row_free(&rows[r]);
    }
    mpfr_clear(one);
    ref_dx_vec_free(&v);
    ref_dx_scratch_clear(&s);
    ref_vec_free(x, N);
    free(w);
    free(rows);
}

/* The largest products the widths allow, all of one sign: every vector digit 2^a - 1 and every
 * weight digit 2^b - 1 with a + b = 45, so each block of 256 sums products just below 2^45 to
 * just below 2^53 (exact only if every partial sum is; a width sum of 46 would round), over
 * several blocks; rows of 1 and 2 weight digits (the second digit's chain shifted by b). */
static void test_ref_dotx_widest_digits(void)
{
    int bad = 0;
    const uint64_t ns[] = {256, 700};
    for (size_t wi = 1; wi < N_WIDTHS; ++wi)
        for (size_t ni = 0; ni < 2; ++ni)
            for (int neg = 0; neg <= 1; ++neg) {
                const uint32_t a = widths[wi][0], b = widths[wi][1];
                dx_case c;
                case_init(&c, 127, ns[ni]);
                /* x = 1 - 2^-127, 127 ones: every digit 2^a - 1 but the last */
                for (uint64_t i = 0; i < c.n; ++i) {
                    mpfr_set_ui(c.x[i], 1, MPFR_RNDN);
                    mpfr_nextbelow(c.x[i]);
                    if (neg)
                        mpfr_neg(c.x[i], c.x[i], MPFR_RNDN);
                    /* rows 0, 1: b ones (one digit); rows 2, 3: 24 ones spread over 2 digits */
                    const float ones_b = ldexpf(ldexpf(1.0f, (int)b) - 1.0f, -(int)b);
                    c.w[0][i] = ones_b;
                    c.w[1][i] = (i % 2) ? ones_b : -ones_b;
                    c.w[2][i] = 1.0f - 0x1p-24f;
                    c.w[3][i] = (i % 3) ? 1.0f - 0x1p-24f : ldexpf(1.0f, -(int)b - 4);
                }
                for (int kern = 0; kern <= 2; ++kern) {
                    bad += check_case_ab(&c, 4, kern, a, b);
                    bad += check_case_ab(&c, 1, kern, a, b);
                }
                case_free(&c);
            }
    /* vector-vector products at the widest digits, 22 bits: x = y = 1 - 2^-127, every digit
     * product just below 2^44 and every block sum just below 2^52, one sign, two blocks */
    {
        enum { NV = 512 };
        lm_err err = {0};
        mpfr_t *x = ref_vec_new(NV, 127), ex, out;
        mpfr_init2(ex, ORACLE_PREC);
        mpfr_init2(out, 127);
        ref_dx_scratch s;
        ref_dx_vec vx;
        memset(&vx, 0, sizeof vx);
        CU_ASSERT_FATAL(ref_dx_scratch_init(&s, 127, NV, &err) == LM_OK);
        for (uint64_t i = 0; i < NV; ++i) {
            mpfr_set_si(x[i], -1, MPFR_RNDN);
            mpfr_nextabove(x[i]);
        }
        mpfr_sqr(ex, x[0], MPFR_RNDN); /* exact at ORACLE_PREC */
        mpfr_mul_ui(ex, ex, NV, MPFR_RNDN);
        mpfr_prec_round(ex, 127, MPFR_RNDN);
        CU_ASSERT_FATAL(ref_dx_vec_split(&vx, x, NV, 1, REF_DX_VV_BITS_MAX,
                                         ref_dx_k_cap_bits(127, REF_DX_VV_BITS_MAX),
                                         &err) == LM_OK);
        for (int kern = 0; kern <= 2; ++kern) {
            vv_kernel(out, &vx, &vx, &s, kern);
            bad += !mpfr_equal_p(out, ex);
        }
        mpfr_clears(ex, out, (mpfr_ptr)0);
        ref_dx_vec_free(&vx);
        ref_dx_scratch_clear(&s);
        ref_vec_free(x, NV);
    }
    CU_ASSERT_EQUAL(bad, 0);
    /* the widths' limit: 45 bits up to 2^17 elements, then one bit less per doubling */
    CU_ASSERT_EQUAL(ref_dx_sum_bits(1), 45);
    CU_ASSERT_EQUAL(ref_dx_sum_bits(1u << 17), 45);
    CU_ASSERT_EQUAL(ref_dx_sum_bits((1u << 17) + 1), 44);
    CU_ASSERT_EQUAL(ref_dx_sum_bits(REF_DX_MAX_N), 42);
}

/* Bits spanned by w[0..n)'s finite nonzero elements, written plainly: top = ilogb + 1 of the
 * largest, low = the exponent of each element's last set bit (its significand doubled until
 * it is an integer), the least of them. */
static uint32_t row_span_plain(const float *w, uint64_t n)
{
    int top = 0, low = 0;
    bool any = false;
    for (uint64_t i = 0; i < n; ++i) {
        const double v = fabs((double)w[i]);
        if (v == 0.0 || !isfinite(v))
            continue;
        const int e = ilogb(v);
        double m = ldexp(v, -e);
        int k = 0;
        while (m != floor(m)) {
            m *= 2.0;
            ++k;
        }
        top = !any || e + 1 > top ? e + 1 : top;
        low = !any || e - k < low ? e - k : low;
        any = true;
    }
    return any ? (uint32_t)(top - low) : 0;
}

/* ref_dx_row_span against the plain count on rows of zeros, subnormals, normals of every
 * binade, Inf and NaN, and integers of few bits (quantized rows). */
static void test_ref_dotx_row_span_plain(void)
{
    uint64_t st = tu_seed() ^ 0x59a7u;
    float w[40];
    int bad = 0;
    for (int r = 0; r < 4000; ++r) {
        const uint64_t n = 1 + tu_rand_u64(&st) % 40;
        for (uint64_t i = 0; i < n; ++i) {
            const uint64_t z = tu_rand_u64(&st);
            switch (z % 6) {
            case 0: w[i] = 0.0f; break;
            case 1: w[i] = ldexpf((float)(z >> 40 & 0xff), -149 + (int)(z >> 32 & 7)); break;
            case 2: w[i] = tu_rand_f32(&st) * ldexpf(1.0f, (int)(z >> 16 & 0xff) - 140); break;
            case 3: w[i] = (float)(int)((z >> 20 & 15) - 8) * ldexpf(1.0f, r % 30 - 20); break;
            case 4: w[i] = (z >> 9 & 1) ? INFINITY : NAN; break;
            default: w[i] = -(float)(z >> 41); break;
            }
        }
        bad += ref_dx_row_span(w, n) != row_span_plain(w, n);
    }
    CU_ASSERT_EQUAL(bad, 0);
}

/* The vector width with the fewest digit products: rows of 13 bits and vectors of 140 take
 * a = 28 (b = 17: J = 1, K = 5; a = 20..27 needs K >= 6); rows of 21 bits take a = 24 (b =
 * 21: J = 1, K = 6, where a = 20 gives J = 1 but K = 7, and a = 25 gives J = 2); rows of 45
 * bits against a = 20's b = 25 (J = 2) or a = 32's b = 13 (J = 4): the spans decide; no
 * rows or no vectors: REF_DX_BITS; the span and its limits. */
static void test_ref_dotx_pick_bits(void)
{
    uint64_t hist[REF_DX_SPAN_BINS];
    uint64_t vs[3] = {140, 140, 0};
    memset(hist, 0, sizeof hist);
    hist[13] = 100;
    CU_ASSERT_EQUAL(ref_dx_pick_bits(hist, vs, 3, 127, 640), 28);
    memset(hist, 0, sizeof hist);
    hist[21] = 100;
    CU_ASSERT_EQUAL(ref_dx_pick_bits(hist, vs, 3, 127, 640), 24);
    /* 1000 more rows of one bit (J = 1 at every b): a = 28 (K 5, the 21-bit rows at J 2:
     * 10 * 1200) now beats a = 24 (K 6: 12 * 1100) */
    hist[1] = 1000;
    CU_ASSERT_EQUAL(ref_dx_pick_bits(hist, vs, 3, 127, 640), 28);
    memset(hist, 0, sizeof hist);
    hist[45] = 10;
    /* a = 20: K 7, J 2 (14); a = 22: b 23, K 7, J 2 (14); a = 23: b 22, K 7, J 3; ... a = 28:
     * b 17, K 5, J 3 (15); a = 20 first at 14 */
    CU_ASSERT_EQUAL(ref_dx_pick_bits(hist, vs, 3, 127, 640), 20);
    memset(hist, 0, sizeof hist);
    CU_ASSERT_EQUAL(ref_dx_pick_bits(hist, vs, 3, 127, 640), REF_DX_BITS);
    hist[13] = 5;
    CU_ASSERT_EQUAL(ref_dx_pick_bits(hist, vs, 0, 127, 640), REF_DX_BITS);
    /* a product of 2^20 elements has a + b = 42: a = 28 gives b = 14 (J = 1) */
    CU_ASSERT_EQUAL(ref_dx_pick_bits(hist, vs, 3, 127, REF_DX_MAX_N), 28);
    const float w[5] = {0.0f, 0x1p-20f, -3.0f, NAN, 0x1.8p-30f};
    CU_ASSERT_EQUAL(ref_dx_row_span(w, 5), 2 + 31); /* 3 = 0b11: top 2; low bit 2^-31 */
    CU_ASSERT_EQUAL(ref_dx_row_span(w, 1), 0);
    mpfr_t *x = ref_vec_new(3, 127);
    mpfr_set_ui(x[0], 0, MPFR_RNDN);
    mpfr_set_ui_2exp(x[1], 5, 10, MPFR_RNDN); /* 5 2^10: top 13, low 10 */
    mpfr_set_ui_2exp(x[2], 1, -7, MPFR_RNDN);  /* low -7 */
    CU_ASSERT_EQUAL(ref_dx_vec_span(x, 3, 1), 20);
    CU_ASSERT_EQUAL(ref_dx_vec_span(x, 2, 1), 3);
    CU_ASSERT_EQUAL(ref_dx_vec_span(x, 1, 1), 0);
    ref_vec_free(x, 3);
}

/* A vector split from its range (ref_dx_vec_split_range, the range the widths were picked
 * from) has the same digits and elements off the grid as one split by scanning it again
 * (ref_dx_vec_split), and the split reads the range it is given: a range with its top 5 bits
 * higher gives a grid whose top is 5 bits higher. ref_dx_widths gives ref_dx_pick_bits' a and
 * the rest of ref_dx_sum_bits for b. */
static void test_ref_dotx_split_from_range(void)
{
    uint64_t st = tu_seed() ^ 0x5a17u;
    dx_case c;
    case_init(&c, 127, 700);
    fill_random(&c, &st, 60);
    mpfr_set_nan(c.x[7]);
    mpfr_set_zero(c.x[8], 1);
    lm_err err = {0};
    ref_dx_vec a, b, d;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    memset(&d, 0, sizeof d);
    const ref_dx_range r = ref_dx_vec_range(c.x, c.n, 1);
    CU_ASSERT(r.any);
    CU_ASSERT_EQUAL(ref_dx_range_span(r), ref_dx_vec_span(c.x, c.n, 1));
    for (uint32_t bits = REF_DX_BITS; bits <= REF_DX_BITS_MAX; bits += 6) {
        const uint32_t kc = ref_dx_k_cap_bits(127, bits);
        CU_ASSERT_FATAL(ref_dx_vec_split(&a, c.x, c.n, 1, bits, kc, &err) == LM_OK);
        CU_ASSERT_FATAL(ref_dx_vec_split_range(&b, c.x, c.n, 1, r, bits, kc, &err) == LM_OK);
        CU_ASSERT(a.k == b.k && a.top == b.top && a.n_exc == b.n_exc && a.k > 0);
        CU_ASSERT(memcmp(a.d, b.d, (size_t)a.k * a.n_pad * sizeof *a.d) == 0);
        CU_ASSERT(memcmp(a.exc, b.exc, a.n_exc * sizeof *a.exc) == 0);
        const ref_dx_range up = {r.top + 5, r.low, true};
        CU_ASSERT_FATAL(ref_dx_vec_split_range(&d, c.x, c.n, 1, up, bits, kc, &err) == LM_OK);
        CU_ASSERT_EQUAL(d.top, r.top + 5);
    }
    const ref_dx_range none = ref_dx_vec_range(c.x + 8, 1, 1); /* one zero */
    CU_ASSERT(!none.any && ref_dx_range_span(none) == 0);
    uint64_t hist[REF_DX_SPAN_BINS] = {0}, vs[2] = {140, 150};
    hist[13] = 50;
    hist[30] = 7;
    uint32_t wa, wb;
    ref_dx_widths(hist, vs, 2, 127, REF_DX_MAX_N, &wa, &wb);
    CU_ASSERT_EQUAL(wa, ref_dx_pick_bits(hist, vs, 2, 127, REF_DX_MAX_N));
    CU_ASSERT_EQUAL(wa + wb, ref_dx_sum_bits(REF_DX_MAX_N));
    ref_dx_vec_free(&a);
    ref_dx_vec_free(&b);
    ref_dx_vec_free(&d);
    case_free(&c);
}

/* sum = tiny: pairs x, -x against the same weight cancel exactly; one small term survives. */
static void test_ref_dotx_cancellation(void)
{
    uint64_t st = tu_seed() ^ 0xca7u;
    dx_case c;
    case_init(&c, 127, 801);
    fill_random(&c, &st, 20);
    for (uint64_t i = 0; i + 1 < 800; i += 2) {
        mpfr_neg(c.x[i + 1], c.x[i], MPFR_RNDN);
        for (int r = 0; r < 4; ++r)
            c.w[r][i + 1] = c.w[r][i];
    }
    mpfr_set_ui_2exp(c.x[800], 3, -90, MPFR_RNDN);
    for (int r = 0; r < 4; ++r)
        c.w[r][800] = 1.0f + 0x1p-23f;
    int bad = check_all(&c);
    /* and sum exactly 0 (row 1: the survivor's weight zero): +0 */
    for (int r = 0; r < 4; ++r)
        c.w[r][800] = 0.0f;
    bad += check_all(&c);
    case_free(&c);
    CU_ASSERT_EQUAL(bad, 0);
}

/* Activations over 800 binades (most elements off the digit grid), weights with subnormals,
 * tiny and huge exponents in one row (off the 4-digit grid), zeros and negative zeros. */
static void test_ref_dotx_dynamic_range(void)
{
    uint64_t st = tu_seed() ^ 0xd1eu;
    dx_case c;
    case_init(&c, 127, 300);
    fill_random(&c, &st, 400);
    for (uint64_t i = 0; i < c.n; ++i) {
        if (i % 7 == 0)
            mpfr_set_zero(c.x[i], (i & 8) ? -1 : 1);
        if (i % 5 == 0)
            c.w[1][i] = ldexpf((float)(1 + i), -149); /* subnormal (or tiny normal) */
        if (i % 11 == 0)
            c.w[2][i] = (i & 2) ? -0.0f : 0x1p100f;
        c.w[3][i] = (i % 3 == 0) ? 0x1.fffffep-120f : ((i % 3 == 1) ? 0x1.000002p+20f : 0.0f);
    }
    int bad = check_all(&c);
    /* a vector and rows of zeros only: +0 */
    for (uint64_t i = 0; i < c.n; ++i)
        mpfr_set_zero(c.x[i], -1);
    bad += check_all(&c);
    case_free(&c);
    CU_ASSERT_EQUAL(bad, 0);
}

/* NaN and Inf follow IEEE: Inf * finite = Inf, Inf - Inf = NaN, Inf * 0 = NaN, NaN anywhere. */
static void test_ref_dotx_special(void)
{
    uint64_t st = tu_seed() ^ 0x5e1u;
    dx_case c;
    case_init(&c, 127, 40);
    fill_random(&c, &st, 8);
    c.w[0][3] = INFINITY;                      /* row 0: +-Inf */
    c.w[1][3] = INFINITY;
    c.w[1][4] = -INFINITY;
    if (mpfr_sgn(c.x[3]) != mpfr_sgn(c.x[4]))  /* row 1: Inf - Inf */
        mpfr_neg(c.x[4], c.x[4], MPFR_RNDN);
    c.w[2][5] = NAN;                           /* row 2: NaN */
    mpfr_set_zero(c.x[6], 1);                  /* row 3: Inf * 0 */
    c.w[3][6] = INFINITY;
    int bad = check_all(&c);
    mpfr_set_inf(c.x[7], 1); /* an infinite activation */
    bad += check_all(&c);
    case_free(&c);
    CU_ASSERT_EQUAL(bad, 0);
}

/* The MPFR multiply-add product (ref_dot, the --validate-against mpfr path) stays within its
 * documented bound (n+1) 2^-P sum |x w| of the exact value, and the split product is at least
 * as close to it. */
static void test_ref_dotx_vs_mpfr_dot(void)
{
    uint64_t st = tu_seed() ^ 0x3dfu;
    dx_case c;
    case_init(&c, 127, 576);
    fill_random(&c, &st, 16);
    lm_err err = {0};
    ref_scratch s;
    CU_ASSERT_FATAL(ref_scratch_init(&s, 127, 576, &err) == LM_OK);
    ref_row_set_flt(&s, c.w[0], 576);
    mpfr_t a, ex, sabs, d;
    mpfr_inits2(127, a, ex, (mpfr_ptr)0);
    mpfr_init2(sabs, 64);
    mpfr_init2(d, 400);
    ref_dot(a, c.x, s.row, 576, &s);
    oracle(ex, sabs, c.x, c.w[0], 576);
    mpfr_sub(d, a, ex, MPFR_RNDN);
    mpfr_abs(d, d, MPFR_RNDU);
    mpfr_mul_ui(sabs, sabs, 577, MPFR_RNDU);
    mpfr_mul_2si(sabs, sabs, -127, MPFR_RNDU);
    CU_ASSERT(mpfr_cmp(d, sabs) <= 0);
    CU_ASSERT_EQUAL(check_case(&c, 1, -1), 0);
    mpfr_clears(a, ex, sabs, d, (mpfr_ptr)0);
    ref_scratch_clear(&s);
    case_free(&c);
}

/* The vector row split (AVX2) and the scalar one give the same digit planes and exceptions,
 * on rows mixing every binade, subnormals, zeros of both signs, NaN, Inf and elements too far
 * below their row's largest to fit the grid; n not a multiple of 4. */
static void test_ref_dotx_row_split_kernels_agree(void)
{
    if (strcmp(ref_dx_kernel(), "scalar") == 0) {
        printf("\n    SKIP: no vector kernel on this CPU\n");
        return;
    }
    uint64_t seed = tu_seed() ^ 0x5eedu;
    float w[NMAX];
    ref_dx_row a, b;
    memset(&a, 0, sizeof a);
    memset(&b, 0, sizeof b);
    lm_err err = {0};
    for (int round = 0; round < 200; ++round) {
        const uint64_t n = 1 + tu_rand_u64(&seed) % 1000;
        const int spread = 1 + (int)(tu_rand_u64(&seed) % 120); /* binades in the row */
        for (uint64_t i = 0; i < n; ++i) {
            const uint64_t k = tu_rand_u64(&seed) % 64;
            if (k == 0)
                w[i] = round % 2 ? 0.0f : -0.0f;
            else if (k == 1 && round % 4 == 0)
                w[i] = round % 8 ? NAN : -INFINITY;
            else if (k == 2)
                w[i] = 0x1p-140f * tu_rand_f32(&seed); /* subnormal */
            else
                w[i] = ldexpf(tu_rand_f32(&seed),
                              -(int)(tu_rand_u64(&seed) % (uint64_t)spread));
        }
        const uint32_t bits = 13 + (uint32_t)(round % 20); /* 13 .. 32 */
        ref_dx_test_force_kernel = 0;
        CU_ASSERT_FATAL(ref_dx_row_split(&a, w, n, bits, &err) == LM_OK);
        ref_dx_test_force_kernel = -1;
        CU_ASSERT_FATAL(ref_dx_row_split(&b, w, n, bits, &err) == LM_OK);
        CU_ASSERT_EQUAL(a.j, b.j);
        CU_ASSERT_EQUAL(a.top, b.top);
        CU_ASSERT_EQUAL(a.n_exc, b.n_exc);
        CU_ASSERT(memcmp(a.exc, b.exc, a.n_exc * sizeof *a.exc) == 0);
        /* planes compared as values: a zero digit may carry either sign */
        bool same = true;
        for (uint64_t i = 0; i < REF_DX_JMAX * a.n_pad; ++i)
            same = same && a.p[i] == b.p[i];
        CU_ASSERT(same);
    }
    ref_dx_row_free(&a);
    ref_dx_row_free(&b);
}

/* ref_dx_dot_vv: two MPFR vectors (y read with a stride, y longer than x), against the exact
 * sum of x_i y_i (i < n) at ORACLE_PREC rounded once: equal, for every kernel, with spreads
 * from 0 to 400 binades (beyond the grid: elements off it), cancellation, zeros, NaN and Inf. */
static int check_vv(mpfr_prec_t prec, uint64_t n, uint64_t ny, int spread, int special,
                    uint64_t *st)
{
    enum { STRIDE = 3 };
    lm_err err = {0};
    mpfr_t *x = ref_vec_new(n, prec), *y = ref_vec_new(ny * STRIDE, prec);
    for (uint64_t i = 0; i < n + ny; ++i) {
        mpfr_ptr v = i < n ? x[i] : y[(i - n) * STRIDE];
        mpfr_set_ui(v, (unsigned long)(tu_rand_u64(st) >> 1), MPFR_RNDN);
        mpfr_div_ui(v, v, 3 + (unsigned long)(tu_rand_u64(st) % 1000), MPFR_RNDN);
        mpfr_mul_2si(v, v, -63 + (long)(spread * tu_rand_f32(st)), MPFR_RNDN);
        if (tu_rand_u64(st) & 1)
            mpfr_neg(v, v, MPFR_RNDN);
        if (tu_rand_u64(st) % 9 == 0)
            mpfr_set_zero(v, 1);
    }
    if (special == 1 && n >= 3) { /* cancellation: x0 y0 = -(x1 y1), x2 y2 tiny */
        mpfr_set(x[1], x[0], MPFR_RNDN);
        mpfr_neg(y[STRIDE], y[0], MPFR_RNDN);
        mpfr_mul_2si(x[2], x[0], -300, MPFR_RNDN);
    }
    if (special == 2 && n >= 2) { /* NaN in x, or Inf in y */
        if (tu_rand_u64(st) & 1)
            mpfr_set_nan(x[n / 2]);
        else
            mpfr_set_inf(y[(n / 2) * STRIDE], 1);
    }
    mpfr_t acc, p, ex, out;
    mpfr_inits2(ORACLE_PREC, acc, p, (mpfr_ptr)0);
    mpfr_inits2(prec, ex, out, (mpfr_ptr)0);
    mpfr_set_zero(acc, 1);
    for (uint64_t i = 0; i < n; ++i) {
        mpfr_mul(p, x[i], y[i * STRIDE], MPFR_RNDN);
        mpfr_add(acc, acc, p, MPFR_RNDN);
    }
    mpfr_set(ex, acc, MPFR_RNDN);
    if (mpfr_zero_p(ex))
        mpfr_set_zero(ex, 1);
    ref_dx_scratch s;
    ref_dx_vec vx, vy;
    memset(&vx, 0, sizeof vx);
    memset(&vy, 0, sizeof vy);
    CU_ASSERT_FATAL(ref_dx_scratch_init(&s, prec, n, &err) == LM_OK);
    CU_ASSERT_FATAL(ref_dx_vv_bits(ny, prec) == REF_DX_VV_BITS_MAX);
    int bad = 0;
    for (uint32_t a = REF_DX_BITS; a <= REF_DX_VV_BITS_MAX; ++a) {
        const uint32_t kc = ref_dx_k_cap_bits(prec, a);
        CU_ASSERT_FATAL(ref_dx_vec_split(&vx, x, n, 1, a, kc, &err) == LM_OK);
        CU_ASSERT_FATAL(ref_dx_vec_split(&vy, y, ny, STRIDE, a, kc, &err) == LM_OK);
        for (int kern = 0; kern <= 2; ++kern) {
            vv_kernel(out, &vx, &vy, &s, kern);
            bool same = mpfr_nan_p(ex) ? mpfr_nan_p(out)
                                       : mpfr_equal_p(out, ex) &&
                                             mpfr_signbit(out) == mpfr_signbit(ex);
            bad += !same;
        }
    }
    mpfr_clears(acc, p, ex, out, (mpfr_ptr)0);
    ref_dx_vec_free(&vx);
    ref_dx_vec_free(&vy);
    ref_dx_scratch_clear(&s);
    ref_vec_free(x, n);
    ref_vec_free(y, ny * STRIDE);
    return bad;
}

static void test_ref_dotx_vv(void)
{
    uint64_t st = 0x5eed0000000000a1u;
    const uint64_t ns[] = {1, 3, 17, 64, 256, 700};
    const int spreads[] = {0, 30, 120, 400};
    int bad = 0;
    for (int pi = 0; pi < 2; ++pi)
        for (size_t a = 0; a < sizeof ns / sizeof ns[0]; ++a)
            for (size_t b = 0; b < sizeof spreads / sizeof spreads[0]; ++b)
                for (int special = 0; special < 3; ++special)
                    bad += check_vv(pi ? 254 : 127, ns[a], ns[a] + (special ? 5 : 0),
                                    spreads[b], special, &st);
    CU_ASSERT_EQUAL(bad, 0);
    /* a vector's storage reused for a longer one with fewer digits: the exception list grows
     * with n even when the digit planes fit (every element NaN: all n are exceptions) */
    lm_err err = {0};
    mpfr_t *z = ref_vec_new(300, 127);
    ref_dx_vec v;
    memset(&v, 0, sizeof v);
    for (int i = 0; i < 16; ++i)
        mpfr_set_si_2exp(z[i], 1 + i, -12 * i, MPFR_RNDN); /* a wide grid: many planes */
    CU_ASSERT_FATAL(ref_dx_vec_set(&v, z, 16, ref_dx_k_cap(127), &err) == LM_OK);
    for (int i = 0; i < 300; ++i)
        mpfr_set_nan(z[i]);
    CU_ASSERT_FATAL(ref_dx_vec_set(&v, z, 300, ref_dx_k_cap(127), &err) == LM_OK);
    CU_ASSERT_EQUAL(v.n_exc, 300);
    CU_ASSERT(v.exc_cap >= 300);
    ref_dx_vec_free(&v);
    ref_vec_free(z, 300);
    /* the length limit: n k_cap <= REF_DX_VV_MAX at 20-bit digits; 22-bit digits while
     * n k_cap(22) <= 2^18, 21-bit ones while n k_cap(21) <= 2^20 */
    CU_ASSERT(ref_dx_vv_fits(REF_DX_VV_MAX / ref_dx_k_cap(127), 127));
    CU_ASSERT(!ref_dx_vv_fits(REF_DX_VV_MAX / ref_dx_k_cap(127) + 1, 127));
    CU_ASSERT_EQUAL(ref_dx_vv_bits(REF_DX_VV_MAX / ref_dx_k_cap(127), 127), REF_DX_BITS);
    const uint64_t n22 = (1u << 18) / ref_dx_k_cap_bits(127, 22);
    CU_ASSERT_EQUAL(ref_dx_vv_bits(n22, 127), 22);
    CU_ASSERT_EQUAL(ref_dx_vv_bits(n22 + 1, 127), 21);
    CU_ASSERT_EQUAL(ref_dx_vv_bits((1u << 20) / ref_dx_k_cap_bits(127, 21) + 1, 127), 20);
}

/* ref_dx_dot_vv's cut (the pairs far below the last bit only when needed), on sums that sit
 * on a rounding boundary up to pairs that the cut leaves out: x0 y0 = 1 + 3 2^-64 + 2^-127, a
 * midpoint between two 127-bit numbers, plus x1 y1 = +-2^-250 from the lowest digits
 * (k + l = 10 > S = 7 at 22-bit digits): the pairs kept sum to the midpoint exactly, the
 * result must go up for + and down for - (ties to even would give one of them wrong); and
 * sums 2^-140 off the boundary, where the pairs kept decide. Each must equal the exact sum
 * rounded once, with every kernel; the counters show which path each took. */
static void test_ref_dotx_vv_cut_boundary(void)
{
    enum { N = 3 };
    lm_err err = {0};
    mpfr_t *x = ref_vec_new(N, 127), *y = ref_vec_new(N, 127), ex, p, out;
    mpfr_inits2(ORACLE_PREC, ex, p, (mpfr_ptr)0);
    mpfr_init2(out, 127);
    ref_dx_scratch s;
    ref_dx_vec vx, vy;
    memset(&vx, 0, sizeof vx);
    memset(&vy, 0, sizeof vy);
    CU_ASSERT_FATAL(ref_dx_scratch_init(&s, 127, N, &err) == LM_OK);
    const uint32_t a = REF_DX_VV_BITS_MAX, kc = ref_dx_k_cap_bits(127, a);
    int bad = 0;
    for (int off = 0; off <= 1; ++off)
        for (int sg = -1; sg <= 1; sg += 2) {
            mpfr_set_ui(x[0], 1, MPFR_RNDN);
            mpfr_set_ui(y[0], 1, MPFR_RNDN);
            mpfr_add_d(x[0], x[0], 0x1p-64, MPFR_RNDN);
            mpfr_add_d(y[0], y[0], 0x1p-63, MPFR_RNDN);
            mpfr_set_si_2exp(x[1], sg, -125, MPFR_RNDN);
            mpfr_set_ui_2exp(y[1], 1, -125, MPFR_RNDN);
            /* x2 y2 = 2^-140 (k + l = 6, kept) moves the sum off the midpoint by far more than
             * the pairs left out can (below 2^-168 here) */
            mpfr_set_ui_2exp(x[2], off, -70, MPFR_RNDN);
            mpfr_set_ui_2exp(y[2], 1, -70, MPFR_RNDN);
            mpfr_set_prec(ex, ORACLE_PREC);
            mpfr_set_zero(ex, 1);
            for (int i = 0; i < N; ++i) {
                mpfr_mul(p, x[i], y[i], MPFR_RNDN);
                mpfr_add(ex, ex, p, MPFR_RNDN); /* exact at ORACLE_PREC */
            }
            mpfr_prec_round(ex, 127, MPFR_RNDN);
            CU_ASSERT_FATAL(ref_dx_vec_split(&vx, x, N, 1, a, kc, &err) == LM_OK);
            CU_ASSERT_FATAL(ref_dx_vec_split(&vy, y, N, 1, a, kc, &err) == LM_OK);
            CU_ASSERT_FATAL(vx.n_exc == 0 && vy.n_exc == 0 && vx.k + vy.k - 2 > 7);
            for (int kern = 0; kern <= 2; ++kern) {
                const unsigned long cut0 = ref_dx_test_vv_cut, rest0 = ref_dx_test_vv_rest;
                vv_kernel(out, &vx, &vy, &s, kern);
                bad += !mpfr_equal_p(out, ex);
                /* on the midpoint the remaining pairs were needed; 2^-140 off it they were not */
                bad += off ? ref_dx_test_vv_cut != cut0 + 1 : ref_dx_test_vv_rest != rest0 + 1;
            }
        }
    CU_ASSERT_EQUAL(bad, 0);
    /* random vectors of 256 elements over 30 binades: the cut decides every one of the 180
     * calls (3 kernels, 3 widths each), since a random sum lies within the left-out pairs'
     * bound (32 bits below its last bit) of a rounding boundary with probability about 2^-31
     * per call */
    uint64_t st = tu_seed() ^ 0xc07u;
    const unsigned long cut0 = ref_dx_test_vv_cut;
    bad = 0;
    for (int r = 0; r < 20; ++r)
        bad += check_vv(127, 256, 256, 30, 0, &st);
    CU_ASSERT_EQUAL(bad, 0);
    CU_ASSERT_EQUAL(ref_dx_test_vv_cut - cut0, 20 * 3 * (REF_DX_VV_BITS_MAX - REF_DX_BITS + 1));
    mpfr_clears(ex, p, out, (mpfr_ptr)0);
    ref_dx_vec_free(&vx);
    ref_dx_vec_free(&vy);
    ref_dx_scratch_clear(&s);
    ref_vec_free(x, N);
    ref_vec_free(y, N);
}

void test_ref_dotx_register(void)
{
    CU_pSuite s = CU_add_suite("ref_dotx", NULL, NULL);
    CU_add_test(s, "test_ref_dotx_random", test_ref_dotx_random);
    CU_add_test(s, "test_ref_dotx_one_sign_every_width", test_ref_dotx_one_sign_every_width);
    CU_add_test(s, "test_ref_dotx_many_rows", test_ref_dotx_many_rows);
    CU_add_test(s, "test_ref_dotx_widest_digits", test_ref_dotx_widest_digits);
    CU_add_test(s, "test_ref_dotx_split_from_range", test_ref_dotx_split_from_range);
    CU_add_test(s, "test_ref_dotx_row_span_plain", test_ref_dotx_row_span_plain);
    CU_add_test(s, "test_ref_dotx_pick_bits", test_ref_dotx_pick_bits);
    CU_add_test(s, "test_ref_dotx_cancellation", test_ref_dotx_cancellation);
    CU_add_test(s, "test_ref_dotx_dynamic_range", test_ref_dotx_dynamic_range);
    CU_add_test(s, "test_ref_dotx_special", test_ref_dotx_special);
    CU_add_test(s, "test_ref_dotx_vs_mpfr_dot", test_ref_dotx_vs_mpfr_dot);
    CU_add_test(s, "test_ref_dotx_row_split_kernels_agree", test_ref_dotx_row_split_kernels_agree);
    CU_add_test(s, "test_ref_dotx_vv", test_ref_dotx_vv);
    CU_add_test(s, "test_ref_dotx_vv_cut_boundary", test_ref_dotx_vv_cut_boundary);
}
