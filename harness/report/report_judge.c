/* report_judge.c — the judge's sections of report.json ("dumps", "pairs") and report.md. */
#include "report.h"

#include <jansson.h>
#include <math.h>
#include <string.h>

static json_t *num(double d)
{
    if (isnan(d))
        return json_string("NaN");
    if (isinf(d))
        return json_string(d > 0 ? "Infinity" : "-Infinity");
    return json_real(d);
}

static int put(json_t *o, const char *k, json_t *v)
{
    return v == NULL || json_object_set_new(o, k, v) != 0;
}

static json_t *dump_obj(const hx_report *r, const hx_dump_report *d, int *bad)
{
    json_t *o = json_object(), *kl = json_object(), *pr = json_object();
    if (o == NULL || kl == NULL || pr == NULL) {
        *bad = 1;
        json_decref(o);
        json_decref(kl);
        json_decref(pr);
        return NULL;
    }
    *bad |= put(o, "dump", json_string(d->name));
    *bad |= put(o, "engine", json_string(d->engine));
    *bad |= put(o, "settings", json_string(d->settings));
    *bad |= put(o, "rows", json_string(d->rows));
    *bad |= put(o, "dtype", json_string(d->dtype));
    *bad |= put(o, "n_positions", json_integer(d->n_pos));
    *bad |= put(kl, "n", json_integer(d->kl.n));
    *bad |= put(kl, "mean", num(d->kl.mean));
    *bad |= put(kl, "max", num(d->kl.max));
    *bad |= put(kl, "p99_9", num(d->kl.p999));
    *bad |= put(kl, "p99", num(d->kl.p99));
    *bad |= put(kl, "p90", num(d->kl.p90));
    *bad |= put(kl, "median", num(d->kl.median));
    *bad |= put(o, "kl", kl);
    *bad |= put(o, "same_top1", num(d->kl.same_top1));
    for (size_t i = 0; i < d->n_profiles; ++i) {
        const hx_config_report *c = &r->configs[d->first_config + i];
        const char *at = strrchr(c->config, '@');
        json_t *p = json_object();
        *bad |= p == NULL;
        if (p == NULL)
            continue;
        *bad |= put(p, "class", json_string(hx_class_name(c->cls)));
        *bad |= put(p, "worst_ratio", num(c->worst_ratio));
        *bad |= put(p, "first_divergent", json_integer(c->first_divergent));
        *bad |= put(p, "reason", json_string(c->reason));
        *bad |= put(pr, at ? at + 1 : c->config, p);
    }
    *bad |= put(o, "profiles", pr);
    *bad |= put(o, "explained_by", d->explained_by[0] ? json_string(d->explained_by) : json_null());
    *bad |= put(o, "greedy_compared", json_boolean(d->has_generated));
    *bad |= put(o, "greedy_first_divergent", json_integer(d->first_divergent));
    *bad |= put(o, "greedy_positions_compared", json_integer(d->compared_to));
    return o;
}

int hx_report_judge_json(void *obj, const hx_report *r)
{
    if (r->n_dumps == 0)
        return 0;
    json_t *o = obj, *ds = json_array(), *ps = json_array();
    int bad = ds == NULL || ps == NULL;
    for (size_t i = 0; i < r->n_dumps && !bad; ++i)
        bad |= json_array_append_new(ds, dump_obj(r, &r->dumps[i], &bad)) != 0;
    for (size_t i = 0; i < r->n_pairs && !bad; ++i) {
        const hx_dump_pair *p = &r->pairs[i];
        json_t *q = json_object();
        bad |= q == NULL;
        if (q == NULL)
            break;
        bad |= put(q, "a", json_string(r->dumps[p->a].name));
        bad |= put(q, "b", json_string(r->dumps[p->b].name));
        bad |= put(q, "shared_positions", json_integer(p->n_shared));
        bad |= put(q, "max_abs", num(p->max_abs));
        bad |= put(q, "first_apart", json_integer(p->first_apart));
        bad |= put(q, "first_argmax_differs", json_integer(p->first_argmax));
        bad |= put(q, "kl_mean_a", num(p->kl_mean_a));
        bad |= put(q, "kl_mean_b", num(p->kl_mean_b));
        bad |= put(q, "closer_to_reference", json_string(p->closer));
        bad |= json_array_append_new(ps, q) != 0;
    }
    if (bad) {
        json_decref(ds);
        json_decref(ps);
        return 1;
    }
    return put(o, "dumps", ds) | put(o, "pairs", ps);
}

void hx_report_judge_md(FILE *f, const hx_report *r)
{
    if (r->n_dumps == 0)
        return;
    fputs("\n## Dumps\n\nKL(reference || dump) per logits row, llama-perplexity's statistics; "
          "class per precision profile (err/E in parentheses); explained by = the profile with "
          "the smallest logits envelope under which the dump passes.\n\n"
          "| dump | rows | KL mean | KL max | KL 99.9% | KL 99% | KL 90% | KL median | same top-1 "
          "| classes | greedy | explained by |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n", f);
    for (size_t i = 0; i < r->n_dumps; ++i) {
        const hx_dump_report *d = &r->dumps[i];
        fprintf(f, "| `%s` | %u %s %s | %.3g | %.3g | %.3g | %.3g | %.3g | %.3g | %.2f%% | ",
                d->name, (unsigned)d->n_pos, d->dtype, d->rows, d->kl.mean, d->kl.max,
                d->kl.p999, d->kl.p99, d->kl.p90, d->kl.median, 100.0 * d->kl.same_top1);
        for (size_t k = 0; k < d->n_profiles; ++k) {
            const hx_config_report *c = &r->configs[d->first_config + k];
            const char *at = strrchr(c->config, '@');
            fprintf(f, "%s%s %s (%.2g)", k ? ", " : "", at ? at + 1 : c->config,
                    hx_class_name(c->cls), c->worst_ratio);
        }
        if (!d->has_generated)
            fputs(" | - |", f);
        else if (d->first_divergent < 0)
            fprintf(f, " | same %lld |", (long long)d->compared_to);
        else
            fprintf(f, " | leaves @%lld |", (long long)d->first_divergent);
        fprintf(f, " %s |\n", d->explained_by[0] ? d->explained_by : "**none**");
    }
    if (r->n_pairs == 0)
        return;
    fputs("\n### Dumps against each other\n\n| a | b | shared rows | max abs | first apart | "
          "first argmax differs | KL mean a | KL mean b | closer |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---|\n", f);
    for (size_t i = 0; i < r->n_pairs; ++i) {
        const hx_dump_pair *p = &r->pairs[i];
        fprintf(f, "| `%s` | `%s` | %u | %.3g | %lld | %lld | %.3g | %.3g | %s |\n",
                r->dumps[p->a].name, r->dumps[p->b].name, (unsigned)p->n_shared, p->max_abs,
                (long long)p->first_apart, (long long)p->first_argmax, p->kl_mean_a,
                p->kl_mean_b, p->closer);
    }
}
