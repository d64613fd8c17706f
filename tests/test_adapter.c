/* test_adapter.c — adapters (model/adapter.h, run/adapter_exec.h, run/adapter_sweep.h): the
 * --describe document's checks, axes refused before anything runs, a child process's every way
 * to end (exit status, signal, time-out with a child of its own, words passed as they are), and
 * `kvdrift sweep --engine` with a fake adapter written here (a shell script that copies dumps
 * this test prepares from llama.cpp's fixtures): every bad configuration an ERROR row with its
 * reason, the good ones judged. Then the shipped llama.cpp adapter on stories260K when it is
 * installed (make adapters), a visible SKIP otherwise. */
#include "cli/commands.h"
#include "fixtures.h"
#include "fs.h"
#include "kvd_ref.h"
#include "kvd_util.h"
#include "model/adapter.h"
#include "plan/adapter_resolve.h"
#include "run/adapter_exec.h"
#include "test_util.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define FIXTURE "tests/data/dumps/llama.cpp-f32kv-ub7"
#define SHAPE_FIXTURE "tests/data/dumps/llama.cpp-f16weights-f32kv"

static const char good_desc[] =
    "{\"protocol\": 1, \"adapter\": \"fake\", \"engine\": \"fake\", \"engine_version\": \"1\","
    " \"profile\": \"f32\", \"knobs\": [{\"name\": \"mode\", \"values\": [\"good\", \"hang\"],"
    " \"default\": \"good\"}, {\"name\": \"kv\", \"values\": [\"f32\", \"f16\"], \"default\":"
    " \"f16\", \"profiles\": {\"f16\": \"f16kv\"}}]}";

static int parse(hx_adapter_desc *d, const char *text, lm_err *e)
{
    *e = (lm_err){0}; /* an lm_err keeps its first message */
    return hx_adapter_desc_parse(d, text, strlen(text), "fake", e);
}

static void test_adapter_describe_checks(void)
{
    hx_adapter_desc d;
    lm_err e = {0};
    /* special values first: empty, not JSON, not an object, wrong protocol */
    CU_ASSERT_EQUAL(parse(&d, "", &e), LM_E_INPUT);
    CU_ASSERT_EQUAL(parse(&d, "loading... {}", &e), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not one JSON document"));
    CU_ASSERT_EQUAL(parse(&d, "[]", &e), LM_E_INPUT);
    CU_ASSERT_EQUAL(parse(&d, "{\"protocol\": 2}", &e), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "protocol must be 1"));
    const char *bad[] = {
        /* default not among the values */
        "{\"protocol\":1,\"adapter\":\"a\",\"engine\":\"e\",\"engine_version\":\"1\","
        "\"knobs\":[{\"name\":\"k\",\"values\":[\"1\"],\"default\":\"2\"}]}",
        /* an unknown profile */
        "{\"protocol\":1,\"adapter\":\"a\",\"engine\":\"e\",\"engine_version\":\"1\","
        "\"knobs\":[{\"name\":\"k\",\"values\":[\"1\"],\"default\":\"1\",\"profiles\":{\"1\":\"fp8\"}}]}",
        /* a value with a space (never a shell word, never interpreted) */
        "{\"protocol\":1,\"adapter\":\"a\",\"engine\":\"e\",\"engine_version\":\"1\","
        "\"knobs\":[{\"name\":\"k\",\"values\":[\"a b\"],\"default\":\"a b\"}]}",
        /* a knob twice */
        "{\"protocol\":1,\"adapter\":\"a\",\"engine\":\"e\",\"engine_version\":\"1\","
        "\"knobs\":[{\"name\":\"k\",\"values\":[\"1\"],\"default\":\"1\"},"
        "{\"name\":\"k\",\"values\":[\"1\"],\"default\":\"1\"}]}",
        /* no engine_version */
        "{\"protocol\":1,\"adapter\":\"a\",\"engine\":\"e\",\"knobs\":[]}",
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i)
        CU_ASSERT_EQUAL(parse(&d, bad[i], &e), LM_E_INPUT);
    CU_ASSERT_EQUAL_FATAL(parse(&d, good_desc, &e), LM_OK);
    CU_ASSERT_EQUAL(d.n_knobs, 2);
    hx_adapter_config c;
    hx_adapter_default(&c, &d);
    char name[128];
    hx_adapter_config_name(name, sizeof name, &d, &c);
    CU_ASSERT_STRING_EQUAL(name, "fake");
    CU_ASSERT_STRING_EQUAL(hx_adapter_profile(&d, &c, NULL, 0), "f16kv");
    /* axes: the cross product, last axis fastest; undeclared values and knobs refused */
    hx_adapter_config *v = NULL;
    size_t n = 0;
    const char *axes[] = {"mode=good,hang", "kv=f32,f16"};
    CU_ASSERT_EQUAL_FATAL(hx_adapter_plan(&v, &n, &d, axes, 2, &e), LM_OK);
    CU_ASSERT_EQUAL(n, 4);
    hx_adapter_config_name(name, sizeof name, &d, &v[2]);
    CU_ASSERT_STRING_EQUAL(name, "fake:mode=hang:kv=f32");
    CU_ASSERT_STRING_EQUAL(hx_adapter_profile(&d, &v[2], NULL, 0), "f32");
    free(v);
    const char *undeclared[] = {"kv=bf16"};
    e = (lm_err){0};
    CU_ASSERT_EQUAL(hx_adapter_plan(&v, &n, &d, undeclared, 1, &e), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "value 'bf16' is not one adapter fake declares (f32,f16)"));
    const char *unknown[] = {"threads=2"};
    e = (lm_err){0};
    CU_ASSERT_EQUAL(hx_adapter_plan(&v, &n, &d, unknown, 1, &e), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "no such knob"));
}

/* A script under tu_tmpdir() (mode 0755 or 0644), its path. */
static const char *script(const char *name, const char *text, mode_t mode)
{
    const char *p = tu_write_file(name, text, strlen(text));
    CU_ASSERT_FATAL(chmod(p, mode) == 0);
    return p;
}

static void test_adapter_exec_ends(void)
{
    hx_exec_result r;
    lm_err e = {0};
    char why[300], path[1100];
    /* words reach it as they are: no shell sees "$(touch pwned)" */
    snprintf(path, sizeof path, "%s", script("exec-echo.sh", "#!/bin/sh\nprintf '%s|' \"$@\"\n"
                                             "echo oops >&2\nexit 3\n", 0755));
    char *argv1[] = {path, "a b", "$(touch pwned)", ";ls", NULL};
    CU_ASSERT_EQUAL_FATAL(hx_exec_run(&r, path, argv1, 10, 100, &e), LM_OK);
    CU_ASSERT_STRING_EQUAL(r.out, "a b|$(touch pwned)|;ls|");
    CU_ASSERT_EQUAL(access("pwned", F_OK), -1);
    CU_ASSERT_FALSE(hx_exec_ok(&r, 10, why, sizeof why));
    CU_ASSERT_STRING_EQUAL(why, "exit status 3: oops");
    hx_exec_result_free(&r);
    /* a signal */
    snprintf(path, sizeof path, "%s", script("exec-segv.sh", "#!/bin/sh\nkill -SEGV $$\n", 0755));
    char *argv2[] = {path, NULL};
    CU_ASSERT_EQUAL_FATAL(hx_exec_run(&r, path, argv2, 10, 100, &e), LM_OK);
    CU_ASSERT_EQUAL(r.signal, 11);
    CU_ASSERT_FALSE(hx_exec_ok(&r, 10, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "signal 11"));
    hx_exec_result_free(&r);
    /* a time-out: the script and the child it started are both killed */
    char pidf[1100], hang[1400];
    snprintf(pidf, sizeof pidf, "%s/exec-child.pid", tu_tmpdir());
    snprintf(hang, sizeof hang, "#!/bin/sh\nsleep 300 &\necho $! > %s\nsleep 300\n", pidf);
    snprintf(path, sizeof path, "%s", script("exec-hang.sh", hang, 0755));
    char *argv3[] = {path, NULL};
    double t0 = lm_now_s();
    CU_ASSERT_EQUAL_FATAL(hx_exec_run(&r, path, argv3, 1, 100, &e), LM_OK);
    CU_ASSERT(lm_now_s() - t0 < 10);
    CU_ASSERT(r.timed_out);
    CU_ASSERT_FALSE(hx_exec_ok(&r, 1, why, sizeof why));
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "no answer within 1 s"));
    hx_exec_result_free(&r);
    char *pid_text = NULL;
    size_t pn = 0;
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&pid_text, &pn, pidf, 64, &e), LM_OK);
    char procp[64];
    snprintf(procp, sizeof procp, "/proc/%d", atoi(pid_text));
    free(pid_text);
    usleep(200000);
    /* its child is gone too (or a zombie waiting for a parent that reaps) */
    char stat_path[80], line[512] = "";
    snprintf(stat_path, sizeof stat_path, "%s/stat", procp);
    FILE *sf = fopen(stat_path, "r");
    if (sf != NULL) {
        const char *rp = fgets(line, sizeof line, sf) ? strrchr(line, ')') : NULL;
        CU_ASSERT(rp != NULL && rp[1] == ' ' && rp[2] == 'Z');
        fclose(sf);
    }
    /* not executable, and absent */
    snprintf(path, sizeof path, "%s", script("exec-noexec.sh", "#!/bin/sh\nexit 0\n", 0644));
    char *argv4[] = {path, NULL};
    CU_ASSERT_EQUAL(hx_exec_run(&r, path, argv4, 10, 100, &e), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e.msg, "not an executable file"));
    char *argv5[] = {"/nonexistent/adapter", NULL};
    CU_ASSERT_EQUAL(hx_exec_run(&r, argv5[0], argv5, 10, 100, &e), LM_E_INPUT);
}

/* Copies the files of folder src into tu_tmpdir()/dst (made). */
static void copy_dir(const char *src, const char *dst)
{
    char d[1100], a[1300], b[1300];
    snprintf(d, sizeof d, "%s/%s", tu_tmpdir(), dst);
    CU_ASSERT_FATAL(mkdir(d, 0755) == 0);
    const char *files[] = {"dump.json", "logits.npy"};
    for (int i = 0; i < 2; ++i) {
        char *buf = NULL;
        size_t n = 0;
        lm_err e = {0};
        snprintf(a, sizeof a, "%s/%s", src, files[i]);
        snprintf(b, sizeof b, "%s/%s", d, files[i]);
        CU_ASSERT_EQUAL_FATAL(lm_read_file(&buf, &n, a, 1u << 24, &e), LM_OK);
        CU_ASSERT_EQUAL_FATAL(lm_write_file(b, buf, n, &e), LM_OK);
        free(buf);
    }
}

/* The fake adapter: knob mode, default def; each mode one way to fail. Its engine_version is
 * "fake " and the text of fake-version in the test folder ("1" when absent). */
static const char *fake_adapter(const char *name, const char *def)
{
    static char path[1100];
    char text[4096];
    const char *t = tu_tmpdir();
    snprintf(text, sizeof text,
             "#!/bin/sh\n"
             "if [ \"$1\" = --describe ]; then\n"
             "  ver=$(cat %s/fake-version 2>/dev/null || echo 1)\n"
             "  printf '{\"protocol\": 1, \"adapter\": \"fake\", \"engine\": \"fake\","
             " \"engine_version\": \"fake %%s\", \"knobs\": [{\"name\": \"mode\", \"values\":"
             " [\"good\", \"good2\", \"hang\", \"crash\", \"nodump\", \"shape\", \"noise\","
             " \"foreign\"], \"default\": \"%s\"}]}\\n' \"$ver\"\n"
             "  exit 0\n"
             "fi\n"
             "mode=%s; out=\n"
             "while [ $# -gt 0 ]; do case \"$1\" in --out) out=$2; shift 2;;"
             " --set) mode=${2#mode=}; shift 2;; *) shift;; esac; done\n"
             "touch %s/fake-ran\n"
             "case $mode in\n"
             "good|good2) cp %s/fake-good/* \"$out\"/;;\n"
             "hang) sleep 300 & sleep 300;;\n"
             "crash) kill -SEGV $$;;\n"
             "nodump) ;;\n"
             "shape) cp %s/fake-shape/* \"$out\"/;;\n"
             "noise) cp %s/fake-good/* \"$out\"/; echo loading the model;;\n"
             "foreign) cp %s/fake-foreign/* \"$out\"/;;\n"
             "esac\n"
             "exit 0\n",
             t, def, def, t, t, t, t, t);
    snprintf(path, sizeof path, "%s", script(name, text, 0755));
    return path;
}

/* The fixture's 56 ids, as --tokens. */
static void fixture_ids(char *buf, size_t cap)
{
    json_error_t je;
    json_t *j = json_load_file(FIXTURE "/dump.json", 0, &je);
    CU_ASSERT_FATAL(j != NULL);
    size_t i, w = 0;
    json_t *v;
    json_array_foreach(json_object_get(j, "tokens"), i, v)
        w += (size_t)snprintf(buf + w, cap - w, "%s%lld", i ? "," : "",
                              (long long)json_integer_value(v));
    json_decref(j);
}

/* The dumps the fake adapter copies: the fixture (good), one of another shape, and one of
 * another model's logits (random rows of the same shape). */
static void prepare_fake_dumps(void)
{
    static bool prepared;
    if (!prepared) {
        copy_dir(FIXTURE, "fake-good");
        copy_dir(SHAPE_FIXTURE, "fake-shape");
        copy_dir(FIXTURE, "fake-foreign");
        /* another model's logits: random rows of the same shape */
        const uint64_t shape[2] = {56, 512};
        double *x = malloc(56 * 512 * sizeof *x);
        uint64_t st = 99;
        for (size_t i = 0; i < 56 * 512; ++i)
            x[i] = 20.0 * ((double)((st = st * 6364136223846793005ull + 1442695040888963407ull)
                                    >> 11) / 9007199254740992.0) - 10.0;
        char f[1200];
        lm_err e = {0};
        snprintf(f, sizeof f, "%s/fake-foreign/logits.npy", tu_tmpdir());
        CU_ASSERT_EQUAL_FATAL(ref_npy_write(f, x, 2, shape, &e), LM_OK);
        free(x);
        prepared = true;
    }
}

static void test_adapter_sweep_bad_adapters(void)
{
    const char *model = tu_model_path("stories260K.gguf");
    if (model == NULL)
        return;
    prepare_fake_dumps();
    char ids[1024], out[1100], cache[1100], text[16384], marker[1100];
    fixture_ids(ids, sizeof ids);
    snprintf(cache, sizeof cache, "%s/fake-cache", tu_tmpdir());
    snprintf(out, sizeof out, "%s/fake-out", tu_tmpdir());
    snprintf(marker, sizeof marker, "%s/fake-ran", tu_tmpdir());
    const char *adapter = fake_adapter("fake-adapter", "good");
    /* an undeclared axis value: refused before anything runs */
    char *a0[] = {"sweep", (char *)model, "--tokens", ids, "--engine", (char *)adapter, "--axis",
                  "mode=good,fast", "--cache", cache, "-o", out, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_sweep, 13, a0, text, sizeof text), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "value 'fast' is not one adapter fake declares"));
    CU_ASSERT_EQUAL(access(marker, F_OK), -1);
    CU_ASSERT_EQUAL(access(out, F_OK), -1);
    /* every bad configuration an ERROR row, the good ones judged: exit 1 */
    char *a1[] = {"sweep", (char *)model, "--tokens", ids, "--engine", (char *)adapter, "--axis",
                  "mode=good2,hang,crash,nodump,shape,noise,foreign", "--timeout", "2",
                  "--profile", "f32", "-n", "0", "--cache", cache, "-o", out, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_sweep, 19, a1, text, sizeof text), 1);
    const char *want[] = {
        "fake:mode=hang: ERROR: the adapter failed: no answer within 2 s",
        "fake:mode=crash: ERROR: the adapter failed: killed by signal 11",
        "fake:mode=nodump: ERROR: exit 0 but no usable dump",
        "fake:mode=shape: ERROR: exit 0 but no usable dump",
        "fake:mode=noise: ERROR: the adapter wrote 18 bytes to stdout",
        "fake:mode=foreign: ERROR: not the same model",
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i)
        if (strstr(text, want[i]) == NULL) {
            CU_FAIL("a bad configuration's ERROR line is missing");
            fprintf(stderr, "\n  missing: %s\n", want[i]);
        }
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "fake:mode=good2  "));
    CU_ASSERT_PTR_NULL(strstr(text, "fake:mode=good2: ERROR"));
    json_error_t je;
    char rj[1200];
    snprintf(rj, sizeof rj, "%s/report.json", out);
    json_t *j = json_load_file(rj, 0, &je);
    CU_ASSERT_FATAL(j != NULL);
    json_decref(j);
    /* none could run (the baseline crashes, nothing else asked): exit 2, no report */
    const char *crashing = fake_adapter("fake-crashing", "crash");
    char out2[1200];
    snprintf(out2, sizeof out2, "%s-2", out);
    char *a2[] = {"sweep", (char *)model, "--tokens", ids, "--engine", (char *)crashing,
                  "--cache", cache, "-o", out2, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_sweep, 11, a2, text, sizeof text), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "no configuration ran"));
    CU_ASSERT_EQUAL(access(out2, F_OK), -1);
    /* not executable: one line, exit 2 */
    CU_ASSERT_FATAL(chmod(crashing, 0644) == 0);
    char *a3[] = {"adapter", (char *)crashing, "--describe", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_adapter, 3, a3, text, sizeof text), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "not an executable file"));
}

/* A case file naming the fake adapter: bless writes its dumps' bits (an ERROR row is refused,
 * even with --force: it has none), check matches them; the adapter reporting another
 * engine_version makes every golden stale (exit 1), never a match or a mismatch; a knob value
 * it does not declare is refused before anything runs (exit 2); an adapter that says it is not
 * installed skips the case (exit 3: nothing ran). */
static void test_adapter_case_goldens(void)
{
    const char *model = tu_model_path("stories260K.gguf");
    if (model == NULL)
        return;
    prepare_fake_dumps();
    const char *t = tu_tmpdir();
    const char *adapter = fake_adapter("fake-case-adapter", "good");
    char ids[1024], text[16384], cache[1100], gdir[1100], cs[8192], marker[1100], ver[1100];
    fixture_ids(ids, sizeof ids);
    snprintf(cache, sizeof cache, "%s/fake-cache", t);
    snprintf(gdir, sizeof gdir, "%s/fake-golden", t);
    snprintf(marker, sizeof marker, "%s/fake-ran", t);
    snprintf(ver, sizeof ver, "%s/fake-version", t);
    remove(ver);
    CU_ASSERT_FATAL(mkdir(gdir, 0755) == 0);
    const char *knobs[] = {"good,good2", "good,good2,crash", "good,fast"};
    const char *cases[3];
    for (int i = 0; i < 3; ++i) {
        char name[64];
        snprintf(cs, sizeof cs, "name = fakecase\nmodel = %s\ntokens = %s\nn_gen = 0\n"
                 "engine = %s\n[knobs]\nmode = %s\n", model, ids, adapter, knobs[i]);
        snprintf(name, sizeof name, "fake%d.case", i);
        cases[i] = strdup(tu_write_file(name, cs, strlen(cs)));
    }
    char *b0[] = {"bless", (char *)cases[0], "--golden-dir", gdir, "--cache", cache, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_bless, 7, b0, text, sizeof text), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "fakecase: 2 configuration(s) blessed"));
    char *c0[] = {"check", (char *)cases[0], "--golden-dir", gdir, "--cache", cache, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_check, 7, c0, text, sizeof text), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "golden 2 match, 0 mismatch, 0 absent, 0 stale"));
    /* the next engine version: stale, with the versions named */
    CU_ASSERT_EQUAL_FATAL(lm_write_file(ver, "2", 1, &(lm_err){0}), LM_OK);
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_check, 7, c0, text, sizeof text), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "golden 0 match, 0 mismatch, 0 absent, 2 stale"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "engine version changed (blessed on 'fake 1', now "
                                        "'fake 2')"));
    remove(ver);
    /* an ERROR row has no bits: refused, the others blessed */
    char *b1[] = {"bless", (char *)cases[1], "--golden-dir", gdir, "--cache", cache, "--force",
                  "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_bless, 8, b1, text, sizeof text), 1);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "REFUSED fake:mode=crash"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "fakecase: 2 configuration(s) blessed"));
    /* an undeclared value: refused before the adapter runs */
    remove(marker);
    char *c2[] = {"check", (char *)cases[2], "--golden-dir", gdir, "--cache", cache, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_check, 7, c2, text, sizeof text), 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "value 'fast' is not one adapter fake declares"));
    CU_ASSERT_EQUAL(access(marker, F_OK), -1);
    /* not installed here: the case is skipped */
    const char *absent = script("fake-absent", "#!/bin/sh\necho 'fake: not installed' >&2\n"
                                               "exit 3\n", 0755);
    snprintf(cs, sizeof cs, "name = fakecase\nmodel = %s\ntokens = %s\nengine = %s\n", model,
             ids, absent);
    const char *c3p = tu_write_file("fake3.case", cs, strlen(cs));
    char *c3[] = {"check", (char *)c3p, "--golden-dir", gdir, "--cache", cache, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_check, 7, c3, text, sizeof text), 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "SKIP: engine"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "not installed here: fake: not installed"));
    for (int i = 0; i < 3; ++i)
        free((char *)cases[i]);
}

/* stories260K's path when it and the llama.cpp adapter are installed (d its description),
 * else NULL after a SKIP line. */
static const char *llamacpp_and_stories(hx_adapter_desc *d)
{
    const char *model = tu_model_path("stories260K.gguf");
    if (model == NULL)
        return NULL;
    lm_err e = {0};
    if (hx_adapter_describe(d, "adapters/llamacpp", &e) != LM_OK) {
        printf("\n  SKIP llama.cpp adapter: %s (make adapters installs it)\n  ", e.msg);
        return NULL;
    }
    return model;
}

/* The shipped llama.cpp adapter on stories260K: ubatch 1 and 512 with an F32 KV cache are
 * judged under f32 and pass, the default F16 cache under f16kv. */
static void test_adapter_llamacpp_stories(void)
{
    hx_adapter_desc d;
    const char *model = llamacpp_and_stories(&d);
    if (model == NULL)
        return;
    CU_ASSERT_STRING_EQUAL(d.adapter, "llamacpp");
    char ids[1024], out[1100], cache[1100], text[16384];
    fixture_ids(ids, sizeof ids);
    snprintf(cache, sizeof cache, "%s/llamacpp-cache", tu_tmpdir());
    snprintf(out, sizeof out, "%s/llamacpp-out", tu_tmpdir());
    char *a[] = {"sweep", (char *)model, "--tokens", ids, "--engine", "adapters/llamacpp",
                 "--axis", "n_ubatch=1,512", "--axis", "type_k=f32", "--axis", "type_v=f32",
                 "-n", "4", "--cache", cache, "-o", out, "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_sweep, 19, a, text, sizeof text), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "llamacpp:n_ubatch=1:type_k=f32:type_v=f32: profile f32, explained"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "llamacpp:type_k=f32:type_v=f32: profile f32, explained"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "llamacpp: profile f16kv, explained"));
    CU_ASSERT_PTR_NULL(strstr(text, "ERROR"));
}

/* The llama.cpp adapter's hidden states and its defect knob on stories260K (F32 KV cache,
 * judged under f32): with perturb_layer off every hidden state and K/V row is within the
 * envelope; with perturb_layer=2 (position 5's row of layer 2's output moved by 2^-10 of its
 * largest magnitude inside llama.cpp's pass) the judge names layer 2, position 5 as the first
 * hidden state outside and layer 3's K/V at position 5 (the first layer that reads it) as the
 * first K/V row outside, and the configuration fails. */
static void test_adapter_llamacpp_perturb_layer(void)
{
    hx_adapter_desc d;
    const char *model = llamacpp_and_stories(&d);
    if (model == NULL)
        return;
    char ids[1024], out[1100], cache[1100], text[16384];
    fixture_ids(ids, sizeof ids);
    snprintf(cache, sizeof cache, "%s/llamacpp-cache", tu_tmpdir());
    snprintf(out, sizeof out, "%s/llamacpp-perturb-out", tu_tmpdir());
    char *a[] = {"sweep", (char *)model, "--tokens", ids, "--engine", "adapters/llamacpp",
                 "--axis", "perturb_layer=off,2", "--axis", "perturb_pos=5", "--axis",
                 "type_k=f32", "--axis", "type_v=f32", "-n", "4", "--cache", cache, "-o", out,
                 "-q", NULL};
    CU_ASSERT_EQUAL(tf_run_cmd(cmd_sweep, 21, a, text, sizeof text), 1);
    const char *clean = strstr(text, "llamacpp:type_k=f32:type_v=f32:perturb_pos=5: profile f32, "
                                     "explained");
    CU_ASSERT_PTR_NOT_NULL(clean);
    CU_ASSERT(clean != NULL && strstr(clean, "; hidden: every row within the envelope (") != NULL);
    const char *bad = strstr(text, "llamacpp:type_k=f32:type_v=f32:perturb_layer=2:perturb_pos=5: "
                                   "profile -, NOT explained");
    CU_ASSERT_PTR_NOT_NULL(bad);
    CU_ASSERT(bad != NULL && strstr(bad, "K/V: first outside the envelope at layer 3, "
                                         "position 5 (") != NULL);
    CU_ASSERT(bad != NULL && strstr(bad, "hidden: first outside the envelope at layer 2, "
                                         "position 5 (") != NULL);
    if (clean == NULL || bad == NULL)
        fprintf(stderr, "\n%s", text);
}

void test_adapter_register(void)
{
    CU_pSuite s = CU_add_suite("adapter", NULL, NULL);
    CU_add_test(s, "test_adapter_describe_checks", test_adapter_describe_checks);
    CU_add_test(s, "test_adapter_exec_ends", test_adapter_exec_ends);
    CU_add_test(s, "test_adapter_sweep_bad_adapters", test_adapter_sweep_bad_adapters);
    CU_add_test(s, "test_adapter_case_goldens", test_adapter_case_goldens);
    CU_add_test(s, "test_adapter_llamacpp_stories", test_adapter_llamacpp_stories);
    CU_add_test(s, "test_adapter_llamacpp_perturb_layer", test_adapter_llamacpp_perturb_layer);
}
