/* test_kernel_isa.c — telling a BLAS library's kernel set older than the CPU
 * (engine/kernel_isa.h): the core-name and configuration tables, the decision over kernel
 * names x CPU levels, the warning text and the platform mark for given pairs, and the one
 * warning line run and sweep print. */
#include "../engine/kernel_isa.h"
#include "cli/cli_util.h"
#include "cli/commands.h"
#include "fixtures.h"
#include "kvd_defects.h"
#include "kvd_engine.h"
#include "plan/synth.h"
#include "test_util.h"

#include <stdio.h>
#include <string.h>

/* Special names first (NULL, "", "Unknown", a name no table holds), then each family of
 * OpenBLAS core names and BLIS configurations, case ignored. */
static void test_kernel_isa_levels(void)
{
    CU_ASSERT_EQUAL(lm_openblas_core_level(NULL), LM_ISA_UNKNOWN);
    CU_ASSERT_EQUAL(lm_openblas_core_level(""), LM_ISA_UNKNOWN);
    CU_ASSERT_EQUAL(lm_openblas_core_level("Unknown"), LM_ISA_UNKNOWN);
    CU_ASSERT_EQUAL(lm_openblas_core_level("NeoverseV1"), LM_ISA_UNKNOWN);
    CU_ASSERT_EQUAL(lm_blis_config_level(NULL), LM_ISA_UNKNOWN);
    CU_ASSERT_EQUAL(lm_blis_config_level("cortexa57"), LM_ISA_UNKNOWN);
    static const struct {
        const char *name;
        lm_isa_level openblas, blis;
    } t[] = {
        {"Prescott", LM_ISA_SSE3, LM_ISA_UNKNOWN},    {"PRESCOTT", LM_ISA_SSE3, LM_ISA_UNKNOWN},
        {"Core2", LM_ISA_SSE3, LM_ISA_UNKNOWN},       {"Nehalem", LM_ISA_SSE3, LM_ISA_UNKNOWN},
        {"Opteron_SSE3", LM_ISA_SSE3, LM_ISA_UNKNOWN}, {"penryn", LM_ISA_SSE3, LM_ISA_SSE3},
        {"generic", LM_ISA_UNKNOWN, LM_ISA_SSE3},     {"Sandybridge", LM_ISA_AVX, LM_ISA_AVX},
        {"Piledriver", LM_ISA_AVX, LM_ISA_AVX},       {"Haswell", LM_ISA_AVX2, LM_ISA_AVX2},
        {"Zen", LM_ISA_AVX2, LM_ISA_AVX2},            {"zen3", LM_ISA_UNKNOWN, LM_ISA_AVX2},
        {"Excavator", LM_ISA_AVX2, LM_ISA_AVX2},      {"SkylakeX", LM_ISA_AVX512, LM_ISA_UNKNOWN},
        {"Cooperlake", LM_ISA_AVX512, LM_ISA_UNKNOWN}, {"skx", LM_ISA_UNKNOWN, LM_ISA_AVX512},
        {"SapphireRapids", LM_ISA_AVX512, LM_ISA_UNKNOWN},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; ++i) {
        CU_ASSERT_EQUAL(lm_openblas_core_level(t[i].name), t[i].openblas);
        CU_ASSERT_EQUAL(lm_blis_config_level(t[i].name), t[i].blis);
    }
    CU_ASSERT_STRING_EQUAL(lm_isa_level_name(LM_ISA_SSE3), "sse3");
    CU_ASSERT_STRING_EQUAL(lm_isa_level_name(LM_ISA_AVX512), "avx512");
    CU_ASSERT_STRING_EQUAL(lm_isa_level_name(LM_ISA_UNKNOWN), "unknown");
}

/* The decision on every OpenBLAS core family x every CPU level: older exactly when both are
 * known and the kernels' level is below the CPU's. */
static void test_kernel_isa_older_table(void)
{
    static const char *const cores[] = {"Unknown", "Prescott", "Nehalem", "Sandybridge",
                                        "Haswell", "Zen", "SkylakeX", "Cooperlake"};
    static const lm_isa_level cpus[] = {LM_ISA_UNKNOWN, LM_ISA_SSE3, LM_ISA_AVX, LM_ISA_AVX2,
                                        LM_ISA_AVX512};
    /* want[core][cpu]: 1 = older than the CPU */
    static const int want[8][5] = {
        /*               unknown sse3 avx avx2 avx512 */
        /* Unknown     */ {0, 0, 0, 0, 0},
        /* Prescott    */ {0, 0, 1, 1, 1},
        /* Nehalem     */ {0, 0, 1, 1, 1},
        /* Sandybridge */ {0, 0, 0, 1, 1},
        /* Haswell     */ {0, 0, 0, 0, 1},
        /* Zen         */ {0, 0, 0, 0, 1},
        /* SkylakeX    */ {0, 0, 0, 0, 0},
        /* Cooperlake  */ {0, 0, 0, 0, 0},
    };
    for (size_t c = 0; c < 8; ++c)
        for (size_t u = 0; u < 5; ++u) {
            char w[400];
            const bool older = lm_kernels_older(lm_openblas_core_level(cores[c]), cpus[u]);
            CU_ASSERT_EQUAL(older, want[c][u] != 0);
            CU_ASSERT_EQUAL(lm_openblas_warning(w, sizeof w, cores[c], cpus[u], NULL), older);
            CU_ASSERT_EQUAL(w[0] != '\0', older);
            if (older != (want[c][u] != 0))
                fprintf(stderr, "\n  %s on %s: older %d, want %d\n", cores[c],
                        lm_isa_level_name(cpus[u]), older, want[c][u]);
        }
}

/* The warning for a given pair: what runs, on what, and what to do — or nothing. */
static void test_kernel_isa_warning_text(void)
{
    char w[400];
    CU_ASSERT_TRUE(lm_openblas_warning(w, sizeof w, "Prescott", LM_ISA_AVX512, NULL));
    fprintf(stderr, "\n  warning: %s\n", w);
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "Prescott kernels (sse3)"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "avx512 CPU"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "OPENBLAS_CORETYPE=SkylakeX"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "Cooperlake"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "newer OpenBLAS"));
    CU_ASSERT_PTR_NULL(strpbrk(w, "\n\r"));
    CU_ASSERT_TRUE(lm_openblas_warning(w, sizeof w, "Prescott", LM_ISA_AVX2, NULL));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "OPENBLAS_CORETYPE=Haswell"));
    CU_ASSERT_PTR_NULL(strstr(w, "Cooperlake"));
    /* a CORETYPE the environment sets is named as the cause */
    CU_ASSERT_TRUE(lm_openblas_warning(w, sizeof w, "Haswell", LM_ISA_AVX512, "Haswell"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "OPENBLAS_CORETYPE=Haswell makes OpenBLAS run"));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "OPENBLAS_CORETYPE=SkylakeX"));
    CU_ASSERT_FALSE(lm_openblas_warning(w, sizeof w, "SkylakeX", LM_ISA_AVX512, NULL));
    CU_ASSERT_STRING_EQUAL(w, "");
    CU_ASSERT_FALSE(lm_openblas_warning(w, sizeof w, "Haswell", LM_ISA_AVX2, "Haswell"));
    CU_ASSERT_STRING_EQUAL(w, "");
    CU_ASSERT_FALSE(lm_openblas_warning(w, sizeof w, "Unknown", LM_ISA_AVX512, NULL));
    CU_ASSERT_TRUE(lm_blis_warning(w, sizeof w, "haswell", LM_ISA_AVX512));
    CU_ASSERT_PTR_NOT_NULL(strstr(w, "BLIS runs its haswell kernels (avx2) on this avx512 CPU"));
    CU_ASSERT_PTR_NULL(strpbrk(w, "\n\r"));
    CU_ASSERT_FALSE(lm_blis_warning(w, sizeof w, "skx", LM_ISA_AVX512));
    CU_ASSERT_FALSE(lm_blis_warning(w, sizeof w, "zen3", LM_ISA_AVX2));
    /* the platform mark: one word, only when older */
    lm_kernels_mark(w, sizeof w, LM_ISA_SSE3, LM_ISA_AVX512);
    CU_ASSERT_STRING_EQUAL(w, "(sse3-kernels-on-avx512-cpu)");
    lm_kernels_mark(w, sizeof w, LM_ISA_AVX512, LM_ISA_AVX512);
    CU_ASSERT_STRING_EQUAL(w, "");
}

/* This machine: blas's kernels hook agrees with the pure decision, and the platform word
 * carries the mark exactly when the core is older. */
static void test_kernel_isa_this_machine(void)
{
    lm_backend_kernels k;
    CU_ASSERT_TRUE_FATAL(lm_backend_kernels_of(&k, "blas"));
    const lm_isa_level cpu = lm_cpu_isa_level();
    CU_ASSERT_EQUAL(k.older, lm_kernels_older(lm_openblas_core_level(k.name), cpu));
    CU_ASSERT_STRING_EQUAL(k.cpu_isa, lm_isa_level_name(cpu));
    CU_ASSERT_EQUAL(k.warning[0] != '\0', k.older);
    char brief[128];
    lm_backend_find("blas", 4)->describe(brief, sizeof brief, true);
    CU_ASSERT_EQUAL(strstr(brief, "-kernels-on-") != NULL, k.older);
    fprintf(stderr, "\n  blas runs %s (%s) on this %s CPU; older: %s; platform word %s\n", k.name,
            k.isa, k.cpu_isa, k.older ? "yes" : "no", brief);
    CU_ASSERT_FALSE(lm_backend_kernels_of(&k, "naive")); /* portable C: no hook */
    CU_ASSERT_FALSE(lm_backend_kernels_of(&k, "no-such-backend"));
    CU_ASSERT_TRUE(lm_backend_kernels_of(&k, "det"));
    CU_ASSERT_FALSE(k.older);
}

/* A command that only warns, for configurations blas, naive, blas: at most one line. */
static int warn_cmd(int argc, char **argv)
{
    (void)argc, (void)argv;
    hx_config cfgs[3] = {{.backend = "blas"}, {.backend = "naive"}, {.backend = "blas"}};
    hx_cli_warn_kernels("sweep", cfgs, 3);
    return 0;
}

static size_t count(const char *s, const char *what)
{
    size_t n = 0;
    for (const char *p = s; (p = strstr(p, what)) != NULL; p += strlen(what))
        ++n;
    return n;
}

/* run on blas prints the warning line exactly when blas's kernels are older than the CPU,
 * once; on naive never; a sweep's configurations name each backend once. */
static void test_kernel_isa_cli_warning(void)
{
    lm_backend_kernels k;
    lm_backend_kernels_of(&k, "blas");
    char model[1024], out[1 << 14];
    snprintf(model, sizeof model, "%s/kisa-tiny.gguf", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(model, "tiny", 0, LM_TYPE_F32, &err), LM_OK);
    /* getopt permutes argv: one array per run */
    char *a[] = {"run", model, "--tokens", "1,2,3", "-n", "2", "--backend", "blas", NULL};
    char *b[] = {"run", model, "--tokens", "1,2,3", "-n", "2", "--backend", "naive", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_run, 8, a, out, sizeof out), 0);
    CU_ASSERT_EQUAL(count(out, "kvdrift run: warning: blas: "), k.older ? 1u : 0u);
    if (k.older)
        CU_ASSERT_PTR_NOT_NULL(strstr(out, k.warning));
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_run, 8, b, out, sizeof out), 0);
    CU_ASSERT_PTR_NULL(strstr(out, "warning"));
    /* an old core (the test hook stands in for an OpenBLAS that does not know the CPU): the
     * line appears once, and the platform word carries the mark */
    if (lm_cpu_isa_level() >= LM_ISA_AVX) {
        char *c[] = {"run", model, "--tokens", "1,2,3", "-n", "2", "--backend", "blas", NULL};
        lm_test_blas_core("Prescott");
        CU_ASSERT_EQUAL(tf_run_cmd(cmd_run, 8, c, out, sizeof out), 0);
        char brief[128];
        lm_backend_find("blas", 4)->describe(brief, sizeof brief, true);
        lm_test_blas_core(NULL);
        CU_ASSERT_EQUAL(count(out, "kvdrift run: warning: blas: "), 1u);
        CU_ASSERT_EQUAL(count(out, "Prescott kernels (sse3)"), 1u);
        CU_ASSERT_PTR_NOT_NULL(strstr(brief, "Prescott(sse3-kernels-on-"));
    }
    char *w[] = {"warn", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(warn_cmd, 1, w, out, sizeof out), 0);
    CU_ASSERT_EQUAL(count(out, "kvdrift sweep: warning: "), k.older ? 1u : 0u);
}

void test_kernel_isa_register(void)
{
    CU_pSuite s = CU_add_suite("kernel_isa", NULL, NULL);
    CU_add_test(s, "test_kernel_isa_levels", test_kernel_isa_levels);
    CU_add_test(s, "test_kernel_isa_older_table", test_kernel_isa_older_table);
    CU_add_test(s, "test_kernel_isa_warning_text", test_kernel_isa_warning_text);
    CU_add_test(s, "test_kernel_isa_this_machine", test_kernel_isa_this_machine);
    CU_add_test(s, "test_kernel_isa_cli_warning", test_kernel_isa_cli_warning);
}
