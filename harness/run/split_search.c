/* split_search.c — a prompt's forecast and the near-tie generator (contract in
 * split_search.h). */
#include "run/split_search.h"

#include "judge/split_risk.h"
#include "model/metrics.h"
#include "run/runner.h"
#include "run/sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

int hx_search_forecast(hx_split_forecast *out, const hx_search_params *p, const int32_t *prompt,
                       uint32_t n, lm_err *err)
{
    hx_config c = {.backend = "naive", .step = 0, .threads = 1};
    if (p->profile != NULL && strcmp(p->profile, "f32") != 0)
        snprintf(c.profile, sizeof c.profile, "%s", p->profile);
    hx_sweep_params sp = {.model = p->model, .ref = p->ref, .model_label = p->model_label,
                          .case_name = "search",
                          .prompt = prompt, .n_prompt = n, .n_gen = p->n_gen, .configs = &c,
                          .n_configs = 1, .ensemble = p->ensemble, .cache_dir = p->cache_dir,
                          .jobs = p->jobs, .quiet = true, .log = p->log, .log_user = p->log_user,
                          .time_once = true};
    hx_sweep_result *r = NULL;
    int rc = hx_sweep_run_all(&r, &sp, err);
    if (rc == LM_OK && r->report->n_split != 1)
        rc = LM_FAIL(err, LM_E_INPUT, "no forecast for this prompt (no generated step)");
    if (rc == LM_OK)
        *out = r->report->split[0];
    hx_sweep_result_free(r);
    return rc;
}

/* The proxy: the smallest top-2 margin of naive:step=full:threads=1's float32 logits along its
 * own greedy path of n_gen steps (one greedy run, then the same path teacher-forced for the
 * rows). */
static int proxy_margin(double *out, const hx_search_params *p, const int32_t *prompt,
                        uint32_t n, lm_err *err)
{
    const hx_config c = {.backend = "naive", .step = 0, .threads = 1};
    hx_run_request rq = {.prompt = prompt, .n_prompt = n, .n_gen = p->n_gen, .time_once = true};
    hx_capture *g = NULL, *f = NULL;
    hx_run_stats st;
    int rc = hx_run_capture(&g, &st, p->model, &c, &rq, err);
    if (rc == LM_OK) {
        rq.forced = g->tokens + n;
        rq.n_forced = p->n_gen;
        rc = hx_run_capture(&f, &st, p->model, &c, &rq, err);
    }
    *out = (double)INFINITY;
    for (uint32_t j = 0; rc == LM_OK && j < p->n_gen; ++j) {
        const float *row = hx_capture_logits_at(f, n - 1 + j);
        int32_t top[2];
        if (row != NULL && hx_topk_f32(top, row, p->model->hp.n_vocab, 2) == 2 &&
            (double)row[top[0]] - (double)row[top[1]] < *out)
            *out = (double)row[top[0]] - (double)row[top[1]];
    }
    hx_capture_free(g);
    hx_capture_free(f);
    return rc;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

int hx_search_generate(int32_t **out, hx_split_forecast *f, bool *reached,
                       const hx_search_params *p, const int32_t *seed, uint32_t n,
                       double threshold, uint32_t max_rounds, uint64_t rng_seed, lm_err *err)
{
    *out = NULL;
    *reached = false;
    if (n < 2)
        return LM_FAIL(err, LM_E_INPUT, "the generator needs a prompt of at least 2 tokens");
    const uint32_t nv = p->model->hp.n_vocab;
    if (nv <= 3)
        return LM_FAIL(err, LM_E_INPUT, "vocabulary of %u tokens: nothing to edit", (unsigned)nv);
    int32_t *cur = malloc(n * sizeof *cur), *cand = malloc(n * sizeof *cand);
    if (cur == NULL || cand == NULL) {
        free(cur);
        free(cand);
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    memcpy(cur, seed, n * sizeof *cur);
    double best;
    int rc = proxy_margin(&best, p, cur, n, err);
    bool exact_done = false;
    for (uint32_t round = 0; rc == LM_OK && round <= max_rounds; ++round) {
        if (best < threshold || round == max_rounds) {
            /* The exact forecast decides. */
            if ((rc = hx_search_forecast(f, p, cur, n, err)) != LM_OK)
                break;
            exact_done = true;
            if (f->min_margin < threshold) {
                *reached = true;
                break;
            }
            if (round == max_rounds)
                break;
            best = f->min_margin; /* the proxy must now beat the exact margin */
        }
        const uint32_t at = n - 1 - (round % (n - 1));
        int32_t keep = cur[at];
        for (uint32_t c = 0; c < HX_SEARCH_CANDIDATES && rc == LM_OK; ++c) {
            memcpy(cand, cur, n * sizeof *cand);
            cand[at] = 3 + (int32_t)(splitmix(&rng_seed) % (nv - 3));
            double m;
            if ((rc = proxy_margin(&m, p, cand, n, err)) == LM_OK && m < best) {
                best = m;
                keep = cand[at];
            }
        }
        cur[at] = keep;
    }
    free(cand);
    if (rc == LM_OK && !exact_done)
        rc = hx_search_forecast(f, p, cur, n, err);
    if (rc != LM_OK) {
        free(cur);
        return rc;
    }
    *out = cur;
    return LM_OK;
}
