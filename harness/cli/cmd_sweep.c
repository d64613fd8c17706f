/* cmd_sweep.c — `kvdrift sweep`: every configuration of the axes (steps x backends x threads)
 * run, compared with its baseline, the MPFR reference and the measured noise envelope, shown as
 * one table and written as report.json + report.md. The work itself is hx_sweep_run_all. */
#include "commands.h"

#include "case.h"
#include "cli_progress.h"
#include "cli_util.h"
#include "config.h"
#include "fs.h"
#include "kvd_engine.h"
#include "kvd_ref.h"
#include "report.h"
#include "sweep.h"
#include "synth.h"
#include "specrun.h"
#include "sweep_block.h"
#include "sweep_spec.h"

#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "routing.h"

static const char usage_text[] =
    "usage: kvdrift sweep MODEL (-p TEXT | --tokens ID,...) [options]\n"
    "Runs every configuration of the sweep axes, generates N greedy tokens with each, evaluates\n"
    "each teacher-forced on one common path, and classifies it against its baseline (same\n"
    "backend and threads, step=full), the MPFR reference and a measured noise envelope.\n\n"
    "MODEL is a GGUF path or synth:PRESET[:seed=N] (a synthetic model, written into the cache\n"
    "folder on first use; presets as in `kvdrift synth --help`).\n\n"
    "  -p, --prompt TEXT       prompt text (BOS added when the vocabulary asks for it)\n"
    "      --tokens ID,...     prompt as token ids instead of text\n"
    "      --special           parse control tokens written in TEXT (\"<|im_start|>\") as tokens\n"
    "      --steps LIST        prefill chunk sizes, integers or full (default "
    HX_CASE_DEFAULT_STEPS ")\n"
    "      --backends LIST     naive,blas (default " HX_CASE_DEFAULT_BACKENDS ")\n"
    "      --threads LIST      thread counts, e.g. 1,2 (default 1)\n"
    "      --attn LIST         attention implementations: dense,stream (default: the engine's\n"
    "                          default, dense; a config string says attn= only when given)\n"
    "      --rot LIST          rotating KV cache axis: none and MAX:KEEP values, e.g. none,8:2\n"
    "                          (config strings say rot=MAX/KEEP). Its class is against the\n"
    "                          reference with its own schedule; the semantic column compares\n"
    "                          that reference with the same cache in one chunk\n"
    "      --profile LIST      f32 (default),f16kv,bf16,tf32,q8act\n"
    "  -n, --n-gen N           greedy tokens per configuration (default 32)\n"
    "      --prec BITS         reference precision (default 127)\n"
    "      --ensemble M        stochastic-rounding runs behind the envelope, >= 8 (default 8)\n"
    "      --seed S            first SR seed; member i uses S+i (default 0x6b76647269667431)\n"
    "      --envelope W        SR members: reference (default) or engine\n"
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
    "the reference's model (profiles: naive-sr), per tensor and position; cached.\n\n"
    "Classes (a configuration's class is its worst over every layer's K and V after prefill,\n"
    "every teacher-forced logits row and its greedy sequence):\n"
    "  EXACT      bitwise equal to its baseline, and the baseline within E of the reference\n"
    "  NOISE      differs, error vs reference within E, same argmax          (pass)\n"
    "  TIE_FLIP   argmax differs, but within the envelope of a near-tie       (pass)\n"
    "  DRIFT      same argmax, error vs reference beyond E                   (fail)\n"
    "  FLIP       argmax differs by more than the envelope explains          (fail)\n"
    "  NONFINITE  NaN or Inf anywhere                                         (fail)\n\n"
    "Columns: div = first generated index where the greedy tokens leave the path; max abs, ulp,\n"
    "NMSE, KL vs the reference; top1 = agreement with the reference's argmax; margin = smallest\n"
    "top-2 margin of the reference; E = largest logits envelope; err/E = worst ratio; sig =\n"
    "significant digits; prefill/decode tok/s; peak MiB = KV cache + scratch.\n\n"
    "Writes DIR/report.json (REPORT-SCHEMA.md), report.md, report.html.\n"
    "exit codes: 0 no configuration fails, 1 one fails (DRIFT, FLIP or NONFINITE), 2 usage or\n"
    "input error\n";

static int parse_u32(uint32_t *out, const char *s, uint32_t lo, uint32_t hi)
{
    char *end;
    errno = 0;
    unsigned long v = strtoul(s, &end, 10);
    if (*s < '0' || *s > '9' || *end != '\0' || errno != 0 || v < lo || v > hi)
        return -1;
    *out = (uint32_t)v;
    return 0;
}

/* Comma list of names into backends[16]; each must be a known backend, no duplicates. */
static int parse_backends(char (**out)[16], uint32_t *n, const char *list, lm_err *err)
{
    size_t cap = 1;
    for (const char *q = list; *q; ++q)
        cap += *q == ',';
    char (*v)[16] = calloc(cap, sizeof *v);
    if (v == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    uint32_t k = 0;
    const char *s = list;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (!lm_backend_known(s, len)) {
            free(v);
            return LM_FAIL(err, LM_E_INPUT, "--backends '%s': unknown backend '%.*s' (expected %s)",
                           list, (int)len, s, lm_backend_expected());
        }
        for (uint32_t i = 0; i < k; ++i)
            if (strlen(v[i]) == len && strncmp(v[i], s, len) == 0) {
                free(v);
                return LM_FAIL(err, LM_E_INPUT, "--backends '%s': '%.*s' listed twice", list,
                               (int)len, s);
            }
        memcpy(v[k], s, len);
        ++k;
        if (e == NULL)
            break;
        s = e + 1;
    }
    *out = v;
    *n = k;
    return LM_OK;
}

/* Comma list of attention implementations (dense, stream, default), no duplicates. */
static int parse_attn(hx_attn out[3], uint32_t *n, const char *list, lm_err *err)
{
    *n = 0;
    const char *s = list;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        hx_attn a;
        if (len == 5 && strncmp(s, "dense", 5) == 0)
            a = HX_ATTN_DENSE;
        else if (len == 6 && strncmp(s, "stream", 6) == 0)
            a = HX_ATTN_STREAM;
        else if (len == 7 && strncmp(s, "default", 7) == 0)
            a = HX_ATTN_DEFAULT;
        else
            return LM_FAIL(err, LM_E_INPUT, "--attn '%s': unknown implementation '%.*s' (dense, "
                           "stream, default)", list, (int)len, s);
        for (uint32_t i = 0; i < *n; ++i)
            if (out[i] == a)
                return LM_FAIL(err, LM_E_INPUT, "--attn '%s': '%.*s' listed twice", list,
                               (int)len, s);
        out[(*n)++] = a;
        if (e == NULL)
            break;
        s = e + 1;
    }
    return LM_OK;
}

/* Comma list of thread counts >= 1, no duplicates. */
static int parse_threads(uint32_t **out, uint32_t *n, const char *list, lm_err *err)
{
    size_t cap = 1;
    for (const char *q = list; *q; ++q)
        cap += *q == ',';
    uint32_t *v = calloc(cap, sizeof *v);
    if (v == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    uint32_t k = 0;
    const char *s = list;
    for (;;) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        char item[16];
        uint32_t t = 0;
        if (len == 0 || len >= sizeof item) {
            free(v);
            return LM_FAIL(err, LM_E_INPUT, "--threads '%s': expected integers 1..%u", list,
                           LM_MAX_THREADS);
        }
        memcpy(item, s, len);
        item[len] = '\0';
        if (parse_u32(&t, item, 1, LM_MAX_THREADS) != 0) {
            free(v);
            return LM_FAIL(err, LM_E_INPUT, "--threads '%s': '%s' is not an integer in 1..%u",
                           list, item, LM_MAX_THREADS);
        }
        for (uint32_t i = 0; i < k; ++i)
            if (v[i] == t) {
                free(v);
                return LM_FAIL(err, LM_E_INPUT, "--threads '%s': %s listed twice", list, item);
            }
        v[k++] = t;
        if (e == NULL)
            break;
        s = e + 1;
    }
    *out = v;
    *n = k;
    return LM_OK;
}

/* Resolves MODEL: a path as given, or a synthetic model written into the cache folder. */
static int resolve_model(char *path, size_t cap, char *label, size_t label_cap, const char *text,
                         const char *cache, lm_err *err)
{
    hx_model_spec spec = {0};
    int rc = hx_model_spec_parse(&spec, text, err);
    if (rc != LM_OK)
        return rc;
    if (!spec.synth) {
        snprintf(path, cap, "%s", spec.path);
        const char *slash = strrchr(spec.path, '/');
        snprintf(label, label_cap, "%s", slash ? slash + 1 : spec.path);
        char *dot = strrchr(label, '.');
        if (dot && strcmp(dot, ".gguf") == 0)
            *dot = '\0';
        free(spec.path);
        return LM_OK;
    }
    free(spec.path);
    uint64_t seed = spec.has_seed ? spec.seed : 0; /* kvdrift synth's default seed */
    hx_synth_params sp;
    if ((rc = hx_synth_preset(&sp, spec.preset, err)) != LM_OK)
        return rc;
    char dir[4096];
    if ((rc = lm_cache_open(dir, sizeof dir, cache, err)) != LM_OK)
        return rc;
    if (snprintf(path, cap, "%s/synth-%s-seed%llu.gguf", dir, spec.preset,
                 (unsigned long long)seed) >= (int)cap)
        return LM_FAIL(err, LM_E_INPUT, "%s: cache path too long", dir);
    snprintf(label, label_cap, "synth-%s-seed%llu", spec.preset, (unsigned long long)seed);
    return hx_synth_cache_write(path, spec.preset, seed, err);
}

/* The speculative-decoding check after the sweep's table (sweep_spec.h). */
static int sweep_spec(FILE *f, const hx_spec_opts *so, const lm_model *m, const int32_t *prompt,
                      uint32_t n_prompt, const hx_sweep_params *sp, const hx_sweep_result *res,
                      const char *cache, size_t *n_fail, lm_err *err)
{
    char dpath[4096], dlabel[256];
    uint32_t layers;
    const bool self = so->draft == NULL || hx_draft_self_layers(so->draft, &layers);
    int st = self ? LM_OK
                  : resolve_model(dpath, sizeof dpath, dlabel, sizeof dlabel, so->draft, cache, err);
    if (st != LM_OK)
        return st;
    return hx_spec_check_print(f, m, self ? NULL : dpath, prompt, n_prompt,
                               sp->n_gen ? sp->n_gen : 1, sp->configs, sp->n_configs, so, res->env,
                               n_fail, err);
}

int cmd_sweep(int argc, char **argv)
{
    enum { O_TOKENS = 256, O_STEPS, O_BACKENDS, O_THREADS, O_PREC, O_ENS, O_SEED, O_CACHE,
           O_ATTN, O_ROT, O_SPECIAL, O_PROFILE, O_ENVELOPE, O_FORMAT };
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'},    {"tokens", required_argument, NULL, O_TOKENS},
        {"steps", required_argument, NULL, O_STEPS}, {"backends", required_argument, NULL, O_BACKENDS},
        {"threads", required_argument, NULL, O_THREADS},
        {"attn", required_argument, NULL, O_ATTN},   {"rot", required_argument, NULL, O_ROT},
        {"n-gen", required_argument, NULL, 'n'},     {"prec", required_argument, NULL, O_PREC},
        {"ensemble", required_argument, NULL, O_ENS}, {"seed", required_argument, NULL, O_SEED},
        {"cache", required_argument, NULL, O_CACHE}, {"jobs", required_argument, NULL, 'j'},
        {"output", required_argument, NULL, 'o'},    {"quiet", no_argument, NULL, 'q'},
        {"special", no_argument, NULL, O_SPECIAL}, {"profile", required_argument, NULL, O_PROFILE},
        {"envelope", required_argument, NULL, O_ENVELOPE},
        {"format", required_argument, NULL, O_FORMAT}, {"verbose", no_argument, NULL, 'v'},
        HX_SPEC_LONG_OPTIONS,
        HX_BLOCK_LONG_OPTIONS,
        {"help", no_argument, NULL, 'h'},            {NULL, 0, NULL, 0},
    };
    const char *text = NULL, *tok_s = NULL, *cache = NULL, *outdir = NULL;
    const char *steps_s = HX_CASE_DEFAULT_STEPS, *backends_s = HX_CASE_DEFAULT_BACKENDS;
    const char *threads_s = "1", *attn_s = NULL, *rot_s = NULL, *prof_s = NULL;
    bool parse_special = false, verbose = false;
    hx_table_fmt fmt = HX_FMT_TABLE;
    hx_spec_opts so;
    hx_spec_opts_init(&so);
    hx_block_opts bo;
    hx_block_opts_init(&bo);
    lm_err opt_err = {0};
    hx_sweep_params sp = {.n_gen = HX_CASE_DEFAULT_N_GEN, .precision = REF_DEFAULT_PREC,
                          .ensemble = HX_SWEEP_DEFAULT_ENSEMBLE, .jobs = 1};
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":p:n:j:o:qhv", opts, NULL)) != -1) {
        switch (o) {
        case 'p': text = optarg; break;
        case 'v': verbose = true; break;
        case O_FORMAT:
            if (!hx_table_fmt_parse(&fmt, optarg))
                return hx_cli_fail("sweep", "--format '%s': expected " HX_TABLE_FORMATS, optarg);
            break;
        case O_SPECIAL: parse_special = true; break;
        case O_TOKENS: tok_s = optarg; break;
        case O_STEPS: steps_s = optarg; break;
        case O_BACKENDS: backends_s = optarg; break;
        case O_THREADS: threads_s = optarg; break;
        case O_ATTN: attn_s = optarg; break;
        case O_ROT: rot_s = optarg; break;
        case O_PROFILE: prof_s = optarg; break;
        case O_CACHE: cache = optarg; break;
        case O_ENVELOPE:
            if (strcmp(optarg, "engine") != 0 && strcmp(optarg, "reference") != 0)
                return hx_cli_fail("sweep", "--envelope '%s': expected reference or engine",
                                   optarg);
            sp.engine_envelope = strcmp(optarg, "engine") == 0;
            break;
        case 'o': outdir = optarg; break;
        case 'q': sp.quiet = true; break;
        case 'n':
            if (parse_u32(&sp.n_gen, optarg, 0, 100000) != 0)
                return hx_cli_fail("sweep", "-n '%s': expected an integer in 0..100000", optarg);
            break;
        case 'j':
            if (parse_u32(&sp.jobs, optarg, 1, 64) != 0)
                return hx_cli_fail("sweep", "-j '%s': expected an integer in 1..64", optarg);
            break;
        case O_PREC:
            if (parse_u32(&sp.precision, optarg, REF_MIN_PREC, REF_MAX_PREC) != 0)
                return hx_cli_fail("sweep", "--prec '%s': expected bits in %u..%u", optarg,
                                   REF_MIN_PREC, REF_MAX_PREC);
            break;
        case O_ENS:
            if (parse_u32(&sp.ensemble, optarg, HX_ENVELOPE_MIN_MEMBERS, 1024) != 0)
                return hx_cli_fail("sweep", "--ensemble '%s': expected an integer in %u..1024",
                                   optarg, HX_ENVELOPE_MIN_MEMBERS);
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(optarg, &end, 0);
            if (*optarg < '0' || *optarg > '9' || *end != '\0' || errno != 0)
                return hx_cli_fail("sweep",
                                   "--seed '%s': expected a non-negative integer (decimal or 0x hex)",
                                   optarg);
            sp.sr_seed = (uint64_t)v;
            sp.sr_seed_set = true;
            break;
        }
        case 'h':
            fputs(usage_text, stdout);
            fputs(usage_options, stdout);
            fputs(HX_SPEC_USAGE, stdout);
            fputs(HX_BLOCK_USAGE, stdout);
            return 0;
        case HX_OPT_SAMPLER: case HX_OPT_BLOCK_SIZE: case HX_OPT_BLOCKS: case HX_OPT_BLOCK_ITERS:
        case HX_OPT_BLOCK_THRESHOLD: case HX_OPT_BLOCK_CRITERION: case HX_OPT_MASK_TOKEN:
            if (hx_block_opts_set(&bo, o, optarg, &opt_err) != LM_OK)
                return hx_cli_fail("sweep", "%s", opt_err.msg);
            break;
        case HX_OPT_SPEC: case HX_OPT_DRAFT: case HX_OPT_REPEAT_PENALTY:
        case HX_OPT_REPEAT_LAST_N: case HX_OPT_FREQ_PENALTY: case HX_OPT_PRESENCE_PENALTY:
            if (hx_spec_opts_set(&so, o, optarg, &opt_err) != LM_OK)
                return hx_cli_fail("sweep", "%s", opt_err.msg);
            break;
        default: return hx_cli_bad_option("sweep", o, argv); /* ':' or unknown */
        }
    }
    if (optind + 1 != argc)
        return hx_cli_fail("sweep", "expected exactly one MODEL argument (try --help)");
    if ((text == NULL) == (tok_s == NULL))
        return hx_cli_fail("sweep", "give exactly one of -p TEXT or --tokens ID,... (try --help)");

    lm_err err = {0};
    int st = LM_OK;
    uint32_t *steps = NULL, *threads = NULL, n_steps = 0, n_threads = 0, n_backends = 0;
    hx_attn attn[3];
    uint32_t n_attn = 0; /* 0: the single default implementation */
    char (*backends)[16] = NULL;
    hx_config *configs = NULL;
    size_t n_configs = 0;
    lm_model *m = NULL;
    int32_t *prompt = NULL;
    uint32_t n_prompt = 0;
    hx_sweep_result *res = NULL;
    size_t spec_fail = 0;
    char model_path[4096], label[256], dir[4096];
    if ((st = hx_parse_steps(&steps, &n_steps, steps_s, &err)) != LM_OK ||
        (st = parse_backends(&backends, &n_backends, backends_s, &err)) != LM_OK ||
        (st = parse_threads(&threads, &n_threads, threads_s, &err)) != LM_OK ||
        (attn_s != NULL && (st = parse_attn(attn, &n_attn, attn_s, &err)) != LM_OK) ||
        (st = hx_sweep_cross(&configs, &n_configs, (const char(*)[16])backends, n_backends, steps,
                             n_steps, threads, n_threads, attn, n_attn, &err)) != LM_OK ||
        (rot_s != NULL &&
         (st = hx_config_cross_rot(&configs, &n_configs, "--rot", rot_s, &err)) != LM_OK) ||
        (prof_s != NULL && (st = hx_config_cross_profile(&configs, &n_configs, "--profile",
                                                         prof_s, &err)) != LM_OK))
        goto done;
    if ((st = resolve_model(model_path, sizeof model_path, label, sizeof label, argv[optind],
                            cache, &err)) != LM_OK ||
        (st = lm_model_load(&m, model_path, &err)) != LM_OK)
        goto done;
    if ((st = hx_cli_prompt_ids(&prompt, &n_prompt, m, model_path, text, tok_s, parse_special,
                                 &err)) != LM_OK)
        goto done;
    if (outdir == NULL) {
        char ts[32];
        time_t now = time(NULL);
        struct tm tm;
        gmtime_r(&now, &tm);
        strftime(ts, sizeof ts, "%Y%m%dT%H%M%SZ", &tm);
        snprintf(dir, sizeof dir, "reports/%s-%s", label, ts);
    } else if (snprintf(dir, sizeof dir, "%s", outdir) >= (int)sizeof dir) {
        st = LM_FAIL(&err, LM_E_INPUT, "-o: path too long");
        goto done;
    }
    /* The report folder must be makeable before the sweep spends its time (made only after). */
    if ((st = hx_cli_check_out_dir(dir, &err)) != LM_OK)
        goto done;

    sp.model = m;
    sp.model_label = argv[optind];
    sp.case_name = "sweep"; /* REPORT-SCHEMA.md: a command-line sweep's case name */
    sp.prompt = prompt;
    sp.n_prompt = n_prompt;
    sp.configs = configs;
    sp.n_configs = n_configs;
    sp.cache_dir = cache;
    hx_progress prog;
    char cdir[4096];
    lm_err cerr = {0};
    hx_progress_init(&prog, "sweep: reference", sp.quiet);
    prog.cache_dir = lm_cache_dir(cdir, sizeof cdir, cache, &cerr) == LM_OK ? cdir : NULL;
    sp.ref_progress = hx_progress_cb;
    sp.ref_progress_user = &prog;
    if (!sp.quiet)
        fprintf(stderr, "sweep: %s, %u prompt tokens, %u generated, %zu configurations\n",
                model_path, (unsigned)n_prompt, (unsigned)sp.n_gen, n_configs);
    st = hx_sweep_run_all(&res, &sp, &err);
    hx_progress_end(&prog);
    if (st != LM_OK)
        goto done;

    /* MoE: routing decisions are reported like argmax flips; measured before the reports are
     * written so that report.json/md carry them, printed after the table. */
    char *routing_txt = NULL;
    size_t routing_len = 0;
    uint32_t n_real = 0;
    if (m->hp.n_expert > 0) {
        FILE *rf = open_memstream(&routing_txt, &routing_len);
        if (rf == NULL) {
            st = LM_FAIL(&err, LM_E_NOMEM, "out of memory");
            goto done;
        }
        st = hx_routing_report(rf, m, prompt, n_prompt, configs, n_configs, sp.precision,
                               sp.sr_seed_set ? sp.sr_seed : HX_SWEEP_DEFAULT_SEED, &n_real,
                               res->report, &err);
        fclose(rf);
        if (st != LM_OK) {
            free(routing_txt);
            goto done;
        }
    }
    char json[4200], md[4200], html[4200];
    snprintf(json, sizeof json, "%s/report.json", dir);
    snprintf(md, sizeof md, "%s/report.md", dir);
    snprintf(html, sizeof html, "%s/report.html", dir);
    /* report.json last (REPORT-SCHEMA.md): a folder holding it is complete; an older one is
     * removed first so that a killed run never leaves an old report.json beside a new report.md */
    if ((st = lm_mkdir_p(dir, &err)) != LM_OK ||
        (unlink(json) != 0 && errno != ENOENT &&
         (st = LM_FAIL(&err, LM_E_IO, "%s: cannot remove: %s", json, strerror(errno)))) ||
        (st = hx_report_write_md(res->report, md, &err)) != LM_OK ||
        (st = hx_report_write_html(res->report, html, &err)) != LM_OK ||
        (st = hx_report_write_json(res->report, json, &err)) != LM_OK) {
        free(routing_txt);
        goto done;
    }
    /* The table only once the reports are written: a failed run prints nothing. With a data
     * format the table alone goes to stdout, the lines around it to stderr. */
    FILE *chat = fmt == HX_FMT_TABLE ? stdout : stderr;
    fprintf(chat, "kvdrift sweep %s: %u prompt tokens, %u generated; teacher path = the reference's "
           "greedy path%s", argv[optind], (unsigned)n_prompt, (unsigned)sp.n_gen,
           res->path_source == HX_PATH_REFERENCE
               ? " (repaired where naive:step=full's greedy path left it)"
               : " (= naive:step=full's greedy path)");
    fprintf(chat, "\nreference %u bits%s; envelope: %u %s runs x safety %.0f%s\n\n",
           (unsigned)res->report->precision, res->ref_hit ? " (cached)" : "",
           (unsigned)res->report->envelope_members,
           res->env_ref_sr ? "reference float32 SR" : "naive-sr", res->report->envelope_safety,
           res->env_hit ? " (cached)" : "");
    hx_report_print_table_fmt(stdout, res->report, fmt, verbose);
    fflush(stdout);
    size_t count[HX_N_CLASSES] = {0};
    for (size_t i = 0; i < res->report->n_configs; ++i)
        count[res->report->configs[i].cls]++;
    fprintf(chat, "\n%zu configurations:", res->report->n_configs);
    for (int c = 0; c < HX_N_CLASSES; ++c)
        if (count[c])
            fprintf(chat, " %zu %s", count[c], hx_class_name((hx_class)c));
    fprintf(chat, "; verdict %s\nwrote %s, %s and %s\n",
           hx_report_exit_code(res->report, false) ? "FAIL" : "pass", json, md, html);
    if (routing_txt != NULL) {
        fwrite(routing_txt, 1, routing_len, stdout);
        free(routing_txt);
        if (n_real > 0)
            printf("routing: %u real flips (expert sets the reference's margins do not "
                   "explain)\n", n_real);
    }
    /* after-table sections: printed, and written beside the reports */
    for (int sec = 0; sec < 2 && st == LM_OK; ++sec) {
        if (sec == 0 ? so.spec_list == NULL : !bo.on)
            continue;
        char *txt = NULL, path[4200];
        size_t len = 0;
        FILE *mf = open_memstream(&txt, &len);
        if (mf == NULL) {
            st = LM_FAIL(&err, LM_E_NOMEM, "out of memory");
            break;
        }
        st = sec == 0 ? sweep_spec(mf, &so, m, prompt, n_prompt, &sp, res, cache, &spec_fail, &err)
                      : hx_block_check_print(mf, m, prompt, n_prompt, configs, n_configs,
                                             res->report, &bo, &err);
        fclose(mf);
        snprintf(path, sizeof path, "%s/%s", dir, sec == 0 ? "spec.txt" : "block.txt");
        if (st == LM_OK) {
            fwrite(txt, 1, len, stdout);
            st = lm_write_file(path, txt, len, &err);
            if (st == LM_OK)
                printf("wrote %s\n", path);
        }
        free(txt);
    }
    if (st != LM_OK)
        goto done;
done:
    if (st != LM_OK)
        fprintf(stderr, "kvdrift sweep: %s\n", err.msg);
    int code = st != LM_OK ? lm_status_exit_code(st) : hx_report_exit_code(res->report, false);
    if (st == LM_OK && code == 0 && spec_fail > 0)
        code = 1;
    hx_sweep_result_free(res);
    free(steps);
    free(threads);
    free(backends);
    free(configs);
    free(prompt);
    lm_model_free(m);
    return code;
}
