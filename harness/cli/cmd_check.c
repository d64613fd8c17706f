/* cmd_check.c — `kvdrift check`: CI regression mode. Each case file runs its sweep; each
 * configuration is judged by its classification against the reference and envelope, and its
 * capture hash against the golden blessed under its key for the same input (golden_verdict.h). */
#include "cli/commands.h"
#include "kvd_util.h"

#include "plan/caserun.h"
#include "cli/cli_util.h"
#include "model/classify.h"
#include "fs.h"
#include "judge/golden.h"
#include "judge/golden_verdict.h"
#include "model/report.h"

#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char usage_text[] =
    "usage: kvdrift check CASE... [-o DIR] [--junit FILE] [--json FILE] [--md FILE] [options]\n"
    "Runs every case file (cases/README.md): its sweep, the MPFR reference and the noise\n"
    "envelope; classifies every configuration against them; then compares the XXH3-128 of its\n"
    "canonical capture with the golden blessed under its key (GOLDEN-DIR/<case name>.json):\n"
    "  match     bits as blessed (a flag beside the class, which stays the classification's)\n"
    "  mismatch  other bits: the class decides (--strict: fails)\n"
    "  absent    no golden for this configuration on this platform: the class decides\n"
    "            (--strict: fails)\n"
    "  stale     the golden was blessed for another model, prompt or kvdrift version, or\n"
    "            another engine version (under this key or another: a prompt of another\n"
    "            length changes the key): fails, re-bless (kvdrift bless CASE)\n"
    "A case naming another engine (engine = ADAPTER, its knob axes in [knobs]) runs the\n"
    "adapter's sweep (as sweep --engine); its goldens are the dumps' bits, pinned to the\n"
    "engine_version the adapter reports. An adapter not installed here skips the case.\n"
    "A configuration fails on DRIFT, FLIP or NONFINITE, on a stale golden, with --strict\n"
    "(or the case's strict_bits = true) on any changed bit, and with the case's\n"
    "invariant_bits = true on a chunk-invariant backend's row that is not EXACT (bitwise equal\n"
    "to its one-chunk baseline). A case whose model file is absent\n"
    "is skipped; when every case is skipped nothing was checked, which is not a pass (exit 3).\n"
    "GOLDEN-DIR defaults to the folder 'golden' beside each case file; a relative model path in\n"
    "a case file is relative to that file's folder.\n\n"
    "  -o, --out DIR         write DIR/junit.xml, DIR/report.json, DIR/report.md and\n"
    "                        DIR/report.html (DIR is made when missing; its parent must exist)\n"
    "      --junit FILE      JUnit XML (one testcase per case x configuration)\n"
    "      --json FILE       the reports as JSON (REPORT-SCHEMA.md)\n"
    "      --md FILE         the reports as Markdown\n"
    "      --html FILE       the reports as one self-contained HTML page (inline SVG plots)\n"
    "                        (the folders of these files must exist; the report files\n"
    "                        are written all or none)\n"
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
    "golden) or the engine's model differs from the reference's own reading of its file, 2 usage or input error (a bad case file: FILE:LINE: reason), 3 nothing ran (every\n"
    "case skipped; --allow-skip makes it 0)\n";

#define CHECK_EXIT_NOTHING_RAN 3

/* The report files asked for, one per writer of the writers table (report.h). */
typedef struct check_out {
    const char *path[HX_REPORT_MAX_WRITERS]; /* NULL: not written */
    char buf[HX_REPORT_MAX_WRITERS][4096];
    const char *dir; /* -o DIR: made (one folder) when the reports are written */
    bool github;
} check_out;

/* A report file checked before hours of work are spent (nothing is created): it can be written
 * (into -o DIR, made when missing: dir; else NULL) and it is none of the files check reads (case
 * files, their golden files under golden_dir, their model files); errors name the option. */
static int prepare_out(const char *opt, const char *dir, const char *path, const char *golden_dir,
                       hx_case *const *cases, size_t n, lm_err *err)
{
    int rc = dir ? hx_cli_check_out_in_dir(dir, path, err) : hx_cli_check_out_file(path, err);
    for (size_t i = 0; rc == LM_OK && i < n; ++i) {
        char gpath[4096];
        rc = hx_cli_out_not_input(path, cases[i]->file, "case file", err);
        if (rc == LM_OK)
            rc = hx_caserun_golden_path(gpath, sizeof gpath, golden_dir, cases[i], err);
        if (rc == LM_OK)
            rc = hx_cli_out_not_input(path, gpath, "golden file", err);
        if (rc == LM_OK && !cases[i]->model.synth)
            rc = hx_cli_out_not_input(path, cases[i]->model.path, "MODEL", err);
    }
    return hx_cli_err_prefix(rc, opt, err);
}

/* -o DIR (made, one folder, when the reports are written) and every report file. */
static int prepare_outputs(check_out *o, const char *out_dir, const char *golden_dir,
                           hx_case *const *cases, size_t n_cases, lm_err *err)
{
    int rc = LM_OK;
    if (out_dir && (rc = hx_cli_err_prefix(hx_cli_check_out_dir(out_dir, err), "--out", err)) != LM_OK)
        return rc;
    for (size_t i = 0; rc == LM_OK && i < hx_report_writer_count(); ++i) {
        const hx_report_writer *w = hx_report_writer_at(i);
        bool in_dir = false;
        if (out_dir && o->path[i] == NULL) { /* an explicit --<format> FILE wins over -o DIR */
            int n = snprintf(o->buf[i], sizeof o->buf[i], "%s/%s", out_dir, w->file);
            if (n < 0 || (size_t)n >= sizeof o->buf[i])
                return LM_FAIL(err, LM_E_INPUT, "--out %.64s...: path too long", out_dir);
            o->path[i] = o->buf[i];
            in_dir = true;
        }
        char opt[64];
        snprintf(opt, sizeof opt, "--%s", in_dir ? "out" : w->name);
        if (o->path[i])
            rc = prepare_out(opt, in_dir ? out_dir : NULL, o->path[i], golden_dir, cases,
                             n_cases, err);
    }
    o->dir = out_dir;
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
    char split[1024];
    hx_split_line(split, sizeof split, r);
    if (split[0])
        fprintf(chat, "  %s\n", split);
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

/* Every report file, all or nothing: each document is made and written to its temp file (a
 * device or FIFO: directly) before any file is renamed into place (lm_wfile_commit_all), so a
 * report that cannot be made or written leaves every report file as it was, and the -o folder
 * as it was too: one this call made is removed again (it holds nothing then). */
static int write_reports(const check_out *o, const hx_report **reports, size_t n, bool strict,
                         lm_err *err)
{
    lm_wfile *w[HX_REPORT_MAX_WRITERS] = {0};
    const size_t n_w = hx_report_writer_count();
    struct stat sb;
    const bool made = o->dir != NULL && stat(o->dir, &sb) != 0;
    int st = o->dir ? lm_mkdir_p(o->dir, err) : LM_OK; /* its parent was checked to exist */
    for (size_t i = 0; st == LM_OK && i < n_w; ++i) {
        if (o->path[i] == NULL)
            continue;
        char *text = NULL;
        size_t len = 0;
        st = hx_report_writer_at(i)->text_many(&text, &len, reports, n, strict, err);
        if (st == LM_OK && (st = lm_wfile_open(&w[i], o->path[i], err)) == LM_OK)
            st = lm_wfile_write(w[i], text, len, err);
        free(text);
    }
    if (st == LM_OK)
        st = lm_wfile_commit_all(w, n_w, err); /* frees every w[i] */
    else
        for (size_t i = 0; i < n_w; ++i)
            lm_wfile_abort(w[i]);
    if (st != LM_OK && made)
        rmdir(o->dir);
    return st;
}

/* The report files; with --github the annotations and the step summary. */
static int write_outputs(const check_out *o, hx_caserun *const *runs, const hx_report **reports,
                         size_t n, bool strict, lm_err *err)
{
    int st = write_reports(o, reports, n, strict, err);
    if (st != LM_OK)
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
        if ((st = hx_report_md_text(&md, &len, reports, n, strict, err)) != LM_OK)
            return st;
        bool ok = (f = fopen(summary, "a")) != NULL && fwrite(md, 1, len, f) == len;
        ok = (f == NULL || fclose(f) == 0) && ok;
        free(md);
        if (!ok)
            return LM_FAIL(err, LM_E_IO, "$GITHUB_STEP_SUMMARY %s: cannot append", summary);
    }
    return LM_OK;
}

typedef struct check_opts {
    const char *golden_dir, *out_dir;
    check_out out;
    bool allow_skip;
    hx_table_fmt fmt;
    hx_caserun_opts ro;
} check_opts;

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(check_opts *o, int argc, char **argv)
{
    /* --<writer> FILE for every report writer (O_WRITER + its index), then the fixed options */
    enum { O_STRICT = 256, O_GOLDEN, O_CACHE, O_ALLOW_SKIP, O_GITHUB, O_FORMAT, O_WRITER };
    static const struct option fixed[] = {
        {"out", required_argument, NULL, 'o'},         {"format", required_argument, NULL, O_FORMAT},
        {"strict", no_argument, NULL, O_STRICT},       {"golden-dir", required_argument, NULL, O_GOLDEN},
        {"cache", required_argument, NULL, O_CACHE},   {"jobs", required_argument, NULL, 'j'},
        {"allow-skip", no_argument, NULL, O_ALLOW_SKIP}, {"github", no_argument, NULL, O_GITHUB},
        {"quiet", no_argument, NULL, 'q'},             {"help", no_argument, NULL, 'h'},
    };
    struct option opts[sizeof fixed / sizeof fixed[0] + HX_REPORT_MAX_WRITERS + 1] = {{0}};
    size_t n_w = 0;
    for (; n_w < hx_report_writer_count() && n_w < HX_REPORT_MAX_WRITERS; ++n_w)
        opts[n_w] = (struct option){hx_report_writer_at(n_w)->name, required_argument, NULL,
                                    O_WRITER + (int)n_w};
    memcpy(opts + n_w, fixed, sizeof fixed);
    memset(o, 0, sizeof *o);
    o->ro = (hx_caserun_opts){.log = hx_cli_log, .log_user = "sweep"};
    o->fmt = HX_FMT_TABLE;
    optind = 1;
    opterr = 0;
    hx_cli_optstate optstate = {0};
    for (int c; (c = hx_cli_getopt(&optstate, argc, argv, ":j:qho:", opts, NULL, NULL)) != -1;) {
        switch (c) {
        case 'o': o->out_dir = optarg; break;
        case O_GITHUB: o->out.github = true; break;
        case O_FORMAT:
            if (!hx_table_fmt_parse(&o->fmt, optarg))
                return hx_cli_fail("check", "--format '%s': expected " HX_TABLE_FORMATS, optarg);
            break;
        case O_STRICT: o->ro.strict = true; break;
        case O_ALLOW_SKIP: o->allow_skip = true; break;
        case O_GOLDEN: o->golden_dir = optarg; break;
        case O_CACHE:
            if (hx_cli_cache_option(&o->ro.cache_dir, "check", optarg) != 0)
                return 2;
            break;
        case 'q': o->ro.quiet = true; break;
        case 'j':
            if (!lm_parse_u32z(optarg, 1, 256, &o->ro.jobs))
                return hx_cli_fail("check", "--jobs '%s': expected an integer in 1..256", optarg);
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default:
            if (c < O_WRITER || c >= O_WRITER + (int)n_w)
                return hx_cli_bad_option(&optstate, "check", c, argv); /* ':' or unknown */
            o->out.path[c - O_WRITER] = optarg;
        }
    }
    return optind < argc ? -1 : hx_cli_fail("check", "no CASE files given (try --help)");
}

/* Runs and judges every case; *n_skipped counts the skipped ones. */
static int run_cases(hx_caserun **runs, const hx_report **reports, hx_case **cases, size_t n,
                     const check_opts *o, const char *cmdline, size_t *n_skipped, lm_err *err)
{
    hx_fingerprint fp;
    hx_fingerprint_detect(&fp);
    fprintf(o->fmt == HX_FMT_TABLE ? stdout : stderr, "kvdrift check: %zu case(s); platform %s\n",
            n, fp.short_text);
    int st = LM_OK;
    for (size_t i = 0; i < n && st == LM_OK; ++i) {
        bool skipped = false;
        st = run_case(&runs[i], cases[i], &o->ro, o->golden_dir, &fp, o->fmt, &skipped, err);
        cases[i] = NULL; /* owned by the run now, also on error */
        if (st == LM_OK) {
            snprintf(runs[i]->report->command_line, HX_COMMAND_LINE_MAX, "%s", cmdline);
            reports[i] = runs[i]->report;
        }
        *n_skipped += skipped;
    }
    return st;
}

/* The closing lines; returns the exit code (0 pass, 1 a failure, 3 nothing ran). */
static int print_verdict(const hx_report **reports, size_t n, size_t n_skipped,
                         const check_opts *o)
{
    size_t n_fail_cases = 0;
    for (size_t i = 0; i < n; ++i)
        n_fail_cases += hx_report_exit_code(reports[i], reports[i]->strict_bits) != 0;
    bool nothing_ran = n_skipped == n;
    int code = n_fail_cases ? 1 : nothing_ran && !o->allow_skip ? CHECK_EXIT_NOTHING_RAN : 0;
    printf("kvdrift check: %zu case(s): %zu ran, %zu skipped, %zu failed -> %s\n", n,
           n - n_skipped, n_skipped, n_fail_cases,
           code == 1 ? "FAIL" : nothing_ran ? (o->allow_skip ? "nothing ran (--allow-skip: exit 0)"
                                                             : "NOTHING RAN (exit 3, not a pass)")
                                            : "pass");
    for (size_t i = 0; i < hx_report_writer_count(); ++i)
        if (o->out.path[i])
            printf("  %s: %s\n", hx_report_writer_at(i)->title, o->out.path[i]);
    return code;
}

int cmd_check(int argc, char **argv)
{
    char cmdline[HX_COMMAND_LINE_MAX];
    hx_command_line(cmdline, sizeof cmdline, argc, argv); /* before getopt reorders argv */
    check_opts o;
    int code = parse_options(&o, argc, argv);
    if (code >= 0)
        return code;
    size_t n_cases = (size_t)(argc - optind), n_skipped = 0;
    hx_case **cases = calloc(n_cases, sizeof *cases);
    hx_caserun **runs = calloc(n_cases, sizeof *runs);
    const hx_report **reports = calloc(n_cases, sizeof *reports);
    lm_err err = {0};
    bool case_error = false;
    int st = cases && runs && reports ? LM_OK : LM_FAIL(&err, LM_E_NOMEM, "out of memory");
    /* Every case file is read and validated, and every output prepared, before anything runs. */
    if (st == LM_OK && (st = hx_cli_load_cases(cases, argv + optind, n_cases, &case_error,
                                                &err)) == LM_OK)
        st = hx_cli_golden_dir(o.golden_dir, &err); /* missing: every golden absent */
    if (st == LM_OK)
        st = prepare_outputs(&o.out, o.out_dir, o.golden_dir, cases, n_cases, &err);
    if (st == LM_OK)
        st = run_cases(runs, reports, cases, n_cases, &o, cmdline, &n_skipped, &err);
    if (st == LM_OK)
        st = write_outputs(&o.out, runs, reports, n_cases, o.ro.strict, &err);
    code = st == LM_OK ? print_verdict(reports, n_cases, n_skipped, &o)
                       : hx_cli_status("check", st, case_error, &err);
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
