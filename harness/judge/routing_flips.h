/* routing_flips.h — routing flips of one capture against the truth's, and a sweep's routing
 * result recorded in its report (model/routing.h holds the types). */
#ifndef HX_ROUTING_FLIPS_H
#define HX_ROUTING_FLIPS_H

#include "model/config.h"
#include "model/report.h"
#include "model/routing.h"

/* Per layer [truth->n_layer]: flips of `other` against `truth` (same shape required). Expert
 * sets are compared as sets (rank order ignored). */
int hx_routing_compare(hx_routing_flips *per_layer, const hx_routing *truth,
                       const hx_routing *other, float tie_tol, lm_err *err);

/* Records rr in rep (rep->configs[i] <-> configs[i] <-> rr's configuration i): routing_checked,
 * routing_flips and routing_real of each configuration with the plain cache (a rotating-cache
 * configuration's routing is not compared: its truth would be the reference with its own
 * schedule). Nothing for a dense model. */
void hx_routing_to_report(hx_report *rep, const hx_routing_result *rr,
                          const hx_config *configs);

#endif
