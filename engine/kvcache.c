/* kvcache.c — allocation of the per-layer K/V store (see kvcache.h for the layout). */
#include "kvcache.h"

#include <stdlib.h>
#include <string.h>

int lm_kvcache_init(lm_kvcache *kv, uint32_t n_layer, uint32_t n_ctx, uint32_t kv_dim,
                    lm_err *err)
{
    memset(kv, 0, sizeof *kv);
    uint64_t n_floats;
    if (lm_mul_u64(&n_floats, (uint64_t)n_layer * n_ctx, kv_dim) != 0 ||
        n_floats > SIZE_MAX / sizeof(float) / 2)
        return LM_FAIL(err, LM_E_INPUT, "KV cache: %u layers x %u positions x %u too large",
                       n_layer, n_ctx, kv_dim);
    /* calloc: positions not yet written read as zeros rather than garbage in a debugger;
     * the forward pass never reads past n_past. */
    kv->k = calloc((size_t)n_floats ? (size_t)n_floats : 1, sizeof(float));
    kv->v = calloc((size_t)n_floats ? (size_t)n_floats : 1, sizeof(float));
    if (kv->k == NULL || kv->v == NULL) {
        lm_kvcache_release(kv);
        return LM_FAIL(err, LM_E_NOMEM, "KV cache: cannot allocate %llu floats",
                       (unsigned long long)n_floats * 2);
    }
    kv->n_layer = n_layer;
    kv->n_ctx = n_ctx;
    kv->kv_dim = kv_dim;
    return LM_OK;
}

void lm_kvcache_release(lm_kvcache *kv)
{
    free(kv->k);
    free(kv->v);
    kv->k = kv->v = NULL;
}
