/* coverage.c — axis values covered and engine thresholds left unreached (coverage.h). */
#include "judge/coverage.h"

#include "kvd_engine.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

static const char *attn_impl(hx_attn a)
{
    return a == HX_ATTN_STREAM ? "stream" : "dense";
}

static uint32_t chunk_rows(const hx_config *c, uint32_t n_prompt)
{
    return c->step == 0 || c->step > n_prompt ? n_prompt : c->step;
}

static uint32_t attended_slots(const hx_config *c, uint32_t n_prompt, uint32_t n_gen)
{
    const uint32_t all = n_prompt + n_gen;
    if (c->rot_max == 0)
        return all;
    const uint32_t cap = c->rot_max + chunk_rows(c, n_prompt) - 1;
    return all < cap ? all : cap;
}

/* Prompt positions whose K/V rows c adopts from an earlier request (the driver reuses at most
 * all but the last prompt token). */
static uint32_t reused_rows(const hx_config *c, uint32_t n_prompt)
{
    if (c->prefix == 0 || n_prompt < 2)
        return 0;
    return c->prefix < n_prompt ? c->prefix : n_prompt - 1;
}

static bool threads_split(const hx_config *c)
{
    return hx_config_n_threads(c) >= 2 && !(lm_backend_flags(c->backend) & LM_BE_ONE_THREAD);
}

/* Appends to buf[cap] (cut at cap). */
static void append(char *buf, size_t cap, const char *fmt, ...) LM_PRINTF(3, 4);
static void append(char *buf, size_t cap, const char *fmt, ...)
{
    size_t len = strlen(buf);
    if (len + 1 >= cap)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf + len, cap - len, fmt, ap);
    va_end(ap);
}

enum { AXIS_THREADS, AXIS_ATTN, AXIS_ROT };

/* "1,all(=2)" / "default,stream" / "none,8/2": the distinct values of one axis in order. */
static void axis_values(char *buf, size_t cap, const hx_config *cfgs, size_t n, int axis)
{
    buf[0] = '\0';
    for (size_t i = 0; i < n; ++i) {
        const hx_config *c = &cfgs[i];
        bool seen = false;
        for (size_t j = 0; j < i && !seen; ++j)
            seen = axis == AXIS_THREADS ? cfgs[j].threads == c->threads
                   : axis == AXIS_ATTN  ? cfgs[j].attn == c->attn
                                        : cfgs[j].rot_max == c->rot_max &&
                                             cfgs[j].rot_keep == c->rot_keep;
        if (seen)
            continue;
        const char *sep = buf[0] ? "," : "";
        if (axis == AXIS_THREADS && c->threads == HX_THREADS_ALL)
            append(buf, cap, "%sall(=%u)", sep, (unsigned)hx_threads_all());
        else if (axis == AXIS_THREADS)
            append(buf, cap, "%s%u", sep, c->threads ? (unsigned)c->threads : 1u);
        else if (axis == AXIS_ATTN)
            append(buf, cap, "%s%s", sep, hx_attn_name(c->attn));
        else if (c->rot_max == 0)
            append(buf, cap, "%snone", sep);
        else
            append(buf, cap, "%s%u/%u", sep, (unsigned)c->rot_max, (unsigned)c->rot_keep);
    }
}

static void add_unexercised(hx_report *r, const char *fmt, ...) LM_PRINTF(2, 3);
static void add_unexercised(hx_report *r, const char *fmt, ...)
{
    if (r->n_unexercised >= HX_COVERAGE_MAX)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->unexercised[r->n_unexercised++], sizeof r->unexercised[0], fmt, ap);
    va_end(ap);
}

/* Whether configuration c takes threshold th's path at all (attention, backend, threads). */
static bool applies(const lm_threshold *th, const hx_config *c)
{
    return (th->attn == NULL || strcmp(th->attn, attn_impl(c->attn)) == 0) &&
           (th->backend == NULL || strcmp(th->backend, c->backend) == 0) &&
           (!th->threads || threads_split(c));
}

void hx_coverage_fill(hx_report *r, const hx_config *cfgs, size_t n, uint32_t n_prompt,
                      uint32_t n_gen)
{
    char thr[96], attn[64], rot[96];
    axis_values(thr, sizeof thr, cfgs, n, AXIS_THREADS);
    axis_values(attn, sizeof attn, cfgs, n, AXIS_ATTN);
    axis_values(rot, sizeof rot, cfgs, n, AXIS_ROT);
    uint32_t rows = 0, slots = 0;
    for (size_t i = 0; i < n; ++i) {
        const uint32_t cr = chunk_rows(&cfgs[i], n_prompt);
        const uint32_t ks = attended_slots(&cfgs[i], n_prompt, n_gen);
        rows = cr > rows ? cr : rows;
        slots = ks > slots ? ks : slots;
    }
    snprintf(r->covered, sizeof r->covered,
             "threads %s; attn %s; rot %s; largest chunk %u rows; up to %u cache slots attended",
             thr, attn, rot, (unsigned)rows, (unsigned)slots);
    r->n_unexercised = 0;
    for (size_t t = 0; t < lm_threshold_count(); ++t) {
        const lm_threshold *th = lm_threshold_at(t);
        bool any = false;
        uint32_t best = 0;
        for (size_t i = 0; i < n; ++i) {
            if (!applies(th, &cfgs[i]))
                continue;
            any = true;
            const uint32_t v = th->kind == LM_THR_KEYS     ? attended_slots(&cfgs[i], n_prompt, n_gen)
                               : th->kind == LM_THR_REUSED ? reused_rows(&cfgs[i], n_prompt)
                               : th->kind == LM_THR_SEQS   ? (cfgs[i].batch > 1 ? cfgs[i].batch : 1)
                               : th->kind == LM_THR_SHARDS ? (cfgs[i].tp > 1 ? cfgs[i].tp : 1)
                                                           : chunk_rows(&cfgs[i], n_prompt);
            best = v > best ? v : best;
        }
        if (best >= th->value)
            continue;
        if (!any)
            add_unexercised(r, "%s: no configuration with%s%s%s%s%s: %s", th->name,
                            th->attn ? " attn=" : "", th->attn ? th->attn : "",
                            th->backend ? " backend " : "", th->backend ? th->backend : "",
                            th->threads ? " >= 2 threads on a threaded backend" : "", th->what);
        else if (th->kind == LM_THR_SHARDS)
            add_unexercised(r, "%s: no configuration splits its products (tp=N): %s", th->name,
                            th->what);
        else if (th->kind == LM_THR_SEQS)
            add_unexercised(r, "%s: no configuration shares its calls (batch=B): %s", th->name,
                            th->what);
        else if (th->kind == LM_THR_REUSED)
            add_unexercised(r, "%s: no configuration reuses a prefix (prefix=P): %s", th->name,
                            th->what);
        else if (th->kind == LM_THR_KEYS)
            add_unexercised(r, "%s: at most %u cache slots attended (prompt + generated), "
                            "%u needed: %s", th->name, (unsigned)best,
                            (unsigned)th->value, th->what);
        else
            add_unexercised(r, "%s: largest chunk %u rows, %u needed: %s",
                            th->name, (unsigned)best, (unsigned)th->value, th->what);
    }
}
