/* forced.c — a configuration teacher-forced over a fixed token list (contract in forced.h). */
#include "run/forced.h"

#include "kvd_util.h"
#include "run/drive.h"
#include "run/ensemble.h"
#include "run/runner.h"

#include <stdlib.h>
#include <string.h>

/* Keeps the rows of the request's logits positions that a forward call computed. */
typedef struct keep {
    hx_capture *c;
    const hx_forced_request *rq;
    uint32_t next; /* index of the next wanted row */
} keep;

static int keep_rows(void *user, const lm_ctx *ctx, const hx_chunk *ch, lm_err *err)
{
    (void)ctx;
    (void)err;
    keep *k = user;
    const size_t nv = k->c->shape.n_vocab;
    for (; k->next < k->rq->n_pos && k->rq->pos[k->next] < ch->pos0 + ch->n; ++k->next)
        memcpy(k->c->logits + k->next * nv, ch->logits + (size_t)(k->rq->pos[k->next] - ch->pos0) * nv,
               nv * sizeof *ch->logits);
    return LM_OK;
}

/* The probe keeping the "residual" rows of positions below n_kv into c->hidden[layer + 1]. */
typedef struct keep_hidden {
    hx_capture *c;
    uint32_t n_kv;
} keep_hidden;

static void hidden_rows(void *user, uint32_t layer, const char *op, uint32_t pos0, uint32_t n,
                        const float *x, size_t row_elems)
{
    const keep_hidden *kh = user;
    if (strcmp(op, "residual") == 0)
        hx_capture_keep_rows(kh->c->hidden + 1, kh->c->shape.n_layer, kh->n_kv, layer, pos0, n,
                             x, row_elems);
}

/* Room in c for the hidden states after every layer (hidden[0], the embedding, NULL). */
static int alloc_hidden(hx_capture *c, uint32_t n_embd, lm_err *err)
{
    c->n_embd = n_embd;
    c->hidden = calloc(c->shape.n_layer + 1, sizeof *c->hidden);
    for (uint32_t l = 1; c->hidden != NULL && l <= c->shape.n_layer; ++l)
        if ((c->hidden[l] = calloc((size_t)c->shape.n_prompt * n_embd, sizeof(float))) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "forced run: out of memory");
    return c->hidden ? LM_OK : LM_FAIL(err, LM_E_NOMEM, "forced run: out of memory");
}

int hx_run_forced(hx_capture **out, const lm_model *m, const hx_config *cfg,
                  const hx_forced_request *rq, lm_err *err)
{
    *out = NULL;
    const lm_hparams *hp = &m->hp;
    if (rq->n_tokens == 0 || rq->n_kv == 0 || rq->n_kv > rq->n_tokens)
        return LM_FAIL(err, LM_E_INPUT, "forced run: %u tokens, %u K/V rows",
                       (unsigned)rq->n_tokens, (unsigned)rq->n_kv);
    for (uint32_t i = 0; i < rq->n_pos; ++i)
        if (rq->pos[i] >= rq->n_tokens || (i > 0 && rq->pos[i] <= rq->pos[i - 1]))
            return LM_FAIL(err, LM_E_INPUT, "forced run: logits position %u out of order or "
                           "beyond %u tokens", (unsigned)rq->pos[i], (unsigned)rq->n_tokens);
    hx_capture_shape s = {.n_layer = hp->n_layer, .n_kv_head = hp->n_head_kv,
                          .head_dim = hp->head_dim, .n_vocab = hp->n_vocab,
                          .n_prompt = rq->n_kv, .n_tokens = rq->n_tokens, .n_pos = rq->n_pos};
    hx_capture *c = NULL;
    hx_drive *d = NULL;
    /* The K/V rows are read from the cache's slots: a rotating cache evicts them. */
    int rc = hx_drive_open(&d, m, cfg, rq->n_tokens, HX_KEYS_PLAIN & ~HX_KEY_ROT, "forced run",
                           err);
    if (rc == LM_OK)
        rc = hx_capture_create(&c, &s, err);
    keep_hidden kh = {.c = c, .n_kv = rq->n_kv};
    if (rc == LM_OK && rq->hidden && (rc = alloc_hidden(c, hp->n_embd, err)) == LM_OK)
        lm_ctx_set_probe(hx_drive_ctx(d), hidden_rows, &kh);
    if (rc == LM_OK) {
        memcpy(c->tokens, rq->tokens, rq->n_tokens * sizeof *rq->tokens);
        memcpy(c->positions, rq->pos, rq->n_pos * sizeof *rq->pos);
        keep k = {.c = c, .rq = rq};
        rc = hx_drive_feed(d, rq->tokens, rq->n_tokens, HX_ROWS_ALL, NULL, keep_rows, &k, err);
    }
    size_t kv = rc == LM_OK ? hx_capture_kv_elems(&s) : 0;
    for (uint32_t l = 0; l < hp->n_layer && rc == LM_OK; ++l) {
        memcpy(c->k[l], lm_ctx_k(hx_drive_ctx(d), l), kv * sizeof(float));
        memcpy(c->v[l], lm_ctx_v(hx_drive_ctx(d), l), kv * sizeof(float));
    }
    hx_drive_close(d);
    if (rc != LM_OK) {
        hx_capture_free(c);
        return rc;
    }
    *out = c;
    return LM_OK;
}

/* The members' shared inputs and their results. */
typedef struct members {
    hx_capture **mem; /* [m] */
    const lm_model *model;
    const hx_forced_request *rq;
    hx_member_done_fn done_fn;
    void *user;
    double t0;
    uint32_t done;
} members;

static int member_run(void *ctx, const hx_config *member, uint32_t i, lm_err *err)
{
    const members *ms = ctx;
    return hx_run_forced(&ms->mem[i], ms->model, member, ms->rq, err);
}

static void member_finished(void *ctx, uint32_t i, int rc)
{
    members *ms = ctx;
    if (rc == LM_OK && ms->done_fn != NULL)
        ms->done_fn(ms->user, i, ++ms->done, lm_now_s() - ms->t0);
}

int hx_run_forced_members(hx_capture **mem, uint32_t m, const lm_model *model,
                          const char *profile, uint64_t seed, const hx_forced_request *rq,
                          uint32_t jobs, hx_member_done_fn done, void *user, lm_err *err)
{
    for (uint32_t i = 0; i < m; ++i)
        mem[i] = NULL;
    members ms = {.mem = mem, .model = model, .rq = rq, .done_fn = done, .user = user,
                  .t0 = lm_now_s()};
    const int rc = hx_ensemble_run_engine(m, seed, profile, jobs, member_run, member_finished,
                                          &ms, err);
    if (rc != LM_OK)
        for (uint32_t i = 0; i < m; ++i) {
            hx_capture_free(mem[i]);
            mem[i] = NULL;
        }
    return rc;
}
