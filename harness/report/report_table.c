/* report_table.c — tables on the terminal and as data: aligned text (class coloured on a
 * terminal unless NO_COLOR is set), CSV, TSV, JSON lines, Markdown; the report's narrow and
 * full tables. */
#include "model/report.h"
#include "model/routing.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

bool hx_table_fmt_parse(hx_table_fmt *out, const char *s)
{
    static const char *const names[] = {"table", "csv", "tsv", "jsonl", "md"};
    for (int i = 0; i < 5; ++i)
        if (strcmp(s, names[i]) == 0) {
            *out = (hx_table_fmt)i;
            return true;
        }
    return false;
}

/* https://no-color.org: any non-empty NO_COLOR turns colour off. */
static bool use_colour(FILE *f)
{
    const char *nc = getenv("NO_COLOR");
    return isatty(fileno(f)) && !(nc && *nc);
}

static const char *class_colour(const char *cls)
{
    if (strcmp(cls, "EXACT") == 0 || strcmp(cls, "NOISE") == 0)
        return "\033[32m";
    if (strcmp(cls, "TIE_FLIP") == 0 || strcmp(cls, "SEMANTIC") == 0)
        return "\033[33m";
    if (strcmp(cls, "DRIFT") == 0 || strcmp(cls, "FLIP") == 0 || strcmp(cls, "NONFINITE") == 0 ||
        strcmp(cls, "SEQ_MISMATCH") == 0 || strcmp(cls, "ERROR") == 0)
        return "\033[1;31m";
    return NULL;
}

static void csv_cell(FILE *f, const char *s, char sep)
{
    if (sep == '\t') { /* TSV: tabs and newlines cannot be quoted; they become spaces */
        for (; *s; ++s)
            fputc(*s == '\t' || *s == '\n' || *s == '\r' ? ' ' : *s, f);
        return;
    }
    if (strpbrk(s, ",\"\n\r") == NULL) {
        fputs(s, f);
        return;
    }
    fputc('"', f);
    for (; *s; ++s) {
        if (*s == '"')
            fputc('"', f);
        fputc(*s, f);
    }
    fputc('"', f);
}

static void json_str(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; ++s) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

static void md_cell(FILE *f, const char *s)
{
    for (; *s; ++s)
        if (*s == '|')
            fputs("\\|", f);
        else
            fputc(*s == '\n' ? ' ' : *s, f);
}

static void print_text(FILE *f, const char *const *heads, int n_cols, size_t n_rows,
                       hx_cell_fn cell, void *ctx, int first_num, int class_col)
{
    size_t *w = calloc((size_t)n_cols, sizeof *w);
    if (w == NULL)
        return;
    for (int j = 0; j < n_cols; ++j)
        w[j] = strlen(heads[j]);
    for (size_t i = 0; i < n_rows; ++i)
        for (int j = 0; j < n_cols; ++j) {
            size_t l = strlen(cell(ctx, i, j));
            w[j] = l > w[j] ? l : w[j];
        }
    bool colour = class_col >= 0 && use_colour(f);
    for (size_t i = 0; i <= n_rows; ++i)
        for (int j = 0; j < n_cols; ++j) {
            const char *s = i == 0 ? heads[j] : cell(ctx, i - 1, j);
            const char *col = colour && i > 0 && j == class_col ? class_colour(s) : NULL;
            const char *sep = j + 1 < n_cols ? "  " : "\n";
            if (j + 1 == n_cols && j < first_num) /* no trailing blanks */
                fprintf(f, "%s%s%s%s", col ? col : "", s, col ? "\033[0m" : "", sep);
            else
                fprintf(f, j < first_num ? "%s%-*s%s%s" : "%s%*s%s%s", col ? col : "",
                        (int)w[j], s, col ? "\033[0m" : "", sep);
        }
    free(w);
}

void hx_table_print(FILE *f, hx_table_fmt fmt, const char *const *heads, int n_cols,
                    size_t n_rows, hx_cell_fn cell, void *ctx, int first_num, int class_col)
{
    if (fmt == HX_FMT_TABLE) {
        print_text(f, heads, n_cols, n_rows, cell, ctx, first_num, class_col);
        return;
    }
    if (fmt == HX_FMT_CSV || fmt == HX_FMT_TSV || fmt == HX_FMT_MD) {
        char sep = fmt == HX_FMT_CSV ? ',' : '\t';
        for (size_t i = 0; i <= n_rows; ++i) {
            for (int j = 0; j < n_cols; ++j) {
                const char *s = i == 0 ? heads[j] : cell(ctx, i - 1, j);
                if (fmt == HX_FMT_MD) {
                    fputs(j == 0 ? "| " : " ", f);
                    md_cell(f, s);
                    fputs(" |", f);
                } else {
                    if (j)
                        fputc(sep, f);
                    csv_cell(f, s, sep);
                }
            }
            fputc('\n', f);
            if (fmt == HX_FMT_MD && i == 0) {
                fputc('|', f);
                for (int j = 0; j < n_cols; ++j)
                    fputs(j < first_num ? "---|" : "---:|", f);
                fputc('\n', f);
            }
        }
        return;
    }
    for (size_t i = 0; i < n_rows; ++i) { /* JSONL */
        fputc('{', f);
        for (int j = 0; j < n_cols; ++j) {
            if (j)
                fputs(", ", f);
            json_str(f, heads[j]);
            fputs(": ", f);
            json_str(f, cell(ctx, i, j));
        }
        fputs("}\n", f);
    }
}

/* The report's cells, filled per row on demand. */
typedef struct report_cells {
    const hx_report *r;
    const int *cols; /* report column indices shown */
    size_t cached;   /* row whose cells are in c; SIZE_MAX none */
    char c[HX_REPORT_NCOLS][HX_REPORT_CELL];
} report_cells;

static const char *report_cell(void *ctx, size_t row, int col)
{
    report_cells *rc = ctx;
    if (rc->cached != row) {
        hx_report_cells(rc->c, &rc->r->configs[row]);
        rc->cached = row;
    }
    return rc->c[rc->cols[col]];
}

/* Narrow: config, class, err/E, ULP@max, top1, div@, decode tok/s (fits 100 columns). */
static const int narrow_cols[] = {0, 1, 11, 4, 8, 2, 14};
#define N_NARROW 7

void hx_report_print_table_fmt(FILE *f, const hx_report *r, hx_table_fmt fmt, bool verbose)
{
    int full_cols[HX_REPORT_NCOLS];
    const char *heads[HX_REPORT_NCOLS];
    for (int j = 0; j < HX_REPORT_NCOLS; ++j)
        full_cols[j] = j;
    const int *cols = verbose ? full_cols : narrow_cols;
    int n_cols = verbose ? HX_REPORT_NCOLS : N_NARROW;
    for (int j = 0; j < n_cols; ++j)
        heads[j] = hx_report_col_names[cols[j]];
    report_cells ctx = {.r = r, .cols = cols, .cached = SIZE_MAX};
    bool text = fmt == HX_FMT_TABLE;
    if (text) {
        fprintf(f, "case %s  model %s  prompt %u tokens, %u generated, reference %u bits\n",
                r->case_name, r->model, (unsigned)r->n_prompt, (unsigned)r->n_gen,
                (unsigned)r->precision);
        if (r->fingerprint[0])
            fprintf(f, "platform %s\n", r->fingerprint);
        if (r->prompt_rows > 0)
            fprintf(f, "logits classified at %u of %u prompt positions%s%s%s; smallest "
                       "reference top-2 margin %.3g (position %u)\n", (unsigned)r->prompt_rows,
                    (unsigned)r->n_prompt, r->prompt_rows_why[0] ? " (" : "", r->prompt_rows_why,
                    r->prompt_rows_why[0] ? ")" : "", r->min_margin, (unsigned)r->min_margin_pos);
        char split[1024];
        hx_split_line(split, sizeof split, r);
        if (split[0])
            fprintf(f, "%s\n", split);
        if (r->covered[0])
            fprintf(f, "covered: %s\n", r->covered);
        for (uint32_t i = 0; i < r->n_unexercised; ++i)
            fprintf(f, "not exercised: %s\n", r->unexercised[i]);
    }
    hx_table_print(f, fmt, heads, n_cols, r->n_configs, report_cell, &ctx, 2, 1);
    if (!text)
        return;
    int fails = 0;
    for (size_t i = 0; i < r->n_configs; ++i)
        fails += hx_config_report_fails(&r->configs[i], r->strict_bits);
    fprintf(f, "%zu configurations, worst %s, %d failing%s%s\n", r->n_configs,
            hx_class_name(hx_report_worst(r)), fails,
            r->strict_bits ? " (strict: any changed bit fails)" : "",
            verbose ? "" : "; -v for all columns");
}

void hx_report_print_table(FILE *f, const hx_report *r)
{
    hx_report_print_table_fmt(f, r, HX_FMT_TABLE, false);
}

void hx_report_print_routing(FILE *f, const hx_report *r, const hx_routing_result *rr)
{
    if (!rr->measured)
        return;
    fprintf(f, "\nMoE routing flips vs the reference's routing of the prompt (%u layers, "
               "top-%u of %u; TIE = reference margin <= %.3g, measured: %.0f x the largest "
               "margin deviation of %u %s runs)\n",
            rr->n_layer, rr->k, rr->n_expert, (double)rr->tie_tol, HX_ROUTING_SAFETY,
            rr->members, rr->members_sr ? "reference float32 SR" : "naive-sr");
    for (size_t ci = 0; ci < rr->n_configs && ci < r->n_configs; ++ci) {
        const uint32_t flips = rr->n_flip[ci], ties = rr->n_tie[ci];
        const hx_routing_flips *fl = rr->flips + ci * rr->n_layer;
        fprintf(f, "  %-38s %4u flips (%u TIE, %u real)", r->configs[ci].config, flips, ties,
                flips - ties);
        if (rr->cfg_tol != NULL && rr->cfg_tol[ci] != rr->tie_tol)
            fprintf(f, "  TIE <= %.3g (%u naive-sr runs under its profile)",
                    (double)rr->cfg_tol[ci], rr->members);
        for (uint32_t il = 0; il < rr->n_layer && flips > 0; ++il)
            if (fl[il].n_flip > 0)
                fprintf(f, "  L%u: %u from pos %u", il, fl[il].n_flip, fl[il].first_pos);
        fputc('\n', f);
    }
}
