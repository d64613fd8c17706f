/* test_report.c — the in-memory report and its writers: JSON read back with jansson, JUnit XML
 * parsed back with libxml2 (special characters escaped), Markdown and the terminal table. */
#include "fs.h"
#include "kvd_util.h"
#include "model/report.h"
#include "report/calibrate_html.h"
#include "run/block_sweep.h"
#include "test_util.h"

#include <jansson.h>
#include <libxml/parser.h>
#include <libxml/tree.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <poll.h>
#include <pty.h>
#include <unistd.h>

static hx_tensor_row row(const char *name, bool logits, hx_class cls, double err_abs, double e)
{
    hx_tensor_row r = {0};
    snprintf(r.name, sizeof r.name, "%s", name);
    r.is_logits = logits;
    r.cls = cls;
    snprintf(r.reason, sizeof r.reason, "err %g vs E %g <&> \"q\" 'a'", err_abs, e);
    r.vs_ref.n = 10;
    r.vs_ref.max_abs = err_abs;
    r.vs_ref.max_ulp = 3;
    r.vs_ref.sig_digits = 6.0;
    r.e = e;
    r.e_gap = logits ? 0.5 : (double)NAN;
    if (logits) {
        r.lg.top1_agree = cls != HX_FLIP && cls != HX_TIE_FLIP;
        r.lg.kl = 1e-9;
        r.lg.r_margin = 0.25;
        r.lg.top5_overlap = 5;
    }
    return r;
}

static hx_report *make(void)
{
    hx_report *r;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_report_create(&r, "stories <&> \"case\"", &err) == LM_OK);
    snprintf(r->model, sizeof r->model, "models/a&b<c>.gguf\x01");
    snprintf(r->model_hash, sizeof r->model_hash, "00112233445566778899aabbccddeeff");
    snprintf(r->fingerprint, sizeof r->fingerprint, "x86_64 SkylakeX [0123456789abcdef]");
    snprintf(r->fingerprint_id, sizeof r->fingerprint_id, "0123456789abcdef");
    r->n_prompt = 14;
    r->n_gen = 32;
    r->precision = 127;
    r->envelope_safety = 2.0;
    r->envelope_members = 8;
    hx_config_report *c;
    /* 1: EXACT */
    CU_ASSERT_FATAL(hx_report_add_config(r, &c, "naive:step=full", &err) == LM_OK);
    hx_tensor_row t = row("L0.K", false, HX_EXACT, 1e-7, 2e-7);
    hx_config_report_add_row(c, &t, &err);
    t = row("logits@13", true, HX_EXACT, 1e-6, 4e-6);
    hx_config_report_add_row(c, &t, &err);
    c->golden = HX_GOLDEN_MATCH;
    c->prefill_tps = 1234.5;
    c->decode_tps = 456.0;
    c->peak_mem_bytes = 3u << 20;
    /* 2: TIE_FLIP (passes) */
    CU_ASSERT_FATAL(hx_report_add_config(r, &c, "naive:step=1", &err) == LM_OK);
    t = row("L0.K", false, HX_NOISE, 1e-7, 2e-7);
    hx_config_report_add_row(c, &t, &err);
    t = row("logits@20", true, HX_TIE_FLIP, 1e-6, 4e-6);
    hx_config_report_add_row(c, &t, &err);
    hx_config_report_set_divergence(c, 7, HX_TIE_FLIP);
    c->golden = HX_GOLDEN_MISMATCH;
    /* 3: DRIFT (fails) with a NaN metric somewhere */
    CU_ASSERT_FATAL(hx_report_add_config(r, &c, "blas:step=2", &err) == LM_OK);
    t = row("L1.V", false, HX_DRIFT, 1e-3, 2e-7);
    hx_config_report_add_row(c, &t, &err);
    t = row("logits@13", true, HX_NOISE, 1e-6, 0.0);
    t.vs_ref.nmse = (double)INFINITY;
    hx_config_report_add_row(c, &t, &err);
    c->golden = HX_GOLDEN_ABSENT;
    return r;
}

static void test_report_fold_and_verdicts(void)
{
    hx_report *r = make();
    CU_ASSERT_EQUAL(r->n_configs, 3);
    hx_config_report *c0 = &r->configs[0], *c1 = &r->configs[1], *c2 = &r->configs[2];
    CU_ASSERT_EQUAL(c0->cls, HX_EXACT);
    /* Exact comparisons (no tolerance): folding takes maxima of the stored doubles, and the
     * ratios are exact (2e-7 and 4e-6 are the doubles of 1e-7 and 1e-6 times a power of two). */
    CU_ASSERT_EQUAL(c0->vs_ref.max_abs, 1e-6);
    CU_ASSERT_EQUAL(c0->worst_ratio, 0.5);   /* max(1e-7/2e-7, 1e-6/4e-6) */
    CU_ASSERT_EQUAL(c0->e_logits_max, 4e-6);
    CU_ASSERT_EQUAL(c0->logits.n_pos, 1);
    CU_ASSERT_EQUAL(c1->cls, HX_TIE_FLIP);
    CU_ASSERT_EQUAL(c1->first_divergent, 7);
    CU_ASSERT_PTR_NOT_NULL(strstr(c1->reason, "logits@20"));
    CU_ASSERT_EQUAL(c2->cls, HX_DRIFT);
    CU_ASSERT_PTR_NOT_NULL(strstr(c2->reason, "L1.V"));
    CU_ASSERT(isinf(c2->worst_ratio));       /* err 1e-6 over E = 0 */
    CU_ASSERT_EQUAL(hx_report_worst(r), HX_DRIFT);
    CU_ASSERT_FALSE(hx_config_report_fails(c1, false));
    CU_ASSERT(hx_config_report_fails(c1, true)); /* strict: golden mismatch */
    CU_ASSERT_FALSE(hx_config_report_fails(c0, true));
    CU_ASSERT(hx_config_report_fails(c2, false));
    CU_ASSERT_EQUAL(hx_report_exit_code(r, false), 1);
    r->configs[2].cls = HX_NOISE;
    CU_ASSERT_EQUAL(hx_report_exit_code(r, false), 0);
    CU_ASSERT_EQUAL(hx_report_exit_code(r, true), 1);
    /* invariant_bits: a configuration that must be EXACT fails as NOISE or TIE_FLIP, whatever
     * its golden, and passes as EXACT */
    char why[600];
    const char *type;
    c1->golden = c2->golden = c0->golden = HX_GOLDEN_MATCH;
    c0->must_be_exact = c1->must_be_exact = c2->must_be_exact = true;
    CU_ASSERT_FALSE(hx_config_report_fails(c0, true));
    CU_ASSERT(hx_config_report_fails(c1, false)); /* TIE_FLIP */
    CU_ASSERT(hx_config_report_fails(c2, false)); /* NOISE */
    hx_config_report_failure(why, sizeof why, &type, c2, false);
    CU_ASSERT_STRING_EQUAL(type, "NOT_INVARIANT");
    CU_ASSERT_PTR_NOT_NULL(strstr(why, "NOISE, not bitwise equal to its one-chunk baseline"));
    CU_ASSERT_EQUAL(hx_report_exit_code(r, false), 1);
    hx_report_free(r);
    hx_report_free(NULL);
}

static void test_report_json_schema(void)
{
    hx_report *r = make();
    lm_err err = {0};
    char path[1024];
    snprintf(path, sizeof path, "%s/report.json", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_report_write_json(r, path, &err), LM_OK);
    json_error_t je;
    json_t *j = json_load_file(path, 0, &je);
    CU_ASSERT_PTR_NOT_NULL_FATAL(j);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "schema")), "kvdrift-report");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "schema_version")),
                    HX_REPORT_SCHEMA_VERSION);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "case")), "stories <&> \"case\"");
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(j, "worst_class")), "DRIFT");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(j, "exit_code")), 1);
    json_t *cs = json_object_get(j, "configs");
    CU_ASSERT_EQUAL_FATAL(json_array_size(cs), 3);
    json_t *c1 = json_array_get(cs, 1), *c2 = json_array_get(cs, 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c1, "class")), "TIE_FLIP");
    CU_ASSERT_EQUAL(json_integer_value(json_object_get(c1, "first_divergent")), 7);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c1, "divergent_class")), "TIE_FLIP");
    CU_ASSERT(json_is_false(json_object_get(c1, "fails")));
    CU_ASSERT(json_is_true(json_object_get(c2, "fails")));
    CU_ASSERT(json_is_null(json_object_get(json_array_get(cs, 0), "divergent_class")));
    /* Non-finite numbers as strings. */
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(c2, "worst_err_over_envelope")),
                           "Infinity");
    CU_ASSERT_STRING_EQUAL(
        json_string_value(json_object_get(json_object_get(c2, "vs_ref"), "nmse")), "Infinity");
    json_t *rows = json_object_get(c2, "tensors");
    CU_ASSERT_EQUAL(json_array_size(rows), 2);
    CU_ASSERT_STRING_EQUAL(json_string_value(json_object_get(json_array_get(rows, 0), "kind")), "kv");
    CU_ASSERT_PTR_NULL(json_object_get(json_array_get(rows, 0), "envelope_gap"));
    CU_ASSERT_EQUAL(json_real_value(json_object_get(json_array_get(rows, 1), "envelope_gap")), 0.5);
    json_decref(j);
    /* Several reports. */
    const hx_report *rs[2] = {r, r};
    CU_ASSERT_EQUAL(hx_report_write_json_many(rs, 2, path, &err), LM_OK);
    j = json_load_file(path, 0, &je);
    CU_ASSERT_EQUAL(json_array_size(json_object_get(j, "reports")), 2);
    json_decref(j);
    hx_report_free(r);
}

static int count_elems(xmlNode *n, const char *name)
{
    int k = 0;
    for (; n; n = n->next)
        if (n->type == XML_ELEMENT_NODE) {
            k += strcmp((const char *)n->name, name) == 0;
            k += count_elems(n->children, name);
        }
    return k;
}

static xmlNode *find_elem(xmlNode *n, const char *name)
{
    for (; n; n = n->next)
        if (n->type == XML_ELEMENT_NODE) {
            if (strcmp((const char *)n->name, name) == 0)
                return n;
            xmlNode *c = find_elem(n->children, name);
            if (c)
                return c;
        }
    return NULL;
}

static void test_report_junit_wellformed_and_escaped(void)
{
    hx_report *r = make();
    lm_err err = {0};
    char path[1024];
    snprintf(path, sizeof path, "%s/junit.xml", tu_tmpdir());
    const hx_report *rs[1] = {r};
    CU_ASSERT_EQUAL_FATAL(hx_report_write_junit(rs, 1, false, path, &err), LM_OK);
    xmlDoc *doc = xmlReadFile(path, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    xmlNode *root = xmlDocGetRootElement(doc);
    CU_ASSERT_STRING_EQUAL((const char *)root->name, "testsuites");
    CU_ASSERT_EQUAL(count_elems(root, "testsuite"), 1);
    CU_ASSERT_EQUAL(count_elems(root, "testcase"), 3);
    CU_ASSERT_EQUAL(count_elems(root, "failure"), 1);      /* only DRIFT fails by default */
    CU_ASSERT_EQUAL(count_elems(root, "system-out"), 3);   /* class, err/E, golden: each */
    xmlNode *suite = find_elem(root, "testsuite");
    xmlChar *name = xmlGetProp(suite, (const xmlChar *)"name");
    CU_ASSERT_STRING_EQUAL((const char *)name, "stories <&> \"case\""); /* escaped, read back */
    xmlFree(name);
    xmlChar *fails = xmlGetProp(suite, (const xmlChar *)"failures");
    CU_ASSERT_STRING_EQUAL((const char *)fails, "1");
    xmlFree(fails);
    xmlNode *f = find_elem(root, "failure");
    xmlChar *type = xmlGetProp(f, (const xmlChar *)"type");
    xmlChar *msg = xmlGetProp(f, (const xmlChar *)"message");
    CU_ASSERT_STRING_EQUAL((const char *)type, "DRIFT");
    CU_ASSERT_PTR_NOT_NULL(strstr((const char *)msg, "DRIFT: max_abs 0.001"));
    CU_ASSERT_PTR_NOT_NULL(strstr((const char *)msg, "<&> \"q\" 'a'"));
    xmlFree(type);
    xmlFree(msg);
    xmlFreeDoc(doc);
    /* Strict: the golden mismatch and the absent golden fail too, named as such. */
    CU_ASSERT_EQUAL_FATAL(hx_report_write_junit(rs, 1, true, path, &err), LM_OK);
    doc = xmlReadFile(path, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    CU_ASSERT_EQUAL(count_elems(xmlDocGetRootElement(doc), "failure"), 2);
    xmlFreeDoc(doc);
    /* A case that did not run: its suite counts it skipped, its testcase holds <skipped> with
     * the reason and no <system-out>; each suite has its 10 properties (prompt_ids last). */
    hx_report *sk;
    hx_config_report *c;
    CU_ASSERT_FATAL(hx_report_create(&sk, "absent", &err) == LM_OK);
    CU_ASSERT_FATAL(hx_report_add_config(sk, &c, "naive:step=full", &err) == LM_OK);
    c->skipped = true;
    snprintf(sk->skipped, sizeof sk->skipped, "model file absent");
    const hx_report *two[2] = {r, sk};
    CU_ASSERT_EQUAL_FATAL(hx_report_write_junit(two, 2, false, path, &err), LM_OK);
    doc = xmlReadFile(path, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    root = xmlDocGetRootElement(doc);
    CU_ASSERT_EQUAL(count_elems(root, "testsuite"), 2);
    CU_ASSERT_EQUAL(count_elems(root, "testcase"), 4);
    CU_ASSERT_EQUAL(count_elems(root, "skipped"), 1);
    CU_ASSERT_EQUAL(count_elems(root, "system-out"), 3);
    CU_ASSERT_EQUAL(count_elems(root, "property"), 20);
    xmlNode *sk_el = find_elem(root, "skipped");
    xmlChar *why = xmlGetProp(sk_el, (const xmlChar *)"message");
    CU_ASSERT_STRING_EQUAL((const char *)why, "model file absent");
    CU_ASSERT_STRING_EQUAL((const char *)sk_el->parent->name, "testcase");
    xmlChar *n_sk = xmlGetProp(sk_el->parent->parent, (const xmlChar *)"skipped");
    CU_ASSERT_STRING_EQUAL((const char *)n_sk, "1");
    xmlFree(why);
    xmlFree(n_sk);
    xmlFreeDoc(doc);
    hx_report_free(sk);
    /* Invalid UTF-8 in a string still yields a well-formed file. */
    snprintf(r->model, sizeof r->model, "bad\xff\xfe utf8 \xc3");
    CU_ASSERT_EQUAL(hx_report_write_junit(rs, 1, false, path, &err), LM_OK);
    doc = xmlReadFile(path, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR);
    CU_ASSERT_PTR_NOT_NULL(doc);
    xmlFreeDoc(doc);
    hx_report_free(r);
}

static void test_report_md_and_table(void)
{
    hx_report *r = make();
    lm_err err = {0};
    char path[1024];
    snprintf(path, sizeof path, "%s/report.md", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_report_write_md(r, path, &err), LM_OK);
    char *text;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&text, &n, path, SIZE_MAX, &err), LM_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "| config | class | div@ |"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "| naive:step=1 | TIE_FLIP | 7 |"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "`blas:step=2` **DRIFT**"));
    CU_ASSERT_PTR_NULL(strstr(text, "`naive:step=full` **")); /* EXACT rows need no note */
    free(text);

    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CU_ASSERT_FATAL(f != NULL);
    hx_report_print_table_fmt(f, r, HX_FMT_TABLE, true); /* -v: every column */
    fclose(f);
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "config"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "naive:step=full"));
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "1234"));   /* prefill tok/s */
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "3.0"));    /* peak MiB */
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, "3 configurations, worst DRIFT, 1 failing"));
    fprintf(stderr, "\n%s", buf);
    free(buf);
    hx_report_free(r);
}

/* The writers table: unique names and file names, a writer for several reports in every row,
 * report.json last (a folder holding it is complete), lookups by name. */
static void test_report_writers_table(void)
{
    const size_t n = hx_report_writer_count();
    CU_ASSERT_FATAL(n >= 1 && n <= HX_REPORT_MAX_WRITERS);
    CU_ASSERT_PTR_NULL(hx_report_writer_at(n));
    CU_ASSERT_PTR_NULL(hx_report_writer_find("no-such-format"));
    for (size_t i = 0; i < n; ++i) {
        const hx_report_writer *w = hx_report_writer_at(i);
        CU_ASSERT(w->name && w->title && w->file && w->text_many);
        CU_ASSERT_PTR_EQUAL(hx_report_writer_find(w->name), w);
        for (size_t j = 0; j < i; ++j) {
            CU_ASSERT_STRING_NOT_EQUAL(hx_report_writer_at(j)->name, w->name);
            CU_ASSERT_STRING_NOT_EQUAL(hx_report_writer_at(j)->file, w->file);
        }
    }
    CU_ASSERT_STRING_EQUAL(hx_report_writer_at(n - 1)->file, "report.json");
    char cmd[64];
    char *argv[] = {"sweep", "m.gguf", "-p", "two words", NULL};
    hx_command_line(cmd, sizeof cmd, 4, argv);
    CU_ASSERT_STRING_EQUAL(cmd, "kvdrift sweep m.gguf -p 'two words'");
    hx_command_line(cmd, 12, 4, argv); /* cut at the buffer, NUL-terminated */
    CU_ASSERT_STRING_EQUAL(cmd, "kvdrift swe");
}

/* A block-sampler section of four rows: skipped, its own baseline, other tokens (first
 * differing commit and greedy index set), same tokens in another order. */
static void block_rows(hx_block_report *b, hx_block_report_row rows[4])
{
    memset(rows, 0, 4 * sizeof rows[0]);
    *b = (hx_block_report){.run = true, .block = 4, .n_blocks = 2, .max_iters = 8,
                           .mask_id = 300, .n_rows = 4, .rows = rows};
    snprintf(b->rule, sizeof b->rule, "confidence >= 0.9");
    snprintf(b->verdict, sizeof b->verdict, "the engine is fine");
    static const char *const names[4] = {"cuda:step=full", "naive:step=full", "blas:step=2",
                                         "naive:step=1:threads=2"};
    for (int i = 0; i < 4; ++i) {
        hx_block_report_row *w = &rows[i];
        snprintf(w->config, sizeof w->config, "%s", names[i]);
        w->prefill_cls = i == 2 ? HX_DRIFT : HX_NOISE;
        w->prefill_ratio = 0.25 * (i + 1);
        w->first_block = w->first_iter = w->first_pos = w->greedy_first = -1;
        w->n_iters = 3u + (uint32_t)i;
        w->blk_gap = 1.5;
        w->commit_gap = 0.125;
        w->greedy_gap = 2.5;
        snprintf(w->completion, sizeof w->completion, "once upon %d", i);
    }
    snprintf(rows[0].skipped, sizeof rows[0].skipped, "no GPU");
    rows[1].is_baseline = true;
    rows[2].tokens_differ = true;
    rows[2].first_block = 1;
    rows[2].first_iter = 2;
    rows[2].first_pos = 7;
    rows[2].greedy_first = 5;
    rows[3].order_differs = true;
}

/* The block-sampler table, in report.md and on the terminal (hx_block_print): every kind of
 * row, byte for byte. */
static void test_report_block_tables(void)
{
    hx_block_report_row rows[4];
    hx_report *r = make();
    block_rows(&r->block, rows);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    CU_ASSERT_FATAL(f != NULL);
    hx_report_sections_md(f, r);
    fclose(f);
    static const char md[] =
        "| config | prefill | err/E | iterations | block | first diff (block, iteration, "
        "position) | block gap | commit gap | greedy | greedy gap |\n"
        "|---|---|---:|---:|---|---|---:|---:|---|---:|\n"
        "| `cuda:step=full` | NOISE | 0.25 | skipped: no GPU | | | | | | |\n"
        "| `naive:step=full` | NOISE | 0.5 | 4 | (itself) | - | 1.5 | 0.125 | (itself) | 2.5 |\n"
        "| `blas:step=2` | DRIFT | 0.75 | 5 | **DIFFERS** | 1, 2, 7 | 1.5 | 0.125 | differs at 5 "
        "| 2.5 |\n"
        "| `naive:step=1:threads=2` | NOISE | 1 | 6 | order | - | 1.5 | 0.125 | same | 2.5 |\n";
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, md));
    free(buf);
    f = open_memstream(&buf, &len);
    CU_ASSERT_FATAL(f != NULL);
    hx_block_print(f, &r->block);
    fclose(f);
    static const char text[] =
        "config                           prefill      err/E iters   blk gap    commit block     "
        "first diff       grd gap greedy   block completion\n"
        "cuda:step=full                   NOISE         0.25     -         -         - -         "
        "-                      - -        skipped: no GPU\n"
        "naive:step=full                  NOISE          0.5     4       1.5     0.125 (itself)  "
        "-                    2.5 -        once upon 1\n"
        "blas:step=2                      DRIFT         0.75     5       1.5     0.125 DIFFERS   "
        "b1 it2 pos7          2.5 at 5     once upon 2\n"
        "naive:step=1:threads=2           NOISE            1     6       1.5     0.125 order     "
        "-                    2.5 same     once upon 3\n";
    CU_ASSERT_PTR_NOT_NULL(strstr(buf, text));
    free(buf);
    r->block.rows = NULL;
    r->block.n_rows = 0;
    hx_report_free(r);
}

/* Whether file a holds the same bytes as file b. */
static bool same_bytes(const char *a, const char *b)
{
    char *x = NULL, *y = NULL;
    size_t nx = 0, ny = 0;
    lm_err err = {0};
    bool same = lm_read_file(&x, &nx, a, 1u << 24, &err) == LM_OK &&
                lm_read_file(&y, &ny, b, 1u << 24, &err) == LM_OK && nx == ny &&
                memcmp(x, y, nx) == 0;
    free(x);
    free(y);
    return same;
}

/* hx_report_write_dir: the chosen writers' files (the others absent), each byte for byte what
 * the writer itself writes, an older report.json replaced, the "wrote" list last file first;
 * only = NULL writes every writer that takes one report. */
static void test_report_write_dir(void)
{
    hx_report *r = make();
    lm_err err = {0};
    char dir[512], p[600], q[600], wrote[4096], want[2048];
    snprintf(dir, sizeof dir, "%s/write-dir", tu_tmpdir());
    CU_ASSERT_FATAL(lm_mkdir_p(dir, &err) == LM_OK);
    snprintf(p, sizeof p, "%s/report.json", dir);
    CU_ASSERT_FATAL(lm_write_file(p, "stale", 5, &err) == LM_OK);
    static const char *const md_json[] = {"md", "json", NULL};
    CU_ASSERT_FATAL(hx_report_write_dir(wrote, sizeof wrote, dir, r, md_json, &err) == LM_OK);
    snprintf(want, sizeof want, "%s/report.json and %s/report.md", dir, dir);
    CU_ASSERT_STRING_EQUAL(wrote, want);
    snprintf(p, sizeof p, "%s/report.html", dir);
    CU_ASSERT_NOT_EQUAL(access(p, F_OK), 0);
    static const char *const fmt[] = {"md", "json"};
    for (size_t i = 0; i < 2; ++i) {
        const hx_report_writer *w = hx_report_writer_find(fmt[i]);
        snprintf(p, sizeof p, "%s/%s", dir, w->file);
        snprintf(q, sizeof q, "%s/direct-%s", tu_tmpdir(), w->file);
        CU_ASSERT_FATAL(w->write_one(r, q, &err) == LM_OK);
        CU_ASSERT(same_bytes(p, q));
    }
    CU_ASSERT_FATAL(hx_report_write_dir(wrote, sizeof wrote, dir, r, NULL, &err) == LM_OK);
    want[0] = '\0';
    size_t n = 0, k = 0;
    for (size_t i = 0; i < hx_report_writer_count(); ++i)
        n += hx_report_writer_at(i)->write_one != NULL;
    for (size_t i = hx_report_writer_count(); i-- > 0;) {
        const hx_report_writer *w = hx_report_writer_at(i);
        if (w->write_one == NULL)
            continue;
        snprintf(p, sizeof p, "%s/%s", dir, w->file);
        CU_ASSERT_EQUAL(access(p, F_OK), 0);
        lm_words_append(want, sizeof want, k++, n, p, " and ");
    }
    CU_ASSERT_STRING_EQUAL(wrote, want);
    hx_report_free(r);
}

/* The default table is narrow (every line fits 100 columns with a 28-character config) and
 * holds the headline columns; ULP@max is the error in ULPs of the tensor's largest magnitude. */
static void test_report_narrow_table_and_formats(void)
{
    hx_report *r = make();
    lm_err err = {0};
    hx_config_report *c;
    CU_ASSERT_FATAL(hx_report_add_config(r, &c, "blas:step=2048:threads=16:attn=x", &err) == LM_OK);
    /* ULP@max: an error of 3 ULPs at the scale of the tensor's largest value (8.0: spacing
     * 2^-20), whatever sign changes happen inside the tensor (exact: powers of two). */
    hx_tensor_row t = row("L0.K", false, HX_NOISE, 3.0 * ldexp(1.0, -20), 1.0);
    t.vs_ref.r_absmax = 8.0;
    hx_config_report_add_row(c, &t, &err);
    CU_ASSERT_EQUAL(c->ulp_rel, 3.0);
    CU_ASSERT(isnan(hx_ulp_rel((double)NAN, 1.0)));
    CU_ASSERT_EQUAL(hx_ulp_rel(0.0, 1.0), 0.0);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    hx_report_print_table(f, r);
    fclose(f);
    size_t longest = 0;
    for (char *p = buf; *p;) {
        char *nl = strchr(p, '\n');
        size_t l = nl ? (size_t)(nl - p) : strlen(p);
        if (strncmp(p, "case ", 5) != 0) /* the title line carries the model path */
            longest = l > longest ? l : longest;
        p += l + (nl != NULL);
    }
    CU_ASSERT(longest <= 100);
    const char *want[] = {"config", "class", "err/E", "ULP@max", "top1", "div@", "decode t/s"};
    for (size_t i = 0; i < sizeof want / sizeof want[0]; ++i)
        CU_ASSERT_PTR_NOT_NULL(strstr(buf, want[i]));
    CU_ASSERT_PTR_NULL(strstr(buf, "KL mean")); /* -v only */
    CU_ASSERT_PTR_NULL(strstr(buf, "\033["));   /* not a terminal: no colour */
    free(buf);

    /* Data formats: the table alone, quoted where needed. */
    static const struct { hx_table_fmt fmt; const char *first, *row; } forms[] = {
        {HX_FMT_CSV, "config,class,err/E,", "naive:step=1,TIE_FLIP,"},
        {HX_FMT_TSV, "config\tclass\terr/E\t", "naive:step=1\tTIE_FLIP\t"},
        {HX_FMT_JSONL, "{\"config\": \"naive:step=full\", \"class\": \"EXACT\"", NULL},
        {HX_FMT_MD, "| config | class | err/E |", "|---|---|---:|"},
    };
    for (size_t i = 0; i < sizeof forms / sizeof forms[0]; ++i) {
        f = open_memstream(&buf, &len);
        hx_report_print_table_fmt(f, r, forms[i].fmt, false);
        fclose(f);
        CU_ASSERT_EQUAL(strncmp(buf, forms[i].first, strlen(forms[i].first)), 0);
        if (forms[i].row)
            CU_ASSERT_PTR_NOT_NULL(strstr(buf, forms[i].row));
        CU_ASSERT_PTR_NULL(strstr(buf, "configurations, worst")); /* no summary line */
        free(buf);
    }
    hx_table_fmt fm;
    CU_ASSERT(hx_table_fmt_parse(&fm, "jsonl") && fm == HX_FMT_JSONL);
    CU_ASSERT_FALSE(hx_table_fmt_parse(&fm, "xml"));

    /* On a terminal the class is coloured, unless NO_COLOR is set. */
    int master, slave;
    if (openpty(&master, &slave, NULL, NULL, NULL) == 0) {
        char got[8192];
        for (int nc = 0; nc < 2; ++nc) {
            if (nc)
                setenv("NO_COLOR", "1", 1);
            FILE *tty = fdopen(dup(slave), "w");
            hx_report_print_table(tty, r);
            fclose(tty);
            /* Drain everything the terminal holds (a read may return a part). */
            size_t have = 0;
            struct pollfd pf = {.fd = master, .events = POLLIN};
            while (have + 1 < sizeof got && poll(&pf, 1, 200) > 0) {
                ssize_t k = read(master, got + have, sizeof got - 1 - have);
                if (k <= 0)
                    break;
                have += (size_t)k;
            }
            got[have] = '\0';
            CU_ASSERT_EQUAL(strstr(got, "\033[1;31mDRIFT") != NULL, nc == 0);
        }
        unsetenv("NO_COLOR");
        close(master);
        close(slave);
    }
    hx_report_free(r);
}

static int count_class(xmlNode *n, const char *name, const char *cls)
{
    int k = 0;
    for (; n; n = n->next)
        if (n->type == XML_ELEMENT_NODE) {
            xmlChar *c = xmlGetProp(n, (const xmlChar *)"class");
            k += strcmp((const char *)n->name, name) == 0 && c &&
                 strcmp((const char *)c, cls) == 0;
            xmlFree(c);
            k += count_class(n->children, name, cls);
        }
    return k;
}

/* A page kvdrift wrote that must stand alone: well-formed XML whose root is html, with no
 * script; the caller frees the document. */
static xmlDoc *read_standalone_page(const char *path, xmlNode **root)
{
    xmlDoc *doc = xmlReadFile(path, NULL, XML_PARSE_NONET | XML_PARSE_NOERROR);
    CU_ASSERT_PTR_NOT_NULL_FATAL(doc);
    *root = xmlDocGetRootElement(doc);
    CU_ASSERT_STRING_EQUAL((const char *)(*root)->name, "html");
    CU_ASSERT_EQUAL(count_elems(*root, "script"), 0);
    return doc;
}

/* The page's text, which names no resource to fetch (no src=, no href); the caller frees it. */
static char *read_page_text(const char *path)
{
    char *text = NULL;
    size_t n;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&text, &n, path, SIZE_MAX, &err), LM_OK);
    CU_ASSERT_PTR_NULL(strstr(text, "src="));
    CU_ASSERT_PTR_NULL(strstr(text, "href"));
    return text;
}

/* report.html is well-formed XML (an XML parser, stricter than any browser, reads it), holds
 * every plot, fetches nothing, and escapes text. */
static void test_report_html_wellformed(void)
{
    hx_report *r = make();
    lm_err err = {0};
    char path[1024];
    snprintf(path, sizeof path, "%s/report.html", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_report_write_html(r, path, &err), LM_OK);
    xmlNode *root;
    xmlDoc *doc = read_standalone_page(path, &root);
    CU_ASSERT_EQUAL(count_elems(root, "svg"), 6); /* 2 heatmaps, error, margins, speed, memory */
    CU_ASSERT_EQUAL(count_class(root, "svg", "heat-kv"), 1);
    CU_ASSERT_EQUAL(count_class(root, "circle", "flip"), 1); /* logits@20 of naive:step=1 */
    /* K/V cells: L0.K of two configurations and L1.V of the third. */
    xmlNode *heat = find_elem(root, "svg");
    CU_ASSERT_EQUAL(count_elems(heat->children, "rect"), 3);
    /* The table: one row per configuration plus the header. */
    CU_ASSERT_EQUAL(count_elems(root, "tr"), 4);
    xmlFreeDoc(doc);
    char *text = read_page_text(path);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "stories &lt;&amp;&gt; &quot;case&quot;"));
    /* Speed and memory plots mark the steps themselves (1, 2 and full), not log2 values. */
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "text-anchor=\"middle\">1</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "text-anchor=\"middle\">2</text>"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "text-anchor=\"middle\">full</text>"));
    CU_ASSERT_PTR_NULL(strstr(text, "log2"));
    CU_ASSERT_PTR_NULL(strstr(text, "first leaves the envelope")); /* no dump held K/V rows */
    free(text);
    /* A dump's first K/V row outside the envelope is listed under its configuration. */
    r->configs[1].kv_first = (hx_kv_first){.checked = true, .layer = 1, .pos = 3, .tensor = 'V',
                                           .err = 0.5, .e = 0.01, .n_outside = 2, .n_rows = 10};
    CU_ASSERT_EQUAL_FATAL(hx_report_write_html(r, path, &err), LM_OK);
    text = read_page_text(path);
    const char *li = strstr(text, "<li><code>");
    CU_ASSERT_PTR_NOT_NULL(li);
    CU_ASSERT_PTR_NOT_NULL(li ? strstr(li, "first outside the envelope at layer 1, position 3 "
                                       "(its V row") : NULL);
    free(text);
    hx_report_free(r);
}

/* calibrate.html from a hand-made bins table: well-formed, nothing fetched, one point per
 * non-empty bin and one diagram per table, a point on the diagonal where prediction and
 * observation agree, the per-profile totals; a malformed table is one line naming the file and
 * line, and no page is written. */
static void test_report_calibrate_html(void)
{
    static const char bins[] =
        HX_CALIB_BINS_HEADER "\n"
        "sequences (split within 16 tokens)\t0\t0.0001\t400\t1e-06\t0\t0\t0.0067\n"
        "sequences (split within 16 tokens)\t0.0001\t0.001\t0\t0\t0\t0\t0\n"
        "sequences (split within 16 tokens)\t0.001\t0.01\t100\t0.003\t0.01\t0.0018\t0.047\n"
        "sequences (split within 16 tokens)\t0.01\t0.05\t200\t0.01\t0.01\t0.0035\t0.029\n"
        "steps (teacher-forced argmax differs)\t0\t0.0001\t6000\t2e-08\t0\t0\t0.00045\n"
        "steps (teacher-forced argmax differs)\t0.2\t0.5\t10\t0.3\t0.4\t0.18\t0.66\n"
        HX_CALIB_PROFILE_PREFIX "bf16\t0\t1\t350\t0.008\t0.02\t0.011\t0.035\n";
    const char *tsv = tu_write_file("calibrate-bins.tsv", bins, sizeof bins - 1);
    char path[1024];
    snprintf(path, sizeof path, "%s/calibrate.html", tu_tmpdir());
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_calibrate_html_write(tsv, path, &err), LM_OK);
    xmlNode *root;
    xmlDoc *doc = read_standalone_page(path, &root);
    CU_ASSERT_EQUAL(count_class(root, "svg", "reliability"), 2);
    CU_ASSERT_EQUAL(count_class(root, "circle", "bin"), 5); /* the empty bin has none */
    /* Rows: 4 + 2 bins and 1 profile, each table with its header row. */
    CU_ASSERT_EQUAL(count_elems(root, "tr"), 4 + 1 + 2 + 1 + 1 + 1);
    xmlFreeDoc(doc);
    char *text = read_page_text(path);
    /* 0.01 against 0.01 on log axes from 1e-5 to 1: 3/5 of the way along both. */
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "class=\"bin\" cx=\"454.0\" cy=\"108.0\""));
    /* 0 observed sits on the bottom edge, at its bin's predicted 1e-6 on the left edge. */
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "class=\"bin\" cx=\"70.0\" cy=\"240.0\""));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "<td>bf16</td><td>350</td><td>2.80</td><td>7</td>"));
    free(text);
    /* Malformed tables: the file and line named, nothing written. */
    static const char *const bad[][2] = {
        {"table\tlo\n", ":1: not a calibration bins table"},
        {HX_CALIB_BINS_HEADER "\nsteps\t0\t1\t5\t0.1\t0.2\t0.1\n", ":2: not 8 tab-separated"},
        {HX_CALIB_BINS_HEADER "\nsteps\t0\t1\t5\t0.1\t0.2\t0.1\t0.3\t9\n", ":2: more than 8"},
        {HX_CALIB_BINS_HEADER "\nsteps\t0\t1\t5\t0.1\t1.2\t0.1\t0.3\n", ":2: mean_pred"},
        {HX_CALIB_BINS_HEADER "\nsteps\t0\t1\t5\t0.1\t0.2\t0.3\t0.1\n", ":2: mean_pred"},
        {HX_CALIB_BINS_HEADER "\nsteps\t0\t1\t2.5\t0.1\t0.2\t0.1\t0.3\n", ":2: n is not"},
        {HX_CALIB_BINS_HEADER "\nsteps\t0\t1\t5\tx\t0.2\t0.1\t0.3\n", ":2: not 8 tab-separated"},
        {"", ": empty"},
    };
    snprintf(path, sizeof path, "%s/calibrate-bad.html", tu_tmpdir());
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; ++i) {
        tsv = tu_write_file("calibrate-bad.tsv", bad[i][0], strlen(bad[i][0]));
        CU_ASSERT_EQUAL(hx_calibrate_html_write(tsv, path, &err), LM_E_INPUT);
        CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, bad[i][1]));
        if (strstr(err.msg, bad[i][1]) == NULL)
            fprintf(stderr, "\n  case %zu: %s\n", i, err.msg);
        lm_err_clear(&err);
        CU_ASSERT_NOT_EQUAL(access(path, F_OK), 0);
    }
}

/* Headless Chromium renders report.html to a PNG with no console message (no failed fetch, no
 * script error). Skipped, saying so, when the Debian package chromium is not installed. */
static void test_report_html_chromium(void)
{
    const char *browser = "/usr/bin/chromium";
    if (access(browser, X_OK) != 0) {
        fprintf(stderr, "\n  SKIP: %s not installed (apt-get install chromium)\n", browser);
        return;
    }
    hx_report *r = make();
    lm_err err = {0};
    char html[1024], png[1100], log[1100], cmd[4000];
    snprintf(html, sizeof html, "%s/chromium.html", tu_tmpdir());
    snprintf(png, sizeof png, "%s/chromium.png", tu_tmpdir());
    snprintf(log, sizeof log, "%s/chromium.log", tu_tmpdir());
    CU_ASSERT_EQUAL_FATAL(hx_report_write_html(r, html, &err), LM_OK);
    hx_report_free(r);
    snprintf(cmd, sizeof cmd, "HOME=%s timeout 120 %s --headless --no-sandbox --disable-gpu "
             "--enable-logging=stderr --v=0 --window-size=1000,1600 --screenshot=%s "
             "file://%s > %s 2>&1", tu_tmpdir(), browser, png, html, log);
    CU_ASSERT_EQUAL(system(cmd), 0);
    struct stat st;
    CU_ASSERT(stat(png, &st) == 0 && st.st_size > 10000);
    FILE *f = fopen(png, "rb");
    unsigned char magic[8] = {0};
    CU_ASSERT(f != NULL && fread(magic, 1, 8, f) == 8);
    if (f)
        fclose(f);
    CU_ASSERT_EQUAL(memcmp(magic, "\x89PNG\r\n\x1a\n", 8), 0);
    char *text;
    size_t n;
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&text, &n, log, SIZE_MAX, &err), LM_OK);
    CU_ASSERT_PTR_NULL(strstr(text, "CONSOLE"));
    if (strstr(text, "CONSOLE"))
        fprintf(stderr, "\n  chromium log: %s\n", text);
    free(text);
}

/* The greedy sequence's first divergence folds its row's class into the configuration's:
 * tokens parting at a FLIP (or NONFINITE) row fail the configuration even when every tensor
 * row passed; at a TIE_FLIP row it passes as TIE_FLIP; a class is never lowered, and no
 * divergence (-1) changes nothing. */
static void test_report_divergence_folds(void)
{
    static const hx_class at[4] = {HX_FLIP, HX_NONFINITE, HX_TIE_FLIP, HX_DRIFT};
    for (int k = 0; k < 4; ++k) {
        static hx_config_report c;
        memset(&c, 0, sizeof c);
        c.cls = HX_NOISE;
        hx_config_report_set_divergence(&c, -1, at[k]);
        CU_ASSERT_EQUAL(c.cls, HX_NOISE);
        hx_config_report_set_divergence(&c, 4, at[k]);
        CU_ASSERT_EQUAL(c.cls, at[k]);
        CU_ASSERT_EQUAL(c.first_divergent, 4);
        CU_ASSERT_EQUAL(hx_config_report_fails(&c, false), hx_class_fails(at[k]));
        c.cls = HX_NONFINITE;
        hx_config_report_set_divergence(&c, 4, HX_TIE_FLIP);
        CU_ASSERT_EQUAL(c.cls, HX_NONFINITE);
    }
}

void test_report_register(void)
{
    CU_pSuite s = CU_add_suite("report", NULL, NULL);
    CU_add_test(s, "test_report_writers_table", test_report_writers_table);
    CU_add_test(s, "test_report_fold_and_verdicts", test_report_fold_and_verdicts);
    CU_add_test(s, "test_report_divergence_folds", test_report_divergence_folds);
    CU_add_test(s, "test_report_json_schema", test_report_json_schema);
    CU_add_test(s, "test_report_html_wellformed", test_report_html_wellformed);
    CU_add_test(s, "test_report_calibrate_html", test_report_calibrate_html);
    CU_add_test(s, "test_report_narrow_table_and_formats", test_report_narrow_table_and_formats);
    CU_add_test(s, "test_report_html_chromium", test_report_html_chromium);
    CU_add_test(s, "test_report_junit_wellformed_and_escaped",
                test_report_junit_wellformed_and_escaped);
    CU_add_test(s, "test_report_md_and_table", test_report_md_and_table);
    CU_add_test(s, "test_report_write_dir", test_report_write_dir);
    CU_add_test(s, "test_report_block_tables", test_report_block_tables);
}
