/* ref_attn_variants.c — MPFR window/sink softmax, rotating-cache schedules and MoE routing
 * and gating for the reference (rules in ref_variants.h). */
#include "ref_variants.h"
#include "ref_exp.h"

#include <stdlib.h>
#include <string.h>

void ref_softmax_sink(mpfr_t *x, uint64_t n, const float *sink, ref_scratch *s)
{
    /* u = max; acc = sum of exp(x - u); the sink term last */
    mpfr_set(s->u, x[0], MPFR_RNDN);
    for (uint64_t i = 1; i < n; ++i)
        if (mpfr_greater_p(x[i], s->u))
            mpfr_set(s->u, x[i], MPFR_RNDN);
    if (sink != NULL) {
        mpfr_set_flt(s->t, *sink, MPFR_RNDN); /* exact */
        if (mpfr_greater_p(s->t, s->u))
            mpfr_set(s->u, s->t, MPFR_RNDN);
    }
    mpfr_set_zero(s->acc, 1);
    for (uint64_t i = 0; i < n; ++i) {
        mpfr_sub(x[i], x[i], s->u, MPFR_RNDN);
        ref_exp(x[i], x[i]);
        mpfr_add(s->acc, s->acc, x[i], MPFR_RNDN);
    }
    if (sink != NULL) {
        mpfr_set_flt(s->t, *sink, MPFR_RNDN);
        mpfr_sub(s->t, s->t, s->u, MPFR_RNDN);
        ref_exp(s->t, s->t);
        mpfr_add(s->acc, s->acc, s->t, MPFR_RNDN);
    }
    for (uint64_t i = 0; i < n; ++i)
        mpfr_div(x[i], x[i], s->acc, MPFR_RNDN);
}

bool ref_window_visible(uint32_t q_pos, uint32_t k_pos, uint32_t window)
{
    return k_pos <= q_pos && (window == 0 || q_pos - k_pos < window);
}

/* Reduces the sorted set set[0..*count) to at most `limit` entries, keeping the first `keep`
 * and the most recent. */
static void reduce(uint32_t *set, uint32_t *count, uint32_t limit, uint32_t keep)
{
    if (*count <= limit)
        return;
    const uint32_t drop = *count - limit;
    const uint32_t k = keep < limit ? keep : limit;
    memmove(set + k, set + k + drop, (*count - k - drop) * sizeof *set);
    *count = limit;
}

int ref_rot_schedule_make(ref_rot_schedule *out, uint32_t max_size, uint32_t keep, uint32_t step,
                          uint32_t n_prompt, uint32_t n_tokens, lm_err *err)
{
    return ref_rot_schedule_make_turns(out, max_size, keep, step, n_prompt, 0, n_prompt,
                                       n_tokens, err);
}

/* Size of the chunk that starts at prompt position p: chunks of `step` inside the segment
 * [0, turn_at), single tokens inside [turn_at, turn_at + turn_d), chunks of `step` inside
 * [turn_at + turn_d, n_prompt). */
static uint32_t prompt_chunk(uint32_t p, uint32_t step, uint32_t turn_at, uint32_t turn_d,
                             uint32_t n_prompt)
{
    if (p >= turn_at && p < turn_at + turn_d)
        return 1;
    const uint32_t end = p < turn_at ? turn_at : n_prompt;
    return end - p < step ? end - p : step;
}

int ref_rot_schedule_make_turns(ref_rot_schedule *out, uint32_t max_size, uint32_t keep,
                                uint32_t step, uint32_t turn_at, uint32_t turn_d,
                                uint32_t n_prompt, uint32_t n_tokens, lm_err *err)
{
    memset(out, 0, sizeof *out);
    if (max_size < 2 || keep >= max_size || n_prompt == 0 || n_prompt > n_tokens ||
        turn_at == 0 || (uint64_t)turn_at + turn_d > n_prompt)
        return LM_FAIL(err, LM_E_INPUT,
                       "reference: rotating cache max_size %u keep %u prompt %u/%u turn %u+%u is "
                       "invalid", max_size, keep, n_prompt, n_tokens, turn_at, turn_d);
    if (step == 0 || step > n_prompt)
        step = n_prompt;
    const uint64_t per = (uint64_t)max_size + step; /* bound of one token's list */
    out->n_tokens = n_tokens;
    out->start = malloc(((size_t)n_tokens + 1) * sizeof *out->start);
    out->vis = malloc((size_t)n_tokens * per * sizeof *out->vis);
    uint32_t *set = malloc(per * sizeof *set);
    if (out->start == NULL || out->vis == NULL || set == NULL) {
        free(set);
        ref_rot_schedule_free(out);
        return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory for a rotating schedule");
    }
    uint32_t count = 0;
    uint64_t at = 0;
    for (uint32_t p = 0; p < n_tokens;) {
        const uint32_t n = p < n_prompt ? prompt_chunk(p, step, turn_at, turn_d, n_prompt) : 1;
        if (n > 1) {
            reduce(set, &count, max_size - 1, keep);
            for (uint32_t i = 0; i < n; ++i) {
                set[count + i] = p + i;
                out->start[p + i] = at;
                memcpy(out->vis + at, set, (size_t)(count + i + 1) * sizeof *set);
                at += count + i + 1;
            }
            count += n;
        } else {
            reduce(set, &count, max_size, keep);
            if (count == max_size) /* circular overwrite of the oldest after keep */
                reduce(set, &count, max_size - 1, keep);
            set[count++] = p;
            out->start[p] = at;
            memcpy(out->vis + at, set, (size_t)count * sizeof *set);
            at += count;
        }
        p += n;
    }
    out->start[n_tokens] = at;
    free(set);
    return LM_OK;
}

void ref_rot_schedule_free(ref_rot_schedule *s)
{
    if (s == NULL)
        return;
    free(s->start);
    free(s->vis);
    memset(s, 0, sizeof *s);
}

/* a ranks before b: larger first, NaN last, equal -> lower id */
static bool ranks_before(mpfr_t *l, uint32_t a, uint32_t b)
{
    const bool na = mpfr_nan_p(l[a]), nb = mpfr_nan_p(l[b]);
    if (na != nb)
        return !na;
    if (!na && !mpfr_equal_p(l[a], l[b]))
        return mpfr_greater_p(l[a], l[b]);
    return a < b;
}

void ref_moe_topk(uint32_t *sel, mpfr_t *logits, uint32_t n_expert, uint32_t k)
{
    /* k passes of "best not yet chosen": simple and obviously right */
    for (uint32_t r = 0; r < k; ++r) {
        uint32_t best = UINT32_MAX;
        for (uint32_t e = 0; e < n_expert; ++e) {
            bool taken = false;
            for (uint32_t q = 0; q < r; ++q)
                taken = taken || sel[q] == e;
            if (!taken && (best == UINT32_MAX || ranks_before(logits, e, best)))
                best = e;
        }
        sel[r] = best;
    }
}

void ref_moe_margin(mpfr_t out, mpfr_t *logits, uint32_t n_expert, const uint32_t *sel,
                    uint32_t k)
{
    if (k >= n_expert) {
        mpfr_set_inf(out, 1);
        return;
    }
    int32_t best = -1;
    for (uint32_t e = 0; e < n_expert; ++e) {
        bool taken = false;
        for (uint32_t q = 0; q < k; ++q)
            taken = taken || sel[q] == e;
        if (!taken && !mpfr_nan_p(logits[e]) &&
            (best < 0 || mpfr_greater_p(logits[e], logits[best])))
            best = (int32_t)e;
    }
    if (best < 0) {
        mpfr_set_inf(out, 1);
        return;
    }
    mpfr_sub(out, logits[sel[k - 1]], logits[best], MPFR_RNDN);
}

void ref_moe_gate(mpfr_t *w, mpfr_t *logits, uint32_t n_expert, const uint32_t *sel, uint32_t k,
                  int gating, ref_scratch *s)
{
    /* u = the largest logit (sel[0]); exponentials of (logit - u) */
    mpfr_set(s->u, logits[sel[0]], MPFR_RNDN);
    mpfr_set_zero(s->acc, 1);
    if (gating == 0) {
        for (uint32_t r = 0; r < k; ++r) {
            mpfr_sub(w[r], logits[sel[r]], s->u, MPFR_RNDN);
            ref_exp(w[r], w[r]);
            mpfr_add(s->acc, s->acc, w[r], MPFR_RNDN);
        }
    } else {
        for (uint32_t e = 0; e < n_expert; ++e) {
            mpfr_sub(s->t, logits[e], s->u, MPFR_RNDN);
            ref_exp(s->t, s->t);
            mpfr_add(s->acc, s->acc, s->t, MPFR_RNDN);
        }
        for (uint32_t r = 0; r < k; ++r) {
            mpfr_sub(w[r], logits[sel[r]], s->u, MPFR_RNDN);
            ref_exp(w[r], w[r]);
            mpfr_div(w[r], w[r], s->acc, MPFR_RNDN);
        }
        if (gating != 1)
            return;
        mpfr_set_zero(s->acc, 1);
        for (uint32_t r = 0; r < k; ++r)
            mpfr_add(s->acc, s->acc, w[r], MPFR_RNDN);
    }
    for (uint32_t r = 0; r < k; ++r)
        mpfr_div(w[r], w[r], s->acc, MPFR_RNDN);
}

bool ref_moe_expert_used(const uint32_t *sel, uint64_t n_sel, uint32_t x)
{
    for (uint64_t i = 0; i < n_sel; ++i)
        if (sel[i] == x)
            return true;
    return false;
}
