/* test_semantic.c — the rotating KV cache as a sweep configuration, and semantic versus
 * numerical divergence: a rotating cache whose step changes the attention schedule must be
 * classified against the reference with its own schedule (no false alarm), while the report
 * shows that the computation itself changed; with max_size >= the sequence length the rotating
 * cache must be the plain one, bit for bit. */
#include "plan/case.h"
#include "model/config.h"
#include "kvd_engine.h"
#include "model/report.h"
#include "run/runner.h"
#include "run/sweep.h"
#include "fixtures.h"
#include "plan/synth.h"
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* 20 prompt tokens: more than max_size 8, so step 1 and step 3 evict different positions
 * during prefill than one chunk does (the one-chunk prefill attends to all 20). */
static const int32_t prompt[] = {1,  72, 101, 33, 5,  250, 17, 400, 9,   64,
                                 88, 3,  199, 45, 310, 7,  21, 500, 123, 66};
#define N_PROMPT 20u
#define N_GEN 6u

static const char *cache_dir(void)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/semantic-cache", tu_tmpdir());
    return dir;
}

static lm_model *load_tiny(const char *file)
{
    char path[600];
    snprintf(path, sizeof path, "%s/%s", tu_tmpdir(), file);
    lm_err err = {0};
    lm_model *m = NULL;
    if (hx_synth_write(path, "tiny", 5, LM_TYPE_F32, &err) != LM_OK ||
        lm_model_load(&m, path, &err) != LM_OK) {
        fprintf(stderr, "semantic: %s\n", err.msg);
        return NULL;
    }
    return m;
}

static void test_semantic_config_rot_parse_format(void)
{
    hx_config c;
    lm_err err = {0};
    char buf[HX_CONFIG_STR_MAX];
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, "naive:rot=8/2:step=3", &err), LM_OK);
    CU_ASSERT_EQUAL(c.rot_max, 8u);
    CU_ASSERT_EQUAL(c.rot_keep, 2u);
    hx_config_format(buf, sizeof buf, &c);
    CU_ASSERT_STRING_EQUAL(buf, "naive:step=3:rot=8/2");
    hx_config b = hx_config_baseline(&c); /* the baseline keeps the cache, drops the step */
    CU_ASSERT_EQUAL(b.rot_max, 8u);
    CU_ASSERT_EQUAL(b.step, 0u);
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, "blas:step=full:rot=none", &err), LM_OK);
    CU_ASSERT_EQUAL(c.rot_max, 0u);
    hx_config_format(buf, sizeof buf, &c);
    CU_ASSERT_STRING_EQUAL(buf, "blas:step=full"); /* none is the default: omitted */
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, "naive:rot=2/0", &err), LM_OK);
    CU_ASSERT_EQUAL(c.rot_keep, 0u);
    CU_ASSERT_FALSE(c.rot_window);
    /* the exact-window policy: a third field, kept by format and baseline */
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&c, "naive:step=3:rot=8/2/window", &err), LM_OK);
    CU_ASSERT(c.rot_max == 8u && c.rot_keep == 2u && c.rot_window);
    hx_config_format(buf, sizeof buf, &c);
    CU_ASSERT_STRING_EQUAL(buf, "naive:step=3:rot=8/2/window");
    b = hx_config_baseline(&c);
    CU_ASSERT(b.rot_window && b.step == 0u);
    hx_config d;
    CU_ASSERT_EQUAL_FATAL(hx_config_parse(&d, "naive:step=3:rot=8/2", &err), LM_OK);
    CU_ASSERT_FALSE(hx_config_equal(&c, &d));
    static const char *const bad[] = {"naive:rot=8:2",  "naive:rot=1/0", "naive:rot=8/8",
                                      "naive:rot=8",    "naive:rot=x/1", "naive:rot=8/-1",
                                      "naive:rot=8/2:rot=8/2", "naive:rot=",
                                      "naive:rot=8/2/windows", "naive:rot=8/2/", "naive:rot=8/2/window/window",
                                      "naive:rot=none/window"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; ++i) {
        memset(&err, 0, sizeof err); /* lm_err keeps the first error only */
        CU_ASSERT_EQUAL(hx_config_parse(&c, bad[i], &err), LM_E_INPUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad[i]));
    }
}

static void test_semantic_cross_rot_axis(void)
{
    hx_config *v = calloc(2, sizeof *v);
    CU_ASSERT_FATAL(v != NULL);
    size_t n = 2;
    strcpy(v[0].backend, "naive");
    strcpy(v[1].backend, "naive");
    v[1].step = 3;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_config_cross_rot(&v, &n, "--rot", "none,8:2,16/4", &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(n, 6u);
    CU_ASSERT_EQUAL(v[0].rot_max, 0u);
    CU_ASSERT_EQUAL(v[1].step, 3u);
    CU_ASSERT_EQUAL(v[2].rot_max, 8u);
    CU_ASSERT_EQUAL(v[2].rot_keep, 2u);
    CU_ASSERT_EQUAL(v[3].step, 3u);
    CU_ASSERT_EQUAL(v[5].rot_max, 16u);
    CU_ASSERT_EQUAL(v[5].rot_keep, 4u);
    hx_config *w = calloc(1, sizeof *w);
    size_t nw = 1;
    CU_ASSERT_FATAL(w != NULL);
    strcpy(w[0].backend, "naive");
    CU_ASSERT_EQUAL_FATAL(hx_config_cross_rot(&w, &nw, "--rot", "8:2,8:2:window", &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(nw, 2u);
    CU_ASSERT(!w[0].rot_window && w[1].rot_window && w[1].rot_max == 8u && w[1].rot_keep == 2u);
    CU_ASSERT_EQUAL(hx_config_cross_rot(&w, &nw, "--rot", "8:2:window,8/2/window", &err),
                    LM_E_INPUT);
    free(w);
    memset(&err, 0, sizeof err);
    /* errors leave the list alone */
    CU_ASSERT_EQUAL(hx_config_cross_rot(&v, &n, "--rot", "8:2,8/2", &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "listed twice"));
    memset(&err, 0, sizeof err);
    CU_ASSERT_EQUAL(hx_config_cross_rot(&v, &n, "--rot", "8:9", &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "--rot '8:9'"));
    CU_ASSERT_EQUAL(n, 6u);
    free(v);

    hx_case *c = NULL;
    const char *text = "name = r\nmodel = synth:tiny\ntokens = 1,2\nsteps = 1,full\n"
                       "backends = naive\nattn = default\nrot = none,8:2\nturn = 0\n"; /* no two-turn siblings */
    CU_ASSERT_EQUAL_FATAL(hx_case_parse_string(&c, text, "r.case", &err), LM_OK);
    hx_config *cfg = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_case_configs(&cfg, &n, c, &err), LM_OK);
    CU_ASSERT_EQUAL(n, 4u);
    CU_ASSERT_EQUAL(cfg[3].rot_max, 8u);
    CU_ASSERT_EQUAL(cfg[3].step, 0u);
    free(cfg);
    hx_case_free(c);
    memset(&err, 0, sizeof err);
    const char *bad = "name = r\nmodel = synth:tiny\ntokens = 1,2\nrot = 8:8\n";
    CU_ASSERT_EQUAL(hx_case_parse_string(&c, bad, "r.case", &err), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "r.case:4: rot '8:8'"));
}

/* max_size 64 >= 20 + 6 positions: nothing is ever evicted, so the rotating cache must be the
 * plain cache bit for bit (K/V captured in position order, tokens and logits), at every step
 * and on both backends. */
static void test_semantic_rot_large_is_plain(void)
{
    lm_model *m = load_tiny("semantic-tiny-a.gguf");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    static const uint32_t st[] = {1, 3, 0};
    static const char *const be[] = {"naive", "blas"};
    hx_run_request rq = {.prompt = prompt, .n_prompt = N_PROMPT, .n_gen = N_GEN};
    for (size_t b = 0; b < 2; ++b)
        for (size_t s = 0; s < 3; ++s) {
            hx_config plain = {.step = st[s], .threads = 1};
            strcpy(plain.backend, be[b]);
            hx_config rot = plain;
            rot.rot_max = 64;
            rot.rot_keep = 2;
            hx_capture *a = NULL, *r = NULL;
            hx_run_stats sa, sr;
            lm_err err = {0};
            CU_ASSERT_EQUAL_FATAL(hx_run_capture(&a, &sa, m, &plain, &rq, &err), LM_OK);
            CU_ASSERT_EQUAL_FATAL(hx_run_capture(&r, &sr, m, &rot, &rq, &err), LM_OK);
            uint8_t ha[16], hr[16];
            CU_ASSERT_EQUAL(hx_capture_hash(ha, a, &err), LM_OK);
            CU_ASSERT_EQUAL(hx_capture_hash(hr, r, &err), LM_OK);
            CU_ASSERT_EQUAL(memcmp(ha, hr, 16), 0);
            hx_capture_free(a);
            hx_capture_free(r);
        }
    lm_model_free(m);
}

/* rot=8:2 at steps 1, 3 and full, naive and blas: no false alarm (naive NOISE or better: the
 * class is against the reference with the same schedule), the semantic fields say that steps
 * 1 and 3 compute something else than one chunk, and step=full is the same schedule. A rot=64:2
 * configuration (nothing evicted) must show no semantic difference at all. */
static void test_semantic_rot_sweep_numerical_vs_semantic(void)
{
    lm_model *m = load_tiny("semantic-tiny-b.gguf");
    CU_ASSERT_PTR_NOT_NULL_FATAL(m);
    lm_err err = {0};
    hx_config *cfg = NULL;
    size_t n = 0;
    static const uint32_t st[] = {1, 3, 0};
    static const char be[][16] = {"naive", "blas"};
    CU_ASSERT_EQUAL_FATAL(hx_sweep_cross(&cfg, &n, be, 2, st, 3, NULL, 0, NULL, 0, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_config_cross_rot(&cfg, &n, "rot", "none,8:2,64:2", &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(n, 18u);
    ref_model *rm = tf_ref_open(m);
    hx_sweep_params p = {.model = m, .ref = rm, .model_label = "semantic", .prompt = prompt,
                         .n_prompt = N_PROMPT, .n_gen = N_GEN, .configs = cfg, .n_configs = n,
                         .cache_dir = cache_dir(), .ref_threads = 1, .quiet = true};
    hx_sweep_result *r = NULL;
    int rc = hx_sweep_run_all(&r, &p, &err);
    if (rc != LM_OK)
        fprintf(stderr, "semantic sweep: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    size_t diverging = 0;
    for (size_t i = 0; i < n; ++i) {
        const hx_config_report *c = &r->report->configs[i];
        const hx_config *k = &r->runs[i].cfg;
        if (hx_class_fails(c->cls))
            fprintf(stderr, "false alarm %s: %s %s\n", c->config, hx_class_name(c->cls),
                    c->reason);
        CU_ASSERT(!hx_class_fails(c->cls));
        if (lm_backend_flags(k->backend) & LM_BE_CHUNK_INVARIANT)
            CU_ASSERT(c->cls <= HX_NOISE);
        CU_ASSERT_EQUAL(c->sem_checked, k->rot_max != 0);
        if (k->rot_max == 0)
            continue;
        CU_ASSERT_EQUAL(c->sem_same_schedule, k->step == 0);
        if (k->step == 0 || k->rot_max == 64) {
            /* the same computation: the two references must agree exactly */
            CU_ASSERT_EQUAL(c->sem_max_abs, 0.0);
            CU_ASSERT_EQUAL(c->sem_first, -1);
        } else {
            /* steps 1 and 3 drop different positions than one chunk: the references differ by
             * far more than their float64 rounding (~1e-16 relative); 1e-6 is that margin */
            CU_ASSERT(c->sem_max_abs > 1e-6);
            diverging += c->sem_first >= 0;
        }
        CU_ASSERT(c->sem_min_margin >= 0.0);
    }
    fprintf(stderr, "semantic: %zu of 4 schedule-changing configurations change a token\n",
            diverging);
    /* The report carries both: the JSON's semantic object, the table's column. */
    char path[600];
    snprintf(path, sizeof path, "%s/semantic-report.json", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_report_write_json(r->report, path, &err), LM_OK);
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    json_t *cs = json_object_get(root, "configs");
    CU_ASSERT_FATAL(json_is_array(cs) && json_array_size(cs) == n);
    CU_ASSERT(json_is_null(json_object_get(json_array_get(cs, 0), "semantic")));
    json_t *sem = json_object_get(json_array_get(cs, 6), "semantic"); /* naive step 1 rot 8/2 */
    CU_ASSERT_FATAL(json_is_object(sem));
    CU_ASSERT(json_is_false(json_object_get(sem, "same_schedule")));
    CU_ASSERT(json_number_value(json_object_get(sem, "max_abs_logits")) > 1e-6);
    json_decref(root);
    char cells[HX_REPORT_NCOLS][HX_REPORT_CELL];
    hx_report_cells(cells, &r->report->configs[8]); /* naive step full rot 8/2 */
    CU_ASSERT_STRING_EQUAL(cells[HX_REPORT_NCOLS - 1], "same");
    hx_report_cells(cells, &r->report->configs[0]);
    CU_ASSERT_STRING_EQUAL(cells[HX_REPORT_NCOLS - 1], "-");
    hx_sweep_result_free(r);
    free(cfg);
    lm_model_free(m);
    ref_model_free(rm);
}

void test_semantic_register(void)
{
    CU_pSuite s = CU_add_suite("semantic", NULL, NULL);
    CU_add_test(s, "test_semantic_config_rot_parse_format", test_semantic_config_rot_parse_format);
    CU_add_test(s, "test_semantic_cross_rot_axis", test_semantic_cross_rot_axis);
    CU_add_test(s, "test_semantic_rot_large_is_plain", test_semantic_rot_large_is_plain);
    CU_add_test(s, "test_semantic_rot_sweep_numerical_vs_semantic",
                test_semantic_rot_sweep_numerical_vs_semantic);
}
