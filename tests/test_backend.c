/* test_backend.c — every registered backend (the registry is iterated, as ggml's
 * test-backend-ops does, so a new backend is tested without editing this file): gemm_nt /
 * gemm_nn against a double-precision reference at a stated bound, special shapes, split
 * invariance (bitwise) for LM_BE_CHUNK_INVARIANT backends, and the registry itself. */
#include "../engine/backend.h"
#include "../engine/threadpool.h"
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

/* NULL, with one visible line per backend, when a LM_BE_DEVICE backend finds no device here
 * or a LM_BE_LOADED one no library: its tests are skipped, never passed. */
static lm_backend *make(const char *name, int threads)
{
    lm_backend *be = NULL;
    lm_err err = {0};
    const int rc = lm_backend_create(&be, name, threads, &err);
    if (rc == LM_E_UNSUPPORTED && (lm_backend_flags(name) & LM_BE_MAY_BE_ABSENT)) {
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
            char full[320] = "", brief[128] = "";
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

/* A LM_BE_LOADED backend either runs or says in one line that its library is not installed
 * (LM_E_UNSUPPORTED): the binary never depends on the library to start. */
static void test_backend_loaded_or_one_line(void)
{
    size_t n_loaded = 0;
    for (size_t b = 0; b < N_BACKENDS; ++b) {
        if (!(FLAGS(b) & LM_BE_LOADED))
            continue;
        ++n_loaded;
        lm_backend *be = NULL;
        lm_err err = {0};
        const int rc = lm_backend_create(&be, NAME(b), 1, &err);
        CU_ASSERT(rc == LM_OK || rc == LM_E_UNSUPPORTED);
        if (rc != LM_OK) {
            CU_ASSERT_PTR_NULL(be);
            CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "not installed"));
            CU_ASSERT_PTR_NULL(strpbrk(err.msg, "\n\r"));
            fprintf(stderr, "\n  SKIP backend %s: %s\n", NAME(b), err.msg);
        }
        lm_backend_destroy(be);
    }
    CU_ASSERT(n_loaded >= 1); /* blis */
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

/* ---- elementwise ops (lm_op_*: the backend's slot, or the shared C when it has none) ----
 * Each against a double-precision reference at a first-order bound in u (2^-24; 2^-23 for a
 * LM_BE_STOCHASTIC_ROUNDING backend, one ulp per operation), with one u of slack for the
 * second-order terms (at most n u^2, below 2^-37 here). The shared C also runs on a 2-thread
 * pool, which must give the same bits as one thread. */

static double op_u(size_t b)
{
    return ldexp(1.0, (FLAGS(b) & LM_BE_STOCHASTIC_ROUNDING) ? -23 : -24);
}

/* rmsnorm: ss = sum of n rounded squares, |err| <= gamma_n ss; / n, + eps (eps > 0) one u
 * each: gamma_{n+2}; sqrt halves a relative error and adds u; the reciprocal, x * r and * w one
 * u each: |y - exact| <= (gamma_{n+2} / 2 + 4u + u) |exact|. */
static int check_rmsnorm(lm_backend *be, lm_pool *pool, double u, uint64_t *st)
{
    const uint32_t n = 5, dim = 67;
    const float eps = 1e-5f;
    float *x = tf_rand_vec((size_t)n * dim, 2.0f, st), *w = tf_rand_vec(dim, 1.5f, st);
    float *y = malloc((size_t)n * dim * sizeof *y);
    CU_ASSERT_FATAL(y != NULL);
    lm_op_rmsnorm(be, pool, y, x, w, n, dim, eps);
    const double g = (dim + 2) * u / (1.0 - (dim + 2) * u);
    int bad = 0;
    for (uint32_t t = 0; t < n; ++t) {
        double ss = 0;
        for (uint32_t i = 0; i < dim; ++i)
            ss += (double)x[t * dim + i] * (double)x[t * dim + i];
        const double r = 1.0 / sqrt(ss / dim + (double)eps);
        for (uint32_t i = 0; i < dim; ++i) {
            const double want = (double)x[t * dim + i] * r * (double)w[i];
            bad += !(fabs((double)y[t * dim + i] - want) <= (g / 2 + 5 * u) * fabs(want));
        }
    }
    free(x);
    free(w);
    free(y);
    return bad;
}

/* glu: act(g) * up with act(g) = g / (1 + e), e = exp(-g) (silu) or exp(-2v), v = k (g +
 * c g^3) (gelu_tanh; k = 0.7978845608f and c = 0.044715f as float constants, the function the
 * engine defines). lm_expf is within 2 ulp (4u); v carries 5 roundings of same-sign terms, so
 * exp's argument errs by 2|v| 5u absolute, e by that relative; 1 + e passes e's relative error
 * scaled by e / (1 + e), plus u; the division and * up one u each: |err| <= (e / (1 + e)
 * (arg + 4u) + 3u + u) |exact|. Gates in [-8, 8). */
static int check_glu(lm_backend *be, lm_pool *pool, lm_ffn_act act, double u, uint64_t *st)
{
    const uint32_t n = 9, dim = 41;
    float *g = tf_rand_vec((size_t)n * dim, 8.0f, st), *up = tf_rand_vec((size_t)n * dim, 2.0f, st);
    float *g0 = malloc((size_t)n * dim * sizeof *g0);
    CU_ASSERT_FATAL(g0 != NULL);
    memcpy(g0, g, (size_t)n * dim * sizeof *g);
    lm_op_glu(be, pool, g, up, n, dim, act);
    int bad = 0;
    for (size_t i = 0; i < (size_t)n * dim; ++i) {
        const double x = g0[i];
        const double v = (double)0.7978845608f * (x + (double)0.044715f * x * x * x);
        const double arg = act == LM_ACT_GEGLU_TANH ? -2.0 * v : -x;
        const double e = exp(arg);
        const double want = x / (1.0 + e) * (double)up[i];
        const double arg_err = act == LM_ACT_GEGLU_TANH ? fabs(arg) * 5 * u : 0.0;
        const double rel = e / (1.0 + e) * (arg_err + 4 * u) + 4 * u;
        bad += !(fabs((double)g[i] - want) <= rel * fabs(want));
    }
    free(g);
    free(g0);
    free(up);
    return bad;
}

/* rope: a c - b s and a s + b c, two rounded products and a rounded sum each:
 * |err| <= gamma_2 (|a c| + |b s|); dimensions >= n_rot and the row padding are untouched. */
static int check_rope(lm_backend *be, lm_pool *pool, bool neox, double u, uint64_t *st)
{
    const uint32_t n = 7, n_heads = 3, hd = 16, n_rot = 12, half = n_rot / 2, pos0 = 3;
    const size_t stride = n_heads * hd + 5;
    float *rows = tf_rand_vec(n * stride, 3.0f, st);
    float *cs = malloc((size_t)(pos0 + n) * half * sizeof *cs);
    float *sn = malloc((size_t)(pos0 + n) * half * sizeof *sn);
    float *r0 = malloc(n * stride * sizeof *r0);
    CU_ASSERT_FATAL(cs && sn && r0);
    for (uint32_t p = 0; p < pos0 + n; ++p)
        for (uint32_t i = 0; i < half; ++i) {
            const double ang = p * pow(10000.0, -2.0 * i / n_rot);
            cs[p * half + i] = (float)cos(ang);
            sn[p * half + i] = (float)sin(ang);
        }
    memcpy(r0, rows, n * stride * sizeof *rows);
    const lm_rope_args a = {.cos_tab = cs, .sin_tab = sn, .stride = stride, .pos0 = pos0,
                            .n_heads = n_heads, .head_dim = hd, .n_rot = n_rot, .neox = neox};
    lm_op_rope(be, pool, rows, n, &a);
    const double g2 = 2 * u / (1 - 2 * u);
    int bad = 0;
    for (uint32_t t = 0; t < n; ++t) {
        for (size_t k = n_heads * hd; k < stride; ++k) /* padding */
            bad += memcmp(&rows[t * stride + k], &r0[t * stride + k], sizeof(float)) != 0;
        for (uint32_t h = 0; h < n_heads; ++h) {
            const float *v0 = r0 + t * stride + h * hd, *v = rows + t * stride + h * hd;
            for (uint32_t i = n_rot; i < hd; ++i) /* passed through */
                bad += memcmp(&v[i], &v0[i], sizeof(float)) != 0;
            for (uint32_t i = 0; i < half; ++i) {
                const uint32_t ia = neox ? i : 2 * i, ib = neox ? i + half : 2 * i + 1;
                const double c = cs[(pos0 + t) * half + i], s_ = sn[(pos0 + t) * half + i];
                const double x0 = v0[ia], x1 = v0[ib];
                const double wa = x0 * c - x1 * s_, wb = x0 * s_ + x1 * c;
                const double ma = fabs(x0 * c) + fabs(x1 * s_), mb = fabs(x0 * s_) + fabs(x1 * c);
                bad += !(fabs((double)v[ia] - wa) <= g2 * ma);
                bad += !(fabs((double)v[ib] - wb) <= g2 * mb);
            }
        }
    }
    free(rows);
    free(cs);
    free(sn);
    free(r0);
    return bad;
}

static void test_backend_elementwise_ops(void)
{
    lm_pool *pool2 = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_pool_create(&pool2, 2, &err), LM_OK);
    for (size_t b = 0; b < N_BACKENDS; ++b) {
        lm_backend *be = make(NAME(b), 1);
        if (be == NULL)
            continue;
        const double u = op_u(b);
        for (int p = 0; p < 2; ++p) {
            lm_pool *pool = p ? pool2 : NULL;
            uint64_t st = tu_seed() ^ 0x0e1e;
            const int bad[5] = {check_rmsnorm(be, pool, u, &st),
                                check_glu(be, pool, LM_ACT_SWIGLU, u, &st),
                                check_glu(be, pool, LM_ACT_GEGLU_TANH, u, &st),
                                check_rope(be, pool, false, u, &st),
                                check_rope(be, pool, true, u, &st)};
            static const char *const ops[5] = {"rmsnorm", "swiglu", "geglu", "rope", "rope neox"};
            for (int k = 0; k < 5; ++k) {
                if (bad[k])
                    fprintf(stderr, "\n  %s %s (%s pool): %d elements outside the bound\n",
                            NAME(b), ops[k], p ? "2-thread" : "no", bad[k]);
                CU_ASSERT_EQUAL(bad[k], 0);
            }
        }
        lm_backend_destroy(be);
    }
    lm_pool_free(pool2);
}

void test_backend_register(void)
{
    CU_pSuite s = CU_add_suite("backend", NULL, NULL);
    CU_add_test(s, "test_backend_unknown_name", test_backend_unknown_name);
    CU_add_test(s, "test_backend_special_shapes", test_backend_special_shapes);
    CU_add_test(s, "test_backend_loaded_or_one_line", test_backend_loaded_or_one_line);
    CU_add_test(s, "test_backend_matches_double_reference", test_backend_matches_double_reference);
    CU_add_test(s, "test_backend_registry", test_backend_registry);
    CU_add_test(s, "test_backend_split_invariant", test_backend_split_invariant);
    CU_add_test(s, "test_backend_elementwise_ops", test_backend_elementwise_ops);
}
