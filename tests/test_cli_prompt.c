/* test_cli_prompt.c — what the model commands share: -f FILE reads the prompt text from a
 * file (the same tokens as -p with that text), one -n default for sweep, compare and trace,
 * and compare's verdict line and exit code. */
#include "cli_util.h"
#include "commands.h"
#include "synth.h"
#include "test_util.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

/* Runs cmd with stdout and stderr into files under the temp folder; returns its exit code. */
static int quiet_run(int (*cmd)(int, char **), int argc, char **argv, char *out, size_t cap)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/cli-prompt.out", tu_tmpdir());
    fflush(stdout);
    fflush(stderr);
    int so = dup(1), se = dup(2), fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    dup2(fd, 1);
    dup2(fd, 2);
    close(fd);
    int rc = cmd(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(so, 1);
    dup2(se, 2);
    close(so);
    close(se);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(out, 1, cap - 1, f) : 0;
    out[n] = '\0';
    if (f)
        fclose(f);
    return rc;
}

static json_int_t n_prompt_of(const char *dir)
{
    char p[1100];
    snprintf(p, sizeof p, "%s/report.json", dir);
    json_t *j = json_load_file(p, 0, NULL);
    json_int_t n = json_integer_value(json_object_get(j, "n_prompt"));
    json_decref(j);
    return n;
}

static void test_cli_prompt_file_and_n_default(void)
{
    const char *text = "Hello world, once more";
    char file[1024], d1[1024], d2[1024], cache[1024], out[16384];
    snprintf(file, sizeof file, "%s", tu_write_file("prompt.txt", text, strlen(text)));
    snprintf(d1, sizeof d1, "%s/pf-p", tu_tmpdir());
    snprintf(d2, sizeof d2, "%s/pf-f", tu_tmpdir());
    snprintf(cache, sizeof cache, "%s/pf-cache", tu_tmpdir());
    char *a1[] = {"sweep", "synth:tiny", "-p", (char *)text, "--steps", "full", "--backends",
                  "naive", "-n", "1", "-q", "-o", d1, "--cache", cache, NULL};
    char *a2[] = {"sweep", "synth:tiny", "-f", file, "--steps", "full", "--backends", "naive",
                  "-n", "1", "-q", "-o", d2, "--cache", cache, NULL};
    CU_ASSERT_EQUAL(quiet_run(cmd_sweep, 15, a1, out, sizeof out), 0);
    CU_ASSERT_EQUAL(quiet_run(cmd_sweep, 15, a2, out, sizeof out), 0);
    CU_ASSERT(n_prompt_of(d1) > 1);
    CU_ASSERT_EQUAL(n_prompt_of(d1), n_prompt_of(d2));
    char *a3[] = {"sweep", "synth:tiny", "-f", "/nonexistent/prompt.txt", NULL};
    CU_ASSERT_EQUAL(quiet_run(cmd_sweep, 4, a3, out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "/nonexistent/prompt.txt"));
    /* One -n default: every command's help states the same one. */
    int (*cmds[3])(int, char **) = {cmd_sweep, cmd_compare, cmd_trace};
    const char *names[3] = {"sweep", "compare", "trace"};
    char want[64];
    snprintf(want, sizeof want, "(default %u", (unsigned)HX_CLI_DEFAULT_N_GEN);
    for (int i = 0; i < 3; ++i) {
        char *h[] = {(char *)names[i], "--help", NULL};
        CU_ASSERT_EQUAL(quiet_run(cmds[i], 2, h, out, sizeof out), 0);
        const char *n = strstr(out, "-n, --n-gen N");
        CU_ASSERT_PTR_NOT_NULL_FATAL(n);
        const char *nl = strchr(n, '\n');
        CU_ASSERT(strstr(n, want) != NULL && strstr(n, want) < nl);
    }
}

/* compare ends with a verdict line and exits by it (0 for IDENTICAL and SAME TOKENS). */
static void test_cli_compare_verdict(void)
{
    char cache[1024], model[1024], out[1 << 16];
    snprintf(cache, sizeof cache, "%s/pf-cache", tu_tmpdir());
    snprintf(model, sizeof model, "%s/cmp-tiny.gguf", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(model, "tiny", 3, LM_TYPE_F32, &err), LM_OK);
    char *same[] = {"compare", model, "--tokens", "1,72,101,108,108,111", "--a", "naive",
                    "--b", "naive:step=1", "-n", "4", "--cache", cache, NULL};
    CU_ASSERT_EQUAL(quiet_run(cmd_compare, 12, same, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "verdict: IDENTICAL"));
    /* naive vs blas: other bits (blas's blocked FMA order), the same argmax on this model. */
    char *other[] = {"compare", model, "--tokens", "1,72,101,108,108,111", "--a", "naive",
                     "--b", "blas", "-n", "4", "--no-ref", NULL};
    CU_ASSERT_EQUAL(quiet_run(cmd_compare, 11, other, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "verdict: SAME TOKENS: other bits"));
}

void test_cli_prompt_register(void)
{
    CU_pSuite s = CU_add_suite("cli_prompt", NULL, NULL);
    CU_add_test(s, "test_cli_prompt_file_and_n_default", test_cli_prompt_file_and_n_default);
    CU_add_test(s, "test_cli_compare_verdict", test_cli_compare_verdict);
}
