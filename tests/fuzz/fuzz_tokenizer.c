/* fuzz_tokenizer.c — libFuzzer target for both tokenizers on arbitrary bytes: SentencePiece
 * (llama) and GPT-2 byte-level BPE, with and without special-token parsing, then decoding the
 * ids again; and every BPE pre-tokenizer on the text's code points, whose words must cover the
 * text exactly (else abort). The first input byte picks the vocabulary and the flags; the rest
 * is the text.
 * Vocabularies: ggml-vocab-{llama-spm,gpt-2,llama-bpe,qwen2}.gguf in the models folder's vocab/
 * (lm_models_dir), and deepseek-llm, falcon and gemma-4 from `make models`' cache (lm_cache_dir's
 * models/vocab) when there; without the first four, the synthetic tiny model's
 * SPM vocabulary too (said once on stderr). Any crash, sanitizer report or leak is a finding. */
#include "fuzz_util.h"
#include "fs.h"
#include "kvd_tokenizer.h"
#include "plan/synth.h"
#include "../../engine/tokenizer_internal.h"
#include "../../engine/unicode.h"

static lm_vocab *vocabs[12];
static int n_vocabs;

static void add_vocab(const char *path)
{
    lm_gguf *g = NULL;
    lm_err err = {0};
    if (access(path, R_OK) != 0 || lm_gguf_open(&g, path, &err) != LM_OK)
        return;
    if (lm_vocab_load(&vocabs[n_vocabs], g, &err) == LM_OK)
        n_vocabs++;
    lm_gguf_close(g);
}

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    char dir[512], cache[512];
    lm_err err = {0};
    if (lm_models_dir(dir, sizeof dir, &err) != LM_OK)
        snprintf(dir, sizeof dir, ".");
    if (lm_cache_dir(cache, sizeof cache, NULL, &err) != LM_OK)
        snprintf(cache, sizeof cache, ".");
    static const char *names[] = {"llama-spm", "gpt-2", "llama-bpe", "qwen2"};
    char path[1024];
    for (size_t i = 0; i < sizeof names / sizeof *names; ++i) {
        snprintf(path, sizeof path, "%s/vocab/ggml-vocab-%s.gguf", dir, names[i]);
        add_vocab(path);
    }
    int shared = n_vocabs;
    static const char *cached[] = {"deepseek-llm", "falcon", "gemma-4"};
    for (size_t i = 0; i < sizeof cached / sizeof *cached; ++i) {
        snprintf(path, sizeof path, "%s/models/vocab/ggml-vocab-%s.gguf", cache, cached[i]);
        add_vocab(path);
    }
    if (shared < 4) {
        const char *tmp = getenv("TMPDIR");
        snprintf(path, sizeof path, "%s/kvdrift-fuzz-vocab-%ld.gguf", tmp && *tmp ? tmp : "/tmp",
                 (long)getpid());
        if (hx_synth_write(path, "tiny", 0, LM_TYPE_F32, &err) != LM_OK)
            abort();
        add_vocab(path);
        unlink(path);
        fprintf(stderr, "fuzz_tokenizer: %d vocabularies from %s/vocab (of 4), %d from %s/models/vocab, plus "
                        "the synthetic SPM one\n", shared, dir, n_vocabs - 1 - shared, cache);
    }
    return 0;
}

/* Every pre-tokenizer's words of text[len] are non-empty and sum to its code point count. */
static void pretokenize_all(const char *text, size_t len)
{
    uint32_t *cp = malloc((len ? len : 1) * sizeof *cp);
    if (cp == NULL)
        return;
    size_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t adv;
        cp[n++] = lm_utf8_decode(text + off, len - off, &adv);
        off += adv;
    }
    for (int pre = 0; pre < LM_PRE_COUNT; pre++) {
        size_t *lens = NULL, n_lens = 0, sum = 0;
        lm_err err = {0};
        if (lm_pretokenize((lm_pre)pre, cp, n, &lens, &n_lens, &err) != LM_OK)
            abort();
        for (size_t i = 0; i < n_lens; i++) {
            if (lens[i] == 0)
                abort();
            sum += lens[i];
        }
        if (sum != n)
            abort();
        free(lens);
    }
    free(cp);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0 || n_vocabs == 0)
        return 0;
    pretokenize_all((const char *)data + 1, size - 1);
    const lm_vocab *v = vocabs[data[0] % n_vocabs];
    bool add_special = (data[0] >> 4) & 1, parse_special = (data[0] >> 5) & 1;
    int32_t *ids = NULL;
    size_t n = 0;
    lm_err err = {0};
    if (lm_tokenize_ex(v, (const char *)data + 1, size - 1, add_special, parse_special, &ids, &n,
                       &err) == LM_OK) {
        char *text = NULL;
        lm_err e2 = {0};
        if (lm_detokenize(v, ids, n, &text, &e2) == LM_OK)
            free(text);
        char piece[64];
        for (size_t i = 0; i < n; ++i)
            (void)lm_token_to_piece(v, ids[i], piece, sizeof piece);
    }
    free(ids);
    return 0;
}
