/* util.c — helpers shared by the bench/bench_*.c programs (see util.h). */
#include "util.h"

#include "fs.h"
#include "kvd_engine.h"
#include "kvd_gguf.h"
#include "kvd_tokenizer.h"
#include "plan/synth.h"

#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

static int cmp_double(const void *a, const void *b)
{
    const double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

double bu_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof *v, cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double bu_cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

void bu_when(char when[32])
{
    time_t now = time(NULL);
    strftime(when, 32, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
}

const char *bu_models_dir(void)
{
    static char dir[1024];
    lm_err err = {0};
    if (lm_models_dir(dir, sizeof dir, &err) != LM_OK)
        snprintf(dir, sizeof dir, ".");
    return dir;
}

void bu_model_path(char *out, size_t cap, const char *file)
{
    int n = snprintf(out, cap, "%s/%s", bu_models_dir(), file);
    if (n < 0 || (size_t)n >= cap)
        out[0] = '\0'; /* no such file: the caller's SKIP line */
}

_Noreturn void bu_die(const char *prog, const char *what, const lm_err *err)
{
    fprintf(stderr, "%s: %s: %s\n", prog, what, err->msg);
    exit(2);
}

int bu_check_args(int argc, char **argv, const char *usage)
{
    if (argc < 2 || argc > 3 || strcmp(argv[1], "--help") == 0) {
        fprintf(argc == 2 ? stdout : stderr, "usage: %s\n", usage);
        return argc == 2 ? 0 : 2;
    }
    return -1;
}

void bu_make_outdir(const char *prog, const char *outdir)
{
    if (mkdir(outdir, 0755) != 0 && errno != EEXIST) {
        fprintf(stderr, "%s: %s: %s\n", prog, outdir, strerror(errno));
        exit(2);
    }
}

/* bu_stories_main's start: -1 to go on, else the exit code. */
static int stories_start(bu_stories *s, int argc, char **argv, const char *usage, int max_reps,
                         const char *text)
{
    const int usage_rc = bu_check_args(argc, argv, usage);
    if (usage_rc >= 0)
        return usage_rc;
    s->reps = argc == 3 ? atoi(argv[2]) : 3;
    if (s->reps < 1 || s->reps > max_reps) {
        fprintf(stderr, "%s: REPS '%s': expected 1..%d\n", s->prog, argv[2], max_reps);
        return 2;
    }
    s->outdir = argv[1];
    bu_make_outdir(s->prog, s->outdir);
    bu_model_path(s->path, sizeof s->path, "stories260K.gguf");
    if (access(s->path, R_OK) != 0) {
        printf("%s: SKIP (%s not found; set KVDRIFT_MODELS)\n", s->prog, s->path);
        return 0;
    }
    lm_err err = {0};
    if (lm_model_load(&s->m, s->path, &err) != LM_OK ||
        ref_model_open(&s->r, s->path, &err) != LM_OK)
        bu_die(s->prog, s->path, &err);
    if (lm_tokenize(s->m->vocab, text, strlen(text), true, &s->prompt, &s->n_prompt, &err) !=
        LM_OK)
        bu_die(s->prog, "tokenize", &err);
    snprintf(s->scratch, sizeof s->scratch, "/tmp/kvdrift-%s-XXXXXX", s->prog);
    if (mkdtemp(s->scratch) == NULL) {
        fprintf(stderr, "%s: mkdtemp: %s\n", s->prog, strerror(errno));
        return 2;
    }
    return -1;
}

int bu_stories_main(const char *prog, int argc, char **argv, const char *usage, int max_reps,
                    const char *text, int (*body)(bu_stories *s))
{
    bu_stories s = {.prog = prog};
    int rc = stories_start(&s, argc, argv, usage, max_reps, text);
    if (rc < 0 && (rc = body(&s)) == 0) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", s.scratch);
        if (system(cmd) != 0)
            fprintf(stderr, "%s: could not remove %s\n", prog, s.scratch);
    }
    free(s.prompt);
    lm_model_free(s.m);
    ref_model_free(s.r);
    return rc;
}

void bu_fresh_dir(const char *prog, char *out, size_t cap, const char *base, const char *stem,
                  int rep)
{
    snprintf(out, cap, "%s/%s%d-XXXXXX", base, stem, rep);
    if (mkdtemp(out) == NULL) {
        fprintf(stderr, "%s: mkdtemp %s: %s\n", prog, out, strerror(errno));
        exit(2);
    }
}

FILE *bu_tsv_open(const char *prog, const char *outdir, const char *name, const char *header,
                  char *path, size_t cap)
{
    snprintf(path, cap, "%s/%s", outdir, name);
    const bool fresh = access(path, F_OK) != 0;
    FILE *out = fopen(path, "a");
    if (out == NULL) {
        fprintf(stderr, "%s: %s: %s\n", prog, path, strerror(errno));
        exit(2);
    }
    if (fresh)
        fputs(header, out);
    return out;
}

const char *bu_model_or_smollm2(const char *prog, int argc, char **argv, char *path, char *dir,
                                size_t cap)
{
    dir[0] = '\0';
    if (argc == 3) {
        snprintf(path, cap, "%s", argv[2]);
        return argv[2];
    }
    const char *base = getenv("TMPDIR");
    snprintf(dir, cap, "%s/kvdrift-bench-XXXXXX", base && *base ? base : "/tmp");
    if (mkdtemp(dir) == NULL) {
        fprintf(stderr, "%s: %s: %s\n", prog, dir, strerror(errno));
        exit(2);
    }
    snprintf(path, cap, "%s/smollm2-135m-f32.gguf", dir);
    lm_err err = {0};
    const double t0 = lm_now_s();
    if (hx_synth_write(path, "smollm2-135m", 0, LM_TYPE_F32, &err) != LM_OK)
        bu_die(prog, "synth smollm2-135m", &err);
    printf("synthesized smollm2-135m (F32) in %.1f s\n", lm_now_s() - t0);
    return "smollm2-135m-f32";
}

void bu_model_remove(const char *path, const char *dir)
{
    if (dir[0] == '\0')
        return;
    unlink(path);
    rmdir(dir);
}

void bu_backend_kernels(const char *prog, const char *const *names, int n, char kernels[][48])
{
    for (int i = 0; i < n; ++i) {
        lm_backend_kernels k;
        const bool has = lm_backend_kernels_of(&k, names[i]);
        snprintf(kernels[i], 48, "%s", has && k.name[0] ? k.name : "-");
        if (has && k.older)
            fprintf(stderr, "%s: warning: %s: %s\n", prog, names[i], k.warning);
    }
}
