/* routing.h — running the engine and the reference for MoE routing: one configuration's
 * capture, the reference's routing, and a sweep's routing step (model/routing.h: the types;
 * judge/routing_flips.h: the comparison). */
#ifndef HX_RUN_ROUTING_H
#define HX_RUN_ROUTING_H

#include "judge/routing_flips.h"
#include "model/config.h"
#include "model/routing.h"
#include "kvd_engine.h"
#include "ref_model.h"

struct ref_result;

/* Prefills tokens[n] under cfg's schedule (hx_drive_feed: backend, threads, attn, profile,
 * step and turn honoured) and records every MoE layer's routing at every position. LM_E_INPUT
 * when the model has no MoE layer, or for a rotating cache (refused: its routing is not
 * compared, hx_routing_measure skips such configurations). */
int hx_routing_capture(hx_routing *out, const lm_model *m, const hx_config *cfg,
                       const int32_t *tokens, uint32_t n, lm_err *err);
/* The reference's routing of r's tokens (a ref_run on rm, a MoE model; r->moe_sel set). */
int hx_routing_from_ref(hx_routing *out, const struct ref_result *r, const ref_model *rm,
                        lm_err *err);

/* Fills *out (measured false, nothing allocated, for a dense model): the engine's model m and
 * the reference's own view rm of the same file. */
int hx_routing_measure(hx_routing_result *out, const lm_model *m, const ref_model *rm,
                       const int32_t *prompt,
                       uint32_t n, const hx_config *configs, size_t n_configs, uint32_t prec,
                       uint32_t members, uint64_t sr_seed, lm_err *err);
#endif
