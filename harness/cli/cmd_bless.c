/* cmd_bless.c — `kvdrift bless`: runs each case and records its configurations' capture hashes
 * (with a top-5 summary) as the goldens of this platform, atomically. */
#include "cli/commands.h"
#include "kvd_util.h"

#include "plan/caserun.h"
#include "cli/cli_util.h"
#include "model/classify.h"
#include "fs.h"
#include "judge/golden.h"
#include "model/report.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift bless CASE... [--golden-dir DIR] [--force] [options]\n"
    "Runs every case file (its sweep, reference and envelope, as check does) and writes the\n"
    "XXH3-128 of each configuration's canonical capture, with the top-5 logits at the last\n"
    "prompt position, into GOLDEN-DIR/<case name>.json under the configuration's golden key\n"
    "(what can change its bits: naive none of the CPU, ISA or BLAS core; blas the OpenBLAS\n"
    "build and core), pinned to the model file's hash, the prompt's token ids and this\n"
    "kvdrift version: this key's entries are replaced, other keys' kept, entries blessed for\n"
    "other input (stale: check fails on them) removed; the file is replaced atomically.\n"
    "A configuration classified DRIFT, FLIP or NONFINITE is refused (a golden must never\n"
    "enshrine a defect) unless --force; the case's other configurations are still blessed.\n"
    "A case naming another engine (engine = ADAPTER) keeps each dump's bits under the\n"
    "adapter's key (arch, adapter, engine_build), pinned to its engine_version; an ERROR row\n"
    "(no dump) is always refused.\n"
    "All or nothing: every case runs first; when one is bad input (a model that cannot be\n"
    "loaded or does not exist), no golden file is written.\n\n"
    "      --golden-dir DIR  golden files (default: CASE's folder/golden)\n"
    "      --force           bless failing configurations too\n"
    "      --cache DIR       reference/envelope/synthetic-model cache (default $KVDRIFT_CACHE\n"
    "                        or ~/.cache/kvdrift)\n"
    "  -j, --jobs N          engine runs in parallel (default 1)\n"
    "  -q, --quiet           no progress lines\n"
    "  -h, --help            this text\n\n"
    "exit codes: 0 every configuration blessed, 1 one was refused, 2 usage or input error\n"
    "(bad case file, or a model file that does not exist: nothing to bless)\n";

/* One case's blessing, prepared in memory: written only once every case is ready. */
typedef struct bless_plan {
    char gpath[4096];   /* GOLDEN-DIR/<case name>.json */
    char case_name[256];
    hx_golden *g;       /* the golden file with this platform's entries replaced */
    size_t n_set, n_refused, n_pruned; /* n_pruned: stale entries removed (other input) */
} bless_plan;

/* Sets the entries of one run case into its golden file, loaded into plan (nothing written). */
static int plan_case(bless_plan *plan, const hx_caserun *cr, const char *golden_dir,
                     const hx_fingerprint *fp, bool force, const char *cmdline, lm_err *err)
{
    int rc = hx_caserun_golden_path(plan->gpath, sizeof plan->gpath, golden_dir, cr->c, err);
    if (rc != LM_OK || (rc = hx_golden_load(&plan->g, plan->gpath, true, err)) != LM_OK)
        return rc;
    const hx_report *r = cr->report;
    snprintf(plan->case_name, sizeof plan->case_name, "%s", r->case_name);
    for (size_t i = 0; i < r->n_configs && rc == LM_OK; ++i) {
        const hx_config_report *c = &r->configs[i];
        if (c->cls == HX_ERROR) { /* an adapter's run that left no dump: no bits to bless */
            printf("  REFUSED %-28s ERROR: %s\n", c->config, c->reason);
            plan->n_refused++;
            continue;
        }
        if (hx_class_fails(c->cls) && !force) {
            printf("  REFUSED %-28s %s: %s (a golden must never enshrine a defect; --force "
                   "blesses it anyway)\n", c->config, hx_class_name(c->cls), c->reason);
            plan->n_refused++;
            continue;
        }
        hx_golden_entry e;
        hx_golden_key key;
        hx_caserun_key(&key, cr, i, fp);
        rc = hx_caserun_entry(&e, cr, i, err);
        if (rc == LM_OK) {
            plan->n_pruned += hx_golden_prune_stale(plan->g, r->case_name, c->config, &cr->input);
            rc = hx_golden_set(plan->g, r->case_name, c->config, key.id, key.text, &e, err);
        }
        if (rc == LM_OK) {
            plan->n_set++;
            printf("  %-28s %-9s %s key %s%s\n", c->config, hx_class_name(c->cls), e.hash_hex,
                   key.id, hx_class_fails(c->cls) ? "  (forced)" : "");
        }
    }
    const char *phases[HX_N_PHASES];
    for (int i = 0; i < HX_N_PHASES; ++i)
        phases[i] = hx_phase_name((hx_phase)i);
    const hx_golden_meta meta = {.command_line = cmdline, .blessed_utc = r->created_utc,
                                 .prompt_ids = r->prompt_ids,
                                 .n_prompt = r->prompt_ids ? r->n_prompt : 0,
                                 .phase_names = phases, .phase_s = r->phase_s,
                                 .n_phases = HX_N_PHASES};
    if (rc == LM_OK && plan->n_set > 0)
        rc = hx_golden_set_meta(plan->g, r->case_name, &meta, err);
    return rc;
}

/* Every golden file to a temp file beside it first (its folder made), then all renamed
 * (fs.h lm_wfile_commit_all): a full disk or a failing rename leaves every golden file as it
 * was. */
static int write_goldens(const bless_plan *plans, size_t n, lm_err *err)
{
    lm_wfile **w = calloc(n, sizeof *w);
    if (w == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    int st = LM_OK;
    for (size_t i = 0; i < n && st == LM_OK; ++i) {
        if (plans[i].n_set == 0)
            continue;
        st = lm_mkdir_parent(plans[i].gpath, err);
        if (st == LM_OK)
            st = hx_golden_stage(&w[i], plans[i].g, plans[i].gpath, err);
    }
    if (st == LM_OK) {
        st = lm_wfile_commit_all(w, n, err);
    } else {
        for (size_t i = 0; i < n; ++i)
            lm_wfile_abort(w[i]);
    }
    free(w);
    return st;
}

typedef struct bless_opts {
    const char *golden_dir;
    const char *cmdline; /* the command as typed (golden metadata) */
    bool force;
    hx_caserun_opts ro;
} bless_opts;

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(bless_opts *o, int argc, char **argv)
{
    enum { O_GOLDEN = 256, O_CACHE, O_FORCE };
    static const struct option opts[] = {
        {"golden-dir", required_argument, NULL, O_GOLDEN}, {"cache", required_argument, NULL, O_CACHE},
        {"force", no_argument, NULL, O_FORCE},             {"jobs", required_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'},                 {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (bless_opts){.ro = {.log = hx_cli_log, .log_user = "sweep"}};
    optind = 1;
    opterr = 0;
    int c;
    hx_cli_optstate optstate = {0};
    while ((c = hx_cli_getopt(&optstate, argc, argv, ":j:qh", opts, NULL, NULL)) != -1) {
        switch (c) {
        case O_GOLDEN: o->golden_dir = optarg; break;
        case O_CACHE:
            if (hx_cli_cache_option(&o->ro.cache_dir, "bless", optarg) != 0)
                return 2;
            break;
        case O_FORCE: o->force = true; break;
        case 'q': o->ro.quiet = true; break;
        case 'j':
            if (!lm_parse_u32z(optarg, 1, 256, &o->ro.jobs))
                return hx_cli_fail("bless", "--jobs '%s': expected an integer in 1..256", optarg);
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return hx_cli_bad_option(&optstate, "bless", c, argv); /* ':' or unknown */
        }
    }
    if (optind >= argc)
        return hx_cli_fail("bless", "no CASE files given (try --help)");
    lm_err err = {0};
    if (hx_cli_golden_dir(o->golden_dir, &err) != LM_OK)
        return hx_cli_fail("bless", "%s", err.msg);
    return -1;
}

/* Every case's golden file can be written (its folder exists or can be made as one folder, and
 * takes files; the file is not a folder), checked before any case runs. */
static int check_goldens(hx_case *const *cases, size_t n, const char *golden_dir, lm_err *err)
{
    int st = LM_OK;
    for (size_t i = 0; i < n && st == LM_OK; ++i) {
        char gpath[4096], dir[4096];
        st = hx_caserun_golden_path(gpath, sizeof gpath, golden_dir, cases[i], err);
        if (st != LM_OK)
            break;
        const char *slash = strrchr(gpath, '/');
        snprintf(dir, sizeof dir, "%.*s", slash ? (int)(slash - gpath) : 1, slash ? gpath : ".");
        st = hx_cli_check_out_in_dir(dir, gpath, err);
        if (golden_dir && *golden_dir)
            st = hx_cli_err_prefix(st, "--golden-dir", err);
    }
    return st;
}

/* All or nothing: every case runs and its golden is prepared first; a bad model or a skipped
 * case (bad input, exit 2) then leaves every golden file as it was. */
static int plan_all(bless_plan *plans, hx_case **cases, size_t n, const bless_opts *o,
                    size_t *n_refused, size_t *n_skipped, lm_err *err)
{
    hx_fingerprint fp;
    hx_fingerprint_detect(&fp);
    printf("kvdrift bless: platform %s\n", fp.short_text);
    int st = LM_OK;
    for (size_t i = 0; i < n && st == LM_OK; ++i) {
        hx_caserun *cr = NULL;
        st = hx_caserun_create(&cr, cases[i], &o->ro, err);
        cases[i] = NULL; /* owned by the run now, also on error */
        if (st != LM_OK)
            break;
        if (cr->skipped) {
            printf("case %s (%s): SKIP: %s\n", cr->c->name, cr->c->file, cr->skip_reason);
            (*n_skipped)++;
        } else {
            printf("case %s (%s): %zu configurations\n", cr->c->name, cr->c->file,
                   cr->report->n_configs);
            st = plan_case(&plans[i], cr, o->golden_dir, &fp, o->force, o->cmdline, err);
            *n_refused += plans[i].n_refused;
        }
        hx_caserun_free(cr);
        fflush(stdout);
    }
    return st;
}

int cmd_bless(int argc, char **argv)
{
    char cmdline[HX_COMMAND_LINE_MAX];
    hx_command_line(cmdline, sizeof cmdline, argc, argv); /* before getopt reorders argv */
    bless_opts o;
    int code = parse_options(&o, argc, argv);
    if (code >= 0)
        return code;
    o.cmdline = cmdline;
    lm_err err = {0};
    size_t n_cases = (size_t)(argc - optind), n_refused = 0, n_skipped = 0;
    hx_case **cases = calloc(n_cases, sizeof *cases);
    bless_plan *plans = calloc(n_cases, sizeof *plans);
    bool case_error = false;
    int st = cases && plans ? LM_OK : LM_FAIL(&err, LM_E_NOMEM, "out of memory");
    /* Every case file and golden path is validated before anything runs or is written. */
    if (st == LM_OK)
        st = hx_cli_load_cases(cases, argv + optind, n_cases, &case_error, &err);
    if (st == LM_OK)
        st = check_goldens(cases, n_cases, o.golden_dir, &err);
    if (st == LM_OK)
        st = plan_all(plans, cases, n_cases, &o, &n_refused, &n_skipped, &err);
    code = 0;
    if (st == LM_OK && n_skipped) {
        printf("nothing blessed\n");
        code = hx_cli_fail("bless", "%zu case(s) skipped: their model file does not exist; "
                           "nothing blessed", n_skipped);
    } else if (st == LM_OK && (st = write_goldens(plans, n_cases, &err)) == LM_OK) {
        for (size_t i = 0; i < n_cases; ++i) {
            const bless_plan *pl = &plans[i];
            printf("  %s: %zu configuration(s) blessed%s%s, %zu refused, %zu stale entries "
                   "removed\n", pl->case_name, pl->n_set, pl->n_set ? " into " : "",
                   pl->n_set ? pl->gpath : "", pl->n_refused, pl->n_pruned);
        }
        code = n_refused ? 1 : 0;
    }
    if (st != LM_OK)
        code = hx_cli_status("bless", st, case_error, &err);
    for (size_t i = 0; cases && i < n_cases; ++i)
        hx_case_free(cases[i]);
    for (size_t i = 0; plans && i < n_cases; ++i)
        hx_golden_free(plans[i].g);
    free(cases);
    free(plans);
    return code;
}
