/* envelope.c — the measured noise envelope: per-tensor statistic, cache key, file format. */
#include "judge/envelope.h"
#include "kvd_util.h"

#include "fs.h"
#include "model/capture.h"
#include "judge/compare.h"
#include "model/metrics.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#define XXH_STATIC_LINKING_ONLY /* XXH3_state_t on the stack */
#include <xxhash.h>

static const char magic[8] = {'K', 'V', 'D', 'E', 'N', 'V', 0, 0};

int hx_envelope_create(hx_envelope **out, uint32_t n_layer, uint32_t n_pos,
                       const uint32_t *positions, double safety, lm_err *err)
{
    *out = NULL;
    if (!(safety >= 1.0) || isinf(safety))
        return LM_FAIL(err, LM_E_INPUT, "envelope: safety factor %g must be finite and >= 1",
                       safety);
    hx_envelope *e = calloc(1, sizeof *e);
    if (e == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "envelope: out of memory");
    e->safety = safety;
    e->n_layer = n_layer;
    e->n_pos = n_pos;
    e->k = malloc((n_layer ? n_layer : 1) * sizeof *e->k);
    e->v = malloc((n_layer ? n_layer : 1) * sizeof *e->v);
    e->logits = malloc((n_pos ? n_pos : 1) * sizeof *e->logits);
    e->positions = calloc(n_pos ? n_pos : 1, sizeof *e->positions);
    if (!e->k || !e->v || !e->logits || !e->positions) {
        hx_envelope_free(e);
        return LM_FAIL(err, LM_E_NOMEM, "envelope: out of memory");
    }
    const hx_env_tensor unset = {(double)NAN, (double)NAN, (double)NAN, (double)NAN, (double)NAN,
                                 (double)NAN, (double)NAN};
    for (uint32_t l = 0; l < n_layer; ++l)
        e->k[l] = e->v[l] = unset;
    for (uint32_t p = 0; p < n_pos; ++p) {
        e->logits[p] = unset;
        e->positions[p] = positions ? positions[p] : p;
    }
    *out = e;
    return LM_OK;
}

int hx_envelope_add_hidden(hx_envelope *e, lm_err *err)
{
    const uint32_t n = e->n_layer + 1;
    hx_env_tensor *h = malloc(n * sizeof *h);
    if (h == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "envelope: out of memory");
    for (uint32_t i = 0; i < n; ++i)
        h[i] = (hx_env_tensor){(double)NAN, (double)NAN, (double)NAN, (double)NAN, (double)NAN,
                               (double)NAN, (double)NAN};
    free(e->hidden);
    e->hidden = h;
    e->n_hidden = n;
    return LM_OK;
}

void hx_envelope_free(hx_envelope *e)
{
    if (e == NULL)
        return;
    free(e->hidden);
    free(e->k);
    free(e->v);
    free(e->logits);
    free(e->positions);
    free(e);
}

/* Mean of member values at index i, in double, members summed in order 0..M-1. */
static double member_mean(const float *const *members, uint32_t n_members, size_t i)
{
    double mu = 0.0;
    for (uint32_t m = 0; m < n_members; ++m)
        mu += (double)members[m][i];
    return mu / (double)n_members;
}

/* The members' RMS deviation of the deciding difference x_t1 - x_t2 (R's top two tokens) from
 * R's, members in order (envelope.h); NaN when the row has fewer than two tokens. */
static double split_sd(const float *const *members, uint32_t n_members, const double *r, size_t n)
{
    int32_t top[2];
    if (hx_topk_f64(top, r, n, 2) < 2)
        return (double)NAN;
    const double d = r[top[0]] - r[top[1]];
    double ss = 0.0;
    for (uint32_t m = 0; m < n_members; ++m) {
        const double dev = ((double)members[m][top[0]] - (double)members[m][top[1]]) - d;
        ss += dev * dev;
    }
    return sqrt(ss / (double)n_members);
}

int hx_env_tensor_measure(hx_env_tensor *out, const float *const *members, uint32_t n_members,
                          const double *r, size_t n, bool is_logits, double safety, lm_err *err)
{
    if (n_members < HX_ENVELOPE_MIN_MEMBERS)
        return LM_FAIL(err, LM_E_INPUT, "envelope: %u ensemble members, at least %u needed",
                       (unsigned)n_members, HX_ENVELOPE_MIN_MEMBERS);
    for (size_t i = 0; i < n; ++i)
        if (!isfinite(r[i]))
            return LM_FAIL(err, LM_E_INPUT, "envelope: reference element %zu is not finite", i);
    int32_t top = is_logits ? hx_argmax_f64(r, n) : -1;
    if (is_logits && top < 0)
        return LM_FAIL(err, LM_E_INPUT, "envelope: empty logits row");
    /* R is finite here, so a NaN or Inf in a member is the engine's own doing, shared by every
     * member: nothing legitimate rounds that way. The tensor gets E = E_gap = 0 (only R itself
     * would pass) and bias = +Inf, so no configuration can hide behind it. */
    for (uint32_t m = 0; m < n_members; ++m)
        for (size_t i = 0; i < n; ++i)
            if (!isfinite(members[m][i])) {
                double g = is_logits ? 0.0 : (double)NAN;
                *out = (hx_env_tensor){.dev = 0.0, .e = 0.0, .gapdev = g, .e_gap = g,
                                       .sig_digits = 0.0, .bias = (double)INFINITY,
                                       .split_sd = (double)NAN};
                return LM_OK;
            }
    hx_env_tensor t = {0};
    t.gapdev = is_logits ? 0.0 : (double)NAN;
    /* The members' mean at R's top token (logits only). */
    double mu_top = is_logits ? member_mean(members, n_members, (size_t)top) : 0.0;
    /* Per element: the mean (members in order), then each member's deviation from it (two
     * passes, so sd is the two-pass sample standard deviation). */
    double sd_max = 0.0, mu_max = 0.0;
    for (size_t i = 0; i < n; ++i) {
        double mu = member_mean(members, n_members, i);
        double ss = 0.0;
        for (uint32_t m = 0; m < n_members; ++m) {
            double d = (double)members[m][i] - mu;
            ss += d * d;
            if (fabs(d) > t.dev)
                t.dev = fabs(d);
            /* (x_top - x_i) - mean(x_top - x_i) == (x_top - mu_top) - (x_i - mu_i), the mean
             * being linear (up to double rounding, far below float32 noise). */
            double g = is_logits ? ((double)members[m][top] - mu_top) - d : 0.0;
            if (fabs(g) > t.gapdev)
                t.gapdev = fabs(g);
        }
        if (fabs(mu - r[i]) > t.bias)
            t.bias = fabs(mu - r[i]);
        double sd = sqrt(ss / (double)(n_members - 1));
        if (sd > sd_max)
            sd_max = sd;
        if (fabs(mu) > mu_max)
            mu_max = fabs(mu);
    }
    t.sig_digits = hx_sig_digits(sd_max, mu_max);
    t.split_sd = is_logits ? split_sd(members, n_members, r, n) : (double)NAN;
    t.e = safety * t.dev;
    t.e_gap = is_logits ? safety * t.gapdev : (double)NAN;
    *out = t;
    return LM_OK;
}

bool hx_envelope_complete(const hx_envelope *e)
{
    for (uint32_t l = 0; l < e->n_layer; ++l)
        if (isnan(e->k[l].e) || isnan(e->v[l].e))
            return false;
    for (uint32_t p = 0; p < e->n_pos; ++p)
        if (isnan(e->logits[p].e) || isnan(e->logits[p].e_gap))
            return false;
    for (uint32_t i = 0; i < e->n_hidden; ++i)
        if (isnan(e->hidden[i].e))
            return false;
    return true;
}

/* --- file format: a growable little-endian byte buffer --- */
typedef struct buf {
    uint8_t *p;
    size_t n, cap;
    bool oom;
} buf;

static void put(buf *b, const void *src, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 256;
        while (cap < b->n + n)
            cap *= 2;
        uint8_t *np = realloc(b->p, cap);
        if (np == NULL) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, n);
    b->n += n;
}

static void put_u32(buf *b, uint32_t v)
{
    uint8_t le[4] = {(uint8_t)v, (uint8_t)(v >> 8), (uint8_t)(v >> 16), (uint8_t)(v >> 24)};
    put(b, le, 4);
}

static void put_f64(buf *b, double d)
{
    uint64_t u;
    memcpy(&u, &d, 8);
    put_u32(b, (uint32_t)u);
    put_u32(b, (uint32_t)(u >> 32));
}

static void put_tensor(buf *b, const hx_env_tensor *t)
{
    put_f64(b, t->dev);
    put_f64(b, t->e);
    put_f64(b, t->gapdev);
    put_f64(b, t->e_gap);
    put_f64(b, t->sig_digits);
    put_f64(b, t->bias);
    put_f64(b, t->split_sd);
}

int hx_envelope_save(const hx_envelope *e, const char *path, lm_err *err)
{
    buf b = {0};
    put(&b, magic, 8);
    put_u32(&b, HX_ENVELOPE_VERSION);
    put(&b, e->key, 16);
    put_f64(&b, e->safety);
    put_u32(&b, e->n_members);
    put_u32(&b, e->n_layer);
    put_u32(&b, e->n_pos);
    put_u32(&b, e->n_hidden);
    for (uint32_t p = 0; p < e->n_pos; ++p)
        put_u32(&b, e->positions[p]);
    for (uint32_t l = 0; l < e->n_layer; ++l)
        put_tensor(&b, &e->k[l]);
    for (uint32_t l = 0; l < e->n_layer; ++l)
        put_tensor(&b, &e->v[l]);
    for (uint32_t p = 0; p < e->n_pos; ++p)
        put_tensor(&b, &e->logits[p]);
    for (uint32_t i = 0; i < e->n_hidden; ++i)
        put_tensor(&b, &e->hidden[i]);
    if (!b.oom) {
        XXH128_canonical_t c;
        XXH128_canonicalFromHash(&c, XXH3_128bits(b.p, b.n));
        put(&b, c.digest, 16);
    }
    int rc = b.oom ? LM_FAIL(err, LM_E_NOMEM, "%s: out of memory", path)
                   : lm_write_file(path, b.p, b.n, err);
    free(b.p);
    return rc;
}

typedef struct rd {
    const uint8_t *p;
    size_t n, off;
    bool short_read;
} rd;

static const uint8_t *take(rd *r, size_t n)
{
    if (r->short_read || r->n - r->off < n) {
        r->short_read = true;
        return NULL;
    }
    const uint8_t *p = r->p + r->off;
    r->off += n;
    return p;
}

static uint32_t get_u32(rd *r)
{
    const uint8_t *p = take(r, 4);
    return p ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24
             : 0;
}

static double get_f64(rd *r)
{
    uint64_t lo = get_u32(r), hi = get_u32(r);
    uint64_t u = lo | hi << 32;
    double d;
    memcpy(&d, &u, 8);
    return d;
}

static void get_tensor(rd *r, hx_env_tensor *t)
{
    t->dev = get_f64(r);
    t->e = get_f64(r);
    t->gapdev = get_f64(r);
    t->e_gap = get_f64(r);
    t->sig_digits = get_f64(r);
    t->bias = get_f64(r);
    t->split_sd = get_f64(r);
}

int hx_envelope_load(hx_envelope **out, const char *path, const uint8_t expect_key[16],
                     lm_err *err)
{
    *out = NULL;
    char *data;
    size_t n;
    int rc = lm_read_file(&data, &n, path, SIZE_MAX, err);
    if (rc != LM_OK)
        return rc;
    rd r = {(const uint8_t *)data, n, 0, false};
    hx_envelope *e = NULL;
    const uint8_t *m = take(&r, 8);
    if (m == NULL || memcmp(m, magic, 8) != 0) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: not a kvdrift envelope file", path);
        goto done;
    }
    uint32_t version = get_u32(&r);
    if (!r.short_read && version != HX_ENVELOPE_VERSION) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: envelope format version %u, expected %u", path,
                     (unsigned)version, HX_ENVELOPE_VERSION);
        goto done;
    }
    /* the checksum first: nothing read from a damaged file is trusted */
    XXH128_canonical_t sum;
    if (n >= 16)
        XXH128_canonicalFromHash(&sum, XXH3_128bits(data, n - 16));
    if (r.short_read || n < r.off + 16 || memcmp(sum.digest, data + n - 16, 16) != 0) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: envelope checksum mismatch (corrupt or truncated "
                     "file)", path);
        goto done;
    }
    r.n = n - 16;
    const uint8_t *key = take(&r, 16);
    double safety = get_f64(&r);
    uint32_t n_members = get_u32(&r), n_layer = get_u32(&r), n_pos = get_u32(&r),
             n_hidden = get_u32(&r);
    if (!r.short_read && n_hidden != 0 && n_hidden != n_layer + 1ull) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: %u hidden states for %u layers", path,
                     (unsigned)n_hidden, (unsigned)n_layer);
        goto done;
    }
    /* Sizes must fit in what is left before anything is allocated from them. */
    uint64_t need = (uint64_t)n_pos * 4 + ((uint64_t)n_layer * 2 + n_pos + n_hidden) * 7 * 8;
    if (r.short_read || need > r.n - r.off) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: truncated envelope file", path);
        goto done;
    }
    if (need != r.n - r.off) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: %zu trailing bytes after the envelope", path,
                     (size_t)(r.n - r.off - need));
        goto done;
    }
    if (memcmp(key, expect_key, 16) != 0) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: envelope cache key does not match this model, "
                                      "tokens and precision (stale cache entry)", path);
        goto done;
    }
    rc = hx_envelope_create(&e, n_layer, n_pos, NULL, safety, err);
    if (rc != LM_OK) {
        rc = LM_FAIL(err, LM_E_INPUT, "%s: bad envelope header", path);
        goto done;
    }
    if (n_hidden > 0 && (rc = hx_envelope_add_hidden(e, err)) != LM_OK)
        goto done;
    memcpy(e->key, key, 16);
    e->n_members = n_members;
    for (uint32_t p = 0; p < n_pos; ++p)
        e->positions[p] = get_u32(&r);
    for (uint32_t l = 0; l < n_layer; ++l)
        get_tensor(&r, &e->k[l]);
    for (uint32_t l = 0; l < n_layer; ++l)
        get_tensor(&r, &e->v[l]);
    for (uint32_t p = 0; p < n_pos; ++p)
        get_tensor(&r, &e->logits[p]);
    for (uint32_t i = 0; i < n_hidden; ++i)
        get_tensor(&r, &e->hidden[i]);
    *out = e;
    e = NULL;
done:
    hx_envelope_free(e);
    free(data);
    return rc;
}

void hx_envelope_key(uint8_t out[16], const char ref_key_hex[33], uint32_t n_members,
                     uint64_t seed, double safety, const void *extra, uint32_t n_extra)
{
    XXH3_state_t st; /* on the stack: no allocation, so this cannot fail */
    XXH3_INITSTATE(&st);
    XXH3_128bits_reset(&st);
    XXH3_128bits_update(&st, "kvdrift-envelope-cache", 22);
    uint8_t le[8];
    uint64_t sb;
    memcpy(&sb, &safety, 8);
    const uint64_t fields[4] = {HX_ENVELOPE_VERSION, n_members, seed, sb};
    const int width[4] = {4, 4, 8, 8};
    for (int f = 0; f < 4; ++f) {
        for (int i = 0; i < width[f]; ++i)
            le[i] = (uint8_t)(fields[f] >> (8 * i));
        XXH3_128bits_update(&st, le, (size_t)width[f]);
        if (f == 0)
            XXH3_128bits_update(&st, ref_key_hex, 32);
    }
    for (int i = 0; i < 4; ++i)
        le[i] = (uint8_t)(n_extra >> (8 * i));
    XXH3_128bits_update(&st, le, 4);
    if (n_extra)
        XXH3_128bits_update(&st, extra, n_extra);
    XXH128_canonical_t can;
    XXH128_canonicalFromHash(&can, XXH3_128bits_digest(&st));
    memcpy(out, can.digest, 16);
}

int hx_envelope_cache_path(char *out, size_t cap, const char *dir, const uint8_t key[16],
                           lm_err *err)
{
    char hex[33];
    lm_hex_encode(hex, key, 16);
    int n = snprintf(out, cap, "%s/%s.kvdenv", dir, hex);
    if (n < 0 || (size_t)n >= cap)
        return LM_FAIL(err, LM_E_INPUT, "%s: cache folder name too long", dir);
    return LM_OK;
}

/* Whether every member holds every hidden state of ref's shape (and ref holds them). */
static bool all_hidden(const hx_capture *const *members, uint32_t n_members,
                       const ref_capture *ref)
{
    if (ref->hidden == NULL)
        return false;
    for (uint32_t m = 0; m < n_members; ++m) {
        if (members[m]->hidden == NULL || members[m]->n_embd != ref->n_embd)
            return false;
        for (uint32_t i = 0; i <= ref->n_layer; ++i)
            if (members[m]->hidden[i] == NULL)
                return false;
    }
    return true;
}

/* e's hidden states from the members' (ptr: [n_members] scratch). */
static int measure_hidden(hx_envelope *e, const float **ptr, const hx_capture *const *members,
                          uint32_t n_members, const ref_capture *ref, double safety, lm_err *err)
{
    int rc = hx_envelope_add_hidden(e, err);
    const size_t n = (size_t)ref->n_prompt * ref->n_embd;
    for (uint32_t i = 0; i <= ref->n_layer && rc == LM_OK; ++i) {
        for (uint32_t m = 0; m < n_members; ++m)
            ptr[m] = members[m]->hidden[i];
        rc = hx_env_tensor_measure(&e->hidden[i], ptr, n_members, ref_capture_hidden(ref, i), n,
                                   false, safety, err);
    }
    return rc;
}

int hx_envelope_from_ensemble(hx_envelope **out, const hx_capture *const *members,
                              uint32_t n_members, const ref_capture *ref, double safety,
                              lm_err *err)
{
    *out = NULL;
    if (n_members < HX_ENVELOPE_MIN_MEMBERS)
        return LM_FAIL(err, LM_E_INPUT, "envelope: %u ensemble members, at least %u needed",
                       (unsigned)n_members, HX_ENVELOPE_MIN_MEMBERS);
    for (uint32_t m = 0; m < n_members; ++m) {
        int rc = hx_compare_check_shape(&members[m]->shape, ref, "ensemble member", err);
        if (rc != LM_OK)
            return rc;
    }
    hx_envelope *e;
    int rc = hx_envelope_create(&e, ref->n_layer, ref->n_pos, ref->pos, safety, err);
    if (rc != LM_OK)
        return rc;
    e->n_members = n_members;
    const float **ptr = malloc(n_members * sizeof *ptr);
    if (ptr == NULL) {
        hx_envelope_free(e);
        return LM_FAIL(err, LM_E_NOMEM, "envelope: out of memory");
    }
    size_t kv = (size_t)ref->n_prompt * ref->n_kv_head * ref->head_dim;
    for (uint32_t l = 0; l < ref->n_layer && rc == LM_OK; ++l) {
        for (uint32_t m = 0; m < n_members; ++m)
            ptr[m] = members[m]->k[l];
        rc = hx_env_tensor_measure(&e->k[l], ptr, n_members, ref_capture_k(ref, l), kv, false, safety,
                                   err);
        for (uint32_t m = 0; m < n_members && rc == LM_OK; ++m)
            ptr[m] = members[m]->v[l];
        if (rc == LM_OK)
            rc = hx_env_tensor_measure(&e->v[l], ptr, n_members, ref_capture_v(ref, l), kv, false,
                                       safety, err);
    }
    size_t nv = ref->n_vocab;
    for (uint32_t i = 0; i < ref->n_pos && rc == LM_OK; ++i) {
        for (uint32_t m = 0; m < n_members && rc == LM_OK; ++m) {
            const float *row = hx_capture_logits_at(members[m], ref->pos[i]);
            if (row == NULL)
                rc = LM_FAIL(err, LM_E_INPUT, "envelope: member %u has no logits at position %u",
                             (unsigned)m, (unsigned)ref->pos[i]);
            else
                ptr[m] = row;
        }
        if (rc == LM_OK)
            rc = hx_env_tensor_measure(&e->logits[i], ptr, n_members, ref->logits + i * nv, nv,
                                       true, safety, err);
    }
    if (rc == LM_OK && all_hidden(members, n_members, ref))
        rc = measure_hidden(e, ptr, members, n_members, ref, safety, err);
    free(ptr);
    if (rc != LM_OK) {
        hx_envelope_free(e);
        return rc;
    }
    *out = e;
    return LM_OK;
}
