/* dumps_run.c — hx_judge_run_all: reference, per-profile envelopes, every dump classified
 * (the contract is in dumps_run.h). */
#include "run/dumps_run.h"

#include "model/capture.h"
#include "judge/compare.h"
#include "judge/compare_topk.h"
#include "judge/dumps.h"
#include "judge/envelope.h"
#include "run/envelope_sr.h"
#include "judge/fingerprint.h"
#include "judge/kv_locate.h"
#include "judge/model_check.h"
#include "judge/split_risk.h"
#include "run/forced.h"
#include "fs.h"
#include "kvd_util.h"
#include "kvd_profile.h"
#include "kvd_ref.h"
#include "model/metrics.h"
#include "run/sweep.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* Part of the envelope's cache key: how the members ran (see dumps_run.h (c)). */
static const char judge_mode[] =
    "judge-forced:naive-sr:step=full:" HX_NAIVE_SR_MODE ":vprec=" LM_PROFILE_RULES
    ":stat=mean-spread-v2";

static void progress(const hx_judge_params *p, const char *fmt, ...) LM_PRINTF(2, 3);
static void progress(const hx_judge_params *p, const char *fmt, ...)
{
    if (p->quiet)
        return;
    va_list ap;
    va_start(ap, fmt);
    lm_vlog(p->log, p->log_user, fmt, ap);
    va_end(ap);
}

typedef struct jstate {
    const hx_judge_params *p;
    const hx_dump *d0;          /* the first dump: tokens and n_prompt of all */
    uint32_t *pos;              /* [n_pos] union of the dumps' positions */
    uint32_t n_pos;
    ref_capture ref, ref_lp;    /* reference; its log-softmax rows (when a dump needs them) */
    char ref_key[33];
    bool need_lp;
    const lm_profile *prof[HX_JUDGE_MAX_PROFILES];
    bool idle[HX_JUDGE_MAX_PROFILES]; /* prof[k] rounds nothing on the model: f32 again */
    uint32_t n_prof;
    hx_envelope *env[HX_JUDGE_MAX_PROFILES], *env_lp[HX_JUDGE_MAX_PROFILES];
    char path_hash[33];         /* the naive f32 forced run's capture hash (only when some
                                   profile's members are the engine's: their key names it) */
    hx_departure *own;          /* [n_dumps] each greedy continuation on its own path, taken
                                   before the cut when that path goes past the shared ids */
    bool *has_own;              /* [n_dumps] own[k] was taken */
} jstate;

/* The rows at n_prompt-1+j (j = 0..n_path) of reference capture ref, NULL where absent, into
 * rows [n_path + 1]. */
static void ref_rows(const double **rows, const ref_capture *ref, uint32_t n_prompt,
                     uint32_t n_path)
{
    for (uint32_t j = 0; j <= n_path; ++j) {
        int64_t r = ref_capture_find_pos(ref, n_prompt - 1 + j);
        rows[j] = r < 0 ? NULL : ref_capture_logits(ref, (uint32_t)r);
    }
}

/* Dump d's greedy continuation against the reference run on d's own ids (all of them, before
 * the cut to the shared ids): where it leaves the reference's argmax and at what margin. One
 * reference pass per path, through the reference cache. */
static int own_path(hx_departure *out, const jstate *s, const hx_dump *d, lm_err *err)
{
    const hx_judge_params *p = s->p;
    const uint32_t n_path = d->n_tokens - d->n_prompt;
    uint32_t *pos = malloc(((size_t)n_path + 1) * sizeof *pos);
    const double **rows = malloc(((size_t)n_path + 1) * sizeof *rows);
    ref_capture ref = {0};
    int rc = pos && rows ? LM_OK : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (uint32_t j = 0; rc == LM_OK && j <= n_path; ++j)
        pos[j] = d->n_prompt - 1 + j;
    ref_request rq = {.tokens = d->tokens, .n_tokens = d->n_tokens, .n_prompt = d->n_prompt,
                      .pos = pos, .n_pos = n_path + 1,
                      .prec = p->precision ? p->precision : REF_DEFAULT_PREC,
                      .n_threads = p->ref_threads, .log = p->log, .log_user = p->log_user};
    bool hit = false;
    const double t0 = lm_now_s();
    if (rc == LM_OK)
        rc = ref_cached(&ref, p->ref, &rq, p->cache_dir, &hit, err);
    if (rc == LM_OK) {
        progress(p, "%s: reference on its own continuation %s (%u rows, %.1f s)", d->dir,
                 hit ? "loaded from cache" : "computed", (unsigned)(n_path + 1),
                 lm_now_s() - t0);
        ref_rows(rows, &ref, d->n_prompt, n_path);
        rc = hx_departure_find(out, d->generated, d->n_generated, d->tokens + d->n_prompt,
                               n_path, rows, ref.n_vocab, err);
    }
    ref_capture_free(&ref);
    free(pos);
    free((void *)rows);
    return rc;
}

/* (a) Same tokens everywhere, prompt first; the union of positions. */
static int check_inputs(jstate *s, lm_err *err)
{
    const hx_judge_params *p = s->p;
    if (p->model == NULL || p->ref == NULL)
        return LM_FAIL(err, LM_E_INPUT, "no model (the engine's and the reference's are needed)");
    if (p->n_dumps == 0)
        return LM_FAIL(err, LM_E_INPUT, "no dump to judge");
    const hx_dump *a = s->d0 = p->dumps[0];
    if (a->n_prompt != p->n_prompt)
        return LM_FAIL(err, LM_E_INPUT, "%s: n_prompt %u, but the prompt has %u tokens", a->dir,
                       (unsigned)a->n_prompt, (unsigned)p->n_prompt);
    for (uint32_t i = 0; i < p->n_prompt; ++i)
        if (a->tokens[i] != p->prompt[i])
            return LM_FAIL(err, LM_E_INPUT, "%s: token %u is %d, the prompt's is %d", a->dir,
                           (unsigned)i, (int)a->tokens[i], (int)p->prompt[i]);
    /* The ids every dump shares: the prompt, then the fed ids up to where any two part. */
    uint32_t shared = a->n_tokens;
    for (size_t k = 1; k < p->n_dumps; ++k) {
        const hx_dump *b = p->dumps[k];
        if (b->n_prompt != a->n_prompt ||
            memcmp(b->tokens, a->tokens, a->n_prompt * sizeof *a->tokens) != 0)
            return LM_FAIL(err, LM_E_INPUT, "%s: prompt ids or n_prompt differ from %s's (judge "
                           "dumps of one prompt together)", b->dir, a->dir);
        uint32_t i = a->n_prompt;
        while (i < shared && i < b->n_tokens && b->tokens[i] == a->tokens[i])
            ++i;
        shared = i;
    }
    s->own = calloc(p->n_dumps, sizeof *s->own);
    s->has_own = calloc(p->n_dumps, sizeof *s->has_own);
    if (s->own == NULL || s->has_own == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t k = 0; k < p->n_dumps; ++k)
        if (p->dumps[k]->n_tokens > shared && p->dumps[k]->has_generated) {
            int rc = own_path(&s->own[k], s, p->dumps[k], err);
            if (rc != LM_OK)
                return rc;
            s->has_own[k] = true;
        }
    for (size_t k = 0; k < p->n_dumps; ++k)
        if (p->dumps[k]->n_tokens > shared) {
            progress(p, "%s: its fed ids part from the others' at position %u: judged on the %u "
                     "shared positions", p->dumps[k]->dir, (unsigned)shared, (unsigned)shared);
            hx_dump_truncate(p->dumps[k], shared);
        }
    uint8_t *mark = calloc(a->n_tokens, 1);
    if (mark == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t k = 0; k < p->n_dumps; ++k) {
        const hx_dump *b = p->dumps[k];
        if (b->n_pos == 0) {
            free(mark);
            return LM_FAIL(err, LM_E_INPUT, "%s: no logits row at the %u positions the dumps "
                           "share", b->dir, (unsigned)a->n_tokens);
        }
        if (b->logprobs)
            s->need_lp = true;
        for (uint32_t i = 0; i < b->n_pos; ++i)
            mark[b->positions[i]] = 1;
    }
    s->pos = malloc(a->n_tokens * sizeof *s->pos);
    if (s->pos == NULL) {
        free(mark);
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < a->n_tokens; ++i)
        if (mark[i])
            s->pos[s->n_pos++] = i;
    free(mark);
    return LM_OK;
}

static int profiles(jstate *s, lm_err *err)
{
    const hx_judge_params *p = s->p;
    uint32_t n = p->n_profiles ? p->n_profiles : lm_profile_count();
    if (n > HX_JUDGE_MAX_PROFILES)
        return LM_FAIL(err, LM_E_INPUT, "at most %u profiles", HX_JUDGE_MAX_PROFILES);
    for (uint32_t i = 0; i < n; ++i) {
        const lm_profile *pf = p->n_profiles ? lm_profile_find(p->profiles[i]) : lm_profile_at(i);
        if (pf == NULL)
            return LM_FAIL(err, LM_E_INPUT, "profile '%s': unknown (expected %s)",
                           p->profiles[i], lm_profile_expected());
        for (uint32_t j = 0; j < i; ++j)
            if (s->prof[j] == pf)
                return LM_FAIL(err, LM_E_INPUT, "profile %s given twice", pf->name);
        s->prof[i] = pf;
        s->idle[i] = lm_profile_rounds(pf) && !lm_profile_rounds_on(pf, p->model);
    }
    s->n_prof = n;
    return LM_OK;
}

/* The profile whose envelope profile k is judged with: f32 for a profile that rounds nothing on
 * the model (it computes what f32 computes, so its envelope is f32's, cached under f32's key
 * and measured once), else its own. */
static const char *env_profile(const jstate *s, uint32_t k)
{
    return s->idle[k] ? "f32" : s->prof[k]->name;
}

/* Rows [n][nv] to log-softmax in place: lse around the row's max, exp terms summed in index
 * order, in double. */
static void log_softmax_f64(double *x, uint32_t n, uint32_t nv)
{
    for (uint32_t i = 0; i < n; ++i) {
        double *r = x + (size_t)i * nv, mx = -INFINITY, sum = 0.0;
        for (uint32_t v = 0; v < nv; ++v)
            mx = r[v] > mx ? r[v] : mx;
        for (uint32_t v = 0; v < nv; ++v)
            sum += exp(r[v] - mx);
        double lse = mx + log(sum);
        for (uint32_t v = 0; v < nv; ++v)
            r[v] -= lse;
    }
}

static int log_softmax_f32(float *x, uint32_t n, uint32_t nv, lm_err *err)
{
    double *t = malloc((size_t)nv * sizeof *t);
    if (t == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (uint32_t i = 0; i < n; ++i) {
        float *r = x + (size_t)i * nv;
        for (uint32_t v = 0; v < nv; ++v)
            t[v] = (double)r[v];
        log_softmax_f64(t, 1, nv);
        for (uint32_t v = 0; v < nv; ++v)
            r[v] = (float)t[v];
    }
    free(t);
    return LM_OK;
}

/* (b) */
static int reference(jstate *s, lm_err *err)
{
    const hx_judge_params *p = s->p;
    ref_request rq = {.tokens = s->d0->tokens, .n_tokens = s->d0->n_tokens,
                      .n_prompt = s->d0->n_prompt, .pos = s->pos, .n_pos = s->n_pos,
                      .prec = p->precision ? p->precision : REF_DEFAULT_PREC,
                      .n_threads = p->ref_threads, .log = p->log, .log_user = p->log_user};
    bool hit = false;
    const double t0 = lm_now_s();
    ref_cache_key(s->ref_key, p->ref, &rq);
    int rc = hx_model_check(p->model, p->ref, err);
    if (rc == LM_OK)
        rc = lm_model_file_unchanged(p->model, err);
    if (rc == LM_OK)
        rc = ref_cached(&s->ref, p->ref, &rq, p->cache_dir, &hit, err);
    if (rc == LM_OK)
        rc = ref_capture_check_finite(&s->ref, p->model_label ? p->model_label : "model", err);
    if (rc != LM_OK)
        return rc;
    progress(p, "reference %s at %u bits (%u tokens, %u logits rows, %.1f s)",
             hit ? "loaded from cache" : "computed", (unsigned)rq.prec,
             (unsigned)rq.n_tokens, (unsigned)s->n_pos, lm_now_s() - t0);
    if (s->need_lp) {
        s->ref_lp = s->ref;
        size_t n = (size_t)s->ref.n_pos * s->ref.n_vocab;
        s->ref_lp.logits = malloc(n * sizeof(double));
        /* only the logits are owned: k, v, tokens, pos are borrowed from ref */
        if (s->ref_lp.logits == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        memcpy(s->ref_lp.logits, s->ref.logits, n * sizeof(double));
        log_softmax_f64(s->ref_lp.logits, s->ref.n_pos, s->ref.n_vocab);
    }
    return LM_OK;
}

static hx_forced_request forced_rq(const jstate *s)
{
    return (hx_forced_request){.tokens = s->d0->tokens, .n_tokens = s->d0->n_tokens,
                               .n_kv = s->d0->n_prompt, .pos = s->pos, .n_pos = s->n_pos};
}

/* The naive f32 forced run's hash: the engine's bits on this input, in the envelope key. */
static int path_hash(jstate *s, lm_err *err)
{
    hx_config c = {.backend = "naive", .threads = 1};
    hx_forced_request rq = forced_rq(s);
    hx_capture *cap = NULL;
    uint8_t h[16];
    int rc = hx_run_forced(&cap, s->p->model, &c, &rq, err);
    if (rc == LM_OK && (rc = hx_capture_hash(h, cap, err)) == LM_OK)
        lm_hex_encode(s->path_hash, h, 16);
    hx_capture_free(cap);
    return rc;
}

static bool file_exists(const char *path)
{
    struct stat sb;
    return stat(path, &sb) == 0;
}

/* Profile k's members: the reference's SR model under the profile (envelope_sr.h), as sweep's
 * envelopes, when the SR reference implements the model, unless an envelope of
 * log-probabilities is needed too (measured on the same members' rows, which only the
 * engine's members give): then the engine's naive-sr members under the profile. */
static bool use_ref_sr(const jstate *s, uint32_t k)
{
    return hx_envelope_source(s->p->ref, &s->ref, env_profile(s, k), s->need_lp) ==
           HX_MEMBERS_REF_SR;
}

/* Cache path and key of profile k's envelope (lp: of log-probabilities; ref_sr: measured by
 * the reference's SR members, use_ref_sr). */
static int env_key(char *path, size_t cap, uint8_t key[16], const jstate *s, uint32_t k,
                   bool lp, bool ref_sr, lm_err *err)
{
    const hx_judge_params *p = s->p;
    char dir[4096], extra[sizeof judge_mode + 96];
    int rc = lm_cache_open(dir, sizeof dir, p->cache_dir, err);
    if (rc != LM_OK)
        return rc;
    char mode[sizeof extra - 16];
    hx_envelope_sr_mode(mode, sizeof mode, env_profile(s, k));
    int ne = ref_sr ? snprintf(extra, sizeof extra, "judge-forced:%s", mode)
                    : snprintf(extra, sizeof extra, "%s;profile=%s;path=%s%s", judge_mode,
                               env_profile(s, k), s->path_hash, lp ? ";rows=logprobs" : "");
    uint32_t m = p->ensemble ? p->ensemble : HX_SWEEP_DEFAULT_ENSEMBLE;
    uint64_t seed = p->sr_seed_set ? p->sr_seed : HX_SWEEP_DEFAULT_SEED;
    hx_envelope_key(key, s->ref_key, m, seed, HX_ENVELOPE_SAFETY, extra, (uint32_t)ne);
    return hx_envelope_cache_path(path, cap, dir, key, err);
}

static int env_load(hx_envelope **out, const jstate *s, uint32_t k, bool lp, bool ref_sr)
{
    char path[4200];
    uint8_t key[16];
    lm_err e = {0};
    if (env_key(path, sizeof path, key, s, k, lp, ref_sr, &e) != LM_OK || !file_exists(path))
        return LM_E_INPUT;
    return hx_envelope_load(out, path, key, &e);
}

/* The cache costs time, never correctness: a key or write failure is a warning. */
static int env_store(hx_envelope *env, const jstate *s, uint32_t k, bool lp, bool ref_sr,
                     lm_err *err)
{
    (void)err;
    char path[4200];
    lm_err e = {0};
    if (env_key(path, sizeof path, env->key, s, k, lp, ref_sr, &e) != LM_OK ||
        hx_envelope_save(env, path, &e) != LM_OK)
        lm_log(s->p->log, s->p->log_user, "envelope cache entry not stored (%s)", e.msg);
    return LM_OK;
}

/* One progress line per naive-sr member (each can take minutes). */
typedef struct member_progress {
    const hx_judge_params *p;
    const char *profile;
    uint32_t m;
    uint32_t side_by_side; /* members running at once: min(jobs, m), at least 1 */
} member_progress;

/* The time left at the rate so far; while the first members run side by side, as many as run
 * at once count as finishing together. */
static void member_done(void *user, uint32_t i, uint32_t done, double elapsed_s)
{
    (void)i;
    const member_progress *mp = user;
    const uint32_t rate_n = done > mp->side_by_side ? done : mp->side_by_side;
    progress(mp->p, "envelope of profile %s: naive-sr run %u of %u done (%.1f s, about %.0f s "
             "left)", mp->profile, (unsigned)done, (unsigned)mp->m, elapsed_s,
             elapsed_s / rate_n * (mp->m - done));
}

/* The reference's SR members' f32 envelope, from the cache or measured (and stored). */
static int ref_sr_envelope(hx_envelope **out, const jstate *s, uint32_t k, lm_err *err)
{
    const hx_judge_params *p = s->p;
    if (env_load(out, s, k, false, true) == LM_OK)
        return LM_OK;
    const uint32_t m = p->ensemble ? p->ensemble : HX_SWEEP_DEFAULT_ENSEMBLE;
    const uint64_t seed = p->sr_seed_set ? p->sr_seed : HX_SWEEP_DEFAULT_SEED;
    const char *name = env_profile(s, k);
    const double t0 = lm_now_s();
    progress(p, "envelope of profile %s: %u SR runs of the reference's float32 model...",
             name, (unsigned)m);
    int rc = hx_envelope_from_ref_sr(out, p->ref, &s->ref, name, m, seed, p->ref_threads,
                                     HX_ENVELOPE_SAFETY, NULL, NULL, err);
    if (rc == LM_OK)
        rc = env_store(*out, s, k, false, true, err);
    if (rc == LM_OK)
        progress(p, "envelope of profile %s measured from %u SR runs of the reference's "
                 "float32 model (%.1f s)", name, (unsigned)m, lm_now_s() - t0);
    return rc;
}

/* Whether some dump holds hidden states. */
static bool any_hidden(const jstate *s)
{
    for (size_t i = 0; i < s->p->n_dumps; ++i)
        if (s->p->dumps[i]->n_hidden > 0)
            return true;
    return false;
}

/* Copies src's hidden states into dst (same layers). */
static int copy_hidden(hx_envelope *dst, const hx_envelope *src, lm_err *err)
{
    int rc = hx_envelope_add_hidden(dst, err);
    if (rc == LM_OK)
        memcpy(dst->hidden, src->hidden, src->n_hidden * sizeof *src->hidden);
    return rc;
}

/* Profile k's envelope of the hidden states when a dump holds them and the profile's own
 * members measured none (the engine's naive-sr members, which log-probability dumps use,
 * record none): those of the reference's SR members under the same profile, where they model
 * it; else none (hx_hidden_first.no_envelope). */
static int hidden_envelope(jstate *s, uint32_t k, lm_err *err)
{
    if (!any_hidden(s) || s->env[k]->n_hidden > 0 ||
        hx_envelope_source(s->p->ref, &s->ref, env_profile(s, k), false) != HX_MEMBERS_REF_SR)
        return LM_OK;
    hx_envelope *sr = NULL;
    int rc = ref_sr_envelope(&sr, s, k, err);
    if (rc == LM_OK && sr->n_hidden != s->env[k]->n_layer + 1)
        rc = LM_FAIL(err, LM_E_INPUT, "envelope of the reference's SR members holds no hidden "
                     "states");
    if (rc == LM_OK)
        rc = copy_hidden(s->env[k], sr, err);
    if (rc == LM_OK && s->env_lp[k] != NULL)
        rc = copy_hidden(s->env_lp[k], sr, err);
    hx_envelope_free(sr);
    return rc;
}

/* (c) Profile k's envelopes (logits, and log-probabilities when needed). */
static int envelope_rows(jstate *s, uint32_t k, lm_err *err)
{
    const hx_judge_params *p = s->p;
    if (s->idle[k])
        progress(p, "profile %s rounds nothing on this model: judged with f32's envelope",
                 s->prof[k]->name);
    const bool ref_sr = use_ref_sr(s, k);
    bool need = env_load(&s->env[k], s, k, false, ref_sr) != LM_OK;
    if (s->need_lp)
        need |= env_load(&s->env_lp[k], s, k, true, ref_sr) != LM_OK;
    if (!need) {
        progress(p, "envelope of profile %s loaded from cache", s->prof[k]->name);
        return LM_OK;
    }
    hx_envelope_free(s->env[k]);
    hx_envelope_free(s->env_lp[k]);
    s->env[k] = s->env_lp[k] = NULL;
    uint32_t m = p->ensemble ? p->ensemble : HX_SWEEP_DEFAULT_ENSEMBLE;
    uint64_t seed = p->sr_seed_set ? p->sr_seed : HX_SWEEP_DEFAULT_SEED;
    hx_capture **mem = calloc(m, sizeof *mem);
    if (mem == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    const double t0 = lm_now_s();
    if (ref_sr) {
        free(mem);
        return ref_sr_envelope(&s->env[k], s, k, err);
    }
    hx_forced_request rq = forced_rq(s);
    const uint32_t jobs = p->jobs > 1 ? p->jobs : 1;
    const member_progress mpr = {p, s->prof[k]->name, m, jobs < m ? jobs : m};
    int rc = hx_run_forced_members(mem, m, p->model, env_profile(s, k), seed, &rq, p->jobs,
                                   member_done, (void *)&mpr, err);
    if (rc == LM_OK)
        rc = hx_envelope_from_ensemble(&s->env[k], (const hx_capture *const *)mem, m, &s->ref,
                                       HX_ENVELOPE_SAFETY, err);
    if (rc == LM_OK)
        rc = env_store(s->env[k], s, k, false, false, err);
    for (uint32_t i = 0; i < m && rc == LM_OK && s->need_lp; ++i)
        rc = log_softmax_f32(mem[i]->logits, mem[i]->shape.n_pos, mem[i]->shape.n_vocab, err);
    if (rc == LM_OK && s->need_lp)
        rc = hx_envelope_from_ensemble(&s->env_lp[k], (const hx_capture *const *)mem, m,
                                       &s->ref_lp, HX_ENVELOPE_SAFETY, err);
    if (rc == LM_OK && s->need_lp)
        rc = env_store(s->env_lp[k], s, k, true, false, err);
    for (uint32_t i = 0; i < m; ++i)
        hx_capture_free(mem[i]);
    free(mem);
    if (rc == LM_OK)
        progress(p, "envelope of profile %s measured from %u naive-sr runs (%.1f s)",
                 s->prof[k]->name, (unsigned)m, lm_now_s() - t0);
    return rc;
}

/* (c) Profile k's envelopes, with hidden states where measurable. */
static int envelope(jstate *s, uint32_t k, lm_err *err)
{
    int rc = envelope_rows(s, k, err);
    return rc == LM_OK ? hidden_envelope(s, k, err) : rc;
}

/* c's hidden states: copies of d's (c->hidden NULL when d holds none). */
static int capture_hidden(hx_capture *c, const hx_dump *d, lm_err *err)
{
    if (d->n_hidden == 0)
        return LM_OK;
    c->n_embd = d->n_embd;
    c->hidden = calloc(d->n_hidden_slots, sizeof *c->hidden);
    if (c->hidden == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    const size_t n = (size_t)d->n_prompt * d->n_embd;
    for (uint32_t i = 0; i < d->n_hidden_slots; ++i) {
        if (d->hidden[i] == NULL)
            continue;
        if ((c->hidden[i] = malloc(n * sizeof(float))) == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        memcpy(c->hidden[i], d->hidden[i], n * sizeof(float));
    }
    return LM_OK;
}

int hx_dump_capture(hx_capture **out, const hx_dump *d, const lm_model *m, lm_err *err)
{
    const lm_hparams *hp = &m->hp;
    hx_capture_shape sh = {.n_layer = hp->n_layer, .n_kv_head = hp->n_head_kv,
                           .head_dim = hp->head_dim, .n_vocab = d->n_vocab,
                           .n_prompt = d->n_prompt, .n_tokens = d->n_tokens, .n_pos = d->n_pos};
    int rc = hx_capture_create(out, &sh, err);
    if (rc != LM_OK)
        return rc;
    hx_capture *c = *out;
    memcpy(c->tokens, d->tokens, d->n_tokens * sizeof *d->tokens);
    memcpy(c->positions, d->positions, d->n_pos * sizeof *d->positions);
    memcpy(c->logits, d->rows, (size_t)d->n_pos * d->n_vocab * sizeof *d->rows);
    size_t kv = hx_capture_kv_elems(&sh);
    for (uint32_t l = 0; l < hp->n_layer; ++l) {
        if (d->k != NULL) {
            memcpy(c->k[l], d->k[l], kv * sizeof(float));
            memcpy(c->v[l], d->v[l], kv * sizeof(float));
        } else {
            free(c->k[l]);
            free(c->v[l]);
        }
    }
    if (d->k == NULL) {
        free(c->k);
        free(c->v);
        c->k = c->v = NULL;
    }
    if ((rc = capture_hidden(c, d, err)) != LM_OK) {
        hx_capture_free(c);
        *out = NULL;
    }
    return rc;
}

static int cmp_double(const void *x, const void *y)
{
    double a = *(const double *)x, b = *(const double *)y;
    return (a > b) - (a < b);
}

/* Median of an envelope's logits E (the profile's scale for hx_explain_profile). */
static double median_e(const hx_envelope *e)
{
    double *v = malloc((e->n_pos ? e->n_pos : 1) * sizeof *v);
    if (v == NULL || e->n_pos == 0) {
        free(v);
        return 0.0;
    }
    for (uint32_t i = 0; i < e->n_pos; ++i)
        v[i] = e->logits[i].e;
    qsort(v, e->n_pos, sizeof *v, cmp_double);
    double m = hx_percentile_sorted(v, e->n_pos, 0.5);
    free(v);
    return m;
}

/* The greedy sequence of dump di against the reference, into report dr and the dump's
 * configurations: on its own path when that went past the shared ids (s->own), else on the
 * judged rows. A departure at a judged row takes that row's class; one past them (the rows
 * only the dump's own path has) is reported with its margin, and no envelope judges it. */
static int greedy(hx_report *rep, hx_dump_report *dr, const jstate *s, size_t di,
                  const ref_capture *ref, lm_err *err)
{
    const hx_dump *d = s->p->dumps[di];
    dr->first_divergent = -1;
    dr->departed_chose = dr->departed_ref_top = -1;
    dr->departed_margin = NAN;
    dr->has_generated = d->has_generated;
    if (!d->has_generated)
        return LM_OK;
    hx_departure dep;
    if (s->has_own[di]) {
        dep = s->own[di];
    } else {
        uint32_t n_path = d->n_tokens - d->n_prompt;
        const double **rows = malloc(((size_t)n_path + 1) * sizeof *rows);
        if (rows == NULL)
            return LM_FAIL(err, LM_E_NOMEM, "out of memory");
        ref_rows(rows, ref, d->n_prompt, n_path);
        int rc = hx_departure_find(&dep, d->generated, d->n_generated, d->tokens + d->n_prompt,
                                   n_path, rows, ref->n_vocab, err);
        free((void *)rows);
        if (rc != LM_OK)
            return rc;
    }
    dr->first_divergent = dep.at;
    dr->compared_to = dep.compared;
    if (dep.at < 0)
        return LM_OK;
    dr->departed_chose = dep.chose;
    dr->departed_ref_top = dep.ref_top;
    dr->departed_margin = dep.margin;
    const uint32_t at = d->n_prompt - 1 + (uint32_t)dep.at;
    if (at >= d->n_tokens) { /* past the judged rows */
        dr->departed_beyond = true;
        return LM_OK;
    }
    char row[32];
    snprintf(row, sizeof row, "logits@%u", (unsigned)at);
    for (size_t k = 0; k < dr->n_profiles; ++k) {
        hx_config_report *c = &rep->configs[dr->first_config + k];
        hx_class cls_at = HX_FLIP; /* the row that chose it is not in the dump: unexplained */
        for (size_t i = 0; i < c->n_rows; ++i)
            if (strcmp(c->rows[i].name, row) == 0)
                cls_at = c->rows[i].cls;
        hx_config_report_set_divergence(c, dep.at, cls_at);
    }
    return LM_OK;
}

/* (d) for one dump. */
static int judge_dump(jstate *s, hx_report *rep, size_t di, lm_err *err)
{
    const hx_dump *d = s->p->dumps[di];
    hx_dump_report *dr = &rep->dumps[di];
    snprintf(dr->name, sizeof dr->name, "%s", d->dir);
    snprintf(dr->engine, sizeof dr->engine, "%s", d->engine);
    snprintf(dr->settings, sizeof dr->settings, "%s", d->settings);
    snprintf(dr->rows, sizeof dr->rows, "%s", d->logprobs ? "logprobs" : "logits");
    snprintf(dr->dtype, sizeof dr->dtype, "%s", d->row_dtype);
    dr->n_pos = d->n_pos;
    dr->n_hidden = d->n_hidden;
    dr->first_config = rep->n_configs;
    /* one profile per dump when the caller names it, else every profile */
    const uint32_t k0 = s->p->dump_profile ? s->p->dump_profile[di] : 0;
    const uint32_t k1 = s->p->dump_profile ? k0 + 1 : s->n_prof;
    dr->n_profiles = k1 - k0;
    if (s->p->names)
        snprintf(dr->name, sizeof dr->name, "%s", s->p->names[di]);
    const ref_capture *ref = d->logprobs ? &s->ref_lp : &s->ref;
    hx_capture *x = NULL, *base = NULL;
    const int64_t bi = s->p->baseline ? s->p->baseline[di] : -1;
    const hx_dump *bd = bi >= 0 ? s->p->dumps[bi] : NULL;
    /* top-k rows: compared at their ids only (compare_topk.h), nothing else to capture */
    int rc = d->topk > 0 ? LM_OK : hx_dump_capture(&x, d, s->p->model, err);
    if (d->topk > 0 && bd != NULL && bd->topk == 0)
        bd = NULL;
    /* a baseline of the same shape only (rows at the same positions, K/V alike) */
    if (rc == LM_OK && d->topk == 0 && bd != NULL && bd->n_pos == d->n_pos && bd->n_tokens == d->n_tokens &&
        (bd->k == NULL) == (d->k == NULL) && bd->logprobs == d->logprobs &&
        memcmp(bd->positions, d->positions, d->n_pos * sizeof *d->positions) == 0)
        rc = (size_t)bi == di ? LM_OK : hx_dump_capture(&base, bd, s->p->model, err);
    const hx_capture *b = bd == NULL ? NULL : (size_t)bi == di ? x : base;
    hx_class cls[HX_JUDGE_MAX_PROFILES];
    double scale[HX_JUDGE_MAX_PROFILES];
    bool idle[HX_JUDGE_MAX_PROFILES];
    for (uint32_t k = k0; k < k1 && rc == LM_OK; ++k) {
        char name[HX_CONFIG_STR_MAX];
        if (s->p->names)
            snprintf(name, sizeof name, "%s", s->p->names[di]);
        else
            snprintf(name, sizeof name, "%.100s@%s", d->dir, s->prof[k]->name);
        hx_config_report *c = NULL;
        const hx_envelope *env = d->logprobs ? s->env_lp[k] : s->env[k];
        if ((rc = hx_report_add_config(rep, &c, name, err)) == LM_OK)
            rc = d->topk > 0 ? hx_compare_topk(c, &dr->topk, d, bd, ref, env, err)
                             : hx_compare_capture(c, x, b, ref, env, err);
        if (rc == LM_OK && x != NULL)
            rc = hx_kv_first_outside(&c->kv_first, x, ref, env, err);
        if (rc == LM_OK && x != NULL)
            rc = hx_hidden_first_outside(&c->hidden_first, x, &s->ref, env, err);
        scale[k - k0] = median_e(env);
        idle[k - k0] = s->idle[k];
    }
    hx_capture_free(x);
    hx_capture_free(base);
    if (rc == LM_OK)
        rc = greedy(rep, dr, s, di, ref, err);
    if (rc != LM_OK)
        return rc;
    for (uint32_t k = 0; k < dr->n_profiles; ++k)
        cls[k] = rep->configs[dr->first_config + k].cls;
    /* one named profile: a profile that rounds nothing on the model is f32 again, which does
     * explain what passes under it */
    int e = s->p->dump_profile
                ? (hx_class_fails(cls[0]) ? -1 : 0)
                : hx_explain_profile(cls, scale, idle, dr->n_profiles);
    snprintf(dr->explained_by, sizeof dr->explained_by, "%s",
             e >= 0 ? s->prof[k0 + (uint32_t)e]->name : "");
    /* KL and top-1 over the logits rows (the same under every profile: take the first's) */
    const hx_config_report *c0 = &rep->configs[dr->first_config];
    double *kl = malloc((d->n_pos ? d->n_pos : 1) * sizeof *kl);
    if (kl == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "out of memory");
    uint32_t n = 0, same = 0;
    for (size_t i = 0; i < c0->n_rows; ++i)
        if (c0->rows[i].is_logits) {
            kl[n++] = c0->rows[i].lg.kl;
            same += c0->rows[i].lg.top1_agree;
        }
    hx_kl_stats_compute(&dr->kl, kl, n, same);
    free(kl);
    return LM_OK;
}

/* Every pair of dumps over their shared positions. */
static int pairs(jstate *s, hx_report *rep, lm_err *err)
{
    size_t nd = s->p->n_dumps;
    if (nd < 2)
        return LM_OK;
    rep->pairs = calloc(nd * (nd - 1) / 2, sizeof *rep->pairs);
    uint32_t nv = s->ref.n_vocab;
    float *a = malloc((size_t)s->n_pos * nv * sizeof *a), *b = malloc((size_t)s->n_pos * nv * sizeof *b);
    double *r = malloc((size_t)s->n_pos * nv * sizeof *r), *e = malloc(s->n_pos * sizeof *e);
    uint32_t *pos = malloc(s->n_pos * sizeof *pos);
    int rc = rep->pairs && a && b && r && e && pos ? LM_OK
                                                   : LM_FAIL(err, LM_E_NOMEM, "out of memory");
    for (size_t i = 0; i < nd && rc == LM_OK; ++i)
        for (size_t j = i + 1; j < nd; ++j) {
            const hx_dump *x = s->p->dumps[i], *y = s->p->dumps[j];
            if (x->logprobs != y->logprobs || x->topk > 0 || y->topk > 0)
                continue; /* logits and log-probabilities, or top-k rows, are not comparable
                             element-wise */
            const ref_capture *ref = x->logprobs ? &s->ref_lp : &s->ref;
            const hx_envelope *env = x->logprobs ? s->env_lp[0] : s->env[0];
            uint32_t n = 0;
            for (uint32_t u = 0, v = 0; u < x->n_pos && v < y->n_pos;) {
                if (x->positions[u] < y->positions[v]) {
                    ++u;
                } else if (x->positions[u] > y->positions[v]) {
                    ++v;
                } else {
                    uint32_t p = x->positions[u];
                    int64_t rr = ref_capture_find_pos(ref, p);
                    int64_t er = -1;
                    for (uint32_t q = 0; q < env->n_pos; ++q)
                        if (env->positions[q] == p)
                            er = q;
                    memcpy(a + (size_t)n * nv, x->rows + (size_t)u * nv, nv * sizeof *a);
                    memcpy(b + (size_t)n * nv, y->rows + (size_t)v * nv, nv * sizeof *b);
                    memcpy(r + (size_t)n * nv, ref_capture_logits(ref, (uint32_t)rr),
                           nv * sizeof *r);
                    e[n] = er >= 0 ? env->logits[er].e : 0.0;
                    pos[n++] = p;
                    ++u;
                    ++v;
                }
            }
            hx_dump_pair *pr = &rep->pairs[rep->n_pairs++];
            pr->a = (uint32_t)i;
            pr->b = (uint32_t)j;
            hx_dump_pair_compare(pr, a, b, r, e, pos, n, nv);
        }
    free(a);
    free(b);
    free(r);
    free(e);
    free(pos);
    return rc;
}

static void jstate_free(jstate *s)
{
    free(s->pos);
    free(s->own);
    free(s->has_own);
    free(s->ref_lp.logits);
    ref_capture_free(&s->ref);
    for (uint32_t k = 0; k < HX_JUDGE_MAX_PROFILES; ++k) {
        hx_envelope_free(s->env[k]);
        hx_envelope_free(s->env_lp[k]);
    }
}

/* The split-risk forecast of every judged profile with its own envelope (split_risk.h), along
 * the dumps' tokens from the last prompt position over the steps decided on the reference's
 * path (hx_split_path_steps: the step where the first dump leaves it included), at most the
 * first dump's generated tokens (with no tokens_generated, the ids fed back); none when that is
 * no step. */
static int split_forecasts(const jstate *s, hx_report *rep, lm_err *err)
{
    const uint32_t made = s->d0->generated != NULL ? s->d0->n_generated
                                                   : s->d0->n_tokens - s->d0->n_prompt;
    for (uint32_t k = 0; k < s->n_prof; ++k) {
        const uint32_t first = s->d0->n_prompt - 1;
        uint32_t n = hx_split_path_steps(&s->ref, s->env[k], first);
        n = n < made ? n : made;
        if (n == 0)
            continue;
        int rc = hx_split_forecast_ref(&rep->split[rep->n_split], s->prof[k]->name, &s->ref,
                                       s->env[k], first, n, err);
        if (rc != LM_OK)
            return rc;
        ++rep->n_split;
    }
    return LM_OK;
}

/* path_hash when some profile's envelope comes from the engine's members (its key names the
 * engine's bits); the reference's SR members need no engine run. */
static int engine_path_hash(jstate *s, lm_err *err)
{
    for (uint32_t k = 0; k < s->n_prof; ++k)
        if (!use_ref_sr(s, k))
            return path_hash(s, err);
    return LM_OK;
}

int hx_judge_run_all(hx_report **out, const hx_judge_params *p, lm_err *err)
{
    *out = NULL;
    jstate s = {.p = p};
    hx_report *rep = NULL;
    int rc;
    if ((rc = check_inputs(&s, err)) != LM_OK || (rc = profiles(&s, err)) != LM_OK ||
        (rc = reference(&s, err)) != LM_OK || (rc = engine_path_hash(&s, err)) != LM_OK)
        goto done;
    for (uint32_t k = 0; k < s.n_prof; ++k)
        if ((rc = envelope(&s, k, err)) != LM_OK)
            goto done;
    if ((rc = hx_report_create(&rep, "judge", err)) != LM_OK)
        goto done;
    snprintf(rep->model, sizeof rep->model, "%s", p->model_label ? p->model_label : "model");
    lm_hex_encode(rep->model_hash, p->model->content_hash, 16);
    hx_fingerprint fp;
    hx_fingerprint_detect(&fp);
    memcpy(rep->fingerprint_id, fp.id, sizeof rep->fingerprint_id);
    snprintf(rep->fingerprint, sizeof rep->fingerprint, "%s", fp.short_text);
    rep->n_prompt = s.d0->n_prompt;
    rep->n_gen = s.d0->n_tokens - s.d0->n_prompt;
    rep->precision = p->precision ? p->precision : REF_DEFAULT_PREC;
    rep->envelope_safety = HX_ENVELOPE_SAFETY;
    rep->envelope_members = p->ensemble ? p->ensemble : HX_SWEEP_DEFAULT_ENSEMBLE;
    rep->dumps = calloc(p->n_dumps, sizeof *rep->dumps);
    if (rep->dumps == NULL) {
        rc = LM_FAIL(err, LM_E_NOMEM, "out of memory");
        goto done;
    }
    rep->n_dumps = p->n_dumps;
    rc = split_forecasts(&s, rep, err);
    for (size_t i = 0; i < p->n_dumps && rc == LM_OK; ++i)
        rc = judge_dump(&s, rep, i, err);
    if (rc == LM_OK)
        rc = pairs(&s, rep, err);
done:
    jstate_free(&s);
    if (rc != LM_OK) {
        hx_report_free(rep);
        return rc;
    }
    *out = rep;
    return LM_OK;
}
