/* test_envelope.c — the envelope statistic, its special cases, file round trip and the
 * cache key. */
#include "judge/envelope.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

enum { M = 8 };

/* R = (1, 2, 0); member m adds d_m = m * 1e-3 to element 0 only (then adds `offset` to every
 * element). Expected values are recomputed here from the members' float values in the order
 * the statistic states (envelope.h), so equality is exact. */
static void by_hand(hx_env_tensor *t, float offset)
{
    double r[3] = {1.0, 2.0, 0.0};
    float mem[M][3];
    const float *members[M];
    for (int m = 0; m < M; ++m) {
        mem[m][0] = (float)(1.0 + m * 1e-3) + offset;
        mem[m][1] = 2.0f + offset;
        mem[m][2] = 0.0f + offset;
        members[m] = mem[m];
    }
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_env_tensor_measure(t, members, M, r, 3, true, HX_ENVELOPE_SAFETY,
                                                &err), LM_OK);
    double mu = 0.0;
    for (int m = 0; m < M; ++m)
        mu += (double)mem[m][0];
    mu /= M;
    double dev = 0.0;
    for (int m = 0; m < M; ++m)
        dev = fmax(dev, fabs((double)mem[m][0] - mu));
    /* The spread around the mean: members 0 and 7 sit 3.5e-3 from it (not 7e-3, the old
     * distance-to-R statistic). Tolerance 1e-6: float rounding of 1 + m e-3 (ulp 1.2e-7). */
    CU_ASSERT_DOUBLE_EQUAL(dev, 3.5e-3, 1e-6);
    CU_ASSERT_EQUAL(t->dev, dev);
    CU_ASSERT_EQUAL(t->e, 2.0 * dev);
    /* Gap (top = element 1, identical in every member): |g_m - mean g| = |x_0 - mu_0|. */
    CU_ASSERT_EQUAL(t->gapdev, dev);
    CU_ASSERT_EQUAL(t->e_gap, 2.0 * dev);
    /* The bias: the members' mean minus R, largest over elements. */
    CU_ASSERT_EQUAL(t->bias, fmax(fabs(mu - 1.0), fabs((double)offset)));
    /* The deciding difference (R's top two: element 1, then element 0; D = 1): member m's is
     * x_1 - x_0, its deviation from D about -m e-3 (an offset shared by both cancels up to
     * float rounding), so split_sd = sqrt(mean of m^2 e-6) = sqrt(140 / 8) e-3 ~ 4.18e-3, the
     * RMS around R, not the sd around the mean (2.29e-3). Recomputed here in the statistic's
     * order: exact equality. */
    double ss = 0.0;
    for (int m = 0; m < M; ++m) {
        const double d = ((double)mem[m][1] - (double)mem[m][0]) - 1.0;
        ss += d * d;
    }
    CU_ASSERT_EQUAL(t->split_sd, sqrt(ss / M));
    /* Tolerance 1e-6: the float rounding of 1 + m e-3 + offset (ulp <= 9.5e-7 at 8). */
    CU_ASSERT_DOUBLE_EQUAL(t->split_sd, sqrt(140.0 / 8.0) * 1e-3, 1e-6);
    /* Spread: sd of {1 + m e-3} over 8 members ~ 2.449e-3 (sample sd of 0..7 is 2.449 * 1e-3),
     * |mu| max = 2 + offset: digits = -log10(2.449e-3 / (2 + offset)). Tolerance 1e-3: float
     * rounding of the members moves sd by ~1e-4 relative at most. */
    CU_ASSERT_DOUBLE_EQUAL(t->sig_digits,
                           -log10(sqrt(42.0 / 7.0) * 1e-3 / (2.0 + (double)offset)), 1e-3);
}

static void test_envelope_statistic_by_hand(void)
{
    hx_env_tensor t;
    by_hand(&t, 0.0f);
    /* K/V: no gap statistic; the safety factor multiplies dev. */
    double r[3] = {1.0, 2.0, 0.0};
    float mem[M][3];
    const float *members[M];
    for (int m = 0; m < M; ++m) {
        mem[m][0] = (float)(1.0 + m * 1e-3);
        mem[m][1] = 2.0f;
        mem[m][2] = 0.0f;
        members[m] = mem[m];
    }
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_env_tensor_measure(&t, members, M, r, 3, false, 3.0, &err), LM_OK);
    CU_ASSERT(isnan(t.gapdev) && isnan(t.e_gap) && isnan(t.split_sd));
    CU_ASSERT_EQUAL(t.e, 3.0 * t.dev);
}

/* A bias shared by every member (what a defect in the engine that computes the ensemble does)
 * must not widen the envelope: the same ensemble shifted by 0.25 (exact in float for these
 * values: same binade or exact sums) has bitwise the same E and E_gap; only bias grows. */
static void test_envelope_shared_offset_ignored(void)
{
    hx_env_tensor a, b;
    by_hand(&a, 0.0f);
    by_hand(&b, 0.25f);
    CU_ASSERT_EQUAL(a.dev, b.dev);
    CU_ASSERT_EQUAL(a.e, b.e);
    CU_ASSERT_EQUAL(a.gapdev, b.gapdev);
    CU_ASSERT_EQUAL(a.e_gap, b.e_gap);
    CU_ASSERT(b.bias >= 0.25 && a.bias < 0.01);
    /* And a shared offset far larger than the spread: E stays the spread's (3.5e-3 x 2), where
     * the distance to R (max |x - R| ~ 8 + 7e-3) would have hidden the offset itself. */
    hx_env_tensor c;
    by_hand(&c, 8.0f);
    CU_ASSERT(c.e < 0.01);
    CU_ASSERT(c.bias >= 8.0);
}

static void test_envelope_special_cases(void)
{
    double r[2] = {1.0, -1.0};
    float same[2] = {1.0f, -1.0f};
    const float *members[M];
    for (int m = 0; m < M; ++m)
        members[m] = same;
    hx_env_tensor t;
    lm_err err = {0};
    /* All members exact: E = 0, 17 digits. */
    CU_ASSERT_EQUAL(hx_env_tensor_measure(&t, members, M, r, 2, true, 2.0, &err), LM_OK);
    CU_ASSERT_EQUAL(t.e, 0.0);
    CU_ASSERT_EQUAL(t.e_gap, 0.0);
    CU_ASSERT_EQUAL(t.sig_digits, 17.0);
    /* n = 0 tensors are allowed for K/V (empty prompt slice): E = 0. */
    CU_ASSERT_EQUAL(hx_env_tensor_measure(&t, members, M, r, 0, false, 2.0, &err), LM_OK);
    CU_ASSERT_EQUAL(t.e, 0.0);
    /* ... but not for logits: no argmax. */
    CU_ASSERT_EQUAL(hx_env_tensor_measure(&t, members, M, r, 0, true, 2.0, &err), LM_E_INPUT);
    lm_err_clear(&err);
    /* Too few members. */
    CU_ASSERT_EQUAL(hx_env_tensor_measure(&t, members, M - 1, r, 2, false, 2.0, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "at least 8"));
    lm_err_clear(&err);
    /* A NaN or Inf member (R finite) is the engine's own failure: E = E_gap = 0, bias +Inf. */
    float bad[2] = {NAN, 1.0f};
    members[3] = bad;
    CU_ASSERT_EQUAL(hx_env_tensor_measure(&t, members, M, r, 2, false, 2.0, &err), LM_OK);
    CU_ASSERT(t.e == 0.0 && t.dev == 0.0 && isinf(t.bias) && isnan(t.e_gap));
    bad[0] = INFINITY;
    CU_ASSERT_EQUAL(hx_env_tensor_measure(&t, members, M, r, 2, true, 2.0, &err), LM_OK);
    CU_ASSERT(t.e == 0.0 && t.e_gap == 0.0 && isinf(t.bias));
    members[3] = same;
    double rnan[2] = {NAN, 0.0};
    CU_ASSERT_EQUAL(hx_env_tensor_measure(&t, members, M, rnan, 2, false, 2.0, &err), LM_E_INPUT);
    lm_err_clear(&err);
    hx_envelope *e;
    CU_ASSERT_EQUAL(hx_envelope_create(&e, 1, 1, NULL, 0.5, &err), LM_E_INPUT); /* safety < 1 */
}

static void fill(hx_envelope *e)
{
    for (uint32_t l = 0; l < e->n_layer; ++l) {
        e->k[l] = (hx_env_tensor){1e-7 * l, 2e-7 * l, (double)NAN, (double)NAN, 6.5, 1e-6 * l,
                                  (double)NAN};
        e->v[l] = (hx_env_tensor){3e-7, 6e-7, (double)NAN, (double)NAN, 6.0 + l, 4e-7,
                                  (double)NAN};
    }
    for (uint32_t p = 0; p < e->n_pos; ++p)
        e->logits[p] = (hx_env_tensor){1e-5, 2e-5, 3e-5 * p, 6e-5 * p, 5.25, 7e-6 * p, 9e-6 * p};
}

static void test_envelope_file_roundtrip(void)
{
    lm_err err = {0};
    uint32_t pos[3] = {5, 6, 9};
    hx_envelope *e, *back;
    CU_ASSERT_EQUAL_FATAL(hx_envelope_create(&e, 2, 3, pos, 2.0, &err), LM_OK);
    CU_ASSERT_FALSE(hx_envelope_complete(e));
    fill(e);
    CU_ASSERT(hx_envelope_complete(e));
    /* hidden states: unset until measured, then part of the file */
    CU_ASSERT_EQUAL_FATAL(hx_envelope_add_hidden(e, &err), LM_OK);
    CU_ASSERT_EQUAL(e->n_hidden, 3);
    CU_ASSERT_FALSE(hx_envelope_complete(e));
    for (uint32_t i = 0; i < e->n_hidden; ++i)
        e->hidden[i] = (hx_env_tensor){4e-6 * i, 8e-6 * i, NAN, NAN, 6.5, 1e-7 * i, NAN};
    CU_ASSERT(hx_envelope_complete(e));
    e->n_members = 8;
    const char *refkey = "00112233445566778899aabbccddeeff";
    hx_envelope_key(e->key, refkey, 8, 1, 2.0, NULL, 0);
    char path[1024];
    snprintf(path, sizeof path, "%s/env.bin", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_envelope_save(e, path, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_envelope_load(&back, path, e->key, &err), LM_OK);
    CU_ASSERT_EQUAL(back->n_layer, 2);
    CU_ASSERT_EQUAL(back->n_pos, 3);
    CU_ASSERT_EQUAL(back->n_members, 8);
    CU_ASSERT_EQUAL(back->safety, 2.0);
    CU_ASSERT_EQUAL(memcmp(back->positions, pos, sizeof pos), 0);
    for (uint32_t l = 0; l < 2; ++l) {
        CU_ASSERT_EQUAL(back->k[l].e, e->k[l].e);
        CU_ASSERT(isnan(back->k[l].e_gap));
        CU_ASSERT_EQUAL(back->v[l].sig_digits, e->v[l].sig_digits);
        CU_ASSERT_EQUAL(back->k[l].bias, e->k[l].bias);
    }
    for (uint32_t p = 0; p < 3; ++p) {
        CU_ASSERT_EQUAL(back->logits[p].e_gap, e->logits[p].e_gap);
        CU_ASSERT_EQUAL(back->logits[p].bias, e->logits[p].bias);
        CU_ASSERT_EQUAL(back->logits[p].split_sd, e->logits[p].split_sd);
    }
    CU_ASSERT_EQUAL_FATAL(back->n_hidden, 3);
    for (uint32_t i = 0; i < 3; ++i) {
        CU_ASSERT_EQUAL(back->hidden[i].e, e->hidden[i].e);
        CU_ASSERT_EQUAL(back->hidden[i].bias, e->hidden[i].bias);
    }
    hx_envelope_free(back);

    /* Stale key: refused. */
    uint8_t other[16];
    hx_envelope_key(other, "00112233445566778899aabbccddeefe", 8, 1, 2.0, NULL, 0);
    CU_ASSERT_EQUAL(hx_envelope_load(&back, path, other, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "stale"));
    lm_err_clear(&err);

    /* Every truncation is an error, never a crash. */
    FILE *f = fopen(path, "rb");
    CU_ASSERT_FATAL(f != NULL);
    unsigned char bytes[1024];
    size_t n = fread(bytes, 1, sizeof bytes, f);
    fclose(f);
    for (size_t cut = 0; cut < n; cut += (cut < 64 ? 1 : 37)) {
        const char *p = tu_write_file("env-cut.bin", bytes, cut);
        CU_ASSERT_EQUAL(hx_envelope_load(&back, p, e->key, &err), LM_E_INPUT);
        CU_ASSERT_PTR_NULL(back);
        lm_err_clear(&err);
    }
    /* Every single-bit flip anywhere in the file is detected (the checksum trailer), never
     * loaded as an envelope with changed numbers. */
    size_t used = 0;
    for (size_t bit = 0; bit < 8 * n; ++bit) {
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        const char *fp = tu_write_file("env-flip.bin", bytes, n);
        int rc = hx_envelope_load(&back, fp, e->key, &err);
        bytes[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        used += rc == LM_OK;
        hx_envelope_free(back);
        back = NULL;
        lm_err_clear(&err);
    }
    CU_ASSERT_EQUAL(used, 0);
    bytes[n] = 0;
    const char *p = tu_write_file("env-long.bin", bytes, n + 1);
    CU_ASSERT_EQUAL(hx_envelope_load(&back, p, e->key, &err), LM_E_INPUT);
    lm_err_clear(&err);
    bytes[8] = 1; /* version 1: distance-to-R statistic, refused */
    p = tu_write_file("env-ver.bin", bytes, n);
    CU_ASSERT_EQUAL(hx_envelope_load(&back, p, e->key, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "version"));
    lm_err_clear(&err);
    snprintf(path, sizeof path, "%s/absent.bin", tu_tmpdir());
    CU_ASSERT_EQUAL(hx_envelope_load(&back, path, e->key, &err), LM_E_IO);
    hx_envelope_free(e);
}

static void test_envelope_cache_key(void)
{
    const char *k1 = "00112233445566778899aabbccddeeff", *k2 = "00112233445566778899aabbccddeefe";
    uint8_t a[16], b[16];
    hx_envelope_key(a, k1, 8, 7, 2.0, NULL, 0);
    hx_envelope_key(b, k1, 8, 7, 2.0, NULL, 0);
    CU_ASSERT_EQUAL(memcmp(a, b, 16), 0); /* deterministic */
    /* Each input changes the key. */
    hx_envelope_key(b, k2, 8, 7, 2.0, NULL, 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 16), 0);
    hx_envelope_key(b, k1, 9, 7, 2.0, NULL, 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 16), 0);
    hx_envelope_key(b, k1, 8, 8, 2.0, NULL, 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 16), 0);
    hx_envelope_key(b, k1, 8, 7, 3.0, NULL, 0);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 16), 0);
    hx_envelope_key(b, k1, 8, 7, 2.0, "sr", 2);
    CU_ASSERT_NOT_EQUAL(memcmp(a, b, 16), 0);
    char path[64];
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_envelope_cache_path(path, sizeof path, "/c", a, &err), LM_OK);
    CU_ASSERT_EQUAL(strlen(path), 3 + 32 + 7);
    CU_ASSERT_PTR_NOT_NULL(strstr(path, ".kvdenv"));
    CU_ASSERT_EQUAL(hx_envelope_cache_path(path, 20, "/c", a, &err), LM_E_INPUT);
}

void test_envelope_register(void)
{
    CU_pSuite s = CU_add_suite("envelope", NULL, NULL);
    CU_add_test(s, "test_envelope_statistic_by_hand", test_envelope_statistic_by_hand);
    CU_add_test(s, "test_envelope_shared_offset_ignored", test_envelope_shared_offset_ignored);
    CU_add_test(s, "test_envelope_special_cases", test_envelope_special_cases);
    CU_add_test(s, "test_envelope_file_roundtrip", test_envelope_file_roundtrip);
    CU_add_test(s, "test_envelope_cache_key", test_envelope_cache_key);
}
