/* penalties.c — repetition / frequency / presence penalties over a window of the last N
 * accepted tokens, as llama.cpp's penalties sampler defines them (kvd_speculative.h). The window is
 * a ring buffer; counts[id] is the number of occurrences of id in it. */
#include "kvd_speculative.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct lm_penalty {
    lm_penalty_params p;
    uint32_t n_vocab;
    int32_t *ring;     /* [repeat_last_n] */
    uint32_t head;     /* index of the oldest entry */
    uint32_t len;      /* entries in use */
    uint32_t *counts;  /* [n_vocab] */
    uint32_t *stamp;   /* [n_vocab] apply() call that last visited id (visits each id once) */
    uint32_t n_apply;  /* apply() calls so far */
};

lm_penalty_params lm_penalty_defaults(void)
{
    return (lm_penalty_params){.repeat_penalty = 1.0f, .repeat_last_n = 64};
}

int lm_penalty_create(lm_penalty **out, const lm_penalty_params *p, uint32_t n_vocab, lm_err *err)
{
    *out = NULL;
    if (!isfinite(p->repeat_penalty) || !(p->repeat_penalty > 0.0f) ||
        !isfinite(1.0f / p->repeat_penalty))
        return LM_FAIL(err, LM_E_INPUT, "repeat-penalty %g: must be finite and greater than 0",
                       (double)p->repeat_penalty);
    if (!isfinite(p->frequency_penalty))
        return LM_FAIL(err, LM_E_INPUT, "frequency-penalty must be finite");
    if (!isfinite(p->presence_penalty))
        return LM_FAIL(err, LM_E_INPUT, "presence-penalty must be finite");
    if (n_vocab == 0)
        return LM_FAIL(err, LM_E_INPUT, "penalties: empty vocabulary");
    lm_penalty *s = calloc(1, sizeof *s);
    if (s == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "penalties: out of memory");
    s->p = *p;
    s->n_vocab = n_vocab;
    s->ring = malloc((p->repeat_last_n ? p->repeat_last_n : 1) * sizeof *s->ring);
    s->counts = calloc(n_vocab, sizeof *s->counts);
    s->stamp = calloc(n_vocab, sizeof *s->stamp);
    if (s->ring == NULL || s->counts == NULL || s->stamp == NULL) {
        lm_penalty_free(s);
        return LM_FAIL(err, LM_E_NOMEM, "penalties: out of memory");
    }
    *out = s;
    return LM_OK;
}

void lm_penalty_free(lm_penalty *s)
{
    if (s == NULL)
        return;
    free(s->ring);
    free(s->counts);
    free(s->stamp);
    free(s);
}

void lm_penalty_reset(lm_penalty *s)
{
    s->head = s->len = 0;
    memset(s->counts, 0, s->n_vocab * sizeof *s->counts);
}

bool lm_penalty_enabled(const lm_penalty *s)
{
    return s->p.repeat_last_n != 0 &&
           !(s->p.repeat_penalty == 1.0f && s->p.frequency_penalty == 0.0f &&
             s->p.presence_penalty == 0.0f);
}

void lm_penalty_accept(lm_penalty *s, int32_t token)
{
    const uint32_t n = s->p.repeat_last_n;
    if (n == 0 || token < 0 || (uint32_t)token >= s->n_vocab)
        return;
    if (s->len == n) { /* full: the oldest leaves */
        s->counts[s->ring[s->head]]--;
        s->head = (s->head + 1) % n;
        --s->len;
    }
    s->ring[(s->head + s->len) % n] = token;
    ++s->len;
    s->counts[token]++;
}

void lm_penalty_apply(lm_penalty *s, float *logits)
{
    if (!lm_penalty_enabled(s))
        return;
    const float rp = s->p.repeat_penalty, fp = s->p.frequency_penalty;
    const float pp = s->p.presence_penalty;
    if (++s->n_apply == 0) { /* stamps wrapped: start over */
        memset(s->stamp, 0, s->n_vocab * sizeof *s->stamp);
        s->n_apply = 1;
    }
    /* each distinct id of the window once (ids are independent: the visiting order changes
     * no result) */
    for (uint32_t i = 0; i < s->len; ++i) {
        const int32_t id = s->ring[(s->head + i) % s->p.repeat_last_n];
        if (s->stamp[id] == s->n_apply)
            continue;
        s->stamp[id] = s->n_apply;
        const uint32_t c = s->counts[id];
        float l = logits[id];
        l = l <= 0.0f ? l * rp : l / rp;
        logits[id] = l - ((float)c * fp + (float)(c > 0) * pp);
    }
}

uint32_t lm_penalty_history(const lm_penalty *s, int32_t *out)
{
    for (uint32_t i = 0; i < s->len; ++i)
        out[i] = s->ring[(s->head + i) % s->p.repeat_last_n];
    return s->len;
}

static uint64_t fnv_u32(uint64_t h, uint32_t w)
{
    for (int b = 0; b < 4; ++b) {
        h ^= (w >> (8 * b)) & 0xffu;
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

uint64_t lm_penalty_history_hash(const lm_penalty *s)
{
    uint64_t h = fnv_u32(UINT64_C(0xcbf29ce484222325), s->len);
    for (uint32_t i = 0; i < s->len; ++i)
        h = fnv_u32(h, (uint32_t)s->ring[(s->head + i) % s->p.repeat_last_n]);
    return h;
}
