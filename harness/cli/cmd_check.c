/* cmd_check.c — `kvdrift check`: CI regression mode. Each case file runs its sweep; each
 * configuration's capture hash is compared with the golden blessed for this platform, and the
 * configuration is judged by its classification against the reference and envelope. */
#include "commands.h"
#include "kvd_util.h"

#include "caserun.h"
#include "cli_util.h"
#include "classify.h"
#include "golden.h"
#include "report.h"

#include <getopt.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage_text[] =
    "usage: kvdrift check CASE... [--junit FILE] [--json FILE] [--strict] [options]\n"
    "Runs every case file (cases/README.md): its sweep, the MPFR reference and the noise\n"
    "envelope; then, per configuration, compares the XXH3-128 of its canonical capture with the\n"
    "golden blessed for this platform fingerprint (GOLDEN-DIR/<case name>.json):\n"
    "  equal              -> EXACT (golden match)\n"
    "  different, absent  -> the class against the reference and envelope\n"
    "A configuration fails on DRIFT, FLIP or NONFINITE; with --strict (or the case's\n"
    "strict_bits = true) also on any changed bit (golden mismatch or absent). A golden blessed\n"
    "on another platform is absent here: the reference classification decides. A case whose\n"
    "model file is absent is skipped, not failed.\n\n"
    "      --junit FILE      write JUnit XML (one testcase per case x configuration)\n"
    "      --json FILE       write the reports as JSON (harness/REPORT-SCHEMA.md)\n"
    "      --strict          fail on any changed bit\n"
    "      --golden-dir DIR  golden files (default " HX_GOLDEN_DIR ")\n"
    "      --cache DIR       reference/envelope/synthetic-model cache (default $KVDRIFT_CACHE\n"
    "                        or ~/.cache/kvdrift)\n"
    "  -j, --jobs N          engine runs in parallel (default 1; results do not change)\n"
    "  -q, --quiet           no progress lines\n"
    "  -h, --help            this text\n\n"
    "exit codes: 0 every configuration passes (or was skipped), 1 a configuration fails,\n"
    "2 usage or input error (a bad case file: FILE:LINE: reason)\n";

/* The folder a report file goes into must exist before hours of work are spent. */
static bool parent_exists(const char *path)
{
    const char *slash = strrchr(path, '/');
    if (slash == NULL)
        return true;
    char dir[4096];
    size_t n = slash == path ? 1 : (size_t)(slash - path);
    if (n >= sizeof dir)
        return false;
    memcpy(dir, path, n);
    dir[n] = '\0';
    struct stat st;
    return stat(dir, &st) == 0 && S_ISDIR(st.st_mode);
}

/* Platform ids that have entries for this case in the golden file (read directly: golden.h
 * answers lookups, this only lists), as "id1, id2" in buf; "" when none or unreadable. */
static void other_platforms(char *buf, size_t cap, const char *path, const char *case_name,
                            const char *self_id)
{
    buf[0] = '\0';
    json_t *root = json_load_file(path, 0, NULL);
    json_t *cfgs = json_object_get(json_object_get(root, "cases"), case_name);
    const char *ck, *pk;
    json_t *cv, *pv;
    size_t used = 0;
    char seen[16][17];
    size_t n_seen = 0;
    json_object_foreach(cfgs, ck, cv) {
        json_object_foreach(cv, pk, pv) {
            bool dup = strcmp(pk, self_id) == 0;
            for (size_t i = 0; i < n_seen && !dup; ++i)
                dup = strcmp(seen[i], pk) == 0;
            if (dup || n_seen == 16 || strlen(pk) > 16)
                continue;
            snprintf(seen[n_seen++], sizeof seen[0], "%s", pk);
            int w = snprintf(buf + used, cap - used, "%s%s", used ? ", " : "", pk);
            if (w < 0 || (size_t)w >= cap - used)
                break;
            used += (size_t)w;
        }
    }
    json_decref(root);
}

/* Sets every configuration's golden status, and the class EXACT where the bits are the blessed
 * ones. A golden match never hides a failing class: bless refuses defects, so bits equal to
 * the golden that classify as DRIFT/FLIP/NONFINITE now mean the reference or the envelope
 * changed since blessing, and that verdict is kept. Counts go to n_match/n_mismatch/n_absent. */
static int apply_goldens(hx_caserun *cr, const char *golden_path, const hx_fingerprint *fp,
                         size_t counts[3], lm_err *err)
{
    hx_golden *g = NULL;
    int rc = hx_golden_load(&g, golden_path, true, err);
    if (rc != LM_OK)
        return rc;
    hx_report *r = cr->report;
    for (size_t i = 0; i < r->n_configs && rc == LM_OK; ++i) {
        hx_config_report *c = &r->configs[i];
        hx_golden_entry e;
        bool found = false;
        rc = hx_golden_find(g, r->case_name, c->config, fp->id, &e, &found, err);
        if (rc != LM_OK)
            break;
        if (!found) {
            c->golden = HX_GOLDEN_ABSENT;
            counts[2]++;
        } else if (strcmp(e.hash_hex, c->hash_hex) == 0) {
            c->golden = HX_GOLDEN_MATCH;
            counts[0]++;
            if (!hx_class_fails(c->cls)) {
                char was[320];
                snprintf(was, sizeof was, "%s", c->reason);
                /* Precision bounds the copied reason so the line fits (it may be cut). */
                snprintf(c->reason, sizeof c->reason, "golden match (bits as blessed); vs "
                         "reference: %s%s%.*s", hx_class_name(c->cls), was[0] ? ", " : "",
                         (int)(sizeof c->reason - 64), was);
                c->cls = HX_EXACT;
            }
        } else {
            c->golden = HX_GOLDEN_MISMATCH;
            counts[1]++;
            /* The summary explains a mismatch without the old bytes: where did top-1 go. */
            if (cr->sweep && i < cr->sweep->n_runs) {
                hx_golden_entry now;
                if (hx_caserun_entry(&now, cr, i, err) == LM_OK && now.n_top && e.n_top &&
                    now.top_ids[0] != e.top_ids[0])
                    fprintf(stdout, "  note: %s: top-1 at position %u was id %d (%.9g) when "
                            "blessed, now id %d (%.9g)\n", c->config, (unsigned)e.position,
                            (int)e.top_ids[0], (double)e.top_logits[0], (int)now.top_ids[0],
                            (double)now.top_logits[0]);
            }
        }
    }
    hx_golden_free(g);
    return rc;
}

static void print_case(const hx_caserun *cr, const char *golden_path, const hx_fingerprint *fp,
                       const size_t counts[3])
{
    const hx_report *r = cr->report;
    bool strict = r->strict_bits;
    printf("case %s (%s): %s, %u prompt tokens, %u generated, %zu configurations%s\n",
           r->case_name, cr->c->file, r->model, (unsigned)cr->n_prompt, (unsigned)r->n_gen,
           r->n_configs, strict ? ", strict bits" : "");
    if (counts[2] > 0) {
        char others[256];
        other_platforms(others, sizeof others, golden_path, r->case_name, fp->id);
        if (others[0])
            printf("  no golden for this platform (%s) in %s for %zu configuration(s); blessed on: "
                   "%s. Another platform gives other bits legitimately: those configurations are "
                   "judged by the reference classification%s\n", fp->id, golden_path, counts[2],
                   others, strict ? " and fail (strict bits)" : "");
        else
            printf("  no golden for %zu configuration(s) on this platform (%s) in %s: judged by "
                   "the reference classification%s (kvdrift bless %s writes them)\n", counts[2],
                   fp->id, golden_path, strict ? " and fail (strict bits)" : "", cr->c->file);
    }
    printf("  %-28s %-8s %-9s %5s %9s %8s %7s %5s  %s\n", "config", "golden", "class", "div@",
           "max abs", "max ULP", "err/E", "sig", "verdict");
    char cells[HX_REPORT_NCOLS][HX_REPORT_CELL];
    size_t n_fail = 0;
    for (size_t i = 0; i < r->n_configs; ++i) {
        const hx_config_report *c = &r->configs[i];
        bool fails = hx_config_report_fails(c, strict);
        n_fail += fails;
        hx_report_cells(cells, c);
        printf("  %-28s %-8s %-9s %5s %9s %8s %7s %5s  %s\n", cells[0],
               hx_golden_status_name(c->golden), cells[1], cells[2], cells[3], cells[4], cells[11],
               cells[12], fails ? "FAIL" : "pass");
        if (fails)
            printf("      %s\n", c->reason);
    }
    printf("  %s: %zu pass, %zu fail; golden %zu match, %zu mismatch, %zu absent\n", r->case_name,
           r->n_configs - n_fail, n_fail, counts[0], counts[1], counts[2]);
}

int cmd_check(int argc, char **argv)
{
    enum { O_JUNIT = 256, O_JSON, O_STRICT, O_GOLDEN, O_CACHE };
    static const struct option opts[] = {
        {"junit", required_argument, NULL, O_JUNIT},   {"json", required_argument, NULL, O_JSON},
        {"strict", no_argument, NULL, O_STRICT},       {"golden-dir", required_argument, NULL, O_GOLDEN},
        {"cache", required_argument, NULL, O_CACHE},   {"jobs", required_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'},             {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *junit = NULL, *json = NULL, *golden_dir = NULL, *cache = NULL;
    hx_caserun_opts ro = {0};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":j:qh", opts, NULL)) != -1) {
        switch (o) {
        case O_JUNIT: junit = optarg; break;
        case O_JSON: json = optarg; break;
        case O_STRICT: ro.strict = true; break;
        case O_GOLDEN: golden_dir = optarg; break;
        case O_CACHE: cache = optarg; break;
        case 'q': ro.quiet = true; break;
        case 'j':
            if (!lm_parse_u32z(optarg, 1, 256, &ro.jobs))
                return hx_cli_fail("check", "--jobs '%s': expected an integer in 1..256", optarg);
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return hx_cli_bad_option("check", o, argv); /* ':' or unknown */
        }
    }
    if (optind >= argc)
        return hx_cli_fail("check", "no CASE files given (try --help)");
    if (junit && !parent_exists(junit))
        return hx_cli_fail("check", "--junit %s: its folder does not exist", junit);
    if (json && !parent_exists(json))
        return hx_cli_fail("check", "--json %s: its folder does not exist", json);
    ro.cache_dir = cache;

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
    /* Every case file is read and validated before anything runs or is written. */
    if ((st = hx_cli_load_cases(cases, argv + optind, n_cases, &case_error, &err)) != LM_OK)
        goto done;

    hx_fingerprint fp;
    hx_fingerprint_detect(&fp);
    printf("kvdrift check: %zu case(s); platform %s\n", n_cases, fp.short_text);
    size_t n_skipped = 0;
    for (size_t i = 0; i < n_cases && st == LM_OK; ++i) {
        st = hx_caserun_create(&runs[i], cases[i], &ro, &err);
        cases[i] = NULL; /* owned by the run now, also on error */
        if (st != LM_OK)
            break;
        hx_caserun *cr = runs[i];
        reports[i] = cr->report;
        if (cr->skipped) {
            n_skipped++;
            printf("case %s (%s): SKIP: %s (%zu configurations not run)\n", cr->c->name,
                   cr->c->file, cr->skip_reason, cr->report->n_configs);
            continue;
        }
        char gpath[4096];
        size_t counts[3] = {0, 0, 0};
        st = hx_caserun_golden_path(gpath, sizeof gpath, golden_dir, cr->c->name, &err);
        if (st == LM_OK)
            st = apply_goldens(cr, gpath, &fp, counts, &err);
        if (st == LM_OK)
            print_case(cr, gpath, &fp, counts);
        fflush(stdout);
    }
    if (st != LM_OK)
        goto done;
    if (junit && (st = hx_report_write_junit(reports, n_cases, ro.strict, junit, &err)) != LM_OK)
        goto done;
    if (json && (st = hx_report_write_json_many(reports, n_cases, json, &err)) != LM_OK)
        goto done;
    size_t n_fail_cases = 0;
    for (size_t i = 0; i < n_cases; ++i)
        n_fail_cases += hx_report_exit_code(reports[i], reports[i]->strict_bits) != 0;
    code = n_fail_cases ? 1 : 0;
    printf("kvdrift check: %zu case(s): %zu ran, %zu skipped, %zu failed -> %s\n", n_cases,
           n_cases - n_skipped, n_skipped, n_fail_cases, code ? "FAIL" : "pass");
    if (junit)
        printf("  JUnit: %s\n", junit);
    if (json)
        printf("  JSON: %s\n", json);
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
