/* cmd_ref.c — `kvdrift ref`: the MPFR reference capture of one model and token sequence. */
#include "commands.h"

#include "case.h"
#include "cli_progress.h"
#include "cli_util.h"
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
            "prompt position and every teacher-forced position, rounded to float64.\n\n"
            "  -p, --prompt TEXT        prompt text (tokenized with the model's vocabulary, BOS added)\n"
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
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (*s < '0' || *s > '9' || *end || errno || v < lo || v > hi)
        return LM_FAIL(err, LM_E_INPUT, "%s: '%s' is not an integer in %lu..%lu", what, s, lo, hi);
    *out = (unsigned long)v;
    return LM_OK;
}

/* how: "computed in 1.234 s", "from cache", ... */
static void print_summary(const ref_capture *c, const char *how)
{
    printf("reference: %u tokens (%u prompt), %u bits, %s\n", c->n_tokens, c->n_prompt, c->prec,
           how);
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

int cmd_ref(int argc, char **argv)
{
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'},   {"tokens", required_argument, NULL, 't'},
        {"gen-tokens", required_argument, NULL, 'g'}, {"prec", required_argument, NULL, 'P'},
        {"output", required_argument, NULL, 'o'},   {"npy", required_argument, NULL, 'N'},
        {"cache", required_argument, NULL, 'C'},    {"no-cache", no_argument, NULL, 'X'},
        {"threads", required_argument, NULL, 'j'},  {"validate", no_argument, NULL, 'V'},
        {"min-bits", required_argument, NULL, 'm'}, {"help", no_argument, NULL, 'h'},
        {"check", required_argument, NULL, 'K'},    {"special", no_argument, NULL, 'S'},
        {"validate-against", required_argument, NULL, 'A'},
        {"quiet", no_argument, NULL, 'q'},
        {NULL, 0, NULL, 0}};
    const char *text = NULL, *tok_s = NULL, *gen_s = NULL, *out_path = NULL, *npy_dir = NULL,
               *cache_dir = NULL, *check = NULL;
    unsigned long prec = REF_DEFAULT_PREC, threads = 0, min_bits = 0;
    bool no_cache = false, validate = false, have_min = false, parse_special = false;
    bool against_mpfr = false, quiet = false;
    lm_err err = {0};
    int st = LM_OK, c;
    optind = 0; /* 0: glibc fully re-initializes getopt (cmd_ref may run more than once) */
    opterr = 0; /* our own one-line message below */
    while ((c = getopt_long(argc, argv, ":p:o:j:qh", opts, NULL)) != -1) {
        switch (c) {
        case 'p': text = optarg; break;
        case 'S': parse_special = true; break;
        case 't': tok_s = optarg; break;
        case 'g': gen_s = optarg; break;
        case 'P': st = parse_uint(&prec, optarg, "--prec", REF_MIN_PREC, REF_MAX_PREC, &err); break;
        case 'o': out_path = optarg; break;
        case 'N': npy_dir = optarg; break;
        case 'C': cache_dir = optarg; break;
        case 'X': no_cache = true; break;
        case 'j': st = parse_uint(&threads, optarg, "--threads", 1, LM_MAX_THREADS, &err); break;
        case 'V': validate = true; break;
        case 'q': quiet = true; break;
        case 'A':
            validate = true;
            if (strcmp(optarg, "mpfr") == 0)
                against_mpfr = true;
            else if (strcmp(optarg, "2p") != 0)
                st = LM_FAIL(&err, LM_E_INPUT, "--validate-against: '%s' is not 2p or mpfr",
                             optarg);
            break;
        case 'm':
            st = parse_uint(&min_bits, optarg, "--min-bits", 0, REF_MAX_PREC, &err);
            have_min = true;
            break;
        case 'K': check = optarg; break;
        case 'h': usage(stdout); return 0;
        default: return hx_cli_bad_option("ref", c, argv); /* ':' or unknown */
        }
        if (st)
            return hx_cli_fail("ref", "%s", err.msg);
    }
    if (check) {
        ref_capture cc;
        if (optind != argc || (st = ref_capture_read(&cc, check, &err)))
            return hx_cli_fail("ref", "%s",
                               st ? err.msg : "--check takes no MODEL or other arguments");
        printf("%s: capture format %u, reference version %u, %u layers, %u KV heads x %u, "
               "vocab %u\n", check, REF_FORMAT_VERSION, cc.version, cc.n_layer, cc.n_kv_head,
               cc.head_dim, cc.n_vocab);
        print_summary(&cc, "read from the file");
        ref_capture_free(&cc);
        return 0;
    }
    if (optind + 1 != argc)
        return hx_cli_fail("ref", "expected exactly one MODEL argument (try --help)");
    if ((text == NULL) == (tok_s == NULL))
        return hx_cli_fail("ref", "give exactly one of -p TEXT or --tokens ID,... (try --help)");
    if (have_min && !validate)
        return hx_cli_fail("ref", "--min-bits needs --validate");
    /* Outputs are checked before the (possibly long) computation. */
    if (out_path && hx_cli_check_out_file(out_path, &err))
        return hx_cli_fail("ref", "-o %s", err.msg);
    if (npy_dir && hx_cli_check_out_dir(npy_dir, &err))
        return hx_cli_fail("ref", "--npy %s", err.msg);
    const char *model_path = argv[optind];
    lm_model *m = NULL;
    int32_t *prompt = NULL, *gen = NULL, *all = NULL;
    uint32_t n_prompt = 0, n_gen = 0;
    ref_capture cap = {0};
    ref_agreement *ag = NULL;
    uint32_t n_ag = 0;
    int rc = 0;

    if ((st = lm_model_load(&m, model_path, &err)) ||
        (st = hx_cli_prompt_ids(&prompt, &n_prompt, m, model_path, text, tok_s, parse_special,
                                    &err)))
        goto fail;
    if (gen_s && (st = hx_parse_tokens(&gen, &n_gen, gen_s, &err)))
        goto fail;
    all = malloc((n_prompt + n_gen) * sizeof *all);
    if (all == NULL) {
        st = LM_FAIL(&err, LM_E_NOMEM, "out of memory");
        goto fail;
    }
    memcpy(all, prompt, n_prompt * sizeof *all);
    if (n_gen)
        memcpy(all + n_prompt, gen, n_gen * sizeof *all);
    ref_request rq = {.tokens = all, .n_tokens = n_prompt + n_gen, .n_prompt = n_prompt,
                      .prec = (uint32_t)prec, .n_threads = (int)threads};
    if ((st = ref_request_check(m, &rq, &err)))
        goto fail;

    hx_progress prog;
    hx_progress_init(&prog, "reference", quiet);
    rq.progress = hx_progress_cb;
    rq.progress_user = &prog;
    char cdir[4096];
    lm_err cerr = {0};
    bool cached = !no_cache && !validate && lm_cache_dir(cdir, sizeof cdir, cache_dir, &cerr) == LM_OK;
    prog.cache_dir = cached ? cdir : NULL; /* the cost line says so; a cache hit prints none */
    double t0 = hx_cli_now_s();
    bool hit = false;
    if (no_cache || validate) {
        st = ref_compute(&cap, m, &rq, &err);
    } else {
        st = ref_cached(&cap, m, &rq, cache_dir, &hit, &err);
    }
    hx_progress_end(&prog);
    if (st)
        goto fail;
    char how[64];
    snprintf(how, sizeof how, "%s in %.3f s", hit ? "read from the cache" : "computed",
             hx_cli_now_s() - t0);
    /* --validate runs before anything is written or printed: its failure leaves nothing. */
    double t_val = 0.0;
    if (validate) {
        t0 = hx_cli_now_s();
        if (!quiet)
            fprintf(stderr, "reference: --validate runs the pass again at %lu bits%s\n",
                    2 * prec, against_mpfr ? " with MPFR dot products" : "");
        st = ref_validate_against(&ag, &n_ag, m, &rq, against_mpfr, &err);
        hx_progress_end(&prog);
        if (st)
            goto fail;
        t_val = hx_cli_now_s() - t0;
    }
    if ((st = write_outputs(&cap, out_path, npy_dir, &err)))
        goto fail;
    print_summary(&cap, how);
    if (out_path)
        printf("wrote %s\n", out_path);
    if (npy_dir)
        printf("wrote %s/logits.npy and %u layers of K/V .npy files\n", npy_dir, cap.n_layer);

    if (validate) {
        unsigned long need = have_min ? min_bits : (prec > 27 ? prec - 27 : 0);
        printf("validate: %lu vs %lu bits%s (%.2f s); agreeing bits = -log2(|a-b|/|b|), capped at "
               "%lu; equal values count %lu, b = 0 with a != 0 counts 0\n",
               prec, 2 * prec, against_mpfr ? " pure MPFR" : "", t_val, prec, prec);
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
    }
    goto done;
fail:
    fprintf(stderr, "kvdrift ref: %s\n", err.msg);
    rc = lm_status_exit_code(st);
done:
    free(ag);
    ref_capture_free(&cap);
    free(prompt);
    free(gen);
    free(all);
    lm_model_free(m);
    return rc;
}
