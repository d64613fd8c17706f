/* ensemble.c — the noise ensemble's source, members and runs (contract in ensemble.h). */
#include "run/ensemble.h"

#include "run/parallel.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool is_f32(const char *profile)
{
    return profile == NULL || profile[0] == '\0' || strcmp(profile, "f32") == 0;
}

hx_member_source hx_ensemble_source(const ref_model *m, const ref_request *rq, const char *profile,
                                    bool engine_only, char *why, size_t why_n)
{
    char reason[sizeof ((lm_err *)0)->msg] = "";
    hx_member_source s = HX_MEMBERS_NAIVE_SR;
    lm_err e = {0};
    if (engine_only)
        snprintf(reason, sizeof reason, "the engine's ensemble was asked for");
    else if (!is_f32(profile))
        snprintf(reason, sizeof reason, "profile %s rounds at sites of the engine's forward pass",
                 profile);
    else if (ref_sr_supported(m, rq, &e) != LM_OK)
        snprintf(reason, sizeof reason, "%s", e.msg);
    else
        s = HX_MEMBERS_REF_SR;
    if (why != NULL && why_n > 0)
        snprintf(why, why_n, "%s", reason);
    return s;
}

const char *hx_member_source_name(hx_member_source s)
{
    return s == HX_MEMBERS_REF_SR ? "reference-SR" : "naive-sr";
}

hx_config hx_ensemble_member(const char *profile, uint64_t seed, uint32_t i)
{
    hx_config c = {.backend = "naive-sr", .step = 0, .threads = 1, .sr_seed = seed + i};
    if (!is_f32(profile))
        snprintf(c.profile, sizeof c.profile, "%s", profile);
    return c;
}

/* hx_run_jobs' view of an engine ensemble. */
typedef struct engine_members {
    uint64_t seed;
    const char *profile;
    hx_member_run_fn run;
    hx_member_fold_fn fold;
    void *user;
} engine_members;

static int member_job(void *ctx, uint32_t i, lm_err *err)
{
    const engine_members *e = ctx;
    const hx_config c = hx_ensemble_member(e->profile, e->seed, i);
    return e->run(e->user, &c, i, err);
}

static void member_done(void *ctx, uint32_t i, int rc)
{
    const engine_members *e = ctx;
    if (e->fold != NULL)
        e->fold(e->user, i, rc);
}

int hx_ensemble_run_engine(uint32_t n, uint64_t seed, const char *profile, uint32_t jobs,
                           hx_member_run_fn run, hx_member_fold_fn fold, void *user, lm_err *err)
{
    engine_members e = {.seed = seed, .profile = profile, .run = run, .fold = fold, .user = user};
    return hx_run_jobs(n, jobs, member_job, member_done, &e, err);
}

int hx_ensemble_run_ref(uint32_t n, uint64_t seed, const ref_model *m, const ref_request *rq,
                        int n_threads, hx_ref_member_fold_fn fold, void *user, lm_err *err)
{
    ref_sr_out *mem = calloc(n ? n : 1, sizeof *mem);
    if (mem == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "ensemble: out of memory for %u members", n);
    int rc = ref_sr_ensemble(mem, n, m, rq, seed, n_threads, err);
    for (uint32_t i = 0; rc == LM_OK && i < n; ++i)
        fold(user, i, &mem[i]);
    for (uint32_t i = 0; i < n; ++i)
        ref_sr_out_free(&mem[i]);
    free(mem);
    return rc;
}
