/* report_probe.c — `kvdrift probe`'s section of report.json ("probe") and report.md: what the
 * server said it is, each request configuration's bits against the baseline, its timing, and
 * the concurrency levels at which the server answered every request identically. */
#include "model/report.h"

#include "report/json_num.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>

/* Whether every row at concurrency c has the baseline's bits; false when none runs at c. */
static bool invariant_at(const hx_probe_report *p, uint32_t c)
{
    bool any = false;
    for (size_t i = 0; i < p->n_rows; ++i)
        if (p->rows[i].concurrency == c) {
            if (!p->rows[i].bits_same)
                return false;
            any = true;
        }
    return any;
}

void hx_probe_invariance_line(char *buf, size_t n, const hx_probe_report *p)
{
    buf[0] = '\0';
    size_t l = 0;
    for (size_t i = 0; i < p->n_rows && l < n; ++i) {
        const uint32_t c = p->rows[i].concurrency;
        bool seen = false;
        for (size_t j = 0; j < i; ++j)
            seen |= p->rows[j].concurrency == c;
        if (seen || c < 2 || !invariant_at(p, c))
            continue;
        l += (size_t)snprintf(buf + l, n - l, "%s%u", l ? ", " : "batch-invariant on this "
                              "prompt at concurrency ", (unsigned)c);
    }
    if (l > 0 && l < n)
        snprintf(buf + l, n - l, " (every request answered with the baseline's bits)");
}

void hx_probe_row_cells(hx_probe_cells *c, const hx_probe_report_row *w)
{
    snprintf(c->first, sizeof c->first, "-");
    snprintf(c->text, sizeof c->text, "same");
    if (w->first_row_differ >= 0)
        snprintf(c->first, sizeof c->first, "%lld", (long long)w->first_row_differ);
    if (w->first_token_differ >= 0)
        snprintf(c->text, sizeof c->text, "differs @%lld", (long long)w->first_token_differ);
    c->tok_s = w->batch_s > 0 ? w->batch_tokens / w->batch_s : 0.0;
}

static json_t *row_obj(const hx_probe_report_row *w, int *bad)
{
    json_t *o = json_object();
    if (o == NULL) {
        *bad = 1;
        return NULL;
    }
    *bad |= hx_json_put(o, "config", json_string(w->config));
    *bad |= hx_json_put(o, "concurrency", json_integer(w->concurrency));
    *bad |= hx_json_put(o, "prefix", json_string(w->prefix));
    *bad |= hx_json_put(o, "repeat", json_integer(w->repeat));
    *bad |= hx_json_put(o, "baseline", json_boolean(w->is_baseline));
    *bad |= hx_json_put(o, "bits_same", json_boolean(w->bits_same));
    *bad |= hx_json_put(o, "rows_differ", json_integer(w->n_rows_differ));
    *bad |= hx_json_put(o, "first_row_differ", json_integer(w->first_row_differ));
    *bad |= hx_json_put(o, "max_abs_diff", hx_json_num(w->max_abs_diff));
    *bad |= hx_json_put(o, "first_token_differ", json_integer(w->first_token_differ));
    *bad |= hx_json_put(o, "latency_s", hx_json_num(w->latency_s));
    *bad |= hx_json_put(o, "batch_s", hx_json_num(w->batch_s));
    *bad |= hx_json_put(o, "batch_tokens", json_integer(w->batch_tokens));
    hx_probe_cells cells;
    hx_probe_row_cells(&cells, w);
    *bad |= hx_json_put(o, "batch_tokens_per_s", hx_json_num(cells.tok_s));
    *bad |= hx_json_put(o, "class", json_string(hx_class_name(w->cls)));
    return o;
}

int hx_report_probe_json(void *obj, const hx_report *r)
{
    const hx_probe_report *p = &r->probe;
    if (!p->run)
        return 0;
    json_t *o = json_object(), *rows = json_array();
    int bad = o == NULL || rows == NULL;
    char inv[512];
    hx_probe_invariance_line(inv, sizeof inv, p);
    if (!bad) {
        bad |= hx_json_put(o, "url", json_string(p->url));
        bad |= hx_json_put(o, "server_models", json_string(p->server_models));
        bad |= hx_json_put(o, "server_props", json_string(p->server_props));
        bad |= hx_json_put(o, "server_version", json_string(p->server_version));
        bad |= hx_json_put(o, "reply_model", json_string(p->reply_model));
        bad |= hx_json_put(o, "transport", json_string(p->transport));
        bad |= hx_json_put(o, "k", json_integer(p->k));
        bad |= hx_json_put(o, "batch_invariant", json_string(inv));
        for (size_t i = 0; i < p->n_rows && !bad; ++i)
            bad |= json_array_append_new(rows, row_obj(&p->rows[i], &bad)) != 0;
    }
    if (bad) {
        json_decref(o);
        json_decref(rows);
        return 1;
    }
    return hx_json_put(o, "requests", rows) | hx_json_put(obj, "probe", o);
}

void hx_report_probe_md(FILE *f, const hx_report *r)
{
    const hx_probe_report *p = &r->probe;
    if (!p->run)
        return;
    fprintf(f, "\n## Server\n\n`%s`: models %s; %s%s%s; replies name `%s`; sent as %s; "
            "top-%u log-probabilities per position.\n\n", p->url,
            p->server_models[0] ? p->server_models : "(no /v1/models)",
            p->server_props[0] ? p->server_props : "no /props",
            p->server_version[0] ? "; " : "", p->server_version, p->reply_model, p->transport,
            (unsigned)p->k);
    fputs("| request | bits vs baseline | rows differ | first row | max abs diff | text | "
          "latency s | batch s | batch tok/s | class |\n"
          "|---|---|---:|---:|---:|---|---:|---:|---:|---|\n", f);
    for (size_t i = 0; i < p->n_rows; ++i) {
        const hx_probe_report_row *w = &p->rows[i];
        hx_probe_cells c;
        hx_probe_row_cells(&c, w);
        fprintf(f, "| `%s` | %s | %u | %s | %.3g | %s | %.3f | %.3f | %.1f | %s |\n", w->config,
                w->is_baseline ? "(baseline)" : w->bits_same ? "same" : "**differ**",
                (unsigned)w->n_rows_differ, c.first, w->max_abs_diff, c.text, w->latency_s,
                w->batch_s, c.tok_s, hx_class_name(w->cls));
    }
    char inv[512];
    hx_probe_invariance_line(inv, sizeof inv, p);
    if (inv[0])
        fprintf(f, "\n%s.\n", inv);
}
