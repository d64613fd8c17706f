/* util.h — the helpers every bench/bench_*.c program shares: a monotonic clock, the median of
 * repeated timings, the UTC timestamp of a TSV line, the shared models folder, the output
 * folder and its TSV file, and the one-line fatal error. Benchmarks are programs, not library
 * code: these exit(2) on failure (only a benchmark's main-side code calls them). */
#ifndef KVD_BENCH_UTIL_H
#define KVD_BENCH_UTIL_H

#include "kvd_common.h"
#include "kvd_model.h"
#include "ref_model.h"
#include "kvd_util.h" /* lm_now_s: the monotonic clock */

#include <stddef.h>
#include <stdio.h>

/* Median of v[n] (n >= 1); sorts v in place. Even n: the mean of the two middle values. */
double bu_median(double *v /* [n] */, int n);

/* CPU seconds this process has used, all its threads (CLOCK_PROCESS_CPUTIME_ID). */
double bu_cpu_s(void);

/* "YYYY-MM-DDTHH:MM:SSZ" (UTC, now) into when[32]. */
void bu_when(char when[32]);

/* The models folder (lm_models_dir: $KVDRIFT_MODELS, else the cache's models/). */
const char *bu_models_dir(void);

/* out = bu_models_dir() + "/" + file ("" when that does not fit in cap). */
void bu_model_path(char *out, size_t cap, const char *file);

/* "PROG: WHAT: err->msg" on stderr, exit 2. */
_Noreturn void bu_die(const char *prog, const char *what, const lm_err *err);

/* The common command line "PROG OUTDIR [ARG]": with no arguments, too many, or --help, prints
 * "usage: USAGE" (stdout for a lone --help, else stderr) and returns the exit code (0 or 2);
 * returns -1 when the arguments are fine. */
int bu_check_args(int argc, char **argv, const char *usage);

/* Creates outdir (an existing one is fine); on failure prints "PROG: OUTDIR: reason", exit 2. */
void bu_make_outdir(const char *prog, const char *outdir);

/* A "PROG OUTDIR [REPS]" benchmark on stories260K, as its body (bu_stories_main) gets it. */
typedef struct bu_stories {
    const char *prog, *outdir;
    int reps;               /* REPS: 1..max_reps, default 3 */
    char path[1024];        /* the model's path */
    lm_model *m;
    ref_model *r;           /* the reference's own view of the same file */
    int32_t *prompt;        /* [n_prompt]: text tokenized, BOS added */
    size_t n_prompt;
    char scratch[64];       /* a fresh empty folder /tmp/kvdrift-<prog>-XXXXXX */
} bu_stories;

/* The main of such a benchmark: checks the arguments (the usage's exit code, 2 on a bad
 * REPS), makes OUTDIR, loads the model and tokenizes text (0 after a SKIP line when the model
 * file is absent; load errors exit 2), makes the scratch folder, runs body; then removes the
 * scratch folder when body returned 0 (a failed check keeps it) and frees the model and the
 * prompt. Returns body's exit code. */
int bu_stories_main(const char *prog, int argc, char **argv, const char *usage, int max_reps,
                    const char *text, int (*body)(bu_stories *s));

/* A fresh empty folder base/STEMREP-XXXXXX (mkdtemp) into out[cap]; on failure prints
 * "PROG: PATH: reason", exit 2. */
void bu_fresh_dir(const char *prog, char *out, size_t cap, const char *base, const char *stem,
                  int rep);

/* Opens outdir/name for appending (path[cap] receives the path) and writes header (a full
 * line, tabs and newline included) when the file is new; on failure prints
 * "PROG: PATH: reason", exit 2. */
FILE *bu_tsv_open(const char *prog, const char *outdir, const char *name, const char *header,
                  char *path, size_t cap);

/* The model a "PROG OUTDIR [MODEL.gguf]" benchmark runs on: MODEL when given (argc == 3), else
 * the smollm2-135m preset in F32 synthesized into a fresh folder under $TMPDIR (dir[cap]
 * receives it, "" when MODEL was given). path[cap] receives the file; returns the label for
 * tables. Exits 2 on failure. bu_model_remove deletes the synthesized file and folder. */
const char *bu_model_or_smollm2(const char *prog, int argc, char **argv, char *path, char *dir,
                                size_t cap);
void bu_model_remove(const char *path, const char *dir);

/* The kernel set each of names[n] runs here (lm_backend_kernels_of; "-" for a backend without
 * one) into kernels[n]; and for each whose kernels are older than the CPU, one line
 * "PROG: warning: NAME: ..." on stderr (what runs and what to do), as run and sweep print. */
void bu_backend_kernels(const char *prog, const char *const *names /* [n] */, int n,
                        char kernels[][48]);

#endif
