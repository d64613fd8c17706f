/* drive.c — CONFIG -> context and schedule of forward calls (contract in drive.h). */
#include "run/drive.h"

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
};

unsigned hx_config_keys(const hx_config *cfg)
{
    return (cfg->step != 0 ? HX_KEY_STEP : 0u) | (cfg->threads != 0 ? HX_KEY_THREADS : 0u) |
           (cfg->attn != HX_ATTN_DEFAULT ? HX_KEY_ATTN : 0u) |
           (cfg->rot_max != 0 ? HX_KEY_ROT : 0u) | (cfg->profile[0] ? HX_KEY_PROFILE : 0u) |
           (cfg->turn != 0 ? HX_KEY_TURN : 0u) | (cfg->spec != 0 ? HX_KEY_SPEC : 0u) |
           (cfg->draft[0] ? HX_KEY_DRAFT : 0u);
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

/* The context parameters of c with n_ctx positions: every field a CONFIG sets (backend,
 * threads, attention, rotating cache, profile); be_name receives the backend name and must
 * outlive *cp. */
static void ctx_params(lm_ctx_params *cp, char *be_name, size_t be_n, const hx_config *c,
                       uint32_t n_ctx)
{
    *cp = (lm_ctx_params){.backend = hx_config_backend_name(be_name, be_n, c),
                          .n_threads = hx_config_n_threads(c), .n_ctx = n_ctx,
                          .attn = c->attn == HX_ATTN_STREAM ? "stream" : "dense",
                          .rot_max_size = c->rot_max, .rot_keep = c->rot_keep,
                          .rot_window = c->rot_window, .profile = c->profile};
}

int hx_drive_open(lm_ctx **out, const lm_model *m, const hx_config *cfg, uint32_t n_ctx,
                  unsigned honoured, const char *who, lm_err *err)
{
    *out = NULL;
    int rc = hx_drive_check(cfg, honoured, who, err);
    if (rc != LM_OK)
        return rc;
    char be[LM_BACKEND_NAME_MAX];
    lm_ctx_params cp;
    ctx_params(&cp, be, sizeof be, cfg, n_ctx);
    return lm_ctx_create(out, m, &cp, err);
}

/* One segment of the schedule: tokens[from..to) in calls of `step` tokens (0 = one call). */
typedef struct segment {
    uint32_t from, to, step;
} segment;

int hx_drive_feed(lm_ctx *ctx, const hx_config *cfg, const int32_t *tokens, uint32_t n,
                  hx_rows rows, float *final, hx_chunk_fn fn, void *user, lm_err *err)
{
    if (n == 0)
        return LM_FAIL(err, LM_E_INPUT, "prefill: empty prompt");
    if (n > lm_ctx_n_ctx(ctx) - lm_ctx_n_past(ctx))
        return LM_FAIL(err, LM_E_INPUT, "prefill: %u positions + %u new exceed the context of %u",
                       lm_ctx_n_past(ctx), n, lm_ctx_n_ctx(ctx));
    uint32_t n1, d, n2;
    hx_turn_split(n, cfg->turn, &n1, &d, &n2);
    const segment seg[3] = {{0, n1, cfg->step}, {n1, n1 + d, 1}, {n1 + d, n, cfg->step}};
    const uint32_t nv = lm_ctx_model(ctx)->hp.n_vocab;
    uint32_t widest = 0; /* the longest call, for the rows buffer of HX_ROWS_ALL */
    for (int s = 0; s < 3; ++s) {
        const uint32_t len = seg[s].to - seg[s].from;
        const uint32_t call = seg[s].step == 0 || seg[s].step > len ? len : seg[s].step;
        widest = call > widest ? call : widest;
    }
    float *buf = NULL; /* [widest][n_vocab] */
    if (rows == HX_ROWS_ALL && (buf = malloc((size_t)widest * nv * sizeof *buf)) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "prefill: out of memory for %u rows of logits", widest);
    const uint32_t pos_base = lm_ctx_n_past(ctx);
    int rc = LM_OK;
    for (int s = 0; s < 3 && rc == LM_OK; ++s) {
        const uint32_t step = seg[s].step == 0 ? seg[s].to - seg[s].from : seg[s].step;
        for (uint32_t p = seg[s].from; p < seg[s].to && rc == LM_OK;) {
            const uint32_t len = seg[s].to - p < step ? seg[s].to - p : step;
            const bool last = p + len == n;
            lm_logits_mode mode = LM_LOGITS_NONE;
            float *out = NULL;
            if (rows == HX_ROWS_ALL) {
                mode = LM_LOGITS_ALL;
                out = buf;
            } else if (rows == HX_ROWS_FINAL && last) {
                mode = LM_LOGITS_LAST;
                out = final;
            }
            rc = lm_forward(ctx, tokens + p, len, mode, out, err);
            if (rc == LM_OK && fn != NULL) {
                const hx_chunk ch = {.tokens = tokens + p, .pos0 = pos_base + p, .n = len,
                                     .logits = out};
                rc = fn(user, ctx, &ch, err);
            }
            p += len;
        }
    }
    free(buf);
    return rc;
}

int hx_drive_decode(lm_ctx *ctx, int32_t tok, float *row, lm_err *err)
{
    return lm_forward(ctx, &tok, 1, row != NULL ? LM_LOGITS_LAST : LM_LOGITS_NONE, row, err);
}
