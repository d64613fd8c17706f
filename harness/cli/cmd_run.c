/* cmd_run.c — `kvdrift run`: generate text with the engine (no reference, no comparison). */
#include "cli/commands.h"

#include "cli/cli_util.h"
#include "model/config.h"
#include "kvd_engine.h"
#include "kvd_util.h"
#include "run/drive.h"
#include "run/runner.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift run MODEL (-p TEXT | -f FILE | --tokens IDS) [options]\n"
    "Prefills the prompt (BOS added when the vocabulary asks for it) and generates a\n"
    "continuation; prints prompt + continuation on stdout and one timing line on stderr. Stops\n"
    "at EOS. MODEL is a GGUF path or synth:PRESET[:seed=N] (kvdrift synth --help). The memory\n"
    "the run needs (file, float32 arena, KV cache and scratch for the prompt and -n) is\n"
    "predicted before loading: a model that does not fit is one line with the figures, exit 2;\n"
    "the timing line ends with the process's peak resident memory. Weights stay in their\n"
    "file's type (the file mapped read-only; the arena holds norms and biases);\n"
    "KVDRIFT_WEIGHTS=arena dequantizes every weight into the float32 arena at load instead\n"
    "(naive and det give the same bits either way).\n\n"
    "  -p, --prompt TEXT     prompt text\n"
    "  -f, --file FILE       the prompt text read from FILE (its bytes as they are)\n"
    "      --tokens IDS      the prompt as comma-separated token ids instead\n"
    "  -n, --n-predict N     tokens to generate (default 32)\n"
    "      --config CONFIG   the engine configuration, e.g. blas:step=64:threads=2:attn=stream\n"
    "                        (kvdrift sweep --help: CONFIG grammar); default blas:step=full\n"
    "      --step S|full     prefill chunk size in tokens (the CONFIG's step=)\n"
    "      --backend B       the CONFIG's backend: one of the registry's (default blas);\n"
    "                        warns on stderr when its BLAS library runs kernels older than\n"
    "                        the CPU (OpenBLAS's Prescott kernels on an AVX-512 CPU)\n"
    "      --threads T       the CONFIG's threads= (default: the backend's; blas: all cores)\n"
    "      --attn A          dense | stream attention (the CONFIG's attn=; default dense)\n"
    "      --rot MAX:KEEP    rotating KV cache of MAX positions keeping the first KEEP (MLX\n"
    "                        semantics; the CONFIG's rot=MAX/KEEP; default off); MAX:KEEP:window\n"
    "                        for the exact-window policy (rot=MAX/KEEP/window)\n"
    "      --special         parse control tokens written in TEXT (\"<|im_start|>\", \"<s>\")\n"
    "                        as those tokens, as llama.cpp's CLI does (default: plain text)\n"
    "      --show-ids        also print the prompt and generated token ids (comma-separated,\n"
    "                        as --tokens takes them)\n"
    "      --seed X          sampler seed (default 0)\n"
    "      --temp T          temperature; <= 0 is greedy (default 0)\n"
    "      --top-k K         keep the K most likely tokens (default 0 = off)\n"
    "      --top-p P         nucleus threshold in (0, 1] (default 1 = off)\n"
    "  -h, --help            this text\n";

enum { O_STEP = 256, O_BACKEND, O_THREADS, O_SHOW_IDS, O_SEED, O_TEMP, O_TOPK, O_TOPP, O_ATTN,
       O_ROT, O_SPECIAL, O_CONFIG, O_TOKENS };

typedef struct run_opts {
    const char *model, *prompt, *tokens;
    hx_config cfg; /* backend, step, threads, attn, rot */
    uint32_t n_gen;
    bool show_ids, parse_special;
    lm_sampler_params sp;
} run_opts;

typedef struct run_out {
    int32_t *ids, *gen;   /* [n_prompt], [n_out] */
    uint32_t n_prompt, n_out, n_decode;
    double prefill_s, decode_s;
    const char *backend;  /* the context's backend name (static) */
} run_out;

static int parse_f32(const char *s, float *out)
{
    char *end;
    errno = 0;
    float v = strtof(s, &end);
    if (errno != 0 || *s == '\0' || *end != '\0' || !isfinite(v))
        return -1;
    *out = v;
    return 0;
}

/* The configuration aliases (--step, --backend, --threads, --attn, --rot) set one field each
 * through the CONFIG grammar, so that they accept exactly what a CONFIG string accepts. */
static int set_config_field(hx_config *cfg, const char *key, const char *arg)
{
    char one[HX_CONFIG_STR_MAX + 64], rot[64];
    const char *given = arg;
    hx_config f;
    lm_err err = {0};
    if (strcmp(key, "rot") == 0) { /* MAX:KEEP on the command line, MAX/KEEP in a CONFIG */
        snprintf(rot, sizeof rot, "%s", arg);
        for (char *colon = strchr(rot, ':'); colon != NULL; colon = strchr(colon, ':'))
            *colon = '/';
        arg = rot;
    }
    if (strcmp(key, "backend") == 0)
        snprintf(one, sizeof one, "%s", arg);
    else
        snprintf(one, sizeof one, "%s:%s=%s", cfg->backend, key, arg);
    if (hx_config_parse(&f, one, &err) != LM_OK)
        return hx_cli_fail("run", "--%s '%s': %s", key, given, err.msg);
    if (strcmp(key, "backend") == 0)
        memcpy(cfg->backend, f.backend, sizeof cfg->backend);
    else if (strcmp(key, "step") == 0)
        cfg->step = f.step;
    else if (strcmp(key, "threads") == 0)
        cfg->threads = f.threads;
    else if (strcmp(key, "attn") == 0)
        cfg->attn = f.attn;
    else
        cfg->rot_max = f.rot_max, cfg->rot_keep = f.rot_keep, cfg->rot_window = f.rot_window;
    return 0;
}

/* One option; 0 to go on, else the exit code (2: bad value). */
static int set_option(run_opts *o, int opt, const char *arg)
{
    switch (opt) {
    case 'p':
    case 'f': return hx_cli_prompt_option(&o->prompt, "run", opt, arg);
    case O_TOKENS: o->tokens = arg; return 0;
    case O_SPECIAL: o->parse_special = true; return 0;
    case O_SHOW_IDS: o->show_ids = true; return 0;
    case 'n':
        return lm_parse_u32z(arg, 0, UINT32_MAX, &o->n_gen)
                   ? 0 : hx_cli_fail("run", "-n '%s': not a non-negative integer", arg);
    case O_CONFIG:
        return hx_cli_parse_plain_config(&o->cfg, "run", "--config", arg);
    case O_STEP: return set_config_field(&o->cfg, "step", arg);
    case O_BACKEND: return set_config_field(&o->cfg, "backend", arg);
    case O_THREADS: return set_config_field(&o->cfg, "threads", arg);
    case O_ATTN: return set_config_field(&o->cfg, "attn", arg);
    case O_ROT: return set_config_field(&o->cfg, "rot", arg);
    case O_SEED:
        return lm_parse_seed(arg, &o->sp.seed)
                   ? 0 : hx_cli_fail("run", "--seed '%s': not an unsigned integer (decimal or "
                                            "0x hex)", arg);
    case O_TEMP:
        return parse_f32(arg, &o->sp.temperature) == 0
                   ? 0 : hx_cli_fail("run", "--temp '%s': not a finite number", arg);
    case O_TOPK:
        return lm_parse_u32z(arg, 0, UINT32_MAX, &o->sp.top_k)
                   ? 0 : hx_cli_fail("run", "--top-k '%s': not a non-negative integer", arg);
    case O_TOPP:
        return parse_f32(arg, &o->sp.top_p) == 0 && o->sp.top_p > 0.0f && o->sp.top_p <= 1.0f
                   ? 0 : hx_cli_fail("run", "--top-p '%s': expected a number in (0, 1]", arg);
    default: return 2;
    }
}

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(run_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'},   {"n-predict", required_argument, NULL, 'n'},
        {"file", required_argument, NULL, 'f'},
        {"tokens", required_argument, NULL, O_TOKENS}, {"config", required_argument, NULL, O_CONFIG},
        {"step", required_argument, NULL, O_STEP},  {"backend", required_argument, NULL, O_BACKEND},
        {"threads", required_argument, NULL, O_THREADS}, {"show-ids", no_argument, NULL, O_SHOW_IDS},
        {"seed", required_argument, NULL, O_SEED},  {"temp", required_argument, NULL, O_TEMP},
        {"top-k", required_argument, NULL, O_TOPK}, {"top-p", required_argument, NULL, O_TOPP},
        {"attn", required_argument, NULL, O_ATTN},  {"rot", required_argument, NULL, O_ROT},
        {"special", no_argument, NULL, O_SPECIAL},  {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (run_opts){.cfg = {.backend = "blas"}, .n_gen = 32,
                    .sp = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0}};
    optind = 1;
    opterr = 0;
    hx_cli_optstate optstate = {0};
    for (int opt; (opt = hx_cli_getopt(&optstate, argc, argv, ":p:f:n:h", opts, NULL, NULL)) != -1;) {
        if (opt == 'h') {
            fputs(usage_text, stdout);
            return 0;
        }
        if (opt == ':' || opt == '?')
            return hx_cli_bad_option(&optstate, "run", opt, argv);
        int code = set_option(o, opt, optarg);
        if (code != 0)
            return code;
    }
    if (optind >= argc)
        return hx_cli_fail("run", "missing MODEL (try kvdrift run --help)");
    if (optind < argc - 1)
        return hx_cli_fail("run", "unexpected argument '%s'", argv[optind + 1]);
    if ((o->prompt == NULL) == (o->tokens == NULL))
        return hx_cli_fail("run", "give -p TEXT or --tokens IDS (exactly one; try kvdrift run "
                                  "--help)");
    o->model = argv[optind];
    return -1;
}

static void print_piece(const lm_vocab *v, int32_t id)
{
    char buf[256];
    int len = v ? lm_token_to_piece(v, id, buf, sizeof buf) : 0;
    if (len > (int)sizeof buf) { /* a longer piece than any real vocabulary has: fetch it whole */
        char *big = malloc((size_t)len);
        if (big != NULL && lm_token_to_piece(v, id, big, (size_t)len) == len)
            fwrite(big, 1, (size_t)len, stdout);
        free(big);
    } else if (len > 0) {
        fwrite(buf, 1, (size_t)len, stdout);
    }
    fflush(stdout);
}

/* Prefill, then sample and print each token as it comes until n_gen tokens or EOS. */
static int decode(run_out *out, hx_drive *d, const lm_model *m, const run_opts *o, lm_err *err)
{
    lm_sampler *smp = NULL;
    float *logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    out->gen = malloc(((size_t)o->n_gen + 1) * sizeof *out->gen);
    int rc = logits && out->gen ? lm_sampler_create(&smp, &o->sp, m->hp.n_vocab, err)
                                : LM_FAIL(err, LM_E_NOMEM, "run: out of memory");
    const double t0 = lm_now_s();
    if (rc == LM_OK)
        rc = hx_drive_feed(d, out->ids, out->n_prompt, HX_ROWS_FINAL, logits, NULL, NULL, err);
    const double t1 = lm_now_s();
    const int32_t eos = m->vocab ? lm_vocab_eos(m->vocab) : -1;
    while (rc == LM_OK && out->n_out < o->n_gen) {
        const int32_t tok = lm_sample(smp, logits);
        if (tok == eos)
            break;
        out->gen[out->n_out++] = tok;
        print_piece(m->vocab, tok);
        if (out->n_out == o->n_gen)
            break; /* the last token's logits are never needed */
        if ((rc = hx_drive_decode(d, tok, logits, err)) == LM_OK)
            ++out->n_decode;
    }
    out->prefill_s = t1 - t0;
    out->decode_s = lm_now_s() - t1;
    lm_sampler_free(smp);
    free(logits);
    return rc;
}

/* Loads the model, tokenizes, creates the context and generates (printing the text). */
static int generate(run_out *out, const run_opts *o, lm_err *err)
{
    lm_model *m = NULL;
    hx_drive *d = NULL;
    char mpath[4096];
    const uint32_t bound = hx_mem_tokens_bound(o->prompt, o->tokens);
    const hx_mem_need mem = {.n_ctx = bound > UINT32_MAX - o->n_gen ? UINT32_MAX
                                                                      : bound + o->n_gen};
    int rc = hx_cli_model_load(&m, NULL, mpath, sizeof mpath, o->model, NULL, "run", &mem, err);
    if (rc == LM_OK)
        rc = hx_cli_prompt_ids(&out->ids, &out->n_prompt, m, o->model, o->prompt, o->tokens,
                               o->parse_special, err);
    const uint64_t need = (uint64_t)out->n_prompt + o->n_gen;
    if (rc == LM_OK && m->hp.n_ctx_train != 0 && need > m->hp.n_ctx_train)
        rc = LM_FAIL(err, LM_E_INPUT, "%s: %u prompt tokens + %u to generate exceed the context "
                     "of %u", o->model, out->n_prompt, o->n_gen, m->hp.n_ctx_train);
    if (rc == LM_OK &&
        (rc = hx_drive_open(&d, m, &o->cfg, (uint32_t)need, HX_KEYS_PLAIN, "run", err)) == LM_OK) {
        out->backend = lm_ctx_backend_name(hx_drive_ctx(d));
        if (o->prompt != NULL)
            fputs(o->prompt, stdout);
        for (uint32_t i = 0; o->prompt == NULL && i < out->n_prompt; ++i)
            print_piece(m->vocab, out->ids[i]);
        fflush(stdout);
        rc = decode(out, d, m, o, err);
        fputc('\n', stdout);
    }
    hx_drive_close(d);
    lm_model_free(m);
    return rc;
}

static void print_result(const run_out *r, bool show_ids)
{
    if (show_ids) {
        /* comma-separated, as --tokens takes them */
        printf("prompt ids: ");
        for (uint32_t i = 0; i < r->n_prompt; ++i)
            printf("%s%" PRId32, i ? "," : "", r->ids[i]);
        printf("\ngenerated ids: ");
        for (uint32_t i = 0; i < r->n_out; ++i)
            printf("%s%" PRId32, i ? "," : "", r->gen[i]);
        printf("\n");
    }
    fflush(stdout); /* the text first, then the timing line, even when both go to one pipe */
    fprintf(stderr,
            "run: %s backend, prefill %u tok in %.1f ms (%.1f tok/s), "
            "decode %u tok in %.1f ms (%.1f tok/s), peak resident memory %.1f MiB\n",
            r->backend, r->n_prompt, 1e3 * r->prefill_s, (double)r->n_prompt / r->prefill_s,
            r->n_decode, 1e3 * r->decode_s,
            r->n_decode ? (double)r->n_decode / r->decode_s : 0.0,
            (double)lm_peak_rss_bytes() / 1048576.0);
}

int cmd_run(int argc, char **argv)
{
    run_opts o;
    int code = parse_options(&o, argc, argv);
    if (code >= 0)
        return code;
    run_out r = {0};
    lm_err err = {0};
    hx_cli_warn_kernels("run", &o.cfg, 1);
    int rc = generate(&r, &o, &err);
    if (rc == LM_OK)
        print_result(&r, o.show_ids);
    else
        fprintf(stderr, "kvdrift run: %s\n", err.msg);
    free(r.ids);
    free(r.gen);
    return lm_status_exit_code(rc);
}
