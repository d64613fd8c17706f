/* bench_axes.c — what the default sweep costs now against the old default axes.
 *
 * usage: bench_axes OUTDIR [REPS]
 * On stories260K (skipped cleanly when absent), prompt "Once upon a time, there was a little
 * girl named Lily.", -n 32, one engine run at a time (jobs 1, as `kvdrift sweep` defaults):
 *   old  = hx_sweep_run_all over the old default axes: naive,blas x steps
 *          1,2,3,5,8,16,32,64,full, threads 1, attn default (18 configurations);
 *   new  = the same over the default axes now (hx_axes_configs of an empty hx_axes: threads
 *          1,all and attn default,stream as well);
 * each timed with an empty cache (a first sweep: reference and envelope computed, shared by
 * every configuration) and again with the cache warm (a repeated sweep: engine runs and
 * comparisons only). ratio = new / old, the median of the per-repeat ratios (both sweeps of a
 * repeat run back to back in this process). Both sweeps must pass (no false alarm) before
 * anything is timed. Prints a table, appends TSV to OUTDIR/axes.tsv; never fails on speed. */
#include "model/config.h"
#include "kvd_engine.h"
#include "run/sweep.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N_GEN 32u
#define PROG "bench_axes"
static const char prompt_text[] = "Once upon a time, there was a little girl named Lily.";

/* One sweep of cfgs[n] with its cache in dir; exits 1 when a configuration fails. */
static double timed_sweep(hx_sweep_params *p, const hx_config *cfgs, size_t n, const char *dir)
{
    lm_err err = {0};
    hx_sweep_result *r = NULL;
    p->configs = cfgs;
    p->n_configs = n;
    p->cache_dir = dir;
    double t0 = lm_now_s();
    if (hx_sweep_run_all(&r, p, &err) != LM_OK)
        bu_die(PROG, "sweep", &err);
    double t = lm_now_s() - t0;
    int rc = hx_report_exit_code(r->report, false);
    hx_sweep_result_free(r);
    if (rc != 0) {
        fprintf(stderr, "bench_axes: CHECK FAILED: a legitimate configuration failed\n");
        exit(1);
    }
    return t;
}

static int bench(bu_stories *s)
{
    const int reps = s->reps;
    const size_t np = s->n_prompt;
    lm_err err = {0};
    const hx_axes old_axes = {.threads = "1", .attn = "default"}, new_axes = {0};
    hx_config *oc = NULL, *nc = NULL;
    size_t n_old = 0, n_new = 0;
    if (hx_axes_configs(&oc, &n_old, &old_axes, &err) != LM_OK ||
        hx_axes_configs(&nc, &n_new, &new_axes, &err) != LM_OK)
        bu_die(PROG, "configs", &err);
    hx_sweep_params p = {.model = s->m, .ref = s->r, .model_label = s->path, .prompt = s->prompt,
                         .n_prompt = (uint32_t)np, .n_gen = N_GEN, .quiet = true, .jobs = 1};
    double *v = calloc(6 * (size_t)reps, sizeof *v);
    if (v == NULL)
        return 2;
    double *cold_old = v, *cold_new = v + reps, *warm_old = v + 2 * reps,
           *warm_new = v + 3 * reps, *r_cold = v + 4 * reps, *r_warm = v + 5 * reps;
    for (int rep = 0; rep < reps; ++rep) {
        char d_old[1200], d_new[1200];
        bu_fresh_dir(PROG, d_old, sizeof d_old, s->scratch, "old", rep);
        bu_fresh_dir(PROG, d_new, sizeof d_new, s->scratch, "new", rep);
        cold_old[rep] = timed_sweep(&p, oc, n_old, d_old);
        cold_new[rep] = timed_sweep(&p, nc, n_new, d_new);
        warm_old[rep] = timed_sweep(&p, oc, n_old, d_old);
        warm_new[rep] = timed_sweep(&p, nc, n_new, d_new);
        r_cold[rep] = cold_new[rep] / cold_old[rep];
        r_warm[rep] = warm_new[rep] / warm_old[rep];
    }
    const double co = bu_median(cold_old, reps), cn = bu_median(cold_new, reps);
    const double wo = bu_median(warm_old, reps), wn = bu_median(warm_new, reps);
    const double rc = bu_median(r_cold, reps), rw = bu_median(r_warm, reps);
    printf("\ndefault sweep cost, stories260K, %zu prompt tokens, -n %u, jobs 1, median of %d\n",
           np, N_GEN, reps);
    printf("%-38s %8s %12s %12s\n", "axes", "configs", "cold s", "warm s");
    printf("%-38s %8zu %12.3f %12.3f\n", "old default (threads 1, dense)", n_old, co, wo);
    printf("%-38s %8zu %12.3f %12.3f\n", "default (threads 1,all; dense,stream)", n_new, cn, wn);
    printf("%-38s %8s %12.2f %12.2f   (median of per-repeat ratios)\n", "ratio new / old", "",
           rc, rw);
    char tsv_path[1024];
    FILE *out = bu_tsv_open(PROG, s->outdir, "axes.tsv",
                            "when\tmodel\tconfigs_old\tconfigs_new\tn_gen\treps\tcold_old_s\t"
                            "cold_new_s\twarm_old_s\twarm_new_s\tratio_cold\tratio_warm\n",
                            tsv_path, sizeof tsv_path);
    char when[32];
    bu_when(when);
    fprintf(out, "%s\tstories260K\t%zu\t%zu\t%u\t%d\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\t%.4f\n", when,
            n_old, n_new, N_GEN, reps, co, cn, wo, wn, rc, rw);
    fclose(out);
    printf("appended to %s\n", tsv_path);
    free(v);
    free(oc);
    free(nc);
    return 0;
}

int main(int argc, char **argv)
{
    return bu_stories_main(PROG, argc, argv, "bench_axes OUTDIR [REPS]", 20, prompt_text, bench);
}
