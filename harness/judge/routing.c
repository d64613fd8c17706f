/* routing.c — MoE routing capture of one configuration and routing-flip comparison. */
#include "routing.h"

#include "report.h"

#include "kvd_ref.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

void hx_routing_free(hx_routing *r)
{
    if (r == NULL)
        return;
    free(r->sel);
    free(r->margin);
    free(r->moe);
    memset(r, 0, sizeof *r);
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
    char be[LM_BACKEND_NAME_MAX];
    const lm_ctx_params cp = {.backend = hx_config_backend_name(be, sizeof be, cfg),
                              .n_threads = (int)cfg->threads, .n_ctx = n,
                              .attn = cfg->attn == HX_ATTN_STREAM ? "stream" : "dense"};
    lm_ctx *c = NULL;
    int rc = lm_ctx_create(&c, m, &cp, err);
    const uint32_t step = cfg->step == 0 || cfg->step > n ? n : cfg->step;
    for (uint32_t done = 0; rc == LM_OK && done < n;) {
        const uint32_t len = n - done < step ? n - done : step;
        rc = lm_forward(c, tokens + done, len, LM_LOGITS_NONE, NULL, err);
        for (uint32_t il = 0; rc == LM_OK && il < hp->n_layer; ++il) {
            uint32_t rn, rk;
            const float *mg;
            const uint32_t *sel = lm_ctx_moe_routing(c, il, &rn, &rk, &mg); /* [rn][rk] */
            if (sel == NULL)
                continue;
            out->moe[il] = true;
            memcpy(out->sel + ((size_t)il * n + done) * out->k, sel,
                   (size_t)rn * rk * sizeof *sel);
            memcpy(out->margin + (size_t)il * n + done, mg, rn * sizeof *mg);
        }
        done += len;
    }
    lm_ctx_free(c);
    if (rc != LM_OK)
        hx_routing_free(out);
    return rc;
}

/* Same expert set (k is small: a quadratic check). */
static bool same_set(const uint32_t *a, const uint32_t *b, uint32_t k)
{
    for (uint32_t i = 0; i < k; ++i) {
        bool found = false;
        for (uint32_t j = 0; j < k && !found; ++j)
            found = a[i] == b[j];
        if (!found)
            return false;
    }
    return true;
}

int hx_routing_compare(hx_routing_flips *per_layer, const hx_routing *truth,
                       const hx_routing *other, float tie_tol, lm_err *err)
{
    if (truth->n_layer != other->n_layer || truth->n_pos != other->n_pos || truth->k != other->k)
        return LM_FAIL(err, LM_E_INPUT, "routing: captures of different shapes (%u/%u/%u vs "
                       "%u/%u/%u layers/positions/k)", truth->n_layer, truth->n_pos, truth->k,
                       other->n_layer, other->n_pos, other->k);
    const uint32_t n = truth->n_pos, k = truth->k;
    for (uint32_t il = 0; il < truth->n_layer; ++il) {
        hx_routing_flips *f = &per_layer[il];
        memset(f, 0, sizeof *f);
        f->first_pos = UINT32_MAX;
        f->min_margin = INFINITY;
        if (!truth->moe[il])
            continue;
        for (uint32_t p = 0; p < n; ++p) {
            const float mg = truth->margin[(size_t)il * n + p];
            f->min_margin = mg < f->min_margin ? mg : f->min_margin;
            const uint32_t *a = truth->sel + ((size_t)il * n + p) * k;
            const uint32_t *b = other->sel + ((size_t)il * n + p) * k;
            if (same_set(a, b, k))
                continue;
            ++f->n_flip;
            f->n_tie += mg <= tie_tol;
            if (f->first_pos == UINT32_MAX)
                f->first_pos = p;
        }
    }
    return LM_OK;
}

int hx_routing_from_ref(hx_routing *out, const ref_result *r, const lm_model *m, lm_err *err)
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
        out->moe[il] = m->layers[il].ffn_gate_inp != NULL;
    for (uint32_t il = 0; il < nl; ++il)
        if (!out->moe[il])
            for (uint32_t p = 0; p < n; ++p)
                out->margin[(size_t)il * n + p] = INFINITY;
    return LM_OK;
}

#define ROUTING_MEMBERS 8u
#define ROUTING_SAFETY 2.0

int hx_routing_report(FILE *out, const lm_model *m, const int32_t *prompt, uint32_t n,
                      const hx_config *configs, size_t n_configs, uint32_t prec,
                      uint64_t sr_seed, uint32_t *n_real, struct hx_report *rep, lm_err *err)
{
    *n_real = 0;
    if (m->hp.n_expert == 0)
        return LM_OK;
    const uint32_t nl = m->hp.n_layer;
    ref_request rq = {.tokens = prompt, .n_tokens = n, .n_prompt = n, .prec = prec};
    ref_result *r = NULL;
    hx_routing truth = {0}, other = {0};
    hx_routing_flips *f = calloc(nl, sizeof *f);
    int rc = f == NULL ? LM_FAIL(err, LM_E_NOMEM, "routing: out of memory") : LM_OK;
    if (rc == LM_OK)
        rc = ref_run(&r, m, &rq, err);
    if (rc == LM_OK)
        rc = hx_routing_from_ref(&truth, r, m, err);
    /* the TIE band: margins of the stochastic-rounding ensemble against the reference */
    double dev = 0.0;
    for (uint32_t e = 0; rc == LM_OK && e < ROUTING_MEMBERS; ++e) {
        const hx_config c = {.backend = "naive-sr", .step = 0, .threads = 1, .sr_seed = sr_seed + e};
        rc = hx_routing_capture(&other, m, &c, prompt, n, err);
        for (size_t i = 0; rc == LM_OK && i < (size_t)nl * n; ++i) {
            if (!truth.moe[i / n])
                continue;
            const bool same = memcmp(truth.sel + i * truth.k, other.sel + i * truth.k,
                                     truth.k * sizeof *truth.sel) == 0;
            /* a member that routes differently: rounding alone flipped it, so that margin is
             * inside the band by construction */
            const double d = same ? fabs((double)other.margin[i] - (double)truth.margin[i])
                                  : (double)truth.margin[i] / ROUTING_SAFETY;
            dev = d > dev ? d : dev;
        }
        hx_routing_free(&other);
    }
    const float tie_tol = (float)(ROUTING_SAFETY * dev);
    if (rc == LM_OK)
        fprintf(out, "\nMoE routing flips vs the reference's routing of the prompt (%u layers, "
                     "top-%u of %u; TIE = reference margin <= %.3g, measured: %.0f x the largest "
                     "margin deviation of %u naive-sr runs)\n",
                nl, m->hp.n_expert_used, m->hp.n_expert, (double)tie_tol, ROUTING_SAFETY,
                ROUTING_MEMBERS);
    for (size_t ci = 0; rc == LM_OK && ci < n_configs; ++ci) {
        char name[HX_CONFIG_STR_MAX];
        hx_config_format(name, sizeof name, &configs[ci]);
        if ((rc = hx_routing_capture(&other, m, &configs[ci], prompt, n, err)) != LM_OK ||
            (rc = hx_routing_compare(f, &truth, &other, tie_tol, err)) != LM_OK)
            break;
        uint32_t flips = 0, ties = 0;
        for (uint32_t il = 0; il < nl; ++il) {
            flips += f[il].n_flip;
            ties += f[il].n_tie;
        }
        *n_real += flips - ties;
        if (rep != NULL && ci < rep->n_configs && configs[ci].rot_max == 0) {
            hx_config_report *cr = &rep->configs[ci];
            cr->routing_checked = true;
            cr->routing_flips = flips;
            cr->routing_real = flips - ties;
        }
        fprintf(out, "  %-38s %4u flips (%u TIE, %u real)", name, flips, ties, flips - ties);
        for (uint32_t il = 0; il < nl && flips > 0; ++il)
            if (f[il].n_flip > 0)
                fprintf(out, "  L%u: %u from pos %u", il, f[il].n_flip, f[il].first_pos);
        fputc('\n', out);
        hx_routing_free(&other);
    }
    hx_routing_free(&other);
    hx_routing_free(&truth);
    ref_result_free(r);
    free(f);
    return rc;
}
