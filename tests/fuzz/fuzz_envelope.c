/* fuzz_envelope.c — libFuzzer target for envelope cache entries (.kvdenv). The expected key is
 * taken from the input itself (bytes 12..27) and the last 16 bytes are replaced by the XXH3-128
 * of the rest, so the fuzzer reaches the size and field checks behind the key and checksum.
 * Any crash, sanitizer report or leak is a finding. */
#include "judge/envelope.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t key[16] = {0};
    if (size >= 28)
        memcpy(key, data + 12, 16);
    uint8_t *fixed = fz_with_xxh3_trailer(data, size);
    const char *path = fz_scratch(fixed ? fixed : data, size, ".kvdenv");
    free(fixed);
    hx_envelope *e = NULL;
    lm_err err = {0};
    if (hx_envelope_load(&e, path, key, &err) == LM_OK) {
        (void)hx_envelope_complete(e);
        hx_envelope_free(e);
    }
    return 0;
}
