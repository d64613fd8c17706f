/* ref_exp.c — exp and tanh correctly rounded by a 192-bit fixed-point evaluation with a proven
 * error bound and MPFR as the fallback (method and bounds in ref_exp.h). */
#include "ref_exp.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128; /* GCC and Clang on 64-bit targets */

#define FX_F 190 /* fraction bits of a fixed-point value: N 2^-190, N < 2^192 */
#define N_TERMS 7 /* s^n / n! for n <= 7: the rest is < 2^-207 for s < 2^-24 */

typedef struct fx {
    uint64_t l[3]; /* little-endian limbs */
} fx;

static fx T1[256], T2[256], T3[256], C[N_TERMS + 1];
static uint64_t LN2[4]; /* ln 2 rounded to 2^-256 */
static pthread_once_t tables_once = PTHREAD_ONCE_INIT;

/* v rounded to nearest at 2^-scale into n limbs (v >= 0, v 2^scale < 2^(64 n)). */
static void limbs_of(uint64_t *out, unsigned n, mpfr_srcptr v, unsigned scale)
{
    mpfr_t t;
    mpz_t z;
    mpfr_init2(t, mpfr_get_prec(v));
    mpz_init(z);
    mpfr_mul_2ui(t, v, scale, MPFR_RNDN); /* exact */
    mpfr_get_z(z, t, MPFR_RNDN);
    memset(out, 0, n * sizeof *out);
    mpz_export(out, NULL, -1, sizeof *out, 0, 0, z);
    mpz_clear(z);
    mpfr_clear(t);
}

/* The tables from 300-bit MPFR values: each entry within 0.51 u of the exact number. */
static void build_tables(void)
{
    mpfr_t v;
    mpfr_init2(v, 300);
    for (unsigned j = 0; j < 256; ++j) {
        mpfr_set_ui_2exp(v, j, -8, MPFR_RNDN);
        mpfr_exp(v, v, MPFR_RNDN);
        limbs_of(T1[j].l, 3, v, FX_F);
        mpfr_set_ui_2exp(v, j, -16, MPFR_RNDN);
        mpfr_exp(v, v, MPFR_RNDN);
        limbs_of(T2[j].l, 3, v, FX_F);
        mpfr_set_ui_2exp(v, j, -24, MPFR_RNDN);
        mpfr_exp(v, v, MPFR_RNDN);
        limbs_of(T3[j].l, 3, v, FX_F);
    }
    mpfr_set_ui(v, 1, MPFR_RNDN);
    for (unsigned n = 0; n <= N_TERMS; ++n) {
        if (n > 0)
            mpfr_div_ui(v, v, n, MPFR_RNDN);
        limbs_of(C[n].l, 3, v, FX_F);
    }
    mpfr_const_log2(v, MPFR_RNDN);
    limbs_of(LN2, 4, v, 256);
    mpfr_clear(v);
    mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
}

/* Adds the 128-bit product a b to a column: its low half to lo, its high half to hi (the
 * next column's share). */
static inline void col_add(u128 *lo, u128 *hi, uint64_t a, uint64_t b)
{
    const u128 t = (u128)a * b;
    *lo += (uint64_t)t;
    *hi += t >> 64;
}

/* floor(a b 2^-190): exact product, truncated (error < u). a b < 4. Written out column by
 * column (GCC keeps the rolled loops' partial products in memory). */
static fx fx_mul(const fx *a, const fx *b)
{
    const uint64_t a0 = a->l[0], a1 = a->l[1], a2 = a->l[2];
    const uint64_t b0 = b->l[0], b1 = b->l[1], b2 = b->l[2];
    /* columns 0 and 1 lie below bit 190: only their carries matter */
    u128 lo = ((u128)a0 * b0) >> 64, hi = 0;
    col_add(&lo, &hi, a0, b1);
    col_add(&lo, &hi, a1, b0);
    lo = (lo >> 64) + hi;
    hi = 0;
    col_add(&lo, &hi, a0, b2);
    col_add(&lo, &hi, a1, b1);
    col_add(&lo, &hi, a2, b0);
    const uint64_t p2 = (uint64_t)lo;
    lo = (lo >> 64) + hi;
    hi = 0;
    col_add(&lo, &hi, a1, b2);
    col_add(&lo, &hi, a2, b1);
    const uint64_t p3 = (uint64_t)lo;
    lo = (lo >> 64) + hi + (u128)a2 * b2;
    const uint64_t p4 = (uint64_t)lo, p5 = (uint64_t)(lo >> 64);
    fx r; /* bits 190 .. 381 of the product: limbs 2.. shifted right by 62 */
    r.l[0] = (p2 >> 62) | (p3 << 2);
    r.l[1] = (p3 >> 62) | (p4 << 2);
    r.l[2] = (p4 >> 62) | (p5 << 2);
    return r;
}

static fx fx_add(fx a, const fx *b)
{
    u128 c = 0;
    for (int k = 0; k < 3; ++k) {
        c += (u128)a.l[k] + b->l[k];
        a.l[k] = (uint64_t)c;
        c >>= 64;
    }
    return a;
}

/* Bits [lo, lo + 64) of the integer m[0..nl) (lo may be negative: zeros below bit 0). */
static uint64_t bits64(const mp_limb_t *m, size_t nl, long lo)
{
    if (lo >= (long)(64 * nl) || lo <= -64)
        return 0;
    if (lo < 0)
        return (uint64_t)m[0] << (-lo);
    const size_t li = (size_t)lo / 64, bi = (size_t)lo % 64;
    uint64_t r = m[li] >> bi;
    if (bi != 0 && li + 1 < nl)
        r |= (uint64_t)m[li + 1] << (64 - bi);
    return r;
}

/* 5-limb two's complement arithmetic (320 bits, values at 2^-256). */
static void w_sub(uint64_t *a, const uint64_t *b)
{
    uint64_t borrow = 0;
    for (int k = 0; k < 5; ++k) {
        const uint64_t bk = b[k] + borrow;
        const uint64_t nb = (bk < borrow) || (a[k] < bk);
        a[k] -= bk;
        borrow = nb;
    }
}

static void w_add4(uint64_t *a, const uint64_t *b4)
{
    u128 c = 0;
    for (int k = 0; k < 5; ++k) {
        c += (u128)a[k] + (k < 4 ? b4[k] : 0);
        a[k] = (uint64_t)c;
        c >>= 64;
    }
}

static void w_neg(uint64_t *a)
{
    u128 c = 1;
    for (int k = 0; k < 5; ++k) {
        c += (u128)(uint64_t)~a[k];
        a[k] = (uint64_t)c;
        c >>= 64;
    }
}

/* E with |E 2^-190 - exp(x) 2^-k| <= 12.2 u and *k, for regular x with |x| < 512. */
static fx exp_fixed(mpfr_srcptr x, long *k_out)
{
    pthread_once(&tables_once, build_tables);
    /* X = x 2^256 (truncated toward zero; |x| < 2^9 fits 5 limbs with the sign) */
    const mp_limb_t *m = (const mp_limb_t *)mpfr_custom_get_significand(x);
    const size_t nl = (size_t)((mpfr_get_prec(x) + 63) / 64);
    const long sh = (long)mpfr_get_exp(x) - (long)(64 * nl) + 256; /* |x| 2^256 = m 2^sh */
    uint64_t r[5];
    for (int i = 0; i < 5; ++i)
        r[i] = bits64(m, nl, 64 * i - sh);
    if (mpfr_signbit(x))
        w_neg(r);
    /* k = floor(x / ln 2) from double (corrected below), r = X - k LN2 */
    long k = (long)floor(mpfr_get_d(x, MPFR_RNDN) * 1.4426950408889634);
    uint64_t kl[5] = {0};
    const uint64_t ak = (uint64_t)(k < 0 ? -k : k);
    u128 c = 0;
    for (int i = 0; i < 4; ++i) {
        c += (u128)LN2[i] * ak;
        kl[i] = (uint64_t)c;
        c >>= 64;
    }
    kl[4] = (uint64_t)c;
    if (k < 0)
        w_neg(kl);
    w_sub(r, kl);
    while (r[4] >> 63) { /* r < 0 */
        w_add4(r, LN2);
        --k;
    }
    while (r[4] != 0) { /* r >= 1 */
        const uint64_t l5[5] = {LN2[0], LN2[1], LN2[2], LN2[3], 0};
        w_sub(r, l5);
        ++k;
    }
    /* R = r at 2^-190 (truncated), 0 <= R < 2^190 */
    fx R;
    for (int i = 0; i < 3; ++i)
        R.l[i] = (r[i + 1] >> 2) | (r[i + 2] << 62);
    const unsigned j1 = (unsigned)(R.l[2] >> 54), j2 = (unsigned)(R.l[2] >> 46) & 255u,
                   j3 = (unsigned)(R.l[2] >> 38) & 255u;
    fx s = R;
    s.l[2] &= ((uint64_t)1 << 38) - 1; /* s < 2^-24 */
    fx p = C[N_TERMS];
    for (int n = N_TERMS - 1; n >= 0; --n) {
        p = fx_mul(&p, &s);
        p = fx_add(p, &C[n]);
    }
    const fx t12 = fx_mul(&T1[j1], &T2[j2]), t = fx_mul(&t12, &T3[j3]);
    *k_out = k;
    return fx_mul(&t, &p);
}

/* The fixed-point path applies: x regular and |x| < 2^lim_exp. */
static bool in_range(mpfr_srcptr x, long lim_exp)
{
    return mpfr_regular_p(x) && mpfr_get_exp(x) <= lim_exp;
}

/* a = E 2^(k - 190) exactly (a: at least 192 bits). */
static void set_fixed(mpfr_ptr a, const fx *e, long k)
{
    mpz_t z;
    int n = 3;
    while (n > 0 && e->l[n - 1] == 0)
        --n;
    mpz_roinit_n(z, (const mp_limb_t *)e->l, n);
    mpfr_set_z_2exp(a, z, (mpfr_exp_t)(k - FX_F), MPFR_RNDN);
}

bool ref_exp_approx(mpfr_ptr a, mpfr_srcptr x)
{
    if (!in_range(x, 9)) /* |x| < 2^9 */
        return false;
    long k;
    const fx e = exp_fixed(x, &k);
    set_fixed(a, &e, k);
    return true;
}

/* MPFR's documented test for a correctly rounded result to nearest from an approximation with
 * error <= 2^(EXP(a) - err). */
static bool can_round(mpfr_srcptr a, long err, mpfr_prec_t prec)
{
    return err > 0 && mpfr_can_round(a, (mpfr_exp_t)err, MPFR_RNDN, MPFR_RNDZ, prec + 1);
}

void ref_exp(mpfr_ptr rop, mpfr_srcptr x)
{
    const mpfr_prec_t prec = mpfr_get_prec(rop);
    if (prec <= REF_EXP_MAX_PREC) {
        mpfr_t a;
        mp_limb_t al[3];
        mpfr_custom_init(al, 192);
        mpfr_custom_init_set(a, MPFR_ZERO_KIND, 0, 192, al);
        if (ref_exp_approx(a, x) && can_round(a, 186, prec)) {
            mpfr_set(rop, a, MPFR_RNDN);
            return;
        }
    }
    mpfr_exp(rop, x, MPFR_RNDN);
}

bool ref_tanh_approx(mpfr_ptr q, mpfr_srcptr x)
{
    if (!in_range(x, 8) || mpfr_get_prec(x) > 192) /* |x| < 2^8: 2|x| < 2^9 */
        return false;
    mpfr_t y, num, den;
    mp_limb_t yl[3], nlimbs[4], dl[4];
    mpfr_custom_init_set(y, MPFR_ZERO_KIND, 0, 192, yl);
    mpfr_custom_init_set(num, MPFR_ZERO_KIND, 0, 200, nlimbs);
    mpfr_custom_init_set(den, MPFR_ZERO_KIND, 0, 200, dl);
    mpfr_mul_2ui(y, x, 1, MPFR_RNDN); /* exact: 2x has x's significand (prec(x) <= 192) */
    mpfr_abs(y, y, MPFR_RNDN);
    long k;
    const fx e = exp_fixed(y, &k); /* k >= 0: y > 0 */
    set_fixed(num, &e, k);
    /* a = E 2^(k-190), a multiple of 2^(k-190) below 2^(k+2): a - 1 and a + 1 are multiples of
     * it below 2^(k+3), at most 193 significant bits: exact at 200 */
    mpfr_add_ui(den, num, 1, MPFR_RNDN);
    mpfr_sub_ui(num, num, 1, MPFR_RNDN);
    mpfr_div(q, num, den, MPFR_RNDN);
    if (mpfr_signbit(x))
        mpfr_neg(q, q, MPFR_RNDN);
    return true;
}

void ref_tanh(mpfr_ptr rop, mpfr_srcptr x)
{
    const mpfr_prec_t prec = mpfr_get_prec(rop);
    if (prec <= REF_EXP_MAX_PREC) {
        mpfr_t q;
        mp_limb_t ql[4];
        mpfr_custom_init_set(q, MPFR_ZERO_KIND, 0, 200, ql);
        if (ref_tanh_approx(q, x) && !mpfr_zero_p(q) &&
            can_round(q, (long)mpfr_get_exp(q) + 185, prec)) {
            mpfr_set(rop, q, MPFR_RNDN);
            return;
        }
    }
    mpfr_tanh(rop, x, MPFR_RNDN);
}
