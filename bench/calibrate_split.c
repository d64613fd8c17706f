/* calibrate_split.c — the split-risk forecast (harness/judge/split_risk.h) against observed
 * splits of kvdrift's own engine: `make calibrate`.
 *
 * usage: calibrate_split OUTDIR [PROMPTS_PER_MODEL (default 100)] [N_GEN (default 16)]
 * Models: stories260K ($KVDRIFT_MODELS, skipped with a line when absent; float32 weights, so
 * q8act rounds nothing there and is not run) under f32, bf16 and tf32; the synthetic preset
 * tiny with F16 weights (written into OUTDIR) under f32, bf16, tf32 and q8act (binary16
 * activations into the F16 products). Prompts: PROMPTS_PER_MODEL seeded prompts of 6 token ids
 * drawn uniformly from [3, n_vocab) (splitmix64, seed printed; CALIBRATE_SEED overrides).
 * For each prompt one sweep (hx_sweep_run_all: the reference's greedy path, 8 members per
 * profile, forecasts) with configurations naive, blas and det (step=full, threads=1) under each
 * profile; a configuration's greedy path "split" when its first_divergent is >= 0.
 * Two reliability tables, predictions in bins against what happened:
 *   sequences: each (prompt, configuration) with its profile's risk within N_GEN tokens vs
 *              whether that configuration's greedy path left the reference's;
 *   steps:     each teacher-forced step's p_i (hx_split_step_p) vs whether the
 *              configuration's argmax differs from the reference's there (a step after a
 *              split included: teacher forcing keeps the reference's context).
 * Observed fractions carry a 90% Wilson interval. Writes OUTDIR/calibrate-seq.tsv (one line
 * per prompt and configuration), OUTDIR/calibrate-bins.tsv (the tables) and from it
 * OUTDIR/calibrate.html (the reliability diagrams, report/calibrate_html.h). Never fails on
 * what it finds: it reports. */
#include "judge/model_check.h"
#include "judge/split_risk.h"
#include "fs.h"
#include "kvd_engine.h"
#include "kvd_model.h"
#include "kvd_profile.h"
#include "plan/synth.h"
#include "report/calibrate_html.h"
#include "run/sweep.h"
#include "util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "calibrate_split"
#define N_PROMPT 6u
#define N_BINS 7
static const double edges[N_BINS + 1] = {0.0, 1e-4, 1e-3, 1e-2, 0.05, 0.2, 0.5, 1.0000001};
static const char *const backends[] = {"naive", "blas", "det"};
#define N_BACKENDS 3

typedef struct bin {
    double n, pred, obs;
} bin;

typedef struct tally {
    bin seq[N_BINS], step[N_BINS];
    bin seq_prof[LM_PROFILES_MAX]; /* per profile: sequences, predicted and observed splits */
} tally;

static int bin_of(double p)
{
    for (int b = 0; b < N_BINS; ++b)
        if (p < edges[b + 1])
            return b;
    return N_BINS - 1;
}

static void add(bin *b, double p, bool split)
{
    b->n += 1.0;
    b->pred += p;
    b->obs += split ? 1.0 : 0.0;
}

/* 90% Wilson interval of k successes in n; exactly 0 below at k = 0 and 1 above at k = n,
 * where c - h and c + h are those ends up to rounding. */
static void wilson(double *lo, double *hi, double k, double n)
{
    const double z = 1.6448536269514722, ph = k / n, z2 = z * z / n;
    const double c = (ph + z2 / 2.0) / (1.0 + z2);
    const double h = z * sqrt(ph * (1.0 - ph) / n + z2 / (4.0 * n)) / (1.0 + z2);
    *lo = k > 0.0 && c - h > 0.0 ? c - h : 0.0;
    *hi = k < n && c + h < 1.0 ? c + h : 1.0;
}

static uint64_t splitmix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void table(FILE *tsv, const char *what, const bin *b)
{
    printf("\n%s: predicted probability in bins vs observed\n", what);
    printf("%-16s %8s %12s %12s %22s\n", "bin", "n", "mean pred", "observed", "observed 90% CI");
    for (int i = 0; i < N_BINS; ++i) {
        char name[32];
        snprintf(name, sizeof name, "[%g, %g)", edges[i], i + 1 < N_BINS ? edges[i + 1] : 1.0);
        if (b[i].n == 0) {
            printf("%-16s %8d %12s %12s %22s\n", name, 0, "-", "-", "-");
            continue;
        }
        double lo, hi;
        wilson(&lo, &hi, b[i].obs, b[i].n);
        printf("%-16s %8.0f %12.4g %12.4g     [%8.4g, %8.4g]\n", name, b[i].n,
               b[i].pred / b[i].n, b[i].obs / b[i].n, lo, hi);
        fprintf(tsv, "%s\t%g\t%g\t%.0f\t%.6g\t%.6g\t%.6g\t%.6g\n", what, edges[i],
                i + 1 < N_BINS ? edges[i + 1] : 1.0, b[i].n, b[i].pred / b[i].n,
                b[i].obs / b[i].n, lo, hi);
    }
}

/* One model: n_prompts sweeps; tallies into t, one line per prompt and configuration to seq. */
static void run_model(tally *t, FILE *seq, const char *label, const char *path,
                      const char *const *profiles, uint32_t n_prof, uint32_t n_prompts,
                      uint32_t n_gen, uint64_t seed, const char *cache)
{
    lm_err err = {0};
    lm_model *m = NULL;
    ref_model *rm = NULL; /* the reference's own reading of the same file */
    if (hx_models_open(&m, &rm, path, &err) != LM_OK) {
        printf("%s: skipped (%s)\n", label, err.msg);
        return;
    }
    hx_config cfg[LM_PROFILES_MAX * N_BACKENDS];
    size_t nc = 0;
    for (uint32_t k = 0; k < n_prof; ++k)
        for (int b = 0; b < N_BACKENDS; ++b) {
            hx_config c = {.step = 0, .threads = 1};
            snprintf(c.backend, sizeof c.backend, "%s", backends[b]);
            snprintf(c.profile, sizeof c.profile, "%s", strcmp(profiles[k], "f32") ? profiles[k] : "");
            cfg[nc++] = c;
        }
    printf("%s: %u prompts of %u random tokens, %u generated, profiles", label, n_prompts,
           N_PROMPT, n_gen);
    for (uint32_t k = 0; k < n_prof; ++k)
        printf(" %s", profiles[k]);
    printf(", configurations naive, blas, det\n");
    const double t0 = lm_now_s();
    uint64_t st = seed;
    for (uint32_t i = 0; i < n_prompts; ++i) {
        int32_t prompt[N_PROMPT];
        for (uint32_t j = 0; j < N_PROMPT; ++j)
            prompt[j] = 3 + (int32_t)(splitmix(&st) % (m->hp.n_vocab - 3));
        hx_sweep_params p = {.model = m, .ref = rm, .model_label = label, .prompt = prompt,
                             .n_prompt = N_PROMPT, .n_gen = n_gen, .configs = cfg,
                             .n_configs = nc, .cache_dir = cache, .ref_threads = 1, .quiet = true,
                             .time_once = true};
        hx_sweep_result *r = NULL;
        if (hx_sweep_run_all(&r, &p, &err) != LM_OK) {
            printf("%s prompt %u: %s\n", label, i, err.msg);
            lm_err_clear(&err);
            continue;
        }
        const hx_report *rep = r->report;
        for (size_t c = 0; c < rep->n_configs; ++c) {
            const hx_config *hc = &r->runs[c].cfg;
            const lm_profile *pf = lm_profile_find(hc->profile);
            const uint32_t k = lm_profile_index(pf);
            const hx_split_forecast *f = NULL;
            for (uint32_t s = 0; s < rep->n_split; ++s)
                if (strcmp(rep->split[s].profile, pf->name) == 0)
                    f = &rep->split[s];
            const hx_config_report *cr = &rep->configs[c];
            if (f == NULL || !f->valid)
                continue;
            const bool split = cr->first_divergent >= 0;
            add(&t->seq[bin_of(f->risk)], f->risk, split);
            add(&t->seq_prof[k], f->risk, split);
            fprintf(seq, "%s\t%u\t%s\t%s\t%.6g\t%.6g\t%.6g\t%d\t%lld\t%lld\t%.6g\n", label, i,
                    pf->name, cr->config, f->risk, f->lo, f->hi, split,
                    (long long)cr->first_divergent, (long long)f->likely_step, f->min_margin);
            /* Steps: every teacher-forced generated row. */
            const hx_envelope *env = r->env_prof[k];
            for (size_t w = 0; w < cr->n_rows; ++w) {
                const hx_tensor_row *row = &cr->rows[w];
                unsigned pos;
                if (!row->is_logits || sscanf(row->name, "logits@%u", &pos) != 1 ||
                    pos + 1 < N_PROMPT || pos + 1 - N_PROMPT >= n_gen)
                    continue;
                const int64_t ri = ref_capture_find_pos(&r->ref, pos);
                int64_t ei = -1;
                for (uint32_t q = 0; q < env->n_pos && ei < 0; ++q)
                    if (env->positions[q] == pos)
                        ei = q;
                if (ri < 0 || ei < 0)
                    continue;
                const double mg = hx_split_margin(ref_capture_logits(&r->ref, (uint32_t)ri),
                                                  r->ref.n_vocab);
                const double pi = hx_split_step_p(mg, env->logits[ei].split_sd);
                if (!isnan(pi))
                    add(&t->step[bin_of(pi)], pi, !row->lg.top1_agree);
            }
        }
        hx_sweep_result_free(r);
        if ((i + 1) % 10 == 0)
            fprintf(stderr, "%s: %u/%u prompts, %.0f s\n", label, i + 1, n_prompts,
                    lm_now_s() - t0);
    }
    lm_model_free(m);
    ref_model_free(rm);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: " PROG " OUTDIR [PROMPTS_PER_MODEL] [N_GEN]\n");
        return 2;
    }
    const char *out = argv[1];
    const uint32_t n_prompts = argc > 2 ? (uint32_t)strtoul(argv[2], NULL, 10) : 100u;
    const uint32_t n_gen = argc > 3 ? (uint32_t)strtoul(argv[3], NULL, 10) : 16u;
    const char *es = getenv("CALIBRATE_SEED");
    const uint64_t seed = es ? strtoull(es, NULL, 0) : 0x63616c6962ull;
    if (n_prompts == 0 || n_gen == 0) {
        fprintf(stderr, PROG ": PROMPTS_PER_MODEL and N_GEN must be >= 1\n");
        return 2;
    }
    lm_err err = {0};
    if (lm_mkdir_p(out, &err) != LM_OK) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 2;
    }
    char cache[4096], tiny[4096], seq_path[4200], bins_path[4200], html_path[4200],
        st_path[4096];
    snprintf(cache, sizeof cache, "%s/cache", out);
    snprintf(tiny, sizeof tiny, "%s/tiny-f16.gguf", out);
    snprintf(seq_path, sizeof seq_path, "%s/calibrate-seq.tsv", out);
    snprintf(bins_path, sizeof bins_path, "%s/calibrate-bins.tsv", out);
    snprintf(html_path, sizeof html_path, "%s/calibrate.html", out);
    bu_model_path(st_path, sizeof st_path, "stories260K.gguf");
    if (hx_synth_write(tiny, "tiny", 0, LM_TYPE_F16, &err) != LM_OK) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 2;
    }
    FILE *seq = fopen(seq_path, "w"), *bins = fopen(bins_path, "w");
    if (seq == NULL || bins == NULL) {
        fprintf(stderr, PROG ": cannot write into %s\n", out);
        return 2;
    }
    printf(PROG ": seed %#llx (CALIBRATE_SEED; include it in bug reports)\n",
           (unsigned long long)seed);
    fprintf(seq, "model\tprompt\tprofile\tconfig\trisk\tlo\thi\tsplit\tfirst_divergent\t"
                 "likely_step\tmin_margin\n");
    fprintf(bins, HX_CALIB_BINS_HEADER "\n");
    tally t = {0};
    static const char *const st_prof[] = {"f32", "bf16", "tf32"};
    static const char *const tiny_prof[] = {"f32", "bf16", "tf32", "q8act"};
    run_model(&t, seq, "stories260K", st_path, st_prof, 3, n_prompts, n_gen, seed, cache);
    run_model(&t, seq, "tiny-f16", tiny, tiny_prof, 4, n_prompts, n_gen, seed + 1, cache);
    char what[64];
    snprintf(what, sizeof what, "sequences (split within %u tokens)", n_gen);
    table(bins, what, t.seq);
    table(bins, "steps (teacher-forced argmax differs)", t.step);
    printf("\nper profile: sequences, expected splits (sum of risks), observed splits\n");
    for (uint32_t k = 0; k < lm_profile_count(); ++k) {
        const bin *b = &t.seq_prof[k];
        if (b->n == 0)
            continue;
        double lo, hi;
        wilson(&lo, &hi, b->obs, b->n);
        printf("%-6s %6.0f %10.2f %8.0f  (observed fraction %.3g, 90%% CI [%.3g, %.3g])\n",
               lm_profile_at(k)->name, b->n, b->pred, b->obs, b->obs / b->n, lo, hi);
        fprintf(bins, HX_CALIB_PROFILE_PREFIX "%s\t0\t1\t%.0f\t%.6g\t%.6g\t%.6g\t%.6g\n",
                lm_profile_at(k)->name, b->n, b->pred / b->n, b->obs / b->n, lo, hi);
    }
    if (fclose(seq) != 0 || fclose(bins) != 0) {
        fprintf(stderr, PROG ": cannot write into %s\n", out);
        return 2;
    }
    if (hx_calibrate_html_write(bins_path, html_path, &err) != LM_OK) {
        fprintf(stderr, PROG ": %s\n", err.msg);
        return 2;
    }
    printf("wrote %s, %s and %s\n", seq_path, bins_path, html_path);
    return 0;
}
