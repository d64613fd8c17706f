/* block_sampler.c — the iterative masked block sampler of kvd_block.h. */
#include "kvd_block.h"
#include "kvd_speculative.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct cand {
    int32_t tok;
    double conf, ent;
    double gap; /* top-1 minus top-2 logit over ids != mask */
} cand;

/* Candidate of one row: argmax over ids != mask (ties to the lower id), its softmax
 * probability and the row's entropy, in double: max subtracted, exp, sums left to right. */
static cand score_row(const float *row, uint32_t nv, int32_t mask)
{
    cand c = {.tok = -1};
    int32_t second = -1;
    double mx = -INFINITY;
    for (uint32_t i = 0; i < nv; ++i)
        mx = (double)row[i] > mx ? (double)row[i] : mx;
    double z = 0.0;
    for (uint32_t i = 0; i < nv; ++i)
        z += exp((double)row[i] - mx);
    double ent = 0.0;
    for (uint32_t i = 0; i < nv; ++i) {
        const double p = exp((double)row[i] - mx) / z;
        ent -= p > 0.0 ? p * log(p) : 0.0;
        if ((int32_t)i == mask)
            continue;
        if (c.tok < 0 || row[i] > row[c.tok]) {
            second = c.tok;
            c.tok = (int32_t)i;
        } else if (second < 0 || row[i] > row[second]) {
            second = (int32_t)i;
        }
    }
    c.gap = second < 0 ? (double)INFINITY : (double)row[c.tok] - (double)row[second];
    c.conf = exp((double)row[c.tok] - mx) / z;
    c.ent = ent;
    return c;
}

static bool passes(const lm_block_params *p, const cand *c)
{
    return p->criterion == LM_BLOCK_ENTROPY ? c->ent <= p->threshold : c->conf >= p->threshold;
}

static bool better(const lm_block_params *p, const cand *a, const cand *b)
{
    return p->criterion == LM_BLOCK_ENTROPY ? a->ent < b->ent : a->conf > b->conf;
}

static double score(const lm_block_params *p, const cand *c)
{
    return p->criterion == LM_BLOCK_ENTROPY ? c->ent : c->conf;
}

static void note_min(double *m, double v)
{
    *m = v < *m ? v : *m;
}

typedef struct blk {
    float *logits;   /* [block][n_vocab] */
    cand *cands;     /* [block] */
    int32_t *prev;   /* [block] previous iteration's candidates (-1: none yet) */
} blk;

/* LOW_CONFIDENCE: commits the k masked positions of highest confidence (ties to the lower
 * position) at iteration t; notes the margin to the best position left masked. */
static uint32_t commit_top(const lm_block_params *p, int32_t *tok, uint32_t *iter, blk *w,
                           uint32_t t, uint32_t k, lm_block_trace *tr)
{
    double last = INFINITY;
    for (uint32_t n = 0; n < k; ++n) {
        int64_t best = -1;
        for (uint32_t i = 0; i < p->block; ++i)
            if (iter[i] == 0 && (best < 0 || w->cands[i].conf > w->cands[best].conf))
                best = i;
        tok[best] = w->cands[best].tok;
        iter[best] = t;
        last = w->cands[best].conf;
    }
    for (uint32_t i = 0; i < p->block; ++i)
        if (iter[i] == 0 && last - w->cands[i].conf < tr->min_commit_gap)
            tr->min_commit_gap = last - w->cands[i].conf;
    return k;
}

/* One block at tokens [0, B) of out (already the mask); cache holds the prefix at base. */
static int run_block(lm_ctx *c, const lm_block_params *p, int32_t *tok, uint32_t *iter,
                     blk *w, lm_block_trace *tr, lm_err *err)
{
    const uint32_t B = p->block, nv = lm_ctx_model(c)->hp.n_vocab;
    const uint32_t base = lm_ctx_n_past(c);
    uint32_t left = B;
    for (uint32_t i = 0; i < B; ++i)
        w->prev[i] = -1;
    for (uint32_t t = 1; left > 0; ++t) {
        int rc = lm_forward(c, tok, B, LM_LOGITS_ALL, w->logits, err);
        if (rc == LM_OK)
            rc = lm_ctx_rollback(c, base, err);
        if (rc != LM_OK)
            return rc;
        ++tr->n_iters;
        bool stable = true;
        int64_t best = -1, runner = -1;
        for (uint32_t i = 0; i < B; ++i) {
            if (iter[i] != 0)
                continue;
            w->cands[i] = score_row(w->logits + (size_t)i * nv, nv, p->mask_id);
            stable = stable && w->cands[i].tok == w->prev[i];
            w->prev[i] = w->cands[i].tok;
            note_min(&tr->min_logit_gap, w->cands[i].gap);
            if (p->criterion != LM_BLOCK_LOW_CONFIDENCE)
                note_min(&tr->min_commit_gap, fabs(score(p, &w->cands[i]) - p->threshold));
            if (best < 0 || better(p, &w->cands[i], &w->cands[best])) {
                runner = best;
                best = i;
            } else if (runner < 0 || better(p, &w->cands[i], &w->cands[runner])) {
                runner = i;
            }
        }
        if (p->criterion == LM_BLOCK_LOW_CONFIDENCE) {
            const uint32_t rest = t < p->max_iters ? p->max_iters - t + 1 : 1;
            left -= commit_top(p, tok, iter, w, t, (left + rest - 1) / rest, tr);
            continue;
        }
        const bool all = stable || t >= p->max_iters;
        uint32_t committed = 0;
        for (uint32_t i = 0; i < B; ++i)
            if (iter[i] == 0 && (all || passes(p, &w->cands[i]))) {
                tok[i] = w->cands[i].tok;
                iter[i] = t;
                ++committed;
            }
        if (committed == 0) {
            if (runner >= 0)
                note_min(&tr->min_commit_gap,
                         fabs(score(p, &w->cands[best]) - score(p, &w->cands[runner])));
            tok[best] = w->cands[best].tok;
            iter[best] = t;
            committed = 1;
        }
        left -= committed;
    }
    return lm_forward(c, tok, B, LM_LOGITS_NONE, NULL, err); /* the block becomes context */
}

int lm_block_generate(lm_ctx *c, const int32_t *prompt, uint32_t n_prompt,
                      const lm_block_params *p, lm_block_trace *out, lm_err *err)
{
    const uint32_t nv = lm_ctx_model(c)->hp.n_vocab;
    if (p->block == 0 || p->n_blocks == 0 || p->max_iters == 0 || n_prompt == 0)
        return LM_FAIL(err, LM_E_INPUT, "block sampler: block, blocks, iterations and prompt "
                       "must be >= 1");
    if (p->mask_id < 0 || (uint32_t)p->mask_id >= nv)
        return LM_FAIL(err, LM_E_INPUT, "block sampler: mask token %d outside the vocabulary",
                       (int)p->mask_id);
    if (!(p->threshold >= 0.0) || (p->criterion == LM_BLOCK_CONFIDENCE && p->threshold > 1.0))
        return LM_FAIL(err, LM_E_INPUT, "block sampler: threshold %g out of range", p->threshold);
    if (lm_ctx_n_past(c) != 0 ||
        (uint64_t)n_prompt + (uint64_t)p->block * p->n_blocks > lm_ctx_n_ctx(c))
        return LM_FAIL(err, LM_E_INPUT, "block sampler: the context must be empty and hold %u + "
                       "%u x %u positions", n_prompt, p->n_blocks, p->block);
    blk w = {0};
    w.logits = malloc((size_t)p->block * nv * sizeof *w.logits);
    w.cands = malloc(p->block * sizeof *w.cands);
    w.prev = malloc(p->block * sizeof *w.prev);
    float *last = malloc(nv * sizeof *last);
    int rc = LM_OK;
    if (!w.logits || !w.cands || !w.prev || !last)
        rc = LM_FAIL(err, LM_E_NOMEM, "block sampler: out of memory");
    if (rc == LM_OK)
        rc = lm_prefill(c, prompt, n_prompt, p->step, last, err);
    out->n_iters = 0;
    out->min_logit_gap = out->min_commit_gap = INFINITY;
    lm_ctx_set_bidir(c, true);
    for (uint32_t b = 0; rc == LM_OK && b < p->n_blocks; ++b) {
        int32_t *tok = out->tokens + (size_t)b * p->block;
        uint32_t *iter = out->iter + (size_t)b * p->block;
        for (uint32_t i = 0; i < p->block; ++i) {
            tok[i] = p->mask_id;
            iter[i] = 0;
        }
        rc = run_block(c, p, tok, iter, &w, out, err);
    }
    lm_ctx_set_bidir(c, false);
    free(w.logits);
    free(w.cands);
    free(w.prev);
    free(last);
    return rc;
}
