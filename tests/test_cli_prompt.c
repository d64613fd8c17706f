/* test_cli_prompt.c — what the model commands share: -f FILE reads the prompt text from a
 * file (the same tokens as -p with that text), one -n default for sweep, compare and trace,
 * and compare's verdict line and exit code. */
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "kvd_engine.h"
#include "kvd_gguf.h"
#include "plan/synth.h"
#include "fixtures.h"
#include "test_util.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_sweep, 15, a1, out, sizeof out), 0);
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_sweep, 15, a2, out, sizeof out), 0);
    CU_ASSERT(n_prompt_of(d1) > 1);
    CU_ASSERT_EQUAL(n_prompt_of(d1), n_prompt_of(d2));
    char *a3[] = {"sweep", "synth:tiny", "-f", "/nonexistent/prompt.txt", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_sweep, 4, a3, out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "/nonexistent/prompt.txt"));
    /* One -n default: every command's help states the same one. */
    int (*cmds[3])(int, char **) = {cmd_sweep, cmd_compare, cmd_trace};
    const char *names[3] = {"sweep", "compare", "trace"};
    char want[64];
    snprintf(want, sizeof want, "(default %u", (unsigned)HX_CLI_DEFAULT_N_GEN);
    for (int i = 0; i < 3; ++i) {
        char *h[] = {(char *)names[i], "--help", NULL};
        CU_ASSERT_EQUAL(tf_run_cmd(cmds[i], 2, h, out, sizeof out), 0);
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
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_compare, 12, same, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "verdict: IDENTICAL"));
    /* naive vs blas: other bits (blas's blocked FMA order), the same argmax on this model. */
    char *other[] = {"compare", model, "--tokens", "1,72,101,108,108,111", "--a", "naive",
                     "--b", "blas", "-n", "4", "--no-ref", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_compare, 11, other, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "verdict: SAME TOKENS: other bits"));
}

/* The greedy token of A (naive, f32) after the prompt. */
static int32_t naive_next(const char *model, const int32_t *tok, uint32_t n)
{
    lm_err err = {0};
    lm_model *m = NULL;
    lm_ctx *c = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, model, &err), LM_OK);
    lm_ctx_params p = {.backend = "naive", .n_ctx = n};
    CU_ASSERT_EQUAL_FATAL(lm_ctx_create(&c, m, &p, &err), LM_OK);
    float *lg = malloc(m->hp.n_vocab * sizeof *lg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(lg);
    CU_ASSERT_EQUAL_FATAL(lm_prefill(c, tok, n, 0, lg, &err), LM_OK);
    int32_t t = lm_argmax(lg, m->hp.n_vocab);
    free(lg);
    lm_ctx_free(c);
    lm_model_free(m);
    return t;
}

/* A near tie built into the tied output matrix of a synthetic model (token_embd, F32,
 * [n_vocab][n_embd]): A's greedy token t1 after the prompt gets a row of bfloat16 values, and
 * token t2 < t1 gets t1's row times (1 - 2^-12). In float32 t1's logit exceeds t2's by 2^-12
 * of itself (about 2.4e-4 relative, far above the float32 rounding of a 64-term dot product,
 * ~64 * 2^-24 relative to the sum of |terms|), so naive picks t1; under the bf16 profile both
 * rows round to the same bfloat16 values (w (1 - 2^-12) is within half a bfloat16 ulp of a
 * bfloat16 w, which has 8 significant bits), their logits are bitwise equal, and the tie goes
 * to the lower id, t2. Neither token is in the prompt, so the hidden state is unchanged. */
static void build_near_tie(const char *path, int32_t t1, int32_t t2)
{
    lm_err err = {0};
    lm_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, path, &err), LM_OK);
    const lm_gguf_tensor *t = lm_gguf_tensor_find(g, "token_embd.weight");
    CU_ASSERT_PTR_NOT_NULL_FATAL(t);
    CU_ASSERT_EQUAL_FATAL(t->type, LM_TYPE_F32);
    CU_ASSERT_PTR_NULL_FATAL(lm_gguf_tensor_find(g, "output.weight")); /* tied */
    const size_t n_embd = (size_t)t->ne[0];
    const long off = (long)((const char *)t->data - (const char *)lm_gguf_bytes(g));
    float *row = malloc(n_embd * sizeof *row), *tie = malloc(n_embd * sizeof *tie);
    CU_ASSERT_FATAL(row != NULL && tie != NULL);
    memcpy(row, (const float *)t->data + (size_t)t1 * n_embd, n_embd * sizeof *row);
    lm_gguf_close(g);
    for (size_t i = 0; i < n_embd; ++i) {
        row[i] = lm_bf16_to_f32(lm_f32_to_bf16(row[i]));
        tie[i] = row[i] * (1.0f - 0x1p-12f);
        CU_ASSERT_EQUAL_FATAL(lm_f32_to_bf16(tie[i]), lm_f32_to_bf16(row[i]));
    }
    FILE *f = fopen(path, "r+b");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    CU_ASSERT_FATAL(fseek(f, off + (long)((size_t)t1 * n_embd * sizeof(float)), SEEK_SET) == 0);
    CU_ASSERT_FATAL(fwrite(row, sizeof *row, n_embd, f) == n_embd);
    CU_ASSERT_FATAL(fseek(f, off + (long)((size_t)t2 * n_embd * sizeof(float)), SEEK_SET) == 0);
    CU_ASSERT_FATAL(fwrite(tie, sizeof *tie, n_embd, f) == n_embd);
    CU_ASSERT_FATAL(fclose(f) == 0);
    free(row);
    free(tie);
}

/* Two legitimate configurations part at a near tie: compare says PARTED, where, and exits 1. */
static void test_cli_compare_parted(void)
{
    char model[1024], out[1 << 16], want[160];
    snprintf(model, sizeof model, "%s/cmp-tie.gguf", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(model, "tiny", 3, LM_TYPE_F32, &err), LM_OK);
    static const int32_t prompt[] = {1, 72, 101, 108, 108, 111};
    const uint32_t n = sizeof prompt / sizeof prompt[0];
    const int32_t t1 = naive_next(model, prompt, n);
    int32_t t2 = 3; /* the lowest id above the control tokens that is not in the prompt */
    while (t2 == 72 || t2 == 101 || t2 == 108 || t2 == 111)
        t2++;
    CU_ASSERT_FATAL(t2 < t1);
    build_near_tie(model, t1, t2);
    CU_ASSERT_EQUAL(naive_next(model, prompt, n), t1); /* A still picks t1 */
    char *tie[] = {"compare", model, "--tokens", "1,72,101,108,108,111", "--a", "naive",
                   "--b", "naive:profile=bf16", "-n", "4", "--no-ref", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_compare, 11, tie, out, sizeof out), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "verdict: PARTED: argmax differs at "));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "(first at position 5)")); /* the last prompt token */
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "; greedy tokens part at generated index 0\n"));
    snprintf(want, sizeof want, "greedy: A and B part at generated index 0 (A id %d, B id %d)",
             (int)t1, (int)t2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    /* The same near tie in float32 on both sides: no part. */
    char *f32[] = {"compare", model, "--tokens", "1,72,101,108,108,111", "--a", "naive",
                   "--b", "naive:step=1", "-n", "4", "--no-ref", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_compare, 11, f32, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "verdict: IDENTICAL"));
}

/* trace says why A and B part when the configurations tell: another row count per call for
 * blas (its kernel depends on the call's shape), or another backend. */
static void test_cli_trace_why(void)
{
    char model[1024], out[1 << 16];
    snprintf(model, sizeof model, "%s/trace-tiny.gguf", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(model, "tiny", 5, LM_TYPE_F32, &err), LM_OK);
    char *steps[] = {"trace", model, "--tokens", "1,72,101,108,108,111", "--a", "blas:step=1",
                     "--b", "blas", "--no-env", "-n", "0", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_trace, 11, steps, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "why: at pos 0 A computes a 1-row call and B a 6-row "
                                       "call"));
    char *backends[] = {"trace", model, "--tokens", "1,72,101,108,108,111", "--a", "naive",
                        "--b", "blas", "--no-env", "-n", "0", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_trace, 11, backends, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "why: other backends (naive vs blas)"));
}

/* MODEL is a GGUF path or synth:PRESET[:seed=N] for every command that takes one, and run and
 * judge read -f FILE as the others do: run synth:tiny -f FILE prints what run FILE.gguf -p TEXT
 * prints (the preset written into $KVDRIFT_CACHE), and ref, compare and trace load synth:tiny. */
static void test_cli_synth_model_and_file_everywhere(void)
{
    const char *text = "Hello world";
    char file[1024], cache[1024], model[1024], out[1 << 14], out2[1 << 14];
    snprintf(file, sizeof file, "%s", tu_write_file("run-prompt.txt", text, strlen(text)));
    snprintf(cache, sizeof cache, "%s/pf-cache", tu_tmpdir());
    snprintf(model, sizeof model, "%s/run-tiny.gguf", tu_tmpdir());
    const char *was = getenv("KVDRIFT_CACHE");
    char *saved = was ? strdup(was) : NULL; /* restored below: other suites find models by it */
    setenv("KVDRIFT_CACHE", cache, 1);
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(model, "tiny", 0, LM_TYPE_F32, &err), LM_OK);
    char *a1[] = {"run", "synth:tiny", "-f", file, "-n", "3", "--show-ids", NULL};
    char *a2[] = {"run", model, "-p", (char *)text, "-n", "3", "--show-ids", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_run, 7, a1, out, sizeof out), 0);
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_run, 7, a2, out2, sizeof out2), 0);
    char *ids1 = strstr(out, "prompt ids:"), *ids2 = strstr(out2, "prompt ids:");
    CU_ASSERT_FATAL(ids1 != NULL && ids2 != NULL);
    *strstr(ids1, "\nrun: ") = '\0'; /* the timing line differs */
    *strstr(ids2, "\nrun: ") = '\0';
    CU_ASSERT_STRING_EQUAL(out, out2);
    char *r[] = {"ref", "synth:tiny", "--tokens", "1,72,101", "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_ref, 5, r, out, sizeof out), 0);
    char *c[] = {"compare", "synth:tiny", "-f", file, "--a", "naive", "--b", "naive:step=1",
                 "-n", "2", "--no-ref", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_compare, 11, c, out, sizeof out), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "verdict: IDENTICAL"));
    char *t[] = {"trace", "synth:tiny", "--tokens", "1,72,101", "--a", "naive", "--b", "blas",
                 "-n", "1", "--no-envelope", "--brief", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_trace, 12, t, out, sizeof out), 0);
    /* judge reads -f (the missing file named, exit 2) and takes synth: (an absent dump named). */
    char *j1[] = {"judge", "synth:tiny", "-f", "/nonexistent/p.txt", "--dump", "/x", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 6, j1, out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "/nonexistent/p.txt"));
    char *j2[] = {"judge", "synth:tiny", "-f", file, "--dump", "/nonexistent-dump", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_judge, 6, j2, out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "/nonexistent-dump"));
    CU_ASSERT_PTR_NULL(strstr(out, "synth:tiny"));
    if (saved != NULL)
        setenv("KVDRIFT_CACHE", saved, 1);
    else
        unsetenv("KVDRIFT_CACHE");
    free(saved);
}

/* run --show-ids prints the prompt's ids in the form --tokens takes: fed back, they are the
 * same prompt and give the same continuation. */
static void test_cli_show_ids_feed_tokens(void)
{
    char model[1024], out[1 << 14], out2[1 << 14], ids[4096];
    snprintf(model, sizeof model, "%s/show-ids-tiny.gguf", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(model, "tiny", 0, LM_TYPE_F32, &err), LM_OK);
    char *a[] = {"run", model, "-p", "Hello world", "-n", "3", "--show-ids", NULL};
    CU_ASSERT_EQUAL_FATAL(tf_run_cmd(cmd_run, 7, a, out, sizeof out), 0);
    char *line = strstr(out, "prompt ids: ");
    CU_ASSERT_FATAL(line != NULL);
    size_t n = strcspn(line + strlen("prompt ids: "), "\n");
    CU_ASSERT_FATAL(n > 0 && n < sizeof ids);
    memcpy(ids, line + strlen("prompt ids: "), n);
    ids[n] = '\0';
    char *b[] = {"run", model, "--tokens", ids, "-n", "3", "--show-ids", NULL};
    CU_ASSERT_EQUAL_FATAL(tf_run_cmd(cmd_run, 7, b, out2, sizeof out2), 0);
    char *line2 = strstr(out2, "prompt ids: ");
    CU_ASSERT_FATAL(line2 != NULL);
    *strstr(line, "\nrun: ") = '\0'; /* prompt and generated ids; the timing line differs */
    *strstr(line2, "\nrun: ") = '\0';
    CU_ASSERT_STRING_EQUAL(line, line2);
}

/* synth --help names every preset synth accepts. */
static void test_cli_synth_help_lists_presets(void)
{
    char out[1 << 14];
    char *h[] = {"synth", "--help", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_synth, 2, h, out, sizeof out), 0);
    const char *name;
    for (size_t i = 0; (name = hx_synth_preset_name(i)) != NULL; ++i) {
        char want[80];
        snprintf(want, sizeof want, " %s (", name);
        if (strstr(out, want) == NULL)
            fprintf(stderr, "\n  synth --help does not list preset %s", name);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    }
}

/* A CONFIG field's bad value says what the field accepts (run --rot, --attn, --threads and
 * compare --a all go through the CONFIG grammar). */
static void test_cli_config_value_says_expected(void)
{
    char out[4096];
    static const char *const cases[][3] = {
        {"--rot", "2:5", "bad value '2/5' for rot (expected MAX/KEEP with MAX >= 2 and KEEP < MAX"},
        {"--attn", "sparse", "bad value 'sparse' for attn (expected dense or stream)"},
        {"--threads", "0", "bad value '0' for threads (expected an integer in 1..256 or all)"},
        {"--step", "0", "bad value '0' for step (expected an integer >= 1 or full)"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
        char *argv[] = {"run", "synth:tiny", "-p", "hi", (char *)cases[i][0], (char *)cases[i][1],
                        NULL};
        CU_ASSERT_EQUAL(tf_run_cmd(cmd_run, 6, argv, out, sizeof out), 2);
        if (strstr(out, cases[i][2]) == NULL)
            fprintf(stderr, "\n  wanted '%s' in: %s", cases[i][2], out);
        CU_ASSERT_PTR_NOT_NULL(strstr(out, cases[i][2]));
    }
    char *cmp[] = {"compare", "synth:tiny", "-p", "hi", "--a", "naive:profile=fp8", "--b", "naive",
                   NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_compare, 8, cmp, out, sizeof out), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "bad value 'fp8' for profile (expected f32, f16kv"));
}

void test_cli_prompt_register(void)
{
    CU_pSuite s = CU_add_suite("cli_prompt", NULL, NULL);
    CU_add_test(s, "test_cli_prompt_file_and_n_default", test_cli_prompt_file_and_n_default);
    CU_add_test(s, "test_cli_compare_verdict", test_cli_compare_verdict);
    CU_add_test(s, "test_cli_compare_parted", test_cli_compare_parted);
    CU_add_test(s, "test_cli_trace_why", test_cli_trace_why);
    CU_add_test(s, "test_cli_show_ids_feed_tokens", test_cli_show_ids_feed_tokens);
    CU_add_test(s, "test_cli_synth_help_lists_presets", test_cli_synth_help_lists_presets);
    CU_add_test(s, "test_cli_config_value_says_expected", test_cli_config_value_says_expected);
    CU_add_test(s, "test_cli_synth_model_and_file_everywhere",
                test_cli_synth_model_and_file_everywhere);
}
