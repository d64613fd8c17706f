/* coresident.c — the co-resident sequences of batch=B (contract in coresident.h). */
#include "run/coresident.h"

#include "run/drive.h"

#include <stdlib.h>
#include <string.h>

/* The neighbours' seed: one fixed stream, so every configuration meets the same ones. */
#define CORESIDENT_SEED UINT64_C(0x636f7265736964)

typedef struct neighbour {
    lm_ctx *ctx;
    int32_t *tokens;   /* [n_prompt + n_decode] its prompt, then its decode inputs */
    uint32_t n_prompt, n_decode;
    uint32_t fed;      /* tokens fed so far */
} neighbour;

struct hx_coresident {
    bool decode_mode;
    uint32_t n;
    neighbour s[LM_BATCH_MAX - 1];
};

static uint64_t splitmix(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

uint32_t hx_coresident_rows(const hx_config *cfg, uint32_t n_ctx)
{
    const uint64_t rows = (uint64_t)(cfg->batch > 1 ? cfg->batch : 1) * n_ctx;
    return rows < UINT32_MAX ? (uint32_t)rows : UINT32_MAX;
}

void hx_coresident_free(hx_coresident *c)
{
    if (c == NULL)
        return;
    for (uint32_t j = 0; j < c->n; ++j) {
        lm_ctx_free(c->s[j].ctx);
        free(c->s[j].tokens);
    }
    free(c);
}

/* Feeds neighbour j's prompt alone (decode mode's start). */
static int prefill_alone(neighbour *s, lm_err *err)
{
    s->fed = s->n_prompt;
    return lm_forward(s->ctx, s->tokens, s->n_prompt, LM_LOGITS_NONE, NULL, err);
}

int hx_coresident_create(hx_coresident **out, const lm_model *m, const hx_config *cfg,
                         uint32_t n_ctx, lm_err *err)
{
    *out = NULL;
    if (cfg->batch < 2)
        return LM_OK;
    hx_coresident *c = calloc(1, sizeof *c);
    if (c == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "batch: out of memory");
    c->decode_mode = cfg->batch_decode;
    /* The neighbours run what the sequence under test runs, alone in their own contexts. */
    hx_config own = *cfg;
    own.batch = 0;
    own.batch_decode = false;
    own.prefix = own.prefix_step = own.turn = 0;
    uint64_t state = CORESIDENT_SEED;
    const uint32_t half = n_ctx / 2 > 1 ? n_ctx / 2 : 1;
    const uint32_t n_vocab = m->hp.n_vocab;
    int rc = LM_OK;
    for (uint32_t j = 0; j + 1 < cfg->batch && rc == LM_OK; ++j) {
        neighbour *s = &c->s[c->n++];
        s->n_prompt = 1 + (uint32_t)(splitmix(&state) % half);
        s->n_decode = n_ctx;
        if ((s->tokens = malloc(((size_t)s->n_prompt + s->n_decode) * sizeof *s->tokens)) == NULL) {
            rc = LM_FAIL(err, LM_E_NOMEM, "batch: out of memory");
            break;
        }
        for (uint32_t i = 0; i < s->n_prompt + s->n_decode; ++i)
            s->tokens[i] = (int32_t)(splitmix(&state) % n_vocab);
        rc = hx_drive_open_ctx(&s->ctx, m, &own, s->n_prompt + s->n_decode, 0, err);
        if (rc == LM_OK && c->decode_mode)
            rc = prefill_alone(s, err);
    }
    if (rc != LM_OK) {
        hx_coresident_free(c);
        return rc;
    }
    *out = c;
    return LM_OK;
}

int hx_coresident_reset(hx_coresident *c, lm_err *err)
{
    int rc = LM_OK;
    for (uint32_t j = 0; c != NULL && j < c->n && rc == LM_OK; ++j) {
        lm_ctx_reset(c->s[j].ctx);
        c->s[j].fed = 0;
        if (c->decode_mode)
            rc = prefill_alone(&c->s[j], err);
    }
    return rc;
}

int hx_coresident_forward(hx_coresident *c, lm_ctx *lead, const int32_t *tokens, uint32_t n,
                          lm_logits_mode mode, float *logits, lm_err *err)
{
    lm_seq_chunk q[LM_BATCH_MAX];
    q[0] = (lm_seq_chunk){lead, tokens, n, mode, logits};
    uint32_t k = 1;
    for (uint32_t j = 0; c != NULL && j < c->n; ++j) {
        neighbour *s = &c->s[j];
        const uint32_t left = s->n_prompt + s->n_decode - s->fed;
        uint32_t rows = s->fed < s->n_prompt ? s->n_prompt - s->fed : 1; /* prompt, else decode */
        rows = rows < n ? rows : n;
        if (left == 0 || rows > lm_ctx_n_ctx(s->ctx) - lm_ctx_n_past(s->ctx))
            continue; /* a finished request */
        q[k++] = (lm_seq_chunk){s->ctx, s->tokens + s->fed, rows, LM_LOGITS_NONE, NULL};
    }
    const int rc = lm_forward_batch(q, k, err);
    for (uint32_t i = 1; rc == LM_OK && i < k; ++i)
        for (uint32_t j = 0; j < c->n; ++j)
            if (c->s[j].ctx == q[i].ctx)
                c->s[j].fed += q[i].n;
    return rc;
}
