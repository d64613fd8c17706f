/* util.c — helpers shared by the bench/bench_*.c programs (see util.h). */
#include "util.h"

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

void bu_when(char when[32])
{
    time_t now = time(NULL);
    strftime(when, 32, "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
}

const char *bu_models_dir(void)
{
    const char *dir = getenv("KVDRIFT_MODELS");
    return dir && *dir ? dir : "../shared/models";
}

void bu_model_path(char *out, size_t cap, const char *file)
{
    snprintf(out, cap, "%s/%s", bu_models_dir(), file);
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
