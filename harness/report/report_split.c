/* report_split.c — the split-risk forecasts in words: the one line printed by sweep, judge and
 * check and written to report.md and report.html, and report.json's "split_risk" member. */
#include "model/report.h"

#include "report/json_num.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void hx_split_pct(char *buf, size_t n, double p)
{
    const double pc = 100.0 * p;
    if (isnan(p))
        snprintf(buf, n, "n/a");
    else if (p > 0.0 && pc < 0.01)
        snprintf(buf, n, "<0.01%%");
    else if (pc >= 10.0 || p == 0.0)
        snprintf(buf, n, "%.0f%%", pc);
    else if (pc >= 1.0)
        snprintf(buf, n, "%.1f%%", pc);
    else
        snprintf(buf, n, "%.2f%%", pc);
}

/* Appends to buf[n] at *at (cut at n). */
static void add(char *buf, size_t n, size_t *at, const char *fmt, ...) LM_PRINTF(4, 5);
static void add(char *buf, size_t n, size_t *at, const char *fmt, ...)
{
    if (*at >= n)
        return;
    va_list ap;
    va_start(ap, fmt);
    const int k = vsnprintf(buf + *at, n - *at, fmt, ap);
    va_end(ap);
    if (k > 0)
        *at += (size_t)k < n - *at ? (size_t)k : n - *at;
}

void hx_split_line(char *buf, size_t n, const hx_report *r)
{
    size_t at = 0;
    if (n > 0)
        buf[0] = '\0';
    if (r->n_split == 0)
        return;
    const hx_split_forecast *worst = NULL;
    add(buf, n, &at, "split risk within %u tokens:", (unsigned)r->split[0].n_steps);
    for (uint32_t i = 0; i < r->n_split; ++i) {
        const hx_split_forecast *s = &r->split[i];
        if (!s->valid) {
            add(buf, n, &at, "%s %s n/a (a member is not finite)", i ? "," : "", s->profile);
            continue;
        }
        char p[16], lo[16], hi[16];
        hx_split_pct(p, sizeof p, s->risk);
        hx_split_pct(lo, sizeof lo, s->lo);
        hx_split_pct(hi, sizeof hi, s->hi);
        add(buf, n, &at, "%s %s %s [%s, %s]", i ? "," : "", s->profile, p, lo, hi);
        if (s->likely_step >= 0 && (worst == NULL || s->risk > worst->risk))
            worst = s;
    }
    if (worst != NULL)
        add(buf, n, &at, " (%s: most likely at step %lld, margin %.3g)", worst->profile,
            (long long)worst->likely_step, worst->likely_margin);
}

static json_t *forecast_obj(const hx_split_forecast *s, int *bad)
{
    json_t *o = json_object();
    if (o == NULL) {
        *bad = 1;
        return NULL;
    }
    *bad |= hx_json_put(o, "profile", json_string(s->profile));
    *bad |= hx_json_put(o, "within_tokens", json_integer(s->n_steps));
    *bad |= hx_json_put(o, "members", json_integer(s->n_members));
    *bad |= hx_json_put(o, "valid", json_boolean(s->valid));
    *bad |= hx_json_put(o, "risk", hx_json_num(s->risk));
    *bad |= hx_json_put(o, "lo", hx_json_num(s->lo));
    *bad |= hx_json_put(o, "hi", hx_json_num(s->hi));
    *bad |= hx_json_put(o, "likely_step", json_integer(s->likely_step));
    *bad |= hx_json_put(o, "likely_p", hx_json_num(s->likely_p));
    *bad |= hx_json_put(o, "likely_margin", hx_json_num(s->likely_margin));
    *bad |= hx_json_put(o, "likely_sd", hx_json_num(s->likely_sd));
    *bad |= hx_json_put(o, "pair_differ", hx_json_num(s->pair));
    *bad |= hx_json_put(o, "pair_differ_lo", hx_json_num(s->pair_lo));
    *bad |= hx_json_put(o, "pair_differ_hi", hx_json_num(s->pair_hi));
    *bad |= hx_json_put(o, "min_margin_step", json_integer(s->min_step));
    *bad |= hx_json_put(o, "min_margin", hx_json_num(s->min_margin));
    return o;
}

int hx_report_split_json(void *obj, const hx_report *r)
{
    json_t *o = obj, *a = json_array();
    int bad = a == NULL;
    for (uint32_t i = 0; a != NULL && i < r->n_split; ++i)
        if (json_array_append_new(a, forecast_obj(&r->split[i], &bad)) != 0)
            bad = 1;
    bad |= hx_json_put(o, "split_risk", a);
    return bad;
}

void hx_report_split_md(FILE *f, const hx_report *r)
{
    char line[1024];
    hx_split_line(line, sizeof line, r);
    if (line[0])
        fprintf(f, "- %s; interval: %.0f%% from the members' count "
                   "(docs/DESIGN.md, \"Split risk\")\n",
                line, 100.0 * HX_SPLIT_LEVEL);
}
