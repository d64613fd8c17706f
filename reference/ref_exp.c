/* ref_exp.c — exp and tanh correctly rounded by a 192-bit fixed-point evaluation with a proven
 * error bound and MPFR as the fallback (method and bounds in ref_exp.h). */
#include "ref_exp.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

__extension__ typedef unsigned __int128 u128; /* GCC and Clang on 64-bit targets */

/* Small limb helpers inlined into their callers: out of line, their fx results pass through
 * memory and cost store-forwarding stalls. */
#define FX_INLINE __attribute__((always_inline)) static inline

#define FX_F 190 /* fraction bits of a fixed-point value: N 2^-190, N < 2^192 */
#define N_TERMS 7 /* s^n / n! for n <= 7: the rest is < 2^-207 for s < 2^-24 */

typedef struct fx {
    uint64_t l[3]; /* little-endian limbs */
} fx;

#define N_WIDE 3 /* terms N_TERMS .. N_WIDE of the Horner scheme in two limbs at 2^-128 */
static fx T1[256], T2[256], T3[256], C[N_WIDE]; /* C[n] = 1/n! at 2^-190 (0, 1, 2: exact) */
static u128 D[N_TERMS + 1];                      /* D[n] = 1/n! rounded at 2^-128, n >= N_WIDE */
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
        if (n < N_WIDE) {
            limbs_of(C[n].l, 3, v, FX_F);
        } else {
            uint64_t d[2];
            limbs_of(d, 2, v, 128);
            D[n] = ((u128)d[1] << 64) | d[0];
        }
    }
    mpfr_const_log2(v, MPFR_RNDN);
    limbs_of(LN2, 4, v, 256);
    mpfr_clear(v);
    mpfr_free_cache2(MPFR_FREE_LOCAL_CACHE);
}

/* Adds the 128-bit product a b to a column: its low half to lo, its high half to hi (the
 * next column's share). */
FX_INLINE void col_add(u128 *lo, u128 *hi, uint64_t a, uint64_t b)
{
    const u128 t = (u128)a * b;
    *lo += (uint64_t)t;
    *hi += t >> 64;
}

/* floor(a b 2^-190): exact product, truncated (error < u). a b < 4. Written out column by
 * column (GCC keeps the rolled loops' partial products in memory). */
FX_INLINE fx fx_mul(const fx *a, const fx *b)
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

FX_INLINE fx fx_add(fx a, const fx *b)
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
FX_INLINE uint64_t bits64(const mp_limb_t *m, size_t nl, long lo)
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

/* a -= b over n limbs (two's complement: a borrow out of the top limb wraps). */
FX_INLINE void w_sub_n(uint64_t *a, const uint64_t *b, int n)
{
    uint64_t borrow = 0;
    for (int k = 0; k < n; ++k) {
        const uint64_t bk = b[k] + borrow;
        const uint64_t nb = (bk < borrow) || (a[k] < bk);
        a[k] -= bk;
        borrow = nb;
    }
}

/* 5-limb two's complement arithmetic (320 bits, values at 2^-256). */
FX_INLINE void w_add4(uint64_t *a, const uint64_t *b4)
{
    u128 c = 0;
    for (int k = 0; k < 5; ++k) {
        c += (u128)a[k] + (k < 4 ? b4[k] : 0);
        a[k] = (uint64_t)c;
        c >>= 64;
    }
}

FX_INLINE void w_neg(uint64_t *a)
{
    u128 c = 1;
    for (int k = 0; k < 5; ++k) {
        c += (u128)(uint64_t)~a[k];
        a[k] = (uint64_t)c;
        c >>= 64;
    }
}

/* floor(a b 2^-128), exact (four 64-bit products). */
FX_INLINE u128 mul_hi128(u128 a, u128 b)
{
    const uint64_t a0 = (uint64_t)a, a1 = (uint64_t)(a >> 64), b0 = (uint64_t)b,
                   b1 = (uint64_t)(b >> 64);
    const u128 p00 = (u128)a0 * b0, p01 = (u128)a0 * b1, p10 = (u128)a1 * b0,
               p11 = (u128)a1 * b1;
    const u128 mid = (p00 >> 64) + (uint64_t)p01 + (uint64_t)p10; /* < 2^66 */
    return p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
}


/* E with |E 2^-190 - exp(v) 2^-k| <= 14.6 u and *k (0 <= r < 1 in the reduction, so
 * 2^k (1 - 2^-249) <= exp(v) < e 2^k), for v = (neg ? -1 : 1) 0.m 2^ex with 0 < |v| < 512: m[nl]
 * the significand of an MPFR number (most significant bit first in m[nl - 1]). */
static fx exp_fixed(const mp_limb_t *m, size_t nl, long ex, bool neg, long *k_out)
{
    pthread_once(&tables_once, build_tables);
    /* X = |v| 2^256 (truncated; |v| < 2^9 fits 5 limbs with the sign) */
    const long sh = ex - (long)(64 * nl) + 256; /* |v| 2^256 = m 2^sh */
    uint64_t r[5];
    for (int i = 0; i < 5; ++i)
        r[i] = bits64(m, nl, 64 * i - sh);
    /* k = floor(v / ln 2) from a double of |v| (corrected below), r = X - k LN2 */
    const double av = (double)r[4] + (double)(r[3] >> 11) * 0x1p-53;
    long k = (long)floor((neg ? -av : av) * 1.4426950408889634);
    if (neg)
        w_neg(r);
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
    w_sub_n(r, kl, 5);
    while (r[4] >> 63) { /* r < 0 */
        w_add4(r, LN2);
        --k;
    }
    while (r[4] != 0) { /* r >= 1 */
        const uint64_t l5[5] = {LN2[0], LN2[1], LN2[2], LN2[3], 0};
        w_sub_n(r, l5, 5);
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
    /* Horner: h_n = 1/n! + s h_(n+1). An error in h_n reaches exp(s) times s^n < 2^-24n, so
     * h_7 .. h_3 are kept at 2^-128 (g: two limbs, s truncated to s2 at 2^-152) and only
     * h_2 .. h_0 at 2^-190 (error analysis in ref_exp.h) */
    const u128 s2 = ((u128)((s.l[1] >> 38) | (s.l[2] << 26)) << 64) | ((s.l[0] >> 38) | (s.l[1] << 26));
    u128 g = D[N_TERMS];
    for (int n = N_TERMS - 1; n >= N_WIDE; --n)
        g = D[n] + (mul_hi128(g, s2) >> 24);
    fx p = {{(uint64_t)g << 62, (uint64_t)(g >> 2), (uint64_t)(g >> 66)}}; /* g 2^62 */
    for (int n = N_WIDE - 1; n >= 0; --n) {
        p = fx_mul(&p, &s);
        p = fx_add(p, &C[n]);
    }
    const fx t12 = fx_mul(&T1[j1], &T2[j2]), t = fx_mul(&t12, &T3[j3]);
    *k_out = k;
    return fx_mul(&t, &p);
}

static fx exp_fixed_of(mpfr_srcptr x, long *k_out)
{
    return exp_fixed((const mp_limb_t *)mpfr_custom_get_significand(x),
                     (size_t)((mpfr_get_prec(x) + 63) / 64), (long)mpfr_get_exp(x),
                     mpfr_signbit(x) != 0, k_out);
}

/* The fixed-point path applies: x regular and |x| < 2^lim_exp. */
static bool in_range(mpfr_srcptr x, long lim_exp)
{
    return mpfr_regular_p(x) && mpfr_get_exp(x) <= lim_exp;
}

/* a = N 2^scale exactly (N three limbs; a: at least 192 bits). */
static void set_fixed(mpfr_ptr a, const uint64_t *n, long scale)
{
    mpz_t z;
    int len = 3;
    while (len > 0 && n[len - 1] == 0)
        --len;
    mpz_roinit_n(z, (const mp_limb_t *)n, len);
    mpfr_set_z_2exp(a, z, (mpfr_exp_t)scale, MPFR_RNDN);
}

bool ref_exp_approx(mpfr_ptr a, mpfr_srcptr x)
{
    if (!in_range(x, 9)) /* |x| < 2^9 */
        return false;
    long k;
    const fx e = exp_fixed_of(x, &k);
    set_fixed(a, e.l, k - FX_F);
    return true;
}

/* (n mod 2^rb) > b, for 0 < rb <= 192. */
static bool low_gt(const uint64_t *n, unsigned rb, uint64_t b)
{
    for (unsigned i = 2; i >= 1; --i) {
        if (64 * i >= rb)
            continue;
        const unsigned top = rb - 64 * i;
        if ((top >= 64 ? n[i] : n[i] & (((uint64_t)1 << top) - 1)) != 0)
            return true;
    }
    return (rb >= 64 ? n[0] : n[0] & (((uint64_t)1 << rb) - 1)) > b;
}

/* X rounded to nearest at P = prec <= 192 bits into sig[(P + 63) / 64] and *e_out (MPFR's
 * layout: 0.sig 2^e), from N (three limbs) with |N 2^scale - X| < b 2^scale, 0 < b < 2^6;
 * false (sig untouched) where that does not
 * decide the rounding. With N's leading bit at L and the round bit at rb = L - P, the
 * truncation T of N at bit rb + 1, and t = N mod 2^rb: if b < t < 2^rb - b, every number
 * within b of N lies strictly between T + 2^rb k and T + 2^rb (k + 1) for the bit k at rb,
 * strictly on one side of the midpoint T + 2^rb and inside N's binade, so all of them round to
 * T + 2^(rb + 1) k: the decision needs no exact ties (X is never one: tanh and exp of a
 * nonzero rational are irrational). */
static bool round_sig(mp_limb_t *sig, long *e_out, const uint64_t *n, uint64_t b, long scale,
                      mpfr_prec_t prec)
{
    int top = 2;
    while (top >= 0 && n[top] == 0)
        --top;
    if (top < 0)
        return false;
    const long L = 64 * top + 63 - __builtin_clzll(n[top]);
    if (L < prec + 8) /* fewer than 8 bits below the round bit: leave it to MPFR */
        return false;
    const unsigned rb = (unsigned)(L - prec);
    const uint64_t nn[3] = {~n[0], ~n[1], ~n[2]}; /* 2^rb - 1 - t = ~N mod 2^rb */
    if (!low_gt(n, rb, b) || !low_gt(nn, rb, b - 1))
        return false;
    /* the significand at rop's layout: nl limbs, the leading bit at the top of sig[nl - 1] */
    const unsigned nl = (unsigned)((prec + 63) / 64), pad = 64 * nl - (unsigned)prec;
    const long d = L + 1 - 64 * (long)nl; /* sig = N >> d */
    for (unsigned i = 0; i < nl; ++i)
        sig[i] = bits64((const mp_limb_t *)n, 3, d + 64 * (long)i);
    sig[0] &= ~(((uint64_t)1 << pad) - 1);
    long e = L + 1 + scale; /* X in [2^(e-1), 2^e) before rounding */
    if ((n[rb / 64] >> (rb % 64)) & 1) { /* round up */
        u128 c = (u128)1 << pad;
        for (unsigned i = 0; i < nl; ++i) {
            c += sig[i];
            sig[i] = (uint64_t)c;
            c >>= 64;
        }
        if (c != 0) { /* 2^e */
            sig[nl - 1] = (uint64_t)1 << 63;
            ++e;
        }
    }
    *e_out = e;
    return true;
}

/* rop = (neg ? -1 : 1) 0.sig 2^e (sig at rop's precision: a copy). */
static void set_sig(mpfr_ptr rop, mp_limb_t *sig, long e, bool neg)
{
    mpfr_t t;
    mpfr_custom_init_set(t, (neg ? -1 : 1) * MPFR_REGULAR_KIND, (mpfr_exp_t)e, mpfr_get_prec(rop),
                         sig);
    mpfr_set(rop, t, MPFR_RNDN);
}

static bool round_fixed(mpfr_ptr rop, const uint64_t *n, uint64_t b, long scale, bool neg)
{
    mp_limb_t sig[3];
    long e;
    if (!round_sig(sig, &e, n, b, scale, mpfr_get_prec(rop)))
        return false;
    set_sig(rop, sig, e, neg);
    return true;
}

void ref_exp(mpfr_ptr rop, mpfr_srcptr x)
{
    if (mpfr_get_prec(rop) <= REF_EXP_MAX_PREC && in_range(x, 9)) {
        long k;
        const fx e = exp_fixed_of(x, &k);
        /* |E 2^(k-190) - exp(x)| <= 14.6 2^(k-190) */
        if (round_fixed(rop, e.l, 15, k - FX_F, false))
            return;
    }
    mpfr_exp(rop, x, MPFR_RNDN);
}

/* Q with |Q 2^-192 - tanh|y|| <= 60.6 2^-192 (proof in ref_exp.h) and *k, for y = 0.m 2^ex,
 * 0 < |y| < 64: a = exp(2|y|) = E 2^(k-190), then Q = 2^192 - 2^(193-k) V with V ~ 1/M,
 * M = (a + 1) 2^-k. */
static void tanh_fixed(const mp_limb_t *m, size_t nl, long ex, uint64_t *q, long *k_out)
{
    long k;
    const fx e = exp_fixed(m, nl, ex + 1, false, &k); /* 2|y| < 128: 0 <= k <= 184 */
    *k_out = k;
    /* Mi = E + 2^(190-k) = M 2^190, 1 - 2^-185 < M < 4 */
    uint64_t mi[3] = {e.l[0], e.l[1], e.l[2]};
    {
        const unsigned b = (unsigned)(190 - k);
        u128 c = (u128)mi[b / 64] + ((uint64_t)1 << (b % 64));
        mi[b / 64] = (uint64_t)c;
        for (unsigned i = b / 64 + 1; i < 3; ++i) {
            c = (u128)mi[i] + (uint64_t)(c >> 64);
            mi[i] = (uint64_t)c;
        }
    }
    /* v0 2^-64 <= 1/M: 1 - 1.19 2^-49 <= M v0 2^-64 < 1 */
    const double md = (double)mi[2] * 0x1p-62;
    const double w = (1.0 / md) * (1.0 - 0x1p-49);
    const uint64_t v0 = (uint64_t)(w * 0x1p64);
    /* eps 2^254 = 2^254 - Mi v0 (exact), 0 < eps <= 1.19 2^-49 */
    uint64_t ep[4];
    {
        u128 c = 0;
        uint64_t p[4];
        for (int i = 0; i < 3; ++i) {
            c += (u128)mi[i] * v0;
            p[i] = (uint64_t)c;
            c >>= 64;
        }
        p[3] = (uint64_t)c;
        const uint64_t two254[4] = {0, 0, 0, (uint64_t)1 << 62};
        memcpy(ep, two254, sizeof ep);
        w_sub_n(ep, p, 4); /* ep >= p */
    }
    /* S = eps + eps^2 + eps^3 at 2^-240, truncated: eps from ep, eps^2 from eps's leading
     * bits at 2^-176 (e2), eps^3 from eps at 2^-112 times eps^2 at 2^-160; S is low by less
     * than 2^-206 */
    const fx es = {{(ep[0] >> 14) | (ep[1] << 50), (ep[1] >> 14) | (ep[2] << 50),
                    (ep[2] >> 14) | (ep[3] << 50)}};
    const uint64_t e64 = (ep[2] >> 14) | (ep[3] << 50); /* eps 2^112 < 2^64 */
    const u128 e2 = ((u128)e64 << 64) | ((ep[1] >> 14) | (ep[2] << 50)); /* eps 2^176 */
    fx sq; /* e2^2 2^-112 < 2^143 */
    {
        const uint64_t a0 = (uint64_t)e2, a1 = (uint64_t)(e2 >> 64);
        const u128 p00 = (u128)a0 * a0, p01 = (u128)a0 * a1, p11 = (u128)a1 * a1;
        /* e2^2 = p11 2^128 + 2 p01 2^64 + p00, as four limbs q[] */
        const u128 m1 = (p00 >> 64) + (u128)(uint64_t)p01 * 2;
        const u128 m2 = (m1 >> 64) + (uint64_t)p11 + (p01 >> 64) * 2;
        const uint64_t q1 = (uint64_t)m1, q2 = (uint64_t)m2,
                       q3 = (uint64_t)((m2 >> 64) + (uint64_t)(p11 >> 64));
        sq.l[0] = (q1 >> 48) | (q2 << 16);
        sq.l[1] = (q2 >> 48) | (q3 << 16);
        sq.l[2] = q3 >> 48;
    }
    const uint64_t sq64 = (sq.l[1] >> 16) | (sq.l[2] << 48); /* eps^2 2^160 < 2^63 */
    const u128 cu = ((u128)e64 * sq64) >> 32;               /* eps^3 2^240 < 2^94 */
    const fx cube = {{(uint64_t)cu, (uint64_t)(cu >> 64), 0}};
    fx sum = fx_add(es, &sq);
    sum = fx_add(sum, &cube);
    /* Vi = v0 2^128 (1 + S) at 2^-192, truncated: 1/M - 1.13 2^-192 <= Vi 2^-192 <= 1/M */
    uint64_t vi[3];
    {
        uint64_t t[4];
        u128 c = 0;
        for (int i = 0; i < 3; ++i) {
            c += (u128)sum.l[i] * v0;
            t[i] = (uint64_t)c;
            c >>= 64;
        }
        t[3] = (uint64_t)c; /* v0 S 2^304 < 2^256; >> 112 below 2^144 */
        vi[0] = (t[1] >> 48) | (t[2] << 16);
        vi[1] = (t[2] >> 48) | (t[3] << 16);
        vi[2] = v0 + (t[3] >> 48);
    }
    /* Q = 2^192 - (Vi << 1) for k = 0, 2^192 - (Vi >> (k - 1)) otherwise */
    uint64_t d[3];
    if (k == 0) {
        if (vi[2] >> 63) { /* 1/M >= 1/2: tanh|y| <= 60.6 2^-192, Q = 0 keeps the bound */
            q[0] = q[1] = q[2] = 0;
            return;
        }
        d[2] = (vi[2] << 1) | (vi[1] >> 63);
        d[1] = (vi[1] << 1) | (vi[0] >> 63);
        d[0] = vi[0] << 1;
    } else {
        for (int i = 0; i < 3; ++i)
            d[i] = bits64((const mp_limb_t *)vi, 3, 64 * i + k - 1);
    }
    /* 0 < d < 2^192: q = 2^192 - d */
    u128 c = 1;
    for (int i = 0; i < 3; ++i) {
        c += (u128)(uint64_t)~d[i];
        q[i] = (uint64_t)c;
        c >>= 64;
    }
}

bool ref_tanh_approx(mpfr_ptr q, mpfr_srcptr x)
{
    if (!in_range(x, 6)) /* |x| < 2^6 */
        return false;
    uint64_t qi[3];
    long k;
    tanh_fixed((const mp_limb_t *)mpfr_custom_get_significand(x),
               (size_t)((mpfr_get_prec(x) + 63) / 64), (long)mpfr_get_exp(x), qi, &k);
    set_fixed(q, qi, -192);
    if (mpfr_signbit(x))
        mpfr_neg(q, q, MPFR_RNDN);
    return true;
}

bool ref_tanh_sig(mp_limb_t *sig, long *e_out, const mp_limb_t *m, size_t nl, long ex, bool neg,
                  mpfr_prec_t prec)
{
    (void)neg; /* tanh(-y) = -tanh(y), and rounding to nearest is symmetric */
    const unsigned rl = (unsigned)((prec + 63) / 64);
    if (ex >= 7) { /* |x| >= 64: 2|x| >= 128 > (P + 2) ln 2, rounds to +-1 (ref_exp.h) */
        memset(sig, 0, rl * sizeof *sig);
        sig[rl - 1] = (mp_limb_t)1 << 63;
        *e_out = 1;
        return true;
    }
    uint64_t qi[3];
    long k;
    tanh_fixed(m, nl, ex, qi, &k);
    if (k >= prec + 3) { /* 2|x| > (P + 2) ln 2: rounds to +-1 */
        memset(sig, 0, rl * sizeof *sig);
        sig[rl - 1] = (mp_limb_t)1 << 63;
        *e_out = 1;
        return true;
    }
    return round_sig(sig, e_out, qi, 61, -192, prec);
}

void ref_tanh(mpfr_ptr rop, mpfr_srcptr x)
{
    const mpfr_prec_t prec = mpfr_get_prec(rop);
    if (prec <= REF_EXP_MAX_PREC && mpfr_regular_p(x)) {
        const bool neg = mpfr_signbit(x) != 0;
        mp_limb_t sig[3];
        long e;
        if (ref_tanh_sig(sig, &e, (const mp_limb_t *)mpfr_custom_get_significand(x),
                         (size_t)((mpfr_get_prec(x) + 63) / 64), (long)mpfr_get_exp(x), neg,
                         prec)) {
            set_sig(rop, sig, e, neg);
            return;
        }
    }
    mpfr_tanh(rop, x, MPFR_RNDN);
}
