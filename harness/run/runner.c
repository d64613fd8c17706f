/* runner.c — one engine configuration -> hx_capture (prefill K/V, greedy tokens, forced logits). */
#include "run/runner.h"

#include "kvd_util.h"
#include "run/drive.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

/* A rotating cache evicts positions during prefill, so its slots cannot be the capture. The
 * capture instead holds, for every prompt position in logical order, the K (after RoPE) and V
 * rows the engine computed for it under this schedule, taken from the probe as each chunk
 * writes them (capture.h). With the plain cache these are bit for bit the cached rows. */
typedef struct kv_probe {
    hx_capture *c;
    uint32_t n_prompt;
} kv_probe;

static void kv_probe_fn(void *user, uint32_t layer, const char *op, uint32_t pos0, uint32_t n,
                        const float *x, size_t row_elems)
{
    kv_probe *kp = user; /* x [n][row_elems], row_elems = n_kv_head * head_dim */
    float **dst;
    if (strcmp(op, "k") == 0)
        dst = kp->c->k;
    else if (strcmp(op, "v") == 0)
        dst = kp->c->v;
    else
        return;
    hx_capture_keep_rows(dst, kp->c->shape.n_layer, kp->n_prompt, layer, pos0, n, x, row_elems);
}

/* Feeds forced[from..n_forced) one at a time, storing row j+1 after forced[j]. */
static int feed_forced(hx_drive *d, hx_capture *c, const hx_run_request *rq, uint32_t from,
                       lm_err *err)
{
    size_t nv = c->shape.n_vocab;
    for (uint32_t j = from; j < rq->n_forced; ++j) {
        int rc = hx_drive_decode(d, rq->forced[j], c->logits + (j + 1) * nv, err);
        if (rc != LM_OK)
            return rc;
    }
    return LM_OK;
}

/* The logits rows of every prompt position (rows [n_prompt][n_vocab]), copied from each
 * forward call of the feed. */
static int keep_rows(void *user, const lm_ctx *ctx, const hx_chunk *ch, lm_err *err)
{
    (void)err;
    float *rows = user;
    const size_t nv = lm_ctx_model(ctx)->hp.n_vocab;
    memcpy(rows + (size_t)ch->pos0 * nv, ch->logits, (size_t)ch->n * nv * sizeof *rows);
    return LM_OK;
}

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v /* [n] */, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

bool hx_time_repeat_due(int n, double prefill_s, double decode_s)
{
    return n < HX_TIME_MAX_REPS && prefill_s + decode_s < HX_TIME_ENOUGH_S &&
           (n < HX_TIME_MIN_REPS || prefill_s < HX_TIME_MIN_S || decode_s < HX_TIME_MIN_S);
}

/* Repeats the prefill and the decode of the captured tokens on ctx (the captured run counts
 * as the first repetition) until HX_TIME_MIN_S / HX_TIME_MIN_REPS are met or HX_TIME_ENOUGH_S
 * has run; st gets the medians. The results are not looked at: the capture is already complete. */
static int time_repeats(hx_drive *d, const hx_capture *c, const hx_run_request *rq, float *cur,
                        hx_run_stats *st, lm_err *err)
{
    double pre[HX_TIME_MAX_REPS], dec[HX_TIME_MAX_REPS];
    double tp = pre[0] = st->prefill_s, td = dec[0] = st->decode_s;
    int n = 1;
    while (!rq->time_once && hx_time_repeat_due(n, tp, td)) {
        int rc = hx_drive_reset(d, err);
        double t0 = lm_now_s();
        if (rc == LM_OK)
            rc = hx_drive_feed(d, rq->prompt, rq->n_prompt, HX_ROWS_FINAL, cur, NULL, NULL, err);
        if (rc != LM_OK)
            return rc;
        tp += pre[n] = lm_now_s() - t0;
        t0 = lm_now_s();
        for (uint32_t j = 0; j < st->n_decode; ++j)
            if ((rc = hx_drive_decode(d, c->tokens[rq->n_prompt + j], cur, err)) != LM_OK)
                return rc;
        td += dec[n] = lm_now_s() - t0;
        ++n;
    }
    st->prefill_s = median(pre, n);
    st->decode_s = median(dec, n);
    return LM_OK;
}

int hx_run_capture(hx_capture **out, hx_run_stats *stats, const lm_model *m, const hx_config *cfg,
                   const hx_run_request *rq, lm_err *err)
{
    *out = NULL;
    memset(stats, 0, sizeof *stats);
    const lm_hparams *hp = &m->hp;
    if (rq->n_prompt == 0)
        return LM_FAIL(err, LM_E_INPUT, "run: empty prompt");
    uint32_t tail = rq->n_gen > rq->n_forced ? rq->n_gen : rq->n_forced;
    uint64_t need = (uint64_t)rq->n_prompt + tail;
    if (need > UINT32_MAX || (hp->n_ctx_train != 0 && need > hp->n_ctx_train))
        return LM_FAIL(err, LM_E_INPUT, "run: %u prompt tokens + %u more exceed the model's "
                                        "context of %u", (unsigned)rq->n_prompt, (unsigned)tail,
                       (unsigned)hp->n_ctx_train);
    hx_capture_shape s = {.n_layer = hp->n_layer, .n_kv_head = hp->n_head_kv,
                          .head_dim = hp->head_dim, .n_vocab = hp->n_vocab,
                          .n_prompt = rq->n_prompt, .n_tokens = rq->n_prompt + rq->n_gen,
                          .n_pos = rq->n_forced + 1};
    hx_capture *c = NULL;
    hx_drive *d = NULL;
    lm_ctx *ctx = NULL; /* the drive's context */
    float *cur = NULL;
    int rc = hx_capture_create(&c, &s, err);
    if (rc != LM_OK)
        return rc;
    if ((rc = hx_drive_open(&d, m, cfg, (uint32_t)need, HX_KEYS_PLAIN, "run", err)) != LM_OK)
        goto fail;
    ctx = hx_drive_ctx(d);
    size_t nv = hp->n_vocab;
    if ((cur = malloc(nv * sizeof *cur)) == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "run: out of memory");
        goto fail;
    }
    memcpy(c->tokens, rq->prompt, rq->n_prompt * sizeof *rq->prompt);
    for (uint32_t i = 0; i < s.n_pos; ++i)
        c->positions[i] = rq->n_prompt - 1 + i;

    kv_probe kp = {.c = c, .n_prompt = rq->n_prompt};
    if (cfg->rot_max != 0)
        lm_ctx_set_probe(ctx, kv_probe_fn, &kp);
    double t0 = lm_now_s();
    lm_ctx_set_layer_fn(ctx, rq->on_layer, rq->on_layer_user);
    if ((rc = hx_drive_feed(d, rq->prompt, rq->n_prompt, HX_ROWS_FINAL, c->logits, NULL, NULL,
                            err)) != LM_OK)
        goto fail;
    stats->prefill_s = lm_now_s() - t0;
    lm_ctx_set_layer_fn(ctx, NULL, NULL);
    if (cfg->rot_max != 0) {
        lm_ctx_set_probe(ctx, NULL, NULL);
    } else {
        size_t kv_bytes = hx_capture_kv_elems(&s) * sizeof(float);
        for (uint32_t l = 0; l < s.n_layer; ++l) { /* [n_prompt][n_kv_head][head_dim] */
            memcpy(c->k[l], lm_ctx_k(ctx, l), kv_bytes);
            memcpy(c->v[l], lm_ctx_v(ctx, l), kv_bytes);
        }
    }

    /* Greedy decode; while on the forced path its rows are the teacher-forced rows. */
    memcpy(cur, c->logits, nv * sizeof *cur);
    bool on_path = true;
    uint32_t fed = 0; /* tokens fed after the prompt */
    t0 = lm_now_s();
    for (uint32_t j = 0; j < rq->n_gen; ++j) {
        int32_t tok = lm_argmax(cur, hp->n_vocab);
        c->tokens[rq->n_prompt + j] = tok;
        if (j < rq->n_forced && tok != rq->forced[j])
            on_path = false; /* tokens past the end of the forced path are no split */
        if (j + 1 == rq->n_gen)
            break; /* the last token's logits are never needed */
        if ((rc = hx_drive_decode(d, tok, cur, err)) != LM_OK)
            goto fail;
        ++fed;
        stats->n_decode++;
        if (on_path && j < rq->n_forced)
            memcpy(c->logits + (j + 1) * nv, cur, nv * sizeof *cur);
    }
    stats->decode_s = lm_now_s() - t0;

    if (on_path) {
        /* The context holds prompt + forced[0..fed): continue on the forced path. */
        if (fed < rq->n_forced && (rc = feed_forced(d, c, rq, fed, err)) != LM_OK)
            goto fail;
    } else {
        /* The greedy path split: prefill again (same schedule, same bits) and force. */
        stats->reran_forced = true;
        if ((rc = hx_drive_reset(d, err)) != LM_OK ||
            (rc = hx_drive_feed(d, rq->prompt, rq->n_prompt, HX_ROWS_FINAL, cur, NULL, NULL,
                                err)) != LM_OK ||
            (rc = feed_forced(d, c, rq, 0, err)) != LM_OK)
            goto fail;
    }
    if (rq->prompt_rows && rq->n_prompt > 1) {
        if ((c->prompt_logits = malloc((size_t)rq->n_prompt * nv * sizeof(float))) == NULL) {
            rc = LM_FAIL(err, LM_E_NOMEM, "run: out of memory for the prompt's logits");
            goto fail;
        }
        c->n_prompt_rows = rq->n_prompt - 1;
        if ((rc = hx_drive_reset(d, err)) != LM_OK ||
            (rc = hx_drive_feed(d, rq->prompt, rq->n_prompt, HX_ROWS_ALL, NULL, keep_rows,
                                c->prompt_logits, err)) != LM_OK)
            goto fail;
    }
    /* A two-turn configuration is timed once: the schedule axis is there for its numbers, and
     * repeats would double a default sweep's engine time for speeds its sibling measures. */
    if (!rq->time_once && cfg->turn == 0 &&
        (rc = time_repeats(d, c, rq, cur, stats, err)) != LM_OK)
        goto fail;
    stats->ctx_bytes = (uint64_t)lm_ctx_scratch_bytes(ctx) +
                       2ull * s.n_layer * need * s.n_kv_head * s.head_dim * sizeof(float);
    free(cur);
    hx_drive_close(d);
    *out = c;
    return LM_OK;
fail:
    free(cur);
    hx_drive_close(d);
    hx_capture_free(c);
    return rc;
}
