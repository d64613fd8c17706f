/* bench_sweep.c — the sweep's overhead over the work it cannot avoid.
 *
 * usage: bench_sweep OUTDIR [REPS]
 * On stories260K (skipped cleanly when absent), prompt "Once upon a time, there was a little
 * girl named Lily.", -n 32, steps 1,2,3,5,8,16,32,64,full x backends naive,blas (threads 1):
 *   sweep  = wall time of hx_sweep_run_all with an empty cache (so it computes the reference
 *            and the ensemble, as a first sweep does);
 *   bare   = in the same process, the sum of the bare engine runs that sweep contains, each
 *            lm_ctx_create + lm_prefill at its step + greedy decode of n_gen tokens with
 *            lm_forward, no capture, no hashing: the 18 configurations, the teacher-path run
 *            (naive:step=full) and the 8 naive-sr ensemble members;
 *          + one reference computation (ref_compute on prompt + path, uncached, same threads).
 *   ratio  = sweep / bare; the target is <= 1.10 (the harness's own overhead stays small).
 * The result is checked before it is timed (a sweep must classify every configuration, no
 * false alarm, every naive configuration EXACT); each figure is the median of REPS repeats
 * (default 3). Prints a table, appends TSV to OUTDIR/sweep.tsv; never fails on speed. */
#include "kvd_engine.h"
#include "kvd_ref.h"
#include "run/sweep.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_GEN 32u
static const char prompt_text[] = "Once upon a time, there was a little girl named Lily.";
static const uint32_t steps[] = {1, 2, 3, 5, 8, 16, 32, 64, 0};
static const char backends[][16] = {"naive", "blas"};

#define PROG "bench_sweep"

/* One bare run: prefill at step, then n_gen greedy tokens (n_gen - 1 forward calls, as the
 * runner does: the last token's logits are never needed). Returns wall seconds. */
static double bare_run(const lm_model *m, const char *backend, uint32_t threads, uint32_t step,
                       const int32_t *prompt, uint32_t n_prompt)
{
    lm_err err = {0};
    lm_ctx *ctx = NULL;
    float *logits = malloc(m->hp.n_vocab * sizeof *logits);
    if (logits == NULL) {
        fprintf(stderr, "bench_sweep: out of memory\n");
        exit(2);
    }
    double t0 = lm_now_s();
    lm_ctx_params cp = {.backend = backend, .n_threads = (int)threads, .n_ctx = n_prompt + N_GEN};
    if (lm_ctx_create(&ctx, m, &cp, &err) != LM_OK ||
        lm_prefill(ctx, prompt, n_prompt, step, logits, &err) != LM_OK)
        bu_die(PROG, backend, &err);
    for (uint32_t j = 0; j + 1 < N_GEN; ++j) {
        int32_t tok = lm_argmax(logits, m->hp.n_vocab);
        if (lm_forward(ctx, &tok, 1, LM_LOGITS_LAST, logits, &err) != LM_OK)
            bu_die(PROG, backend, &err);
    }
    lm_ctx_free(ctx);
    double t = lm_now_s() - t0;
    free(logits);
    return t;
}

static int bench(bu_stories *s)
{
    const lm_model *m = s->m;
    const int32_t *prompt = s->prompt;
    const int reps = s->reps;
    const size_t np = s->n_prompt;
    lm_err err = {0};
    hx_config *cfgs = NULL;
    size_t nc = 0;
    if (hx_sweep_cross(&cfgs, &nc, backends, 2, steps, 9, NULL, 0, NULL, 0, &err) != LM_OK)
        bu_die(PROG, "configs", &err);
    for (size_t i = 0; i < nc; ++i)
        cfgs[i].threads = 1;
    hx_sweep_params p = {.model = m, .ref = s->r, .model_label = s->path, .prompt = prompt,
                         .n_prompt = (uint32_t)np, .n_gen = N_GEN, .configs = cfgs,
                         .n_configs = nc, .quiet = true};
    const uint32_t n_ens = HX_SWEEP_DEFAULT_ENSEMBLE;

    /* Check first: the sweep must do its job before its speed means anything. */
    char cache[1200];
    bu_fresh_dir(PROG, cache, sizeof cache, s->scratch, "rep", 0);
    p.cache_dir = cache;
    hx_sweep_result *r = NULL;
    if (hx_sweep_run_all(&r, &p, &err) != LM_OK)
        bu_die(PROG, "sweep", &err);
    size_t n_fail = 0, n_naive_not_exact = 0;
    for (size_t i = 0; i < r->report->n_configs; ++i) {
        n_fail += hx_class_fails(r->report->configs[i].cls);
        n_naive_not_exact += (lm_backend_flags(r->runs[i].cfg.backend) & LM_BE_CHUNK_INVARIANT) &&
                             r->report->configs[i].cls != HX_EXACT;
    }
    int32_t *all = malloc((np + N_GEN) * sizeof *all);
    if (all == NULL)
        return 2;
    memcpy(all, prompt, np * sizeof *all);
    memcpy(all + np, r->path, N_GEN * sizeof *all);
    hx_sweep_result_free(r);
    if (n_fail || n_naive_not_exact) {
        fprintf(stderr, "bench_sweep: CHECK FAILED: %zu failing configurations, %zu naive not "
                        "EXACT\n", n_fail, n_naive_not_exact);
        return 1;
    }
    printf("bench_sweep: check passed (%zu configurations, 0 false alarms, naive all EXACT)\n", nc);

    double *t_sweep = calloc((size_t)reps, sizeof(double)), *t_eng = calloc((size_t)reps, sizeof(double));
    double *t_ref = calloc((size_t)reps, sizeof(double)), *t_ens = calloc((size_t)reps, sizeof(double));
    double *t_bare = calloc((size_t)reps, sizeof(double)), *ratio = calloc((size_t)reps, sizeof(double));
    if (!t_sweep || !t_eng || !t_ref || !t_ens || !t_bare || !ratio)
        return 2;
    ref_request rq = {.tokens = all, .n_tokens = (uint32_t)np + N_GEN, .n_prompt = (uint32_t)np};
    for (int rep = 0; rep < reps; ++rep) {
        bu_fresh_dir(PROG, cache, sizeof cache, s->scratch, "rep", rep + 1);
        p.cache_dir = cache;
        double t0 = lm_now_s();
        if (hx_sweep_run_all(&r, &p, &err) != LM_OK)
            bu_die(PROG, "sweep", &err);
        t_sweep[rep] = lm_now_s() - t0;
        hx_sweep_result_free(r);

        double eng = bare_run(m, "naive", 1, 0, prompt, (uint32_t)np); /* the teacher path */
        for (size_t i = 0; i < nc; ++i)
            eng += bare_run(m, cfgs[i].backend, cfgs[i].threads, cfgs[i].step, prompt,
                            (uint32_t)np);
        double ens = 0.0;
        for (uint32_t i = 0; i < n_ens; ++i) {
            char name[LM_SR_NAME_MAX];
            lm_sr_backend_name(name, sizeof name, HX_SWEEP_DEFAULT_SEED + i);
            ens += bare_run(m, name, 1, 0, prompt, (uint32_t)np);
        }
        ref_capture rc = {0};
        t0 = lm_now_s();
        if (ref_compute(&rc, s->r, &rq, &err) != LM_OK)
            bu_die(PROG, "reference", &err);
        t_ref[rep] = lm_now_s() - t0;
        ref_capture_free(&rc);
        t_eng[rep] = eng;
        t_ens[rep] = ens;
        t_bare[rep] = eng + ens + t_ref[rep];
        ratio[rep] = t_sweep[rep] / t_bare[rep];
    }
    double ms = bu_median(t_sweep, reps), me = bu_median(t_eng, reps), mr = bu_median(t_ref, reps);
    double mn = bu_median(t_ens, reps), mb = bu_median(t_bare, reps), mq = bu_median(ratio, reps);
    printf("\nsweep overhead, stories260K, %zu prompt tokens, -n %u, %zu configurations "
           "(9 steps x naive,blas, threads 1), median of %d\n", np, N_GEN, nc, reps);
    printf("%-44s %10s\n", "what", "seconds");
    printf("%-44s %10.3f\n", "sweep (empty cache)", ms);
    printf("%-44s %10.3f\n", "  bare engine runs (18 configs + path run)", me);
    printf("%-44s %10.3f\n", "  bare naive-sr ensemble runs (8)", mn);
    printf("%-44s %10.3f\n", "  one reference computation (uncached)", mr);
    printf("%-44s %10.3f\n", "  sum", mb);
    printf("%-44s %10.3f   (target <= 1.10)\n", "ratio sweep / sum (median of ratios)", mq);

    char tsv_path[1024];
    FILE *out = bu_tsv_open(PROG, s->outdir, "sweep.tsv",
                            "when\tmodel\tconfigs\tn_gen\treps\tsweep_s\tengine_s\tensemble_s\t"
                            "ref_s\tbare_sum_s\tratio\ttarget\n",
                            tsv_path, sizeof tsv_path);
    char when[32];
    bu_when(when);
    fprintf(out, "%s\tstories260K\t%zu\t%u\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t1.10\n", when,
            nc, N_GEN, reps, ms, me, mn, mr, mb, mq);
    fclose(out);
    printf("appended to %s\n", tsv_path);
    free(t_sweep);
    free(t_eng);
    free(t_ref);
    free(t_ens);
    free(t_bare);
    free(ratio);
    free(all);
    free(cfgs);
    return 0;
}

/* The empty-cache folders are in the scratch folder (removed after a passing check). */
int main(int argc, char **argv)
{
    return bu_stories_main(PROG, argc, argv, "bench_sweep OUTDIR [REPS]", 50, prompt_text, bench);
}
