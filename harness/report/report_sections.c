/* report_sections.c — the sweep's after-table sections of report.json ("spec",
 * "block_sampler") and report.md: the speculative-decoding check and the block sampler's
 * amplification check. */
#include "model/report.h"

#include "report/json_num.h"

#include <jansson.h>
#include <string.h>


static json_t *spec_row(const hx_spec_report_row *w, int *bad)
{
    json_t *o = json_object();
    if (o == NULL) {
        *bad = 1;
        return NULL;
    }
    *bad |= hx_json_put(o, "config", json_string(w->config));
    *bad |= hx_json_put(o, "class", json_string(hx_class_name(w->cls)));
    *bad |= hx_json_put(o, "fails", json_boolean(hx_class_fails(w->cls)));
    *bad |= hx_json_put(o, "first_token_differs", json_integer(w->first_tok));
    *bad |= hx_json_put(o, "first_history_differs", json_integer(w->first_hist));
    *bad |= hx_json_put(o, "max_abs", hx_json_num(w->max_abs));
    *bad |= hx_json_put(o, "err", hx_json_num(w->err));
    *bad |= hx_json_put(o, "gap", hx_json_num(w->gap));
    *bad |= hx_json_put(o, "rounds", json_integer(w->n_rounds));
    *bad |= hx_json_put(o, "drafted", json_integer(w->n_drafted));
    *bad |= hx_json_put(o, "accepted", json_integer(w->n_accepted));
    *bad |= hx_json_put(o, "window_class", w->window_cls < 0
                                       ? json_null()
                                       : json_string(hx_class_name((hx_class)w->window_cls)));
    *bad |= hx_json_put(o, "reason", json_string(w->reason));
    return o;
}

static json_t *spec_obj(const hx_spec_report *s, int *bad)
{
    json_t *o = json_object(), *pen = json_object(), *rows = json_array();
    if (o == NULL || pen == NULL || rows == NULL) {
        *bad = 1;
        json_decref(o);
        json_decref(pen);
        json_decref(rows);
        return NULL;
    }
    *bad |= hx_json_put(o, "draft", json_string(s->draft));
    *bad |= hx_json_put(pen, "repeat_penalty", hx_json_num(s->repeat_penalty));
    *bad |= hx_json_put(pen, "repeat_last_n", json_integer(s->repeat_last_n));
    *bad |= hx_json_put(pen, "frequency_penalty", hx_json_num(s->frequency_penalty));
    *bad |= hx_json_put(pen, "presence_penalty", hx_json_num(s->presence_penalty));
    *bad |= hx_json_put(o, "penalties", pen);
    *bad |= hx_json_put(o, "e", hx_json_num(s->e));
    *bad |= hx_json_put(o, "e_gap", hx_json_num(s->e_gap));
    size_t n_fail = 0;
    for (size_t i = 0; i < s->n_rows; ++i) {
        n_fail += hx_class_fails(s->rows[i].cls);
        *bad |= json_array_append_new(rows, spec_row(&s->rows[i], bad)) != 0;
    }
    *bad |= hx_json_put(o, "failures", json_integer((json_int_t)n_fail));
    *bad |= hx_json_put(o, "rows", rows);
    return o;
}

static json_t *block_row(const hx_block_report_row *w, int *bad)
{
    json_t *o = json_object();
    if (o == NULL) {
        *bad = 1;
        return NULL;
    }
    *bad |= hx_json_put(o, "config", json_string(w->config));
    *bad |= hx_json_put(o, "skipped", w->skipped[0] ? json_string(w->skipped) : json_null());
    *bad |= hx_json_put(o, "prefill_class", json_string(hx_class_name(w->prefill_cls)));
    *bad |= hx_json_put(o, "prefill_worst_ratio", hx_json_num(w->prefill_ratio));
    if (w->skipped[0])
        return o;
    *bad |= hx_json_put(o, "is_baseline", json_boolean(w->is_baseline));
    *bad |= hx_json_put(o, "block_differs", json_boolean(w->tokens_differ));
    *bad |= hx_json_put(o, "block_order_differs", json_boolean(w->order_differs));
    *bad |= hx_json_put(o, "first_block", json_integer(w->first_block));
    *bad |= hx_json_put(o, "first_iteration", json_integer(w->first_iter));
    *bad |= hx_json_put(o, "first_position", json_integer(w->first_pos));
    *bad |= hx_json_put(o, "greedy_first_differs", json_integer(w->greedy_first));
    *bad |= hx_json_put(o, "iterations", json_integer(w->n_iters));
    *bad |= hx_json_put(o, "block_min_logit_gap", hx_json_num(w->blk_gap));
    *bad |= hx_json_put(o, "block_min_commit_gap", hx_json_num(w->commit_gap));
    *bad |= hx_json_put(o, "greedy_min_logit_gap", hx_json_num(w->greedy_gap));
    *bad |= hx_json_put(o, "completion", json_string(w->completion));
    return o;
}

static json_t *block_obj(const hx_block_report *b, int *bad)
{
    json_t *o = json_object(), *rows = json_array();
    if (o == NULL || rows == NULL) {
        *bad = 1;
        json_decref(o);
        json_decref(rows);
        return NULL;
    }
    *bad |= hx_json_put(o, "block", json_integer(b->block));
    *bad |= hx_json_put(o, "blocks", json_integer(b->n_blocks));
    *bad |= hx_json_put(o, "max_iterations", json_integer(b->max_iters));
    *bad |= hx_json_put(o, "criterion", json_string(b->criterion));
    *bad |= hx_json_put(o, "rule", json_string(b->rule));
    *bad |= hx_json_put(o, "threshold", hx_json_num(b->threshold));
    *bad |= hx_json_put(o, "mask_token", json_integer(b->mask_id));
    *bad |= hx_json_put(o, "compared", json_integer((json_int_t)b->n_compared));
    *bad |= hx_json_put(o, "block_differ", json_integer((json_int_t)b->n_block_differ));
    *bad |= hx_json_put(o, "greedy_differ", json_integer((json_int_t)b->n_greedy_differ));
    *bad |= hx_json_put(o, "prefill_failures", json_integer((json_int_t)b->n_prefill_fail));
    *bad |= hx_json_put(o, "worst_ratio", hx_json_num(b->worst_ratio));
    *bad |= hx_json_put(o, "block_min_logit_gap", hx_json_num(b->min_blk_gap));
    *bad |= hx_json_put(o, "greedy_min_logit_gap", hx_json_num(b->min_greedy_gap));
    *bad |= hx_json_put(o, "verdict", json_string(b->verdict));
    for (size_t i = 0; i < b->n_rows; ++i)
        *bad |= json_array_append_new(rows, block_row(&b->rows[i], bad)) != 0;
    *bad |= hx_json_put(o, "rows", rows);
    return o;
}

int hx_report_sections_json(void *obj, const hx_report *r)
{
    json_t *o = obj;
    int bad = 0;
    if (r->spec.run)
        bad |= hx_json_put(o, "spec", spec_obj(&r->spec, &bad));
    if (r->block.run)
        bad |= hx_json_put(o, "block_sampler", block_obj(&r->block, &bad));
    return bad;
}

void hx_block_row_cells(hx_block_cells *c, const hx_block_report_row *w, bool md)
{
    c->block = w->is_baseline     ? "(itself)"
               : w->tokens_differ ? (md ? "**DIFFERS**" : "DIFFERS")
               : w->order_differs ? "order"
                                  : "same";
    snprintf(c->first, sizeof c->first, "-");
    if (w->first_block >= 0)
        snprintf(c->first, sizeof c->first, md ? "%lld, %lld, %lld" : "b%lld it%lld pos%lld",
                 (long long)w->first_block, (long long)w->first_iter, (long long)w->first_pos);
    snprintf(c->greedy, sizeof c->greedy, "%s",
             w->is_baseline ? (md ? "(itself)" : "-") : "same");
    if (!w->is_baseline && w->greedy_first >= 0)
        snprintf(c->greedy, sizeof c->greedy, md ? "differs at %lld" : "at %lld",
                 (long long)w->greedy_first);
}

void hx_report_sections_md(FILE *f, const hx_report *r)
{
    const hx_spec_report *s = &r->spec;
    if (s->run) {
        size_t n_fail = 0;
        for (size_t i = 0; i < s->n_rows; ++i)
            n_fail += hx_class_fails(s->rows[i].cls);
        fprintf(f, "\n## Speculative decoding vs plain decoding\n\nDraft `%s`; processors: "
                "repeat-penalty %g, repeat-last-n %u, frequency-penalty %g, presence-penalty %g; "
                "near tie: verify row within E %.3g and gap within E_gap %.3g. **%s**: %zu of %zu "
                "rows SEQ_MISMATCH.\n\n| config | class | first token diff | first history diff "
                "| max abs | accepted | why |\n|---|---|---:|---:|---:|---:|---|\n",
                s->draft, (double)s->repeat_penalty, (unsigned)s->repeat_last_n,
                (double)s->frequency_penalty, (double)s->presence_penalty, s->e, s->e_gap,
                n_fail ? "FAIL" : "pass", n_fail, s->n_rows);
        for (size_t i = 0; i < s->n_rows; ++i) {
            const hx_spec_report_row *w = &s->rows[i];
            fprintf(f, "| `%s` | %s | %lld | %lld | %.3g | %u/%u | %s |\n", w->config,
                    hx_class_name(w->cls), (long long)w->first_tok, (long long)w->first_hist,
                    w->max_abs, (unsigned)w->n_accepted, (unsigned)w->n_drafted, w->reason);
        }
    }
    const hx_block_report *b = &r->block;
    if (!b->run)
        return;
    fprintf(f, "\n## Block sampler and greedy decoding vs the one-chunk run\n\n%u block(s) of %u, "
            "mask token %d, up to %u iterations, commit %s.\n\n**%s**\n\n"
            "| config | prefill | err/E | iterations | block | first diff (block, iteration, "
            "position) | block gap | commit gap | greedy | greedy gap |\n"
            "|---|---|---:|---:|---|---|---:|---:|---|---:|\n",
            (unsigned)b->n_blocks, (unsigned)b->block, (int)b->mask_id, (unsigned)b->max_iters,
            b->rule, b->verdict);
    for (size_t i = 0; i < b->n_rows; ++i) {
        const hx_block_report_row *w = &b->rows[i];
        if (w->skipped[0]) {
            fprintf(f, "| `%s` | %s | %.3g | skipped: %s | | | | | | |\n", w->config,
                    hx_class_name(w->prefill_cls), w->prefill_ratio, w->skipped);
            continue;
        }
        hx_block_cells c;
        hx_block_row_cells(&c, w, true);
        fprintf(f, "| `%s` | %s | %.3g | %u | %s | %s | %.3g | %.3g | %s | %.3g |\n", w->config,
                hx_class_name(w->prefill_cls), w->prefill_ratio, (unsigned)w->n_iters, c.block,
                c.first, w->blk_gap, w->commit_gap, c.greedy, w->greedy_gap);
    }
}
