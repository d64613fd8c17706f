/* cmd_judge.c — `kvdrift judge`: another engine's dumped logits (and K/V) classified against
 * the reference and the envelope of each precision profile (argv -> hx_judge_run_all -> print). */
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "kvd_util.h"
#include "model/config.h"
#include "model/dump.h"
#include "run/dumps_run.h"
#include "kvd_ref.h"
#include "run/sweep.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift judge MODEL (-p TEXT | -f FILE | --tokens ID,...) --dump DIR\n"
    "                     [--dump DIR ...] [--profile NAME[,NAME...]] [-o DIR] [options]\n"
    "Judges another engine's output (llama.cpp, MLX, vLLM, PyTorch...) on the prompt: each dump\n"
    "folder (dump.json + logits.npy or logprobs.npy, optional kv/ and hidden/;\n"
    "docs/DUMP-FORMAT.md) is classified against the MPFR reference and the measured envelope\n"
    "of each precision profile, exactly as `kvdrift sweep` classifies a configuration, and the\n"
    "dumps against each other.\n"
    "Memory (file, float32 weights, reference) is predicted before the model is loaded: what\n"
    "does not fit is one line with the figures, exit 2; the summary line and report.json\n"
    "(peak_rss_bytes) give the process's peak resident memory.\n\n"
    "  -p, --prompt TEXT     prompt text (must tokenize to the dump's first n_prompt ids)\n"
    "  -f, --file FILE       the prompt text read from FILE (its bytes as they are)\n"
    "      --tokens ID,...   prompt as token ids instead of text\n"
    "      --special         parse control tokens written in TEXT as tokens\n"
    "      --dump DIR        a dump folder (repeat for several)\n"
    "      --profile LIST    precision profiles to judge under (default: all): f32 (float32),\n"
    "                        f16kv (K/V cached in binary16), bf16, tf32 (matmul inputs with a\n"
    "                        10-bit mantissa), q8act (each weight product's input as\n"
    "                        llama.cpp's CPU backend converts it for that weight's type: Q8_0\n"
    "                        blocks of 32 for Q4_0/Q5_0/Q8_0/Q4_1/Q5_1/MXFP4/IQ4_NL, Q8_K\n"
    "                        blocks of 256 for K-quants and IQ2..IQ4_XS, binary16 for F16,\n"
    "                        bfloat16 for BF16, none for F32), f16act (activations in\n"
    "                        binary16 whatever the weight type)\n"
    "      --prec BITS       reference precision (default 127)\n"
    "      --ensemble M      stochastic-rounding runs per profile, >= 8 (default 8)\n"
    "      --seed S          first SR seed (member i: S+i)\n"
    "  -j, --jobs N          naive-sr envelope runs side by side, for log-probability\n"
    "                        dumps (the others' envelopes: reference SR runs on every\n"
    "                        CPU); default: the CPUs; the envelope's bits do not depend\n"
    "                        on it\n"
    "      --cache DIR       reference/envelope cache (default as sweep)\n"
    "  -o, --output DIR      report folder (default reports/judge-<UTC timestamp>)\n"
    "  -q, --quiet           no progress lines on stderr\n"
    "  -h, --help            this text\n\n"
    "Per dump and profile: the class (EXACT NOISE TIE_FLIP DRIFT FLIP NONFINITE, as sweep), the\n"
    "worst err/E, the greedy sequence's first departure from the reference (tokens_generated);\n"
    "per dump: KL(reference || dump) mean, max, 99.9%/99%/90%/median (llama-perplexity's\n"
    "conventions), same-top-1 rate, and the profile that explains it (the one with the\n"
    "smallest envelope under which it passes); the first K/V row and the first hidden-state\n"
    "row (the embedding, then each layer's output) outside the envelope, with each state's\n"
    "err/E.\n\n"
    "Writes DIR/report.json and DIR/report.md.\n"
    "exit codes: 0 every dump is explained by some profile, 1 one is not (DRIFT, FLIP or\n"
    "NONFINITE under every profile judged), 2 usage or input error (a dump that does not match\n"
    "the model or the prompt, a malformed file)\n";

#define MAX_DUMPS 64

/* The hidden states' err/E in forward order, indented under their line. */
static void print_hidden_states(const hx_hidden_first *h)
{
    char line[HX_HIDDEN_STATES_TEXT_MAX];
    hx_hidden_states_text(line, sizeof line, h);
    if (line[0])
        printf("    %s\n", line);
}

static void print_summary(const hx_report *r, const char *wrote)
{
    printf("kvdrift judge %s: %u tokens (%u prompt); reference %u bits; envelope %u SR "
           "runs x safety %.0f per profile; peak resident memory %.1f MiB\n\n", r->model,
           (unsigned)(r->n_prompt + r->n_gen), (unsigned)r->n_prompt, (unsigned)r->precision,
           (unsigned)r->envelope_members, r->envelope_safety,
           (double)r->peak_rss_bytes / 1048576.0);
    hx_report_print_table(stdout, r);
    int w = 4; /* the dump column: each folder whole, as given */
    for (size_t i = 0; i < r->n_dumps; ++i)
        w = (int)strlen(r->dumps[i].name) > w ? (int)strlen(r->dumps[i].name) : w;
    printf("\n%-*s %9s %9s %9s %9s %9s %7s  %s\n", w, "dump", "KL mean", "KL max", "KL 99.9%",
           "KL 99%", "KL median", "top-1", "explained by");
    for (size_t i = 0; i < r->n_dumps; ++i) {
        const hx_dump_report *d = &r->dumps[i];
        printf("%-*s %9.3g %9.3g %9.3g %9.3g %9.3g %6.2f%%  %s\n", w, d->name, d->kl.mean,
               d->kl.max, d->kl.p999, d->kl.p99, d->kl.median, 100.0 * d->kl.same_top1,
               d->explained_by[0] ? d->explained_by : "none (FAIL)");
        char dep[400];
        hx_dump_departure_text(dep, sizeof dep, d, r->n_prompt);
        if (d->has_generated)
            printf("  greedy: %lld generated tokens compared, %s\n", (long long)d->compared_to,
                   dep);
        for (size_t k = 0; k < d->n_profiles; ++k) {
            const hx_config_report *c = &r->configs[d->first_config + k];
            const char *at = strrchr(c->config, '@');
            char kv[320];
            hx_kv_first_text(kv, sizeof kv, &c->kv_first);
            if (kv[0])
                printf("  %s under %s\n", kv, at ? at + 1 : c->config);
            hx_hidden_first_text(kv, sizeof kv, &c->hidden_first);
            if (kv[0])
                printf("  %s under %s\n", kv, at ? at + 1 : c->config);
            print_hidden_states(&c->hidden_first);
        }
    }
    for (size_t i = 0; i < r->n_pairs; ++i) {
        const hx_dump_pair *p = &r->pairs[i];
        const char *a = r->dumps[p->a].name, *b = r->dumps[p->b].name;
        if (p->max_abs == 0.0) {
            printf("%s vs %s: identical logits over %u rows\n", a, b, (unsigned)p->n_shared);
            continue;
        }
        char apart[64], argmax[64];
        if (p->first_apart < 0)
            snprintf(apart, sizeof apart, "within the envelope everywhere");
        else
            snprintf(apart, sizeof apart, "beyond the envelope from position %lld",
                     (long long)p->first_apart);
        if (p->first_argmax < 0)
            snprintf(argmax, sizeof argmax, "the same argmax everywhere");
        else
            snprintf(argmax, sizeof argmax, "argmax differs from position %lld",
                     (long long)p->first_argmax);
        printf("%s vs %s: max |diff| %.3g over %u rows, %s, %s; closer to the reference: %s\n",
               a, b, p->max_abs, (unsigned)p->n_shared, apart, argmax,
               p->closer[0] == 'a' ? a : p->closer[0] == 'b' ? b : "tie");
    }
    printf("verdict %s\nwrote %s\n", hx_report_exit_code(r, false) ? "FAIL" : "pass", wrote);
}

enum { O_TOKENS = 256, O_DUMP, O_PROFILE, O_PREC, O_ENS, O_SEED, O_CACHE, O_SPECIAL };

/* The options of judge. */
typedef struct judge_opts {
    const char *model, *text, *tok_s, *outdir, *prof_s, *dirs[MAX_DUMPS];
    size_t n_dirs;
    bool special;
    hx_judge_params jp;
} judge_opts;

/* One option; -1 to go on, else the exit code (2 after the one-line error). */
static int set_option(judge_opts *o, int c, const char *arg)
{
    switch (c) {
    case 'p':
    case 'f': return hx_cli_prompt_option(&o->text, "judge", c, arg) == 0 ? -1 : 2;
    case O_TOKENS: o->tok_s = arg; return -1;
    case O_SPECIAL: o->special = true; return -1;
    case O_DUMP:
        if (o->n_dirs == MAX_DUMPS)
            return hx_cli_fail("judge", "--dump: at most %d dumps", MAX_DUMPS);
        o->dirs[o->n_dirs++] = arg;
        return -1;
    case O_PROFILE: o->prof_s = arg; return -1;
    case O_CACHE: return hx_cli_cache_option(&o->jp.cache_dir, "judge", arg) == 0 ? -1 : 2;
    case 'o': o->outdir = arg; return -1;
    case 'q': o->jp.quiet = true; return -1;
    case O_PREC:
        return hx_cli_setting("judge", &o->jp.precision, HX_SET_PRECISION, "--prec", arg) == 0
                   ? -1
                   : 2;
    case O_ENS:
        return lm_parse_u32z(arg, 8, 1024, &o->jp.ensemble)
                   ? -1
                   : hx_cli_fail("judge", "--ensemble '%s': expected an integer in 8..1024", arg);
    case 'j':
        return lm_parse_u32z(arg, 1, 64, &o->jp.jobs)
                   ? -1
                   : hx_cli_fail("judge", "-j '%s': expected an integer in 1..64", arg);
    case O_SEED:
        if (!lm_parse_seed(arg, &o->jp.sr_seed))
            return hx_cli_fail("judge", "--seed '%s': expected a non-negative integer", arg);
        o->jp.sr_seed_set = true;
        return -1;
    default: return hx_cli_fail("judge", "option %d", c);
    }
}

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(judge_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'},   {"tokens", required_argument, NULL, O_TOKENS},
        {"file", required_argument, NULL, 'f'},
        {"dump", required_argument, NULL, O_DUMP},  {"profile", required_argument, NULL, O_PROFILE},
        {"prec", required_argument, NULL, O_PREC},  {"ensemble", required_argument, NULL, O_ENS},
        {"seed", required_argument, NULL, O_SEED},  {"cache", required_argument, NULL, O_CACHE},
        {"special", no_argument, NULL, O_SPECIAL},  {"output", required_argument, NULL, 'o'},
        {"quiet", no_argument, NULL, 'q'},          {"jobs", required_argument, NULL, 'j'},
        {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (judge_opts){.jp = {.precision = REF_DEFAULT_PREC, .ensemble = HX_SWEEP_DEFAULT_ENSEMBLE,
                             .jobs = hx_threads_all(), .log = hx_cli_log, .log_user = "judge"}};
    optind = 1;
    opterr = 0;
    static const int repeatable[] = {O_DUMP, 0}; /* one --dump per dump folder */
    hx_cli_optstate optstate = {0};
    for (int c, rc; (c = hx_cli_getopt(&optstate, argc, argv, ":p:f:o:j:qh", opts, NULL, repeatable)) != -1;) {
        if (c == 'h') {
            fputs(usage_text, stdout);
            return 0;
        }
        if (c == ':' || c == '?')
            return hx_cli_bad_option(&optstate, "judge", c, argv);
        if ((rc = set_option(o, c, optarg)) >= 0)
            return rc;
    }
    if (optind + 1 != argc)
        return hx_cli_fail("judge", "expected exactly one MODEL argument (try --help)");
    if ((o->text == NULL) == (o->tok_s == NULL))
        return hx_cli_fail("judge", "give exactly one of -p TEXT or --tokens ID,... (try --help)");
    if (o->n_dirs == 0)
        return hx_cli_fail("judge", "no --dump DIR given (try --help)");
    o->model = argv[optind];
    return -1;
}

/* What judge reads before running: the profiles, the model, the
 * prompt and every dump (each checked against the model and the prompt). */
typedef struct judge_inputs {
    lm_model *m;
    ref_model *r; /* the reference's own view of the same file */
    int32_t *prompt; /* [n_prompt] */
    uint32_t n_prompt;
    hx_dump *dumps[MAX_DUMPS];
    const char *profiles[HX_JUDGE_MAX_PROFILES];
} judge_inputs;

static int load_inputs(judge_inputs *in, judge_opts *o, lm_err *err)
{
    int st = LM_OK;
    if (o->prof_s != NULL &&
        (st = hx_profile_names_parse(in->profiles, &o->jp.n_profiles, HX_JUDGE_MAX_PROFILES,
                                     "--profile", o->prof_s, err)) != LM_OK)
        return st;
    char mpath[4096];
    const hx_mem_need need = {.ref_tokens = hx_mem_tokens_bound(o->text, o->tok_s),
                              .ref_view = true};
    if ((st = hx_cli_model_load(&in->m, &in->r, mpath, sizeof mpath, o->model, o->jp.cache_dir,
                                "judge", &need, err)) != LM_OK ||
        (st = hx_cli_prompt_ids(&in->prompt, &in->n_prompt, in->m, o->model, o->text, o->tok_s,
                                o->special, err)) != LM_OK)
        return st;
    for (size_t i = 0; i < o->n_dirs; ++i)
        if ((st = hx_dump_load(&in->dumps[i], o->dirs[i], in->m, mpath, err)) != LM_OK)
            return st;
    return LM_OK;
}

/* The report files judge writes into its folder. */
static const char *const formats[] = {"md", "json", NULL};

/* Runs the judgement of the loaded inputs, writes DIR/report.md and DIR/report.json (the
 * report writers "md" and "json") and prints the summary; *rep is the report (NULL when the
 * run failed). */
static int judge_and_write(hx_report **rep, judge_opts *o, const judge_inputs *in,
                           const char *dir, lm_err *err)
{
    char wrote[4200 * 2];
    o->jp.model = in->m;
    o->jp.ref = in->r;
    o->jp.model_label = o->model;
    o->jp.prompt = in->prompt;
    o->jp.n_prompt = in->n_prompt;
    o->jp.dumps = in->dumps;
    o->jp.n_dumps = o->n_dirs;
    o->jp.profiles = in->profiles;
    int st = hx_judge_run_all(rep, &o->jp, err);
    if (st != LM_OK)
        return st;
    (*rep)->peak_rss_bytes = lm_peak_rss_bytes();
    if ((st = hx_report_write_dir(wrote, sizeof wrote, dir, *rep, formats, err)) != LM_OK)
        return st;
    print_summary(*rep, wrote);
    return LM_OK;
}

int cmd_judge(int argc, char **argv)
{
    judge_opts o;
    int rc = parse_options(&o, argc, argv);
    if (rc >= 0)
        return rc;
    lm_err err = {0};
    judge_inputs in = {0};
    hx_report *rep = NULL;
    char dir[4096];
    /* the report folder first: loading a model and its dumps is work a bad -o would waste */
    int st = hx_cli_report_dir(dir, sizeof dir, o.outdir, "judge", &err);
    if (st == LM_OK)
        st = hx_report_check_dir(dir, formats, &err);
    if (st == LM_OK)
        st = load_inputs(&in, &o, &err);
    if (st == LM_OK)
        st = judge_and_write(&rep, &o, &in, dir, &err);
    if (st != LM_OK)
        fprintf(stderr, "kvdrift judge: %s\n", err.msg);
    int code = st != LM_OK ? lm_status_exit_code(st) : hx_report_exit_code(rep, false);
    hx_report_free(rep);
    for (size_t i = 0; i < o.n_dirs; ++i)
        hx_dump_free(in.dumps[i]);
    free(in.prompt);
    lm_model_free(in.m);
    ref_model_free(in.r);
    return code;
}
