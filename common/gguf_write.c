/* gguf_write.c — GGUF v3 writer: metadata, tensor infos and tensor bytes written through
 * lm_wfile (fs.h: atomically through a temp file in the target's folder, fsync and rename; the
 * target is never left half-written). A tensor's bytes are either given when it is added (kept
 * in memory until the save) or declared and streamed after the header (lm_gguf_stream), so a
 * file larger than memory can be written one chunk at a time; both paths write through the one
 * stream below, so they give the same bytes. Alignment 32 (the GGUF default, so no
 * general.alignment key is written). All integers little-endian. */
#include "gguf_internal.h"
#include "kvd_gguf.h"

#include "fs.h"
#include "sha256.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ALIGN 32u

typedef struct wtensor {
    char *name;
    lm_tensor_type type;
    uint32_t n_dims;
    uint64_t ne[4];
    uint8_t *bytes; /* [nbytes] in `type`'s encoding; NULL for a declared tensor (streamed) */
    uint64_t nbytes;
} wtensor;

typedef struct buf {
    uint8_t *p;
    size_t n, cap;
} buf;

struct lm_gguf_writer {
    buf kv;          /* serialized key/value pairs, in insertion order */
    uint64_t n_kv;
    char **keys;     /* [n_kv] for the duplicate check */
    wtensor *t;      /* [n_t] */
    uint64_t n_t, cap_t;
    int failed;      /* a previous call failed (out of memory): save refuses */
};

static int put(buf *b, const void *p, size_t n)
{
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap - b->n < n) {
            if (cap > SIZE_MAX / 2)
                return -1;
            cap *= 2;
        }
        uint8_t *q = realloc(b->p, cap);
        if (q == NULL)
            return -1;
        b->p = q;
        b->cap = cap;
    }
    if (n)
        memcpy(b->p + b->n, p, n);
    b->n += n;
    return 0;
}

static int put_le(buf *b, uint64_t v, unsigned n)
{
    uint8_t tmp[8];
    for (unsigned i = 0; i < n; ++i)
        tmp[i] = (uint8_t)(v >> (8 * i));
    return put(b, tmp, n);
}

static int put_str(buf *b, const char *s)
{
    size_t n = strlen(s);
    return put_le(b, n, 8) || put(b, s, n);
}

int lm_gguf_writer_create(lm_gguf_writer **out, lm_err *err)
{
    *out = calloc(1, sizeof **out);
    if (*out == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "gguf writer: out of memory");
    return LM_OK;
}

void lm_gguf_writer_free(lm_gguf_writer *w)
{
    if (w == NULL)
        return;
    for (uint64_t i = 0; i < w->n_kv; ++i)
        free(w->keys[i]);
    for (uint64_t i = 0; i < w->n_t; ++i) {
        free(w->t[i].name);
        free(w->t[i].bytes);
    }
    free(w->keys);
    free(w->t);
    free(w->kv.p);
    free(w);
}

static int oom(lm_gguf_writer *w, lm_err *err)
{
    w->failed = 1;
    return LM_FAIL(err, LM_E_NOMEM, "gguf writer: out of memory");
}

/* Starts a key/value: checks the key is new, records it, writes key and type. */
static int begin_kv(lm_gguf_writer *w, const char *key, lm_gguf_vtype type, lm_err *err)
{
    if (key == NULL || key[0] == '\0')
        return LM_FAIL(err, LM_E_INPUT, "gguf writer: empty metadata key");
    if (strcmp(key, "general.alignment") == 0 && type != LM_GGUF_U32)
        return LM_FAIL(err, LM_E_INPUT, "gguf writer: general.alignment must be a u32");
    for (uint64_t i = 0; i < w->n_kv; ++i)
        if (strcmp(w->keys[i], key) == 0)
            return LM_FAIL(err, LM_E_INPUT, "gguf writer: duplicate metadata key '%s'", key);
    char **k = realloc(w->keys, (size_t)(w->n_kv + 1) * sizeof *k);
    if (k == NULL)
        return oom(w, err);
    w->keys = k;
    if ((k[w->n_kv] = strdup(key)) == NULL)
        return oom(w, err);
    w->n_kv++;
    if (put_str(&w->kv, key) || put_le(&w->kv, (uint64_t)type, 4))
        return oom(w, err);
    return LM_OK;
}

int lm_gguf_w_u32(lm_gguf_writer *w, const char *key, uint32_t v, lm_err *err)
{
    if (key != NULL && strcmp(key, "general.alignment") == 0 && v != ALIGN)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "gguf writer: general.alignment %u: the writer "
                       "only writes alignment %u", v, ALIGN);
    int rc = begin_kv(w, key, LM_GGUF_U32, err);
    if (rc == LM_OK && put_le(&w->kv, v, 4))
        return oom(w, err);
    return rc;
}

int lm_gguf_w_i32(lm_gguf_writer *w, const char *key, int32_t v, lm_err *err)
{
    int rc = begin_kv(w, key, LM_GGUF_I32, err);
    if (rc == LM_OK && put_le(&w->kv, (uint32_t)v, 4))
        return oom(w, err);
    return rc;
}

int lm_gguf_w_f32(lm_gguf_writer *w, const char *key, float v, lm_err *err)
{
    uint32_t u;
    memcpy(&u, &v, 4);
    int rc = begin_kv(w, key, LM_GGUF_F32, err);
    if (rc == LM_OK && put_le(&w->kv, u, 4))
        return oom(w, err);
    return rc;
}

int lm_gguf_w_bool(lm_gguf_writer *w, const char *key, bool v, lm_err *err)
{
    int rc = begin_kv(w, key, LM_GGUF_BOOL, err);
    if (rc == LM_OK && put_le(&w->kv, v ? 1 : 0, 1))
        return oom(w, err);
    return rc;
}

int lm_gguf_w_str(lm_gguf_writer *w, const char *key, const char *v, lm_err *err)
{
    int rc = begin_kv(w, key, LM_GGUF_STR, err);
    if (rc == LM_OK && put_str(&w->kv, v))
        return oom(w, err);
    return rc;
}

int lm_gguf_w_arr(lm_gguf_writer *w, const char *key, lm_gguf_vtype elem_type, const void *data,
                  uint64_t n, lm_err *err)
{
    size_t es = (size_t)lm_gguf_vtype_size(elem_type);
    if (elem_type != LM_GGUF_STR && es == 0)
        return LM_FAIL(err, LM_E_INPUT, "gguf writer: key '%s': unsupported array element "
                       "type %d", key, (int)elem_type);
    int rc = begin_kv(w, key, LM_GGUF_ARR, err);
    if (rc)
        return rc;
    if (put_le(&w->kv, (uint64_t)elem_type, 4) || put_le(&w->kv, n, 8))
        return oom(w, err);
    if (elem_type == LM_GGUF_STR) {
        const char *const *s = data;
        for (uint64_t i = 0; i < n; ++i)
            if (put_str(&w->kv, s[i]))
                return oom(w, err);
        return LM_OK;
    }
    /* Element bytes in little-endian order, read from host values of the element's size. */
    const uint8_t *p = data;
    for (uint64_t i = 0; i < n; ++i) {
        uint64_t v = 0;
        memcpy(&v, p + i * es, es); /* little-endian host: low bytes first */
        if (put_le(&w->kv, v, (unsigned)es))
            return oom(w, err);
    }
    return LM_OK;
}

static int add_tensor(lm_gguf_writer *w, const char *name, lm_tensor_type type, uint32_t n_dims,
                      const uint64_t *ne, uint8_t *bytes, uint64_t nbytes, lm_err *err)
{
    if (w->n_t == w->cap_t) {
        uint64_t cap = w->cap_t ? 2 * w->cap_t : 64;
        wtensor *t = realloc(w->t, (size_t)cap * sizeof *t);
        if (t == NULL) {
            free(bytes);
            return oom(w, err);
        }
        w->t = t;
        w->cap_t = cap;
    }
    wtensor *t = &w->t[w->n_t];
    memset(t, 0, sizeof *t);
    if ((t->name = strdup(name)) == NULL) {
        free(bytes);
        return oom(w, err);
    }
    t->type = type;
    t->n_dims = n_dims;
    for (uint32_t d = 0; d < 4; ++d)
        t->ne[d] = d < n_dims ? ne[d] : 1;
    t->bytes = bytes;
    t->nbytes = nbytes;
    w->n_t++;
    return LM_OK;
}

/* Validates name, dims and type; returns the element count in *n_elem. */
static int check_tensor(const lm_gguf_writer *w, const char *name, lm_tensor_type type,
                        uint32_t n_dims, const uint64_t *ne, uint64_t *n_elem, lm_err *err)
{
    if (name == NULL || name[0] == '\0')
        return LM_FAIL(err, LM_E_INPUT, "gguf writer: empty tensor name");
    for (uint64_t i = 0; i < w->n_t; ++i)
        if (strcmp(w->t[i].name, name) == 0)
            return LM_FAIL(err, LM_E_INPUT, "gguf writer: duplicate tensor '%s'", name);
    if (n_dims < 1 || n_dims > 4)
        return LM_FAIL(err, LM_E_INPUT, "gguf writer: tensor '%s': %u dimensions (must be 1..4)",
                       name, n_dims);
    size_t be = lm_tensor_type_block_elems(type);
    if (be == 0)
        return LM_FAIL(err, LM_E_INPUT, "gguf writer: tensor '%s': unknown type %d", name,
                       (int)type);
    *n_elem = 1;
    for (uint32_t d = 0; d < n_dims; ++d)
        if (ne[d] == 0 || lm_mul_u64(n_elem, *n_elem, ne[d]))
            return LM_FAIL(err, LM_E_INPUT, "gguf writer: tensor '%s': bad dimension %u", name, d);
    if (ne[0] % be != 0)
        return LM_FAIL(err, LM_E_INPUT, "gguf writer: tensor '%s': ne[0] not a multiple of the "
                       "%s block size", name, lm_tensor_type_name(type));
    return LM_OK;
}

void lm_gguf_f32_encode(uint8_t *out, const float *src, uint64_t n, lm_tensor_type type)
{
    const uint64_t es = type == LM_TYPE_F32 ? 4 : 2;
    for (uint64_t i = 0; i < n; ++i) {
        uint32_t v;
        if (type == LM_TYPE_F32)
            memcpy(&v, &src[i], 4);
        else
            v = type == LM_TYPE_F16 ? lm_f32_to_f16(src[i]) : lm_f32_to_bf16(src[i]);
        for (uint64_t b = 0; b < es; ++b)
            out[i * es + b] = (uint8_t)(v >> (8 * b));
    }
}

int lm_gguf_w_tensor_f32(lm_gguf_writer *w, const char *name, lm_tensor_type type,
                         uint32_t n_dims, const uint64_t *ne, const float *src, lm_err *err)
{
    uint64_t n;
    int rc = check_tensor(w, name, type, n_dims, ne, &n, err);
    if (rc)
        return rc;
    if (type != LM_TYPE_F32 && type != LM_TYPE_F16 && type != LM_TYPE_BF16)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "gguf writer: tensor '%s': cannot convert float32 "
                       "to %s (use lm_gguf_w_tensor_raw)", name, lm_tensor_type_name(type));
    uint64_t es = type == LM_TYPE_F32 ? 4 : 2, nb;
    if (lm_mul_u64(&nb, n, es) || nb > SIZE_MAX)
        return LM_FAIL(err, LM_E_INPUT, "gguf writer: tensor '%s' too large", name);
    uint8_t *bytes = malloc((size_t)nb);
    if (bytes == NULL)
        return oom(w, err);
    lm_gguf_f32_encode(bytes, src, n, type);
    return add_tensor(w, name, type, n_dims, ne, bytes, nb, err);
}

/* Bytes of n elements of type (n a multiple of its block), or 0 on overflow. */
static uint64_t type_bytes(lm_tensor_type type, uint64_t n)
{
    uint64_t want;
    return lm_mul_u64(&want, n / lm_tensor_type_block_elems(type),
                      lm_tensor_type_block_bytes(type)) ? 0 : want;
}

int lm_gguf_w_tensor_decl(lm_gguf_writer *w, const char *name, lm_tensor_type type,
                          uint32_t n_dims, const uint64_t *ne, lm_err *err)
{
    uint64_t n;
    int rc = check_tensor(w, name, type, n_dims, ne, &n, err);
    if (rc)
        return rc;
    uint64_t nb = type_bytes(type, n);
    if (nb == 0)
        return LM_FAIL(err, LM_E_INPUT, "gguf writer: tensor '%s' too large", name);
    return add_tensor(w, name, type, n_dims, ne, NULL, nb, err);
}

int lm_gguf_w_tensor_raw(lm_gguf_writer *w, const char *name, lm_tensor_type type,
                         uint32_t n_dims, const uint64_t *ne, const void *src, uint64_t nbytes,
                         lm_err *err)
{
    uint64_t n;
    int rc = check_tensor(w, name, type, n_dims, ne, &n, err);
    if (rc)
        return rc;
    uint64_t want = type_bytes(type, n);
    if (want == 0 || want != nbytes || nbytes > SIZE_MAX)
        return LM_FAIL(err, LM_E_INPUT, "gguf writer: tensor '%s': %llu bytes given, %s needs "
                       "%llu", name, (unsigned long long)nbytes, lm_tensor_type_name(type),
                       (unsigned long long)want);
    uint8_t *bytes = malloc(nbytes ? (size_t)nbytes : 1);
    if (bytes == NULL)
        return oom(w, err);
    memcpy(bytes, src, (size_t)nbytes);
    return add_tensor(w, name, type, n_dims, ne, bytes, nbytes, err);
}

static uint64_t pad_to(uint64_t x)
{
    return (ALIGN - x % ALIGN) % ALIGN;
}

/* Header, metadata and tensor infos (everything before the data section). */
static int build_head(const lm_gguf_writer *w, buf *b)
{
    static const uint8_t zeros[ALIGN];
    if (put(b, "GGUF", 4) || put_le(b, 3, 4) || put_le(b, w->n_t, 8) || put_le(b, w->n_kv, 8)
        || put(b, w->kv.p, w->kv.n))
        return -1;
    uint64_t off = 0;
    for (uint64_t i = 0; i < w->n_t; ++i) {
        const wtensor *t = &w->t[i];
        if (put_str(b, t->name) || put_le(b, t->n_dims, 4))
            return -1;
        for (uint32_t d = 0; d < t->n_dims; ++d)
            if (put_le(b, t->ne[d], 8))
                return -1;
        if (put_le(b, (uint64_t)t->type, 4) || put_le(b, off, 8))
            return -1;
        off += t->nbytes + pad_to(t->nbytes);
    }
    return put(b, zeros, (size_t)pad_to(b->n));
}

struct lm_gguf_stream {
    lm_gguf_writer *w;
    lm_wfile *f;
    const char *path;
    uint64_t cur;  /* the tensor whose bytes come next (n_t when all are written) */
    uint64_t done; /* bytes of tensor cur written so far */
    uint64_t size; /* bytes of the file so far */
    hx_sha256 sha; /* of every byte written */
};

/* Writes bytes[n] to the file, counting and hashing them. */
static int emit(lm_gguf_stream *s, const void *bytes, size_t n, lm_err *err)
{
    int rc = lm_wfile_write(s->f, bytes, n, err);
    if (rc == LM_OK) {
        hx_sha256_update(&s->sha, bytes, n);
        s->size += n;
    }
    return rc;
}

/* Closes tensor cur when complete (its padding), then writes every following tensor whose
 * bytes the writer holds, stopping at the next declared one. */
static int advance(lm_gguf_stream *s, lm_err *err)
{
    static const uint8_t zeros[ALIGN];
    lm_gguf_writer *w = s->w;
    while (s->cur < w->n_t) {
        const wtensor *t = &w->t[s->cur];
        if (s->done < t->nbytes) {
            if (t->bytes == NULL)
                return LM_OK; /* declared: its bytes come through lm_gguf_stream_write */
            int rc = emit(s, t->bytes + s->done, (size_t)(t->nbytes - s->done), err);
            if (rc)
                return rc;
            s->done = t->nbytes;
        }
        int rc = emit(s, zeros, (size_t)pad_to(t->nbytes), err);
        if (rc)
            return rc;
        s->cur++;
        s->done = 0;
    }
    return LM_OK;
}

int lm_gguf_stream_open(lm_gguf_stream **out, lm_gguf_writer *w, const char *path, lm_err *err)
{
    *out = NULL;
    if (w->failed)
        return LM_FAIL(err, LM_E_NOMEM, "%s: not written: an earlier writer call failed", path);
    lm_gguf_stream *s = calloc(1, sizeof *s);
    buf head = {0};
    if (s == NULL || build_head(w, &head)) {
        free(s);
        free(head.p);
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    }
    s->w = w;
    s->path = path;
    hx_sha256_init(&s->sha);
    int rc = lm_wfile_open(&s->f, path, err);
    if (rc == LM_OK && (rc = emit(s, head.p, head.n, err)) == LM_OK)
        rc = advance(s, err);
    free(head.p);
    if (rc != LM_OK) {
        lm_gguf_stream_abort(s);
        return rc;
    }
    *out = s;
    return LM_OK;
}

int lm_gguf_stream_write(lm_gguf_stream *s, const void *bytes, size_t n, lm_err *err)
{
    const uint8_t *p = bytes;
    while (n > 0) {
        if (s->cur == s->w->n_t)
            return LM_FAIL(err, LM_E_INPUT, "%s: %zu bytes beyond the last tensor", s->path, n);
        const wtensor *t = &s->w->t[s->cur];
        const size_t k = n < t->nbytes - s->done ? n : (size_t)(t->nbytes - s->done);
        int rc = emit(s, p, k, err);
        if (rc)
            return rc;
        s->done += k;
        p += k;
        n -= k;
        if ((rc = advance(s, err)))
            return rc;
    }
    return LM_OK;
}

const char *lm_gguf_stream_tensor(const lm_gguf_stream *s)
{
    return s->cur < s->w->n_t ? s->w->t[s->cur].name : NULL;
}

int lm_gguf_stream_commit(lm_gguf_stream *s, uint8_t sha256[32], uint64_t *size, lm_err *err)
{
    if (s->cur < s->w->n_t) {
        const wtensor *t = &s->w->t[s->cur];
        int rc = LM_FAIL(err, LM_E_INPUT, "%s: not written: tensor '%s' has %llu of its %llu "
                         "bytes", s->path, t->name, (unsigned long long)s->done,
                         (unsigned long long)t->nbytes);
        lm_gguf_stream_abort(s);
        return rc;
    }
    int rc = lm_wfile_commit(s->f, err);
    if (rc == LM_OK) {
        if (sha256 != NULL)
            hx_sha256_final(&s->sha, sha256);
        if (size != NULL)
            *size = s->size;
    }
    free(s);
    return rc;
}

void lm_gguf_stream_abort(lm_gguf_stream *s)
{
    if (s == NULL)
        return;
    lm_wfile_abort(s->f);
    free(s);
}

int lm_gguf_writer_size(const lm_gguf_writer *w, uint64_t *size, lm_err *err)
{
    buf head = {0};
    if (build_head(w, &head)) {
        free(head.p);
        return LM_FAIL(err, LM_E_NOMEM, "gguf writer: out of memory");
    }
    uint64_t n = head.n;
    free(head.p);
    for (uint64_t i = 0; i < w->n_t; ++i)
        n += w->t[i].nbytes + pad_to(w->t[i].nbytes);
    *size = n;
    return LM_OK;
}

int lm_gguf_writer_save(lm_gguf_writer *w, const char *path, lm_err *err)
{
    lm_gguf_stream *s;
    int rc = lm_gguf_stream_open(&s, w, path, err);
    return rc ? rc : lm_gguf_stream_commit(s, NULL, NULL, err);
}
