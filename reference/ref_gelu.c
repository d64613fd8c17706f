/* ref_gelu.c — GELU (tanh form) at precisions of at most 128 bits in two-limb integer
 * arithmetic: the same nine roundings to nearest as ref_gelu_tanh's MPFR sequence (kvd_ref.h),
 * without a call into MPFR per step.
 *
 * Every intermediate is a P-bit number (-1)^neg 0.(h l) 2^e with h's top bit set and the low
 * 128 - P bits zero, as MPFR stores it. Products are formed exactly (256 bits), sums exactly in a
 * 256-bit window plus a sticky bit for what falls below it, and each result is rounded to
 * nearest, ties to even, at P bits (MPFR_RNDN): the same value MPFR returns. tanh goes through
 * ref_tanh_sig. Anything outside the ordinary case (a non-regular input, exponents beyond
 * +-2^20, a tanh the fixed point cannot decide, 1 + tanh with tanh = -1 or -2^-128 < tanh < 0)
 * returns false before anything is written, and the caller runs the MPFR sequence.
 * A sum's sticky bit (what falls below the window) can decide a rounding only at P = 128 with
 * the addends' exponents exactly 128 apart; it is kept for that case. */
#include "ref_gelu.h"
#include "ref_exp.h"

#include <stdint.h>

__extension__ typedef unsigned __int128 u128; /* GCC and Clang on 64-bit targets */

typedef struct f2 {
    u128 m;  /* significand, bit 127 set, the low 128 - P bits zero */
    long e;  /* value = m 2^(e - 128) */
    bool neg;
} f2;

#define E_LIMIT (1L << 20) /* inputs beyond +-2^20 binades take the MPFR path */

/* Inlined into ref_gelu_tanh_f2: out of line, the u128 results pass through memory. */
#define F2_INLINE __attribute__((always_inline)) static inline

F2_INLINE bool f2_of(f2 *a, mpfr_srcptr x)
{
    if (!mpfr_regular_p(x) || mpfr_get_exp(x) > E_LIMIT || mpfr_get_exp(x) < -E_LIMIT)
        return false;
    const mp_limb_t *m = (const mp_limb_t *)mpfr_custom_get_significand(x);
    a->m = mpfr_get_prec(x) <= 64 ? (u128)m[0] << 64 : ((u128)m[1] << 64) | m[0];
    a->e = (long)mpfr_get_exp(x);
    a->neg = mpfr_signbit(x) != 0;
    return true;
}

/* X = (hi 2^128 + lo) 2^(e - 256), bit 255 set, plus a nonzero remainder below bit 0 when
 * sticky: rounded to nearest (ties to even) at p bits. */
F2_INLINE f2 round256(u128 hi, u128 lo, bool sticky, long e, bool neg, unsigned p)
{
    const unsigned q = 128 - p; /* cleared low bits of the significand, 0 <= q < 128 */
    bool rb, st;
    u128 kept;
    if (q == 0) {
        kept = hi;
        rb = (lo >> 127) != 0;
        st = (lo << 1) != 0 || sticky;
    } else {
        const u128 low = ((u128)1 << q) - 1;
        kept = hi & ~low;
        rb = ((hi >> (q - 1)) & 1) != 0;
        st = (hi & (low >> 1)) != 0 || lo != 0 || sticky;
    }
    if (rb && (st || ((kept >> q) & 1))) {
        kept += (u128)1 << q;
        if (kept == 0) { /* carried out: 2^128 */
            kept = (u128)1 << 127;
            ++e;
        }
    }
    return (f2){kept, e, neg};
}

/* a b rounded at p bits. */
F2_INLINE f2 f2_mul(const f2 *a, const f2 *b, unsigned p)
{
    const uint64_t a0 = (uint64_t)a->m, a1 = (uint64_t)(a->m >> 64), b0 = (uint64_t)b->m,
                   b1 = (uint64_t)(b->m >> 64);
    const u128 p00 = (u128)a0 * b0, p01 = (u128)a0 * b1, p10 = (u128)a1 * b0,
               p11 = (u128)a1 * b1;
    const u128 mid = (p00 >> 64) + (uint64_t)p01 + (uint64_t)p10; /* < 2^66 */
    u128 hi = p11 + (p01 >> 64) + (p10 >> 64) + (mid >> 64);
    u128 lo = (mid << 64) | (uint64_t)p00;
    long e = a->e + b->e;
    if ((hi >> 127) == 0) { /* 2^254 <= product < 2^255: normalize (exact) */
        hi = (hi << 1) | (lo >> 127);
        lo <<= 1;
        --e;
    }
    return round256(hi, lo, false, e, a->neg != b->neg, p);
}

/* (hi, lo) >> s for 0 <= s, with *sticky set when a nonzero bit falls off. */
F2_INLINE void shr256(u128 *hi, u128 *lo, unsigned long s, bool *sticky)
{
    if (s == 0)
        return;
    if (s >= 256) {
        *sticky = *sticky || *hi != 0 || *lo != 0;
        *hi = *lo = 0;
        return;
    }
    if (s >= 128) {
        const unsigned t = (unsigned)(s - 128);
        *sticky = *sticky || *lo != 0 || (t > 0 && (*hi << (128 - t)) != 0);
        *lo = t == 0 ? *hi : *hi >> t;
        *hi = 0;
        return;
    }
    const unsigned t = (unsigned)s;
    *sticky = *sticky || (*lo << (128 - t)) != 0;
    *lo = (*lo >> t) | (*hi << (128 - t));
    *hi >>= t;
}

/* a + b rounded at p bits, a and b of the same sign. */
F2_INLINE f2 f2_add_same(const f2 *a, const f2 *b, unsigned p)
{
    if (a->e < b->e) {
        const f2 *t = a;
        a = b;
        b = t;
    }
    /* both in a 256-bit window with one bit of headroom: a at bits 254 .. 127 */
    u128 ah = a->m >> 1, al = a->m << 127, bh = b->m, bl = 0;
    bool sticky = false;
    shr256(&bh, &bl, 1 + (unsigned long)(a->e - b->e), &sticky);
    u128 lo = al + bl;
    u128 hi = ah + bh + (lo < al);
    long e = a->e + 1; /* X = (hi, lo) 2^(e - 256) */
    if ((hi >> 127) == 0) { /* no carry into bit 255: shift back (bit 0 becomes 0; the
                               sticky part stays below the round bit) */
        hi = (hi << 1) | (lo >> 127);
        lo <<= 1;
        --e;
    }
    return round256(hi, lo, sticky, e, a->neg, p);
}

/* 1 - |t| rounded at p bits, for 2^-128 <= |t| < 1 (exact in the window, then normalized). */
F2_INLINE f2 f2_one_minus(const f2 *t, unsigned p)
{
    /* 1 = 2^255 2^(1 - 256); |t| = m 2^(e - 128) = (m 2^128 >> (1 - e)) 2^(1 - 256) */
    u128 th = t->m, tl = 0;
    bool sticky = false;
    shr256(&th, &tl, (unsigned long)(1 - t->e), &sticky); /* exact: 1 - e <= 128 */
    u128 hi = ((u128)1 << 127) - th - (tl != 0), lo = (u128)0 - tl;
    long e = 1;
    /* normalize: 1 - |t| >= 2^-128 > 0 */
    while ((hi >> 64) == 0) {
        hi = (hi << 64) | (lo >> 64);
        lo <<= 64;
        e -= 64;
    }
    const unsigned z = (unsigned)__builtin_clzll((uint64_t)(hi >> 64));
    if (z > 0) {
        hi = (hi << z) | (lo >> (128 - z));
        lo <<= z;
        e -= (long)z;
    }
    return round256(hi, lo, false, e, false, p);
}

F2_INLINE void f2_set(mpfr_ptr rop, const f2 *a)
{
    mp_limb_t sig[2] = {(mp_limb_t)a->m, (mp_limb_t)(a->m >> 64)};
    mpfr_t t;
    const bool one = mpfr_get_prec(rop) <= 64;
    mpfr_custom_init_set(t, (a->neg ? -1 : 1) * MPFR_REGULAR_KIND, (mpfr_exp_t)a->e,
                         mpfr_get_prec(rop), one ? sig + 1 : sig);
    mpfr_set(rop, t, MPFR_RNDN); /* a copy: same precision */
}

bool ref_gelu_tanh_f2(mpfr_ptr out, mpfr_srcptr z, mpfr_srcptr c, mpfr_srcptr k)
{
    const mpfr_prec_t prec = mpfr_get_prec(z);
    if (prec > 128 || prec > REF_EXP_MAX_PREC || mpfr_get_prec(out) != prec ||
        mpfr_get_prec(c) != prec || mpfr_get_prec(k) != prec)
        return false;
    const unsigned p = (unsigned)prec;
    f2 Z, Cc, Kk;
    if (!f2_of(&Z, z) || !f2_of(&Cc, c) || !f2_of(&Kk, k) || Cc.neg || Kk.neg)
        return false;
    /* t = RN(RN(RN(RN(z^2) z) c) + z): z^2 c > 0, so c z^3 has z's sign */
    f2 t = f2_mul(&Z, &Z, p);
    t = f2_mul(&t, &Z, p);
    t = f2_mul(&t, &Cc, p);
    t = f2_add_same(&t, &Z, p);
    t = f2_mul(&t, &Kk, p); /* y */
    mp_limb_t sig[2] = {(mp_limb_t)t.m, (mp_limb_t)(t.m >> 64)};
    mp_limb_t th[2];
    long te;
    if (!ref_tanh_sig(th, &te, p <= 64 ? sig + 1 : sig, p <= 64 ? 1 : 2, t.e, t.neg, prec))
        return false;
    const f2 T = {p <= 64 ? (u128)th[0] << 64 : ((u128)th[1] << 64) | th[0], te, t.neg};
    /* u = RN(1 + T) */
    f2 u;
    if (!T.neg) {
        const f2 one = {(u128)1 << 127, 1, false};
        u = f2_add_same(&one, &T, p);
    } else {
        if (T.e >= 1 || T.e < -127) /* T = -1 (u = +0), or |T| < 2^-128 */
            return false;
        u = f2_one_minus(&T, p);
    }
    u = f2_mul(&u, &Z, p);
    u.e -= 1; /* RN(u / 2): exact */
    f2_set(out, &u);
    return true;
}
