/* fuzz_gguf.c — libFuzzer target for the GGUF reader and what is loaded from it: parses the
 * input bytes as a GGUF image (the in-memory entry point), reads every metadata value through
 * the typed getters, dequantizes every tensor, loads the vocabulary, then loads the same bytes
 * as a model through the file path (lm_model_load: hyperparameters, architecture table, tensor
 * shapes, vocabulary). Any crash, sanitizer report or leak is a finding. */
#include "fuzz_util.h"
#include "gguf_internal.h"
#include "kvd_model.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    lm_gguf *g = NULL;
    lm_err err = {0};
    if (lm_gguf_open_memory(&g, "fuzz.gguf", data, size, &err) != LM_OK)
        return 0;
    for (uint64_t i = 0; i < lm_gguf_n_kv(g); ++i) {
        const char *key = lm_gguf_key(g, i);
        uint32_t u;
        int32_t s;
        float f;
        bool b;
        const char *str;
        const lm_gguf_arr *a;
        lm_err e = {0};
        (void)lm_gguf_get_u32(g, key, 0, &u, &e);
        (void)lm_gguf_get_i32(g, key, 0, &s, &e);
        (void)lm_gguf_get_f32(g, key, 0.0f, &f, &e);
        (void)lm_gguf_get_bool(g, key, false, &b, &e);
        (void)lm_gguf_get_str(g, key, NULL, &str, &e);
        if (lm_gguf_get_arr(g, key, -1, &a, &e) == LM_OK && a != NULL && a->type == LM_GGUF_STR
            && a->n > 0) {
            const lm_gguf_str *ss = a->data;
            volatile char last = ss[a->n - 1].ptr[ss[a->n - 1].len];
            (void)last;
        }
    }
    for (uint64_t i = 0; i < lm_gguf_n_tensors(g); ++i) {
        const lm_gguf_tensor *t = lm_gguf_tensor_at(g, i);
        if (t->n_elem > (UINT64_C(1) << 24))
            continue; /* validated already; skip huge allocations in the fuzzer */
        float *out = malloc((size_t)t->n_elem * sizeof *out);
        if (out != NULL) {
            lm_err e = {0};
            (void)lm_gguf_tensor_to_f32(out, t, &e);
            free(out);
        }
        (void)lm_gguf_tensor_find(g, t->name);
    }
    lm_vocab *v = NULL;
    lm_err ve = {0};
    if (lm_vocab_load(&v, g, &ve) == LM_OK)
        lm_vocab_free(v);
    lm_gguf_close(g);
    lm_model *m = NULL;
    lm_err me = {0};
    if (lm_model_load(&m, fz_scratch(data, size, ".gguf"), &me) == LM_OK)
        lm_model_free(m);
    return 0;
}
