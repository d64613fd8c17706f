/* bench_serving.c — what the serving-stack axes cost kvdrift's own engine: a run of one
 * configuration (a 128-token prompt in chunks of 64, then 16 greedy tokens; the runner's median
 * of repeated prefills and decodes) at batch 1, batch=4 (three co-resident sequences prefilling
 * alongside), batch=4/decode (three decoding alongside), tp=4 (ring all-reduce), tp=4/tree and
 * the reduction fixed by k alone on one device and on 4 (tp=1/fixed, tp=4/fixed: det's bits the
 * same), on det and blas, 2 threads.
 *
 * usage: bench_serving OUTDIR [MODEL.gguf]   (default: the smollm2-135m preset in F32)
 * Reported per configuration: prefill and decode tokens/s of the sequence under test, and the
 * time ratio to the same backend alone on one device (> 1: slower). At batch 4 each call also
 * computes three other sequences' rows, so that ratio is the price of sharing the call, not a
 * loss of throughput. Before timing, each
 * configuration's greedy tokens are checked against the backend's batch-1 tokens where the
 * backend is row-independent (det: the same bits whatever the batch); tp changes the
 * reduction order, so its tokens are printed, not checked. Prints a table, appends TSV to
 * OUTDIR/serving.tsv; never fails on speed. */
#include "kvd_engine.h"
#include "model/config.h"
#include "run/runner.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PROG "bench_serving"
#define N_PROMPT 128u
#define N_GEN 16u

static const char *const suffixes[] = {"",      ":batch=4",   ":batch=4/decode", ":tp=4",
                                       ":tp=4/tree", ":tp=1/fixed", ":tp=4/fixed"};
#define N_SUFFIX (sizeof suffixes / sizeof suffixes[0])
static const char *const backends[] = {"det", "blas"};

int main(int argc, char **argv)
{
    int rc = bu_check_args(argc, argv, PROG " OUTDIR [MODEL.gguf]");
    if (rc >= 0)
        return rc;
    const char *outdir = argv[1];
    bu_make_outdir(PROG, outdir);
    char path[1024], dir[1024];
    const char *label = bu_model_or_smollm2(PROG, argc, argv, path, dir, sizeof path);
    lm_err err = {0};
    lm_model *m = NULL;
    if (lm_model_load(&m, path, &err) != LM_OK)
        bu_die(PROG, path, &err);
    int32_t prompt[N_PROMPT];
    for (uint32_t i = 0; i < N_PROMPT; ++i)
        prompt[i] = (int32_t)((i * 131u + 7u) % m->hp.n_vocab);
    char tsv_path[1200], when[32];
    FILE *tsv = bu_tsv_open(PROG, outdir, "serving.tsv",
                            "when\tmodel\tconfig\tprefill_tok_s\tdecode_tok_s\tratio_prefill\t"
                            "ratio_decode\ttokens_as_alone\n", tsv_path, sizeof tsv_path);
    bu_when(when);
    printf("%s: %u-token prompt in chunks of 64, %u greedy tokens, 2 threads\n", label,
           N_PROMPT, N_GEN);
    printf("%-38s %12s %12s %9s %9s  %s\n", "config", "prefill t/s", "decode t/s", "x prefill",
           "x decode", "tokens");
    for (size_t b = 0; b < sizeof backends / sizeof backends[0]; ++b) {
        double base_pre = 0.0, base_dec = 0.0;
        int32_t base_tok[N_GEN];
        for (size_t s = 0; s < N_SUFFIX; ++s) {
            char name[HX_CONFIG_STR_MAX];
            snprintf(name, sizeof name, "%s:step=64:threads=2%s", backends[b], suffixes[s]);
            hx_config cfg;
            if (hx_config_parse(&cfg, name, &err) != LM_OK)
                bu_die(PROG, name, &err);
            const hx_run_request rq = {.prompt = prompt, .n_prompt = N_PROMPT, .n_gen = N_GEN};
            hx_capture *cap = NULL;
            hx_run_stats st;
            if (hx_run_capture(&cap, &st, m, &cfg, &rq, &err) != LM_OK)
                bu_die(PROG, name, &err);
            const int32_t *tok = cap->tokens + N_PROMPT;
            const char *same = "-";
            if (s == 0) {
                memcpy(base_tok, tok, sizeof base_tok);
            } else {
                const bool eq = memcmp(base_tok, tok, sizeof base_tok) == 0;
                same = eq ? "as alone" : "other";
                if (!eq && strcmp(backends[b], "det") == 0 && s <= 2) {
                    fprintf(stderr, PROG ": CHECK FAILED: %s gave other tokens than alone\n",
                            name);
                    return 1;
                }
            }
            const double pre = st.prefill_s > 0.0 ? N_PROMPT / st.prefill_s : 0.0;
            const double dec = st.decode_s > 0.0 && st.n_decode ? st.n_decode / st.decode_s : 0.0;
            if (s == 0) {
                base_pre = st.prefill_s;
                base_dec = st.decode_s;
            }
            const double xp = base_pre > 0.0 ? st.prefill_s / base_pre : 0.0;
            const double xd = base_dec > 0.0 ? st.decode_s / base_dec : 0.0;
            printf("%-38s %12.1f %12.1f %9.2f %9.2f  %s\n", name, pre, dec, xp, xd, same);
            fprintf(tsv, "%s\t%s\t%s\t%.3f\t%.3f\t%.4f\t%.4f\t%s\n", when, label, name, pre, dec,
                    xp, xd, same);
            hx_capture_free(cap);
        }
    }
    fclose(tsv);
    printf("TSV: %s\n", tsv_path);
    lm_model_free(m);
    bu_model_remove(path, dir);
    return 0;
}
