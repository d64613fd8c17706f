/* ref_ops.c — MPFR primitives of the reference: dot, sum, RMSNorm, softmax, SiLU, RoPE.
 * Every operation rounds to nearest at the destination's precision (exp and tanh through
 * ref_exp.h: the same bits as mpfr_exp and mpfr_tanh); reductions run left to right. Nothing here knows about models or threads. */
#include "kvd_ref.h"
#include "ref_exp.h"
#include "ref_gelu.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

static size_t n_limbs(mpfr_prec_t prec)
{
    return (size_t)((prec + GMP_NUMB_BITS - 1) / GMP_NUMB_BITS);
}

static size_t round64(size_t n)
{
    return (n + 63) & ~(size_t)63;
}

/* Storage layout (why): every MPFR number here uses the custom interface over one 64-byte
 * aligned block per vector or per scratch, instead of one malloc per number. Numbers written
 * by different threads then never share a cache line (the measured cause of 2 threads being
 * no faster than 1: false sharing between neighbouring 16-byte limb allocations), and a vector
 * is one allocation. Nothing here ever changes a number's precision, so MPFR never needs to
 * reallocate a significand. */
mpfr_t *ref_vec_new(uint64_t n, mpfr_prec_t prec)
{
    size_t nl = n_limbs(prec);
    size_t head = round64((size_t)(n ? n : 1) * sizeof(mpfr_t));
    size_t body = round64((size_t)(n ? n : 1) * nl * sizeof(mp_limb_t));
    void *blk = aligned_alloc(64, head + body);
    if (blk == NULL)
        return NULL;
    mpfr_t *v = blk;
    mp_limb_t *limbs = (mp_limb_t *)((char *)blk + head);
    memset(limbs, 0, body);
    for (uint64_t i = 0; i < n; ++i)
        mpfr_custom_init_set(v[i], MPFR_ZERO_KIND, 0, prec, limbs + i * nl);
    return v;
}

void ref_vec_free(mpfr_t *v, uint64_t n)
{
    (void)n; /* one block; custom-interface numbers need no mpfr_clear */
    free(v);
}

int ref_scratch_init(ref_scratch *s, mpfr_prec_t prec, uint64_t row_cap, lm_err *err)
{
    s->prec = prec;
    s->row_cap = row_cap;
    s->row = ref_vec_new(row_cap, prec);
    s->tmp = ref_vec_new(6 * 8, prec); /* t, u, acc, acc_neg, gelu_c, gelu_k, each on its own
                                          cache line(s) */
    if (s->row == NULL || s->tmp == NULL) {
        free(s->row);
        free(s->tmp);
        s->row = s->tmp = NULL;
        return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory for scratch");
    }
    s->row_limbs = (mp_limb_t *)mpfr_custom_get_significand(s->row[0]);
    /* a struct copy of the custom number: t, u, acc share their significands with tmp[] */
    memcpy(s->t, s->tmp[0], sizeof(mpfr_t));
    memcpy(s->u, s->tmp[8], sizeof(mpfr_t));
    memcpy(s->acc, s->tmp[16], sizeof(mpfr_t));
    memcpy(s->acc_neg, s->tmp[24], sizeof(mpfr_t));
    memcpy(s->gelu_c, s->tmp[32], sizeof(mpfr_t));
    memcpy(s->gelu_k, s->tmp[40], sizeof(mpfr_t));
    mpfr_set_str(s->gelu_c, "0.044715", 10, MPFR_RNDN);
    mpfr_const_pi(s->gelu_k, MPFR_RNDN);
    mpfr_ui_div(s->gelu_k, 2, s->gelu_k, MPFR_RNDN);
    mpfr_sqrt(s->gelu_k, s->gelu_k, MPFR_RNDN);
    return LM_OK;
}

void ref_scratch_clear(ref_scratch *s)
{
    if (s == NULL || s->row == NULL)
        return;
    free(s->row);
    free(s->tmp);
    s->row = s->tmp = NULL;
    s->row_limbs = NULL;
    s->row_cap = 0;
}

void ref_row_set_flt(ref_scratch *s, const float *w, uint64_t n)
{
    size_t nl = n_limbs(s->prec);
    for (uint64_t i = 0; i < n; ++i) {
        uint32_t b;
        memcpy(&b, &w[i], 4);
        int neg = (b >> 31) ? -1 : 1;
        uint32_t ef = (b >> 23) & 0xff, frac = b & 0x7fffff;
        mp_limb_t *d = s->row_limbs + i * nl;
        if (ef == 0xff) {
            mpfr_custom_init_set(s->row[i], frac ? MPFR_NAN_KIND : neg * MPFR_INF_KIND, 0, s->prec,
                                 d);
            continue;
        }
        if (ef == 0 && frac == 0) {
            mpfr_custom_init_set(s->row[i], neg * MPFR_ZERO_KIND, 0, s->prec, d);
            continue;
        }
        /* value = 0.1m * 2^exp with the 24-bit significand m24 at the top of the top limb:
         * normal: m24 = 1.frac, exp = ef - 126; subnormal: frac * 2^-149 normalized */
        uint32_t m24;
        mpfr_exp_t ex;
        if (ef) {
            m24 = 0x800000u | frac;
            ex = (mpfr_exp_t)ef - 126;
        } else {
            int k = 0;
            while (!((frac << k) & 0x800000u))
                ++k;
            m24 = frac << k;
            ex = -125 - k;
        }
        for (size_t j = 0; j + 1 < nl; ++j)
            d[j] = 0;
        d[nl - 1] = (mp_limb_t)m24 << (GMP_NUMB_BITS - 24);
        mpfr_custom_init_set(s->row[i], neg * MPFR_REGULAR_KIND, ex, s->prec, d);
    }
}

void ref_dot(mpfr_t out, mpfr_t *x, mpfr_t *w, uint64_t n, ref_scratch *s)
{
    /* accumulators in scratch so that out may alias an input; s->t holds each product. The
     * accumulator is picked by the product's sign bit without a branch. */
    mpfr_ptr acc[2] = {s->acc, s->acc_neg};
    mpfr_set_zero(s->acc, 1);
    mpfr_set_zero(s->acc_neg, -1);
    for (uint64_t i = 0; i < n; ++i) {
        mpfr_mul(s->t, x[i], w[i], MPFR_RNDN);
        mpfr_ptr a = acc[mpfr_signbit(s->t) != 0];
        mpfr_add(a, a, s->t, MPFR_RNDN);
    }
    mpfr_add(out, s->acc, s->acc_neg, MPFR_RNDN);
}

void ref_sum(mpfr_t out, mpfr_t *x, uint64_t n)
{
    mpfr_set_zero(out, 1);
    for (uint64_t i = 0; i < n; ++i)
        mpfr_add(out, out, x[i], MPFR_RNDN);
}

void ref_rmsnorm(mpfr_t *out, mpfr_t *x, const float *w, uint64_t n, float eps,
                 ref_scratch *s)
{
    /* acc = sum x^2 (left to right); acc = acc / n + eps; u = 1 / sqrt(acc). */
    mpfr_set_zero(s->acc, 1);
    for (uint64_t i = 0; i < n; ++i) {
        mpfr_sqr(s->t, x[i], MPFR_RNDN);
        mpfr_add(s->acc, s->acc, s->t, MPFR_RNDN);
    }
    mpfr_div_ui(s->acc, s->acc, (unsigned long)n, MPFR_RNDN);
    mpfr_set_flt(s->t, eps, MPFR_RNDN); /* exact: eps is the float32 the model stores */
    mpfr_add(s->acc, s->acc, s->t, MPFR_RNDN);
    mpfr_rec_sqrt(s->u, s->acc, MPFR_RNDN);
    for (uint64_t i = 0; i < n; ++i) {
        mpfr_mul(out[i], x[i], s->u, MPFR_RNDN);
        mpfr_set_flt(s->t, w[i], MPFR_RNDN);
        mpfr_mul(out[i], out[i], s->t, MPFR_RNDN);
    }
}

void ref_softmax(mpfr_t *x, uint64_t n, ref_scratch *s)
{
    /* Subtracting the maximum changes nothing mathematically (MPFR cannot overflow here); it
     * keeps the exponentials in [0, 1] like every float implementation does. */
    mpfr_set(s->u, x[0], MPFR_RNDN);
    for (uint64_t i = 1; i < n; ++i)
        if (mpfr_greater_p(x[i], s->u))
            mpfr_set(s->u, x[i], MPFR_RNDN);
    mpfr_set_zero(s->acc, 1);
    for (uint64_t i = 0; i < n; ++i) {
        mpfr_sub(x[i], x[i], s->u, MPFR_RNDN);
        ref_exp(x[i], x[i]);
        mpfr_add(s->acc, s->acc, x[i], MPFR_RNDN);
    }
    for (uint64_t i = 0; i < n; ++i)
        mpfr_div(x[i], x[i], s->acc, MPFR_RNDN);
}

void ref_silu(mpfr_t out, const mpfr_t z, ref_scratch *s)
{
    mpfr_neg(s->t, z, MPFR_RNDN);
    ref_exp(s->t, s->t);
    mpfr_add_ui(s->t, s->t, 1, MPFR_RNDN);
    mpfr_div(out, z, s->t, MPFR_RNDN);
}

void ref_swiglu_oai(mpfr_t out, const mpfr_t g, const mpfr_t u, ref_scratch *s)
{
    if (mpfr_cmp_si(u, -7) < 0)
        mpfr_set_si(s->u, -7, MPFR_RNDN);
    else if (mpfr_cmp_si(u, 7) > 0)
        mpfr_set_si(s->u, 7, MPFR_RNDN);
    else
        mpfr_set(s->u, u, MPFR_RNDN);
    mpfr_add_ui(s->u, s->u, 1, MPFR_RNDN); /* y + 1 */
    if (mpfr_cmp_si(g, 7) > 0)
        mpfr_set_si(s->acc, 7, MPFR_RNDN);
    else
        mpfr_set(s->acc, g, MPFR_RNDN); /* x (NaN stays NaN) */
    mpfr_set_flt(s->t, 1.702f, MPFR_RNDN);
    mpfr_mul(s->t, s->t, s->acc, MPFR_RNDN);
    mpfr_neg(s->t, s->t, MPFR_RNDN);
    ref_exp(s->t, s->t);
    mpfr_add_ui(s->t, s->t, 1, MPFR_RNDN);
    mpfr_div(out, s->acc, s->t, MPFR_RNDN);
    mpfr_mul(out, out, s->u, MPFR_RNDN);
}

void ref_gelu_tanh(mpfr_t out, const mpfr_t z, ref_scratch *s)
{
    /* 0.5 z (1 + tanh(sqrt(2 / pi) (z + 0.044715 z^3))), each constant at full precision
     * (computed once per scratch: gelu_c = RN(0.044715), gelu_k = RN(sqrt(RN(2 / RN(pi))))).
     * The sequence below defines the result; up to 128 bits ref_gelu_tanh_f2 computes the same
     * roundings without MPFR calls. */
    if (ref_gelu_tanh_f2(out, z, s->gelu_c, s->gelu_k))
        return;
    mpfr_sqr(s->t, z, MPFR_RNDN);
    mpfr_mul(s->t, s->t, z, MPFR_RNDN);
    mpfr_mul(s->t, s->t, s->gelu_c, MPFR_RNDN);
    mpfr_add(s->t, s->t, z, MPFR_RNDN);
    mpfr_mul(s->t, s->t, s->gelu_k, MPFR_RNDN);
    ref_tanh(s->t, s->t);
    mpfr_add_ui(s->t, s->t, 1, MPFR_RNDN);
    mpfr_mul(s->t, s->t, z, MPFR_RNDN);
    mpfr_div_2ui(out, s->t, 1, MPFR_RNDN);
}

void ref_rope_freq(mpfr_t out, float theta, uint32_t i, uint32_t n_rot)
{
    /* theta^(-2i/n_rot): the exponent is rounded once at out's precision, then one mpfr_pow. */
    mpfr_t e, th;
    mpfr_inits2(mpfr_get_prec(out), e, th, (mpfr_ptr)0);
    mpfr_set_si(e, -2 * (long)i, MPFR_RNDN);
    mpfr_div_ui(e, e, n_rot, MPFR_RNDN);
    mpfr_set_flt(th, theta, MPFR_RNDN);
    mpfr_pow(out, th, e, MPFR_RNDN);
    mpfr_clears(e, th, (mpfr_ptr)0);
}

void ref_yarn_ramp(double *lo, double *hi, float theta, uint32_t n_rot, uint32_t n_ctx_orig)
{
    const double two_pi = 6.283185307179586, lb = log((double)theta);
    const double c_fast = n_rot * log((double)n_ctx_orig / (two_pi * 32.0)) / (2.0 * lb);
    const double c_slow = n_rot * log((double)n_ctx_orig / two_pi) / (2.0 * lb);
    *lo = fmax(0.0, floor(c_fast));
    *hi = fmin((double)n_rot - 1.0, ceil(c_slow));
}

/* YaRN's m_i (ref_rope_cos_sin) of pair i into out, on the ramp lo..hi (ref_yarn_ramp). */
static void yarn_mult(mpfr_t out, uint32_t i, double lo, double hi, float factor)
{
    mpfr_t r, sc;
    mpfr_inits2(mpfr_get_prec(out), r, sc, (mpfr_ptr)0);
    mpfr_set_d(r, (double)i - lo, MPFR_RNDN);            /* exact: small integers */
    mpfr_div_d(r, r, fmax(0.001, hi - lo), MPFR_RNDN);
    if (mpfr_cmp_ui(r, 1) > 0)
        mpfr_set_ui(r, 1, MPFR_RNDN);
    if (mpfr_sgn(r) < 0)
        mpfr_set_ui(r, 0, MPFR_RNDN);
    mpfr_ui_sub(r, 1, r, MPFR_RNDN);                       /* r_i */
    mpfr_set_flt(sc, factor, MPFR_RNDN);
    mpfr_ui_div(sc, 1, sc, MPFR_RNDN);                     /* s */
    mpfr_ui_sub(out, 1, r, MPFR_RNDN);
    mpfr_mul(out, out, sc, MPFR_RNDN);
    mpfr_add(out, out, r, MPFR_RNDN);                      /* s (1 - r) + r */
    mpfr_clears(r, sc, (mpfr_ptr)0);
}

void ref_rope_cos_sin(mpfr_t *cs, uint32_t pos, float theta, const float *factors,
                      uint32_t n_rot, float yarn_factor, uint32_t n_ctx_orig)
{
    mpfr_t a, fac, ym;
    mpfr_init2(a, mpfr_get_prec(cs[0]));
    mpfr_init2(ym, mpfr_get_prec(cs[0]));
    mpfr_init2(fac, 24);
    double lo = 0.0, hi = 0.0;
    if (yarn_factor > 0.0f)
        ref_yarn_ramp(&lo, &hi, theta, n_rot, n_ctx_orig);
    for (uint32_t i = 0; i < n_rot / 2; ++i) {
        ref_rope_freq(a, theta, i, n_rot);
        if (factors != NULL) { /* frequency i divided by its factor (exact float32 input) */
            mpfr_set_flt(fac, factors[i], MPFR_RNDN);
            mpfr_div(a, a, fac, MPFR_RNDN);
        }
        if (yarn_factor > 0.0f) {
            yarn_mult(ym, i, lo, hi, yarn_factor);
            mpfr_mul(a, a, ym, MPFR_RNDN);
        }
        mpfr_mul_ui(a, a, pos, MPFR_RNDN);
        mpfr_sin_cos(cs[2 * i + 1], cs[2 * i], a, MPFR_RNDN);
        if (yarn_factor > 0.0f) { /* magnitude 1 + 0.1 ln(factor) */
            mpfr_set_flt(ym, yarn_factor, MPFR_RNDN);
            mpfr_log(ym, ym, MPFR_RNDN);
            mpfr_div_ui(ym, ym, 10, MPFR_RNDN);
            mpfr_add_ui(ym, ym, 1, MPFR_RNDN);
            mpfr_mul(cs[2 * i], cs[2 * i], ym, MPFR_RNDN);
            mpfr_mul(cs[2 * i + 1], cs[2 * i + 1], ym, MPFR_RNDN);
        }
    }
    mpfr_clear(a);
    mpfr_clear(ym);
    mpfr_clear(fac);
}

/* (a, b) <- (a cos - b sin, a sin + b cos); each product and sum rounded. */
static void rotate(mpfr_t a, mpfr_t b, const mpfr_t c, const mpfr_t sn, ref_scratch *s)
{
    mpfr_mul(s->t, a, c, MPFR_RNDN);
    mpfr_mul(s->u, b, sn, MPFR_RNDN);
    mpfr_sub(s->acc, s->t, s->u, MPFR_RNDN); /* new a */
    mpfr_mul(s->t, a, sn, MPFR_RNDN);
    mpfr_mul(s->u, b, c, MPFR_RNDN);
    mpfr_add(b, s->t, s->u, MPFR_RNDN);
    mpfr_set(a, s->acc, MPFR_RNDN);
}

void ref_rope_apply(mpfr_t *x, mpfr_t *cs, uint32_t n_rot, ref_rope_type type,
                    ref_scratch *s)
{
    uint32_t half = n_rot / 2;
    for (uint32_t i = 0; i < half; ++i) {
        if (type == REF_ROPE_NEOX)
            rotate(x[i], x[i + half], cs[2 * i], cs[2 * i + 1], s);
        else
            rotate(x[2 * i], x[2 * i + 1], cs[2 * i], cs[2 * i + 1], s);
    }
}
