/* threadpool.h — a minimal fork-join pool for the forward pass's row-parallel elementwise
 * work (engine-private). Work is split into contiguous row ranges; every row is computed by
 * exactly the same code whichever thread runs it, so results never depend on the thread
 * count. A NULL pool runs everything on the calling thread. */
#ifndef KVD_THREADPOOL_H
#define KVD_THREADPOOL_H

#include "kvd_common.h"

typedef struct lm_pool lm_pool;

/* fn processes rows [begin, end). */
typedef void (*lm_pool_fn)(void *arg, uint32_t begin, uint32_t end);

/* Rows per thread below which the forward pass's elementwise stages stay on the calling thread
 * (a decode step's single row is not worth a wake-up): a chunk is split over threads only
 * from 2 * LM_POOL_MIN_ROWS rows on. */
#define LM_POOL_MIN_ROWS 4u
/* The same for dense attention's softmax rows. */
#define LM_POOL_MIN_SOFTMAX_ROWS 8u
/* Multiply-adds below which a product (det) or an attention step's tasks stay on the calling
 * thread: less work than a round trip through the pool. */
#define LM_POOL_MIN_MACS 65536.0

/* n_threads counts the caller; n_threads <= 1 gives *out = NULL (serial), which is valid. */
int lm_pool_create(lm_pool **out, int n_threads, lm_err *err);
void lm_pool_free(lm_pool *p);
/* Runs fn over [0, n) split in one contiguous part per thread, which the running threads
 * (the caller included) claim, and returns when every part is done. Runs serially when p is
 * NULL or n < 2 * min_rows (too little work to be worth a wake-up). */
void lm_pool_for(lm_pool *p, uint32_t n, uint32_t min_rows, lm_pool_fn fn, void *arg);

#endif
