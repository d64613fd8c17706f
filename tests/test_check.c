/* test_check.c — `kvdrift bless` / `kvdrift check` end to end on the synthetic tiny model:
 * case file -> bless -> check -> JUnit (parsed back with libxml2) and JSON (jansson). Runs in
 * tu_tmpdir() with its own golden and cache folders; n_gen is small to keep it fast. */
#include "model/capture.h"
#include "plan/case.h"
#include "cli/commands.h"
#include "judge/fingerprint.h"
#include "judge/envelope.h"
#include "judge/golden.h"
#include "judge/golden_key.h"
#include "kvd_version.h"
#include "plan/synth.h"
#include "test_util.h"

#include <dirent.h>
#include <fcntl.h>
#include <jansson.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* 3 steps x 2 backends, each configuration with multi-token chunks (steps 3 and full)
 * followed by its two-turn sibling (the case default turn) = 10 configurations. Token ids are
 * below the tiny preset's 512. */
#define N_CFG 10
static const char tiny_case[] = "; test case\n"
                                "name = t-tiny\n"
                                "model = synth:tiny:seed=7\n"
                                "tokens = 1,72,101,108,108,111,32,119\n"
                                "steps = 1,3,full\n"
                                "backends = naive,blas\n"
                                "threads = 1\n"
                                "attn = default\n"
                                "n_gen = 3\n";

static char dir[900], gdir[1000], cdir[1000], case_path[1000], out_path[1000], err_path[1000];

static void setup_dirs(void)
{
    if (dir[0])
        return;
    snprintf(dir, sizeof dir, "%s/check", tu_tmpdir());
    snprintf(gdir, sizeof gdir, "%s/golden", dir);
    snprintf(cdir, sizeof cdir, "%s/cache", dir);
    snprintf(out_path, sizeof out_path, "%s/stdout.txt", dir);
    snprintf(err_path, sizeof err_path, "%s/stderr.txt", dir);
    CU_ASSERT_FATAL(mkdir(dir, 0755) == 0);
    snprintf(case_path, sizeof case_path, "%s", tu_write_file("check/t-tiny.case", tiny_case,
                                                              strlen(tiny_case)));
}

/* Runs a command with argv built from NULL-terminated strings; its stdout goes to out_path and
 * its stderr to err_path (kept out of the CUnit output, read back by the tests). Returns its
 * exit code. */
static int run(int (*cmd)(int, char **), ...)
{
    char *argv[32];
    int argc = 0;
    va_list ap;
    va_start(ap, cmd);
    for (char *a; argc < 31 && (a = va_arg(ap, char *)) != NULL;)
        argv[argc++] = a;
    va_end(ap);
    argv[argc] = NULL;
    fflush(stdout);
    fflush(stderr);
    int saved = dup(STDOUT_FILENO), saved_err = dup(STDERR_FILENO);
    int fd = open(out_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    int fd_err = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    CU_ASSERT_FATAL(saved >= 0 && saved_err >= 0 && fd >= 0 && fd_err >= 0);
    dup2(fd, STDOUT_FILENO);
    dup2(fd_err, STDERR_FILENO);
    close(fd);
    close(fd_err);
    int rc = cmd(argc, argv);
    fflush(stdout);
    fflush(stderr);
    dup2(saved, STDOUT_FILENO);
    dup2(saved_err, STDERR_FILENO);
    close(saved);
    close(saved_err);
    return rc;
}

static void f_write(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs(text, f);
    fclose(f);
}

static char *read_text(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (f == NULL)
        return NULL;
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return buf;
}

static int check(const char *junit, const char *json, bool strict)
{
    return strict ? run(cmd_check, "check", case_path, "--golden-dir", gdir, "--cache", cdir,
                        "--junit", junit, "--json", json, "--strict", "-q", (char *)NULL)
                  : run(cmd_check, "check", case_path, "--golden-dir", gdir, "--cache", cdir,
                        "--junit", junit, "--json", json, "-q", (char *)NULL);
}

/* Per configuration of the single report in a check --json file: golden status and class. */
typedef struct cfg_result {
    char config[96], golden[16], cls[16];
    bool fails, bitwise_baseline;
} cfg_result;

static size_t json_results(cfg_result *out, size_t cap, const char *path)
{
    json_error_t je;
    json_t *root = json_load_file(path, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    json_t *cfgs = json_object_get(json_array_get(json_object_get(root, "reports"), 0), "configs");
    size_t n = 0, i;
    json_t *c;
    json_array_foreach(cfgs, i, c) {
        if (n == cap)
            break;
        snprintf(out[n].config, sizeof out[n].config, "%s",
                 json_string_value(json_object_get(c, "config")));
        snprintf(out[n].golden, sizeof out[n].golden, "%s",
                 json_string_value(json_object_get(c, "golden")));
        snprintf(out[n].cls, sizeof out[n].cls, "%s",
                 json_string_value(json_object_get(c, "class")));
        out[n].fails = json_is_true(json_object_get(c, "fails"));
        out[n].bitwise_baseline = json_is_true(json_object_get(c, "bitwise_baseline"));
        n++;
    }
    json_decref(root);
    return n;
}

/* Counts of a JUnit file, checked against the structure CI servers' JUnit parsers accept
 * (Jenkins' junit-10.xsd, Ant's format): testsuites > testsuite[@tests] > (properties |
 * testcase[@name]) ; testcase > (failure | skipped | system-out | system-err)*. */
typedef struct junit_counts {
    int suites, cases, failures, skipped, structure_errors;
    int sum_tests_attr, sum_failures_attr;
    int timed;        /* test cases with a time attribute > 0 */
    int outs_full;    /* run test cases whose <system-out> names class, err/E and golden */
    char first_failure[512];
} junit_counts;

static bool is(const xmlNode *n, const char *name)
{
    return n->type == XML_ELEMENT_NODE && xmlStrcmp(n->name, (const xmlChar *)name) == 0;
}

static int attr_int(xmlNode *n, const char *name)
{
    xmlChar *v = xmlGetProp(n, (const xmlChar *)name);
    int r = v ? atoi((const char *)v) : -1;
    xmlFree(v);
    return r;
}

static junit_counts parse_junit(const char *path)
{
    junit_counts k = {0};
    xmlDoc *doc = xmlReadFile(path, NULL, XML_PARSE_NONET);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    xmlNode *root = xmlDocGetRootElement(doc);
    k.structure_errors += !is(root, "testsuites");
    for (xmlNode *s = root->children; s; s = s->next) {
        if (s->type != XML_ELEMENT_NODE)
            continue;
        if (!is(s, "testsuite")) {
            k.structure_errors++;
            continue;
        }
        k.suites++;
        int tests = attr_int(s, "tests");
        k.structure_errors += tests < 0; /* @tests is required */
        k.sum_tests_attr += tests;
        k.sum_failures_attr += attr_int(s, "failures");
        for (xmlNode *t = s->children; t; t = t->next) {
            if (t->type != XML_ELEMENT_NODE || is(t, "properties"))
                continue;
            if (!is(t, "testcase")) {
                k.structure_errors++;
                continue;
            }
            k.cases++;
            xmlChar *tm = xmlGetProp(t, (const xmlChar *)"time");
            k.timed += tm && atof((const char *)tm) > 0.0;
            xmlFree(tm);
            xmlChar *name = xmlGetProp(t, (const xmlChar *)"name");
            k.structure_errors += name == NULL || name[0] == '\0';
            xmlFree(name);
            for (xmlNode *e = t->children; e; e = e->next) {
                if (e->type != XML_ELEMENT_NODE)
                    continue;
                if (is(e, "failure")) {
                    k.failures++;
                    xmlChar *m = xmlGetProp(e, (const xmlChar *)"message");
                    xmlChar *ty = xmlGetProp(e, (const xmlChar *)"type");
                    if (k.first_failure[0] == '\0')
                        snprintf(k.first_failure, sizeof k.first_failure, "%s: %s",
                                 ty ? (const char *)ty : "", m ? (const char *)m : "");
                    xmlFree(m);
                    xmlFree(ty);
                } else if (is(e, "skipped")) {
                    k.skipped++;
                } else if (is(e, "system-out")) {
                    xmlChar *txt = xmlNodeGetContent(e);
                    const char *so = (const char *)txt;
                    k.outs_full += so && strstr(so, "class ") && strstr(so, "err/E") &&
                                   strstr(so, "golden ");
                    xmlFree(txt);
                } else if (!is(e, "system-err")) {
                    k.structure_errors++;
                }
            }
        }
    }
    xmlFreeDoc(doc);
    return k;
}

/* The golden keys' libm probe of the case's model (synth:tiny:seed=7) over the positions its
 * runs read: 8 prompt tokens + n_gen 3. */
static const char *case_rope(void)
{
    static char probe[17];
    if (probe[0])
        return probe;
    char path[1100];
    snprintf(path, sizeof path, "%s/rope-probe-tiny.gguf", tu_tmpdir());
    lm_err err = {0};
    lm_model *m = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(path, "tiny", 7, LM_TYPE_F32, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(lm_model_load(&m, path, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_golden_rope_probe(probe, m, 8 + 3, &err), LM_OK);
    lm_model_free(m);
    return probe;
}

static void golden_file(char *out, size_t cap)
{
    snprintf(out, cap, "%s/t-tiny.json", gdir);
}

/* Bless writes one entry per configuration; check then matches every one bit for bit. */
static void test_check_bless_then_match(void)
{
    setup_dirs();
    CU_ASSERT_EQUAL_FATAL(run(cmd_bless, "bless", case_path, "--golden-dir", gdir, "--cache", cdir,
                              "-q", (char *)NULL), 0);
    char gpath[1100];
    golden_file(gpath, sizeof gpath);
    hx_golden *g = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_golden_load(&g, gpath, false, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_golden_count(g), N_CFG);
    hx_golden_free(g);

    char junit[1100], json[1100];
    snprintf(junit, sizeof junit, "%s/match.xml", dir);
    snprintf(json, sizeof json, "%s/match.json", dir);
    CU_ASSERT_EQUAL(check(junit, json, false), 0);
    cfg_result r[16];
    size_t n = json_results(r, 16, json);
    CU_ASSERT_EQUAL(n, N_CFG);
    /* One meaning per word: EXACT is "bitwise equal to its baseline", whatever the golden
     * says; a golden match is its own flag. blas at steps 1 and 3 differs from its one-chunk
     * baseline, so both kinds occur. */
    int n_exact = 0;
    for (size_t i = 0; i < n; ++i) {
        CU_ASSERT_STRING_EQUAL(r[i].golden, "match");
        CU_ASSERT_EQUAL(strcmp(r[i].cls, "EXACT") == 0, r[i].bitwise_baseline);
        n_exact += strcmp(r[i].cls, "EXACT") == 0;
        CU_ASSERT_FALSE(r[i].fails);
    }
    CU_ASSERT(n_exact > 0 && n_exact < (int)n);
    /* Strict passes too: no bit changed. */
    CU_ASSERT_EQUAL(check(junit, json, true), 0);
    junit_counts k = parse_junit(junit);
    CU_ASSERT_EQUAL(k.timed, N_CFG);     /* time is the configuration's wall time, not 0 */
    CU_ASSERT_EQUAL(k.outs_full, N_CFG); /* passing cases say class, err/E, golden status */
    CU_ASSERT_EQUAL(k.structure_errors, 0);
    CU_ASSERT_EQUAL(k.suites, 1);
    CU_ASSERT_EQUAL(k.cases, N_CFG); /* one testcase per configuration */
    CU_ASSERT_EQUAL(k.sum_tests_attr, N_CFG);
    CU_ASSERT_EQUAL(k.failures, 0);
    CU_ASSERT_EQUAL(k.skipped, 0);
}

/* Rewrites the golden file at path with root (sorted keys, as bless writes it). */
static void write_json(const char *path, json_t *root)
{
    CU_ASSERT_EQUAL_FATAL(json_dump_file(root, path, JSON_SORT_KEYS | JSON_INDENT(2)), 0);
}

/* Bless records its provenance in the golden file's metadata block (version, commit, command
 * line, token ids, phase timings); check never compares it: every configuration still
 * matches with the metadata changed, and with it removed (a golden written before the block
 * existed). JUnit carries the token ids as a property. */
static void test_check_golden_metadata_ignored(void)
{
    setup_dirs();
    CU_ASSERT_EQUAL_FATAL(run(cmd_bless, "bless", case_path, "--golden-dir", gdir, "--cache", cdir,
                              "-q", (char *)NULL), 0);
    char gpath[1100], junit[1100], json[1100];
    golden_file(gpath, sizeof gpath);
    snprintf(junit, sizeof junit, "%s/meta.xml", dir);
    snprintf(json, sizeof json, "%s/meta.json", dir);
    json_error_t je;
    json_t *root = json_load_file(gpath, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(root);
    json_t *m = json_object_get(json_object_get(root, "metadata"), "t-tiny");
    CU_ASSERT_FATAL(json_is_object(m));
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(m, "kvdrift_version")), KVD_VERSION);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(m, "kvdrift_commit")),
                           lm_git_commit());
    const char *cl = json_string_value(json_object_get(m, "command_line"));
    CU_ASSERT_FATAL(cl != NULL);
    CU_ASSERT_EQUAL(strncmp(cl, "kvdrift bless ", 14), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(cl, case_path));
    static const int ids[8] = {1, 72, 101, 108, 108, 111, 32, 119}; /* tiny_case's tokens */
    const json_t *pi = json_object_get(m, "prompt_ids");
    CU_ASSERT_FATAL(json_is_array(pi) && json_array_size(pi) == 8);
    for (size_t i = 0; i < 8; ++i)
        CU_ASSERT_EQUAL(json_integer_value(json_array_get(pi, i)), ids[i]);
    const json_t *total = json_object_get(json_object_get(m, "phase_s"), "total");
    CU_ASSERT(json_is_real(total) && json_real_value(total) > 0.0);
    CU_ASSERT(json_is_real(json_object_get(json_object_get(m, "phase_s"), "reference")));
    /* changed metadata: still every configuration a match, strict included */
    json_object_set_new(m, "command_line", json_string("kvdrift bless elsewhere"));
    json_object_set_new(json_object_get(m, "phase_s"), "total", json_real(1e9));
    json_object_set_new(m, "prompt_ids", json_array());
    write_json(gpath, root);
    cfg_result r[16];
    CU_ASSERT_EQUAL(check(junit, json, true), 0);
    size_t n = json_results(r, 16, json);
    CU_ASSERT_EQUAL(n, N_CFG);
    for (size_t i = 0; i < n; ++i)
        CU_ASSERT_STRING_EQUAL(r[i].golden, "match");
    const char *x = read_text(junit);
    CU_ASSERT_PTR_NOT_NULL(x && strstr(x, "name=\"prompt_ids\" value=\"1,72,101,108,108,111,32,119\""));
    /* no metadata at all (a golden from before the block): the same */
    json_object_del(root, "metadata");
    write_json(gpath, root);
    json_decref(root);
    CU_ASSERT_EQUAL(check(junit, json, true), 0);
    n = json_results(r, 16, json);
    CU_ASSERT_EQUAL(n, N_CFG);
    for (size_t i = 0; i < n; ++i)
        CU_ASSERT_STRING_EQUAL(r[i].golden, "match");
}

/* One corrupted golden hash: MISMATCH, judged by the reference classification (passes), but
 * --strict fails on the changed bits, and the JUnit failure says so. */
static void test_check_mismatch_strict(void)
{
    setup_dirs();
    char gpath[1100];
    golden_file(gpath, sizeof gpath);
    hx_golden *g = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_golden_load(&g, gpath, false, &err), LM_OK);
    hx_fingerprint fp;
    hx_fingerprint_detect(&fp);
    const char *victim = "blas:step=3:threads=1";
    hx_golden_key vkey;
    hx_golden_key_of(&vkey, &fp, "blas", case_rope());
    hx_golden_entry e;
    bool found = false;
    CU_ASSERT_EQUAL_FATAL(hx_golden_find(g, "t-tiny", victim, vkey.id, &e, &found, &err), LM_OK);
    CU_ASSERT_FATAL(found);
    /* one changed hex digit, the last: a comparison that stops early (a prefix, 16 of the 32
     * digits) would miss it */
    e.hash_hex[31] = e.hash_hex[31] == '0' ? '1' : '0';
    CU_ASSERT_EQUAL_FATAL(hx_golden_set(g, "t-tiny", victim, vkey.id, vkey.text, &e, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_golden_save(g, gpath, &err), LM_OK);
    hx_golden_free(g);

    char junit[1100], json[1100];
    snprintf(junit, sizeof junit, "%s/mismatch.xml", dir);
    snprintf(json, sizeof json, "%s/mismatch.json", dir);
    CU_ASSERT_EQUAL(check(junit, json, false), 0);
    cfg_result r[16];
    size_t n = json_results(r, 16, json);
    CU_ASSERT_EQUAL(n, N_CFG);
    int mismatches = 0;
    for (size_t i = 0; i < n; ++i) {
        bool v = strcmp(r[i].config, victim) == 0;
        CU_ASSERT_STRING_EQUAL(r[i].golden, v ? "mismatch" : "match");
        mismatches += v;
        if (v) /* the reference classification decides: a legitimate config never fails */
            CU_ASSERT_FALSE(r[i].fails);
    }
    CU_ASSERT_EQUAL(mismatches, 1);
    junit_counts k = parse_junit(junit);
    CU_ASSERT_EQUAL(k.failures, 0);

    CU_ASSERT_EQUAL(check(junit, json, true), 1);
    k = parse_junit(junit);
    CU_ASSERT_EQUAL(k.structure_errors, 0);
    CU_ASSERT_EQUAL(k.cases, N_CFG);
    CU_ASSERT_EQUAL(k.failures, 1);
    CU_ASSERT_EQUAL(k.sum_failures_attr, 1);
    /* The message names the real cause: the golden, not the classification's reason. */
    CU_ASSERT_PTR_NOT_NULL(strstr(k.first_failure, "GOLDEN_MISMATCH: strict bits: golden "
                                                   "mismatch: capture XXH3 "));
    CU_ASSERT_PTR_NULL(strstr(k.first_failure, "bitwise equal"));
    n = json_results(r, 16, json);
    for (size_t i = 0; i < n; ++i)
        CU_ASSERT_EQUAL(r[i].fails, strcmp(r[i].config, victim) == 0);

    /* Bless again restores the match. */
    CU_ASSERT_EQUAL(run(cmd_bless, "bless", case_path, "--golden-dir", gdir, "--cache", cdir, "-q",
                        (char *)NULL), 0);
    CU_ASSERT_EQUAL(check(junit, json, true), 0);
}

/* Goldens keyed per configuration by what can change its bits: goldens blessed on a machine
 * whose OpenBLAS picked another core (a fake blas describe text) hold here for every naive
 * configuration (its key has no CPU, ISA or BLAS part) and are absent for blas, which the
 * reference classification then judges (non-strict passes; strict fails on the absent ones).
 * Blessing here adds this core's blas entries and shares the naive ones. */
static void test_check_keys_per_configuration(void)
{
    setup_dirs();
    char gpath[1100], opath[1100];
    golden_file(gpath, sizeof gpath);
    snprintf(opath, sizeof opath, "%s/other", dir);
    mkdir(opath, 0755);
    hx_golden *g = NULL, *o = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_golden_load(&g, gpath, false, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_golden_create(&o, &err), LM_OK);
    hx_fingerprint self, other;
    hx_fingerprint_detect(&self);
    other = self; /* another CPU model, ISA and C library: naive keys must not see them */
    snprintf(other.cpu, sizeof other.cpu, "Elsewhere CPU");
    snprintf(other.isa, sizeof other.isa, "sse2");
    snprintf(other.libc, sizeof other.libc, "glibc 2.39");
    snprintf(other.libm, sizeof other.libm, "expf=fma probe=0badf00d");
    hx_fingerprint_finish(&other);
    hx_golden_key naive_self, naive_other, blas_self, blas_other;
    hx_golden_key_of(&naive_self, &self, "naive", case_rope());
    hx_golden_key_make(&naive_other, &other, "naive", NULL, case_rope());
    hx_golden_key_of(&blas_self, &self, "blas", case_rope());
    hx_golden_key_make(&blas_other, &other, "blas", "blas=OpenBLAS; blas_core=Haswell-elsewhere",
                       case_rope());
    CU_ASSERT_STRING_EQUAL(naive_self.id, naive_other.id);
    CU_ASSERT_STRING_NOT_EQUAL(blas_self.id, blas_other.id);
    hx_case *c = NULL;
    hx_config *cfgs = NULL;
    size_t n_cfg = 0;
    CU_ASSERT_EQUAL_FATAL(hx_case_load(&c, case_path, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(hx_case_configs(&cfgs, &n_cfg, c, &err), LM_OK);
    size_t n_naive = 0;
    for (size_t i = 0; i < n_cfg; ++i) {
        char name[HX_CONFIG_STR_MAX];
        hx_golden_entry e;
        bool found = false, naive = strcmp(cfgs[i].backend, "naive") == 0;
        hx_config_format(name, sizeof name, &cfgs[i]);
        const hx_golden_key *mine = naive ? &naive_self : &blas_self;
        const hx_golden_key *theirs = naive ? &naive_other : &blas_other;
        CU_ASSERT_EQUAL(hx_golden_find(g, "t-tiny", name, mine->id, &e, &found, &err), LM_OK);
        CU_ASSERT(found);
        if (!naive) /* another BLAS core, other bits */
            e.hash_hex[31] = e.hash_hex[31] == 'f' ? 'e' : 'f';
        n_naive += naive;
        CU_ASSERT_EQUAL(hx_golden_set(o, "t-tiny", name, theirs->id, theirs->text, &e, &err),
                        LM_OK);
    }
    CU_ASSERT_EQUAL(n_naive, N_CFG / 2);
    char ofile[1200];
    snprintf(ofile, sizeof ofile, "%s/t-tiny.json", opath);
    CU_ASSERT_EQUAL_FATAL(hx_golden_save(o, ofile, &err), LM_OK);
    hx_golden_free(g);
    hx_golden_free(o);
    free(cfgs);
    hx_case_free(c);

    char junit[1100], json[1100];
    snprintf(junit, sizeof junit, "%s/other.xml", dir);
    snprintf(json, sizeof json, "%s/other.json", dir);
    CU_ASSERT_EQUAL(run(cmd_check, "check", case_path, "--golden-dir", opath, "--cache", cdir,
                        "--junit", junit, "--json", json, "-q", (char *)NULL), 0);
    const char *text = read_text(out_path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    char no_golden[64];
    snprintf(no_golden, sizeof no_golden, "no golden for %d configuration(s)", N_CFG / 2);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, no_golden));
    cfg_result r[16];
    size_t n = json_results(r, 16, json);
    CU_ASSERT_EQUAL(n, N_CFG);
    for (size_t i = 0; i < n; ++i) {
        bool naive = strncmp(r[i].config, "naive:", 6) == 0;
        CU_ASSERT_STRING_EQUAL(r[i].golden, naive ? "match" : "absent");
        CU_ASSERT_FALSE(r[i].fails);
    }
    /* Strict treats an absent golden as a changed bit. */
    CU_ASSERT_EQUAL(run(cmd_check, "check", case_path, "--golden-dir", opath, "--cache", cdir,
                        "--strict", "-q", (char *)NULL), 1);
    /* Blessing here adds this core's blas entries; the naive ones are the same entries. */
    CU_ASSERT_EQUAL(run(cmd_bless, "bless", case_path, "--golden-dir", opath, "--cache", cdir,
                        "-q", (char *)NULL), 0);
    CU_ASSERT_EQUAL_FATAL(hx_golden_load(&o, ofile, false, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_golden_count(o), N_CFG + N_CFG / 2);
    hx_golden_free(o);
    CU_ASSERT_EQUAL(run(cmd_check, "check", case_path, "--golden-dir", opath, "--cache", cdir,
                        "--strict", "-q", (char *)NULL), 0);
}

/* A malformed case file: LM_E_INPUT with FILE:LINE from the loader; check and bless exit 2
 * before running anything, writing no report. */
static void test_check_bad_case_file(void)
{
    setup_dirs();
    static const char text[] = "name = broken\n"
                               "model = synth:tiny\n"
                               "steps = 1,2,x\n"
                               "tokens = 1,2,3\n";
    char path[1100];
    snprintf(path, sizeof path, "%s", tu_write_file("check/broken.case", text, strlen(text)));
    hx_case *c = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL(hx_case_load(&c, path, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(c);
    char want[1200];
    snprintf(want, sizeof want, "%s:3: ", path);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, want));

    char junit[1100];
    snprintf(junit, sizeof junit, "%s/never.xml", dir);
    CU_ASSERT_EQUAL(run(cmd_check, "check", case_path, path, "--golden-dir", gdir, "--cache", cdir,
                        "--junit", junit, "-q", (char *)NULL), 2);
    CU_ASSERT_EQUAL(access(junit, F_OK), -1); /* nothing written */
    /* Exactly one line on stderr, compiler-style: FILE:LINE: reason. */
    const char *e = read_text(err_path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(e);
    CU_ASSERT_EQUAL(strncmp(e, want, strlen(want)), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(e, "steps"));
    CU_ASSERT_PTR_NOT_NULL(strchr(e, '\n'));
    CU_ASSERT_EQUAL(strchr(e, '\n')[1], '\0');
    CU_ASSERT_EQUAL(run(cmd_bless, "bless", path, "--golden-dir", gdir, (char *)NULL), 2);
    CU_ASSERT_EQUAL(run(cmd_check, "check", "--no-such-flag", case_path, (char *)NULL), 2);
    CU_ASSERT_EQUAL(run(cmd_check, "check", (char *)NULL), 2);
}

/* A case whose model file is absent is skipped, not failed: JUnit <skipped/> per config. */
static void test_check_missing_model_skips(void)
{
    setup_dirs();
    char text[1400], junit[1100], json[1100];
    snprintf(text, sizeof text, "name = t-absent\nmodel = %s/no-such-model.gguf\n"
             "tokens = 1,2,3\nsteps = 2,full\nbackends = naive\nattn = default\n", dir);
    const char *path = tu_write_file("check/absent.case", text, strlen(text));
    char p[1100];
    snprintf(p, sizeof p, "%s", path);
    snprintf(junit, sizeof junit, "%s/absent.xml", dir);
    snprintf(json, sizeof json, "%s/absent.json", dir);
    /* Every case skipped: nothing was checked, which is not a pass (exit 3). */
    CU_ASSERT_EQUAL(run(cmd_check, "check", p, "--golden-dir", gdir, "--cache", cdir, "--junit",
                        junit, "--json", json, "--strict", "-q", (char *)NULL), 3);
    CU_ASSERT_PTR_NOT_NULL(strstr(read_text(out_path), "NOTHING RAN"));
    /* --allow-skip opts out; a case that ran beside it makes the skip harmless anyway. */
    CU_ASSERT_EQUAL(run(cmd_check, "check", p, "--golden-dir", gdir, "--cache", cdir, "--junit",
                        junit, "--json", json, "--strict", "--allow-skip", "-q", (char *)NULL), 0);
    CU_ASSERT_EQUAL(run(cmd_check, "check", p, case_path, "--golden-dir", gdir, "--cache", cdir,
                        "-q", (char *)NULL), 0);
    CU_ASSERT_EQUAL(run(cmd_check, "check", p, "--golden-dir", gdir, "--cache", cdir, "--junit",
                        junit, "--json", json, "--strict", "--allow-skip", "-q", (char *)NULL), 0);
    const char *out = read_text(out_path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "SKIP"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "no-such-model.gguf"));
    junit_counts k = parse_junit(junit);
    CU_ASSERT_EQUAL(k.structure_errors, 0);
    CU_ASSERT_EQUAL(k.cases, 4); /* steps 2 and full, each with its two-turn sibling */
    CU_ASSERT_EQUAL(k.skipped, 4);
    CU_ASSERT_EQUAL(k.failures, 0);
    /* bless has nothing to bless: an input error, and no golden file appears. */
    CU_ASSERT_EQUAL(run(cmd_bless, "bless", p, "--golden-dir", gdir, "--cache", cdir, "-q",
                        (char *)NULL), 2);
    char g[1100];
    snprintf(g, sizeof g, "%s/t-absent.json", gdir);
    CU_ASSERT_EQUAL(access(g, F_OK), -1);
}

/* The report files are all or nothing: when one cannot be written (--json /dev/full, which
 * passes every check made before the run and fails on the write), check exits 2 and no other
 * report file is written or changed, although Markdown and HTML come before JSON in writing
 * order. */
static void test_check_reports_all_or_nothing(void)
{
    setup_dirs();
    if (access("/dev/full", W_OK) != 0) {
        printf("\n  SKIP: no writable /dev/full");
        return;
    }
    char text[1400], md[1100], html[1100], junit[1100];
    snprintf(text, sizeof text, "name = t-absent2\nmodel = %s/no-such-model.gguf\n"
             "tokens = 1,2,3\nsteps = 2,full\nbackends = naive\nattn = default\n", dir);
    char p[1100];
    snprintf(p, sizeof p, "%s", tu_write_file("check/absent2.case", text, strlen(text)));
    snprintf(md, sizeof md, "%s/aon.md", dir);
    snprintf(html, sizeof html, "%s/aon.html", dir);
    snprintf(junit, sizeof junit, "%s/aon.xml", dir);
    f_write(md, "old markdown\n");
    unlink(html);
    unlink(junit);
    CU_ASSERT_EQUAL(run(cmd_check, "check", p, "--golden-dir", gdir, "--cache", cdir, "--md", md,
                        "--html", html, "--junit", junit, "--json", "/dev/full", "--allow-skip",
                        "-q", (char *)NULL), 2);
    const char *err_text = read_text(err_path);
    CU_ASSERT_PTR_NOT_NULL(strstr(err_text, "/dev/full"));
    size_t lines = 0;
    for (const char *c = err_text; *c; ++c)
        lines += *c == '\n';
    CU_ASSERT_EQUAL(lines, 1); /* one line */
    CU_ASSERT_STRING_EQUAL(read_text(md), "old markdown\n");
    CU_ASSERT_EQUAL(access(html, F_OK), -1);
    CU_ASSERT_EQUAL(access(junit, F_OK), -1);
    /* -o into a folder that does not exist yet: the failure leaves no folder behind */
    char out[1100];
    snprintf(out, sizeof out, "%s/aon-out", dir);
    CU_ASSERT_EQUAL(run(cmd_check, "check", p, "--golden-dir", gdir, "--cache", cdir, "-o", out,
                        "--json", "/dev/full", "--allow-skip", "-q", (char *)NULL), 2);
    CU_ASSERT_EQUAL(access(out, F_OK), -1);
    /* the same outputs with a writable JSON path: all four written */
    char json[1100];
    snprintf(json, sizeof json, "%s/aon.json", dir);
    CU_ASSERT_EQUAL(run(cmd_check, "check", p, "--golden-dir", gdir, "--cache", cdir, "--md", md,
                        "--html", html, "--junit", junit, "--json", json, "--allow-skip", "-q",
                        (char *)NULL), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(read_text(md), "t-absent2"));
    CU_ASSERT_EQUAL(access(html, R_OK), 0);
    CU_ASSERT_EQUAL(access(junit, R_OK), 0);
    CU_ASSERT_EQUAL(access(json, R_OK), 0);
}

/* A configuration classified DRIFT fails check with the class and numbers in its JUnit
 * failure, and bless refuses it (a golden must never enshrine a defect) unless --force.
 * The DRIFT is made without an engine defect: the cached envelope of layer 0's K is set to 0
 * (a private cache), so any rounding error there exceeds "what rounding explains". */
static void test_check_drift_fails_and_bless_refuses(void)
{
    setup_dirs();
    char tcache[1100], tgold[1100], junit[1100], json[1100];
    snprintf(tcache, sizeof tcache, "%s/cache-tampered", dir);
    snprintf(tgold, sizeof tgold, "%s/golden-tampered", dir);
    snprintf(junit, sizeof junit, "%s/drift.xml", dir);
    snprintf(json, sizeof json, "%s/drift.json", dir);
    /* First run fills the private cache (reference and envelope). */
    CU_ASSERT_EQUAL_FATAL(run(cmd_check, "check", case_path, "--golden-dir", tgold, "--cache",
                              tcache, "-q", (char *)NULL), 0);
    DIR *d = opendir(tcache);
    CU_ASSERT_PTR_NOT_NULL_FATAL(d);
    int n_env = 0;
    lm_err err = {0};
    for (struct dirent *de; (de = readdir(d)) != NULL;) {
        size_t len = strlen(de->d_name);
        if (len < 7 || strcmp(de->d_name + len - 7, ".kvdenv") != 0)
            continue;
        char path[1400];
        snprintf(path, sizeof path, "%s/%s", tcache, de->d_name);
        /* The key sits after the 8-byte magic and the u32 version (envelope.h). */
        uint8_t key[16];
        FILE *f = fopen(path, "rb");
        CU_ASSERT_FATAL(f != NULL && fseek(f, 12, SEEK_SET) == 0 && fread(key, 1, 16, f) == 16);
        fclose(f);
        hx_envelope *e = NULL;
        CU_ASSERT_EQUAL_FATAL(hx_envelope_load(&e, path, key, &err), LM_OK);
        e->k[0].dev = 0.0;
        e->k[0].e = 0.0;
        CU_ASSERT_EQUAL(hx_envelope_save(e, path, &err), LM_OK);
        hx_envelope_free(e);
        n_env++;
    }
    closedir(d);
    CU_ASSERT_EQUAL_FATAL(n_env, 1);

    CU_ASSERT_EQUAL(run(cmd_check, "check", case_path, "--golden-dir", tgold, "--cache", tcache,
                        "--junit", junit, "--json", json, "-q", (char *)NULL), 1);
    cfg_result r[16];
    size_t n = json_results(r, 16, json);
    CU_ASSERT_EQUAL(n, N_CFG);
    for (size_t i = 0; i < n; ++i) {
        CU_ASSERT_STRING_EQUAL(r[i].cls, "DRIFT");
        CU_ASSERT_TRUE(r[i].fails);
    }
    junit_counts k = parse_junit(junit);
    CU_ASSERT_EQUAL(k.structure_errors, 0);
    CU_ASSERT_EQUAL(k.failures, N_CFG);
    CU_ASSERT_EQUAL(k.sum_failures_attr, N_CFG);
    CU_ASSERT_EQUAL(strncmp(k.first_failure, "DRIFT: DRIFT: max_abs ", 22), 0);
    if (strncmp(k.first_failure, "DRIFT: DRIFT: max_abs ", 22) != 0)
        fprintf(stderr, "\n  first failure: %s\n", k.first_failure);

    char gfile[1200];
    snprintf(gfile, sizeof gfile, "%s/t-tiny.json", tgold);
    CU_ASSERT_EQUAL(run(cmd_bless, "bless", case_path, "--golden-dir", tgold, "--cache", tcache,
                        "-q", (char *)NULL), 1);
    CU_ASSERT_EQUAL(access(gfile, F_OK), -1); /* every configuration refused: no file */
    const char *out = read_text(out_path);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "REFUSED"));
    CU_ASSERT_EQUAL(run(cmd_bless, "bless", case_path, "--golden-dir", tgold, "--cache", tcache,
                        "--force", "-q", (char *)NULL), 0);
    hx_golden *g = NULL;
    CU_ASSERT_EQUAL_FATAL(hx_golden_load(&g, gfile, false, &err), LM_OK);
    CU_ASSERT_EQUAL(hx_golden_count(g), N_CFG);
    hx_golden_free(g);
    /* A golden match never hides a failing class. */
    CU_ASSERT_EQUAL(run(cmd_check, "check", case_path, "--golden-dir", tgold, "--cache", tcache,
                        "-q", (char *)NULL), 1);
}

/* Writes a variant of the tiny case (same name, so the same golden file) and returns its path. */
static const char *variant_case(const char *file, const char *model, const char *tokens)
{
    char text[1024];
    snprintf(text, sizeof text, "name = t-tiny\nmodel = %s\n\ntokens = %s\nsteps = 1,3,full\n"
             "backends = naive,blas\nthreads = 1\nattn = default\nn_gen = 3\n", model, tokens);
    static char path[1100];
    snprintf(path, sizeof path, "%s", tu_write_file(file, text, strlen(text)));
    return path;
}

/* A golden is pinned to its input: the same case name with another prompt or another model
 * fails with "re-bless" (exit 1), never passes by falling back to the reference; --github
 * points at the changed line of the case file and appends the Markdown to the step summary. */
static void test_check_stale_golden_fails(void)
{
    setup_dirs();
    char json[1100], summary[1100];
    snprintf(json, sizeof json, "%s/stale.json", dir);
    snprintf(summary, sizeof summary, "%s/step-summary.md", dir);
    const char *p = variant_case("check/t-tiny-prompt.case", "synth:tiny:seed=7",
                                 "1,72,101,108,108,111,32,120"); /* last token changed */
    FILE *f = fopen(summary, "w");
    CU_ASSERT_FATAL(f != NULL);
    fputs("earlier step\n", f);
    fclose(f);
    setenv("GITHUB_STEP_SUMMARY", summary, 1);
    CU_ASSERT_EQUAL(run(cmd_check, "check", p, "--golden-dir", gdir, "--cache", cdir, "--json",
                        json, "--github", "-q", (char *)NULL), 1);
    unsetenv("GITHUB_STEP_SUMMARY");
    const char *out = read_text(out_path);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "re-bless"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "prompt token ids changed"));
    char want[1200];
    snprintf(want, sizeof want, "::error file=%s,line=4,title=kvdrift t-tiny ", p);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want)); /* line 4: the tokens key */
    cfg_result r[16];
    size_t n = json_results(r, 16, json);
    CU_ASSERT_EQUAL(n, N_CFG);
    for (size_t i = 0; i < n; ++i) {
        CU_ASSERT_STRING_EQUAL(r[i].golden, "stale");
        CU_ASSERT(r[i].fails);
    }
    const char *sum = read_text(summary);
    CU_ASSERT_EQUAL(strncmp(sum, "earlier step\n# kvdrift report: t-tiny", 37), 0);
    CU_ASSERT_PTR_NOT_NULL(strstr(sum, "| stale | **FAIL** |"));

    /* Another model (seed) under the same case name: stale too, pointing at the model line. */
    p = variant_case("check/t-tiny-model.case", "synth:tiny:seed=8", "1,72,101,108,108,111,32,119");
    CU_ASSERT_EQUAL(run(cmd_check, "check", p, "--golden-dir", gdir, "--cache", cdir, "--github",
                        "-q", (char *)NULL), 1);
    out = read_text(out_path);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "model changed"));
    snprintf(want, sizeof want, "::error file=%s,line=2,", p);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, want));
    /* The original input still matches: the golden file was not touched by check. */
    CU_ASSERT_EQUAL(run(cmd_check, "check", case_path, "--golden-dir", gdir, "--cache", cdir,
                        "--strict", "-q", (char *)NULL), 0);
}

/* A prompt of another length reads other RoPE positions, so every configuration's golden key
 * (golden_key.h: its rope probe) differs from the blessed one: the entries under the old keys,
 * blessed for other token ids, make each configuration stale (exit 1, "re-bless"), never
 * absent (which passes without --strict). */
static void test_check_stale_golden_other_key(void)
{
    setup_dirs();
    char json[1100];
    snprintf(json, sizeof json, "%s/stale-len.json", dir);
    const char *p = variant_case("check/t-tiny-longer.case", "synth:tiny:seed=7",
                                 "1,72,101,108,108,111,32,119,33"); /* one token more */
    CU_ASSERT_EQUAL(run(cmd_check, "check", p, "--golden-dir", gdir, "--cache", cdir, "--json",
                        json, "-q", (char *)NULL), 1);
    const char *out = read_text(out_path);
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "re-bless"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "prompt token ids changed"));
    CU_ASSERT_PTR_NOT_NULL(strstr(out, "0 absent, 10 stale"));
    cfg_result r[16];
    size_t n = json_results(r, 16, json);
    CU_ASSERT_EQUAL(n, N_CFG);
    for (size_t i = 0; i < n; ++i) {
        CU_ASSERT_STRING_EQUAL(r[i].golden, "stale");
        CU_ASSERT(r[i].fails);
    }
}

/* An installed kvdrift run from another folder: the golden folder and a relative model path
 * are found beside the case file, not in the working directory; report files go into folders
 * that do not exist yet (made, as pytest's --junitxml does), with report.md among them. */
static void test_check_paths_relative_to_case(void)
{
    setup_dirs();
    char sub[1100], model[1200], cpath[1200], elsewhere[1100], cwd[4096];
    snprintf(sub, sizeof sub, "%s/proj", dir);
    snprintf(elsewhere, sizeof elsewhere, "%s/elsewhere", dir);
    CU_ASSERT_FATAL(mkdir(sub, 0755) == 0 && mkdir(elsewhere, 0755) == 0);
    snprintf(model, sizeof model, "%s/tiny7.gguf", sub);
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_synth_write(model, "tiny", 7, LM_TYPE_F32, &err), LM_OK);
    static const char text[] = "name = t-rel\nmodel = tiny7.gguf\ntokens = 1,72,101,108\n"
                               "steps = 2,full\nbackends = naive\nn_gen = 2\n";
    snprintf(cpath, sizeof cpath, "%s/rel.case", sub);
    f_write(cpath, text);
    CU_ASSERT_FATAL(getcwd(cwd, sizeof cwd) != NULL);
    CU_ASSERT_FATAL(chdir(elsewhere) == 0);
    int rb = run(cmd_bless, "bless", cpath, "--cache", cdir, "-q", (char *)NULL);
    char outdir[1200], junit[1200], golden[1300];
    snprintf(outdir, sizeof outdir, "%s/reports", dir); /* made: its parent exists */
    snprintf(junit, sizeof junit, "%s/junit.xml", dir);
    int rc = run(cmd_check, "check", cpath, "--cache", cdir, "-o", outdir, "--junit", junit,
                 "--strict", "-q", (char *)NULL);
    CU_ASSERT_FATAL(chdir(cwd) == 0);
    CU_ASSERT_EQUAL(rb, 0);
    CU_ASSERT_EQUAL(rc, 0); /* strict: every golden found and matching */
    snprintf(golden, sizeof golden, "%s/golden/t-rel.json", sub);
    CU_ASSERT_EQUAL(access(golden, R_OK), 0);
    snprintf(golden, sizeof golden, "%s/golden", elsewhere);
    CU_ASSERT_EQUAL(access(golden, F_OK), -1); /* nothing in the working directory */
    CU_ASSERT_EQUAL(access(junit, R_OK), 0);
    /* -o DIR writes every report; an explicit --junit goes where it says instead. */
    const char *files[] = {"report.json", "report.md"};
    char path[1400];
    snprintf(path, sizeof path, "%s/junit.xml", outdir);
    CU_ASSERT_EQUAL(access(path, F_OK), -1);
    for (int i = 0; i < 2; ++i) {
        snprintf(path, sizeof path, "%s/%s", outdir, files[i]);
        CU_ASSERT_EQUAL(access(path, R_OK), 0);
    }
    snprintf(path, sizeof path, "%s/report.md", outdir);
    const char *md = read_text(path);
    CU_ASSERT_PTR_NOT_NULL(strstr(md, "# kvdrift report: t-rel"));
    CU_ASSERT_PTR_NOT_NULL(strstr(md, "| `naive:step=2:threads=1` | match | pass |"));
}

void test_check_register(void)
{
    CU_pSuite s = CU_add_suite("check", NULL, NULL);
    /* Order matters: the later tests use the goldens the first one blesses. */
    CU_add_test(s, "test_check_bless_then_match", test_check_bless_then_match);
    CU_add_test(s, "test_check_golden_metadata_ignored", test_check_golden_metadata_ignored);
    CU_add_test(s, "test_check_mismatch_strict", test_check_mismatch_strict);
    CU_add_test(s, "test_check_keys_per_configuration", test_check_keys_per_configuration);
    CU_add_test(s, "test_check_bad_case_file", test_check_bad_case_file);
    CU_add_test(s, "test_check_missing_model_skips", test_check_missing_model_skips);
    CU_add_test(s, "test_check_reports_all_or_nothing", test_check_reports_all_or_nothing);
    CU_add_test(s, "test_check_drift_fails_and_bless_refuses",
                test_check_drift_fails_and_bless_refuses);
    CU_add_test(s, "test_check_stale_golden_fails", test_check_stale_golden_fails);
    CU_add_test(s, "test_check_stale_golden_other_key", test_check_stale_golden_other_key);
    CU_add_test(s, "test_check_paths_relative_to_case", test_check_paths_relative_to_case);
}
