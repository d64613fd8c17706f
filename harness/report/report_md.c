/* report_md.c — report.md: a summary, the configuration table, and why each non-EXACT row is. */
#include "model/report.h"

#include "fs.h"

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

/* The case's provenance (model, prompt, envelope, platform), split risk, worst class, coverage. */
static void md_summary(FILE *f, const hx_report *r)
{
    fprintf(f, "\n\n- model: `%s` (XXH3-128 `%s`)\n", r->model, r->model_hash);
    fprintf(f, "- prompt: %u tokens; generated: %u; reference precision: %u bits\n",
            (unsigned)r->n_prompt, (unsigned)r->n_gen, (unsigned)r->precision);
    if (r->prompt_rows > 0)
        fprintf(f, "- logits classified at %u of %u prompt positions%s%s; smallest reference "
                   "top-2 margin %.3g at position %u\n", (unsigned)r->prompt_rows,
                (unsigned)r->n_prompt, r->prompt_rows_why[0] ? ": " : "", r->prompt_rows_why,
                r->min_margin, (unsigned)r->min_margin_pos);
    fprintf(f, "- envelope: %u ensemble members, safety factor %g\n",
            (unsigned)r->envelope_members, r->envelope_safety);
    hx_report_split_md(f, r);
    if (r->peak_rss_bytes)
        fprintf(f, "- peak resident memory of the process: %.1f MiB\n",
                (double)r->peak_rss_bytes / 1048576.0);
    fprintf(f, "- platform: %s\n- created: %s\n- worst class: **%s**; exit code %d\n\n",
            r->fingerprint, r->created_utc, hx_class_name(hx_report_worst(r)),
            hx_report_exit_code(r, r->strict_bits));
    if (r->covered[0]) {
        fputs("- covered: ", f);
        md_cell(f, r->covered);
        fputc('\n', f);
    }
    for (uint32_t i = 0; i < r->n_unexercised; ++i) {
        fputs("- not exercised: ", f);
        md_cell(f, r->unexercised[i]);
        fputc('\n', f);
    }
    if (r->covered[0])
        fputc('\n', f);
}

/* The configuration table: every column of hx_report_cells, one row per configuration. */
static void md_table(FILE *f, const hx_report *r)
{
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
}

/* The golden check of every configuration that has one; nothing when none has. */
static void md_goldens(FILE *f, const hx_report *r)
{
    bool header = false;
    for (size_t i = 0; i < r->n_configs; ++i) {
        const hx_config_report *c = &r->configs[i];
        if (c->golden == HX_GOLDEN_NA)
            continue;
        if (!header) {
            fputs("\n## Goldens (bit-level check)\n\n| config | golden | verdict | why |\n"
                  "|---|---|---|---|\n", f);
            header = true;
        }
        fprintf(f, "| `%s` | %s | %s | ", c->config, hx_golden_status_name(c->golden),
                hx_config_report_fails(c, r->strict_bits) ? "**FAIL**" : "pass");
        md_cell(f, c->golden_note);
        fputs(" |\n", f);
    }
}

/* Why each configuration that is not EXACT has its class; nothing when all are EXACT. */
static void md_non_exact(FILE *f, const hx_report *r)
{
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
}

/* One configuration's semantic comparison (its schedule's reference vs the one-chunk one). */
static void md_semantic_cell(FILE *f, const hx_config_report *c)
{
    if (c->sem_same_schedule)
        fputs(" semantic: same schedule as one chunk;", f);
    else if (c->sem_first >= 0)
        fprintf(f, " semantic: **diverges** at generated index %lld (max |dlogit| %.3g, "
                   "smallest one-chunk margin %.3g);",
                (long long)c->sem_first, c->sem_max_abs, c->sem_min_margin);
    else
        fprintf(f, " semantic: same tokens, logits %s (max |dlogit| %.3g, smallest "
                   "one-chunk margin %.3g);",
                c->sem_max_abs == 0.0 ? "identical" : "shifted", c->sem_max_abs,
                c->sem_min_margin);
}

/* Semantic divergence and MoE routing flips of the configurations checked for either; nothing
 * when none was. */
static void md_semantic(FILE *f, const hx_report *r)
{
    bool header = false;
    for (size_t i = 0; i < r->n_configs; ++i) {
        const hx_config_report *c = &r->configs[i];
        if (!c->sem_checked && !c->routing_checked)
            continue;
        if (!header) {
            fputs("\n## Semantic divergence (what is computed) vs numerical (rounding); "
                  "MoE routing\n\n"
                  "The class of a configuration whose attention schedule depends on the step "
                  "(rotating KV cache) is taken against the reference computed with its own "
                  "schedule: it measures rounding only. The semantic column compares that "
                  "reference with the same cache's one-chunk reference: a difference there is a "
                  "change of the computation (different positions attended), not a bug. Its "
                  "div@ is where "
                  "its greedy tokens leave the common teacher path (the plain cache's reference "
                  "path); the row there is judged against its own schedule's reference, so a "
                  "semantic departure does not fail.\n\n", f);
            header = true;
        }
        fprintf(f, "- `%s`:", c->config);
        if (c->sem_checked)
            md_semantic_cell(f, c);
        fprintf(f, " numerical: %s", hx_class_name(c->cls));
        if (c->routing_checked)
            fprintf(f, "; MoE routing flips %u (%u real, %u TIE)", (unsigned)c->routing_flips,
                    (unsigned)c->routing_real, (unsigned)(c->routing_flips - c->routing_real));
        fputc('\n', f);
    }
}

/* One case: heading (level "#" or "##"), then a skip line or summary, table, explanations. */
static void md_case(FILE *f, const hx_report *r, const char *hashes)
{
    fprintf(f, "%s kvdrift report: ", hashes);
    md_cell(f, r->case_name);
    if (r->skipped[0]) {
        fputs("\n\n**skipped**: ", f);
        md_cell(f, r->skipped);
        fprintf(f, " (%zu configurations not run)\n", r->n_configs);
        return;
    }
    md_summary(f, r);
    md_table(f, r);
    md_goldens(f, r);
    md_non_exact(f, r);
    md_semantic(f, r);
    hx_report_judge_md(f, r);
    hx_report_probe_md(f, r);
    hx_report_sections_md(f, r);
    fputs("\nClasses: EXACT, NOISE, TIE_FLIP and SEMANTIC pass; DRIFT, FLIP, NONFINITE and "
          "SEQ_MISMATCH fail; each is defined in kvdrift's docs/DESIGN.md (installed as "
          "share/doc/kvdrift/DESIGN.md). A golden `match` (bits as blessed) is a separate flag, "
          "not a class; a `stale` golden (blessed for another model, prompt or kvdrift version) "
          "fails until blessed again.\n", f);
}

int hx_report_md_text(char **out, size_t *len, const hx_report *const *rs, size_t n, bool strict,
                      lm_err *err)
{
    (void)strict;
    *out = NULL;
    FILE *f = open_memstream(out, len);
    if (f == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "cannot build the Markdown report: out of memory");
    if (n > 1) {
        size_t n_fail = 0, n_skip = 0;
        for (size_t i = 0; i < n; ++i) {
            n_fail += hx_report_exit_code(rs[i], rs[i]->strict_bits) != 0;
            n_skip += rs[i]->skipped[0] != '\0';
        }
        fprintf(f, "# kvdrift check: %zu case(s), %zu ran, %zu skipped, %zu failed\n\n", n,
                n - n_skip, n_skip, n_fail);
    }
    for (size_t i = 0; i < n; ++i) {
        md_case(f, rs[i], n > 1 ? "##" : "#");
        fputc('\n', f);
    }
    if (fclose(f) != 0 || *out == NULL) {
        free(*out);
        *out = NULL;
        return LM_FAIL(err, LM_E_NOMEM, "cannot build the Markdown report: out of memory");
    }
    return LM_OK;
}

int hx_report_write_md_many(const hx_report *const *rs, size_t n, const char *path, lm_err *err)
{
    return hx_report_write_text(path, hx_report_md_text, rs, n, false, err);
}

int hx_report_write_md(const hx_report *r, const char *path, lm_err *err)
{
    return hx_report_write_md_many(&r, 1, path, err);
}
