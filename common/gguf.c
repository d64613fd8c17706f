/* gguf.c — GGUF v2/v3 reader: maps the file and validates every byte it will ever hand out.
 *
 * Layout (GGUF spec): magic "GGUF", u32 version, u64 n_tensors, u64 n_kv, then n_kv
 * key/value pairs, then n_tensors tensor infos (name, u32 n_dims, u64 ne[n_dims], u32 type,
 * u64 offset), padding to general.alignment (default 32), then the data section. All
 * integers are little-endian (read byte by byte, so the host's byte order does not matter).
 *
 * Everything read from the file is bounds-checked against the bytes that remain before it is
 * used; counts are bounded by the remaining bytes before anything is allocated for them, and
 * every size is computed with the overflow-checked lm_mul_u64/lm_add_u64. Keys, strings and
 * scalar array elements are copied into host memory at open time (aligned, NUL-terminated);
 * tensor data stays in the mapping. */
#include "gguf_internal.h"

#include "fs.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <float.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define GGUF_DEFAULT_ALIGNMENT 32u

typedef struct kv {
    char *key;          /* NUL-terminated copy; keys containing NUL are refused */
    lm_gguf_vtype type;
    union {
        uint64_t u;     /* U8, U16, U32, U64, BOOL */
        int64_t i;      /* I8, I16, I32, I64 */
        double f;       /* F32, F64 (F32 widened exactly) */
    } num;
    lm_gguf_str str;    /* STR */
    lm_gguf_arr arr;    /* ARR */
    void *owned;        /* string or array storage */
} kv;

typedef struct name_ix {
    const char *name;
    uint64_t ix;
} name_ix;

struct lm_gguf {
    char *path;
    const uint8_t *bytes; /* [size] */
    uint64_t size;
    void *map;            /* non-NULL when we mapped the file ourselves */
    uint32_t version;
    uint64_t n_kv;
    kv *kvs;              /* [n_kv] in file order */
    name_ix *kv_sorted;   /* [n_kv] sorted by key, for lookups and the duplicate check */
    uint64_t n_tensors;
    lm_gguf_tensor *tensors; /* [n_tensors] in file order */
    name_ix *t_sorted;    /* [n_tensors] sorted by name */
    uint64_t alignment;
    uint64_t data_offset;
};

/* ---------------------------------------------------------------- cursor over the bytes */

typedef struct cur {
    const uint8_t *b;
    uint64_t size;
    uint64_t pos;
    const char *path;
    lm_err *err;
} cur;

static uint64_t left(const cur *c)
{
    return c->size - c->pos;
}

static int need(cur *c, uint64_t n, const char *what)
{
    if (n > left(c))
        return LM_FAIL(c->err, LM_E_INPUT,
                       "%s: truncated file: %s at offset %" PRIu64 " needs %" PRIu64
                       " bytes but only %" PRIu64 " remain",
                       c->path, what, c->pos, n, left(c));
    return LM_OK;
}

static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; ++i)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int rd_u32(cur *c, uint32_t *v, const char *what)
{
    int rc = need(c, 4, what);
    if (rc)
        return rc;
    *v = (uint32_t)le(c->b + c->pos, 4);
    c->pos += 4;
    return LM_OK;
}

static int rd_u64(cur *c, uint64_t *v, const char *what)
{
    int rc = need(c, 8, what);
    if (rc)
        return rc;
    *v = le(c->b + c->pos, 8);
    c->pos += 8;
    return LM_OK;
}

/* Reads a GGUF string (u64 length + bytes) as a malloc'd NUL-terminated copy. */
static int rd_name(cur *c, char **out, const char *what)
{
    uint64_t len;
    int rc = rd_u64(c, &len, what);
    if (rc)
        return rc;
    if ((rc = need(c, len, what)))
        return rc;
    if (memchr(c->b + c->pos, '\0', len) != NULL)
        return LM_FAIL(c->err, LM_E_INPUT, "%s: %s at offset %" PRIu64 " contains a NUL byte",
                       c->path, what, c->pos);
    char *s = malloc(len + 1);
    if (s == NULL)
        return LM_FAIL(c->err, LM_E_NOMEM, "%s: out of memory reading %s", c->path, what);
    memcpy(s, c->b + c->pos, len);
    s[len] = '\0';
    c->pos += len;
    *out = s;
    return LM_OK;
}

/* ---------------------------------------------------------------- values */

uint64_t lm_gguf_vtype_size(lm_gguf_vtype t)
{
    switch (t) {
    case LM_GGUF_U8: case LM_GGUF_I8: case LM_GGUF_BOOL: return 1;
    case LM_GGUF_U16: case LM_GGUF_I16: return 2;
    case LM_GGUF_U32: case LM_GGUF_I32: case LM_GGUF_F32: return 4;
    case LM_GGUF_U64: case LM_GGUF_I64: case LM_GGUF_F64: return 8;
    default: return 0;
    }
}

static const char *vtype_name(lm_gguf_vtype t)
{
    static const char *names[] = {"u8", "i8", "u16", "i16", "u32", "i32", "f32", "bool",
                                  "string", "array", "u64", "i64", "f64"};
    return (unsigned)t < sizeof names / sizeof names[0] ? names[t] : "?";
}

static int64_t sign_extend(uint64_t v, unsigned bytes)
{
    unsigned shift = 64 - 8 * bytes;
    return (int64_t)(v << shift) >> shift;
}

/* Decodes one scalar at p into k->num. */
static int decode_scalar(cur *c, kv *k, lm_gguf_vtype t, const uint8_t *p)
{
    uint64_t n = lm_gguf_vtype_size(t);
    uint64_t raw = le(p, (unsigned)n);
    switch (t) {
    case LM_GGUF_U8: case LM_GGUF_U16: case LM_GGUF_U32: case LM_GGUF_U64:
        k->num.u = raw;
        break;
    case LM_GGUF_BOOL:
        if (raw > 1)
            return LM_FAIL(c->err, LM_E_INPUT, "%s: key '%s': bool value %" PRIu64
                           " is neither 0 nor 1", c->path, k->key, raw);
        k->num.u = raw;
        break;
    case LM_GGUF_I8: case LM_GGUF_I16: case LM_GGUF_I32: case LM_GGUF_I64:
        k->num.i = sign_extend(raw, (unsigned)n);
        break;
    case LM_GGUF_F32: {
        uint32_t b32 = (uint32_t)raw;
        float f;
        memcpy(&f, &b32, 4);
        k->num.f = (double)f;
        break;
    }
    case LM_GGUF_F64:
        memcpy(&k->num.f, &raw, 8);
        break;
    default:
        return LM_FAIL(c->err, LM_E_INTERNAL, "%s: decode_scalar type %d", c->path, (int)t);
    }
    return LM_OK;
}

/* Reads an array of strings: validated in one pass (lengths within the file), then copied
 * into one allocation of lm_gguf_str[n] followed by the NUL-terminated characters. */
static int rd_str_array(cur *c, kv *k, uint64_t n)
{
    /* Every string costs at least its 8-byte length: bounds n before any allocation. */
    if (n > left(c) / 8)
        return LM_FAIL(c->err, LM_E_INPUT, "%s: truncated or corrupt file: key '%s': string "
                       "array of %" PRIu64 " elements cannot fit in the %" PRIu64 " bytes left",
                       c->path, k->key, n, left(c));
    uint64_t start = c->pos, chars = 0;
    for (uint64_t i = 0; i < n; ++i) {
        uint64_t len;
        int rc = rd_u64(c, &len, "array string length");
        if (rc)
            return rc;
        if (len > left(c))
            return LM_FAIL(c->err, LM_E_INPUT, "%s: key '%s': string %" PRIu64 " of length %"
                           PRIu64 " runs past the end of the file", c->path, k->key, i, len);
        c->pos += len;
        chars += len + 1; /* cannot overflow: bounded by the file size plus n */
    }
    uint64_t total;
    if (lm_mul_u64(&total, n, sizeof(lm_gguf_str)) || lm_add_u64(&total, total, chars)
        || total > SIZE_MAX)
        return LM_FAIL(c->err, LM_E_INPUT, "%s: key '%s': array too large", c->path, k->key);
    uint8_t *mem = malloc(total ? (size_t)total : 1);
    if (mem == NULL)
        return LM_FAIL(c->err, LM_E_NOMEM, "%s: out of memory for key '%s'", c->path, k->key);
    lm_gguf_str *strs = (lm_gguf_str *)mem;
    char *dst = (char *)(mem + n * sizeof(lm_gguf_str));
    uint64_t pos = start;
    for (uint64_t i = 0; i < n; ++i) {
        uint64_t len = le(c->b + pos, 8);
        pos += 8;
        memcpy(dst, c->b + pos, len);
        dst[len] = '\0';
        strs[i].ptr = dst;
        strs[i].len = len;
        dst += len + 1;
        pos += len;
    }
    k->owned = mem;
    k->arr.type = LM_GGUF_STR;
    k->arr.n = n;
    k->arr.data = strs;
    return LM_OK;
}

static int rd_value(cur *c, kv *k)
{
    int rc;
    if (k->type == LM_GGUF_STR) {
        uint64_t len;
        if ((rc = rd_u64(c, &len, "string length")))
            return rc;
        if (len > left(c))
            return LM_FAIL(c->err, LM_E_INPUT, "%s: key '%s': string of length %" PRIu64
                           " runs past the end of the file", c->path, k->key, len);
        char *s = malloc(len + 1);
        if (s == NULL)
            return LM_FAIL(c->err, LM_E_NOMEM, "%s: out of memory for key '%s'", c->path, k->key);
        memcpy(s, c->b + c->pos, len);
        s[len] = '\0';
        c->pos += len;
        k->owned = s;
        k->str.ptr = s;
        k->str.len = len;
        return LM_OK;
    }
    if (k->type == LM_GGUF_ARR) {
        uint32_t et;
        uint64_t n;
        if ((rc = rd_u32(c, &et, "array element type")) || (rc = rd_u64(c, &n, "array length")))
            return rc;
        if (et == LM_GGUF_ARR)
            return LM_FAIL(c->err, LM_E_UNSUPPORTED, "%s: key '%s': nested arrays are not "
                           "supported", c->path, k->key);
        if (et > LM_GGUF_F64)
            return LM_FAIL(c->err, LM_E_INPUT, "%s: key '%s': unknown array element type %" PRIu32,
                           c->path, k->key, et);
        if (et == LM_GGUF_STR)
            return rd_str_array(c, k, n);
        uint64_t es = lm_gguf_vtype_size((lm_gguf_vtype)et), nb;
        if (lm_mul_u64(&nb, n, es) || nb > left(c))
            return LM_FAIL(c->err, LM_E_INPUT, "%s: key '%s': array of %" PRIu64 " %s elements "
                           "runs past the end of the file", c->path, k->key, n,
                           vtype_name((lm_gguf_vtype)et));
        /* malloc's alignment suits every scalar type; the file's bytes may be unaligned. */
        void *mem = malloc(nb ? (size_t)nb : 1);
        if (mem == NULL)
            return LM_FAIL(c->err, LM_E_NOMEM, "%s: out of memory for key '%s'", c->path, k->key);
        memcpy(mem, c->b + c->pos, (size_t)nb);
        if (et == LM_GGUF_BOOL)
            for (uint64_t i = 0; i < n; ++i)
                if (((const uint8_t *)mem)[i] > 1) {
                    free(mem);
                    return LM_FAIL(c->err, LM_E_INPUT, "%s: key '%s': bool element %" PRIu64
                                   " is neither 0 nor 1", c->path, k->key, i);
                }
        c->pos += nb;
        k->owned = mem;
        k->arr.type = (lm_gguf_vtype)et;
        k->arr.n = n;
        k->arr.data = mem;
        return LM_OK;
    }
    uint64_t es = lm_gguf_vtype_size(k->type);
    if ((rc = need(c, es, "metadata value")))
        return rc;
    rc = decode_scalar(c, k, k->type, c->b + c->pos);
    c->pos += es;
    return rc;
}

/* ---------------------------------------------------------------- sorting and lookup */

static int cmp_name_ix(const void *a, const void *b)
{
    return strcmp(((const name_ix *)a)->name, ((const name_ix *)b)->name);
}

static const name_ix *lookup(const name_ix *v, uint64_t n, const char *name)
{
    name_ix key = {name, 0};
    return n ? bsearch(&key, v, (size_t)n, sizeof *v, cmp_name_ix) : NULL;
}

/* ---------------------------------------------------------------- open */

typedef struct extent {
    uint64_t off; /* relative to the data section */
    uint64_t end;
    uint64_t ix;
} extent;

static int cmp_extent(const void *a, const void *b)
{
    const extent *x = a, *y = b;
    return x->off < y->off ? -1 : x->off > y->off ? 1 : 0;
}

/* Reads one tensor info into t (name owned by t) and its relative data offset into *off. */
static int parse_tensor_info(lm_gguf *g, cur *c, lm_gguf_tensor *t, uint64_t *off)
{
    lm_err *err = c->err;
    char *name = NULL;
    int rc = rd_name(c, &name, "tensor name");
    if (rc)
        return rc;
    t->name = name;
    uint32_t nd, type;
    if ((rc = rd_u32(c, &nd, "tensor n_dims")))
        return rc;
    if (nd < 1 || nd > 4)
        return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s' has %" PRIu32 " dimensions "
                       "(must be 1..4)", g->path, name, nd);
    t->n_dims = nd;
    t->n_elem = 1;
    for (uint32_t d = 0; d < 4; ++d) {
        uint64_t ne = 1;
        if (d < nd && (rc = rd_u64(c, &ne, "tensor dimension")))
            return rc;
        if (ne == 0 || ne > (uint64_t)INT64_MAX)
            return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s' has invalid dimension %" PRIu32
                           " = %" PRIu64, g->path, name, d, ne);
        t->ne[d] = ne;
        if (lm_mul_u64(&t->n_elem, t->n_elem, ne))
            return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s': element count overflows",
                           g->path, name);
    }
    if ((rc = rd_u32(c, &type, "tensor type")) || (rc = rd_u64(c, off, "tensor offset")))
        return rc;
    /* Every ggml type with a known geometry is accepted here (its extent can be validated);
     * whether kvdrift can dequantize it is the model loader's question. */
    const lm_type_geom *tr = lm_type_geom_of(type);
    if (tr == NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s' has unknown type %" PRIu32,
                       g->path, name, type);
    size_t be = tr->block_elems, bb = tr->block_bytes;
    t->type = (lm_tensor_type)type;
    if (t->ne[0] % be != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s': ne[0] = %" PRIu64 " is not a "
                       "multiple of the %s block size %zu", g->path, name, t->ne[0],
                       lm_tensor_type_name(t->type), be);
    if (lm_mul_u64(&t->nbytes, t->n_elem / be, bb))
        return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s': byte size overflows", g->path, name);
    if (*off % g->alignment != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s': offset %" PRIu64 " is not a "
                       "multiple of the alignment %" PRIu64, g->path, name, *off, g->alignment);
    return LM_OK;
}

/* Tensor infos, then the data section: every extent inside the file, none overlapping. */
static int parse_tensors(lm_gguf *g, cur *c)
{
    lm_err *err = c->err;
    int rc = LM_OK;
    /* A tensor info takes at least 8 (name length) + 4 + 8 (one dim) + 4 + 8 = 32 bytes. */
    if (g->n_tensors > left(c) / 32)
        return LM_FAIL(err, LM_E_INPUT, "%s: truncated or corrupt file: tensor count %" PRIu64
                       " cannot fit in the %"
                       PRIu64 " bytes left", g->path, g->n_tensors, left(c));
    size_t n = (size_t)g->n_tensors;
    g->tensors = calloc(n ? n : 1, sizeof *g->tensors);
    g->t_sorted = calloc(n ? n : 1, sizeof *g->t_sorted);
    extent *ex = calloc(n ? n : 1, sizeof *ex);
    if (g->tensors == NULL || g->t_sorted == NULL || ex == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "%s: out of memory for tensor infos", g->path);
        goto done;
    }
    for (size_t i = 0; i < n; ++i) {
        if ((rc = parse_tensor_info(g, c, &g->tensors[i], &ex[i].off)))
            goto done;
        ex[i].ix = i;
        ex[i].end = 0;
        g->t_sorted[i].name = g->tensors[i].name;
        g->t_sorted[i].ix = i;
    }
    qsort(g->t_sorted, n, sizeof *g->t_sorted, cmp_name_ix);
    for (size_t i = 1; i < n; ++i)
        if (strcmp(g->t_sorted[i - 1].name, g->t_sorted[i].name) == 0) {
            rc = LM_FAIL(err, LM_E_INPUT, "%s: duplicate tensor name '%s'", g->path,
                         g->t_sorted[i].name);
            goto done;
        }
    /* The data section starts after the infos, at the next multiple of the alignment. With
     * no tensors the file may end before that padding. */
    uint64_t pad = (g->alignment - c->pos % g->alignment) % g->alignment, start;
    if (lm_add_u64(&start, c->pos, pad)) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: data section offset overflows", g->path);
        goto done;
    }
    g->data_offset = start;
    if (n == 0)
        goto done;
    if (start > g->size) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: truncated file: the data section would start at "
                     "offset %" PRIu64 " but the file has %" PRIu64 " bytes", g->path, start,
                     g->size);
        goto done;
    }
    uint64_t data_size = g->size - start;
    for (size_t i = 0; i < n; ++i) {
        lm_gguf_tensor *t = &g->tensors[i];
        if (lm_add_u64(&ex[i].end, ex[i].off, t->nbytes) || ex[i].end > data_size) {
            rc = LM_FAIL(err, LM_E_INPUT, "%s: tensor '%s' (offset %" PRIu64 ", %" PRIu64
                         " bytes) extends past the end of the file (the data section holds %"
                         PRIu64 " bytes)", g->path, t->name, ex[i].off, t->nbytes, data_size);
            goto done;
        }
        t->data = g->bytes + start + ex[i].off;
    }
    qsort(ex, n, sizeof *ex, cmp_extent);
    for (size_t i = 1; i < n; ++i)
        if (ex[i].off < ex[i - 1].end) {
            rc = LM_FAIL(err, LM_E_INPUT, "%s: tensors '%s' and '%s' overlap in the data "
                         "section", g->path, g->tensors[ex[i - 1].ix].name,
                         g->tensors[ex[i].ix].name);
            goto done;
        }
done:
    free(ex);
    return rc;
}

static int parse_kvs(lm_gguf *g, cur *c)
{
    lm_err *err = c->err;
    int rc;
    /* A key/value takes at least 8 (key length) + 4 (type) + 1 (smallest value) bytes. */
    if (g->n_kv > left(c) / 13)
        return LM_FAIL(err, LM_E_INPUT, "%s: truncated or corrupt file: metadata count %"
                       PRIu64 " cannot fit in the %"
                       PRIu64 " bytes left", g->path, g->n_kv, left(c));
    size_t n = (size_t)g->n_kv;
    g->kvs = calloc(n ? n : 1, sizeof *g->kvs);
    g->kv_sorted = calloc(n ? n : 1, sizeof *g->kv_sorted);
    if (g->kvs == NULL || g->kv_sorted == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory for metadata", g->path);
    for (size_t i = 0; i < n; ++i) {
        kv *k = &g->kvs[i];
        uint32_t type;
        if ((rc = rd_name(c, &k->key, "metadata key")))
            return rc;
        if ((rc = rd_u32(c, &type, "metadata value type")))
            return rc;
        if (type > LM_GGUF_F64)
            return LM_FAIL(err, LM_E_INPUT, "%s: key '%s' has unknown value type %" PRIu32,
                           g->path, k->key, type);
        k->type = (lm_gguf_vtype)type;
        if ((rc = rd_value(c, k)))
            return rc;
        g->kv_sorted[i].name = k->key;
        g->kv_sorted[i].ix = i;
    }
    qsort(g->kv_sorted, n, sizeof *g->kv_sorted, cmp_name_ix);
    for (size_t i = 1; i < n; ++i)
        if (strcmp(g->kv_sorted[i - 1].name, g->kv_sorted[i].name) == 0)
            return LM_FAIL(err, LM_E_INPUT, "%s: duplicate metadata key '%s'", g->path,
                           g->kv_sorted[i].name);
    return LM_OK;
}

static int parse(lm_gguf *g, lm_err *err)
{
    cur c = {g->bytes, g->size, 0, g->path, err};
    int rc;
    if (g->size == 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: empty file (not a GGUF model)", g->path);
    if (g->size < 4 || memcmp(g->bytes, "GGUF", 4) != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: not a GGUF file (bad magic)", g->path);
    c.pos = 4;
    if ((rc = rd_u32(&c, &g->version, "header version")))
        return rc;
    if (g->version == 1)
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: GGUF version 1 is not supported (only "
                       "v2 and v3; re-convert the model with a current llama.cpp)", g->path);
    if (g->version != 2 && g->version != 3) {
        if ((g->version & 0xffffu) == 0)
            return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: big-endian GGUF files are not "
                           "supported (version field 0x%08" PRIx32 ")", g->path, g->version);
        return LM_FAIL(err, LM_E_UNSUPPORTED, "%s: unsupported GGUF version %" PRIu32
                       " (only v2 and v3)", g->path, g->version);
    }
    if ((rc = rd_u64(&c, &g->n_tensors, "header tensor count"))
        || (rc = rd_u64(&c, &g->n_kv, "header metadata count")))
        return rc;
    if ((rc = parse_kvs(g, &c)))
        return rc;
    uint32_t align;
    if ((rc = lm_gguf_get_u32(g, "general.alignment", GGUF_DEFAULT_ALIGNMENT, &align, err)))
        return rc;
    if (align == 0 || (align & (align - 1)) != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: general.alignment = %" PRIu32 " is not a nonzero "
                       "power of two", g->path, align);
    g->alignment = align;
    return parse_tensors(g, &c);
}

static int create(lm_gguf **out, const char *path, lm_err *err)
{
    *out = calloc(1, sizeof **out);
    if (*out == NULL || ((*out)->path = strdup(path)) == NULL) {
        free(*out);
        *out = NULL;
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    }
    return LM_OK;
}

int lm_gguf_open_memory(lm_gguf **out, const char *name, const void *bytes, uint64_t size,
                        lm_err *err)
{
    *out = NULL;
    lm_gguf *g;
    int rc = create(&g, name, err);
    if (rc)
        return rc;
    g->bytes = bytes;
    g->size = size;
    if ((rc = parse(g, err))) {
        lm_gguf_close(g);
        return rc;
    }
    *out = g;
    return LM_OK;
}

int lm_gguf_open(lm_gguf **out, const char *path, lm_err *err)
{
    *out = NULL;
    /* fs.h: O_NONBLOCK open (a FIFO never blocks), then the regular-file check */
    unsigned long long size = 0;
    int fd = lm_open_regular(path, &size, err);
    if (fd < 0)
        return fd;
    lm_gguf *g;
    int rc = create(&g, path, err);
    if (rc) {
        close(fd);
        return rc;
    }
    g->size = (uint64_t)size;
    if (g->size > 0) {
        void *m = mmap(NULL, (size_t)g->size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            int e = errno;
            close(fd);
            lm_gguf_close(g);
            return LM_FAIL(err, LM_E_IO, "%s: cannot map: %s", path, strerror(e));
        }
        g->map = m;
        g->bytes = m;
    }
    close(fd); /* the mapping stays valid */
    if ((rc = parse(g, err))) {
        lm_gguf_close(g);
        return rc;
    }
    *out = g;
    return LM_OK;
}

void lm_gguf_close(lm_gguf *g)
{
    if (g == NULL)
        return;
    if (g->kvs != NULL)
        for (uint64_t i = 0; i < g->n_kv; ++i) {
            free(g->kvs[i].key);
            free(g->kvs[i].owned);
        }
    if (g->tensors != NULL)
        for (uint64_t i = 0; i < g->n_tensors; ++i)
            free((char *)g->tensors[i].name);
    free(g->kvs);
    free(g->kv_sorted);
    free(g->tensors);
    free(g->t_sorted);
    if (g->map != NULL)
        munmap(g->map, (size_t)g->size);
    free(g->path);
    free(g);
}

/* ---------------------------------------------------------------- accessors */

const char *lm_gguf_path(const lm_gguf *g) { return g->path; }
uint32_t lm_gguf_version(const lm_gguf *g) { return g->version; }
const void *lm_gguf_bytes(const lm_gguf *g) { return g->bytes; }
uint64_t lm_gguf_size(const lm_gguf *g) { return g->size; }

const void *lm_gguf_keep_map(lm_gguf *g, uint64_t *bytes)
{
    const void *m = g->map;
    *bytes = m != NULL ? g->size : 0;
    g->map = NULL; /* lm_gguf_close leaves it mapped */
    return m;
}
uint64_t lm_gguf_n_kv(const lm_gguf *g) { return g->n_kv; }
uint64_t lm_gguf_n_tensors(const lm_gguf *g) { return g->n_tensors; }

const char *lm_gguf_key(const lm_gguf *g, uint64_t i)
{
    return i < g->n_kv ? g->kvs[i].key : NULL;
}

lm_gguf_vtype lm_gguf_kv_type(const lm_gguf *g, uint64_t i)
{
    return i < g->n_kv ? g->kvs[i].type : (lm_gguf_vtype)-1;
}

int64_t lm_gguf_find(const lm_gguf *g, const char *key)
{
    const name_ix *e = lookup(g->kv_sorted, g->n_kv, key);
    return e ? (int64_t)e->ix : -1;
}

const lm_gguf_tensor *lm_gguf_tensor_at(const lm_gguf *g, uint64_t i)
{
    return i < g->n_tensors ? &g->tensors[i] : NULL;
}

const lm_gguf_tensor *lm_gguf_tensor_find(const lm_gguf *g, const char *name)
{
    const name_ix *e = lookup(g->t_sorted, g->n_tensors, name);
    return e ? &g->tensors[e->ix] : NULL;
}

/* ---------------------------------------------------------------- typed getters */

static const kv *find_kv(const lm_gguf *g, const char *key)
{
    int64_t i = lm_gguf_find(g, key);
    return i < 0 ? NULL : &g->kvs[i];
}

static bool is_unsigned(lm_gguf_vtype t)
{
    return t == LM_GGUF_U8 || t == LM_GGUF_U16 || t == LM_GGUF_U32 || t == LM_GGUF_U64
        || t == LM_GGUF_BOOL;
}

static bool is_signed(lm_gguf_vtype t)
{
    return t == LM_GGUF_I8 || t == LM_GGUF_I16 || t == LM_GGUF_I32 || t == LM_GGUF_I64;
}

/* An integer value as (in range of int64 or not, value): fails for non-integer types. */
static int int_value(const lm_gguf *g, const kv *k, int64_t lo, uint64_t hi, int64_t *out,
                     lm_err *err)
{
    if (is_unsigned(k->type)) {
        if (k->num.u > hi)
            return LM_FAIL(err, LM_E_INPUT, "%s: key '%s': value %" PRIu64 " is out of range",
                           g->path, k->key, k->num.u);
        *out = (int64_t)k->num.u;
        return LM_OK;
    }
    if (is_signed(k->type)) {
        if (k->num.i < lo || (k->num.i > 0 && (uint64_t)k->num.i > hi))
            return LM_FAIL(err, LM_E_INPUT, "%s: key '%s': value %" PRId64 " is out of range",
                           g->path, k->key, k->num.i);
        *out = k->num.i;
        return LM_OK;
    }
    return LM_FAIL(err, LM_E_INPUT, "%s: key '%s' has type %s, expected an integer", g->path,
                   k->key, vtype_name(k->type));
}

int lm_gguf_get_u32(const lm_gguf *g, const char *key, uint32_t def, uint32_t *out, lm_err *err)
{
    const kv *k = find_kv(g, key);
    int64_t v;
    if (k == NULL) {
        *out = def;
        return LM_OK;
    }
    int rc = int_value(g, k, 0, UINT32_MAX, &v, err);
    if (rc == LM_OK)
        *out = (uint32_t)v;
    return rc;
}

int lm_gguf_get_i32(const lm_gguf *g, const char *key, int32_t def, int32_t *out, lm_err *err)
{
    const kv *k = find_kv(g, key);
    int64_t v;
    if (k == NULL) {
        *out = def;
        return LM_OK;
    }
    int rc = int_value(g, k, INT32_MIN, INT32_MAX, &v, err);
    if (rc == LM_OK)
        *out = (int32_t)v;
    return rc;
}

int lm_gguf_get_f32(const lm_gguf *g, const char *key, float def, float *out, lm_err *err)
{
    const kv *k = find_kv(g, key);
    if (k == NULL) {
        *out = def;
        return LM_OK;
    }
    if (k->type != LM_GGUF_F32 && k->type != LM_GGUF_F64)
        return LM_FAIL(err, LM_E_INPUT, "%s: key '%s' has type %s, expected f32 or f64",
                       g->path, k->key, vtype_name(k->type));
    if (isfinite(k->num.f) && fabs(k->num.f) > (double)FLT_MAX)
        return LM_FAIL(err, LM_E_INPUT, "%s: key '%s': value %g does not fit in a float32",
                       g->path, k->key, k->num.f);
    *out = (float)k->num.f;
    return LM_OK;
}

int lm_gguf_get_bool(const lm_gguf *g, const char *key, bool def, bool *out, lm_err *err)
{
    const kv *k = find_kv(g, key);
    int64_t v;
    if (k == NULL) {
        *out = def;
        return LM_OK;
    }
    int rc = int_value(g, k, 0, 1, &v, err);
    if (rc == LM_OK)
        *out = v != 0;
    return rc;
}

int lm_gguf_get_str(const lm_gguf *g, const char *key, const char *def, const char **out,
                    lm_err *err)
{
    const kv *k = find_kv(g, key);
    if (k == NULL) {
        *out = def;
        return LM_OK;
    }
    if (k->type != LM_GGUF_STR)
        return LM_FAIL(err, LM_E_INPUT, "%s: key '%s' has type %s, expected string", g->path,
                       k->key, vtype_name(k->type));
    *out = k->str.ptr;
    return LM_OK;
}

int lm_gguf_get_arr(const lm_gguf *g, const char *key, int elem_type, const lm_gguf_arr **out,
                    lm_err *err)
{
    const kv *k = find_kv(g, key);
    *out = NULL;
    if (k == NULL)
        return LM_OK;
    if (k->type != LM_GGUF_ARR)
        return LM_FAIL(err, LM_E_INPUT, "%s: key '%s' has type %s, expected an array", g->path,
                       k->key, vtype_name(k->type));
    if (elem_type >= 0 && (int)k->arr.type != elem_type)
        return LM_FAIL(err, LM_E_INPUT, "%s: key '%s' is an array of %s, expected %s", g->path,
                       k->key, vtype_name(k->arr.type), vtype_name((lm_gguf_vtype)elem_type));
    *out = &k->arr;
    return LM_OK;
}
