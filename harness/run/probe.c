/* probe.c — hx_probe_run: a serving endpoint probed over concurrency, prefix and repeat, each
 * reply judged from its top-k log-probabilities (contract in probe.h). */
#include "run/probe.h"

#include "kvd_tokenizer.h"
#include "judge/compare_topk.h"
#include "kvd_util.h"
#include "model/config.h"
#include "model/probe_reply.h"
#include "run/http_client.h"
#include "run/probe_dump.h"

#include <jansson.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* One --prefix item (hx_item_decode): cold, warm or shared:P. */
static int prefix_item(void *elem, const char *s, size_t len, const char *what,
                       const char *list, lm_err *err)
{
    hx_probe_prefix *x = elem;
    if (len == 4 && memcmp(s, "cold", 4) == 0)
        x->kind = HX_PREFIX_COLD;
    else if (len == 4 && memcmp(s, "warm", 4) == 0)
        x->kind = HX_PREFIX_WARM;
    else if (len > 7 && memcmp(s, "shared:", 7) == 0 &&
             lm_parse_u32(s + 7, len - 7, 1, 1u << 20, &x->shared))
        x->kind = HX_PREFIX_SHARED;
    else
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': '%.*s' is not cold, warm or shared:P (P in "
                       "1..%u)", what, list, (int)len, s, 1u << 20);
    return LM_OK;
}

/* One --concurrency item (hx_item_decode). */
static int concurrency_item(void *elem, const char *s, size_t len, const char *what,
                            const char *list, lm_err *err)
{
    if (!lm_parse_u32(s, len, 1, HX_PROBE_MAX_CONCURRENCY, elem))
        return LM_FAIL(err, LM_E_INPUT, "%s '%s': '%.*s' is not an integer in 1..%u", what, list,
                       (int)len, s, HX_PROBE_MAX_CONCURRENCY);
    return LM_OK;
}

/* list by hx_list_parse into out [*n] elements of size bytes, at most HX_PROBE_MAX_AXIS. */
static int axis_list(void *out, uint32_t *n, size_t size, hx_item_decode decode,
                     const char *what, const char *list, lm_err *err)
{
    void *v = NULL;
    *n = 0;
    int rc = hx_list_parse(&v, n, size, false, decode, what, list, err);
    if (rc == LM_OK && *n > HX_PROBE_MAX_AXIS)
        rc = LM_FAIL(err, LM_E_INPUT, "%s '%s': at most %u values", what, list,
                     HX_PROBE_MAX_AXIS);
    if (rc == LM_OK)
        memcpy(out, v, (size_t)*n * size);
    else
        *n = 0;
    free(v);
    return rc;
}

int hx_probe_parse_prefixes(hx_probe_prefix *out, uint32_t *n, const char *list, lm_err *err)
{
    return axis_list(out, n, sizeof *out, prefix_item, "--prefix", list, err);
}

int hx_probe_parse_concurrency(uint32_t *out, uint32_t *n, const char *list, lm_err *err)
{
    return axis_list(out, n, sizeof *out, concurrency_item, "--concurrency", list, err);
}

/* The signal (SIGINT or SIGTERM) that arrived while the probe's requests ran; 0 when none.
 * Every hx_http_run of the probe reads it as its cancel flag. */
static volatile sig_atomic_t got_signal;

static void on_signal(int sig)
{
    got_signal = sig;
}

static void progress(const hx_probe_params *p, const char *fmt, ...) LM_PRINTF(2, 3);
static void progress(const hx_probe_params *p, const char *fmt, ...)
{
    if (p->judge.quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    lm_vlog(p->judge.log, p->judge.log_user, fmt, ap);
    va_end(ap);
}

/* One served request configuration. */
typedef struct pconf {
    uint32_t conc, rep;
    hx_probe_prefix prefix;
    char name[64];
    hx_dump *dump;
    hx_probe_report_row row;
} pconf;

typedef struct pstate {
    const hx_probe_params *p;
    char base[240], completions[300];
    bool ids, echo;               /* the request form (b) */
    char *text;                   /* the prompt as text */
    uint64_t rng;
    hx_piece_index *ix;
    hx_server_info info;
    char reply_model[128];
    pconf *conf;
    size_t n_conf;
} pstate;

static uint64_t next_rand(uint64_t *s)
{
    uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* The request body: prompt as ids or text, temperature 0, the probe's (logprobs) with k
 * log-probabilities; llama-server's cache_prompt as given (false: the prompt is computed
 * afresh even where a slot holds it; servers without the field ignore it). */
static char *body(const pstate *s, const int32_t *ids, uint32_t n, const char *text,
                  bool logprobs, bool cache_prompt)
{
    const hx_probe_params *p = s->p;
    json_t *o = json_object(), *pr;
    if (s->ids) {
        pr = json_array();
        for (uint32_t i = 0; i < n && pr != NULL; ++i)
            json_array_append_new(pr, json_integer(ids[i]));
    } else {
        pr = json_string(text);
    }
    json_object_set_new(o, "prompt", pr);
    json_object_set_new(o, "max_tokens", json_integer(p->n_gen));
    json_object_set_new(o, "temperature", json_real(0.0));
    json_object_set_new(o, "stream", json_false());
    json_object_set_new(o, "seed", json_integer(0));
    if (logprobs) {
        json_object_set_new(o, "logprobs", json_integer(p->k));
        json_object_set_new(o, "n_probs", json_integer(p->k));
        json_object_set_new(o, "echo", json_boolean(s->echo));
    }
    json_object_set_new(o, "cache_prompt", json_boolean(cache_prompt));
    char *b = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    return b;
}

/* The text of ids (their BOS dropped), malloc'd. */
static int ids_text(char **out, const pstate *s, const int32_t *ids, uint32_t n, lm_err *err)
{
    const lm_vocab *v = s->p->judge.model->vocab;
    if (v == NULL)
        return LM_FAIL(err, LM_E_INPUT, "the model has no tokenizer to write the prompt as text");
    const int32_t bos = lm_vocab_bos(v);
    const uint32_t skip = n > 0 && ids[0] == bos ? 1 : 0;
    return lm_detokenize(v, ids + skip, n - skip, out, err);
}

/* A filler's ids: `shared` ids of the prompt, then seeded ids (no BOS/EOS), a seeded total
 * length in [max(2, n/2), 2n] for a prompt of n. */
static int filler(int32_t **ids, uint32_t *n, pstate *s, uint32_t shared, lm_err *err)
{
    const hx_probe_params *p = s->p;
    const uint32_t np = p->judge.n_prompt, lo = np / 2 > 2 ? np / 2 : 2, hi = 2 * np > lo ? 2 * np : lo;
    uint32_t len = lo + (uint32_t)(next_rand(&s->rng) % (hi - lo + 1));
    if (shared > np)
        shared = np;
    if (len <= shared)
        len = shared + 1;
    if ((*ids = malloc(len * sizeof **ids)) == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    const lm_vocab *v = p->judge.model->vocab;
    const uint32_t nv = p->judge.model->hp.n_vocab;
    const int32_t bos = v ? lm_vocab_bos(v) : -1, eos = v ? lm_vocab_eos(v) : -1;
    memcpy(*ids, p->judge.prompt, shared * sizeof **ids);
    /* ids from [3, nv) other than BOS and EOS; a vocabulary with fewer than 6 ids has no
     * such choice guaranteed, so it takes any id */
    for (uint32_t i = shared; i < len; ++i) {
        int32_t t;
        do
            t = (int32_t)(nv > 5 ? 3 + next_rand(&s->rng) % (nv - 3) : next_rand(&s->rng) % nv);
        while (nv > 5 && (t == bos || t == eos));
        (*ids)[i] = t;
    }
    if (shared == 0 && bos >= 0)
        (*ids)[0] = bos;
    *n = len;
    return LM_OK;
}

/* A filler request's body (ids as the request form wants them). */
static int filler_body(char **out, pstate *s, uint32_t shared, lm_err *err)
{
    int32_t *ids = NULL;
    uint32_t n = 0;
    char *text = NULL;
    int rc = filler(&ids, &n, s, shared, err);
    if (rc == LM_OK && !s->ids)
        rc = ids_text(&text, s, ids, n, err);
    if (rc == LM_OK && (*out = body(s, ids, n, text, false, true)) == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
    free(ids);
    free(text);
    return rc;
}

/* The probe's body; cache_prompt: whether a server may reuse a prefix it holds. */
static char *probe_body(const pstate *s, bool cache_prompt)
{
    return body(s, s->p->judge.prompt, s->p->judge.n_prompt, s->text, true, cache_prompt);
}

/* One line for a failed request (who: "the probe", "filler 3"). */
static int request_error(const pstate *s, const hx_http_reply *r, const char *who, lm_err *err)
{
    if (!r->ok)
        return LM_FAIL(err, LM_E_INPUT, "%s: %s: %s", s->base, who, r->error);
    char msg[200];
    hx_probe_error_text(msg, sizeof msg, r->body ? r->body : "", r->len);
    return LM_FAIL(err, LM_E_INPUT, "%s: %s: HTTP %ld: %s", s->base, who, r->status, msg);
}

/* (a) */
static int server_info(pstate *s, lm_err *err)
{
    char u[3][300];
    snprintf(u[0], sizeof u[0], "%s/v1/models", s->base);
    snprintf(u[1], sizeof u[1], "%s/props", s->base);
    snprintf(u[2], sizeof u[2], "%s/version", s->base);
    hx_http_req q[3];
    hx_http_reply r[3];
    for (int i = 0; i < 3; ++i)
        q[i] = (hx_http_req){.url = u[i], .body = NULL, .timeout_s = s->p->timeout_s};
    int rc = hx_http_run(r, q, 3, s->p->overall_s, &got_signal, err);
    if (rc == LM_OK && !r[0].ok)
        rc = LM_FAIL(err, LM_E_INPUT, "%s: not reachable: %s", s->base, r[0].error);
    if (rc == LM_OK) {
        if (r[0].status == 200)
            hx_server_info_models(&s->info, r[0].body ? r[0].body : "", r[0].len);
        if (r[1].ok && r[1].status == 200)
            hx_server_info_props(&s->info, r[1].body ? r[1].body : "", r[1].len);
        if (r[2].ok && r[2].status == 200)
            hx_server_info_version(&s->info, r[2].body ? r[2].body : "", r[2].len);
    }
    for (int i = 0; i < 3; ++i)
        hx_http_reply_clear(&r[i]);
    return rc;
}

/* Sends bodies [n] at once; the replies into r [n]. Every request has ended on return. */
static int send_all(pstate *s, hx_http_reply *r, char *const *bodies, size_t n, lm_err *err)
{
    hx_http_req q[HX_PROBE_MAX_CONCURRENCY];
    for (size_t i = 0; i < n; ++i)
        q[i] = (hx_http_req){.url = s->completions, .body = bodies[i],
                             .timeout_s = s->p->timeout_s};
    return hx_http_run(r, q, n, s->p->overall_s, &got_signal, err);
}

/* Sends one body alone and checks it answered 200 (what: for the error line). */
static int send_one(pstate *s, hx_http_reply *r, char *b, const char *what, lm_err *err)
{
    int rc = send_all(s, r, &b, 1, err);
    if (rc == LM_OK && (!r->ok || r->status != 200))
        rc = request_error(s, r, what, err);
    return rc;
}

/* How many prompt tokens an echoed reply pr lacks: fewer than the prompt's (its BOS may be
 * left out) means the server scored another alignment than it says (llama-cpp-python 0.3.36
 * echoes a prompt without BOS one token short, each token beside the row that follows it);
 * 0 without echo or usage. */
static int64_t echo_short_by(const pstate *s, const hx_probe_reply *pr)
{
    const hx_judge_params *j = &s->p->judge;
    if (!s->echo || pr->completion_tokens < 0 || pr->n_prompt_scored > 0)
        return 0;
    const bool bos = j->model->vocab != NULL && j->prompt[0] == lm_vocab_bos(j->model->vocab);
    const int64_t need = (int64_t)j->n_prompt - (bos ? 1 : 0);
    const int64_t n_echo = (int64_t)pr->n - pr->completion_tokens;
    return n_echo < need ? need - n_echo : 0;
}

/* (b) The first request form the server answers with log-probabilities. */
static int request_form(pstate *s, lm_err *err)
{
    static const bool forms[4][2] = {{true, true}, {false, true}, {true, false}, {false, false}};
    char last[300] = "";
    for (int f = 0; f < 4; ++f) {
        s->ids = forms[f][0];
        s->echo = forms[f][1];
        char *b = probe_body(s, false);
        hx_http_reply r;
        int rc = b ? send_all(s, &r, &b, 1, err) : LM_FAIL(err, LM_E_NOMEM, "out of memory");
        free(b);
        if (rc != LM_OK)
            return rc;
        if (!r.ok) {
            rc = request_error(s, &r, "the probe", err);
            hx_http_reply_clear(&r);
            return rc;
        }
        if (r.status == 200) {
            hx_probe_reply *pr = NULL;
            rc = hx_probe_reply_parse(&pr, r.body ? r.body : "", r.len, err);
            const int64_t short_by = rc == LM_OK ? echo_short_by(s, pr) : 0;
            if (rc == LM_OK)
                snprintf(s->reply_model, sizeof s->reply_model, "%s", pr->model);
            hx_probe_reply_free(pr);
            hx_http_reply_clear(&r);
            if (rc != LM_OK) {
                char pre[300];
                snprintf(pre, sizeof pre, "%s:", s->base);
                return lm_err_prefix(rc, pre, err);
            }
            if (short_by > 0) {
                progress(s->p, "the server's echo scores %lld prompt token(s) too few, so its "
                         "rows cannot be placed: asking without echo", (long long)short_by);
                snprintf(last, sizeof last, "echo %lld prompt token(s) short", (long long)short_by);
                continue;
            }
            progress(s->p, "the server takes the prompt as %s%s", s->ids ? "token ids" : "text",
                     s->echo ? " with echo (prompt log-probabilities)" : ", without echo");
            return LM_OK;
        }
        hx_probe_error_text(last, 240, r.body ? r.body : "", r.len);
        snprintf(last + strlen(last), sizeof last - strlen(last), " (HTTP %ld)", r.status);
        hx_http_reply_clear(&r);
    }
    return LM_FAIL(err, LM_E_INPUT, "%s: every request form was refused (last: %s)", s->base,
                   last);
}

/* (c) and (d) for configuration c. */
static int run_conf(pstate *s, pconf *c, lm_err *err)
{
    const hx_probe_params *p = s->p;
    hx_http_reply pre = {0}, r[HX_PROBE_MAX_CONCURRENCY];
    char *bodies[HX_PROBE_MAX_CONCURRENCY] = {0};
    int rc = LM_OK;
    /* what the server saw just before: an unrelated request, or the probe itself */
    char *b = NULL;
    const bool warm = c->prefix.kind == HX_PREFIX_WARM;
    if (warm)
        b = probe_body(s, true);
    else
        rc = filler_body(&b, s, 0, err);
    if (rc == LM_OK && b == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
    if (rc == LM_OK)
        rc = send_one(s, &pre, b, warm ? "the warming request" : "the unrelated request", err);
    free(b);
    hx_http_reply_clear(&pre);
    if (rc != LM_OK)
        return rc;
    const uint32_t shared = c->prefix.kind == HX_PREFIX_SHARED ? c->prefix.shared : 0;
    if ((bodies[0] = probe_body(s, warm)) == NULL)
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (uint32_t i = 1; i < c->conc && rc == LM_OK; ++i)
        rc = filler_body(&bodies[i], s, shared, err);
    if (rc == LM_OK)
        rc = send_all(s, r, bodies, c->conc, err);
    for (uint32_t i = 0; i < c->conc; ++i)
        free(bodies[i]);
    if (rc != LM_OK)
        return rc;
    double end = 0.0;
    uint32_t tokens = 0;
    for (uint32_t i = 0; i < c->conc && rc == LM_OK; ++i) {
        char who[32];
        snprintf(who, sizeof who, i == 0 ? "the probe" : "filler %u", (unsigned)i);
        if (!r[i].ok || r[i].status != 200)
            rc = request_error(s, &r[i], who, err);
        end = fmax(end, r[i].t_end_s);
        int64_t n = hx_probe_reply_completion_tokens(r[i].body ? r[i].body : "", r[i].len);
        tokens += n > 0 ? (uint32_t)n : 0;
    }
    hx_probe_reply *pr = NULL;
    hx_probe_map map;
    char where[400]; /* the context an error of this configuration's reply is given */
    snprintf(where, sizeof where, "%s: %s:", s->base, c->name);
    if (rc == LM_OK)
        rc = lm_err_prefix(hx_probe_reply_parse(&pr, r[0].body ? r[0].body : "", r[0].len, err),
                           where, err);
    /* the prompt is scored by an echo, or by vLLM's prompt_logprobs */
    const bool scored = rc == LM_OK && (s->echo || pr->n_prompt_scored > 0);
    if (rc == LM_OK)
        rc = lm_err_prefix(hx_probe_reply_dump(&c->dump, &map, pr, p->judge.model, s->ix,
                                               p->judge.prompt, p->judge.n_prompt, scored,
                                               c->name, err),
                           where, err);
    if (rc == LM_OK && map.prompt_mismatch >= 0)
        rc = LM_FAIL(err, LM_E_INPUT, "%s: %s", s->base, map.mismatch);
    if (rc == LM_OK && !scored && pr->prompt_tokens >= 0 &&
        pr->prompt_tokens != (int64_t)p->judge.n_prompt)
        rc = LM_FAIL(err, LM_E_INPUT, "%s: the server counts %lld prompt tokens, kvdrift %u: "
                     "it tokenized the text otherwise (give --tokens to a server that takes "
                     "ids)", s->base, (long long)pr->prompt_tokens,
                     (unsigned)p->judge.n_prompt);
    if (rc == LM_OK && (map.n_alt_dropped > 0 || map.gen_cut))
        progress(p, "%s: %u alternatives left out (their text names no id or several)%s",
                 c->name, (unsigned)map.n_alt_dropped,
                 map.gen_cut ? "; the generated path stops at a token whose text names several "
                               "ids"
                             : "");
    c->row.latency_s = r[0].t_end_s - r[0].t_start_s;
    c->row.batch_s = end;
    c->row.batch_tokens = tokens;
    hx_probe_reply_free(pr);
    for (uint32_t i = 0; i < c->conc; ++i)
        hx_http_reply_clear(&r[i]);
    return rc;
}

/* Bits of c's dump against the baseline's b (the judge's rule for EXACT, row by row), and its
 * generated text. */
static void bits(hx_probe_report_row *w, const hx_dump *d, const hx_dump *b)
{
    w->first_row_differ = -1;
    w->first_token_differ = hx_first_divergence(d->generated, d->n_generated, b->generated,
                                                b->n_generated);
    for (uint32_t i = 0; i < d->n_pos; ++i)
        if (!hx_topk_row_same_bits(d, i, b, &w->max_abs_diff)) {
            if (w->first_row_differ < 0)
                w->first_row_differ = d->positions[i];
            w->n_rows_differ++;
        }
    w->bits_same = w->n_rows_differ == 0 && d->n_pos == b->n_pos && w->first_token_differ < 0;
}

/* The configurations in order: the baseline (c=1, cold, rep 0) first. */
static int plan(pstate *s, lm_err *err)
{
    const hx_probe_params *p = s->p;
    uint32_t conc[HX_PROBE_MAX_AXIS + 1], nc = 0;
    hx_probe_prefix pre[HX_PROBE_MAX_AXIS + 1];
    uint32_t npre = 0;
    conc[nc++] = 1;
    for (uint32_t i = 0; i < p->n_concurrency; ++i)
        if (p->concurrency[i] != 1)
            conc[nc++] = p->concurrency[i];
    pre[npre++] = (hx_probe_prefix){HX_PREFIX_COLD, 0};
    for (uint32_t i = 0; i < p->n_prefixes; ++i)
        if (p->prefixes[i].kind != HX_PREFIX_COLD)
            pre[npre++] = p->prefixes[i];
    const uint32_t rep = p->repeat ? p->repeat : 1;
    s->conf = calloc((size_t)nc * npre * rep, sizeof *s->conf);
    if (s->conf == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (uint32_t a = 0; a < npre; ++a)
        for (uint32_t c = 0; c < nc; ++c)
            for (uint32_t r = 0; r < rep; ++r) {
                pconf *x = &s->conf[s->n_conf++];
                x->conc = conc[c];
                x->rep = r;
                x->prefix = pre[a];
                char pn[24];
                if (pre[a].kind == HX_PREFIX_SHARED)
                    snprintf(pn, sizeof pn, "shared:%u", (unsigned)pre[a].shared);
                else
                    snprintf(pn, sizeof pn, "%s", pre[a].kind == HX_PREFIX_WARM ? "warm" : "cold");
                snprintf(x->name, sizeof x->name, "c=%u,prefix=%s,rep=%u", (unsigned)conc[c], pn,
                         (unsigned)r);
                hx_probe_report_row *w = &x->row;
                snprintf(w->config, sizeof w->config, "%s", x->name);
                snprintf(w->prefix, sizeof w->prefix, "%s", pn);
                w->concurrency = conc[c];
                w->repeat = r;
                w->is_baseline = s->n_conf == 1;
            }
    return LM_OK;
}

/* (e), (f) and the report's probe section. */
static int judge(hx_report **out, pstate *s, lm_err *err)
{
    const hx_probe_params *p = s->p;
    const size_t n = s->n_conf;
    hx_dump **dumps = calloc(n, sizeof *dumps);
    int64_t *base = calloc(n, sizeof *base); /* every dump against the baseline's (0) */
    int rc = dumps && base ? LM_OK : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n && rc == LM_OK; ++i)
        dumps[i] = s->conf[i].dump;
    hx_judge_params jp = p->judge;
    jp.dumps = dumps;
    jp.n_dumps = n;
    jp.names = NULL;
    jp.dump_profile = NULL;
    jp.baseline = base;
    if (rc == LM_OK)
        rc = hx_judge_run_all(out, &jp, err);
    if (rc == LM_OK) {
        hx_report *rep = *out;
        /* (f) */
        const hx_dump_report *d0 = &rep->dumps[0];
        bool other = d0->n_profiles > 0;
        for (size_t k = 0; k < d0->n_profiles; ++k) {
            const hx_config_report *c = &rep->configs[d0->first_config + k];
            other &= c->n_rows > 0 && !c->rows[0].lg.top1_agree &&
                     c->worst_ratio > HX_PROBE_OTHER_MODEL_RATIO;
        }
        if (other) {
            const hx_config_report *c = &rep->configs[d0->first_config];
            rc = LM_FAIL(err, LM_E_INPUT, "%s: not the same model: the server's first scored "
                         "token (id %d) is not the reference's (id %d), and its "
                         "log-probabilities are %.3g envelopes away or more under every "
                         "profile", s->base, (int)c->rows[0].lg.top1_x,
                         (int)c->rows[0].lg.top1_r, c->worst_ratio);
        }
    }
    if (rc == LM_OK) {
        hx_probe_report *pr = &(*out)->probe;
        pr->run = true;
        snprintf(pr->url, sizeof pr->url, "%s", s->base);
        memcpy(pr->server_models, s->info.models, sizeof pr->server_models);
        memcpy(pr->server_props, s->info.props, sizeof pr->server_props);
        memcpy(pr->server_version, s->info.version, sizeof pr->server_version);
        snprintf(pr->reply_model, sizeof pr->reply_model, "%s", s->reply_model);
        snprintf(pr->transport, sizeof pr->transport, "%s, %s", s->ids ? "token ids" : "text",
                 s->echo ? "echo (prompt log-probabilities)" : "no echo (generated positions "
                           "only)");
        pr->k = p->k;
        if ((pr->rows = calloc(n, sizeof *pr->rows)) == NULL)
            rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
        for (size_t i = 0; i < n && rc == LM_OK; ++i) {
            const hx_dump_report *d = &(*out)->dumps[i];
            /* its class under the profile that explains it, else under the first */
            size_t at = 0;
            for (size_t k = 0; k < d->n_profiles; ++k) {
                const char *c = (*out)->configs[d->first_config + k].config, *a = strrchr(c, '@');
                if (d->explained_by[0] && a != NULL && strcmp(a + 1, d->explained_by) == 0)
                    at = k;
            }
            s->conf[i].row.cls = (*out)->configs[d->first_config + at].cls;
            pr->rows[pr->n_rows++] = s->conf[i].row;
        }
    }
    if (rc != LM_OK) {
        hx_report_free(*out);
        *out = NULL;
    }
    free(dumps);
    free(base);
    return rc;
}

static int set_base(pstate *s, lm_err *err)
{
    const char *u = s->p->url;
    size_t n = strlen(u);
    while (n > 0 && u[n - 1] == '/')
        --n;
    if (n >= 3 && strncmp(u + n - 3, "/v1", 3) == 0)
        n -= 3;
    if (n == 0 || n >= sizeof s->base)
        return LM_FAIL(err, LM_E_INPUT, "URL '%s': empty or too long", u);
    memcpy(s->base, u, n);
    s->base[n] = '\0';
    bool scheme = false;
    const bool lo = hx_url_is_loopback(s->base, &scheme);
    if (!scheme)
        return LM_FAIL(err, LM_E_INPUT, "URL '%s': not an http:// or https:// URL", u);
    if (!lo && !s->p->allow_remote)
        return LM_FAIL(err, LM_E_INPUT, "URL '%s': not a loopback address (give --allow-remote "
                       "to probe another machine)", u);
    snprintf(s->completions, sizeof s->completions, "%s/v1/completions", s->base);
    return LM_OK;
}

/* (a) to (d) under a SIGINT and SIGTERM handler that cancels the requests in flight (their
 * connections closed: a server drops them) and stops before the next; *rc is the outcome. The
 * previous dispositions are back on return, which gives the signal that arrived (0: none). */
static int serve(pstate *s, int *rc, lm_err *err)
{
    struct sigaction sa = {.sa_handler = on_signal}, old_int, old_term;
    sigemptyset(&sa.sa_mask);
    got_signal = 0;
    sigaction(SIGINT, &sa, &old_int);
    sigaction(SIGTERM, &sa, &old_term);
    *rc = server_info(s, err);
    if (*rc == LM_OK && !got_signal)
        *rc = request_form(s, err);
    for (size_t i = 0; i < s->n_conf && *rc == LM_OK && !got_signal; ++i) {
        progress(s->p, "request %zu of %zu: %s", i + 1, s->n_conf, s->conf[i].name);
        *rc = run_conf(s, &s->conf[i], err);
    }
    sigaction(SIGINT, &old_int, NULL);
    sigaction(SIGTERM, &old_term, NULL);
    const int sig = got_signal;
    got_signal = 0;
    return sig;
}

int hx_probe_run(hx_report **out, const hx_probe_params *p, lm_err *err)
{
    *out = NULL;
    pstate s = {.p = p, .rng = p->seed};
    int rc = set_base(&s, err);
    if (rc == LM_OK && p->judge.n_prompt == 0)
        rc = LM_FAIL(err, LM_E_INPUT, "empty prompt");
    if (rc == LM_OK)
        rc = p->prompt_text ? ((s.text = strdup(p->prompt_text)) ? LM_OK
                                                                  : LM_FAIL(err, LM_E_NOMEM,
                                                                            "out of memory"))
                            : ids_text(&s.text, &s, p->judge.prompt, p->judge.n_prompt, err);
    if (rc == LM_OK)
        rc = hx_piece_index_create(&s.ix, p->judge.model, err);
    if (rc == LM_OK)
        rc = plan(&s, err);
    const int sig = rc == LM_OK ? serve(&s, &rc, err) : 0;
    if (sig != 0) {
        lm_err_clear(err); /* a cancelled request's error is the signal's doing */
        rc = LM_FAIL(err, LM_E_INPUT, "%s: interrupted by %s: every request cancelled, nothing "
                     "written", s.base, sig == SIGINT ? "SIGINT" : "SIGTERM");
    }
    for (size_t i = 0; i < s.n_conf && rc == LM_OK; ++i)
        bits(&s.conf[i].row, s.conf[i].dump, s.conf[0].dump);
    if (rc == LM_OK)
        rc = judge(out, &s, err);
    for (size_t i = 0; i < s.n_conf; ++i)
        hx_dump_free(s.conf[i].dump);
    free(s.conf);
    free(s.text);
    hx_piece_index_free(s.ix);
    if (sig != 0)
        raise(sig); /* the previous disposition: by default kvdrift ends as interrupted */
    return rc;
}
