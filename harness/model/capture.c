/* capture.c — one configuration's capture: allocation, canonical serialization, XXH3-128. */
#include "model/capture.h"
#include "kvd_util.h"

#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#define HX_BIG_ENDIAN 1
#endif

size_t hx_capture_kv_elems(const hx_capture_shape *s)
{
    return (size_t)s->n_prompt * s->n_kv_head * s->head_dim;
}

int hx_capture_create(hx_capture **out, const hx_capture_shape *shape, lm_err *err)
{
    *out = NULL;
    if (shape->n_tokens < shape->n_prompt)
        return LM_FAIL(err, LM_E_INPUT, "capture: %u tokens but %u prompt positions",
                       (unsigned)shape->n_tokens, (unsigned)shape->n_prompt);
    uint64_t kv, lg;
    if (lm_mul_u64(&kv, (uint64_t)shape->n_prompt * shape->n_kv_head, shape->head_dim) ||
        lm_mul_u64(&kv, kv, sizeof(float)) || kv > SIZE_MAX ||
        lm_mul_u64(&lg, (uint64_t)shape->n_pos * sizeof(float), shape->n_vocab) || lg > SIZE_MAX)
        return LM_FAIL(err, LM_E_NOMEM, "capture: shape too large");
    hx_capture *c = calloc(1, sizeof *c);
    if (c == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "capture: out of memory");
    c->shape = *shape;
    c->tokens = calloc(shape->n_tokens ? shape->n_tokens : 1, sizeof *c->tokens);
    c->k = calloc(shape->n_layer ? shape->n_layer : 1, sizeof *c->k);
    c->v = calloc(shape->n_layer ? shape->n_layer : 1, sizeof *c->v);
    c->positions = calloc(shape->n_pos ? shape->n_pos : 1, sizeof *c->positions);
    c->logits = calloc(lg ? (size_t)lg : 1, 1);
    bool ok = c->tokens && c->k && c->v && c->positions && c->logits;
    for (uint32_t l = 0; ok && l < shape->n_layer; ++l) {
        c->k[l] = calloc(kv ? (size_t)kv : 1, 1);
        c->v[l] = calloc(kv ? (size_t)kv : 1, 1);
        ok = c->k[l] && c->v[l];
    }
    if (!ok) {
        hx_capture_free(c);
        return LM_FAIL(err, LM_E_NOMEM, "capture: out of memory");
    }
    *out = c;
    return LM_OK;
}

void hx_capture_free(hx_capture *c)
{
    if (c == NULL)
        return;
    for (uint32_t l = 0; l < c->shape.n_layer; ++l) {
        if (c->k)
            free(c->k[l]);
        if (c->v)
            free(c->v[l]);
    }
    free(c->k);
    free(c->v);
    for (uint32_t i = 0; c->hidden && i <= c->shape.n_layer; ++i)
        free(c->hidden[i]);
    free(c->hidden);
    free(c->tokens);
    free(c->positions);
    free(c->logits);
    free(c->prompt_logits);
    free(c);
}

/* Emits n 32-bit words little-endian. On little-endian hosts the memory already is the
 * canonical form; elsewhere words are swapped through a small stack buffer. */
static int emit32(hx_sink_fn sink, void *user, const void *words, size_t n)
{
#ifndef HX_BIG_ENDIAN
    return n ? sink(user, words, n * 4) : 0;
#else
    uint8_t buf[4096];
    const uint8_t *p = words;
    while (n) {
        size_t m = n < sizeof buf / 4 ? n : sizeof buf / 4;
        for (size_t i = 0; i < m; ++i)
            for (int b = 0; b < 4; ++b)
                buf[4 * i + b] = p[4 * i + 3 - b];
        if (sink(user, buf, m * 4))
            return 1;
        p += m * 4;
        n -= m;
    }
    return 0;
#endif
}

int hx_capture_serialize(const hx_capture *c, hx_sink_fn sink, void *user, lm_err *err)
{
    const hx_capture_shape *s = &c->shape;
    uint32_t head[8] = {HX_CAPTURE_FORMAT, s->n_layer, s->n_kv_head, s->head_dim,
                        s->n_vocab,        s->n_prompt, s->n_tokens, s->n_pos};
    size_t kv = hx_capture_kv_elems(s);
    int stop = emit32(sink, user, head, 8) || emit32(sink, user, c->tokens, s->n_tokens);
    for (uint32_t l = 0; !stop && c->k != NULL && l < s->n_layer; ++l) /* none: a dump's rows */
        stop = emit32(sink, user, c->k[l], kv) || emit32(sink, user, c->v[l], kv);
    if (!stop)
        stop = emit32(sink, user, c->positions, s->n_pos) ||
               emit32(sink, user, c->logits, (size_t)s->n_pos * s->n_vocab);
    return stop ? LM_FAIL(err, LM_E_IO, "capture: serialization stopped by its sink") : LM_OK;
}

static int hash_sink(void *user, const void *bytes, size_t n)
{
    return XXH3_128bits_update(user, bytes, n) != XXH_OK;
}

int hx_capture_hash(uint8_t out[16], const hx_capture *c, lm_err *err)
{
    XXH3_state_t *st = XXH3_createState();
    if (st == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "capture: out of memory for the hash state");
    XXH3_128bits_reset(st);
    int rc = hx_capture_serialize(c, hash_sink, st, err);
    if (rc == LM_OK) {
        XXH128_canonical_t can;
        XXH128_canonicalFromHash(&can, XXH3_128bits_digest(st));
        memcpy(out, can.digest, 16);
    }
    XXH3_freeState(st);
    return rc;
}

int hx_hash_from_hex(uint8_t out[16], const char *hex, lm_err *err)
{
    if (hex == NULL || strlen(hex) != 32)
        return LM_FAIL(err, LM_E_INPUT, "hash '%s': expected 32 hex digits", hex ? hex : "");
    if (!lm_hex_decode(out, 16, hex))
        return LM_FAIL(err, LM_E_INPUT, "hash '%s': not hexadecimal", hex);
    return LM_OK;
}

static int file_sink(void *user, const void *bytes, size_t n)
{
    return fwrite(bytes, 1, n, user) != n;
}

int hx_capture_write(const hx_capture *c, FILE *f, lm_err *err)
{
    return hx_capture_serialize(c, file_sink, f, err);
}

int64_t hx_capture_row(const hx_capture *c, uint32_t pos)
{
    return lm_index_of_u32(c->positions, c->shape.n_pos, pos);
}

const float *hx_capture_logits_at(const hx_capture *c, uint32_t pos)
{
    int64_t row = hx_capture_row(c, pos);
    if (row >= 0)
        return c->logits + (size_t)row * c->shape.n_vocab;
    if (c->prompt_logits != NULL && pos < c->n_prompt_rows)
        return c->prompt_logits + (size_t)pos * c->shape.n_vocab;
    return NULL;
}

void hx_capture_keep_rows(float *const *dst, uint32_t n_layer, uint32_t limit, uint32_t layer,
                          uint32_t pos0, uint32_t n, const float *x, size_t row_elems)
{
    if (layer >= n_layer || pos0 >= limit)
        return;
    const uint32_t rows = pos0 + n <= limit ? n : limit - pos0;
    memcpy(dst[layer] + (size_t)pos0 * row_elems, x, (size_t)rows * row_elems * sizeof *x);
}
