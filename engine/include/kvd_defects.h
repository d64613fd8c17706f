/* kvd_defects.h — test-only defect switch: realistic engine bugs injected at the real place in
 * the code, so that tests can show the harness detects them (detection is shown, not
 * assumed).
 *
 * Compiled in only when LM_TEST_HOOKS is defined (the Makefile's test library variant, linked
 * only by kvdrift-tests). In the release library LM_DEFECT_ON is the constant 0, the injection
 * branches fold away, and no function below exists: the `kvdrift` binary carries no defect code.
 *
 * One defect at a time, process-wide. A context reads the switch at every injection point
 * (never cached), so set it only while no forward pass runs. Contexts whose backend name starts
 * with the spared prefix (lm_test_spare_backend) always compute correctly: that is how a test
 * measures the noise envelope as a known-good build would (the sweep's "naive-sr" ensemble)
 * while the configurations under test carry the defect. */
#ifndef KVD_DEFECTS_H
#define KVD_DEFECTS_H

#include <stdbool.h>

typedef enum lm_defect {
    LM_DEFECT_NONE = 0,
    LM_DEFECT_ROPE_POS_AFTER_CHUNK, /* RoPE angle of position p+1 for every chunk that does not
                                       start at position 0 (forward.c rope_chunk) */
    LM_DEFECT_MASK_NEXT_TOKEN,      /* causal mask admits key i+1 of the query's own chunk
                                       (attention.c softmax_rows) */
    LM_DEFECT_KV_SLOT_AT_BOUNDARY,  /* a chunk that does not start at position 0 writes its K/V
                                       rows one slot early (forward.c attn_block) */
    LM_DEFECT_ATTN_NO_SCALE,        /* Q.K not scaled by 1/sqrt(head_dim) (forward.c) */
    LM_DEFECT_RMS_EPS_10X,          /* layer RMSNorms use 10 * eps (forward.c rmsnorm_chunk) */
    LM_DEFECT_SOFTMAX_NO_MAX,       /* attention softmax without subtracting the row maximum
                                       (attention.c softmax_row) */
    LM_DEFECT_GQA_INTERLEAVED,      /* query head h reads kv head h % n_head_kv instead of
                                       h / (n_head / n_head_kv) (attention.c) */
    LM_DEFECT_LOGITS_UNNORMED,      /* output projection of the raw residual stream, final
                                       RMSNorm skipped (forward.c logits_row) */
    LM_DEFECT_HIST_DOUBLE_NEWEST,   /* speculative decoding's processor history counts every
                                       accepted token twice (speculative.c accept) */
    LM_DEFECT_HIST_NO_PROMPT,       /* speculative decoding's processor history starts empty
                                       instead of holding the prompt, its last token included
                                       (speculative.c) */
    LM_DEFECT_ROLLBACK_KEEPS_ONE,   /* speculative decoding's rollback leaves the first rejected
                                       token in the target's KV cache (speculative.c) */
    LM_DEFECT_ROT_CONCAT_SLOT_ORDER, /* rotating cache: a chunk of n > 1 tokens trims the cache
                                        in slot order instead of position order, so once the
                                        in-place ring has wrapped it evicts recent positions and
                                        keeps older ones (kvcache_rotating.c temporal_order) */
    LM_DEFECT_KV_F16,               /* K and V rounded to float16 as they enter the KV cache, in
                                       every configuration (forward.c attn_block) */
    LM_DEFECT_F16_SUBNORMAL,        /* float16 subnormals decoded at half their value: the
                                       normalising exponent is off by one (dequant.c
                                       lm_f16_to_f32, the engine's weight loading) */
    LM_DEFECT_THREAD_SPLIT_SKIPS_ROW, /* the thread pool's split starts every part after the
                                         first one row late: that row is computed by no thread
                                         (threadpool.c part; only with >= 2 threads) */
    LM_DEFECT_STREAM_TILE_SKIPS_KEY,  /* streaming attention drops the first key of every key
                                         tile after the first (attention_stream.c; only past
                                         LM_ATTN_STREAM_TILE cached keys) */
    LM_DEFECT_PREFIX_LAST_ROW_STALE, /* a reused prefix of n positions copies n - 1 rows of K
                                        and V: its last position keeps whatever the slot held
                                        (forward.c lm_ctx_adopt_prefix) */
    LM_DEFECT_PREFIX_ROWS_SHIFTED,   /* a reused prefix's rows are written one slot late (an
                                        off-by-one in the block table): position 0 keeps what
                                        the slot held, position p gets p - 1's rows */
    LM_DEFECT_PREFIX_V_NEXT_LAYER,   /* a reused prefix takes each layer's V rows from the next
                                        layer's (layer index mixed up in the copy) */
    LM_DEFECT_BATCH_KV_NEXT_ROWS,    /* a batched call copies each sequence's new K/V rows from the
                                        next sequence's rows of the call (a slot mapping off by
                                        one sequence; forward.c attn_block) */
    LM_DEFECT_BATCH_LOGITS_LAST_ROW, /* a batched call's LAST logits of every sequence come from
                                        the call's last row, not the sequence's own (a logits
                                        index off; forward.c part_logits) */
    LM_DEFECT_BATCH_POS_OF_LAST,     /* a batched call's attention places every sequence's
                                        queries at the last sequence's position (per-sequence
                                        positions mixed up; forward.c attn_block) */
    LM_DEFECT_TP_RING_SKIPS_LAST,    /* the ring all-reduce of a row-parallel product drops its
                                        last hop: one shard's partial sums missing from every
                                        chunk (tensor_parallel.c) */
    LM_DEFECT_TP_ROWS_MISALIGNED,    /* row-parallel shards between the first and the last read
                                        their weight columns one column late (a mis-sharded
                                        checkpoint; tensor_parallel.c) */
    LM_DEFECT_TP_COLS_SHIFTED,       /* the last column-parallel shard's weight rows start one
                                        row early (a head slice off by one; tensor_parallel.c) */
    LM_DEFECT_COUNT
} lm_defect;

#ifdef LM_TEST_HOOKS
/* Switches defect d on for every context (LM_DEFECT_NONE: off). */
void lm_test_set_defect(lm_defect d);
/* Contexts on backends whose name starts with prefix stay correct (NULL or "": none spared).
 * The string is copied. */
void lm_test_spare_backend(const char *prefix);
/* Whether defect d applies to a context on backend `backend` (its lm_backend_i name). */
bool lm_test_defect_on(const char *backend, lm_defect d);
/* "none", "rope-pos-after-chunk", ...; NULL past the end. */
const char *lm_defect_name(lm_defect d);
#define LM_DEFECT_ON(backend, d) lm_test_defect_on((backend), (d))
/* The OpenBLAS core name the blas backend's kernels hook and platform word report instead of
 * openblas_get_corename()'s (NULL: the real one), so that a test shows the warning of an old
 * core on any machine without touching OPENBLAS_CORETYPE. The golden-key form keeps the real
 * name. The string is not copied. */
void lm_test_blas_core(const char *core);
#else
#define LM_DEFECT_ON(backend, d) 0
#endif

#endif
