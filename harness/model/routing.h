/* routing.h — MoE routing decisions of one engine configuration, and routing flips between two
 * of them. A routing decision is discrete like an argmax: a position's expert set flips when
 * the router logits move across the k-th/(k+1)-th boundary. A flip is a TIE when the side
 * taken as the truth had a router margin (k-th minus (k+1)-th logit) within the tolerance
 * given (rounding can flip such a decision), and REAL otherwise. run/routing.h captures and
 * measures them, judge/routing_flips.h compares them. */
#ifndef HX_MODEL_ROUTING_H
#define HX_MODEL_ROUTING_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct hx_routing {
    uint32_t n_layer, n_pos, k;
    uint32_t *sel;   /* [n_layer][n_pos][k] expert ids in rank order (unused for dense layers) */
    float *margin;   /* [n_layer][n_pos] router margin; +inf for dense layers */
    bool *moe;       /* [n_layer] whether the layer routes */
} hx_routing;

void hx_routing_free(hx_routing *r);

typedef struct hx_routing_flips {
    uint32_t n_flip;       /* positions whose expert set differs */
    uint32_t n_tie;        /* of which the truth's margin was <= tie_tol */
    uint32_t first_pos;    /* first flipped position (UINT32_MAX: none) */
    float min_margin;      /* smallest truth margin over the layer's positions */
} hx_routing_flips;

/* The routing step of a sweep (MoE models; hx_sweep_run_all runs it after the
 * configurations): the reference's routing of the prompt (MPFR at prec bits) is the truth; the
 * TIE band is measured, not configured: HX_ROUTING_SAFETY x the largest |margin - reference
 * margin| over the sweep's own noise ensemble (`members` SR runs of the reference's own
 * float32 model, ref_sr.h, seeds sr_seed + i; the engine's naive-sr runs when that model does
 * not implement the model),
 * the same statistic and safety factor as the logit envelope (a member that routes a position
 * differently contributes that position's reference margin / safety: rounding alone flipped it,
 * so it is inside the band by construction); then, per configuration (its prefill of the
 * prompt), the flips per layer and how many were TIE. Numbers only: printing is the report's
 * job (hx_report_print_routing). */
#define HX_ROUTING_SAFETY 2.0
typedef struct hx_routing_result {
    bool measured;            /* the model routes (MoE): everything below is filled */
    uint32_t n_layer, k, n_expert;
    uint32_t members;         /* noise ensemble size the band was measured with */
    bool members_sr;          /* its members: SR runs of the reference's model (else naive-sr) */
    float tie_tol;            /* the TIE band: reference margin <= tie_tol */
    size_t n_configs;
    float *cfg_tol;           /* [n_configs] the band each configuration is judged with:
                                 tie_tol, or for a profile that rounds on the model the same
                                 statistic over `members` naive-sr runs under that profile */
    hx_routing_flips *flips;  /* [n_configs][n_layer] */
    uint32_t *n_flip, *n_tie; /* [n_configs] totals over layers */
    uint32_t n_real;          /* sum over configurations of flips - ties */
} hx_routing_result;
void hx_routing_result_free(hx_routing_result *r);

#endif
