/* cmd_sweep.c — `kvdrift sweep`: every configuration of the axes (steps x backends x threads)
 * run, compared with its baseline, the MPFR reference and the measured noise envelope, shown as
 * one table and written as report.json + report.md. The work itself is hx_sweep_run_all. */
#include "cli/commands.h"
#include "kvd_util.h"

#include "plan/case.h"
#include "cli/cli_progress.h"
#include "cli/cli_util.h"
#include "judge/model_check.h"
#include "model/config.h"
#include "fs.h"
#include "kvd_engine.h"
#include "kvd_ref.h"
#include "model/report.h"
#include "run/sweep.h"
#include "plan/synth.h"
#include "run/speculative_run.h"
#include "run/block_sweep.h"
#include "run/speculative_sweep.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static const char usage_text[] =
    "usage: kvdrift sweep MODEL (-p TEXT | --tokens ID,...) [options]\n"
    "Runs every configuration of the sweep axes, generates N greedy tokens with each, evaluates\n"
    "each teacher-forced on one common path, and classifies it against its baseline (same\n"
    "backend and threads, step=full), the MPFR reference and a measured noise envelope.\n\n"
    "MODEL is a GGUF path or synth:PRESET[:seed=N] (a synthetic model, written into the cache\n"
    "folder on first use; presets as in `kvdrift synth --help`). Memory (file, float32\n"
    "weights, KV cache, scratch, reference) is predicted before the model is loaded: what does\n"
    "not fit is one line with the figures, exit 2; the verdict line and report.json\n"
    "(peak_rss_bytes) give the process's peak resident memory.\n\n"
    "  -p, --prompt TEXT       prompt text (BOS added when the vocabulary asks for it)\n"
    "  -f, --file FILE         the prompt text read from FILE (its bytes as they are)\n"
    "      --tokens ID,...     prompt as token ids instead of text\n"
    "      --special           parse control tokens written in TEXT (\"<|im_start|>\") as tokens\n"
    "      --steps LIST        prefill chunk sizes, integers or full (default "
    HX_AXES_DEFAULT_STEPS ")\n"
    "      --backends LIST     naive,blas,blis,det (default " HX_AXES_DEFAULT_BACKENDS "; blis:\n"
    "                          BLIS, where libblis.so.4 is installed); a BLAS library whose\n"
    "                          kernels are older than the CPU gets a one-line warning\n"
    "      --threads LIST      thread counts and all (every core, at least 2), e.g. 1,2\n"
    "                          (default " HX_AXES_DEFAULT_THREADS "; naive runs one thread and\n"
    "                          gets no all rows)\n"
    "      --attn LIST         attention implementations: default (= dense, not written in\n"
    "                          config strings), dense, stream (default " HX_AXES_DEFAULT_ATTN ")\n"
    "      --rot LIST          rotating KV cache axis: none and MAX:KEEP values, e.g. none,8:2\n"
    "                          (config strings say rot=MAX/KEEP; MLX's policy, chunk-dependent),\n"
    "                          MAX:KEEP:window the exact-window policy (chunk-invariant: every\n"
    "                          query sees KEEP + its last MAX-KEEP positions). Its class is against the\n"
    "                          reference with its own schedule; the semantic column compares\n"
    "                          that reference with the same cache in one chunk\n"
    "      --profile LIST      f32 (default),f16kv,bf16,tf32,q8act,f16act\n";

/* The serving-stack axes (printed after usage_text). */
static const char usage_serving[] =
    "      --prefix LIST       prefix-cache axis: none, P and P:S values, e.g. none,16,16:4: the\n"
    "                          first P prompt tokens computed by an earlier request (chunked by\n"
    "                          S, default the configuration's step) whose K/V rows are reused,\n"
    "                          then the rest (config key prefix=P/S; plain cache only; off by\n"
    "                          default)\n"
    "      --batch LIST        batch-composition axis: 1 (alone), B and B:decode values, e.g.\n"
    "                          1,4,4:decode: every forward call also holds rows of B-1 other\n"
    "                          sequences (seeded prompts) prefilling alongside, or decoding one\n"
    "                          row each (config key batch=B[/decode]; off by default)\n"
    "      --tp LIST           tensor-parallel axis: 1, N, N:tree and N:fixed values, e.g.\n"
    "                          1,2,4,4:tree: Q/K/V/gate/up split by outputs over N shards, O and\n"
    "                          down by their reduction, partial sums combined in NCCL's ring\n"
    "                          order (tree: pairwise; fixed: a tree fixed by k alone, det's\n"
    "                          bits the same at every N, 1:fixed included) (config key\n"
    "                          tp=N[/tree|/fixed]; off by default)\n";

static const char usage_schedule[] =
    "      --turn D            schedule axis: beside each configuration with multi-token chunks,\n"
    "                          the same one fed as two turns (part of the prompt, D decode steps,\n"
    "                          the rest as a second multi-token chunk; config key turn=D);\n"
    "                          0 = none (default %u)\n"
    "  -n, --n-gen N           greedy tokens per configuration (default 32)\n"
    "      --prec BITS         reference precision (default 127)\n"
    "      --ensemble M        stochastic-rounding runs behind the envelope, >= 8 (default 8)\n"
    "      --seed S            first SR seed; member i uses S+i (default 0x6b76647269667431)\n"
    "      --envelope W        SR members: reference (default) or engine\n"
    "      --engine ADAPTER    sweep another engine's knobs instead (--engine ADAPTER --help)\n"
    "      --cache DIR         reference/envelope/synthetic-model cache (default $KVDRIFT_CACHE,\n"
    "                          else $XDG_CACHE_HOME/kvdrift, else ~/.cache/kvdrift)\n"
    "  -j, --jobs N            engine runs in parallel (default 1; speeds are then shared-CPU\n"
    "                          numbers, the classes never change)\n"
    "";
static const char usage_options[] =
    "  -o, --output DIR        report folder (default reports/<model>-<UTC timestamp>)\n"
    "  -q, --quiet             no progress lines on stderr\n"
    "  -v, --verbose           all 17 table columns (default: config, class, err/E, ULP@max,\n"
    "                          top1, div@, decode tok/s)\n"
    "      --format F          table (default; class coloured on a terminal, NO_COLOR\n"
    "                          honoured), csv, tsv, jsonl or md: the table alone on stdout\n"
    "  -h, --help              this text\n\n"
    "Every list option is a sweep axis: the configurations are their cross product\n"
    "(profile x rot x backends x threads x attn x steps, steps fastest, profile slowest).\n\n"
    "How it works: the teacher path is the reference's own greedy path (naive:step=full's greedy\n"
    "continuation, repaired wherever the reference's argmax disagrees). The reference is\n"
    "computed once on prompt + path and cached. The envelope E is\n"
    "2 x the largest deviation from the mean of M seeded stochastic-rounding float32 runs of\n"
    "the reference's model, per tensor and position,\n"
    "so a bias every run shares (a defect in the engine) never widens it; it is cached beside\n"
    "the reference.\n\n"
    "Classes (a configuration's class is its worst over every layer's K and V after prefill,\n"
    "every teacher-forced logits row and its greedy sequence): EXACT, NOISE, TIE_FLIP, SEMANTIC\n"
    "pass; DRIFT, FLIP, NONFINITE, SEQ_MISMATCH fail; defined in DESIGN.md (docs/ in the\n"
    "source, share/doc/kvdrift/ installed).\n\n"
    "Columns: div = first generated index where the greedy tokens leave the path; max abs, ulp,\n"
    "NMSE, KL vs the reference; top1 = agreement with the reference's argmax; margin = smallest\n"
    "top-2 margin of the reference; E = largest logits envelope; err/E = worst ratio; sig =\n"
    "significant digits; prefill/decode tok/s; peak MiB = KV cache + scratch.\n\n"
    "Writes DIR/report.json (REPORT-SCHEMA.md), report.md, report.html.\n"
    "exit codes: 0 no configuration fails, 1 one fails (DRIFT, FLIP or NONFINITE, or a --spec\n"
    "row SEQ_MISMATCH), or the engine's weights or hyperparameters differ from the reference's\n"
    "own reading of the file (the sweep stops, naming the tensor or key), 2 usage or input error\n";

/* The speculative-decoding check after the sweep (speculative_sweep.h), into the report. */
static int sweep_spec(const hx_spec_opts *so, const lm_model *m, const int32_t *prompt,
                      uint32_t n_prompt, const hx_sweep_params *sp, hx_sweep_result *res,
                      const char *cache, lm_err *err)
{
    char dpath[4096], dlabel[256];
    uint32_t layers;
    const bool self = so->draft == NULL || hx_draft_self_layers(so->draft, &layers);
    int st = self ? LM_OK
                  : hx_cli_model_resolve(dpath, sizeof dpath, dlabel, sizeof dlabel, so->draft,
                                         cache, "sweep", err);
    if (st != LM_OK)
        return st;
    return hx_spec_check_run(&res->report->spec, m, self ? NULL : dpath, prompt, n_prompt,
                             sp->n_gen ? sp->n_gen : 1, sp->configs, sp->n_configs, so, res->env,
                             err);
}

typedef struct sweep_opts {
    const char *text, *tok_s, *cache, *outdir, *model;
    hx_axes axes; /* axis lists as given (NULL: default) */
    uint32_t turn; /* the schedule axis: decode steps of the two-turn sibling, 0 = none */
    bool parse_special, verbose;
    hx_table_fmt fmt;
    hx_spec_opts so;
    hx_block_opts bo;
    hx_sweep_params sp;
} sweep_opts;

enum { O_TOKENS = 256, O_STEPS, O_BACKENDS, O_THREADS, O_PREC, O_ENS, O_SEED, O_CACHE, O_ATTN,
       O_ROT, O_SPECIAL, O_ENVELOPE, O_FORMAT, O_PROFILE, O_TURN, O_PREFIX, O_BATCH, O_TP };

/* A number shared with case files (hx_setting_parse); 0 to go on, else the exit code. */
static int setting(uint32_t *out, hx_setting which, const char *opt, const char *arg)
{
    return hx_cli_setting("sweep", out, which, opt, arg);
}

/* One option with a value to check; 0 to go on, else the exit code. */
static int set_number(sweep_opts *o, int opt, const char *arg)
{
    hx_sweep_params *sp = &o->sp;
    lm_err e = {0};
    switch (opt) {
    case 'n': return setting(&sp->n_gen, HX_SET_N_GEN, "-n", arg);
    case 'j':
        return lm_parse_u32z(arg, 1, 64, &sp->jobs)
                   ? 0 : hx_cli_fail("sweep", "-j '%s': expected an integer in 1..64", arg);
    case O_PREC: return setting(&sp->precision, HX_SET_PRECISION, "--prec", arg);
    case O_ENS:
        return lm_parse_u32z(arg, HX_ENVELOPE_MIN_MEMBERS, 1024, &sp->ensemble)
                   ? 0 : hx_cli_fail("sweep", "--ensemble '%s': expected an integer in %u..1024",
                                     arg, HX_ENVELOPE_MIN_MEMBERS);
    case O_SEED:
        sp->sr_seed_set = true;
        return lm_parse_seed(arg, &sp->sr_seed)
                   ? 0 : hx_cli_fail("sweep", "--seed '%s': expected a non-negative integer "
                                              "(decimal or 0x hex)", arg);
    case O_TURN: return setting(&o->turn, HX_SET_TURN, "--turn", arg);
    case O_ENVELOPE:
        if (strcmp(arg, "engine") != 0 && strcmp(arg, "reference") != 0)
            return hx_cli_fail("sweep", "--envelope '%s': expected reference or engine", arg);
        sp->engine_envelope = strcmp(arg, "engine") == 0;
        return 0;
    case HX_OPT_SAMPLER: case HX_OPT_BLOCK_SIZE: case HX_OPT_BLOCKS: case HX_OPT_BLOCK_ITERS:
    case HX_OPT_BLOCK_THRESHOLD: case HX_OPT_BLOCK_CRITERION: case HX_OPT_MASK_TOKEN:
        return hx_block_opts_set(&o->bo, opt, arg, &e) == LM_OK ? 0
                                                                : hx_cli_fail("sweep", "%s", e.msg);
    default:
        return hx_spec_opts_set(&o->so, opt, arg, &e) == LM_OK ? 0
                                                               : hx_cli_fail("sweep", "%s", e.msg);
    }
}

/* One option; 0 to go on, else the exit code. */
static int set_option(sweep_opts *o, int opt, const char *arg)
{
    switch (opt) {
    case 'p':
    case 'f': return hx_cli_prompt_option(&o->text, "sweep", opt, arg);
    case 'v': o->verbose = true; return 0;
    case O_FORMAT:
        return hx_table_fmt_parse(&o->fmt, arg)
                   ? 0 : hx_cli_fail("sweep", "--format '%s': expected " HX_TABLE_FORMATS, arg);
    case O_SPECIAL: o->parse_special = true; return 0;
    case O_TOKENS: o->tok_s = arg; return 0;
    case O_STEPS: o->axes.steps = arg; return 0;
    case O_BACKENDS: o->axes.backends = arg; return 0;
    case O_THREADS: o->axes.threads = arg; return 0;
    case O_ATTN: o->axes.attn = arg; return 0;
    case O_ROT: o->axes.rot = arg; return 0;
    case O_PROFILE: o->axes.profile = arg; return 0;
    case O_PREFIX: o->axes.prefix = arg; return 0;
    case O_BATCH: o->axes.batch = arg; return 0;
    case O_TP: o->axes.tp = arg; return 0;
    case O_CACHE: return hx_cli_cache_option(&o->cache, "sweep", arg);
    case 'o': o->outdir = arg; return 0;
    case 'q': o->sp.quiet = true; return 0;
    case 'n': case 'j': case O_PREC: case O_ENS: case O_SEED: case O_ENVELOPE: case O_TURN:
    case HX_OPT_SAMPLER: case HX_OPT_BLOCK_SIZE: case HX_OPT_BLOCKS: case HX_OPT_BLOCK_ITERS:
    case HX_OPT_BLOCK_THRESHOLD: case HX_OPT_BLOCK_CRITERION: case HX_OPT_MASK_TOKEN:
    case HX_OPT_SPEC: case HX_OPT_DRAFT: case HX_OPT_REPEAT_PENALTY:
    case HX_OPT_REPEAT_LAST_N: case HX_OPT_FREQ_PENALTY: case HX_OPT_PRESENCE_PENALTY:
        return set_number(o, opt, arg);
    default: return 2;
    }
}

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(sweep_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'}, {"file", required_argument, NULL, 'f'},    {"tokens", required_argument, NULL, O_TOKENS},
        {"steps", required_argument, NULL, O_STEPS}, {"backends", required_argument, NULL, O_BACKENDS},
        {"threads", required_argument, NULL, O_THREADS},
        {"attn", required_argument, NULL, O_ATTN},   {"rot", required_argument, NULL, O_ROT},
        {"n-gen", required_argument, NULL, 'n'},     {"prec", required_argument, NULL, O_PREC},
        {"ensemble", required_argument, NULL, O_ENS}, {"seed", required_argument, NULL, O_SEED},
        {"cache", required_argument, NULL, O_CACHE}, {"jobs", required_argument, NULL, 'j'},
        {"output", required_argument, NULL, 'o'},    {"quiet", no_argument, NULL, 'q'},
        {"special", no_argument, NULL, O_SPECIAL}, {"profile", required_argument, NULL, O_PROFILE},
        {"envelope", required_argument, NULL, O_ENVELOPE}, {"turn", required_argument, NULL, O_TURN},
        {"prefix", required_argument, NULL, O_PREFIX}, {"batch", required_argument, NULL, O_BATCH},
        {"tp", required_argument, NULL, O_TP},
        {"format", required_argument, NULL, O_FORMAT}, {"verbose", no_argument, NULL, 'v'},
        HX_SPEC_LONG_OPTIONS,
        HX_BLOCK_LONG_OPTIONS,
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    *o = (sweep_opts){.fmt = HX_FMT_TABLE, .turn = HX_TURN_DEFAULT,
                      .sp = {.n_gen = HX_CLI_DEFAULT_N_GEN, .precision = REF_DEFAULT_PREC,
                             .ensemble = HX_SWEEP_DEFAULT_ENSEMBLE, .jobs = 1}};
    hx_spec_opts_init(&o->so);
    hx_block_opts_init(&o->bo);
    optind = 1;
    opterr = 0;
    const char *optstring = ":p:f:n:j:o:qhv";
    hx_cli_optstate optstate = {0};
    for (int opt; (opt = hx_cli_getopt(&optstate, argc, argv, optstring, opts, NULL, NULL)) != -1;) {
        if (opt == 'h') {
            fputs(usage_text, stdout);
            fputs(usage_serving, stdout);
            printf(usage_schedule, HX_TURN_DEFAULT);
            fputs(usage_options, stdout);
            fputs(HX_SPEC_USAGE, stdout);
            fputs(HX_BLOCK_USAGE, stdout);
            return 0;
        }
        if (opt == ':' || opt == '?')
            return hx_cli_bad_option(&optstate, "sweep", opt, argv);
        int code = set_option(o, opt, optarg);
        if (code != 0)
            return code;
    }
    if (optind + 1 != argc)
        return hx_cli_fail("sweep", "expected exactly one MODEL argument (try --help)");
    if ((o->text == NULL) == (o->tok_s == NULL))
        return hx_cli_fail("sweep", "give exactly one of -p TEXT or --tokens ID,... (try --help)");
    o->model = argv[optind];
    return -1;
}

/* The configurations: the cross product of the axis lists (config.h hx_axes), then the
 * two-turn sibling of each (hx_config_add_turns). */
static int build_configs(hx_config **configs, size_t *n, const sweep_opts *o, lm_err *err)
{
    int st = hx_axes_configs(configs, n, &o->axes, err);
    if (st == LM_OK)
        st = hx_config_add_turns(configs, n, o->turn, err);
    return st;
}

/* Model, prompt and the report folder (default reports/LABEL-TIMESTAMP), before any work. */
static int prepare(lm_model **m, ref_model **r, int32_t **prompt, uint32_t *n_prompt,
                   char *dir, size_t cap, const sweep_opts *o, lm_err *err)
{
    char model_path[4096], label[256];
    int st = hx_cli_model_resolve(model_path, sizeof model_path, label, sizeof label, o->model,
                                  o->cache, "sweep", err);
    const uint32_t bound = hx_mem_tokens_bound(o->text, o->tok_s) + o->sp.n_gen;
    const hx_mem_need need = {.n_ctx = bound, .ref_tokens = bound, .ref_prec = o->sp.precision,
                              .ref_view = true};
    if (st == LM_OK)
        st = hx_mem_check(NULL, model_path, &need, 0, err);
    if (st == LM_OK && (st = hx_models_open(m, r, model_path, err)) == LM_OK)
        st = hx_cli_prompt_ids(prompt, n_prompt, *m, model_path, o->text, o->tok_s,
                               o->parse_special, err);
    if (st != LM_OK)
        return st;
    /* The report folder must be makeable before the sweep spends its time (made only after). */
    st = hx_cli_report_dir(dir, cap, o->outdir, label, err);
    if (st == LM_OK)
        st = hx_report_check_dir(dir, NULL, err);
    if (st == LM_OK && !o->sp.quiet)
        fprintf(stderr, "sweep: %s, %u prompt tokens, %u generated, %zu configurations\n",
                model_path, (unsigned)*n_prompt, (unsigned)o->sp.n_gen, o->sp.n_configs);
    return st;
}

/* The table only once the reports are written (a failed run prints nothing). With a data
 * format the table alone goes to stdout, the lines around it to stderr. */
static void print_result(const hx_sweep_result *res, const sweep_opts *o, const char *wrote)
{
    const hx_report *r = res->report;
    FILE *chat = o->fmt == HX_FMT_TABLE ? stdout : stderr;
    fprintf(chat, "kvdrift sweep %s: %u prompt tokens, %u generated; teacher path = the "
            "reference's greedy path%s", o->model, (unsigned)r->n_prompt, (unsigned)r->n_gen,
            res->path_source == HX_PATH_REFERENCE
                ? " (repaired where naive:step=full's greedy path left it)"
                : " (= naive:step=full's greedy path)");
    fprintf(chat, "\nreference %u bits%s; envelope: %u %s runs x safety %.0f%s\n\n",
            (unsigned)r->precision, res->ref_hit ? " (cached)" : "", (unsigned)r->envelope_members,
            res->env_ref_sr ? "reference float32 SR" : "naive-sr", r->envelope_safety,
            res->env_hit ? " (cached)" : "");
    hx_report_print_table_fmt(stdout, r, o->fmt, o->verbose);
    fflush(stdout);
    size_t count[HX_N_CLASSES] = {0};
    for (size_t i = 0; i < r->n_configs; ++i)
        count[r->configs[i].cls]++;
    fprintf(chat, "\n%zu configurations:", r->n_configs);
    for (int c = 0; c < HX_N_CLASSES; ++c)
        if (count[c])
            fprintf(chat, " %zu %s", count[c], hx_class_name((hx_class)c));
    fprintf(chat, "; verdict %s; peak resident memory %.1f MiB\nwrote %s\n",
            hx_report_exit_code(r, false) ? "FAIL" : "pass",
            (double)r->peak_rss_bytes / 1048576.0, wrote);
    hx_report_print_routing(stdout, r, &res->routing);
    if (res->routing.n_real > 0)
        printf("routing: %u real flips (expert sets the reference's margins do not explain)\n",
               res->routing.n_real);
}

/* The after-table sections (speculative decoding, block sampler), run into the report before
 * it is written. */
static int after_sections_run(const sweep_opts *o, const lm_model *m, const int32_t *prompt,
                              hx_sweep_result *res, lm_err *err)
{
    int st = LM_OK;
    if (o->so.spec_list != NULL)
        st = sweep_spec(&o->so, m, prompt, o->sp.n_prompt, &o->sp, res, o->cache, err);
    if (st == LM_OK && o->bo.on)
        st = hx_block_check_run(res->report, m, prompt, o->sp.n_prompt, o->sp.configs,
                                o->sp.n_configs, &o->bo, err);
    return st;
}

/* The sections printed after the table, and written beside the reports as DIR/spec.txt and
 * DIR/block.txt. */
static int after_sections_print(const hx_report *r, const char *dir, lm_err *err)
{
    int st = LM_OK;
    for (int sec = 0; sec < 2 && st == LM_OK; ++sec) {
        if (sec == 0 ? !r->spec.run : !r->block.run)
            continue;
        char *txt = NULL, path[4200];
        size_t len = 0;
        FILE *mf = open_memstream(&txt, &len);
        if (mf == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        if (sec == 0)
            hx_spec_print(mf, &r->spec);
        else
            hx_block_print(mf, &r->block);
        fclose(mf);
        snprintf(path, sizeof path, "%s/%s", dir, sec == 0 ? "spec.txt" : "block.txt");
        fwrite(txt, 1, len, stdout);
        if ((st = lm_write_file(path, txt, len, err)) == LM_OK)
            printf("wrote %s\n", path);
        free(txt);
    }
    return st;
}

int cmd_sweep(int argc, char **argv)
{
    for (int i = 1; i < argc && strcmp(argv[i], "--") != 0; ++i)
        if (strcmp(argv[i], "--engine") == 0 || strncmp(argv[i], "--engine=", 9) == 0)
            return cmd_sweep_engine(argc, argv); /* another engine's knobs */
    char cmdline[HX_COMMAND_LINE_MAX];
    hx_command_line(cmdline, sizeof cmdline, argc, argv); /* before getopt reorders argv */
    sweep_opts o;
    int code = parse_options(&o, argc, argv);
    if (code >= 0)
        return code;
    lm_err err = {0};
    hx_config *configs = NULL;
    lm_model *m = NULL;
    ref_model *r = NULL;
    int32_t *prompt = NULL;
    hx_sweep_result *res = NULL;
    char dir[4096], wrote[4200 * 2];
    int st = build_configs(&configs, &o.sp.n_configs, &o, &err);
    if (st == LM_OK)
        hx_cli_warn_kernels("sweep", configs, o.sp.n_configs);
    if (st == LM_OK)
        st = prepare(&m, &r, &prompt, &o.sp.n_prompt, dir, sizeof dir, &o, &err);
    o.sp = (hx_sweep_params){.model = m, .ref = r, .model_label = o.model, .case_name = "sweep",
                             .prompt = prompt, .n_prompt = o.sp.n_prompt, .configs = configs,
                             .n_configs = o.sp.n_configs, .cache_dir = o.cache, .log = hx_cli_log,
                             .log_user = "sweep", .n_gen = o.sp.n_gen, .precision = o.sp.precision,
                             .ensemble = o.sp.ensemble, .sr_seed = o.sp.sr_seed,
                             .sr_seed_set = o.sp.sr_seed_set, .jobs = o.sp.jobs,
                             .quiet = o.sp.quiet, .engine_envelope = o.sp.engine_envelope};
    hx_progress prog; /* the reference's progress lines (cli_progress.h) */
    char cdir[4096];
    lm_err cerr = {0};
    hx_progress_init(&prog, "sweep: ", o.sp.quiet);
    prog.cache_dir = lm_cache_dir(cdir, sizeof cdir, o.cache, &cerr) == LM_OK ? cdir : NULL;
    o.sp.ref_progress = hx_progress_cb;
    o.sp.ref_progress_user = &prog;
    if (st == LM_OK) {
        st = hx_sweep_run_all(&res, &o.sp, &err);
        hx_progress_end(&prog);
    }
    if (st == LM_OK) {
        memcpy(res->report->command_line, cmdline, sizeof cmdline);
        st = after_sections_run(&o, m, prompt, res, &err);
        res->report->peak_rss_bytes = lm_peak_rss_bytes();
    }
    if (st == LM_OK)
        st = hx_report_write_dir(wrote, sizeof wrote, dir, res->report, NULL, &err);
    if (st == LM_OK) {
        print_result(res, &o, wrote);
        st = after_sections_print(res->report, dir, &err);
    }
    if (st != LM_OK)
        fprintf(stderr, "kvdrift sweep: %s\n", err.msg);
    code = st != LM_OK ? lm_status_exit_code(st) : hx_report_exit_code(res->report, false);
    hx_sweep_result_free(res);
    free(configs);
    free(prompt);
    lm_model_free(m);
    ref_model_free(r);
    return code;
}
