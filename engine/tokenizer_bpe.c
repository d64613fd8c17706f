/* tokenizer_bpe.c — GPT-2 byte-level BPE encoding with the semantics of llama.cpp's "gpt2"
 * pre-tokenizer and llm_tokenizer_bpe (which the fixture ids come from):
 *
 *   1. the text is decoded to code points (each invalid byte becomes U+FFFD);
 *   2. it is split into words by the GPT-2 pattern (for the "smollm"/"starcoder" family of
 *      tokenizer.ggml.pre, after first cutting out every \p{N} code point as a word of its own)
 *        's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
 *      matched by hand, first alternative that matches wins, contractions case-sensitive;
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

/* ---------------------------------------------------------------- pre-tokenizer */

enum { C_END, C_LETTER, C_NUMBER, C_SPACE, C_OTHER };

static int cls_at(const uint32_t *cp, size_t n, size_t i)
{
    if (i >= n)
        return C_END;
    uint32_t c = cp[i];
    if (lm_uni_is_letter(c))
        return C_LETTER;
    if (lm_uni_is_number(c))
        return C_NUMBER;
    if (lm_uni_is_space(c))
        return C_SPACE;
    return C_OTHER;
}

/* End (exclusive) of the word that starts at code point pos < n. Always > pos. */
static size_t gpt2_word_end(const uint32_t *cp, size_t n, size_t pos)
{
    uint32_t c = cp[pos];
    if (c == '\'' && pos + 1 < n) {
        uint32_t c1 = cp[pos + 1];
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return pos + 2;
        if (pos + 2 < n) {
            uint32_t c2 = cp[pos + 2];
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                return pos + 3;
        }
    }
    /* " ?X+": an optional single space, then a run of one class */
    size_t q = c == ' ' ? pos + 1 : pos;
    int k = cls_at(cp, n, q);
    if (k == C_LETTER || k == C_NUMBER || k == C_OTHER) {
        while (cls_at(cp, n, q) == k)
            q++;
        return q;
    }
    /* whitespace: \s+(?!\S) leaves the last space to the next word when a non-space follows;
     * otherwise (text ends) \s+ takes the whole run */
    size_t w = 0;
    while (cls_at(cp, n, pos + w) == C_SPACE)
        w++;
    if (w > 1 && pos + w < n)
        return pos + w - 1;
    if (w > 0)
        return pos + w;
    return pos + 1; /* unreachable: every code point has a class */
}

static bool is_crlf(uint32_t c)
{
    return c == '\r' || c == '\n';
}

static uint32_t ascii_lower(uint32_t c)
{
    return c >= 'A' && c <= 'Z' ? c + 32 : c;
}

/* End (exclusive) of the word at pos < n under the Llama 3 / Qwen 2 pattern (llama.cpp's
 * hand-written splitters, alternatives tried in this order):
 *   (?i:'s|'t|'re|'ve|'m|'ll|'d) | [^\r\n\p{L}\p{N}]?\p{L}+ | \p{N}{1,max_digits}
 *   | ?[^\s\p{L}\p{N}]+[\r\n]* | \s*[\r\n]+ | \s+(?!\S) | \s+
 * A digit run longer than max_digits is cut into pieces of max_digits from its start. */
static size_t llama3_word_end(const uint32_t *cp, size_t n, size_t pos, size_t max_digits)
{
    const uint32_t c = cp[pos];
    const int k = cls_at(cp, n, pos);
    if (c == '\'' && pos + 1 < n) {
        uint32_t c1 = ascii_lower(cp[pos + 1]);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd')
            return pos + 2;
        if (pos + 2 < n) {
            uint32_t c2 = ascii_lower(cp[pos + 2]);
            if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l'))
                return pos + 3;
        }
    }
    if (!is_crlf(c) && k != C_NUMBER
        && (k == C_LETTER || cls_at(cp, n, pos + 1) == C_LETTER)) {
        size_t q = pos + 1;
        while (cls_at(cp, n, q) == C_LETTER)
            q++;
        return q;
    }
    if (k == C_NUMBER) {
        size_t q = pos;
        while (q < n && q - pos < max_digits && cls_at(cp, n, q) == C_NUMBER)
            q++;
        return q;
    }
    const int k2 = c == ' ' ? cls_at(cp, n, pos + 1) : k;
    if (k2 == C_OTHER) {
        size_t q = c == ' ' ? pos + 1 : pos;
        while (cls_at(cp, n, q) == C_OTHER)
            q++;
        while (q < n && is_crlf(cp[q]))
            q++;
        return q;
    }
    size_t w = 0, last_crlf = 0;
    while (cls_at(cp, n, pos + w) == C_SPACE) {
        if (is_crlf(cp[pos + w]))
            last_crlf = pos + w + 1;
        w++;
    }
    if (last_crlf > 0)
        return last_crlf;
    if (w > 1 && pos + w < n)
        return pos + w - 1;
    if (w > 0)
        return pos + w;
    return pos + 1;
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

static int grow(void **p, size_t *cap, size_t need, size_t elem, lm_err *err)
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

/* BPE over one word of code points cp[0..n). */
static int encode_word(const lm_vocab *v, work *wk, const uint32_t *cp, size_t n, tok_out *out,
                       lm_err *err)
{
    /* each code point: <= 4 UTF-8 bytes, each byte: a GPT-2 character of <= 2 bytes */
    if (n > UINT32_MAX / 8)
        return LM_FAIL(err, LM_E_INPUT, "tokenizer: a word of %zu characters is too long", n);
    if (grow((void **)&wk->w, &wk->w_cap, 8 * n, 1, err) != LM_OK)
        return err->code;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char u[4];
        size_t ul = lm_utf8_encode(cp[i], u);
        for (size_t j = 0; j < ul; j++)
            k += lm_utf8_encode(lm_bpe_byte_to_cp((uint8_t)u[j]), wk->w + k);
    }
    if (grow((void **)&wk->s, &wk->s_cap, k, sizeof *wk->s, err) != LM_OK ||
        grow((void **)&wk->h, &wk->h_cap, 3 * k + 1, sizeof *wk->h, err) != LM_OK)
        return err->code;

    if (v->ignore_merges) {
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
            int32_t b = lm_vocab_find(v, wk->w + y->start + j, 1);
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
        cp[n++] = lm_utf8_decode(text + off, len - off, &adv);
        off += adv;
    }
    /* With pre_digits the text is first cut into segments, each \p{N} code point alone and
     * each run of others together; the GPT-2 split then sees a segment's end as the text's end
     * (llama.cpp applies its regexes in turn, each to the previous one's pieces). */
    for (size_t seg = 0; seg < n && rc == LM_OK;) {
        size_t seg_end = n;
        if (v->pre_digits) {
            seg_end = seg + 1;
            if (!lm_uni_is_number(cp[seg]))
                while (seg_end < n && !lm_uni_is_number(cp[seg_end]))
                    seg_end++;
        }
        for (size_t pos = seg; pos < seg_end && rc == LM_OK;) {
            size_t end = v->pre_split == 0 ? gpt2_word_end(cp, seg_end, pos)
                         : llama3_word_end(cp, seg_end, pos, v->pre_split == 1 ? 3 : 1);
            rc = encode_word(v, &wk, cp + pos, end - pos, out, err);
            pos = end;
        }
        seg = seg_end;
    }
done:
    free(cp);
    free(wk.w);
    free(wk.s);
    free(wk.h);
    return rc;
}
