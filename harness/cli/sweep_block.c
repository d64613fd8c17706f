/* sweep_block.c — the block-sampler amplification table of `kvdrift sweep` (sweep_block.h). */
#include "sweep_block.h"
#include "kvd_util.h"

#include "cli_util.h"
#include "config.h"
#include "kvd_spec.h"

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
        else
            return LM_FAIL(err, LM_E_INPUT, "--block-criterion '%s': expected confidence or "
                           "entropy", arg);
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

static int run_one(outcome *o, const lm_model *m, const hx_config *c, const int32_t *prompt,
                   uint32_t n_prompt, const lm_block_params *bp, lm_err *err)
{
    const uint32_t n = bp->block * bp->n_blocks;
    memset(o, 0, sizeof *o);
    if (c->attn == HX_ATTN_STREAM || c->rot_max != 0) {
        o->skip = "needs dense attention and the plain cache";
        return LM_OK;
    }
    o->tok = malloc(n * sizeof *o->tok);
    o->iter = malloc(n * sizeof *o->iter);
    o->ar = malloc(n * sizeof *o->ar);
    o->hist = malloc(n * sizeof *o->hist);
    if (!o->tok || !o->iter || !o->ar || !o->hist)
        return LM_FAIL(err, LM_E_NOMEM, "block sampler: out of memory");
    const lm_ctx_params cp = {.backend = c->backend, .n_threads = (int)c->threads,
                              .n_ctx = n_prompt + n};
    lm_ctx *ctx = NULL;
    int rc = lm_ctx_create(&ctx, m, &cp, err);
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
    if (rc == LM_E_INPUT && strstr(err->msg, "bidirectional") != NULL) {
        o->skip = "the model has windows or sinks (bidirectional chunks need dense attention)";
        return LM_OK;
    }
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

/* What the rows add up to, for the verdict. */
typedef struct block_tally {
    size_t n_cmp, n_blk, n_ar, n_bad_prefill; /* compared; block / greedy differ; prefill fails */
    double worst_ratio, blk_gap, ar_gap;
} block_tally;

/* Runs configuration i, and its one-chunk baseline when it is not one itself. */
static int run_all(outcome *out, outcome *base, const lm_model *m, const hx_config *configs,
                   size_t n_configs, const int32_t *prompt, uint32_t n_prompt,
                   const lm_block_params *bp, lm_err *err)
{
    int rc = LM_OK;
    for (size_t i = 0; i < n_configs && rc == LM_OK; ++i) {
        rc = run_one(&out[i], m, &configs[i], prompt, n_prompt, bp, err);
        const hx_config bc = hx_config_baseline(&configs[i]);
        if (rc == LM_OK && !hx_config_equal(&bc, &configs[i]))
            rc = run_one(&base[i], m, &bc, prompt, n_prompt, bp, err);
    }
    return rc;
}

static void print_head(FILE *f, const lm_block_params *bp)
{
    const bool ent = bp->criterion == LM_BLOCK_ENTROPY;
    fprintf(f, "\nblock sampler (%u block(s) of %u, mask token %d, up to %u iterations, "
            "commit when %s %s %g) and greedy decoding of %u tokens, each against the same "
            "backend's one-chunk run\n\n", bp->n_blocks, bp->block, (int)bp->mask_id,
            bp->max_iters, ent ? "entropy" : "confidence", ent ? "<=" : ">=", bp->threshold,
            bp->block * bp->n_blocks);
    fprintf(f, "%-32s %-9s %8s %5s %9s %9s %-9s %-14s %9s %-7s  %s\n", "config", "prefill",
            "err/E", "iters", "blk gap", "commit", "block", "first diff", "grd gap", "greedy",
            "block completion");
}

/* One configuration's row: o against its baseline b (b == o: it is its own baseline). */
static void print_row(FILE *f, const lm_model *m, const char *name, const hx_config_report *cr,
                      const outcome *o, const outcome *b, const lm_block_params *bp,
                      block_tally *t)
{
    const uint32_t n = bp->block * bp->n_blocks;
    const bool own = b == o;
    char first[32] = "-", txt[64], gr[16] = "same";
    uint32_t bi = 0, it = 0, pos = 0;
    const bool differs = first_commit_diff(o, b, bp, &bi, &it, &pos);
    if (differs)
        snprintf(first, sizeof first, "b%u it%u pos%u", bi, it, pos);
    int64_t ar_div = -1;
    for (uint32_t k = 0; k < n && ar_div < 0; ++k)
        if (o->ar[k] != b->ar[k])
            ar_div = k;
    if (ar_div >= 0)
        snprintf(gr, sizeof gr, "at %lld", (long long)ar_div);
    const bool tok_differ = memcmp(o->tok, b->tok, n * sizeof *b->tok) != 0;
    text_of(txt, sizeof txt, m, o->tok, n);
    fprintf(f, "%-32s %-9s %8.3g %5u %9.3g %9.3g %-9s %-14s %9.3g %-7s  %s\n", name,
            hx_class_name(cr->cls), cr->worst_ratio, o->n_iters, o->blk_gap, o->commit_gap,
            own ? "(itself)" : tok_differ ? "DIFFERS" : differs ? "order" : "same", first,
            o->ar_gap, gr, txt);
    if (!own) {
        ++t->n_cmp;
        t->n_blk += tok_differ;
        t->n_ar += ar_div >= 0;
    }
    t->n_bad_prefill += hx_class_fails(cr->cls);
    t->blk_gap = o->blk_gap < t->blk_gap ? o->blk_gap : t->blk_gap;
    t->ar_gap = o->ar_gap < t->ar_gap ? o->ar_gap : t->ar_gap;
    t->worst_ratio = cr->worst_ratio > t->worst_ratio ? cr->worst_ratio : t->worst_ratio;
}

static void print_verdict(FILE *f, const block_tally *t)
{
    fprintf(f, "\n(block: DIFFERS = other tokens than the one-chunk run, order = same tokens "
            "committed at other iterations; first diff = block, iteration, position of the "
            "first differing commit; greedy: first differing generated index; blk gap / grd "
            "gap: smallest top-1 minus top-2 logit of any block-sampler / greedy decision, "
            "commit: smallest probability margin of a commit decision (to the threshold, or "
            "between the two best positions): rounding flips a decision only when it moves "
            "the logits by about that much)\n");
    if (t->n_bad_prefill == 0 && t->n_blk > 0)
        fprintf(f, "verdict: the engine is fine (NOISE: every prefill within the envelope, "
                "worst err/E %.3g); the sampler amplifies rounding (%zu of %zu completions "
                "differ); greedy decoding: %zu of %zu differ\n", t->worst_ratio, t->n_blk,
                t->n_cmp, t->n_ar, t->n_cmp);
    else if (t->n_bad_prefill == 0)
        fprintf(f, "verdict: the engine is fine (NOISE: every prefill within the envelope, "
                "worst err/E %.3g); the sampler did not amplify rounding here (0 of %zu "
                "completions differ; its closest decision was %.3g logits from flipping, "
                "greedy's %.3g); greedy decoding: %zu of %zu differ\n", t->worst_ratio,
                t->n_cmp, t->blk_gap, t->ar_gap, t->n_ar, t->n_cmp);
    else
        fprintf(f, "verdict: the engine is NOT fine (%zu configurations fail the prefill "
                "check); block sampler: %zu of %zu completions differ; greedy: %zu of %zu\n",
                t->n_bad_prefill, t->n_blk, t->n_cmp, t->n_ar, t->n_cmp);
}

int hx_block_check_print(FILE *f, const lm_model *m, const int32_t *prompt, uint32_t n_prompt,
                         const hx_config *configs, size_t n_configs, const hx_report *report,
                         const hx_block_opts *o, lm_err *err)
{
    lm_block_params bp = o->p;
    if (!o->mask_set)
        bp.mask_id = find_mask(m);
    outcome *out = calloc(n_configs, sizeof *out);
    outcome *base = calloc(n_configs, sizeof *base);
    int rc = out && base ? run_all(out, base, m, configs, n_configs, prompt, n_prompt, &bp, err)
                         : LM_FAIL(err, LM_E_NOMEM, "block sampler: out of memory");
    block_tally t = {.blk_gap = INFINITY, .ar_gap = INFINITY};
    if (rc == LM_OK)
        print_head(f, &bp);
    for (size_t i = 0; i < n_configs && rc == LM_OK; ++i) {
        char name[HX_CONFIG_STR_MAX];
        hx_config_format(name, sizeof name, &configs[i]);
        const hx_config_report *cr = &report->configs[i];
        const outcome *b = base[i].tok == NULL && out[i].skip == NULL ? &out[i] : &base[i];
        if (out[i].skip != NULL || b->skip != NULL)
            fprintf(f, "%-32s %-9s %8.3g %5s %9s %9s %-9s %-14s %9s %-7s  skipped: %s\n", name,
                    hx_class_name(cr->cls), cr->worst_ratio, "-", "-", "-", "-", "-", "-", "-",
                    out[i].skip ? out[i].skip : b->skip);
        else
            print_row(f, m, name, cr, &out[i], b, &bp, &t);
    }
    if (rc == LM_OK)
        print_verdict(f, &t);
    for (size_t i = 0; out && base && i < n_configs; ++i) {
        outcome_free(&out[i]);
        outcome_free(&base[i]);
    }
    free(out);
    free(base);
    return rc;
}
