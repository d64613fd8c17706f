/* caserun_engine.c — a case file naming another engine (engine = ADAPTER): the adapter
 * resolved and described, its [knobs] axes planned, its sweep run (the contract is in
 * caserun.h). */
#include "plan/caserun.h"

#include "plan/adapter_resolve.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hx_caserun_engine_plan(hx_caserun *r, lm_err *err)
{
    const hx_case *c = r->c;
    if ((r->desc = calloc(1, sizeof *r->desc)) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    lm_err e = {0};
    int rc = hx_adapter_resolve(r->adapter_path, sizeof r->adapter_path, c->engine, &e);
    if (rc == LM_OK)
        rc = hx_adapter_describe(r->desc, r->adapter_path, &e);
    if (rc == LM_E_UNSUPPORTED) {
        free(r->desc);
        r->desc = NULL;
        r->skipped = true;
        snprintf(r->skip_reason, sizeof r->skip_reason, "engine %.40s: %.200s", c->engine,
                 e.msg);
        return LM_OK;
    }
    if (rc == LM_OK)
        rc = hx_adapter_plan(&r->knob_configs, &r->n_knob_configs, r->desc,
                             (const char *const *)c->knobs, c->n_knobs, &e);
    if (rc != LM_OK)
        return LM_FAIL(err, rc, "%s: engine %.100s: %.400s", c->file, c->engine, e.msg);
    return LM_OK;
}

int hx_caserun_engine_names(char (**out)[HX_CONFIG_STR_MAX], size_t *n, const hx_caserun *r,
                            lm_err *err)
{
    *n = 0;
    if ((*out = calloc(r->n_knob_configs + 1, sizeof **out)) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    if (r->desc == NULL) {
        snprintf((*out)[(*n)++], HX_CONFIG_STR_MAX, "%s", r->c->engine);
        return LM_OK;
    }
    /* the order hx_adapter_sweep_run reports: the baseline, then every other configuration */
    hx_adapter_config base;
    hx_adapter_default(&base, r->desc);
    hx_adapter_config_name((*out)[(*n)++], HX_CONFIG_STR_MAX, r->desc, &base);
    for (size_t i = 0; i < r->n_knob_configs; ++i)
        if (!hx_adapter_config_equal(&r->knob_configs[i], &base, r->desc))
            hx_adapter_config_name((*out)[(*n)++], HX_CONFIG_STR_MAX, r->desc,
                                   &r->knob_configs[i]);
    return LM_OK;
}

int hx_caserun_engine_run(hx_caserun *r, const int32_t *prompt, const hx_caserun_opts *o,
                          lm_err *err)
{
    const hx_case *c = r->c;
    const hx_adapter_sweep_params p = {
        .adapter_path = r->adapter_path,
        .desc = r->desc,
        .configs = r->knob_configs,
        .n_configs = r->n_knob_configs,
        .model = r->model,
        .ref = r->ref,
        .model_path = r->model_path,
        .model_label = c->model.synth ? c->model_text : r->model_path,
        .prompt = prompt,
        .n_prompt = r->n_prompt,
        .n_gen = c->n_gen,
        .precision = c->precision,
        .ensemble = HX_SWEEP_DEFAULT_ENSEMBLE,
        .cache_dir = o->cache_dir,
        .jobs = o->jobs,
        .quiet = o->quiet,
        .log = o->log,
        .log_user = o->log_user,
    };
    lm_err e = {0};
    int rc = hx_adapter_sweep_run(&r->adapter, &p, &e);
    if (rc != LM_OK)
        return LM_FAIL(err, rc, "%s: %.400s", c->file, e.msg);
    r->report = r->adapter->report;
    snprintf(r->report->case_name, sizeof r->report->case_name, "%s", c->name);
    return LM_OK;
}
