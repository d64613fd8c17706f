/* probe_dump.c — a /v1/completions reply as a top-k dump (contract in probe_dump.h). */
#include "run/probe_dump.h"

#include "kvd_tokenizer.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct piece {
    char *s;
    size_t len;
    int32_t id;
    bool byte;  /* a SentencePiece byte-fallback token <0xNN>: ids 3..258 of a llama SPM
                   vocabulary, byte id - 3; a tokenizer emits it only for a byte no other
                   token covers */
} piece;

struct hx_piece_index {
    piece *p; /* [n] sorted by bytes, then length, then id */
    size_t n;
    bool spm;
};

static int cmp_bytes(const char *a, size_t na, const char *b, size_t nb)
{
    int c = memcmp(a, b, na < nb ? na : nb);
    return c != 0 ? c : (na > nb) - (na < nb);
}

static int cmp_piece(const void *x, const void *y)
{
    const piece *a = x, *b = y;
    int c = cmp_bytes(a->s, a->len, b->s, b->len);
    return c != 0 ? c : (a->id > b->id) - (a->id < b->id);
}

void hx_piece_index_free(hx_piece_index *x)
{
    if (x == NULL)
        return;
    for (size_t i = 0; i < x->n; ++i)
        free(x->p[i].s);
    free(x->p);
    free(x);
}

int hx_piece_index_create(hx_piece_index **out, const lm_model *m, lm_err *err)
{
    *out = NULL;
    if (m->vocab == NULL)
        return LM_FAIL(err, LM_E_INPUT, "the model has no tokenizer: give --tokens and a server "
                       "that returns token ids");
    const uint32_t nv = lm_vocab_n_tokens(m->vocab);
    hx_piece_index *x = calloc(1, sizeof *x);
    if (x == NULL || (x->p = calloc(nv ? nv : 1, sizeof *x->p)) == NULL) {
        hx_piece_index_free(x);
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    x->spm = lm_vocab_type(m->vocab) == LM_VOCAB_SPM;
    char buf[256];
    for (uint32_t id = 0; id < nv; ++id) {
        int n = lm_token_to_piece(m->vocab, (int32_t)id, buf, sizeof buf);
        if (n < 0 || (size_t)n > sizeof buf)
            continue;
        piece *p = &x->p[x->n];
        if ((p->s = malloc((size_t)n + 1)) == NULL) {
            hx_piece_index_free(x);
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        }
        memcpy(p->s, buf, (size_t)n);
        p->s[n] = '\0';
        p->len = (size_t)n;
        p->id = (int32_t)id;
        p->byte = x->spm && n == 1 && id >= 3 && id < 259 && (unsigned char)buf[0] == id - 3;
        ++x->n;
    }
    qsort(x->p, x->n, sizeof *x->p, cmp_piece);
    *out = x;
    return LM_OK;
}

/* The ids whose piece is s[len], byte-fallback tokens counted only when nothing else
 * matches: the first into *id, their count returned (0: none). */
static uint32_t lookup_exact(const hx_piece_index *x, const char *s, size_t len, int32_t *id)
{
    size_t lo = 0, hi = x->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (cmp_bytes(x->p[mid].s, x->p[mid].len, s, len) < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    uint32_t n = 0, nb = 0;
    int32_t byte_id = -1;
    for (size_t i = lo; i < x->n && cmp_bytes(x->p[i].s, x->p[i].len, s, len) == 0; ++i) {
        if (x->p[i].byte) {
            byte_id = nb++ == 0 ? x->p[i].id : byte_id;
        } else if (n++ == 0) {
            *id = x->p[i].id;
        }
    }
    if (n == 0 && nb > 0) {
        *id = byte_id;
        return nb;
    }
    return n;
}

/* Ids matching a lone token's text: its piece; under SentencePiece, when no piece is the text,
 * the piece with one leading space (a server may strip it). Empty text matches nothing. */
static uint32_t lookup_lone(const hx_piece_index *x, const char *s, int32_t *id)
{
    size_t len = strlen(s);
    if (len == 0)
        return 0;
    uint32_t n = lookup_exact(x, s, len, id);
    if (n == 0 && x->spm && len < 255) {
        char sp[256];
        sp[0] = ' ';
        memcpy(sp + 1, s, len);
        n = lookup_exact(x, sp, len + 1, id);
    }
    return n;
}

/* The scored token i's id: the reply's, else its text matched (lookup_lone); *n_match gets how
 * many ids matched (1 when the reply gave the id). */
static int32_t chosen_id(const hx_probe_reply *r, uint32_t i, const hx_piece_index *ix,
                         uint32_t *n_match)
{
    const hx_probe_tok *t = &r->toks[i];
    int32_t id = -1;
    *n_match = 1;
    if (t->id >= 0)
        return t->id;
    *n_match = lookup_lone(ix, t->text, &id);
    return id;
}

typedef struct row_build {
    uint32_t k;
    int32_t ids[HX_TOPK_ROW_MAX];
    float lp[HX_TOPK_ROW_MAX];
} row_build;

static int row_add(row_build *w, int32_t id, double lp, lm_err *err)
{
    for (uint32_t j = 0; j < w->k; ++j)
        if (w->ids[j] == id)
            return LM_OK;
    if (w->k == HX_TOPK_ROW_MAX)
        return LM_FAIL(err, LM_E_INPUT, "reply: more than %u log-probabilities at one position",
                       (unsigned)HX_TOPK_ROW_MAX);
    w->ids[w->k] = id;
    w->lp[w->k++] = (float)lp;
    return LM_OK;
}

/* Whether expect is among the ids lookup_lone matches for s. */
static bool lone_has(const hx_piece_index *ix, const char *s, int32_t expect)
{
    char buf[256];
    int n = expect >= 0 ? -1 : 0;
    for (size_t i = 0; i < ix->n && n < 0; ++i)
        if (ix->p[i].id == expect && ix->p[i].len < sizeof buf) {
            memcpy(buf, ix->p[i].s, ix->p[i].len);
            buf[ix->p[i].len] = '\0';
            n = 0;
        }
    if (n < 0)
        return false;
    const size_t len = strlen(s);
    return strcmp(buf, s) == 0 ||
           (ix->spm && buf[0] == ' ' && strlen(buf) == len + 1 && strcmp(buf + 1, s) == 0);
}

static int fill(hx_dump *d, hx_probe_map *map, const hx_probe_reply *r, const hx_piece_index *ix,
                const int32_t *prompt, uint32_t n_prompt, uint32_t n_echo, lm_err *err)
{
    const uint32_t nv = d->n_vocab;
    row_build *rows = calloc(r->n ? r->n : 1, sizeof *rows);
    uint32_t *pos = calloc(r->n ? r->n : 1, sizeof *pos);
    int32_t *gen = calloc(r->n ? r->n : 1, sizeof *gen);
    int rc = rows && pos && gen ? LM_OK : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    uint32_t n_rows = 0, n_gen = 0;
    for (uint32_t i = 0; i < r->n && rc == LM_OK; ++i) {
        const hx_probe_tok *t = &r->toks[i];
        const bool echoed = i < n_echo;
        const uint32_t q = echoed ? n_prompt - n_echo + i : n_prompt + (i - n_echo);
        uint32_t nm = 0;
        const int32_t expect = echoed ? prompt[q] : -1;
        int32_t id = chosen_id(r, i, ix, &nm);
        if (echoed) {
            bool ok = id == expect || (t->id < 0 && nm > 1 && lone_has(ix, t->text, expect));
            if (!ok && map->prompt_mismatch < 0) {
                map->prompt_mismatch = q;
                snprintf(map->mismatch, sizeof map->mismatch, "the server's prompt token %u is "
                         "'%.40s', kvdrift's is id %d: the server tokenized the text otherwise "
                         "(give --tokens to a server that takes ids)", (unsigned)q, t->text,
                         (int)expect);
            }
            id = expect;
        } else if (nm != 1 || id < 0 || (uint32_t)id >= nv) {
            map->gen_cut = true;
            break;
        } else {
            gen[n_gen++] = id;
        }
        if (!t->has_logprob || q == 0)
            continue;
        row_build *w = &rows[n_rows];
        for (uint32_t j = 0; j < t->k && rc == LM_OK; ++j) {
            int32_t aid = t->top[j].id;
            uint32_t an = 1;
            if (aid < 0)
                an = lookup_lone(ix, t->top[j].text, &aid);
            if (aid == id && an >= 1) /* the chosen token's own entry: placed below */
                continue;
            if (an != 1 || aid < 0 || (uint32_t)aid >= nv) {
                map->n_alt_dropped++;
                continue;
            }
            rc = row_add(w, aid, t->top[j].logprob, err);
        }
        if (rc == LM_OK && (uint32_t)id < nv)
            rc = row_add(w, id, t->logprob, err);
        pos[n_rows++] = q - 1;
    }
    if (rc == LM_OK && n_rows == 0)
        rc = LM_FAIL(err, LM_E_INPUT, "reply: no position carries log-probabilities");
    uint32_t K = 0;
    for (uint32_t i = 0; i < n_rows; ++i)
        K = rows[i].k > K ? rows[i].k : K;
    if (rc == LM_OK) {
        d->n_tokens = n_prompt + n_gen;
        d->tokens = malloc(d->n_tokens * sizeof *d->tokens);
        d->generated = malloc((n_gen ? n_gen : 1) * sizeof *d->generated);
        d->rows = malloc((size_t)n_rows * nv * sizeof *d->rows);
        d->topk_ids = malloc((size_t)n_rows * K * sizeof *d->topk_ids);
        d->positions = malloc(n_rows * sizeof *d->positions);
        if (!d->tokens || !d->generated || !d->rows || !d->topk_ids || !d->positions)
            rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    if (rc == LM_OK) {
        memcpy(d->tokens, prompt, n_prompt * sizeof *prompt);
        memcpy(d->tokens + n_prompt, gen, n_gen * sizeof *gen);
        memcpy(d->generated, gen, n_gen * sizeof *gen);
        d->n_generated = n_gen;
        d->has_generated = true;
        d->topk = K;
        /* rows past the placed path (a cut generated token) are not the dump's */
        uint32_t kept = 0;
        for (uint32_t i = 0; i < n_rows; ++i) {
            if (pos[i] >= d->n_tokens)
                continue;
            float *row = d->rows + (size_t)kept * nv;
            for (uint32_t v = 0; v < nv; ++v)
                row[v] = NAN;
            for (uint32_t j = 0; j < K; ++j) {
                d->topk_ids[(size_t)kept * K + j] = j < rows[i].k ? rows[i].ids[j] : -1;
                if (j < rows[i].k)
                    row[rows[i].ids[j]] = rows[i].lp[j];
            }
            d->positions[kept++] = pos[i];
        }
        d->n_pos = kept;
        map->n_echo = n_echo;
        map->n_gen = n_gen;
        if (kept == 0)
            rc = LM_FAIL(err, LM_E_INPUT, "reply: no scored position on the prompt's path");
    }
    free(rows);
    free(pos);
    free(gen);
    return rc;
}

int hx_probe_reply_dump(hx_dump **out, hx_probe_map *map, const hx_probe_reply *r,
                        const lm_model *m, const hx_piece_index *ix, const int32_t *prompt,
                        uint32_t n_prompt, bool echo, const char *name, lm_err *err)
{
    *out = NULL;
    memset(map, 0, sizeof *map);
    map->prompt_mismatch = -1;
    const bool bos = m->vocab != NULL && prompt[0] == lm_vocab_bos(m->vocab);
    int64_t n_echo = 0;
    if (r->completion_tokens >= 0)
        n_echo = (int64_t)r->n - r->completion_tokens;
    else if (echo)
        n_echo = r->n < n_prompt - (bos ? 1u : 0u) ? r->n : n_prompt - (bos ? 1u : 0u);
    if (n_echo < 0 || n_echo > n_prompt || (!echo && n_echo != 0))
        return LM_FAIL(err, LM_E_INPUT, "reply: log-probabilities of the wrong length (%u "
                       "tokens, %lld generated, a prompt of %u)", (unsigned)r->n,
                       (long long)r->completion_tokens, (unsigned)n_prompt);
    hx_dump *d = calloc(1, sizeof *d);
    if (d == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    d->dir = strdup(name);
    d->engine = strdup(r->model);
    d->settings = strdup(name);
    d->n_prompt = n_prompt;
    d->n_vocab = m->hp.n_vocab;
    d->logprobs = true;
    snprintf(d->row_dtype, sizeof d->row_dtype, "top-k");
    int rc = d->dir && d->engine && d->settings ? LM_OK
                                                : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    if (rc == LM_OK)
        rc = fill(d, map, r, ix, prompt, n_prompt, (uint32_t)n_echo, err);
    if (rc != LM_OK) {
        hx_dump_free(d);
        return rc;
    }
    *out = d;
    return LM_OK;
}
