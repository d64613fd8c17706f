/* mem_check.c — memory predicted before loading (mem_check.h). */
#include "plan/mem_check.h"

#include "kvd_engine.h"
#include "kvd_ref.h"
#include "ref_model.h"

#include <stdio.h>
#include <string.h>

uint32_t hx_mem_tokens_bound(const char *text, const char *tok_s)
{
    if (text != NULL) {
        const size_t n = strlen(text);
        return n > UINT32_MAX - 2 ? UINT32_MAX : (uint32_t)n + 2;
    }
    if (tok_s == NULL)
        return 0;
    uint32_t n = 1;
    for (const char *c = tok_s; *c; ++c)
        n += *c == ',';
    return n;
}

static double gib(uint64_t b)
{
    return (double)b / 1073741824.0;
}

static uint64_t sat_add(uint64_t a, uint64_t b)
{
    return a > UINT64_MAX - b ? UINT64_MAX : a + b;
}

int hx_mem_check(uint64_t *needed, const char *path, const hx_mem_need *need, uint64_t available,
                 lm_err *err)
{
    lm_mem_plan mp;
    int rc = lm_model_mem_plan(&mp, path, 1, err);
    if (rc != LM_OK)
        return rc;
    /* a context past the trained one is refused by the command itself, with its reason */
    const uint32_t n_ctx = mp.hp.n_ctx_train && need->n_ctx > mp.hp.n_ctx_train
                               ? mp.hp.n_ctx_train : need->n_ctx;
    mp.kv = mp.scratch = 0;
    if (n_ctx > 0) {
        lm_ctx_predict_bytes(&mp.kv, &mp.scratch, &mp.hp, n_ctx);
        mp.scratch = sat_add(mp.scratch, mp.tiles);
    }
    uint64_t ref = 0;
    const uint32_t ref_tokens = mp.hp.n_ctx_train && need->ref_tokens > mp.hp.n_ctx_train
                                    ? mp.hp.n_ctx_train : need->ref_tokens;
    if (ref_tokens > 0) {
        /* the reference's estimate reads the hyperparameters only */
        ref_model hollow = {.hp = {.n_embd = mp.hp.n_embd, .n_layer = mp.hp.n_layer,
                                   .n_head = mp.hp.n_head, .n_head_kv = mp.hp.n_head_kv,
                                   .head_dim = mp.hp.head_dim, .n_ff = mp.hp.n_ff,
                                   .n_rot = mp.hp.n_rot, .n_vocab = mp.hp.n_vocab,
                                   .n_expert = mp.hp.n_expert,
                                   .n_expert_used = mp.hp.n_expert_used,
                                   .n_ff_exp = mp.hp.n_ff_exp}};
        const ref_request rq = {.n_tokens = ref_tokens, .n_prompt = ref_tokens,
                                .prec = need->ref_prec};
        ref = ref_memory_estimate(&hollow, &rq);
    }
    /* the engine's arena, and the reference's own float32 view of every weight */
    const uint64_t weights = need->ref_view ? sat_add(mp.weights, mp.f32) : mp.weights;
    const uint64_t total = sat_add(sat_add(sat_add(mp.file, weights), sat_add(mp.kv,
                                                                              mp.scratch)),
                                   ref);
    if (needed != NULL)
        *needed = total;
    if (available == 0)
        available = lm_mem_available();
    if (total <= available)
        return LM_OK;
    char ref_view[64] = "";
    if (need->ref_view)
        snprintf(ref_view, sizeof ref_view, " + the reference's float32 weights %.1f",
                 gib(mp.f32));
    return LM_FAIL(err, LM_E_NOMEM, "%s: needs %.1f GiB (file %.1f + float32 weights %.1f%s + "
                   "KV cache %.2f + scratch %.2f + reference %.2f), %.1f GiB available", path,
                   gib(total), gib(mp.file), gib(mp.weights), ref_view, gib(mp.kv),
                   gib(mp.scratch), gib(ref), gib(available));
}
