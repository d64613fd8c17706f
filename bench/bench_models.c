/* bench_models.c — the real models `make models` fetches (Gemma 3 270M Q4_K_M, SmolLM2-135M
 * Q4_1): load time (GGUF map, validation, dequantization of every weight to float32, vocabulary;
 * median of 3 loads), the process's peak resident memory after loading (VmHWM; each model is
 * measured in a child process of its own so that the peaks do not mix), the float32 arena, and
 * greedy speed on the blas backend (prefill of a 6-token prompt, 16 decode steps). Printed and
 * appended as TSV to <dir>/models.tsv. A model that is absent is a SKIP line, never a failure. */
#include "fs.h"
#include "kvd_engine.h"
#include "kvd_model.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

static long vm_hwm_kib(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmHWM: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

static void measure(const char *name, const char *path, const char *outdir)
{
    static const char *prog = "bench_models";
    lm_err err = {0};
    double t[LOADS];
    lm_model *m = NULL;
    long hwm = 0;
    for (int i = 0; i < LOADS; ++i) {
        double t0 = lm_now_s();
        if (lm_model_load(&m, path, &err) != LM_OK)
            bu_die(prog, path, &err);
        t[i] = lm_now_s() - t0;
        if (i == 0)
            hwm = vm_hwm_kib();
        if (i + 1 < LOADS)
            lm_model_free(m);
    }
    double load_s = bu_median(t, LOADS);
    uint64_t arena = 0;
    for (uint32_t i = 0; i < m->n_weights; ++i)
        arena += m->weights[i].n_elem * sizeof(float);
    int32_t *ids = NULL;
    size_t n_ids = 0;
    static const char prompt[] = "The capital of France is";
    if (lm_tokenize(m->vocab, prompt, sizeof prompt - 1, true, &ids, &n_ids, &err) != LM_OK)
        bu_die(prog, "tokenize", &err);
    lm_ctx *c = NULL;
    lm_ctx_params p = {.backend = "blas", .n_ctx = (uint32_t)n_ids + 16};
    if (lm_ctx_create(&c, m, &p, &err) != LM_OK)
        bu_die(prog, "context", &err);
    float *lg = malloc(m->hp.n_vocab * sizeof *lg);
    double t0 = lm_now_s();
    if (lm_prefill(c, ids, (uint32_t)n_ids, 0, lg, &err) != LM_OK)
        bu_die(prog, "prefill", &err);
    double prefill_s = lm_now_s() - t0;
    t0 = lm_now_s();
    for (int i = 0; i < 16; ++i) {
        int32_t tok = lm_argmax(lg, m->hp.n_vocab);
        if (lm_forward(c, &tok, 1, LM_LOGITS_LAST, lg, &err) != LM_OK)
            bu_die(prog, "decode", &err);
    }
    double decode_s = lm_now_s() - t0;
    long hwm_all = vm_hwm_kib();
    printf("%-34s load %7.3f s  peak RSS after load %7.1f MiB (after 16 decode steps %7.1f MiB)"
           "  float32 weights %7.1f MiB  prefill %zu tok %6.1f tok/s  decode %6.1f tok/s\n",
           name, load_s, (double)hwm / 1024.0, (double)hwm_all / 1024.0,
           (double)arena / 1048576.0, n_ids, (double)n_ids / prefill_s, 16.0 / decode_s);
    char when[32], tsv[1024];
    bu_when(when);
    FILE *f = bu_tsv_open(prog, outdir, "models.tsv",
                          "when\tmodel\tload_s\tpeak_rss_load_kib\tpeak_rss_decode_kib\t"
                          "weights_f32_bytes\tprefill_tok_s\tdecode_tok_s\n", tsv, sizeof tsv);
    fprintf(f, "%s\t%s\t%.4f\t%ld\t%ld\t%llu\t%.2f\t%.2f\n", when, name, load_s, hwm, hwm_all,
            (unsigned long long)arena, (double)n_ids / prefill_s, 16.0 / decode_s);
    fclose(f);
    free(lg);
    free(ids);
    lm_ctx_free(c);
    lm_model_free(m);
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
                                        "gemma-3-270m-q4_k_m.gguf"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; ++i) {
        char path[4096];
        if (find_model(names[i], path, sizeof path) == NULL) {
            printf("SKIP: %s not found (run `make models`)\n", names[i]);
            continue;
        }
        fflush(stdout);
        pid_t pid = fork();
        if (pid == 0) {
            measure(names[i], path, argv[1]);
            fflush(stdout);
            _exit(0);
        }
        int st = 0;
        if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            return 2;
    }
    return 0;
}
