/* fuzz_blocks.c — libFuzzer target for the quantized block readers: the first input byte picks a
 * loadable block type, the rest is read as whole blocks of it (as they lie in a mapped file),
 * decoded in one call and again block by block (the two must agree bit for bit: the loader
 * decodes a tensor whole, other readers a block range), and checked by lm_blocks_first_bad,
 * whose answer is verified: every block before the one it names decodes to finite values
 * (and, for MXFP4, has no 0xFF scale byte), and the named block does not. Any crash,
 * sanitizer report or broken property is a finding. make fuzz FUZZ=blocks. */
#include "fuzz_util.h"
#include "kvd_dequant.h"

#include <math.h>

static bool block_ok(lm_tensor_type type, const uint8_t *src, const float *x, uint32_t n)
{
    if (type == LM_TYPE_MXFP4 && src[0] == 0xFF)
        return false;
    for (uint32_t i = 0; i < n; ++i)
        if (!isfinite(x[i]))
            return false;
    return true;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    /* the quantized types kvdrift loads, in ggml numbering order */
    lm_tensor_type types[64];
    size_t n_types = 0;
    for (uint32_t t = 0; t < 64; ++t) {
        const lm_type_geom *tr = lm_type_geom_of(t);
        if (tr != NULL && lm_type_to_f32(t) != NULL && tr->block_elems > 1)
            types[n_types++] = (lm_tensor_type)t;
    }
    const lm_tensor_type type = types[data[0] % n_types];
    const lm_type_geom *tr = lm_type_geom_of(type);
    const lm_to_f32_fn to_f32 = lm_type_to_f32(type);
    const uint8_t *src = data + 1;
    const uint64_t nb = (size - 1) / tr->block_bytes;
    if (nb == 0)
        return 0;
    float *whole = malloc(nb * tr->block_elems * sizeof *whole);
    float *one = malloc(tr->block_elems * sizeof *one);
    if (whole == NULL || one == NULL)
        abort();
    to_f32(src, whole, nb);
    for (uint64_t b = 0; b < nb; ++b) {
        to_f32(src + b * tr->block_bytes, one, 1);
        if (memcmp(one, whole + b * tr->block_elems, tr->block_elems * sizeof *one) != 0)
            abort();
    }
    const uint64_t bad = lm_blocks_first_bad(type, src, whole, nb);
    if (bad > nb)
        abort();
    for (uint64_t b = 0; b < bad; ++b)
        if (!block_ok(type, src + b * tr->block_bytes, whole + b * tr->block_elems,
                      tr->block_elems))
            abort();
    if (bad < nb && block_ok(type, src + bad * tr->block_bytes, whole + bad * tr->block_elems,
                             tr->block_elems))
        abort();
    free(whole);
    free(one);
    return 0;
}
