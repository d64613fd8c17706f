/* speculative_run.c — plain and speculative decoding of one configuration, traced (speculative_run.h). */
#include "run/speculative_run.h"

#include "run/drive.h"
#include "run/runner.h"

#include <stdlib.h>
#include <string.h>

bool hx_draft_self_layers(const char *draft, uint32_t *n_layer)
{
    if (strncmp(draft, "self", 4) != 0 || (draft[4] != ':' && draft[4] != '/'))
        return false;
    const char *s = draft + 5;
    uint64_t v = 0;
    if (*s == '\0' || strlen(s) > 6)
        return false;
    for (; *s; ++s) {
        if (*s < '0' || *s > '9')
            return false;
        v = v * 10 + (uint64_t)(*s - '0');
    }
    if (v == 0)
        return false;
    *n_layer = (uint32_t)v;
    return true;
}

static int side_alloc(hx_spec_side *s, uint32_t n_gen, uint32_t nv, lm_err *err)
{
    s->tokens = malloc(n_gen * sizeof *s->tokens);
    s->hist = malloc(n_gen * sizeof *s->hist);
    s->raw = malloc((size_t)n_gen * nv * sizeof *s->raw);
    if (s->tokens == NULL || s->hist == NULL || s->raw == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "spec: out of memory");
    return LM_OK;
}

static void side_free(hx_spec_side *s)
{
    free(s->tokens);
    free(s->hist);
    free(s->raw);
}

/* One decode into side s: fresh target (and draft) contexts, freed afterwards. */
static int decode(hx_spec_side *s, const lm_model *target, const lm_model *draft,
                  const hx_config *cfg, uint32_t k, const int32_t *prompt, uint32_t n_prompt,
                  uint32_t n_gen, const lm_penalty_params *pen, lm_err *err)
{
    uint64_t need = (uint64_t)n_prompt + 2ull * n_gen + k + 1;
    const uint32_t train = target->hp.n_ctx_train;
    if (train != 0 && need > train)
        need = train;
    /* lm_spec_generate feeds its contexts itself (prefill in chunks of step, verify chunks): a
     * two-turn schedule, a reused prefix and co-resident sequences are refused. */
    lm_ctx *tc = NULL, *dc = NULL;
    int rc = hx_drive_check(cfg, HX_KEYS_ALL & ~(HX_KEY_TURN | HX_KEY_PREFIX | HX_KEY_BATCH),
                            "speculative decoding", err);
    if (rc == LM_OK)
        rc = hx_drive_open_ctx(&tc, target, cfg, (uint32_t)need, 0, err);
    if (rc == LM_OK && k > 0) {
        /* The draft runs on the same backend, threads, attention and profile, with the plain
         * cache. */
        hx_config dcfg = *cfg;
        dcfg.rot_max = dcfg.rot_keep = 0;
        dcfg.rot_window = false;
        dcfg.spec = 0;
        dcfg.draft[0] = '\0';
        uint32_t dn = (uint32_t)need;
        if (draft->hp.n_ctx_train != 0 && dn > draft->hp.n_ctx_train)
            dn = draft->hp.n_ctx_train;
        rc = hx_drive_open_ctx(&dc, draft, &dcfg, dn, 0, err);
    }
    lm_spec_trace tr = {.tokens = s->tokens, .hist_hash = s->hist, .logits = s->raw};
    const lm_spec_params sp = {.n_draft = k, .step = cfg->step, .n_gen = n_gen, .pen = *pen};
    if (rc == LM_OK)
        rc = lm_spec_generate(tc, dc, prompt, n_prompt, &sp, &tr, err);
    s->n_rounds = tr.n_rounds;
    s->n_drafted = tr.n_drafted;
    s->n_accepted = tr.n_accepted;
    lm_ctx_free(dc);
    lm_ctx_free(tc);
    return rc;
}

int hx_spec_run_pair(hx_spec_pair *out, const lm_model *target, const lm_model *draft_model,
                     const hx_config *cfg, const int32_t *prompt, uint32_t n_prompt,
                     uint32_t n_gen, const lm_penalty_params *pen, lm_err *err)
{
    memset(out, 0, sizeof *out);
    if (cfg->spec == 0)
        return LM_FAIL(err, LM_E_INPUT, "spec check: configuration has spec=0");
    lm_model view;
    const lm_model *draft = draft_model;
    uint32_t layers = 0;
    if (draft == NULL) {
        if (!hx_draft_self_layers(cfg->draft, &layers))
            return LM_FAIL(err, LM_E_INPUT, "spec check: draft '%s' is not self:L and no draft "
                           "model was given", cfg->draft);
        int rc = lm_model_first_layers(&view, target, layers, err);
        if (rc != LM_OK)
            return rc;
        draft = &view;
    }
    out->cfg = *cfg;
    out->n_gen = n_gen;
    out->n_vocab = target->hp.n_vocab;
    int rc = side_alloc(&out->plain, n_gen, out->n_vocab, err);
    if (rc == LM_OK)
        rc = side_alloc(&out->spec, n_gen, out->n_vocab, err);
    if (rc == LM_OK)
        rc = decode(&out->plain, target, NULL, cfg, 0, prompt, n_prompt, n_gen, pen, err);
    if (rc == LM_OK)
        rc = decode(&out->spec, target, draft, cfg, cfg->spec, prompt, n_prompt, n_gen, pen, err);
    if (rc != LM_OK)
        hx_spec_pair_free(out);
    return rc;
}

void hx_spec_pair_free(hx_spec_pair *p)
{
    if (p == NULL)
        return;
    side_free(&p->plain);
    side_free(&p->spec);
    memset(p, 0, sizeof *p);
}
