/* test_pyadapters.c — the shipped MLX and transformers adapters (adapters/mlx,
 * adapters/transformers) driving their real engines on real models: `kvdrift sweep --engine`
 * over their knobs on stories260K, each configuration judged under the profile it implies; the
 * hidden/ states both write (the same embedding rows bit for bit, the same residual stream
 * within float32 noise); their cases with goldens (cases/mlx-stories.case,
 * cases/transformers-stories.case) through `kvdrift check`; Gemma 3 270M and SmolLM2 where
 * present. They take minutes on two cores, so they run under `make test-adapters` (which sets
 * KVDRIFT_ADAPTER_TESTS=1) and print a SKIP line elsewhere, as they do when an adapter's venv is
 * absent (make adapters ADAPTERS="mlx transformers") or a model file is. */
#include "cli/commands.h"
#include "fixtures.h"
#include "fs.h"
#include "model/adapter.h"
#include "npy.h"
#include "plan/adapter_resolve.h"
#include "run/adapter_exec.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* stories260K ids (14, BOS first) */
#define STORIES_IDS "1,403,407,261,378,275,263,130,31,104,471,4,2,300"
#define STORIES_N 14
#define STORIES_EMBD 64
#define STORIES_LAYERS 5

/* The model's full path when the adapter tests run here and adapter and model are present;
 * NULL after a SKIP line saying which is missing. */
static const char *ready(const char *adapter, const char *model, char *buf, size_t cap)
{
    const char *on = getenv("KVDRIFT_ADAPTER_TESTS");
    if (on == NULL || strcmp(on, "1") != 0) {
        printf("\n  SKIP %s adapter: runs under make test-adapters (minutes of a real engine)\n  ",
               adapter);
        return NULL;
    }
    const char *path = tu_model_path(model);
    if (path == NULL)
        return NULL;
    snprintf(buf, cap, "%s", path);
    char exe[64];
    snprintf(exe, sizeof exe, "adapters/%s", adapter);
    hx_adapter_desc d;
    lm_err e = {0};
    if (hx_adapter_describe(&d, exe, &e) != LM_OK) {
        printf("\n  SKIP %s adapter: %s (make adapters ADAPTERS=%s installs it)\n  ", adapter, e.msg,
               adapter);
        return NULL;
    }
    CU_ASSERT_STRING_EQUAL(d.adapter, adapter);
    return buf;
}

/* `kvdrift sweep MODEL PROMPT_OPT PROMPT --engine adapters/ADAPTER` (PROMPT_OPT --tokens or
 * -p) with an --axis per axes[n_axes] ("KEY=V,...") and -n n_gen; its text into text[cap], its
 * exit code returned. */
static int sweep(const char *adapter, const char *model, const char *prompt_opt,
                 const char *prompt, const char **axes, int n_axes, const char *n_gen, char *text,
                 size_t cap)
{
    char exe[64], cache[1100], out[1100];
    snprintf(exe, sizeof exe, "adapters/%s", adapter);
    snprintf(cache, sizeof cache, "%s/%s-cache", tu_tmpdir(), adapter);
    snprintf(out, sizeof out, "%s/%s-sweep", tu_tmpdir(), adapter);
    char *a[32] = {"sweep", (char *)model, (char *)prompt_opt, (char *)prompt, "--engine", exe, "-n",
                   (char *)n_gen, "--cache", cache, "-o", out, "-q"};
    int n = 13;
    for (int i = 0; i < n_axes; ++i) {
        a[n++] = "--axis";
        a[n++] = (char *)axes[i];
    }
    a[n] = NULL;
    int rc = tf_run_cmd(cmd_sweep, n, a, text, cap);
    printf("\n%s\n", text);
    return rc;
}

/* Each of lines[] (NULL-terminated) is in text, and no ERROR row is. */
static void assert_lines(const char *text, const char *const *lines)
{
    for (; *lines != NULL; ++lines)
        if (strstr(text, *lines) == NULL) {
            printf("\n  missing: %s\n", *lines);
            CU_FAIL("a configuration's line is missing");
        }
    CU_ASSERT_PTR_NULL(strstr(text, "ERROR"));
}

/* MLX on stories260K: prefill in chunks of 1 and 7 and the default 2048, float32 and bfloat16,
 * mlx-lm's cache and a plain one: every float32 configuration within float32's envelope, every
 * bfloat16 one within bf16's. */
static void test_pyadapters_mlx_stories(void)
{
    char model[1100], text[32768];
    if (ready("mlx", "stories260K.gguf", model, sizeof model) == NULL)
        return;
    const char *axes[] = {"prefill_step_size=1,7", "dtype=float32,bfloat16", "cache=plain"};
    CU_ASSERT_EQUAL(sweep("mlx", model, "--tokens", STORIES_IDS, axes, 3, "4", text, sizeof text), 0);
    const char *const lines[] = {
        "mlx: profile f32, explained",
        "mlx:prefill_step_size=1:cache=plain: profile f32, explained",
        "mlx:prefill_step_size=7:cache=plain: profile f32, explained",
        "mlx:prefill_step_size=1:dtype=bfloat16:cache=plain: profile bf16, explained",
        "mlx:prefill_step_size=7:dtype=bfloat16:cache=plain: profile bf16, explained", NULL};
    assert_lines(text, lines);
}

/* transformers on stories260K: eager and sdpa attention, float32 and bfloat16. */
static void test_pyadapters_transformers_stories(void)
{
    char model[1100], text[32768];
    if (ready("transformers", "stories260K.gguf", model, sizeof model) == NULL)
        return;
    const char *axes[] = {"dtype=float32,bfloat16", "attn_implementation=eager,sdpa"};
    CU_ASSERT_EQUAL(sweep("transformers", model, "--tokens", STORIES_IDS, axes, 2, "4", text, sizeof text), 0);
    const char *const lines[] = {
        "transformers: profile f32, explained",
        "transformers:attn_implementation=eager: profile f32, explained",
        "transformers:dtype=bfloat16:attn_implementation=eager: profile bf16, explained",
        "transformers:dtype=bfloat16: profile bf16, explained", NULL};
    assert_lines(text, lines);
}

/* Runs adapters/ADAPTER on stories260K's ids with -n 2 into a fresh folder out. */
static bool run_adapter(const char *adapter, const char *model, char *out, size_t cap)
{
    char exe[64];
    snprintf(exe, sizeof exe, "adapters/%s", adapter);
    snprintf(out, cap, "%s/%s-dump", tu_tmpdir(), adapter);
    lm_err e = {0};
    CU_ASSERT_EQUAL_FATAL(lm_mkdir_p(out, &e), LM_OK);
    char *argv[] = {exe, "--model", (char *)model, "--tokens", STORIES_IDS, "--n-gen", "2",
                    "--out", out, NULL};
    hx_exec_result res;
    CU_ASSERT_EQUAL_FATAL(hx_exec_run(&res, exe, argv, 600.0, 4096, &e), LM_OK);
    if (res.exit_code != 0)
        printf("\n  %s: exit %d: %s\n", adapter, res.exit_code, res.err_line);
    return res.exit_code == 0;
}

/* hidden/NAME of dump dir as float32 [STORIES_N][STORIES_EMBD] into x; false when absent or
 * of another shape. */
static bool read_hidden(const char *dir, const char *name, float *x)
{
    char path[1300], *buf = NULL;
    size_t n = 0;
    lm_err e = {0};
    snprintf(path, sizeof path, "%s/hidden/%s", dir, name);
    if (lm_read_file(&buf, &n, path, 1u << 20, &e) != LM_OK) {
        printf("\n  %s\n", e.msg);
        return false;
    }
    hx_npy a;
    bool ok = hx_npy_parse(&a, buf, n, path, &e) == LM_OK && a.dtype == HX_NPY_F32
           && a.ndim == 2 && a.shape[0] == STORIES_N && a.shape[1] == STORIES_EMBD;
    for (uint64_t i = 0; ok && i < (uint64_t)STORIES_N * STORIES_EMBD; ++i)
        x[i] = hx_npy_get_f32(&a, i);
    free(buf);
    return ok;
}

/* Both adapters' hidden/: embed.npy is the embedding table's rows (a lookup: equal bit for
 * bit), layer00..layer04 the residual stream after each layer, where the two float32 engines
 * agree to within 1e-4 of the layer's largest magnitude (float32 noise over 5 layers of width
 * 64 is about 1e-6 of it; a layer off by one or a normed output differs by far more). */
static void test_pyadapters_hidden_agree(void)
{
    char model[1100], mlx_out[1100], tf_out[1100];
    if (ready("mlx", "stories260K.gguf", model, sizeof model) == NULL
        || ready("transformers", "stories260K.gguf", model, sizeof model) == NULL)
        return;
    if (!run_adapter("mlx", model, mlx_out, sizeof mlx_out)
        || !run_adapter("transformers", model, tf_out, sizeof tf_out)) {
        CU_FAIL("an adapter failed");
        return;
    }
    static float a[STORIES_N * STORIES_EMBD], b[STORIES_N * STORIES_EMBD];
    CU_ASSERT_FATAL(read_hidden(mlx_out, "embed.npy", a) && read_hidden(tf_out, "embed.npy", b));
    CU_ASSERT_EQUAL(memcmp(a, b, sizeof a), 0);
    for (int l = 0; l < STORIES_LAYERS; ++l) {
        char name[32];
        snprintf(name, sizeof name, "layer%02d.npy", l);
        CU_ASSERT_FATAL(read_hidden(mlx_out, name, a) && read_hidden(tf_out, name, b));
        double big = 0;
        for (size_t i = 0; i < STORIES_N * STORIES_EMBD; ++i)
            big = fmax(big, fabs(a[i]));
        CU_ASSERT(tu_max_abs_diff(a, b, STORIES_N * STORIES_EMBD) <= 1e-4 * big);
    }
    char past[1300];
    snprintf(past, sizeof past, "%s/hidden/layer%02d.npy", mlx_out, STORIES_LAYERS);
    CU_ASSERT_EQUAL(access(past, F_OK), -1); /* one file per layer, no more */
}

/* cases/ADAPTER-stories.case against its goldens in cases/golden: every configuration's bits
 * as blessed here (a stale or absent golden fails). */
static void check_case(const char *adapter)
{
    char model[1100], text[32768], kase[128], cache[1100];
    if (ready(adapter, "stories260K.gguf", model, sizeof model) == NULL)
        return;
    snprintf(kase, sizeof kase, "cases/%s-stories.case", adapter);
    snprintf(cache, sizeof cache, "%s/%s-check-cache", tu_tmpdir(), adapter);
    char *a[] = {"check", kase, "--golden-dir", "cases/golden", "--cache", cache, "-q", NULL};
    int rc = tf_run_cmd(cmd_check, 7, a, text, sizeof text);
    printf("\n%s\n", text);
    CU_ASSERT_EQUAL(rc, 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "0 mismatch, 0 absent, 0 stale"));
}

static void test_pyadapters_mlx_case_goldens(void)
{
    check_case("mlx");
}

static void test_pyadapters_transformers_case_goldens(void)
{
    check_case("transformers");
}

/* SmolLM2 (Q4_1) on both: float32 within float32's envelope at chunk sizes 7 and 2048 (MLX)
 * and with eager and sdpa attention (transformers). */
static void test_pyadapters_smollm2(void)
{
    char model[1100], text[32768];
    const char *text_in = "Once upon a time, there was a little girl named Lily. She";
    if (ready("mlx", "SmolLM2-135M-Instruct.Q4_1.gguf", model, sizeof model) != NULL) {
        const char *axes[] = {"prefill_step_size=7"};
        CU_ASSERT_EQUAL(sweep("mlx", model, "-p", text_in, axes, 1, "4", text, sizeof text), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "mlx:prefill_step_size=7: profile f32, explained"));
    }
    if (ready("transformers", "SmolLM2-135M-Instruct.Q4_1.gguf", model, sizeof model) != NULL) {
        const char *axes[] = {"attn_implementation=eager"};
        CU_ASSERT_EQUAL(sweep("transformers", model, "-p", text_in, axes, 1, "4", text, sizeof text), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "transformers:attn_implementation=eager: profile f32, explained"));
    }
}

/* Gemma 3 270M on MLX in float32: mlx-lm 0.32.2 scales the embedding by sqrt(640) rounded to
 * bfloat16 (25.25, not 25.298) whatever the dtype, so layer 0's K (after its own RMSNorm) is
 * within float32's envelope and layer 1's is the first outside: the sweep fails, and says
 * where. transformers scales by the float32 sqrt(640): explained by f32. */
static void test_pyadapters_gemma3(void)
{
    char model[1100], text[32768];
    const char *text_in = "The capital of France is a city that";
    if (ready("mlx", "gemma-3-270m-q4_k_m.gguf", model, sizeof model) != NULL) {
        CU_ASSERT_EQUAL(sweep("mlx", model, "-p", text_in, NULL, 0, "4", text, sizeof text), 1);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "mlx: profile -, NOT explained"));
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "K/V: first outside the envelope at layer 1, position 0"));
    }
    if (ready("transformers", "gemma-3-270m-q4_k_m.gguf", model, sizeof model) != NULL) {
        CU_ASSERT_EQUAL(sweep("transformers", model, "-p", text_in, NULL, 0, "4", text, sizeof text), 0);
        CU_ASSERT_PTR_NOT_NULL(strstr(text, "transformers: profile f32, explained"));
    }
}

void test_pyadapters_register(void)
{
    CU_pSuite s = CU_add_suite("pyadapters", NULL, NULL);
    CU_add_test(s, "test_pyadapters_mlx_stories", test_pyadapters_mlx_stories);
    CU_add_test(s, "test_pyadapters_transformers_stories", test_pyadapters_transformers_stories);
    CU_add_test(s, "test_pyadapters_hidden_agree", test_pyadapters_hidden_agree);
    CU_add_test(s, "test_pyadapters_mlx_case_goldens", test_pyadapters_mlx_case_goldens);
    CU_add_test(s, "test_pyadapters_transformers_case_goldens",
                test_pyadapters_transformers_case_goldens);
    CU_add_test(s, "test_pyadapters_smollm2", test_pyadapters_smollm2);
    CU_add_test(s, "test_pyadapters_gemma3", test_pyadapters_gemma3);
}
