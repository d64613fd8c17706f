/* backend.h — the compute backend vtable. The forward pass (forward.c, attention.c) calls only
 * these slots for its matrix products; everything elementwise is shared, fixed-order C.
 * A backend documents its summation order and threading next to its implementation. */
#ifndef KVD_BACKEND_H
#define KVD_BACKEND_H

#include "kvd_common.h"

typedef struct lm_backend lm_backend;

typedef struct lm_backend_i {
    const char *name;
    /* C[m][n] = alpha * A[m][k] . B[n][k]^T  (row strides lda, ldb, ldc, in floats).
     * Used for x . W^T (weights are [out][in]) and for Q . K^T. */
    void (*gemm_nt)(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                    const float *a, size_t lda, const float *b, size_t ldb, float *c, size_t ldc);
    /* C[m][n] = A[m][k] . B[k][n]  (row strides lda, ldb, ldc). Used for P . V. */
    void (*gemm_nn)(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                    const float *a, size_t lda, const float *b, size_t ldb, float *c, size_t ldc);
    void (*destroy)(lm_backend *be);
} lm_backend_i;

struct lm_backend {
    const lm_backend_i *vt;
    int n_threads;
};

/* Creates a backend by name ("naive", "blas"); unknown names are LM_E_INPUT. */
int lm_backend_create(lm_backend **out, const char *name, int n_threads, lm_err *err);
/* The stochastic-rounding naive backend with an explicit seed (backend_naive_sr.c); the
 * factory reaches it by the names "naive-sr" (seed 0) and "naive-sr:seed=N". */
int lm_backend_sr_create(lm_backend **out, uint64_t seed, lm_err *err);
void lm_backend_destroy(lm_backend *be);

#endif
