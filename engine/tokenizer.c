/* tokenizer.c — vocabulary loading from GGUF metadata, dispatch to the SPM or BPE encoder, and
 * decoding (token -> bytes).
 *
 * Behaviour follows llama.cpp's llama_vocab where a choice exists (it produced the fixture
 * ids the tests check): token texts are looked up last-definition-wins, merges
 * first-definition-wins, empty token texts become "[EMPTY_<id>]", special ids out of range keep
 * their defaults (SPM: BOS 1, EOS 2, UNK 0; BPE: BOS = EOS = 11, no UNK; gemma4 and GLM 4:
 * none); add_bos_token defaults to true for SPM and Gemma 4, and for gpt2 to false except for
 * the pre-tokenizers llama.cpp adds BOS for (Llama 3, tekken), add_space_prefix to true for
 * SPM. Encoding first cuts the input at user-defined tokens (control tokens stay plain text:
 * special tokens are never parsed), then encodes each text piece; with add_special it adds BOS
 * (and EOS when add_eos_token is set). Decoded pieces of every token are computed once at
 * load. */
#include "tokenizer_internal.h"
#include "unicode.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- hashing */

/* FNV-1a, 64-bit: a byte at a time; token texts are short. */
static uint64_t fnv_bytes(uint64_t h, const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        h ^= (unsigned char)s[i];
        h *= UINT64_C(0x100000001b3);
    }
    return h;
}

static uint64_t hash_text(const char *s, size_t n)
{
    return fnv_bytes(UINT64_C(0xcbf29ce484222325), s, n);
}

/* The pair hash mixes in the left length so that ("ab","c") and ("a","bc") differ. */
static uint64_t hash_pair(const char *l, size_t ln, const char *r, size_t rn)
{
    uint64_t h = hash_text(l, ln);
    h ^= (uint64_t)ln * UINT64_C(0x9e3779b97f4a7c15);
    return fnv_bytes(h, r, rn);
}

static uint32_t table_size_for(uint32_t n)
{
    uint32_t size = 16;
    while (size < 2u * n) /* load factor <= 1/2 */
        size <<= 1;
    return size;
}

int32_t lm_vocab_find(const lm_vocab *v, const char *s, size_t n)
{
    uint32_t i = (uint32_t)hash_text(s, n) & v->tok_mask;
    for (;;) {
        uint32_t id = v->tok_hash[i];
        if (id == TOK_NONE)
            return -1;
        uint32_t off = v->text_off[id];
        if (v->text_off[id + 1] - off == n && memcmp(v->text + off, s, n) == 0)
            return (int32_t)id;
        i = (i + 1) & v->tok_mask;
    }
}

int32_t lm_vocab_merge_rank(const lm_vocab *v, const char *l, size_t ln, const char *r, size_t rn)
{
    if (v->n_merges == 0)
        return -1;
    uint32_t i = (uint32_t)hash_pair(l, ln, r, rn) & v->merge_mask;
    for (;;) {
        uint32_t m = v->merge_hash[i];
        if (m == TOK_NONE)
            return -1;
        const char *t = v->merge_text + v->m_off[m];
        if (v->m_llen[m] == ln && v->m_rlen[m] == rn && memcmp(t, l, ln) == 0 &&
            memcmp(t + ln, r, rn) == 0)
            return (int32_t)m;
        i = (i + 1) & v->merge_mask;
    }
}

int lm_tok_grow(void **p, size_t *cap, size_t need, size_t elem, lm_err *err)
{
    if (need <= *cap)
        return LM_OK;
    size_t c = *cap ? *cap : 64;
    while (c < need)
        c *= 2;
    void *q = realloc(*p, c * elem);
    if (!q)
        return LM_FAIL(err, LM_E_NOMEM, "tokenizer: out of memory (%zu bytes)", c * elem);
    *p = q;
    *cap = c;
    return LM_OK;
}

int tok_out_push(tok_out *o, int32_t id, lm_err *err)
{
    if (lm_tok_grow((void **)&o->ids, &o->cap, o->n + 1, sizeof *o->ids, err) != LM_OK)
        return err->code;
    o->ids[o->n++] = id;
    return LM_OK;
}

/* ---------------------------------------------------------------- loading */

/* A special token id: absent -> def; out of range -> def (as llama.cpp, which warns). Stored as
 * u32 by converters, but some files write -1 as i32 (or 0xFFFFFFFF): both mean "none" here. */
static int special_id(const lm_gguf *g, const char *key, int32_t def, uint32_t n_tokens,
                      int32_t *out, lm_err *err)
{
    *out = def;
    int64_t ix = lm_gguf_find(g, key);
    if (ix < 0)
        return LM_OK;
    lm_err local = {0};
    uint32_t u;
    if (lm_gguf_get_u32(g, key, 0, &u, &local) != LM_OK) {
        int32_t i;
        if (lm_gguf_get_i32(g, key, 0, &i, err) != LM_OK)
            return err ? err->code : LM_E_INPUT;
        if (i < 0)
            return LM_OK; /* "no such token": keep the default, as llama.cpp does for bad ids */
        u = (uint32_t)i;
    }
    if (u < n_tokens)
        *out = (int32_t)u;
    return LM_OK;
}

/* Appends s[0..n) to a growable byte arena. */
typedef struct arena {
    char *p;
    size_t n, cap;
} arena;

static int arena_put(arena *a, const char *s, size_t n, lm_err *err)
{
    if (a->n + n > a->cap) {
        size_t cap = a->cap ? a->cap : 4096;
        while (cap < a->n + n)
            cap *= 2;
        char *p = realloc(a->p, cap);
        if (!p)
            return LM_FAIL(err, LM_E_NOMEM, "tokenizer: out of memory (%zu bytes)", cap);
        a->p = p;
        a->cap = cap;
    }
    if (n)
        memcpy(a->p + a->n, s, n);
    a->n += n;
    return LM_OK;
}

/* Decoded bytes of token id (see lm_token_to_piece) appended to a. */
static int make_piece(const lm_vocab *v, uint32_t id, arena *a, lm_err *err)
{
    const char *t = v->text + v->text_off[id];
    size_t n = v->text_off[id + 1] - v->text_off[id];
    switch (v->types[id]) {
    case TOK_USER_DEFINED:
        return arena_put(a, t, n, err);
    case TOK_CONTROL:
    case TOK_UNUSED:
    case TOK_UNDEFINED:
        return LM_OK;
    default:
        break;
    }
    if (v->kind == LM_VOCAB_SPM || v->bpe_raw) {
        if (v->types[id] == TOK_UNKNOWN) /* SPM: llama.cpp prints U+2585 for <unk> */
            return v->bpe_raw ? LM_OK : arena_put(a, "\xe2\x96\x85", 3, err);
        if (v->types[id] == TOK_BYTE) {
            /* "<0xNN>": the hex digits after "<0x", as llama.cpp's token_to_byte reads them */
            char hex[3] = {0};
            if (n >= 5)
                memcpy(hex, t + 3, 2);
            char c = (char)strtoul(hex, NULL, 16);
            return arena_put(a, &c, 1, err);
        }
        /* NORMAL: U+2581 (the escaped space) back to ' ' */
        for (size_t i = 0; i < n;) {
            if (i + 3 <= n && memcmp(t + i, "\xe2\x96\x81", 3) == 0) {
                if (arena_put(a, " ", 1, err) != LM_OK)
                    return err->code;
                i += 3;
            } else {
                if (arena_put(a, t + i, 1, err) != LM_OK)
                    return err->code;
                i++;
            }
        }
        return LM_OK;
    }
    /* BPE: only NORMAL tokens produce text (llama.cpp suppresses the other types). Each code
     * point of the text is one byte under the GPT-2 mapping; a code point outside the mapping
     * is passed through as its own UTF-8. */
    if (v->types[id] != TOK_NORMAL)
        return LM_OK;
    for (size_t i = 0; i < n;) {
        size_t adv;
        uint32_t cp = lm_utf8_decode(t + i, n - i, &adv);
        int b = lm_bpe_cp_to_byte(cp);
        if (b >= 0) {
            char c = (char)b;
            if (arena_put(a, &c, 1, err) != LM_OK)
                return err->code;
        } else if (arena_put(a, t + i, adv, err) != LM_OK) {
            return err->code;
        }
        i += adv;
    }
    return LM_OK;
}

static int load_merges(lm_vocab *v, const lm_gguf *g, const char *path, lm_err *err)
{
    const lm_gguf_arr *arr = NULL;
    if (lm_gguf_get_arr(g, "tokenizer.ggml.merges", LM_GGUF_STR, &arr, err) != LM_OK)
        return err->code;
    if (!arr)
        return LM_FAIL(err, LM_E_INPUT, "%s: gpt2 vocabulary without tokenizer.ggml.merges", path);
    if (arr->n >= UINT32_MAX / 4)
        return LM_FAIL(err, LM_E_INPUT, "%s: %llu merges is too many", path,
                       (unsigned long long)arr->n);
    const lm_gguf_str *ms = arr->data;
    uint32_t n = (uint32_t)arr->n;
    arena a = {0};
    v->m_off = malloc((n ? n : 1) * sizeof *v->m_off);
    v->m_llen = malloc((n ? n : 1) * sizeof *v->m_llen);
    v->m_rlen = malloc((n ? n : 1) * sizeof *v->m_rlen);
    v->merge_mask = table_size_for(n) - 1;
    v->merge_hash = malloc(((size_t)v->merge_mask + 1) * sizeof *v->merge_hash);
    if (!v->m_off || !v->m_llen || !v->m_rlen || !v->merge_hash)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory for %u merges", path, n);
    memset(v->merge_hash, 0xFF, ((size_t)v->merge_mask + 1) * sizeof *v->merge_hash);

    for (uint32_t i = 0; i < n; i++) {
        const char *s = ms[i].ptr;
        size_t len = (size_t)ms[i].len;
        /* "left right": split at the first space after the first byte (so a left part may be
         * a lone space). No such space: llama.cpp records an empty pair that can never match. */
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) {
            v->m_off[i] = v->m_llen[i] = v->m_rlen[i] = 0; /* never entered in the hash */
            continue;
        }
        size_t ln = (size_t)(sp - s), rn = len - ln - 1;
        if (a.n + len > UINT32_MAX) {
            free(a.p);
            return LM_FAIL(err, LM_E_INPUT, "%s: merges exceed 4 GiB", path);
        }
        /* First definition wins: a later duplicate keeps the earlier (better) rank. */
        uint32_t h = (uint32_t)hash_pair(s, ln, sp + 1, rn) & v->merge_mask;
        bool dup = false;
        while (v->merge_hash[h] != TOK_NONE) {
            uint32_t m = v->merge_hash[h];
            const char *t = a.p + v->m_off[m];
            if (v->m_llen[m] == ln && v->m_rlen[m] == rn && memcmp(t, s, ln) == 0 &&
                memcmp(t + ln, sp + 1, rn) == 0) {
                dup = true;
                break;
            }
            h = (h + 1) & v->merge_mask;
        }
        /* The rank is the merge's index in the file (llama.cpp), skipped entries included. */
        v->m_off[i] = (uint32_t)a.n;
        v->m_llen[i] = (uint32_t)ln;
        v->m_rlen[i] = (uint32_t)rn;
        if (arena_put(&a, s, ln, err) != LM_OK || arena_put(&a, sp + 1, rn, err) != LM_OK) {
            free(a.p);
            return err->code;
        }
        if (!dup)
            v->merge_hash[h] = i;
    }
    v->merge_text = a.p ? a.p : malloc(1);
    v->n_merges = n;
    if (!v->merge_text)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    return LM_OK;
}

/* qsort has no context argument; loading is not re-entrant only for this sort's duration. */
static _Thread_local const lm_vocab *sort_vocab;

static int cmp_longer_first(const void *pa, const void *pb)
{
    uint32_t a = *(const uint32_t *)pa, b = *(const uint32_t *)pb;
    uint32_t la = sort_vocab->text_off[a + 1] - sort_vocab->text_off[a];
    uint32_t lb = sort_vocab->text_off[b + 1] - sort_vocab->text_off[b];
    if (la != lb)
        return la > lb ? -1 : 1;
    return (a > b) - (a < b);
}

/* Whether token id can cut the input (see special_ids); empty text could never be matched. */
static bool is_special_piece(const lm_vocab *v, uint32_t id)
{
    uint8_t t = v->types[id];
    return (t == TOK_USER_DEFINED || t == TOK_CONTROL || t == TOK_UNKNOWN) &&
           v->text_off[id + 1] > v->text_off[id];
}

/* The encoder tokenizer.ggml.model names: kind, and *gemma4 for Gemma 4's BPE over raw UTF-8
 * (bpe_raw). */
static int vocab_kind(lm_vocab_kind *kind, bool *gemma4, const lm_gguf *g, const char *path,
                      lm_err *err)
{
    const char *model = NULL;
    if (lm_gguf_get_str(g, "tokenizer.ggml.model", NULL, &model, err) != LM_OK)
        return err->code;
    if (!model)
        return LM_FAIL(err, LM_E_INPUT, "%s: no tokenizer (tokenizer.ggml.model is missing)", path);
    *gemma4 = strcmp(model, "gemma4") == 0;
    if (strcmp(model, "llama") == 0)
        *kind = LM_VOCAB_SPM;
    else if (strcmp(model, "gpt2") == 0 || *gemma4)
        *kind = LM_VOCAB_BPE;
    else
        return LM_FAIL(err, LM_E_UNSUPPORTED,
                       "%s: tokenizer model '%s' is not supported (llama, gpt2 and gemma4 are)",
                       path, model);
    return LM_OK;
}

/* The per-token arrays of the file: texts (required, non-empty), scores and types (optional,
 * one per text when present). */
typedef struct token_arrays {
    const lm_gguf_arr *texts, *scores, *types;
} token_arrays;

static int token_arrays_get(token_arrays *ta, const lm_gguf *g, const char *path, lm_err *err)
{
    *ta = (token_arrays){0};
    if (lm_gguf_get_arr(g, "tokenizer.ggml.tokens", LM_GGUF_STR, &ta->texts, err) != LM_OK)
        return err->code;
    if (!ta->texts || ta->texts->n == 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: tokenizer.ggml.tokens is missing or empty", path);
    if (ta->texts->n >= (uint64_t)INT32_MAX / 4)
        return LM_FAIL(err, LM_E_INPUT, "%s: %llu tokens is too many", path,
                       (unsigned long long)ta->texts->n);
    uint32_t n = (uint32_t)ta->texts->n;
    if (lm_gguf_get_arr(g, "tokenizer.ggml.scores", LM_GGUF_F32, &ta->scores, err) != LM_OK)
        return err->code;
    if (ta->scores && ta->scores->n != n)
        return LM_FAIL(err, LM_E_INPUT, "%s: tokenizer.ggml.scores has %llu entries for %u tokens",
                       path, (unsigned long long)ta->scores->n, n);
    if (lm_gguf_get_arr(g, "tokenizer.ggml.token_type", -1, &ta->types, err) != LM_OK)
        return err->code;
    if (ta->types &&
        ((ta->types->type != LM_GGUF_I32 && ta->types->type != LM_GGUF_U32) || ta->types->n != n))
        return LM_FAIL(err, LM_E_INPUT,
                       "%s: tokenizer.ggml.token_type must be %u 32-bit integers", path, n);
    return LM_OK;
}

/* v's per-token arrays for v->n_tokens tokens, the text hash table empty. */
static int vocab_alloc(lm_vocab *v, const char *path, lm_err *err)
{
    const size_t n = v->n_tokens;
    v->text_off = malloc((n + 1) * sizeof *v->text_off);
    v->piece_off = malloc((n + 1) * sizeof *v->piece_off);
    v->scores = malloc(n * sizeof *v->scores);
    v->types = malloc(n);
    v->tok_mask = table_size_for(v->n_tokens) - 1;
    v->tok_hash = malloc(((size_t)v->tok_mask + 1) * sizeof *v->tok_hash);
    if (!v->text_off || !v->piece_off || !v->scores || !v->types || !v->tok_hash)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory for %u tokens", path, v->n_tokens);
    memset(v->tok_hash, 0xFF, ((size_t)v->tok_mask + 1) * sizeof *v->tok_hash);
    return LM_OK;
}

/* Copies every token's text (an empty one as "[EMPTY_<id>]"), score and type into v. */
static int load_texts(lm_vocab *v, const token_arrays *ta, const char *path, lm_err *err)
{
    arena a = {0};
    const lm_gguf_str *ts = ta->texts->data;
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        v->text_off[i] = (uint32_t)a.n;
        char empty[32];
        const char *s = ts[i].ptr;
        size_t len = (size_t)ts[i].len;
        if (len == 0) { /* llama.cpp's stand-in, so that "" never matches a token */
            len = (size_t)snprintf(empty, sizeof empty, "[EMPTY_%u]", i);
            s = empty;
        }
        if (a.n + len > UINT32_MAX) {
            free(a.p);
            return LM_FAIL(err, LM_E_INPUT, "%s: token texts exceed 4 GiB", path);
        }
        if (arena_put(&a, s, len, err) != LM_OK) {
            free(a.p);
            return err->code;
        }
        v->scores[i] = ta->scores ? ((const float *)ta->scores->data)[i] : 0.0f;
        int32_t t = ta->types ? ((const int32_t *)ta->types->data)[i] : TOK_NORMAL;
        v->types[i] = (uint8_t)((t >= TOK_UNDEFINED && t <= TOK_BYTE) ? t : TOK_UNDEFINED);
    }
    v->text_off[v->n_tokens] = (uint32_t)a.n;
    v->text = a.p;
    return LM_OK;
}

/* Fills the text -> id hash table; the last definition of a text wins. */
static void index_texts(lm_vocab *v)
{
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        const char *s = v->text + v->text_off[i];
        size_t len = v->text_off[i + 1] - v->text_off[i];
        uint32_t h = (uint32_t)hash_text(s, len) & v->tok_mask;
        while (v->tok_hash[h] != TOK_NONE) {
            uint32_t o = v->tok_hash[h];
            if (v->text_off[o + 1] - v->text_off[o] == len &&
                memcmp(v->text + v->text_off[o], s, len) == 0)
                break;
            h = (h + 1) & v->tok_mask;
        }
        v->tok_hash[h] = i;
    }
}

/* BOS, EOS and UNK ids: the file's keys over the defaults of the encoder (-1: none). */
static int load_special_ids(lm_vocab *v, const lm_gguf *g, bool gemma4, lm_err *err)
{
    const bool spm = v->kind == LM_VOCAB_SPM;
    const uint32_t n = v->n_tokens;
    int32_t def_bos = spm ? 1 : gemma4 ? -1 : 11, def_eos = spm ? 2 : gemma4 ? -1 : 11;
    if (special_id(g, "tokenizer.ggml.bos_token_id", def_bos, n, &v->bos, err) != LM_OK ||
        special_id(g, "tokenizer.ggml.eos_token_id", def_eos, n, &v->eos, err) != LM_OK ||
        special_id(g, "tokenizer.ggml.unknown_token_id", spm ? 0 : -1, n, &v->unk, err) != LM_OK)
        return err->code;
    if (v->bos >= (int32_t)n)
        v->bos = -1;
    if (v->eos >= (int32_t)n)
        v->eos = -1;
    if (v->unk >= (int32_t)n)
        v->unk = -1;
    return LM_OK;
}

/* tokenizer.ggml.pre values by the regexes llama.cpp splits them with (llama_vocab's load:
 * LLAMA_VOCAB_PRE_TYPE_* and llm_tokenizer_bpe's regex lists), with what else it sets for them:
 * ignore_merges (PRE_IGN), the add_bos default (PRE_BOS), no default BOS id (PRE_NOBOS). An
 * absent key is llama.cpp's "default". */
enum { PRE_IGN = 1, PRE_BOS = 2, PRE_NOBOS = 4 };
static const struct {
    const char *name;
    lm_pre pre;
    unsigned flags;
} pre_table[] = {
    {"gpt2", LM_PRE_GPT2, 0},              {"gpt-2", LM_PRE_GPT2, 0},
    {"phi-2", LM_PRE_GPT2, 0},             {"jina-es", LM_PRE_GPT2, 0},
    {"jina-de", LM_PRE_GPT2, 0},           {"gigachat", LM_PRE_GPT2, 0},
    {"jina-v2-es", LM_PRE_GPT2, 0},        {"jina-v2-de", LM_PRE_GPT2, 0},
    {"a.x-4.0", LM_PRE_GPT2, 0},           {"mellum", LM_PRE_GPT2, 0},
    {"modern-bert", LM_PRE_GPT2, 0},       {"mpt", LM_PRE_GPT2, 0},
    {"olmo", LM_PRE_GPT2, 0},              {"jais", LM_PRE_GPT2, 0},
    {"trillion", LM_PRE_GPT2, 0},          {"exaone4", LM_PRE_GPT2, 0},
    {"granite-docling", LM_PRE_GPT2, 0},
    {"smollm", LM_PRE_STARCODER, 0},       {"starcoder", LM_PRE_STARCODER, 0},
    {"refact", LM_PRE_STARCODER, 0},       {"command-r", LM_PRE_STARCODER, 0},
    {"codeshell", LM_PRE_STARCODER, 0},    {"exaone", LM_PRE_STARCODER, 0},
    {"minerva-7b", LM_PRE_STARCODER, 0},   {"mellum2", LM_PRE_STARCODER, 0},
    {"llama3", LM_PRE_LLAMA3, PRE_IGN | PRE_BOS},
    {"llama-v3", LM_PRE_LLAMA3, PRE_IGN | PRE_BOS},
    {"llama-bpe", LM_PRE_LLAMA3, PRE_IGN | PRE_BOS},
    {"falcon3", LM_PRE_LLAMA3, PRE_IGN | PRE_BOS},
    {"falcon-h1", LM_PRE_LLAMA3, PRE_IGN | PRE_BOS},
    {"pixtral", LM_PRE_LLAMA3, PRE_IGN | PRE_BOS},
    {"midm-2.0", LM_PRE_LLAMA3, PRE_IGN | PRE_BOS},
    {"lfm2", LM_PRE_LLAMA3, PRE_IGN | PRE_BOS},
    {"jina-v5-nano", LM_PRE_LLAMA3, PRE_IGN | PRE_BOS},
    {"dbrx", LM_PRE_LLAMA3, 0},            {"smaug-bpe", LM_PRE_LLAMA3, 0},
    {"chatglm-bpe", LM_PRE_LLAMA3, PRE_NOBOS},
    {"glm4", LM_PRE_LLAMA3, PRE_IGN | PRE_NOBOS},
    {"glm5", LM_PRE_LLAMA3, PRE_IGN | PRE_NOBOS},
    {"qwen2", LM_PRE_QWEN2, 0},            {"deepseek-r1-qwen", LM_PRE_QWEN2, 0},
    {"kormo", LM_PRE_QWEN2, 0},            {"f2llmv2", LM_PRE_QWEN2, 0},
    {"megrez", LM_PRE_QWEN2, 0},           {"stablelm2", LM_PRE_QWEN2, 0},
    {"hunyuan", LM_PRE_QWEN2, 0},          {"solar-open", LM_PRE_QWEN2, 0},
    {"grok-2", LM_PRE_QWEN2, 0},           {"bailingmoe", LM_PRE_QWEN2, 0},
    {"bailingmoe2", LM_PRE_QWEN2, 0},      {"llada-moe", LM_PRE_QWEN2, 0},
    {"qwen35", LM_PRE_QWEN35, 0},
    {"deepseek-llm", LM_PRE_DEEPSEEK_LLM, 0},
    {"deepseek-coder", LM_PRE_DEEPSEEK_CODER, 0},
    {"deepseek-v3", LM_PRE_DEEPSEEK3, 0},  {"hunyuan-dense", LM_PRE_DEEPSEEK3, 0},
    {"hy_v4", LM_PRE_DEEPSEEK3, 0},        {"joyai-llm", LM_PRE_DEEPSEEK3, 0},
    {"falcon", LM_PRE_FALCON, 0},
    {"gpt-4o", LM_PRE_GPT4O, 0},           {"llama4", LM_PRE_GPT4O, 0},
    {"kanana2", LM_PRE_GPT4O, 0},          {"talkie", LM_PRE_GPT4O, 0},
    {"minimax-m2", LM_PRE_GPT4O, 0},
    {"tekken", LM_PRE_TEKKEN, PRE_IGN | PRE_BOS},
    {"minicpm5", LM_PRE_MINICPM5, PRE_IGN}, {"ufakzeka", LM_PRE_UFAKZEKA, 0},
    {"seed-coder", LM_PRE_SEED_CODER, 0},  {"laguna", LM_PRE_LAGUNA, 0},
};

/* A BPE vocabulary's pre-tokenizer from tokenizer.ggml.pre (Gemma 4: its own, whatever the key
 * says, as llama.cpp): v->pre and what pre_table sets with it; an unknown name splits as GPT-2
 * and leaves a note in v->pre_note. Nothing for SPM. */
static int load_pre_tokenizer(lm_vocab *v, const lm_gguf *g, bool gemma4, lm_err *err)
{
    if (gemma4) {
        v->pre = LM_PRE_GEMMA4;
        v->bpe_raw = true;
        return LM_OK;
    }
    if (v->kind == LM_VOCAB_SPM)
        return LM_OK;
    const char *pre = NULL;
    if (lm_gguf_get_str(g, "tokenizer.ggml.pre", NULL, &pre, err) != LM_OK)
        return err->code;
    bool known = pre == NULL;
    v->pre = LM_PRE_DEFAULT;
    for (size_t i = 0; pre && !known && i < sizeof pre_table / sizeof pre_table[0]; i++)
        if (strcmp(pre, pre_table[i].name) == 0) {
            known = true;
            v->pre = pre_table[i].pre;
            v->ignore_merges = (pre_table[i].flags & PRE_IGN) != 0;
            v->add_bos = (pre_table[i].flags & PRE_BOS) != 0;
            if ((pre_table[i].flags & PRE_NOBOS) &&
                lm_gguf_find(g, "tokenizer.ggml.bos_token_id") < 0)
                v->bos = -1;
        }
    if (!known) {
        v->pre = LM_PRE_GPT2;
        snprintf(v->pre_note, sizeof v->pre_note,
                 "pre-tokenizer '%.40s' is not implemented: text is split with the GPT-2 "
                 "pattern, and its ids may differ from the model's (--tokens is exact)", pre);
    }
    return LM_OK;
}

/* add_bos, add_eos and add_space_prefix: the keys over the defaults (SPM adds BOS and a space
 * prefix; a BPE pre-tokenizer may add BOS, load_pre_tokenizer; Gemma 4 always adds BOS). */
static int load_add_flags(lm_vocab *v, const lm_gguf *g, bool gemma4, lm_err *err)
{
    const bool spm = v->kind == LM_VOCAB_SPM;
    if (lm_gguf_get_bool(g, "tokenizer.ggml.add_bos_token", v->add_bos || spm, &v->add_bos, err) !=
            LM_OK ||
        lm_gguf_get_bool(g, "tokenizer.ggml.add_eos_token", false, &v->add_eos, err) != LM_OK ||
        lm_gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", spm, &v->add_space_prefix, err) !=
            LM_OK)
        return err->code;
    if (gemma4) /* llama.cpp overrides add_bos_token = false for Gemma 4 */
        v->add_bos = true;
    return LM_OK;
}

/* The token of each byte value (-1: none): "<0xNN>" with upper-case hex for SPM and raw BPE
 * (else, for SPM, the byte itself as a token, as llama.cpp), GPT-2's byte-to-code-point text
 * for byte-level BPE. */
static void find_byte_tokens(lm_vocab *v)
{
    const bool hex = v->kind == LM_VOCAB_SPM || v->bpe_raw;
    for (int b = 0; b < 256; b++) {
        char buf[8];
        int32_t id;
        if (hex) {
            snprintf(buf, sizeof buf, "<0x%02X>", b);
            id = lm_vocab_find(v, buf, 6);
            if (id < 0 && v->kind == LM_VOCAB_SPM) {
                buf[0] = (char)b;
                id = lm_vocab_find(v, buf, 1);
            }
        } else {
            size_t len = lm_utf8_encode(lm_bpe_byte_to_cp((uint8_t)b), buf);
            id = lm_vocab_find(v, buf, len);
        }
        v->byte_tok[b] = id;
    }
}

/* The ids that cut the input (is_special_piece), longest text first. */
static int list_special_ids(lm_vocab *v, const char *path, lm_err *err)
{
    for (uint32_t i = 0; i < v->n_tokens; i++)
        v->n_special += is_special_piece(v, i);
    v->special_ids = malloc((v->n_special ? v->n_special : 1) * sizeof *v->special_ids);
    if (!v->special_ids)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    for (uint32_t i = 0, k = 0; i < v->n_tokens; i++)
        if (is_special_piece(v, i))
            v->special_ids[k++] = i;
    sort_vocab = v;
    qsort(v->special_ids, v->n_special, sizeof *v->special_ids, cmp_longer_first);
    sort_vocab = NULL;
    return LM_OK;
}

/* Every token's decoded bytes (make_piece), computed once. */
static int make_pieces(lm_vocab *v, const char *path, lm_err *err)
{
    arena pa = {0};
    for (uint32_t i = 0; i < v->n_tokens; i++) {
        v->piece_off[i] = (uint32_t)pa.n;
        if (make_piece(v, i, &pa, err) != LM_OK)
            goto fail;
        if (pa.n > UINT32_MAX) {
            LM_FAIL(err, LM_E_INPUT, "%s: decoded token texts exceed 4 GiB", path);
            goto fail;
        }
    }
    v->piece_off[v->n_tokens] = (uint32_t)pa.n;
    v->piece = pa.p ? pa.p : malloc(1);
    if (!v->piece)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    return LM_OK;
fail:
    free(pa.p);
    return err->code;
}

int lm_vocab_load(lm_vocab **out, const lm_gguf *g, lm_err *err)
{
    *out = NULL;
    const char *path = lm_gguf_path(g);
    lm_vocab_kind kind = LM_VOCAB_SPM;
    bool gemma4 = false;
    token_arrays ta;
    if (vocab_kind(&kind, &gemma4, g, path, err) != LM_OK ||
        token_arrays_get(&ta, g, path, err) != LM_OK)
        return err->code;
    lm_vocab *v = calloc(1, sizeof *v);
    if (!v)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    v->kind = kind;
    v->n_tokens = (uint32_t)ta.texts->n;
    if (vocab_alloc(v, path, err) != LM_OK || load_texts(v, &ta, path, err) != LM_OK)
        goto fail;
    index_texts(v);
    if ((kind == LM_VOCAB_BPE && load_merges(v, g, path, err) != LM_OK) ||
        load_special_ids(v, g, gemma4, err) != LM_OK ||
        load_pre_tokenizer(v, g, gemma4, err) != LM_OK ||
        load_add_flags(v, g, gemma4, err) != LM_OK)
        goto fail;
    find_byte_tokens(v);
    if (list_special_ids(v, path, err) != LM_OK || make_pieces(v, path, err) != LM_OK)
        goto fail;
    *out = v;
    return LM_OK;

fail:
    lm_vocab_free(v);
    return err ? err->code : LM_E_INTERNAL;
}

void lm_vocab_free(lm_vocab *v)
{
    if (!v)
        return;
    free(v->text);
    free(v->text_off);
    free(v->scores);
    free(v->types);
    free(v->piece);
    free(v->piece_off);
    free(v->tok_hash);
    free(v->merge_text);
    free(v->m_off);
    free(v->m_llen);
    free(v->m_rlen);
    free(v->merge_hash);
    free(v->special_ids);
    free(v);
}

lm_vocab_kind lm_vocab_type(const lm_vocab *v) { return v->kind; }
uint32_t lm_vocab_n_tokens(const lm_vocab *v) { return v->n_tokens; }
int32_t lm_vocab_bos(const lm_vocab *v) { return v->bos; }
int32_t lm_vocab_eos(const lm_vocab *v) { return v->eos; }
bool lm_vocab_adds_bos(const lm_vocab *v) { return v->add_bos; }
const char *lm_vocab_pre_note(const lm_vocab *v) { return v->pre_note[0] ? v->pre_note : NULL; }

/* ---------------------------------------------------------------- encode / decode */

/* A piece of the input: raw text [off, off + len), or a special token (id >= 0). */
typedef struct frag {
    size_t off, len;
    int32_t id;
} frag;

/* Cuts the input at every occurrence of every special token, longest tokens first, each
 * fragment scanned left to right (llama.cpp's tokenizer_st_partition). Without parse_special
 * only user-defined tokens cut; control and unknown tokens stay text. */
static int partition(const lm_vocab *v, const char *text, size_t len, bool parse_special,
                     frag **out, size_t *n_out, lm_err *err)
{
    size_t n = 1, cap = 8;
    frag *f = malloc(cap * sizeof *f);
    if (!f)
        return LM_FAIL(err, LM_E_NOMEM, "tokenizer: out of memory");
    f[0] = (frag){0, len, -1};
    for (uint32_t u = 0; u < v->n_special; u++) {
        uint32_t id = v->special_ids[u];
        if (!parse_special && v->types[id] != TOK_USER_DEFINED)
            continue;
        const char *t = v->text + v->text_off[id];
        size_t tl = v->text_off[id + 1] - v->text_off[id];
        for (size_t i = 0; i < n; i++) {
            if (f[i].id >= 0)
                continue;
            const char *hit = memmem(text + f[i].off, f[i].len, t, tl);
            if (!hit)
                continue;
            /* replace f[i] by [left] token [right]; right is scanned again next iteration */
            if (n + 2 > cap) {
                cap *= 2;
                frag *nf = realloc(f, cap * sizeof *f);
                if (!nf) {
                    free(f);
                    return LM_FAIL(err, LM_E_NOMEM, "tokenizer: out of memory");
                }
                f = nf;
            }
            size_t at = (size_t)(hit - text), end = f[i].off + f[i].len;
            frag left = {f[i].off, at - f[i].off, -1}, tok = {at, tl, (int32_t)id};
            frag right = {at + tl, end - (at + tl), -1};
            size_t k = (size_t)(left.len > 0) + 1 + (size_t)(right.len > 0);
            memmove(f + i + k, f + i + 1, (n - i - 1) * sizeof *f);
            n += k - 1;
            size_t j = i;
            if (left.len > 0)
                f[j++] = left;
            f[j++] = tok;
            if (right.len > 0)
                f[j] = right;
            i = j - 1; /* the loop's i++ lands on the right part */
        }
    }
    *out = f;
    *n_out = n;
    return LM_OK;
}

int lm_tokenize(const lm_vocab *v, const char *text, size_t len, bool add_special,
                int32_t **out_ids, size_t *out_n, lm_err *err)
{
    return lm_tokenize_ex(v, text, len, add_special, false, out_ids, out_n, err);
}

int lm_tokenize_ex(const lm_vocab *v, const char *text, size_t len, bool add_special,
                   bool parse_special, int32_t **out_ids, size_t *out_n, lm_err *err)
{
    *out_ids = NULL;
    *out_n = 0;
    tok_out o = {0};
    frag *f = NULL;
    size_t n_frag = 0;
    int rc = LM_OK;
    if (add_special && v->add_bos && v->bos >= 0)
        rc = tok_out_push(&o, v->bos, err);
    /* Empty text has no fragment, so no space prefix either (llama.cpp: "" -> [] or [BOS]). */
    if (rc == LM_OK && len > 0)
        rc = partition(v, text, len, parse_special, &f, &n_frag, err);
    /* SPM prefixes the escaped space to text that starts the input or follows a special token
     * (llama.cpp's is_prev_special), BOS or not: "<s>Once" with parse_special encodes as
     * [1] + encode(" Once"), the same ids as BOS + "Once". */
    bool prev_special = true;
    for (size_t i = 0; i < n_frag && rc == LM_OK; i++) {
        if (f[i].id >= 0) {
            rc = tok_out_push(&o, f[i].id, err);
            prev_special = true;
            continue;
        }
        if (v->kind == LM_VOCAB_SPM)
            rc = lm_spm_encode(v, text + f[i].off, f[i].len, v->add_space_prefix && prev_special,
                               &o, err);
        else
            rc = lm_bpe_encode(v, text + f[i].off, f[i].len, &o, err);
        prev_special = false;
    }
    free(f);
    if (rc == LM_OK && add_special && v->add_eos && v->eos >= 0)
        rc = tok_out_push(&o, v->eos, err);
    if (rc == LM_OK && o.ids == NULL) { /* always hand back an allocation */
        o.ids = malloc(sizeof *o.ids);
        if (!o.ids)
            rc = LM_FAIL(err, LM_E_NOMEM, "tokenizer: out of memory");
    }
    if (rc != LM_OK) {
        free(o.ids);
        return rc;
    }
    *out_ids = o.ids;
    *out_n = o.n;
    return LM_OK;
}

int lm_token_to_piece(const lm_vocab *v, int32_t id, char *buf, size_t cap)
{
    if (id < 0 || (uint32_t)id >= v->n_tokens)
        return -1;
    size_t n = v->piece_off[id + 1] - v->piece_off[id];
    if (buf && cap)
        memcpy(buf, v->piece + v->piece_off[id], n < cap ? n : cap);
    return (int)n;
}

/* The leading space that SPM's add_space_prefix put in front of the text is removed from the
 * first token that produces text. llama.cpp does the same for the first token (its
 * remove_special mode skips BOS first; without it, a leading BOS would consume the strip):
 * here control tokens produce no text, so BOS never consumes it, and decode(encode(s)) == s
 * with or without BOS. */
int lm_detokenize(const lm_vocab *v, const int32_t *ids, size_t n, char **out, lm_err *err)
{
    *out = NULL;
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || (uint32_t)ids[i] >= v->n_tokens)
            return LM_FAIL(err, LM_E_INPUT, "detokenize: token id %d at position %zu is not in "
                           "the vocabulary (%u tokens)", ids[i], i, v->n_tokens);
        total += v->piece_off[ids[i] + 1] - v->piece_off[ids[i]];
    }
    char *s = malloc(total + 1);
    if (!s)
        return LM_FAIL(err, LM_E_NOMEM, "detokenize: out of memory for %zu bytes", total + 1);
    size_t k = 0;
    bool strip = v->add_space_prefix;
    for (size_t i = 0; i < n; i++) {
        const char *p = v->piece + v->piece_off[ids[i]];
        size_t len = v->piece_off[ids[i] + 1] - v->piece_off[ids[i]];
        if (len == 0)
            continue;
        if (strip && p[0] == ' ') {
            p++;
            len--;
        }
        strip = false;
        memcpy(s + k, p, len);
        k += len;
    }
    s[k] = '\0';
    *out = s;
    return LM_OK;
}
