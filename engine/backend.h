/* backend.h — the compute backend vtable. The forward pass (forward.c, attention.c) calls only
 * these slots for its matrix products; its elementwise ops are shared, fixed-order C
 * (backend_ops.c) unless a backend fills their optional slots.
 * A backend documents its summation order and threading next to its implementation. */
#ifndef KVD_BACKEND_H
#define KVD_BACKEND_H

#include "kvd_common.h"
#include "kvd_model.h"
#include "kvd_profile.h"

typedef struct lm_backend lm_backend;
struct lm_rope_args;

/* B of a product kept in a weight's file type: row j of B is the k values from column col0
 * on of the row at data + j * row_bytes, whose blocks lm_type_to_f32 decodes. */
typedef struct lm_nt_blocks {
    const uint8_t *data; /* [n][row_bytes], or NULL: B is float32 (lm_nt_part.b) */
    size_t row_bytes;
    uint32_t type;       /* lm_tensor_type */
    uint32_t col0;       /* first column read (a tensor-parallel shard of k starts mid-row) */
} lm_nt_blocks;

/* One product of a batch that shares its A operand (lm_gemm_nt_batch):
 * C[m][n] = alpha * A[m][k] . B[n][k]^T. */
typedef struct lm_nt_part {
    uint32_t n;
    const float *b; /* [n][ldb], or NULL when B is blocks (bq) */
    size_t ldb;
    float *c;       /* [m][ldc] */
    size_t ldc;
    lm_nt_blocks bq; /* B in blocks when bq.data is set (weight_tiles.c decodes it) */
} lm_nt_part;
#define LM_NT_BATCH_MAX 4u /* products in one batch */

/* The product of rows [row0, row0 + n) of weight w (k columns: its row length) into c
 * [m][ldc]: B float32 when w.f is set, else w's blocks. */
lm_nt_part lm_nt_weight(const lm_wt *w, uint64_t row0, uint32_t n, uint32_t k, float *c,
                        size_t ldc);
/* p restricted to n rows of B from row r0 and its columns from k0 on, into c [m][ldc]
 * (tensor-parallel shards). */
lm_nt_part lm_nt_sub(const lm_nt_part *p, uint32_t r0, uint32_t k0, uint32_t n, float *c,
                     size_t ldc);

typedef struct lm_backend_i {
    const char *name;
    /* C[m][n] = alpha * A[m][k] . B[n][k]^T  (row strides lda, ldb, ldc, in floats).
     * Used for x . W^T (weights are [out][in]) and for Q . K^T. */
    void (*gemm_nt)(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                    const float *a, size_t lda, const float *b, size_t ldb, float *c, size_t ldc);
    /* C[m][n] = A[m][k] . B[k][n]  (row strides lda, ldb, ldc). Used for P . V. */
    void (*gemm_nn)(lm_backend *be, uint32_t m, uint32_t n, uint32_t k,
                    const float *a, size_t lda, const float *b, size_t ldb, float *c, size_t ldc);
    /* Optional (NULL: absent): gemm_nt and gemm_nn computed entirely on the calling thread,
     * the same bits as the two slots above, callable from several threads at once. A backend
     * that fills both lets dense attention run its (head, query block) tasks side by side on
     * the context's pool instead of splitting each small product over it (attention.c). */
    void (*gemm_nt_local)(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                          const float *a, size_t lda, const float *b, size_t ldb, float *c,
                          size_t ldc);
    void (*gemm_nn_local)(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, const float *a,
                          size_t lda, const float *b, size_t ldb, float *c, size_t ldc);
    /* Optional (NULL: gemm_nt once per product): count <= LM_NT_BATCH_MAX products sharing A,
     * each with the bits gemm_nt gives it alone, dispatched as one unit of work (det: one
     * pool job, so no thread waits between them). Reached through lm_gemm_nt_batch. */
    void (*gemm_nt_batch)(lm_backend *be, uint32_t m, uint32_t k, float alpha, const float *a,
                          size_t lda, const lm_nt_part *p, uint32_t count);
    /* Optional (NULL: gemm_nt_local): one tile of a product whose B is blocks
     * (weight_tiles.c), gemm_nt on a decoded tile computed on the calling thread, called from
     * the backend's pool's threads at once; tiles_begin (optional) runs once on the calling
     * thread before a product's tiles go to the pool. A backend with a pool and one of
     * gemm_nt_tile or gemm_nt_local runs tiles on its threads. */
    void (*gemm_nt_tile)(lm_backend *be, uint32_t m, uint32_t n, uint32_t k, float alpha,
                         const float *a, size_t lda, const float *b, size_t ldb, float *c,
                         size_t ldc);
    void (*tiles_begin)(lm_backend *be);
    void (*destroy)(lm_backend *be);
    /* Optional (NULL for naive and blas: the forward pass then does nothing, one predictable
     * branch per stage and chunk). Called by the forward pass on the float32 results of each
     * elementwise stage, in place, rows x [n][stride] of which the first `elems` of each row are
     * live: after every RMSNorm (layers and the final norm), RoPE'd q and K rows, softmax
     * probabilities, the SwiGLU product and the residual adds. A backend that emulates
     * rounding noise (naive-sr) re-rounds each value there; it must depend only on (backend
     * state, site, index within the row, value), never on the row's position in the chunk, so
     * results stay independent of prefill step and threads. site: an lm_perturb_site. */
    void (*perturb)(lm_backend *be, float *x /* [n][stride] */, uint32_t n, uint32_t elems,
                    size_t stride, uint32_t site);
    /* Optional: rounds rows x [n][stride] to the virtual precision spec at a profile's site
     * (kvd_profile.h) in the backend's own way (naive-sr: stochastically, seeded like perturb).
     * NULL: round to nearest (lm_round_rows_rn), what an engine running the profile does. */
    void (*round)(lm_backend *be, float *x /* [n][stride] */, uint32_t n, uint32_t elems,
                  size_t stride, uint32_t site, const lm_round_spec *spec);
    /* Optional (NULL: operands are read where they lie, as for the CPU backends). Called once
     * per context with a float32 copy of every weight matrix (the model's arena, or the
     * context's own dequantized copy when the model keeps its file's types): a device backend
     * uploads it once and reads every B operand that lies inside it from its own copy. */
    int (*bind_weights)(lm_backend *be, const float *w /* [n] */, size_t n, lm_err *err);
    /* Optional (NULL: the products cannot fail). The first failure of the products since the
     * backend was created (a device error), checked by the forward pass after every chunk. */
    int (*check)(lm_backend *be, lm_err *err);
    /* Optional elementwise ops (NULL: the shared fixed-order C of backend_ops.c, which every
     * CPU backend runs). A backend that fills one (a device backend keeping activations on
     * the device) computes the same function over all n rows of a chunk in one call, states
     * its order next to its implementation, and is held to the bounds of tests/test_backend.c
     * (which iterates the registry) against a double-precision reference. The forward pass
     * reaches them only through lm_op_rmsnorm, lm_op_glu and lm_op_rope below. */
    /* y[n][dim] = x[n][dim] / sqrt(mean(x^2) + eps) * w[dim], row by row (y may be x). */
    void (*rmsnorm)(lm_backend *be, float *y, const float *x, const float *w, uint32_t n,
                    uint32_t dim, float eps);
    /* g[n][dim] = act(g) * u: silu (LM_ACT_SWIGLU) or gelu_tanh (LM_ACT_GEGLU_TANH). */
    void (*glu)(lm_backend *be, float *g, const float *u, uint32_t n, uint32_t dim,
                lm_ffn_act act);
    /* RoPE of rows[n][stride] (heads at the start of each row) at positions a->pos0... */
    void (*rope)(lm_backend *be, float *rows, uint32_t n, const struct lm_rope_args *a);
} lm_backend_i;

/* The rotation of lm_op_rope: pair i < n_rot/2 of each head turns by the angle whose cosine
 * and sine are cos_tab/sin_tab[pos][i] (pos = pos0 + row); NORM pairs (2i, 2i+1), neox pairs
 * (i, i + n_rot/2); dimensions >= n_rot pass through. */
typedef struct lm_rope_args {
    const float *cos_tab; /* [n_pos][n_rot / 2] */
    const float *sin_tab; /* [n_pos][n_rot / 2] */
    size_t stride;        /* floats between rows */
    uint32_t pos0, n_heads, head_dim, n_rot;
    bool neox;
} lm_rope_args;

/* p[0..count) with A [m][lda] shared: the backend's gemm_nt_batch slot, else gemm_nt for each
 * product in order; products whose B is blocks go to lm_gemm_nt_blocks. */
void lm_gemm_nt_batch(lm_backend *be, uint32_t m, uint32_t k, float alpha, const float *a,
                      size_t lda, const lm_nt_part *p, uint32_t count);

/* Products whose B is blocks (weight_tiles.c): B's rows decoded a tile at a time into the
 * backend's tile scratch (lm_backend_reserve_wtiles), each tile then one gemm_nt call (or
 * gemm_nt_local on the pool's threads, for a backend with a pool and that slot) on the
 * columns it covers. Every element of B has the value lm_type_to_f32 gives it and every
 * output the order the backend gives a float32 B, so a backend whose outputs do not depend on
 * the other rows of B in a call (naive, naive-sr, det) has the bits of the float32 arena. */
void lm_gemm_nt_blocks(lm_backend *be, uint32_t m, uint32_t k, float alpha, const float *a,
                       size_t lda, const lm_nt_part *p, uint32_t count);
/* Allocates be's tile scratch for products of up to k_max columns (once per context; kept
 * when already large enough). */
int lm_backend_reserve_wtiles(lm_backend *be, uint32_t k_max, lm_err *err);
/* Bytes lm_backend_reserve_wtiles allocates for k_max columns on `slots` threads. */
size_t lm_wtile_bytes(uint32_t k_max, uint32_t slots);

struct lm_pool;
/* The forward pass's elementwise ops: the backend's slot when it has one, else the shared C
 * split over pool by rows (NULL: the calling thread). */
void lm_op_rmsnorm(lm_backend *be, struct lm_pool *pool, float *y /* [n][dim] */,
                   const float *x /* [n][dim] */, const float *w /* [dim] */, uint32_t n,
                   uint32_t dim, float eps);
void lm_op_glu(lm_backend *be, struct lm_pool *pool, float *g /* [n][dim] */,
               const float *u /* [n][dim] */, uint32_t n, uint32_t dim, lm_ffn_act act);
/* The shared C of the gated activation (the dense FFN's lm_op_glu and the MoE experts):
 * g[i] = act(g[i], u[i]) for i < count, per element, each formula in backend_ops.c. */
void lm_glu(float *g /* [count] */, const float *u /* [count] */, size_t count, lm_ffn_act act);
void lm_op_rope(lm_backend *be, struct lm_pool *pool, float *rows /* [n][a->stride] */,
                uint32_t n, const lm_rope_args *a);
/* rows[t][0:dim] += b[0:dim] for t < n, rows stride floats apart: one float add per element
 * (the bias of a projection; on the calling thread). */
void lm_add_bias(float *rows /* [n][stride] */, const float *b /* [dim] */, uint32_t n,
                 uint32_t dim, size_t stride);

/* lm_perturb_site: kvd_profile.h (a profile's table is indexed by it). */

/* Whether the SR ensemble perturbs site (an lm_perturb_site, low 8 bits) when no profile
 * rounds there: NORM .. OUT_NORM and POST_NORM .. MOE_SUM; V .. WEIGHT only a profile
 * rounds. */
static inline bool lm_site_perturbed(uint32_t site)
{
    site &= 0xffu;
    return site < LM_SITE_V || (site >= LM_SITE_POST_NORM && site <= LM_SITE_MOE_SUM);
}

struct lm_backend {
    const lm_backend_i *vt;
    unsigned flags; /* the registry's capability flags of the name it was created by (LM_BE_*,
                       kvd_engine.h), set by lm_backend_create */
    int n_threads;
    const lm_profile *prof; /* precision profile (kvd_profile.h); NULL = f32 */
    /* The backend's own thread pool (threadpool.h) when it runs its products on one (det),
     * else NULL; a context then runs its elementwise stages on this pool too, so that one
     * set of threads does everything. Owned by the backend. */
    struct lm_pool *pool;
    /* Decoded rows of B in blocks (weight_tiles.c): wtile_slots tiles of wtile_floats each,
     * one per thread that runs tiles; NULL until lm_backend_reserve_wtiles. */
    float *wtile;
    size_t wtile_floats;
    uint32_t wtile_slots;
};

/* Rows x [n][stride] (first elems live) rounded to spec at site: the backend's round slot,
 * else round to nearest (lm_round_rows_rn). */
static inline void lm_backend_round(lm_backend *be, float *x /* [n][stride] */, uint32_t n,
                                    uint32_t elems, size_t stride, uint32_t site,
                                    const lm_round_spec *s)
{
    if (be->vt->round != NULL)
        be->vt->round(be, x, n, elems, stride, site, s);
    else
        lm_round_rows_rn(x, n, elems, stride, s);
}

/* The end of an elementwise stage at site: when the profile rounds there, lm_backend_round
 * — which replaces the perturbation, the value then carrying the profile's coarser rounding;
 * otherwise (and where the profile rounds each product's input instead, LM_ROUND_VEC_DOT:
 * lm_gemm_nt_act) the perturb slot, at the sites lm_site_perturbed names. */
static inline void lm_backend_perturb(lm_backend *be, float *x /* [n][stride] */, uint32_t n,
                                      uint32_t elems, size_t stride, uint32_t site)
{
    const lm_round_spec *s = lm_profile_site(be->prof, site);
    if (s->kind != LM_ROUND_NONE && s->kind != LM_ROUND_VEC_DOT)
        lm_backend_round(be, x, n, elems, stride, site, s);
    else if (be->vt->perturb != NULL && lm_site_perturbed(site))
        be->vt->perturb(be, x, n, elems, stride, site);
}

/* Products p[0..count) sharing the input a [m][lda] (first k live) that comes from site,
 * product i's weight read through the activation format act[i] (lm_vec_dot_spec of its type):
 * when the profile rounds product inputs at site (LM_ROUND_VEC_DOT) and act is not NULL, the
 * products run in groups of one format (in order of first appearance), each group reading a
 * copy of a in scratch rounded to that format by lm_backend_round (a itself for NONE);
 * otherwise lm_gemm_nt_batch on a. Each product has the bits gemm_nt gives it alone. */
void lm_gemm_nt_act(lm_backend *be, uint32_t site, uint32_t m, uint32_t k, const float *a,
                    size_t lda, const lm_nt_part *p, const lm_round_spec *const *act,
                    uint32_t count, float *scratch /* [m][k] */);

/* Creates a backend by a registered name (lm_backend_at in kvd_engine.h; NAME:seed=N for a
 * LM_BE_SEEDED one); unknown names are LM_E_INPUT naming the registered ones. */
int lm_backend_create(lm_backend **out, const char *name, int n_threads, lm_err *err);
/* The stochastic-rounding naive backend with an explicit seed (backend_naive_sr.c); the
 * registry reaches it by the names "naive-sr" (seed 0) and "naive-sr:seed=N". */
int lm_backend_sr_create(lm_backend **out, uint64_t seed, lm_err *err);
void lm_backend_destroy(lm_backend *be);

#endif
