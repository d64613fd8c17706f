/* html_page.h — the pieces every HTML page kvdrift writes shares (report.html, calibrate.html):
 * the page's head with its inline style sheet and its end, text escaping, and the plot frame of
 * the inline SVG charts (a PW x PH area at (PL, PT), linear or log10 axes, ticks, a legend at
 * the right). No page loads a script or fetches anything; the markup is well-formed XML. */
#ifndef HX_HTML_PAGE_H
#define HX_HTML_PAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

/* The plot area inside each chart's svg element, in pixels. */
enum { HX_HTML_PL = 70, HX_HTML_PT = 20, HX_HTML_PW = 640, HX_HTML_PH = 220 };

/* A plot frame: x in [x0, x1] over HX_HTML_PW pixels, y in [y0, y1] over HX_HTML_PH; log10
 * scales when logx / logy (then the ends must be > 0). */
typedef struct hx_html_plot {
    double x0, x1, y0, y1;
    bool logx, logy;
} hx_html_plot;

/* The palette of the charts' series. */
#define HX_HTML_N_PALETTE 10
extern const char *const hx_html_palette[HX_HTML_N_PALETTE];

/* Writes s with &, <, > and " escaped and control characters other than newline and tab
 * dropped. */
void hx_html_esc(FILE *f, const char *s);

/* "<!DOCTYPE html>" through "<h1>title</h1>": the head, its style sheet and the heading. */
void hx_html_page_open(FILE *f, const char *title);
/* The page's end. */
void hx_html_page_close(FILE *f);

/* The pixel coordinates of x and y in p; a value outside the range (a log axis's 0 included)
 * is drawn at the nearer edge. */
double hx_html_px(const hx_html_plot *p, double x);
double hx_html_py(const hx_html_plot *p, double y);

/* Opens an svg element of class cls with the frame, the axis labels, the y range's ends and
 * (x_ends) the x range's ends; the caller closes it ("</svg>"). */
void hx_html_frame(FILE *f, const hx_html_plot *p, const char *cls, const char *xlabel,
                   const char *ylabel, bool x_ends);

/* A tick on the x axis at x (or the y axis at y), labelled text. */
void hx_html_x_tick(FILE *f, const hx_html_plot *p, double x, const char *text);
void hx_html_y_tick(FILE *f, const hx_html_plot *p, double y, const char *text);

/* Legend entry k at the plot's right: a line of colour (dashed or solid) and name. */
void hx_html_legend(FILE *f, size_t k, const char *colour, const char *name, bool dashed);

#endif
