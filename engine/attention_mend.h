/* attention_mend.h — P . V rows that summed a non-finite value at a key their query cannot see
 * (engine-private; attention_mend.c says why and how). */
#ifndef KVD_ATTENTION_MEND_H
#define KVD_ATTENTION_MEND_H

#include "backend.h"

#include <stdbool.h>
#include <stdint.h>

/* Whether row r of a P . V product (its query) can see key j of the product's keys. */
typedef bool (*lm_key_visible_fn)(const void *ctx, uint32_t r, uint32_t j);

/* After O = P . V (backend gemm_nn, m rows, head_dim columns, nk keys): every row of O that is
 * not finite and whose keys include one it cannot see (visible) with a non-finite value in V
 * is computed again, alone, with those keys' values read as +0. local: on the calling thread
 * (gemm_nn_local, inside a pool task), else gemm_nn. */
void lm_attn_pv_mend(lm_backend *be, bool local, uint32_t m, uint32_t head_dim, uint32_t nk,
                     const float *p /* [m][ldp] */, size_t ldp,
                     const float *v /* [nk][ldv] */, size_t ldv,
                     float *o /* [m][ldo] */, size_t ldo, lm_key_visible_fn visible,
                     const void *ctx);

#endif
