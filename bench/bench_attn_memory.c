/* bench_attn_memory.c — the quadratic attention wall and its cure.
 *
 * A synthetic 1-layer llama with 16 heads (n_embd 256, head_dim 16), contexts N = 1K..16K
 * (32K with KVD_BENCH_32K=1): single-shot prefill with dense attention (one [N][N] score
 * matrix per head) against chunked prefill (step 512) with streaming attention (one tile of
 * scores at a time). Each configuration runs in its own child process so that its peak RSS
 * (VmHWM) is its own; the engine reports its own peak scratch (largest attention/MoE scratch
 * plus the activation rows of the largest chunk, lm_ctx_peak_scratch_bytes). Before anything
 * is measured the two implementations' last-position logits are compared at N = 1024.
 * Prints the table and least-squares growth exponents of log(y) over log(N); appends TSV lines
 * to OUTDIR/attn_memory.tsv. Never fails on speed or memory. Usage: bench_attn_memory [OUTDIR] */
#include "kvd_engine.h"
#include "kvd_util.h"
#include "plan/synth.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct result {
    double prefill_s;
    double rss_peak_mib;   /* VmHWM of the child */
    double rss_model_mib;  /* VmHWM after loading the model, before the context */
    double scratch_mib;    /* engine's own peak scratch (attention + activation rows) */
    double attn_mib;       /* its attention part: the largest scratch one attention call used */
    double kv_mib;         /* KV cache bytes */
    int ok;
} result;

static double vm_hwm_mib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kib = 0.0;
    while (f != NULL && fgets(line, sizeof line, f) != NULL)
        if (strncmp(line, "VmHWM:", 6) == 0)
            kib = strtod(line + 6, NULL);
    if (f != NULL)
        fclose(f);
    return kib / 1024.0;
}

static int32_t *prompt_of(uint32_t n, uint32_t n_vocab)
{
    int32_t *t = malloc(n * sizeof *t);
    uint64_t s = 0x9e3779b97f4a7c15u;
    for (uint32_t i = 0; i < n && t != NULL; ++i) {
        s = s * 6364136223846793005u + 1442695040888963407u;
        t[i] = (int32_t)(3 + (s >> 33) % (n_vocab - 3));
    }
    return t;
}

/* One prefill of n tokens; logits [n_vocab] of the last position into last (may be NULL). */
static int run_one(const lm_model *m, uint32_t n, const char *attn, uint32_t step, result *r,
                   float *last)
{
    lm_err err = {0};
    lm_ctx *ctx = NULL;
    const lm_ctx_params cp = {.backend = "blas", .n_threads = 1, .n_ctx = n, .attn = attn};
    r->rss_model_mib = vm_hwm_mib();
    int32_t *toks = prompt_of(n, m->hp.n_vocab);
    float *logits = malloc(m->hp.n_vocab * sizeof(float));
    int rc = toks && logits ? lm_ctx_create(&ctx, m, &cp, &err) : LM_E_NOMEM;
    if (rc == LM_OK) {
        const double t0 = lm_now_s();
        rc = lm_prefill(ctx, toks, n, step, logits, &err);
        r->prefill_s = lm_now_s() - t0;
    }
    if (rc == LM_OK) {
        r->scratch_mib = (double)lm_ctx_peak_scratch_bytes(ctx) / 1048576.0;
        r->attn_mib = (double)lm_ctx_peak_attn_scratch_bytes(ctx) / 1048576.0;
        r->kv_mib = 2.0 * m->hp.n_layer * (double)n * m->hp.n_head_kv * m->hp.head_dim * 4.0 /
                    1048576.0;
        r->rss_peak_mib = vm_hwm_mib();
        r->ok = 1;
        if (last != NULL)
            memcpy(last, logits, m->hp.n_vocab * sizeof(float));
    } else {
        fprintf(stderr, "bench_attn_memory: %s\n", err.msg);
    }
    lm_ctx_free(ctx);
    free(toks);
    free(logits);
    return rc;
}

/* Runs one configuration in a child process (its own peak RSS). */
static result measure(const char *model_path, uint32_t n, const char *attn, uint32_t step)
{
    result r = {0};
    int fd[2];
    if (pipe(fd) != 0)
        return r;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        lm_err err = {0};
        lm_model *m = NULL;
        result c = {0};
        if (lm_model_load(&m, model_path, &err) == LM_OK)
            run_one(m, n, attn, step, &c, NULL);
        else
            fprintf(stderr, "bench_attn_memory: %s\n", err.msg);
        ssize_t w = write(fd[1], &c, sizeof c);
        (void)w;
        lm_model_free(m);
        _exit(0);
    }
    close(fd[1]);
    if (pid > 0) {
        ssize_t got = read(fd[0], &r, sizeof r);
        if (got != (ssize_t)sizeof r)
            r.ok = 0;
        waitpid(pid, NULL, 0);
    }
    close(fd[0]);
    return r;
}

/* Least-squares slope of log(y) against log(x). */
static double exponent(const double *x, const double *y, int n)
{
    double sx = 0, sy = 0, sxx = 0, sxy = 0;
    for (int i = 0; i < n; ++i) {
        const double lx = log(x[i]), ly = log(y[i] > 1e-9 ? y[i] : 1e-9);
        sx += lx;
        sy += ly;
        sxx += lx * lx;
        sxy += lx * ly;
    }
    return (n * sxy - sx * sy) / (n * sxx - sx * sx);
}

int main(int argc, char **argv)
{
    const char *outdir = argc > 1 ? argv[1] : "reports/bench";
    const bool big = getenv("KVD_BENCH_32K") != NULL && strcmp(getenv("KVD_BENCH_32K"), "1") == 0;
    const uint32_t sizes[] = {1024, 2048, 4096, 8192, 16384, 32768};
    const int n_sizes = big ? 6 : 5;
    const uint32_t step = 512;
    char model_path[] = "/tmp/kvd_bench_attn_XXXXXX";
    int mfd = mkstemp(model_path);
    if (mfd < 0) {
        fprintf(stderr, "bench_attn_memory: cannot create a temporary file: %s\n", strerror(errno));
        return 2;
    }
    close(mfd);
    hx_synth_params p = {"kvdrift-bench-attn16", 256, 1, 16, 16, 512, 512, 32768, 10000.0f,
                         1e-5f, .n_swa = 0};
    lm_err err = {0};
    lm_model *m = NULL;
    if (hx_synth_write_params(model_path, &p, 0, LM_TYPE_F32, &err) != LM_OK ||
        lm_model_load(&m, model_path, &err) != LM_OK) {
        fprintf(stderr, "bench_attn_memory: %s\n", err.msg);
        unlink(model_path);
        return 2;
    }
    /* check first: the two implementations compute the same logits (to float rounding) */
    float *ld = malloc(p.n_vocab * sizeof(float)), *ls = malloc(p.n_vocab * sizeof(float));
    result rd = {0}, rs = {0};
    if (ld == NULL || ls == NULL || run_one(m, 1024, "dense", 0, &rd, ld) != LM_OK ||
        run_one(m, 1024, "stream", step, &rs, ls) != LM_OK) {
        fprintf(stderr, "bench_attn_memory: the N=1024 check could not run\n");
        unlink(model_path);
        return 2;
    }
    double maxd = 0.0, maxa = 0.0;
    for (uint32_t i = 0; i < p.n_vocab; ++i) {
        const double d = fabs((double)ld[i] - (double)ls[i]);
        maxd = d > maxd || isnan(d) ? d : maxd;
        maxa = fabs((double)ld[i]) > maxa ? fabs((double)ld[i]) : maxa;
    }
    const bool same_top = lm_argmax(ld, p.n_vocab) == lm_argmax(ls, p.n_vocab);
    printf("check N=1024: dense single-shot vs stream step %u: max |dlogit| %.3g (max |logit| "
           "%.3g), same argmax: %s\n", step, maxd, maxa, same_top ? "yes" : "NO");
    lm_model_free(m);
    free(ld);
    free(ls);

    printf("%-6s %-19s %9s %11s %13s %11s %9s %7s\n", "N", "config", "prefill_s",
           "peakRSS_MiB", "RSS-model_MiB", "scratch_MiB", "attn_MiB", "KV_MiB");
    double xs[6], d_rss[6], d_scr[6], s_rss[6], s_scr[6], d_att[6], s_att[6];
    result rd_all[6], rs_all[6];
    for (int i = 0; i < n_sizes; ++i) {
        const uint32_t n = sizes[i];
        rd_all[i] = measure(model_path, n, "dense", 0);
        rs_all[i] = measure(model_path, n, "stream", step);
        const result *r2[2] = {&rd_all[i], &rs_all[i]};
        for (int k = 0; k < 2; ++k)
            printf("%-6u %-19s %9.2f %11.1f %13.1f %11.2f %9.3f %7.1f%s\n", n,
                   k ? "stream, step 512" : "dense, single shot", r2[k]->prefill_s,
                   r2[k]->rss_peak_mib, r2[k]->rss_peak_mib - r2[k]->rss_model_mib,
                   r2[k]->scratch_mib, r2[k]->attn_mib, r2[k]->kv_mib,
                   r2[k]->ok ? "" : "  (failed)");
        xs[i] = n;
        d_rss[i] = rd_all[i].rss_peak_mib - rd_all[i].rss_model_mib;
        s_rss[i] = rs_all[i].rss_peak_mib - rs_all[i].rss_model_mib - rs_all[i].kv_mib;
        d_scr[i] = rd_all[i].scratch_mib;
        s_scr[i] = rs_all[i].scratch_mib;
        d_att[i] = rd_all[i].attn_mib;
        s_att[i] = rs_all[i].attn_mib;
    }
    const double e_drss = exponent(xs, d_rss, n_sizes), e_dscr = exponent(xs, d_scr, n_sizes);
    const double e_srss = exponent(xs, s_rss, n_sizes), e_sscr = exponent(xs, s_scr, n_sizes);
    const double e_datt = exponent(xs, d_att, n_sizes), e_satt = exponent(xs, s_att, n_sizes);
    const int i16 = 4, l0 = n_sizes - 2, l1 = n_sizes - 1; /* the last doubling */
    const double ratio = s_scr[i16] / s_scr[0];
    printf("growth exponents (log-log least squares over all N; [last doubling]):\n");
    printf("  dense single-shot: RSS beyond the model %.2f [%.2f], engine scratch %.2f [%.2f], "
           "attention scratch %.2f\n", e_drss, log2(d_rss[l1] / d_rss[l0]), e_dscr,
           log2(d_scr[l1] / d_scr[l0]), e_datt);
    printf("  stream step 512:   RSS beyond model and KV %.2f [%.2f], engine scratch %.2f, "
           "attention scratch %.2f\n", e_srss, log2(s_rss[l1] / s_rss[l0]), e_sscr, e_satt);
    printf("  stream engine scratch 16K / 1K = %.2f (target <= 2)\n", ratio);

    char tsv_path[1024];
    snprintf(tsv_path, sizeof tsv_path, "%s/attn_memory.tsv", outdir);
    const bool fresh = access(tsv_path, F_OK) != 0;
    FILE *out = fopen(tsv_path, "a");
    if (out != NULL) {
        if (fresh)
            fprintf(out, "time\tN\tconfig\tprefill_s\tpeak_rss_mib\trss_beyond_model_mib\t"
                         "scratch_mib\tattn_scratch_mib\tkv_mib\n");
        const long t = (long)time(NULL);
        for (int i = 0; i < n_sizes; ++i) {
            fprintf(out, "%ld\t%u\tdense-full\t%.3f\t%.1f\t%.1f\t%.3f\t%.3f\t%.1f\n", t,
                    sizes[i], rd_all[i].prefill_s, rd_all[i].rss_peak_mib, d_rss[i], d_scr[i],
                    d_att[i], rd_all[i].kv_mib);
            fprintf(out, "%ld\t%u\tstream-512\t%.3f\t%.1f\t%.1f\t%.3f\t%.3f\t%.1f\n", t,
                    sizes[i], rs_all[i].prefill_s, rs_all[i].rss_peak_mib,
                    rs_all[i].rss_peak_mib - rs_all[i].rss_model_mib, s_scr[i], s_att[i],
                    rs_all[i].kv_mib);
        }
        fclose(out);
    }
    unlink(model_path);
    return 0;
}
