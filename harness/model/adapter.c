/* adapter.c — an adapter's description parsed and checked, and the sweep's configurations of
 * its knobs (the contract is in adapter.h). */
#include "model/adapter.h"

#include "kvd_profile.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Whether s is 1..HX_ADAPTER_NAME_MAX-1 characters, each a letter, a digit or one of extra. */
static bool word_ok(const char *s, const char *extra, bool upper)
{
    size_t n = strlen(s);
    if (n == 0 || n >= HX_ADAPTER_NAME_MAX)
        return false;
    for (const char *p = s; *p; ++p) {
        const char ch = *p;
        bool ok = (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
                  (upper && ch >= 'A' && ch <= 'Z') || (ch != '\0' && strchr(extra, ch) != NULL);
        if (!ok)
            return false;
    }
    return true;
}

/* A string member of o (required or not) into buf[cap]; NULL or the reason. */
static const char *get_text(char *buf, size_t cap, const json_t *o, const char *key,
                            bool required)
{
    const json_t *v = json_object_get(o, key);
    if (v == NULL) {
        buf[0] = '\0';
        return required ? "missing" : NULL;
    }
    if (!json_is_string(v))
        return "not a string";
    if (json_string_length(v) >= cap || strlen(json_string_value(v)) != json_string_length(v))
        return "too long or holds a NUL";
    snprintf(buf, cap, "%s", json_string_value(v));
    return NULL;
}

static int parse_knob(hx_adapter_knob *k, const json_t *o, size_t i, const char *what,
                      lm_err *err)
{
    const char *why;
    char dflt[HX_ADAPTER_NAME_MAX];
    if (!json_is_object(o))
        return LM_FAIL(err, LM_E_INPUT, "%s --describe: knobs[%zu] is not an object", what, i);
    if ((why = get_text(k->name, sizeof k->name, o, "name", true)) != NULL ||
        !word_ok(k->name, "_", false))
        return LM_FAIL(err, LM_E_INPUT, "%s --describe: knobs[%zu].name %s", what, i,
                       why ? why : "is not [a-z0-9_]{1,31}");
    const json_t *vals = json_object_get(o, "values");
    if (!json_is_array(vals) || json_array_size(vals) == 0 ||
        json_array_size(vals) > HX_ADAPTER_MAX_VALUES)
        return LM_FAIL(err, LM_E_INPUT, "%s --describe: knob %s: values must be an array of "
                       "1..%d strings", what, k->name, HX_ADAPTER_MAX_VALUES);
    k->n_values = (uint32_t)json_array_size(vals);
    for (uint32_t j = 0; j < k->n_values; ++j) {
        const json_t *v = json_array_get(vals, j);
        if (!json_is_string(v) || json_string_length(v) >= HX_ADAPTER_NAME_MAX ||
            !word_ok(json_string_value(v), "_.+-", true))
            return LM_FAIL(err, LM_E_INPUT, "%s --describe: knob %s: value %u is not a string "
                           "of [A-Za-z0-9_.+-]{1,31}", what, k->name, (unsigned)j);
        snprintf(k->values[j], sizeof k->values[j], "%s", json_string_value(v));
        for (uint32_t q = 0; q < j; ++q)
            if (strcmp(k->values[q], k->values[j]) == 0)
                return LM_FAIL(err, LM_E_INPUT, "%s --describe: knob %s: value '%s' listed "
                               "twice", what, k->name, k->values[j]);
    }
    if ((why = get_text(dflt, sizeof dflt, o, "default", true)) != NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s --describe: knob %s: default %s", what, k->name, why);
    k->def = UINT32_MAX;
    for (uint32_t j = 0; j < k->n_values; ++j)
        if (strcmp(k->values[j], dflt) == 0)
            k->def = j;
    if (k->def == UINT32_MAX)
        return LM_FAIL(err, LM_E_INPUT, "%s --describe: knob %s: default '%s' is not among its "
                       "values", what, k->name, dflt);
    const json_t *prof = json_object_get(o, "profiles");
    if (prof != NULL && !json_is_object(prof))
        return LM_FAIL(err, LM_E_INPUT, "%s --describe: knob %s: profiles is not an object",
                       what, k->name);
    const char *key;
    const json_t *pv;
    json_object_foreach((json_t *)prof, key, pv) {
        uint32_t j = 0;
        while (j < k->n_values && strcmp(k->values[j], key) != 0)
            ++j;
        if (j == k->n_values)
            return LM_FAIL(err, LM_E_INPUT, "%s --describe: knob %s: profiles names '%s', not "
                           "one of its values", what, k->name, key);
        const lm_profile *p = json_is_string(pv) ? lm_profile_find(json_string_value(pv)) : NULL;
        if (p == NULL || json_string_length(pv) == 0)
            return LM_FAIL(err, LM_E_INPUT, "%s --describe: knob %s: profile of '%s' is not %s",
                           what, k->name, key, lm_profile_expected());
        snprintf(k->profile[j], sizeof k->profile[j], "%s", p->name);
    }
    return LM_OK;
}

int hx_adapter_desc_parse(hx_adapter_desc *out, const char *text, size_t n, const char *what,
                          lm_err *err)
{
    memset(out, 0, sizeof *out);
    json_error_t je;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    if (root == NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s --describe: not one JSON document on stdout (line "
                       "%d: %s)", what, je.line, je.text);
    int rc = LM_OK;
    const char *why = NULL;
    const json_t *proto = json_object_get(root, "protocol");
    const json_t *knobs = json_object_get(root, "knobs");
    char prof[16];
    if (!json_is_object(root))
        rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: not a JSON object", what);
    else if (!json_is_integer(proto) || json_integer_value(proto) != 1)
        rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: protocol must be 1 (this kvdrift speaks "
                     "adapter protocol 1)", what);
    else if ((why = get_text(out->adapter, sizeof out->adapter, root, "adapter", true)) ||
             !word_ok(out->adapter, "_.-", true))
        rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: adapter %s", what,
                     why ? why : "is not [A-Za-z0-9_.-]{1,31}");
    else if ((why = get_text(out->engine, sizeof out->engine, root, "engine", true)))
        rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: engine %s", what, why);
    else if ((why = get_text(out->engine_version, sizeof out->engine_version, root,
                             "engine_version", true)) || out->engine_version[0] == '\0')
        rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: engine_version %s", what,
                     why ? why : "is empty");
    else if ((why = get_text(out->engine_build, sizeof out->engine_build, root, "engine_build",
                             false)))
        rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: engine_build %s", what, why);
    else if ((why = get_text(prof, sizeof prof, root, "profile", false)) ||
             lm_profile_find(prof) == NULL)
        rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: profile %s", what,
                     why ? why : "is not a known profile");
    else if (!json_is_array(knobs) || json_array_size(knobs) > HX_ADAPTER_MAX_KNOBS)
        rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: knobs must be an array of at most %d "
                     "knobs", what, HX_ADAPTER_MAX_KNOBS);
    if (rc == LM_OK) {
        snprintf(out->profile, sizeof out->profile, "%s", lm_profile_find(prof)->name);
        out->n_knobs = (uint32_t)json_array_size(knobs);
    }
    for (uint32_t i = 0; rc == LM_OK && i < out->n_knobs; ++i) {
        rc = parse_knob(&out->knobs[i], json_array_get(knobs, i), i, what, err);
        for (uint32_t j = 0; rc == LM_OK && j < i; ++j)
            if (strcmp(out->knobs[j].name, out->knobs[i].name) == 0)
                rc = LM_FAIL(err, LM_E_INPUT, "%s --describe: knob %s listed twice", what,
                             out->knobs[i].name);
    }
    json_decref(root);
    return rc;
}

void hx_adapter_default(hx_adapter_config *out, const hx_adapter_desc *d)
{
    memset(out, 0, sizeof *out);
    for (uint32_t i = 0; i < d->n_knobs; ++i)
        out->value[i] = (uint8_t)d->knobs[i].def;
}

bool hx_adapter_config_equal(const hx_adapter_config *a, const hx_adapter_config *b,
                             const hx_adapter_desc *d)
{
    return memcmp(a->value, b->value, d->n_knobs) == 0;
}

/* One axis "KEY=V1,V2" into knob index *k and its value indices vals [*nv]. */
static int parse_axis(uint32_t *k, uint8_t *vals, uint32_t *nv, const hx_adapter_desc *d,
                      const char *axis, lm_err *err)
{
    const char *eq = strchr(axis, '=');
    if (eq == NULL || eq == axis)
        return LM_FAIL(err, LM_E_INPUT, "--axis '%s': expected KEY=V1,V2,...", axis);
    size_t kl = (size_t)(eq - axis);
    for (*k = 0; *k < d->n_knobs; ++*k)
        if (strlen(d->knobs[*k].name) == kl && strncmp(d->knobs[*k].name, axis, kl) == 0)
            break;
    if (*k == d->n_knobs) {
        char names[HX_ADAPTER_MAX_KNOBS * HX_ADAPTER_NAME_MAX] = "";
        for (uint32_t i = 0; i < d->n_knobs; ++i)
            snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", i ? ", " : "",
                     d->knobs[i].name);
        return LM_FAIL(err, LM_E_INPUT, "--axis '%.*s': adapter %s has no such knob (it has: "
                       "%s)", (int)kl, axis, d->adapter, d->n_knobs ? names : "none");
    }
    const hx_adapter_knob *kn = &d->knobs[*k];
    *nv = 0;
    for (const char *s = eq + 1;;) {
        const char *e = strchr(s, ',');
        size_t l = e ? (size_t)(e - s) : strlen(s);
        uint32_t j = 0;
        while (j < kn->n_values && !(strlen(kn->values[j]) == l && strncmp(kn->values[j], s, l) == 0))
            ++j;
        if (j == kn->n_values) {
            char list[HX_ADAPTER_MAX_VALUES * HX_ADAPTER_NAME_MAX] = "";
            for (uint32_t i = 0; i < kn->n_values; ++i)
                snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", i ? "," : "",
                         kn->values[i]);
            return LM_FAIL(err, LM_E_INPUT, "--axis %s: value '%.*s' is not one adapter %s "
                           "declares (%s)", kn->name, (int)l, s, d->adapter, list);
        }
        for (uint32_t q = 0; q < *nv; ++q)
            if (vals[q] == j)
                return LM_FAIL(err, LM_E_INPUT, "--axis %s: value '%s' given twice", kn->name,
                               kn->values[j]);
        vals[(*nv)++] = (uint8_t)j;
        if (e == NULL)
            break;
        s = e + 1;
    }
    return LM_OK;
}

int hx_adapter_plan(hx_adapter_config **out, size_t *n, const hx_adapter_desc *d,
                    const char *const *axes, size_t n_axes, lm_err *err)
{
    *out = NULL;
    *n = 0;
    uint32_t knob[HX_ADAPTER_MAX_KNOBS], nv[HX_ADAPTER_MAX_KNOBS];
    uint8_t vals[HX_ADAPTER_MAX_KNOBS][HX_ADAPTER_MAX_VALUES];
    if (n_axes > HX_ADAPTER_MAX_KNOBS)
        return LM_FAIL(err, LM_E_INPUT, "--axis: at most %d axes", HX_ADAPTER_MAX_KNOBS);
    size_t total = 1;
    for (size_t a = 0; a < n_axes; ++a) {
        int rc = parse_axis(&knob[a], vals[a], &nv[a], d, axes[a], err);
        if (rc != LM_OK)
            return rc;
        for (size_t b = 0; b < a; ++b)
            if (knob[b] == knob[a])
                return LM_FAIL(err, LM_E_INPUT, "--axis %s given twice", d->knobs[knob[a]].name);
        total *= nv[a];
        if (total > 4096)
            return LM_FAIL(err, LM_E_INPUT, "--axis: more than 4096 configurations");
    }
    hx_adapter_config *v = calloc(total, sizeof *v);
    if (v == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < total; ++i) {
        hx_adapter_default(&v[i], d);
        size_t r = i;
        for (size_t a = n_axes; a-- > 0;) {
            v[i].value[knob[a]] = vals[a][r % nv[a]];
            r /= nv[a];
        }
    }
    *out = v;
    *n = total;
    return LM_OK;
}

void hx_adapter_config_name(char *buf, size_t cap, const hx_adapter_desc *d,
                            const hx_adapter_config *c)
{
    int w = snprintf(buf, cap, "%s", d->adapter);
    for (uint32_t i = 0; i < d->n_knobs && w >= 0 && (size_t)w < cap; ++i)
        if (c->value[i] != d->knobs[i].def)
            w += snprintf(buf + w, cap - (size_t)w, ":%s=%s", d->knobs[i].name,
                          d->knobs[i].values[c->value[i]]);
}

const char *hx_adapter_profile(const hx_adapter_desc *d, const hx_adapter_config *c,
                               char *passed_over, size_t cap)
{
    const char *p = NULL;
    if (passed_over && cap)
        passed_over[0] = '\0';
    for (uint32_t i = 0; i < d->n_knobs; ++i) {
        const char *q = d->knobs[i].profile[c->value[i]];
        if (q[0] == '\0')
            continue;
        if (p == NULL)
            p = q;
        else if (strcmp(p, q) != 0 && passed_over && cap) {
            size_t l = strlen(passed_over);
            snprintf(passed_over + l, cap - l, "%s%s=%s (%s)", l ? ", " : "", d->knobs[i].name,
                     d->knobs[i].values[c->value[i]], q);
        }
    }
    return p ? p : d->profile;
}
