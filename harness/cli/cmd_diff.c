/* cmd_diff.c — `kvdrift diff OLD NEW`: two report.json files compared per configuration
 * (judge/report_diff.h), printed as a Markdown table for a pull request comment or as a
 * terminal table; exit 1 on a regression. */
#include "cli/commands.h"

#include "cli/cli_util.h"
#include "fs.h"
#include "model/report.h"
#include "judge/report_diff.h"

#include <getopt.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift diff OLD/report.json NEW/report.json [--format F] [-o FILE]\n"
    "                    [--slower PCT]\n"
    "Compares two reports (sweep's report.json, or check --json with several cases) per\n"
    "configuration, matched by case and configuration string: class change, worst err/E\n"
    "change, new argmax flips, decode speed change. A regression: the configuration now fails,\n"
    "or its class got worse into TIE_FLIP or beyond, or it has new flips (fewer positions\n"
    "agreeing with the reference's top-1, or greedy tokens parting earlier), or it is gone;\n"
    "with --slower PCT also a decode slowdown of more than PCT percent.\n\n"
    "      --format F    md (default: a Markdown table for a pull request comment), table,\n"
    "                    csv, tsv or jsonl\n"
    "  -o, --out FILE    write the output to FILE instead of stdout\n"
    "      --slower PCT  a decode slowdown beyond PCT percent is a regression (default: off)\n"
    "  -h, --help        this text\n\n"
    "exit codes: 0 no regression, 1 a regression, 2 usage or input error\n";

static void fmt_ratio(char *b, size_t n, const hx_diff_side *s)
{
    if (!s->present)
        snprintf(b, n, "-");
    else
        snprintf(b, n, "%.3g", s->ratio);
}

/* "a -> b", or "a" when both sides print the same. */
static void pair(char *out, size_t n, const char *a, const char *b, bool md)
{
    if (strcmp(a, b) == 0)
        snprintf(out, n, "%s", a);
    else
        snprintf(out, n, "%s %s %s", a, md ? "→" : "->", b);
}

static void cells(char c[7][256], const hx_diff_row *r, bool md)
{
    const hx_diff_side *o = &r->old, *w = &r->new_;
    char a[96], b[96];
    snprintf(c[0], 256, "%s", r->case_name);
    snprintf(c[1], 256, "%s", r->config);
    pair(c[2], 256, o->present ? o->cls : "-", w->present ? w->cls : "-", md);
    fmt_ratio(a, sizeof a, o);
    fmt_ratio(b, sizeof b, w);
    pair(c[3], 256, a, b, md);
    snprintf(a, sizeof a, "%lld/%lld", (long long)o->top1, (long long)o->n_pos);
    snprintf(b, sizeof b, "%lld/%lld", (long long)w->top1, (long long)w->n_pos);
    pair(c[4], 256, o->present ? a : "-", w->present ? b : "-", md);
    if (o->decode_tps > 0.0 && w->decode_tps > 0.0)
        snprintf(c[5], 256, "%.0f %s %.0f (%+.1f%%)", o->decode_tps, md ? "→" : "->",
                 w->decode_tps, 100.0 * (w->decode_tps / o->decode_tps - 1.0));
    else
        snprintf(c[5], 256, "-");
    snprintf(c[6], 256, "%s%s%s", r->regression ? "REGRESSION" : "ok",
             r->regression ? ": " : "", r->why);
}

static const char *const heads[7] = {"case", "config", "class", "worst err/E", "top1",
                                     "decode tok/s", "verdict"};

static void print_md(FILE *f, const hx_diff_row *rows, size_t n, const char *a, const char *b,
                     size_t n_reg)
{
    fprintf(f, "### kvdrift diff: `%s` → `%s`\n\n%zu configuration(s), **%zu regression(s)**\n\n",
            a, b, n, n_reg);
    fputs("| case | config | class | worst err/E | top1 | decode tok/s | verdict |\n"
          "|---|---|---|---:|---:|---:|---|\n", f);
    char c[7][256];
    for (size_t i = 0; i < n; ++i) {
        cells(c, &rows[i], true);
        fprintf(f, "| %s | `%s` | %s | %s | %s | %s | %s%s%s |\n", c[0], c[1], c[2], c[3], c[4],
                c[5], rows[i].regression ? "**" : "", c[6], rows[i].regression ? "**" : "");
    }
}

typedef struct diff_cells {
    const hx_diff_row *rows;
    size_t cached;
    char c[7][256];
} diff_cells;

static const char *diff_cell(void *ctx, size_t row, int col)
{
    diff_cells *dc = ctx;
    if (dc->cached != row) {
        cells(dc->c, &dc->rows[row], false);
        dc->cached = row;
    }
    return dc->c[col];
}

typedef struct diff_opts {
    const char *out, *old_path, *new_path;
    hx_table_fmt fmt;
    double slow;
} diff_opts;

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(diff_opts *o, int argc, char **argv)
{
    enum { O_FORMAT = 256, O_SLOWER };
    static const struct option opts[] = {
        {"format", required_argument, NULL, O_FORMAT}, {"out", required_argument, NULL, 'o'},
        {"slower", required_argument, NULL, O_SLOWER}, {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (diff_opts){.fmt = HX_FMT_MD};
    optind = 1;
    opterr = 0;
    hx_cli_optstate optstate = {0};
    for (int c; (c = hx_cli_getopt(&optstate, argc, argv, ":o:h", opts, NULL, NULL)) != -1;) {
        char *end;
        switch (c) {
        case O_FORMAT:
            if (!hx_table_fmt_parse(&o->fmt, optarg))
                return hx_cli_fail("diff", "--format '%s': expected " HX_TABLE_FORMATS, optarg);
            break;
        case O_SLOWER:
            o->slow = strtod(optarg, &end);
            if (*end || !(o->slow > 0.0 && o->slow < 100.0))
                return hx_cli_fail("diff", "--slower '%s': expected a percentage in (0, 100)",
                                   optarg);
            break;
        case 'o': o->out = optarg; break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return hx_cli_bad_option(&optstate, "diff", c, argv);
        }
    }
    if (argc - optind != 2)
        return hx_cli_fail("diff", "expected OLD and NEW report.json files (try --help)");
    o->old_path = argv[optind];
    o->new_path = argv[optind + 1];
    lm_err err = {0};
    if (o->out && (hx_cli_check_out_file(o->out, &err) != LM_OK ||
                   hx_cli_out_not_input(o->out, o->old_path, "OLD report", &err) != LM_OK ||
                   hx_cli_out_not_input(o->out, o->new_path, "NEW report", &err) != LM_OK))
        return hx_cli_fail("diff", "-o %s", err.msg);
    return -1;
}

/* The rows in o->fmt on f. */
static void print_rows(FILE *f, const diff_opts *o, const hx_diff_row *rows, size_t n,
                       size_t n_reg)
{
    if (o->fmt == HX_FMT_MD) {
        print_md(f, rows, n, o->old_path, o->new_path, n_reg);
        return;
    }
    diff_cells dc = {.rows = rows, .cached = SIZE_MAX};
    hx_table_print(f, o->fmt, heads, 7, n, diff_cell, &dc, 3, -1);
    if (o->fmt == HX_FMT_TABLE)
        fprintf(f, "%zu configuration(s), %zu regression(s)\n", n, n_reg);
}

/* The rows on stdout, or (-o) built in memory and written as every output is (fs.h:
 * atomically, into a folder that exists). */
static int write_rows(const diff_opts *o, const hx_diff_row *rows, size_t n, size_t n_reg,
                      lm_err *err)
{
    if (o->out == NULL) {
        print_rows(stdout, o, rows, n, n_reg);
        return LM_OK;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    if (f == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "-o %s: out of memory", o->out);
    print_rows(f, o, rows, n, n_reg);
    int rc = fclose(f) != 0 ? LM_FAIL(err, LM_E_NOMEM, "-o %s: out of memory", o->out)
                            : lm_write_file(o->out, text, len, err);
    free(text);
    return rc;
}

int cmd_diff(int argc, char **argv)
{
    diff_opts o;
    int code = parse_options(&o, argc, argv);
    if (code >= 0)
        return code;
    hx_diff_row *rows = NULL;
    size_t n = 0, n_reg = 0;
    lm_err err = {0};
    if (hx_report_diff(&rows, &n, o.old_path, o.new_path, o.slow, &err) != LM_OK)
        return hx_cli_fail("diff", "%s", err.msg);
    for (size_t i = 0; i < n; ++i)
        n_reg += rows[i].regression;
    int rc = write_rows(&o, rows, n, n_reg, &err);
    free(rows);
    if (rc != LM_OK)
        return hx_cli_fail("diff", "%s", err.msg);
    return n_reg ? 1 : 0;
}
