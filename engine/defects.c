/* defects.c — the test-only defect switch of kvd_defects.h (empty in the release build). */
#include "kvd_defects.h"

#ifdef LM_TEST_HOOKS

#include <stdio.h>
#include <string.h>

static lm_defect active = LM_DEFECT_NONE;
static char spared[32]; /* backend-name prefix that never carries the defect; "" = none */

static const char *const names[LM_DEFECT_COUNT] = {
    [LM_DEFECT_NONE] = "none",
    [LM_DEFECT_ROPE_POS_AFTER_CHUNK] = "rope-pos-after-chunk",
    [LM_DEFECT_MASK_NEXT_TOKEN] = "mask-next-token",
    [LM_DEFECT_KV_SLOT_AT_BOUNDARY] = "kv-slot-at-boundary",
    [LM_DEFECT_ATTN_NO_SCALE] = "attn-no-scale",
    [LM_DEFECT_RMS_EPS_10X] = "rms-eps-10x",
    [LM_DEFECT_SOFTMAX_NO_MAX] = "softmax-no-max",
    [LM_DEFECT_GQA_INTERLEAVED] = "gqa-interleaved",
    [LM_DEFECT_LOGITS_UNNORMED] = "logits-unnormed",
    [LM_DEFECT_HIST_DOUBLE_NEWEST] = "hist-double-newest",
    [LM_DEFECT_HIST_NO_PROMPT] = "hist-no-prompt",
    [LM_DEFECT_ROLLBACK_KEEPS_ONE] = "rollback-keeps-one",
    [LM_DEFECT_ROT_CONCAT_SLOT_ORDER] = "rot-concat-slot-order",
    [LM_DEFECT_KV_F16] = "kv-f16",
    [LM_DEFECT_F16_SUBNORMAL] = "f16-subnormal",
    [LM_DEFECT_THREAD_SPLIT_SKIPS_ROW] = "thread-split-skips-row",
    [LM_DEFECT_STREAM_TILE_SKIPS_KEY] = "stream-tile-skips-key",
    [LM_DEFECT_PREFIX_LAST_ROW_STALE] = "prefix-last-row-stale",
    [LM_DEFECT_PREFIX_ROWS_SHIFTED] = "prefix-rows-shifted",
    [LM_DEFECT_PREFIX_V_NEXT_LAYER] = "prefix-v-next-layer",
    [LM_DEFECT_BATCH_KV_NEXT_ROWS] = "batch-kv-next-rows",
    [LM_DEFECT_BATCH_LOGITS_LAST_ROW] = "batch-logits-last-row",
    [LM_DEFECT_BATCH_POS_OF_LAST] = "batch-pos-of-last",
    [LM_DEFECT_TP_RING_SKIPS_LAST] = "tp-ring-skips-last",
    [LM_DEFECT_TP_ROWS_MISALIGNED] = "tp-rows-misaligned",
    [LM_DEFECT_TP_COLS_SHIFTED] = "tp-cols-shifted",
};

void lm_test_set_defect(lm_defect d)
{
    active = (unsigned)d < LM_DEFECT_COUNT ? d : LM_DEFECT_NONE;
}

void lm_test_spare_backend(const char *prefix)
{
    snprintf(spared, sizeof spared, "%s", prefix ? prefix : "");
}

bool lm_test_defect_on(const char *backend, lm_defect d)
{
    if (active != d || d == LM_DEFECT_NONE)
        return false;
    return spared[0] == '\0' || backend == NULL || strncmp(backend, spared, strlen(spared)) != 0;
}

const char *lm_defect_name(lm_defect d)
{
    return (unsigned)d < LM_DEFECT_COUNT ? names[d] : NULL;
}

#else
/* ISO C needs at least one declaration in a translation unit. */
typedef int lm_defects_release_build;
#endif
