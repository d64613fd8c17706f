/* report_json.c — report.json writer (jansson); the schema is harness/report/REPORT-SCHEMA.md. */
#include "model/report.h"

#include "report/json_num.h"

#include "fs.h"
#include "kvd_version.h"

#include <jansson.h>
#include <stdlib.h>
#include <string.h>

/* Sets key to a new value; a NULL value (allocation failure) makes the whole build fail later,
 * because json_object_set_new rejects it and we count the failure. */
typedef struct jb {
    int failed;
} jb;

static void set(jb *b, json_t *o, const char *k, json_t *v)
{
    b->failed |= hx_json_put(o, k, v);
}

static json_t *metrics_obj(jb *b, const hx_metrics *m)
{
    json_t *o = json_object();
    set(b, o, "n", json_integer((json_int_t)m->n));
    set(b, o, "n_nonfinite", json_integer((json_int_t)m->n_nonfinite));
    set(b, o, "n_diff_bits", json_integer((json_int_t)m->n_diff_bits));
    set(b, o, "max_abs", hx_json_num(m->max_abs));
    set(b, o, "argmax_abs", json_integer((json_int_t)m->argmax_abs));
    set(b, o, "max_rel", hx_json_num(m->max_rel));
    set(b, o, "max_ulp", m->max_ulp == HX_ULP_NAN ? json_null() : json_integer((json_int_t)m->max_ulp));
    set(b, o, "nmse", hx_json_num(m->nmse));
    set(b, o, "ref_absmax", hx_json_num(m->r_absmax));
    set(b, o, "sig_digits", hx_json_num(m->sig_digits));
    return o;
}

static json_t *row_obj(jb *b, const hx_tensor_row *t)
{
    json_t *o = json_object();
    set(b, o, "name", json_string(t->name));
    set(b, o, "kind", json_string(t->is_logits ? "logits" : "kv"));
    set(b, o, "class", json_string(hx_class_name(t->cls)));
    set(b, o, "reason", json_string(t->reason));
    set(b, o, "vs_ref", metrics_obj(b, &t->vs_ref));
    set(b, o, "envelope", hx_json_num(t->e));
    if (t->is_logits) {
        set(b, o, "envelope_gap", hx_json_num(t->e_gap));
        json_t *l = json_object();
        set(b, l, "top1", json_integer(t->lg.top1_x));
        set(b, l, "top1_ref", json_integer(t->lg.top1_r));
        set(b, l, "top5_overlap", json_integer(t->lg.top5_overlap));
        set(b, l, "ref_margin", hx_json_num(t->lg.r_margin));
        set(b, l, "ref_gap", hx_json_num(t->lg.r_gap));
        set(b, l, "kl", hx_json_num(t->lg.kl));
        set(b, o, "logits", l);
    }
    return o;
}

static json_t *config_obj(jb *b, const hx_config_report *c, bool strict)
{
    json_t *o = json_object();
    set(b, o, "config", json_string(c->config));
    set(b, o, "class", json_string(hx_class_name(c->cls)));
    set(b, o, "fails", json_boolean(hx_config_report_fails(c, strict)));
    set(b, o, "reason", json_string(c->reason));
    set(b, o, "first_divergent", json_integer(c->first_divergent));
    set(b, o, "divergent_class",
        c->first_divergent >= 0 ? json_string(hx_class_name(c->divergent_cls)) : json_null());
    set(b, o, "bitwise_baseline", json_boolean(c->bitwise_baseline));
    set(b, o, "vs_ref", metrics_obj(b, &c->vs_ref));
    set(b, o, "vs_baseline", metrics_obj(b, &c->vs_base));
    json_t *l = json_object();
    set(b, l, "positions", json_integer(c->logits.n_pos));
    set(b, l, "top1_agree", json_integer(c->logits.n_top1_agree));
    set(b, l, "top1_rate", hx_json_num(hx_logit_agg_top1_rate(&c->logits)));
    set(b, l, "top5_overlap_mean", hx_json_num(hx_logit_agg_top5_mean(&c->logits)));
    set(b, l, "kl_mean", hx_json_num(hx_logit_agg_kl_mean(&c->logits)));
    set(b, l, "kl_max", hx_json_num(c->logits.kl_max));
    set(b, l, "min_ref_margin", hx_json_num(c->logits.min_r_margin));
    set(b, o, "logits", l);
    set(b, o, "envelope_logits_max", hx_json_num(c->e_logits_max));
    set(b, o, "worst_err_over_envelope", hx_json_num(c->worst_ratio));
    set(b, o, "sig_digits", hx_json_num(c->sig_digits));
    set(b, o, "ulp_rel", hx_json_num(c->ulp_rel));
    set(b, o, "xxh3_128", json_string(c->hash_hex));
    set(b, o, "golden", json_string(hx_golden_status_name(c->golden)));
    set(b, o, "golden_key", json_string(c->golden_key));
    set(b, o, "golden_note", json_string(c->golden_note));
    set(b, o, "wall_s", hx_json_num(c->wall_s));
    set(b, o, "skipped", json_boolean(c->skipped));
    set(b, o, "prefill_tok_s", hx_json_num(c->prefill_tps));
    set(b, o, "decode_tok_s", hx_json_num(c->decode_tps));
    set(b, o, "peak_mem_bytes", json_integer((json_int_t)c->peak_mem_bytes));
    if (c->sem_checked) {
        json_t *sm = json_object();
        set(b, sm, "same_schedule", json_boolean(c->sem_same_schedule));
        set(b, sm, "first_divergent", json_integer((json_int_t)c->sem_first));
        set(b, sm, "max_abs_logits", hx_json_num(c->sem_max_abs));
        set(b, sm, "min_margin", hx_json_num(c->sem_min_margin));
        set(b, o, "semantic", sm);
    } else {
        set(b, o, "semantic", json_null());
    }
    if (c->routing_checked) {
        json_t *ro = json_object();
        set(b, ro, "flips", json_integer(c->routing_flips));
        set(b, ro, "real", json_integer(c->routing_real));
        set(b, ro, "tie", json_integer(c->routing_flips - c->routing_real));
        set(b, ro, "tie_band", hx_json_num(c->routing_tie_band));
        set(b, o, "routing", ro);
    } else {
        set(b, o, "routing", json_null());
    }
    json_t *rows = json_array();
    for (size_t i = 0; i < c->n_rows; ++i)
        if (rows == NULL || json_array_append_new(rows, row_obj(b, &c->rows[i])) != 0)
            b->failed = 1;
    set(b, o, "tensors", rows);
    return o;
}

static json_t *report_obj(jb *b, const hx_report *r)
{
    json_t *o = json_object();
    set(b, o, "case", json_string(r->case_name));
    set(b, o, "model", json_string(r->model));
    set(b, o, "model_hash", json_string(r->model_hash));
    set(b, o, "tokens_hash", json_string(r->tokens_hash));
    set(b, o, "kvdrift_version", json_string(KVD_VERSION));
    set(b, o, "kvdrift_commit", json_string(lm_git_commit()));
    set(b, o, "command_line", r->command_line[0] ? json_string(r->command_line) : json_null());
    json_t *ids = r->prompt_ids ? json_array() : json_null();
    for (uint32_t i = 0; r->prompt_ids && i < r->n_prompt; ++i)
        if (ids == NULL || json_array_append_new(ids, json_integer(r->prompt_ids[i])) != 0)
            b->failed = 1;
    set(b, o, "prompt_ids", ids);
    json_t *ph = json_object();
    for (int i = 0; i < HX_N_PHASES; ++i)
        set(b, ph, hx_phase_name((hx_phase)i), hx_json_num(r->phase_s[i]));
    set(b, o, "phase_s", ph);
    set(b, o, "peak_rss_bytes", json_integer((json_int_t)r->peak_rss_bytes));
    json_t *cov = json_object(), *un = json_array();
    set(b, cov, "covered", json_string(r->covered));
    for (uint32_t i = 0; i < r->n_unexercised; ++i)
        if (un == NULL || json_array_append_new(un, json_string(r->unexercised[i])) != 0)
            b->failed = 1;
    set(b, cov, "not_exercised", un);
    set(b, o, "coverage", cov);
    json_t *p = json_object();
    set(b, p, "id", json_string(r->fingerprint_id));
    set(b, p, "text", json_string(r->fingerprint));
    set(b, o, "platform", p);
    set(b, o, "created_utc", json_string(r->created_utc));
    set(b, o, "n_prompt", json_integer(r->n_prompt));
    set(b, o, "n_gen", json_integer(r->n_gen));
    set(b, o, "precision_bits", json_integer(r->precision));
    json_t *pr = json_object();
    set(b, pr, "classified", json_integer(r->prompt_rows));
    set(b, pr, "why_not_all", r->prompt_rows_why[0] ? json_string(r->prompt_rows_why) : json_null());
    set(b, pr, "min_ref_margin", hx_json_num(r->min_margin));
    set(b, pr, "min_ref_margin_pos", json_integer(r->min_margin_pos));
    set(b, o, "prompt_positions", pr);
    json_t *e = json_object();
    set(b, e, "safety", hx_json_num(r->envelope_safety));
    set(b, e, "members", json_integer(r->envelope_members));
    set(b, o, "envelope", e);
    set(b, o, "strict_bits", json_boolean(r->strict_bits));
    set(b, o, "skipped", r->skipped[0] ? json_string(r->skipped) : json_null());
    set(b, o, "worst_class", json_string(hx_class_name(hx_report_worst(r))));
    set(b, o, "exit_code", json_integer(hx_report_exit_code(r, r->strict_bits)));
    json_t *cs = json_array();
    for (size_t i = 0; i < r->n_configs; ++i)
        if (cs == NULL || json_array_append_new(cs, config_obj(b, &r->configs[i], r->strict_bits)))
            b->failed = 1;
    set(b, o, "configs", cs);
    if (hx_report_judge_json(o, r) != 0 || hx_report_sections_json(o, r) != 0 ||
        hx_report_split_json(o, r) != 0 || hx_report_probe_json(o, r) != 0)
        b->failed = 1;
    return o;
}

/* The document's text plus a newline (malloc'd) into *out, *len; takes root. */
static int dump_text(char **out, size_t *len, json_t *root, jb *b, lm_err *err)
{
    char *text = (root && !b->failed) ? json_dumps(root, JSON_INDENT(2) | JSON_REAL_PRECISION(17))
                                      : NULL;
    json_decref(root);
    const size_t n = text ? strlen(text) : 0;
    char *t = text ? realloc(text, n + 2) : NULL;
    if (t == NULL) {
        free(text);
        return LM_FAIL(err, LM_E_NOMEM, "cannot build the JSON report: out of memory");
    }
    t[n] = '\n';
    t[n + 1] = '\0';
    *out = t;
    *len = n + 1;
    return LM_OK;
}

static void set_schema(jb *b, json_t *o)
{
    set(b, o, "schema", json_string("kvdrift-report"));
    set(b, o, "schema_version", json_integer(HX_REPORT_SCHEMA_VERSION));
}

/* One report: its fields at the top level beside the schema fields. */
static int json_one_text(char **out, size_t *len, const hx_report *const *rs, size_t n,
                         bool strict, lm_err *err)
{
    (void)n;
    (void)strict;
    jb b = {0};
    json_t *root = json_object();
    set_schema(&b, root);
    json_t *body = report_obj(&b, rs[0]);
    if (root && body)
        json_object_update(root, body);
    json_decref(body);
    return dump_text(out, len, root, &b, err);
}

int hx_report_write_json(const hx_report *r, const char *path, lm_err *err)
{
    return hx_report_write_text(path, json_one_text, &r, 1, false, err);
}

int hx_report_json_text(char **out, size_t *len, const hx_report *const *rs, size_t n,
                        bool strict, lm_err *err)
{
    (void)strict;
    jb b = {0};
    json_t *root = json_object();
    set_schema(&b, root);
    json_t *arr = json_array();
    for (size_t i = 0; i < n; ++i)
        if (arr == NULL || json_array_append_new(arr, report_obj(&b, rs[i])) != 0)
            b.failed = 1;
    set(&b, root, "reports", arr);
    return dump_text(out, len, root, &b, err);
}

int hx_report_write_json_many(const hx_report *const *rs, size_t n, const char *path, lm_err *err)
{
    return hx_report_write_text(path, hx_report_json_text, rs, n, false, err);
}
