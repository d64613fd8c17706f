/* config.c — CONFIG strings (`blas:step=64:attn=dense`) to and from struct hx_config. */
#include "config.h"
#include "kvd_util.h"

#include "kvd_engine.h"
#include "kvd_profile.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
        if (field_is(f, klen, "step")) {
            seen = &seen_step;
            ok = field_is(val, vlen, "full") ? (c.step = 0, true)
                                             : lm_parse_u32(val, vlen, 1, UINT32_MAX, &c.step);
        } else if (field_is(f, klen, "threads")) {
            seen = &seen_threads;
            ok = lm_parse_u32(val, vlen, 1, LM_MAX_THREADS, &c.threads);
        } else if (field_is(f, klen, "attn")) {
            seen = &seen_attn;
            ok = true;
            if (field_is(val, vlen, "dense"))
                c.attn = HX_ATTN_DENSE;
            else if (field_is(val, vlen, "stream"))
                c.attn = HX_ATTN_STREAM;
            else
                ok = false;
        } else if (field_is(f, klen, "rot")) {
            seen = &seen_rot;
            ok = memchr(val, ':', vlen) == NULL &&
                 hx_rot_parse(val, vlen, &c.rot_max, &c.rot_keep, &c.rot_window);
        } else if (field_is(f, klen, "turn")) {
            seen = &seen_turn;
            ok = field_is(val, vlen, "0") ? (c.turn = 0, true)
                                          : lm_parse_u32(val, vlen, 1, HX_TURN_MAX, &c.turn);
        } else if (field_is(f, klen, "profile")) {
            seen = &seen_prof;
            ok = hx_profile_parse(c.profile, val, vlen);
        } else if (field_is(f, klen, "spec")) {
            seen = &seen_spec;
            ok = field_is(val, vlen, "0") ? (c.spec = 0, true) : lm_parse_u32(val, vlen, 1, 64, &c.spec);
            ok = ok && c.spec <= 64;
        } else if (field_is(f, klen, "draft")) {
            seen = &seen_draft;
            next = NULL; /* the value is the rest of the string */
            vlen = strlen(val);
            ok = vlen > 0 && vlen < sizeof c.draft;
            if (ok)
                memcpy(c.draft, val, vlen);
        } else {
            return LM_FAIL(err, LM_E_INPUT,
                           "config '%s': unknown key '%.*s' (step, threads, attn, rot, turn, "
                           "profile, spec, draft)", s, (int)klen, f);
        }
        if (*seen)
            return LM_FAIL(err, LM_E_INPUT, "config '%s': key '%.*s' given twice", s, (int)klen, f);
        *seen = true;
        if (!ok)
            return LM_FAIL(err, LM_E_INPUT, "config '%s': bad value '%.*s' for %.*s", s, (int)vlen,
                           val, (int)klen, f);
        p = next;
    }
    *out = c;
    return LM_OK;
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
    if (c->threads)
        snprintf(thr, sizeof thr, ":threads=%u", (unsigned)c->threads);
    if (c->attn != HX_ATTN_DEFAULT)
        snprintf(attn, sizeof attn, ":attn=%s", hx_attn_name(c->attn));
    if (c->rot_max != 0)
        snprintf(rot, sizeof rot, ":rot=%u/%u%s", (unsigned)c->rot_max, (unsigned)c->rot_keep,
                 c->rot_window ? "/window" : "");
    if (c->profile[0] != '\0')
        snprintf(prof, sizeof prof, ":profile=%.7s", c->profile);
    char spec[24] = "", turn[24] = "";
    if (c->spec != 0)
        snprintf(spec, sizeof spec, ":spec=%u", (unsigned)c->spec);
    if (c->turn != 0)
        snprintf(turn, sizeof turn, ":turn=%u", (unsigned)c->turn);
    return snprintf(buf, n, "%s:step=%s%s%s%s%s%s%s%s%s", c->backend, step, thr, attn, rot, turn,
                    prof, spec, c->draft[0] ? ":draft=" : "", c->draft);
}

hx_config hx_config_baseline(const hx_config *c)
{
    hx_config b = *c;
    b.step = 0;
    b.turn = 0;
    return b;
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
           a->rot_window == b->rot_window && a->turn == b->turn &&
           a->sr_seed == b->sr_seed && a->spec == b->spec && strcmp(a->draft, b->draft) == 0 &&
           strcmp(a->profile, b->profile) == 0;
}

int hx_config_cross_rot(hx_config **v, size_t *n, const char *what, const char *list,
                        lm_err *err)
{
    size_t n_rot = 1;
    for (const char *q = list; *q; ++q)
        n_rot += *q == ',';
    uint32_t(*rot)[3] = calloc(n_rot, sizeof *rot); /* max, keep, window */
    if (rot == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    const char *s = list;
    for (size_t i = 0; i < n_rot; ++i) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        bool window = false;
        if (!hx_rot_parse(s, len, &rot[i][0], &rot[i][1], &window)) {
            free(rot);
            return LM_FAIL(err, LM_E_INPUT, "%s '%s': bad value '%.*s' (none or MAX:KEEP[:window] "
                           "with MAX >= 2 and KEEP < MAX)", what, list, (int)len, s);
        }
        rot[i][2] = window;
        for (size_t j = 0; j < i; ++j)
            if (rot[j][0] == rot[i][0] && rot[j][1] == rot[i][1] && rot[j][2] == rot[i][2]) {
                free(rot);
                return LM_FAIL(err, LM_E_INPUT, "%s '%s': '%.*s' listed twice", what, list,
                               (int)len, s);
            }
        s = e ? e + 1 : s + len;
    }
    size_t total = n_rot * *n;
    hx_config *out = calloc(total ? total : 1, sizeof *out);
    if (out == NULL) {
        free(rot);
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    size_t k = 0;
    for (size_t r = 0; r < n_rot; ++r) /* rot varies slowest: one block of the list per value */
        for (size_t i = 0; i < *n; ++i) {
            out[k] = (*v)[i];
            out[k].rot_max = rot[r][0];
            out[k].rot_keep = rot[r][1];
            out[k].rot_window = rot[r][2] != 0;
            ++k;
        }
    free(rot);
    free(*v);
    *v = out;
    *n = k;
    return LM_OK;
}

int hx_config_cross_profile(hx_config **v, size_t *n, const char *what, const char *list,
                            lm_err *err)
{
    size_t n_prof = 1;
    for (const char *q = list; *q; ++q)
        n_prof += *q == ',';
    char(*prof)[8] = calloc(n_prof, sizeof *prof);
    if (prof == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    const char *s = list;
    for (size_t i = 0; i < n_prof; ++i) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (!hx_profile_parse(prof[i], s, len)) {
            free(prof);
            return LM_FAIL(err, LM_E_INPUT, "%s '%s': unknown profile '%.*s' (expected %s)", what,
                           list, (int)len, s, lm_profile_expected());
        }
        for (size_t j = 0; j < i; ++j)
            if (strcmp(prof[j], prof[i]) == 0) {
                free(prof);
                return LM_FAIL(err, LM_E_INPUT, "%s '%s': '%.*s' listed twice", what, list,
                               (int)len, s);
            }
        s = e ? e + 1 : s + len;
    }
    size_t total = n_prof * *n;
    hx_config *out = calloc(total ? total : 1, sizeof *out);
    if (out == NULL) {
        free(prof);
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    size_t k = 0;
    for (size_t r = 0; r < n_prof; ++r) /* profile varies slowest */
        for (size_t i = 0; i < *n; ++i) {
            out[k] = (*v)[i];
            memcpy(out[k].profile, prof[r], sizeof out[k].profile);
            ++k;
        }
    free(prof);
    free(*v);
    *v = out;
    *n = k;
    return LM_OK;
}

/* ---- axis lists ---- */

int hx_list_each(const char *what, const char *list,
                 int (*item)(void *ctx, const char *s, size_t len, lm_err *err), void *ctx,
                 lm_err *err)
{
    const char *p = list;
    for (;;) {
        const char *comma = strchr(p, ',');
        size_t len = comma ? (size_t)(comma - p) : strlen(p);
        const char *s = p;
        while (len && (*s == ' ' || *s == '\t'))
            ++s, --len;
        while (len && (s[len - 1] == ' ' || s[len - 1] == '\t'))
            --len;
        if (len == 0)
            return LM_FAIL(err, LM_E_INPUT, "%s '%s': empty list item", what, list);
        int rc = item(ctx, s, len, err);
        if (rc != LM_OK)
            return rc;
        if (comma == NULL)
            return LM_OK;
        p = comma + 1;
    }
}

typedef struct u32list {
    uint32_t *v;
    uint32_t n;
    const char *what;
    const char *list;
    bool allow_full;
    uint32_t max; /* largest value allowed */
} u32list;

static int push_u32(u32list *l, uint32_t x, lm_err *err)
{
    for (uint32_t i = 0; i < l->n; ++i)
        if (l->v[i] == x)
            return LM_FAIL(err, LM_E_INPUT, "%s '%s': value listed twice", l->what, l->list);
    uint32_t *nv = realloc(l->v, (l->n + 1) * sizeof *nv);
    if (nv == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    l->v = nv;
    l->v[l->n++] = x;
    return LM_OK;
}

static int u32_item(void *ctx, const char *s, size_t len, lm_err *err)
{
    u32list *l = ctx;
    uint64_t v;
    if (l->allow_full && len == 4 && memcmp(s, "full", 4) == 0)
        return push_u32(l, 0, err);
    if (!lm_parse_u64(s, len, 1, l->max, &v))
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': '%.*s' is not an integer in 1..%u%s", l->what,
                       l->list, (int)len, s, (unsigned)l->max, l->allow_full ? " or full" : "");
    return push_u32(l, (uint32_t)v, err);
}

static int parse_u32_list(uint32_t **out, uint32_t *n, const char *what, const char *list,
                          bool allow_full, uint32_t max, lm_err *err)
{
    u32list l = {NULL, 0, what, list, allow_full, max};
    int rc = hx_list_each(what, list, u32_item, &l, err);
    if (rc != LM_OK) {
        free(l.v);
        return rc;
    }
    *out = l.v;
    *n = l.n;
    return LM_OK;
}

int hx_axis_steps(uint32_t **out, uint32_t *n, const char *what, const char *list, lm_err *err)
{
    return parse_u32_list(out, n, what, list, true, UINT32_MAX, err);
}

int hx_axis_threads(uint32_t **out, uint32_t *n, const char *what, const char *list,
                    lm_err *err)
{
    return parse_u32_list(out, n, what, list, false, LM_MAX_THREADS, err);
}

typedef struct namelist {
    char (*v)[16];
    uint32_t n;
    const char *what, *list;
} namelist;

static int backend_item(void *ctx, const char *s, size_t len, lm_err *err)
{
    namelist *l = ctx;
    if (!lm_backend_known(s, len))
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': unknown backend '%.*s' (expected %s)", l->what,
                       l->list, (int)len, s, lm_backend_expected());
    for (uint32_t i = 0; i < l->n; ++i)
        if (strlen(l->v[i]) == len && memcmp(l->v[i], s, len) == 0)
            return LM_FAIL(err, LM_E_INPUT, "%s '%s': '%.*s' listed twice", l->what, l->list,
                           (int)len, s);
    char(*nb)[16] = realloc(l->v, (l->n + 1) * sizeof *nb);
    if (nb == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    l->v = nb;
    memset(nb[l->n], 0, 16);
    memcpy(nb[l->n++], s, len);
    return LM_OK;
}

int hx_axis_backends(char (**out)[16], uint32_t *n, const char *what, const char *list,
                     lm_err *err)
{
    namelist l = {NULL, 0, what, list};
    int rc = hx_list_each(what, list, backend_item, &l, err);
    if (rc != LM_OK) {
        free(l.v);
        return rc;
    }
    *out = l.v;
    *n = l.n;
    return LM_OK;
}

typedef struct attnlist {
    hx_attn *v;
    uint32_t n;
    const char *what, *list;
} attnlist;

static int attn_item(void *ctx, const char *s, size_t len, lm_err *err)
{
    attnlist *l = ctx;
    hx_attn a;
    if (field_is(s, len, "default"))
        a = HX_ATTN_DEFAULT;
    else if (field_is(s, len, "dense"))
        a = HX_ATTN_DENSE;
    else if (field_is(s, len, "stream"))
        a = HX_ATTN_STREAM;
    else
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': unknown variant '%.*s' (default, dense, stream)",
                       l->what, l->list, (int)len, s);
    for (uint32_t i = 0; i < l->n; ++i)
        if (l->v[i] == a)
            return LM_FAIL(err, LM_E_INPUT, "%s '%s': '%.*s' listed twice", l->what, l->list,
                           (int)len, s);
    hx_attn *na = realloc(l->v, (l->n + 1) * sizeof *na);
    if (na == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    l->v = na;
    l->v[l->n++] = a;
    return LM_OK;
}

int hx_axis_attn(hx_attn **out, uint32_t *n, const char *what, const char *list, lm_err *err)
{
    attnlist l = {NULL, 0, what, list};
    int rc = hx_list_each(what, list, attn_item, &l, err);
    if (rc != LM_OK) {
        free(l.v);
        return rc;
    }
    *out = l.v;
    *n = l.n;
    return LM_OK;
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
    /* The same product and order as a case file's (hx_case_configs): steps vary fastest. */
    size_t total = (size_t)n_backends * n_threads * n_attn * n_steps;
    hx_config *v = calloc(total, sizeof *v);
    if (v == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    size_t i = 0;
    for (uint32_t b = 0; b < n_backends; ++b)
        for (uint32_t t = 0; t < n_threads; ++t)
            for (uint32_t a = 0; a < n_attn; ++a)
                for (uint32_t s = 0; s < n_steps; ++s) {
                    memcpy(v[i].backend, backends[b], sizeof v[i].backend);
                    v[i].backend[sizeof v[i].backend - 1] = '\0';
                    v[i].threads = threads[t];
                    v[i].attn = attn[a];
                    v[i].step = steps[s];
                    ++i;
                }
    *out = v;
    *n = total;
    return LM_OK;
}
