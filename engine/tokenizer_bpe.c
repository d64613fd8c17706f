/* tokenizer_bpe.c — GPT-2 byte-level BPE encoding with the semantics of llama.cpp's
 * llm_tokenizer_bpe (which the fixture ids come from), and its raw variant (bpe_raw, the gemma4
 * model: spaces become U+2581 before step 2, step 3 keeps the UTF-8 bytes, and in step 5 bytes
 * become "<0xNN>" tokens):
 *
 *   1. the text is decoded to code points (each invalid byte becomes U+FFFD);
 *   2. it is split into words by the vocabulary's pre-tokenizer (pretokenize.c);
 *   3. each word is re-encoded as UTF-8 and every byte replaced by its GPT-2 character;
 *   4. within a word, the adjacent symbol pair with the lowest merge rank is merged until no
 *      pair has a rank (ties: the leftmost pair), starting from single characters;
 *   5. each symbol is its token; a symbol that is not a token (possible only with an incomplete
 *      vocabulary) is emitted byte by byte as far as single bytes are tokens.
 *
 * Step 4 uses a binary min-heap with lazy deletion, as tokenizer_spm.c does. */
#include "tokenizer_internal.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------- GPT-2 byte mapping */

/* The printable bytes ! .. ~, ¡ .. ¬, ® .. ÿ stand for themselves; the other 68 bytes, in
 * increasing order, take the code points 256, 257, ... (GPT-2's bytes_to_unicode). */
static bool byte_is_self(unsigned b)
{
    return (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

/* The non-printable bytes are 0x00..0x20 (33), 0x7F..0xA0 (34) and 0xAD (1), so their code
 * points are 256 + b, 289 + (b - 0x7F) and 323. */
uint32_t lm_bpe_byte_to_cp(uint8_t b)
{
    if (byte_is_self(b))
        return b;
    if (b <= 0x20)
        return 256u + b;
    if (b <= 0xA0)
        return 289u + (b - 0x7Fu);
    return 323u; /* 0xAD */
}

int lm_bpe_cp_to_byte(uint32_t cp)
{
    if (cp < 256)
        return byte_is_self(cp) ? (int)cp : -1;
    if (cp <= 288)
        return (int)(cp - 256);
    if (cp <= 322)
        return (int)(0x7F + (cp - 289));
    return cp == 323 ? 0xAD : -1;
}

/* ---------------------------------------------------------------- merging */

typedef struct sym {
    uint32_t start, n; /* bytes in the word buffer; n = 0 once merged away */
    int32_t prev, next;
} sym;

typedef struct bigram {
    int32_t rank;
    uint32_t left, right, size;
} bigram;

/* a pops before b: lower rank, then smaller left index (llama.cpp's comparator). */
static bool before(const bigram *a, const bigram *b)
{
    return a->rank < b->rank || (a->rank == b->rank && a->left < b->left);
}

typedef struct work {
    char *w;       /* [w_cap] current word, GPT-2 characters */
    size_t w_cap;
    sym *s;        /* [s_cap] */
    size_t s_cap;
    bigram *h;     /* [h_cap] */
    size_t h_n, h_cap;
} work;

static void heap_push(work *wk, bigram x)
{
    size_t i = wk->h_n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&x, &wk->h[p]))
            break;
        wk->h[i] = wk->h[p];
        i = p;
    }
    wk->h[i] = x;
}

static bigram heap_pop(work *wk)
{
    bigram top = wk->h[0];
    bigram last = wk->h[--wk->h_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= wk->h_n)
            break;
        if (c + 1 < wk->h_n && before(&wk->h[c + 1], &wk->h[c]))
            c++;
        if (!before(&wk->h[c], &last))
            break;
        wk->h[i] = wk->h[c];
        i = c;
    }
    if (wk->h_n > 0)
        wk->h[i] = last;
    return top;
}

static void try_pair(const lm_vocab *v, work *wk, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return;
    const sym *a = &wk->s[l], *b = &wk->s[r];
    int32_t rank = lm_vocab_merge_rank(v, wk->w + a->start, a->n, wk->w + b->start, b->n);
    if (rank < 0)
        return;
    bigram x = {rank, (uint32_t)l, (uint32_t)r, a->n + b->n};
    heap_push(wk, x);
}

/* BPE over one word of code points cp[0..n). */
static int encode_word(const lm_vocab *v, work *wk, const uint32_t *cp, size_t n, tok_out *out,
                       lm_err *err)
{
    /* each code point: <= 4 UTF-8 bytes, each byte: a GPT-2 character of <= 2 bytes */
    if (n > UINT32_MAX / 8)
        return LM_FAIL(err, LM_E_INPUT, "tokenizer: a word of %zu characters is too long", n);
    if (lm_tok_grow((void **)&wk->w, &wk->w_cap, 8 * n, 1, err) != LM_OK)
        return err->code;
    size_t k = 0;
    bool all_lf = true;
    for (size_t i = 0; i < n; i++) {
        char u[4];
        size_t ul = lm_utf8_encode(cp[i], u);
        all_lf = all_lf && cp[i] == '\n';
        for (size_t j = 0; j < ul; j++)
            k += v->bpe_raw ? (wk->w[k] = u[j], 1)
                            : lm_utf8_encode(lm_bpe_byte_to_cp((uint8_t)u[j]), wk->w + k);
    }
    if (lm_tok_grow((void **)&wk->s, &wk->s_cap, k, sizeof *wk->s, err) != LM_OK ||
        lm_tok_grow((void **)&wk->h, &wk->h_cap, 3 * k + 1, sizeof *wk->h, err) != LM_OK)
        return err->code;

    /* llama.cpp's gemma4 rule: a run of newlines that is a token is that token */
    if (v->ignore_merges || (v->pre == LM_PRE_GEMMA4 && all_lf)) {
        int32_t whole = lm_vocab_find(v, wk->w, k);
        if (whole >= 0)
            return tok_out_push(out, whole, err);
    }
    int32_t n_sym = 0;
    for (size_t off = 0; off < k;) {
        size_t cl = lm_utf8_seq_len((unsigned char)wk->w[off]);
        if (cl > k - off)
            cl = k - off;
        wk->s[n_sym] = (sym){(uint32_t)off, (uint32_t)cl, n_sym - 1, n_sym + 1};
        n_sym++;
        off += cl;
    }
    wk->s[n_sym - 1].next = -1;

    wk->h_n = 0;
    for (int32_t i = 1; i < n_sym; i++)
        try_pair(v, wk, i - 1, i);
    while (wk->h_n > 0) {
        bigram x = heap_pop(wk);
        sym *l = &wk->s[x.left], *r = &wk->s[x.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != x.size)
            continue; /* stale: see tokenizer_spm.c */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            wk->s[r->next].prev = (int32_t)x.left;
        try_pair(v, wk, l->prev, (int32_t)x.left);
        try_pair(v, wk, (int32_t)x.left, l->next);
    }

    for (int32_t i = 0; i >= 0; i = wk->s[i].next) {
        const sym *y = &wk->s[i];
        int32_t id = lm_vocab_find(v, wk->w + y->start, y->n);
        if (id >= 0) {
            if (tok_out_push(out, id, err) != LM_OK)
                return err->code;
            continue;
        }
        for (uint32_t j = 0; j < y->n; j++) { /* llama.cpp drops bytes that are not tokens */
            int32_t b = v->bpe_raw ? v->byte_tok[(unsigned char)wk->w[y->start + j]]
                                   : lm_vocab_find(v, wk->w + y->start + j, 1);
            if (b >= 0 && tok_out_push(out, b, err) != LM_OK)
                return err->code;
        }
    }
    return LM_OK;
}

int lm_bpe_encode(const lm_vocab *v, const char *text, size_t len, tok_out *out, lm_err *err)
{
    if (len == 0)
        return LM_OK;
    uint32_t *cp = malloc(len * sizeof *cp);
    work wk = {0};
    int rc = LM_OK;
    if (!cp) {
        rc = LM_FAIL(err, LM_E_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t n = 0;
    for (size_t off = 0; off < len;) {
        size_t adv;
        cp[n] = lm_utf8_decode(text + off, len - off, &adv);
        if (v->bpe_raw && cp[n] == ' ') /* llama.cpp's escape_whitespaces */
            cp[n] = 0x2581;
        n++;
        off += adv;
    }
    size_t *lens = NULL, n_words = 0;
    rc = lm_pretokenize(v->pre, cp, n, &lens, &n_words, err);
    for (size_t i = 0, pos = 0; i < n_words && rc == LM_OK; pos += lens[i++])
        rc = encode_word(v, &wk, cp + pos, lens[i], out, err);
    free(lens);
done:
    free(cp);
    free(wk.w);
    free(wk.s);
    free(wk.h);
    return rc;
}
