/* mem_check.h — the memory a command will hold, predicted before its model is loaded, against
 * the memory available: a model that cannot fit is refused with one line naming the figures
 * rather than loaded until the machine kills the process. */
#ifndef HX_MEM_CHECK_H
#define HX_MEM_CHECK_H

#include "kvd_common.h"

#include <stdbool.h>
#include <stdint.h>

typedef struct hx_mem_need {
    uint32_t n_ctx;      /* positions of the engine context the command creates (0: none) */
    uint32_t ref_tokens; /* tokens of the reference pass the command may run (0: none) */
    uint32_t ref_prec;   /* its precision in bits (0: the reference's default) */
    bool ref_view;       /* the reference's own view of the model is opened too (ref_model:
                            its own float32 copy of the weights, the engine arena's size) */
} hx_mem_need;

/* Tokens a prompt can have at most before the model's tokenizer is loaded: one per byte of
 * text plus BOS and a leading space piece, or the count of ids in tok_s ("1,2,3"); 0 when
 * both are NULL. */
uint32_t hx_mem_tokens_bound(const char *text, const char *tok_s);

/* Predicts file + float32 weights + KV cache + scratch (lm_model_mem_plan, lm_ctx_predict_bytes)
 * + the reference's working set (ref_memory_estimate) for path and need (positions and tokens
 * past the trained context counted up to it: the command refuses more itself), and compares it with available (0:
 * lm_mem_available()). LM_E_NOMEM, one line: "PATH: needs X GiB (file A + float32 weights B +
 * KV cache C + scratch D + reference E), Y GiB available", the weights counted twice
 * when need->ref_view; the file's own errors as
 * lm_model_load gives them. *needed (may be NULL): the prediction in bytes. */
int hx_mem_check(uint64_t *needed, const char *path, const hx_mem_need *need, uint64_t available,
                 lm_err *err);

#endif
