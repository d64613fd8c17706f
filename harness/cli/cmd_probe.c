/* cmd_probe.c — `kvdrift probe`: an OpenAI-compatible server's top-k log-probabilities under
 * concurrency, prefix caching and repeats, judged against the reference (argv ->
 * hx_probe_run -> print). */
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "kvd_ref.h"
#include "kvd_util.h"
#include "model/config.h"
#include "run/probe.h"
#include "run/sweep.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift probe URL MODEL (-p TEXT | -f FILE | --tokens ID,...) [options]\n"
    "Sends the prompt to URL/v1/completions (an OpenAI-compatible server: llama.cpp's\n"
    "llama-server, llama-cpp-python's server, vLLM...) at temperature 0 with top-k\n"
    "log-probabilities (and the prompt's, where the server echoes them), as token ids where the\n"
    "server takes them, else as text (the server's tokens checked against kvdrift's), over the\n"
    "serving axes below; judges every reply against the MPFR reference of MODEL (the GGUF the\n"
    "server runs) from its top-k, and every reply against the baseline (concurrency 1, prefix\n"
    "cold, first repeat) bit for bit.\n\n"
    "  -p, --prompt TEXT     prompt text\n"
    "  -f, --file FILE       the prompt text read from FILE\n"
    "      --tokens ID,...   prompt as token ids\n"
    "      --special         parse control tokens written in TEXT as tokens\n"
    "  -n, --n-gen N         tokens generated per request (default 16)\n"
    "  -k, --top-k K         log-probabilities per position (default 5, at most 63)\n"
    "      --concurrency L   requests at once: the probe and N-1 filler requests of seeded\n"
    "                        lengths, started together (default 1; e.g. 1,2,8,32)\n"
    "      --prefix L        cold (after an unrelated request), warm (after the probe itself:\n"
    "                        a prefix-cache hit), shared:P (fillers share the prompt's first P\n"
    "                        tokens) (default cold)\n"
    "      --repeat K        each configuration K times (default 1)\n"
    "      --timeout S       seconds per request (default 120)\n"
    "      --timeout-total S seconds for every request of the probe together (default 1800)\n"
    "      --seed S          fillers' lengths and ids (default 1)\n"
    "      --allow-remote    allow a URL that is not this machine's loopback\n"
    "      --profile LIST    precision profiles to judge under (default f32,f16kv; as judge)\n"
    "      --prec BITS       reference precision (default 127)\n"
    "      --ensemble M      stochastic-rounding runs per profile, >= 8 (default 8)\n"
    "  -j, --jobs N          envelope runs side by side (default: the CPUs)\n"
    "      --cache DIR       reference/envelope cache (default as sweep)\n"
    "  -o, --output DIR      report folder (default reports/probe-<UTC timestamp>)\n"
    "  -q, --quiet           no progress lines on stderr\n"
    "  -h, --help            this text\n\n"
    "Top-k rows decide the argmax against the reference's, TIE_FLIP against FLIP, and DRIFT at\n"
    "the returned ids; NOISE holds at those ids only, and KL is a lower bound (the report says\n"
    "what a larger k would decide). A concurrency level at which every request is answered with\n"
    "the baseline's bits is called batch-invariant on that prompt.\n\n"
    "Prefix modes: a cold or shared probe is sent with cache_prompt false (llama-server then\n"
    "reuses no cached prefix), a warm one with cache_prompt true; servers without the field\n"
    "ignore it. Prompt log-probabilities come from an echo, or from vLLM's prompt_logprobs.\n"
    "Ctrl-C (SIGINT) or SIGTERM cancels the requests in flight; nothing is written.\n\n"
    "Writes DIR/report.json and DIR/report.md.\n"
    "exit codes: 0 every reply is explained by a profile, 1 one is not, 2 usage or input error\n"
    "(server down, refusing, slow, an HTTP error, a malformed reply, missing log-probabilities,\n"
    "another model or tokenizer, a remote URL without --allow-remote)\n";

enum { O_TOKENS = 256, O_SPECIAL, O_CONC, O_PREFIX, O_REPEAT, O_TIMEOUT, O_TOTAL, O_SEED,
       O_REMOTE, O_PROFILE, O_PREC, O_ENS, O_CACHE };

typedef struct probe_opts {
    const char *url, *model, *text, *tok_s, *outdir, *prof_s;
    bool special;
    hx_probe_params pp;
    const char *profiles[HX_JUDGE_MAX_PROFILES];
} probe_opts;

static int seconds(double *out, const char *opt, const char *arg)
{
    char *end;
    double v = strtod(arg, &end);
    if (*arg == '\0' || *end != '\0' || !(v > 0.0) || v > 86400.0)
        return hx_cli_fail("probe", "%s '%s': expected seconds in (0, 86400]", opt, arg);
    *out = v;
    return -1;
}

static int set_option(probe_opts *o, int c, const char *arg)
{
    lm_err err = {0};
    hx_probe_params *p = &o->pp;
    switch (c) {
    case 'p':
    case 'f': return hx_cli_prompt_option(&o->text, "probe", c, arg) == 0 ? -1 : 2;
    case O_TOKENS: o->tok_s = arg; return -1;
    case O_SPECIAL: o->special = true; return -1;
    case 'n':
        return lm_parse_u32z(arg, 1, 4096, &p->n_gen)
                   ? -1
                   : hx_cli_fail("probe", "-n '%s': expected an integer in 1..4096", arg);
    case 'k':
        return lm_parse_u32z(arg, 1, HX_TOPK_ROW_MAX - 1, &p->k)
                   ? -1
                   : hx_cli_fail("probe", "-k '%s': expected an integer in 1..%u", arg,
                                 HX_TOPK_ROW_MAX - 1);
    case O_CONC:
        return hx_probe_parse_concurrency(p->concurrency, &p->n_concurrency, arg, &err) == LM_OK
                   ? -1
                   : hx_cli_fail("probe", "%s", err.msg);
    case O_PREFIX:
        return hx_probe_parse_prefixes(p->prefixes, &p->n_prefixes, arg, &err) == LM_OK
                   ? -1
                   : hx_cli_fail("probe", "%s", err.msg);
    case O_REPEAT:
        return lm_parse_u32z(arg, 1, 100, &p->repeat)
                   ? -1
                   : hx_cli_fail("probe", "--repeat '%s': expected an integer in 1..100", arg);
    case O_TIMEOUT: return seconds(&p->timeout_s, "--timeout", arg);
    case O_TOTAL: return seconds(&p->overall_s, "--timeout-total", arg);
    case O_SEED:
        return lm_parse_seed(arg, &p->seed)
                   ? -1
                   : hx_cli_fail("probe", "--seed '%s': expected a non-negative integer", arg);
    case O_REMOTE: p->allow_remote = true; return -1;
    case O_PROFILE: o->prof_s = arg; return -1;
    case O_CACHE: return hx_cli_cache_option(&p->judge.cache_dir, "probe", arg) == 0 ? -1 : 2;
    case O_PREC:
        return hx_cli_setting("probe", &p->judge.precision, HX_SET_PRECISION, "--prec", arg) == 0
                   ? -1
                   : 2;
    case O_ENS:
        return lm_parse_u32z(arg, 8, 1024, &p->judge.ensemble)
                   ? -1
                   : hx_cli_fail("probe", "--ensemble '%s': expected an integer in 8..1024", arg);
    case 'j':
        return lm_parse_u32z(arg, 1, 64, &p->judge.jobs)
                   ? -1
                   : hx_cli_fail("probe", "-j '%s': expected an integer in 1..64", arg);
    case 'o': o->outdir = arg; return -1;
    case 'q': p->judge.quiet = true; return -1;
    default: return hx_cli_fail("probe", "option %d", c);
    }
}

/* --profile LIST (default f32,f16kv) into o->profiles. */
static int profiles(probe_opts *o)
{
    lm_err err = {0};
    if (hx_profile_names_parse(o->profiles, &o->pp.judge.n_profiles, HX_JUDGE_MAX_PROFILES,
                               "--profile", o->prof_s ? o->prof_s : "f32,f16kv", &err) != LM_OK)
        return hx_cli_fail("probe", "%s", err.msg);
    o->pp.judge.profiles = o->profiles;
    return -1;
}

static int parse_options(probe_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'},   {"file", required_argument, NULL, 'f'},
        {"tokens", required_argument, NULL, O_TOKENS}, {"special", no_argument, NULL, O_SPECIAL},
        {"n-gen", required_argument, NULL, 'n'},    {"top-k", required_argument, NULL, 'k'},
        {"concurrency", required_argument, NULL, O_CONC},
        {"prefix", required_argument, NULL, O_PREFIX},
        {"repeat", required_argument, NULL, O_REPEAT},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"timeout-total", required_argument, NULL, O_TOTAL},
        {"seed", required_argument, NULL, O_SEED}, {"allow-remote", no_argument, NULL, O_REMOTE},
        {"profile", required_argument, NULL, O_PROFILE}, {"prec", required_argument, NULL, O_PREC},
        {"ensemble", required_argument, NULL, O_ENS}, {"cache", required_argument, NULL, O_CACHE},
        {"jobs", required_argument, NULL, 'j'},     {"output", required_argument, NULL, 'o'},
        {"quiet", no_argument, NULL, 'q'},          {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (probe_opts){.pp = {.n_gen = 16, .k = 5, .repeat = 1, .timeout_s = 120.0,
                             .overall_s = 1800.0, .seed = 1,
                             .judge = {.precision = REF_DEFAULT_PREC,
                                       .ensemble = HX_SWEEP_DEFAULT_ENSEMBLE,
                                       .jobs = hx_threads_all(), .log = hx_cli_log,
                                       .log_user = "probe"}}};
    optind = 1;
    opterr = 0;
    hx_cli_optstate st = {0};
    for (int c, rc; (c = hx_cli_getopt(&st, argc, argv, ":p:f:n:k:o:j:qh", opts, NULL, NULL)) != -1;) {
        if (c == 'h') {
            fputs(usage_text, stdout);
            return 0;
        }
        if (c == ':' || c == '?')
            return hx_cli_bad_option(&st, "probe", c, argv);
        if ((rc = set_option(o, c, optarg)) >= 0)
            return rc;
    }
    if (optind + 2 != argc)
        return hx_cli_fail("probe", "expected URL and MODEL (try --help)");
    if ((o->text == NULL) == (o->tok_s == NULL))
        return hx_cli_fail("probe", "give exactly one of -p TEXT, -f FILE or --tokens ID,... "
                           "(try --help)");
    o->url = argv[optind];
    o->model = argv[optind + 1];
    if (o->pp.n_concurrency == 0)
        o->pp.concurrency[o->pp.n_concurrency++] = 1;
    if (o->pp.n_prefixes == 0)
        o->pp.prefixes[o->pp.n_prefixes++] = (hx_probe_prefix){HX_PREFIX_COLD, 0};
    return profiles(o);
}

static void print_summary(const hx_report *r, const char *wrote)
{
    const hx_probe_report *p = &r->probe;
    printf("kvdrift probe %s: %s; models %s%s%s\n  %s, top-%u; reference %u bits on %s; "
           "envelope %u runs per profile\n\n", p->url, p->reply_model,
           p->server_models[0] ? p->server_models : "-", p->server_props[0] ? "; " : "",
           p->server_props, p->transport, (unsigned)p->k, (unsigned)r->precision, r->model,
           (unsigned)r->envelope_members);
    printf("%-28s %-10s %5s %6s %9s %11s %8s %8s %9s  %s\n", "request", "bits", "rows",
           "first", "max diff", "text", "lat s", "batch s", "batch t/s", "class");
    for (size_t i = 0; i < p->n_rows; ++i) {
        const hx_probe_report_row *w = &p->rows[i];
        hx_probe_cells c;
        hx_probe_row_cells(&c, w);
        printf("%-28s %-10s %5u %6s %9.3g %11s %8.3f %8.3f %9.1f  %s\n", w->config,
               w->is_baseline ? "baseline" : w->bits_same ? "same" : "DIFFER",
               (unsigned)w->n_rows_differ, c.first, w->max_abs_diff, c.text, w->latency_s,
               w->batch_s, c.tok_s, hx_class_name(w->cls));
    }
    char inv[512];
    hx_probe_invariance_line(inv, sizeof inv, p);
    if (inv[0])
        printf("\n%s\n", inv);
    printf("\n");
    hx_report_print_table(stdout, r);
    for (size_t i = 0; i < r->n_dumps && i < 1; ++i) {
        char note[1024];
        hx_topk_note(note, sizeof note, &r->dumps[i].topk);
        printf("\ntop-k: %s\n", note);
    }
    printf("verdict %s\nwrote %s\n", hx_report_exit_code(r, false) ? "FAIL" : "pass", wrote);
}

static const char *const formats[] = {"md", "json", NULL};

int cmd_probe(int argc, char **argv)
{
    probe_opts o;
    int rc = parse_options(&o, argc, argv);
    if (rc >= 0)
        return rc;
    lm_err err = {0};
    lm_model *m = NULL;
    ref_model *rm = NULL; /* the reference's own view of the same file */
    int32_t *prompt = NULL;
    uint32_t n_prompt = 0;
    hx_report *rep = NULL;
    char dir[4096], mpath[4096], wrote[8400];
    int st = hx_cli_report_dir(dir, sizeof dir, o.outdir, "probe", &err);
    if (st == LM_OK)
        st = hx_report_check_dir(dir, formats, &err);
    if (st == LM_OK)
        st = hx_cli_model_load(&m, &rm, mpath, sizeof mpath, o.model, o.pp.judge.cache_dir, "probe",
                               NULL, &err);
    if (st == LM_OK)
        st = hx_cli_prompt_ids(&prompt, &n_prompt, m, o.model, o.text, o.tok_s, o.special, &err);
    if (st == LM_OK) {
        o.pp.url = o.url;
        o.pp.prompt_text = o.text;
        o.pp.judge.model = m;
        o.pp.judge.ref = rm;
        o.pp.judge.model_label = o.model;
        o.pp.judge.prompt = prompt;
        o.pp.judge.n_prompt = n_prompt;
        st = hx_probe_run(&rep, &o.pp, &err);
    }
    if (st == LM_OK) {
        hx_command_line(rep->command_line, sizeof rep->command_line, argc, argv);
        st = hx_report_write_dir(wrote, sizeof wrote, dir, rep, formats, &err);
    }
    if (st == LM_OK)
        print_summary(rep, wrote);
    else
        fprintf(stderr, "kvdrift probe: %s\n", err.msg);
    int code = st != LM_OK ? lm_status_exit_code(st) : hx_report_exit_code(rep, false);
    hx_report_free(rep);
    free(prompt);
    ref_model_free(rm);
    lm_model_free(m);
    return code;
}
