/* test_model_spec.c — MODEL values: parsing, and the one resolver that check, bless and sweep
 * share (a synthetic model is regenerated on every call, so a stale copy is never loaded). */
#include "plan/model_spec.h"
#include "test_util.h"

#include "kvd_model.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void test_model_spec_parse(void)
{
    hx_model_spec s;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_model_spec_parse(&s, "synth:tiny:seed=3", &err), LM_OK);
    CU_ASSERT(s.synth && s.has_seed && s.seed == 3);
    CU_ASSERT_STRING_EQUAL(s.preset, "tiny");
    char label[64];
    hx_model_label(label, sizeof label, &s);
    CU_ASSERT_STRING_EQUAL(label, "synth-tiny-seed3");
    CU_ASSERT_EQUAL_FATAL(hx_model_spec_parse(&s, "dir/x.gguf", &err), LM_OK);
    hx_model_label(label, sizeof label, &s);
    CU_ASSERT_STRING_EQUAL(label, "x");
    free(s.path);
    /* ${KVDRIFT_CACHE} is the cache folder's usual default, as `make models` uses it. */
    const char *saved = getenv("KVDRIFT_CACHE");
    char *saved_copy = saved ? strdup(saved) : NULL;
    setenv("KVDRIFT_CACHE", "/c", 1);
    CU_ASSERT_EQUAL_FATAL(
        hx_model_spec_parse(&s, "${KVDRIFT_CACHE}/models/m.gguf:${KVDRIFT_CACHE}", &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(s.path, "/c/models/m.gguf:/c");
    free(s.path);
    if (saved_copy)
        setenv("KVDRIFT_CACHE", saved_copy, 1);
    else
        unsetenv("KVDRIFT_CACHE");
    free(saved_copy);
    static const char *const bad[] = {"synth:", "synth:tiny:sed=1", "synth:Ti ny", "", "${HOME}/x",
                                      "${KVDRIFT_CACHEX}/x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        lm_err e = {0};
        CU_ASSERT_EQUAL(hx_model_spec_parse(&s, bad[i], &e), LM_E_INPUT);
        free(s.path);
    }
}

/* A stale or damaged copy in the cache folder is replaced, never loaded; an absent file is
 * reported, not an error. */
static void test_model_spec_resolve_regenerates(void)
{
    hx_model_spec s;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_model_spec_parse(&s, "synth:tiny:seed=2", &err), LM_OK);
    char path[1024];
    snprintf(path, sizeof path, "%s/synth-tiny-seed2.gguf", tu_tmpdir());
    FILE *f = fopen(path, "wb");
    CU_ASSERT_PTR_NOT_NULL_FATAL(f);
    fputs("an older, broken copy", f);
    fclose(f);
    char got[1024];
    bool absent = true;
    CU_ASSERT_EQUAL_FATAL(
        hx_model_resolve(got, sizeof got, &absent, &s, tu_tmpdir(), NULL, NULL, &err), LM_OK);
    CU_ASSERT_STRING_EQUAL(got, path);
    CU_ASSERT_FALSE(absent);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL(lm_model_load(&m, got, &err), LM_OK);
    lm_model_free(m);
    hx_model_spec file;
    snprintf(path, sizeof path, "%s/no-such-model.gguf", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_model_spec_parse(&file, path, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_model_resolve(got, sizeof got, &absent, &file, NULL, NULL, NULL, &err),
                    LM_OK);
    CU_ASSERT(absent);
    free(file.path);
}

void test_model_spec_register(void)
{
    CU_pSuite s = CU_add_suite("model_spec", NULL, NULL);
    CU_add_test(s, "test_model_spec_parse", test_model_spec_parse);
    CU_add_test(s, "test_model_spec_resolve_regenerates", test_model_spec_resolve_regenerates);
}
