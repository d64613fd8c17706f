/* tokenizer_spm.c — SentencePiece-style encoding for llama vocabularies, with the semantics of
 * llama.cpp's llm_tokenizer_spm (which the fixture ids come from):
 *
 *   1. every ' ' becomes U+2581, and U+2581 is prepended when add_space_prefix is set and the
 *      text starts the input or follows a special token (the caller decides);
 *   2. the text is cut into symbols, one per UTF-8 character (lead-byte length, so invalid
 *      bytes still make one-byte symbols);
 *   3. repeatedly, of all adjacent symbol pairs whose concatenation is a vocabulary token, the
 *      one with the highest token score is merged (ties: the leftmost pair);
 *   4. each final symbol is its token, or (a character not in the vocabulary) its bytes as
 *      byte tokens <0xNN> (fallback: the unknown token).
 *
 * Step 3 uses a binary max-heap of candidate pairs with lazy deletion: a merge invalidates at
 * most two pairs and creates at most two, so n symbols cost O(n log n), not O(n^2). A popped
 * pair is stale when either symbol was absorbed or grew since the pair was pushed; its size
 * (bytes of both symbols at push time) detects that, because a left symbol only grows by
 * absorbing its right neighbour and a right symbol only by absorbing its own. */
#include "tokenizer_internal.h"
#include "unicode.h"

#include <stdlib.h>
#include <string.h>

typedef struct sym {
    uint32_t start; /* byte offset in the escaped text */
    uint32_t n;     /* bytes; 0 once merged into its left neighbour */
    int32_t prev, next;
} sym;

typedef struct bigram {
    float score;
    uint32_t left, right; /* symbol indices */
    uint32_t size;        /* bytes of left + right when pushed */
} bigram;

/* a pops before b: higher score, then smaller left index (llama.cpp's comparator). */
static bool before(const bigram *a, const bigram *b)
{
    return a->score > b->score || (a->score == b->score && a->left < b->left);
}

typedef struct heap {
    bigram *b; /* [cap] */
    size_t n, cap;
} heap;

static void heap_push(heap *h, bigram x)
{
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!before(&x, &h->b[p]))
            break;
        h->b[i] = h->b[p];
        i = p;
    }
    h->b[i] = x;
}

static bigram heap_pop(heap *h)
{
    bigram top = h->b[0];
    bigram last = h->b[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n)
            break;
        if (c + 1 < h->n && before(&h->b[c + 1], &h->b[c]))
            c++;
        if (!before(&h->b[c], &last))
            break;
        h->b[i] = h->b[c];
        i = c;
    }
    if (h->n > 0)
        h->b[i] = last;
    return top;
}

typedef struct session {
    const lm_vocab *v;
    const char *text; /* [len] escaped text */
    sym *s;           /* [n_sym] */
    heap h;
} session;

static void try_pair(session *ss, int32_t l, int32_t r)
{
    if (l < 0 || r < 0)
        return;
    const sym *a = &ss->s[l], *b = &ss->s[r];
    int32_t id = lm_vocab_find(ss->v, ss->text + a->start, (size_t)a->n + b->n);
    if (id < 0)
        return;
    bigram x = {ss->v->scores[id], (uint32_t)l, (uint32_t)r, a->n + b->n};
    heap_push(&ss->h, x);
}

static int emit_symbol(const session *ss, const sym *y, tok_out *out, lm_err *err)
{
    const lm_vocab *v = ss->v;
    int32_t id = lm_vocab_find(v, ss->text + y->start, y->n);
    if (id >= 0)
        return tok_out_push(out, id, err);
    /* Only unmerged single characters can be missing (a merge always forms a token). */
    for (uint32_t i = 0; i < y->n; i++) {
        unsigned char c = (unsigned char)ss->text[y->start + i];
        int32_t b = v->byte_tok[c] >= 0 ? v->byte_tok[c] : v->unk;
        if (b < 0)
            return LM_FAIL(err, LM_E_INPUT,
                           "tokenizer: byte 0x%02X has no token and the vocabulary has no "
                           "unknown token", c);
        if (tok_out_push(out, b, err) != LM_OK)
            return err->code;
    }
    return LM_OK;
}

int lm_spm_encode(const lm_vocab *v, const char *text, size_t len, bool space_prefix,
                  tok_out *out, lm_err *err)
{
    static const char ws[3] = {'\xe2', '\x96', '\x81'}; /* U+2581 LOWER ONE EIGHTH BLOCK */
    size_t n_space = 0;
    for (size_t i = 0; i < len; i++)
        n_space += text[i] == ' ';
    size_t cap = len + 2 * n_space + (space_prefix ? 3 : 0);
    if (cap > UINT32_MAX / 4)
        return LM_FAIL(err, LM_E_INPUT, "tokenizer: text of %zu bytes is too long", len);

    session ss = {.v = v};
    char *esc = malloc(cap ? cap : 1);
    ss.s = malloc((cap ? cap : 1) * sizeof *ss.s);
    ss.h.cap = 3 * cap + 1; /* n-1 initial pairs + at most 2 per merge */
    ss.h.b = malloc(ss.h.cap * sizeof *ss.h.b);
    int rc = LM_OK;
    if (!esc || !ss.s || !ss.h.b) {
        rc = LM_FAIL(err, LM_E_NOMEM, "tokenizer: out of memory for %zu bytes of text", len);
        goto done;
    }
    size_t k = 0;
    if (space_prefix) {
        memcpy(esc, ws, 3);
        k = 3;
    }
    for (size_t i = 0; i < len; i++) {
        if (text[i] == ' ') {
            memcpy(esc + k, ws, 3);
            k += 3;
        } else {
            esc[k++] = text[i];
        }
    }
    ss.text = esc;
    if (k == 0)
        goto done;

    int32_t n_sym = 0;
    for (size_t off = 0; off < k;) {
        size_t cl = lm_utf8_seq_len((unsigned char)esc[off]);
        if (cl > k - off)
            cl = k - off;
        ss.s[n_sym] = (sym){(uint32_t)off, (uint32_t)cl, n_sym - 1, n_sym + 1};
        n_sym++;
        off += cl;
    }
    ss.s[n_sym - 1].next = -1;

    for (int32_t i = 1; i < n_sym; i++)
        try_pair(&ss, i - 1, i);

    while (ss.h.n > 0) {
        bigram x = heap_pop(&ss.h);
        sym *l = &ss.s[x.left], *r = &ss.s[x.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != x.size)
            continue; /* stale */
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0)
            ss.s[r->next].prev = (int32_t)x.left;
        try_pair(&ss, l->prev, (int32_t)x.left);
        try_pair(&ss, (int32_t)x.left, l->next);
    }

    for (int32_t i = 0; i >= 0 && rc == LM_OK; i = ss.s[i].next)
        rc = emit_symbol(&ss, &ss.s[i], out, err);

done:
    free(esc);
    free(ss.s);
    free(ss.h.b);
    return rc;
}
