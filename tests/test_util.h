/* test_util.h — helpers shared by the CUnit suites: model paths, seeds, temp files. */
#ifndef KVD_TEST_UTIL_H
#define KVD_TEST_UTIL_H

#include "test_registry.h"

#include "kvd_model.h"

#include <CUnit/CUnit.h>
#include <mpfr.h>
#include <stdbool.h>
#include <stdint.h>

/* The models folder (lm_models_dir: $KVDRIFT_MODELS, else the cache's models/). */
const char *tu_models_dir(void);
/* Full path of a file under the models folder, or NULL (and a visible "SKIP" line printed
 * once per file) when it is absent. The returned string lives until the next call. */
const char *tu_model_path(const char *relative);
/* The model at tu_model_path(relative), loaded: NULL when the file is absent (the SKIP line
 * printed) or when it does not load (a test failure, with the reason printed). */
lm_model *tu_load_model(const char *relative);
/* The same, with *path set to the model's full path (tu_model_path's string) when it loads. */
lm_model *tu_load_model_at(const char *relative, const char **path);
/* Full path of a model `make models` downloads (name inside the models folder), looked for in
 * $KVDRIFT_MODELS, then in the cache's models folder ($KVDRIFT_CACHE/models, else
 * $XDG_CACHE_HOME/kvdrift/models, else ~/.cache/kvdrift/models); NULL with a visible SKIP line
 * when absent. The returned string lives until the next call. */
const char *tu_cached_model_path(const char *name);
/* Seed for random tests: $KVD_TEST_SEED or a fixed default; printed once by test_main. */
uint64_t tu_seed(void);
/* A fresh private folder for this test run (created once, removed at exit). */
const char *tu_tmpdir(void);
/* Writes bytes[n] to tu_tmpdir()/name and returns the full path (static buffer). */
const char *tu_write_file(const char *name, const void *bytes, size_t n);
/* A library log callback (lm_log_fn) that keeps the lines it is given: user is a tu_log. */
typedef struct tu_log {
    int n;           /* lines received */
    char last[1024]; /* the last one */
} tu_log;
void tu_log_keep(void *user, const char *line);
/* splitmix64: the documented PRNG tests use. */
uint64_t tu_rand_u64(uint64_t *state);
/* Uniform in [-1, 1). */
float tu_rand_f32(uint64_t *state);
/* max |a[i] - b[i]| over n values, in double; NaN when some difference is NaN. */
double tu_max_abs_diff(const float *a, const float *b, size_t n);
/* x: a random full significand at x's precision, exponent in [lo, hi], either sign. */
void tu_rand_mpfr(mpfr_t x, uint64_t *state, long lo, long hi);

#endif
