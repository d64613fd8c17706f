/* bench_cuda.c — prefill and decode speed of every device backend in the registry
 * (LM_BE_DEVICE: cuda, cuda-tf32, cuda-bf16, cuda-det) beside blas, on one model, and the cost
 * of cuda-det relative to cuda. Where no device is present it prints one skip line per backend
 * and writes nothing: a benchmark never fails on speed or on missing hardware.
 *
 * usage: bench_cuda OUTDIR [MODEL.gguf]
 * Without MODEL, synthesizes the smollm2-135m preset in F32. Each backend's greedy result is
 * checked against blas's first (same argmax after the prompt), then pp512 and tg128 are timed,
 * median of REPS after a warm-up. Appends to OUTDIR/cuda.tsv. */
#include "util.h"

#include "kvd_engine.h"
#include "kvd_model.h"
#include "plan/synth.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define PROG "bench_cuda"
#define PP 512
#define TG 128
#define REPS 3

typedef struct speed {
    double pp, tg; /* tok/s, medians */
    int32_t first; /* argmax after the prompt (the result check) */
} speed;

static speed measure(const lm_model *m, const char *backend, const int32_t *tok)
{
    lm_err err = {0};
    lm_ctx *c = NULL;
    const lm_ctx_params p = {.backend = backend, .n_threads = 2, .n_ctx = PP + TG};
    if (lm_ctx_create(&c, m, &p, &err) != LM_OK)
        bu_die(PROG, backend, &err);
    const uint32_t nv = m->hp.n_vocab;
    float *lg = malloc((size_t)nv * sizeof *lg);
    if (lg == NULL)
        bu_die(PROG, "logits", &(lm_err){.msg = "out of memory"});
    double pp[REPS], tg[REPS];
    speed s = {0};
    for (int r = -1; r < REPS; ++r) { /* r = -1: warm-up (uploads, handles) and result check */
        lm_ctx_reset(c);
        double t0 = lm_now_s();
        if (lm_prefill(c, tok, PP, 0, lg, &err) != LM_OK)
            bu_die(PROG, backend, &err);
        if (r < 0)
            s.first = lm_argmax(lg, nv);
        else
            pp[r] = PP / (lm_now_s() - t0);
        int32_t id = s.first;
        t0 = lm_now_s();
        for (int i = 0; i < TG; ++i) {
            if (lm_forward(c, &id, 1, LM_LOGITS_LAST, lg, &err) != LM_OK)
                bu_die(PROG, backend, &err);
            id = lm_argmax(lg, nv);
        }
        if (r >= 0)
            tg[r] = TG / (lm_now_s() - t0);
    }
    s.pp = bu_median(pp, REPS);
    s.tg = bu_median(tg, REPS);
    lm_ctx_free(c);
    free(lg);
    return s;
}

int main(int argc, char **argv)
{
    const int usage_rc = bu_check_args(argc, argv, "bench_cuda OUTDIR [MODEL.gguf]");
    if (usage_rc >= 0)
        return usage_rc;
    const char *outdir = argv[1];
    size_t n_dev = 0;
    for (size_t i = 0; i < lm_backend_count(); ++i) {
        const lm_backend_info *b = lm_backend_at(i);
        lm_err err = {0};
        if (!(b->flags & LM_BE_DEVICE))
            continue;
        if (lm_backend_probe(b->name, &err) != LM_OK) {
            printf("%s: skipped: %s\n", PROG, err.msg);
            continue;
        }
        ++n_dev;
    }
    if (n_dev == 0)
        return 0;

    lm_err err = {0};
    char tmpdir[512], model_path[512];
    const char *label =
        bu_model_or_smollm2(PROG, argc, argv, model_path, tmpdir, sizeof model_path);
    lm_model *m = NULL;
    if (lm_model_load(&m, model_path, &err) != LM_OK)
        bu_die(PROG, model_path, &err);
    bu_model_remove(model_path, tmpdir); /* the weights are in memory now */
    int32_t *tok = malloc(PP * sizeof *tok);
    if (tok == NULL)
        bu_die(PROG, "tokens", &(lm_err){.msg = "out of memory"});
    uint64_t x = 12345;
    tok[0] = 1;
    for (int i = 1; i < PP; ++i) { /* fixed pseudo-random ids, control tokens avoided */
        x = x * 6364136223846793005u + 1442695040888963407u;
        tok[i] = (int32_t)(3 + (x >> 33) % (m->hp.n_vocab - 3));
    }

    bu_make_outdir(PROG, outdir);
    char tsv_path[1024], when[32];
    FILE *out = bu_tsv_open(PROG, outdir, "cuda.tsv", "when\tmodel\tbackend\ttest\tvalue\tunit\n",
                            tsv_path, sizeof tsv_path);
    const speed ref = measure(m, "blas", tok);
    printf("%-10s %12s %12s  %s\n", "backend", "pp512 t/s", "tg128 t/s", "argmax after prompt");
    printf("%-10s %12.1f %12.1f  %d\n", "blas", ref.pp, ref.tg, (int)ref.first);
    double pp_cuda = 0, tg_cuda = 0, pp_det = 0, tg_det = 0;
    for (size_t i = 0; i < lm_backend_count(); ++i) {
        const lm_backend_info *b = lm_backend_at(i);
        if (!(b->flags & LM_BE_DEVICE) || lm_backend_probe(b->name, &err) != LM_OK)
            continue;
        const speed s = measure(m, b->name, tok);
        printf("%-10s %12.1f %12.1f  %d%s\n", b->name, s.pp, s.tg, (int)s.first,
               s.first == ref.first ? "" : "  (differs from blas: a near tie, or a defect)");
        bu_when(when);
        fprintf(out, "%s\t%s\t%s\tpp%d\t%.2f\ttok/s\n", when, label, b->name, PP, s.pp);
        fprintf(out, "%s\t%s\t%s\ttg%d\t%.2f\ttok/s\n", when, label, b->name, TG, s.tg);
        if (strcmp(b->name, "cuda") == 0)
            pp_cuda = s.pp, tg_cuda = s.tg;
        if (strcmp(b->name, "cuda-det") == 0)
            pp_det = s.pp, tg_det = s.tg;
    }
    if (pp_cuda > 0 && pp_det > 0)
        printf("cuda-det / cuda: pp512 %.2fx, tg128 %.2fx (time ratio: %.2f and %.2f)\n",
               pp_det / pp_cuda, tg_det / tg_cuda, pp_cuda / pp_det, tg_cuda / tg_det);
    printf("wrote %s\n", tsv_path);
    fclose(out);
    free(tok);
    lm_model_free(m);
    return 0;
}
