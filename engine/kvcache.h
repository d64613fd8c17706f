/* kvcache.h — the per-layer K/V store (engine-private). Layout per layer and tensor:
 * [pos][n_head_kv][head_dim] float32, K after RoPE. A rotating cache will replace the
 * position-to-slot mapping here without changing the callers' view of a layer. */
#ifndef KVD_KVCACHE_H
#define KVD_KVCACHE_H

#include "kvd_common.h"

typedef struct lm_kvcache {
    uint32_t n_layer;
    uint32_t n_ctx;    /* capacity in positions */
    uint32_t kv_dim;   /* n_head_kv * head_dim */
    float *k;          /* [n_layer][n_ctx][kv_dim] */
    float *v;          /* [n_layer][n_ctx][kv_dim] */
} lm_kvcache;

int lm_kvcache_init(lm_kvcache *kv, uint32_t n_layer, uint32_t n_ctx, uint32_t kv_dim,
                    lm_err *err);
void lm_kvcache_release(lm_kvcache *kv);

/* Row of position pos in layer il: [kv_dim], followed by the later positions. */
static inline float *lm_kvcache_k(const lm_kvcache *kv, uint32_t il, uint32_t pos)
{
    return kv->k + ((size_t)il * kv->n_ctx + pos) * kv->kv_dim;
}
static inline float *lm_kvcache_v(const lm_kvcache *kv, uint32_t il, uint32_t pos)
{
    return kv->v + ((size_t)il * kv->n_ctx + pos) * kv->kv_dim;
}

#endif
