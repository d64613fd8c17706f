/* fuzz_refcap.c — libFuzzer target for reference capture files (.kvdref). The input's last 16
 * bytes are replaced by the XXH3-128 of the rest before reading, so the fuzzer reaches the
 * header and size checks behind the checksum (unmodified inputs only ever test the hash).
 * Any crash, sanitizer report or leak is a finding. */
#include "fuzz_util.h"
#include "kvd_ref.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *fixed = fz_with_xxh3_trailer(data, size);
    const char *path = fz_scratch(fixed ? fixed : data, size, ".kvdref");
    free(fixed);
    ref_capture c;
    lm_err err = {0};
    if (ref_capture_read(&c, path, &err) == LM_OK) {
        for (uint32_t i = 0; i < c.n_pos; ++i) {
            volatile double x = ref_capture_logits(&c, i)[c.n_vocab - 1];
            (void)x;
            (void)ref_capture_find_pos(&c, c.pos[i]);
        }
        for (uint32_t l = 0; l < c.n_layer; ++l) {
            uint64_t per = (uint64_t)c.n_prompt * c.n_kv_head * c.head_dim;
            volatile double k = ref_capture_k(&c, l)[per - 1], v = ref_capture_v(&c, l)[per - 1];
            (void)k;
            (void)v;
        }
        for (uint32_t i = 0; i <= c.n_layer; ++i) {
            volatile double h = ref_capture_hidden(&c, i)[(uint64_t)c.n_prompt * c.n_embd - 1];
            (void)h;
        }
        ref_capture_free(&c);
    }
    return 0;
}
