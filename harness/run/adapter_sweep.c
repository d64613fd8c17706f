/* adapter_sweep.c — hx_adapter_sweep_run: an adapter's configurations run, checked and judged
 * as one sweep (the contract is in adapter_sweep.h). */
#include "run/adapter_sweep.h"

#include "fs.h"
#include "kvd_util.h"
#include "model/capture.h"
#include "model/dump.h"
#include "run/adapter_exec.h"
#include "run/dumps_run.h"
#include "run/sweep.h"

#include <errno.h>
#include <ftw.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

/* One configuration's run: its name, its dump (NULL when it failed) and why not. */
typedef struct one_run {
    char name[HX_CONFIG_STR_MAX];
    hx_adapter_config cfg;
    hx_dump *dump;
    char why[640];
} one_run;

/* "1,2,3" of the prompt ids (malloc'd). */
static char *ids_text(const int32_t *ids, uint32_t n)
{
    char *s = malloc((size_t)n * 12 + 1);
    if (s == NULL)
        return NULL;
    size_t w = 0;
    for (uint32_t i = 0; i < n; ++i)
        w += (size_t)sprintf(s + w, "%s%d", i ? "," : "", (int)ids[i]);
    s[w] = '\0';
    return s;
}

/* Runs the adapter for r->cfg into a fresh folder under tmp; fills r->dump or r->why.
 * Only an allocation failure is an error. */
static int run_one(one_run *r, const hx_adapter_sweep_params *p, const char *tmp, size_t idx,
                   const char *ids, lm_err *err)
{
    const hx_adapter_desc *d = p->desc;
    char out[4200], ngen[16], sets[HX_ADAPTER_MAX_KNOBS][2 * HX_ADAPTER_NAME_MAX + 2];
    snprintf(out, sizeof out, "%s/%03zu", tmp, idx);
    snprintf(ngen, sizeof ngen, "%u", (unsigned)p->n_gen);
    if (mkdir(out, 0700) != 0)
        return LM_FAIL(err, LM_E_IO, "%s: %s", out, strerror(errno));
    char *argv[12 + 2 * HX_ADAPTER_MAX_KNOBS];
    int n = 0;
    argv[n++] = (char *)p->adapter_path;
    argv[n++] = "--model";
    argv[n++] = (char *)p->model_path;
    argv[n++] = "--tokens";
    argv[n++] = (char *)ids;
    argv[n++] = "--n-gen";
    argv[n++] = ngen;
    argv[n++] = "--out";
    argv[n++] = out;
    for (uint32_t k = 0; k < d->n_knobs; ++k)
        if (r->cfg.value[k] != d->knobs[k].def) {
            snprintf(sets[k], sizeof sets[k], "%s=%s", d->knobs[k].name,
                     d->knobs[k].values[r->cfg.value[k]]);
            argv[n++] = "--set";
            argv[n++] = sets[k];
        }
    argv[n] = NULL;
    const double limit = p->timeout_s > 0 ? p->timeout_s : HX_ADAPTER_DEFAULT_TIMEOUT;
    hx_exec_result res;
    lm_err e = {0};
    int rc = hx_exec_run(&res, p->adapter_path, argv, limit, 4096, &e);
    if (rc == LM_E_NOMEM)
        return LM_FAIL(err, rc, "%s", e.msg);
    char why[300];
    if (rc != LM_OK)
        snprintf(r->why, sizeof r->why, "%s", e.msg);
    else if (!hx_exec_ok(&res, limit, why, sizeof why))
        snprintf(r->why, sizeof r->why, "the adapter failed: %s", why);
    else if (res.out_len > 0)
        snprintf(r->why, sizeof r->why, "the adapter wrote %zu bytes to stdout (protocol 1 keeps "
                 "stdout for --describe; a run writes its dump only): \"%.40s\"", res.out_len,
                 res.out);
    else if ((rc = hx_dump_load(&r->dump, out, p->model, p->model_path, &e)) != LM_OK)
        snprintf(r->why, sizeof r->why, "exit 0 but no usable dump: %s", e.msg);
    hx_exec_result_free(&res);
    if (rc == LM_E_NOMEM)
        return LM_FAIL(err, rc, "%s", e.msg);
    /* the dump's folder name is the configuration's in the judge's lines */
    if (r->dump != NULL) {
        char *nm = strdup(r->name);
        if (nm == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        free(r->dump->dir);
        r->dump->dir = nm;
    }
    if (r->dump == NULL && !p->quiet)
        lm_log(p->log, p->log_user, "%s: ERROR: %.400s", r->name, r->why);
    else if (!p->quiet)
        lm_log(p->log, p->log_user, "%s: dump of %u ids, %u rows%s (%.1f s)", r->name,
               (unsigned)r->dump->n_tokens, (unsigned)r->dump->n_pos,
               r->dump->k ? " and K/V" : "", res.wall_s);
    return LM_OK;
}

/* The profile index of each run that has a dump into prof_of, the names into profs [*np]. */
static int profiles_of(uint32_t *prof_of, const char **profs, uint32_t *np, const one_run *runs,
                       size_t n, const hx_adapter_sweep_params *p, lm_err *err)
{
    *np = 0;
    for (size_t i = 0; i < n; ++i) {
        const char *want = p->profile ? p->profile : hx_adapter_profile(p->desc, &runs[i].cfg,
                                                                         NULL, 0);
        uint32_t k = 0;
        while (k < *np && strcmp(profs[k], want) != 0)
            ++k;
        if (k == *np) {
            if (*np == HX_JUDGE_MAX_PROFILES)
                return LM_FAIL(err, LM_E_INPUT, "more than %u profiles", HX_JUDGE_MAX_PROFILES);
            profs[(*np)++] = want;
        }
        prof_of[i] = k;
    }
    return LM_OK;
}

/* (c): another model's logits, not a rounding or a numerical defect (a dump without a greedy
 * continuation is judged on its rows alone). */
static bool foreign(const hx_config_report *c, const hx_dump_report *d)
{
    return (d->has_generated ? c->first_divergent == 0 : true) &&
           hx_logit_agg_top1_rate(&c->logits) < 0.5 && c->worst_ratio > HX_ADAPTER_FOREIGN_RATIO;
}

/* (d) The report in configuration order: judged rows moved from rep, ERROR rows added. */
static int assemble(hx_report *rep, one_run *runs, size_t n, const size_t *dump_of, lm_err *err)
{
    hx_config_report *v = calloc(n, sizeof *v);
    if (v == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; ++i) {
        if (runs[i].dump != NULL) {
            hx_dump_report *dr = &rep->dumps[dump_of[i]];
            v[i] = rep->configs[dr->first_config];
            memset(&rep->configs[dr->first_config], 0, sizeof *rep->configs);
            dr->first_config = i;
            if (foreign(&v[i], dr)) {
                v[i].cls = HX_ERROR;
                snprintf(v[i].reason, sizeof v[i].reason, "not the same model: its first "
                         "generated token leaves the reference's, its argmax agrees on %u of %u "
                         "rows, err/E %.3g", (unsigned)v[i].logits.n_top1_agree,
                         (unsigned)v[i].logits.n_pos, v[i].worst_ratio);
                dr->explained_by[0] = '\0';
            }
            continue;
        }
        hx_config_report *c = &v[i];
        snprintf(c->config, sizeof c->config, "%s", runs[i].name);
        c->cls = HX_ERROR;
        c->first_divergent = -1;
        snprintf(c->reason, sizeof c->reason, "%.300s", runs[i].why);
        hx_logit_agg_init(&c->logits);
        c->sig_digits = 17.0;
    }
    for (size_t i = 0; i < rep->n_configs; ++i)
        hx_config_report_free_parts(&rep->configs[i]);
    free(rep->configs);
    rep->configs = v;
    rep->n_configs = n;
    return LM_OK;
}

/* The kept bits of each configuration with a dump (hash and last prompt row), taken before
 * the judge cuts dumps whose continuations part to their shared ids (run/dumps_run.h (a)): a
 * configuration's golden is its own dump's, whatever else the sweep ran. */
static int keep_bits(hx_adapter_sweep_result *res, const one_run *runs, size_t n,
                     const hx_adapter_sweep_params *p, lm_err *err)
{
    res->n = n;
    res->ran = calloc(n, sizeof *res->ran);
    res->hash = calloc(n, sizeof *res->hash);
    res->last_row = calloc(n, sizeof *res->last_row);
    if (!res->ran || !res->hash || !res->last_row)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; ++i) {
        const hx_dump *d = runs[i].dump;
        if (d == NULL)
            continue;
        hx_capture *c = NULL;
        int rc = hx_dump_capture(&c, d, p->model, err);
        if (rc == LM_OK)
            rc = hx_capture_hash(res->hash[i], c, err);
        hx_capture_free(c);
        if (rc != LM_OK)
            return rc;
        res->n_vocab = d->n_vocab;
        for (uint32_t j = 0; j < d->n_pos; ++j)
            if (d->positions[j] == d->n_prompt - 1) {
                if ((res->last_row[i] = malloc(d->n_vocab * sizeof(float))) == NULL)
                    return LM_FAIL(err, LM_E_NOMEM, "out of memory");
                memcpy(res->last_row[i], d->rows + (size_t)j * d->n_vocab,
                       d->n_vocab * sizeof(float));
            }
    }
    return LM_OK;
}

/* ran: a dump with its last prompt row that the judge did not make an ERROR ("not the same
 * model"). */
static void mark_ran(hx_adapter_sweep_result *res)
{
    for (size_t i = 0; i < res->n; ++i)
        res->ran[i] = res->last_row[i] != NULL && res->report->configs[i].cls != HX_ERROR;
}

int hx_adapter_sweep_run(hx_adapter_sweep_result **out, const hx_adapter_sweep_params *p,
                         lm_err *err)
{
    *out = NULL;
    hx_adapter_sweep_result *res = calloc(1, sizeof *res);
    one_run *runs = calloc(p->n_configs + 1, sizeof *runs);
    char *ids = ids_text(p->prompt, p->n_prompt);
    char cache[4096], tmp[4200] = "";
    int rc = res && runs && ids ? LM_OK : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    /* (a) the baseline first, then every configuration that is not it */
    size_t n = 0;
    if (rc == LM_OK) {
        hx_adapter_default(&runs[n++].cfg, p->desc);
        for (size_t i = 0; i < p->n_configs; ++i)
            if (!hx_adapter_config_equal(&p->configs[i], &runs[0].cfg, p->desc))
                runs[n++].cfg = p->configs[i];
        for (size_t i = 0; i < n; ++i)
            hx_adapter_config_name(runs[i].name, sizeof runs[i].name, p->desc, &runs[i].cfg);
    }
    if (rc == LM_OK && (rc = lm_cache_open(cache, sizeof cache, p->cache_dir, err)) == LM_OK) {
        snprintf(tmp, sizeof tmp, "%s/adapter-run-XXXXXX", cache);
        if (mkdtemp(tmp) == NULL) {
            rc = LM_FAIL(err, LM_E_IO, "%s: %s", tmp, strerror(errno));
            tmp[0] = '\0';
        }
    }
    for (size_t i = 0; i < n && rc == LM_OK; ++i)
        rc = run_one(&runs[i], p, tmp, i, ids, err);
    /* (b) the dumps judged together */
    hx_dump **dumps = calloc(n + 1, sizeof *dumps);
    const char **names = calloc(n + 1, sizeof *names);
    uint32_t *prof_of = calloc(n + 1, sizeof *prof_of), *dprof = calloc(n + 1, sizeof *dprof);
    int64_t *base = calloc(n + 1, sizeof *base);
    size_t *dump_of = calloc(n + 1, sizeof *dump_of), nd = 0;
    const char *profs[HX_JUDGE_MAX_PROFILES];
    uint32_t np = 0;
    if (rc == LM_OK && !(dumps && names && prof_of && dprof && base && dump_of))
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
    if (rc == LM_OK)
        rc = profiles_of(prof_of, profs, &np, runs, n, p, err);
    for (size_t i = 0; i < n && rc == LM_OK; ++i)
        if (runs[i].dump != NULL) {
            dump_of[i] = nd;
            names[nd] = runs[i].name;
            dprof[nd] = prof_of[i];
            dumps[nd++] = runs[i].dump;
        }
    for (size_t i = 0; i < nd; ++i)
        base[i] = runs[0].dump != NULL ? 0 : -1;
    if (rc == LM_OK && nd == 0)
        rc = LM_FAIL(err, LM_E_INPUT, "adapter %s: no configuration ran (%s: %s)",
                     p->adapter_path, runs[0].name, runs[0].why);
    if (rc == LM_OK)
        rc = keep_bits(res, runs, n, p, err);
    if (rc == LM_OK) {
        hx_judge_params jp = {.model = p->model, .ref = p->ref, .model_label = p->model_label,
                              .prompt = p->prompt, .n_prompt = p->n_prompt, .dumps = dumps,
                              .n_dumps = nd, .profiles = profs, .n_profiles = np,
                              .precision = p->precision, .ensemble = p->ensemble,
                              .sr_seed = p->sr_seed, .sr_seed_set = p->sr_seed_set,
                              .cache_dir = p->cache_dir, .jobs = p->jobs, .names = names,
                              .dump_profile = dprof, .baseline = base, .quiet = p->quiet,
                              .log = p->log, .log_user = p->log_user};
        rc = hx_judge_run_all(&res->report, &jp, err);
    }
    if (rc == LM_OK) {
        snprintf(res->report->case_name, sizeof res->report->case_name, "sweep");
        rc = assemble(res->report, runs, n, dump_of, err);
    }
    if (rc == LM_OK)
        mark_ran(res);
    for (size_t i = 0; i < n; ++i)
        hx_dump_free(runs[i].dump);
    if (tmp[0])
        nftw(tmp, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
    free(dumps), free(names), free(prof_of), free(dprof), free(base), free(dump_of);
    free(runs);
    free(ids);
    if (rc != LM_OK) {
        hx_adapter_sweep_result_free(res);
        return rc;
    }
    *out = res;
    return LM_OK;
}

void hx_adapter_sweep_result_free(hx_adapter_sweep_result *r)
{
    if (r == NULL)
        return;
    hx_report_free(r->report);
    for (size_t i = 0; r->last_row && i < r->n; ++i)
        free(r->last_row[i]);
    free(r->last_row);
    free(r->ran);
    free(r->hash);
    free(r);
}
