/* test_tokenizer.c — UTF-8 and Unicode predicates, SPM and BPE encoding rules on small
 * hand-built vocabularies, then llama.cpp's fixtures (ggml-vocab-*.gguf.inp/.out) and the
 * stories260K vocabulary. */
#include "kvd_gguf.h"
#include "kvd_tokenizer.h"
#include "test_util.h"
#include "../engine/tokenizer_internal.h"
#include "../engine/unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- helpers */

static lm_vocab *load_vocab_file(const char *path)
{
    lm_err err = {0};
    lm_gguf *g = NULL;
    if (lm_gguf_open(&g, path, &err) != LM_OK) {
        fprintf(stderr, "\n  %s\n", err.msg);
        return NULL;
    }
    lm_vocab *v = NULL;
    if (lm_vocab_load(&v, g, &err) != LM_OK)
        fprintf(stderr, "\n  %s\n", err.msg);
    lm_gguf_close(g); /* the vocabulary must not depend on g afterwards */
    return v;
}

/* The whole file at path, NUL-terminated (*len bytes without the NUL); NULL when unreadable. */
static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 4096, n = 0;
    char *b = malloc(cap + 1);
    size_t r;
    while (b && (r = fread(b + n, 1, cap - n, f)) > 0) {
        n += r;
        if (n == cap) {
            char *nb = realloc(b, 2 * cap + 1);
            if (!nb) {
                free(b);
                b = NULL;
                break;
            }
            b = nb;
            cap *= 2;
        }
    }
    fclose(f);
    if (b)
        b[n] = '\0';
    *len = n;
    return b;
}

/* Encodes s (parsing special tokens when parse) and compares with want[n_want]. */
static bool encodes_to_ex(const lm_vocab *v, const char *s, size_t len, bool bos, bool parse,
                          const int32_t *want, size_t n_want)
{
    lm_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    if (lm_tokenize_ex(v, s, len, bos, parse, &ids, &n, &err) != LM_OK) {
        fprintf(stderr, "\n  tokenize failed: %s\n", err.msg);
        return false;
    }
    bool ok = n == n_want && (n == 0 || memcmp(ids, want, n * sizeof *ids) == 0);
    if (!ok) {
        fprintf(stderr, "\n  got:");
        for (size_t i = 0; i < n; i++)
            fprintf(stderr, " %d", ids[i]);
        fprintf(stderr, "\n  want:");
        for (size_t i = 0; i < n_want; i++)
            fprintf(stderr, " %d", want[i]);
        fprintf(stderr, "\n");
    }
    free(ids);
    return ok;
}

/* Encodes s as lm_tokenize does (no special-token parsing). */
static bool encodes_to(const lm_vocab *v, const char *s, size_t len, bool bos,
                       const int32_t *want, size_t n_want)
{
    return encodes_to_ex(v, s, len, bos, false, want, n_want);
}

/* decode(encode(s)) == s, byte for byte. */
static bool round_trips(const lm_vocab *v, const char *s, size_t len, bool bos)
{
    lm_err err = {0};
    int32_t *ids = NULL;
    size_t n = 0;
    char *back = NULL;
    bool ok = lm_tokenize(v, s, len, bos, &ids, &n, &err) == LM_OK &&
              lm_detokenize(v, ids, n, &back, &err) == LM_OK && strlen(back) == len &&
              memcmp(back, s, len) == 0;
    free(ids);
    free(back);
    return ok;
}

/* Writes a vocabulary-only GGUF to the test folder and loads it. texts[n], scores may be NULL,
 * types may be NULL; merges[n_merges] only for gpt2. */
static lm_vocab *build_vocab(const char *name, const char *model, const char **texts,
                             const float *scores, const int32_t *types, uint32_t n,
                             const char **merges, uint32_t n_merges, int add_prefix)
{
    lm_err err = {0};
    lm_gguf_writer *w = NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", tu_tmpdir(), name);
    CU_ASSERT_FATAL(lm_gguf_writer_create(&w, &err) == LM_OK);
    int rc = lm_gguf_w_str(w, "tokenizer.ggml.model", model, &err);
    if (rc == LM_OK)
        rc = lm_gguf_w_arr(w, "tokenizer.ggml.tokens", LM_GGUF_STR, texts, n, &err);
    if (rc == LM_OK && scores)
        rc = lm_gguf_w_arr(w, "tokenizer.ggml.scores", LM_GGUF_F32, scores, n, &err);
    if (rc == LM_OK && types)
        rc = lm_gguf_w_arr(w, "tokenizer.ggml.token_type", LM_GGUF_I32, types, n, &err);
    if (rc == LM_OK && merges)
        rc = lm_gguf_w_arr(w, "tokenizer.ggml.merges", LM_GGUF_STR, merges, n_merges, &err);
    if (rc == LM_OK && add_prefix >= 0)
        rc = lm_gguf_w_bool(w, "tokenizer.ggml.add_space_prefix", add_prefix != 0, &err);
    if (rc == LM_OK)
        rc = lm_gguf_writer_save(w, path, &err);
    lm_gguf_writer_free(w);
    if (rc != LM_OK) {
        fprintf(stderr, "\n  %s\n", err.msg);
        return NULL;
    }
    lm_gguf *g = NULL;
    lm_vocab *v = NULL;
    if (lm_gguf_open(&g, path, &err) != LM_OK || lm_vocab_load(&v, g, &err) != LM_OK)
        fprintf(stderr, "\n  %s\n", err.msg);
    lm_gguf_close(g);
    return v;
}

/* ---------------------------------------------------------------- UTF-8 and Unicode */

static void test_tokenizer_utf8_special_values(void)
{
    size_t adv;
    /* special values first: NUL, the largest 1-byte, stray continuation, truncations */
    CU_ASSERT_EQUAL(lm_utf8_decode("\0", 1, &adv), 0u);
    CU_ASSERT_EQUAL(adv, 1u);
    CU_ASSERT_EQUAL(lm_utf8_decode("\x7f", 1, &adv), 0x7Fu);
    CU_ASSERT_EQUAL(lm_utf8_decode("\x80", 1, &adv), LM_UNI_REPLACEMENT);
    CU_ASSERT_EQUAL(adv, 1u);
    CU_ASSERT_EQUAL(lm_utf8_decode("\xc3", 1, &adv), LM_UNI_REPLACEMENT); /* truncated */
    CU_ASSERT_EQUAL(adv, 1u);
    CU_ASSERT_EQUAL(lm_utf8_decode("\xe2\x96", 2, &adv), LM_UNI_REPLACEMENT);
    CU_ASSERT_EQUAL(adv, 1u);
    CU_ASSERT_EQUAL(lm_utf8_decode("\xe2\x41\x81", 3, &adv), LM_UNI_REPLACEMENT); /* bad cont. */
    CU_ASSERT_EQUAL(adv, 1u);
    CU_ASSERT_EQUAL(lm_utf8_decode("\xf8\x80\x80\x80", 4, &adv), LM_UNI_REPLACEMENT);
    CU_ASSERT_EQUAL(lm_utf8_decode("\xf4\x90\x80\x80", 4, &adv), LM_UNI_REPLACEMENT); /* >10FFFF */
    CU_ASSERT_EQUAL(adv, 1u);
    /* valid sequences of every length */
    CU_ASSERT_EQUAL(lm_utf8_decode("\xc3\x84", 2, &adv), 0xC4u);
    CU_ASSERT_EQUAL(adv, 2u);
    CU_ASSERT_EQUAL(lm_utf8_decode("\xe2\x96\x81", 3, &adv), 0x2581u);
    CU_ASSERT_EQUAL(adv, 3u);
    CU_ASSERT_EQUAL(lm_utf8_decode("\xf4\x8f\xbf\xbf", 4, &adv), 0x10FFFFu);
    CU_ASSERT_EQUAL(adv, 4u);
    /* encode inverts decode on every scalar value's boundary cases */
    const uint32_t cps[] = {0, 0x7F, 0x80, 0x7FF, 0x800, 0xFFFF, 0x10000, 0x10FFFF};
    for (size_t i = 0; i < sizeof cps / sizeof cps[0]; i++) {
        char buf[4];
        size_t n = lm_utf8_encode(cps[i], buf);
        CU_ASSERT(n >= 1 && n <= 4);
        CU_ASSERT_EQUAL(lm_utf8_decode(buf, n, &adv), cps[i]);
        CU_ASSERT_EQUAL(adv, n);
    }
    char buf[4];
    CU_ASSERT_EQUAL(lm_utf8_encode(0x110000, buf), 0u);
    /* lead-byte lengths */
    CU_ASSERT_EQUAL(lm_utf8_seq_len(0x41), 1u);
    CU_ASSERT_EQUAL(lm_utf8_seq_len(0xBF), 1u);
    CU_ASSERT_EQUAL(lm_utf8_seq_len(0xC3), 2u);
    CU_ASSERT_EQUAL(lm_utf8_seq_len(0xE2), 3u);
    CU_ASSERT_EQUAL(lm_utf8_seq_len(0xFF), 4u);
}

static void test_tokenizer_unicode_categories(void)
{
    /* the ASCII fast paths agree with the generated tables */
    for (uint32_t c = 0; c < 0x80; c++) {
        bool letter = false, number = false, space = false;
        for (size_t i = 0; i < lm_uni_letter_n; i++)
            letter |= c >= lm_uni_letter_ranges[i][0] && c <= lm_uni_letter_ranges[i][1];
        for (size_t i = 0; i < lm_uni_number_n; i++)
            number |= c >= lm_uni_number_ranges[i][0] && c <= lm_uni_number_ranges[i][1];
        for (size_t i = 0; i < lm_uni_space_n; i++)
            space |= c >= lm_uni_space_ranges[i][0] && c <= lm_uni_space_ranges[i][1];
        CU_ASSERT_EQUAL(lm_uni_is_letter(c), letter);
        CU_ASSERT_EQUAL(lm_uni_is_number(c), number);
        CU_ASSERT_EQUAL(lm_uni_is_space(c), space);
    }
    /* tables sorted and disjoint (the binary search needs it) */
    for (size_t i = 1; i < lm_uni_letter_n; i++)
        CU_ASSERT(lm_uni_letter_ranges[i - 1][1] < lm_uni_letter_ranges[i][0]);
    for (size_t i = 1; i < lm_uni_number_n; i++)
        CU_ASSERT(lm_uni_number_ranges[i - 1][1] < lm_uni_number_ranges[i][0]);
    /* known non-ASCII members: é Ä я 我 (L), ٣ Ⅻ ½ (N), NBSP U+3000 U+2028 (White_Space) */
    CU_ASSERT(lm_uni_is_letter(0xE9) && lm_uni_is_letter(0xC4) && lm_uni_is_letter(0x44F));
    CU_ASSERT(lm_uni_is_letter(0x6211));
    CU_ASSERT(lm_uni_is_number(0x663) && lm_uni_is_number(0x216B) && lm_uni_is_number(0xBD));
    CU_ASSERT(lm_uni_is_space(0xA0) && lm_uni_is_space(0x3000) && lm_uni_is_space(0x2028));
    /* and non-members: U+2581 is a symbol, U+001C..U+001F are not White_Space (Python's
     * isspace() says they are), U+FFFD, emoji, U+200B (not White_Space) */
    CU_ASSERT(!lm_uni_is_letter(0x2581) && !lm_uni_is_space(0x2581));
    CU_ASSERT(!lm_uni_is_space(0x1C) && !lm_uni_is_space(0x1F) && !lm_uni_is_space(0x200B));
    CU_ASSERT(!lm_uni_is_letter(0xFFFD) && !lm_uni_is_number(0xFFFD));
    CU_ASSERT(!lm_uni_is_letter(0x1F999) && !lm_uni_is_number(0x1F999));
    CU_ASSERT(!lm_uni_is_letter(0x10FFFF));
    /* marks, punctuation and symbols (the pre-tokenizers' \p{M}, \p{P}, \p{S}): combining
     * acute, Khmer coeng, variation selector 16; ASCII and CJK punctuation; ASCII, emoji and
     * U+FFFD symbols; and what none of them is */
    CU_ASSERT(lm_uni_is_mark(0x301) && lm_uni_is_mark(0x17D2) && lm_uni_is_mark(0xFE0F));
    CU_ASSERT(lm_uni_is_punct('!') && lm_uni_is_punct('_') && lm_uni_is_punct(0x3002));
    CU_ASSERT(lm_uni_is_symbol('$') && lm_uni_is_symbol('`') && lm_uni_is_symbol(0x1F600));
    CU_ASSERT(lm_uni_is_symbol(0xFFFD) && !lm_uni_is_punct('$') && !lm_uni_is_symbol('!'));
    for (uint32_t c = 0; c < 0x80; c++)
        CU_ASSERT(!lm_uni_is_mark(c));
    CU_ASSERT(!lm_uni_is_mark('a') && !lm_uni_is_punct(' ') && !lm_uni_is_symbol(0x200D));
    const uint32_t (*tables[])[2] = {lm_uni_mark_ranges, lm_uni_punct_ranges,
                                     lm_uni_symbol_ranges};
    const size_t sizes[] = {lm_uni_mark_n, lm_uni_punct_n, lm_uni_symbol_n};
    for (size_t t = 0; t < 3; t++)
        for (size_t i = 1; i < sizes[t]; i++)
            CU_ASSERT(tables[t][i - 1][1] < tables[t][i][0]);
    /* Unicode 15.1, llama.cpp's version: CJK extension I (15.1) and H (15.0) are letters,
     * Garay digits (16.0) are not yet numbers */
    CU_ASSERT(lm_uni_is_letter(0x2EBF0) && lm_uni_is_letter(0x31350));
    CU_ASSERT(!lm_uni_is_number(0x10D40));
}

/* ---------------------------------------------------------------- rules on tiny vocabularies */

static char byte_names[256][8];

/* <unk> <s> </s> <0x00>..<0xFF> then extra[n_extra]: ids 0, 1, 2, 3 + b, 259 + i. */
static uint32_t spm_texts(const char **texts, float *scores, int32_t *types,
                          const char **extra, const float *extra_scores, uint32_t n_extra)
{
    texts[0] = "<unk>", texts[1] = "<s>", texts[2] = "</s>";
    types[0] = 2, types[1] = 3, types[2] = 3;
    scores[0] = scores[1] = scores[2] = 0.0f;
    for (int b = 0; b < 256; b++) {
        snprintf(byte_names[b], sizeof byte_names[b], "<0x%02X>", b);
        texts[3 + b] = byte_names[b];
        types[3 + b] = 6;
        scores[3 + b] = 0.0f;
    }
    for (uint32_t i = 0; i < n_extra; i++) {
        texts[259 + i] = extra[i];
        types[259 + i] = 1;
        scores[259 + i] = extra_scores[i];
    }
    return 259 + n_extra;
}

static void test_tokenizer_spm_rules(void)
{
    const char *texts[300];
    float scores[300];
    int32_t types[300];
    /* 259 a, 260 b, 261 c, 262 ab (-1), 263 bc (-2), 264 aa (-3), 265 ▁ (-4), 266 ▁a (-0.5) */
    const char *extra[] = {"a", "b", "c", "ab", "bc", "aa", "\xe2\x96\x81", "\xe2\x96\x81" "a"};
    const float es[] = {-10.0f, -10.0f, -10.0f, -1.0f, -2.0f, -3.0f, -4.0f, -0.5f};
    uint32_t n = spm_texts(texts, scores, types, extra, es, 8);
    lm_vocab *v = build_vocab("spm_rules.gguf", "llama", texts, scores, types, n, NULL, 0, 0);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_EQUAL(lm_vocab_type(v), LM_VOCAB_SPM);
    CU_ASSERT_EQUAL(lm_vocab_n_tokens(v), n);
    CU_ASSERT_EQUAL(lm_vocab_bos(v), 1); /* defaults: no ids in the file */
    CU_ASSERT_EQUAL(lm_vocab_eos(v), 2);
    CU_ASSERT(lm_vocab_adds_bos(v));

    /* special values first: empty text is [] or [BOS], never a space prefix */
    CU_ASSERT(encodes_to(v, "", 0, false, NULL, 0));
    CU_ASSERT(encodes_to(v, "", 0, true, (const int32_t[]){1}, 1));
    /* a lone space is U+2581 */
    CU_ASSERT(encodes_to(v, " ", 1, false, (const int32_t[]){265}, 1));
    /* invalid UTF-8 and characters not in the vocabulary fall back to bytes: 'x' 'y' \xff */
    CU_ASSERT(encodes_to(v, "xy\xff", 3, false, (const int32_t[]){3 + 'x', 3 + 'y', 3 + 0xFF}, 3));
    CU_ASSERT(encodes_to(v, "\xe6\x88\x91", 3, false,
                         (const int32_t[]){3 + 0xE6, 3 + 0x88, 3 + 0x91}, 3));
    /* the higher score merges first: ab (-1) beats bc (-2) ... */
    CU_ASSERT(encodes_to(v, "abc", 3, false, (const int32_t[]){262, 261}, 2));
    /* ... and equal scores merge leftmost first: aaa -> aa a, not a aa */
    CU_ASSERT(encodes_to(v, "aaa", 3, false, (const int32_t[]){264, 259}, 2));
    CU_ASSERT(encodes_to(v, "aaaa", 4, false, (const int32_t[]){264, 264}, 2));
    /* spaces become U+2581 and merge like any character */
    CU_ASSERT(encodes_to(v, "b a", 3, false, (const int32_t[]){260, 266}, 2));
    /* NUL is a character like any other */
    CU_ASSERT(encodes_to(v, "a\0", 2, false, (const int32_t[]){259, 3}, 2));
    /* with BOS */
    CU_ASSERT(encodes_to(v, "ab", 2, true, (const int32_t[]){1, 262}, 2));

    /* decoding: control tokens are empty, bytes are bytes, U+2581 is a space */
    char buf[8];
    CU_ASSERT_EQUAL(lm_token_to_piece(v, 1, buf, sizeof buf), 0);
    CU_ASSERT_EQUAL(lm_token_to_piece(v, 3 + 0xFF, buf, sizeof buf), 1);
    CU_ASSERT_EQUAL((unsigned char)buf[0], 0xFFu);
    CU_ASSERT_EQUAL(lm_token_to_piece(v, 266, buf, sizeof buf), 2);
    CU_ASSERT_NSTRING_EQUAL(buf, " a", 2);
    CU_ASSERT_EQUAL(lm_token_to_piece(v, 266, buf, 1), 2); /* full length even when cut */
    CU_ASSERT_EQUAL(lm_token_to_piece(v, -1, buf, sizeof buf), -1);
    CU_ASSERT_EQUAL(lm_token_to_piece(v, (int32_t)n, buf, sizeof buf), -1);
    CU_ASSERT(round_trips(v, "xy b ac\xff", 8, true));
    /* A lead byte claims the following bytes whatever they are (llama.cpp splits symbols by
     * lead-byte length): "\xff" swallows the escaped space after it, the 4-byte symbol is not a
     * token, and its bytes come back as FF E2 96 81: no round trip, exactly as in llama.cpp. */
    CU_ASSERT(encodes_to(v, "\xff b", 3, false,
                         (const int32_t[]){3 + 0xFF, 3 + 0xE2, 3 + 0x96, 3 + 0x81, 260}, 5));
    CU_ASSERT(!round_trips(v, "\xff b", 3, false));
    /* U+2581 in the input is the escaped space itself, so it decodes as ' ' (as in llama.cpp):
     * the random round-trip test leaves it out of its alphabet for that reason. */
    CU_ASSERT(encodes_to(v, "\xe2\x96\x81", 3, false, (const int32_t[]){265}, 1));
    lm_err err = {0};
    char *s = NULL;
    CU_ASSERT_EQUAL(lm_detokenize(v, (const int32_t[]){259, 99999}, 2, &s, &err), LM_E_INPUT);
    CU_ASSERT_PTR_NULL(s);
    lm_vocab_free(v);

    /* with add_space_prefix (the llama default): " " is prepended, and decoding drops it */
    v = build_vocab("spm_prefix.gguf", "llama", texts, scores, types, n, NULL, 0, -1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT(encodes_to(v, "a", 1, false, (const int32_t[]){266}, 1));
    CU_ASSERT(encodes_to(v, " a", 2, false, (const int32_t[]){265, 266}, 2));
    CU_ASSERT(round_trips(v, "a", 1, true));
    CU_ASSERT(round_trips(v, " a", 2, false));
    CU_ASSERT(round_trips(v, "  ", 2, true));
    lm_vocab_free(v);
}

static void test_tokenizer_bpe_rules(void)
{
    /* all 256 byte characters, then merged tokens; merges: "b c" rank 0, "a b" rank 1 */
    const char *texts[300];
    char names[256][4];
    /* the byte characters in id order: id b is byte b */
    for (int b = 0; b < 256; b++) {
        uint32_t cp;
        /* GPT-2 mapping, recomputed independently of the engine */
        if ((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE)) {
            cp = (uint32_t)b;
        } else {
            uint32_t k = 0;
            for (int i = 0; i < b; i++)
                k += !((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE));
            cp = 256 + k;
        }
        size_t len = lm_utf8_encode(cp, names[b]);
        names[b][len] = '\0';
        texts[b] = names[b];
    }
    /* 256 bc, 257 ab, 258 Ġa ("Ġ" = space), 259 <|endoftext|> */
    texts[256] = "bc", texts[257] = "ab", texts[258] = "\xc4\xa0" "a", texts[259] = "<|eot|>";
    int32_t types[260];
    for (int i = 0; i < 260; i++)
        types[i] = 1;
    types[259] = 3;
    const char *merges[] = {"b c", "a b", "\xc4\xa0 a", "b c", "nospace"};
    lm_vocab *v = build_vocab("bpe_rules.gguf", "gpt2", texts, NULL, types, 260, merges, 5, -1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_EQUAL(lm_vocab_type(v), LM_VOCAB_BPE);
    CU_ASSERT(!lm_vocab_adds_bos(v));

    CU_ASSERT(encodes_to(v, "", 0, false, NULL, 0));
    CU_ASSERT(encodes_to(v, "", 0, true, NULL, 0)); /* gpt2 adds no BOS by default */
    CU_ASSERT(encodes_to(v, " ", 1, false, (const int32_t[]){' '}, 1));
    /* the lower rank merges first: b c (0) before a b (1) */
    CU_ASSERT(encodes_to(v, "abc", 3, false, (const int32_t[]){'a', 256}, 2));
    CU_ASSERT(encodes_to(v, "ab", 2, false, (const int32_t[]){257}, 1));
    /* pre-tokenizer: " a" is one word (Ġa), "a b" splits before the space */
    CU_ASSERT(encodes_to(v, "b a", 3, false, (const int32_t[]){'b', 258}, 2));
    /* invalid UTF-8 becomes U+FFFD (EF BF BD), one per bad byte */
    CU_ASSERT(encodes_to(v, "\xff", 1, false, (const int32_t[]){0xEF, 0xBF, 0xBD}, 3));
    /* control tokens decode to nothing; bytes decode through the inverse mapping */
    char buf[8];
    CU_ASSERT_EQUAL(lm_token_to_piece(v, 259, buf, sizeof buf), 0);
    for (int b = 0; b < 256; b++) {
        CU_ASSERT_EQUAL(lm_token_to_piece(v, b, buf, sizeof buf), 1);
        CU_ASSERT_EQUAL((unsigned char)buf[0], (unsigned)b);
    }
    CU_ASSERT(round_trips(v, " ab\tc\n\n 1'sx\x01\x7f", 14, true));
    lm_vocab_free(v);
}

/* The gemma4 tokenizer model (BPE over raw UTF-8, llama.cpp's escape_whitespaces): spaces are
 * U+2581 before merging, text is cut into runs of newlines and runs of the rest, a newline run
 * that is a token is that token, bytes outside the tokens become "<0xNN>" tokens, and decoding
 * turns U+2581 back into spaces. */
static void test_tokenizer_gemma4_raw_bpe(void)
{
    const char *texts[300];
    float scores[300];
    int32_t types[300];
    /* <unk> <s> </s> <0x00>..<0xFF>, then 259 a, 260 b, 261 ▁, 262 ▁a, 263 \n, 264 \n\n,
     * 265 ab */
    const char *extra[] = {"a", "b", "\xe2\x96\x81", "\xe2\x96\x81" "a", "\n", "\n\n", "ab"};
    const float es[] = {0, 0, 0, 0, 0, 0, 0};
    uint32_t n = spm_texts(texts, scores, types, extra, es, 7);
    const char *merges[] = {"\xe2\x96\x81 a", "a b"};
    lm_vocab *v = build_vocab("gemma4.gguf", "gemma4", texts, NULL, types, n, merges, 2, -1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_EQUAL(lm_vocab_type(v), LM_VOCAB_BPE);
    CU_ASSERT(lm_vocab_adds_bos(v)); /* llama.cpp forces it for Gemma 4 */
    CU_ASSERT_PTR_NULL(lm_vocab_pre_note(v));
    CU_ASSERT(encodes_to(v, "", 0, false, NULL, 0));
    CU_ASSERT(encodes_to(v, " a", 2, false, (const int32_t[]){262}, 1));
    CU_ASSERT(encodes_to(v, "ab", 2, false, (const int32_t[]){265}, 1));
    CU_ASSERT(encodes_to(v, "a b", 3, false, (const int32_t[]){259, 261, 260}, 3));
    /* "\n\n" has no merge but is a token; "\n\n\n" is not, so it stays three "\n" */
    CU_ASSERT(encodes_to(v, "a\n\nb", 4, false, (const int32_t[]){259, 264, 260}, 3));
    CU_ASSERT(encodes_to(v, "\n\n\n", 3, false, (const int32_t[]){263, 263, 263}, 3));
    /* bytes outside the tokens: 'c', and é = C3 A9 */
    CU_ASSERT(encodes_to(v, "c\xc3\xa9", 3, false, (const int32_t[]){3 + 'c', 3 + 0xC3, 3 + 0xA9},
                         3));
    CU_ASSERT(round_trips(v, " a b\n\n\nc \xc3\xa9  ", 13, false));
    lm_vocab_free(v);
}

/* A BPE vocabulary of the 256 byte characters (id b = byte b), "12" (256) and "ĠĠ" (257),
 * merges "1 2" and "Ġ Ġ", with tokenizer.ggml.model = model and tokenizer.ggml.pre = pre (NULL:
 * key absent). */
static lm_vocab *build_model_pre_vocab(const char *name, const char *model, const char *pre)
{
    const char *texts[258];
    char names[256][4];
    for (int b = 0; b < 256; b++) {
        uint32_t cp = (uint32_t)b; /* GPT-2 mapping, recomputed as in test_tokenizer_bpe_rules */
        if (!((b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE))) {
            uint32_t k = 0;
            for (int i = 0; i < b; i++)
                k += !((i >= 0x21 && i <= 0x7E) || (i >= 0xA1 && i <= 0xAC) || (i >= 0xAE));
            cp = 256 + k;
        }
        size_t len = lm_utf8_encode(cp, names[b]);
        names[b][len] = '\0';
        texts[b] = names[b];
    }
    texts[256] = "12", texts[257] = "\xc4\xa0\xc4\xa0";
    const char *merges[] = {"1 2", "\xc4\xa0 \xc4\xa0"};
    lm_err err = {0};
    lm_gguf_writer *w = NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", tu_tmpdir(), name);
    CU_ASSERT_FATAL(lm_gguf_writer_create(&w, &err) == LM_OK);
    int rc = lm_gguf_w_str(w, "tokenizer.ggml.model", model, &err);
    if (rc == LM_OK)
        rc = lm_gguf_w_arr(w, "tokenizer.ggml.tokens", LM_GGUF_STR, texts, 258, &err);
    if (rc == LM_OK)
        rc = lm_gguf_w_arr(w, "tokenizer.ggml.merges", LM_GGUF_STR, merges, 2, &err);
    if (rc == LM_OK && pre)
        rc = lm_gguf_w_str(w, "tokenizer.ggml.pre", pre, &err);
    if (rc == LM_OK)
        rc = lm_gguf_writer_save(w, path, &err);
    lm_gguf_writer_free(w);
    lm_gguf *g = NULL;
    lm_vocab *v = NULL;
    if (rc != LM_OK || lm_gguf_open(&g, path, &err) != LM_OK || lm_vocab_load(&v, g, &err) != LM_OK)
        fprintf(stderr, "\n  %s\n", err.msg);
    lm_gguf_close(g);
    return v;
}

/* The same with tokenizer.ggml.model = "gpt2". */
static lm_vocab *build_pre_vocab(const char *name, const char *pre)
{
    return build_model_pre_vocab(name, "gpt2", pre);
}

/* tokenizer.ggml.pre "smollm" (llama.cpp: regexes "\p{N}" then the GPT-2 pattern; HF:
 * Digits(individual_digits) then ByteLevel): every number code point is a word of its own, and
 * the GPT-2 split treats the end of a digit-free run as the end of the text. */
static void test_tokenizer_bpe_pre_digits(void)
{
    const char *names[] = {NULL, "gpt2", "smollm"};
    for (int k = 0; k < 3; k++) {
        lm_vocab *v = build_pre_vocab(k == 2 ? "pre_smollm.gguf" : "pre_gpt2.gguf", names[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(v);
        bool digits = k == 2;
        /* "12": one word -> merged; split into "1" "2" -> no pair to merge */
        static const int32_t split12[] = {'1', '2'}, merged12[] = {256};
        CU_ASSERT(digits ? encodes_to(v, "12", 2, false, split12, 2)
                         : encodes_to(v, "12", 2, false, merged12, 1));
        /* "a  1": GPT-2 leaves the last space to " 1" (a, Ġ, Ġ1 -> Ġ 1 unmerged); with the
         * digit cut first, "a  " ends its segment, so \s+(?!\S) takes both spaces: a ĠĠ 1 */
        static const int32_t both_spaces[] = {'a', 257, '1'}, last_space[] = {'a', ' ', ' ', '1'};
        CU_ASSERT(digits ? encodes_to(v, "a  1", 4, false, both_spaces, 3)
                         : encodes_to(v, "a  1", 4, false, last_space, 4));
        /* mixed letters, a non-ASCII \p{N} (U+216B, Nl) and digits still decode to the input */
        CU_ASSERT(round_trips(v, "x\xe2\x85\xab" "12 y3", 9, false));
        lm_vocab_free(v);
    }
}

/* lm_vocab_pre_note: silent for an absent key and for every tokenizer.ggml.pre value whose
 * split kvdrift implements; one sentence naming any other value (text is then split with the
 * GPT-2 pattern, which is not the model's pre-tokenizer). */
static void test_tokenizer_pre_note(void)
{
    const char *implemented[] = {NULL,      "gpt2",      "gpt-2",          "olmo",
                                 "smollm",  "mellum2",   "llama-bpe",      "qwen2",
                                 "megrez",  "stablelm2", "deepseek-r1-qwen", "qwen35",
                                 "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",
                                 "gpt-4o",  "llama4",    "tekken",         "dbrx",
                                 "glm4",    "chatglm-bpe", "bailingmoe2",  "minicpm5",
                                 "ufakzeka", "seed-coder", "laguna"};
    for (size_t k = 0; k < sizeof implemented / sizeof implemented[0]; k++) {
        lm_vocab *v = build_pre_vocab("pre_note.gguf", implemented[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(v);
        CU_ASSERT_PTR_NULL(lm_vocab_pre_note(v));
        lm_vocab_free(v);
    }
    /* what llama.cpp sets beside the split: BOS added by default for Llama 3, no default BOS
     * id (here: no bos_token_id key) for GLM 4, the BPE default 11 otherwise */
    lm_vocab *v3 = build_pre_vocab("pre_bos.gguf", "llama-bpe");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v3);
    CU_ASSERT(lm_vocab_adds_bos(v3) && lm_vocab_bos(v3) == 11);
    lm_vocab_free(v3);
    v3 = build_pre_vocab("pre_bos.gguf", "glm4");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v3);
    CU_ASSERT(!lm_vocab_adds_bos(v3) && lm_vocab_bos(v3) == -1);
    lm_vocab_free(v3);
    v3 = build_pre_vocab("pre_bos.gguf", "gpt-2");
    CU_ASSERT_PTR_NOT_NULL_FATAL(v3);
    CU_ASSERT(!lm_vocab_adds_bos(v3) && lm_vocab_bos(v3) == 11);
    lm_vocab_free(v3);
    const char *other[] = {"kimi-k2", "chameleon", "viking", "no-such-pre"};
    for (size_t k = 0; k < sizeof other / sizeof other[0]; k++) {
        lm_vocab *v = build_pre_vocab("pre_note.gguf", other[k]);
        CU_ASSERT_PTR_NOT_NULL_FATAL(v);
        const char *note = lm_vocab_pre_note(v);
        CU_ASSERT(note != NULL && strstr(note, other[k]) != NULL && strstr(note, "--tokens"));
        /* the text is still encoded (with the GPT-2 split): "12" is one word, merged */
        static const int32_t merged12[] = {256};
        CU_ASSERT(encodes_to(v, "12", 2, false, merged12, 1));
        lm_vocab_free(v);
    }
}

/* Every implemented pre-tokenizer cuts the strings of tests/data/pretok/inputs.txt (llama.cpp's
 * fixture strings, hand-written cases, random strings) into the words llama.cpp's own
 * unicode_regex_split cuts them into (tests/data/pretok/NAME.splits: code point lengths per
 * string; README there says how they were made). The vocabulary is built with
 * tokenizer.ggml.pre = NAME, so the name table is checked too ("default": no key; "gemma4": the
 * gemma4 tokenizer model, whose split ignores the key). */
static void test_tokenizer_pretokenize_llama_splits(void)
{
    static const char *names[] = {"default", "gpt-2", "starcoder", "llama-bpe", "qwen2", "qwen35",
                                  "deepseek-llm", "deepseek-coder", "deepseek-v3", "falcon",
                                  "gpt-4o", "tekken", "gemma4", "minicpm5", "ufakzeka",
                                  "seed-coder", "laguna"};
    size_t in_len = 0;
    char *in = read_all("tests/data/pretok/inputs.txt", &in_len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(in);
    uint32_t *cp = malloc((in_len + 1) * sizeof *cp);
    CU_ASSERT_PTR_NOT_NULL_FATAL(cp);
    static const char sep[] = "\n__ggml_vocab_test__\n";
    for (size_t k = 0; k < sizeof names / sizeof names[0]; k++) {
        char path[256];
        snprintf(path, sizeof path, "tests/data/pretok/%s.splits", names[k]);
        size_t out_len = 0;
        char *out = read_all(path, &out_len);
        CU_ASSERT_PTR_NOT_NULL_FATAL(out);
        bool gemma4 = strcmp(names[k], "gemma4") == 0;
        lm_vocab *v = build_model_pre_vocab("pre_split.gguf", gemma4 ? "gemma4" : "gpt2",
                                            strcmp(names[k], "default") ? names[k] : NULL);
        CU_ASSERT_PTR_NOT_NULL_FATAL(v);
        CU_ASSERT_PTR_NULL(lm_vocab_pre_note(v));
        int total = 0, pass = 0;
        char *line = out;
        for (size_t pos = 0; pos < in_len;) {
            char *next = strstr(in + pos, sep);
            size_t end = next ? (size_t)(next - in) : in_len, n = 0;
            for (size_t off = pos; off < end;) {
                size_t adv;
                cp[n++] = lm_utf8_decode(in + off, end - off, &adv);
                off += adv;
            }
            pos = next ? end + sizeof sep - 1 : in_len;
            size_t *lens = NULL, n_lens = 0;
            lm_err err = {0};
            CU_ASSERT_EQUAL_FATAL(lm_pretokenize(v->pre, cp, n, &lens, &n_lens, &err), LM_OK);
            char *eol = strchr(line, '\n');
            CU_ASSERT_PTR_NOT_NULL_FATAL(eol);
            bool ok = true;
            size_t i = 0;
            for (char *q = line; q < eol; i++) {
                char *e;
                unsigned long want = strtoul(q, &e, 10);
                if (e == q)
                    break;
                ok = ok && i < n_lens && lens[i] == want;
                q = e;
            }
            ok = ok && i == n_lens;
            total++;
            pass += ok;
            if (!ok)
                fprintf(stderr, "\n  %s: string %d splits as llama.cpp's does not (want %.*s)\n",
                        names[k], total, (int)(eol - line), line);
            free(lens);
            line = eol + 1;
        }
        fprintf(stderr, "\n  pre-tokenizer %s: %d/%d strings split as llama.cpp's ", names[k],
                pass, total);
        CU_ASSERT(total > 300);
        CU_ASSERT_EQUAL(pass, total);
        CU_ASSERT_EQUAL((size_t)(line - out), out_len); /* one line per string */
        lm_vocab_free(v);
        free(out);
    }
    free(cp);
    free(in);
}

/* User-defined tokens cut the input before encoding even without special-token parsing, and
 * SPM text after one gets the space prefix again (llama.cpp); control tokens stay text. */
static void test_tokenizer_user_defined(void)
{
    const char *texts[300];
    float scores[300];
    int32_t types[300];
    /* 259 a, 260 ▁, 261 ▁a, 262 <u> (user-defined), 263 <uu> (user-defined, longer: first) */
    const char *extra[] = {"a", "\xe2\x96\x81", "\xe2\x96\x81" "a", "<u>", "<uu>"};
    const float es[] = {-1.0f, -2.0f, -0.5f, 0.0f, 0.0f};
    uint32_t n = spm_texts(texts, scores, types, extra, es, 5);
    types[262] = 4;
    types[263] = 4;
    lm_vocab *v = build_vocab("spm_user.gguf", "llama", texts, scores, types, n, NULL, 0, -1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT(encodes_to(v, "a<u>a", 5, false, (const int32_t[]){261, 262, 261}, 3));
    CU_ASSERT(encodes_to(v, "<u><uu>", 7, true, (const int32_t[]){1, 262, 263}, 3));
    CU_ASSERT(encodes_to(v, "<uu>a<u>", 8, false, (const int32_t[]){263, 261, 262}, 3));
    /* <s> is a control token: plain text, bytes here */
    CU_ASSERT(encodes_to(v, "<s>", 3, false,
                         (const int32_t[]){260, 3 + '<', 3 + 's', 3 + '>'}, 4));
    char buf[8];
    CU_ASSERT_EQUAL(lm_token_to_piece(v, 262, buf, sizeof buf), 3); /* raw text */
    CU_ASSERT_NSTRING_EQUAL(buf, "<u>", 3);
    lm_vocab_free(v);
}

/* With parse_special, the text of control and unknown tokens becomes those tokens (longest
 * text first), as user-defined text always does; the text between is encoded as without, and
 * SPM puts its space prefix on text after a special token (llama.cpp's is_prev_special). */
static void test_tokenizer_parse_special(void)
{
    const char *texts[300];
    float scores[300];
    int32_t types[300];
    /* 259 a, 260 ▁, 261 ▁a, 262 <u> (user-defined), 263 <|im (control), 264 <|im_start|>
     * (control; longer, so it must win over 263 although its id is higher) */
    const char *extra[] = {"a", "\xe2\x96\x81", "\xe2\x96\x81" "a", "<u>", "<|im", "<|im_start|>"};
    const float es[] = {-1.0f, -2.0f, -0.5f, 0.0f, 0.0f, 0.0f};
    uint32_t n = spm_texts(texts, scores, types, extra, es, 6);
    types[262] = 4;
    types[263] = 3;
    types[264] = 3;
    lm_vocab *v = build_vocab("spm_special.gguf", "llama", texts, scores, types, n, NULL, 0, -1);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);

    /* parse_special = false: today's ids; control text stays bytes, user-defined still cuts */
    CU_ASSERT(encodes_to_ex(v, "<s>", 3, false, false,
                            (const int32_t[]){260, 3 + '<', 3 + 's', 3 + '>'}, 4));
    CU_ASSERT(encodes_to_ex(v, "<|ima", 5, false, false,
                            (const int32_t[]){260, 3 + '<', 3 + '|', 3 + 'i', 3 + 'm', 259}, 6));
    CU_ASSERT(encodes_to_ex(v, "a<u>a", 5, false, false, (const int32_t[]){261, 262, 261}, 3));
    static const char chat[] = "<|im_start|>a<s>a<u>";
    lm_err err = {0};
    int32_t *plain = NULL, *ex = NULL;
    size_t n_plain = 0, n_ex = 0;
    CU_ASSERT_FATAL(lm_tokenize(v, chat, strlen(chat), true, &plain, &n_plain, &err) == LM_OK);
    CU_ASSERT_FATAL(lm_tokenize_ex(v, chat, strlen(chat), true, false, &ex, &n_ex, &err) ==
                    LM_OK);
    CU_ASSERT(n_plain == n_ex && memcmp(plain, ex, n_ex * sizeof *ex) == 0);
    for (size_t i = 1; i < n_ex; i++) /* [0] is the BOS add_special put there */
        CU_ASSERT(ex[i] != 1 && ex[i] != 263 && ex[i] != 264);
    free(plain);
    free(ex);

    /* parse_special = true */
    CU_ASSERT(encodes_to_ex(v, "<s>", 3, false, true, (const int32_t[]){1}, 1));
    CU_ASSERT(encodes_to_ex(v, "<unk>", 5, false, true, (const int32_t[]){0}, 1));
    /* "a" after <s> gets the space prefix: "▁a" */
    CU_ASSERT(encodes_to_ex(v, "<s>a", 4, false, true, (const int32_t[]){1, 261}, 2));
    CU_ASSERT(encodes_to_ex(v, "<s>a", 4, true, true, (const int32_t[]){1, 1, 261}, 3));
    CU_ASSERT(encodes_to_ex(v, "a<s>a", 5, false, true, (const int32_t[]){261, 1, 261}, 3));
    /* longest match: <|im_start|> is one token, not <|im + bytes */
    CU_ASSERT(encodes_to_ex(v, "<|im_start|>a", 13, false, true, (const int32_t[]){264, 261}, 2));
    CU_ASSERT(encodes_to_ex(v, "<|ima", 5, false, true, (const int32_t[]){263, 261}, 2));
    CU_ASSERT(encodes_to_ex(v, "<u>a<|im_start|><|im", 20, false, true,
                            (const int32_t[]){262, 261, 264, 263}, 4));
    /* the text between is encoded as it is alone: "a a" -> ▁a ▁a; " a a" -> ▁ ▁a ▁a */
    CU_ASSERT(encodes_to_ex(v, "a a<s> a a", 10, false, true,
                            (const int32_t[]){261, 261, 1, 260, 261, 261}, 6));
    CU_ASSERT(encodes_to_ex(v, "a a", 3, false, false, (const int32_t[]){261, 261}, 2));
    lm_vocab_free(v);
}

static void test_tokenizer_load_errors(void)
{
    const char *texts[] = {"a"};
    /* an unknown tokenizer model is unsupported, not a crash */
    lm_err err = {0};
    lm_gguf_writer *w = NULL;
    char path[1024];
    snprintf(path, sizeof path, "%s/tok_bert.gguf", tu_tmpdir());
    CU_ASSERT_FATAL(lm_gguf_writer_create(&w, &err) == LM_OK);
    CU_ASSERT(lm_gguf_w_str(w, "tokenizer.ggml.model", "bert", &err) == LM_OK);
    CU_ASSERT(lm_gguf_w_arr(w, "tokenizer.ggml.tokens", LM_GGUF_STR, texts, 1, &err) == LM_OK);
    CU_ASSERT(lm_gguf_writer_save(w, path, &err) == LM_OK);
    lm_gguf_writer_free(w);
    lm_gguf *g = NULL;
    lm_vocab *v = NULL;
    CU_ASSERT_FATAL(lm_gguf_open(&g, path, &err) == LM_OK);
    CU_ASSERT_EQUAL(lm_vocab_load(&v, g, &err), LM_E_UNSUPPORTED);
    CU_ASSERT_PTR_NULL(v);
    CU_ASSERT_PTR_NOT_NULL(strstr(err.msg, "bert"));
    lm_gguf_close(g);

    /* gpt2 without merges, and scores of the wrong length, are bad input */
    lm_err e2 = {0};
    CU_ASSERT_PTR_NULL(build_vocab("tok_nomerges.gguf", "gpt2", texts, NULL, NULL, 1, NULL, 0, -1));
    snprintf(path, sizeof path, "%s/tok_nomerges.gguf", tu_tmpdir());
    CU_ASSERT_FATAL(lm_gguf_open(&g, path, &e2) == LM_OK);
    CU_ASSERT_EQUAL(lm_vocab_load(&v, g, &e2), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e2.msg, "merges"));
    lm_gguf_close(g);

    /* no tokenizer at all */
    lm_err e3 = {0};
    snprintf(path, sizeof path, "%s/tok_none.gguf", tu_tmpdir());
    CU_ASSERT_FATAL(lm_gguf_writer_create(&w, &e3) == LM_OK);
    CU_ASSERT(lm_gguf_w_str(w, "general.name", "no tokenizer", &e3) == LM_OK);
    CU_ASSERT(lm_gguf_writer_save(w, path, &e3) == LM_OK);
    lm_gguf_writer_free(w);
    CU_ASSERT_FATAL(lm_gguf_open(&g, path, &e3) == LM_OK);
    CU_ASSERT_EQUAL(lm_vocab_load(&v, g, &e3), LM_E_INPUT);
    CU_ASSERT_PTR_NOT_NULL(strstr(e3.msg, "tokenizer.ggml.model"));
    lm_gguf_close(g);
}

/* ---------------------------------------------------------------- llama.cpp fixtures */

/* Runs one fixture the way llama.cpp's test-tokenizer-0 reads it: the .inp text is cut at every
 * "\n__ggml_vocab_test__\n" (what follows the last separator is a test only if non-empty), the
 * .out has one line per test of space-separated ids (surrounding whitespace ignored), and each
 * test encodes without BOS. Prints the pass count and every mismatch. vocab_rel is looked for
 * in $KVDRIFT_MODELS, then in `make models`' cache (a SKIP line when absent); a vocabulary whose
 * tokenizer model or pre-tokenizer kvdrift does not implement is a SKIP line too. */
static void run_fixture(const char *vocab_rel)
{
    const char *p = tu_cached_model_path(vocab_rel);
    if (!p)
        return;
    char vpath[1024], inp[1100], outp[1100];
    snprintf(vpath, sizeof vpath, "%s", p);
    snprintf(inp, sizeof inp, "%s.inp", vpath);
    snprintf(outp, sizeof outp, "%s.out", vpath);
    lm_err err = {0};
    lm_gguf *g = NULL;
    CU_ASSERT_EQUAL_FATAL(lm_gguf_open(&g, vpath, &err), LM_OK);
    lm_vocab *v = NULL;
    int load_rc = lm_vocab_load(&v, g, &err);
    lm_gguf_close(g);
    if (load_rc == LM_E_UNSUPPORTED) {
        fprintf(stderr, "\n  SKIP: %s: %s\n", vocab_rel, err.msg);
        return;
    }
    if (load_rc != LM_OK)
        fprintf(stderr, "\n  %s\n", err.msg);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    if (lm_vocab_pre_note(v) != NULL) {
        fprintf(stderr, "\n  SKIP: %s: %s\n", vocab_rel, lm_vocab_pre_note(v));
        lm_vocab_free(v);
        return;
    }
    size_t in_len = 0, out_len = 0;
    char *in = read_all(inp, &in_len), *out = read_all(outp, &out_len);
    CU_ASSERT_PTR_NOT_NULL_FATAL(in);
    CU_ASSERT_PTR_NOT_NULL_FATAL(out);

    static const char sep[] = "\n__ggml_vocab_test__\n";
    size_t pos = 0, opos = 0;
    int total = 0, pass = 0, rt_pass = 0;
    while (pos < in_len) {
        char *next = strstr(in + pos, sep); /* .inp holds no NUL bytes */
        size_t end = next ? (size_t)(next - in) : in_len;
        const char *s = in + pos;
        size_t len = end - pos;
        pos = next ? end + sizeof sep - 1 : in_len;

        /* the matching .out line */
        CU_ASSERT_FATAL(opos < out_len);
        char *eol = memchr(out + opos, '\n', out_len - opos);
        size_t line_end = eol ? (size_t)(eol - out) : out_len;
        int32_t want[1024];
        size_t n_want = 0;
        char *q = out + opos;
        while (q < out + line_end) {
            char *e;
            long id = strtol(q, &e, 10);
            if (e == q)
                break;
            CU_ASSERT_FATAL(n_want < 1024);
            want[n_want++] = (int32_t)id;
            q = e;
        }
        opos = eol ? line_end + 1 : out_len;

        total++;
        int32_t *ids = NULL;
        size_t n = 0;
        int rc = lm_tokenize(v, s, len, false, &ids, &n, &err);
        bool ok = rc == LM_OK && n == n_want && (n == 0 || memcmp(ids, want, n * 4) == 0);
        if (ok) {
            pass++;
        } else {
            fprintf(stderr, "\n  MISMATCH %s test %d '%.*s'\n    want:", vocab_rel, total,
                    (int)(len > 60 ? 60 : len), s);
            for (size_t i = 0; i < n_want; i++)
                fprintf(stderr, " %d", want[i]);
            fprintf(stderr, "\n    got: ");
            for (size_t i = 0; rc == LM_OK && i < n; i++)
                fprintf(stderr, " %d", ids[i]);
            fprintf(stderr, "%s\n", rc == LM_OK ? "" : err.msg);
        }
        char *back = NULL;
        if (rc == LM_OK && lm_detokenize(v, ids, n, &back, &err) == LM_OK &&
            strlen(back) == len && memcmp(back, s, len) == 0)
            rt_pass++;
        else
            fprintf(stderr, "\n  ROUND TRIP %s test %d: '%.*s' came back as '%s'\n", vocab_rel,
                    total, (int)(len > 60 ? 60 : len), s, back ? back : "(error)");
        free(back);
        free(ids);
    }
    /* no .out lines may remain (a trailing empty line at most) */
    while (opos < out_len && (out[opos] == '\n' || out[opos] == ' '))
        opos++;
    CU_ASSERT_EQUAL(opos, out_len);
    fprintf(stderr, "\n  %s: %d/%d encode exactly, %d/%d round-trip ", vocab_rel, pass, total,
            rt_pass, total);
    CU_ASSERT(total > 0);
    CU_ASSERT_EQUAL(pass, total);
    /* Every fixture string is valid UTF-8, and neither encoder loses bytes of valid UTF-8. */
    CU_ASSERT_EQUAL(rt_pass, total);
    free(in);
    free(out);
    lm_vocab_free(v);
}

/* Every fixture llama.cpp ships with test strings (models/ggml-vocab-NAME.gguf.inp/.out in
 * llama-cpp-python 0.3.36's copy, which `make models` fetches; the models folder's vocab/ may
 * hold some of them too): SPM (llama-spm, phi-3), every BPE pre-tokenizer and gemma-4's raw BPE;
 * bert-bge (WordPiece) prints a SKIP line, as kvdrift does not tokenize that model. */
static void test_tokenizer_fixtures(void)
{
    static const char *names[] = {
        "llama-spm", "phi-3",     "gpt-2",          "mpt",          "llama-bpe",
        "qwen2",     "qwen35",    "starcoder",      "refact",       "command-r",
        "falcon",    "deepseek-llm", "deepseek-coder", "bert-bge",  "gemma-4",
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        char rel[128];
        snprintf(rel, sizeof rel, "vocab/ggml-vocab-%s.gguf", names[i]);
        run_fixture(rel);
    }
}

static void test_tokenizer_stories260k(void)
{
    const char *p = tu_model_path("stories260K.gguf");
    if (!p)
        return;
    lm_vocab *v = load_vocab_file(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    CU_ASSERT_EQUAL(lm_vocab_n_tokens(v), 512u);
    CU_ASSERT_EQUAL(lm_vocab_bos(v), 1);
    CU_ASSERT_EQUAL(lm_vocab_eos(v), 2);
    CU_ASSERT(lm_vocab_adds_bos(v)); /* no add_bos_token key: SPM default */
    /* llama.cpp's tokenization of the prompt (its reference ids) */
    CU_ASSERT(encodes_to(v, "Once upon a time", 16, true,
                         (const int32_t[]){1, 403, 407, 261, 378}, 5));
    /* "<s>Once" with special tokens parsed: [1] then "Once" encoded alone without BOS (the
     * space prefix applies after a special token as at the start, llama.cpp), i.e. the same ids
     * as BOS + "Once"; without parsing, "<s>" is text and 1 never appears. */
    {
        lm_err err = {0};
        int32_t *once = NULL, *sp = NULL, *raw = NULL;
        size_t n_once = 0, n_sp = 0, n_raw = 0;
        CU_ASSERT_FATAL(lm_tokenize(v, "Once", 4, false, &once, &n_once, &err) == LM_OK);
        CU_ASSERT_FATAL(lm_tokenize_ex(v, "<s>Once", 7, false, true, &sp, &n_sp, &err) == LM_OK);
        CU_ASSERT_FATAL(lm_tokenize_ex(v, "<s>Once", 7, false, false, &raw, &n_raw, &err) ==
                        LM_OK);
        CU_ASSERT(n_once >= 1 && n_sp == n_once + 1 && sp[0] == 1 &&
                  memcmp(sp + 1, once, n_once * sizeof *once) == 0);
        CU_ASSERT(n_once >= 1 && once[0] == 403); /* "▁Once"... as in the prompt above */
        for (size_t i = 0; i < n_raw; i++)
            CU_ASSERT(raw[i] != 1);
        free(once);
        free(sp);
        free(raw);
    }
    CU_ASSERT(encodes_to_ex(v, "Once upon a time", 16, true, true,
                            (const int32_t[]){1, 403, 407, 261, 378}, 5));
    /* special values: empty, one space, invalid UTF-8, and only bytes outside this small
     * vocabulary (我 = E6 88 91): "▁" then one byte token each, and all decode back */
    CU_ASSERT(encodes_to(v, "", 0, true, (const int32_t[]){1}, 1));
    int32_t *ids = NULL;
    size_t n = 0;
    lm_err err = {0};
    CU_ASSERT_FATAL(lm_tokenize(v, "\xe6\x88\x91\xff", 4, false, &ids, &n, &err) == LM_OK);
    CU_ASSERT_EQUAL(n, 5u);
    const char want_pieces[][2] = {" ", "\xe6", "\x88", "\x91", "\xff"};
    for (size_t i = 0; i < n && i < 5; i++) {
        char buf[8];
        CU_ASSERT_EQUAL(lm_token_to_piece(v, ids[i], buf, sizeof buf), 1);
        CU_ASSERT_EQUAL(buf[0], want_pieces[i][0]);
    }
    free(ids);
    CU_ASSERT(round_trips(v, " ", 1, true));
    CU_ASSERT(round_trips(v, "\xe6\x88\x91\xff", 4, true));
    CU_ASSERT(round_trips(v, "\x80\xc3", 2, false));
    const char *story = "Once upon a time, there was a little girl named Lily.";
    CU_ASSERT(round_trips(v, story, strlen(story), true));
    lm_vocab_free(v);
}

/* Random strings (seeded; KVD_TEST_SEED overrides): valid UTF-8 drawn from ASCII letters,
 * digits, punctuation, whitespace runs, apostrophes, Latin/Cyrillic/CJK and emoji must decode
 * back to themselves in every vocabulary (U+2581 excluded: SPM reads it as a space);
 * arbitrary bytes must encode without error to ids in range (no round trip expected: BPE
 * turns invalid bytes into U+FFFD, SPM lead bytes swallow what follows). */
static void random_text(uint64_t *st, char *buf, size_t *len, bool valid)
{
    static const char *atoms[] = {"a", "Z", "q", "7", "0", " ", "  ", "\t", "\n", "\r\n", "'",
                                  "'s", "'ll", "!", "?", ".", ",", "-", "\xc3\xa9", "\xd0\xb6",
                                  "\xe6\x88\x91", "\xf0\x9f\xa6\x99",
                                  "\xc2\xa0", "\xe3\x80\x80", "the", " Hello", "333"};
    size_t n_atoms = sizeof atoms / sizeof atoms[0];
    size_t target = (size_t)(tu_rand_u64(st) % 40);
    size_t k = 0;
    for (size_t i = 0; i < target; i++) {
        if (valid) {
            const char *a = atoms[tu_rand_u64(st) % n_atoms];
            size_t al = strlen(a);
            memcpy(buf + k, a, al);
            k += al;
        } else {
            buf[k++] = (char)(1 + tu_rand_u64(st) % 255); /* no NUL: strlen-based decode */
        }
    }
    buf[k] = '\0';
    *len = k;
}

static void random_round_trips(const char *rel)
{
    const char *p = tu_model_path(rel);
    if (!p)
        return;
    lm_vocab *v = load_vocab_file(p);
    CU_ASSERT_PTR_NOT_NULL_FATAL(v);
    uint64_t st = tu_seed();
    int bad = 0;
    for (int t = 0; t < 300; t++) {
        char buf[256];
        size_t len;
        random_text(&st, buf, &len, true);
        if (!round_trips(v, buf, len, t % 2 == 0) && bad++ < 5)
            fprintf(stderr, "\n  %s: '%s' does not round-trip", rel, buf);
        random_text(&st, buf, &len, false);
        lm_err err = {0};
        int32_t *ids = NULL;
        size_t n = 0;
        CU_ASSERT_EQUAL_FATAL(lm_tokenize(v, buf, len, true, &ids, &n, &err), LM_OK);
        for (size_t i = 0; i < n; i++)
            CU_ASSERT(ids[i] >= 0 && (uint32_t)ids[i] < lm_vocab_n_tokens(v));
        free(ids);
    }
    CU_ASSERT_EQUAL(bad, 0);
    lm_vocab_free(v);
}

static void test_tokenizer_random_round_trip(void)
{
    random_round_trips("vocab/ggml-vocab-llama-spm.gguf");
    random_round_trips("vocab/ggml-vocab-gpt-2.gguf");
    random_round_trips("stories260K.gguf");
}

void test_tokenizer_register(void)
{
    CU_pSuite s = CU_add_suite("tokenizer", NULL, NULL);
    CU_add_test(s, "test_tokenizer_utf8_special_values", test_tokenizer_utf8_special_values);
    CU_add_test(s, "test_tokenizer_unicode_categories", test_tokenizer_unicode_categories);
    CU_add_test(s, "test_tokenizer_spm_rules", test_tokenizer_spm_rules);
    CU_add_test(s, "test_tokenizer_bpe_rules", test_tokenizer_bpe_rules);
    CU_add_test(s, "test_tokenizer_user_defined", test_tokenizer_user_defined);
    CU_add_test(s, "test_tokenizer_parse_special", test_tokenizer_parse_special);
    CU_add_test(s, "test_tokenizer_bpe_pre_digits", test_tokenizer_bpe_pre_digits);
    CU_add_test(s, "test_tokenizer_gemma4_raw_bpe", test_tokenizer_gemma4_raw_bpe);
    CU_add_test(s, "test_tokenizer_pre_note", test_tokenizer_pre_note);
    CU_add_test(s, "test_tokenizer_pretokenize_llama_splits",
                test_tokenizer_pretokenize_llama_splits);
    CU_add_test(s, "test_tokenizer_load_errors", test_tokenizer_load_errors);
    CU_add_test(s, "test_tokenizer_fixtures", test_tokenizer_fixtures);
    CU_add_test(s, "test_tokenizer_stories260k", test_tokenizer_stories260k);
    CU_add_test(s, "test_tokenizer_random_round_trip", test_tokenizer_random_round_trip);
}
