/* cmd_check.c — `kvdrift check`: CI regression mode. Each case file runs its sweep; each
 * configuration is judged by its classification against the reference and envelope, and its
 * capture hash against the golden blessed under its key for the same input (golden_judge.h). */
#include "commands.h"

#include "caserun.h"
#include "cli_util.h"
#include "classify.h"
#include "fs.h"
#include "golden.h"
#include "golden_judge.h"
#include "report.h"

#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift check CASE... [-o DIR] [--junit FILE] [--json FILE] [--md FILE] [options]\n"
    "Runs every case file (cases/README.md): its sweep, the MPFR reference and the noise\n"
    "envelope; classifies every configuration against them; then compares the XXH3-128 of its\n"
    "canonical capture with the golden blessed under its key (GOLDEN-DIR/<case name>.json):\n"
    "  match     bits as blessed (a flag beside the class, which stays the classification's)\n"
    "  mismatch  other bits: the class decides (--strict: fails)\n"
    "  absent    no golden under this key: the class decides (--strict: fails)\n"
    "  stale     the golden was blessed for another model, prompt or kvdrift version: fails,\n"
    "            re-bless (kvdrift bless CASE)\n"
    "A configuration fails on DRIFT, FLIP or NONFINITE, on a stale golden, and with --strict\n"
    "(or the case's strict_bits = true) on any changed bit. A case whose model file is absent\n"
    "is skipped; when every case is skipped nothing was checked, which is not a pass (exit 3).\n"
    "GOLDEN-DIR defaults to the folder 'golden' beside each case file; a relative model path in\n"
    "a case file is relative to that file's folder.\n\n"
    "  -o, --out DIR         write DIR/junit.xml, DIR/report.json, DIR/report.md and\n"
    "                        DIR/report.html\n"
    "      --junit FILE      JUnit XML (one testcase per case x configuration)\n"
    "      --json FILE       the reports as JSON (REPORT-SCHEMA.md)\n"
    "      --md FILE         the reports as Markdown\n"
    "      --html FILE       the reports as one self-contained HTML page (inline SVG plots)\n"
    "                        (missing folders of these files are created)\n"
    "      --github          GitHub Actions: ::error/::warning annotations on the case files,\n"
    "                        and the Markdown appended to $GITHUB_STEP_SUMMARY when set\n"
    "      --format F        the tables as table (default; class coloured on a terminal,\n"
    "                        NO_COLOR honoured), csv, tsv, jsonl or md (tables alone on stdout)\n"
    "      --strict          fail on any changed bit\n"
    "      --allow-skip      exit 0 when every case was skipped (default: exit 3)\n"
    "      --golden-dir DIR  golden files (default: CASE's folder/golden)\n"
    "      --cache DIR       reference/envelope/synthetic-model cache (default $KVDRIFT_CACHE\n"
    "                        or ~/.cache/kvdrift)\n"
    "  -j, --jobs N          engine runs in parallel (default 1; results do not change)\n"
    "  -q, --quiet           no progress lines\n"
    "  -h, --help            this text\n\n"
    "exit codes: 0 every configuration passes, 1 a configuration fails (regression or stale\n"
    "golden), 2 usage or input error (a bad case file: FILE:LINE: reason), 3 nothing ran (every\n"
    "case skipped; --allow-skip makes it 0)\n";

#define CHECK_EXIT_NOTHING_RAN 3

typedef struct check_out {
    const char *junit, *json, *md, *html;
    char junit_buf[4096], json_buf[4096], md_buf[4096], html_buf[4096];
    bool github;
} check_out;

/* Report files' folders are made before hours of work are spent, and the files checked;
 * errors name the option. */
static int prepare_out(const char *opt, const char *path, lm_err *err)
{
    if (path == NULL)
        return LM_OK;
    int rc = lm_mkdir_parent(path, err);
    if (rc == LM_OK)
        rc = hx_cli_check_out_file(path, err);
    if (rc != LM_OK) {
        char msg[sizeof err->msg];
        snprintf(msg, sizeof msg, "%s", err->msg);
        lm_err_clear(err); /* the first error set is kept: replace it with the named one */
        return LM_FAIL(err, rc, "%s %.400s", opt, msg);
    }
    return LM_OK;
}

static int prepare_outputs(check_out *o, const char *out_dir, lm_err *err)
{
    if (out_dir) {
        const char *names[4] = {"junit.xml", "report.json", "report.md", "report.html"};
        char *bufs[4] = {o->junit_buf, o->json_buf, o->md_buf, o->html_buf};
        const char **dst[4] = {&o->junit, &o->json, &o->md, &o->html};
        for (int i = 0; i < 4; ++i) {
            if (*dst[i])
                continue; /* an explicit --junit/--json/--md wins */
            int n = snprintf(bufs[i], sizeof o->junit_buf, "%s/%s", out_dir, names[i]);
            if (n < 0 || (size_t)n >= sizeof o->junit_buf)
                return LM_FAIL(err, LM_E_INPUT, "--out %.64s...: path too long", out_dir);
            *dst[i] = bufs[i];
        }
    }
    int rc = prepare_out("--junit", o->junit, err);
    if (rc == LM_OK)
        rc = prepare_out("--json", o->json, err);
    if (rc == LM_OK)
        rc = prepare_out("--md", o->md, err);
    if (rc == LM_OK)
        rc = prepare_out("--html", o->html, err);
    return rc;
}

/* Looks every configuration of a run case up in its golden file (hx_golden_judge). */
static int judge_case(hx_caserun *cr, const char *gpath, const hx_fingerprint *fp,
                      hx_golden_counts *counts, lm_err *err)
{
    hx_report *r = cr->report;
    hx_golden *g = NULL;
    hx_golden_entry *now = calloc(r->n_configs, sizeof *now);
    hx_golden_key *key = calloc(r->n_configs, sizeof *key);
    const char **keys = calloc(r->n_configs, sizeof *keys);
    int rc = now && key && keys ? hx_golden_load(&g, gpath, true, err)
                                : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < r->n_configs && rc == LM_OK; ++i) {
        hx_caserun_key(&key[i], cr, i, fp);
        keys[i] = key[i].id;
        rc = hx_caserun_entry(&now[i], cr, i, err);
    }
    if (rc == LM_OK)
        rc = hx_golden_judge(r, g, keys, now, counts, err);
    hx_golden_free(g);
    free(now);
    free(key);
    free(keys);
    return rc;
}

/* The check table's cells: config, golden, class, err/E, ULP@max, top1, div@, verdict. */
typedef struct check_cells {
    const hx_report *r;
    size_t cached;
    char c[HX_REPORT_NCOLS][HX_REPORT_CELL];
} check_cells;

static const char *check_cell(void *ctx, size_t row, int col)
{
    check_cells *cc = ctx;
    const hx_config_report *c = &cc->r->configs[row];
    if (cc->cached != row) {
        hx_report_cells(cc->c, c);
        cc->cached = row;
    }
    static const int map[] = {0, -1, 1, 11, 4, 8, 2, -2};
    if (map[col] == -1)
        return hx_golden_status_name(c->golden);
    if (map[col] == -2)
        return hx_config_report_fails(c, cc->r->strict_bits) ? "FAIL" : "pass";
    return cc->c[map[col]];
}

static void print_case(const hx_caserun *cr, const char *golden_path, const hx_golden_counts *k,
                       hx_table_fmt fmt)
{
    const hx_report *r = cr->report;
    bool strict = r->strict_bits;
    FILE *chat = fmt == HX_FMT_TABLE ? stdout : stderr;
    fprintf(chat, "case %s (%s): %s, %u prompt tokens, %u generated, %zu configurations%s\n",
            r->case_name, cr->c->file, r->model, (unsigned)cr->n_prompt, (unsigned)r->n_gen,
            r->n_configs, strict ? ", strict bits" : "");
    if (k->n[HX_GOLDEN_ABSENT] > 0)
        fprintf(chat, "  no golden for %zu configuration(s) under their keys in %s: judged by "
                "the reference classification%s (kvdrift bless %s writes them)\n",
                k->n[HX_GOLDEN_ABSENT], golden_path, strict ? " and fail (strict bits)" : "",
                cr->c->file);
    if (k->n[HX_GOLDEN_STALE] > 0)
        fprintf(chat, "  %zu golden(s) in %s were blessed for other input: they fail until "
                "blessed again (kvdrift bless %s)\n", k->n[HX_GOLDEN_STALE], golden_path,
                cr->c->file);
    static const char *const heads[] = {"config", "golden", "class", "err/E", "ULP@max",
                                        "top1", "div@", "verdict"};
    check_cells cc = {.r = r, .cached = SIZE_MAX};
    hx_table_print(stdout, fmt, heads, 8, r->n_configs, check_cell, &cc, 3, 2);
    fflush(stdout);
    char why[1200];
    size_t n_fail = 0;
    for (size_t i = 0; i < r->n_configs; ++i) {
        const hx_config_report *c = &r->configs[i];
        const char *type;
        hx_config_report_failure(why, sizeof why, &type, c, strict);
        n_fail += type[0] != '\0';
        if (type[0])
            fprintf(chat, "  FAIL %s: %s\n", c->config, why);
        else if (c->golden == HX_GOLDEN_MISMATCH)
            fprintf(chat, "  note %s: %s\n", c->config, c->golden_note);
    }
    fprintf(chat, "  %s: %zu pass, %zu fail; golden %zu match, %zu mismatch, %zu absent, %zu "
            "stale\n", r->case_name, r->n_configs - n_fail, n_fail, k->n[HX_GOLDEN_MATCH],
            k->n[HX_GOLDEN_MISMATCH], k->n[HX_GOLDEN_ABSENT], k->n[HX_GOLDEN_STALE]);
}

/* Runs case i, judges its goldens and prints it; *skipped when its model file is absent. */
static int run_case(hx_caserun **out, hx_case *c, const hx_caserun_opts *ro,
                    const char *golden_dir, const hx_fingerprint *fp, hx_table_fmt fmt,
                    bool *skipped, lm_err *err)
{
    int st = hx_caserun_create(out, c, ro, err); /* takes c, also on error */
    if (st != LM_OK)
        return st;
    hx_caserun *cr = *out;
    *skipped = cr->skipped;
    if (cr->skipped) {
        printf("case %s (%s): SKIP: %s (%zu configurations not run)\n", cr->c->name,
               cr->c->file, cr->skip_reason, cr->report->n_configs);
        return LM_OK;
    }
    char gpath[4096];
    hx_golden_counts counts = {{0}};
    st = hx_caserun_golden_path(gpath, sizeof gpath, golden_dir, cr->c, err);
    if (st == LM_OK)
        st = judge_case(cr, gpath, fp, &counts, err);
    if (st == LM_OK)
        print_case(cr, gpath, &counts, fmt);
    fflush(stdout);
    return st;
}

/* JUnit, JSON, Markdown; with --github the annotations and the step summary. */
static int write_outputs(const check_out *o, hx_caserun *const *runs, const hx_report **reports,
                         size_t n, bool strict, lm_err *err)
{
    int st = LM_OK;
    if (o->junit && (st = hx_report_write_junit(reports, n, strict, o->junit, err)) != LM_OK)
        return st;
    if (o->json && (st = hx_report_write_json_many(reports, n, o->json, err)) != LM_OK)
        return st;
    if (o->md && (st = hx_report_write_md_many(reports, n, o->md, err)) != LM_OK)
        return st;
    if (o->html && (st = hx_report_write_html_many(reports, n, o->html, err)) != LM_OK)
        return st;
    if (!o->github)
        return LM_OK;
    hx_annot_src *srcs = calloc(n, sizeof *srcs);
    if (srcs == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; ++i) {
        const hx_case *c = runs[i]->c;
        srcs[i] = (hx_annot_src){c->file, c->line_name, c->line_model, c->line_input,
                                 c->line_steps};
    }
    hx_report_print_github(stdout, reports, srcs, n, strict);
    free(srcs);
    const char *summary = getenv("GITHUB_STEP_SUMMARY");
    if (summary && *summary) {
        char *md = NULL;
        size_t len = 0;
        FILE *f = NULL;
        if (hx_report_md_text(&md, &len, reports, n) != LM_OK)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        bool ok = (f = fopen(summary, "a")) != NULL && fwrite(md, 1, len, f) == len;
        ok = (f == NULL || fclose(f) == 0) && ok;
        free(md);
        if (!ok)
            return LM_FAIL(err, LM_E_IO, "$GITHUB_STEP_SUMMARY %s: cannot append", summary);
    }
    return LM_OK;
}

int cmd_check(int argc, char **argv)
{
    enum { O_JUNIT = 256, O_JSON, O_MD, O_HTML, O_FORMAT, O_STRICT, O_GOLDEN, O_CACHE, O_ALLOW_SKIP, O_GITHUB };
    static const struct option opts[] = {
        {"junit", required_argument, NULL, O_JUNIT},   {"json", required_argument, NULL, O_JSON},
        {"md", required_argument, NULL, O_MD},         {"out", required_argument, NULL, 'o'},
        {"html", required_argument, NULL, O_HTML},     {"format", required_argument, NULL, O_FORMAT},
        {"strict", no_argument, NULL, O_STRICT},       {"golden-dir", required_argument, NULL, O_GOLDEN},
        {"cache", required_argument, NULL, O_CACHE},   {"jobs", required_argument, NULL, 'j'},
        {"allow-skip", no_argument, NULL, O_ALLOW_SKIP}, {"github", no_argument, NULL, O_GITHUB},
        {"quiet", no_argument, NULL, 'q'},             {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *golden_dir = NULL, *out_dir = NULL;
    check_out out = {0};
    bool allow_skip = false;
    hx_table_fmt fmt = HX_FMT_TABLE;
    hx_caserun_opts ro = {0};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":j:qho:", opts, NULL)) != -1) {
        switch (o) {
        case O_JUNIT: out.junit = optarg; break;
        case O_JSON: out.json = optarg; break;
        case O_MD: out.md = optarg; break;
        case O_HTML: out.html = optarg; break;
        case O_FORMAT:
            if (!hx_table_fmt_parse(&fmt, optarg))
                return hx_cli_fail("check", "--format '%s': expected " HX_TABLE_FORMATS, optarg);
            break;
        case 'o': out_dir = optarg; break;
        case O_GITHUB: out.github = true; break;
        case O_STRICT: ro.strict = true; break;
        case O_ALLOW_SKIP: allow_skip = true; break;
        case O_GOLDEN: golden_dir = optarg; break;
        case O_CACHE: ro.cache_dir = optarg; break;
        case 'q': ro.quiet = true; break;
        case 'j':
            if (!hx_cli_parse_u32(&ro.jobs, optarg, 1, 256))
                return hx_cli_fail("check", "--jobs '%s': expected an integer in 1..256", optarg);
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return hx_cli_bad_option("check", o, argv); /* ':' or unknown */
        }
    }
    if (optind >= argc)
        return hx_cli_fail("check", "no CASE files given (try --help)");

    size_t n_cases = (size_t)(argc - optind);
    hx_case **cases = calloc(n_cases, sizeof *cases);
    hx_caserun **runs = calloc(n_cases, sizeof *runs);
    const hx_report **reports = calloc(n_cases, sizeof *reports);
    lm_err err = {0};
    int st = LM_OK, code = 0;
    bool case_error = false;
    if (cases == NULL || runs == NULL || reports == NULL) {
        st = LM_FAIL(&err, LM_E_NOMEM, "out of memory");
        goto done;
    }
    /* Every case file is read and validated, and every output prepared, before anything runs. */
    if ((st = hx_cli_load_cases(cases, argv + optind, n_cases, &case_error, &err)) != LM_OK ||
        (st = prepare_outputs(&out, out_dir, &err)) != LM_OK)
        goto done;

    hx_fingerprint fp;
    hx_fingerprint_detect(&fp);
    fprintf(fmt == HX_FMT_TABLE ? stdout : stderr, "kvdrift check: %zu case(s); platform %s\n",
            n_cases, fp.short_text);
    size_t n_skipped = 0;
    for (size_t i = 0; i < n_cases && st == LM_OK; ++i) {
        bool skipped = false;
        st = run_case(&runs[i], cases[i], &ro, golden_dir, &fp, fmt, &skipped, &err);
        cases[i] = NULL; /* owned by the run now, also on error */
        if (st == LM_OK)
            reports[i] = runs[i]->report;
        n_skipped += skipped;
    }
    if (st != LM_OK || (st = write_outputs(&out, runs, reports, n_cases, ro.strict, &err)) != LM_OK)
        goto done;
    size_t n_fail_cases = 0;
    for (size_t i = 0; i < n_cases; ++i)
        n_fail_cases += hx_report_exit_code(reports[i], reports[i]->strict_bits) != 0;
    bool nothing_ran = n_skipped == n_cases;
    code = n_fail_cases ? 1 : nothing_ran && !allow_skip ? CHECK_EXIT_NOTHING_RAN : 0;
    printf("kvdrift check: %zu case(s): %zu ran, %zu skipped, %zu failed -> %s\n", n_cases,
           n_cases - n_skipped, n_skipped, n_fail_cases,
           code == 1 ? "FAIL" : nothing_ran ? (allow_skip ? "nothing ran (--allow-skip: exit 0)"
                                                          : "NOTHING RAN (exit 3, not a pass)")
                                            : "pass");
    const char *written[4][2] = {{"JUnit", out.junit}, {"JSON", out.json}, {"Markdown", out.md},
                                 {"HTML", out.html}};
    for (int i = 0; i < 4; ++i)
        if (written[i][1])
            printf("  %s: %s\n", written[i][0], written[i][1]);
done:
    if (st != LM_OK)
        code = hx_cli_status("check", st, case_error, &err);
    for (size_t i = 0; i < n_cases; ++i) {
        if (cases)
            hx_case_free(cases[i]);
        if (runs)
            hx_caserun_free(runs[i]);
    }
    free(cases);
    free(runs);
    free(reports);
    return code;
}
