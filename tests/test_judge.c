/* test_judge.c — `kvdrift judge` end to end on real llama.cpp dumps of stories260K
 * (tests/data/dumps, skipped when the model is absent): F32-KV dumps are NOISE or better under
 * f32; llama.cpp's default F16-KV dumps are DRIFT/FLIP under f32 and NOISE/TIE_FLIP under f16kv;
 * llama.cpp's own K/V cache (kv/ of the ub512 dumps) classifies like its logits; the greedy
 * dumps' tokens_generated follow the reference; injected bugs (one position's logits shifted by
 * 10x the largest envelope of any profile; two K/V rows swapped) fail under every profile
 * while the same dump without the bug passes. */
#include "commands.h"
#include "dump.h"
#include "fs.h"
#include "judge_run.h"
#include "kvd_profile.h"
#include "test_util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define DUMPS "tests/data/dumps/"
static const int32_t ids[56] = {1,   403, 407, 261, 378, 432, 383, 286, 261, 376, 298, 315,
                                421, 395, 317, 426, 338, 401, 396, 267, 337, 410, 408, 419,
                                292, 411, 322, 265, 282, 295, 433, 335, 311, 374, 419, 426,
                                385, 328, 432, 317, 439, 419, 357, 343, 267, 341, 311, 351,
                                366, 382, 276, 298, 414, 299, 267, 265};

static const char *cache_dir(void)
{
    static char dir[512];
    snprintf(dir, sizeof dir, "%s/judge-cache", tu_tmpdir());
    return dir;
}

static hx_dump *load(const lm_model *m, const char *path, const char *name)
{
    char dir[256];
    snprintf(dir, sizeof dir, DUMPS "%s", name);
    hx_dump *d = NULL;
    lm_err err = {0};
    int rc = hx_dump_load(&d, dir, m, path, &err);
    if (rc != LM_OK)
        fprintf(stderr, "%s: %s\n", dir, err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    return d;
}

static hx_report *judge(const lm_model *m, hx_dump *const *d, size_t n, uint32_t n_prompt,
                        const char *const *profiles, uint32_t n_prof)
{
    hx_judge_params p = {.model = m, .prompt = ids, .n_prompt = n_prompt, .dumps = d,
                         .n_dumps = n, .profiles = profiles, .n_profiles = n_prof,
                         .cache_dir = cache_dir(), .ref_threads = 1, .quiet = true};
    hx_report *r = NULL;
    lm_err err = {0};
    int rc = hx_judge_run_all(&r, &p, &err);
    if (rc != LM_OK)
        fprintf(stderr, "judge: %s\n", err.msg);
    CU_ASSERT_EQUAL_FATAL(rc, LM_OK);
    return r;
}

/* Class of dump i under profile k. */
static hx_class cls(const hx_report *r, size_t i, size_t k)
{
    return r->configs[r->dumps[i].first_config + k].cls;
}

static double ratio(const hx_report *r, size_t i, size_t k)
{
    return r->configs[r->dumps[i].first_config + k].worst_ratio;
}

static void test_judge_llamacpp_f32kv_noise_default_f16kv(void)
{
    const char *path = NULL;
    lm_model *m = tu_load_model_at("stories260K.gguf", &path);
    if (m == NULL)
        return;
    lm_err err = {0};
    static const char *const names[6] = {"llama.cpp-f32kv-ub1",   "llama.cpp-f32kv-ub7",
                                         "llama.cpp-f32kv-ub512", "llama.cpp-default-ub1",
                                         "llama.cpp-default-ub7", "llama.cpp-default-ub512"};
    hx_dump *d[6];
    for (int i = 0; i < 6; ++i)
        d[i] = load(m, path, names[i]);
    static const char *const prof[2] = {"f32", "f16kv"};
    hx_report *r = judge(m, d, 6, 56, prof, 2);
    CU_ASSERT_EQUAL(r->n_dumps, 6u);
    CU_ASSERT_EQUAL(r->n_configs, 12u);
    CU_ASSERT_EQUAL(r->n_pairs, 15u);
    printf("\n  judge table (llama.cpp dumps of stories260K, 56 positions):\n");
    for (int i = 0; i < 6; ++i) {
        printf("  %-24s f32 %-8s (err/E %.3g)  f16kv %-8s (err/E %.3g)  KL mean %.3g max %.3g "
               "top1 %.2f  explained by %s\n", names[i], hx_class_name(cls(r, i, 0)),
               ratio(r, i, 0), hx_class_name(cls(r, i, 1)), ratio(r, i, 1), r->dumps[i].kl.mean,
               r->dumps[i].kl.max, r->dumps[i].kl.same_top1, r->dumps[i].explained_by);
        if (i < 3) { /* F32 KV, flash attention off */
            CU_ASSERT(cls(r, i, 0) <= HX_NOISE);
            CU_ASSERT_STRING_EQUAL(r->dumps[i].explained_by, "f32");
        } else {     /* llama.cpp's defaults: F16 KV cache, flash attention auto */
            CU_ASSERT(cls(r, i, 0) == HX_DRIFT || cls(r, i, 0) == HX_FLIP);
            CU_ASSERT(cls(r, i, 1) == HX_NOISE || cls(r, i, 1) == HX_TIE_FLIP);
            CU_ASSERT_STRING_EQUAL(r->dumps[i].explained_by, "f16kv");
        }
        CU_ASSERT_EQUAL(r->dumps[i].kl.n, 56u);
        if (i == 2 || i == 5) { /* the ub512 dumps carry llama.cpp's K/V cache */
            const hx_config_report *c32 = &r->configs[r->dumps[i].first_config];
            const hx_config_report *c16 = c32 + 1;
            CU_ASSERT_STRING_EQUAL(c32->rows[0].name, "L0.K");
            CU_ASSERT_EQUAL(c32->n_rows, 2u * m->hp.n_layer + 56u);
            for (uint32_t t = 0; t < 2u * m->hp.n_layer; ++t) {
                CU_ASSERT(i == 2 ? c32->rows[t].cls <= HX_NOISE : hx_class_fails(c32->rows[t].cls));
                CU_ASSERT(c16->rows[t].cls <= HX_NOISE);
            }
        }
        CU_ASSERT(r->dumps[i].kl.median <= r->dumps[i].kl.p90);
        CU_ASSERT(r->dumps[i].kl.p90 <= r->dumps[i].kl.p99);
        CU_ASSERT(r->dumps[i].kl.p99 <= r->dumps[i].kl.p999);
        CU_ASSERT(r->dumps[i].kl.p999 <= r->dumps[i].kl.max);
    }
    /* every dump is explained by a profile: exit 0 */
    CU_ASSERT_EQUAL(hx_report_exit_code(r, false), 0);
    /* the F32-KV dumps are closer to the reference than the default ones */
    for (size_t i = 0; i < r->n_pairs; ++i)
        if (r->pairs[i].a < 3 && r->pairs[i].b >= 3)
            CU_ASSERT_STRING_EQUAL(r->pairs[i].closer, "a");
    char json[512], md[512];
    snprintf(json, sizeof json, "%s/judge.json", tu_tmpdir());
    snprintf(md, sizeof md, "%s/judge.md", tu_tmpdir());
    CU_ASSERT_EQUAL(hx_report_write_json(r, json, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_report_write_md(r, md, &err), LM_OK);
    hx_report_free(r);
    /* greedy dumps: llama.cpp's own continuation of the 36-token prompt */
    hx_dump *g[2] = {load(m, path, "llama.cpp-greedy-f32kv"),
                     load(m, path, "llama.cpp-greedy-default")};
    r = judge(m, g, 2, 36, prof, 2);
    for (int i = 0; i < 2; ++i) {
        CU_ASSERT(r->dumps[i].has_generated);
        CU_ASSERT_EQUAL(r->dumps[i].compared_to, 20);
        CU_ASSERT_EQUAL(r->dumps[i].first_divergent, -1);
    }
    CU_ASSERT(cls(r, 0, 0) <= HX_NOISE);
    CU_ASSERT(cls(r, 1, 0) == HX_DRIFT || cls(r, 1, 0) == HX_FLIP);
    CU_ASSERT(cls(r, 1, 1) == HX_NOISE || cls(r, 1, 1) == HX_TIE_FLIP);
    hx_report_free(r);
    /* a greedy sequence that leaves the reference: the class is that row's */
    g[0]->generated[5] = (g[0]->generated[5] + 1) % 512;
    r = judge(m, g, 1, 36, prof, 1);
    CU_ASSERT_EQUAL(r->dumps[0].first_divergent, 5);
    CU_ASSERT_EQUAL(r->configs[0].first_divergent, 5);
    CU_ASSERT_EQUAL(r->configs[0].divergent_cls, r->configs[0].cls <= HX_NOISE ? HX_NOISE
                                                                                : r->configs[0].divergent_cls);
    hx_report_free(r);
    for (int i = 0; i < 6; ++i)
        hx_dump_free(d[i]);
    hx_dump_free(g[0]);
    hx_dump_free(g[1]);
    lm_model_free(m);
}

/* The first n tokens of a dump with every row at positions < n: still a valid dump (a row at
 * position p depends on tokens 0..p only). */
static void truncate_dump(hx_dump *d, uint32_t n)
{
    d->n_tokens = d->n_prompt = n;
    uint32_t k = 0;
    while (k < d->n_pos && d->positions[k] < n)
        ++k;
    d->n_pos = k;
}

static void test_judge_injected_bugs_fail_every_profile(void)
{
    const char *path = NULL;
    lm_model *m = tu_load_model_at("stories260K.gguf", &path);
    if (m == NULL)
        return;
    const uint32_t n = 16, np = lm_profile_count(), bad_pos = 9;
    /* llama.cpp's F32-KV dump with its K/V cache (kv/), cut to its first 16 tokens */
    hx_dump *d = load(m, path, "llama.cpp-f32kv-ub512");
    CU_ASSERT_PTR_NOT_NULL_FATAL(d->k);
    truncate_dump(d, n);
    /* clean: passes, explained by f32, K/V rows compared */
    hx_report *r = judge(m, &d, 1, n, NULL, 0);
    CU_ASSERT_EQUAL_FATAL(r->dumps[0].n_profiles, np);
    CU_ASSERT_STRING_EQUAL(r->dumps[0].explained_by, "f32");
    CU_ASSERT_STRING_EQUAL(r->configs[0].rows[0].name, "L0.K");
    CU_ASSERT(r->configs[0].rows[0].cls <= HX_NOISE);
    /* the largest logits envelope at bad_pos over every profile */
    double e_max = 0.0;
    char row[32];
    snprintf(row, sizeof row, "logits@%u", (unsigned)bad_pos);
    for (uint32_t k = 0; k < np; ++k) {
        const hx_config_report *c = &r->configs[r->dumps[0].first_config + k];
        for (size_t i = 0; i < c->n_rows; ++i)
            if (strcmp(c->rows[i].name, row) == 0 && c->rows[i].e > e_max)
                e_max = c->rows[i].e;
    }
    hx_report_free(r);
    CU_ASSERT_FATAL(e_max > 0.0);
    /* bug 1: one position's logits shifted by 10 x E */
    float *saved = malloc(d->n_vocab * sizeof *saved);
    float *row_p = d->rows + (size_t)bad_pos * d->n_vocab;
    memcpy(saved, row_p, d->n_vocab * sizeof *saved);
    for (uint32_t v = 0; v < d->n_vocab; ++v)
        row_p[v] += (float)(10.0 * e_max);
    r = judge(m, &d, 1, n, NULL, 0);
    printf("\n  injected bug: logits@%u shifted by 10 x %.3g:", (unsigned)bad_pos, e_max);
    for (uint32_t k = 0; k < np; ++k) {
        printf(" %s %s (err/E %.3g);", lm_profile_at(k)->name, hx_class_name(cls(r, 0, k)),
               ratio(r, 0, k));
        CU_ASSERT(hx_class_fails(cls(r, 0, k)));
    }
    CU_ASSERT_STRING_EQUAL(r->dumps[0].explained_by, "");
    CU_ASSERT_EQUAL(hx_report_exit_code(r, false), 1);
    hx_report_free(r);
    memcpy(row_p, saved, d->n_vocab * sizeof *saved);
    free(saved);
    /* bug 2: two K/V rows swapped (layer 2, positions 3 and 11), logits untouched */
    size_t row_len = (size_t)m->hp.n_head_kv * m->hp.head_dim;
    for (size_t j = 0; j < row_len; ++j) {
        float t = d->k[2][3 * row_len + j];
        d->k[2][3 * row_len + j] = d->k[2][11 * row_len + j];
        d->k[2][11 * row_len + j] = t;
        t = d->v[2][3 * row_len + j];
        d->v[2][3 * row_len + j] = d->v[2][11 * row_len + j];
        d->v[2][11 * row_len + j] = t;
    }
    r = judge(m, &d, 1, n, NULL, 0);
    printf("\n  injected bug: layer 2 K/V rows 3 and 11 swapped:");
    for (uint32_t k = 0; k < np; ++k) {
        printf(" %s %s (err/E %.3g);", lm_profile_at(k)->name, hx_class_name(cls(r, 0, k)),
               ratio(r, 0, k));
        CU_ASSERT(hx_class_fails(cls(r, 0, k)));
    }
    printf("\n");
    CU_ASSERT_EQUAL(hx_report_exit_code(r, false), 1);
    hx_report_free(r);
    hx_dump_free(d);
    lm_model_free(m);
}

static int run_cmd(const char *const *args, int n)
{
    char *argv[24];
    for (int i = 0; i < n; ++i)
        argv[i] = (char *)args[i];
    argv[n] = NULL;
    fflush(stdout);
    return cmd_judge(n, argv);
}

/* Whether out/report.json and out/report.md were written, report.md with its Dumps section and
 * explained_by as expected, and no other writer's file (report.html) beside them. */
static bool wrote_md_json(const char *out, bool explained)
{
    char p[600], *md = NULL;
    size_t n = 0;
    lm_err err = {0};
    snprintf(p, sizeof p, "%s/report.html", out);
    bool ok = access(p, F_OK) != 0;
    snprintf(p, sizeof p, "%s/report.json", out);
    ok = ok && access(p, F_OK) == 0;
    snprintf(p, sizeof p, "%s/report.md", out);
    ok = ok && lm_read_file(&md, &n, p, 1u << 24, &err) == LM_OK &&
         strstr(md, "\n## Dumps\n") != NULL && (strstr(md, "**none**") == NULL) == explained;
    free(md);
    return ok;
}

static void test_judge_cmd_exit_codes(void)
{
    const char *path = tu_model_path("stories260K.gguf");
    if (path == NULL)
        return;
    char model[512], out[512];
    snprintf(model, sizeof model, "%s", path);
    snprintf(out, sizeof out, "%s/judge-out", tu_tmpdir());
    static const char toks[] = "1,403,407,261,378,432,383,286,261,376,298,315,421,395,317,426,"
                               "338,401,396,267,337,410,408,419,292,411,322,265,282,295,433,"
                               "335,311,374,419,426";
    const char *pass[] = {"judge", model, "--tokens", toks, "--dump", DUMPS "llama.cpp-greedy-f32kv",
                          "--profile", "f32", "--cache", cache_dir(), "-o", out, "-q"};
    CU_ASSERT_EQUAL(run_cmd(pass, 13), 0);
    CU_ASSERT(wrote_md_json(out, true));
    const char *fail[] = {"judge", model, "--tokens", toks, "--dump", DUMPS "llama.cpp-greedy-default",
                          "--profile", "f32", "--cache", cache_dir(), "-o", out, "-q"};
    CU_ASSERT_EQUAL(run_cmd(fail, 13), 1);
    CU_ASSERT(wrote_md_json(out, false));
    const char *explained[] = {"judge", model, "--tokens", toks, "--dump",
                               DUMPS "llama.cpp-greedy-default", "--profile", "f32,f16kv",
                               "--cache", cache_dir(), "-o", out, "-q"};
    CU_ASSERT_EQUAL(run_cmd(explained, 13), 0);
    /* input errors: exit 2 before any work */
    const char *wrong_prompt[] = {"judge", model, "--tokens", "1,2,3", "--dump",
                                  DUMPS "llama.cpp-greedy-f32kv", "-o", out, "-q"};
    CU_ASSERT_EQUAL(run_cmd(wrong_prompt, 9), 2);
    const char *no_dump[] = {"judge", model, "--tokens", toks, "-q"};
    CU_ASSERT_EQUAL(run_cmd(no_dump, 5), 2);
    const char *bad_prof[] = {"judge", model, "--tokens", toks, "--dump",
                              DUMPS "llama.cpp-greedy-f32kv", "--profile", "fp8", "-q"};
    CU_ASSERT_EQUAL(run_cmd(bad_prof, 9), 2);
    const char *not_dump[] = {"judge", model, "--tokens", toks, "--dump", "tests/data", "-q"};
    CU_ASSERT_EQUAL(run_cmd(not_dump, 7), 2);
}

void test_judge_register(void)
{
    CU_pSuite s = CU_add_suite("judge", NULL, NULL);
    CU_add_test(s, "test_judge_llamacpp_f32kv_noise_default_f16kv",
                test_judge_llamacpp_f32kv_noise_default_f16kv);
    CU_add_test(s, "test_judge_injected_bugs_fail_every_profile",
                test_judge_injected_bugs_fail_every_profile);
    CU_add_test(s, "test_judge_cmd_exit_codes", test_judge_cmd_exit_codes);
}
