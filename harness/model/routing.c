/* routing.c — freeing MoE routing captures and a sweep's routing result. */
#include "model/routing.h"

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

void hx_routing_result_free(hx_routing_result *r)
{
    if (r == NULL)
        return;
    free(r->flips);
    free(r->n_flip);
    free(r->n_tie);
    free(r->cfg_tol);
    memset(r, 0, sizeof *r);
}
