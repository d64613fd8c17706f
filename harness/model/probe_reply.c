/* probe_reply.c — parsing of /v1/completions replies and of a server's self-description
 * (contract in probe_reply.h). */
#include "model/probe_reply.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A log-probability may round above 0 by this much (a probability of 1 computed in float). */
#define LOGPROB_SLACK 1e-6

static void tok_clear(hx_probe_tok *t);

void hx_probe_reply_free(hx_probe_reply *r)
{
    if (r == NULL)
        return;
    for (uint32_t i = 0; i < r->n; ++i)
        tok_clear(&r->toks[i]);
    free(r->toks);
    free(r->text);
    free(r);
}

static char *dup_text(const json_t *s)
{
    const char *t = json_is_string(s) ? json_string_value(s) : "";
    size_t n = json_is_string(s) ? json_string_length(s) : 0;
    char *d = malloc(n + 1);
    if (d != NULL) {
        memcpy(d, t, n);
        d[n] = '\0';
    }
    return d;
}

/* "token_id:N" -> N; -1 otherwise. */
static int32_t id_of_text(const char *t)
{
    if (strncmp(t, "token_id:", 9) != 0)
        return -1;
    char *end;
    long v = strtol(t + 9, &end, 10);
    return *end == '\0' && end != t + 9 && v >= 0 && v < INT32_MAX ? (int32_t)v : -1;
}

static int get_logprob(double *out, const json_t *v, uint32_t at, lm_err *err)
{
    if (!json_is_number(v))
        return LM_FAIL(err, LM_E_INPUT, "reply: log-probability of token %u is not a number",
                       (unsigned)at);
    *out = json_number_value(v);
    if (!isfinite(*out) || *out > LOGPROB_SLACK)
        return LM_FAIL(err, LM_E_INPUT, "reply: log-probability %g of token %u is not a "
                       "log-probability", *out, (unsigned)at);
    return LM_OK;
}

static int get_id(int32_t *out, const json_t *v, uint32_t at, lm_err *err)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= INT32_MAX)
        return LM_FAIL(err, LM_E_INPUT, "reply: token %u has no valid id", (unsigned)at);
    *out = (int32_t)json_integer_value(v);
    return LM_OK;
}

/* OpenAI legacy: tokens, token_logprobs, top_logprobs. */
static int parse_legacy(hx_probe_reply *r, const json_t *lp, lm_err *err)
{
    const json_t *tokens = json_object_get(lp, "tokens"),
                 *tlp = json_object_get(lp, "token_logprobs"),
                 *top = json_object_get(lp, "top_logprobs"),
                 *offs = json_object_get(lp, "text_offset");
    if (!json_is_array(tokens) || !json_is_array(tlp))
        return LM_FAIL(err, LM_E_INPUT, "reply: logprobs without tokens and token_logprobs "
                       "arrays");
    size_t n = json_array_size(tokens);
    if (json_array_size(tlp) != n || (top != NULL && !json_is_null(top) &&
                                      (!json_is_array(top) || json_array_size(top) != n)))
        return LM_FAIL(err, LM_E_INPUT, "reply: logprobs arrays of different lengths (tokens "
                       "%zu, token_logprobs %zu, top_logprobs %zu)", n, json_array_size(tlp),
                       json_is_array(top) ? json_array_size(top) : (size_t)0);
    if (n > UINT32_MAX / 2 || (r->toks = calloc(n ? n : 1, sizeof *r->toks)) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; ++i) {
        hx_probe_tok *t = &r->toks[r->n++];
        const json_t *ti = json_array_get(tokens, i), *li = json_array_get(tlp, i);
        const json_t *oi_off = json_is_array(offs) ? json_array_get(offs, i) : NULL;
        t->offset = json_is_integer(oi_off) && json_integer_value(oi_off) >= 0
                        ? json_integer_value(oi_off)
                        : -1;
        if (!json_is_string(ti))
            return LM_FAIL(err, LM_E_INPUT, "reply: token %zu is not a string", i);
        if ((t->text = dup_text(ti)) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        t->id = id_of_text(t->text);
        t->has_logprob = !json_is_null(li);
        int rc;
        if (t->has_logprob && (rc = get_logprob(&t->logprob, li, (uint32_t)i, err)) != LM_OK)
            return rc;
        const json_t *oi = json_is_array(top) ? json_array_get(top, i) : NULL;
        if (oi == NULL || json_is_null(oi))
            continue;
        if (!json_is_object(oi))
            return LM_FAIL(err, LM_E_INPUT, "reply: top_logprobs[%zu] is not an object", i);
        size_t k = json_object_size(oi);
        if (k == 0) /* no alternatives: top stays NULL, as the header promises */
            continue;
        if ((t->top = calloc(k, sizeof *t->top)) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        const char *key;
        const json_t *v;
        json_object_foreach((json_t *)oi, key, v) {
            hx_probe_alt *a = &t->top[t->k++];
            json_t *ks = json_string(key);
            a->text = ks ? dup_text(ks) : NULL;
            json_decref(ks);
            if (a->text == NULL)
                return LM_FAIL(err, LM_E_NOMEM, "out of memory");
            a->id = id_of_text(a->text);
            if ((rc = get_logprob(&a->logprob, v, (uint32_t)i, err)) != LM_OK)
                return rc;
        }
    }
    return LM_OK;
}

/* llama-server: content [{id, token, logprob, top_logprobs: [{id, token, logprob}]}]. */
static int parse_content(hx_probe_reply *r, const json_t *content, lm_err *err)
{
    size_t n = json_array_size(content);
    if (n > UINT32_MAX / 2 || (r->toks = calloc(n ? n : 1, sizeof *r->toks)) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; ++i) {
        const json_t *e = json_array_get(content, i);
        hx_probe_tok *t = &r->toks[r->n++];
        int rc;
        t->offset = -1;
        if (!json_is_object(e))
            return LM_FAIL(err, LM_E_INPUT, "reply: logprobs.content[%zu] is not an object", i);
        if ((t->text = dup_text(json_object_get(e, "token"))) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        if ((rc = get_id(&t->id, json_object_get(e, "id"), (uint32_t)i, err)) != LM_OK ||
            (rc = get_logprob(&t->logprob, json_object_get(e, "logprob"), (uint32_t)i, err)) !=
                LM_OK)
            return rc;
        t->has_logprob = true;
        const json_t *top = json_object_get(e, "top_logprobs");
        if (top == NULL || json_is_null(top))
            continue;
        if (!json_is_array(top))
            return LM_FAIL(err, LM_E_INPUT, "reply: top_logprobs of token %zu is not an array",
                           i);
        size_t k = json_array_size(top);
        if (k == 0) /* no alternatives: top stays NULL, as the header promises */
            continue;
        if ((t->top = calloc(k, sizeof *t->top)) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        for (size_t j = 0; j < k; ++j) {
            const json_t *a = json_array_get(top, j);
            hx_probe_alt *al = &t->top[t->k++];
            if (!json_is_object(a))
                return LM_FAIL(err, LM_E_INPUT, "reply: top_logprobs[%zu] of token %zu is not "
                               "an object", j, i);
            if ((al->text = dup_text(json_object_get(a, "token"))) == NULL)
                return LM_FAIL(err, LM_E_NOMEM, "out of memory");
            if ((rc = get_id(&al->id, json_object_get(a, "id"), (uint32_t)i, err)) != LM_OK ||
                (rc = get_logprob(&al->logprob, json_object_get(a, "logprob"), (uint32_t)i,
                                  err)) != LM_OK)
                return rc;
        }
    }
    return LM_OK;
}

static void tok_clear(hx_probe_tok *t)
{
    free(t->text);
    for (uint32_t j = 0; j < t->k; ++j)
        free(t->top[j].text);
    free(t->top);
    memset(t, 0, sizeof *t);
}

/* A token id written as a JSON object key ("123"): 0..INT32_MAX - 1; -1 otherwise. */
static int32_t id_of_key(const char *k)
{
    char *end;
    long long v = strtoll(k, &end, 10);
    return *k >= '0' && *k <= '9' && *end == '\0' && v >= 0 && v < INT32_MAX ? (int32_t)v : -1;
}

/* One entry of prompt_logprobs (an object id -> {logprob, rank, decoded_token}) as token t of
 * the prompt: own is its id (prompt_token_ids), or -1 for the entry's first key. */
static int prompt_entry(hx_probe_tok *t, const json_t *e, int32_t own, size_t at, lm_err *err)
{
    t->offset = -1;
    t->id = own;
    const size_t k = json_object_size(e);
    if (k == 0)
        return LM_FAIL(err, LM_E_INPUT, "reply: prompt_logprobs[%zu] is empty", at);
    if ((t->top = calloc(k, sizeof *t->top)) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)e, key, v) {
        hx_probe_alt *a = &t->top[t->k++];
        const json_t *lp = json_object_get(v, "logprob"), *rank = json_object_get(v, "rank");
        if ((a->id = id_of_key(key)) < 0)
            return LM_FAIL(err, LM_E_INPUT, "reply: prompt_logprobs[%zu]: key '%.40s' is not a "
                           "token id", at, key);
        if (!json_is_object(v))
            return LM_FAIL(err, LM_E_INPUT, "reply: prompt_logprobs[%zu][%d] is not an object",
                           at, (int)a->id);
        if (rank != NULL && !json_is_null(rank) &&
            (!json_is_integer(rank) || json_integer_value(rank) < 1))
            return LM_FAIL(err, LM_E_INPUT, "reply: prompt_logprobs[%zu][%d]: rank is not an "
                           "integer >= 1", at, (int)a->id);
        if ((a->text = dup_text(json_object_get(v, "decoded_token"))) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        int rc = get_logprob(&a->logprob, lp, (uint32_t)at, err);
        if (rc != LM_OK)
            return rc;
        if (t->id < 0)
            t->id = a->id; /* vLLM lists the prompt's own token first */
        if (a->id == t->id && t->text == NULL) {
            t->logprob = a->logprob;
            t->has_logprob = true;
            if ((t->text = strdup(a->text)) == NULL)
                return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        }
    }
    if (!t->has_logprob)
        return LM_FAIL(err, LM_E_INPUT, "reply: prompt token %d is not in its own "
                       "prompt_logprobs[%zu]", (int)t->id, at);
    return LM_OK;
}

/* vLLM's choices[0].prompt_logprobs [P] (contract in probe_reply.h): the prompt's tokens into
 * p [*n], ids from prompt_token_ids [P] when c0 has them. */
static int parse_prompt_lp(hx_probe_tok *p, uint32_t *n, const json_t *c0, const json_t *plp,
                           lm_err *err)
{
    const json_t *ids = json_object_get(c0, "prompt_token_ids");
    const size_t np = json_array_size(plp);
    *n = 0;
    if (ids != NULL && !json_is_null(ids) &&
        (!json_is_array(ids) || json_array_size(ids) != np))
        return LM_FAIL(err, LM_E_INPUT, "reply: prompt_token_ids is not a list of %zu ids", np);
    for (size_t i = 0; i < np; ++i) {
        const json_t *e = json_array_get(plp, i);
        int32_t own = -1;
        int rc;
        if (json_is_array(ids) && (rc = get_id(&own, json_array_get(ids, i), (uint32_t)i,
                                               err)) != LM_OK)
            return rc;
        if (json_is_null(e) && i == 0) {
            if (own < 0) /* nothing scored, no token named: left out, as BOS by other servers */
                continue;
            hx_probe_tok *t = &p[(*n)++];
            t->id = own;
            t->offset = -1;
            if ((t->text = dup_text(NULL)) == NULL)
                return LM_FAIL(err, LM_E_NOMEM, "out of memory");
            continue;
        }
        if (!json_is_object(e))
            return LM_FAIL(err, LM_E_INPUT, "reply: prompt_logprobs[%zu] is not an object", i);
        if ((rc = prompt_entry(&p[(*n)++], e, own, i, err)) != LM_OK)
            return rc;
    }
    return LM_OK;
}

/* The prompt's tokens of prompt_logprobs placed before the reply's tokens, or in place of the
 * last of them that the reply echoes (usage: more tokens than were generated). */
static int add_prompt_lp(hx_probe_reply *r, const json_t *c0, const json_t *plp, lm_err *err)
{
    if (!json_is_array(plp))
        return LM_FAIL(err, LM_E_INPUT, "reply: prompt_logprobs is not a list");
    const size_t np = json_array_size(plp);
    if (np > UINT32_MAX / 4)
        return LM_FAIL(err, LM_E_INPUT, "reply: prompt_logprobs too long");
    hx_probe_tok *p = calloc(np ? np : 1, sizeof *p);
    if (p == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    uint32_t n = 0;
    int rc = parse_prompt_lp(p, &n, c0, plp, err);
    const uint32_t echoed = r->completion_tokens >= 0 && r->n > r->completion_tokens
                                ? r->n - (uint32_t)r->completion_tokens
                                : 0;
    if (rc == LM_OK && echoed > 0 && echoed < n)
        rc = LM_FAIL(err, LM_E_INPUT, "reply: prompt_logprobs scores %u prompt tokens, the "
                     "echo holds %u", (unsigned)n, (unsigned)echoed);
    const uint32_t keep = echoed > 0 ? echoed - n : 0; /* echoed tokens before them */
    hx_probe_tok *all = rc == LM_OK ? calloc((size_t)r->n - echoed + keep + n + 1, sizeof *all)
                                    : NULL;
    if (rc == LM_OK && all == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
    if (rc != LM_OK) {
        for (size_t i = 0; i < np; ++i)
            tok_clear(&p[i]);
        free(p);
        return rc;
    }
    memcpy(all, r->toks, keep * sizeof *all);
    memcpy(all + keep, p, n * sizeof *all);
    for (uint32_t i = keep; i < echoed; ++i)
        tok_clear(&r->toks[i]);
    memcpy(all + keep + n, r->toks + echoed, ((size_t)r->n - echoed) * sizeof *all);
    free(r->toks);
    free(p);
    r->toks = all;
    r->n = keep + n + (r->n - echoed);
    r->n_prompt_scored = n;
    return LM_OK;
}

static int parse_root(hx_probe_reply *r, const json_t *root, lm_err *err)
{
    if (!json_is_object(root))
        return LM_FAIL(err, LM_E_INPUT, "reply: not a JSON object");
    if (json_object_get(root, "error") != NULL) {
        char msg[200];
        char *t = json_dumps(root, JSON_COMPACT);
        hx_probe_error_text(msg, sizeof msg, t ? t : "", t ? strlen(t) : 0);
        free(t);
        return LM_FAIL(err, LM_E_INPUT, "the server answered with an error: %s", msg);
    }
    const json_t *model = json_object_get(root, "model"), *usage = json_object_get(root, "usage");
    if (json_is_string(model))
        snprintf(r->model, sizeof r->model, "%s", json_string_value(model));
    r->prompt_tokens = r->completion_tokens = -1;
    if (json_is_object(usage)) {
        const json_t *p = json_object_get(usage, "prompt_tokens"),
                     *c = json_object_get(usage, "completion_tokens");
        if (json_is_integer(p) && json_integer_value(p) >= 0)
            r->prompt_tokens = json_integer_value(p);
        if (json_is_integer(c) && json_integer_value(c) >= 0)
            r->completion_tokens = json_integer_value(c);
    }
    const json_t *choices = json_object_get(root, "choices");
    const json_t *c0 = json_is_array(choices) ? json_array_get(choices, 0) : NULL;
    if (!json_is_object(c0))
        return LM_FAIL(err, LM_E_INPUT, "reply: no choices[0] object");
    if ((r->text = dup_text(json_object_get(c0, "text"))) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    const json_t *fr = json_object_get(c0, "finish_reason");
    if (json_is_string(fr))
        snprintf(r->finish_reason, sizeof r->finish_reason, "%s", json_string_value(fr));
    const json_t *lp = json_object_get(c0, "logprobs");
    if (!json_is_object(lp))
        return LM_FAIL(err, LM_E_INPUT, "reply: no log-probabilities (choices[0].logprobs is "
                       "%s)", lp == NULL ? "absent" : "not an object");
    const json_t *content = json_object_get(lp, "content"),
                 *plp = json_object_get(c0, "prompt_logprobs");
    int rc = json_is_array(content) ? parse_content(r, content, err) : parse_legacy(r, lp, err);
    if (rc == LM_OK && plp != NULL && !json_is_null(plp))
        rc = add_prompt_lp(r, c0, plp, err);
    return rc;
}

int hx_probe_reply_parse(hx_probe_reply **out, const char *json, size_t len, lm_err *err)
{
    *out = NULL;
    json_error_t je;
    json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES | JSON_ALLOW_NUL, &je);
    if (root == NULL)
        return LM_FAIL(err, LM_E_INPUT, "reply: malformed JSON at line %d column %d: %s",
                       je.line, je.column, je.text);
    hx_probe_reply *r = calloc(1, sizeof *r);
    int rc = r ? parse_root(r, root, err) : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    json_decref(root);
    if (rc != LM_OK) {
        hx_probe_reply_free(r);
        return rc;
    }
    *out = r;
    return LM_OK;
}

int64_t hx_probe_reply_completion_tokens(const char *json, size_t len)
{
    json_t *root = json_loadb(json, len, 0, NULL);
    const json_t *u = json_is_object(root) ? json_object_get(root, "usage") : NULL;
    const json_t *c = json_is_object(u) ? json_object_get(u, "completion_tokens") : NULL;
    int64_t n = json_is_integer(c) && json_integer_value(c) >= 0 ? json_integer_value(c) : -1;
    json_decref(root);
    return n;
}

/* Appends " key=value" of a string or integer member to buf[n]. */
static void add_field(char *buf, size_t n, const json_t *o, const char *key)
{
    const json_t *v = json_object_get(o, key);
    size_t l = strlen(buf);
    if (json_is_string(v))
        snprintf(buf + l, n - l, "%s%s=%s", l ? " " : "", key, json_string_value(v));
    else if (json_is_integer(v))
        snprintf(buf + l, n - l, "%s%s=%lld", l ? " " : "", key,
                 (long long)json_integer_value(v));
}

void hx_server_info_models(hx_server_info *s, const char *json, size_t len)
{
    json_t *root = json_loadb(json, len, 0, NULL);
    const json_t *data = json_is_object(root) ? json_object_get(root, "data") : NULL;
    s->models[0] = '\0';
    for (size_t i = 0; json_is_array(data) && i < json_array_size(data); ++i) {
        const json_t *id = json_object_get(json_array_get(data, i), "id");
        size_t l = strlen(s->models);
        if (json_is_string(id))
            snprintf(s->models + l, sizeof s->models - l, "%s%s", l ? "," : "",
                     json_string_value(id));
    }
    json_decref(root);
}

void hx_server_info_props(hx_server_info *s, const char *json, size_t len)
{
    json_t *root = json_loadb(json, len, 0, NULL);
    s->props[0] = '\0';
    if (json_is_object(root)) {
        add_field(s->props, sizeof s->props, root, "model_path");
        add_field(s->props, sizeof s->props, root, "build_info");
        add_field(s->props, sizeof s->props, root, "total_slots");
    }
    json_decref(root);
}

void hx_server_info_version(hx_server_info *s, const char *json, size_t len)
{
    json_t *root = json_loadb(json, len, 0, NULL);
    s->version[0] = '\0';
    if (json_is_object(root))
        add_field(s->version, sizeof s->version, root, "version");
    json_decref(root);
}

/* Control characters and newlines become spaces: the text goes into a one-line message. */
static void one_line(char *buf, size_t n, const char *s, size_t len)
{
    size_t j = 0;
    for (size_t i = 0; i < len && j + 1 < n; ++i)
        buf[j++] = (unsigned char)s[i] < 0x20 ? ' ' : s[i];
    buf[j] = '\0';
}

void hx_probe_error_text(char *buf, size_t n, const char *json, size_t len)
{
    json_t *root = json_loadb(json, len, 0, NULL);
    const json_t *e = json_is_object(root) ? json_object_get(root, "error") : NULL;
    const json_t *msg = json_is_object(e) ? json_object_get(e, "message") : e;
    const json_t *detail = json_is_object(root) ? json_object_get(root, "detail") : NULL;
    if (json_is_array(detail))
        msg = json_object_get(json_array_get(detail, 0), "msg");
    else if (json_is_string(detail))
        msg = detail;
    if (json_is_string(msg))
        one_line(buf, n, json_string_value(msg), strlen(json_string_value(msg)));
    else
        one_line(buf, n, json, len < 120 ? len : 120);
    json_decref(root);
}
