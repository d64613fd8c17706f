/* cmd_bless.c — `kvdrift bless`: runs each case and records its configurations' capture hashes
 * (with a top-5 summary) as the goldens of this platform, atomically. */
#include "commands.h"

#include "caserun.h"
#include "cli_util.h"
#include "classify.h"
#include "golden.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift bless CASE... [--golden-dir DIR] [--force] [options]\n"
    "Runs every case file (its sweep, reference and envelope, as check does) and writes the\n"
    "XXH3-128 of each configuration's canonical capture, with the top-5 logits at the last\n"
    "prompt position, into GOLDEN-DIR/<case name>.json for this platform fingerprint: this\n"
    "platform's entries are replaced, other platforms' kept; the file is replaced atomically.\n"
    "A configuration classified DRIFT, FLIP or NONFINITE is refused (a golden must never\n"
    "enshrine a defect) unless --force; the case's other configurations are still blessed.\n\n"
    "      --golden-dir DIR  golden files (default " HX_GOLDEN_DIR ")\n"
    "      --force           bless failing configurations too\n"
    "      --cache DIR       reference/envelope/synthetic-model cache (default $KVDRIFT_CACHE\n"
    "                        or ~/.cache/kvdrift)\n"
    "  -j, --jobs N          engine runs in parallel (default 1)\n"
    "  -q, --quiet           no progress lines\n"
    "  -h, --help            this text\n\n"
    "exit codes: 0 every configuration blessed, 1 one was refused, 2 usage or input error\n"
    "(bad case file, or a model file that does not exist: nothing to bless)\n";

/* Blesses one run case into its golden file; *n_refused counts refused configurations. */
static int bless_case(const hx_caserun *cr, const char *golden_dir, const hx_fingerprint *fp,
                      bool force, size_t *n_refused, lm_err *err)
{
    char gpath[4096], dir[4096];
    int rc = hx_caserun_golden_path(gpath, sizeof gpath, golden_dir, cr->c->name, err);
    if (rc != LM_OK)
        return rc;
    snprintf(dir, sizeof dir, "%s", golden_dir && *golden_dir ? golden_dir : HX_GOLDEN_DIR);
    if ((rc = hx_mkdir_p(dir, err)) != LM_OK)
        return rc;
    hx_golden *g = NULL;
    if ((rc = hx_golden_load(&g, gpath, true, err)) != LM_OK)
        return rc;
    const hx_report *r = cr->report;
    size_t n_set = 0, refused = 0;
    for (size_t i = 0; i < r->n_configs && rc == LM_OK; ++i) {
        const hx_config_report *c = &r->configs[i];
        if (hx_class_fails(c->cls) && !force) {
            printf("  REFUSED %-28s %s: %s (a golden must never enshrine a defect; --force "
                   "blesses it anyway)\n", c->config, hx_class_name(c->cls), c->reason);
            refused++;
            continue;
        }
        hx_golden_entry e;
        rc = hx_caserun_entry(&e, cr, i, err);
        if (rc == LM_OK)
            rc = hx_golden_set(g, r->case_name, c->config, fp, &e, err);
        if (rc == LM_OK) {
            n_set++;
            printf("  %-28s %-9s %s%s\n", c->config, hx_class_name(c->cls), e.hash_hex,
                   hx_class_fails(c->cls) ? "  (forced)" : "");
        }
    }
    if (rc == LM_OK && n_set > 0)
        rc = hx_golden_save(g, gpath, err);
    if (rc == LM_OK)
        printf("  %s: %zu configuration(s) blessed%s%s for platform %s, %zu refused\n", r->case_name,
               n_set, n_set ? " into " : "", n_set ? gpath : "", fp->id, refused);
    hx_golden_free(g);
    *n_refused += refused;
    return rc;
}

int cmd_bless(int argc, char **argv)
{
    enum { O_GOLDEN = 256, O_CACHE, O_FORCE };
    static const struct option opts[] = {
        {"golden-dir", required_argument, NULL, O_GOLDEN}, {"cache", required_argument, NULL, O_CACHE},
        {"force", no_argument, NULL, O_FORCE},             {"jobs", required_argument, NULL, 'j'},
        {"quiet", no_argument, NULL, 'q'},                 {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    const char *golden_dir = NULL;
    bool force = false;
    hx_caserun_opts ro = {0};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":j:qh", opts, NULL)) != -1) {
        switch (o) {
        case O_GOLDEN: golden_dir = optarg; break;
        case O_CACHE: ro.cache_dir = optarg; break;
        case O_FORCE: force = true; break;
        case 'q': ro.quiet = true; break;
        case 'j':
            if (!hx_cli_parse_u32(&ro.jobs, optarg, 1, 256))
                return hx_cli_fail("bless", "--jobs '%s': expected an integer in 1..256", optarg);
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return hx_cli_bad_option("bless", o, argv); /* ':' or unknown */
        }
    }
    if (optind >= argc)
        return hx_cli_fail("bless", "no CASE files given (try --help)");

    size_t n_cases = (size_t)(argc - optind);
    hx_case **cases = calloc(n_cases, sizeof *cases);
    lm_err err = {0};
    int st = LM_OK, code = 0;
    bool case_error = false;
    if (cases == NULL) {
        st = LM_FAIL(&err, LM_E_NOMEM, "out of memory");
        goto done;
    }
    /* Every case file is validated before anything runs or is written. */
    if ((st = hx_cli_load_cases(cases, argv + optind, n_cases, &case_error, &err)) != LM_OK)
        goto done;

    hx_fingerprint fp;
    hx_fingerprint_detect(&fp);
    printf("kvdrift bless: platform %s\n", fp.short_text);
    size_t n_refused = 0, n_skipped = 0;
    for (size_t i = 0; i < n_cases && st == LM_OK; ++i) {
        hx_caserun *cr = NULL;
        st = hx_caserun_create(&cr, cases[i], &ro, &err);
        cases[i] = NULL; /* owned by the run now, also on error */
        if (st != LM_OK)
            break;
        if (cr->skipped) {
            printf("case %s (%s): SKIP: %s; nothing blessed\n", cr->c->name, cr->c->file,
                   cr->skip_reason);
            n_skipped++;
        } else {
            printf("case %s (%s): %zu configurations\n", cr->c->name, cr->c->file,
                   cr->report->n_configs);
            st = bless_case(cr, golden_dir, &fp, force, &n_refused, &err);
        }
        hx_caserun_free(cr);
        fflush(stdout);
    }
    if (st != LM_OK)
        goto done;
    code = n_skipped ? 2 : n_refused ? 1 : 0;
    if (n_skipped)
        fprintf(stderr, "kvdrift bless: %zu case(s) skipped: their model file does not exist\n",
                n_skipped);
done:
    if (st != LM_OK)
        code = hx_cli_status("bless", st, case_error, &err);
    for (size_t i = 0; cases && i < n_cases; ++i)
        hx_case_free(cases[i]);
    free(cases);
    return code;
}
