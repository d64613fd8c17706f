/* attention_mend.c — P . V rows that summed a non-finite value at a key their query cannot see.
 *
 * Every attention path multiplies a block of probabilities P by the values V of the keys that
 * some query of the block sees: dense attention by causal blocks of queries, the streaming path
 * by tiles of keys, the masked path over the union of a chunk's windows (from slot 0 on a
 * stochastically rounding backend) or over a rotating cache's every slot. A key that a query
 * cannot see has P = +0 in that query's row, which adds nothing while V is finite; but
 * 0 * Inf and 0 * NaN are NaN, so one non-finite value in V would reach every earlier query of
 * its block, and through a window or a rotating cache queries long past it: where the first
 * non-finite output appears would depend on the chunking and on the attention implementation.
 *
 * lm_attn_pv_mend runs after such a product. A finite row of O is left as it is, so a forward
 * pass without non-finite values costs m x head_dim reads here and changes no bit. A row that is
 * not finite, whose query sees no key with a non-finite value but cannot see one that has one,
 * is computed again, alone, over a copy of V in which those keys' values read as +0: its other
 * terms are the same products in the same order, so it gets the sum of a product over the keys
 * it sees (a skipped key adds +0 * +0 instead of +0 * v, the same value for every finite v up
 * to the sign of a zero sum; on a chunk-invariant backend a one-row product gives a row the
 * bits it gets among others). A row whose query sees a non-finite value is non-finite whatever
 * else it adds, and is left so. */
#include "attention_mend.h"

#include "kvd_util.h"

#include <stdlib.h>
#include <string.h>

void lm_attn_pv_mend(lm_backend *be, bool local, uint32_t m, uint32_t head_dim, uint32_t nk,
                     const float *p, size_t ldp, const float *v, size_t ldv, float *o, size_t ldo,
                     lm_key_visible_fn visible, const void *ctx)
{
    bool *bad = NULL;    /* [nk]: key j's values are not all finite */
    float *vm = NULL;    /* [nk][head_dim]: V with the hidden bad keys of one row at +0 */
    for (uint32_t r = 0; r < m; ++r) {
        float *orow = o + (size_t)r * ldo; /* [head_dim] */
        if (lm_all_finite(orow, head_dim))
            continue;
        if (bad == NULL) {
            bad = malloc(nk * sizeof *bad);
            vm = malloc((size_t)nk * head_dim * sizeof *vm);
            if (bad == NULL || vm == NULL)
                break; /* out of memory: the rows stay non-finite, never wrongly finite */
            for (uint32_t j = 0; j < nk; ++j)
                bad[j] = !lm_all_finite(v + (size_t)j * ldv, head_dim);
        }
        bool hidden = false, seen = false; /* a bad key this row cannot see / can see */
        for (uint32_t j = 0; j < nk && !seen; ++j)
            if (bad[j]) {
                const bool vis = visible(ctx, r, j);
                hidden |= !vis;
                seen |= vis;
            }
        if (!hidden || seen)
            continue; /* non-finite through the keys it sees */
        for (uint32_t j = 0; j < nk; ++j) {
            float *dst = vm + (size_t)j * head_dim;
            if (bad[j])
                memset(dst, 0, head_dim * sizeof *dst); /* bad keys here are all hidden */
            else
                memcpy(dst, v + (size_t)j * ldv, head_dim * sizeof *dst);
        }
        const float *prow = p + (size_t)r * ldp; /* [nk] */
        if (local)
            be->vt->gemm_nn_local(be, 1, head_dim, nk, prow, ldp, vm, head_dim, orow, ldo);
        else
            be->vt->gemm_nn(be, 1, head_dim, nk, prow, ldp, vm, head_dim, orow, ldo);
    }
    free(bad);
    free(vm);
}
