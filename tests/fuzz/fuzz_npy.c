/* fuzz_npy.c — libFuzzer target for the strict .npy reader: parses the input bytes as a whole
 * .npy file (the in-memory entry point) and, when it is accepted, reads every element through
 * the conversion (which must stay inside the buffer the header promised). Any crash,
 * sanitizer report or leak is a finding. Build and run: make fuzz FUZZ=npy (FUZZ_SECONDS). */
#include "fuzz_util.h"
#include "npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    hx_npy a;
    lm_err err = {0};
    if (hx_npy_parse(&a, data, size, "fuzz.npy", &err) != LM_OK)
        return 0;
    volatile float sink = 0.0f;
    for (uint64_t i = 0; i < a.n_elems; ++i)
        sink += hx_npy_get_f32(&a, i);
    (void)sink;
    return 0;
}
