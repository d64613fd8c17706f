/* cmd_trace.c — `kvdrift trace`: the first layer and operation where two configurations part,
 * bitwise and beyond the measured noise envelope (the work is in trace.c). */
#include "cli/commands.h"
#include "kvd_util.h"

#include "plan/case.h"
#include "cli/cli_util.h"
#include "model/config.h"
#include "kvd_engine.h"
#include "run/sweep.h"
#include "run/trace.h"

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
    HX_CLI_PAIR_USAGE
    "  -n, --n-gen N         decode steps after the prompt, on A's greedy path (default 32,\n"
    "                        as sweep and compare)\n"
    "      --ensemble M      naive-sr runs for the envelope (default 8, at least 8)\n"
    "      --no-envelope     bitwise comparison only\n"
    "      --seed S          first stochastic-rounding seed (default the sweep's)\n"
    "  -j, --jobs N          naive-sr runs side by side (default: the CPUs; the envelope's\n"
    "                        bits do not depend on it)\n"
    "      --brief           the summary line only, no per-operation table\n"
    "  -h, --help            this text\n\n"
    "Positions are absolute (0 = first prompt token). Columns: pos diff = positions whose rows\n"
    "differ in any bit; first = the first of them; max abs and ulp = largest |A - B|; E at max =\n"
    "the envelope at that position; max/E = the worst ratio over positions.\n"
    "exit codes: 0 no operation beyond the envelope (or none measured), 1 some operation\n"
    "beyond it, 2 usage or input error\n";

enum { O_ENS = 256, O_NOENV, O_SEED, O_BRIEF };

typedef struct trace_opts {
    hx_cli_pair_opts ab;   /* MODEL, prompt, --a, --b, -n */
    hx_trace_params tp;    /* ensemble, sr_seed (the rest from ab) */
    bool no_env, brief;
} trace_opts;

/* One option; 0 to go on, else the exit code. */
static int set_option(trace_opts *o, int opt, const char *arg)
{
    int code = hx_cli_pair_option(&o->ab, "trace", opt, arg);
    if (code != 1)
        return code;
    uint64_t v;
    switch (opt) {
    case O_NOENV: o->no_env = true; return 0;
    case O_BRIEF: o->brief = true; return 0;
    case O_ENS:
        if (!lm_parse_u64z(arg, HX_ENVELOPE_MIN_MEMBERS, 10000, &v))
            return hx_cli_fail("trace", "--ensemble '%s': expected an integer in %u..10000", arg,
                               (unsigned)HX_ENVELOPE_MIN_MEMBERS);
        o->tp.ensemble = (uint32_t)v;
        return 0;
    case 'j':
        return lm_parse_u32z(arg, 1, 64, &o->tp.jobs)
                   ? 0 : hx_cli_fail("trace", "-j '%s': expected an integer in 1..64", arg);
    case O_SEED:
        return lm_parse_u64z(arg, 0, UINT64_MAX, &o->tp.sr_seed)
                   ? 0 : hx_cli_fail("trace", "--seed '%s': expected a non-negative integer", arg);
    default: return 2;
    }
}

/* Options into *o; -1 to go on, else the exit code (0 after --help). */
static int parse_options(trace_opts *o, int argc, char **argv)
{
    static const struct option opts[] = {
        HX_CLI_PAIR_LONG_OPTIONS,
        {"ensemble", required_argument, NULL, O_ENS}, {"no-envelope", no_argument, NULL, O_NOENV},
        {"seed", required_argument, NULL, O_SEED},    {"brief", no_argument, NULL, O_BRIEF},
        {"jobs", required_argument, NULL, 'j'},       {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    *o = (trace_opts){.tp = {.ensemble = HX_SWEEP_DEFAULT_ENSEMBLE,
                             .sr_seed = HX_SWEEP_DEFAULT_SEED, .jobs = hx_threads_all()}};
    hx_cli_pair_init(&o->ab);
    optind = 1;
    opterr = 0;
    hx_cli_optstate optstate = {0};
    for (int opt; (opt = hx_cli_getopt(&optstate, argc, argv, ":p:f:n:j:h", opts, NULL, NULL)) != -1;) {
        if (opt == 'h') {
            fputs(usage_text, stdout);
            return 0;
        }
        if (opt == ':' || opt == '?')
            return hx_cli_bad_option(&optstate, "trace", opt, argv);
        int code = set_option(o, opt, optarg);
        if (code != 0)
            return code;
    }
    int code = hx_cli_pair_finish(&o->ab, "trace", argc, argv);
    if (o->no_env)
        o->tp.ensemble = 0;
    o->tp.a = o->ab.a;
    o->tp.b = o->ab.b;
    o->tp.n_gen = o->ab.n_gen;
    return code;
}

int cmd_trace(int argc, char **argv)
{
    trace_opts o;
    int code = parse_options(&o, argc, argv);
    if (code >= 0)
        return code;
    lm_err err = {0};
    lm_model *m = NULL;
    int32_t *prompt = NULL;
    hx_trace_result *r = NULL;
    int st = hx_cli_pair_load(&m, NULL, &prompt, &o.tp.n_prompt, &o.ab, "trace", &err);
    o.tp.model = m;
    o.tp.prompt = prompt;
    if (st == LM_OK && (st = hx_trace_run(&r, &o.tp, &err)) == LM_OK) {
        char an[HX_CONFIG_STR_MAX], bn[HX_CONFIG_STR_MAX];
        hx_config_format(an, sizeof an, &o.tp.a);
        hx_config_format(bn, sizeof bn, &o.tp.b);
        if (!o.brief)
            printf("trace %s: %u prompt tokens, %u decode steps on A's greedy path; %s\n",
                   o.ab.model, (unsigned)o.tp.n_prompt, (unsigned)o.tp.n_gen,
                   o.tp.ensemble ? "envelope from naive-sr runs" : "no envelope");
        hx_trace_print(stdout, r, an, bn, !o.brief);
    }
    if (st != LM_OK)
        fprintf(stderr, "kvdrift trace: %s\n", err.msg);
    code = st != LM_OK ? lm_status_exit_code(st) : r->first_beyond >= 0 ? 1 : 0;
    hx_trace_result_free(r);
    free(prompt);
    lm_model_free(m);
    return code;
}
