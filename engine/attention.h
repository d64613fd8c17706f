/* attention.h — causal multi-head attention of one chunk over the KV cache (engine-private).
 * forward.c calls one entry point; alternative implementations (streaming online softmax,
 * sliding windows, sinks) slot in as further functions over the same argument record. */
#ifndef KVD_ATTENTION_H
#define KVD_ATTENTION_H

#include "backend.h"
#include "threadpool.h"

#include <stdbool.h>

/* Queries per causal block: block b of a chunk attends to keys [0, pos0 + end of block b),
 * so the products above the diagonal are mostly skipped (a 512-token chunk does 5/8 of the
 * dense work). The block size changes which matrix shapes a BLAS backend sees, not the
 * mathematics; with the naive backend it changes no bit. */
#define LM_ATTN_Q_BLOCK 128u

typedef struct lm_attn_args {
    uint32_t n;         /* queries in the chunk */
    uint32_t pos0;      /* position of the first query; query i sits at pos0 + i */
    uint32_t n_head;
    uint32_t n_head_kv; /* divides n_head: query head h reads kv head h / (n_head / n_head_kv) */
    uint32_t head_dim;
    float scale;        /* multiplies Q.K (1/sqrt(head_dim)) */
    const float *q;     /* [n][n_head][head_dim] (after RoPE) */
    const float *k;     /* [pos0 + n][n_head_kv][head_dim] cache, K after RoPE */
    const float *v;     /* [pos0 + n][n_head_kv][head_dim] cache */
    float *out;         /* [n][n_head][head_dim] */
    float *scores;      /* scratch of lm_attention_dense_scratch(be, n, pos0 + n) floats */
    lm_pool *pool;      /* row-parallel softmax, or the (head, block) tasks; NULL = serial */
    bool bidir;         /* every query of the chunk sees every key of the chunk (and the cache
                           before it): one block of keys [0, pos0 + n), no causal mask inside */
} lm_attn_args;

/* Scratch floats lm_attention_dense needs on backend be for a chunk of n queries ending at
 * n_kv keys. */
size_t lm_attention_dense_scratch(const lm_backend *be, uint32_t n, uint32_t n_kv);

/* Dense attention: materialises one head's [n][pos0 + n] score matrix at a time, or, on a
 * backend with calling-thread products, one query block's rows per pool thread (near the
 * diagonal, each piece of rows only up to the last key it reads). */
void lm_attention_dense(lm_backend *be, const lm_attn_args *a);

#endif
