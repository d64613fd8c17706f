/* ref_model.c — opens the reference's own view of a model file (ref_model.h): the
 * hyperparameters by ref_hparams.c's rules, then every tensor the reference computes with,
 * found by name (llama.cpp's names), its shape checked against those hyperparameters, and
 * dequantized by ref_dequant.c into one float32 arena; the file is unmapped afterwards. */
#include "ref_model.h"
#include "kvd_ref.h"
#include "kvd_util.h"
#include "ref_spans.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

/* One tensor to read: its name, expected extents (ggml order, 1 where unused), whether it may
 * be absent, and where its values go. */
typedef struct want {
    char name[64];
    uint64_t ne[3];
    bool optional;
    const float **dst;
} want;

typedef struct wants {
    want *w;
    size_t n, cap;
} wants;

static int add(wants *ws, const char *name, uint64_t ne0, uint64_t ne1, uint64_t ne2,
               bool optional, const float **dst, lm_err *err)
{
    if (ws->n == ws->cap) {
        const size_t cap = ws->cap ? 2 * ws->cap : 64;
        want *w = realloc(ws->w, cap * sizeof *w);
        if (w == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory");
        ws->w = w;
        ws->cap = cap;
    }
    want *w = &ws->w[ws->n++];
    snprintf(w->name, sizeof w->name, "%s", name);
    w->ne[0] = ne0;
    w->ne[1] = ne1;
    w->ne[2] = ne2;
    w->optional = optional;
    w->dst = dst;
    return LM_OK;
}

/* "blk.<l>.<suffix>" */
static int add_layer(wants *ws, uint32_t l, const char *suffix, uint64_t ne0, uint64_t ne1,
                     uint64_t ne2, bool optional, const float **dst, lm_err *err)
{
    char name[64];
    snprintf(name, sizeof name, "blk.%" PRIu32 ".%s", l, suffix);
    return add(ws, name, ne0, ne1, ne2, optional, dst, err);
}

/* Layer l's attention tensors: norm, projections, optional biases, sinks, per-head norms. */
static int want_attention(wants *ws, ref_model *m, uint32_t l, lm_err *err)
{
    const ref_hparams *hp = &m->hp;
    ref_layer *L = &m->layers[l];
    const uint64_t E = hp->n_embd, Q = (uint64_t)hp->n_head * hp->head_dim,
                   KV = (uint64_t)hp->n_head_kv * hp->head_dim;
    int rc;
    if ((rc = add_layer(ws, l, "attn_norm.weight", E, 1, 1, false, &L->attn_norm, err)) ||
        (rc = add_layer(ws, l, "attn_q.weight", E, Q, 1, false, &L->wq, err)) ||
        (rc = add_layer(ws, l, "attn_k.weight", E, KV, 1, false, &L->wk, err)) ||
        (rc = add_layer(ws, l, "attn_v.weight", E, KV, 1, false, &L->wv, err)) ||
        (rc = add_layer(ws, l, "attn_output.weight", Q, E, 1, false, &L->wo, err)) ||
        (rc = add_layer(ws, l, "attn_q.bias", Q, 1, 1, true, &L->bq, err)) ||
        (rc = add_layer(ws, l, "attn_k.bias", KV, 1, 1, true, &L->bk, err)) ||
        (rc = add_layer(ws, l, "attn_v.bias", KV, 1, 1, true, &L->bv, err)) ||
        (rc = add_layer(ws, l, "attn_output.bias", E, 1, 1, true, &L->bo, err)) ||
        (rc = add_layer(ws, l, "attn_sinks.weight", hp->n_head, 1, 1, true, &L->sinks, err)))
        return rc;
    if (hp->qk_norm &&
        ((rc = add_layer(ws, l, "attn_q_norm.weight", hp->head_dim, 1, 1, false, &L->attn_q_norm,
                         err)) ||
         (rc = add_layer(ws, l, "attn_k_norm.weight", hp->head_dim, 1, 1, false, &L->attn_k_norm,
                         err))))
        return rc;
    if (hp->norm_place == REF_NORM_SANDWICH &&
        (rc = add_layer(ws, l, "post_attention_norm.weight", E, 1, 1, false, &L->attn_post_norm,
                        err)))
        return rc;
    return LM_OK;
}

/* Layer l's FFN tensors: its pre-norm, then the dense FFN or the router and expert stacks. */
static int want_ffn(wants *ws, ref_model *m, uint32_t l, lm_err *err)
{
    const ref_hparams *hp = &m->hp;
    ref_layer *L = &m->layers[l];
    const uint64_t E = hp->n_embd, F = hp->n_ff, X = hp->n_expert, FE = hp->n_ff_exp;
    int rc;
    if ((rc = add_layer(ws, l, hp->ffn_norm, E, 1, 1, false, &L->ffn_norm, err)))
        return rc;
    if (hp->norm_place == REF_NORM_SANDWICH &&
        (rc = add_layer(ws, l, "post_ffw_norm.weight", E, 1, 1, false, &L->ffn_post_norm, err)))
        return rc;
    if (X == 0)
        return (rc = add_layer(ws, l, "ffn_gate.weight", E, F, 1, false, &L->w_gate, err)) ||
                       (rc = add_layer(ws, l, "ffn_up.weight", E, F, 1, false, &L->w_up, err)) ||
                       (rc = add_layer(ws, l, "ffn_down.weight", F, E, 1, false, &L->w_down, err))
                   ? rc : LM_OK;
    if ((rc = add_layer(ws, l, "ffn_gate_inp.weight", E, X, 1, false, &L->ffn_gate_inp, err)) ||
        (rc = add_layer(ws, l, "ffn_gate_exps.weight", E, FE, X, false, &L->ffn_gate_exps, err)) ||
        (rc = add_layer(ws, l, "ffn_up_exps.weight", E, FE, X, false, &L->ffn_up_exps, err)) ||
        (rc = add_layer(ws, l, "ffn_down_exps.weight", FE, E, X, false, &L->ffn_down_exps, err)) ||
        (rc = add_layer(ws, l, "ffn_gate_inp.bias", X, 1, 1, true, &L->ffn_gate_inp_b, err)) ||
        (rc = add_layer(ws, l, "ffn_gate_exps.bias", FE, X, 1, true, &L->ffn_gate_exps_b, err)) ||
        (rc = add_layer(ws, l, "ffn_up_exps.bias", FE, X, 1, true, &L->ffn_up_exps_b, err)) ||
        (rc = add_layer(ws, l, "ffn_down_exps.bias", E, X, 1, true, &L->ffn_down_exps_b, err)))
        return rc;
    return LM_OK;
}

/* Every tensor the reference reads from g, in reading order. */
static int want_all(wants *ws, ref_model *m, const lm_gguf *g, lm_err *err)
{
    const ref_hparams *hp = &m->hp;
    const uint64_t E = hp->n_embd, V = hp->n_vocab;
    m->hp.tied_output = lm_gguf_tensor_find(g, "output.weight") == NULL;
    int rc;
    if ((rc = add(ws, "token_embd.weight", E, V, 1, false, &m->tok_embd, err)) ||
        (rc = add(ws, "output_norm.weight", E, 1, 1, false, &m->output_norm, err)) ||
        (rc = add(ws, "rope_freqs.weight", hp->n_rot / 2, 1, 1, true, &m->rope_freqs, err)) ||
        (!hp->tied_output && (rc = add(ws, "output.weight", E, V, 1, false, &m->output, err))))
        return rc;
    for (uint32_t l = 0; l < hp->n_layer; ++l)
        if ((rc = want_attention(ws, m, l, err)) || (rc = want_ffn(ws, m, l, err)))
            return rc;
    return LM_OK;
}

/* The tensors of ws present with their expected extents; *total: their elements. */
static int check_shapes(const wants *ws, const lm_gguf *g, uint64_t *total, lm_err *err)
{
    const char *path = lm_gguf_path(g);
    *total = 0;
    for (size_t i = 0; i < ws->n; ++i) {
        const want *w = &ws->w[i];
        const lm_gguf_tensor *t = lm_gguf_tensor_find(g, w->name);
        if (t == NULL && w->optional)
            continue;
        if (t == NULL)
            return LM_FAIL(err, LM_E_INPUT, "%s: the reference finds no tensor '%s'", path,
                           w->name);
        if (t->ne[0] != w->ne[0] || t->ne[1] != w->ne[1] || t->ne[2] != w->ne[2] ||
            t->ne[3] != 1)
            return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s' has shape [%" PRIu64 ", %" PRIu64
                           ", %" PRIu64 ", %" PRIu64 "], the reference expects [%" PRIu64 ", %"
                           PRIu64 ", %" PRIu64 "]", path, w->name, t->ne[0], t->ne[1], t->ne[2],
                           t->ne[3], w->ne[0], w->ne[1], w->ne[2]);
        if (lm_add_u64(total, *total, t->n_elem))
            return LM_FAIL(err, LM_E_INPUT, "%s: weights too large", path);
    }
    return LM_OK;
}

/* Dequantizes every present tensor of ws into m's arena (ref_dequant) and lists it. */
static int read_weights(ref_model *m, const wants *ws, const lm_gguf *g, uint64_t total,
                        lm_err *err)
{
    const char *path = lm_gguf_path(g);
    long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (total > SIZE_MAX / sizeof(float) / 2 ||
        (pages > 0 && page > 0 && total * sizeof(float) / (uint64_t)page > (uint64_t)pages))
        return LM_FAIL(err, LM_E_NOMEM, "%s: the reference's %" PRIu64 " float32 weights exceed "
                       "this machine's memory", path, total);
    m->weights = calloc(ws->n ? ws->n : 1, sizeof *m->weights);
    m->arena = malloc(total ? (size_t)total * sizeof(float) : 1);
    if (m->weights == NULL || m->arena == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory for the reference's %" PRIu64
                       " float32 weights", path, total);
    float *dst = m->arena;
    for (size_t i = 0; i < ws->n; ++i) {
        const lm_gguf_tensor *t = lm_gguf_tensor_find(g, ws->w[i].name);
        if (t == NULL)
            continue; /* optional and absent: the pointer stays NULL */
        int rc = ref_dequant(dst, (uint32_t)t->type, t->data, t->nbytes, t->n_elem, err);
        if (rc)
            return rc;
        *ws->w[i].dst = dst;
        ref_weight *w = &m->weights[m->n_weights++];
        snprintf(w->name, sizeof w->name, "%s", t->name);
        w->data = dst;
        w->n_elem = t->n_elem;
        w->type = (uint32_t)t->type;
        dst += t->n_elem;
    }
    if (m->hp.tied_output)
        m->output = m->tok_embd;
    return LM_OK;
}

/* Hyperparameters, the vocabulary size from the embedding's rows and the layers' windows. */
static int read_config(ref_model *m, const lm_gguf *g, lm_err *err)
{
    const char *path = lm_gguf_path(g);
    int rc = ref_hparams_read(&m->hp, g, err);
    if (rc)
        return rc;
    const lm_gguf_tensor *emb = lm_gguf_tensor_find(g, "token_embd.weight");
    if (emb == NULL || emb->ne[1] == 0 || emb->ne[1] > INT32_MAX)
        return LM_FAIL(err, LM_E_INPUT, "%s: the reference finds no token_embd.weight with 1.."
                       "2^31-1 rows", path);
    m->hp.n_vocab = (uint32_t)emb->ne[1];
    /* each layer has at least 9 tensors: bounds block_count before allocating for it */
    if (m->hp.n_layer > lm_gguf_n_tensors(g) / 9)
        return LM_FAIL(err, LM_E_INPUT, "%s: block_count %" PRIu32 " but the file has only %"
                       PRIu64 " tensors", path, m->hp.n_layer, lm_gguf_n_tensors(g));
    m->layers = calloc(m->hp.n_layer, sizeof *m->layers);
    uint32_t *window = calloc(m->hp.n_layer, sizeof *window);
    if (m->layers == NULL || window == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    else
        rc = ref_hparams_windows(window, &m->hp, g, err);
    for (uint32_t l = 0; rc == LM_OK && l < m->hp.n_layer; ++l)
        m->layers[l].window = window[l];
    free(window);
    return rc;
}

int ref_model_open(ref_model **out, const char *path, lm_err *err)
{
    *out = NULL;
    lm_gguf *g = NULL;
    wants ws = {0};
    uint64_t total = 0;
    ref_model *m = calloc(1, sizeof *m);
    if (m == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    int rc = lm_gguf_open(&g, path, err);
    if (rc == LM_OK && (m->path = strdup(path)) == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    if (rc == LM_OK && (rc = read_config(m, g, err)) == LM_OK &&
        (rc = want_all(&ws, m, g, err)) == LM_OK &&
        (rc = check_shapes(&ws, g, &total, err)) == LM_OK)
        rc = read_weights(m, &ws, g, total, err);
    if (rc == LM_OK) { /* the file's exact bytes: the cache key of this model */
        XXH128_canonical_t canon;
        XXH128_canonicalFromHash(&canon, XXH3_128bits(lm_gguf_bytes(g), (size_t)lm_gguf_size(g)));
        memcpy(m->content_hash, canon.digest, sizeof m->content_hash);
    }
    free(ws.w);
    lm_gguf_close(g);
    if (rc != LM_OK) {
        ref_model_free(m);
        return rc;
    }
    *out = m;
    return LM_OK;
}

void ref_model_release(ref_model *m)
{
    if (m != NULL)
        ref_spans_release(m);
}

void ref_model_free(ref_model *m)
{
    if (m == NULL)
        return;
    ref_model_release(m);
    free(m->arena);
    free(m->weights);
    free(m->layers);
    free(m->path);
    free(m);
}

void ref_model_hash_hex(const ref_model *m, char out[33])
{
    lm_hex_encode(out, m->content_hash, 16);
}
