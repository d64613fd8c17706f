/* npy.c — strict .npy header parser and element access (the contract is in npy.h). */
#include "npy.h"

#include <math.h>
#include <stdbool.h>
#include <string.h>

static const char *const dtype_names[] = {"float32", "float16", "float64", "bfloat16"};
static const char *const descrs[] = {"<f4", "<f2", "<f8", "<u2"};
static const unsigned itemsize[] = {4, 2, 8, 2};

const char *hx_npy_dtype_name(hx_npy_dtype t)
{
    return (unsigned)t < 4 ? dtype_names[t] : "?";
}

typedef struct cur {
    const char *p, *end;
} cur;

static void skip_ws(cur *c)
{
    while (c->p < c->end && *c->p == ' ')
        ++c->p;
}

static bool eat(cur *c, char ch)
{
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        ++c->p;
        return true;
    }
    return false;
}

/* A quoted string ('...' or "...") of printable ASCII without backslashes into out[cap]. */
static bool read_str(cur *c, char *out, size_t cap)
{
    skip_ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return false;
    char q = *c->p++;
    size_t n = 0;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || *c->p < 0x20 || *c->p > 0x7e || n + 1 >= cap)
            return false;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return false;
    ++c->p;
    out[n] = '\0';
    return true;
}

/* A decimal integer < 2^40 without sign or leading zeros. */
static bool read_dim(cur *c, uint64_t *v)
{
    skip_ws(c);
    const char *s = c->p;
    uint64_t x = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
        x = x * 10 + (uint64_t)(*c->p - '0');
        if (x >= (UINT64_C(1) << 40))
            return false;
        ++c->p;
    }
    size_t len = (size_t)(c->p - s);
    if (len == 0 || (len > 1 && *s == '0'))
        return false;
    *v = x;
    return true;
}

static bool read_shape(cur *c, hx_npy *a)
{
    if (!eat(c, '('))
        return false;
    a->ndim = 0;
    for (;;) {
        if (a->ndim == HX_NPY_MAX_DIM || !read_dim(c, &a->shape[a->ndim]))
            return false;
        ++a->ndim;
        bool comma = eat(c, ',');
        if (eat(c, ')'))
            return a->ndim > 1 || comma; /* one dimension needs its comma: "(n,)" */
        if (!comma)
            return false;
    }
}

#define FAIL(...) LM_FAIL(err, LM_E_INPUT, __VA_ARGS__)

int hx_npy_parse(hx_npy *out, const void *buf, size_t n, const char *name, lm_err *err)
{
    const uint8_t *b = buf;
    memset(out, 0, sizeof *out);
    if (n < 10 || memcmp(b, "\x93NUMPY", 6) != 0)
        return FAIL("%s: not a .npy file (bad magic)", name);
    unsigned major = b[6], minor = b[7];
    if ((major < 1 || major > 3) || minor != 0)
        return FAIL("%s: .npy format version %u.%u (expected 1.0, 2.0 or 3.0)", name, major,
                    minor);
    size_t pre = major == 1 ? 10 : 12;
    if (n < pre)
        return FAIL("%s: truncated .npy preamble", name);
    uint64_t hlen = major == 1 ? (uint64_t)b[8] | (uint64_t)b[9] << 8
                               : (uint64_t)b[8] | (uint64_t)b[9] << 8 | (uint64_t)b[10] << 16 |
                                     (uint64_t)b[11] << 24;
    if (hlen > n - pre)
        return FAIL("%s: .npy header length %llu exceeds the file", name,
                    (unsigned long long)hlen);
    if ((pre + hlen) % 16 != 0)
        return FAIL("%s: .npy header not padded to a multiple of 16 bytes", name);
    const char *h = (const char *)b + pre;
    if (hlen == 0 || h[hlen - 1] != '\n')
        return FAIL("%s: .npy header does not end with a newline", name);
    cur c = {h, h + hlen - 1};
    bool seen[3] = {false, false, false};
    int dt = -1;
    if (!eat(&c, '{'))
        return FAIL("%s: .npy header is not a dict", name);
    for (;;) {
        if (eat(&c, '}'))
            break;
        char key[16], val[16];
        if (!read_str(&c, key, sizeof key) || !eat(&c, ':'))
            return FAIL("%s: .npy header: malformed key", name);
        int k = strcmp(key, "descr") == 0           ? 0
                : strcmp(key, "fortran_order") == 0 ? 1
                : strcmp(key, "shape") == 0         ? 2
                                                    : -1;
        if (k < 0)
            return FAIL("%s: .npy header: unknown key '%s'", name, key);
        if (seen[k])
            return FAIL("%s: .npy header: key '%s' given twice", name, key);
        seen[k] = true;
        if (k == 0) {
            if (!read_str(&c, val, sizeof val))
                return FAIL("%s: .npy header: descr is not a string", name);
            for (int i = 0; i < 4; ++i)
                if (strcmp(val, descrs[i]) == 0)
                    dt = i;
            if (dt < 0)
                return FAIL("%s: .npy dtype '%s' (expected '<f4', '<f2', '<f8' or '<u2' "
                            "bfloat16 bits, little-endian)", name, val);
        } else if (k == 1) {
            skip_ws(&c);
            if (c.end - c.p >= 5 && memcmp(c.p, "False", 5) == 0)
                c.p += 5;
            else if (c.end - c.p >= 4 && memcmp(c.p, "True", 4) == 0)
                return FAIL("%s: .npy array in Fortran order (expected C order)", name);
            else
                return FAIL("%s: .npy header: fortran_order is not False", name);
        } else if (!read_shape(&c, out)) {
            return FAIL("%s: .npy header: shape is not a tuple of 1..%d dimensions < 2^40",
                        name, HX_NPY_MAX_DIM);
        }
        if (!eat(&c, ',')) {
            if (!eat(&c, '}'))
                return FAIL("%s: .npy header: expected ',' or '}'", name);
            break;
        }
    }
    skip_ws(&c);
    if (c.p != c.end)
        return FAIL("%s: .npy header: unexpected text after the dict", name);
    if (!seen[0] || !seen[1] || !seen[2])
        return FAIL("%s: .npy header lacks '%s'", name,
                    !seen[0] ? "descr" : !seen[1] ? "fortran_order" : "shape");
    uint64_t ne = 1, bytes;
    for (uint32_t i = 0; i < out->ndim; ++i)
        if (lm_mul_u64(&ne, ne, out->shape[i]) != 0)
            return FAIL("%s: .npy shape too large", name);
    if (lm_mul_u64(&bytes, ne, itemsize[dt]) != 0)
        return FAIL("%s: .npy shape too large", name);
    size_t have = n - pre - (size_t)hlen;
    if (bytes != have)
        return FAIL("%s: .npy data is %zu bytes, the header says %llu", name, have,
                    (unsigned long long)bytes);
    out->dtype = (hx_npy_dtype)dt;
    out->n_elems = ne;
    out->data = b + pre + hlen;
    return LM_OK;
}

static uint64_t le(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    for (unsigned i = 0; i < n; ++i)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* IEEE binary16 bits to float32, exactly (subnormals, Inf and NaN included). */
static float half_to_float(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15), e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
    float v;
    if (e == 0)
        v = ldexpf((float)m, -24); /* subnormal (or zero): m * 2^-24, exact */
    else if (e == 31)
        v = m ? NAN : INFINITY;
    else
        v = ldexpf((float)(m | 0x400u), (int)e - 25); /* (1024 + m) * 2^(e - 25), exact */
    return sign ? -v : v;
}

float hx_npy_get_f32(const hx_npy *a, uint64_t i)
{
    const uint8_t *p = a->data + i * itemsize[a->dtype];
    switch (a->dtype) {
    case HX_NPY_F32: {
        uint32_t u = (uint32_t)le(p, 4);
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    case HX_NPY_F16:
        return half_to_float((uint16_t)le(p, 2));
    case HX_NPY_F64: {
        uint64_t u = le(p, 8);
        double d;
        memcpy(&d, &u, 8);
        return (float)d;
    }
    default: {
        uint32_t u = (uint32_t)le(p, 2) << 16;
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    }
}
