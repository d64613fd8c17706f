/* trace.c — hx_trace_run: per-operation checkpoints of two configurations (and of a noise
 * ensemble), compared in forward order (the contract is in trace.h). */
#include "run/trace.h"

#include "judge/envelope.h"
#include "kvd_util.h"
#include "run/drive.h"
#include "model/metrics.h"
#include "run/ensemble.h"
#include "run/sweep.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* ---- a tape: every probed operation's rows of one run ---- */

typedef struct slot {
    uint32_t layer;
    char op[16];
    size_t row_elems;
    float *rows;   /* [n_pos][row_elems] */
    uint8_t *have; /* [n_pos] row written */
} slot;

typedef struct tape {
    uint32_t n_pos;  /* positions of the run: prompt + decode steps */
    size_t n, cap;
    slot *s;         /* [n] in first-seen order = forward order */
    size_t hint;     /* the slot after the last one written: the probe's next call, mostly */
    bool oom;
    bool bad_shape;  /* an operation changed its row size between calls (an engine bug) */
} tape;

static void tape_free(tape *t)
{
    for (size_t i = 0; i < t->n; ++i) {
        free(t->s[i].rows);
        free(t->s[i].have);
    }
    free(t->s);
    memset(t, 0, sizeof *t);
}

static slot *tape_slot(tape *t, uint32_t layer, const char *op, size_t row_elems)
{
    for (size_t k = 0; k < t->n; ++k) {
        size_t i = (t->hint + k) % t->n;
        if (t->s[i].layer == layer && strcmp(t->s[i].op, op) == 0) {
            t->hint = i + 1;
            if (t->s[i].row_elems != row_elems) {
                t->bad_shape = true;
                return NULL;
            }
            return &t->s[i];
        }
    }
    if (t->n == t->cap) {
        size_t nc = t->cap ? 2 * t->cap : 64;
        slot *ns = realloc(t->s, nc * sizeof *ns);
        if (ns == NULL) {
            t->oom = true;
            return NULL;
        }
        t->s = ns;
        t->cap = nc;
    }
    slot *s = &t->s[t->n];
    memset(s, 0, sizeof *s);
    s->layer = layer;
    snprintf(s->op, sizeof s->op, "%s", op);
    s->row_elems = row_elems;
    s->rows = calloc((size_t)t->n_pos * row_elems, sizeof *s->rows);
    s->have = calloc(t->n_pos, 1);
    if (s->rows == NULL || s->have == NULL) {
        free(s->rows);
        free(s->have);
        t->oom = true;
        return NULL;
    }
    t->hint = ++t->n;
    return s;
}

static void tape_put(tape *t, uint32_t layer, const char *op, uint32_t pos0, uint32_t n,
                     const float *x /* [n][row_elems] */, size_t row_elems)
{
    if (t->oom || t->bad_shape || pos0 + n > t->n_pos)
        return;
    slot *s = tape_slot(t, layer, op, row_elems);
    if (s == NULL)
        return;
    memcpy(s->rows + (size_t)pos0 * row_elems, x, (size_t)n * row_elems * sizeof *x);
    memset(s->have + pos0, 1, n);
}

static void probe_cb(void *user, uint32_t layer, const char *op, uint32_t pos0, uint32_t n,
                     const float *x, size_t row_elems)
{
    tape_put(user, layer, op, pos0, n, x, row_elems);
}

/* ---- one run: prompt in the configuration's chunks, then decode steps ---- */

static const slot *find_slot(const tape *t, uint32_t layer, const char *op)
{
    for (size_t j = 0; j < t->n; ++j)
        if (t->s[j].layer == layer && strcmp(t->s[j].op, op) == 0)
            return &t->s[j];
    return NULL;
}

/* Records each forward call's logits rows on the tape. */
static int tape_logits(void *user, const lm_ctx *ctx, const hx_chunk *ch, lm_err *err)
{
    (void)err;
    const lm_hparams *hp = &lm_ctx_model(ctx)->hp;
    tape_put(user, hp->n_layer, "logits", ch->pos0, ch->n, ch->logits, hp->n_vocab);
    return LM_OK;
}

/* Fills t (n_pos = n_prompt + n_gen): the prompt under cfg's schedule (hx_drive_feed, every
 * CONFIG key of a plain run honoured), then the decode steps. path [n_gen]: fed when `forced`,
 * else chosen greedily from the run's own logits and written there. */
static int run_tape(tape *t, const lm_model *m, const hx_config *cfg, const int32_t *prompt,
                    uint32_t n_prompt, int32_t *path, uint32_t n_gen, bool forced, lm_err *err)
{
    const lm_hparams *hp = &m->hp;
    memset(t, 0, sizeof *t);
    t->n_pos = n_prompt + n_gen;
    hx_drive *d = NULL;
    float *lg = malloc((size_t)hp->n_vocab * sizeof *lg); /* [n_vocab] the newest row */
    if (lg == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    int rc = hx_drive_open(&d, m, cfg, t->n_pos, HX_KEYS_PLAIN, "trace", err);
    if (rc == LM_OK) {
        lm_ctx_set_probe(hx_drive_ctx(d), probe_cb, t);
        rc = hx_drive_feed(d, prompt, n_prompt, HX_ROWS_ALL, NULL, tape_logits, t, err);
    }
    for (uint32_t j = 0; j < n_gen && rc == LM_OK; ++j) {
        /* The newest logits row chooses path[j] (decode step j feeds it). */
        if (!forced) {
            const slot *s = find_slot(t, hp->n_layer, "logits");
            const uint32_t pos = n_prompt + j - 1;
            if (s == NULL || !s->have[pos]) {
                rc = LM_FAIL(err, LM_E_INTERNAL, "trace: no logits row at position %u", pos);
                break;
            }
            path[j] = lm_argmax(s->rows + (size_t)pos * hp->n_vocab, hp->n_vocab);
        }
        if ((rc = hx_drive_decode(d, path[j], lg, err)) == LM_OK)
            tape_put(t, hp->n_layer, "logits", n_prompt + j, 1, lg, hp->n_vocab);
    }
    hx_drive_close(d);
    free(lg);
    if (rc == LM_OK && t->oom)
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory for the checkpoints");
    if (rc == LM_OK && t->bad_shape)
        rc = LM_FAIL(err, LM_E_INTERNAL, "an operation changed its row size");
    if (rc != LM_OK)
        tape_free(t);
    return rc;
}

/* ---- comparison ---- */

/* max_i |x_i - y_i| in double; NaN when either has a NaN, Inf when an Inf is involved. */
static double row_max_abs(const float *x, const float *y, size_t n)
{
    double m = 0.0;
    for (size_t i = 0; i < n; ++i) {
        double d = fabs((double)x[i] - (double)y[i]);
        if (isnan(d))
            return NAN;
        m = d > m ? d : m;
    }
    return m;
}

static int check_params(const hx_trace_params *p, lm_err *err)
{
    if (p->model == NULL || p->prompt == NULL || p->n_prompt == 0)
        return LM_FAIL(err, LM_E_INPUT, "empty prompt");
    const lm_hparams *hp = &p->model->hp;
    int rc = hx_check_token_ids(p->prompt, p->n_prompt, hp->n_vocab, "prompt", err);
    if (rc != LM_OK)
        return rc;
    uint64_t need = (uint64_t)p->n_prompt + p->n_gen;
    if (need > UINT32_MAX / 2 || (hp->n_ctx_train != 0 && need > hp->n_ctx_train))
        return LM_FAIL(err, LM_E_INPUT, "%u prompt tokens + %u generated exceed the "
                                        "model's context of %u", (unsigned)p->n_prompt,
                       (unsigned)p->n_gen, (unsigned)hp->n_ctx_train);
    if (p->ensemble != 0 && p->ensemble < HX_ENVELOPE_MIN_MEMBERS)
        return LM_FAIL(err, LM_E_INPUT, "ensemble of %u runs: at least %u are needed",
                       (unsigned)p->ensemble, (unsigned)HX_ENVELOPE_MIN_MEMBERS);
    return LM_OK;
}

/* The SR members of the envelope and the fold of each into env as it finishes. */
typedef struct members {
    const tape *naive;
    const hx_trace_params *p;
    const int32_t *path;
    tape *t;     /* [ensemble]: a member's checkpoints until folded */
    double *env; /* [n_slots][n_pos] */
} members;

static int member_run(void *ctx, const hx_config *member, uint32_t mi, lm_err *err)
{
    const members *ms = ctx;
    const hx_trace_params *p = ms->p;
    /* forced: the path is only read */
    return run_tape(&ms->t[mi], p->model, member, p->prompt, p->n_prompt, (int32_t *)ms->path,
                    p->n_gen, true, err);
}

/* env = max(env, |member - naive|) per slot and position: a maximum, so the order in which
 * members finish changes no bit. */
static void member_fold(void *ctx, uint32_t mi, int rc)
{
    const members *ms = ctx;
    const tape *naive = ms->naive;
    const uint32_t np = naive->n_pos;
    tape *t = &ms->t[mi];
    for (size_t k = 0; rc == LM_OK && k < naive->n; ++k) {
        const slot *a = &naive->s[k];
        const slot *b = find_slot(t, a->layer, a->op);
        for (uint32_t pos = 0; pos < np; ++pos) {
            double d = INFINITY; /* a member missing the row measures nothing: no bound */
            if (b != NULL && a->have[pos] && b->have[pos])
                d = row_max_abs(a->rows + (size_t)pos * a->row_elems,
                                b->rows + (size_t)pos * a->row_elems, a->row_elems);
            if (isnan(d))
                d = INFINITY;
            double *e = &ms->env[k * np + pos];
            *e = d > *e ? d : *e;
        }
    }
    if (rc == LM_OK)
        tape_free(t);
}

/* env [n_slots][n_pos]: the envelope per slot of `naive` and position (see trace.h). */
static int measure_envelope(double **out, const tape *naive, const hx_trace_params *p,
                            int32_t *path, lm_err *err)
{
    const uint32_t np = naive->n_pos;
    const size_t cells = naive->n * np;
    members ms = {.naive = naive, .p = p, .path = path,
                  .t = calloc(p->ensemble ? p->ensemble : 1, sizeof *ms.t),
                  .env = calloc(cells ? cells : 1, sizeof *ms.env)};
    int rc = ms.t == NULL || ms.env == NULL
                 ? LM_FAIL(err, LM_E_NOMEM, "out of memory")
                 : hx_ensemble_run_engine(p->ensemble, p->sr_seed, "", p->jobs, member_run,
                                          member_fold, &ms, err);
    free(ms.t);
    if (rc != LM_OK) {
        free(ms.env);
        return rc;
    }
    for (size_t i = 0; i < cells; ++i)
        ms.env[i] *= HX_ENVELOPE_SAFETY;
    *out = ms.env;
    return LM_OK;
}


static void compare_op(hx_trace_op *o, const slot *a, const slot *b, uint32_t np,
                       const double *env /* [n_pos] or NULL */)
{
    memset(o, 0, sizeof *o);
    o->layer = a->layer;
    snprintf(o->op, sizeof o->op, "%s", a->op);
    o->row_elems = a->row_elems;
    o->first_pos = -1;
    o->beyond_pos = -1;
    o->e_at_max = NAN;
    for (uint32_t pos = 0; pos < np; ++pos) {
        if (!a->have[pos] || !b->have[pos])
            continue;
        ++o->n_pos;
        const float *x = a->rows + (size_t)pos * a->row_elems;
        const float *y = b->rows + (size_t)pos * a->row_elems;
        hx_metrics mt;
        hx_metrics_compute_f32(&mt, x, y, a->row_elems);
        const bool nonfin = !lm_all_finite(x, a->row_elems) || !lm_all_finite(y, a->row_elems);
        o->nonfinite |= nonfin;
        if (mt.n_diff_bits == 0)
            continue;
        ++o->n_pos_diff;
        if (o->first_pos < 0)
            o->first_pos = pos;
        double d = row_max_abs(x, y, a->row_elems);
        /* The first NaN sticks; otherwise the largest difference (ties: earliest position). */
        if (!isnan(o->max_abs) && (isnan(d) || d > o->max_abs || o->n_pos_diff == 1)) {
            o->max_abs = d;
            o->max_pos = pos;
            o->e_at_max = env ? env[pos] : (double)NAN;
        }
        o->max_ulp = mt.max_ulp > o->max_ulp ? mt.max_ulp : o->max_ulp;
        if (env != NULL) {
            double ratio = (double)INFINITY;
            if (!nonfin && !isnan(d))
                ratio = env[pos] > 0.0 ? d / env[pos] : d > 0.0 ? (double)INFINITY : 0.0;
            o->worst_ratio = ratio > o->worst_ratio ? ratio : o->worst_ratio;
            if (ratio > 1.0 && o->beyond_pos < 0)
                o->beyond_pos = pos;
        }
    }
}

int hx_trace_run(hx_trace_result **out, const hx_trace_params *p, lm_err *err)
{
    *out = NULL;
    int rc = check_params(p, err);
    if (rc != LM_OK)
        return rc;
    hx_trace_result *r = calloc(1, sizeof *r);
    tape ta = {0}, tb = {0}, tn = {0};
    double *env = NULL;
    if (r == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    r->n_prompt = p->n_prompt;
    r->n_gen = p->n_gen;
    r->a = p->a;
    r->b = p->b;
    r->first_diff = r->first_beyond = -1;
    r->path = calloc(p->n_gen ? p->n_gen : 1, sizeof *r->path);
    if (r->path == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
        goto fail;
    }
    /* A chooses the path; B, the naive run and the members follow it. */
    if ((rc = run_tape(&ta, p->model, &p->a, p->prompt, p->n_prompt, r->path, p->n_gen, false,
                       err)) != LM_OK ||
        (rc = run_tape(&tb, p->model, &p->b, p->prompt, p->n_prompt, r->path, p->n_gen, true,
                       err)) != LM_OK)
        goto fail;
    if (p->ensemble > 0) {
        const hx_config naive = {.backend = "naive", .step = 0, .threads = 1};
        if ((rc = run_tape(&tn, p->model, &naive, p->prompt, p->n_prompt, r->path, p->n_gen, true,
                           err)) != LM_OK ||
            (rc = measure_envelope(&env, &tn, p, r->path, err)) != LM_OK)
            goto fail;
        r->has_env = true;
        r->ensemble = p->ensemble;
    }
    r->ops = calloc(ta.n ? ta.n : 1, sizeof *r->ops);
    if (r->ops == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
        goto fail;
    }
    for (size_t k = 0; k < ta.n; ++k) {
        const slot *a = &ta.s[k];
        const slot *b = find_slot(&tb, a->layer, a->op);
        if (b == NULL || b->row_elems != a->row_elems)
            continue; /* both run the same engine: cannot happen unless it is broken */
        const double *e = NULL;
        if (env != NULL)
            for (size_t j = 0; j < tn.n && e == NULL; ++j)
                if (tn.s[j].layer == a->layer && strcmp(tn.s[j].op, a->op) == 0)
                    e = env + j * tn.n_pos;
        hx_trace_op *o = &r->ops[r->n_ops++];
        compare_op(o, a, b, ta.n_pos, e);
        if (o->n_pos_diff > 0 && r->first_diff < 0)
            r->first_diff = (int64_t)(r->n_ops - 1);
        if (o->beyond_pos >= 0 && r->first_beyond < 0)
            r->first_beyond = (int64_t)(r->n_ops - 1);
    }
    tape_free(&ta);
    tape_free(&tb);
    tape_free(&tn);
    free(env);
    *out = r;
    return LM_OK;
fail:
    tape_free(&ta);
    tape_free(&tb);
    tape_free(&tn);
    free(env);
    hx_trace_result_free(r);
    return rc;
}

void hx_trace_result_free(hx_trace_result *r)
{
    if (r == NULL)
        return;
    free(r->path);
    free(r->ops);
    free(r);
}

/* ---- printing ---- */

static void op_name(char *buf, size_t n, const hx_trace_op *o)
{
    if (strcmp(o->op, "out_norm") == 0 || strcmp(o->op, "logits") == 0)
        snprintf(buf, n, "%s", o->op);
    else
        snprintf(buf, n, "L%u %s", (unsigned)o->layer, o->op);
}

/* Rows per prefill call at position pos for a step (0 = the whole prompt in one call). */
static uint32_t call_rows(uint32_t step, uint32_t n_prompt, int64_t pos)
{
    if (pos >= (int64_t)n_prompt)
        return 1; /* decode: one token per call */
    if (step == 0 || step >= n_prompt)
        return n_prompt;
    uint32_t start = (uint32_t)pos / step * step;
    return start + step <= n_prompt ? step : n_prompt - start;
}

/* Why A and B part at op o, when the configurations tell: another backend (another summation
 * order), another row count per call for a backend whose order depends on it (not chunk
 * invariant: BLAS picks its kernel and blocking by the call's shape), another thread count. */
static void why(char *buf, size_t n, const hx_trace_result *r, const hx_trace_op *o)
{
    const hx_config *a = &r->a, *b = &r->b;
    buf[0] = '\0';
    if (strcmp(a->backend, b->backend) != 0) {
        snprintf(buf, n, "; why: other backends (%s vs %s) sum in other orders", a->backend,
                 b->backend);
        return;
    }
    uint32_t ra = call_rows(a->step, r->n_prompt, o->first_pos);
    uint32_t rb = call_rows(b->step, r->n_prompt, o->first_pos);
    bool invariant = (lm_backend_flags(a->backend) & LM_BE_CHUNK_INVARIANT) != 0;
    if (ra != rb && !invariant)
        snprintf(buf, n, "; why: at pos %lld A computes a %u-row call and B a %u-row call, and "
                 "%s's kernel and blocking (its summation order) depend on the call's rows",
                 (long long)o->first_pos, (unsigned)ra, (unsigned)rb, a->backend);
    else if (a->threads != b->threads && !invariant)
        snprintf(buf, n, "; why: %d vs %d threads split %s's sums differently",
                 hx_config_n_threads(a), hx_config_n_threads(b), a->backend);
    else if (ra != rb)
        snprintf(buf, n, "; why: at pos %lld a %u-row vs a %u-row chunk, though %s is chunk "
                 "invariant: a chunk-dependent step outside its kernels (e.g. attention over "
                 "a chunk)", (long long)o->first_pos, (unsigned)ra, (unsigned)rb, a->backend);
}

void hx_trace_summary(char *buf, size_t n, const hx_trace_result *r, const char *a_name,
                      const char *b_name)
{
    char where[48];
    if (r->first_diff < 0) {
        snprintf(buf, n, "%s vs %s: identical at every operation (%zu operations, %u positions)",
                 a_name, b_name, r->n_ops, (unsigned)(r->n_prompt + r->n_gen));
        return;
    }
    const hx_trace_op *o = &r->ops[r->first_diff];
    op_name(where, sizeof where, o);
    int k = snprintf(buf, n, "%s vs %s part first at %s (max abs %.2g at pos %u, %u of %u "
                             "positions differ, first at pos %lld)",
                     a_name, b_name, where, o->max_abs, (unsigned)o->max_pos,
                     (unsigned)o->n_pos_diff, (unsigned)o->n_pos, (long long)o->first_pos);
    if (k < 0 || (size_t)k >= n)
        return;
    why(buf + k, n - (size_t)k, r, o);
    k += (int)strlen(buf + k);
    if (!r->has_env) {
        snprintf(buf + k, n - (size_t)k, "; no envelope measured");
    } else if (r->first_beyond < 0) {
        snprintf(buf + k, n - (size_t)k, "; never beyond the envelope (%u naive-sr runs, "
                                         "safety %g)", (unsigned)r->ensemble, HX_ENVELOPE_SAFETY);
    } else {
        const hx_trace_op *ob = &r->ops[r->first_beyond];
        op_name(where, sizeof where, ob);
        snprintf(buf + k, n - (size_t)k, "; first beyond the envelope at %s (pos %lld, max abs "
                                         "%.2g vs E %.2g at pos %u)",
                 where, (long long)ob->beyond_pos, ob->max_abs, ob->e_at_max,
                 (unsigned)ob->max_pos);
    }
}

void hx_trace_print(FILE *f, const hx_trace_result *r, const char *a_name, const char *b_name,
                    bool table)
{
    char line[1024];
    hx_trace_summary(line, sizeof line, r, a_name, b_name);
    fprintf(f, "%s\n", line);
    if (!table)
        return;
    fprintf(f, "%-16s %5s %9s %6s %10s %9s %10s %9s  %s\n", "operation", "elems", "pos diff",
            "first", "max abs", "ulp", "E at max", "max/E", "");
    for (size_t i = 0; i < r->n_ops; ++i) {
        const hx_trace_op *o = &r->ops[i];
        char name[48], pd[24], first[24], ulp[24], e[16], ratio[16];
        op_name(name, sizeof name, o);
        snprintf(pd, sizeof pd, "%u/%u", (unsigned)o->n_pos_diff, (unsigned)o->n_pos);
        if (o->first_pos >= 0)
            snprintf(first, sizeof first, "%lld", (long long)o->first_pos);
        else
            snprintf(first, sizeof first, "-");
        if (o->max_ulp == HX_ULP_NAN)
            snprintf(ulp, sizeof ulp, "nan");
        else
            snprintf(ulp, sizeof ulp, "%llu", (unsigned long long)o->max_ulp);
        if (r->has_env && o->n_pos_diff > 0) {
            snprintf(e, sizeof e, "%.2g", o->e_at_max);
            snprintf(ratio, sizeof ratio, "%.3g", o->worst_ratio);
        } else {
            snprintf(e, sizeof e, "-");
            snprintf(ratio, sizeof ratio, "-");
        }
        const char *mark = o->nonfinite         ? "NONFINITE"
                           : o->n_pos_diff == 0 ? "="
                           : o->beyond_pos >= 0 ? "BEYOND"
                                                : "bits";
        const bool fd = (int64_t)i == r->first_diff, fb = (int64_t)i == r->first_beyond;
        fprintf(f, "%-16s %5zu %9s %6s %10.3g %9s %10s %9s  %s%s\n", name, o->row_elems, pd, first,
                o->max_abs, ulp, e, ratio, mark,
                fd && fb ? "  <- parts first, first beyond E"
                : fd     ? "  <- parts first"
                : fb     ? "  <- first beyond E"
                         : "");
    }
}
