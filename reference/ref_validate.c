/* ref_validate.c — the reference proves its precision: the same pass at P and 2P bits, and the
 * number of bits on which they agree, per tensor, computed from the MPFR values (not from the
 * float64 copies, which would cap every figure at 53 bits). */
#include "kvd_ref.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void ref_agreement_of(ref_agreement *out, const char *name, mpfr_t *a, mpfr_t *b, uint64_t n,
                      uint32_t prec)
{
    memset(out, 0, sizeof *out);
    snprintf(out->name, sizeof out->name, "%s", name);
    out->n = n;
    out->min_bits = prec;
    double sum = 0;
    mpfr_t d;
    /* the difference at the wider of the two precisions plus one bit is exact for the inputs
     * a P-bit and a 2P-bit number whose exponents are close; a rounded difference is fine too:
     * only its leading bits matter here */
    mpfr_prec_t dp = mpfr_get_prec(a[0]) > mpfr_get_prec(b[0]) ? mpfr_get_prec(a[0])
                                                               : mpfr_get_prec(b[0]);
    mpfr_init2(d, dp + 1);
    for (uint64_t i = 0; i < n; ++i) {
        double bits;
        if (mpfr_equal_p(a[i], b[i])) {
            bits = prec; /* identical, zeros included */
        } else if (mpfr_zero_p(b[i]) || !mpfr_number_p(a[i]) || !mpfr_number_p(b[i])) {
            bits = 0; /* nothing to be relative to, or a non-number: no agreement */
        } else {
            mpfr_sub(d, a[i], b[i], MPFR_RNDN);
            mpfr_div(d, d, b[i], MPFR_RNDN);
            mpfr_abs(d, d, MPFR_RNDN);
            mpfr_log2(d, d, MPFR_RNDN);
            bits = -mpfr_get_d(d, MPFR_RNDN);
            if (bits > prec)
                bits = prec;
            if (bits < 0)
                bits = 0;
        }
        sum += bits;
        if (bits < out->min_bits) {
            out->min_bits = bits;
            out->worst = i;
        }
    }
    mpfr_clear(d);
    out->mean_bits = n ? sum / (double)n : prec;
    out->min_digits = out->min_bits * log10(2.0);
}

int ref_validate(ref_agreement **out, uint32_t *n_out, const ref_model *m, const ref_request *rq,
                 lm_err *err)
{
    return ref_validate_against(out, n_out, m, rq, false, err);
}

int ref_validate_against(ref_agreement **out, uint32_t *n_out, const ref_model *m,
                         const ref_request *rq, bool mpfr_dot, lm_err *err)
{
    *out = NULL;
    *n_out = 0;
    uint32_t p = rq->prec ? rq->prec : REF_DEFAULT_PREC;
    if (2 * p > REF_MAX_PREC)
        return LM_FAIL(err, LM_E_INPUT, "--validate: 2 x %u bits exceeds %u", p, REF_MAX_PREC);
    ref_request r1 = *rq, r2 = *rq;
    r1.prec = p;
    r2.prec = 2 * p;
    r2.mpfr_dot = mpfr_dot;
    ref_result *a = NULL, *b = NULL;
    int st = ref_run(&a, m, &r1, err);
    if (st == LM_OK)
        st = ref_run(&b, m, &r2, err);
    if (st) {
        ref_result_free(a);
        return st;
    }
    uint32_t n = 2 * a->n_layer + (a->n_layer + 1) + 1; /* K, V; hidden states; logits */
    ref_agreement *ag = calloc(n, sizeof *ag);
    if (ag == NULL) {
        ref_result_free(a);
        ref_result_free(b);
        return LM_FAIL(err, LM_E_NOMEM, "--validate: out of memory");
    }
    uint64_t per = (uint64_t)a->n_prompt * a->n_kv_head * a->head_dim;
    char name[32];
    for (uint32_t l = 0; l < a->n_layer; ++l) {
        snprintf(name, sizeof name, "layer%02u.k", l);
        ref_agreement_of(&ag[2 * l], name, a->k + l * per, b->k + l * per, per, p);
        snprintf(name, sizeof name, "layer%02u.v", l);
        ref_agreement_of(&ag[2 * l + 1], name, a->v + l * per, b->v + l * per, per, p);
    }
    const uint64_t hper = (uint64_t)a->n_prompt * a->n_embd;
    for (uint32_t i = 0; i <= a->n_layer; ++i) {
        if (i == 0)
            snprintf(name, sizeof name, "embedding");
        else
            snprintf(name, sizeof name, "layer%02u.out", i - 1);
        ref_agreement_of(&ag[2 * a->n_layer + i], name, a->hidden + i * hper,
                         b->hidden + i * hper, hper, p);
    }
    ref_agreement_of(&ag[n - 1], "logits", a->logits, b->logits, (uint64_t)a->n_pos * a->n_vocab,
                     p);
    ref_result_free(a);
    ref_result_free(b);
    *out = ag;
    *n_out = n;
    return LM_OK;
}
