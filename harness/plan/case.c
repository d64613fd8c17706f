/* case.c — INI case files (inih) to a validated struct hx_case. */
#include "plan/case.h"
#include "kvd_util.h"

#include "fs.h"
#include "kvd_engine.h"

#include <ini.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* --- the INI handler --- */

/* The keys besides the axes (hx_axis_find: steps, backends, threads, attn, rot, profile). */
enum { K_NAME, K_MODEL, K_PROMPT, K_TOKENS, K_N_GEN, K_PRECISION, K_STRICT, K_PROMPT_FILE,
       K_SPECIAL, K_TURN, K_INVARIANT, K_ENGINE, K_COUNT };
static const char *const keys[K_COUNT] = {"name",        "model",       "prompt",  "tokens",
                                          "n_gen",       "precision",   "strict_bits",
                                          "prompt_file", "special",     "turn",
                                          "invariant_bits", "engine"};
/* The section of an engine's knob axes. */
#define KNOBS_SECTION "knobs"

typedef struct parse_state {
    hx_case *c;
    bool seen[K_COUNT], seen_axis[HX_AXIS_COUNT];
    bool failed;
    char own_key[32]; /* the first key of kvdrift's own engine (an axis, turn, invariant_bits) */
    lm_err key_err; /* the first error, without its line (inih gives the line afterwards) */
} parse_state;

static char *dup_value(const char *v)
{
    size_t len = strlen(v);
    if (len >= 2 && v[0] == '"' && v[len - 1] == '"') {
        char *s = malloc(len - 1);
        if (s) {
            memcpy(s, v + 1, len - 2);
            s[len - 2] = '\0';
        }
        return s;
    }
    return strdup(v);
}

/* The prompt value with its escapes replaced: \n newline, \t tab, \r carriage return, \\
 * backslash, \" quote; any other backslash sequence is an error. */
static int unescape(char *s, lm_err *err)
{
    char *o = s;
    for (const char *p = s; *p; ++p) {
        if (*p != '\\') {
            *o++ = *p;
            continue;
        }
        switch (*++p) {
        case 'n': *o++ = '\n'; break;
        case 't': *o++ = '\t'; break;
        case 'r': *o++ = '\r'; break;
        case '\\': *o++ = '\\'; break;
        case '"': *o++ = '"'; break;
        default:
            return LM_FAIL(err, LM_E_INPUT, "prompt: unknown escape '\\%.1s' (\\n, \\t, \\r, "
                           "\\\\ and \\\" are known)", p);
        }
    }
    *o = '\0';
    return LM_OK;
}

/* prompt_file: the file's bytes as they are (relative paths from the case file's folder). */
static int read_prompt_file(hx_case *c, const char *value, lm_err *err)
{
    const char *slash = strrchr(c->file, '/');
    char path[4096];
    int n = value[0] == '/' || slash == NULL
                ? snprintf(path, sizeof path, "%s", value)
                : snprintf(path, sizeof path, "%.*s/%s", (int)(slash - c->file), c->file, value);
    if (n < 0 || (size_t)n >= sizeof path)
        return LM_FAIL(err, LM_E_INPUT, "prompt_file '%.64s': path too long", value);
    size_t len = 0;
    int rc = lm_read_file(&c->prompt, &len, path, 1u << 24, err);
    if (rc != LM_OK)
        return rc;
    if (strlen(c->prompt) != len || len == 0)
        return LM_FAIL(err, LM_E_INPUT, "prompt_file %s: %s", path,
                       len ? "contains a NUL byte" : "is empty");
    return LM_OK;
}

static int set_key(parse_state *ps, int k, const char *value, lm_err *err)
{
    hx_case *c = ps->c;
    switch (k) {
    case K_NAME:
        for (const char *p = value; *p; ++p)
            if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                  *p == '-' || *p == '_' || *p == '.'))
                return LM_FAIL(err, LM_E_INPUT, "name '%s': use letters, digits, '-', '_', '.'",
                               value);
        if (*value == '\0')
            return LM_FAIL(err, LM_E_INPUT, "name is empty");
        return (c->name = strdup(value)) ? LM_OK : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    case K_MODEL:
        if ((c->model_text = strdup(value)) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        return hx_model_spec_parse(&c->model, value, err);
    case K_PROMPT:
    case K_PROMPT_FILE:
    case K_TOKENS:
        if (ps->seen[K_PROMPT] + ps->seen[K_PROMPT_FILE] + ps->seen[K_TOKENS])
            return LM_FAIL(err, LM_E_INPUT, "give one of prompt, prompt_file or tokens");
        if (k == K_TOKENS)
            return hx_parse_tokens(&c->tokens, &c->n_tokens, value, err);
        if (k == K_PROMPT_FILE)
            return read_prompt_file(c, value, err);
        if ((c->prompt = dup_value(value)) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        if (unescape(c->prompt, err) != LM_OK)
            return err->code;
        return *c->prompt ? LM_OK : LM_FAIL(err, LM_E_INPUT, "prompt is empty");

    case K_ENGINE:
        if (*value == '\0')
            return LM_FAIL(err, LM_E_INPUT, "engine is empty (an adapter's name or path)");
        return (c->engine = strdup(value)) ? LM_OK : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    case K_TURN: return hx_setting_parse(&c->turn, HX_SET_TURN, "turn", value, err);
    case K_N_GEN: return hx_setting_parse(&c->n_gen, HX_SET_N_GEN, "n_gen", value, err);
    case K_PRECISION:
        return hx_setting_parse(&c->precision, HX_SET_PRECISION, "precision", value, err);
    case K_SPECIAL:
    case K_INVARIANT:
    case K_STRICT: {
        bool *b = k == K_STRICT ? &c->strict_bits : k == K_INVARIANT ? &c->invariant_bits
                                                                     : &c->special;
        if (strcmp(value, "true") == 0)
            *b = true;
        else if (strcmp(value, "false") == 0)
            *b = false;
        else
            return LM_FAIL(err, LM_E_INPUT, "%s '%s': expected true or false", keys[k], value);
        return LM_OK;
    }
    default:
        return LM_FAIL(err, LM_E_INTERNAL, "case: key %d", k);
    }
}

/* An axis key: its list checked by the sweep's parser (hx_axis_check) and kept as written. */
static int set_axis(hx_case *c, hx_axis axis, const char *key, const char *value, lm_err *err)
{
    int rc = hx_axis_check(axis, key, value, err);
    if (rc != LM_OK)
        return rc;
    const char **slot = hx_axes_list(&c->axes, axis);
    char *copy = strdup(value);
    if (copy == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    *slot = copy;
    return LM_OK;
}

/* A [knobs] line: KNOB = V1,V2,... kept as "KNOB=V1,V2,..." (hx_adapter_plan's axis). */
static int set_knob(hx_case *c, const char *name, const char *value, lm_err *err)
{
    size_t n = strlen(name);
    if (n == 0 || n >= HX_ADAPTER_NAME_MAX || strspn(name, "abcdefghijklmnopqrstuvwxyz"
                                                     "0123456789_") != n)
        return LM_FAIL(err, LM_E_INPUT, "[%s] %s: a knob's name is [a-z0-9_]{1,31}",
                       KNOBS_SECTION, name);
    for (uint32_t i = 0; i < c->n_knobs; ++i)
        if (strncmp(c->knobs[i], name, n) == 0 && c->knobs[i][n] == '=')
            return LM_FAIL(err, LM_E_INPUT, "[%s] %s given twice", KNOBS_SECTION, name);
    if (c->n_knobs == HX_ADAPTER_MAX_KNOBS)
        return LM_FAIL(err, LM_E_INPUT, "[%s]: at most %d knobs", KNOBS_SECTION,
                       HX_ADAPTER_MAX_KNOBS);
    if (*value == '\0')
        return LM_FAIL(err, LM_E_INPUT, "[%s] %s: no values", KNOBS_SECTION, name);
    char *kv = malloc(n + 1 + strlen(value) + 1);
    if (kv == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    sprintf(kv, "%s=%s", name, value);
    c->knobs[c->n_knobs++] = kv;
    return LM_OK;
}

static int handler(void *user, const char *section, const char *name, const char *value)
{
    parse_state *ps = user;
    if (ps->failed)
        return 0;
    int k = -1;
    if (strcmp(section, KNOBS_SECTION) == 0) {
        set_knob(ps->c, name, value, &ps->key_err);
    } else if (*section != '\0' && strcmp(section, "case") != 0) {
        LM_FAIL(&ps->key_err, LM_E_INPUT, "unknown section [%s] (keys go before any section or "
                                          "in [case]; an engine's knob axes in [%s])", section,
                KNOBS_SECTION);
    } else if ((k = hx_axis_find(name)) >= 0) {
        if (ps->seen_axis[k])
            LM_FAIL(&ps->key_err, LM_E_INPUT, "key '%s' given twice", name);
        else if (set_axis(ps->c, (hx_axis)k, name, value, &ps->key_err) == LM_OK)
            ps->seen_axis[k] = true;
    } else {
        for (int i = 0; i < K_COUNT; ++i)
            if (strcmp(name, keys[i]) == 0)
                k = i;
        if (k < 0)
            LM_FAIL(&ps->key_err, LM_E_INPUT, "unknown key '%s'", name);
        else if (ps->seen[k])
            LM_FAIL(&ps->key_err, LM_E_INPUT, "key '%s' given twice", name);
        else if (set_key(ps, k, value, &ps->key_err) == LM_OK)
            ps->seen[k] = true;
    }
    ps->failed = ps->key_err.code != LM_OK;
    const bool own = strcmp(section, KNOBS_SECTION) != 0 &&
                     (hx_axis_find(name) >= 0 || strcmp(name, keys[K_TURN]) == 0 ||
                      strcmp(name, keys[K_INVARIANT]) == 0);
    if (own && ps->own_key[0] == '\0')
        snprintf(ps->own_key, sizeof ps->own_key, "%s", name);
    return !ps->failed;
}

/* Required keys present; the numbers not given take their defaults (the axes not given stay
 * NULL: hx_axes_configs' defaults). */
static int apply_defaults(hx_case *c, const parse_state *ps, const char *file, lm_err *err)
{
    if (!ps->seen[K_NAME])
        return LM_FAIL(err, LM_E_INPUT, "%s: missing key 'name'", file);
    if (!ps->seen[K_MODEL])
        return LM_FAIL(err, LM_E_INPUT, "%s: missing key 'model'", file);
    if (!ps->seen[K_PROMPT] && !ps->seen[K_TOKENS] && !ps->seen[K_PROMPT_FILE])
        return LM_FAIL(err, LM_E_INPUT, "%s: missing key 'prompt', 'prompt_file' or 'tokens'",
                       file);
    if (!ps->seen[K_N_GEN])
        c->n_gen = HX_CASE_DEFAULT_N_GEN;
    if (!ps->seen[K_PRECISION])
        c->precision = HX_CASE_DEFAULT_PRECISION;
    if (!ps->seen[K_TURN])
        c->turn = HX_TURN_DEFAULT;
    return LM_OK;
}

/* The 1-based line of `key = ...` in text (its first occurrence), 0 when absent: where CI
 * annotations about that key point. */
static uint32_t key_line(const char *text, const char *key)
{
    size_t kl = strlen(key);
    uint32_t line = 1;
    for (const char *p = text; *p; ++line) {
        while (*p == ' ' || *p == '\t')
            ++p;
        if (strncmp(p, key, kl) == 0) {
            const char *q = p + kl;
            while (*q == ' ' || *q == '\t')
                ++q;
            if (*q == '=' || *q == ':')
                return line;
        }
        const char *nl = strchr(p, '\n');
        if (nl == NULL)
            break;
        p = nl + 1;
    }
    return 0;
}

/* An engine's case takes none of kvdrift's engine keys; [knobs] needs an engine. */
static int check_engine_keys(const hx_case *c, const parse_state *ps, const char *text,
                             const char *file, lm_err *err)
{
    if (c->engine == NULL) {
        if (c->n_knobs > 0)
            return LM_FAIL(err, LM_E_INPUT, "%s: [%s] without 'engine = ADAPTER' (knobs are "
                           "another engine's)", file, KNOBS_SECTION);
        return LM_OK;
    }
    if (ps->own_key[0] != '\0')
        return LM_FAIL(err, LM_E_INPUT, "%s:%u: '%s' is a key of kvdrift's own engine; with "
                       "engine = %s, sweep the adapter's knobs in [%s]", file,
                       (unsigned)key_line(text, ps->own_key), ps->own_key, c->engine,
                       KNOBS_SECTION);
    return LM_OK;
}

static void record_lines(hx_case *c, const char *text)
{
    c->line_name = key_line(text, "name");
    c->line_model = key_line(text, "model");
    c->line_input = key_line(text, c->prompt ? "prompt" : "tokens");
    if (c->line_input == 0)
        c->line_input = key_line(text, "prompt_file");
    c->line_steps = key_line(text, "steps");
}

int hx_case_parse_string(hx_case **out, const char *text, const char *file, lm_err *err)
{
    *out = NULL;
    /* inih's run-time options (this build exports them): heap line buffer so long prompts fit,
     * no inline comments (';' is prompt text), no multi-line values, stop at the first error so
     * the line it returns is the line of our first error. */
    ini_use_stack = false;
    ini_allow_realloc = true;
    ini_max_line = 1 << 20;
    ini_allow_inline_comments = false;
    ini_allow_multiline = false;
    ini_stop_on_first_error = true;
    hx_case *c = calloc(1, sizeof *c);
    if (c == NULL || (c->file = strdup(file)) == NULL) {
        free(c);
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    parse_state ps = {.c = c};
    int line = ini_parse_string(text, handler, &ps);
    int rc = LM_OK;
    if (line != 0) {
        if (ps.failed)
            rc = LM_FAIL(err, ps.key_err.code, "%s:%d: %s", file, line, ps.key_err.msg);
        else if (line > 0)
            rc = LM_FAIL(err, LM_E_INPUT, "%s:%d: malformed line (expected KEY = VALUE, "
                                          "[section] or a comment)", file, line);
        else
            rc = LM_FAIL(err, LM_E_NOMEM, "%s: out of memory while parsing", file);
    } else {
        rc = apply_defaults(c, &ps, file, err);
        if (rc == LM_OK)
            rc = check_engine_keys(c, &ps, text, file, err);
    }
    if (rc != LM_OK) {
        hx_case_free(c);
        return rc;
    }
    record_lines(c, text);
    *out = c;
    return LM_OK;
}

/* A relative model path written in the case file is relative to the case file's folder (an
 * installed kvdrift runs cases from anywhere); a path from ${KVDRIFT_MODELS} is taken as the
 * variable gives it. */
static int anchor_model_path(hx_case *c, const char *path, lm_err *err)
{
    const char *slash = strrchr(path, '/');
    if (c->model.synth || c->model.path[0] == '/' || slash == NULL ||
        strncmp(c->model_text, "${", 2) == 0)
        return LM_OK;
    size_t dl = (size_t)(slash - path), pl = strlen(c->model.path);
    char *np = malloc(dl + 1 + pl + 1);
    if (np == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    memcpy(np, path, dl);
    np[dl] = '/';
    memcpy(np + dl + 1, c->model.path, pl + 1);
    free(c->model.path);
    c->model.path = np;
    return LM_OK;
}

/* engine = a/b (a path: it holds a '/') relative to the case file's folder, as the model. */
static int anchor_engine_path(hx_case *c, const char *path, lm_err *err)
{
    const char *slash = strrchr(path, '/');
    if (c->engine == NULL || strchr(c->engine, '/') == NULL || c->engine[0] == '/' ||
        slash == NULL)
        return LM_OK;
    size_t dl = (size_t)(slash - path), el = strlen(c->engine);
    char *np = malloc(dl + 1 + el + 1);
    if (np == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    memcpy(np, path, dl);
    np[dl] = '/';
    memcpy(np + dl + 1, c->engine, el + 1);
    free(c->engine);
    c->engine = np;
    return LM_OK;
}

int hx_case_load(hx_case **out, const char *path, lm_err *err)
{
    *out = NULL;
    char *text;
    size_t n;
    int rc = lm_read_file(&text, &n, path, HX_CASE_MAX_BYTES, err);
    if (rc != LM_OK)
        return rc;
    if (strlen(text) != n) {
        free(text);
        return LM_FAIL(err, LM_E_INPUT, "%s: contains a NUL byte (not a case file)", path);
    }
    rc = hx_case_parse_string(out, text, path, err);
    free(text);
    if (rc == LM_OK && ((rc = anchor_model_path(*out, path, err)) != LM_OK ||
                        (rc = anchor_engine_path(*out, path, err)) != LM_OK)) {
        hx_case_free(*out);
        *out = NULL;
    }
    return rc;
}

void hx_case_free(hx_case *c)
{
    if (c == NULL)
        return;
    free(c->file);
    free(c->name);
    free(c->model_text);
    free(c->model.path);
    free(c->prompt);
    free(c->tokens);
    free(c->engine);
    for (uint32_t i = 0; i < c->n_knobs; ++i)
        free(c->knobs[i]);
    for (int i = 0; i < HX_AXIS_COUNT; ++i)
        free((void *)*hx_axes_list(&c->axes, (hx_axis)i));
    free(c);
}

int hx_case_configs(hx_config **out, size_t *n, const hx_case *c, lm_err *err)
{
    int rc = hx_axes_configs(out, n, &c->axes, err);
    if (rc == LM_OK && (rc = hx_config_add_turns(out, n, c->turn, err)) != LM_OK) {
        free(*out);
        *out = NULL;
        *n = 0;
    }
    return rc;
}
