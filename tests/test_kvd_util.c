/* test_kvd_util.c — the shared helpers of common/kvd_util.h: strict unsigned parsing at its
 * boundaries, seeds, hex both ways, index lookup, one-line fields, word lists, the clock, the
 * finiteness scan. */
#include "kvd_util.h"
#include "test_util.h"

#include <float.h>
#include <math.h>
#include <string.h>

static void test_kvd_util_parse_unsigned(void)
{
    uint64_t v = 7;
    uint32_t u = 7;
    CU_ASSERT(lm_parse_u64z("0", 0, 10, &v) && v == 0);
    CU_ASSERT(lm_parse_u64z("18446744073709551615", 0, UINT64_MAX, &v) && v == UINT64_MAX);
    CU_ASSERT_FALSE(lm_parse_u64z("18446744073709551616", 0, UINT64_MAX, &v)); /* overflow */
    CU_ASSERT_FALSE(lm_parse_u64z("99999999999999999999999", 0, UINT64_MAX, &v));
    CU_ASSERT(lm_parse_u64z("007", 0, 10, &v) && v == 7); /* leading zeros are digits */
    static const char *const bad[] = {"", "-1", "+1", " 1", "1 ", "0x10", "1e3", "1.0", "a"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i)
        CU_ASSERT_FALSE(lm_parse_u64z(bad[i], 0, UINT64_MAX, &v));
    CU_ASSERT_FALSE(lm_parse_u64z(NULL, 0, 1, &v));
    CU_ASSERT(lm_parse_u32z("4294967295", 0, UINT32_MAX, &u) && u == UINT32_MAX);
    CU_ASSERT_FALSE(lm_parse_u32z("4294967296", 0, UINT32_MAX, &u));
    u = 5;
    CU_ASSERT_FALSE(lm_parse_u32z("0", 1, 9, &u)); /* below lo */
    CU_ASSERT_FALSE(lm_parse_u32z("10", 1, 9, &u)); /* above hi */
    CU_ASSERT_EQUAL(u, 5u); /* untouched on failure */
    CU_ASSERT(lm_parse_u32("12,3", 2, 1, 99, &u) && u == 12); /* a slice of a list */
    CU_ASSERT_FALSE(lm_parse_u32("12,3", 3, 1, 99, &u));
}

static void test_kvd_util_parse_seed(void)
{
    uint64_t v = 0;
    CU_ASSERT(lm_parse_seed("42", &v) && v == 42);
    CU_ASSERT(lm_parse_seed("0x6b76647269667431", &v) && v == 0x6b76647269667431ull);
    CU_ASSERT(lm_parse_seed("0XfFfFfFfFfFfFfFfF", &v) && v == UINT64_MAX);
    CU_ASSERT_FALSE(lm_parse_seed("0x10000000000000000", &v)); /* 65 bits */
    CU_ASSERT_FALSE(lm_parse_seed("0x", &v));
    CU_ASSERT_FALSE(lm_parse_seed("0xg", &v));
    CU_ASSERT_FALSE(lm_parse_seed("-3", &v));
    CU_ASSERT(lm_parse_seed("010", &v) && v == 10); /* decimal, not octal */
}

static void test_kvd_util_hex_and_index(void)
{
    const uint8_t b[4] = {0x00, 0x9f, 0xa0, 0xff};
    char hex[9];
    lm_hex_encode(hex, b, 4);
    CU_ASSERT_STRING_EQUAL(hex, "009fa0ff");
    uint8_t back[4] = {0};
    CU_ASSERT(lm_hex_decode(back, 4, "009FA0ff"));
    CU_ASSERT_EQUAL(memcmp(back, b, 4), 0);
    CU_ASSERT_FALSE(lm_hex_decode(back, 4, "009fa0f"));   /* odd length */
    CU_ASSERT_FALSE(lm_hex_decode(back, 4, "009fa0ffa0")); /* too long */
    CU_ASSERT_FALSE(lm_hex_decode(back, 4, "009fa0fg"));
    const uint32_t v[5] = {3, 9, 4, 9, 0};
    CU_ASSERT_EQUAL(lm_index_of_u32(v, 5, 9), 1); /* the first one */
    CU_ASSERT_EQUAL(lm_index_of_u32(v, 5, 0), 4);
    CU_ASSERT_EQUAL(lm_index_of_u32(v, 5, 7), -1);
    CU_ASSERT_EQUAL(lm_index_of_u32(v, 0, 3), -1);
}

static void test_kvd_util_text(void)
{
    char f[16];
    lm_field_copy(f, sizeof f, "a;b\nc  ");
    CU_ASSERT_STRING_EQUAL(f, "a b c");
    lm_field_copy(f, sizeof f, NULL);
    CU_ASSERT_STRING_EQUAL(f, "unknown");
    lm_field_copy(f, 4, "abcdef");
    CU_ASSERT_STRING_EQUAL(f, "abc");
    char w[64] = "";
    static const char *const words[] = {"naive", "blas", "det"};
    for (size_t i = 0; i < 3; ++i)
        lm_words_append(w, sizeof w, i, 3, words[i], " or ");
    CU_ASSERT_STRING_EQUAL(w, "naive, blas or det");
    char one[8] = "";
    lm_words_append(one, sizeof one, 0, 1, "llama", " and ");
    CU_ASSERT_STRING_EQUAL(one, "llama");
    const double t0 = lm_now_s(), t1 = lm_now_s();
    CU_ASSERT(t1 >= t0); /* monotonic */
}

/* lm_all_finite against isfinite on every length 0..200 with one special value at every index,
 * the finite extremes (largest float, smallest subnormal, -0) never counted as non-finite. */
static void test_kvd_util_all_finite(void)
{
    enum { N = 200 };
    float x[N] = {0};
    const float finite[] = {FLT_MAX, -FLT_MAX, 0x1p-149f, -0.0f, 1.0f};
    const float special[] = {NAN, -NAN, INFINITY, -INFINITY};
    for (size_t n = 0; n <= N; ++n) {
        for (size_t i = 0; i < n; ++i)
            x[i] = finite[i % (sizeof finite / sizeof finite[0])];
        CU_ASSERT_TRUE(lm_all_finite(x, n));
        for (size_t at = 0; at < n; ++at)
            for (size_t s = 0; s < sizeof special / sizeof special[0]; ++s) {
                const float keep = x[at];
                x[at] = special[s];
                CU_ASSERT_FALSE(lm_all_finite(x, n));
                CU_ASSERT_TRUE(lm_all_finite(x, at)); /* the prefix before it */
                x[at] = keep;
            }
    }
}

void test_kvd_util_register(void)
{
    CU_pSuite s = CU_add_suite("kvd_util", NULL, NULL);
    CU_add_test(s, "test_kvd_util_parse_unsigned", test_kvd_util_parse_unsigned);
    CU_add_test(s, "test_kvd_util_parse_seed", test_kvd_util_parse_seed);
    CU_add_test(s, "test_kvd_util_hex_and_index", test_kvd_util_hex_and_index);
    CU_add_test(s, "test_kvd_util_text", test_kvd_util_text);
    CU_add_test(s, "test_kvd_util_all_finite", test_kvd_util_all_finite);
}
