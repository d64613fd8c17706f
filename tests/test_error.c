/* test_error.c — the lm_err record and checked arithmetic. */
#include "kvd_common.h"
#include "test_util.h"

#include <string.h>

static void test_error_first_wins_and_one_line(void)
{
    lm_err err = {0};
    CU_ASSERT_EQUAL(LM_FAIL(&err, LM_E_INPUT, "%s: bad\nthing", "f.gguf"), LM_E_INPUT);
    CU_ASSERT_STRING_EQUAL(err.msg, "f.gguf: bad thing");
    CU_ASSERT_EQUAL(LM_FAIL(&err, LM_E_IO, "later"), LM_E_IO);
    CU_ASSERT_EQUAL(err.code, LM_E_INPUT);
    CU_ASSERT_STRING_EQUAL(err.msg, "f.gguf: bad thing");
    CU_ASSERT_EQUAL(lm_status_exit_code(LM_E_INPUT), 2);
    CU_ASSERT_EQUAL(lm_status_exit_code(LM_OK), 0);
    CU_ASSERT_EQUAL(lm_status_exit_code(LM_E_DISAGREE), 1); /* a finding about the engine */
}

static void test_error_checked_arithmetic(void)
{
    uint64_t r;
    CU_ASSERT_EQUAL(lm_mul_u64(&r, UINT64_C(1) << 32, UINT64_C(1) << 32), -1);
    CU_ASSERT_EQUAL(lm_mul_u64(&r, UINT64_C(1) << 31, UINT64_C(1) << 32), 0);
    CU_ASSERT_EQUAL(r, UINT64_C(1) << 63);
    CU_ASSERT_EQUAL(lm_add_u64(&r, UINT64_MAX, 1), -1);
    CU_ASSERT_EQUAL(lm_add_u64(&r, UINT64_MAX - 1, 1), 0);
    CU_ASSERT_EQUAL(r, UINT64_MAX);
}

void test_error_register(void)
{
    CU_pSuite s = CU_add_suite("error", NULL, NULL);
    CU_add_test(s, "test_error_first_wins_and_one_line", test_error_first_wins_and_one_line);
    CU_add_test(s, "test_error_checked_arithmetic", test_error_checked_arithmetic);
}
