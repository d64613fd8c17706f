/* sweep.c — hx_sweep_run_all: teacher path, reference, SR envelope, every configuration and
 * its baseline, compared and folded into one report (the contract is in sweep.h). */
#include "run/sweep.h"
#include "judge/model_check.h"

#include "kvd_util.h"

#include "model/classify.h"
#include "judge/compare.h"
#include "judge/coverage.h"
#include "run/ensemble.h"
#include "run/envelope_sr.h"
#include "judge/fingerprint.h"
#include "judge/split_risk.h"
#include "fs.h"
#include "kvd_engine.h"
#include "kvd_profile.h"
#include "model/metrics.h"
#include "run/parallel.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

/* Identifies how the ensemble was made (part of the envelope's cache key): the SR backend's
 * coin scheme and elementwise perturbation (HX_NAIVE_SR_MODE), the statistic (stat=: spread
 * around the members' mean, envelope.h) and the ensemble's schedule. Change it whenever any of
 * them changes, so that an envelope cached under another mode is never reused. */
static const char ensemble_mode[] =
    "naive-sr:step=full:threads=1:" HX_NAIVE_SR_MODE ":stat=mean-spread-v2";

static void vlog(const hx_sweep_params *p, const char *fmt, va_list ap) LM_PRINTF(2, 0);
static void vlog(const hx_sweep_params *p, const char *fmt, va_list ap)
{
    char line[1024];
    vsnprintf(line, sizeof line, fmt, ap);
    p->log(p->log_user, line);
}

/* A progress line (not when quiet). */
static void progress(const hx_sweep_params *p, const char *fmt, ...) LM_PRINTF(2, 3);
static void progress(const hx_sweep_params *p, const char *fmt, ...)
{
    if (p->quiet || p->log == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(p, fmt, ap);
    va_end(ap);
}

/* A warning (also when quiet): the cache costs time, never correctness. */
static void warn(const hx_sweep_params *p, const char *fmt, ...) LM_PRINTF(2, 3);
static void warn(const hx_sweep_params *p, const char *fmt, ...)
{
    if (p->log == NULL)
        return;
    va_list ap;
    va_start(ap, fmt);
    vlog(p, fmt, ap);
    va_end(ap);
}

/* ---- a small pool of engine runs: each job is one hx_run_capture ---- */

typedef struct run_job {
    hx_config cfg;
    hx_capture *cap;
    hx_run_stats stats;
    double wall_s;
    int rc;
    lm_err err;
} run_job;

typedef struct run_pool {
    const hx_sweep_params *p;
    const hx_run_request *rq;
    run_job **order; /* [n] parallel-safe jobs first, then the rest; hx_run_jobs index i is
                        order[first + i] */
    size_t first, n, done;
    const char *what; /* "ensemble" or "config" for the progress lines */
} run_pool;

static int run_one(void *ctx, uint32_t i, lm_err *err)
{
    run_pool *pool = ctx;
    run_job *j = pool->order[pool->first + i];
    double t0 = lm_now_s();
    j->rc = hx_run_capture(&j->cap, &j->stats, pool->p->model, &j->cfg, pool->rq, &j->err);
    j->wall_s = lm_now_s() - t0;
    if (j->rc != LM_OK)
        *err = j->err;
    return j->rc;
}

static void report_done(void *ctx, uint32_t i, int rc)
{
    run_pool *pool = ctx;
    const run_job *j = pool->order[pool->first + i];
    char name[HX_CONFIG_STR_MAX];
    hx_config_format(name, sizeof name, &j->cfg);
    if (lm_backend_flags(j->cfg.backend) & LM_BE_SEEDED)
        snprintf(name, sizeof name, "%s seed %llu", j->cfg.backend,
                 (unsigned long long)j->cfg.sr_seed);
    ++pool->done;
    if (rc == LM_OK)
        progress(pool->p, "[%zu/%zu] %s %-28s %.3f s%s", pool->done, pool->n, pool->what, name,
                 j->wall_s, j->stats.reran_forced ? " (left the path: forced rows re-run)" : "");
}

/* Whether a backend may run beside another run in the same process: not when it keeps
 * process-global state (LM_BE_SHARES_PROCESS_STATE: OpenBLAS's thread count, whose concurrent
 * use was measured to change bits: a blas:step=full capture hashed differently under -j 2).
 * Those run alone, after the others. */
static bool parallel_safe(const hx_config *c)
{
    return !(lm_backend_flags(c->backend) & LM_BE_SHARES_PROCESS_STATE);
}

/* Runs every job: the parallel-safe ones on min(jobs, their count) threads (hx_run_jobs; the
 * caller's alone when that is 1), then the others one at a time. The first failing job's
 * error is returned (in job order). */
static int pool_run(run_job *jobs, size_t n, const hx_sweep_params *p, const hx_run_request *rq,
                    const char *what, lm_err *err)
{
    const uint32_t nt = p->jobs > 1 ? p->jobs : 1;
    size_t n_safe = 0;
    /* Parallel-safe jobs first, in order, then the rest, in order (stable partition via an
     * index list: jobs[] itself keeps its order for the caller). */
    run_job **order = calloc(n ? n : 1, sizeof *order);
    if (order == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < n; ++i)
        if (nt > 1 && parallel_safe(&jobs[i].cfg))
            order[n_safe++] = &jobs[i];
    for (size_t i = 0, k = n_safe; i < n; ++i)
        if (!(nt > 1 && parallel_safe(&jobs[i].cfg)))
            order[k++] = &jobs[i];
    run_pool pool = {.p = p, .rq = rq, .order = order, .n = n, .what = what};
    lm_err e = {0};
    int rc = hx_run_jobs((uint32_t)n_safe, nt, run_one, report_done, &pool, &e);
    pool.first = n_safe;
    if (rc == LM_OK)
        rc = hx_run_jobs((uint32_t)(n - n_safe), 1, run_one, report_done, &pool, &e);
    free(order);
    for (size_t i = 0; i < n; ++i)
        if (jobs[i].rc != LM_OK)
            return LM_FAIL(err, jobs[i].rc, "%s", jobs[i].err.msg);
    return rc == LM_OK ? LM_OK : LM_FAIL(err, rc, "%s", e.msg);
}

static void jobs_free(run_job *jobs, size_t n)
{
    if (jobs == NULL)
        return;
    for (size_t i = 0; i < n; ++i)
        hx_capture_free(jobs[i].cap);
    free(jobs);
}

/* ---- steps (a) to (d) ---- */

static int check_params(const hx_sweep_params *p, lm_err *err)
{
    if (p->model == NULL || p->ref == NULL)
        return LM_FAIL(err, LM_E_INPUT, "no model (the engine's and the reference's are needed)");
    if (p->n_prompt == 0 || p->prompt == NULL)
        return LM_FAIL(err, LM_E_INPUT, "empty prompt");
    if (p->n_configs == 0 || p->configs == NULL)
        return LM_FAIL(err, LM_E_INPUT, "no configurations");
    uint32_t m = p->ensemble ? p->ensemble : HX_SWEEP_DEFAULT_ENSEMBLE;
    if (m < HX_ENVELOPE_MIN_MEMBERS)
        return LM_FAIL(err, LM_E_INPUT, "ensemble of %u runs: at least %u are needed",
                       (unsigned)m, (unsigned)HX_ENVELOPE_MIN_MEMBERS);
    const lm_hparams *hp = &p->model->hp;
    int rc = hx_check_token_ids(p->prompt, p->n_prompt, hp->n_vocab, "prompt", err);
    if (rc != LM_OK)
        return rc;
    uint64_t need = (uint64_t)p->n_prompt + p->n_gen;
    if (hp->n_ctx_train != 0 && need > hp->n_ctx_train)
        return LM_FAIL(err, LM_E_INPUT, "%u prompt tokens + %u generated exceed the "
                                        "model's context of %u", (unsigned)p->n_prompt,
                       (unsigned)p->n_gen, (unsigned)hp->n_ctx_train);
    for (size_t i = 0; i < p->n_configs; ++i)
        for (size_t j = 0; j < i; ++j)
            if (hx_config_equal(&p->configs[i], &p->configs[j])) {
                char s[HX_CONFIG_STR_MAX];
                hx_config_format(s, sizeof s, &p->configs[i]);
                return LM_FAIL(err, LM_E_INPUT, "configuration %s is listed twice", s);
            }
    return LM_OK;
}

/* A teacher path's progress: a line every HX_PATH_PROGRESS_S seconds of its prefill (one
 * chunk: the share of layers done is the share of the work), with an ETA. */
#define HX_PATH_PROGRESS_S 5.0
typedef struct path_progress {
    const hx_sweep_params *p;
    double t0, last;
} path_progress;

static void path_layer(void *user, uint32_t layer, uint32_t n_layer, uint32_t n)
{
    path_progress *pp = user;
    const double el = lm_now_s() - pp->t0;
    if (el - pp->last < HX_PATH_PROGRESS_S)
        return;
    pp->last = el;
    const double done = (double)layer / n_layer;
    progress(pp->p, "teacher path: prefill of %u tokens, layer %u/%u, %3.0f%%, %.1f s, ETA %.1f s",
             (unsigned)n, (unsigned)layer, (unsigned)n_layer, 100.0 * done, el,
             el * (1.0 - done) / done);
}

/* Greedy continuation of naive:step=full:threads=1 after prompt + path[0..from): fills
 * path[from..n_gen), with progress lines during its prefill. With from == 0 it also records the run's hash (the naive engine's bits on
 * this input, part of the envelope's cache key). */
static int continue_path(hx_sweep_result *r, const hx_sweep_params *p, uint32_t from, lm_err *err)
{
    size_t n_pre = (size_t)p->n_prompt + from;
    int32_t *pre = malloc(n_pre * sizeof *pre);
    if (pre == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    memcpy(pre, p->prompt, p->n_prompt * sizeof *pre);
    memcpy(pre + p->n_prompt, r->path, from * sizeof *pre);
    hx_config pc = {.backend = "naive", .step = 0, .threads = 1};
    /* Timed once: the path's speed is not a configuration's. */
    hx_run_request rq = {.prompt = pre, .n_prompt = (uint32_t)n_pre, .n_gen = p->n_gen - from,
                         .time_once = true, .on_layer = p->quiet ? NULL : path_layer};
    path_progress pp = {.p = p, .t0 = lm_now_s()};
    rq.on_layer_user = &pp;
    hx_capture *c = NULL;
    hx_run_stats st;
    int rc = hx_run_capture(&c, &st, p->model, &pc, &rq, err);
    if (rc == LM_OK) {
        memcpy(r->path + from, c->tokens + n_pre, (p->n_gen - from) * sizeof *r->path);
        if (from == 0)
            rc = hx_capture_hash(r->path_hash, c, err);
    }
    hx_capture_free(c);
    free(pre);
    return rc;
}

#ifdef LM_TEST_HOOKS
int64_t hx_sweep_test_poison_path = -1;
#endif

/* (a) The first teacher path: naive, one chunk, one thread, greedy (see sweep.h). */
static int teacher_path(hx_sweep_result *r, const hx_sweep_params *p, lm_err *err)
{
    r->path_source = HX_PATH_NAIVE_FULL;
    r->n_gen = p->n_gen;
    r->path = calloc(p->n_gen ? p->n_gen : 1, sizeof *r->path);
    if (r->path == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    progress(p, "teacher path: naive:step=full:threads=1 on %u prompt tokens, %u greedy ...",
             (unsigned)p->n_prompt, (unsigned)p->n_gen);
    double t0 = lm_now_s();
    int rc = continue_path(r, p, 0, err);
    if (rc != LM_OK)
        return rc;
#ifdef LM_TEST_HOOKS
    /* Tests make the first path wrong at one index so that the repair in (b) must happen. */
    if (hx_sweep_test_poison_path >= 0 && (uint64_t)hx_sweep_test_poison_path < p->n_gen)
        r->path[hx_sweep_test_poison_path] =
            (r->path[hx_sweep_test_poison_path] + 1) % (int32_t)p->model->hp.n_vocab;
#endif
    r->path_s = lm_now_s() - t0;
    progress(p, "teacher path: %u greedy tokens of naive:step=full:threads=1 (%.3f s)",
             (unsigned)p->n_gen, r->path_s);
    return LM_OK;
}

/* First generated index j where the reference's argmax (logits at n_prompt-1+j) differs from
 * path[j], or -1; *top receives the reference's token there. */
static int ref_departure(int64_t *at, int32_t *top, const hx_sweep_result *r,
                         const hx_sweep_params *p, lm_err *err)
{
    *at = -1;
    for (uint32_t j = 0; j < p->n_gen; ++j) {
        int64_t row = ref_capture_find_pos(&r->ref, p->n_prompt - 1 + j);
        if (row < 0)
            return LM_FAIL(err, LM_E_INPUT, "reference has no logits at position %u",
                           (unsigned)(p->n_prompt - 1 + j));
        int32_t t = hx_argmax_f64(r->ref.logits + (size_t)row * r->ref.n_vocab, r->ref.n_vocab);
        if (t != r->path[j]) {
            *at = j;
            *top = t;
            return LM_OK;
        }
    }
    return LM_OK;
}

/* Whether the logits of every prompt position are classified: when the reference's output
 * projections of the extra n_prompt - 1 rows add at most HX_PROMPT_ROWS_MAX_COST to its pass
 * (ref_macs; the SR envelope and the engine's extra prefill scale alike) and one
 * configuration's prompt rows fit in HX_PROMPT_ROWS_MAX_BYTES. Otherwise why into why[n]. */
static bool prompt_rows_allowed(const hx_sweep_params *p, const ref_request *rq, char *why,
                                size_t n)
{
    ref_request all = *rq;
    all.pos = NULL;
    all.n_pos = 0;
    const double base = ref_macs(p->ref, &all);
    all.n_prompt = 1; /* the default positions from 0: every row */
    const double more = ref_macs(p->ref, &all) - base;
    const double bytes = (double)p->n_prompt * p->model->hp.n_vocab * sizeof(float);
    why[0] = '\0';
    if (p->n_prompt < 2)
        return false;
    if (base > 0.0 && more / base > HX_PROMPT_ROWS_MAX_COST) {
        snprintf(why, n, "the last only: the others would add %.0f%% to the reference pass",
                 100.0 * more / base);
        return false;
    }
    if (bytes > HX_PROMPT_ROWS_MAX_BYTES) {
        snprintf(why, n, "the last only: the others' logits take %.0f MiB per configuration",
                 bytes / 1048576.0);
        return false;
    }
    return true;
}

/* The reference's smallest top-2 margin over its logits rows, into the report. */
static void min_margin(hx_report *rep, const ref_capture *ref)
{
    rep->min_margin = (double)NAN;
    for (uint32_t i = 0; i < ref->n_pos; ++i) {
        const double *x = ref_capture_logits(ref, i);
        double t1 = -INFINITY, t2 = -INFINITY;
        for (uint32_t v = 0; v < ref->n_vocab; ++v)
            if (x[v] > t1) {
                t2 = t1;
                t1 = x[v];
            } else if (x[v] > t2) {
                t2 = x[v];
            }
        if (isnan(rep->min_margin) || t1 - t2 < rep->min_margin) {
            rep->min_margin = t1 - t2;
            rep->min_margin_pos = ref->pos[i];
        }
    }
}

/* (b) The reference on prompt + path, and the path made the reference's own greedy path:
 * wherever the reference's argmax leaves the path, the path takes the reference's token and
 * naive's greedy continuation after it, and the reference is computed again. Each round fixes
 * at least one more position, so there are at most n_gen rounds; usually there are none. */
static int reference(hx_sweep_result *r, const hx_sweep_params *p, lm_err *err)
{
    size_t n = (size_t)p->n_prompt + p->n_gen;
    int32_t *all = malloc(n * sizeof *all);
    r->pos = malloc(n * sizeof *r->pos);
    if (all == NULL || r->pos == NULL) {
        free(all);
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    ref_request rq = {.tokens = all, .n_tokens = (uint32_t)n, .n_prompt = p->n_prompt,
                      .prec = p->precision ? p->precision : REF_DEFAULT_PREC,
                      .n_threads = p->ref_threads, .progress = p->ref_progress,
                      .progress_user = p->ref_progress_user, .log = p->log,
                      .log_user = p->log_user};
    hx_report *rep = r->report;
    r->prompt_rows = prompt_rows_allowed(p, &rq, rep->prompt_rows_why,
                                         sizeof rep->prompt_rows_why);
    rep->prompt_rows = r->prompt_rows ? p->n_prompt : 1;
    if (r->prompt_rows) { /* every position: the prompt's rows, then the default ones */
        for (uint32_t i = 0; i < n; ++i)
            r->pos[i] = i;
        rq.pos = r->pos;
        rq.n_pos = (uint32_t)n;
    }
    double t0 = lm_now_s();
    /* The reference's own reading of the file against the engine's, also when every capture
     * comes from the cache: an engine dequantization or hyperparameter defect stops the sweep,
     * naming the tensor or key. */
    lm_err e2 = {0};
    int rc = hx_model_check(p->model, p->ref, &e2);
    if (rc != LM_OK) {
        free(all);
        return LM_FAIL(err, rc, "the engine's model differs from the reference's own reading of "
                                "its file: %s", e2.msg);
    }
    for (uint32_t round = 0;; ++round) {
        memcpy(all, p->prompt, p->n_prompt * sizeof *all);
        memcpy(all + p->n_prompt, r->path, p->n_gen * sizeof *all);
        ref_capture_free(&r->ref);
        ref_cache_key(r->ref_key, p->ref, &rq);
        if ((rc = lm_model_file_unchanged(p->model, err)) != LM_OK ||
            (rc = ref_cached(&r->ref, p->ref, &rq, p->cache_dir, &r->ref_hit, err)) != LM_OK ||
            (rc = ref_capture_check_finite(&r->ref, p->model_label ? p->model_label : "model",
                                        err)) != LM_OK ||
            (rc = ref_departure(&r->ref_leaves_at, &r->ref_token_at, r, p, err)) != LM_OK)
            break;
        if (r->ref_leaves_at < 0) {
            r->path_source = round == 0 ? r->path_source : HX_PATH_REFERENCE;
            break;
        }
        progress(p, "teacher path: the reference picks %d at generated index %lld (naive: %d); "
                    "repairing the path", (int)r->ref_token_at, (long long)r->ref_leaves_at,
                 (int)r->path[r->ref_leaves_at]);
        uint32_t j = (uint32_t)r->ref_leaves_at;
        r->path[j] = r->ref_token_at;
        if (j + 1 < p->n_gen && (rc = continue_path(r, p, j + 1, err)) != LM_OK)
            break;
    }
    r->ref_s = lm_now_s() - t0;
    free(all);
    if (rc != LM_OK)
        return rc;
    min_margin(rep, &r->ref);
    progress(p, "reference %s at %u bits (%.3f s)", r->ref_hit ? "loaded from cache" : "computed",
             (unsigned)rq.prec, r->ref_s);
    return LM_OK;
}

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* The engine's naive-sr members of one envelope (ensemble.h), each captured on the sweep's
 * request (runner.h) into cap[i]. */
typedef struct engine_members {
    const hx_sweep_params *p;
    const hx_run_request *rq;
    hx_capture **cap; /* [n] */
    double *wall_s;   /* [n] */
    uint64_t seed;    /* member i's seed is seed + i */
    uint32_t n, done;
} engine_members;

static int engine_member_run(void *user, const hx_config *member, uint32_t i, lm_err *err)
{
    engine_members *e = user;
    hx_run_stats st;
    const double t0 = lm_now_s();
    const int rc = hx_run_capture(&e->cap[i], &st, e->p->model, member, e->rq, err);
    e->wall_s[i] = lm_now_s() - t0;
    return rc;
}

static void engine_member_done(void *user, uint32_t i, int rc)
{
    engine_members *e = user;
    ++e->done;
    if (rc == LM_OK)
        progress(e->p, "[%u/%u] ensemble naive-sr seed %llu %.3f s", (unsigned)e->done,
                 (unsigned)e->n, (unsigned long long)(e->seed + i), e->wall_s[i]);
}

/* The engine's naive-sr ensemble (m members, seeds seed + i) under a precision profile ("" =
 * f32; the members round at the profile's sites, kvd_profile.h) folded into *out. */
static int engine_envelope(hx_envelope **out, hx_sweep_result *r, const hx_sweep_params *p,
                           const hx_run_request *rq, uint32_t m, uint64_t seed,
                           const char *profile, lm_err *err)
{
    engine_members e = {.p = p, .rq = rq, .cap = calloc(m ? m : 1, sizeof *e.cap),
                        .wall_s = calloc(m ? m : 1, sizeof *e.wall_s), .seed = seed, .n = m};
    int rc = e.cap == NULL || e.wall_s == NULL
                 ? LM_FAIL(err, LM_E_NOMEM, "out of memory")
                 : hx_ensemble_run_engine(m, seed, profile, p->jobs > 1 ? p->jobs : 1,
                                          engine_member_run, engine_member_done, &e, err);
    if (rc == LM_OK)
        rc = hx_envelope_from_ensemble(out, (const hx_capture *const *)e.cap, m, &r->ref,
                                       HX_ENVELOPE_SAFETY, err);
    for (uint32_t i = 0; e.cap != NULL && i < m; ++i)
        hx_capture_free(e.cap[i]);
    free(e.cap);
    free(e.wall_s);
    return rc;
}

/* (c) The SR ensemble's envelope for one precision profile ("" = f32), loaded from the cache
 * or measured and stored into *out. */
static int envelope(hx_envelope **out, hx_sweep_result *r, const hx_sweep_params *p,
                    const hx_run_request *rq, const char *profile, lm_err *err)
{
    uint32_t m = p->ensemble ? p->ensemble : HX_SWEEP_DEFAULT_ENSEMBLE;
    uint64_t seed = p->sr_seed_set ? p->sr_seed : HX_SWEEP_DEFAULT_SEED;
    char dir[4096], path[4200] = "";
    uint8_t key[16];
    lm_err cerr = {0};
    int rc;
    bool cached = lm_cache_open(dir, sizeof dir, p->cache_dir, &cerr) == LM_OK;
    if (!cached) /* the reference step has said so already when it is the same folder */
        warn(p, "envelope cache unusable (%s); computing without it", cerr.msg);
    /* The members: SR runs of the reference's own model under the profile (envelope_sr.h)
     * when it implements the model, else (or with --envelope engine) the engine's naive-sr
     * ensemble. extra = the ensemble mode (hx_envelope_sr_mode: a profile other than f32 adds
     * its name); for the engine's ensemble also the teacher-path capture's hash: the naive
     * engine's bits on this input, so an engine change (elementwise code, libm) never reuses
     * an old envelope; f32 keeps the key it always had, another profile adds its name. */
    const bool use_sr = hx_envelope_source(p->ref, &r->ref, profile, p->engine_envelope) ==
                        HX_MEMBERS_REF_SR;
    const char *who = hx_member_source_name(use_sr ? HX_MEMBERS_REF_SR : HX_MEMBERS_NAIVE_SR);
    if (profile[0] == '\0')
        r->env_ref_sr = use_sr; /* the f32 envelope's members */
    char extra[sizeof ensemble_mode + 96];
    char ph[33];
    lm_hex_encode(ph, r->path_hash, 16);
    int ne = use_sr ? hx_envelope_sr_mode(extra, sizeof extra, profile)
                    : snprintf(extra, sizeof extra, "%s;path=%s%s%s", ensemble_mode, ph,
                               profile[0] ? ";profile=" LM_PROFILE_RULES ":" : "", profile);
    hx_envelope_key(key, r->ref_key, m, seed, HX_ENVELOPE_SAFETY, extra, (uint32_t)ne);
    if (cached && (rc = hx_envelope_cache_path(path, sizeof path, dir, key, err)) != LM_OK)
        return rc;
    double t0 = lm_now_s();
    if (cached && file_exists(path)) {
        lm_err e2 = {0};
        if (hx_envelope_load(out, path, key, &e2) == LM_OK) {
            r->env_hit = true;
            r->ensemble_s += lm_now_s() - t0;
            progress(p, "envelope%s%s loaded from cache (%u %s members)",
                     profile[0] ? " of profile " : "", profile, (unsigned)m, who);
            return LM_OK;
        }
        warn(p, "envelope cache entry unusable (%s); recomputed", e2.msg);
    }
    if (use_sr) {
        progress(p, "envelope%s%s: %u SR runs of the reference's float32 model (%u tokens)%s",
                 profile[0] ? " of profile " : "", profile, (unsigned)m,
                 (unsigned)r->ref.n_tokens, cached ? ", cached when done" : "");
        rc = hx_envelope_from_ref_sr(out, p->ref, &r->ref, profile, m, seed, p->ref_threads,
                                     HX_ENVELOPE_SAFETY, p->ref_progress, p->ref_progress_user,
                                     err);
    } else {
        rc = engine_envelope(out, r, p, rq, m, seed, profile, err);
    }
    if (rc != LM_OK)
        return rc;
    memcpy((*out)->key, key, sizeof key);
    /* the cache costs time, never correctness: a failed write is a warning, as for the
     * reference cache */
    lm_err werr = {0};
    if (cached && hx_envelope_save(*out, path, &werr) != LM_OK)
        warn(p, "envelope cache entry not stored (%s)", werr.msg);
    double dt = lm_now_s() - t0;
    r->ensemble_s += dt;
    progress(p, "envelope%s%s measured from %u %s runs (%.3f s), cached as %s",
             profile[0] ? " of profile " : "", profile, (unsigned)m, who, dt,
             cached && werr.code == 0 ? path : "(not cached)");
    return LM_OK;
}

/* The envelope of every profile the configurations name: r->env is the first configuration's,
 * r->env_prof[i] the one of lm_profile_at(i) (NULL when no configuration uses it). */
static int envelopes(hx_sweep_result *r, const hx_sweep_params *p, const hx_run_request *rq,
                     lm_err *err)
{
    for (size_t i = 0; i < p->n_configs; ++i) {
        const lm_profile *pf = lm_profile_find(p->configs[i].profile);
        if (pf == NULL)
            return LM_FAIL(err, LM_E_INPUT, "profile '%s': unknown (expected %s)",
                           p->configs[i].profile, lm_profile_expected());
        const uint32_t k = lm_profile_index(pf);
        if (r->env_prof[k] == NULL) {
            int rc = envelope(&r->env_prof[k], r, p, rq, p->configs[i].profile, err);
            if (rc != LM_OK)
                return rc;
        }
        if (i == 0)
            r->env = r->env_prof[k];
    }
    return LM_OK;
}

/* The split-risk forecast of every profile with an envelope, in profile order (split_risk.h),
 * along the reference's greedy path: generated steps 0..n_gen-1, decided at positions
 * n_prompt - 1 onwards. */
static int split_forecasts(hx_sweep_result *r, const hx_sweep_params *p, lm_err *err)
{
    hx_report *rep = r->report;
    for (uint32_t k = 0; k < lm_profile_count() && p->n_gen > 0; ++k) {
        if (r->env_prof[k] == NULL)
            continue;
        int rc = hx_split_forecast_ref(&rep->split[rep->n_split], lm_profile_at(k)->name,
                                       &r->ref, r->env_prof[k], p->n_prompt - 1, p->n_gen, err);
        if (rc != LM_OK)
            return rc;
        ++rep->n_split;
    }
    return LM_OK;
}

static const hx_envelope *env_of(const hx_sweep_result *r, const hx_config *c)
{
    const lm_profile *pf = lm_profile_find(c->profile);
    return pf != NULL ? r->env_prof[lm_profile_index(pf)] : r->env;
}

/* The reference of the teacher path computed with a rotating cache's schedule (max, keep,
 * step and turn; step 0 and turn 0 = one chunk), through the same cache as the plain one. The
 * exact-window policy sees, at every step, what MLX's policy sees token by token: its schedule
 * is step 1's (and has no second turn). */
static int schedule_ref(ref_capture *out, const hx_sweep_result *r, const hx_sweep_params *p,
                        const hx_config *cfg, uint32_t step, uint32_t turn, lm_err *err)
{
    if (cfg->rot_window) {
        step = 1;
        turn = 0;
    }
    uint32_t n1, d, n2;
    hx_turn_split(p->n_prompt, turn, &n1, &d, &n2);
    ref_request rq = {.tokens = r->ref.tokens, .n_tokens = r->ref.n_tokens,
                      .n_prompt = p->n_prompt,
                      .prec = p->precision ? p->precision : REF_DEFAULT_PREC,
                      .n_threads = p->ref_threads, .rot_max_size = cfg->rot_max,
                      .rot_keep = cfg->rot_keep, .rot_step = step,
                      .rot_turn_at = n2 > 0 ? n1 : 0, .rot_turn_d = n2 > 0 ? d : 0,
                      .pos = r->prompt_rows ? r->pos : NULL,
                      .n_pos = r->prompt_rows ? r->ref.n_tokens : 0,
                      .progress = p->ref_progress, .progress_user = p->ref_progress_user,
                      .log = p->log, .log_user = p->log_user};
    bool hit = false;
    int rc = lm_model_file_unchanged(p->model, err);
    return rc != LM_OK ? rc : ref_cached(out, p->ref, &rq, p->cache_dir, &hit, err);
}

/* (d) Every configuration and every baseline not among them, then the comparisons. */
static int configurations(hx_sweep_result *r, const hx_sweep_params *p, const hx_run_request *rq,
                          lm_err *err)
{
    size_t nc = p->n_configs, nj = nc;
    /* Jobs 0..nc-1 are the configurations; extra baselines follow, each once. */
    run_job *jobs = calloc(2 * nc, sizeof *jobs);
    int64_t *base_job = calloc(nc, sizeof *base_job);
    if (jobs == NULL || base_job == NULL) {
        free(jobs);
        free(base_job);
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    for (size_t i = 0; i < nc; ++i)
        jobs[i].cfg = p->configs[i];
    for (size_t i = 0; i < nc; ++i) {
        hx_config b = hx_config_baseline(&p->configs[i]);
        base_job[i] = -1;
        for (size_t j = 0; j < nj && base_job[i] < 0; ++j)
            if (hx_config_equal(&jobs[j].cfg, &b))
                base_job[i] = (int64_t)j;
        if (base_job[i] < 0) {
            jobs[nj].cfg = b;
            base_job[i] = (int64_t)nj++;
        }
    }
    double t0 = lm_now_s();
    int rc = pool_run(jobs, nj, p, rq, "config", err);
    r->configs_s = lm_now_s() - t0;
    if (rc == LM_OK) {
        r->runs = calloc(nc, sizeof *r->runs);
        r->extra_base = calloc(nj - nc ? nj - nc : 1, sizeof *r->extra_base);
        if (r->runs == NULL || r->extra_base == NULL)
            rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    if (rc == LM_OK) {
        /* Move the captures into the result (the jobs then own nothing). */
        r->n_runs = nc;
        for (size_t i = 0; i < nc; ++i) {
            hx_sweep_run *run = &r->runs[i];
            run->cfg = jobs[i].cfg;
            run->cap = jobs[i].cap;
            run->stats = jobs[i].stats;
            run->wall_s = jobs[i].wall_s;
            jobs[i].cap = NULL;
        }
        for (size_t j = nc; j < nj; ++j) {
            r->extra_base[r->n_extra_base++] = jobs[j].cap;
            jobs[j].cap = NULL;
        }
        for (size_t i = 0; i < nc; ++i) {
            hx_sweep_run *run = &r->runs[i];
            int64_t b = base_job[i];
            run->baseline = b < (int64_t)nc ? b : -1;
            run->base = b < (int64_t)nc ? r->runs[b].cap : r->extra_base[b - (int64_t)nc];
        }
    }
    jobs_free(jobs, nj);
    free(base_job);
    if (rc != LM_OK)
        return rc;

    t0 = lm_now_s();
    for (size_t i = 0; i < nc && rc == LM_OK; ++i) {
        hx_sweep_run *run = &r->runs[i];
        char name[HX_CONFIG_STR_MAX];
        hx_config_format(name, sizeof name, &run->cfg);
        hx_config_report *c = NULL;
        if ((rc = hx_report_add_config(r->report, &c, name, err)) != LM_OK)
            break;
        if (run->cfg.rot_max == 0) {
            if ((rc = hx_compare_capture(c, run->cap, run->base, &r->ref, env_of(r, &run->cfg),
                                         err)) != LM_OK)
                break;
        } else {
            /* Numerical: against the reference with this configuration's schedule. Semantic:
             * that reference against the same cache's one-chunk reference. */
            ref_capture rs = {0}, r1 = {0};
            rc = schedule_ref(&rs, r, p, &run->cfg, run->cfg.step, run->cfg.turn, err);
            if (rc == LM_OK)
                rc = schedule_ref(&r1, r, p, &run->cfg, 0, 0, err);
            if (rc == LM_OK)
                rc = hx_compare_capture(c, run->cap, run->base, &rs, env_of(r, &run->cfg), err);
            if (rc == LM_OK) {
                hx_compare_semantic(c, &rs, &r1);
                c->sem_same_schedule =
                    (run->cfg.step == 0 && run->cfg.turn == 0) || run->cfg.rot_window;
            }
            ref_capture_free(&rs);
            ref_capture_free(&r1);
            if (rc != LM_OK)
                break;
        }
        if ((rc = hx_capture_hash(run->hash, run->cap, err)) != LM_OK)
            break;
        lm_hex_encode(run->hash_hex, run->hash, 16);
        memcpy(c->hash_hex, run->hash_hex, sizeof c->hash_hex);
        const hx_run_stats *st = &run->stats;
        c->prefill_tps = st->prefill_s > 0.0 ? (double)p->n_prompt / st->prefill_s : 0.0;
        c->decode_tps = st->decode_s > 0.0 && st->n_decode ? (double)st->n_decode / st->decode_s
                                                           : 0.0;
        c->peak_mem_bytes = st->ctx_bytes;
        c->wall_s = run->wall_s;
    }
    r->compare_s = lm_now_s() - t0;
    return rc;
}

/* (e) MoE routing flips against the reference's routing, with the sweep's own ensemble size
 * and seeds for the TIE band (routing.h); recorded in the report. */
static int routing(hx_sweep_result *r, const hx_sweep_params *p, lm_err *err)
{
    if (p->model->hp.n_expert == 0)
        return LM_OK;
    const double t0 = lm_now_s();
    const uint32_t members = p->ensemble ? p->ensemble : HX_SWEEP_DEFAULT_ENSEMBLE;
    const uint64_t seed = p->sr_seed_set ? p->sr_seed : HX_SWEEP_DEFAULT_SEED;
    int rc = hx_routing_measure(&r->routing, p->model, p->ref, p->prompt, p->n_prompt, p->configs,
                                p->n_configs, p->precision, members, seed, err);
    if (rc != LM_OK)
        return rc;
    hx_routing_to_report(r->report, &r->routing, p->configs);
    progress(p, "routing: %u real flips, TIE band %.3g from %u %s runs (%.3f s)",
             (unsigned)r->routing.n_real, (double)r->routing.tie_tol, (unsigned)members,
             r->routing.members_sr ? "reference float32 SR" : "naive-sr", lm_now_s() - t0);
    return LM_OK;
}

int hx_sweep_run_all(hx_sweep_result **out, const hx_sweep_params *p, lm_err *err)
{
    *out = NULL;
    int rc = check_params(p, err);
    if (rc != LM_OK)
        return rc;
    double t0 = lm_now_s();
    hx_sweep_result *r = calloc(1, sizeof *r);
    if (r == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    r->ref_leaves_at = -1;
    if ((rc = hx_report_create(&r->report, p->case_name ? p->case_name : "sweep", err)) != LM_OK)
        goto fail;
    hx_report *rep = r->report;
    snprintf(rep->model, sizeof rep->model, "%s", p->model_label ? p->model_label : "model");
    lm_hex_encode(rep->model_hash, p->model->content_hash, 16);
    hx_fingerprint fp;
    hx_fingerprint_detect(&fp);
    memcpy(rep->fingerprint_id, fp.id, sizeof rep->fingerprint_id);
    snprintf(rep->fingerprint, sizeof rep->fingerprint, "%s", fp.short_text);
    rep->n_prompt = p->n_prompt;
    rep->n_gen = p->n_gen;
    rep->precision = p->precision ? p->precision : REF_DEFAULT_PREC;
    rep->envelope_safety = HX_ENVELOPE_SAFETY;
    rep->envelope_members = p->ensemble ? p->ensemble : HX_SWEEP_DEFAULT_ENSEMBLE;
    rep->strict_bits = p->strict_bits;
    hx_coverage_fill(rep, p->configs, p->n_configs, p->n_prompt, p->n_gen);

    if ((rc = teacher_path(r, p, err)) != LM_OK || (rc = reference(r, p, err)) != LM_OK)
        goto fail;
    hx_run_request rq = {.prompt = p->prompt, .n_prompt = p->n_prompt, .n_gen = p->n_gen,
                         .forced = r->path, .n_forced = p->n_gen, .time_once = p->time_once,
                         .prompt_rows = r->prompt_rows};
    if ((rc = envelopes(r, p, &rq, err)) != LM_OK || (rc = split_forecasts(r, p, err)) != LM_OK ||
        (rc = configurations(r, p, &rq, err)) != LM_OK ||
        (rc = routing(r, p, err)) != LM_OK)
        goto fail;
    r->total_s = lm_now_s() - t0;
    const double ph[HX_N_PHASES] = {r->path_s, r->ref_s, r->ensemble_s, r->configs_s,
                                    r->compare_s, r->total_s};
    memcpy(rep->phase_s, ph, sizeof ph);
    if ((rep->prompt_ids = malloc(p->n_prompt * sizeof *rep->prompt_ids)) == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
        goto fail;
    }
    memcpy(rep->prompt_ids, p->prompt, p->n_prompt * sizeof *rep->prompt_ids);
    *out = r;
    return LM_OK;
fail:
    hx_sweep_result_free(r);
    return rc;
}

void hx_sweep_result_free(hx_sweep_result *r)
{
    if (r == NULL)
        return;
    hx_report_free(r->report);
    for (size_t i = 0; i < r->n_runs; ++i)
        hx_capture_free(r->runs[i].cap);
    free(r->runs);
    for (size_t i = 0; i < r->n_extra_base; ++i)
        hx_capture_free(r->extra_base[i]);
    free(r->extra_base);
    free(r->path);
    free(r->pos);
    ref_capture_free(&r->ref);
    for (uint32_t k = 0; k < LM_PROFILES_MAX; ++k)
        hx_envelope_free(r->env_prof[k]); /* r->env is one of them */
    hx_routing_result_free(&r->routing);
    free(r);
}

