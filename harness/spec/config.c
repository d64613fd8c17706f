/* config.c — CONFIG strings (`blas:step=64:attn=dense`) to and from struct hx_config. */
#include "config.h"

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
static bool parse_pos_u32(const char *s, size_t len, uint32_t *out)
{
    if (len == 0 || len > 10)
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < len; ++i) {
        if (s[i] < '0' || s[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(s[i] - '0');
    }
    if (v == 0 || v > UINT32_MAX)
        return false;
    *out = (uint32_t)v;
    return true;
}

static bool field_is(const char *f, size_t len, const char *word)
{
    return strlen(word) == len && memcmp(f, word, len) == 0;
}

/* KEEP 0 is allowed, so it is special-cased (parse_pos_u32 wants >= 1). */
bool hx_rot_parse(const char *s, size_t len, uint32_t *max, uint32_t *keep)
{
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
    uint32_t k = 0;
    if (field_is(slash + 1, klen, "0"))
        k = 0;
    else if (!parse_pos_u32(slash + 1, klen, &k))
        return false;
    if (!parse_pos_u32(s, mlen, max) || *max < 2 || k >= *max)
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
    bool seen_spec = false, seen_draft = false, seen_prof = false;
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
            ok = field_is(val, vlen, "full") ? (c.step = 0, true) : parse_pos_u32(val, vlen, &c.step);
        } else if (field_is(f, klen, "threads")) {
            seen = &seen_threads;
            ok = parse_pos_u32(val, vlen, &c.threads);
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
            ok = memchr(val, ':', vlen) == NULL && hx_rot_parse(val, vlen, &c.rot_max, &c.rot_keep);
        } else if (field_is(f, klen, "profile")) {
            seen = &seen_prof;
            ok = hx_profile_parse(c.profile, val, vlen);
        } else if (field_is(f, klen, "spec")) {
            seen = &seen_spec;
            ok = field_is(val, vlen, "0") ? (c.spec = 0, true) : parse_pos_u32(val, vlen, &c.spec);
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
                           "config '%s': unknown key '%.*s' (step, threads, attn, rot, profile, "
                           "spec, draft)", s, (int)klen, f);
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
    char step[16], thr[24] = "", attn[24] = "", rot[32] = "", prof[24] = "";
    if (c->step == 0)
        snprintf(step, sizeof step, "full");
    else
        snprintf(step, sizeof step, "%u", (unsigned)c->step);
    if (c->threads)
        snprintf(thr, sizeof thr, ":threads=%u", (unsigned)c->threads);
    if (c->attn != HX_ATTN_DEFAULT)
        snprintf(attn, sizeof attn, ":attn=%s", hx_attn_name(c->attn));
    if (c->rot_max != 0)
        snprintf(rot, sizeof rot, ":rot=%u/%u", (unsigned)c->rot_max, (unsigned)c->rot_keep);
    if (c->profile[0] != '\0')
        snprintf(prof, sizeof prof, ":profile=%.7s", c->profile);
    char spec[24] = "";
    if (c->spec != 0)
        snprintf(spec, sizeof spec, ":spec=%u", (unsigned)c->spec);
    return snprintf(buf, n, "%s:step=%s%s%s%s%s%s%s%s", c->backend, step, thr, attn, rot, prof,
                    spec, c->draft[0] ? ":draft=" : "", c->draft);
}

hx_config hx_config_baseline(const hx_config *c)
{
    hx_config b = *c;
    b.step = 0;
    return b;
}

bool hx_config_equal(const hx_config *a, const hx_config *b)
{
    return strcmp(a->backend, b->backend) == 0 && a->step == b->step && a->threads == b->threads &&
           a->attn == b->attn && a->rot_max == b->rot_max && a->rot_keep == b->rot_keep &&
           a->sr_seed == b->sr_seed && a->spec == b->spec && strcmp(a->draft, b->draft) == 0 &&
           strcmp(a->profile, b->profile) == 0;
}

int hx_config_cross_rot(hx_config **v, size_t *n, const char *what, const char *list,
                        lm_err *err)
{
    size_t n_rot = 1;
    for (const char *q = list; *q; ++q)
        n_rot += *q == ',';
    uint32_t(*rot)[2] = calloc(n_rot, sizeof *rot);
    if (rot == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    const char *s = list;
    for (size_t i = 0; i < n_rot; ++i) {
        const char *e = strchr(s, ',');
        size_t len = e ? (size_t)(e - s) : strlen(s);
        if (!hx_rot_parse(s, len, &rot[i][0], &rot[i][1])) {
            free(rot);
            return LM_FAIL(err, LM_E_INPUT, "%s '%s': bad value '%.*s' (none or MAX:KEEP with "
                           "MAX >= 2 and KEEP < MAX)", what, list, (int)len, s);
        }
        for (size_t j = 0; j < i; ++j)
            if (rot[j][0] == rot[i][0] && rot[j][1] == rot[i][1]) {
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
