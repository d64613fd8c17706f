/* block_sweep.c — the block-sampler amplification table of `kvdrift sweep` (block_sweep.h). */
#include "run/block_sweep.h"

#include "kvd_util.h"
#include "run/drive.h"

#include "model/config.h"
#include "kvd_speculative.h"
#include "run/runner.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

void hx_block_opts_init(hx_block_opts *o)
{
    memset(o, 0, sizeof *o);
    o->p = (lm_block_params){.block = 8, .n_blocks = 2, .max_iters = 8,
                             .criterion = LM_BLOCK_CONFIDENCE, .threshold = 0.9};
}

int hx_block_opts_set(hx_block_opts *o, int opt, const char *arg, lm_err *err)
{
    uint32_t v = 0;
    switch (opt) {
    case HX_OPT_SAMPLER:
        if (strcmp(arg, "block") != 0 && strcmp(arg, "greedy") != 0)
            return LM_FAIL(err, LM_E_INPUT, "--sampler '%s': expected greedy or block", arg);
        o->on = strcmp(arg, "block") == 0;
        return LM_OK;
    case HX_OPT_BLOCK_SIZE:
    case HX_OPT_BLOCKS:
    case HX_OPT_BLOCK_ITERS:
        if (!lm_parse_u32z(arg, 1, 4096, &v))
            return LM_FAIL(err, LM_E_INPUT, "'%s': expected an integer in 1..4096 for a block "
                           "option", arg);
        *(opt == HX_OPT_BLOCK_SIZE ? &o->p.block
                                   : opt == HX_OPT_BLOCKS ? &o->p.n_blocks : &o->p.max_iters) = v;
        return LM_OK;
    case HX_OPT_BLOCK_THRESHOLD: {
        char *end;
        errno = 0;
        const double t = strtod(arg, &end);
        if (*arg == '\0' || *end != '\0' || errno != 0 || !(t >= 0.0) || t > 1e6)
            return LM_FAIL(err, LM_E_INPUT, "--block-threshold '%s': expected a number >= 0", arg);
        o->p.threshold = t;
        return LM_OK;
    }
    case HX_OPT_BLOCK_CRITERION:
        if (strcmp(arg, "confidence") == 0)
            o->p.criterion = LM_BLOCK_CONFIDENCE;
        else if (strcmp(arg, "entropy") == 0)
            o->p.criterion = LM_BLOCK_ENTROPY;
        else if (strcmp(arg, "low-confidence") == 0)
            o->p.criterion = LM_BLOCK_LOW_CONFIDENCE;
        else
            return LM_FAIL(err, LM_E_INPUT, "--block-criterion '%s': expected confidence, "
                           "entropy or low-confidence", arg);
        return LM_OK;
    case HX_OPT_MASK_TOKEN:
        if (!lm_parse_u32z(arg, 0, INT32_MAX, &v))
            return LM_FAIL(err, LM_E_INPUT, "--mask-token '%s': expected a token id", arg);
        o->p.mask_id = (int32_t)v;
        o->mask_set = true;
        return LM_OK;
    default: return LM_FAIL(err, LM_E_INPUT, "block options: unknown option %d", opt);
    }
}

/* The vocabulary's "<mask>" control token, else 0. */
static int32_t find_mask(const lm_model *m)
{
    int32_t *ids = NULL;
    size_t n = 0;
    lm_err e = {0};
    int32_t id = 0;
    if (m->vocab != NULL &&
        lm_tokenize_ex(m->vocab, "<mask>", 6, false, true, &ids, &n, &e) == LM_OK && n == 1)
        id = ids[0];
    free(ids);
    return id;
}

typedef struct outcome {
    int32_t *tok;     /* [N] block sampler completion */
    uint32_t *iter;   /* [N] */
    int32_t *ar;      /* [N] greedy completion */
    uint64_t *hist;   /* [N] (greedy trace's, unused) */
    uint32_t n_iters;
    double blk_gap, commit_gap; /* lm_block_trace min_logit_gap, min_commit_gap */
    double ar_gap;              /* greedy: smallest top-1 minus top-2 logit over its steps */
    const char *skip; /* why this configuration cannot run the sampler, or NULL */
} outcome;

static void outcome_free(outcome *o)
{
    free(o->tok);
    free(o->iter);
    free(o->ar);
    free(o->hist);
}

/* The CONFIG keys the block sampler honours. */
#define BLOCK_KEYS (HX_KEYS_PLAIN & ~(HX_KEY_TURN | HX_KEY_PREFIX | HX_KEY_BATCH))

static int run_one(outcome *o, const lm_model *m, const hx_config *c, const int32_t *prompt,
                   uint32_t n_prompt, const lm_block_params *bp, lm_err *err)
{
    const uint32_t n = bp->block * bp->n_blocks;
    memset(o, 0, sizeof *o);
    if (c->attn == HX_ATTN_STREAM || c->rot_max != 0) {
        o->skip = "needs dense attention and the plain cache";
        return LM_OK;
    }
    lm_err why = {0};
    /* lm_block_generate prefills in chunks of step itself */
    if (hx_drive_check(c, BLOCK_KEYS, "block sampler", &why) != LM_OK) {
        o->skip = "a two-turn schedule, a reused prefix or co-resident sequences are not a "
                  "block sampler's";
        return LM_OK;
    }
    o->tok = malloc(n * sizeof *o->tok);
    o->iter = malloc(n * sizeof *o->iter);
    o->ar = malloc(n * sizeof *o->ar);
    o->hist = malloc(n * sizeof *o->hist);
    if (!o->tok || !o->iter || !o->ar || !o->hist)
        return LM_FAIL(err, LM_E_NOMEM, "block sampler: out of memory");
    lm_ctx *ctx = NULL;
    int rc = hx_drive_open_ctx(&ctx, m, c, n_prompt + n, 0, err);
    if (rc == LM_OK && lm_ctx_attn_variants(ctx)) {
        lm_ctx_free(ctx);
        o->skip = "the model has windows or sinks (bidirectional chunks need dense attention)";
        return LM_OK;
    }
    lm_block_params p = *bp;
    p.step = c->step;
    lm_block_trace tr = {.tokens = o->tok, .iter = o->iter};
    if (rc == LM_OK)
        rc = lm_block_generate(ctx, prompt, n_prompt, &p, &tr, err);
    o->n_iters = tr.n_iters;
    o->blk_gap = tr.min_logit_gap;
    o->commit_gap = tr.min_commit_gap;
    const uint32_t nv = m->hp.n_vocab;
    float *rows = rc == LM_OK ? malloc((size_t)n * nv * sizeof *rows) : NULL;
    if (rc == LM_OK && rows == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "block sampler: out of memory");
    if (rc == LM_OK) {
        lm_ctx_reset(ctx);
        const lm_spec_params sp = {.step = c->step, .n_gen = n,
                                   .pen = {.repeat_penalty = 1.0f, .repeat_last_n = 0}};
        lm_spec_trace st = {.tokens = o->ar, .hist_hash = o->hist, .logits = rows};
        rc = lm_spec_generate(ctx, NULL, prompt, n_prompt, &sp, &st, err);
    }
    o->ar_gap = INFINITY;
    for (uint32_t k = 0; rc == LM_OK && k < n; ++k) {
        const float *r = rows + (size_t)k * nv;
        const int32_t t = o->ar[k];
        for (uint32_t i = 0; i < nv; ++i)
            if ((int32_t)i != t && (double)r[t] - (double)r[i] < o->ar_gap)
                o->ar_gap = (double)r[t] - (double)r[i];
    }
    free(rows);
    lm_ctx_free(ctx);
    return rc;
}

/* First differing commit of a vs b: smallest (block, iteration, position); false if equal. */
static bool first_commit_diff(const outcome *a, const outcome *b, const lm_block_params *p,
                              uint32_t *blk, uint32_t *it, uint32_t *pos)
{
    bool found = false;
    for (uint32_t i = 0; i < p->block * p->n_blocks; ++i) {
        if (a->tok[i] == b->tok[i] && a->iter[i] == b->iter[i])
            continue;
        const uint32_t bi = i / p->block;
        const uint32_t t = a->iter[i] < b->iter[i] ? a->iter[i] : b->iter[i];
        if (!found || bi < *blk || (bi == *blk && t < *it)) {
            *blk = bi;
            *it = t;
            *pos = i;
            found = true;
        }
    }
    return found;
}

static void text_of(char *buf, size_t cap, const lm_model *m, const int32_t *tok, uint32_t n)
{
    char *s = NULL;
    lm_err e = {0};
    buf[0] = '\0';
    if (m->vocab == NULL || lm_detokenize(m->vocab, tok, n, &s, &e) != LM_OK) {
        snprintf(buf, cap, "%d %d %d ...", tok[0], n > 1 ? tok[1] : -1, n > 2 ? tok[2] : -1);
        return;
    }
    size_t k = 0;
    for (const char *q = s; *q && k + 1 < cap; ++q)
        buf[k++] = (*q == '\n' || *q == '\t' || *q == '|') ? ' ' : *q;
    buf[k] = '\0';
    free(s);
}

/* The row of configuration c (its outcome o, its baseline's b, NULL when it is its own). */
static void fill_row(hx_block_report_row *w, const lm_model *m, const hx_config *c,
                     const hx_config_report *cr, const outcome *o, const outcome *b,
                     const lm_block_params *bp)
{
    const uint32_t n = bp->block * bp->n_blocks;
    memset(w, 0, sizeof *w);
    hx_config_format(w->config, sizeof w->config, c);
    w->prefill_cls = cr->cls;
    w->prefill_ratio = cr->worst_ratio;
    w->first_block = w->first_iter = w->first_pos = w->greedy_first = -1;
    if (o->skip != NULL || (b != NULL && b->skip != NULL)) {
        snprintf(w->skipped, sizeof w->skipped, "%s", o->skip ? o->skip : b->skip);
        return;
    }
    w->is_baseline = b == NULL;
    w->n_iters = o->n_iters;
    w->blk_gap = o->blk_gap;
    w->commit_gap = o->commit_gap;
    w->greedy_gap = o->ar_gap;
    text_of(w->completion, sizeof w->completion, m, o->tok, n);
    if (b == NULL)
        return;
    uint32_t bi = 0, it = 0, pos = 0;
    w->order_differs = first_commit_diff(o, b, bp, &bi, &it, &pos);
    if (w->order_differs) {
        w->first_block = bi;
        w->first_iter = it;
        w->first_pos = pos;
    }
    w->tokens_differ = memcmp(o->tok, b->tok, n * sizeof *b->tok) != 0;
    w->order_differs = w->order_differs && !w->tokens_differ;
    for (uint32_t k = 0; k < n && w->greedy_first < 0; ++k)
        if (o->ar[k] != b->ar[k])
            w->greedy_first = k;
}

/* The totals and the one-line conclusion of out's rows. */
static void summarize(hx_block_report *out)
{
    out->worst_ratio = 0.0;
    out->min_blk_gap = out->min_greedy_gap = INFINITY;
    hx_class worst = HX_EXACT;
    for (size_t i = 0; i < out->n_rows; ++i) {
        const hx_block_report_row *w = &out->rows[i];
        if (w->skipped[0])
            continue;
        if (!w->is_baseline) {
            ++out->n_compared;
            out->n_block_differ += w->tokens_differ;
            out->n_greedy_differ += w->greedy_first >= 0;
        }
        out->n_prefill_fail += hx_class_fails(w->prefill_cls);
        worst = hx_class_worst(worst, w->prefill_cls);
        out->min_blk_gap = fmin(out->min_blk_gap, w->blk_gap);
        out->min_greedy_gap = fmin(out->min_greedy_gap, w->greedy_gap);
        out->worst_ratio = fmax(out->worst_ratio, w->prefill_ratio);
    }
    char fine[96]; /* what "the engine is fine" rests on */
    snprintf(fine, sizeof fine, "%s: every prefill passes, worst class %s, worst err/E %.3g",
             worst <= HX_NOISE ? "NOISE" : hx_class_name(worst), hx_class_name(worst),
             out->worst_ratio);
    if (out->n_prefill_fail > 0)
        snprintf(out->verdict, sizeof out->verdict, "the engine is NOT fine (%zu configurations "
                 "fail the prefill check); block sampler: %zu of %zu completions differ; greedy: "
                 "%zu of %zu", out->n_prefill_fail, out->n_block_differ, out->n_compared,
                 out->n_greedy_differ, out->n_compared);
    else if (out->n_block_differ > 0)
        snprintf(out->verdict, sizeof out->verdict, "the engine is fine (%s); the sampler "
                 "amplifies rounding (%zu of %zu completions differ); greedy decoding: %zu of %zu "
                 "differ", fine, out->n_block_differ, out->n_compared, out->n_greedy_differ,
                 out->n_compared);
    else
        snprintf(out->verdict, sizeof out->verdict, "the engine is fine (%s); the sampler did "
                 "not amplify rounding here (0 of %zu completions differ; its closest decision "
                 "was %.3g logits from flipping, greedy's %.3g); greedy decoding: %zu of %zu "
                 "differ", fine, out->n_compared, out->min_blk_gap, out->min_greedy_gap,
                 out->n_greedy_differ, out->n_compared);
}

int hx_block_check_run(hx_report *report, const lm_model *m, const int32_t *prompt,
                       uint32_t n_prompt, const hx_config *configs, size_t n_configs,
                       const hx_block_opts *o, lm_err *err)
{
    hx_block_report *out = &report->block;
    memset(out, 0, sizeof *out);
    lm_block_params bp = o->p;
    if (!o->mask_set)
        bp.mask_id = find_mask(m);
    out->run = true;
    out->block = bp.block;
    out->n_blocks = bp.n_blocks;
    out->max_iters = bp.max_iters;
    static const char *const crit[] = {"confidence", "entropy", "low-confidence"};
    snprintf(out->criterion, sizeof out->criterion, "%s", crit[bp.criterion]);
    if (bp.criterion == LM_BLOCK_LOW_CONFIDENCE)
        snprintf(out->rule, sizeof out->rule, "the ceil(masked / iterations left) most confident "
                 "positions per iteration");
    else
        snprintf(out->rule, sizeof out->rule, "%s %s %g", crit[bp.criterion],
                 bp.criterion == LM_BLOCK_ENTROPY ? "<=" : ">=", bp.threshold);
    out->threshold = bp.threshold;
    out->mask_id = bp.mask_id;
    out->rows = calloc(n_configs + 1, sizeof *out->rows);
    outcome *res = calloc(n_configs, sizeof *res);
    outcome *base = calloc(n_configs, sizeof *base);
    int rc = LM_OK;
    if (out->rows == NULL || res == NULL || base == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "block sampler: out of memory");
    for (size_t i = 0; i < n_configs && rc == LM_OK; ++i) {
        rc = run_one(&res[i], m, &configs[i], prompt, n_prompt, &bp, err);
        const hx_config bc = hx_config_baseline(&configs[i]);
        if (rc == LM_OK && !hx_config_equal(&bc, &configs[i]))
            rc = run_one(&base[i], m, &bc, prompt, n_prompt, &bp, err);
    }
    for (size_t i = 0; i < n_configs && rc == LM_OK; ++i) {
        const bool own = base[i].tok == NULL && base[i].skip == NULL;
        fill_row(&out->rows[out->n_rows++], m, &configs[i], &report->configs[i], &res[i],
                 own ? NULL : &base[i], &bp);
    }
    if (rc == LM_OK)
        summarize(out);
    for (size_t i = 0; i < n_configs && res != NULL && base != NULL; ++i) {
        outcome_free(&res[i]);
        outcome_free(&base[i]);
    }
    free(res);
    free(base);
    return rc;
}

void hx_block_print(FILE *f, const hx_block_report *b)
{
    const uint32_t n = b->block * b->n_blocks;
    fprintf(f, "\nblock sampler (%u block(s) of %u, mask token %d, up to %u iterations, commit "
            "%s) and greedy decoding of %u tokens, each against the same backend's one-chunk "
            "run\n\n", b->n_blocks, b->block, (int)b->mask_id, b->max_iters, b->rule, n);
    fprintf(f, "%-32s %-9s %8s %5s %9s %9s %-9s %-14s %9s %-7s  %s\n", "config", "prefill",
            "err/E", "iters", "blk gap", "commit", "block", "first diff", "grd gap", "greedy",
            "block completion");
    for (size_t i = 0; i < b->n_rows; ++i) {
        const hx_block_report_row *w = &b->rows[i];
        if (w->skipped[0]) {
            fprintf(f, "%-32s %-9s %8.3g %5s %9s %9s %-9s %-14s %9s %-7s  skipped: %s\n",
                    w->config, hx_class_name(w->prefill_cls), w->prefill_ratio, "-", "-", "-",
                    "-", "-", "-", "-", w->skipped);
            continue;
        }
        hx_block_cells c;
        hx_block_row_cells(&c, w, false);
        fprintf(f, "%-32s %-9s %8.3g %5u %9.3g %9.3g %-9s %-14s %9.3g %-7s  %.60s\n", w->config,
                hx_class_name(w->prefill_cls), w->prefill_ratio, w->n_iters, w->blk_gap,
                w->commit_gap, c.block, c.first, w->greedy_gap, c.greedy, w->completion);
    }
    fprintf(f, "\n(block: DIFFERS = other tokens than the one-chunk run, order = same tokens "
            "committed at other iterations; first diff = block, iteration, position of the first "
            "differing commit; greedy: first differing generated index; blk gap / grd gap: "
            "smallest top-1 minus top-2 logit of any block-sampler / greedy decision, commit: "
            "smallest probability margin of a commit decision (to the threshold, or between the "
            "two best positions): rounding flips a decision only when it moves the logits by "
            "about that much)\nverdict: %s\n", b->verdict);
}
