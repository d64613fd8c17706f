/* drive.c — CONFIG -> context and schedule of forward calls (contract in drive.h). */
#include "run/drive.h"

#include "run/coresident.h"

#include <stdlib.h>

static const struct {
    unsigned key;
    const char *name, *what;
} keys[] = {
    {HX_KEY_STEP, "step", "prefill chunk size"},
    {HX_KEY_THREADS, "threads", "thread count"},
    {HX_KEY_ATTN, "attn", "attention variant"},
    {HX_KEY_ROT, "rot", "rotating KV cache"},
    {HX_KEY_PROFILE, "profile", "precision profile"},
    {HX_KEY_TURN, "turn", "two-turn schedule"},
    {HX_KEY_SPEC, "spec", "speculative decoding"},
    {HX_KEY_DRAFT, "draft", "draft model"},
    {HX_KEY_PREFIX, "prefix", "reused prefix"},
    {HX_KEY_BATCH, "batch", "co-resident sequences"},
    {HX_KEY_TP, "tp", "tensor-parallel shards"},
};

unsigned hx_config_keys(const hx_config *cfg)
{
    return (cfg->step != 0 ? HX_KEY_STEP : 0u) | (cfg->threads != 0 ? HX_KEY_THREADS : 0u) |
           (cfg->attn != HX_ATTN_DEFAULT ? HX_KEY_ATTN : 0u) |
           (cfg->rot_max != 0 ? HX_KEY_ROT : 0u) | (cfg->profile[0] ? HX_KEY_PROFILE : 0u) |
           (cfg->turn != 0 ? HX_KEY_TURN : 0u) | (cfg->spec != 0 ? HX_KEY_SPEC : 0u) |
           (cfg->draft[0] ? HX_KEY_DRAFT : 0u) | (cfg->prefix != 0 ? HX_KEY_PREFIX : 0u) |
           (cfg->batch > 1 ? HX_KEY_BATCH : 0u) |
           (cfg->tp > 1 || cfg->tp_reduce != LM_TP_RING ? HX_KEY_TP : 0u);
}

const char *hx_config_key_name(unsigned key)
{
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; ++i)
        if (keys[i].key == key)
            return keys[i].name;
    return "?";
}

int hx_drive_check(const hx_config *cfg, unsigned honoured, const char *who, lm_err *err)
{
    const unsigned refused = hx_config_keys(cfg) & ~honoured;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; ++i)
        if (refused & keys[i].key)
            return LM_FAIL(err, LM_E_INPUT, "%s: CONFIG key %s= (%s) is not supported here",
                           who, keys[i].name, keys[i].what);
    return LM_OK;
}

int hx_drive_open_ctx(lm_ctx **out, const lm_model *m, const hx_config *cfg, uint32_t n_ctx,
                      uint32_t batch_rows, lm_err *err)
{
    /* Every field a CONFIG sets: backend, threads, attention, rotating cache, profile. */
    char be[LM_BACKEND_NAME_MAX];
    const lm_ctx_params cp = {.backend = hx_config_backend_name(be, sizeof be, cfg),
                              .n_threads = hx_config_n_threads(cfg), .n_ctx = n_ctx,
                              .attn = cfg->attn == HX_ATTN_STREAM ? "stream" : "dense",
                              .rot_max_size = cfg->rot_max, .rot_keep = cfg->rot_keep,
                              .rot_window = cfg->rot_window, .tp = cfg->tp,
                              .tp_reduce = cfg->tp_reduce, .batch_rows = batch_rows,
                              .profile = cfg->profile};
    return lm_ctx_create(out, m, &cp, err);
}

struct hx_drive {
    hx_config cfg;
    lm_ctx *ctx;        /* the sequence under test */
    hx_coresident *co;  /* its co-resident sequences (batch=B), NULL: alone */
};

int hx_drive_open(hx_drive **out, const lm_model *m, const hx_config *cfg, uint32_t n_ctx,
                  unsigned honoured, const char *who, lm_err *err)
{
    *out = NULL;
    int rc = hx_drive_check(cfg, honoured, who, err);
    if (rc != LM_OK)
        return rc;
    hx_drive *d = calloc(1, sizeof *d);
    if (d == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", who);
    d->cfg = *cfg;
    const uint32_t rows = cfg->batch > 1 ? hx_coresident_rows(cfg, n_ctx) : 0;
    rc = hx_drive_open_ctx(&d->ctx, m, cfg, n_ctx, rows, err);
    if (rc == LM_OK)
        rc = hx_coresident_create(&d->co, m, cfg, n_ctx, err);
    if (rc != LM_OK) {
        hx_drive_close(d);
        return rc;
    }
    *out = d;
    return LM_OK;
}

void hx_drive_close(hx_drive *d)
{
    if (d == NULL)
        return;
    hx_coresident_free(d->co);
    lm_ctx_free(d->ctx);
    free(d);
}

lm_ctx *hx_drive_ctx(const hx_drive *d)
{
    return d->ctx;
}

int hx_drive_reset(hx_drive *d, lm_err *err)
{
    lm_ctx_reset(d->ctx);
    return hx_coresident_reset(d->co, err);
}

/* One forward call of the sequence under test, shared with its co-resident sequences. */
static int call(hx_drive *d, const int32_t *tokens, uint32_t n, lm_logits_mode mode,
                float *logits, lm_err *err)
{
    return d->co != NULL ? hx_coresident_forward(d->co, d->ctx, tokens, n, mode, logits, err)
                         : lm_forward(d->ctx, tokens, n, mode, logits, err);
}

/* One segment of a schedule: tokens[from..to) in calls of `step` tokens (0 = one call). */
typedef struct segment {
    uint32_t from, to, step;
} segment;

/* One feed's state: where its rows go and what it hands on. */
typedef struct feed {
    hx_rows rows;
    float *final; /* [n_vocab] the feed's last row (HX_ROWS_FINAL) */
    float *buf;   /* [widest call][n_vocab] (HX_ROWS_ALL) */
    hx_chunk_fn fn;
    void *user;
    uint32_t last; /* index (into the feed's tokens) one past its last position */
} feed;

/* Feeds tokens[s->from .. s->to) in calls of s->step tokens (0: one call) at the next
 * positions: into the drive's sequence (its co-resident ones alongside), or with d NULL into
 * ctx alone (a prefix's earlier request). */
static int feed_segment(hx_drive *d, lm_ctx *ctx, const int32_t *tokens, const segment *s,
                        const feed *f, lm_err *err)
{
    const uint32_t step = s->step == 0 ? s->to - s->from : s->step;
    int rc = LM_OK;
    for (uint32_t p = s->from; p < s->to && rc == LM_OK;) {
        const uint32_t len = s->to - p < step ? s->to - p : step;
        lm_logits_mode mode = LM_LOGITS_NONE;
        float *out = NULL;
        if (f->rows == HX_ROWS_ALL) {
            mode = LM_LOGITS_ALL;
            out = f->buf;
        } else if (f->rows == HX_ROWS_FINAL && p + len == f->last) {
            mode = LM_LOGITS_LAST;
            out = f->final;
        }
        const uint32_t pos0 = lm_ctx_n_past(ctx);
        rc = d != NULL ? call(d, tokens + p, len, mode, out, err)
                       : lm_forward(ctx, tokens + p, len, mode, out, err);
        if (rc == LM_OK && f->fn != NULL) {
            const hx_chunk ch = {.tokens = tokens + p, .pos0 = pos0, .n = len, .logits = out};
            rc = f->fn(f->user, ctx, &ch, err);
        }
        p += len;
    }
    return rc;
}

/* The chunk size of the earlier request of cfg's reused prefix (0: one call). */
static uint32_t prefix_step(const hx_config *cfg)
{
    return cfg->prefix_step == 0                     ? cfg->step
           : cfg->prefix_step == HX_PREFIX_STEP_FULL ? 0
                                                     : cfg->prefix_step;
}

/* The earlier request of a prefix-cache hit: tokens[0..p) fed into a context of its own in
 * chunks of cfg's prefix_step (its probe and layer callbacks those of ctx), then adopted by
 * ctx (lm_ctx_adopt_prefix). */
static int reuse_prefix(lm_ctx *ctx, const hx_config *cfg, const int32_t *tokens, uint32_t p,
                        const feed *f, lm_err *err)
{
    hx_config early = *cfg;
    early.step = prefix_step(cfg);
    early.turn = early.prefix = early.prefix_step = 0;
    lm_ctx *src = NULL;
    int rc = hx_drive_open_ctx(&src, lm_ctx_model(ctx), &early, p, 0, err);
    if (rc == LM_OK) {
        lm_ctx_share_hooks(src, ctx);
        const segment s = {0, p, early.step};
        rc = feed_segment(NULL, src, tokens, &s, f, err);
    }
    if (rc == LM_OK)
        rc = lm_ctx_adopt_prefix(ctx, src, p, err);
    lm_ctx_free(src);
    return rc;
}

int hx_drive_feed(hx_drive *d, const int32_t *tokens, uint32_t n, hx_rows rows, float *final,
                  hx_chunk_fn fn, void *user, lm_err *err)
{
    lm_ctx *ctx = d->ctx;
    const hx_config *cfg = &d->cfg;
    if (n == 0)
        return LM_FAIL(err, LM_E_INPUT, "prefill: empty prompt");
    if (n > lm_ctx_n_ctx(ctx) - lm_ctx_n_past(ctx))
        return LM_FAIL(err, LM_E_INPUT, "prefill: %u positions + %u new exceed the context of %u",
                       lm_ctx_n_past(ctx), n, lm_ctx_n_ctx(ctx));
    /* A prefix is reused only by a feed that starts the context, and never all of it: the
     * last token is always computed here. */
    const uint32_t p = cfg->prefix == 0 || lm_ctx_n_past(ctx) != 0 || n < 2 ? 0
                       : cfg->prefix < n                                     ? cfg->prefix
                                                                             : n - 1;
    uint32_t n1, dec, n2;
    hx_turn_split(n - p, cfg->turn, &n1, &dec, &n2);
    const segment seg[4] = {{0, p, prefix_step(cfg)},
                            {p, p + n1, cfg->step},
                            {p + n1, p + n1 + dec, 1},
                            {p + n1 + dec, n, cfg->step}};
    uint32_t widest = 0; /* the longest call, for the rows buffer of HX_ROWS_ALL */
    for (int s = 0; s < 4; ++s) {
        const uint32_t len = seg[s].to - seg[s].from;
        const uint32_t call = seg[s].step == 0 || seg[s].step > len ? len : seg[s].step;
        widest = call > widest ? call : widest;
    }
    const uint32_t nv = lm_ctx_model(ctx)->hp.n_vocab;
    feed f = {.rows = rows, .final = final, .fn = fn, .user = user, .last = n};
    if (rows == HX_ROWS_ALL && (f.buf = malloc((size_t)widest * nv * sizeof *f.buf)) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "prefill: out of memory for %u rows of logits", widest);
    int rc = p > 0 ? reuse_prefix(ctx, cfg, tokens, p, &f, err) : LM_OK;
    for (int s = 1; s < 4 && rc == LM_OK; ++s)
        rc = feed_segment(d, ctx, tokens, &seg[s], &f, err);
    free(f.buf);
    return rc;
}

int hx_drive_decode(hx_drive *d, int32_t tok, float *row, lm_err *err)
{
    return call(d, &tok, 1, row != NULL ? LM_LOGITS_LAST : LM_LOGITS_NONE, row, err);
}
