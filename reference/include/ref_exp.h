/* ref_exp.h — exp and tanh correctly rounded to nearest, the same bits as mpfr_exp and
 * mpfr_tanh with MPFR_RNDN, several times cheaper at the reference's precisions.
 *
 * Method (Ziv): an approximation N 2^s of the exact value with a proven error bound b 2^s is
 * computed in fixed point (64-bit limbs, integer arithmetic only); when every number within the
 * bound rounds to the same P-bit value (N's bits below the round bit, t, satisfy b < t <
 * 2^rb - b: the interval holds no midpoint and stays in N's binade), that value is written
 * directly, otherwise (probability about 4b 2^(P - 191) per call) the MPFR function itself.
 * Either way the result is the exact value rounded to nearest (never a tie: exp and tanh of a
 * nonzero rational are irrational), so replacing mpfr_exp and mpfr_tanh by these changes no bit.
 *
 * exp(x), 0 < |x| < 512:  x = k ln2 + r with 0 <= r < 1 (k an integer; the reduction in 320-bit
 *   fixed point at 2^-256 with ln2 rounded at 2^-256), r = j1 2^-8 + j2 2^-16 + j3 2^-24 + s
 *   (0 <= s < 2^-24), exp(r) = T1[j1] T2[j2] T3[j3] (sum_{n <= 7} s^n / n!), Ti[j] =
 *   exp(j 2^-8i) rounded to 2^-190. With u = 2^-190, w = 2^-128: the series by Horner, h_n =
 *   1/n! + s h_(n+1), an error in h_n reaching the sum times s^n < 2^-24n: h_7 .. h_3 at w (1/n!
 *   rounded, <= w/2; s truncated at 2^-152, < 2^-152; products truncated, < w: each level
 *   <= w/2 + w + 2^-24 |err h_(n+1)| + 2^-152 <= 1.51w), h_2 .. h_0 at u (1/2, 1, 1 exact;
 *   products with s truncated, < u): <= u + s (u + s (u + s 1.51w)) + truncation after s^7
 *   (< u/1000) <= 1.01u, under the 2u used next (every table product truncating by < u); T1 T2 <=
 *   u + 2.72 * 0.51u + 1.004 * 0.51u <= 2.9u; (T1 T2) T3 <= u + 1.00002 * 2.9u + 2.72 * 0.51u
 *   <= 5.3u; the product with the series <= u + 2.74 * 2u + 1.0001 * 5.3u <= 11.8u; the
 *   reduced argument r is off by <= 1.01u, so exp(r) by <= 2.75u. In all, with A = E 2^(k-190),
 *   |A - exp(x)| <= 14.6u 2^k < 2^(k - 186) <= 2^(EXP(A) - 186) (A >= 2^(k-1), so MPFR's
 *   exponent EXP(A) >= k); rounded with b = 15 units of 2^(k-190).
 * tanh(y), 0 < |y| < 64, v = 2^-192: a = exp(2|y|) = E 2^(k-190) as above (0 <= k <= 184,
 *   |a - e| <= 14.6u 2^k = 58.4v 2^k for e = exp(2|y|) >= 2^k (1 - 2^-249)), and
 *   tanh|y| = 1 - 2/(e + 1) ~ Q = 1 - 2^(1-k) V, V ~ 1/M, M = (a + 1) 2^-k = E u + 2^-k
 *   (exact in 192 bits, 1 - 2^-185 < M < 4):
 *   - a for e: |2/(a + 1) - 2/(e + 1)| = 2|a - e| / ((a + 1)(e + 1)) <= 2 * 58.4v 2^k / 2^(2k)
 *     <= 58.4v for k >= 1 ((a + 1)(e + 1) > 2^(2k)), <= 29.3v for k = 0 ((a+1)(e+1) >= 3.99);
 *   - the reciprocal: a double seed v0 = trunc(2^64 RN(RN(1/RN(M')) (1 - 2^-49))), M' = M
 *     truncated to 64 bits (M - M' < 2^-62), has 1 - 1.19 2^-49 <= M v0 2^-64 < 1 (three
 *     roundings of 2^-53 and the 2^-64 truncation against the 2^-49 pull-down); eps =
 *     1 - M v0 2^-64 is exact at 2^-254, 0 < eps <= 1.19 2^-49, and 1/M = v0 2^-64 (1 + eps +
 *     eps^2 + eps^3 + eps^4/(1 - eps)); V = v0 2^-64 (1 + S) with S the three terms at 2^-240,
 *     low by < 2^-206 (eps truncated at 2^-240; eps^2 from eps truncated at 2^-176, < 2 eps
 *     2^-176 + 2^-240; eps^3 from eps at 2^-112 and eps^2 at 2^-160, < 2^-207), and the
 *     product truncated to v: 1/M - 1.13v <= V <= 1/M (eps^4/(1 - eps) < 0.125v, the rest
 *     < v + 2^-14 v);
 *   - Q = 1 - 2 V exactly (k = 0), 1 - (V 2^(1-k) truncated to v) (k >= 1, < v more).
 *   In all |Q - tanh|y|| <= 29.3v + 2.26v (k = 0), <= 58.4v + 1.13v + v = 60.6v (k >= 1):
 *   < 61v < 2^-186; rounded with b = 61 units of v. Where 2V >= 1 (k = 0, tanh|y| <= 31.6v)
 *   Q is set to 0, which keeps the bound (and always falls back to MPFR).
 *   Rounding to +-1 without the fixed point: 1 - tanh|y| = 2/(e + 1) < 2e^-2|y| <= 2^-(P+1)
 *   when 2|y| >= (P + 2) ln 2, and then tanh|y| lies above 1 - 2^-(P+1), the midpoint under 1,
 *   so it rounds to 1. That holds for |y| >= 64 at every P <= REF_EXP_MAX_PREC (128 > 168 ln 2)
 *   and for k >= P + 3 (the reduction gives 2|y| >= k ln2 - k 2^-257).
 * Other inputs (0, NaN, Inf, larger arguments, a destination of more than REF_EXP_MAX_PREC
 * bits) go to mpfr_exp / mpfr_tanh directly. rop may be x; x may have any precision (its
 * significand is read directly, truncated at 2^-256). Thread-safe (tables built once). */
#ifndef REF_EXP_H
#define REF_EXP_H

#include <mpfr.h>
#include <stdbool.h>

/* The largest destination precision the fixed-point path serves (about 186-bit approximations:
 * a fallback every ~2^17 calls at this precision, every ~2^56 at 127 bits, besides results
 * below 2^(P + 8 - 192) for tanh, which always fall back). */
#define REF_EXP_MAX_PREC 166

/* rop = exp(x), rounded to nearest at rop's precision (= mpfr_exp(rop, x, MPFR_RNDN)). */
void ref_exp(mpfr_ptr rop, mpfr_srcptr x);
/* rop = tanh(x), rounded to nearest at rop's precision (= mpfr_tanh(rop, x, MPFR_RNDN)). */
void ref_tanh(mpfr_ptr rop, mpfr_srcptr x);

/* The approximations the two use, for the tests of their error bounds (a and q: at least 192
 * bits, set exactly): A with |A - exp(x)| <= 2^(EXP(A) - 186) for 0 < |x| < 512, and Q with
 * |Q - tanh(x)| <= 61 2^-192 for 0 < |x| < 64. false where the fixed-point path does not apply
 * (then a and q are untouched). */
bool ref_exp_approx(mpfr_ptr a, mpfr_srcptr x);
bool ref_tanh_approx(mpfr_ptr q, mpfr_srcptr x);

#endif
