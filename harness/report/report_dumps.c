/* report_dumps.c — the judge's sections of report.json ("dumps", "pairs") and report.md. */
#include "model/report.h"

#include "report/json_num.h"

#include <jansson.h>
#include <stdio.h>
#include <string.h>


/* The first K/V row outside the envelope: {"layer", "position", "tensor", "err", "e",
 * "rows_outside", "rows"}, layer/position/tensor/err/e null when every row is within. */
static json_t *kv_first_obj(const hx_kv_first *k, int *bad)
{
    json_t *o = json_object();
    if (o == NULL) {
        *bad = 1;
        return NULL;
    }
    const bool any = k->layer >= 0;
    const char t[2] = {k->tensor, '\0'};
    *bad |= hx_json_put(o, "layer", any ? json_integer(k->layer) : json_null());
    *bad |= hx_json_put(o, "position", any ? json_integer(k->pos) : json_null());
    *bad |= hx_json_put(o, "tensor", any ? json_string(t) : json_null());
    *bad |= hx_json_put(o, "err", any ? hx_json_num(k->err) : json_null());
    *bad |= hx_json_put(o, "e", any ? hx_json_num(k->e) : json_null());
    *bad |= hx_json_put(o, "rows_outside", json_integer(k->n_outside));
    *bad |= hx_json_put(o, "rows", json_integer(k->n_rows));
    return o;
}

/* One hidden state: {"layer" (-1: the embedding), "err", "e", "ratio", "rows_outside"}. */
static json_t *hidden_state_obj(const hx_hidden_state *h, int *bad)
{
    json_t *o = json_object();
    if (o == NULL) {
        *bad = 1;
        return NULL;
    }
    *bad |= hx_json_put(o, "layer", json_integer(h->layer));
    *bad |= hx_json_put(o, "err", hx_json_num(h->err));
    *bad |= hx_json_put(o, "e", hx_json_num(h->e));
    *bad |= hx_json_put(o, "ratio", hx_json_num(h->ratio));
    *bad |= hx_json_put(o, "rows_outside", json_integer(h->n_outside));
    return o;
}

/* The first hidden-state row outside the envelope: {"judged", "layer" (-1: the embedding),
 * "position", "err", "e", "rows_outside", "rows", "states": [...]}, layer/position/err/e null
 * when every row is within; {"judged": false} when the profile's envelope has no hidden
 * states. */
static json_t *hidden_first_obj(const hx_hidden_first *h, int *bad)
{
    json_t *o = json_object(), *st = json_array();
    if (o == NULL || st == NULL) {
        *bad = 1;
        json_decref(o);
        json_decref(st);
        return NULL;
    }
    *bad |= hx_json_put(o, "judged", json_boolean(h->checked));
    if (!h->checked) {
        json_decref(st);
        return o;
    }
    const bool any = h->outside;
    *bad |= hx_json_put(o, "layer", any ? json_integer(h->layer) : json_null());
    *bad |= hx_json_put(o, "position", any ? json_integer(h->pos) : json_null());
    *bad |= hx_json_put(o, "err", any ? hx_json_num(h->err) : json_null());
    *bad |= hx_json_put(o, "e", any ? hx_json_num(h->e) : json_null());
    *bad |= hx_json_put(o, "rows_outside", json_integer(h->n_outside));
    *bad |= hx_json_put(o, "rows", json_integer(h->n_rows));
    for (uint32_t i = 0; i < h->n_states; ++i)
        *bad |= json_array_append_new(st, hidden_state_obj(&h->states[i], bad)) != 0;
    *bad |= hx_json_put(o, "states", st);
    return o;
}

static json_t *dump_obj(const hx_report *r, const hx_dump_report *d, int *bad)
{
    json_t *o = json_object(), *kl = json_object(), *pr = json_object();
    if (o == NULL || kl == NULL || pr == NULL) {
        *bad = 1;
        json_decref(o);
        json_decref(kl);
        json_decref(pr);
        return NULL;
    }
    *bad |= hx_json_put(o, "dump", json_string(d->name));
    *bad |= hx_json_put(o, "engine", json_string(d->engine));
    *bad |= hx_json_put(o, "settings", json_string(d->settings));
    *bad |= hx_json_put(o, "rows", json_string(d->rows));
    *bad |= hx_json_put(o, "dtype", json_string(d->dtype));
    *bad |= hx_json_put(o, "n_positions", json_integer(d->n_pos));
    *bad |= hx_json_put(kl, "n", json_integer(d->kl.n));
    *bad |= hx_json_put(kl, "mean", hx_json_num(d->kl.mean));
    *bad |= hx_json_put(kl, "max", hx_json_num(d->kl.max));
    *bad |= hx_json_put(kl, "p99_9", hx_json_num(d->kl.p999));
    *bad |= hx_json_put(kl, "p99", hx_json_num(d->kl.p99));
    *bad |= hx_json_put(kl, "p90", hx_json_num(d->kl.p90));
    *bad |= hx_json_put(kl, "median", hx_json_num(d->kl.median));
    *bad |= hx_json_put(o, "kl", kl);
    *bad |= hx_json_put(o, "same_top1", hx_json_num(d->kl.same_top1));
    for (size_t i = 0; i < d->n_profiles; ++i) {
        const hx_config_report *c = &r->configs[d->first_config + i];
        const char *at = strrchr(c->config, '@');
        json_t *p = json_object();
        *bad |= p == NULL;
        if (p == NULL)
            continue;
        *bad |= hx_json_put(p, "class", json_string(hx_class_name(c->cls)));
        *bad |= hx_json_put(p, "worst_ratio", hx_json_num(c->worst_ratio));
        *bad |= hx_json_put(p, "first_divergent", json_integer(c->first_divergent));
        *bad |= hx_json_put(p, "reason", json_string(c->reason));
        if (c->kv_first.checked)
            *bad |= hx_json_put(p, "kv_first_outside", kv_first_obj(&c->kv_first, bad));
        if (c->hidden_first.checked || c->hidden_first.no_envelope)
            *bad |= hx_json_put(p, "hidden_first_outside",
                                hidden_first_obj(&c->hidden_first, bad));
        *bad |= hx_json_put(pr, at ? at + 1 : c->config, p);
    }
    *bad |= hx_json_put(o, "profiles", pr);
    *bad |= hx_json_put(o, "explained_by", d->explained_by[0] ? json_string(d->explained_by) : json_null());
    *bad |= hx_json_put(o, "hidden_states", json_integer(d->n_hidden));
    *bad |= hx_json_put(o, "greedy_compared", json_boolean(d->has_generated));
    *bad |= hx_json_put(o, "greedy_first_divergent", json_integer(d->first_divergent));
    *bad |= hx_json_put(o, "greedy_positions_compared", json_integer(d->compared_to));
    if (d->first_divergent >= 0) {
        *bad |= hx_json_put(o, "greedy_departed_id", json_integer(d->departed_chose));
        *bad |= hx_json_put(o, "greedy_reference_id", json_integer(d->departed_ref_top));
        *bad |= hx_json_put(o, "greedy_reference_margin", hx_json_num(d->departed_margin));
        *bad |= hx_json_put(o, "greedy_departed_past_shared", json_boolean(d->departed_beyond));
    }
    if (d->topk.k > 0) {
        const hx_topk_summary *t = &d->topk;
        char note[1024];
        json_t *tk = json_object();
        *bad |= tk == NULL;
        if (tk == NULL)
            return o;
        hx_topk_note(note, sizeof note, t);
        *bad |= hx_json_put(tk, "k", json_integer(t->k));
        *bad |= hx_json_put(tk, "k_min", json_integer(t->k_min));
        *bad |= hx_json_put(tk, "n_vocab", json_integer(t->n_vocab));
        *bad |= hx_json_put(tk, "rows", json_integer(t->n_rows));
        *bad |= hx_json_put(tk, "rows_missing_ref_top1", json_integer(t->n_ref_top1_missing));
        *bad |= hx_json_put(tk, "rows_missing_a_ref_top_id", json_integer(t->n_ref_topk_missing));
        *bad |= hx_json_put(tk, "rows_within_e_at_k", json_integer(t->n_noise_at_k));
        *bad |= hx_json_put(tk, "mass_min", hx_json_num(t->mass_min));
        *bad |= hx_json_put(tk, "kl_lower_bound_max", hx_json_num(t->kl_lower_max));
        *bad |= hx_json_put(tk, "note", json_string(note));
        *bad |= hx_json_put(o, "topk", tk);
    }
    return o;
}

int hx_report_judge_json(void *obj, const hx_report *r)
{
    if (r->n_dumps == 0)
        return 0;
    json_t *o = obj, *ds = json_array(), *ps = json_array();
    int bad = ds == NULL || ps == NULL;
    for (size_t i = 0; i < r->n_dumps && !bad; ++i)
        bad |= json_array_append_new(ds, dump_obj(r, &r->dumps[i], &bad)) != 0;
    for (size_t i = 0; i < r->n_pairs && !bad; ++i) {
        const hx_dump_pair *p = &r->pairs[i];
        json_t *q = json_object();
        bad |= q == NULL;
        if (q == NULL)
            break;
        bad |= hx_json_put(q, "a", json_string(r->dumps[p->a].name));
        bad |= hx_json_put(q, "b", json_string(r->dumps[p->b].name));
        bad |= hx_json_put(q, "shared_positions", json_integer(p->n_shared));
        bad |= hx_json_put(q, "max_abs", hx_json_num(p->max_abs));
        bad |= hx_json_put(q, "first_apart", json_integer(p->first_apart));
        bad |= hx_json_put(q, "first_argmax_differs", json_integer(p->first_argmax));
        bad |= hx_json_put(q, "kl_mean_a", hx_json_num(p->kl_mean_a));
        bad |= hx_json_put(q, "kl_mean_b", hx_json_num(p->kl_mean_b));
        bad |= hx_json_put(q, "closer_to_reference", json_string(p->closer));
        bad |= json_array_append_new(ps, q) != 0;
    }
    if (bad) {
        json_decref(ds);
        json_decref(ps);
        return 1;
    }
    return hx_json_put(o, "dumps", ds) | hx_json_put(o, "pairs", ps);
}

/* The hidden states' err/E in forward order as a sub-item. */
static void hidden_states_md(FILE *f, const hx_hidden_first *h)
{
    char line[HX_HIDDEN_STATES_TEXT_MAX];
    hx_hidden_states_text(line, sizeof line, h);
    if (line[0])
        fprintf(f, "  - %s\n", line);
}

void hx_report_judge_md(FILE *f, const hx_report *r)
{
    if (r->n_dumps == 0)
        return;
    fputs("\n## Dumps\n\nKL(reference || dump) per logits row, llama-perplexity's statistics; "
          "class per precision profile (err/E in parentheses); explained by = the profile with "
          "the smallest logits envelope under which the dump passes.\n\n"
          "| dump | rows | KL mean | KL max | KL 99.9% | KL 99% | KL 90% | KL median | same top-1 "
          "| classes | greedy | explained by |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n", f);
    for (size_t i = 0; i < r->n_dumps; ++i) {
        const hx_dump_report *d = &r->dumps[i];
        fprintf(f, "| `%s` | %u %s %s | %.3g | %.3g | %.3g | %.3g | %.3g | %.3g | %.2f%% | ",
                d->name, (unsigned)d->n_pos, d->dtype, d->rows, d->kl.mean, d->kl.max,
                d->kl.p999, d->kl.p99, d->kl.p90, d->kl.median, 100.0 * d->kl.same_top1);
        for (size_t k = 0; k < d->n_profiles; ++k) {
            const hx_config_report *c = &r->configs[d->first_config + k];
            const char *at = strrchr(c->config, '@');
            fprintf(f, "%s%s %s (%.2g)", k ? ", " : "", at ? at + 1 : c->config,
                    hx_class_name(c->cls), c->worst_ratio);
        }
        if (!d->has_generated)
            fputs(" | - |", f);
        else if (d->first_divergent < 0)
            fprintf(f, " | same %lld |", (long long)d->compared_to);
        else
            fprintf(f, " | leaves @%lld (id %d, reference %d, margin %.3g%s) |",
                    (long long)d->first_divergent, (int)d->departed_chose,
                    (int)d->departed_ref_top, d->departed_margin,
                    d->departed_beyond ? ", past the shared ids" : "");
        fprintf(f, " %s |\n", d->explained_by[0] ? d->explained_by : "**none**");
    }
    bool kv_head = false;
    for (size_t i = 0; i < r->n_dumps; ++i) {
        const hx_dump_report *d = &r->dumps[i];
        for (size_t k = 0; k < d->n_profiles; ++k) {
            const hx_config_report *c = &r->configs[d->first_config + k];
            char kv[320], hid[320];
            hx_kv_first_text(kv, sizeof kv, &c->kv_first);
            hx_hidden_first_text(hid, sizeof hid, &c->hidden_first);
            if (kv[0] == '\0' && hid[0] == '\0')
                continue;
            if (!kv_head)
                fputs("\nK/V rows in forward order (layer, then position, K before V) and hidden "
                      "states (the embedding, then each layer's output; position by position), "
                      "each against its own envelope:\n\n", f);
            kv_head = true;
            if (kv[0])
                fprintf(f, "- `%s`: %s\n", c->config, kv);
            if (hid[0])
                fprintf(f, "- `%s`: %s\n", c->config, hid);
            hidden_states_md(f, &c->hidden_first);
        }
    }
    for (size_t i = 0; i < r->n_dumps; ++i)
        if (r->dumps[i].topk.k > 0) {
            char note[1024];
            hx_topk_note(note, sizeof note, &r->dumps[i].topk);
            fprintf(f, "\n`%s`: top-k rows (KL columns are lower bounds): %s.\n",
                    r->dumps[i].name, note);
        }
    if (r->n_pairs == 0)
        return;
    fputs("\n### Dumps against each other\n\n| a | b | shared rows | max abs | first apart | "
          "first argmax differs | KL mean a | KL mean b | closer |\n"
          "|---|---|---:|---:|---:|---:|---:|---:|---|\n", f);
    for (size_t i = 0; i < r->n_pairs; ++i) {
        const hx_dump_pair *p = &r->pairs[i];
        char apart[24] = "-", argmax[24] = "-"; /* -: nowhere */
        if (p->first_apart >= 0)
            snprintf(apart, sizeof apart, "%lld", (long long)p->first_apart);
        if (p->first_argmax >= 0)
            snprintf(argmax, sizeof argmax, "%lld", (long long)p->first_argmax);
        fprintf(f, "| `%s` | `%s` | %u | %.3g | %s | %s | %.3g | %.3g | %s |\n",
                r->dumps[p->a].name, r->dumps[p->b].name, (unsigned)p->n_shared, p->max_abs,
                apart, argmax, p->kl_mean_a, p->kl_mean_b, p->closer);
    }
}

void hx_topk_note(char *buf, size_t n, const hx_topk_summary *s)
{
    buf[0] = '\0';
    if (s->k == 0)
        return;
    const uint32_t rest = s->n_vocab > s->k ? s->n_vocab - s->k : 0;
    snprintf(buf, n,
             "k = %u of %u ids per row (fewest %u): decided are the argmax against the "
             "reference's, TIE_FLIP against FLIP (the reference's margin is exact), and DRIFT "
             "where the returned ids alone exceed E; undecided: the other %u ids of each row "
             "(NOISE at %u of %u rows holds at the returned ids only; full rows would decide "
             "DRIFT there), and KL beyond its lower bound (largest bound %.3g; returned mass "
             "as low as %.4f, a larger k raises the bound toward the KL)%s",
             (unsigned)s->k, (unsigned)s->n_vocab, (unsigned)s->k_min, (unsigned)rest,
             (unsigned)s->n_noise_at_k, (unsigned)s->n_rows, s->kl_lower_max, s->mass_min,
             s->n_ref_topk_missing > 0
                 ? "; some rows miss one of the reference's top ids, whose log-probabilities a "
                   "larger k would measure"
                 : "");
}
