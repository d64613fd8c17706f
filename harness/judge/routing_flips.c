/* routing_flips.c — routing flips between two captures, and a sweep's routing in the report. */
#include "judge/routing_flips.h"

#include <math.h>
#include <string.h>

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

void hx_routing_to_report(hx_report *rep, const hx_routing_result *rr, const hx_config *configs)
{
    for (size_t ci = 0; rr->measured && ci < rr->n_configs && ci < rep->n_configs; ++ci) {
        if (configs[ci].rot_max != 0)
            continue;
        hx_config_report *cr = &rep->configs[ci];
        cr->routing_checked = true;
        cr->routing_flips = rr->n_flip[ci];
        cr->routing_real = rr->n_flip[ci] - rr->n_tie[ci];
        cr->routing_tie_band = rr->cfg_tol[ci];
    }
}
