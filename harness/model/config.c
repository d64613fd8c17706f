/* config.c — CONFIG strings (`blas:step=64:attn=dense`) to and from struct hx_config. */
#include "model/config.h"
#include "kvd_util.h"

#include "kvd_engine.h"
#include "kvd_profile.h"
#include "kvd_ref.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

const char *hx_attn_name(hx_attn a)
{
    switch (a) {
    case HX_ATTN_DENSE: return "dense";
    case HX_ATTN_STREAM: return "stream";
    default: return "default";
    }
}

/* Decimal integer in [1, UINT32_MAX], nothing else (no sign, no spaces, no hex). */
static bool field_is(const char *f, size_t len, const char *word)
{
    return strlen(word) == len && memcmp(f, word, len) == 0;
}

/* KEEP 0 is allowed, so it is special-cased (the other fields want >= 1). */
bool hx_rot_parse(const char *s, size_t len, uint32_t *max, uint32_t *keep, bool *window)
{
    *window = false;
    if (field_is(s, len, "none")) {
        *max = *keep = 0;
        return true;
    }
    const char *slash = memchr(s, '/', len);
    if (slash == NULL)
        slash = memchr(s, ':', len);
    if (slash == NULL)
        return false;
    size_t mlen = (size_t)(slash - s), klen = len - mlen - 1;
    const char *pol = memchr(slash + 1, *slash, klen); /* MAX/KEEP/window */
    if (pol != NULL) {
        if (!field_is(pol + 1, len - (size_t)(pol + 1 - s), "window"))
            return false;
        *window = true;
        klen = (size_t)(pol - slash - 1);
    }
    uint32_t k = 0;
    if (field_is(slash + 1, klen, "0"))
        k = 0;
    else if (!lm_parse_u32(slash + 1, klen, 1, UINT32_MAX, &k))
        return false;
    if (!lm_parse_u32(s, mlen, 1, UINT32_MAX, max) || *max < 2 || k >= *max)
        return false;
    *keep = k;
    return true;
}

bool hx_profile_parse(char out[8], const char *s, size_t len)
{
    char name[8];
    if (len == 0 || len >= sizeof name)
        return false;
    memcpy(name, s, len);
    name[len] = '\0';
    const lm_profile *p = lm_profile_find(name);
    if (p == NULL)
        return false;
    memset(out, 0, 8);
    if (strcmp(p->name, "f32") != 0)
        memcpy(out, name, len);
    return true;
}

int hx_config_parse(hx_config *out, const char *s, lm_err *err)
{
    hx_config c = {0};
    if (s == NULL || *s == '\0')
        return LM_FAIL(err, LM_E_INPUT, "config '': empty configuration string");
    const char *colon = strchr(s, ':');
    size_t blen = colon ? (size_t)(colon - s) : strlen(s);
    if (!lm_backend_known(s, blen))
        return LM_FAIL(err, LM_E_INPUT, "config '%s': unknown backend '%.*s' (expected %s)", s,
                       (int)blen, s, lm_backend_expected());
    memcpy(c.backend, s, blen);
    bool seen_step = false, seen_threads = false, seen_attn = false, seen_rot = false;
    bool seen_spec = false, seen_draft = false, seen_prof = false, seen_turn = false;
    bool seen_prefix = false, seen_batch = false, seen_tp = false;
    for (const char *p = colon; p != NULL;) {
        const char *f = p + 1;
        const char *next = strchr(f, ':');
        size_t flen = next ? (size_t)(next - f) : strlen(f);
        const char *eq = memchr(f, '=', flen);
        if (eq == NULL)
            return LM_FAIL(err, LM_E_INPUT, "config '%s': field '%.*s' is not KEY=VALUE", s,
                           (int)flen, f);
        size_t klen = (size_t)(eq - f);
        const char *val = eq + 1;
        size_t vlen = flen - klen - 1;
        bool *seen;
        bool ok;
        char expect[96]; /* what the key accepts, for the message */
        if (field_is(f, klen, "step")) {
            seen = &seen_step;
            snprintf(expect, sizeof expect, "an integer >= 1 or full");
            ok = field_is(val, vlen, "full") ? (c.step = 0, true)
                                             : lm_parse_u32(val, vlen, 1, UINT32_MAX, &c.step);
        } else if (field_is(f, klen, "threads")) {
            seen = &seen_threads;
            snprintf(expect, sizeof expect, "an integer in 1..%u or all", LM_MAX_THREADS);
            ok = field_is(val, vlen, "all")
                     ? (c.threads = HX_THREADS_ALL, true)
                     : lm_parse_u32(val, vlen, 1, LM_MAX_THREADS, &c.threads);
        } else if (field_is(f, klen, "attn")) {
            seen = &seen_attn;
            snprintf(expect, sizeof expect, "dense or stream");
            ok = true;
            if (field_is(val, vlen, "dense"))
                c.attn = HX_ATTN_DENSE;
            else if (field_is(val, vlen, "stream"))
                c.attn = HX_ATTN_STREAM;
            else
                ok = false;
        } else if (field_is(f, klen, "rot")) {
            seen = &seen_rot;
            snprintf(expect, sizeof expect,
                     "MAX/KEEP with MAX >= 2 and KEEP < MAX, or MAX/KEEP/window");
            ok = memchr(val, ':', vlen) == NULL &&
                 hx_rot_parse(val, vlen, &c.rot_max, &c.rot_keep, &c.rot_window);
        } else if (field_is(f, klen, "turn")) {
            seen = &seen_turn;
            snprintf(expect, sizeof expect, "an integer in 0..%u", HX_TURN_MAX);
            ok = field_is(val, vlen, "0") ? (c.turn = 0, true)
                                          : lm_parse_u32(val, vlen, 1, HX_TURN_MAX, &c.turn);
        } else if (field_is(f, klen, "prefix")) {
            seen = &seen_prefix;
            snprintf(expect, sizeof expect, "P or P/S with P >= 1 and S >= 1 or full, or none");
            ok = hx_prefix_parse(val, vlen, false, &c.prefix, &c.prefix_step);
        } else if (field_is(f, klen, "tp")) {
            seen = &seen_tp;
            snprintf(expect, sizeof expect, "N, N/tree or N/fixed with N in 1..%u (a power of "
                     "two with tree or fixed)", LM_TP_SHARDS_MAX);
            ok = hx_tp_parse(val, vlen, false, &c.tp, &c.tp_reduce);
        } else if (field_is(f, klen, "batch")) {
            seen = &seen_batch;
            snprintf(expect, sizeof expect, "B or B/decode with B in 1..%u", LM_BATCH_MAX);
            ok = hx_batch_parse(val, vlen, false, &c.batch, &c.batch_decode);
        } else if (field_is(f, klen, "profile")) {
            seen = &seen_prof;
            snprintf(expect, sizeof expect, "%s", lm_profile_expected());
            ok = hx_profile_parse(c.profile, val, vlen);
        } else if (field_is(f, klen, "spec")) {
            seen = &seen_spec;
            snprintf(expect, sizeof expect, "an integer in 0..64");
            ok = field_is(val, vlen, "0") ? (c.spec = 0, true) : lm_parse_u32(val, vlen, 1, 64, &c.spec);
            ok = ok && c.spec <= 64;
        } else if (field_is(f, klen, "draft")) {
            seen = &seen_draft;
            snprintf(expect, sizeof expect, "self:L, a GGUF path or synth:PRESET");
            next = NULL; /* the value is the rest of the string */
            vlen = strlen(val);
            ok = vlen > 0 && vlen < sizeof c.draft;
            if (ok)
                memcpy(c.draft, val, vlen);
        } else {
            return LM_FAIL(err, LM_E_INPUT,
                           "config '%s': unknown key '%.*s' (step, threads, attn, rot, turn, "
                           "prefix, batch, tp, profile, spec, draft)", s, (int)klen, f);
        }
        if (*seen)
            return LM_FAIL(err, LM_E_INPUT, "config '%s': key '%.*s' given twice", s, (int)klen, f);
        *seen = true;
        if (!ok)
            return LM_FAIL(err, LM_E_INPUT, "config '%s': bad value '%.*s' for %.*s (expected %s)",
                           s, (int)vlen, val, (int)klen, f, expect);
        p = next;
    }
    if (c.prefix != 0 && c.rot_max != 0)
        return LM_FAIL(err, LM_E_INPUT, "config '%s': prefix= needs the plain cache (a rotating "
                       "cache evicts the rows a reused prefix would hand over)", s);
    *out = c;
    return LM_OK;
}

/* "N" or "N" sep WORD, N in 1..max (sep '/', or also ':' when colon_ok): *n = N (1 stored as
 * 0: the key's default) and the index of WORD in words[n_words] into *which (-1: none given).
 * False when malformed. */
static bool count_with_word(const char *s, size_t len, bool colon_ok, uint32_t max,
                            const char *const *words, int n_words, uint32_t *n, int *which)
{
    *n = 0;
    *which = -1;
    size_t nlen = 0;
    while (nlen < len && s[nlen] != '/' && !(colon_ok && s[nlen] == ':'))
        ++nlen;
    if (!lm_parse_u32(s, nlen, 1, max, n))
        return false;
    for (int w = 0; nlen < len && w < n_words && *which < 0; ++w)
        if (field_is(s + nlen + 1, len - nlen - 1, words[w]))
            *which = w;
    if (nlen < len && *which < 0)
        return false;
    if (*n == 1)
        *n = 0;
    return true;
}

bool hx_tp_parse(const char *s, size_t len, bool colon_ok, uint32_t *n, int *reduce)
{
    static const char *const words[] = {"tree", "fixed"};
    int w;
    if (!count_with_word(s, len, colon_ok, LM_TP_SHARDS_MAX, words, 2, n, &w))
        return false;
    *reduce = w == 0 ? LM_TP_TREE : w == 1 ? LM_TP_FIXED : LM_TP_RING;
    const bool pow2 = (*n & (*n - 1)) == 0; /* 0 stands for 1 */
    return w < 0 || (w == 0 && *n >= 2 && pow2) || (w == 1 && pow2);
}

bool hx_batch_parse(const char *s, size_t len, bool colon_ok, uint32_t *b, bool *decode)
{
    static const char *const words[] = {"decode"};
    int w;
    if (!count_with_word(s, len, colon_ok, LM_BATCH_MAX, words, 1, b, &w) || (w == 0 && *b < 2))
        return false;
    *decode = w == 0;
    return true;
}

bool hx_prefix_parse(const char *s, size_t len, bool colon_ok, uint32_t *p, uint32_t *step)
{
    *p = *step = 0;
    if (field_is(s, len, "none") || field_is(s, len, "0"))
        return true;
    size_t plen = 0;
    while (plen < len && s[plen] != '/' && !(colon_ok && s[plen] == ':'))
        ++plen;
    if (!lm_parse_u32(s, plen, 1, UINT32_MAX, p))
        return false;
    if (plen == len)
        return true;
    const char *t = s + plen + 1;
    const size_t tlen = len - plen - 1;
    if (field_is(t, tlen, "full")) {
        *step = HX_PREFIX_STEP_FULL;
        return true;
    }
    return lm_parse_u32(t, tlen, 1, UINT32_MAX - 1, step);
}

uint32_t hx_threads_all(void)
{
    long nc = sysconf(_SC_NPROCESSORS_ONLN);
    uint32_t n = nc > 2 ? (uint32_t)nc : 2;
    return n < LM_MAX_THREADS ? n : LM_MAX_THREADS;
}

int hx_config_n_threads(const hx_config *c)
{
    return c->threads == HX_THREADS_ALL ? (int)hx_threads_all() : (int)c->threads;
}

const char *hx_config_backend_name(char *buf, size_t n, const hx_config *c)
{
    if (lm_backend_flags(c->backend) & LM_BE_SEEDED)
        lm_backend_seeded_name(buf, n, c->backend, c->sr_seed);
    else
        snprintf(buf, n, "%s", c->backend);
    return buf;
}

int hx_config_format(char *buf, size_t n, const hx_config *c)
{
    char step[16], thr[24] = "", attn[24] = "", rot[40] = "", prof[24] = "";
    if (c->step == 0)
        snprintf(step, sizeof step, "full");
    else
        snprintf(step, sizeof step, "%u", (unsigned)c->step);
    if (c->threads == HX_THREADS_ALL)
        snprintf(thr, sizeof thr, ":threads=all");
    else if (c->threads)
        snprintf(thr, sizeof thr, ":threads=%u", (unsigned)c->threads);
    if (c->attn != HX_ATTN_DEFAULT)
        snprintf(attn, sizeof attn, ":attn=%s", hx_attn_name(c->attn));
    if (c->rot_max != 0)
        snprintf(rot, sizeof rot, ":rot=%u/%u%s", (unsigned)c->rot_max, (unsigned)c->rot_keep,
                 c->rot_window ? "/window" : "");
    if (c->profile[0] != '\0')
        snprintf(prof, sizeof prof, ":profile=%.7s", c->profile);
    char spec[24] = "", turn[24] = "", prefix[40] = "", batch[32] = "", tp[24] = "";
    if (c->tp > 1 || c->tp_reduce != LM_TP_RING)
        snprintf(tp, sizeof tp, ":tp=%u%s", c->tp > 1 ? (unsigned)c->tp : 1u,
                 c->tp_reduce == LM_TP_TREE    ? "/tree"
                 : c->tp_reduce == LM_TP_FIXED ? "/fixed"
                                               : "");
    if (c->batch > 1)
        snprintf(batch, sizeof batch, ":batch=%u%s", (unsigned)c->batch,
                 c->batch_decode ? "/decode" : "");
    if (c->prefix != 0 && c->prefix_step == HX_PREFIX_STEP_FULL)
        snprintf(prefix, sizeof prefix, ":prefix=%u/full", (unsigned)c->prefix);
    else if (c->prefix != 0 && c->prefix_step != 0)
        snprintf(prefix, sizeof prefix, ":prefix=%u/%u", (unsigned)c->prefix,
                 (unsigned)c->prefix_step);
    else if (c->prefix != 0)
        snprintf(prefix, sizeof prefix, ":prefix=%u", (unsigned)c->prefix);
    if (c->spec != 0)
        snprintf(spec, sizeof spec, ":spec=%u", (unsigned)c->spec);
    if (c->turn != 0)
        snprintf(turn, sizeof turn, ":turn=%u", (unsigned)c->turn);
    return snprintf(buf, n, "%s:step=%s%s%s%s%s%s%s%s%s%s%s%s", c->backend, step, thr, attn, rot,
                    turn, prefix, batch, tp, prof, spec, c->draft[0] ? ":draft=" : "", c->draft);
}

hx_config hx_config_baseline(const hx_config *c)
{
    hx_config b = *c;
    b.step = 0;
    b.turn = 0;
    b.prefix = b.prefix_step = 0;
    b.batch = 0;
    b.batch_decode = false;
    b.tp = 0;
    b.tp_reduce = c->tp_reduce == LM_TP_FIXED ? LM_TP_FIXED : LM_TP_RING; /* one device */
    return b;
}

bool hx_config_chunk_invariant(const hx_config *c)
{
    return (lm_backend_flags(c->backend) & LM_BE_CHUNK_INVARIANT) && c->spec == 0
        && (c->rot_max == 0 || c->rot_window);
}

void hx_turn_split(uint32_t n, uint32_t turn, uint32_t *n1, uint32_t *d, uint32_t *n2)
{
    if (turn == 0 || n < 4) {
        *n1 = n;
        *d = *n2 = 0;
        return;
    }
    *d = turn < n - 3 ? turn : n - 3;
    *n2 = (n - *d) / 2 > 2 ? (n - *d) / 2 : 2;
    *n1 = n - *d - *n2;
}

int hx_config_add_turns(hx_config **v, size_t *n, uint32_t turn, lm_err *err)
{
    if (turn == 0)
        return LM_OK;
    hx_config *out = calloc(2 * *n + 1, sizeof *out);
    if (out == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < *n; ++i) {
        out[k++] = (*v)[i];
        if ((*v)[i].step != 1 && (*v)[i].spec == 0 && (*v)[i].turn == 0 && !(*v)[i].rot_window) {
            out[k] = (*v)[i];
            out[k++].turn = turn;
        }
    }
    free(*v);
    *v = out;
    *n = k;
    return LM_OK;
}

bool hx_config_equal(const hx_config *a, const hx_config *b)
{
    return strcmp(a->backend, b->backend) == 0 && a->step == b->step && a->threads == b->threads &&
           a->attn == b->attn && a->rot_max == b->rot_max && a->rot_keep == b->rot_keep &&
           a->rot_window == b->rot_window && a->turn == b->turn && a->prefix == b->prefix &&
           a->prefix_step == b->prefix_step && a->batch == b->batch &&
           a->batch_decode == b->batch_decode && a->tp == b->tp && a->tp_reduce == b->tp_reduce &&
           a->sr_seed == b->sr_seed && a->spec == b->spec && strcmp(a->draft, b->draft) == 0 &&
           strcmp(a->profile, b->profile) == 0;
}

/* *v[*n] times the elements of an axis (size bytes each, count m): apply(cfg, elem) sets the
 * axis's field; the axis varies slowest (one block of the old list per element). */
static int cross_by(hx_config **v, size_t *n, const void *elems, size_t size, uint32_t m,
                    void (*apply)(hx_config *c, const void *elem), lm_err *err)
{
    size_t total = (size_t)m * *n;
    hx_config *out = calloc(total ? total : 1, sizeof *out);
    if (out == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    size_t k = 0;
    for (uint32_t r = 0; r < m; ++r)
        for (size_t i = 0; i < *n; ++i) {
            out[k] = (*v)[i];
            apply(&out[k++], (const char *)elems + r * size);
        }
    free(*v);
    *v = out;
    *n = k;
    return LM_OK;
}

static void apply_rot(hx_config *c, const void *elem)
{
    const uint32_t *r = elem; /* max, keep, window */
    c->rot_max = r[0];
    c->rot_keep = r[1];
    c->rot_window = r[2] != 0;
}

static void apply_prefix(hx_config *c, const void *elem)
{
    const uint32_t *p = elem; /* prefix, its earlier request's step */
    c->prefix = p[0];
    c->prefix_step = p[1];
}

static void apply_tp(hx_config *c, const void *elem)
{
    const uint32_t *t = elem; /* shards, reduction */
    c->tp = t[0];
    c->tp_reduce = (int)t[1];
}

static void apply_batch(hx_config *c, const void *elem)
{
    const uint32_t *b = elem; /* co-resident count, decode mode */
    c->batch = b[0];
    c->batch_decode = b[1] != 0;
}

static void apply_profile(hx_config *c, const void *elem)
{
    memcpy(c->profile, elem, sizeof c->profile);
}

static int rot_item(void *elem, const char *s, size_t len, const char *what, const char *list,
                    lm_err *err);
static int profile_item(void *elem, const char *s, size_t len, const char *what,
                        const char *list, lm_err *err);

/* The list of one axis, crossed with *v (hx_config_cross_rot, hx_config_cross_profile). */
static int cross_list(hx_config **v, size_t *n, const char *what, const char *list, size_t size,
                      hx_item_decode decode, void (*apply)(hx_config *c, const void *elem),
                      lm_err *err)
{
    void *elems = NULL;
    uint32_t m = 0;
    int rc = hx_list_parse(&elems, &m, size, false, decode, what, list, err);
    if (rc == LM_OK)
        rc = cross_by(v, n, elems, size, m, apply, err);
    free(elems);
    return rc;
}

int hx_config_cross_rot(hx_config **v, size_t *n, const char *what, const char *list,
                        lm_err *err)
{
    return cross_list(v, n, what, list, 3 * sizeof(uint32_t), rot_item, apply_rot, err);
}

int hx_config_cross_profile(hx_config **v, size_t *n, const char *what, const char *list,
                            lm_err *err)
{
    return cross_list(v, n, what, list, sizeof((hx_config *)0)->profile, profile_item,
                      apply_profile, err);
}

/* ---- axis lists ---- */

/* The next item of a list at *p, spaces around it trimmed, into s[0..*len); *p moves past its
 * comma (NULL after the last item). */
static const char *next_item(const char **p, size_t *len)
{
    const char *s = *p, *comma = strchr(s, ',');
    *len = comma ? (size_t)(comma - s) : strlen(s);
    *p = comma ? comma + 1 : NULL;
    while (*len && (*s == ' ' || *s == '\t'))
        ++s, --*len;
    while (*len && (s[*len - 1] == ' ' || s[*len - 1] == '\t'))
        --*len;
    return s;
}

int hx_list_parse(void **out, uint32_t *n, size_t size, bool dups_ok, hx_item_decode decode,
                  const char *what, const char *list, lm_err *err)
{
    char *v = NULL;
    uint32_t m = 0;
    int rc = LM_OK;
    for (const char *p = list; rc == LM_OK && p != NULL; ++m) {
        size_t len;
        const char *s = next_item(&p, &len);
        char *nv = realloc(v, (m + 1) * size);
        if (nv == NULL) {
            rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
            break;
        }
        v = nv;
        memset(v + m * size, 0, size);
        if (len == 0)
            rc = LM_FAIL(err, LM_E_INPUT, "%s '%s': empty list item", what, list);
        else
            rc = decode(v + m * size, s, len, what, list, err);
        for (uint32_t i = 0; rc == LM_OK && !dups_ok && i < m; ++i)
            if (memcmp(v + i * size, v + m * size, size) == 0)
                rc = LM_FAIL(err, LM_E_INPUT, "%s '%s': '%.*s' listed twice", what, list,
                             (int)len, s);
    }
    *out = rc == LM_OK ? v : (free(v), NULL);
    *n = rc == LM_OK ? m : 0;
    return rc;
}

/* One item of each axis (hx_item_decode). */
static int step_item(void *elem, const char *s, size_t len, const char *what, const char *list,
                     lm_err *err)
{
    if (field_is(s, len, "full") || lm_parse_u32(s, len, 1, UINT32_MAX, elem))
        return LM_OK; /* full: 0 (the zeroed element) */
    return LM_FAIL(err, LM_E_INPUT, "%s '%s': '%.*s' is not an integer in 1..%u or full", what,
                   list, (int)len, s, UINT32_MAX);
}

static int thread_item(void *elem, const char *s, size_t len, const char *what,
                       const char *list, lm_err *err)
{
    if (field_is(s, len, "all")) {
        *(uint32_t *)elem = HX_THREADS_ALL;
        return LM_OK;
    }
    if (lm_parse_u32(s, len, 1, LM_MAX_THREADS, elem))
        return LM_OK;
    return LM_FAIL(err, LM_E_INPUT, "%s '%s': '%.*s' is not an integer in 1..%u or all", what,
                   list, (int)len, s, (unsigned)LM_MAX_THREADS);
}

static int backend_item(void *elem, const char *s, size_t len, const char *what,
                        const char *list, lm_err *err)
{
    if (len >= sizeof((hx_config *)0)->backend || !lm_backend_known(s, len))
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': unknown backend '%.*s' (expected %s)", what,
                       list, (int)len, s, lm_backend_expected());
    memcpy(elem, s, len);
    return LM_OK;
}

static int attn_item(void *elem, const char *s, size_t len, const char *what, const char *list,
                     lm_err *err)
{
    hx_attn *a = elem;
    if (field_is(s, len, "default"))
        *a = HX_ATTN_DEFAULT;
    else if (field_is(s, len, "dense"))
        *a = HX_ATTN_DENSE;
    else if (field_is(s, len, "stream"))
        *a = HX_ATTN_STREAM;
    else
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': unknown variant '%.*s' (default, dense, stream)",
                       what, list, (int)len, s);
    return LM_OK;
}

static int rot_item(void *elem, const char *s, size_t len, const char *what, const char *list,
                    lm_err *err)
{
    uint32_t *r = elem; /* max, keep, window */
    bool window = false;
    if (!hx_rot_parse(s, len, &r[0], &r[1], &window))
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': bad value '%.*s' (none or MAX:KEEP[:window] "
                       "with MAX >= 2 and KEEP < MAX)", what, list, (int)len, s);
    r[2] = window;
    return LM_OK;
}

static int prefix_item(void *elem, const char *s, size_t len, const char *what,
                       const char *list, lm_err *err)
{
    uint32_t *p = elem; /* prefix, its earlier request's step */
    if (!hx_prefix_parse(s, len, true, &p[0], &p[1]))
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': bad value '%.*s' (none, P or P:S with P >= 1 "
                       "and S >= 1 or full)", what, list, (int)len, s);
    return LM_OK;
}

static int tp_item(void *elem, const char *s, size_t len, const char *what, const char *list,
                   lm_err *err)
{
    uint32_t *t = elem; /* shards, reduction */
    int reduce = LM_TP_RING;
    if (!hx_tp_parse(s, len, true, &t[0], &reduce))
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': bad value '%.*s' (N, N:tree or N:fixed with N "
                       "in 1..%u, a power of two with tree or fixed)", what, list, (int)len, s,
                       LM_TP_SHARDS_MAX);
    t[1] = (uint32_t)reduce;
    return LM_OK;
}

static int batch_item(void *elem, const char *s, size_t len, const char *what,
                      const char *list, lm_err *err)
{
    uint32_t *b = elem; /* co-resident count, decode mode */
    bool decode = false;
    if (!hx_batch_parse(s, len, true, &b[0], &decode))
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': bad value '%.*s' (B or B:decode with B in "
                       "1..%u)", what, list, (int)len, s, LM_BATCH_MAX);
    b[1] = decode;
    return LM_OK;
}

static int profile_item(void *elem, const char *s, size_t len, const char *what,
                        const char *list, lm_err *err)
{
    if (!hx_profile_parse(elem, s, len))
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': unknown profile '%.*s' (expected %s)", what,
                       list, (int)len, s, lm_profile_expected());
    return LM_OK;
}

/* A profile's own name (hx_item_decode into a const char *). */
static int profile_name_item(void *elem, const char *s, size_t len, const char *what,
                             const char *list, lm_err *err)
{
    char name[16];
    const lm_profile *p = NULL;
    if (len < sizeof name) {
        memcpy(name, s, len);
        name[len] = '\0';
        p = lm_profile_find(name);
    }
    if (p == NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': unknown profile '%.*s' (expected %s)", what,
                       list, (int)len, s, lm_profile_expected());
    *(const char **)elem = p->name;
    return LM_OK;
}

int hx_profile_names_parse(const char **names, uint32_t *n, uint32_t max, const char *what,
                           const char *list, lm_err *err)
{
    const char **v = NULL;
    uint32_t m = 0;
    int rc = hx_list_parse((void **)&v, &m, sizeof *v, false, profile_name_item, what, list, err);
    if (rc == LM_OK && m > max)
        rc = LM_FAIL(err, LM_E_INPUT, "%s '%s': at most %u profiles", what, list, (unsigned)max);
    if (rc == LM_OK)
        memcpy(names, v, m * sizeof *v);
    *n = rc == LM_OK ? m : 0;
    free(v);
    return rc;
}

static int token_item(void *elem, const char *s, size_t len, const char *what, const char *list,
                      lm_err *err)
{
    uint64_t v;
    if (!lm_parse_u64(s, len, 0, INT32_MAX, &v))
        return LM_FAIL(err, LM_E_INPUT, "%s: '%.*s' is not a token id (0..%d)", what, (int)len, s,
                       INT32_MAX);
    (void)list;
    *(int32_t *)elem = (int32_t)v;
    return LM_OK;
}

int hx_check_token_ids(const int32_t *ids, uint32_t n, uint32_t n_vocab, const char *what,
                       lm_err *err)
{
    for (uint32_t i = 0; i < n; ++i)
        if (ids[i] < 0 || (uint32_t)ids[i] >= n_vocab)
            return LM_FAIL(err, LM_E_INPUT, "%s: token id %d (item %u) is not below the "
                           "vocabulary size %u", what, (int)ids[i], (unsigned)i + 1,
                           (unsigned)n_vocab);
    return LM_OK;
}

int hx_parse_tokens(int32_t **out, uint32_t *n, const char *list, lm_err *err)
{
    void *v = NULL;
    int rc = hx_list_parse(&v, n, sizeof **out, true, token_item, "tokens", list, err);
    *out = v;
    return rc;
}

int hx_setting_parse(uint32_t *out, hx_setting which, const char *what, const char *s,
                     lm_err *err)
{
    static const uint32_t lim[HX_SET_COUNT][2] = {
        [HX_SET_N_GEN] = {0, HX_MAX_N_GEN},
        [HX_SET_PRECISION] = {REF_MIN_PREC, REF_MAX_PREC},
        [HX_SET_TURN] = {0, HX_TURN_MAX},
    };
    if (lm_parse_u32(s, strlen(s), lim[which][0], lim[which][1], out))
        return LM_OK;
    return LM_FAIL(err, LM_E_INPUT, "%s '%s': expected an integer in %u..%u", what, s,
                   (unsigned)lim[which][0], (unsigned)lim[which][1]);
}

/* The axes of hx_axes in their cross-product order (profile slowest, steps fastest): the
 * case-file key, the sweep's option, the default list (NULL: the axis is off), the element. */
static const struct axis_def {
    const char *key, *option, *def;
    size_t size;
    hx_item_decode decode;
    size_t field; /* offsetof(hx_axes, ...) */
} axis_defs[HX_AXIS_COUNT] = {
    [HX_AXIS_PROFILE] = {"profile", "--profile", NULL, sizeof((hx_config *)0)->profile,
                         profile_item, offsetof(hx_axes, profile)},
    [HX_AXIS_ROT] = {"rot", "--rot", NULL, 3 * sizeof(uint32_t), rot_item,
                     offsetof(hx_axes, rot)},
    [HX_AXIS_PREFIX] = {"prefix", "--prefix", NULL, 2 * sizeof(uint32_t), prefix_item,
                        offsetof(hx_axes, prefix)},
    [HX_AXIS_BATCH] = {"batch", "--batch", NULL, 2 * sizeof(uint32_t), batch_item,
                       offsetof(hx_axes, batch)},
    [HX_AXIS_TP] = {"tp", "--tp", NULL, 2 * sizeof(uint32_t), tp_item, offsetof(hx_axes, tp)},
    [HX_AXIS_BACKENDS] = {"backends", "--backends", HX_AXES_DEFAULT_BACKENDS,
                          sizeof((hx_config *)0)->backend, backend_item,
                          offsetof(hx_axes, backends)},
    [HX_AXIS_THREADS] = {"threads", "--threads", HX_AXES_DEFAULT_THREADS, sizeof(uint32_t),
                         thread_item, offsetof(hx_axes, threads)},
    [HX_AXIS_ATTN] = {"attn", "--attn", HX_AXES_DEFAULT_ATTN, sizeof(hx_attn), attn_item,
                      offsetof(hx_axes, attn)},
    [HX_AXIS_STEPS] = {"steps", "--steps", HX_AXES_DEFAULT_STEPS, sizeof(uint32_t), step_item,
                       offsetof(hx_axes, steps)},
};

int hx_axis_find(const char *key)
{
    for (int i = 0; i < HX_AXIS_COUNT; ++i)
        if (strcmp(key, axis_defs[i].key) == 0)
            return i;
    return -1;
}

const char **hx_axes_list(hx_axes *a, hx_axis axis)
{
    return (const char **)((char *)a + axis_defs[axis].field);
}

/* The elements of one axis of a (its default when not given); *out malloc'd, *n = 0 for an
 * axis that is off. */
static int axis_values(void **out, uint32_t *n, const hx_axes *a, hx_axis axis,
                       const char *what, lm_err *err)
{
    const char *list = *hx_axes_list((hx_axes *)a, axis);
    *out = NULL;
    *n = 0;
    if (list == NULL && (list = axis_defs[axis].def) == NULL)
        return LM_OK;
    return hx_list_parse(out, n, axis_defs[axis].size, false, axis_defs[axis].decode,
                         what ? what : axis_defs[axis].option, list, err);
}

int hx_axis_check(hx_axis axis, const char *what, const char *list, lm_err *err)
{
    hx_axes a = {0};
    *hx_axes_list(&a, axis) = list;
    void *v = NULL;
    uint32_t n = 0;
    int rc = axis_values(&v, &n, &a, axis, what, err);
    free(v);
    return rc;
}

int hx_sweep_cross(hx_config **out, size_t *n, const char (*backends)[16], uint32_t n_backends,
                   const uint32_t *steps, uint32_t n_steps, const uint32_t *threads,
                   uint32_t n_threads, const hx_attn *attn, uint32_t n_attn, lm_err *err)
{
    *out = NULL;
    *n = 0;
    if (n_backends == 0 || n_steps == 0)
        return LM_FAIL(err, LM_E_INPUT, "%s list is empty", n_steps ? "backend" : "step");
    for (uint32_t b = 0; b < n_backends; ++b) {
        if (!lm_backend_known(backends[b], strnlen(backends[b], 16)))
            return LM_FAIL(err, LM_E_INPUT, "unknown backend '%.16s' (expected %s)", backends[b],
                           lm_backend_expected());
    }
    static const uint32_t one_thread[1] = {0};
    static const hx_attn one_attn[1] = {HX_ATTN_DEFAULT};
    if (n_threads == 0) {
        threads = one_thread;
        n_threads = 1;
    }
    if (n_attn == 0) {
        attn = one_attn;
        n_attn = 1;
    }
    /* The same product and order as a case file's (hx_case_configs): steps vary fastest. A
     * backend that runs on one thread (LM_BE_ONE_THREAD) skips `all` when the axis has another
     * value: it would compute that value's bits again. */
    size_t total = (size_t)n_backends * n_threads * n_attn * n_steps;
    hx_config *v = calloc(total, sizeof *v);
    if (v == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    size_t i = 0;
    for (uint32_t b = 0; b < n_backends; ++b)
        for (uint32_t t = 0; t < n_threads; ++t) {
            if (threads[t] == HX_THREADS_ALL && n_threads > 1 &&
                (lm_backend_flags(backends[b]) & LM_BE_ONE_THREAD))
                continue;
            for (uint32_t a = 0; a < n_attn; ++a)
                for (uint32_t s = 0; s < n_steps; ++s) {
                    memcpy(v[i].backend, backends[b], sizeof v[i].backend);
                    v[i].backend[sizeof v[i].backend - 1] = '\0';
                    v[i].threads = threads[t];
                    v[i].attn = attn[a];
                    v[i].step = steps[s];
                    ++i;
                }
        }
    total = i;
    *out = v;
    *n = total;
    return LM_OK;
}

int hx_axes_configs(hx_config **out, size_t *n, const hx_axes *a, lm_err *err)
{
    void *v[HX_AXIS_COUNT] = {0};
    uint32_t m[HX_AXIS_COUNT] = {0};
    *out = NULL;
    *n = 0;
    int st = LM_OK;
    /* Checked in the order the options are documented: steps, backends, threads, attn, rot,
     * profile, prefix, batch, tp. */
    static const hx_axis order[HX_AXIS_COUNT] = {HX_AXIS_STEPS, HX_AXIS_BACKENDS,
                                                 HX_AXIS_THREADS, HX_AXIS_ATTN, HX_AXIS_ROT,
                                                 HX_AXIS_PROFILE, HX_AXIS_PREFIX, HX_AXIS_BATCH,
                                                 HX_AXIS_TP};
    for (int i = 0; i < HX_AXIS_COUNT && st == LM_OK; ++i)
        st = axis_values(&v[order[i]], &m[order[i]], a, order[i], NULL, err);
    if (st == LM_OK)
        st = hx_sweep_cross(out, n, v[HX_AXIS_BACKENDS], m[HX_AXIS_BACKENDS], v[HX_AXIS_STEPS],
                            m[HX_AXIS_STEPS], v[HX_AXIS_THREADS], m[HX_AXIS_THREADS],
                            v[HX_AXIS_ATTN], m[HX_AXIS_ATTN], err);
    if (st == LM_OK && m[HX_AXIS_PREFIX] > 0)
        st = cross_by(out, n, v[HX_AXIS_PREFIX], axis_defs[HX_AXIS_PREFIX].size,
                      m[HX_AXIS_PREFIX], apply_prefix, err);
    if (st == LM_OK && m[HX_AXIS_BATCH] > 0)
        st = cross_by(out, n, v[HX_AXIS_BATCH], axis_defs[HX_AXIS_BATCH].size, m[HX_AXIS_BATCH],
                      apply_batch, err);
    if (st == LM_OK && m[HX_AXIS_TP] > 0)
        st = cross_by(out, n, v[HX_AXIS_TP], axis_defs[HX_AXIS_TP].size, m[HX_AXIS_TP], apply_tp,
                      err);
    if (st == LM_OK && m[HX_AXIS_ROT] > 0)
        st = cross_by(out, n, v[HX_AXIS_ROT], axis_defs[HX_AXIS_ROT].size, m[HX_AXIS_ROT],
                      apply_rot, err);
    if (st == LM_OK && m[HX_AXIS_PROFILE] > 0)
        st = cross_by(out, n, v[HX_AXIS_PROFILE], axis_defs[HX_AXIS_PROFILE].size,
                      m[HX_AXIS_PROFILE], apply_profile, err);
    for (int i = 0; i < HX_AXIS_COUNT; ++i)
        free(v[i]);
    size_t kept = 0; /* a reused prefix needs the plain cache */
    for (size_t i = 0; st == LM_OK && i < *n; ++i)
        if ((*out)[i].prefix == 0 || (*out)[i].rot_max == 0)
            (*out)[kept++] = (*out)[i];
    if (st == LM_OK && kept == 0 && *n > 0)
        st = LM_FAIL(err, LM_E_INPUT, "--prefix: a reused prefix needs the plain cache, and "
                     "--rot leaves none");
    if (st == LM_OK)
        *n = kept;
    if (st != LM_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return st;
}
