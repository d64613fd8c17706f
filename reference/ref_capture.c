/* ref_capture.c — the reference capture: rounding MPFR results to float64, the binary capture
 * file (layout in kvd_ref.h and reference/FORMAT.md) and the NumPy .npy writer. */
#include "kvd_ref.h"
#include "kvd_util.h"

#include "fs.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#define HEADER_BYTES 72u

int ref_capture_check_finite(const ref_capture *ref, const char *model, lm_err *err)
{
    for (uint32_t i = 0; i < ref->n_pos; ++i) {
        const double *x = ref_capture_logits(ref, i);
        for (uint32_t v = 0; v < ref->n_vocab; ++v)
            if (!isfinite(x[v]))
                return LM_FAIL(err, LM_E_INPUT, "%s: the MPFR reference's logits at position %u "
                               "are %s (token %u): the model file holds a NaN or Inf weight",
                               model, (unsigned)ref->pos[i], isnan(x[v]) ? "NaN" : "infinite",
                               (unsigned)v);
    }
    return LM_OK;
}

void ref_capture_free(ref_capture *c)
{
    if (c == NULL)
        return;
    free(c->tokens);
    free(c->pos);
    free(c->k);
    free(c->v);
    free(c->hidden);
    free(c->logits);
    memset(c, 0, sizeof *c);
}

static uint64_t layer_elems(const ref_capture *c)
{
    return (uint64_t)c->n_prompt * c->n_kv_head * c->head_dim;
}

const double *ref_capture_k(const ref_capture *c, uint32_t layer)
{
    return c->k + layer * layer_elems(c);
}

const double *ref_capture_v(const ref_capture *c, uint32_t layer)
{
    return c->v + layer * layer_elems(c);
}

static uint64_t hidden_elems(const ref_capture *c)
{
    return (uint64_t)c->n_prompt * c->n_embd;
}

const double *ref_capture_hidden(const ref_capture *c, uint32_t i)
{
    return c->hidden + i * hidden_elems(c);
}

const double *ref_capture_logits(const ref_capture *c, uint32_t i)
{
    return c->logits + (uint64_t)i * c->n_vocab;
}

int64_t ref_capture_find_pos(const ref_capture *c, uint32_t p)
{
    return lm_index_of_u32(c->pos, c->n_pos, p);
}

int ref_result_to_capture(ref_capture *out, const ref_result *r, const ref_model *m,
                          const ref_request *rq, lm_err *err)
{
    memset(out, 0, sizeof *out);
    out->version = REF_VERSION;
    out->prec = r->prec;
    memcpy(out->model_hash, m->content_hash, 16);
    out->n_tokens = rq->n_tokens;
    out->n_prompt = r->n_prompt;
    out->n_layer = r->n_layer;
    out->n_kv_head = r->n_kv_head;
    out->head_dim = r->head_dim;
    out->n_vocab = r->n_vocab;
    out->n_pos = r->n_pos;
    out->n_embd = r->n_embd;
    uint64_t kv = (uint64_t)r->n_layer * layer_elems(out), nl = (uint64_t)r->n_pos * r->n_vocab;
    uint64_t nh = (r->n_layer + 1ull) * hidden_elems(out);
    out->tokens = malloc(rq->n_tokens * sizeof *out->tokens);
    out->pos = malloc(r->n_pos * sizeof *out->pos);
    out->k = malloc((kv ? kv : 1) * sizeof(double));
    out->v = malloc((kv ? kv : 1) * sizeof(double));
    out->hidden = malloc((nh ? nh : 1) * sizeof(double));
    out->logits = malloc((nl ? nl : 1) * sizeof(double));
    if (!out->tokens || !out->pos || !out->k || !out->v || !out->hidden || !out->logits) {
        ref_capture_free(out);
        return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory for the capture");
    }
    memcpy(out->tokens, rq->tokens, rq->n_tokens * sizeof *out->tokens);
    memcpy(out->pos, r->pos, r->n_pos * sizeof *out->pos);
    for (uint64_t i = 0; i < kv; ++i) {
        out->k[i] = mpfr_get_d(r->k[i], MPFR_RNDN);
        out->v[i] = mpfr_get_d(r->v[i], MPFR_RNDN);
    }
    for (uint64_t i = 0; i < nh; ++i)
        out->hidden[i] = mpfr_get_d(r->hidden[i], MPFR_RNDN);
    for (uint64_t i = 0; i < nl; ++i)
        out->logits[i] = mpfr_get_d(r->logits[i], MPFR_RNDN);
    return LM_OK;
}

/* --- little-endian byte helpers (the format is little-endian on every host) --- */

static void put_u32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; ++i)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put_f64(uint8_t *p, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    for (int i = 0; i < 8; ++i)
        p[i] = (uint8_t)(u >> (8 * i));
}

static double get_f64(const uint8_t *p)
{
    uint64_t u = 0;
    for (int i = 0; i < 8; ++i)
        u |= (uint64_t)p[i] << (8 * i);
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static uint64_t padded8(uint64_t x)
{
    return (x + 7) & ~(uint64_t)7;
}

/* bytes[n] as a staged write of path. */
static int stage_bytes(lm_wfile **out, const char *path, const void *bytes, size_t n, lm_err *err)
{
    *out = NULL;
    lm_wfile *w;
    int st = lm_wfile_open(&w, path, err);
    if (st == LM_OK && (st = lm_wfile_write(w, bytes, n, err)) == LM_OK &&
        (st = lm_wfile_stage(w, err)) == LM_OK) {
        *out = w;
        return LM_OK;
    }
    if (st != LM_OK && w != NULL)
        lm_wfile_abort(w);
    return st;
}

int ref_capture_write(const ref_capture *c, const char *path, lm_err *err)
{
    lm_wfile *w;
    int st = ref_capture_stage(&w, c, path, err);
    return st == LM_OK ? lm_wfile_commit(w, err) : st;
}

int ref_capture_stage(lm_wfile **out, const ref_capture *c, const char *path, lm_err *err)
{
    *out = NULL;
    uint64_t kv = (uint64_t)c->n_layer * layer_elems(c), nl = (uint64_t)c->n_pos * c->n_vocab;
    uint64_t nh = (c->n_layer + 1ull) * hidden_elems(c);
    uint64_t head = padded8(HEADER_BYTES + 4ull * c->n_tokens + 4ull * c->n_pos);
    uint64_t size = head + 8 * (2 * kv + nh + nl) + 16;
    uint8_t *buf = calloc(1, (size_t)size);
    if (buf == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    memcpy(buf, REF_MAGIC, 8);
    put_u32(buf + 8, REF_FORMAT_VERSION);
    put_u32(buf + 12, c->prec);
    memcpy(buf + 16, c->model_hash, 16);
    const uint32_t f[8] = {c->n_tokens, c->n_prompt, c->n_layer, c->n_kv_head,
                           c->head_dim, c->n_vocab,  c->n_pos,   c->version};
    for (int i = 0; i < 8; ++i)
        put_u32(buf + 32 + 4 * i, f[i]);
    put_u32(buf + 64, c->n_embd);
    uint8_t *p = buf + HEADER_BYTES;
    for (uint32_t i = 0; i < c->n_tokens; ++i, p += 4)
        put_u32(p, (uint32_t)c->tokens[i]);
    for (uint32_t i = 0; i < c->n_pos; ++i, p += 4)
        put_u32(p, c->pos[i]);
    p = buf + head;
    for (uint32_t l = 0; l < c->n_layer; ++l) {
        const double *k = ref_capture_k(c, l), *v = ref_capture_v(c, l);
        for (uint64_t i = 0; i < layer_elems(c); ++i, p += 8)
            put_f64(p, k[i]);
        for (uint64_t i = 0; i < layer_elems(c); ++i, p += 8)
            put_f64(p, v[i]);
    }
    for (uint64_t i = 0; i < nh; ++i, p += 8)
        put_f64(p, c->hidden[i]);
    for (uint64_t i = 0; i < nl; ++i, p += 8)
        put_f64(p, c->logits[i]);
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits(buf, (size_t)(size - 16)));
    memcpy(p, canon.digest, 16);
    int st = stage_bytes(out, path, buf, (size_t)size, err);
    free(buf);
    return st;
}

int ref_capture_read(ref_capture *out, const char *path, lm_err *err)
{
    memset(out, 0, sizeof *out);
    char *text;
    size_t size = 0;
    int st = lm_read_file(&text, &size, path, SIZE_MAX, err);
    if (st)
        return st;
    uint8_t *b = (uint8_t *)text;
    if (size < 8 || memcmp(b, REF_MAGIC, 8) != 0) {
        st = LM_FAIL(err, LM_E_INPUT, "%s: not a kvdrift reference capture (bad magic)", path);
        goto done;
    }
    if (size < HEADER_BYTES + 16) {
        st = LM_FAIL(err, LM_E_INPUT, "%s: truncated capture (%llu bytes)", path,
                     (unsigned long long)size);
        goto done;
    }
    if (get_u32(b + 8) != REF_FORMAT_VERSION) {
        st = LM_FAIL(err, LM_E_INPUT, "%s: unsupported capture format version %u", path,
                     get_u32(b + 8));
        goto done;
    }
    ref_capture c = {0};
    c.prec = get_u32(b + 12);
    memcpy(c.model_hash, b + 16, 16);
    c.n_tokens = get_u32(b + 32);
    c.n_prompt = get_u32(b + 36);
    c.n_layer = get_u32(b + 40);
    c.n_kv_head = get_u32(b + 44);
    c.head_dim = get_u32(b + 48);
    c.n_vocab = get_u32(b + 52);
    c.n_pos = get_u32(b + 56);
    c.version = get_u32(b + 60);
    c.n_embd = get_u32(b + 64);
    /* expected size, overflow-checked: every count is < 2^32, so 64-bit products of two are
     * safe; the four-way K/V and three-way hidden products are checked */
    uint64_t per, kv, hper, hid, nl, total,
        head = padded8(HEADER_BYTES + 4ull * c.n_tokens + 4ull * c.n_pos);
    hper = (uint64_t)c.n_prompt * c.n_embd;
    if (lm_mul_u64(&per, (uint64_t)c.n_prompt * c.n_kv_head, c.head_dim) ||
        lm_mul_u64(&kv, per, c.n_layer) || lm_mul_u64(&kv, kv, 16) ||
        lm_mul_u64(&hid, hper, c.n_layer + 1ull) || lm_mul_u64(&hid, hid, 8) ||
        lm_mul_u64(&nl, (uint64_t)c.n_pos * c.n_vocab, 8) || lm_add_u64(&total, head, kv) ||
        lm_add_u64(&total, total, hid) || lm_add_u64(&total, total, nl) ||
        lm_add_u64(&total, total, 16)) {
        st = LM_FAIL(err, LM_E_INPUT, "%s: corrupt capture header (sizes overflow)", path);
        goto done;
    }
    if (size != total) {
        st = LM_FAIL(err, LM_E_INPUT, "%s: %s capture (%llu bytes, header implies %llu)", path,
                     size < total ? "truncated" : "oversized", (unsigned long long)size,
                     (unsigned long long)total);
        goto done;
    }
    XXH128_canonical_t canon;
    XXH128_canonicalFromHash(&canon, XXH3_128bits(b, (size_t)(size - 16)));
    if (memcmp(canon.digest, b + size - 16, 16) != 0) {
        st = LM_FAIL(err, LM_E_INPUT, "%s: capture hash mismatch (corrupt file)", path);
        goto done;
    }
    if (c.n_tokens == 0 || c.n_prompt == 0 || c.n_prompt > c.n_tokens || c.n_layer == 0 ||
        c.n_kv_head == 0 || c.head_dim == 0 || c.n_vocab == 0 || c.n_pos == 0 || c.n_embd == 0 ||
        get_u32(b + 68) != 0 || c.prec < REF_MIN_PREC ||
        c.prec > REF_MAX_PREC) {
        st = LM_FAIL(err, LM_E_INPUT, "%s: inconsistent capture header", path);
        goto done;
    }
    uint64_t kvn = per * c.n_layer, nln = (uint64_t)c.n_pos * c.n_vocab, hn = hid / 8;
    c.tokens = malloc(c.n_tokens * sizeof *c.tokens);
    c.pos = malloc(c.n_pos * sizeof *c.pos);
    c.k = malloc((size_t)(kvn ? kvn : 1) * sizeof(double));
    c.v = malloc((size_t)(kvn ? kvn : 1) * sizeof(double));
    c.hidden = malloc((size_t)(hn ? hn : 1) * sizeof(double));
    c.logits = malloc((size_t)(nln ? nln : 1) * sizeof(double));
    if (!c.tokens || !c.pos || !c.k || !c.v || !c.hidden || !c.logits) {
        ref_capture_free(&c);
        st = LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
        goto done;
    }
    const uint8_t *p = b + HEADER_BYTES;
    for (uint32_t i = 0; i < c.n_tokens; ++i, p += 4)
        c.tokens[i] = (int32_t)get_u32(p);
    for (uint32_t i = 0; i < c.n_pos; ++i, p += 4) {
        c.pos[i] = get_u32(p);
        if (c.pos[i] >= c.n_tokens || (i && c.pos[i] <= c.pos[i - 1])) {
            ref_capture_free(&c);
            st = LM_FAIL(err, LM_E_INPUT, "%s: invalid logit position list", path);
            goto done;
        }
    }
    p = b + head;
    for (uint32_t l = 0; l < c.n_layer; ++l) {
        for (uint64_t i = 0; i < per; ++i, p += 8)
            c.k[l * per + i] = get_f64(p);
        for (uint64_t i = 0; i < per; ++i, p += 8)
            c.v[l * per + i] = get_f64(p);
    }
    for (uint64_t i = 0; i < hn; ++i, p += 8)
        c.hidden[i] = get_f64(p);
    for (uint64_t i = 0; i < nln; ++i, p += 8)
        c.logits[i] = get_f64(p);
    *out = c;
done:
    free(b);
    return st;
}

/* --- NumPy .npy (format 1.0) --- */

/* One float64 .npy of the given shape as a staged write of path. */
static int stage_npy(lm_wfile **out, const char *path, const double *data, uint32_t ndim,
                     const uint64_t *shape, lm_err *err)
{
    char hdr[256];
    char dims[160] = "";
    size_t dl = 0;
    uint64_t n = 1;
    for (uint32_t i = 0; i < ndim; ++i) {
        dl += (size_t)snprintf(dims + dl, sizeof dims - dl, "%llu,%s",
                               (unsigned long long)shape[i], (i + 1 < ndim) ? " " : "");
        n *= shape[i];
    }
    if (ndim > 1)
        dims[dl - 1] = '\0'; /* "(a, b)" but "(a,)" for one dimension */
    int hl = snprintf(hdr, sizeof hdr, "{'descr': '<f8', 'fortran_order': False, 'shape': (%s), }",
                      dims);
    /* magic(6) + version(2) + header length(2) + header, padded with spaces and '\n' to 64 */
    size_t total_hdr = (10 + (size_t)hl + 1 + 63) / 64 * 64;
    size_t pad = total_hdr - 10 - (size_t)hl;
    size_t size = total_hdr + (size_t)n * 8;
    uint8_t *buf = malloc(size);
    *out = NULL;
    if (buf == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path);
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (uint8_t)((total_hdr - 10) & 0xff);
    buf[9] = (uint8_t)((total_hdr - 10) >> 8);
    memcpy(buf + 10, hdr, (size_t)hl);
    memset(buf + 10 + hl, ' ', pad - 1);
    buf[total_hdr - 1] = '\n';
    for (uint64_t i = 0; i < n; ++i)
        put_f64(buf + total_hdr + 8 * i, data[i]);
    int st = stage_bytes(out, path, buf, size, err);
    free(buf);
    return st;
}

int ref_npy_write(const char *path, const double *data, uint32_t ndim, const uint64_t *shape,
                  lm_err *err)
{
    lm_wfile *w;
    int st = stage_npy(&w, path, data, ndim, shape, err);
    return st == LM_OK ? lm_wfile_commit(w, err) : st;
}

int ref_capture_stage_npy(lm_wfile **out, const ref_capture *c, const char *dir, lm_err *err)
{
    const uint32_t n_files = 1 + 2 * c->n_layer;
    for (uint32_t i = 0; i < n_files; ++i)
        out[i] = NULL;
    int st = lm_mkdir_p(dir, err);
    if (st != LM_OK)
        return st;
    size_t cap = strlen(dir) + 32;
    char *p = malloc(cap);
    if (p == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", dir);
    uint64_t lshape[2] = {c->n_pos, c->n_vocab};
    uint64_t kshape[3] = {c->n_prompt, c->n_kv_head, c->head_dim};
    snprintf(p, cap, "%s/logits.npy", dir);
    st = stage_npy(&out[0], p, c->logits, 2, lshape, err);
    for (uint32_t l = 0; st == LM_OK && l < c->n_layer; ++l) {
        snprintf(p, cap, "%s/layer%02u_k.npy", dir, l);
        st = stage_npy(&out[1 + 2 * l], p, ref_capture_k(c, l), 3, kshape, err);
        if (st == LM_OK) {
            snprintf(p, cap, "%s/layer%02u_v.npy", dir, l);
            st = stage_npy(&out[2 + 2 * l], p, ref_capture_v(c, l), 3, kshape, err);
        }
    }
    free(p);
    if (st != LM_OK)
        for (uint32_t i = 0; i < n_files; ++i) {
            lm_wfile_abort(out[i]);
            out[i] = NULL;
        }
    return st;
}

int ref_capture_write_npy(const ref_capture *c, const char *dir, lm_err *err)
{
    lm_wfile **w = calloc(1 + 2 * (size_t)c->n_layer, sizeof *w);
    if (w == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", dir);
    int st = ref_capture_stage_npy(w, c, dir, err);
    if (st == LM_OK)
        st = lm_wfile_commit_all(w, 1 + 2 * (size_t)c->n_layer, err);
    free(w);
    return st;
}
