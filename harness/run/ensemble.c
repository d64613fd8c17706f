/* ensemble.c — the noise ensemble's source, members and runs (contract in ensemble.h). */
#include "run/ensemble.h"

#include "run/parallel.h"
#include "kvd_profile.h"

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
    else if (lm_profile_find(profile) == NULL)
        snprintf(reason, sizeof reason, "profile '%s' is unknown", profile);
    else if (ref_sr_supported(m, rq, &e) != LM_OK)
        snprintf(reason, sizeof reason, "%s", e.msg);
    else
        s = HX_MEMBERS_REF_SR;
    if (why != NULL && why_n > 0)
        snprintf(why, why_n, "%s", reason);
    return s;
}

/* An engine rounding spec as the reference states it (ref_vprec.h). */
static ref_vp vp_of(const lm_round_spec *s)
{
    switch (s->kind) {
    case LM_ROUND_FLOAT:
        return (ref_vp){REF_VP_FLOAT, s->bits, s->emin, s->emax};
    case LM_ROUND_Q8_0:
        return (ref_vp){.kind = REF_VP_Q8_0};
    case LM_ROUND_Q8_K:
        return (ref_vp){.kind = REF_VP_Q8_K};
    case LM_ROUND_VEC_DOT:
        return (ref_vp){.kind = REF_VP_PER_WEIGHT};
    default:
        return (ref_vp){.kind = REF_VP_NONE};
    }
}

void hx_ensemble_ref_profile(ref_sr_profile *out, const char *profile)
{
    /* the engine's sites and the reference's, one for one */
    static const struct { lm_perturb_site lm; ref_vp_site ref; } sites[] = {
        {LM_SITE_NORM, REF_VP_NORM},           {LM_SITE_ROPE, REF_VP_ROPE},
        {LM_SITE_SOFTMAX, REF_VP_SOFTMAX},     {LM_SITE_SWIGLU, REF_VP_SWIGLU},
        {LM_SITE_RESIDUAL, REF_VP_RESIDUAL},   {LM_SITE_OUT_NORM, REF_VP_OUT_NORM},
        {LM_SITE_V, REF_VP_V},                 {LM_SITE_ATTN_OUT, REF_VP_ATTN_OUT},
        {LM_SITE_KV, REF_VP_KV},               {LM_SITE_WEIGHT, REF_VP_WEIGHT},
        {LM_SITE_POST_NORM, REF_VP_POST_NORM}, {LM_SITE_HEAD_NORM, REF_VP_HEAD_NORM},
        {LM_SITE_MOE_GATES, REF_VP_MOE_GATES}, {LM_SITE_MOE_SUM, REF_VP_MOE_SUM},
    };
    _Static_assert(sizeof sites / sizeof *sites == REF_VP_N_SITES &&
                       REF_VP_N_SITES + 1 == LM_N_SITES,
                   "every engine site has its reference site");
    memset(out, 0, sizeof *out);
    const lm_profile *p = lm_profile_find(profile);
    if (p == NULL)
        return;
    for (size_t i = 0; i < sizeof sites / sizeof *sites; ++i)
        out->site[sites[i].ref] = vp_of(lm_profile_site(p, sites[i].lm));
    for (uint32_t t = 0; t < REF_VP_N_TYPES; ++t)
        out->per_type[t] = vp_of(lm_vec_dot_spec(t));
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
