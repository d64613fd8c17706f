/* thresholds.c — the table of sizes at which the engine takes another code path
 * (kvd_engine.h lm_threshold): each value is the constant the code itself branches on. */
#include "kvd_engine.h"

#include "attention.h"
#include "attention_stream.h"
#include "threadpool.h"

#include <string.h>

static const lm_threshold table[] = {
    {"blas.multi_row", LM_THR_CHUNK_ROWS, 2, NULL, "blas", false,
     "cblas_sgemm instead of the one-row cblas_sgemv"},
    {"threads.row_split", LM_THR_CHUNK_ROWS, 2 * LM_POOL_MIN_ROWS, NULL, NULL, true,
     "the elementwise stages (norms, RoPE, residuals, activations) split the chunk's rows "
     "over threads"},
    {"dense.softmax_split", LM_THR_CHUNK_ROWS, 2 * LM_POOL_MIN_SOFTMAX_ROWS, "dense", NULL, true,
     "dense attention's softmax rows split over threads"},
    {"dense.query_block", LM_THR_CHUNK_ROWS, LM_ATTN_Q_BLOCK + 1, "dense", NULL, false,
     "a second query block of dense attention, whose products split at the block"},
    {"stream.query_block", LM_THR_CHUNK_ROWS, LM_ATTN_STREAM_QB + 1, "stream", NULL, false,
     "a second query block of streaming attention"},
    {"stream.key_tile", LM_THR_KEYS, LM_ATTN_STREAM_TILE + 1, "stream", NULL, false,
     "a second key tile of streaming attention, the online softmax rescaling across tiles"},
    {"prefix.reuse", LM_THR_REUSED, 1, NULL, NULL, false,
     "a prefix-cache hit: K/V rows adopted from an earlier request (lm_ctx_adopt_prefix), the "
     "rest of the prompt attending to them"},
    {"batch.sequences", LM_THR_SEQS, 2, NULL, NULL, false,
     "a forward call holding rows of several sequences (lm_forward_batch): the products over "
     "every sequence's rows, attention per sequence"},
    {"tp.shards", LM_THR_SHARDS, 2, NULL, NULL, false,
     "weight products split over tensor-parallel shards (tensor_parallel.h): column shards and "
     "row shards' partial sums all-reduced"},
};
#define N_THRESHOLDS (sizeof table / sizeof table[0])

size_t lm_threshold_count(void)
{
    return N_THRESHOLDS;
}

const lm_threshold *lm_threshold_at(size_t i)
{
    return i < N_THRESHOLDS ? &table[i] : NULL;
}

const lm_threshold *lm_threshold_find(const char *name)
{
    for (size_t i = 0; i < N_THRESHOLDS; ++i)
        if (strcmp(table[i].name, name) == 0)
            return &table[i];
    return NULL;
}
