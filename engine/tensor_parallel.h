/* tensor_parallel.h — a layer's weight products split the way tensor-parallel serving stacks
 * shard a model over n devices, simulated on one machine with the same backend:
 *   column-parallel (Q, K, V, gate, up): each product's outputs (rows of W) split into n
 *     contiguous shards, each shard one product of its own (its own kernel shapes);
 *   row-parallel (O, down): the reduction over k split into n contiguous shards, each shard's
 *     partial sums P_s = A[:, k_s] . W[:, k_s]^T computed on its own, then all-reduced:
 *       ring (NCCL's ring all-reduce): the [m][n_out] result, flattened to len elements, is cut
 *         into n chunks, chunk c = elements [len c / n, len (c + 1) / n); chunk c is summed in
 *         the order its reduce-scatter passes it around the ring, starting at shard c:
 *         ((P_c + P_{c+1}) + P_{c+2}) + ... + P_{c-1} (shard indices mod n)
 *       tree: pairwise over the shards, ((P_0 + P_1) + (P_2 + P_3)) + ..., n a power of two;
 *       fixed: k cut into LM_TP_MAX leaves whatever n (shard s holds leaves [s L/n, (s+1) L/n)),
 *         each leaf's partial sums a product of its own, the leaves then summed pairwise
 *         ((Q_0 + Q_1) + (Q_2 + Q_3)) + ...: a tree fixed by k alone, so a backend whose output
 *         columns are independent of their shard (det) gives the same bits at n = 1, 2, 4, 8.
 * n = 1 is the plain product, except with fixed (its leaves). Each shard's product has the bits the backend gives it alone;
 * only the shapes and the combining order change. */
#ifndef LM_TENSOR_PARALLEL_H
#define LM_TENSOR_PARALLEL_H

#include "backend.h"
#include "kvd_engine.h"

#include <stdbool.h>
#include <stdint.h>

#define LM_TP_MAX LM_TP_SHARDS_MAX

typedef struct lm_tp {
    uint32_t n;           /* shards, 1..LM_TP_MAX */
    lm_tp_reduce reduce;  /* how row-parallel shards combine */
} lm_tp;

/* lm_gemm_nt_act of products p[count] on a [m][lda] (first k live), column-parallel. */
void lm_tp_gemm_cols(lm_backend *be, const lm_tp *tp, uint32_t site, uint32_t m, uint32_t k,
                     const float *a, size_t lda, const lm_nt_part *p,
                     const lm_round_spec *const *act, uint32_t count, float *scratch);

/* lm_gemm_nt_act of one product p on a [m][lda] (first k live), row-parallel; partials
 * [LM_TP_MAX][m][p->n] is scratch for the shards' (or leaves') sums. */
void lm_tp_gemm_rows(lm_backend *be, const lm_tp *tp, uint32_t site, uint32_t m, uint32_t k,
                     const float *a, size_t lda, const lm_nt_part *p, const lm_round_spec *act,
                     float *scratch, float *partials);

#endif
