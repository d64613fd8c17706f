/* ref_group.c — a reference pass shared by the members of a group (ref_group.h): the ranges
 * they compute, the exchange of their MPFR values, and the agreement on statuses and results.
 *
 * An exchanged value is a record of 16 + 8 * ceil(prec / 64) bytes: the MPFR kind with its sign
 * (int64, mpfr_custom_get_kind), the exponent (int64, 0 unless regular) and the significand's
 * limbs (zeros unless regular), so that a value is rebuilt bit for bit. */
#include "ref_group.h"
#include "ref_dotx.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

static const ref_group *process_group;

void ref_group_set(const ref_group *g)
{
    process_group = g;
}

const ref_group *ref_group_get(void)
{
    return process_group;
}

void ref_group_range(const ref_group *g, int rank, uint64_t n, uint64_t *lo, uint64_t *hi)
{
    if (g == NULL || g->size <= 1) {
        *lo = 0;
        *hi = n;
        return;
    }
    const uint64_t units = (n + REF_DX_ROWS - 1) / REF_DX_ROWS, size = (uint64_t)g->size;
    const uint64_t a = units * (uint64_t)rank / size * REF_DX_ROWS,
                   b = units * ((uint64_t)rank + 1) / size * REF_DX_ROWS;
    *lo = a < n ? a : n;
    *hi = b < n ? b : n;
}

/* Each member's part of an exchange starts with its status (int64), the digest of the inputs
 * its values were computed from (16 bytes) and its message. */
enum { PART_HEAD = 256, MSG_AT = 24 };

static uint64_t rec_bytes(mpfr_prec_t prec)
{
    return 16 + sizeof(mp_limb_t) * (uint64_t)((prec + GMP_NUMB_BITS - 1) / GMP_NUMB_BITS);
}

int ref_group_buf_init(ref_group_buf *b, const ref_group *g, uint64_t n_values, mpfr_prec_t prec,
                       lm_err *err)
{
    memset(b, 0, sizeof *b);
    if (g == NULL || g->size <= 1)
        return LM_OK;
    b->cap = PART_HEAD * (uint64_t)g->size + n_values * rec_bytes(prec);
    b->p = malloc(b->cap);
    b->count = calloc(2 * (uint64_t)g->size, sizeof *b->count);
    if (b->p == NULL || b->count == NULL) {
        ref_group_buf_free(b);
        return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory for an exchange buffer of "
                       "%llu bytes", (unsigned long long)(PART_HEAD * (uint64_t)g->size +
                                                          n_values * rec_bytes(prec)));
    }
    return LM_OK;
}

void ref_group_buf_free(ref_group_buf *b)
{
    free(b->p);
    free(b->count);
    memset(b, 0, sizeof *b);
}

/* --- statuses --- */

enum { MSG_BYTES = 504 };
typedef struct status_rec {
    int64_t code;
    char msg[MSG_BYTES];
} status_rec;

int ref_group_agree(const ref_group *g, int st, lm_err *err)
{
    if (g == NULL || g->size <= 1)
        return st;
    const uint64_t size = (uint64_t)g->size;
    status_rec *recs = calloc(size, sizeof *recs);
    uint64_t *count = calloc(2 * size, sizeof *count);
    if (recs == NULL || count == NULL) {
        free(recs);
        free(count);
        /* a member that cannot take part in the collective cannot go on at all */
        return LM_FAIL(err, LM_E_NOMEM, "reference: out of memory agreeing with the other ranks");
    }
    uint64_t *displ = count + size;
    for (uint64_t r = 0; r < size; ++r) {
        count[r] = sizeof *recs;
        displ[r] = r * sizeof *recs;
    }
    status_rec *own = &recs[g->rank];
    own->code = st;
    if (st != LM_OK)
        snprintf(own->msg, sizeof own->msg, "%.*s", (int)sizeof own->msg - 1, err->msg);
    int rc = g->allgather(g, recs, count, displ, err);
    if (rc == LM_OK && st == LM_OK) {
        for (uint64_t r = 0; r < size; ++r)
            if (recs[r].code != LM_OK) {
                recs[r].msg[MSG_BYTES - 1] = '\0';
                rc = LM_FAIL(err, (int)recs[r].code, "rank %d: %s", (int)r, recs[r].msg);
                break;
            }
    } else if (rc == LM_OK) {
        rc = st;
    }
    free(recs);
    free(count);
    return rc;
}

/* --- values --- */

static void pack(uint8_t *o, mpfr_srcptr x, uint64_t nl)
{
    int64_t kind = mpfr_custom_get_kind(x), e = 0;
    if (mpfr_regular_p(x)) {
        e = (int64_t)mpfr_custom_get_exp(x);
        memcpy(o + 16, mpfr_custom_get_significand(x), nl * sizeof(mp_limb_t));
    } else {
        memset(o + 16, 0, nl * sizeof(mp_limb_t));
    }
    memcpy(o, &kind, 8);
    memcpy(o + 8, &e, 8);
}

static void unpack(mpfr_ptr x, const uint8_t *i, uint64_t nl, mpfr_prec_t prec)
{
    int64_t kind, e;
    memcpy(&kind, i, 8);
    memcpy(&e, i + 8, 8);
    void *sig = mpfr_custom_get_significand(x);
    memcpy(sig, i + 16, nl * sizeof(mp_limb_t));
    mpfr_custom_init_set(x, (int)kind, (mpfr_exp_t)e, prec, sig);
}

/* Member r's columns: unit times its range of n_cols / unit items. */
static void col_range(const ref_group *g, int r, uint64_t n_cols, uint64_t unit, uint64_t *lo,
                      uint64_t *hi)
{
    ref_group_range(g, r, n_cols / unit, lo, hi);
    *lo *= unit;
    *hi *= unit;
}

int ref_group_share(const ref_group *g, mpfr_t *base, uint64_t n_rows, uint64_t stride,
                    uint64_t n_cols, uint64_t unit, mpfr_prec_t prec, const uint8_t in[16], int st,
                    ref_group_buf *buf, lm_err *err)
{
    if (g == NULL || g->size <= 1)
        return st;
    const uint64_t size = (uint64_t)g->size, rb = rec_bytes(prec),
                   nl = (rb - 16) / sizeof(mp_limb_t);
    uint64_t *count = buf->count, *displ = buf->count + size, total = 0;
    for (uint64_t r = 0; r < size; ++r) {
        uint64_t lo, hi;
        col_range(g, (int)r, n_cols, unit, &lo, &hi);
        displ[r] = total;
        count[r] = PART_HEAD + n_rows * (hi - lo) * rb;
        total += count[r];
    }
    LM_ASSERT(total <= buf->cap);
    uint64_t lo, hi;
    col_range(g, g->rank, n_cols, unit, &lo, &hi);
    uint8_t *o = buf->p + displ[g->rank];
    int64_t code = st;
    memset(o, 0, PART_HEAD);
    memcpy(o, &code, 8);
    memcpy(o + 8, in, 16);
    if (st != LM_OK)
        snprintf((char *)o + MSG_AT, PART_HEAD - MSG_AT, "%.*s", PART_HEAD - MSG_AT - 1, err->msg);
    o += PART_HEAD;
    if (st == LM_OK)
        for (uint64_t t = 0; t < n_rows; ++t)
            for (uint64_t c = lo; c < hi; ++c, o += rb)
                pack(o, base[t * stride + c], nl);
    int rc = g->allgather(g, buf->p, count, displ, err);
    for (uint64_t r = 0; rc == LM_OK && r < size; ++r) {
        memcpy(&code, buf->p + displ[r], 8);
        char *msg = (char *)buf->p + displ[r] + MSG_AT;
        msg[PART_HEAD - MSG_AT - 1] = '\0';
        if (code != LM_OK)
            rc = (int)r == g->rank ? st : LM_FAIL(err, (int)code, "rank %d: %s", (int)r, msg);
    }
    for (uint64_t r = 0; rc == LM_OK && r < size; ++r)
        if (memcmp(buf->p + displ[r] + 8, in, 16) != 0)
            rc = LM_FAIL(err, LM_E_INPUT, "reference: rank %d computed its part of a product "
                         "from other inputs than rank %d: the ranks do not compute alike "
                         "(another model file, kvdrift or MPFR build?)", (int)r, g->rank);
    for (uint64_t r = 0; rc == LM_OK && r < size; ++r) {
        if ((int)r == g->rank)
            continue;
        col_range(g, (int)r, n_cols, unit, &lo, &hi);
        const uint8_t *i = buf->p + displ[r] + PART_HEAD;
        for (uint64_t t = 0; t < n_rows; ++t)
            for (uint64_t c = lo; c < hi; ++c, i += rb)
                unpack(base[t * stride + c], i, nl, prec);
    }
    return rc;
}

int ref_group_digest(uint8_t out[16], mpfr_t *const *arrays, const uint64_t *n, int n_arrays)
{
    XXH3_state_t *hs = XXH3_createState();
    if (hs == NULL)
        return LM_E_NOMEM;
    XXH3_128bits_reset(hs);
    for (int a = 0; a < n_arrays; ++a)
        for (uint64_t i = 0; i < n[a]; ++i) {
            mpfr_srcptr x = arrays[a][i];
            const int64_t hd[2] = {mpfr_custom_get_kind(x),
                                   mpfr_regular_p(x) ? (int64_t)mpfr_custom_get_exp(x) : 0};
            XXH3_128bits_update(hs, hd, sizeof hd);
            if (mpfr_regular_p(x))
                XXH3_128bits_update(hs, mpfr_custom_get_significand(x),
                                    sizeof(mp_limb_t) *
                                        (size_t)((mpfr_get_prec(x) + GMP_NUMB_BITS - 1) /
                                                 GMP_NUMB_BITS));
        }
    XXH128_canonical_t c;
    XXH128_canonicalFromHash(&c, XXH3_128bits_digest(hs));
    XXH3_freeState(hs);
    memcpy(out, c.digest, 16);
    return LM_OK;
}

int ref_group_same(const ref_group *g, mpfr_t *const *arrays, const uint64_t *n, int n_arrays,
                   lm_err *err)
{
    if (g == NULL || g->size <= 1)
        return LM_OK;
    const uint64_t size = (uint64_t)g->size;
    uint8_t *h = calloc(size, 16);
    uint64_t *count = calloc(2 * size, sizeof *count);
    int st = h && count && ref_group_digest(h + 16 * (uint64_t)g->rank, arrays, n, n_arrays) ==
                               LM_OK
                 ? LM_OK
                 : LM_FAIL(err, LM_E_NOMEM, "reference: out of memory");
    st = ref_group_agree(g, st, err);
    uint64_t *displ = count ? count + size : NULL;
    for (uint64_t r = 0; st == LM_OK && r < size; ++r) {
        count[r] = 16;
        displ[r] = 16 * r;
    }
    if (st == LM_OK)
        st = g->allgather(g, h, count, displ, err);
    for (uint64_t r = 1; st == LM_OK && r < size; ++r)
        if (memcmp(h, h + 16 * r, 16) != 0)
            st = LM_FAIL(err, LM_E_INPUT, "reference: rank %d's result differs from rank 0's: "
                         "the ranks do not compute alike (another kvdrift or MPFR build?); "
                         "nothing is kept", (int)r);
    free(h);
    free(count);
    return st;
}
