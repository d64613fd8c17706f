/* bench_engine.c — engine throughput against llama.cpp and this machine's own limits.
 *
 * usage: bench_engine OUTDIR [MODEL.gguf]
 * Without MODEL, synthesizes the smollm2-135m preset in F32 (harness/plan/synth.h) into a temp
 * folder. At 2 threads it measures
 *   pp512  prefill tokens/s of a 512-token prompt in one chunk
 *   tg128  decode tokens/s over 128 tokens from an empty cache
 * for the blas and det backends, blis where BLIS is installed (a SKIP line otherwise), each
 * with the kernel set it ran (OpenBLAS's core, det's ISA path, BLIS's configuration: a table
 * column and the TSV's last field; a kernel set older than the CPU also prints the one-line
 * warning run and sweep print), and, when llama.cpp's llama-bench is named by
 * $KVDRIFT_LLAMA_BENCH or found on PATH, for llama.cpp on the same model file (its defaults,
 * -t 2, one repetition per call, after its own warm-up), with the ceilings they are judged
 * against (ceiling.h), each turned into a bound in tokens/s:
 *   sgemm GFLOP/s at the model's own projection shapes with M = 512 (OpenBLAS, 2 threads) and
 *     the FMA peak of 2 threads (registers only); pp bound = rate / FLOPs per token, FLOPs per
 *     token = 2 x (layer weights) plus the causal attention products averaged over the 512
 *     positions (4 n_head head_dim (513/2) per layer); the output projection is excluded
 *     (computed for the last position only). The FMA-peak bound is physical: no prefill of
 *     this model runs faster here.
 *   read bandwidth of 2 threads, each streaming its own half of a 512 MiB buffer in 1, 2, 4 or 8
 *     sequential streams of 32-byte loads, on 4 KiB pages and on transparent huge pages (the
 *     fastest of the eight is the ceiling); tg bound = bandwidth / bytes per token, bytes =
 *     every layer weight + the output matrix (float32), the bytes a decode step must stream
 *     from memory at least once.
 * Each timed engine or llama.cpp pass starts after a 0.15 s pause (settle: OpenBLAS's threads
 * spin on after a blas pass). Everything is interleaved within each of REPS repetitions
 * (sgemm, pp512 of each backend, llama.cpp's pp512, FMA peak, the reads, tg128 of each
 * backend, llama.cpp's tg128), so that a shared machine's load hits all of them alike; each
 * figure is the median of the REPS, and every ratio printed (det / blas, fastest engine
 * backend / llama.cpp, fraction of the ceiling) is a ratio of medians from this one run. The
 * llama.cpp targets are judged on the median of the paired ratios (the engine's pass /
 * llama.cpp's pass that follows it, one per repetition), with their range and the ratio of
 * medians printed beside it: a shared VM's memory bandwidth and load move between
 * repetitions, and a pair shares its repetition's conditions. For each llama.cpp target it
 * also says whether the speed it asks for is over a physical bound, taken from the best of the
 * REPS FMA and read passes (a shared machine's load only lowers them). The
 * load average before and after is printed with them, and a caution beside the llama.cpp
 * ratios when the load before the run is at least half the CPUs (llama.cpp's busy-waiting
 * threads lose more to other work). Then the same pp512 / tg128 for stories260K (engine only)
 * when the shared models are present. The result is checked before anything is timed (finite
 * logits, argmax in range, each backend within 1e-3 relative of naive on a short prompt).
 * Prints one table and appends TSV lines to OUTDIR/engine.tsv. Never fails on speed: the
 * targets line says met or missed. */
#include "ceiling.h"
#include "kvd_engine.h"
#include "plan/synth.h"
#include "util.h"

#include <cblas.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define THREADS 2
#define REPS 9 /* llama.cpp's pp512 moved by up to 1.3x between repetitions on a shared 2-core VM */
#define PP 512
#define TG 128

#define PROG "bench_engine"

/* ---- ceilings ---- */

#define BW_BYTES ((size_t)512 << 20) /* each read buffer: 16x a 32 MiB L3 */
#define N_STREAMS 4                  /* read loops of 1, 2, 4 and 8 streams per thread */
static const int streams_of[N_STREAMS] = {1, 2, 4, 8};

/* The ceilings, measured with buffers allocated once so that each measurement can be
 * interleaved with the engine's runs (on a shared machine, contention then hits both alike). */
typedef struct ceilings {
    int shapes[7][2]; /* [N][K] of each projection of one layer */
    float *a;         /* [PP][max K] */
    float *w;         /* [max N * K] */
    float *c;         /* [PP][max N] */
    bc_buf bw[2];     /* read buffers: [0] 4 KiB pages, [1] transparent huge pages asked for */
} ceilings;

static void ceilings_init(ceilings *cl, const lm_hparams *hp)
{
    const int q_dim = (int)(hp->n_head * hp->head_dim), kv_dim = (int)(hp->n_head_kv * hp->head_dim);
    const int d = (int)hp->n_embd, ff = (int)hp->n_ff;
    const int shapes[7][2] = {{q_dim, d}, {kv_dim, d}, {kv_dim, d}, {d, q_dim}, {ff, d}, {ff, d}, {d, ff}};
    memcpy(cl->shapes, shapes, sizeof shapes);
    size_t max_w = 0, max_k = 0, max_n = 0;
    for (int i = 0; i < 7; ++i) {
        const size_t n = (size_t)shapes[i][0], k = (size_t)shapes[i][1];
        max_w = n * k > max_w ? n * k : max_w;
        max_k = k > max_k ? k : max_k;
        max_n = n > max_n ? n : max_n;
    }
    cl->a = malloc(PP * max_k * sizeof *cl->a);
    cl->w = malloc(max_w * sizeof *cl->w);
    cl->c = malloc(PP * max_n * sizeof *cl->c);
    if (!cl->a || !cl->w || !cl->c) {
        fprintf(stderr, "bench_engine: out of memory for the ceiling measurements\n");
        exit(2);
    }
    for (size_t i = 0; i < PP * max_k; ++i)
        cl->a[i] = (float)((i * 7919) % 1000) * 1e-3f - 0.5f;
    for (size_t i = 0; i < max_w; ++i)
        cl->w[i] = (float)((i * 104729) % 1000) * 1e-3f - 0.5f;
    bc_buf_init(PROG, &cl->bw[0], BW_BYTES, false);
    bc_buf_init(PROG, &cl->bw[1], BW_BYTES, true);
}

static void ceilings_free(ceilings *cl)
{
    free(cl->a), free(cl->w), free(cl->c);
    bc_buf_free(&cl->bw[0]);
    bc_buf_free(&cl->bw[1]);
}

/* One pass of sgemm C[PP][N] = A[PP][K] . W[N][K]^T over a layer's projection shapes:
 * GFLOP/s of the whole set (total FLOPs / total time), as the forward pass uses them. Each
 * shape is called once untimed first (OpenBLAS threads awake, W in cache as the forward
 * pass's weights are not: the figure is the kernel's best case, a fair ceiling). */
static double sgemm_pass(ceilings *cl)
{
    openblas_set_num_threads(THREADS);
    double flops = 0, secs = 0;
    for (int s = 0; s < 7; ++s) {
        const int n = cl->shapes[s][0], k = cl->shapes[s][1];
        for (int timed = 0; timed < 2; ++timed) {
            const double t0 = lm_now_s();
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, PP, n, k, 1.0f, cl->a, k, cl->w, k,
                        0.0f, cl->c, n);
            if (timed)
                secs += lm_now_s() - t0;
        }
        flops += 2.0 * PP * n * k;
    }
    return flops / secs * 1e-9;
}

/* ---- the engine ---- */

static void check_logits(const char *what, const float *lg, uint32_t n_vocab)
{
    for (uint32_t i = 0; i < n_vocab; ++i)
        if (!isfinite(lg[i])) {
            fprintf(stderr, "bench_engine: %s: logit %u is not finite\n", what, i);
            exit(2);
        }
    const int32_t a = lm_argmax(lg, n_vocab);
    if (a < 0 || (uint32_t)a >= n_vocab) {
        fprintf(stderr, "bench_engine: %s: argmax %d out of range\n", what, (int)a);
        exit(2);
    }
}

/* backend vs naive on an 8-token prompt: max |diff| <= 1e-3 * max(1, max|logit|) — the same
 * float32 sums in other orders differ by ~1e-6 relative; a broken kernel by far more. */
static void check_against_naive(const lm_model *m, const int32_t *tok, const char *backend)
{
    lm_err err = {0};
    lm_ctx *cn = NULL, *cb = NULL;
    const lm_ctx_params pn = {.backend = "naive", .n_threads = 1, .n_ctx = 8};
    const lm_ctx_params pb = {.backend = backend, .n_threads = THREADS, .n_ctx = 8};
    float *ln = malloc(m->hp.n_vocab * sizeof *ln), *lb = malloc(m->hp.n_vocab * sizeof *lb);
    if (!ln || !lb || lm_ctx_create(&cn, m, &pn, &err) || lm_ctx_create(&cb, m, &pb, &err) ||
        lm_prefill(cn, tok, 8, 0, ln, &err) || lm_prefill(cb, tok, 8, 0, lb, &err))
        bu_die(PROG, "check", &err);
    double mx = 1, worst = 0;
    for (uint32_t i = 0; i < m->hp.n_vocab; ++i) {
        mx = fmax(mx, fabs((double)ln[i]));
        worst = fmax(worst, fabs((double)ln[i] - (double)lb[i]));
    }
    if (!(worst <= 1e-3 * mx)) {
        fprintf(stderr, "bench_engine: %s differs from naive by %g (max |logit| %g)\n", backend,
                worst, mx);
        exit(2);
    }
    free(ln), free(lb);
    lm_ctx_free(cn);
    lm_ctx_free(cb);
}

/* ---- llama.cpp's llama-bench, when there is one ---- */

/* $KVDRIFT_LLAMA_BENCH, else "llama-bench" when it is on PATH, else NULL. */
static const char *llama_bench_path(void)
{
    const char *e = getenv("KVDRIFT_LLAMA_BENCH");
    if (e != NULL && *e)
        return access(e, X_OK) == 0 ? e : NULL;
    return system("command -v llama-bench >/dev/null 2>&1") == 0 ? "llama-bench" : NULL;
}

/* Runs llama-bench on model for one test (pp: -p PP -n 0; else -p 0 -n TG), 2 threads, one
 * repetition after its warm-up, JSON output, and reads its tokens/s; 0 when it cannot run or
 * its output has no such row. */
static double llama_bench(const char *exe, const char *model, bool pp)
{
    char cmd[2048];
    snprintf(cmd, sizeof cmd, "'%s' -m '%s' -p %d -n %d -t %d -r 1 -o json 2>/dev/null", exe,
             model, pp ? PP : 0, pp ? 0 : TG, THREADS);
    FILE *f = popen(cmd, "r");
    if (f == NULL)
        return 0;
    size_t cap = 1 << 16, len = 0;
    char *buf = malloc(cap);
    for (size_t got; buf != NULL && (got = fread(buf + len, 1, cap - 1 - len, f)) > 0;) {
        len += got;
        if (len + 1 == cap) {
            char *nb = realloc(buf, cap *= 2);
            if (nb == NULL)
                free(buf);
            buf = nb;
        }
    }
    const int rc = pclose(f);
    if (buf == NULL || rc != 0) {
        free(buf);
        return 0;
    }
    buf[len] = '\0';
    json_t *root = json_loads(buf, 0, NULL);
    free(buf);
    double ts = 0;
    for (size_t i = 0; json_is_array(root) && i < json_array_size(root); ++i) {
        const json_t *o = json_array_get(root, i);
        const json_int_t np = json_integer_value(json_object_get(o, "n_prompt"));
        const json_int_t ng = json_integer_value(json_object_get(o, "n_gen"));
        if ((pp && np == PP && ng == 0) || (!pp && np == 0 && ng == TG))
            ts = json_number_value(json_object_get(o, "avg_ts"));
    }
    json_decref(root);
    return ts;
}

/* The engine backends timed: blas and det always, blis where libblis.so.4 is installed (its
 * absence is a SKIP line); n_be of them run. blas stays first: "vs blas" divides by it. */
#define N_BE 3
static const char *const backends[N_BE] = {"blas", "det", "blis"};
static int n_be = N_BE;
/* The kernel set each ran (lm_backend_kernels_of: OpenBLAS's core, det's ISA path, BLIS's
 * configuration), for the table and the TSV. */
static char kernels[N_BE][48];

/* backend / llama.cpp per repetition: each ratio's two passes ran seconds apart, so a change of
 * the machine's load or memory bandwidth between repetitions (a shared VM's moves within one
 * run) cancels in it, which it does not in a ratio of medians over the whole run. */
typedef struct paired {
    int n;                   /* repetitions in which llama.cpp ran (0: none) */
    double median, min, max;
} paired;

/* The paired ratios num[r] / den[r] over the repetitions with den[r] > 0. */
static paired pair_ratios(const double *num, const double *den, int reps)
{
    double q[REPS];
    paired p = {0};
    for (int r = 0; r < reps; ++r)
        if (den[r] > 0)
            q[p.n++] = num[r] / den[r];
    if (p.n > 0) {
        p.median = bu_median(q, p.n); /* sorts q */
        p.min = q[0];
        p.max = q[p.n - 1];
    }
    return p;
}

typedef struct result {
    double pp[N_BE], tg[N_BE]; /* tokens/s per backend, medians */
    double lpp, ltg;           /* llama.cpp's, medians (0 when not run or it failed) */
    paired pair_pp[N_BE], pair_tg[N_BE]; /* backend / llama.cpp, repetition by repetition */
    /* ceilings measured between the engine's runs, medians (0 when not asked) */
    double gflops;             /* sgemm at the model's shapes */
    double fma;                /* FMA peak, GFLOP/s */
    double read[2][N_STREAMS]; /* GB/s: [4 KiB pages, huge pages asked for][streams_of] */
    double fma_best, read_best; /* the highest of the repetitions (and of the read loops) */
} result;

/* What run_engine measures besides the engine: the ceilings and llama.cpp (NULLs: neither). */
typedef struct beside {
    ceilings *cl;
    const char *llama, *model; /* llama-bench and the model file, or NULL */
} beside;

static double time_prefill(lm_ctx *c, const int32_t *tok, float *lg, const char *label, bool check)
{
    lm_err err = {0};
    lm_ctx_reset(c);
    const double t0 = lm_now_s();
    if (lm_prefill(c, tok, PP, 0, lg, &err) != LM_OK)
        bu_die(PROG, label, &err);
    const double dt = lm_now_s() - t0;
    if (check)
        check_logits(label, lg, lm_ctx_model(c)->hp.n_vocab);
    return PP / dt;
}

static double time_decode(lm_ctx *c, float *lg, const char *label, bool check)
{
    lm_err err = {0};
    const uint32_t nv = lm_ctx_model(c)->hp.n_vocab;
    lm_ctx_reset(c);
    int32_t id = 1;
    const double t0 = lm_now_s();
    for (int i = 0; i < TG; ++i) {
        if (lm_forward(c, &id, 1, LM_LOGITS_LAST, lg, &err) != LM_OK)
            bu_die(PROG, label, &err);
        id = lm_argmax(lg, nv);
    }
    const double dt = lm_now_s() - t0;
    if (check)
        check_logits(label, lg, nv);
    return TG / dt;
}

/* Waits SETTLE_S before a timed pass, so that no thread of the stage before still competes for
 * the cores: OpenBLAS's idle workers spin for 2^28 time-stamp-counter ticks after each sgemm or
 * sgemv before they sleep (its THREAD_TIMEOUT default, 28; OPENBLAS_THREAD_TIMEOUT sets it),
 * 0.1 s at 2.6 GHz, which would otherwise be charged to whichever pass follows a blas one. */
#define SETTLE_S 0.15
static void settle(void)
{
    usleep((useconds_t)(SETTLE_S * 1e6));
}

/* llama.cpp's pp512 (pp) or tg128 on the model, after settle(); <= 0 when it failed. */
static double llama_pass(const beside *bs, bool pp)
{
    settle();
    return llama_bench(bs->llama, bs->model, pp);
}

/* The median of the v[i] > 0 (the repetitions that ran), 0 when there is none; sorts v. */
static double median_of_positive(double *v, int n)
{
    int k = 0;
    for (int i = 0; i < n; ++i)
        if (v[i] > 0)
            v[k++] = v[i];
    return k > 0 ? bu_median(v, k) : 0;
}

/* Every backend's pp512 and tg128, the backends alternating within each repetition with the
 * ceilings and llama.cpp between them, so that a shared machine's load hits all alike. */
static result run_engine(const lm_model *m, const char *label, const beside *bs)
{
    lm_err err = {0};
    const uint32_t nv = m->hp.n_vocab;
    int32_t *tok = malloc(PP * sizeof *tok);
    float *lg = malloc(nv * sizeof *lg);
    if (!tok || !lg) {
        fprintf(stderr, "bench_engine: out of memory\n");
        exit(2);
    }
    uint64_t x = 12345;
    tok[0] = 1;
    for (int i = 1; i < PP; ++i) { /* fixed pseudo-random ids, control tokens avoided */
        x = x * 6364136223846793005u + 1442695040888963407u;
        tok[i] = (int32_t)(3 + (x >> 33) % (nv - 3));
    }
    lm_ctx *c[N_BE] = {NULL};
    for (int b = 0; b < n_be; ++b) {
        check_against_naive(m, tok, backends[b]);
        const lm_ctx_params p = {.backend = backends[b], .n_threads = THREADS, .n_ctx = PP + TG};
        if (lm_ctx_create(&c[b], m, &p, &err) != LM_OK)
            bu_die(PROG, label, &err);
    }
    double pp[N_BE][REPS], tg[N_BE][REPS], gf[REPS], fm[REPS];
    double lpp[REPS] = {0}, ltg[REPS] = {0}; /* 0: llama.cpp did not run or failed */
    double rd[2][N_STREAMS][REPS];
    for (int r = -1; r < REPS; ++r) { /* r = -1: warm-up and result check, not timed */
        if (bs->cl != NULL && r >= 0)
            gf[r] = sgemm_pass(bs->cl);
        for (int b = 0; b < n_be; ++b) {
            settle();
            const double v = time_prefill(c[b], tok, lg, label, r < 0);
            if (r >= 0)
                pp[b][r] = v;
        }
        double v;
        if (bs->llama != NULL && r >= 0 && (v = llama_pass(bs, true)) > 0)
            lpp[r] = v;
        if (bs->cl != NULL && r >= 0) {
            fm[r] = bc_fma_pass(THREADS);
            for (int h = 0; h < 2; ++h)
                for (int s = 0; s < N_STREAMS; ++s)
                    rd[h][s][r] = bc_read_pass(&bs->cl->bw[h], THREADS, streams_of[s]);
        }
        for (int b = 0; b < n_be; ++b) {
            settle();
            v = time_decode(c[b], lg, label, r < 0);
            if (r >= 0)
                tg[b][r] = v;
        }
        if (bs->llama != NULL && r >= 0 && (v = llama_pass(bs, false)) > 0)
            ltg[r] = v;
    }
    result res = {.gflops = 0};
    for (int b = 0; b < n_be; ++b) { /* the pairs before bu_median sorts the series */
        res.pair_pp[b] = pair_ratios(pp[b], lpp, REPS);
        res.pair_tg[b] = pair_ratios(tg[b], ltg, REPS);
    }
    for (int b = 0; b < n_be; ++b) {
        res.pp[b] = bu_median(pp[b], REPS);
        res.tg[b] = bu_median(tg[b], REPS);
        lm_ctx_free(c[b]);
    }
    if (bs->cl != NULL) {
        res.gflops = bu_median(gf, REPS);
        res.fma = bu_median(fm, REPS);
        res.fma_best = fm[REPS - 1]; /* bu_median sorted fm */
        for (int h = 0; h < 2; ++h)
            for (int s = 0; s < N_STREAMS; ++s) {
                res.read[h][s] = bu_median(rd[h][s], REPS);
                res.read_best = fmax(res.read_best, rd[h][s][REPS - 1]);
            }
    }
    res.lpp = median_of_positive(lpp, REPS);
    res.ltg = median_of_positive(ltg, REPS);
    free(tok), free(lg);
    return res;
}

/* 2 x multiply-adds per token of every layer projection, plus causal attention averaged over
 * a PP-token prompt (QK and PV: 2 x 2 x n_head x head_dim per attended key, (PP+1)/2 keys). */
static double flops_per_token(const lm_hparams *hp)
{
    const double q = (double)hp->n_head * hp->head_dim, kv = (double)hp->n_head_kv * hp->head_dim;
    const double d = hp->n_embd, ff = hp->n_ff;
    const double w = d * q + 2 * d * kv + q * d + 3 * d * ff;
    return hp->n_layer * (2 * w + 4 * q * (PP + 1) / 2.0);
}

static double bytes_per_token(const lm_hparams *hp)
{
    const double q = (double)hp->n_head * hp->head_dim, kv = (double)hp->n_head_kv * hp->head_dim;
    const double d = hp->n_embd, ff = hp->n_ff;
    const double w = d * q + 2 * d * kv + q * d + 3 * d * ff;
    return 4.0 * (hp->n_layer * w + (double)hp->n_vocab * d);
}

/* The 1-minute load average from /proc/loadavg, or -1 where there is none. */
static double load_avg(void)
{
    double v = -1;
    FILE *f = fopen("/proc/loadavg", "r");
    if (f != NULL) {
        if (fscanf(f, "%lf", &v) != 1)
            v = -1;
        fclose(f);
    }
    return v;
}

/* One row of the table: tok/s, then value / blas, value / llama.cpp (when measured) and the
 * fraction of the ceiling (when given). */
static void row(const char *model, const char *who, const char *kern, const char *test, double v,
                double blas, double llama, double bound)
{
    char vl[16] = "-", vb[16] = "-";
    if (llama > 0)
        snprintf(vl, sizeof vl, "%.2fx", v / llama);
    if (bound > 0)
        snprintf(vb, sizeof vb, "%.0f%%", 100 * v / bound);
    printf("%-18s %-10s %-12s %-6s %9.1f %8.2fx %9s %10.1f %8s\n", model, who, kern, test, v,
           v / blas, vl, bound, vb);
}

/* "met" or "MISSED" for value >= target. */
static const char *verdict(double value, double target)
{
    return value >= target ? "met" : "MISSED";
}

/* Whether a speed of `need` tok/s is excluded by a physical upper bound of `bound` tok/s
 * (a bound only excludes: a speed under it may still be out of reach). */
static const char *reach(double need, double bound)
{
    return need <= bound ? "under the bound (not excluded)"
                         : "over the bound (physically impossible here)";
}

/* One TSV line; kern: the kernel set the line's backend ran ("" for none). */
static void tsvk(FILE *f, const char *model, const char *backend, const char *kern,
                 const char *test, double value, const char *unit, double bound)
{
    char when[32];
    bu_when(when);
    if (bound > 0)
        fprintf(f, "%s\t%s\t%s\t%d\t%s\t%.2f\t%s\t%.2f\t%.3f\t%s\n", when, model, backend,
                THREADS, test, value, unit, bound, value / bound, kern);
    else
        fprintf(f, "%s\t%s\t%s\t%d\t%s\t%.2f\t%s\t\t\t%s\n", when, model, backend, THREADS, test,
                value, unit, kern);
}

static void tsv(FILE *f, const char *model, const char *backend, const char *test, double value,
                const char *unit, double bound)
{
    tsvk(f, model, backend, "", test, value, unit, bound);
}

int main(int argc, char **argv)
{
    const int usage_rc = bu_check_args(argc, argv, "bench_engine OUTDIR [MODEL.gguf]");
    if (usage_rc >= 0)
        return usage_rc;
    const char *outdir = argv[1];
    bu_make_outdir(PROG, outdir);
    char tsv_path[1024];
    FILE *out = bu_tsv_open(PROG, outdir, "engine.tsv",
                            "when\tmodel\tbackend\tthreads\ttest\tvalue\tunit\tbound\tfraction\tkernels\n",
                            tsv_path, sizeof tsv_path);

    lm_err err = {0};
    char tmpdir[512], model_path[512];
    const char *label =
        bu_model_or_smollm2(PROG, argc, argv, model_path, tmpdir, sizeof model_path);
    lm_model *m = NULL;
    if (lm_model_load(&m, model_path, &err) != LM_OK)
        bu_die(PROG, model_path, &err);

    const char *lb = llama_bench_path();
    if (lm_backend_probe(backends[N_BE - 1], &err) != LM_OK) {
        printf("%s: SKIP (%s)\n", backends[N_BE - 1], err.msg);
        n_be = N_BE - 1;
    }
    bu_backend_kernels(PROG, backends, n_be, kernels);
    printf("measuring pp%d and tg%d with %s, %s%s%s%s, interleaved with sgemm at the model's "
           "shapes (M = %d), the FMA peak and read bandwidth (%zu MiB, 4 KiB and huge pages), %d "
           "threads, median of %d\n", PP, TG, backends[0], backends[1], n_be > 2 ? ", " : "",
           n_be > 2 ? backends[2] : "", lb != NULL ? " and llama.cpp" : "", PP, BW_BYTES >> 20,
           THREADS, REPS);
    ceilings cl;
    ceilings_init(&cl, &m->hp);
    const double load0 = load_avg();
    const beside bs = {&cl, lb, model_path};
    const result r = run_engine(m, label, &bs);
    const double load1 = load_avg();
    const double cl_huge = cl.bw[1].huge_bytes;
    ceilings_free(&cl);
    bu_model_remove(model_path, tmpdir);
    const double fpt = flops_per_token(&m->hp), bpt = bytes_per_token(&m->hp);
    int best[2] = {0, 0}; /* the fastest read loop (streams_of index) on each kind of page */
    for (int h = 0; h < 2; ++h)
        for (int s = 1; s < N_STREAMS; ++s)
            if (r.read[h][s] > r.read[h][best[h]])
                best[h] = s;
    const int rh = r.read[1][best[1]] > r.read[0][best[0]], rs = best[rh];
    const double gbs = r.read[rh][rs];
    const double pp_bound = r.gflops * 1e9 / fpt, fma_bound = r.fma * 1e9 / fpt;
    const double tg_bound = gbs * 1e9 / bpt;
    /* the physical bounds: the least disturbed repetition (load only ever lowers them) */
    const double fma_phys = r.fma_best * 1e9 / fpt, read_phys = r.read_best * 1e9 / bpt;
    const bool have_llama = r.lpp > 0 && r.ltg > 0;
    int bp = 0, bt = 0; /* the fastest backend */
    for (int b = 1; b < n_be; ++b) {
        bp = r.pp[b] > r.pp[bp] ? b : bp;
        bt = r.tg[b] > r.tg[bt] ? b : bt;
    }

    printf("\n%-18s %-10s %-12s %-6s %9s %9s %9s %10s %8s\n", "model", "who", "kernels", "test",
           "tok/s", "vs blas", "vs llama", "bound", "of bound");
    for (int t = 0; t < 2; ++t) {
        const char *test = t == 0 ? "pp512" : "tg128";
        const double *v = t == 0 ? r.pp : r.tg, bound = t == 0 ? pp_bound : tg_bound;
        const double lv = have_llama ? (t == 0 ? r.lpp : r.ltg) : 0;
        for (int b = 0; b < n_be; ++b) {
            row(label, backends[b], kernels[b], test, v[b], v[0], lv, bound);
            tsvk(out, label, backends[b], kernels[b], test, v[b], "tok/s", bound);
        }
        if (have_llama) {
            row(label, "llama.cpp", "-", test, lv, v[0], lv, bound);
            tsv(out, label, "llama.cpp", test, lv, "tok/s", bound);
        }
    }
    char huge[64] = "huge pages asked for";
    if (cl_huge >= 0)
        snprintf(huge, sizeof huge, "huge pages (%.0f of %.0f MiB)", cl_huge / 1048576.0,
                 (double)BW_BYTES / 1048576.0);
    char head[64];
    snprintf(head, sizeof head, "ceiling (2 threads, median of %d)", REPS);
    printf("\n%-44s %13s %-11s %13s %11s\n", head, "figure", "",
           "per token", "bound tok/s");
    char what[96];
    snprintf(what, sizeof what, "sgemm, model shapes, M = 512 (OpenBLAS %s)", kernels[0]);
    printf("%-44s %13.1f %-11s %7.1f MFLOP %11.1f\n", what, r.gflops, "GFLOP/s", fpt * 1e-6,
           pp_bound);
    snprintf(what, sizeof what, "FMA peak, registers only (%s)", bc_isa());
    printf("%-44s %13.1f %-11s %7.1f MFLOP %11.1f\n", what, r.fma, "GFLOP/s", fpt * 1e-6,
           fma_bound);
    for (int h = 0; h < 2; ++h) {
        const int s = best[h];
        snprintf(what, sizeof what, "read, %s", h == 0 ? "4 KiB pages" : huge);
        printf("%-44s %13.1f GB/s (%d st) %7.1f MB    %11.1f\n", what, r.read[h][s],
               streams_of[s], bpt * 1e-6, r.read[h][s] * 1e9 / bpt);
    }
    printf("read loops (GB/s, 1 / 2 / 4 / 8 streams per thread): 4 KiB pages %.1f / %.1f / %.1f / "
           "%.1f, huge %.1f / %.1f / %.1f / %.1f\n", r.read[0][0], r.read[0][1], r.read[0][2],
           r.read[0][3], r.read[1][0], r.read[1][1], r.read[1][2], r.read[1][3]);
    printf("best of the %d repetitions (physical bounds): FMA peak %.1f GFLOP/s (%.1f tok/s), "
           "read %.1f GB/s (%.1f tok/s)\n", REPS, r.fma_best, fma_phys, r.read_best, read_phys);
    printf("load average (1 min): %.2f before, %.2f after, on %ld CPUs\n", load0, load1,
           sysconf(_SC_NPROCESSORS_ONLN));
    tsvk(out, label, "blas", kernels[0], "sgemm_m512", r.gflops, "GFLOP/s", 0);
    tsv(out, label, "-", "fma_peak", r.fma, "GFLOP/s", 0);
    tsv(out, label, "-", "read_bw_4k", r.read[0][best[0]], "GB/s", 0);
    tsv(out, label, "-", "read_bw_huge", r.read[1][best[1]], "GB/s", 0);
    tsv(out, label, "-", "read_bw", gbs, "GB/s", 0);
    tsv(out, label, "-", "pp512_bound_sgemm", pp_bound, "tok/s", 0);
    tsv(out, label, "-", "pp512_bound_fma", fma_bound, "tok/s", 0);
    tsv(out, label, "-", "tg128_bound_read", tg_bound, "tok/s", 0);
    tsv(out, label, "-", "fma_peak_best", r.fma_best, "GFLOP/s", 0);
    tsv(out, label, "-", "read_bw_best", r.read_best, "GB/s", 0);
    tsv(out, label, "-", "pp512_bound_fma_best", fma_phys, "tok/s", 0);
    tsv(out, label, "-", "tg128_bound_read_best", read_phys, "tok/s", 0);
    tsv(out, label, "-", "loadavg_before", load0, "", 0);
    tsv(out, label, "-", "loadavg_after", load1, "", 0);
    const double dpp = r.pp[1] / r.pp[0], dtg = r.tg[1] / r.tg[0];
    tsv(out, label, "det/blas", "pp512_ratio", dpp, "x", 0);
    tsv(out, label, "det/blas", "tg128_ratio", dtg, "x", 0);
    printf("targets (this run; llama.cpp: the median of the paired ratios, the others: ratios of "
           "medians):\n");
    printf("  det / blas          pp512 %5.2fx (>= 0.90: %s)   tg128 %5.2fx (>= 1.00: %s)\n", dpp,
           verdict(dpp, 0.90), dtg, verdict(dtg, 1.0));
    if (n_be > 2) { /* two BLAS libraries side by side: no target, the figures */
        const double bpp = r.pp[2] / r.pp[0], btg = r.tg[2] / r.tg[0];
        printf("  blis / blas         pp512 %5.2fx                tg128 %5.2fx   (BLIS %s vs OpenBLAS "
               "%s)\n", bpp, btg, kernels[2], kernels[0]);
        tsv(out, label, "blis/blas", "pp512_ratio", bpp, "x", 0);
        tsv(out, label, "blis/blas", "tg128_ratio", btg, "x", 0);
    }
    if (have_llama) {
        const double fpp = r.pp[bp] / r.lpp, ftg = r.tg[bt] / r.ltg;
        const paired *ppp = &r.pair_pp[bp], *ptg = &r.pair_tg[bt];
        printf("  fastest / llama.cpp pp512 %5.2fx (>= 1.50: %s, %s)   tg128 %5.2fx (>= 1.20: %s, "
               "%s)   [median of the paired ratios]\n", ppp->median, verdict(ppp->median, 1.5),
               backends[bp], ptg->median, verdict(ptg->median, 1.2), backends[bt]);
        printf("    paired: pp512 %.2f..%.2f, tg128 %.2f..%.2f over %d and %d repetitions; ratio of "
               "medians: pp512 %.2fx, tg128 %.2fx\n", ppp->min, ppp->max, ptg->min, ptg->max,
               ppp->n, ptg->n, fpp, ftg);
        printf("    1.50x llama.cpp's pp512 is %.1f tok/s, the FMA-peak bound %.1f: %s\n",
               1.5 * r.lpp, fma_phys, reach(1.5 * r.lpp, fma_phys));
        printf("    1.20x llama.cpp's tg128 is %.1f tok/s, the read bound %.1f: %s\n", 1.2 * r.ltg,
               read_phys, reach(1.2 * r.ltg, read_phys));
        const long ncpu = sysconf(_SC_NPROCESSORS_ONLN);
        if (load0 >= 0.5 * (double)(ncpu > 0 ? ncpu : 1))
            printf("    CAUTION: load %.2f on %ld CPUs before the run: other processes shared the "
                   "cores, and llama.cpp's threads, which busy-wait at its barriers, lose more to "
                   "that than the engine's, so these two ratios overstate the engine's lead; "
                   "judge them on a run that starts idle\n", load0, ncpu);
        tsv(out, label, "fastest/llama.cpp", "pp512_ratio", fpp, "x", 0);
        tsv(out, label, "fastest/llama.cpp", "tg128_ratio", ftg, "x", 0);
        tsv(out, label, "fastest/llama.cpp", "pp512_ratio_paired", ppp->median, "x", 0);
        tsv(out, label, "fastest/llama.cpp", "tg128_ratio_paired", ptg->median, "x", 0);
    } else {
        printf("  fastest / llama.cpp SKIP (%s)\n", lb == NULL ? "no llama-bench on PATH and "
               "KVDRIFT_LLAMA_BENCH unset" : "llama-bench failed or printed no pp512/tg128 rows");
    }
    const double fpb = r.pp[bp] / pp_bound, ftb = r.tg[bt] / tg_bound;
    printf("  fastest / ceiling   pp512 %4.0f%%  (>= 80%%: %s, %s)   tg128 %4.0f%%  (>= 80%%: %s, %s)\n",
           100 * fpb, verdict(fpb, 0.8), backends[bp], 100 * ftb, verdict(ftb, 0.8), backends[bt]);
    printf("    80%% of the sgemm bound is %.1f tok/s, the FMA-peak bound %.1f: %s\n",
           0.8 * pp_bound, fma_phys, reach(0.8 * pp_bound, fma_phys));
    lm_model_free(m);

    char sp[1024];
    bu_model_path(sp, sizeof sp, "stories260K.gguf");
    if (access(sp, R_OK) == 0) {
        if (lm_model_load(&m, sp, &err) != LM_OK)
            bu_die(PROG, sp, &err);
        const beside none = {NULL, NULL, NULL};
        const result s = run_engine(m, "stories260K", &none);
        for (int b = 0; b < n_be; ++b) {
            printf("%-18s %-10s %-12s %-6s %9.1f\n%-18s %-10s %-12s %-6s %9.1f\n", "stories260K",
                   backends[b], kernels[b], "pp512", s.pp[b], "stories260K", backends[b],
                   kernels[b], "tg128", s.tg[b]);
            tsvk(out, "stories260K", backends[b], kernels[b], "pp512", s.pp[b], "tok/s", 0);
            tsvk(out, "stories260K", backends[b], kernels[b], "tg128", s.tg[b], "tok/s", 0);
        }
        lm_model_free(m);
    } else {
        printf("stories260K: SKIP (%s not found; set KVDRIFT_MODELS)\n", sp);
    }
    fclose(out);
    printf("appended to %s\n", tsv_path);
    return 0;
}
