/* test_diff.c — `kvdrift diff`: two report.json files written by the report writer, compared
 * per configuration; regressions (now failing, worse class, new flips, gone, slower) set exit
 * 1 and are named in the Markdown. */
#include "fs.h"
#include "cli/commands.h"
#include "model/report.h"
#include "judge/report_diff.h"
#include "test_util.h"

#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* A configuration with one logits row per position, of which `agree` keep the reference's
 * top-1; its class and err/E come from the rows. */
static void add_config(hx_report *r, const char *name, hx_class cls, double err_abs,
                       unsigned agree, double decode_tps)
{
    lm_err err = {0};
    hx_config_report *c;
    CU_ASSERT_FATAL(hx_report_add_config(r, &c, name, &err) == LM_OK);
    for (unsigned p = 0; p < 4; ++p) {
        hx_tensor_row t = {0};
        snprintf(t.name, sizeof t.name, "logits@%u", 10 + p);
        t.is_logits = true;
        t.cls = cls;
        t.vs_ref.max_abs = err_abs;
        t.e = 1e-5;
        t.lg.top1_agree = p < agree;
        CU_ASSERT(hx_config_report_add_row(c, &t, &err) == LM_OK);
    }
    c->decode_tps = decode_tps;
}

static const char *write_report(const char *file, int variant)
{
    hx_report *r;
    lm_err err = {0};
    CU_ASSERT_FATAL(hx_report_create(&r, "c", &err) == LM_OK);
    if (variant == 0) {
        add_config(r, "naive:step=1", HX_NOISE, 1e-6, 4, 100.0);
        add_config(r, "blas:step=2", HX_NOISE, 2e-6, 4, 200.0);
        add_config(r, "blas:step=4", HX_NOISE, 2e-6, 4, 200.0);
        add_config(r, "blas:step=8", HX_NOISE, 2e-6, 4, 200.0);
    } else {
        add_config(r, "naive:step=1", HX_NOISE, 1e-6, 4, 99.0);   /* same, 1% slower */
        add_config(r, "blas:step=2", HX_DRIFT, 1e-3, 4, 200.0);   /* now fails */
        add_config(r, "blas:step=4", HX_NOISE, 2e-6, 3, 120.0);   /* a new flip; 40% slower */
        add_config(r, "blas:step=16", HX_NOISE, 2e-6, 4, 200.0);  /* new configuration */
    }
    static char paths[2][1100];
    snprintf(paths[variant], sizeof paths[0], "%s/%s", tu_tmpdir(), file);
    CU_ASSERT_EQUAL_FATAL(hx_report_write_json(r, paths[variant], &err), LM_OK);
    hx_report_free(r);
    return paths[variant];
}

static void test_diff_regressions(void)
{
    const char *a = write_report("diff-old.json", 0), *b = write_report("diff-new.json", 1);
    hx_diff_row *rows = NULL;
    size_t n = 0;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(hx_report_diff(&rows, &n, a, b, 0.0, &err), LM_OK);
    CU_ASSERT_EQUAL_FATAL(n, 5);
    CU_ASSERT_STRING_EQUAL(rows[0].config, "naive:step=1");
    CU_ASSERT_FALSE(rows[0].regression);
    CU_ASSERT(rows[1].regression);
    CU_ASSERT_PTR_NOT_NULL(strstr(rows[1].why, "now fails (DRIFT)"));
    CU_ASSERT(rows[2].regression);
    CU_ASSERT_PTR_NOT_NULL(strstr(rows[2].why, "new flips: top-1 agrees at 3/4"));
    CU_ASSERT(rows[3].regression); /* blas:step=8 is gone */
    CU_ASSERT_PTR_NOT_NULL(strstr(rows[3].why, "gone"));
    CU_ASSERT_STRING_EQUAL(rows[4].config, "blas:step=16"); /* only in NEW: listed, fine */
    CU_ASSERT_FALSE(rows[4].regression);
    free(rows);
    /* With a speed threshold the 40% slowdown counts, the 1% one does not. */
    CU_ASSERT_EQUAL_FATAL(hx_report_diff(&rows, &n, a, b, 10.0, &err), LM_OK);
    CU_ASSERT_FALSE(rows[0].regression);
    CU_ASSERT_PTR_NOT_NULL(strstr(rows[2].why, "40.0% slower"));
    free(rows);
    /* The same report twice: no regression, exit 0; the two: exit 1 with Markdown. */
    char out[1100];
    snprintf(out, sizeof out, "%s/diff.md", tu_tmpdir());
    char *argv1[] = {"diff", (char *)a, (char *)a, "-o", out, NULL};
    CU_ASSERT_EQUAL(cmd_diff(5, argv1), 0);
    char *argv2[] = {"diff", (char *)a, (char *)b, "-o", out, NULL};
    CU_ASSERT_EQUAL(cmd_diff(5, argv2), 1);
    char *text;
    size_t len;
    CU_ASSERT_EQUAL_FATAL(lm_read_file(&text, &len, out, SIZE_MAX, &err), LM_OK);
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "**3 regression(s)**"));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "| c | `blas:step=2` | NOISE → DRIFT |"));
    free(text);
    /* Bad input: exit 2. */
    char *argv3[] = {"diff", (char *)a, "/nonexistent/report.json", NULL};
    int saved = dup(STDERR_FILENO), nul = open("/dev/null", O_WRONLY);
    dup2(nul, STDERR_FILENO);
    int rc = cmd_diff(3, argv3);
    dup2(saved, STDERR_FILENO);
    close(saved);
    close(nul);
    CU_ASSERT_EQUAL(rc, 2);
}

void test_diff_register(void)
{
    CU_pSuite s = CU_add_suite("diff", NULL, NULL);
    CU_add_test(s, "test_diff_regressions", test_diff_regressions);
}
