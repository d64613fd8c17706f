/* html_page.c — the shared parts of kvdrift's HTML pages (report/html_page.h): head and style
 * sheet, escaping, and the inline-SVG plot frame with its ticks and legend. */
#include "report/html_page.h"

#include <math.h>

const char *const hx_html_palette[HX_HTML_N_PALETTE] = {
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd",
    "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"};

static const char css[] =
    "body{font-family:sans-serif;margin:1.5em;color:#222}"
    "table{border-collapse:collapse;font-size:13px}td,th{border:1px solid #ccc;padding:2px 6px;"
    "text-align:right}td:first-child{text-align:left;font-family:monospace}"
    ".lbl{font-size:11px;font-family:monospace;fill:#333}.frame{fill:none;stroke:#999}"
    ".meta{color:#555;font-size:13px}.legend span{display:inline-block;width:14px;height:10px;"
    "margin:0 4px 0 12px}"
    ".c-EXACT{color:#2e7d32}.c-NOISE{color:#558b2f}.c-TIE_FLIP{color:#f9a825}"
    ".c-DRIFT,.c-FLIP,.c-NONFINITE{color:#c62828;font-weight:bold}";

void hx_html_esc(FILE *f, const char *s)
{
    for (; *s; ++s) {
        switch (*s) {
        case '&': fputs("&amp;", f); break;
        case '<': fputs("&lt;", f); break;
        case '>': fputs("&gt;", f); break;
        case '"': fputs("&quot;", f); break;
        default:
            if ((unsigned char)*s >= 0x20 || *s == '\n' || *s == '\t')
                fputc(*s, f);
        }
    }
}

void hx_html_page_open(FILE *f, const char *title)
{
    fputs("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"/><title>", f);
    hx_html_esc(f, title);
    fprintf(f, "</title><style>%s</style></head><body>\n<h1>", css);
    hx_html_esc(f, title);
    fputs("</h1>\n", f);
}

void hx_html_page_close(FILE *f)
{
    fputs("</body></html>\n", f);
}

/* Where v lies between a and b as a fraction in [0, 1] (log10 when lg; 0.5 for an empty
 * range). */
static double frac(double v, double a, double b, bool lg)
{
    if (lg) {
        v = log10(v);
        a = log10(a);
        b = log10(b);
    }
    double t = b > a ? (v - a) / (b - a) : 0.5;
    return t < 0.0 ? 0.0 : t > 1.0 ? 1.0 : t;
}

double hx_html_px(const hx_html_plot *p, double x)
{
    return HX_HTML_PL + frac(x, p->x0, p->x1, p->logx) * HX_HTML_PW;
}

double hx_html_py(const hx_html_plot *p, double y)
{
    return HX_HTML_PT + (1.0 - frac(y, p->y0, p->y1, p->logy)) * HX_HTML_PH;
}

void hx_html_frame(FILE *f, const hx_html_plot *p, const char *cls, const char *xlabel,
                   const char *ylabel, bool x_ends)
{
    enum { PL = HX_HTML_PL, PT = HX_HTML_PT, PW = HX_HTML_PW, PH = HX_HTML_PH };
    fprintf(f, "<svg xmlns=\"http://www.w3.org/2000/svg\" class=\"%s\" width=\"%d\" "
               "height=\"%d\">\n<rect x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
               "class=\"frame\"/>\n", cls, PL + PW + 200, PT + PH + 40, PL, PT, PW, PH);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"middle\">%s</text>\n",
            PL + PW / 2, PT + PH + 34, xlabel);
    fprintf(f, "<text x=\"12\" y=\"%d\" class=\"lbl\" transform=\"rotate(-90 12 %d)\" "
               "text-anchor=\"middle\">%s</text>\n", PT + PH / 2, PT + PH / 2, ylabel);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">%.3g</text>\n",
            PL - 4, PT + 10, p->y1);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">%.3g</text>\n",
            PL - 4, PT + PH, p->y0);
    if (!x_ends) /* the caller marks its own x ticks */
        return;
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lbl\">%.6g</text>\n", PL, PT + PH + 16, p->x0);
    fprintf(f, "<text x=\"%d\" y=\"%d\" class=\"lbl\" text-anchor=\"end\">%.6g</text>\n",
            PL + PW, PT + PH + 16, p->x1);
}

void hx_html_x_tick(FILE *f, const hx_html_plot *p, double x, const char *text)
{
    const double X = hx_html_px(p, x);
    const int y = HX_HTML_PT + HX_HTML_PH;
    fprintf(f, "<line x1=\"%.1f\" y1=\"%d\" x2=\"%.1f\" y2=\"%d\" stroke=\"#555\"/>"
               "<text x=\"%.1f\" y=\"%d\" class=\"lbl\" text-anchor=\"middle\">%s</text>\n",
            X, y, X, y + 4, X, y + 16, text);
}

void hx_html_y_tick(FILE *f, const hx_html_plot *p, double y, const char *text)
{
    const double Y = hx_html_py(p, y);
    const int x = HX_HTML_PL;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"#555\"/>"
               "<text x=\"%d\" y=\"%.1f\" class=\"lbl\" text-anchor=\"end\">%s</text>\n",
            x - 4, Y, x, Y, x - 4, Y + 4, text);
}

void hx_html_legend(FILE *f, size_t k, const char *colour, const char *name, bool dashed)
{
    enum { PL = HX_HTML_PL, PT = HX_HTML_PT, PW = HX_HTML_PW };
    const double y = PT + 12 + (double)k * 14;
    fprintf(f, "<line x1=\"%d\" y1=\"%.1f\" x2=\"%d\" y2=\"%.1f\" stroke=\"%s\" "
               "stroke-width=\"2\"%s/><text x=\"%d\" y=\"%.1f\" class=\"lbl\">", PL + PW + 8,
            y - 4, PL + PW + 26, y - 4, colour, dashed ? " stroke-dasharray=\"4 3\"" : "",
            PL + PW + 30, y);
    hx_html_esc(f, name);
    fputs("</text>\n", f);
}
