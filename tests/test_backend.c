/* test_backend.c — every registered backend (the registry is iterated, as ggml's
 * test-backend-ops does, so a new backend is tested without editing this file): gemm_nt /
 * gemm_nn against a double-precision reference at a stated bound, special shapes, split
 * invariance (bitwise) for LM_BE_CHUNK_INVARIANT backends, and the registry itself. */
#include "../engine/backend.h"
#include "kvd_engine.h"
#include "fixtures.h"
#include "test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_BACKENDS lm_backend_count()
#define NAME(b) (lm_backend_at(b)->name)
#define FLAGS(b) (lm_backend_at(b)->flags)

/* NULL, with one visible line per backend, when a LM_BE_DEVICE backend finds no device here:
 * its tests are skipped, never passed. */
static lm_backend *make(const char *name, int threads)
{
    lm_backend *be = NULL;
    lm_err err = {0};
    const int rc = lm_backend_create(&be, name, threads, &err);
    if (rc == LM_E_UNSUPPORTED && (lm_backend_flags(name) & LM_BE_DEVICE)) {
        static char skipped[512];
        if (strstr(skipped, name) == NULL) {
            fprintf(stderr, "\n  SKIP backend %s: %s\n", name, err.msg);
            strncat(skipped, name, sizeof skipped - strlen(skipped) - 2);
            strcat(skipped, " ");
        }
        return NULL;
    }
    CU_ASSERT_FATAL(rc == LM_OK);
    CU_ASSERT_STRING_EQUAL(be->vt->name, name);
    return be;
}

static void test_backend_unknown_name(void)
{
    lm_backend *be = (lm_backend *)1;
    lm_err err = {0};
    CU_ASSERT_EQUAL(lm_backend_create(&be, "cuda-x", 1, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(be);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "cuda-x"));
    lm_backend_destroy(NULL); /* accepts NULL */
    /* a seed is taken only by a seeded backend */
    lm_err e2 = {0};
    for (size_t b = 0; b < N_BACKENDS; ++b) {
        char name[LM_BACKEND_NAME_MAX];
        lm_backend_seeded_name(name, sizeof name, NAME(b), 3);
        be = NULL;
        const int rc = lm_backend_create(&be, name, 1, &e2);
        CU_ASSERT_EQUAL(rc, (FLAGS(b) & LM_BE_SEEDED) ? LM_OK : LM_E_INPUT);
        lm_backend_destroy(be);
    }
}

/* The registry: unique names, every name found by lm_backend_find and lm_backend_flags, the
 * user-choosable ones (not seeded) listed in lm_backend_expected and accepted by
 * lm_backend_known, describe hooks writing one line. */
static void test_backend_registry(void)
{
    CU_ASSERT_FATAL(N_BACKENDS >= 1);
    CU_ASSERT_PTR_NULL(lm_backend_at(N_BACKENDS));
    const char *expected = lm_backend_expected();
    size_t n_user = 0;
    for (size_t b = 0; b < N_BACKENDS; ++b) {
        const lm_backend_info *i = lm_backend_at(b);
        CU_ASSERT_PTR_NOT_NULL_FATAL(i->name);
        CU_ASSERT(strlen(i->name) > 0 && strlen(i->name) < 16); /* fits hx_config.backend */
        CU_ASSERT_PTR_NULL(strchr(i->name, ':'));
        CU_ASSERT(i->summary != NULL && strchr(i->summary, '\n') == NULL);
        for (size_t o = 0; o < b; ++o)
            CU_ASSERT_STRING_NOT_EQUAL(lm_backend_at(o)->name, i->name);
        CU_ASSERT_PTR_EQUAL(lm_backend_find(i->name, strlen(i->name)), i);
        CU_ASSERT_EQUAL(lm_backend_flags(i->name), i->flags);
        const bool user = !(i->flags & LM_BE_SEEDED);
        n_user += user;
        CU_ASSERT_EQUAL(lm_backend_known(i->name, strlen(i->name)), user);
        CU_ASSERT_EQUAL(strstr(expected, i->name) != NULL, user);
        lm_backend *be = make(i->name, 1);
        if (i->describe != NULL && be != NULL) { /* a device backend without its device: "" */
            char full[320] = "", brief[96] = "";
            i->describe(full, sizeof full, false);
            i->describe(brief, sizeof brief, true);
            /* empty: nothing on the machine decides the bits (det); else key=value parts */
            CU_ASSERT(strpbrk(full, "\n\r") == NULL);
            CU_ASSERT(full[0] == '\0' || strchr(full, '=') != NULL);
            CU_ASSERT(strlen(brief) > 0 && strpbrk(brief, "\n\r ;") == NULL);
        }
        lm_backend_destroy(be);
    }
    CU_ASSERT(n_user >= 1);
    CU_ASSERT_EQUAL(lm_backend_flags("no-such-backend"), 0u);
    CU_ASSERT_PTR_NULL(lm_backend_find("naiv", 4));
    CU_ASSERT_FALSE(lm_backend_known("", 0));
}

/* m = 0 or n = 0 writes nothing; k = 0 writes exact zeros (an empty sum); a NaN in a row of
 * A reaches every output of that row and no other row. */
static void test_backend_special_shapes(void)
{
    for (size_t b = 0; b < N_BACKENDS; ++b) {
        lm_backend *be = make(NAME(b), 1);
        if (be == NULL)
            continue;
        float a[2 * 3] = {1, 2, 3, 4, 5, 6}, w[4 * 3] = {1, 0, 0, 0, 1, 0, 0, 0, 1, 1, 1, 1};
        float c[2 * 4];
        for (int i = 0; i < 8; ++i)
            c[i] = 42.0f;
        be->vt->gemm_nt(be, 0, 4, 3, 1.0f, a, 3, w, 3, c, 4);
        be->vt->gemm_nt(be, 2, 0, 3, 1.0f, a, 3, w, 3, c, 4);
        for (int i = 0; i < 8; ++i)
            CU_ASSERT_EQUAL(c[i], 42.0f);
        for (uint32_t m = 1; m <= 2; ++m) { /* m = 1 takes the sgemv path in blas */
            be->vt->gemm_nt(be, m, 4, 0, 1.0f, a, 3, w, 3, c, 4);
            for (uint32_t i = 0; i < 4 * m; ++i)
                CU_ASSERT_EQUAL(c[i], 0.0f);
            be->vt->gemm_nn(be, m, 4, 0, a, 3, w, 4, c, 4);
            for (uint32_t i = 0; i < 4 * m; ++i)
                CU_ASSERT_EQUAL(c[i], 0.0f);
        }
        /* exact small integers: every order gives the same result */
        be->vt->gemm_nt(be, 2, 4, 3, 2.0f, a, 3, w, 3, c, 4);
        const float want[8] = {2, 4, 6, 12, 8, 10, 12, 30};
        for (int i = 0; i < 8; ++i)
            CU_ASSERT_EQUAL(c[i], want[i]);
        a[1] = NAN;
        be->vt->gemm_nt(be, 2, 4, 3, 1.0f, a, 3, w, 3, c, 4);
        CU_ASSERT(isnan(c[3]));
        for (int i = 4; i < 8; ++i)
            CU_ASSERT(!isnan(c[i]));
        lm_backend_destroy(be);
    }
}

/* Random strided products against double. Bound (Higham, Accuracy and Stability, 3.1): a
 * float dot product of k terms in ANY order, with or without FMA, has
 * |fl - exact| <= gamma_k * sum|a_l b_l|, gamma_k = k u / (1 - k u), u = 2^-24; the alpha
 * multiply adds one more rounding, so k + 1. Inputs are in [-1, 1): no underflow to speak of.
 * The double reference itself is exact to ~2^-53 relative, negligible next to this.
 * u = 2^-24 for round to nearest; a LM_BE_STOCHASTIC_ROUNDING backend errs by up to one ulp per
 * operation, so the same analysis holds with u = 2^-23. A backend that rounds its operands to
 * fewer bits first (lm_backend_info.operand_bits: TF32, bfloat16) adds that rounding, below. */
static void check_products(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, double u,
                           double u_in, uint64_t *st)
{
    const size_t lda = k + 3, ldb = k + 1, ldc = n + 2, ldbn = n + 5;
    float *a = tf_rand_vec((size_t)m * lda, 1.0f, st);
    float *b = tf_rand_vec((size_t)n * ldb, 1.0f, st);    /* [n][k] for nt */
    float *bn = tf_rand_vec((size_t)k * ldbn, 1.0f, st);  /* [k][n] for nn */
    float *c = tf_rand_vec((size_t)m * ldc, 1.0f, st);
    const float alpha = 0.125f + tu_rand_f32(st);
    const double g_sum = (double)(k + 1) * u / (1.0 - (double)(k + 1) * u);
    /* Operands rounded to a shorter mantissa first (operand_bits): each factor errs by u_in
     * relative, so each product by (1 + u_in)^2 - 1, then the float32 sum as above. */
    const double g = (1.0 + u_in) * (1.0 + u_in) * (1.0 + g_sum) - 1.0;
    int bad_nt = 0, bad_nn = 0;

    be->vt->gemm_nt(be, m, n, k, alpha, a, lda, b, ldb, c, ldc);
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < n; ++j) {
            double s = 0, sa = 0;
            for (uint32_t l = 0; l < k; ++l) {
                s += (double)a[i * lda + l] * (double)b[j * ldb + l];
                sa += fabs((double)a[i * lda + l] * (double)b[j * ldb + l]);
            }
            s *= (double)alpha;
            sa *= fabs((double)alpha);
            if (fabs((double)c[i * ldc + j] - s) > g * sa)
                ++bad_nt;
        }
    be->vt->gemm_nn(be, m, n, k, a, lda, bn, ldbn, c, ldc);
    for (uint32_t i = 0; i < m; ++i)
        for (uint32_t j = 0; j < n; ++j) {
            double s = 0, sa = 0;
            for (uint32_t l = 0; l < k; ++l) {
                s += (double)a[i * lda + l] * (double)bn[l * ldbn + j];
                sa += fabs((double)a[i * lda + l] * (double)bn[l * ldbn + j]);
            }
            if (fabs((double)c[i * ldc + j] - s) > g * sa)
                ++bad_nn;
        }
    if (bad_nt || bad_nn)
        fprintf(stderr, "\n  %s m=%u n=%u k=%u: %d nt and %d nn elements outside the bound\n",
                be->vt->name, m, n, k, bad_nt, bad_nn);
    CU_ASSERT_EQUAL(bad_nt, 0);
    CU_ASSERT_EQUAL(bad_nn, 0);
    free(a);
    free(b);
    free(bn);
    free(c);
}

static void test_backend_matches_double_reference(void)
{
    static const uint32_t ms[] = {1, 2, 7, 64}, ns[] = {1, 5, 130}, ks[] = {1, 3, 64, 577};
    uint64_t st = tu_seed();
    for (size_t b = 0; b < N_BACKENDS; ++b)
        for (int threads = 1; threads <= 2; ++threads) {
            lm_backend *be = make(NAME(b), threads);
            if (be == NULL)
                continue;
            const double u = ldexp(1.0, (FLAGS(b) & LM_BE_STOCHASTIC_ROUNDING) ? -23 : -24);
            const unsigned bits = lm_backend_at(b)->operand_bits;
            const double u_in = bits ? ldexp(1.0, -(int)bits) : 0.0;
            for (size_t i = 0; i < 4; ++i)
                for (size_t j = 0; j < 3; ++j)
                    for (size_t l = 0; l < 4; ++l)
                        check_products(be, ms[i], ns[j], ks[l], u, u_in, &st);
            lm_backend_destroy(be);
        }
}

/* The LM_BE_CHUNK_INVARIANT contract: an output element does not depend on how the rows were
 * split into calls or on threads, and gemm_nt(A, B) == gemm_nn(A, B^T) since both sum
 * l = 0..k-1 in the same fixed order. */
static void split_invariant(const char *name)
{
    uint64_t st = tu_seed() ^ 0x5eed;
    const uint32_t m = 23, n = 37, k = 301;
    float *a = tf_rand_vec((size_t)m * k, 1.0f, &st);
    float *b = tf_rand_vec((size_t)n * k, 1.0f, &st);
    float *bt = malloc((size_t)k * n * sizeof *bt);
    float *full = malloc((size_t)m * n * sizeof *full);
    float *part = malloc((size_t)m * n * sizeof *part);
    float *nn = malloc((size_t)m * n * sizeof *nn);
    CU_ASSERT_FATAL(bt && full && part && nn);
    for (uint32_t j = 0; j < n; ++j)
        for (uint32_t l = 0; l < k; ++l)
            bt[(size_t)l * n + j] = b[(size_t)j * k + l];
    lm_backend *be = make(name, 1), *be2 = make(name, 2);
    if (be == NULL || be2 == NULL) {
        lm_backend_destroy(be);
        lm_backend_destroy(be2);
        free(a);
        free(b);
        free(bt);
        free(full);
        free(part);
        free(nn);
        return;
    }
    be->vt->gemm_nt(be, m, n, k, 1.0f, a, k, b, k, full, n);
    for (uint32_t step = 1; step <= 7; step += 2) {
        for (uint32_t r = 0; r < m; r += step) {
            const uint32_t len = m - r < step ? m - r : step;
            be->vt->gemm_nt(be, len, n, k, 1.0f, a + (size_t)r * k, k, b, k, part + (size_t)r * n, n);
        }
        CU_ASSERT_EQUAL(memcmp(full, part, (size_t)m * n * sizeof *full), 0);
    }
    be2->vt->gemm_nt(be2, m, n, k, 1.0f, a, k, b, k, part, n);
    CU_ASSERT_EQUAL(memcmp(full, part, (size_t)m * n * sizeof *full), 0);
    be->vt->gemm_nn(be, m, n, k, a, k, bt, n, nn, n);
    CU_ASSERT_EQUAL(memcmp(full, nn, (size_t)m * n * sizeof *full), 0);
    lm_backend_destroy(be);
    lm_backend_destroy(be2);
    free(a);
    free(b);
    free(bt);
    free(full);
    free(part);
    free(nn);
}

static void test_backend_split_invariant(void)
{
    size_t n_inv = 0;
    for (size_t b = 0; b < N_BACKENDS; ++b)
        if (FLAGS(b) & LM_BE_CHUNK_INVARIANT) {
            split_invariant(NAME(b));
            ++n_inv;
        }
    CU_ASSERT(n_inv >= 1); /* the reference order exists */
}

void test_backend_register(void)
{
    CU_pSuite s = CU_add_suite("backend", NULL, NULL);
    CU_add_test(s, "test_backend_unknown_name", test_backend_unknown_name);
    CU_add_test(s, "test_backend_special_shapes", test_backend_special_shapes);
    CU_add_test(s, "test_backend_matches_double_reference", test_backend_matches_double_reference);
    CU_add_test(s, "test_backend_registry", test_backend_registry);
    CU_add_test(s, "test_backend_split_invariant", test_backend_split_invariant);
}
