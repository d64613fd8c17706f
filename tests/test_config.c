/* test_config.c — CONFIG strings: parse, canonical format, baseline, every error path. */
#include "config.h"
#include "test_util.h"

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

void test_config_register(void)
{
    CU_pSuite s = CU_add_suite("config", NULL, NULL);
    CU_add_test(s, "test_config_parse_and_canonical", test_config_parse_and_canonical);
    CU_add_test(s, "test_config_errors", test_config_errors);
}
