/* cmd_adapter.c — `kvdrift adapter ADAPTER --describe`: an adapter's knobs, their values and
 * defaults, and the precision profile each setting implies (argv -> hx_adapter_describe ->
 * print). */
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "model/adapter.h"
#include "plan/adapter_resolve.h"

#include <stdio.h>
#include <string.h>

static const char usage_text[] =
    "usage: kvdrift adapter ADAPTER --describe\n"
    "Asks an adapter (adapters/: a small program that drives another engine and writes a dump,\n"
    "docs/ADAPTERS.md) what it is and which knobs it has, and prints them: each knob's values,\n"
    "its default (the baseline of `kvdrift sweep --engine`) and the precision profile a value\n"
    "implies (e.g. llama.cpp's F16 KV cache: f16kv).\n\n"
    "ADAPTER is a path (with a '/') or a shipped adapter's name (llamacpp, mlx,\n"
    "transformers), found in $KVDRIFT_ADAPTERS or adapters/ beside the kvdrift binary.\n\n"
    "  -h, --help   this text\n\n"
    "exit codes: 0 described, 2 the adapter is missing, not executable, fails, or answers\n"
    "with a malformed description\n";

int cmd_adapter(int argc, char **argv)
{
    if (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (argc != 3 || strcmp(argv[2], "--describe") != 0)
        return hx_cli_fail("adapter", "expected ADAPTER --describe (try --help)");
    lm_err err = {0};
    char path[4096];
    hx_adapter_desc d;
    int st = hx_adapter_resolve(path, sizeof path, argv[1], &err);
    if (st == LM_OK)
        st = hx_adapter_describe(&d, path, &err);
    if (st != LM_OK) {
        fprintf(stderr, "kvdrift adapter: %s\n", err.msg);
        return lm_status_exit_code(st);
    }
    const bool build = d.engine_build[0] != '\0';
    printf("adapter %s (%s)\nengine  %s\nversion %s\n%s%s%sprofile %s when no setting names "
           "one\n\n", d.adapter, path, d.engine, d.engine_version, build ? "build   " : "",
           d.engine_build, build ? "\n" : "", d.profile);
    printf("%-12s %-10s %s\n", "knob", "default", "values (profile implied)");
    for (uint32_t k = 0; k < d.n_knobs; ++k) {
        const hx_adapter_knob *kn = &d.knobs[k];
        printf("%-12s %-10s", kn->name, kn->values[kn->def]);
        for (uint32_t j = 0; j < kn->n_values; ++j)
            printf("%s%s%s%s%s", j ? ", " : " ", kn->values[j], kn->profile[j][0] ? " (" : "",
                   kn->profile[j], kn->profile[j][0] ? ")" : "");
        printf("\n");
    }
    hx_adapter_config c;
    hx_adapter_default(&c, &d);
    char over[512];
    const char *p = hx_adapter_profile(&d, &c, over, sizeof over);
    printf("\nbaseline (every knob at its default): profile %s%s%s\n", p,
           over[0] ? "; also implied, judged under the first: " : "", over);
    return 0;
}
