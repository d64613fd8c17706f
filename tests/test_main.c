/* test_main.c — runs every CUnit suite. Suites register themselves through
 * test_<unit>_register(); the list is generated from tests/test_*.c by the Makefile. */
#include "test_registry.h"
#include "test_util.h"

#include "fs.h"

#include <CUnit/Basic.h>
#include <errno.h>
#include <ftw.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[256];
static char path_buf[1024];

const char *tu_models_dir(void)
{
    static char dir[1024];
    lm_err err = {0};
    if (lm_models_dir(dir, sizeof dir, &err) != LM_OK) {
        fprintf(stderr, "\n  %s: models are looked for in the working directory\n", err.msg);
        snprintf(dir, sizeof dir, ".");
    }
    return dir;
}

const char *tu_model_path(const char *relative)
{
    snprintf(path_buf, sizeof path_buf, "%s/%s", tu_models_dir(), relative);
    if (access(path_buf, R_OK) == 0)
        return path_buf;
    fprintf(stderr, "\n  SKIP: %s not found (set KVDRIFT_MODELS)\n", path_buf);
    return NULL;
}

lm_model *tu_load_model_at(const char *relative, const char **path)
{
    const char *full = tu_model_path(relative);
    if (full == NULL)
        return NULL;
    lm_model *m = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL(lm_model_load(&m, full, &err), LM_OK);
    if (m == NULL)
        fprintf(stderr, "\n  %s: %s\n", full, err.msg);
    if (path != NULL)
        *path = full;
    return m;
}

lm_model *tu_load_model(const char *relative)
{
    return tu_load_model_at(relative, NULL);
}

const char *tu_cached_model_path(const char *name)
{
    snprintf(path_buf, sizeof path_buf, "%s/%s", tu_models_dir(), name);
    if (access(path_buf, R_OK) == 0)
        return path_buf;
    char cache[512];
    lm_err err = {0};
    if (lm_cache_dir(cache, sizeof cache, NULL, &err) != LM_OK)
        snprintf(cache, sizeof cache, ".");
    snprintf(path_buf, sizeof path_buf, "%s/models/%s", cache, name);
    if (access(path_buf, R_OK) == 0)
        return path_buf;
    fprintf(stderr, "\n  SKIP: %s not found in $KVDRIFT_MODELS nor at %s (run `make models`)\n",
            name, path_buf);
    return NULL;
}

uint64_t tu_seed(void)
{
    const char *s = getenv("KVD_TEST_SEED");
    return (s && *s) ? strtoull(s, NULL, 0) : UINT64_C(0x6b76647269667421);
}

static int remove_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb; (void)flag; (void)ftw;
    return remove(p);
}

static void remove_tmpdir(void)
{
    if (tmpdir[0] && getenv("KVD_TEST_KEEP") == NULL)
        nftw(tmpdir, remove_entry, 16, FTW_DEPTH | FTW_PHYS);
}

const char *tu_tmpdir(void)
{
    if (!tmpdir[0]) {
        const char *base = getenv("TMPDIR");
        snprintf(tmpdir, sizeof tmpdir, "%s/kvdrift-test-XXXXXX", (base && *base) ? base : "/tmp");
        if (mkdtemp(tmpdir) == NULL) {
            fprintf(stderr, "cannot create %s: %s\n", tmpdir, strerror(errno));
            exit(2);
        }
        atexit(remove_tmpdir);
    }
    return tmpdir;
}

const char *tu_write_file(const char *name, const void *bytes, size_t n)
{
    static char p[1024];
    snprintf(p, sizeof p, "%s/%s", tu_tmpdir(), name);
    FILE *f = fopen(p, "wb");
    CU_ASSERT_FATAL(f != NULL);
    CU_ASSERT_FATAL(fwrite(bytes, 1, n, f) == n);
    CU_ASSERT_FATAL(fclose(f) == 0);
    return p;
}

uint64_t tu_rand_u64(uint64_t *state)
{
    uint64_t z = (*state += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

void tu_rand_mpfr(mpfr_t x, uint64_t *state, long lo, long hi)
{
    const mpfr_prec_t p = mpfr_get_prec(x);
    mpfr_t t;
    mpfr_init2(t, 64);
    mpfr_set_ui(x, 0, MPFR_RNDN);
    for (mpfr_prec_t have = 0; have < p + 64; have += 60) { /* p + 64 random bits */
        mpfr_set_ui_2exp(t, (unsigned long)(tu_rand_u64(state) >> 4),
                         -(mpfr_exp_t)(have + 60), MPFR_RNDN);
        mpfr_add(x, x, t, MPFR_RNDN);
    }
    mpfr_clear(t);
    if (mpfr_zero_p(x))
        mpfr_set_ui(x, 1, MPFR_RNDN);
    mpfr_set_exp(x, (mpfr_exp_t)(lo + (long)(tu_rand_u64(state) % (uint64_t)(hi - lo + 1))));
    if (tu_rand_u64(state) & 1)
        mpfr_neg(x, x, MPFR_RNDN);
}

void tu_log_keep(void *user, const char *line)
{
    tu_log *l = user;
    l->n++;
    snprintf(l->last, sizeof l->last, "%s", line);
}

float tu_rand_f32(uint64_t *state)
{
    /* 24 random bits -> exact float in [-1, 1) */
    return (float)((int32_t)(tu_rand_u64(state) >> 40) - (1 << 23)) / (float)(1 << 23);
}

double tu_max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0.0;
    for (size_t i = 0; i < n; ++i) {
        const double e = fabs((double)a[i] - (double)b[i]);
        d = e > d || isnan(e) ? e : d;
    }
    return d;
}

int main(int argc, char **argv)
{
    if (CU_initialize_registry() != CUE_SUCCESS)
        return 2;
    fprintf(stderr, "kvdrift tests: seed 0x%016" PRIx64 " (include this in bug reports; "
                    "KVD_TEST_SEED overrides)\n", tu_seed());
#define X(u) test_##u##_register();
    KVD_TEST_UNITS
#undef X
    CU_basic_set_mode(CU_BRM_VERBOSE);
    /* kvdrift-tests SUITE [TEST] runs one suite (or one test) only. */
    if (argc >= 2) {
        CU_pSuite s = CU_get_suite(argv[1]);
        if (s == NULL) {
            fprintf(stderr, "no suite named %s\n", argv[1]);
            return 2;
        }
        if (argc >= 3) {
            CU_pTest t = CU_get_test(s, argv[2]);
            if (t == NULL) {
                fprintf(stderr, "no test %s in suite %s\n", argv[2], argv[1]);
                return 2;
            }
            CU_basic_run_test(s, t);
        } else {
            CU_basic_run_suite(s);
        }
    } else {
        CU_basic_run_tests();
    }
    /* A suite whose setup or cleanup fails has its tests skipped or unchecked: that fails too. */
    unsigned failed = CU_get_number_of_failures() + CU_get_number_of_tests_failed() +
                      CU_get_number_of_suites_failed();
    CU_cleanup_registry();
    return failed ? 1 : 0;
}
