/* cmd_run.c — `kvdrift run`: prefill a prompt in chunks, then generate (engine only). */
#include "commands.h"

#include "cli_util.h"
#include "kvd_engine.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift run MODEL -p TEXT [options]\n"
    "Prefills TEXT (BOS added when the vocabulary asks for it) and generates a continuation;\n"
    "prints prompt + continuation on stdout and one timing line on stderr. Stops at EOS.\n\n"
    "  -p, --prompt TEXT     prompt text (required)\n"
    "  -n, --n-predict N     tokens to generate (default 32)\n"
    "      --step S|full     prefill chunk size in tokens (default full: one chunk)\n"
    "      --backend B       naive | blas (default blas)\n"
    "      --threads T       blas threads (default 0 = all cores)\n"
    "      --attn A          dense | stream attention (default dense)\n"
    "      --rot-max N       rotating KV cache of N positions (MLX semantics; default off)\n"
    "      --rot-keep K      positions the rotating cache always keeps (default 4)\n"
    "      --special         parse control tokens written in TEXT (\"<|im_start|>\", \"<s>\")\n"
    "                        as those tokens, as llama.cpp's CLI does (default: plain text)\n"
    "      --tokens          also print the prompt and generated token ids\n"
    "      --seed X          sampler seed (default 0)\n"
    "      --temp T          temperature; <= 0 is greedy (default 0)\n"
    "      --top-k K         keep the K most likely tokens (default 0 = off)\n"
    "      --top-p P         nucleus threshold in (0, 1] (default 1 = off)\n"
    "  -h, --help            this text\n";

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

static void print_piece(const lm_vocab *v, int32_t id)
{
    char buf[256];
    int len = lm_token_to_piece(v, id, buf, sizeof buf);
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

int cmd_run(int argc, char **argv)
{
    enum { O_STEP = 256, O_BACKEND, O_THREADS, O_TOKENS, O_SEED, O_TEMP, O_TOPK, O_TOPP,
           O_ATTN, O_ROT_MAX, O_ROT_KEEP, O_SPECIAL };
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'},  {"n-predict", required_argument, NULL, 'n'},
        {"step", required_argument, NULL, O_STEP}, {"backend", required_argument, NULL, O_BACKEND},
        {"threads", required_argument, NULL, O_THREADS}, {"tokens", no_argument, NULL, O_TOKENS},
        {"seed", required_argument, NULL, O_SEED}, {"temp", required_argument, NULL, O_TEMP},
        {"top-k", required_argument, NULL, O_TOPK}, {"top-p", required_argument, NULL, O_TOPP},
        {"attn", required_argument, NULL, O_ATTN}, {"rot-max", required_argument, NULL, O_ROT_MAX},
        {"rot-keep", required_argument, NULL, O_ROT_KEEP},
        {"special", no_argument, NULL, O_SPECIAL},
        {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
    };
    const char *prompt = NULL, *backend = "blas", *attn = "dense";
    uint32_t rot_max = 0, rot_keep = 4;
    uint32_t n_gen = 32, step = 0, threads = 0;
    bool show_tokens = false, parse_special = false;
    lm_sampler_params sp = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .seed = 0};

    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":p:n:h", opts, NULL)) != -1) {
        const char *arg = optarg;
        switch (o) {
        case 'p': prompt = arg; break;
        case O_SPECIAL: parse_special = true; break;
        case 'n':
            if (!hx_cli_parse_u32(&n_gen, arg, 0, UINT32_MAX))
                return hx_cli_fail("run", "-n '%s': not a non-negative integer", arg);
            break;
        case O_STEP:
            if (strcmp(arg, "full") == 0)
                step = 0;
            else if (!hx_cli_parse_u32(&step, arg, 1, UINT32_MAX))
                return hx_cli_fail("run", "--step '%s': expected an integer >= 1 or 'full'", arg);
            break;
        case O_BACKEND:
            if (!lm_backend_known(arg, strlen(arg)))
                return hx_cli_fail("run", "--backend '%s': unknown (expected %s)", arg,
                                   lm_backend_expected());
            backend = arg;
            break;
        case O_THREADS:
            if (!hx_cli_parse_u32(&threads, arg, 0, LM_MAX_THREADS))
                return hx_cli_fail("run", "--threads '%s': expected an integer in 0..%u", arg,
                                   LM_MAX_THREADS);
            break;
        case O_TOKENS: show_tokens = true; break;
        case O_ATTN:
            if (strcmp(arg, "dense") != 0 && strcmp(arg, "stream") != 0)
                return hx_cli_fail("run", "--attn '%s': unknown (expected dense or stream)", arg);
            attn = arg;
            break;
        case O_ROT_MAX:
            if (!hx_cli_parse_u32(&rot_max, arg, 2, UINT32_MAX / 8))
                return hx_cli_fail("run", "--rot-max '%s': expected an integer >= 2", arg);
            break;
        case O_ROT_KEEP:
            if (!hx_cli_parse_u32(&rot_keep, arg, 0, UINT32_MAX / 8))
                return hx_cli_fail("run", "--rot-keep '%s': not a non-negative integer", arg);
            break;
        case O_SEED: {
            char *end;
            errno = 0;
            unsigned long long v = strtoull(arg, &end, 0);
            if (errno != 0 || *arg == '\0' || *arg == '-' || *end != '\0')
                return hx_cli_fail("run", "--seed '%s': not an unsigned integer", arg);
            sp.seed = v;
            break;
        }
        case O_TEMP:
            if (parse_f32(arg, &sp.temperature) != 0)
                return hx_cli_fail("run", "--temp '%s': not a finite number", arg);
            break;
        case O_TOPK:
            if (!hx_cli_parse_u32(&sp.top_k, arg, 0, UINT32_MAX))
                return hx_cli_fail("run", "--top-k '%s': not a non-negative integer", arg);
            break;
        case O_TOPP:
            if (parse_f32(arg, &sp.top_p) != 0 || !(sp.top_p > 0.0f) || sp.top_p > 1.0f)
                return hx_cli_fail("run", "--top-p '%s': expected a number in (0, 1]", arg);
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return hx_cli_bad_option("run", o, argv); /* ':' or unknown */
        }
    }
    if (optind >= argc)
        return hx_cli_fail("run", "missing MODEL (try kvdrift run --help)");
    if (optind < argc - 1)
        return hx_cli_fail("run", "unexpected argument '%s'", argv[optind + 1]);
    if (prompt == NULL)
        return hx_cli_fail("run", "missing -p TEXT (try kvdrift run --help)");
    const char *path = argv[optind];

    lm_err err = {0};
    lm_model *m = NULL;
    lm_ctx *ctx = NULL;
    lm_sampler *smp = NULL;
    int32_t *ids = NULL, *gen = NULL;
    float *logits = NULL;
    size_t n_prompt = 0;
    int rc = lm_model_load(&m, path, &err);
    if (rc != LM_OK)
        goto fail;
    if (m->vocab == NULL) {
        rc = LM_FAIL(&err, LM_E_INPUT, "%s: model has no tokenizer", path);
        goto fail;
    }
    rc = lm_tokenize_ex(m->vocab, prompt, strlen(prompt), true, parse_special, &ids, &n_prompt,
                        &err);
    if (rc != LM_OK)
        goto fail;
    if (n_prompt == 0) {
        rc = LM_FAIL(&err, LM_E_INPUT, "prompt: encodes to no tokens");
        goto fail;
    }
    const uint64_t need = (uint64_t)n_prompt + n_gen;
    if (m->hp.n_ctx_train != 0 && need > m->hp.n_ctx_train) {
        rc = LM_FAIL(&err, LM_E_INPUT, "%s: %zu prompt tokens + %u to generate exceed the context of %u",
                     path, n_prompt, n_gen, m->hp.n_ctx_train);
        goto fail;
    }
    if (rot_max != 0 && rot_keep >= rot_max) {
        rc = LM_FAIL(&err, LM_E_INPUT, "--rot-keep %u must be below --rot-max %u", rot_keep,
                     rot_max);
        goto fail;
    }
    const lm_ctx_params cp = {.backend = backend, .n_threads = (int)threads, .n_ctx = (uint32_t)need,
                              .attn = attn, .rot_max_size = rot_max, .rot_keep = rot_keep};
    rc = lm_ctx_create(&ctx, m, &cp, &err);
    if (rc != LM_OK)
        goto fail;
    rc = lm_sampler_create(&smp, &sp, m->hp.n_vocab, &err);
    if (rc != LM_OK)
        goto fail;
    logits = malloc((size_t)m->hp.n_vocab * sizeof *logits);
    gen = malloc(((size_t)n_gen + 1) * sizeof *gen);
    if (logits == NULL || gen == NULL) {
        rc = LM_FAIL(&err, LM_E_NOMEM, "run: out of memory");
        goto fail;
    }

    const double t0 = hx_cli_now_s();
    rc = lm_prefill(ctx, ids, (uint32_t)n_prompt, step, logits, &err);
    if (rc != LM_OK)
        goto fail;
    const double t1 = hx_cli_now_s();
    fputs(prompt, stdout);
    fflush(stdout);
    const int32_t eos = lm_vocab_eos(m->vocab);
    uint32_t n_out = 0, n_decode = 0;
    while (n_out < n_gen) {
        const int32_t tok = lm_sample(smp, logits);
        if (tok == eos)
            break;
        gen[n_out++] = tok;
        print_piece(m->vocab, tok);
        if (n_out == n_gen)
            break; /* the last token's logits are never needed */
        rc = lm_forward(ctx, &tok, 1, LM_LOGITS_LAST, logits, &err);
        if (rc != LM_OK)
            goto fail;
        ++n_decode;
    }
    const double t2 = hx_cli_now_s();
    fputc('\n', stdout);
    if (show_tokens) {
        printf("prompt ids:");
        for (size_t i = 0; i < n_prompt; ++i)
            printf(" %" PRId32, ids[i]);
        printf("\ngenerated ids:");
        for (uint32_t i = 0; i < n_out; ++i)
            printf(" %" PRId32, gen[i]);
        printf("\n");
    }
    fflush(stdout); /* the text first, then the timing line, even when both go to one pipe */
    fprintf(stderr,
            "run: %s backend, prefill %zu tok in %.1f ms (%.1f tok/s), "
            "decode %u tok in %.1f ms (%.1f tok/s)\n",
            lm_ctx_backend_name(ctx), n_prompt, 1e3 * (t1 - t0), (double)n_prompt / (t1 - t0),
            n_decode, 1e3 * (t2 - t1), n_decode ? (double)n_decode / (t2 - t1) : 0.0);
fail:
    if (rc != LM_OK)
        fprintf(stderr, "kvdrift run: %s\n", err.msg);
    free(logits);
    free(gen);
    free(ids);
    lm_sampler_free(smp);
    lm_ctx_free(ctx);
    lm_model_free(m);
    return lm_status_exit_code(rc);
}
