/* bench_tokenizer.c — encoding speed of the SPM (llama) and BPE (gpt-2) tokenizers on about
 * 100 KB of text, and how far from linear it is: the same 100 KB encoded in one call and as
 * ~51 calls of its 1.9 KB source (linear: ratio 1; O(n^2) merging: ratio ~51). Texts:
 * llama.cpp's tokenizer test strings repeated (mixed scripts, emoji, whitespace runs), and
 * 100 KB without a single space (one huge SPM merge session, one huge BPE word).
 *
 * Checks before timing: decode(encode(text)) == text. Then 1 warm-up and 7 timed runs; the
 * median is reported, printed and appended as TSV to <dir>/tokenizer.tsv (dir = argv[1],
 * default reports/bench). Never fails on speed; exits 0 with a SKIP line without the models. */
#include "kvd_gguf.h"
#include "kvd_tokenizer.h"
#include "util.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define RUNS 7

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *b = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (b && fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        b = NULL;
    }
    fclose(f);
    if (b) {
        b[n] = '\0';
        *len = (size_t)n;
    }
    return b;
}

/* Repeats src[n] into a new buffer of exactly want bytes, cut at a line end so that the text
 * stays valid UTF-8. */
static char *repeat_to(const char *src, size_t n, size_t want, size_t *out_len)
{
    char *b = malloc(want + 1);
    if (!b)
        return NULL;
    size_t k = 0;
    while (k < want) {
        size_t take = n < want - k ? n : want - k;
        memcpy(b + k, src, take);
        k += take;
    }
    while (k > 0 && b[k - 1] != '\n')
        k--;
    b[k] = '\0';
    *out_len = k;
    return b;
}

/* Median seconds of RUNS encodings of text[len] (after a check and a warm-up), split into
 * calls of at most chunk bytes (chunk boundaries are line ends of the source); -1 on failure. */
static double bench_one(const lm_vocab *v, const char *text, size_t len, size_t chunk,
                        size_t *n_tok)
{
    lm_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    char *back = NULL;
    if (lm_tokenize(v, text, len, false, &ids, &n, &err) != LM_OK ||
        lm_detokenize(v, ids, n, &back, &err) != LM_OK) {
        fprintf(stderr, "bench_tokenizer: %s\n", err.msg);
        return -1.0;
    }
    int ok = strlen(back) == len && memcmp(back, text, len) == 0;
    free(back);
    free(ids);
    if (!ok) {
        fprintf(stderr, "bench_tokenizer: round trip failed; not timing\n");
        return -1.0;
    }
    double t[RUNS];
    for (int r = -1; r < RUNS; r++) { /* r = -1: warm-up */
        size_t total = 0;
        double t0 = lm_now_s();
        for (size_t off = 0; off < len; off += chunk) {
            size_t l = len - off < chunk ? len - off : chunk;
            if (lm_tokenize(v, text + off, l, false, &ids, &n, &err) != LM_OK)
                return -1.0;
            free(ids);
            total += n;
        }
        double t1 = lm_now_s();
        *n_tok = total;
        if (r >= 0)
            t[r] = t1 - t0;
    }
    return bu_median(t, RUNS);
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : "reports/bench";
    const char *models = bu_models_dir();
    const char *vocabs[] = {"ggml-vocab-llama-spm.gguf", "ggml-vocab-gpt-2.gguf"};
    char tsv[1024];
    snprintf(tsv, sizeof tsv, "%s/tokenizer.tsv", dir);
    FILE *out = fopen(tsv, "a");
    if (!out)
        fprintf(stderr, "bench_tokenizer: cannot append to %s; printing only\n", tsv);

    printf("%-26s %-22s %8s %8s %12s %8s\n", "vocabulary", "text", "bytes", "tokens", "tokens/s",
           "MB/s");
    for (int vi = 0; vi < 2; vi++) {
        char path[1024], inp[1100];
        snprintf(path, sizeof path, "%s/vocab/%s", models, vocabs[vi]);
        snprintf(inp, sizeof inp, "%s.inp", path);
        size_t src_len = 0;
        char *src = read_all(inp, &src_len);
        lm_err err = {0};
        lm_gguf *g = NULL;
        lm_vocab *v = NULL;
        if (!src || lm_gguf_open(&g, path, &err) != LM_OK || lm_vocab_load(&v, g, &err) != LM_OK) {
            printf("SKIP: %s not usable (%s)\n", path, err.msg[0] ? err.msg : "missing");
            free(src);
            lm_gguf_close(g);
            continue;
        }
        lm_gguf_close(g);

        size_t len_mixed = 0, len_flat = 100000;
        char *mixed = repeat_to(src, src_len, 100000, &len_mixed);
        char *flat = malloc(len_flat + 1);
        if (flat) { /* letters cycled: merges everywhere, no word breaks */
            for (size_t i = 0; i < len_flat; i++)
                flat[i] = (char)('a' + (i * 7 + i / 26) % 26);
            flat[len_flat] = '\0';
        }
        struct { const char *name; const char *text; size_t len, chunk; } runs[3] = {
            {"mixed-100K", mixed, len_mixed, len_mixed},
            {"mixed-100K/1.9K-calls", mixed, len_mixed, src_len},
            {"nospace-100K", flat, len_flat, len_flat},
        };
        double sec[3] = {0};
        for (int ti = 0; ti < 3; ti++) {
            size_t n_tok = 0;
            if (!runs[ti].text)
                continue;
            sec[ti] = bench_one(v, runs[ti].text, runs[ti].len, runs[ti].chunk, &n_tok);
            if (sec[ti] <= 0)
                continue;
            double tps = (double)n_tok / sec[ti], mbs = (double)runs[ti].len / sec[ti] / 1e6;
            printf("%-26s %-22s %8zu %8zu %12.0f %8.2f\n", vocabs[vi], runs[ti].name,
                   runs[ti].len, n_tok, tps, mbs);
            if (out)
                fprintf(out, "tokenizer\t%s\t%s\t%zu\t%zu\t%.0f\t%.3f\n", vocabs[vi],
                        runs[ti].name, runs[ti].len, n_tok, tps, mbs);
        }
        if (sec[0] > 0 && sec[1] > 0)
            printf("%-26s one 100K call / 51 short calls: %.2fx the time (linear: 1, "
                   "quadratic: ~51)\n", vocabs[vi], sec[0] / sec[1]);
        free(mixed);
        free(flat);
        free(src);
        lm_vocab_free(v);
    }
    if (out)
        fclose(out);
    return 0;
}
