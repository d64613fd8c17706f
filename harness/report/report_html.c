/* report_html.c — report.html: one self-contained page (inline CSS and SVG, no script, no
 * external reference) that a person reads: per case a summary table; heatmaps of err/E for K
 * and V (configurations x layers) and for logits (configurations x positions); error vs
 * envelope along positions; the reference's top-2 margins with the argmax flips marked; speed
 * and memory vs prefill step. The markup is well-formed XML (tested with libxml2), so any
 * browser renders it the same. */
#include "model/report.h"
#include "report/html_page.h"

#include "fs.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* err/E of one row: max abs error over the envelope (Inf when E == 0 < error, 0 when no
 * error, NaN when the error is NaN). */
static double row_ratio(const hx_tensor_row *t)
{
    double e = t->vs_ref.max_abs;
    if (isnan(e))
        return (double)NAN;
    if (e == 0.0)
        return 0.0;
    return t->e > 0.0 ? e / t->e : (double)INFINITY;
}

/* Heatmap colour of an err/E value: 0 pale green; log10 from -2 to 0 green to yellow; above 1
 * orange to red (beyond what rounding explains); NaN purple. */
static void ratio_colour(char out[8], double r)
{
    if (isnan(r)) {
        snprintf(out, 8, "#7b1fa2");
        return;
    }
    if (r == 0.0) {
        snprintf(out, 8, "#e8f5e9");
        return;
    }
    double l = log10(r);
    int R, G, B;
    if (l <= 0.0) {
        double t = l < -2.0 ? 0.0 : (l + 2.0) / 2.0; /* 0 at 1e-2, 1 at 1 */
        R = (int)(76 + t * (253 - 76));
        G = (int)(175 + t * (216 - 175));
        B = (int)(80 + t * (53 - 80));
    } else {
        double t = l > 2.0 ? 1.0 : l / 2.0; /* 1 -> orange, 100 -> red */
        R = (int)(245 + t * (198 - 245));
        G = (int)(124 + t * (40 - 124));
        B = (int)(0 + t * (40 - 0));
    }
    snprintf(out, 8, "#%02x%02x%02x", R, G, B);
}

/* Row kinds parsed from the row names "L<l>.K", "L<l>.V", "logits@<pos>". */
static bool row_kv(const hx_tensor_row *t, unsigned *layer, char *kv)
{
    char c;
    if (t->is_logits || sscanf(t->name, "L%u.%c", layer, &c) != 2 || (c != 'K' && c != 'V'))
        return false;
    *kv = c;
    return true;
}

static bool row_pos(const hx_tensor_row *t, unsigned *pos)
{
    return t->is_logits && sscanf(t->name, "logits@%u", pos) == 1;
}

typedef struct dims {
    unsigned n_layer, pos_min, pos_max;
    bool has_logits;
} dims;

static dims report_dims(const hx_report *r)
{
    dims d = {0, UINT32_MAX, 0, false};
    for (size_t i = 0; i < r->n_configs; ++i)
        for (size_t j = 0; j < r->configs[i].n_rows; ++j) {
            unsigned l, p;
            char kv;
            if (row_kv(&r->configs[i].rows[j], &l, &kv) && l + 1 > d.n_layer)
                d.n_layer = l + 1;
            if (row_pos(&r->configs[i].rows[j], &p)) {
                d.has_logits = true;
                d.pos_min = p < d.pos_min ? p : d.pos_min;
                d.pos_max = p > d.pos_max ? p : d.pos_max;
            }
        }
    return d;
}

enum { LABEL_W = 230, CELL = 14, TOP = 34 };

/* One heatmap cell with a hover title. */
static void cell(FILE *f, double x, double y, double w, double h, double r, const char *cfg,
                 const char *what)
{
    char col[8];
    ratio_colour(col, r);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"%s\">"
               "<title>", x, y, w, h, col);
    hx_html_esc(f, cfg);
    fprintf(f, " %s: err/E %.3g</title></rect>\n", what, r);
}

static void config_labels(FILE *f, const hx_report *r, double y0, double h)
{
    for (size_t i = 0; i < r->n_configs; ++i) {
        fprintf(f, "<text x=\"%d\" y=\"%.1f\" class=\"lbl\" text-anchor=\"end\">", LABEL_W - 6,
                y0 + (double)i * h + h * 0.75);
        hx_html_esc(f, r->configs[i].config);
        fputs("</text>\n", f);
    }
}

/* Heatmap of K and V err/E: configurations x (layer, K|V). */
static void heatmap_kv(FILE *f, const hx_report *r, const dims *d)
{
    unsigned cols = 2 * d->n_layer;
    double w = LABEL_W + cols * (double)CELL + 20, h = TOP + (double)r->n_configs * CELL + 10;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heat-kv\" width=\"%.0f\" "
               "height=\"%.0f\">\n", w, h);
    for (unsigned l = 0; l < d->n_layer; ++l)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"lbl\" text-anchor=\"middle\">L%u</text>\n",
                LABEL_W + (2.0 * l + 1.0) * CELL, TOP - 18, l);
    for (unsigned c = 0; c < cols; ++c)
        fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"lbl\" text-anchor=\"middle\">%c</text>\n",
                LABEL_W + (c + 0.5) * CELL, TOP - 4, c % 2 ? 'V' : 'K');
    config_labels(f, r, TOP, CELL);
    for (size_t i = 0; i < r->n_configs; ++i)
        for (size_t j = 0; j < r->configs[i].n_rows; ++j) {
            const hx_tensor_row *t = &r->configs[i].rows[j];
            unsigned l;
            char kv;
            if (row_kv(t, &l, &kv))
                cell(f, LABEL_W + (2.0 * l + (kv == 'V')) * CELL, TOP + (double)i * CELL,
                     CELL - 1, CELL - 1, row_ratio(t), r->configs[i].config, t->name);
        }
    fputs("</svg>\n", f);
}

/* Heatmap of the logits rows' err/E: configurations x positions. */
static void heatmap_logits(FILE *f, const hx_report *r, const dims *d)
{
    unsigned cols = d->pos_max - d->pos_min + 1;
    double cw = cols > 64 ? 6.0 : CELL;
    double w = LABEL_W + cols * cw + 20, h = TOP + (double)r->n_configs * CELL + 10;
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"heat-logits\" width=\"%.0f\" "
               "height=\"%.0f\">\n", w, h);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lbl\">position %u</text>\n", LABEL_W, TOP - 6,
            d->pos_min);
    fprintf(f, "<text x=\"%.1f\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">%u</text>\n",
            LABEL_W + cols * cw, TOP - 6, d->pos_max);
    config_labels(f, r, TOP, CELL);
    for (size_t i = 0; i < r->n_configs; ++i)
        for (size_t j = 0; j < r->configs[i].n_rows; ++j) {
            const hx_tensor_row *t = &r->configs[i].rows[j];
            unsigned p;
            if (row_pos(t, &p))
                cell(f, LABEL_W + (p - d->pos_min) * cw, TOP + (double)i * CELL, cw - 1,
                     CELL - 1, row_ratio(t), r->configs[i].config, t->name);
        }
    fputs("</svg>\n", f);
}

/* Max abs logits error of each configuration along positions, and the envelope E (dashed),
 * log scale. At most HX_HTML_N_PALETTE configurations are drawn (the worst by err/E first). */
static void error_vs_envelope(FILE *f, const hx_report *r, const dims *d)
{
    hx_html_plot p = {d->pos_min, d->pos_max, INFINITY, 0.0, .logy = true};
    for (size_t i = 0; i < r->n_configs; ++i)
        for (size_t j = 0; j < r->configs[i].n_rows; ++j) {
            const hx_tensor_row *t = &r->configs[i].rows[j];
            double vals[2] = {t->vs_ref.max_abs, t->e};
            for (int k = 0; t->is_logits && k < 2; ++k)
                if (isfinite(vals[k]) && vals[k] > 0.0) {
                    p.y0 = vals[k] < p.y0 ? vals[k] : p.y0;
                    p.y1 = vals[k] > p.y1 ? vals[k] : p.y1;
                }
        }
    if (!(p.y1 > 0.0)) {
        fputs("<p>No logits error to plot: every configuration equals the reference rounded "
              "to float32 (or none was measured).</p>\n", f);
        return;
    }
    p.y0 = p.y0 / 2.0;
    p.y1 = p.y1 * 2.0;
    hx_html_frame(f, &p, "err-env", "position", "max |x - R| (log)", true);
    for (size_t i = 0, k = 0; i < r->n_configs && k < HX_HTML_N_PALETTE; ++i) {
        const hx_config_report *c = &r->configs[i];
        if (c->n_rows == 0)
            continue;
        const char *col = hx_html_palette[k];
        for (int env = 0; env < (k == 0 ? 2 : 1); ++env) {
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"%s\"%s points=\"",
                    env ? "#555555" : col, env ? "1.5" : "1.2",
                    env ? " stroke-dasharray=\"4 3\"" : "");
            for (size_t j = 0; j < c->n_rows; ++j) {
                unsigned pos;
                double v = env ? c->rows[j].e : c->rows[j].vs_ref.max_abs;
                if (row_pos(&c->rows[j], &pos))
                    fprintf(f, "%.1f,%.1f ", hx_html_px(&p, pos), hx_html_py(&p, v > 0.0 ? v : p.y0));
            }
            fputs("\"/>\n", f);
        }
        if (k == 0)
            hx_html_legend(f, 0, "#555555", "envelope E", true);
        hx_html_legend(f, k + 1, col, c->config, false);
        k++;
    }
    fputs("</svg>\n", f);
}

/* The logits row of configuration i at position pos; NULL when it has none. */
static const hx_tensor_row *row_at(const hx_config_report *c, unsigned pos)
{
    for (size_t k = 0; k < c->n_rows; ++k) {
        unsigned q;
        if (row_pos(&c->rows[k], &q) && q == pos)
            return &c->rows[k];
    }
    return NULL;
}

/* The reference's top-1 minus top-2 margin per position (bars, log scale), with a red marker
 * above every position where some configuration's argmax differs from the reference's. */
static void margins(FILE *f, const hx_report *r, const dims *d, size_t *n_marked)
{
    *n_marked = 0;
    hx_html_plot p = {d->pos_min - 0.5, d->pos_max + 0.5, INFINITY, 0.0, .logy = true};
    for (size_t i = 0; i < r->n_configs; ++i)
        for (size_t j = 0; j < r->configs[i].n_rows; ++j) {
            double m = r->configs[i].rows[j].lg.r_margin;
            if (r->configs[i].rows[j].is_logits && isfinite(m) && m > 0.0) {
                p.y0 = m < p.y0 ? m : p.y0;
                p.y1 = m > p.y1 ? m : p.y1;
            }
        }
    if (!(p.y1 > 0.0))
        p.y0 = 1e-3, p.y1 = 1.0;
    p.y0 /= 2.0;
    p.y1 *= 2.0;
    hx_html_frame(f, &p, "margins", "position", "reference top-2 margin (log)", true);
    double bw = (double)HX_HTML_PW / (d->pos_max - d->pos_min + 1) * 0.8;
    for (unsigned pos = d->pos_min; pos <= d->pos_max; ++pos) {
        const hx_tensor_row *first = NULL;
        size_t flips = 0;
        for (size_t i = 0; i < r->n_configs; ++i) {
            const hx_tensor_row *t = row_at(&r->configs[i], pos);
            first = first ? first : t;
            flips += t && !t->lg.top1_agree;
        }
        if (first == NULL)
            continue;
        double m = first->lg.r_margin, y = hx_html_py(&p, m > 0.0 ? m : p.y0);
        fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"#90a4ae\">"
                   "<title>position %u: margin %.3g</title></rect>\n", hx_html_px(&p, pos) - bw / 2, y,
                bw, HX_HTML_PT + HX_HTML_PH - y, pos, m);
        if (flips) {
            fprintf(f, "<circle class=\"flip\" cx=\"%.1f\" cy=\"%.1f\" r=\"5\" fill=\"#d32f2f\">"
                       "<title>position %u: argmax differs from the reference in %zu "
                       "configuration(s)</title></circle>\n", hx_html_px(&p, pos), y - 8, pos, flips);
            (*n_marked)++;
        }
    }
    hx_html_legend(f, 0, "#d32f2f", "argmax flip", false);
    fputs("</svg>\n", f);
}

/* Step of a configuration string ("...:step=N:..."); 0 for full or absent. */
static double config_step(const char *cfg)
{
    const char *s = strstr(cfg, "step=");
    return s && s[5] >= '0' && s[5] <= '9' ? strtod(s + 5, NULL) : 0.0;
}

/* A configuration string without its ":step=..." part: the series it belongs to. */
static void series_key(char out[HX_CONFIG_STR_MAX], const char *cfg)
{
    snprintf(out, HX_CONFIG_STR_MAX, "%s", cfg);
    char *st = strstr(out, ":step=");
    char *rest = st ? strchr(st + 1, ':') : NULL;
    if (st)
        memmove(st, rest ? rest : "", rest ? strlen(rest) + 1 : 1);
}

/* One labelled tick per step the configurations use, and "full" at the right. */
static void step_ticks(FILE *f, const hx_report *r, const hx_html_plot *p)
{
    bool full = false;
    for (size_t i = 0; i < r->n_configs; ++i) {
        double s = config_step(r->configs[i].config);
        bool seen = false;
        for (size_t j = 0; j < i && !seen; ++j)
            seen = config_step(r->configs[j].config) == s;
        if (seen)
            continue;
        if (s > 0.0) {
            char t[32];
            snprintf(t, sizeof t, "%.0f", s);
            hx_html_x_tick(f, p, log2(s), t);
        }
        full |= s == 0.0;
    }
    if (full)
        hx_html_x_tick(f, p, p->x1, "full");
}

/* Speed (prefill and decode tok/s) and memory vs step, one polyline per backend/threads
 * series (the configuration string without its step); full is drawn at twice the largest
 * step. log2 x. */
static void speed(FILE *f, const hx_report *r, bool memory)
{
    double smax = 1.0;
    hx_html_plot p = {0.0, 0.0, 0.0, 0.0, .logy = false};
    for (size_t i = 0; i < r->n_configs; ++i) {
        const hx_config_report *c = &r->configs[i];
        double s = config_step(c->config);
        smax = s > smax ? s : smax;
        double v[2] = {memory ? (double)c->peak_mem_bytes / 1048576.0 : c->prefill_tps,
                       memory ? 0.0 : c->decode_tps};
        for (int k = 0; k < 2; ++k)
            p.y1 = v[k] > p.y1 ? v[k] : p.y1;
    }
    if (!(p.y1 > 0.0)) {
        fprintf(f, "<p>No %s measured.</p>\n", memory ? "memory" : "speed");
        return;
    }
    p.x1 = log2(2.0 * smax);
    p.y1 *= 1.1;
    hx_html_frame(f, &p, memory ? "memory" : "speed", "prefill step (log scale; full = one chunk)",
          memory ? "peak MiB" : "tok/s", false);
    step_ticks(f, r, &p);
    size_t k = 0;
    for (size_t i = 0; i < r->n_configs && k < HX_HTML_N_PALETTE / 2; ++i) {
        char key[HX_CONFIG_STR_MAX], other[HX_CONFIG_STR_MAX];
        series_key(key, r->configs[i].config);
        bool seen = false;
        for (size_t j = 0; j < i && !seen; ++j) {
            series_key(other, r->configs[j].config);
            seen = strcmp(key, other) == 0;
        }
        if (seen)
            continue;
        for (int which = 0; which < (memory ? 1 : 2); ++which) {
            const char *col = hx_html_palette[(2 * k + (size_t)which) % HX_HTML_N_PALETTE];
            fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"1.5\" points=\"",
                    col);
            for (size_t j = i; j < r->n_configs; ++j) {
                const hx_config_report *c = &r->configs[j];
                series_key(other, c->config);
                double s = config_step(c->config), x = s > 0.0 ? log2(s) : p.x1;
                double v = memory ? (double)c->peak_mem_bytes / 1048576.0
                                  : which ? c->decode_tps : c->prefill_tps;
                if (strcmp(key, other) == 0 && v > 0.0)
                    fprintf(f, "%.1f,%.1f ", hx_html_px(&p, x), hx_html_py(&p, v));
            }
            fputs("\"/>\n", f);
            char name[HX_CONFIG_STR_MAX + 16];
            snprintf(name, sizeof name, "%s%s", key, memory ? "" : which ? " decode" : " prefill");
            hx_html_legend(f, 2 * k + (size_t)which, col, name, false);
        }
        k++;
    }
    fputs("</svg>\n", f);
}

static void summary_table(FILE *f, const hx_report *r)
{
    fputs("<table><tr><th>config</th><th>class</th><th>err/E</th><th>top1</th><th>div@</th>"
          "<th>golden</th><th>prefill tok/s (median)</th><th>decode tok/s (median)</th>"
          "<th>peak MiB</th></tr>\n",
          f);
    char cells[HX_REPORT_NCOLS][HX_REPORT_CELL];
    for (size_t i = 0; i < r->n_configs; ++i) {
        const hx_config_report *c = &r->configs[i];
        hx_report_cells(cells, c);
        fputs("<tr><td>", f);
        hx_html_esc(f, c->config);
        fprintf(f, "</td><td class=\"c-%s\">%s</td>", hx_class_name(c->cls),
                hx_class_name(c->cls));
        const int cols[] = {11, 8, 2};
        for (size_t k = 0; k < 3; ++k) {
            fputs("<td>", f);
            hx_html_esc(f, cells[cols[k]]);
            fputs("</td>", f);
        }
        fprintf(f, "<td>%s</td><td>%s</td><td>%s</td><td>%.3g</td></tr>\n",
                hx_golden_status_name(c->golden), cells[13], cells[14],
                (double)c->peak_mem_bytes / 1048576.0); /* as the memory plot */
    }
    fputs("</table>\n", f);
}

/* Each configuration's first K/V row and first hidden state outside the envelope, where its
 * dump held them (hx_kv_first_text, hx_hidden_first_text); nothing when none did. */
static void first_outside_list(FILE *f, const hx_report *r)
{
    bool head = false;
    for (size_t i = 0; i < r->n_configs; ++i) {
        const hx_config_report *c = &r->configs[i];
        char text[2][320];
        hx_kv_first_text(text[0], sizeof text[0], &c->kv_first);
        hx_hidden_first_text(text[1], sizeof text[1], &c->hidden_first);
        for (size_t k = 0; k < 2; ++k) {
            if (text[k][0] == '\0')
                continue;
            if (!head)
                fputs("<h3>Where each configuration first leaves the envelope</h3>\n<ul>\n", f);
            head = true;
            fputs("<li><code>", f);
            hx_html_esc(f, c->config);
            fputs("</code>: ", f);
            hx_html_esc(f, text[k]);
            fputs("</li>\n", f);
        }
    }
    if (head)
        fputs("</ul>\n", f);
}

static void case_section(FILE *f, const hx_report *r)
{
    fputs("<section><h2>", f);
    hx_html_esc(f, r->case_name);
    fputs("</h2>\n<p class=\"meta\">model ", f);
    hx_html_esc(f, r->model);
    fprintf(f, " (XXH3 %.12s…); %u prompt tokens, %u generated; reference %u bits; envelope "
               "%u members x %g; platform ", r->model_hash, (unsigned)r->n_prompt,
            (unsigned)r->n_gen, (unsigned)r->precision, (unsigned)r->envelope_members,
            r->envelope_safety);
    hx_html_esc(f, r->fingerprint);
    fprintf(f, "; worst class <b class=\"c-%s\">%s</b></p>\n", hx_class_name(hx_report_worst(r)),
            hx_class_name(hx_report_worst(r)));
    if (r->skipped[0]) {
        fputs("<p>Skipped: ", f);
        hx_html_esc(f, r->skipped);
        fputs("</p></section>\n", f);
        return;
    }
    char split[1024];
    hx_split_line(split, sizeof split, r);
    if (split[0]) {
        fputs("<p class=\"meta\">", f);
        hx_html_esc(f, split);
        fprintf(f, " (%.0f%% intervals from the member count)</p>\n", 100.0 * HX_SPLIT_LEVEL);
    }
    summary_table(f, r);
    first_outside_list(f, r);
    dims d = report_dims(r);
    if (d.n_layer) {
        fputs("<h3>err/E per layer: K and V after prefill</h3>\n", f);
        heatmap_kv(f, r, &d);
    }
    if (d.has_logits) {
        fputs("<h3>err/E of the logits per position</h3>\n", f);
        heatmap_logits(f, r, &d);
        fputs("<h3>Error vs envelope along positions</h3>\n", f);
        error_vs_envelope(f, r, &d);
        size_t n_marked = 0;
        fputs("<h3>Reference top-2 margin, argmax flips marked</h3>\n", f);
        margins(f, r, &d, &n_marked);
        fprintf(f, "<p class=\"meta\">%zu position(s) with a flip.</p>\n", n_marked);
    }
    fputs("<h3>Speed vs prefill step</h3>\n", f);
    speed(f, r, false);
    fputs("<h3>Memory vs prefill step</h3>\n", f);
    speed(f, r, true);
    fputs("</section>\n", f);
}

int hx_report_html_text(char **out, size_t *len, const hx_report *const *rs, size_t n,
                        bool strict, lm_err *err)
{
    (void)strict;
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (f == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "cannot build the HTML report: out of memory");
    hx_html_page_open(f, "kvdrift report");
    fputs("<p class=\"meta legend\">err/E colours:"
          "<span style=\"background:#e8f5e9\"></span>0"
          "<span style=\"background:#4caf50\"></span>0.01"
          "<span style=\"background:#fdd835\"></span>1 (the envelope)"
          "<span style=\"background:#f57c00\"></span>&gt;1"
          "<span style=\"background:#c62828\"></span>100"
          "<span style=\"background:#7b1fa2\"></span>NaN</p>\n",
          f);
    for (size_t i = 0; i < n; ++i)
        case_section(f, rs[i]);
    hx_html_page_close(f);
    if (fclose(f) != 0 || buf == NULL) {
        free(buf);
        return LM_FAIL(err, LM_E_NOMEM, "cannot build the HTML report: out of memory");
    }
    *out = buf;
    return LM_OK;
}

int hx_report_write_html_many(const hx_report *const *rs, size_t n, const char *path,
                              lm_err *err)
{
    return hx_report_write_text(path, hx_report_html_text, rs, n, false, err);
}

int hx_report_write_html(const hx_report *r, const char *path, lm_err *err)
{
    return hx_report_write_html_many(&r, 1, path, err);
}
