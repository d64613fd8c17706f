/* caserun.c — one case file run for check/bless: model resolution (file, or synthetic preset
 * written into the cache), prompt tokens, the sweep, or a skipped report when the model file is
 * absent. */
#include "plan/caserun.h"

#include "fs.h"
#include "judge/model_check.h"
#include "kvd_ref.h"
#include "kvd_version.h"
#include "plan/prompt.h"
#include "plan/synth.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

int hx_caserun_golden_path(char *out, size_t cap, const char *golden_dir, const hx_case *c,
                           lm_err *err)
{
    int n;
    if (golden_dir && *golden_dir) {
        n = snprintf(out, cap, "%s/%s.json", golden_dir, c->name);
    } else {
        const char *slash = strrchr(c->file, '/');
        int dir_len = slash ? (int)(slash - c->file) : 0;
        n = slash ? snprintf(out, cap, "%.*s/%s/%s.json", dir_len ? dir_len : 1, c->file,
                             HX_GOLDEN_SUBDIR, c->name)
                  : snprintf(out, cap, "%s/%s.json", HX_GOLDEN_SUBDIR, c->name);
    }
    if (n < 0 || (size_t)n >= cap)
        return LM_FAIL(err, LM_E_INPUT, "golden path for case '%s' is too long", c->name);
    return LM_OK;
}

/* The GGUF to load for the case (hx_model_resolve: a synthetic preset is written fresh into
 * the cache folder); a model file that does not exist skips the case. */
static int resolve_model(hx_caserun *r, const hx_caserun_opts *o, lm_err *err)
{
    const hx_model_spec *s = &r->c->model;
    bool absent = false;
    int rc = hx_model_resolve(r->model_path, sizeof r->model_path, &absent, s, o->cache_dir,
                              o->log, o->log_user, err);
    if (rc == LM_OK && absent) {
        r->skipped = true;
        snprintf(r->skip_reason, sizeof r->skip_reason,
                 "model file %s not found (set KVDRIFT_MODELS to its folder)", s->path);
    }
    return rc;
}

static int prompt_tokens(int32_t **out, uint32_t *n_out, const hx_caserun *r, lm_err *err)
{
    const hx_case *c = r->c;
    const lm_model *m = r->model;
    if (c->tokens) {
        char what[4200];
        snprintf(what, sizeof what, "%s: tokens (model %s)", c->file, r->model_path);
        int rc = hx_check_token_ids(c->tokens, c->n_tokens, m->hp.n_vocab, what, err);
        if (rc != LM_OK)
            return rc;
        if ((*out = malloc(c->n_tokens * sizeof **out)) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        memcpy(*out, c->tokens, c->n_tokens * sizeof **out);
        *n_out = c->n_tokens;
        return LM_OK;
    }
    return hx_prompt_tokenize(out, n_out, m, r->model_path, c->prompt, c->special, c->file,
                              err);
}

/* The report of a skipped case: every configuration (names [n_cfgs]) listed, unrun. */
static int skipped_report(hx_caserun *r, const char (*names)[HX_CONFIG_STR_MAX], size_t n_cfgs,
                          bool strict, lm_err *err)
{
    hx_report *rep = NULL;
    int rc = hx_report_create(&rep, r->c->name, err);
    if (rc != LM_OK)
        return rc;
    snprintf(rep->model, sizeof rep->model, "%s", r->c->model_text);
    snprintf(rep->skipped, sizeof rep->skipped, "%s", r->skip_reason);
    rep->precision = r->c->precision;
    rep->n_gen = r->c->n_gen;
    rep->strict_bits = strict;
    hx_fingerprint fp;
    hx_fingerprint_detect(&fp);
    snprintf(rep->fingerprint_id, sizeof rep->fingerprint_id, "%s", fp.id);
    snprintf(rep->fingerprint, sizeof rep->fingerprint, "%s", fp.short_text);
    time_t now = time(NULL);
    struct tm tm;
    if (gmtime_r(&now, &tm))
        strftime(rep->created_utc, sizeof rep->created_utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
    for (size_t i = 0; i < n_cfgs && rc == LM_OK; ++i) {
        hx_config_report *cr;
        if ((rc = hx_report_add_config(rep, &cr, names[i], err)) == LM_OK) {
            cr->skipped = true;
            snprintf(cr->reason, sizeof cr->reason, "skipped: %s", r->skip_reason);
        }
    }
    if (rc != LM_OK) {
        hx_report_free(rep);
        return rc;
    }
    r->report = rep;
    r->own_report = true;
    return LM_OK;
}

/* A case that names a LM_BE_DEVICE backend is skipped, not failed, on a machine without the
 * device (the case was written for a machine with one), and one that names a LM_BE_LOADED
 * backend on a machine without its library: skipped with the backend's own reason. */
static void skip_without_device(hx_caserun *r, const hx_config *cfgs, size_t n_cfgs)
{
    for (size_t i = 0; i < n_cfgs && !r->skipped; ++i) {
        if (!(lm_backend_flags(cfgs[i].backend) & LM_BE_MAY_BE_ABSENT))
            continue;
        lm_err e = {0};
        if (lm_backend_probe(cfgs[i].backend, &e) == LM_E_UNSUPPORTED) {
            r->skipped = true;
            snprintf(r->skip_reason, sizeof r->skip_reason, "%.200s", e.msg);
        }
    }
}

/* The configuration names of the case's report (for a skipped case): *out malloc'd [*n]. */
static int config_names(char (**out)[HX_CONFIG_STR_MAX], size_t *n, const hx_caserun *r,
                        const hx_config *cfgs, size_t n_cfgs, lm_err *err)
{
    if (r->c->engine != NULL)
        return hx_caserun_engine_names(out, n, r, err);
    if ((*out = calloc(n_cfgs + 1, sizeof **out)) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n_cfgs; ++i)
        hx_config_format((*out)[i], HX_CONFIG_STR_MAX, &cfgs[i]);
    *n = n_cfgs;
    return LM_OK;
}

/* The whole sweep of kvdrift's own engine over the case's configurations. */
static int run_sweep(hx_caserun *r, const hx_config *cfgs, size_t n_cfgs, const int32_t *prompt,
                     bool strict, const hx_caserun_opts *o, lm_err *err)
{
    const hx_case *c = r->c;
    hx_sweep_params p = {
        .model = r->model,
        .ref = r->ref,
        /* The file actually read; a synthetic model is named by its spec. */
        .model_label = c->model.synth ? c->model_text : r->model_path,
        .case_name = c->name,
        .prompt = prompt,
        .n_prompt = r->n_prompt,
        .n_gen = c->n_gen,
        .configs = cfgs,
        .n_configs = n_cfgs,
        .precision = c->precision,
        .cache_dir = o->cache_dir,
        .jobs = o->jobs,
        .strict_bits = strict,
        .quiet = o->quiet,
        .log = o->log,
        .log_user = o->log_user,
    };
    int rc = hx_sweep_run_all(&r->sweep, &p, err);
    if (rc != LM_OK)
        return rc;
    r->report = r->sweep->report;
    for (size_t i = 0; i < n_cfgs && c->invariant_bits; ++i)
        r->report->configs[i].must_be_exact = hx_config_chunk_invariant(&cfgs[i]);
    /* every run's context holds the prompt and the greedy tokens */
    return hx_golden_rope_probe(r->rope_probe, r->model, r->n_prompt + c->n_gen, err);
}

int hx_caserun_create(hx_caserun **out, hx_case *c, const hx_caserun_opts *o, lm_err *err)
{
    *out = NULL;
    hx_caserun *r = calloc(1, sizeof *r);
    if (r == NULL) {
        hx_case_free(c);
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    r->c = c;
    hx_config *cfgs = NULL;
    size_t n_cfgs = 0;
    int32_t *prompt = NULL;
    bool strict = o->strict || c->strict_bits;
    int rc = c->engine ? hx_caserun_engine_plan(r, err) : hx_case_configs(&cfgs, &n_cfgs, c, err);
    if (rc == LM_OK && !r->skipped)
        rc = resolve_model(r, o, err);
    if (rc == LM_OK && !r->skipped)
        skip_without_device(r, cfgs, n_cfgs);
    if (rc == LM_OK && r->skipped) {
        char (*names)[HX_CONFIG_STR_MAX] = NULL;
        size_t n_names = 0;
        if ((rc = config_names(&names, &n_names, r, cfgs, n_cfgs, err)) == LM_OK)
            rc = skipped_report(r, (const char (*)[HX_CONFIG_STR_MAX])names, n_names, strict,
                                err);
        free(names);
        goto done;
    }
    if (rc == LM_OK)
        rc = hx_models_open(&r->model, &r->ref, r->model_path, err);
    if (rc == LM_OK)
        rc = prompt_tokens(&prompt, &r->n_prompt, r, err);
    if (rc == LM_OK)
        rc = c->engine ? hx_caserun_engine_run(r, prompt, o, err)
                       : run_sweep(r, cfgs, n_cfgs, prompt, strict, o, err);
    if (rc == LM_OK) {
        r->report->strict_bits = strict;
        memcpy(r->input.model_hash, r->report->model_hash, sizeof r->input.model_hash);
        hx_tokens_hash(r->input.tokens_hash, prompt, r->n_prompt);
        memcpy(r->report->tokens_hash, r->input.tokens_hash, sizeof r->input.tokens_hash);
        r->input.version = KVD_VERSION;
        r->input.engine_version = r->desc ? r->desc->engine_version : NULL;
    }
done:
    free(cfgs);
    free(prompt);
    if (rc != LM_OK) {
        hx_caserun_free(r);
        return rc;
    }
    *out = r;
    return LM_OK;
}

void hx_caserun_free(hx_caserun *r)
{
    if (r == NULL)
        return;
    if (r->own_report)
        hx_report_free(r->report);
    hx_sweep_result_free(r->sweep);
    hx_adapter_sweep_result_free(r->adapter);
    free(r->desc);
    free(r->knob_configs);
    lm_model_free(r->model);
    ref_model_free(r->ref);
    hx_case_free(r->c);
    free(r);
}

/* The entry of an engine case's configuration i: its dump's bits (run/adapter_sweep.h). */
static int engine_entry(hx_golden_entry *e, const hx_caserun *r, size_t i, lm_err *err)
{
    const hx_adapter_sweep_result *a = r->adapter;
    if (i >= a->n)
        return LM_FAIL(err, LM_E_INTERNAL, "case %s: no run %zu", r->c->name, i);
    memset(e, 0, sizeof *e);
    if (!a->ran[i]) /* an ERROR row: no bits (golden_verdict.h leaves it alone) */
        return LM_OK;
    hx_golden_entry_fill(e, a->hash[i], a->last_row[i], a->n_vocab, r->n_prompt - 1, &r->input);
    return LM_OK;
}

int hx_caserun_entry(hx_golden_entry *e, const hx_caserun *r, size_t i, lm_err *err)
{
    if (r->adapter != NULL)
        return engine_entry(e, r, i, err);
    if (r->sweep == NULL || i >= r->sweep->n_runs)
        return LM_FAIL(err, LM_E_INTERNAL, "case %s: no run %zu", r->c->name, i);
    const hx_sweep_run *run = &r->sweep->runs[i];
    uint32_t pos = r->n_prompt - 1;
    int64_t row = hx_capture_row(run->cap, pos);
    if (row < 0)
        return LM_FAIL(err, LM_E_INTERNAL, "case %s: capture has no logits at position %u",
                       r->c->name, (unsigned)pos);
    uint32_t nv = run->cap->shape.n_vocab;
    hx_golden_entry_fill(e, run->hash, run->cap->logits + (size_t)row * nv, nv, pos, &r->input);
    return LM_OK;
}

void hx_caserun_key(hx_golden_key *k, const hx_caserun *r, size_t i, const hx_fingerprint *fp)
{
    if (r->desc != NULL)
        hx_golden_key_adapter(k, fp, r->desc, r->n_prompt + r->c->n_gen);
    else
        hx_golden_key_of(k, fp, r->sweep->runs[i].cfg.backend, r->rope_probe);
}
