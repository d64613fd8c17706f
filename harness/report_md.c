/* report_md.c — report.md: a summary, the configuration table, and why each non-EXACT row is. */
#include "report.h"

#include "atomic.h"

#include <stdlib.h>
#include <string.h>

/* Markdown table cells must not contain '|' or newlines. */
static void md_cell(FILE *f, const char *s)
{
    for (; *s; ++s) {
        if (*s == '|')
            fputs("\\|", f);
        else if (*s == '\n' || *s == '\r')
            fputc(' ', f);
        else
            fputc(*s, f);
    }
}

int hx_report_write_md(const hx_report *r, const char *path, lm_err *err)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (f == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    fprintf(f, "# kvdrift report: ");
    md_cell(f, r->case_name);
    fprintf(f, "\n\n- model: `%s` (XXH3-128 `%s`)\n", r->model, r->model_hash);
    fprintf(f, "- prompt: %u tokens; generated: %u; reference precision: %u bits\n",
            (unsigned)r->n_prompt, (unsigned)r->n_gen, (unsigned)r->precision);
    fprintf(f, "- envelope: %u ensemble members, safety factor %g\n",
            (unsigned)r->envelope_members, r->envelope_safety);
    fprintf(f, "- platform: %s\n- created: %s\n- worst class: **%s**; exit code %d\n\n",
            r->fingerprint, r->created_utc, hx_class_name(hx_report_worst(r)),
            hx_report_exit_code(r, r->strict_bits));
    fputc('|', f);
    for (int j = 0; j < HX_REPORT_NCOLS; ++j)
        fprintf(f, " %s |", hx_report_col_names[j]);
    fputs("\n|", f);
    for (int j = 0; j < HX_REPORT_NCOLS; ++j)
        fputs(j < 2 ? "---|" : "---:|", f);
    fputc('\n', f);
    char cells[HX_REPORT_NCOLS][HX_REPORT_CELL];
    for (size_t i = 0; i < r->n_configs; ++i) {
        hx_report_cells(cells, &r->configs[i]);
        fputc('|', f);
        for (int j = 0; j < HX_REPORT_NCOLS; ++j) {
            fputc(' ', f);
            md_cell(f, cells[j]);
            fputs(" |", f);
        }
        fputc('\n', f);
    }
    bool header = false;
    for (size_t i = 0; i < r->n_configs; ++i) {
        const hx_config_report *c = &r->configs[i];
        if (c->cls == HX_EXACT)
            continue;
        if (!header) {
            fputs("\n## Non-EXACT configurations\n\n", f);
            header = true;
        }
        fprintf(f, "- `%s` **%s**: ", c->config, hx_class_name(c->cls));
        md_cell(f, c->reason);
        fputc('\n', f);
    }
    fputs("\nClasses: EXACT (bitwise equal to its baseline, within the envelope of the "
          "reference), NOISE (within the envelope, same argmax), TIE_FLIP (argmax flipped on a "
          "near tie), DRIFT (more error than rounding explains), FLIP (argmax flipped beyond the "
          "envelope), NONFINITE (NaN/Inf). DRIFT, FLIP and NONFINITE fail.\n", f);
    if (fclose(f) != 0 || buf == NULL) {
        free(buf);
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    }
    int rc = hx_write_file_atomic(path, buf, len, err);
    free(buf);
    return rc;
}
