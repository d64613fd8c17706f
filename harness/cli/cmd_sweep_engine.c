/* cmd_sweep_engine.c — `kvdrift sweep MODEL --engine ADAPTER --axis KEY=V1,V2 ...`: another
 * engine's knobs as sweep axes (argv -> describe -> plan -> hx_adapter_sweep_run -> the same
 * table and report files as a sweep of kvdrift's engine). */
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "fs.h"
#include "judge/model_check.h"
#include "kvd_profile.h"
#include "kvd_ref.h"
#include "kvd_util.h"
#include "model/adapter.h"
#include "model/report.h"
#include "plan/adapter_resolve.h"
#include "run/adapter_sweep.h"
#include "run/sweep.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift sweep MODEL (-p TEXT | -f FILE | --tokens ID,...) --engine ADAPTER\n"
    "                     [--axis KEY=V1,V2,...]... [options]\n"
    "Sweeps another engine's knobs: the adapter (adapters/, docs/ADAPTERS.md; see `kvdrift\n"
    "adapter ADAPTER --describe`) runs the prompt once per configuration (the cross product of\n"
    "the axes, other knobs at their default; the baseline, every knob at its default, first),\n"
    "each in its own process group under a time limit, writing a dump; kvdrift checks each dump\n"
    "and classifies it against the MPFR reference and the envelope of the profile its setting\n"
    "implies, and bit for bit against the baseline, as a sweep of its own engine.\n\n"
    "  -p, --prompt TEXT       prompt text (kvdrift's tokenizer; the adapter gets the ids)\n"
    "  -f, --file FILE         the prompt text read from FILE\n"
    "      --tokens ID,...     prompt as token ids\n"
    "      --special           parse control tokens written in TEXT as tokens\n"
    "      --engine ADAPTER    a path (with a '/') or a shipped adapter's name (llamacpp,\n"
    "                          mlx, transformers)\n"
    "      --axis KEY=V1,...   a knob and values from its declared list (repeatable); a value\n"
    "                          the adapter does not declare is refused before anything runs\n"
    "      --profile P         judge every configuration under P instead of the profile its\n"
    "                          setting implies\n"
    "      --timeout S         seconds per adapter run before its process group is killed\n"
    "                          (default 600)\n"
    "  -n, --n-gen N           greedy tokens per configuration (default 32)\n"
    "      --prec BITS         reference precision (default 127)\n"
    "      --ensemble M        stochastic-rounding runs behind each envelope, >= 8 (default 8)\n"
    "      --seed S            first SR seed\n"
    "      --cache DIR         reference/envelope cache and the adapters' scratch folders\n"
    "  -j, --jobs N            naive-sr envelope runs side by side (log-probability dumps)\n"
    "  -o, --output DIR        report folder (default reports/<model>-<UTC timestamp>)\n"
    "  -q, --quiet             no progress lines on stderr\n"
    "  -v, --verbose           all table columns\n"
    "      --format F          table (default), csv, tsv, jsonl or md\n"
    "  -h, --help              this text\n\n"
    "A configuration whose adapter hangs, crashes, exits 0 without a dump, writes a malformed\n"
    "one or anything on stdout, or computes another model (its first generated token leaves\n"
    "the reference's, its argmax mostly disagrees and its error is far beyond every envelope:\n"
    "\"not the same model\") is an ERROR row with one line saying why; the others are judged.\n\n"
    "Writes DIR/report.json, report.md and report.html.\n"
    "exit codes: 0 every configuration passes, 1 one fails (DRIFT, FLIP, NONFINITE or ERROR),\n"
    "2 usage or input error, or no configuration could run\n";

#define MAX_AXES HX_ADAPTER_MAX_KNOBS

enum { O_TOKENS = 256, O_ENGINE, O_AXIS, O_PROFILE, O_TIMEOUT, O_PREC, O_ENS, O_SEED, O_CACHE,
       O_SPECIAL, O_FORMAT };

typedef struct engine_opts {
    const char *model, *text, *tok_s, *engine, *outdir, *axes[MAX_AXES];
    size_t n_axes;
    bool special, verbose;
    hx_table_fmt fmt;
    hx_adapter_sweep_params sp;
} engine_opts;

static int set_option(engine_opts *o, int c, const char *arg)
{
    uint32_t t;
    switch (c) {
    case 'p':
    case 'f': return hx_cli_prompt_option(&o->text, "sweep", c, arg) == 0 ? -1 : 2;
    case O_TOKENS: o->tok_s = arg; return -1;
    case O_SPECIAL: o->special = true; return -1;
    case O_ENGINE: o->engine = arg; return -1;
    case O_AXIS:
        if (o->n_axes == MAX_AXES)
            return hx_cli_fail("sweep", "--axis: at most %d axes", MAX_AXES);
        o->axes[o->n_axes++] = arg;
        return -1;
    case O_PROFILE:
        if (lm_profile_find(arg) == NULL || arg[0] == '\0')
            return hx_cli_fail("sweep", "--profile '%s': expected one of %s", arg,
                               lm_profile_expected());
        o->sp.profile = lm_profile_find(arg)->name;
        return -1;
    case O_TIMEOUT:
        if (!lm_parse_u32z(arg, 1, 86400, &t))
            return hx_cli_fail("sweep", "--timeout '%s': expected seconds in 1..86400", arg);
        o->sp.timeout_s = t;
        return -1;
    case 'n':
        return hx_cli_setting("sweep", &o->sp.n_gen, HX_SET_N_GEN, "-n", arg) == 0 ? -1 : 2;
    case O_PREC:
        return hx_cli_setting("sweep", &o->sp.precision, HX_SET_PRECISION, "--prec", arg) == 0
                   ? -1 : 2;
    case O_ENS:
        return lm_parse_u32z(arg, 8, 1024, &o->sp.ensemble)
                   ? -1 : hx_cli_fail("sweep", "--ensemble '%s': expected an integer in 8..1024",
                                      arg);
    case O_SEED:
        o->sp.sr_seed_set = true;
        return lm_parse_seed(arg, &o->sp.sr_seed)
                   ? -1 : hx_cli_fail("sweep", "--seed '%s': expected a non-negative integer", arg);
    case O_CACHE: return hx_cli_cache_option(&o->sp.cache_dir, "sweep", arg) == 0 ? -1 : 2;
    case 'j':
        return lm_parse_u32z(arg, 1, 64, &o->sp.jobs)
                   ? -1 : hx_cli_fail("sweep", "-j '%s': expected an integer in 1..64", arg);
    case 'o': o->outdir = arg; return -1;
    case 'q': o->sp.quiet = true; return -1;
    case 'v': o->verbose = true; return -1;
    case O_FORMAT:
        return hx_table_fmt_parse(&o->fmt, arg)
                   ? -1 : hx_cli_fail("sweep", "--format '%s': expected " HX_TABLE_FORMATS, arg);
    default: return hx_cli_fail("sweep", "option %d", c);
    }
}

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(engine_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'},     {"file", required_argument, NULL, 'f'},
        {"tokens", required_argument, NULL, O_TOKENS}, {"special", no_argument, NULL, O_SPECIAL},
        {"engine", required_argument, NULL, O_ENGINE}, {"axis", required_argument, NULL, O_AXIS},
        {"profile", required_argument, NULL, O_PROFILE},
        {"timeout", required_argument, NULL, O_TIMEOUT},
        {"n-gen", required_argument, NULL, 'n'},      {"prec", required_argument, NULL, O_PREC},
        {"ensemble", required_argument, NULL, O_ENS}, {"seed", required_argument, NULL, O_SEED},
        {"cache", required_argument, NULL, O_CACHE},  {"jobs", required_argument, NULL, 'j'},
        {"output", required_argument, NULL, 'o'},     {"quiet", no_argument, NULL, 'q'},
        {"verbose", no_argument, NULL, 'v'},          {"format", required_argument, NULL, O_FORMAT},
        {"help", no_argument, NULL, 'h'},             {NULL, 0, NULL, 0},
    };
    *o = (engine_opts){.fmt = HX_FMT_TABLE,
                       .sp = {.n_gen = HX_CLI_DEFAULT_N_GEN, .precision = REF_DEFAULT_PREC,
                              .ensemble = HX_SWEEP_DEFAULT_ENSEMBLE, .jobs = hx_threads_all(),
                              .log = hx_cli_log, .log_user = "sweep"}};
    optind = 1;
    opterr = 0;
    static const int repeatable[] = {O_AXIS, 0};
    hx_cli_optstate st = {0};
    for (int c, rc; (c = hx_cli_getopt(&st, argc, argv, ":p:f:n:j:o:qvh", opts, NULL,
                                       repeatable)) != -1;) {
        if (c == 'h') {
            fputs(usage_text, stdout);
            return 0;
        }
        if (c == ':' || c == '?')
            return hx_cli_bad_option(&st, "sweep", c, argv);
        if ((rc = set_option(o, c, optarg)) >= 0)
            return rc;
    }
    if (optind + 1 != argc)
        return hx_cli_fail("sweep", "expected exactly one MODEL argument (try --engine X --help)");
    if ((o->text == NULL) == (o->tok_s == NULL))
        return hx_cli_fail("sweep", "give exactly one of -p TEXT or --tokens ID,... (try --help)");
    o->model = argv[optind];
    return -1;
}

/* Adapter, description, configurations (a value it does not declare is refused here, before
 * anything runs), model, prompt and the report folder. */
typedef struct engine_inputs {
    char adapter[4096], model_path[4096], label[256], dir[4096];
    hx_adapter_desc desc;
    hx_adapter_config *configs;
    size_t n_configs;
    lm_model *m;
    ref_model *r;      /* the reference's own view of the same file */
    int32_t *prompt;
    uint32_t n_prompt;
} engine_inputs;

static int load_inputs(engine_inputs *in, const engine_opts *o, lm_err *err)
{
    int st = hx_adapter_resolve(in->adapter, sizeof in->adapter, o->engine, err);
    if (st == LM_OK)
        st = hx_adapter_describe(&in->desc, in->adapter, err);
    if (st == LM_OK)
        st = hx_adapter_plan(&in->configs, &in->n_configs, &in->desc, o->axes, o->n_axes, err);
    if (st == LM_OK)
        st = hx_cli_model_resolve(in->model_path, sizeof in->model_path, in->label,
                                  sizeof in->label, o->model, o->sp.cache_dir, "sweep", err);
    if (st == LM_OK)
        st = hx_models_open(&in->m, &in->r, in->model_path, err);
    if (st == LM_OK)
        st = hx_cli_prompt_ids(&in->prompt, &in->n_prompt, in->m, in->model_path, o->text,
                               o->tok_s, o->special, err);
    if (st == LM_OK)
        st = hx_cli_report_dir(in->dir, sizeof in->dir, o->outdir, in->label, err);
    if (st == LM_OK)
        st = hx_report_check_dir(in->dir, NULL, err);
    return st;
}

static void print_result(const hx_report *r, const engine_opts *o, const engine_inputs *in,
                         const char *wrote)
{
    FILE *chat = o->fmt == HX_FMT_TABLE ? stdout : stderr;
    fprintf(chat, "kvdrift sweep %s --engine %s: %u prompt tokens, %u generated; %s\n"
            "reference %u bits; envelope: %u SR runs x safety %.0f per profile; baseline %s\n\n",
            o->model, in->desc.adapter, (unsigned)r->n_prompt, (unsigned)o->sp.n_gen,
            in->desc.engine_version, (unsigned)r->precision, (unsigned)r->envelope_members,
            r->envelope_safety, in->desc.adapter);
    hx_report_print_table_fmt(stdout, r, o->fmt, o->verbose);
    fflush(stdout);
    for (size_t i = 0; i < r->n_configs; ++i)
        if (r->configs[i].cls == HX_ERROR)
            fprintf(chat, "%s: ERROR: %s\n", r->configs[i].config, r->configs[i].reason);
    for (size_t i = 0; i < r->n_dumps; ++i) {
        const hx_dump_report *d = &r->dumps[i];
        const hx_config_report *c = &r->configs[d->first_config];
        if (c->cls == HX_ERROR)
            continue;
        char dep[400];
        hx_dump_departure_text(dep, sizeof dep, d, r->n_prompt);
        fprintf(chat, "%s: profile %s, %s; KL mean %.3g max %.3g; greedy %s", d->name,
                d->explained_by[0] ? d->explained_by : "-",
                d->explained_by[0] ? "explained" : "NOT explained", d->kl.mean, d->kl.max, dep);
        if (d->first_divergent >= 0 && !d->departed_beyond)
            fprintf(chat, " (%s there)", hx_class_name(c->divergent_cls));
        char kv[320];
        hx_kv_first_text(kv, sizeof kv, &c->kv_first);
        if (kv[0])
            fprintf(chat, "; %s", kv);
        hx_hidden_first_text(kv, sizeof kv, &c->hidden_first);
        if (kv[0])
            fprintf(chat, "; %s", kv);
        fprintf(chat, "\n");
    }
    fprintf(chat, "verdict %s\nwrote %s\n", hx_report_exit_code(r, false) ? "FAIL" : "pass",
            wrote);
}

int cmd_sweep_engine(int argc, char **argv)
{
    char cmdline[HX_COMMAND_LINE_MAX];
    hx_command_line(cmdline, sizeof cmdline, argc, argv);
    engine_opts o;
    int code = parse_options(&o, argc, argv);
    if (code >= 0)
        return code;
    if (o.engine == NULL)
        return hx_cli_fail("sweep", "--engine ADAPTER is required here");
    lm_err err = {0};
    engine_inputs in = {0};
    hx_adapter_sweep_result *res = NULL;
    char wrote[4200 * 2];
    int st = load_inputs(&in, &o, &err);
    if (st == LM_OK) {
        o.sp.adapter_path = in.adapter;
        o.sp.desc = &in.desc;
        o.sp.configs = in.configs;
        o.sp.n_configs = in.n_configs;
        o.sp.model = in.m;
        o.sp.ref = in.r;
        o.sp.model_path = in.model_path;
        o.sp.model_label = o.model;
        o.sp.prompt = in.prompt;
        o.sp.n_prompt = in.n_prompt;
        st = hx_adapter_sweep_run(&res, &o.sp, &err);
    }
    if (st == LM_OK) {
        memcpy(res->report->command_line, cmdline, sizeof cmdline);
        st = hx_report_write_dir(wrote, sizeof wrote, in.dir, res->report, NULL, &err);
    }
    if (st == LM_OK)
        print_result(res->report, &o, &in, wrote);
    if (st != LM_OK)
        fprintf(stderr, "kvdrift sweep: %s\n", err.msg);
    code = st != LM_OK ? lm_status_exit_code(st) : hx_report_exit_code(res->report, false);
    hx_adapter_sweep_result_free(res);
    free(in.configs);
    free(in.prompt);
    lm_model_free(in.m);
    ref_model_free(in.r);
    return code;
}
