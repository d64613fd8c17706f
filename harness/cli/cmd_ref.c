/* cmd_ref.c — `kvdrift ref`: the MPFR reference capture of one model and token sequence. */
#include "cli/commands.h"
#include "kvd_util.h"

#include "plan/case.h"
#include "cli/cli_progress.h"
#include "cli/cli_util.h"
#include "judge/model_check.h"
#include "fs.h"
#include "kvd_engine.h"
#include "kvd_ref.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: kvdrift ref MODEL (-p TEXT | --tokens ID,ID,...) [options]\n"
            "       kvdrift ref --check FILE   (verify a capture file and print its summary)\n\n"
            "Runs the independent MPFR reference forward pass and writes its capture: the KV\n"
            "cache of every layer after the prompt (K after RoPE, V) and the logits at the last\n"
            "prompt position and every teacher-forced position, rounded to float64.\n"
            "Memory (file, float32 weights, reference working set) is predicted before the model\n"
            "is loaded: what does not fit is one line with the figures, exit 2; the summary gives\n"
            "the process's peak resident memory. The model file's size and content hash are\n"
            "checked again before the pass (changed on disk: exit 2).\n\n"
            "  -p, --prompt TEXT        prompt text (tokenized with the model's vocabulary, BOS added)\n"
            "  -f, --file FILE          the prompt text read from FILE (its bytes as they are)\n"
            "      --tokens ID,...      prompt as token ids instead of text\n"
            "      --special            parse control tokens written in TEXT (\"<|im_start|>\")\n"
            "                           as those tokens (llama.cpp's CLI default)\n"
            "      --gen-tokens ID,...  teacher-forced continuation after the prompt\n"
            "      --prec BITS          MPFR precision (default %u; %u..%u)\n"
            "  -o, --output FILE        write the capture file (format: reference/FORMAT.md)\n"
            "      --npy DIR            also write logits.npy and layerNN_k/v.npy (float64)\n"
            "      --cache DIR          cache folder (default $KVDRIFT_CACHE, else\n"
            "                           $XDG_CACHE_HOME/kvdrift, else ~/.cache/kvdrift)\n"
            "      --no-cache           compute without reading or writing the cache\n"
            "  -j, --threads N          threads (default: all cores; results never depend on it)\n"
            "  -q, --quiet              no cost and progress lines on stderr\n"
            "      --validate           also run at twice the precision and report, per tensor,\n"
            "                           the bits and decimal digits on which P and 2P agree\n"
            "      --validate-against W  what the P run is compared with: 2p (default: the\n"
            "                           same pass at 2P bits) or mpfr (a pure-MPFR pass at 2P\n"
            "                           bits: every dot product by MPFR multiply-adds instead of\n"
            "                           the exact split product); implies --validate\n"
            "      --min-bits B         --validate fails (exit 1) when a tensor agrees to fewer\n"
            "                           than B bits (default: precision - 27, i.e. 100 at 127)\n"
            "      --check FILE         read and fully verify a capture file (hash, sizes)\n"
            "  -h, --help               this help\n\n"
            "exit codes: 0 ok, 1 validation below --min-bits, 2 usage or input error\n",
            REF_DEFAULT_PREC, REF_MIN_PREC, REF_MAX_PREC);
}

static int parse_uint(unsigned long *out, const char *s, const char *what, unsigned long lo,
                      unsigned long hi, lm_err *err)
{
    uint64_t v;
    if (!lm_parse_u64z(s, lo, hi, &v))
        return LM_FAIL(err, LM_E_INPUT, "%s: '%s' is not an integer in %lu..%lu", what, s, lo, hi);
    *out = (unsigned long)v;
    return LM_OK;
}

/* how: "computed in 1.234 s", "from cache", ... */
static void print_summary(const ref_capture *c, const char *how)
{
    printf("reference: %u tokens (%u prompt), %u bits, %s; peak resident memory %.1f MiB\n",
           c->n_tokens, c->n_prompt, c->prec, how, (double)lm_peak_rss_bytes() / 1048576.0);
    for (uint32_t i = 0; i < c->n_pos; ++i) {
        const double *lg = ref_capture_logits(c, i);
        uint32_t best = 0;
        for (uint32_t t = 1; t < c->n_vocab; ++t)
            if (lg[t] > lg[best])
                best = t;
        printf("  position %u: argmax %u (logit %.17g)\n", c->pos[i], best, lg[best]);
    }
}

/* Writes -o and --npy: all files or none (fs.h: each staged beside its target, then renamed
 * together; DIR is removed again when it was made here and nothing was written). */
static int write_outputs(const ref_capture *cap, const char *out_path, const char *npy_dir,
                         lm_err *err)
{
    const size_t n_npy = npy_dir ? 1 + 2 * (size_t)cap->n_layer : 0;
    lm_wfile **w = calloc(n_npy + 1, sizeof *w);
    if (w == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    struct stat sb;
    bool made_dir = npy_dir && stat(npy_dir, &sb) != 0;
    int st = LM_OK;
    if (npy_dir)
        st = ref_capture_stage_npy(w, cap, npy_dir, err);
    if (st == LM_OK && out_path)
        st = ref_capture_stage(&w[n_npy], cap, out_path, err);
    if (st == LM_OK) {
        st = lm_wfile_commit_all(w, n_npy + 1, err);
    } else {
        for (size_t i = 0; i <= n_npy; ++i)
            lm_wfile_abort(w[i]);
    }
    if (st != LM_OK && made_dir)
        rmdir(npy_dir);
    free(w);
    return st;
}

typedef struct ref_opts {
    const char *model, *text, *tok_s, *gen_s, *out_path, *npy_dir, *cache_dir, *check;
    unsigned long prec, threads, min_bits;
    bool no_cache, validate, have_min, parse_special, against_mpfr, quiet;
} ref_opts;

/* One option; LM_OK or LM_E_INPUT in err. */
static int set_option(ref_opts *o, int c, const char *arg, lm_err *err)
{
    switch (c) {
    case 'S': o->parse_special = true; return LM_OK;
    case 't': o->tok_s = arg; return LM_OK;
    case 'g': o->gen_s = arg; return LM_OK;
    case 'P': {
        uint32_t bits = 0;
        int rc = hx_setting_parse(&bits, HX_SET_PRECISION, "--prec", arg, err);
        o->prec = bits;
        return rc;
    }
    case 'o': o->out_path = arg; return LM_OK;
    case 'N': o->npy_dir = arg; return LM_OK;
    case 'C': o->cache_dir = arg; return LM_OK;
    case 'X': o->no_cache = true; return LM_OK;
    case 'j': return parse_uint(&o->threads, arg, "--threads", 1, LM_MAX_THREADS, err);
    case 'V': o->validate = true; return LM_OK;
    case 'q': o->quiet = true; return LM_OK;
    case 'K': o->check = arg; return LM_OK;
    case 'A':
        o->validate = true;
        o->against_mpfr = strcmp(arg, "mpfr") == 0;
        return o->against_mpfr || strcmp(arg, "2p") == 0
                   ? LM_OK
                   : LM_FAIL(err, LM_E_INPUT, "--validate-against: '%s' is not 2p or mpfr", arg);
    case 'm':
        o->have_min = true;
        return parse_uint(&o->min_bits, arg, "--min-bits", 0, REF_MAX_PREC, err);
    default: return LM_FAIL(err, LM_E_INTERNAL, "ref: option %d", c);
    }
}

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(ref_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'}, {"file", required_argument, NULL, 'f'},   {"tokens", required_argument, NULL, 't'},
        {"gen-tokens", required_argument, NULL, 'g'}, {"prec", required_argument, NULL, 'P'},
        {"output", required_argument, NULL, 'o'},   {"npy", required_argument, NULL, 'N'},
        {"cache", required_argument, NULL, 'C'},    {"no-cache", no_argument, NULL, 'X'},
        {"threads", required_argument, NULL, 'j'},  {"validate", no_argument, NULL, 'V'},
        {"min-bits", required_argument, NULL, 'm'}, {"help", no_argument, NULL, 'h'},
        {"check", required_argument, NULL, 'K'},    {"special", no_argument, NULL, 'S'},
        {"validate-against", required_argument, NULL, 'A'},
        {"quiet", no_argument, NULL, 'q'},
        {NULL, 0, NULL, 0}};
    *o = (ref_opts){.prec = REF_DEFAULT_PREC};
    lm_err err = {0};
    optind = 0; /* 0: glibc fully re-initializes getopt (cmd_ref may run more than once) */
    opterr = 0; /* our own one-line message below */
    hx_cli_optstate optstate = {0};
    for (int c; (c = hx_cli_getopt(&optstate, argc, argv, ":p:f:o:j:qh", opts, NULL, NULL)) != -1;) {
        if (c == 'h') {
            usage(stdout);
            return 0;
        }
        if (c == ':' || c == '?')
            return hx_cli_bad_option(&optstate, "ref", c, argv);
        if (c == 'p' || c == 'f') {
            if (hx_cli_prompt_option(&o->text, "ref", c, optarg) != 0)
                return 2;
            continue;
        }
        if (set_option(o, c, optarg, &err) != LM_OK)
            return hx_cli_fail("ref", "%s", err.msg);
    }
    if (o->check)
        return -1;
    if (optind + 1 != argc)
        return hx_cli_fail("ref", "expected exactly one MODEL argument (try --help)");
    if ((o->text == NULL) == (o->tok_s == NULL))
        return hx_cli_fail("ref", "give exactly one of -p TEXT or --tokens ID,... (try --help)");
    if (o->have_min && !o->validate)
        return hx_cli_fail("ref", "--min-bits needs --validate");
    /* Outputs are checked before the (possibly long) computation. */
    o->model = argv[optind];
    if (o->out_path && (hx_cli_check_out_file(o->out_path, &err) ||
                        hx_cli_out_not_input(o->out_path, o->model, "MODEL", &err)))
        return hx_cli_fail("ref", "-o %s", err.msg);
    if (o->npy_dir && hx_cli_check_out_dir(o->npy_dir, &err))
        return hx_cli_fail("ref", "--npy %s", err.msg);
    if (o->cache_dir && !o->no_cache && hx_cli_cache_option(&o->cache_dir, "ref", o->cache_dir))
        return 2;
    return -1;
}

/* --check FILE: reads a capture and prints its summary. */
static int check_file(const char *check, int argc)
{
    ref_capture cc;
    lm_err err = {0};
    int st = 0;
    if (optind != argc || (st = ref_capture_read(&cc, check, &err)))
        return hx_cli_fail("ref", "%s", st ? err.msg : "--check takes no MODEL or other arguments");
    printf("%s: capture format %u, reference version %u, %u layers, %u KV heads x %u, "
           "vocab %u\n", check, REF_FORMAT_VERSION, cc.version, cc.n_layer, cc.n_kv_head,
           cc.head_dim, cc.n_vocab);
    print_summary(&cc, "read from the file");
    ref_capture_free(&cc);
    return 0;
}

/* The tokens to compute: the prompt, then --gen-tokens (*all malloc'd). */
static int request_tokens(int32_t **all, uint32_t *n_prompt, uint32_t *n_all, const lm_model *m,
                          const ref_opts *o, lm_err *err)
{
    int32_t *prompt = NULL, *gen = NULL;
    uint32_t n_gen = 0;
    int st = hx_cli_prompt_ids(&prompt, n_prompt, m, o->model, o->text, o->tok_s,
                               o->parse_special, err);
    if (st == LM_OK && o->gen_s && (st = hx_parse_tokens(&gen, &n_gen, o->gen_s, err)) == LM_OK)
        st = hx_check_token_ids(gen, n_gen, m->hp.n_vocab, "--gen-tokens", err);
    if (st == LM_OK && (*all = malloc((*n_prompt + n_gen) * sizeof **all)) == NULL)
        st = LM_FAIL(err, LM_E_NOMEM, "out of memory");
    if (st == LM_OK) {
        memcpy(*all, prompt, *n_prompt * sizeof **all);
        if (n_gen)
            memcpy(*all + *n_prompt, gen, n_gen * sizeof **all);
        *n_all = *n_prompt + n_gen;
    }
    free(prompt);
    free(gen);
    return st;
}

/* The capture (cached unless --no-cache or --validate), then --validate's second pass. */
static int compute(ref_capture *cap, ref_agreement **ag, uint32_t *n_ag, char *how, size_t cap_n,
                   double *t_val, const ref_model *m, ref_request *rq, const ref_opts *o,
                   lm_err *err)
{
    hx_progress prog;
    hx_progress_init(&prog, "", o->quiet);
    rq->progress = hx_progress_cb;
    rq->progress_user = &prog;
    char cdir[4096];
    lm_err cerr = {0};
    bool cached = !o->no_cache && !o->validate &&
                  lm_cache_dir(cdir, sizeof cdir, o->cache_dir, &cerr) == LM_OK;
    prog.cache_dir = cached ? cdir : NULL; /* the cost line says so; a cache hit prints none */
    double t0 = lm_now_s();
    bool hit = false;
    int st = o->no_cache || o->validate ? ref_compute(cap, m, rq, err)
                                        : ref_cached(cap, m, rq, o->cache_dir, &hit, err);
    hx_progress_end(&prog);
    snprintf(how, cap_n, "%s in %.3f s", hit ? "read from the cache" : "computed",
             lm_now_s() - t0);
    /* --validate runs before anything is written or printed: its failure leaves nothing. */
    if (st == LM_OK && o->validate) {
        t0 = lm_now_s();
        if (!o->quiet)
            fprintf(stderr, "reference: --validate runs the pass again at %lu bits%s\n",
                    2 * o->prec, o->against_mpfr ? " with MPFR dot products" : "");
        st = ref_validate_against(ag, n_ag, m, rq, o->against_mpfr, err);
        hx_progress_end(&prog);
        *t_val = lm_now_s() - t0;
    }
    return st;
}

/* The agreement table of --validate; 1 when a tensor is below the bits asked for. */
static int print_validation(const ref_agreement *ag, uint32_t n_ag, double t_val,
                            const ref_opts *o)
{
    const unsigned long prec = o->prec;
    unsigned long need = o->have_min ? o->min_bits : (prec > 27 ? prec - 27 : 0);
    int rc = 0;
    printf("validate: %lu vs %lu bits%s (%.2f s); agreeing bits = -log2(|a-b|/|b|), capped at "
           "%lu; equal values count %lu, b = 0 with a != 0 counts 0\n",
           prec, 2 * prec, o->against_mpfr ? " pure MPFR" : "", t_val, prec, prec);
    printf("  %-10s %10s %9s %10s %9s\n", "tensor", "elements", "min bits", "min digits",
           "mean bits");
    for (uint32_t i = 0; i < n_ag; ++i) {
        printf("  %-10s %10" PRIu64 " %9.1f %10.1f %9.1f%s\n", ag[i].name, ag[i].n,
               ag[i].min_bits, ag[i].min_digits, ag[i].mean_bits,
               ag[i].min_bits < (double)need ? "  BELOW" : "");
        if (ag[i].min_bits < (double)need)
            rc = 1;
    }
    printf("validate: %s (every tensor >= %lu bits)\n", rc ? "FAIL" : "ok", need);
    return rc;
}

int cmd_ref(int argc, char **argv)
{
    ref_opts o;
    int rc = parse_options(&o, argc, argv);
    if (rc >= 0)
        return rc;
    if (o.check)
        return check_file(o.check, argc);
    lm_err err = {0};
    lm_model *m = NULL;
    ref_model *r = NULL;
    int32_t *all = NULL;
    uint32_t n_prompt = 0, n_all = 0, n_ag = 0;
    ref_capture cap = {0};
    ref_agreement *ag = NULL;
    char how[64];
    double t_val = 0.0;
    char mpath[4096];
    const hx_mem_need need = {.ref_tokens = hx_mem_tokens_bound(o.text, o.tok_s)
                                            + hx_mem_tokens_bound(NULL, o.gen_s),
                              .ref_prec = (uint32_t)o.prec, .ref_view = true};
    int st = hx_cli_model_load(&m, &r, mpath, sizeof mpath, o.model, o.cache_dir, "ref", &need,
                               &err);
    if (st == LM_OK)
        st = hx_model_check(m, r, &err);
    if (st == LM_OK)
        st = request_tokens(&all, &n_prompt, &n_all, m, &o, &err);
    ref_request rq = {.tokens = all, .n_tokens = n_all, .n_prompt = n_prompt,
                      .prec = (uint32_t)o.prec, .n_threads = (int)o.threads,
                      .log = hx_cli_log, .log_user = "kvdrift ref"};
    if (st == LM_OK && (st = ref_request_check(r, &rq, &err)) == LM_OK &&
        (st = lm_model_file_unchanged(m, &err)) == LM_OK &&
        (st = compute(&cap, &ag, &n_ag, how, sizeof how, &t_val, r, &rq, &o, &err)) == LM_OK &&
        (st = ref_capture_check_finite(&cap, o.model, &err)) == LM_OK)
        st = write_outputs(&cap, o.out_path, o.npy_dir, &err);
    if (st == LM_OK) {
        print_summary(&cap, how);
        if (o.out_path)
            printf("wrote %s\n", o.out_path);
        if (o.npy_dir)
            printf("wrote %s/logits.npy and %u layers of K/V .npy files\n", o.npy_dir,
                   cap.n_layer);
        rc = o.validate ? print_validation(ag, n_ag, t_val, &o) : 0;
    } else {
        fprintf(stderr, "kvdrift ref: %s\n", err.msg);
        rc = lm_status_exit_code(st);
    }
    free(ag);
    ref_capture_free(&cap);
    free(all);
    lm_model_free(m);
    ref_model_free(r);
    return rc;
}
