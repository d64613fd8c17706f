/* report_github.c — GitHub Actions workflow commands: "::error file=F,line=L,title=T::MSG" per
 * failing configuration, "::warning ..." per skipped case (GitHub shows them on the case file's
 * line in the pull request). Escaping follows the runner's rules: in messages % CR LF become
 * %25 %0D %0A; in properties also : and , become %3A %2C. */
#include "model/report.h"

#include <string.h>

static void esc(FILE *f, const char *s, bool property)
{
    for (; *s; ++s) {
        switch (*s) {
        case '%': fputs("%25", f); break;
        case '\r': fputs("%0D", f); break;
        case '\n': fputs("%0A", f); break;
        case ':': property ? fputs("%3A", f) : fputc(':', f); break;
        case ',': property ? fputs("%2C", f) : fputc(',', f); break;
        default: fputc(*s, f);
        }
    }
}

static void command(FILE *f, const char *kind, const char *file, uint32_t line, const char *title,
                    const char *msg)
{
    fprintf(f, "::%s file=", kind);
    esc(f, file, true);
    if (line)
        fprintf(f, ",line=%u", (unsigned)line);
    fputs(",title=", f);
    esc(f, title, true);
    fputs("::", f);
    esc(f, msg, false);
    fputc('\n', f);
}

/* The case-file line a failure is about: the model or prompt line for a stale golden (what
 * changed), the steps line (the configuration axes) otherwise, the name line as a fallback. */
static uint32_t line_of(const hx_config_report *c, const hx_annot_src *s)
{
    uint32_t l = 0;
    if (c->golden == HX_GOLDEN_STALE && !hx_class_fails(c->cls))
        l = strstr(c->golden_note, "model changed") ? s->line_model : s->line_input;
    if (l == 0)
        l = s->line_steps;
    return l ? l : s->line_name;
}

void hx_report_print_github(FILE *f, const hx_report *const *rs, const hx_annot_src *srcs,
                            size_t n, bool strict)
{
    char title[400], msg[1200];
    for (size_t i = 0; i < n; ++i) {
        const hx_report *r = rs[i];
        bool st = strict || r->strict_bits;
        if (r->skipped[0]) {
            snprintf(title, sizeof title, "kvdrift %s skipped", r->case_name);
            command(f, "warning", srcs[i].file, srcs[i].line_model, title, r->skipped);
            continue;
        }
        for (size_t j = 0; j < r->n_configs; ++j) {
            const hx_config_report *c = &r->configs[j];
            const char *type;
            hx_config_report_failure(msg, sizeof msg, &type, c, st);
            if (type[0] == '\0')
                continue;
            snprintf(title, sizeof title, "kvdrift %s %s: %s", r->case_name, c->config, type);
            command(f, "error", srcs[i].file, line_of(c, &srcs[i]), title, msg);
        }
    }
}
