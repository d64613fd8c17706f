/* forced.c — a configuration teacher-forced over a fixed token list (contract in forced.h). */
#include "run/forced.h"

#include "kvd_util.h"
#include "run/parallel.h"
#include "run/runner.h"

#include <stdlib.h>
#include <string.h>

int hx_run_forced(hx_capture **out, const lm_model *m, const hx_config *cfg,
                  const hx_forced_request *rq, lm_err *err)
{
    *out = NULL;
    const lm_hparams *hp = &m->hp;
    if (rq->n_tokens == 0 || rq->n_kv == 0 || rq->n_kv > rq->n_tokens || cfg->rot_max != 0)
        return LM_FAIL(err, LM_E_INPUT, "forced run: %u tokens, %u K/V rows%s",
                       (unsigned)rq->n_tokens, (unsigned)rq->n_kv,
                       cfg->rot_max ? ", rotating cache" : "");
    for (uint32_t i = 0; i < rq->n_pos; ++i)
        if (rq->pos[i] >= rq->n_tokens || (i > 0 && rq->pos[i] <= rq->pos[i - 1]))
            return LM_FAIL(err, LM_E_INPUT, "forced run: logits position %u out of order or "
                           "beyond %u tokens", (unsigned)rq->pos[i], (unsigned)rq->n_tokens);
    hx_capture_shape s = {.n_layer = hp->n_layer, .n_kv_head = hp->n_head_kv,
                          .head_dim = hp->head_dim, .n_vocab = hp->n_vocab,
                          .n_prompt = rq->n_kv, .n_tokens = rq->n_tokens, .n_pos = rq->n_pos};
    hx_capture *c = NULL;
    lm_ctx *ctx = NULL;
    float *buf = NULL;
    int rc = hx_capture_create(&c, &s, err);
    if (rc != LM_OK)
        return rc;
    char be_name[LM_BACKEND_NAME_MAX];
    lm_ctx_params cp;
    hx_config_ctx_params(&cp, be_name, sizeof be_name, cfg, rq->n_tokens);
    uint32_t step = cfg->step && cfg->step < rq->n_tokens ? cfg->step : rq->n_tokens;
    size_t nv = hp->n_vocab;
    if ((rc = lm_ctx_create(&ctx, m, &cp, err)) != LM_OK)
        goto done;
    if ((buf = malloc((size_t)step * nv * sizeof *buf)) == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "forced run: out of memory");
        goto done;
    }
    memcpy(c->tokens, rq->tokens, rq->n_tokens * sizeof *rq->tokens);
    memcpy(c->positions, rq->pos, rq->n_pos * sizeof *rq->pos);
    uint32_t next = 0; /* index of the next wanted logits row */
    for (uint32_t done = 0; done < rq->n_tokens && rc == LM_OK;) {
        uint32_t len = rq->n_tokens - done < step ? rq->n_tokens - done : step;
        if ((rc = lm_forward(ctx, rq->tokens + done, len, LM_LOGITS_ALL, buf, err)) != LM_OK)
            break;
        for (; next < rq->n_pos && rq->pos[next] < done + len; ++next)
            memcpy(c->logits + next * nv, buf + (size_t)(rq->pos[next] - done) * nv,
                   nv * sizeof *buf);
        done += len;
    }
    size_t kv = hx_capture_kv_elems(&s);
    for (uint32_t l = 0; l < hp->n_layer && rc == LM_OK; ++l) {
        memcpy(c->k[l], lm_ctx_k(ctx, l), kv * sizeof(float));
        memcpy(c->v[l], lm_ctx_v(ctx, l), kv * sizeof(float));
    }
done:
    free(buf);
    lm_ctx_free(ctx);
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
    const hx_config *cfg;
    uint64_t seed;
    const hx_forced_request *rq;
    hx_member_done_fn done_fn;
    void *user;
    double t0;
    uint32_t done;
} members;

static int member_run(void *ctx, uint32_t i, lm_err *err)
{
    const members *ms = ctx;
    hx_config c = *ms->cfg;
    c.sr_seed = ms->seed + i;
    return hx_run_forced(&ms->mem[i], ms->model, &c, ms->rq, err);
}

static void member_finished(void *ctx, uint32_t i, int rc)
{
    members *ms = ctx;
    if (rc == LM_OK && ms->done_fn != NULL)
        ms->done_fn(ms->user, i, ++ms->done, lm_now_s() - ms->t0);
}

int hx_run_forced_members(hx_capture **mem, uint32_t m, const lm_model *model,
                          const hx_config *cfg, uint64_t seed, const hx_forced_request *rq,
                          uint32_t jobs, hx_member_done_fn done, void *user, lm_err *err)
{
    for (uint32_t i = 0; i < m; ++i)
        mem[i] = NULL;
    members ms = {.mem = mem, .model = model, .cfg = cfg, .seed = seed, .rq = rq,
                  .done_fn = done, .user = user, .t0 = lm_now_s()};
    const int rc = hx_run_jobs(m, jobs, member_run, member_finished, &ms, err);
    if (rc != LM_OK)
        for (uint32_t i = 0; i < m; ++i) {
            hx_capture_free(mem[i]);
            mem[i] = NULL;
        }
    return rc;
}
