/* ref_exp.h — exp and tanh correctly rounded to nearest, the same bits as mpfr_exp and
 * mpfr_tanh with MPFR_RNDN, several times cheaper at the reference's precisions.
 *
 * Method (Ziv): an approximation A of the exact value with a proven error bound is computed in
 * 192-bit fixed point (three 64-bit limbs, integer arithmetic only); when the bound shows that
 * every number within it rounds to the same P-bit value (mpfr_can_round), that value is
 * returned, otherwise (probability about 2^(P + 1 - 186) per call) the MPFR function itself.
 * Either way the result is the exact value rounded to nearest, so replacing mpfr_exp and
 * mpfr_tanh by these changes no bit.
 *
 * exp(x), 0 < |x| < 512:  x = k ln2 + r with 0 <= r < 1 (k an integer; the reduction in 320-bit
 *   fixed point at 2^-256 with ln2 rounded at 2^-256), r = j1 2^-8 + j2 2^-16 + j3 2^-24 + s
 *   (0 <= s < 2^-24), exp(r) = T1[j1] T2[j2] T3[j3] (sum_{n <= 7} s^n / n!), Ti[j] =
 *   exp(j 2^-8i) and 1/n! rounded to 2^-190. With u = 2^-190, every multiplication truncating
 *   by < u: series (truncation < u/1000, coefficients <= u/2, products <= u) <= 2u; T1 T2 <=
 *   u + 2.72 * 0.51u + 1.004 * 0.51u <= 2.9u; (T1 T2) T3 <= u + 1.00002 * 2.9u + 2.72 * 0.51u
 *   <= 5.3u; the product with the series <= u + 2.74 * 2u + 1.0001 * 5.3u <= 11.8u; the
 *   reduced argument r is off by <= 1.01u, so exp(r) by <= 2.75u. In all |A - exp(x)| <= 14.6u
 *   2^k < 2^(k - 186) <= 2^(EXP(A) - 186)   (A >= 2^(k-1), so MPFR's exponent EXP(A) >= k).
 * tanh(y), 0 < |y| < 256: a = exp(2|y|) as above (relative error theta <= 2^-186), then
 *   (a - 1) / (a + 1) with the subtraction and addition exact at 200 bits and the quotient
 *   rounded at 200 bits: |q - tanh|y|| <= 2|a - e| / ((a + 1)(e + 1)) + 2^-201 <= |theta| +
 *   2^-201 < 2^-185 (e = exp(2|y|), a, e >= 1).
 * Other inputs (0, NaN, Inf, larger arguments, a destination of more than REF_EXP_MAX_PREC
 * bits) go to mpfr_exp / mpfr_tanh directly. rop may be x. Thread-safe (tables built once). */
#ifndef REF_EXP_H
#define REF_EXP_H

#include <mpfr.h>
#include <stdbool.h>

/* The largest destination precision the fixed-point path serves (186-bit approximations, 20
 * bits of margin: a fallback every ~2^19 calls at this precision, every ~2^58 at 127 bits). */
#define REF_EXP_MAX_PREC 166

/* rop = exp(x), rounded to nearest at rop's precision (= mpfr_exp(rop, x, MPFR_RNDN)). */
void ref_exp(mpfr_ptr rop, mpfr_srcptr x);
/* rop = tanh(x), rounded to nearest at rop's precision (= mpfr_tanh(rop, x, MPFR_RNDN)). */
void ref_tanh(mpfr_ptr rop, mpfr_srcptr x);

/* The approximations the two use, for the tests of their error bounds: A (192 bits) with
 * |A - exp(x)| <= 2^(EXP(A) - 186), and Q (200 bits) with |Q - tanh(x)| <= 2^-185. false where
 * the fixed-point path does not apply (then a and q are untouched). */
bool ref_exp_approx(mpfr_ptr a, mpfr_srcptr x);
bool ref_tanh_approx(mpfr_ptr q, mpfr_srcptr x);

#endif
