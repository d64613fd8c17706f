/* writers.c — the report writers table: each file format once, with the file name it takes in
 * an output folder, for `kvdrift sweep` (one report) and `kvdrift check` (several). */
#include "report.h"

#include <string.h>

static int json_many(const hx_report *const *rs, size_t n, bool strict, const char *path,
                     lm_err *err)
{
    (void)strict;
    return hx_report_write_json_many(rs, n, path, err);
}

static int html_many(const hx_report *const *rs, size_t n, bool strict, const char *path,
                     lm_err *err)
{
    (void)strict;
    return hx_report_write_html_many(rs, n, path, err);
}

static int md_many(const hx_report *const *rs, size_t n, bool strict, const char *path,
                   lm_err *err)
{
    (void)strict;
    return hx_report_write_md_many(rs, n, path, err);
}

/* In writing order: report.json last, so a folder holding it is complete (REPORT-SCHEMA.md). */
static const hx_report_writer writers[] = {
    {.name = "junit", .title = "JUnit", .file = "junit.xml", .write_one = NULL,
     .write_many = hx_report_write_junit},
    {.name = "md", .title = "Markdown", .file = "report.md", .write_one = hx_report_write_md,
     .write_many = md_many},
    {.name = "html", .title = "HTML", .file = "report.html", .write_one = hx_report_write_html,
     .write_many = html_many},
    {.name = "json", .title = "JSON", .file = "report.json", .write_one = hx_report_write_json,
     .write_many = json_many},
};

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
