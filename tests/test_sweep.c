/* test_sweep.c — hx_sweep_run_all end to end: on the synthetic tiny model and on stories260K
 * (skipped when absent), steps 1,2,3,7,full x naive,blas x threads 1,2 must raise no false
 * alarm (no DRIFT, FLIP or NONFINITE), the naive configurations must be EXACT (chunk-invariant
 * by construction), the caches must be reused, and the report files must parse back. */
#include "cli/commands.h"
#include "fixtures.h"
#include "kvd_defects.h"
#include "kvd_engine.h"
#include "model/report.h"
#include "run/sweep.h"
#include "plan/synth.h"
#include "test_util.h"

#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const uint32_t steps[] = {1, 2, 3, 7, 0};
static const char backends[][16] = {"naive", "blas"};
static const uint32_t threads[] = {1, 2};

static hx_config *make_configs(size_t *n)
{
    hx_config *c = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_sweep_cross(&c, n, backends, 2, steps, 5, threads, 2, NULL, 0, &err),
                          LM_OK);
    CU_ASSERT_EQUAL(*n, 20u);
    return c;
}

static const char *cache_dir(void)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/sweep-cache", tu_tmpdir());
    return dir;
}

/* Runs the sweep, checks the verdicts and writes + reparses the report. */
static void sweep_and_check(const lm_model *m, const int32_t *prompt, uint32_t n_prompt,
                            uint32_t n_gen, const char *tag)
{
    size_t nc = 0;
    hx_config *cfgs = make_configs(&nc);
    ref_model *rm = tf_ref_open(m);
    hx_sweep_params p = {.model = m, .ref = rm,
                         .model_label = tag, .prompt = prompt, .n_prompt = n_prompt,
                         .n_gen = n_gen, .configs = cfgs, .n_configs = nc,
                         .cache_dir = cache_dir(), .ref_threads = 1, .quiet = true};
    hx_sweep_result *r = NULL;
    lm_err err = {0};
    int rc = hx_sweep_run_all(&r, &p, &err);
    if (rc != LM_OK)
        fprintf(stderr, "sweep %s: %s\n", tag, err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    CU_ASSERT_EQUAL(r->n_runs, nc);
    CU_ASSERT_EQUAL(r->report->n_configs, nc);
    CU_ASSERT_EQUAL(r->report->envelope_members, HX_SWEEP_DEFAULT_ENSEMBLE);
    CU_ASSERT_PTR_NOT_NULL(r->env);
    size_t false_alarms = 0;
    const char *naive_hash = NULL;
    for (size_t i = 0; i < nc; ++i) {
        const hx_config_report *c = &r->report->configs[i];
        const hx_sweep_run *run = &r->runs[i];
        if (hx_class_fails(c->cls)) {
            ++false_alarms;
            fprintf(stderr, "false alarm %s %s: %s %s\n", tag, c->config, hx_class_name(c->cls),
                    c->reason);
        }
        CU_ASSERT_STRING_EQUAL(c->hash_hex, run->hash_hex);
        CU_ASSERT_PTR_NOT_NULL(run->base);
        CU_ASSERT(c->prefill_tps > 0.0);
        CU_ASSERT(c->peak_mem_bytes > 0);
        if (lm_backend_flags(run->cfg.backend) & LM_BE_CHUNK_INVARIANT) {
            CU_ASSERT_EQUAL(c->cls, HX_EXACT);
            CU_ASSERT(c->bitwise_baseline);
            /* A chunk-invariant backend ignores threads and chunking: every capture has the
             * same bits (the sweep's backends hold one such backend). */
            if (naive_hash == NULL)
                naive_hash = run->hash_hex;
            CU_ASSERT_STRING_EQUAL(run->hash_hex, naive_hash);
        }
        if (run->cfg.step == 0) { /* a baseline is its own baseline */
            CU_ASSERT_EQUAL(run->baseline, (int64_t)i);
            CU_ASSERT(c->bitwise_baseline);
        }
    }
    CU_ASSERT_EQUAL(false_alarms, 0);

    /* The report files exist and parse back with the same classes and hashes. */
    char json[600], md[600];
    snprintf(json, sizeof json, "%s/%s-report.json", tu_tmpdir(), tag);
    snprintf(md, sizeof md, "%s/%s-report.md", tu_tmpdir(), tag);
    CU_ASSERT_EQUAL(hx_report_write_json(r->report, json, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_report_write_md(r->report, md, &err), LM_OK);
    json_error_t jerr;
    json_t *root = json_load_file(json, 0, &jerr);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(root, "schema")), "kvdrift-report");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(root, "n_gen")), (json_int_t)n_gen);
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(root, "exit_code")), 0);
    json_t *arr = json_object_get(root, "configs");
    CU_ASSERT_EQUAL_FATAL(json_array_size(arr), nc);
    for (size_t i = 0; i < nc; ++i) {
        json_t *o = json_array_get(arr, i);
        const hx_config_report *c = &r->report->configs[i];
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "config")), c->config);
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "class")),
                               hx_class_name(c->cls));
        CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(o, "xxh3_128")), c->hash_hex);
    }
    json_decref(root);
    FILE *f = fopen(md, "r");
    CU_ASSERT_PTR_NOT_NULL(f);
    if (f)
        fclose(f);

    /* Second run, two jobs: reference and envelope come from the cache, and running the
     * pure-C configurations in parallel changes no bit and no verdict. */
    p.jobs = 2;
    hx_sweep_result *r2 = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_sweep_run_all(&r2, &p, &err), LM_OK);
    CU_ASSERT(r2->ref_hit);
    CU_ASSERT(r2->env_hit);
    for (size_t i = 0; i < nc; ++i) {
        CU_ASSERT_STRING_EQUAL(r2->runs[i].hash_hex, r->runs[i].hash_hex);
        CU_ASSERT_EQUAL(r2->report->configs[i].cls, r->report->configs[i].cls);
        CU_ASSERT_EQUAL(r2->report->configs[i].worst_ratio, r->report->configs[i].worst_ratio);
    }
    hx_sweep_result_free(r2);
    hx_sweep_result_free(r);
    free(cfgs);
    ref_model_free(rm);
}

static void test_sweep_synth_tiny_no_false_alarm(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/sweep-tiny.gguf", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 7, LM_TYPE_F32, &err), LM_OK);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    /* Ids below HX_SYNTH_MIN_VOCAB exist in every preset. */
    const int32_t prompt[] = {1, 72, 101, 108, 108, 111, 44, 32, 119, 111, 114};
    sweep_and_check(m, prompt, 11, 6, "tiny");
    lm_model_free(m);
}

static void test_sweep_stories260k_no_false_alarm(void)
{
    lm_model *m = tu_load_model("stories260K.gguf");
    if (m == NULL)
        return;
    lm_err err = {0};
    int32_t *prompt = NULL;
    size_t n = 0;
    const char *text = "Once upon a time, there was a little girl";
    CU_ASSERT_EQUAL_FATAL(lm_tokenize(m->vocab, text, strlen(text), true, &prompt, &n, &err),
                          LM_OK);
    sweep_and_check(m, prompt, (uint32_t)n, 8, "stories260K");
    free(prompt);
    lm_model_free(m);
}

/* The teacher path is the reference's greedy path even when naive's first path is wrong: a
 * path poisoned at index 2 is repaired back to the same tokens (and the reference agrees with
 * the final path everywhere). */
static void test_sweep_path_repaired_to_reference_greedy(void)
{
    char path[512];
    snprintf(path, sizeof path, "%s/repair-tiny.gguf", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 11, LM_TYPE_F32, &err), LM_OK);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    const int32_t prompt[] = {1, 300, 301, 302};
    hx_config cfg = {.backend = "naive", .step = 0, .threads = 1};
    ref_model *rm = tf_ref_open(m);
    hx_sweep_params p = {.model = m, .ref = rm,
                         .model_label = "repair", .prompt = prompt, .n_prompt = 4,
                         .n_gen = 6, .configs = &cfg, .n_configs = 1,
                         .cache_dir = cache_dir(), .ref_threads = 1, .quiet = true};
    hx_sweep_result *clean = NULL, *fixed = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_sweep_run_all(&clean, &p, &err), LM_OK);
    CU_ASSERT_EQUAL(clean->path_source, HX_PATH_NAIVE_FULL);
    hx_sweep_test_poison_path = 2;
    int rc = hx_sweep_run_all(&fixed, &p, &err);
    hx_sweep_test_poison_path = -1;
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    CU_ASSERT_EQUAL(fixed->path_source, HX_PATH_REFERENCE);
    CU_ASSERT_EQUAL(fixed->ref_leaves_at, -1);
    CU_ASSERT_EQUAL(memcmp(fixed->path, clean->path, 6 * sizeof *clean->path), 0);
    hx_sweep_result_free(clean);
    hx_sweep_result_free(fixed);
    lm_model_free(m);
    ref_model_free(rm);
}

static void test_sweep_bad_input(void)
{
    char path[600];
    snprintf(path, sizeof path, "%s/sweep-tiny-bad.gguf", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 7, LM_TYPE_F32, &err), LM_OK);
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    const int32_t prompt[] = {1, 72, 101};
    hx_config two[2] = {{.backend = "naive"}, {.backend = "naive"}};
    ref_model *rm = tf_ref_open(m);
    hx_sweep_params p = {.model = m, .ref = rm, .prompt = prompt, .n_prompt = 3, .n_gen = 2,
                         .configs = two, .n_configs = 1, .ensemble = 4,
                         .cache_dir = cache_dir(), .quiet = true};
    hx_sweep_result *r = NULL;
    CU_ASSERT_EQUAL(hx_sweep_run_all(&r, &p, &err), LM_E_INPUT);
    CU_ASSERT(strstr(err.msg, "ensemble") != NULL);
    CU_ASSERT_PTR_NULL(r);
    lm_err e2 = {0};
    p.ensemble = 0;
    p.n_configs = 2;
    CU_ASSERT_EQUAL(hx_sweep_run_all(&r, &p, &e2), LM_E_INPUT);
    CU_ASSERT(strstr(e2.msg, "naive:step=full") != NULL);
    lm_err e3 = {0};
    const int32_t bad_tok[] = {1, (int32_t)m->hp.n_vocab};
    p.prompt = bad_tok;
    p.n_prompt = 2;
    p.n_configs = 1;
    CU_ASSERT_EQUAL(hx_sweep_run_all(&r, &p, &e3), LM_E_INPUT);
    CU_ASSERT(strstr(e3.msg, "vocabulary") != NULL);
    lm_err e4 = {0};
    size_t n = 0;
    hx_config *c = NULL;
    const char nope[1][16] = {"cuda-x"};
    CU_ASSERT_EQUAL(hx_sweep_cross(&c, &n, nope, 1, steps, 5, NULL, 0, NULL, 0, &e4), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(c);
    lm_model_free(m);
    ref_model_free(rm);
}

#define ARGC(v) ((int)(sizeof(v) / sizeof((v)[0])) - 1) /* minus the NULL terminator */

/* Runs `kvdrift sweep ARGS...` in-process with stdout (the table) sent to /dev/null. */
static int run_cmd(int argc, char **argv)
{
    fflush(stdout);
    int saved = dup(STDOUT_FILENO), null = open("/dev/null", O_WRONLY);
    if (saved >= 0 && null >= 0)
        dup2(null, STDOUT_FILENO);
    int rc = cmd_sweep(argc, argv);
    fflush(stdout);
    if (saved >= 0) {
        dup2(saved, STDOUT_FILENO);
        close(saved);
    }
    if (null >= 0)
        close(null);
    return rc;
}

static bool exists(const char *dir, const char *name)
{
    char p[700];
    struct stat sb;
    snprintf(p, sizeof p, "%s/%s", dir, name);
    return stat(p, &sb) == 0;
}

static void test_sweep_cmd_exit_codes(void)
{
    char out_ok[600], out_bad[600], out_fail[600], model[600];
    snprintf(out_ok, sizeof out_ok, "%s/cmd-ok", tu_tmpdir());
    snprintf(out_bad, sizeof out_bad, "%s/cmd-bad", tu_tmpdir());
    snprintf(out_fail, sizeof out_fail, "%s/cmd-fail", tu_tmpdir());
    snprintf(model, sizeof model, "synth:tiny:seed=3");
    char *cache = (char *)cache_dir();
    /* 0: a clean sweep; the report files are written. */
    char *ok[] = {"sweep", model, "--tokens", "1,72,101,108", "-n", "3", "--steps", "2,full",
                  "--cache", cache, "-o", out_ok, "-q", NULL};
    CU_ASSERT_EQUAL(run_cmd(ARGC(ok), ok), 0);
    CU_ASSERT(exists(out_ok, "report.json"));
    CU_ASSERT(exists(out_ok, "report.md"));
    /* 2: bad input, named on stderr, and nothing written. */
    char *bad[] = {"sweep", model, "--tokens", "1,72", "--steps", "2,zero", "--cache", cache,
                   "-o", out_bad, "-q", NULL};
    CU_ASSERT_EQUAL(run_cmd(ARGC(bad), bad), 2);
    CU_ASSERT(!exists(out_bad, "report.json"));
    char *bad2[] = {"sweep", model, "-p", "x", "--tokens", "1", "-o", out_bad, NULL};
    CU_ASSERT_EQUAL(run_cmd(ARGC(bad2), bad2), 2);
    CU_ASSERT(!exists(out_bad, "."));
    /* 1: a real defect (attention scale missing) in every run, the naive-sr ensemble included
     * (as in real life: it runs the same engine): its envelope is a spread around the
     * members' mean, so the shared defect does not widen it; DRIFT or FLIP, the sweep fails. */
    lm_test_set_defect(LM_DEFECT_ATTN_NO_SCALE);
    char *fail[] = {"sweep", model, "--tokens", "1,72,101,108,108,111", "-n", "4", "--steps",
                    "3,full", "--backends", "naive", "--cache", cache, "-o", out_fail, "-q",
                    NULL};
    CU_ASSERT_EQUAL(run_cmd(ARGC(fail), fail), 1);
    lm_test_set_defect(LM_DEFECT_NONE);
    CU_ASSERT(exists(out_fail, "report.json"));
}

void test_sweep_register(void)
{
    CU_pSuite s = CU_add_suite("sweep", NULL, NULL);
    CU_add_test(s, "test_sweep_synth_tiny_no_false_alarm", test_sweep_synth_tiny_no_false_alarm);
    CU_add_test(s, "test_sweep_stories260k_no_false_alarm", test_sweep_stories260k_no_false_alarm);
    CU_add_test(s, "test_sweep_path_repaired_to_reference_greedy",
                test_sweep_path_repaired_to_reference_greedy);
    CU_add_test(s, "test_sweep_bad_input", test_sweep_bad_input);
    CU_add_test(s, "test_sweep_cmd_exit_codes", test_sweep_cmd_exit_codes);
}
