/* det_kernels.h — the det backend's matrix kernels (engine-private): one summation order per
 * output element that depends only on the reduction length, on every instruction set.
 *
 * gemm_nt (x . W^T, Q . K^T): the 8-lane order. Output (i, j) = alpha * dot(A[i][0:k],
 * B[j][0:k]) is computed as
 *   acc[p] = +0.0f for the 8 lanes p = 0..7;
 *   for block b = 0, 1, ..., ceil(k / 8) - 1 in order, for every lane p:
 *       acc[p] = fma(A[i][8b + p], B[j][8b + p], acc[p])   (one rounding; elements past k
 *                                                           read as +0.0f)
 *   v4[p] = acc[p] + acc[p + 4]   (p < 4)
 *   v2[p] = v4[p] + v4[p + 2]     (p < 2)
 *   out   = alpha * (v2[0] + v2[1])
 * AVX2 holds the 8 lanes of one output in one register; AVX-512 holds two outputs (j, j+1)
 * in one register, 8 lanes each, and reduces both halves with the same tree; the scalar path
 * uses an array and fmaf. Every step is the same correctly rounded IEEE operation, so the
 * three give identical bits.
 *
 * gemm_nn (P . V): the same 8-lane order over its reduction index l (rows of B), so that
 * gemm_nn(A, B) == gemm_nt(A, B^T) bit for bit; vectorized across the independent columns j.
 * Zero terms appended to the reduction (the masked keys of a causal block: probability +0)
 * leave every lane's value unchanged (at most a -0 lane becomes +0), so a query's P . V does
 * not depend on its block's length.
 *
 * The order does not depend on m, n, the tile a kernel uses for an element, the other rows or
 * columns, or how a caller splits rows and columns into calls or threads. */
#ifndef KVD_DET_KERNELS_H
#define KVD_DET_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* Rows of A from which a product packs B and runs the prefill tiles (fewer: decode and small
 * chunks, unpacked); the backend also sizes its column parts by it. */
#define DET_PACK_MIN_M 8u

typedef enum lm_det_isa {
    LM_DET_SCALAR = 0, /* fmaf on an 8-float array */
    LM_DET_AVX2 = 1,   /* AVX2 + FMA: the 8 lanes in one register */
    LM_DET_AVX512 = 2, /* AVX-512F: two outputs' 8 lanes in one register */
} lm_det_isa;

/* The best path this CPU (and OS) supports. */
lm_det_isa lm_det_isa_best(void);
/* "scalar", "avx2", "avx512". */
const char *lm_det_isa_name(lm_det_isa isa);
/* Parses a name of lm_det_isa_name; returns -1 for anything else. */
int lm_det_isa_parse(const char *name);

/* C[m][n] = alpha * A[m][k] . B[n][k]^T in the 8-lane order (row strides lda, ldb, ldc). */
void lm_det_gemm_nt(lm_det_isa isa, uint32_t m, uint32_t n, uint32_t k, float alpha,
                    const float *a, size_t lda, const float *b, size_t ldb, float *c, size_t ldc);
/* C[m][n] = A[m][k] . B[k][n] in the 8-lane order (row strides lda, ldb, ldc). */
void lm_det_gemm_nn(lm_det_isa isa, uint32_t m, uint32_t n, uint32_t k, const float *a,
                    size_t lda, const float *b, size_t ldb, float *c, size_t ldc);

#endif
