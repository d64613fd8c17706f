/* golden.c — golden hash files (JSON via jansson): load, validate, look up, update, save. */
#include "judge/golden.h"
#include "kvd_util.h"

#include "fs.h"
#include "model/capture.h"
#include "kvd_version.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <xxhash.h>

struct hx_golden {
    json_t *root; /* owned */
};

static json_t *new_root(void)
{
    json_t *r = json_object();
    if (r == NULL)
        return NULL;
    if (json_object_set_new(r, "format", json_string("kvdrift-golden")) ||
        json_object_set_new(r, "version", json_integer(HX_GOLDEN_VERSION)) ||
        json_object_set_new(r, "platforms", json_object()) ||
        json_object_set_new(r, "cases", json_object())) {
        json_decref(r);
        return NULL;
    }
    return r;
}

int hx_golden_create(hx_golden **out, lm_err *err)
{
    *out = calloc(1, sizeof **out);
    if (*out == NULL || ((*out)->root = new_root()) == NULL) {
        free(*out);
        *out = NULL;
        return LM_FAIL(err, LM_E_NOMEM, "golden: out of memory");
    }
    return LM_OK;
}

void hx_golden_free(hx_golden *g)
{
    if (g == NULL)
        return;
    json_decref(g->root);
    free(g);
}

static bool is_hex(const char *s, size_t n)
{
    for (size_t i = 0; i < n; ++i)
        if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
            return false;
    return s[n] == '\0';
}

/* The input fields of an entry: all three, or none (an entry of a version-1 file, kept until
 * its configuration is blessed again; it is stale: hx_golden_input_differs). */
static const char *parse_input(const json_t *o, hx_golden_entry *e)
{
    const json_t *m = json_object_get(o, "model_xxh3_128"), *t = json_object_get(o, "tokens_xxh3_64"),
                 *v = json_object_get(o, "kvdrift_version");
    if (m == NULL && t == NULL && v == NULL)
        return NULL;
    if (!json_is_string(m) || !is_hex(json_string_value(m), 32))
        return "model_xxh3_128 is not 32 lowercase hex digits";
    if (!json_is_string(t) || !is_hex(json_string_value(t), 16))
        return "tokens_xxh3_64 is not 16 lowercase hex digits";
    if (!json_is_string(v) || json_string_length(v) == 0 ||
        json_string_length(v) >= sizeof e->version)
        return "kvdrift_version is not a short non-empty string";
    snprintf(e->model_hash, sizeof e->model_hash, "%s", json_string_value(m));
    snprintf(e->tokens_hash, sizeof e->tokens_hash, "%s", json_string_value(t));
    snprintf(e->version, sizeof e->version, "%s", json_string_value(v));
    const json_t *ev = json_object_get(o, "engine_version");
    if (ev != NULL && (!json_is_string(ev) || json_string_length(ev) == 0 ||
                       json_string_length(ev) >= sizeof e->engine_version ||
                       strlen(json_string_value(ev)) != json_string_length(ev)))
        return "engine_version is not a short non-empty string";
    if (ev != NULL)
        snprintf(e->engine_version, sizeof e->engine_version, "%s", json_string_value(ev));
    return NULL;
}

/* Parses one entry object; returns a reason string on failure. */
static const char *parse_entry(const json_t *o, hx_golden_entry *e)
{
    memset(e, 0, sizeof *e);
    if (!json_is_object(o))
        return "entry is not an object";
    const json_t *h = json_object_get(o, "xxh3_128"), *p = json_object_get(o, "position"),
                 *t = json_object_get(o, "top5");
    uint8_t bytes[16];
    lm_err ignore = {0};
    if (!json_is_string(h) || hx_hash_from_hex(bytes, json_string_value(h), &ignore) != LM_OK)
        return "xxh3_128 is not 32 hex digits";
    lm_hex_encode(e->hash_hex, bytes, 16);
    if (!json_is_integer(p) || json_integer_value(p) < 0 || json_integer_value(p) > UINT32_MAX)
        return "position is not an integer >= 0";
    e->position = (uint32_t)json_integer_value(p);
    if (!json_is_array(t) || json_array_size(t) > HX_TOPK)
        return "top5 is not an array of at most 5 items";
    for (size_t i = 0; i < json_array_size(t); ++i) {
        const json_t *it = json_array_get(t, i);
        const json_t *id = json_object_get(it, "id"), *lg = json_object_get(it, "logit");
        if (!json_is_integer(id) || json_integer_value(id) < 0 ||
            json_integer_value(id) > INT32_MAX || !json_is_number(lg))
            return "top5 item needs an integer id and a numeric logit";
        e->top_ids[i] = (int32_t)json_integer_value(id);
        e->top_logits[i] = (float)json_number_value(lg);
    }
    e->n_top = (uint32_t)json_array_size(t);
    return parse_input(o, e);
}

static int validate(const json_t *root, const char *path, lm_err *err)
{
    const json_t *f = json_object_get(root, "format"), *v = json_object_get(root, "version");
    if (!json_is_object(root) || !json_is_string(f) ||
        strcmp(json_string_value(f), "kvdrift-golden") != 0)
        return LM_FAIL(err, LM_E_INPUT, "%s: not a kvdrift golden file", path);
    if (!json_is_integer(v) || json_integer_value(v) < 1 ||
        json_integer_value(v) > HX_GOLDEN_VERSION)
        return LM_FAIL(err, LM_E_INPUT, "%s: golden format version is not 1..%d", path,
                       HX_GOLDEN_VERSION);
    const json_t *plats = json_object_get(root, "platforms"), *cases = json_object_get(root, "cases");
    if (!json_is_object(plats) || !json_is_object(cases))
        return LM_FAIL(err, LM_E_INPUT, "%s: 'platforms' and 'cases' must be objects", path);
    const json_t *meta = json_object_get(root, "metadata");
    if (meta != NULL && !json_is_object(meta))
        return LM_FAIL(err, LM_E_INPUT, "%s: 'metadata' must be an object", path);
    const char *k;
    const json_t *val;
    json_object_foreach((json_t *)plats, k, val)
        if (!json_is_string(val))
            return LM_FAIL(err, LM_E_INPUT, "%s: platforms.%s is not a string", path, k);
    const char *cn, *cfg, *fp;
    const json_t *cv, *fv, *ev;
    json_object_foreach((json_t *)cases, cn, cv) {
        if (!json_is_object(cv))
            return LM_FAIL(err, LM_E_INPUT, "%s: cases.%s is not an object", path, cn);
        json_object_foreach((json_t *)cv, cfg, fv) {
            if (!json_is_object(fv))
                return LM_FAIL(err, LM_E_INPUT, "%s: cases.%s.%s is not an object", path, cn, cfg);
            json_object_foreach((json_t *)fv, fp, ev) {
                hx_golden_entry e;
                const char *why = parse_entry(ev, &e);
                if (why)
                    return LM_FAIL(err, LM_E_INPUT, "%s: cases.%s.%s.%s: %s", path, cn, cfg, fp,
                                   why);
            }
        }
    }
    return LM_OK;
}

int hx_golden_load(hx_golden **out, const char *path, bool missing_ok, lm_err *err)
{
    *out = NULL;
    struct stat st;
    if (missing_ok && stat(path, &st) != 0 && errno == ENOENT)
        return hx_golden_create(out, err);
    char *text;
    size_t n;
    int rc = lm_read_file(&text, &n, path, HX_GOLDEN_MAX_BYTES, err);
    if (rc != LM_OK)
        return rc;
    json_error_t je;
    json_t *root = json_loadb(text, n, JSON_REJECT_DUPLICATES, &je);
    free(text);
    if (root == NULL)
        return LM_FAIL(err, LM_E_INPUT, "%s:%d: %s", path, je.line, je.text);
    rc = validate(root, path, err);
    if (rc != LM_OK) {
        json_decref(root);
        return rc;
    }
    hx_golden *g = calloc(1, sizeof *g);
    if (g == NULL) {
        json_decref(root);
        return LM_FAIL(err, LM_E_NOMEM, "golden: out of memory");
    }
    g->root = root;
    /* Saved as the current version: version-1 entries stay, stale, until re-blessed. */
    json_object_set_new(root, "version", json_integer(HX_GOLDEN_VERSION));
    *out = g;
    return LM_OK;
}

int hx_golden_find(const hx_golden *g, const char *case_name, const char *config,
                   const char *fp_id, hx_golden_entry *out, bool *found, lm_err *err)
{
    *found = false;
    const json_t *cases = json_object_get(g->root, "cases");
    const json_t *e = json_object_get(json_object_get(json_object_get(cases, case_name), config),
                                      fp_id);
    if (e == NULL)
        return LM_OK;
    const char *why = parse_entry(e, out);
    if (why)
        return LM_FAIL(err, LM_E_INPUT, "golden %s/%s/%s: %s", case_name, config, fp_id, why);
    *found = true;
    return LM_OK;
}

/* The child object `key` of parent, created when absent. */
static json_t *child(json_t *parent, const char *key)
{
    json_t *c = json_object_get(parent, key);
    if (c == NULL && json_object_set_new(parent, key, json_object()) == 0)
        c = json_object_get(parent, key);
    return json_is_object(c) ? c : NULL;
}

int hx_golden_set(hx_golden *g, const char *case_name, const char *config, const char *key_id,
                  const char *key_text, const hx_golden_entry *e, lm_err *err)
{
    json_t *top = json_array();
    for (uint32_t i = 0; top && i < e->n_top && i < HX_TOPK; ++i) {
        json_t *it = json_pack("{s:I,s:f}", "id", (json_int_t)e->top_ids[i], "logit",
                               (double)e->top_logits[i]);
        if (it == NULL || json_array_append_new(top, it)) {
            json_decref(top);
            top = NULL;
        }
    }
    json_t *obj = top ? json_pack("{s:s,s:I,s:o,s:s,s:s,s:s}", "xxh3_128", e->hash_hex,
                                  "position", (json_int_t)e->position, "top5", top,
                                  "model_xxh3_128", e->model_hash, "tokens_xxh3_64",
                                  e->tokens_hash, "kvdrift_version", e->version)
                      : NULL;
    if (obj != NULL && e->engine_version[0] != '\0' &&
        json_object_set_new(obj, "engine_version", json_string(e->engine_version))) {
        json_decref(obj);
        obj = NULL;
    }
    json_t *cfg = child(child(child(g->root, "cases"), case_name), config);
    json_t *plats = json_object_get(g->root, "platforms");
    if (obj == NULL || cfg == NULL || json_object_set_new(cfg, key_id, obj) ||
        json_object_set_new(plats, key_id, json_string(key_text)))
        return LM_FAIL(err, LM_E_INPUT, "golden: cannot add %s/%s (out of memory, or a "
                                        "non-finite logit in the summary)", case_name, config);
    return LM_OK;
}

int hx_golden_set_meta(hx_golden *g, const char *case_name, const hx_golden_meta *m,
                       lm_err *err)
{
    json_t *ids = json_array(), *ph = json_object();
    for (uint32_t i = 0; ids && i < m->n_prompt; ++i)
        if (json_array_append_new(ids, json_integer(m->prompt_ids[i])) != 0) {
            json_decref(ids);
            ids = NULL;
        }
    for (size_t i = 0; ph && i < m->n_phases; ++i)
        if (json_object_set_new(ph, m->phase_names[i], json_real(m->phase_s[i])) != 0) {
            json_decref(ph);
            ph = NULL;
        }
    json_t *o = ids && ph ? json_pack("{s:s,s:s,s:s,s:s,s:o,s:o}", "kvdrift_version",
                                      KVD_VERSION, "kvdrift_commit", lm_git_commit(),
                                      "command_line", m->command_line ? m->command_line : "",
                                      "blessed_utc", m->blessed_utc ? m->blessed_utc : "",
                                      "prompt_ids", ids, "phase_s", ph)
                          : (json_decref(ids), json_decref(ph), NULL);
    json_t *meta = child(g->root, "metadata");
    if (o == NULL || meta == NULL || json_object_set_new(meta, case_name, o) != 0)
        return LM_FAIL(err, LM_E_NOMEM, "golden: out of memory");
    return LM_OK;
}

size_t hx_golden_prune_stale(hx_golden *g, const char *case_name, const char *config,
                             const hx_golden_input *in)
{
    json_t *cfg = json_object_get(json_object_get(json_object_get(g->root, "cases"), case_name),
                                  config);
    const char *k;
    json_t *v, *tmp;
    size_t n = 0;
    json_object_foreach_safe(cfg, tmp, k, v) {
        hx_golden_entry e;
        if (parse_entry(v, &e) == NULL && !hx_golden_input_differs(&e, in, NULL, 0))
            continue;
        json_object_del(cfg, k);
        n++;
    }
    return n;
}

bool hx_golden_find_stale(const hx_golden *g, const char *case_name, const char *config,
                          const hx_golden_input *in, char *why, size_t cap)
{
    const json_t *cfg = json_object_get(
        json_object_get(json_object_get(g->root, "cases"), case_name), config);
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)cfg, k, v) {
        hx_golden_entry e;
        if (parse_entry(v, &e) == NULL && hx_golden_input_differs(&e, in, why, cap))
            return true;
    }
    return false;
}

size_t hx_golden_count(const hx_golden *g)
{
    size_t n = 0;
    const char *k1, *k2;
    json_t *v1, *v2;
    json_object_foreach(json_object_get(g->root, "cases"), k1, v1)
        json_object_foreach(v1, k2, v2)
            n += json_object_size(v2);
    return n;
}

/* Drops the "platforms" texts no entry uses any more (after pruning or re-keying). */
static void drop_unused_keys(json_t *root)
{
    json_t *plats = json_object_get(root, "platforms"), *v, *tmp;
    const char *id;
    json_object_foreach_safe(plats, tmp, id, v) {
        bool used = false;
        const char *k1, *k2;
        json_t *v1, *v2;
        json_object_foreach(json_object_get(root, "cases"), k1, v1) {
            json_object_foreach(v1, k2, v2)
                used = used || json_object_get(v2, id) != NULL;
        }
        if (!used)
            json_object_del(plats, id);
    }
}

int hx_golden_stage(lm_wfile **out, const hx_golden *g, const char *path, lm_err *err)
{
    *out = NULL;
    drop_unused_keys(g->root);
    char *text = json_dumps(g->root, JSON_SORT_KEYS | JSON_INDENT(2) | JSON_REAL_PRECISION(9));
    if (text == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "%s: cannot serialize golden file", path);
    size_t n = strlen(text);
    int rc = LM_OK;
    if (n + 1 > HX_GOLDEN_MAX_BYTES)
        rc = LM_FAIL(err, LM_E_INPUT, "%s: golden file would be %zu bytes, more than the limit "
                     "of %u bytes", path, n + 1, (unsigned)HX_GOLDEN_MAX_BYTES);
    lm_wfile *w = NULL;
    if (rc == LM_OK)
        rc = lm_wfile_open(&w, path, err);
    if (rc == LM_OK)
        rc = lm_wfile_write(w, text, n, err);
    if (rc == LM_OK)
        rc = lm_wfile_write(w, "\n", 1, err);
    if (rc == LM_OK)
        rc = lm_wfile_stage(w, err);
    free(text);
    if (rc != LM_OK) {
        lm_wfile_abort(w);
        return rc;
    }
    *out = w;
    return LM_OK;
}

int hx_golden_save(const hx_golden *g, const char *path, lm_err *err)
{
    lm_wfile *w;
    int rc = hx_golden_stage(&w, g, path, err);
    return rc == LM_OK ? lm_wfile_commit(w, err) : rc;
}

void hx_tokens_hash(char out[17], const int32_t *ids, uint32_t n)
{
    uint8_t *b = malloc((size_t)n * 4 + 1);
    XXH64_hash_t h = 0;
    if (b != NULL) {
        for (uint32_t i = 0; i < n; ++i)
            for (int k = 0; k < 4; ++k)
                b[4 * (size_t)i + (size_t)k] = (uint8_t)((uint32_t)ids[i] >> (8 * k));
        h = XXH3_64bits(b, (size_t)n * 4);
    }
    free(b);
    snprintf(out, 17, "%016llx", (unsigned long long)h);
}

bool hx_golden_input_differs(const hx_golden_entry *e, const hx_golden_input *in, char *why,
                             size_t cap)
{
    char tmp[256];
    if (why == NULL) {
        why = tmp;
        cap = sizeof tmp;
    }
    if (e->model_hash[0] == '\0')
        snprintf(why, cap, "blessed by an older kvdrift that did not record the model and "
                 "prompt (golden format 1)");
    else if (strcmp(e->model_hash, in->model_hash) != 0)
        snprintf(why, cap, "model changed (blessed on model %.12s..., now %.12s...)",
                 e->model_hash, in->model_hash);
    else if (strcmp(e->tokens_hash, in->tokens_hash) != 0)
        snprintf(why, cap, "prompt token ids changed (blessed %s, now %s)", e->tokens_hash,
                 in->tokens_hash);
    else if (strcmp(e->version, in->version) != 0)
        snprintf(why, cap, "blessed by kvdrift %s, this is %s", e->version, in->version);
    else if (strcmp(e->engine_version, in->engine_version ? in->engine_version : "") != 0)
        snprintf(why, cap, "engine version changed (blessed on '%.80s', now '%.80s')",
                 e->engine_version, in->engine_version ? in->engine_version : "");
    else
        return false;
    return true;
}

void hx_golden_entry_fill(hx_golden_entry *e, const uint8_t hash[16], const float *logits,
                          uint32_t n_vocab, uint32_t position, const hx_golden_input *in)
{
    memset(e, 0, sizeof *e);
    snprintf(e->model_hash, sizeof e->model_hash, "%s", in->model_hash);
    snprintf(e->tokens_hash, sizeof e->tokens_hash, "%s", in->tokens_hash);
    snprintf(e->version, sizeof e->version, "%s", in->version);
    snprintf(e->engine_version, sizeof e->engine_version, "%s",
             in->engine_version ? in->engine_version : "");
    lm_hex_encode(e->hash_hex, hash, 16);
    e->position = position;
    e->n_top = (uint32_t)hx_topk_f32(e->top_ids, logits, n_vocab, HX_TOPK);
    for (uint32_t i = 0; i < e->n_top; ++i)
        e->top_logits[i] = logits[e->top_ids[i]];
}
