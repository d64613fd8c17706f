/* cmd_trace.c — `kvdrift trace`: the first layer and operation where two configurations part,
 * bitwise and beyond the measured noise envelope (the work is in trace.c). */
#include "commands.h"
#include "kvd_util.h"

#include "case.h"
#include "cli_util.h"
#include "config.h"
#include "kvd_engine.h"
#include "sweep.h"
#include "trace.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift trace MODEL (-p TEXT | --tokens ID,...) --a CONFIG --b CONFIG [options]\n"
    "Runs configurations A and B on the same tokens with the engine's per-operation checkpoints\n"
    "(per layer: attn_norm, q, k (after RoPE), v, attn, attn_out, attn_resid, ffn_norm,\n"
    "ffn_act, ffn_out, residual; then out_norm and logits) and reports the first operation,\n"
    "in forward order, where their bits part, and the first where they part by more than\n"
    "rounding explains: E(op, pos) = 2 * max over M naive-sr (stochastic rounding) runs of\n"
    "max |member - naive|, all at step=full on the same tokens.\n\n"
    "  -p, --prompt TEXT     prompt text (BOS added when the vocabulary asks for it)\n"
    "      --tokens ID,...   prompt as token ids instead of text\n"
    "      --special         parse control tokens written in TEXT (\"<|im_start|>\", \"<s>\")\n"
    "      --a CONFIG        first configuration (BACKEND[:step=N|full][:threads=T])\n"
    "      --b CONFIG        second configuration\n"
    "  -n, --n-gen N         decode steps after the prompt, on A's greedy path (default 0)\n"
    "      --ensemble M      naive-sr runs for the envelope (default 8, at least 8)\n"
    "      --no-envelope     bitwise comparison only\n"
    "      --seed S          first stochastic-rounding seed (default the sweep's)\n"
    "      --brief           the summary line only, no per-operation table\n"
    "  -h, --help            this text\n\n"
    "Positions are absolute (0 = first prompt token). Columns: pos diff = positions whose rows\n"
    "differ in any bit; first = the first of them; max abs and ulp = largest |A - B|; E at max =\n"
    "the envelope at that position; max/E = the worst ratio over positions.\n"
    "exit codes: 0 no operation beyond the envelope (or none measured), 1 some operation\n"
    "beyond it, 2 usage or input error\n";

int cmd_trace(int argc, char **argv)
{
    enum { O_A = 256, O_B, O_TOKENS, O_ENS, O_NOENV, O_SEED, O_BRIEF, O_SPECIAL };
    static const struct option opts[] = {
        {"prompt", required_argument, NULL, 'p'},   {"tokens", required_argument, NULL, O_TOKENS},
        {"a", required_argument, NULL, O_A},        {"b", required_argument, NULL, O_B},
        {"n-gen", required_argument, NULL, 'n'},    {"ensemble", required_argument, NULL, O_ENS},
        {"no-envelope", no_argument, NULL, O_NOENV}, {"seed", required_argument, NULL, O_SEED},
        {"brief", no_argument, NULL, O_BRIEF},      {"help", no_argument, NULL, 'h'},
        {"special", no_argument, NULL, O_SPECIAL},
        {NULL, 0, NULL, 0},
    };
    const char *text = NULL, *tok_s = NULL, *a_s = NULL, *b_s = NULL;
    uint64_t n_gen = 0, ensemble = HX_SWEEP_DEFAULT_ENSEMBLE, seed = HX_SWEEP_DEFAULT_SEED;
    bool no_env = false, brief = false, special = false;
    optind = 1;
    opterr = 0;
    int o;
    while ((o = getopt_long(argc, argv, ":p:n:h", opts, NULL)) != -1) {
        switch (o) {
        case 'p': text = optarg; break;
        case O_TOKENS: tok_s = optarg; break;
        case O_A: a_s = optarg; break;
        case O_B: b_s = optarg; break;
        case O_NOENV: no_env = true; break;
        case O_BRIEF: brief = true; break;
        case O_SPECIAL: special = true; break;
        case 'n':
            if (!lm_parse_u64z(optarg, 0, HX_MAX_N_GEN, &n_gen))
                return hx_cli_fail("trace", "-n '%s': expected an integer in 0..%u", optarg,
                                   HX_MAX_N_GEN);
            break;
        case O_ENS:
            if (!lm_parse_u64z(optarg, 0, 10000, &ensemble) || ensemble < HX_ENVELOPE_MIN_MEMBERS)
                return hx_cli_fail("trace", "--ensemble '%s': expected an integer in %u..10000", optarg,
                           (unsigned)HX_ENVELOPE_MIN_MEMBERS);
            break;
        case O_SEED:
            if (!lm_parse_u64z(optarg, 0, UINT64_MAX, &seed))
                return hx_cli_fail("trace", "--seed '%s': expected a non-negative integer", optarg);
            break;
        case 'h': fputs(usage_text, stdout); return 0;
        default: return hx_cli_bad_option("trace", o, argv); /* ':' or unknown */
        }
    }
    if (optind + 1 != argc)
        return hx_cli_fail("trace", "expected exactly one MODEL argument (try --help)");
    if ((text == NULL) == (tok_s == NULL))
        return hx_cli_fail("trace", "give exactly one of -p TEXT or --tokens ID,... (try --help)");
    if (a_s == NULL || b_s == NULL)
        return hx_cli_fail("trace", "both --a CONFIG and --b CONFIG are needed (try --help)");
    lm_err err = {0};
    hx_trace_params tp = {.n_gen = (uint32_t)n_gen, .ensemble = no_env ? 0 : (uint32_t)ensemble,
                          .sr_seed = seed};
    if (hx_config_parse(&tp.a, a_s, &err) != LM_OK || hx_config_parse(&tp.b, b_s, &err) != LM_OK)
        return hx_cli_fail("trace", "%s", err.msg);

    const char *model_path = argv[optind];
    lm_model *m = NULL;
    int32_t *prompt = NULL;
    uint32_t n_prompt = 0;
    hx_trace_result *r = NULL;
    int st;
    if ((st = lm_model_load(&m, model_path, &err)) != LM_OK)
        goto fail;
    if ((st = hx_cli_prompt_ids(&prompt, &n_prompt, m, model_path, text, tok_s, special, &err)) !=
        LM_OK)
        goto fail;
    tp.model = m;
    tp.prompt = prompt;
    tp.n_prompt = n_prompt;
    if ((st = hx_trace_run(&r, &tp, &err)) != LM_OK)
        goto fail;
    char an[HX_CONFIG_STR_MAX], bn[HX_CONFIG_STR_MAX];
    hx_config_format(an, sizeof an, &tp.a);
    hx_config_format(bn, sizeof bn, &tp.b);
    if (!brief)
        printf("trace %s: %u prompt tokens, %u decode steps on A's greedy path; %s\n", model_path,
               (unsigned)n_prompt, (unsigned)tp.n_gen,
               tp.ensemble ? "envelope from naive-sr runs" : "no envelope");
    hx_trace_print(stdout, r, an, bn, !brief);
fail:
    if (st != LM_OK)
        fprintf(stderr, "kvdrift trace: %s\n", err.msg);
    int code = st != LM_OK ? lm_status_exit_code(st) : r->first_beyond >= 0 ? 1 : 0;
    hx_trace_result_free(r);
    free(prompt);
    lm_model_free(m);
    return code;
}
