/* routing.h — MoE routing decisions of one engine configuration, and routing flips between two
 * of them. A routing decision is discrete like an argmax: a position's expert set flips when
 * the router logits move across the k-th/(k+1)-th boundary. A flip is a TIE when the side
 * taken as the truth had a router margin (k-th minus (k+1)-th logit) within the tolerance
 * given (rounding can flip such a decision), and REAL otherwise. */
#ifndef HX_ROUTING_H
#define HX_ROUTING_H

#include "config.h"
#include "kvd_engine.h"

#include <stdio.h>

struct ref_result;

typedef struct hx_routing {
    uint32_t n_layer, n_pos, k;
    uint32_t *sel;   /* [n_layer][n_pos][k] expert ids in rank order (unused for dense layers) */
    float *margin;   /* [n_layer][n_pos] router margin; +inf for dense layers */
    bool *moe;       /* [n_layer] whether the layer routes */
} hx_routing;

/* Prefills tokens[n] with cfg (backend, threads, attn, step) and records every MoE layer's
 * routing at every position. LM_E_INPUT when the model has no MoE layer. */
int hx_routing_capture(hx_routing *out, const lm_model *m, const hx_config *cfg,
                       const int32_t *tokens, uint32_t n, lm_err *err);
void hx_routing_free(hx_routing *r);

typedef struct hx_routing_flips {
    uint32_t n_flip;       /* positions whose expert set differs */
    uint32_t n_tie;        /* of which the truth's margin was <= tie_tol */
    uint32_t first_pos;    /* first flipped position (UINT32_MAX: none) */
    float min_margin;      /* smallest truth margin over the layer's positions */
} hx_routing_flips;

/* Per layer [truth->n_layer]: flips of `other` against `truth` (same shape required). Expert
 * sets are compared as sets (rank order ignored). */
int hx_routing_compare(hx_routing_flips *per_layer, const hx_routing *truth,
                       const hx_routing *other, float tie_tol, lm_err *err);

/* The reference's routing of r's tokens (a ref_run on a MoE model; r->moe_sel set). */
int hx_routing_from_ref(hx_routing *out, const struct ref_result *r, const lm_model *m,
                        lm_err *err);

/* Routing-flip section of a sweep (MoE models only; prints nothing otherwise): the reference's
 * routing of the prompt (MPFR at prec bits) is the truth; the TIE band is measured, not
 * configured: 2 x the largest |margin - reference margin| over an 8-run naive-sr ensemble
 * (seeds sr_seed .. sr_seed+7), the same statistic and safety factor as the logit envelope;
 * then, per configuration (its prefill of the prompt), the flips per layer and how many were
 * TIE. Returns the number of real (non-TIE) flips through *n_real. When rep is not NULL (it
 * must then hold configs[0..n_configs) in order, as a sweep's report does), each configuration
 * with the plain cache also gets routing_checked, routing_flips and routing_real there (a
 * rotating-cache configuration's routing is not compared: its truth would be the reference
 * with its own schedule). */
struct hx_report;
int hx_routing_report(FILE *out, const lm_model *m, const int32_t *prompt, uint32_t n,
                      const hx_config *configs, size_t n_configs, uint32_t prec,
                      uint64_t sr_seed, uint32_t *n_real, struct hx_report *rep, lm_err *err);

#endif
