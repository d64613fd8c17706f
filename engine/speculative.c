/* speculative.c — greedy decoding with logits processors, plain (one token per forward call)
 * or speculative (draft K tokens, verify them in one target chunk, roll back the rejected
 * ones), as kvd_speculative.h lm_spec_generate specifies. Both paths choose token i the same way
 * (emit: record the history, apply the penalties to a copy of the raw row, argmax, accept), so
 * any difference between them comes from the logits rows or from the bookkeeping around them.
 * Test builds carry the defect switch of kvd_defects.h at the places marked "test defect". */
#include "kvd_speculative.h"

#include "kvd_defects.h"

#include <stdlib.h>
#include <string.h>

typedef struct dec {
    lm_penalty *pen;
    float *row;          /* [n_vocab] processed logits */
    float *chunk;        /* [n_draft + 1][n_vocab] raw target logits of a verify chunk */
    float *dlog;         /* [n_vocab] raw draft logits */
    int32_t *seq;        /* [n_prompt + n_gen] prompt, then the generated tokens */
    int32_t *drafts;     /* [n_draft + 1] */
    int32_t *ct;         /* [n_draft + 1] a verify chunk: the last token, then the drafts */
    uint32_t n_vocab;
    bool double_accept;  /* test defect: every accept counts the token twice */
    bool keep_one;       /* test defect: the target's rollback keeps one rejected token */
    lm_spec_trace *out;
} dec;

static void accept(dec *d, int32_t tok)
{
    lm_penalty_accept(d->pen, tok);
    if (d->double_accept)
        lm_penalty_accept(d->pen, tok); /* test defect: the newest token counted twice */
}

/* Token i from the raw target row: history recorded, penalties, argmax, accepted. */
static int32_t emit(dec *d, uint32_t n_prompt, uint32_t i, const float *raw)
{
    d->out->hist_hash[i] = lm_penalty_history_hash(d->pen);
    if (d->out->logits != NULL)
        memcpy(d->out->logits + (size_t)i * d->n_vocab, raw, d->n_vocab * sizeof(float));
    memcpy(d->row, raw, d->n_vocab * sizeof(float));
    lm_penalty_apply(d->pen, d->row);
    const int32_t tok = lm_argmax(d->row, d->n_vocab);
    d->out->tokens[i] = tok;
    d->seq[n_prompt + i] = tok;
    accept(d, tok);
    return tok;
}

static void dec_free(dec *d)
{
    lm_penalty_free(d->pen);
    free(d->row);
    free(d->chunk);
    free(d->dlog);
    free(d->seq);
    free(d->drafts);
    free(d->ct);
}

static int check_args(lm_ctx *target, lm_ctx *draft, uint32_t n_prompt, const lm_spec_params *p,
                      lm_err *err)
{
    if (n_prompt == 0 || p->n_gen == 0)
        return LM_FAIL(err, LM_E_INPUT, "decode: empty prompt or nothing to generate");
    if (lm_ctx_n_past(target) != 0 || (draft != NULL && lm_ctx_n_past(draft) != 0))
        return LM_FAIL(err, LM_E_INPUT, "decode: contexts must start empty");
    const uint64_t need = (uint64_t)n_prompt + p->n_gen + p->n_draft;
    if (need > lm_ctx_n_ctx(target) || (draft != NULL && need > lm_ctx_n_ctx(draft)))
        return LM_FAIL(err, LM_E_INPUT, "decode: %u prompt + %u generated + %u drafted positions "
                       "exceed a context", n_prompt, p->n_gen, p->n_draft);
    if (p->n_draft > 0) {
        if (draft == NULL)
            return LM_FAIL(err, LM_E_INPUT, "decode: %u drafted tokens but no draft context",
                           p->n_draft);
        const uint32_t dv = lm_ctx_model(draft)->hp.n_vocab;
        const uint32_t tv = lm_ctx_model(target)->hp.n_vocab;
        if (dv != tv)
            return LM_FAIL(err, LM_E_INPUT, "decode: draft vocabulary of %u tokens, target %u",
                           dv, tv);
    }
    return LM_OK;
}

/* One speculative round after tokens [0, *n_done): drafts k tokens, verifies them, emits the
 * accepted ones and the target's own next token, rolls back the rest. */
static int spec_round(dec *d, lm_ctx *target, lm_ctx *draft, uint32_t n_prompt,
                      const lm_spec_params *p, uint32_t *n_done, lm_err *err)
{
    const uint32_t left = p->n_gen - *n_done;
    const uint32_t k = p->n_draft < left - 1 ? p->n_draft : left - 1;
    const uint32_t n_seq = n_prompt + *n_done; /* the last one is not in the target's cache */
    int rc = LM_OK;
    if (k > 0) {
        /* the draft catches up on the sequence (its last token included), then drafts */
        const uint32_t dn = lm_ctx_n_past(draft);
        rc = lm_forward(draft, d->seq + dn, n_seq - dn, LM_LOGITS_LAST, d->dlog, err);
        for (uint32_t j = 0; rc == LM_OK && j < k; ++j) {
            d->drafts[j] = lm_argmax(d->dlog, d->n_vocab);
            if (j + 1 < k)
                rc = lm_forward(draft, &d->drafts[j], 1, LM_LOGITS_LAST, d->dlog, err);
        }
        if (rc != LM_OK)
            return rc;
    }
    int32_t *ct = d->ct;
    ct[0] = d->seq[n_seq - 1];
    memcpy(ct + 1, d->drafts, k * sizeof *ct);
    if ((rc = lm_forward(target, ct, k + 1, LM_LOGITS_ALL, d->chunk, err)) != LM_OK)
        return rc;
    uint32_t m = 0; /* drafts accepted */
    for (uint32_t i = 0; i <= k; ++i) {
        const int32_t tok = emit(d, n_prompt, (*n_done)++, d->chunk + (size_t)i * d->n_vocab);
        if (i == k || tok != d->drafts[i])
            break;
        ++m;
    }
    d->out->n_rounds++;
    d->out->n_drafted += k;
    d->out->n_accepted += m;
    /* both caches keep the sequence but its newest token (the round's first token and the
     * accepted drafts: base + 1 + m positions) */
    const uint32_t keep = n_prompt + *n_done - 1;
    uint32_t tkeep = keep;
    if (d->keep_one && keep < lm_ctx_n_past(target))
        tkeep = keep + 1; /* test defect: the first rejected token stays in the target's cache */
    if (tkeep < lm_ctx_n_past(target) && (rc = lm_ctx_rollback(target, tkeep, err)) != LM_OK)
        return rc;
    if (k > 0 && keep < lm_ctx_n_past(draft))
        rc = lm_ctx_rollback(draft, keep, err);
    return rc;
}

int lm_spec_generate(lm_ctx *target, lm_ctx *draft, const int32_t *prompt, uint32_t n_prompt,
                     const lm_spec_params *p, lm_spec_trace *out, lm_err *err)
{
    int rc = check_args(target, draft, n_prompt, p, err);
    if (rc != LM_OK)
        return rc;
    const uint32_t nv = lm_ctx_model(target)->hp.n_vocab;
    dec d = {.n_vocab = nv, .out = out};
    out->n_rounds = out->n_drafted = out->n_accepted = 0;
    if ((rc = lm_penalty_create(&d.pen, &p->pen, nv, err)) != LM_OK)
        return rc;
    d.row = malloc(nv * sizeof(float));
    d.chunk = malloc((size_t)(p->n_draft + 1) * nv * sizeof(float));
    d.dlog = malloc(nv * sizeof(float));
    d.seq = malloc(((size_t)n_prompt + p->n_gen) * sizeof(int32_t));
    d.drafts = malloc((p->n_draft + 1) * sizeof(int32_t));
    d.ct = malloc((p->n_draft + 1) * sizeof(int32_t));
    if (!d.row || !d.chunk || !d.dlog || !d.seq || !d.drafts || !d.ct) {
        dec_free(&d);
        return LM_FAIL(err, LM_E_NOMEM, "decode: out of memory");
    }
    memcpy(d.seq, prompt, n_prompt * sizeof(int32_t));
    const bool spec = p->n_draft > 0;
    const char *bn = lm_ctx_backend_name(target);
    (void)bn; /* read only by the test build's defect switch */
    d.double_accept = spec && LM_DEFECT_ON(bn, LM_DEFECT_HIST_DOUBLE_NEWEST);
    d.keep_one = spec && LM_DEFECT_ON(bn, LM_DEFECT_ROLLBACK_KEEPS_ONE);
    /* test defect (HIST_NO_PROMPT): the speculative history starts empty */
    if (!(spec && LM_DEFECT_ON(bn, LM_DEFECT_HIST_NO_PROMPT)))
        for (uint32_t i = 0; i < n_prompt; ++i)
            lm_penalty_accept(d.pen, prompt[i]); /* the prompt is history, never doubled */

    rc = lm_prefill(target, prompt, n_prompt, p->step, d.chunk, err);
    if (rc == LM_OK && spec)
        rc = lm_prefill(draft, prompt, n_prompt, p->step, d.dlog, err);
    if (rc == LM_OK)
        emit(&d, n_prompt, 0, d.chunk);
    uint32_t n_done = 1;
    while (rc == LM_OK && n_done < p->n_gen) {
        if (spec) {
            rc = spec_round(&d, target, draft, n_prompt, p, &n_done, err);
        } else {
            rc = lm_forward(target, &d.seq[n_prompt + n_done - 1], 1, LM_LOGITS_LAST, d.chunk, err);
            if (rc == LM_OK) {
                emit(&d, n_prompt, n_done++, d.chunk);
                out->n_rounds++;
            }
        }
    }
    dec_free(&d);
    return rc;
}
