/* sweep_spec.c — the speculative-decoding check of `kvdrift sweep` (sweep_spec.h): options,
 * runs (specrun.h), verdicts (seqcheck.h) and the table. */
#include "sweep_spec.h"

#include "cli_util.h"
#include "kvd_util.h"
#include "seqcheck.h"
#include "specrun.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void hx_spec_opts_init(hx_spec_opts *o)
{
    memset(o, 0, sizeof *o);
    o->pen = lm_penalty_defaults();
}

static int parse_float(float *out, const char *opt, const char *s, lm_err *err)
{
    char *end;
    errno = 0;
    const float v = strtof(s, &end);
    if (*s == '\0' || *end != '\0' || errno != 0 || !isfinite(v))
        return LM_FAIL(err, LM_E_INPUT, "--%s '%s': expected a finite number", opt, s);
    *out = v;
    return LM_OK;
}

int hx_spec_opts_set(hx_spec_opts *o, int opt, const char *arg, lm_err *err)
{
    switch (opt) {
    case HX_OPT_SPEC: o->spec_list = arg; return LM_OK;
    case HX_OPT_DRAFT:
        if (*arg == '\0' || strlen(arg) >= HX_DRAFT_MAX)
            return LM_FAIL(err, LM_E_INPUT, "--draft '%s': expected self:L or a model of at most "
                           "%d characters", arg, HX_DRAFT_MAX - 1);
        o->draft = arg;
        return LM_OK;
    case HX_OPT_REPEAT_PENALTY: {
        int rc = parse_float(&o->pen.repeat_penalty, "repeat-penalty", arg, err);
        if (rc == LM_OK && !(o->pen.repeat_penalty > 0.0f))
            rc = LM_FAIL(err, LM_E_INPUT, "--repeat-penalty '%s': must be greater than 0", arg);
        return rc;
    }
    case HX_OPT_REPEAT_LAST_N:
        if (!lm_parse_u32z(arg, 0, 1u << 20, &o->pen.repeat_last_n))
            return LM_FAIL(err, LM_E_INPUT, "--repeat-last-n '%s': expected an integer in "
                           "0..1048576", arg);
        return LM_OK;
    case HX_OPT_FREQ_PENALTY:
        return parse_float(&o->pen.frequency_penalty, "frequency-penalty", arg, err);
    case HX_OPT_PRESENCE_PENALTY:
        return parse_float(&o->pen.presence_penalty, "presence-penalty", arg, err);
    default: return LM_FAIL(err, LM_E_INPUT, "spec options: unknown option %d", opt);
    }
}

/* "0,2,4" -> ks[n] (each 0..64, no duplicates). */
static int parse_ks(uint32_t *ks, size_t *n, const char *list, lm_err *err)
{
    *n = 0;
    for (const char *s = list;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char item[8];
        uint32_t k;
        if (len == 0 || len >= sizeof item)
            return LM_FAIL(err, LM_E_INPUT, "--spec '%s': expected integers 0..64", list);
        memcpy(item, s, len);
        item[len] = '\0';
        if (!lm_parse_u32z(item, 0, 64, &k))
            return LM_FAIL(err, LM_E_INPUT, "--spec '%s': '%s' is not an integer in 0..64", list,
                           item);
        for (size_t i = 0; i < *n; ++i)
            if (ks[i] == k)
                return LM_FAIL(err, LM_E_INPUT, "--spec '%s': %s listed twice", list, item);
        if (*n == 65)
            return LM_FAIL(err, LM_E_INPUT, "--spec '%s': too many values", list);
        ks[(*n)++] = k;
        if (e == NULL)
            return LM_OK;
        s = e + 1;
    }
}

/* The largest logits E and E_gap of the envelope (the spec rows leave the teacher path, so
 * the path's largest values stand in for theirs). */
static void env_logits_max(const hx_envelope *env, double *e, double *e_gap)
{
    *e = *e_gap = 0.0;
    for (uint32_t i = 0; env != NULL && i < env->n_pos; ++i) {
        *e = env->logits[i].e > *e ? env->logits[i].e : *e;
        *e_gap = env->logits[i].e_gap > *e_gap ? env->logits[i].e_gap : *e_gap;
    }
}

int hx_spec_check_print(FILE *f, const lm_model *m, const char *draft_path, const int32_t *prompt,
                        uint32_t n_prompt, uint32_t n_gen, const hx_config *configs,
                        size_t n_configs, const hx_spec_opts *o, const hx_envelope *env,
                        size_t *n_fail, lm_err *err)
{
    uint32_t ks[65];
    size_t n_ks = 0;
    *n_fail = 0;
    int rc = parse_ks(ks, &n_ks, o->spec_list, err);
    if (rc != LM_OK)
        return rc;
    const char *draft = o->draft ? o->draft : "self:1";
    lm_model *dm = NULL;
    if (draft_path != NULL && (rc = lm_model_load(&dm, draft_path, err)) != LM_OK)
        return rc;
    double e, e_gap;
    env_logits_max(env, &e, &e_gap);
    fprintf(f, "\nspeculative decoding vs plain decoding (same step, processors: repeat-penalty "
            "%g, repeat-last-n %u, frequency-penalty %g, presence-penalty %g; near tie: verify "
            "row within E %.3g and gap within E_gap %.3g)\n\n",
            (double)o->pen.repeat_penalty, (unsigned)o->pen.repeat_last_n,
            (double)o->pen.frequency_penalty, (double)o->pen.presence_penalty, e, e_gap);
    fprintf(f, "%-54s %-12s %4s %4s %9s %9s  %s\n", "config", "class", "tok", "hist", "max|d|",
            "accepted", "why");
    size_t count[HX_N_CLASSES] = {0};
    for (size_t ci = 0; ci < n_configs && rc == LM_OK; ++ci)
        for (size_t ki = 0; ki < n_ks && rc == LM_OK; ++ki) {
            if (ks[ki] == 0)
                continue;
            hx_config c = configs[ci];
            c.spec = ks[ki];
            snprintf(c.draft, sizeof c.draft, "%s", draft);
            hx_spec_pair p;
            if ((rc = hx_spec_run_pair(&p, m, dm, &c, prompt, n_prompt, n_gen, &o->pen, err)) !=
                LM_OK)
                break;
            hx_seq_verdict v;
            rc = hx_seq_judge(&v, &p, prompt, n_prompt, &o->pen, e, e_gap, err);
            if (rc == LM_OK) {
                char name[HX_CONFIG_STR_MAX], acc[24];
                hx_config_format(name, sizeof name, &c);
                snprintf(acc, sizeof acc, "%u/%u", p.spec.n_accepted, p.spec.n_drafted);
                fprintf(f, "%-54s %-12s %4lld %4lld %9.3g %9s  %s\n", name, hx_class_name(v.cls),
                        (long long)v.first_tok, (long long)v.first_hist, v.max_abs, acc, v.reason);
                count[v.cls]++;
                *n_fail += v.cls == HX_SEQ_MISMATCH;
            }
            hx_spec_pair_free(&p);
        }
    lm_model_free(dm);
    if (rc != LM_OK)
        return rc;
    fprintf(f, "\nspec check:");
    for (int c = 0; c < HX_N_CLASSES; ++c)
        if (count[c])
            fprintf(f, " %zu %s", count[c], hx_class_name((hx_class)c));
    fprintf(f, "; verdict %s (tok/hist: first step where the token / the processor history "
            "differs, -1 none)\n", *n_fail ? "FAIL (SEQ_MISMATCH)" : "pass");
    return LM_OK;
}
