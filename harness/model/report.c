/* report.c — the in-memory report: building it row by row, verdicts and exit codes. */
#include "model/report.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

const char *hx_golden_status_name(hx_golden_status s)
{
    switch (s) {
    case HX_GOLDEN_MATCH: return "match";
    case HX_GOLDEN_MISMATCH: return "mismatch";
    case HX_GOLDEN_ABSENT: return "absent";
    case HX_GOLDEN_STALE: return "stale";
    default: return "n/a";
    }
}

int hx_report_create(hx_report **out, const char *case_name, lm_err *err)
{
    hx_report *r = calloc(1, sizeof *r);
    if (r == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "report: out of memory");
    snprintf(r->case_name, sizeof r->case_name, "%s", case_name);
    r->min_margin = (double)NAN; /* unknown until a sweep sets it */
    time_t now = time(NULL);
    struct tm tm;
    gmtime_r(&now, &tm);
    strftime(r->created_utc, sizeof r->created_utc, "%Y-%m-%dT%H:%M:%SZ", &tm);
    *out = r;
    return LM_OK;
}

const char *hx_phase_name(hx_phase p)
{
    static const char *const names[HX_N_PHASES] = {"path", "reference", "ensemble", "configs",
                                                   "compare", "total"};
    return (unsigned)p < HX_N_PHASES ? names[p] : "?";
}

void hx_command_line(char *buf, size_t n, int argc, char **argv)
{
    snprintf(buf, n, "kvdrift");
    for (int i = 0; i < argc; ++i) {
        const size_t k = strlen(buf);
        const bool quote = argv[i][0] == '\0' || strpbrk(argv[i], " \t'\"\\$") != NULL;
        if (k < n)
            snprintf(buf + k, n - k, quote ? " '%s'" : " %s", argv[i]);
    }
}

void hx_report_free(hx_report *r)
{
    if (r == NULL)
        return;
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_configs; ++i)
        hx_config_report_free_parts(&r->configs[i]);
    free(r->configs);
    free(r->dumps);
    free(r->pairs);
    free(r->spec.rows);
    free(r->block.rows);
    free(r->probe.rows);
    free(r);
}

int hx_report_add_config(hx_report *r, hx_config_report **out, const char *config, lm_err *err)
{
    hx_config_report *nc = realloc(r->configs, (r->n_configs + 1) * sizeof *nc);
    if (nc == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "report: out of memory");
    r->configs = nc;
    hx_config_report *c = &nc[r->n_configs++];
    memset(c, 0, sizeof *c);
    snprintf(c->config, sizeof c->config, "%s", config);
    c->cls = HX_EXACT;
    c->first_divergent = -1;
    c->sig_digits = HX_SIG_DIGITS_MAX;
    hx_logit_agg_init(&c->logits);
    *out = c;
    return LM_OK;
}

int hx_config_report_add_row(hx_config_report *c, const hx_tensor_row *row, lm_err *err)
{
    hx_tensor_row *nr = realloc(c->rows, (c->n_rows + 1) * sizeof *nr);
    if (nr == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "report: out of memory");
    c->rows = nr;
    nr[c->n_rows++] = *row;
    bool first = c->n_rows == 1;
    if (first) {
        c->vs_ref = row->vs_ref;
        snprintf(c->reason, sizeof c->reason, "%s: %s", row->name, row->reason);
    } else {
        hx_metrics_merge_max(&c->vs_ref, &row->vs_ref);
    }
    if (row->cls > c->cls) {
        c->cls = row->cls;
        snprintf(c->reason, sizeof c->reason, "%s: %s", row->name, row->reason);
    }
    double err_abs = row->vs_ref.max_abs;
    double ratio = err_abs == 0.0 ? 0.0 : (row->e > 0.0 ? err_abs / row->e : (double)INFINITY);
    if (isnan(err_abs) || ratio > c->worst_ratio)
        c->worst_ratio = isnan(err_abs) ? (double)NAN : ratio;
    if (row->vs_ref.sig_digits < c->sig_digits)
        c->sig_digits = row->vs_ref.sig_digits;
    double ur = hx_ulp_rel(row->vs_ref.max_abs, row->vs_ref.r_absmax);
    if (!isnan(c->ulp_rel) && (isnan(ur) || ur > c->ulp_rel))
        c->ulp_rel = ur;
    if (row->is_logits) {
        if (row->e > c->e_logits_max)
            c->e_logits_max = row->e;
        hx_logit_agg_add(&c->logits, &row->lg);
    }
    return LM_OK;
}

double hx_ulp_rel(double max_abs, double max_abs_ref)
{
    if (isnan(max_abs))
        return (double)NAN;
    if (max_abs == 0.0)
        return 0.0;
    double spacing = max_abs_ref > 0.0 && isfinite(max_abs_ref)
                         ? ldexp(1.0, ilogb(max_abs_ref) - 23)
                         : ldexp(1.0, -149);
    return max_abs / spacing;
}

void hx_config_report_set_divergence(hx_config_report *c, int64_t first, hx_class cls_at)
{
    c->first_divergent = first;
    c->divergent_cls = cls_at;
    if (first >= 0 && cls_at > c->cls) {
        c->cls = cls_at;
        snprintf(c->reason, sizeof c->reason, "greedy tokens part at generated index %lld: %s",
                 (long long)first, hx_class_name(cls_at));
    }
}

void hx_dump_departure_text(char *buf, size_t cap, const hx_dump_report *d, uint32_t n_prompt)
{
    if (!d->has_generated)
        snprintf(buf, cap, "%s", "");
    else if (d->first_divergent < 0)
        snprintf(buf, cap, "same as the reference over %lld compared",
                 (long long)d->compared_to);
    else
        snprintf(buf, cap, "leaves the reference at generated index %lld (position %lld): id "
                 "%d where the reference's argmax is %d, its margin %.3g%s",
                 (long long)d->first_divergent,
                 (long long)n_prompt - 1 + (long long)d->first_divergent, (int)d->departed_chose,
                 (int)d->departed_ref_top, d->departed_margin,
                 d->departed_beyond ? ", past the shared ids: judged by no envelope" : "");
}

void hx_kv_first_text(char *buf, size_t cap, const hx_kv_first *k)
{
    if (!k->checked)
        snprintf(buf, cap, "%s", "");
    else if (k->layer < 0)
        snprintf(buf, cap, "K/V: every row within the envelope (%u rows)", (unsigned)k->n_rows);
    else
        snprintf(buf, cap, "K/V: first outside the envelope at layer %d, position %d (its %c "
                 "row: max |dump - R| %.3g > E %.3g; %u of %u rows outside)", (int)k->layer,
                 (int)k->pos, k->tensor, k->err, k->e, (unsigned)k->n_outside,
                 (unsigned)k->n_rows);
}

void hx_config_report_free_parts(hx_config_report *c)
{
    free(c->rows);
    c->rows = NULL;
    c->n_rows = 0;
    free(c->hidden_first.states);
    c->hidden_first.states = NULL;
    c->hidden_first.n_states = 0;
}

/* "the embedding" or "layer L" for hidden state layer (-1: the embedding). */
static void state_name(char *buf, size_t cap, int32_t layer)
{
    if (layer < 0)
        snprintf(buf, cap, "the embedding");
    else
        snprintf(buf, cap, "layer %d", (int)layer);
}

void hx_hidden_first_text(char *buf, size_t cap, const hx_hidden_first *h)
{
    char where[32];
    state_name(where, sizeof where, h->layer);
    if (h->no_envelope)
        snprintf(buf, cap, "%s", "hidden: not judged under this profile (its envelope's members "
                 "record no hidden states)");
    else if (!h->checked)
        snprintf(buf, cap, "%s", "");
    else if (!h->outside)
        snprintf(buf, cap, "hidden: every row within the envelope (%u rows of %u states)",
                 (unsigned)h->n_rows, (unsigned)h->n_states);
    else
        snprintf(buf, cap, "hidden: first outside the envelope at %s, position %d (max |dump - "
                 "R| %.3g > E %.3g; %u of %u rows outside)", where, (int)h->pos, h->err, h->e,
                 (unsigned)h->n_outside, (unsigned)h->n_rows);
}

void hx_hidden_states_text(char *buf, size_t cap, const hx_hidden_first *h)
{
    if (cap == 0)
        return;
    buf[0] = '\0';
    if (!h->checked || h->n_states == 0)
        return;
    size_t n = (size_t)snprintf(buf, cap, "err/E by state:");
    for (uint32_t i = 0; i < h->n_states && n < cap; ++i) {
        const hx_hidden_state *st = &h->states[i];
        char name[16];
        if (st->layer < 0)
            snprintf(name, sizeof name, "embedding");
        else
            snprintf(name, sizeof name, "L%d", (int)st->layer);
        n += (size_t)snprintf(buf + n, cap - n, "%s %s %.3g", i ? "," : "", name, st->ratio);
    }
    if (n >= cap && cap > 4)
        memcpy(buf + cap - 4, "...", 4);
}

bool hx_config_report_fails(const hx_config_report *c, bool strict)
{
    if (c->skipped)
        return false;
    if (hx_class_fails(c->cls) || c->golden == HX_GOLDEN_STALE)
        return true;
    if (c->must_be_exact && c->cls != HX_EXACT)
        return true;
    return strict && c->golden != HX_GOLDEN_MATCH;
}

hx_class hx_report_worst(const hx_report *r)
{
    hx_class w = HX_EXACT;
    for (size_t i = 0; i < r->n_configs; ++i)
        w = hx_class_worst(w, r->configs[i].cls);
    return w;
}

int hx_report_exit_code(const hx_report *r, bool strict)
{
    if (r->n_dumps > 0) {
        for (size_t i = 0; i < r->n_configs; ++i) {
            const hx_config_report *c = &r->configs[i];
            if (c->cls == HX_ERROR)
                return 1; /* an adapter's configuration that produced no dump */
            /* an adapter's case in check: its goldens as a sweep's (stale, strict bits) */
            if (c->golden == HX_GOLDEN_STALE ||
                (strict && c->golden != HX_GOLDEN_NA && c->golden != HX_GOLDEN_MATCH))
                return 1;
        }
        for (size_t i = 0; i < r->n_dumps; ++i)
            if (r->dumps[i].explained_by[0] == '\0')
                return 1;
        return 0;
    }
    for (size_t i = 0; i < r->n_configs; ++i)
        if (hx_config_report_fails(&r->configs[i], strict))
            return 1;
    for (size_t i = 0; i < r->spec.n_rows; ++i)
        if (hx_class_fails(r->spec.rows[i].cls))
            return 1;
    return 0;
}

void hx_config_report_summary(char *buf, size_t n, const hx_config_report *c)
{
    const hx_logit_agg *a = &c->logits;
    char ulp[24];
    if (c->vs_ref.max_ulp == HX_ULP_NAN)
        snprintf(ulp, sizeof ulp, "nan");
    else
        snprintf(ulp, sizeof ulp, "%llu", (unsigned long long)c->vs_ref.max_ulp);
    snprintf(buf, n,
             "%s: max_abs %.3g (worst err/E %.3g), ulp@max %.3g (raw max_ulp %s), nmse %.3g, "
             "kl_mean %.3g, "
             "kl_max %.3g, top1 %u/%u, min_margin %.3g, sig_digits %.2f, first_divergent %lld, "
             "golden %s; %s",
             hx_class_name(c->cls), c->vs_ref.max_abs, c->worst_ratio, c->ulp_rel, ulp,
             c->vs_ref.nmse,
             hx_logit_agg_kl_mean(a), a->kl_max, (unsigned)a->n_top1_agree, (unsigned)a->n_pos,
             a->min_r_margin, c->sig_digits, (long long)c->first_divergent,
             hx_golden_status_name(c->golden), c->reason);
}

void hx_config_report_failure(char *buf, size_t n, const char **type, const hx_config_report *c,
                              bool strict)
{
    *type = "";
    buf[0] = '\0';
    if (!hx_config_report_fails(c, strict))
        return;
    if (hx_class_fails(c->cls)) {
        *type = hx_class_name(c->cls);
        hx_config_report_summary(buf, n, c);
    } else if (c->golden == HX_GOLDEN_STALE) {
        *type = "STALE_GOLDEN";
        snprintf(buf, n, "golden stale: %s", c->golden_note);
    } else if (c->must_be_exact && c->cls != HX_EXACT) {
        *type = "NOT_INVARIANT";
        snprintf(buf, n, "invariant bits: %s, not bitwise equal to its one-chunk baseline "
                 "although its backend is chunk invariant (max |x - baseline| %.3g, worst "
                 "err/E %.3g)", hx_class_name(c->cls), c->vs_base.max_abs, c->worst_ratio);
    } else {
        *type = c->golden == HX_GOLDEN_MISMATCH ? "GOLDEN_MISMATCH" : "GOLDEN_ABSENT";
        snprintf(buf, n, "strict bits: golden %s: %s (class %s, worst err/E %.3g)",
                 hx_golden_status_name(c->golden), c->golden_note, hx_class_name(c->cls),
                 c->worst_ratio);
    }
}

const char *const hx_report_col_names[HX_REPORT_NCOLS] = {
    "config", "class", "div@", "max abs", "ULP@max", "NMSE", "KL mean", "KL max",
    "top1", "min margin", "E logits", "err/E", "sig", "prefill t/s (median)",
    "decode t/s (median)", "peak MiB", "semantic"};

static void cell_g(char *c, double v)
{
    snprintf(c, HX_REPORT_CELL, "%.3g", v);
}

void hx_report_cells(char cells[HX_REPORT_NCOLS][HX_REPORT_CELL], const hx_config_report *c)
{
    snprintf(cells[0], HX_REPORT_CELL, "%.*s", HX_REPORT_CELL - 1, c->config);
    snprintf(cells[1], HX_REPORT_CELL, "%s", hx_class_name(c->cls));
    if (c->first_divergent >= 0)
        snprintf(cells[2], HX_REPORT_CELL, "%lld", (long long)c->first_divergent);
    else
        snprintf(cells[2], HX_REPORT_CELL, "-");
    cell_g(cells[3], c->vs_ref.max_abs);
    cell_g(cells[4], c->ulp_rel);
    cell_g(cells[5], c->vs_ref.nmse);
    const hx_logit_agg *a = &c->logits;
    if (a->n_pos) {
        cell_g(cells[6], hx_logit_agg_kl_mean(a));
        cell_g(cells[7], a->kl_max);
        snprintf(cells[8], HX_REPORT_CELL, "%u/%u", (unsigned)a->n_top1_agree, (unsigned)a->n_pos);
        cell_g(cells[9], a->min_r_margin);
        cell_g(cells[10], c->e_logits_max);
    } else {
        for (int i = 6; i <= 10; ++i)
            snprintf(cells[i], HX_REPORT_CELL, "-");
    }
    cell_g(cells[11], c->worst_ratio);
    snprintf(cells[12], HX_REPORT_CELL, "%.1f", c->sig_digits);
    if (c->prefill_tps > 0.0)
        snprintf(cells[13], HX_REPORT_CELL, "%.0f", c->prefill_tps);
    else
        snprintf(cells[13], HX_REPORT_CELL, "-");
    if (c->decode_tps > 0.0)
        snprintf(cells[14], HX_REPORT_CELL, "%.0f", c->decode_tps);
    else
        snprintf(cells[14], HX_REPORT_CELL, "-");
    if (c->peak_mem_bytes)
        snprintf(cells[15], HX_REPORT_CELL, "%.1f", (double)c->peak_mem_bytes / (1024.0 * 1024.0));
    else
        snprintf(cells[15], HX_REPORT_CELL, "-");
    if (!c->sem_checked)
        snprintf(cells[16], HX_REPORT_CELL, "-");
    else if (c->sem_first >= 0)
        snprintf(cells[16], HX_REPORT_CELL, "diverges@%lld", (long long)c->sem_first);
    else if (c->sem_same_schedule || c->sem_max_abs == 0.0)
        snprintf(cells[16], HX_REPORT_CELL, "same");
    else
        snprintf(cells[16], HX_REPORT_CELL, "shifted");
}
