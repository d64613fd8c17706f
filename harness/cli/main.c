/* main.c — `kvdrift` main: dispatches to the subcommand named by argv[1]. */
#include "cli/commands.h"
#include "kvd_ref.h"
#include "kvd_version.h"

#include <stdbool.h>
#include <stdio.h>
#include <string.h>

typedef struct command {
    const char *name;
    int (*main)(int argc, char **argv);
    const char *summary;
} command;

/* Each subcommand parses its own options (getopt_long) and has its own --help. */
static const command commands[] = {
    {"run", cmd_run, "MODEL -p TEXT [-n N] [--step S|full] [--backend B]   generate text (engine only)"},
    {"synth", cmd_synth, "--preset NAME -o MODEL.gguf [--seed S]             deterministic synthetic models"},
    {"ref", cmd_ref, "MODEL -p TEXT|--tokens IDS [--prec BITS] [-o FILE]   MPFR reference capture"},
    {"sweep", cmd_sweep, "MODEL -p TEXT [--steps LIST] [--backends LIST] [-n N]   classify every configuration"},
    {"sweep", cmd_sweep, "MODEL -p TEXT --engine ADAPTER --axis KEY=V1,V2      sweep another engine's knobs"},
    {"judge", cmd_judge, "MODEL -p TEXT --dump DIR [--dump DIR] [--profile P]   judge another engine's logits"},
    {"adapter", cmd_adapter, "ADAPTER --describe                                  another engine's knobs and profiles"},
    {"probe", cmd_probe, "URL MODEL -p TEXT [--concurrency 1,8] [--prefix cold,warm]  a server under load, top-k judged"},
    {"compare", cmd_compare, "MODEL -p TEXT --a CONFIG --b CONFIG [-n N]         two configurations, full diff"},
    {"trace", cmd_trace, "MODEL -p TEXT --a CONFIG --b CONFIG [-n N]         first layer/op where they part"},
    {"check", cmd_check, "CASE... [--junit F] [--json F] [--strict]            CI regression mode (golden + reference)"},
    {"search", cmd_search, "MODEL --corpus FILE | --jsonl FILE [--profile P] [-k N]  prompts near a tie, split risk"},
    {"diff", cmd_diff, "OLD/report.json NEW/report.json [--format F]        per-configuration changes, exit 1 on regression"},
    {"bless", cmd_bless, "CASE... [--golden-dir DIR] [--force]               write golden hashes (atomically)"},
};

static void usage(FILE *f)
{
    fprintf(f, "kvdrift — numerical determinism and regression harness for LLM inference\n\n"
               "usage: kvdrift COMMAND [options]   (kvdrift COMMAND --help for details)\n"
               "       kvdrift --version\n\n");
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; ++i)
        fprintf(f, "  %-8s %s\n", commands[i].name, commands[i].summary);
    fprintf(f, "\nexit codes: 0 all pass, 1 regression found, 2 usage or input error\n");
}

static int dispatch(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const bool help = strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0 ||
                      strcmp(argv[1], "help") == 0;
    const bool version = strcmp(argv[1], "--version") == 0 || strcmp(argv[1], "version") == 0;
    if ((help || version) && argc > 2) {
        fprintf(stderr, "kvdrift: unexpected argument '%s' after %s\n", argv[2], argv[1]);
        return 2;
    }
    if (help) {
        usage(stdout);
        return 0;
    }
    if (version) {
        printf("kvdrift %s (commit %s)\n", KVD_VERSION, lm_git_commit());
        return 0;
    }
    for (size_t i = 0; i < sizeof commands / sizeof commands[0]; ++i)
        if (strcmp(argv[1], commands[i].name) == 0)
            return commands[i].main(argc - 1, argv + 1);
    fprintf(stderr, "kvdrift: unknown command '%s' (try kvdrift --help)\n", argv[1]);
    return 2;
}

int main(int argc, char **argv)
{
    int rc = 0;
    /* under mpirun: every rank but 0 serves rank 0's reference passes and ends here */
    if (ref_mpi_start(&argc, &argv, &rc))
        return rc;
    rc = dispatch(argc, argv);
    ref_mpi_stop();
    return rc;
}
