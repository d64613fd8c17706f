/* bench_models.c — the real models `make models` fetches (Gemma 3 270M Q4_K_M, SmolLM2-135M
 * Q4_1, Qwen2.5-Coder-0.5B): for each model and each place of its weights (in the file's types,
 * mapped; the float32 arena, KVDRIFT_WEIGHTS=arena), load time (GGUF map, validation, the
 * arena's dequantization, vocabulary; median of 3 loads), the process's peak resident memory
 * after loading and after the runs (VmHWM; each model and place measured in a child process
 * of its own so that the peaks do not mix), the resident memory before loading (the
 * libraries) and the rest against lm_model_mem_plan's file + arena + KV cache + scratch, the
 * float32 arena's size, and greedy speed on det
 * and blas (all threads: prefill of a 64-token prompt, then one warm-up and 16 timed decode
 * steps). Checked before the ratios are printed: det's prefill logits are the same bits in
 * both places (a hash through a pipe from each child). Then one line per model: file / arena
 * for peak memory, det and blas decode and det prefill. Printed and appended as TSV to
 * <dir>/models.tsv. A model that is absent is a SKIP line, never a failure. */
#include "fs.h"
#include "kvd_engine.h"
#include "kvd_model.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdbool.h>
#include <sys/wait.h>
#include <unistd.h>

#define LOADS 3

/* $KVDRIFT_MODELS/name, else the cache's models folder; NULL when neither exists. */
static const char *find_model(const char *name, char *out, size_t cap)
{
    bu_model_path(out, cap, name);
    if (access(out, R_OK) == 0)
        return out;
    char cache[512];
    lm_err err = {0};
    if (lm_cache_dir(cache, sizeof cache, NULL, &err) != LM_OK)
        return NULL;
    snprintf(out, cap, "%s/models/%s", cache, name);
    return access(out, R_OK) == 0 ? out : NULL;
}

/* A /proc/self/status field ("VmHWM", "VmRSS") in KiB, -1 when absent. */
static long status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    const size_t len = strlen(key);
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (strncmp(line, key, len) == 0 && sscanf(line + len, ": %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static long vm_hwm_kib(void)
{
    return status_kib("VmHWM");
}

/* What one child measured (sent to the parent through a pipe). */
typedef struct measured {
    long hwm_kib;          /* after the runs */
    long base_kib;         /* resident before loading (the libraries: OpenBLAS, CUDA, MPI) */
    uint64_t plan_bytes;   /* lm_model_mem_plan: file + float32 arena + KV cache + scratch */
    double decode[2];      /* det, blas: tok/s */
    double prefill[2];
    uint64_t det_hash;     /* FNV-1a of det's prefill logits */
} measured;

#define N_PROMPT 64u
#define N_DECODE 16

/* Prefill of N_PROMPT tokens, one warm-up and N_DECODE timed greedy steps on backend; the
 * prefill's logits hashed into *hash when hash is not NULL. */
static void timed_run(const lm_model *m, const char *backend, double *prefill, double *decode,
                      uint64_t *hash)
{
    static const char *prog = "bench_models";
    lm_err err = {0};
    int32_t ids[N_PROMPT];
    for (uint32_t i = 0; i < N_PROMPT; ++i) /* fixed ids spread over the vocabulary */
        ids[i] = (int32_t)(1 + (i * 7919u) % (m->hp.n_vocab - 1));
    lm_ctx *c = NULL;
    lm_ctx_params p = {.backend = backend, .n_ctx = N_PROMPT + N_DECODE + 1};
    if (lm_ctx_create(&c, m, &p, &err) != LM_OK)
        bu_die(prog, "context", &err);
    float *lg = malloc(m->hp.n_vocab * sizeof *lg);
    if (lg == NULL) {
        fprintf(stderr, "%s: out of memory\n", prog);
        exit(2);
    }
    double t0 = lm_now_s();
    if (lm_prefill(c, ids, N_PROMPT, 0, lg, &err) != LM_OK)
        bu_die(prog, "prefill", &err);
    *prefill = N_PROMPT / (lm_now_s() - t0);
    if (hash != NULL) {
        uint64_t h = 0xcbf29ce484222325ull;
        const unsigned char *b = (const unsigned char *)lg;
        for (size_t i = 0; i < m->hp.n_vocab * sizeof *lg; ++i)
            h = (h ^ b[i]) * 0x100000001b3ull;
        *hash = h;
    }
    for (int i = 0; i <= N_DECODE; ++i) {
        if (i == 1)
            t0 = lm_now_s(); /* step 0 warms up */
        int32_t tok = lm_argmax(lg, m->hp.n_vocab);
        if (lm_forward(c, &tok, 1, LM_LOGITS_LAST, lg, &err) != LM_OK)
            bu_die(prog, "decode", &err);
    }
    *decode = N_DECODE / (lm_now_s() - t0);
    free(lg);
    lm_ctx_free(c);
}

static void measure(const char *name, const char *path, lm_weights_mode mode, const char *outdir,
                    measured *out)
{
    static const char *prog = "bench_models";
    lm_err err = {0};
    double t[LOADS];
    lm_model *m = NULL;
    long hwm = 0;
    out->base_kib = status_kib("VmRSS");
    lm_mem_plan mp;
    if (setenv("KVDRIFT_WEIGHTS", lm_weights_mode_name(mode), 1) != 0 ||
        lm_model_mem_plan(&mp, path, N_PROMPT + N_DECODE + 1, &err) != LM_OK)
        bu_die(prog, path, &err);
    out->plan_bytes = mp.file + mp.weights + mp.kv + mp.scratch;
    for (int i = 0; i < LOADS; ++i) {
        double t0 = lm_now_s();
        if (lm_model_load_mode(&m, path, mode, &err) != LM_OK)
            bu_die(prog, path, &err);
        t[i] = lm_now_s() - t0;
        if (i == 0)
            hwm = vm_hwm_kib();
        if (i + 1 < LOADS)
            lm_model_free(m);
    }
    double load_s = bu_median(t, LOADS);
    const uint64_t arena = (uint64_t)m->weights_n * sizeof(float);
    static const char *const backends[2] = {"det", "blas"};
    for (int b = 0; b < 2; ++b)
        timed_run(m, backends[b], &out->prefill[b], &out->decode[b], b == 0 ? &out->det_hash : NULL);
    out->hwm_kib = vm_hwm_kib();
    const char *where = lm_weights_mode_name(mode);
    const double own = (double)(out->hwm_kib - out->base_kib) * 1024.0;
    printf("%-34s %-5s load %7.3f s  peak RSS after load %7.1f MiB, after the runs %7.1f MiB "
           "(%.1f before loading; the rest %.2f x the plan's %.1f MiB)  float32 arena %7.1f MiB  "
           "det prefill %6.1f decode %5.1f tok/s  blas prefill %6.1f decode %5.1f tok/s\n",
           name, where, load_s, (double)hwm / 1024.0, (double)out->hwm_kib / 1024.0,
           (double)out->base_kib / 1024.0, own / (double)out->plan_bytes,
           (double)out->plan_bytes / 1048576.0, (double)arena / 1048576.0, out->prefill[0],
           out->decode[0], out->prefill[1], out->decode[1]);
    char when[32], tsv[1024];
    bu_when(when);
    FILE *f = bu_tsv_open(prog, outdir, "models.tsv",
                          "when\tmodel\tweights\tload_s\trss_before_kib\tpeak_rss_load_kib\t"
                          "peak_rss_run_kib\tplan_bytes\tarena_bytes\tdet_prefill_tok_s\t"
                          "det_decode_tok_s\tblas_prefill_tok_s\tblas_decode_tok_s\n",
                          tsv, sizeof tsv);
    fprintf(f, "%s\t%s\t%s\t%.4f\t%ld\t%ld\t%ld\t%llu\t%llu\t%.2f\t%.2f\t%.2f\t%.2f\n", when,
            name, where, load_s, out->base_kib, hwm, out->hwm_kib,
            (unsigned long long)out->plan_bytes, (unsigned long long)arena, out->prefill[0],
            out->decode[0], out->prefill[1], out->decode[1]);
    fclose(f);
    lm_model_free(m);
}

/* measure() in a child process of its own (its own peak memory); false when it failed. */
static bool measure_apart(const char *name, const char *path, lm_weights_mode mode,
                          const char *outdir, measured *out)
{
    int fd[2];
    if (pipe(fd) != 0)
        return false;
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        close(fd[0]);
        measured r = {0};
        measure(name, path, mode, outdir, &r);
        fflush(stdout);
        _exit(write(fd[1], &r, sizeof r) == (ssize_t)sizeof r ? 0 : 2);
    }
    close(fd[1]);
    const bool got = pid > 0 && read(fd[0], out, sizeof *out) == (ssize_t)sizeof *out;
    close(fd[0]);
    int st = 0;
    return got && waitpid(pid, &st, 0) == pid && WIFEXITED(st) && WEXITSTATUS(st) == 0;
}

int main(int argc, char **argv)
{
    int rc = bu_check_args(argc, argv, "bench_models OUTDIR");
    if (rc >= 0)
        return rc;
    bu_make_outdir("bench_models", argv[1]);
    static const char *const timed[] = {"blas"}; /* the backend whose speed is printed */
    char kern[1][48];
    bu_backend_kernels("bench_models", timed, 1, kern);
    printf("blas runs OpenBLAS's %s kernels\n", kern[0]);
    static const char *const names[] = {"SmolLM2-135M-Instruct.Q4_1.gguf",
                                        "gemma-3-270m-q4_k_m.gguf",
                                        "qwen2.5-coder-0.5b-instruct.gguf"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        char path[4096];
        if (find_model(names[i], path, sizeof path) == NULL) {
            printf("SKIP: %s not found (run `make models`)\n", names[i]);
            continue;
        }
        measured file, arena;
        if (!measure_apart(names[i], path, LM_WEIGHTS_FILE, argv[1], &file) ||
            !measure_apart(names[i], path, LM_WEIGHTS_ARENA, argv[1], &arena))
            return 2;
        if (file.det_hash != arena.det_hash) {
            fprintf(stderr, "bench_models: %s: det's prefill logits differ between the weights "
                    "in the file and the float32 arena\n", names[i]);
            return 1;
        }
        printf("%-34s file / arena: peak RSS %.2f, det decode %.2f, blas decode %.2f, det "
               "prefill %.2f (det: the same bits)\n", names[i],
               (double)file.hwm_kib / (double)arena.hwm_kib, file.decode[0] / arena.decode[0],
               file.decode[1] / arena.decode[1], file.prefill[0] / arena.prefill[0]);
    }
    return 0;
}
