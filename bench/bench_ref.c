/* bench_ref.c — speed of the MPFR reference against its own cost model.
 *
 * usage: bench_ref OUTDIR [THREADS]
 * 1. Measures, in this run, the single-core cost of one multiply-add at 127 and 128 bits (see
 *    ns_per_mac: plain mpfr_mul + mpfr_add on fresh rows is the target's unit; the hot-loop
 *    figure and ref_dot's own cost are printed beside it): the figures the default precision
 *    and the inner-product strategy were chosen by.
 * 2. Times the whole reference pass (ref_compute) for
 *      stories260K with a 115-token prompt (median of 3 after a warm-up),
 *      the smollm2-135m synthetic preset (F32, harness/plan/synth.h) with a 30-token prompt and
 *      16 teacher-forced positions (one run, ~6e9 multiply-adds; goal <= 5 s on 2 idle cores),
 *      the envelope on the same tokens: 8 SR members of the reference's float32 model against
 *      that pass (goal <= 2x) and against one blas run (goal <= 10x), wall and CPU seconds
 *      (all threads) of each, every precision profile's envelope against that pass (goal
 *      <= 2x each; float32 weights: q8act rounds nothing there), and
 *      smollm2-135m with a LONG_PROMPT-token prompt (the long-prompt figure),
 *    and compares each with the target  multiply-adds x (single-core ns per multiply-add) /
 *    threads. Multiply-adds counted: every projection row of every token (q, k, v, o, gate,
 *    up, down), the causal attention products (q.k and p.v: 2 n_head head_dim (t+1) per token
 *    t and layer), and the output projection for the logit positions; RMSNorm, RoPE, softmax
 *    and SiLU (exp, rec_sqrt, sin/cos) are not multiply-adds and count against the ratio.
 * 3. In the same run, the elementwise and attention units against their MPFR counterparts:
 *    ref_exp / ref_tanh against mpfr_exp / mpfr_tanh (ns per call, 127 bits, CPU time of this
 *    thread), and ref_dx_dot_vv against ref_dot on 64-element MPFR vectors (attention's q.k at
 *    head_dim 64: ns per multiply-add, each vector split once as the pass does).
 * 4. The real models when $KVDRIFT_CACHE/models holds them (`make models`), wall and CPU
 *    seconds (bu_cpu_s) of one pass each, beside the estimate the cost line printed before a
 *    pass gives for it (ref_calibrate_s_per_mac and ref_fixed_cost_s; its own TSV row): SmolLM2-135M-Instruct Q4_1 with a
 *    30-token prompt and 16 teacher-forced positions (goal <= 5 s on 2 idle cores), the
 *    envelope's cost on the same tokens (as for the synthetic preset) and every precision
 *    profile's envelope against that pass (goal <= 2x each; its Q4_1 weights make q8act
 *    convert product inputs to Q8_0 blocks), Gemma-3-270M Q4_K_M with
 *    the first 600 tokens of tests/data/gemma3/long_prompt.txt (goal <= 60 s).
 * Each result is checked before it is timed (stories260K: argmax 432 after "Once upon a time";
 * smollm2: every logit finite). Prints a table, appends TSV to OUTDIR/ref.tsv; never fails on
 * speed. */
#include "kvd_ref.h"
#include "fs.h"
#include "ref_dotx.h"
#include "ref_exp.h"
#include "ref_spans.h"
#include "ref_sr.h"
#include "run/runner.h"
#include "run/ensemble.h"
#include "kvd_profile.h"
#include "plan/synth.h"
#include "util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define PROG "bench_ref"
#define LONG_PROMPT 128 /* tokens of the long-prompt figure */

/* Single-core ns per multiply-add at prec, median of 5 timings after a warm-up, on rows of
 * length 576 (activations with full P-bit significands, exact float32 weights):
 *   HOT    one (x, w) pair dotted 400 times, plain mpfr_mul + mpfr_add chain: the branch
 *          predictor learns the sign pattern, the figure a tight loop shows;
 *   FRESH  16 activation vectors x 64 weight rows, every pair once per timing, plain
 *          mpfr_mul + mpfr_add chain: what a matrix product really costs (the target's unit);
 *   DOT    the same FRESH pairs through ref_dot (the MPFR inner product, --mpfr-dot);
 *   DOTX   the same FRESH pairs through ref_dx_dot (the exact split inner product the
 *          reference uses), each activation vector split once and each weight row once per
 *          timing, at the digit widths the reference's matrix products would choose for them
 *          (ref_dx_widths), as those products do (split costs included). */
enum mac_mode { HOT, FRESH, DOT, DOTX };

static double ns_per_mac(mpfr_prec_t prec, enum mac_mode mode)
{
    enum { N = 576, T = 16, R = 64, REPS = 5 };
    lm_err err = {0};
    ref_scratch s;
    if (ref_scratch_init(&s, prec, N, &err))
        bu_die(PROG, "scratch", &err);
    mpfr_t *x = ref_vec_new((uint64_t)N * T, prec), r;
    float *w = malloc(sizeof(float) * N * R);
    uint64_t z = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < N * R; ++i) {
        z = z * 6364136223846793005u + 1442695040888963407u;
        w[i] = (float)((int32_t)(z >> 40) - (1 << 23)) / (float)(1 << 23);
    }
    for (int i = 0; i < N * T; ++i) {
        z = z * 6364136223846793005u + 1442695040888963407u;
        mpfr_set_si(x[i], (long)(z >> 44) - (1 << 19), MPFR_RNDN);
        mpfr_div_ui(x[i], x[i], 3u << 19, MPFR_RNDN); /* a full P-bit significand */
    }
    mpfr_init2(r, prec);
    ref_dx_scratch dxs;
    ref_dx_vec dxv[T];
    ref_dx_row dxr[REF_DX_ROWS];
    memset(dxv, 0, sizeof dxv);
    memset(dxr, 0, sizeof dxr);
    mpfr_t dxo[REF_DX_ROWS];
    for (unsigned g = 0; g < REF_DX_ROWS; ++g)
        mpfr_init2(dxo[g], prec);
    if (ref_dx_scratch_init(&dxs, prec, N, &err))
        bu_die(PROG, "scratch", &err);
    /* the digit widths the reference's matrix products choose for these vectors and rows */
    uint64_t hist[REF_DX_SPAN_BINS] = {0}, vspan[T];
    ref_spans_count(hist, w, N, 0, R);
    for (int k = 0; k < T; ++k)
        vspan[k] = ref_dx_vec_span(x + k * N, N, 1);
    uint32_t bx, bw;
    ref_dx_widths(hist, vspan, T, prec, N, &bx, &bw);
    double t[REPS], check = 0;
    for (int rep = -1; rep < REPS; ++rep) {
        double t0 = lm_now_s();
        for (int k = 0; mode == DOTX && k < T; ++k)
            if (ref_dx_vec_split(&dxv[k], x + k * N, N, 1, bx, ref_dx_k_cap_bits(prec, bx),
                                 &err))
                bu_die(PROG, "split", &err);
        for (int row = 0; mode == DOTX && row < R; row += REF_DX_ROWS) {
            const ref_dx_row *wr[REF_DX_ROWS];
            mpfr_ptr o[REF_DX_ROWS];
            for (unsigned g = 0; g < REF_DX_ROWS; ++g) {
                if (ref_dx_row_split(&dxr[g], w + (row + (int)g) * N, N, bw, &err))
                    bu_die(PROG, "split", &err);
                wr[g] = &dxr[g];
                o[g] = dxo[g];
            }
            for (int k = 0; k < T; ++k) {
                ref_dx_dot_rows(o, &dxv[k], wr, REF_DX_ROWS, &dxs);
                for (unsigned g = 0; g < REF_DX_ROWS; ++g)
                    check += mpfr_get_d(dxo[g], MPFR_RNDN);
            }
        }
        for (int row = 0; mode != DOTX && row < R; ++row) {
            if (mode != HOT || row == 0)
                ref_row_set_flt(&s, w + (mode == HOT ? 0 : row) * N, N);
            for (int k = 0; k < T; ++k) {
                mpfr_t *xx = x + (mode == HOT ? 0 : k) * N;
                if (mode == DOT) {
                    ref_dot(r, xx, s.row, N, &s);
                } else {
                    mpfr_set_zero(r, 1);
                    for (int i = 0; i < N; ++i) {
                        mpfr_mul(s.t, xx[i], s.row[i], MPFR_RNDN);
                        mpfr_add(r, r, s.t, MPFR_RNDN);
                    }
                }
                check += mpfr_get_d(r, MPFR_RNDN);
            }
        }
        if (rep >= 0)
            t[rep] = (lm_now_s() - t0) * 1e9 / ((double)N * T * R);
    }
    /* checked: real numbers of the expected size, not optimised away */
    if (!isfinite(check) || fabs(check) > (double)N * T * R * 6) {
        fprintf(stderr, "bench_ref: dot product check failed\n");
        exit(2);
    }
    mpfr_clear(r);
    for (int k = 0; k < T; ++k)
        ref_dx_vec_free(&dxv[k]);
    for (unsigned g = 0; g < REF_DX_ROWS; ++g) {
        ref_dx_row_free(&dxr[g]);
        mpfr_clear(dxo[g]);
    }
    ref_dx_scratch_clear(&dxs);
    ref_vec_free(x, (uint64_t)N * T);
    free(w);
    ref_scratch_clear(&s);
    return bu_median(t, REPS);
}

static double thread_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* CPU ns per call of f (ref_exp, ref_tanh) or g (mpfr_exp, mpfr_tanh) at 127 bits over 4096
 * arguments in (-12, 12) of full significands, median of 5 after a warm-up. */
static double ns_per_elem_fn(void (*f)(mpfr_ptr, mpfr_srcptr),
                             int (*g)(mpfr_ptr, mpfr_srcptr, mpfr_rnd_t))
{
    enum { N = 4096, REPS = 5 };
    mpfr_t *x = ref_vec_new(N, 127), r;
    mpfr_init2(r, 127);
    uint64_t z = 0x2545f4914f6cdd1du;
    for (int i = 0; i < N; ++i) {
        z = z * 6364136223846793005u + 1442695040888963407u;
        mpfr_set_si(x[i], (long)(z >> 40) - (1l << 23), MPFR_RNDN);
        mpfr_div_ui(x[i], x[i], 3u << 20, MPFR_RNDN); /* |x| < 8/3 ... full significand */
        mpfr_mul_ui(x[i], x[i], 1 + (unsigned)(z % 4), MPFR_RNDN);
    }
    double t[REPS], check = 0;
    for (int rep = -1; rep < REPS; ++rep) {
        double t0 = thread_cpu_s();
        for (int i = 0; i < N; ++i) {
            if (f)
                f(r, x[i]);
            else
                g(r, x[i], MPFR_RNDN);
            check += mpfr_get_d(r, MPFR_RNDN);
        }
        if (rep >= 0)
            t[rep] = (thread_cpu_s() - t0) * 1e9 / N;
    }
    if (!isfinite(check)) {
        fprintf(stderr, "bench_ref: elementwise check failed\n");
        exit(2);
    }
    mpfr_clear(r);
    ref_vec_free(x, N);
    return bu_median(t, REPS);
}

/* CPU ns per multiply-add of 64-element MPFR . MPFR dot products (16 x 64 pairs): exact split
 * (ref_dx_dot_vv, every vector split once per timing) or ref_dot; median of 5. */
static double ns_per_mac_vv(bool exact)
{
    enum { N = 64, T = 16, R = 64, REPS = 5 };
    lm_err err = {0};
    mpfr_t *x = ref_vec_new((uint64_t)N * (T + R), 127), r;
    mpfr_init2(r, 127);
    uint64_t z = 0x9e3779b97f4a7c15u;
    for (int i = 0; i < N * (T + R); ++i) {
        z = z * 6364136223846793005u + 1442695040888963407u;
        mpfr_set_si(x[i], (long)(z >> 44) - (1 << 19), MPFR_RNDN);
        mpfr_div_ui(x[i], x[i], 3u << 19, MPFR_RNDN);
    }
    ref_scratch s;
    ref_dx_scratch dxs;
    ref_dx_vec v[T + R];
    memset(v, 0, sizeof v);
    if (ref_scratch_init(&s, 127, N, &err) || ref_dx_scratch_init(&dxs, 127, N, &err))
        bu_die(PROG, "scratch", &err);
    double t[REPS], check = 0;
    for (int rep = -1; rep < REPS; ++rep) {
        double t0 = thread_cpu_s();
        for (int k = 0; exact && k < T + R; ++k)
            if (ref_dx_vec_set(&v[k], x + k * N, N, dxs.k_cap, &err))
                bu_die(PROG, "split", &err);
        for (int a = 0; a < T; ++a)
            for (int b = 0; b < R; ++b) {
                if (exact)
                    ref_dx_dot_vv(r, &v[a], &v[T + b], &dxs);
                else
                    ref_dot(r, x + a * N, x + (T + b) * N, N, &s);
                check += mpfr_get_d(r, MPFR_RNDN);
            }
        if (rep >= 0)
            t[rep] = (thread_cpu_s() - t0) * 1e9 / ((double)N * T * R);
    }
    if (!isfinite(check)) {
        fprintf(stderr, "bench_ref: vv check failed\n");
        exit(2);
    }
    for (int k = 0; k < T + R; ++k)
        ref_dx_vec_free(&v[k]);
    ref_dx_scratch_clear(&dxs);
    ref_scratch_clear(&s);
    mpfr_clear(r);
    ref_vec_free(x, (uint64_t)N * (T + R));
    return bu_median(t, REPS);
}

typedef struct row {
    const char *model;
    uint32_t n_tokens;
    double macs, secs, cpu, target;
} row;

/* Wall and CPU seconds (all threads) of an envelope's 8 SR members of the reference's model
 * under profile ("f32": float32; members in parallel on `threads` threads). */
static void time_sr_members(double *wall, double *cpu, const ref_model *rm, const int32_t *tok,
                            uint32_t n, uint32_t n_prompt, const char *profile, int threads)
{
    lm_err err = {0};
    ref_sr_profile prof;
    hx_ensemble_ref_profile(&prof, profile);
    ref_request rq = {.tokens = tok, .n_tokens = n, .n_prompt = n_prompt, .sr_profile = &prof};
    ref_sr_out mem[8];
    double t0 = lm_now_s(), c0 = bu_cpu_s();
    if (ref_sr_ensemble(mem, 8, rm, &rq, 1, threads, &err))
        bu_die(PROG, "SR ensemble", &err);
    *wall = lm_now_s() - t0;
    *cpu = bu_cpu_s() - c0;
    for (int i = 0; i < 8; ++i)
        ref_sr_out_free(&mem[i]);
}

/* Every precision profile's envelope (8 SR members of the reference's model under the profile,
 * the sites rounded by the reference: ref_vprec.h) against the reference pass (ref: its row),
 * same tokens, this run: a table row and a TSV row "LABEL envelope-8-sr-PROFILE" each (the
 * ref.tsv columns: seconds = the envelope's, target_seconds = the reference pass's, ratio =
 * envelope / reference; wall, then a -cpu row). A profile that rounds nothing on this model
 * (q8act on float32 weights) costs what f32 does. */
static void profile_envelopes(const char *label, const ref_model *rm, const int32_t *tok,
                              uint32_t n, uint32_t n_prompt, int threads, const row *ref,
                              FILE *out, const char *when)
{
    printf("\n%s: each profile's envelope (8 SR members of the reference's model, %d threads) "
           "vs the reference pass (%.3f s wall, %.3f s CPU), this run:\n"
           "  profile   wall s   CPU s   env/ref wall (goal <= 2)   env/ref CPU\n",
           label, threads, ref->secs, ref->cpu);
    for (uint32_t i = 0; i < lm_profile_count(); ++i) {
        const char *name = lm_profile_at(i)->name;
        double w, c;
        time_sr_members(&w, &c, rm, tok, n, n_prompt, name, threads);
        printf("  %-8s %7.3f %7.3f   %8.2f                   %8.2f\n", name, w, c,
               w / ref->secs, c / ref->cpu);
        fprintf(out, "%s\t%s envelope-8-sr-%s\t%d\t%u\t%u\t0\t%.4f\t0\t%.4f\t%.3f\t0\t0\n",
                when, label, name, threads, REF_DEFAULT_PREC, n, w, ref->secs, w / ref->secs);
        fprintf(out, "%s\t%s envelope-8-sr-%s-cpu\t%d\t%u\t%u\t0\t%.4f\t0\t%.4f\t%.3f\t0\t0\n",
                when, label, name, threads, REF_DEFAULT_PREC, n, c, ref->cpu, c / ref->cpu);
    }
}

/* The envelope's cost against the reference pass (ref: its row) and one blas run of the same
 * tokens: 8 SR members of the reference's float32 model (members in parallel on `threads`
 * threads), one blas run (step=full, `threads` threads) teacher-forced on the same tokens; wall
 * and CPU seconds (all threads) of each, the ratios in this run. */
static void envelope_cost(const char *label, const lm_model *m, const ref_model *rm,
                          const int32_t *tok, uint32_t n, uint32_t n_prompt, int threads,
                          const row *ref, FILE *out, const char *when)
{
    lm_err err = {0};
    double env_s, env_c;
    time_sr_members(&env_s, &env_c, rm, tok, n, n_prompt, "f32", threads);
    hx_config cfg = {.backend = "blas", .step = 0, .threads = (uint32_t)threads};
    hx_run_request rr = {.prompt = tok, .n_prompt = n_prompt, .forced = tok + n_prompt,
                         .n_forced = n - n_prompt, .n_gen = n - n_prompt};
    hx_capture *cap = NULL;
    hx_run_stats st;
    double t0 = lm_now_s();
    double c0 = bu_cpu_s();
    if (hx_run_capture(&cap, &st, m, &cfg, &rr, &err))
        bu_die(PROG, "blas run", &err);
    double blas_s = lm_now_s() - t0, blas_c = bu_cpu_s() - c0;
    hx_capture_free(cap);
    printf("\n%s: envelope (8 SR members of the reference's float32 model, %d threads) vs the "
           "reference pass vs one blas run, same tokens, this run:\n"
           "         envelope  reference  blas     env/ref (goal <= 2)  env/blas (goal <= 10)\n"
           "  wall s %8.3f  %9.3f  %7.3f  %8.2f             %8.1f\n"
           "  CPU s  %8.3f  %9.3f  %7.3f  %8.2f             %8.1f\n",
           label, threads, env_s, ref->secs, blas_s, env_s / ref->secs, env_s / blas_s, env_c, ref->cpu,
           blas_c, env_c / ref->cpu, env_c / blas_c);
    /* TSV, the ref.tsv columns: seconds = the envelope's, target_seconds = the reference
     * pass's, ratio = envelope / reference, ratio_hot = envelope / blas; wall, then CPU */
    fprintf(out, "%s\t%s envelope-8-sr\t%d\t%u\t%u\t0\t%.4f\t0\t%.4f\t%.3f\t0\t%.3f\n",
            when, label, threads, REF_DEFAULT_PREC, n, env_s, ref->secs, env_s / ref->secs,
            env_s / blas_s);
    fprintf(out, "%s\t%s envelope-8-sr-cpu\t%d\t%u\t%u\t0\t%.4f\t0\t%.4f\t%.3f\t0\t%.3f\n",
            when, label, threads, REF_DEFAULT_PREC, n, env_c, ref->cpu, env_c / ref->cpu,
            env_c / blas_c);
}

/* One pass of a real model from $KVDRIFT_CACHE/models (absent: a SKIP line, false): wall and
 * CPU seconds (this process's user + sys) into *wall, *cpu. */
static bool real_pass(const char *file, const char *label, const int32_t *fixed, uint32_t n,
                      uint32_t n_prompt, const char *text_file, bool envelope, int threads,
                      double *wall, double *cpu, FILE *out)
{
    char dir[1024], path[1200];
    lm_err err = {0};
    if (lm_cache_dir(dir, sizeof dir, NULL, &err) != LM_OK)
        bu_die(PROG, "cache folder", &err);
    snprintf(path, sizeof path, "%s/models/%s", dir, file);
    if (access(path, R_OK) != 0) {
        printf("SKIP %s: %s not found (make models)\n", label, path);
        return false;
    }
    lm_model *m;
    ref_model *rm;
    if (lm_model_load(&m, path, &err) || ref_model_open(&rm, path, &err))
        bu_die(PROG, path, &err);
    int32_t *ids = NULL;
    size_t nt = 0;
    if (text_file != NULL) { /* the first n tokens of a text file, BOS added */
        FILE *fp = fopen(text_file, "rb");
        static char buf[1 << 16];
        size_t len = fp ? fread(buf, 1, sizeof buf, fp) : 0;
        if (fp)
            fclose(fp);
        if (len == 0 || lm_tokenize(m->vocab, buf, len, true, &ids, &nt, &err) || nt < n) {
            printf("SKIP %s: %s gives fewer than %u tokens\n", label, text_file, n);
            free(ids);
            lm_model_free(m);
            ref_model_free(rm);
            return false;
        }
        fixed = ids;
    }
    ref_request rq = {.tokens = fixed, .n_tokens = n, .n_prompt = n_prompt, .n_threads = threads};
    /* the cost line's estimate (cli_progress.c), made before the pass as there */
    const double est = ref_macs(rm, &rq) * ref_calibrate_s_per_mac(rm, &rq, threads) / threads +
                       ref_fixed_cost_s(rm, threads);
    double w0 = lm_now_s(), c0 = bu_cpu_s();
    ref_capture c;
    if (ref_compute(&c, rm, &rq, &err))
        bu_die(PROG, label, &err);
    *wall = lm_now_s() - w0;
    *cpu = bu_cpu_s() - c0;
    for (uint64_t i = 0; i < (uint64_t)c.n_pos * c.n_vocab; ++i)
        if (!isfinite(c.logits[i])) {
            fprintf(stderr, "bench_ref: %s: non-finite logit\n", label);
            exit(2);
        }
    ref_capture_free(&c);
    double la[3] = {0};
    getloadavg(la, 3);
    char when[32];
    bu_when(when);
    printf("%-28s %5u tokens %2d threads: %8.2f s wall %8.2f s CPU (load average %.2f); the "
           "cost line said %.2f s (wall / estimate %.2f)\n", label, n, threads, *wall, *cpu, la[0],
           est, est > 0.0 ? *wall / est : 0.0);
    fprintf(out, "%s\t%s\t%d\t%u\t%u\t%.0f\t%.4f\t0\t0\t0\t0\t0\n", when, label, threads,
            REF_DEFAULT_PREC, n, ref_macs(rm, &rq), *wall);
    fprintf(out, "%s\t%s (cost-line estimate)\t%d\t%u\t%u\t%.0f\t%.4f\t0\t0\t0\t0\t0\n", when,
            label, threads, REF_DEFAULT_PREC, n, ref_macs(rm, &rq), est);
    if (envelope) {
        const row ref = {.model = label, .n_tokens = n, .secs = *wall, .cpu = *cpu};
        envelope_cost(label, m, rm, fixed, n, n_prompt, threads, &ref, out, when);
        profile_envelopes(label, rm, fixed, n, n_prompt, threads, &ref, out, when);
    }
    free(ids);
    lm_model_free(m);
    ref_model_free(rm);
    return true;
}

static double mac_count(const ref_hparams *hp, uint64_t n, uint64_t n_pos)
{
    double e = hp->n_embd, q = (double)hp->n_head * hp->head_dim,
           kv = (double)hp->n_head_kv * hp->head_dim, ff = hp->n_ff;
    double lin = e * q + 2 * e * kv + q * e + 3 * e * ff;
    double att = 0;
    for (uint64_t t = 0; t < n; ++t)
        att += 2.0 * hp->n_head * hp->head_dim * (double)(t + 1);
    return hp->n_layer * (lin * (double)n + att) + (double)n_pos * hp->n_vocab * e;
}

static uint32_t argmax(const double *v, uint32_t n)
{
    uint32_t b = 0;
    for (uint32_t i = 1; i < n; ++i)
        if (v[i] > v[b])
            b = i;
    return b;
}

/* Median wall seconds of reps passes; *cpu: the median CPU seconds (all threads). */
static double time_ref(const ref_model *m, const int32_t *tok, uint32_t n, uint32_t n_prompt,
                       int threads, int reps, double *cpu)
{
    ref_request rq = {.tokens = tok, .n_tokens = n, .n_prompt = n_prompt, .n_threads = threads};
    double t[5], c_s[5];
    lm_err err = {0};
    for (int rep = reps > 1 ? -1 : 0; rep < reps; ++rep) {
        ref_capture c;
        double t0 = lm_now_s(), c0 = bu_cpu_s();
        if (ref_compute(&c, m, &rq, &err))
            bu_die(PROG, "ref_compute", &err);
        if (rep >= 0) {
            t[rep] = lm_now_s() - t0;
            c_s[rep] = bu_cpu_s() - c0;
        }
        for (uint64_t i = 0; i < (uint64_t)c.n_pos * c.n_vocab; ++i)
            if (!isfinite(c.logits[i])) {
                fprintf(stderr, "bench_ref: non-finite logit\n");
                exit(2);
            }
        ref_capture_free(&c);
    }
    *cpu = bu_median(c_s, reps);
    return bu_median(t, reps);
}

/* One table row: the reference pass over tok[n] with n_prompt prompt tokens timed (median of
 * reps), its multiply-adds counted with the logits of every position from n_prompt - 1 on. */
static row measure(const char *model, const ref_model *m, const int32_t *tok, uint32_t n,
                   uint32_t n_prompt, int threads, int reps)
{
    row r = {.model = model, .n_tokens = n, .macs = mac_count(&m->hp, n, n - n_prompt + 1)};
    r.secs = time_ref(m, tok, n, n_prompt, threads, reps, &r.cpu);
    return r;
}

int main(int argc, char **argv)
{
    const int usage_rc = bu_check_args(argc, argv, "bench_ref OUTDIR [THREADS]");
    if (usage_rc >= 0)
        return usage_rc;
    const char *outdir = argv[1];
    int threads = argc == 3 ? atoi(argv[2]) : (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (threads < 1)
        threads = 1;
    bu_make_outdir(PROG, outdir);
    char tsv_path[1024];
    FILE *out = bu_tsv_open(PROG, outdir, "ref.tsv",
                            "when\tmodel\tthreads\tprec\tn_tokens\tmacs\tseconds\t"
                            "ns_per_mac_1core\ttarget_seconds\tratio\tns_per_mac_hot\tratio_hot\n",
                            tsv_path, sizeof tsv_path);

    double hot127 = ns_per_mac(127, HOT), c127 = ns_per_mac(127, FRESH),
           dot127 = ns_per_mac(127, DOT), c128 = ns_per_mac(128, FRESH),
           dot128 = ns_per_mac(128, DOT), x127 = ns_per_mac(127, DOTX),
           x254 = ns_per_mac(254, DOTX), dot254 = ns_per_mac(254, DOT);
    printf("single-core ns per multiply-add        127 bits  128 bits  254 bits\n"
           "  mul+add, fresh rows (target unit)    %8.1f  %8.1f\n"
           "  ref_dot (MPFR, split-sign)           %8.1f  %8.1f  %8.1f\n"
           "  ref_dx_dot (exact split, %-6s)     %8.2f            %8.2f\n"
           "  mul+add, one row repeated (hot)      %8.1f\n"
           "speed-up of the exact split over mul+add at 127 bits: %.1fx (goal >= 20x); "
           "over ref_dot at 254 bits: %.1fx\n"
           "default precision %u bits\n", c127, c128, dot127, dot128, dot254, ref_dx_kernel(),
           x127, x254, hot127, c127 / x127, dot254 / x254, REF_DEFAULT_PREC);
    const double e_ref = ns_per_elem_fn(ref_exp, NULL), e_mpfr = ns_per_elem_fn(NULL, mpfr_exp),
                 th_ref = ns_per_elem_fn(ref_tanh, NULL),
                 th_mpfr = ns_per_elem_fn(NULL, mpfr_tanh);
    const double vv_x = ns_per_mac_vv(true), vv_m = ns_per_mac_vv(false);
    printf("elementwise, CPU ns per call at 127 bits: exp %.0f (mpfr_exp %.0f, %.1fx), tanh %.0f "
           "(mpfr_tanh %.0f, %.1fx)\n"
           "attention q.k, 64 elements, CPU ns per multiply-add: ref_dx_dot_vv %.2f, ref_dot "
           "%.1f (%.1fx)\n", e_ref, e_mpfr, e_mpfr / e_ref, th_ref, th_mpfr, th_mpfr / th_ref,
           vv_x, vv_m, vv_m / vv_x);
    {
        char w0[32];
        bu_when(w0);
        fprintf(out, "%s\texp-vs-mpfr_exp\t1\t127\t0\t0\t0\t%.1f\t0\t%.3f\t%.1f\t0\n", w0,
                e_ref, e_mpfr / e_ref, e_mpfr);
        fprintf(out, "%s\ttanh-vs-mpfr_tanh\t1\t127\t0\t0\t0\t%.1f\t0\t%.3f\t%.1f\t0\n", w0,
                th_ref, th_mpfr / th_ref, th_mpfr);
        fprintf(out, "%s\tdot_vv-vs-ref_dot\t1\t127\t64\t0\t0\t%.2f\t0\t%.3f\t%.1f\t0\n", w0,
                vv_x, vv_m / vv_x, vv_m);
    }
    fflush(stdout);

    row rows[3];
    int nrows = 0;
    lm_err err = {0};
    char path[1024];
    bu_model_path(path, sizeof path, "stories260K.gguf");
    if (access(path, R_OK) == 0) {
        lm_model *m;
        ref_model *rm;
        if (lm_model_load(&m, path, &err) || ref_model_open(&rm, path, &err))
            bu_die(PROG, path, &err);
        /* check first: "Once upon a time" -> "," (432) */
        const int32_t once[5] = {1, 403, 407, 261, 378};
        ref_request rq = {.tokens = once, .n_tokens = 5, .n_prompt = 5, .n_threads = threads};
        ref_capture c;
        if (ref_compute(&c, rm, &rq, &err))
            bu_die(PROG, "stories260K check", &err);
        if (argmax(c.logits, c.n_vocab) != 432) {
            fprintf(stderr, "bench_ref: stories260K check failed (argmax %u, want 432)\n",
                    argmax(c.logits, c.n_vocab));
            return 2;
        }
        ref_capture_free(&c);
        /* a 115-token prompt: BOS + a story, tokenized by the model's own vocabulary */
        const char *story = "Once upon a time, there was a little girl named Lily. She loved to "
                            "play outside in the park. One day, she saw a big, red ball. She "
                            "wanted to play with it, but it was too high. Lily asked her mom to "
                            "help her. Her mom said yes and they played together all day long. "
                            "They were very happy and went home to eat a yummy cake.";
        int32_t *ids;
        size_t n;
        if (lm_tokenize(m->vocab, story, strlen(story), true, &ids, &n, &err))
            bu_die(PROG, "tokenize", &err);
        if (n < 115) {
            fprintf(stderr, "bench_ref: story tokenizes to %zu < 115 tokens\n", n);
            return 2;
        }
        rows[nrows++] = measure("stories260K", rm, ids, 115, 115, threads, 3);
        free(ids);
        lm_model_free(m);
        ref_model_free(rm);
    } else {
        printf("SKIP stories260K: %s not found (set KVDRIFT_MODELS)\n", path);
    }

    char dir[] = "/tmp/kvdrift-bench-ref-XXXXXX";
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "bench_ref: mkdtemp: %s\n", strerror(errno));
        return 2;
    }
    snprintf(path, sizeof path, "%s/smollm2-135m.gguf", dir);
    if (hx_synth_write(path, "smollm2-135m", 0, LM_TYPE_F32, &err))
        bu_die(PROG, "synth smollm2-135m", &err);
    lm_model *m;
    ref_model *rm;
    if (lm_model_load(&m, path, &err) || ref_model_open(&rm, path, &err))
        bu_die(PROG, path, &err);
    int32_t tok[LONG_PROMPT];
    for (int i = 0; i < LONG_PROMPT; ++i)
        tok[i] = (int32_t)((1 + 7919u * (unsigned)i) % m->hp.n_vocab);
    /* the figure: a 30-token prompt and 16 teacher-forced positions (goal <= 5 s on 2
     * idle cores), then the envelope's cost on the same tokens, then a long prompt */
    rows[nrows++] = measure("smollm2 30+16", rm, tok, 46, 30, threads, 1);
    char when0[32];
    bu_when(when0);
    envelope_cost("smollm2 30+16", m, rm, tok, 46, 30, threads, &rows[nrows - 1], out, when0);
    profile_envelopes("smollm2 30+16", rm, tok, 46, 30, threads, &rows[nrows - 1], out, when0);
    rows[nrows++] = measure("smollm2 long", rm, tok, LONG_PROMPT, LONG_PROMPT, threads, 1);
    lm_model_free(m);
    ref_model_free(rm);
    unlink(path); /* kept until here: the reference reads the file itself */
    rmdir(dir);

    /* the real models of the goals */
    double wall, cpu;
    int32_t chat[46];
    for (int i = 0; i < 46; ++i) /* 30 prompt + 16 forced ids, fixed */
        chat[i] = (int32_t)(1 + (7919u * (unsigned)i) % 49151u);
    real_pass("SmolLM2-135M-Instruct.Q4_1.gguf", "smollm2-135m-q4_1 30+16", chat, 46, 30, NULL,
              true, threads, &wall, &cpu, out);
    real_pass("gemma-3-270m-q4_k_m.gguf", "gemma-3-270m 600-token prompt", NULL, 600, 600,
              "tests/data/gemma3/long_prompt.txt", false, threads, &wall, &cpu, out);

    char when[32];
    bu_when(when);
    printf("\n%-14s %7s %8s %12s %10s %10s %7s %9s\n", "model", "tokens", "threads",
           "mult-adds", "seconds", "target s", "ratio", "ratio/hot");
    for (int i = 0; i < nrows; ++i) {
        rows[i].target = rows[i].macs * c127 * 1e-9 / threads;
        double hot_target = rows[i].macs * hot127 * 1e-9 / threads;
        printf("%-14s %7u %8d %12.3e %10.3f %10.3f %7.2f %9.2f\n", rows[i].model,
               rows[i].n_tokens, threads, rows[i].macs, rows[i].secs, rows[i].target,
               rows[i].secs / rows[i].target, rows[i].secs / hot_target);
        fprintf(out, "%s\t%s\t%d\t%u\t%u\t%.0f\t%.4f\t%.2f\t%.4f\t%.3f\t%.2f\t%.3f\n", when,
                rows[i].model, threads, REF_DEFAULT_PREC, rows[i].n_tokens, rows[i].macs,
                rows[i].secs, c127, rows[i].target, rows[i].secs / rows[i].target, hot127,
                rows[i].secs / hot_target);
    }
    printf("ratio = seconds / (mult-adds x %.1f ns / %d threads), ns from fresh rows; ratio/hot uses "
           "the repeated-row %.1f ns; goal <= 2\n", c127, threads, hot127);
    fclose(out);
    printf("appended to %s\n", tsv_path);
    return 0;
}
