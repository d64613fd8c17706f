/* routing.c — MoE routing capture of one configuration and routing-flip comparison. */
#include "run/routing.h"

#include "model/report.h"
#include "run/drive.h"
#include "run/ensemble.h"

#include "kvd_profile.h"
#include "kvd_ref.h"
#include "ref_sr.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Copies the routing of every MoE layer for the positions a forward call just ran. */
static int keep_routing(void *user, const lm_ctx *c, const hx_chunk *ch, lm_err *err)
{
    (void)err;
    hx_routing *out = user;
    const size_t n = out->n_pos;
    for (uint32_t il = 0; il < out->n_layer; ++il) {
        uint32_t rn, rk;
        const float *mg;
        const uint32_t *sel = lm_ctx_moe_routing(c, il, &rn, &rk, &mg); /* [rn][rk] */
        if (sel == NULL)
            continue;
        out->moe[il] = true;
        memcpy(out->sel + ((size_t)il * n + ch->pos0) * out->k, sel, (size_t)rn * rk * sizeof *sel);
        memcpy(out->margin + (size_t)il * n + ch->pos0, mg, rn * sizeof *mg);
    }
    return LM_OK;
}

int hx_routing_capture(hx_routing *out, const lm_model *m, const hx_config *cfg,
                       const int32_t *tokens, uint32_t n, lm_err *err)
{
    memset(out, 0, sizeof *out);
    const lm_hparams *hp = &m->hp;
    if (hp->n_expert == 0)
        return LM_FAIL(err, LM_E_INPUT, "routing: %s has no mixture-of-experts layer",
                       m->path ? m->path : "model");
    if (n == 0)
        return LM_FAIL(err, LM_E_INPUT, "routing: empty prompt");
    out->n_layer = hp->n_layer;
    out->n_pos = n;
    out->k = hp->n_expert_used;
    out->sel = calloc((size_t)hp->n_layer * n * out->k, sizeof *out->sel);
    out->margin = malloc((size_t)hp->n_layer * n * sizeof *out->margin);
    out->moe = calloc(hp->n_layer, sizeof *out->moe);
    if (out->sel == NULL || out->margin == NULL || out->moe == NULL) {
        hx_routing_free(out);
        return LM_FAIL(err, LM_E_NOMEM, "routing: out of memory");
    }
    for (size_t i = 0; i < (size_t)hp->n_layer * n; ++i)
        out->margin[i] = INFINITY;
    /* The plain cache: a rotating cache's routing is not compared (hx_routing_to_report). */
    hx_drive *d = NULL;
    int rc = hx_drive_open(&d, m, cfg, n, HX_KEYS_PLAIN & ~HX_KEY_ROT, "routing", err);
    if (rc == LM_OK)
        rc = hx_drive_feed(d, tokens, n, HX_ROWS_NONE, NULL, keep_routing, out, err);
    hx_drive_close(d);
    if (rc != LM_OK)
        hx_routing_free(out);
    return rc;
}

int hx_routing_from_ref(hx_routing *out, const ref_result *r, const ref_model *rm, lm_err *err)
{
    memset(out, 0, sizeof *out);
    if (r->moe_sel == NULL || r->moe_margin == NULL)
        return LM_FAIL(err, LM_E_INPUT, "routing: the reference result carries no routing");
    const uint32_t nl = r->n_layer, n = r->moe_n_tokens, k = r->moe_k;
    out->n_layer = nl;
    out->n_pos = n;
    out->k = k;
    out->sel = malloc((size_t)nl * n * k * sizeof *out->sel);
    out->margin = malloc((size_t)nl * n * sizeof *out->margin);
    out->moe = calloc(nl, sizeof *out->moe);
    if (out->sel == NULL || out->margin == NULL || out->moe == NULL) {
        hx_routing_free(out);
        return LM_FAIL(err, LM_E_NOMEM, "routing: out of memory");
    }
    memcpy(out->sel, r->moe_sel, (size_t)nl * n * k * sizeof *out->sel);
    for (size_t i = 0; i < (size_t)nl * n; ++i)
        out->margin[i] = (float)r->moe_margin[i];
    for (uint32_t il = 0; il < nl; ++il)
        out->moe[il] = rm->layers[il].ffn_gate_inp != NULL;
    for (uint32_t il = 0; il < nl; ++il)
        if (!out->moe[il])
            for (uint32_t p = 0; p < n; ++p)
                out->margin[(size_t)il * n + p] = INFINITY;
    return LM_OK;
}

/* The largest margin deviation of one member's routing (sel [n_layer][n][k], margin
 * [n_layer][n]) from the truth's, over the routed layers: |margin - truth margin| where the
 * expert lists agree, the truth's margin / HX_ROUTING_SAFETY where they do not. */
static double member_dev(const hx_routing *truth, const uint32_t *sel, const float *margin)
{
    const size_t n = truth->n_pos, nl = truth->n_layer;
    double dev = 0.0;
    for (size_t i = 0; i < nl * n; ++i) {
        if (!truth->moe[i / n])
            continue;
        const bool same = memcmp(truth->sel + i * truth->k, sel + i * truth->k,
                                 truth->k * sizeof *truth->sel) == 0;
        const double d = same ? fabs((double)margin[i] - (double)truth->margin[i])
                              : (double)truth->margin[i] / HX_ROUTING_SAFETY;
        dev = d > dev ? d : dev;
    }
    return dev;
}

/* The largest margin deviation from the truth of `members` naive-sr runs (seeds sr_seed + i)
 * under profile ("" for float32): the engine's own noise ensemble. */
/* naive_sr_dev's members: each one's routing deviation from the truth, kept by member. */
typedef struct routing_members {
    const lm_model *m;
    const int32_t *prompt;
    uint32_t n;
    const hx_routing *truth;
    double *dev; /* [members] */
} routing_members;

static int routing_member_run(void *user, const hx_config *member, uint32_t i, lm_err *err)
{
    routing_members *rm = user;
    hx_routing other = {0};
    const int rc = hx_routing_capture(&other, rm->m, member, rm->prompt, rm->n, err);
    if (rc == LM_OK)
        rm->dev[i] = member_dev(rm->truth, other.sel, other.margin);
    hx_routing_free(&other);
    return rc;
}

static int naive_sr_dev(double *dev, const lm_model *m, const int32_t *prompt, uint32_t n,
                        const hx_routing *truth, const char *profile, uint32_t members,
                        uint64_t sr_seed, lm_err *err)
{
    routing_members rm = {.m = m, .prompt = prompt, .n = n, .truth = truth,
                          .dev = calloc(members ? members : 1, sizeof *rm.dev)};
    if (rm.dev == NULL)
        return LM_FAIL(err, LM_E_NOMEM, "routing: out of memory");
    const int rc = hx_ensemble_run_engine(members, sr_seed, profile, 1, routing_member_run, NULL,
                                          &rm, err);
    *dev = 0.0;
    for (uint32_t i = 0; rc == LM_OK && i < members; ++i)
        *dev = fmax(*dev, rm.dev[i]);
    free(rm.dev);
    return rc;
}

/* The TIE band under profile ("": float32): HX_ROUTING_SAFETY x the largest margin deviation of
 * the ensemble members from the reference's routing `truth`. The members: SR runs of the
 * reference's own float32 model under the profile (ref_sr.h, *sr = true) when it implements
 * the model, else the engine's naive-sr runs under it. */
/* The reference SR members' deviations folded into a maximum. */
typedef struct ref_dev {
    const hx_routing *truth;
    double dev;
} ref_dev;

static void ref_member_fold(void *user, uint32_t i, const ref_sr_out *member)
{
    (void)i;
    ref_dev *d = user;
    d->dev = fmax(d->dev, member_dev(d->truth, member->moe_sel, member->moe_margin));
}

static int tie_band(float *tol, bool *sr, const lm_model *m, const ref_model *rm,
                    const int32_t *prompt, uint32_t n, const hx_routing *truth,
                    const char *profile, uint32_t members, uint64_t sr_seed, lm_err *err)
{
    ref_sr_profile prof;
    hx_ensemble_ref_profile(&prof, profile);
    const ref_request rq = {.tokens = prompt, .n_tokens = n, .n_prompt = n, .sr_profile = &prof};
    *sr = hx_ensemble_source(rm, &rq, profile, false, NULL, 0) == HX_MEMBERS_REF_SR;
    ref_dev d = {.truth = truth, .dev = 0.0};
    const int rc = *sr ? hx_ensemble_run_ref(members, sr_seed, rm, &rq, 0, ref_member_fold, &d, err)
                       : naive_sr_dev(&d.dev, m, prompt, n, truth, profile, members, sr_seed,
                                      err);
    *tol = (float)(HX_ROUTING_SAFETY * d.dev);
    return rc;
}

/* The band configs[ci] is judged with: the float32 band f32_tol, or, under a profile that
 * rounds on the model, tie_band under that profile (its rounding moves router margins by far
 * more than float32's), measured once per profile into band[] / have[] (indexed as
 * lm_profile_index). */
static int config_band(float *tol, float *band, bool *have, const lm_model *m,
                       const ref_model *rm, const int32_t *prompt, uint32_t n,
                       const hx_routing *truth, const hx_config *cfg, float f32_tol,
                       uint32_t members, uint64_t sr_seed, lm_err *err)
{
    const lm_profile *pf = lm_profile_find(cfg->profile);
    *tol = f32_tol;
    if (pf == NULL || !lm_profile_rounds_on(pf, m))
        return LM_OK;
    const uint32_t k = lm_profile_index(pf);
    if (!have[k]) {
        bool sr;
        const int rc = tie_band(&band[k], &sr, m, rm, prompt, n, truth, cfg->profile, members,
                                sr_seed, err);
        if (rc != LM_OK)
            return rc;
        have[k] = true;
    }
    *tol = band[k];
    return LM_OK;
}

int hx_routing_measure(hx_routing_result *out, const lm_model *m, const ref_model *rm,
                       const int32_t *prompt,
                       uint32_t n, const hx_config *configs, size_t n_configs, uint32_t prec,
                       uint32_t members, uint64_t sr_seed, lm_err *err)
{
    memset(out, 0, sizeof *out);
    if (m->hp.n_expert == 0)
        return LM_OK;
    const uint32_t nl = m->hp.n_layer;
    out->n_layer = nl;
    out->k = m->hp.n_expert_used;
    out->n_expert = m->hp.n_expert;
    out->members = members;
    out->n_configs = n_configs;
    out->flips = calloc(n_configs * nl + 1, sizeof *out->flips);
    out->n_flip = calloc(n_configs + 1, sizeof *out->n_flip);
    out->n_tie = calloc(n_configs + 1, sizeof *out->n_tie);
    out->cfg_tol = calloc(n_configs + 1, sizeof *out->cfg_tol);
    if (out->flips == NULL || out->n_flip == NULL || out->n_tie == NULL || out->cfg_tol == NULL) {
        hx_routing_result_free(out);
        return LM_FAIL(err, LM_E_NOMEM, "routing: out of memory");
    }
    ref_request rq = {.tokens = prompt, .n_tokens = n, .n_prompt = n, .prec = prec};
    ref_result *r = NULL;
    hx_routing truth = {0}, other = {0};
    int rc = ref_run(&r, rm, &rq, err);
    if (rc == LM_OK)
        rc = hx_routing_from_ref(&truth, r, rm, err);
    if (rc == LM_OK)
        rc = tie_band(&out->tie_tol, &out->members_sr, m, rm, prompt, n, &truth, "", members,
                      sr_seed, err);
    float band[LM_PROFILES_MAX];
    bool have[LM_PROFILES_MAX] = {false};
    for (size_t ci = 0; rc == LM_OK && ci < n_configs; ++ci) {
        hx_routing_flips *f = out->flips + ci * nl;
        float *tol = &out->cfg_tol[ci];
        if (configs[ci].rot_max != 0) {
            /* A rotating cache's truth would be the reference with its own schedule: its
             * routing is not captured (no flips, and hx_routing_to_report leaves it out). */
            *tol = out->tie_tol;
            continue;
        }
        if ((rc = config_band(tol, band, have, m, rm, prompt, n, &truth, &configs[ci],
                              out->tie_tol, members, sr_seed, err)) != LM_OK ||
            (rc = hx_routing_capture(&other, m, &configs[ci], prompt, n, err)) != LM_OK ||
            (rc = hx_routing_compare(f, &truth, &other, *tol, err)) != LM_OK)
            break;
        for (uint32_t il = 0; il < nl; ++il) {
            out->n_flip[ci] += f[il].n_flip;
            out->n_tie[ci] += f[il].n_tie;
        }
        out->n_real += out->n_flip[ci] - out->n_tie[ci];
        hx_routing_free(&other);
    }
    hx_routing_free(&other);
    hx_routing_free(&truth);
    ref_result_free(r);
    if (rc != LM_OK)
        hx_routing_result_free(out);
    else
        out->measured = true;
    return rc;
}
