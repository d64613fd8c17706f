/* speculative_sweep.c — the speculative-decoding check of `kvdrift sweep` (speculative_sweep.h): options,
 * runs (speculative_run.h), verdicts (speculative_verdict.h) and the table. */
#include "run/speculative_sweep.h"

#include "kvd_util.h"
#include "run/speculative_check.h"

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

int hx_spec_check_run(hx_spec_report *out, const lm_model *m, const char *draft_path,
                      const int32_t *prompt, uint32_t n_prompt, uint32_t n_gen,
                      const hx_config *configs, size_t n_configs, const hx_spec_opts *o,
                      const hx_envelope *env, lm_err *err)
{
    uint32_t ks[65];
    size_t n_ks = 0;
    memset(out, 0, sizeof *out);
    int rc = parse_ks(ks, &n_ks, o->spec_list, err);
    if (rc != LM_OK)
        return rc;
    const char *draft = o->draft ? o->draft : "self:1";
    out->run = true;
    snprintf(out->draft, sizeof out->draft, "%s", draft);
    out->repeat_penalty = o->pen.repeat_penalty;
    out->repeat_last_n = o->pen.repeat_last_n;
    out->frequency_penalty = o->pen.frequency_penalty;
    out->presence_penalty = o->pen.presence_penalty;
    env_logits_max(env, &out->e, &out->e_gap);
    out->rows = calloc(n_configs * n_ks + 1, sizeof *out->rows);
    if (out->rows == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "spec check: out of memory");
    lm_model *dm = NULL;
    if (draft_path != NULL && (rc = lm_model_load(&dm, draft_path, err)) != LM_OK)
        return rc;
    for (size_t ci = 0; ci < n_configs && rc == LM_OK; ++ci)
        for (size_t ki = 0; ki < n_ks && rc == LM_OK; ++ki) {
            /* Speculative decoding feeds its own chunks (lm_spec_generate): a two-turn,
             * reused-prefix or batched configuration has no speculative counterpart; its plain
             * sibling has it. */
            if (ks[ki] == 0 || configs[ci].turn != 0 || configs[ci].prefix != 0 ||
                configs[ci].batch > 1)
                continue;
            hx_config c = configs[ci];
            c.spec = ks[ki];
            snprintf(c.draft, sizeof c.draft, "%s", draft);
            hx_spec_row row;
            rc = hx_spec_check_config(&row, m, dm, &c, prompt, n_prompt, n_gen, &o->pen, out->e,
                                      out->e_gap, err);
            if (rc != LM_OK)
                break;
            hx_spec_report_row *w = &out->rows[out->n_rows++];
            hx_config_format(w->config, sizeof w->config, &c);
            w->cls = row.v.cls;
            w->first_tok = row.v.first_tok;
            w->first_hist = row.v.first_hist;
            w->max_abs = row.v.max_abs;
            w->err = row.v.err;
            w->gap = row.v.gap;
            w->n_rounds = row.n_rounds;
            w->n_drafted = row.n_drafted;
            w->n_accepted = row.n_accepted;
            w->window_cls = row.window_checked ? (int)row.window_cls : -1;
            snprintf(w->reason, sizeof w->reason, "%s", row.v.reason);
        }
    lm_model_free(dm);
    return rc;
}

void hx_spec_print(FILE *f, const hx_spec_report *s)
{
    fprintf(f, "\nspeculative decoding vs plain decoding (same step, processors: repeat-penalty "
            "%g, repeat-last-n %u, frequency-penalty %g, presence-penalty %g; near tie: verify "
            "row within E %.3g and gap within E_gap %.3g)\n\n",
            (double)s->repeat_penalty, (unsigned)s->repeat_last_n,
            (double)s->frequency_penalty, (double)s->presence_penalty, s->e, s->e_gap);
    fprintf(f, "%-54s %-12s %4s %4s %9s %9s  %s\n", "config", "class", "tok", "hist", "max|d|",
            "accepted", "why");
    size_t count[HX_N_CLASSES] = {0}, n_fail = 0;
    for (size_t i = 0; i < s->n_rows; ++i) {
        const hx_spec_report_row *w = &s->rows[i];
        char acc[24];
        snprintf(acc, sizeof acc, "%u/%u", w->n_accepted, w->n_drafted);
        fprintf(f, "%-54s %-12s %4lld %4lld %9.3g %9s  %s\n", w->config, hx_class_name(w->cls),
                (long long)w->first_tok, (long long)w->first_hist, w->max_abs, acc, w->reason);
        count[w->cls]++;
        n_fail += hx_class_fails(w->cls);
    }
    fprintf(f, "\nspec check:");
    for (int c = 0; c < HX_N_CLASSES; ++c)
        if (count[c])
            fprintf(f, " %zu %s", count[c], hx_class_name((hx_class)c));
    fprintf(f, "; verdict %s (tok/hist: first step where the token / the processor history "
            "differs, -1 none)\n", n_fail ? "FAIL (SEQ_MISMATCH)" : "pass");
    if (count[HX_SEMANTIC])
        fprintf(f, "SEMANTIC: MLX's rotating cache past its window makes a verify chunk's rows "
                "see older keys than single steps, so speculative output (tokens, or logits "
                "beyond E) differs from plain decoding by the policy's definition; the "
                "exact-window policy (rot=MAX/KEEP/window) agreed with plain decoding in each of "
                "these rows\n");
}
