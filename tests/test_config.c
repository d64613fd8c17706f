/* test_config.c — CONFIG strings: parse, canonical format, baseline, every error path. */
#include "model/config.h"
#include "test_util.h"

#include <stdlib.h>
#include <string.h>

static void roundtrip(const char *in, const char *canonical)
{
    hx_config c;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, in, &err), LM_OK);
    char buf[HX_CONFIG_STR_MAX];
    hx_config_format(buf, sizeof buf, &c);
    CU_ASSERT_STRING_EQUAL(buf, canonical);
    hx_config again;
    CU_ASSERT_EQUAL(hx_config_parse(&again, buf, &err), LM_OK);
    CU_ASSERT(hx_config_equal(&c, &again));
}

static void test_config_parse_and_canonical(void)
{
    roundtrip("blas:step=2048", "blas:step=2048");
    roundtrip("naive:step=1:threads=2", "naive:step=1:threads=2");
    roundtrip("blas:step=64:attn=dense", "blas:step=64:attn=dense");
    roundtrip("blas", "blas:step=full");                              /* missing step = full */
    roundtrip("blas:threads=2:step=full", "blas:step=full:threads=2"); /* key order canonical */
    roundtrip("naive:attn=stream:step=7:threads=1", "naive:step=7:threads=1:attn=stream");
    roundtrip("blas:step=4294967295", "blas:step=4294967295");
    hx_config c;
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_config_parse(&c, "naive:step=3:threads=2", &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(c.backend, "naive");
    CU_ASSERT_EQUAL(c.step, 3);
    CU_ASSERT_EQUAL(c.threads, 2);
    CU_ASSERT_EQUAL(c.attn, HX_ATTN_DEFAULT);
    hx_config b = hx_config_baseline(&c);
    CU_ASSERT_EQUAL(b.step, 0);
    CU_ASSERT_EQUAL(b.threads, 2);
    CU_ASSERT_STRING_EQUAL(b.backend, "naive");
    CU_ASSERT_FALSE(hx_config_equal(&b, &c));
    /* chunk invariance: the backend's flag, no speculation, no MLX rotating cache */
    static const struct { const char *cfg; bool inv; } inv[] = {
        {"naive:step=3", true},         {"det:step=7:threads=4", true},
        {"blas:step=3", false},         {"naive:step=3:rot=8/2", false},
        {"naive:step=3:rot=8/2/window", true},
    };
    for (size_t i = 0; i < sizeof inv / sizeof inv[0]; ++i) {
        CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, inv[i].cfg, &err), LM_OK);
        CU_ASSERT_EQUAL(hx_config_chunk_invariant(&c), inv[i].inv);
    }
}

/* The two-turn schedule: its key, its baseline, its split and the axis that adds it. */
static void test_config_turn(void)
{
    roundtrip("naive:turn=4:step=3", "naive:step=3:turn=4");
    roundtrip("naive:step=3:rot=8/2:turn=1", "naive:step=3:rot=8/2:turn=1");
    roundtrip("naive:step=3:turn=0", "naive:step=3");
    hx_config c;
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_config_parse(&c, "blas:step=2:turn=4", &err), LM_OK);
    hx_config b = hx_config_baseline(&c);
    CU_ASSERT_EQUAL(b.step, 0);
    CU_ASSERT_EQUAL(b.turn, 0);
    CU_ASSERT_EQUAL(hx_config_parse(&c, "blas:turn=4097", &err), LM_E_INPUT);
    uint32_t n1, d, n2;
    hx_turn_split(20, 4, &n1, &d, &n2); /* 8 + 4 + 8 */
    CU_ASSERT(n1 == 8 && d == 4 && n2 == 8);
    hx_turn_split(6, 4, &n1, &d, &n2); /* d shrinks to n - 3: 1 + 3 + 2 */
    CU_ASSERT(n1 == 1 && d == 3 && n2 == 2);
    hx_turn_split(3, 4, &n1, &d, &n2); /* too short: one prefill */
    CU_ASSERT(n1 == 3 && d == 0 && n2 == 0);
    hx_turn_split(9, 0, &n1, &d, &n2);
    CU_ASSERT(n1 == 9 && d == 0 && n2 == 0);
    static const char be[1][16] = {"naive"};
    static const uint32_t steps[] = {1, 2, 0};
    hx_config *v = NULL;
    size_t n = 0;
    CU_ASSERT_EQUAL_FATAL(hx_sweep_cross(&v, &n, be, 1, steps, 3, NULL, 0, NULL, 0, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_config_add_turns(&v, &n, 4, &err), LM_OK);
    /* step 1 has no multi-token chunk: no sibling; the others are followed by theirs */
    CU_ASSERT_EQUAL_FATAL(n, 5);
    CU_ASSERT(v[0].step == 1 && v[0].turn == 0);
    CU_ASSERT(v[1].step == 2 && v[1].turn == 0 && v[2].step == 2 && v[2].turn == 4);
    CU_ASSERT(v[3].step == 0 && v[3].turn == 0 && v[4].step == 0 && v[4].turn == 4);
    free(v);
}

static void bad(const char *in, const char *needle)
{
    hx_config c;
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_config_parse(&c, in, &err), LM_E_INPUT);
    if (strstr(err.msg, needle) == NULL)
        fprintf(stderr, "\n  message for '%s' lacks '%s': %s\n", in, needle, err.msg);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, needle));
}

static void test_config_errors(void)
{
    bad("", "empty");
    bad("gpu:step=1", "unknown backend 'gpu'");
    bad("blas:step=0", "bad value '0' for step");
    bad("blas:step=-1", "bad value");
    bad("blas:step=1x", "bad value");
    bad("blas:step=4294967296", "bad value"); /* UINT32_MAX + 1 */
    bad("blas:step=", "bad value");
    bad("blas:threads=0", "bad value");
    bad("blas:attn=sparse", "bad value 'sparse' for attn");
    bad("blas:chunk=4", "unknown key 'chunk'");
    bad("blas:step=1:step=2", "given twice");
    bad("blas:step", "not KEY=VALUE");
    bad("blas:", "not KEY=VALUE");
    bad("blas::step=1", "not KEY=VALUE");
}

/* threads=all: parsed, formatted back, resolved to every core (at least 2); the default axes;
 * a one-thread backend gets no `all` configurations. */
static void test_config_threads_all_and_default_axes(void)
{
    hx_config c;
    lm_err err = {0};
    char buf[HX_CONFIG_STR_MAX];
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, "blas:step=8:threads=all", &err), LM_OK);
    CU_ASSERT_EQUAL(c.threads, HX_THREADS_ALL);
    hx_config_format(buf, sizeof buf, &c);
    CU_ASSERT_STRING_EQUAL(buf, "blas:step=8:threads=all");
    CU_ASSERT(hx_config_n_threads(&c) >= 2);
    CU_ASSERT_EQUAL((uint32_t)hx_config_n_threads(&c), hx_threads_all());
    c.threads = 3;
    CU_ASSERT_EQUAL(hx_config_n_threads(&c), 3);

    hx_config *v = NULL;
    size_t n = 0;
    const hx_axes def = {0};
    CU_ASSERT_EQUAL_FATAL(hx_axes_configs(&v, &n, &def, &err), LM_OK);
    /* naive: 9 steps x threads 1 x 2 attn; blas: 9 x 2 x 2 */
    CU_ASSERT_EQUAL(n, 54u);
    size_t n_all = 0, n_stream = 0;
    for (size_t i = 0; i < n; ++i) {
        n_all += v[i].threads == HX_THREADS_ALL;
        n_stream += v[i].attn == HX_ATTN_STREAM;
        CU_ASSERT(!(v[i].threads == HX_THREADS_ALL && strcmp(v[i].backend, "naive") == 0));
    }
    CU_ASSERT_EQUAL(n_all, 18u);
    CU_ASSERT_EQUAL(n_stream, 27u);
    free(v);
    /* an explicit thread list is kept as given, one-thread backends included */
    const hx_axes two = {.backends = "naive", .steps = "full", .threads = "1,2", .attn = "dense"};
    CU_ASSERT_EQUAL_FATAL(hx_axes_configs(&v, &n, &two, &err), LM_OK);
    CU_ASSERT_EQUAL(n, 2u);
    free(v);
    /* `all` alone stays, even on naive */
    const hx_axes all = {.backends = "naive", .steps = "full", .threads = "all"};
    CU_ASSERT_EQUAL_FATAL(hx_axes_configs(&v, &n, &all, &err), LM_OK);
    CU_ASSERT_EQUAL(n, 2u);
    free(v);
    const hx_axes badt = {.threads = "1,every"};
    CU_ASSERT_EQUAL(hx_axes_configs(&v, &n, &badt, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--threads '1,every'"));
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "or all"));
    CU_ASSERT_PTR_NULL(v);
}

void test_config_register(void)
{
    CU_pSuite s = CU_add_suite("config", NULL, NULL);
    CU_add_test(s, "test_config_parse_and_canonical", test_config_parse_and_canonical);
    CU_add_test(s, "test_config_errors", test_config_errors);
    CU_add_test(s, "test_config_turn", test_config_turn);
    CU_add_test(s, "test_config_threads_all_and_default_axes",
                test_config_threads_all_and_default_axes);
}
