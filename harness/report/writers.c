/* writers.c — the report writers table: each file format once, with the file name it takes in
 * an output folder, for `kvdrift sweep` and `kvdrift judge` (one report) and `kvdrift check`
 * (several). */
#include "model/report.h"

#include "fs.h"
#include "kvd_util.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* In writing order: report.json last, so a folder holding it is complete (REPORT-SCHEMA.md). */
static const hx_report_writer writers[] = {
    {.name = "junit", .title = "JUnit", .file = "junit.xml", .write_one = NULL,
     .text_many = hx_report_junit_text},
    {.name = "md", .title = "Markdown", .file = "report.md", .write_one = hx_report_write_md,
     .text_many = hx_report_md_text},
    {.name = "html", .title = "HTML", .file = "report.html", .write_one = hx_report_write_html,
     .text_many = hx_report_html_text},
    {.name = "json", .title = "JSON", .file = "report.json", .write_one = hx_report_write_json,
     .text_many = hx_report_json_text},
};

int hx_report_write_text(const char *path, hx_report_text_fn text, const hx_report *const *rs,
                         size_t n, bool strict, lm_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    int rc = text(&buf, &len, rs, n, strict, err);
    if (rc == LM_OK)
        rc = lm_write_file(path, buf, len, err);
    free(buf);
    return rc;
}

size_t hx_report_writer_count(void)
{
    return sizeof writers / sizeof writers[0];
}

const hx_report_writer *hx_report_writer_at(size_t i)
{
    return i < hx_report_writer_count() ? &writers[i] : NULL;
}

const hx_report_writer *hx_report_writer_find(const char *name)
{
    for (size_t i = 0; i < hx_report_writer_count(); ++i)
        if (strcmp(writers[i].name, name) == 0)
            return &writers[i];
    return NULL;
}

/* Whether writer w is one of only[] (NULL-terminated; NULL: every one). */
static bool chosen(const hx_report_writer *w, const char *const *only)
{
    if (only == NULL)
        return true;
    for (; *only != NULL; ++only)
        if (strcmp(*only, w->name) == 0)
            return true;
    return false;
}

#define PATH_CAP 4200 /* a report file's path: the folder (<= 4096) and the file's name */

/* The writers hx_report_write_dir runs for only[] into w[], their files in dir into path[];
 * returns how many. */
static size_t dir_writers(const hx_report_writer **w, char (*path)[PATH_CAP], const char *dir,
                          const char *const *only)
{
    size_t n = 0;
    for (size_t i = 0; i < hx_report_writer_count() && n < HX_REPORT_MAX_WRITERS; ++i)
        if (writers[i].write_one != NULL && chosen(&writers[i], only)) {
            w[n] = &writers[i];
            snprintf(path[n++], PATH_CAP, "%s/%s", dir, writers[i].file);
        }
    return n;
}

/* lm_wfile_check of path[0..n): the first refusal (a read-only file). */
static int check_paths(char (*path)[PATH_CAP], size_t n, lm_err *err)
{
    int rc = LM_OK;
    for (size_t i = 0; rc == LM_OK && i < n; ++i)
        rc = lm_wfile_check(path[i], err);
    return rc;
}

int hx_report_check_dir(const char *dir, const char *const *only, lm_err *err)
{
    char path[HX_REPORT_MAX_WRITERS][PATH_CAP];
    const hx_report_writer *w[HX_REPORT_MAX_WRITERS];
    struct stat st;
    if (stat(dir, &st) != 0) /* made later, so empty: nothing in it to refuse */
        return LM_OK;
    return check_paths(path, dir_writers(w, path, dir, only), err);
}

int hx_report_write_dir(char *wrote, size_t cap, const char *dir, const hx_report *r,
                        const char *const *only, lm_err *err)
{
    char path[HX_REPORT_MAX_WRITERS][PATH_CAP];
    const hx_report_writer *w[HX_REPORT_MAX_WRITERS];
    const size_t n = dir_writers(w, path, dir, only);
    int st = lm_mkdir_p(dir, err);
    if (st == LM_OK) /* a refused target (a read-only file): nothing removed or written */
        st = check_paths(path, n, err);
    if (st == LM_OK && n > 0 && unlink(path[n - 1]) != 0 && errno != ENOENT)
        st = LM_FAIL(err, LM_E_IO, "%s: cannot remove: %s", path[n - 1], strerror(errno));
    for (size_t i = 0; st == LM_OK && i < n; ++i)
        st = w[i]->write_one(r, path[i], err);
    wrote[0] = '\0';
    for (size_t i = 0; st == LM_OK && i < n; ++i)
        lm_words_append(wrote, cap, i, n, path[n - 1 - i], " and ");
    return st;
}
