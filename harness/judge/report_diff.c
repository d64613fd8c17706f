/* report_diff.c — compares two report.json files configuration by configuration. */
#include "judge/report_diff.h"

#include "model/classify.h"
#include "fs.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A report number: a JSON number, or "NaN"/"Infinity"/"-Infinity" (REPORT-SCHEMA.md). */
static double num(const json_t *v)
{
    if (json_is_number(v))
        return json_number_value(v);
    const char *s = json_string_value(v);
    if (s && strcmp(s, "Infinity") == 0)
        return (double)INFINITY;
    if (s && strcmp(s, "-Infinity") == 0)
        return -(double)INFINITY;
    return (double)NAN;
}

/* The case reports of a file: its "reports" array, or the file itself as one report. */
static int load(json_t **root, const json_t **reports, size_t *n, const char *path, lm_err *err)
{
    /* fs.h: a regular file only (a FIFO or a device is refused, never waited on), capped */
    char *text;
    size_t len;
    int rc = lm_read_file(&text, &len, path, HX_REPORT_DIFF_MAX_BYTES, err);
    if (rc != LM_OK)
        return rc;
    json_error_t je;
    *root = json_loadb(text, len, 0, &je);
    free(text);
    if (*root == NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s:%d: %s", path, je.line, je.text);
    const json_t *schema = json_object_get(*root, "schema");
    if (!json_is_string(schema) || strcmp(json_string_value(schema), "kvdrift-report") != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: not a kvdrift report (no \"schema\": "
                       "\"kvdrift-report\")", path);
    const json_t *many = json_object_get(*root, "reports");
    if (json_is_array(many)) {
        *reports = many;
        *n = json_array_size(many);
    } else {
        *reports = NULL;
        *n = 1;
    }
    return LM_OK;
}

static const json_t *report_at(const json_t *root, const json_t *reports, size_t i)
{
    return reports ? json_array_get(reports, i) : root;
}

static int read_side(hx_diff_side *s, const json_t *c, const char *path)
{
    const json_t *cls = json_object_get(c, "class"), *lg = json_object_get(c, "logits");
    if (!json_is_string(cls) || hx_class_from_name(json_string_value(cls)) < 0)
        return -1;
    (void)path;
    s->present = true;
    snprintf(s->cls, sizeof s->cls, "%s", json_string_value(cls));
    s->fails = json_is_true(json_object_get(c, "fails"));
    s->ratio = num(json_object_get(c, "worst_err_over_envelope"));
    s->top1 = json_integer_value(json_object_get(lg, "top1_agree"));
    s->n_pos = json_integer_value(json_object_get(lg, "positions"));
    s->first_div = json_is_integer(json_object_get(c, "first_divergent"))
                       ? json_integer_value(json_object_get(c, "first_divergent"))
                       : -1;
    s->decode_tps = num(json_object_get(c, "decode_tok_s"));
    return 0;
}

/* Appends what makes row a regression to row->why. */
static void judge(hx_diff_row *row, double slow_pct)
{
    const hx_diff_side *o = &row->old, *n = &row->new_;
    char *w = row->why;
    size_t cap = sizeof row->why;
#define WHY(...)                                                                                  \
    do {                                                                                          \
        size_t k = strlen(w);                                                                     \
        snprintf(w + k, cap - k, "%s", k ? "; " : "");                                            \
        k = strlen(w);                                                                            \
        snprintf(w + k, cap - k, __VA_ARGS__);                                                    \
    } while (0)
    if (!n->present) {
        WHY("configuration gone");
    } else if (o->present) {
        int co = hx_class_from_name(o->cls), cn = hx_class_from_name(n->cls);
        if (n->fails && !o->fails)
            WHY("now fails (%s)", n->cls);
        else if (cn > co && cn >= HX_TIE_FLIP)
            WHY("class %s -> %s", o->cls, n->cls);
        if (n->top1 < o->top1 && n->n_pos == o->n_pos)
            WHY("new flips: top-1 agrees at %lld/%lld positions, was %lld",
                (long long)n->top1, (long long)n->n_pos, (long long)o->top1);
        else if (n->first_div >= 0 && (o->first_div < 0 || n->first_div < o->first_div))
            WHY("greedy tokens now part at generated index %lld (was %lld)",
                (long long)n->first_div, (long long)o->first_div);
        if (slow_pct > 0.0 && o->decode_tps > 0.0 && n->decode_tps > 0.0 &&
            n->decode_tps < o->decode_tps * (1.0 - slow_pct / 100.0))
            WHY("decode %.0f -> %.0f tok/s (%.1f%% slower)", o->decode_tps, n->decode_tps,
                100.0 * (1.0 - n->decode_tps / o->decode_tps));
    }
#undef WHY
    row->regression = row->why[0] != '\0';
}

static hx_diff_row *find_row(hx_diff_row *rows, size_t n, const char *cn, const char *cfg)
{
    for (size_t i = 0; i < n; ++i)
        if (strcmp(rows[i].case_name, cn) == 0 && strcmp(rows[i].config, cfg) == 0)
            return &rows[i];
    return NULL;
}

/* Adds every configuration of one file as side `which` (0 old, 1 new). */
static int add_file(hx_diff_row **rows, size_t *n, size_t *cap, const char *path, int which,
                    lm_err *err)
{
    json_t *root = NULL;
    const json_t *reports = NULL;
    size_t n_rep = 0;
    int rc = load(&root, &reports, &n_rep, path, err);
    for (size_t i = 0; i < n_rep && rc == LM_OK; ++i) {
        const json_t *r = report_at(root, reports, i);
        const char *cn = json_string_value(json_object_get(r, "case"));
        const json_t *cfgs = json_object_get(r, "configs");
        if (cn == NULL || !json_is_array(cfgs)) {
            rc = LM_FAIL(err, LM_E_INPUT, "%s: report %zu has no \"case\" or \"configs\"", path, i);
            break;
        }
        size_t j;
        const json_t *c;
        json_array_foreach(cfgs, j, c) {
            const char *name = json_string_value(json_object_get(c, "config"));
            if (name == NULL || json_is_true(json_object_get(c, "skipped")))
                continue;
            hx_diff_row *row = find_row(*rows, *n, cn, name);
            if (row == NULL) {
                if (*n == *cap) {
                    size_t nc = *cap ? 2 * *cap : 32;
                    hx_diff_row *nr = realloc(*rows, nc * sizeof *nr);
                    if (nr == NULL) {
                        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
                        break;
                    }
                    *rows = nr;
                    *cap = nc;
                }
                row = &(*rows)[(*n)++];
                memset(row, 0, sizeof *row);
                snprintf(row->case_name, sizeof row->case_name, "%s", cn);
                snprintf(row->config, sizeof row->config, "%s", name);
            }
            if (read_side(which ? &row->new_ : &row->old, c, path) != 0) {
                rc = LM_FAIL(err, LM_E_INPUT, "%s: %s/%s: no valid \"class\"", path, cn, name);
                break;
            }
        }
    }
    json_decref(root);
    return rc;
}

int hx_report_diff(hx_diff_row **rows, size_t *n, const char *old_path, const char *new_path,
                   double slow_pct, lm_err *err)
{
    *rows = NULL;
    *n = 0;
    size_t cap = 0;
    int rc = add_file(rows, n, &cap, old_path, 0, err);
    if (rc == LM_OK)
        rc = add_file(rows, n, &cap, new_path, 1, err);
    if (rc != LM_OK) {
        free(*rows);
        *rows = NULL;
        *n = 0;
        return rc;
    }
    for (size_t i = 0; i < *n; ++i)
        judge(&(*rows)[i], slow_pct);
    return LM_OK;
}
