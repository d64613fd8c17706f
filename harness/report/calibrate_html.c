/* calibrate_html.c — calibrate.html from calibrate-bins.tsv (report/calibrate_html.h): the
 * reliability diagrams of the split-risk forecast and their tables. */
#include "report/calibrate_html.h"
#include "report/html_page.h"

#include "fs.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TABLE_MAX 128
#define FLOOR 1e-5 /* the diagrams' lower end, both axes: smaller values (0 too) sit on it */

typedef struct calib_row {
    char table[TABLE_MAX];
    double lo, hi, n, pred, obs, obs_lo, obs_hi;
} calib_row;

/* One field of a tab-separated line at *s as a number; advances *s past it and its tab. */
static bool field_num(double *v, char **s)
{
    char *end;
    *v = strtod(*s, &end);
    if (end == *s || (*end != '\t' && *end != '\0'))
        return false;
    *s = *end ? end + 1 : end;
    return true;
}

static bool prob(double v)
{
    return v >= 0.0 && v <= 1.0;
}

/* Parses line (NUL-terminated, no newline) into r; the reason into why on failure. */
static bool parse_row(calib_row *r, char *line, const char **why)
{
    char *tab = strchr(line, '\t');
    if (tab == NULL || tab == line || (size_t)(tab - line) >= TABLE_MAX) {
        *why = "no table name of 1 to 127 bytes before the first tab";
        return false;
    }
    memcpy(r->table, line, (size_t)(tab - line));
    r->table[tab - line] = '\0';
    char *s = tab + 1;
    double *v[7] = {&r->lo, &r->hi, &r->n, &r->pred, &r->obs, &r->obs_lo, &r->obs_hi};
    for (int i = 0; i < 7; ++i)
        if (*s == '\0' || !field_num(v[i], &s)) {
            *why = "not 8 tab-separated fields with numbers in fields 2 to 8";
            return false;
        }
    if (*s != '\0') {
        *why = "more than 8 fields";
        return false;
    }
    if (!(r->n >= 0.0 && r->n == floor(r->n) && isfinite(r->n)))
        *why = "n is not a count";
    else if (!(r->lo <= r->hi))
        *why = "bin_lo > bin_hi";
    else if (r->n > 0.0 && !(prob(r->pred) && prob(r->obs) && prob(r->obs_lo) &&
                             prob(r->obs_hi) && r->obs_lo <= r->obs_hi))
        *why = "mean_pred, observed and its interval are not probabilities with "
               "obs_lo90 <= obs_hi90";
    else
        return true;
    return false;
}

/* Every row of text (the file's contents, changed in place) into *rows [*n]. */
static int parse(calib_row **rows, size_t *n, char *text, const char *path, lm_err *err)
{
    *rows = NULL;
    *n = 0;
    size_t cap = 0, line_no = 0;
    for (char *line = text, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = '\0';
        line_no++;
        if (line_no == 1) {
            if (strcmp(line, HX_CALIB_BINS_HEADER) != 0)
                return LM_FAIL(err, LM_E_INPUT, "%s:1: not a calibration bins table (the "
                               "header is not the columns table, bin_lo, ..., obs_hi90)", path);
            continue;
        }
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            calib_row *g = realloc(*rows, cap * sizeof **rows);
            if (g == NULL) {
                free(*rows);
                *rows = NULL;
                return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
            }
            *rows = g;
        }
        const char *why = NULL;
        if (!parse_row(&(*rows)[*n], line, &why)) {
            free(*rows);
            *rows = NULL;
            *n = 0;
            return LM_FAIL(err, LM_E_INPUT, "%s:%zu: %s", path, line_no, why);
        }
        (*n)++;
    }
    if (line_no == 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: empty (no header line)", path);
    return LM_OK;
}

static bool is_profile(const calib_row *r)
{
    return strncmp(r->table, HX_CALIB_PROFILE_PREFIX, strlen(HX_CALIB_PROFILE_PREFIX)) == 0;
}

/* A probability as the tables print it: "-" for an empty bin's. */
static void cell(FILE *f, double v, bool empty)
{
    if (empty)
        fputs("<td>-</td>", f);
    else
        fprintf(f, "<td>%.4g</td>", v);
}

/* The reliability diagram of rows [0, n) (one table) and the table of them. */
static void diagram(FILE *f, const calib_row *rows, size_t n)
{
    fputs("<h2>", f);
    hx_html_esc(f, rows[0].table);
    fputs("</h2>\n", f);
    const hx_html_plot p = {FLOOR, 1.0, FLOOR, 1.0, .logx = true, .logy = true};
    hx_html_frame(f, &p, "reliability", "predicted (mean risk in the bin, log)",
                  "observed fraction (log)", false);
    char t[16];
    for (double d = FLOOR; d <= 1.0; d *= 10.0) {
        snprintf(t, sizeof t, "%g", d);
        hx_html_x_tick(f, &p, d, t);
        if (d > FLOOR * 5.0 && d < 0.5) /* the frame labels the y range's ends */
            hx_html_y_tick(f, &p, d, t);
    }
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#555555\" "
               "stroke-dasharray=\"4 3\"/>\n", hx_html_px(&p, FLOOR), hx_html_py(&p, FLOOR),
            hx_html_px(&p, 1.0), hx_html_py(&p, 1.0));
    hx_html_legend(f, 0, "#555555", "predicted = observed", true);
    hx_html_legend(f, 1, hx_html_palette[0], "observed, 90% interval", false);
    for (size_t i = 0; i < n; ++i) {
        const calib_row *r = &rows[i];
        if (r->n == 0.0)
            continue;
        const double x = hx_html_px(&p, r->pred);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\"/>\n", x,
                hx_html_py(&p, r->obs_lo), x, hx_html_py(&p, r->obs_hi), hx_html_palette[0]);
        fprintf(f, "<circle class=\"bin\" cx=\"%.1f\" cy=\"%.1f\" r=\"4\" fill=\"%s\"><title>"
                   "bin [%g, %g): n %.0f, mean predicted %.4g, observed %.4g, 90%% interval "
                   "[%.4g, %.4g]</title></circle>\n", x, hx_html_py(&p, r->obs),
                hx_html_palette[0], r->lo, r->hi, r->n, r->pred, r->obs, r->obs_lo,
                r->obs_hi);
    }
    fputs("</svg>\n", f);
    fputs("<table><tr><th>bin</th><th>n</th><th>mean predicted</th><th>observed</th>"
          "<th>observed 90% low</th><th>observed 90% high</th></tr>\n", f);
    for (size_t i = 0; i < n; ++i) {
        const calib_row *r = &rows[i];
        const bool empty = r->n == 0.0;
        fprintf(f, "<tr><td>[%g, %g)</td><td>%.0f</td>", r->lo, r->hi, r->n);
        cell(f, r->pred, empty);
        cell(f, r->obs, empty);
        cell(f, r->obs_lo, empty);
        cell(f, r->obs_hi, empty);
        fputs("</tr>\n", f);
    }
    fputs("</table>\n", f);
}

/* The per-profile totals: sequences, expected splits (n x mean risk), observed splits. */
static void profiles(FILE *f, const calib_row *rows, size_t n)
{
    size_t k = 0;
    for (size_t i = 0; i < n; ++i) {
        const calib_row *r = &rows[i];
        if (!is_profile(r))
            continue;
        if (k++ == 0)
            fputs("<h2>Per profile</h2>\n<table><tr><th>profile</th><th>sequences</th>"
                  "<th>expected splits</th><th>observed splits</th><th>observed fraction</th>"
                  "<th>90% interval</th></tr>\n", f);
        fputs("<tr><td>", f);
        hx_html_esc(f, r->table + strlen(HX_CALIB_PROFILE_PREFIX));
        fprintf(f, "</td><td>%.0f</td><td>%.2f</td><td>%.0f</td><td>%.3g</td>"
                   "<td>[%.3g, %.3g]</td></tr>\n", r->n, r->n * r->pred, r->n * r->obs,
                r->obs, r->obs_lo, r->obs_hi);
    }
    if (k)
        fputs("</table>\n", f);
}

static int page(char **out, size_t *len, const calib_row *rows, size_t n, const char *src,
                lm_err *err)
{
    char *buf = NULL;
    FILE *f = open_memstream(&buf, len);
    if (f == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "cannot build the calibration page: out of memory");
    hx_html_page_open(f, "kvdrift split-risk calibration");
    fputs("<p class=\"meta\">From ", f);
    hx_html_esc(f, src);
    fprintf(f, ". Each point is one bin of forecasts: its mean predicted probability against "
               "the fraction observed, with a 90%% Wilson interval; on the dashed diagonal the "
               "forecast is calibrated. Both axes are log10 from %g; a value below it, 0 "
               "included, is drawn on the edge (the tables and the points' titles hold the "
               "values). docs/DESIGN.md, \"Split risk\", states the model.</p>\n", FLOOR);
    size_t shown = 0;
    for (size_t i = 0, j; i < n; i = j) {
        for (j = i + 1; j < n && strcmp(rows[j].table, rows[i].table) == 0; ++j)
            ;
        if (!is_profile(&rows[i])) {
            diagram(f, rows + i, j - i);
            shown++;
        }
    }
    if (shown == 0)
        fputs("<p>No bins: the table holds no forecasts.</p>\n", f);
    profiles(f, rows, n);
    hx_html_page_close(f);
    if (fclose(f) != 0 || buf == NULL) {
        free(buf);
        return LM_FAIL(err, LM_E_NOMEM, "cannot build the calibration page: out of memory");
    }
    *out = buf;
    return LM_OK;
}

int hx_calibrate_html_write(const char *bins_tsv, const char *html_path, lm_err *err)
{
    char *text = NULL, *html = NULL;
    size_t n_text = 0, n_html = 0, n = 0;
    calib_row *rows = NULL;
    int rc = lm_read_file(&text, &n_text, bins_tsv, SIZE_MAX, err);
    if (rc == LM_OK)
        rc = parse(&rows, &n, text, bins_tsv, err);
    if (rc == LM_OK)
        rc = page(&html, &n_html, rows, n, bins_tsv, err);
    if (rc == LM_OK)
        rc = lm_write_file(html_path, html, n_html, err);
    free(text);
    free(rows);
    free(html);
    return rc;
}
